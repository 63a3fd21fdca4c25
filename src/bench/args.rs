//! The command line of `phasescope bench`: its flags, their parsing, what they convert
//! to (a paired design's tick, window, length and windows), and every check of their
//! values ([`BenchArgs::check`]), so that the bench's steps read flags that hold together
//! and none of them checks its own.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::ensure;
use clap::Args;

/// A paired design has at least this many windows.
pub const MIN_WINDOWS: usize = 4;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// host:port of server A (say, the current build)
    #[arg(long = "a", value_name = "ADDR")]
    pub a: String,

    /// host:port of server B (say, the build with the change); not with --profile-cost
    #[arg(
        long = "b",
        value_name = "ADDR",
        required_unless_present = "profile_cost",
        default_value = ""
    )]
    pub b: String,

    /// Request path, repeatable; requests go round-robin over them [default: /]
    #[arg(long, value_name = "PATH")]
    pub path: Vec<String>,

    /// How A and B share the machine: `interleave` loads one side at a time in short
    /// slices, A B B A B A A B …, and compares each four slices; `duet` loads both at once (half
    /// the connections each) and compares them in paired windows; `runs` loads one side
    /// at a time, whole runs interleaved A B B A …
    #[arg(long, value_enum, default_value = "interleave")]
    pub design: Design,

    /// Duet: the length of one paired window
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = humantime::parse_duration)]
    pub window: Duration,

    /// Interleave: the length of one side's slice (four slices, A B B A or B A A B, are
    /// compared as a duet's window is)
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = humantime::parse_duration)]
    pub slice: Duration,

    /// Duet and interleave: keep measuring windows (an interleave's of four slices, in
    /// pairs A B B A and B A A B) until the smallest change the primary rows can detect
    /// (their mde) is at most PCT %, or --max-duration passes; the report says which
    #[arg(long = "until-mde", value_name = "PCT")]
    pub until_mde: Option<f64>,

    /// With --until-mde: the longest the duet or interleave loads the servers
    #[arg(long = "max-duration", value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    pub max_duration: Duration,

    /// Runs per side, interleaved A B B A … (duet, interleave: as long in all,
    /// 2 × runs × duration)
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub runs: usize,

    /// Length of each run
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,

    /// Keep-alive client connections
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub connections: usize,

    /// Load on each side before the first run, not measured
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,

    /// Threads of the built-in load generator (its connections are spread over them)
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub threads: usize,

    /// Open loop at R requests/s (latency counted from each request's due time, like
    /// wrk2) instead of closed loop
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,

    /// Write each run's snapshot to DIR (run-01-a.json …) so that compare can rerun on them
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,

    /// Drive the load with this command instead; {url}, {duration} (seconds) and
    /// {connections} are filled in, e.g. 'wrk -t2 -c{connections} -d{duration}s {url}'
    #[arg(long, value_name = "CMD", conflicts_with = "rate")]
    pub load: Option<String>,

    /// `same` inside ±PCT %, `different` beyond
    #[arg(long, value_name = "PCT", default_value_t = 2.0)]
    pub threshold: f64,

    /// The change the power statement is about
    #[arg(long, value_name = "PCT", default_value_t = 1.0)]
    pub detect: f64,

    /// Error rate of the primary question
    #[arg(long, value_name = "ALPHA", default_value_t = 0.05)]
    pub alpha: f64,

    /// A RESP tap between server A and its Redis, correlated with tap `a`: it listens on
    /// LISTEN (point A's Redis at it) and forwards to REDIS; Webdis's wait then splits into
    /// backend_in, backend (Redis) and backend_out, each compared
    #[arg(long = "a-resp", value_name = "LISTEN=REDIS", value_parser = RespTap::parse)]
    pub a_resp: Option<RespTap>,

    /// The same between server B and its Redis, correlated with tap `b`
    #[arg(long = "b-resp", value_name = "LISTEN=REDIS", value_parser = RespTap::parse)]
    pub b_resp: Option<RespTap>,

    /// Also sample where each server's CPU goes (perf events; the permissions of
    /// `run --profile-upstream`), so that the comparison's note gives the HTTP parser's
    /// share of each side's CPU beside their CPU per request
    #[arg(long = "profile-upstream")]
    pub profile_upstream: bool,

    /// Pin server A's threads to A_CPUS, B's to B_CPUS and the bench's own (proxy and
    /// load) to LOAD_CPUS, each a CPU list like `0-1,4`; the servers' affinity is set
    /// back when the bench ends. Both servers must run on this host
    #[arg(long, value_name = "A_CPUS:B_CPUS:LOAD_CPUS", value_parser = super::pin::Cpus::parse)]
    pub cpus: Option<super::pin::Cpus>,

    /// Write the differential flame graphs of the servers' call stacks: B's stacks to
    /// FILE.svg, A's to FILE.a.svg; a frame red or blue only where its function's row is
    /// different (dearer, cheaper) or on one side only, grey elsewhere (needs sampled
    /// stacks on both sides)
    #[arg(long = "diff-flamegraph", value_name = "FILE.svg")]
    pub diff_flamegraph: Option<PathBuf>,

    /// With --profile-upstream: a function of the servers whose row is kept and printed
    /// whatever the cut of rows (repeatable; its name as the rows give it, e.g. json_reply)
    #[arg(long, value_name = "NAME")]
    pub function: Vec<String>,

    /// Write each side's folded call stacks: FILE with `.a` and `.b` before its extension
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Write each side's pprof profile (FILE.a.pb.gz, FILE.b.pb.gz for FILE.pb.gz), CPU
    /// per 1000 requests its default sample type: `go tool pprof -diff_base A B` reads them
    #[arg(long, value_name = "FILE.pb.gz")]
    pub pprof: Option<PathBuf>,

    /// Instead of A against B: what sampling costs server A, on one proxy in front of it
    /// (with --a-resp, its Redis behind a RESP tap: the full chain) that samples it on
    /// demand; --runs windows of --duration a side, unsampled (A) and sampled (B) in turn,
    /// A B B A …, each pair's requests/s ratio and the ratio's 95 % interval
    #[arg(long = "profile-cost", conflicts_with_all = ["b_resp", "load", "cpus", "until_mde"])]
    pub profile_cost: bool,

    /// With --profile-cost: the `[tap.process] sample_budget` of the sampled windows
    /// (samples per second; 0 keeps `frequency` fixed) [default: the config's default]
    #[arg(long = "sample-budget", value_name = "N", requires = "profile_cost")]
    pub sample_budget: Option<u32>,

    /// With --profile-cost: the `[tap.process] events` of the sampled windows, one perf
    /// event per thread of the server or one per CPU over the machine [default: per-thread]
    #[arg(
        long = "sample-events",
        value_enum,
        value_name = "EVENTS",
        requires = "profile_cost"
    )]
    pub sample_events: Option<SampleEventsArg>,

    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::report::Format,
}

impl BenchArgs {
    /// The load's own settings, which every design shares: connections, duration, rate.
    fn check_load(&self) -> anyhow::Result<()> {
        ensure!(
            self.connections >= 1 && self.connections <= 10_000,
            "--connections must lie between 1 and 10000"
        );
        ensure!(!self.duration.is_zero(), "--duration must be above 0");
        if let Some(rate) = self.rate {
            ensure!(rate > 0.0 && rate.is_finite(), "--rate must be above 0");
        }
        Ok(())
    }

    /// `--profile-cost`'s flags: one server, windows of whole runs.
    fn check_profile_cost(&self) -> anyhow::Result<()> {
        ensure!(
            self.b.is_empty(),
            "--profile-cost measures one server (--a): leave out --b"
        );
        self.check_load()?;
        if let Some(budget) = self.sample_budget {
            ensure!(
                budget <= crate::config::MAX_PROFILE_FREQUENCY * 64,
                "--sample-budget is at most {} samples per second",
                crate::config::MAX_PROFILE_FREQUENCY * 64
            );
        }
        Ok(())
    }
}

/// `--sample-events`: `[tap.process] events` (the config type knows no command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SampleEventsArg {
    PerThread,
    PerCpu,
}

impl From<SampleEventsArg> for crate::config::SampleEvents {
    fn from(a: SampleEventsArg) -> Self {
        match a {
            SampleEventsArg::PerThread => crate::config::SampleEvents::PerThread,
            SampleEventsArg::PerCpu => crate::config::SampleEvents::PerCpu,
        }
    }
}

/// `--design`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Design {
    Duet,
    Interleave,
    Runs,
}

impl BenchArgs {
    /// Every check of the flags' values, before anything starts: a wrong value is an error
    /// before the proxy, the pinning of the servers and the warm-up, and the steps after
    /// it (the proxy, the designs' plans, the load) take the flags as they are. Checks
    /// that clap cannot make on one flag alone: ranges, and flags that do not go together
    /// (`--load` and the paired designs, `--until-mde` and the runs design).
    pub fn check(&self) -> anyhow::Result<()> {
        ensure!(self.runs >= 1, "--runs must be at least 1");
        if self.profile_cost {
            return self.check_profile_cost();
        }
        self.check_load()?;
        let (Some((tick, flag)), Some(window), Some(count)) =
            (self.tick(), self.paired_window(), self.window_count())
        else {
            ensure!(
                self.until_mde.is_none(),
                "--until-mde adds paired windows: use it with --design duet or interleave"
            );
            return Ok(());
        };
        ensure!(
            self.load.is_none(),
            "--load drives one server at a time: use it with --design runs"
        );
        ensure!(
            tick >= Duration::from_millis(10),
            "{flag} must be at least 10ms"
        );
        if let Some(pct) = self.until_mde {
            ensure!(
                pct > 0.0 && pct.is_finite(),
                "--until-mde must be a positive percentage, not {pct}"
            );
        }
        let length = self.paired_length();
        ensure!(
            count >= MIN_WINDOWS,
            "{length:?} holds {count} windows of {window:?}: needs at least {} \
             (more --runs or --duration, or a shorter {flag})",
            MIN_WINDOWS
        );
        Ok(())
    }

    /// How long a paired design loads the servers: as long as the runs design would
    /// take, or with `--until-mde` at most `--max-duration`.
    pub fn paired_length(&self) -> Duration {
        match self.until_mde {
            Some(_) => self.max_duration,
            None => self.duration * u32::try_from(2 * self.runs).unwrap_or(u32::MAX),
        }
    }

    /// The windows a paired design measures in [`Self::paired_length`]: a whole number
    /// of [`Design::windows_per_cycle`] (fewer if `--until-mde` stops it); `None` for
    /// runs.
    pub fn window_count(&self) -> Option<usize> {
        let window = self.paired_window()?;
        let cycle = self.design.windows_per_cycle();
        let count = (self.paired_length().as_secs_f64() / window.as_secs_f64()).floor() as usize;
        Some(count - count % cycle)
    }

    /// A paired design's tick, the interval at which it cuts or passes the turn (a
    /// duet's `--window`, an interleave's `--slice`), with the flag that set it; `None`
    /// for runs.
    pub fn tick(&self) -> Option<(Duration, &'static str)> {
        match self.design {
            Design::Duet => Some((self.window, "--window")),
            Design::Interleave => Some((self.slice, "--slice")),
            Design::Runs => None,
        }
    }

    /// A paired design's window: a duet's tick, an interleave's four (A B B A or B A A B).
    pub fn paired_window(&self) -> Option<Duration> {
        let (tick, _) = self.tick()?;
        Some(tick * self.design.ticks_per_window())
    }
}

impl Design {
    /// The ticks (slices) in one of the design's windows: an interleave's window holds A B
    /// B A or B A A B, each side switched away from once. The side switched away from finishes its
    /// exchanges in flight beside the other's first ones, slower: in windows of two
    /// slices, A B then B A, that fell on A and on B in turn, and the windows' ratios
    /// alternated by ±6 % (release, 56 windows: +13.2 % and −0.2 % about a true +5 %),
    /// which four slices cancel within each window (the sd of the windows' log ratios
    /// 9.0 % → 4.3 %, the interval ±2.4 % → ±1.6 %; docs/compare.md).
    pub fn ticks_per_window(self) -> u32 {
        match self {
            Design::Interleave => 4,
            Design::Duet | Design::Runs => 1,
        }
    }

    /// The windows in which each side has each place once: an interleave's A B B A then
    /// B A A B, a duet's one window. A paired bench takes a whole number of these, also
    /// when `--until-mde` stops it early: the side at a window's two ends fared otherwise
    /// than the side in its middle (by up to 5 % in kept benches, docs/compare.md), which
    /// an odd count of an interleave's windows left in the verdict, once, on one side.
    pub fn windows_per_cycle(self) -> usize {
        match self {
            Design::Interleave => 2,
            Design::Duet | Design::Runs => 1,
        }
    }

    /// Whether the comparison is made on pairs measured together (a duet's windows, an
    /// interleave's adjacent slices) rather than on independent runs.
    pub fn paired(self) -> bool {
        matches!(self, Design::Duet | Design::Interleave)
    }
}

/// `--a-resp` / `--b-resp`: where the RESP tap listens and the Redis it forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespTap {
    pub listen: std::net::SocketAddr,
    pub redis: String,
}

impl RespTap {
    fn parse(text: &str) -> Result<RespTap, String> {
        let (listen, redis) = text.split_once('=').ok_or_else(|| {
            format!("{text:?}: expected LISTEN=REDIS, e.g. 127.0.0.1:6380=127.0.0.1:6379")
        })?;
        let listen = listen
            .parse()
            .map_err(|e| format!("{listen:?}: not an IP address and port: {e}"))?;
        crate::config::check_host_port(redis).map_err(|e| format!("{redis:?}: {e}"))?;
        Ok(RespTap {
            listen,
            redis: redis.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    /// `phasescope bench --a x:1 --b y:1 ARGS…`, parsed, or its error.
    fn bench(args: &[&str]) -> Result<super::BenchArgs, clap::Error> {
        let argv = ["phasescope", "bench", "--a", "x:1", "--b", "y:1"];
        let cli = Cli::try_parse_from(argv.iter().chain(args))?;
        let Command::Bench(b) = cli.command else {
            panic!("not bench")
        };
        Ok(*b)
    }

    #[test]
    fn bench_flags_parse_with_their_defaults() {
        let cli = Cli::try_parse_from([
            "phasescope",
            "bench",
            "--a",
            "127.0.0.1:7379",
            "--b",
            "127.0.0.1:7380",
            "--path",
            "/PING",
            "--path",
            "/GET/k",
            "--duration",
            "2s",
            "--rate",
            "1000",
        ])
        .unwrap();
        let Command::Bench(b) = cli.command else {
            panic!("not bench")
        };
        assert_eq!(b.path, ["/PING", "/GET/k"]);
        assert_eq!((b.runs, b.connections, b.threads), (10, 50, 2));
        assert_eq!(b.duration.as_secs(), 2);
        assert_eq!(b.warmup.as_secs(), 2);
        assert_eq!(b.rate, Some(1000.0));
        assert_eq!(b.a_resp, None);
        assert_eq!(
            b.design,
            super::Design::Interleave,
            "the interleave is the default"
        );
        assert_eq!(b.slice.as_millis(), 250);
        assert_eq!(b.window.as_millis(), 250);
        assert_eq!(b.cpus, None);
        assert!(
            Cli::try_parse_from(["phasescope", "bench", "--a", "x:1"]).is_err(),
            "--b is required"
        );
        assert!(
            bench(&["--rate", "5", "--load", "wrk"]).is_err(),
            "--rate and --load exclude each other"
        );
    }

    #[test]
    fn bench_stack_exports_parse() {
        let b = bench(&[
            "--diff-flamegraph",
            "d.svg",
            "--folded",
            "s.folded",
            "--pprof",
            "p.pb.gz",
        ])
        .unwrap();
        assert_eq!(
            b.diff_flamegraph.as_deref(),
            Some(std::path::Path::new("d.svg"))
        );
        assert_eq!(b.folded.as_deref(), Some(std::path::Path::new("s.folded")));
        assert_eq!(b.pprof.as_deref(), Some(std::path::Path::new("p.pb.gz")));
        assert!(bench(&[]).unwrap().diff_flamegraph.is_none());
    }

    #[test]
    fn bench_design_and_window_parse() {
        let b = bench(&["--design", "runs", "--window", "1s"]).unwrap();
        assert_eq!((b.design, b.window.as_secs()), (super::Design::Runs, 1));
        assert!(bench(&["--design", "sideways"]).is_err());
        let b = bench(&["--design", "interleave", "--slice", "100ms"]).unwrap();
        assert_eq!(b.design, super::Design::Interleave);
        assert_eq!(b.slice.as_millis(), 100);
        assert!(b.design.paired() && !super::Design::Runs.paired());
    }

    /// Every check of the flags is `check`'s, made before the bench starts anything: a
    /// value out of range, or flags that do not go together, is refused there.
    #[test]
    fn check_refuses_what_no_design_can_run() {
        assert!(bench(&[]).unwrap().check().is_ok());
        assert!(bench(&["--design", "runs", "--load", "wrk"])
            .unwrap()
            .check()
            .is_ok());
        for (args, says) in [
            (&["--runs", "0"][..], "--runs must be at least 1"),
            (&["--connections", "0"], "--connections must lie between"),
            (&["--duration", "0s"], "--duration must be above 0"),
            (&["--rate", "0"], "--rate must be above 0"),
            (
                &["--design", "runs", "--until-mde", "5"],
                "--until-mde adds",
            ),
            (
                &["--design", "duet", "--load", "wrk"],
                "--load drives one server",
            ),
            (&["--slice", "5ms"], "--slice must be at least 10ms"),
            (&["--design", "duet", "--window", "5ms"], "--window must be"),
            (&["--until-mde", "0"], "a positive percentage, not 0"),
            (&["--runs", "1", "--duration", "500ms"], "holds 0 windows"),
        ] {
            let err = bench(args).unwrap().check().unwrap_err().to_string();
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }

    #[test]
    fn bench_a_resp_is_listen_equals_redis() {
        let b = bench(&["--a-resp", "127.0.0.1:6380=127.0.0.1:6379"]).unwrap();
        let r = b.a_resp.unwrap();
        assert_eq!(r.listen.to_string(), "127.0.0.1:6380");
        assert_eq!(r.redis, "127.0.0.1:6379");
        for bad in [
            "127.0.0.1:6380",
            "nohost=127.0.0.1:6379",
            "127.0.0.1:6380=redis",
        ] {
            assert!(bench(&["--a-resp", bad]).is_err(), "{bad}");
        }
    }
}
