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
    // LiteRT takes the range's width in single precision before dividing in double
    // (checked against its hybrid TRANSPOSE_CONV, whose float sums show a last-bit
    // scale difference).
    let scale = f64::from(hi - lo) / (qmax - qmin);
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
    // The inverse in double, then narrowed, as LiteRT writes it.
    let inv = (1.0f64 / f64::from(scale_f)) as f32;
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
    /// fully-connected layers and its int8 ones with a weight scale per output row
    /// (measured: the two differ where the double rounding meets an exact half).
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    if crate::level::has_avx2_fma() {
        let bytes = |v: &[i8]| -> &[u8] {
            // SAFETY: i8 and u8 have the same size, alignment and valid bit patterns.
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len()) }
        };
        // SAFETY: i8 and u8 have the same size, alignment and valid bit patterns.
        let out = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, out.len()) };
        if crate::level::has_avx512f() {
            // SAFETY: AVX-512F is present (checked just above).
            unsafe { crate::qgemm::vnni_add_sub_8bit::<false>(bytes(a), bytes(b), p, out) };
            return;
        }
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
    if crate::level::has_avx512f() {
        // SAFETY: AVX-512F is present (checked just above).
        unsafe { crate::qgemm::vnni_add_sub_8bit::<true>(a, b, p, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::level::has_avx2_fma() {
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

/// The integer element types of quantized tensors (int8, uint8, int16): widened
/// to `i32` for arithmetic, narrowed back once clamped to their range.
pub trait QuantInt: Copy {
    /// Smallest value.
    const MIN: i32;
    /// Largest value.
    const MAX: i32;
    /// The value as `i32`.
    fn widen(self) -> i32;
    /// `v` (within [`QuantInt::MIN`], [`QuantInt::MAX`]) as this type.
    fn narrow(v: i32) -> Self;
}

macro_rules! quant_int {
    ($($t:ty),*) => {$(
        impl QuantInt for $t {
            const MIN: i32 = <$t>::MIN as i32;
            const MAX: i32 = <$t>::MAX as i32;
            #[inline(always)]
            fn widen(self) -> i32 {
                i32::from(self)
            }
            #[inline(always)]
            fn narrow(v: i32) -> Self {
                v as $t
            }
        }
    )*};
}
quant_int!(i8, u8, i16);

/// The range a fused activation clamps to, in the output's quantized domain
/// (`zp + round(bound / scale)` for each finite bound of `clamp`, within `(qmin,
/// qmax)`), as LiteRT computes it. Saturating: an extreme scale or zero point
/// gives a range, not an overflow; an inverted range (a zero point at the edge of
/// the type) collapses to one value, since callers clamp with it.
pub fn activation_range(clamp: crate::Clamp, scale: f32, zp: i32, (qmin, qmax): (i32, i32)) -> (i32, i32) {
    let q = |f: f32| zp.saturating_add((f / scale).round() as i32);
    let lo = if clamp.min.is_finite() { qmin.max(q(clamp.min)) } else { qmin };
    let hi = if clamp.max.is_finite() { qmax.min(q(clamp.max)) } else { qmax };
    (lo.min(qmax), hi.max(lo.min(qmax)))
}

impl Requant {
    /// Requantization of accumulators scaled `in_scale * w_scales[c]` (one weight
    /// scale, or one per channel) onto an output of `out_scale` and `out_zp`,
    /// clamped to `range`. Each real multiplier is formed in double precision.
    pub fn per_channel(in_scale: f32, w_scales: &[f32], out_scale: f32, out_zp: i32, (min, max): (i32, i32)) -> Requant {
        let (multiplier, shift) = w_scales.iter().map(|&ws| quantize_multiplier(f64::from(in_scale) * f64::from(ws) / f64::from(out_scale))).unzip();
        Requant { multiplier, shift, out_zp, min, max }
    }

    /// Moves the output zero point and clamp range by -128: uint8 runs through the
    /// int8 kernels with its values flipped to `u - 128` ([`flip_u8_to_i8`]).
    pub fn shift_to_signed(&mut self) {
        self.out_zp -= 128;
        self.min -= 128;
        self.max -= 128;
    }
}

/// uint8 to int8 by flipping the top bit: `u ^ 0x80` is `u - 128` as an int8.
pub fn flip_u8_to_i8(src: &[u8], dst: &mut [i8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = (s ^ 0x80) as i8;
    }
}

/// Flips the top bit of every byte in place: int8 results back to uint8. Never
/// inlined: the runtime's closures that call it are optimized for size in the
/// shipped library, and the loop keeps its vector form here.
#[inline(never)]
pub fn flip_sign_bits(x: &mut [u8]) {
    x.iter_mut().for_each(|b| *b ^= 0x80);
}

/// Integer-to-integer QUANTIZE: `clamp((x - in_zp) * multiplier * 2^(shift - 31) + out_zp)`
/// to the output type's range, with TFLite's double rounding.
pub fn requantize<I: QuantInt, O: QuantInt>(x: &[I], in_zp: i32, multiplier: i32, shift: i32, out_zp: i32, out: &mut [O]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = O::narrow((multiply_by_quantized_multiplier(v.widen() - in_zp, multiplier, shift) + out_zp).clamp(O::MIN, O::MAX));
    }
}

/// DEQUANTIZE: `scale[c] * (x - zero_point[c])`, with one scale and zero point, or
/// one per channel of the quantized dimension (`inner` elements per channel step).
pub fn dequantize<T: Copy + Into<i64>>(x: &[T], scale: &[f32], zero_point: &[i64], inner: usize, out: &mut [f32]) {
    let channels = scale.len();
    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        let c = if channels > 1 { (i / inner) % channels } else { 0 };
        *o = scale[c] * (v.into() - zero_point[c]) as f32;
    }
}

simd_fn! {
    /// [`dequantize`] of int8 with one scale and zero point, built per vector
    /// level (the per-channel index of the general loop keeps it scalar): the
    /// same `scale * (x - zp)`, the difference exact in int32 and in single
    /// precision, so the results are the general loop's bits.
    pub fn dequantize_i8(x: &[i8], scale: f32, zero_point: i32, out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = scale * (i32::from(v) - zero_point) as f32;
        }
    }
}

simd_fn! {
    /// [`dequantize_i8`] of uint8.
    pub fn dequantize_u8(x: &[u8], scale: f32, zero_point: i32, out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = scale * (i32::from(v) - zero_point) as f32;
        }
    }
}

/// A uint8 requantization in single precision, as LiteRT's uint8 CONCATENATION
/// rescales inputs whose quantization differs from the output's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RescaleU8 {
    /// `in_scale / out_scale`.
    pub scale: f32,
    /// `-in_zp * scale`.
    pub bias: f32,
    /// Output zero point.
    pub out_zp: i32,
}

impl RescaleU8 {
    /// From the input's and the output's quantization (the reciprocal of the
    /// output scale taken first, as LiteRT does).
    pub fn new(in_scale: f32, in_zp: i64, out_scale: f32, out_zp: i32) -> RescaleU8 {
        let scale = in_scale * (1.0 / out_scale);
        RescaleU8 { scale, bias: -(in_zp as f32) * scale, out_zp }
    }

    /// `dst = clamp(round(src * scale + bias) + out_zp, 0, 255)`.
    pub fn apply(&self, src: &[u8], dst: &mut [u8]) {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = (((f32::from(v) * self.scale + self.bias).round() as i32) + self.out_zp).clamp(0, 255) as u8;
        }
    }
}

/// Integer TRANSPOSE_CONV with int8 output: [`transpose_conv_acc_i8`], bias, requantization.
#[allow(clippy::too_many_arguments)]
pub fn transpose_conv_i8(
    input: &[i8],
    in_c: usize,
    w: &[i8],
    out_c: usize,
    g: &crate::conv::Window,
    in_zp: i32,
    w_zp: i32,
    bias: Option<&[i32]>,
    rq: &Requant,
    acc: &mut [i32],
    out: &mut [i8],
) {
    transpose_conv_acc_i8(input, in_c, w, out_c, g, in_zp, w_zp, acc);
    for (i, (o, &a)) in out.iter_mut().zip(acc.iter()).enumerate() {
        let c = i % out_c;
        *o = rq.apply(a.wrapping_add(bias.map_or(0, |b| b[c])), c) as i8;
    }
}

/// int16x8 TRANSPOSE_CONV: [`transpose_conv_acc_i16`], int64 bias, requantization
/// with the 16-bit reduced multiplier ([`multiply_by_quantized_multiplier_i64`]).
#[allow(clippy::too_many_arguments)]
pub fn transpose_conv_i16(
    input: &[i16],
    in_c: usize,
    w: &[i8],
    out_c: usize,
    g: &crate::conv::Window,
    bias: Option<&[i64]>,
    rq: &Requant,
    acc: &mut [i64],
    out: &mut [i16],
) {
    transpose_conv_acc_i16(input, in_c, w, out_c, g, acc);
    for (i, (o, &a)) in out.iter_mut().zip(acc.iter()).enumerate() {
        let c = i % out_c;
        *o = requant_i64(rq, a.wrapping_add(bias.map_or(0, |b| b[c])), c, multiply_by_quantized_multiplier_i64);
    }
}

#[cfg(test)]
mod definition_tests {
    use super::*;
    use crate::testutil::{mbqm_ref, multiplier, Rng};
    use crate::Clamp;

    #[test]
    fn activation_range_matches_the_definition() {
        let mut rng = Rng::new(111);
        for round in 0..20_000 {
            let (qmin, qmax) = [(-128, 127), (0, 255), (-32768, 32767)][rng.size(0, 2)];
            // Ordinary scales, extreme ones, and zero points far outside the type.
            let scale = if rng.one_in(5) { [1e-30f32, 1e30, f32::MIN_POSITIVE][rng.size(0, 2)] } else { rng.scale(-4.0, 1.0) };
            let zp =
                if rng.one_in(5) { [i32::MIN, i32::MAX, qmin, qmax][rng.size(0, 3)] } else { rng.range(i64::from(qmin) - 300, i64::from(qmax) + 300) as i32 };
            let clamp = [Clamp::NONE, Clamp::RELU, Clamp::RELU6, Clamp::RELU_N1_TO_1][rng.size(0, 3)];
            let (lo, hi) = activation_range(clamp, scale, zp, (qmin, qmax));
            // zp + round(bound / scale), saturated to 32 bits; bounds within the type;
            // an inverted range collapses onto its low end.
            let q = |f: f32| (i64::from(zp) + ((f / scale).round() as i32) as i64).clamp(i64::from(i32::MIN), i64::from(i32::MAX));
            let mut want_lo = if clamp.min.is_finite() { q(clamp.min).max(i64::from(qmin)) } else { i64::from(qmin) };
            let mut want_hi = if clamp.max.is_finite() { q(clamp.max).min(i64::from(qmax)) } else { i64::from(qmax) };
            want_lo = want_lo.min(i64::from(qmax));
            if want_hi < want_lo {
                want_hi = want_lo;
            }
            assert_eq!((i64::from(lo), i64::from(hi)), (want_lo, want_hi), "round {round} {clamp:?} scale {scale} zp {zp}");
            assert!(qmin <= lo && lo <= hi && hi <= qmax);
        }
    }

    #[test]
    fn per_channel_requantization_matches_the_definition() {
        let mut rng = Rng::new(112);
        for round in 0..500 {
            let channels = rng.dim();
            let in_scale = rng.scale(-3.0, 0.0);
            let w_scales: Vec<f32> = (0..channels).map(|_| rng.scale(-4.0, 0.0)).collect();
            let out_scale = rng.scale(-3.0, 0.0);
            let out_zp = rng.range(-128, 127) as i32;
            let range = (rng.range(-128, 0) as i32, rng.range(0, 127) as i32);
            let rq = Requant::per_channel(in_scale, &w_scales, out_scale, out_zp, range);
            for (c, &ws) in w_scales.iter().enumerate() {
                let real = f64::from(in_scale) * f64::from(ws) / f64::from(out_scale);
                let (m, s) = (rq.multiplier[c], rq.shift[c]);
                // The multiplier is the real one in Q0.31 times 2^shift, to within rounding.
                let back = f64::from(m) * 2f64.powi(s - 31);
                assert!((back / real - 1.0).abs() < 1e-9, "round {round}: {back} vs {real}");
                for _ in 0..20 {
                    let acc = rng.range(-(1 << 24), 1 << 24) as i32;
                    let want = (i64::from(mbqm_ref(acc, m, s)) + i64::from(out_zp)).clamp(i64::from(range.0), i64::from(range.1));
                    assert_eq!(i64::from(rq.apply(acc, c)), want, "round {round} channel {c}");
                }
            }
            let mut shifted = rq.clone();
            shifted.shift_to_signed();
            assert_eq!((shifted.out_zp, shifted.min, shifted.max), (out_zp - 128, range.0 - 128, range.1 - 128));
        }
    }

    #[test]
    fn sign_flips_are_a_shift_by_128() {
        let src: Vec<u8> = (0..=255).collect();
        let mut dst = vec![0i8; 256];
        flip_u8_to_i8(&src, &mut dst);
        for (&u, &i) in src.iter().zip(&dst) {
            assert_eq!(i32::from(i), i32::from(u) - 128);
        }
        let mut back: Vec<u8> = dst.iter().map(|&v| v as u8).collect();
        flip_sign_bits(&mut back);
        assert_eq!(back, src);
    }

    fn requantize_case<I: QuantInt, O: QuantInt>(rng: &mut Rng, from: fn(i64) -> I, zero: O) {
        for round in 0..300 {
            let (lo, hi) = (i64::from(I::MIN), i64::from(I::MAX));
            let len = rng.dim() * rng.dim();
            let x = rng.ints(len, lo, hi);
            let xt: Vec<I> = x.iter().map(|&v| from(v)).collect();
            let in_zp = if rng.one_in(4) { [lo, hi][rng.size(0, 1)] } else { rng.range(lo, hi) } as i32;
            let out_zp = rng.range(i64::from(O::MIN) - 50, i64::from(O::MAX) + 50) as i32;
            let (m, s) = multiplier(rng);
            // Keep (x - zp) * 2^shift within 32 bits, as real rescales do.
            let s = s.min(14);
            let mut got = vec![zero; len];
            requantize(&xt, in_zp, m, s, out_zp, &mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let want = (i64::from(mbqm_ref(v as i32 - in_zp, m, s)) + i64::from(out_zp)).clamp(i64::from(O::MIN), i64::from(O::MAX));
                assert_eq!(i64::from(g.widen()), want, "round {round} {v} zp {in_zp} m {m} s {s}");
            }
        }
    }

    #[test]
    fn integer_requantize_matches_the_definition() {
        let mut rng = Rng::new(113);
        requantize_case::<i8, i8>(&mut rng, |v| v as i8, 0i8);
        requantize_case::<i8, u8>(&mut rng, |v| v as i8, 0u8);
        requantize_case::<u8, i8>(&mut rng, |v| v as u8, 0i8);
        requantize_case::<u8, u8>(&mut rng, |v| v as u8, 0u8);
        requantize_case::<i16, i16>(&mut rng, |v| v as i16, 0i16);
        requantize_case::<i16, i8>(&mut rng, |v| v as i16, 0i8);
        requantize_case::<i8, i16>(&mut rng, |v| v as i8, 0i16);
    }

    /// The per-tensor 8-bit loops give the general loop's bits at every vector
    /// level: every value, lengths around the vector widths, zero points at
    /// and past the ends of the 8-bit ranges.
    #[test]
    fn dequantize_8bit_loops_match_the_general_one() {
        let mut rng = Rng::new(115);
        crate::level::each(|_| {
            for round in 0..200 {
                let n = if round == 0 { 256 } else { rng.size(0, 70) };
                let scale = rng.scale(-4.0, 2.0);
                let zp = [-128, 127, 0, 255, -300, 1 << 20][round % 6];
                let x: Vec<u8> = (0..n).map(|i| if round == 0 { i as u8 } else { rng.bits() as u8 }).collect();
                let xi: Vec<i8> = x.iter().map(|&v| v as i8).collect();
                let (mut want, mut got) = (vec![0.0f32; n], vec![0.0f32; n]);
                dequantize(&x, &[scale], &[zp], 1, &mut want);
                dequantize_u8(&x, scale, zp as i32, &mut got);
                assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "uint8 round {round}");
                dequantize(&xi, &[scale], &[zp], 1, &mut want);
                dequantize_i8(&xi, scale, zp as i32, &mut got);
                assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "int8 round {round}");
            }
        });
    }

    #[test]
    fn dequantize_matches_the_definition() {
        let mut rng = Rng::new(114);
        for round in 0..300 {
            let rank = rng.size(1, 4);
            let shape: Vec<usize> = (0..rank).map(|_| rng.dim().min(9)).collect();
            let axis = rng.size(0, rank - 1);
            let per_channel = rng.one_in(2) && shape[axis] > 1;
            let channels = if per_channel { shape[axis] } else { 1 };
            let scale: Vec<f32> = (0..channels).map(|_| rng.scale(-4.0, 0.0)).collect();
            let zero_point: Vec<i64> = (0..channels).map(|_| rng.range(-200, 200)).collect();
            let n: usize = shape.iter().product();
            let x: Vec<i32> = (0..n).map(|_| if rng.one_in(3) { rng.bits() as i32 } else { rng.range(-128, 255) as i32 }).collect();
            let inner: usize = shape[axis + 1..].iter().product();
            let mut got = vec![0.0f32; n];
            dequantize(&x, &scale, &zero_point, inner, &mut got);
            // Walk the multi-index: the channel is the coordinate along the axis.
            let outer: usize = shape[..axis].iter().product();
            for o in 0..outer {
                for c in 0..shape[axis] {
                    for i in 0..inner {
                        let flat = (o * shape[axis] + c) * inner + i;
                        let ch = if per_channel { c } else { 0 };
                        let want = scale[ch] * (i64::from(x[flat]) - zero_point[ch]) as f32;
                        assert_eq!(got[flat].to_bits(), want.to_bits(), "round {round} {shape:?} axis {axis} element {flat}");
                    }
                }
            }
        }
    }

    #[test]
    fn uint8_rescale_matches_the_definition() {
        let mut rng = Rng::new(115);
        let src: Vec<u8> = (0..=255).collect();
        for round in 0..2000 {
            let (in_scale, in_zp) = (rng.scale(-3.0, 0.0), rng.range(0, 255));
            let (out_scale, out_zp) = (rng.scale(-3.0, 0.0), rng.range(-10, 265) as i32);
            let r = RescaleU8::new(in_scale, in_zp, out_scale, out_zp);
            let mut got = vec![0u8; 256];
            r.apply(&src, &mut got);
            for (&v, &g) in src.iter().zip(&got) {
                // In single precision as LiteRT: the output scale's reciprocal first.
                let s = in_scale * (1.0 / out_scale);
                let want = ((f32::from(v) * s + -(in_zp as f32) * s).round() as i64 + i64::from(out_zp)).clamp(0, 255);
                assert_eq!(i64::from(g), want, "round {round} input {v}");
                // Within a step of the exact requantization.
                let exact = (f64::from(in_scale) * (f64::from(v) - in_zp as f64) / f64::from(out_scale) + f64::from(out_zp)).clamp(0.0, 255.0);
                assert!((want as f64 - exact).abs() <= 0.5 + 1e-3 * exact.abs().max(1.0), "round {round}: {want} vs {exact}");
            }
        }
    }

    /// A random transposed-convolution geometry (the forward window from the
    /// output back onto the input): odd sizes, strides above the kernel size,
    /// padding.
    fn transpose_geometry(rng: &mut Rng) -> crate::conv::Window {
        let (k_h, k_w) = (rng.size(1, 4), rng.size(1, 4));
        let (stride_h, stride_w) = (rng.size(1, 3), rng.size(1, 3));
        let (ih, iw) = (rng.size(1, 6), rng.size(1, 6));
        let (pad_top, pad_left) = (rng.size(0, k_h - 1), rng.size(0, k_w - 1));
        let oh = ((ih - 1) * stride_h + k_h - pad_top).saturating_sub(rng.size(0, pad_top));
        let ow = ((iw - 1) * stride_w + k_w - pad_left).saturating_sub(rng.size(0, pad_left));
        crate::conv::Window {
            batch: rng.size(1, 2),
            in_h: oh.max(1),
            in_w: ow.max(1),
            out_h: ih,
            out_w: iw,
            k_h,
            k_w,
            stride_h,
            stride_w,
            dil_h: 1,
            dil_w: 1,
            pad_top,
            pad_left,
        }
    }

    /// The transposed convolution by its definition, gathered per output: output
    /// (y, x) takes input (iy, ix) through tap (ky, kx) when y = iy * stride + ky - pad.
    fn transpose_sums(g: &crate::conv::Window, in_c: usize, out_c: usize, x: &[i64], w: &[i64], in_zp: i64, w_zp: i64) -> Vec<i64> {
        let mut out = vec![0i64; g.batch * g.in_h * g.in_w * out_c];
        for n in 0..g.batch {
            for y in 0..g.in_h {
                for xo in 0..g.in_w {
                    for oc in 0..out_c {
                        let mut s = 0i64;
                        for ky in 0..g.k_h {
                            for kx in 0..g.k_w {
                                let (ty, tx) = (y + g.pad_top, xo + g.pad_left);
                                if ty < ky || tx < kx || (ty - ky) % g.stride_h != 0 || (tx - kx) % g.stride_w != 0 {
                                    continue;
                                }
                                let (iy, ix) = ((ty - ky) / g.stride_h, (tx - kx) / g.stride_w);
                                if iy >= g.out_h || ix >= g.out_w {
                                    continue;
                                }
                                for ic in 0..in_c {
                                    let xv = x[((n * g.out_h + iy) * g.out_w + ix) * in_c + ic];
                                    let wv = w[((oc * g.k_h + ky) * g.k_w + kx) * in_c + ic];
                                    s += (xv - in_zp) * (wv - w_zp);
                                }
                            }
                        }
                        out[((n * g.in_h + y) * g.in_w + xo) * out_c + oc] = s;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn int8_transpose_conv_matches_the_definition() {
        let mut rng = Rng::new(116);
        for round in 0..300 {
            let g = transpose_geometry(&mut rng);
            let (in_c, out_c) = (rng.dim().min(9), rng.dim().min(9));
            let x = rng.ints(g.batch * g.out_h * g.out_w * in_c, -128, 127);
            let w = rng.ints(out_c * g.k_h * g.k_w * in_c, -127, 127);
            // uint8 arrives shifted into int8 with a weight zero point; int8 has none.
            let in_zp = rng.range(-128, 127) as i32;
            let w_zp = if rng.one_in(2) { 0 } else { rng.range(-128, 127) as i32 };
            let bias: Option<Vec<i32>> = rng.one_in(2).then(|| (0..out_c).map(|_| rng.range(-50_000, 50_000) as i32).collect());
            let w_scales: Vec<f32> = (0..if rng.one_in(2) { 1 } else { out_c }).map(|_| rng.scale(-4.0, -1.0)).collect();
            let rq = Requant::per_channel(rng.scale(-3.0, 0.0), &w_scales, rng.scale(-2.0, 0.0), rng.range(-128, 127) as i32, (-128, 127));
            let (xt, wt): (Vec<i8>, Vec<i8>) = (x.iter().map(|&v| v as i8).collect(), w.iter().map(|&v| v as i8).collect());
            let mut acc = vec![0i32; g.batch * g.in_h * g.in_w * out_c];
            let mut got = vec![0i8; acc.len()];
            transpose_conv_i8(&xt, in_c, &wt, out_c, &g, in_zp, w_zp, bias.as_deref(), &rq, &mut acc, &mut got);
            let sums = transpose_sums(&g, in_c, out_c, &x, &w, i64::from(in_zp), i64::from(w_zp));
            for (i, (&gv, &s)) in got.iter().zip(&sums).enumerate() {
                let c = i % out_c;
                let ch = if w_scales.len() == 1 { 0 } else { c };
                let total = s + bias.as_ref().map_or(0, |b| i64::from(b[c]));
                let want = (i64::from(mbqm_ref(total as i32, rq.multiplier[ch], rq.shift[ch])) + i64::from(rq.out_zp)).clamp(-128, 127);
                assert_eq!(i64::from(gv), want, "round {round} {g:?} element {i}");
            }
        }
    }

    #[test]
    fn int16_transpose_conv_matches_the_definition() {
        let mut rng = Rng::new(117);
        for round in 0..300 {
            let g = transpose_geometry(&mut rng);
            let (in_c, out_c) = (rng.dim().min(9), rng.dim().min(9));
            let x = rng.ints(g.batch * g.out_h * g.out_w * in_c, -32768, 32767);
            let w = rng.ints(out_c * g.k_h * g.k_w * in_c, -127, 127);
            let bias: Option<Vec<i64>> = rng.one_in(2).then(|| (0..out_c).map(|_| rng.range(-(1 << 40), 1 << 40)).collect());
            let w_scales: Vec<f32> = (0..if rng.one_in(2) { 1 } else { out_c }).map(|_| rng.scale(-4.0, -1.0)).collect();
            let mut rq = Requant::per_channel(rng.scale(-5.0, -3.0), &w_scales, rng.scale(-5.0, -3.0), 0, (-32768, 32767));
            // Shifts above 7 are refused at prepare.
            rq.shift.iter_mut().for_each(|s| *s = (*s).min(7));
            let (xt, wt): (Vec<i16>, Vec<i8>) = (x.iter().map(|&v| v as i16).collect(), w.iter().map(|&v| v as i8).collect());
            let mut acc = vec![0i64; g.batch * g.in_h * g.in_w * out_c];
            let mut got = vec![0i16; acc.len()];
            transpose_conv_i16(&xt, in_c, &wt, out_c, &g, bias.as_deref(), &rq, &mut acc, &mut got);
            let sums = transpose_sums(&g, in_c, out_c, &x, &w, 0, 0);
            for (i, (&gv, &s)) in got.iter().zip(&sums).enumerate() {
                let c = i % out_c;
                let ch = if w_scales.len() == 1 { 0 } else { c };
                let total = s + bias.as_ref().map_or(0, |b| b[c]);
                // The multiplier rounded to 15 bits, one rounding (half up) of the
                // 64-bit product, narrowed to 32 bits, clamped.
                let reduced = ((i64::from(rq.multiplier[ch]) + (1 << 15)) >> 16).min(32767);
                let right = 15 - rq.shift[ch];
                let v = (i128::from(total) * i128::from(reduced) + (1i128 << (right - 1))).div_euclid(1i128 << right) as i32;
                let want = i64::from(v).clamp(-32768, 32767);
                assert_eq!(i64::from(gv), want, "round {round} {g:?} element {i}");
            }
        }
    }

    /// A random forward window: strides, dilations, padding, and output sizes
    /// that reach past the input (taps there are skipped).
    fn conv_geometry(rng: &mut Rng) -> crate::conv::Window {
        let (k_h, k_w) = (rng.size(1, 3), rng.size(1, 3));
        let (dil_h, dil_w) = (rng.size(1, 2), rng.size(1, 2));
        let (stride_h, stride_w) = (rng.size(1, 3), rng.size(1, 3));
        let (in_h, in_w) = (rng.size(1, 7), rng.size(1, 7));
        let (pad_top, pad_left) = (rng.size(0, k_h - 1), rng.size(0, k_w - 1));
        crate::conv::Window {
            batch: rng.size(1, 2),
            in_h,
            in_w,
            out_h: rng.size(1, (in_h + pad_top) / stride_h + 1),
            out_w: rng.size(1, (in_w + pad_left) / stride_w + 1),
            k_h,
            k_w,
            stride_h,
            stride_w,
            dil_h,
            dil_w,
            pad_top,
            pad_left,
        }
    }

    /// Convolution sums by the definition: each output (pixel, channel) sums
    /// `(x - in_zp) * (w - w_zp)` over the taps that land inside the input; regular
    /// (OHWI weights, `multiplier` 0) or depthwise (1HW(C*M) weights, output channel
    /// `o` reading input channel `o / multiplier`).
    #[allow(clippy::too_many_arguments)]
    fn conv_sums(g: &crate::conv::Window, in_c: usize, out_c: usize, multiplier: usize, x: &[i64], w: &[i64], in_zp: i64, w_zp: i64) -> Vec<i64> {
        let mut out = Vec::with_capacity(g.batch * g.out_h * g.out_w * out_c);
        for n in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    for o in 0..out_c {
                        let mut s = 0i64;
                        for ky in 0..g.k_h {
                            for kx in 0..g.k_w {
                                let iy = (oy * g.stride_h + ky * g.dil_h) as i64 - g.pad_top as i64;
                                let ix = (ox * g.stride_w + kx * g.dil_w) as i64 - g.pad_left as i64;
                                if iy < 0 || ix < 0 || iy >= g.in_h as i64 || ix >= g.in_w as i64 {
                                    continue;
                                }
                                let px = ((n * g.in_h + iy as usize) * g.in_w + ix as usize) * in_c;
                                match o.checked_div(multiplier) {
                                    None => {
                                        for ic in 0..in_c {
                                            s += (x[px + ic] - in_zp) * (w[((o * g.k_h + ky) * g.k_w + kx) * in_c + ic] - w_zp);
                                        }
                                    }
                                    Some(ic) => s += (x[px + ic] - in_zp) * (w[(ky * g.k_w + kx) * out_c + o] - w_zp),
                                }
                            }
                        }
                        out.push(s);
                    }
                }
            }
        }
        out
    }

    /// `requant(sum + bias)` by the definition.
    fn requant_ref(rq: &Requant, sum: i64, c: usize) -> i64 {
        let i = if rq.multiplier.len() == 1 { 0 } else { c };
        (i64::from(mbqm_ref(sum as i32, rq.multiplier[i], rq.shift[i])) + i64::from(rq.out_zp)).clamp(i64::from(rq.min), i64::from(rq.max))
    }

    /// The 64-bit int16x8 rescale by its definition: the multiplier rounded
    /// (half up) to 15 bits, or kept whole (`full`), then one rounding (half up) of
    /// the product, narrowed to 32 bits (the full one saturating).
    fn requant_i64_ref(rq: &Requant, sum: i64, c: usize, full: bool) -> i64 {
        let i = if rq.multiplier.len() == 1 { 0 } else { c };
        let (m, total) = if full {
            (i64::from(rq.multiplier[i]), 31 - rq.shift[i])
        } else {
            (((i64::from(rq.multiplier[i]) + (1 << 15)) >> 16).min(32767), 15 - rq.shift[i])
        };
        let v = (i128::from(sum) * i128::from(m) + (1i128 << (total - 1))).div_euclid(1i128 << total);
        let v = if full { v.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32 } else { v as i32 };
        (i64::from(v) + i64::from(rq.out_zp)).clamp(i64::from(rq.min), i64::from(rq.max))
    }

    fn random_requant(rng: &mut Rng, channels: usize, range: (i32, i32), out_zp: i32) -> Requant {
        let w_scales: Vec<f32> = (0..if rng.one_in(2) { 1 } else { channels }).map(|_| rng.scale(-4.0, -1.0)).collect();
        let mid = (range.0 + range.1) / 2;
        let clamp =
            if rng.one_in(2) { range } else { (rng.range(i64::from(range.0), i64::from(mid)) as i32, rng.range(i64::from(mid), i64::from(range.1)) as i32) };
        Requant::per_channel(rng.scale(-3.0, 0.0), &w_scales, rng.scale(-2.5, 0.0), out_zp, clamp)
    }

    /// Every int8 convolution kernel against the definition: the direct one (the
    /// patch path, the per-tap path for receptive fields over 4096 or input zero
    /// points outside int8, depthwise with multiplier 1 and above), the packed GEMM
    /// one and the row-tiled depthwise one, at every vector level.
    #[test]
    fn int8_convolutions_match_the_definition() {
        crate::level::each(|_| {
            let mut rng = Rng::new(118);
            for round in 0..250 {
                let g = conv_geometry(&mut rng);
                let multiplier = [0, 0, 1, 2, 3][rng.size(0, 4)];
                let in_c = if multiplier == 0 && rng.one_in(25) { 460 } else { rng.dim().min(9) };
                let out_c = if multiplier == 0 { rng.dim().min(9) } else { in_c * multiplier };
                let x = rng.ints(g.batch * g.in_h * g.in_w * in_c, -128, 127);
                let w = rng.ints(if multiplier == 0 { out_c * g.k_h * g.k_w * in_c } else { g.k_h * g.k_w * out_c }, -127, 127);
                // uint8 arrives shifted into int8 with zero points moved by -128.
                let in_zp = match rng.bits() % 4 {
                    0 => 200,
                    1 => -256,
                    _ => rng.range(-128, 127),
                } as i32;
                let w_zp = if rng.one_in(2) { 0 } else { rng.range(-128, 127) as i32 };
                let bias: Option<Vec<i32>> = rng.one_in(2).then(|| (0..out_c).map(|_| rng.range(-(1 << 20), 1 << 20) as i32).collect());
                let out_zp = rng.range(-128, 127) as i32;
                let rq = random_requant(&mut rng, out_c, (-128, 127), out_zp);
                let q = QConv { g, in_c, out_c, depth_multiplier: multiplier, in_zp, w_zp, rq };
                let (xt, wt): (Vec<i8>, Vec<i8>) = (x.iter().map(|&v| v as i8).collect(), w.iter().map(|&v| v as i8).collect());
                let sums = conv_sums(&g, in_c, out_c, multiplier, &x, &w, i64::from(in_zp), i64::from(w_zp));
                let want: Vec<i64> =
                    sums.iter().enumerate().map(|(i, &s)| requant_ref(&q.rq, s + bias.as_ref().map_or(0, |b| i64::from(b[i % out_c])), i % out_c)).collect();
                let widen = |v: &[i8]| v.iter().map(|&b| i64::from(b)).collect::<Vec<_>>();

                let mut acc = vec![0i32; sums.len()];
                let mut got = vec![0i8; sums.len()];
                conv_i8(&xt, &wt, bias.as_deref(), &q, &mut got, &mut acc);
                assert_eq!(widen(&got), want, "round {round} direct {g:?} in_c {in_c} multiplier {multiplier} in_zp {in_zp} w_zp {w_zp}");

                let bytes: Vec<u8> = xt.iter().map(|&v| v as u8).collect();
                // The packed and tiled kernels take int8 zero points and weights without one.
                if w_zp == 0 && i8::try_from(in_zp).is_ok() && multiplier == 0 {
                    let pk = crate::qgemm::QPacked::new(&wt, out_c, g.k_h * g.k_w * in_c);
                    let mut s = crate::qgemm::ConvScratch::new(&pk, &q.rq);
                    let mut got = vec![0i8; sums.len()];
                    crate::qgemm::conv_i8(&bytes, &pk, bias.as_deref(), &q, &mut got, &mut s);
                    assert_eq!(widen(&got), want, "round {round} packed {g:?} in_c {in_c}");
                }
                if w_zp == 0 && i8::try_from(in_zp).is_ok() && multiplier == 1 {
                    let mut d = crate::qgemm::Depthwise::new(&wt, &q);
                    let mut got = vec![0i8; sums.len()];
                    crate::qgemm::depthwise_i8(&bytes, &mut d, bias.as_deref(), &q, &mut got);
                    assert_eq!(widen(&got), want, "round {round} tiled depthwise {g:?} in_c {in_c}");
                }
            }
        });
    }

    #[test]
    fn int16x8_convolution_matches_the_definition() {
        let mut rng = Rng::new(119);
        for round in 0..250 {
            let g = conv_geometry(&mut rng);
            let multiplier = [0, 0, 1, 2][rng.size(0, 3)];
            let in_c = rng.dim().min(9);
            let out_c = if multiplier == 0 { rng.dim().min(9) } else { in_c * multiplier };
            let x = rng.ints(g.batch * g.in_h * g.in_w * in_c, -32768, 32767);
            let w = rng.ints(if multiplier == 0 { out_c * g.k_h * g.k_w * in_c } else { g.k_h * g.k_w * out_c }, -127, 127);
            let bias: Option<Vec<i64>> = rng.one_in(2).then(|| (0..out_c).map(|_| rng.range(-(1 << 36), 1 << 36)).collect());
            let mut rq = random_requant(&mut rng, out_c, (-32768, 32767), 0);
            rq.shift.iter_mut().for_each(|s| *s = (*s).min(7));
            let q = QConv { g, in_c, out_c, depth_multiplier: multiplier, in_zp: 0, w_zp: 0, rq };
            let (xt, wt): (Vec<i16>, Vec<i8>) = (x.iter().map(|&v| v as i16).collect(), w.iter().map(|&v| v as i8).collect());
            let sums = conv_sums(&g, in_c, out_c, multiplier, &x, &w, 0, 0);
            let mut acc = vec![0i64; out_c];
            let mut got = vec![0i16; sums.len()];
            conv_i16(&xt, &wt, bias.as_deref(), &q, &mut got, &mut acc);
            for (i, (&gv, &s)) in got.iter().zip(&sums).enumerate() {
                let c = i % out_c;
                let want = requant_i64_ref(&q.rq, s + bias.as_ref().map_or(0, |b| b[c]), c, false);
                assert_eq!(i64::from(gv), want, "round {round} {g:?} multiplier {multiplier} element {i}");
            }
        }
    }

    #[test]
    fn fully_connected_kernels_match_the_definition() {
        crate::level::each(|_| {
            let mut rng = Rng::new(120);
            for round in 0..300 {
                let (batch, in_n, out_n) = (rng.dim(), if rng.one_in(8) { rng.size(60, 300) } else { rng.dim() }, rng.dim());
                let w = rng.ints(out_n * in_n, -127, 127);
                let wt: Vec<i8> = w.iter().map(|&v| v as i8).collect();
                let dot = |x: &[i64], b: usize, o: usize, in_zp: i64, w_zp: i64| -> i64 {
                    (0..in_n).map(|i| (x[b * in_n + i] - in_zp) * (w[o * in_n + i] - w_zp)).sum()
                };

                // int8 (and uint8 shifted into int8), both roundings.
                let x = rng.ints(batch * in_n, -128, 127);
                let xt: Vec<i8> = x.iter().map(|&v| v as i8).collect();
                let (in_zp, w_zp) = (rng.range(-256, 127) as i32, if rng.one_in(2) { 0 } else { rng.range(-128, 127) as i32 });
                let bias: Option<Vec<i32>> = rng.one_in(2).then(|| (0..out_n).map(|_| rng.range(-(1 << 20), 1 << 20) as i32).collect());
                let out_zp = rng.range(-128, 127) as i32;
                let rq = random_requant(&mut rng, out_n, (-128, 127), out_zp);
                for rounding in [Rounding::Double, Rounding::Single] {
                    let mut got = vec![0i8; batch * out_n];
                    fully_connected_i8(&xt, &wt, bias.as_deref(), batch, in_n, out_n, in_zp, w_zp, &rq, rounding, &mut got);
                    for (i, &gv) in got.iter().enumerate() {
                        let (b, o) = (i / out_n, i % out_n);
                        let sum = dot(&x, b, o, i64::from(in_zp), i64::from(w_zp)) + bias.as_ref().map_or(0, |bv| i64::from(bv[o]));
                        let want = match rounding {
                            Rounding::Double => requant_ref(&rq, sum, o),
                            Rounding::Single => requant_i64_ref(&rq, sum, o, true),
                        };
                        assert_eq!(i64::from(gv), want, "round {round} {rounding:?} ({b}, {o})");
                    }
                }

                // int16x8: 64-bit sums, the full multiplier.
                let x = rng.ints(batch * in_n, -32768, 32767);
                let xt: Vec<i16> = x.iter().map(|&v| v as i16).collect();
                let bias: Option<Vec<i64>> = rng.one_in(2).then(|| (0..out_n).map(|_| rng.range(-(1 << 36), 1 << 36)).collect());
                let mut rq = random_requant(&mut rng, out_n, (-32768, 32767), 0);
                rq.shift.iter_mut().for_each(|s| *s = (*s).min(7));
                let mut got = vec![0i16; batch * out_n];
                fully_connected_i16(&xt, &wt, bias.as_deref(), batch, in_n, out_n, &rq, &mut got);
                for (i, &gv) in got.iter().enumerate() {
                    let (b, o) = (i / out_n, i % out_n);
                    let sum = dot(&x, b, o, 0, 0) + bias.as_ref().map_or(0, |bv| bv[o]);
                    assert_eq!(i64::from(gv), requant_i64_ref(&rq, sum, o, true), "round {round} int16 ({b}, {o})");
                }
            }
        });
    }

    /// The vectorized equal-shape ADD / SUB against the definition: both inputs
    /// less their zero points, shifted left, rescaled to twice the larger scale,
    /// combined, rescaled to the output.
    #[test]
    fn equal_shape_add_sub_matches_the_definition() {
        crate::level::each(|_| {
            let mut rng = Rng::new(121);
            for round in 0..300 {
                let kind = rng.size(0, 2);
                let (lo, hi) = [(-128i64, 127i64), (0, 255), (-32768, 32767)][kind];
                let int16 = kind == 2;
                let zp = |rng: &mut Rng| if int16 { 0 } else { rng.range(lo, hi) as i32 };
                let (s1, s2) = (rng.scale(-3.0, 0.0), rng.scale(-3.0, 0.0));
                let (z1, z2) = (zp(&mut rng), zp(&mut rng));
                let (so, zo) = (s1.max(s2) * rng.scale(-0.5, 1.0), zp(&mut rng));
                let sub = rng.one_in(2);
                let p = match crate::qelementwise::QBinary::add_sub((s1, z1), (s2, z2), (so, zo), sub, int16, (lo as i32, hi as i32)) {
                    crate::qelementwise::QBinary::AddSub(p) => p,
                    _ => unreachable!("add_sub builds AddSub"),
                };
                let len = rng.dim() * rng.dim() + rng.size(0, 40);
                let (a, b) = (rng.ints(len, lo, hi), rng.ints(len, lo, hi));
                let got: Vec<i64> = match kind {
                    0 => {
                        let mut o = vec![0i8; len];
                        add_sub_i8(&a.iter().map(|&v| v as i8).collect::<Vec<_>>(), &b.iter().map(|&v| v as i8).collect::<Vec<_>>(), &p, &mut o);
                        o.iter().map(|&v| i64::from(v)).collect()
                    }
                    1 => {
                        let mut o = vec![0u8; len];
                        add_sub_u8(&a.iter().map(|&v| v as u8).collect::<Vec<_>>(), &b.iter().map(|&v| v as u8).collect::<Vec<_>>(), &p, &mut o);
                        o.iter().map(|&v| i64::from(v)).collect()
                    }
                    _ => {
                        let mut o = vec![0i16; len];
                        add_sub_i16(&a.iter().map(|&v| v as i16).collect::<Vec<_>>(), &b.iter().map(|&v| v as i16).collect::<Vec<_>>(), &p, &mut o);
                        o.iter().map(|&v| i64::from(v)).collect()
                    }
                };
                let left = if int16 { 15 } else { 20 };
                let twice = 2.0 * f64::from(s1.max(s2));
                let rescale = |v: i64, real: f64| {
                    let (m, e) = quantize_multiplier(real);
                    i64::from(mbqm_ref(v as i32, m, e))
                };
                for (i, &g) in got.iter().enumerate() {
                    let xs = rescale((a[i] - i64::from(z1)) << left, f64::from(s1) / twice);
                    let ys = rescale((b[i] - i64::from(z2)) << left, f64::from(s2) / twice);
                    let sum = if sub { xs - ys } else { xs + ys };
                    let want = (rescale(sum, twice / (f64::from(1u32 << left) * f64::from(so))) + i64::from(zo)).clamp(lo, hi);
                    assert_eq!(g, want, "round {round} kind {kind} element {i}: {} {}", a[i], b[i]);
                }
            }
        });
    }
}
