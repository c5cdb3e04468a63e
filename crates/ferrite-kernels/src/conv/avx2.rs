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
struct Row {
    /// The batch item's image.
    x: *const f32,
    in_c: usize,
    in_row: usize,
    out_c: usize,
    w: *const f32,
    g: Window,
    /// Filter rows inside the input for this output row, and the input row of the first.
    ky: (usize, usize),
    iy0: usize,
    lo: __m256,
    hi: __m256,
    /// Output pixel `ox` of the row is at `o + (ox - ox0) * out_c`.
    o: *mut f32,
    ox0: usize,
}

#[inline(always)]
fn lane_mask(n: usize) -> [i32; 8] {
    std::array::from_fn(|l| if l < n { -1 } else { 0 })
}

/// `P` output pixels from `ox0` of `NB` channel blocks (NB > 1 only for whole
/// blocks at multiplier 1). With `CHECKED` (edge pixels) each tap's column is
/// tested against the input; without, every tap of every pixel must lie inside
/// the input's columns.
///
/// # Safety
/// AVX2 + FMA available; the row's pointers and geometry as [`dw_rows`] sets them up.
#[inline(always)]
unsafe fn tile<const P: usize, const NB: usize, const MODE: u8, const PARTIAL: bool, const CHECKED: bool>(
    r: &Row,
    b: &[Block; NB],
    bias: &[__m256; NB],
    ox0: usize,
) {
    let g = &r.g;
    let mut acc = [*bias; P];
    let mut iy = r.iy0;
    for ky in r.ky.0..r.ky.1 {
        // SAFETY: iy is inside the image (the ky range is).
        let line = unsafe { r.x.add(iy * r.in_row) };
        for kx in 0..g.k_w {
            let tap = (ky * g.k_w + kx) * r.out_c;
            // SAFETY: tap (ky, kx) of each block: c0 + 8 <= out_c unless PARTIAL (masked).
            let wv: [__m256; NB] = std::array::from_fn(|j| unsafe {
                let wp = r.w.add(tap + b[j].c0);
                if PARTIAL {
                    _mm256_maskload_ps(wp, b[j].omask)
                } else {
                    _mm256_loadu_ps(wp)
                }
            });
            // Column of pixel ox0's tap; pixels step `stride_w` columns. Interior tiles
            // walk one pointer (the address arithmetic per load was most of the
            // instructions); edge pixels test each column.
            let first = ox0 * g.stride_w + kx * g.dil_w;
            let mut px = line.wrapping_add(first.wrapping_sub(g.pad_left).wrapping_mul(r.in_c));
            for (p, a) in acc.iter_mut().enumerate() {
                let here = px;
                px = px.wrapping_add(g.stride_w * r.in_c);
                if CHECKED {
                    let col = first + p * g.stride_w;
                    if col < g.pad_left || col - g.pad_left >= g.in_w {
                        continue;
                    }
                }
                for j in 0..NB {
                    // SAFETY: the column is inside the row (checked, or interior by the
                    // caller), so `here` points at its pixel; the lanes loaded are input
                    // channels < in_c.
                    unsafe {
                        let x = here.add(b[j].src);
                        let xv = match MODE {
                            FULL => _mm256_loadu_ps(x),
                            MASKED => _mm256_maskload_ps(x, b[j].imask),
                            BCAST => _mm256_broadcast_ss(&*x),
                            _ => _mm256_permutevar8x32_ps(_mm256_maskload_ps(x, b[j].imask), b[j].idx),
                        };
                        a[j] = _mm256_fmadd_ps(xv, wv[j], a[j]);
                    }
                }
            }
        }
        iy += g.dil_h;
    }
    for (p, a) in acc.iter().enumerate() {
        for j in 0..NB {
            // SAFETY: AVX2 per this function's contract; pixel ox0 + p is in the
            // caller's range of the output row; lanes past out_c masked.
            unsafe {
                let v = _mm256_min_ps(_mm256_max_ps(a[j], r.lo), r.hi);
                let op = r.o.add((ox0 + p - r.ox0) * r.out_c + b[j].c0);
                if PARTIAL {
                    _mm256_maskstore_ps(op, b[j].omask, v)
                } else {
                    _mm256_storeu_ps(op, v)
                }
            }
        }
    }
}

/// Blocks `b` over pixels `span` of a row: edge pixels (outside the interior
/// `[a, z)`) checked, the interior in tiles of `P` pixels, then single pixels.
#[inline(always)]
unsafe fn block_row<const P: usize, const NB: usize, const MODE: u8, const PARTIAL: bool>(
    r: &Row,
    b: &[Block; NB],
    bias: &[__m256; NB],
    (a, z): (usize, usize),
    (from, to): (usize, usize),
) {
    let i0 = from.max(a).min(to);
    let i1 = z.min(to).max(i0);
    // SAFETY: (all calls) pixels outside [i0, i1) are checked, [i0, i1) interior.
    unsafe {
        for ox in from..i0 {
            tile::<1, NB, MODE, PARTIAL, true>(r, b, bias, ox);
        }
        let mut ox = i0;
        while ox + P <= i1 {
            tile::<P, NB, MODE, PARTIAL, false>(r, b, bias, ox);
            ox += P;
        }
        while ox < i1 {
            tile::<1, NB, MODE, PARTIAL, false>(r, b, bias, ox);
            ox += 1;
        }
        for ox in i1..to {
            tile::<1, NB, MODE, PARTIAL, true>(r, b, bias, ox);
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
pub(super) unsafe fn dw_rows(
    input: &[f32],
    in_c: usize,
    mult: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Window,
    clamp: Clamp,
    out: &mut [f32],
    rows: std::ops::Range<usize>,
) {
    let out_c = in_c * mult;
    if out_c == 0 || g.out_w == 0 || g.k_w == 0 || g.k_h == 0 || rows.is_empty() {
        return;
    }
    let in_img = g.in_h * g.in_w * in_c;
    let first = rows.start;
    // [batch, T, 1, C] with an Nx1 filter: one row per batch item.
    let column = super::column_as_row(g);
    let gt = column.unwrap_or(*g);
    // Output columns whose taps all lie inside the input: [x_lo, x_hi).
    let x_lo = gt.pad_left.div_ceil(gt.stride_w).min(gt.out_w);
    let span = (gt.k_w - 1) * gt.dil_w;
    let x_hi = if gt.in_w + gt.pad_left > span { ((gt.in_w + gt.pad_left - span - 1) / gt.stride_w + 1).min(gt.out_w) } else { 0 };
    let cols = (x_lo, x_hi.max(x_lo));
    let (lo, hi) = (_mm256_set1_ps(clamp.min), _mm256_set1_ps(clamp.max));
    // Pieces of rows of `gt`: (batch item, output row, first and end pixel, where in `out`).
    let mut row = rows.start;
    while row < rows.end {
        let (n, oy, from, to, next) = if column.is_some() {
            // Old rows are pixels of the item's single row.
            let n = row / g.out_h;
            let end = rows.end.min((n + 1) * g.out_h);
            (n, 0, row - n * g.out_h, end - n * g.out_h, end)
        } else {
            (row / g.out_h, row % g.out_h, 0, g.out_w, row + 1)
        };
        let o = &mut out[(row - first) * g.out_w * out_c..(next - first) * g.out_w * out_c];
        // Filter rows inside the input: a contiguous range, as the input row grows with ky.
        let inside = |ky: usize| gt.in_y(oy, ky).is_some();
        let ky_lo = (0..gt.k_h).find(|&ky| inside(ky)).unwrap_or(gt.k_h);
        let ky_hi = (ky_lo..gt.k_h).find(|&ky| !inside(ky)).unwrap_or(gt.k_h);
        let iy0 = gt.in_y(oy, ky_lo).unwrap_or(0);
        let r = Row {
            // SAFETY: n < batch (rows.end <= batch * out_h), so the image is inside `input`.
            x: unsafe { input.as_ptr().add(n * in_img) },
            in_c,
            in_row: gt.in_w * in_c,
            out_c,
            w: w.as_ptr(),
            g: gt,
            ky: (ky_lo, ky_hi),
            iy0,
            lo,
            hi,
            o: o.as_mut_ptr(),
            ox0: from,
        };
        let px = (from, to);
        let mut c0 = 0;
        // Whole blocks at multiplier 1 four at a time: with narrow rows (or none to
        // tile) the four accumulators still hide the FMA latency.
        if mult == 1 {
            let all = lane_mask(8);
            // SAFETY: the mask is a local array of 8 i32.
            let all = unsafe { _mm256_loadu_si256(all.as_ptr().cast()) };
            while c0 + 32 <= out_c {
                let b: [Block; 4] = std::array::from_fn(|j| Block { c0: c0 + 8 * j, src: c0 + 8 * j, omask: all, imask: all, idx: all });
                // SAFETY: bias holds out_c >= c0 + 32 values.
                let bias: [__m256; 4] = std::array::from_fn(|j| bias.map_or(_mm256_setzero_ps(), |bs| unsafe { _mm256_loadu_ps(bs.as_ptr().add(c0 + 8 * j)) }));
                // SAFETY: the row's pointers and geometry as set up above.
                unsafe { block_row::<2, 4, FULL, false>(&r, &b, &bias, cols, px) };
                c0 += 32;
            }
        }
        while c0 < out_c {
            let nl = (out_c - c0).min(8);
            let partial = nl < 8;
            let (src, last) = (c0 / mult, (c0 + nl - 1) / mult);
            let idx: [i32; 8] = std::array::from_fn(|l| if l < nl { ((c0 + l) / mult - src) as i32 } else { 0 });
            let (omask, imask) = (lane_mask(nl), lane_mask(last - src + 1));
            // SAFETY: the masks are local arrays of 8 i32.
            let b = unsafe {
                [Block {
                    c0,
                    src,
                    omask: _mm256_loadu_si256(omask.as_ptr().cast()),
                    imask: _mm256_loadu_si256(imask.as_ptr().cast()),
                    idx: _mm256_loadu_si256(idx.as_ptr().cast()),
                }]
            };
            let bias = [match bias {
                // SAFETY: bias holds out_c values; lanes past out_c are masked.
                Some(bs) if partial => unsafe { _mm256_maskload_ps(bs.as_ptr().add(c0), b[0].omask) },
                // SAFETY: a whole block: c0 + 8 <= out_c <= bias.len().
                Some(bs) => unsafe { _mm256_loadu_ps(bs.as_ptr().add(c0)) },
                None => _mm256_setzero_ps(),
            }];
            // SAFETY: the row's pointers and geometry as set up above.
            unsafe {
                match (mult == 1, src == last, partial) {
                    (true, _, false) => block_row::<8, 1, FULL, false>(&r, &b, &bias, cols, px),
                    (true, _, true) => block_row::<8, 1, MASKED, true>(&r, &b, &bias, cols, px),
                    (false, true, false) => block_row::<8, 1, BCAST, false>(&r, &b, &bias, cols, px),
                    (false, true, true) => block_row::<8, 1, BCAST, true>(&r, &b, &bias, cols, px),
                    (false, false, false) => block_row::<8, 1, PERM, false>(&r, &b, &bias, cols, px),
                    (false, false, true) => block_row::<8, 1, PERM, true>(&r, &b, &bias, cols, px),
                }
            }
            c0 += 8;
        }
        row = next;
    }
}
