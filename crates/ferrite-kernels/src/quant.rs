//! Integer (quantized) arithmetic with TensorFlow Lite's semantics: a real
//! multiplier becomes a 31-bit fixed-point multiplier and a shift, and
//! requantization rounds exactly as LiteRT's builtin kernels do, so integer
//! outputs can be bit-exact.

/// Splits a positive real multiplier into (fixed-point multiplier, shift) with
/// `real ~= multiplier * 2^(shift - 31)`, as `QuantizeMultiplier` in TFLite.
pub fn quantize_multiplier(real: f64) -> (i32, i32) {
    if real <= 0.0 || !real.is_finite() {
        return (0, 0);
    }
    // frexp: real = m * 2^e with m in [0.5, 1).
    let bits = real.to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i32;
    if raw_exp == 0 {
        return (0, 0); // subnormal: far below any representable multiplier
    }
    let mut shift = raw_exp - 1022;
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    let mut q = (m * (1u64 << 31) as f64).round() as i64;
    if q == 1 << 31 {
        q /= 2;
        shift += 1;
    }
    if shift < -31 {
        return (0, 0);
    }
    if shift > 30 {
        return (i32::MAX, 30);
    }
    (q as i32, shift)
}

/// `round(a * b / 2^31)` with TFLite's saturation and nudge.
#[inline(always)]
pub fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge = if ab >= 0 { 1i64 << 30 } else { 1 - (1i64 << 30) };
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// `x / 2^exponent`, rounding half away from zero.
#[inline(always)]
pub fn rounding_divide_by_pot(x: i32, exponent: i32) -> i32 {
    let mask = (1i64 << exponent) - 1;
    let remainder = i64::from(x) & mask;
    let threshold = (mask >> 1) + i64::from(x < 0);
    (x >> exponent) + i32::from(remainder > threshold)
}

/// `x * multiplier * 2^(shift - 31)` with TFLite's double rounding.
#[inline(always)]
pub fn multiply_by_quantized_multiplier(x: i32, multiplier: i32, shift: i32) -> i32 {
    let (left, right) = if shift > 0 { (shift, 0) } else { (0, -shift) };
    rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x.wrapping_mul(1 << left), multiplier), right)
}

/// Per-output-channel requantization of an int32 accumulator.
#[derive(Debug, Clone)]
pub struct Requant {
    /// Fixed-point multiplier per channel (one entry = per tensor).
    pub multiplier: Vec<i32>,
    /// Shift per channel.
    pub shift: Vec<i32>,
    /// Output zero point.
    pub out_zp: i32,
    /// Clamp range (fused activation and the type's range).
    pub min: i32,
    /// Upper clamp.
    pub max: i32,
}

impl Requant {
    /// Output value for accumulator `acc` of channel `c`.
    #[inline(always)]
    pub fn apply(&self, acc: i32, c: usize) -> i32 {
        let i = if self.multiplier.len() == 1 { 0 } else { c };
        (multiply_by_quantized_multiplier(acc, self.multiplier[i], self.shift[i]) + self.out_zp).clamp(self.min, self.max)
    }
}

/// Geometry and quantization of an integer convolution.
#[derive(Debug, Clone)]
pub struct QConv {
    /// Window geometry.
    pub g: crate::conv::Window,
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub out_c: usize,
    /// Depthwise channel multiplier (0 for a regular convolution).
    pub depth_multiplier: usize,
    /// Input zero point.
    pub in_zp: i32,
    /// Filter zero point (0 for int8 weights).
    pub w_zp: i32,
    /// Requantization.
    pub rq: Requant,
}

simd_fn! {
    /// Integer convolution of int8 data (regular, or depthwise when
    /// `q.depth_multiplier > 0`). Weights OHWI (regular) or 1HW(C*M) (depthwise);
    /// taps in the padding are skipped, as in TFLite. `acc` holds `out_c` values.
    pub fn conv_i8(input: &[i8], w: &[i8], bias: Option<&[i32]>, q: &QConv, out: &mut [i8], acc: &mut [i32]) {
        let g = &q.g;
        let (in_c, out_c) = (q.in_c, q.out_c);
        let acc = &mut acc[..out_c];
        for n in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    match bias {
                        Some(b) => acc.copy_from_slice(&b[..out_c]),
                        None => acc.fill(0),
                    }
                    for ky in 0..g.k_h {
                        let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
                        for kx in 0..g.k_w {
                            let Some(ix) = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w) else { continue };
                            let px = &input[((n * g.in_h + iy) * g.in_w + ix) * in_c..][..in_c];
                            if q.depth_multiplier > 0 {
                                let m = q.depth_multiplier;
                                let wr = &w[(ky * g.k_w + kx) * out_c..][..out_c];
                                for (o, a) in acc.iter_mut().enumerate() {
                                    *a += (i32::from(px[o / m]) - q.in_zp) * (i32::from(wr[o]) - q.w_zp);
                                }
                            } else {
                                for (o, a) in acc.iter_mut().enumerate() {
                                    let wr = &w[((o * g.k_h + ky) * g.k_w + kx) * in_c..][..in_c];
                                    let mut s = 0i32;
                                    for (&x, &wv) in px.iter().zip(wr) {
                                        s += (i32::from(x) - q.in_zp) * (i32::from(wv) - q.w_zp);
                                    }
                                    *a += s;
                                }
                            }
                        }
                    }
                    let o0 = ((n * g.out_h + oy) * g.out_w + ox) * out_c;
                    for (o, &a) in acc.iter().enumerate() {
                        out[o0 + o] = q.rq.apply(a, o) as i8;
                    }
                }
            }
        }
    }
}

simd_fn! {
    /// Integer fully-connected: `out[b, o] = requant(bias[o] + sum_i (x - in_zp) * (w[o, i] - w_zp))`.
    pub fn fully_connected_i8(input: &[i8], w: &[i8], bias: Option<&[i32]>, batch: usize, in_n: usize, out_n: usize, in_zp: i32, w_zp: i32, rq: &Requant, out: &mut [i8]) {
        for b in 0..batch {
            let x = &input[b * in_n..][..in_n];
            for o in 0..out_n {
                let wr = &w[o * in_n..][..in_n];
                let mut s = bias.map_or(0, |bv| bv[o]);
                for (&xv, &wv) in x.iter().zip(wr) {
                    s += (i32::from(xv) - in_zp) * (i32::from(wv) - w_zp);
                }
                out[b * out_n + o] = rq.apply(s, o) as i8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipliers_match_tflite_examples() {
        assert_eq!(quantize_multiplier(0.5), (1 << 30, 0));
        assert_eq!(quantize_multiplier(1.0), (1 << 30, 1));
        assert_eq!(quantize_multiplier(0.25), (1 << 30, -1));
        let (m, s) = quantize_multiplier(0.000_123_4);
        let back = f64::from(m) * 2f64.powi(s - 31);
        assert!((back - 0.000_123_4).abs() < 1e-12);
    }

    #[test]
    fn fixed_point_rounding() {
        assert_eq!(rounding_divide_by_pot(5, 1), 3); // 2.5 -> 3
        assert_eq!(rounding_divide_by_pot(-5, 1), -3); // -2.5 -> -3
        assert_eq!(rounding_divide_by_pot(7, 2), 2); // 1.75 -> 2
        assert_eq!(saturating_rounding_doubling_high_mul(i32::MIN, i32::MIN), i32::MAX);
        // x * 0.5 with double rounding
        let (m, s) = quantize_multiplier(0.5);
        assert_eq!(multiply_by_quantized_multiplier(3, m, s), 2);
        // The high-mul nudge rounds halves upward: -1.5 -> -1.
        assert_eq!(multiply_by_quantized_multiplier(-3, m, s), -1);
        assert_eq!(multiply_by_quantized_multiplier(1000, m, s), 500);
    }
}
