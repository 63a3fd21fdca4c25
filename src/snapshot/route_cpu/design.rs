//! The fit's columns and whether the slices can tell each route apart (identifiability),
//! judged from the design itself, before any CPU is looked at.
//!
//! A route's cost is read from how the server's CPU follows its count from one slice to
//! the next *apart from* what the other routes' counts already follow. So each route's
//! count per slice is regressed on the others' (least squares over the slices with
//! requests), and on the slice's length alone; what each leaves is its own variation:
//!
//! - **apart from the others**: at least [`MIN_OWN_VARIATION`] of its mean count (root
//!   mean square over mean). A steady mix (groups of clients each on one route, as `wrk`
//!   on one path beside `ab` on another) leaves each route's rate flat apart from noise
//!   mostly common to all (the machine gives the server more or less CPU): 7 to 19 % in
//!   the burn upstream's runs, where its routes read 21.0, 60.5 and 188 µs against truths
//!   of 22.9, 75.5 and 174. The tests' drifting mixes leave 129 to 149 %.
//! - **from one rate**: at least [`MIN_RATE_VARIATION`]. A route at a flat rate beside
//!   others that vary is a column of the slice's length, which stands for whatever the
//!   server spends per second; the fit has no such column (`fit` says why), so that
//!   route would take all of it.
//! - **beyond counting**: a variance at least [`MIN_DISPERSION`] times the mean count. A
//!   count varies by chance about as much as its mean (a handful of requests a slice),
//!   and a request in flight at a cut is counted in the next slice, so that variation
//!   says little of what the requests cost.
//!
//! Not the two at once (the others and the length in one regression): under a closed
//! loop each connection is always busy, so the counts weighted by the routes' latencies
//! add up to the length, and with two routes either one is the length less the other,
//! all but the latencies' noise, however much the mix drifts.

use super::window::Window;
use super::{
    MAX_ROUTES, MIN_DISPERSION, MIN_OWN_VARIATION, MIN_RATE_VARIATION, MIN_REQUESTS,
    SLICES_PER_FIGURE,
};
use crate::snapshot::nnls::normal_equations;
use crate::snapshot::slices::SLICE;

/// The fit's columns: each route estimated on its own, then the rest's sum if any.
pub(super) struct Design {
    /// The routes estimated on their own, busiest first.
    pub own: Vec<usize>,
    /// The others, whose exchanges stay in the fit as one column; they are `unknown`.
    pub rest: Vec<usize>,
    /// Per slice of the window (idle ones too, all zeros): the columns' counts.
    pub counts: Vec<Vec<f64>>,
}

impl Design {
    pub fn of(w: &Window) -> Design {
        let own: Vec<usize> = w
            .order
            .iter()
            .copied()
            .filter(|&r| w.totals[r] >= MIN_REQUESTS)
            .take(MAX_ROUTES)
            .collect();
        let rest: Vec<usize> = w
            .order
            .iter()
            .copied()
            .filter(|r| !own.contains(r))
            .collect();
        let counts = w
            .rows
            .iter()
            .map(|s| {
                let n = |r: usize| s.exchanges.get(r).copied().unwrap_or(0) as f64;
                let mut row: Vec<f64> = own.iter().map(|&r| n(r)).collect();
                if !rest.is_empty() {
                    row.push(rest.iter().map(|&r| n(r)).sum());
                }
                row
            })
            .collect();
        Design { own, rest, counts }
    }

    /// Columns of the fit.
    pub fn width(&self) -> usize {
        self.own.len() + usize::from(!self.rest.is_empty())
    }

    /// Why the slices with requests are too few for this many figures, if so: each
    /// route's column and the background's need [`SLICES_PER_FIGURE`].
    pub fn too_few_slices(&self, w: &Window) -> Option<String> {
        let figures = self.width() + 1;
        let have = w.loaded_count();
        (have < SLICES_PER_FIGURE * figures).then(|| {
            format!(
                "too few slices: {have} with requests for {} routes and the background; the fit needs {} ({SLICES_PER_FIGURE} a figure, a window of at least {} s under load)",
                figures - 1,
                SLICES_PER_FIGURE * figures,
                (SLICES_PER_FIGURE as f64 * figures as f64 * SLICE.as_secs_f64()).ceil()
            )
        })
    }

    /// Why a route in `rest` has no figure.
    pub fn rest_reason(&self, w: &Window, r: usize) -> String {
        if w.totals[r] < MIN_REQUESTS {
            format!(
                "too few requests: {} of the {MIN_REQUESTS} a route needs",
                w.totals[r]
            )
        } else {
            format!("only the {MAX_ROUTES} busiest routes are estimated")
        }
    }

    /// Per route of `own`: `None` when the slices tell it apart, else why they cannot.
    pub fn judge(&self, w: &Window) -> Vec<Option<String>> {
        let loaded: Vec<usize> = (0..w.rows.len()).filter(|&i| !w.idle[i]).collect();
        let rows: Vec<&[f64]> = loaded.iter().map(|&i| self.counts[i].as_slice()).collect();
        let lengths: Vec<f64> = loaded.iter().map(|&i| w.rows[i].seconds).collect();
        let k = self.width();
        let (g, _) = normal_equations(rows.iter().map(|&r| (r, 0.0, 1.0)), k);
        let left = own_variation(&g, k);
        let all = super::duration(w.per_request());
        let slices = loaded.len().max(1) as f64;
        (0..self.own.len())
            .map(|j| {
                let column: Vec<f64> = rows.iter().map(|r| r[j]).collect();
                let mean = column.iter().sum::<f64>() / slices;
                // What the other routes' counts leave of the column, and what the slice's
                // length leaves, per slice.
                let apart = g[j * k + j] * left[j] / slices;
                let rate = unexplained_by(&column, &lengths) / slices;
                let of_mean = |v: f64| v.sqrt() / mean.max(f64::MIN_POSITIVE);
                let (relative, steady_rate) = if of_mean(rate) < MIN_RATE_VARIATION {
                    (of_mean(rate), true)
                } else {
                    (of_mean(apart), false)
                };
                let dispersion = apart.min(rate) / mean.max(f64::MIN_POSITIVE);
                if steady_rate || relative < MIN_OWN_VARIATION {
                    Some(self.steady(w, &rows, j, relative, steady_rate, &all))
                } else if dispersion < MIN_DISPERSION {
                    Some(format!(
                        "its count per slice, beside the other routes' counts and the slice's length, varies only as much as chance alone would (a variance {dispersion:.1} times its mean of {mean:.1} requests a slice, where a figure needs {MIN_DISPERSION:.0} times), so the slices cannot tell its cost apart; over all routes a request costs {all}"
                    ))
                } else {
                    None
                }
            })
            .collect()
    }

    /// The reason of a route whose count follows the others' or the slice's length.
    fn steady(
        &self,
        w: &Window,
        rows: &[&[f64]],
        j: usize,
        relative: f64,
        steady_rate: bool,
        all: &str,
    ) -> String {
        let name = &w.names[self.own[j]];
        if steady_rate {
            return format!(
                "the mix never varies: {name}'s rate is the same in every slice (its count varies by {:.1} % of its mean, the fit needs {:.0} %), so its cost cannot be told from the server's background work; over all routes a request costs {all}",
                relative * 100.0,
                MIN_RATE_VARIATION * 100.0
            );
        }
        let how = format!(
            "it varies by {:.1} % of its mean count per slice apart from them, the fit needs {:.0} %",
            relative * 100.0,
            MIN_OWN_VARIATION * 100.0
        );
        match partner(rows, j, 0..self.own.len()).map(|p| &w.names[self.own[p]]) {
            Some(p) => format!(
                "the mix never varies: {name} always comes with {p} in the same proportion ({how}), so their costs cannot be told apart; over all routes a request costs {all}"
            ),
            None => format!(
                "the mix never varies: {name}'s count per slice follows the other routes' counts ({how}), so its cost cannot be told from theirs; over all routes a request costs {all}"
            ),
        }
    }
}

/// The sum of squares of `column` that a multiple of `lengths` leaves: how far a
/// route's count per slice is from one rate.
fn unexplained_by(column: &[f64], lengths: &[f64]) -> f64 {
    let (nn, nt, tt) = column
        .iter()
        .zip(lengths)
        .fold((0.0, 0.0, 0.0), |(a, b, c), (&n, &t)| {
            (a + n * n, b + n * t, c + t * t)
        });
    if tt > 0.0 {
        (nn - nt * nt / tt).max(0.0)
    } else {
        nn
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
    let mut m: Vec<Vec<f64>> = (0..k)
        .map(|i| {
            let mut row: Vec<f64> = (0..k).map(|j| c(i, j)).collect();
            row.extend((0..k).map(|j| f64::from(u8::from(i == j))));
            row
        })
        .collect();
    let singular = gauss_jordan(&mut m, k);
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

/// Inverts the left k × k block of `m` into its right block by Gauss–Jordan with partial
/// pivoting; the columns found dependent are marked (their rows left as they are).
fn gauss_jordan(m: &mut [Vec<f64>], k: usize) -> Vec<bool> {
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
    singular
}

/// The other column whose counts follow column `j`'s most closely (centered
/// correlation), when one does (at least 0.9).
fn partner(rows: &[&[f64]], j: usize, columns: std::ops::Range<usize>) -> Option<usize> {
    let col = |c: usize| rows.iter().map(|r| r[c]).collect::<Vec<f64>>();
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
