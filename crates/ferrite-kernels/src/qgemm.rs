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
/// Rows per register tile of the VNNI kernel.
const MR: usize = 8;
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
    gemm_portable(a, rows, pk, out);
}

/// Whether the VNNI kernel runs on this CPU.
pub fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
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
    use super::{QPacked, MR, NR};
    use std::arch::x86_64::*;

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

/// Per-run scratch of [`conv_i8`]: one block of gathered rows and their sums.
#[derive(Debug, Clone)]
pub struct ConvScratch {
    rows: Vec<u8>,
    dots: Vec<i32>,
    offsets: Vec<i32>,
}

impl ConvScratch {
    /// Scratch for convolutions with these packed weights.
    pub fn new(pk: &QPacked) -> ConvScratch {
        ConvScratch { rows: vec![0; BLOCK_ROWS * pk.kq], dots: vec![0; BLOCK_ROWS * pk.n], offsets: vec![0; pk.n] }
    }
}

/// int8 convolution (weights zero point 0) through [`gemm`]: each block of output
/// pixels gathers its receptive fields into unsigned rows (taps in the padding
/// hold the input zero point, contributing nothing), multiplies them by the packed
/// weights and requantizes. Bit-exact with the per-tap definition.
pub fn conv_i8(input: &[i8], pk: &QPacked, bias: Option<&[i32]>, q: &QConv, out: &mut [i8], s: &mut ConvScratch) {
    let g = &q.g;
    let (in_c, n) = (q.in_c, pk.n);
    // Bias less the activation shift's share: (128 + zp) * sum w.
    for (j, o) in s.offsets.iter_mut().enumerate() {
        *o = bias.map_or(0, |b| b[j]).wrapping_sub((128 + q.in_zp).wrapping_mul(pk.col_sum[j]));
    }
    let fill = (q.in_zp as i8 as u8) ^ 0x80;
    let pixels = g.batch * g.out_h * g.out_w;
    let mut start = 0;
    while start < pixels {
        let count = BLOCK_ROWS.min(pixels - start);
        for (r, row) in s.rows.chunks_exact_mut(pk.kq).take(count).enumerate() {
            let pix = start + r;
            let (nb, oy, ox) = (pix / (g.out_h * g.out_w), pix / g.out_w % g.out_h, pix % g.out_w);
            for ky in 0..g.k_h {
                let iy = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h);
                for kx in 0..g.k_w {
                    let dst = &mut row[(ky * g.k_w + kx) * in_c..][..in_c];
                    let ix = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w);
                    match (iy, ix) {
                        (Some(iy), Some(ix)) => {
                            for (d, &v) in dst.iter_mut().zip(&input[((nb * g.in_h + iy) * g.in_w + ix) * in_c..][..in_c]) {
                                *d = (v as u8) ^ 0x80;
                            }
                        }
                        _ => dst.fill(fill),
                    }
                }
            }
        }
        gemm(&s.rows[..count * pk.kq], count, pk, &mut s.dots[..count * n]);
        requant_rows(&s.dots[..count * n], &s.offsets, &q.rq, &mut out[start * n..(start + count) * n]);
        start += count;
    }
}

simd_fn! {
    /// `out[i] = requant(dots[i] + offsets[i % n])` for rows of `n = offsets.len()`
    /// channels, with per-channel or per-tensor multipliers.
    pub fn requant_rows(dots: &[i32], offsets: &[i32], rq: &Requant, out: &mut [i8]) {
        let n = offsets.len();
        let per_channel = rq.multiplier.len() > 1;
        for (row, orow) in dots.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            for j in 0..n {
                let c = if per_channel { j } else { 0 };
                let v = crate::quant::multiply_by_quantized_multiplier(row[j].wrapping_add(offsets[j]), rq.multiplier[c], rq.shift[c]);
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
