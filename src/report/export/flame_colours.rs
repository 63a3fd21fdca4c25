//! Which colour a component has in a flame graph: the same in every graph (the export's
//! and the report SVG's, `report::export::stacks` and `report::render::svg_inside`), whatever else the
//! graph holds, so that `webdis` is not blue in one and orange in the next.
//!
//! The built-in components have a colour each ([`FIXED`]); any other component (a binary,
//! a library, a Composer package) takes one of [`HASHED`] by a hash of its name, or of its
//! group's ([`crate::snapshot::components::component_group`]) so that the parts of one
//! library share a colour. The colours are Tableau 20's without its greys: black frame
//! text reads on each (at least 4.5:1), and they are at least 10 ΔE apart; the built-ins'
//! also under simulated colour-vision deficiencies (tests/phase_colours.rs).

use std::collections::HashMap;

/// A colour and the word a legend calls it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swatch {
    pub name: &'static str,
    pub rgb: (u8, u8, u8),
}

const fn swatch(name: &'static str, rgb: (u8, u8, u8)) -> Swatch {
    Swatch { name, rgb }
}

/// The built-in components' colours: chosen so that any two of them, and each and
/// [`GREY`], stay at least 8 ΔE apart under simulated protanopia, deuteranopia and
/// tritanopia as well as normal vision.
pub const FIXED: [(&str, Swatch); 10] = [
    ("kernel_network", swatch("blue", (0x4e, 0x79, 0xa7))),
    ("kernel", swatch("light blue", (0xa0, 0xcb, 0xe8))),
    ("event_loop", swatch("orange", (0xf2, 0x8e, 0x2b))),
    ("http_parser", swatch("green", (0x59, 0xa1, 0x4f))),
    ("stream_io", swatch("light green", (0x8c, 0xd1, 0x7d))),
    ("alloc", swatch("yellow", (0xf1, 0xce, 0x63))),
    ("redis_client", swatch("teal", (0x49, 0x98, 0x94))),
    ("php_builtin", swatch("light pink", (0xfa, 0xbf, 0xd2))),
    ("regex", swatch("light purple", (0xd4, 0xa6, 0xc8))),
    ("php_engine", swatch("brown", (0x9d, 0x76, 0x60))),
];

/// The colour of the upstream binary's own code (the component named after its file:
/// `webdis`), as far from the built-ins' as they are from each other.
pub const OWN: Swatch = swatch("pink", (0xd3, 0x72, 0x95));

/// The colours of the other components no built-in rule names, taken by a hash of the
/// name.
pub const HASHED: [Swatch; 7] = [
    swatch("red", (0xe1, 0x57, 0x59)),
    swatch("light red", (0xff, 0x9d, 0x9a)),
    swatch("light orange", (0xff, 0xbe, 0x7d)),
    swatch("olive", (0xb6, 0x99, 0x2d)),
    swatch("light teal", (0x86, 0xbc, 0xb6)),
    swatch("purple", (0xb0, 0x7a, 0xa1)),
    swatch("light brown", (0xd7, 0xb5, 0xa6)),
];

/// The marker frames (`[truncated]`, `[other stacks]`) and the components past the
/// colours a graph has.
pub const GREY: Swatch = swatch("grey", (0xba, 0xb0, 0xac));

/// The name a component is coloured by: its group's, else its own.
fn key(component: &str) -> String {
    crate::snapshot::components::component_group(component).unwrap_or_else(|| component.to_owned())
}

/// FNV-1a, 64 bits: a hash that no toolchain or crate update changes, so a component
/// keeps its colour from one phasescope to the next.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One legend entry: what it names and its colour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The component, or the group when two or more of its parts are in the graph.
    pub name: String,
    pub colour: Swatch,
}

/// The colours of one graph's components.
#[derive(Debug, Default)]
pub struct Colours {
    by_component: HashMap<String, Swatch>,
    /// Most samples first, one entry per colour shown.
    pub legend: Vec<Entry>,
    /// Some component went without a colour of its own (more than [`HASHED`] holds): it
    /// is drawn grey, and the legend says "others grey".
    pub others: bool,
}

impl Colours {
    /// `ranked`: the graph's components, most samples first; `own`: the binary's own
    /// code, when known. A built-in takes its fixed colour, the own code [`OWN`]; another
    /// its hashed one, unless a component with more samples in this graph has it already:
    /// then the next free one, so two components of one graph never share a colour (the
    /// only case where a colour differs between graphs).
    pub fn new<'a>(ranked: impl IntoIterator<Item = &'a str>, own: Option<&str>) -> Colours {
        // Components by colour key, in rank order of the key's first part.
        let mut keys: Vec<(String, Vec<&str>)> = Vec::new();
        // A frame without a component (the marker frames) stays grey.
        for c in ranked.into_iter().filter(|c| !c.is_empty()) {
            let k = key(c);
            match keys.iter_mut().find(|(key, _)| *key == k) {
                Some((_, parts)) => parts.push(c),
                None => keys.push((k, vec![c])),
            }
        }
        let mut out = Colours::default();
        let mut taken = [false; HASHED.len()];
        for (k, parts) in keys {
            let colour = match FIXED.iter().find(|(name, _)| *name == k) {
                Some(&(_, colour)) => Some(colour),
                None if Some(k.as_str()) == own => Some(OWN),
                None => {
                    let start = (fnv1a(&k) % HASHED.len() as u64) as usize;
                    (0..HASHED.len())
                        .map(|i| (start + i) % HASHED.len())
                        .find(|&i| !taken[i])
                        .map(|i| {
                            taken[i] = true;
                            HASHED[i]
                        })
                }
            };
            let Some(colour) = colour else {
                out.others = true;
                continue;
            };
            for &c in &parts {
                out.by_component.insert(c.to_owned(), colour);
            }
            let name = match parts.as_slice() {
                [one] => (*one).to_owned(),
                _ => k,
            };
            out.legend.push(Entry { name, colour });
        }
        out
    }

    /// The colour of `component`: grey when it has none.
    pub fn of(&self, component: &str) -> Swatch {
        self.by_component.get(component).copied().unwrap_or(GREY)
    }

    /// The legend's entries as text, `name colour`, with `others grey` last when some
    /// component went without a colour.
    pub fn entries(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .legend
            .iter()
            .map(|e| format!("{} {}", e.name, e.colour.name))
            .collect();
        if self.others {
            out.push("others grey".to_owned());
        }
        out
    }
}

/// Every colour a flame graph may use, with its name: the fixed, the hashed, grey (for
/// the tests of their contrast).
pub fn palette() -> Vec<Swatch> {
    FIXED
        .iter()
        .map(|&(_, s)| s)
        .chain([OWN])
        .chain(HASHED)
        .chain([GREY])
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The hashed colour `name` would take in a graph of its own.
    pub(crate) fn slot(name: &str) -> u64 {
        fnv1a(name) % HASHED.len() as u64
    }

    #[test]
    fn every_built_in_component_has_its_colour_and_none_shares_one() {
        let all = palette();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.rgb, b.rgb, "{} and {}", a.name, b.name);
                assert_ne!(a.name, b.name);
            }
        }
        for name in [
            "http_parser",
            "regex",
            "redis_client",
            "event_loop",
            "alloc",
            "php_engine",
            "kernel_network",
            "kernel",
            "stream_io",
            "php_builtin",
        ] {
            assert!(FIXED.iter().any(|(c, _)| *c == name), "{name}");
        }
    }

    /// The same components ranked differently, and beside different others: each keeps
    /// its colour.
    #[test]
    fn a_component_keeps_its_colour_whatever_the_ranking() {
        let slot = |n: &str| fnv1a(n) % HASHED.len() as u64;
        // Two libraries of distinct hashed colours (a collision is the next test's).
        assert_ne!(slot("libc.so.6"), slot("libssl.so.3"));
        let own = Some("webdis");
        let one = Colours::new(
            [
                "webdis",
                "kernel_network",
                "libc.so.6",
                "http_parser",
                "libssl.so.3",
            ],
            own,
        );
        let two = Colours::new(
            [
                "libssl.so.3",
                "http_parser",
                "libcrypto.so.3",
                "libc.so.6",
                "kernel_network",
                "webdis",
            ],
            own,
        );
        for c in [
            "webdis",
            "kernel_network",
            "libc.so.6",
            "http_parser",
            "libssl.so.3",
        ] {
            assert_eq!(one.of(c), two.of(c), "{c}");
            assert_ne!(one.of(c), GREY, "{c}");
        }
        assert_eq!(one.of("http_parser").name, "green");
        assert_eq!(one.of("webdis"), OWN);
        assert_eq!(
            Colours::new(["webdis"], None).of("webdis"),
            HASHED[slot("webdis") as usize]
        );
        assert_eq!(one.of("[truncated]"), GREY);
        assert_eq!(one.of(""), GREY);
        assert_eq!(one.legend[0].name, "webdis");
        assert_eq!(two.legend[0].name, "openssl");
    }

    /// Two components that hash to one colour: the one with more samples keeps it, the
    /// other takes the next free; past the hashed colours the rest are grey.
    #[test]
    fn a_collision_goes_to_the_next_free_colour_and_the_rest_is_grey() {
        let names: Vec<String> = (0..40).map(|i| format!("lib{i}.so")).collect();
        let slot = |n: &str| (fnv1a(n) % HASHED.len() as u64) as usize;
        let (a, b) = names
            .iter()
            .enumerate()
            .find_map(|(i, a)| {
                names[i + 1..]
                    .iter()
                    .find(|b| slot(b) == slot(a))
                    .map(|b| (a.as_str(), b.as_str()))
            })
            .unwrap();
        let c = Colours::new([a, b], None);
        assert_eq!(c.of(a), HASHED[slot(a)]);
        assert_eq!(c.of(b), HASHED[(slot(a) + 1) % HASHED.len()]);
        let many = Colours::new(names.iter().map(String::as_str), None);
        assert_eq!(many.legend.len(), HASHED.len());
        assert!(many.others);
        assert_eq!(many.entries().last().unwrap(), "others grey");
        assert_eq!(many.of(&names[39]), GREY);
    }

    /// The packages of one library share a colour, named by the group when both are
    /// drawn and by the package when it is alone.
    #[test]
    fn the_parts_of_a_group_share_its_colour() {
        let both = Colours::new(["league/uri", "php_builtin", "league/uri-interfaces"], None);
        assert_eq!(both.of("league/uri"), both.of("league/uri-interfaces"));
        assert_eq!(
            both.entries(),
            vec![
                format!("league/uri* {}", both.of("league/uri").name),
                "php_builtin light pink".to_owned()
            ]
        );
        let alone = Colours::new(["league/uri-interfaces"], None);
        assert_eq!(alone.of("league/uri-interfaces"), both.of("league/uri"));
        assert_eq!(alone.legend[0].name, "league/uri-interfaces");
    }
}
