//! The colours of the differential flame graphs, from the comparison's function rows so
//! that the picture says what the rows say: a frame is red or blue only where its
//! function's `self` row is `different` (dearer, cheaper) or on one side only (only in B
//! is B's cost added, red; only in A is A's cost gone, blue), and neutral grey
//! everywhere else, however its samples moved; the shade is its change in µs a request,
//! the deepest for the largest. A graph coloured by every frame's change in samples (as
//! inferno's differential mode does) painted an A/A bench's `fwrite` deep red with no row
//! `different`, and a function whose row read −8.3 % the deepest red.

use std::collections::HashMap;

use inferno::flamegraph::color::{Color, PaletteMap};

use crate::report::compare::functions::{FunctionRow, Kind, View};
use crate::report::compare::one_sided::Only;
use crate::stats::{Direction, Outcome};
use crate::units;

/// The colour of a frame whose function showed no change.
pub const NEUTRAL: Color = Color {
    r: 0xdd,
    g: 0xdd,
    b: 0xdd,
};

/// The legend, in the graphs' subtitle.
pub const LEGEND: &str = "red: dearer in B (row different, or only in B); blue: cheaper \
     (different, or only in A); grey: no change found; deeper: more µs a request";

/// Per function (name, object as the rows name it): its row's change in seconds a request
/// where the graph colours it, and the row in words for the frame's tooltip.
pub struct Changes {
    shown: HashMap<(String, String), f64>,
    words: HashMap<(String, String), String>,
    largest: f64,
}

impl Changes {
    /// From the `self` rows of `tap`'s functions.
    pub fn of(rows: &[FunctionRow], tap: &str) -> Changes {
        let mut shown = HashMap::new();
        let mut words = HashMap::new();
        for r in rows
            .iter()
            .filter(|r| r.tap == tap && r.kind == Kind::Function && r.view == View::Own)
        {
            let key = (r.name.clone(), r.object.clone());
            let delta = match (r.only, r.verdict, r.direction) {
                (Some(Only::A), ..) => r.a.map(|a| -a),
                (Some(Only::B), ..) => r.b,
                (None, Outcome::Different, Some(Direction::Slower | Direction::Faster)) => {
                    r.a.zip(r.b).map(|(a, b)| b - a)
                }
                _ => None,
            };
            if let Some(d) = delta.filter(|d| d.is_finite() && *d != 0.0) {
                shown.insert(key.clone(), d);
            }
            words.insert(key, in_words(r));
        }
        let largest = shown.values().fold(0.0f64, |m, d| m.max(d.abs()));
        Changes {
            shown,
            words,
            largest,
        }
    }

    /// The colour of a frame of this function.
    pub fn colour(&self, name: &str, object: &str) -> Color {
        let Some(&d) = self.shown.get(&(name.to_owned(), object.to_owned())) else {
            return NEUTRAL;
        };
        // From a pale tint (still apart from the grey) to a deep one, by the µs.
        let depth = (d.abs() / self.largest.max(f64::MIN_POSITIVE)).clamp(0.0, 1.0);
        let pale = (225.0 - 145.0 * depth).round() as u8;
        if d > 0.0 {
            Color {
                r: 255,
                g: pale,
                b: pale,
            }
        } else {
            Color {
                r: pale,
                g: pale,
                b: 255,
            }
        }
    }

    /// The row of this function in words, for the tooltip.
    pub fn words(&self, name: &str, object: &str) -> Option<&str> {
        self.words
            .get(&(name.to_owned(), object.to_owned()))
            .map(String::as_str)
    }
}

/// A `self` row as a tooltip reads it: `itself 309 µs → 405 µs a request, +31.0 % [+28.5,
/// +33.5], different (dearer)`, or `itself only in A: 307 ns a request [...]`.
fn in_words(r: &FunctionRow) -> String {
    if let (Some(_), Some(n)) = (r.only, &r.note) {
        return format!("itself {n}");
    }
    let us = |v: Option<f64>| v.map_or("-".to_owned(), units::duration);
    let mut out = format!("itself {} → {} a request", us(r.a), us(r.b));
    if let (Some(x), Some([lo, hi])) = (r.change, r.interval) {
        out.push_str(&format!(
            ", {} [{:+.1}, {:+.1}]",
            units::change(x),
            lo * 100.0,
            hi * 100.0
        ));
    }
    out.push_str(&format!(", {}", r.verdict));
    if let Some(d) = r.direction_word() {
        out.push_str(&format!(" ({d})"));
    }
    out
}

/// The palette of one graph: every label's colour (inferno colours by the label), the
/// root's and any unnamed frame's neutral.
pub fn palette<'l>(
    labelled: impl IntoIterator<Item = (&'l str, &'l str, &'l str)>,
    changes: &Changes,
) -> PaletteMap {
    let mut map = PaletteMap::default();
    map.insert("", NEUTRAL);
    map.insert("all", NEUTRAL);
    for (label, name, object) in labelled {
        map.insert(label, changes.colour(name, object));
    }
    map
}
