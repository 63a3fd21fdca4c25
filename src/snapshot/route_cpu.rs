//! What each route costs the server: CPU per request per route, estimated from outside
//! over the window's slices (docs/report.md, "CPU per route").
//!
//! In each slice s the process spent `cpu_s` seconds of CPU and served `n_rs` exchanges of
//! each route r in `t_s` seconds. The model: `cpu_s = b·t_s + Σ_r c_r·n_rs + noise`, with
//! `c_r` the CPU a request of route r costs and `b` the server's background work (CPU
//! seconds per second, whatever it serves), all at least 0: a non-negative least-squares
//! fit ([`super::nnls`]) over the slices (the regression of Zhang, Cherkasova and Smirni's
//! service-demand estimation). The interval is a bootstrap over slices: the slices drawn
//! again with replacement, the fit made again, and the estimate ± the larger of its distances to the
//! 2.5th and 97.5th percentiles of the replicates (blocks of neighbouring slices drawn
//! together: neighbours are alike).
//!
//! The fit separates routes only where the slices differ in mix: a route whose count is
//! (nearly) a combination of the others' in every slice, a window of too few slices, or a
//! server whose CPU is the same in every slice whatever it serves (saturated) gives
//! `unknown` with the reason instead of a number. With one route the estimate is the
//! window's CPU over its requests.

use serde::Serialize;

use super::nnls::{nnls, normal_equations};
use super::slices::{RouteSlices, Slice, SLICE};
use crate::rng::Rng;

/// Slices a window needs before anything is estimated.
pub const MIN_SLICES: usize = 12;
/// Slices the fit needs for each figure it estimates (the background and each route):
/// with fewer, a route that is rare in the window took whatever CPU the slices it
/// happened to fall in had (the demo's static file, 0 µs of backend, read 216 µs with
/// an interval of 56–377 µs over 20 slices for six figures).
pub const SLICES_PER_FIGURE: usize = 8;
/// Exchanges a route needs in the window to be estimated on its own.
pub const MIN_REQUESTS: u64 = 30;
/// Routes estimated at most, the busiest; the others' exchanges stay in the fit as one
/// column, and they are `unknown`.
pub const MAX_ROUTES: usize = 16;
/// Below this, the part of a route's count per slice that the other columns do not
/// explain (1 − R², uncentered) is too small to separate its cost from theirs.
pub const MIN_OWN_VARIATION: f64 = 1e-3;
/// A server whose CPU per second varies less than this between slices (coefficient of
/// variation) while its request rate varies more is taken as saturated.
pub const SATURATED_CV: f64 = 0.03;
/// Bootstrap replicates.
pub const REPLICATES: usize = 200;

/// An estimate and its 95 % interval, in seconds (of CPU per request, or per second for
/// the background).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

/// One route's CPU per request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteCpu {
    pub route: String,
    /// Its exchanges over the slices.
    pub requests: u64,
    /// Null when the window cannot tell; `reason` says why.
    pub cpu_per_request: Option<Interval>,
    /// Of the server's CPU over the slices, the part this route's requests took
    /// (`estimate × requests / CPU`).
    pub share: Option<f64>,
    pub reason: Option<String>,
}

/// Every route of one tap's window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteCpuEstimate {
    /// The slices the fit used, and their CPU in seconds.
    pub slices: usize,
    pub cpu_seconds: f64,
    /// The server's CPU seconds per second whatever it serves; null with one route (it
    /// is then part of the route's figure) or when nothing was fitted.
    pub background: Option<Interval>,
    /// Busiest first.
    pub routes: Vec<RouteCpu>,
}

impl RouteCpuEstimate {
    pub fn route(&self, name: &str) -> Option<&RouteCpu> {
        self.routes.iter().find(|r| r.route == name)
    }
}

/// The estimate over `slices`; `None` when they hold no exchange at all.
pub fn estimate(slices: &RouteSlices) -> Option<RouteCpuEstimate> {
    let rows: Vec<&Slice> = slices.slices.iter().filter(|s| s.seconds > 0.0).collect();
    let width = slices.routes.len();
    let totals: Vec<u64> = (0..width)
        .map(|r| {
            rows.iter()
                .map(|s| s.exchanges.get(r).copied().unwrap_or(0))
                .sum()
        })
        .collect();
    if totals.iter().all(|&n| n == 0) {
        return None;
    }
    let cpu_seconds: f64 = rows.iter().map(|s| s.cpu_seconds).sum();
    let mut order: Vec<usize> = (0..width).filter(|&r| totals[r] > 0).collect();
    order.sort_by(|&a, &b| totals[b].cmp(&totals[a]).then(a.cmp(&b)));
    let unknown = |r: usize, why: String| RouteCpu {
        route: slices.routes[r].clone(),
        requests: totals[r],
        cpu_per_request: None,
        share: None,
        reason: Some(why),
    };
    let mut out = RouteCpuEstimate {
        slices: rows.len(),
        cpu_seconds,
        background: None,
        routes: Vec::new(),
    };
    if rows.len() < MIN_SLICES {
        let why = format!(
            "too few slices: {} of the {MIN_SLICES} the fit needs (a window of at least {} s under load)",
            rows.len(),
            (MIN_SLICES as f64 * SLICE.as_secs_f64()).ceil()
        );
        out.routes = order.iter().map(|&r| unknown(r, why.clone())).collect();
        return Some(out);
    }
    let seed = crate::rng::hash(&slices.routes.iter().map(String::as_str).collect::<Vec<_>>());
    if order.len() == 1 {
        out.routes
            .push(one_route(&rows, order[0], &slices.routes, seed));
        return Some(out);
    }
    // The routes estimated on their own; the rest share one column.
    let own: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&r| totals[r] >= MIN_REQUESTS)
        .take(MAX_ROUTES)
        .collect();
    let rest: Vec<usize> = order.iter().copied().filter(|r| !own.contains(r)).collect();
    // Columns: the slice's seconds (background), each own route, the rest if any.
    let k = 1 + own.len() + usize::from(!rest.is_empty());
    if rows.len() < SLICES_PER_FIGURE * k {
        let why = format!(
            "too few slices: {} for {} routes and the background; the fit needs {} ({SLICES_PER_FIGURE} a figure, a window of at least {} s under load)",
            rows.len(),
            k - 1,
            SLICES_PER_FIGURE * k,
            (SLICES_PER_FIGURE as f64 * k as f64 * SLICE.as_secs_f64()).ceil()
        );
        out.routes = order.iter().map(|&r| unknown(r, why.clone())).collect();
        return Some(out);
    }
    let matrix: Vec<Vec<f64>> = rows
        .iter()
        .map(|s| {
            let n = |r: usize| s.exchanges.get(r).copied().unwrap_or(0) as f64;
            let mut row = Vec::with_capacity(k);
            row.push(s.seconds);
            row.extend(own.iter().map(|&r| n(r)));
            if !rest.is_empty() {
                row.push(rest.iter().map(|&r| n(r)).sum());
            }
            row
        })
        .collect();
    let targets: Vec<f64> = rows.iter().map(|s| s.cpu_seconds).collect();
    let (g, h) = normal_equations(
        matrix
            .iter()
            .zip(&targets)
            .map(|(r, &t)| (r.as_slice(), t, 1.0)),
        k,
    );
    let rest_reason = |r: usize| {
        if totals[r] < MIN_REQUESTS {
            format!(
                "too few requests: {} of the {MIN_REQUESTS} a route needs",
                totals[r]
            )
        } else {
            format!("only the {MAX_ROUTES} busiest routes are estimated")
        }
    };
    // Saturation: the same CPU every slice while the requests vary.
    let rates: Vec<f64> = rows.iter().map(|s| s.cpu_seconds / s.seconds).collect();
    let request_rates: Vec<f64> = rows
        .iter()
        .map(|s| s.exchanges.iter().sum::<u64>() as f64 / s.seconds)
        .collect();
    let (cpu_cv, mean_rate) = cv(&rates);
    let (req_cv, _) = cv(&request_rates);
    if cpu_cv < SATURATED_CV && req_cv > 2.0 * cpu_cv && mean_rate > 0.2 {
        let all: u64 = totals.iter().sum();
        let why = format!(
            "saturated: the server spent {:.2} CPUs in every slice (±{:.1} %) whatever the mix, so the routes cannot be told apart; over all routes a request costs {:.1} µs of CPU at most",
            mean_rate,
            cpu_cv * 100.0,
            cpu_seconds / all.max(1) as f64 * 1e6
        );
        out.routes = order.iter().map(|&r| unknown(r, why.clone())).collect();
        return Some(out);
    }
    let fit = nnls(&g, &h);
    // How much of each own route's count the other columns cannot explain.
    let own_variation = own_variation(&g, k);
    let mut replicates: Vec<Vec<f64>> = vec![Vec::with_capacity(REPLICATES); k];
    let mut rng = Rng::new(seed);
    let mut weights = vec![0.0; rows.len()];
    for _ in 0..REPLICATES {
        resample(&mut rng, &mut weights);
        let (g, h) = normal_equations(
            matrix
                .iter()
                .zip(&targets)
                .zip(&weights)
                .map(|((r, &t), &w)| (r.as_slice(), t, w)),
            k,
        );
        let x = nnls(&g, &h);
        for j in 0..k {
            // A replicate without the route's exchanges says nothing of it.
            if g[j * k + j] > 0.0 {
                replicates[j].push(x[j]);
            }
        }
    }
    let interval = |j: usize| {
        let mut v = replicates[j].clone();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            if v.is_empty() {
                fit[j]
            } else {
                v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
            }
        };
        symmetric(fit[j], q(0.025), q(0.975))
    };
    out.background = Some(interval(0));
    for (i, &r) in own.iter().enumerate() {
        let j = 1 + i;
        if own_variation[j] < MIN_OWN_VARIATION {
            let partner = partner(&matrix, j, 1..1 + own.len())
                .map(|p| own[p - 1])
                .map(|p| slices.routes[p].clone());
            let why = match partner {
                Some(p) => format!(
                    "the mix never varies: {} always comes with {p} in the same proportion (all but {:.2} % of its count per slice follows the other routes'), so their costs cannot be told apart",
                    slices.routes[r],
                    own_variation[j] * 100.0
                ),
                None => format!(
                    "the mix never varies: its share of the requests is the same in every slice (all but {:.2} % of its count per slice follows the other routes')",
                    own_variation[j] * 100.0
                ),
            };
            out.routes.push(unknown(r, why));
            continue;
        }
        let iv = interval(j);
        out.routes.push(RouteCpu {
            route: slices.routes[r].clone(),
            requests: totals[r],
            cpu_per_request: Some(iv),
            share: (cpu_seconds > 0.0).then(|| iv.estimate * totals[r] as f64 / cpu_seconds),
            reason: None,
        });
    }
    out.routes
        .extend(rest.iter().map(|&r| unknown(r, rest_reason(r))));
    out.routes
        .sort_by(|a, b| b.requests.cmp(&a.requests).then(a.route.cmp(&b.route)));
    Some(out)
}

/// One route: the window's CPU over its requests, the interval by the same bootstrap.
fn one_route(rows: &[&Slice], r: usize, routes: &[String], seed: u64) -> RouteCpu {
    let n = |s: &Slice| s.exchanges.get(r).copied().unwrap_or(0) as f64;
    let ratio = |w: &[f64]| {
        let (cpu, req) = rows.iter().zip(w).fold((0.0, 0.0), |(c, q), (s, &w)| {
            (c + w * s.cpu_seconds, q + w * n(s))
        });
        (req > 0.0).then(|| cpu / req)
    };
    let ones = vec![1.0; rows.len()];
    let requests = rows.iter().map(|s| n(s)).sum::<f64>() as u64;
    let Some(estimate) = ratio(&ones) else {
        return RouteCpu {
            route: routes[r].clone(),
            requests,
            cpu_per_request: None,
            share: None,
            reason: Some("no requests".into()),
        };
    };
    let mut rng = Rng::new(seed);
    let mut w = vec![0.0; rows.len()];
    let mut v = Vec::with_capacity(REPLICATES);
    for _ in 0..REPLICATES {
        resample(&mut rng, &mut w);
        if let Some(x) = ratio(&w) {
            v.push(x);
        }
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    RouteCpu {
        route: routes[r].clone(),
        requests,
        cpu_per_request: Some(symmetric(estimate, q(0.025), q(0.975))),
        share: Some(1.0),
        reason: None,
    }
}

/// The interval around `estimate` from the bootstrap's 2.5th and 97.5th percentiles: the
/// estimate ± the larger of its distances to them, never below 0. The percentiles alone
/// are lopsided where the fit meets its bound: replicates that give the background a
/// little CPU take it from the routes, and none can give it less than none, so the
/// replicates fall below the estimate more than above it. Against the burn upstream the
/// 97.5th percentile lay 1 to 6 µs above the estimate of a 300 µs route and missed its
/// truth by 2 µs in one run of four.
fn symmetric(estimate: f64, low: f64, high: f64) -> Interval {
    let half = (estimate - low).max(high - estimate).max(0.0);
    Interval {
        estimate,
        low: (estimate - half).max(0.0),
        high: estimate + half,
    }
}

/// One bootstrap replicate as weights (how often each slice is drawn): a moving-block
/// bootstrap, blocks of ⌈√n⌉ consecutive slices from random starts (wrapping round)
/// until n slices are drawn. Slices next to each other are alike (a mix that drifts, a
/// machine busy for a while), and resampling them one by one took them for independent:
/// against the burn upstream its intervals missed the truth by a few µs in two runs of
/// three.
fn resample(rng: &mut Rng, weights: &mut [f64]) {
    let n = weights.len();
    weights.iter_mut().for_each(|w| *w = 0.0);
    if n == 0 {
        return;
    }
    let block = ((n as f64).sqrt().ceil() as usize).clamp(1, n);
    let mut drawn = 0;
    while drawn < n {
        let start = rng.below(n);
        for i in 0..block.min(n - drawn) {
            weights[(start + i) % n] += 1.0;
        }
        drawn += block;
    }
}

/// Per column, 1 − R² of the column on all the others (uncentered: the seconds column
/// stands for the constant), from the Gram matrix: 1 / (C⁻¹)_jj with C its correlation
/// form. 0 for a column the others explain entirely.
fn own_variation(g: &[f64], k: usize) -> Vec<f64> {
    let d: Vec<f64> = (0..k).map(|j| g[j * k + j].max(0.0).sqrt()).collect();
    let c = |i: usize, j: usize| {
        if d[i] > 0.0 && d[j] > 0.0 {
            g[i * k + j] / (d[i] * d[j])
        } else {
            f64::from(u8::from(i == j))
        }
    };
    // Invert C by Gauss–Jordan; a singular C leaves the dependent columns at 0.
    let mut m: Vec<Vec<f64>> = (0..k)
        .map(|i| {
            let mut row: Vec<f64> = (0..k).map(|j| c(i, j)).collect();
            row.extend((0..k).map(|j| f64::from(u8::from(i == j))));
            row
        })
        .collect();
    let mut singular = vec![false; k];
    for col in 0..k {
        let pivot = (col..k)
            .max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))
            .unwrap_or(col);
        if m[pivot][col].abs() < 1e-14 {
            singular[col] = true;
            continue;
        }
        m.swap(col, pivot);
        let p = m[col][col];
        m[col].iter_mut().for_each(|v| *v /= p);
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col];
                if f != 0.0 {
                    for (v, p) in row.iter_mut().zip(&pivot_row) {
                        *v -= f * p;
                    }
                }
            }
        }
    }
    (0..k)
        .map(|j| {
            let inv = m[j][k + j];
            if singular.iter().any(|&s| s) && (singular[j] || inv <= 0.0) {
                0.0
            } else if inv > 0.0 {
                (1.0 / inv).clamp(0.0, 1.0)
            } else {
                0.0
            }
        })
        .collect()
}

/// The other column whose counts follow column `j`'s most closely (centered
/// correlation), when one does (at least 0.9).
fn partner(matrix: &[Vec<f64>], j: usize, columns: std::ops::Range<usize>) -> Option<usize> {
    let col = |c: usize| matrix.iter().map(|r| r[c]).collect::<Vec<f64>>();
    let a = col(j);
    columns
        .filter(|&c| c != j)
        .map(|c| (c, correlation(&a, &col(c))))
        .filter(|&(_, r)| r >= 0.9)
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .map(|(c, _)| c)
}

fn correlation(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma).powi(2);
        sbb += (y - mb).powi(2);
    }
    if saa > 0.0 && sbb > 0.0 {
        sab / (saa * sbb).sqrt()
    } else {
        0.0
    }
}

/// Coefficient of variation and mean.
fn cv(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    if mean > 0.0 {
        (var.sqrt() / mean, mean)
    } else {
        (0.0, mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slices of a server whose routes cost `costs` seconds of CPU a request, with
    /// `background` CPU seconds per second, under `mix(slice) → counts`, with noise.
    fn window(
        costs: &[f64],
        background: f64,
        slices: usize,
        noise: f64,
        mut mix: impl FnMut(usize, &mut Rng) -> Vec<u64>,
    ) -> RouteSlices {
        let mut rng = Rng::new(11);
        RouteSlices {
            routes: (0..costs.len()).map(|r| format!("/r{r}")).collect(),
            slices: (0..slices)
                .map(|s| {
                    let exchanges = mix(s, &mut rng);
                    let cpu: f64 = background * 0.25
                        + exchanges
                            .iter()
                            .zip(costs)
                            .map(|(&n, c)| n as f64 * c)
                            .sum::<f64>();
                    Slice {
                        end_unix: s as f64 * 0.25,
                        seconds: 0.25,
                        cpu_seconds: (cpu + noise * rng.normal()).max(0.0),
                        exchanges,
                    }
                })
                .collect(),
        }
    }

    fn varying(rng: &mut Rng, routes: usize) -> Vec<u64> {
        (0..routes)
            .map(|_| (rng.unit() * 400.0) as u64 + 10)
            .collect()
    }

    #[test]
    fn costs_and_background_come_back_with_intervals_that_hold_them() {
        let costs = [20e-6, 70e-6, 170e-6];
        let w = window(&costs, 0.01, 120, 0.0005, |_, rng| varying(rng, 3));
        let e = estimate(&w).unwrap();
        for (r, c) in e
            .routes
            .iter()
            .map(|r| (r, costs[r.route[2..].parse::<usize>().unwrap()]))
        {
            let iv = r.cpu_per_request.unwrap();
            assert!((iv.estimate - c).abs() < 0.1 * c, "{r:?} against {c}");
            assert!(iv.low <= c && c <= iv.high, "{r:?} against {c}");
            assert!(iv.high - iv.low < 0.5 * c, "{r:?}");
        }
        let shares: f64 = e.routes.iter().filter_map(|r| r.share).sum();
        let bg = e.background.unwrap();
        assert!((bg.estimate - 0.01).abs() < 0.005, "{bg:?}");
        assert!(shares < 1.0 && shares > 0.9, "{shares}");
    }

    #[test]
    fn a_mix_that_never_varies_is_unknown() {
        // Strictly alternating: every slice has as many of one route as of the other.
        let w = window(&[20e-6, 120e-6], 0.0, 60, 0.0002, |_, rng| {
            let n = (rng.unit() * 400.0) as u64 + 100;
            vec![n, n]
        });
        let e = estimate(&w).unwrap();
        for r in &e.routes {
            assert!(r.cpu_per_request.is_none(), "{r:?}");
            let why = r.reason.as_deref().unwrap();
            assert!(why.contains("the mix never varies"), "{why}");
        }
    }

    #[test]
    fn too_few_slices_and_saturation_are_unknown() {
        let w = window(&[20e-6, 120e-6], 0.0, 5, 0.0, |_, rng| varying(rng, 2));
        let e = estimate(&w).unwrap();
        assert!(e.routes[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("too few slices"));
        // A saturated server: one full CPU every slice, the requests whatever fits.
        let mut sat = window(&[20e-6, 120e-6], 0.0, 60, 0.0, |_, rng| varying(rng, 2));
        for s in &mut sat.slices {
            s.cpu_seconds = 0.25;
        }
        let e = estimate(&sat).unwrap();
        assert!(
            e.routes[0]
                .reason
                .as_deref()
                .unwrap()
                .starts_with("saturated"),
            "{e:?}"
        );
    }

    #[test]
    fn one_route_is_cpu_over_requests() {
        let w = window(&[50e-6], 0.0, 20, 0.0, |_, rng| varying(rng, 1));
        let e = estimate(&w).unwrap();
        let iv = e.routes[0].cpu_per_request.unwrap();
        assert!((iv.estimate - 50e-6).abs() < 1e-9, "{iv:?}");
        assert_eq!(e.routes[0].share, Some(1.0));
    }
}
