//! RESP framing: where Redis protocol messages begin and end, and what command a request
//! carries.
//!
//! A RESP tap relays bytes unchanged; it needs only the boundaries of each command and
//! reply (to time them and pair them), the type of each reply (errors, pushes), and the
//! command name (the route label and mode switches). This module finds those in the
//! bytes where they lie, without copying or allocating:
//!
//! - [`Scanner`]: resumable framing of RESP2 and RESP3 (replies) and of client commands
//!   (multibulk or inline), bounded by [`Limits`].
//! - [`command`]: a borrowed [`Command`] view of one complete request: name, arguments,
//!   [`Command::mode_switch`] and [`Command::blocking`]; [`command_name`] for a request
//!   still arriving.
//! - [`known_command`]: the bounded table of Redis command names for route labels.
//!
//! docs/resp.md explains the scanner's design.

mod blocking;
mod command;
mod error;
mod kind;
mod limits;
mod mode;
mod names;
mod scanner;

pub use blocking::Blocking;
pub use command::{command, command_name, Args, Command};
pub use error::RespError;
pub use kind::Kind;
pub use limits::{Limits, MAX_DEPTH};
pub use mode::{Channels, ModeSwitch, ReplyMode};
pub use names::{command_names, known_command};
pub use scanner::Scanner;
