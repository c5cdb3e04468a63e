//! x86-64 (AVX-512F) depthwise convolution kernels of [`super`], reached through
//! [`dw_row_simd`] and [`dw_rows_lanes`], whose callers check the CPU features
//! and the ranges the kernels read and write.

use super::{depthwise_masks_tails, Window};
use crate::Clamp;
use std::arch::x86_64::*;

/// Channels per pass of [`dw_row_simd`] when the filter is too large for L1.
const DW_GROUP: usize = 64;

/// One output row of a multiplier-1 depthwise convolution, every pixel by the
/// AVX-512 kernels: 12- and 8-pixel tiles (stride 1, 3- or 5-wide), 4-pixel tiles where the
/// taps stay inside horizontally, single pixels elsewhere (edges, narrow maps).
/// When all the filter's taps for all channels would not fit in L1 (wide channel
/// counts with 5x5 filters), the row is swept in groups of [`DW_GROUP`] channels so
/// that each group's weights and input columns stay in L1 across the row's pixels.
/// Returns false, leaving `o` unspecified, without AVX-512 or if a range check
/// fails; the caller then computes the row on the portable path.
///
/// Every output sums bias, then taps by filter row and column, whatever kernel
/// takes it and however rows are split (bit-identical across thread counts).
#[allow(clippy::too_many_arguments)]
pub(super) fn dw_row_simd(input: &[f32], c: usize, w: &[f32], bias: Option<&[f32]>, g: &Window, clamp: Clamp, o: &mut [f32], n: usize, oy: usize) -> bool {
    if !depthwise_masks_tails() || c == 0 || g.out_w == 0 || g.k_h == 0 || g.k_w == 0 {
        return false;
    }
    // The filter widths and strides the tiles take: the whole row on them, but
    // for wide rows at stride 1, whose interior runs on unchecked 12- and 8-pixel tiles below.
    if row_tiles_fit(g) && (g.stride_w > 1 || g.out_w < 16) {
        return dw_row_tiles(input, c, c, w, bias, g, clamp, o, n, oy, 0..g.out_w);
    }
    let taps = g.k_h * g.k_w;
    if w.len() < taps * c || bias.is_some_and(|b| b.len() < c) || o.len() < g.out_w * c {
        return false;
    }
    let in_row = g.in_w * c;
    let in_img = g.in_h * in_row;
    let ky_lo = (0..g.k_h).find(|&ky| g.in_y(oy, ky).is_some());
    let ky_hi = (0..g.k_h).rev().find(|&ky| g.in_y(oy, ky).is_some()).map_or(0, |k| k + 1);
    let x_lo = g.pad_left.div_ceil(g.stride_w);
    let span = (g.k_w - 1) * g.dil_w;
    let x_hi = if g.in_w + g.pad_left > span { ((g.in_w + g.pad_left - span - 1) / g.stride_w + 1).min(g.out_w) } else { 0 };
    let row8 = g.stride_w == 1 && g.dil_w == 1 && matches!(g.k_w, 3 | 5);
    let group = if taps * c * 4 > 16 * 1024 { DW_GROUP } else { c };
    // Index of the input pixel under tap (ky, kx) of output column ox, channel 0.
    let at = |ky: usize, kx: usize, ox: usize| {
        n * in_img + (oy * g.stride_h + ky * g.dil_h - g.pad_top) * in_row + (ox * g.stride_w + kx * g.dil_w - g.pad_left) * c
    };
    for cg in (0..c).step_by(group) {
        let gw = group.min(c - cg);
        let bias_g = bias.map(|b| &b[cg..]);
        let wg = w[cg..].as_ptr();
        let mut ox = 0;
        while ox < g.out_w {
            let dst = o[(ox * c + cg)..].as_mut_ptr();
            if let Some(ky_lo) = ky_lo {
                let rows_span = (ky_hi - 1 - ky_lo) * g.dil_h * in_row;
                // 12-pixel tiles for 3-wide filters where they fit, else 8 (5-wide
                // filters stay at 8: 12 ran 2x slower on 96x96x32 and 48x48x64).
                let wide = if g.k_w == 3 && ox + 12 <= x_hi && ox + 12 <= g.out_w { 12 } else { 8 };
                if row8 && ox >= x_lo && ox + wide <= x_hi && ox + wide <= g.out_w {
                    let start = at(ky_lo, 0, ox) + cg;
                    if start + rows_span + (wide - 1 + g.k_w - 1) * c + gw > input.len() {
                        return false;
                    }
                    let x = input[start..].as_ptr();
                    // SAFETY: AVX-512F present (checked above); input reads lie in
                    // [start, start + span + gw) (checked), weight reads below taps * c
                    // from `cg`, writes in `wide` pixels of `o` (ox + wide <= out_w);
                    // `row8` means a 3- or 5-wide filter at stride 1.
                    unsafe {
                        match (g.k_w, wide) {
                            (3, 12) => dw_rowp_avx512::<3, 12>(x, c, in_row, g, (ky_lo, ky_hi), wg, bias_g, gw, c, clamp, dst),
                            (3, _) => dw_rowp_avx512::<3, 8>(x, c, in_row, g, (ky_lo, ky_hi), wg, bias_g, gw, c, clamp, dst),
                            (_, 12) => dw_rowp_avx512::<5, 12>(x, c, in_row, g, (ky_lo, ky_hi), wg, bias_g, gw, c, clamp, dst),
                            _ => dw_rowp_avx512::<5, 8>(x, c, in_row, g, (ky_lo, ky_hi), wg, bias_g, gw, c, clamp, dst),
                        }
                    };
                    ox += wide;
                    continue;
                }
                if ox >= x_lo && ox + 4 <= x_hi && ox + 4 <= g.out_w {
                    let start = at(ky_lo, 0, ox) + cg;
                    if start + rows_span + (3 * g.stride_w + span) * c + gw > input.len() {
                        return false;
                    }
                    // SAFETY: as for the 12- and 8-pixel tiles, for 4 pixels.
                    unsafe { dw_interior_avx512(input.as_ptr().add(start), c, in_row, g, (ky_lo, ky_hi), wg, bias_g, gw, c, clamp, dst) };
                    ox += 4;
                    continue;
                }
            }
            let kx_lo = (0..g.k_w).find(|&kx| g.in_x(ox, kx).is_some());
            let kx_hi = (0..g.k_w).rev().find(|&kx| g.in_x(ox, kx).is_some()).map_or(0, |k| k + 1);
            let (taps_y, taps_x, start) = match (ky_lo, kx_lo) {
                (Some(ky_lo), Some(kx_lo)) => {
                    let start = at(ky_lo, kx_lo, ox) + cg;
                    let last = start + (ky_hi - 1 - ky_lo) * g.dil_h * in_row + (kx_hi - 1 - kx_lo) * g.dil_w * c + gw;
                    if last > input.len() {
                        return false;
                    }
                    ((ky_lo, ky_hi), (kx_lo, kx_hi), start)
                }
                // No tap lands inside the input: the bias alone, nothing read.
                _ => ((0, 0), (0, 0), 0),
            };
            // SAFETY: AVX-512F present; input reads lie in [start, last) (checked) or none;
            // weight reads below taps * c from `cg`; writes in one pixel of `o`.
            unsafe { dw_edge_avx512(input.as_ptr().wrapping_add(start), c, in_row, g, taps_y, taps_x, wg, bias_g, gw, c, clamp, dst) };
            ox += 1;
        }
    }
    true
}

/// Whether [`dw_narrow_row_pairs`] serves this geometry: 3x3 filters at stride 1,
/// no dilation, on maps at most 8 pixels wide (the late layers of small image
/// and spectrogram models), with at least two output rows.
pub(super) fn narrow_pairs_fit(g: &Window) -> bool {
    g.k_h == 3 && g.k_w == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 && g.dil_w == 1 && (1..=8).contains(&g.out_w) && g.out_h >= 2
}

/// Output rows `rows` of a multiplier-1 depthwise convolution that
/// [`narrow_pairs_fit`] (`out` holding rows `rows.start..`), two rows of one
/// batch item at a time: each of the 4 input rows under a pair is loaded once
/// for both of them, and the whole row pair is one register tile (2 x 8 pixels,
/// 9 weights). On such maps the one-row tiles of [`dw_row_tiles`] spent more
/// time per row on setup than on multiply-adds, and loaded each input row once
/// for every output row it feeds. A row left without a partner (odd ranges, the
/// last row of an item) goes through [`dw_row_simd`].
/// Returns false, leaving `out` unspecified, without AVX-512, for another
/// geometry, or if a range check fails; the caller then takes another path.
///
/// Every output sums bias, then the taps inside the input by filter row and
/// column, as the row kernels do: bit-identical for any split of the rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn dw_narrow_row_pairs(
    input: &[f32],
    c: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Window,
    clamp: Clamp,
    out: &mut [f32],
    rows: std::ops::Range<usize>,
) -> bool {
    if !depthwise_masks_tails() || !narrow_pairs_fit(g) || c == 0 || rows.start > rows.end {
        return false;
    }
    let (in_row, row_px) = (g.in_w * c, g.out_w * c);
    let in_img = g.in_h * in_row;
    if w.len() < 9 * c || bias.is_some_and(|b| b.len() < c) || out.len() < rows.len() * row_px || input.len() < g.batch * in_img || rows.end > g.batch * g.out_h
    {
        return false;
    }
    // Input columns of the pixels' windows, from the one under tap 0 of pixel 0:
    // bits lo..hi of `valid` lie inside the row.
    let cols = g.out_w + 2;
    let (vlo, vhi) = (g.pad_left.min(cols) as u32, (g.in_w + g.pad_left).min(cols) as u32);
    let valid = if vhi > vlo { ((1u64 << vhi) - (1u64 << vlo)) as u32 } else { 0 };
    let mut row = rows.start;
    while row < rows.end {
        let (n, oy) = (row / g.out_h, row % g.out_h);
        let o = &mut out[(row - rows.start) * row_px..];
        if oy + 1 >= g.out_h || row + 1 >= rows.end {
            if !dw_row_simd(input, c, w, bias, g, clamp, &mut o[..row_px], n, oy) {
                return false;
            }
            row += 1;
            continue;
        }
        // Input rows oy - pad_top + 0..4 feed the pair (bit r of `rv` when inside),
        // each addressed from the column under tap 0 of pixel 0 (wrapping: only
        // columns inside the row are accessed).
        let mut x = [std::ptr::null::<f32>(); 4];
        let mut rv = 0u32;
        for (r, xr) in x.iter_mut().enumerate() {
            if let Some(y) = (oy + r).checked_sub(g.pad_top).filter(|&y| y < g.in_h) {
                *xr = input.as_ptr().wrapping_add(n * in_img + y * in_row).wrapping_sub(g.pad_left * c);
                rv |= 1 << r;
            }
        }
        let t = PairRows { x, rv, valid, c, w: w.as_ptr(), bias: bias.map(|b| b.as_ptr()), clamp };
        let dst = o.as_mut_ptr();
        // SAFETY: AVX-512F present (checked); input reads of rows with their bit in
        // `rv` (inside the image, whose `in_w * c` floats the length check covers),
        // columns with their bit in `valid` (inside the row); 9 * c weights and c
        // bias floats (checked); stores of two rows of out_w pixels x c channels,
        // inside `out` (this row and the next are in `rows`, checked length).
        unsafe {
            match g.out_w {
                1 => dw_pair3_avx512::<1>(&t, dst),
                2 => dw_pair3_avx512::<2>(&t, dst),
                3 => dw_pair3_avx512::<3>(&t, dst),
                4 => dw_pair3_avx512::<4>(&t, dst),
                5 => dw_pair3_avx512::<5>(&t, dst),
                6 => dw_pair3_avx512::<6>(&t, dst),
                7 => dw_pair3_avx512::<7>(&t, dst),
                _ => dw_pair3_avx512::<8>(&t, dst),
            }
        }
        row += 2;
    }
    true
}

/// The inputs of one row pair of [`dw_narrow_row_pairs`].
struct PairRows {
    /// Input rows under filter rows 0..3 of the first output row and 1..4 of the
    /// second, from the column under tap 0 of pixel 0 (channel 0); only those
    /// with their bit in `rv` are read.
    x: [*const f32; 4],
    rv: u32,
    /// Columns (from the one under tap 0 of pixel 0) inside the input row.
    valid: u32,
    c: usize,
    w: *const f32,
    bias: Option<*const f32>,
    clamp: Clamp,
}

/// Two output rows of `P` pixels (3x3 filter, stride 1) over all `t.c` channels
/// in blocks of 16 (the last masked): the 9 weights and 2 x `P` accumulators in
/// registers, every row, column and tap unrolled, each input column loaded once
/// for the up to 6 multiply-adds it feeds.
///
/// # Safety
/// AVX-512F. For every row `r` with bit `r` of `t.rv` set and every column `j <
/// P + 2` with bit `j` of `t.valid` set, the floats `t.x[r] + j * t.c` plus
/// `0..t.c` must be readable; `t.w` must hold `9 * t.c` floats, `t.bias` (if any)
/// `t.c`; `o` must be writable for `2 * P * t.c` floats.
#[target_feature(enable = "avx512f")]
unsafe fn dw_pair3_avx512<const P: usize>(t: &PairRows, o: *mut f32) {
    let (lo, hi) = (_mm512_set1_ps(t.clamp.min), _mm512_set1_ps(t.clamp.max));
    let (c, cols) = (t.c, P + 2);
    for c0 in (0..c).step_by(16) {
        // The last block of a channel count that is not a multiple of 16 is masked.
        let m: __mmask16 = if c0 + 16 <= c { 0xFFFF } else { (1u16 << (c - c0)) - 1 };
        let b = match t.bias {
            // SAFETY: the bias holds `c` channels; the mask keeps to c0..c.
            Some(b) => unsafe { _mm512_maskz_loadu_ps(m, b.add(c0)) },
            None => _mm512_setzero_ps(),
        };
        let (mut a0, mut a1) = ([b; P], [b; P]);
        let mut wv = [_mm512_setzero_ps(); 9];
        for (k, v) in wv.iter_mut().enumerate() {
            // SAFETY: tap k < 9: its block of weights lies within 9 * c floats; the
            // mask keeps to channels c0..c.
            *v = unsafe { _mm512_maskz_loadu_ps(m, t.w.add(k * c + c0)) };
        }
        // Input row `$r` feeds the first output row through filter row `$r` and the
        // second through `$r - 1`; column `$col` feeds pixel p through tap
        // `$col - p`. Rows in order, columns in order: each pixel sums its taps by
        // filter row, then column. The conditions fold once unrolled.
        macro_rules! row {
            ($r:literal; $($col:literal)*) => {
                if (t.rv >> $r) & 1 != 0 {
                    let xr = t.x[$r].wrapping_add(c0);
                    $(
                        if $col < cols && (t.valid >> $col) & 1 != 0 {
                            // SAFETY: the row and the column lie inside the input (their
                            // bits are set): channels c0..c of it are readable (contract).
                            let xv = unsafe { _mm512_maskz_loadu_ps(m, xr.wrapping_add($col * c)) };
                            row!(@pixels $r, $col, xv; 0 1 2 3 4 5 6 7);
                        }
                    )*
                }
            };
            (@pixels $r:literal, $col:literal, $xv:ident; $($p:literal)*) => {$(
                let kx = ($col as usize).wrapping_sub($p);
                if $p < P && kx < 3 {
                    let (k0, k1) = ($r as usize, ($r as usize).wrapping_sub(1));
                    if k0 < 3 {
                        a0[$p] = _mm512_fmadd_ps($xv, wv[(k0 * 3 + kx) % 9], a0[$p]);
                    }
                    if k1 < 3 {
                        a1[$p] = _mm512_fmadd_ps($xv, wv[(k1 * 3 + kx) % 9], a1[$p]);
                    }
                }
            )*};
        }
        row!(0; 0 1 2 3 4 5 6 7 8 9);
        row!(1; 0 1 2 3 4 5 6 7 8 9);
        row!(2; 0 1 2 3 4 5 6 7 8 9);
        row!(3; 0 1 2 3 4 5 6 7 8 9);
        for p in 0..P {
            // SAFETY: masked stores to channels c0..c of pixel p of the two rows,
            // inside the 2 * P * c floats `o` is writable for (contract).
            unsafe {
                _mm512_mask_storeu_ps(o.add(p * c + c0), m, _mm512_min_ps(_mm512_max_ps(a0[p], lo), hi));
                _mm512_mask_storeu_ps(o.add((P + p) * c + c0), m, _mm512_min_ps(_mm512_max_ps(a1[p], lo), hi));
            }
        }
    }
}

/// Whether [`dw_row_tiles`] serves this row geometry: 3-, 5- and 9-wide filters
/// (the shapes of 2-D depthwise layers and of 1-D audio ones taken as rows) at
/// horizontal stride 1 or 2, no horizontal dilation.
pub(super) fn row_tiles_fit(g: &Window) -> bool {
    g.dil_w == 1 && matches!(g.k_w, 3 | 5 | 9) && matches!(g.stride_w, 1 | 2)
}

/// What stays the same across the tiles of one piece of an output row of
/// [`dw_row_tiles`], for one channel group.
struct TileRow {
    /// The input row under filter row `ky.0`, column 0, first channel of the group.
    x: *const f32,
    ky: (usize, usize),
    /// Floats between the input rows of consecutive filter rows.
    row_step: usize,
    in_c: usize,
    /// Weights and bias from the group's first channel.
    w: *const f32,
    bias: Option<*const f32>,
    /// Channels of the group.
    blocked: usize,
    out_c: usize,
    clamp: Clamp,
}

impl TileRow {
    /// The mask of channel block `c0` (the last block of a channel count that is not
    /// a multiple of 16 is masked) and the block's bias, the accumulators' start.
    ///
    /// # Safety
    /// AVX-512F; `c0 < blocked`, and `bias` (if any) holds `blocked` floats.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn block_start(&self, c0: usize) -> (__mmask16, __m512) {
        let m: __mmask16 = if c0 + 16 <= self.blocked { 0xFFFF } else { (1u16 << (self.blocked - c0)) - 1 };
        let b = match self.bias {
            // SAFETY: the bias holds `blocked` channels; the mask keeps to c0..blocked.
            Some(b) => unsafe { _mm512_maskz_loadu_ps(m, b.add(c0)) },
            None => _mm512_setzero_ps(),
        };
        (m, b)
    }

    /// The input row under filter row `ky` at column `col0` (channel block `c0`,
    /// or the one channel with `BC`), and that filter row's `KW` taps for the block.
    /// Column 0 of the window may lie left of the row: the address is formed with
    /// wrapping arithmetic, and only columns inside are accessed by the caller.
    ///
    /// # Safety
    /// AVX-512F; `ky` in `self.ky`, and `w` holds `k_h * KW * out_c` floats (tap
    /// `(ky, kx)`'s block of weights lies within the filter; `m` keeps to
    /// channels `c0..blocked`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn filter_row<const KW: usize, const BC: bool>(&self, ky: usize, col0: isize, c0: usize, m: __mmask16) -> (*const f32, [__m512; KW]) {
        let xr = self.x.wrapping_add((ky - self.ky.0) * self.row_step + if BC { 0 } else { c0 }).wrapping_offset(col0 * self.in_c as isize);
        let mut wv = [_mm512_setzero_ps(); KW];
        for (kx, v) in wv.iter_mut().enumerate() {
            // SAFETY: tap (ky, kx) < k_h * KW lies within the filter (contract).
            *v = unsafe { _mm512_maskz_loadu_ps(m, self.w.add((ky * KW + kx) * self.out_c + c0)) };
        }
        (xr, wv)
    }

    /// Stores the first `np` of a tile's accumulators, clamped to `lo..=hi`, to
    /// channels `c0..blocked` (mask `m`) of pixels `0..np` of `o`.
    ///
    /// # Safety
    /// AVX-512F; `o` is writable for `np` pixels of `out_c` floats.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_tile<const P: usize>(&self, acc: &[__m512; P], np: usize, (lo, hi): (__m512, __m512), c0: usize, m: __mmask16, o: *mut f32) {
        for (p, a) in acc.iter().enumerate().take(np) {
            // SAFETY: masked store to channels c0..blocked of pixel p < np, which `o`
            // is writable for (contract).
            unsafe { _mm512_mask_storeu_ps(o.add(p * self.out_c + c0), m, _mm512_min_ps(_mm512_max_ps(*a, lo), hi)) };
        }
    }
}

/// Output pixels `px` of one output row (`o` holding pixel `px.start` onward) of a
/// depthwise convolution of multiplier 1 (`in_c == out_c`) or of one input channel
/// (`in_c == 1`, any multiplier: each input float broadcast over the output
/// channels), with AVX-512, in tiles of up to 8 pixels. Every tile takes borders in its stride: it skips
/// input columns outside the row, so narrow maps (5 or 6
/// pixels wide, where a per-pixel edge path would take every pixel) and the edge
/// columns of wide ones run on the same register tiles as the interior, and each
/// input column is loaded once per filter row for all the tile's pixels it feeds.
/// Returns false, leaving `o` unspecified, without AVX-512, for a geometry
/// [`row_tiles_fit`] refuses, or if a range check fails; the caller then takes
/// another path.
///
/// Every output sums bias, then the taps inside the input by filter row and
/// column, whatever tile takes it: bit-identical for any split of the row.
#[allow(clippy::too_many_arguments)]
pub(super) fn dw_row_tiles(
    input: &[f32],
    in_c: usize,
    c: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Window,
    clamp: Clamp,
    o: &mut [f32],
    n: usize,
    oy: usize,
    px: std::ops::Range<usize>,
) -> bool {
    let bcast = in_c == 1 && c > 1;
    if !depthwise_masks_tails() || !row_tiles_fit(g) || c == 0 || (in_c != c && !bcast) || g.k_h == 0 || px.start > px.end || px.end > g.out_w || g.in_w == 0 {
        return false;
    }
    let taps = g.k_h * g.k_w;
    if w.len() < taps * c || bias.is_some_and(|b| b.len() < c) || o.len() < px.len() * c {
        return false;
    }
    let in_row = g.in_w * in_c;
    let ky_lo = (0..g.k_h).find(|&ky| g.in_y(oy, ky).is_some());
    let ky_hi = (0..g.k_h).rev().find(|&ky| g.in_y(oy, ky).is_some()).map_or(0, |k| k + 1);
    // The input rows read: those under filter rows ky_lo..ky_hi, all inside the image.
    let (row0, ky) = match ky_lo.and_then(|k| g.in_y(oy, k).map(|y| (k, y))) {
        Some((k, y)) => {
            let first = (n * g.in_h + y) * in_row;
            if first + ((ky_hi - 1 - k) * g.dil_h + 1) * in_row > input.len() {
                return false;
            }
            (first, (k, ky_hi))
        }
        // No filter row inside the image: the bias alone, nothing read.
        None => (0, (0, 0)),
    };
    let group = if taps * c * 4 > 16 * 1024 { DW_GROUP } else { c };
    for cg in (0..c).step_by(group) {
        let r = TileRow {
            // A broadcast input has one channel: every group reads it from 0.
            x: input.as_ptr().wrapping_add(row0 + if bcast { 0 } else { cg }),
            ky,
            row_step: g.dil_h * in_row,
            in_c,
            w: w[cg..].as_ptr(),
            bias: bias.map(|b| b[cg..].as_ptr()),
            blocked: group.min(c - cg),
            out_c: c,
            clamp,
        };
        let mut ox = px.start;
        while ox < px.end {
            let np = (px.end - ox).min(8);
            // Input columns the tile reads (from the one under tap 0 of pixel `ox`)
            // that lie inside the row: bits lo..hi of `valid`.
            let col0 = (ox * g.stride_w) as isize - g.pad_left as isize;
            let cols = (np - 1) * g.stride_w + g.k_w;
            let (vlo, vhi) = ((-col0).clamp(0, cols as isize) as u32, (g.in_w as isize - col0).clamp(0, cols as isize) as u32);
            let valid = if vhi > vlo { ((1u64 << vhi) - (1u64 << vlo)) as u32 } else { 0 };
            let full = ((1u64 << cols) - 1) as u32;
            let dst = o[(ox - px.start) * c + cg..].as_mut_ptr();
            macro_rules! tile {
                ($kw:literal, $s:literal) => {
                    // SAFETY: AVX-512F present (checked); the loads are masked to
                    // columns inside the input row (`valid`) and channels of the
                    // group, in rows ky.0..ky.1 (range checked above); weights of
                    // taps < k_h * k_w from `cg` (checked length); stores of `np`
                    // pixels of the group's channels inside `o` (checked length).
                    unsafe {
                        match (np, bcast) {
                            (1, false) => dw_tile_avx512::<$kw, $s, 1, false, false>(&r, col0, valid, np, dst),
                            (2, false) => dw_tile_avx512::<$kw, $s, 2, false, false>(&r, col0, valid, np, dst),
                            (3, false) => dw_tile_avx512::<$kw, $s, 3, false, false>(&r, col0, valid, np, dst),
                            (4, false) => dw_tile_avx512::<$kw, $s, 4, false, false>(&r, col0, valid, np, dst),
                            (5, false) => dw_tile_avx512::<$kw, $s, 5, false, false>(&r, col0, valid, np, dst),
                            (6, false) => dw_tile_avx512::<$kw, $s, 6, false, false>(&r, col0, valid, np, dst),
                            (7, false) => dw_tile_avx512::<$kw, $s, 7, false, false>(&r, col0, valid, np, dst),
                            // Stride 2 has an unmasked form for tiles wholly inside the row.
                            (_, false) if $s > 1 && valid == full => dw_tile_avx512::<$kw, $s, 8, false, true>(&r, col0, valid, np, dst),
                            (_, false) => dw_tile_avx512::<$kw, $s, 8, false, false>(&r, col0, valid, np, dst),
                            // Broadcast tiles: whole tiles of 8 and one of 4 or 8 for
                            // the rest (first layers, wide maps: few such tiles).
                            (1..=4, true) => dw_tile_avx512::<$kw, $s, 4, true, false>(&r, col0, valid, np, dst),
                            (_, true) => dw_tile_avx512::<$kw, $s, 8, true, false>(&r, col0, valid, np, dst),
                        }
                    }
                };
            }
            macro_rules! tile9 {
                ($s:literal) => {
                    // SAFETY: as for `tile!` above (the same contract).
                    unsafe {
                        match (np, bcast) {
                            (1, false) => dw_tile9_avx512::<$s, 1, false>(&r, col0, valid, np, dst),
                            (2, false) => dw_tile9_avx512::<$s, 2, false>(&r, col0, valid, np, dst),
                            (3, false) => dw_tile9_avx512::<$s, 3, false>(&r, col0, valid, np, dst),
                            (4, false) => dw_tile9_avx512::<$s, 4, false>(&r, col0, valid, np, dst),
                            (5, false) => dw_tile9_avx512::<$s, 5, false>(&r, col0, valid, np, dst),
                            (6, false) => dw_tile9_avx512::<$s, 6, false>(&r, col0, valid, np, dst),
                            (7, false) => dw_tile9_avx512::<$s, 7, false>(&r, col0, valid, np, dst),
                            (_, false) => dw_tile9_avx512::<$s, 8, false>(&r, col0, valid, np, dst),
                            (1..=4, true) => dw_tile9_avx512::<$s, 4, true>(&r, col0, valid, np, dst),
                            (_, true) => dw_tile9_avx512::<$s, 8, true>(&r, col0, valid, np, dst),
                        }
                    }
                };
            }
            match (g.k_w, g.stride_w) {
                (3, 1) => tile!(3, 1),
                (3, _) => tile!(3, 2),
                (5, 1) => tile!(5, 1),
                (5, _) => tile!(5, 2),
                // 9-wide filters (1-D audio layers along T) on their own column-major tiles.
                (_, 1) => tile9!(1),
                _ => tile9!(2),
            }
            ox += np;
        }
    }
    true
}

/// One tile of [`dw_row_tiles`]: `P` output pixels from input column `col0` (under
/// tap 0 of the first pixel), `KW`-wide filter (3 or 5; 9-wide filters take
/// [`dw_tile9_avx512`]) at stride `S`, of which the first
/// `np` are stored, over the row's channels in blocks of 16 (the last masked);
/// with `BC` the input has one channel, broadcast to every lane; with `FULL` every
/// column the tile reads lies inside the row (`valid` has all its bits set), so
/// stride 2 needs no per-column masks. Per filter row the
/// `(P - 1) * S + KW` input columns are each loaded once and multiplied by every
/// tap that reaches them; a column whose bit in `valid` is clear lies outside
/// the input and is skipped (its taps add nothing).
///
/// # Safety
/// AVX-512F. For every filter row in `r.ky` and every column `j` with bit `j` of
/// `valid` set, the floats `r.x + (ky - r.ky.0) * r.row_step + (col0 + j) * in_c`
/// plus `0..r.blocked` (with `BC`, plus 0 only) must be readable; `r.w` must hold `k_h * KW * out_c` floats
/// (less the group's offset), `r.bias` (if any) `blocked`; `o` must be writable for
/// `np <= P` pixels of `out_c` floats (channels `0..blocked` of each).
#[target_feature(enable = "avx512f")]
unsafe fn dw_tile_avx512<const KW: usize, const S: usize, const P: usize, const BC: bool, const FULL: bool>(
    r: &TileRow,
    col0: isize,
    valid: u32,
    np: usize,
    o: *mut f32,
) {
    let clamp = (_mm512_set1_ps(r.clamp.min), _mm512_set1_ps(r.clamp.max));
    for c0 in (0..r.blocked).step_by(16) {
        // SAFETY: c0 < blocked; the bias holds `blocked` floats (contract).
        let (m, b) = unsafe { r.block_start(c0) };
        let mut acc = [b; P];
        for ky in r.ky.0..r.ky.1 {
            // SAFETY: ky in r.ky; the filter holds k_h * KW taps (contract).
            let (xr, wv) = unsafe { r.filter_row::<KW, BC>(ky, col0, c0, m) };
            // Stride 2 over channel vectors: tap by tap, each pixel's input loaded
            // per tap, the columns in the padding masked off (loaded as zeros, their
            // multiply-adds masked so the accumulators keep their lanes: the sums
            // are those of skipping them). The column-major sweep below takes 17 or
            // 19 columns here, which the compiler does not unroll: its accumulators,
            // indexed by the loop counter, then lived on the stack (a store and a
            // reload per multiply-add, a third of the rate of stride 1). Here the
            // pixel loop is short and unrolls; each pixel sums its taps in column
            // order as before.
            if S > 1 && !BC {
                for (kx, wk) in wv.iter().enumerate() {
                    for (p, a) in acc.iter_mut().enumerate() {
                        let col = p * S + kx;
                        // Interior tiles (every column inside) keep the block's mask.
                        let mc = if FULL { m } else { m & (((valid >> col) & 1) as u16).wrapping_neg() };
                        // SAFETY: the unmasked floats are channels c0..blocked of a
                        // column inside the row (its bit is set; contract).
                        let xv = unsafe { _mm512_maskz_loadu_ps(mc, xr.wrapping_add(col * r.in_c)) };
                        *a = if FULL { _mm512_fmadd_ps(xv, *wk, *a) } else { _mm512_mask3_fmadd_ps(xv, *wk, *a, mc) };
                    }
                }
                continue;
            }
            // Input column `col` feeds pixel (col - kx) / S through tap kx.
            for col in 0..(P - 1) * S + KW {
                // A column in the padding adds nothing: skipped (the test is the
                // same for every block and filter row of the tile, so it predicts).
                if (valid >> col) & 1 == 0 {
                    continue;
                }
                // SAFETY: the column lies inside the row (its bit is set): the
                // unmasked floats are its channels c0..blocked (contract), or with
                // `BC` its one float.
                let xv = unsafe {
                    if BC {
                        _mm512_set1_ps(*xr.wrapping_add(col))
                    } else {
                        _mm512_maskz_loadu_ps(m, xr.wrapping_add(col * r.in_c))
                    }
                };
                for (kx, wk) in wv.iter().enumerate() {
                    if col >= kx && (col - kx) % S == 0 && (col - kx) / S < P {
                        let p = (col - kx) / S;
                        acc[p] = _mm512_fmadd_ps(xv, *wk, acc[p]);
                    }
                }
            }
        }
        // SAFETY: `o` is writable for np pixels (contract).
        unsafe { r.store_tile(&acc, np, clamp, c0, m, o) };
    }
}

/// [`dw_tile_avx512`] for 9-wide filters: the same tile and the same contract, swept
/// column by column with every column and tap unrolled, so the 9 weights and the
/// `P` accumulators stay in registers (18 of 32 at `P = 8`) and each input column
/// is loaded once per filter row for all the pixels it feeds (16 loads for 72
/// multiply-adds at stride 1, 23 at stride 2), with one test of `valid` per
/// column. The generic tile's loops over 23 columns of 9 taps are more than the
/// compiler unrolls: there each pixel loaded its input per tap, and the weights
/// were read back from the stack. Each pixel sums bias, then its taps by filter
/// row and column, as there: the results are the same bits.
///
/// # Safety
/// As for [`dw_tile_avx512`] with `KW = 9`.
#[target_feature(enable = "avx512f")]
unsafe fn dw_tile9_avx512<const S: usize, const P: usize, const BC: bool>(r: &TileRow, col0: isize, valid: u32, np: usize, o: *mut f32) {
    const KW: usize = 9;
    let cols = (P - 1) * S + KW;
    let clamp = (_mm512_set1_ps(r.clamp.min), _mm512_set1_ps(r.clamp.max));
    for c0 in (0..r.blocked).step_by(16) {
        // SAFETY: c0 < blocked; the bias holds `blocked` floats (contract).
        let (m, b) = unsafe { r.block_start(c0) };
        let mut acc = [b; P];
        for ky in r.ky.0..r.ky.1 {
            // SAFETY: ky in r.ky; the filter holds k_h * KW taps (contract).
            let (xr, wv) = unsafe { r.filter_row::<KW, BC>(ky, col0, c0, m) };
            // Column `$col` feeds pixel p through tap `$col - p * S` when that is a
            // tap; the conditions fold per (column, pixel) once unrolled.
            macro_rules! column {
                ($($col:literal)*) => {$(
                    if $col < cols && (valid >> $col) & 1 != 0 {
                        // SAFETY: the column lies inside the row (its bit is set): the
                        // unmasked floats are its channels c0..blocked (contract), or
                        // with `BC` its one float.
                        let xv = unsafe {
                            if BC {
                                _mm512_set1_ps(*xr.wrapping_add($col))
                            } else {
                                _mm512_maskz_loadu_ps(m, xr.wrapping_add($col * r.in_c))
                            }
                        };
                        column!(@pixels $col, xv, 0 1 2 3 4 5 6 7);
                    }
                )*};
                (@pixels $col:literal, $xv:ident, $($p:literal)*) => {$(
                    let kx = ($col as usize).wrapping_sub($p * S);
                    if $p < P && kx < KW {
                        acc[$p] = _mm512_fmadd_ps($xv, wv[kx], acc[$p]);
                    }
                )*};
            }
            column!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22);
        }
        // SAFETY: `o` is writable for np pixels (contract).
        unsafe { r.store_tile(&acc, np, clamp, c0, m, o) };
    }
}

/// Depthwise tile of 4 output pixels over channels `0..blocked` (the last block
/// of 16 masked), whose taps stay inside the input horizontally, summing the tap rows
/// `taps_y` (those inside vertically), with AVX-512.
///
/// # Safety
/// The CPU must support AVX-512F.
/// `x` points at the input pixel under the tile's first tap of row `taps_y.0`;
/// every pixel those taps reach, for channels `0..blocked`, must be readable; `w`
/// must hold `k_h * k_w * out_c` floats; `o` must be writable for 4 pixels of
/// `out_c` floats.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_interior_avx512(
    x: *const f32,
    in_c: usize,
    in_row: usize,
    g: &Window,
    (ky_lo, ky_hi): (usize, usize),
    w: *const f32,
    bias: Option<&[f32]>,
    blocked: usize,
    out_c: usize,
    clamp: Clamp,
    o: *mut f32,
) {
    let (lo, hi) = (_mm512_set1_ps(clamp.min), _mm512_set1_ps(clamp.max));
    let step = g.stride_w * in_c;
    for c0 in (0..blocked).step_by(16) {
        // The last block of a channel count that is not a multiple of 16 is masked.
        let m: __mmask16 = if c0 + 16 <= blocked { 0xFFFF } else { (1u16 << (blocked - c0)) - 1 };
        let b = match bias {
            // SAFETY: the bias holds `blocked` channels from here; the mask keeps the
            // load to channels c0..blocked.
            Some(b) => unsafe { _mm512_maskz_loadu_ps(m, b.as_ptr().add(c0)) },
            None => _mm512_setzero_ps(),
        };
        let (mut a0, mut a1, mut a2, mut a3) = (b, b, b, b);
        for ky in ky_lo..ky_hi {
            // SAFETY: the loads are masked to channels c0..blocked of taps the
            // caller guarantees readable (4 pixels `step` apart from `x`, filter rows
            // ky_lo..ky_hi); weights of tap (ky, kx) lie within k_h * k_w * out_c.
            unsafe {
                let xr = x.add((ky - ky_lo) * g.dil_h * in_row + c0);
                let wr = w.add(ky * g.k_w * out_c + c0);
                for kx in 0..g.k_w {
                    let wv = _mm512_maskz_loadu_ps(m, wr.add(kx * out_c));
                    let xp = xr.add(kx * g.dil_w * in_c);
                    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp), wv, a0);
                    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp.add(step)), wv, a1);
                    a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp.add(2 * step)), wv, a2);
                    a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp.add(3 * step)), wv, a3);
                }
            }
        }
        // SAFETY: masked stores to channels c0..blocked of the 4 pixels `o` is
        // writable for (contract).
        unsafe {
            let op = o.add(c0);
            _mm512_mask_storeu_ps(op, m, _mm512_min_ps(_mm512_max_ps(a0, lo), hi));
            _mm512_mask_storeu_ps(op.add(out_c), m, _mm512_min_ps(_mm512_max_ps(a1, lo), hi));
            _mm512_mask_storeu_ps(op.add(2 * out_c), m, _mm512_min_ps(_mm512_max_ps(a2, lo), hi));
            _mm512_mask_storeu_ps(op.add(3 * out_c), m, _mm512_min_ps(_mm512_max_ps(a3, lo), hi));
        }
    }
}

/// One depthwise output pixel over channels `0..blocked` (the last block of 16
/// masked), summing the taps `taps_y` x `taps_x` that land inside the input, with
/// AVX-512. Serves the columns near the left and right edges, and maps too narrow
/// for a full tile.
///
/// # Safety
/// The CPU must support AVX-512F.
/// `x` points at the input pixel under tap (`taps_y.0`, `taps_x.0`); every pixel
/// the taps reach, for channels `0..blocked`, must be readable; `w` must hold
/// `k_h * k_w * out_c` floats; `o` must be writable for `out_c` floats.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_edge_avx512(
    x: *const f32,
    in_c: usize,
    in_row: usize,
    g: &Window,
    (ky_lo, ky_hi): (usize, usize),
    (kx_lo, kx_hi): (usize, usize),
    w: *const f32,
    bias: Option<&[f32]>,
    blocked: usize,
    out_c: usize,
    clamp: Clamp,
    o: *mut f32,
) {
    let (lo, hi) = (_mm512_set1_ps(clamp.min), _mm512_set1_ps(clamp.max));
    // Four channel blocks at a time: four independent accumulator chains hide the
    // FMA latency (each tap here costs two loads, so one FMA per cycle is the bound).
    for c0 in (0..blocked).step_by(64) {
        let mut m = [0 as __mmask16; 4];
        for (j, mj) in m.iter_mut().enumerate() {
            let left = blocked.saturating_sub(c0 + 16 * j);
            *mj = if left >= 16 { 0xFFFF } else { ((1u32 << left) - 1) as __mmask16 };
        }
        let mut acc = [_mm512_setzero_ps(); 4];
        if let Some(b) = bias {
            for j in 0..4 {
                // Masked-off lanes are never read (AVX-512 suppresses their faults);
                // a wholly masked block's address may lie past the bias, so it is
                // formed with `wrapping_add`.
                // SAFETY: the unmasked lanes are channels below `blocked`, which the
                // bias holds.
                acc[j] = unsafe { _mm512_maskz_loadu_ps(m[j], b.as_ptr().wrapping_add(c0 + 16 * j)) };
            }
        }
        for ky in ky_lo..ky_hi {
            let xr = x.wrapping_add((ky - ky_lo) * g.dil_h * in_row + c0);
            let wr = w.wrapping_add(ky * g.k_w * out_c + c0);
            for kx in kx_lo..kx_hi {
                let xp = xr.wrapping_add((kx - kx_lo) * g.dil_w * in_c);
                let wp = wr.wrapping_add(kx * out_c);
                for j in 0..4 {
                    // SAFETY: unmasked lanes are channels below `blocked` of a tap
                    // inside the input (contract) and of its weights (k_h * k_w *
                    // out_c); masked-off lanes are not accessed, so their addresses
                    // (formed with `wrapping_add`) may lie anywhere.
                    unsafe {
                        let xv = _mm512_maskz_loadu_ps(m[j], xp.wrapping_add(16 * j));
                        acc[j] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m[j], wp.wrapping_add(16 * j)), acc[j]);
                    }
                }
            }
        }
        for j in 0..4 {
            // SAFETY: unmasked lanes are channels below `blocked` of the pixel `o`
            // is writable for (contract).
            unsafe { _mm512_mask_storeu_ps(o.wrapping_add(c0 + 16 * j), m[j], _mm512_min_ps(_mm512_max_ps(acc[j], lo), hi)) };
        }
    }
}

/// Depthwise tile of `P` output pixels (12 or 8; stride 1, no dilation, a 3- or
/// 5-wide filter) over channels `0..blocked` (the last block of 16 masked), summing
/// the tap rows `taps_y`, with AVX-512: per filter row, the P + kw - 1 input vectors
/// are each loaded once and multiplied by every tap that reaches them (`KW` =
/// `g.k_w`). With 3-wide filters 12 pixels (12 accumulator chains, 14 input loads
/// for 36 multiply-adds per filter row, against 10 for 24) measured 7-35% faster
/// than 8 on 14-28 wide maps of 88-480 channels, the same on wider ones.
///
/// # Safety
/// As [`dw_interior_avx512`], for `P` pixels.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_rowp_avx512<const KW: usize, const P: usize>(
    x: *const f32,
    in_c: usize,
    in_row: usize,
    g: &Window,
    (ky_lo, ky_hi): (usize, usize),
    w: *const f32,
    bias: Option<&[f32]>,
    blocked: usize,
    out_c: usize,
    clamp: Clamp,
    o: *mut f32,
) {
    let (lo, hi) = (_mm512_set1_ps(clamp.min), _mm512_set1_ps(clamp.max));
    for c0 in (0..blocked).step_by(16) {
        // The last block of a channel count that is not a multiple of 16 is masked.
        let m: __mmask16 = if c0 + 16 <= blocked { 0xFFFF } else { (1u16 << (blocked - c0)) - 1 };
        let b = match bias {
            // SAFETY: the bias holds `blocked` channels from here; the mask keeps the
            // load to channels c0..blocked.
            Some(b) => unsafe { _mm512_maskz_loadu_ps(m, b.as_ptr().add(c0)) },
            None => _mm512_setzero_ps(),
        };
        let mut acc = [b; P];
        for ky in ky_lo..ky_hi {
            // SAFETY: loads masked to channels c0..blocked: weights of row ky (within
            // k_h * k_w * out_c), and the P + KW - 1 input columns of filter row ky,
            // which the caller guarantees readable.
            unsafe {
                let xr = x.add((ky - ky_lo) * g.dil_h * in_row + c0);
                let wr = w.add(ky * KW * out_c + c0);
                let mut wv = [_mm512_setzero_ps(); KW];
                for (kx, v) in wv.iter_mut().enumerate() {
                    *v = _mm512_maskz_loadu_ps(m, wr.add(kx * out_c));
                }
                // Input column `col` feeds pixel `col - kx` through tap `kx`.
                for col in 0..P + KW - 1 {
                    let xv = _mm512_maskz_loadu_ps(m, xr.add(col * in_c));
                    for kx in 0..KW {
                        if col >= kx && col - kx < P {
                            acc[col - kx] = _mm512_fmadd_ps(xv, wv[kx], acc[col - kx]);
                        }
                    }
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            // SAFETY: masked store to channels c0..blocked of pixel p < P, which `o`
            // is writable for (contract).
            unsafe { _mm512_mask_storeu_ps(o.add(p * out_c + c0), m, _mm512_min_ps(_mm512_max_ps(*a, lo), hi)) };
        }
    }
}

/// How [`dw_rows_lanes`] lays one channel block over the 16 lanes: `v` output
/// pixels side by side, `s` lanes each (a power of two at least the block's
/// channel count), and where every lane finds its input.
struct Lanes {
    /// Pixels per vector.
    v: usize,
    /// Lanes per pixel.
    s: usize,
    /// First output channel of the block.
    c0: usize,
    /// First input channel read, and how many floats one vector load spans from it.
    src: usize,
    extent: usize,
    /// Lane `l` takes loaded float `idx[l]`.
    idx: __m512i,
    /// Lane `l` takes weight (and bias) `l % s` of the block.
    widx: __m512i,
    /// Weight and bias floats of the block (`nl`).
    wmask: __mmask16,
    /// Output float `j` of the vector's `v` pixels comes from lane `oidx[j]`.
    oidx: __m512i,
}

/// What stays the same along one piece of an output row of [`dw_rows_lanes`].
struct LaneRow {
    /// The input row under filter row `ky.0`; `ky` the filter rows inside the image.
    x: *const f32,
    ky: (usize, usize),
    in_c: usize,
    in_row: usize,
    out_c: usize,
    w: *const f32,
    g: Window,
    lo: __m512,
    hi: __m512,
    /// Output pixels `px.0..px.1` of the row; pixel `ox` at `o + (ox - px.0) * out_c`.
    o: *mut f32,
    px: (usize, usize),
}

/// Which of the `extent` floats a load from input column `col` (channel `src`)
/// may touch: those whose column lies inside the row.
#[inline(always)]
fn column_mask(col: isize, in_c: usize, in_w: usize, src: usize, extent: usize) -> __mmask16 {
    let (c, s) = (in_c as isize, src as isize);
    let lo = (-col * c - s).clamp(0, extent as isize) as u32;
    let hi = ((in_w as isize - col) * c - s).clamp(0, extent as isize) as u32;
    if hi <= lo {
        0
    } else {
        (((1u32 << (hi - lo)) - 1) << lo) as __mmask16
    }
}

/// `P` vectors (`P * v` pixels from `ox0`) of one channel block. With `CHECKED`
/// each load is masked to the columns inside the input (a tap in the padding
/// adds a zero); without, every tap of every pixel must lie inside. The last
/// vector stores only `np` pixels. `MODE`: how lanes get their input (see
/// [`DIRECT`], [`PERM`], [`BCAST`]).
///
/// # Safety
/// AVX-512F; the row's pointers and geometry as [`dw_rows_lanes`] sets them up;
/// pixels `ox0..ox0 + (P - 1) * v + np` inside the piece `r.px`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn lanes_tile<const P: usize, const CHECKED: bool, const MODE: u8>(r: &LaneRow, l: &Lanes, bias: __m512, ox0: usize, np: usize) {
    let g = &r.g;
    let mut acc = [bias; P];
    let full: __mmask16 = ((1u32 << l.extent) - 1) as __mmask16;
    let step = (l.v * g.stride_w) as isize;
    // Which floats of a vector's load lie inside the row: one pixel's are all in
    // or all out; several pixels' take the per-float range.
    let mask = |col: isize| {
        if l.v == 1 {
            if (col as usize) < g.in_w {
                full
            } else {
                0
            }
        } else {
            column_mask(col, r.in_c, g.in_w, l.src, l.extent)
        }
    };
    // The masks depend on the filter column and the vector, not the filter row:
    // worked out once per tile (for filters up to 16 wide), not per tap.
    let mut masks = [0 as __mmask16; 64];
    let pre = CHECKED && g.k_w * P <= 64;
    if pre {
        for kx in 0..g.k_w {
            let col = (ox0 * g.stride_w + kx * g.dil_w) as isize - g.pad_left as isize;
            for p in 0..P {
                masks[kx * P + p] = mask(col + p as isize * step);
            }
        }
    }
    for ky in r.ky.0..r.ky.1 {
        let line = r.x.wrapping_add((ky - r.ky.0) * g.dil_h * r.in_row);
        for kx in 0..g.k_w {
            // SAFETY: the block's `nl` weights of tap (ky, kx) lie within k_h * k_w * out_c.
            let mut wv = unsafe { _mm512_maskz_loadu_ps(l.wmask, r.w.add((ky * g.k_w + kx) * r.out_c + l.c0)) };
            if l.v > 1 {
                wv = _mm512_permutexvar_ps(l.widx, wv);
            }
            let mut col = (ox0 * g.stride_w + kx * g.dil_w) as isize - g.pad_left as isize;
            for (p, a) in acc.iter_mut().enumerate() {
                let m = match (CHECKED, pre) {
                    (false, _) => full,
                    (true, true) => masks[kx * P + p],
                    (true, false) => mask(col),
                };
                let at = line.wrapping_offset(col * r.in_c as isize + l.src as isize);
                let xv = if MODE == BCAST {
                    if m == 0 {
                        _mm512_setzero_ps()
                    } else {
                        // SAFETY: the one float lies in a column inside the row
                        // (checked here, or interior by the caller), channel src < in_c.
                        _mm512_set1_ps(unsafe { *at })
                    }
                } else {
                    // SAFETY: the unmasked floats lie in columns inside the row (checked
                    // here, or interior by the caller) and channels below in_c; masked-off
                    // ones are not accessed, so the address is formed with wrapping arithmetic.
                    let xv = unsafe { _mm512_maskz_loadu_ps(m, at) };
                    if MODE == PERM {
                        _mm512_permutexvar_ps(l.idx, xv)
                    } else {
                        xv
                    }
                };
                *a = _mm512_fmadd_ps(xv, wv, *a);
                col += step;
            }
        }
    }
    for (p, a) in acc.iter().enumerate() {
        let v = _mm512_min_ps(_mm512_max_ps(*a, r.lo), r.hi);
        let px = ox0 + p * l.v - r.px.0;
        let n = if p + 1 == P { np } else { l.v };
        // SAFETY: pixels of the piece (contract), channels c0..c0 + nl, which `o` holds.
        unsafe {
            if l.v == 1 {
                _mm512_mask_storeu_ps(r.o.add(px * r.out_c + l.c0), l.wmask, v);
            } else {
                let v = if l.s == r.out_c { v } else { _mm512_permutexvar_ps(l.oidx, v) };
                _mm512_mask_storeu_ps(r.o.add(px * r.out_c), ((1u32 << (n * r.out_c)) - 1) as __mmask16, v);
            }
        }
    }
}

/// Lanes load their own floats (one load per vector).
const DIRECT: u8 = 0;
/// Lanes pick their floats from one load by `idx` (a permutation).
const PERM: u8 = 1;
/// Every lane takes the same float (one input channel over the block).
const BCAST: u8 = 2;

/// One channel block over a piece of a row: interior pixels (`[x_lo, x_hi)`) in
/// tiles of 8 vectors (8 accumulator chains keep both FMA pipes busy), then 4,
/// then single vectors; edge pixels checked. A piece whose interior is too
/// short for an 8-vector tile (narrow maps) runs wholly in checked tiles of 4
/// vectors: the weights of a tap are then loaded once per 4 vectors, not per pixel.
///
/// # Safety
/// As [`lanes_tile`], for the whole piece.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn lanes_row<const MODE: u8>(r: &LaneRow, l: &Lanes, bias: __m512, (x_lo, x_hi): (usize, usize)) {
    let (from, to) = r.px;
    let v = l.v;
    let x_hi = x_hi.min(to);
    let mut ox = from;
    // SAFETY: (all calls) tiles without checks only where every pixel's taps lie
    // inside the row ([x_lo, x_hi)); the others checked; stores within the piece.
    unsafe {
        if x_hi < x_lo.max(from) + 8 * v {
            while ox + 4 * v <= to {
                lanes_tile::<4, true, MODE>(r, l, bias, ox, v);
                ox += 4 * v;
            }
        }
        while ox < to {
            if ox >= x_lo && ox + 8 * v <= x_hi {
                lanes_tile::<8, false, MODE>(r, l, bias, ox, v);
                ox += 8 * v;
            } else if ox >= x_lo && ox + 4 * v <= x_hi {
                lanes_tile::<4, false, MODE>(r, l, bias, ox, v);
                ox += 4 * v;
            } else if ox >= x_lo && ox + v <= x_hi {
                lanes_tile::<1, false, MODE>(r, l, bias, ox, v);
                ox += v;
            } else {
                lanes_tile::<1, true, MODE>(r, l, bias, ox, v.min(to - ox));
                ox += v;
            }
        }
    }
}

/// Depthwise convolution with AVX-512 for a channel multiplier above 1 (read
/// straight from the input: each lane's input float picked by a permutation of
/// one load) and for at most 8 output channels (several pixels side by side in
/// one vector: 2 of 8 channels, 4 of 3-4, ... as far as one 16-float load spans
/// their input). Neither then needs a copy of the input with its channels
/// repeated, and a few channels do not leave most lanes idle. `[batch, T, 1, C]`
/// maps with Nx1 filters run here at any multiplier, taken as rows along T.
/// Output rows `rows` (row = batch * out_h + oy) into `out`, which holds just
/// them. Each output sums bias, then the taps by filter row and column (a tap
/// in the padding adds a zero at the edges): the same for any split of rows.
///
/// # Safety
/// AVX-512F available. `input` holds `[batch, in_h, in_w, in_c]`, `w` holds
/// `k_h * k_w * in_c * mult` values, `bias` (if any) `in_c * mult`, `out`
/// `rows.len() * out_w * in_c * mult`, `rows.end <= batch * out_h`, and
/// `g.indices_fit(in_c * mult)`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn dw_rows_lanes(
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
    // A [batch, T, 1, C] map with an Nx1 filter runs as one row per batch item.
    let column = super::column_as_row(g);
    let gt = column.unwrap_or(*g);
    let in_img = g.in_h * g.in_w * in_c;
    let x_lo = gt.pad_left.div_ceil(gt.stride_w).min(gt.out_w);
    let span = (gt.k_w - 1) * gt.dil_w;
    let x_hi = if gt.in_w + gt.pad_left > span { ((gt.in_w + gt.pad_left - span - 1) / gt.stride_w + 1).min(gt.out_w) } else { 0 };
    let cols = (x_lo, x_hi.max(x_lo));
    // Pixels per vector: as many as fit 16 lanes and one load's reach.
    let (s, v) = if out_c <= 8 {
        let s = out_c.next_power_of_two();
        let mut v = 16 / s;
        while v > 1 && (v - 1) * gt.stride_w * in_c + in_c > 16 {
            v /= 2;
        }
        if v == 1 {
            (16, 1)
        } else {
            (s, v)
        }
    } else {
        (16, 1)
    };
    let (lo, hi) = (_mm512_set1_ps(clamp.min), _mm512_set1_ps(clamp.max));
    let mut c0 = 0;
    while c0 < out_c {
        let nl = (out_c - c0).min(s);
        let (src, last) = (c0 / mult, (c0 + nl - 1) / mult);
        let extent = (v - 1) * gt.stride_w * in_c + last - src + 1;
        let idx: [i32; 16] = std::array::from_fn(|lane| {
            let (q, sl) = (lane / s, lane % s);
            if sl < nl {
                (q * gt.stride_w * in_c + (c0 + sl) / mult - src) as i32
            } else {
                0
            }
        });
        // Lanes that load their own float need no permutation (multiplier 1 with
        // the pixels' channels adjacent: stride 1, a channel count dividing 16).
        let perm = idx.iter().enumerate().any(|(lane, &i)| lane % s < nl && i as usize != lane);
        let widx: [i32; 16] = std::array::from_fn(|lane| (lane % s) as i32);
        let oidx: [i32; 16] = std::array::from_fn(|j| if j < v * out_c { ((j / out_c) * s + j % out_c) as i32 } else { 0 });
        // SAFETY: the index arrays are local, 16 i32 each.
        let l = unsafe {
            Lanes {
                v,
                s,
                c0,
                src,
                extent,
                idx: _mm512_loadu_si512(idx.as_ptr().cast()),
                widx: _mm512_loadu_si512(widx.as_ptr().cast()),
                wmask: ((1u32 << nl) - 1) as __mmask16,
                oidx: _mm512_loadu_si512(oidx.as_ptr().cast()),
            }
        };
        let b = match bias {
            // SAFETY: the bias holds out_c values; the mask keeps to c0..c0 + nl.
            Some(b) => unsafe { _mm512_maskz_loadu_ps(l.wmask, b.as_ptr().add(c0)) },
            None => _mm512_setzero_ps(),
        };
        let b = if v > 1 { _mm512_permutexvar_ps(l.widx, b) } else { b };
        let mut row = rows.start;
        while row < rows.end {
            // Pieces of rows of `gt`: (batch item, output row, first and end pixel).
            let (n, oy, from, to, next) = if column.is_some() {
                // The old rows are pixels of the item's single row.
                let n = row / g.out_h;
                let end = rows.end.min((n + 1) * g.out_h);
                (n, 0, row - n * g.out_h, end - n * g.out_h, end)
            } else {
                (row / g.out_h, row % g.out_h, 0, g.out_w, row + 1)
            };
            // Filter rows inside the input: a contiguous range, as the input row grows with ky.
            let inside = |ky: usize| gt.in_y(oy, ky).is_some();
            let ky_lo = (0..gt.k_h).find(|&ky| inside(ky)).unwrap_or(gt.k_h);
            let ky_hi = (ky_lo..gt.k_h).find(|&ky| !inside(ky)).unwrap_or(gt.k_h);
            let iy0 = gt.in_y(oy, ky_lo).unwrap_or(0);
            let r = LaneRow {
                // n < batch and iy0 < in_h: the row lies inside `input`.
                x: input.as_ptr().wrapping_add(n * in_img + iy0 * gt.in_w * in_c),
                ky: (ky_lo, ky_hi),
                in_c,
                in_row: gt.in_w * in_c,
                out_c,
                w: w.as_ptr(),
                g: gt,
                lo,
                hi,
                o: out[(row - rows.start) * g.out_w * out_c..].as_mut_ptr(),
                px: (from, to),
            };
            // SAFETY: the row's pointers and geometry as set up above.
            unsafe {
                match (extent, perm) {
                    (1, _) => lanes_row::<BCAST>(&r, &l, b, cols),
                    (_, true) => lanes_row::<PERM>(&r, &l, b, cols),
                    (_, false) => lanes_row::<DIRECT>(&r, &l, b, cols),
                }
            }
            row = next;
        }
        c0 += nl;
    }
}

/// Floats of the stack buffer [`dw_rows_pixel_lanes`] builds its input lines in
/// (16 KiB): a row piece is as wide as its lines fit here.
const PIXEL_LINES: usize = 4096;

/// Whether [`dw_rows_pixel_lanes`] serves a depthwise layer: one input channel under
/// a multiplier that is a multiple of 8 (first layers on gray images and
/// spectrograms), horizontal stride 1 or 2, and a row long enough to fill a
/// vector of pixels. There every output channel would otherwise take the one
/// input float broadcast per tap (or two pixels per vector with a permutation per
/// tap); with pixels along the lanes each input vector feeds 8 channels' FMAs.
pub(super) fn pixel_lanes_fit(in_c: usize, mult: usize, g: &Window) -> bool {
    in_c == 1
        && mult.is_multiple_of(8)
        && !mult.is_multiple_of(16)
        && matches!(g.stride_w, 1 | 2)
        && g.out_w >= 16
        && g.k_w > 0
        && g.k_h > 0
        && ring_rows(g) <= RING_MAX
        && pixel_piece(g) >= 16
}

/// Most input rows [`dw_rows_pixel_lanes`] keeps lines of.
const RING_MAX: usize = 32;

/// Input rows one output row reads (from its first filter row's to its last's):
/// the lines of that many rows are kept, so consecutive output rows reuse them.
fn ring_rows(g: &Window) -> usize {
    (g.k_h - 1) * g.dil_h + 1
}

/// Output pixels per piece of a row in [`dw_rows_pixel_lanes`]: the most (a
/// multiple of 48, the widest tile, else of 16) whose `k_h * stride` input lines
/// fit [`PIXEL_LINES`] for every input row an output row reads ([`ring_rows`]);
/// 0 if not even 16 do.
fn pixel_piece(g: &Window) -> usize {
    let per_line = PIXEL_LINES / (ring_rows(g) * g.stride_w).max(1) / 16 * 16;
    let reach = ((g.k_w - 1) * g.dil_w / g.stride_w).div_ceil(16) * 16;
    let most = per_line.saturating_sub(reach);
    let want = g.out_w.div_ceil(16) * 16;
    if want <= most {
        want
    } else if most >= 48 {
        most / 48 * 48
    } else {
        most / 16 * 16
    }
}

/// Output rows `rows` (row = batch * out_h + oy) of a depthwise convolution of
/// one input channel under a multiplier `c` (a multiple of 8) into `out`, which
/// holds just them, with pixels along the lanes: per filter row, the input row
/// is split into its stride phases (even and odd columns at stride 2) in
/// zero-padded lines on the stack, so every tap's inputs for 16 consecutive
/// pixels are one unaligned load, which feeds 8 output channels' multiply-adds
/// with the weights broadcast; tiles of up to 48 pixels x 8 channels are then
/// transposed to the channel-minor output. The lines of an input row stay in the
/// buffer while the next output rows read it (each is built once at vertical
/// stride 1, not once per filter row). `[batch, T, 1, 1]` maps with Nx1
/// filters run as one row per batch item, along T. Returns false, leaving `out`
/// unspecified, without AVX-512, for a geometry [`pixel_lanes_fit`] refuses, or
/// if a range check fails; the caller then takes another path.
///
/// Every output sums bias, then the taps by filter row and column (a tap in the
/// padding adds a zero): the same for any split of rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn dw_rows_pixel_lanes(
    input: &[f32],
    c: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Window,
    clamp: Clamp,
    out: &mut [f32],
    rows: std::ops::Range<usize>,
) -> bool {
    let column = super::column_as_row(g);
    let gt = column.unwrap_or(*g);
    if !depthwise_masks_tails() || !pixel_lanes_fit(1, c, &gt) || gt.in_w == 0 {
        return false;
    }
    if w.len() < g.k_h * g.k_w * c
        || bias.is_some_and(|b| b.len() < c)
        || !crate::holds(input.len(), &[g.batch, g.in_h, g.in_w])
        || !crate::holds(out.len(), &[rows.len(), g.out_w, c])
        || crate::product(&[g.batch, g.out_h]).is_none_or(|total| rows.end > total)
    {
        return false;
    }
    let piece = pixel_piece(&gt);
    let s = gt.stride_w;
    let reach = (gt.k_w - 1) * gt.dil_w / s;
    let mut lines = [0.0f32; PIXEL_LINES];
    // Which input row (index over the batch) and piece (first pixel, line length)
    // each slot's lines hold.
    let mut held = [(usize::MAX, 0usize, 0usize); RING_MAX];
    let ring = ring_rows(&gt);
    let mut row = rows.start;
    while row < rows.end {
        // Pieces of rows of `gt`: (batch item, output row, pixels, next row of `g`);
        // on a column map each item is one row whose pixels are the rows of `g`.
        let (n, oy, px, next) = if column.is_some() {
            let n = row / g.out_h;
            let end = rows.end.min((n + 1) * g.out_h);
            (n, 0, row - n * g.out_h..end - n * g.out_h, end)
        } else {
            (row / g.out_h, row % g.out_h, 0..g.out_w, row + 1)
        };
        let o = &mut out[(row - rows.start) * g.out_w * c..(next - rows.start) * g.out_w * c];
        let ky_lo = (0..gt.k_h).find(|&ky| gt.in_y(oy, ky).is_some()).unwrap_or(gt.k_h);
        let ky_hi = (ky_lo..gt.k_h).find(|&ky| gt.in_y(oy, ky).is_none()).unwrap_or(gt.k_h);
        // The first input row read, over the batch (the rows of one item lie inside
        // the input: checked above).
        let iy0 = gt.in_y(oy, ky_lo).map_or(0, |y| n * gt.in_h + y);
        let mut p0 = px.start;
        while p0 < px.end {
            let np = piece.min(px.end - p0);
            // Each line covers the piece's pixels rounded up to whole vectors, plus
            // the columns the widest tap reaches past them.
            let len = (np.div_ceil(16) * 16 + reach).div_ceil(16) * 16;
            debug_assert!(ring * s * len <= PIXEL_LINES);
            let r = PixelRow { lines: lines.as_mut_ptr(), len, ring, iy0, w: w.as_ptr(), bias: bias.map(|b| b.as_ptr()), c, g: gt, ky: (ky_lo, ky_hi), clamp };
            for ky in ky_lo..ky_hi {
                let iy = iy0 + (ky - ky_lo) * gt.dil_h;
                if held[iy % ring] != (iy, p0, len) {
                    held[iy % ring] = (iy, p0, len);
                    // SAFETY: AVX-512F present (checked); input row iy lies inside the
                    // item's image (ky_lo..ky_hi are the filter rows in_y accepts), so
                    // inside `input` (its size checked), and the loads are masked to
                    // its columns; the slot's lines fit the buffer (pixel_piece).
                    unsafe { pixel_lines(&r, input.as_ptr().add(iy * gt.in_w), iy % ring, p0) };
                }
            }
            // SAFETY: AVX-512F present; the lines of every filter row read were filled
            // above for this piece; weights hold taps * c floats, the bias c
            // (checked); `o` holds px.len() pixels of c floats, of which this piece
            // writes np from p0.
            unsafe { pixel_piece_run(&r, o.as_mut_ptr().add((p0 - px.start) * c), np) };
            p0 += np;
        }
        row = next;
    }
    true
}

/// What stays the same across one piece of an output row of [`dw_rows_pixel_lanes`].
struct PixelRow {
    /// Input row `iy` (over the batch), stride phase `f`: the line numbered
    /// `(iy % ring) * stride + f`, `len` floats each; its float `j` is input column
    /// `(p0 + j) * stride + f - pad_left` (zero outside the row), `p0` the piece's
    /// first pixel.
    lines: *mut f32,
    len: usize,
    ring: usize,
    /// The input row under filter row `ky.0`.
    iy0: usize,
    w: *const f32,
    bias: Option<*const f32>,
    /// Output channels (the multiplier).
    c: usize,
    g: Window,
    ky: (usize, usize),
    clamp: Clamp,
}

/// Fills the piece's lines in slot `slot` (see [`PixelRow::lines`]) from input row `row`.
///
/// # Safety
/// AVX-512F; `row` must be readable for `in_w` floats; the slot's lines must fit the buffer.
#[target_feature(enable = "avx512f")]
unsafe fn pixel_lines(r: &PixelRow, row: *const f32, slot: usize, p0: usize) {
    let g = &r.g;
    let s = g.stride_w;
    // Which of 16 floats from input column `col` lie inside the row.
    let inside = |col: isize| -> __mmask16 {
        if col >= 0 && col + 16 <= g.in_w as isize {
            return 0xFFFF;
        }
        let lo = (-col).clamp(0, 16) as u32;
        let hi = (g.in_w as isize - col).clamp(0, 16) as u32;
        if hi <= lo {
            0
        } else {
            (((1u32 << (hi - lo)) - 1) << lo) as __mmask16
        }
    };
    let even: [i32; 16] = std::array::from_fn(|j| 2 * j as i32);
    let odd: [i32; 16] = std::array::from_fn(|j| 2 * j as i32 + 1);
    // SAFETY: local arrays of 16 i32.
    let (even, odd) = unsafe { (_mm512_loadu_si512(even.as_ptr().cast()), _mm512_loadu_si512(odd.as_ptr().cast())) };
    let dst = r.lines.wrapping_add(slot * s * r.len);
    for j in (0..r.len).step_by(16) {
        let col = ((p0 + j) * s) as isize - g.pad_left as isize;
        // SAFETY: the loads are masked to columns inside the row (readable by
        // contract; the address of the masked-off ones is formed with wrapping
        // arithmetic and not accessed); the stores lie in the piece's lines.
        unsafe {
            if s == 1 {
                _mm512_storeu_ps(dst.add(j), _mm512_maskz_loadu_ps(inside(col), row.wrapping_offset(col)));
            } else {
                let a = _mm512_maskz_loadu_ps(inside(col), row.wrapping_offset(col));
                let b = _mm512_maskz_loadu_ps(inside(col + 16), row.wrapping_offset(col + 16));
                _mm512_storeu_ps(dst.add(j), _mm512_permutex2var_ps(a, even, b));
                _mm512_storeu_ps(dst.add(r.len + j), _mm512_permutex2var_ps(a, odd, b));
            }
        }
    }
}

/// The `np` pixels of one piece into `o` (pixel 0 of the piece at `o`): tiles of
/// 48, 32 or 16 pixels (the last one's tail masked) per group of 8 channels.
///
/// # Safety
/// AVX-512F; the lines filled by [`pixel_lines`] for this piece; `o` writable for
/// `np` pixels of `r.c` floats.
#[target_feature(enable = "avx512f")]
unsafe fn pixel_piece_run(r: &PixelRow, o: *mut f32, np: usize) {
    let mut j = 0;
    while j < np {
        let here = (np - j).min(48);
        for c0 in (0..r.c).step_by(8) {
            // SAFETY: the tile reads lines j..j + 16 * T + reach (within len) and
            // writes pixels j..j + here of channels c0..c0 + 8 (contract).
            unsafe {
                match here.div_ceil(16) {
                    1 => pixel_tile::<1>(r, j, c0, here, o),
                    2 => pixel_tile::<2>(r, j, c0, here, o),
                    _ => pixel_tile::<3>(r, j, c0, here, o),
                }
            }
        }
        j += here;
    }
}

/// `16 * T` pixels from piece pixel `j` (the first `np` stored) x channels
/// `c0..c0 + 8`, accumulated with pixels along the lanes and transposed on the
/// way out.
///
/// # Safety
/// As [`pixel_piece_run`], with `np <= 16 * T` pixels from `j` inside the piece.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn pixel_tile<const T: usize>(r: &PixelRow, j: usize, c0: usize, np: usize, o: *mut f32) {
    let g = &r.g;
    let s = g.stride_w;
    let mut acc = [[_mm512_setzero_ps(); T]; 8];
    if let Some(b) = r.bias {
        for (m, a) in acc.iter_mut().enumerate() {
            // SAFETY: the bias holds c floats; c0 + m < c.
            *a = [_mm512_set1_ps(unsafe { *b.add(c0 + m) }); T];
        }
    }
    for ky in r.ky.0..r.ky.1 {
        for kx in 0..g.k_w {
            let off = kx * g.dil_w;
            let slot = (r.iy0 + (ky - r.ky.0) * g.dil_h) % r.ring;
            let line = r.lines.wrapping_add((slot * s + off % s) * r.len + j + off / s);
            let mut xv = [_mm512_setzero_ps(); T];
            for (t, v) in xv.iter_mut().enumerate() {
                // SAFETY: j + 16 * T + off / s <= len (the line covers the piece's
                // vectors plus the widest tap's reach).
                *v = unsafe { _mm512_loadu_ps(line.add(16 * t)) };
            }
            let wt = r.w.wrapping_add((ky * g.k_w + kx) * r.c + c0);
            for (m, a) in acc.iter_mut().enumerate() {
                // SAFETY: tap (ky, kx), channel c0 + m < c: inside the k_h * k_w * c weights.
                let wv = _mm512_set1_ps(unsafe { *wt.add(m) });
                for t in 0..T {
                    a[t] = _mm512_fmadd_ps(xv[t], wv, a[t]);
                }
            }
        }
    }
    let (lo, hi) = (_mm512_set1_ps(r.clamp.min), _mm512_set1_ps(r.clamp.max));
    // Pixel q of each 128-bit block pairs with the same pixel of the next block:
    // after the unpacks and shuffles, vector q holds pixels q, q + 4, q + 8, q + 12
    // (channels 0-3 in `u[q]`, 4-7 in `u[q + 4]`).
    let idx_a: [i32; 16] = [0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23];
    let idx_b: [i32; 16] = [8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31];
    // SAFETY: local arrays of 16 i32.
    let (idx_a, idx_b) = unsafe { (_mm512_loadu_si512(idx_a.as_ptr().cast()), _mm512_loadu_si512(idx_b.as_ptr().cast())) };
    // Vector t of every channel: the index runs across the inner arrays.
    #[allow(clippy::needless_range_loop)]
    for t in 0..T {
        let a: [__m512; 8] = std::array::from_fn(|m| _mm512_min_ps(_mm512_max_ps(acc[m][t], lo), hi));
        let t0 = _mm512_unpacklo_ps(a[0], a[1]);
        let t1 = _mm512_unpackhi_ps(a[0], a[1]);
        let t2 = _mm512_unpacklo_ps(a[2], a[3]);
        let t3 = _mm512_unpackhi_ps(a[2], a[3]);
        let t4 = _mm512_unpacklo_ps(a[4], a[5]);
        let t5 = _mm512_unpackhi_ps(a[4], a[5]);
        let t6 = _mm512_unpacklo_ps(a[6], a[7]);
        let t7 = _mm512_unpackhi_ps(a[6], a[7]);
        let u = [
            _mm512_shuffle_ps::<0x44>(t0, t2),
            _mm512_shuffle_ps::<0xEE>(t0, t2),
            _mm512_shuffle_ps::<0x44>(t1, t3),
            _mm512_shuffle_ps::<0xEE>(t1, t3),
            _mm512_shuffle_ps::<0x44>(t4, t6),
            _mm512_shuffle_ps::<0xEE>(t4, t6),
            _mm512_shuffle_ps::<0x44>(t5, t7),
            _mm512_shuffle_ps::<0xEE>(t5, t7),
        ];
        for q in 0..4 {
            // Pixels q and q + 4, then q + 8 and q + 12, 8 channels each.
            let pair = [_mm512_permutex2var_ps(u[q], idx_a, u[q + 4]), _mm512_permutex2var_ps(u[q], idx_b, u[q + 4])];
            for (h, v) in pair.iter().enumerate() {
                let p = 16 * t + 8 * h + q;
                // The low half goes to pixel p, the high half to pixel p + 4: stored
                // masked from 8 floats before that pixel's channels, so the lanes
                // line up without extracting the half.
                let base = o.wrapping_add((j + p) * r.c + c0);
                // SAFETY: pixels below np of this tile, channels c0..c0 + 8 (contract);
                // masked-off lanes are not accessed.
                unsafe {
                    if p < np {
                        _mm512_mask_storeu_ps(base, 0x00FF, *v);
                    }
                    if p + 4 < np {
                        _mm512_mask_storeu_ps(base.wrapping_add(4 * r.c).wrapping_sub(8), 0xFF00, *v);
                    }
                }
            }
        }
    }
}

/// Whether [`dw_rows_flat`] serves a multiplier-1 depthwise layer of `c` channels:
/// 8 or 24 channels (a whole number of half vectors per pixel, so the channel
/// pattern repeats every 16 or 48 floats), 3- or 5-wide filters at horizontal
/// stride 1 without horizontal dilation, at most 5 tall (the laid-out weights stay
/// on the stack), on maps at least 16 pixels wide (narrower ones stay on the
/// kernels tuned for them).
pub(super) fn flat_fit(c: usize, g: &Window) -> bool {
    matches!(c, 8 | 16 | 24) && g.stride_w == 1 && g.dil_w == 1 && matches!(g.k_w, 3 | 5) && (1..=5).contains(&g.k_h) && g.out_w >= 16
}

/// Output rows `rows` of a multiplier-1 depthwise convolution that [`flat_fit`]
/// (`out` holding rows `rows.start..`), with AVX-512, each row taken as one flat
/// run of floats. At stride 1 the input under tap `kx` of an output float is the
/// one `kx * c` floats further along the input row, whatever its channel, so a
/// tile of output vectors reads whole input vectors: those at a half-vector offset
/// (`kx * c` is a multiple of 8 floats) are put together from two loaded ones by a
/// lane shuffle. Every lane does useful work: the per-pixel tiles left half of each
/// vector idle at 8 channels (a pixel pair per vector in the lane kernel needed a
/// permutation per load) and a quarter at 24, and loaded each pixel across a cache
/// line at 96 bytes apart. Pixels whose taps leave the row (the borders) and the
/// few past the last whole tile go through [`dw_edge_avx512`], one at a time.
/// Returns false, leaving `out` unspecified, without AVX-512, for another
/// geometry, or if a range check fails; the caller then takes another path.
///
/// Every output sums bias, then the taps inside the input by filter row and
/// column, as the other kernels do.
#[allow(clippy::too_many_arguments)]
pub(super) fn dw_rows_flat(
    input: &[f32],
    c: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Window,
    clamp: Clamp,
    out: &mut [f32],
    rows: std::ops::Range<usize>,
) -> bool {
    if !depthwise_masks_tails() || !flat_fit(c, g) || g.k_h == 0 {
        return false;
    }
    let taps = g.k_h * g.k_w;
    if w.len() < taps * c || bias.is_some_and(|b| b.len() < c) || out.len() < rows.len() * g.out_w * c {
        return false;
    }
    // Lane l of vector j of a period (16 / 8 = 2 pixels at 8 channels, 48 / 16 = 3
    // vectors at 24) is channel (16 j + l) % c: the weights and bias laid out so,
    // once per call, each tap's `period` vectors side by side.
    let period = c / gcd16(c);
    let lay = |src: &[f32], j: usize| -> __m512 {
        let mut v = [0.0f32; 16];
        for (l, f) in v.iter_mut().enumerate() {
            *f = src[(16 * j + l) % c];
        }
        // SAFETY: an unaligned load of a 16-float array.
        unsafe { _mm512_loadu_ps(v.as_ptr()) }
    };
    // On the stack (at most 5x5 taps of 3 vectors): a run allocates nothing.
    // SAFETY: AVX-512F present (checked above).
    let zv = unsafe { _mm512_setzero_ps() };
    let mut wv = [zv; 75];
    for (i, v) in wv.iter_mut().enumerate().take(taps * period) {
        *v = lay(&w[i / period * c..], i % period);
    }
    let zero = [0.0f32; 24];
    let mut bv = [zv; 3];
    for (j, v) in bv.iter_mut().enumerate().take(period) {
        *v = lay(bias.unwrap_or(&zero[..c]), j);
    }
    let in_row = g.in_w * c;
    let x_lo = g.pad_left;
    let x_hi = (g.in_w + g.pad_left).saturating_sub(g.k_w - 1).min(g.out_w);
    for row in rows.clone() {
        let (n, oy) = (row / g.out_h, row % g.out_h);
        let o = &mut out[(row - rows.start) * g.out_w * c..][..g.out_w * c];
        let ky_lo = (0..g.k_h).find(|&ky| g.in_y(oy, ky).is_some());
        let ky_hi = (0..g.k_h).rev().find(|&ky| g.in_y(oy, ky).is_some()).map_or(0, |k| k + 1);
        // First input float of the rows read (filter rows ky_lo..ky_hi, inside the image).
        let first = match ky_lo.and_then(|k| g.in_y(oy, k).map(|y| (k, y))) {
            Some((k, y)) => {
                let first = (n * g.in_h + y) * in_row;
                if first + ((ky_hi - 1 - k) * g.dil_h + 1) * in_row > input.len() {
                    return false;
                }
                Some(first)
            }
            None => None,
        };
        let ky = (ky_lo.unwrap_or(0), ky_hi);
        let mut ox = 0;
        while ox < g.out_w {
            if let Some(first) = first.filter(|_| ox >= x_lo) {
                // Input pixel under tap 0 of output pixel ox: ox - pad_left (inside).
                let x = input[first + (ox - x_lo) * c..].as_ptr();
                let fr = FlatRow { x, row_step: g.dil_h * in_row, ky, w: wv.as_ptr(), bias: bv.as_ptr(), clamp };
                let dst = o[ox * c..].as_mut_ptr();
                // Pixels per tile: 8 vectors (16 pixels) at 8 channels, 6 (4 pixels) at 24.
                let (big, small) = match c {
                    8 => (24, 2),
                    16 => (12, 1),
                    _ => (8, 2),
                };
                macro_rules! tile {
                    ($c:literal, $t:literal) => {
                        // SAFETY: AVX-512F present; every pixel of the tile has its taps
                        // inside the row (ox >= x_lo, ox + pixels <= x_hi), in the rows
                        // ky range-checked above; weights and bias laid out above for
                        // `taps` taps; stores to the tile's pixels inside `o`.
                        unsafe {
                            if g.k_w == 3 {
                                dw_flat_tile::<$c, 3, $t>(&fr, dst)
                            } else {
                                dw_flat_tile::<$c, 5, $t>(&fr, dst)
                            }
                        }
                    };
                }
                if ox + big <= x_hi {
                    match c {
                        8 => tile!(8, 12),
                        16 => tile!(16, 12),
                        _ => tile!(24, 12),
                    }
                    ox += big;
                    continue;
                }
                if ox + small <= x_hi {
                    match c {
                        8 => tile!(8, 1),
                        16 => tile!(16, 1),
                        _ => tile!(24, 3),
                    }
                    ox += small;
                    continue;
                }
            }
            // A border pixel, or one past the last whole tile: taps checked.
            let kx_lo = (0..g.k_w).find(|&kx| g.in_x(ox, kx).is_some());
            let kx_hi = (0..g.k_w).rev().find(|&kx| g.in_x(ox, kx).is_some()).map_or(0, |k| k + 1);
            let (taps_y, taps_x, start) = match (first, kx_lo) {
                (Some(first), Some(kx_lo)) => (ky, (kx_lo, kx_hi), first + (ox + kx_lo - x_lo) * c),
                // No tap lands inside the input: the bias alone, nothing read.
                _ => ((0, 0), (0, 0), 0),
            };
            // SAFETY: AVX-512F present; the taps read lie inside the rows range-checked
            // above and inside the row (kx_lo..kx_hi); weights of taps < k_h * k_w;
            // writes to one pixel of `o`.
            unsafe {
                dw_edge_avx512(input.as_ptr().wrapping_add(start), c, in_row, g, taps_y, taps_x, w.as_ptr(), bias, c, c, clamp, o[ox * c..].as_mut_ptr())
            };
            ox += 1;
        }
    }
    true
}

/// The greatest common divisor of `c` and 16: `c / gcd16(c)` vectors hold a whole
/// number of pixels.
const fn gcd16(c: usize) -> usize {
    let mut d = 16;
    while !c.is_multiple_of(d) {
        d /= 2;
    }
    d
}

/// What stays the same across the tiles of one output row of [`dw_rows_flat`].
struct FlatRow {
    /// The input pixel under tap (ky.0, 0) of the tile's first output pixel.
    x: *const f32,
    /// Floats between the input rows of consecutive filter rows.
    row_step: usize,
    /// The filter rows inside the image.
    ky: (usize, usize),
    /// Weights laid out by [`dw_rows_flat`]: tap t's vector j at `t * period + j`.
    w: *const __m512,
    /// The bias laid out the same way (`period` vectors).
    bias: *const __m512,
    clamp: Clamp,
}

/// `T` output vectors (`16 T / C` pixels, `T` a multiple of the period `C / 8`)
/// of a [`dw_rows_flat`] row from `r.x`, stored from `o`: per filter row, the
/// `T + (KW - 1) C / 16` input vectors under the tile are loaded once, and tap `kx`
/// of output vector `j` reads the 16 floats `16 j + kx C` along: a loaded vector,
/// or (at a half-vector offset) the upper half of one and the lower half of the next.
///
/// # Safety
/// AVX-512F; the tile's pixels have all their taps inside the row, in filter rows
/// `r.ky` readable from `r.x` at `r.row_step` apart; `r.w` holds the laid-out
/// weights of filter rows up to `r.ky.1` and `r.bias` one period; `o` is writable
/// for `16 T` floats.
#[target_feature(enable = "avx512f")]
unsafe fn dw_flat_tile<const C: usize, const KW: usize, const T: usize>(r: &FlatRow, o: *mut f32) {
    let period = C / gcd16(C);
    let mut acc = [_mm512_setzero_ps(); T];
    for (j, a) in acc.iter_mut().enumerate() {
        // SAFETY: `period` bias vectors (contract).
        *a = unsafe { *r.bias.add(j % period) };
    }
    // At most T + 6 input vectors (24 channels, 5 wide).
    let nv = T + (KW - 1) * C / 16;
    for ky in r.ky.0..r.ky.1 {
        let xr = r.x.wrapping_add((ky - r.ky.0) * r.row_step);
        let mut v = [_mm512_setzero_ps(); 32];
        for (i, vi) in v.iter_mut().enumerate().take(nv) {
            // SAFETY: the tile's input in this filter row is `16 T + (KW - 1) C`
            // floats from `xr` (its pixels and the KW - 1 after them), all inside the
            // row (contract).
            *vi = unsafe { _mm512_loadu_ps(xr.add(16 * i)) };
        }
        for kx in 0..KW {
            for (j, a) in acc.iter_mut().enumerate() {
                let f = 16 * j + kx * C;
                let xv = if f.is_multiple_of(16) {
                    v[f / 16]
                } else {
                    // Lanes 8..16 of one vector, then lanes 0..8 of the next.
                    _mm512_shuffle_f32x4::<0b01_00_11_10>(v[f / 16], v[f / 16 + 1])
                };
                // SAFETY: tap (ky, kx)'s laid-out vectors (contract).
                let wk = unsafe { *r.w.add((ky * KW + kx) * period + j % period) };
                *a = _mm512_fmadd_ps(xv, wk, *a);
            }
        }
    }
    let (lo, hi) = (_mm512_set1_ps(r.clamp.min), _mm512_set1_ps(r.clamp.max));
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: `o` is writable for 16 T floats (contract).
        unsafe { _mm512_storeu_ps(o.add(16 * j), _mm512_min_ps(_mm512_max_ps(*a, lo), hi)) };
    }
}
