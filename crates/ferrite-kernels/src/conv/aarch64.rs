//! aarch64 NEON depthwise convolution of [`super::depthwise_conv2d`], the
//! counterpart of the AVX2 kernel: any channel count, channel multiplier, stride
//! and dilation, in blocks of 4 output channels (one vector) with registers
//! accumulating across all taps.
//!
//! NEON has no masked loads, so a block's lanes come from one of four reads: 4
//! consecutive input channels (multiplier 1), fewer than 4 of them through a
//! small zero-filled copy (the last block at multiplier 1), one channel
//! broadcast (the multiplier covers the block), or two channels broadcast and
//! blended lane by lane (a block of 4 output channels at a multiplier of 2 or
//! more spans at most two input channels, as blocks start at multiples of 4).

use super::Window;
use crate::Clamp;
use std::arch::aarch64::*;

/// 4 consecutive input channels (multiplier 1, a whole block).
const FULL: u8 = 0;
/// Fewer than 4 consecutive input channels (multiplier 1, the last block).
const SHORT: u8 = 1;
/// One input channel for every lane (the multiplier covers the block).
const BCAST: u8 = 2;
/// Two input channels: lanes set in `Block::sel` take the second.
const PAIR: u8 = 3;

/// One block of up to 4 output channels.
#[derive(Clone, Copy)]
struct Block {
    /// First output channel.
    c0: usize,
    /// First input channel read.
    src: usize,
    /// Output lanes in use (`c0 + l < out_c`).
    nl: usize,
    /// Input channels read (SHORT mode: `nl`).
    ni: usize,
    /// Lanes that take input channel `src + 1` (PAIR mode).
    sel: uint32x4_t,
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
    lo: float32x4_t,
    hi: float32x4_t,
    /// Output pixel `ox` of the row is at `o + (ox - ox0) * out_c`.
    o: *mut f32,
    ox0: usize,
}

/// `n` (< 4) floats from `p`, zeros in the other lanes.
///
/// # Safety
/// `p` is valid for `n` reads.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load_short(p: *const f32, n: usize) -> float32x4_t {
    let mut buf = [0.0f32; 4];
    // SAFETY: `p` holds n <= 4 floats (caller contract), `buf` 4.
    unsafe {
        std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n.min(4));
        vld1q_f32(buf.as_ptr())
    }
}

/// `P` output pixels from `ox0` of `NB` channel blocks (NB > 1 only for whole
/// blocks at multiplier 1). With `CHECKED` (edge pixels) each tap's column is
/// tested against the input; without, every tap of every pixel must lie inside
/// the input's columns. With `PARTIAL` the (single) block has fewer than 4 lanes.
///
/// # Safety
/// The row's pointers and geometry as [`dw_rows`] sets them up.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn tile<const P: usize, const NB: usize, const MODE: u8, const PARTIAL: bool, const CHECKED: bool>(
    r: &Row,
    b: &[Block; NB],
    bias: &[float32x4_t; NB],
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
            // SAFETY: tap (ky, kx) of each block: c0 + 4 <= out_c unless PARTIAL,
            // where only the block's nl channels are read.
            let wv: [float32x4_t; NB] = std::array::from_fn(|j| unsafe {
                let wp = r.w.add(tap + b[j].c0);
                if PARTIAL {
                    load_short(wp, b[j].nl)
                } else {
                    vld1q_f32(wp)
                }
            });
            // Column of pixel ox0's tap; pixels step `stride_w` columns. Interior
            // tiles walk one pointer; edge pixels test each column.
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
                    // caller), so `here` points at its pixel; the channels read are
                    // input channels < in_c (src + 4 <= in_c for FULL, src + ni for
                    // SHORT, src + 1 < in_c for PAIR).
                    unsafe {
                        let x = here.add(b[j].src);
                        let xv = match MODE {
                            FULL => vld1q_f32(x),
                            SHORT => load_short(x, b[j].ni),
                            BCAST => vld1q_dup_f32(x),
                            _ => vbslq_f32(b[j].sel, vld1q_dup_f32(x.add(1)), vld1q_dup_f32(x)),
                        };
                        a[j] = vfmaq_f32(a[j], xv, wv[j]);
                    }
                }
            }
        }
        iy += g.dil_h;
    }
    for (p, a) in acc.iter().enumerate() {
        for j in 0..NB {
            let v = vminq_f32(vmaxq_f32(a[j], r.lo), r.hi);
            // SAFETY: pixel ox0 + p is in the caller's range of the output row; a
            // partial block stores only its nl channels (< out_c).
            unsafe {
                let op = r.o.add((ox0 + p - r.ox0) * r.out_c + b[j].c0);
                if PARTIAL {
                    let mut buf = [0.0f32; 4];
                    vst1q_f32(buf.as_mut_ptr(), v);
                    std::ptr::copy_nonoverlapping(buf.as_ptr(), op, b[j].nl);
                } else {
                    vst1q_f32(op, v);
                }
            }
        }
    }
}

/// Blocks `b` over pixels `span` of a row: edge pixels (outside the interior
/// `[a, z)`) checked, the interior in tiles of `P` pixels, then single pixels.
///
/// # Safety
/// As [`tile`].
#[inline]
#[target_feature(enable = "neon")]
unsafe fn block_row<const P: usize, const NB: usize, const MODE: u8, const PARTIAL: bool>(
    r: &Row,
    b: &[Block; NB],
    bias: &[float32x4_t; NB],
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
/// `input` holds `[batch, in_h, in_w, in_c]`, `w` holds `k_h * k_w * in_c *
/// multiplier` values, `bias` (if any) `in_c * multiplier`, `out`
/// `rows.len() * out_w * in_c * multiplier`, `rows.end <= batch * out_h`, and
/// `g.indices_fit(in_c * multiplier)`.
#[target_feature(enable = "neon")]
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
    // [batch, T, 1, C] maps with Nx1 filters run as one row per batch item.
    let column = super::column_as_row(g);
    let gt = column.unwrap_or(*g);
    // Output columns whose taps all lie inside the input: [x_lo, x_hi).
    let x_lo = gt.pad_left.div_ceil(gt.stride_w).min(gt.out_w);
    let span = (gt.k_w - 1) * gt.dil_w;
    let x_hi = if gt.in_w + gt.pad_left > span { ((gt.in_w + gt.pad_left - span - 1) / gt.stride_w + 1).min(gt.out_w) } else { 0 };
    let cols = (x_lo, x_hi.max(x_lo));
    let (lo, hi) = (vdupq_n_f32(clamp.min), vdupq_n_f32(clamp.max));
    let none = vdupq_n_u32(0);
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
        // Whole blocks at multiplier 1 four at a time (16 channels), four pixels a
        // tile: 16 independent sums hide the FMA latency even on narrow rows.
        if mult == 1 {
            while c0 + 16 <= out_c {
                let b: [Block; 4] = std::array::from_fn(|j| Block { c0: c0 + 4 * j, src: c0 + 4 * j, nl: 4, ni: 4, sel: none });
                // SAFETY: bias holds out_c >= c0 + 16 values.
                let bias: [float32x4_t; 4] = std::array::from_fn(|j| bias.map_or(vdupq_n_f32(0.0), |bs| unsafe { vld1q_f32(bs.as_ptr().add(c0 + 4 * j)) }));
                // SAFETY: the row's pointers and geometry as set up above.
                unsafe { block_row::<4, 4, FULL, false>(&r, &b, &bias, cols, px) };
                c0 += 16;
            }
        }
        while c0 < out_c {
            let nl = (out_c - c0).min(4);
            let partial = nl < 4;
            let (src, last) = (c0 / mult, (c0 + nl - 1) / mult);
            let sel: [u32; 4] = std::array::from_fn(|l| if l < nl && (c0 + l) / mult > src { u32::MAX } else { 0 });
            // SAFETY: `sel` is a local array of 4 u32.
            let b = [Block { c0, src, nl, ni: last - src + 1, sel: unsafe { vld1q_u32(sel.as_ptr()) } }];
            let bias = [match bias {
                // SAFETY: bias holds out_c values: nl of them from c0.
                Some(bs) if partial => unsafe { load_short(bs.as_ptr().add(c0), nl) },
                // SAFETY: a whole block: c0 + 4 <= out_c <= bias.len().
                Some(bs) => unsafe { vld1q_f32(bs.as_ptr().add(c0)) },
                None => vdupq_n_f32(0.0),
            }];
            // SAFETY: the row's pointers and geometry as set up above; with
            // multiplier 1 the block reads nl input channels, above 1 at most two
            // (`last <= src + 1`, see the module comment).
            unsafe {
                match (mult == 1, src == last, partial) {
                    (true, _, false) => block_row::<8, 1, FULL, false>(&r, &b, &bias, cols, px),
                    (true, _, true) => block_row::<8, 1, SHORT, true>(&r, &b, &bias, cols, px),
                    (false, true, false) => block_row::<8, 1, BCAST, false>(&r, &b, &bias, cols, px),
                    (false, true, true) => block_row::<8, 1, BCAST, true>(&r, &b, &bias, cols, px),
                    (false, false, false) => block_row::<8, 1, PAIR, false>(&r, &b, &bias, cols, px),
                    (false, false, true) => block_row::<8, 1, PAIR, true>(&r, &b, &bias, cols, px),
                }
            }
            c0 += 4;
        }
        row = next;
    }
}
