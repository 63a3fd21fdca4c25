//! The configuration layer as a user meets it: the shipped config.toml, error positions,
//! override precedence, and the `check-config` / `run` exit codes of the real binary.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::Parser;
use phasescope::cli::{Cli, Command as Sub};
use phasescope::config::{
    Config, ConfigError, ConfigOrigin, Limits, Location, LogFormat, Overrides, Profile, Protocol,
    RouteRule, Source, Timeouts,
};

const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config.toml");

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A fresh file under cargo's per-target temp dir (no cleanup needed between runs).
fn temp_file(name: &str, text: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "config-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

// ---------------------------------------------------------------- the shipped config

#[test]
fn shipped_config_has_the_documented_values() {
    let c = Config::load(Path::new(SHIPPED)).unwrap();
    assert_eq!(c.admin.listen, addr("127.0.0.1:9464"));
    assert_eq!(c.taps.len(), 1);
    let t = &c.taps[0];
    assert_eq!(t.name, "webdis");
    assert_eq!(t.protocol, Protocol::Http);
    assert_eq!(t.listen, addr("127.0.0.1:8080"));
    assert_eq!(t.upstream, "127.0.0.1:7379");
    assert_eq!(t.routes, RouteRule::Webdis);
    assert_eq!(t.route_segments, 1);
    assert_eq!(t.max_routes, 64);
    assert_eq!(t.limits.max_head_bytes, 65536);
    assert_eq!(t.limits.max_headers, 100);
    assert_eq!(t.limits.max_connections, 16384);
    assert_eq!(t.timeouts.head, Duration::from_secs(10));
    assert_eq!(t.timeouts.connect, Duration::from_secs(3));
    assert_eq!(t.timeouts.response, Duration::from_secs(60));
    assert_eq!(t.timeouts.idle, Duration::from_secs(300));
    assert_eq!(t.timeouts.transfer, Duration::from_secs(60));
    assert!(c.correlate.is_empty());
    assert_eq!(c.log.format, LogFormat::Text);
    assert_eq!(c.log.access_log, None);
    assert_eq!(c.log.slow_log, None);
    assert_eq!(c.log.slow_threshold, Duration::from_millis(100));
    assert!(c.metrics.enabled);
    assert!(c.metrics.buckets.is_empty());
    assert_eq!(c.shutdown_grace, Duration::from_secs(10));
}

#[test]
fn builtin_default_is_the_shipped_file() {
    let shipped = Config::load(Path::new(SHIPPED)).unwrap();
    let builtin = Config::builtin().unwrap();
    assert_eq!(format!("{shipped:?}"), format!("{builtin:?}"));
}

/// Uncomments every `# key = value` and `# [table]` line of the shipped file.
fn uncomment_all(text: &str) -> String {
    text.lines()
        .map(|line| {
            let Some(rest) = line.strip_prefix("# ") else {
                return line.to_owned();
            };
            let ident_len = rest
                .bytes()
                .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
                .count();
            let is_key = ident_len > 0 && rest[ident_len..].starts_with(" = ");
            if is_key || rest.starts_with('[') {
                rest.to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn commented_keys_show_the_true_defaults_and_the_examples_are_valid() {
    let text = std::fs::read_to_string(SHIPPED).unwrap();
    let all = uncomment_all(&text);
    assert_ne!(all, text, "nothing was uncommented");
    let c = Config::from_toml_str(&all, Path::new("uncommented.toml"))
        .unwrap_or_else(|e| panic!("the commented examples do not form a valid config: {e}"));
    // The commented RESP tap and correlation example.
    assert_eq!(c.taps.len(), 2);
    assert_eq!(c.taps[1].protocol, Protocol::Resp);
    assert_eq!(c.correlate.len(), 1);
    assert_eq!(c.correlate[0].http, c.taps[0].name);
    assert_eq!(c.correlate[0].resp, c.taps[1].name);
    // Every commented value that is documented as the default is the default.
    let t = &c.taps[0];
    assert_eq!(
        format!("{:?}", t.limits),
        format!("{:?}", Limits::default())
    );
    assert_eq!(
        format!("{:?}", t.timeouts),
        format!("{:?}", Timeouts::default())
    );
    let d = Config::builtin().unwrap();
    assert_eq!(t.route_segments, d.taps[0].route_segments);
    assert_eq!(t.max_routes, d.taps[0].max_routes);
    assert_eq!(c.log.format, d.log.format);
    assert_eq!(c.log.slow_threshold, d.log.slow_threshold);
    assert_eq!(c.metrics.enabled, d.metrics.enabled);
    assert_eq!(c.metrics.buckets, d.metrics.buckets);
    assert_eq!(c.shutdown_grace, d.shutdown_grace);
    let (p, dp) = (&t.process, &d.taps[0].process);
    assert_eq!(p.find, Some(phasescope::config::FindProcess::Auto));
    assert_eq!(
        (p.interval, p.profile, p.frequency),
        (dp.interval, dp.profile, dp.frequency)
    );
}

// ---------------------------------------------------------------- error positions

fn error_of(text: &str) -> ConfigError {
    match Config::from_toml_str(text, Path::new("t.toml")) {
        Ok(c) => panic!("accepted: {c:?}\n{text}"),
        Err(e) => e,
    }
}

/// Asserts that `text` fails at `line`, with a message containing `words`.
#[track_caller]
fn fails_at(text: &str, line: usize, words: &str) {
    let e = error_of(text);
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("t.toml:{line}:")),
        "expected line {line}, got: {shown}\n--- config:\n{text}"
    );
    assert!(
        shown.to_lowercase().contains(&words.to_lowercase()),
        "expected {words:?} in: {shown}"
    );
    assert!(!shown.contains('\n'), "not one line: {shown:?}");
}

const TAP_A: &str =
    "[[tap]]\nname = \"a\"\nlisten = \"127.0.0.1:18001\"\nupstream = \"127.0.0.1:7379\"\n";

#[test]
fn the_process_section_names_one_process_and_usable_values() {
    let ok = format!(
        "{TAP_A}[tap.process]\npid_file = \"/run/x.pid\"\ninterval = \"250ms\"\nprofile = true\nfrequency = 499\n[[tap.process.component]]\nname = \"json\"\nsymbol = \"^json_\"\n"
    );
    let c = Config::from_toml_str(&ok, Path::new("t.toml")).unwrap();
    let p = &c.taps[0].process;
    assert_eq!(p.interval, Duration::from_millis(250));
    assert_eq!((p.profile, p.frequency), (Profile::On, 499));
    // On demand beside true and false; anything else says which three it takes.
    let demand = ok.replace("profile = true", "profile = \"on-demand\"");
    let c = Config::from_toml_str(&demand, Path::new("t.toml")).unwrap();
    assert_eq!(c.taps[0].process.profile, Profile::OnDemand);
    let wrong = ok.replace("profile = true", "profile = \"sometimes\"");
    let e = Config::from_toml_str(&wrong, Path::new("t.toml")).unwrap_err();
    assert!(e.to_string().contains("\"on-demand\""), "{e}");
    assert_eq!(p.components[0].name, "json");
    fails_at(
        &format!("{TAP_A}[tap.process]\npid = 7\npid_file = \"/run/x.pid\"\n"),
        6,
        "process.pid and process.pid_file both say which process",
    );
    fails_at(
        &format!("{TAP_A}[tap.process]\nfind = \"none\"\npid = 7\n"),
        6,
        "keep one",
    );
    fails_at(
        &format!("{TAP_A}[tap.process]\ninterval = \"0s\"\n"),
        6,
        "process.interval is zero",
    );
    fails_at(
        &format!("{TAP_A}[tap.process]\nfrequency = 0\n"),
        6,
        "between 1 and 10000",
    );
    fails_at(
        &format!("{TAP_A}[tap.process]\nfind = \"maybe\"\n"),
        6,
        "unknown variant",
    );
    fails_at(
        &format!("{TAP_A}[tap.process]\n[[tap.process.component]]\nname = \"x\"\nsymbol = \"(\"\n"),
        8,
        "is not a regex",
    );
    fails_at(
        &format!(
            "{TAP_A}[tap.process]\n[[tap.process.component]]\nname = \"x y\"\nobject = \"z\"\n"
        ),
        7,
        "not usable as a metric label",
    );
}

#[test]
fn a_config_without_taps_is_refused() {
    fails_at("[admin]\nlisten = \"127.0.0.1:9464\"\n", 1, "no [[tap]]");
    fails_at("", 1, "no [[tap]]");
}

#[test]
fn tap_names_must_be_label_safe_and_unique() {
    fails_at(
        "[[tap]]\nlisten = \"127.0.0.1:18001\"\nname = \"a b\"\nupstream = \"h:1\"\n",
        3,
        "letters, digits",
    );
    let two = format!(
        "{TAP_A}\n[[tap]]\nlisten = \"127.0.0.1:18002\"\nupstream = \"h:1\"\nname = \"a\"\n"
    );
    fails_at(&two, 9, "unique");
}

#[test]
fn listen_addresses_must_be_distinct() {
    let two = format!(
        "{TAP_A}\n[[tap]]\nname = \"b\"\nupstream = \"h:1\"\nlisten = \"127.0.0.1:18001\"\n"
    );
    fails_at(&two, 9, "tap `a` also uses");
    let onto_admin = format!("[admin]\nlisten = \"127.0.0.1:18001\"\n\n{TAP_A}");
    fails_at(&onto_admin, 6, "admin server");
    let wildcard =
        format!("{TAP_A}\n[[tap]]\nname = \"b\"\nupstream = \"h:1\"\nlisten = \"0.0.0.0:18001\"\n");
    fails_at(&wildcard, 9, "also uses");
}

#[test]
fn port_zero_listeners_do_not_clash() {
    let text = "[admin]\nlisten = \"127.0.0.1:0\"\n\
        [[tap]]\nname = \"a\"\nlisten = \"127.0.0.1:0\"\nupstream = \"h:1\"\n\
        [[tap]]\nname = \"b\"\nlisten = \"127.0.0.1:0\"\nupstream = \"h:1\"\n";
    let c = Config::from_toml_str(text, Path::new("t.toml")).unwrap();
    assert_eq!(c.taps.len(), 2);
}

#[test]
fn upstream_must_be_host_port() {
    let text = "[[tap]]\nname = \"a\"\nlisten = \"127.0.0.1:18001\"\n\nupstream = \"localhost\"\n";
    fails_at(text, 5, "host:port");
    let text = "[[tap]]\nname = \"a\"\nlisten = \"127.0.0.1:18001\"\nupstream = \"h:0\"\n";
    fails_at(text, 4, "port 0");
}

const TWO_TAPS: &str = "\
[[tap]]
name = \"web\"
listen = \"127.0.0.1:18001\"
upstream = \"127.0.0.1:7379\"

[[tap]]
name = \"redis\"
protocol = \"resp\"
listen = \"127.0.0.1:18002\"
upstream = \"127.0.0.1:6379\"
";

#[test]
fn correlate_names_an_http_and_a_resp_tap() {
    let ok =
        format!("{TWO_TAPS}\n[[correlate]]\nkind = \"webdis\"\nhttp = \"web\"\nresp = \"redis\"\n");
    let c = Config::from_toml_str(&ok, Path::new("t.toml")).unwrap();
    assert_eq!(c.correlate.len(), 1);

    let unknown_tap =
        format!("{TWO_TAPS}\n[[correlate]]\nkind = \"webdis\"\nhttp = \"web\"\nresp = \"nope\"\n");
    fails_at(&unknown_tap, 15, "no tap has that name");
    let swapped =
        format!("{TWO_TAPS}\n[[correlate]]\nkind = \"webdis\"\nhttp = \"redis\"\nresp = \"web\"\n");
    fails_at(&swapped, 14, "with protocol \"http\"");
    let kind =
        format!("{TWO_TAPS}\n[[correlate]]\nhttp = \"web\"\nresp = \"redis\"\nkind = \"amphp\"\n");
    fails_at(&kind, 15, "only kind");
}

#[test]
fn limits_and_routes_have_minimums() {
    let cases = [
        ("max_routes = 0\n", "max_routes is 0"),
        ("route_segments = 0\n", "route_segments is 0"),
        ("[tap.limits]\nmax_head_bytes = 1023\n", "at least 1024"),
        ("[tap.limits]\nmax_headers = 0\n", "max_headers is 0"),
        (
            "[tap.limits]\nmax_connections = 0\n",
            "max_connections is 0",
        ),
    ];
    for (extra, words) in cases {
        let text = format!("{TAP_A}{extra}");
        let line = TAP_A.lines().count() + extra.lines().count();
        fails_at(&text, line, words);
    }
    let fine = format!("{TAP_A}[tap.limits]\nmax_head_bytes = 1024\n");
    assert!(Config::from_toml_str(&fine, Path::new("t.toml")).is_ok());
}

#[test]
fn durations_must_be_positive() {
    for key in ["head", "connect", "response", "idle", "transfer"] {
        let text = format!("{TAP_A}[tap.timeouts]\n{key} = \"0s\"\n");
        fails_at(&text, 6, &format!("timeouts.{key} is zero"));
    }
    fails_at(
        &format!("{TAP_A}[log]\nformat = \"json\"\nslow_threshold = \"0ms\"\n"),
        7,
        "slow_threshold is zero",
    );
    fails_at(
        &format!("shutdown_grace = \"0s\"\n{TAP_A}"),
        1,
        "shutdown_grace is zero",
    );
    fails_at(
        &format!("{TAP_A}[tap.timeouts]\nidle = \"10 parsecs\"\n"),
        6,
        "",
    );
}

#[test]
fn buckets_are_positive_finite_and_increasing() {
    let text = format!("{TAP_A}[metrics]\nbuckets = [\n  0.001,\n  0.01,\n  0.01,\n]\n");
    fails_at(&text, 9, "strictly increasing");
    fails_at(
        &format!("{TAP_A}[metrics]\nbuckets = [0.0]\n"),
        6,
        "positive",
    );
    fails_at(
        &format!("{TAP_A}[metrics]\nbuckets = [1.0, inf]\n"),
        6,
        "finite",
    );
    fails_at(&format!("{TAP_A}[metrics]\nbuckets = [nan]\n"), 6, "finite");
    let ok = format!("{TAP_A}[metrics]\nbuckets = [0.0000003, 0.001, 30.0]\n");
    assert!(Config::from_toml_str(&ok, Path::new("t.toml")).is_ok());
}

#[test]
fn unknown_keys_give_file_and_line() {
    fails_at(&format!("{TAP_A}listne = \"x\"\n"), 5, "unknown field");
    fails_at(
        &format!("{TAP_A}\n[tap.limits]\nmax_header = 3\n"),
        7,
        "max_header",
    );
    fails_at(&format!("nonsense = 1\n{TAP_A}"), 1, "nonsense");
    fails_at(&format!("{TAP_A}[logs]\nformat = \"text\"\n"), 5, "logs");
}

#[test]
fn type_and_syntax_errors_give_file_and_line() {
    fails_at(
        &format!("{TAP_A}[tap.limits]\nmax_headers = \"many\"\n"),
        6,
        "",
    );
    fails_at(
        "[[tap]]\nname = \"a\"\nlisten = \"localhost:80\"\nupstream = \"h:1\"\n",
        3,
        "",
    );
    fails_at(&format!("{TAP_A}protocol = \"gopher\"\n"), 5, "");
    fails_at(&format!("{TAP_A}\nname = \n"), 6, "");
}

#[test]
fn a_missing_required_key_points_at_its_table() {
    let text = format!("{TAP_A}\n[[tap]]\nname = \"b\"\nlisten = \"127.0.0.1:18002\"\n");
    let e = error_of(&text);
    assert!(e.to_string().contains("upstream"), "{e}");
    assert!(e.line().is_some(), "{e}");
}

#[test]
fn an_unreadable_file_names_the_file() {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-config.toml");
    let e = Config::load(&missing).unwrap_err();
    assert_eq!(e.location, Location::Path(missing.clone()));
    assert!(e
        .to_string()
        .starts_with(&format!("{}: ", missing.display())));
}

// ---------------------------------------------------------------- overrides

/// `run` flags as the command line would give them.
fn flags(args: &[&str]) -> Overrides {
    let mut argv = vec!["phasescope", "run"];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(argv).unwrap();
    let Sub::Run(run) = &cli.command else {
        panic!("not run")
    };
    run.overrides(cli.log_format.as_deref()).unwrap()
}

fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

fn resolve(file: &Path, flag_args: &[&str], vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::resolve(Some(file), flags(flag_args), env(vars)).map(|(c, _)| c)
}

#[test]
fn precedence_is_env_over_flags_over_file() {
    let file = temp_file("p.toml", TAP_A);
    let listen = |c: Config| c.taps[0].listen.port();

    assert_eq!(listen(resolve(&file, &[], &[]).unwrap()), 18001);
    assert_eq!(
        listen(resolve(&file, &["--listen", "127.0.0.1:18002"], &[]).unwrap()),
        18002
    );
    assert_eq!(
        listen(
            resolve(
                &file,
                &["--listen", "127.0.0.1:18002"],
                &[("PHASESCOPE_LISTEN", "127.0.0.1:18003")]
            )
            .unwrap()
        ),
        18003
    );
    assert_eq!(
        listen(resolve(&file, &[], &[("PHASESCOPE_LISTEN", "127.0.0.1:18003")]).unwrap()),
        18003
    );
}

#[test]
fn every_override_reaches_its_key() {
    let file = temp_file("all.toml", TAP_A);
    let c = resolve(
        &file,
        &[
            "--upstream",
            "redis.local:6379",
            "--protocol",
            "resp",
            "--admin",
            "127.0.0.1:19464",
            "--log-format",
            "json",
            "--access-log",
            "-",
            "--slow-log",
            "slow.jsonl",
            "--slow-threshold",
            "250ms",
            "--no-metrics",
        ],
        &[],
    )
    .unwrap();
    let t = &c.taps[0];
    assert_eq!(t.upstream, "redis.local:6379");
    assert_eq!(t.protocol, Protocol::Resp);
    assert_eq!(c.admin.listen, addr("127.0.0.1:19464"));
    assert_eq!(c.log.format, LogFormat::Json);
    assert_eq!(c.log.access_log, Some(PathBuf::from("-")));
    assert_eq!(c.log.slow_log, Some(PathBuf::from("slow.jsonl")));
    assert_eq!(c.log.slow_threshold, Duration::from_millis(250));
    assert!(!c.metrics.enabled);

    // The variable form of each, over the flags above.
    let c = resolve(
        &file,
        &["--no-metrics", "--log-format", "json", "--protocol", "resp"],
        &[
            ("PHASESCOPE_UPSTREAM", "other:1"),
            ("PHASESCOPE_PROTOCOL", "http"),
            ("PHASESCOPE_ADMIN", "127.0.0.1:19465"),
            ("PHASESCOPE_LOG_FORMAT", "text"),
            ("PHASESCOPE_ACCESS_LOG", "a.jsonl"),
            ("PHASESCOPE_SLOW_LOG", "s.jsonl"),
            ("PHASESCOPE_SLOW_THRESHOLD", "2s"),
            ("PHASESCOPE_NO_METRICS", "0"),
        ],
    )
    .unwrap();
    let t = &c.taps[0];
    assert_eq!(t.upstream, "other:1");
    assert_eq!(t.protocol, Protocol::Http);
    assert_eq!(c.admin.listen, addr("127.0.0.1:19465"));
    assert_eq!(c.log.format, LogFormat::Text);
    assert_eq!(c.log.access_log, Some(PathBuf::from("a.jsonl")));
    assert_eq!(c.log.slow_log, Some(PathBuf::from("s.jsonl")));
    assert_eq!(c.log.slow_threshold, Duration::from_secs(2));
    assert!(c.metrics.enabled);
}

#[test]
fn overrides_touch_only_the_first_tap() {
    let file = temp_file("two.toml", TWO_TAPS);
    let c = resolve(&file, &["--listen", "127.0.0.1:18009"], &[]).unwrap();
    assert_eq!(c.taps[0].listen.port(), 18009);
    assert_eq!(c.taps[1].listen.port(), 18002);
}

#[test]
fn listen_and_upstream_create_a_tap_when_the_file_has_none() {
    let file = temp_file("empty.toml", "[admin]\nlisten = \"127.0.0.1:19464\"\n");
    let c = resolve(
        &file,
        &[
            "--listen",
            "127.0.0.1:18001",
            "--upstream",
            "127.0.0.1:7379",
        ],
        &[("PHASESCOPE_PROTOCOL", "resp")],
    )
    .unwrap();
    assert_eq!(c.taps.len(), 1);
    assert_eq!(c.taps[0].name, "default");
    assert_eq!(c.taps[0].protocol, Protocol::Resp);
    assert_eq!(c.taps[0].upstream, "127.0.0.1:7379");

    let e = resolve(&file, &["--listen", "127.0.0.1:18001"], &[]).unwrap_err();
    assert_eq!(e.location, Location::Override(Source::Flag("--listen")));
    let e = resolve(&file, &[], &[]).unwrap_err();
    assert!(
        e.to_string().starts_with(&format!("{}:1:", file.display())),
        "{e}"
    );
}

#[test]
fn an_error_caused_by_an_override_names_it() {
    let file = temp_file("clash.toml", TAP_A);
    let e = resolve(&file, &["--listen", "127.0.0.1:9464"], &[]).unwrap_err();
    assert!(e.to_string().starts_with("--listen: "), "{e}");
    let e = resolve(&file, &[], &[("PHASESCOPE_ADMIN", "127.0.0.1:18001")]).unwrap_err();
    assert!(e.to_string().starts_with("PHASESCOPE_ADMIN: "), "{e}");
    let e = resolve(&file, &["--upstream", "nohost"], &[]).unwrap_err();
    assert!(e.to_string().starts_with("--upstream: "), "{e}");
    let e = resolve(&file, &[], &[("PHASESCOPE_SLOW_THRESHOLD", "0s")]).unwrap_err();
    assert!(
        e.to_string().starts_with("PHASESCOPE_SLOW_THRESHOLD: "),
        "{e}"
    );
    let e = resolve(&file, &[], &[("PHASESCOPE_LISTEN", "nowhere")]).unwrap_err();
    assert!(e.to_string().starts_with("PHASESCOPE_LISTEN: "), "{e}");
    // A file error that no override touched still points into the file.
    let bad = temp_file("bad.toml", &format!("{TAP_A}max_routes = 0\n"));
    let e = resolve(&bad, &["--listen", "127.0.0.1:18002"], &[]).unwrap_err();
    assert!(
        e.to_string().starts_with(&format!("{}:5:", bad.display())),
        "{e}"
    );
}

#[test]
fn the_config_file_comes_from_the_flag_then_the_variable() {
    let a = temp_file("a.toml", TAP_A);
    let b = temp_file(
        "b.toml",
        "[[tap]]\nname = \"b\"\nlisten = \"127.0.0.1:18005\"\nupstream = \"h:1\"\n",
    );
    let b_var = [("PHASESCOPE_CONFIG", b.to_str().unwrap())];
    let (c, origin) = Config::resolve(Some(&a), Overrides::default(), env(&b_var)).unwrap();
    assert_eq!(c.taps[0].name, "a");
    assert_eq!(origin, ConfigOrigin::File(a.clone()));
    let (c, origin) = Config::resolve(None, Overrides::default(), env(&b_var)).unwrap();
    assert_eq!(c.taps[0].name, "b");
    assert_eq!(origin, ConfigOrigin::File(b.clone()));
}

// ---------------------------------------------------------------- the binary

fn phasescope(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_phasescope"));
    cmd.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PHASESCOPE_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(vars.iter().copied());
    cmd.output().unwrap()
}

#[test]
fn check_config_accepts_the_shipped_file() {
    let out = phasescope(&["check-config", "config.toml"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout.trim(), "ok: config.toml: 1 taps (webdis)");

    let two = temp_file("two.toml", TWO_TAPS);
    let out = phasescope(&["check-config", two.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 taps (web, redis)"));
}

/// A config path that is no regular file, or a file past the size cap, is refused at
/// once: `check-config /dev/zero` read 2 GiB in 3.6 s before.
#[test]
fn check_config_refuses_devices_directories_and_huge_files_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.toml");
    std::fs::write(&huge, "#".repeat(2 << 20)).unwrap();
    let huge = huge.to_str().unwrap().to_owned();
    let dir_path = dir.path().to_str().unwrap().to_owned();
    for (path, says) in [
        ("/dev/zero", "not a regular file"),
        (dir_path.as_str(), "not a regular file"),
        (huge.as_str(), "larger than 1024 KiB"),
    ] {
        let out = phasescope(&["check-config", path], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {stderr}");
        assert!(
            stderr.starts_with(&format!("{path}: cannot read the config file: "))
                && stderr.contains(says),
            "{path}: {stderr}"
        );
    }
}

#[test]
fn check_config_takes_the_global_config_flag() {
    let two = temp_file("two.toml", TWO_TAPS);
    let two = two.to_str().unwrap();
    for args in [
        ["check-config", "--config", two],
        ["--config", two, "check-config"],
    ] {
        let out = phasescope(&args, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("2 taps (web, redis)"));
    }
    // Two different files: an error naming both, never one of them checked silently.
    let out = phasescope(&["check-config", "--config", "config.toml", two], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("config.toml") && stderr.contains(two),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_host_name_as_listen_address_says_an_ip_is_expected() {
    let file = temp_file(
        "named.toml",
        "[[tap]]\nname = \"web\"\nlisten = \"localhost:8080\"\nupstream = \"127.0.0.1:7379\"\n",
    );
    let out = phasescope(&["check-config", file.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("{}:3:", file.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "\"localhost:8080\" is not an IP address and port such as \"127.0.0.1:8080\""
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("invalid socket address syntax"),
        "{stderr}"
    );
}

#[test]
fn check_config_rejects_a_bad_file_with_its_position() {
    let bad = temp_file(
        "bad.toml",
        &format!("{TAP_A}\n[tap.limits]\nmax_headers = 0\n"),
    );
    let out = phasescope(&["check-config", bad.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("{}:7:", bad.display())),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let out = phasescope(&["check-config", "/nonexistent/phasescope.toml"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn run_refuses_bad_overrides_before_starting() {
    let out = phasescope(&["run"], &[("PHASESCOPE_SLOW_THRESHOLD", "soon")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("PHASESCOPE_SLOW_THRESHOLD: "),
        "{stderr}"
    );

    let out = phasescope(&["run", "--listen", "127.0.0.1:9464"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("--listen: "), "{stderr}");

    let bad = temp_file("bad.toml", "[[tap]]\nname = \"x\"\n");
    let out = phasescope(&["--config", bad.to_str().unwrap(), "run"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = phasescope(&["run"], &[("PHASESCOPE_CONFIG", bad.to_str().unwrap())]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("{}:", bad.display())),
        "{stderr}"
    );
}

// ---------------------------------------------------------------- the documentation

const DOC: &str = include_str!("../docs/config.md");

#[test]
fn the_documented_example_is_valid() {
    let start = DOC.rfind("```toml\n").expect("an example") + "```toml\n".len();
    let len = DOC[start..].find("```").expect("the example's end");
    let c = Config::from_toml_str(&DOC[start..start + len], Path::new("docs/config.md"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.taps.len(), 2);
    assert_eq!(c.correlate.len(), 1);
}

#[test]
fn the_documentation_names_every_flag_and_variable() {
    for key in phasescope::config::Key::ALL {
        assert!(DOC.contains(key.flag()), "{} undocumented", key.flag());
        assert!(DOC.contains(key.env()), "{} undocumented", key.env());
    }
    assert!(DOC.contains(phasescope::config::ENV_CONFIG));
}

#[test]
fn regex_route_rules_are_read_and_checked() {
    let base = "[[tap]]\nname = \"api\"\nlisten = \"127.0.0.1:18080\"\nupstream = \"127.0.0.1:7379\"\nroutes = \"regex\"\n";
    let good = format!("{base}[[tap.route]]\nname = \"users\"\npattern = \"^/users/\"\n");
    let config = Config::from_toml_str(&good, Path::new("t.toml")).unwrap();
    assert_eq!(config.taps[0].route_rules.len(), 1);
    assert_eq!(config.taps[0].route_rules[0].name, "users");
    fails_at(
        &format!("{base}[[tap.route]]\nname = \"bad\"\npattern = \"^/(unclosed\"\n"),
        5,
        "not a valid regular expression",
    );
    fails_at(base, 5, "");
}

/// `max_routes` past the memory ceiling (docs/deploy.md, Memory): `check-config` still
/// accepts the file and says what its routes would cost, over all taps (before, it said
/// nothing of `max_routes = 65534`, a `/metrics` of about 3.5 GiB).
#[test]
fn check_config_warns_when_the_routes_would_pass_the_memory_ceiling() {
    let tap = |i: usize, max_routes: usize| {
        format!("[[tap]]\nname = \"t{i}\"\nlisten = \"127.0.0.1:{}\"\nupstream = \"127.0.0.1:1\"\nmax_routes = {max_routes}\n", 21000 + i)
    };
    let check = |text: String| {
        let file = temp_file("routes.toml", &text);
        let out = phasescope(&["check-config", file.to_str().unwrap()], &[]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let ceiling = phasescope::config::ceiling::ROUTES_CEILING;
    assert_eq!(check(tap(0, ceiling)), "", "at the ceiling");
    assert_eq!(check(tap(0, ceiling / 2) + &tap(1, ceiling / 2)), "");
    let two = check(tap(0, ceiling / 2) + &tap(1, ceiling / 2 + 1));
    assert!(
        two.starts_with("warning:") && two.contains(&format!("{} routes", ceiling + 1)),
        "{two}"
    );
    let most = check(tap(0, 65_534));
    assert!(
        most.contains("65534 routes") && most.contains("/metrics is about 3584 MiB"),
        "{most}"
    );
}
