//! Softmax and log-softmax over the last dimension.

use crate::elementwise::exp_fast;

/// Maximum of a row (NaNs ignored), over 16 lanes.
#[inline(always)]
fn row_max(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = x.chunks_exact(16);
    for (j, &v) in chunks.remainder().iter().enumerate() {
        lanes[j] = lanes[j].max(v);
    }
    for c in chunks {
        for j in 0..16 {
            lanes[j] = lanes[j].max(c[j]);
        }
    }
    lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

simd_fn! {
    /// `out = softmax(beta * x)` row by row, rows of length `n`: exponentials of
    /// `(x - max) * beta` (vectorized), summed over 16 lanes in a fixed order.
    pub fn softmax(input: &[f32], n: usize, beta: f32, out: &mut [f32]) {
        if n == 0 {
            return;
        }
        for (x, o) in input.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            let m = row_max(x);
            let mut lanes = [0.0f32; 16];
            let (mut oc, mut xc) = (o.chunks_exact_mut(16), x.chunks_exact(16));
            for (oc, xc) in (&mut oc).zip(&mut xc) {
                for j in 0..16 {
                    oc[j] = exp_fast((xc[j] - m) * beta);
                    lanes[j] += oc[j];
                }
            }
            for (j, (ov, &v)) in oc.into_remainder().iter_mut().zip(xc.remainder()).enumerate() {
                *ov = exp_fast((v - m) * beta);
                lanes[j] += *ov;
            }
            let inv = 1.0 / crate::hsum16(lanes);
            for ov in o.iter_mut() {
                *ov *= inv;
            }
        }
    }
}

simd_fn! {
    /// `out = log_softmax(x)` row by row.
    pub fn log_softmax(input: &[f32], n: usize, out: &mut [f32]) {
        if n == 0 {
            return;
        }
        for (x, o) in input.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            let m = row_max(x);
            let mut lanes = [0.0f32; 16];
            let xc = x.chunks_exact(16);
            for (j, &v) in xc.remainder().iter().enumerate() {
                lanes[j] += exp_fast(v - m);
            }
            for c in xc {
                for j in 0..16 {
                    lanes[j] += exp_fast(c[j] - m);
                }
            }
            let ls = crate::hsum16(lanes).ln();
            for (ov, &v) in o.iter_mut().zip(x) {
                *ov = v - m - ls;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn softmax_matches_the_definition() {
        crate::level::each(|_| {
            // A row longer than one vector with a remainder, and a single element.
            for n in [37usize, 1] {
                let x: Vec<f32> = (0..2 * n).map(|i| ((i * 7 % 19) as f32 - 9.0) * 0.7).collect();
                let mut o = vec![0.0; x.len()];
                super::softmax(&x, n, 0.8, &mut o);
                let mut l = vec![0.0; x.len()];
                super::log_softmax(&x, n, &mut l);
                for (r, (orow, lrow)) in x.chunks(n).zip(o.chunks(n).zip(l.chunks(n))) {
                    let m = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let s: f64 = r.iter().map(|&v| (((v - m) * 0.8) as f64).exp()).sum();
                    let ls: f64 = r.iter().map(|&v| ((v - m) as f64).exp()).sum::<f64>().ln();
                    for ((&v, &a), &b) in r.iter().zip(orow).zip(lrow) {
                        let want = (((v - m) * 0.8) as f64).exp() / s;
                        assert!((a as f64 - want).abs() < 1e-6, "softmax n {n}: {a} vs {want}");
                        let want_log = (v - m) as f64 - ls;
                        assert!((b as f64 - want_log).abs() < 1e-5, "log_softmax n {n}: {b} vs {want_log}");
                    }
                }
            }
        });
    }

    #[test]
    fn softmax_sums_to_one() {
        crate::level::each(|_| {
            let mut o = [0.0; 4];
            super::softmax(&[1.0, 2.0, 3.0, 4.0], 4, 1.0, &mut o);
            assert!((o.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        });
    }
}
