//! Convolutions: 2-D, depthwise and transposed, float32, NHWC.

use crate::Clamp;

/// Geometry of a 2-D window operation (convolution or pooling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Batch.
    pub batch: usize,
    /// Input height and width.
    pub in_h: usize,
    /// Input width.
    pub in_w: usize,
    /// Output height.
    pub out_h: usize,
    /// Output width.
    pub out_w: usize,
    /// Kernel height.
    pub k_h: usize,
    /// Kernel width.
    pub k_w: usize,
    /// Stride (height).
    pub stride_h: usize,
    /// Stride (width).
    pub stride_w: usize,
    /// Dilation (height).
    pub dil_h: usize,
    /// Dilation (width).
    pub dil_w: usize,
    /// Padding before the first row.
    pub pad_top: usize,
    /// Padding before the first column.
    pub pad_left: usize,
}

/// Output size and leading padding for TFLite's SAME/VALID padding rules.
/// VALID is `(input + stride - filter) / stride`, as TFLite computes it: 0 (an
/// empty output) when the filter is larger than the input by less than a stride;
/// `None` when it is larger by more (TFLite's size would be negative).
pub fn out_size_and_pad(input: usize, filter: usize, stride: usize, dilation: usize, same: bool) -> Option<(usize, usize)> {
    if stride == 0 || dilation == 0 || filter == 0 {
        return None;
    }
    let eff = (filter - 1).checked_mul(dilation)? + 1;
    let out = if same { input.div_ceil(stride) } else { input.checked_add(stride)?.checked_sub(eff)? / stride };
    let needed = ((out.max(1) - 1) * stride + eff).saturating_sub(input);
    Some((out, needed / 2))
}

impl Window {
    /// `batch` rows as 1x1 pixels under a 1x1 filter: a fully-connected layer's
    /// batch run through the convolution kernels.
    pub fn rows(batch: usize) -> Window {
        Window { batch, in_h: 1, in_w: 1, out_h: 1, out_w: 1, k_h: 1, k_w: 1, stride_h: 1, stride_w: 1, dil_h: 1, dil_w: 1, pad_top: 0, pad_left: 0 }
    }

    /// Input row for output row `oy` and kernel row `ky`, or `None` in the padding.
    #[inline(always)]
    fn in_y(&self, oy: usize, ky: usize) -> Option<usize> {
        (oy * self.stride_h + ky * self.dil_h).checked_sub(self.pad_top).filter(|&y| y < self.in_h)
    }
    #[inline(always)]
    fn in_x(&self, ox: usize, kx: usize) -> Option<usize> {
        (ox * self.stride_w + kx * self.dil_w).checked_sub(self.pad_left).filter(|&x| x < self.in_w)
    }

    /// Whether every index computed from this window with `c` channels (input
    /// offsets of any output pixel and tap, plus a few vectors of slack) fits in
    /// `usize`, so range checks written in plain arithmetic cannot wrap around.
    pub fn indices_fit(&self, c: usize) -> bool {
        let extent = |out: usize, stride: usize, k: usize, dil: usize, pad: usize, input: usize| {
            out.checked_mul(stride)?.checked_add(k.checked_mul(dil)?)?.checked_add(pad)?.checked_add(input)?.checked_add(1)
        };
        let dims = || {
            let h = extent(self.out_h, self.stride_h, self.k_h, self.dil_h, self.pad_top, self.in_h)?;
            let w = extent(self.out_w, self.stride_w, self.k_w, self.dil_w, self.pad_left, self.in_w)?;
            crate::product(&[self.batch.checked_add(1)?, h, w, c.checked_add(1)?, 4])
        };
        dims().is_some()
    }
}

/// Repacks TFLite conv weights [out_c, k_h, k_w, in_c] to [k_h, k_w, in_c, out_c],
/// so the inner loop runs over contiguous output channels.
pub fn pack_conv_weights(w: &[f32], out_c: usize, k_h: usize, k_w: usize, in_c: usize) -> Vec<f32> {
    let mut p = vec![0.0; w.len()];
    pack_conv_weights_into(w, out_c, k_h, k_w, in_c, &mut p);
    p
}

/// [`pack_conv_weights`] into caller-provided storage of the same length.
pub fn pack_conv_weights_into(w: &[f32], out_c: usize, k_h: usize, k_w: usize, in_c: usize, p: &mut [f32]) {
    for o in 0..out_c {
        for ky in 0..k_h {
            for kx in 0..k_w {
                for i in 0..in_c {
                    p[((ky * k_w + kx) * in_c + i) * out_c + o] = w[((o * k_h + ky) * k_w + kx) * in_c + i];
                }
            }
        }
    }
}

/// 2-D convolution with weights packed by [`pack_conv_weights`].
#[allow(clippy::too_many_arguments)]
pub fn conv2d(input: &[f32], in_c: usize, packed: &[f32], bias: Option<&[f32]>, out_c: usize, g: &Window, clamp: Clamp, out: &mut [f32]) {
    let in_row = g.in_w * in_c;
    let in_img = g.in_h * in_row;
    for n in 0..g.batch {
        for oy in 0..g.out_h {
            for ox in 0..g.out_w {
                let o0 = ((n * g.out_h + oy) * g.out_w + ox) * out_c;
                let acc = &mut out[o0..o0 + out_c];
                match bias {
                    Some(b) => acc.copy_from_slice(&b[..out_c]),
                    None => acc.fill(0.0),
                }
                for ky in 0..g.k_h {
                    let Some(iy) = g.in_y(oy, ky) else { continue };
                    for kx in 0..g.k_w {
                        let Some(ix) = g.in_x(ox, kx) else { continue };
                        let px = &input[n * in_img + iy * in_row + ix * in_c..][..in_c];
                        let wbase = (ky * g.k_w + kx) * in_c * out_c;
                        for (i, &v) in px.iter().enumerate() {
                            let wr = &packed[wbase + i * out_c..][..out_c];
                            for (a, &w) in acc.iter_mut().zip(wr) {
                                *a += v * w;
                            }
                        }
                    }
                }
                clamp.apply_slice(acc);
            }
        }
    }
}

simd_fn! {
    /// Depthwise convolution: weights [1, k_h, k_w, in_c * multiplier], over output
    /// rows `rows` (row = batch * out_h + oy), which `out` holds.
    ///
    /// With AVX-512, one input channel under a multiplier of 8, 24, 40, ... at
    /// horizontal stride 1 or 2 runs with pixels along the lanes (each input load
    /// feeding 8 channels, the tiles transposed on the way out). With AVX-512 and
    /// multiplier 1 every row runs on SIMD kernels: row tiles of
    /// 1-8 pixels with the borders inside them for 3-, 5- and 9-wide filters at
    /// stride 2 or on rows under 16 pixels (also along T on `[batch, T, 1, C]` maps,
    /// and with one input channel broadcast under a multiplier above 8), else 8-
    /// and 4-pixel tiles, single edge pixels, channel groups for large filters; a
    /// multiplier above 1 or at most 8 channels run on a kernel that reads the
    /// multiplier from the input and packs several pixels into one vector (so do
    /// `[batch, T, 1, C]` maps with Nx1 filters, as rows along T). Elsewhere the work goes in tiles of 4 output pixels x 16
    /// channels, accumulators in registers across all taps; channels past the last
    /// whole block of 16 and multipliers above 1 take a simple per-pixel path,
    /// except with AVX2 + FMA and no AVX-512, and on aarch64 (NEON), where one
    /// register-tiled kernel takes every multiplier, stride, dilation and channel
    /// count (see [`depthwise_direct_tiles`]).
    pub fn depthwise_conv2d(input: &[f32], in_c: usize, multiplier: usize, w: &[f32], bias: Option<&[f32]>, g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>) {
        const B: usize = 16;
        const P: usize = 4;
        let out_c = in_c.checked_mul(multiplier).expect("depthwise_conv2d: channel count overflows");
        // The SIMD paths below check their ranges in plain arithmetic: first make
        // sure no index can wrap and the buffers hold the geometry.
        assert!(
            g.indices_fit(out_c)
                && crate::holds(input.len(), &[g.batch, g.in_h, g.in_w, in_c])
                && crate::holds(out.len(), &[rows.len(), g.out_w, out_c])
                && crate::product(&[g.batch, g.out_h]).is_some_and(|total| rows.end <= total),
            "depthwise_conv2d: buffers or rows do not match the geometry"
        );
        // AVX2 without AVX-512: every multiplier, stride and channel count on the
        // 8-lane register-tiled kernel (the paths below are AVX-512 or per pixel there).
        #[cfg(target_arch = "x86_64")]
        if depthwise_avx2_tiles() && crate::product(&[g.k_h, g.k_w, out_c]).is_some_and(|n| n <= w.len()) && bias.is_none_or(|b| b.len() >= out_c) {
            // SAFETY: AVX2 + FMA checked; buffers, rows and index ranges asserted above,
            // weights and bias lengths just now.
            unsafe { avx2::dw_rows(input, in_c, multiplier, w, bias, g, clamp, out, rows) };
            return;
        }
        // AVX-512: a multiplier above 1, at most 8 channels, or a [batch, T, 1, C] map
        // with an Nx1 filter (one pixel per row for the multiplier-1 row kernel,
        // rows along T here), on the lane-packing kernel (the multiplier read from
        // the input, several pixels per vector). Other narrow maps stay on the row
        // kernel: its per-pixel edge tiles measured faster there than masked
        // multi-pixel tiles (kws_dscnn's 5-wide maps, vww's 3- and 6-wide ones).
        // AVX-512 row tiles (each input column loaded once for all the pixels it
        // feeds, borders inside the tiles): multiplier 1 over more than 8 channels on
        // a [batch, T, 1, C] map, along T (other maps reach them through the row
        // kernel below), and one input channel under a multiplier above 8 (first
        // layers: the input float broadcast, where the lane kernel would load it per
        // tap). At most 8 channels stay on the lane kernel, which packs two or more
        // pixels per vector (a broadcast tile of 8 channels measured 1.6x slower).
        // One input channel under a multiplier of 8, 16, ... (first layers on gray
        // images and spectrograms) at horizontal stride 1 or 2: pixels along the
        // lanes, so each input load feeds 8 channels and no lane waits on a broadcast.
        // Multiplier 1 over 8 or 24 channels at horizontal stride 1 on maps at least
        // 16 wide: each row as one flat run of floats, every lane useful.
        #[cfg(target_arch = "x86_64")]
        if depthwise_masks_tails() && multiplier == 1 && x86_64::flat_fit(in_c, g) && x86_64::dw_rows_flat(input, in_c, w, bias, g, clamp, out, rows.clone()) {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if depthwise_masks_tails()
            && in_c == 1
            && x86_64::pixel_lanes_fit(in_c, multiplier, &column_as_row(g).unwrap_or(*g))
            && x86_64::dw_rows_pixel_lanes(input, out_c, w, bias, g, clamp, out, rows.clone())
        {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if depthwise_masks_tails() && out_c > 8 && (multiplier == 1 || in_c == 1) {
            let column = column_as_row(g);
            let gt = column.unwrap_or(*g);
            if x86_64::row_tiles_fit(&gt) && (column.is_some() || multiplier > 1) {
                let mut row = rows.start;
                let mut done = true;
                while row < rows.end && done {
                    // Pieces of rows of `gt`: (batch item, output row, pixels, next row of `g`);
                    // on a column map each item is one row whose pixels are the rows of `g`.
                    let (n, oy, px, next) = if column.is_some() {
                        let n = row / g.out_h;
                        let end = rows.end.min((n + 1) * g.out_h);
                        (n, 0, row - n * g.out_h..end - n * g.out_h, end)
                    } else {
                        (row / g.out_h, row % g.out_h, 0..g.out_w, row + 1)
                    };
                    let o = &mut out[(row - rows.start) * g.out_w * out_c..(next - rows.start) * g.out_w * out_c];
                    done = x86_64::dw_row_tiles(input, in_c, out_c, w, bias, &gt, clamp, o, n, oy, px);
                    row = next;
                }
                if done {
                    return;
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if depthwise_masks_tails()
            && (multiplier > 1 || out_c <= 8 || column_as_row(g).is_some())
            && crate::product(&[g.k_h, g.k_w, out_c]).is_some_and(|n| n <= w.len())
            && bias.is_none_or(|b| b.len() >= out_c)
        {
            // SAFETY: AVX-512F checked; buffers, rows and index ranges asserted above,
            // weights and bias lengths just now.
            unsafe { x86_64::dw_rows_lanes(input, in_c, multiplier, w, bias, g, clamp, out, rows) };
            return;
        }
        // Maps at most 8 pixels wide under 3x3 filters at stride 1: two output rows
        // per register tile, sharing their input rows.
        #[cfg(target_arch = "x86_64")]
        if multiplier == 1 && x86_64::narrow_pairs_fit(g) && x86_64::dw_narrow_row_pairs(input, out_c, w, bias, g, clamp, out, rows.clone()) {
            return;
        }
        // aarch64: the NEON counterpart (4-lane blocks), for the same cases.
        #[cfg(target_arch = "aarch64")]
        if crate::level::has_neon() && crate::product(&[g.k_h, g.k_w, out_c]).is_some_and(|n| n <= w.len()) && bias.is_none_or(|b| b.len() >= out_c) {
            // SAFETY: buffers, rows and index ranges asserted above, weights and bias
            // lengths just now (NEON is baseline on aarch64).
            unsafe { aarch64::dw_rows(input, in_c, multiplier, w, bias, g, clamp, out, rows) };
            return;
        }
        let in_row = g.in_w * in_c;
        let in_img = g.in_h * in_row;
        let blocked = if multiplier == 1 { out_c / B * B } else { 0 };
        let first_row = rows.start;
        // `out` holds output rows `rows` (row = batch * out_h + oy) only.
        for row in rows {
            let (n, oy) = (row / g.out_h, row % g.out_h);
            let row_out = (row - first_row) * g.out_w;
            if multiplier == 1 {
                if let Some(o) = out.get_mut(row_out * out_c..(row_out + g.out_w) * out_c) {
                    if dw_row_simd(input, in_c, w, bias, g, clamp, o, n, oy) {
                        continue;
                    }
                }
            }
            // Portable path: tiles of P pixels x B channels, the rest per pixel.
            let x_lo = g.pad_left.div_ceil(g.stride_w);
            let mut ox0 = 0;
            while ox0 < g.out_w {
                let np = P.min(g.out_w - ox0);
                // Edge columns before the first full tile go one pixel at a time so
                // that the tiles after them line up with the interior.
                let np = if ox0 < x_lo && blocked > 0 { (x_lo - ox0).min(np) } else { np };
                for c0 in (0..blocked).step_by(B) {
                    let mut acc = [[0.0f32; B]; P];
                    if let Some(b) = bias {
                        if let Ok(bv) = <&[f32; B]>::try_from(&b[c0..c0 + B]) {
                            for a in acc.iter_mut() {
                                *a = *bv;
                            }
                        }
                    }
                    for ky in 0..g.k_h {
                        let Some(iy) = g.in_y(oy, ky) else { continue };
                        let in_base = n * in_img + iy * in_row + c0;
                        for kx in 0..g.k_w {
                            let Ok(wv) = <&[f32; B]>::try_from(&w[(ky * g.k_w + kx) * out_c + c0..][..B]) else { continue };
                            for (p, a) in acc.iter_mut().enumerate().take(np) {
                                let Some(ix) = g.in_x(ox0 + p, kx) else { continue };
                                let Ok(xv) = <&[f32; B]>::try_from(&input[in_base + ix * in_c..][..B]) else { continue };
                                for j in 0..B {
                                    a[j] += xv[j] * wv[j];
                                }
                            }
                        }
                    }
                    for (p, a) in acc.iter().enumerate().take(np) {
                        let o = &mut out[(row_out + ox0 + p) * out_c + c0..][..B];
                        for j in 0..B {
                            o[j] = a[j].max(clamp.min).min(clamp.max);
                        }
                    }
                }
                ox0 += np;
            }
            // Remaining channels (and multiplier > 1): per pixel.
            if blocked < out_c {
                for ox in 0..g.out_w {
                    dw_pixel(input, in_c, multiplier, w, bias, g, clamp, out, n, oy, ox, row_out, blocked);
                }
            }
        }
    }
}

/// Repeats each of the `in_c` channels of every pixel `multiplier` times
/// (`out[p, c * multiplier + m] = input[p, c]`). A depthwise convolution with a
/// channel multiplier is then one with multiplier 1 over the repeated channels,
/// which runs on the vector kernels instead of the per-pixel path (first layers
/// with multipliers of 4-16 on 1-3 channels spend nearly all their time there).
/// Panics if `out` is shorter than `input.len() * multiplier`.
pub fn expand_channels(input: &[f32], in_c: usize, multiplier: usize, out: &mut [f32]) {
    if in_c == 0 || multiplier == 0 {
        return;
    }
    let out = &mut out[..input.len() * multiplier];
    if in_c == 1 {
        for (o, &x) in out.chunks_exact_mut(multiplier).zip(input) {
            o.fill(x);
        }
        return;
    }
    for (o, px) in out.chunks_exact_mut(in_c * multiplier).zip(input.chunks_exact(in_c)) {
        for (oc, &x) in o.chunks_exact_mut(multiplier).zip(px) {
            oc.fill(x);
        }
    }
}

/// Whether [`depthwise_conv2d`] takes the AVX2 kernel (AVX2 + FMA, no AVX-512): any
/// channel multiplier, stride and channel count in 8-lane blocks, the multiplier
/// read from the input directly, so callers need not repeat the input's channels.
pub fn depthwise_avx2_tiles() -> bool {
    cfg!(target_arch = "x86_64") && !crate::level::has_avx512f() && crate::level::has_avx2_fma()
}

/// Whether [`depthwise_conv2d`] takes a register-tiled kernel that reads any
/// channel multiplier straight from the input and takes any stride: AVX-512,
/// AVX2 without AVX-512 ([`depthwise_avx2_tiles`]), or NEON on aarch64 (4-lane blocks).
pub fn depthwise_direct_tiles() -> bool {
    depthwise_masks_tails() || depthwise_avx2_tiles() || (cfg!(target_arch = "aarch64") && crate::level::has_neon())
}

/// A one-column map with a one-column filter (`[batch, T, 1, C]` audio and sensor
/// shapes, Nx1 filters) is the same memory as a one-row map with a 1xN filter:
/// taken that way, each batch item is one row whose pixels run along T, and pixel
/// tiles fill instead of running one pixel per row. That row geometry, or `None`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn column_as_row(g: &Window) -> Option<Window> {
    (g.in_w == 1 && g.out_w == 1 && g.k_w == 1).then_some(Window {
        in_h: 1,
        in_w: g.in_h,
        out_h: 1,
        out_w: g.out_h,
        k_h: 1,
        k_w: g.k_h,
        stride_h: 1,
        stride_w: g.stride_h,
        dil_h: 1,
        dil_w: g.dil_h,
        pad_top: 0,
        pad_left: g.pad_top,
        ..*g
    })
}

/// Whether [`depthwise_conv2d`] runs every channel count at full vector width
/// (AVX-512 masks the last block); elsewhere [`depthwise_rows`] serves channel
/// counts that are neither multiples nor divisors of 16.
pub fn depthwise_masks_tails() -> bool {
    cfg!(target_arch = "x86_64") && crate::level::has_avx512f()
}

/// Depthwise weights (multiplier 1) tiled for [`depthwise_rows`]: tap `t`'s `c`
/// weights repeated along an output row of `out_w` pixels, `[tap][out_w * c]`.
pub fn tile_depthwise(w: &[f32], c: usize, taps: usize, out_w: usize) -> Vec<f32> {
    let row = out_w * c;
    let mut tiled = vec![0.0f32; taps * row];
    for (t, dst) in tiled.chunks_exact_mut(row.max(1)).enumerate() {
        for px in dst.chunks_exact_mut(c.max(1)) {
            px.copy_from_slice(&w[t * c..(t + 1) * c]);
        }
    }
    tiled
}

simd_fn! {
    /// Depthwise convolution, multiplier 1 and horizontal stride 1, one output row
    /// at a time with weights from [`tile_depthwise`]: every tap is one flat
    /// multiply-add over the row's columns it reaches inside the input, so any
    /// channel count runs full vector width. Each output sums its taps in the
    /// same order for any split of `rows` (bit-identical across threads).
    #[allow(clippy::too_many_arguments)]
    pub fn depthwise_rows(input: &[f32], c: usize, tiled: &[f32], bias: Option<&[f32]>, g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>) {
        let row = g.out_w * c;
        if row == 0 {
            return;
        }
        let line_len = g.in_w * c;
        for (ri, r) in rows.enumerate() {
            let (n, oy) = (r / g.out_h, r % g.out_h);
            let o = &mut out[ri * row..][..row];
            match bias {
                Some(b) => o.chunks_exact_mut(c).for_each(|px| px.copy_from_slice(&b[..c])),
                None => o.fill(0.0),
            }
            for ky in 0..g.k_h {
                let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
                let line = &input[(n * g.in_h + iy) * line_len..][..line_len];
                for kx in 0..g.k_w {
                    let off = kx * g.dil_w;
                    // Columns whose input ox + off - pad_left is inside the row.
                    let lo = g.pad_left.saturating_sub(off);
                    let hi = (g.in_w + g.pad_left).saturating_sub(off).min(g.out_w);
                    if lo >= hi {
                        continue;
                    }
                    let src = &line[(lo + off - g.pad_left) * c..(hi + off - g.pad_left) * c];
                    let wt = &tiled[(ky * g.k_w + kx) * row..][lo * c..hi * c];
                    for ((d, &x), &w) in o[lo * c..hi * c].iter_mut().zip(src).zip(wt) {
                        *d += x * w;
                    }
                }
            }
            clamp.apply_slice(o);
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod avx2;
pub mod first;
pub use first::{FirstLayer, FirstScratch};
#[cfg(target_arch = "x86_64")]
mod few_x86_64;
#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
use x86_64::dw_row_simd;

/// Without x86-64 there is no AVX-512 row path: the portable path takes every row.
#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
fn dw_row_simd(_: &[f32], _: usize, _: &[f32], _: Option<&[f32]>, _: &Window, _: Clamp, _: &mut [f32], _: usize, _: usize) -> bool {
    false
}

/// One depthwise output pixel, channels `from..out_c`; each tap adds those
/// channels in one contiguous loop.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn dw_pixel(
    input: &[f32],
    in_c: usize,
    multiplier: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Window,
    clamp: Clamp,
    out: &mut [f32],
    n: usize,
    oy: usize,
    ox: usize,
    row_out: usize,
    from: usize,
) {
    let out_c = in_c * multiplier;
    let (in_row, in_img) = (g.in_w * in_c, g.in_h * g.in_w * in_c);
    let o0 = (row_out + ox) * out_c;
    let acc = &mut out[o0 + from..o0 + out_c];
    match bias {
        Some(b) => acc.copy_from_slice(&b[from..out_c]),
        None => acc.fill(0.0),
    }
    for ky in 0..g.k_h {
        let Some(iy) = g.in_y(oy, ky) else { continue };
        for kx in 0..g.k_w {
            let Some(ix) = g.in_x(ox, kx) else { continue };
            let px = &input[n * in_img + iy * in_row + ix * in_c..][..in_c];
            let wr = &w[(ky * g.k_w + kx) * out_c + from..][..out_c - from];
            if multiplier == 1 {
                for ((a, &v), &wv) in acc.iter_mut().zip(&px[from..]).zip(wr) {
                    *a += v * wv;
                }
            } else {
                for (j, (a, &wv)) in acc.iter_mut().zip(wr).enumerate() {
                    *a += px[(from + j) / multiplier] * wv;
                }
            }
        }
    }
    for a in acc.iter_mut() {
        *a = a.max(clamp.min).min(clamp.max);
    }
}

/// Walks a transposed convolution's scatter: output pixel (y, x) receives input
/// pixel (iy, ix) through tap (ky, kx) when y = iy*stride + ky - pad. Calls
/// `f(input_pixel, output_pixel, tap)` with flat pixel indices and `tap = ky * k_w +
/// kx` for every pair inside the output, in input order. `g` describes the
/// *forward* conv mapping the output (g.in_*) onto the input (g.out_*).
#[inline(always)]
pub fn transpose_scatter(g: &Window, mut f: impl FnMut(usize, usize, usize)) {
    let (oh, ow) = (g.in_h, g.in_w);
    for n in 0..g.batch {
        for iy in 0..g.out_h {
            for ix in 0..g.out_w {
                let ip = (n * g.out_h + iy) * g.out_w + ix;
                for ky in 0..g.k_h {
                    let Some(y) = (iy * g.stride_h + ky).checked_sub(g.pad_top).filter(|&y| y < oh) else { continue };
                    for kx in 0..g.k_w {
                        let Some(x) = (ix * g.stride_w + kx).checked_sub(g.pad_left).filter(|&x| x < ow) else { continue };
                        f(ip, (n * oh + y) * ow + x, ky * g.k_w + kx);
                    }
                }
            }
        }
    }
}

/// Output channels up to which [`conv2d_few_outputs`] beats the GEMM on spatial
/// filters: a GEMM tile spans 16 or more output channels whatever the count, so
/// with one or two it spends most of its multiply-adds on padding, where one
/// depthwise pass per output channel does only useful ones (break-even is near
/// four channels). A 1x1 filter gains nothing: there the channel sum, scalar,
/// costs about what the whole GEMM does.
pub const FEW_OUTPUTS: usize = 2;

/// Floats of scratch [`conv2d_few_outputs`] wants: a band of whole output rows of
/// per-channel products, about 32 KiB so it stays in L1 between the depthwise pass
/// that writes it and the channel sum that reads it (at least one row).
pub fn few_outputs_scratch(g: &Window, in_c: usize) -> usize {
    let row = g.out_w.saturating_mul(in_c).max(1);
    (8192 / row).max(1).saturating_mul(row)
}

/// 2-D convolution with few output channels ([`FEW_OUTPUTS`]), weights as stored
/// (`[out_c, k_h, k_w, in_c]`), over output rows `rows` (row = batch * out_h + oy),
/// which `out` holds. Each output channel is a multiplier-1 depthwise pass with that
/// channel's filter (the products summed over the taps, per input channel) into
/// `scratch`, then a sum over the input channels of each pixel; `scratch` holds at
/// least one output row of `out_w * in_c` floats ([`few_outputs_scratch`]).
/// Every row is computed the same way for any split of `rows`.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_few_outputs(
    input: &[f32],
    in_c: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    out_c: usize,
    g: &Window,
    clamp: Clamp,
    out: &mut [f32],
    rows: std::ops::Range<usize>,
    scratch: &mut [f32],
) {
    let taps = g.k_h * g.k_w;
    let row = g.out_w * in_c;
    assert!(
        crate::holds(w.len(), &[out_c, taps, in_c])
            && crate::holds(out.len(), &[rows.len(), g.out_w, out_c])
            && bias.is_none_or(|b| b.len() >= out_c)
            && scratch.len() >= row,
        "conv2d_few_outputs: buffers do not match the geometry"
    );
    if row == 0 || out_c == 0 {
        return;
    }
    // Eight input channels at horizontal stride 1 (the usual segmentation head):
    // pairs of pixels per vector, no products stored (see `few_x86_64`).
    #[cfg(target_arch = "x86_64")]
    if crate::level::has_avx512f()
        && few_x86_64::few8_fits(g, in_c, out_c)
        && crate::holds(input.len(), &[g.batch, g.in_h, g.in_w, in_c])
        && rows.end <= g.batch * g.out_h
    {
        // SAFETY: AVX-512F was detected; the geometry fits the kernel, and the input,
        // weights, bias and output sizes were checked above and here.
        unsafe { few_x86_64::few8_rows(input, w, bias, out_c, g, clamp, out, rows) };
        return;
    }
    let band = scratch.len() / row;
    let mut r = rows.start;
    while r < rows.end {
        let end = (r + band).min(rows.end);
        let pixels = (end - r) * g.out_w;
        let s = &mut scratch[..pixels * in_c];
        let o = &mut out[(r - rows.start) * g.out_w * out_c..][..pixels * out_c];
        for oc in 0..out_c {
            depthwise_conv2d(input, in_c, 1, &w[oc * taps * in_c..][..taps * in_c], None, g, Clamp::NONE, s, r..end);
            sum_channels(s, in_c, bias.map_or(0.0, |b| b[oc]), clamp, o, oc, out_c);
        }
        r = end;
    }
}

simd_fn! {
    /// `out[p * out_c + oc] = clamp(bias + sum of products[p * c..][..c])` for every
    /// pixel `p`: the channel sum of [`conv2d_few_outputs`].
    fn sum_channels(products: &[f32], c: usize, bias: f32, clamp: Clamp, out: &mut [f32], oc: usize, out_c: usize) {
        for (px, o) in products.chunks_exact(c).zip(out.chunks_exact_mut(out_c)) {
            o[oc] = clamp.apply(px.iter().fold(bias, |a, &v| a + v));
        }
    }
}

/// `sum(a[i] * b[i])` over 16 lane accumulators (one vector register), summed
/// pairwise at the end: the same order for any caller, so results are reproducible.
#[inline(always)]
fn dot16(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let (ac, bc) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for j in 0..16 {
            lanes[j] += x[j] * y[j];
        }
    }
    for (j, (&x, &y)) in ar.iter().zip(br).enumerate() {
        lanes[j] += x * y;
    }
    crate::hsum16(lanes)
}

simd_fn! {
    /// Transposed convolution (gradient of conv2d w.r.t. its input).
    /// Weights are [out_c, k_h, k_w, in_c]; `g` describes the *forward* conv that maps
    /// the output (g.in_*) to the input (g.out_*), so `g.out_h/out_w` are this op's input size.
    ///
    /// Computed one output row at a time: the row starts from the bias, then each
    /// tap (ky, kx) whose input row exists adds, to every output pixel it reaches,
    /// the dot products of the input pixel with the tap's filters (vectorized over
    /// the input channels). No division in the inner loops, each output row written
    /// while in cache.
    pub fn transpose_conv2d(input: &[f32], in_c: usize, w: &[f32], bias: Option<&[f32]>, out_c: usize, g: &Window, clamp: Clamp, out: &mut [f32]) {
        transpose_conv2d_rows(input, in_c, w, bias, out_c, g, clamp, out, 0..g.batch * g.in_h);
    }
}

simd_fn! {
    /// [`transpose_conv2d`] over output rows `rows` only (row = batch * output height
    /// + y), which `out` holds: each row is computed exactly as in the whole call, so
    /// a split of the rows over threads gives the same results.
    #[allow(clippy::too_many_arguments)]
    pub fn transpose_conv2d_rows(input: &[f32], in_c: usize, w: &[f32], bias: Option<&[f32]>, out_c: usize, g: &Window, clamp: Clamp, out: &mut [f32], rows: std::ops::Range<usize>) {
        let (oh, ow) = (g.in_h, g.in_w);
        let (ih, iw) = (g.out_h, g.out_w);
        let taps = g.k_h * g.k_w;
        let row_len = ow * out_c;
        if row_len == 0 || g.stride_w == 0 || g.stride_h == 0 {
            return;
        }
        let rows = rows.start..rows.end.min(g.batch * oh);
        for (r, o_row) in rows.zip(out.chunks_exact_mut(row_len)) {
            let (n, y) = (r / oh, r % oh);
            match bias {
                Some(b) => o_row.chunks_exact_mut(out_c).for_each(|px| px.copy_from_slice(&b[..out_c])),
                None => o_row.fill(0.0),
            }
            for ky in 0..g.k_h {
                // Input row iy reaches output row y through tap ky when iy*stride + ky = y + pad.
                let Some(iy) = (y + g.pad_top).checked_sub(ky).filter(|t| t % g.stride_h == 0).map(|t| t / g.stride_h).filter(|&i| i < ih) else { continue };
                let line = &input[(n * ih + iy) * iw * in_c..][..iw * in_c];
                for kx in 0..g.k_w {
                    // Columns ix with 0 <= ix*stride + kx - pad < ow.
                    let lo = g.pad_left.saturating_sub(kx).div_ceil(g.stride_w);
                    let hi = (ow + g.pad_left).saturating_sub(kx).div_ceil(g.stride_w).min(iw);
                    let tap = ky * g.k_w + kx;
                    for ix in lo..hi {
                        let x = ix * g.stride_w + kx - g.pad_left;
                        let px = &line[ix * in_c..][..in_c];
                        for (oc, ov) in o_row[x * out_c..][..out_c].iter_mut().enumerate() {
                            *ov += dot16(px, &w[(oc * taps + tap) * in_c..][..in_c]);
                        }
                    }
                }
            }
            clamp.apply_slice(o_row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window of a randomized case (`same` or VALID padding), or `None` where it
    /// has no output.
    fn batch_window(
        batch: usize,
        (in_h, in_w): (usize, usize),
        (k_h, k_w): (usize, usize),
        (stride_h, stride_w): (usize, usize),
        (dil_h, dil_w): (usize, usize),
        same: bool,
    ) -> Option<Window> {
        let (out_h, pad_top) = out_size_and_pad(in_h, k_h, stride_h, dil_h, same)?;
        let (out_w, pad_left) = out_size_and_pad(in_w, k_w, stride_w, dil_w, same)?;
        (out_h > 0 && out_w > 0).then_some(Window { batch, in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left })
    }

    /// The definition of CONV_2D without bias (`[oc, kh, kw, ic]` weights), the
    /// kernels' tests' reference.
    pub(super) fn naive_conv(input: &[f32], in_c: usize, w: &[f32], out_c: usize, g: &Window) -> Vec<f32> {
        let mut out = vec![0.0; g.batch * g.out_h * g.out_w * out_c];
        for n in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    for o in 0..out_c {
                        let mut s = 0.0;
                        for ky in 0..g.k_h {
                            for kx in 0..g.k_w {
                                let y = (oy * g.stride_h + ky * g.dil_h) as isize - g.pad_top as isize;
                                let x = (ox * g.stride_w + kx * g.dil_w) as isize - g.pad_left as isize;
                                if y < 0 || x < 0 || y >= g.in_h as isize || x >= g.in_w as isize {
                                    continue;
                                }
                                for i in 0..in_c {
                                    s += input[((n * g.in_h + y as usize) * g.in_w + x as usize) * in_c + i] * w[((o * g.k_h + ky) * g.k_w + kx) * in_c + i];
                                }
                            }
                        }
                        out[((n * g.out_h + oy) * g.out_w + ox) * out_c + o] = s;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn conv_matches_naive() {
        crate::level::each(|_| {
            let (in_h, in_w, in_c, out_c, k) = (7, 6, 3, 5, 3);
            let (out_h, pad_t) = out_size_and_pad(in_h, k, 2, 1, true).unwrap();
            let (out_w, pad_l) = out_size_and_pad(in_w, k, 2, 1, true).unwrap();
            let g =
                Window { batch: 2, in_h, in_w, out_h, out_w, k_h: k, k_w: k, stride_h: 2, stride_w: 2, dil_h: 1, dil_w: 1, pad_top: pad_t, pad_left: pad_l };
            let input: Vec<f32> = (0..2 * in_h * in_w * in_c).map(|i| ((i * 7 % 13) as f32) - 6.0).collect();
            let w: Vec<f32> = (0..out_c * k * k * in_c).map(|i| ((i * 5 % 11) as f32) * 0.1 - 0.5).collect();
            let mut out = vec![0.0; 2 * out_h * out_w * out_c];
            conv2d(&input, in_c, &pack_conv_weights(&w, out_c, k, k, in_c), None, out_c, &g, Clamp::NONE, &mut out);
            let r = naive_conv(&input, in_c, &w, out_c, &g);
            for (a, b) in out.iter().zip(&r) {
                assert!((a - b).abs() < 1e-4);
            }
        });
    }

    /// A short input, under every vector level, panics before a SIMD kernel can
    /// read past it.
    #[test]
    fn depthwise_refuses_buffers_that_do_not_match_the_geometry() {
        let g =
            Window { batch: 1, in_h: 9, in_w: 40, out_h: 9, out_w: 40, k_h: 3, k_w: 3, stride_h: 1, stride_w: 1, dil_h: 1, dil_w: 1, pad_top: 1, pad_left: 1 };
        for c in [4, 16, 20] {
            let w = vec![0.5f32; 9 * c];
            let mut out = vec![0.0f32; 9 * 40 * c];
            crate::level::each(|l| {
                let x = vec![1.0f32; 9 * 40 * c];
                depthwise_conv2d(&x, c, 1, &w, None, &g, Clamp::NONE, &mut out, 0..9);
                let short = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    depthwise_conv2d(&x[..x.len() - 1], c, 1, &w, None, &g, Clamp::NONE, &mut out, 0..9)
                }));
                assert!(short.is_err(), "{l:?} c{c}: short input accepted");
                let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| depthwise_conv2d(&x, c, 1, &w, None, &g, Clamp::NONE, &mut out, 0..10)));
                assert!(past.is_err(), "{l:?} c{c}: rows past the output accepted");
                let huge = Window { stride_w: usize::MAX / 2, ..g };
                let wrap = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| depthwise_conv2d(&x, c, 1, &w, None, &huge, Clamp::NONE, &mut out, 0..9)));
                assert!(wrap.is_err(), "{l:?} c{c}: overflowing geometry accepted");
            });
        }
    }

    #[test]
    fn depthwise_matches_naive() {
        crate::level::each(|_| {
            for (c, mult, k, stride) in [
                (32, 1, 5, 1),
                (48, 1, 3, 1),
                (37, 1, 3, 2),
                (5, 2, 3, 1),
                (16, 1, 1, 1),
                (8, 1, 3, 1),
                (4, 1, 5, 1),
                (1, 1, 3, 1),
                (8, 1, 3, 2),
                (24, 1, 3, 1),
                (21, 1, 5, 1),
                (100, 1, 5, 1),
                (72, 1, 3, 2),
                (1, 8, 5, 1),
                (3, 4, 7, 2),
                (1, 16, 3, 1),
                (4, 8, 9, 1),
            ] {
                // A wide map, and maps narrower than any tile (edge pixels only).
                for (in_h, in_w) in [(9, 23), (7, 7), (2, 3)] {
                    let (out_h, pt) = out_size_and_pad(in_h, k, stride, 1, true).unwrap();
                    let (out_w, pl) = out_size_and_pad(in_w, k, stride, 1, true).unwrap();
                    let g = Window {
                        batch: 1,
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
                        pad_top: pt,
                        pad_left: pl,
                    };
                    let oc = c * mult;
                    let x: Vec<f32> = (0..in_h * in_w * c).map(|i| ((i * 13 % 17) as f32) * 0.1 - 0.8).collect();
                    let w: Vec<f32> = (0..k * k * oc).map(|i| ((i * 5 % 7) as f32) * 0.2 - 0.6).collect();
                    let b: Vec<f32> = (0..oc).map(|i| i as f32 * 0.01).collect();
                    let mut out = vec![0.0; out_h * out_w * oc];
                    depthwise_conv2d(&x, c, mult, &w, Some(&b), &g, Clamp::NONE, &mut out, 0..out_h);
                    // A multiplier as multiplier 1 over repeated channels must agree.
                    if mult > 1 {
                        let mut wide = vec![0.0; in_h * in_w * oc];
                        expand_channels(&x, c, mult, &mut wide);
                        let mut via = vec![0.0; out.len()];
                        depthwise_conv2d(&wide, oc, 1, &w, Some(&b), &g, Clamp::NONE, &mut via, 0..out_h);
                        if stride == 1 {
                            let tiled = tile_depthwise(&w, oc, k * k, out_w);
                            let mut flat = vec![0.0; out.len()];
                            depthwise_rows(&wide, oc, &tiled, Some(&b), &g, Clamp::NONE, &mut flat, 0..out_h);
                            assert!(flat.iter().zip(&via).all(|(a, r)| (a - r).abs() < 1e-4), "expanded rows c{c} m{mult} k{k}");
                        }
                        for (a, r) in via.iter().zip(&out) {
                            assert!((a - r).abs() < 1e-4, "expanded c{c} m{mult} k{k} s{stride}");
                        }
                    }
                    // The row-flat form (multiplier 1, horizontal stride 1) must agree too.
                    if mult == 1 && stride == 1 {
                        let tiled = tile_depthwise(&w, c, k * k, out_w);
                        let mut flat = vec![0.0; out.len()];
                        depthwise_rows(&x, c, &tiled, Some(&b), &g, Clamp::NONE, &mut flat, 0..out_h);
                        for (a, r) in flat.iter().zip(&out) {
                            assert!((a - r).abs() < 1e-4, "rows c{c} k{k}");
                        }
                    }
                    for oy in 0..out_h {
                        for ox in 0..out_w {
                            for o in 0..oc {
                                let mut s = b[o];
                                for ky in 0..k {
                                    for kx in 0..k {
                                        let (y, xx) = ((oy * stride + ky) as isize - pt as isize, (ox * stride + kx) as isize - pl as isize);
                                        if y >= 0 && xx >= 0 && (y as usize) < in_h && (xx as usize) < in_w {
                                            s += x[((y as usize) * in_w + xx as usize) * c + o / mult] * w[(ky * k + kx) * oc + o];
                                        }
                                    }
                                }
                                assert!((out[(oy * out_w + ox) * oc + o] - s).abs() < 1e-4, "c{c} m{mult} k{k} s{stride} {in_h}x{in_w}");
                            }
                        }
                    }
                }
            }
        });
    }

    /// The few-output-channel convolution against the definition over random
    /// geometries: odd and large input channel counts, 1xN and Nx1 filters, strides,
    /// dilation, SAME and VALID, batch 2, row ranges that start mid-image (a thread's
    /// share), scratch of one row up to several bands, bias and clamp on and off.
    #[test]
    fn few_outputs_random_geometries_match_naive() {
        let mut next = crate::testutil::xorshift(0x9e37_79b9);
        crate::level::each(|l| {
            for case in 0..300 {
                let ic = [1, 2, 3, 5, 8, 9, 16, 17, 24, 33, 64][next(11)];
                let oc = 1 + next(FEW_OUTPUTS);
                let (k_h, k_w) = [(3, 3), (5, 5), (1, 1), (1, 5), (7, 1), (2, 3)][next(6)];
                let (stride_h, stride_w) = (1 + next(3), 1 + next(3));
                let (dil_h, dil_w) = if next(3) == 0 { (1 + next(2), 1 + next(2)) } else { (1, 1) };
                let same = next(2) == 0;
                let (in_h, in_w) = (1 + next(11), 1 + next(37));
                let batch = 2;
                let Some(g) = batch_window(batch, (in_h, in_w), (k_h, k_w), (stride_h, stride_w), (dil_h, dil_w), same) else { continue };
                let (out_h, out_w) = (g.out_h, g.out_w);
                let x: Vec<f32> = (0..batch * in_h * in_w * ic).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..oc * k_h * k_w * ic).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let b: Vec<f32> = (0..oc).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = if case % 3 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let bias = (case % 4 != 1).then_some(&b[..]);
                let total = batch * out_h;
                let start = next(total);
                // One row of scratch, a few rows, or the default band.
                let row = out_w * ic;
                let scratch_len = [row, row * (1 + next(3)), few_outputs_scratch(&g, ic)][next(3)];
                let mut scratch = vec![f32::NAN; scratch_len];
                let mut out = vec![f32::NAN; (total - start) * out_w * oc];
                conv2d_few_outputs(&x, ic, &w, bias, oc, &g, clamp, &mut out, start..total, &mut scratch);
                let r = naive_conv(&x, ic, &w, oc, &g);
                for (i, (&a, &e)) in out.iter().zip(&r[start * out_w * oc..]).enumerate() {
                    let e = clamp.apply(e + bias.map_or(0.0, |b| b[i % oc]));
                    assert!(
                        (a - e).abs() < 1e-4 * (1.0 + e.abs()),
                        "{l:?} case {case}: ic{ic} oc{oc} k{k_h}x{k_w} s{stride_h}x{stride_w} d{dil_h}x{dil_w} at {i}: {a} vs {e}"
                    );
                }
            }
        });
    }

    /// Eight input channels at horizontal stride 1 (the AVX-512 pair kernel's
    /// family) against the definition: rows from 1 to 70 pixels wide (blocks of 16
    /// inside, on both borders and cut short), filters 1x2 to 7x7, vertical strides,
    /// dilation, SAME and VALID, one and two outputs; a row range split in two
    /// (a thread's share) gives the same bits as the whole.
    #[test]
    fn few_outputs_eight_channels_match_naive() {
        let mut next = crate::testutil::xorshift(0x3c6e_f372);
        crate::level::each(|l| {
            for case in 0..150 {
                let (ic, oc) = (8, 1 + next(FEW_OUTPUTS));
                let (k_h, k_w) = [(3, 3), (5, 5), (7, 7), (1, 2), (3, 1), (2, 3)][next(6)];
                let stride_h = 1 + next(2);
                let (dil_h, dil_w) = if next(3) == 0 { (1 + next(2), 1 + next(2)) } else { (1, 1) };
                let same = next(2) == 0;
                let (in_h, in_w) = (1 + next(9), 1 + next(70));
                let batch = 2;
                let Some(g) = batch_window(batch, (in_h, in_w), (k_h, k_w), (stride_h, 1), (dil_h, dil_w), same) else { continue };
                let (out_h, out_w) = (g.out_h, g.out_w);
                let x: Vec<f32> = (0..batch * in_h * in_w * ic).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..oc * k_h * k_w * ic).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let b: Vec<f32> = (0..oc).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = if case % 3 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let bias = (case % 4 != 1).then_some(&b[..]);
                let total = batch * out_h;
                let mut scratch = vec![f32::NAN; few_outputs_scratch(&g, ic)];
                let mut out = vec![f32::NAN; total * out_w * oc];
                conv2d_few_outputs(&x, ic, &w, bias, oc, &g, clamp, &mut out, 0..total, &mut scratch);
                let r = naive_conv(&x, ic, &w, oc, &g);
                for (i, (&a, &e)) in out.iter().zip(&r).enumerate() {
                    let e = clamp.apply(e + bias.map_or(0.0, |b| b[i % oc]));
                    assert!(
                        (a - e).abs() < 1e-4 * (1.0 + e.abs()),
                        "{l:?} case {case}: oc{oc} k{k_h}x{k_w} s{stride_h} d{dil_h}x{dil_w} {in_h}x{in_w} at {i}: {a} vs {e}"
                    );
                }
                let mid = next(total + 1);
                let mut split = vec![f32::NAN; total * out_w * oc];
                let (lo, hi) = split.split_at_mut(mid * out_w * oc);
                conv2d_few_outputs(&x, ic, &w, bias, oc, &g, clamp, lo, 0..mid, &mut scratch);
                conv2d_few_outputs(&x, ic, &w, bias, oc, &g, clamp, hi, mid..total, &mut scratch);
                assert!(out.iter().zip(&split).all(|(a, b)| a.to_bits() == b.to_bits()), "{l:?} case {case}: split at row {mid} differs");
            }
        });
    }

    /// The transposed convolution over a share of its output rows equals the same
    /// rows of the whole call, bit for bit (what a split over threads relies on).
    #[test]
    fn transpose_rows_match_the_whole_output() {
        crate::level::each(|l| {
            for (in_c, out_c, k, s) in [(16usize, 1usize, 2usize, 2usize), (3, 5, 3, 2), (8, 17, 4, 2), (5, 2, 3, 1)] {
                let (ih, iw, batch) = (5, 7, 2);
                let (oh, ow) = (ih * s + k.saturating_sub(s), iw * s + k.saturating_sub(s));
                let g = Window {
                    batch,
                    in_h: oh,
                    in_w: ow,
                    out_h: ih,
                    out_w: iw,
                    k_h: k,
                    k_w: k,
                    stride_h: s,
                    stride_w: s,
                    dil_h: 1,
                    dil_w: 1,
                    pad_top: 0,
                    pad_left: 0,
                };
                let x: Vec<f32> = (0..batch * ih * iw * in_c).map(|i| ((i * 7 % 19) as f32) * 0.1 - 0.9).collect();
                let w: Vec<f32> = (0..out_c * k * k * in_c).map(|i| ((i * 5 % 13) as f32) * 0.1 - 0.6).collect();
                let b: Vec<f32> = (0..out_c).map(|i| i as f32 * 0.25).collect();
                let mut whole = vec![0.0; batch * oh * ow * out_c];
                transpose_conv2d(&x, in_c, &w, Some(&b), out_c, &g, Clamp::RELU6, &mut whole);
                let row = ow * out_c;
                for (lo, hi) in [(0, 1), (3, batch * oh), (oh - 1, oh + 2)] {
                    let mut part = vec![f32::NAN; (hi - lo) * row];
                    transpose_conv2d_rows(&x, in_c, &w, Some(&b), out_c, &g, Clamp::RELU6, &mut part, lo..hi);
                    assert_eq!(part, whole[lo * row..hi * row], "{l:?} ic{in_c} oc{out_c} k{k} s{s} rows {lo}..{hi}");
                }
            }
        });
    }

    /// Runs [`depthwise_conv2d`] on output rows `start..` of `g` (`in_c` input
    /// channels, multiplier `mult`) and checks every output against the sum
    /// written out from the definition; `l` names the vector level in a failure.
    #[allow(clippy::too_many_arguments)]
    fn depthwise_rows_match_definition(
        l: &dyn std::fmt::Debug,
        x: &[f32],
        in_c: usize,
        mult: usize,
        w: &[f32],
        bias: Option<&[f32]>,
        g: &Window,
        clamp: Clamp,
        start: usize,
    ) {
        let (oc, total) = (in_c * mult, g.batch * g.out_h);
        let mut out = vec![f32::NAN; (total - start) * g.out_w * oc];
        depthwise_conv2d(x, in_c, mult, w, bias, g, clamp, &mut out, start..total);
        for row in start..total {
            let (n, oy) = (row / g.out_h, row % g.out_h);
            for ox in 0..g.out_w {
                for o in 0..oc {
                    let mut s = bias.map_or(0.0, |b| b[o]);
                    for ky in 0..g.k_h {
                        let Some(y) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
                        for kx in 0..g.k_w {
                            let Some(xx) = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_left).filter(|&v| v < g.in_w) else { continue };
                            s += x[((n * g.in_h + y) * g.in_w + xx) * in_c + o / mult] * w[(ky * g.k_w + kx) * oc + o];
                        }
                    }
                    let got = out[((row - start) * g.out_w + ox) * oc + o];
                    assert!((got - clamp.apply(s)).abs() < 1e-4, "{l:?} {g:?} c{in_c} m{mult}: {got} vs {s} at row {row} x {ox} ch {o}");
                }
            }
        }
    }

    /// Random geometries against the definition: odd channel counts, multipliers
    /// 1-16, 1xN and Nx1 filters, strides 1-4, dilation, SAME and VALID, batch 2,
    /// and row ranges that start mid-image (as a thread's share does).
    #[test]
    fn depthwise_random_geometries_match_naive() {
        let mut next = crate::testutil::xorshift(0x2545_f491);
        crate::level::each(|l| {
            for case in 0..400 {
                let c = [1, 2, 3, 5, 7, 8, 9, 13, 16, 17, 24, 31, 40, 64, 72][next(15)];
                let mult = [1, 1, 2, 3, 4, 5, 8, 16][next(8)];
                let (k_h, k_w) = [(3, 3), (5, 5), (7, 7), (1, 5), (9, 1), (1, 9), (2, 3), (1, 1)][next(8)];
                let (stride_h, stride_w) = (1 + next(4), 1 + next(4));
                let (dil_h, dil_w) = if next(3) == 0 { (1 + next(3), 1 + next(3)) } else { (1, 1) };
                let same = next(2) == 0;
                // A quarter are one column wide ([batch, T, 1, C] audio shapes).
                let (in_h, in_w) = (1 + next(12), if next(4) == 0 { 1 } else { 1 + next(40) });
                let (k_h, k_w) = if in_w == 1 && next(2) == 0 { (k_h.max(k_w), 1) } else { (k_h, k_w) };
                let batch = 2;
                let Some(g) = batch_window(batch, (in_h, in_w), (k_h, k_w), (stride_h, stride_w), (dil_h, dil_w), same) else { continue };
                let out_h = g.out_h;
                let oc = c * mult;
                let x: Vec<f32> = (0..batch * in_h * in_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..k_h * k_w * oc).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let b: Vec<f32> = (0..oc).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = if case % 3 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let bias = (case % 4 != 1).then_some(&b[..]);
                let start = next(batch * out_h);
                depthwise_rows_match_definition(&l, &x, c, mult, &w, bias, &g, clamp, start);
            }
        });
    }

    /// The AVX-512 row tiles (3-, 5- and 9-wide filters at horizontal stride 1 or
    /// 2, tiles of 1 to 8 pixels with the borders inside them; multiplier 1, or one
    /// input channel broadcast under a multiplier): maps from 1 to 30
    /// columns (every tile size and both edges in one tile), odd channel counts and
    /// ones past a channel group, `[batch, T, 1, C]` maps split mid-item, and
    /// row ranges starting anywhere, under every vector level.
    #[test]
    fn depthwise_row_tiles_match_naive() {
        let mut next = crate::testutil::xorshift(0x9e37_79b9);
        crate::level::each(|l| {
            for case in 0..300 {
                let c = [8, 9, 16, 17, 24, 31, 48, 64, 96, 170][next(10)];
                // A third have one input channel under a multiplier (broadcast tiles).
                let (in_c, mult) = if next(3) == 0 { (1, c) } else { (c, 1) };
                let kw = [3, 5, 9][next(3)];
                let column = next(4) == 0;
                let (k_h, k_w, in_h, in_w) = if column { (kw, 1, 1 + next(40), 1) } else { (1 + next(5), kw, 1 + next(8), 1 + next(30)) };
                let (stride_h, stride_w) = if column { (1 + next(2), 1) } else { (1 + next(2), 1 + next(2)) };
                let dil_h = 1 + next(2);
                let same = next(3) != 0;
                let batch = 2;
                let Some(g) = batch_window(batch, (in_h, in_w), (k_h, k_w), (stride_h, stride_w), (dil_h, 1), same) else { continue };
                let out_h = g.out_h;
                let x: Vec<f32> = (0..batch * in_h * in_w * in_c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..k_h * k_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let b: Vec<f32> = (0..c).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = if case % 3 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let bias = (case % 4 != 1).then_some(&b[..]);
                let start = next(batch * out_h);
                depthwise_rows_match_definition(&l, &x, in_c, mult, &w, bias, &g, clamp, start);
            }
        });
    }

    /// Maps 1 to 8 pixels wide under 3x3 filters at stride 1 (the AVX-512 row-pair
    /// tiles, and the single-row path for a row left without a partner): SAME and
    /// VALID, 1 to 12 rows, channel counts odd and past a block of 16, batch 2, row
    /// ranges starting and ending anywhere (pairs that would straddle two batch
    /// items or the range's end), under every vector level.
    #[test]
    fn depthwise_narrow_row_pairs_match_naive() {
        let mut next = crate::testutil::xorshift(0x51ed_270b);
        crate::level::each(|l| {
            for case in 0..300 {
                let c = [1, 3, 8, 9, 16, 17, 31, 64, 96, 130][next(10)];
                let same = next(3) != 0;
                let (in_h, in_w) = (1 + next(12), 1 + next(10));
                let Some((out_h, pad_top)) = out_size_and_pad(in_h, 3, 1, 1, same) else { continue };
                let Some((out_w, pad_left)) = out_size_and_pad(in_w, 3, 1, 1, same) else { continue };
                if out_h == 0 || out_w == 0 {
                    continue;
                }
                let batch = 2;
                let g = Window { batch, in_h, in_w, out_h, out_w, k_h: 3, k_w: 3, stride_h: 1, stride_w: 1, dil_h: 1, dil_w: 1, pad_top, pad_left };
                let x: Vec<f32> = (0..batch * in_h * in_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..9 * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let b: Vec<f32> = (0..c).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = if case % 3 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let bias = (case % 4 != 1).then_some(&b[..]);
                let start = next(batch * out_h);
                depthwise_rows_match_definition(&l, &x, c, 1, &w, bias, &g, clamp, start);
                // A range that ends mid-image as well (a thread's share).
                let total = batch * out_h;
                let end = start + 1 + next(total - start);
                let mut part = vec![f32::NAN; (end - start) * out_w * c];
                depthwise_conv2d(&x, c, 1, &w, bias, &g, clamp, &mut part, start..end);
                let mut whole = vec![f32::NAN; total * out_w * c];
                depthwise_conv2d(&x, c, 1, &w, bias, &g, clamp, &mut whole, 0..total);
                assert_eq!(
                    part[..].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    whole[start * out_w * c..end * out_w * c].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{l:?} {g:?} c{c} rows {start}..{end}"
                );
            }
        });
    }

    /// Multiplier 1 over 8, 16 and 24 channels at horizontal stride 1 (the AVX-512
    /// flat-row tiles, with half-vector shuffles at 8 and 24 channels), and 40 and
    /// 32 beside them: 3- and 5-wide filters 1-5 tall, maps 14-70 pixels wide (whole
    /// tiles, the 2-pixel and single-pixel remainders, both borders), vertical
    /// stride 1-2 and dilation 1-2, SAME and VALID, batch 2, bias or none, ReLU6 or
    /// none, row ranges starting mid-image, under every vector level.
    #[test]
    fn depthwise_flat_rows_match_naive() {
        let mut next = crate::testutil::xorshift(0x7f4a_7c15);
        crate::level::each(|l| {
            for case in 0..160 {
                let c = [8, 8, 16, 24, 24, 40, 32][next(7)];
                let k_w = [3, 5][next(2)];
                let k_h = 1 + next(5);
                let (in_h, in_w) = (1 + next(8), 14 + next(57));
                let (stride_h, dil_h) = (1 + next(2), 1 + next(2));
                let same = next(3) != 0;
                let batch = 2;
                let Some(g) = batch_window(batch, (in_h, in_w), (k_h, k_w), (stride_h, 1), (dil_h, 1), same) else { continue };
                let out_h = g.out_h;
                let x: Vec<f32> = (0..batch * in_h * in_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..k_h * k_w * c).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let b: Vec<f32> = (0..c).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = if case % 3 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let bias = (case % 4 != 1).then_some(&b[..]);
                let start = next(batch * out_h);
                depthwise_rows_match_definition(&l, &x, c, 1, &w, bias, &g, clamp, start);
            }
        });
    }

    /// One input channel under multipliers of 8, 24 and 40 (the AVX-512 kernel
    /// with pixels along the lanes, and multipliers of 16 and 32 that stay off
    /// it): filters 1-9 wide and tall, horizontal stride 1 or 2 and vertical 1-3,
    /// dilation in both directions, SAME and VALID, rows from 8 to 300 pixels
    /// (tiles of 16-48 with a masked tail, rows split into several pieces when the
    /// lines of tall dilated filters fill the buffer), `[batch, T, 1, 1]` maps
    /// along T, and row ranges starting mid-image, under every vector level.
    #[test]
    fn depthwise_pixel_lanes_match_naive() {
        let mut next = crate::testutil::xorshift(0x51ed_270b);
        crate::level::each(|l| {
            for case in 0..160 {
                let mult = [8, 8, 24, 40, 16, 32][next(6)];
                let column = next(5) == 0;
                let (k_h, k_w) = if column { (1 + next(9), 1) } else { (1 + next(9), 1 + next(9)) };
                let (in_h, in_w) = if column { (8 + next(300), 1) } else { (1 + next(12), 8 + next(300)) };
                let (stride_h, stride_w) = if column { (1 + next(2), 1) } else { (1 + next(3), 1 + next(2)) };
                let (dil_h, dil_w) = if next(3) == 0 { (1 + next(3), if column { 1 } else { 1 + next(3) }) } else { (1, 1) };
                let same = next(3) != 0;
                let batch = 2;
                let Some(g) = batch_window(batch, (in_h, in_w), (k_h, k_w), (stride_h, stride_w), (dil_h, dil_w), same) else { continue };
                let out_h = g.out_h;
                let x: Vec<f32> = (0..batch * in_h * in_w).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let w: Vec<f32> = (0..k_h * k_w * mult).map(|_| next(1000) as f32 * 0.002 - 1.0).collect();
                let b: Vec<f32> = (0..mult).map(|_| next(1000) as f32 * 0.001).collect();
                let clamp = if case % 3 == 0 { Clamp::RELU6 } else { Clamp::NONE };
                let bias = (case % 4 != 1).then_some(&b[..]);
                let start = next(batch * out_h);
                depthwise_rows_match_definition(&l, &x, 1, mult, &w, bias, &g, clamp, start);
            }
        });
    }

    /// Every split of 1-8 output channels into input channels and a multiplier,
    /// and wider blocks with multipliers (channels past 16 and a block spanning
    /// several input channels), at strides 1-3, dilation 1-2 and widths from
    /// below one vector's pixels to several tiles: the pixel packing (several
    /// pixels per vector), its edge masks and its lane permutations.
    #[test]
    fn depthwise_packed_pixels_match_naive() {
        let naive = |x: &[f32], c: usize, mult: usize, w: &[f32], b: &[f32], g: &Window| {
            let oc = c * mult;
            let mut out = vec![0.0f32; g.batch * g.out_h * g.out_w * oc];
            for n in 0..g.batch {
                for oy in 0..g.out_h {
                    for ox in 0..g.out_w {
                        for o in 0..oc {
                            let mut s = b[o];
                            for ky in 0..g.k_h {
                                let Some(y) = g.in_y(oy, ky) else { continue };
                                for kx in 0..g.k_w {
                                    let Some(xx) = g.in_x(ox, kx) else { continue };
                                    s += x[((n * g.in_h + y) * g.in_w + xx) * c + o / mult] * w[(ky * g.k_w + kx) * oc + o];
                                }
                            }
                            out[((n * g.out_h + oy) * g.out_w + ox) * oc + o] = s;
                        }
                    }
                }
            }
            out
        };
        let splits = [
            (1, 1),
            (2, 1),
            (1, 2),
            (3, 1),
            (1, 3),
            (4, 1),
            (2, 2),
            (1, 4),
            (5, 1),
            (6, 1),
            (3, 2),
            (2, 3),
            (7, 1),
            (8, 1),
            (4, 2),
            (2, 4),
            (1, 8),
            (1, 16),
            (3, 8),
            (5, 4),
            (2, 12),
        ];
        crate::level::each(|l| {
            for (i, &(c, mult)) in splits.iter().enumerate() {
                for stride in 1..=3 {
                    for dil in [1, 2] {
                        for in_w in [1, 3, 9, 17, 40] {
                            let (k, in_h) = (if i % 2 == 0 { 3 } else { 5 }, 4);
                            let Some((out_w, pad_left)) = out_size_and_pad(in_w, k, stride, dil, true) else { continue };
                            let (out_h, pad_top) = out_size_and_pad(in_h, k, 1, 1, true).unwrap();
                            let g = Window {
                                batch: 2,
                                in_h,
                                in_w,
                                out_h,
                                out_w,
                                k_h: k,
                                k_w: k,
                                stride_h: 1,
                                stride_w: stride,
                                dil_h: 1,
                                dil_w: dil,
                                pad_top,
                                pad_left,
                            };
                            let oc = c * mult;
                            let x: Vec<f32> = (0..2 * in_h * in_w * c).map(|j| ((j * 13 % 17) as f32) * 0.1 - 0.8).collect();
                            let w: Vec<f32> = (0..k * k * oc).map(|j| ((j * 5 % 7) as f32) * 0.2 - 0.6).collect();
                            let b: Vec<f32> = (0..oc).map(|j| j as f32 * 0.01).collect();
                            let want = naive(&x, c, mult, &w, &b, &g);
                            // From row 1: a thread's share that starts mid-image.
                            let mut out = vec![f32::NAN; (2 * out_h - 1) * out_w * oc];
                            depthwise_conv2d(&x, c, mult, &w, Some(&b), &g, Clamp::NONE, &mut out, 1..2 * out_h);
                            for (j, (a, r)) in out.iter().zip(&want[out_w * oc..]).enumerate() {
                                assert!((a - r).abs() < 1e-4, "{l:?} c{c} m{mult} s{stride} d{dil} w{in_w}: {a} vs {r} at {j}");
                            }
                        }
                    }
                }
            }
        });
    }

    #[test]
    fn same_padding_matches_tflite_rule() {
        assert_eq!(out_size_and_pad(224, 3, 2, 1, true), Some((112, 0)));
        assert_eq!(out_size_and_pad(5, 3, 1, 1, true), Some((5, 1)));
        assert_eq!(out_size_and_pad(5, 3, 1, 1, false), Some((3, 0)));
        // VALID with the filter wider than the input by less than a stride: empty.
        assert_eq!(out_size_and_pad(2, 3, 1, 1, false), Some((0, 0)));
        assert_eq!(out_size_and_pad(3, 5, 2, 1, false), Some((0, 1)));
        assert_eq!(out_size_and_pad(1, 3, 1, 1, false), None);
    }
}
