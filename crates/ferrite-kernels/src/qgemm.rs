//! int8 GEMM for quantized convolutions: `dot[m, n] = sum_k a[m, k] * w[n, k]`
//! with `a` unsigned bytes (int8 activations shifted by 128) and `w` int8
//! weights, summed exactly in int32.
//!
//! Weights are packed once into panels of 16 output channels, four consecutive
//! `k` per channel: `[panel][k / 4][16][4]`, zero past `k` and past the last
//! channel. On CPUs with AVX-512 VNNI one `vpdpbusd` then adds 64 products; with
//! AVX2, one `vpmaddwd` adds 16 (int16 operands, exact); aarch64 with the
//! dot-product extension runs `sdot`, and without it `smull` + `sadalp` (int16
//! products added pairwise into int32, exact); other CPUs run a portable loop over
//! the same layout (vectorized per instruction set).
//!
//! The activation shift is undone exactly through the weights' column sums:
//! `sum (x - zp) * w = sum (x + 128) * w - (128 + zp) * sum w`.

use crate::quant::{QConv, Requant, Rounding};

/// Output channels per packed panel.
const NR: usize = 16;
/// Rows gathered per block by [`conv_i8`].
pub const BLOCK_ROWS: usize = 64;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod dw_avx512;
#[cfg(target_arch = "x86_64")]
mod vnni;
#[cfg(target_arch = "x86_64")]
pub(crate) use vnni::add_sub_8bit as vnni_add_sub_8bit;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

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
    /// aarch64 without it: NEON `smull` + `sadalp`.
    Neon,
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
        if crate::level::cpu_avx512f() && std::arch::is_x86_feature_detected!("avx512bw") && std::arch::is_x86_feature_detected!("avx512vnni") {
            return Some(QIsa(QKind::Vnni));
        }
        None
    }

    /// The AVX2 kernel, if this CPU has AVX2.
    pub fn avx2() -> Option<QIsa> {
        #[cfg(target_arch = "x86_64")]
        if crate::level::cpu_avx2() {
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

    /// The plain NEON kernel, on aarch64 (NEON is part of the base architecture).
    pub fn neon() -> Option<QIsa> {
        cfg!(target_arch = "aarch64").then_some(QIsa(QKind::Neon))
    }

    /// The best kernel this CPU runs.
    pub fn detect() -> QIsa {
        QIsa::vnni().or_else(QIsa::avx2).or_else(QIsa::dotprod).or_else(QIsa::neon).unwrap_or_else(QIsa::portable)
    }

    /// A short name for reports (`ferrite devices`).
    pub fn name(self) -> &'static str {
        match self.0 {
            QKind::Vnni => "avx512-vnni",
            QKind::Avx2 => "avx2",
            QKind::DotProd => "neon-dotprod",
            QKind::Neon => "neon",
            QKind::Portable => "portable",
        }
    }

    /// Every kernel this CPU can run, best first (the portable one last).
    pub fn available() -> Vec<QIsa> {
        [QIsa::vnni(), QIsa::avx2(), QIsa::dotprod(), QIsa::neon(), Some(QIsa::portable())].into_iter().flatten().collect()
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
        // The guards are constant: a build without a level links none of its kernels.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Vnni` token is only made after detecting AVX-512F/BW and VNNI,
        // and the operand lengths were checked against the shapes the kernel reads.
        QKind::Vnni if crate::level::AVX512 => unsafe { x86_64::gemm(a, rows, pk, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Avx2` token is only made after detecting AVX2, and the
        // operand lengths were checked as above.
        QKind::Avx2 if crate::level::AVX2 => unsafe { x86_64::gemm_avx2(a, rows, pk, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `DotProd` token is only made after detecting the dot-product
        // extension, and the operand lengths were checked as above.
        QKind::DotProd => unsafe { aarch64::gemm(a, rows, pk, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline on aarch64; the operand lengths were checked as above.
        QKind::Neon => unsafe { aarch64::gemm_neon(a, rows, pk, out) },
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

/// The block buffers of [`conv_i8`] and [`conv_u8`]: one block of gathered rows,
/// their products and row sums. A convolution needs them only while it runs, so
/// the convolutions of a session, which run one at a time, can take turns with
/// one set grown to the largest ([`ConvBuffers::fit`], [`conv_i8_in`]) instead
/// of holding one each.
#[derive(Debug, Clone, Default)]
pub struct ConvBuffers {
    rows: Vec<u8>,
    dots: Vec<i32>,
    row_sums: Vec<i32>,
    /// The padded input the VNNI convolution reads its receptive fields from,
    /// and its pixel sums (grown on its first run).
    #[cfg(target_arch = "x86_64")]
    padded: vnni::Padded,
}

impl ConvBuffers {
    /// Grows the buffers to hold a block of a convolution with these packed
    /// weights (they never shrink).
    pub fn fit(&mut self, pk: &QPacked) {
        fn grow<T: Copy + Default>(v: &mut Vec<T>, len: usize) {
            if v.len() < len {
                v.resize(len, T::default());
            }
        }
        // 16 bytes of slack for the last row's over-long copies (see `flip_copy`).
        grow(&mut self.rows, BLOCK_ROWS * pk.kq + 16);
        grow(&mut self.dots, BLOCK_ROWS * pk.n);
        grow(&mut self.row_sums, BLOCK_ROWS);
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        #[cfg(target_arch = "x86_64")]
        let padded = self.padded.bytes.len() + 4 * self.padded.sums.len();
        #[cfg(not(target_arch = "x86_64"))]
        let padded = 0;
        self.rows.len() + padded + 4 * (self.dots.len() + self.row_sums.len())
    }
}

/// Per-run scratch of [`conv_i8`] and [`conv_u8`]: the requantization (its
/// offsets are rewritten on each run) and, unless made with
/// [`ConvScratch::sharing`], the block buffers.
#[derive(Debug, Clone)]
pub struct ConvScratch {
    bufs: ConvBuffers,
    rq: RowRequant,
    /// The weights laid out with each segment's taps (a filter row, or one tap
    /// of a dilated row) padded to whole groups of four, for the VNNI
    /// convolution of a layer whose segments are not (made on its first run).
    seg: Option<QPacked>,
    /// Whether `rq`'s offsets were computed once ([`ConvScratch::fix_offsets`])
    /// and stand for every run, instead of being rewritten from the bias on each.
    fixed: bool,
}

impl ConvScratch {
    /// Scratch for [`conv_i8`] with these packed weights and requantization.
    pub fn new(pk: &QPacked, rq: &Requant) -> ConvScratch {
        ConvScratch::with_rounding(pk, rq, Rounding::Double)
    }

    /// [`ConvScratch::new`] requantizing with `rounding`: LiteRT's int8
    /// fully-connected layers with a weight scale per output row round the
    /// rescaled product once ([`Rounding::Single`]), its convolutions twice.
    pub fn with_rounding(pk: &QPacked, rq: &Requant, rounding: Rounding) -> ConvScratch {
        let mut bufs = ConvBuffers::default();
        bufs.fit(pk);
        ConvScratch { bufs, rq: RowRequant::new(rq, pk.n).with_rounding(rounding), seg: None, fixed: false }
    }

    /// Scratch for [`conv_u8`]: `rq` in uint8 terms (output zero point and clamp
    /// in 0..=255), requantized in int8 terms and shifted back.
    pub fn new_u8(pk: &QPacked, rq: &Requant) -> ConvScratch {
        ConvScratch::new(pk, &Requant { out_zp: rq.out_zp - 128, min: rq.min - 128, max: rq.max - 128, ..rq.clone() })
    }

    /// Scratch for [`conv_i8_in`] (or, `unsigned`, [`conv_u8_in`]) without block
    /// buffers of its own: `shared`, grown here to fit these weights, serves it.
    pub fn sharing(pk: &QPacked, rq: &Requant, unsigned: bool, shared: &mut ConvBuffers) -> ConvScratch {
        shared.fit(pk);
        let rq = if unsigned { Requant { out_zp: rq.out_zp - 128, min: rq.min - 128, max: rq.max - 128, ..rq.clone() } } else { rq.clone() };
        ConvScratch { bufs: ConvBuffers::default(), rq: RowRequant::new(&rq, pk.n), seg: None, fixed: false }
    }

    /// Computes the per-channel starting values (bias minus the zero-point
    /// terms) once, for a layer whose weights, bias and zero points are
    /// constant: later runs of [`conv_i8`] (or, `unsigned`, [`conv_u8`]) with
    /// these weights and `q` use them as they are and ignore the `bias` they
    /// are passed, instead of recomputing them from it on every run.
    pub fn fix_offsets(&mut self, pk: &QPacked, bias: Option<&[i32]>, q: &QConv, unsigned: bool) {
        let (a_zp, w_off) = if unsigned { (q.in_zp, 128 - q.w_zp) } else { (128 + q.in_zp, -q.w_zp) };
        fill_offsets(&mut self.rq.offset, a_zp, w_off, pk, bias);
        self.fixed = true;
    }
}

/// The starting value of each output channel of [`conv_8bit`]: its bias less
/// the zero-point terms `a_zp sum w + w_off a_zp K` (see there).
fn fill_offsets(offset: &mut [i32], a_zp: i32, w_off: i32, pk: &QPacked, bias: Option<&[i32]>) {
    let k_const = w_off.wrapping_mul(a_zp).wrapping_mul(pk.k as i32);
    for (j, o) in offset.iter_mut().enumerate() {
        *o = bias.map_or(0, |b| b[j]).wrapping_sub(a_zp.wrapping_mul(pk.col_sum[j])).wrapping_sub(k_const);
    }
}

/// int8 convolution through [`gemm`]: each block of output pixels gathers its
/// receptive fields into unsigned rows (int8 shifted by 128; taps in the padding
/// hold the input zero point, contributing nothing), multiplies them by the
/// packed weights and requantizes. `input` is the int8 tensor's bytes; a weight
/// zero point other than 0 is taken out through the rows' sums. Bit-exact with
/// the per-tap definition.
pub fn conv_i8(input: &[u8], pk: &QPacked, bias: Option<&[i32]>, q: &QConv, out: &mut [i8], s: &mut ConvScratch) {
    let ConvScratch { bufs, rq, seg, fixed } = s;
    // Unsigned rows x + 128 against weights w (W = w - w_zp).
    conv_8bit(input, 0x80, 128 + q.in_zp, -q.w_zp, pk, bias, *fixed, q, out, rq, bufs, seg);
}

/// [`conv_i8`] with the block buffers `bufs` (shared between convolutions that
/// run in turn; `s` from [`ConvScratch::sharing`]). Buffers too small for `pk`
/// are grown first.
pub fn conv_i8_in(input: &[u8], pk: &QPacked, bias: Option<&[i32]>, q: &QConv, out: &mut [i8], s: &mut ConvScratch, bufs: &mut ConvBuffers) {
    conv_8bit(input, 0x80, 128 + q.in_zp, -q.w_zp, pk, bias, s.fixed, q, out, &mut s.rq, bufs, &mut s.seg);
}

/// uint8 convolution through [`gemm`], as [`conv_i8`]: `input` and `out` are
/// uint8, `q` holds uint8 zero points, and `pk` packs the uint8 weights shifted
/// into int8 (`w ^ 0x80`, i.e. `w - 128`); `s` comes from [`ConvScratch::new_u8`].
pub fn conv_u8(input: &[u8], pk: &QPacked, bias: Option<&[i32]>, q: &QConv, out: &mut [u8], s: &mut ConvScratch) {
    // SAFETY: i8 and u8 have the same size, alignment and valid bit patterns.
    let out8 = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut i8, out.len()) };
    let ConvScratch { bufs, rq, seg, fixed } = s;
    // The rows hold the uint8 values themselves; W = (w - 128) + (128 - w_zp).
    conv_8bit(input, 0, q.in_zp, 128 - q.w_zp, pk, bias, *fixed, q, out8, rq, bufs, seg);
}

/// [`conv_u8`] with the block buffers `bufs`, as [`conv_i8_in`] (`s` from
/// [`ConvScratch::sharing`] with `unsigned`).
pub fn conv_u8_in(input: &[u8], pk: &QPacked, bias: Option<&[i32]>, q: &QConv, out: &mut [u8], s: &mut ConvScratch, bufs: &mut ConvBuffers) {
    // SAFETY: i8 and u8 have the same size, alignment and valid bit patterns.
    let out8 = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut i8, out.len()) };
    conv_8bit(input, 0, q.in_zp, 128 - q.w_zp, pk, bias, s.fixed, q, out8, &mut s.rq, bufs, &mut s.seg);
}

/// A prepared int8 fully-connected layer whose weights, bias and zero points
/// are constant, rounding once (as LiteRT's int8 layers do): the starting
/// values are fixed when it is made, and where this CPU has AVX-512 VNNI each
/// input row is read in place by the row tiles, with none of the convolution's
/// per-run setup (no padded copy, no geometry checks). Elsewhere it runs
/// [`conv_i8`] with the same fixed values.
#[derive(Debug, Clone)]
pub struct FullyConnectedI8 {
    s: ConvScratch,
    q: QConv,
    /// Input rows per run (read by the VNNI row tiles only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    rows: usize,
    /// Whether the VNNI row tiles run it (the CPU and vector level, read once here).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    vnni: bool,
}

impl FullyConnectedI8 {
    /// The layer `q` (its geometry [`crate::conv::Window::rows`], `q.in_c`
    /// inputs and `q.out_c` outputs per row) with the packed weights `pk` and
    /// `bias` (one per output, or none).
    pub fn new(pk: &QPacked, bias: Option<&[i32]>, q: QConv) -> FullyConnectedI8 {
        let mut s = ConvScratch::with_rounding(pk, &q.rq, Rounding::Single);
        s.fix_offsets(pk, bias, &q, false);
        let rows = q.g.batch * q.g.out_h * q.g.out_w;
        #[cfg(target_arch = "x86_64")]
        let vnni = vnni::available() && pk.n > 0 && pk.k == q.in_c;
        #[cfg(not(target_arch = "x86_64"))]
        let vnni = false;
        FullyConnectedI8 { s, q, rows, vnni }
    }

    /// Runs the layer on the int8 rows `input` (its bytes), writing `out`;
    /// `pk` must be the packing it was made with.
    /// Panics if `input` or `out` is shorter than the layer's rows.
    pub fn run(&mut self, input: &[u8], pk: &QPacked, out: &mut [i8]) {
        #[cfg(target_arch = "x86_64")]
        if self.vnni {
            vnni::fc_rows(input, self.rows, pk, -self.q.w_zp, &self.s.rq, out);
            return;
        }
        conv_i8(input, pk, None, &self.q, out, &mut self.s);
    }
}

/// [`conv_i8`] and [`conv_u8`]: the rows hold `a = x ^ flip` (unsigned, zero
/// point `a_zp`), the true weights are `W = w + w_off` for the packed `w`, so
/// `sum (a - a_zp) W = dot - a_zp sum w - w_off a_zp K + w_off sum a`: the
/// first three terms per channel (in the offsets), the last per row (`K` =
/// the taps' count; the padding taps hold `a_zp`, so they still add nothing).
/// The outputs are requantized in int8 terms and written xor `flip ^ 0x80`
/// (unchanged for int8 rows, shifted back to uint8 for uint8 ones). With
/// `fixed` the offsets were computed at prepare ([`ConvScratch::fix_offsets`]).
#[allow(clippy::too_many_arguments)]
fn conv_8bit(
    input: &[u8],
    flip: u8,
    a_zp: i32,
    w_off: i32,
    pk: &QPacked,
    bias: Option<&[i32]>,
    fixed: bool,
    q: &QConv,
    out: &mut [i8],
    rq: &mut RowRequant,
    s: &mut ConvBuffers,
    seg: &mut Option<QPacked>,
) {
    // Shared buffers are fitted at prepare; this only grows ones that are not.
    s.fit(pk);
    // A column filter over a one-column map ([N, T, 1, C] audio) runs as the same
    // filter along one row: the bytes are the same, and the row form gathers whole
    // runs of pixels instead of one output pixel per step.
    let g = &column_as_row(q.g);
    let (in_c, n, kq) = (q.in_c, pk.n, pk.kq);
    if !fixed {
        fill_offsets(&mut rq.offset, a_zp, w_off, pk, bias);
    }
    let fill = a_zp as u8;
    // With AVX-512 VNNI the tiles read the receptive fields from a padded copy
    // of the input instead (no gathered rows).
    #[cfg(target_arch = "x86_64")]
    if vnni::available() {
        let pk = match vnni::row_groups(g, in_c) {
            Some((segments, seg_k)) => vnni::pad_rows(seg, pk, segments, seg_k),
            None => pk,
        };
        if vnni::conv(input, flip, fill, w_off, pk, g, in_c, rq, out, &mut s.padded) {
            return;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = seg;
    let pixels = g.batch * g.out_h * g.out_w;
    let row_span = g.k_w * in_c;
    let in_row = g.in_w * in_c;
    // The per-pixel offsets below are plain arithmetic: bounded once here.
    assert!(g.indices_fit(in_c) && crate::holds(input.len(), &[g.batch, g.in_h, g.in_w, in_c]), "conv: input shorter than its geometry");
    // Filter rows ky_lo..ky_hi of output row oy fall inside the input (the rest
    // in the padding).
    let dil_h = g.dil_h.max(1);
    let ky_range = |oy: usize| {
        let y0 = oy * g.stride_h;
        let lo = g.pad_top.saturating_sub(y0).div_ceil(dil_h).min(g.k_h);
        let hi = if g.in_h + g.pad_top > y0 { ((g.in_h + g.pad_top - y0 - 1) / dil_h + 1).min(g.k_h) } else { 0 };
        (lo, hi.max(lo))
    };
    // Output columns ix_lo..ix_hi have every filter tap inside the input
    // horizontally. Each filter row is then one contiguous segment (dilation 1)
    // or `k_w` segments of one pixel, `dil_w` pixels apart.
    let reach = (g.k_w - 1) * g.dil_w;
    let ix_lo = g.pad_left.div_ceil(g.stride_w.max(1));
    let ix_hi = if g.in_w + g.pad_left > reach { (g.in_w + g.pad_left - reach - 1) / g.stride_w.max(1) + 1 } else { 0 };
    let taps = if g.dil_w == 1 { Taps { count: 1, len: row_span, step: row_span } } else { Taps { count: g.k_w, len: in_c, step: g.dil_w * in_c } };
    // A pixel at the edge: each tap checked against the input's bounds.
    let edge_pixel = |rows: &mut [u8], base: usize, nb: usize, oy: usize, ox: usize| {
        for ky in 0..g.k_h {
            let at = base + ky * row_span;
            let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else {
                rows[at..at + row_span].fill(fill);
                continue;
            };
            let line = (nb * g.in_h + iy) * in_row;
            if g.dil_w == 1 {
                // Taps kx_lo..kx_hi inside the input: one copy between two fills
                // (the second one overwriting the copy's over-long tail).
                let x0 = ox * g.stride_w;
                let kx_lo = g.pad_left.saturating_sub(x0).min(g.k_w);
                let kx_hi = (g.in_w + g.pad_left).saturating_sub(x0).clamp(kx_lo, g.k_w);
                rows[at..at + kx_lo * in_c].fill(fill);
                if kx_lo < kx_hi {
                    flip_copy(rows, at + kx_lo * in_c, input, line + (x0 + kx_lo - g.pad_left) * in_c, (kx_hi - kx_lo) * in_c, flip);
                }
                rows[at + kx_hi * in_c..at + row_span].fill(fill);
                continue;
            }
            for kx in 0..g.k_w {
                let at = at + kx * in_c;
                match (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w) {
                    Some(ix) => flip_copy(rows, at, input, line + ix * in_c, in_c, flip),
                    None => rows[at..at + in_c].fill(fill),
                }
            }
        }
    };
    // A 1x1 convolution over every pixel: the rows are the input's pixels.
    let pointwise =
        g.k_h == 1 && g.k_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 && g.pad_left == 0 && g.in_h == g.out_h && g.in_w == g.out_w;
    let (mut nb, mut oy, mut ox) = (0, 0, 0);
    let mut start = 0;
    while start < pixels {
        let count = BLOCK_ROWS.min(pixels - start);
        // Pixels are written in increasing position, so each copy's over-long
        // tail is overwritten by the next one (or lands past k, where the packed
        // weights are zero, or in the next row, written later, or in the slack).
        // A pointwise block's rows are consecutive input pixels: one copy.
        let mut r = if pointwise && kq == in_c {
            flip_copy(&mut s.rows, 0, input, start * in_c, count * in_c, flip);
            count
        } else {
            0
        };
        while r < count {
            // The block's pixels r..r + run lie in output row oy, columns ox..ox + run.
            let run = (count - r).min(g.out_w - ox);
            let (lo, hi) = (ix_lo.clamp(ox, ox + run), ix_hi.clamp(ox, ox + run));
            let hi = hi.max(lo);
            for c in ox..lo {
                edge_pixel(&mut s.rows, (r + c - ox) * kq, nb, oy, c);
            }
            if lo < hi {
                let rows_in = ky_range(oy);
                let from = ((nb * g.in_h + (oy * g.stride_h + rows_in.0 * g.dil_h).saturating_sub(g.pad_top)) * g.in_w + lo * g.stride_w - g.pad_left) * in_c;
                let seg_step = g.dil_h * in_row;
                gather_interior(
                    &mut s.rows,
                    (r + lo - ox) * kq,
                    kq,
                    input,
                    from,
                    g.stride_w * in_c,
                    seg_step,
                    row_span,
                    taps,
                    rows_in,
                    g.k_h,
                    hi - lo,
                    fill,
                    flip,
                );
            }
            for c in hi..ox + run {
                edge_pixel(&mut s.rows, (r + c - ox) * kq, nb, oy, c);
            }
            r += run;
            ox += run;
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
        let row_add = if w_off != 0 {
            for (r, sum) in s.row_sums[..count].iter_mut().enumerate() {
                *sum = byte_sum(&s.rows[r * kq..], pk.k).wrapping_mul(w_off);
            }
            &s.row_sums[..count]
        } else {
            &[][..]
        };
        let (dots, o) = (&mut s.dots[..count * n], &mut out[start * n..(start + count) * n]);
        if !rq.apply_fused(dots, row_add, flip == 0, o) {
            for (d, &sum) in dots.chunks_exact_mut(n.max(1)).zip(row_add) {
                d.iter_mut().for_each(|d| *d = d.wrapping_add(sum));
            }
            rq.apply(dots, o);
            if flip == 0 {
                o.iter_mut().for_each(|b| *b ^= i8::MIN);
            }
        }
        start += count;
    }
}

/// Output channels per block of the int8 depthwise kernels (one AVX2 vector of
/// int32 accumulators).
const DW_BLOCK: usize = 8;

/// Rows of the depthwise line ring (input rows kept widened between output rows)
/// at most: a filter taller than this, dilation included, rebuilds its lines on
/// every output row instead.
const DW_RING_MAX: usize = 16;

/// Prepared int8 depthwise convolution, any channel multiplier (weights zero
/// point 0). Filter columns are taken in pairs: each input row is widened once
/// into a *pair line* of int16 `(x - zp)` values, `[pixel p][channel][2]` holding
/// the values at pixels `p` and `p + dilation` (padding and missing columns are
/// 0), and the weights likewise into `[filter row][pair][channel][2]`, so one
/// `vpmaddwd` adds two taps of 8 channels exactly in int32 (|x - zp| <= 255,
/// |w| <= 128). Output channel `o` reads input channel `o / multiplier`; channels
/// are padded to blocks of 8 with zero weights. The lines of the input rows a
/// filter spans are kept in a ring, so with stride 1 each row is widened once.
/// With multiplier 1 a line holds only the pixels whose pairs are read (every
/// [`line_step`]-th one: every second at stride 2), so a strided layer widens
/// each input pixel once, not twice.
#[derive(Debug, Clone)]
pub struct Depthwise {
    /// The geometry prepared for.
    prepared: crate::conv::Window,
    /// The geometry computed: `prepared`, or its transpose for a column filter
    /// over a one-column input ([`column_as_row`]).
    g: crate::conv::Window,
    in_c: usize,
    out_c: usize,
    /// The input zero point prepared for (uint8 or int8 terms).
    in_zp: i32,
    /// xor turning the input bytes into int8: 0x80 for uint8, else 0.
    flip: u8,
    /// The input zero point in int8 terms.
    zp8: i32,
    /// `out_c` rounded up to [`DW_BLOCK`].
    cp: usize,
    /// Filter column pairs: `k_w.div_ceil(2)`.
    pairs: usize,
    /// Pixels per pair line: one for every first tap a pair reads.
    npl: usize,
    /// Input pixels between consecutive pair-line pixels ([`line_step`]).
    step: usize,
    /// Whether input row `iy` lives in slot `iy % slots` across output rows (a
    /// short filter extent) or filter row `ky` in slot `ky`, rebuilt per row.
    ring: bool,
    /// `[k_h][pairs][cp][2]`, zero past `k_w` and `out_c`.
    w: Vec<i16>,
    /// One widened input row, `[(npl - 1) * step + dil_w + 1][cp]`, zero in the
    /// padding columns.
    single: Vec<i16>,
    /// The slots' pair lines, `npl * cp * 2` values each.
    lines: Vec<i16>,
    /// The input row (`batch * in_h + iy`) in each slot; `usize::MAX` for none.
    tags: Vec<usize>,
    /// Slot offsets (into `lines`) of the current output row's filter rows.
    offs: Vec<usize>,
    /// One output row of accumulators, `out_w * out_c`.
    acc: Vec<i32>,
    rq: RowRequant,
    /// `rq`'s scales laid out per block for the AVX-512 row kernel, and
    /// whether any channel shifts left.
    #[cfg(target_arch = "x86_64")]
    params: (Vec<i32>, bool),
    /// The one-input-channel form ([`dw_avx512::OneChannel`]) where it applies.
    #[cfg(target_arch = "x86_64")]
    one: Option<dw_avx512::OneChannel>,
}

impl Depthwise {
    /// Bytes of the widened lines and weights [`Depthwise::new`] allocates for
    /// `q` (None if the count overflows): large dilations stretch the lines past
    /// the input, so callers bound this before preparing a file's convolution.
    pub fn scratch_bytes(q: &QConv) -> Option<usize> {
        let g = &column_as_row(q.g);
        let cp = q.out_c.checked_next_multiple_of(DW_BLOCK)?;
        let pairs = g.k_w.div_ceil(2);
        let step = line_step(g, pairs, q.depth_multiplier);
        let npl =
            (g.out_w.saturating_sub(1).checked_mul(g.stride_w)?.checked_add((2 * pairs).saturating_sub(2).checked_mul(g.dil_w)?)? / step).checked_add(1)?;
        let extent = g.k_h.saturating_sub(1).checked_mul(g.dil_h)?.checked_add(1)?;
        let slots = if extent <= DW_RING_MAX { extent } else { g.k_h };
        let lines = crate::product(&[slots.checked_add(1)?, npl.checked_add(g.dil_w)?, cp, 4])?;
        let weights = crate::product(&[g.k_h, pairs, cp, 4])?;
        // The one-channel form's padded plane and its weights (four taps a group).
        let plane = if q.in_c == 1 {
            let height = g.out_h.saturating_sub(1).checked_mul(g.stride_h)?.checked_add(g.k_h.saturating_sub(1).checked_mul(g.dil_h)?)?.checked_add(1)?;
            let width = g.out_w.saturating_sub(1).checked_mul(g.stride_w)?.checked_add(g.k_w.div_ceil(4).checked_mul(4)?)?;
            crate::product(&[height, width])?.checked_add(crate::product(&[g.k_h, g.k_w.div_ceil(4), q.out_c.checked_next_multiple_of(16)?, 4])?)?
        } else {
            0
        };
        lines.checked_add(weights)?.checked_add(crate::product(&[g.out_w, q.out_c, 4])?)?.checked_add(plane)
    }

    /// Prepares int8 weights `[1, kh, kw, out_c]` for the geometry of `q`
    /// (`q.depth_multiplier` output channels per input channel, weight zero
    /// point `q.w_zp` in -128..=127) for [`depthwise_i8`]. Panics if the weights
    /// are short, the channel counts disagree or the zero point is out of range.
    pub fn new(w: &[i8], q: &QConv) -> Depthwise {
        assert!((-128..=127).contains(&q.w_zp) && (-128..=127).contains(&q.in_zp), "depthwise: int8 zero points out of range");
        Depthwise::prepare(w.len(), &|i| i16::from(w[i]) - q.w_zp as i16, q, 0, &q.rq)
    }

    /// Prepares uint8 weights for [`depthwise_u8`]: `q` in uint8 terms (zero
    /// points in 0..=255, output zero point and clamp in 0..=255).
    pub fn new_u8(w: &[u8], q: &QConv) -> Depthwise {
        assert!((0..=255).contains(&q.w_zp) && (0..=255).contains(&q.in_zp), "depthwise: uint8 zero points out of range");
        // The output requantized in int8 terms, then shifted back.
        let rq = Requant { out_zp: q.rq.out_zp - 128, min: q.rq.min - 128, max: q.rq.max - 128, ..q.rq.clone() };
        Depthwise::prepare(w.len(), &|i| i16::from(w[i]) - q.w_zp as i16, q, 0x80, &rq)
    }

    /// `weight(i)`: element `i` of the `[1, kh, kw, out_c]` weights less their
    /// zero point; `flip` turns the input bytes into int8 (0x80 for uint8).
    /// A `dyn` reader, so that one instance serves int8 and uint8 weights (a
    /// copy of the weights as int16 instead would change where the kernels'
    /// buffers land on the heap, which moved the int8 depthwise rows by 3%).
    fn prepare(len: usize, weight: &dyn Fn(usize) -> i16, q: &QConv, flip: u8, rq: &Requant) -> Depthwise {
        let w_len = len;
        let g = column_as_row(q.g);
        let m = q.depth_multiplier.max(1);
        assert!(q.out_c == q.in_c * m, "depthwise: {} output channels for {} inputs x {m}", q.out_c, q.in_c);
        assert!(w_len >= g.k_h * g.k_w * q.out_c, "depthwise: {w_len} weights for {}x{}x{}", g.k_h, g.k_w, q.out_c);
        let cp = q.out_c.next_multiple_of(DW_BLOCK);
        let pairs = g.k_w.div_ceil(2);
        let step = line_step(&g, pairs, m);
        let npl = if g.out_w == 0 { 0 } else { ((g.out_w - 1) * g.stride_w + (2 * pairs - 2) * g.dil_w) / step + 1 };
        let mut wp = vec![0i16; g.k_h * pairs * cp * 2];
        for ky in 0..g.k_h {
            for kx in 0..g.k_w {
                for o in 0..q.out_c {
                    wp[((ky * pairs + kx / 2) * cp + o) * 2 + kx % 2] = weight((ky * g.k_w + kx) * q.out_c + o);
                }
            }
        }
        let extent = (g.k_h.max(1) - 1) * g.dil_h + 1;
        let ring = extent <= DW_RING_MAX;
        let rq = RowRequant::new(rq, q.out_c);
        let slots = if ring { extent } else { g.k_h };
        #[cfg(target_arch = "x86_64")]
        let one = dw_avx512::OneChannel::new(&g, q.in_c, q.out_c, q.in_zp - i32::from(flip), &weight);
        Depthwise {
            prepared: q.g,
            g,
            in_c: q.in_c,
            out_c: q.out_c,
            in_zp: q.in_zp,
            flip,
            zp8: q.in_zp - i32::from(flip),
            cp,
            pairs,
            npl,
            step,
            ring,
            w: wp,
            single: vec![0; (npl.saturating_sub(1) * step + g.dil_w + 1) * cp],
            lines: vec![0; slots * npl * cp * 2],
            tags: vec![usize::MAX; slots],
            offs: Vec::with_capacity(g.k_h),
            acc: vec![0; g.out_w * q.out_c],
            #[cfg(target_arch = "x86_64")]
            params: dw_avx512::block_params(&rq, cp),
            #[cfg(target_arch = "x86_64")]
            one,
            rq,
        }
    }

    /// Widens input row `row` (`batch * in_h + iy`) into slot `slot`'s pair line.
    fn build_line(&mut self, input: &[u8], row: usize, slot: usize) {
        let (g, cp, m) = (&self.g, self.cp, self.out_c / self.in_c.max(1));
        let src = &input[row * g.in_w * self.in_c..][..g.in_w * self.in_c];
        self.tags[slot] = row;
        // (With multiplier 1 the AVX2 interleave of the bytes is as fast as a
        // 512-bit form would be: the line is stores, not arithmetic.)
        #[cfg(target_arch = "x86_64")]
        if m > 1 && dw_avx512::available() {
            let line = &mut self.lines[slot * self.npl * cp * 2..][..self.npl * cp * 2];
            // SAFETY: the CPU features are present (checked just above); `cp` is
            // `out_c` rounded up to 8 and `line` holds `npl` whole pixels.
            unsafe { dw_avx512::pair_line_repeated(src, self.in_c, m, g.pad_left, g.dil_w, self.zp8, self.flip, cp, line) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if m == 1 && crate::level::has_avx2_fma() {
            let line = &mut self.lines[slot * self.npl * cp * 2..][..self.npl * cp * 2];
            // SAFETY: AVX2 is present (checked just above).
            unsafe {
                if self.flip == 0 {
                    x86_64::pair_line_avx2::<0>(src, self.in_c, g.pad_left, g.dil_w, self.step, self.zp8, cp, line);
                } else {
                    x86_64::pair_line_avx2::<0x80>(src, self.in_c, g.pad_left, g.dil_w, self.step, self.zp8, cp, line);
                }
            }
            return;
        }
        if m > 1 {
            let line = &mut self.lines[slot * self.npl * cp * 2..][..self.npl * cp * 2];
            pair_line_repeated(src, self.in_c, m, g.pad_left, g.dil_w, self.zp8, self.flip, cp, line);
            return;
        }
        // Columns before pad_left and past the input stay 0 from construction.
        let from = (g.pad_left * cp).min(self.single.len());
        let dst = &mut self.single[from..];
        for (px, d) in src.chunks_exact(self.in_c.max(1)).zip(dst.chunks_exact_mut(cp)) {
            widen_pixel(px, m, self.zp8, self.flip, &mut d[..self.out_c]);
        }
        let line = &mut self.lines[slot * self.npl * cp * 2..][..self.npl * cp * 2];
        interleave_pairs(&self.single, cp, g.dil_w, self.step, line);
    }
}

/// Input pixels between consecutive pixels of a pair line: the first taps of
/// the pairs lie at `ox * stride_w + 2 * pr * dil_w`, all multiples of this
/// (with one pair, of the stride). Multipliers above 1 keep every pixel: their
/// line builders read runs of neighbouring pixels.
fn line_step(g: &crate::conv::Window, pairs: usize, m: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    if m > 1 {
        return 1;
    }
    gcd(g.stride_w, if pairs > 1 { 2 * g.dil_w } else { 0 }).max(1)
}

/// A filter of one column over a one-column input (`[N, H, 1, C]`, the
/// streaming audio layout) as the same filter laid along a one-row input: the
/// tensors' bytes are the same, and the taps then pair along the row.
fn column_as_row(g: crate::conv::Window) -> crate::conv::Window {
    if g.in_w != 1 || g.k_w != 1 || g.out_w != 1 || g.pad_left != 0 {
        return g;
    }
    crate::conv::Window {
        in_h: g.in_w,
        in_w: g.in_h,
        out_h: g.out_w,
        out_w: g.out_h,
        k_h: g.k_w,
        k_w: g.k_h,
        stride_h: g.stride_w,
        stride_w: g.stride_h,
        dil_h: g.dil_w,
        dil_w: g.dil_h,
        pad_top: g.pad_left,
        pad_left: g.pad_top,
        ..g
    }
}

/// `(x - zp)` of one input pixel's channels (bytes xor `flip`, as int8) as
/// int16, each repeated `m` times.
#[inline(always)]
fn widen_pixel(px: &[u8], m: usize, zp: i32, flip: u8, d: &mut [i16]) {
    if m == 1 {
        for (d, &x) in d.iter_mut().zip(px) {
            *d = (i32::from((x ^ flip) as i8) - zp) as i16;
        }
    } else {
        for (d, &x) in d.chunks_exact_mut(m).zip(px) {
            d.fill((i32::from((x ^ flip) as i8) - zp) as i16);
        }
    }
}

simd_fn! {
    /// The pair line of one input row for a channel multiplier `m > 1`, built in
    /// one pass: each input channel's pair (pixels `p` and `p + dil`, less the
    /// zero point; 0 in the padding) repeated over its `m` output channels. The
    /// lanes past `in_c * m` are left as they are (they meet zero weights).
    #[allow(clippy::too_many_arguments)]
    fn pair_line_repeated(src: &[u8], in_c: usize, m: usize, pad_left: usize, dil: usize, zp: i32, flip: u8, cp: usize, line: &mut [i16]) {
        let width = src.len() / in_c.max(1);
        let pixel = |p: usize| p.checked_sub(pad_left).filter(|&x| x < width).map(|x| &src[x * in_c..][..in_c]);
        for (p, out) in line.chunks_exact_mut(2 * cp).enumerate() {
            let (a, b) = (pixel(p), pixel(p + dil));
            let value = |px: Option<&[u8]>, c: usize| px.map_or(0, |px| (i32::from((px[c] ^ flip) as i8) - zp) as i16);
            for (c, group) in out[..2 * in_c * m].chunks_exact_mut(2 * m).enumerate() {
                let pair = [value(a, c), value(b, c)];
                for d in group.chunks_exact_mut(2) {
                    d.copy_from_slice(&pair);
                }
            }
        }
    }
}

simd_fn! {
    /// Pair line from a widened row: `line[p][c] = (single[p * step][c], single[p * step + dil][c])`.
    fn interleave_pairs(single: &[i16], cp: usize, dil: usize, step: usize, line: &mut [i16]) {
        for (p, pair) in line.chunks_exact_mut(2 * cp).enumerate() {
            let (a, b) = (&single[p * step * cp..][..cp], &single[(p * step + dil) * cp..][..cp]);
            for ((d, &a), &b) in pair.chunks_exact_mut(2).zip(a).zip(b) {
                d[0] = a;
                d[1] = b;
            }
        }
    }
}

/// Geometry of one output row of [`depthwise_i8`] for its row kernels, in
/// int16 units: the pair lines of the row's filter rows at `offs` in `lines`,
/// each output pixel `px_step` further, each pair of filter columns
/// `pair_step` further; the weights of those filter rows from `w[0]`.
pub(crate) struct DwRow<'a> {
    pub(crate) lines: &'a [i16],
    pub(crate) offs: &'a [usize],
    pub(crate) w: &'a [i16],
    pub(crate) pairs: usize,
    pub(crate) cp: usize,
    pub(crate) out_w: usize,
    pub(crate) out_c: usize,
    pub(crate) px_step: usize,
    pub(crate) pair_step: usize,
}

impl DwRow<'_> {
    /// Whether every read the row kernels make lies inside `lines` and `w`, and
    /// `acc` holds the row: the checks the AVX2 kernel's unchecked loads rely on.
    fn in_bounds(&self, acc: &[i32]) -> bool {
        let reach = (self.out_w.max(1) - 1) * self.px_step + (self.pairs.max(1) - 1) * self.pair_step + 2 * self.cp;
        self.offs.iter().all(|&o| o + reach <= self.lines.len())
            && self.w.len() >= self.offs.len() * self.pairs * self.cp * 2
            && acc.len() >= self.out_w * self.out_c
            && self.cp.is_multiple_of(DW_BLOCK)
            && self.out_c <= self.cp
    }
}

simd_fn! {
    /// The portable row kernel of [`depthwise_i8`]: `acc[ox][o] = sum over the
    /// row's filter rows and column pairs of the two products`.
    pub(crate) fn depthwise_row(r: &DwRow<'_>, acc: &mut [i32]) {
        let mut lanes = vec![0i32; r.cp];
        for ox in 0..r.out_w {
            lanes.fill(0);
            for (k, &off) in r.offs.iter().enumerate() {
                for pr in 0..r.pairs {
                    let x = &r.lines[off + ox * r.px_step + pr * r.pair_step..][..2 * r.cp];
                    let w = &r.w[(k * r.pairs + pr) * 2 * r.cp..][..2 * r.cp];
                    for ((l, x), w) in lanes.iter_mut().zip(x.chunks_exact(2)).zip(w.chunks_exact(2)) {
                        *l += i32::from(x[0]) * i32::from(w[0]) + i32::from(x[1]) * i32::from(w[1]);
                    }
                }
            }
            acc[ox * r.out_c..][..r.out_c].copy_from_slice(&lanes[..r.out_c]);
        }
    }
}

/// int8 depthwise convolution with [`Depthwise`] weights (prepared for this
/// `q`), one output row at a time: the row's input lines widened into the ring
/// (padding rows skipped, padding columns 0), the taps summed per output pixel
/// in registers, then the row requantized. `input` is the int8 tensor's bytes.
/// Bit-exact with the per-tap definition. Panics if `q` is not the geometry `d`
/// was prepared for or a buffer is short.
pub fn depthwise_i8(input: &[u8], d: &mut Depthwise, bias: Option<&[i32]>, q: &QConv, out: &mut [i8]) {
    assert!(d.flip == 0, "depthwise_i8: weights prepared for uint8");
    depthwise_8bit(input, d, bias, q, out);
}

/// uint8 depthwise convolution with [`Depthwise::new_u8`] weights: as
/// [`depthwise_i8`], with uint8 input and output and `q` in uint8 terms.
pub fn depthwise_u8(input: &[u8], d: &mut Depthwise, bias: Option<&[i32]>, q: &QConv, out: &mut [u8]) {
    assert!(d.flip == 0x80, "depthwise_u8: weights prepared for int8");
    // SAFETY: i8 and u8 have the same size, alignment and valid bit patterns.
    let out8 = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut i8, out.len()) };
    depthwise_8bit(input, d, bias, q, out8);
    crate::quant::flip_sign_bits(out);
}

/// Blocks of 16 lanes of a row of `cp` lanes (one for `cp == 8`).
#[cfg(target_arch = "x86_64")]
fn cp_blocks(cp: usize) -> usize {
    cp.div_ceil(16)
}

fn depthwise_8bit(input: &[u8], d: &mut Depthwise, bias: Option<&[i32]>, q: &QConv, out: &mut [i8]) {
    assert!(q.g == d.prepared && q.in_c == d.in_c && q.out_c == d.out_c && q.in_zp == d.in_zp, "depthwise: prepared for another geometry");
    let g = d.g;
    let row = g.out_w * d.out_c;
    assert!(
        crate::holds(input.len(), &[g.batch, g.in_h, g.in_w, d.in_c]) && crate::holds(out.len(), &[g.batch, g.out_h, row]),
        "depthwise_i8: buffers shorter than the geometry"
    );
    if row == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(one) = d.one.as_mut().filter(|_| dw_avx512::available()) {
        let (params, left) = (&d.params.0, d.params.1);
        assert!(params.len() >= cp_blocks(d.cp) * dw_avx512::PARAMS * 16 && bias.is_none_or(|b| b.len() >= d.out_c));
        // SAFETY: the CPU features are present (checked just above); `one` was
        // prepared with this geometry (asserted on entry) and `out_c`; the
        // buffers hold `g.batch` images (asserted on entry), `params` every
        // block and the bias `out_c` values (checked just above).
        unsafe {
            dw_avx512::one_channel(one, &g, d.out_c, d.flip, input, bias, &d.rq, params, left, out);
        }
        return;
    }
    for (j, o) in d.rq.offset.iter_mut().enumerate() {
        *o = bias.map_or(0, |b| b[j]);
    }
    d.tags.fill(usize::MAX);
    #[cfg(target_arch = "x86_64")]
    let avx512 = dw_avx512::available();
    let (cp, pairs, npl) = (d.cp, d.pairs, d.npl);
    let dil_h = g.dil_h.max(1);
    // The row geometry's steps, and below the filter rows inside the input and
    // their ring slots, without a division per filter row where it can be
    // helped: on small maps (25x5 at 64 channels) the divisions of this loop
    // were a twentieth of the layer.
    let px_step = g.stride_w / d.step * cp * 2;
    let pair_step = 2 * g.dil_w / d.step * cp * 2;
    let slots = d.tags.len();
    for nb in 0..g.batch {
        for oy in 0..g.out_h {
            let y0 = oy * g.stride_h;
            let below = (g.in_h + g.pad_top).saturating_sub(y0);
            let (ky_lo, ky_hi) = if dil_h == 1 {
                let lo = g.pad_top.saturating_sub(y0).min(g.k_h);
                (lo, below.min(g.k_h).max(lo))
            } else {
                let lo = g.pad_top.saturating_sub(y0).div_ceil(dil_h).min(g.k_h);
                (lo, if below > 0 { ((below - 1) / dil_h + 1).min(g.k_h) } else { 0 }.max(lo))
            };
            d.offs.clear();
            // Ring slot of the first filter row; each next one is dil_h further
            // (dil_h <= slots where a filter has two rows or more).
            let mut ring_slot = if d.ring && ky_lo < ky_hi { (y0 + ky_lo * g.dil_h - g.pad_top) % slots } else { 0 };
            for ky in ky_lo..ky_hi {
                let iy = y0 + ky * g.dil_h - g.pad_top;
                let slot = if d.ring { ring_slot } else { ky };
                if d.tags[slot] != nb * g.in_h + iy {
                    d.build_line(input, nb * g.in_h + iy, slot);
                }
                d.offs.push(slot * npl * cp * 2);
                ring_slot += dil_h;
                if ring_slot >= slots {
                    ring_slot -= slots;
                }
            }
            let r = DwRow { lines: &d.lines, offs: &d.offs, w: &d.w[ky_lo * pairs * cp * 2..], pairs, cp, out_w: g.out_w, out_c: d.out_c, px_step, pair_step };
            assert!(r.in_bounds(&d.acc), "depthwise_i8: row geometry out of bounds");
            let o = &mut out[((nb * g.out_h + oy) * g.out_w) * d.out_c..][..row];
            #[cfg(target_arch = "x86_64")]
            if avx512 {
                let (params, left) = (&d.params.0, d.params.1);
                assert!(params.len() >= cp.div_ceil(16) * dw_avx512::PARAMS * 16 && d.rq.offset.len() == d.out_c);
                // SAFETY: the CPU features are present (checked above); the row's
                // reads were bounds-checked by `in_bounds`, `o` holds the row,
                // `d.rq` its `out_c` channels and `params` every block of `cp`
                // (checked just above).
                unsafe {
                    if left {
                        dw_avx512::depthwise_row::<true>(&r, &d.rq, params, o);
                    } else {
                        dw_avx512::depthwise_row::<false>(&r, &d.rq, params, o);
                    }
                }
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            if crate::level::has_avx2_fma() {
                // SAFETY: AVX2 is present (checked just above); every read and
                // write of the row was bounds-checked by `in_bounds`.
                unsafe { x86_64::depthwise_row_avx2(&r, &mut d.acc) };
            } else {
                depthwise_row(&r, &mut d.acc);
            }
            #[cfg(not(target_arch = "x86_64"))]
            depthwise_row(&r, &mut d.acc);
            d.rq.apply(&d.acc, o);
        }
    }
}

/// The receptive fields of `pixels` output pixels of one row whose filter rows
/// lie inside the input horizontally, written from `rows[at..]` at a stride of
/// `kq`: filter rows `lo..hi` (inside vertically; the first at `input[from..]`,
/// the next `seg_step` further, the next pixel's `px_step` further) copied as
/// `taps` segments each (one of `row_span` bytes, or with dilation one pixel
/// per filter column), the rest filled with the padding value.
/// When every 16-byte chunk stays inside both buffers (checked once per run),
/// segments are copied in whole chunks without further checks; the over-long
/// tails follow [`flip_copy`]'s rule.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gather_interior(
    rows: &mut [u8],
    at: usize,
    kq: usize,
    input: &[u8],
    from: usize,
    px_step: usize,
    seg_step: usize,
    row_span: usize,
    taps: Taps,
    (lo, hi): (usize, usize),
    k_h: usize,
    pixels: usize,
    fill: u8,
    flip: u8,
) {
    let segs = hi - lo;
    let chunks = taps.len.div_ceil(16);
    let fits = |last: Option<usize>, len: usize| last.is_some_and(|l| l <= len);
    let last_tap = taps.count.saturating_sub(1);
    let last_in = (pixels - 1)
        .checked_mul(px_step)
        .and_then(|o| o.checked_add(segs.saturating_sub(1).checked_mul(seg_step)?))
        .and_then(|o| o.checked_add(last_tap.checked_mul(taps.step)?))
        .and_then(|o| o.checked_add(from + chunks * 16));
    let last_out = (pixels - 1).checked_mul(kq).and_then(|o| o.checked_add((hi.max(1) - 1) * row_span + last_tap * taps.len + at + chunks * 16));
    let fast = segs > 0 && taps.count > 0 && fits(last_in, input.len()) && fits(last_out, rows.len());
    for p in 0..pixels {
        let (base, src) = (at + p * kq, from + p * px_step);
        if lo > 0 {
            rows[base..base + lo * row_span].fill(fill);
        }
        if fast {
            let dst = base + lo * row_span;
            // SAFETY: every chunk ends at or before the last pixel's last chunk,
            // inside `input` and `rows` (`fast` checked both).
            let (d, s) = unsafe { (rows.as_mut_ptr().add(dst), input.as_ptr().add(src)) };
            // SAFETY: `chunks` chunks of `taps.count` taps of `segs` segments, as
            // above; the short segments of few-channel layers get loops of fixed length.
            unsafe {
                match (chunks, taps.count) {
                    (1, 1) => flip_segments::<1, false>(d, s, segs, row_span, seg_step, taps, 1, flip),
                    (2, 1) => flip_segments::<2, false>(d, s, segs, row_span, seg_step, taps, 2, flip),
                    (_, 1) => flip_segments::<0, false>(d, s, segs, row_span, seg_step, taps, chunks, flip),
                    (1, _) => flip_segments::<1, true>(d, s, segs, row_span, seg_step, taps, 1, flip),
                    _ => flip_segments::<0, true>(d, s, segs, row_span, seg_step, taps, chunks, flip),
                }
            }
        } else {
            for seg in 0..segs {
                for t in 0..taps.count {
                    flip_copy(rows, base + (lo + seg) * row_span + t * taps.len, input, src + seg * seg_step + t * taps.step, taps.len, flip);
                }
            }
        }
        if hi < k_h {
            rows[base + hi * row_span..base + k_h * row_span].fill(fill);
        }
    }
}

/// The sum of `bytes[..len]` (`len <= bytes.len()`). On x86-64, 16 bytes per
/// `psadbw` (the rows of a uint8 convolution are summed per output pixel, and
/// their few-channel filters make rows of 15-200 bytes, too short for the
/// compiler's vector loop); the last partial chunk is read whole and masked
/// when `bytes` extends that far (the block rows do: they carry 16 bytes of slack).
#[inline]
fn byte_sum(bytes: &[u8], len: usize) -> i32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // 16 ones then 16 zeros: the 16 bytes from 16 - r keep the first r lanes.
        const KEEP: [u8; 32] = {
            let mut k = [0u8; 32];
            let mut i = 0;
            while i < 16 {
                k[i] = 0xff;
                i += 1;
            }
            k
        };
        let chunks = len.div_ceil(16);
        if chunks * 16 <= bytes.len() {
            let r = len - (chunks - 1) * 16;
            // SAFETY: SSE2 is part of x86-64; every chunk lies inside `bytes`
            // (checked just above) and the mask inside KEEP (16 - r in 0..16);
            // unaligned loads.
            return unsafe {
                let mut acc = _mm_setzero_si128();
                for c in 0..chunks {
                    let mut v = _mm_loadu_si128(bytes.as_ptr().add(c * 16) as *const __m128i);
                    if c + 1 == chunks {
                        v = _mm_and_si128(v, _mm_loadu_si128(KEEP.as_ptr().add(16 - r) as *const __m128i));
                    }
                    acc = _mm_add_epi64(acc, _mm_sad_epu8(v, _mm_setzero_si128()));
                }
                (_mm_cvtsi128_si64(acc) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc))) as i32
            };
        }
    }
    bytes[..len].iter().map(|&b| i32::from(b)).sum()
}

/// How [`gather_interior`] copies one filter row: `count` segments of `len`
/// bytes, `step` bytes apart in the input and back to back in the row.
#[derive(Clone, Copy)]
struct Taps {
    count: usize,
    len: usize,
    step: usize,
}

/// `segs` segments of `taps` taps (one unless `TAPS`, a constant that keeps the
/// undilated loop as short as it was) of `chunks` 16-byte chunks (`CH` of them when
/// not 0, a constant the loops unroll on), tap `t` of segment `i` from
/// `src + i * src_step + t * taps.step` to `dst + i * dst_step + t * taps.len`,
/// each byte xor `flip`. Written in increasing order of `dst`, so each chunk's
/// over-long tail is overwritten by the next tap or segment.
///
/// # Safety
/// Every chunk must lie inside readable `src` and writable `dst` memory.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn flip_segments<const CH: usize, const TAPS: bool>(
    dst: *mut u8,
    src: *const u8,
    segs: usize,
    dst_step: usize,
    src_step: usize,
    taps: Taps,
    chunks: usize,
    flip: u8,
) {
    let chunks = if CH > 0 { CH } else { chunks };
    let taps = if TAPS { taps } else { Taps { count: 1, ..taps } };
    for i in 0..segs {
        for t in 0..taps.count {
            let (d, s) = (i * dst_step + t * taps.len, i * src_step + t * taps.step);
            for c in 0..chunks {
                // SAFETY: chunk c of tap t of segment i lies inside both buffers (contract).
                unsafe { flip16(dst.add(d + c * 16), src.add(s + c * 16), flip) };
            }
        }
    }
}

/// Copies 16 bytes from `src` to `dst`, each xor `flip` (0x80: int8 to unsigned;
/// 0 for uint8 bytes): one vector xor, written with SSE2 on x86-64, where LLVM
/// left the byte loop scalar.
///
/// # Safety
/// `src` must be readable and `dst` writable for 16 bytes.
#[inline(always)]
unsafe fn flip16(dst: *mut u8, src: *const u8, flip: u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64; 16 bytes at each pointer (contract), unaligned accesses.
    unsafe {
        use std::arch::x86_64::*;
        _mm_storeu_si128(dst as *mut __m128i, _mm_xor_si128(_mm_loadu_si128(src as *const __m128i), _mm_set1_epi8(flip as i8)));
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: 16 bytes at each pointer (contract), unaligned accesses.
    unsafe {
        (dst as *mut u128).write_unaligned((src as *const u128).read_unaligned() ^ u128::from_ne_bytes([flip; 16]));
    }
}

/// Copies `len` 8-bit values from `src[from..]` to `dst[at..]` as unsigned bytes
/// (int8 shifted by 128 with `flip` 0x80, uint8 as they are with 0), 16 at a time: the last chunk may write up to 15 bytes past
/// `at + len` (callers arrange for those to be overwritten or unused); near the end
/// of either buffer it finishes byte by byte.
#[inline(always)]
fn flip_copy(dst: &mut [u8], at: usize, src: &[u8], from: usize, len: usize, flip: u8) {
    // Panics here, before any unchecked access, if either range is out of bounds.
    let (d, s) = (&mut dst[at..], &src[from..]);
    let over = len.next_multiple_of(16);
    let whole = if over <= d.len() && over <= s.len() { over } else { len / 16 * 16 };
    assert!(whole <= d.len() && whole <= s.len() && len <= d.len() && len <= s.len(), "flip_copy out of bounds");
    for i in (0..whole).step_by(16) {
        // SAFETY: i + 16 <= whole, which both slices hold (asserted above).
        unsafe { flip16(d.as_mut_ptr().add(i), s.as_ptr().add(i), flip) };
    }
    for j in whole..len {
        d[j] = s[j] ^ flip;
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
    /// How the rescaled product is rounded ([`Rounding::Double`] unless set).
    rounding: Rounding,
    /// For [`Rounding::Single`], each block of 8 channels' 64-bit shift terms
    /// in the AVX2 kernel's lane order ([`single_terms`]), made once here
    /// rather than per run: at batch 1 they cost as much as the rows.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    single_terms: Vec<i64>,
    /// Whether a channel scales by 1 or more (shifts left more than right), so
    /// that one rounding can leave int32 and must be clamped (read by the AVX2 kernel).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    single_sat: bool,
    /// Each block of 16 channels' terms of the two roundings merged into one
    /// ([`merged_terms`], read by the AVX-512 convolution tiles), empty where a
    /// channel's shift or the zero point does not suit that form.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    merged: Vec<i64>,
    /// Whether any channel shifts left (found once here: the one-pixel layers
    /// of the wake-word models felt a scan of the shifts per run).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    shifts: bool,
}

/// The largest right shift [`merged_terms`] takes: with it the folded zero
/// point `z 2^(31 + right)` and the products (within 2^62) stay inside int64.
const MERGED_MAX_RIGHT: u32 = 22;

/// `i64` values per block of 16 channels in [`merged_terms`]: nine vectors.
pub(super) const MERGED_BLOCK: usize = 72;

/// TFLite's two roundings merged into one floor, laid out per block of 16
/// channels as the AVX-512 tiles read them. Rounding the high half of `p = x m`
/// and then shifting it right by `r` (half away from zero) is `floor((p + 2^30 +
/// c 2^31) / 2^(31 + r))` with `c = 2^(r - 1) - [p < 0]` (0 for `r = 0`): the
/// high half's floor nests in the shift's, and where a negative `p` rounds to a
/// high half of 0 either value of `c` gives 0. So each channel needs its total
/// shift `t = 31 + r`, the constant `2^30 + 2^(30 + r) [r > 0] + z 2^t` (the zero
/// point folded in) and the `2^31 [r > 0]` taken off for negative products.
///
/// A block is nine vectors of 512 bits, every one a plain load in the tiles
/// (building them per tile cost a call and a dozen vectors through memory on
/// the one-pixel layers): the 16 multipliers as int32, the odd channels'
/// multipliers in the low halves of the 64-bit lanes, the 16 left shifts, then
/// the total shifts, constants and corrections as 8 int64 lanes each, the
/// block's even channels then its odd ones. A block of at most 8 channels (a
/// layer's last) holds them twice, in both 256-bit halves, so that one vector
/// requantizes two pixels' outputs. Channels past `n` get `t = 31` and zeros.
/// Empty where a multiplier is negative, a right shift is past
/// [`MERGED_MAX_RIGHT`] or the zero point is not an 8-bit one.
fn merged_terms(multiplier: &[i32], left: &[u32], right: &[u32], out_zp: i32) -> Vec<i64> {
    let n = right.len();
    if !(-256..=256).contains(&out_zp) || right.iter().any(|&r| r > MERGED_MAX_RIGHT) || multiplier.iter().any(|&m| m < 0) {
        return Vec::new();
    }
    let pair = |lo: i32, hi: i32| i64::from(lo as u32) | (i64::from(hi) << 32);
    let mut terms = vec![0i64; n.div_ceil(16) * MERGED_BLOCK];
    for (b, block) in terms.chunks_exact_mut(MERGED_BLOCK).enumerate() {
        // Lane l reads channel `b * 16 + l`, or `b * 16 + l % 8` in a block of
        // at most 8 channels (both halves alike).
        let twice = n - b * 16 <= 8;
        let channel = |l: usize| b * 16 + if twice { l % 8 } else { l };
        let m = |l: usize| multiplier.get(channel(l)).copied().unwrap_or(0);
        for i in 0..8 {
            block[i] = pair(m(2 * i), m(2 * i + 1));
            block[8 + i] = i64::from(m(2 * i + 1));
            block[16 + i] = pair(left.get(channel(2 * i)).map_or(0, |&l| l as i32), left.get(channel(2 * i + 1)).map_or(0, |&l| l as i32));
            for odd in 0..2 {
                let at = 24 + odd * 8 + i;
                let Some(&r) = right.get(channel(2 * i + odd)) else {
                    block[at] = 31;
                    continue;
                };
                let t = 31 + r;
                block[at] = i64::from(t);
                block[at + 16] = (1i64 << 30) + if r > 0 { 1i64 << (30 + r) } else { 0 } + (i64::from(out_zp) << t);
                block[at + 32] = if r > 0 { 1i64 << 31 } else { 0 };
            }
        }
    }
    terms
}

/// The 64-bit terms of one rounding, per block of 8 channels: the total right
/// shifts `t = 31 + right - left` (clamped to 1..=62), then `2^(t - 1) + 2^62`,
/// then `2^(62 - t)` (see `x86_64::requant_single_avx2`), each as two vectors
/// of 4 lanes: the block's even channels, then its odd ones. Channels past `n`
/// get `t = 31`.
fn single_terms(left: &[u32], right: &[u32]) -> Vec<i64> {
    let n = left.len();
    let mut terms = vec![0i64; n.div_ceil(8) * 24];
    for (b, block) in terms.chunks_exact_mut(24).enumerate() {
        for lane in 0..8 {
            let c = b * 8 + lane;
            let t = if c < n { (31 + right[c] as i64 - left[c] as i64).clamp(1, 62) } else { 31 };
            let at = (lane % 2) * 4 + lane / 2;
            block[at] = t;
            block[8 + at] = (1i64 << (t - 1)) + (1i64 << 62);
            block[16 + at] = 1i64 << (62 - t);
        }
    }
    terms
}

impl RowRequant {
    /// Per-channel parameters for `n` channels (a per-tensor `rq` is repeated).
    pub fn new(rq: &Requant, n: usize) -> RowRequant {
        let at = |v: &[i32], j: usize| v[if v.len() == 1 { 0 } else { j }];
        let multiplier: Vec<i32> = (0..n).map(|j| at(&rq.multiplier, j)).collect();
        let right: Vec<u32> = (0..n).map(|j| (-at(&rq.shift, j)).max(0) as u32).collect();
        let left: Vec<u32> = (0..n).map(|j| at(&rq.shift, j).max(0) as u32).collect();
        RowRequant {
            offset: vec![0; n],
            merged: merged_terms(&multiplier, &left, &right, rq.out_zp),
            shifts: left.iter().any(|&l| l != 0),
            multiplier,
            left,
            right,
            out_zp: rq.out_zp,
            min: rq.min,
            max: rq.max,
            rounding: Rounding::Double,
            single_terms: Vec::new(),
            single_sat: false,
        }
    }

    /// The same parameters rounding as `rounding` says.
    pub fn with_rounding(self, rounding: Rounding) -> RowRequant {
        let single_terms = if rounding == Rounding::Single { single_terms(&self.left, &self.right) } else { Vec::new() };
        let single_sat = self.left.iter().zip(&self.right).any(|(&l, &r)| r < l);
        RowRequant { rounding, single_terms, single_sat, ..self }
    }

    /// The per-channel offsets added before rescaling (bias and zero-point terms).
    pub fn offset_mut(&mut self) -> &mut [i32] {
        &mut self.offset
    }

    /// [`RowRequant::apply`] with `row_add[r]` added to each accumulator of row
    /// `r` (none if empty) and, if `to_u8`, each output byte xor 0x80, in one pass where
    /// this CPU has that kernel (AVX2 without AVX-512, rounding twice); false,
    /// with nothing written, where it has not.
    fn apply_fused(&self, dots: &[i32], row_add: &[i32], to_u8: bool, out: &mut [i8]) -> bool {
        let n = self.offset.len();
        let shapes_agree = dots.len() == out.len() && n > 0 && dots.len().is_multiple_of(n) && (row_add.is_empty() || row_add.len() == dots.len() / n);
        #[cfg(target_arch = "x86_64")]
        if shapes_agree && self.rounding == Rounding::Double && !crate::level::has_avx512f() && crate::level::has_avx2_fma() {
            // SAFETY: AVX2 is present (checked just above); the lengths were checked.
            unsafe { x86_64::requant_avx2_fused(self, dots, row_add, to_u8, out) };
            return true;
        }
        let _ = (shapes_agree, row_add, to_u8);
        false
    }

    /// Requantizes rows of `n` accumulators into int8.
    pub fn apply(&self, dots: &[i32], out: &mut [i8]) {
        assert!(dots.len() == out.len() && dots.len().is_multiple_of(self.offset.len().max(1)), "requant operands disagree");
        if self.rounding == Rounding::Single {
            // The fully-connected layers round once; at batch 1 of a small layer
            // the scalar 64-bit form cost a fifth of the layer's instructions.
            #[cfg(target_arch = "x86_64")]
            if crate::level::has_avx512f() {
                // SAFETY: AVX-512F is present (checked just above); the lengths were checked.
                unsafe { x86_64::requant_single(self, dots, out) };
                return;
            }
            #[cfg(target_arch = "x86_64")]
            if crate::level::has_avx2_fma() && self.single_terms.len() == self.offset.len().div_ceil(8) * 24 {
                // SAFETY: AVX2 is present and the terms cover every block (checked
                // just above); the lengths were checked.
                unsafe { x86_64::requant_single_avx2(self, dots, out) };
                return;
            }
            requant_rows_single(self, dots, out);
            return;
        }
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

simd_fn! {
    /// [`RowRequant::apply`] with one rounding: `round_half_up(x * m / 2^(31 - shift))`
    /// of the exact 64-bit product, saturated to int32, as LiteRT's single-rounding
    /// `MultiplyByQuantizedMultiplier` (the same value as
    /// [`crate::quant::multiply_by_quantized_multiplier_i64_full`]).
    pub fn requant_rows_single(rq: &RowRequant, dots: &[i32], out: &mut [i8]) {
        let n = rq.offset.len();
        for (row, orow) in dots.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            for j in 0..n {
                let x = i64::from(row[j].wrapping_add(rq.offset[j]));
                // shift = left - right is in -31..=30 (as `quantize_multiplier`
                // makes it), so total is in 1..=62 and x * m + half below 2^63.
                let total = (31 + rq.right[j] as i32 - rq.left[j] as i32).clamp(1, 62);
                let v = (x * i64::from(rq.multiplier[j]) + (1i64 << (total - 1))) >> total;
                let v = v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
                orow[j] = v.wrapping_add(rq.out_zp).clamp(rq.min, rq.max) as i8;
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
    fn single_rounding_row_requant_matches_the_scalar_definition() {
        crate::level::each(|_| single_rounding_cases());
    }

    fn single_rounding_cases() {
        let mut seed = 5u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as i32
        };
        let mut halves = 0;
        for case in 0..300 {
            let n = 1 + case % 23;
            // Every third case scales by powers of two, whose exact halves (negative
            // ones above all) the two roundings resolve differently.
            let halving = case % 3 == 0;
            let real: Vec<f64> = (0..n)
                .map(|j| {
                    if halving {
                        0.5f64.powi(2 + ((case + j) % 6) as i32)
                    } else {
                        f64::from(next().unsigned_abs() % 100_000 + 1) / 1e5 * if case % 7 == 0 { 40.0 } else { 0.05 }
                    }
                })
                .collect();
            let (multiplier, shift): (Vec<i32>, Vec<i32>) = real.iter().map(|&r| crate::quant::quantize_multiplier(r)).unzip();
            let rq = Requant { multiplier, shift, out_zp: next() % 50, min: -128, max: 127 };
            let mut rr = RowRequant::new(&rq, n).with_rounding(Rounding::Single);
            let span = if halving { 200 } else { 200_000 };
            rr.offset.iter_mut().for_each(|o| *o = next() % (span / 40));
            let dots: Vec<i32> = (0..3 * n).map(|_| next() % span - span / 2).collect();
            let mut got = vec![0i8; 3 * n];
            rr.apply(&dots, &mut got);
            let mut portable = vec![0i8; 3 * n];
            requant_rows_single(&rr, &dots, &mut portable);
            assert_eq!(got, portable, "case {case}: dispatched and portable single rounding differ");
            for (i, (&d, &g)) in dots.iter().zip(&got).enumerate() {
                let acc = d.wrapping_add(rr.offset[i % n]);
                let want = rq.apply_rounded(acc, i % n, Rounding::Single);
                assert_eq!(i32::from(g), want, "case {case} element {i}");
                halves += i32::from(want != rq.apply_rounded(acc, i % n, Rounding::Double));
            }
        }
        // The two roundings must differ somewhere, or this test could not tell them apart.
        assert!(halves > 0, "no accumulator where single and double rounding differ");
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
                    // The same extremes rounding once (the saturation to int32 and
                    // the wrapping zero point above all).
                    let rs = rr.clone().with_rounding(Rounding::Single);
                    let mut got = vec![0i8; dots.len()];
                    rs.apply(&dots, &mut got);
                    let mut want = vec![0i8; dots.len()];
                    requant_rows_single(&rs, &dots, &mut want);
                    assert_eq!(got, want, "single: multiplier {multiplier} shift {shift} n {n}");
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

    /// A small xorshift generator for the randomized tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// A random convolution geometry and quantization: few and many channels,
    /// 1xN and Nx1 filters, strides, dilations, SAME and VALID, input zero points
    /// over the whole int8 range, per-channel multipliers.
    fn random_conv(rng: &mut Rng, depthwise: bool) -> QConv {
        loop {
            let (k_h, k_w) = match rng.below(4) {
                0 => (1, 1 + rng.below(7)),
                1 => (1 + rng.below(7), 1),
                _ => (1 + rng.below(5), 1 + rng.below(5)),
            };
            let (stride_h, stride_w) = (1 + rng.below(3), 1 + rng.below(3));
            let (dil_h, dil_w) = if rng.below(4) == 0 { (1 + rng.below(2), 1 + rng.below(2)) } else { (1, 1) };
            let (mut in_h, mut in_w) = (1 + rng.below(14), 1 + rng.below(20));
            let mut k_w = k_w;
            if rng.below(6) == 0 {
                // The streaming audio layout: one column, filters along the time axis.
                (in_h, in_w, k_w) = (1 + rng.below(30), 1, 1);
            }
            let same = rng.below(2) == 0;
            let (Some((out_h, pad_top)), Some((out_w, pad_left))) =
                (crate::conv::out_size_and_pad(in_h, k_h, stride_h, dil_h, same), crate::conv::out_size_and_pad(in_w, k_w, stride_w, dil_w, same))
            else {
                continue;
            };
            if out_h == 0 || out_w == 0 {
                continue;
            }
            let in_c = if rng.below(3) == 0 { 1 + rng.below(40) } else { 1 + rng.below(9) };
            let mult = if depthwise { [1, 1, 2, 3, 4, 8][rng.below(6)] } else { 0 };
            let out_c = if depthwise { in_c * mult } else { 1 + rng.below(40) };
            let g = crate::conv::Window { batch: 1 + rng.below(2), in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left };
            let (multiplier, shift) = (0..out_c).map(|_| crate::quant::quantize_multiplier((1 + rng.below(1000)) as f64 * 2e-5)).unzip();
            let (min, max) = if rng.below(2) == 0 { (-128, 127) } else { (-128 + rng.below(100) as i32, 127 - rng.below(100) as i32) };
            let rq = Requant { multiplier, shift, out_zp: rng.below(256) as i32 - 128, min, max };
            return QConv { g, in_c, out_c, depth_multiplier: mult, in_zp: rng.below(256) as i32 - 128, w_zp: 0, rq };
        }
    }

    /// The int8 case `q` in uint8 terms: zero points and the output range shifted by
    /// 128, so the same values shifted by 128 give the same outputs shifted.
    fn in_uint8_terms(q: &QConv) -> QConv {
        QConv {
            in_zp: q.in_zp + 128,
            w_zp: q.w_zp + 128,
            rq: Requant { out_zp: q.rq.out_zp + 128, min: q.rq.min + 128, max: q.rq.max + 128, ..q.rq.clone() },
            ..q.clone()
        }
    }

    /// Runs the int8 case `q` in uint8 terms (values and zero points shifted by 128)
    /// through [`depthwise_u8`] and checks it against the int8 result `want`, shifted.
    fn depthwise_u8_matches(w: &[i8], input: &[i8], bias: &[i32], q: &QConv, want: &[i8], label: &str) {
        let qu = in_uint8_terms(q);
        let w_u: Vec<u8> = w.iter().map(|&v| v as u8 ^ 0x80).collect();
        let input_u: Vec<u8> = input.iter().map(|&v| v as u8 ^ 0x80).collect();
        let mut d = Depthwise::new_u8(&w_u, &qu);
        let mut got_u = vec![0u8; want.len()];
        depthwise_u8(&input_u, &mut d, Some(bias), &qu, &mut got_u);
        assert_eq!(got_u, want.iter().map(|&v| v as u8 ^ 0x80).collect::<Vec<_>>(), "uint8 {label}");
    }

    /// The per-tap definition: taps in the padding skipped, `(x - zp) * w`
    /// summed in int32 with the bias, requantized by [`Requant::apply`].
    fn conv_by_definition(input: &[i8], w: &[i8], bias: &[i32], q: &QConv) -> Vec<i8> {
        let g = &q.g;
        let mut out = Vec::new();
        for nb in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    for o in 0..q.out_c {
                        let mut acc = bias[o];
                        for ky in 0..g.k_h {
                            for kx in 0..g.k_w {
                                let (Some(iy), Some(ix)) = (
                                    (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h),
                                    (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w),
                                ) else {
                                    continue;
                                };
                                let px = ((nb * g.in_h + iy) * g.in_w + ix) * q.in_c;
                                if let Some(ci) = o.checked_div(q.depth_multiplier) {
                                    acc += (i32::from(input[px + ci]) - q.in_zp) * (i32::from(w[(ky * g.k_w + kx) * q.out_c + o]) - q.w_zp);
                                } else {
                                    for c in 0..q.in_c {
                                        acc += (i32::from(input[px + c]) - q.in_zp) * (i32::from(w[((o * g.k_h + ky) * g.k_w + kx) * q.in_c + c]) - q.w_zp);
                                    }
                                }
                            }
                        }
                        out.push(q.rq.apply(acc, o) as i8);
                    }
                }
            }
        }
        out
    }

    /// Batch-1 (and a few batch-2) int8 fully-connected layers as the CPU
    /// backend runs them: 1x1 "pixels" through [`conv_i8`], rounding once, with
    /// the starting values fixed at prepare ([`ConvScratch::fix_offsets`]) and
    /// recomputed per run; random zero points, scales (some above 1), biases and
    /// odd output counts, against the definition.
    #[test]
    fn fully_connected_rows_round_once_with_fixed_offsets() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        crate::level::each(|_| {
            for case in 0..120 {
                // Up to 200 outputs: a batch-1 row takes up to 8 panels of 16 per tile.
                let (batch, in_n, out_n) = (1 + usize::from(case % 7 == 0), 1 + rng.below(300), 1 + rng.below(if case % 3 == 0 { 200 } else { 70 }));
                let g = crate::conv::Window::rows(batch);
                let per_channel = case % 2 == 0;
                let real: Vec<f64> =
                    (0..if per_channel { out_n } else { 1 }).map(|_| (1 + rng.below(100_000)) as f64 / 1e5 * if case % 5 == 0 { 3.0 } else { 0.004 }).collect();
                let (multiplier, shift): (Vec<i32>, Vec<i32>) = real.iter().map(|&r| crate::quant::quantize_multiplier(r)).unzip();
                let (min, max) = if case % 4 == 0 { (-128 + rng.below(100) as i32, 127) } else { (-128, 127) };
                let rq = Requant { multiplier, shift, out_zp: rng.below(256) as i32 - 128, min, max };
                let w_zp = if case % 6 == 0 { rng.below(41) as i32 - 20 } else { 0 };
                let q = QConv { g, in_c: in_n, out_c: out_n, depth_multiplier: 0, in_zp: rng.below(256) as i32 - 128, w_zp, rq };
                let input: Vec<i8> = (0..batch * in_n).map(|_| rng.next() as i8).collect();
                let w: Vec<i8> = (0..out_n * in_n).map(|_| rng.next() as i8).collect();
                let bias: Vec<i32> = (0..out_n).map(|_| rng.below(200_000) as i32 - 100_000).collect();
                let want: Vec<i8> = (0..batch * out_n)
                    .map(|i| {
                        let (b, j) = (i / out_n, i % out_n);
                        let acc = (0..in_n).fold(bias[j], |a, kk| a + (i32::from(input[b * in_n + kk]) - q.in_zp) * (i32::from(w[j * in_n + kk]) - w_zp));
                        q.rq.apply_rounded(acc, j, Rounding::Single) as i8
                    })
                    .collect();
                let pk = QPacked::new(&w, out_n, in_n);
                let mut s = ConvScratch::with_rounding(&pk, &q.rq, Rounding::Single);
                let mut got = vec![0i8; want.len()];
                conv_i8(bytes_of(&input), &pk, Some(&bias), &q, &mut got, &mut s);
                assert_eq!(got, want, "case {case}: per run, batch {batch} in {in_n} out {out_n}");
                let mut s = ConvScratch::with_rounding(&pk, &q.rq, Rounding::Single);
                s.fix_offsets(&pk, Some(&bias), &q, false);
                for run in 0..2 {
                    let mut got = vec![0i8; want.len()];
                    // The bias passed is ignored once the offsets are fixed.
                    conv_i8(bytes_of(&input), &pk, None, &q, &mut got, &mut s);
                    assert_eq!(got, want, "case {case} run {run}: fixed, batch {batch} in {in_n} out {out_n}");
                }
            }
        });
    }

    /// [`FullyConnectedI8`] (on VNNI the in-place row tiles) against the
    /// definition under each vector level: odd and long rows (tails of 1-3
    /// bytes read by masks, up to 1,100 inputs), 1 to 40 panels, random zero
    /// points (weights' too), scales above and below 1, per-tensor and
    /// per-channel, clamps, a few rows per run, and repeated runs.
    #[test]
    fn fully_connected_rows_in_place_match_the_definition() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        crate::level::each(|_| {
            for case in 0..150 {
                let batch = [1, 1, 1, 2, 3][case % 5];
                let in_n = if case % 4 == 0 { 600 + rng.below(500) } else { 1 + rng.below(200) };
                let out_n = if case % 7 == 0 { 500 + rng.below(140) } else { 1 + rng.below(150) };
                let g = crate::conv::Window::rows(batch);
                let per_channel = case % 2 == 0;
                let real: Vec<f64> =
                    (0..if per_channel { out_n } else { 1 }).map(|_| (1 + rng.below(100_000)) as f64 / 1e5 * if case % 3 == 0 { 5.0 } else { 0.003 }).collect();
                let (multiplier, shift): (Vec<i32>, Vec<i32>) = real.iter().map(|&r| crate::quant::quantize_multiplier(r)).unzip();
                let (min, max) = if case % 4 == 1 { (-128 + rng.below(100) as i32, 127 - rng.below(100) as i32) } else { (-128, 127) };
                let rq = Requant { multiplier, shift, out_zp: rng.below(256) as i32 - 128, min, max };
                let w_zp = if case % 5 == 2 { rng.below(61) as i32 - 30 } else { 0 };
                let q = QConv { g, in_c: in_n, out_c: out_n, depth_multiplier: 0, in_zp: rng.below(256) as i32 - 128, w_zp, rq };
                let input: Vec<i8> = (0..batch * in_n).map(|_| if case % 9 == 0 { [-128, 127][rng.below(2)] } else { rng.next() as i8 }).collect();
                let w: Vec<i8> = (0..out_n * in_n).map(|_| if case % 9 == 0 { [-128, 127][rng.below(2)] } else { rng.next() as i8 }).collect();
                let bias: Option<Vec<i32>> = (case % 6 != 3).then(|| (0..out_n).map(|_| rng.below(400_000) as i32 - 200_000).collect());
                let want: Vec<i8> = (0..batch * out_n)
                    .map(|i| {
                        let (b, j) = (i / out_n, i % out_n);
                        let start = bias.as_ref().map_or(0, |v| v[j]);
                        let acc = (0..in_n).fold(start, |a, kk| a + (i32::from(input[b * in_n + kk]) - q.in_zp) * (i32::from(w[j * in_n + kk]) - w_zp));
                        q.rq.apply_rounded(acc, j, Rounding::Single) as i8
                    })
                    .collect();
                let pk = QPacked::new(&w, out_n, in_n);
                let mut fc = FullyConnectedI8::new(&pk, bias.as_deref(), q.clone());
                // The input at the end of its buffer: a read past a row's last byte would leave it.
                let exact: Vec<u8> = bytes_of(&input).to_vec();
                for run in 0..2 {
                    let mut got = vec![0i8; want.len() + 5];
                    fc.run(&exact, &pk, &mut got);
                    assert_eq!(&got[..want.len()], &want[..], "case {case} run {run}: batch {batch} in {in_n} out {out_n} w_zp {w_zp}");
                    assert_eq!(&got[want.len()..], &[0; 5], "case {case}: wrote past the output");
                }
            }
        });
    }

    #[test]
    fn conv_matches_the_definition_on_random_geometries() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        crate::level::each(|_| {
            // Block buffers shared by every case in turn, as a session's convolutions
            // share them: larger than a case needs and holding the last one's data.
            let mut shared = ConvBuffers::default();
            for case in 0..150 {
                let mut q = random_conv(&mut rng, false);
                // Some with a weight zero point (uint8 models have one; int8 rarely).
                if case % 3 == 0 {
                    q.w_zp = rng.below(41) as i32 - 20;
                }
                let g = q.g;
                let input: Vec<i8> = (0..g.batch * g.in_h * g.in_w * q.in_c).map(|_| rng.next() as i8).collect();
                let k = g.k_h * g.k_w * q.in_c;
                let extreme = case % 5 == 0;
                let w: Vec<i8> = (0..q.out_c * k).map(|_| if extreme { [-128, 127][rng.below(2)] } else { rng.next() as i8 }).collect();
                let bias: Vec<i32> = (0..q.out_c).map(|_| rng.below(20_000) as i32 - 10_000).collect();
                let want = conv_by_definition(&input, &w, &bias, &q);
                let pk = QPacked::new(&w, q.out_c, k);
                let mut s = ConvScratch::new(&pk, &q.rq);
                let mut got = vec![0i8; g.batch * g.out_h * g.out_w * q.out_c];
                conv_i8(bytes_of(&input), &pk, Some(&bias), &q, &mut got, &mut s);
                assert_eq!(got, want, "case {case}: {g:?} in_c {} out_c {} zp {} w_zp {}", q.in_c, q.out_c, q.in_zp, q.w_zp);
                // Through the shared buffers; every other case they are not fitted
                // beforehand (the kernel grows them).
                let mut elsewhere = ConvBuffers::default();
                let mut s = ConvScratch::sharing(&pk, &q.rq, false, if case % 2 == 0 { &mut shared } else { &mut elsewhere });
                let mut got = vec![0i8; got.len()];
                conv_i8_in(bytes_of(&input), &pk, Some(&bias), &q, &mut got, &mut s, &mut shared);
                assert_eq!(got, want, "shared buffers, case {case}");
                // The same convolution in uint8 terms: every value and zero point
                // shifted by 128, so the accumulators and the outputs (shifted) agree.
                let qu = in_uint8_terms(&q);
                let input_u: Vec<u8> = input.iter().map(|&x| x as u8 ^ 0x80).collect();
                // Packed as conv_u8 wants them: the uint8 weights (w + 128) back in int8.
                let pk_u = QPacked::new(&w, q.out_c, k);
                let mut s = ConvScratch::new_u8(&pk_u, &qu.rq);
                let mut got_u = vec![0u8; got.len()];
                conv_u8(&input_u, &pk_u, Some(&bias), &qu, &mut got_u, &mut s);
                assert_eq!(got_u, want.iter().map(|&v| v as u8 ^ 0x80).collect::<Vec<_>>(), "uint8 case {case}");
                let mut s = ConvScratch::sharing(&pk_u, &qu.rq, true, &mut shared);
                let mut got_u = vec![0u8; got.len()];
                conv_u8_in(&input_u, &pk_u, Some(&bias), &qu, &mut got_u, &mut s, &mut shared);
                assert_eq!(got_u, want.iter().map(|&v| v as u8 ^ 0x80).collect::<Vec<_>>(), "uint8 case {case}, shared buffers");
                assert!(shared.bytes() >= BLOCK_ROWS * (pk.kq + 4 * pk.n), "the shared buffers fit every convolution that used them");
            }
        });
    }

    /// The 1-D family on its own: `[1, 1, T, C]` rows and `[1, T, 1, C]`
    /// columns, filters up to 9 taps, dilation 1-4, strides 1-3, SAME and VALID,
    /// few and odd channel counts, input and weight zero points over the whole
    /// range (uint8 models have both away from the middle), per-channel scales.
    #[test]
    fn conv_1d_family_matches_the_definition() {
        let mut rng = Rng(0x5851_f42d_4c95_7f2d);
        crate::level::each(|_| {
            let mut shared = ConvBuffers::default();
            for case in 0..200 {
                let (t, k, stride, dil) = (1 + rng.below(300), 1 + rng.below(9), 1 + rng.below(3), 1 + rng.below(4));
                let same = rng.below(2) == 0;
                let Some((out_t, pad)) = crate::conv::out_size_and_pad(t, k, stride, dil, same) else { continue };
                if out_t == 0 {
                    continue;
                }
                let column = case % 3 == 0;
                let batch = 1 + rng.below(2);
                let g = if column {
                    crate::conv::Window {
                        batch,
                        in_h: t,
                        in_w: 1,
                        out_h: out_t,
                        out_w: 1,
                        k_h: k,
                        k_w: 1,
                        stride_h: stride,
                        stride_w: 1,
                        dil_h: dil,
                        dil_w: 1,
                        pad_top: pad,
                        pad_left: 0,
                    }
                } else {
                    crate::conv::Window {
                        batch,
                        in_h: 1,
                        in_w: t,
                        out_h: 1,
                        out_w: out_t,
                        k_h: 1,
                        k_w: k,
                        stride_h: 1,
                        stride_w: stride,
                        dil_h: 1,
                        dil_w: dil,
                        pad_top: 0,
                        pad_left: pad,
                    }
                };
                let in_c = if case % 4 == 0 { 1 + rng.below(48) } else { 1 + rng.below(9) };
                let out_c = 1 + rng.below(70);
                let (multiplier, shift) = (0..out_c).map(|_| crate::quant::quantize_multiplier((1 + rng.below(1000)) as f64 * 2e-5)).unzip();
                let rq = Requant { multiplier, shift, out_zp: rng.below(256) as i32 - 128, min: -128, max: 127 };
                let q = QConv { g, in_c, out_c, depth_multiplier: 0, in_zp: rng.below(256) as i32 - 128, w_zp: rng.below(256) as i32 - 128, rq };
                let input: Vec<i8> = (0..batch * t * in_c).map(|_| rng.next() as i8).collect();
                let w: Vec<i8> = (0..out_c * k * in_c).map(|_| rng.next() as i8).collect();
                let bias: Vec<i32> = (0..out_c).map(|_| rng.below(20_000) as i32 - 10_000).collect();
                let want = conv_by_definition(&input, &w, &bias, &q);
                let pk = QPacked::new(&w, out_c, k * in_c);
                let mut s = ConvScratch::sharing(&pk, &q.rq, false, &mut shared);
                let mut got = vec![0i8; want.len()];
                conv_i8_in(bytes_of(&input), &pk, Some(&bias), &q, &mut got, &mut s, &mut shared);
                assert_eq!(got, want, "case {case}: {g:?} in_c {in_c} out_c {out_c} zp {} w_zp {}", q.in_zp, q.w_zp);
                let qu = QConv {
                    in_zp: q.in_zp + 128,
                    w_zp: q.w_zp + 128,
                    rq: Requant { out_zp: q.rq.out_zp + 128, min: 0, max: 255, ..q.rq.clone() },
                    ..q.clone()
                };
                let input_u: Vec<u8> = input.iter().map(|&x| x as u8 ^ 0x80).collect();
                let mut s = ConvScratch::new_u8(&pk, &qu.rq);
                let mut got_u = vec![0u8; want.len()];
                conv_u8(&input_u, &pk, Some(&bias), &qu, &mut got_u, &mut s);
                assert_eq!(got_u, want.iter().map(|&v| v as u8 ^ 0x80).collect::<Vec<_>>(), "uint8 case {case}: {g:?} in_c {in_c} out_c {out_c}");
            }
        });
    }

    /// The VNNI tiles' shapes on their own (the random geometries above rarely
    /// reach them): 1 to 10 panels (chunks of 1-4 panels and their tails), 1-8
    /// pixels per tile in every output row, few-channel first layers (filter
    /// rows padded to groups of four), pointwise layers flattened into one row,
    /// fully-connected rows rounding once, dilation along either axis (a dilated
    /// row read as one segment per tap), weight zero points other than 0 (the
    /// per-pixel sums), int8 and uint8, under every vector level.
    #[test]
    fn conv_tiles_match_the_definition() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        crate::level::each(|_| {
            let mut shared = ConvBuffers::default();
            for case in 0..160 {
                let pointwise = case % 4 == 0;
                let (k_h, k_w) = if pointwise { (1, 1) } else { [(3, 3), (1, 5), (5, 1), (3, 1), (2, 2), (3, 3)][rng.below(6)] };
                let stride = if pointwise { 1 } else { 1 + rng.below(2) };
                let (dil_h, dil_w) = if pointwise { (1, 1) } else { ([1, 1, 2, 3][rng.below(4)], [1, 1, 2, 4][rng.below(4)]) };
                let (in_h, in_w) = (1 + rng.below(12), 1 + rng.below(20));
                let same = !pointwise && rng.below(2) == 0;
                let (Some((out_h, pad_top)), Some((out_w, pad_left))) =
                    (crate::conv::out_size_and_pad(in_h, k_h, stride, dil_h, same), crate::conv::out_size_and_pad(in_w, k_w, stride, dil_w, same))
                else {
                    continue;
                };
                if out_h == 0 || out_w == 0 {
                    continue;
                }
                let in_c = [1, 2, 3, 4, 5, 8, 16, 24, 32, 64][rng.below(10)];
                let out_c = 1 + rng.below(160);
                let batch = 1 + rng.below(2);
                let g = crate::conv::Window { batch, in_h, in_w, out_h, out_w, k_h, k_w, stride_h: stride, stride_w: stride, dil_h, dil_w, pad_top, pad_left };
                // Every seventh case with scales of 1 to 4 (a left shift before the
                // product); some with powers of two from 1/2 (no shift) to 2^-23 (the
                // most the merged rounding takes) or 2^-24 (past it): their products
                // sit on rounding ties.
                let scale = |r: usize| match case % 14 {
                    3 | 10 => 1.0 + r as f64 * 3e-3,
                    5 => 0.5f64.powi(1 + (r % 23) as i32),
                    12 => 0.5f64.powi(1 + (r % 24) as i32),
                    _ => (1 + r) as f64 * 2e-5,
                };
                let (multiplier, shift) = (0..out_c).map(|_| crate::quant::quantize_multiplier(scale(rng.below(1000)))).unzip();
                let (min, max) = if rng.below(2) == 0 { (-128, 127) } else { (-128 + rng.below(100) as i32, 127 - rng.below(100) as i32) };
                let rq = Requant { multiplier, shift, out_zp: rng.below(256) as i32 - 128, min, max };
                // A third of the cases with a weight zero point (in uint8 terms, other than 128).
                let w_zp = match (case % 3, rng.below(4)) {
                    (1, 0) => -128,
                    (1, 1) => 127,
                    (1, _) => rng.below(256) as i32 - 128,
                    _ => 0,
                };
                let q = QConv { g, in_c, out_c, depth_multiplier: 0, in_zp: rng.below(256) as i32 - 128, w_zp, rq };
                let k = k_h * k_w * in_c;
                let input: Vec<i8> = (0..batch * in_h * in_w * in_c).map(|_| rng.next() as i8).collect();
                let w: Vec<i8> = (0..out_c * k).map(|_| if case % 5 == 0 { [-128, 127][rng.below(2)] } else { rng.next() as i8 }).collect();
                let bias: Vec<i32> = (0..out_c).map(|_| rng.below(20_000) as i32 - 10_000).collect();
                let pk = QPacked::new(&w, out_c, k);
                // Pointwise layers also as fully-connected rows, which round once.
                let single = pointwise && case % 8 == 0 && w_zp == 0;
                let want = if single {
                    let pixels = batch * in_h * in_w;
                    (0..pixels * out_c)
                        .map(|i| {
                            let (p, o) = (i / out_c, i % out_c);
                            let acc = bias[o] + (0..in_c).map(|c| (i32::from(input[p * in_c + c]) - q.in_zp) * i32::from(w[o * in_c + c])).sum::<i32>();
                            q.rq.apply_rounded(acc, o, Rounding::Single) as i8
                        })
                        .collect()
                } else {
                    conv_by_definition(&input, &w, &bias, &q)
                };
                let mut s =
                    if single { ConvScratch::with_rounding(&pk, &q.rq, Rounding::Single) } else { ConvScratch::sharing(&pk, &q.rq, false, &mut shared) };
                let mut got = vec![0i8; want.len()];
                // Twice: the second run reuses the padded buffer and the padded-row weights.
                for run in 0..2 {
                    conv_i8_in(bytes_of(&input), &pk, Some(&bias), &q, &mut got, &mut s, &mut shared);
                    assert_eq!(got, want, "case {case} run {run}: {g:?} in_c {in_c} out_c {out_c} zp {} single {single}", q.in_zp);
                }
                if single {
                    continue;
                }
                let qu = in_uint8_terms(&q);
                let input_u: Vec<u8> = input.iter().map(|&x| x as u8 ^ 0x80).collect();
                let mut s = ConvScratch::sharing(&pk, &qu.rq, true, &mut shared);
                let mut got_u = vec![0u8; want.len()];
                conv_u8_in(&input_u, &pk, Some(&bias), &qu, &mut got_u, &mut s, &mut shared);
                assert_eq!(got_u, want.iter().map(|&v| v as u8 ^ 0x80).collect::<Vec<_>>(), "uint8 case {case}: {g:?} in_c {in_c} out_c {out_c}");
            }
        });
    }

    /// Every multiplier, channel count and geometry, with random values and with
    /// only the extremes (inputs -128/127 against zero points -128/127, weights
    /// -128/127), under every vector level.
    #[test]
    fn depthwise_matches_the_definition_on_random_geometries() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        crate::level::each(|_| {
            for case in 0..200 {
                let mut q = random_conv(&mut rng, true);
                let extreme = case % 4 == 0;
                if extreme {
                    q.in_zp = [-128, 127][rng.below(2)];
                }
                let g = q.g;
                let input: Vec<i8> =
                    (0..g.batch * g.in_h * g.in_w * q.in_c).map(|_| if extreme { [-128, 127][rng.below(2)] } else { rng.next() as i8 }).collect();
                let w: Vec<i8> = (0..g.k_h * g.k_w * q.out_c).map(|_| if extreme { [-128, 127][rng.below(2)] } else { rng.next() as i8 }).collect();
                let bias: Vec<i32> = (0..q.out_c).map(|_| rng.below(20_000) as i32 - 10_000).collect();
                if case % 3 == 1 {
                    q.w_zp = rng.below(256) as i32 - 128;
                }
                let want = conv_by_definition(&input, &w, &bias, &q);
                let mut d = Depthwise::new(&w, &q);
                let mut got = vec![0i8; g.batch * g.out_h * g.out_w * q.out_c];
                // Twice: the second run must not reuse the first one's lines.
                depthwise_i8(&vec![0u8; input.len()], &mut d, Some(&bias), &q, &mut got);
                depthwise_i8(bytes_of(&input), &mut d, Some(&bias), &q, &mut got);
                assert_eq!(got, want, "case {case}: {g:?} in_c {} x {} zp {} w_zp {}", q.in_c, q.depth_multiplier, q.in_zp, q.w_zp);
                // The same in uint8 terms (values and zero points shifted by 128).
                depthwise_u8_matches(&w, &input, &bias, &q, &want, &format!("case {case}"));
            }
        });
    }

    /// Depth multipliers up to 16 on one to three input channels, few channels
    /// at multiplier 1 and hundreds (not multiples of 16) at 1 or 2, filters up
    /// to 7x7 with strides up to 4: the AVX-512 kernel's two-pixel rows of at
    /// most 8 channels, its 16-channel blocks and their ragged ends, under every
    /// vector level, int8 and uint8.
    #[test]
    fn depthwise_multipliers_and_channel_counts_match_the_definition() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        crate::level::each(|_| {
            for case in 0..150 {
                let mut q = random_conv(&mut rng, true);
                if case % 4 == 0 {
                    let (k, stride) = (3 + rng.below(5), 1 + rng.below(4));
                    let same = rng.below(2) == 0;
                    let (in_h, in_w) = (k + rng.below(12), k + rng.below(40));
                    let (Some((out_h, pad_top)), Some((out_w, pad_left))) =
                        (crate::conv::out_size_and_pad(in_h, k, stride, 1, same), crate::conv::out_size_and_pad(in_w, k, stride, 1, same))
                    else {
                        continue;
                    };
                    q.g = crate::conv::Window {
                        in_h,
                        in_w,
                        out_h,
                        out_w,
                        k_h: k,
                        k_w: k,
                        stride_h: stride,
                        stride_w: stride,
                        dil_h: 1,
                        dil_w: 1,
                        pad_top,
                        pad_left,
                        ..q.g
                    };
                }
                let (in_c, mult) = match case % 3 {
                    0 => (1 + rng.below(3), [2, 4, 5, 8, 16][rng.below(5)]),
                    1 => (1 + rng.below(8), 1),
                    _ => (9 + rng.below(300), 1 + rng.below(2)),
                };
                let out_c = in_c * mult;
                let (multiplier, shift) = (0..out_c).map(|_| crate::quant::quantize_multiplier((1 + rng.below(1000)) as f64 * 2e-5)).unzip();
                q = QConv { in_c, out_c, depth_multiplier: mult, rq: Requant { multiplier, shift, ..q.rq }, ..q };
                let g = q.g;
                let input: Vec<i8> = (0..g.batch * g.in_h * g.in_w * in_c).map(|_| rng.next() as i8).collect();
                let w: Vec<i8> = (0..g.k_h * g.k_w * out_c).map(|_| rng.next() as i8).collect();
                let bias: Vec<i32> = (0..out_c).map(|_| rng.below(20_000) as i32 - 10_000).collect();
                let want = conv_by_definition(&input, &w, &bias, &q);
                let mut d = Depthwise::new(&w, &q);
                let mut got = vec![0i8; want.len()];
                depthwise_i8(bytes_of(&input), &mut d, Some(&bias), &q, &mut got);
                assert_eq!(got, want, "case {case}: {g:?} in_c {in_c} x {mult}");
                depthwise_u8_matches(&w, &input, &bias, &q, &want, &format!("case {case}: {g:?} in_c {in_c} x {mult}"));
            }
        });
    }

    /// One input channel (the `vpdpbusd` form on AVX-512): multipliers giving
    /// 1 to 40 output channels (two pixels per vector up to 8, ragged 16-lane
    /// blocks past), filters 1 to 9 wide (one to three groups of four taps),
    /// strides 1 to 3, row dilation (and column dilation, which takes the pair
    /// lines), batches of two, zero points at the ends of the range, weight
    /// zero points that push the weights out of int8; int8 and uint8, under
    /// every vector level.
    #[test]
    fn depthwise_one_channel_matches_the_definition() {
        let mut rng = Rng(0x0ddc_0ffe_e15e_a5e5);
        crate::level::each(|_| {
            for case in 0..240 {
                let (k_h, k_w) = (1 + rng.below(5), 1 + rng.below(9));
                let (stride_h, stride_w) = (1 + rng.below(3), 1 + rng.below(3));
                let dil_h = 1 + usize::from(case % 5 == 0);
                let dil_w = 1 + usize::from(case % 11 == 0);
                let (in_h, in_w) = (1 + rng.below(12), 1 + rng.below(45));
                let same = rng.below(3) != 0;
                let (Some((out_h, pad_top)), Some((out_w, pad_left))) =
                    (crate::conv::out_size_and_pad(in_h, k_h, stride_h, dil_h, same), crate::conv::out_size_and_pad(in_w, k_w, stride_w, dil_w, same))
                else {
                    continue;
                };
                if out_h == 0 || out_w == 0 {
                    continue;
                }
                let g =
                    crate::conv::Window { batch: 1 + rng.below(2), in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left };
                let mult = [1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 24, 32, 40][rng.below(14)];
                let (multiplier, shift) = (0..mult).map(|_| crate::quant::quantize_multiplier((1 + rng.below(1000)) as f64 * 2e-5)).unzip();
                let (min, max) = if rng.below(2) == 0 { (-128, 127) } else { (-128 + rng.below(100) as i32, 127 - rng.below(100) as i32) };
                let extreme = case % 4 == 0;
                let in_zp = if extreme { [-128, 127][rng.below(2)] } else { rng.below(256) as i32 - 128 };
                let w_zp = if case % 7 == 3 { rng.below(256) as i32 - 128 } else { 0 };
                let rq = Requant { multiplier, shift, out_zp: rng.below(256) as i32 - 128, min, max };
                let q = QConv { g, in_c: 1, out_c: mult, depth_multiplier: mult, in_zp, w_zp, rq };
                let input: Vec<i8> = (0..g.batch * in_h * in_w).map(|_| if extreme { [-128, 127][rng.below(2)] } else { rng.next() as i8 }).collect();
                let w: Vec<i8> = (0..k_h * k_w * mult).map(|_| if extreme { [-128, 127][rng.below(2)] } else { rng.next() as i8 }).collect();
                let bias: Vec<i32> = (0..mult).map(|_| rng.below(200_000) as i32 - 100_000).collect();
                let want = conv_by_definition(&input, &w, &bias, &q);
                let mut d = Depthwise::new(&w, &q);
                let mut got = vec![0i8; want.len()];
                // Twice: the second run must not see the first one's plane.
                depthwise_i8(&vec![0x55u8; input.len()], &mut d, Some(&bias), &q, &mut got);
                depthwise_i8(bytes_of(&input), &mut d, Some(&bias), &q, &mut got);
                assert_eq!(got, want, "case {case}: {g:?} x {mult} zp {in_zp} w_zp {w_zp}");
                depthwise_u8_matches(&w, &input, &bias, &q, &want, &format!("case {case}: {g:?} x {mult}"));
            }
        });
    }

    /// The requantization's edges through every depthwise row kernel: scales
    /// from far below one LSB to well above one (right shifts up to 31, left
    /// shifts up to 8, zero multipliers), biases up to 2^30 in size, narrow
    /// clamps, and filters 1 to 12
    /// columns wide (the unrolled column-pair counts and the general one).
    #[test]
    fn depthwise_requantization_extremes_match_the_definition() {
        let mut rng = Rng(0x51f1_5eed_0dd5_a11e);
        crate::level::each(|_| {
            for case in 0..160 {
                let mut q = random_conv(&mut rng, true);
                if case % 2 == 0 {
                    let k_w = 1 + rng.below(12);
                    let in_w = k_w + rng.below(20);
                    let Some((out_w, pad_left)) = crate::conv::out_size_and_pad(in_w, k_w, q.g.stride_w, 1, rng.below(2) == 0) else {
                        continue;
                    };
                    q.g = crate::conv::Window { in_w, out_w, k_w, dil_w: 1, pad_left, ..q.g };
                }
                let (in_c, mult) = match case % 4 {
                    0 => (1 + rng.below(3), [2, 4, 8, 16][rng.below(4)]),
                    1 => (1 + rng.below(8), 1),
                    _ => (9 + rng.below(60), 1 + rng.below(2)),
                };
                let out_c = in_c * mult;
                let left = case % 3 == 0;
                let (multiplier, shift) = (0..out_c)
                    .map(|_| {
                        let e = if left { rng.below(9) as i32 } else { -(rng.below(36) as i32) };
                        crate::quant::quantize_multiplier((1.0 + rng.below(1000) as f64 / 1000.0) * 2f64.powi(e - 1))
                    })
                    .unzip();
                let (min, max) = if rng.below(2) == 0 { (-128, 127) } else { (-128 + rng.below(120) as i32, 127 - rng.below(120) as i32) };
                q = QConv { in_c, out_c, depth_multiplier: mult, rq: Requant { multiplier, shift, min, max, ..q.rq }, ..q };
                let g = q.g;
                let input: Vec<i8> = (0..g.batch * g.in_h * g.in_w * in_c).map(|_| rng.next() as i8).collect();
                let w: Vec<i8> = (0..g.k_h * g.k_w * out_c).map(|_| rng.next() as i8).collect();
                // Large biases only where no left shift could overflow the
                // definition's (checked) arithmetic.
                let big = !left && rng.below(3) == 0;
                let bias: Vec<i32> = (0..out_c).map(|_| if big { (rng.next() as i32) >> 1 } else { rng.below(2_000_000) as i32 - 1_000_000 }).collect();
                let want = conv_by_definition(&input, &w, &bias, &q);
                let mut d = Depthwise::new(&w, &q);
                let mut got = vec![0i8; want.len()];
                depthwise_i8(bytes_of(&input), &mut d, Some(&bias), &q, &mut got);
                assert_eq!(got, want, "case {case}: {g:?} in_c {in_c} x {mult} shifts {:?}", q.rq.shift);
                depthwise_u8_matches(&w, &input, &bias, &q, &want, &format!("case {case}: {g:?} in_c {in_c} x {mult}"));
            }
        });
    }

    /// Quantized ADD and SUB of 8-bit operands, every path (AVX2, per-width
    /// builds) against [`crate::quant::AddSub::apply`]: random scales over three
    /// decades, zero points and clamps over the whole range, every value pair.
    #[test]
    fn add_sub_8bit_matches_the_definition() {
        use crate::quant::{add_sub_i8, add_sub_u8, AddSub, Scale};
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let all: Vec<(u8, u8)> = (0..=255u8).flat_map(|x| (0..=255u8).map(move |y| (x, y))).collect();
        crate::level::each(|_| {
            for case in 0..32 {
                let (mut s1, mut s2, mut so) = [0.001, 0.01, 0.1].map(|s| s * (0.5 + rng.below(1000) as f64 / 1000.0)).into();
                // Equal input scales (a rescale by exactly one half: no right
                // shift), scales far apart (past the merged 32-bit rescale's
                // shifts) and an output scale a power of two times the inputs'.
                match case % 8 {
                    3 => s2 = s1,
                    6 => s1 = s2 * 1e-5,
                    7 => so = s1.max(s2) * 4.0,
                    _ => {}
                }
                let twice_max = 2.0 * f64::max(s1, s2);
                let (lo, hi) = if case % 3 == 0 { (-100 + rng.below(50) as i32, 50 + rng.below(77) as i32) } else { (-128, 127) };
                // A shorter left shift now and then takes the AVX-512 kernel's
                // 64-bit rescale instead of its 32-bit split one.
                let left_shift = if case % 6 == 5 { 8 } else { 20 };
                let p = AddSub {
                    zp: (rng.below(256) as i32 - 128, rng.below(256) as i32 - 128),
                    out_zp: rng.below(256) as i32 - 128,
                    left_shift,
                    scale: (Scale::new(s1 / twice_max), Scale::new(s2 / twice_max)),
                    out_scale: Scale::new(twice_max / (f64::from(1u32 << left_shift) * so)),
                    sign: if case % 2 == 0 { 1 } else { -1 },
                    min: lo,
                    max: hi,
                };
                // Lengths not a multiple of 8 leave a scalar tail.
                let len = all.len() - case;
                let (a, b): (Vec<u8>, Vec<u8>) = all[..len].iter().copied().unzip();
                let (ai, bi): (Vec<i8>, Vec<i8>) = (a.iter().map(|&v| v as i8).collect(), b.iter().map(|&v| v as i8).collect());
                let mut got = vec![0i8; len];
                add_sub_i8(&ai, &bi, &p, &mut got);
                for (i, &g) in got.iter().enumerate() {
                    assert_eq!(i32::from(g), p.apply(i32::from(ai[i]), i32::from(bi[i])), "int8 case {case} element {i}");
                }
                let pu = AddSub { zp: (p.zp.0 + 128, p.zp.1 + 128), out_zp: p.out_zp + 128, min: lo + 128, max: hi + 128, ..p };
                let mut got = vec![0u8; len];
                add_sub_u8(&a, &b, &pu, &mut got);
                for (i, &g) in got.iter().enumerate() {
                    assert_eq!(i32::from(g), pu.apply(i32::from(a[i]), i32::from(b[i])), "uint8 case {case} element {i}");
                }
            }
        });
    }

    fn bytes_of(v: &[i8]) -> &[u8] {
        // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is valid for both.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len()) }
    }

    #[test]
    fn available_lists_every_runnable_kernel() {
        let all = QIsa::available();
        assert_eq!(all.first(), Some(&QIsa::detect()));
        assert_eq!(all.last(), Some(&QIsa::portable()));
        assert_eq!(all.contains(&QIsa(QKind::Vnni)), has_vnni());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(all.contains(&QIsa(QKind::Avx2)), crate::level::cpu_avx2());
        #[cfg(not(target_arch = "x86_64"))]
        assert!(!all.contains(&QIsa(QKind::Avx2)));
        assert_eq!(all.contains(&QIsa(QKind::Neon)), cfg!(target_arch = "aarch64"));
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
