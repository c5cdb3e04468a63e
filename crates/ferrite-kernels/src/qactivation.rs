//! Quantized activations with LiteRT's numerics: the RELU family and LEAKY_RELU
//! (a fixed-point rescale per sign), 256-entry tables for 8-bit LOGISTIC, TANH and
//! HARD_SWISH, and int16 LOGISTIC / TANH; the integer ABS, RSQRT and GELU.

use crate::fixed16::{self as f16, InputRescale};
use crate::quant::{multiply_by_quantized_multiplier, quantize_multiplier, rounding_divide_by_pot, saturating_rounding_doubling_high_mul, QuantInt};

/// A function of one int8 or uint8 value, tabulated: the output byte for each
/// input byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lut8([u8; 256]);

impl Lut8 {
    /// The table of `f`, which maps an input value (int8 when `signed`, else
    /// uint8) to an output value within the same type's range.
    pub fn new(signed: bool, f: impl Fn(i32) -> i32) -> Lut8 {
        let mut lut = [0u8; 256];
        for (byte, slot) in lut.iter_mut().enumerate() {
            *slot = f(if signed { i32::from(byte as u8 as i8) } else { byte as i32 }) as u8;
        }
        Lut8(lut)
    }

    /// The table of a float function between quantized domains, as LiteRT's
    /// optimized 8-bit LOGISTIC and TANH build theirs: `f(in_scale * (x - in_zp))`
    /// times the reciprocal of the output scale, rounded (half away from zero),
    /// plus the output zero point, clamped to the type.
    pub fn of_real(signed: bool, f: impl Fn(f32) -> f32, (in_scale, in_zp): (f32, i32), (out_scale, out_zp): (f32, i32)) -> Lut8 {
        let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
        let inverse = 1.0 / out_scale;
        Lut8::new(signed, |v| {
            let y = f(in_scale * (v - in_zp) as f32);
            ((y * inverse).round() as i32 + out_zp).clamp(lo, hi)
        })
    }

    /// `out[i] = table[x[i]]`.
    pub fn apply(&self, x: &[u8], out: &mut [u8]) {
        for (o, &i) in out.iter_mut().zip(x) {
            *o = self.0[usize::from(i)];
        }
    }
}

/// HARD_SWISH on int8 / uint8 with LiteRT's 16-bit fixed-point scheme: the input
/// moved to a scale 128 times finer, a "reluish" factor relu6(x + 3) / 6 in Q0.15,
/// their product rescaled to the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardSwishQ {
    /// Input zero point.
    in_zp: i32,
    /// Output zero point.
    out_zp: i32,
    /// Q0.15 multiplier of `(in_scale / 128) / out_scale`...
    out_multiplier: i16,
    /// ...and its exponent (at most 0).
    out_exponent: i32,
    /// Q0.15 multiplier of `(in_scale / 128) / (3 / 32768)`...
    relu_multiplier: i16,
    /// ...and its exponent.
    relu_exponent: i32,
    /// Clamp range.
    min: i32,
    /// Upper clamp.
    max: i32,
}

impl HardSwishQ {
    /// From the input's and output's quantization, clamped to `range`, the scales
    /// divided in single precision as LiteRT's prepare does. None when the output
    /// scale is below `in_scale / 128` (LiteRT's scheme has no exponent for that).
    pub fn new((in_scale, in_zp): (f32, i32), (out_scale, out_zp): (f32, i32), (min, max): (i32, i32)) -> Option<HardSwishQ> {
        let hires = in_scale / 128.0;
        let (om, oe) = quantize_multiplier(f64::from(hires / out_scale));
        if oe > 0 {
            return None;
        }
        let (rm, re) = quantize_multiplier(f64::from(hires / (3.0 / 32768.0)));
        Some(HardSwishQ {
            in_zp,
            out_zp,
            out_multiplier: f16::multiplier_to_q15(om),
            out_exponent: oe,
            relu_multiplier: f16::multiplier_to_q15(rm),
            relu_exponent: re,
            min,
            max,
        })
    }

    /// The output for input value `v`.
    pub fn apply(&self, v: i32) -> i32 {
        let hires_v = ((v - self.in_zp) * 128) as i16;
        let pre_out = f16::srdhm(hires_v, self.out_multiplier);
        let re = self.relu_exponent;
        let mut relu = hires_v;
        if re > 0 {
            relu = f16::saturating_shl(relu, re - 1);
        }
        relu = f16::srdhm(relu, self.relu_multiplier);
        if re > 0 {
            relu = f16::saturating_shl(relu, 1);
        }
        if re < 0 {
            relu = f16::rdpot(relu, -re);
        }
        let relu = ((i32::from(relu) + (1 << 15)) >> 1) as i16;
        let out = i32::from(f16::rdpot(f16::sdhm(relu, pre_out), -self.out_exponent)) + self.out_zp;
        out.clamp(self.min, self.max)
    }

    /// [`HardSwishQ::apply`] for every int8 (`signed`) or uint8 value: a function
    /// of one byte runs as a table.
    pub fn table(&self, signed: bool) -> Lut8 {
        Lut8::new(signed, |v| self.apply(v))
    }
}

/// RELU, RELU6, RELU_N1_TO_1 and LEAKY_RELU on int8 / uint8 / int16: `x - in_zp`
/// rescaled to the output (by `alpha` too below zero for LEAKY_RELU), plus the
/// output zero point, clamped to the activation's quantized range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReluQ {
    /// Input zero point.
    in_zp: i32,
    /// Output zero point.
    out_zp: i32,
    /// Multiplier and shift of `in_scale / out_scale`.
    identity: (i32, i32),
    /// Multiplier (its sign folded in) and shift of `in_scale * alpha / out_scale`,
    /// for inputs below the zero point; `identity` without an alpha.
    negative: (i32, i32),
    /// Clamp range.
    min: i32,
    /// Upper clamp.
    max: i32,
}

impl ReluQ {
    /// From the input's and output's quantization, LEAKY_RELU's alpha (None for
    /// the RELU family) and the clamp range.
    pub fn new((in_scale, in_zp): (f32, i32), (out_scale, out_zp): (f32, i32), alpha: Option<f32>, (min, max): (i32, i32)) -> ReluQ {
        let identity = quantize_multiplier(f64::from(in_scale) / f64::from(out_scale));
        // The negative side's multiplier may be negative; LiteRT folds the sign into it.
        let negative = match alpha {
            Some(a) => {
                let real = f64::from(in_scale) * f64::from(a) / f64::from(out_scale);
                let (m, s) = quantize_multiplier(real.abs());
                (if real < 0.0 { -m } else { m }, s)
            }
            None => identity,
        };
        ReluQ { in_zp, out_zp, identity, negative, min, max }
    }
}

/// [`ReluQ`] over a slice.
pub fn relu<T: QuantInt>(x: &[T], p: &ReluQ, out: &mut [T]) {
    for (o, &v) in out.iter_mut().zip(x) {
        let d = v.widen() - p.in_zp;
        let (m, s) = if d < 0 { p.negative } else { p.identity };
        *o = T::narrow(multiply_by_quantized_multiplier(d, m, s).saturating_add(p.out_zp).clamp(p.min, p.max));
    }
}

/// int16 LOGISTIC or TANH (zero points 0, output scale 2^-15) as LiteRT runs them:
/// the 16-bit fixed-point functions when the input scale is 2^-12 (or 2^-11 for
/// TANH), otherwise the interpolated sigmoid table after rescaling the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogisticTanh16 {
    /// TANH (else LOGISTIC).
    tanh: bool,
    /// How the input scale is treated.
    rescale: InputRescale,
}

impl LogisticTanh16 {
    /// For an input scale.
    pub fn new(in_scale: f64, tanh: bool) -> LogisticTanh16 {
        LogisticTanh16 { tanh, rescale: f16::input_rescale(in_scale, tanh) }
    }

    /// The function over a slice.
    pub fn apply(&self, x: &[i16], out: &mut [i16]) {
        let pairs = out.iter_mut().zip(x);
        match (self.rescale, self.tanh) {
            (InputRescale::Table(m, s), false) => pairs.for_each(|(o, &v)| *o = f16::logistic_table(v, m, s)),
            (InputRescale::Table(m, s), true) => pairs.for_each(|(o, &v)| *o = f16::tanh_table(v, m, s)),
            (InputRescale::FixedPoint(_), false) => pairs.for_each(|(o, &v)| *o = f16::logistic_q3(v)),
            (InputRescale::FixedPoint(shift), true) => pairs.for_each(|(o, &v)| *o = f16::tanh_q3(f16::saturating_shl(v, shift))),
        }
    }
}

/// Quantized ABS (int8, or int16 with zero points 0): `|x - in_zp|` rescaled to
/// the output when the scales differ, plus the output zero point, clamped to the
/// type. LiteRT compares the scales and divides them in single precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbsQ {
    /// Input zero point.
    in_zp: i32,
    /// Output zero point.
    out_zp: i32,
    /// Multiplier and shift of `in_scale / out_scale`; None when they are equal.
    rescale: Option<(i32, i32)>,
    /// The type's range.
    min: i32,
    /// Upper end.
    max: i32,
}

impl AbsQ {
    /// From the input's and output's quantization and the type's range.
    pub fn new((in_scale, in_zp): (f32, i32), (out_scale, out_zp): (f32, i32), (min, max): (i32, i32)) -> AbsQ {
        let rescale = (in_scale != out_scale).then(|| quantize_multiplier(f64::from(in_scale / out_scale)));
        AbsQ { in_zp, out_zp, rescale, min, max }
    }

    /// One value.
    #[inline]
    pub fn apply(&self, x: i32) -> i32 {
        let v = (x - self.in_zp).abs();
        let v = match self.rescale {
            Some((m, s)) => multiply_by_quantized_multiplier(v, m, s),
            None => v,
        };
        (v + self.out_zp).clamp(self.min, self.max)
    }
}

/// `x` times `2^exponent` with saturation (gemmlowp's saturating rounding
/// multiply by a power of two, for the non-negative exponents used here).
fn saturating_shl(x: i32, exponent: u32) -> i32 {
    (i64::from(x) << exponent).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// `1 / sqrt(input)` of a positive integer as a fixed-point multiplier and a shift
/// (`real ~= multiplier * 2^(shift - 31)`), as LiteRT's
/// `GetInvSqrtQuantizedMultiplierExp` with a reversed shift computes it: the input
/// normalised by pairs of bits into [2^27, 2^29), five Newton-Raphson steps of
/// `x <- x (3 - input x^2) / 2` from `x = 1` in Q3.28, times `sqrt(2) / 2`. Inputs
/// of 0 and 1 give the largest multiplier.
pub fn inv_sqrt_multiplier(input: i32) -> (i32, i32) {
    if input <= 1 {
        return (i32::MAX, 0);
    }
    let mut input = input;
    let mut shift = 11;
    while input >= 1 << 29 {
        input /= 4;
        shift += 1;
    }
    // Bit pairs keep the square root's exponent whole.
    let pairs = ((input as u32).leading_zeros() - 1) / 2 - 1;
    shift -= pairs as i32;
    input <<= 2 * pairs;
    let mul = saturating_rounding_doubling_high_mul;
    // Q3.28 fixed point: 3 integer bits leave room for the iteration's products.
    let half_input = rounding_divide_by_pot(input >> 1, 1);
    let three_halves = (1 << 28) + (1 << 27);
    let mut x = 1 << 28;
    for _ in 0..5 {
        // x^3 is Q9 after two products; back to Q3.
        let x3 = saturating_shl(mul(mul(x, x), x), 6);
        // Both products are Q6; their difference back to Q3.
        x = saturating_shl(mul(three_halves, x).wrapping_sub(mul(half_input, x3)), 3);
    }
    // sqrt(2) / 2 in Q0.31.
    let mut x = mul(x, 1_518_500_250);
    if shift < 0 {
        x = x.wrapping_shl((-shift) as u32);
        shift = 0;
    }
    (x, -shift)
}

/// Quantized RSQRT of int8 as LiteRT computes it: `1 / sqrt(x - in_zp)` from
/// [`inv_sqrt_multiplier`], held with 20 fractional bits, rescaled by
/// `1 / (sqrt(in_scale) out_scale)`; 0 gives the type's maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RsqrtQ {
    /// Input zero point.
    in_zp: i32,
    /// Output zero point.
    out_zp: i32,
    /// Multiplier and shift of `1 / (sqrt(in_scale) out_scale)`.
    scale: (i32, i32),
}

/// Fractional bits of RSQRT's intermediate `1 / sqrt(v)`.
const RSQRT_FRACTION_BITS: i32 = 20;

impl RsqrtQ {
    /// From the input's and output's quantization; the square root and product in
    /// single precision, the reciprocal in double, as LiteRT's prepare.
    pub fn new((in_scale, in_zp): (f32, i32), (out_scale, out_zp): (f32, i32)) -> RsqrtQ {
        let scale = 1.0 / f64::from(in_scale.sqrt() * out_scale);
        RsqrtQ { in_zp, out_zp, scale: quantize_multiplier(scale) }
    }

    /// One value; None below the zero point (a negative real, which LiteRT refuses).
    pub fn apply(&self, x: i32) -> Option<i32> {
        let v = x - self.in_zp;
        if v < 0 {
            return None;
        }
        if v == 0 {
            return Some(127);
        }
        let (m, s) = inv_sqrt_multiplier(v);
        let r = multiply_by_quantized_multiplier(1, m, s + RSQRT_FRACTION_BITS);
        Some((multiply_by_quantized_multiplier(r, self.scale.0, self.scale.1 - RSQRT_FRACTION_BITS) + self.out_zp).clamp(-128, 127))
    }
}

/// `erfc(z)` to about 1e-15: the Taylor series of erf near 0, the continued
/// fraction of erfc in the tails (where 1 - erf would cancel).
fn erfc(z: f64) -> f64 {
    if z.abs() < 2.5 {
        let (mut term, mut sum, z2) = (z, z, z * z);
        for n in 1..80 {
            term *= -z2 / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        return 1.0 - sum * std::f64::consts::FRAC_2_SQRT_PI;
    }
    if z < 0.0 {
        return 2.0 - erfc(-z);
    }
    let mut f = z;
    for k in (1..=60).rev() {
        f = z + f64::from(k) / 2.0 / f;
    }
    (-z * z).exp() / (std::f64::consts::PI.sqrt() * f)
}

/// GELU as LiteRT's integer kernels tabulate it, in single precision:
/// `0.5 x erfc(-x / sqrt(2))`, or with `approximate` the tanh form
/// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
pub fn gelu_for_table(x: f32, approximate: bool) -> f32 {
    if approximate {
        let k = (std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;
        0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
    } else {
        0.5 * x * erfc(f64::from(x * -std::f32::consts::FRAC_1_SQRT_2)) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{mbqm_ref, Rng};

    #[test]
    fn inverse_square_root_multiplier_is_within_its_precision() {
        for v in (2..5000).chain([65_535, 1 << 20, (1 << 29) + 7, i32::MAX]) {
            let (m, s) = inv_sqrt_multiplier(v);
            // Five Newton steps from 1 leave a relative error of about 1e-6.
            let got = f64::from(m) * 2f64.powi(s - 31);
            let want = 1.0 / f64::from(v).sqrt();
            assert!(((got - want) / want).abs() < 1e-5, "{v}: {got} vs {want}");
        }
        assert_eq!(inv_sqrt_multiplier(1), (i32::MAX, 0));
    }

    #[test]
    fn quantized_rsqrt_and_abs_follow_the_real_functions() {
        let mut rng = Rng::new(5);
        for _ in 0..200 {
            let (si, zi) = (rng.scale(-3.0, 0.0), rng.range(-128, 0) as i32);
            let (so, zo) = (rng.scale(-2.0, 1.0), rng.range(-128, 127) as i32);
            let p = RsqrtQ::new((si, zi), (so, zo));
            for x in -128..128 {
                let Some(got) = p.apply(x) else {
                    assert!(x < zi);
                    continue;
                };
                if x == zi {
                    assert_eq!(got, 127);
                    continue;
                }
                let real = 1.0 / (f64::from(si) * f64::from(x - zi)).sqrt();
                let want = (real / f64::from(so) + f64::from(zo)).round().clamp(-128.0, 127.0);
                // Two fixed-point steps: within one step of the rounded real value.
                assert!((f64::from(got) - want).abs() <= 1.0, "{x}: {got} vs {want} ({si}, {zi}) ({so}, {zo})");
            }
            let a = AbsQ::new((si, zi), (so, zo), (-128, 127));
            let same = AbsQ::new((si, zi), (si, zo), (-128, 127));
            for x in -128..128 {
                let want = (f64::from(si) * f64::from((x - zi).abs()) / f64::from(so) + f64::from(zo)).round().clamp(-128.0, 127.0) as i32;
                let (m, e) = quantize_multiplier(f64::from(si / so));
                assert_eq!(a.apply(x), (mbqm_ref((x - zi).abs(), m, e) + zo).clamp(-128, 127));
                assert!((a.apply(x) - want).abs() <= 1);
                assert_eq!(same.apply(x), ((x - zi).abs() + zo).clamp(-128, 127));
            }
        }
    }

    #[test]
    fn erfc_and_gelu_match_known_values() {
        // erfc at 0.5, 1, 3 and -1 (published values to 15 digits).
        for (z, want) in [(0.5, 0.479_500_122_186_953_5), (1.0, 0.157_299_207_050_285_1), (3.0, 2.209_049_699_858_544e-5), (-1.0, 1.842_700_792_949_715)] {
            assert!((erfc(z) - want).abs() < 1e-14 * want.max(1e-3) * 1e3, "erfc({z}) = {} vs {want}", erfc(z));
        }
        for x in [-6.0f32, -2.0, -0.3, 0.0, 0.7, 2.5] {
            let exact = gelu_for_table(x, false);
            let approx = gelu_for_table(x, true);
            assert!((exact - approx).abs() < 2e-3, "{x}: {exact} {approx}");
            assert!((exact - crate::elementwise::gelu(x, false)).abs() < 1e-5);
        }
    }

    /// Every value of an 8-bit type, in a random order, plus a random tail.
    fn bytes(rng: &mut Rng) -> Vec<u8> {
        let mut v: Vec<u8> = (0..=255).collect();
        for i in (1..v.len()).rev() {
            v.swap(i, rng.size(0, i));
        }
        let extra = rng.size(0, 37);
        v.extend((0..extra).map(|_| rng.bits() as u8));
        v
    }

    fn value(signed: bool, b: u8) -> i32 {
        if signed {
            i32::from(b as i8)
        } else {
            i32::from(b)
        }
    }

    #[test]
    fn real_function_tables_match_the_definition() {
        let mut rng = Rng::new(71);
        for round in 0..200 {
            let signed = rng.one_in(2);
            let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
            let in_q = (rng.scale(-3.0, 0.0), rng.range(lo, hi) as i32);
            let out_q = if rng.one_in(2) { (1.0 / 256.0, lo as i32) } else { (rng.scale(-3.0, 0.0), rng.range(lo - 100, hi + 100) as i32) };
            let f: fn(f32) -> f32 = [crate::elementwise::logistic, f32::tanh][rng.size(0, 1)];
            let lut = Lut8::of_real(signed, f, in_q, out_q);
            let x = bytes(&mut rng);
            let mut got = vec![0u8; x.len()];
            lut.apply(&x, &mut got);
            for (&b, &g) in x.iter().zip(&got) {
                let real = f(in_q.0 * (value(signed, b) - in_q.1) as f32);
                let want = ((real * (1.0 / out_q.0)).round() as i64 + i64::from(out_q.1)).clamp(lo, hi);
                assert_eq!(i64::from(value(signed, g)), want, "round {round} input {b}");
            }
        }
    }

    /// The Q0.15 helpers from their definitions, in 64-bit arithmetic.
    fn sat16(v: i64) -> i64 {
        v.clamp(-32768, 32767)
    }
    /// `a * b / 2^15`, rounded half up; `MIN * MIN` saturates.
    fn srdhm_ref(a: i64, b: i64) -> i64 {
        if a == -32768 && b == -32768 {
            32767
        } else {
            (a * b + (1 << 14)).div_euclid(1 << 15)
        }
    }
    /// `a * b / 2^15`, truncated toward zero; `MIN * MIN` saturates.
    fn sdhm_ref(a: i64, b: i64) -> i64 {
        if a == -32768 && b == -32768 {
            32767
        } else {
            (a * b) / (1 << 15)
        }
    }
    /// `x / 2^e`, rounded half away from zero.
    fn rdpot_ref(x: i64, e: i32) -> i64 {
        let d = 1i64 << e;
        x.signum() * ((2 * x.abs() + d) / (2 * d))
    }

    /// LiteRT's hard-swish scheme written out step by step.
    fn hard_swish_ref(p: &HardSwishQ, x: i32) -> i64 {
        let hires = i64::from(x - p.in_zp) * 128;
        let pre_out = srdhm_ref(hires, i64::from(p.out_multiplier));
        let re = p.relu_exponent;
        let mut relu = hires;
        if re > 0 {
            relu = sat16(relu * (1 << (re - 1)));
        }
        relu = srdhm_ref(relu, i64::from(p.relu_multiplier));
        if re > 0 {
            relu = sat16(relu * 2);
        }
        if re < 0 {
            relu = rdpot_ref(relu, -re);
        }
        // relu in [-1, 1] in Q0.15 to [0, 1]: (relu + 1) / 2, rounded down.
        let relu = (relu + 32768).div_euclid(2);
        (rdpot_ref(sdhm_ref(relu, pre_out), -p.out_exponent) + i64::from(p.out_zp)).clamp(i64::from(p.min), i64::from(p.max))
    }

    #[test]
    fn hard_swish_matches_the_definition() {
        let mut rng = Rng::new(72);
        let mut tried = 0;
        while tried < 300 {
            let signed = rng.one_in(2);
            let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
            let in_q = (rng.scale(-2.5, 0.0), rng.range(lo, hi) as i32);
            let out_q = (in_q.0 * rng.scale(-0.5, 1.0), rng.range(lo, hi) as i32);
            let Some(p) = HardSwishQ::new(in_q, out_q, (lo as i32, hi as i32)) else { continue };
            tried += 1;
            let x = bytes(&mut rng);
            let mut got = vec![0u8; x.len()];
            p.table(signed).apply(&x, &mut got);
            for (&b, &g) in x.iter().zip(&got) {
                let v = value(signed, b);
                let want = hard_swish_ref(&p, v);
                assert_eq!(i64::from(value(signed, g)), want, "{p:?} input {v}");
                // And it is hard-swish, to within about a step of the output.
                let real = f64::from(in_q.0) * f64::from(v - in_q.1);
                let ideal = (real * (real + 3.0).clamp(0.0, 6.0) / 6.0 / f64::from(out_q.0) + f64::from(out_q.1)).clamp(lo as f64, hi as f64);
                assert!((want as f64 - ideal).abs() <= 1.5, "{p:?} input {v}: {want} vs {ideal}");
            }
        }
        // An output scale finer than in_scale / 128 has no exponent in the scheme.
        assert!(HardSwishQ::new((1.0, 0), (1.0 / 1024.0, 0), (-128, 127)).is_none());
    }

    #[test]
    fn relu_family_matches_the_definition() {
        let mut rng = Rng::new(73);
        for round in 0..600 {
            let kind = rng.size(0, 2);
            let (lo, hi) = [(-128i64, 127i64), (0, 255), (-32768, 32767)][kind];
            let in_q = (rng.scale(-3.0, 0.0), if rng.one_in(4) { [lo, hi][rng.size(0, 1)] } else { rng.range(lo, hi) } as i32);
            // Output scales near the input's (rescales between about 1/10 and 10).
            let out_q = (in_q.0 * rng.scale(-1.0, 1.0), rng.range(lo, hi) as i32);
            let alpha = rng.one_in(2).then(|| [0.2f32, -0.7, 0.0, 1.5][rng.size(0, 3)]);
            let range = (rng.range(lo, (lo + hi) / 2) as i32, rng.range((lo + hi) / 2, hi) as i32);
            let p = ReluQ::new(in_q, out_q, alpha, range);
            let len = rng.dim() * rng.dim();
            let x = rng.ints(len, lo, hi);
            let check = |got: Vec<i64>| {
                for (&xv, &g) in x.iter().zip(&got) {
                    let d = xv as i32 - in_q.1;
                    let (m, s) = if d < 0 && alpha.is_some() {
                        let real = f64::from(in_q.0) * f64::from(alpha.unwrap_or(1.0)) / f64::from(out_q.0);
                        let (m, s) = quantize_multiplier(real.abs());
                        (if real < 0.0 { -m } else { m }, s)
                    } else {
                        quantize_multiplier(f64::from(in_q.0) / f64::from(out_q.0))
                    };
                    let want = (i64::from(mbqm_ref(d, m, s)) + i64::from(out_q.1)).clamp(i64::from(range.0), i64::from(range.1));
                    assert_eq!(g, want, "round {round} {p:?} input {xv}");
                }
            };
            match kind {
                0 => {
                    let xt: Vec<i8> = x.iter().map(|&v| v as i8).collect();
                    let mut o = vec![0i8; len];
                    relu(&xt, &p, &mut o);
                    check(o.iter().map(|&v| i64::from(v)).collect());
                }
                1 => {
                    let xt: Vec<u8> = x.iter().map(|&v| v as u8).collect();
                    let mut o = vec![0u8; len];
                    relu(&xt, &p, &mut o);
                    check(o.iter().map(|&v| i64::from(v)).collect());
                }
                _ => {
                    let xt: Vec<i16> = x.iter().map(|&v| v as i16).collect();
                    let mut o = vec![0i16; len];
                    relu(&xt, &p, &mut o);
                    check(o.iter().map(|&v| i64::from(v)).collect());
                }
            }
        }
    }

    #[test]
    fn int16_logistic_and_tanh_follow_the_scale_rule_and_the_functions() {
        let mut rng = Rng::new(74);
        let x: Vec<i16> = (i16::MIN..=i16::MAX).step_by(3).chain([i16::MIN, -1, 0, 1, i16::MAX]).collect();
        for round in 0..40 {
            let tanh = rng.one_in(2);
            // Power-of-two scales take the fixed-point functions (2^-12, and 2^-11
            // for TANH); any other the table.
            let scale = match round % 4 {
                0 => 1.0 / 4096.0,
                1 => 1.0 / 2048.0,
                _ => f64::from(rng.scale(-4.5, -2.0)),
            };
            let p = LogisticTanh16::new(scale, tanh);
            let mut got = vec![0i16; x.len()];
            p.apply(&x, &mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let want = match f16::input_rescale(scale, tanh) {
                    InputRescale::FixedPoint(s) if tanh => f16::tanh_q3(f16::saturating_shl(v, s)),
                    InputRescale::FixedPoint(_) => f16::logistic_q3(v),
                    InputRescale::Table(m, s) if tanh => f16::tanh_table(v, m, s),
                    InputRescale::Table(m, s) => f16::logistic_table(v, m, s),
                };
                assert_eq!(g, want, "round {round} scale {scale} input {v}");
                let real = f64::from(v) * scale;
                let ideal = if tanh { real.tanh() } else { 1.0 / (1.0 + (-real).exp()) };
                assert!((f64::from(g) / 32768.0 - ideal).abs() < 1e-3, "round {round} scale {scale}: {g} vs {ideal}");
            }
        }
    }
}
