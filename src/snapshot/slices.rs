//! The snapshot's `upstream.slices` (docs/metrics.md): the window cut into short slices,
//! per slice the upstream's CPU and each route's exchanges, what [`super::route_cpu`]
//! fits CPU per request per route from; and how the slices of several windows append and
//! the part of a window after an older snapshot is kept.
//!
//! `upstream::slices` cuts them as the watcher reads the process; [`SLICE`] is here, not
//! there, because the CPU per route says how long a window it needs in slices of it.

use serde::{Deserialize, Serialize};

/// How long a slice lasts at most: the watcher reads the process at least this often
/// while a tap counts its routes.
pub const SLICE: std::time::Duration = std::time::Duration::from_millis(250);

/// The snapshot's `upstream.slices`: the window's slices (docs/metrics.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteSlices {
    /// The route of each column of a slice's `exchanges`.
    pub routes: Vec<String>,
    /// Oldest first.
    pub slices: Vec<Slice>,
}

/// One slice of the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    /// When it ended, seconds since the Unix epoch.
    pub end_unix: f64,
    /// How long it lasted.
    pub seconds: f64,
    /// The process's CPU time (user + system) in it.
    pub cpu_seconds: f64,
    /// Exchanges completed in it, per route (the columns of `routes`).
    pub exchanges: Vec<u64>,
}

impl Slice {
    /// Adds `other` into this slice: the two as one longer slice (a sum of slices is a
    /// slice of the same model).
    pub fn add(&mut self, other: &Slice) {
        self.end_unix = self.end_unix.max(other.end_unix);
        self.seconds += other.seconds;
        self.cpu_seconds += other.cpu_seconds;
        if self.exchanges.len() < other.exchanges.len() {
            self.exchanges.resize(other.exchanges.len(), 0);
        }
        for (a, b) in self.exchanges.iter_mut().zip(&other.exchanges) {
            *a += b;
        }
    }
}

impl RouteSlices {
    /// Another window's slices after these (several snapshots read as one), its columns
    /// matched by route name.
    pub fn append(&mut self, other: &RouteSlices) {
        let columns: Vec<usize> = other
            .routes
            .iter()
            .map(|r| match self.routes.iter().position(|x| x == r) {
                Some(i) => i,
                None => {
                    self.routes.push(r.clone());
                    self.routes.len() - 1
                }
            })
            .collect();
        for s in &other.slices {
            let mut exchanges = vec![0; self.routes.len()];
            for (&col, &n) in columns.iter().zip(&s.exchanges) {
                exchanges[col] += n;
            }
            self.slices.push(Slice {
                exchanges,
                ..s.clone()
            });
        }
    }

    /// The slices that ended after `unix`: the part of a window after an older snapshot.
    pub fn after(&self, unix: f64) -> RouteSlices {
        RouteSlices {
            routes: self.routes.clone(),
            slices: self
                .slices
                .iter()
                .filter(|s| s.end_unix > unix)
                .cloned()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_append_by_route_name() {
        let mut a = RouteSlices {
            routes: vec!["/a".into(), "/b".into()],
            slices: vec![Slice {
                end_unix: 1.0,
                seconds: 0.25,
                cpu_seconds: 0.1,
                exchanges: vec![1, 2],
            }],
        };
        let b = RouteSlices {
            routes: vec!["/c".into(), "/a".into()],
            slices: vec![Slice {
                end_unix: 2.0,
                seconds: 0.25,
                cpu_seconds: 0.1,
                exchanges: vec![3, 4],
            }],
        };
        a.append(&b);
        assert_eq!(a.routes, vec!["/a", "/b", "/c"]);
        assert_eq!(a.slices[1].exchanges, vec![4, 0, 3]);
        assert_eq!(a.after(1.5).slices.len(), 1);
    }
}
