//! Matrix products: fully-connected layers and (batched) matmul, float32.

use crate::Clamp;

/// Dot product with eight independent accumulators so the compiler can
/// vectorise without reassociating a single serial sum.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Fully connected: `out[b, o] = clamp(bias[o] + sum_i input[b, i] * w[o, i])`.
pub fn fully_connected(input: &[f32], w: &[f32], bias: Option<&[f32]>, batch: usize, in_n: usize, out_n: usize, clamp: Clamp, out: &mut [f32]) {
    for b in 0..batch {
        let x = &input[b * in_n..][..in_n];
        let o = &mut out[b * out_n..][..out_n];
        for (j, ov) in o.iter_mut().enumerate() {
            let s = dot(x, &w[j * in_n..][..in_n]) + bias.map_or(0.0, |bv| bv[j]);
            *ov = clamp.apply(s);
        }
    }
}

simd_fn! {
    /// `out[m, n] = sum_k a[m, k] * b[k, n]`, all row-major. Compiled per vector
    /// level: the row update is one multiply-add over `n` contiguous floats.
    pub fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
        for i in 0..m {
            let row = &mut out[i * n..][..n];
            row.fill(0.0);
            for kk in 0..k {
                let av = a[i * k + kk];
                let br = &b[kk * n..][..n];
                for (o, &bv) in row.iter_mut().zip(br) {
                    *o += av * bv;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fc_matches_naive() {
        let (batch, i_n, o_n) = (3, 19, 7);
        let x: Vec<f32> = (0..batch * i_n).map(|v| (v % 5) as f32 - 2.0).collect();
        let w: Vec<f32> = (0..o_n * i_n).map(|v| (v % 7) as f32 * 0.25).collect();
        let bias: Vec<f32> = (0..o_n).map(|v| v as f32).collect();
        let mut out = vec![0.0; batch * o_n];
        fully_connected(&x, &w, Some(&bias), batch, i_n, o_n, Clamp::NONE, &mut out);
        for b in 0..batch {
            for o in 0..o_n {
                let r: f32 = (0..i_n).map(|i| x[b * i_n + i] * w[o * i_n + i]).sum::<f32>() + bias[o];
                assert!((out[b * o_n + o] - r).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn matmul_small() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let mut o = [0.0; 4];
        matmul(&a, &b, 2, 3, 2, &mut o);
        assert_eq!(o, [4.0, 5.0, 10.0, 11.0]);
    }
}
