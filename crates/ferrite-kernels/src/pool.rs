//! Average, max and L2 pooling, float32, NHWC.

use crate::conv::Window;
use crate::Clamp;

/// Float pooling of output rows `rows` (row = batch * out_h + oy), which `out` holds.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pool(input: &[f32], c: usize, g: &Window, clamp: Clamp, out: &mut [f32], max: bool, rows: std::ops::Range<usize>) {
    let first = rows.start;
    for row in rows {
        let (n, oy) = (row / g.out_h, row % g.out_h);
        for ox in 0..g.out_w {
            // TFLite clips the window to the input and, for the average, divides by
            // the number of positions inside it (padding does not count).
            let y0 = (oy * g.stride_h) as isize - g.pad_top as isize;
            let x0 = (ox * g.stride_w) as isize - g.pad_left as isize;
            let ys = y0.max(0) as usize..((y0 + g.k_h as isize).min(g.in_h as isize)).max(0) as usize;
            let xs = x0.max(0) as usize..((x0 + g.k_w as isize).min(g.in_w as isize)).max(0) as usize;
            let o = &mut out[((row - first) * g.out_w + ox) * c..][..c];
            let count = ys.len() * xs.len();
            let inv = if count == 0 { 0.0 } else { 1.0 / count as f32 };
            // Channels in blocks of 16 held in a fixed-size accumulator (one vector
            // register) across the window, the rest one by one.
            const B: usize = 16;
            let full = c / B * B;
            let init = if max { f32::MIN } else { 0.0 };
            for c0 in (0..full).step_by(B) {
                let mut acc = [init; B];
                for y in ys.clone() {
                    for x in xs.clone() {
                        let Ok(px) = <&[f32; B]>::try_from(&input[((n * g.in_h + y) * g.in_w + x) * c + c0..][..B]) else { continue };
                        for j in 0..B {
                            // As TFLite's std::max(acc, v): a NaN input leaves the maximum
                            // as it was (and this form vectorizes to one compare-select).
                            acc[j] = if max {
                                if acc[j] < px[j] {
                                    px[j]
                                } else {
                                    acc[j]
                                }
                            } else {
                                acc[j] + px[j]
                            };
                        }
                    }
                }
                for (d, a) in o[c0..c0 + B].iter_mut().zip(acc) {
                    *d = if max { a } else { a * inv };
                }
            }
            for ch in full..c {
                let mut a = init;
                for y in ys.clone() {
                    for x in xs.clone() {
                        let v = input[((n * g.in_h + y) * g.in_w + x) * c + ch];
                        a = if max {
                            if a < v {
                                v
                            } else {
                                a
                            }
                        } else {
                            a + v
                        };
                    }
                }
                o[ch] = if max { a } else { a * inv };
            }
            clamp.apply_slice(o);
        }
    }
}

simd_fn! {
    /// Average pooling (window clipped to the input, divisor = positions inside) of
    /// output rows `rows` (row = batch * out_h + oy), which `out` holds.
    pub fn average_pool(input: &[f32], c: usize, g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>) {
        pool(input, c, g, clamp, out, false, rows)
    }
}

simd_fn! {
    /// Max pooling of output rows `rows` (row = batch * out_h + oy), which `out` holds.
    pub fn max_pool(input: &[f32], c: usize, g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>) {
        pool(input, c, g, clamp, out, true, rows)
    }
}

/// L2_POOL_2D of output rows `rows` (row = batch * out_h + oy), which `out` holds:
/// each output is `sqrt(sum of squares / count)` over the window clipped to the
/// input (padding does not count), squares summed row by row as TFLite's kernel
/// sums them, then clamped. A window with no position inside the input gives 0
/// (TFLite divides 0 by 0 there; only a hostile geometry reaches it).
pub fn l2_pool(input: &[f32], c: usize, g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>) {
    let first = rows.start;
    for row in rows {
        let (n, oy) = (row / g.out_h, row % g.out_h);
        for ox in 0..g.out_w {
            let y0 = (oy * g.stride_h) as isize - g.pad_top as isize;
            let x0 = (ox * g.stride_w) as isize - g.pad_left as isize;
            let ys = y0.max(0) as usize..((y0 + g.k_h as isize).min(g.in_h as isize)).max(0) as usize;
            let xs = x0.max(0) as usize..((x0 + g.k_w as isize).min(g.in_w as isize)).max(0) as usize;
            let count = ys.len() * xs.len();
            let o = &mut out[((row - first) * g.out_w + ox) * c..][..c];
            o.fill(0.0);
            for y in ys.clone() {
                for x in xs.clone() {
                    let px = &input[((n * g.in_h + y) * g.in_w + x) * c..][..c];
                    for (a, &v) in o.iter_mut().zip(px) {
                        *a += v * v;
                    }
                }
            }
            for a in o.iter_mut() {
                *a = if count == 0 { 0.0 } else { clamp.apply((*a / count as f32).sqrt()) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integer max and average pooling against the definition (windows clipped to
    /// the input, averages rounded half away from zero, clamped) on random
    /// geometries with padding, under every vector level.
    #[test]
    fn integer_pooling_matches_the_definition() {
        let mut next = crate::testutil::xorshift(0x9e37_79b9_7f4a_7c15);
        crate::level::each(|_| {
            for case in 0..150 {
                let (k_h, k_w, stride_h, stride_w) = (1 + next(4), 1 + next(4), 1 + next(3), 1 + next(3));
                let (in_h, in_w, c) = (1 + next(9), 1 + next(9), 1 + next(20));
                let same = next(2) == 0;
                let (Some((out_h, pad_top)), Some((out_w, pad_left))) =
                    (crate::conv::out_size_and_pad(in_h, k_h, stride_h, 1, same), crate::conv::out_size_and_pad(in_w, k_w, stride_w, 1, same))
                else {
                    continue;
                };
                let g = Window { batch: 1 + next(2), in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, dil_h: 1, dil_w: 1, pad_top, pad_left };
                let input: Vec<i8> = (0..g.batch * in_h * in_w * c).map(|_| next(256) as u8 as i8).collect();
                let (lo, hi) = if case % 3 == 0 { (-20 - next(100) as i32, 20 + next(100) as i32) } else { (-128, 127) };
                for max in [true, false] {
                    let mut got = vec![0i8; g.batch * out_h * out_w * c];
                    pool_i8(&input, c, &g, max, lo, hi, &mut got, &mut vec![0; c]);
                    let mut want = Vec::new();
                    for n in 0..g.batch {
                        for oy in 0..out_h {
                            for ox in 0..out_w {
                                for ch in 0..c {
                                    let vals: Vec<i32> = (0..k_h)
                                        .flat_map(|ky| (0..k_w).map(move |kx| (ky, kx)))
                                        .filter_map(|(ky, kx)| {
                                            Some((
                                                (oy * stride_h + ky).checked_sub(pad_top).filter(|&y| y < in_h)?,
                                                (ox * stride_w + kx).checked_sub(pad_left).filter(|&x| x < in_w)?,
                                            ))
                                        })
                                        .map(|(y, x)| i32::from(input[((n * in_h + y) * in_w + x) * c + ch]))
                                        .collect();
                                    let v = if max {
                                        vals.iter().copied().max().unwrap_or(i32::MIN)
                                    } else {
                                        let (sum, count) = (vals.iter().sum::<i32>(), vals.len() as i32);
                                        if count == 0 {
                                            0
                                        } else {
                                            (f64::from(sum) / f64::from(count)).round() as i32
                                        }
                                    };
                                    want.push(v.clamp(lo, hi) as i8);
                                }
                            }
                        }
                    }
                    assert_eq!(got, want, "case {case} max {max}: {g:?} c {c}");
                }
            }
        });
    }

    /// L2 pooling against its definition (f64 sums of squares over the window
    /// clipped to the input) on random geometries with padding and clamps.
    #[test]
    fn l2_pool_matches_the_definition() {
        let mut r = crate::testutil::Rng::new(0x12b0_0152);
        for _ in 0..200 {
            let (k_h, k_w, stride_h, stride_w) = (r.size(1, 4), r.size(1, 4), r.size(1, 3), r.size(1, 3));
            let (in_h, in_w, c, batch) = (r.size(1, 9), r.size(1, 9), r.size(1, 6), r.size(1, 2));
            let same = r.one_in(2);
            let (Some((out_h, pad_top)), Some((out_w, pad_left))) =
                (crate::conv::out_size_and_pad(in_h, k_h, stride_h, 1, same), crate::conv::out_size_and_pad(in_w, k_w, stride_w, 1, same))
            else {
                continue;
            };
            let g = Window { batch, in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, dil_h: 1, dil_w: 1, pad_top, pad_left };
            let input: Vec<f32> = (0..batch * in_h * in_w * c).map(|_| (r.unit() * 4.0 - 2.0) as f32).collect();
            let clamp = if r.one_in(2) { Clamp::NONE } else { Clamp::RELU_N1_TO_1 };
            let mut got = vec![0.0; batch * out_h * out_w * c];
            l2_pool(&input, c, &g, clamp, &mut got, 0..batch * out_h);
            let mut k = 0;
            for n in 0..batch {
                for oy in 0..out_h {
                    for ox in 0..out_w {
                        for ch in 0..c {
                            let (mut sum, mut count) = (0.0f64, 0);
                            for ky in 0..k_h {
                                for kx in 0..k_w {
                                    let (y, x) = ((oy * stride_h + ky) as isize - pad_top as isize, (ox * stride_w + kx) as isize - pad_left as isize);
                                    if (0..in_h as isize).contains(&y) && (0..in_w as isize).contains(&x) {
                                        let v = f64::from(input[((n * in_h + y as usize) * in_w + x as usize) * c + ch]);
                                        sum += v * v;
                                        count += 1;
                                    }
                                }
                            }
                            let want = ((sum / f64::from(count)).sqrt() as f32).clamp(clamp.min, clamp.max);
                            assert!((got[k] - want).abs() <= 1e-5 * want.abs().max(1.0), "{g:?}: {} vs {want}", got[k]);
                            k += 1;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn avg_pool_excludes_padding() {
        crate::level::each(|_| {
            let g = Window {
                batch: 1,
                in_h: 2,
                in_w: 2,
                out_h: 2,
                out_w: 2,
                k_h: 2,
                k_w: 2,
                stride_h: 1,
                stride_w: 1,
                dil_h: 1,
                dil_w: 1,
                pad_top: 0,
                pad_left: 0,
            };
            let mut out = [0.0; 4];
            average_pool(&[1.0, 2.0, 3.0, 4.0], 1, &g, Clamp::NONE, &mut out, 0..2);
            assert_eq!(out, [2.5, 3.0, 3.5, 4.0]);
            max_pool(&[1.0, 2.0, 3.0, 4.0], 1, &g, Clamp::NONE, &mut out, 0..2);
            assert_eq!(out, [4.0, 4.0, 4.0, 4.0]);
        });
    }
}

/// Integer pooling over NHWC: the maximum, or the average rounded half away from
/// zero over the window's positions inside the input (as TFLite's integer
/// kernels), clamped to `[lo, hi]`. `acc` holds `c` accumulators.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pool_int<T: Copy + Ord + Into<i32>>(
    input: &[T],
    c: usize,
    g: &Window,
    max: bool,
    lo: i32,
    hi: i32,
    out: &mut [T],
    acc: &mut [i32],
    narrow: impl Fn(i32) -> T,
) {
    let acc = &mut acc[..c];
    for n in 0..g.batch {
        for oy in 0..g.out_h {
            for ox in 0..g.out_w {
                let y0 = (oy * g.stride_h) as isize - g.pad_top as isize;
                let x0 = (ox * g.stride_w) as isize - g.pad_left as isize;
                let (ys, ye) = (y0.max(0) as usize, (y0 + g.k_h as isize).clamp(0, g.in_h as isize) as usize);
                let (xs, xe) = (x0.max(0) as usize, (x0 + g.k_w as isize).clamp(0, g.in_w as isize) as usize);
                let count = (ye.saturating_sub(ys) * xe.saturating_sub(xs)) as i32;
                if max {
                    // The maximum of the stored values themselves (the widening is
                    // monotone), taken in the output row: full-width vector lanes.
                    let o = &mut out[((n * g.out_h + oy) * g.out_w + ox) * c..][..c];
                    if count == 0 {
                        // An empty window's maximum is the lowest value, clamped to `lo`.
                        o.fill(narrow(lo));
                        continue;
                    }
                    o.copy_from_slice(&input[((n * g.in_h + ys) * g.in_w + xs) * c..][..c]);
                    for yy in ys..ye {
                        for xx in xs..xe {
                            let px = &input[((n * g.in_h + yy) * g.in_w + xx) * c..][..c];
                            for (o, &v) in o.iter_mut().zip(px) {
                                *o = (*o).max(v);
                            }
                        }
                    }
                    for o in o.iter_mut() {
                        *o = narrow((*o).into().clamp(lo, hi));
                    }
                    continue;
                }
                acc.fill(if max { i32::MIN } else { 0 });
                for yy in ys..ye {
                    for xx in xs..xe {
                        let px = &input[((n * g.in_h + yy) * g.in_w + xx) * c..][..c];
                        if max {
                            for (a, &v) in acc.iter_mut().zip(px) {
                                *a = (*a).max(v.into());
                            }
                        } else {
                            for (a, &v) in acc.iter_mut().zip(px) {
                                *a += v.into();
                            }
                        }
                    }
                }
                let o = &mut out[((n * g.out_h + oy) * g.out_w + ox) * c..][..c];
                for (o, &a) in o.iter_mut().zip(acc.iter()) {
                    // An empty window leaves the maximum at its initial lowest value
                    // (clamped to `lo`) and the average at 0.
                    let v = if max {
                        a
                    } else if count == 0 {
                        0
                    } else if a > 0 {
                        (a + count / 2) / count
                    } else {
                        (a - count / 2) / count
                    };
                    *o = narrow(v.clamp(lo, hi));
                }
            }
        }
    }
}

/// int8 max / average pooling (see `pool_int`).
#[allow(clippy::too_many_arguments)]
pub fn pool_i8(input: &[i8], c: usize, g: &Window, max: bool, lo: i32, hi: i32, out: &mut [i8], acc: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if max
        && -128 <= lo
        && lo <= hi
        && hi <= 127
        && crate::level::has_avx2_fma()
        && crate::holds(input.len(), &[g.batch, g.in_h, g.in_w, c])
        && crate::holds(out.len(), &[g.batch, g.out_h, g.out_w, c])
    {
        // SAFETY: i8 and u8 have the same size, alignment and valid bit patterns.
        let (input, out) = unsafe {
            (std::slice::from_raw_parts(input.as_ptr() as *const u8, input.len()), std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, out.len()))
        };
        // SAFETY: AVX2 is present and both buffers hold the geometry (checked just above).
        unsafe { max_pool_8bit_avx2::<false>(input, c, g, lo, hi, out) };
        return;
    }
    pool_i8_simd(input, c, g, max, lo, hi, out, acc)
}

simd_fn! {
    /// [`pool_i8`] in plain Rust, compiled per vector width.
    #[allow(clippy::too_many_arguments)]
    pub fn pool_i8_simd(input: &[i8], c: usize, g: &Window, max: bool, lo: i32, hi: i32, out: &mut [i8], acc: &mut [i32]) {
        pool_int(input, c, g, max, lo, hi, out, acc, |v| v as i8)
    }
}

/// 8-bit max pooling with `vpmaxsb` (int8; `vpmaxub` for uint8, `UNSIGNED`),
/// 16 channels per step (then 8, then one at a time), each block's maximum held
/// in a register across the window: the few-channel maps of small models get
/// vector lanes that a loop over the channel count only gets in wider blocks.
/// `input` and `out` hold the values' bytes.
///
/// # Safety
/// The CPU must support AVX2; `input` and `out` hold the geometry `g` with `c`
/// channels. (`lo <= hi` within the type's range, or the results differ from `pool_int`.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_pool_8bit_avx2<const UNSIGNED: bool>(input: &[u8], c: usize, g: &Window, lo: i32, hi: i32, out: &mut [u8]) {
    use std::arch::x86_64::*;
    let (lo8, hi8) = (lo as u8, hi as u8);
    let (vlo, vhi) = (_mm_set1_epi8(lo8 as i8), _mm_set1_epi8(hi8 as i8));
    let vmax = |a: __m128i, b: __m128i| if UNSIGNED { _mm_max_epu8(a, b) } else { _mm_max_epi8(a, b) };
    let vmin = |a: __m128i, b: __m128i| if UNSIGNED { _mm_min_epu8(a, b) } else { _mm_min_epi8(a, b) };
    // The scalar channels compare as the type compares.
    let key = |v: u8| if UNSIGNED { i32::from(v) } else { i32::from(v as i8) };
    for n in 0..g.batch {
        for oy in 0..g.out_h {
            let y0 = (oy * g.stride_h) as isize - g.pad_top as isize;
            let (ys, ye) = (y0.max(0) as usize, (y0 + g.k_h as isize).clamp(0, g.in_h as isize) as usize);
            for ox in 0..g.out_w {
                let x0 = (ox * g.stride_w) as isize - g.pad_left as isize;
                let (xs, xe) = (x0.max(0) as usize, (x0 + g.k_w as isize).clamp(0, g.in_w as isize) as usize);
                let o = ((n * g.out_h + oy) * g.out_w + ox) * c;
                if ys >= ye || xs >= xe {
                    // An empty window's maximum is the lowest value, clamped to `lo`.
                    out[o..o + c].fill(lo8);
                    continue;
                }
                let px = |yy: usize, xx: usize| ((n * g.in_h + yy) * g.in_w + xx) * c;
                let first = px(ys, xs);
                let mut ch = 0;
                while ch + 16 <= c {
                    // SAFETY: channels ch..ch + 16 <= c of pixels inside the input,
                    // and of output pixel o (both buffers hold the geometry).
                    unsafe {
                        let mut m = _mm_loadu_si128(input.as_ptr().add(first + ch) as *const __m128i);
                        for yy in ys..ye {
                            for xx in xs..xe {
                                m = vmax(m, _mm_loadu_si128(input.as_ptr().add(px(yy, xx) + ch) as *const __m128i));
                            }
                        }
                        _mm_storeu_si128(out.as_mut_ptr().add(o + ch) as *mut __m128i, vmin(vmax(m, vlo), vhi));
                    }
                    ch += 16;
                }
                if ch + 8 <= c {
                    // SAFETY: as above, for channels ch..ch + 8 <= c.
                    unsafe {
                        let mut m = _mm_loadl_epi64(input.as_ptr().add(first + ch) as *const __m128i);
                        for yy in ys..ye {
                            for xx in xs..xe {
                                m = vmax(m, _mm_loadl_epi64(input.as_ptr().add(px(yy, xx) + ch) as *const __m128i));
                            }
                        }
                        _mm_storel_epi64(out.as_mut_ptr().add(o + ch) as *mut __m128i, vmin(vmax(m, vlo), vhi));
                    }
                    ch += 8;
                }
                for ch in ch..c {
                    let mut m = input[first + ch];
                    for yy in ys..ye {
                        for xx in xs..xe {
                            let v = input[px(yy, xx) + ch];
                            if key(v) > key(m) {
                                m = v;
                            }
                        }
                    }
                    out[o + ch] = if key(m) < lo {
                        lo8
                    } else if key(m) > hi {
                        hi8
                    } else {
                        m
                    };
                }
            }
        }
    }
}

/// uint8 max / average pooling (see `pool_int`).
#[allow(clippy::too_many_arguments)]
pub fn pool_u8(input: &[u8], c: usize, g: &Window, max: bool, lo: i32, hi: i32, out: &mut [u8], acc: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if max
        && 0 <= lo
        && lo <= hi
        && hi <= 255
        && crate::level::has_avx2_fma()
        && crate::holds(input.len(), &[g.batch, g.in_h, g.in_w, c])
        && crate::holds(out.len(), &[g.batch, g.out_h, g.out_w, c])
    {
        // SAFETY: AVX2 is present and both buffers hold the geometry (checked just above).
        unsafe { max_pool_8bit_avx2::<true>(input, c, g, lo, hi, out) };
        return;
    }
    pool_u8_simd(input, c, g, max, lo, hi, out, acc)
}

simd_fn! {
    /// [`pool_u8`] in plain Rust, compiled per vector width.
    #[allow(clippy::too_many_arguments)]
    pub fn pool_u8_simd(input: &[u8], c: usize, g: &Window, max: bool, lo: i32, hi: i32, out: &mut [u8], acc: &mut [i32]) {
        pool_int(input, c, g, max, lo, hi, out, acc, |v| v as u8)
    }
}

simd_fn! {
    /// int16 max / average pooling (see `pool_int`).
    #[allow(clippy::too_many_arguments)]
    pub fn pool_i16(input: &[i16], c: usize, g: &Window, max: bool, lo: i32, hi: i32, out: &mut [i16], acc: &mut [i32]) {
        pool_int(input, c, g, max, lo, hi, out, acc, |v| v as i16)
    }
}

#[cfg(test)]
mod int_tests {
    use super::*;
    use crate::testutil::Rng;

    /// Integer pooling against the definition: each output takes the window's
    /// positions inside the input; the maximum, or the sum divided by their count
    /// rounded half away from zero (0 for an empty window); clamped.
    #[test]
    fn integer_pooling_matches_the_definition() {
        crate::level::each(|_| {
            let mut rng = Rng::new(131);
            for round in 0..300 {
                let (k_h, k_w) = (rng.size(1, 4), rng.size(1, 4));
                let (stride_h, stride_w) = (rng.size(1, 3), rng.size(1, 3));
                let (in_h, in_w, c) = (rng.size(1, 7), rng.size(1, 7), rng.dim().min(19));
                let (pad_top, pad_left) = (rng.size(0, k_h), rng.size(0, k_w));
                let g = Window {
                    batch: rng.size(1, 2),
                    in_h,
                    in_w,
                    out_h: rng.size(1, (in_h + pad_top) / stride_h + 1),
                    out_w: rng.size(1, (in_w + pad_left) / stride_w + 1),
                    k_h,
                    k_w,
                    stride_h,
                    stride_w,
                    dil_h: 1,
                    dil_w: 1,
                    pad_top,
                    pad_left,
                };
                let max = rng.one_in(2);
                let kind = rng.size(0, 2);
                let (lo, hi) = [(-128i64, 127i64), (0, 255), (-32768, 32767)][kind];
                let mid = (lo + hi) / 2;
                let (clo, chi) = if rng.one_in(2) { (lo, hi) } else { (rng.range(lo, mid), rng.range(mid, hi)) };
                let x = rng.ints(g.batch * in_h * in_w * c, lo, hi);
                let n = g.batch * g.out_h * g.out_w * c;
                let mut acc = vec![0i32; c];
                let got: Vec<i64> = match kind {
                    0 => {
                        let mut o = vec![0i8; n];
                        pool_i8(&x.iter().map(|&v| v as i8).collect::<Vec<_>>(), c, &g, max, clo as i32, chi as i32, &mut o, &mut acc);
                        o.iter().map(|&v| i64::from(v)).collect()
                    }
                    1 => {
                        let mut o = vec![0u8; n];
                        pool_u8(&x.iter().map(|&v| v as u8).collect::<Vec<_>>(), c, &g, max, clo as i32, chi as i32, &mut o, &mut acc);
                        o.iter().map(|&v| i64::from(v)).collect()
                    }
                    _ => {
                        let mut o = vec![0i16; n];
                        pool_i16(&x.iter().map(|&v| v as i16).collect::<Vec<_>>(), c, &g, max, clo as i32, chi as i32, &mut o, &mut acc);
                        o.iter().map(|&v| i64::from(v)).collect()
                    }
                };
                for (i, &gv) in got.iter().enumerate() {
                    let (k, px) = (i % c, i / c);
                    let (ox, oy, b) = (px % g.out_w, px / g.out_w % g.out_h, px / (g.out_w * g.out_h));
                    let mut vals = Vec::new();
                    for ky in 0..k_h {
                        for kx in 0..k_w {
                            let (iy, ix) = ((oy * stride_h + ky) as i64 - pad_top as i64, (ox * stride_w + kx) as i64 - pad_left as i64);
                            if iy >= 0 && ix >= 0 && iy < in_h as i64 && ix < in_w as i64 {
                                vals.push(x[((b * in_h + iy as usize) * in_w + ix as usize) * c + k]);
                            }
                        }
                    }
                    let v = if max {
                        vals.iter().copied().max().unwrap_or(clo)
                    } else if vals.is_empty() {
                        0
                    } else {
                        let (sum, count) = (vals.iter().sum::<i64>(), vals.len() as i64);
                        sum.signum() * ((2 * sum.abs() + count) / (2 * count))
                    };
                    assert_eq!(gv, v.clamp(clo, chi), "round {round} {g:?} max {max} kind {kind} element {i}");
                }
            }
        });
    }
}
