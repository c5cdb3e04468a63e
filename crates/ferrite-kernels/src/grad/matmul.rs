//! Gradient of BATCH_MATMUL (float32) with `adj_x` / `adj_y` and broadcast batch
//! dimensions: `Y[p] = op(A[ia[p]]) * op(B[ib[p]])` over flat output batches `p`
//! (`ia`, `ib` map them to operand batches, as the forward builder computes).
//! An operand batch used by several output batches gets the sum of their
//! gradients, in output-batch order. Threads take disjoint rows of the stored
//! gradient: the same bits for any thread count.

use super::split::for_rows;
use crate::parallel::ThreadPool;

/// The shape of one matrix product: `op(A)` is `m x k`, `op(B)` `k x n`; `A` is
/// stored `k x m` when `adj_x`, `B` `n x k` when `adj_y`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatMul {
    /// Rows of the product.
    pub m: usize,
    /// Inner size.
    pub k: usize,
    /// Columns of the product.
    pub n: usize,
    /// `A` is stored transposed.
    pub adj_x: bool,
    /// `B` is stored transposed.
    pub adj_y: bool,
}

/// A strided matrix view: element (i, j) at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

impl View<'_> {
    #[inline(always)]
    fn at(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.rs + j * self.cs]
    }
}

/// `row += x[i, :] * y` (`x` is `1 x s` at row `i`, `y` `s x row.len()`).
#[inline(always)]
fn add_row_product(row: &mut [f32], x: View<'_>, i: usize, s: usize, y: View<'_>) {
    if y.cs == 1 {
        let len = row.len();
        for l in 0..s {
            let xv = x.at(i, l);
            for (c, &yv) in row.iter_mut().zip(&y.data[l * y.rs..][..len]) {
                *c += xv * yv;
            }
        }
    } else {
        for (j, c) in row.iter_mut().enumerate() {
            let mut acc = 0.0;
            for l in 0..s {
                acc += x.at(i, l) * y.at(l, j);
            }
            *c += acc;
        }
    }
}

/// One gradient: for each operand batch `e` and stored row `i`,
/// `out[e][i, :] = sum_{p: map[p] = e} x_p[i, :] * y_p` with `x_p` `rows x s`.
#[allow(clippy::too_many_arguments)]
fn gradient<'a>(
    out: &mut [f32],
    map: &[usize],
    rows: usize,
    cols: usize,
    s: usize,
    x: &(dyn Fn(usize) -> View<'a> + Sync),
    y: &(dyn Fn(usize) -> View<'a> + Sync),
    pool: Option<&ThreadPool>,
) {
    let batches = out.len() / (rows * cols).max(1);
    for_rows(pool, out, batches * rows, cols, 1, &|_, range, o| {
        for (flat, row) in range.zip(o.chunks_exact_mut(cols.max(1))) {
            let (e, i) = (flat / rows, flat % rows);
            row.fill(0.0);
            for (p, _) in map.iter().enumerate().filter(|&(_, &b)| b == e) {
                add_row_product(row, x(p), i, s, y(p));
            }
        }
    });
}

/// Backward pass of BATCH_MATMUL: `a` holds the `A` operand batches, `b` the
/// `B` ones, `dy` the `ia.len()` products (`m x n` each). Writes `da` (`a`'s
/// shape) and / or `db` (`b`'s). False, writing nothing, on inconsistent sizes
/// or a batch map pointing outside its operand.
#[allow(clippy::too_many_arguments)]
pub fn batch_matmul_backward(
    a: &[f32],
    b: &[f32],
    ia: &[usize],
    ib: &[usize],
    s: &MatMul,
    dy: &[f32],
    da: Option<&mut [f32]>,
    db: Option<&mut [f32]>,
    pool: Option<&ThreadPool>,
) -> bool {
    let MatMul { m, k, n, adj_x, adj_y } = *s;
    let (sa, sb, sy) = (m * k, k * n, m * n);
    let (na, nb) = (a.len() / sa.max(1), b.len() / sb.max(1));
    if ia.len() != ib.len()
        || dy.len() < ia.len() * sy
        || ia.iter().any(|&e| e >= na)
        || ib.iter().any(|&e| e >= nb)
        || da.as_ref().is_some_and(|d| d.len() != na * sa)
        || db.as_ref().is_some_and(|d| d.len() != nb * sb)
    {
        return false;
    }
    let dyv = |p: usize| View { data: &dy[p * sy..][..sy], rs: n, cs: 1 };
    let dyt = |p: usize| View { data: &dy[p * sy..][..sy], rs: 1, cs: n };
    // op(B)^T (n x k), op(B) (k x n), op(A)^T (k x m), op(A) (m x k) as views of storage.
    let b_at = |p: usize| &b[ib[p] * sb..][..sb];
    let a_at = |p: usize| &a[ia[p] * sa..][..sa];
    if let Some(da) = da {
        if !adj_x {
            // dA = dY * op(B)^T.
            let bt = |p: usize| if adj_y { View { data: b_at(p), rs: k, cs: 1 } } else { View { data: b_at(p), rs: 1, cs: n } };
            gradient(da, ia, m, k, n, &dyv, &bt, pool);
        } else {
            // dA (stored k x m) = op(B) * dY^T.
            let bo = |p: usize| if adj_y { View { data: b_at(p), rs: 1, cs: k } } else { View { data: b_at(p), rs: n, cs: 1 } };
            gradient(da, ia, k, m, n, &bo, &dyt, pool);
        }
    }
    if let Some(db) = db {
        if !adj_y {
            // dB = op(A)^T * dY.
            let at = |p: usize| if adj_x { View { data: a_at(p), rs: m, cs: 1 } } else { View { data: a_at(p), rs: 1, cs: k } };
            gradient(db, ib, k, n, m, &at, &dyv, pool);
        } else {
            // dB (stored n x k) = dY^T * op(A).
            let ao = |p: usize| if adj_x { View { data: a_at(p), rs: 1, cs: m } } else { View { data: a_at(p), rs: k, cs: 1 } };
            gradient(db, ib, n, k, m, &dyt, &ao, pool);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grad::check::{assert_grad, bits_equal_across_threads, Rng};

    /// The forward product by its definition, over the same batch maps.
    fn forward(a: &[f32], b: &[f32], ia: &[usize], ib: &[usize], s: &MatMul) -> Vec<f32> {
        let MatMul { m, k, n, adj_x, adj_y } = *s;
        let mut y = vec![0.0; ia.len() * m * n];
        for p in 0..ia.len() {
            let (a, b) = (&a[ia[p] * m * k..], &b[ib[p] * k * n..]);
            for i in 0..m {
                for j in 0..n {
                    y[(p * m + i) * n + j] =
                        (0..k).map(|l| (if adj_x { a[l * m + i] } else { a[i * k + l] }) * (if adj_y { b[j * k + l] } else { b[l * n + j] })).sum();
                }
            }
        }
        y
    }

    #[test]
    fn batch_matmul_gradients_match_finite_differences() {
        let mut rng = Rng::new(51);
        for case in 0..24 {
            let (m, k, n) = (rng.size(1, 9), rng.size(1, 9), rng.size(1, 9));
            let s = MatMul { m, k, n, adj_x: case % 2 == 1, adj_y: case / 2 % 2 == 1 };
            // Batches [2, 3] broadcast against [3], [1] or [2, 3].
            let (na, nb) = [(6, 3), (6, 1), (3, 6), (1, 6), (6, 6)][case % 5];
            let ia: Vec<usize> = (0..6).map(|p| if na == 6 { p } else { p % na }).collect();
            let ib: Vec<usize> = (0..6).map(|p| if nb == 6 { p } else { p % nb }).collect();
            let a = rng.vec(na * m * k);
            let b = rng.vec(nb * k * n);
            let dy = rng.vec(6 * m * n);
            let got = bits_equal_across_threads(|t| {
                let (mut da, mut db) = (vec![f32::NAN; a.len()], vec![f32::NAN; b.len()]);
                assert!(batch_matmul_backward(&a, &b, &ia, &ib, &s, &dy, Some(&mut da), Some(&mut db), Some(&ThreadPool::new(t))));
                vec![da, db]
            });
            let what = format!("case {case}: {s:?} batches {na} {nb}");
            assert_grad(&what, &a, &got[0], &dy, |a| forward(a, &b, &ia, &ib, &s), true);
            assert_grad(&what, &b, &got[1], &dy, |b| forward(&a, b, &ia, &ib, &s), true);
        }
        let s = MatMul { m: 1, k: 1, n: 1, adj_x: false, adj_y: false };
        assert!(!batch_matmul_backward(&[1.0], &[1.0], &[0], &[1], &s, &[1.0], None, None, None));
    }
}
