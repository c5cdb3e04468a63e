//! Reductions over a set of axes, and arg-min/max along one axis.

use crate::strides;

/// Reduction kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reducer {
    /// Sum.
    Sum,
    /// Mean.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Product.
    Prod,
}

simd_fn! {
/// Reduces `input` of `shape` over the dims flagged in `reduce`; `out` holds
/// the product of the kept dims.
pub fn reduce(input: &[f32], shape: &[usize], reduce: &[bool], kind: Reducer, out: &mut [f32]) {
    let init = match kind {
        Reducer::Sum | Reducer::Mean => 0.0,
        Reducer::Max => f32::NEG_INFINITY,
        Reducer::Min => f32::INFINITY,
        Reducer::Prod => 1.0,
    };
    out.fill(init);
    let r = shape.len();
    let combine = |a: f32, v: f32| match kind {
        Reducer::Sum | Reducer::Mean => a + v,
        Reducer::Max => a.max(v),
        Reducer::Min => a.min(v),
        Reducer::Prod => a * v,
    };
    // Reduced axes forming one contiguous block (spatial mean of NHWC, last-axis
    // sums): outer x reduced x inner loops with a contiguous inner loop, in the
    // general path's summation order except for long last-axis runs.
    let first = (0..r).find(|&d| reduce[d]);
    let last = (0..r).rev().find(|&d| reduce[d]);
    if let (Some(f0), Some(l0)) = (first, last) {
        if (f0..=l0).all(|d| reduce[d]) {
            let outer: usize = shape[..f0].iter().product();
            let red: usize = shape[f0..=l0].iter().product();
            let inner: usize = shape[l0 + 1..].iter().product();
            if inner == 1 && red >= 32 {
                // Each output reduces one contiguous run: 16 interleaved partial
                // results, so the loop vectorizes, then those 16 combined.
                for (o, run) in out.iter_mut().zip(input.chunks_exact(red)) {
                    let mut lanes = [init; 16];
                    let mut chunks = run.chunks_exact(16);
                    for c in &mut chunks {
                        for (l, &v) in lanes.iter_mut().zip(c) {
                            *l = combine(*l, v);
                        }
                    }
                    let mut a = lanes.iter().fold(init, |a, &l| combine(a, l));
                    for &v in chunks.remainder() {
                        a = combine(a, v);
                    }
                    *o = a;
                }
            } else {
                for o in 0..outer {
                    let acc = &mut out[o * inner..(o + 1) * inner];
                    for k in 0..red {
                    let src = &input[(o * red + k) * inner..][..inner];
                    for (a, &v) in acc.iter_mut().zip(src) {
                        *a = combine(*a, v);
                    }
                }
                }
            }
            if kind == Reducer::Mean && red > 0 {
                for a in out.iter_mut() {
                    *a /= red as f32;
                }
            }
            return;
        }
    }
    let mut kept = [1usize; crate::MAX_DIMS];
    for d in 0..r {
        if !reduce[d] {
            kept[d] = shape[d];
        }
    }
    let ost = strides(&kept[..r]);
    let mut idx = [0usize; crate::MAX_DIMS];
    for &v in input {
        let o: usize = (0..r).map(|d| if reduce[d] { 0 } else { idx[d] * ost[d] }).sum();
        let a = &mut out[o];
        *a = match kind {
            Reducer::Sum | Reducer::Mean => *a + v,
            Reducer::Max => a.max(v),
            Reducer::Min => a.min(v),
            Reducer::Prod => *a * v,
        };
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    if kind == Reducer::Mean {
        let count: usize = (0..r).filter(|&d| reduce[d]).map(|d| shape[d]).product();
        if count > 0 {
            for a in out.iter_mut() {
                *a /= count as f32;
            }
        }
    }
}
}

/// Index of the max (or min) along `axis`; ties pick the first index.
pub fn arg_extreme<T: Copy + PartialOrd>(input: &[T], shape: &[usize], axis: usize, want_max: bool, out: &mut [i64]) {
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0;
            let mut bv = input[o * n * inner + i];
            for k in 1..n {
                let v = input[(o * n + k) * inner + i];
                if (want_max && v > bv) || (!want_max && v < bv) {
                    bv = v;
                    best = k;
                }
            }
            out[o * inner + i] = best as i64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_last_axis_runs_match_sequential_folds() {
        for &(outer, red) in &[(1, 32), (3, 128), (2, 1537), (4, 47)] {
            let x: Vec<f32> = (0..outer * red).map(|i| ((i * 29 % 31) as f32 - 15.0) * 0.125).collect();
            for kind in [Reducer::Sum, Reducer::Mean, Reducer::Max, Reducer::Min] {
                let mut out = vec![0.0; outer];
                reduce(&x, &[outer, red], &[false, true], kind, &mut out);
                for (o, run) in x.chunks_exact(red).enumerate() {
                    let want = match kind {
                        Reducer::Sum => run.iter().sum::<f32>(),
                        Reducer::Mean => run.iter().sum::<f32>() / red as f32,
                        Reducer::Max => run.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v)),
                        _ => run.iter().fold(f32::INFINITY, |a, &v| a.min(v)),
                    };
                    // Eighths sum exactly in any order here.
                    assert_eq!(out[o], want, "{kind:?} outer {outer} red {red}");
                }
            }
        }
    }

    #[test]
    fn contiguous_and_strided_reductions_agree() {
        let shape = [2usize, 3, 4, 5];
        let x: Vec<f32> = (0..120).map(|v| (v % 11) as f32 - 3.0).collect();
        for mask in 1..16u32 {
            let flags: Vec<bool> = (0..4).map(|d| mask >> d & 1 == 1).collect();
            let n: usize = (0..4).filter(|&d| !flags[d]).map(|d| shape[d]).product();
            let mut out = vec![0.0; n];
            reduce(&x, &shape, &flags, Reducer::Sum, &mut out);
            // Naive reference.
            let mut want = vec![0.0f32; n];
            for (i, &v) in x.iter().enumerate() {
                let idx = [i / 60, i / 20 % 3, i / 5 % 4, i % 5];
                let mut o = 0;
                for d in 0..4 {
                    if !flags[d] {
                        o = o * shape[d] + idx[d];
                    }
                }
                want[o] += v;
            }
            assert_eq!(out, want, "mask {mask:b}");
        }
    }

    #[test]
    fn mean_over_spatial() {
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let mut out = [0.0; 3];
        reduce(&x, &[1, 2, 2, 3], &[false, true, true, false], Reducer::Mean, &mut out);
        assert_eq!(out, [4.5, 5.5, 6.5]);
    }
}
