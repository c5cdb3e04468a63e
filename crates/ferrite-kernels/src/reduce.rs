//! Reductions over a set of axes (float, and integer MEAN), and arg-min/max
//! along one axis.

use crate::quant::{multiply_by_quantized_multiplier, quantize_multiplier, QuantInt};
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
                    if inner == 0 {
                        break;
                    }
                    let acc = &mut out[o * inner..(o + 1) * inner];
                    let block = &input[o * red * inner..(o + 1) * red * inner];
                    // Few kept values (the channels of a spatial mean): up to 64 of
                    // them at a time over the whole reduced run, in local blocks that
                    // stay in registers, four independent chains of steps. Read back
                    // from `out` at every step, each step waited on the store before
                    // it (most of a small model's MEAN time). Same order per output:
                    // start, then the reduced steps in turn.
                    #[inline(always)]
                    fn columns<const N: usize>(block: &[f32], inner: usize, j: usize, init: f32, combine: impl Fn(f32, f32) -> f32, acc: &mut [f32]) {
                        let mut lanes = [[init; 16]; N];
                        for row in block.chunks_exact(inner) {
                            for (ls, vs) in lanes.iter_mut().zip(row[j..j + 16 * N].chunks_exact(16)) {
                                for (l, &v) in ls.iter_mut().zip(vs) {
                                    *l = combine(*l, v);
                                }
                            }
                        }
                        for (dst, ls) in acc[j..j + 16 * N].chunks_exact_mut(16).zip(&lanes) {
                            dst.copy_from_slice(ls);
                        }
                    }
                    let mut j = 0;
                    while inner <= 256 && j + 16 <= inner {
                        let n = ((inner - j) / 16).min(4) * 16;
                        match n {
                            64 => columns::<4>(block, inner, j, init, combine, acc),
                            48 => columns::<3>(block, inner, j, init, combine, acc),
                            32 => columns::<2>(block, inner, j, init, combine, acc),
                            _ => columns::<1>(block, inner, j, init, combine, acc),
                        }
                        j += n;
                    }
                    for row in block.chunks_exact(inner) {
                        for (a, &v) in acc[j..].iter_mut().zip(&row[j..]) {
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
    for_each_output_offset(shape, reduce, |i, o| {
        let (a, v) = (&mut out[o], input[i]);
        *a = match kind {
            Reducer::Sum | Reducer::Mean => *a + v,
            Reducer::Max => a.max(v),
            Reducer::Min => a.min(v),
            Reducer::Prod => *a * v,
        };
    });
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

/// Element types of [`reduce_ints`]: the plain integers (int32, int64) LiteRT's
/// SUM / REDUCE_PROD / REDUCE_MAX / REDUCE_MIN take, and the stored integers of
/// quantized tensors, whose REDUCE_MAX / REDUCE_MIN LiteRT takes as stored (the
/// converter gives them the input's quantization).
pub trait IntReduce: Copy + Ord {
    /// The sum's start.
    const ZERO: Self;
    /// The product's start.
    const ONE: Self;
    /// The maximum's start (the type's lowest value, as LiteRT starts it).
    const LOWEST: Self;
    /// The minimum's start.
    const HIGHEST: Self;
    /// Two's-complement addition: LiteRT's kernels add in the element type, and an
    /// overflowing int32 sum wraps on every target it ships.
    fn wrapping_add(self, o: Self) -> Self;
    /// Two's-complement multiplication, for the same reason.
    fn wrapping_mul(self, o: Self) -> Self;
}

macro_rules! int_reduce {
    ($($t:ty),*) => {$(
        impl IntReduce for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            fn wrapping_add(self, o: Self) -> Self {
                <$t>::wrapping_add(self, o)
            }
            fn wrapping_mul(self, o: Self) -> Self {
                <$t>::wrapping_mul(self, o)
            }
        }
    )*};
}
int_reduce!(i8, u8, i16, i32, i64);

/// Integer SUM / REDUCE_PROD / REDUCE_MAX / REDUCE_MIN of `input` of `shape` over
/// the dims flagged in `reduce` (rank at most [`crate::MAX_DIMS`]), in input order;
/// `out` holds the product of the kept dims. An empty reduction gives the start
/// value (0, 1, the type's lowest or highest), as LiteRT's does. `Reducer::Mean`
/// is not an integer reduction here and sums.
///
/// # Panics
/// If `out` is shorter than the kept dims' product or the rank exceeds
/// [`crate::MAX_DIMS`] (callers size both at prepare).
pub fn reduce_ints<T: IntReduce>(input: &[T], shape: &[usize], reduce: &[bool], kind: Reducer, out: &mut [T]) {
    let init = match kind {
        Reducer::Sum | Reducer::Mean => T::ZERO,
        Reducer::Max => T::LOWEST,
        Reducer::Min => T::HIGHEST,
        Reducer::Prod => T::ONE,
    };
    out.fill(init);
    for_each_output_offset(shape, reduce, |i, o| {
        let (a, v) = (&mut out[o], input[i]);
        *a = match kind {
            Reducer::Sum | Reducer::Mean => a.wrapping_add(v),
            Reducer::Max => (*a).max(v),
            Reducer::Min => (*a).min(v),
            Reducer::Prod => a.wrapping_mul(v),
        };
    });
}

/// Calls `f(i, o)` for every element `i` of an input of `shape` (rank at most
/// [`crate::MAX_DIMS`]), in order, with the offset `o` of the output element it
/// reduces into when the dims flagged in `reduce` are reduced away. The offset is
/// kept as the input's coordinates advance like an odometer (reduced dims step it
/// by 0), so no element's offset is computed from scratch.
pub(crate) fn for_each_output_offset(shape: &[usize], reduce: &[bool], mut f: impl FnMut(usize, usize)) {
    let r = shape.len();
    let mut kept = [1usize; crate::MAX_DIMS];
    for d in 0..r {
        if !reduce[d] {
            kept[d] = shape[d];
        }
    }
    let ost = strides(&kept[..r]);
    let mut step = [0usize; crate::MAX_DIMS];
    for d in 0..r {
        step[d] = if reduce[d] { 0 } else { ost[d] };
    }
    let n: usize = shape.iter().product();
    let mut idx = [0usize; crate::MAX_DIMS];
    let mut o = 0usize;
    for i in 0..n {
        f(i, o);
        for d in (0..r).rev() {
            idx[d] += 1;
            o += step[d];
            if idx[d] < shape[d] {
                break;
            }
            o -= step[d] * shape[d];
            idx[d] = 0;
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

/// An integer MEAN as LiteRT computes it: integer sums, the input zero point's
/// share taken out, and one fixed-point rescale that also divides by the count.
/// Built once per shape; [`mean_int`] runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeanQ {
    /// Input shape.
    shape: Vec<usize>,
    /// How far each input dim moves the output index (0 along reduced dims).
    out_stride: Vec<usize>,
    /// Output elements.
    outputs: usize,
    /// Input elements averaged into each output.
    count: usize,
    /// Input zero point.
    in_zp: i32,
    /// Output zero point.
    out_zp: i32,
    /// `in_scale / out_scale / count` as a fixed-point multiplier...
    multiplier: i32,
    /// ...and its shift.
    shift: i32,
    /// `[outer, reduced, inner]` when the reduced dims (size-1 dims aside) are
    /// consecutive: the input is then `outer` blocks of `reduced` rows of
    /// `inner` values, each block summed row by row into `inner` outputs.
    blocks: Option<[usize; 3]>,
}

impl MeanQ {
    /// MEAN of `shape` over the dims flagged in `reduce`, from `(in_scale, in_zp)`
    /// to `(out_scale, out_zp)`. The caller bounds the shape (the sums must fit in
    /// 64 bits; the run's scratch is sized by [`MeanQ::outputs`]).
    pub fn new(shape: &[usize], reduce: &[bool], (in_scale, in_zp): (f32, i32), (out_scale, out_zp): (f32, i32)) -> MeanQ {
        let count: usize = shape.iter().zip(reduce).filter(|(_, &f)| f).map(|(&s, _)| s).product();
        let mut out_stride = vec![0usize; shape.len()];
        let mut outputs = 1;
        for d in (0..shape.len()).rev() {
            if !reduce[d] {
                out_stride[d] = outputs;
                outputs *= shape[d];
            }
        }
        // LiteRT folds 1/count into the input/output rescale: the multiplier is
        // shifted left by floor(log2 count) (bounded so the shift stays in range),
        // divided by the count, and applied to the zero-point-corrected sum.
        let (m, e) = quantize_multiplier(f64::from(in_scale) / f64::from(out_scale));
        let sh = if count == 0 { 0 } else { (count.ilog2() as i32).min(32).min(31 + e).max(0) };
        let multiplier = if count == 0 { 0 } else { ((i64::from(m) << sh) / count as i64) as i32 };
        // Consecutive reduced dims: the product of the dims before the first and
        // after the last; any kept dim of size > 1 between them breaks the run.
        let big = |d: usize| shape[d] > 1;
        let first = (0..shape.len()).find(|&d| reduce[d] && big(d));
        let last = (0..shape.len()).rev().find(|&d| reduce[d] && big(d));
        let blocks = match (first, last) {
            (Some(f), Some(l)) if (f..=l).all(|d| reduce[d] || !big(d)) => Some([shape[..f].iter().product(), count, shape[l + 1..].iter().product()]),
            _ => None,
        };
        MeanQ { shape: shape.to_vec(), out_stride, outputs, count, in_zp, out_zp, multiplier, shift: e - sh, blocks }
    }

    /// Output elements (the length of [`mean_int`]'s `sums` scratch).
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Input rank (the length of [`mean_int`]'s `index` scratch).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// [`mean_int`] on int8, compiled in this crate (as [`crate::movement::PadWord`]
/// says why) and never inlined into the runtime's size-optimized closures.
#[inline(never)]
pub fn mean_int_i8(input: &[i8], p: &MeanQ, sums: &mut [i64], index: &mut [usize], out: &mut [i8]) {
    mean_int_with(input, p, sums, index, out, add_rows_i8)
}

/// [`mean_int`] on uint8, as [`mean_int_i8`].
#[inline(never)]
pub fn mean_int_u8(input: &[u8], p: &MeanQ, sums: &mut [i64], index: &mut [usize], out: &mut [u8]) {
    mean_int_with(input, p, sums, index, out, add_rows_u8)
}

/// Adds each of `rows`' rows (`inner` values) from column `c0` into `part`
/// (`part.len()` columns): blocks of 16 columns summed down all the rows in
/// registers, each a fixed-size chunk (one widening load and one add at any
/// vector width; a loop over the runtime column count leaves the common widths,
/// 32 to 64 columns, to the scalar remainder of a 64-wide vector loop). Adding
/// into `part` row after row instead chains each row's add on the previous
/// row's store of the same columns.
#[inline(always)]
fn add_rows<T: QuantInt>(rows: &[T], inner: usize, c0: usize, part: &mut [i32]) {
    let w = part.len();
    let mut chunks = part.chunks_exact_mut(16);
    for (k, a) in (&mut chunks).enumerate() {
        let a: &mut [i32; 16] = a.try_into().expect("16 columns");
        let c = c0 + 16 * k;
        let mut sum = *a;
        for row in rows.chunks_exact(inner) {
            let v: &[T; 16] = row[c..c + 16].try_into().expect("16 columns");
            sum = std::array::from_fn(|i| sum[i] + v[i].widen());
        }
        *a = sum;
    }
    let done = w - w % 16;
    let rest = chunks.into_remainder();
    for row in rows.chunks_exact(inner) {
        for (a, v) in rest.iter_mut().zip(&row[c0 + done..c0 + w]) {
            *a += v.widen();
        }
    }
}

simd_fn! {
    /// [`add_rows`] on int8, built for each vector level.
    fn add_rows_i8(rows: &[i8], inner: usize, c0: usize, part: &mut [i32]) {
        add_rows(rows, inner, c0, part)
    }
}

simd_fn! {
    /// [`add_rows`] on uint8, built for each vector level.
    fn add_rows_u8(rows: &[u8], inner: usize, c0: usize, part: &mut [i32]) {
        add_rows(rows, inner, c0, part)
    }
}

/// [`mean_int`] on int16, as [`mean_int_i8`].
#[inline(never)]
pub fn mean_int_i16(input: &[i16], p: &MeanQ, sums: &mut [i64], index: &mut [usize], out: &mut [i16]) {
    mean_int(input, p, sums, index, out)
}

/// Integer MEAN (see [`MeanQ`]). `sums` holds [`MeanQ::outputs`] accumulators and
/// `index` [`MeanQ::rank`] counters (scratch, so that runs do not allocate).
pub fn mean_int<T: QuantInt>(input: &[T], p: &MeanQ, sums: &mut [i64], index: &mut [usize], out: &mut [T]) {
    mean_int_with(input, p, sums, index, out, add_rows::<T>)
}

/// [`mean_int`] with `add_rows` summing runs of whole rows into the int32
/// partial sums of some columns (as [`add_rows`]).
fn mean_int_with<T: QuantInt>(input: &[T], p: &MeanQ, sums: &mut [i64], index: &mut [usize], out: &mut [T], add_rows: fn(&[T], usize, usize, &mut [i32])) {
    sums.fill(0);
    index.fill(0);
    let blocks = p.blocks.filter(|&[o, r, i]| crate::product(&[o, r, i]) == Some(input.len()) && crate::product(&[o, i]) == Some(sums.len()));
    if let Some([_, reduced, inner]) = blocks {
        // Rows of values added into the block's sums in int32 (a loop the compiler
        // vectorizes, where the odometer below costs a dozen instructions a value),
        // moved into the int64 sums every `PART` rows: 2^15 values of at most
        // 2^15 in magnitude cannot overflow int32.
        const PART: usize = 1 << 15;
        const COLS: usize = 64;
        for (block, bsum) in input.chunks_exact((reduced * inner).max(1)).zip(sums.chunks_exact_mut(inner.max(1))) {
            if inner == 1 {
                bsum[0] = block.chunks(PART).map(|c| i64::from(c.iter().map(|v| v.widen()).sum::<i32>())).sum();
                continue;
            }
            for c0 in (0..inner).step_by(COLS) {
                let w = COLS.min(inner - c0);
                let mut r0 = 0;
                while r0 < reduced {
                    let r1 = (r0 + PART).min(reduced);
                    let mut part = [0i32; COLS];
                    add_rows(&block[r0 * inner..r1 * inner], inner, c0, &mut part[..w]);
                    for (s, &a) in bsum[c0..c0 + w].iter_mut().zip(&part[..w]) {
                        *s += i64::from(a);
                    }
                    r0 = r1;
                }
            }
        }
    }
    let mut o = 0usize;
    for &v in input.iter().take(if blocks.is_some() { 0 } else { input.len() }) {
        sums[o] += i64::from(v.widen());
        // Odometer over the input's multi-index, tracking the output offset.
        for d in (0..p.shape.len()).rev() {
            index[d] += 1;
            o += p.out_stride[d];
            if index[d] < p.shape[d] {
                break;
            }
            o -= p.out_stride[d] * p.shape[d];
            index[d] = 0;
        }
    }
    for (ov, &sum) in out.iter_mut().zip(sums.iter()) {
        let centered = sum.wrapping_sub(i64::from(p.in_zp) * p.count as i64) as i32;
        let v = multiply_by_quantized_multiplier(centered, p.multiplier, p.shift).saturating_add(p.out_zp);
        *ov = T::narrow(v.clamp(T::MIN, T::MAX));
    }
}

/// REDUCE_ALL (`all`) / REDUCE_ANY of booleans (one byte each, nonzero is true)
/// over the dims flagged in `reduce`; `out` holds the product of the kept dims.
/// An empty reduction gives true for ALL and false for ANY.
pub fn reduce_bool(input: &[u8], shape: &[usize], reduce: &[bool], all: bool, out: &mut [u8]) {
    out.fill(u8::from(all));
    for_each_output_offset(shape, reduce, |i, o| {
        let t = input[i] != 0;
        // ALL is cleared by a false element, ANY set by a true one.
        if t != all {
            out[o] = u8::from(t);
        }
    });
}

#[cfg(test)]
mod mean_tests {
    use super::*;
    use crate::testutil::{mbqm_ref, Rng};

    type MeanFn<T> = fn(&[T], &MeanQ, &mut [i64], &mut [usize], &mut [T]);

    fn case<T: QuantInt>(rng: &mut Rng, from: fn(i64) -> T, run: MeanFn<T>) {
        let (lo, hi) = (i64::from(T::MIN), i64::from(T::MAX));
        // Shapes past the blocked path's 64 columns and 2^15 rows, a kept
        // size-1 dim between reduced ones, and reduced dims split by a kept one.
        // Pooled feature maps of 48 and 37 channels (whole 16-column chunks
        // and a remainder).
        let fixed: [(&[usize], &[bool]); 7] = [
            (&[1, 25, 20, 48], &[false, true, true, false]),
            (&[1, 13, 1, 37], &[false, true, true, false]),
            (&[1, 40, 150], &[false, true, false]),
            (&[2, 40_000, 1], &[false, true, false]),
            (&[1, 3, 1, 5, 70], &[true, true, false, true, false]),
            (&[4, 3, 5, 2], &[true, false, true, false]),
            (&[1, 32, 64], &[false, true, false]),
        ];
        for round in 0..300 + fixed.len() {
            let (shape, reduce): (Vec<usize>, Vec<bool>) = match fixed.get(round.wrapping_sub(300)) {
                Some((s, r)) => (s.to_vec(), r.to_vec()),
                None => {
                    let rank = rng.size(0, 4);
                    ((0..rank).map(|_| if rng.one_in(9) { 0 } else { rng.dim().min(12) }).collect(), (0..rank).map(|_| rng.one_in(2)).collect())
                }
            };
            let rank = shape.len();
            let in_zp = if rng.one_in(4) { [lo, hi][rng.size(0, 1)] } else { rng.range(lo, hi) } as i32;
            let out_zp = rng.range(lo, hi) as i32;
            let (in_scale, out_scale) = (rng.scale(-3.0, 0.0), rng.scale(-3.0, 0.0));
            let n: usize = shape.iter().product();
            let x: Vec<i64> = if rng.one_in(4) { vec![[lo, hi][rng.size(0, 1)]; n] } else { rng.ints(n, lo, hi) };
            let xt: Vec<T> = x.iter().map(|&v| from(v)).collect();
            let p = MeanQ::new(&shape, &reduce, (in_scale, in_zp), (out_scale, out_zp));
            let (mut sums, mut index) = (vec![0i64; p.outputs()], vec![0usize; p.rank()]);
            let mut got = vec![from(0); p.outputs()];
            run(&xt, &p, &mut sums, &mut index, &mut got);

            // The definition: each output sums the inputs whose kept coordinates
            // are its own; the sum less count * zero point, times the real
            // multiplier / count as LiteRT forms it, rounded, plus the zero point.
            let kept: Vec<usize> = (0..rank).filter(|&d| !reduce[d]).collect();
            let outputs: usize = kept.iter().map(|&d| shape[d]).product();
            let count: usize = (0..rank).filter(|&d| reduce[d]).map(|d| shape[d]).product();
            let mut want_sum = vec![0i64; outputs];
            for (flat, &v) in x.iter().enumerate() {
                let mut coords = vec![0usize; rank];
                let mut rest = flat;
                for d in (0..rank).rev() {
                    coords[d] = rest % shape[d];
                    rest /= shape[d];
                }
                let o = kept.iter().fold(0, |o, &d| o * shape[d] + coords[d]);
                want_sum[o] += v;
            }
            let (m, e) = quantize_multiplier(f64::from(in_scale) / f64::from(out_scale));
            let log2 = if count == 0 { 0 } else { 63 - (count as u64).leading_zeros() as i32 };
            let left = log2.min(32).min(31 + e).max(0);
            let mult = if count == 0 { 0 } else { ((i64::from(m) * (1 << left)) / count as i64) as i32 };
            assert_eq!(got.len(), outputs);
            for (o, (&g, &s)) in got.iter().zip(&want_sum).enumerate() {
                let centered = s - i64::from(in_zp) * count as i64;
                let want = (i64::from(mbqm_ref(centered as i32, mult, e - left)) + i64::from(out_zp)).clamp(lo, hi);
                assert_eq!(i64::from(g.widen()), want, "round {round} {shape:?} {reduce:?} output {o}");
                // Within a step of the real mean, where nothing saturates.
                if count > 0 && want > lo && want < hi {
                    let real = f64::from(in_scale) * centered as f64 / count as f64 / f64::from(out_scale) + f64::from(out_zp);
                    assert!((want as f64 - real).abs() <= 1.0, "round {round}: {want} vs {real}");
                }
            }
        }
    }

    #[test]
    fn integer_mean_matches_the_definition() {
        crate::level::each(|_| {
            let mut rng = Rng::new(61);
            case::<i8>(&mut rng, |v| v as i8, mean_int_i8);
            case::<u8>(&mut rng, |v| v as u8, mean_int_u8);
            case::<i16>(&mut rng, |v| v as i16, mean_int_i16);
            case::<i8>(&mut rng, |v| v as i8, mean_int::<i8>);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_reductions_match_the_definition() {
        // Small values: every sum and product is exact in f64 and in the
        // integer type, so the float definition is the reference; then the
        // wrapping and empty cases by hand.
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for round in 0..400 {
            let rank = next(5) as usize;
            let shape: Vec<usize> = (0..rank).map(|_| next(4) as usize + usize::from(next(8) != 0)).collect();
            let reduce: Vec<bool> = (0..rank).map(|_| next(2) == 0).collect();
            let n: usize = shape.iter().product();
            let x: Vec<i32> = (0..n).map(|_| next(7) as i32 - 3).collect();
            let outputs: usize = (0..rank).filter(|&d| !reduce[d]).map(|d| shape[d]).product();
            for kind in [Reducer::Sum, Reducer::Max, Reducer::Min, Reducer::Prod] {
                let mut got = vec![0i32; outputs];
                reduce_ints(&x, &shape, &reduce, kind, &mut got);
                let (init, f): (f64, fn(f64, f64) -> f64) = match kind {
                    Reducer::Sum => (0.0, |a, v| a + v),
                    Reducer::Max => (f64::from(i32::MIN), f64::max),
                    Reducer::Min => (f64::from(i32::MAX), f64::min),
                    _ => (1.0, |a, v| a * v),
                };
                let mut want = vec![init; outputs];
                for (flat, &v) in x.iter().enumerate() {
                    let mut rest = flat;
                    let mut coords = vec![0usize; rank];
                    for d in (0..rank).rev() {
                        coords[d] = rest % shape[d];
                        rest /= shape[d];
                    }
                    let o = (0..rank).filter(|&d| !reduce[d]).fold(0, |o, d| o * shape[d] + coords[d]);
                    want[o] = f(want[o], f64::from(v));
                }
                if kind == Reducer::Prod && want.iter().any(|w| w.abs() > f64::from(i32::MAX)) {
                    continue;
                }
                let got: Vec<f64> = got.iter().map(|&g| f64::from(g)).collect();
                assert_eq!(got, want, "round {round} {kind:?} {shape:?} {reduce:?}");
            }
        }
        let mut out = [0i32; 1];
        reduce_ints(&[i32::MAX, 1], &[2], &[true], Reducer::Sum, &mut out);
        assert_eq!(out[0], i32::MIN);
        reduce_ints(&[1 << 20, 1 << 12], &[2], &[true], Reducer::Prod, &mut out);
        assert_eq!(out[0], 0);
        reduce_ints::<i32>(&[], &[0], &[true], Reducer::Max, &mut out);
        assert_eq!(out[0], i32::MIN);
        let mut q = [0i8; 2];
        reduce_ints(&[-128i8, 5, 127, -7], &[2, 2], &[false, true], Reducer::Min, &mut q);
        assert_eq!(q, [-128, -7]);
    }

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

    /// Reductions over middle axes with 2 to 300 kept values after them (channels
    /// of a spatial mean: whole blocks of 16 summed in registers, a tail, and wide
    /// rows on the row-by-row path): every kind, bit for bit against folding the
    /// reduced steps in order, under every vector level.
    #[test]
    fn middle_axis_reductions_match_ordered_folds() {
        let mut r = crate::testutil::Rng::new(0x3ea2);
        crate::level::each(|l| {
            for inner in [2usize, 15, 16, 17, 40, 48, 64, 255, 256, 257, 300] {
                for (outer, red) in [(1usize, 1usize), (2, 5), (1, 50), (3, 13), (2, 0)] {
                    let x: Vec<f32> = (0..outer * red * inner).map(|_| r.size(0, 2000) as f32 * 0.001 - 1.0).collect();
                    for kind in [Reducer::Sum, Reducer::Mean, Reducer::Max, Reducer::Min, Reducer::Prod] {
                        let mut out = vec![f32::NAN; outer * inner];
                        reduce(&x, &[outer, red, inner], &[false, true, false], kind, &mut out);
                        for o in 0..outer {
                            for j in 0..inner {
                                let (start, f): (f32, fn(f32, f32) -> f32) = match kind {
                                    Reducer::Sum | Reducer::Mean => (0.0, |a, v| a + v),
                                    Reducer::Max => (f32::NEG_INFINITY, f32::max),
                                    Reducer::Min => (f32::INFINITY, f32::min),
                                    Reducer::Prod => (1.0, |a, v| a * v),
                                };
                                let mut want = (0..red).fold(start, |a, k| f(a, x[(o * red + k) * inner + j]));
                                if kind == Reducer::Mean && red > 0 {
                                    want /= red as f32;
                                }
                                let got = out[o * inner + j];
                                assert_eq!(got.to_bits(), want.to_bits(), "{l:?} {kind:?} outer {outer} red {red} inner {inner} at {o},{j}: {got} vs {want}");
                            }
                        }
                    }
                }
            }
        });
    }

    #[test]
    fn mean_over_spatial() {
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let mut out = [0.0; 3];
        reduce(&x, &[1, 2, 2, 3], &[false, true, true, false], Reducer::Mean, &mut out);
        assert_eq!(out, [4.5, 5.5, 6.5]);
    }

    /// REDUCE_ALL / REDUCE_ANY against their definition on every subset of axes.
    #[test]
    fn boolean_reductions_match_definition() {
        let shape = [2usize, 3, 2, 3];
        let mut r = crate::testutil::Rng::new(0xa11);
        for mask in 0..16u32 {
            let flags: Vec<bool> = (0..4).map(|d| mask >> d & 1 == 1).collect();
            // Mostly true, mostly false, and mixed inputs.
            for density in [1u32, 2, 8] {
                let x: Vec<u8> = (0..36).map(|_| u8::from(!r.one_in(density))).collect();
                let n: usize = (0..4).filter(|&d| !flags[d]).map(|d| shape[d]).product();
                for all in [true, false] {
                    let mut out = vec![7u8; n];
                    reduce_bool(&x, &shape, &flags, all, &mut out);
                    let mut want = vec![all; n];
                    for (i, &v) in x.iter().enumerate() {
                        let idx = [i / 18, i / 6 % 3, i / 3 % 2, i % 3];
                        let o = (0..4).filter(|&d| !flags[d]).fold(0, |o, d| o * shape[d] + idx[d]);
                        want[o] = if all { want[o] && v != 0 } else { want[o] || v != 0 };
                    }
                    assert_eq!(out, want.iter().map(|&b| u8::from(b)).collect::<Vec<_>>(), "mask {mask:b} all {all}");
                }
            }
        }
        // Reducing an empty dimension: ALL of nothing is true, ANY false.
        let mut out = [9u8; 2];
        reduce_bool(&[], &[2, 0], &[false, true], true, &mut out);
        assert_eq!(out, [1, 1]);
        reduce_bool(&[], &[2, 0], &[false, true], false, &mut out);
        assert_eq!(out, [0, 0]);
    }
}
