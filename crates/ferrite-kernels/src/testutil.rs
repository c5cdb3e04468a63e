//! Test helpers shared by the kernels' unit tests: small seeded
//! generators (the tests need no dependency and must be reproducible) and the
//! fixed-point rescale written from its definition, in 128-bit arithmetic, as
//! the naive references' building block.

/// A 64-bit linear congruential generator; the high bits are the output.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// 32 random bits.
    pub(crate) fn bits(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 32) as u32
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi - lo) as u64 + 1;
        let r = (u64::from(self.bits()) << 32) | u64::from(self.bits());
        lo + (r % span) as i64
    }

    /// Uniform in `lo..=hi`, as usize.
    pub(crate) fn size(&mut self, lo: usize, hi: usize) -> usize {
        self.range(lo as i64, hi as i64) as usize
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        f64::from(self.bits()) / 4_294_967_296.0
    }

    /// True with probability `1 / n`.
    pub(crate) fn one_in(&mut self, n: u32) -> bool {
        self.bits().is_multiple_of(n)
    }

    /// A positive real scale spread over many binades: `10^(lo..hi)`.
    pub(crate) fn scale(&mut self, lo: f64, hi: f64) -> f32 {
        10f64.powf(lo + (hi - lo) * self.unit()) as f32
    }

    /// `len` values uniform in `lo..=hi`.
    pub(crate) fn ints(&mut self, len: usize, lo: i64, hi: i64) -> Vec<i64> {
        (0..len).map(|_| self.range(lo, hi)).collect()
    }

    /// A dimension: usually small, sometimes 1, sometimes odd and larger.
    pub(crate) fn dim(&mut self) -> usize {
        match self.bits() % 8 {
            0 => 1,
            1 => self.size(17, 41),
            _ => self.size(1, 9),
        }
    }
}

/// `x * multiplier * 2^(shift - 31)` as TFLite defines `MultiplyByQuantizedMultiplier`:
/// `x` shifted left by the positive part of `shift` in 32-bit arithmetic (wrapping),
/// the product with `multiplier` divided by 2^31 rounding halves up (saturating the
/// one overflow, `MIN * MIN`), then divided by 2 to the negative part of `shift`
/// rounding halves away from zero.
pub(crate) fn mbqm_ref(x: i32, multiplier: i32, shift: i32) -> i32 {
    let (left, right) = (shift.max(0), (-shift).max(0));
    let a = i128::from(x.wrapping_mul(1i32.wrapping_shl(left as u32)));
    let b = i128::from(multiplier);
    let high = if a == i128::from(i32::MIN) && b == i128::from(i32::MIN) { i128::from(i32::MAX) } else { (a * b + (1 << 30)).div_euclid(1 << 31) };
    let d = 1i128 << right;
    let magnitude = (2 * high.abs() + d) / (2 * d);
    (high.signum() * magnitude) as i32
}

/// A multiplier and shift as `quantize_multiplier` makes them, sometimes at the
/// ends of their ranges.
pub(crate) fn multiplier(rng: &mut Rng) -> (i32, i32) {
    let m = match rng.bits() % 6 {
        0 => 1 << 30,
        1 => i32::MAX,
        _ => rng.range(1 << 30, i64::from(i32::MAX)) as i32,
    };
    let shift = match rng.bits() % 5 {
        0 => -31,
        1 => rng.range(-31, 30) as i32,
        _ => rng.range(-12, 2) as i32,
    };
    (m, shift)
}

/// Index into an operand of `shape` broadcast (numpy rules) to `out_shape`, for
/// output element `flat`.
pub(crate) fn broadcast_index(out_shape: &[usize], shape: &[usize], flat: usize) -> usize {
    let mut rest = flat;
    let mut coords = vec![0usize; out_shape.len()];
    for d in (0..out_shape.len()).rev() {
        coords[d] = rest % out_shape[d];
        rest /= out_shape[d];
    }
    let skip = out_shape.len() - shape.len();
    shape.iter().enumerate().fold(0, |i, (d, &s)| i * s + if s == 1 { 0 } else { coords[skip + d] })
}

/// Two shapes that broadcast together (sometimes equal, sometimes one a scalar,
/// a trailing slice or of lower rank) and their broadcast.
pub(crate) fn broadcast_shapes(rng: &mut Rng) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let rank = rng.size(1, 4);
    let out: Vec<usize> = (0..rank).map(|_| rng.dim().min(11)).collect();
    let pick = |rng: &mut Rng| -> Vec<usize> {
        match rng.bits() % 5 {
            0 => out.clone(),
            1 => vec![1],
            2 => out[rng.size(0, rank - 1)..].to_vec(),
            _ => out.iter().map(|&d| if rng.one_in(2) { 1 } else { d }).collect(),
        }
    };
    let (a, mut b) = (pick(rng), pick(rng));
    // One operand carries every dim, so the broadcast is `out`.
    if a.len() < rank || a.iter().zip(&out).any(|(x, y)| x != y) {
        b = out.clone();
    }
    (a, b, out)
}

/// A xorshift64 source of sizes for the random-geometry tests: each call steps
/// the state and returns a value below `n`. Kept apart from [`Rng`] because those
/// tests' cases were drawn from this sequence and stay reproducible with it.
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference agrees with the kernels' own rescale on random operands,
    /// and with hand-worked values.
    #[test]
    fn reference_rescale_matches_the_kernel_one() {
        assert_eq!(mbqm_ref(3, 1 << 30, 0), 2); // 1.5 rounds up
        assert_eq!(mbqm_ref(-3, 1 << 30, 0), -1); // -1.5 rounds up in the high multiply
        assert_eq!(mbqm_ref(-5, 1 << 30, -1), -1); // -2.5 -> -2 (high), then -1.25 -> -1
        assert_eq!(mbqm_ref(-6, 1 << 30, -2), -1); // -3 / 4 = -0.75 -> -1
        assert_eq!(mbqm_ref(i32::MIN, i32::MIN, 0), i32::MAX);
        let mut rng = Rng::new(1);
        for _ in 0..100_000 {
            let (m, s) = multiplier(&mut rng);
            let x = if rng.one_in(3) { rng.bits() as i32 } else { rng.range(-70_000, 70_000) as i32 };
            assert_eq!(mbqm_ref(x, m, s), crate::quant::multiply_by_quantized_multiplier(x, m, s), "{x} {m} {s}");
        }
    }
}
