//! x86-64 kernels of [`super`]: AVX-512F and AVX2+FMA tiles and the AVX-512F
//! and AVX2+FMA batch-1 GEMVs. Reached only through `super::run_tile` and
//! `super::fully_connected`, whose `Isa` token proves the CPU has the features.

use super::Tile;
use crate::Clamp;
use std::arch::x86_64::*;

/// One row against `P` 32-channel panels at once (a batch-1 fully-connected
/// layer): 2P weight vectors per broadcast input, two partial sums each.
///
/// # Safety
/// CPU must support AVX-512F; `a` holds `k` floats; each `b[p]` holds `k * 32`
/// floats and each `bias[p]` 32; `out` is writable for the panels' columns,
/// `cols[p]` each, panel after panel.
// The loops index several register arrays in step; iterators would obscure that.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
pub unsafe fn gemv_panels_avx512<const P: usize>(
    a: *const f32,
    k: usize,
    b: [*const f32; P],
    bias: [*const f32; P],
    cols: [usize; P],
    clamp: Clamp,
    out: *mut f32,
) {
    let z = _mm512_setzero_ps();
    let mut c = [[[z; 2]; P]; 2];
    for p in 0..P {
        // SAFETY: each `bias[p]` holds 32 floats (caller contract).
        c[0][p] = unsafe { [_mm512_loadu_ps(bias[p]), _mm512_loadu_ps(bias[p].add(16))] };
    }
    let mut kk = 0;
    while kk + 2 <= k {
        for p in 0..P {
            // Prefetch 16 rows ahead: near the end of a panel the address is past it,
            // so it is formed with `wrapping_add` (a prefetch never faults).
            _mm_prefetch::<_MM_HINT_T0>(b[p].wrapping_add((kk + 16) * 32) as *const i8);
        }
        for u in 0..2 {
            // SAFETY: kk + u < k, and `a` holds k floats.
            let x = _mm512_set1_ps(unsafe { *a.add(kk + u) });
            for p in 0..P {
                // SAFETY: row kk + u < k of a panel of k * 32 floats: 32 floats from `w`.
                unsafe {
                    let w = b[p].add((kk + u) * 32);
                    c[u][p][0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w), c[u][p][0]);
                    c[u][p][1] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w.add(16)), c[u][p][1]);
                }
            }
        }
        kk += 2;
    }
    if kk < k {
        // SAFETY: kk < k, and `a` holds k floats.
        let x = _mm512_set1_ps(unsafe { *a.add(kk) });
        for p in 0..P {
            // SAFETY: row kk < k of a panel of k * 32 floats: 32 floats from `w`.
            unsafe {
                let w = b[p].add(kk * 32);
                c[0][p][0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w), c[0][p][0]);
                c[0][p][1] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w.add(16)), c[0][p][1]);
            }
        }
    }
    let (lo, hi) = (_mm512_set1_ps(clamp.min), _mm512_set1_ps(clamp.max));
    let mut o = out;
    for p in 0..P {
        for v in 0..2 {
            let n = cols[p].saturating_sub(16 * v).min(16);
            if n > 0 {
                let m: __mmask16 = if n >= 16 { 0xffff } else { ((1u32 << n) - 1) as u16 };
                let r = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(c[0][p][v], c[1][p][v]), lo), hi);
                // SAFETY: the mask covers n <= cols[p] - 16 * v lanes, all inside
                // this panel's `cols[p]` outputs from `o` (caller contract).
                unsafe { _mm512_mask_storeu_ps(o.add(16 * v), m, r) };
            }
        }
        // The panels' outputs are consecutive: the next one starts cols[p] later
        // (one past the end after the last panel, never dereferenced).
        o = o.wrapping_add(cols[p]);
    }
}

/// One row against `P` 16-channel panels at once (a batch-1 fully-connected
/// layer on AVX2): the 6x16 tile with one valid row keeps only two sums, so
/// every FMA waits for the previous one (latency-bound, a quarter of the FMA
/// rate); here two inputs in flight times 2P vectors give 4P independent sums.
///
/// # Safety
/// CPU must support AVX2 and FMA; `a` holds `k` floats; each `b[p]` holds `k * 16`
/// floats and each `bias[p]` 16; `out` is writable for the panels' columns,
/// `cols[p]` each, panel after panel.
// The loops index several register arrays in step; iterators would obscure that.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemv_panels_avx2<const P: usize>(
    a: *const f32,
    k: usize,
    b: [*const f32; P],
    bias: [*const f32; P],
    cols: [usize; P],
    clamp: Clamp,
    out: *mut f32,
) {
    let z = _mm256_setzero_ps();
    let mut c = [[[z; 2]; P]; 2];
    for p in 0..P {
        // SAFETY: each `bias[p]` holds 16 floats (caller contract).
        c[0][p] = unsafe { [_mm256_loadu_ps(bias[p]), _mm256_loadu_ps(bias[p].add(8))] };
    }
    let mut kk = 0;
    while kk + 2 <= k {
        for u in 0..2 {
            // SAFETY: kk + u < k, and `a` holds k floats.
            let x = _mm256_set1_ps(unsafe { *a.add(kk + u) });
            for p in 0..P {
                // SAFETY: row kk + u < k of a panel of k * 16 floats: 16 floats from `w`.
                unsafe {
                    let w = b[p].add((kk + u) * 16);
                    c[u][p][0] = _mm256_fmadd_ps(x, _mm256_loadu_ps(w), c[u][p][0]);
                    c[u][p][1] = _mm256_fmadd_ps(x, _mm256_loadu_ps(w.add(8)), c[u][p][1]);
                }
            }
        }
        kk += 2;
    }
    if kk < k {
        // SAFETY: kk < k, and `a` holds k floats.
        let x = _mm256_set1_ps(unsafe { *a.add(kk) });
        for p in 0..P {
            // SAFETY: row kk < k of a panel of k * 16 floats: 16 floats from `w`.
            unsafe {
                let w = b[p].add(kk * 16);
                c[0][p][0] = _mm256_fmadd_ps(x, _mm256_loadu_ps(w), c[0][p][0]);
                c[0][p][1] = _mm256_fmadd_ps(x, _mm256_loadu_ps(w.add(8)), c[0][p][1]);
            }
        }
    }
    let (lo, hi) = (_mm256_set1_ps(clamp.min), _mm256_set1_ps(clamp.max));
    let mut o = out;
    for p in 0..P {
        let mut buf = [0.0f32; 16];
        for v in 0..2 {
            let r = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(c[0][p][v], c[1][p][v]), lo), hi);
            // SAFETY: `buf` holds 16 floats; lanes 8v..8v+8 of it.
            unsafe { _mm256_storeu_ps(buf.as_mut_ptr().add(8 * v), r) };
        }
        // SAFETY: `cols[p]` <= 16 outputs of this panel from `o` (caller contract);
        // `buf` is a local array, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), o, cols[p].min(16)) };
        // The panels' outputs are consecutive: the next one starts cols[p] later
        // (one past the end after the last panel, never dereferenced).
        o = o.wrapping_add(cols[p]);
    }
}

/// # Safety
/// CPU must support AVX-512F; see `run_tile` for pointers.
#[target_feature(enable = "avx512f")]
pub unsafe fn tile_avx512(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    // Fewer valid rows compute fewer rows: a batch-1 fully-connected layer is
    // then bound by weight loads, not by FMAs on padding rows.
    // SAFETY: the same contract as this function's, passed on unchanged.
    unsafe {
        // A panel with at most 16 valid columns (the last of 40, 39 or 36 channels)
        // computes one vector per row: half the multiply-adds, the same sums.
        match (t.rows, t.cols <= 16) {
            (1, false) => tile_avx512_r::<1, 2>(t, clamp, out, out_stride),
            (2, false) => tile_avx512_r::<2, 2>(t, clamp, out, out_stride),
            (3 | 4, false) => tile_avx512_r::<4, 2>(t, clamp, out, out_stride),
            // A map's last tile of 5 or 6 pixels (13-, 29-, 101-pixel audio maps)
            // would spend a quarter or more of an 8-row tile on padding rows.
            (5 | 6, false) => tile_avx512_r::<6, 2>(t, clamp, out, out_stride),
            (_, false) => tile_avx512_r::<8, 2>(t, clamp, out, out_stride),
            (1, true) => tile_avx512_r::<1, 1>(t, clamp, out, out_stride),
            (2, true) => tile_avx512_r::<2, 1>(t, clamp, out, out_stride),
            (3 | 4, true) => tile_avx512_r::<4, 1>(t, clamp, out, out_stride),
            (5 | 6, true) => tile_avx512_r::<6, 1>(t, clamp, out, out_stride),
            (_, true) => tile_avx512_r::<8, 1>(t, clamp, out, out_stride),
        }
    }
}

/// # Safety
/// CPU must support AVX-512F; see `run_tile` for pointers.
#[target_feature(enable = "avx512f")]
pub unsafe fn tile_avx512_narrow(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    // SAFETY: the same contract as this function's, passed on unchanged.
    unsafe {
        match t.rows {
            1 => tile_avx512_narrow_r::<1>(t, clamp, out, out_stride),
            2 => tile_avx512_narrow_r::<2>(t, clamp, out, out_stride),
            3 | 4 => tile_avx512_narrow_r::<4>(t, clamp, out, out_stride),
            5..=8 => tile_avx512_narrow_r::<8>(t, clamp, out, out_stride),
            _ => tile_avx512_narrow_r::<12>(t, clamp, out, out_stride),
        }
    }
}

/// `tiles` whole 8-row tiles over consecutive rows of `k` inputs from `a`, each
/// against every 32-channel panel of `b` in turn (so the tile's inputs stay in L1
/// across the panels): the tile loop inside one call, as
/// [`rows_avx512_narrow`] does, for GEMMs over many short rows.
///
/// # Safety
/// CPU must support AVX-512F; `a` holds `tiles * 8 * k` floats; `b` holds
/// `n.div_ceil(32) * k * 32` floats and `bias` `n.div_ceil(32) * 32`; `out` is
/// writable at `r * out_stride + j` for every row `r < tiles * 8` and `j < n`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn rows_avx512(a: *const f32, k: usize, tiles: usize, b: &[f32], bias: &[f32], n: usize, clamp: Clamp, out: *mut f32, out_stride: usize) {
    for i in 0..tiles {
        // SAFETY: tile i's rows lie inside `a`, each panel's weights and bias inside
        // `b` and `bias`, and its outputs inside `out` (the caller's contract).
        unsafe {
            let base = a.add(i * 8 * k);
            let ptrs: [*const f32; 8] = std::array::from_fn(|r| base.add(r * k));
            for panel in 0..n.div_ceil(32) {
                let cols = 32.min(n - panel * 32);
                let t = Tile { a: &ptrs, b: &b[panel * k * 32..][..k * 32], bias: &bias[panel * 32..][..32], k, taps: 1, rows: 8, cols };
                let o = out.add(i * 8 * out_stride + panel * 32);
                if cols <= 16 {
                    tile_avx512_r::<8, 1>(&t, clamp, o, out_stride);
                } else {
                    tile_avx512_r::<8, 2>(&t, clamp, o, out_stride);
                }
            }
        }
    }
}

/// [`rows_avx512`] for exactly 24 output channels (one panel of which 8 lanes are
/// padding): two rows' 48 outputs are three whole vectors, the middle one
/// holding the first row's last 8 channels and the second row's first 8, so a
/// pair of rows takes 3 FMAs per input (and a blend of its two broadcasts)
/// where two 32-channel rows take 4. Each output is summed in the same order as
/// in the 8x32 tile (bias, then k in order), so the results are the same bits.
///
/// # Safety
/// As [`rows_avx512`] with `n = 24` and `out_stride = 24`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)]
pub unsafe fn rows_avx512_n24(a: *const f32, k: usize, tiles: usize, b: &[f32], bias: &[f32], clamp: Clamp, out: *mut f32) {
    const P: usize = 4;
    assert!(b.len() >= k * 32 && bias.len() >= 32, "rows_avx512_n24: panel too short");
    // SAFETY: `bias` holds 32 floats (checked).
    let (b0, bh) = unsafe { (_mm512_loadu_ps(bias.as_ptr()), _mm512_loadu_ps(bias.as_ptr().add(16))) };
    // Per pair: [row p 0-15], [row p 16-23 | row q 0-7], [row q 8-23].
    let init = [b0, _mm512_shuffle_f32x4::<0x44>(bh, b0), _mm512_shuffle_f32x4::<0x4e>(b0, bh)];
    let (lo, hi) = (_mm512_set1_ps(clamp.min), _mm512_set1_ps(clamp.max));
    for i in 0..tiles {
        let mut c = [init; P];
        // SAFETY: tile i's 8 rows of k inputs lie inside `a`, its 8 x 24 outputs
        // inside `out` (the caller's contract); weight row kk < k of the panel is
        // 32 floats from `bp` (checked length).
        unsafe {
            let base = a.add(i * 8 * k);
            let rows: [*const f32; 8] = std::array::from_fn(|r| base.add(r * k));
            let mut bp = b.as_ptr();
            for kk in 0..k {
                let w0 = _mm512_loadu_ps(bp);
                let wh = _mm512_loadu_ps(bp.add(16));
                let w = [w0, _mm512_shuffle_f32x4::<0x44>(wh, w0), _mm512_loadu_ps(bp.add(8))];
                for p in 0..P {
                    let xp = _mm512_set1_ps(*rows[2 * p].add(kk));
                    let xq = _mm512_set1_ps(*rows[2 * p + 1].add(kk));
                    c[p][0] = _mm512_fmadd_ps(xp, w[0], c[p][0]);
                    c[p][1] = _mm512_fmadd_ps(_mm512_mask_blend_ps(0xff00, xp, xq), w[1], c[p][1]);
                    c[p][2] = _mm512_fmadd_ps(xq, w[2], c[p][2]);
                }
                bp = bp.add(32);
            }
            let o = out.add(i * 8 * 24);
            for p in 0..P {
                for v in 0..3 {
                    _mm512_storeu_ps(o.add(48 * p + 16 * v), _mm512_min_ps(_mm512_max_ps(c[p][v], lo), hi));
                }
            }
        }
    }
}

/// `tiles` whole 12-row tiles of one 16-channel panel over consecutive rows of
/// `k` inputs from `a` (a 1x1 convolution's pixels, a fully-connected batch):
/// the tile loop inside one call, so small `k` (8 or 16 input channels, where a
/// tile is only 100-200 multiply-adds) pays no dispatch or pointer table per tile.
///
/// # Safety
/// CPU must support AVX-512F; `a` holds `tiles * 12 * k` floats; `b` holds
/// `k * 16` floats and `bias` 16; `out` is writable at `r * out_stride + j` for
/// every row `r < tiles * 12` and column `j < cols <= 16`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn rows_avx512_narrow(a: *const f32, k: usize, tiles: usize, b: &[f32], bias: &[f32], cols: usize, clamp: Clamp, out: *mut f32, out_stride: usize) {
    for i in 0..tiles {
        // SAFETY: tile i's rows lie inside `a` and its outputs inside `out` (the
        // caller's contract); the tile below has 12 rows of k inputs, one tap.
        unsafe {
            let base = a.add(i * 12 * k);
            let ptrs: [*const f32; 12] = std::array::from_fn(|r| base.add(r * k));
            let t = Tile { a: &ptrs, b, bias, k, taps: 1, rows: 12, cols };
            tile_avx512_narrow_r::<12>(&t, clamp, out.add(i * 12 * out_stride), out_stride);
        }
    }
}

/// `R` rows of one 16-channel vector: per k, one weight load, `R` broadcasts and
/// `R` FMAs (with one or two rows, four partial sums hide the FMA latency).
// The loops index several register arrays in step; iterators would obscure that.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile_avx512_narrow_r<const R: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    const MR: usize = 12;
    const NR: usize = 16;
    // SAFETY: `t.bias` is a panel's bias, NR floats (Packed pads bias to whole panels).
    let b0 = unsafe { _mm512_loadu_ps(t.bias.as_ptr()) };
    let mut c = [b0; R];
    if R <= 2 {
        const U: usize = 4;
        let z = _mm512_setzero_ps();
        let mut p = [[z; R]; U];
        p[0] = c;
        // SAFETY: every row pointer `t.a[tap * MR + r]` (r < R <= MR, tap < taps) is valid
        // for `t.k` reads and `t.b` holds `taps * k * NR` floats (the `run_tile`
        // contract), so each weight row read here, `bt`/`bp` + kk * NR with kk < k,
        // and each input `a[r] + kk` lie inside them.
        unsafe {
            for tap in 0..t.taps {
                let a = &t.a[tap * MR..tap * MR + R];
                let bt = t.b.as_ptr().add(tap * t.k * NR);
                let mut kk = 0;
                while kk + U <= t.k {
                    for u in 0..U {
                        let w = _mm512_loadu_ps(bt.add((kk + u) * NR));
                        for r in 0..R {
                            p[u][r] = _mm512_fmadd_ps(_mm512_set1_ps(*a[r].add(kk + u)), w, p[u][r]);
                        }
                    }
                    kk += U;
                }
                while kk < t.k {
                    let w = _mm512_loadu_ps(bt.add(kk * NR));
                    for r in 0..R {
                        p[0][r] = _mm512_fmadd_ps(_mm512_set1_ps(*a[r].add(kk)), w, p[0][r]);
                    }
                    kk += 1;
                }
            }
        }
        for r in 0..R {
            c[r] = _mm512_add_ps(_mm512_add_ps(p[0][r], p[1][r]), _mm512_add_ps(p[2][r], p[3][r]));
        }
    } else {
        // SAFETY: every row pointer `t.a[tap * MR + r]` (r < R <= MR, tap < taps) is valid
        // for `t.k` reads and `t.b` holds `taps * k * NR` floats (the `run_tile`
        // contract), so each weight row read here, `bt`/`bp` + kk * NR with kk < k,
        // and each input `a[r] + kk` lie inside them.
        unsafe {
            for tap in 0..t.taps {
                let a = &t.a[tap * MR..tap * MR + R];
                let mut bp = t.b.as_ptr().add(tap * t.k * NR);
                // Four inputs per row pointer read: twelve row pointers do not all
                // fit in registers, and the spilled ones are then reloaded once per
                // four steps instead of every step. Each accumulator still takes its
                // FMAs in order of kk (the same sums as one step at a time).
                let mut kk = 0;
                while kk + 4 <= t.k {
                    for u in 0..4 {
                        let w = _mm512_loadu_ps(bp.add(u * NR));
                        for r in 0..R {
                            c[r] = _mm512_fmadd_ps(_mm512_set1_ps(*a[r].add(kk + u)), w, c[r]);
                        }
                    }
                    bp = bp.add(4 * NR);
                    kk += 4;
                }
                while kk < t.k {
                    let w = _mm512_loadu_ps(bp);
                    for r in 0..R {
                        c[r] = _mm512_fmadd_ps(_mm512_set1_ps(*a[r].add(kk)), w, c[r]);
                    }
                    bp = bp.add(NR);
                    kk += 1;
                }
            }
        }
    }
    let lo = _mm512_set1_ps(clamp.min);
    let hi = _mm512_set1_ps(clamp.max);
    let m: __mmask16 = if t.cols >= 16 { 0xffff } else { ((1u32 << t.cols) - 1) as u16 };
    // SAFETY: rows r < t.rows <= R and masked lanes within `t.cols`: the
    // outputs `out + r * out_stride + j`, j < cols, that `run_tile` lets us write.
    unsafe {
        if t.cols >= 16 {
            for r in 0..t.rows {
                _mm512_storeu_ps(out.add(r * out_stride), _mm512_min_ps(_mm512_max_ps(c[r], lo), hi));
            }
        } else if t.cols == 8 {
            for r in 0..t.rows {
                _mm256_storeu_ps(out.add(r * out_stride), _mm512_castps512_ps256(_mm512_min_ps(_mm512_max_ps(c[r], lo), hi)));
            }
        } else {
            for r in 0..t.rows {
                _mm512_mask_storeu_ps(out.add(r * out_stride), m, _mm512_min_ps(_mm512_max_ps(c[r], lo), hi));
            }
        }
    }
}

/// `R` rows of a 32-channel panel, `V` vectors per row: 2, or 1 when at most 16
/// columns are valid (the second vector's accumulators then stay unused).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile_avx512_r<const R: usize, const V: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    const MR: usize = 8;
    const NR: usize = 32;
    // SAFETY: `t.bias` is a panel's bias, NR floats (Packed pads bias to whole panels).
    let (b0, b1) = unsafe { (_mm512_loadu_ps(t.bias.as_ptr()), _mm512_loadu_ps(t.bias.as_ptr().add(16))) };
    let mut c0 = [b0; R];
    let mut c1 = [b1; R];
    if R <= 2 {
        // With one or two rows, a single accumulator chain per column vector would
        // wait on FMA latency every step: keep four partial sums over k instead.
        const U: usize = 4;
        let z = _mm512_setzero_ps();
        let mut p0 = [[z; R]; U];
        let mut p1 = [[z; R]; U];
        p0[0] = c0;
        p1[0] = c1;
        // SAFETY: every row pointer `t.a[tap * MR + r]` (r < R <= MR, tap < taps) is valid
        // for `t.k` reads and `t.b` holds `taps * k * NR` floats (the `run_tile`
        // contract), so each weight row read here, `bt`/`bp` + kk * NR with kk < k,
        // and each input `a[r] + kk` lie inside them.
        unsafe {
            for tap in 0..t.taps {
                let a = &t.a[tap * MR..tap * MR + R];
                let bt = t.b.as_ptr().add(tap * t.k * NR);
                let mut kk = 0;
                while kk + U <= t.k {
                    // One or two rows stream the weights once: fetch ahead of use.
                    _mm_prefetch::<_MM_HINT_T0>(bt.wrapping_add((kk + 16) * NR) as *const i8);
                    _mm_prefetch::<_MM_HINT_T0>(bt.wrapping_add((kk + 18) * NR) as *const i8);
                    for u in 0..U {
                        let w0 = _mm512_loadu_ps(bt.add((kk + u) * NR));
                        let w1 = if V == 2 { _mm512_loadu_ps(bt.add((kk + u) * NR + 16)) } else { z };
                        for r in 0..R {
                            let av = _mm512_set1_ps(*a[r].add(kk + u));
                            p0[u][r] = _mm512_fmadd_ps(av, w0, p0[u][r]);
                            if V == 2 {
                                p1[u][r] = _mm512_fmadd_ps(av, w1, p1[u][r]);
                            }
                        }
                    }
                    kk += U;
                }
                while kk < t.k {
                    let w0 = _mm512_loadu_ps(bt.add(kk * NR));
                    let w1 = if V == 2 { _mm512_loadu_ps(bt.add(kk * NR + 16)) } else { z };
                    for r in 0..R {
                        let av = _mm512_set1_ps(*a[r].add(kk));
                        p0[0][r] = _mm512_fmadd_ps(av, w0, p0[0][r]);
                        if V == 2 {
                            p1[0][r] = _mm512_fmadd_ps(av, w1, p1[0][r]);
                        }
                    }
                    kk += 1;
                }
            }
        }
        for r in 0..R {
            c0[r] = _mm512_add_ps(_mm512_add_ps(p0[0][r], p0[1][r]), _mm512_add_ps(p0[2][r], p0[3][r]));
            c1[r] = _mm512_add_ps(_mm512_add_ps(p1[0][r], p1[1][r]), _mm512_add_ps(p1[2][r], p1[3][r]));
        }
    } else {
        // SAFETY: every row pointer `t.a[tap * MR + r]` (r < R <= MR, tap < taps) is valid
        // for `t.k` reads and `t.b` holds `taps * k * NR` floats (the `run_tile`
        // contract), so each weight row read here, `bt`/`bp` + kk * NR with kk < k,
        // and each input `a[r] + kk` lie inside them.
        unsafe {
            for tap in 0..t.taps {
                let a = &t.a[tap * MR..tap * MR + R];
                let mut bp = t.b.as_ptr().add(tap * t.k * NR);
                for kk in 0..t.k {
                    let w0 = _mm512_loadu_ps(bp);
                    let w1 = if V == 2 { _mm512_loadu_ps(bp.add(16)) } else { w0 };
                    for r in 0..R {
                        let av = _mm512_set1_ps(*a[r].add(kk));
                        c0[r] = _mm512_fmadd_ps(av, w0, c0[r]);
                        if V == 2 {
                            c1[r] = _mm512_fmadd_ps(av, w1, c1[r]);
                        }
                    }
                    bp = bp.add(NR);
                }
            }
        }
    }
    let lo = _mm512_set1_ps(clamp.min);
    let hi = _mm512_set1_ps(clamp.max);
    let m0: __mmask16 = if t.cols >= 16 { 0xffff } else { ((1u32 << t.cols) - 1) as u16 };
    let m1: __mmask16 = if t.cols >= 32 {
        0xffff
    } else if t.cols > 16 {
        ((1u32 << (t.cols - 16)) - 1) as u16
    } else {
        0
    };
    // SAFETY: rows r < t.rows <= R and lanes within `t.cols` (whole vectors only
    // when all 16 or 32 columns are valid, else masked): the outputs
    // `out + r * out_stride + j`, j < cols, that `run_tile` lets us write.
    unsafe {
        if t.cols == NR {
            // Full panels store whole vectors: a masked store costs more than a
            // plain one on this CPU family, and full panels are most of them.
            for r in 0..t.rows {
                let o = out.add(r * out_stride);
                _mm512_storeu_ps(o, _mm512_min_ps(_mm512_max_ps(c0[r], lo), hi));
                _mm512_storeu_ps(o.add(16), _mm512_min_ps(_mm512_max_ps(c1[r], lo), hi));
            }
        } else {
            for r in 0..t.rows {
                let o = out.add(r * out_stride);
                let v0 = _mm512_min_ps(_mm512_max_ps(c0[r], lo), hi);
                _mm512_mask_storeu_ps(o, m0, v0);
                if V == 2 && m1 != 0 {
                    let v1 = _mm512_min_ps(_mm512_max_ps(c1[r], lo), hi);
                    _mm512_mask_storeu_ps(o.add(16), m1, v1);
                }
            }
        }
    }
}

/// # Safety
/// CPU must support AVX2 and FMA; see `run_tile` for pointers.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn tile_avx2(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    // SAFETY: the same contract as this function's, passed on unchanged.
    unsafe {
        match (t.rows, t.cols <= 8) {
            // One valid column (a convolution to a single channel, e.g. a
            // segmentation head): a dot product per row along k.
            (1, _) if t.cols == 1 => tile_avx2_col_r::<1>(t, clamp, out, out_stride),
            (2, _) if t.cols == 1 => tile_avx2_col_r::<2>(t, clamp, out, out_stride),
            (3 | 4, _) if t.cols == 1 => tile_avx2_col_r::<4>(t, clamp, out, out_stride),
            (_, _) if t.cols == 1 => tile_avx2_col_r::<6>(t, clamp, out, out_stride),
            // A panel with at most 8 valid columns (layers of 8 channels, the last
            // panel of 24 or 40): half the FMAs of the full tile.
            (1, true) => tile_avx2_half_r::<1>(t, clamp, out, out_stride),
            (2, true) => tile_avx2_half_r::<2>(t, clamp, out, out_stride),
            (3 | 4, true) => tile_avx2_half_r::<4>(t, clamp, out, out_stride),
            (_, true) => tile_avx2_half_r::<6>(t, clamp, out, out_stride),
            (1, false) => tile_avx2_r::<1>(t, clamp, out, out_stride),
            (2, false) => tile_avx2_r::<2>(t, clamp, out, out_stride),
            (3 | 4, false) => tile_avx2_r::<4>(t, clamp, out, out_stride),
            _ => tile_avx2_r::<6>(t, clamp, out, out_stride),
        }
    }
}

/// `R` rows of a panel's only valid column: the broadcast tiles would spend 15
/// of 16 (or 7 of 8) lanes on padding, so here the lanes run along k instead,
/// inputs loaded 8 at a time against the column's weights copied contiguous
/// (chunk by chunk, once per tile, from the panel's stride of 16).
// The loops index several register arrays in step; iterators would obscure that.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_col_r<const R: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    const MR: usize = 6;
    const NR: usize = 16;
    const CHUNK: usize = 64;
    let mut acc = [_mm256_setzero_ps(); R];
    let mut tail = [0.0f32; R];
    let mut wb = [0.0f32; CHUNK];
    // SAFETY: every row pointer `t.a[tap * MR + r]` (r < R <= MR, tap < taps) is valid
    // for `t.k` reads and `t.b` holds `taps * k * NR` floats (the `run_tile`
    // contract): each weight read, `bp + (k0 + j) * NR` with k0 + j < k, and each
    // input range `a[r] + k0 + j .. + 8` with k0 + j + 8 <= k lie inside them.
    unsafe {
        for tap in 0..t.taps {
            let a = &t.a[tap * MR..tap * MR + R];
            let bp = t.b.as_ptr().add(tap * t.k * NR);
            let mut k0 = 0;
            while k0 < t.k {
                let len = CHUNK.min(t.k - k0);
                for (j, w) in wb[..len].iter_mut().enumerate() {
                    *w = *bp.add((k0 + j) * NR);
                }
                let mut j = 0;
                while j + 8 <= len {
                    let w = _mm256_loadu_ps(wb.as_ptr().add(j));
                    for r in 0..R {
                        acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a[r].add(k0 + j)), w, acc[r]);
                    }
                    j += 8;
                }
                while j < len {
                    for r in 0..R {
                        tail[r] += *a[r].add(k0 + j) * wb[j];
                    }
                    j += 1;
                }
                k0 += len;
            }
        }
    }
    let bias = t.bias[0];
    for r in 0..t.rows.min(R) {
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r]) };
        let v = bias + lanes.iter().sum::<f32>() + tail[r];
        // SAFETY: row r < t.rows, column 0 < cols: an output `run_tile` lets us write.
        unsafe { *out.add(r * out_stride) = clamp.apply(v) };
    }
}

/// `R` rows of the first 8 columns of a 16-channel panel (whose other 8 are
/// padding): one weight vector per k. With one accumulator per row every FMA
/// would wait on the previous one of its row, so even and odd k sum apart (2R
/// independent chains), added once at the end.
// The loops index several register arrays in step; iterators would obscure that.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_half_r<const R: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    const MR: usize = 6;
    const NR: usize = 16;
    // SAFETY: `t.bias` is a panel's bias, NR floats (Packed pads bias to whole panels).
    let b0 = unsafe { _mm256_loadu_ps(t.bias.as_ptr()) };
    let mut c0 = [b0; R];
    let mut c1 = [_mm256_setzero_ps(); R];
    // SAFETY: every row pointer `t.a[tap * MR + r]` (r < R <= MR, tap < taps) is valid
    // for `t.k` reads and `t.b` holds `taps * k * NR` floats (the `run_tile`
    // contract), so each weight row read here, `bp` + kk * NR + 8 floats with
    // kk < k, and each input `a[r] + kk` lie inside them.
    unsafe {
        for tap in 0..t.taps {
            let a = &t.a[tap * MR..tap * MR + R];
            let bp = t.b.as_ptr().add(tap * t.k * NR);
            let mut kk = 0;
            while kk + 2 <= t.k {
                let w0 = _mm256_loadu_ps(bp.add(kk * NR));
                let w1 = _mm256_loadu_ps(bp.add((kk + 1) * NR));
                for r in 0..R {
                    c0[r] = _mm256_fmadd_ps(_mm256_set1_ps(*a[r].add(kk)), w0, c0[r]);
                    c1[r] = _mm256_fmadd_ps(_mm256_set1_ps(*a[r].add(kk + 1)), w1, c1[r]);
                }
                kk += 2;
            }
            if kk < t.k {
                let w0 = _mm256_loadu_ps(bp.add(kk * NR));
                for r in 0..R {
                    c0[r] = _mm256_fmadd_ps(_mm256_set1_ps(*a[r].add(kk)), w0, c0[r]);
                }
            }
        }
    }
    let lo = _mm256_set1_ps(clamp.min);
    let hi = _mm256_set1_ps(clamp.max);
    let mut buf = [0.0f32; 8];
    // SAFETY: rows r < t.rows <= R, and a full store only when cols == 8, else
    // `cols` floats: the outputs `out + r * out_stride + j`, j < cols, that
    // `run_tile` lets us write.
    unsafe {
        for r in 0..t.rows.min(R) {
            let o = out.add(r * out_stride);
            let v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(c0[r], c1[r]), lo), hi);
            if t.cols == 8 {
                _mm256_storeu_ps(o, v);
            } else {
                _mm256_storeu_ps(buf.as_mut_ptr(), v);
                std::ptr::copy_nonoverlapping(buf.as_ptr(), o, t.cols);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_r<const R: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    const MR: usize = 6;
    const NR: usize = 16;
    // SAFETY: `t.bias` is a panel's bias, NR floats (Packed pads bias to whole panels).
    let (b0, b1) = unsafe { (_mm256_loadu_ps(t.bias.as_ptr()), _mm256_loadu_ps(t.bias.as_ptr().add(8))) };
    let mut c0 = [b0; R];
    let mut c1 = [b1; R];
    // SAFETY: every row pointer `t.a[tap * MR + r]` (r < R <= MR, tap < taps) is valid
    // for `t.k` reads and `t.b` holds `taps * k * NR` floats (the `run_tile`
    // contract), so each weight row read here, `bt`/`bp` + kk * NR with kk < k,
    // and each input `a[r] + kk` lie inside them.
    unsafe {
        for tap in 0..t.taps {
            let a = &t.a[tap * MR..tap * MR + R];
            let mut bp = t.b.as_ptr().add(tap * t.k * NR);
            for kk in 0..t.k {
                let w0 = _mm256_loadu_ps(bp);
                let w1 = _mm256_loadu_ps(bp.add(8));
                for r in 0..R {
                    let av = _mm256_set1_ps(*a[r].add(kk));
                    c0[r] = _mm256_fmadd_ps(av, w0, c0[r]);
                    c1[r] = _mm256_fmadd_ps(av, w1, c1[r]);
                }
                bp = bp.add(NR);
            }
        }
    }
    let lo = _mm256_set1_ps(clamp.min);
    let hi = _mm256_set1_ps(clamp.max);
    let mut buf = [0.0f32; NR];
    // SAFETY: rows r < t.rows <= R and full stores only when cols == NR, else `cols` lanes within `t.cols`: the
    // outputs `out + r * out_stride + j`, j < cols, that `run_tile` lets us write.
    unsafe {
        for r in 0..t.rows.min(R) {
            let o = out.add(r * out_stride);
            let v0 = _mm256_min_ps(_mm256_max_ps(c0[r], lo), hi);
            let v1 = _mm256_min_ps(_mm256_max_ps(c1[r], lo), hi);
            if t.cols == NR {
                _mm256_storeu_ps(o, v0);
                _mm256_storeu_ps(o.add(8), v1);
            } else {
                _mm256_storeu_ps(buf.as_mut_ptr(), v0);
                _mm256_storeu_ps(buf.as_mut_ptr().add(8), v1);
                std::ptr::copy_nonoverlapping(buf.as_ptr(), o, t.cols);
            }
        }
    }
}
