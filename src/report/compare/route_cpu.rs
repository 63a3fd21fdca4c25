//! Rows of each route's CPU per request, where both sides' snapshots have slices and the
//! route is estimated on both ([`crate::snapshot::route_cpu`], docs/report.md "CPU per
//! route"): the estimate of each side over its snapshots' slices read as one, and both
//! intervals in the row's note. No verdict: the intervals are each fit's own, not a
//! comparison's, so the row says what each side's server spent on the route and leaves
//! the deciding to the `cpu` row of the whole server.

use super::options::Options;
use super::row::{Draft, Key, CPU};
use crate::snapshot::route_cpu::{estimate, Interval, RouteCpuEstimate};
use crate::snapshot::RouteSlices;
use crate::snapshot::Snapshot;
use crate::stats::{Method, Statistic};

/// One side's estimate for `tap`, over the slices of all its snapshots.
fn side(runs: &[Snapshot], tap: &str) -> Option<RouteCpuEstimate> {
    let mut all: Option<RouteSlices> = None;
    for s in runs {
        let Some(slices) = s
            .taps
            .get(tap)
            .and_then(|t| t.upstream.as_ref())
            .and_then(|u| u.slices.as_ref())
        else {
            continue;
        };
        all.get_or_insert_with(RouteSlices::default).append(slices);
    }
    estimate(&all?)
}

/// The drafts of every route estimated on both sides.
pub(super) fn drafts(a: &[Snapshot], b: &[Snapshot], opts: &Options) -> Vec<Draft> {
    let taps: std::collections::BTreeSet<&String> = a.iter().flat_map(|s| s.taps.keys()).collect();
    let mut out = Vec::new();
    for tap in taps {
        // One process on both sides: its slices measured once, over both sides'
        // exchanges, the same estimate on each side ([`super::one_process`]).
        let shared = super::one_process::of(a, b, tap);
        let estimates = match shared {
            Some(_) => {
                let once = super::one_process::slices(a, b, tap).and_then(|s| estimate(&s));
                (once.clone(), once)
            }
            None => (side(a, tap), side(b, tap)),
        };
        let (Some(ea), Some(eb)) = estimates else {
            continue;
        };
        // A single route's figure is the whole server's, which the `cpu` row has.
        if ea.routes.len() < 2 && eb.routes.len() < 2 {
            continue;
        }
        for ra in &ea.routes {
            if !(opts.routes.is_empty() || opts.routes.contains(&ra.route)) {
                continue;
            }
            let Some(rb) = eb.route(&ra.route) else {
                continue;
            };
            let (Some(ia), Some(ib)) = (ra.cpu_per_request, rb.cpu_per_request) else {
                continue;
            };
            let us = |iv: Interval| {
                format!(
                    "{} ({}–{})",
                    crate::units::duration(iv.estimate),
                    crate::units::duration(iv.low),
                    crate::units::duration(iv.high)
                )
            };
            let key: Key = (tap.clone(), CPU.to_owned(), ra.route.clone());
            out.push(Draft {
                key,
                stat: Statistic::PerRequest,
                primary: false,
                runs: [a.len(), b.len()],
                counts: [ra.requests, rb.requests],
                values: [Some(ia.estimate), Some(ib.estimate)],
                method: Method::None,
                measured: None,
                note: Some(match shared {
                    Some(pid) => format!(
                        "CPU per route, estimated from the slices: {}; {}",
                        us(ia),
                        super::one_process::note(pid)
                    ),
                    None => format!(
                        "CPU per route, estimated from the slices: A {}, B {} (95 % intervals of each fit; no verdict)",
                        us(ia),
                        us(ib)
                    ),
                }),
            });
        }
    }
    out
}
