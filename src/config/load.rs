//! Reading config text into a [`Config`], keeping the spans for error positions.

use std::path::Path;

use serde::Deserialize;
use toml::de::DeTable;

use super::error::{ConfigError, Location};
use super::locate::{FileSpans, Origins};
use super::{validate, Config};

/// The shipped `config.toml`, built in so that running without a config file behaves
/// exactly as running with the documented default (one source of truth).
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../config.toml");

/// The name the built-in config goes by in error messages.
pub const BUILTIN_ORIGIN: &str = "<built-in config.toml>";

/// A parsed, not yet validated config and where its keys are in the text.
pub(crate) struct Parsed<'a> {
    pub(crate) config: Config,
    pub(crate) spans: FileSpans<'a>,
}

/// Parses `text` (read from `origin`) into a `Config` without checking the cross-value
/// rules, so that overrides can still complete it (a file without taps plus `--listen`).
pub(crate) fn parse<'a>(text: &'a str, origin: &Path) -> Result<Parsed<'a>, ConfigError> {
    let root = DeTable::parse(text).map_err(|e| toml_error(&e, text, origin))?;
    let spans = FileSpans::new(origin, text, root.clone());
    let config = Config::deserialize(toml::de::Deserializer::from(root))
        .map_err(|e| toml_error(&e, text, origin))?;
    Ok(Parsed { config, spans })
}

fn toml_error(e: &toml::de::Error, text: &str, origin: &Path) -> ConfigError {
    let location = match e.span() {
        Some(span) => {
            let (line, column) = super::error::line_col(text, span.start);
            Location::File {
                path: origin.to_owned(),
                line,
                column,
            }
        }
        None => Location::Path(origin.to_owned()),
    };
    ConfigError::new(location, one_line(e.message()))
}

/// toml's messages can span lines; an error here is one line a terminal or editor can use.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Config {
    /// Parses and validates config text; `origin` names it in errors (`FILE:LINE:COL: ...`).
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let parsed = parse(text, origin)?;
        let origins = Origins {
            file: Some(parsed.spans),
            overridden: Vec::new(),
        };
        validate::check(&parsed.config).map_err(|p| p.into_error(&origins))?;
        Ok(parsed.config)
    }

    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read(path)?;
        Self::from_toml_str(&text, path)
    }

    /// The built-in default: the shipped `config.toml`.
    pub fn builtin() -> Result<Config, ConfigError> {
        Self::from_toml_str(DEFAULT_CONFIG_TOML, Path::new(BUILTIN_ORIGIN))
    }

    /// Checks the rules of a config built or changed in code. Errors carry no file position;
    /// their sentences name the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::check(self).map_err(|p| p.into_error(&Origins::default()))
    }
}

/// The largest config file read, in bytes: a config is a few kilobytes; this leaves room
/// for hundreds of routes and taps and keeps a wrong path (`/dev/zero`, a disk image)
/// from being read without end.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a config file: a regular file (also behind a symlink) of at most
/// [`MAX_CONFIG_BYTES`]; a device, a FIFO or a directory is refused before a byte is read.
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let error = |what: String| ConfigError::new(Location::Path(path.to_owned()), what);
    let file = std::fs::File::open(path)
        .map_err(|e| error(format!("cannot read the config file: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| error(format!("cannot read the config file: {e}")))?;
    if !meta.is_file() {
        return Err(error(
            "cannot read the config file: not a regular file (a device, a FIFO or a directory)"
                .to_owned(),
        ));
    }
    let mut text = String::new();
    // The size can change under us: read at most one byte past the cap to tell.
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| error(format!("cannot read the config file: {e}")))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(error(format!(
            "cannot read the config file: larger than {} KiB, the most a config may be",
            MAX_CONFIG_BYTES / 1024
        )));
    }
    Ok(text)
}
