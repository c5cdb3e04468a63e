//! x86-64 (AVX-512F) depthwise convolution kernels of [`super`], reached through
//! [`dw_row_simd`] and `super::dw_small_c`, which check the CPU features and the
//! ranges the kernels read and write.

use super::{depthwise_masks_tails, Window};
use crate::Clamp;
use std::arch::x86_64::*;

/// Channels per pass of [`dw_row_simd`] when the filter is too large for L1.
const DW_GROUP: usize = 64;

/// One output row of a multiplier-1 depthwise convolution, every pixel by the
/// AVX-512 kernels: 8-pixel tiles (stride 1, 3- or 5-wide), 4-pixel tiles where the
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
                if row8 && ox >= x_lo && ox + 8 <= x_hi && ox + 8 <= g.out_w {
                    let start = at(ky_lo, 0, ox) + cg;
                    if start + rows_span + (7 + g.k_w - 1) * c + gw > input.len() {
                        return false;
                    }
                    let x = input[start..].as_ptr();
                    // SAFETY: AVX-512F present (checked above); input reads lie in
                    // [start, start + span + gw) (checked), weight reads below taps * c
                    // from `cg`, writes in 8 pixels of `o` (ox + 8 <= out_w); `row8`
                    // means a 3- or 5-wide filter at stride 1.
                    unsafe {
                        if g.k_w == 3 {
                            dw_row8_avx512::<3>(x, c, in_row, g, (ky_lo, ky_hi), wg, bias_g, gw, c, clamp, dst)
                        } else {
                            dw_row8_avx512::<5>(x, c, in_row, g, (ky_lo, ky_hi), wg, bias_g, gw, c, clamp, dst)
                        }
                    };
                    ox += 8;
                    continue;
                }
                if ox >= x_lo && ox + 4 <= x_hi && ox + 4 <= g.out_w {
                    let start = at(ky_lo, 0, ox) + cg;
                    if start + rows_span + (3 * g.stride_w + span) * c + gw > input.len() {
                        return false;
                    }
                    // SAFETY: as for the 8-pixel tile, for 4 pixels.
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

/// `super::dw_small_c` with AVX-512F: four vectors of 16 / C pixels each.
///
/// # Safety
/// The CPU must support AVX-512F; `x` points at the strip's top-left input pixel
/// and every tap of the strip's 64 floats per pixel row stays inside the input;
/// `o` is writable for 64 floats; `g.k_h * g.k_w <= 49`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn dw_small_c_avx512(x: *const f32, in_c: usize, in_row: usize, g: &Window, wt: &[f32; 16 * 49], bt: &[f32; 16], clamp: Clamp, o: *mut f32) {
    // SAFETY: `bt` is 16 floats.
    let b = unsafe { _mm512_loadu_ps(bt.as_ptr()) };
    let (mut a0, mut a1, mut a2, mut a3) = (b, b, b, b);
    for ky in 0..g.k_h {
        for kx in 0..g.k_w {
            // SAFETY: tap (ky, kx) < 49 indexes 16 floats of `wt`; the input reads,
            // 64 floats from the tap's first pixel, stay inside the input (contract).
            unsafe {
                let xr = x.add(ky * g.dil_h * in_row);
                let wv = _mm512_loadu_ps(wt.as_ptr().add((ky * g.k_w + kx) * 16));
                let xp = xr.add(kx * in_c);
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xp), wv, a0);
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(16)), wv, a1);
                a2 = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(32)), wv, a2);
                a3 = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(48)), wv, a3);
            }
        }
    }
    let (lo, hi) = (_mm512_set1_ps(clamp.min), _mm512_set1_ps(clamp.max));
    // SAFETY: `o` is writable for the strip's 64 outputs (contract).
    unsafe {
        _mm512_storeu_ps(o, _mm512_min_ps(_mm512_max_ps(a0, lo), hi));
        _mm512_storeu_ps(o.add(16), _mm512_min_ps(_mm512_max_ps(a1, lo), hi));
        _mm512_storeu_ps(o.add(32), _mm512_min_ps(_mm512_max_ps(a2, lo), hi));
        _mm512_storeu_ps(o.add(48), _mm512_min_ps(_mm512_max_ps(a3, lo), hi));
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

/// Depthwise tile of 8 output pixels (stride 1, no dilation, a 3- or 5-wide
/// filter) over channels `0..blocked` (the last block of 16 masked), summing the tap rows
/// `taps_y`, with AVX-512: per filter row, the 8 + kw - 1 input vectors are each
/// loaded once and multiplied by every tap that reaches them (`KW` = `g.k_w`).
///
/// # Safety
/// As [`dw_interior_avx512`], for 8 pixels.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_row8_avx512<const KW: usize>(
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
        let mut acc = [b; 8];
        for ky in ky_lo..ky_hi {
            // SAFETY: loads masked to channels c0..blocked: weights of row ky (within
            // k_h * k_w * out_c), and the 8 + KW - 1 input columns of filter row ky,
            // which the caller guarantees readable.
            unsafe {
                let xr = x.add((ky - ky_lo) * g.dil_h * in_row + c0);
                let wr = w.add(ky * KW * out_c + c0);
                let mut wv = [_mm512_setzero_ps(); KW];
                for (kx, v) in wv.iter_mut().enumerate() {
                    *v = _mm512_maskz_loadu_ps(m, wr.add(kx * out_c));
                }
                // Input column `col` feeds pixel `col - kx` through tap `kx`.
                for col in 0..8 + KW - 1 {
                    let xv = _mm512_maskz_loadu_ps(m, xr.add(col * in_c));
                    for kx in 0..KW {
                        if col >= kx && col - kx < 8 {
                            acc[col - kx] = _mm512_fmadd_ps(xv, wv[kx], acc[col - kx]);
                        }
                    }
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            // SAFETY: masked store to channels c0..blocked of pixel p < 8, which `o`
            // is writable for (contract).
            unsafe { _mm512_mask_storeu_ps(o.add(p * out_c + c0), m, _mm512_min_ps(_mm512_max_ps(*a, lo), hi)) };
        }
    }
}
