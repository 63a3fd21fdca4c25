//! A tap's sampled stacks as a pprof profile (`report --pprof`): the gzip-compressed
//! `perftools.profiles.Profile` that `go tool pprof`, Pyroscope and Parca read.
//!
//! Two values per sample, `samples/count` and `cpu/nanoseconds` (samples × the sampling
//! period): the sampler takes one sample per period of CPU time of a thread, so the
//! second is the CPU time the stack stands for. One Location per frame of the snapshot's
//! table, with one Line to its Function; native frames sit in a Mapping per object.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Context;
use prost::Message;

use super::pprof_proto as pb;
use super::stacks::{FrameKind, TapStacks};
use crate::snapshot::{Stacks, OTHER_STACKS, TRUNCATED};

/// The sampling frequency of a snapshot that does not give its own (the sampler's default).
pub const DEFAULT_FREQUENCY_HZ: u32 = crate::snapshot::DEFAULT_FREQUENCY_HZ;

/// The string table: "" at index 0, each string once.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The tables of a profile being built, each entry made once on first use. The string
/// table's order is the order of the calls, so the steps below run in a fixed order.
struct Tables<'a> {
    strings: Strings,
    mappings: Vec<pb::Mapping>,
    mapping_of: HashMap<&'a str, u64>,
    functions: Vec<pb::Function>,
    function_of: HashMap<(&'a str, &'a str, Option<u32>), u64>,
    locations: Vec<pb::Location>,
    /// The location of a stack whose frames are all outside the table.
    unknown: Option<u64>,
}

impl<'a> Tables<'a> {
    fn new() -> Self {
        Tables {
            strings: Strings::new(),
            mappings: Vec::new(),
            mapping_of: HashMap::new(),
            functions: Vec::new(),
            function_of: HashMap::new(),
            locations: Vec::new(),
            unknown: None,
        }
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> pb::ValueType {
        pb::ValueType {
            r#type: self.strings.get(ty),
            unit: self.strings.get(unit),
        }
    }

    /// The mapping of an object's code.
    fn mapping(&mut self, object: &'a str) -> u64 {
        if let Some(&id) = self.mapping_of.get(object) {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        self.mappings.push(pb::Mapping {
            id,
            filename: self.strings.get(object),
            // Symbolized already: a reader must not look for the binary.
            has_functions: true,
            ..Default::default()
        });
        self.mapping_of.insert(object, id);
        id
    }

    fn function(&mut self, name: &'a str, object: &'a str, line: Option<u32>) -> u64 {
        if let Some(&id) = self.function_of.get(&(name, object, line)) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let name_id = self.strings.get(name);
        self.functions.push(pb::Function {
            id,
            name: name_id,
            system_name: name_id,
            filename: self.strings.get(object),
            start_line: line.map_or(0, i64::from),
        });
        self.function_of.insert((name, object, line), id);
        id
    }

    /// One location per frame of the snapshot's table, in its order (location `i + 1` is
    /// frame `i`). pprof takes the first mapping for the main binary (`File:` in its
    /// header): the executable's, when its code is on a stack, rather than whichever
    /// object the frame table happens to start with.
    fn frames(&mut self, t: &TapStacks<'a>) {
        let stacks: &'a Stacks = t.stacks;
        let native = t.kind() == FrameKind::Native;
        let exe = t
            .upstream
            .exe
            .as_deref()
            .and_then(|e| e.rsplit('/').next())
            .filter(|e| !e.is_empty());
        if native {
            if let Some(exe) = exe.filter(|e| stacks.frames.iter().any(|f| f.object == *e)) {
                self.mapping(exe);
            }
        }
        self.locations.reserve(stacks.frames.len());
        for (i, f) in stacks.frames.iter().enumerate() {
            let special = f.name == TRUNCATED || f.name == OTHER_STACKS;
            // Native code lies in an object; PHP's `object` is a script (a source file,
            // not a mapping of memory), and the two marker frames lie nowhere.
            let mapping_id = if native && !special && !f.object.is_empty() {
                self.mapping(&f.object)
            } else {
                0
            };
            let name = if f.name.is_empty() {
                "[unknown]"
            } else {
                f.name.as_str()
            };
            let function_id = self.function(name, &f.object, f.line);
            self.locations.push(pb::Location {
                id: i as u64 + 1,
                mapping_id,
                // The line it ran where known (Python), else the function's first.
                line: vec![pb::Line {
                    function_id,
                    line: f.at_line.or(f.line).map_or(0, i64::from),
                }],
                ..Default::default()
            });
        }
    }

    /// A stack whose frames are all outside the table (none expected) still counts: it
    /// is one `[unknown]` location, made on first use.
    fn unknown_location(&mut self) -> u64 {
        if let Some(id) = self.unknown {
            return id;
        }
        let name = self.strings.get("[unknown]");
        let function_id = self.functions.len() as u64 + 1;
        self.functions.push(pb::Function {
            id: function_id,
            name,
            system_name: name,
            ..Default::default()
        });
        let id = self.locations.len() as u64 + 1;
        self.locations.push(pb::Location {
            id,
            line: vec![pb::Line {
                function_id,
                line: 0,
            }],
            ..Default::default()
        });
        self.unknown = Some(id);
        id
    }

    /// One sample per stack that has any, its values the samples and the CPU time they
    /// stand for (`period` each).
    fn samples(&mut self, stacks: &'a Stacks, period: i64) -> Vec<pb::Sample> {
        let component_key = self.strings.get("component");
        let mut samples = Vec::with_capacity(stacks.stacks.len());
        for stack in stacks.stacks.iter().filter(|s| s.samples > 0) {
            // pprof lists a sample's locations leaf first; the snapshot's stacks are root
            // first.
            let mut location_id: Vec<u64> = stack
                .frames
                .iter()
                .rev()
                .filter(|&&i| (i as usize) < stacks.frames.len())
                .map(|&i| u64::from(i) + 1)
                .collect();
            if location_id.is_empty() {
                location_id.push(self.unknown_location());
            }
            // The leaf's component, as a label: `-tagfocus component=regex` in pprof.
            let label = stacks
                .frames_of(stack)
                .last()
                .map(|leaf| pb::Label {
                    key: component_key,
                    str: self.strings.get(&leaf.component),
                    ..Default::default()
                })
                .into_iter()
                .collect();
            let n = i64_of(stack.samples);
            samples.push(pb::Sample {
                location_id,
                value: vec![n, n.saturating_mul(period)],
                label,
            });
        }
        samples
    }

    /// What the profile is of, and what its stacks could not show.
    fn comments(&mut self, t: &TapStacks<'_>, frequency: u32) -> Vec<i64> {
        let mut comment = vec![self.strings.get(&format!(
            "phasescope: CPU of {}, {} frames sampled at {frequency} Hz",
            t.describe(),
            t.kind().name()
        ))];
        if t.stacks.truncated_samples > 0 {
            comment.push(self.strings.get(&format!(
                "{} samples start at {TRUNCATED}: their callers could not be followed",
                t.stacks.truncated_samples
            )));
        }
        comment
    }
}

/// The profile of one tap's stacks; `since_unix` is when its window started (the
/// snapshot's `since_unix`), for the profile's time.
pub fn profile(t: &TapStacks<'_>, since_unix: Option<f64>) -> pb::Profile {
    let frequency = t
        .upstream
        .frequency_hz()
        .filter(|&f| f > 0)
        .unwrap_or(DEFAULT_FREQUENCY_HZ);
    let period = 1_000_000_000 / i64::from(frequency);
    let mut tables = Tables::new();
    let sample_type = vec![
        tables.value_type("samples", "count"),
        tables.value_type("cpu", "nanoseconds"),
    ];
    let period_type = Some(tables.value_type("cpu", "nanoseconds"));
    tables.frames(t);
    let sample = tables.samples(t.stacks, period);
    let comment = tables.comments(t, frequency);
    let watched = t.upstream.watched_seconds;
    pb::Profile {
        sample_type,
        sample,
        mapping: tables.mappings,
        location: tables.locations,
        function: tables.functions,
        time_nanos: since_unix
            .filter(|s| s.is_finite() && *s > 0.0)
            // Nanoseconds since 1970 are past f64's 53 bits: to the microsecond, the
            // precision of the snapshot's own time.
            .map_or(0, |s| ((s * 1e6).round() as i64).saturating_mul(1000)),
        duration_nanos: if watched.is_finite() && watched > 0.0 {
            (watched * 1e9) as i64
        } else {
            0
        },
        period_type,
        period,
        comment,
        string_table: tables.strings.table,
        ..Default::default()
    }
}

/// The profile serialized and gzip-compressed, as pprof files are on disk.
pub fn encode(p: &pb::Profile) -> anyhow::Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&p.encode_to_vec())
        .and_then(|()| gz.finish())
        .context("compressing the pprof profile")
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::report::export::stacks::tests::{frame, small};
    use crate::snapshot::FrameKind;
    use crate::snapshot::UpstreamSnapshot;
    use crate::snapshot::{Stack, Stacks};

    fn upstream(stacks: Stacks, frequency_hz: Option<u32>) -> UpstreamSnapshot {
        let mut u: UpstreamSnapshot = serde_json::from_str(
            r#"{"pid":7,"comm":"webdis","exe":null,"threads":1,"interval_seconds":1.0,
                "watched_seconds":2.5,"cpu_user_seconds":0.08,"cpu_system_seconds":0.0,
                "runqueue_seconds":0.0,"context_switches_voluntary":0,
                "context_switches_involuntary":0,"restarts":0}"#,
        )
        .unwrap();
        u.profile_mut().stacks = Some(stacks);
        u.profile_mut().frequency_hz = frequency_hz;
        u
    }

    fn decode(gz: &[u8]) -> pb::Profile {
        assert_eq!(&gz[..2], [0x1f, 0x8b], "gzip magic");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut raw)
            .unwrap();
        pb::Profile::decode(raw.as_slice()).unwrap()
    }

    /// The function names of a sample, leaf first, read back through the tables.
    fn names(p: &pb::Profile, s: &pb::Sample) -> Vec<String> {
        s.location_id
            .iter()
            .map(|id| {
                let loc = p.location.iter().find(|l| l.id == *id).unwrap();
                assert_eq!(loc.line.len(), 1);
                let f = p
                    .function
                    .iter()
                    .find(|f| f.id == loc.line[0].function_id)
                    .unwrap();
                p.string_table[f.name as usize].clone()
            })
            .collect()
    }

    /// The small table's profile, encoded and decoded back.
    fn small_profile() -> pb::Profile {
        let u = upstream(small(), Some(250));
        let t = TapStacks {
            tap: "webdis",
            upstream: &u,
            stacks: u.stacks().unwrap(),
        };
        decode(&encode(&profile(&t, Some(1_796_056_807.25))).unwrap())
    }

    fn string(p: &pb::Profile, i: i64) -> &str {
        p.string_table[i as usize].as_str()
    }

    #[test]
    fn decoded_back_with_its_value_types_period_and_times() {
        let p = small_profile();
        let s = |i: i64| string(&p, i);
        assert_eq!(p.string_table[0], "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|v| (s(v.r#type), s(v.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        let period_type = p.period_type.as_ref().unwrap();
        assert_eq!(
            (s(period_type.r#type), s(period_type.unit)),
            ("cpu", "nanoseconds")
        );
        assert_eq!(p.period, 4_000_000, "250 Hz: a sample per 4 ms of CPU");
        assert_eq!(p.duration_nanos, 2_500_000_000);
        assert_eq!(p.time_nanos, 1_796_056_807_250_000_000);
        // Each string once.
        let mut seen = std::collections::HashSet::new();
        assert!(
            p.string_table.iter().all(|x| seen.insert(x)),
            "{:?}",
            p.string_table
        );
    }

    #[test]
    fn samples_leaf_first_with_samples_and_cpu_time() {
        let p = small_profile();
        // The stack with no samples is left out; the others in order, leaf first.
        let got: Vec<(Vec<String>, Vec<i64>)> = p
            .sample
            .iter()
            .map(|x| (names(&p, x), x.value.clone()))
            .collect();
        let want = |frames: &[&str], n: i64| {
            (
                frames.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
                vec![n, n * 4_000_000],
            )
        };
        assert_eq!(
            got,
            [
                want(&["http_parser_execute", "handle;request", "main"], 40),
                want(&["tcp_sendmsg", "write", "handle;request", "main"], 20),
                want(&["memcpy", "main"], 10),
                want(&["memcpy", "main"], 5),
                want(&["[unknown]", "[truncated]"], 3),
                want(&["[other stacks]"], 2),
            ]
        );
        // The leaf's component as a label.
        let label = &p.sample[0].label[0];
        assert_eq!(
            (string(&p, label.key), string(&p, label.str)),
            ("component", "http_parser")
        );
    }

    #[test]
    fn a_location_per_frame_a_function_per_name_and_object_a_mapping_per_object() {
        let p = small_profile();
        let s = |i: i64| string(&p, i);
        // The two memcpy are two functions, told apart by their objects.
        let memcpy: Vec<&str> = p
            .function
            .iter()
            .filter(|f| s(f.name) == "memcpy")
            .map(|f| s(f.filename))
            .collect();
        assert_eq!(memcpy, ["libc.so.6", "webdis"]);
        // One location per frame; a mapping per object, none for the marker frames.
        assert_eq!(p.location.len(), small().frames.len());
        let objects: Vec<&str> = p.mapping.iter().map(|m| s(m.filename)).collect();
        assert_eq!(
            objects,
            ["webdis", "libc.so.6", "libevent-2.1.so.7", "[kernel]"]
        );
        assert!(p.mapping.iter().all(|m| m.has_functions));
        for (f, loc) in small().frames.iter().zip(&p.location) {
            let marker = f.name == TRUNCATED || f.name == OTHER_STACKS;
            assert_eq!(loc.mapping_id == 0, marker, "{f:?}");
        }
    }

    #[test]
    fn the_executables_object_is_the_first_mapping_whatever_the_table_starts_with() {
        let mut libc_first = small();
        libc_first.frames.swap(0, 3);
        for s in &mut libc_first.stacks {
            for i in &mut s.frames {
                *i = match *i {
                    0 => 3,
                    3 => 0,
                    i => i,
                };
            }
        }
        let mut u = upstream(libc_first, None);
        u.exe = Some("/usr/local/bin/webdis".to_owned());
        let t = TapStacks {
            tap: "webdis",
            upstream: &u,
            stacks: u.stacks().unwrap(),
        };
        let q = profile(&t, None);
        let first = &q.mapping[0];
        assert_eq!(q.string_table[first.filename as usize], "webdis");
        assert_eq!(
            q.location[0].mapping_id, 2,
            "libc's frame, now first, is mapping 2"
        );
    }

    #[test]
    fn php_frames_carry_their_script_and_line_and_no_mapping() {
        let mut main = frame("{main}", "/srv/app.php", "php");
        main.line = Some(1);
        let mut parse = frame(
            "Rfc7230::parseHeaders",
            "/srv/vendor/Rfc7230.php",
            "http_parser",
        );
        parse.line = Some(42);
        let stacks = Stacks {
            frames: vec![main, parse],
            stacks: vec![Stack {
                frames: vec![0, 1],
                samples: 9,
            }],
            truncated_samples: 0,
            unmapped_samples: 0,
        };
        let mut u = upstream(stacks, None);
        u.profile_mut().frames = Some(FrameKind::Php);
        let t = TapStacks {
            tap: "amp",
            upstream: &u,
            stacks: u.stacks().unwrap(),
        };
        let p = profile(&t, None);
        assert_eq!(p.period, 1_000_000, "no frequency in the snapshot: 1000 Hz");
        assert!(p.mapping.is_empty());
        let leaf = p
            .location
            .iter()
            .find(|l| l.id == p.sample[0].location_id[0])
            .unwrap();
        let f = p
            .function
            .iter()
            .find(|f| f.id == leaf.line[0].function_id)
            .unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(f.name), "Rfc7230::parseHeaders");
        assert_eq!(s(f.filename), "/srv/vendor/Rfc7230.php");
        assert_eq!((f.start_line, leaf.line[0].line), (42, 42));
    }
}
