//! What a tap's upstream process did over a window, per request: its CPU, its wait for a
//! CPU, where the CPU went (components, functions, the hot path) and what a faster parser
//! could save at most (docs/phases.md, docs/report.md). The report prints it, the findings reason
//! over it.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::Serialize;

use super::components::{component_group, component_label};
use super::coverage::Coverage;
use super::hot::{hot_path, HotFunction};
use super::stacks::FrameKind;
use super::upstream::{ProcessCpu, UpstreamSnapshot};
use super::work::Work;

/// The component a faster parser would shrink.
pub const PARSER: &str = "http_parser";
/// The what-if factor when `--what-if` is not given.
pub const DEFAULT_WHAT_IF: f64 = 2.0;

/// One tap's upstream process over the report's window.
#[derive(Debug, Clone, Serialize)]
pub struct Inside {
    pub comm: String,
    pub pid: Option<u32>,
    pub threads: u64,
    /// A server of several processes: each one's CPU over the window, lowest pid first
    /// (empty for one process, and then absent from the report's JSON).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessCpu>,
    pub watched_seconds: f64,
    /// Of `watched_seconds`, the reads that held traffic: what the figures per request
    /// are read over. Absent when the snapshot does not say (then the whole window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic_seconds: Option<f64>,
    pub restarts: u64,
    pub requests: u64,
    /// The tap's exchanges that ended while the process was watched, what the figures per
    /// request divide (absent when the snapshot does not say: then `requests`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watched_requests: Option<u64>,
    /// Per request, in seconds: thread-time over the reads that held traffic divided by
    /// requests (docs/phases.md).
    pub cpu_user: f64,
    pub cpu_system: f64,
    pub runqueue: f64,
    /// Shares of the sampled CPU, largest first; empty when not profiled.
    pub components: Vec<Component>,
    /// What the call stacks' frames are (`native`, `php`); null without call stacks.
    pub frames: Option<FrameKind>,
    /// With call stacks: the functions with the most inclusive samples, with their self
    /// and inclusive shares of all samples.
    pub functions: Vec<Function>,
    /// With call stacks: the hot path ([`super::hot`]), most listed samples first, at
    /// most [`super::hot::MAX_HOT`] (the report keeps its `--top`).
    pub hot: Vec<HotFunction>,
    /// With call stacks: the fraction of samples whose stack was cut before its root.
    pub truncated: Option<f64>,
    /// With call stacks: the fraction of samples with a frame in no executable mapping
    /// (`[unmapped]`).
    pub unmapped: Option<f64>,
    /// The main binary has no symbol table: its own code (parser included) is one
    /// component named after it.
    pub stripped: bool,
    pub what_if: Option<WhatIf>,
    /// When sampled: how much of the process's CPU the samples cover, and the sampler's
    /// own CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Component {
    pub name: String,
    /// How the report names it: `webdis (own code)`, `kernel network`.
    pub label: String,
    pub samples: u64,
    /// Fraction of all samples: those whose running function is the component's (self;
    /// the shares add up to 1).
    pub share: f64,
    /// With call stacks: the fraction of samples whose stack holds a frame of the
    /// component (at least `share`; they do not add up to 1).
    pub inclusive: Option<f64>,
    /// With call stacks: the fraction of samples that are the component's own work, it
    /// and the helpers it calls but not what it calls back ([`super::work`]; the shares
    /// add up to 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<f64>,
    /// A group of components that are one library to its users (the packages of
    /// `league/uri*`, OpenSSL's libssl and libcrypto), its parts largest first; empty for
    /// a component of its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Component>,
}

/// One function of the call stacks.
#[derive(Debug, Clone, Serialize)]
pub struct Function {
    pub name: String,
    pub object: String,
    pub component: String,
    /// Fraction of all samples with this function running.
    #[serde(rename = "self")]
    pub self_share: f64,
    /// Fraction of all samples with this function anywhere on the stack.
    pub inclusive: f64,
    /// A PHP function's first line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// What the what-if's share of the parser counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// With call stacks: the parser's own work, it and the helpers it calls (the C
    /// library, the allocator, regex, the kernel) but not the server's code it calls
    /// back ([`super::work`]).
    Work,
    /// Without call stacks: the parser's own functions, a lower bound of its cost when
    /// it calls helpers.
    Functions,
    /// The parser has no name of its own (a stripped binary): the binary's own code, an
    /// upper bound.
    UpperBound,
}

/// A parser `factor`× faster, by Amdahl's law on its share of the CPU.
#[derive(Debug, Clone, Serialize)]
pub struct WhatIf {
    pub factor: f64,
    /// The component taken as the parser.
    pub component: String,
    /// What `share` counts.
    pub basis: Basis,
    /// True when the parser has no name of its own (a stripped binary): the share is the
    /// whole of the binary's own code, an upper bound.
    pub upper_bound: bool,
    pub share: f64,
    /// CPU saved per request, seconds.
    pub saved: f64,
    /// `saved` as a fraction of the mean `total`.
    pub saved_of_total: Option<f64>,
    /// If the server is CPU-bound: at most this much more throughput (a fraction).
    pub throughput_gain: f64,
}

impl Inside {
    /// `requests` and `mean_total` (seconds) come from the tap's `total` phase over the
    /// same window as `u`.
    pub fn new(u: &UpstreamSnapshot, requests: u64, mean_total: Option<f64>, factor: f64) -> Self {
        // The exchanges served while a process was watched, when the snapshot says them:
        // those served while it was gone or not found yet had none of their CPU counted.
        let watched_requests = u.traffic.and_then(|t| t.exchanges).filter(|&n| n > 0);
        let divisor = watched_requests.unwrap_or(requests);
        let per = |s: f64| {
            if divisor == 0 {
                0.0
            } else {
                s / divisor as f64
            }
        };
        let comm = runs_as(u).unwrap_or_else(|| "the upstream".to_owned());
        let own = own_component(u);
        let own_label = own.as_ref().map(|_| format!("{comm} (own code)"));
        let own = own.zip(own_label);
        let own = own
            .as_ref()
            .map(|(name, label)| (name.as_str(), label.as_str()));
        let (components, total) = shares(u, own);
        let components = grouped(components, u, total);
        let functions = match (u.functions(), total > 0) {
            (Some(f), true) => f
                .iter()
                .map(|f| Function {
                    name: f.name.clone(),
                    object: f.object.clone(),
                    component: f.component.clone(),
                    self_share: f.self_samples as f64 / total as f64,
                    inclusive: f.inclusive_samples as f64 / total as f64,
                    line: f.line,
                })
                .collect(),
            _ => Vec::new(),
        };
        let truncated = u
            .stacks()
            .filter(|_| total > 0)
            .map(|s| s.truncated_samples as f64 / total as f64);
        let unmapped = u
            .stacks()
            .filter(|_| total > 0)
            .map(|s| s.unmapped_samples as f64 / total as f64);
        let stripped = u.profile.as_ref().and_then(|p| p.stripped).unwrap_or(false);
        let work = u.work();
        let cpu = per(work.cpu());
        let hot = u
            .stacks()
            .map(|s| hot_path(s, cpu, mean_total, factor))
            .unwrap_or_default();
        let what_if = what_if(
            &components,
            own.map(|(name, _)| name),
            stripped,
            cpu,
            mean_total,
            factor,
        );
        Self {
            comm,
            pid: u.pid,
            threads: u.threads,
            processes: u.processes.clone().unwrap_or_default(),
            watched_seconds: u.watched_seconds,
            traffic_seconds: u.traffic.map(|t| t.seconds),
            restarts: u.restarts,
            requests,
            watched_requests,
            cpu_user: per(work.cpu_user_seconds),
            cpu_system: per(work.cpu_system_seconds),
            runqueue: per(work.runqueue_seconds),
            components,
            frames: u.frames(),
            functions,
            hot,
            truncated,
            unmapped,
            stripped,
            what_if,
            coverage: Coverage::of(u),
        }
    }
}

/// What the process runs, as its users name it: its `comm` (the name it was started by,
/// `redis-server`), or the main binary's file name when the kernel cut `comm` short (15
/// bytes) and the file's name goes on from it. Not the file name alone: Debian's
/// `/usr/bin/redis-server` is a symlink to `redis-check-rdb`, and the report read
/// `redis-server's parser is inside redis-check-rdb (own code)`.
pub fn runs_as(u: &UpstreamSnapshot) -> Option<String> {
    let comm = u.comm.as_deref()?;
    const COMM_MAX: usize = 15;
    let file = u
        .exe
        .as_deref()
        .and_then(|e| std::path::Path::new(e).file_name())
        .map(|f| f.to_string_lossy().into_owned());
    Some(match file {
        Some(f) if comm.len() == COMM_MAX && f.len() > COMM_MAX && f.starts_with(comm) => f,
        _ => comm.to_owned(),
    })
}

/// The component that stands for the binary's own code: the one named after its file
/// (the samples' objects are files; the report labels it after what the process runs,
/// [`runs_as`]).
fn own_component(u: &UpstreamSnapshot) -> Option<String> {
    let exe = u.exe.as_deref()?;
    std::path::Path::new(exe)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
}

/// The own code's component and its label.
type Own<'a> = Option<(&'a str, &'a str)>;

/// The components' self shares, and with call stacks their inclusive shares and their own
/// work, over `total` samples (returned beside them).
fn shares(u: &UpstreamSnapshot, own: Own<'_>) -> (Vec<Component>, u64) {
    let mut components = components(u.samples(), own);
    let total: u64 = components.iter().map(|c| c.samples).sum();
    if let (Some(inclusive), true) = (u.inclusive(), total > 0) {
        for c in &mut components {
            c.inclusive =
                Some(inclusive.get(&c.name).copied().unwrap_or(c.samples) as f64 / total as f64);
        }
        // A component that is never the running function but holds frames.
        for (name, &n) in inclusive {
            if n > 0 && !components.iter().any(|c| &c.name == name) {
                components.push(Component {
                    label: label(name, own),
                    name: name.clone(),
                    samples: 0,
                    share: 0.0,
                    inclusive: Some(n as f64 / total as f64),
                    work: None,
                    parts: Vec::new(),
                });
            }
        }
    }
    if let Some(stacks) = u.stacks().filter(|_| total > 0) {
        let work = Work::of(stacks);
        for c in &mut components {
            c.work = work.share(&c.name);
        }
    }
    (components, total)
}

fn components(samples: Option<&BTreeMap<String, u64>>, own: Own<'_>) -> Vec<Component> {
    let Some(samples) = samples else {
        return Vec::new();
    };
    let total: u64 = samples.values().sum();
    if total == 0 {
        return Vec::new();
    }
    let mut out: Vec<Component> = samples
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(name, &n)| Component {
            label: label(name, own),
            name: name.clone(),
            samples: n,
            share: n as f64 / total as f64,
            inclusive: None,
            work: None,
            parts: Vec::new(),
        })
        .collect();
    out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.name.cmp(&b.name)));
    out
}

/// `components` with those of one group ([`component_group`]) as one
/// entry holding them as its parts, when two or more of a group were sampled; largest
/// first. A group's self share is its parts' sum. Its inclusive share is counted over
/// the snapshot's stacks (a stack that holds two of its parts counts once); the samples
/// of the stacks beyond the snapshot's cap add what the part with the most of them
/// has outside the kept stacks, so the share is exact without that cap and a lower
/// bound with it.
fn grouped(components: Vec<Component>, u: &UpstreamSnapshot, total: u64) -> Vec<Component> {
    let mut groups: BTreeMap<String, Vec<Component>> = BTreeMap::new();
    let mut out = Vec::with_capacity(components.len());
    for c in components {
        match component_group(&c.name) {
            Some(group) => groups.entry(group).or_default().push(c),
            None => out.push(c),
        }
    }
    for (name, mut parts) in groups {
        if parts.len() < 2 {
            out.append(&mut parts);
            continue;
        }
        let samples: u64 = parts.iter().map(|c| c.samples).sum();
        let inclusive = group_inclusive(&parts, u, total);
        parts.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then(
                    b.inclusive
                        .partial_cmp(&a.inclusive)
                        .unwrap_or(Ordering::Equal),
                )
                .then(a.name.cmp(&b.name))
        });
        out.push(Component {
            label: component_label(&name).to_owned(),
            name,
            samples,
            share: if total == 0 {
                0.0
            } else {
                samples as f64 / total as f64
            },
            inclusive,
            work: sum_work(&parts),
            parts,
        });
    }
    out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.name.cmp(&b.name)));
    out
}

/// The fraction of samples whose stack holds a frame of any of `parts` (see [`grouped`]).
fn group_inclusive(parts: &[Component], u: &UpstreamSnapshot, total: u64) -> Option<f64> {
    let counts = u.inclusive()?;
    if total == 0 || parts.iter().all(|c| c.inclusive.is_none()) {
        return None;
    }
    let count = |c: &Component| counts.get(&c.name).copied().unwrap_or(c.samples);
    let Some(stacks) = u.stacks() else {
        return parts
            .iter()
            .map(count)
            .max()
            .map(|n| n as f64 / total as f64);
    };
    let mut held = 0u64;
    let mut by_part = vec![0u64; parts.len()];
    for stack in &stacks.stacks {
        let mut any = false;
        for (i, part) in parts.iter().enumerate() {
            if stacks.frames_of(stack).any(|f| f.component == part.name) {
                by_part[i] += stack.samples;
                any = true;
            }
        }
        if any {
            held += stack.samples;
        }
    }
    let beyond = parts
        .iter()
        .zip(&by_part)
        .map(|(c, &kept)| count(c).saturating_sub(kept))
        .max()
        .unwrap_or(0);
    Some(((held + beyond) as f64 / total as f64).min(1.0))
}

fn label(name: &str, own: Own<'_>) -> String {
    if let Some((_, label)) = own.filter(|(own, _)| *own == name) {
        return label.to_owned();
    }
    component_label(name).to_owned()
}

fn what_if(
    components: &[Component],
    own: Option<&str>,
    stripped: bool,
    cpu_per_request: f64,
    mean_total: Option<f64>,
    factor: f64,
) -> Option<WhatIf> {
    let (c, upper_bound) = match components.iter().find(|c| c.name == PARSER) {
        Some(c) => (c, false),
        None if stripped => (
            components.iter().find(|c| Some(c.name.as_str()) == own)?,
            true,
        ),
        None => return None,
    };
    // The parser's own work: what it costs with the helpers it calls, without the
    // server's code it calls back (a parser's callbacks are the request's whole work on
    // Webdis and Node). For a stripped binary's own code the self share stays the bound:
    // its work holds `main` and all the server does.
    let (basis, p) = match (upper_bound, c.work) {
        (true, _) => (Basis::UpperBound, c.share),
        (false, Some(work)) => (Basis::Work, work),
        (false, None) => (Basis::Functions, c.share),
    };
    let saved = cpu_per_request * p * (1.0 - 1.0 / factor);
    Some(WhatIf {
        factor,
        component: c.label.clone(),
        basis,
        upper_bound,
        share: p,
        saved,
        saved_of_total: mean_total.filter(|t| *t > 0.0).map(|t| saved / t),
        throughput_gain: super::hot::throughput_gain(p, factor),
    })
}

/// A group's work: its parts' (each sample is one component's work, so they add up).
fn sum_work(parts: &[Component]) -> Option<f64> {
    parts.iter().filter_map(|c| c.work).reduce(|a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(comm: &str, exe: &str) -> UpstreamSnapshot {
        serde_json::from_value(serde_json::json!({
            "pid": 7, "comm": comm, "exe": exe, "threads": 1,
            "interval_seconds": 1.0, "watched_seconds": 10.0,
            "cpu_user_seconds": 1.0, "cpu_system_seconds": 0.0, "runqueue_seconds": 0.0,
            "context_switches_voluntary": 0, "context_switches_involuntary": 0, "restarts": 0,
            "samples": { exe.rsplit('/').next().unwrap(): 90, "kernel": 10 },
            "stripped": true
        }))
        .unwrap()
    }

    #[test]
    fn the_process_is_named_by_what_it_runs_not_by_its_binarys_file() {
        // Debian: /usr/bin/redis-server → redis-check-rdb, started as redis-server.
        let u = snapshot("redis-server", "/usr/bin/redis-check-rdb");
        let i = Inside::new(&u, 100, Some(1e-3), DEFAULT_WHAT_IF);
        assert_eq!(i.comm, "redis-server");
        let own = i.components.iter().find(|c| c.name == "redis-check-rdb");
        assert_eq!(
            own.map(|c| c.label.as_str()),
            Some("redis-server (own code)")
        );
        assert_eq!(
            i.what_if.map(|w| w.component),
            Some("redis-server (own code)".to_owned())
        );
        // A comm the kernel cut at 15 bytes reads as the file's whole name.
        let u = snapshot("a-long-server-n", "/opt/a-long-server-name");
        assert_eq!(runs_as(&u).as_deref(), Some("a-long-server-name"));
    }
}
