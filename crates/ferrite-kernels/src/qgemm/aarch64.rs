//! aarch64 kernel of [`super`]: the int8 GEMM with the dot-product extension,
//! reached through `super::gemm_with`, whose `QIsa` token proves the feature.

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
