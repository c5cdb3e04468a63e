//! 16-bit fixed-point arithmetic with TFLite's exact rounding: the Q-format
//! helpers of its int16 kernels, the fixed-point exp / logistic / tanh its
//! optimized int16 LOGISTIC and TANH use for power-of-two input scales, and the
//! interpolated sigmoid table its reference int16 kernels use for any other scale.
//!
//! A value `x` with `int_bits` integer bits is the raw `i16` `x * 2^(15 - int_bits)`.
//! Additions wrap and multiplications round and saturate exactly as the 16-bit
//! lanes of the kernels being matched do, which is what makes results bit-exact.

/// `round(a * b / 2^15)`, ties away from zero, saturating the one overflow case
/// (`MIN * MIN`).
#[inline]
pub fn srdhm(a: i16, b: i16) -> i16 {
    if a == b && a == i16::MIN {
        return i16::MAX;
    }
    let ab = i32::from(a) * i32::from(b);
    let nudge = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
    ((ab + nudge) / (1 << 15)) as i16
}

/// `a * b / 2^15` truncated toward zero, saturating the one overflow case.
#[inline]
pub fn sdhm(a: i16, b: i16) -> i16 {
    if a == b && a == i16::MIN {
        return i16::MAX;
    }
    ((i32::from(a) * i32::from(b)) / (1 << 15)) as i16
}

/// `x / 2^exponent` rounded to nearest, ties away from zero.
#[inline]
pub fn rdpot(x: i16, exponent: i32) -> i16 {
    let (x, mask) = (i32::from(x), (1i32 << exponent) - 1);
    let threshold = (mask >> 1) + i32::from(x < 0);
    ((x >> exponent) + i32::from((x & mask) > threshold)) as i16
}

/// `x * 2^shift` saturated to the `i16` range (`shift >= 0`).
#[inline]
pub fn saturating_shl(x: i16, shift: i32) -> i16 {
    (i32::from(x) << shift).clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
}

/// Multiplies by `2^exponent`: a saturating left shift for positive exponents, a
/// rounding right shift for negative ones.
#[inline]
fn mul_pot(x: i16, exponent: i32) -> i16 {
    if exponent >= 0 {
        saturating_shl(x, exponent)
    } else {
        rdpot(x, -exponent)
    }
}

/// A 32-bit fixed-point constant narrowed to 16 bits by a rounding shift, the
/// way the 16-bit kernels derive their constants from the 32-bit ones.
const fn narrow(c: i32) -> i16 {
    let mask = (1i64 << 16) - 1;
    let remainder = c as i64 & mask;
    let threshold = (mask >> 1) + (c < 0) as i64;
    ((c >> 16) + (remainder > threshold) as i32) as i16
}

/// `(a + b) / 2` rounded away from zero.
#[inline]
fn rounding_half_sum(a: i16, b: i16) -> i16 {
    let sum = i32::from(a) + i32::from(b);
    ((sum + if sum >= 0 { 1 } else { -1 }) / 2) as i16
}

/// One with no integer bits: the largest raw value.
const ONE_Q0: i16 = i16::MAX;

/// `exp(a)` for `a` in [-1/4, 0), Q0.15 in and out: a fourth-order Taylor
/// expansion around -1/8.
fn exp_on_quarter_interval(a: i16) -> i16 {
    const EXP_MINUS_ONE_EIGHTH: i16 = narrow(1_895_147_668);
    const ONE_THIRD: i16 = narrow(715_827_883);
    let x = a.wrapping_add(1 << 12);
    let x2 = srdhm(x, x);
    let x3 = srdhm(x2, x);
    let x4 = srdhm(x2, x2);
    let x4_over_4 = rdpot(x4, 2);
    let poly = rdpot(srdhm(x4_over_4.wrapping_add(x3), ONE_THIRD).wrapping_add(x2), 1);
    EXP_MINUS_ONE_EIGHTH.saturating_add(srdhm(EXP_MINUS_ONE_EIGHTH, x.wrapping_add(poly)))
}

/// `exp(a)` for `a <= 0` with `int_bits` integer bits (at most 5), result in Q0.15:
/// the fractional quarter from the Taylor expansion, then one multiplication by
/// `exp(-2^k)` per set bit of the rest.
pub fn exp_on_negative_values(a: i16, int_bits: i32) -> i16 {
    let frac_bits = 15 - int_bits;
    let one_quarter: i16 = 1 << (frac_bits - 2);
    let mod_quarter = (a & (one_quarter - 1)).wrapping_sub(one_quarter);
    let mut result = exp_on_quarter_interval(mul_pot(mod_quarter, int_bits));
    let remainder = mod_quarter.wrapping_sub(a);
    // exp(-2^k) for k = -2..=4 in Q0.31, narrowed.
    const BARREL: [(i32, i16); 7] = [
        (-2, narrow(1_672_461_947)),
        (-1, narrow(1_302_514_674)),
        (0, narrow(790_015_084)),
        (1, narrow(290_630_308)),
        (2, narrow(39_332_535)),
        (3, narrow(720_401)),
        (4, narrow(242)),
    ];
    for (exponent, multiplier) in BARREL {
        if int_bits > exponent && remainder & (1 << (frac_bits + exponent)) != 0 {
            result = srdhm(result, multiplier);
        }
    }
    if a == 0 {
        ONE_Q0
    } else {
        result
    }
}

/// Newton-Raphson reciprocal `1 / (1 + a)` for `a` in [0, 1), as Q2.13 times one half.
fn half_reciprocal_q2(a: i16) -> i16 {
    const C48_17: i16 = narrow(1_515_870_810);
    const CNEG32_17: i16 = narrow(-1_010_580_540);
    const ONE_Q2: i16 = 1 << 13;
    let half_denominator = rounding_half_sum(a, ONE_Q0);
    let mut x = C48_17.wrapping_add(srdhm(half_denominator, CNEG32_17));
    for _ in 0..3 {
        let one_minus = ONE_Q2.wrapping_sub(srdhm(half_denominator, x));
        x = x.wrapping_add(mul_pot(srdhm(x, one_minus), 2));
    }
    x
}

/// `1 / (1 + a)` for `a` in [0, 1), Q0.15.
fn one_over_one_plus_x(a: i16) -> i16 {
    mul_pot(half_reciprocal_q2(a), 1)
}

/// `(1 - a) / (1 + a)` for `a` in [0, 1), Q0.15.
pub(crate) fn one_minus_x_over_one_plus_x(a: i16) -> i16 {
    mul_pot(half_reciprocal_q2(a).wrapping_sub(1 << 13), 2)
}

/// Fixed-point logistic of a Q3.12 input, Q0.15 output.
pub fn logistic_q3(a: i16) -> i16 {
    if a == 0 {
        return narrow(1 << 30);
    }
    let abs = if a > 0 { a } else { a.wrapping_neg() };
    let positive = one_over_one_plus_x(exp_on_negative_values(abs.wrapping_neg(), 3));
    if a > 0 {
        positive
    } else {
        ONE_Q0.wrapping_sub(positive)
    }
}

/// Fixed-point tanh of a Q3.12 input, Q0.15 output.
pub fn tanh_q3(a: i16) -> i16 {
    if a == 0 {
        return 0;
    }
    let negative = if a < 0 { a } else { a.wrapping_neg() };
    // tanh(-n) = (1 - exp(-2n)) / (1 + exp(-2n)); the doubling is a change of format.
    let t = one_minus_x_over_one_plus_x(exp_on_negative_values(negative, 4));
    if a < 0 {
        t.wrapping_neg()
    } else {
        t
    }
}

/// The 256-point sigmoid table of LiteRT's reference int16 LOGISTIC and TANH, in
/// unsigned Q0.16 (entry `i` is about sigmoid(i / 24)). The values are data the
/// kernels being matched interpolate between; a computed table differs from them
/// by one unit in places, so they are listed.
#[rustfmt::skip]
const SIGMOID_TABLE: [u16; 256] = [
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
];

/// Interpolates the sigmoid table at `abs / 2^frac` table steps, returning the
/// result scaled by `2^frac` too, or `saturated` past the table's end.
#[inline]
fn table_at(abs: u32, frac: u32, saturated: u32) -> u32 {
    let index = (abs >> frac) as usize;
    if index >= 255 {
        return saturated;
    }
    let (a, b) = (u32::from(SIGMOID_TABLE[index]), u32::from(SIGMOID_TABLE[index + 1]));
    let t = abs & ((1 << frac) - 1);
    (a << frac) + t * (b - a)
}

/// How LiteRT's int16 LOGISTIC / TANH treat an input scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRescale {
    /// The scale is `2^(shift - 12)`: Q3.12 after a left shift of `shift` (0, or 1
    /// for TANH), run through the fixed-point functions.
    FixedPoint(i32),
    /// Any other scale: `x * multiplier / 2^shift` in table units, then the
    /// interpolated table.
    Table(i32, i32),
}

/// The input treatment of int16 LOGISTIC (`tanh` false) or TANH for `scale`.
pub fn input_rescale(scale: f64, tanh: bool) -> InputRescale {
    let log2 = scale.log2();
    let rounded = log2.round();
    if (log2 - rounded).abs() < 1e-3 {
        let shift = 12 + rounded as i32;
        if shift == 0 || (tanh && shift == 1) {
            return InputRescale::FixedPoint(shift);
        }
    }
    // Rescale the input to 1/(3 * 4096) units, so that +-2^17 spans +-10.7.
    let mut multiplier = scale * 4096.0 * 3.0;
    let mut shift = 0;
    while multiplier <= 32767.0 / 2.0 && shift <= 30 {
        shift += 1;
        multiplier *= 2.0;
    }
    InputRescale::Table(multiplier as i32, shift)
}

/// Table-based int16 logistic: output Q0.15 for an input rescaled by
/// the [`InputRescale::Table`] parameters.
#[inline]
pub fn logistic_table(x: i16, multiplier: i32, shift: i32) -> i16 {
    let v = rescale(x, multiplier, shift);
    let r = table_at(v.unsigned_abs(), 9, 0x7FFF << 10);
    let r = if v >= 0 { r + (1 << 9) } else { (1u32 << 25) - r + (1 << 9) - 1 };
    (r >> 10) as i16
}

/// Table-based int16 tanh: output Q0.15 for an input rescaled by
/// the [`InputRescale::Table`] parameters.
#[inline]
pub fn tanh_table(x: i16, multiplier: i32, shift: i32) -> i16 {
    let v = rescale(x, multiplier, shift);
    let r = table_at(v.unsigned_abs(), 8, 0xFFFF << 8) as i32;
    let r = if v >= 0 { r - (1 << 23) + (1 << 7) } else { -r + (1 << 23) + (1 << 7) - 1 };
    (r >> 8) as i16
}

/// The input in table units: `x * multiplier / 2^shift`, rounded half up.
#[inline]
fn rescale(x: i16, multiplier: i32, shift: i32) -> i32 {
    let round = if shift > 0 { 1 << (shift - 1) } else { 0 };
    (i32::from(x) * multiplier + round) >> shift
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q3(x: f64) -> i16 {
        (x * 4096.0).round().clamp(-32768.0, 32767.0) as i16
    }

    #[test]
    fn fixed_point_functions_track_the_real_ones() {
        for i in -32768..=32767i32 {
            let a = i as i16;
            let x = f64::from(a) / 4096.0;
            let l = f64::from(logistic_q3(a)) / 32768.0;
            let t = f64::from(tanh_q3(a)) / 32768.0;
            assert!((l - 1.0 / (1.0 + (-x).exp())).abs() < 4e-4, "logistic({x}) = {l}");
            assert!((t - x.tanh()).abs() < 8e-4, "tanh({x}) = {t}");
        }
        assert_eq!(logistic_q3(0), 16384);
        assert_eq!(tanh_q3(0), 0);
        assert_eq!(exp_on_negative_values(0, 3), i16::MAX);
        assert!(logistic_q3(q3(8.0)) > 32700);
    }

    #[test]
    fn table_functions_track_the_real_ones() {
        let scale = 0.00037;
        let InputRescale::Table(m, s) = input_rescale(scale, false) else { panic!("table expected") };
        let InputRescale::Table(tm, ts) = input_rescale(scale, true) else { panic!("table expected") };
        for i in (-32768..=32767i32).step_by(7) {
            let x = f64::from(i) * scale;
            let l = f64::from(logistic_table(i as i16, m, s)) / 32768.0;
            let t = f64::from(tanh_table(i as i16, tm, ts)) / 32768.0;
            assert!((l - 1.0 / (1.0 + (-x).exp())).abs() < 3e-4, "logistic({x}) = {l}");
            assert!((t - x.tanh()).abs() < 6e-4, "tanh({x}) = {t}");
        }
        assert_eq!(input_rescale(1.0 / 4096.0, false), InputRescale::FixedPoint(0));
        assert_eq!(input_rescale(1.0 / 2048.0, true), InputRescale::FixedPoint(1));
        assert!(matches!(input_rescale(1.0 / 2048.0, false), InputRescale::Table(..)));
    }

    #[test]
    fn narrowed_constants_round() {
        assert_eq!(narrow(1 << 30), 16384);
        assert_eq!(narrow(242), 0);
        assert_eq!(narrow(720_401), 11);
        assert_eq!(narrow(-1_010_580_540), -15420);
    }
}

/// A 31-bit fixed-point multiplier rounded (half up) to the 15 bits of a Q0.15
/// one, saturating at the top: how the 16-bit kernels take their multipliers.
pub fn multiplier_to_q15(m: i32) -> i16 {
    if m >= i32::MAX - (1 << 15) {
        i16::MAX
    } else {
        ((m + (1 << 15)) >> 16) as i16
    }
}

/// A 513-entry Q0.15 table of a function over `[min, max]`, read with linear
/// interpolation ([`Lut16::lookup`]): each entry is biased by half the error of
/// linear interpolation at the midpoint of its step, as LiteRT builds its int16
/// tables, so the interpolated curve straddles the function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lut16([i16; 513]);

impl Lut16 {
    /// The table of `f` over `[min, max]`.
    pub fn new(f: impl Fn(f64) -> f64, min: f64, max: f64) -> Lut16 {
        let step = (max - min) / 512.0;
        let mut lut = [0i16; 513];
        for (i, slot) in lut.iter_mut().enumerate().take(512) {
            let at = min + i as f64 * step;
            let sample = (f(at) * 32768.0).round();
            let interp = ((f(min + (i + 1) as f64 * step) * 32768.0 + sample) / 2.0).round();
            let mid = (f(at + step / 2.0) * 32768.0).round();
            let bias = ((interp - mid) / 2.0).round();
            *slot = (sample - bias).clamp(-32768.0, 32767.0) as i16;
        }
        lut[512] = (f(max) * 32768.0).round().clamp(-32768.0, 32767.0) as i16;
        Lut16(lut)
    }

    /// The table at `v` (the whole int16 range spanning `[min, max]`): the top 9
    /// bits pick the step, the low 7 the position inside it (rounded half up).
    #[inline(always)]
    pub fn lookup(&self, v: i16) -> i16 {
        let index = (256 + (i32::from(v) >> 7)) as usize;
        let offset = i32::from(v) & 0x7f;
        let (base, slope) = (i32::from(self.0[index]), i32::from(self.0[index + 1]) - i32::from(self.0[index]));
        (base + ((slope * offset + 64) >> 7)) as i16
    }

    /// The raw entries.
    pub fn entries(&self) -> &[i16; 513] {
        &self.0
    }
}

#[cfg(test)]
mod lut_tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn multiplier_to_q15_rounds_half_up_and_saturates() {
        let mut rng = Rng::new(41);
        for _ in 0..100_000 {
            let m = rng.range(0, i64::from(i32::MAX));
            let want = ((m + (1 << 15)) / (1 << 16)).min(32767);
            assert_eq!(i64::from(multiplier_to_q15(m as i32)), want, "{m}");
        }
        assert_eq!(multiplier_to_q15(i32::MAX), i16::MAX);
        assert_eq!(multiplier_to_q15(1 << 30), 1 << 14);
    }

    /// The table from its definition (sample, midpoint, interpolation, bias) for
    /// random functions and ranges, and the lookup as a linear interpolation at
    /// 1/128 steps, for every int16 input.
    #[test]
    fn table_and_lookup_match_the_definition() {
        let mut rng = Rng::new(42);
        for round in 0..20 {
            let (a, b, c) = (rng.unit() * 3.0, rng.unit() * 2.0 - 1.0, rng.unit());
            let f = move |x: f64| (a * x).sin() * b + c * x * x - 0.3;
            let min = -(rng.unit() * 10.0);
            let max = min + 0.5 + rng.unit() * 10.0;
            let lut = Lut16::new(f, min, max);
            let step = (max - min) / 512.0;
            let q = |x: f64| (f(x) * 32768.0).round();
            for i in 0..512 {
                let x = min + i as f64 * step;
                // The interpolation takes the next sample unrounded.
                let bias = (((f(min + (i + 1) as f64 * step) * 32768.0 + q(x)) / 2.0).round() - q(x + step / 2.0)) / 2.0;
                let want = (q(x) - bias.round()).clamp(-32768.0, 32767.0);
                assert_eq!(f64::from(lut.entries()[i]), want, "round {round} entry {i}");
            }
            assert_eq!(f64::from(lut.entries()[512]), q(max).clamp(-32768.0, 32767.0));
            for v in i16::MIN..=i16::MAX {
                let pos = i64::from(v) + 32768;
                let (i, frac) = ((pos / 128) as usize, pos % 128);
                let (lo, hi) = (i64::from(lut.entries()[i]), i64::from(lut.entries()[i + 1]));
                let want = lo + ((hi - lo) * frac + 64).div_euclid(128);
                assert_eq!(i64::from(lut.lookup(v)), want, "round {round} v {v}");
            }
        }
    }
}
