//! aarch64 kernels of [`super`]: the int8 GEMM with the dot-product extension
//! and without it (plain NEON), reached through `super::gemm_with`, whose `QIsa`
//! token proves the feature.

use super::{QPacked, NR};
use std::arch::aarch64::*;

/// `acc += a . b` per group of four bytes (`sdot`), written as inline assembly
/// because the intrinsic is not yet stable.
///
/// # Safety
/// The CPU must support the dot-product extension.
#[inline(always)]
unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: callers run with the dotprod feature enabled; the instruction
    // only reads and writes the named vector registers.
    unsafe { std::arch::asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b, options(pure, nomem, nostack)) };
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
                    // SAFETY: this function runs only with dotprod (its contract).
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

/// One step of [`gemm_neon`]: the products of one row's four bytes (back to
/// signed, repeated over the vector) with 16 bytes of weights (four channels x
/// four `k`), widened to int16 by `smull`/`smull2` and added pairwise into int32
/// by `sadalp`. A product of two int8 values fits int16 (at most 2^14), and the
/// pair sum is formed in int32, so nothing saturates or wraps.
#[inline]
#[target_feature(enable = "neon")]
fn mac4(acc: &mut [int32x4_t; 2], a: int8x16_t, w: int8x16_t) {
    acc[0] = vpadalq_s16(acc[0], vmull_s8(vget_low_s8(a), vget_low_s8(w)));
    acc[1] = vpadalq_s16(acc[1], vmull_high_s8(a, w));
}

/// The int8 GEMM on plain NEON, for CPUs without the dot-product extension
/// (Cortex-A53, A55 without it, A72...): two rows at a time against each 16-channel
/// panel, every weight vector loaded once for both rows. Per row and channel
/// quad, one accumulator pair holds (channel, k pair) sums, folded by `addp` at
/// the end. The unsigned rows are read as signed (`^ 0x80`), and the signed sum
/// corrected by 128 times the column sums, as in [`gemm`]; the result is exact.
///
/// # Safety
/// `a` holds `rows * pk.kq` bytes and `out` `rows * pk.n` ints (NEON is part of
/// the base aarch64 architecture).
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemm_neon(a: &[u8], rows: usize, pk: &QPacked, out: &mut [i32]) {
    let groups = pk.kq / 4;
    let word = |row: &[u8], g: usize| {
        vreinterpretq_s8_u32(vdupq_n_u32(u32::from_le_bytes([row[g * 4], row[g * 4 + 1], row[g * 4 + 2], row[g * 4 + 3]]) ^ 0x8080_8080))
    };
    for p in 0..pk.n.div_ceil(NR) {
        let cols = NR.min(pk.n - p * NR);
        let wp = &pk.w[p * groups * NR * 4..][..groups * NR * 4];
        let mut m = 0;
        while m < rows {
            let two = m + 1 < rows;
            let a0 = &a[m * pk.kq..][..pk.kq];
            // A lone last row reads itself twice (its second result is dropped).
            let a1 = if two { &a[(m + 1) * pk.kq..][..pk.kq] } else { a0 };
            let z = vdupq_n_s32(0);
            let mut acc = [[[z; 2]; 4]; 2];
            for (g, wg) in wp.chunks_exact(NR * 4).enumerate() {
                let (x0, x1) = (word(a0, g), word(a1, g));
                for (q, wq) in wg.chunks_exact(16).enumerate() {
                    // SAFETY: `wq` is a chunk of exactly 16 bytes.
                    let wv = unsafe { vld1q_s8(wq.as_ptr()) };
                    mac4(&mut acc[0][q], x0, wv);
                    mac4(&mut acc[1][q], x1, wv);
                }
            }
            for (r, acc) in acc.iter().enumerate().take(if two { 2 } else { 1 }) {
                let mut lanes = [0i32; NR];
                for (q, pair) in acc.iter().enumerate() {
                    // SAFETY: `lanes` holds 16 ints; q * 4 + 4 <= 16.
                    unsafe { vst1q_s32(lanes.as_mut_ptr().add(q * 4), vpaddq_s32(pair[0], pair[1])) };
                }
                let o = &mut out[(m + r) * pk.n + p * NR..][..cols];
                for (j, o) in o.iter_mut().enumerate() {
                    *o = lanes[j] + 128 * pk.col_sum[p * NR + j];
                }
            }
            m += 2;
        }
    }
}
