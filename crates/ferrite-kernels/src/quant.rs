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

/// Largest receptive field (kh * kw * in_c) gathered into a stack patch by
/// [`conv_acc_i8`]; larger ones take the per-tap path.
const PATCH_MAX: usize = 4096;

simd_fn! {
    /// Integer convolution accumulators: `acc[pixel, o] = sum (x - in_zp) * (w - w_zp)`
    /// over the taps inside the input (padding is skipped, as in TFLite), for a
    /// regular convolution (weights OHWI) or a depthwise one (`q.depth_multiplier >
    /// 0`, weights 1HW(C*M)). `acc` holds the whole output.
    pub fn conv_acc_i8(input: &[i8], w: &[i8], q: &QConv, acc: &mut [i32]) {
        let g = &q.g;
        let (in_c, out_c) = (q.in_c, q.out_c);
        let k = g.k_h * g.k_w * in_c;
        if q.depth_multiplier == 0 && k <= PATCH_MAX && i8::try_from(q.in_zp).is_ok() {
            // Gather each pixel's receptive field into one contiguous patch (taps
            // outside the input hold the input zero point, contributing exactly 0),
            // so every output channel is one long dot product against its OHWI row
            // instead of many short per-tap ones.
            let mut patch = [0i8; PATCH_MAX];
            let fill = q.in_zp as i8;
            for n in 0..g.batch {
                for oy in 0..g.out_h {
                    for ox in 0..g.out_w {
                        for ky in 0..g.k_h {
                            for kx in 0..g.k_w {
                                let dst = &mut patch[(ky * g.k_w + kx) * in_c..][..in_c];
                                let iy = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h);
                                let ix = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w);
                                match (iy, ix) {
                                    (Some(iy), Some(ix)) => dst.copy_from_slice(&input[((n * g.in_h + iy) * g.in_w + ix) * in_c..][..in_c]),
                                    _ => dst.fill(fill),
                                }
                            }
                        }
                        let p = &patch[..k];
                        let a = &mut acc[((n * g.out_h + oy) * g.out_w + ox) * out_c..][..out_c];
                        for (o, av) in a.iter_mut().enumerate() {
                            let wr = &w[o * k..][..k];
                            *av = p.iter().zip(wr).map(|(&x, &wv)| (i32::from(x) - q.in_zp) * (i32::from(wv) - q.w_zp)).sum();
                        }
                    }
                }
            }
            return;
        }
        for n in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    let a = &mut acc[((n * g.out_h + oy) * g.out_w + ox) * out_c..][..out_c];
                    a.fill(0);
                    for ky in 0..g.k_h {
                        let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
                        for kx in 0..g.k_w {
                            let Some(ix) = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w) else { continue };
                            let px = &input[((n * g.in_h + iy) * g.in_w + ix) * in_c..][..in_c];
                            if q.depth_multiplier == 1 {
                                // Channel-aligned: a straight element-wise pass that vectorizes.
                                let wr = &w[(ky * g.k_w + kx) * out_c..][..out_c];
                                for ((av, &x), &wv) in a.iter_mut().zip(px).zip(wr) {
                                    *av += (i32::from(x) - q.in_zp) * (i32::from(wv) - q.w_zp);
                                }
                            } else if q.depth_multiplier > 0 {
                                let m = q.depth_multiplier;
                                let wr = &w[(ky * g.k_w + kx) * out_c..][..out_c];
                                for (o, av) in a.iter_mut().enumerate() {
                                    *av += (i32::from(px[o / m]) - q.in_zp) * (i32::from(wr[o]) - q.w_zp);
                                }
                            } else {
                                for (o, av) in a.iter_mut().enumerate() {
                                    let wr = &w[((o * g.k_h + ky) * g.k_w + kx) * in_c..][..in_c];
                                    let mut s = 0i32;
                                    for (&x, &wv) in px.iter().zip(wr) {
                                        s += (i32::from(x) - q.in_zp) * (i32::from(wv) - q.w_zp);
                                    }
                                    *av += s;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Integer convolution with int8 output: accumulators plus bias, requantized.
/// `acc` holds the whole output (scratch).
pub fn conv_i8(input: &[i8], w: &[i8], bias: Option<&[i32]>, q: &QConv, out: &mut [i8], acc: &mut [i32]) {
    conv_acc_i8(input, w, q, acc);
    for (i, (o, &a)) in out.iter_mut().zip(acc.iter()).enumerate() {
        let c = i % q.out_c;
        *o = q.rq.apply(a + bias.map_or(0, |b| b[c]), c) as i8;
    }
}

/// Integer transposed-convolution accumulators: every input pixel, less `in_zp`,
/// scattered through the OHWI weights onto the outputs it reaches (`g` is the
/// geometry of the forward convolution from the output back onto the input).
/// `acc` holds the whole output and is overwritten. `w_zp` is the weights' zero
/// point (0 for int8; uint8 weights arrive shifted into int8 with theirs).
#[allow(clippy::too_many_arguments)]
pub fn transpose_conv_acc_i8(input: &[i8], in_c: usize, w: &[i8], out_c: usize, g: &crate::conv::Window, in_zp: i32, w_zp: i32, acc: &mut [i32]) {
    let taps = g.k_h * g.k_w;
    acc.fill(0);
    crate::conv::transpose_scatter(g, |ip, op, tap| {
        let px = &input[ip * in_c..][..in_c];
        for (oc, ov) in acc[op * out_c..][..out_c].iter_mut().enumerate() {
            let wr = &w[(oc * taps + tap) * in_c..][..in_c];
            *ov += px.iter().zip(wr).map(|(&a, &b)| (i32::from(a) - in_zp) * (i32::from(b) - w_zp)).sum::<i32>();
        }
    });
}

/// int16x8 transposed-convolution accumulators (zero points 0): every input pixel
/// scattered through the OHWI weights into 64-bit sums. `acc` holds the whole
/// output and is overwritten.
pub fn transpose_conv_acc_i16(input: &[i16], in_c: usize, w: &[i8], out_c: usize, g: &crate::conv::Window, acc: &mut [i64]) {
    let taps = g.k_h * g.k_w;
    acc.fill(0);
    crate::conv::transpose_scatter(g, |ip, op, tap| {
        let px = &input[ip * in_c..][..in_c];
        for (oc, ov) in acc[op * out_c..][..out_c].iter_mut().enumerate() {
            let wr = &w[(oc * taps + tap) * in_c..][..in_c];
            *ov += px.iter().zip(wr).map(|(&a, &b)| i64::from(i32::from(a) * i32::from(b))).sum::<i64>();
        }
    });
}

/// Quantizes floats asymmetrically to [-128, 127] as TFLite's hybrid convolutions
/// do: the range includes 0, the zero point is nudged onto the grid. Returns
/// (scaling factor, zero point).
pub fn asymmetric_quantize(x: &[f32], out: &mut [i8]) -> (f32, i32) {
    let (qmin, qmax) = (-128.0f64, 127.0f64);
    let (lo, hi) = x.iter().fold((0.0f32, 0.0f32), |(l, h), &v| (l.min(v), h.max(v)));
    let (rmin, rmax) = (f64::from(lo), f64::from(hi));
    if rmin == rmax {
        out.fill(0);
        return (1.0, 0);
    }
    let scale = (rmax - rmin) / (qmax - qmin);
    let (zp_from_min, zp_from_max) = (qmin - rmin / scale, qmax - rmax / scale);
    let (err_min, err_max) = (qmin.abs() + (rmin / scale).abs(), qmax.abs() + (rmax / scale).abs());
    let zp_f = if err_min < err_max { zp_from_min } else { zp_from_max };
    let zp = if zp_f <= qmin {
        -128
    } else if zp_f >= qmax {
        127
    } else {
        zp_f.round() as i32
    };
    let scale_f = scale as f32;
    let inv = 1.0f32 / scale_f;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = ((zp as f32 + v * inv).round() as i32).clamp(-128, 127) as i8;
    }
    (scale_f, zp)
}

/// Quantizes floats symmetrically to [-127, 127] as TFLite's hybrid kernels do and
/// returns the scaling factor (`max |x| / 127`; 1 when all values are zero).
pub fn symmetric_quantize(x: &[f32], out: &mut [i8]) -> f32 {
    let range = x.iter().fold(0.0f32, |m, &v| m.max(v.abs()));
    if range == 0.0 {
        out.fill(0);
        return 1.0;
    }
    let inv = 127.0 / range;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = ((v * inv).round() as i32).clamp(-127, 127) as i8;
    }
    range / 127.0
}

/// How an accumulator is scaled by a quantized multiplier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// TFLite's two roundings: a rounding doubling high multiply, then a rounding
    /// shift ([`multiply_by_quantized_multiplier`]).
    Double,
    /// One rounding of the exact product, half up
    /// ([`multiply_by_quantized_multiplier_i64_full`]): LiteRT 2.3.0's uint8
    /// fully-connected layers (measured: the two differ where the double rounding
    /// meets an exact half).
    Single,
}

impl Requant {
    /// [`Requant::apply`] with the given rounding.
    #[inline(always)]
    pub fn apply_rounded(&self, acc: i32, c: usize, rounding: Rounding) -> i32 {
        match rounding {
            Rounding::Double => self.apply(acc, c),
            Rounding::Single => {
                let i = if self.multiplier.len() == 1 { 0 } else { c };
                (multiply_by_quantized_multiplier_i64_full(i64::from(acc), self.multiplier[i], self.shift[i]) + self.out_zp).clamp(self.min, self.max)
            }
        }
    }
}

simd_fn! {
    /// Integer fully-connected: `out[b, o] = requant(bias[o] + sum_i (x - in_zp) * (w[o, i] - w_zp))`.
    pub fn fully_connected_i8(input: &[i8], w: &[i8], bias: Option<&[i32]>, batch: usize, in_n: usize, out_n: usize, in_zp: i32, w_zp: i32, rq: &Requant, rounding: Rounding, out: &mut [i8]) {
        for b in 0..batch {
            let x = &input[b * in_n..][..in_n];
            for o in 0..out_n {
                let wr = &w[o * in_n..][..in_n];
                let mut s = bias.map_or(0, |bv| bv[o]);
                for (&xv, &wv) in x.iter().zip(wr) {
                    s += (i32::from(xv) - in_zp) * (i32::from(wv) - w_zp);
                }
                out[b * out_n + o] = rq.apply_rounded(s, o, rounding) as i8;
            }
        }
    }
}

/// `x * multiplier * 2^(shift - 31)` for a 64-bit accumulator as LiteRT's int16x8
/// convolutions compute it: the multiplier first rounded to 16 bits, then one
/// rounding right shift (half up). `shift` is at most 7 (checked at prepare).
#[inline(always)]
pub fn multiply_by_quantized_multiplier_i64(x: i64, multiplier: i32, shift: i32) -> i32 {
    let reduced = if multiplier < 0x7FFF_0000 { (multiplier + (1 << 15)) >> 16 } else { 0x7FFF };
    let total = (15 - shift).clamp(1, 100);
    // i128: a hostile model's accumulators must not overflow; real ones fit in 48 bits.
    ((i128::from(x) * i128::from(reduced) + (1i128 << (total - 1))) >> total) as i32
}

/// The same product as LiteRT's int16x8 fully-connected computes it: the full
/// 31-bit multiplier, one rounding right shift (half up), saturated to int32.
/// The two differ by one LSB on some inputs; which kernel uses which was
/// measured against LiteRT 2.3.0.
#[inline(always)]
pub fn multiply_by_quantized_multiplier_i64_full(x: i64, multiplier: i32, shift: i32) -> i32 {
    let total = (31 - shift).clamp(1, 100);
    let r = (i128::from(x) * i128::from(multiplier) + (1i128 << (total - 1))) >> total;
    r.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32
}

/// Requantization of int16x8 accumulators (int64, zero points 0) with `mul`, one
/// of the two 64-bit products above.
#[inline(always)]
pub fn requant_i64(rq: &Requant, acc: i64, c: usize, mul: fn(i64, i32, i32) -> i32) -> i16 {
    let i = if rq.multiplier.len() == 1 { 0 } else { c };
    (mul(acc, rq.multiplier[i], rq.shift[i]) + rq.out_zp).clamp(rq.min, rq.max) as i16
}

/// int16x8 convolution (int16 activations, int8 weights, int64 bias, zero points 0)
/// with LiteRT's reference numerics: a 64-bit accumulator per output, taps outside
/// the input skipped. Regular (OHWI weights) or depthwise (`q.depth_multiplier > 0`).
/// `acc` is scratch of `q.out_c` accumulators (passed in so runs do not allocate).
pub fn conv_i16(input: &[i16], w: &[i8], bias: Option<&[i64]>, q: &QConv, out: &mut [i16], acc: &mut [i64]) {
    let g = &q.g;
    let (in_c, out_c) = (q.in_c, q.out_c);
    let acc = &mut acc[..out_c];
    for n in 0..g.batch {
        for oy in 0..g.out_h {
            for ox in 0..g.out_w {
                acc.iter_mut().enumerate().for_each(|(o, a)| *a = bias.map_or(0, |b| b[o]));
                for ky in 0..g.k_h {
                    let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
                    for kx in 0..g.k_w {
                        let Some(ix) = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w) else { continue };
                        let px = &input[((n * g.in_h + iy) * g.in_w + ix) * in_c..][..in_c];
                        if q.depth_multiplier > 0 {
                            let m = q.depth_multiplier;
                            let wr = &w[(ky * g.k_w + kx) * out_c..][..out_c];
                            for (o, a) in acc.iter_mut().enumerate() {
                                *a += i64::from(i32::from(px[o / m]) * i32::from(wr[o]));
                            }
                        } else {
                            for (o, a) in acc.iter_mut().enumerate() {
                                let wr = &w[((o * g.k_h + ky) * g.k_w + kx) * in_c..][..in_c];
                                // One tap's in_c products fit in i32 for in_c < 2^16.
                                let s: i64 = px.iter().zip(wr).map(|(&x, &wv)| i64::from(i32::from(x) * i32::from(wv))).sum();
                                *a += s;
                            }
                        }
                    }
                }
                let o = &mut out[((n * g.out_h + oy) * g.out_w + ox) * out_c..][..out_c];
                for (c, (ov, &a)) in o.iter_mut().zip(acc.iter()).enumerate() {
                    *ov = requant_i64(&q.rq, a, c, multiply_by_quantized_multiplier_i64);
                }
            }
        }
    }
}

/// int16x8 fully-connected: `out[b, o] = requant(bias[o] + sum_i x[b, i] * w[o, i])`
/// with a 64-bit accumulator (zero points 0).
#[allow(clippy::too_many_arguments)]
pub fn fully_connected_i16(input: &[i16], w: &[i8], bias: Option<&[i64]>, batch: usize, in_n: usize, out_n: usize, rq: &Requant, out: &mut [i16]) {
    for b in 0..batch {
        let x = &input[b * in_n..][..in_n];
        for o in 0..out_n {
            let wr = &w[o * in_n..][..in_n];
            let s: i64 = x.iter().zip(wr).map(|(&xv, &wv)| i64::from(i32::from(xv) * i32::from(wv))).sum();
            out[b * out_n + o] = requant_i64(rq, s.wrapping_add(bias.map_or(0, |bv| bv[o])), o, multiply_by_quantized_multiplier_i64_full);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_multiplier_matches_multiply_by_quantized_multiplier() {
        let mut seed = 3u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 32) as u32 as i32
        };
        for _ in 0..200_000 {
            let real = f64::from(next().unsigned_abs() % 1_000_000 + 1) * 1e-6 * [1e-4, 0.01, 1.0, 30.0][next().unsigned_abs() as usize % 4];
            let (m, shift) = quantize_multiplier(real);
            let x = if next() % 3 == 0 { next() } else { next() % 70_000 };
            let x = if shift > 0 { x >> shift } else { x };
            assert_eq!(Scale::new(real).apply(x), multiply_by_quantized_multiplier(x, m, shift), "x {x} real {real}");
        }
    }

    #[test]
    fn vectorized_quantize_rounds_like_std_round() {
        crate::level::each(|_| {
            let mut x: Vec<f32> = (-4000..4000).map(|i| i as f32 * 0.25).collect();
            x.extend([0.49999997, -0.49999997, 0.5, -0.5, 1.5, -2.5, 126.5, -128.5, 1e9, -1e9, 8_388_609.0, f32::INFINITY, f32::NEG_INFINITY]);
            for &scale in &[1.0f32, 0.37, 3.0] {
                let mut got = vec![0i8; x.len()];
                quantize_f32_i8(&x, scale, 3, &mut got);
                let mut wide = vec![0i16; x.len()];
                quantize_f32_i16(&x, scale, -7, &mut wide);
                for (i, &v) in x.iter().enumerate() {
                    let r = (v / scale).round();
                    assert_eq!(i32::from(got[i]), (r as i32).saturating_add(3).clamp(-128, 127), "{v} / {scale}");
                    assert_eq!(i32::from(wide[i]), (r as i32).saturating_sub(7).clamp(-32768, 32767), "{v} / {scale}");
                }
            }
        });
    }

    /// NaN and zero points near the ends of i32 (which once made the unchecked
    /// float-to-int conversion out of range) give clamped values, at every level.
    #[test]
    fn quantize_is_defined_for_any_zero_point_and_nan() {
        crate::level::each(|_| {
            let x = [f32::NAN, 0.0, 1e30, -1e30, 5.0];
            for zp in [i32::MIN, i32::MIN + 1, -(1 << 23) - 5, -200, 0, 300, (1 << 23) + 5, i32::MAX - 1, i32::MAX] {
                let mut q = [0i8; 5];
                quantize_f32_i8(&x, 1.0, zp, &mut q);
                assert_eq!(q[0], -128, "NaN, zp {zp}");
                let want = if zp < -200 {
                    -128
                } else if zp > 200 {
                    127
                } else {
                    (zp.clamp(-128, 127)) as i8
                };
                assert_eq!(q[1], want, "0.0, zp {zp}");
                let mut w = [0i16; 5];
                quantize_f32_i16(&x, 1.0, zp, &mut w);
                assert_eq!((w[2], w[3]), (32767, -32768), "zp {zp}");
            }
        });
    }

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

    #[test]
    fn int64_requant_rounds_like_tflite() {
        let (m, s) = quantize_multiplier(0.5);
        for mul in [multiply_by_quantized_multiplier_i64, multiply_by_quantized_multiplier_i64_full] {
            // x * 0.5 with one rounding: halves round up.
            assert_eq!(mul(3, m, s), 2);
            assert_eq!(mul(-3, m, s), -1);
            assert_eq!(mul(-5, m, s), -2);
            assert_eq!(mul(1 << 40, m, s - 10), 1 << 29); // 2^40 * 2^-11
        }
        assert_eq!(multiply_by_quantized_multiplier_i64_full(1 << 40, m, s), i32::MAX);
        // The 16-bit reduction loses precision the full multiplier keeps.
        let (m, s) = quantize_multiplier(0.300_001);
        assert_eq!(multiply_by_quantized_multiplier_i64(1_000_000, m, s), 300_003);
        assert_eq!(multiply_by_quantized_multiplier_i64_full(1_000_000, m, s), 300_001);
    }
}

/// `round(x / scale)` rounded half away from zero, exactly as `std::round`, in a
/// form that vectorizes (no libm call): the fraction `x - trunc(x)` is exact.
#[inline(always)]
fn round_div(x: f32, scale: f32) -> f32 {
    let r = x / scale;
    let t = r.trunc();
    if (r - t).abs() >= 0.5 {
        t + 1.0f32.copysign(r)
    } else {
        t
    }
}

/// `clamp(round(x / scale) + zp, lo, hi)`. The rounded value is clamped in float
/// first (NaN becomes the low end, as the x86 conversion LiteRT relies on gives),
/// so the conversion to an integer needs no saturation checks and vectorizes.
#[inline(always)]
fn quantize_one(x: f32, scale: f32, zp: i32, lo: i32, hi: i32) -> i32 {
    // Zero points of real tensors are tiny; bounding them (a loop invariant) keeps
    // lo - zp and hi - zp exact in f32 (below 2^24) and so inside i32 for any caller.
    let zp = zp.clamp(-(1 << 23), 1 << 23);
    let r = round_div(x, scale).max((lo - zp) as f32).min((hi - zp) as f32);
    // SAFETY: after max/min, `r` is a finite integral value between lo - zp and
    // hi - zp (max returns the non-NaN operand), whose magnitudes are below
    // 2^23 + 2^16, so it is within i32.
    unsafe { r.to_int_unchecked::<i32>() + zp }
}

simd_fn! {
    /// QUANTIZE float to int8: `clamp(round(x / scale) + zp)`.
    pub fn quantize_f32_i8(x: &[f32], scale: f32, zp: i32, out: &mut [i8]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = quantize_one(v, scale, zp, -128, 127) as i8;
        }
    }
}

simd_fn! {
    /// QUANTIZE float to uint8: `clamp(round(x / scale) + zp)`.
    pub fn quantize_f32_u8(x: &[f32], scale: f32, zp: i32, out: &mut [u8]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = quantize_one(v, scale, zp, 0, 255) as u8;
        }
    }
}

simd_fn! {
    /// QUANTIZE float to int16: `clamp(round(x / scale) + zp)`.
    pub fn quantize_f32_i16(x: &[f32], scale: f32, zp: i32, out: &mut [i16]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = quantize_one(v, scale, zp, -32768, 32767) as i16;
        }
    }
}

/// TFLite's `MultiplyByQuantizedMultiplier` with the shift split into its left and
/// right parts, written without branches on the data so that loops over it
/// vectorize: the rounding high multiply as `(x * m + 2^30) >> 31` (the same value
/// as its nudge-and-truncate form) and the rounding right shift half away from zero.
#[inline(always)]
pub fn mbqm_split(x: i32, multiplier: i32, left: u32, right: u32) -> i32 {
    let x = x.wrapping_shl(left);
    let high = ((i64::from(x) * i64::from(multiplier) + (1 << 30)) >> 31) as i32;
    let mask = ((1i64 << right) - 1) as i32;
    let threshold = (mask >> 1) + i32::from(high < 0);
    (high >> right) + i32::from((high & mask) > threshold)
}

/// A fixed-point multiplier with its shift split for [`mbqm_split`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Fixed-point multiplier.
    pub multiplier: i32,
    /// Left shift (the positive part of the exponent).
    pub left: u32,
    /// Right shift (the negative part).
    pub right: u32,
}

impl Scale {
    /// From a real multiplier, as `QuantizeMultiplier` splits it.
    pub fn new(real: f64) -> Scale {
        let (multiplier, shift) = quantize_multiplier(real);
        Scale { multiplier, left: shift.max(0) as u32, right: (-shift).max(0) as u32 }
    }

    /// `x` rescaled.
    #[inline(always)]
    pub fn apply(self, x: i32) -> i32 {
        mbqm_split(x, self.multiplier, self.left, self.right)
    }
}

/// Quantized ADD / SUB of equal-shaped operands as TFLite's integer kernels: both
/// inputs shifted left by `left_shift` and rescaled to twice the larger input
/// scale, combined, rescaled to the output, clamped.
#[derive(Debug, Clone, Copy)]
pub struct AddSub {
    /// Input zero points.
    pub zp: (i32, i32),
    /// Output zero point.
    pub out_zp: i32,
    /// 20 for 8-bit types, 15 for int16.
    pub left_shift: u32,
    /// Input rescales.
    pub scale: (Scale, Scale),
    /// Output rescale.
    pub out_scale: Scale,
    /// -1 for SUB.
    pub sign: i32,
    /// Clamp range.
    pub min: i32,
    /// Upper clamp.
    pub max: i32,
}

impl AddSub {
    /// One output value.
    #[inline(always)]
    pub fn apply(&self, x: i32, y: i32) -> i32 {
        let x = self.scale.0.apply((x - self.zp.0) << self.left_shift);
        let y = self.scale.1.apply((y - self.zp.1) << self.left_shift);
        (self.out_scale.apply(x + self.sign * y) + self.out_zp).clamp(self.min, self.max)
    }
}

/// [`AddSub`] over int8 operands of equal length.
pub fn add_sub_i8(a: &[i8], b: &[i8], p: &AddSub, out: &mut [i8]) {
    #[cfg(target_arch = "x86_64")]
    if !crate::level::has_avx512f() && crate::level::has_avx2_fma() {
        let bytes = |v: &[i8]| -> &[u8] {
            // SAFETY: i8 and u8 have the same size, alignment and valid bit patterns.
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len()) }
        };
        // SAFETY: i8 and u8 have the same size, alignment and valid bit patterns.
        let out = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, out.len()) };
        // SAFETY: AVX2 is present (checked just above).
        unsafe { crate::qgemm::x86_64::add_sub_8bit_avx2::<false>(bytes(a), bytes(b), p, out) };
        return;
    }
    add_sub_i8_simd(a, b, p, out)
}

simd_fn! {
    /// [`add_sub_i8`] in plain Rust, compiled per vector width (AVX-512 CPUs
    /// keep it: their 64-bit lane shifts vectorize it).
    pub fn add_sub_i8_simd(a: &[i8], b: &[i8], p: &AddSub, out: &mut [i8]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = p.apply(i32::from(x), i32::from(y)) as i8;
        }
    }
}

/// [`AddSub`] over uint8 operands of equal length.
pub fn add_sub_u8(a: &[u8], b: &[u8], p: &AddSub, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if !crate::level::has_avx512f() && crate::level::has_avx2_fma() {
        // SAFETY: AVX2 is present (checked just above).
        unsafe { crate::qgemm::x86_64::add_sub_8bit_avx2::<true>(a, b, p, out) };
        return;
    }
    add_sub_u8_simd(a, b, p, out)
}

simd_fn! {
    /// [`add_sub_u8`] in plain Rust, compiled per vector width.
    pub fn add_sub_u8_simd(a: &[u8], b: &[u8], p: &AddSub, out: &mut [u8]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = p.apply(i32::from(x), i32::from(y)) as u8;
        }
    }
}

simd_fn! {
    /// [`AddSub`] over int16 operands of equal length.
    pub fn add_sub_i16(a: &[i16], b: &[i16], p: &AddSub, out: &mut [i16]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = p.apply(i32::from(x), i32::from(y)) as i16;
        }
    }
}
