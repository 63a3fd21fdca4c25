//! Non-negative least squares, Lawson and Hanson's active-set method ("Solving Least
//! Squares Problems", 1974, ch. 23), on the normal equations: minimise ‖Ax − b‖² subject
//! to x ≥ 0, given G = AᵀA and h = Aᵀb.
//!
//! Written here rather than taken from a crate: the crate has no linear-algebra
//! dependency, and one (nalgebra, faer) would be a large one for problems of at most a
//! few dozen unknowns (a constant and the routes a window can separate); the crates that
//! offer NNLS alone are unmaintained. Working from G and h also suits the bootstrap,
//! which weighs the rows again for each replicate: G and h are sums over rows, so a
//! replicate never builds a matrix of rows.

/// The solution of `min ‖Ax − b‖², x ≥ 0` from `g` = AᵀA (row-major, k × k) and `h` = Aᵀb.
/// A column that is all zeros (g[j][j] = 0) gets 0.
pub fn nnls(g: &[f64], h: &[f64]) -> Vec<f64> {
    let k = h.len();
    debug_assert_eq!(g.len(), k * k);
    // Scale the columns to unit norm: counts, seconds and CPU differ by orders of
    // magnitude, and the tolerance below is then one for all.
    let d: Vec<f64> = (0..k)
        .map(|j| {
            let v = g[j * k + j];
            if v > 0.0 {
                v.sqrt()
            } else {
                0.0
            }
        })
        .collect();
    let usable: Vec<bool> = d.iter().map(|&v| v > 0.0).collect();
    let gs = |i: usize, j: usize| {
        if usable[i] && usable[j] {
            g[i * k + j] / (d[i] * d[j])
        } else {
            0.0
        }
    };
    let hs: Vec<f64> = (0..k)
        .map(|j| if usable[j] { h[j] / d[j] } else { 0.0 })
        .collect();
    let scale = hs.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    let tol = 1e-12 * scale * k as f64;
    let mut x = vec![0.0; k];
    let mut passive = vec![false; k];
    let gradient = |x: &[f64]| -> Vec<f64> {
        (0..k)
            .map(|i| hs[i] - (0..k).map(|j| gs(i, j) * x[j]).sum::<f64>())
            .collect()
    };
    let mut w = gradient(&x);
    for _outer in 0..(3 * k + 10) {
        let candidate = (0..k)
            .filter(|&j| usable[j] && !passive[j] && w[j] > tol)
            .max_by(|&a, &b| w[a].total_cmp(&w[b]));
        let Some(t) = candidate else { break };
        passive[t] = true;
        for _inner in 0..(3 * k + 10) {
            let z = solve_passive(&gs, &hs, &passive);
            let Some(z) = z else {
                // A passive set whose columns are dependent: drop the newest.
                passive[t] = false;
                break;
            };
            if (0..k).filter(|&j| passive[j]).all(|j| z[j] > 0.0) {
                x = z;
                break;
            }
            let mut alpha = 1.0f64;
            for j in (0..k).filter(|&j| passive[j] && z[j] <= 0.0) {
                let step = x[j] / (x[j] - z[j]);
                if step < alpha {
                    alpha = step;
                }
            }
            for j in 0..k {
                x[j] += alpha * (z[j] - x[j]);
                if passive[j] && x[j] <= 1e-15 {
                    passive[j] = false;
                    x[j] = 0.0;
                }
            }
        }
        w = gradient(&x);
    }
    x.iter()
        .zip(&d)
        .map(|(&v, &dj)| if dj > 0.0 { (v / dj).max(0.0) } else { 0.0 })
        .collect()
}

/// The unconstrained solution of `min ‖Ax − b‖²` from the same `g` and `h` (a column that
/// is all zeros gets 0); `None` when the columns are dependent. The bootstrap reads its
/// spread beside the constrained one's: a figure the bound holds at 0 in every replicate
/// has no spread of its own, and this one's says how far the slices could move it.
pub fn least_squares(g: &[f64], h: &[f64]) -> Option<Vec<f64>> {
    let k = h.len();
    debug_assert_eq!(g.len(), k * k);
    let d: Vec<f64> = (0..k).map(|j| g[j * k + j].max(0.0).sqrt()).collect();
    let usable: Vec<bool> = d.iter().map(|&v| v > 0.0).collect();
    let gs = |i: usize, j: usize| g[i * k + j] / (d[i] * d[j]);
    let hs: Vec<f64> = (0..k)
        .map(|j| if usable[j] { h[j] / d[j] } else { 0.0 })
        .collect();
    let z = solve_passive(&gs, &hs, &usable)?;
    Some(
        z.iter()
            .zip(&d)
            .map(|(&v, &dj)| if dj > 0.0 { v / dj } else { 0.0 })
            .collect(),
    )
}

/// The unconstrained least-squares solution on the passive columns (zeros elsewhere), by
/// Gaussian elimination with partial pivoting; `None` when they are dependent.
fn solve_passive(
    gs: &impl Fn(usize, usize) -> f64,
    hs: &[f64],
    passive: &[bool],
) -> Option<Vec<f64>> {
    let idx: Vec<usize> = (0..hs.len()).filter(|&j| passive[j]).collect();
    let n = idx.len();
    let mut m: Vec<Vec<f64>> = idx
        .iter()
        .map(|&i| {
            let mut row: Vec<f64> = idx.iter().map(|&j| gs(i, j)).collect();
            row.push(hs[i]);
            row
        })
        .collect();
    for col in 0..n {
        let pivot = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                if f != 0.0 {
                    for (v, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                        *v -= f * p;
                    }
                }
            }
        }
    }
    let mut z = vec![0.0; hs.len()];
    for (r, &j) in idx.iter().enumerate() {
        z[j] = m[r][n] / m[r][r];
    }
    Some(z)
}

/// The Gram matrix and right-hand side of rows `a` (each of width k) and targets `b`,
/// each row counted `weight` times.
pub fn normal_equations<'a>(
    rows: impl Iterator<Item = (&'a [f64], f64, f64)>,
    k: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut g = vec![0.0; k * k];
    let mut h = vec![0.0; k];
    for (row, target, weight) in rows {
        if weight == 0.0 {
            continue;
        }
        for i in 0..k {
            let wi = row[i] * weight;
            if wi == 0.0 {
                continue;
            }
            h[i] += wi * target;
            for j in 0..k {
                g[i * k + j] += wi * row[j];
            }
        }
    }
    (g, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(rows: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
        let k = rows[0].len();
        let (g, h) = normal_equations(rows.iter().zip(b).map(|(r, &t)| (r.as_slice(), t, 1.0)), k);
        nnls(&g, &h)
    }

    #[test]
    fn an_exact_positive_fit_is_found() {
        let rows = vec![
            vec![1.0, 10.0, 0.0],
            vec![1.0, 5.0, 5.0],
            vec![1.0, 0.0, 10.0],
            vec![1.0, 8.0, 3.0],
        ];
        let b: Vec<f64> = rows
            .iter()
            .map(|r| 2.0 * r[0] + 0.5 * r[1] + 1.5 * r[2])
            .collect();
        let x = fit(&rows, &b);
        for (got, want) in x.iter().zip([2.0, 0.5, 1.5]) {
            assert!((got - want).abs() < 1e-9, "{x:?}");
        }
    }

    #[test]
    fn a_negative_coefficient_is_held_at_zero() {
        // The least-squares answer would make the second coefficient negative.
        let rows = vec![vec![1.0, 1.0], vec![1.0, 2.0], vec![1.0, 3.0]];
        let b = vec![3.0, 2.0, 1.0];
        let x = fit(&rows, &b);
        assert_eq!(x[1], 0.0, "{x:?}");
        assert!((x[0] - 2.0).abs() < 1e-9, "{x:?}");
    }

    #[test]
    fn unconstrained_least_squares_keeps_the_negative_coefficient() {
        let rows = [vec![1.0, 1.0], vec![1.0, 2.0], vec![1.0, 3.0]];
        let (g, h) = normal_equations(
            rows.iter()
                .zip([3.0, 2.0, 1.0])
                .map(|(r, t)| (r.as_slice(), t, 1.0)),
            2,
        );
        let x = least_squares(&g, &h).unwrap();
        assert!(
            (x[0] - 4.0).abs() < 1e-9 && (x[1] + 1.0).abs() < 1e-9,
            "{x:?}"
        );
        // Two equal columns cannot be told apart.
        let same = [vec![1.0, 1.0], vec![2.0, 2.0]];
        let (g, h) = normal_equations(
            same.iter()
                .zip([1.0, 2.0])
                .map(|(r, t)| (r.as_slice(), t, 1.0)),
            2,
        );
        assert!(least_squares(&g, &h).is_none());
    }

    #[test]
    fn an_empty_column_gets_zero() {
        let rows = vec![vec![1.0, 0.0], vec![2.0, 0.0]];
        let x = fit(&rows, &[2.0, 4.0]);
        assert!((x[0] - 2.0).abs() < 1e-12 && x[1] == 0.0, "{x:?}");
    }
}
