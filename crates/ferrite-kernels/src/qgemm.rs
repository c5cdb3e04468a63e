//! int8 GEMM for quantized convolutions: `dot[m, n] = sum_k a[m, k] * w[n, k]`
//! with `a` unsigned bytes (int8 activations shifted by 128) and `w` int8
//! weights, summed exactly in int32.
//!
//! Weights are packed once into panels of 16 output channels, four consecutive
//! `k` per channel: `[panel][k / 4][16][4]`, zero past `k` and past the last
//! channel. On CPUs with AVX-512 VNNI one `vpdpbusd` then adds 64 products; with
//! AVX2, one `vpmaddwd` adds 16 (int16 operands, exact); aarch64 with the
//! dot-product extension runs `sdot`; other CPUs run a portable loop over the same
//! layout (vectorized per instruction set).
//!
//! The activation shift is undone exactly through the weights' column sums:
//! `sum (x - zp) * w = sum (x + 128) * w - (128 + zp) * sum w`.

use crate::quant::{QConv, Requant};

/// Output channels per packed panel.
const NR: usize = 16;
/// Rows gathered per block by [`conv_i8`].
pub const BLOCK_ROWS: usize = 64;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// int8 weights packed for [`gemm`], with their per-channel sums.
///
/// The fields are private: the SIMD kernels read `w` through raw pointers sized
/// from `n` and `kq`, so only [`QPacked::new`] (which sizes `w` from them) sets them.
#[derive(Debug, Clone)]
pub struct QPacked {
    /// Output channels.
    n: usize,
    /// Reduction length.
    k: usize,
    /// `k` rounded up to a multiple of 4 (the row stride of `a`).
    kq: usize,
    /// `[panel][kq / 4][NR][4]`, exactly `n.div_ceil(NR) * kq * NR` bytes.
    w: Vec<i8>,
    /// `sum_k w[n, k]` per output channel (`n` of them).
    col_sum: Vec<i32>,
}

/// Instruction set of the int8 GEMM: a token made only by CPU feature detection
/// (or [`QIsa::portable`]), so a safe caller cannot select a kernel the CPU
/// lacks. All kernels read the same packed layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QIsa(QKind);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// Each architecture constructs only its own variants.
#[allow(dead_code)]
enum QKind {
    /// x86-64 AVX-512F/BW with VNNI (`vpdpbusd`).
    Vnni,
    /// x86-64 AVX2 (`vpmaddwd` on int16-extended operands).
    Avx2,
    /// aarch64 with the dot-product extension (`sdot`).
    DotProd,
    /// Any CPU (compiled per x86-64 vector width by `simd_fn!`).
    Portable,
}

impl QIsa {
    /// The portable kernel (any CPU).
    pub fn portable() -> QIsa {
        QIsa(QKind::Portable)
    }

    /// The VNNI kernel, if this CPU has AVX-512F, AVX-512BW and AVX-512 VNNI.
    pub fn vnni() -> Option<QIsa> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
        {
            return Some(QIsa(QKind::Vnni));
        }
        None
    }

    /// The AVX2 kernel, if this CPU has AVX2.
    pub fn avx2() -> Option<QIsa> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Some(QIsa(QKind::Avx2));
        }
        None
    }

    /// The dot-product kernel, if this CPU is aarch64 with the dotprod extension.
    pub fn dotprod() -> Option<QIsa> {
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            return Some(QIsa(QKind::DotProd));
        }
        None
    }

    /// The best kernel this CPU runs.
    pub fn detect() -> QIsa {
        QIsa::vnni().or_else(QIsa::avx2).or_else(QIsa::dotprod).unwrap_or_else(QIsa::portable)
    }

    /// Every kernel this CPU can run, best first (the portable one last).
    pub fn available() -> Vec<QIsa> {
        [QIsa::vnni(), QIsa::avx2(), QIsa::dotprod(), Some(QIsa::portable())].into_iter().flatten().collect()
    }
}

impl QPacked {
    /// Packs row-major `[n, k]` weights (an OHWI filter is `[out_c, kh * kw * in_c]`).
    /// Panics if `w` holds fewer than `n * k` values.
    pub fn new(w: &[i8], n: usize, k: usize) -> QPacked {
        assert!(w.len() >= n * k, "QPacked::new: {} weights for {n} x {k}", w.len());
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

    /// Output channels.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Reduction length.
    pub fn k(&self) -> usize {
        self.k
    }

    /// `k` rounded up to a multiple of 4: the row stride [`gemm`] reads `a` with.
    pub fn kq(&self) -> usize {
        self.kq
    }

    /// `sum_k w[j, k]` for each output channel `j`.
    pub fn col_sum(&self) -> &[i32] {
        &self.col_sum
    }
}

/// `out[m, j] = sum_k a[m * kq + k] * w[j, k]` for `rows` rows of `a` (unsigned,
/// row stride `pk.kq()`), written `pk.n()` per row, by the best kernel this CPU runs.
/// Panics if `a` or `out` is too short.
pub fn gemm(a: &[u8], rows: usize, pk: &QPacked, out: &mut [i32]) {
    gemm_with(QIsa::detect(), a, rows, pk, out);
}

/// [`gemm`] by the kernel `isa` (the one dispatch point of the int8 GEMM).
/// Panics if `a` or `out` is too short.
pub fn gemm_with(isa: QIsa, a: &[u8], rows: usize, pk: &QPacked, out: &mut [i32]) {
    assert!(rows.checked_mul(pk.kq).is_some_and(|l| l <= a.len()) && rows.checked_mul(pk.n).is_some_and(|l| l <= out.len()), "gemm operands too short");
    match isa.0 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Vnni` token is only made after detecting AVX-512F/BW and VNNI,
        // and the operand lengths were checked against the shapes the kernel reads.
        QKind::Vnni => unsafe { x86_64::gemm(a, rows, pk, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Avx2` token is only made after detecting AVX2, and the
        // operand lengths were checked as above.
        QKind::Avx2 => unsafe { x86_64::gemm_avx2(a, rows, pk, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `DotProd` token is only made after detecting the dot-product
        // extension, and the operand lengths were checked as above.
        QKind::DotProd => unsafe { aarch64::gemm(a, rows, pk, out) },
        _ => gemm_portable(a, rows, pk, out),
    }
}

/// Whether the VNNI kernel runs on this CPU.
pub fn has_vnni() -> bool {
    QIsa::vnni().is_some()
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
    /// Private with the rest: the vector requantizations read every per-channel
    /// vector at the indices of this one, so their lengths must stay equal.
    offset: Vec<i32>,
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

    /// The per-channel offsets added before rescaling (bias and zero-point terms).
    pub fn offset_mut(&mut self) -> &mut [i32] {
        &mut self.offset
    }

    /// Requantizes rows of `n` accumulators into int8.
    pub fn apply(&self, dots: &[i32], out: &mut [i8]) {
        assert!(dots.len() == out.len() && dots.len().is_multiple_of(self.offset.len().max(1)), "requant operands disagree");
        #[cfg(target_arch = "x86_64")]
        if crate::level::has_avx512f() {
            // SAFETY: AVX-512F is present (checked just above); the lengths were checked.
            unsafe { x86_64::requant(self, dots, out) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if crate::level::has_avx2_fma() {
            // SAFETY: AVX2 is present (checked just above); the lengths were checked.
            unsafe { x86_64::requant_avx2(self, dots, out) };
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
        crate::level::each(|_| {
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
        });
    }

    /// The ends of every range: the largest and smallest multipliers and shifts
    /// `quantize_multiplier` makes, accumulators and offsets at the int32 limits
    /// (the offset add wraps, as in the portable form), narrow clamps.
    #[test]
    fn row_requant_is_exact_at_the_extremes() {
        let dots_at = [i32::MIN, i32::MIN + 1, -65_536, -1, 0, 1, 65_535, i32::MAX - 1, i32::MAX];
        crate::level::each(|_| {
            for (case, &(multiplier, shift)) in
                [(i32::MAX, 30), (i32::MAX, -31), (1 << 30, 0), (1 << 30, -31), (1, 30), (1_518_500_250, -7), (i32::MAX, 0)].iter().enumerate()
            {
                for n in [1, 7, 8, 9, 16, 17] {
                    let rq = Requant {
                        multiplier: vec![multiplier],
                        shift: vec![shift],
                        out_zp: [-128, 0, 5, 127][case % 4],
                        min: [-128, -128, 0, -20][case % 4],
                        max: [127, 6, 127, 20][case % 4],
                    };
                    let mut rr = RowRequant::new(&rq, n);
                    rr.offset.iter_mut().enumerate().for_each(|(j, o)| *o = [0, i32::MAX, i32::MIN, -3][j % 4]);
                    let dots: Vec<i32> = (0..dots_at.len() * n).map(|i| dots_at[(i / n + i) % dots_at.len()]).collect();
                    let mut got = vec![0i8; dots.len()];
                    rr.apply(&dots, &mut got);
                    for (i, (&d, &g)) in dots.iter().zip(&got).enumerate() {
                        assert_eq!(i32::from(g), rq.apply(d.wrapping_add(rr.offset[i % n]), i % n), "multiplier {multiplier} shift {shift} n {n} element {i}");
                    }
                }
            }
        });
    }

    #[test]
    fn gemm_kernels_match_the_definition() {
        crate::level::each(|_| {
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
                for isa in QIsa::available() {
                    let mut got = vec![0; rows * n];
                    gemm_with(isa, &a, rows, &pk, &mut got);
                    assert_eq!(got, want, "{isa:?} {rows}x{n}x{k}");
                }
                let mut got = vec![0; rows * n];
                gemm_portable(&a, rows, &pk, &mut got);
                assert_eq!(got, want, "portable {rows}x{n}x{k}");
                assert_eq!(pk.col_sum()[n - 1], w[(n - 1) * k..].iter().map(|&v| i32::from(v)).sum::<i32>());
            }
        });
    }

    /// Every kernel against the definition on random shapes (k and n off every
    /// tile multiple, 1 to 100 rows), with random operands, with only the extreme
    /// values (activations 0/255, weights -128/127), and with the largest products
    /// of both signs in every lane (where a saturating int16 pair sum would show).
    #[test]
    fn gemm_kernels_are_exact_on_random_shapes_and_extreme_values() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        crate::level::each(|_| {
            for case in 0..240 {
                let rows = match case % 5 {
                    0 => 1,
                    1 => 1 + (next() % 8) as usize,
                    _ => 1 + (next() % 100) as usize,
                };
                let n = if case % 7 == 0 { 16 * (1 + (next() % 4) as usize) } else { 1 + (next() % 41) as usize };
                let k = if case % 11 == 0 { 300 + (next() % 700) as usize } else { 1 + (next() % 70) as usize };
                let (a_vals, w_vals): (&[u8], &[i8]) = match case % 4 {
                    0 => (&[], &[]),
                    1 => (&[0, 255], &[-128, 127]),
                    2 => (&[255], &[-128]),
                    _ => (&[255], &[127]),
                };
                let pick_a = |r: u64| if a_vals.is_empty() { r as u8 } else { a_vals[r as usize % a_vals.len()] };
                let pick_w = |r: u64| if w_vals.is_empty() { r as i8 } else { w_vals[r as usize % w_vals.len()] };
                let w: Vec<i8> = (0..n * k).map(|_| pick_w(next())).collect();
                let pk = QPacked::new(&w, n, k);
                // The bytes past k in each row are noise: the zero weights there must cancel them.
                let a: Vec<u8> = (0..rows * pk.kq()).map(|i| if i % pk.kq() < k { pick_a(next()) } else { next() as u8 }).collect();
                let want = naive(&a, rows, &w, n, k, pk.kq());
                for isa in QIsa::available() {
                    let mut got = vec![i32::MIN; rows * n + 3];
                    gemm_with(isa, &a, rows, &pk, &mut got);
                    assert_eq!(&got[..rows * n], &want[..], "{isa:?} case {case}: {rows}x{n}x{k}");
                    assert_eq!(&got[rows * n..], &[i32::MIN; 3], "{isa:?} case {case}: wrote past the output");
                }
            }
        });
    }

    #[test]
    fn available_lists_every_runnable_kernel() {
        let all = QIsa::available();
        assert_eq!(all.first(), Some(&QIsa::detect()));
        assert_eq!(all.last(), Some(&QIsa::portable()));
        assert_eq!(all.contains(&QIsa(QKind::Vnni)), has_vnni());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(all.contains(&QIsa(QKind::Avx2)), std::arch::is_x86_feature_detected!("avx2"));
        #[cfg(not(target_arch = "x86_64"))]
        assert!(!all.contains(&QIsa(QKind::Avx2)));
    }

    /// Operands shorter than the packing's shape panic before any kernel runs,
    /// for every kernel.
    #[test]
    fn short_operands_panic_for_every_kernel() {
        let pk = QPacked::new(&[1; 20 * 9], 20, 9);
        for isa in QIsa::available() {
            let a = vec![1u8; 3 * pk.kq()];
            let short_a = std::panic::catch_unwind(|| gemm_with(isa, &a[..a.len() - 1], 3, &pk, &mut [0; 60]));
            assert!(short_a.is_err(), "{isa:?}: short input accepted");
            let short_out = std::panic::catch_unwind(|| gemm_with(isa, &a, 3, &pk, &mut [0; 59]));
            assert!(short_out.is_err(), "{isa:?}: short output accepted");
        }
    }
}
