//! The rules a config must satisfy before anything binds a socket.
//!
//! serde already enforces types and known keys; these are the rules across values (unique
//! names and addresses, references between tables) and the ranges where a value would
//! parse but could not work. Failing here, at start, with the key's position, beats a
//! proxy that starts and then misbehaves under load.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::error::ConfigError;
use super::locate::{Origins, Seg};
use super::{Config, Protocol, TapConfig};

/// Smallest `max_head_bytes`: below this even an ordinary browser request head is refused.
pub const MIN_HEAD_BYTES: usize = 1024;

/// A broken rule: the keys involved (the offending one first) and a sentence.
#[derive(Debug)]
pub(crate) struct Problem {
    /// The first path is the key to point at; others are keys it conflicts with. When one
    /// of them was set by an override, the error points at that override instead, since
    /// that is what the user just typed.
    pub(crate) paths: Vec<Vec<Seg>>,
    pub(crate) message: String,
}

impl Problem {
    fn at(path: Vec<Seg>, message: String) -> Self {
        Self {
            paths: vec![path],
            message,
        }
    }

    pub(crate) fn into_error(self, origins: &Origins<'_>) -> ConfigError {
        let chosen = self
            .paths
            .iter()
            .find(|p| origins.overridden_by(p).is_some())
            .or(self.paths.first());
        let location = match chosen {
            Some(path) => origins.locate(path),
            None => origins.locate(&[]),
        };
        ConfigError::new(location, self.message)
    }
}

fn tap_path(i: usize, rest: &[Seg]) -> Vec<Seg> {
    let mut path = vec![Seg::Key("tap"), Seg::Index(i)];
    path.extend_from_slice(rest);
    path
}

/// Checks every rule; the first broken one is returned.
pub(crate) fn check(config: &Config) -> Result<(), Problem> {
    if config.taps.is_empty() {
        return Err(Problem::at(
            vec![],
            "the config has no [[tap]]; at least one tap (name, listen, upstream) is needed"
                .to_owned(),
        ));
    }
    for (i, tap) in config.taps.iter().enumerate() {
        check_tap(i, tap)?;
    }
    check_unique_names(config)?;
    check_unique_listens(config)?;
    check_admin(config)?;
    for i in 0..config.correlate.len() {
        check_correlate(config, i)?;
    }
    positive(
        config.log.slow_threshold,
        vec![Seg::Key("log"), Seg::Key("slow_threshold")],
        "log.slow_threshold",
    )?;
    check_buckets(&config.metrics.buckets)?;
    positive(
        config.shutdown_grace,
        vec![Seg::Key("shutdown_grace")],
        "shutdown_grace",
    )?;
    Ok(())
}

fn check_tap(i: usize, tap: &TapConfig) -> Result<(), Problem> {
    if !is_label_safe(&tap.name) {
        return Err(Problem::at(
            tap_path(i, &[Seg::Key("name")]),
            format!(
                "tap name {:?} is not usable as a metric label; use only letters, digits, `_` and `-`",
                tap.name
            ),
        ));
    }
    let who = format!("tap `{}`", tap.name);
    if let Err(why) = check_host_port(&tap.upstream) {
        return Err(Problem::at(
            tap_path(i, &[Seg::Key("upstream")]),
            format!(
                "{who}: upstream {:?} {why}; write it as host:port, e.g. \"127.0.0.1:7379\"",
                tap.upstream
            ),
        ));
    }
    let at_least = |value: usize, min: usize, rest: &[Seg], key: &str| {
        if value < min {
            Err(Problem::at(
                tap_path(i, rest),
                format!("{who}: {key} is {value}; it must be at least {min}"),
            ))
        } else {
            Ok(())
        }
    };
    at_least(tap.max_routes, 1, &[Seg::Key("max_routes")], "max_routes")?;
    at_least(
        tap.route_segments,
        1,
        &[Seg::Key("route_segments")],
        "route_segments",
    )?;
    // The route table checks what only it knows: regex rules compile, the regex rule
    // has rules, max_routes fits the route ids.
    if let Err(e) = crate::routes::RouteTable::new(tap) {
        // One line, as every config error (a regex error draws a caret diagram).
        let text = format!("{e:#}");
        return Err(Problem::at(
            tap_path(i, &[Seg::Key("routes")]),
            text.split_whitespace().collect::<Vec<_>>().join(" "),
        ));
    }
    let limits = |key| [Seg::Key("limits"), Seg::Key(key)];
    at_least(
        tap.limits.max_head_bytes,
        MIN_HEAD_BYTES,
        &limits("max_head_bytes"),
        "limits.max_head_bytes",
    )?;
    at_least(
        tap.limits.max_headers,
        1,
        &limits("max_headers"),
        "limits.max_headers",
    )?;
    at_least(
        tap.limits.max_connections,
        1,
        &limits("max_connections"),
        "limits.max_connections",
    )?;
    let t = &tap.timeouts;
    for (value, key) in [
        (t.head, "head"),
        (t.connect, "connect"),
        (t.response, "response"),
        (t.idle, "idle"),
        (t.transfer, "transfer"),
    ] {
        positive(
            value,
            tap_path(i, &[Seg::Key("timeouts"), Seg::Key(key)]),
            &format!("{who}: timeouts.{key}"),
        )?;
    }
    check_process(i, tap, &who)
}

/// `[tap.process]`: one way to name the process, a usable interval and frequency, rules
/// that compile.
fn check_process(i: usize, tap: &TapConfig, who: &str) -> Result<(), Problem> {
    let p = &tap.process;
    let key = |k| tap_path(i, &[Seg::Key("process"), Seg::Key(k)]);
    let ways = [
        ("find", p.find == Some(super::FindProcess::None)),
        ("pid", p.pid.is_some()),
        ("pid_file", p.pid_file.is_some()),
    ];
    let given: Vec<&str> = ways.iter().filter(|w| w.1).map(|w| w.0).collect();
    if given.len() > 1 {
        return Err(Problem {
            paths: given.iter().map(|k| key(k)).collect(),
            message: format!(
                "{who}: process.{} and process.{} both say which process to watch; keep one",
                given[0], given[1]
            ),
        });
    }
    if p.pid == Some(0) {
        return Err(Problem::at(
            key("pid"),
            format!("{who}: process.pid is 0; it must be a process id"),
        ));
    }
    positive(
        p.interval,
        key("interval"),
        &format!("{who}: process.interval"),
    )?;
    if !(1..=MAX_PROFILE_FREQUENCY).contains(&p.frequency) {
        return Err(Problem::at(
            key("frequency"),
            format!(
                "{who}: process.frequency is {}; it must be between 1 and {MAX_PROFILE_FREQUENCY} samples per second",
                p.frequency
            ),
        ));
    }
    if p.sample_budget > MAX_PROFILE_FREQUENCY * 64 {
        return Err(Problem::at(
            key("sample_budget"),
            format!(
                "{who}: process.sample_budget is {}; it must be at most {} samples per second (0 keeps `frequency` fixed)",
                p.sample_budget,
                MAX_PROFILE_FREQUENCY * 64
            ),
        ));
    }
    let max_stack = MAX_STACK_BYTES;
    if p.stack_bytes > max_stack || !p.stack_bytes.is_multiple_of(8) {
        return Err(Problem::at(
            key("stack_bytes"),
            format!(
                "{who}: process.stack_bytes is {}; it must be a multiple of 8 from 0 (the sampled function only, no call stacks) to {max_stack}",
                p.stack_bytes
            ),
        ));
    }
    for (n, rule) in p.components.iter().enumerate() {
        check_component(i, n, rule, who)?;
    }
    Ok(())
}

/// A user component rule of `[[tap.process.component]]` number `n`: a label-safe name and
/// at least one regex, each valid.
fn check_component(
    i: usize,
    n: usize,
    rule: &super::ComponentRuleConfig,
    who: &str,
) -> Result<(), Problem> {
    let at = |k| {
        tap_path(
            i,
            &[
                Seg::Key("process"),
                Seg::Key("component"),
                Seg::Index(n),
                Seg::Key(k),
            ],
        )
    };
    if !is_label_safe(&rule.name) {
        return Err(Problem::at(
            at("name"),
            format!(
                "{who}: component name {:?} is not usable as a metric label; use only letters, digits, `_` and `-`",
                rule.name
            ),
        ));
    }
    if rule.symbol.is_none() && rule.object.is_none() {
        return Err(Problem::at(
            at("name"),
            format!(
                "{who}: component {:?} has neither symbol nor object; give at least one regex",
                rule.name
            ),
        ));
    }
    for (k, pattern) in [("symbol", &rule.symbol), ("object", &rule.object)] {
        if let Some(pattern) = pattern {
            if let Err(e) = regex::Regex::new(pattern) {
                let text = e.to_string();
                return Err(Problem::at(
                    at(k),
                    format!(
                        "{who}: component {:?}: {k} {pattern:?} is not a regex: {}",
                        rule.name,
                        text.split_whitespace().collect::<Vec<_>>().join(" ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Above 10 kHz the sampler's own interrupts would be a visible share of the upstream's CPU.
pub const MAX_PROFILE_FREQUENCY: u32 = 10_000;

/// Bytes of user stack copied into each sample by default: deep enough for an event
/// loop's callbacks and a parser's helpers, node's among them (libuv keeps 12 KiB of
/// epoll events on the stack below every callback, and a 16 KiB copy ended there); a
/// deeper stack is truncated (its root frames are missing, the profile's
/// truncated-samples count says how often). The copy shrinks to what a process's walks
/// read (src/upstream/profile/native/stack_size.rs), so a shallow server pays for 32 KiB
/// only in its first collects (docs/config.md has the measured cost).
pub const DEFAULT_STACK_BYTES: u32 = 32 * 1024;
/// The most perf copies per sample (a record must fit in 64 KiB).
pub const MAX_STACK_BYTES: u32 = 60 * 1024;

fn positive(value: Duration, path: Vec<Seg>, what: &str) -> Result<(), Problem> {
    if value.is_zero() {
        Err(Problem::at(
            path,
            format!("{what} is zero; it must be a positive duration such as \"10s\""),
        ))
    } else {
        Ok(())
    }
}

/// Tap names become Prometheus label values and file-name parts in reports; keeping them to
/// this set means no quoting anywhere.
pub fn is_label_safe(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `host:port` with a non-zero port; the host is a name, an IPv4 address or `[IPv6]`.
/// Resolution happens at each connect, so a name is not looked up here.
pub fn check_host_port(s: &str) -> Result<(), &'static str> {
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err("has no port");
    };
    match port.parse::<u16>() {
        Ok(0) => return Err("has port 0"),
        Ok(_) => {}
        Err(_) => return Err("has no valid port (1-65535) after the last `:`"),
    }
    if host.is_empty() {
        return Err("has no host");
    }
    if let Some(inner) = host.strip_prefix('[') {
        return match inner.strip_suffix(']').map(str::parse::<Ipv6Addr>) {
            Some(Ok(_)) => Ok(()),
            _ => Err("has an invalid bracketed IPv6 address"),
        };
    }
    if host.contains(':') {
        return Err("has an IPv6 address without brackets");
    }
    let name_ok = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
    if name_ok {
        Ok(())
    } else {
        Err("has a host that is neither a host name nor an IP address")
    }
}

fn check_unique_names(config: &Config) -> Result<(), Problem> {
    for (i, tap) in config.taps.iter().enumerate() {
        if let Some(first) = config.taps[..i].iter().position(|t| t.name == tap.name) {
            return Err(Problem {
                paths: vec![
                    tap_path(i, &[Seg::Key("name")]),
                    tap_path(first, &[Seg::Key("name")]),
                ],
                message: format!(
                    "tap name `{}` is used by two taps; tap names must be unique",
                    tap.name
                ),
            });
        }
    }
    Ok(())
}

/// The admin server's caps are at least 1, and each allowed host is a bare name (no port,
/// scheme or path: the Host check compares names).
fn check_admin(config: &Config) -> Result<(), Problem> {
    let admin = &config.admin;
    let key = |k: &'static str| vec![Seg::Key("admin"), Seg::Key(k)];
    for (name, value) in [
        ("max_connections", admin.max_connections),
        ("max_scrapes", admin.max_scrapes),
        ("max_snapshots", admin.max_snapshots),
    ] {
        if value == 0 {
            return Err(Problem::at(
                key(name),
                format!("admin.{name} must be at least 1"),
            ));
        }
    }
    for (i, host) in admin.allowed_hosts.iter().enumerate() {
        let bare = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
        if !bare {
            let mut path = key("allowed_hosts");
            path.push(Seg::Index(i));
            return Err(Problem::at(
                path,
                format!("admin.allowed_hosts: `{host}` is not a bare host name (no port, scheme or path)"),
            ));
        }
    }
    Ok(())
}

/// Whether binding both addresses would fail with "address in use". Port 0 asks the kernel
/// for a free port, so it never clashes (tests rely on that).
pub fn listens_clash(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() == 0 || a.port() != b.port() {
        return false;
    }
    let dual_stack_any = |ip: IpAddr| matches!(ip, IpAddr::V6(v6) if v6.is_unspecified());
    match (a.ip(), b.ip()) {
        (x, y) if x == y => true,
        (x, y) if x.is_ipv4() == y.is_ipv4() => x.is_unspecified() || y.is_unspecified(),
        // `[::]` accepts IPv4 too (Linux's default, bindv6only=0).
        (x, y) => dual_stack_any(x) || dual_stack_any(y),
    }
}

fn check_unique_listens(config: &Config) -> Result<(), Problem> {
    let admin = config.admin.listen;
    let admin_path = vec![Seg::Key("admin"), Seg::Key("listen")];
    for (i, tap) in config.taps.iter().enumerate() {
        let path = tap_path(i, &[Seg::Key("listen")]);
        if listens_clash(tap.listen, admin) {
            return Err(Problem {
                paths: vec![path, admin_path],
                message: format!(
                    "tap `{}` listens on {}, which the admin server (admin.listen = {admin}) also uses; every listen address must be distinct",
                    tap.name, tap.listen
                ),
            });
        }
        for (j, other) in config.taps[..i].iter().enumerate() {
            if listens_clash(tap.listen, other.listen) {
                return Err(Problem {
                    paths: vec![path, tap_path(j, &[Seg::Key("listen")])],
                    message: format!(
                        "tap `{}` listens on {}, which tap `{}` also uses ({}); every listen address must be distinct",
                        tap.name, tap.listen, other.name, other.listen
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The only correlation the relay knows: an HTTP tap in front of Webdis, a RESP tap behind.
pub const CORRELATE_KINDS: &[&str] = &["webdis"];

fn check_correlate(config: &Config, i: usize) -> Result<(), Problem> {
    let c = &config.correlate[i];
    let path = |key| vec![Seg::Key("correlate"), Seg::Index(i), Seg::Key(key)];
    if !CORRELATE_KINDS.contains(&c.kind.as_str()) {
        return Err(Problem::at(
            path("kind"),
            format!(
                "correlate kind {:?} is unknown; the only kind is \"webdis\"",
                c.kind
            ),
        ));
    }
    for (key, name, want) in [
        ("http", &c.http, Protocol::Http),
        ("resp", &c.resp, Protocol::Resp),
    ] {
        match config.taps.iter().find(|t| &t.name == name) {
            None => {
                return Err(Problem::at(
                    path(key),
                    format!("correlate.{key} names tap `{name}`, but no tap has that name"),
                ))
            }
            Some(tap) if tap.protocol != want => {
                return Err(Problem::at(
                    path(key),
                    format!(
                        "correlate.{key} names tap `{name}`, whose protocol is \"{}\"; it must be a tap with protocol \"{}\"",
                        tap.protocol.as_str(),
                        want.as_str()
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn check_buckets(buckets: &[f64]) -> Result<(), Problem> {
    let path = |i| vec![Seg::Key("metrics"), Seg::Key("buckets"), Seg::Index(i)];
    for (i, &b) in buckets.iter().enumerate() {
        if !b.is_finite() || b <= 0.0 {
            return Err(Problem::at(
                path(i),
                format!("metrics.buckets[{i}] is {b}; bucket bounds must be positive, finite numbers of seconds"),
            ));
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|p| buckets.get(p)) {
            if b <= prev {
                return Err(Problem::at(
                    path(i),
                    format!("metrics.buckets[{i}] is {b}, not above the bound before it ({prev}); buckets must be strictly increasing"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn host_port_forms() {
        for ok in [
            "127.0.0.1:7379",
            "localhost:80",
            "[::1]:6379",
            "redis_1.lan:6379",
        ] {
            assert_eq!(check_host_port(ok), Ok(()), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            ":80",
            "host:0",
            "host:99999",
            "host:",
            "::1:6379",
            "[::1:6379",
            "[nope]:1",
            "http://x:80",
            "a b:80",
        ] {
            assert!(check_host_port(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn label_safe_names() {
        assert!(is_label_safe("webdis-1_b"));
        assert!(!is_label_safe(""));
        assert!(!is_label_safe("a b"));
        assert!(!is_label_safe("a\"b"));
        assert!(!is_label_safe("é"));
    }

    #[test]
    fn listen_clashes() {
        assert!(listens_clash(addr("127.0.0.1:80"), addr("127.0.0.1:80")));
        assert!(listens_clash(addr("0.0.0.0:80"), addr("127.0.0.1:80")));
        assert!(listens_clash(addr("[::]:80"), addr("127.0.0.1:80")));
        assert!(!listens_clash(addr("127.0.0.1:80"), addr("127.0.0.2:80")));
        assert!(!listens_clash(addr("127.0.0.1:80"), addr("127.0.0.1:81")));
        assert!(!listens_clash(addr("127.0.0.1:0"), addr("127.0.0.1:0")));
        assert!(!listens_clash(addr("[::1]:80"), addr("127.0.0.1:80")));
    }

    #[test]
    fn buckets_rules() {
        assert!(check_buckets(&[]).is_ok());
        assert!(check_buckets(&[1e-7, 0.5, 30.0]).is_ok());
        assert!(check_buckets(&[0.0, 1.0]).is_err());
        assert!(check_buckets(&[-1.0]).is_err());
        assert!(check_buckets(&[1.0, f64::INFINITY]).is_err());
        assert!(check_buckets(&[f64::NAN]).is_err());
        let p = check_buckets(&[0.1, 0.2, 0.2]).unwrap_err();
        assert_eq!(
            p.paths[0],
            vec![Seg::Key("metrics"), Seg::Key("buckets"), Seg::Index(2)]
        );
    }
}
