//! What each route costs the server: CPU per request per route, estimated from outside
//! over the window's slices (docs/report.md, "CPU per route").
//!
//! In each slice s the process spent `cpu_s` seconds of CPU and served `n_rs` exchanges of
//! each route r in `t_s` seconds. The model: `cpu_s = b·t_s + Σ_r c_r·n_rs + noise`, with
//! `c_r` the CPU a request of route r costs and `b` the server's background work (CPU
//! seconds per second, whatever it serves), all at least 0. The background is measured
//! over the slices that served nothing ([`fit`] says why it is not fitted beside the
//! routes); the routes' costs are a non-negative least-squares fit ([`super::nnls`]) over
//! the rest (the regression of Zhang, Cherkasova and Smirni's service-demand estimation);
//! the intervals a block bootstrap over slices.
//!
//! The estimate goes in named steps: the window ([`window`]: too few slices, saturation),
//! the columns and whether the slices tell each route apart ([`design`]: judged from the
//! counts alone), the fit and its intervals ([`fit`]), and last the bound no figure may
//! pass: the server's CPU over the route's requests. Whatever cannot be known is
//! `unknown` with the reason instead of a number. With one route the estimate is the
//! window's CPU over its requests.

mod design;
mod fit;
mod window;

use serde::Serialize;

use crate::snapshot::slices::RouteSlices;
use design::Design;
use window::Window;

/// Slices with requests a window needs before anything is estimated.
pub const MIN_SLICES: usize = 12;
/// Slices with requests the fit needs for each figure it estimates (the background and
/// each route): with fewer, a route that is rare in the window took whatever CPU the
/// slices it happened to fall in had (the demo's static file, 0 µs of backend, read 216
/// µs with an interval of 56–377 µs over 20 slices for six figures).
pub const SLICES_PER_FIGURE: usize = 8;
/// Exchanges a route needs in the window to be estimated on its own.
pub const MIN_REQUESTS: u64 = 30;
/// Routes estimated at most, the busiest; the others' exchanges stay in the fit as one
/// column, and they are `unknown`.
pub const MAX_ROUTES: usize = 16;
/// What a route's count per slice must vary by apart from the other routes' counts,
/// relative to its mean count ([`design`]).
pub const MIN_OWN_VARIATION: f64 = 0.3;
/// What a route's rate must vary by from slice to slice, relative to its mean
/// ([`design`]).
pub const MIN_RATE_VARIATION: f64 = 0.15;
/// What that variation's variance must reach, in times the mean count: more than a count
/// varies by chance ([`design`]).
pub const MIN_DISPERSION: f64 = 2.0;
/// The widest interval a figure may have, as a fraction of the estimate on either side:
/// past it the slices leave the cost anywhere in a range, not a figure (Webdis's GET read
/// `44.6 µs (0 ns–89.1 µs)`; a one-connection route of the burn upstream's steady mix,
/// its count swinging with the scheduler beside two busy loops, `40.6 µs (12.1–69.2 µs)`
/// against a truth of 20.6).
pub const MAX_SPREAD: f64 = 0.5;
/// Slices without any exchange the background is measured over, at least.
pub const MIN_IDLE_SLICES: usize = 4;
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
    let w = Window::of(slices)?;
    let mut out = RouteCpuEstimate {
        slices: w.rows.len(),
        cpu_seconds: w.cpu_seconds,
        background: None,
        routes: Vec::new(),
    };
    if let Some(why) = w.too_few_slices() {
        out.routes = w.all_unknown(&why);
        return Some(out);
    }
    let seed = crate::rng::hash(&slices.routes.iter().map(String::as_str).collect::<Vec<_>>());
    if w.order.len() == 1 {
        out.routes.push(one_route(&w, w.order[0], seed));
        return Some(out);
    }
    let design = Design::of(&w);
    if let Some(why) = design.too_few_slices(&w).or_else(|| w.saturated()) {
        out.routes = w.all_unknown(&why);
        return Some(out);
    }
    let judged = design.judge(&w);
    let fitted = fit::fit(&w, &design, seed);
    out.background = fitted.background;
    out.routes = assemble(&w, &design, judged, fitted.columns);
    bound(&w, fitted.background_rate, &mut out.routes);
    out.routes
        .sort_by(|a, b| b.requests.cmp(&a.requests).then(a.route.cmp(&b.route)));
    Some(out)
}

/// Each route's figure: its column's interval where the design tells it apart and the
/// resamples give it a width, else `unknown` with the first reason that holds.
fn assemble(
    w: &Window,
    d: &Design,
    judged: Vec<Option<String>>,
    columns: Vec<Result<Interval, String>>,
) -> Vec<RouteCpu> {
    let mut routes: Vec<RouteCpu> = d
        .own
        .iter()
        .zip(judged)
        .zip(columns)
        .map(
            |((&r, why), column)| match why.map_or(column, Err).and_then(precise) {
                Ok(iv) => RouteCpu {
                    route: w.names[r].clone(),
                    requests: w.totals[r],
                    cpu_per_request: Some(iv),
                    share: (w.cpu_seconds > 0.0)
                        .then(|| iv.estimate * w.totals[r] as f64 / w.cpu_seconds),
                    reason: None,
                },
                Err(why) => w.unknown(r, why),
            },
        )
        .collect();
    routes.extend(d.rest.iter().map(|&r| w.unknown(r, d.rest_reason(w, r))));
    routes
}

/// An interval no wider than [`MAX_SPREAD`] either side of its estimate, or why not.
fn precise(iv: Interval) -> Result<Interval, String> {
    if iv.high - iv.estimate <= MAX_SPREAD * iv.estimate {
        return Ok(iv);
    }
    Err(format!(
        "the slices leave it anywhere between {} and {} (95 % interval around {}; a figure needs its interval within ±{:.0} %)",
        duration(iv.low),
        duration(iv.high),
        duration(iv.estimate),
        MAX_SPREAD * 100.0
    ))
}

/// The bound no figure may pass: the server's CPU over the slices (net of the background)
/// is all the routes' requests can have cost. A route whose figure is more than that over
/// its own requests, or routes whose figures at the low ends of their intervals add up to
/// more than that, are fits the slices cannot support (Webdis's GET read 44.6 µs, the
/// whole process 29.8 µs a request): `unknown`, and why.
fn bound(w: &Window, background: f64, routes: &mut [RouteCpu]) {
    let seconds: f64 = w.rows.iter().map(|s| s.seconds).sum();
    let net = (w.cpu_seconds - background * seconds).max(0.0);
    let all = duration(w.per_request());
    let low_sum: f64 = routes
        .iter()
        .filter_map(|r| Some(r.cpu_per_request?.low * r.requests as f64))
        .sum();
    for r in routes.iter_mut() {
        let Some(iv) = r.cpu_per_request else {
            continue;
        };
        let most = net / r.requests.max(1) as f64;
        let why = if iv.estimate > most * (1.0 + 1e-9) {
            format!(
                "the fit gives {}, more than the server spent over all its requests per request of this route ({}), so the slices cannot tell; over all routes a request costs {all}",
                duration(iv.estimate),
                duration(most)
            )
        } else if low_sum > net * (1.0 + 1e-9) {
            format!(
                "the routes' figures, even at the low ends of their intervals, add up to more CPU than the server spent ({:.3} s against {:.3} s), so the slices cannot tell; over all routes a request costs {all}",
                low_sum, net
            )
        } else {
            continue;
        };
        r.cpu_per_request = None;
        r.share = None;
        r.reason = Some(why);
    }
}

/// A CPU time as the reasons give it: ns below a µs, µs below a ms, ms above (the
/// snapshot's floor has no `units`; the report writes the figures themselves).
fn duration(seconds: f64) -> String {
    if seconds == 0.0 {
        "0 ns".to_owned()
    } else if seconds < 1e-6 {
        format!("{:.0} ns", seconds * 1e9)
    } else if seconds < 1e-3 {
        format!("{:.1} µs", seconds * 1e6)
    } else {
        format!("{:.2} ms", seconds * 1e3)
    }
}

/// One route: the window's CPU over its requests, the background included, the interval
/// by the same bootstrap.
fn one_route(w: &Window, r: usize, seed: u64) -> RouteCpu {
    let n = |s: &crate::snapshot::slices::Slice| s.exchanges.get(r).copied().unwrap_or(0) as f64;
    let ratio = |weights: &[f64]| {
        let (cpu, req) = w
            .rows
            .iter()
            .zip(weights)
            .fold((0.0, 0.0), |(c, q), (s, &x)| {
                (c + x * s.cpu_seconds, q + x * n(s))
            });
        (req > 0.0).then(|| cpu / req)
    };
    let Some(estimate) = ratio(&vec![1.0; w.rows.len()]) else {
        return w.unknown(r, "no requests".into());
    };
    let mut rng = crate::rng::Rng::new(seed);
    let mut weights = vec![0.0; w.rows.len()];
    let mut v = Vec::with_capacity(REPLICATES);
    for _ in 0..REPLICATES {
        fit::resample(&mut rng, &mut weights);
        v.extend(ratio(&weights));
    }
    match fit::interval(estimate, &mut v.clone(), &mut v).and_then(precise) {
        Ok(iv) => RouteCpu {
            route: w.names[r].clone(),
            requests: w.totals[r],
            cpu_per_request: Some(iv),
            share: Some(1.0),
            reason: None,
        },
        Err(why) => w.unknown(r, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::snapshot::slices::Slice;

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

    fn cost_of(r: &RouteCpu, costs: &[f64]) -> f64 {
        costs[r.route[2..].parse::<usize>().unwrap()]
    }

    fn reason(r: &RouteCpu) -> &str {
        r.reason.as_deref().unwrap_or_default()
    }

    #[test]
    fn a_well_varied_design_gives_the_costs_and_idle_slices_the_background() {
        let costs = [20e-6, 70e-6, 170e-6];
        // One slice in eight serves nothing: the background is measured there.
        let w = window(&costs, 0.01, 160, 0.0005, |s, rng| {
            if s % 8 == 7 {
                vec![0; 3]
            } else {
                varying(rng, 3)
            }
        });
        let e = estimate(&w).unwrap();
        for r in &e.routes {
            let c = cost_of(r, &costs);
            let iv = r.cpu_per_request.unwrap_or_else(|| panic!("{r:?}"));
            assert!((iv.estimate - c).abs() < 0.1 * c, "{r:?} against {c}");
            assert!(iv.low <= c && c <= iv.high, "{r:?} against {c}");
            assert!(iv.high - iv.low < 0.5 * c, "{r:?}");
        }
        let shares: f64 = e.routes.iter().filter_map(|r| r.share).sum();
        let bg = e.background.unwrap();
        assert!((bg.estimate - 0.01).abs() < 0.002, "{bg:?}");
        assert!(bg.low <= 0.01 && 0.01 <= bg.high, "{bg:?}");
        assert!(shares < 1.0 && shares > 0.9, "{shares}");
    }

    #[test]
    fn without_idle_slices_the_background_is_not_fitted_and_the_routes_carry_it() {
        // A closed loop: each slice's counts, weighted by the routes' latencies (100 and
        // 400 µs), fill its 0.25 s on one connection, so the length is a combination of
        // the counts and a background cannot be told from the routes.
        let costs = [20e-6, 120e-6];
        let latency = [100e-6, 400e-6];
        let w = window(&costs, 0.0, 80, 0.0002, |_, rng| {
            let a = rng.unit() * 0.8 + 0.1;
            vec![
                (0.25 * a / latency[0]) as u64,
                (0.25 * (1.0 - a) / latency[1]) as u64,
            ]
        });
        let e = estimate(&w).unwrap();
        assert!(e.background.is_none(), "{e:?}");
        for r in &e.routes {
            let c = cost_of(r, &costs);
            let iv = r.cpu_per_request.unwrap_or_else(|| panic!("{r:?}"));
            assert!((iv.estimate - c).abs() < 0.05 * c, "{r:?} against {c}");
        }
    }

    #[test]
    fn collinear_columns_are_unknown_with_their_reason() {
        // Strictly alternating: every slice has as many of one route as of the other.
        let w = window(&[20e-6, 120e-6], 0.0, 60, 0.0002, |_, rng| {
            let n = (rng.unit() * 400.0) as u64 + 100;
            vec![n, n]
        });
        let e = estimate(&w).unwrap();
        for r in &e.routes {
            assert!(r.cpu_per_request.is_none(), "{r:?}");
            assert!(reason(r).contains("the mix never varies"), "{r:?}");
            assert!(reason(r).contains("always comes with"), "{r:?}");
        }
    }

    #[test]
    fn a_steady_mix_is_unknown_with_its_reason() {
        // Groups of clients each on one route: each rate flat apart from the machine's
        // swings (common to all, ±20 %) and a little noise of its own (±5 %).
        let costs = [20e-6, 70e-6, 170e-6];
        let rates = [1600.0, 2400.0, 2800.0];
        let w = window(&costs, 0.0, 60, 0.001, |_, rng| {
            let swing = 1.0 + 0.2 * rng.normal();
            rates
                .iter()
                .map(|r| (r * 0.25 * swing * (1.0 + 0.05 * rng.normal())).max(0.0) as u64)
                .collect()
        });
        let e = estimate(&w).unwrap();
        for r in &e.routes {
            assert!(r.cpu_per_request.is_none(), "{r:?}");
            assert!(reason(r).starts_with("the mix never varies"), "{r:?}");
            assert!(
                reason(r).contains("over all routes a request costs"),
                "{r:?}"
            );
        }
    }

    #[test]
    fn a_route_at_a_steady_rate_beside_a_varying_one_is_unknown() {
        // Its column would stand in for whatever the server spends per second.
        let costs = [50e-6, 100e-6];
        let w = window(&costs, 0.0, 80, 0.0002, |_, rng| {
            let steady = 250.0 * (1.0 + 0.03 * rng.normal());
            vec![steady as u64, (rng.unit() * 400.0) as u64 + 10]
        });
        let e = estimate(&w).unwrap();
        let steady = e.route("/r0").unwrap();
        assert!(steady.cpu_per_request.is_none(), "{steady:?}");
        assert!(
            reason(steady).contains("rate is the same in every slice"),
            "{steady:?}"
        );
        assert!(e.route("/r1").unwrap().cpu_per_request.is_some(), "{e:?}");
    }

    #[test]
    fn a_rare_route_that_varies_by_chance_only_is_unknown() {
        let costs = [50e-6, 100e-6];
        let w = window(&costs, 0.0, 80, 0.0002, |_, rng| {
            vec![(rng.unit() * 400.0) as u64 + 50, rng.below(5) as u64]
        });
        let e = estimate(&w).unwrap();
        let rare = e.route("/r1").unwrap();
        assert!(rare.cpu_per_request.is_none(), "{rare:?}");
        assert!(
            reason(rare).contains("varies only as much as chance alone would"),
            "{rare:?}"
        );
        assert!(e.route("/r0").unwrap().cpu_per_request.is_some(), "{e:?}");
    }

    #[test]
    fn a_route_held_at_zero_is_a_range_not_a_figure() {
        // The bound holds it at 0 in every resample; the unconstrained fit still spreads,
        // so its reason gives a range above 0, never `0 ns (0 ns–0 ns)`.
        let costs = [0.0, 100e-6];
        let w = window(&costs, 0.0, 80, 0.0005, |_, rng| varying(rng, 2));
        let e = estimate(&w).unwrap();
        let free = e.route("/r0").unwrap();
        assert!(free.cpu_per_request.is_none(), "{free:?}");
        assert!(
            reason(free).starts_with("the slices leave it anywhere between 0 ns and "),
            "{free:?}"
        );
        assert!(!reason(free).contains("and 0 ns"), "{free:?}");
        let other = e.route("/r1").unwrap().cpu_per_request.unwrap();
        assert!((other.estimate - 100e-6).abs() < 5e-6, "{other:?}");
    }

    #[test]
    fn a_wide_interval_is_a_range_not_a_figure() {
        let iv = Interval {
            estimate: 40.6e-6,
            low: 12.1e-6,
            high: 69.2e-6,
        };
        let why = precise(iv).unwrap_err();
        assert!(why.contains("between 12.1 µs and 69.2 µs"), "{why}");
        let narrow = Interval {
            low: 30e-6,
            high: 51.2e-6,
            ..iv
        };
        assert_eq!(precise(narrow), Ok(narrow));
    }

    #[test]
    fn no_route_passes_the_cpu_its_requests_could_have_cost() {
        let w = window(&[50e-6, 50e-6], 0.0, 40, 0.0, |_, rng| varying(rng, 2));
        let win = Window::of(&w).unwrap();
        let requests = |r: usize| win.totals[r];
        let most = win.cpu_seconds / requests(0) as f64;
        let figure = |r: usize, estimate: f64, half: f64| RouteCpu {
            route: format!("/r{r}"),
            requests: requests(r),
            cpu_per_request: Some(Interval {
                estimate,
                low: estimate - half,
                high: estimate + half,
            }),
            share: Some(0.5),
            reason: None,
        };
        // One route above all the CPU over its own requests.
        let mut routes = vec![figure(0, most * 1.2, most * 0.5), figure(1, 0.0, 1e-6)];
        bound(&win, 0.0, &mut routes);
        assert!(routes[0].cpu_per_request.is_none(), "{routes:?}");
        assert!(
            reason(&routes[0]).contains("more than the server spent"),
            "{routes:?}"
        );
        assert!(routes[1].cpu_per_request.is_some(), "{routes:?}");
        // Both well above the truth, their intervals too narrow to hold it.
        let mut routes = vec![figure(0, 70e-6, 5e-6), figure(1, 70e-6, 5e-6)];
        bound(&win, 0.0, &mut routes);
        assert!(
            routes
                .iter()
                .all(|r| reason(r).contains("add up to more CPU than the server spent")),
            "{routes:?}"
        );
        // At the truth: kept.
        let mut routes = vec![figure(0, 50e-6, 5e-6), figure(1, 50e-6, 5e-6)];
        bound(&win, 0.0, &mut routes);
        assert!(
            routes.iter().all(|r| r.cpu_per_request.is_some()),
            "{routes:?}"
        );
    }

    #[test]
    fn too_few_slices_and_saturation_are_unknown() {
        let w = window(&[20e-6, 120e-6], 0.0, 5, 0.0, |_, rng| varying(rng, 2));
        let e = estimate(&w).unwrap();
        assert!(reason(&e.routes[0]).contains("too few slices"));
        // A saturated server: one full CPU every slice, the requests whatever fits.
        let mut sat = window(&[20e-6, 120e-6], 0.0, 60, 0.0, |_, rng| varying(rng, 2));
        for s in &mut sat.slices {
            s.cpu_seconds = 0.25;
        }
        let e = estimate(&sat).unwrap();
        assert!(reason(&e.routes[0]).starts_with("saturated"), "{e:?}");
    }

    #[test]
    fn one_route_is_cpu_over_requests() {
        let w = window(&[50e-6], 0.0, 20, 0.0002, |_, rng| varying(rng, 1));
        let e = estimate(&w).unwrap();
        let iv = e.routes[0].cpu_per_request.unwrap();
        let truth = e.cpu_seconds / e.routes[0].requests as f64;
        assert!((iv.estimate - truth).abs() < 1e-12, "{iv:?}");
        assert!(iv.low < truth && truth < iv.high, "{iv:?}");
        assert_eq!(e.routes[0].share, Some(1.0));
        // Exact slices give every resample the same figure: no interval of no width.
        let exact = window(&[50e-6], 0.0, 20, 0.0, |_, rng| varying(rng, 1));
        let e = estimate(&exact).unwrap();
        assert!(reason(&e.routes[0]).contains("every resample"), "{e:?}");
    }
}
