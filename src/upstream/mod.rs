//! Inside the upstream process: where its CPU goes.

pub mod profile;
