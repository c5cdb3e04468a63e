//! x86-64 kernels of [`super`]: the AVX-512 VNNI int8 GEMM and the AVX-512F
//! row requantization, reached through `super::gemm_with` (whose `QIsa` token
//! proves the CPU features) and `super::RowRequant::apply`.

use super::{QPacked, NR};
use std::arch::x86_64::*;

/// Rows per register tile.
const MR: usize = 8;

/// `R` rows of one panel: `R` accumulators of 16 channels, one weight load and
/// `R` broadcasts per group of four `k`.
///
/// # Safety
/// The CPU must support AVX-512F/BW and VNNI; `a` points to `R` rows of `kq`
/// bytes (`kq >= 4 * groups`), `w` to a panel of `groups * 64` weights, and `out`
/// to `R` output rows of `ldo` ints, `cols <= 16` of them written per row.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const R: usize>(a: *const u8, kq: usize, w: *const i8, groups: usize, out: *mut i32, ldo: usize, cols: usize) {
    let mut acc = [_mm512_setzero_si512(); R];
    for g in 0..groups {
        // SAFETY: group g < groups of a panel of groups * 64 weights (contract).
        let wv = unsafe { _mm512_loadu_si512(w.add(g * 64) as *const _) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: bytes 4g..4g + 4 <= kq of row r < R (contract); unaligned read.
            let av = _mm512_set1_epi32(unsafe { (a.add(r * kq + g * 4) as *const i32).read_unaligned() });
            *acc = _mm512_dpbusd_epi32(*acc, av, wv);
        }
    }
    let mask: __mmask16 = if cols >= NR { 0xFFFF } else { (1u16 << cols) - 1 };
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: row r < R of `out`, masked to the `cols` written columns (contract).
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
            // SAFETY: masked to the `cols` lanes from index j of a row of n bytes.
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
        // SAFETY: panel p < n.div_ceil(NR) starts inside `pk.w`, which holds every
        // panel (QPacked's invariant).
        let w = unsafe { pk.w.as_ptr().add(p * groups * NR * 4) };
        let cols = NR.min(pk.n - p * NR);
        let mut m = 0;
        while m < rows {
            // SAFETY: row m < rows starts inside `a` (rows * kq bytes) and `out`
            // (rows * n ints), which the caller checked.
            let (ap, op) = unsafe { (a.as_ptr().add(m * pk.kq), out.as_mut_ptr().add(m * pk.n + p * NR)) };
            if rows - m >= MR {
                // SAFETY: rows m..m + MR lie inside `a` and `out`; the panel holds
                // groups * 64 weights; cols <= 16 columns of this panel are written.
                unsafe { tile::<MR>(ap, pk.kq, w, groups, op, pk.n, cols) };
                m += MR;
            } else {
                // SAFETY: as above, for row m alone.
                unsafe { tile::<1>(ap, pk.kq, w, groups, op, pk.n, cols) };
                m += 1;
            }
        }
    }
}
