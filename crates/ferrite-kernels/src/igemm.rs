//! Register-blocked f32 GEMM micro-kernels, used for convolutions (as an
//! implicit GEMM over per-tap input rows) and fully-connected layers.
//!
//! `out[m, n] = clamp(bias[n] + sum_t sum_k a[t][m][k] * b[t][k][n])`
//!
//! Each output row `m` reads, for every tap `t`, a row of `k` contiguous inputs
//! through a pointer: a convolution's row for (pixel, tap) is the input pixel the
//! tap lands on, or a shared zero row in the padding, so no im2col buffer is
//! built. Weights are packed once into panels of `nr` output channels:
//! `[panel][tap][k][nr]`, zero-padded past the last channel.
//!
//! The kernel is chosen at run time from the CPU's features: AVX-512F (8x32
//! tiles), AVX2+FMA (6x16), or a portable fallback (4x8). Results differ from a
//! naive sum only by float reassociation; they are identical for any split of
//! the rows across threads, since each output element is summed in one order.

use crate::Clamp;

/// Instruction set a kernel was built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// x86-64 AVX-512F.
    Avx512,
    /// x86-64 AVX-512F with 16-channel panels and taller tiles, for layers with
    /// at most 16 output channels.
    Avx512Narrow,
    /// x86-64 AVX2 + FMA.
    Avx2,
    /// Any CPU.
    Portable,
}

impl Isa {
    /// The best instruction set this CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// The kernel to use for a layer with `n` output channels: on AVX-512 machines,
    /// layers with at most 16 channels use 16-wide panels (12 rows of one vector),
    /// which compute half as much padding as a 32-wide panel would.
    pub fn for_channels(n: usize) -> Isa {
        let best = Isa::detect();
        if best == Isa::Avx512 && n <= 16 {
            return Isa::Avx512Narrow;
        }
        best
    }

    /// Output channels per packed panel.
    pub fn nr(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx512Narrow | Isa::Avx2 => 16,
            Isa::Portable => 8,
        }
    }

    /// Output rows per tile.
    pub fn mr(self) -> usize {
        match self {
            Isa::Avx512 => 8,
            Isa::Avx512Narrow => 12,
            Isa::Avx2 => 6,
            Isa::Portable => 4,
        }
    }
}

/// Packs weights `w[n][t][k]` (OHWI with taps = kh*kw) into `[panel][t][k][nr]`.
pub fn pack_b(w: &[f32], n: usize, taps: usize, k: usize, nr: usize) -> Vec<f32> {
    let panels = n.div_ceil(nr);
    let mut p = vec![0.0f32; panels * taps * k * nr];
    for o in 0..n {
        let (panel, j) = (o / nr, o % nr);
        for t in 0..taps {
            for kk in 0..k {
                p[((panel * taps + t) * k + kk) * nr + j] = w[(o * taps + t) * k + kk];
            }
        }
    }
    p
}

/// Bias padded to whole panels (zeros where absent).
pub fn pad_bias(bias: Option<&[f32]>, n: usize, nr: usize) -> Vec<f32> {
    let mut b = vec![0.0f32; n.div_ceil(nr) * nr];
    if let Some(src) = bias {
        b[..n].copy_from_slice(&src[..n]);
    }
    b
}

/// One tile: `rows` (<= mr) output rows starting at `out`, spaced `out_stride`
/// floats apart, `cols` (<= nr) valid columns of one panel.
pub struct Tile<'a> {
    /// Per tap, per row: pointer to `k` inputs (a zero row in the padding). Length taps*mr.
    pub a: &'a [*const f32],
    /// The packed panel `[t][k][nr]`.
    pub b: &'a [f32],
    /// The panel's bias, `nr` long.
    pub bias: &'a [f32],
    /// Inner size.
    pub k: usize,
    /// Taps.
    pub taps: usize,
    /// Valid rows.
    pub rows: usize,
    /// Valid columns.
    pub cols: usize,
}

/// Computes one tile into `out` (row r, column j at `out[r * out_stride + j]`).
///
/// # Safety
/// Every pointer in `tile.a` must be valid for `tile.k` reads; `tile.b` must hold
/// `taps * k * nr` floats; `out` must be valid for writes at every
/// `r * out_stride + j` with `r < rows`, `j < cols`.
pub unsafe fn run_tile(isa: Isa, tile: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` came from `Isa::detect`, so the CPU has AVX-512F; pointer
        // validity is the caller's contract.
        Isa::Avx512 => unsafe { x86::tile_avx512(tile, clamp, out, out_stride) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above (Avx512Narrow is only chosen with AVX-512F).
        Isa::Avx512Narrow => unsafe { x86::tile_avx512_narrow(tile, clamp, out, out_stride) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX2 + FMA.
        Isa::Avx2 => unsafe { x86::tile_avx2(tile, clamp, out, out_stride) },
        // SAFETY: pointer validity is the caller's contract.
        _ => unsafe { tile_portable(tile, clamp, out, out_stride) },
    }
}

/// # Safety
/// See [`run_tile`].
unsafe fn tile_portable(tile: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    const MR: usize = 4;
    const NR: usize = 8;
    let mut acc = [[0.0f32; NR]; MR];
    for row in acc.iter_mut() {
        row.copy_from_slice(&tile.bias[..NR]);
    }
    for t in 0..tile.taps {
        let bt = &tile.b[t * tile.k * NR..(t + 1) * tile.k * NR];
        for (r, row) in acc.iter_mut().enumerate().take(tile.rows) {
            let a = tile.a[t * MR + r];
            for kk in 0..tile.k {
                // SAFETY: `a` is valid for `k` reads (caller contract).
                let av = unsafe { *a.add(kk) };
                for (c, &bv) in row.iter_mut().zip(&bt[kk * NR..kk * NR + NR]) {
                    *c += av * bv;
                }
            }
        }
    }
    for (r, row) in acc.iter().enumerate().take(tile.rows) {
        for (j, &v) in row.iter().enumerate().take(tile.cols) {
            // SAFETY: in bounds by the caller's contract.
            unsafe { *out.add(r * out_stride + j) = clamp.apply(v) };
        }
    }
}

/// Conv or FC weights prepacked for one instruction set.
#[derive(Debug, Clone)]
pub struct Packed {
    /// Kernel it was packed for.
    pub isa: Isa,
    /// Output channels.
    pub n: usize,
    /// Taps (kh * kw; 1 for fully-connected).
    pub taps: usize,
    /// Inner size per tap (input channels).
    pub k: usize,
    /// `[panel][tap][k][nr]`.
    pub b: Vec<f32>,
    /// Bias padded to whole panels.
    pub bias: Vec<f32>,
    /// A row of `k` zeros, read in place of inputs in the padding.
    pub zero: Vec<f32>,
    /// Filter columns merged into each tap row (1: one tap per filter position).
    /// With `kw` merged, a tap is a whole filter row and `k = kw * in_c`: the
    /// window's row is contiguous in a zero-padded copy of the input row, so
    /// convolutions with few input channels run long inner loops.
    pub merged_kw: usize,
}

/// Per-thread scratch of [`conv2d`]: row pointers, and zero-padded copies of the
/// input rows for merged filter rows.
#[derive(Debug, Clone, Default)]
pub struct ConvScratch {
    ptrs: Vec<usize>,
    lines: Vec<f32>,
}

impl Packed {
    /// Packs OHWI weights `w[n][taps][k]` and an optional bias.
    pub fn new(isa: Isa, w: &[f32], bias: Option<&[f32]>, n: usize, taps: usize, k: usize) -> Packed {
        let nr = isa.nr();
        Packed { isa, n, taps, k, b: pack_b(w, n, taps, k, nr), bias: pad_bias(bias, n, nr), zero: vec![0.0; k.max(1)], merged_kw: 1 }
    }

    /// Packs OHWI weights `[n][kh][kw][c]` for [`conv2d`] with each filter row merged
    /// into one tap of `kw * c` inputs (the same memory layout as per-tap packing).
    pub fn with_merged_rows(isa: Isa, w: &[f32], bias: Option<&[f32]>, n: usize, kh: usize, kw: usize, c: usize) -> Packed {
        Packed { merged_kw: kw.max(1), ..Packed::new(isa, w, bias, n, kh, kw * c) }
    }

    /// Repacks new weights into the same layout (non-constant weights, each run).
    pub fn repack(&mut self, w: &[f32], bias: Option<&[f32]>) {
        let nr = self.isa.nr();
        for o in 0..self.n {
            let (panel, j) = (o / nr, o % nr);
            for t in 0..self.taps {
                for kk in 0..self.k {
                    self.b[((panel * self.taps + t) * self.k + kk) * nr + j] = w[(o * self.taps + t) * self.k + kk];
                }
            }
            self.bias[o] = bias.map_or(0.0, |b| b[o]);
        }
    }

    /// Scratch for calls of [`conv2d`] with this geometry.
    pub fn scratch(&self, g: &crate::conv::Window) -> ConvScratch {
        let mr = self.isa.mr();
        let lines = if self.merged_kw > 1 { self.taps * padded_width(g) * (self.k / self.merged_kw) } else { 0 };
        ConvScratch { ptrs: vec![0; g.out_w.div_ceil(mr) * mr * self.taps], lines: vec![0.0; lines] }
    }

    fn tile<'a>(&'a self, a: &'a [*const f32], panel: usize, rows: usize) -> Tile<'a> {
        let nr = self.isa.nr();
        Tile {
            a,
            b: &self.b[panel * self.taps * self.k * nr..],
            bias: &self.bias[panel * nr..],
            k: self.k,
            taps: self.taps,
            rows,
            cols: nr.min(self.n - panel * nr),
        }
    }
}

/// Width in pixels of an input row padded on both sides so that every output
/// column's window lies inside it.
fn padded_width(g: &crate::conv::Window) -> usize {
    (g.pad_left + g.in_w).max((g.out_w.max(1) - 1) * g.stride_w + (g.k_w - 1) * g.dil_w + 1)
}

/// Convolution as implicit GEMM over output rows `rows` (row = batch * out_h + oy);
/// `out` holds exactly those rows, so threads can each own a contiguous chunk.
/// `scratch` comes from [`Packed::scratch`] for this geometry; it stores the per-tap
/// input row pointers (as addresses, so kernels holding it stay `Send`).
/// Returns false, writing nothing, if a slice is too short for the geometry.
pub fn conv2d(
    input: &[f32],
    pk: &Packed,
    g: &crate::conv::Window,
    clamp: Clamp,
    out: &mut [f32],
    rows: std::ops::Range<usize>,
    scratch: &mut ConvScratch,
) -> bool {
    let (mr, nr, n) = (pk.isa.mr(), pk.isa.nr(), pk.n);
    let merged = pk.merged_kw > 1;
    let c = pk.k / pk.merged_kw;
    let blocks = g.out_w.div_ceil(mr);
    let first_row = rows.start;
    let width = padded_width(g);
    if input.len() < g.batch * g.in_h * g.in_w * c
        || out.len() < rows.len() * g.out_w * n
        || scratch.ptrs.len() < blocks * mr * pk.taps
        || (merged && (pk.merged_kw != g.k_w || pk.taps != g.k_h || g.dil_w != 1 || scratch.lines.len() < pk.taps * width * c))
        || (!merged && pk.taps != g.k_h * g.k_w)
        || rows.end > g.batch * g.out_h
    {
        return false;
    }
    if !merged {
        return conv2d_pixels(input, pk, g, clamp, out, first_row * g.out_w..rows.end * g.out_w, scratch);
    }
    let zero = pk.zero.as_ptr() as usize;
    let ConvScratch { ptrs: scratch, lines } = scratch;
    // Merged filter rows: one output row at a time, over zero-padded copies of the
    // input rows its filter rows read (every column's window is then kw * c
    // contiguous floats).
    for row in rows {
        let (b, oy) = (row / g.out_h, row % g.out_h);
        for ky in 0..g.k_h {
            let line = &mut lines[ky * width * c..(ky + 1) * width * c];
            line.fill(0.0);
            if let Some(y) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) {
                let src = &input[(b * g.in_h + y) * g.in_w * c..][..g.in_w * c];
                line[g.pad_left * c..(g.pad_left + g.in_w) * c].copy_from_slice(src);
            }
        }
        // Row pointers for every pixel block of this output row, per filter row.
        for blk in 0..blocks {
            for ky in 0..g.k_h {
                let iy = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h);
                for r in 0..mr {
                    let ox = blk * mr + r;
                    scratch[(blk * pk.taps + ky) * mr + r] = match iy {
                        Some(_) if ox < g.out_w => lines[(ky * width + ox * g.stride_w) * c..].as_ptr() as usize,
                        _ => zero,
                    };
                }
            }
        }
        let out_row = ((b * g.out_h + oy - first_row) * g.out_w) * n;
        for panel in 0..n.div_ceil(nr) {
            for blk in 0..blocks {
                let a_words = &scratch[blk * pk.taps * mr..(blk + 1) * pk.taps * mr];
                // SAFETY: `*const f32` and `usize` have the same size and layout; every
                // word was written above from a pointer into `lines` or `zero`.
                let a: &[*const f32] = unsafe { std::slice::from_raw_parts(a_words.as_ptr().cast(), a_words.len()) };
                let rows_here = mr.min(g.out_w - blk * mr);
                let tile = pk.tile(a, panel, rows_here);
                // SAFETY: each row pointer addresses k floats: a window inside a padded
                // line (its width covers every column's window) or the zero row (k long);
                // the tile writes rows < rows_here and columns < cols of this panel,
                // inside `out` (checked size).
                unsafe { run_tile(pk.isa, &tile, clamp, out.as_mut_ptr().add(out_row + blk * mr * n + panel * nr), n) };
            }
        }
    }
    true
}

/// [`conv2d`] outside the merged-row mode, over output pixels `pixels` (pixel =
/// (batch * out_h + oy) * out_w + ox), which `out` holds: tiles of mr pixels run
/// across output rows, in groups swept per weight panel, so maps not a multiple of
/// the tile height leave no partial tiles. A 1x1 stride-1 convolution is a plain
/// GEMM over the pixels. Callers start chunks on multiples of `mr` pixels, so the
/// tiles (and the kernel variant each pixel takes) do not depend on the chunking.
/// Returns false, writing nothing, if a slice is too short for the geometry.
pub fn conv2d_pixels(
    input: &[f32],
    pk: &Packed,
    g: &crate::conv::Window,
    clamp: Clamp,
    out: &mut [f32],
    pixels: std::ops::Range<usize>,
    scratch: &mut ConvScratch,
) -> bool {
    let (mr, nr, n, c) = (pk.isa.mr(), pk.isa.nr(), pk.n, pk.k);
    let blocks = g.out_w.div_ceil(mr).max(1);
    let (start, end) = (pixels.start, pixels.end);
    if pk.merged_kw != 1
        || pk.taps != g.k_h * g.k_w
        || input.len() < g.batch * g.in_h * g.in_w * c
        || out.len() < (end - start) * n
        || scratch.ptrs.len() < blocks * mr * pk.taps
        || end > g.batch * g.out_h * g.out_w
    {
        return false;
    }
    if is_flat(pk, g) {
        return input.get(start * c..).is_some_and(|x| gemm_rows(x, end - start, pk, clamp, out));
    }
    let zero = pk.zero.as_ptr() as usize;
    let scratch = &mut scratch.ptrs;
    // Per-tap implicit GEMM over the chunk's pixels in groups of `blocks` tiles:
    // tiles span output rows (no partial tiles on maps not a multiple of mr
    // wide), and each panel's weights sweep a whole group before the next.
    let mut p = start;
    while p < end {
        let group = (blocks * mr).min(end - p);
        let tiles = group.div_ceil(mr);
        for blk in 0..tiles {
            for r in 0..mr {
                let px = p + blk * mr + r;
                let (b, oy, ox) = (px / (g.out_h * g.out_w), px / g.out_w % g.out_h, px % g.out_w);
                for ky in 0..g.k_h {
                    let iy = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h && px < end);
                    for kx in 0..g.k_w {
                        let ix = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w);
                        scratch[(blk * pk.taps + ky * g.k_w + kx) * mr + r] = match (iy, ix) {
                            (Some(y), Some(x)) => input[((b * g.in_h + y) * g.in_w + x) * c..].as_ptr() as usize,
                            _ => zero,
                        };
                    }
                }
            }
        }
        for panel in 0..n.div_ceil(nr) {
            for blk in 0..tiles {
                let a_words = &scratch[blk * pk.taps * mr..(blk + 1) * pk.taps * mr];
                // SAFETY: `*const f32` and `usize` have the same size and layout; every
                // word was written above from a pointer into `input` or `zero`.
                let a: &[*const f32] = unsafe { std::slice::from_raw_parts(a_words.as_ptr().cast(), a_words.len()) };
                let rows_here = mr.min(group - blk * mr);
                let tile = pk.tile(a, panel, rows_here);
                // SAFETY: each row pointer addresses k floats (a full pixel inside
                // `input`, checked size, or the zero row); the tile writes rows <
                // rows_here and columns < cols of this panel, inside `out` (checked size).
                unsafe { run_tile(pk.isa, &tile, clamp, out.as_mut_ptr().add((p - start + blk * mr) * n + panel * nr), n) };
            }
        }
        p += group;
    }
    true
}

/// Whether [`conv2d`] runs this geometry as one flat GEMM over pixels.
fn is_flat(pk: &Packed, g: &crate::conv::Window) -> bool {
    pk.merged_kw == 1
        && g.k_h == 1
        && g.k_w == 1
        && g.stride_h == 1
        && g.stride_w == 1
        && g.pad_top == 0
        && g.pad_left == 0
        && g.in_w == g.out_w
        && g.in_h == g.out_h
}

/// Fully-connected over `batch` rows of `pk.k` inputs. False if a slice is too short.
pub fn fully_connected(input: &[f32], batch: usize, pk: &Packed, clamp: Clamp, out: &mut [f32]) -> bool {
    let (k, n) = (pk.k, pk.n);
    if pk.taps != 1 || input.len() < batch * k || out.len() < batch * n {
        return false;
    }
    // One row: up to four panels per pass over the input (more weight loads per
    // broadcast input; the layer is bound by streaming its weights).
    #[cfg(target_arch = "x86_64")]
    if batch == 1 && pk.isa == Isa::Avx512 {
        let nr = pk.isa.nr();
        let panels = n.div_ceil(nr);
        let mut p = 0;
        while p < panels {
            let b = |q: usize| pk.tile(&[], q, 1).b.as_ptr();
            let bias = |q: usize| pk.tile(&[], q, 1).bias.as_ptr();
            let cols = |q: usize| pk.tile(&[], q, 1).cols;
            let o = out.as_mut_ptr().wrapping_add(p * nr);
            // SAFETY: AVX-512F (the packing's ISA was detected on this CPU); the input
            // holds k floats (checked), each panel k * 32 floats and 32 of bias, and
            // `out` the panels' columns (checked size).
            unsafe {
                match panels - p {
                    1 => x86::gemv_panels_avx512::<1>(input.as_ptr(), k, [b(p)], [bias(p)], [cols(p)], clamp, o),
                    2 => x86::gemv_panels_avx512::<2>(input.as_ptr(), k, [b(p), b(p + 1)], [bias(p), bias(p + 1)], [cols(p), cols(p + 1)], clamp, o),
                    3 => x86::gemv_panels_avx512::<3>(
                        input.as_ptr(),
                        k,
                        [b(p), b(p + 1), b(p + 2)],
                        [bias(p), bias(p + 1), bias(p + 2)],
                        [cols(p), cols(p + 1), cols(p + 2)],
                        clamp,
                        o,
                    ),
                    _ => x86::gemv_panels_avx512::<4>(
                        input.as_ptr(),
                        k,
                        [b(p), b(p + 1), b(p + 2), b(p + 3)],
                        [bias(p), bias(p + 1), bias(p + 2), bias(p + 3)],
                        [cols(p), cols(p + 1), cols(p + 2), cols(p + 3)],
                        clamp,
                        o,
                    ),
                }
            }
            p += 4;
        }
        return true;
    }
    gemm_rows(input, batch, pk, clamp, out)
}

/// The rows of a fully-connected product (or a 1x1 convolution's pixels) through
/// the GEMM tiles; tiles start at row 0, so callers splitting rows over threads
/// split on multiples of the tile height. False if a slice is too short.
fn gemm_rows(input: &[f32], batch: usize, pk: &Packed, clamp: Clamp, out: &mut [f32]) -> bool {
    let (mr, nr, k, n) = (pk.isa.mr(), pk.isa.nr(), pk.k, pk.n);
    if pk.taps != 1 || input.len() < batch * k || out.len() < batch * n {
        return false;
    }
    // Room for the tallest tile (mr <= 16).
    let mut ptrs = [std::ptr::null::<f32>(); 16];
    for b0 in (0..batch).step_by(mr) {
        let rows = mr.min(batch - b0);
        for (r, p) in ptrs.iter_mut().enumerate().take(mr) {
            *p = if r < rows { input[(b0 + r) * k..].as_ptr() } else { pk.zero.as_ptr() };
        }
        for panel in 0..n.div_ceil(nr) {
            let tile = pk.tile(&ptrs[..mr], panel, rows);
            // SAFETY: row pointers address k floats of `input` or the zero row (k long);
            // writes stay within rows x cols of `out` (checked size).
            unsafe { run_tile(pk.isa, &tile, clamp, out.as_mut_ptr().add(b0 * n + panel * nr), n) };
        }
    }
    true
}

#[cfg(target_arch = "x86_64")]
mod x86 {
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
            c[0][p] = [_mm512_loadu_ps(bias[p]), _mm512_loadu_ps(bias[p].add(16))];
        }
        let mut kk = 0;
        while kk + 2 <= k {
            for p in 0..P {
                _mm_prefetch::<_MM_HINT_T0>(b[p].add((kk + 16) * 32) as *const i8);
            }
            for u in 0..2 {
                let x = _mm512_set1_ps(*a.add(kk + u));
                for p in 0..P {
                    let w = b[p].add((kk + u) * 32);
                    c[u][p][0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w), c[u][p][0]);
                    c[u][p][1] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w.add(16)), c[u][p][1]);
                }
            }
            kk += 2;
        }
        if kk < k {
            let x = _mm512_set1_ps(*a.add(kk));
            for p in 0..P {
                let w = b[p].add(kk * 32);
                c[0][p][0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w), c[0][p][0]);
                c[0][p][1] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w.add(16)), c[0][p][1]);
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
                    _mm512_mask_storeu_ps(o.add(16 * v), m, r);
                }
            }
            o = o.add(cols[p]);
        }
    }

    /// # Safety
    /// CPU must support AVX-512F; see `run_tile` for pointers.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn tile_avx512(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
        // Fewer valid rows compute fewer rows: a batch-1 fully-connected layer is
        // then bound by weight loads, not by FMAs on padding rows.
        match t.rows {
            1 => tile_avx512_r::<1>(t, clamp, out, out_stride),
            2 => tile_avx512_r::<2>(t, clamp, out, out_stride),
            3 | 4 => tile_avx512_r::<4>(t, clamp, out, out_stride),
            _ => tile_avx512_r::<8>(t, clamp, out, out_stride),
        }
    }

    /// # Safety
    /// CPU must support AVX-512F; see `run_tile` for pointers.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn tile_avx512_narrow(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
        match t.rows {
            1 => tile_avx512_narrow_r::<1>(t, clamp, out, out_stride),
            2 => tile_avx512_narrow_r::<2>(t, clamp, out, out_stride),
            3 | 4 => tile_avx512_narrow_r::<4>(t, clamp, out, out_stride),
            5..=8 => tile_avx512_narrow_r::<8>(t, clamp, out, out_stride),
            _ => tile_avx512_narrow_r::<12>(t, clamp, out, out_stride),
        }
    }

    /// `R` rows of one 16-channel vector: per k, one weight load, `R` broadcasts and
    /// `R` FMAs (with one or two rows, four partial sums hide the FMA latency).
    // The loops index several register arrays in step; iterators would obscure that.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile_avx512_narrow_r<const R: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
        const MR: usize = 12;
        const NR: usize = 16;
        let b0 = _mm512_loadu_ps(t.bias.as_ptr());
        let mut c = [b0; R];
        if R <= 2 {
            const U: usize = 4;
            let z = _mm512_setzero_ps();
            let mut p = [[z; R]; U];
            p[0] = c;
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
            for r in 0..R {
                c[r] = _mm512_add_ps(_mm512_add_ps(p[0][r], p[1][r]), _mm512_add_ps(p[2][r], p[3][r]));
            }
        } else {
            for tap in 0..t.taps {
                let a = &t.a[tap * MR..tap * MR + R];
                let mut bp = t.b.as_ptr().add(tap * t.k * NR);
                for kk in 0..t.k {
                    let w = _mm512_loadu_ps(bp);
                    for r in 0..R {
                        c[r] = _mm512_fmadd_ps(_mm512_set1_ps(*a[r].add(kk)), w, c[r]);
                    }
                    bp = bp.add(NR);
                }
            }
        }
        let lo = _mm512_set1_ps(clamp.min);
        let hi = _mm512_set1_ps(clamp.max);
        let m: __mmask16 = if t.cols >= 16 { 0xffff } else { ((1u32 << t.cols) - 1) as u16 };
        for r in 0..t.rows {
            _mm512_mask_storeu_ps(out.add(r * out_stride), m, _mm512_min_ps(_mm512_max_ps(c[r], lo), hi));
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn tile_avx512_r<const R: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
        const MR: usize = 8;
        const NR: usize = 32;
        let b0 = _mm512_loadu_ps(t.bias.as_ptr());
        let b1 = _mm512_loadu_ps(t.bias.as_ptr().add(16));
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
            for tap in 0..t.taps {
                let a = &t.a[tap * MR..tap * MR + R];
                let bt = t.b.as_ptr().add(tap * t.k * NR);
                let mut kk = 0;
                while kk + U <= t.k {
                    // One or two rows stream the weights once: fetch ahead of use.
                    _mm_prefetch::<_MM_HINT_T0>(bt.add((kk + 16) * NR) as *const i8);
                    _mm_prefetch::<_MM_HINT_T0>(bt.add((kk + 18) * NR) as *const i8);
                    for u in 0..U {
                        let w0 = _mm512_loadu_ps(bt.add((kk + u) * NR));
                        let w1 = _mm512_loadu_ps(bt.add((kk + u) * NR + 16));
                        for r in 0..R {
                            let av = _mm512_set1_ps(*a[r].add(kk + u));
                            p0[u][r] = _mm512_fmadd_ps(av, w0, p0[u][r]);
                            p1[u][r] = _mm512_fmadd_ps(av, w1, p1[u][r]);
                        }
                    }
                    kk += U;
                }
                while kk < t.k {
                    let w0 = _mm512_loadu_ps(bt.add(kk * NR));
                    let w1 = _mm512_loadu_ps(bt.add(kk * NR + 16));
                    for r in 0..R {
                        let av = _mm512_set1_ps(*a[r].add(kk));
                        p0[0][r] = _mm512_fmadd_ps(av, w0, p0[0][r]);
                        p1[0][r] = _mm512_fmadd_ps(av, w1, p1[0][r]);
                    }
                    kk += 1;
                }
            }
            for r in 0..R {
                c0[r] = _mm512_add_ps(_mm512_add_ps(p0[0][r], p0[1][r]), _mm512_add_ps(p0[2][r], p0[3][r]));
                c1[r] = _mm512_add_ps(_mm512_add_ps(p1[0][r], p1[1][r]), _mm512_add_ps(p1[2][r], p1[3][r]));
            }
        } else {
            for tap in 0..t.taps {
                let a = &t.a[tap * MR..tap * MR + R];
                let mut bp = t.b.as_ptr().add(tap * t.k * NR);
                for kk in 0..t.k {
                    let w0 = _mm512_loadu_ps(bp);
                    let w1 = _mm512_loadu_ps(bp.add(16));
                    for r in 0..R {
                        let av = _mm512_set1_ps(*a[r].add(kk));
                        c0[r] = _mm512_fmadd_ps(av, w0, c0[r]);
                        c1[r] = _mm512_fmadd_ps(av, w1, c1[r]);
                    }
                    bp = bp.add(NR);
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
        for r in 0..t.rows {
            let o = out.add(r * out_stride);
            let v0 = _mm512_min_ps(_mm512_max_ps(c0[r], lo), hi);
            let v1 = _mm512_min_ps(_mm512_max_ps(c1[r], lo), hi);
            _mm512_mask_storeu_ps(o, m0, v0);
            if m1 != 0 {
                _mm512_mask_storeu_ps(o.add(16), m1, v1);
            }
        }
    }

    /// # Safety
    /// CPU must support AVX2 and FMA; see `run_tile` for pointers.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile_avx2(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
        match t.rows {
            1 => tile_avx2_r::<1>(t, clamp, out, out_stride),
            2 => tile_avx2_r::<2>(t, clamp, out, out_stride),
            3 | 4 => tile_avx2_r::<4>(t, clamp, out, out_stride),
            _ => tile_avx2_r::<6>(t, clamp, out, out_stride),
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile_avx2_r<const R: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
        const MR: usize = 6;
        const NR: usize = 16;
        let b0 = _mm256_loadu_ps(t.bias.as_ptr());
        let b1 = _mm256_loadu_ps(t.bias.as_ptr().add(8));
        let mut c0 = [b0; R];
        let mut c1 = [b1; R];
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
        let lo = _mm256_set1_ps(clamp.min);
        let hi = _mm256_set1_ps(clamp.max);
        let mut buf = [0.0f32; NR];
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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(isa: Isa) {
        let (mr, nr) = (isa.mr(), isa.nr());
        let (taps, k, n, rows) = (3, 5, nr + 3, mr - 1);
        let w: Vec<f32> = (0..n * taps * k).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.1).collect();
        let a: Vec<Vec<f32>> = (0..taps * mr).map(|i| (0..k).map(|j| ((i * 3 + j) % 5) as f32 - 2.0).collect()).collect();
        let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let packed = pack_b(&w, n, taps, k, nr);
        let pb = pad_bias(Some(&bias), n, nr);
        let ptrs: Vec<*const f32> = a.iter().map(|r| r.as_ptr()).collect();
        let mut out = vec![f32::NAN; rows * n];
        for panel in 0..n.div_ceil(nr) {
            let cols = nr.min(n - panel * nr);
            let tile = Tile { a: &ptrs, b: &packed[panel * taps * k * nr..], bias: &pb[panel * nr..], k, taps, rows, cols };
            // SAFETY: all pointers index the vectors above within bounds.
            unsafe { run_tile(isa, &tile, Clamp::NONE, out.as_mut_ptr().add(panel * nr), n) };
        }
        for r in 0..rows {
            for o in 0..n {
                let mut s = bias[o];
                for t in 0..taps {
                    for kk in 0..k {
                        s += a[t * mr + r][kk] * w[(o * taps + t) * k + kk];
                    }
                }
                assert!((out[r * n + o] - s).abs() < 1e-4, "{isa:?} r{r} o{o}: {} vs {s}", out[r * n + o]);
            }
        }
    }

    /// conv2d, per-tap and with filter rows merged, against a direct sum, over
    /// paddings, strides, dilations (per-tap only) and channel counts.
    #[test]
    fn conv_paths_match_direct_sum() {
        use crate::conv::{out_size_and_pad, Window};
        let isa = Isa::detect();
        for &(c, n, k, stride, dil, same) in &[
            (3, 24, 3, 2, 1, true),
            (1, 5, 5, 1, 1, false),
            (4, 33, 3, 1, 2, true),
            (8, 16, 5, 2, 1, true),
            (2, 7, 3, 3, 1, false),
            (5, 40, 1, 1, 1, true),
            (24, 12, 1, 1, 1, false),
            (9, 70, 1, 2, 1, true),
        ] {
            let (in_h, in_w) = (11, 13);
            let (out_h, pt) = out_size_and_pad(in_h, k, stride, dil, same).unwrap();
            let (out_w, pl) = out_size_and_pad(in_w, k, stride, dil, same).unwrap();
            let g = Window {
                batch: 2,
                in_h,
                in_w,
                out_h,
                out_w,
                k_h: k,
                k_w: k,
                stride_h: stride,
                stride_w: stride,
                dil_h: dil,
                dil_w: dil,
                pad_top: pt,
                pad_left: pl,
            };
            let x: Vec<f32> = (0..2 * in_h * in_w * c).map(|i| ((i * 7 % 13) as f32) * 0.1 - 0.6).collect();
            let w: Vec<f32> = (0..n * k * k * c).map(|i| ((i * 5 % 11) as f32) * 0.1 - 0.5).collect();
            let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
            let mut want = vec![0.0f32; 2 * out_h * out_w * n];
            for b in 0..2 {
                for oy in 0..out_h {
                    for ox in 0..out_w {
                        for o in 0..n {
                            let mut s = bias[o];
                            for ky in 0..k {
                                for kx in 0..k {
                                    let (y, xx) = ((oy * stride + ky * dil) as isize - pt as isize, (ox * stride + kx * dil) as isize - pl as isize);
                                    if y >= 0 && xx >= 0 && (y as usize) < in_h && (xx as usize) < in_w {
                                        for i in 0..c {
                                            s += x[((b * in_h + y as usize) * in_w + xx as usize) * c + i] * w[((o * k + ky) * k + kx) * c + i];
                                        }
                                    }
                                }
                            }
                            want[((b * out_h + oy) * out_w + ox) * n + o] = s;
                        }
                    }
                }
            }
            let mut packings = vec![Packed::new(isa, &w, Some(&bias), n, k * k, c)];
            if dil == 1 {
                packings.push(Packed::with_merged_rows(isa, &w, Some(&bias), n, k, k, c));
            }
            for pk in packings {
                let mut out = vec![f32::NAN; want.len()];
                let mut sc = pk.scratch(&g);
                assert!(conv2d(&x, &pk, &g, Clamp::NONE, &mut out, 0..2 * out_h, &mut sc));
                for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                    assert!((a - b).abs() < 1e-4, "c{c} n{n} k{k} s{stride} d{dil} merged {}: element {i} {a} vs {b}", pk.merged_kw);
                }
            }
        }
    }

    #[test]
    fn fully_connected_matches_naive_for_every_batch_and_width() {
        for isa in [Isa::detect(), Isa::Portable] {
            for &(batch, n, k) in &[(1, 1, 1), (1, 17, 7), (1, 32, 300), (1, 33, 5), (1, 100, 64), (1, 130, 301), (1, 256, 16), (3, 40, 9), (9, 70, 33)] {
                let w: Vec<f32> = (0..n * k).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.05).collect();
                let x: Vec<f32> = (0..batch * k).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1).collect();
                let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
                let pk = Packed::new(isa, &w, Some(&bias), n, 1, k);
                let mut out = vec![f32::NAN; batch * n];
                assert!(fully_connected(&x, batch, &pk, Clamp::RELU6, &mut out));
                for b in 0..batch {
                    for j in 0..n {
                        let s = bias[j] + (0..k).map(|kk| x[b * k + kk] * w[j * k + kk]).sum::<f32>();
                        let want = s.clamp(0.0, 6.0);
                        assert!((out[b * n + j] - want).abs() < 1e-4, "{isa:?} batch {batch} n {n} k {k}: [{b},{j}] {} vs {want}", out[b * n + j]);
                    }
                }
            }
        }
    }

    #[test]
    fn every_available_kernel_matches_naive() {
        check(Isa::Portable);
        let best = Isa::detect();
        if best != Isa::Portable {
            check(best);
        }
        #[cfg(target_arch = "x86_64")]
        if best == Isa::Avx512 && std::arch::is_x86_feature_detected!("fma") {
            check(Isa::Avx2);
        }
        if best == Isa::Avx512 {
            check(Isa::Avx512Narrow);
        }
    }
}
