//! "Inside the upstream": per tap with a watched process, what a request costs the
//! server's CPU, how long its threads wait for one, where its CPU goes, and what a faster
//! parser could save at most (docs/report.md, docs/phases.md).

pub use crate::snapshot::hot::{HotFunction, DEFAULT_TOP};
pub use crate::snapshot::summary::{
    Basis, Component, Function, Inside, WhatIf, DEFAULT_WHAT_IF, PARSER,
};

use crate::units;

impl Function {
    /// The name as the text report shows it: a PHP closure with its line, since PHP
    /// names every closure of a namespace alike.
    fn shown(&self) -> String {
        match self.line {
            Some(line) if self.name.ends_with("{closure}") => format!("{}:{line}", self.name),
            _ => self.name.clone(),
        }
    }
}

impl Component {
    /// `label share`, and for a group its parts in brackets: `league/uri* 27 % (league/uri
    /// 14 %, league/uri-interfaces 13 %)`. `share` picks the self or inclusive share; a
    /// part without one is left out.
    fn shown(&self, share: impl Fn(&Component) -> Option<f64>) -> String {
        const PARTS: usize = 4;
        let mut out = format!(
            "{} {}",
            self.label,
            units::share(share(self).unwrap_or(0.0))
        );
        let mut parts: Vec<(&Component, f64)> = self
            .parts
            .iter()
            .filter_map(|c| share(c).map(|s| (c, s)))
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.name.cmp(&b.0.name)));
        if !parts.is_empty() {
            let mut shown: Vec<String> = parts
                .iter()
                .take(PARTS)
                .map(|(c, s)| format!("{} {}", c.label, units::share(*s)))
                .collect();
            if parts.len() > PARTS {
                shown.push("…".to_owned());
            }
            out.push_str(&format!(" ({})", shown.join(", ")));
        }
        out
    }
}

/// What a hot-path entry that waits stands for, in place of its what-if.
pub const WAIT_NOTE: &str = "a wait: its CPU is the kernel's putting threads to sleep and \
     waking them, paid at each hand-off of work between threads or wake-up of a loop; \
     fewer hand-offs save it, not a faster function";

impl HotFunction {
    /// One line of the hot path: its share and CPU per request, its callers, its what-if.
    pub fn line(&self) -> String {
        let mut l = format!("{} {}", self.shown(), units::share(self.listed));
        // A share well above what it lists: what it calls is listed apart.
        if self.inclusive - self.listed >= 0.005 && self.inclusive_is_its_own() {
            l.push_str(&format!(
                " ({} with all it calls)",
                units::share(self.inclusive)
            ));
        }
        l.push_str(&format!(", {} per request", units::duration(self.cpu)));
        if !self.callers.is_empty() {
            let callers: Vec<String> = self
                .callers
                .iter()
                .map(|c| format!("{} {}", c.name, units::share(c.share)))
                .collect();
            l.push_str(&format!(", from {}", callers.join(", ")));
        }
        if self.waits {
            l.push_str(&format!("; {WAIT_NOTE}"));
            return l;
        }
        let w = &self.what_if;
        let of_total = w
            .saved_of_total
            .map(|f| format!(" ({} of mean total)", units::share(f)))
            .unwrap_or_default();
        l.push_str(&format!(
            "; {}× faster saves ≤ {} per request{of_total}, ≤ {} more throughput if CPU-bound",
            trim(w.factor),
            units::duration(w.saved),
            units::share(w.throughput_gain)
        ));
        l
    }
}

impl Inside {
    /// A server of several processes: how many, and the share of the group's CPU each
    /// took, most first (`; 3 processes, CPU by process: 4102 51 %, 4103 49 %, 4101 0 %;`).
    /// Nothing for one process.
    fn processes_shown(&self) -> String {
        if self.processes.len() < 2 {
            return String::new();
        }
        let n = self.processes.len();
        let total: f64 = self.processes.iter().map(|p| p.cpu_seconds).sum();
        if total <= 0.0 {
            return format!("; {n} processes, none on a CPU");
        }
        let mut by_share: Vec<_> = self.processes.iter().collect();
        by_share.sort_by(|a, b| b.cpu_seconds.total_cmp(&a.cpu_seconds));
        let parts: Vec<String> = by_share
            .iter()
            .take(8)
            .map(|p| format!("{} {}", p.pid, units::share(p.cpu_seconds / total)))
            .collect();
        let more = if n > 8 { ", …" } else { "" };
        format!(
            "; {n} processes, CPU by process: {}{more}",
            parts.join(", ")
        )
    }

    /// The section as text lines, for the table and markdown reports.
    pub fn lines(&self) -> Vec<String> {
        let us = units::duration;
        let pid = self
            .pid
            .map_or_else(|| "no process now".to_owned(), |p| format!("pid {p}"));
        let mut head = format!(
            "inside {} ({pid}, {} thread{}, {:.0} s",
            self.comm,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.watched_seconds
        );
        if let Some(t) = self.traffic_seconds {
            head.push_str(&format!(" watched, {t:.0} s with traffic"));
        }
        if self.restarts > 0 {
            head.push_str(&format!(
                ", {} restart{}",
                self.restarts,
                if self.restarts == 1 { "" } else { "s" }
            ));
        }
        head.push_str(&self.processes_shown());
        if let Some(w) = self
            .watched_requests
            .filter(|&w| (w as f64) < 0.99 * self.requests as f64)
        {
            head.push_str(&format!(
                "; per request of the {w} of {} requests served while it was watched",
                self.requests
            ));
        }
        head.push_str(&format!(
            "): per request {} on CPU (user {}, system {}), {} waiting for a CPU",
            us(self.cpu_user + self.cpu_system),
            us(self.cpu_user),
            us(self.cpu_system),
            us(self.runqueue)
        ));
        if self.components.is_empty() {
            head.push_str("; where its CPU goes: not sampled ([tap.process] profile = true, or --profile-upstream)");
        } else {
            let parts: Vec<String> = self
                .components
                .iter()
                .take(8)
                .map(|c| c.shown(|c| Some(c.share)))
                .collect();
            let more = if self.components.len() > 8 {
                ", …"
            } else {
                ""
            };
            head.push_str(&format!("; its CPU: {}{more}", parts.join(", ")));
        }
        let mut out = vec![head];
        if let Some(coverage) = &self.coverage {
            out.extend(coverage.lines());
        }
        out.extend(self.hot_lines());
        out.extend(self.stack_lines());
        if self.requests == 0 {
            out.push("no requests in the window: nothing to divide by".to_owned());
        }
        if let Some(w) = &self.what_if {
            let of_total = w
                .saved_of_total
                .map(|f| format!(", {} of mean total", units::share(f)))
                .unwrap_or_default();
            let which = if w.upper_bound {
                format!(
                    " (its parser is inside {}, {} of its CPU: an upper bound)",
                    w.component,
                    units::share(w.share)
                )
            } else {
                let how = match w.basis {
                    Basis::Work => "of its CPU: it and the helpers it calls, not its callbacks",
                    _ => "of its CPU",
                };
                format!(" ({} is {} {how})", w.component, units::share(w.share))
            };
            out.push(format!(
                "what if: a parser {}× faster saves ≤ {} per request{of_total}; if the server is CPU-bound, at most {} more throughput{which}",
                trim(w.factor),
                units::duration(w.saved),
                units::share(w.throughput_gain)
            ));
        }
        if self.stripped {
            out.push(format!(
                "{} is stripped: its own code, its request parser included, reads as one component; build it with symbols (-g, not stripped) to see the parser by name",
                self.comm
            ));
        }
        out
    }
}

impl Inside {
    /// With call stacks: the hot path, one function a line, before everything else the
    /// stacks say (it answers "then what is it?").
    fn hot_lines(&self) -> Vec<String> {
        if self.hot.is_empty() {
            return Vec::new();
        }
        let mut out = vec![format!(
            "hot path (top {}: where its CPU goes, each with what it calls but the others listed, its CPU per request and its callers):",
            self.hot.len()
        )];
        out.extend(self.hot.iter().map(|h| format!("  {}", h.line())));
        out
    }

    /// With call stacks: the components' inclusive shares and the functions running.
    fn stack_lines(&self) -> Vec<String> {
        let Some(frames) = &self.frames else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut by_inclusive: Vec<&Component> = self
            .components
            .iter()
            .filter(|c| c.inclusive.is_some())
            .collect();
        by_inclusive.sort_by(|a, b| {
            b.inclusive
                .partial_cmp(&a.inclusive)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.name.cmp(&b.name))
        });
        // A component on (nearly) every stack holds the thread's start or `main`: "libc.so.6
        // 100 %" says nothing of where the CPU goes and read as if libc took it all. Those
        // are named apart, after the others.
        const EVERY: f64 = 0.995;
        let on_every: Vec<&str> = by_inclusive
            .iter()
            .filter(|c| c.inclusive.is_some_and(|i| i >= EVERY))
            .map(|c| c.label.as_str())
            .collect();
        let mut parts: Vec<String> = by_inclusive
            .iter()
            .filter(|c| c.inclusive.is_some_and(|i| i < EVERY))
            .take(8)
            .map(|c| c.shown(|c| c.inclusive))
            .collect();
        if !on_every.is_empty() {
            parts.push(format!("and on every stack {}", on_every.join(", ")));
        }
        let truncated = self
            .truncated
            .filter(|&t| t > 0.0)
            .map(|t| format!(", {} of stacks cut short", units::share(t)))
            .unwrap_or_default();
        // A frame in no mapping is a return address read wrong or code since unmapped:
        // said beside the cut-short share, as it makes the stacks as doubtful.
        let unmapped = self
            .unmapped
            .filter(|&t| t > 0.0)
            .map(|t| format!(", {} through [unmapped] code", units::share(t)))
            .unwrap_or_default();
        out.push(format!(
            "with all they call ({frames} call stacks{truncated}{unmapped}): {}",
            parts.join(", ")
        ));
        if !self.functions.is_empty() {
            // "Top functions, with all they call" is gone: `main`, the event loop and
            // syscall entry led it at 90–99 %; the hot path above says it better.
            let mut by_self: Vec<&Function> = self.functions.iter().collect();
            by_self.sort_by(|a, b| {
                b.self_share
                    .partial_cmp(&a.self_share)
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            out.push(format!(
                "top functions, running: {}",
                by_self
                    .iter()
                    .take(5)
                    .map(|x| {
                        let said = crate::snapshot::hot::kernel_hand_off(&x.name)
                            .filter(|_| x.object.starts_with("[kernel"))
                            .map(|what| format!(" ({what})"))
                            .unwrap_or_default();
                        format!("{}{said} {}", x.shown(), units::share(x.self_share))
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out
    }
}

fn trim(f: f64) -> String {
    if f.fract() == 0.0 {
        format!("{f:.0}")
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{FrameKind, ProfileSnapshot, UpstreamSnapshot};

    fn snapshot(samples: Option<&[(&str, u64)]>, stripped: Option<bool>) -> UpstreamSnapshot {
        UpstreamSnapshot {
            pid: Some(4242),
            comm: Some("webdis".into()),
            exe: Some("/usr/bin/webdis".into()),
            threads: 3,
            interval_seconds: 1.0,
            watched_seconds: 30.0,
            cpu_user_seconds: 0.91,
            cpu_system_seconds: 1.22,
            runqueue_seconds: 1.4,
            busiest_thread_seconds: 0.9,
            active_seconds: None,
            active_busiest_thread_seconds: None,
            cpus_allowed: None,
            traffic: None,
            cpu_seconds: None,
            context_switches_voluntary: 1,
            context_switches_involuntary: 1,
            restarts: 0,
            processes: None,
            profile: samples.map(|s| ProfileSnapshot {
                samples: s.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
                stripped,
                ..ProfileSnapshot::default()
            }),
            slices: None,
        }
    }

    #[test]
    fn per_request_figures_and_the_headline_line() {
        let i = Inside::new(&snapshot(None, None), 100_000, Some(1e-3), 2.0);
        assert!((i.cpu_user - 9.1e-6).abs() < 1e-12);
        assert!((i.runqueue - 14.0e-6).abs() < 1e-12);
        let l = &i.lines()[0];
        assert!(
            l.starts_with("inside webdis (pid 4242, 3 threads, 30 s): per request 21.3 µs on CPU (user 9.10 µs, system 12.2 µs), 14.0 µs waiting for a CPU"),
            "{l}"
        );
        assert!(l.contains("not sampled"), "{l}");
        assert!(i.what_if.is_none());
    }

    #[test]
    fn a_server_of_several_processes_says_which_share_each_took() {
        let mut u = snapshot(None, None);
        let p = |pid: u32, cpu_seconds: f64| crate::snapshot::upstream::ProcessCpu {
            pid,
            comm: "nginx".to_owned(),
            cpu_seconds,
        };
        u.processes = Some(vec![p(4101, 0.0), p(4102, 1.0), p(4103, 3.0)]);
        let l = &Inside::new(&u, 100_000, Some(1e-3), 2.0).lines()[0];
        assert!(
            l.starts_with("inside webdis (pid 4242, 3 threads, 30 s; 3 processes, CPU by process: 4103 75 %, 4102 25 %, 4101 0 %): per request"),
            "{l}"
        );
    }

    #[test]
    fn amdahl_on_the_parser_share() {
        let s = snapshot(
            Some(&[
                ("http_parser", 30),
                ("kernel_network", 50),
                ("libc.so.6", 20),
            ]),
            Some(false),
        );
        let i = Inside::new(&s, 100_000, Some(100e-6), 2.0);
        let w = i.what_if.clone().unwrap();
        assert!(!w.upper_bound);
        // 21.3 µs × 30 % × (1 − 1/2) = 3.195 µs; 1 / (0.7 + 0.15) = 1.176.
        assert!((w.saved - 3.195e-6).abs() < 1e-9, "{w:?}");
        assert!((w.throughput_gain - (1.0 / 0.85 - 1.0)).abs() < 1e-12);
        assert!((w.saved_of_total.unwrap() - 0.03195).abs() < 1e-6);
        let text = i.lines().join("\n");
        assert!(
            text.contains("its CPU: kernel network 50 %, HTTP parser 30 %, libc.so.6 20 %"),
            "{text}"
        );
        assert!(text.contains("a parser 2× faster saves ≤ 3.19 µs per request, 3 % of mean total; if the server is CPU-bound, at most 18 % more throughput"), "{text}");
    }

    /// The parser is never the running function (its time is in libc's memchr), but it
    /// is on the stack of 30 % of the samples, 10 of them in the server's code it calls
    /// back: the what-if takes the 20 % that are its own work.
    #[test]
    fn the_what_if_takes_the_parsers_own_work() {
        let mut s = snapshot(Some(&[("libc.so.6", 30), ("webdis", 70)]), Some(false));
        s.profile_mut().frames = Some(FrameKind::Native);
        s.profile_mut().inclusive = Some(
            [("http_parser", 30), ("libc.so.6", 30), ("webdis", 100)]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
        );
        let frame = |name: &str, component: &str| crate::snapshot::Frame {
            name: name.into(),
            object: if component == "http_parser" {
                "webdis"
            } else {
                component
            }
            .into(),
            component: component.into(),
            line: None,
            at_line: None,
        };
        s.profile_mut().stacks = Some(crate::snapshot::Stacks {
            frames: vec![
                frame("main", "webdis"),
                frame("http_parser_execute", "http_parser"),
                frame("memchr", "libc.so.6"),
                frame("on_message_complete", "webdis"),
                frame("write", "libc.so.6"),
            ],
            stacks: [(vec![0, 1, 2], 20), (vec![0, 1, 3, 4], 10), (vec![0], 70)]
                .into_iter()
                .map(|(frames, samples)| crate::snapshot::Stack { frames, samples })
                .collect(),
            ..Default::default()
        });
        s.profile_mut().functions = Some(vec![
            crate::snapshot::FunctionSnapshot {
                name: "main".into(),
                object: "webdis".into(),
                component: "webdis".into(),
                self_samples: 0,
                inclusive_samples: 100,
                line: None,
            },
            crate::snapshot::FunctionSnapshot {
                name: "http_parser_execute".into(),
                object: "webdis".into(),
                component: "http_parser".into(),
                self_samples: 0,
                inclusive_samples: 30,
                line: None,
            },
            crate::snapshot::FunctionSnapshot {
                name: "memchr".into(),
                object: "libc.so.6".into(),
                component: "libc.so.6".into(),
                self_samples: 30,
                inclusive_samples: 30,
                line: None,
            },
        ]);
        let i = Inside::new(&s, 100_000, Some(100e-6), 2.0);
        let parser = i.components.iter().find(|c| c.name == PARSER).unwrap();
        assert_eq!(parser.share, 0.0);
        assert_eq!(parser.inclusive, Some(0.3));
        assert_eq!(parser.work, Some(0.2));
        let w = i.what_if.clone().unwrap();
        assert!(w.basis == Basis::Work && !w.upper_bound);
        assert!((w.share - 0.2).abs() < 1e-12, "{w:?}");
        assert_eq!(i.functions[1].name, "http_parser_execute");
        assert!((i.functions[2].self_share - 0.3).abs() < 1e-12);
        let text = i.lines().join("\n");
        assert!(
            text.contains("with all they call (native call stacks): HTTP parser 30 %, libc.so.6 30 %, and on every stack webdis (own code)"),
            "{text}"
        );
        assert!(
            !text.contains("top functions, with all they call"),
            "{text}"
        );
        assert!(
            text.contains("top functions, running: memchr 30 %"),
            "{text}"
        );
        assert!(
            text.contains(
                "(HTTP parser is 20 % of its CPU: it and the helpers it calls, not its callbacks)"
            ),
            "{text}"
        );
    }

    /// PHP names every closure of a namespace alike: the text shows their first lines.
    #[test]
    fn php_closures_are_told_apart_by_their_line() {
        let mut s = snapshot(Some(&[("php-burn.php", 100)]), Some(false));
        s.profile_mut().frames = Some(FrameKind::Php);
        s.profile_mut().inclusive = Some([("php-burn.php".to_owned(), 100)].into_iter().collect());
        s.profile_mut().functions = Some(
            [(40, 100), (90, 60)]
                .iter()
                .map(|&(line, n)| crate::snapshot::FunctionSnapshot {
                    name: r"Burn\Server::Burn\{closure}".into(),
                    object: "/srv/php-burn.php".into(),
                    component: "php-burn.php".into(),
                    self_samples: n / 2,
                    inclusive_samples: n,
                    line: Some(line),
                })
                .collect(),
        );
        let text = Inside::new(&s, 10, None, 2.0).lines().join("\n");
        assert!(
            text.contains(r"top functions, running: Burn\Server::Burn\{closure}:40 50 %, Burn\Server::Burn\{closure}:90 30 %"),
            "{text}"
        );
    }

    /// amphp's URI handling in two Composer packages of one library: one group with its
    /// parts beside it; its inclusive share counts a stack that holds both once.
    #[test]
    fn packages_of_one_library_read_as_one_group_with_their_parts() {
        use crate::report::export::stacks::tests::frame;
        use crate::snapshot::OTHER_STACKS;
        use crate::snapshot::{Stack, Stacks};
        let mut s = snapshot(
            Some(&[
                ("league/uri", 14),
                ("league/uri-interfaces", 13),
                ("stream_io", 20),
                ("php_builtin", 53),
            ]),
            Some(false),
        );
        s.profile_mut().frames = Some(FrameKind::Php);
        s.profile_mut().inclusive = Some(
            [
                ("index.php", 100),
                ("php_builtin", 53),
                ("league/uri", 24),
                ("league/uri-interfaces", 13),
                ("stream_io", 20),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
        );
        let stack = |frames: &[u32], samples| Stack {
            frames: frames.to_vec(),
            samples,
        };
        let stacks = Stacks {
            frames: vec![
                frame("{main}", "/srv/index.php", "index.php"),
                frame(
                    r"League\Uri\Http::new",
                    "/srv/vendor/league/uri/Http.php",
                    "league/uri",
                ),
                frame(
                    r"League\Uri\UriString::parse",
                    "/srv/vendor/league/uri-interfaces/UriString.php",
                    "league/uri-interfaces",
                ),
                frame("fwrite", "", "stream_io"),
                frame("strlen", "", "php_builtin"),
                frame(OTHER_STACKS, "", ""),
            ],
            stacks: vec![
                stack(&[0, 1], 14),
                stack(&[0, 1, 2], 10),
                stack(&[0, 2], 3),
                stack(&[0, 3], 20),
                stack(&[0, 4], 53),
            ],
            truncated_samples: 0,
            unmapped_samples: 0,
        };
        s.profile_mut().stacks = Some(stacks.clone());
        let i = Inside::new(&s, 100, None, 2.0);
        assert!(
            !i.components
                .iter()
                .any(|c| c.name.starts_with("league/uri") && c.name != "league/uri*"),
            "{:?}",
            i.components
        );
        let group = i
            .components
            .iter()
            .find(|c| c.name == "league/uri*")
            .unwrap();
        assert_eq!(group.samples, 27);
        assert_eq!(group.parts.len(), 2);
        // 14 + 10 + 3 stacks hold a part: 27, not 24 + 13.
        assert!((group.inclusive.unwrap() - 0.27).abs() < 1e-12, "{group:?}");
        let text = i.lines().join("\n");
        assert!(
            text.contains("its CPU: php_builtin 53 %, league/uri* 27 % (league/uri 14 %, league/uri-interfaces 13 %), stream_io 20 %"),
            "{text}"
        );
        assert!(
            text.contains("php_builtin 53 %, league/uri* 27 % (league/uri 24 %, league/uri-interfaces 13 %), stream_io 20 %, and on every stack index.php"),
            "{text}"
        );
        let json = serde_json::to_value(&i).unwrap();
        let parts = &json["components"][1]["parts"];
        assert_eq!(parts[0]["name"], "league/uri", "{json}");
        assert!(json["components"][0].get("parts").is_none(), "{json}");

        // The stack that holds the second part alone went beyond the cap: its 3 samples
        // are in `[other stacks]`, and the part's count outside the kept stacks adds them.
        let mut capped = stacks;
        capped.stacks[2] = stack(&[5], 3);
        s.profile_mut().stacks = Some(capped);
        let i = Inside::new(&s, 100, None, 2.0);
        let group = i
            .components
            .iter()
            .find(|c| c.name == "league/uri*")
            .unwrap();
        assert!((group.inclusive.unwrap() - 0.27).abs() < 1e-12, "{group:?}");

        // One package of the library alone reads as itself.
        let alone = snapshot(Some(&[("league/uri", 14), ("php_builtin", 86)]), None);
        let text = Inside::new(&alone, 100, None, 2.0).lines().join("\n");
        assert!(text.contains("php_builtin 86 %, league/uri 14 %"), "{text}");
    }

    /// The hot path comes first after the headline and the samples' coverage: one line per function with its share,
    /// CPU per request, callers and what-if; a PHP function with its script and line.
    #[test]
    fn the_hot_path_leads_the_stack_lines() {
        use crate::snapshot::{Frame, Stack, Stacks};
        let mut s = snapshot(
            Some(&[("php-burn.php", 70), ("php_builtin", 30)]),
            Some(false),
        );
        s.profile_mut().frames = Some(FrameKind::Php);
        let frame = |name: &str, line: Option<u32>| Frame {
            name: name.into(),
            object: if line.is_some() {
                "/srv/app/vendor/uri.php".into()
            } else {
                String::new()
            },
            component: "php-burn.php".into(),
            line,
            at_line: None,
        };
        s.profile_mut().stacks = Some(Stacks {
            frames: vec![
                frame("{main}", None),
                frame("Fiber::resume", None),
                frame(r"App\Driver::handle", Some(10)),
                frame(r"League\Uri\Http::createFromComponents", Some(40)),
                frame("fwrite", None),
            ],
            stacks: vec![
                Stack {
                    frames: vec![0, 1, 2, 3],
                    samples: 60,
                },
                Stack {
                    frames: vec![0, 1, 2, 4],
                    samples: 30,
                },
                Stack {
                    frames: vec![0, 1, 2],
                    samples: 10,
                },
            ],
            truncated_samples: 0,
            unmapped_samples: 0,
        });
        // 2.13 ms per request (0.91 + 1.22 s over 1000), mean total 10 ms.
        let i = Inside::new(&s, 1000, Some(10e-3), 2.0);
        let lines = i.lines();
        // The samples' coverage qualifies every share: it follows the headline.
        assert!(
            lines[1].starts_with("samples: 100 at 1000 Hz"),
            "{lines:#?}"
        );
        // (It covers 5 % here: 100 samples of 2.13 s; its warning follows it.)
        let at = lines
            .iter()
            .position(|l| l.starts_with("hot path (top 2:"))
            .unwrap_or_else(|| panic!("{lines:#?}"));
        assert_eq!(at, 3, "{lines:#?}");
        assert_eq!(
            lines[at + 1],
            r"  League\Uri\Http::createFromComponents (uri.php:40) 60 %, 1.28 ms per request, from App\Driver::handle 100 %; 2× faster saves ≤ 639 µs per request (6 % of mean total), ≤ 43 % more throughput if CPU-bound",
        );
        // fwrite, built into PHP, is the handler's cost; the URI library, listed apart, is
        // not its to save, nor shown as its share with all it calls.
        assert!(
            lines[at + 2].starts_with(r"  App\Driver::handle (uri.php:10) 40 %, 852 µs per request, from Fiber::resume 100 %; 2× faster saves ≤ 426 µs"),
            "{lines:#?}"
        );
        assert!(
            lines[at + 3].starts_with("with all they call (php call stacks)"),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_stripped_binary_bounds_the_parser_by_its_own_code() {
        let s = snapshot(
            Some(&[("webdis", 12), ("kernel_network", 48), ("libc.so.6", 40)]),
            Some(true),
        );
        let i = Inside::new(&s, 1000, None, 2.0);
        let w = i.what_if.clone().unwrap();
        assert!(w.upper_bound);
        assert_eq!(w.component, "webdis (own code)");
        let text = i.lines().join("\n");
        assert!(text.contains("webdis (own code) 12 %"), "{text}");
        assert!(text.contains("an upper bound"), "{text}");
        assert!(text.contains("is stripped"), "{text}");
    }
}
