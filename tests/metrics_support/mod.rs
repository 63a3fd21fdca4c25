//! Helpers shared by the metrics tests: a Prometheus text parser, tap configs, records.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use phasescope::config::{Protocol, RouteRule, TapConfig};
use phasescope::phase::{Phase, Phases};
use phasescope::recorder::{ExchangeId, ExchangeRecord, RouteId};

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed text exposition (format 0.0.4), strict enough to catch malformed output.
#[derive(Debug)]
pub struct Exposition {
    pub text: String,
    pub samples: Vec<Sample>,
    /// family name → TYPE
    pub types: BTreeMap<String, String>,
}

impl Exposition {
    pub fn parse(text: &str) -> Self {
        let mut samples = Vec::new();
        let mut types = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE line");
                assert!(
                    types.insert(name.to_owned(), kind.to_owned()).is_none(),
                    "TYPE twice for {name}"
                );
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            samples.push(parse_sample(line));
        }
        Self {
            text: text.to_owned(),
            samples,
            types,
        }
    }

    /// Samples named `name` whose labels include every pair of `with`.
    pub fn find(&self, name: &str, with: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && with
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one sample matching, panicking if there is not exactly one.
    pub fn value(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        let found = self.find(name, with);
        assert_eq!(found.len(), 1, "{name} {with:?}: {found:?}");
        found[0].value
    }

    /// Distinct values of one label over the samples of `name`.
    pub fn label_values(&self, name: &str, label: &str) -> BTreeSet<String> {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter_map(|s| s.labels.get(label).cloned())
            .collect()
    }
}

fn parse_sample(line: &str) -> Sample {
    let (head, value) = line.rsplit_once(' ').expect("sample line has a value");
    let value = match value {
        "+Inf" => f64::INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}")),
    };
    let (name, labels) = match head.split_once('{') {
        None => (head.to_owned(), BTreeMap::new()),
        Some((name, rest)) => {
            let body = rest.strip_suffix('}').expect("labels end with }");
            (name.to_owned(), parse_labels(body, line))
        }
    };
    Sample {
        name,
        labels,
        value,
    }
}

fn parse_labels(body: &str, line: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if name.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'), "label value quoted in {line:?}");
        let mut value = String::new();
        loop {
            match chars.next().expect("unterminated label value") {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("dangling escape in {line:?}"),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        assert!(
            out.insert(name.trim().to_owned(), value).is_none(),
            "label twice in {line:?}"
        );
        match chars.next() {
            Some(',') => continue,
            None => break,
            Some(c) => panic!("unexpected {c:?} in {line:?}"),
        }
    }
    out
}

pub fn tap(name: &str, protocol: Protocol, routes: RouteRule) -> TapConfig {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut t = TapConfig::new(name, protocol, addr, "127.0.0.1:2");
    t.routes = routes;
    t
}

pub fn phases(values: &[(Phase, u64)]) -> Phases {
    let mut p = Phases::default();
    for &(phase, ns) in values {
        p.set(phase, ns);
    }
    p
}

pub fn exchange(
    route: RouteId,
    method: &'static str,
    status: u16,
    phases: Phases,
) -> ExchangeRecord<'static> {
    ExchangeRecord {
        id: ExchangeId::NONE,
        route,
        method,
        target: b"",
        status,
        request_bytes: 0,
        response_bytes: 0,
        phases,
        failure: None,
        error_reply: false,
    }
}

/// Runs `promtool check metrics` on an exposition; fails the test with promtool's words.
pub fn promtool_check(text: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!(
            "promtool is needed to check the exposition but could not run ({e}); \
             install it with `apt-get install prometheus`"
        ),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
