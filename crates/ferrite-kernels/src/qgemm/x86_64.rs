//! x86-64 kernels of [`super`]: the int8 GEMM with AVX-512 VNNI and with AVX2,
//! and the row requantization with AVX-512F and with AVX2, reached through
//! `super::gemm_with` (whose `QIsa` token proves the CPU features) and
//! `super::RowRequant::apply`.

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

/// [`requant`] rounding once ([`super::Rounding::Single`], as
/// `super::requant_rows_single`): 16 channels per step, the exact 64-bit
/// products of even and odd lanes shifted with one rounding.
///
/// # Safety
/// The CPU must support AVX-512F; `dots` and `out` hold whole rows of `n`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn requant_single(rq: &super::RowRequant, dots: &[i32], out: &mut [i8]) {
    let n = rq.offset.len();
    let mut j = 0;
    while j < n {
        let cols = NR.min(n - j);
        let k: __mmask16 = if cols >= NR { 0xFFFF } else { (1u16 << cols) - 1 };
        // SAFETY: masked to the `cols` lanes from index j of rq's arrays (all of length n).
        let s = super::vnni::Scale16::from_lanes(rq, |p| unsafe { _mm512_maskz_loadu_epi32(k, p.add(j)) });
        for (row, orow) in dots.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            // SAFETY: masked to the `cols` lanes from index j of a row of n.
            let d = unsafe { _mm512_maskz_loadu_epi32(k, row.as_ptr().add(j)) };
            let v = s.single(d);
            // SAFETY: masked to the `cols` lanes from index j of a row of n bytes.
            unsafe { _mm512_mask_cvtepi32_storeu_epi8(orow.as_mut_ptr().add(j) as *mut _, k, v) };
        }
        j += NR;
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

/// Rows per AVX2 register tile: 6 rows of 8 channels take 12 accumulators, plus
/// 2 weight registers and 1 activation register of the 16.
const MR_AVX2: usize = 6;

/// `R` rows of `4 * Q` channels (`Q` quads of one panel): per group of four `k`,
/// each quad's 16 weights (4 channels x 4 k) sign-extended to int16 once, each
/// row's 4 bytes zero-extended to int16 and repeated 4 times, and one `vpmaddwd`
/// per row and quad: 8 exact int32 sums of two products (|sum| <= 2 * 255 * 128),
/// two per channel. `vpmaddubsw` would be one step shorter but saturates its int16
/// pair sums (255 * 127 * 2 > 32767), so it is not exact here. The pairs are added
/// once per tile (`vphaddd`) and put back in channel order (`vpermq`).
///
/// # Safety
/// The CPU must support AVX2; `a` points to `R` rows of `kq` bytes
/// (`kq >= 4 * groups`), `w` to the quad's first 16 bytes of group 0 of a panel
/// (groups of 64 bytes, `16 * Q` of them read per group), and `out` to `R` rows
/// of `ldo` ints, `cols <= 4 * Q` of them written per row.
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2<const R: usize, const Q: usize>(a: *const u8, kq: usize, w: *const i8, groups: usize, out: *mut i32, ldo: usize, cols: usize) {
    let mut acc = [[_mm256_setzero_si256(); Q]; R];
    for g in 0..groups {
        // SAFETY: group g < groups of the panel, quads inside its 64 bytes (contract).
        let wv: [__m256i; Q] = std::array::from_fn(|q| _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(w.add(g * 64 + q * 16) as *const __m128i) }));
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: bytes 4g..4g + 4 <= kq of row r < R (contract); unaligned read.
            let word = unsafe { (a.add(r * kq + g * 4) as *const i32).read_unaligned() };
            let av = _mm256_cvtepu8_epi16(_mm_set1_epi32(word));
            for (acc, &wv) in acc.iter_mut().zip(&wv) {
                *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(av, wv));
            }
        }
    }
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    // Quads in pairs: 8 output channels per store.
    for pair in 0..Q.div_ceil(2) {
        let cols = cols.saturating_sub(8 * pair).min(8);
        let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols as i32), lane);
        for (r, acc) in acc.iter().enumerate() {
            // Pairs of adjacent lanes summed: 64-bit lanes [q0 c0c1, q1 c0c1, q0 c2c3, q1 c2c3].
            let sums = _mm256_hadd_epi32(acc[2 * pair], acc[(2 * pair + 1).min(Q - 1)]);
            let v = _mm256_permute4x64_epi64::<0b11_01_10_00>(sums);
            // SAFETY: row r < R of `out`, masked to the `cols` written columns (contract).
            unsafe {
                let o = out.add(r * ldo + 8 * pair);
                if Q == 1 {
                    _mm_maskstore_epi32(o, _mm256_castsi256_si128(keep), _mm256_castsi256_si128(v));
                } else if cols == 8 {
                    _mm256_storeu_si256(o as *mut __m256i, v);
                } else if cols > 0 {
                    _mm256_maskstore_epi32(o, keep, v);
                }
            }
        }
    }
}

/// `rows` rows of `Q` quads of one panel, in tiles of [`MR_AVX2`] rows and one
/// shorter tile at the end.
///
/// # Safety
/// As [`tile_avx2`], with `a` and `out` holding `rows` rows.
#[target_feature(enable = "avx2")]
unsafe fn rows_avx2<const Q: usize>(a: *const u8, rows: usize, kq: usize, w: *const i8, groups: usize, out: *mut i32, ldo: usize, cols: usize) {
    let mut m = 0;
    while m + MR_AVX2 <= rows {
        // SAFETY: rows m..m + MR_AVX2 lie inside `a` and `out` (contract).
        unsafe { tile_avx2::<MR_AVX2, Q>(a.add(m * kq), kq, w, groups, out.add(m * ldo), ldo, cols) };
        m += MR_AVX2;
    }
    // SAFETY: the remaining rows m..rows lie inside `a` and `out` (contract).
    let (a, out) = unsafe { (a.add(m * kq), out.add(m * ldo)) };
    // SAFETY: as above, for the rows - m < MR_AVX2 remaining rows.
    unsafe {
        match rows - m {
            1 => tile_avx2::<1, Q>(a, kq, w, groups, out, ldo, cols),
            2 => tile_avx2::<2, Q>(a, kq, w, groups, out, ldo, cols),
            3 => tile_avx2::<3, Q>(a, kq, w, groups, out, ldo, cols),
            4 => tile_avx2::<4, Q>(a, kq, w, groups, out, ldo, cols),
            5 => tile_avx2::<5, Q>(a, kq, w, groups, out, ldo, cols),
            _ => {}
        }
    }
}

/// The AVX2 int8 GEMM over the shared packed layout: per panel, channels in
/// pairs of quads (8 channels, a quad alone for a panel's last 1-4 channels),
/// so a panel of 8 or fewer channels costs no work for its zero padding.
///
/// # Safety
/// The CPU must support AVX2; `a` holds `rows * pk.kq` bytes and `out`
/// `rows * pk.n` ints.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn gemm_avx2(a: &[u8], rows: usize, pk: &QPacked, out: &mut [i32]) {
    let groups = pk.kq / 4;
    for p in 0..pk.n.div_ceil(NR) {
        let cols = NR.min(pk.n - p * NR);
        if rows < MR_AVX2 && cols > 8 {
            // Few rows (batch-1 fully-connected layers, a last block): a whole
            // panel per tile of up to 2 rows, 4 weight vectors per broadcast row.
            let mut m = 0;
            while m < rows {
                // SAFETY: panel p lies inside `pk.w` and rows m..m + 2 (or m) inside
                // `a` and `out` (as below); cols <= 16 columns from p * NR written.
                unsafe {
                    let (w, ap, o) = (pk.w.as_ptr().add(p * groups * NR * 4), a.as_ptr().add(m * pk.kq), out.as_mut_ptr().add(m * pk.n + p * NR));
                    if rows - m >= 2 {
                        tile_avx2::<2, 4>(ap, pk.kq, w, groups, o, pk.n, cols);
                    } else {
                        tile_avx2::<1, 4>(ap, pk.kq, w, groups, o, pk.n, cols);
                    }
                }
                m += 2;
            }
            continue;
        }
        let mut c = 0;
        while c < cols {
            let take = 8.min(cols - c);
            // SAFETY: panel p < n.div_ceil(NR) and its quad c / 4 < 4 lie inside
            // `pk.w` (QPacked's invariant); columns p * NR + c.. of `out` are inside
            // its rows of n (c + take <= cols); `a` and `out` hold `rows` rows (contract).
            unsafe {
                let w = pk.w.as_ptr().add(p * groups * NR * 4 + c * 4);
                let o = out.as_mut_ptr().add(p * NR + c);
                if take > 4 {
                    rows_avx2::<2>(a.as_ptr(), rows, pk.kq, w, groups, o, pk.n, take);
                } else {
                    rows_avx2::<1>(a.as_ptr(), rows, pk.kq, w, groups, o, pk.n, take);
                }
            }
            c += take;
        }
    }
}

/// The AVX2 form of [`requant`], 8 channels per step, each step's channel
/// parameters loaded once for all rows: the 64-bit products of even and odd
/// lanes (`vpmuldq`), whose bits 31..62 are the rounded high half (logical
/// shifts keep the same low 32 bits as the arithmetic ones AVX2 lacks for 64-bit
/// lanes), then the rounding right shift, zero point and clamp.
///
/// # Safety
/// The CPU must support AVX2; `dots` and `out` hold whole rows of `n`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn requant_avx2(rq: &super::RowRequant, dots: &[i32], out: &mut [i8]) {
    // SAFETY: the caller's contract, with no row terms.
    unsafe { requant_avx2_with::<false, false>(rq, dots, &[], out) }
}

/// `(p + 2^(t - 1)) >> t` of 64-bit lanes `p` (arithmetic, `|p| < 2^62`, `t`
/// in 1..=62), given `add = 2^(t - 1) + 2^62` and `sub = 2^(62 - t)`: AVX2
/// shifts 64-bit lanes only logically, so the sum is made nonnegative first
/// (below 2^64 as unsigned) and the shifted bias taken off after, which is
/// exact as `2^t` divides `2^62`. With `SAT` the result is clamped to int32
/// (needed only where `t < 31`: otherwise it fits already).
#[inline]
#[target_feature(enable = "avx2")]
fn round_shift_i64_avx2<const SAT: bool>(p: __m256i, t: __m256i, add: __m256i, sub: __m256i) -> __m256i {
    let v = _mm256_sub_epi64(_mm256_srlv_epi64(_mm256_add_epi64(p, add), t), sub);
    if !SAT {
        return v;
    }
    let (lo, hi) = (_mm256_set1_epi64x(i64::from(i32::MIN)), _mm256_set1_epi64x(i64::from(i32::MAX)));
    let v = _mm256_blendv_epi8(v, lo, _mm256_cmpgt_epi64(lo, v));
    _mm256_blendv_epi8(v, hi, _mm256_cmpgt_epi64(v, hi))
}

/// [`requant_avx2`] rounding once ([`super::Rounding::Single`], as
/// `super::requant_rows_single`): 8 channels per step, the exact 64-bit
/// products of even and odd lanes shifted with one rounding.
///
/// # Safety
/// The CPU must support AVX2; `dots` and `out` hold whole rows of `n`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn requant_single_avx2(rq: &super::RowRequant, dots: &[i32], out: &mut [i8]) {
    let n = rq.offset.len();
    if n == 0 {
        return;
    }
    let rows = dots.len() / n;
    let (zp, lo, hi) = (_mm256_set1_epi32(rq.out_zp), _mm256_set1_epi32(rq.min), _mm256_set1_epi32(rq.max));
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    // A scale of 1 or more (a shift below 31) can leave int32; only then clamp.
    let sat = rq.single_sat;
    let mut j = 0;
    while j < n {
        let cols = 8.min(n - j);
        let k = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols as i32), lane);
        // SAFETY: reads the `cols` valid lanes from index j of arrays of length
        // n (masked unless all 8 are), and block j / 8's 24 terms, which the
        // caller checked `single_terms` holds.
        let (off, m, even, odd) = unsafe {
            let load = |p: *const i32| if cols == 8 { _mm256_loadu_si256(p.add(j) as *const __m256i) } else { _mm256_maskload_epi32(p.add(j), k) };
            let t = rq.single_terms.as_ptr().add(j / 8 * 24) as *const __m256i;
            let term = |i: usize| _mm256_loadu_si256(t.add(i));
            (load(rq.offset.as_ptr()), load(rq.multiplier.as_ptr()), (term(0), term(2), term(4)), (term(1), term(3), term(5)))
        };
        let m_odd = _mm256_shuffle_epi32::<0xF5>(m);
        for r in 0..rows {
            let at = r * n + j;
            // SAFETY: row r < rows holds n ints from r * n, of which the `cols`
            // from j are read (masked unless all 8 are).
            let d = unsafe {
                if cols == 8 {
                    _mm256_loadu_si256(dots.as_ptr().add(at) as *const __m256i)
                } else {
                    _mm256_maskload_epi32(dots.as_ptr().add(at), k)
                }
            };
            let x = _mm256_add_epi32(d, off);
            let (pe, po) = (_mm256_mul_epi32(x, m), _mm256_mul_epi32(_mm256_shuffle_epi32::<0xF5>(x), m_odd));
            let (ve, vo) = if sat {
                (round_shift_i64_avx2::<true>(pe, even.0, even.1, even.2), round_shift_i64_avx2::<true>(po, odd.0, odd.1, odd.2))
            } else {
                (round_shift_i64_avx2::<false>(pe, even.0, even.1, even.2), round_shift_i64_avx2::<false>(po, odd.0, odd.1, odd.2))
            };
            let v = _mm256_blend_epi32::<0xAA>(ve, _mm256_slli_epi64::<32>(vo));
            // The zero point wraps, as in the scalar form.
            let v = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(v, zp), lo), hi);
            // Clamped to int8 already, so the saturating packs only narrow.
            let h = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let packed = _mm_packs_epi16(h, h);
            if cols == 8 {
                // SAFETY: bytes at..at + 8 lie inside row r of `out` (n bytes from r * n).
                unsafe { _mm_storel_epi64(out.as_mut_ptr().add(at) as *mut __m128i, packed) };
            } else {
                // The last 1-7 channels in 4-, 2- and 1-byte pieces: a copy of
                // `cols` bytes would be a call, for which the loop's registers spill.
                let mut bytes = _mm_cvtsi128_si64(packed) as u64;
                let (mut at, end) = (at, at + cols);
                assert!(end <= out.len(), "requant: row out of bounds");
                for piece in [4, 2, 1] {
                    if (end - at) & piece != 0 {
                        // SAFETY: at + piece <= end <= out.len() (asserted above).
                        unsafe {
                            let o = out.as_mut_ptr().add(at);
                            match piece {
                                4 => (o as *mut u32).write_unaligned(bytes as u32),
                                2 => (o as *mut u16).write_unaligned(bytes as u16),
                                _ => o.write(bytes as i8),
                            }
                        }
                        bytes >>= 8 * piece;
                        at += piece;
                    }
                }
            }
        }
        j += 8;
    }
}

/// [`requant_avx2`] with `row_add[r]` added to row `r`'s accumulators (none if
/// `row_add` is empty) and, if `to_u8`, each output byte xor 0x80 (the uint8
/// convolutions' weight zero-point term and shift back to uint8, without two
/// more passes).
///
/// # Safety
/// The CPU must support AVX2; `dots` and `out` hold whole rows of `n`, and
/// `row_add` is empty or holds one value per row.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn requant_avx2_fused(rq: &super::RowRequant, dots: &[i32], row_add: &[i32], to_u8: bool, out: &mut [i8]) {
    // SAFETY: the caller's contract; `ROWS` only where `row_add` holds the rows.
    unsafe {
        match (!row_add.is_empty(), to_u8) {
            (false, false) => requant_avx2_with::<false, false>(rq, dots, row_add, out),
            (false, true) => requant_avx2_with::<false, true>(rq, dots, row_add, out),
            (true, false) => requant_avx2_with::<true, false>(rq, dots, row_add, out),
            (true, true) => requant_avx2_with::<true, true>(rq, dots, row_add, out),
        }
    }
}

/// [`requant_avx2_fused`] with the row terms (`ROWS`) and the shift to uint8
/// (`FLIP`, xor 0x80) chosen at compile time, so the int8 form has no extra step.
///
/// # Safety
/// As [`requant_avx2_fused`], with `row_add` holding one value per row if `ROWS`.
// `r` indexes the rows of `dots` and `out` (through pointers) as well as `row_add`.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2")]
unsafe fn requant_avx2_with<const ROWS: bool, const FLIP: bool>(rq: &super::RowRequant, dots: &[i32], row_add: &[i32], out: &mut [i8]) {
    let n = rq.offset.len();
    if n == 0 {
        return;
    }
    let rows = dots.len() / n;
    let (half, one) = (_mm256_set1_epi64x(1 << 30), _mm256_set1_epi32(1));
    let (zp, lo, hi) = (_mm256_set1_epi32(rq.out_zp), _mm256_set1_epi32(rq.min), _mm256_set1_epi32(rq.max));
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mut j = 0;
    while j < n {
        let cols = 8.min(n - j);
        let k = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols as i32), lane);
        // SAFETY: every load reads the `cols` valid lanes from index j of arrays
        // of length n (masked unless all 8 are).
        let (off, m, left, right) = unsafe {
            let load = |p: *const i32| if cols == 8 { _mm256_loadu_si256(p as *const __m256i) } else { _mm256_maskload_epi32(p, k) };
            (
                load(rq.offset.as_ptr().add(j)),
                load(rq.multiplier.as_ptr().add(j)),
                load(rq.left.as_ptr().add(j) as *const i32),
                load(rq.right.as_ptr().add(j) as *const i32),
            )
        };
        let m_odd = _mm256_shuffle_epi32::<0xF5>(m);
        let mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, right), one);
        let half_mask = _mm256_srli_epi32::<1>(mask);
        for r in 0..rows {
            let at = r * n + j;
            // SAFETY: row r < rows holds n ints from index r * n, of which the
            // `cols` from j are read (all 8 with a plain load when cols is 8).
            let d = unsafe {
                if cols == 8 {
                    _mm256_loadu_si256(dots.as_ptr().add(at) as *const __m256i)
                } else {
                    _mm256_maskload_epi32(dots.as_ptr().add(at), k)
                }
            };
            let d = if ROWS { _mm256_add_epi32(d, _mm256_set1_epi32(row_add[r])) } else { d };
            let x = _mm256_sllv_epi32(_mm256_add_epi32(d, off), left);
            let even = _mm256_srli_epi64::<31>(_mm256_add_epi64(_mm256_mul_epi32(x, m), half));
            let odd = _mm256_slli_epi64::<1>(_mm256_add_epi64(_mm256_mul_epi32(_mm256_shuffle_epi32::<0xF5>(x), m_odd), half));
            let high = _mm256_blend_epi32::<0xAA>(even, odd);
            let threshold = _mm256_add_epi32(half_mask, _mm256_srli_epi32::<31>(high));
            // All ones (-1) where the remainder rounds up.
            let up = _mm256_cmpgt_epi32(_mm256_and_si256(high, mask), threshold);
            let v = _mm256_sub_epi32(_mm256_srav_epi32(high, right), up);
            let v = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(v, zp), lo), hi);
            // Clamped to int8 already, so the saturating packs only narrow.
            let h = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let packed = _mm_packs_epi16(h, h);
            let packed = if FLIP { _mm_xor_si128(packed, _mm_set1_epi8(i8::MIN)) } else { packed };
            if cols == 8 {
                // SAFETY: bytes at..at + 8 lie inside row r of `out` (n bytes from r * n).
                unsafe { _mm_storel_epi64(out.as_mut_ptr().add(at) as *mut __m128i, packed) };
            } else {
                let bytes = _mm_cvtsi128_si64(packed).to_le_bytes();
                for (o, &b) in out[at..at + cols].iter_mut().zip(&bytes) {
                    *o = b as i8;
                }
            }
        }
        j += 8;
    }
}

/// Output pixels per tile of [`depthwise_row_avx2`].
const DW_TILE: usize = 4;

/// `T` output pixels of one 8-channel block: per filter row and column pair, one
/// weight load and, per pixel, one `vpmaddwd` of the pair line's 8 channel pairs.
///
/// # Safety
/// The CPU must support AVX2; `x` points at the first pixel's block in the
/// first filter row's line (the others at `r.offs` relative to it), `w` at the
/// block's weights of that filter row, and every read stays inside `r.lines`
/// and `r.w` (`DwRow::in_bounds` and `T` pixels left in the row).
#[target_feature(enable = "avx2")]
unsafe fn dw_tile<const T: usize>(r: &super::DwRow<'_>, x: usize, w: *const i16) -> [__m256i; T] {
    let mut acc = [_mm256_setzero_si256(); T];
    let lines = r.lines.as_ptr();
    for (k, &off) in r.offs.iter().enumerate() {
        for pr in 0..r.pairs {
            // SAFETY: weights of filter row k and pair pr, this block (contract).
            let wv = unsafe { _mm256_loadu_si256(w.add((k * r.pairs + pr) * 2 * r.cp) as *const __m256i) };
            for (t, acc) in acc.iter_mut().enumerate() {
                // SAFETY: pixel t's pair pr in filter row k's line (contract).
                let xv = unsafe { _mm256_loadu_si256(lines.add(off + x + t * r.px_step + pr * r.pair_step) as *const __m256i) };
                *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(xv, wv));
            }
        }
    }
    acc
}

/// The AVX2 row kernel of `super::depthwise_i8`: 8-channel blocks, [`DW_TILE`]
/// pixels at a time, accumulators in registers over all taps.
///
/// # Safety
/// The CPU must support AVX2; `r.in_bounds(acc)` holds.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn depthwise_row_avx2(r: &super::DwRow<'_>, acc: &mut [i32]) {
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for cb in 0..r.cp / 8 {
        let cols = 8.min(r.out_c.saturating_sub(cb * 8));
        if cols == 0 {
            break;
        }
        let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols as i32), lane);
        // SAFETY: block cb < cp / 8 of filter row 0's weights (in_bounds).
        let w = unsafe { r.w.as_ptr().add(cb * 16) };
        let store = |acc: &mut [i32], ox: usize, v: __m256i| {
            let at = ox * r.out_c + cb * 8;
            // SAFETY: pixel ox < out_w of `acc` (out_w * out_c ints), the `cols`
            // channels from cb * 8 (all 8 with a plain store).
            unsafe {
                if cols == 8 {
                    _mm256_storeu_si256(acc.as_mut_ptr().add(at) as *mut __m256i, v);
                } else {
                    _mm256_maskstore_epi32(acc.as_mut_ptr().add(at), keep, v);
                }
            }
        };
        let mut ox = 0;
        while ox + DW_TILE <= r.out_w {
            // SAFETY: pixels ox..ox + DW_TILE <= out_w, block cb (in_bounds).
            let v = unsafe { dw_tile::<DW_TILE>(r, ox * r.px_step + cb * 16, w) };
            for (t, v) in v.into_iter().enumerate() {
                store(acc, ox + t, v);
            }
            ox += DW_TILE;
        }
        while ox < r.out_w {
            // SAFETY: pixel ox < out_w, block cb (in_bounds).
            let [v] = unsafe { dw_tile::<1>(r, ox * r.px_step + cb * 16, w) };
            store(acc, ox, v);
            ox += 1;
        }
    }
}

/// The pair line of one input row (channel multiplier 1), 8 channels per step:
/// for line pixel `p`, the bytes of input pixels `p * step` and `p * step + dil`
/// (less `pad_left`; xor `flip`: uint8 to int8) interleaved
/// (`vpunpcklbw`), sign-extended and less the zero point (`zp`, in int8 terms); a pixel in the padding reads the zero point itself,
/// so it becomes 0. The lanes of a last partial block read the next pixel's
/// channels (bounded values that meet zero weights) or, at the end of the row,
/// the zero point.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pair_line_avx2<const FLIP: u8>(src: &[u8], c: usize, pad_left: usize, dil: usize, step: usize, zp: i32, cp: usize, line: &mut [i16]) {
    let width = src.len() / c.max(1);
    let zp8 = _mm_set1_epi8(zp as i8);
    let flip = FLIP;
    // (A constant: int8 rows skip the xor.)
    let flip8 = _mm_set1_epi8(FLIP as i8);
    let xor = |v: __m128i| if FLIP == 0 { v } else { _mm_xor_si128(v, flip8) };
    let zp16 = _mm256_set1_epi16(zp as i16);
    // 8 channels of pixel p from channel j (the zero point outside the row).
    let load = |p: usize, j: usize| -> __m128i {
        match p.checked_sub(pad_left).filter(|&x| x < width) {
            Some(x) if x * c + j + 8 <= src.len() => {
                // SAFETY: bytes x * c + j .. + 8 lie inside `src` (checked in the guard).
                xor(unsafe { _mm_loadl_epi64(src.as_ptr().add(x * c + j) as *const __m128i) })
            }
            Some(x) => {
                let mut b = [zp as i8 as u8 ^ flip; 8];
                let avail = &src[x * c + j..];
                b[..avail.len().min(8)].copy_from_slice(&avail[..avail.len().min(8)]);
                xor(_mm_set_epi64x(0, i64::from_le_bytes(b)))
            }
            None => zp8,
        }
    };
    let npl = line.len() / (2 * cp).max(1);
    let step = step.max(1);
    // Pair-line pixels p whose two input pixels (p * step and p * step + dil,
    // less pad_left) have every block's 8 bytes inside the row: one range, no
    // per-pixel checks.
    let whole = if src.len() >= cp { (src.len() - cp) / c.max(1) + 1 } else { 0 }.min(width);
    let p_lo = pad_left.div_ceil(step).min(npl);
    let p_hi = (pad_left + whole).saturating_sub(dil).div_ceil(step).clamp(p_lo, npl);
    let edge = |p: usize, pair: &mut [i16]| {
        for (blk, out) in pair.chunks_exact_mut(16).enumerate() {
            let v = _mm256_sub_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(load(p * step, blk * 8), load(p * step + dil, blk * 8))), zp16);
            // SAFETY: `out` holds 16 int16 (chunks_exact).
            unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, v) };
        }
    };
    for p in (0..p_lo).chain(p_hi..npl) {
        edge(p, &mut line[p * 2 * cp..(p + 1) * 2 * cp]);
    }
    for p in p_lo..p_hi {
        let (xa, xb) = (p * step - pad_left, p * step + dil - pad_left);
        for blk in 0..cp / 8 {
            // SAFETY: xa, xb < whole, so bytes x * c + blk * 8 .. + 8 <= x * c + cp
            // lie inside `src`; the 16 int16 of block blk of pixel p < npl lie
            // inside `line` (npl * 2 * cp values).
            unsafe {
                let a = xor(_mm_loadl_epi64(src.as_ptr().add(xa * c + blk * 8) as *const __m128i));
                let b = xor(_mm_loadl_epi64(src.as_ptr().add(xb * c + blk * 8) as *const __m128i));
                _mm256_storeu_si256(
                    line.as_mut_ptr().add((p * cp + blk * 8) * 2) as *mut __m256i,
                    _mm256_sub_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b)), zp16),
                );
            }
        }
    }
}

/// A [`crate::quant::Scale`] broadcast to 8 lanes for [`mbqm8`].
#[derive(Clone, Copy)]
struct Scale8 {
    m: __m256i,
    m_odd: __m256i,
    left: __m256i,
    right: __m256i,
    mask: __m256i,
    half_mask: __m256i,
}

impl Scale8 {
    #[target_feature(enable = "avx2")]
    fn new(s: crate::quant::Scale) -> Scale8 {
        let one = _mm256_set1_epi32(1);
        let m = _mm256_set1_epi32(s.multiplier);
        // `wrapping_shl` takes the shift modulo 32; `vpsllvd` would clear the lane.
        let right = _mm256_set1_epi32(s.right.min(31) as i32);
        let mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, right), one);
        Scale8 {
            m,
            m_odd: _mm256_shuffle_epi32::<0xF5>(m),
            left: _mm256_set1_epi32((s.left & 31) as i32),
            right,
            mask,
            half_mask: _mm256_srli_epi32::<1>(mask),
        }
    }
}

/// `mbqm_split` on 8 lanes: the high half of the doubled product rounded (from
/// the 64-bit products of even and odd lanes), then the rounding right shift.
#[inline]
#[target_feature(enable = "avx2")]
fn mbqm8(x: __m256i, s: &Scale8) -> __m256i {
    let half = _mm256_set1_epi64x(1 << 30);
    let x = _mm256_sllv_epi32(x, s.left);
    let even = _mm256_srli_epi64::<31>(_mm256_add_epi64(_mm256_mul_epi32(x, s.m), half));
    let odd = _mm256_slli_epi64::<1>(_mm256_add_epi64(_mm256_mul_epi32(_mm256_shuffle_epi32::<0xF5>(x), s.m_odd), half));
    let high = _mm256_blend_epi32::<0xAA>(even, odd);
    let threshold = _mm256_add_epi32(s.half_mask, _mm256_srli_epi32::<31>(high));
    let up = _mm256_cmpgt_epi32(_mm256_and_si256(high, s.mask), threshold);
    _mm256_sub_epi32(_mm256_srav_epi32(high, s.right), up)
}

/// Quantized ADD / SUB of 8-bit operands ([`crate::quant::AddSub::apply`] per
/// element), 8 elements per step; the last `len % 8` by the scalar definition.
/// `UNSIGNED` reads and writes uint8 values, otherwise int8.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn add_sub_8bit_avx2<const UNSIGNED: bool>(a: &[u8], b: &[u8], p: &crate::quant::AddSub, out: &mut [u8]) {
    let n = out.len().min(a.len()).min(b.len());
    let (sa, sb, so) = (Scale8::new(p.scale.0), Scale8::new(p.scale.1), Scale8::new(p.out_scale));
    let (zpa, zpb, zpo) = (_mm256_set1_epi32(p.zp.0), _mm256_set1_epi32(p.zp.1), _mm256_set1_epi32(p.out_zp));
    let (lo, hi) = (_mm256_set1_epi32(p.min), _mm256_set1_epi32(p.max));
    let shift = _mm_cvtsi32_si128((p.left_shift & 31) as i32);
    let widen = |v: __m128i| if UNSIGNED { _mm256_cvtepu8_epi32(v) } else { _mm256_cvtepi8_epi32(v) };
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i + 8 <= n of both inputs.
        let (x, y) = unsafe { (_mm_loadl_epi64(a.as_ptr().add(i) as *const __m128i), _mm_loadl_epi64(b.as_ptr().add(i) as *const __m128i)) };
        let x = mbqm8(_mm256_sll_epi32(_mm256_sub_epi32(widen(x), zpa), shift), &sa);
        let y = mbqm8(_mm256_sll_epi32(_mm256_sub_epi32(widen(y), zpb), shift), &sb);
        let s = if p.sign < 0 {
            _mm256_sub_epi32(x, y)
        } else if p.sign == 1 {
            _mm256_add_epi32(x, y)
        } else {
            _mm256_add_epi32(x, _mm256_mullo_epi32(y, _mm256_set1_epi32(p.sign)))
        };
        let v = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(mbqm8(s, &so), zpo), lo), hi);
        // The clamp keeps the values inside the 8-bit type, so the packs only narrow.
        let h = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let packed = if UNSIGNED { _mm_packus_epi16(h, h) } else { _mm_packs_epi16(h, h) };
        // SAFETY: elements i..i + 8 <= n of `out`.
        unsafe { _mm_storel_epi64(out.as_mut_ptr().add(i) as *mut __m128i, packed) };
        i += 8;
    }
    for j in i..n {
        let (x, y) = if UNSIGNED { (i32::from(a[j]), i32::from(b[j])) } else { (i32::from(a[j] as i8), i32::from(b[j] as i8)) };
        out[j] = p.apply(x, y) as u8;
    }
}
