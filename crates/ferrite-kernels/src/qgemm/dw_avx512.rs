//! The AVX-512 row kernel of [`super::depthwise_i8`]: 16 channels per vector,
//! two filter taps per `vpdpwssd` on the pair lines, and the requantization
//! fused in (the accumulators go from registers straight to int8 bytes).
//!
//! A layer of at most 8 channels (a depthwise-first layer on a one-channel
//! image, or a narrow MobileNet stage) fills a vector with two output pixels
//! instead, so its lanes are not half idle.
//!
//! The requantization costs more than the products of a 3x3 filter, so it is
//! kept short: the per-channel parameters are laid out once per layer
//! ([`block_params`]), the accumulators start from the bias terms, a layer
//! whose scales need no left shift skips it, and the clamp runs on the bytes
//! after a saturating narrowing (`vpmovsdb` to xmm, then byte min/max), which
//! gives the same bytes as clamping the int32 values. The bytes are stored
//! plainly, or with a byte mask for channel tails: the memory form of the
//! masked narrowing store is microcoded and slow on some AVX-512 CPUs.

use super::{DwRow, RowRequant};
use std::arch::x86_64::*;

/// Output pixels (or pixel pairs) per register tile.
const TILE: usize = 4;

/// Vectors of 16 int32 per block of [`block_params`]: multiplier, the odd
/// lanes' multiplier, left shift, right shift, its remainder mask and half
/// that mask.
pub(super) const PARAMS: usize = 6;

/// Whether this CPU (and the process's vector cap) runs [`depthwise_row`].
pub(super) fn available() -> bool {
    crate::level::has_avx512f()
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// Lays out `rq`'s per-channel scales for [`depthwise_row`] over `cp` lanes
/// (once per layer: the offsets, which hold the bias, are read per run):
/// [`PARAMS`] vectors of 16 lanes per block of 16 channels, or, for rows of 8
/// lanes (`cp == 8`, two pixels per vector), one block whose halves both hold
/// channels 0..8. Lanes past the channels hold zeros (their results are never
/// stored). Also returns whether any channel shifts left.
pub(super) fn block_params(rq: &RowRequant, cp: usize) -> (Vec<i32>, bool) {
    let n = rq.offset.len();
    let blocks = cp.div_ceil(16);
    let mut params = vec![0; blocks * PARAMS * 16];
    for (b, block) in params.chunks_exact_mut(PARAMS * 16).enumerate() {
        let channel = |l: usize| if cp == 8 { l % 8 } else { b * 16 + l };
        for l in 0..16 {
            let j = channel(l);
            if j >= n {
                continue;
            }
            // As `vpsllvd` would: a count past 31 gives an all-ones mask.
            let mask = 1u32.checked_shl(rq.right[j]).unwrap_or(0).wrapping_sub(1);
            block[l] = rq.multiplier[j];
            // `vpmuldq` reads the low half of each 64-bit lane: odd channel
            // 2i + 1's multiplier goes to lane 2i.
            if l % 2 == 1 {
                block[16 + l - 1] = rq.multiplier[j];
            }
            block[32 + l] = rq.left[j] as i32;
            block[48 + l] = rq.right[j] as i32;
            block[64 + l] = mask as i32;
            block[80 + l] = (mask >> 1) as i32;
        }
    }
    let left = rq.left.iter().any(|&l| l != 0);
    (params, left)
}

/// One block's requantization parameters in registers.
struct Rq16 {
    offset: __m512i,
    m: __m512i,
    m_odd: __m512i,
    /// Whether any channel shifts left ([`block_params`]' flag).
    shifts: bool,
    left: __m512i,
    right: __m512i,
    mask: __m512i,
    half_mask: __m512i,
    zp: __m512i,
    lo: __m128i,
    hi: __m128i,
}

impl Rq16 {
    /// # Safety
    /// The CPU must support AVX-512F; `p` points at one block of
    /// [`block_params`] ([`PARAMS`] * 16 values); `offset` holds the block's
    /// offsets (both halves for a row of two pixels per vector).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load(p: *const i32, rq: &RowRequant, offset: __m512i, shifts: bool) -> Rq16 {
        // SAFETY: vector i of the block (contract).
        let v = |i: usize| unsafe { _mm512_loadu_si512(p.add(16 * i) as *const _) };
        Rq16 {
            offset,
            m: v(0),
            m_odd: v(1),
            shifts,
            left: v(2),
            right: v(3),
            mask: v(4),
            half_mask: v(5),
            zp: _mm512_set1_epi32(rq.out_zp),
            lo: _mm_set1_epi8(rq.min.clamp(-128, 127) as i8),
            hi: _mm_set1_epi8(rq.max.clamp(-128, 127) as i8),
        }
    }

    /// TFLite's two roundings of `acc` (the offset already in it): the rounded
    /// high half of the doubled product, then the rounding right shift; zero
    /// point and clamp, as 16 bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn bytes(&self, acc: __m512i) -> __m128i {
        let half = _mm512_set1_epi64(1 << 30);
        // A constant in the row kernels (their `LEFT`), a run-time test in the
        // one-channel kernel (a first layer, run once per inference): one
        // instance of it, not two, for one instruction few layers need.
        let x = if self.shifts { _mm512_sllv_epi32(acc, self.left) } else { acc };
        // `(x * m + 2^30) >> 31` fits in 32 bits (m < 2^31): bits 31..62 of the
        // 64-bit sum, brought to the low half (even lanes) or the high half
        // (odd lanes) of each 64-bit lane by one shift.
        let even = _mm512_srli_epi64::<31>(_mm512_add_epi64(_mm512_mul_epi32(x, self.m), half));
        let odd = _mm512_slli_epi64::<1>(_mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64::<32>(x), self.m_odd), half));
        let high = _mm512_mask_blend_epi32(0xAAAA, even, odd);
        // Rounding half away from zero: up when the remainder exceeds half the
        // divisor, less one for negative values.
        let threshold = _mm512_add_epi32(self.half_mask, _mm512_srli_epi32::<31>(high));
        let up = _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, self.mask), threshold);
        let v = _mm512_add_epi32(_mm512_srav_epi32(high, self.right), self.zp);
        let v = _mm512_mask_sub_epi32(v, up, v, _mm512_set1_epi32(-1));
        // The clamp bounds lie in int8: saturating to int8 first changes nothing.
        _mm_min_epi8(_mm_max_epi8(_mm512_cvtsepi32_epi8(v), self.lo), self.hi)
    }
}

/// `T` output pixels of one block of 16 channels (the lanes past `lk`, the
/// int16 values loaded, zero), the sums started at `init`: per filter row and
/// column pair one weight load and, per pixel, one `vpdpwssd`. `P` is the
/// column pair count (`r.pairs` where `P` is 0).
///
/// # Safety
/// The CPU must support AVX-512F/BW and VNNI; `P` is 0 or `r.pairs`; `x` is
/// the first pixel's block offset in the first filter row's line (the others
/// at `r.offs` relative to it), `w` points at the block's weights of filter
/// row 0, and the `lk` lanes of every read lie inside `r.lines` and `r.w`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const T: usize, const P: usize>(r: &DwRow<'_>, x: usize, w: *const i16, lk: __mmask32, init: __m512i) -> [__m512i; T] {
    let mut acc = [init; T];
    let lines = r.lines.as_ptr();
    let pairs = if P == 0 { r.pairs } else { P };
    for (k, &off) in r.offs.iter().enumerate() {
        for pr in 0..pairs {
            // SAFETY: weights of filter row k and pair pr, this block (contract).
            let wv = unsafe { _mm512_maskz_loadu_epi16(lk, w.add((k * pairs + pr) * 2 * r.cp)) };
            for (t, acc) in acc.iter_mut().enumerate() {
                // SAFETY: pixel t's pair pr in filter row k's line (contract).
                let xv = unsafe { _mm512_maskz_loadu_epi16(lk, lines.add(off + x + t * r.px_step + pr * r.pair_step)) };
                *acc = _mm512_dpwssd_epi32(*acc, xv, wv);
            }
        }
    }
    acc
}

/// `T` pairs of output pixels of an 8-channel row (`r.cp == 8`), the sums
/// started at `init`: pixel `2i` in the low half of vector `i`, pixel `2i + 1`
/// in the high half, the weights repeated in both halves.
///
/// # Safety
/// As [`tile`], with `2 * T` pixels from offset `x` inside the row.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_pairs<const T: usize, const P: usize>(r: &DwRow<'_>, x: usize, init: __m512i) -> [__m512i; T] {
    let mut acc = [init; T];
    let (lines, w) = (r.lines.as_ptr(), r.w.as_ptr());
    let pairs = if P == 0 { r.pairs } else { P };
    for (k, &off) in r.offs.iter().enumerate() {
        for pr in 0..pairs {
            // SAFETY: the 16 weights of filter row k and pair pr (contract).
            let wv = _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(w.add((k * pairs + pr) * 16) as *const __m256i) });
            for (t, acc) in acc.iter_mut().enumerate() {
                let p = lines.wrapping_add(off + x + 2 * t * r.px_step + pr * r.pair_step);
                // SAFETY: pixels 2t and 2t + 1 of pair pr in filter row k's line
                // (contract); with stride 1 they are adjacent, one load.
                let xv = unsafe {
                    if r.px_step == 16 {
                        _mm512_loadu_si512(p as *const _)
                    } else {
                        _mm512_inserti64x4::<1>(
                            _mm512_castsi256_si512(_mm256_loadu_si256(p as *const __m256i)),
                            _mm256_loadu_si256(p.add(r.px_step) as *const __m256i),
                        )
                    }
                };
                *acc = _mm512_dpwssd_epi32(*acc, xv, wv);
            }
        }
    }
    acc
}

/// One output row of `super::depthwise_i8`, requantized by `rq` (its
/// per-channel parameters laid out by [`block_params`] in `params`; `LEFT`
/// where any channel shifts left: a constant, so that the row kernels test
/// nothing per vector) into `out` (`out_w * out_c` bytes, int8).
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL and VNNI ([`available`]); `r.in_bounds`
/// holds, `params` holds [`PARAMS`] * 16 values per block of 16 lanes of
/// `r.cp`, and `out` holds `r.out_w * r.out_c` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn depthwise_row<const LEFT: bool>(r: &DwRow<'_>, rq: &RowRequant, params: &[i32], out: &mut [i8]) {
    // SAFETY: the caller's contract, passed on; a fixed column pair count
    // (filters 1 to 10 wide) lets the compiler unroll the taps.
    unsafe {
        match r.pairs {
            1 => row::<LEFT, 1>(r, rq, params, out),
            2 => row::<LEFT, 2>(r, rq, params, out),
            3 => row::<LEFT, 3>(r, rq, params, out),
            4 => row::<LEFT, 4>(r, rq, params, out),
            5 => row::<LEFT, 5>(r, rq, params, out),
            _ => row::<LEFT, 0>(r, rq, params, out),
        }
    }
}

/// [`depthwise_row`] with `P` column pairs (`r.pairs` where `P` is 0).
///
/// # Safety
/// As [`depthwise_row`]; `P` is 0 or `r.pairs`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn row<const LEFT: bool, const P: usize>(r: &DwRow<'_>, rq: &RowRequant, params: &[i32], out: &mut [i8]) {
    let o = out.as_mut_ptr();
    if r.cp == 8 {
        let cols = r.out_c;
        let k16: __mmask16 = (1 << cols) - 1;
        // SAFETY: the `cols` offsets (out_c of them), repeated in both halves.
        let offset = _mm512_broadcast_i64x4(unsafe { _mm256_maskz_loadu_epi32(k16 as __mmask8, rq.offset.as_ptr()) });
        // SAFETY: the one block of `params` (contract).
        let p = unsafe { Rq16::load(params.as_ptr(), rq, offset, LEFT) };
        let store2 = |ox: usize, v: __m512i| {
            let b = p.bytes(v);
            // SAFETY: pixels ox and ox + 1 < out_w, `cols` bytes each.
            unsafe {
                if cols == 8 {
                    _mm_storeu_si128(o.add(ox * 8) as *mut __m128i, b);
                } else {
                    _mm_mask_storeu_epi8(o.add(ox * cols), k16, b);
                    _mm_mask_storeu_epi8(o.add((ox + 1) * cols), k16, _mm_srli_si128::<8>(b));
                }
            }
        };
        let mut ox = 0;
        while ox + 2 * TILE <= r.out_w {
            // SAFETY: pixels ox..ox + 2 * TILE <= out_w (in_bounds).
            let v = unsafe { tile_pairs::<TILE, P>(r, ox * r.px_step, p.offset) };
            for (t, v) in v.into_iter().enumerate() {
                store2(ox + 2 * t, v);
            }
            ox += 2 * TILE;
        }
        while ox + 2 <= r.out_w {
            // SAFETY: pixels ox, ox + 1 < out_w (in_bounds).
            let [v] = unsafe { tile_pairs::<1, P>(r, ox * r.px_step, p.offset) };
            store2(ox, v);
            ox += 2;
        }
        if ox < r.out_w {
            // SAFETY: pixel ox < out_w, its 8 channels' 16 values (in_bounds).
            let [v] = unsafe { tile::<1, P>(r, ox * r.px_step, r.w.as_ptr(), 0xFFFF, p.offset) };
            // SAFETY: pixel ox < out_w, `cols` bytes.
            unsafe { _mm_mask_storeu_epi8(o.add(ox * cols), k16, p.bytes(v)) };
        }
        return;
    }
    for cb in 0..r.cp.div_ceil(16) {
        let base = cb * 16;
        // In-bounds int16 lanes of the block (8 channels in a last half block),
        // and the output channels it holds (at least one: `cp - out_c < 8`).
        let lk: __mmask32 = if r.cp - base >= 16 { !0 } else { 0xFFFF };
        let cols = (r.out_c - base).min(16);
        let ok: __mmask16 = if cols == 16 { !0 } else { (1 << cols) - 1 };
        // SAFETY: offsets base..base + cols of out_c; block cb of `params` (contract).
        let p = unsafe { Rq16::load(params.as_ptr().add(cb * PARAMS * 16), rq, _mm512_maskz_loadu_epi32(ok, rq.offset.as_ptr().add(base)), LEFT) };
        // SAFETY: block cb of filter row 0's weights (in_bounds).
        let w = unsafe { r.w.as_ptr().add(base * 2) };
        let store = |ox: usize, v: __m512i| {
            let b = p.bytes(v);
            // SAFETY: pixel ox < out_w, channels base..base + cols <= out_c.
            unsafe {
                if cols == 16 {
                    _mm_storeu_si128(o.add(ox * r.out_c + base) as *mut __m128i, b);
                } else {
                    _mm_mask_storeu_epi8(o.add(ox * r.out_c + base), ok, b);
                }
            }
        };
        let mut ox = 0;
        while ox + TILE <= r.out_w {
            // SAFETY: pixels ox..ox + TILE <= out_w, block cb (in_bounds).
            let v = unsafe { tile::<TILE, P>(r, ox * r.px_step + base * 2, w, lk, p.offset) };
            for (t, v) in v.into_iter().enumerate() {
                store(ox + t, v);
            }
            ox += TILE;
        }
        while ox < r.out_w {
            // SAFETY: pixel ox < out_w, block cb (in_bounds).
            let [v] = unsafe { tile::<1, P>(r, ox * r.px_step + base * 2, w, lk, p.offset) };
            store(ox, v);
            ox += 1;
        }
    }
}

/// `(x - zp)` of pixel `p` of a pair line (input pixel `p - pad_left`), 16
/// channels from `c0` (the lanes of `kin`) as int32; 0 in the padding.
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL; the `kin` bytes from channel `c0` of
/// every pixel lie inside `src` (`width` pixels of `in_c` bytes).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn widen16(src: &[u8], in_c: usize, width: usize, p: usize, pad_left: usize, c0: usize, kin: __mmask16, flip: __m128i, zp: __m512i) -> __m512i {
    match p.checked_sub(pad_left).filter(|&x| x < width) {
        Some(x) => {
            // SAFETY: the `kin` bytes of pixel x from channel c0 (contract).
            let b = unsafe { _mm_maskz_loadu_epi8(kin, src.as_ptr().add(x * in_c + c0) as *const i8) };
            _mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm_xor_si128(b, flip)), zp)
        }
        None => _mm512_setzero_si512(),
    }
}

/// The pair line of one input row for any channel multiplier `m` (as
/// `super::pair_line_repeated`): each input channel's pair of int16 values
/// (pixels `p` and `p + dil`) as one int32 lane, repeated over its `m` output
/// channels by a lane permutation (none for `m == 1`). A one-channel input (a depthwise-first layer
/// on an image or spectrogram) takes 16 pixels per step and broadcasts each
/// pixel's pair over its `cp` lanes.
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL; `cp` is a multiple of 8, at least
/// `in_c * m` and less than `in_c * m + 8`, and `line` holds whole pixels of
/// `2 * cp` values.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pair_line_repeated(src: &[u8], in_c: usize, m: usize, pad_left: usize, dil: usize, zp: i32, flip: u8, cp: usize, line: &mut [i16]) {
    let in_c = in_c.max(1);
    let width = src.len() / in_c;
    let npl = line.len() / (2 * cp);
    let (flip, zp) = (_mm_set1_epi8(flip as i8), _mm512_set1_epi32(zp));
    let low = _mm512_set1_epi32(0xFFFF);
    let pack = |a: __m512i, b: __m512i| _mm512_or_si512(_mm512_and_si512(a, low), _mm512_slli_epi32::<16>(b));
    let out = line.as_mut_ptr() as *mut i32;
    // Stores the `cp` lanes of pixel p, all equal to `v`.
    let fill = |p: usize, v: __m512i| {
        let mut j = 0;
        while j < cp {
            let k: __mmask16 = if cp - j >= 16 { !0 } else { 0xFF };
            // SAFETY: lanes j..j + 16 (or 8) <= cp of pixel p < npl.
            unsafe { _mm512_mask_storeu_epi32(out.add(p * cp + j), k, v) };
            j += 16;
        }
    };
    if in_c == 1 {
        let mut p = 0;
        while p < npl {
            // 16 pixels whose both taps lie inside the row: two plain loads.
            let inside = p >= pad_left && p + 15 + dil < pad_left + width && p + 16 <= npl;
            if inside {
                let x = p - pad_left;
                // SAFETY: bytes x .. x + dil + 16 <= width lie inside `src`.
                let (a, b) = unsafe { (_mm_loadu_si128(src.as_ptr().add(x) as *const __m128i), _mm_loadu_si128(src.as_ptr().add(x + dil) as *const __m128i)) };
                let wid = |v: __m128i| _mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm_xor_si128(v, flip)), zp);
                let v = pack(wid(a), wid(b));
                if cp == 8 {
                    // Two pixels' 8 lanes per store.
                    let half = _mm512_srli_epi32::<3>(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
                    for t in 0..8 {
                        let pair = _mm512_permutexvar_epi32(_mm512_add_epi32(half, _mm512_set1_epi32(2 * t as i32)), v);
                        // SAFETY: the 16 lanes of pixels p + 2t and p + 2t + 1 < npl.
                        unsafe { _mm512_storeu_si512(out.add((p + 2 * t) * 8) as *mut _, pair) };
                    }
                } else {
                    for t in 0..16 {
                        fill(p + t, _mm512_permutexvar_epi32(_mm512_set1_epi32(t as i32), v));
                    }
                }
                p += 16;
            } else {
                // SAFETY: one byte of pixels p and p + dil where they lie in `src`.
                let (a, b) = unsafe { (widen16(src, 1, width, p, pad_left, 0, 1, flip, zp), widen16(src, 1, width, p + dil, pad_left, 0, 1, flip, zp)) };
                fill(p, _mm512_permutexvar_epi32(_mm512_setzero_si512(), pack(a, b)));
                p += 1;
            }
        }
        return;
    }
    let mut q = 0;
    while q < cp {
        // Output lanes q..q + 16 read input channels c0.. (at most 16 of them).
        let c0 = q / m;
        if c0 >= in_c {
            break;
        }
        let n_in = (in_c - c0).min(16);
        let kin: __mmask16 = if n_in == 16 { !0 } else { (1 << n_in) - 1 };
        let mut idx = [0i32; 16];
        for (l, i) in idx.iter_mut().enumerate() {
            *i = (((q + l) / m).saturating_sub(c0)).min(15) as i32;
        }
        // SAFETY: 16 int32 from a 16-element array.
        let idx = unsafe { _mm512_loadu_si512(idx.as_ptr() as *const _) };
        let k: __mmask16 = if cp - q >= 16 { !0 } else { 0xFF };
        for p in 0..npl {
            // SAFETY: the `kin` channels from c0 < in_c of pixels inside `src`.
            let (a, b) =
                unsafe { (widen16(src, in_c, width, p, pad_left, c0, kin, flip, zp), widen16(src, in_c, width, p + dil, pad_left, c0, kin, flip, zp)) };
            // SAFETY: lanes q..q + 16 (or 8) <= cp of pixel p < npl.
            let v = if m == 1 { pack(a, b) } else { _mm512_permutexvar_epi32(idx, pack(a, b)) };
            // SAFETY: lanes q..q + 16 (or 8) <= cp of pixel p < npl.
            unsafe { _mm512_mask_storeu_epi32(out.add(p * cp + q), k, v) };
        }
        q += 16;
    }
}

/// Depthwise convolution of a one-channel input (a depthwise-first layer on a
/// grey image or a spectrogram), prepared for [`one_channel_rows`]: every
/// output channel reads the same input plane, so instead of widening pairs of
/// pixels into int16 lanes (one `vpdpwssd` per two taps) the filter rows are
/// taken four taps at a time by `vpdpbusd`, the four input bytes broadcast
/// straight from a padded copy of the plane and multiplied by the four taps of
/// 16 channels. A 3x3 filter then costs three multiply-adds per output pixel
/// and 16 channels, not six, and there is no line to build.
///
/// The bytes are taken as unsigned, `u = (x - zp) + 128 + zp`: `vpdpbusd`
/// multiplies unsigned by signed bytes, so the plane holds the int8 value plus
/// 128 and the padding holds `128 + zp` (whose taps then contribute nothing
/// after the correction); the sums are corrected by `(128 + zp) * sum(w)` per
/// channel, folded into the starting values. Taps past the filter's width in
/// the last group of four have zero weights.
#[derive(Debug, Clone)]
pub(super) struct OneChannel {
    /// Groups of four filter columns: `k_w.div_ceil(4)`.
    groups: usize,
    /// Output lanes per filter row group: `out_c` rounded up to 16 (16 where
    /// `out_c <= 8`: two output pixels per vector, the channels repeated).
    lanes: usize,
    /// `[k_h][groups][lanes][4]` int8 weights (less their zero point).
    w: Vec<i8>,
    /// Per output channel, `(128 + zp) * sum(w)`: taken from the bias per run.
    correction: Vec<i32>,
    /// The padded plane of one image, `height * width` bytes: the padding
    /// holds the pad byte from preparation on, the inside is rewritten per run.
    plane: Vec<u8>,
    height: usize,
    width: usize,
    /// The run's starting values, `bias - correction` per output channel.
    start: Vec<i32>,
}

impl OneChannel {
    /// The plane's `(height, width)` for geometry `g`: every row and column the
    /// windows reach, the last group of four columns included.
    pub(super) fn plane_size(g: &crate::conv::Window) -> (usize, usize) {
        let height = g.out_h.saturating_sub(1) * g.stride_h + g.k_h.saturating_sub(1) * g.dil_h + 1;
        let width = g.out_w.saturating_sub(1) * g.stride_w + 4 * g.k_w.div_ceil(4);
        (height, width)
    }

    /// Prepares `weight(i)` (element `i` of `[1, kh, kw, out_c]` less the
    /// weights' zero point) for geometry `g` of a one-channel input with int8
    /// zero point `zp8`; None where this form does not apply: an input of more
    /// than one channel, a dilated row (its taps are not adjacent bytes), a
    /// weight outside int8 (uint8 weights with a zero point away from 128), or
    /// a CPU without AVX-512 VNNI.
    pub(super) fn new(g: &crate::conv::Window, in_c: usize, out_c: usize, zp8: i32, weight: &impl Fn(usize) -> i16) -> Option<OneChannel> {
        if in_c != 1 || g.dil_w != 1 || out_c == 0 || g.out_w == 0 || g.out_h == 0 || !available() {
            return None;
        }
        let n = g.k_h * g.k_w * out_c;
        let mut values = Vec::with_capacity(n);
        for i in 0..n {
            values.push(i8::try_from(weight(i)).ok()?);
        }
        let groups = g.k_w.div_ceil(4);
        let lanes = out_c.next_multiple_of(16);
        let mut w = vec![0i8; g.k_h * groups * lanes * 4];
        let mut correction = vec![0i32; out_c];
        for ky in 0..g.k_h {
            for kx in 0..g.k_w {
                for l in 0..lanes {
                    // Two pixels per vector: lanes 8..16 repeat channels 0..8.
                    let o = if out_c <= 8 { l % 8 } else { l };
                    if o >= out_c {
                        continue;
                    }
                    let v = values[(ky * g.k_w + kx) * out_c + o];
                    w[((ky * groups + kx / 4) * lanes + l) * 4 + kx % 4] = v;
                    if l == o {
                        // Wrapping: the sums wrap alike (a filter of 2^16 taps could pass 2^31).
                        correction[o] = correction[o].wrapping_add((128 + zp8) * i32::from(v));
                    }
                }
            }
        }
        let (height, width) = OneChannel::plane_size(g);
        Some(OneChannel { groups, lanes, w, correction, plane: vec![(128 + zp8) as u8; height * width], height, width, start: vec![0; out_c] })
    }

    /// Copies image `image` of `input` (`in_h * in_w` bytes each) into the
    /// plane as unsigned bytes (`x ^ flip ^ 0x80`), at the padding's offset.
    fn fill_plane(&mut self, g: &crate::conv::Window, input: &[u8], image: usize, flip: u8) {
        let src = &input[image * g.in_h * g.in_w..][..g.in_h * g.in_w];
        let cols = g.in_w.min(self.width.saturating_sub(g.pad_left));
        if cols == 0 {
            return;
        }
        for (iy, row) in src.chunks_exact(g.in_w.max(1)).enumerate() {
            let y = iy + g.pad_top;
            if y >= self.height {
                break;
            }
            let dst = &mut self.plane[y * self.width + g.pad_left..][..cols];
            for (d, &x) in dst.iter_mut().zip(&row[..cols]) {
                *d = x ^ flip ^ 0x80;
            }
        }
    }
}

/// The one-channel depthwise convolution of [`OneChannel`] over every image of
/// `input` (int8 bytes, or uint8 with `flip` 0x80), requantized by `rq` (its
/// scales laid out by [`block_params`] for `OneChannel::lanes`, or for 8 lanes
/// where `out_c <= 8`) into `out` (int8).
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL and VNNI ([`available`]); `oc` was
/// prepared for `g` and `out_c` channels; `params` holds the blocks of
/// [`block_params`] as said; `input` and `out` hold `g.batch` images;
/// `bias`, where given, `out_c` values and `rq` `out_c` channels.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn one_channel(
    oc: &mut OneChannel,
    g: &crate::conv::Window,
    out_c: usize,
    flip: u8,
    input: &[u8],
    bias: Option<&[i32]>,
    rq: &RowRequant,
    params: &[i32],
    left: bool,
    out: &mut [i8],
) {
    for (o, (s, &c)) in oc.start.iter_mut().zip(&oc.correction).enumerate() {
        *s = bias.map_or(0, |b| b[o]).wrapping_sub(c);
    }
    let image_out = g.out_h * g.out_w * out_c;
    for image in 0..g.batch {
        oc.fill_plane(g, input, image, flip);
        let o = &mut out[image * image_out..][..image_out];
        // SAFETY: the caller's contract; the plane was just filled.
        unsafe {
            match (oc.groups, out_c <= 8) {
                (1, false) => one_channel_image::<1, false>(oc, g, out_c, rq, params, left, o),
                (1, true) => one_channel_image::<1, true>(oc, g, out_c, rq, params, left, o),
                (2, false) => one_channel_image::<2, false>(oc, g, out_c, rq, params, left, o),
                (2, true) => one_channel_image::<2, true>(oc, g, out_c, rq, params, left, o),
                (_, false) => one_channel_image::<0, false>(oc, g, out_c, rq, params, left, o),
                (_, true) => one_channel_image::<0, true>(oc, g, out_c, rq, params, left, o),
            }
        }
    }
}

/// The four plane bytes at `p` as one int32 (broadcast by the caller).
///
/// # Safety
/// `p..p + 4` lies inside the plane.
#[inline(always)]
unsafe fn four(p: *const u8) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { (p as *const i32).read_unaligned() }
}

/// One image of [`one_channel`], the plane filled: `G` groups of four filter
/// columns (`oc.groups` where `G` is 0); `PAIRS`: two output pixels per vector
/// (`out_c <= 8`), else blocks of 16 channels.
///
/// # Safety
/// As [`one_channel`]; `out` holds one image's output.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn one_channel_image<const G: usize, const PAIRS: bool>(
    oc: &OneChannel,
    g: &crate::conv::Window,
    out_c: usize,
    rq: &RowRequant,
    params: &[i32],
    left: bool,
    out: &mut [i8],
) {
    let groups = if G == 0 { oc.groups } else { G };
    let (plane, w, width, lanes) = (oc.plane.as_ptr(), oc.w.as_ptr(), oc.width, oc.lanes);
    let (sw, kh) = (g.stride_w, g.k_h);
    let o = out.as_mut_ptr();
    // The `T` pixels `ox + i * step` of output row `oy`, lanes from `lane0`,
    // pixel `ox + i * step + 1` in the high half where `PAIRS`.
    let tile = |oy: usize, ox: usize, step: usize, lane0: usize, init: __m512i, acc: &mut [__m512i]| {
        acc.fill(init);
        for ky in 0..kh {
            let row = plane.wrapping_add((oy * g.stride_h + ky * g.dil_h) * width);
            for j in 0..groups {
                // SAFETY: the `lanes * 4` weights of filter row ky, group j,
                // from lane lane0 < lanes (16 lanes, 64 bytes).
                let wv = unsafe { _mm512_loadu_si512(w.add(((ky * groups + j) * lanes + lane0) * 4) as *const _) };
                for (t, a) in acc.iter_mut().enumerate() {
                    let p = row.wrapping_add((ox + t * step) * sw + 4 * j);
                    // SAFETY: pixel ox + t * step (and the next where PAIRS) <
                    // out_w: its group's 4 bytes lie in the plane's row
                    // (`plane_size`), row oy * stride_h + ky * dil_h < height.
                    let xv = unsafe {
                        if PAIRS {
                            _mm512_mask_set1_epi32(_mm512_set1_epi32(four(p)), 0xFF00, four(p.add(sw)))
                        } else {
                            _mm512_set1_epi32(four(p))
                        }
                    };
                    *a = _mm512_dpbusd_epi32(*a, xv, wv);
                }
            }
        }
    };
    if PAIRS {
        let k16: __mmask16 = (1 << out_c) - 1;
        // SAFETY: the `out_c` starting values, repeated in both halves.
        let start = _mm512_broadcast_i64x4(unsafe { _mm256_maskz_loadu_epi32(k16 as __mmask8, oc.start.as_ptr()) });
        // SAFETY: the one block of `params` (contract).
        let p = unsafe { Rq16::load(params.as_ptr(), rq, start, left) };
        let store2 = |at: usize, v: __m512i| {
            let b = p.bytes(v);
            // SAFETY: pixels at and at + 1 of the image, `out_c` bytes each.
            unsafe {
                if out_c == 8 {
                    _mm_storeu_si128(o.add(at * 8) as *mut __m128i, b);
                } else {
                    _mm_mask_storeu_epi8(o.add(at * out_c), k16, b);
                    _mm_mask_storeu_epi8(o.add((at + 1) * out_c), k16, _mm_srli_si128::<8>(b));
                }
            }
        };
        let mut acc = [_mm512_setzero_si512(); TILE];
        for oy in 0..g.out_h {
            let at = oy * g.out_w;
            let mut ox = 0;
            while ox + 2 * TILE <= g.out_w {
                tile(oy, ox, 2, 0, p.offset, &mut acc);
                for (t, &v) in acc.iter().enumerate() {
                    store2(at + ox + 2 * t, v);
                }
                ox += 2 * TILE;
            }
            while ox + 2 <= g.out_w {
                tile(oy, ox, 2, 0, p.offset, &mut acc[..1]);
                store2(at + ox, acc[0]);
                ox += 2;
            }
            if ox < g.out_w {
                // The last pixel alone, in the low half (the high half's
                // lanes are not stored): one broadcast, no neighbour read.
                let mut one = [p.offset];
                let tile0 = |acc: &mut [__m512i]| {
                    for ky in 0..kh {
                        let row = plane.wrapping_add((oy * g.stride_h + ky * g.dil_h) * width);
                        for j in 0..groups {
                            // SAFETY: as in `tile`.
                            let wv = unsafe { _mm512_loadu_si512(w.add((ky * groups + j) * lanes * 4) as *const _) };
                            // SAFETY: pixel ox < out_w's group (as in `tile`).
                            let xv = _mm512_set1_epi32(unsafe { four(row.add(ox * sw + 4 * j)) });
                            acc[0] = _mm512_dpbusd_epi32(acc[0], xv, wv);
                        }
                    }
                };
                tile0(&mut one);
                // SAFETY: pixel ox of the image, `out_c` bytes.
                unsafe { _mm_mask_storeu_epi8(o.add((at + ox) * out_c), k16, p.bytes(one[0])) };
            }
        }
        return;
    }
    for cb in 0..lanes / 16 {
        let base = cb * 16;
        let cols = (out_c - base).min(16);
        let ok: __mmask16 = if cols == 16 { !0 } else { (1 << cols) - 1 };
        // SAFETY: starting values base..base + cols of out_c; block cb of
        // `params` (contract).
        let p = unsafe { Rq16::load(params.as_ptr().add(cb * PARAMS * 16), rq, _mm512_maskz_loadu_epi32(ok, oc.start.as_ptr().add(base)), left) };
        let store = |at: usize, v: __m512i| {
            let b = p.bytes(v);
            // SAFETY: pixel at of the image, channels base..base + cols <= out_c.
            unsafe {
                if cols == 16 {
                    _mm_storeu_si128(o.add(at * out_c + base) as *mut __m128i, b);
                } else {
                    _mm_mask_storeu_epi8(o.add(at * out_c + base), ok, b);
                }
            }
        };
        let mut acc = [_mm512_setzero_si512(); TILE];
        for oy in 0..g.out_h {
            let at = oy * g.out_w;
            let mut ox = 0;
            while ox + TILE <= g.out_w {
                tile(oy, ox, 1, base, p.offset, &mut acc);
                for (t, &v) in acc.iter().enumerate() {
                    store(at + ox + t, v);
                }
                ox += TILE;
            }
            while ox < g.out_w {
                tile(oy, ox, 1, base, p.offset, &mut acc[..1]);
                store(at + ox, acc[0]);
                ox += 1;
            }
        }
    }
}
