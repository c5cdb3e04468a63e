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
//! tiles), AVX2+FMA (6x16), NEON on aarch64 (8x8), or a portable fallback (4x8). Results differ from a
//! naive sum only by float reassociation; they are identical for any split of
//! the rows across threads, since each output element is summed in one order.

use crate::aligned::LineVec;
use crate::{holds, product, Clamp};

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// Which kernel an [`Isa`] token selects (private: tokens are made only by
/// feature detection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// Each architecture constructs only its own variants.
#[allow(dead_code)]
enum Kind {
    /// x86-64 AVX-512F, 8x32 tiles.
    Avx512,
    /// x86-64 AVX-512F with 16-channel panels and 12x16 tiles, for layers with at
    /// most 16 output channels.
    Avx512Narrow,
    /// x86-64 AVX2 + FMA, 6x16 tiles.
    Avx2,
    /// aarch64 NEON (baseline there), 8x8 tiles.
    Neon,
    /// Any CPU, 4x8 tiles.
    Portable,
}

/// Instruction set (and so tile shape and panel layout) of a GEMM kernel.
///
/// A token: the only ways to get one are [`Isa::portable`] and the constructors
/// that check the running CPU's features ([`Isa::avx512`], [`Isa::avx2`], ...,
/// [`Isa::detect`]), so holding an `Isa` other than the portable one proves the
/// CPU can run that kernel. [`Packed`] weights carry the token they were packed
/// for, so a kernel always reads the panel layout it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Isa(Kind);

impl Isa {
    /// The portable kernel (any CPU).
    pub fn portable() -> Isa {
        Isa(Kind::Portable)
    }

    /// The AVX-512F kernel, if this CPU has AVX-512F.
    pub fn avx512() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        if crate::level::cpu_avx512f() {
            return Some(Isa(Kind::Avx512));
        }
        None
    }

    /// The AVX-512F kernel for narrow layers (16-channel panels), if this CPU has AVX-512F.
    pub fn avx512_narrow() -> Option<Isa> {
        Isa::avx512().map(|_| Isa(Kind::Avx512Narrow))
    }

    /// The AVX2 + FMA kernel, if this CPU has both.
    pub fn avx2() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        if crate::level::cpu_avx2_fma() {
            return Some(Isa(Kind::Avx2));
        }
        None
    }

    /// The NEON kernel, on aarch64 (where NEON is part of the base architecture).
    pub fn neon() -> Option<Isa> {
        cfg!(target_arch = "aarch64").then_some(Isa(Kind::Neon))
    }

    /// The best instruction set this CPU supports.
    pub fn detect() -> Isa {
        Isa::avx512().or_else(Isa::avx2).or_else(Isa::neon).unwrap_or_else(Isa::portable)
    }

    /// A short name for reports (`ferrite devices`).
    pub fn name(self) -> &'static str {
        match self.0 {
            Kind::Avx512 => "avx512",
            Kind::Avx512Narrow => "avx512-narrow",
            Kind::Avx2 => "avx2-fma",
            Kind::Neon => "neon",
            Kind::Portable => "portable",
        }
    }

    /// Every kernel this CPU can run, best first (the portable one last).
    pub fn available() -> Vec<Isa> {
        [Isa::avx512(), Isa::avx512_narrow(), Isa::avx2(), Isa::neon(), Some(Isa::portable())].into_iter().flatten().collect()
    }

    /// The kernel to use for a layer with `n` output channels: on AVX-512 machines,
    /// layers with at most 16 channels use 16-wide panels (12 rows of one vector),
    /// which compute half as much padding as a 32-wide panel would.
    pub fn for_channels(n: usize) -> Isa {
        let best = Isa::detect();
        if best.0 == Kind::Avx512 && n <= 16 {
            return Isa(Kind::Avx512Narrow);
        }
        best
    }

    /// Output channels per packed panel.
    pub fn nr(self) -> usize {
        match self.0 {
            Kind::Avx512 => 32,
            Kind::Avx512Narrow | Kind::Avx2 => 16,
            Kind::Neon | Kind::Portable => 8,
        }
    }

    /// Output rows per tile.
    pub fn mr(self) -> usize {
        match self.0 {
            Kind::Avx512 => 8,
            Kind::Avx512Narrow => 12,
            Kind::Avx2 => 6,
            Kind::Neon => 8,
            Kind::Portable => 4,
        }
    }

    /// f32 lanes of the kernel's vector registers (1 for the portable kernel,
    /// which leaves vectorization to the compiler).
    pub fn lanes(self) -> usize {
        match self.0 {
            Kind::Avx512 | Kind::Avx512Narrow => 16,
            Kind::Avx2 => 8,
            Kind::Neon => 4,
            Kind::Portable => 1,
        }
    }
}

/// Packs weights `w[n][t][k]` (OHWI with taps = kh*kw) into `[panel][t][k][nr]`.
/// Panics if `w` is shorter than `n * taps * k`.
pub fn pack_b(w: &[f32], n: usize, taps: usize, k: usize, nr: usize) -> LineVec {
    assert!(w.len() >= n * taps * k, "pack_b: {} weights for {n} x {taps} x {k}", w.len());
    let panels = n.div_ceil(nr);
    let mut p = LineVec::zeroed(panels * taps * k * nr);
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

/// Bias padded to whole panels (zeros where absent). Panics if `bias` is shorter than `n`.
pub fn pad_bias(bias: Option<&[f32]>, n: usize, nr: usize) -> LineVec {
    assert!(bias.is_none_or(|b| b.len() >= n), "pad_bias: bias shorter than {n}");
    let mut b = LineVec::zeroed(n.div_ceil(nr) * nr);
    if let Some(src) = bias {
        b[..n].copy_from_slice(&src[..n]);
    }
    b
}

/// One tile: `rows` (<= mr) output rows starting at `out`, spaced `out_stride`
/// floats apart, `cols` (<= nr) valid columns of one panel. Private to this
/// module: only [`Packed::tile`] builds one, from a panel of its own buffers.
struct Tile<'a> {
    /// Per tap, per row: pointer to `k` inputs (a zero row in the padding). Length taps*mr.
    a: &'a [*const f32],
    /// The packed panel `[t][k][nr]`.
    b: &'a [f32],
    /// The panel's bias, `nr` long.
    bias: &'a [f32],
    /// Inner size.
    k: usize,
    /// Taps.
    taps: usize,
    /// Valid rows.
    rows: usize,
    /// Valid columns.
    cols: usize,
}

/// Computes one tile into `out` (row r, column j at `out[r * out_stride + j]`):
/// the one dispatch point from an [`Isa`] to its tile kernel.
///
/// # Safety
/// Every pointer in `tile.a` must be valid for `tile.k` reads; `out` must be valid
/// for writes at every `r * out_stride + j` with `r < rows`, `j < cols`. The tile
/// must come from [`Packed::tile`] of weights packed for `isa` (so `tile.b` holds
/// `taps * k * nr` floats, `tile.bias` `nr`, `tile.a` `taps * mr` pointers,
/// `rows <= mr` and `cols <= nr`).
unsafe fn run_tile(isa: Isa, tile: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    debug_assert!(tile.a.len() >= tile.taps * isa.mr() && tile.b.len() >= tile.taps * tile.k * isa.nr() && tile.bias.len() >= isa.nr());
    debug_assert!(tile.rows <= isa.mr() && tile.cols <= isa.nr());
    match isa.0 {
        // The guards are constant: a build without a level links none of its kernels.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Avx512` token is only made after detecting AVX-512F on this
        // CPU; the tile's shape and pointers are this function's contract.
        Kind::Avx512 if crate::level::AVX512 => unsafe { x86_64::tile_avx512(tile, clamp, out, out_stride) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above (an `Avx512Narrow` token is also only made with AVX-512F).
        Kind::Avx512Narrow if crate::level::AVX512 => unsafe { x86_64::tile_avx512_narrow(tile, clamp, out, out_stride) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX2 + FMA.
        Kind::Avx2 if crate::level::AVX2 => unsafe { x86_64::tile_avx2(tile, clamp, out, out_stride) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline on aarch64; the tile's shape and pointers are
        // this function's contract.
        Kind::Neon => unsafe { aarch64::tile_neon(tile, clamp, out, out_stride) },
        // SAFETY: the tile's shape and pointers are this function's contract (on
        // other architectures only the portable token can be made).
        _ => unsafe { tile_portable(tile, clamp, out, out_stride) },
    }
}

/// # Safety
/// See [`run_tile`].
// Out of line (called once per tile, so it costs nothing) so that
// tools/kernel_instr.py finds its loop in the compiled library.
#[inline(never)]
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
///
/// The fields are private: the kernels read `b`, `bias` and `zero` through raw
/// pointers sized from `isa`, `n`, `taps` and `k`, so only the constructors
/// (which size the buffers from those values) and [`Packed::repack`] (which
/// keeps the sizes) may write them. Shrinking the panels before a kernel call,
/// which once made two safe calls read out of bounds, no longer compiles:
///
/// ```compile_fail
/// use ferrite_kernels::igemm::{fully_connected, Isa, Packed};
/// let mut pk = Packed::new(Isa::detect(), &[1.0; 64], None, 8, 1, 8);
/// pk.b.truncate(1);
/// fully_connected(&[1.0; 8], 1, &pk, ferrite_kernels::Clamp::NONE, &mut [0.0; 8]);
/// ```
#[derive(Debug, Clone)]
pub struct Packed {
    /// Kernel it was packed for.
    isa: Isa,
    /// Output channels.
    n: usize,
    /// Taps (kh * kw; 1 for fully-connected).
    taps: usize,
    /// Inner size per tap (input channels).
    k: usize,
    /// `[panel][tap][k][nr]`, exactly `n.div_ceil(nr) * taps * k * nr` floats, from
    /// a cache line: a panel's rows of `nr` floats are whole lines, so the tiles'
    /// 64-byte loads of them never span two.
    b: LineVec,
    /// Bias padded to whole panels, `n.div_ceil(nr) * nr` floats.
    bias: LineVec,
    /// A row of `k` zeros (at least one), read in place of inputs in the padding.
    zero: Vec<f32>,
    /// Filter columns merged into each tap row (1: one tap per filter position).
    /// With `kw` merged, a tap is a whole filter row and `k = kw * in_c`: the
    /// window's row is contiguous in a zero-padded copy of the input row, so
    /// convolutions with few input channels run long inner loops.
    merged_kw: usize,
}

/// Per-thread scratch of [`conv2d`]: row pointers, and zero-padded copies of the
/// input rows for merged filter rows.
#[derive(Debug, Clone, Default)]
pub struct ConvScratch {
    ptrs: Vec<usize>,
    lines: Vec<f32>,
    /// Per tap, the offset in bytes of its input from the window's first input
    /// (filled on each call of [`conv2d_pixels`]; sized for the taps here).
    offs: Vec<usize>,
}

impl Packed {
    /// Packs OHWI weights `w[n][taps][k]` and an optional bias for `isa`.
    /// Panics if `w` holds fewer than `n * taps * k` floats or `bias` fewer than `n`.
    pub fn new(isa: Isa, w: &[f32], bias: Option<&[f32]>, n: usize, taps: usize, k: usize) -> Packed {
        let nr = isa.nr();
        Packed { isa, n, taps, k, b: pack_b(w, n, taps, k, nr), bias: pad_bias(bias, n, nr), zero: vec![0.0; k.max(1)], merged_kw: 1 }
    }

    /// Packs OHWI weights `[n][kh][kw][c]` for [`conv2d`] with each filter row merged
    /// into one tap of `kw * c` inputs (the same memory layout as per-tap packing).
    /// Panics as [`Packed::new`] does.
    pub fn with_merged_rows(isa: Isa, w: &[f32], bias: Option<&[f32]>, n: usize, kh: usize, kw: usize, c: usize) -> Packed {
        Packed { merged_kw: kw.max(1), ..Packed::new(isa, w, bias, n, kh, kw * c) }
    }

    /// Repacks new weights into the same layout (non-constant weights, each run).
    /// Panics if `w` or `bias` is shorter than the packing's shape.
    pub fn repack(&mut self, w: &[f32], bias: Option<&[f32]>) {
        let nr = self.isa.nr();
        assert!(w.len() >= self.n * self.taps * self.k, "repack: {} weights for {} x {} x {}", w.len(), self.n, self.taps, self.k);
        assert!(bias.is_none_or(|b| b.len() >= self.n), "repack: bias shorter than {}", self.n);
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

    /// Writes row `kk` of tap `t` of the packed operand: `row[j]` is what output
    /// column `j` multiplies input `kk` of tap `t` by. Packs operands that are not
    /// laid out `[n][taps][k]` (a filter read transposed, activations as the second
    /// factor of a weight gradient) without an intermediate copy.
    /// Panics if `t` or `kk` is out of range or `row` is not `n` long.
    pub fn set_row(&mut self, t: usize, kk: usize, row: &[f32]) {
        assert!(t < self.taps && kk < self.k && row.len() == self.n, "set_row: tap {t} row {kk} of {} values", row.len());
        let nr = self.isa.nr();
        for (panel, part) in row.chunks(nr).enumerate() {
            let at = ((panel * self.taps + t) * self.k + kk) * nr;
            self.b[at..at + part.len()].copy_from_slice(part);
        }
    }

    /// Kernel the weights were packed for.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Output channels.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Taps (filter positions, or filter rows when columns are merged; 1 for fully-connected).
    pub fn taps(&self) -> usize {
        self.taps
    }

    /// Inputs per tap.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Filter columns merged into each tap (1 when not merged).
    pub fn merged_kw(&self) -> usize {
        self.merged_kw
    }

    /// Output rows [`conv2d`] tiles together for this geometry (1 unless its
    /// merged-row mode groups narrow rows). A caller that splits the rows between
    /// threads splits at multiples of it: the tiles, and so every result's bits,
    /// are then the same for any thread count.
    pub fn row_group(&self, g: &crate::conv::Window) -> usize {
        if self.merged_kw > 1 {
            merged_group(self.isa.mr(), g.out_w)
        } else {
            1
        }
    }

    /// Scratch for calls of [`conv2d`] with this geometry.
    /// Panics if the geometry's sizes overflow.
    pub fn scratch(&self, g: &crate::conv::Window) -> ConvScratch {
        let mr = self.isa.mr();
        let width = || padded_width(g).expect("convolution geometry overflows");
        let group = if self.merged_kw > 1 { merged_group(mr, g.out_w) } else { 1 };
        let lines = if self.merged_kw > 1 { group * self.taps * width() * (self.k / self.merged_kw) } else { 0 };
        ConvScratch { ptrs: vec![0; (group * g.out_w).div_ceil(mr) * mr * self.taps], lines: vec![0.0; lines], offs: vec![0; self.taps] }
    }

    /// Tile of `rows` rows of `panel` over row pointers `a` (`taps * mr` of them).
    /// Panics if `panel` or `rows` is out of range, so a tile handed to
    /// [`run_tile`] always has the shape its kernel assumes.
    fn tile<'a>(&'a self, a: &'a [*const f32], panel: usize, rows: usize) -> Tile<'a> {
        assert!(rows <= self.isa.mr() && a.len() >= self.taps * self.isa.mr(), "igemm tile out of range");
        let (b, bias, cols) = self.panel(panel);
        Tile { a, b, bias, k: self.k, taps: self.taps, rows, cols }
    }

    /// Panel `panel`'s weights (`taps * k * nr` floats), bias (`nr`) and valid
    /// columns. Panics if there is no such panel.
    fn panel(&self, panel: usize) -> (&[f32], &[f32], usize) {
        let nr = self.isa.nr();
        let len = self.taps * self.k * nr;
        (&self.b[panel * len..][..len], &self.bias[panel * nr..][..nr], nr.min(self.n - panel * nr))
    }
}

/// Width in pixels of an input row padded on both sides so that every output
/// column's window lies inside it (None if that overflows, or with no filter columns).
fn padded_width(g: &crate::conv::Window) -> Option<usize> {
    let span = (g.out_w.max(1) - 1).checked_mul(g.stride_w)?.checked_add(g.k_w.checked_sub(1)?.checked_mul(g.dil_w)?)?.checked_add(1)?;
    Some(g.pad_left.checked_add(g.in_w)?.max(span))
}

/// Output rows that [`conv2d`]'s merged-row mode takes together, so that its
/// tiles of `mr` pixels run across them: narrow maps (a row of 5 pixels fills 5
/// of a tile's 8 rows) then fill whole tiles. As many rows as make a multiple of
/// `mr` pixels, when one row alone would leave at least an eighth of its tiles'
/// rows empty and the group stays within 256 pixels; else 1.
fn merged_group(mr: usize, out_w: usize) -> usize {
    let (mut a, mut b) = (mr, out_w);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let slots = out_w.div_ceil(mr) * mr;
    let group = mr / a.max(1);
    if out_w > 0 && (slots - out_w) * 8 >= slots && group * out_w <= 256 {
        group
    } else {
        1
    }
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
    let group = if merged { merged_group(mr, g.out_w) } else { 1 };
    let blocks = (group * g.out_w).div_ceil(mr);
    let first_row = rows.start;
    let width = padded_width(g);
    if !holds(input.len(), &[g.batch, g.in_h, g.in_w, c])
        || !holds(out.len(), &[rows.len(), g.out_w, n])
        || !holds(scratch.ptrs.len(), &[blocks, mr, pk.taps])
        || (merged
            && (pk.merged_kw != g.k_w || pk.taps != g.k_h || g.dil_w != 1 || !width.is_some_and(|w| holds(scratch.lines.len(), &[group, pk.taps, w, c]))))
        || (!merged && Some(pk.taps) != g.k_h.checked_mul(g.k_w))
        || product(&[g.batch, g.out_h]).is_none_or(|total| rows.end > total)
    {
        return false;
    }
    if !merged {
        return conv2d_pixels(input, pk, g, clamp, out, first_row * g.out_w..rows.end * g.out_w, scratch);
    }
    let width = width.unwrap_or(0);
    let zero = pk.zero.as_ptr() as usize;
    let ConvScratch { ptrs: scratch, lines, .. } = scratch;
    // Merged filter rows: `group` output rows at a time, over zero-padded copies of
    // the input rows their filter rows read (every column's window is then kw * c
    // contiguous floats); the group's pixels run in tiles across its rows.
    let mut start = rows.start;
    while start < rows.end {
        // Groups begin at multiples of `group` rows of the whole map, whatever
        // range this call was given (see [`Packed::row_group`]).
        let here = (group - start % group).min(rows.end - start);
        for i in 0..here {
            let (b, oy) = ((start + i) / g.out_h, (start + i) % g.out_h);
            for ky in 0..g.k_h {
                let line = &mut lines[(i * g.k_h + ky) * width * c..][..width * c];
                line.fill(0.0);
                if let Some(y) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) {
                    let src = &input[(b * g.in_h + y) * g.in_w * c..][..g.in_w * c];
                    line[g.pad_left * c..(g.pad_left + g.in_w) * c].copy_from_slice(src);
                }
            }
        }
        // Row pointers for every pixel block of the group, per filter row.
        let pixels = here * g.out_w;
        let tiles = pixels.div_ceil(mr);
        // The pixel's row in the group and column, stepped (no division per pixel).
        let (mut i, mut ox, mut oy) = (0, 0, start % g.out_h);
        for blk in 0..tiles {
            for r in 0..mr {
                let p = blk * mr + r;
                for ky in 0..g.k_h {
                    let iy = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h);
                    scratch[(blk * pk.taps + ky) * mr + r] = match iy {
                        Some(_) if p < pixels => lines[((i * g.k_h + ky) * width + ox * g.stride_w) * c..].as_ptr() as usize,
                        _ => zero,
                    };
                }
                ox += 1;
                if ox == g.out_w {
                    (i, ox, oy) = (i + 1, 0, if oy + 1 == g.out_h { 0 } else { oy + 1 });
                }
            }
        }
        let out_px = (start - first_row) * g.out_w;
        for panel in 0..n.div_ceil(nr) {
            for blk in 0..tiles {
                let a_words = &scratch[blk * pk.taps * mr..(blk + 1) * pk.taps * mr];
                // SAFETY: `*const f32` and `usize` have the same size and layout; every
                // word was written above from a pointer into `lines` or `zero`.
                let a: &[*const f32] = unsafe { std::slice::from_raw_parts(a_words.as_ptr().cast(), a_words.len()) };
                let rows_here = mr.min(pixels - blk * mr);
                let tile = pk.tile(a, panel, rows_here);
                // SAFETY: each row pointer addresses k floats: a window inside a padded
                // line (its width covers every column's window) or the zero row (k long);
                // the tile writes pixels out_px + blk * mr.. (rows < rows_here, the
                // group's rows being consecutive in `out`) and columns < cols of this
                // panel, inside `out` (checked size).
                unsafe { run_tile(pk.isa, &tile, clamp, out.as_mut_ptr().add((out_px + blk * mr) * n + panel * nr), n) };
            }
        }
        start += here;
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
        || Some(pk.taps) != g.k_h.checked_mul(g.k_w)
        || start > end
        || !holds(input.len(), &[g.batch, g.in_h, g.in_w, c])
        || !holds(out.len(), &[end - start, n])
        || !holds(scratch.ptrs.len(), &[blocks, mr, pk.taps])
        || scratch.offs.len() < pk.taps
        || product(&[g.batch, g.out_h, g.out_w]).is_none_or(|total| end > total)
    {
        return false;
    }
    if is_flat(pk, g) {
        return input.get(start * c..).is_some_and(|x| gemm_rows(x, end - start, pk, clamp, out));
    }
    let zero = pk.zero.as_ptr() as usize;
    let ConvScratch { ptrs: scratch, offs, .. } = scratch;
    // Each tap's input offset (bytes) from the window's first input: a window that lies
    // wholly inside the image (most of them) then takes one add per tap. The
    // largest offset is inside the input whenever such a window exists (its last
    // tap is an input pixel), and is only used then.
    for ky in 0..g.k_h {
        for kx in 0..g.k_w {
            offs[ky * g.k_w + kx] = (ky * g.dil_h * g.in_w + kx * g.dil_w) * c * std::mem::size_of::<f32>();
        }
    }
    // The last row and column a window reaches past its first (the span of the
    // filter), for the inside test.
    let (span_y, span_x) = ((g.k_h.max(1) - 1) * g.dil_h, (g.k_w.max(1) - 1) * g.dil_w);
    // Per-tap implicit GEMM over the chunk's pixels in groups of `blocks` tiles:
    // tiles span output rows (no partial tiles on maps not a multiple of mr
    // wide), and each panel's weights sweep a whole group before the next.
    let mut p = start;
    while p < end {
        let group = (blocks * mr).min(end - p);
        let tiles = group.div_ceil(mr);
        // The group's first pixel, then one step per pixel (no divisions per pixel).
        let (mut b, mut oy, mut ox) = (p / (g.out_h * g.out_w), p / g.out_w % g.out_h, p % g.out_w);
        for blk in 0..tiles {
            let slots = &mut scratch[blk * pk.taps * mr..(blk + 1) * pk.taps * mr];
            // Windows inside the input (most of them) get their taps' addresses in a
            // second pass over every row of the tile, tap by tap: one add and store
            // each, with no per-row test (so the adds run as vectors). Rows whose
            // window crosses the border, noted in the first pass, then overwrite
            // their slots tap by tap with checks. Rows past the 16 the tables hold
            // (no kernel has them) go the checked way at once.
            let mut bases = [0usize; 16];
            let mut edges = [(0usize, 0usize, 0usize, 0usize); 16];
            let (mut inside, mut n_edges) = (false, 0);
            let edge = |slots: &mut [usize], r: usize, b: usize, oy: usize, ox: usize| {
                let px = p + blk * mr + r;
                for ky in 0..g.k_h {
                    let iy = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h && px < end);
                    for kx in 0..g.k_w {
                        let ix = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w);
                        slots[(ky * g.k_w + kx) * mr + r] = match (iy, ix) {
                            (Some(y), Some(x)) => input[((b * g.in_h + y) * g.in_w + x) * c..].as_ptr() as usize,
                            _ => zero,
                        };
                    }
                }
            };
            for r in 0..mr {
                let px = p + blk * mr + r;
                let (y0, x0) = ((oy * g.stride_h).checked_sub(g.pad_top), (ox * g.stride_w).checked_sub(g.pad_left));
                match (y0, x0) {
                    (Some(y0), Some(x0)) if r < bases.len() && px < end && y0 + span_y < g.in_h && x0 + span_x < g.in_w => {
                        // Addresses only (stored as words): the window is inside
                        // the input, so base + off is an input index for every tap.
                        bases[r] = input.as_ptr() as usize + ((b * g.in_h + y0) * g.in_w + x0) * c * std::mem::size_of::<f32>();
                        inside = true;
                    }
                    _ if r < edges.len() => {
                        edges[n_edges] = (r, b, oy, ox);
                        n_edges += 1;
                    }
                    _ => edge(slots, r, b, oy, ox),
                }
                ox += 1;
                if ox == g.out_w {
                    ox = 0;
                    oy += 1;
                    if oy == g.out_h {
                        oy = 0;
                        b += 1;
                    }
                }
            }
            if inside {
                match mr {
                    8 => fill_taps::<8>(slots, &bases, &offs[..pk.taps]),
                    12 => fill_taps::<12>(slots, &bases, &offs[..pk.taps]),
                    _ => fill_taps_any(slots, mr, &bases, &offs[..pk.taps]),
                }
            }
            for &(r, b, oy, ox) in &edges[..n_edges] {
                edge(slots, r, b, oy, ox);
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

/// Writes `slots[tap * R + r] = bases[r] + offs[tap]`: every row of a tile inside
/// the input, with the tile height fixed so the adds run as whole vectors.
fn fill_taps<const R: usize>(slots: &mut [usize], bases: &[usize; 16], offs: &[usize]) {
    let rows: &[usize; R] = bases[..R].try_into().expect("R <= 16");
    for (tap, &off) in slots.chunks_exact_mut(R).zip(offs) {
        for (slot, &base) in tap.iter_mut().zip(rows) {
            *slot = base + off;
        }
    }
}

/// [`fill_taps`] for any tile height `mr` (its first 16 rows at most).
fn fill_taps_any(slots: &mut [usize], mr: usize, bases: &[usize], offs: &[usize]) {
    for (tap, &off) in slots.chunks_exact_mut(mr).zip(offs) {
        for (slot, &base) in tap.iter_mut().zip(bases) {
            *slot = base + off;
        }
    }
}

/// GEMM over gathered rows: for every output row `m` in `rows`,
/// `out[m - rows.start][j] = bias[j] + sum_t sum_kk a(m, t)[kk] * B[t][kk][j]`,
/// where `a(m, t)` returns the `k` inputs of row `m` for tap `t`, or `None` for
/// zeros. The implicit GEMM of [`conv2d`] with the row lookup left to the caller
/// (the gradients of convolutions gather their rows differently). Tiles start at
/// `rows.start`; callers splitting rows over threads start chunks on multiples of
/// the tile height so the tiling, and every result, is the same for any split.
/// `ptrs` is scratch of at least `taps * mr` words. Returns false if `out` or
/// `ptrs` is too short (writing nothing) or a gathered row is shorter than `k`
/// (stopping at that row's tile).
pub fn gemm_gathered<'a>(
    pk: &Packed,
    rows: std::ops::Range<usize>,
    a: impl Fn(usize, usize) -> Option<&'a [f32]>,
    ptrs: &mut [usize],
    clamp: Clamp,
    out: &mut [f32],
) -> bool {
    let (mr, nr, n, k, taps) = (pk.isa.mr(), pk.isa.nr(), pk.n, pk.k, pk.taps);
    if rows.start > rows.end || !holds(out.len(), &[rows.len(), n]) || !holds(ptrs.len(), &[taps, mr]) {
        return false;
    }
    let zero = pk.zero.as_ptr() as usize;
    let mut m0 = rows.start;
    while m0 < rows.end {
        let here = mr.min(rows.end - m0);
        for t in 0..taps {
            for r in 0..mr {
                ptrs[t * mr + r] = match (r < here).then(|| a(m0 + r, t)).flatten() {
                    Some(row) if row.len() >= k => row.as_ptr() as usize,
                    Some(_) => return false,
                    None => zero,
                };
            }
        }
        // SAFETY: `*const f32` and `usize` have the same size and layout; every word
        // was written above from a slice of at least k floats or the zero row.
        let a_rows: &[*const f32] = unsafe { std::slice::from_raw_parts(ptrs.as_ptr().cast(), taps * mr) };
        for panel in 0..n.div_ceil(nr) {
            let tile = pk.tile(a_rows, panel, here);
            // SAFETY: each row pointer addresses k floats (checked above); the tile
            // writes rows < here and columns < cols of this panel, inside `out`
            // (checked size: rows.len() x n).
            unsafe { run_tile(pk.isa, &tile, clamp, out.as_mut_ptr().add((m0 - rows.start) * n + panel * nr), n) };
        }
        m0 += here;
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
    if pk.taps != 1 || !holds(input.len(), &[batch, k]) || !holds(out.len(), &[batch, n]) {
        return false;
    }
    // One row: several panels per pass over the input (more weight loads per
    // broadcast input; the layer is bound by streaming its weights): up to four
    // 32-channel panels with AVX-512, two 16-channel ones with AVX2.
    #[cfg(target_arch = "x86_64")]
    if batch == 1 && ((crate::level::AVX512 && pk.isa.0 == Kind::Avx512) || (crate::level::AVX2 && pk.isa.0 == Kind::Avx2)) {
        let (nr, x) = (pk.isa.nr(), input.as_ptr());
        let panels = n.div_ceil(nr);
        let mut p = 0;
        while p < panels {
            let o = out.as_mut_ptr().wrapping_add(p * nr);
            macro_rules! gemv {
                ($f:ident, $n:literal) => {{
                    let (b, bias, cols) = panel_ptrs::<$n>(pk, p);
                    // SAFETY: the kernel's features were detected (an `Avx512` or `Avx2`
                    // token is only made after detecting them); the input holds k floats
                    // (checked), each panel k * nr floats and nr of bias (`Packed::panel`,
                    // which also checks each panel index), and `out` the panels' columns,
                    // consecutive from p * nr (checked size).
                    unsafe { x86_64::$f::<$n>(x, k, b, bias, cols, clamp, o) };
                    $n
                }};
            }
            p += match (pk.isa.0, panels - p) {
                // The level guards are constant (as in the condition above): a
                // build without a level links none of its kernels.
                (Kind::Avx512, 1) if crate::level::AVX512 => gemv!(gemv_panels_avx512, 1),
                (Kind::Avx512, 2) if crate::level::AVX512 => gemv!(gemv_panels_avx512, 2),
                (Kind::Avx512, 3) if crate::level::AVX512 => gemv!(gemv_panels_avx512, 3),
                (Kind::Avx512, _) if crate::level::AVX512 => gemv!(gemv_panels_avx512, 4),
                (_, 1) if crate::level::AVX2 => gemv!(gemv_panels_avx2, 1),
                _ if crate::level::AVX2 => gemv!(gemv_panels_avx2, 2),
                _ => unreachable!("no batch-1 kernel for {:?}", pk.isa),
            };
        }
        return true;
    }
    gemm_rows(input, batch, pk, clamp, out)
}

/// The weights, bias and column count of `P` consecutive panels from panel `p`: the
/// batch-1 GEMV kernels' arguments.
#[cfg(target_arch = "x86_64")]
fn panel_ptrs<const P: usize>(pk: &Packed, p: usize) -> ([*const f32; P], [*const f32; P], [usize; P]) {
    (std::array::from_fn(|q| pk.panel(p + q).0.as_ptr()), std::array::from_fn(|q| pk.panel(p + q).1.as_ptr()), std::array::from_fn(|q| pk.panel(p + q).2))
}

/// The rows of a fully-connected product (or a 1x1 convolution's pixels) through
/// the GEMM tiles; tiles start at row 0, so callers splitting rows over threads
/// split on multiples of the tile height. False if a slice is too short.
fn gemm_rows(input: &[f32], batch: usize, pk: &Packed, clamp: Clamp, out: &mut [f32]) -> bool {
    let (mr, nr, k, n) = (pk.isa.mr(), pk.isa.nr(), pk.k, pk.n);
    if pk.taps != 1 || !holds(input.len(), &[batch, k]) || !holds(out.len(), &[batch, n]) {
        return false;
    }
    // Rows the whole-tile loops below took (x86-64 only; elsewhere none).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut start = 0;
    // Narrow layers (one panel of at most 16 channels): whole tiles in one call.
    #[cfg(target_arch = "x86_64")]
    if crate::level::AVX512 && pk.isa.0 == Kind::Avx512Narrow && n <= nr {
        let (b, bias, cols) = pk.panel(0);
        let tiles = batch / mr;
        // SAFETY: an `Avx512Narrow` token is only made after detecting AVX-512F; the
        // input holds batch * k >= tiles * 12 * k floats and `out` batch rows of n
        // (checked sizes), the panel k * 16 weights and 16 of bias (`Packed::panel`).
        unsafe { x86_64::rows_avx512_narrow(input.as_ptr(), k, tiles, b, bias, cols, clamp, out.as_mut_ptr(), n) };
        start = tiles * mr;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::level::AVX512 && pk.isa.0 == Kind::Avx512 {
        let tiles = batch / mr;
        // SAFETY: an `Avx512` token is only made after detecting AVX-512F; the input
        // holds batch * k >= tiles * 8 * k floats and `out` batch rows of n (checked
        // sizes); `b` and `bias` are the whole packing (`Packed` sizes them from n).
        unsafe {
            if n == 24 {
                x86_64::rows_avx512_n24(input.as_ptr(), k, tiles, &pk.b, &pk.bias, clamp, out.as_mut_ptr());
            } else {
                x86_64::rows_avx512(input.as_ptr(), k, tiles, &pk.b, &pk.bias, n, clamp, out.as_mut_ptr(), n);
            }
        }
        start = tiles * mr;
    }
    // Room for the tallest tile (mr <= 16).
    let mut ptrs = [std::ptr::null::<f32>(); 16];
    for b0 in (start..batch).step_by(mr) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The convolution by its definition (NHWC input of `c` channels, OHWI weights,
    /// bias, no clamp): every output row, [batch * out_h, out_w, n], each sum taken
    /// from the bias over the taps inside the input, filter row, column, channel.
    fn conv_definition(x: &[f32], w: &[f32], bias: &[f32], g: &crate::conv::Window, c: usize, n: usize) -> Vec<f32> {
        let mut want = vec![0.0f32; g.batch * g.out_h * g.out_w * n];
        for row in 0..g.batch * g.out_h {
            let (b, oy) = (row / g.out_h, row % g.out_h);
            for ox in 0..g.out_w {
                for o in 0..n {
                    let mut s = bias[o];
                    for ky in 0..g.k_h {
                        let Some(y) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
                        for kx in 0..g.k_w {
                            let Some(xx) = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&v| v < g.in_w) else { continue };
                            for i in 0..c {
                                s += x[((b * g.in_h + y) * g.in_w + xx) * c + i] * w[((o * g.k_h + ky) * g.k_w + kx) * c + i];
                            }
                        }
                    }
                    want[(row * g.out_w + ox) * n + o] = s;
                }
            }
        }
        want
    }

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
        for isa in Isa::available() {
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
                let want = conv_definition(&x, &w, &bias, &g, c, n);
                let mut packings = vec![Packed::new(isa, &w, Some(&bias), n, k * k, c)];
                if dil == 1 {
                    packings.push(Packed::with_merged_rows(isa, &w, Some(&bias), n, k, k, c));
                }
                for pk in packings {
                    let mut out = vec![f32::NAN; want.len()];
                    let mut sc = pk.scratch(&g);
                    assert!(conv2d(&x, &pk, &g, Clamp::NONE, &mut out, 0..2 * out_h, &mut sc));
                    for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                        assert!((a - b).abs() < 1e-4, "{isa:?} c{c} n{n} k{k} s{stride} d{dil} merged {}: element {i} {a} vs {b}", pk.merged_kw);
                    }
                }
            }
        }
    }

    /// The per-pixel implicit GEMM (windows inside the image by tap offsets, the
    /// rest tap by tap), the half-panel tiles (at most 8 valid columns) and the
    /// single-column tiles against
    /// the definition, on random geometries under every available kernel: filters
    /// 1x1 to 5x5, 1xN and Nx1, strides 1-3, dilation 1-2, SAME and VALID, batch
    /// 1-2, 1-40 output channels, and chunks of pixels starting mid-image.
    #[test]
    fn conv_pixels_random_geometries_match_definition() {
        use crate::conv::{out_size_and_pad, Window};
        let mut rng = crate::testutil::Rng::new(0xf_c0a7);
        for case in 0..300 {
            let (kh, kw) = match case % 4 {
                0 => (1, rng.size(2, 7)),
                1 => (rng.size(2, 7), 1),
                _ => (rng.size(1, 5), rng.size(1, 5)),
            };
            let (sh, sw, dh, dw) = (rng.size(1, 3), rng.size(1, 3), rng.size(1, 2), rng.size(1, 2));
            let same = rng.bits().is_multiple_of(2);
            // Every eighth case has one output channel (the single-column tiles).
            let (batch, c) = (rng.size(1, 2), rng.size(1, 20));
            let n = if case % 8 == 0 { 1 } else { rng.size(1, 40) };
            let (in_h, in_w) = (rng.size(kh * dh, 14), rng.size(kw * dw, 14));
            let (Some((out_h, pt)), Some((out_w, pl))) = (out_size_and_pad(in_h, kh, sh, dh, same), out_size_and_pad(in_w, kw, sw, dw, same)) else {
                continue;
            };
            let g = Window { batch, in_h, in_w, out_h, out_w, k_h: kh, k_w: kw, stride_h: sh, stride_w: sw, dil_h: dh, dil_w: dw, pad_top: pt, pad_left: pl };
            let x: Vec<f32> = (0..batch * in_h * in_w * c).map(|_| rng.range(-50, 50) as f32 * 0.02).collect();
            let w: Vec<f32> = (0..n * kh * kw * c).map(|_| rng.range(-50, 50) as f32 * 0.02).collect();
            let bias: Vec<f32> = (0..n).map(|_| rng.range(-50, 50) as f32 * 0.01).collect();
            let total = batch * out_h * out_w;
            let want: Vec<f32> = conv_definition(&x, &w, &bias, &g, c, n).into_iter().map(|s| s.max(0.0)).collect();
            for isa in Isa::available() {
                let pk = Packed::new(isa, &w, Some(&bias), n, kh * kw, c);
                let mut sc = pk.scratch(&g);
                // Two chunks split on a tile boundary, as the thread split does.
                let mid = (total / 2).div_ceil(isa.mr()) * isa.mr();
                let mid = mid.min(total);
                let mut out = vec![f32::NAN; total * n];
                let (lo, hi) = out.split_at_mut(mid * n);
                assert!(conv2d_pixels(&x, &pk, &g, Clamp::RELU, lo, 0..mid, &mut sc));
                assert!(conv2d_pixels(&x, &pk, &g, Clamp::RELU, hi, mid..total, &mut sc));
                for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                    assert!((a - b).abs() < 1e-3, "{isa:?} case {case} {g:?} c{c} n{n}: element {i} {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn fully_connected_matches_naive_for_every_batch_and_width() {
        for isa in Isa::available() {
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

    /// Many short rows (1x1 convolutions on large maps, few input channels) through
    /// the whole-tile row loops, with the output channels at and around the panel
    /// widths (1-8, 15-17, 24, 33, 36-40, 48): against the definition, and split
    /// at a tile boundary into two calls (a thread's share) bit for bit the same.
    #[test]
    fn many_short_rows_match_the_definition() {
        let mut next = crate::testutil::xorshift(0x51c0_77e5_a2d4_0b19);
        for isa in Isa::available() {
            for case in 0..80 {
                let n = [1, 2, 3, 6, 7, 8, 15, 16, 17, 24, 33, 36, 39, 40, 48][next(15)];
                let k = [1, 3, 8, 16, 24, 48][next(6)];
                let batch = 1 + next(130);
                let w: Vec<f32> = (0..n * k).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let x: Vec<f32> = (0..batch * k).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let bias: Vec<f32> = (0..n).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = [Clamp::RELU6, Clamp::NONE, Clamp::RELU][case % 3];
                let pk = Packed::new(isa, &w, Some(&bias), n, 1, k);
                let mut out = vec![f32::NAN; batch * n];
                assert!(gemm_rows(&x, batch, &pk, clamp, &mut out));
                for b in 0..batch {
                    for j in 0..n {
                        let s = bias[j] + (0..k).map(|kk| x[b * k + kk] * w[j * k + kk]).sum::<f32>();
                        let got = out[b * n + j];
                        assert!((got - clamp.apply(s)).abs() < 1e-4, "{isa:?} case {case} {batch}x{n}x{k} [{b},{j}]: {got} vs {s}");
                    }
                }
                let mid = (batch / 2).div_ceil(isa.mr()) * isa.mr();
                let mid = mid.min(batch);
                let mut split = vec![f32::NAN; batch * n];
                let (lo, hi) = split.split_at_mut(mid * n);
                assert!(gemm_rows(&x[..mid * k], mid, &pk, clamp, lo));
                assert!(gemm_rows(&x[mid * k..], batch - mid, &pk, clamp, hi));
                assert!(out.iter().zip(&split).all(|(a, b)| a.to_bits() == b.to_bits()), "{isa:?} case {case} {batch}x{n}x{k}: split differs");
            }
        }
    }

    /// Every kernel against the definition on random shapes: fully-connected over
    /// 1-20 rows (every tile height and remainder), and convolutions with odd
    /// channel counts, 1xN and Nx1 filters, strides 1-3, dilation and both paddings,
    /// over thread-like pixel ranges.
    #[test]
    fn random_shapes_match_the_definition() {
        use crate::conv::{out_size_and_pad, Window};
        let mut next = crate::testutil::xorshift(0x9e37_79b9_7f4a_7c15);
        for isa in Isa::available() {
            for case in 0..60 {
                let (batch, n, k) = (1 + next(20), 1 + next(45), 1 + next(70));
                let w: Vec<f32> = (0..n * k).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let x: Vec<f32> = (0..batch * k).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let bias: Vec<f32> = (0..n).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = if case % 2 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let pk = Packed::new(isa, &w, (case % 3 != 0).then_some(&bias[..]), n, 1, k);
                let mut out = vec![f32::NAN; batch * n];
                assert!(fully_connected(&x, batch, &pk, clamp, &mut out));
                for b in 0..batch {
                    for j in 0..n {
                        let s = if case % 3 != 0 { bias[j] } else { 0.0 } + (0..k).map(|kk| x[b * k + kk] * w[j * k + kk]).sum::<f32>();
                        let got = out[b * n + j];
                        assert!((got - clamp.apply(s)).abs() < 1e-4, "{isa:?} fc case {case} {batch}x{n}x{k} [{b},{j}]: {got} vs {s}");
                    }
                }
            }
            for case in 0..60 {
                let (c, n) = (1 + next(19), 1 + next(40));
                let (k_h, k_w) = [(3, 3), (1, 1), (5, 5), (1, 7), (7, 1), (2, 3)][next(6)];
                let (stride, dil) = (1 + next(3), if next(3) == 0 { 2 } else { 1 });
                let same = next(2) == 0;
                let (in_h, in_w) = (1 + next(9), 1 + next(17));
                let Some((out_h, pad_top)) = out_size_and_pad(in_h, k_h, stride, dil, same) else { continue };
                let Some((out_w, pad_left)) = out_size_and_pad(in_w, k_w, stride, dil, same) else { continue };
                if out_h == 0 || out_w == 0 {
                    continue;
                }
                let g = Window { batch: 2, in_h, in_w, out_h, out_w, k_h, k_w, stride_h: stride, stride_w: stride, dil_h: dil, dil_w: dil, pad_top, pad_left };
                let x: Vec<f32> = (0..2 * in_h * in_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..n * k_h * k_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let bias: Vec<f32> = (0..n).map(|_| next(1000) as f32 * 0.001).collect();
                let mut packings = vec![Packed::new(isa, &w, Some(&bias), n, k_h * k_w, c)];
                if dil == 1 {
                    packings.push(Packed::with_merged_rows(isa, &w, Some(&bias), n, k_h, k_w, c));
                }
                let start = next(2 * out_h);
                let want = conv_definition(&x, &w, &bias, &g, c, n);
                for pk in packings {
                    let mut out = vec![f32::NAN; (2 * out_h - start) * out_w * n];
                    let mut sc = pk.scratch(&g);
                    assert!(conv2d(&x, &pk, &g, Clamp::NONE, &mut out, start..2 * out_h, &mut sc));
                    for row in start..2 * out_h {
                        for ox in 0..out_w {
                            for o in 0..n {
                                let s = want[(row * out_w + ox) * n + o];
                                let got = out[((row - start) * out_w + ox) * n + o];
                                assert!((got - s).abs() < 1e-4, "{isa:?} conv case {case} {g:?} c{c} n{n} merged {}: {got} vs {s}", pk.merged_kw);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Merged filter rows over maps narrower than a few tiles (1-3 input channels,
    /// filters up to 10x4 as on spectrograms), whose output rows run in groups that
    /// fill whole tiles: groups crossing batch items, row ranges cut anywhere
    /// (a thread's share) and split into consecutive calls, under every kernel.
    #[test]
    fn merged_rows_in_groups_match_naive() {
        use crate::conv::{out_size_and_pad, Window};
        let mut next = crate::testutil::xorshift(0x2f6b_1d3a_94c7_0e55);
        for isa in Isa::available() {
            for case in 0..80 {
                let (c, n) = (1 + next(3), [7, 16, 33, 64][next(4)]);
                let (k_h, k_w) = [(10, 4), (3, 3), (5, 2), (2, 5), (4, 10)][next(5)];
                let (stride_h, stride_w) = (1 + next(2), 1 + next(2));
                let same = next(3) != 0;
                let (in_h, in_w) = (1 + next(30), 1 + next(30));
                // Vertical dilation too (merged rows need none horizontally).
                let dil_h = if case % 4 == 3 { 2 } else { 1 };
                let Some((out_h, pad_top)) = out_size_and_pad(in_h, k_h, stride_h, dil_h, same) else { continue };
                let Some((out_w, pad_left)) = out_size_and_pad(in_w, k_w, stride_w, 1, same) else { continue };
                if out_h == 0 || out_w == 0 {
                    continue;
                }
                let g = Window { batch: 2, in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, dil_h, dil_w: 1, pad_top, pad_left };
                let x: Vec<f32> = (0..2 * in_h * in_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..n * k_h * k_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let bias: Vec<f32> = (0..n).map(|_| next(1000) as f32 * 0.001).collect();
                let pk = Packed::with_merged_rows(isa, &w, Some(&bias), n, k_h, k_w, c);
                let want = conv_definition(&x, &w, &bias, &g, c, n);
                let clamp = if case % 2 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let (start, total) = (next(2 * out_h), 2 * out_h);
                let cut = start + next(total - start + 1);
                let mut out = vec![f32::NAN; (total - start) * out_w * n];
                let mut sc = pk.scratch(&g);
                let (first, second) = out.split_at_mut((cut - start) * out_w * n);
                assert!(conv2d(&x, &pk, &g, clamp, first, start..cut, &mut sc));
                assert!(conv2d(&x, &pk, &g, clamp, second, cut..total, &mut sc));
                for row in start..total {
                    for ox in 0..out_w {
                        for o in 0..n {
                            let s = clamp.apply(want[(row * out_w + ox) * n + o]);
                            let got = out[((row - start) * out_w + ox) * n + o];
                            assert!((got - s).abs() < 1e-4, "{isa:?} case {case} {g:?} c{c} n{n} rows {start}..{cut}..{total}: {got} vs {s}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_available_kernel_matches_naive() {
        for isa in Isa::available() {
            check(isa);
        }
    }

    /// Every kernel the CPU can run is offered by [`Isa::available`] (so the tests
    /// above cover, on an AVX-512 machine, the AVX2 and portable kernels too), and
    /// none it cannot.
    #[test]
    fn available_lists_every_runnable_kernel() {
        let all = Isa::available();
        assert_eq!(all.last(), Some(&Isa::portable()));
        assert_eq!(all.first(), Some(&Isa::detect()));
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 = crate::level::cpu_avx512f();
            let avx2 = crate::level::cpu_avx2_fma();
            assert_eq!(all.contains(&Isa(Kind::Avx512)), avx512);
            assert_eq!(all.contains(&Isa(Kind::Avx512Narrow)), avx512);
            assert_eq!(all.contains(&Isa(Kind::Avx2)), avx2);
        }
        #[cfg(target_arch = "aarch64")]
        assert_eq!(all, [Isa(Kind::Neon), Isa::portable()]);
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        assert_eq!(all, [Isa::portable()]);
    }

    /// The sequence that used to crash (shrink the packed buffer through a public
    /// field, then call `fully_connected`) cannot be written any more (see the
    /// `compile_fail` example on [`Packed`]); buffers that disagree with the
    /// packing through the safe API are refused or panic cleanly.
    #[test]
    fn mismatched_buffers_are_refused() {
        for isa in Isa::available() {
            let (n, k) = (40, 33);
            let w = vec![0.5f32; n * k];
            let pk = Packed::new(isa, &w, None, n, 1, k);
            let x = vec![1.0f32; 2 * k];
            let mut out = vec![0.0f32; 2 * n];
            assert!(fully_connected(&x, 2, &pk, Clamp::NONE, &mut out));
            assert!(!fully_connected(&x[..2 * k - 1], 2, &pk, Clamp::NONE, &mut out), "{isa:?}: short input");
            assert!(!fully_connected(&x, 2, &pk, Clamp::NONE, &mut out[..2 * n - 1]), "{isa:?}: short output");
            assert!(!fully_connected(&x[..k - 1], 1, &pk, Clamp::NONE, &mut out), "{isa:?}: short batch-1 input");
            // Convolution packing read as fully-connected, and a scratch for
            // another geometry: refused.
            let conv = Packed::new(isa, &w, None, n, 3, 11);
            assert!(!fully_connected(&x, 2, &conv, Clamp::NONE, &mut out));
            let g = |w: usize| crate::conv::Window {
                batch: 1,
                in_h: 4,
                in_w: w,
                out_h: 4,
                out_w: w,
                k_h: 1,
                k_w: 3,
                stride_h: 1,
                stride_w: 1,
                dil_h: 1,
                dil_w: 1,
                pad_top: 0,
                pad_left: 1,
            };
            let (small, big) = (g(2), g(40));
            let mut sc = conv.scratch(&small);
            let input = vec![1.0f32; 4 * 40 * 11];
            let mut out = vec![0.0f32; 4 * 40 * n];
            assert!(!conv2d(&input, &conv, &big, Clamp::NONE, &mut out, 0..4, &mut sc), "{isa:?}: scratch too small");
            let mut sc = conv.scratch(&big);
            assert!(conv2d(&input, &conv, &big, Clamp::NONE, &mut out, 0..4, &mut sc));
            assert!(!conv2d(&input[..input.len() - 1], &conv, &big, Clamp::NONE, &mut out, 0..4, &mut sc), "{isa:?}: short input");
            assert!(!conv2d(&input, &conv, &big, Clamp::NONE, &mut out, 0..5, &mut sc), "{isa:?}: rows past the output");
            // Sizes that overflow (which once wrapped to small numbers and passed
            // the checks) are refused too.
            let huge = crate::conv::Window { batch: usize::MAX / 2 + 2, ..big };
            assert!(!conv2d(&input, &conv, &huge, Clamp::NONE, &mut out, 0..4, &mut sc), "{isa:?}: overflowing batch");
            let merged = Packed::with_merged_rows(isa, &w, None, n, 1, 3, 11);
            let mut sc = merged.scratch(&big);
            assert!(conv2d(&input, &merged, &big, Clamp::NONE, &mut out, 0..4, &mut sc));
            let wide = crate::conv::Window { stride_w: usize::MAX / 4, ..big };
            assert!(!conv2d(&input, &merged, &wide, Clamp::NONE, &mut out, 0..4, &mut sc), "{isa:?}: overflowing stride");
            #[allow(clippy::reversed_empty_ranges)]
            let reversed = 8..4;
            assert!(!conv2d_pixels(&input, &conv, &big, Clamp::NONE, &mut out, reversed, &mut conv.scratch(&big)), "{isa:?}: reversed range");
        }
    }

    #[test]
    #[should_panic(expected = "weights for")]
    fn packing_short_weights_panics() {
        let _ = Packed::new(Isa::detect(), &[1.0; 10], None, 4, 1, 3);
    }

    #[test]
    #[should_panic(expected = "repack")]
    fn repacking_short_weights_panics() {
        let mut pk = Packed::new(Isa::detect(), &[1.0; 12], None, 4, 1, 3);
        pk.repack(&[1.0; 11], None);
    }
}
