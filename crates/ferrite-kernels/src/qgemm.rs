//! int8 GEMM for quantized convolutions: `dot[m, n] = sum_k a[m, k] * w[n, k]`
//! with `a` unsigned bytes (int8 activations shifted by 128) and `w` int8
//! weights, summed exactly in int32.
//!
//! Weights are packed once into panels of 16 output channels, four consecutive
//! `k` per channel: `[panel][k / 4][16][4]`, zero past `k` and past the last
//! channel. On CPUs with AVX-512 VNNI one `vpdpbusd` then adds 64 products; other
//! CPUs run a portable loop over the same layout (vectorized per instruction set).
//!
//! The activation shift is undone exactly through the weights' column sums:
//! `sum (x - zp) * w = sum (x + 128) * w - (128 + zp) * sum w`.

use crate::quant::{QConv, Requant};

/// Output channels per packed panel.
const NR: usize = 16;
/// Rows gathered per block by [`conv_i8`].
pub const BLOCK_ROWS: usize = 64;

/// int8 weights packed for [`gemm`], with their per-channel sums.
#[derive(Debug, Clone)]
pub struct QPacked {
    /// Output channels.
    pub n: usize,
    /// Reduction length.
    pub k: usize,
    /// `k` rounded up to a multiple of 4 (the row stride of `a`).
    pub kq: usize,
    w: Vec<i8>,
    /// `sum_k w[n, k]` per output channel.
    pub col_sum: Vec<i32>,
}

impl QPacked {
    /// Packs row-major `[n, k]` weights (an OHWI filter is `[out_c, kh * kw * in_c]`).
    pub fn new(w: &[i8], n: usize, k: usize) -> QPacked {
        let kq = k.div_ceil(4) * 4;
        let panels = n.div_ceil(NR);
        let mut packed = vec![0i8; panels * kq * NR];
        for j in 0..n {
            let (p, jj) = (j / NR, j % NR);
            for (kk, &v) in w[j * k..(j + 1) * k].iter().enumerate() {
                packed[(p * (kq / 4) + kk / 4) * NR * 4 + jj * 4 + kk % 4] = v;
            }
        }
        let col_sum = (0..n).map(|j| w[j * k..(j + 1) * k].iter().map(|&v| i32::from(v)).sum()).collect();
        QPacked { n, k, kq, w: packed, col_sum }
    }
}

/// `out[m, j] = sum_k a[m * kq + k] * w[j, k]` for `rows` rows of `a` (unsigned,
/// row stride `pk.kq`), written `pk.n` per row.
pub fn gemm(a: &[u8], rows: usize, pk: &QPacked, out: &mut [i32]) {
    assert!(a.len() >= rows * pk.kq && out.len() >= rows * pk.n, "gemm operands too short");
    #[cfg(target_arch = "x86_64")]
    if has_vnni() {
        // SAFETY: the CPU has AVX-512F/BW and VNNI (checked just above), and the
        // operand lengths were checked against the shapes the kernel reads.
        unsafe { vnni::gemm(a, rows, pk, out) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        // SAFETY: the CPU has the dot-product extension (checked just above), and
        // the operand lengths were checked against the shapes the kernel reads.
        unsafe { dotprod::gemm(a, rows, pk, out) };
        return;
    }
    gemm_portable(a, rows, pk, out);
}

/// Whether the VNNI kernel runs on this CPU.
pub fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw") && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

simd_fn! {
    /// The portable form of [`gemm`] over the same packed layout.
    pub fn gemm_portable(a: &[u8], rows: usize, pk: &QPacked, out: &mut [i32]) {
        let groups = pk.kq / 4;
        for p in 0..pk.n.div_ceil(NR) {
            let wp = &pk.w[p * groups * NR * 4..][..groups * NR * 4];
            let cols = NR.min(pk.n - p * NR);
            for m in 0..rows {
                let ar = &a[m * pk.kq..][..pk.kq];
                let mut acc = [0i32; NR];
                for (g, wg) in wp.chunks_exact(NR * 4).enumerate() {
                    let av = &ar[g * 4..g * 4 + 4];
                    for (j, wj) in wg.chunks_exact(4).enumerate() {
                        acc[j] += (0..4).map(|t| i32::from(av[t]) * i32::from(wj[t])).sum::<i32>();
                    }
                }
                out[m * pk.n + p * NR..][..cols].copy_from_slice(&acc[..cols]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{QPacked, NR};
    use std::arch::x86_64::*;

    /// Rows per register tile.
    const MR: usize = 8;

    /// `R` rows of one panel: `R` accumulators of 16 channels, one weight load and
    /// `R` broadcasts per group of four `k`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile<const R: usize>(a: *const u8, kq: usize, w: *const i8, groups: usize, out: *mut i32, ldo: usize, cols: usize) {
        let mut acc = [_mm512_setzero_si512(); R];
        for g in 0..groups {
            // SAFETY (whole function): the caller passes pointers to R rows of kq
            // bytes, a panel of groups * 64 weights and R output rows of ldo ints.
            let wv = unsafe { _mm512_loadu_si512(w.add(g * 64) as *const _) };
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_epi32(unsafe { (a.add(r * kq + g * 4) as *const i32).read_unaligned() });
                *acc = _mm512_dpbusd_epi32(*acc, av, wv);
            }
        }
        let mask: __mmask16 = if cols >= NR { 0xFFFF } else { (1u16 << cols) - 1 };
        for (r, acc) in acc.iter().enumerate() {
            unsafe { _mm512_mask_storeu_epi32(out.add(r * ldo), mask, *acc) };
        }
    }

    /// Requantization of rows of `n` accumulators, 16 channels per step: the 64-bit
    /// products in even and odd lanes, then the rounding shift, zero point and clamp.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; `dots` and `out` hold whole rows of `n`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn requant(rq: &super::RowRequant, dots: &[i32], out: &mut [i8]) {
        let n = rq.offset.len();
        let (half, one) = (_mm512_set1_epi64(1 << 30), _mm512_set1_epi32(1));
        let (zp, lo, hi) = (_mm512_set1_epi32(rq.out_zp), _mm512_set1_epi32(rq.min), _mm512_set1_epi32(rq.max));
        for (row, orow) in dots.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            let mut j = 0;
            while j < n {
                let cols = NR.min(n - j);
                let k: __mmask16 = if cols >= NR { 0xFFFF } else { (1u16 << cols) - 1 };
                // SAFETY: every load and store is masked to the `cols` valid lanes
                // from index j of arrays of length n.
                let (d, off, m, left, right) = unsafe {
                    (
                        _mm512_maskz_loadu_epi32(k, row.as_ptr().add(j)),
                        _mm512_maskz_loadu_epi32(k, rq.offset.as_ptr().add(j)),
                        _mm512_maskz_loadu_epi32(k, rq.multiplier.as_ptr().add(j)),
                        _mm512_maskz_loadu_epi32(k, rq.left.as_ptr().add(j) as *const i32),
                        _mm512_maskz_loadu_epi32(k, rq.right.as_ptr().add(j) as *const i32),
                    )
                };
                let x = _mm512_sllv_epi32(_mm512_add_epi32(d, off), left);
                let even = _mm512_srai_epi64::<31>(_mm512_add_epi64(_mm512_mul_epi32(x, m), half));
                let odd = _mm512_srai_epi64::<31>(_mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64::<32>(x), _mm512_srli_epi64::<32>(m)), half));
                let high = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64::<32>(odd));
                let mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, right), one);
                let threshold = _mm512_add_epi32(_mm512_srli_epi32::<1>(mask), _mm512_srli_epi32::<31>(high));
                let up = _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, mask), threshold);
                let v = _mm512_mask_add_epi32(_mm512_srav_epi32(high, right), up, _mm512_srav_epi32(high, right), one);
                let v = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, zp), lo), hi);
                unsafe { _mm512_mask_cvtepi32_storeu_epi8(orow.as_mut_ptr().add(j) as *mut _, k, v) };
                j += NR;
            }
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F/BW and VNNI; `a` holds `rows * pk.kq` bytes
    /// and `out` `rows * pk.n` ints.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn gemm(a: &[u8], rows: usize, pk: &QPacked, out: &mut [i32]) {
        let groups = pk.kq / 4;
        for p in 0..pk.n.div_ceil(NR) {
            let w = unsafe { pk.w.as_ptr().add(p * groups * NR * 4) };
            let cols = NR.min(pk.n - p * NR);
            let mut m = 0;
            while m < rows {
                let (ap, op) = unsafe { (a.as_ptr().add(m * pk.kq), out.as_mut_ptr().add(m * pk.n + p * NR)) };
                // SAFETY: rows m..m + MR (or m alone) lie inside `a` and `out`.
                if rows - m >= MR {
                    unsafe { tile::<MR>(ap, pk.kq, w, groups, op, pk.n, cols) };
                    m += MR;
                } else {
                    unsafe { tile::<1>(ap, pk.kq, w, groups, op, pk.n, cols) };
                    m += 1;
                }
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod dotprod {
    use super::{QPacked, NR};
    use std::arch::aarch64::*;

    /// `acc += a . b` per group of four bytes (`sdot`), written as inline assembly
    /// because the intrinsic is not yet stable.
    #[inline(always)]
    unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: callers run with the dotprod feature enabled; the instruction
        // only reads and writes the named vector registers.
        unsafe {
            std::arch::asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b, options(pure, nomem, nostack))
        };
        acc
    }

    /// One row at a time, 16 channels in four vectors: the row's four bytes (back
    /// to signed) broadcast against the packed weights; the unsigned sum is the
    /// signed one plus 128 times the column sums.
    ///
    /// # Safety
    /// The CPU must support the dot-product extension; `a` holds `rows * pk.kq`
    /// bytes and `out` `rows * pk.n` ints.
    #[target_feature(enable = "neon,dotprod")]
    pub(super) unsafe fn gemm(a: &[u8], rows: usize, pk: &QPacked, out: &mut [i32]) {
        let groups = pk.kq / 4;
        for p in 0..pk.n.div_ceil(NR) {
            let cols = NR.min(pk.n - p * NR);
            let wp = &pk.w[p * groups * NR * 4..][..groups * NR * 4];
            for m in 0..rows {
                let ar = &a[m * pk.kq..][..pk.kq];
                let mut acc = [vdupq_n_s32(0); 4];
                for (g, wg) in wp.chunks_exact(NR * 4).enumerate() {
                    let word = u32::from_le_bytes([ar[g * 4], ar[g * 4 + 1], ar[g * 4 + 2], ar[g * 4 + 3]]) ^ 0x8080_8080;
                    let av = vreinterpretq_s8_u32(vdupq_n_u32(word));
                    for (q, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: wg holds 64 bytes; q * 16 + 16 <= 64.
                        let wv = unsafe { vld1q_s8(wg.as_ptr().add(q * 16)) };
                        *acc = unsafe { sdot(*acc, av, wv) };
                    }
                }
                let mut lanes = [0i32; NR];
                for (q, acc) in acc.iter().enumerate() {
                    // SAFETY: lanes holds 16 ints; q * 4 + 4 <= 16.
                    unsafe { vst1q_s32(lanes.as_mut_ptr().add(q * 4), *acc) };
                }
                let o = &mut out[m * pk.n + p * NR..][..cols];
                for (j, o) in o.iter_mut().enumerate() {
                    *o = lanes[j] + 128 * pk.col_sum[p * NR + j];
                }
            }
        }
    }
}

/// Per-run scratch of [`conv_i8`]: one block of gathered rows and their sums.
#[derive(Debug, Clone)]
pub struct ConvScratch {
    rows: Vec<u8>,
    dots: Vec<i32>,
    rq: RowRequant,
}

impl ConvScratch {
    /// Scratch for convolutions with these packed weights.
    pub fn new(pk: &QPacked, rq: &Requant) -> ConvScratch {
        // 16 bytes of slack for the last row's over-long copies (see `flip_copy`).
        ConvScratch { rows: vec![0; BLOCK_ROWS * pk.kq + 16], dots: vec![0; BLOCK_ROWS * pk.n], rq: RowRequant::new(rq, pk.n) }
    }
}

/// int8 convolution (weights zero point 0) through [`gemm`]: each block of output
/// pixels gathers its receptive fields into unsigned rows (taps in the padding
/// hold the input zero point, contributing nothing), multiplies them by the packed
/// weights and requantizes. `input` is the int8 tensor's bytes. Bit-exact with the
/// per-tap definition.
pub fn conv_i8(input: &[u8], pk: &QPacked, bias: Option<&[i32]>, q: &QConv, out: &mut [i8], s: &mut ConvScratch) {
    let g = &q.g;
    let (in_c, n, kq) = (q.in_c, pk.n, pk.kq);
    // Bias less the activation shift's share: (128 + zp) * sum w.
    for (j, o) in s.rq.offset.iter_mut().enumerate() {
        *o = bias.map_or(0, |b| b[j]).wrapping_sub((128 + q.in_zp).wrapping_mul(pk.col_sum[j]));
    }
    let fill = (q.in_zp as i8 as u8) ^ 0x80;
    let pixels = g.batch * g.out_h * g.out_w;
    let row_span = g.k_w * in_c;
    // Stride-1 taps of one filter row read adjacent pixels: one copy per row.
    let contiguous_taps = g.dil_w == 1;
    let (mut nb, mut oy, mut ox) = (0, 0, 0);
    let mut start = 0;
    while start < pixels {
        let count = BLOCK_ROWS.min(pixels - start);
        // Segments are written in increasing position, so each copy's over-long
        // tail is overwritten by the next one (or lands past k, where the packed
        // weights are zero, or in the next row, written later, or in the slack).
        for r in 0..count {
            let base = r * kq;
            let x0 = (ox * g.stride_w) as isize - g.pad_left as isize;
            let interior_x = x0 >= 0 && x0 as usize + (g.k_w - 1) * g.dil_w < g.in_w;
            for ky in 0..g.k_h {
                let at = base + ky * row_span;
                let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else {
                    s.rows[at..at + row_span].fill(fill);
                    continue;
                };
                let line = (nb * g.in_h + iy) * g.in_w * in_c;
                if interior_x && contiguous_taps {
                    flip_copy(&mut s.rows, at, input, line + x0 as usize * in_c, row_span);
                    continue;
                }
                for kx in 0..g.k_w {
                    let at = at + kx * in_c;
                    match (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w) {
                        Some(ix) => flip_copy(&mut s.rows, at, input, line + ix * in_c, in_c),
                        None => s.rows[at..at + in_c].fill(fill),
                    }
                }
            }
            ox += 1;
            if ox == g.out_w {
                ox = 0;
                oy += 1;
                if oy == g.out_h {
                    oy = 0;
                    nb += 1;
                }
            }
        }
        gemm(&s.rows[..count * kq], count, pk, &mut s.dots[..count * n]);
        s.rq.apply(&s.dots[..count * n], &mut out[start * n..(start + count) * n]);
        start += count;
    }
}

/// Prepared int8 depthwise convolution (channel multiplier 1, weights zero point
/// 0): weights widened and tiled along an output row, so each tap of a stride-1
/// row is one flat multiply-add over `out_w * c` lanes.
#[derive(Debug, Clone)]
pub struct Depthwise {
    /// `[tap][out_w * c]`: the tap's weight for each (column, channel).
    tiled: Vec<i32>,
    acc: Vec<i32>,
    rq: RowRequant,
}

impl Depthwise {
    /// Prepares weights `[1, kh, kw, c]` for the geometry of `q`.
    pub fn new(w: &[i8], q: &QConv) -> Depthwise {
        let (c, taps, row) = (q.in_c, q.g.k_h * q.g.k_w, q.g.out_w * q.in_c);
        let mut tiled = vec![0i32; taps * row];
        for (t, dst) in tiled.chunks_exact_mut(row.max(1)).enumerate() {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = i32::from(w[t * c + i % c]);
            }
        }
        Depthwise { tiled, acc: vec![0; row], rq: RowRequant::new(&q.rq, c) }
    }
}

simd_fn! {
    /// int8 depthwise convolution with [`Depthwise`] weights, one output row at a
    /// time: taps accumulate `(x - zp) * w` over the columns they reach inside the
    /// input (padding contributes nothing), then the row is requantized. `input`
    /// is the int8 tensor's bytes. Bit-exact with the per-tap definition.
    pub fn depthwise_i8(input: &[u8], d: &mut Depthwise, bias: Option<&[i32]>, q: &QConv, out: &mut [i8]) {
        let (g, c) = (&q.g, q.in_c);
        let row = g.out_w * c;
        if row == 0 {
            return;
        }
        for (j, o) in d.rq.offset.iter_mut().enumerate() {
            *o = bias.map_or(0, |b| b[j]);
        }
        let zp = q.in_zp;
        for nb in 0..g.batch {
            for oy in 0..g.out_h {
                d.acc.fill(0);
                for ky in 0..g.k_h {
                    let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
                    let line = &input[(nb * g.in_h + iy) * g.in_w * c..][..g.in_w * c];
                    for kx in 0..g.k_w {
                        let tap = ky * g.k_w + kx;
                        let wt = &d.tiled[tap * row..][..row];
                        // Columns whose input ix = ox * stride + kx * dil - pad is inside.
                        let off = kx * g.dil_w;
                        let lo = g.pad_left.saturating_sub(off).div_ceil(g.stride_w);
                        let hi = if g.in_w + g.pad_left > off { ((g.in_w + g.pad_left - off - 1) / g.stride_w + 1).min(g.out_w) } else { 0 };
                        if lo >= hi {
                            continue;
                        }
                        if g.stride_w == 1 {
                            let ix0 = lo + off - g.pad_left;
                            let src = &line[ix0 * c..(ix0 + hi - lo) * c];
                            let (acc, wt) = (&mut d.acc[lo * c..hi * c], &wt[lo * c..hi * c]);
                            for ((a, &x), &w) in acc.iter_mut().zip(src).zip(wt) {
                                *a += (i32::from(x as i8) - zp) * w;
                            }
                        } else {
                            for ox in lo..hi {
                                let ix = ox * g.stride_w + off - g.pad_left;
                                let src = &line[ix * c..][..c];
                                for ((a, &x), &w) in d.acc[ox * c..][..c].iter_mut().zip(src).zip(&wt[ox * c..][..c]) {
                                    *a += (i32::from(x as i8) - zp) * w;
                                }
                            }
                        }
                    }
                }
                let o = &mut out[((nb * g.out_h + oy) * g.out_w) * c..][..row];
                d.rq.apply(&d.acc, o);
            }
        }
    }
}

/// Copies `len` int8 bytes from `src[from..]` to `dst[at..]` as unsigned bytes
/// (shifted by 128), 16 at a time: the last chunk may write up to 15 bytes past
/// `at + len` (callers arrange for those to be overwritten or unused); near the end
/// of either buffer it finishes byte by byte.
#[inline(always)]
fn flip_copy(dst: &mut [u8], at: usize, src: &[u8], from: usize, len: usize) {
    const FLIP: u128 = u128::from_ne_bytes([0x80; 16]);
    let mut i = 0;
    while i < len {
        match (src.get(from + i..from + i + 16), dst.get_mut(at + i..at + i + 16)) {
            (Some(s), Some(d)) => {
                let v = u128::from_ne_bytes(s.try_into().unwrap_or([0; 16])) ^ FLIP;
                d.copy_from_slice(&v.to_ne_bytes());
                i += 16;
            }
            _ => {
                for j in i..len {
                    dst[at + j] = src[from + j] ^ 0x80;
                }
                return;
            }
        }
    }
}

/// [`Requant`] laid out per channel for rows of `n` accumulators, in the form
/// that vectorizes: TFLite's `MultiplyByQuantizedMultiplier` with its rounding
/// high multiply written as `(x * m + 2^30) >> 31` (the same value: its nudge and
/// truncating division round halves up) and the rounding right shift as a
/// half-away-from-zero division.
#[derive(Debug, Clone)]
pub struct RowRequant {
    /// Added to each accumulator before rescaling (bias and zero-point terms).
    pub offset: Vec<i32>,
    multiplier: Vec<i32>,
    left: Vec<u32>,
    right: Vec<u32>,
    out_zp: i32,
    min: i32,
    max: i32,
}

impl RowRequant {
    /// Per-channel parameters for `n` channels (a per-tensor `rq` is repeated).
    pub fn new(rq: &Requant, n: usize) -> RowRequant {
        let at = |v: &[i32], j: usize| v[if v.len() == 1 { 0 } else { j }];
        RowRequant {
            offset: vec![0; n],
            multiplier: (0..n).map(|j| at(&rq.multiplier, j)).collect(),
            left: (0..n).map(|j| at(&rq.shift, j).max(0) as u32).collect(),
            right: (0..n).map(|j| (-at(&rq.shift, j)).max(0) as u32).collect(),
            out_zp: rq.out_zp,
            min: rq.min,
            max: rq.max,
        }
    }

    /// Requantizes rows of `n` accumulators into int8.
    pub fn apply(&self, dots: &[i32], out: &mut [i8]) {
        assert!(dots.len() == out.len() && dots.len().is_multiple_of(self.offset.len().max(1)), "requant operands disagree");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F is present (checked just above); the lengths were checked.
            unsafe { vnni::requant(self, dots, out) };
            return;
        }
        requant_rows(self, dots, out)
    }
}

simd_fn! {
    /// [`RowRequant::apply`].
    pub fn requant_rows(rq: &RowRequant, dots: &[i32], out: &mut [i8]) {
        let n = rq.offset.len();
        for (row, orow) in dots.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            for j in 0..n {
                let x = row[j].wrapping_add(rq.offset[j]).wrapping_shl(rq.left[j]);
                let high = ((i64::from(x) * i64::from(rq.multiplier[j]) + (1 << 30)) >> 31) as i32;
                let right = rq.right[j];
                let mask = ((1i64 << right) - 1) as i32;
                let threshold = (mask >> 1) + i32::from(high < 0);
                let v = (high >> right) + i32::from((high & mask) > threshold);
                orow[j] = (v + rq.out_zp).clamp(rq.min, rq.max) as i8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[u8], rows: usize, w: &[i8], n: usize, k: usize, kq: usize) -> Vec<i32> {
        let mut out = vec![0; rows * n];
        for m in 0..rows {
            for j in 0..n {
                out[m * n + j] = (0..k).map(|kk| i32::from(a[m * kq + kk]) * i32::from(w[j * k + kk])).sum();
            }
        }
        out
    }

    #[test]
    fn row_requant_matches_multiply_by_quantized_multiplier() {
        let mut seed = 11u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as i32
        };
        for case in 0..200 {
            let n = 1 + case % 19;
            let real: Vec<f64> = (0..n).map(|_| f64::from(next().unsigned_abs() % 100_000 + 1) / 1e5 * if case % 7 == 0 { 40.0 } else { 0.05 }).collect();
            let (multiplier, shift): (Vec<i32>, Vec<i32>) = real.iter().map(|&r| crate::quant::quantize_multiplier(r)).unzip();
            let rq = Requant { multiplier, shift, out_zp: next() % 50, min: -128, max: 127 };
            let mut rr = RowRequant::new(&rq, n);
            rr.offset.iter_mut().for_each(|o| *o = next() % 5000);
            let dots: Vec<i32> = (0..4 * n).map(|i| if i % 5 == 0 { next() } else { next() % 100_000 }).collect();
            let mut got = vec![0i8; 4 * n];
            rr.apply(&dots, &mut got);
            let mut portable = vec![0i8; 4 * n];
            requant_rows(&rr, &dots, &mut portable);
            assert_eq!(got, portable, "case {case}: dispatched and portable requantization differ");
            for (i, (&d, &g)) in dots.iter().zip(&got).enumerate() {
                assert_eq!(i32::from(g), rq.apply(d.wrapping_add(rr.offset[i % n]), i % n), "case {case} element {i}");
            }
        }
    }

    #[test]
    fn gemm_kernels_match_the_definition() {
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 24) as u8
        };
        for &(rows, n, k) in &[(1, 1, 1), (3, 5, 7), (8, 16, 27), (13, 17, 64), (9, 40, 5), (64, 32, 144)] {
            let w: Vec<i8> = (0..n * k).map(|_| next() as i8).collect();
            let pk = QPacked::new(&w, n, k);
            let mut a = vec![0u8; rows * pk.kq];
            a.iter_mut().for_each(|v| *v = next());
            let want = naive(&a, rows, &w, n, k, pk.kq);
            // The padding bytes past k must not matter.
            let mut got = vec![0; rows * n];
            gemm(&a, rows, &pk, &mut got);
            assert_eq!(got, want, "dispatched {rows}x{n}x{k}");
            let mut got = vec![0; rows * n];
            gemm_portable(&a, rows, &pk, &mut got);
            assert_eq!(got, want, "portable {rows}x{n}x{k}");
            assert_eq!(pk.col_sum[n - 1], w[(n - 1) * k..].iter().map(|&v| i32::from(v)).sum::<i32>());
        }
    }
}
