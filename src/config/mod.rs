//! Configuration: the file, then command-line flags, then `PHASESCOPE_*` environment
//! variables, validated into one [`Config`]. The key names are a contract (docs/config.md).

pub mod ceiling;
mod error;
mod load;
mod locate;
mod overrides;
mod protocol;
mod resolve;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

pub use error::{ConfigError, Location, Source};
pub use load::{BUILTIN_ORIGIN, DEFAULT_CONFIG_TOML};
pub use overrides::{
    config_path_from_env, parse_bool, parse_duration, Key, Override, Overrides, DEFAULT_TAP_NAME,
    ENV_CONFIG,
};
pub use protocol::Protocol;
pub use resolve::{choose_origin, ConfigOrigin, DEFAULT_CONFIG_PATH};
pub use validate::{
    check_host_port, is_label_safe, listens_clash, CORRELATE_KINDS, DEFAULT_STACK_BYTES,
    MAX_PROFILE_FREQUENCY, MAX_STACK_BYTES, MIN_HEAD_BYTES,
};
// The route keys' types belong to the route rules; a tap's config holds them.
pub use crate::routes::{RegexRoute, RouteRule};

/// Everything one process runs: its taps, the admin server, logging.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default, rename = "tap")]
    pub taps: Vec<TapConfig>,
    #[serde(default)]
    pub correlate: Vec<CorrelateConfig>,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// How long in-flight exchanges may run on after SIGINT/SIGTERM.
    #[serde(default = "defaults::shutdown_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default = "defaults::admin_listen", deserialize_with = "listen_addr")]
    pub listen: SocketAddr,
    /// When set, `/metrics` and `/api/*` require `Authorization: Bearer <token>`. Prefer
    /// `PHASESCOPE_ADMIN_TOKEN` to writing it in the file.
    #[serde(default)]
    pub token: Option<String>,
    /// Host names the admin server answers to besides IP addresses and `localhost`
    /// (against DNS rebinding), e.g. the name Prometheus scrapes it by.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Admin connections open at once; more are closed at once (and never more than an
    /// eighth of the descriptor limit, which the data path keeps).
    #[serde(default = "defaults::admin_max_connections")]
    pub max_connections: usize,
    /// `/metrics` formatted at once; as many more wait, a few seconds at most.
    #[serde(default = "defaults::admin_max_scrapes")]
    pub max_scrapes: usize,
    /// Snapshots and resets built at once (each holds a copy of every series' HDR
    /// histogram); as many more wait, a few seconds at most. A pool apart from
    /// `max_scrapes`, so that snapshot readers never make a scrape wait.
    #[serde(default = "defaults::admin_max_snapshots")]
    pub max_snapshots: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: defaults::admin_listen(),
            token: None,
            allowed_hosts: Vec::new(),
            max_connections: defaults::admin_max_connections(),
            max_scrapes: defaults::admin_max_scrapes(),
            max_snapshots: defaults::admin_max_snapshots(),
        }
    }
}

/// One listener, one upstream, one protocol.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapConfig {
    /// The `tap` label.
    pub name: String,
    #[serde(default = "defaults::protocol")]
    pub protocol: Protocol,
    #[serde(deserialize_with = "listen_addr")]
    pub listen: SocketAddr,
    /// `host:port` of the server behind the tap; resolved at each connect.
    pub upstream: String,
    #[serde(default)]
    pub routes: RouteRule,
    /// Path segments kept by the `prefix` rule.
    #[serde(default = "defaults::route_segments")]
    pub route_segments: usize,
    /// The named rules of the `regex` route rule, first match wins:
    /// `[[tap.route]] name = "users" pattern = "^/users/"`.
    #[serde(default, rename = "route")]
    pub route_rules: Vec<RegexRoute>,
    /// Distinct route labels per tap; requests past it are labelled `other`.
    #[serde(default = "defaults::max_routes")]
    pub max_routes: usize,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// The upstream's process, to account its CPU and scheduling (docs/config.md).
    #[serde(default)]
    pub process: ProcessConfig,
}

/// How the tap finds the upstream's process: `[tap.process]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FindProcess {
    /// The process listening on the upstream's address (only when that address is local).
    Auto,
    /// No process accounting.
    None,
}

/// `[tap.process]`: which process serves the upstream, and what is read from it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessConfig {
    /// `auto` or `none`; unset means `auto` (which finds nothing for a remote upstream).
    #[serde(default)]
    pub find: Option<FindProcess>,
    /// A fixed process id.
    #[serde(default)]
    pub pid: Option<u32>,
    /// A file holding the process id, read again whenever the process goes away.
    #[serde(default)]
    pub pid_file: Option<PathBuf>,
    /// How often the process's threads are read.
    #[serde(default = "defaults::process_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// Sample where the process's CPU goes (perf events): `true` (also
    /// `--profile-upstream`), `false`, or `"on-demand"`.
    #[serde(default)]
    pub profile: Profile,
    /// Samples per second and thread when profiling.
    #[serde(default = "defaults::profile_frequency")]
    pub frequency: u32,
    /// Samples per second of the whole process when profiling: the period doubles (up to
    /// 32×) while it gives more; 0 keeps `frequency` fixed. 80 by default (docs/config.md
    /// says why).
    #[serde(default = "defaults::sample_budget")]
    pub sample_budget: u32,
    /// Bytes of each sampled thread's user stack copied for unwinding (call stacks); 0
    /// samples the leaf only.
    #[serde(default = "defaults::stack_bytes")]
    pub stack_bytes: u32,
    /// Which perf events sample the process: one per thread (`per-thread`, the default)
    /// or one per CPU over the whole machine, its samples filtered to the process
    /// (`per-cpu`): docs/config.md says what each costs.
    #[serde(default)]
    pub events: SampleEvents,
    /// User component rules, tried before the built-in ones: `[[tap.process.component]]`.
    #[serde(default, rename = "component")]
    pub components: Vec<ComponentRuleConfig>,
}

/// `[tap.process] events`: what the native sampler's perf events are bound to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SampleEvents {
    /// One event per thread of the process (inherited into the threads it creates when
    /// all of them fit in the descriptor budget once per CPU): the kernel switches them
    /// in and out at each of the process's context switches.
    #[default]
    PerThread,
    /// One event per CPU over everything the CPU runs, the samples of other processes
    /// dropped as they are read: no work at the process's context switches, every thread
    /// and child sampled from its first instruction, but the other processes' samples
    /// are taken and thrown away, and it needs CAP_PERFMON over the whole machine.
    PerCpu,
}

/// `[tap.process] profile`: `true`, `false` or `"on-demand"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Profile {
    #[default]
    Off,
    /// Sampled all the time.
    On,
    /// Sampled only while asked (`POST /api/profile?seconds=N`, `phasescope profile`): no
    /// perf event is open otherwise.
    OnDemand,
}

impl Profile {
    /// Whether sampling may happen at all (always, or when asked).
    pub fn any(self) -> bool {
        self != Profile::Off
    }
}

impl From<bool> for Profile {
    fn from(on: bool) -> Self {
        if on {
            Profile::On
        } else {
            Profile::Off
        }
    }
}

impl<'de> Deserialize<'de> for Profile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(on) => Ok(Profile::from(on)),
            Raw::Text(t) if t == "on-demand" => Ok(Profile::OnDemand),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "profile is {t:?}; it must be true, false or \"on-demand\""
            ))),
        }
    }
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            find: None,
            pid: None,
            pid_file: None,
            interval: defaults::process_interval(),
            profile: Profile::Off,
            frequency: defaults::profile_frequency(),
            sample_budget: defaults::sample_budget(),
            stack_bytes: defaults::stack_bytes(),
            events: SampleEvents::PerThread,
            components: Vec::new(),
        }
    }
}

/// One `[[tap.process.component]]`: samples whose symbol and object match are `name`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentRuleConfig {
    pub name: String,
    /// A regex searched in the symbol name.
    #[serde(default)]
    pub symbol: Option<String>,
    /// A regex searched in the object's path (the binary or shared library).
    #[serde(default)]
    pub object: Option<String>,
}

/// Size and count limits of one tap.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest request head accepted; larger heads are answered 431.
    #[serde(default = "defaults::max_head_bytes")]
    pub max_head_bytes: usize,
    /// Most header fields in a request head; more are answered 431.
    #[serde(default = "defaults::max_headers")]
    pub max_headers: usize,
    /// Client connections served at once; further connections wait in the listen backlog.
    #[serde(default = "defaults::max_connections")]
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_head_bytes: defaults::max_head_bytes(),
            max_headers: defaults::max_headers(),
            max_connections: defaults::max_connections(),
        }
    }
}

/// Timeouts of one tap.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// From a request's first byte (a connection's first request: from the accept) to its
    /// complete head; past it the client gets 408.
    #[serde(default = "defaults::head_timeout", with = "humantime_serde")]
    pub head: Duration,
    /// Connecting to the upstream; past it the client gets 502.
    #[serde(default = "defaults::connect_timeout", with = "humantime_serde")]
    pub connect: Duration,
    /// From the request's last byte to the response head; past it the client gets 504.
    #[serde(default = "defaults::response_timeout", with = "humantime_serde")]
    pub response: Duration,
    /// A keep-alive connection with no request in progress is closed after this long.
    #[serde(default = "defaults::idle_timeout", with = "humantime_serde")]
    pub idle: Duration,
    /// Once the request is under way, no byte moving in either direction for this long
    /// (outside the wait for the response head) aborts both sides.
    #[serde(default = "defaults::transfer_timeout", with = "humantime_serde")]
    pub transfer: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            head: defaults::head_timeout(),
            connect: defaults::connect_timeout(),
            response: defaults::response_timeout(),
            idle: defaults::idle_timeout(),
            transfer: defaults::transfer_timeout(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrelateConfig {
    pub kind: String,
    pub http: String,
    pub resp: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    #[serde(default)]
    pub format: LogFormat,
    /// JSON lines, one per exchange; `-` is standard output.
    #[serde(default)]
    pub access_log: Option<PathBuf>,
    /// JSON lines for exchanges whose total exceeds `slow_threshold`.
    #[serde(default)]
    pub slow_log: Option<PathBuf>,
    #[serde(default = "defaults::slow_threshold", with = "humantime_serde")]
    pub slow_threshold: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            access_log: None,
            slow_log: None,
            slow_threshold: defaults::slow_threshold(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `false` is `--no-metrics`: the timeline is still taken, nothing is recorded.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// Histogram bucket upper bounds in seconds; empty means the default layout.
    #[serde(default)]
    pub buckets: Vec<f64>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            buckets: Vec::new(),
        }
    }
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "{other:?} is not a log format; use \"text\" or \"json\""
            )),
        }
    }
}

impl Config {
    /// The tap names front to back, the order a reader follows a request in: first the
    /// taps clients reach, in config order; then the taps behind them (the RESP tap a
    /// `[[correlate]]` puts behind an HTTP tap), in the order of the tap they are behind.
    pub fn taps_front_to_back(&self) -> Vec<String> {
        let behind = |name: &str| self.correlate.iter().any(|c| c.resp == name);
        let mut order: Vec<String> = self
            .taps
            .iter()
            .filter(|t| !behind(&t.name))
            .map(|t| t.name.clone())
            .collect();
        let fronts = order.clone();
        for front in &fronts {
            for c in self.correlate.iter().filter(|c| &c.http == front) {
                if !order.contains(&c.resp) {
                    order.push(c.resp.clone());
                }
            }
        }
        // Behind a tap that is itself behind another: last, in config order.
        for t in &self.taps {
            if !order.contains(&t.name) {
                order.push(t.name.clone());
            }
        }
        order
    }
}

impl TapConfig {
    /// A tap with every optional key at its default.
    pub fn new(name: &str, protocol: Protocol, listen: SocketAddr, upstream: &str) -> Self {
        Self {
            name: name.to_owned(),
            protocol,
            listen,
            upstream: upstream.to_owned(),
            routes: RouteRule::None,
            route_segments: defaults::route_segments(),
            route_rules: Vec::new(),
            max_routes: defaults::max_routes(),
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            process: ProcessConfig::default(),
        }
    }
}

impl<'a> From<&'a TapConfig> for crate::routes::RouteSpec<'a> {
    fn from(tap: &'a TapConfig) -> Self {
        Self {
            tap: &tap.name,
            by_command: tap.protocol.routes_by_command(),
            rule: tap.routes,
            segments: tap.route_segments,
            max_routes: tap.max_routes,
            rules: &tap.route_rules,
        }
    }
}

/// A listen address from the file: an IP and port, with the same message as the flags give
/// (serde's own, "invalid socket address syntax", does not say what is expected). Host
/// names are refused rather than resolved: a name can resolve to several addresses, and a
/// listener must bind exactly one.
fn listen_addr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    overrides::parse_addr(&text).map_err(serde::de::Error::custom)
}

pub mod defaults {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::Protocol;

    pub fn admin_listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9464))
    }
    pub fn admin_max_connections() -> usize {
        64
    }
    pub fn admin_max_scrapes() -> usize {
        4
    }
    pub fn admin_max_snapshots() -> usize {
        1
    }
    pub fn protocol() -> Protocol {
        Protocol::Http
    }
    pub fn route_segments() -> usize {
        1
    }
    pub fn max_routes() -> usize {
        64
    }
    pub fn max_head_bytes() -> usize {
        64 * 1024
    }
    pub fn max_headers() -> usize {
        100
    }
    pub fn max_connections() -> usize {
        16_384
    }
    pub fn head_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn connect_timeout() -> Duration {
        Duration::from_secs(3)
    }
    pub fn response_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub fn idle_timeout() -> Duration {
        Duration::from_secs(300)
    }
    pub fn transfer_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub fn slow_threshold() -> Duration {
        Duration::from_millis(100)
    }
    pub fn shutdown_grace() -> Duration {
        Duration::from_secs(10)
    }
    pub fn yes() -> bool {
        true
    }
    pub fn process_interval() -> Duration {
        Duration::from_secs(1)
    }
    /// Just under 1 kHz, so that sampling does not run in lockstep with 1 ms timers.
    pub fn profile_frequency() -> u32 {
        997
    }

    pub fn stack_bytes() -> u32 {
        super::DEFAULT_STACK_BYTES
    }
    /// Samples per second of the whole process: at most 100 Hz on a server given 0.8 of
    /// a core or more, and 2,400 to 4,800 samples in a busy 60 s window (docs/config.md).
    pub fn sample_budget() -> u32 {
        80
    }
}
