//! Gradients of CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV (NHWC; conv and
//! transposed-conv filters OHWI, depthwise filters 1HW(C*M)).
//!
//! The two GEMM-shaped gradients run on the float GEMM tiles of [`crate::igemm`]:
//! - the input gradient is an implicit GEMM over input pixels: for every tap, the
//!   row of `dy` the tap came from (or zeros), times the filter read transposed;
//! - the weight gradient is `dW^T = cols^T * dy`, with `cols^T` (one row per
//!   (tap, input channel), one column per output pixel) built a tile of rows at a
//!   time from the input (im2col transposed), `dy` packed as the GEMM's second
//!   operand, over blocks of pixels summed in block order.
//!
//! Every output element is summed in an order fixed by the shapes alone, so the
//! results are the same bits for any thread count.

use super::split::{for_rows, parts, Base};
use crate::conv::Window;
use crate::igemm::{conv2d_pixels, gemm_gathered, ConvScratch, Isa, Packed};
use crate::parallel::ThreadPool;
use crate::Clamp;
use std::sync::Mutex;

/// The gradients a convolution's backward pass writes; `None` skips one (a
/// frozen weight, an input that needs no gradient).
#[derive(Debug, Default)]
pub struct ConvGrads<'a> {
    /// Gradient of the input, the input's shape.
    pub dx: Option<&'a mut [f32]>,
    /// Gradient of the filter, the filter's shape.
    pub dw: Option<&'a mut [f32]>,
    /// Gradient of the bias, one value per output channel.
    pub db: Option<&'a mut [f32]>,
}

/// Pixels of an NHWC map's height and width over the batch.
fn pixels(batch: usize, h: usize, w: usize) -> usize {
    batch * h * w
}

/// Row of the input that tap (ky, kx) of output pixel `p` reads (flat pixel
/// index over the window's input), or `None` in the padding.
#[inline(always)]
fn tap_source(g: &Window, p: usize, ky: usize, kx: usize) -> Option<usize> {
    let ox = p % g.out_w;
    let oy = p / g.out_w % g.out_h;
    let b = p / (g.out_w * g.out_h);
    let y = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h)?;
    let x = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&x| x < g.in_w)?;
    Some((b * g.in_h + y) * g.in_w + x)
}

/// Output pixel whose tap (ky, kx) reads input pixel `q`, if any: the inverse of
/// [`tap_source`] (stride divides the offset, and the output pixel exists).
#[inline(always)]
fn tap_target(g: &Window, q: usize, ky: usize, kx: usize) -> Option<usize> {
    let ix = q % g.in_w;
    let iy = q / g.in_w % g.in_h;
    let b = q / (g.in_w * g.in_h);
    let ty = (iy + g.pad_top).checked_sub(ky * g.dil_h).filter(|t| t % g.stride_h == 0)? / g.stride_h;
    let tx = (ix + g.pad_left).checked_sub(kx * g.dil_w).filter(|t| t % g.stride_w == 0)? / g.stride_w;
    (ty < g.out_h && tx < g.out_w).then(|| (b * g.out_h + ty) * g.out_w + tx)
}

/// Rows `r0..r0 + here` of the transposed im2col matrix (row `t * cg + ch`:
/// channel `ch` of the pixel tap `t` of each output pixel reads from `gathered`,
/// a map on the window's input positions with `cg` channels; 0 in the padding)
/// for output pixels `p0..p0 + len`, into `cols` (row `r` at `r * block`, zeros
/// past `len`). Rows of one tap take consecutive channels of one source pixel,
/// read together; pixels are walked one output-row segment at a time (no
/// division per element).
#[allow(clippy::too_many_arguments)]
fn gather_columns(g: &Window, gathered: &[f32], cg: usize, r0: usize, here: usize, p0: usize, len: usize, block: usize, cols: &mut [f32]) {
    let cg1 = cg.max(1);
    let mut r = 0;
    while r < here {
        let (t, ch0) = ((r0 + r) / cg1, (r0 + r) % cg1);
        let n = (cg1 - ch0).min(here - r);
        let (ky, kx) = (t / g.k_w, t % g.k_w);
        let rows = &mut cols[r * block..(r + n) * block];
        let mut i = 0;
        while i < len {
            let p = p0 + i;
            let (ox0, oy, b) = (p % g.out_w, p / g.out_w % g.out_h, p / (g.out_w * g.out_h));
            let seg = (g.out_w - ox0).min(len - i);
            // The segment's columns whose tap lands inside the input row: j in lo..hi.
            let (lo, hi) = match (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) {
                None => (0, 0),
                Some(_) => {
                    let off = kx * g.dil_w;
                    let first = if off >= g.pad_left { 0 } else { (g.pad_left - off).div_ceil(g.stride_w) };
                    let end = (g.in_w + g.pad_left).saturating_sub(off).div_ceil(g.stride_w);
                    let (lo, hi) = (first.clamp(ox0, ox0 + seg) - ox0, end.clamp(ox0, ox0 + seg) - ox0);
                    (lo, hi.max(lo))
                }
            };
            for k in 0..n {
                let row = &mut rows[k * block + i..k * block + i + seg];
                row[..lo].fill(0.0);
                row[hi..].fill(0.0);
            }
            if lo < hi {
                let y = oy * g.stride_h + ky * g.dil_h - g.pad_top;
                let x0 = (ox0 + lo) * g.stride_w + kx * g.dil_w - g.pad_left;
                let step = g.stride_w * cg;
                let src0 = ((b * g.in_h + y) * g.in_w + x0) * cg + ch0;
                let src = &gathered[src0..src0 + (hi - lo - 1) * step + n];
                if step == 1 {
                    for k in 0..n {
                        let row = &mut rows[k * block + i + lo..k * block + i + hi];
                        row.copy_from_slice(&src[k..k + row.len()]);
                    }
                } else {
                    // Pixel by pixel, its n consecutive channels to the n rows: each
                    // source pixel is read once (not once per row, strided).
                    for j in 0..hi - lo {
                        for (k, &v) in src[j * step..][..n].iter().enumerate() {
                            rows[k * block + i + lo + j] = v;
                        }
                    }
                }
            }
            i += seg;
        }
        for k in 0..n {
            rows[k * block + len..(k + 1) * block].fill(0.0);
        }
        r += n;
    }
}

/// Per-thread scratch of the GEMM gradients.
#[derive(Debug, Clone, Default)]
struct ThreadScratch {
    /// Row pointers of one tile (taps * mr words).
    ptrs: Vec<usize>,
    /// One tile of gathered rows (mr x block) for the weight gradient.
    cols: Vec<f32>,
    /// One tile's product (mr x channels) before it is added to the sum.
    tile: Vec<f32>,
    /// Row pointers of the input gradient run as a forward convolution.
    conv: ConvScratch,
}

/// The input gradient's GEMM: rows = pixels receiving the gradient, taps = filter
/// taps, k = channels of the gradient being spread, n = channels received.
#[derive(Debug, Clone)]
struct InputGemm {
    pk: Packed,
}

impl InputGemm {
    /// For a filter `[k][taps][n]` (the gradient flows from its first to its last axis).
    fn new(n: usize, taps: usize, k: usize) -> InputGemm {
        InputGemm { pk: Packed::new(Isa::for_channels(n), &vec![0.0; n * taps * k], None, n, taps, k) }
    }

    /// Packs `w[kk][t][j]` as `B[t][kk][j]`.
    fn pack(&mut self, w: &[f32]) {
        let (n, taps, k) = (self.pk.n(), self.pk.taps(), self.pk.k());
        for kk in 0..k {
            for t in 0..taps {
                self.pk.set_row(t, kk, &w[(kk * taps + t) * n..][..n]);
            }
        }
    }
}

/// The weight gradient's GEMM: `acc[(t, cg)][cp] = sum_p G[src(p, t)][cg] * P[p][cp]`
/// over the output pixels `p` of a window, in blocks of `block` pixels.
#[derive(Debug, Clone)]
struct WeightGemm {
    /// Pixels per block (the GEMM's inner size).
    block: usize,
    /// One block of the plain operand, `n = cp`, `k = block`.
    pk: Packed,
    /// `[(t, cg)][cp]`: the sum over blocks so far.
    acc: Vec<f32>,
    /// `cp` zeros, packed past the last pixel of a partial block.
    zeros: Vec<f32>,
}

impl WeightGemm {
    fn new(pixels: usize, taps: usize, cg: usize, cp: usize) -> WeightGemm {
        // A block of the packed operand stays within a few hundred KiB (in cache
        // while every tile of rows streams over it).
        let block = (65_536 / cp.max(1)).clamp(256, 8192).min(pixels.max(1));
        let isa = Isa::for_channels(cp);
        WeightGemm { block, pk: Packed::new(isa, &vec![0.0; cp * block], None, cp, 1, block), acc: vec![0.0; taps * cg * cp], zeros: vec![0.0; cp] }
    }

    fn thread_scratch(&self, taps_rows: usize) -> ThreadScratch {
        let mr = self.pk.isa().mr();
        let _ = taps_rows;
        ThreadScratch { ptrs: vec![0; mr], cols: vec![0.0; mr * self.block], tile: vec![0.0; mr * self.pk.n()], conv: ConvScratch::default() }
    }

    /// Sums into `self.acc`. `gathered` is a map on the window's input positions
    /// with `cg` channels, `plain` one on its output positions with `cp`.
    fn run(&mut self, g: &Window, gathered: &[f32], cg: usize, plain: &[f32], scratch: &[Mutex<ThreadScratch>], pool: Option<&ThreadPool>) {
        let cp = self.pk.n();
        let taps = g.k_h * g.k_w;
        let rows = taps * cg;
        let total = pixels(g.batch, g.out_h, g.out_w);
        let mr = self.pk.isa().mr();
        let block = self.block;
        self.acc.fill(0.0);
        let mut p0 = 0;
        while p0 < total {
            let len = block.min(total - p0);
            for i in 0..block {
                let row = if i < len { &plain[(p0 + i) * cp..][..cp] } else { &self.zeros[..] };
                self.pk.set_row(0, i, row);
            }
            let pk = &self.pk;
            for_rows(pool, &mut self.acc, rows, cp, mr, &|part, range, acc| {
                let mut guard = scratch[part].lock().unwrap_or_else(|e| e.into_inner());
                let ThreadScratch { ptrs, cols, tile, .. } = &mut *guard;
                let mut r0 = range.start;
                while r0 < range.end {
                    let here = mr.min(range.end - r0);
                    gather_columns(g, gathered, cg, r0, here, p0, len, block, cols);
                    let cols = &cols[..];
                    let ok = gemm_gathered(pk, 0..here, |m, _| Some(&cols[m * block..(m + 1) * block]), ptrs, Clamp::NONE, &mut tile[..here * cp]);
                    debug_assert!(ok, "weight-gradient GEMM scratch sized for its tiles");
                    let dst = &mut acc[(r0 - range.start) * cp..][..here * cp];
                    for (a, &v) in dst.iter_mut().zip(&tile[..here * cp]) {
                        *a += v;
                    }
                    r0 += here;
                }
            });
            p0 += len;
        }
    }
}

simd_fn! {
    /// Sums `dy` (`rows` rows of `c`) over its rows into `db`, in row order.
    fn bias_grad(dy: &[f32], rows: usize, c: usize, db: &mut [f32]) {
        let db = &mut db[..c];
        db.fill(0.0);
        for px in dy.chunks_exact(c.max(1)).take(rows) {
            for (d, &v) in db.iter_mut().zip(px) {
                *d += v;
            }
        }
    }
}

/// Scratch of [`conv2d_backward`] for one geometry and thread count, made once
/// before training (a step then allocates nothing).
#[derive(Debug)]
pub struct Conv2dScratch {
    g: Window,
    in_c: usize,
    out_c: usize,
    dx: InputGemm,
    /// With stride 1, the input gradient as a forward convolution of `dy`.
    flipped: Option<FlippedConv>,
    dw: WeightGemm,
    threads: Vec<Mutex<ThreadScratch>>,
}

/// A stride-1 convolution's input gradient as the forward convolution kernel
/// computes it: `dx = conv(dy, w')` over a window of `dy` padded by
/// `(k - 1) * dilation - pad` on the top and left (the bottom and right as the
/// sizes give), with `w'[i][ky][kx][o] = w[o][k_h-1-ky][k_w-1-kx][i]`. This runs
/// the forward pass's tiles over whole output rows, with no per-tap lookup of
/// which output pixel a tap came from.
#[derive(Debug)]
struct FlippedConv {
    g: Window,
    pk: Packed,
}

/// The window of a stride-1 convolution's input gradient run as a forward
/// convolution of `dy` (see [`FlippedConv`]), or None when `g` is strided or its
/// padding exceeds the filter's reach.
fn flipped_window(g: &Window) -> Option<Window> {
    if g.stride_h != 1 || g.stride_w != 1 {
        return None;
    }
    let pad_top = (g.k_h.checked_sub(1)? * g.dil_h).checked_sub(g.pad_top)?;
    let pad_left = (g.k_w.checked_sub(1)? * g.dil_w).checked_sub(g.pad_left)?;
    Some(Window { in_h: g.out_h, in_w: g.out_w, out_h: g.in_h, out_w: g.in_w, pad_top, pad_left, ..*g })
}

impl FlippedConv {
    /// For window `g` (the forward convolution's), or None where
    /// [`flipped_window`] is (then the gathered GEMM runs).
    fn new(g: &Window, in_c: usize, out_c: usize) -> Option<FlippedConv> {
        let fg = flipped_window(g)?;
        let taps = g.k_h * g.k_w;
        let pk = Packed::new(Isa::for_channels(in_c), &vec![0.0; in_c * taps * out_c], None, in_c, taps, out_c);
        Some(FlippedConv { g: fg, pk })
    }

    /// Packs `w` (`[out_c][taps][in_c]`) flipped and transposed: tap `t` of the
    /// gradient's convolution is tap `taps - 1 - t` of the forward one.
    fn pack(&mut self, w: &[f32]) {
        let (n, taps, k) = (self.pk.n(), self.pk.taps(), self.pk.k());
        for o in 0..k {
            for t in 0..taps {
                self.pk.set_row(t, o, &w[(o * taps + taps - 1 - t) * n..][..n]);
            }
        }
    }
}

impl Conv2dScratch {
    /// Scratch for a convolution of window `g`, `in_c` -> `out_c` channels, on up
    /// to `threads` threads.
    pub fn new(g: &Window, in_c: usize, out_c: usize, threads: usize) -> Conv2dScratch {
        let taps = g.k_h * g.k_w;
        let dx = InputGemm::new(in_c, taps, out_c);
        let dw = WeightGemm::new(pixels(g.batch, g.out_h, g.out_w), taps, in_c, out_c);
        let mut t = dw.thread_scratch(taps * in_c);
        let mr = dx.pk.isa().mr().max(dw.pk.isa().mr());
        t.ptrs = vec![0; taps.max(1) * mr];
        let flipped = FlippedConv::new(g, in_c, out_c);
        if let Some(f) = &flipped {
            t.conv = f.pk.scratch(&f.g);
        }
        Conv2dScratch { g: *g, in_c, out_c, dx, flipped, dw, threads: (0..threads.max(1)).map(|_| Mutex::new(t.clone())).collect() }
    }

    fn fits(&self, g: &Window, in_c: usize, out_c: usize, pool: Option<&ThreadPool>) -> bool {
        self.g == *g && self.in_c == in_c && self.out_c == out_c && pool.is_none_or(|p| p.threads() <= self.threads.len())
    }
}

/// Backward pass of CONV_2D (`y = conv(x, w) + b`, no activation: the caller
/// applies the fused activation's gradient to `dy` first). `x` is
/// `[batch, in_h, in_w, in_c]`, `w` `[out_c, k_h, k_w, in_c]`, `dy`
/// `[batch, out_h, out_w, out_c]`. Writes the gradients `grads` asks for.
/// Returns false, writing nothing, if a slice is too short or `scratch` was made
/// for another geometry or fewer threads.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_backward(
    g: &Window,
    in_c: usize,
    out_c: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    grads: ConvGrads<'_>,
    scratch: &mut Conv2dScratch,
    pool: Option<&ThreadPool>,
) -> bool {
    let taps = g.k_h * g.k_w;
    let (n_in, n_out) = (pixels(g.batch, g.in_h, g.in_w), pixels(g.batch, g.out_h, g.out_w));
    if !scratch.fits(g, in_c, out_c, pool)
        || x.len() < n_in * in_c
        || w.len() < out_c * taps * in_c
        || dy.len() < n_out * out_c
        || grads.dx.as_ref().is_some_and(|d| d.len() < n_in * in_c)
        || grads.dw.as_ref().is_some_and(|d| d.len() < out_c * taps * in_c)
        || grads.db.as_ref().is_some_and(|d| d.len() < out_c)
    {
        return false;
    }
    let Conv2dScratch { dx: dx_gemm, flipped, dw: dw_gemm, threads, .. } = scratch;
    match (grads.dx, flipped.as_mut()) {
        (Some(dx), Some(f)) => {
            f.pack(w);
            let (pk, fg) = (&f.pk, &f.g);
            // Chunks start on whole tiles (mr pixels): the tiling, and every sum, is
            // the same for any split.
            for_rows(pool, dx, n_in, in_c, pk.isa().mr(), &|part, range, out| {
                let mut s = threads[part].lock().unwrap_or_else(|e| e.into_inner());
                let ok = conv2d_pixels(dy, pk, fg, Clamp::NONE, out, range, &mut s.conv);
                debug_assert!(ok, "input-gradient convolution scratch sized for its geometry");
            });
        }
        (Some(dx), None) => {
            dx_gemm.pack(w);
            let pk = &dx_gemm.pk;
            let mr = pk.isa().mr();
            for_rows(pool, dx, n_in, in_c, mr, &|part, range, out| {
                let mut s = threads[part].lock().unwrap_or_else(|e| e.into_inner());
                let a = |q: usize, t: usize| tap_target(g, q, t / g.k_w, t % g.k_w).map(|p| &dy[p * out_c..][..out_c]);
                let ok = gemm_gathered(pk, range, a, &mut s.ptrs, Clamp::NONE, out);
                debug_assert!(ok, "input-gradient GEMM scratch sized for its tiles");
            });
        }
        (None, _) => {}
    }
    if let Some(dw) = grads.dw {
        dw_gemm.run(g, x, in_c, dy, threads, pool);
        // acc is dW^T, [(tap, in channel)][out channel].
        crate::movement::transpose(&dw_gemm.acc, &[taps * in_c, out_c], &[1, 0], &mut dw[..out_c * taps * in_c]);
    }
    if let Some(db) = grads.db {
        bias_grad(dy, n_out, out_c, db);
    }
    true
}

/// Scratch of [`transpose_conv2d_backward`], made once before training.
#[derive(Debug)]
pub struct TransposeConvScratch {
    g: Window,
    in_c: usize,
    out_c: usize,
    dx: InputGemm,
    dw: WeightGemm,
    threads: Vec<Mutex<ThreadScratch>>,
}

impl TransposeConvScratch {
    /// Scratch for a transposed convolution of `in_c` -> `out_c` channels whose
    /// forward-conv window is `g` (as [`crate::conv::transpose_conv2d`] takes it),
    /// on up to `threads` threads.
    pub fn new(g: &Window, in_c: usize, out_c: usize, threads: usize) -> TransposeConvScratch {
        let g = undilated(g);
        let taps = g.k_h * g.k_w;
        let dx = InputGemm::new(in_c, taps, out_c);
        let dw = WeightGemm::new(pixels(g.batch, g.out_h, g.out_w), taps, out_c, in_c);
        let mut t = dw.thread_scratch(taps * out_c);
        let mr = dx.pk.isa().mr().max(dw.pk.isa().mr());
        t.ptrs = vec![0; taps.max(1) * mr];
        TransposeConvScratch { g, in_c, out_c, dx, dw, threads: (0..threads.max(1)).map(|_| Mutex::new(t.clone())).collect() }
    }
}

/// The forward transposed convolution ignores dilation; so do its gradients.
fn undilated(g: &Window) -> Window {
    Window { dil_h: 1, dil_w: 1, ..*g }
}

/// Backward pass of TRANSPOSE_CONV as [`crate::conv::transpose_conv2d`] computes
/// it: `x` (the op's input) is `[batch, g.out_h, g.out_w, in_c]`, `w`
/// `[out_c, k_h, k_w, in_c]`, `dy` `[batch, g.in_h, g.in_w, out_c]`. `grads.dx`
/// has `x`'s shape. Returns false, writing nothing, on short slices or a
/// mismatched `scratch`.
#[allow(clippy::too_many_arguments)]
pub fn transpose_conv2d_backward(
    g: &Window,
    in_c: usize,
    out_c: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    grads: ConvGrads<'_>,
    scratch: &mut TransposeConvScratch,
    pool: Option<&ThreadPool>,
) -> bool {
    let g = &undilated(g);
    let taps = g.k_h * g.k_w;
    let (n_x, n_y) = (pixels(g.batch, g.out_h, g.out_w), pixels(g.batch, g.in_h, g.in_w));
    if scratch.g != *g
        || scratch.in_c != in_c
        || scratch.out_c != out_c
        || pool.is_some_and(|p| p.threads() > scratch.threads.len())
        || x.len() < n_x * in_c
        || w.len() < out_c * taps * in_c
        || dy.len() < n_y * out_c
        || grads.dx.as_ref().is_some_and(|d| d.len() < n_x * in_c)
        || grads.dw.as_ref().is_some_and(|d| d.len() < out_c * taps * in_c)
        || grads.db.as_ref().is_some_and(|d| d.len() < out_c)
    {
        return false;
    }
    let TransposeConvScratch { dx: dx_gemm, dw: dw_gemm, threads, .. } = scratch;
    if let Some(dx) = grads.dx {
        // dx is the forward convolution of dy by the filter read as [in_c][tap][out_c].
        dx_gemm.pack(w);
        let pk = &dx_gemm.pk;
        let mr = pk.isa().mr();
        for_rows(pool, dx, n_x, in_c, mr, &|part, range, out| {
            let mut s = threads[part].lock().unwrap_or_else(|e| e.into_inner());
            let a = |p: usize, t: usize| tap_source(g, p, t / g.k_w, t % g.k_w).map(|q| &dy[q * out_c..][..out_c]);
            let ok = gemm_gathered(pk, range, a, &mut s.ptrs, Clamp::NONE, out);
            debug_assert!(ok, "input-gradient GEMM scratch sized for its tiles");
        });
    }
    if let Some(dw) = grads.dw {
        dw_gemm.run(g, dy, out_c, x, threads, pool);
        // acc is [tap][out channel][in channel]; the filter is [out][tap][in].
        crate::movement::transpose(&dw_gemm.acc, &[taps, out_c, in_c], &[1, 0, 2], &mut dw[..out_c * taps * in_c]);
    }
    if let Some(db) = grads.db {
        bias_grad(dy, n_y, out_c, db);
    }
    true
}

/// Offset / stride when it divides, as an index below `limit`.
#[inline(always)]
fn step_index(offset: usize, stride: usize, limit: usize) -> Option<usize> {
    let i = if stride == 1 {
        offset
    } else if offset.is_multiple_of(stride) {
        offset / stride
    } else {
        return None;
    };
    (i < limit).then_some(i)
}

/// Output columns `lo..hi` whose tap at filter column offset `off` (`kx * dil_w`)
/// lands inside an input row of the window (`ox * stride_w + off - pad_left` in
/// `0..in_w`).
#[inline(always)]
fn valid_columns(g: &Window, off: usize) -> (usize, usize) {
    let lo = if off >= g.pad_left { 0 } else { (g.pad_left - off).div_ceil(g.stride_w) };
    let hi = (g.in_w + g.pad_left).saturating_sub(off).div_ceil(g.stride_w).min(g.out_w);
    (lo, hi.max(lo))
}

/// `acc[j] += a[j] * b[j]` over `L` lanes (fixed length: one or two vectors).
#[inline(always)]
fn mul_add_lanes<const L: usize>(acc: &mut [f32; L], a: &[f32], b: &[f32]) {
    let (a, b) = (&a[..L], &b[..L]);
    for j in 0..L {
        acc[j] += a[j] * b[j];
    }
}

/// Lanes of the depthwise gradients' channel blocks (two AVX2 vectors, half an
/// AVX-512 one; the compiler keeps a block's sums in registers).
const DW_LANES: usize = 16;

simd_fn! {
    /// One input row (`r` = batch * in_h + iy) of a depthwise convolution's input
    /// gradient: every tap adds the output pixel it came from times its weights.
    /// Per element the taps add up in (ky, kx) order whatever the blocking.
    fn depthwise_dx_row(g: &Window, c: usize, mult: usize, w: &[f32], dy: &[f32], r: usize, orow: &mut [f32]) {
        let oc = c * mult;
        let (b, iy) = (r / g.in_h, r % g.in_h);
        orow.fill(0.0);
        for ky in 0..g.k_h {
            let Some(oy) = (iy + g.pad_top).checked_sub(ky * g.dil_h).and_then(|t| step_index(t, g.stride_h, g.out_h)) else { continue };
            let drow = &dy[(b * g.out_h + oy) * g.out_w * oc..][..g.out_w * oc];
            for kx in 0..g.k_w {
                let off = kx * g.dil_w;
                let (lo, hi) = valid_columns(g, off);
                let wt = &w[(ky * g.k_w + kx) * oc..][..oc];
                // Each output column of the range feeds one input column, in order.
                for ox in lo..hi {
                    let ix = ox * g.stride_w + off - g.pad_left;
                    let px = &mut orow[ix * c..][..c];
                    let d = &drow[ox * oc..][..oc];
                    if mult == 1 {
                        let mut j = 0;
                        while j + 8 <= c {
                            let a: &mut [f32; 8] = (&mut px[j..j + 8]).try_into().expect("8 lanes");
                            mul_add_lanes(a, &d[j..], &wt[j..]);
                            j += 8;
                        }
                        for ((a, &dv), &wv) in px[j..].iter_mut().zip(&d[j..]).zip(&wt[j..]) {
                            *a += dv * wv;
                        }
                    } else {
                        for (ch, a) in px.iter_mut().enumerate() {
                            let mut s = 0.0;
                            for m in 0..mult {
                                s += d[ch * mult + m] * wt[ch * mult + m];
                            }
                            *a += s;
                        }
                    }
                }
            }
        }
    }
}

/// Adds the filter-gradient terms of taps at column offset `off` over output
/// columns `lo..hi` of one output row (`drow`, `oc` per pixel) and the input row
/// it reads (`xrow`, `c` per pixel) to `acc`, `L` channels from `ch` (depth
/// multiplier 1). The sums stay in registers over the columns; each channel adds
/// its terms in column order.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn depthwise_dw_block<const L: usize>(g: &Window, c: usize, drow: &[f32], xrow: &[f32], (lo, hi): (usize, usize), off: usize, ch: usize, acc: &mut [f32]) {
    let a: &mut [f32; L] = (&mut acc[..L]).try_into().expect("L lanes");
    let mut s = *a;
    for ox in lo..hi {
        let ix = ox * g.stride_w + off - g.pad_left;
        mul_add_lanes(&mut s, &drow[ox * c + ch..], &xrow[ix * c + ch..]);
    }
    *a = s;
}

simd_fn! {
    /// Filter-gradient sums of a depthwise convolution for filter channels `r`,
    /// into `acc` laid out [tap][channel in range], over every output pixel in
    /// order (output row by output row): for each (tap, channel) one running sum
    /// over the pixels in that order, whatever the blocking of the loops.
    fn depthwise_dw_range(g: &Window, c: usize, mult: usize, x: &[f32], dy: &[f32], r: std::ops::Range<usize>, acc: &mut [f32]) {
        let oc = c * mult;
        let width = r.len();
        acc.fill(0.0);
        for row in 0..g.batch * g.out_h {
            let (b, oy) = (row / g.out_h, row % g.out_h);
            let drow = &dy[row * g.out_w * oc..][..g.out_w * oc];
            for ky in 0..g.k_h {
                let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
                let xrow = &x[(b * g.in_h + iy) * g.in_w * c..][..g.in_w * c];
                for kx in 0..g.k_w {
                    let off = kx * g.dil_w;
                    let cols = valid_columns(g, off);
                    let a = &mut acc[(ky * g.k_w + kx) * width..][..width];
                    if mult == 1 {
                        let mut j = 0;
                        while j + DW_LANES <= width {
                            depthwise_dw_block::<DW_LANES>(g, c, drow, xrow, cols, off, r.start + j, &mut a[j..]);
                            j += DW_LANES;
                        }
                        while j + 8 <= width {
                            depthwise_dw_block::<8>(g, c, drow, xrow, cols, off, r.start + j, &mut a[j..]);
                            j += 8;
                        }
                        while j < width {
                            depthwise_dw_block::<1>(g, c, drow, xrow, cols, off, r.start + j, &mut a[j..]);
                            j += 1;
                        }
                    } else {
                        for ox in cols.0..cols.1 {
                            let ix = ox * g.stride_w + off - g.pad_left;
                            let d = &drow[ox * oc + r.start..][..width];
                            let xs = &xrow[ix * c..][..c];
                            for (j, (s, &dv)) in a.iter_mut().zip(d).enumerate() {
                                *s += dv * xs[(r.start + j) / mult];
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Backward pass of DEPTHWISE_CONV_2D (any depth multiplier `mult`): `x` is
/// `[batch, in_h, in_w, c]`, `w` `[1, k_h, k_w, c * mult]`, `dy`
/// `[batch, out_h, out_w, c * mult]`. `scratch` holds `k_h * k_w * c * mult`
/// floats (the filter gradient is summed there by channel ranges, one per
/// thread). Returns false, writing nothing, if a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_conv2d_backward(
    g: &Window,
    c: usize,
    mult: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    grads: ConvGrads<'_>,
    scratch: &mut [f32],
    pool: Option<&ThreadPool>,
) -> bool {
    let taps = g.k_h * g.k_w;
    let oc = c * mult;
    let (n_in, n_out) = (pixels(g.batch, g.in_h, g.in_w), pixels(g.batch, g.out_h, g.out_w));
    if x.len() < n_in * c
        || w.len() < taps * oc
        || dy.len() < n_out * oc
        || scratch.len() < taps * oc
        || grads.dx.as_ref().is_some_and(|d| d.len() < n_in * c)
        || grads.dw.as_ref().is_some_and(|d| d.len() < taps * oc)
        || grads.db.as_ref().is_some_and(|d| d.len() < oc)
    {
        return false;
    }
    if let Some(dx) = grads.dx {
        let row_len = g.in_w * c;
        if let Some(fg) = flipped_window(g).filter(|fg| mult == 1 && fg.indices_fit(c)) {
            // Stride 1, multiplier 1: the input gradient is the forward depthwise
            // convolution of dy by the filter flipped in both axes (see
            // `FlippedConv`), on the forward kernel's register tiles. The flipped
            // filter goes in `scratch` until the filter gradient needs it.
            let flipped = &mut scratch[..taps * c];
            for t in 0..taps {
                flipped[t * c..(t + 1) * c].copy_from_slice(&w[(taps - 1 - t) * c..][..c]);
            }
            let flipped = &*flipped;
            for_rows(pool, dx, g.batch * g.in_h, row_len, 1, &|_, range, out| {
                crate::conv::depthwise_conv2d(dy, c, 1, flipped, None, &fg, Clamp::NONE, out, range);
            });
        } else {
            // One input row per task row: gather from the output pixels its taps
            // reach, row by row of taps (divisions only for strides above 1).
            for_rows(pool, dx, g.batch * g.in_h, row_len, 1, &|_, range, out| {
                for (r, orow) in range.zip(out.chunks_exact_mut(row_len.max(1))) {
                    depthwise_dx_row(g, c, mult, w, dy, r, orow);
                }
            });
        }
    }
    if let Some(dw) = grads.dw {
        // Filter channels split over the threads; each range's sums, laid out
        // [tap][channel in range], run over every output pixel in order.
        let n = parts(pool, oc, 1);
        let base = Base::new(scratch);
        let task = |i: usize| {
            let r = crate::parallel::chunk(oc, n, i);
            // SAFETY: part i owns floats [taps * r.start, taps * r.end) of the
            // scratch (ranges of different parts are disjoint, within taps * oc).
            let acc = unsafe { base.range(taps * r.start, taps * r.len()) };
            depthwise_dw_range(g, c, mult, x, dy, r, acc);
        };
        match pool {
            Some(pl) if n > 1 => pl.run(n, &task),
            _ => (0..n).for_each(task),
        }
        for i in 0..n {
            let r = crate::parallel::chunk(oc, n, i);
            let acc = &scratch[taps * r.start..taps * r.end];
            for t in 0..taps {
                dw[t * oc + r.start..t * oc + r.end].copy_from_slice(&acc[t * r.len()..(t + 1) * r.len()]);
            }
        }
    }
    if let Some(db) = grads.db {
        bias_grad(dy, n_out, oc, db);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{out_size_and_pad, pack_conv_weights};
    use crate::grad::check::{assert_grad, bits_equal_across_threads, Rng};

    /// A random window: odd sizes, strides 1-2, dilation 1-2, SAME or VALID.
    fn window(rng: &mut Rng, allow_dilation: bool) -> Window {
        loop {
            let (ih, iw) = (rng.size(1, 9), rng.size(1, 9));
            let (kh, kw) = (rng.size(1, 3), rng.size(1, 3));
            let (sh, sw) = (rng.size(1, 2), rng.size(1, 2));
            let (dh, dw) = if allow_dilation { (rng.size(1, 2), rng.size(1, 2)) } else { (1, 1) };
            let same = rng.size(0, 1) == 1;
            let (Some((oh, pt)), Some((ow, pl))) = (out_size_and_pad(ih, kh, sh, dh, same), out_size_and_pad(iw, kw, sw, dw, same)) else { continue };
            if oh == 0 || ow == 0 {
                continue;
            }
            let batch = rng.size(1, 2);
            return Window {
                batch,
                in_h: ih,
                in_w: iw,
                out_h: oh,
                out_w: ow,
                k_h: kh,
                k_w: kw,
                stride_h: sh,
                stride_w: sw,
                dil_h: dh,
                dil_w: dw,
                pad_top: pt,
                pad_left: pl,
            };
        }
    }

    fn conv_forward(g: &Window, in_c: usize, out_c: usize, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
        let mut y = vec![0.0; g.batch * g.out_h * g.out_w * out_c];
        crate::conv::conv2d(x, in_c, &pack_conv_weights(w, out_c, g.k_h, g.k_w, in_c), Some(b), out_c, g, Clamp::NONE, &mut y);
        y
    }

    #[test]
    fn conv2d_gradients_match_finite_differences() {
        let mut rng = Rng::new(11);
        for case in 0..24 {
            let g = window(&mut rng, true);
            let (in_c, out_c) = (rng.size(1, 5), rng.size(1, 20));
            let taps = g.k_h * g.k_w;
            let x = rng.vec(g.batch * g.in_h * g.in_w * in_c);
            let w = rng.vec(out_c * taps * in_c);
            let b = rng.vec(out_c);
            let dy = rng.vec(g.batch * g.out_h * g.out_w * out_c);
            let run = |threads: usize| {
                let pool = ThreadPool::new(threads);
                let mut s = Conv2dScratch::new(&g, in_c, out_c, threads);
                let (mut dx, mut dw, mut db) = (vec![f32::NAN; x.len()], vec![f32::NAN; w.len()], vec![f32::NAN; out_c]);
                assert!(conv2d_backward(
                    &g,
                    in_c,
                    out_c,
                    &x,
                    &w,
                    &dy,
                    ConvGrads { dx: Some(&mut dx), dw: Some(&mut dw), db: Some(&mut db) },
                    &mut s,
                    Some(&pool)
                ));
                vec![dx, dw, db]
            };
            let got = bits_equal_across_threads(run);
            let what = format!("case {case}: {g:?} in_c {in_c} out_c {out_c}");
            assert_grad(&what, &x, &got[0], &dy, |x| conv_forward(&g, in_c, out_c, x, &w, &b), true);
            assert_grad(&what, &w, &got[1], &dy, |w| conv_forward(&g, in_c, out_c, &x, w, &b), true);
            assert_grad(&what, &b, &got[2], &dy, |b| conv_forward(&g, in_c, out_c, &x, &w, b), true);
        }
    }

    #[test]
    fn conv2d_gradients_over_several_pixel_blocks() {
        // More output pixels than one weight-gradient block: the blocks' sums add up.
        let mut rng = Rng::new(5);
        let (ih, iw) = (40, 37);
        let (oh, pt) = out_size_and_pad(ih, 3, 1, 1, true).unwrap();
        let (ow, pl) = out_size_and_pad(iw, 3, 1, 1, true).unwrap();
        let g = Window {
            batch: 2,
            in_h: ih,
            in_w: iw,
            out_h: oh,
            out_w: ow,
            k_h: 3,
            k_w: 3,
            stride_h: 1,
            stride_w: 1,
            dil_h: 1,
            dil_w: 1,
            pad_top: pt,
            pad_left: pl,
        };
        let (in_c, out_c) = (3, 40);
        let x = rng.vec(g.batch * ih * iw * in_c);
        let w = rng.vec(out_c * 9 * in_c);
        let b = rng.vec(out_c);
        let dy = rng.vec(g.batch * oh * ow * out_c);
        let mut s = Conv2dScratch::new(&g, in_c, out_c, 1);
        assert!(s.dw.block < g.batch * oh * ow);
        let mut dw = vec![0.0; w.len()];
        assert!(conv2d_backward(&g, in_c, out_c, &x, &w, &dy, ConvGrads { dw: Some(&mut dw), ..Default::default() }, &mut s, None));
        assert_grad("blocks", &w, &dw, &dy, |w| conv_forward(&g, in_c, out_c, &x, w, &b), true);
    }

    #[test]
    fn transpose_conv_gradients_match_finite_differences() {
        let mut rng = Rng::new(12);
        for case in 0..16 {
            let g = window(&mut rng, false);
            let (in_c, out_c) = (rng.size(1, 6), rng.size(1, 5));
            let taps = g.k_h * g.k_w;
            // The op's input has the window's output size, its output the window's input size.
            let x = rng.vec(g.batch * g.out_h * g.out_w * in_c);
            let w = rng.vec(out_c * taps * in_c);
            let b = rng.vec(out_c);
            let dy = rng.vec(g.batch * g.in_h * g.in_w * out_c);
            let fwd = |x: &[f32], w: &[f32], b: &[f32]| {
                let mut y = vec![0.0; dy.len()];
                crate::conv::transpose_conv2d(x, in_c, w, Some(b), out_c, &g, Clamp::NONE, &mut y);
                y
            };
            let run = |threads: usize| {
                let pool = ThreadPool::new(threads);
                let mut s = TransposeConvScratch::new(&g, in_c, out_c, threads);
                let (mut dx, mut dw, mut db) = (vec![f32::NAN; x.len()], vec![f32::NAN; w.len()], vec![f32::NAN; out_c]);
                let grads = ConvGrads { dx: Some(&mut dx), dw: Some(&mut dw), db: Some(&mut db) };
                assert!(transpose_conv2d_backward(&g, in_c, out_c, &x, &w, &dy, grads, &mut s, Some(&pool)));
                vec![dx, dw, db]
            };
            let got = bits_equal_across_threads(run);
            let what = format!("case {case}: {g:?} in_c {in_c} out_c {out_c}");
            assert_grad(&what, &x, &got[0], &dy, |x| fwd(x, &w, &b), true);
            assert_grad(&what, &w, &got[1], &dy, |w| fwd(&x, w, &b), true);
            assert_grad(&what, &b, &got[2], &dy, |b| fwd(&x, &w, b), true);
        }
    }

    #[test]
    fn depthwise_gradients_match_finite_differences() {
        let mut rng = Rng::new(13);
        for case in 0..24 {
            let g = window(&mut rng, true);
            let c = rng.size(1, 20);
            let mult = [1, 1, 2, 3][case % 4];
            let oc = c * mult;
            let taps = g.k_h * g.k_w;
            let x = rng.vec(g.batch * g.in_h * g.in_w * c);
            let w = rng.vec(taps * oc);
            let b = rng.vec(oc);
            let dy = rng.vec(g.batch * g.out_h * g.out_w * oc);
            let fwd = |x: &[f32], w: &[f32], b: &[f32]| {
                let mut y = vec![0.0; dy.len()];
                crate::conv::depthwise_conv2d(x, c, mult, w, Some(b), &g, Clamp::NONE, &mut y, 0..g.batch * g.out_h);
                y
            };
            let run = |threads: usize| {
                let pool = ThreadPool::new(threads);
                let mut s = vec![0.0; taps * oc];
                let (mut dx, mut dw, mut db) = (vec![f32::NAN; x.len()], vec![f32::NAN; w.len()], vec![f32::NAN; oc]);
                let grads = ConvGrads { dx: Some(&mut dx), dw: Some(&mut dw), db: Some(&mut db) };
                assert!(depthwise_conv2d_backward(&g, c, mult, &x, &w, &dy, grads, &mut s, Some(&pool)));
                vec![dx, dw, db]
            };
            let got = bits_equal_across_threads(run);
            let what = format!("case {case}: {g:?} c {c} mult {mult}");
            assert_grad(&what, &x, &got[0], &dy, |x| fwd(x, &w, &b), true);
            assert_grad(&what, &w, &got[1], &dy, |w| fwd(&x, w, &b), true);
            assert_grad(&what, &b, &got[2], &dy, |b| fwd(&x, &w, b), true);
        }
    }

    #[test]
    fn short_buffers_and_foreign_scratch_are_refused() {
        let g =
            Window { batch: 1, in_h: 4, in_w: 4, out_h: 4, out_w: 4, k_h: 3, k_w: 3, stride_h: 1, stride_w: 1, dil_h: 1, dil_w: 1, pad_top: 1, pad_left: 1 };
        let (x, w, dy) = (vec![0.0; 16 * 2], vec![0.0; 3 * 9 * 2], vec![0.0; 16 * 3]);
        let mut dx = [0.0; 16 * 2];
        let mut s = Conv2dScratch::new(&g, 2, 3, 1);
        assert!(!conv2d_backward(&g, 2, 3, &x[..31], &w, &dy, ConvGrads::default(), &mut s, None));
        assert!(!conv2d_backward(&g, 2, 3, &x, &w, &dy, ConvGrads { dx: Some(&mut dx[..5]), ..Default::default() }, &mut s, None));
        let other = Window { stride_h: 2, ..g };
        assert!(!conv2d_backward(&other, 2, 3, &x, &w, &dy, ConvGrads::default(), &mut s, None));
        assert!(!conv2d_backward(&g, 2, 3, &x, &w, &dy, ConvGrads::default(), &mut s, Some(&ThreadPool::new(2))));
        assert!(!depthwise_conv2d_backward(&g, 2, 1, &x, &w, &dy[..3], ConvGrads::default(), &mut [0.0; 18], None));
    }
}
