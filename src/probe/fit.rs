//! The model `ttfb = a + b·bytes + c·headers`, fitted robustly, with bootstrap intervals.
//!
//! Time to first byte over loopback is noisy in one direction: a preemption, an interrupt
//! or a page fault adds tens of microseconds to one sample and nothing ever subtracts.
//! Least squares on raw samples would let those outliers pull the line. So each cell of the
//! grid is first reduced to its median, which ignores up to half the samples being
//! disturbed, and the plane is fitted to the medians by least squares.
//!
//! The intervals come from a two-stage bootstrap: cells are drawn with replacement (which
//! carries the model's misfit, if the growth is not linear, into the interval), then each
//! drawn cell's samples are drawn with replacement (which carries the noise of its median).
//! The 2.5th and 97.5th percentiles of the refitted coefficients bound the 95 % interval.

use serde::Serialize;

use crate::rng::Rng;

/// The samples of one grid cell.
#[derive(Debug, Clone)]
pub struct Cell {
    pub bytes: f64,
    pub headers: f64,
    /// Time to first byte of each sample, in nanoseconds.
    pub ttfb_ns: Vec<f64>,
}

/// A coefficient with its 95 % bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Estimate {
    /// Whether the interval contains zero: no effect could be told from noise.
    pub fn includes_zero(&self) -> bool {
        self.low <= 0.0 && self.high >= 0.0
    }
}

/// The fitted plane. `b` is absent when the grid has a single size, `c` when it has a
/// single field count: a coefficient that nothing varied cannot be estimated.
#[derive(Debug, Clone)]
pub struct Fit {
    pub a: Estimate,
    pub b: Option<Estimate>,
    pub c: Option<Estimate>,
    /// Root mean square of the cell medians' distance from the plane, ns.
    pub residual_ns: f64,
    /// Bootstrap replicates that produced a fit (a replicate that drew too few distinct
    /// cells to fit is dropped).
    pub replicates: usize,
    /// The coefficients of every replicate, for intervals of derived quantities.
    coefficients: Vec<[f64; 3]>,
}

impl Fit {
    /// A derived quantity `f(a, b, c)` at the point estimate, with its bootstrap interval.
    pub fn derive(&self, f: impl Fn(f64, f64, f64) -> f64) -> Estimate {
        let b = self.b.map_or(0.0, |e| e.value);
        let c = self.c.map_or(0.0, |e| e.value);
        let values: Vec<f64> = self
            .coefficients
            .iter()
            .map(|k| f(k[0], k[1], k[2]))
            .collect();
        let (low, high) = interval(values);
        Estimate {
            value: f(self.a.value, b, c),
            low,
            high,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    #[error("too few cells with samples to fit ({0}; need at least 3)")]
    TooFewCells(usize),
    #[error("the grid varies neither the size nor the field count")]
    NothingVaries,
}

/// Fits the plane to the cells' medians and bootstraps `replicates` times.
pub fn fit(cells: &[Cell], replicates: usize, rng: &mut Rng) -> Result<Fit, FitError> {
    let cells: Vec<&Cell> = cells.iter().filter(|c| !c.ttfb_ns.is_empty()).collect();
    if cells.len() < 3 {
        return Err(FitError::TooFewCells(cells.len()));
    }
    let varies = |f: fn(&Cell) -> f64| cells.iter().any(|c| f(c) != f(cells[0]));
    let columns = Columns {
        bytes: varies(|c| c.bytes),
        headers: varies(|c| c.headers),
    };
    if !columns.bytes && !columns.headers {
        return Err(FitError::NothingVaries);
    }
    let points: Vec<Point> = cells
        .iter()
        .map(|c| Point {
            bytes: c.bytes,
            headers: c.headers,
            ttfb: median(&mut c.ttfb_ns.clone()),
        })
        .collect();
    let k = least_squares(&points, columns).ok_or(FitError::NothingVaries)?;
    let residual_ns = (points
        .iter()
        .map(|p| (p.ttfb - (k[0] + k[1] * p.bytes + k[2] * p.headers)).powi(2))
        .sum::<f64>()
        / points.len() as f64)
        .sqrt();

    let mut coefficients = Vec::with_capacity(replicates);
    let mut scratch = Vec::new();
    let mut drawn = Vec::with_capacity(cells.len());
    for _ in 0..replicates {
        drawn.clear();
        for _ in 0..cells.len() {
            let cell = cells[rng.below(cells.len())];
            scratch.clear();
            let n = cell.ttfb_ns.len();
            scratch.extend((0..n).map(|_| cell.ttfb_ns[rng.below(n)]));
            drawn.push(Point {
                bytes: cell.bytes,
                headers: cell.headers,
                ttfb: median(&mut scratch),
            });
        }
        if let Some(k) = least_squares(&drawn, columns) {
            coefficients.push(k);
        }
    }
    let estimate = |i: usize| {
        let (low, high) = interval(coefficients.iter().map(|k| k[i]).collect());
        Estimate {
            value: k[i],
            low,
            high,
        }
    };
    Ok(Fit {
        a: estimate(0),
        b: columns.bytes.then(|| estimate(1)),
        c: columns.headers.then(|| estimate(2)),
        residual_ns,
        replicates: coefficients.len(),
        coefficients,
    })
}

#[derive(Debug, Clone, Copy)]
struct Point {
    bytes: f64,
    headers: f64,
    ttfb: f64,
}

/// Which regressors the grid varies.
#[derive(Debug, Clone, Copy)]
struct Columns {
    bytes: bool,
    headers: bool,
}

/// Ordinary least squares of ttfb on the varied columns, on centred data (the sizes are in
/// thousands and the times in tens of thousands: centring keeps the normal equations well
/// conditioned). Returns `[a, b, c]` with 0 for a column not fitted; `None` when the drawn
/// points do not vary a fitted column (or vary the two together).
fn least_squares(points: &[Point], columns: Columns) -> Option<[f64; 3]> {
    let n = points.len() as f64;
    let mean = |f: fn(&Point) -> f64| points.iter().map(f).sum::<f64>() / n;
    let (mx, mh, my) = (mean(|p| p.bytes), mean(|p| p.headers), mean(|p| p.ttfb));
    let (mut sxx, mut shh, mut sxh, mut sxy, mut shy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for p in points {
        let (x, h, y) = (p.bytes - mx, p.headers - mh, p.ttfb - my);
        sxx += x * x;
        shh += h * h;
        sxh += x * h;
        sxy += x * y;
        shy += h * y;
    }
    let (b, c) = match (columns.bytes, columns.headers) {
        (true, true) => {
            let det = sxx * shh - sxh * sxh;
            // Relative test: the two columns must not be (nearly) proportional.
            if det <= 1e-9 * sxx * shh || sxx == 0.0 || shh == 0.0 {
                return None;
            }
            ((sxy * shh - shy * sxh) / det, (shy * sxx - sxy * sxh) / det)
        }
        (true, false) if sxx > 0.0 => (sxy / sxx, 0.0),
        (false, true) if shh > 0.0 => (0.0, shy / shh),
        _ => return None,
    };
    Some([my - b * mx - c * mh, b, c])
}

/// The median (the mean of the middle two for an even count). `values` is reordered.
pub fn median(values: &mut [f64]) -> f64 {
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    let mid = n / 2;
    let (_, &mut upper, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    if n % 2 == 1 {
        upper
    } else {
        let lower = values[..mid]
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        (lower + upper) / 2.0
    }
}

/// The 2.5th and 97.5th percentiles (nearest rank).
fn interval(mut values: Vec<f64>) -> (f64, f64) {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    values.sort_unstable_by(f64::total_cmp);
    let at =
        |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
    (at(0.025), at(0.975))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(mut f: impl FnMut(f64, f64, usize) -> f64, samples: usize) -> Vec<Cell> {
        let mut cells = Vec::new();
        for bytes in [512.0, 1024.0, 2048.0, 4096.0, 8192.0] {
            for headers in [2.0, 8.0, 24.0] {
                cells.push(Cell {
                    bytes,
                    headers,
                    ttfb_ns: (0..samples).map(|i| f(bytes, headers, i)).collect(),
                });
            }
        }
        cells
    }

    #[test]
    fn an_exact_plane_is_recovered_exactly() {
        let cells = grid(|x, h, _| 20_000.0 + 0.5 * x + 150.0 * h, 5);
        let fit = fit(&cells, 200, &mut Rng::new(1)).unwrap();
        assert!((fit.a.value - 20_000.0).abs() < 1e-6, "{:?}", fit.a);
        let b = fit.b.unwrap();
        let c = fit.c.unwrap();
        assert!(
            (b.value - 0.5).abs() < 1e-9
                && (b.low - 0.5).abs() < 1e-9
                && (b.high - 0.5).abs() < 1e-9,
            "{b:?}"
        );
        assert!((c.value - 150.0).abs() < 1e-6, "{c:?}");
        assert!(fit.residual_ns < 1e-6);
        assert_eq!(fit.replicates, 200);
        let cost = fit.derive(|_, b, c| b * 380.0 + c * 8.0);
        assert!((cost.value - (190.0 + 1200.0)).abs() < 1e-6, "{cost:?}");
    }

    #[test]
    fn outliers_do_not_move_the_medians() {
        // One sample in five is hit by a 100 µs stall.
        let cells = grid(
            |x, _, i| 30_000.0 + 0.1 * x + if i % 5 == 0 { 100_000.0 } else { 0.0 },
            10,
        );
        let fit = fit(&cells, 300, &mut Rng::new(2)).unwrap();
        let b = fit.b.unwrap();
        assert!((b.value - 0.1).abs() < 1e-9, "{b:?}");
        assert!(fit.c.unwrap().value.abs() < 1e-6);
    }

    #[test]
    fn noise_without_a_trend_gives_an_interval_around_zero() {
        let mut noise = Rng::new(5);
        let cells = grid(|_, _, _| 50_000.0 + noise.normal() * 2_000.0, 31);
        let fit = fit(&cells, 500, &mut Rng::new(3)).unwrap();
        let b = fit.b.unwrap();
        assert!(b.includes_zero(), "{b:?}");
        assert!(b.high - b.low > 0.0);
        assert!(fit.c.unwrap().includes_zero(), "{:?}", fit.c);
    }

    #[test]
    fn a_single_row_fits_only_what_varies() {
        let cells: Vec<Cell> = [1000.0, 2000.0, 4000.0]
            .into_iter()
            .map(|bytes| Cell {
                bytes,
                headers: 4.0,
                ttfb_ns: vec![10_000.0 + 2.0 * bytes; 3],
            })
            .collect();
        let fit = fit(&cells, 100, &mut Rng::new(1)).unwrap();
        assert!((fit.b.unwrap().value - 2.0).abs() < 1e-9);
        assert!(fit.c.is_none());
        assert!((fit.a.value - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn too_little_to_fit_is_an_error() {
        let one = Cell {
            bytes: 1.0,
            headers: 2.0,
            ttfb_ns: vec![1.0],
        };
        assert_eq!(
            fit(&[one.clone(), one.clone()], 10, &mut Rng::new(1)).unwrap_err(),
            FitError::TooFewCells(2)
        );
        assert_eq!(
            fit(&[one.clone(), one.clone(), one], 10, &mut Rng::new(1)).unwrap_err(),
            FitError::NothingVaries
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
