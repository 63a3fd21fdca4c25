//! Printing what was read: the report's model ([`rows::Report`], made of [`row::Row`]s,
//! each table's [`headline`], the failures, the Webdis split, the proxy's own cost and
//! the inside of the upstream), its formats ([`table`]: text, markdown, JSON, CSV; [`svg`]
//! with [`svg_inside`]), the findings' lines, and a comparison's table
//! ([`compare_table`]). Renderers read a [`crate::report::source::dataset::Dataset`] or a
//! [`crate::report::compare::Comparison`]; nothing below them imports them.

pub mod backend_split;
pub mod compare_table;
pub mod coverage;
pub mod failures;
pub mod findings;
pub mod headline;
pub mod inside;
pub mod own;
pub mod row;
pub mod rows;
pub mod svg;
mod svg_inside;
pub mod table;
