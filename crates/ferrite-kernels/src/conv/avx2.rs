//! x86-64 AVX2 + FMA depthwise convolution of [`super::depthwise_conv2d`] for
//! machines without AVX-512: any channel count, channel multiplier, stride and
//! dilation, in blocks of 8 output channels with registers accumulating across
//! all taps.
//!
//! Without it an AVX2 machine ran a depthwise convolution with a multiplier above 1
//! (first layers: 4-16 on 1-3 channels), or with fewer than 16 channels at stride 2,
//! one pixel and one tap at a time. A multiplier is read here straight from the
//! input (a broadcast, or a lane permutation of the few input channels a block
//! spans) instead of from a copy of the input with each channel repeated, which at
//! stride 2 cost four times the output's size in writes.

use super::Window;
use crate::Clamp;
use std::arch::x86_64::*;

/// How a block of 8 output channels gets its input lanes at one pixel.
/// 8 consecutive input channels (multiplier 1, a whole block).
const FULL: u8 = 0;
/// Fewer than 8 consecutive input channels (multiplier 1, the last block).
const MASKED: u8 = 1;
/// One input channel for every lane (the multiplier covers the block).
const BCAST: u8 = 2;
/// A few input channels, each repeated over `multiplier` lanes: loaded, then permuted.
const PERM: u8 = 3;

/// One block of up to 8 output channels.
#[derive(Clone, Copy)]
struct Block {
    /// First output channel.
    c0: usize,
    /// First input channel read.
    src: usize,
    /// Output lanes in use (`c0 + l < out_c`), for weights, bias and stores.
    omask: __m256i,
    /// Input lanes loaded (PERM and MASKED).
    imask: __m256i,
    /// Lane `l` takes loaded lane `idx[l]` (PERM).
    idx: __m256i,
}

/// What stays the same for every tile of a row.
struct Row<'a> {
    /// The batch item's image.
    x: *const f32,
    in_c: usize,
    in_row: usize,
    out_c: usize,
    w: *const f32,
    g: &'a Window,
    /// Filter rows inside the input for this output row, and the input row of the first.
    ky: (usize, usize),
    iy0: usize,
    lo: __m256,
    hi: __m256,
    /// The output row.
    o: *mut f32,
}

#[inline(always)]
fn lane_mask(n: usize) -> [i32; 8] {
    std::array::from_fn(|l| if l < n { -1 } else { 0 })
}

/// `P` output pixels from `ox0` of one channel block. With `CHECKED` (edge pixels)
/// each tap's column is tested against the input; without, every tap of every
/// pixel must lie inside the input's columns.
///
/// # Safety
/// AVX2 + FMA available; the row's pointers and geometry as [`dw_rows`] sets them up.
#[inline(always)]
unsafe fn tile<const P: usize, const MODE: u8, const PARTIAL: bool, const CHECKED: bool>(r: &Row<'_>, b: &Block, bias: __m256, ox0: usize) {
    let g = r.g;
    let mut acc = [bias; P];
    let mut iy = r.iy0;
    for ky in r.ky.0..r.ky.1 {
        // SAFETY: iy is inside the image (the ky range is), src < in_c.
        let line = unsafe { r.x.add(iy * r.in_row + b.src) };
        for kx in 0..g.k_w {
            // SAFETY: tap (ky, kx) of block c0: c0 + 8 <= out_c unless PARTIAL (masked).
            let wp = unsafe { r.w.add((ky * g.k_w + kx) * r.out_c + b.c0) };
            let wv = unsafe { if PARTIAL { _mm256_maskload_ps(wp, b.omask) } else { _mm256_loadu_ps(wp) } };
            for (p, a) in acc.iter_mut().enumerate() {
                let col = (ox0 + p) * g.stride_w + kx * g.dil_w;
                if CHECKED && (col < g.pad_left || col - g.pad_left >= g.in_w) {
                    continue;
                }
                // SAFETY: the column is inside the row (checked, or interior by the caller).
                let px = unsafe { line.add((col - g.pad_left) * r.in_c) };
                let xv = unsafe {
                    match MODE {
                        FULL => _mm256_loadu_ps(px),
                        MASKED => _mm256_maskload_ps(px, b.imask),
                        BCAST => _mm256_broadcast_ss(&*px),
                        _ => _mm256_permutevar8x32_ps(_mm256_maskload_ps(px, b.imask), b.idx),
                    }
                };
                // SAFETY: AVX2 + FMA per this function's contract.
                *a = unsafe { _mm256_fmadd_ps(xv, wv, *a) };
            }
        }
        iy += g.dil_h;
    }
    for (p, a) in acc.iter().enumerate() {
        // SAFETY: AVX2 per this function's contract; pixel ox0 + p < out_w of the
        // output row; lanes past out_c masked.
        unsafe {
            let v = _mm256_min_ps(_mm256_max_ps(*a, r.lo), r.hi);
            let op = r.o.add((ox0 + p) * r.out_c + b.c0);
            if PARTIAL {
                _mm256_maskstore_ps(op, b.omask, v)
            } else {
                _mm256_storeu_ps(op, v)
            }
        }
    }
}

/// One block over a row: edge pixels checked, interior in tiles of 8 then singles.
#[inline(always)]
unsafe fn block_row<const MODE: u8, const PARTIAL: bool>(r: &Row<'_>, b: &Block, bias: __m256, (a, z): (usize, usize)) {
    let out_w = r.g.out_w;
    // SAFETY (all calls): pixels below `a` and from `z` are checked, [a, z) interior.
    unsafe {
        for ox in 0..a {
            tile::<1, MODE, PARTIAL, true>(r, b, bias, ox);
        }
        let mut ox = a;
        while ox + 8 <= z {
            tile::<8, MODE, PARTIAL, false>(r, b, bias, ox);
            ox += 8;
        }
        while ox < z {
            tile::<1, MODE, PARTIAL, false>(r, b, bias, ox);
            ox += 1;
        }
        for ox in z..out_w {
            tile::<1, MODE, PARTIAL, true>(r, b, bias, ox);
        }
    }
}

/// Output rows `rows` (row = batch * out_h + oy) into `out`, which holds just them.
/// Each output sums bias, then the taps inside the input by filter row and column,
/// whatever tile takes it (bit-identical across thread counts).
///
/// # Safety
/// AVX2 + FMA available. `input` holds `[batch, in_h, in_w, in_c]`, `w` holds
/// `k_h * k_w * in_c * multiplier` values, `bias` (if any) `in_c * multiplier`,
/// `out` `rows.len() * out_w * in_c * multiplier`, `rows.end <= batch * out_h`,
/// and `g.indices_fit(in_c * multiplier)`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn dw_rows(input: &[f32], in_c: usize, mult: usize, w: &[f32], bias: Option<&[f32]>, g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>) {
    let out_c = in_c * mult;
    if out_c == 0 || g.out_w == 0 || g.k_w == 0 {
        return;
    }
    let in_row = g.in_w * in_c;
    let in_img = g.in_h * in_row;
    // Output columns whose taps all lie inside the input: [x_lo, x_hi).
    let x_lo = g.pad_left.div_ceil(g.stride_w).min(g.out_w);
    let span = (g.k_w - 1) * g.dil_w;
    let x_hi = if g.in_w + g.pad_left > span { ((g.in_w + g.pad_left - span - 1) / g.stride_w + 1).min(g.out_w) } else { 0 };
    let cols = (x_lo, x_hi.max(x_lo));
    let (lo, hi) = (_mm256_set1_ps(clamp.min), _mm256_set1_ps(clamp.max));
    let first = rows.start;
    for row in rows {
        let (n, oy) = (row / g.out_h, row % g.out_h);
        let o = &mut out[(row - first) * g.out_w * out_c..][..g.out_w * out_c];
        // Filter rows inside the input: a contiguous range, as the input row grows with ky.
        let inside = |ky: usize| g.in_y(oy, ky).is_some();
        let ky_lo = (0..g.k_h).find(|&ky| inside(ky)).unwrap_or(g.k_h);
        let ky_hi = (ky_lo..g.k_h).find(|&ky| !inside(ky)).unwrap_or(g.k_h);
        let iy0 = g.in_y(oy, ky_lo).unwrap_or(0);
        // SAFETY: n < batch (rows.end <= batch * out_h), so the image is inside `input`.
        let r = Row { x: unsafe { input.as_ptr().add(n * in_img) }, in_c, in_row, out_c, w: w.as_ptr(), g, ky: (ky_lo, ky_hi), iy0, lo, hi, o: o.as_mut_ptr() };
        for c0 in (0..out_c).step_by(8) {
            let nl = (out_c - c0).min(8);
            let partial = nl < 8;
            let omask = lane_mask(nl);
            // SAFETY: the masks are local arrays of 8 i32.
            let omask = unsafe { _mm256_loadu_si256(omask.as_ptr().cast()) };
            let (src, last) = (c0 / mult, (c0 + nl - 1) / mult);
            let idx: [i32; 8] = std::array::from_fn(|l| if l < nl { ((c0 + l) / mult - src) as i32 } else { 0 });
            let imask = lane_mask(last - src + 1);
            let b = unsafe {
                Block { c0, src, omask, imask: _mm256_loadu_si256(imask.as_ptr().cast()), idx: _mm256_loadu_si256(idx.as_ptr().cast()) }
            };
            // SAFETY: bias holds out_c values; lanes past out_c are masked.
            let bias = match bias {
                Some(bs) if partial => unsafe { _mm256_maskload_ps(bs.as_ptr().add(c0), omask) },
                Some(bs) => unsafe { _mm256_loadu_ps(bs.as_ptr().add(c0)) },
                None => _mm256_setzero_ps(),
            };
            // SAFETY: the row's pointers and geometry as set up above.
            unsafe {
                match (mult == 1, src == last, partial) {
                    (true, _, false) => block_row::<FULL, false>(&r, &b, bias, cols),
                    (true, _, true) => block_row::<MASKED, true>(&r, &b, bias, cols),
                    (false, true, false) => block_row::<BCAST, false>(&r, &b, bias, cols),
                    (false, true, true) => block_row::<BCAST, true>(&r, &b, bias, cols),
                    (false, false, false) => block_row::<PERM, false>(&r, &b, bias, cols),
                    (false, false, true) => block_row::<PERM, true>(&r, &b, bias, cols),
                }
            }
        }
    }
}
