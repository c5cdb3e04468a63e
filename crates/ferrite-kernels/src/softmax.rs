//! Softmax and log-softmax over the last dimension: float, int8 / uint8 (LiteRT's
//! float tables) and int16 (its exp and reciprocal lookup tables).

use crate::elementwise::exp_fast;
use crate::fixed16::Lut16;
use crate::quant::{multiply_by_quantized_multiplier, quantize_multiplier, QuantInt};

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

/// Parameters of an int8 / uint8 SOFTMAX as LiteRT's optimized kernel runs it: a
/// float table of `exp(-input_scale * beta * d)` for each distance `d` from a row's
/// maximum, a float sum, each output rounded half away from zero.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftmaxQ8 {
    /// `table[255 - d] = exp(-input_scale * beta * d)`.
    table: [f32; 256],
    /// Output scale.
    out_scale: f32,
    /// Output zero point.
    out_zp: i32,
}

impl SoftmaxQ8 {
    /// The table for `input_scale * beta` (multiplied in single precision).
    pub fn new(in_scale: f32, beta: f32, out_scale: f32, out_zp: i32) -> SoftmaxQ8 {
        let scale = -in_scale * beta;
        let mut table = [0.0f32; 256];
        for v in 0..256usize {
            table[255 - v] = (scale * v as f32).exp();
        }
        SoftmaxQ8 { table, out_scale, out_zp }
    }
}

/// int8 / uint8 SOFTMAX over rows of `n` (see [`SoftmaxQ8`]).
pub fn softmax_q8<T: QuantInt>(input: &[T], n: usize, p: &SoftmaxQ8, out: &mut [T]) {
    if n == 0 {
        return;
    }
    for (row, orow) in input.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let max = row.iter().map(|&v| v.widen()).max().unwrap_or(0);
        let at = |v: T| p.table[(255 - max + v.widen()) as usize];
        let sum: f32 = row.iter().fold(0.0f32, |s, &v| s + at(v));
        let inv = 1.0 / (sum * p.out_scale);
        for (o, &v) in orow.iter_mut().zip(row) {
            *o = T::narrow(((at(v) * inv).round() as i32 + p.out_zp).clamp(T::MIN, T::MAX));
        }
    }
}

/// Parameters of an int16 SOFTMAX (zero points 0, output scale 1/32768) as LiteRT
/// runs it: differences from the row maximum rescaled onto [-10, 0] and looked up
/// in an exp table, the sum's reciprocal from a 1/(1+x) table, products rounded
/// back to Q0.15.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftmaxI16 {
    /// Rescale of input differences onto the exp table's [-10, 0] (in 65535 steps).
    multiplier: i32,
    /// Its shift.
    shift: i32,
    /// `exp` over [-10, 0].
    exp: Lut16,
    /// `1 / (1 + x)` over [0, 1].
    reciprocal: Lut16,
}

impl SoftmaxI16 {
    /// For an input scale and beta (their product taken in single precision, as
    /// LiteRT's prepare does).
    pub fn new(in_scale: f32, beta: f32) -> SoftmaxI16 {
        let (multiplier, shift) = quantize_multiplier(f64::from(in_scale * beta) / (10.0 / 65535.0));
        SoftmaxI16 { multiplier, shift, exp: Lut16::new(f64::exp, -10.0, 0.0), reciprocal: Lut16::new(|v| 1.0 / (1.0 + v), 0.0, 1.0) }
    }
}

/// int16 SOFTMAX over rows of `n` (see [`SoftmaxI16`]).
pub fn softmax_i16(input: &[i16], n: usize, p: &SoftmaxI16, out: &mut [i16]) {
    if n == 0 {
        return;
    }
    for (row, orow) in input.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let max = i32::from(row.iter().copied().max().unwrap_or(0));
        let mut sum = 0i32;
        for (o, &v) in orow.iter_mut().zip(row) {
            let scaled = multiply_by_quantized_multiplier(i32::from(v) - max, p.multiplier, p.shift);
            *o = p.exp.lookup((scaled + 32767).clamp(-32768, 32767) as i16);
            sum = sum.wrapping_add(i32::from(*o));
        }
        // The row maximum contributes exp(0) ~ 32767, so a real sum has 2 to 17
        // leading zeros; the clamp only keeps hostile shapes from breaking shifts.
        let headroom_plus_one = (sum as u32).leading_zeros().clamp(1, 30);
        let shifted = ((i64::from(sum) << (headroom_plus_one - 1)) + (1 << 13)) >> 14;
        let sym = (shifted - ((1 << 15) + (1 << 16))).clamp(-32768, 32767) as i16;
        let recip = i64::from(p.reciprocal.lookup(sym));
        let right_shift = 31 - headroom_plus_one;
        for o in orow.iter_mut() {
            let r = (i64::from(*o) * recip + (1i64 << (right_shift - 1))) >> right_shift;
            *o = r.clamp(0, 32767) as i16;
        }
    }
}

#[cfg(test)]
mod quantized_tests {
    use super::*;
    use crate::testutil::{mbqm_ref, Rng};

    /// Rows of random lengths (1, odd, long) and values, now and then all equal
    /// or at the ends of the type's range.
    fn rows(rng: &mut Rng, lo: i64, hi: i64) -> (usize, Vec<i64>) {
        let n = rng.dim();
        let len = n * rng.size(1, 4);
        let v = match rng.bits() % 5 {
            0 => vec![rng.range(lo, hi); len],
            1 => (0..len).map(|_| if rng.one_in(2) { lo } else { hi }).collect(),
            _ => rng.ints(len, lo, hi),
        };
        (n, v)
    }

    fn q8_case<T: QuantInt>(rng: &mut Rng, from: fn(i64) -> T) {
        let (lo, hi) = (i64::from(T::MIN), i64::from(T::MAX));
        for round in 0..300 {
            let (n, v) = rows(rng, lo, hi);
            let x: Vec<T> = v.iter().map(|&v| from(v)).collect();
            let (in_scale, beta) = (rng.scale(-3.0, 0.5), [1.0, 0.5, 2.5][rng.size(0, 2)]);
            // LiteRT's int8 / uint8 outputs have scale 1/256; other scales and zero
            // points (large ones too) must follow the same definition.
            let (out_scale, out_zp) = if rng.one_in(2) { (1.0 / 256.0, lo as i32) } else { (rng.scale(-3.0, -1.0), rng.range(-300, 300) as i32) };
            let p = SoftmaxQ8::new(in_scale, beta, out_scale, out_zp);
            let mut got = vec![from(0); x.len()];
            softmax_q8(&x, n, &p, &mut got);
            for (r, (row, grow)) in v.chunks(n).zip(got.chunks(n)).enumerate() {
                let max = *row.iter().max().unwrap_or(&0);
                // exp(-scale * beta * (max - x)) in single precision, summed in order.
                let e = |x: i64| ((-in_scale * beta) * (max - x) as f32).exp();
                let sum = row.iter().fold(0.0f32, |s, &x| s + e(x));
                for (i, (&xv, &g)) in row.iter().zip(grow).enumerate() {
                    let want = ((e(xv) * (1.0 / (sum * out_scale))).round() as i64 + i64::from(out_zp)).clamp(lo, hi);
                    assert_eq!(i64::from(g.widen()), want, "round {round} row {r} element {i}");
                    // And it is the softmax, to within the output's rounding.
                    let real: f64 = row.iter().map(|&y| (-f64::from(in_scale) * f64::from(beta) * (max - y) as f64).exp()).sum::<f64>().recip()
                        * (-f64::from(in_scale) * f64::from(beta) * (max - xv) as f64).exp();
                    let ideal = (real / f64::from(out_scale) + f64::from(out_zp)).clamp(lo as f64, hi as f64);
                    assert!((f64::from(g.widen()) - ideal).abs() <= 0.51, "round {round}: {} vs {ideal}", g.widen());
                }
            }
        }
    }

    #[test]
    fn int8_and_uint8_match_the_definition() {
        let mut rng = Rng::new(51);
        q8_case::<i8>(&mut rng, |v| v as i8);
        q8_case::<u8>(&mut rng, |v| v as u8);
    }

    /// Linear interpolation in a 513-entry table of `f` over `[min, max]` built
    /// from its definition (each entry biased by half the interpolation error at
    /// its step's midpoint), at a position given as a full int16.
    fn table_lookup(f: impl Fn(f64) -> f64, min: f64, max: f64, v: i64) -> i64 {
        let step = (max - min) / 512.0;
        let q = |x: f64| (f(x) * 32768.0).round();
        let entry = |i: i64| -> i64 {
            if i == 512 {
                return q(max).clamp(-32768.0, 32767.0) as i64;
            }
            let x = min + i as f64 * step;
            // The interpolation takes the next sample unrounded.
            let bias = ((((f(min + (i + 1) as f64 * step) * 32768.0 + q(x)) / 2.0).round() - q(x + step / 2.0)) / 2.0).round();
            (q(x) - bias).clamp(-32768.0, 32767.0) as i64
        };
        let pos = v + 32768;
        let (i, frac) = (pos / 128, pos % 128);
        entry(i) + ((entry(i + 1) - entry(i)) * frac + 64).div_euclid(128)
    }

    /// int16 softmax from LiteRT's definition, in 64-bit arithmetic: exp of each
    /// rescaled difference from the table, the sum normalised so its top bit is
    /// bit 30, its reciprocal from the 1/(1+x) table, each exp times it rounded.
    fn softmax_i16_ref(row: &[i64], multiplier: i32, shift: i32) -> Vec<i64> {
        let max = *row.iter().max().unwrap_or(&0);
        let exps: Vec<i64> = row
            .iter()
            .map(|&x| {
                let scaled = i64::from(mbqm_ref((x - max) as i32, multiplier, shift));
                table_lookup(f64::exp, -10.0, 0.0, (scaled + 32767).clamp(-32768, 32767))
            })
            .collect();
        let sum: i64 = exps.iter().sum();
        // Leading zeros of the 32-bit sum: the sum times 2^(lz - 1) has its top bit at 30.
        let lz = (0..32).take_while(|&b| sum < 1i64 << (31 - b)).count() as i64;
        let lz = lz.clamp(1, 30);
        // The normalised sum in [1, 2) as Q2.13... less 1.5 in Q0.15 steps, the 1/(1+x) input.
        let shifted = ((sum << (lz - 1)) + (1 << 13)).div_euclid(1 << 14);
        let sym = (shifted - (1 << 15) - (1 << 16)).clamp(-32768, 32767);
        let recip = table_lookup(|v| 1.0 / (1.0 + v), 0.0, 1.0, sym);
        let right = 31 - lz;
        exps.iter().map(|&e| (e * recip + (1 << (right - 1))).div_euclid(1 << right).clamp(0, 32767)).collect()
    }

    #[test]
    fn int16_matches_the_definition() {
        let mut rng = Rng::new(52);
        for round in 0..200 {
            let (n, v) = rows(&mut rng, -32768, 32767);
            let x: Vec<i16> = v.iter().map(|&v| v as i16).collect();
            let (in_scale, beta) = (rng.scale(-4.5, -1.0), [1.0, 0.5, 2.0][rng.size(0, 2)]);
            let p = SoftmaxI16::new(in_scale, beta);
            let mut got = vec![0i16; x.len()];
            softmax_i16(&x, n, &p, &mut got);
            for (r, (row, grow)) in v.chunks(n).zip(got.chunks(n)).enumerate() {
                let want = softmax_i16_ref(row, p.multiplier, p.shift);
                let got: Vec<i64> = grow.iter().map(|&g| i64::from(g)).collect();
                assert_eq!(got, want, "round {round} row {r} ({n} wide, scale {in_scale}, beta {beta})");
                // Close to the real softmax where the exp table covers the row.
                let max = *row.iter().max().unwrap_or(&0);
                let scale = f64::from(in_scale) * f64::from(beta);
                if row.iter().all(|&y| (max - y) as f64 * scale <= 10.0) {
                    let s: f64 = row.iter().map(|&y| (-(max - y) as f64 * scale).exp()).sum();
                    for (&y, &g) in row.iter().zip(&got) {
                        let real = (-(max - y) as f64 * scale).exp() / s * 32768.0;
                        assert!((g as f64 - real).abs() <= 4.0 + real * 2e-3, "round {round}: {g} vs {real}");
                    }
                }
            }
        }
    }
}

/// L2_NORMALIZATION (float): each row of `depth` values divided by its L2 norm,
/// the norm at least `1e-6` (LiteRT's epsilon), the squares summed in order in
/// float32 as LiteRT's kernel sums them.
pub fn l2_normalize(x: &[f32], depth: usize, out: &mut [f32]) {
    if depth == 0 {
        return;
    }
    for (row, o) in x.chunks_exact(depth).zip(out.chunks_exact_mut(depth)) {
        let sq = row.iter().fold(0.0f32, |a, &v| a + v * v);
        let norm = sq.sqrt().max(1e-6);
        for (o, &v) in o.iter_mut().zip(row) {
            *o = v / norm;
        }
    }
}

/// LOCAL_RESPONSE_NORMALIZATION (float): element `c` of each row of `depth`
/// values times `(bias + alpha * sum of squares of elements c - radius ..= c + radius)^-beta`.
pub fn local_response_normalize(x: &[f32], depth: usize, radius: usize, bias: f32, alpha: f32, beta: f32, out: &mut [f32]) {
    if depth == 0 {
        return;
    }
    for (row, o) in x.chunks_exact(depth).zip(out.chunks_exact_mut(depth)) {
        for c in 0..depth {
            let (lo, hi) = (c.saturating_sub(radius), (c + radius).min(depth - 1));
            let acc = row[lo..=hi].iter().fold(0.0f32, |a, &v| a + v * v);
            o[c] = row[c] * (bias + alpha * acc).powf(-beta);
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

    #[test]
    fn l2_and_local_response_normalization() {
        let mut o = [0.0; 4];
        super::l2_normalize(&[3.0, 4.0, 0.0, 0.0], 2, &mut o);
        assert_eq!(o, [0.6, 0.8, 0.0, 0.0]);
        let x = [1.0, 2.0, 3.0];
        let mut o = [0.0; 3];
        super::local_response_normalize(&x, 3, 1, 1.0, 0.5, 0.5, &mut o);
        let want = [1.0 / (1.0f32 + 0.5 * 5.0).sqrt(), 2.0 / (1.0f32 + 0.5 * 14.0).sqrt(), 3.0 / (1.0f32 + 0.5 * 13.0).sqrt()];
        for (a, b) in o.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{o:?} {want:?}");
        }
    }
}
