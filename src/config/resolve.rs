//! Assembling the config `run` uses: pick the file, parse it, lay flags and environment
//! over it, validate once at the end.
//!
//! Validation waits for the overrides because they can complete a config (a file without
//! taps plus `--listen/--upstream`) or break one (`--listen` onto the admin address); an
//! error then points at the file position or at the flag or variable, whichever set the
//! offending value.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::load::{self, BUILTIN_ORIGIN, DEFAULT_CONFIG_TOML};
use super::locate::Origins;
use super::overrides::{apply_unchecked, config_path_from_env, Overrides};
use super::{validate, Config};

/// The file used when neither `--config` nor `PHASESCOPE_CONFIG` names one.
pub const DEFAULT_CONFIG_PATH: &str = "config.toml";

/// Where the file part of a config came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOrigin {
    File(PathBuf),
    /// No file was named and `./config.toml` does not exist: the embedded default.
    Builtin,
}

impl fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigOrigin::File(p) => write!(f, "{}", p.display()),
            ConfigOrigin::Builtin => f.write_str(BUILTIN_ORIGIN),
        }
    }
}

/// Which config file to read: `--config`, else `PHASESCOPE_CONFIG`, else `./config.toml`
/// if it exists, else the built-in default.
pub fn choose_origin(config_flag: Option<&Path>, env_config: Option<PathBuf>) -> ConfigOrigin {
    if let Some(path) = config_flag {
        return ConfigOrigin::File(path.to_owned());
    }
    if let Some(path) = env_config {
        return ConfigOrigin::File(path);
    }
    let default = Path::new(DEFAULT_CONFIG_PATH);
    if default.is_file() {
        ConfigOrigin::File(default.to_owned())
    } else {
        ConfigOrigin::Builtin
    }
}

/// The built-in config's tap is the Webdis one (its route rule reads Webdis URLs). Given
/// another upstream and a listen address, without a file, the user is in front of some
/// other server: the built-in tap is dropped so that, as for a file without taps, a tap
/// named `default` with route rule `none` is made from them (docs/config.md). With only
/// one of the two the built-in tap stays and takes it.
fn builtin_for(config: &mut Config, overrides: &Overrides) {
    if overrides.listen.is_some() && overrides.upstream.is_some() {
        config.taps.clear();
    }
}

impl Config {
    /// The config `phasescope run` uses: the chosen file (see [`choose_origin`]), then
    /// `flags`, then the `PHASESCOPE_*` variables among `env` (pass `std::env::vars_os()`),
    /// validated.
    pub fn resolve<I, K, V>(
        config_flag: Option<&Path>,
        flags: Overrides,
        env: I,
    ) -> Result<(Config, ConfigOrigin), ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let env: Vec<(K, V)> = env.into_iter().collect();
        let env_overrides = Overrides::from_env(env.iter().map(|(k, v)| (k, v)))?;
        let origin = choose_origin(
            config_flag,
            config_path_from_env(env.iter().map(|(k, v)| (k, v))),
        );
        let text = match &origin {
            ConfigOrigin::File(path) => std::borrow::Cow::Owned(load::read(path)?),
            ConfigOrigin::Builtin => std::borrow::Cow::Borrowed(DEFAULT_CONFIG_TOML),
        };
        let origin_path = match &origin {
            ConfigOrigin::File(path) => path.clone(),
            ConfigOrigin::Builtin => PathBuf::from(BUILTIN_ORIGIN),
        };
        let parsed = load::parse(&text, &origin_path)?;
        let mut config = parsed.config;
        let overrides = env_overrides.over(flags);
        if origin == ConfigOrigin::Builtin {
            builtin_for(&mut config, &overrides);
        }
        let overridden = apply_unchecked(&mut config, &overrides)?;
        let origins = Origins {
            file: Some(parsed.spans),
            overridden,
        };
        validate::check(&config).map_err(|p| p.into_error(&origins))?;
        Ok((config, origin))
    }
}
