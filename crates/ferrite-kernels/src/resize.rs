//! Image resizing with TFLite's align_corners / half_pixel_centers semantics.
//! Coordinates depend only on shapes, so they are computed once into tables
//! ([`bilinear_table`], [`nearest_table`]) and the kernels just read them.

fn scale(in_size: usize, out_size: usize, align_corners: bool) -> f32 {
    if align_corners && out_size > 1 {
        (in_size as f32 - 1.0) / (out_size as f32 - 1.0)
    } else {
        in_size as f32 / out_size as f32
    }
}

/// Source coordinate and the two neighbours (lower clamped at 0, upper at size-1).
fn interp(v: usize, scale: f32, half_pixel: bool, in_size: usize) -> (f32, usize, usize) {
    let s = if half_pixel { (v as f32 + 0.5) * scale - 0.5 } else { v as f32 * scale };
    let lo = (s.floor() as i64).max(0) as usize;
    let hi = (s.ceil() as i64).min(in_size as i64 - 1).max(0) as usize;
    (s, lo.min(in_size.saturating_sub(1)), hi)
}

/// Source coordinate and neighbours for each output position of one axis.
pub type BilinearTable = Vec<(f32, usize, usize)>;

/// Interpolation table for resizing an axis of `in_size` (> 0) to `out_size`.
pub fn bilinear_table(in_size: usize, out_size: usize, align_corners: bool, half_pixel: bool) -> BilinearTable {
    let s = scale(in_size, out_size, align_corners);
    (0..out_size).map(|v| interp(v, s, half_pixel, in_size)).collect()
}

/// Per output position of one axis: (lower, upper, fraction in 1/1024ths), the
/// integer coordinates TFLite's int8/int16 bilinear resize uses. The fraction can
/// be negative at the border with half-pixel centers, exactly as there.
pub type BilinearTableQ = Vec<(usize, usize, i64)>;

/// Integer interpolation table (10 fractional bits) for an axis of `in_size` (> 0).
pub fn bilinear_table_q(in_size: usize, out_size: usize, align_corners: bool, half_pixel: bool) -> BilinearTableQ {
    let scale_10 = (f64::from(scale(in_size, out_size, align_corners)) * 1024.0).round() as i64;
    (0..out_size as i64)
        .map(|v| {
            let scaled = if half_pixel { v * scale_10 + scale_10 / 2 - 512 } else { v * scale_10 };
            // Integer division truncates toward zero, as in C.
            let lo = (scaled / 1024).max(0);
            let hi = ((scaled + 1023) / 1024).min(in_size as i64 - 1).max(0);
            (lo as usize, hi as usize, scaled - 1024 * lo)
        })
        .collect()
}

/// Bilinear resize of NHWC int8 / int16 data in fixed point: four products with
/// 20 fractional bits, rounded half away from zero. Zero points need no handling
/// since the weights sum to one.
#[allow(clippy::too_many_arguments)]
pub fn resize_bilinear_int<T: Copy + Into<i64> + TryFrom<i64>>(
    input: &[T],
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    ys: &[(usize, usize, i64)],
    xs: &[(usize, usize, i64)],
    out: &mut [T],
) {
    let (out_h, out_w) = (ys.len(), xs.len());
    for b in 0..n {
        for (y, &(y0, y1, fy)) in ys.iter().enumerate() {
            for (x, &(x0, x1, fx)) in xs.iter().enumerate() {
                let p = |yy: usize, xx: usize| &input[((b * h + yy) * w + xx) * c..][..c];
                let (ll, lu, rl, ru) = (p(y0, x0), p(y1, x0), p(y0, x1), p(y1, x1));
                let o = &mut out[((b * out_h + y) * out_w + x) * c..][..c];
                for k in 0..c {
                    let v =
                        ll[k].into() * (1024 - fy) * (1024 - fx) + lu[k].into() * fy * (1024 - fx) + rl[k].into() * (1024 - fy) * fx + ru[k].into() * fy * fx;
                    let round = if v > 0 { 1 << 19 } else { -(1 << 19) };
                    if let Ok(q) = T::try_from((v + round) / (1 << 20)) {
                        o[k] = q;
                    }
                }
            }
        }
    }
}

/// Bilinear resize of NHWC `input` (`n x h x w x c`) with tables from [`bilinear_table`].
///
/// With AVX-512 each pixel's channels run 16 to a vector (2, 4 or 8 channels:
/// several pixels to a vector), in the same operations and order as the portable
/// loop (no fused multiply-adds), so every result is the same bits on every path.
#[allow(clippy::too_many_arguments)]
pub fn resize_bilinear(input: &[f32], n: usize, h: usize, w: usize, c: usize, ys: &[(f32, usize, usize)], xs: &[(f32, usize, usize)], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::level::has_avx512f()
        && crate::holds(input.len(), &[n, h, w, c])
        && crate::holds(out.len(), &[n, ys.len(), xs.len(), c])
        && ys.iter().all(|&(_, y0, y1)| y0 < h && y1 < h)
        && xs.iter().all(|&(_, x0, x1)| x0 < w && x1 < w)
    {
        // SAFETY: AVX-512F checked; the buffers hold the shapes and every table
        // entry indexes inside the input (checked just now).
        unsafe { x86::bilinear_avx512(input, n, h, w, c, ys, xs, out) };
        return;
    }
    resize_bilinear_portable(input, n, h, w, c, ys, xs, out);
}

simd_fn! {
/// [`resize_bilinear`] on any CPU, one pixel at a time.
fn resize_bilinear_portable(input: &[f32], n: usize, h: usize, w: usize, c: usize, ys: &[(f32, usize, usize)], xs: &[(f32, usize, usize)], out: &mut [f32]) {
    let (out_h, out_w) = (ys.len(), xs.len());
    for b in 0..n {
        for (y, &(fy, y0, y1)) in ys.iter().enumerate() {
            let dy = fy - y0 as f32;
            for (x, &(fx, x0, x1)) in xs.iter().enumerate() {
                let dx = fx - x0 as f32;
                let p = |yy: usize, xx: usize| &input[((b * h + yy) * w + xx) * c..][..c];
                let (a, bb, cc, d) = (p(y0, x0), p(y1, x0), p(y0, x1), p(y1, x1));
                let o = &mut out[((b * out_h + y) * out_w + x) * c..][..c];
                for k in 0..c {
                    o[k] = a[k] * (1.0 - dy) * (1.0 - dx) + bb[k] * dy * (1.0 - dx) + cc[k] * (1.0 - dy) * dx + d[k] * dy * dx;
                }
            }
        }
    }
}
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// The portable loop's arithmetic on 16 lanes: `((a * wy0) * wx0 + (b * wy1) * wx0) +
    /// (c * wy0) * wx1 + (d * wy1) * wx1`, each product and sum rounded on its own.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn blend4(a: __m512, b: __m512, c: __m512, d: __m512, wy: (__m512, __m512), wx: (__m512, __m512)) -> __m512 {
        let t = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(a, wy.0), wx.0), _mm512_mul_ps(_mm512_mul_ps(b, wy.1), wx.0));
        let t = _mm512_add_ps(t, _mm512_mul_ps(_mm512_mul_ps(c, wy.0), wx.1));
        _mm512_add_ps(t, _mm512_mul_ps(_mm512_mul_ps(d, wy.1), wx.1))
    }

    /// # Safety
    /// AVX-512F; `input` holds `n * h * w * c` floats and `out` `n * ys.len() *
    /// xs.len() * c`; every `ys` entry's rows are below `h`, every `xs` entry's
    /// columns below `w`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn bilinear_avx512(
        input: &[f32],
        n: usize,
        h: usize,
        w: usize,
        c: usize,
        ys: &[(f32, usize, usize)],
        xs: &[(f32, usize, usize)],
        out: &mut [f32],
    ) {
        let (oh, ow) = (ys.len(), xs.len());
        // Channels of 2, 4 or 8: 16 / c pixels share a vector, each a masked load.
        let per = if matches!(c, 2 | 4 | 8) { 16 / c } else { 1 };
        let lanes: __mmask16 = if c >= 16 { 0xffff } else { ((1u32 << c) - 1) as u16 };
        let wx_of = |x: usize| {
            let (fx, x0, _) = xs[x];
            let dx = fx - x0 as f32;
            (1.0 - dx, dx)
        };
        for b in 0..n {
            for (y, &(fy, y0, y1)) in ys.iter().enumerate() {
                let dy = fy - y0 as f32;
                let wy = (_mm512_set1_ps(1.0 - dy), _mm512_set1_ps(dy));
                // SAFETY: rows y0, y1 < h of image b and columns < w (the caller's
                // contract), channels < c; the output row y < oh of image b, pixels < ow.
                unsafe {
                    let r0 = input.as_ptr().add((b * h + y0) * w * c);
                    let r1 = input.as_ptr().add((b * h + y1) * w * c);
                    let o = out.as_mut_ptr().add((b * oh + y) * ow * c);
                    let mut x = 0;
                    if per > 1 {
                        while x + per <= ow {
                            let (mut a, mut bb, mut cc, mut d) = (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
                            let (mut w0, mut w1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                            for j in 0..per {
                                let (_, x0, x1) = xs[x + j];
                                let m = lanes << (j * c);
                                // Lanes j*c.. of the vector read the pixel's channels:
                                // the pointer sits j*c floats before them (a masked
                                // load touches only its enabled lanes).
                                let at = |r: *const f32, col: usize| r.add(col * c).wrapping_sub(j * c);
                                a = _mm512_mask_loadu_ps(a, m, at(r0, x0));
                                bb = _mm512_mask_loadu_ps(bb, m, at(r1, x0));
                                cc = _mm512_mask_loadu_ps(cc, m, at(r0, x1));
                                d = _mm512_mask_loadu_ps(d, m, at(r1, x1));
                                let (v0, v1) = wx_of(x + j);
                                w0 = _mm512_mask_mov_ps(w0, m, _mm512_set1_ps(v0));
                                w1 = _mm512_mask_mov_ps(w1, m, _mm512_set1_ps(v1));
                            }
                            _mm512_storeu_ps(o.add(x * c), blend4(a, bb, cc, d, wy, (w0, w1)));
                            x += per;
                        }
                    }
                    while x < ow {
                        let (_, x0, x1) = xs[x];
                        let (v0, v1) = wx_of(x);
                        let wx = (_mm512_set1_ps(v0), _mm512_set1_ps(v1));
                        let (p00, p10, p01, p11) = (r0.add(x0 * c), r1.add(x0 * c), r0.add(x1 * c), r1.add(x1 * c));
                        let ox = o.add(x * c);
                        let mut k = 0;
                        while k + 16 <= c {
                            let v = blend4(
                                _mm512_loadu_ps(p00.add(k)),
                                _mm512_loadu_ps(p10.add(k)),
                                _mm512_loadu_ps(p01.add(k)),
                                _mm512_loadu_ps(p11.add(k)),
                                wy,
                                wx,
                            );
                            _mm512_storeu_ps(ox.add(k), v);
                            k += 16;
                        }
                        if k < c {
                            let m: __mmask16 = ((1u32 << (c - k)) - 1) as u16;
                            let v = blend4(
                                _mm512_maskz_loadu_ps(m, p00.add(k)),
                                _mm512_maskz_loadu_ps(m, p10.add(k)),
                                _mm512_maskz_loadu_ps(m, p01.add(k)),
                                _mm512_maskz_loadu_ps(m, p11.add(k)),
                                wy,
                                wx,
                            );
                            _mm512_mask_storeu_ps(ox.add(k), m, v);
                        }
                        x += 1;
                    }
                }
            }
        }
    }
}

/// Bilinear resize of NHWC uint8 data as LiteRT computes it: its float
/// formulation on the raw values (tables from [`bilinear_table`]), rounded half up.
#[allow(clippy::too_many_arguments)]
pub fn resize_bilinear_u8(input: &[u8], n: usize, h: usize, w: usize, c: usize, ys: &[(f32, usize, usize)], xs: &[(f32, usize, usize)], out: &mut [u8]) {
    let (oh, ow) = (ys.len(), xs.len());
    for b in 0..n {
        for (y, &(fy, y0, y1)) in ys.iter().enumerate() {
            let dy = fy - y0 as f32;
            for (x, &(fx, x0, x1)) in xs.iter().enumerate() {
                let dx = fx - x0 as f32;
                let at = |yy: usize, xx: usize, k: usize| f32::from(input[((b * h + yy) * w + xx) * c + k]);
                for k in 0..c {
                    let v =
                        at(y0, x0, k) * (1.0 - dy) * (1.0 - dx) + at(y1, x0, k) * dy * (1.0 - dx) + at(y0, x1, k) * (1.0 - dy) * dx + at(y1, x1, k) * dy * dx;
                    out[((b * oh + y) * ow + x) * c + k] = (v + 0.5) as u8;
                }
            }
        }
    }
}

fn nearest(v: usize, in_size: usize, out_size: usize, align_corners: bool, half_pixel: bool) -> usize {
    let s = scale(in_size, out_size, align_corners);
    let off = if half_pixel { 0.5 } else { 0.0 };
    let f = (v as f32 + off) * s;
    let i = if align_corners { f.round() as i64 } else { f.floor() as i64 };
    i.min(in_size as i64 - 1).max(0) as usize
}

/// Source index for each output position of one axis.
pub fn nearest_table(in_size: usize, out_size: usize, align_corners: bool, half_pixel: bool) -> Vec<usize> {
    (0..out_size).map(|v| nearest(v, in_size, out_size, align_corners, half_pixel)).collect()
}

/// Nearest-neighbour resize with tables from [`nearest_table`], generic over the element type.
pub fn resize_nearest<T: Copy>(input: &[T], n: usize, h: usize, w: usize, c: usize, ys: &[usize], xs: &[usize], out: &mut [T]) {
    let (out_h, out_w) = (ys.len(), xs.len());
    for b in 0..n {
        for (y, &iy) in ys.iter().enumerate() {
            for (x, &ix) in xs.iter().enumerate() {
                let src = ((b * h + iy) * w + ix) * c;
                let dst = ((b * out_h + y) * out_w + x) * c;
                out[dst..dst + c].copy_from_slice(&input[src..src + c]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_identity_and_upsample() {
        let x = [0.0, 1.0, 2.0, 3.0];
        let mut o = [0.0; 4];
        let t = bilinear_table(2, 2, false, false);
        resize_bilinear(&x, 1, 2, 2, 1, &t, &t, &mut o);
        assert_eq!(o, x);
        let mut up = [0.0; 9];
        let t = bilinear_table(2, 3, true, false);
        resize_bilinear(&x, 1, 2, 2, 1, &t, &t, &mut up);
        assert_eq!(up[4], 1.5);
    }

    /// Float bilinear resize under every vector level: the same bits as the
    /// definition's arithmetic (products and sums in the portable loop's order),
    /// over random sizes, channel counts (the packed 2, 4 and 8, and odd ones) and modes.
    #[test]
    fn bilinear_f32_matches_the_definition_bit_for_bit() {
        crate::level::each(|l| {
            let mut rng = crate::testutil::Rng::new(103);
            for round in 0..300 {
                let c = [1, 2, 3, 4, 8, 16, 24, 33, 48, rng.dim().min(40)][rng.size(0, 9)];
                let (n, h, w) = (rng.size(1, 2), rng.dim().min(9), rng.dim().min(9));
                let (oh, ow) = (rng.dim().min(19), rng.dim().min(19));
                let (align, half) = [(false, false), (true, false), (false, true)][rng.size(0, 2)];
                let (ys, xs) = (bilinear_table(h, oh, align, half), bilinear_table(w, ow, align, half));
                let x: Vec<f32> = (0..n * h * w * c).map(|_| rng.bits() as f32 / 977.0 - 2.0).collect();
                let mut got = vec![f32::NAN; n * oh * ow * c];
                resize_bilinear(&x, n, h, w, c, &ys, &xs, &mut got);
                for (i, &g) in got.iter().enumerate() {
                    let (k, ox, oy, b) = (i % c, i / c % ow, i / (c * ow) % oh, i / (c * ow * oh));
                    let ((fy, y0, y1), (fx, x0, x1)) = (ys[oy], xs[ox]);
                    let (dy, dx) = (fy - y0 as f32, fx - x0 as f32);
                    let px = |y: usize, xx: usize| x[((b * h + y) * w + xx) * c + k];
                    let want = px(y0, x0) * (1.0 - dy) * (1.0 - dx) + px(y1, x0) * dy * (1.0 - dx) + px(y0, x1) * (1.0 - dy) * dx + px(y1, x1) * dy * dx;
                    assert_eq!(g.to_bits(), want.to_bits(), "{l:?} round {round} c {c}: ({b}, {oy}, {ox}, {k})");
                }
            }
        });
    }

    #[test]
    fn nearest_half_pixel() {
        assert_eq!(nearest_table(2, 4, false, true), vec![0, 0, 1, 1]);
        assert_eq!(nearest_table(3, 2, true, false), vec![0, 2]);
    }

    /// uint8 bilinear resize: each output the four neighbours weighted by the
    /// fractional source coordinate (in single precision, in the same order),
    /// plus a half, truncated; over random sizes (1, odd) and modes.
    #[test]
    fn bilinear_u8_matches_the_definition() {
        let mut rng = crate::testutil::Rng::new(101);
        for round in 0..200 {
            let (n, h, w, c) = (rng.size(1, 2), rng.dim().min(9), rng.dim().min(9), rng.dim().min(5));
            let (oh, ow) = (rng.dim().min(13), rng.dim().min(13));
            let (align, half) = [(false, false), (true, false), (false, true)][rng.size(0, 2)];
            let (ys, xs) = (bilinear_table(h, oh, align, half), bilinear_table(w, ow, align, half));
            let x: Vec<u8> = (0..n * h * w * c).map(|_| if rng.one_in(5) { 255 } else { rng.bits() as u8 }).collect();
            let mut got = vec![0u8; n * oh * ow * c];
            resize_bilinear_u8(&x, n, h, w, c, &ys, &xs, &mut got);
            for b in 0..n {
                for oy in 0..oh {
                    for ox in 0..ow {
                        for k in 0..c {
                            let (fy, y0, y1) = ys[oy];
                            let (fx, x0, x1) = xs[ox];
                            let px = |y: usize, xx: usize| f32::from(x[((b * h + y) * w + xx) * c + k]);
                            let (wy, wx) = (fy - y0 as f32, fx - x0 as f32);
                            let top = px(y0, x0) * (1.0 - wy) * (1.0 - wx) + px(y1, x0) * wy * (1.0 - wx);
                            let v = top + px(y0, x1) * (1.0 - wy) * wx + px(y1, x1) * wy * wx;
                            let want = (v + 0.5).floor().clamp(0.0, 255.0) as u8;
                            assert_eq!(got[((b * oh + oy) * ow + ox) * c + k], want, "round {round} ({b}, {oy}, {ox}, {k})");
                        }
                    }
                }
            }
        }
    }

    /// int8 / int16 bilinear resize: the four neighbours weighted in 1/1024ths
    /// from the integer table, the sum divided by 2^20 rounding half away from zero.
    #[test]
    fn bilinear_int_matches_the_definition() {
        let mut rng = crate::testutil::Rng::new(102);
        for round in 0..200 {
            let (n, h, w, c) = (rng.size(1, 2), rng.dim().min(9), rng.dim().min(9), rng.dim().min(5));
            let (oh, ow) = (rng.dim().min(13), rng.dim().min(13));
            let (align, half) = [(false, false), (true, false), (false, true)][rng.size(0, 2)];
            let (ys, xs) = (bilinear_table_q(h, oh, align, half), bilinear_table_q(w, ow, align, half));
            let wide = rng.one_in(2);
            let (lo, hi) = if wide { (-32768, 32767) } else { (-128, 127) };
            let x = rng.ints(n * h * w * c, lo, hi);
            let got: Vec<i64> = if wide {
                let mut o = vec![0i16; n * oh * ow * c];
                resize_bilinear_int(&x.iter().map(|&v| v as i16).collect::<Vec<_>>(), n, h, w, c, &ys, &xs, &mut o);
                o.iter().map(|&v| i64::from(v)).collect()
            } else {
                let mut o = vec![0i8; n * oh * ow * c];
                resize_bilinear_int(&x.iter().map(|&v| v as i8).collect::<Vec<_>>(), n, h, w, c, &ys, &xs, &mut o);
                o.iter().map(|&v| i64::from(v)).collect()
            };
            for (i, &g) in got.iter().enumerate() {
                let (k, ox, oy, b) = (i % c, i / c % ow, i / (c * ow) % oh, i / (c * ow * oh));
                let ((y0, y1, fy), (x0, x1, fx)) = (ys[oy], xs[ox]);
                let px = |y: usize, xx: usize| x[((b * h + y) * w + xx) * c + k];
                let v = px(y0, x0) * (1024 - fy) * (1024 - fx) + px(y1, x0) * fy * (1024 - fx) + px(y0, x1) * (1024 - fy) * fx + px(y1, x1) * fy * fx;
                let want = v.signum() * ((v.abs() + (1 << 19)) >> 20);
                assert!((lo..=hi).contains(&want), "round {round}: {want} out of range");
                assert_eq!(g, want, "round {round} ({b}, {oy}, {ox}, {k})");
            }
        }
    }
}
