//! The one error type of configuration: where the bad value came from, and a sentence.
//!
//! A person fixing a config wants to jump to the spot, so every error carries the place
//! the value was set — a position in a file, a flag, or an environment variable — and its
//! `Display` starts with it (`FILE:LINE:COL: ...`, as compilers print it, so editors and
//! terminals can link to it).

use std::fmt;
use std::path::PathBuf;

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A position in a config file; line and column count from 1, columns in characters.
    File {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    /// A config file as a whole (it could not be read).
    Path(PathBuf),
    /// A command-line flag or an environment variable.
    Override(Source),
    /// A value built in code, not read from anywhere.
    Unknown,
}

/// The override a value came from, named as the user typed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A flag, with its dashes: `--listen`.
    Flag(&'static str),
    /// An environment variable: `PHASESCOPE_LISTEN`.
    Env(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(name) | Source::Env(name) => f.write_str(name),
        }
    }
}

/// A configuration that cannot run: a read, parse, type or validation failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub location: Location,
    /// One sentence, without the location.
    pub message: String,
}

impl ConfigError {
    pub fn new(location: Location, message: impl Into<String>) -> Self {
        Self {
            location,
            message: message.into(),
        }
    }

    /// The line of a file position, if the error has one.
    pub fn line(&self) -> Option<usize> {
        match self.location {
            Location::File { line, .. } => Some(line),
            _ => None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Location::File { path, line, column } => {
                write!(f, "{}:{line}:{column}: ", path.display())?
            }
            Location::Path(path) => write!(f, "{}: ", path.display())?,
            Location::Override(source) => write!(f, "{source}: ")?,
            Location::Unknown => f.write_str("config: ")?,
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Line and column (both from 1, the column in characters) of a byte offset in `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one_in_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        // `=` on line 2 is the 4th character but the 5th byte of the line.
        let eq = text.rfind('=').unwrap();
        assert_eq!(line_col(text, eq), (2, 4));
        assert_eq!(line_col(text, 10_000), (3, 1));
    }

    #[test]
    fn display_starts_with_the_location() {
        let e = ConfigError::new(
            Location::File {
                path: "c.toml".into(),
                line: 3,
                column: 7,
            },
            "bad thing",
        );
        assert_eq!(e.to_string(), "c.toml:3:7: bad thing");
        let e = ConfigError::new(Location::Override(Source::Env("PHASESCOPE_LISTEN")), "x");
        assert_eq!(e.to_string(), "PHASESCOPE_LISTEN: x");
        let e = ConfigError::new(Location::Override(Source::Flag("--listen")), "x");
        assert_eq!(e.to_string(), "--listen: x");
    }
}
