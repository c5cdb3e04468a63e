//! Quantized element-wise binary ops with broadcasting, as LiteRT's builtin
//! integer kernels compute them: ADD / SUB (general and int16 power-of-two), MUL,
//! PRELU and SQUARED_DIFFERENCE, and the rescaled operands of int8 / uint8
//! comparisons.

use crate::elementwise::binary;
use crate::fixed16 as f16;
use crate::quant::{multiply_by_quantized_multiplier, quantize_multiplier, AddSub, QuantInt, Scale};

/// One quantized binary op with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QBinary {
    /// ADD / SUB: both inputs shifted left and rescaled to twice the larger input
    /// scale, combined, rescaled to the output.
    AddSub(AddSub),
    /// int16 ADD / SUB with every scale a power of two (zero points 0): one input
    /// at the output's scale, the other shifted right onto it (rounding), then a
    /// saturating add or subtract.
    PotAddSub {
        /// `log2(input 0 scale / output scale)` (at most 0).
        e1: i32,
        /// `log2(input 1 scale / output scale)` (at most 0).
        e2: i32,
        /// -1 for SUB.
        sign: i32,
        /// Clamp range.
        min: i32,
        /// Upper clamp.
        max: i32,
    },
    /// MUL: the zero-point-corrected product rescaled to the output.
    Mul {
        /// Input zero points.
        zp: (i32, i32),
        /// Multiplier and shift of `s1 * s2 / out_scale`.
        scale: (i32, i32),
        /// Output zero point.
        out_zp: i32,
        /// Clamp range.
        min: i32,
        /// Upper clamp.
        max: i32,
    },
    /// PRELU: `x - zp` rescaled to the output where it is at least 0, else its
    /// product with `alpha - alpha_zp` rescaled.
    Prelu {
        /// Input and alpha zero points.
        zp: (i32, i32),
        /// Multiplier and shift of `s1 / out_scale`.
        identity: (i32, i32),
        /// Multiplier and shift of `s1 * s_alpha / out_scale`.
        alpha: (i32, i32),
        /// Output zero point.
        out_zp: i32,
        /// Clamp range.
        min: i32,
        /// Upper clamp.
        max: i32,
    },
    /// SQUARED_DIFFERENCE: both inputs shifted left by 7 and rescaled to twice the
    /// larger input scale (as ADD does, with less headroom: the square of the
    /// difference must fit in 32 bits), their difference squared, rescaled.
    SquaredDifference {
        /// Input zero points.
        zp: (i32, i32),
        /// Input rescales.
        scale: (Scale, Scale),
        /// Multiplier and shift of `(2 max(s1, s2))^2 / (2^14 out_scale)`.
        out_scale: (i32, i32),
        /// Output zero point.
        out_zp: i32,
        /// Clamp range.
        min: i32,
        /// Upper clamp.
        max: i32,
    },
}

/// SQUARED_DIFFERENCE's left shift of the zero-point-corrected 8-bit inputs: the
/// largest that keeps `(255 * 2^7)^2` within an int32.
const SQUARED_DIFFERENCE_SHIFT: u32 = 7;

impl QBinary {
    /// ADD (`sub` false) or SUB of inputs quantized `(scale, zero point)` onto the
    /// output's, clamped to `range`. int16 keeps 15 bits of headroom instead of 20
    /// so that its shifted values fit in 32 bits.
    pub fn add_sub((s1, z1): (f32, i32), (s2, z2): (f32, i32), (so, zo): (f32, i32), sub: bool, int16: bool, (min, max): (i32, i32)) -> QBinary {
        let left_shift = if int16 { 15 } else { 20 };
        let twice_max = 2.0 * f64::from(s1.max(s2));
        QBinary::AddSub(AddSub {
            zp: (z1, z2),
            out_zp: zo,
            left_shift,
            scale: (Scale::new(f64::from(s1) / twice_max), Scale::new(f64::from(s2) / twice_max)),
            out_scale: Scale::new(twice_max / (f64::from(1u32 << left_shift) * f64::from(so))),
            sign: if sub { -1 } else { 1 },
            min,
            max,
        })
    }

    /// MUL, the multiplier formed in single precision as LiteRT's prepare does
    /// (the double-precision one differs on near-ties in the output's last bit).
    pub fn mul((s1, z1): (f32, i32), (s2, z2): (f32, i32), (so, zo): (f32, i32), (min, max): (i32, i32)) -> QBinary {
        QBinary::Mul { zp: (z1, z2), scale: quantize_multiplier(f64::from(s1 * s2 / so)), out_zp: zo, min, max }
    }

    /// PRELU of an input by alpha, multipliers in single precision as LiteRT's.
    pub fn prelu((s1, z1): (f32, i32), (s2, z2): (f32, i32), (so, zo): (f32, i32), (min, max): (i32, i32)) -> QBinary {
        QBinary::Prelu {
            zp: (z1, z2),
            identity: quantize_multiplier(f64::from(s1 / so)),
            alpha: quantize_multiplier(f64::from(s1 * s2 / so)),
            out_zp: zo,
            min,
            max,
        }
    }

    /// SQUARED_DIFFERENCE of 8-bit inputs, the multipliers formed in double
    /// precision from the single-precision scales as LiteRT's prepare forms them.
    pub fn squared_difference((s1, z1): (f32, i32), (s2, z2): (f32, i32), (so, zo): (f32, i32), (min, max): (i32, i32)) -> QBinary {
        let twice_max = 2.0 * f64::from(s1.max(s2));
        let out = twice_max * twice_max / (f64::from(1u32 << (2 * SQUARED_DIFFERENCE_SHIFT)) * f64::from(so));
        QBinary::SquaredDifference {
            zp: (z1, z2),
            scale: (Scale::new(f64::from(s1) / twice_max), Scale::new(f64::from(s2) / twice_max)),
            out_scale: quantize_multiplier(out),
            out_zp: zo,
            min,
            max,
        }
    }

    /// The op on one pair of input values.
    #[inline(always)]
    pub fn apply(&self, x: i32, y: i32) -> i32 {
        match *self {
            QBinary::AddSub(p) => p.apply(x, y),
            QBinary::PotAddSub { e1, e2, sign, min, max } => {
                let (x, y) = (i32::from(f16::rdpot(x as i16, -e1)), i32::from(f16::rdpot(y as i16, -e2)));
                (x + sign * y).clamp(-32768, 32767).clamp(min, max)
            }
            QBinary::Mul { zp: (z1, z2), scale: (m, e), out_zp, min, max } => {
                (multiply_by_quantized_multiplier((x - z1) * (y - z2), m, e) + out_zp).clamp(min, max)
            }
            QBinary::Prelu { zp: (z1, z2), identity: (m1, e1), alpha: (m2, e2), out_zp, min, max } => {
                let x = x - z1;
                let v = if x >= 0 { multiply_by_quantized_multiplier(x, m1, e1) } else { multiply_by_quantized_multiplier(x * (y - z2), m2, e2) };
                (v + out_zp).clamp(min, max)
            }
            QBinary::SquaredDifference { zp: (z1, z2), scale: (c1, c2), out_scale: (m, e), out_zp, min, max } => {
                let x = c1.apply((x - z1) << SQUARED_DIFFERENCE_SHIFT);
                let y = c2.apply((y - z2) << SQUARED_DIFFERENCE_SHIFT);
                let d = x - y;
                (multiply_by_quantized_multiplier(d.wrapping_mul(d), m, e) + out_zp).clamp(min, max)
            }
        }
    }
}

/// [`QBinary`] over `a` and `b` broadcast to `out_shape` (for equal shapes of one
/// type, [`crate::quant::add_sub_i8`] and its siblings are the vectorized ADD / SUB).
pub fn binary_q<A: QuantInt, B: QuantInt, O: QuantInt>(
    op: &QBinary,
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    out: &mut [O],
    out_shape: &[usize],
) {
    // One monomorphized loop per variant: the match stays out of the element loop.
    macro_rules! run {
        ($p:expr) => {
            binary(a, a_shape, b, b_shape, out, out_shape, |x: A, y: B| O::narrow($p.apply(x.widen(), y.widen())))
        };
    }
    match op {
        p @ QBinary::AddSub(_) => run!(p),
        p @ QBinary::PotAddSub { .. } => run!(p),
        p @ QBinary::Mul { .. } => run!(p),
        p @ QBinary::Prelu { .. } => run!(p),
        p @ QBinary::SquaredDifference { .. } => run!(p),
    }
}

/// Left shift LiteRT gives an int8 / uint8 comparison's operands before rescaling:
/// eight bits of headroom, so nearby values of differently scaled inputs stay apart.
pub const COMPARISON_SHIFT: i32 = 8;

/// One operand of a quantized (int8 / uint8) comparison: LiteRT compares
/// `(q - zero_point) * 2^8` times the input's own scale, rescaled with a fixed-point
/// multiplier, so two inputs of different quantization compare as real values
/// (up to that rounding, which a bit-exact kernel must reproduce: values that round
/// together compare equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompareScale {
    /// The input's zero point.
    pub zero_point: i32,
    /// Multiplier and shift of the input's scale (below 1, so the shift is <= 0).
    pub scale: (i32, i32),
}

impl CompareScale {
    /// For an input of `scale` (in (0, 1)) and `zero_point`; `None` for a scale of 1
    /// or more, where LiteRT's rescale shifts right by a negative amount (undefined).
    pub fn new(scale: f32, zero_point: i32) -> Option<CompareScale> {
        let (m, e) = quantize_multiplier(f64::from(scale));
        (scale > 0.0 && scale < 1.0 && e <= 0).then_some(CompareScale { zero_point, scale: (m, e) })
    }

    /// The operand as the comparison sees it.
    #[inline(always)]
    pub fn apply(self, q: i32) -> i32 {
        multiply_by_quantized_multiplier((q - self.zero_point).wrapping_mul(1 << COMPARISON_SHIFT), self.scale.0, self.scale.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{broadcast_index, broadcast_shapes, mbqm_ref, Rng};

    /// The comparison operand against its definition: the centred value shifted
    /// left 8 bits, times the scale's multiplier, rounded by the reference rescale.
    #[test]
    fn comparison_operands_match_the_definition() {
        let mut rng = Rng::new(17);
        for _ in 0..2000 {
            let scale = rng.scale(-4.0, -0.001);
            let zp = rng.range(-128, 255) as i32;
            let c = CompareScale::new(scale, zp).unwrap();
            let (m, e) = quantize_multiplier(f64::from(scale));
            let q = rng.range(-128, 255) as i32;
            assert_eq!(c.apply(q), mbqm_ref((q - zp) * 256, m, e), "scale {scale} zp {zp} q {q}");
        }
        assert!(CompareScale::new(1.0, 0).is_none() && CompareScale::new(2.5, 0).is_none());
    }

    /// `x / 2^e`, rounded half away from zero.
    fn rdpot_ref(x: i64, e: i32) -> i64 {
        let d = 1i64 << e;
        x.signum() * ((2 * x.abs() + d) / (2 * d))
    }

    /// The ops from their definitions, in 64-bit arithmetic with the reference
    /// rescale, each multiplier formed from the scales as LiteRT forms it.
    fn reference(kind: usize, q: [(f32, i32); 3], pot: (i32, i32), sub: bool, int16: bool, (min, max): (i32, i32), x: i32, y: i32) -> i64 {
        let [(s1, z1), (s2, z2), (so, zo)] = q;
        let sign = if sub { -1 } else { 1 };
        let v = match kind {
            0 => {
                let left = if int16 { 15 } else { 20 };
                let twice = 2.0 * f64::from(s1.max(s2));
                let rescale = |v: i64, real: f64| {
                    let (m, e) = quantize_multiplier(real);
                    i64::from(mbqm_ref(v as i32, m, e))
                };
                let xs = rescale(i64::from(x - z1) << left, f64::from(s1) / twice);
                let ys = rescale(i64::from(y - z2) << left, f64::from(s2) / twice);
                rescale(xs + sign * ys, twice / (f64::from(1u32 << left) * f64::from(so))) + i64::from(zo)
            }
            1 => (rdpot_ref(i64::from(x), -pot.0) + sign * rdpot_ref(i64::from(y), -pot.1)).clamp(-32768, 32767),
            2 => {
                let (m, e) = quantize_multiplier(f64::from(s1 * s2 / so));
                i64::from(mbqm_ref((x - z1) * (y - z2), m, e)) + i64::from(zo)
            }
            4 => {
                let twice = 2.0 * f64::from(s1.max(s2));
                let rescale = |v: i64, real: f64| {
                    let (m, e) = quantize_multiplier(real);
                    i64::from(mbqm_ref(v as i32, m, e))
                };
                let d = rescale(i64::from(x - z1) << 7, f64::from(s1) / twice) - rescale(i64::from(y - z2) << 7, f64::from(s2) / twice);
                rescale(d * d, twice * twice / (16384.0 * f64::from(so))) + i64::from(zo)
            }
            _ => {
                let d = x - z1;
                let (m, e) = if d >= 0 { quantize_multiplier(f64::from(s1 / so)) } else { quantize_multiplier(f64::from(s1 * s2 / so)) };
                i64::from(mbqm_ref(if d >= 0 { d } else { d * (y - z2) }, m, e)) + i64::from(zo)
            }
        };
        v.clamp(i64::from(min), i64::from(max))
    }

    fn run<A: QuantInt, B: QuantInt, O: QuantInt>(rng: &mut Rng, from_a: fn(i64) -> A, from_b: fn(i64) -> B, zero: O, kind: usize, round: usize) {
        let (la, ha) = (i64::from(A::MIN), i64::from(A::MAX));
        let (lb, hb) = (i64::from(B::MIN), i64::from(B::MAX));
        let (lo, hi) = (O::MIN, O::MAX);
        let int16 = A::MAX > 255;
        let (sa, sb, os) = broadcast_shapes(rng);
        let zp = |rng: &mut Rng, l: i64, h: i64| {
            if kind == 1 || (int16 && kind != 3) {
                0
            } else if rng.one_in(4) {
                [l, h][rng.size(0, 1)] as i32
            } else {
                rng.range(l, h) as i32
            }
        };
        let q1 = (rng.scale(-3.0, 0.0), zp(rng, la, ha));
        let q2 = (if kind == 0 { q1.0 * rng.scale(-1.0, 1.0) } else { rng.scale(-3.0, 0.0) }, zp(rng, lb, hb));
        let qo = (if kind == 2 || kind == 4 { q1.0 * q2.0 * rng.scale(-1.0, 2.0) } else { q1.0 * rng.scale(-1.0, 1.0) }, zp(rng, i64::from(lo), i64::from(hi)));
        let pot = if rng.one_in(2) { (0, -rng.range(0, 6) as i32) } else { (-rng.range(0, 6) as i32, 0) };
        let sub = rng.one_in(2);
        let mid = (lo + hi) / 2;
        let range = if rng.one_in(2) { (lo, hi) } else { (rng.range(i64::from(lo), i64::from(mid)) as i32, rng.range(i64::from(mid), i64::from(hi)) as i32) };
        let op = match kind {
            0 => QBinary::add_sub(q1, q2, qo, sub, int16, range),
            1 => QBinary::PotAddSub { e1: pot.0, e2: pot.1, sign: if sub { -1 } else { 1 }, min: range.0, max: range.1 },
            2 => QBinary::mul(q1, q2, qo, range),
            4 => QBinary::squared_difference(q1, q2, qo, range),
            _ => QBinary::prelu(q1, q2, qo, range),
        };
        let a: Vec<i64> = rng.ints(sa.iter().product(), la, ha);
        let b: Vec<i64> = rng.ints(sb.iter().product(), lb, hb);
        let (at, bt): (Vec<A>, Vec<B>) = (a.iter().map(|&v| from_a(v)).collect(), b.iter().map(|&v| from_b(v)).collect());
        let n: usize = os.iter().product();
        let mut got = vec![zero; n];
        binary_q(&op, &at, &sa, &bt, &sb, &mut got, &os);
        for (i, g) in got.iter().enumerate() {
            let (x, y) = (a[broadcast_index(&os, &sa, i)] as i32, b[broadcast_index(&os, &sb, i)] as i32);
            let want = reference(kind, [q1, q2, qo], pot, sub, int16, range, x, y);
            assert_eq!(i64::from(g.widen()), want, "round {round} kind {kind} {op:?} {sa:?} {sb:?} element {i}: {x} {y}");
        }
    }

    #[test]
    fn quantized_binary_ops_match_the_definition() {
        let mut rng = Rng::new(91);
        for round in 0..400 {
            for kind in [0, 2, 3, 4] {
                run::<i8, i8, i8>(&mut rng, |v| v as i8, |v| v as i8, 0, kind, round);
                run::<u8, u8, u8>(&mut rng, |v| v as u8, |v| v as u8, 0, kind, round);
            }
            for kind in [0, 1, 2] {
                run::<i16, i16, i16>(&mut rng, |v| v as i16, |v| v as i16, 0, kind, round);
            }
            // int16 PRELU takes an int8 alpha.
            run::<i16, i8, i16>(&mut rng, |v| v as i16, |v| v as i8, 0, 3, round);
        }
    }
}
