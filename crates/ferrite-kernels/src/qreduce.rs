//! Quantized and integer reductions as LiteRT computes them: SUM of int8 / uint8
//! rescaled onto the output's quantization, REDUCE_PROD of int8 / int16 with a
//! rescale after every multiplication, and MEAN of int32 / int64 with a
//! truncating integer division. (int16 SUM, which LiteRT allows only onto the
//! input's own quantization, adds in the element type:
//! [`crate::reduce::reduce_ints`].)

use crate::quant::{multiply_by_quantized_multiplier_i64, quantize_multiplier, QuantInt};
use crate::reduce::for_each_output_offset;

/// Shape of a reduction: the input shape, which dims reduce, and the element
/// counts derived from them. The caller bounds the rank by [`crate::MAX_DIMS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduction {
    /// Input shape.
    pub shape: Vec<usize>,
    /// Which input dims are reduced away.
    pub reduce: Vec<bool>,
    /// Output elements (the product of the kept dims).
    pub outputs: usize,
    /// Input elements reduced into each output.
    pub count: usize,
}

impl Reduction {
    /// The reduction of `shape` over the dims flagged in `reduce`.
    pub fn new(shape: &[usize], reduce: &[bool]) -> Reduction {
        let dims = |keep: bool| shape.iter().zip(reduce).filter(|(_, &f)| f != keep).map(|(&s, _)| s).product();
        Reduction { shape: shape.to_vec(), reduce: reduce.to_vec(), outputs: dims(true), count: dims(false) }
    }

    /// True when the input has no elements.
    pub fn empty_input(&self) -> bool {
        self.shape.contains(&0)
    }
}

/// SUM of int8 / uint8 / int16 as LiteRT's builtin kernel computes it, whether
/// or not the output is quantized like the input: int32 sums, then in single
/// precision `round(sum * scale + bias)` with `scale = in_scale / out_scale` and
/// `bias = -in_zp * scale * count` (rounding halves away from zero), plus the
/// output zero point, clamped. (LiteRT's float rescale here, not the fixed-point
/// one of its MEAN: measured, the fixed-point form is 1 off on about a fifth of
/// the outputs.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SumQ {
    /// `in_scale / out_scale` in single precision.
    pub scale: f32,
    /// `-in_zp * scale * count`, formed in that order in single precision.
    pub bias: f32,
    /// Output zero point.
    pub out_zp: i32,
}

impl SumQ {
    /// From `(scale, zero point)` of input and output and the reduced count.
    pub fn new((in_scale, in_zp): (f32, i32), (out_scale, out_zp): (f32, i32), count: usize) -> SumQ {
        let scale = in_scale / out_scale;
        SumQ { scale, bias: -(in_zp as f32) * scale * count as f32, out_zp }
    }
}

/// Quantized SUM (see [`SumQ`]). `sums` is scratch of [`Reduction::outputs`]
/// elements. With no axes each element is requantized alone; an empty input
/// gives stored zeros (not the zero point), as LiteRT's.
///
/// # Panics
/// If `out` or `sums` is shorter than [`Reduction::outputs`] or `input` than the
/// shape's product (callers size them at prepare).
pub fn sum_rescaled<T: QuantInt>(input: &[T], r: &Reduction, p: &SumQ, sums: &mut [i32], out: &mut [T]) {
    if r.empty_input() {
        out[..r.outputs].fill(T::narrow(0));
        return;
    }
    let sums = &mut sums[..r.outputs];
    sums.fill(0);
    // LiteRT accumulates in int32; the wrap only matters past 2^16 int16 elements.
    for_each_output_offset(&r.shape, &r.reduce, |i, o| sums[o] = sums[o].wrapping_add(input[i].widen()));
    for (ov, &s) in out.iter_mut().zip(sums.iter()) {
        // `as i32` saturates where C++'s conversion would be undefined.
        let v = (s as f32 * p.scale + p.bias).round() as i32;
        *ov = T::narrow(v.saturating_add(p.out_zp).clamp(T::MIN, T::MAX));
    }
}

/// REDUCE_PROD of int8 / int16: each output's product is rescaled after every
/// multiplication by `in_scale / out_scale^(1/n)` (n the reduced count, so n
/// rescales give `in_scale^n / out_scale` and the int32 accumulator stays in
/// range), then once more at the end, plus the output zero point, clamped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProdQ {
    /// Input zero point.
    pub in_zp: i32,
    /// Output zero point.
    pub out_zp: i32,
    /// Fixed-point per-step scaling...
    pub multiplier: i32,
    /// ...and its shift.
    pub shift: i32,
}

impl ProdQ {
    /// From `(scale, zero point)` of input and output and the reduced count as
    /// LiteRT takes it (input elements / output elements, at least 1).
    pub fn new((in_scale, in_zp): (f32, i32), (out_scale, out_zp): (f32, i32), count: usize) -> ProdQ {
        let n = count.max(1) as f64;
        let scaling = f64::from(in_scale) / f64::from(out_scale).powf(1.0 / n);
        let (multiplier, shift) = quantize_multiplier(scaling);
        ProdQ { in_zp, out_zp, multiplier, shift }
    }

    /// Whether LiteRT's 64-bit rescale accepts the shift (it aborts otherwise).
    pub fn shift_in_range(&self) -> bool {
        (-31..8).contains(&self.shift)
    }
}

/// Quantized REDUCE_PROD (see [`ProdQ`]); `prods` is scratch of
/// [`Reduction::outputs`] elements. The first element of each output (all its
/// reduced coordinates 0) starts the product; an empty input leaves `out` as it
/// is, as LiteRT does (the caller zeroes it).
///
/// # Panics
/// As [`sum_rescaled`].
pub fn prod_rescaled<T: QuantInt>(input: &[T], r: &Reduction, p: &ProdQ, prods: &mut [i32], out: &mut [T]) {
    if r.empty_input() {
        return;
    }
    let prods = &mut prods[..r.outputs];
    // The first element of an output is the one whose reduced coordinates are
    // all 0: the input's coordinates are tracked alongside the odometer.
    let mut idx = [0usize; crate::MAX_DIMS];
    let rank = r.shape.len();
    let first = &r.reduce;
    for_each_output_offset(&r.shape, &r.reduce, |i, o| {
        let v = input[i].widen() - p.in_zp;
        let is_first = (0..rank).all(|d| !first[d] || idx[d] == 0);
        prods[o] = if is_first { v } else { multiply_by_quantized_multiplier_i64(i64::from(prods[o]) * i64::from(v), p.multiplier, p.shift) };
        // Advance the input's coordinates alongside the odometer.
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < r.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    });
    for (ov, &a) in out.iter_mut().zip(prods.iter()) {
        let v = multiply_by_quantized_multiplier_i64(i64::from(a), p.multiplier, p.shift).saturating_add(p.out_zp);
        *ov = T::narrow(v.clamp(T::MIN, T::MAX));
    }
}

/// Element types of [`mean_ints`]: int32 and int64.
pub trait IntMean: Copy {
    /// The value widened to the accumulator (int64).
    fn wide(self) -> i64;
    /// The truncated mean back in the element type.
    fn from_wide(v: i64) -> Self;
}

impl IntMean for i32 {
    fn wide(self) -> i64 {
        i64::from(self)
    }
    fn from_wide(v: i64) -> Self {
        v as i32
    }
}

impl IntMean for i64 {
    fn wide(self) -> i64 {
        self
    }
    fn from_wide(v: i64) -> Self {
        v
    }
}

/// MEAN of int32 / int64 as LiteRT computes it: sums in int64 (wrapping), divided
/// by the count with the quotient truncated toward zero. An empty reduction gives
/// 0. `sums` is scratch of [`Reduction::outputs`] elements.
///
/// # Panics
/// As [`sum_rescaled`].
pub fn mean_ints<T: IntMean>(input: &[T], r: &Reduction, sums: &mut [i64], out: &mut [T]) {
    let sums = &mut sums[..r.outputs];
    sums.fill(0);
    if r.empty_input() {
        out[..r.outputs].fill(T::from_wide(0));
        return;
    }
    for_each_output_offset(&r.shape, &r.reduce, |i, o| sums[o] = sums[o].wrapping_add(input[i].wide()));
    let n = r.count.max(1) as i64;
    for (ov, &s) in out.iter_mut().zip(sums.iter()) {
        *ov = T::from_wide(s.wrapping_div(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    /// Output offset of each input element, from coordinates (the naive mapping).
    fn output_of(flat: usize, shape: &[usize], reduce: &[bool]) -> (usize, bool) {
        let mut rest = flat;
        let mut coords = vec![0usize; shape.len()];
        for d in (0..shape.len()).rev() {
            coords[d] = rest % shape[d];
            rest /= shape[d];
        }
        let o = (0..shape.len()).filter(|&d| !reduce[d]).fold(0, |o, d| o * shape[d] + coords[d]);
        (o, (0..shape.len()).all(|d| !reduce[d] || coords[d] == 0))
    }

    /// LiteRT's 64-bit rescale from its definition: the multiplier rounded to
    /// 16 bits, then one right shift by `15 - shift` rounding halves up.
    fn mbqm64_ref(x: i64, m: i32, shift: i32) -> i32 {
        let reduced = if m < 0x7FFF_0000 { (i128::from(m) + (1 << 15)) >> 16 } else { 0x7FFF };
        let total = 15 - shift;
        ((i128::from(x) * reduced + (1i128 << (total - 1))) >> total) as i32
    }

    fn random_case(rng: &mut Rng) -> (Vec<usize>, Vec<bool>) {
        let rank = rng.size(0, 4);
        let shape: Vec<usize> = (0..rank).map(|_| if rng.one_in(12) { 0 } else { rng.dim().min(7) }).collect();
        let reduce: Vec<bool> = (0..rank).map(|_| rng.one_in(2)).collect();
        (shape, reduce)
    }

    fn sums<T: QuantInt>(rng: &mut Rng, from: fn(i64) -> T) {
        let (lo, hi) = (i64::from(T::MIN), i64::from(T::MAX));
        for round in 0..300 {
            let (shape, reduce) = random_case(rng);
            let n: usize = shape.iter().product();
            let x = rng.ints(n, lo, hi);
            let xt: Vec<T> = x.iter().map(|&v| from(v)).collect();
            let wide = T::MAX > 255;
            let in_zp = if wide { 0 } else { rng.range(lo, hi) as i32 };
            let out_zp = if wide { 0 } else { rng.range(lo, hi) as i32 };
            let r = Reduction::new(&shape, &reduce);
            let (s_in, s_out) = (rng.scale(-3.0, -1.0), rng.scale(-2.0, 0.5));
            let p = SumQ::new((s_in, in_zp), (s_out, out_zp), r.count);
            let mut got = vec![from(0); r.outputs];
            sum_rescaled(&xt, &r, &p, &mut vec![0; r.outputs], &mut got);
            let got: Vec<i64> = got.iter().map(|g| i64::from(g.widen())).collect();
            let mut acc = vec![0i64; r.outputs];
            for (i, &v) in x.iter().enumerate() {
                acc[output_of(i, &shape, &reduce).0] += v;
            }
            let want: Vec<i64> = acc
                .iter()
                .map(|&s| {
                    if n == 0 {
                        return 0;
                    }
                    // The definition in single precision, operation by operation.
                    let scale = s_in / s_out;
                    let bias = (-(in_zp as f32) * scale) * r.count as f32;
                    let v = ((s as f32) * scale + bias).round() as i64;
                    (v + i64::from(out_zp)).clamp(lo, hi)
                })
                .collect();
            assert_eq!(got, want, "round {round} {shape:?} {reduce:?}");
        }
    }

    fn prods<T: QuantInt>(rng: &mut Rng, from: fn(i64) -> T) {
        let (lo, hi) = (i64::from(T::MIN), i64::from(T::MAX));
        for round in 0..300 {
            let (shape, reduce) = random_case(rng);
            let n: usize = shape.iter().product();
            let x = rng.ints(n, lo, hi);
            let xt: Vec<T> = x.iter().map(|&v| from(v)).collect();
            let wide = T::MAX > 255;
            let in_zp = if wide { 0 } else { rng.range(lo, hi) as i32 };
            let out_zp = if wide { 0 } else { rng.range(lo, hi) as i32 };
            let r = Reduction::new(&shape, &reduce);
            let count = n.checked_div(r.outputs).unwrap_or(1);
            let p = ProdQ::new((rng.scale(-3.0, -1.0), in_zp), (rng.scale(-2.0, 0.0), out_zp), count);
            if !p.shift_in_range() {
                continue;
            }
            let mut got = vec![from(3); r.outputs];
            prod_rescaled(&xt, &r, &p, &mut vec![0; r.outputs], &mut got);
            let mut acc = vec![0i64; r.outputs];
            for (i, &v) in x.iter().enumerate() {
                let (o, first) = output_of(i, &shape, &reduce);
                let v = v - i64::from(in_zp);
                acc[o] = if first { v } else { i64::from(mbqm64_ref(acc[o] * v, p.multiplier, p.shift)) };
            }
            let want: Vec<i64> =
                acc.iter().map(|&a| if n == 0 { 3 } else { (i64::from(mbqm64_ref(a, p.multiplier, p.shift)) + i64::from(out_zp)).clamp(lo, hi) }).collect();
            let got: Vec<i64> = got.iter().map(|g| i64::from(g.widen())).collect();
            assert_eq!(got, want, "round {round} {shape:?} {reduce:?}");
        }
    }

    #[test]
    fn rescaled_sums_match_the_definition() {
        let mut rng = Rng::new(0x5e1);
        sums::<i8>(&mut rng, |v| v as i8);
        sums::<u8>(&mut rng, |v| v as u8);
        sums::<i16>(&mut rng, |v| v as i16);
    }

    #[test]
    fn rescaled_products_match_the_definition() {
        let mut rng = Rng::new(0x9d0);
        prods::<i8>(&mut rng, |v| v as i8);
        prods::<i16>(&mut rng, |v| v as i16);
    }

    #[test]
    fn integer_means_truncate() {
        let mut rng = Rng::new(0x3ea);
        for round in 0..300 {
            let (shape, reduce) = random_case(&mut rng);
            let n: usize = shape.iter().product();
            let big = rng.one_in(3);
            let x: Vec<i64> = rng.ints(n, if big { i64::from(i32::MIN) } else { -50 }, if big { i64::from(i32::MAX) } else { 50 });
            let r = Reduction::new(&shape, &reduce);
            let mut acc = vec![0i128; r.outputs];
            for (i, &v) in x.iter().enumerate() {
                acc[output_of(i, &shape, &reduce).0] += i128::from(v);
            }
            // Truncating division of the exact sum (the i32 sums cannot wrap in 64 bits).
            let want: Vec<i64> = acc.iter().map(|&s| if n == 0 { 0 } else { (s / r.count as i128) as i64 }).collect();
            let x32: Vec<i32> = x.iter().map(|&v| v as i32).collect();
            let mut got = vec![7i32; r.outputs];
            mean_ints(&x32, &r, &mut vec![0; r.outputs], &mut got);
            assert_eq!(got.iter().map(|&g| i64::from(g)).collect::<Vec<_>>(), want, "round {round} {shape:?} {reduce:?}");
            let mut got = vec![7i64; r.outputs];
            mean_ints(&x, &r, &mut vec![0; r.outputs], &mut got);
            assert_eq!(got, want, "round {round} int64");
        }
        // -7 / 2 truncates to -3 (a floor would give -4).
        let r = Reduction::new(&[2], &[true]);
        let mut out = [0i32];
        mean_ints(&[-3, -4], &r, &mut [0], &mut out);
        assert_eq!(out, [-3]);
    }
}
