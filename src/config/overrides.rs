//! Command-line flags and `PHASESCOPE_*` variables laid over the file.
//!
//! Precedence is environment > flags > file: a deployment (a unit file, a container) can
//! pin a value whatever command line a script passes. Flags and variables go through the
//! same parsing here, so a bad value gets the same sentence whichever way it came, naming
//! the flag or variable the user wrote.

use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::error::{ConfigError, Location, Source};
use super::locate::{Origins, Seg};
use super::{validate, Config, LogFormat, Protocol, TapConfig};

/// The name of the tap created when the config has none but `--listen` and `--upstream`
/// are given.
pub const DEFAULT_TAP_NAME: &str = "default";

/// The variable that names the config file (read by [`Config::resolve`], not an override).
pub const ENV_CONFIG: &str = "PHASESCOPE_CONFIG";

/// A value that overrides the config, and who set it.
#[derive(Debug, Clone, PartialEq)]
pub struct Override<T> {
    pub value: T,
    pub source: Source,
}

/// The overridable settings. `--listen`, `--upstream` and `--protocol` apply to the first
/// tap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub listen: Option<Override<SocketAddr>>,
    pub upstream: Option<Override<String>>,
    pub protocol: Option<Override<Protocol>>,
    pub admin: Option<Override<SocketAddr>>,
    pub log_format: Option<Override<LogFormat>>,
    pub access_log: Option<Override<PathBuf>>,
    pub slow_log: Option<Override<PathBuf>>,
    pub slow_threshold: Option<Override<Duration>>,
    /// `true` disables metrics; `false` (only from the variable) enables them.
    pub no_metrics: Option<Override<bool>>,
    pub admin_token: Option<Override<String>>,
    /// `true` turns on `[tap.process] profile` for every tap.
    pub profile_upstream: Option<Override<bool>>,
    /// `[tap.process] stack_bytes` for every tap.
    pub stack_bytes: Option<Override<u32>>,
    /// `[tap.process] sample_budget` for every tap.
    pub sample_budget: Option<Override<u32>>,
}

/// One overridable setting, with its flag and variable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Listen,
    Upstream,
    Protocol,
    Admin,
    LogFormat,
    AccessLog,
    SlowLog,
    SlowThreshold,
    NoMetrics,
    AdminToken,
    ProfileUpstream,
    StackBytes,
    SampleBudget,
}

impl Key {
    pub const ALL: [Key; 13] = [
        Key::Listen,
        Key::Upstream,
        Key::Protocol,
        Key::Admin,
        Key::LogFormat,
        Key::AccessLog,
        Key::SlowLog,
        Key::SlowThreshold,
        Key::NoMetrics,
        Key::AdminToken,
        Key::ProfileUpstream,
        Key::StackBytes,
        Key::SampleBudget,
    ];

    pub fn flag(self) -> &'static str {
        match self {
            Key::Listen => "--listen",
            Key::Upstream => "--upstream",
            Key::Protocol => "--protocol",
            Key::Admin => "--admin",
            Key::LogFormat => "--log-format",
            Key::AccessLog => "--access-log",
            Key::SlowLog => "--slow-log",
            Key::SlowThreshold => "--slow-threshold",
            Key::NoMetrics => "--no-metrics",
            Key::AdminToken => "--admin-token",
            Key::ProfileUpstream => "--profile-upstream",
            Key::StackBytes => "--stack-bytes",
            Key::SampleBudget => "--sample-budget",
        }
    }

    pub fn env(self) -> &'static str {
        match self {
            Key::Listen => "PHASESCOPE_LISTEN",
            Key::Upstream => "PHASESCOPE_UPSTREAM",
            Key::Protocol => "PHASESCOPE_PROTOCOL",
            Key::Admin => "PHASESCOPE_ADMIN",
            Key::LogFormat => "PHASESCOPE_LOG_FORMAT",
            Key::AccessLog => "PHASESCOPE_ACCESS_LOG",
            Key::SlowLog => "PHASESCOPE_SLOW_LOG",
            Key::SlowThreshold => "PHASESCOPE_SLOW_THRESHOLD",
            Key::NoMetrics => "PHASESCOPE_NO_METRICS",
            Key::AdminToken => "PHASESCOPE_ADMIN_TOKEN",
            Key::ProfileUpstream => "PHASESCOPE_PROFILE_UPSTREAM",
            Key::StackBytes => "PHASESCOPE_STACK_BYTES",
            Key::SampleBudget => "PHASESCOPE_SAMPLE_BUDGET",
        }
    }

    fn from_env_name(name: &OsStr) -> Option<Key> {
        Key::ALL.into_iter().find(|k| name == k.env())
    }
}

fn invalid(source: Source, message: String) -> ConfigError {
    ConfigError::new(Location::Override(source), message)
}

fn text(raw: &OsStr, source: Source) -> Result<&str, ConfigError> {
    raw.to_str()
        .ok_or_else(|| invalid(source, "the value is not valid UTF-8".to_owned()))
}

/// Parses a duration the way the config file does (`100ms`, `10s`, `1m 30s`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration such as \"100ms\" or \"10s\" ({e})"))
}

/// `1/true/yes/on` or `0/false/no/off`, any case.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean; use 1/true or 0/false")),
    }
}

/// A bearer token: visible ASCII without spaces, so it travels in a header as is.
fn parse_token(s: &str) -> Result<String, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the admin token must be non-empty visible ASCII without spaces".to_owned());
    }
    Ok(s.to_owned())
}

pub(super) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.trim().parse().map_err(|_| {
        format!("{s:?} is not an IP address and port such as \"127.0.0.1:8080\" or \"[::1]:8080\" (listen addresses are not resolved from host names)")
    })
}

impl Overrides {
    /// Sets `key` from its raw text, as given by `source`. A later set of the same key wins.
    pub fn set(&mut self, key: Key, raw: &OsStr, source: Source) -> Result<(), ConfigError> {
        fn wrap<T>(value: T, source: Source) -> Option<Override<T>> {
            Some(Override { value, source })
        }
        fn parsed<T>(
            raw: &OsStr,
            source: Source,
            parse: impl FnOnce(&str) -> Result<T, String>,
        ) -> Result<Option<Override<T>>, ConfigError> {
            let value = parse(text(raw, source)?).map_err(|m| invalid(source, m))?;
            Ok(wrap(value, source))
        }
        match key {
            Key::AccessLog => self.access_log = wrap(PathBuf::from(raw), source),
            Key::SlowLog => self.slow_log = wrap(PathBuf::from(raw), source),
            Key::Listen => self.listen = parsed(raw, source, parse_addr)?,
            Key::Admin => self.admin = parsed(raw, source, parse_addr)?,
            Key::Upstream => self.upstream = parsed(raw, source, |s| Ok(s.trim().to_owned()))?,
            Key::Protocol => self.protocol = parsed(raw, source, str::parse)?,
            Key::LogFormat => self.log_format = parsed(raw, source, str::parse)?,
            Key::SlowThreshold => self.slow_threshold = parsed(raw, source, parse_duration)?,
            Key::NoMetrics => self.no_metrics = parsed(raw, source, parse_bool)?,
            Key::AdminToken => self.admin_token = parsed(raw, source, parse_token)?,
            Key::ProfileUpstream => self.profile_upstream = parsed(raw, source, parse_bool)?,
            Key::StackBytes => {
                self.stack_bytes = parsed(raw, source, |s| {
                    s.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("{s:?} is not a number of bytes"))
                })?
            }
            Key::SampleBudget => {
                self.sample_budget = parsed(raw, source, |s| {
                    s.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("{s:?} is not a number of samples per second"))
                })?
            }
        }
        Ok(())
    }

    /// Sets `key` from a flag's text.
    pub fn set_flag(&mut self, key: Key, raw: impl AsRef<OsStr>) -> Result<(), ConfigError> {
        self.set(key, raw.as_ref(), Source::Flag(key.flag()))
    }

    /// The overrides found in environment variables. Takes the variables as pairs (pass
    /// `std::env::vars_os()`) so tests need not touch the process environment. Variables
    /// set to the empty string count as unset, as shells make `VAR=` easy to leave behind.
    pub fn from_env<I, K, V>(vars: I) -> Result<Overrides, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let mut overrides = Overrides::default();
        for (name, value) in vars {
            let value = value.as_ref();
            if value.is_empty() {
                continue;
            }
            if let Some(key) = Key::from_env_name(name.as_ref()) {
                overrides.set(key, value, Source::Env(key.env()))?;
            }
        }
        Ok(overrides)
    }

    /// These overrides laid over `lower`: each setting comes from `self` if present there.
    /// Environment over flags is `env.over(flags)`.
    pub fn over(self, lower: Overrides) -> Overrides {
        Overrides {
            listen: self.listen.or(lower.listen),
            upstream: self.upstream.or(lower.upstream),
            protocol: self.protocol.or(lower.protocol),
            admin: self.admin.or(lower.admin),
            log_format: self.log_format.or(lower.log_format),
            access_log: self.access_log.or(lower.access_log),
            slow_log: self.slow_log.or(lower.slow_log),
            slow_threshold: self.slow_threshold.or(lower.slow_threshold),
            no_metrics: self.no_metrics.or(lower.no_metrics),
            admin_token: self.admin_token.or(lower.admin_token),
            profile_upstream: self.profile_upstream.or(lower.profile_upstream),
            stack_bytes: self.stack_bytes.or(lower.stack_bytes),
            sample_budget: self.sample_budget.or(lower.sample_budget),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }
}

/// The `PHASESCOPE_CONFIG` value among `vars`, if set and not empty.
pub fn config_path_from_env<I, K, V>(vars: I) -> Option<PathBuf>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    vars.into_iter()
        .filter(|(k, v)| k.as_ref() == ENV_CONFIG && !v.as_ref().is_empty())
        .map(|(_, v)| PathBuf::from(OsString::from(v.as_ref())))
        .last()
}

fn tap0(key: &'static str) -> Vec<Seg> {
    vec![Seg::Key("tap"), Seg::Index(0), Seg::Key(key)]
}

/// Applies `o` to `config` and returns the key paths it set, for error positions.
pub(crate) fn apply_unchecked(
    config: &mut Config,
    o: &Overrides,
) -> Result<Vec<(Vec<Seg>, Source)>, ConfigError> {
    let mut set = Vec::new();
    if config.taps.is_empty() {
        match (&o.listen, &o.upstream) {
            (Some(listen), Some(upstream)) => {
                let protocol = o
                    .protocol
                    .as_ref()
                    .map_or(super::defaults::protocol(), |p| p.value);
                config.taps.push(TapConfig::new(
                    DEFAULT_TAP_NAME,
                    protocol,
                    listen.value,
                    &upstream.value,
                ));
                set.push((vec![Seg::Key("tap"), Seg::Index(0)], listen.source));
            }
            (Some(given), None) => {
                return Err(invalid(
                    given.source,
                    "the config has no tap, so a new one needs an upstream too (--upstream or PHASESCOPE_UPSTREAM)".to_owned(),
                ))
            }
            (None, Some(given)) => {
                return Err(invalid(
                    given.source,
                    "the config has no tap, so a new one needs a listen address too (--listen or PHASESCOPE_LISTEN)".to_owned(),
                ))
            }
            (None, None) => {}
        }
    }
    if let Some(tap) = config.taps.first_mut() {
        if let Some(v) = &o.listen {
            tap.listen = v.value;
            set.push((tap0("listen"), v.source));
        }
        if let Some(v) = &o.upstream {
            tap.upstream.clone_from(&v.value);
            set.push((tap0("upstream"), v.source));
        }
        if let Some(v) = &o.protocol {
            tap.protocol = v.value;
            set.push((tap0("protocol"), v.source));
        }
    } else if let Some(v) = &o.protocol {
        return Err(invalid(
            v.source,
            "the config has no tap to set the protocol of".to_owned(),
        ));
    }
    if let Some(v) = &o.admin {
        config.admin.listen = v.value;
        set.push((vec![Seg::Key("admin"), Seg::Key("listen")], v.source));
    }
    if let Some(v) = &o.admin_token {
        config.admin.token = Some(v.value.clone());
    }
    if let Some(v) = &o.log_format {
        config.log.format = v.value;
    }
    if let Some(v) = &o.access_log {
        config.log.access_log = Some(v.value.clone());
    }
    if let Some(v) = &o.slow_log {
        config.log.slow_log = Some(v.value.clone());
    }
    if let Some(v) = &o.slow_threshold {
        config.log.slow_threshold = v.value;
        set.push((vec![Seg::Key("log"), Seg::Key("slow_threshold")], v.source));
    }
    if let Some(v) = &o.no_metrics {
        config.metrics.enabled = !v.value;
    }
    if let Some(v) = &o.profile_upstream {
        for tap in &mut config.taps {
            tap.process.profile = super::Profile::from(v.value);
        }
    }
    if let Some(v) = &o.stack_bytes {
        every_tap(config, &mut set, "stack_bytes", v.source, |p| {
            p.stack_bytes = v.value
        });
    }
    if let Some(v) = &o.sample_budget {
        every_tap(config, &mut set, "sample_budget", v.source, |p| {
            p.sample_budget = v.value
        });
    }
    Ok(set)
}

/// Sets `[tap.process] KEY` of every tap through `set_it`, noting where each came from.
fn every_tap(
    config: &mut Config,
    set: &mut Vec<(Vec<Seg>, Source)>,
    key: &'static str,
    source: Source,
    set_it: impl Fn(&mut super::ProcessConfig),
) {
    for (i, tap) in config.taps.iter_mut().enumerate() {
        set_it(&mut tap.process);
        set.push((
            vec![
                Seg::Key("tap"),
                Seg::Index(i),
                Seg::Key("process"),
                Seg::Key(key),
            ],
            source,
        ));
    }
}

impl Config {
    /// Lays `overrides` over this config and validates the result. Errors caused by an
    /// override name the flag or variable.
    pub fn apply(&mut self, overrides: &Overrides) -> Result<(), ConfigError> {
        let overridden = apply_unchecked(self, overrides)?;
        let origins = Origins {
            file: None,
            overridden,
        };
        validate::check(self).map_err(|p| p.into_error(&origins))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Overrides, ConfigError> {
        Overrides::from_env(pairs.iter().copied())
    }

    #[test]
    fn env_values_are_parsed() {
        let o = env(&[
            ("PHASESCOPE_LISTEN", "127.0.0.1:1"),
            ("PHASESCOPE_UPSTREAM", "example:2"),
            ("PHASESCOPE_PROTOCOL", "resp"),
            ("PHASESCOPE_ADMIN", "127.0.0.1:3"),
            ("PHASESCOPE_LOG_FORMAT", "json"),
            ("PHASESCOPE_ACCESS_LOG", "-"),
            ("PHASESCOPE_SLOW_LOG", "/tmp/slow"),
            ("PHASESCOPE_SLOW_THRESHOLD", "250ms"),
            ("PHASESCOPE_NO_METRICS", "true"),
            ("HOME", "/root"),
        ])
        .unwrap();
        assert_eq!(o.listen.unwrap().value.port(), 1);
        assert_eq!(o.upstream.unwrap().value, "example:2");
        assert_eq!(o.protocol.unwrap().value, Protocol::Resp);
        assert_eq!(o.admin.unwrap().value.port(), 3);
        assert_eq!(o.log_format.unwrap().value, LogFormat::Json);
        assert_eq!(o.access_log.unwrap().value, PathBuf::from("-"));
        assert_eq!(o.slow_log.unwrap().value, PathBuf::from("/tmp/slow"));
        assert_eq!(o.slow_threshold.unwrap().value, Duration::from_millis(250));
        let nm = o.no_metrics.unwrap();
        assert!(nm.value);
        assert_eq!(nm.source, Source::Env("PHASESCOPE_NO_METRICS"));
    }

    #[test]
    fn the_sampling_settings_reach_every_tap_and_a_bad_budget_is_named() {
        let text = "[[tap]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\nupstream = \"127.0.0.1:2\"\n\
                    [[tap]]\nname = \"b\"\nlisten = \"127.0.0.1:3\"\nupstream = \"127.0.0.1:4\"\n";
        let mut config: Config = toml::from_str(text).unwrap();
        let mut o = env(&[("PHASESCOPE_SAMPLE_BUDGET", "0")]).unwrap();
        o.set_flag(Key::StackBytes, "8192").unwrap();
        config.apply(&o).unwrap();
        for tap in &config.taps {
            assert_eq!(tap.process.sample_budget, 0);
            assert_eq!(tap.process.stack_bytes, 8192);
        }
        let e = Overrides::default()
            .set_flag(Key::SampleBudget, "lots")
            .unwrap_err();
        assert!(e.to_string().starts_with("--sample-budget: "), "{e}");
    }

    #[test]
    fn empty_and_unrelated_variables_are_ignored() {
        let o = env(&[("PHASESCOPE_LISTEN", ""), ("PHASESCOPE_OTHER", "x")]).unwrap();
        assert!(o.is_empty());
    }

    #[test]
    fn a_bad_value_names_the_variable_or_flag() {
        let e = env(&[("PHASESCOPE_SLOW_THRESHOLD", "soon")]).unwrap_err();
        assert!(
            e.to_string().starts_with("PHASESCOPE_SLOW_THRESHOLD: "),
            "{e}"
        );
        let e = env(&[("PHASESCOPE_NO_METRICS", "maybe")]).unwrap_err();
        assert!(e.to_string().starts_with("PHASESCOPE_NO_METRICS: "), "{e}");
        let e = Overrides::default()
            .set_flag(Key::Protocol, "gopher")
            .unwrap_err();
        assert!(e.to_string().starts_with("--protocol: "), "{e}");
        let e = Overrides::default()
            .set_flag(Key::Listen, "localhost")
            .unwrap_err();
        assert!(e.to_string().starts_with("--listen: "), "{e}");
    }

    #[test]
    fn env_is_laid_over_flags() {
        let mut flags = Overrides::default();
        flags.set_flag(Key::Listen, "127.0.0.1:1").unwrap();
        flags.set_flag(Key::Admin, "127.0.0.1:2").unwrap();
        let env = env(&[("PHASESCOPE_LISTEN", "127.0.0.1:5")]).unwrap();
        let merged = env.over(flags);
        let listen = merged.listen.unwrap();
        assert_eq!(listen.value.port(), 5);
        assert_eq!(listen.source, Source::Env("PHASESCOPE_LISTEN"));
        assert_eq!(merged.admin.unwrap().source, Source::Flag("--admin"));
    }

    #[test]
    fn config_path_variable() {
        assert_eq!(
            config_path_from_env([("PHASESCOPE_CONFIG", "/etc/p.toml")]),
            Some(PathBuf::from("/etc/p.toml"))
        );
        assert_eq!(config_path_from_env([("PHASESCOPE_CONFIG", "")]), None);
        assert_eq!(config_path_from_env([("X", "y")]), None);
    }

    #[test]
    fn every_key_has_distinct_names() {
        for (i, a) in Key::ALL.iter().enumerate() {
            assert!(a.env().starts_with("PHASESCOPE_"));
            assert!(a.flag().starts_with("--"));
            for b in &Key::ALL[i + 1..] {
                assert_ne!(a.env(), b.env());
                assert_ne!(a.flag(), b.flag());
            }
        }
    }
}
