//! First layers of image models: a float convolution over 1-4 input channels
//! (RGB, RGBA, gray) to at most 64 output channels, any filter size, stride and
//! dilation, with AVX-512.
//!
//! The implicit GEMM spends most of its time there on the gather (an inner size
//! of 9-27 per tile, a row pointer per pixel and tap) and, for 8, 24 or 40
//! output channels, a quarter or half of its lanes on padding. Here output
//! channels run along the lanes and each tap's input is broadcast from memory
//! (an FMA operand), a block of pixels per tap: the block's pixels are 16 bytes
//! apart in a copy of the input rows with each pixel widened to 4 floats and the
//! columns split by phase of the stride, so one base address and constant
//! displacements reach every pixel of every tap. Channel counts of 8 mod 16 pair
//! pixels: a pixel pair's 2n outputs are whole vectors, the one vector that
//! straddles the two pixels reading a broadcast of each (a masked broadcast).

use super::Window;
use crate::aligned::LineVec;
use crate::Clamp;

/// Most input channels [`FirstLayer`] takes (a pixel's channels fit one 16-byte slot).
pub const MAX_IN: usize = 4;
/// Most output channels [`FirstLayer`] takes (at most four vectors per pixel).
pub const MAX_OUT: usize = 64;
/// Most taps (filter positions times input channels) it takes: its tap list is
/// scratch sized from them, and larger filters are no first layer.
pub const MAX_TAPS: usize = 1024;

/// Register blocking for a channel count: `vectors` output vectors per unit of
/// `unit` pixels (1, or 2 for pairs), `block` units per call of the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Blocking {
    vectors: usize,
    unit: usize,
    block: usize,
}

impl Blocking {
    /// About 24 accumulators for any channel count, the rest of the 32 registers
    /// for the weights of a tap and the straddling broadcast.
    fn of(n: usize) -> Option<Blocking> {
        match n {
            8 => Some(Blocking { vectors: 1, unit: 2, block: 12 }),
            24 => Some(Blocking { vectors: 3, unit: 2, block: 8 }),
            40 => Some(Blocking { vectors: 5, unit: 2, block: 5 }),
            1..=MAX_OUT => {
                let vectors = n.div_ceil(16);
                Some(Blocking { vectors, unit: 1, block: [24, 12, 8, 6][vectors - 1] })
            }
            _ => None,
        }
    }

    /// Output pixels per kernel call.
    fn pixels(self) -> usize {
        self.unit * self.block
    }
}

/// Weights of a first-layer convolution packed for [`FirstLayer::run`]: per tap
/// (filter row, column, input channel) the output vectors of one unit of pixels.
#[derive(Debug, Clone)]
pub struct FirstLayer {
    n: usize,
    c: usize,
    kh: usize,
    kw: usize,
    blocking: Blocking,
    /// `[kh][kw][c][vectors][16]`.
    w: LineVec,
    /// `[vectors][16]`.
    bias: LineVec,
}

/// Per-thread scratch of [`FirstLayer::run`]: the widened input rows and the tap list.
#[derive(Debug, Clone, Default)]
pub struct FirstScratch {
    /// `kh` slots of `stride_w` phases of `phase_len` pixels of 4 floats.
    lines: Vec<f32>,
    /// Which input row (batch * in_h + y) each slot holds.
    tags: Vec<usize>,
    /// Per tap: byte offset of its input in `lines` (for output pixel 0), and of its weights.
    // Read by the x86-64 kernel only (elsewhere `run` declines).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    taps: Vec<(usize, usize)>,
    phase_len: usize,
    /// The window whose padding columns `lines` holds as zeros (None: not zeroed yet).
    // Read by the x86-64 kernel only, as `taps`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    zeroed_for: Option<Window>,
}

impl FirstLayer {
    /// Packs OHWI weights `[n][kh][kw][c]` and an optional bias, or `None` when
    /// the shape is outside the family (more than [`MAX_IN`] input or
    /// [`MAX_OUT`] output channels, too many taps) or the CPU has no AVX-512F.
    /// Panics if `w` or `bias` is shorter than the shape.
    pub fn new(w: &[f32], bias: Option<&[f32]>, n: usize, kh: usize, kw: usize, c: usize) -> Option<FirstLayer> {
        if !cfg!(target_arch = "x86_64") || !crate::level::has_avx512f() || c == 0 || c > MAX_IN || kh == 0 || kw == 0 {
            return None;
        }
        let taps = kh.checked_mul(kw)?.checked_mul(c)?;
        if taps > MAX_TAPS {
            return None;
        }
        let blocking = Blocking::of(n)?;
        let v = blocking.vectors * 16;
        let mut p = FirstLayer { n, c, kh, kw, blocking, w: LineVec::zeroed(taps * v), bias: LineVec::zeroed(v) };
        p.repack(w, bias);
        Some(p)
    }

    /// Output pixels one kernel call computes: rows narrower than this compute
    /// spare pixels and store through a buffer (the implicit GEMM measured faster
    /// there: kws_dscnn's 5-pixel rows under a 10x4 filter ran 15% slower).
    pub fn block_pixels(&self) -> usize {
        self.blocking.pixels()
    }

    /// Repacks new weights into the same layout (non-constant weights, each run).
    /// Panics if `w` or `bias` is shorter than the shape.
    pub fn repack(&mut self, w: &[f32], bias: Option<&[f32]>) {
        let (n, taps) = (self.n, self.kh * self.kw * self.c);
        assert!(w.len() >= n * taps && bias.is_none_or(|b| b.len() >= n), "FirstLayer: weights or bias shorter than the shape");
        let v = self.blocking.vectors * 16;
        // Lane l of a unit's vectors is output channel l % n (pairs: the second
        // pixel's channels follow the first's); single pixels pad with zeros.
        let channel = |l: usize| if self.blocking.unit == 2 { Some(l % n) } else { (l < n).then_some(l) };
        for t in 0..taps {
            for l in 0..v {
                self.w[t * v + l] = channel(l).map_or(0.0, |o| w[o * taps + t]);
            }
        }
        for l in 0..v {
            self.bias[l] = channel(l).and_then(|o| bias.map(|b| b[o])).unwrap_or(0.0);
        }
    }

    /// Pixels per input slot's phase: enough for every output column's window,
    /// the last block's spare pixels included (None if that overflows).
    fn phase_len(&self, g: &Window) -> Option<usize> {
        let reach = (self.kw - 1).checked_mul(g.dil_w)? / g.stride_w.max(1);
        let cols = g.pad_left.checked_add(g.in_w)?.div_ceil(g.stride_w.max(1));
        Some(g.out_w.max(self.blocking.pixels()).checked_add(reach)?.max(cols))
    }

    /// Scratch for [`FirstLayer::run`] over `g` (empty if `g` does not fit).
    pub fn scratch(&self, g: &Window) -> FirstScratch {
        let Some(len) = self.phase_len(g) else { return FirstScratch::default() };
        let floats = crate::product(&[self.kh, g.stride_w, len, 4]).unwrap_or(0);
        FirstScratch {
            lines: vec![0.0; floats],
            tags: vec![usize::MAX; self.kh],
            taps: Vec::with_capacity(self.kh * self.kw * self.c),
            phase_len: len,
            zeroed_for: None,
        }
    }

    /// Floats of scratch [`FirstLayer::scratch`] allocates for `g` (None if that overflows),
    /// for a caller to bound first.
    pub fn scratch_len(&self, g: &Window) -> Option<usize> {
        crate::product(&[self.kh, g.stride_w, self.phase_len(g)?, 4])
    }

    /// Convolution over output rows `rows` (row = batch * out_h + oy), which `out`
    /// holds. Returns false, writing nothing, if the geometry does not match the
    /// weights or the scratch, or a slice is too short for it.
    #[allow(clippy::too_many_arguments)]
    pub fn run(&self, input: &[f32], g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>, scratch: &mut FirstScratch) -> bool {
        let (n, c) = (self.n, self.c);
        let len = scratch.phase_len;
        if g.k_h != self.kh
            || g.k_w != self.kw
            || g.stride_w == 0
            || g.stride_h == 0
            || !g.indices_fit(c)
            || self.phase_len(g) != Some(len)
            || !crate::holds(scratch.lines.len(), &[self.kh, g.stride_w, len, 4])
            || scratch.tags.len() < self.kh
            || !crate::holds(input.len(), &[g.batch, g.in_h, g.in_w, c])
            || !crate::holds(out.len(), &[rows.len(), g.out_w, n])
            || crate::product(&[g.batch, g.out_h]).is_none_or(|total| rows.end > total)
        {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        if crate::level::cpu_avx512f() {
            self.rows(input, g, clamp, out, rows, scratch);
            return true;
        }
        let _ = clamp;
        false
    }

    /// The rows of [`FirstLayer::run`], its checks passed.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    fn rows(&self, input: &[f32], g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>, scratch: &mut FirstScratch) {
        let (n, c, kh, kw) = (self.n, self.c, self.kh, self.kw);
        let FirstScratch { lines, tags, taps, phase_len: len, zeroed_for } = scratch;
        let len = *len;
        let slot = g.stride_w * len * 4;
        // Only input columns are ever written, the same ones for every call with this
        // window: its padding columns stay zero from one call to the next (an epilogue
        // makes a call per few rows), and are cleared once per window.
        if *zeroed_for != Some(*g) {
            lines.fill(0.0);
            *zeroed_for = Some(*g);
        }
        tags.fill(usize::MAX);
        let v = self.blocking.vectors * 16;
        let px = self.blocking.pixels();
        for r in rows.clone() {
            let (b, oy) = (r / g.out_h, r % g.out_h);
            let row_of = |ky: usize| (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h).map(|y| b * g.in_h + y);
            // Each input row the filter reaches gets a slot (rows kept from the
            // previous output row stay where they are).
            taps.clear();
            for ky in 0..kh {
                let Some(tag) = row_of(ky) else { continue };
                let s = match tags[..kh].iter().position(|&t| t == tag) {
                    Some(s) => s,
                    None => {
                        let free = (0..kh).find(|&s| !(0..kh).any(|k| row_of(k) == Some(tags[s]))).expect("a slot per filter row");
                        tags[free] = tag;
                        widen_row(&input[tag * g.in_w * c..][..g.in_w * c], c, g, len, &mut lines[free * slot..][..slot]);
                        free
                    }
                };
                for kx in 0..kw {
                    let (phase, off) = ((kx * g.dil_w) % g.stride_w, (kx * g.dil_w) / g.stride_w);
                    for ci in 0..c {
                        let at = s * slot + (phase * len + off) * 4 + ci;
                        taps.push((at * 4, ((ky * kw + kx) * c + ci) * v * 4));
                    }
                }
            }
            let o = &mut out[(r - rows.start) * g.out_w * n..][..g.out_w * n];
            let mut ox = 0;
            while ox < g.out_w {
                // The last block ends at the row's end, overlapping the one before
                // it (its pixels come out the same); a row narrower than a block
                // computes spare pixels past it and stores only its own.
                let start = if ox + px > g.out_w { g.out_w.saturating_sub(px) } else { ox };
                let valid = px.min(g.out_w - start);
                // SAFETY: AVX-512F checked by the caller. Every tap reads pixels
                // start..start + px (< phase_len, see `phase_len`) of one phase of a
                // slot of `lines`, lanes < 4; weight offsets are taps of `self.w`;
                // the stores cover `valid` pixels of `n` floats from `start` in `o`.
                unsafe { self.block(lines.as_ptr(), start * 16, taps, clamp, o.as_mut_ptr().add(start * n), valid) };
                ox = start + valid;
            }
        }
    }

    /// One block of pixels on the kernel for this channel count.
    ///
    /// # Safety
    /// AVX-512F; `lines + a + x0 + 16 * p + 4 * (lanes < 4)` readable for every tap
    /// `(a, _)` and pixel `p` of the block; `out` writable for `valid * n` floats.
    #[cfg(target_arch = "x86_64")]
    unsafe fn block(&self, lines: *const f32, x0: usize, taps: &[(usize, usize)], clamp: Clamp, out: *mut f32, valid: usize) {
        let k = Block { lines: lines.cast(), x0, taps, w: self.w.as_ptr().cast(), bias: self.bias.as_ptr(), n: self.n, clamp, out, valid };
        let Blocking { vectors, unit, .. } = self.blocking;
        // SAFETY: the caller's contract; the blocking matches `Blocking::of(n)`.
        unsafe {
            match (vectors, unit) {
                (1, 2) => x86::block::<1, 12, true>(&k),
                (3, 2) => x86::block::<3, 8, true>(&k),
                (5, 2) => x86::block::<5, 5, true>(&k),
                (1, _) => x86::block::<1, 24, false>(&k),
                (2, _) => x86::block::<2, 12, false>(&k),
                (3, _) => x86::block::<3, 8, false>(&k),
                _ => x86::block::<4, 6, false>(&k),
            }
        }
    }
}

/// Copies one input row into a slot: padded column `x + pad_left` goes to phase
/// `(x + pad_left) % stride_w`, pixel `(x + pad_left) / stride_w`, as 4 floats
/// (lanes past `c` are never read).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn widen_row(src: &[f32], c: usize, g: &Window, len: usize, slot: &mut [f32]) {
    let s = g.stride_w;
    // Phase by phase: its columns are `s` input pixels apart and land on
    // consecutive slots. Whole 16-byte copies while 4 floats of the source remain
    // (the lanes past `c` take the next pixel's values: never read), `c` floats
    // for the last pixels.
    let whole = src.len().checked_sub(4).map_or(0, |r| r / c + 1).min(g.in_w);
    for phase in 0..s {
        // The first input column in this phase, and its slot.
        let x0 = (phase + s - g.pad_left % s) % s;
        let at0 = (x0 + g.pad_left) / s;
        let dst = &mut slot[phase * len * 4..(phase + 1) * len * 4];
        let fit = len.saturating_sub(at0);
        let mut x = x0;
        for d in dst[at0.min(len) * 4..].chunks_exact_mut(4).take(fit) {
            if x >= whole {
                if x < g.in_w {
                    d[..c].copy_from_slice(&src[x * c..x * c + c]);
                    x += s;
                    continue;
                }
                break;
            }
            let from = &src[x * c..x * c + 4];
            // Four plain moves: the compiler merges them into one 16-byte copy
            // (a slice copy of a run-time-sized chunk became a call to memcpy).
            for (a, &b) in d.iter_mut().zip(from) {
                *a = b;
            }
            x += s;
        }
    }
}

/// One kernel call's operands.
#[cfg(target_arch = "x86_64")]
struct Block<'a> {
    lines: *const u8,
    /// Byte offset of the block's first pixel in each phase.
    x0: usize,
    taps: &'a [(usize, usize)],
    w: *const u8,
    bias: *const f32,
    n: usize,
    clamp: Clamp,
    out: *mut f32,
    valid: usize,
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Block;
    use std::arch::x86_64::*;

    /// `B` units of pixels (pairs when `PAIR`) times `V` output vectors, every tap.
    ///
    /// # Safety
    /// AVX-512F; see [`super::FirstLayer::block`].
    // The loops index register arrays in step; iterators would obscure that.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn block<const V: usize, const B: usize, const PAIR: bool>(k: &Block<'_>) {
        // The vector that straddles a pair's two pixels.
        let mid = if PAIR { (V - 1) / 2 } else { V };
        let unit = if PAIR { 2 } else { 1 };
        let mut acc = [[_mm512_setzero_ps(); V]; B];
        // SAFETY: the bias holds V vectors; every tap's input and weight reads
        // are inside the buffers (the caller's contract); the stores write
        // `valid` pixels of `n` floats from `out`.
        unsafe {
            for j in 0..V {
                let bj = _mm512_loadu_ps(k.bias.add(16 * j));
                for b in 0..B {
                    acc[b][j] = bj;
                }
            }
            for &(a, w) in k.taps {
                let x = k.lines.add(a + k.x0).cast::<f32>();
                let wp = k.w.add(w).cast::<f32>();
                let mut wv = [_mm512_setzero_ps(); V];
                for j in 0..V {
                    wv[j] = _mm512_load_ps(wp.add(16 * j));
                }
                for b in 0..B {
                    let first = _mm512_set1_ps(*x.add(4 * unit * b));
                    if PAIR {
                        let second = _mm512_set1_ps(*x.add(4 * (2 * b + 1)));
                        for j in 0..V {
                            let xv = if j < mid {
                                first
                            } else if j == mid {
                                _mm512_mask_blend_ps(0xff00, first, second)
                            } else {
                                second
                            };
                            acc[b][j] = _mm512_fmadd_ps(xv, wv[j], acc[b][j]);
                        }
                    } else {
                        for j in 0..V {
                            acc[b][j] = _mm512_fmadd_ps(first, wv[j], acc[b][j]);
                        }
                    }
                }
            }
            let (lo, hi) = (_mm512_set1_ps(k.clamp.min), _mm512_set1_ps(k.clamp.max));
            let n = k.n;
            if k.valid == B * unit {
                for b in 0..B {
                    let o = k.out.add(b * unit * n);
                    for j in 0..V {
                        let lanes = (unit * n - 16 * j).min(16);
                        let m: __mmask16 = if lanes >= 16 { 0xffff } else { ((1u32 << lanes) - 1) as u16 };
                        _mm512_mask_storeu_ps(o.add(16 * j), m, _mm512_min_ps(_mm512_max_ps(acc[b][j], lo), hi));
                    }
                }
            } else {
                // A row narrower than a block: through a buffer, `valid` pixels out.
                let mut buf = [0.0f32; 16 * 6 * 5];
                for b in 0..B {
                    for j in 0..V {
                        let lanes = (unit * n - 16 * j).min(16);
                        let m: __mmask16 = if lanes >= 16 { 0xffff } else { ((1u32 << lanes) - 1) as u16 };
                        _mm512_mask_storeu_ps(buf.as_mut_ptr().add(b * unit * n + 16 * j), m, _mm512_min_ps(_mm512_max_ps(acc[b][j], lo), hi));
                    }
                }
                std::ptr::copy_nonoverlapping(buf.as_ptr(), k.out, k.valid * n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::out_size_and_pad;

    /// The definition (the convolution module's naive sum), then bias and clamp.
    fn naive(input: &[f32], c: usize, w: &[f32], bias: Option<&[f32]>, n: usize, g: &Window, clamp: Clamp) -> Vec<f32> {
        let mut out = crate::conv::tests::naive_conv(input, c, w, n, g);
        for (i, v) in out.iter_mut().enumerate() {
            *v = clamp.apply(*v + bias.map_or(0.0, |b| b[i % n]));
        }
        out
    }

    /// Randomized first-layer shapes (1-4 input channels, every blocking's channel
    /// counts and odd ones, filters 1-7, strides 1-3, dilation, SAME and VALID
    /// padding and explicit leading pads, maps narrower than a block) against the
    /// naive sum, over row ranges split as threads would; under AVX2 and baseline
    /// the kernel declines (`new` is `None`).
    #[test]
    fn first_layer_matches_naive() {
        crate::level::each(|l| {
            let mut seed = 0x2545_f491_u64;
            let mut rnd = |m: usize| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % m as u64) as usize
            };
            let mut ran = 0;
            for case in 0..160 {
                let c = 1 + rnd(4);
                let n = [8, 16, 24, 32, 40, 48, 64, 3, 12, 20, 56, 1, 33][rnd(13)];
                let (kh, kw) = if case % 5 == 0 { (1 + rnd(7), 1 + rnd(7)) } else { [(3, 3), (5, 5), (7, 7), (1, 1)][rnd(4)] };
                let (sh, sw) = (1 + rnd(3), 1 + rnd(3));
                let (dh, dw) = if case % 7 == 0 { (1 + rnd(2), 1 + rnd(2)) } else { (1, 1) };
                // Every eighth map is at most 3 pixels wide: rows shorter than one 16-byte copy.
                let (in_h, in_w) = (1 + rnd(20), if case % 8 == 0 { 1 + rnd(3) } else { 1 + rnd(70) });
                let batch = 1 + rnd(2);
                let same = rnd(2) == 0;
                let (Some((out_h, mut pt)), Some((out_w, mut pl))) = (out_size_and_pad(in_h, kh, sh, dh, same), out_size_and_pad(in_w, kw, sw, dw, same))
                else {
                    continue;
                };
                let (mut out_h, mut out_w) = (out_h, out_w);
                if case % 3 == 0 {
                    // An explicit PAD folded into VALID: leading pads and more output.
                    (pt, pl) = (rnd(3), rnd(3));
                    out_h += pt / sh.max(1);
                    out_w += pl / sw.max(1);
                }
                if out_h == 0 || out_w == 0 {
                    continue;
                }
                let g =
                    Window { batch, in_h, in_w, out_h, out_w, k_h: kh, k_w: kw, stride_h: sh, stride_w: sw, dil_h: dh, dil_w: dw, pad_top: pt, pad_left: pl };
                let x: Vec<f32> = (0..batch * in_h * in_w * c).map(|_| rnd(2001) as f32 / 1000.0 - 1.0).collect();
                let w: Vec<f32> = (0..n * kh * kw * c).map(|_| rnd(2001) as f32 / 1000.0 - 1.0).collect();
                let bias: Vec<f32> = (0..n).map(|_| rnd(2001) as f32 / 1000.0 - 1.0).collect();
                let with_bias = rnd(2) == 0;
                let clamp = if rnd(2) == 0 { Clamp::NONE } else { Clamp { min: -0.5, max: 1.5 } };
                let Some(fl) = FirstLayer::new(&w, with_bias.then_some(&bias[..]), n, kh, kw, c) else {
                    assert!(l != crate::level::Level::Avx512 || n > MAX_OUT, "{l:?}: AVX-512 declined n {n}");
                    continue;
                };
                let want = naive(&x, c, &w, with_bias.then_some(&bias[..]), n, &g, clamp);
                let rows = batch * out_h;
                let split = rnd(rows + 1);
                let mut out = vec![f32::NAN; rows * out_w * n];
                let mut sc = fl.scratch(&g);
                let (lo, hi) = out.split_at_mut(split * out_w * n);
                assert!(fl.run(&x, &g, clamp, lo, 0..split, &mut sc));
                assert!(fl.run(&x, &g, clamp, hi, split..rows, &mut sc));
                for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{l:?} case {case} {g:?} c{c} n{n}: [{i}] {a} vs {b}");
                }
                ran += 1;
            }
            // Most random shapes are valid: the kernel must have run on them.
            assert!(l != crate::level::Level::Avx512 || !crate::level::has_avx512f() || ran >= 100, "{l:?}: only {ran} cases ran");
        });
    }

    /// Slices too short for the geometry, or another geometry's scratch, are refused.
    #[test]
    fn first_layer_refuses_mismatched_buffers() {
        let Some(fl) = FirstLayer::new(&[0.5; 24 * 27], None, 24, 3, 3, 3) else { return };
        let (oh, pt) = out_size_and_pad(20, 3, 2, 1, true).unwrap();
        let g = Window {
            batch: 1,
            in_h: 20,
            in_w: 20,
            out_h: oh,
            out_w: oh,
            k_h: 3,
            k_w: 3,
            stride_h: 2,
            stride_w: 2,
            dil_h: 1,
            dil_w: 1,
            pad_top: pt,
            pad_left: pt,
        };
        let x = vec![1.0; 20 * 20 * 3];
        let mut out = vec![0.0; oh * oh * 24];
        let mut sc = fl.scratch(&g);
        assert!(fl.run(&x, &g, Clamp::NONE, &mut out, 0..oh, &mut sc));
        assert!(!fl.run(&x[1..], &g, Clamp::NONE, &mut out, 0..oh, &mut sc));
        assert!(!fl.run(&x, &g, Clamp::NONE, &mut out[1..], 0..oh, &mut sc));
        assert!(!fl.run(&x, &g, Clamp::NONE, &mut out, 0..oh + 1, &mut sc));
        // The same scratch after a window with other padding columns: re-zeroed.
        let shifted = Window { pad_left: 1, pad_top: 1, ..g };
        let mut want = vec![0.0; oh * oh * 24];
        assert!(fl.run(&x, &shifted, Clamp::NONE, &mut want, 0..oh, &mut fl.scratch(&shifted)));
        let mut sc2 = fl.scratch(&g);
        assert!(fl.run(&x, &g, Clamp::NONE, &mut out, 0..oh, &mut sc2));
        let mut got = vec![0.0; oh * oh * 24];
        assert!(fl.run(&x, &shifted, Clamp::NONE, &mut got, 0..oh, &mut sc2));
        assert_eq!(got, want);
        let wide = Window { in_w: 40, out_w: 20, ..g };
        assert!(!fl.run(&vec![1.0; 20 * 40 * 3], &wide, Clamp::NONE, &mut vec![0.0; oh * 20 * 24], 0..oh, &mut sc));
    }
}
