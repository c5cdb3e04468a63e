//! Convolutions, pooling, fully-connected, batch matmul and softmax, float32.

use super::{clamp, clamp_bounds, count, input, output, require_f32};
use crate::backend::{Built, InputDesc, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{OpParams, Padding};

/// The 4-D shape of an input, or an error naming it.
fn rank4(op: &OpContext<'_>, d: &InputDesc<'_>, what: &str) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(&d.shape[..]).map_err(|_| op.bad(format!("{what} must be 4-D, got {:?}", d.shape)))
}

/// One spatial axis of a window op: output size and the padding before the
/// first input element.
#[derive(Debug, Clone, Copy)]
struct Axis {
    input: usize,
    output: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_before: usize,
}

impl Axis {
    /// The geometry of one axis. SAME: output = ceil(input / stride), the total
    /// padding needed to cover it split with the smaller half first. VALID: the
    /// count of whole windows. `folded` is explicit zero padding (before, after)
    /// of a PAD op folded into a VALID window: VALID over the padded extent.
    fn new(op: &OpContext<'_>, input: usize, kernel: usize, stride: usize, dilation: usize, padding: Padding, folded: Option<(usize, usize)>) -> Result<Axis> {
        let bad = || op.bad(format!("window of {kernel} (stride {stride}, dilation {dilation}) does not fit input {input}"));
        if kernel == 0 || stride == 0 || dilation == 0 {
            return Err(bad());
        }
        let extent = (kernel - 1).checked_mul(dilation).and_then(|e| e.checked_add(1)).ok_or_else(bad)?;
        let valid = |n: usize| n.checked_add(stride).and_then(|v| v.checked_sub(extent)).map(|v| v / stride).ok_or_else(bad);
        let (output, pad_before) = match (padding, folded) {
            (Padding::Valid, Some((before, after))) => (valid(input.checked_add(before).and_then(|v| v.checked_add(after)).ok_or_else(bad)?)?, before),
            (Padding::Valid, None) => (valid(input)?, 0),
            (Padding::Same, None) => {
                let output = input.div_ceil(stride);
                let needed = ((output.max(1) - 1) * stride + extent).saturating_sub(input);
                (output, needed / 2)
            }
            (Padding::Same, Some(_)) => return Err(op.unsupported("a PAD folded into a SAME window")),
        };
        Ok(Axis { input, output, kernel, stride, dilation, pad_before })
    }

    /// The input position tap `k` of output position `o` reads, or `None` in the padding.
    fn source(&self, o: usize, k: usize) -> Option<usize> {
        (o * self.stride + k * self.dilation).checked_sub(self.pad_before).filter(|&i| i < self.input)
    }

    /// The taps of output position `o` that read inside the input (the others
    /// read zero padding): k with pad_before <= o*stride + k*dilation < pad_before + input.
    /// Looping over these alone keeps a hostile window of 2^20 taps from costing
    /// 2^20 iterations per output.
    fn taps(&self, o: usize) -> std::ops::Range<usize> {
        let origin = o * self.stride;
        let first = self.pad_before.saturating_sub(origin).div_ceil(self.dilation);
        let end = match (self.pad_before + self.input).checked_sub(origin + 1) {
            Some(last) => (last / self.dilation + 1).min(self.kernel),
            None => 0,
        };
        first.min(end)..end
    }
}

/// Explicit padding (before, after) of one axis.
type Folded = Option<(usize, usize)>;

/// The folded PAD amounts (top, bottom) and (left, right), if any.
fn folded(op: &OpContext<'_>) -> (Folded, Folded) {
    match op.input_pad {
        Some([t, b, l, r]) => (Some((t, b)), Some((l, r))),
        None => (None, None),
    }
}

/// Checks that an optional bias has `n` elements.
fn check_bias(op: &OpContext<'_>, i: usize, n: usize) -> Result<bool> {
    match op.opt_input(i) {
        Some(b) if b.shape.iter().product::<usize>() != n => Err(op.bad(format!("bias has shape {:?}, expected {n} elements", b.shape))),
        Some(_) => Ok(true),
        None => Ok(false),
    }
}

/// CONV_2D: out[b, y, x, o] = bias[o] + sum over (ky, kx, c) of
/// in[b, y*sh + ky*dh - pad_top, x*sw + kx*dw - pad_left, c] * w[o, ky, kx, c],
/// taps in the padding reading zero.
pub(crate) fn conv2d(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Conv2D { padding, stride, dilation, activation } = op.op.params else { return Err(op.bad("missing Conv2D options")) };
    require_f32(op, &[0, 1, 2])?;
    let [n, h, w, c] = rank4(op, op.input(0)?, "input")?;
    let [oc, kh, kw, kc] = rank4(op, op.input(1)?, "filter")?;
    if kc != c {
        return Err(op.unsupported(format!("grouped convolution (input has {c} channels, filter {kc})")));
    }
    let has_bias = check_bias(op, 2, oc)?;
    let (fy, fx) = folded(op);
    let ay = Axis::new(op, h, kh, stride.0, dilation.0, padding, fy)?;
    let ax = Axis::new(op, w, kw, stride.1, dilation.1, padding, fx)?;
    let out_shape = vec![n, ay.output, ax.output, oc];
    let (n_in, n_w, n_out) = (count(op, &[n, h, w, c], 4)?, count(op, &[oc, kh, kw, c], 4)?, count(op, &out_shape, 4)?);
    let bounds = clamp_bounds(activation);
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, n_in)?;
            let wt = input::<f32>(ins, 1, n_w)?;
            let bias = if has_bias { Some(input::<f32>(ins, 2, oc)?) } else { None };
            let out = output::<f32>(outs, 0, n_out)?;
            for b in 0..n {
                for y in 0..ay.output {
                    for xo in 0..ax.output {
                        for o in 0..oc {
                            let mut acc = bias.map_or(0.0, |bv| f64::from(bv[o]));
                            for ky in ay.taps(y) {
                                let Some(iy) = ay.source(y, ky) else { continue };
                                for kx in ax.taps(xo) {
                                    let Some(ix) = ax.source(xo, kx) else { continue };
                                    for ci in 0..c {
                                        let xv = x[((b * h + iy) * w + ix) * c + ci];
                                        let wv = wt[((o * kh + ky) * kw + kx) * c + ci];
                                        acc += f64::from(xv) * f64::from(wv);
                                    }
                                }
                            }
                            out[((b * ay.output + y) * ax.output + xo) * oc + o] = clamp(acc as f32, bounds);
                        }
                    }
                }
            }
            Ok(())
        }),
    })
}

/// DEPTHWISE_CONV_2D: output channel o = ci * multiplier + m reads only input
/// channel ci: out[b, y, x, o] = bias[o] + sum over (ky, kx) of
/// in[b, iy, ix, o / multiplier] * w[0, ky, kx, o].
pub(crate) fn depthwise(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::DepthwiseConv2D { padding, stride, dilation, activation, .. } = op.op.params else {
        return Err(op.bad("missing DepthwiseConv2D options"));
    };
    require_f32(op, &[0, 1, 2])?;
    let [n, h, w, c] = rank4(op, op.input(0)?, "input")?;
    let [one, kh, kw, oc] = rank4(op, op.input(1)?, "filter")?;
    if one != 1 || c == 0 || oc % c != 0 {
        return Err(op.bad(format!("depthwise filter {:?} does not match input {:?}", op.input(1)?.shape, op.input(0)?.shape)));
    }
    // The multiplier follows from the shapes (newer files may leave the option 0).
    let mult = oc / c;
    let has_bias = check_bias(op, 2, oc)?;
    let (fy, fx) = folded(op);
    let ay = Axis::new(op, h, kh, stride.0, dilation.0, padding, fy)?;
    let ax = Axis::new(op, w, kw, stride.1, dilation.1, padding, fx)?;
    let out_shape = vec![n, ay.output, ax.output, oc];
    let (n_in, n_w, n_out) = (count(op, &[n, h, w, c], 4)?, count(op, &[kh, kw, oc], 4)?, count(op, &out_shape, 4)?);
    let bounds = clamp_bounds(activation);
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, n_in)?;
            let wt = input::<f32>(ins, 1, n_w)?;
            let bias = if has_bias { Some(input::<f32>(ins, 2, oc)?) } else { None };
            let out = output::<f32>(outs, 0, n_out)?;
            for b in 0..n {
                for y in 0..ay.output {
                    for xo in 0..ax.output {
                        for o in 0..oc {
                            let ci = o / mult;
                            let mut acc = bias.map_or(0.0, |bv| f64::from(bv[o]));
                            for ky in ay.taps(y) {
                                let Some(iy) = ay.source(y, ky) else { continue };
                                for kx in ax.taps(xo) {
                                    let Some(ix) = ax.source(xo, kx) else { continue };
                                    acc += f64::from(x[((b * h + iy) * w + ix) * c + ci]) * f64::from(wt[(ky * kw + kx) * oc + o]);
                                }
                            }
                            out[((b * ay.output + y) * ax.output + xo) * oc + o] = clamp(acc as f32, bounds);
                        }
                    }
                }
            }
            Ok(())
        }),
    })
}

/// What a pooling op computes over a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pool {
    /// AVERAGE_POOL_2D: the mean of the in-bounds taps.
    Average,
    /// MAX_POOL_2D: the largest tap.
    Max,
    /// L2_POOL_2D: `sqrt(sum of x^2 / taps)`.
    L2,
}

/// AVERAGE_POOL_2D / MAX_POOL_2D / L2_POOL_2D per channel over the window's
/// in-bounds taps, then the fused activation; the average and the L2 norm divide
/// by how many taps were in bounds (padding is not counted).
pub(crate) fn pool(op: &OpContext<'_>, kind: Pool) -> Result<Built> {
    let OpParams::Pool2D { padding, stride, filter, activation } = op.op.params else { return Err(op.bad("missing Pool2D options")) };
    require_f32(op, &[0])?;
    if op.input_pad.is_some() {
        return Err(op.unsupported("a PAD folded into a pool"));
    }
    let [n, h, w, c] = rank4(op, op.input(0)?, "input")?;
    let ay = Axis::new(op, h, filter.0, stride.0, 1, padding, None)?;
    let ax = Axis::new(op, w, filter.1, stride.1, 1, padding, None)?;
    let out_shape = vec![n, ay.output, ax.output, c];
    let (n_in, n_out) = (count(op, &[n, h, w, c], 4)?, count(op, &out_shape, 4)?);
    let bounds = clamp_bounds(activation);
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, n_in)?;
            let out = output::<f32>(outs, 0, n_out)?;
            for b in 0..n {
                for y in 0..ay.output {
                    for xo in 0..ax.output {
                        for ch in 0..c {
                            // LiteRT starts the maximum at the lowest finite float.
                            let (mut best, mut sum, mut squares, mut taps) = (f32::MIN, 0.0f64, 0.0f64, 0usize);
                            for ky in ay.taps(y) {
                                let Some(iy) = ay.source(y, ky) else { continue };
                                for kx in ax.taps(xo) {
                                    let Some(ix) = ax.source(xo, kx) else { continue };
                                    let v = x[((b * h + iy) * w + ix) * c + ch];
                                    best = best.max(v);
                                    sum += f64::from(v);
                                    squares += f64::from(v) * f64::from(v);
                                    taps += 1;
                                }
                            }
                            let v = match kind {
                                Pool::Max => best,
                                _ if taps == 0 => 0.0,
                                Pool::Average => (sum / taps as f64) as f32,
                                Pool::L2 => (squares / taps as f64).sqrt() as f32,
                            };
                            out[((b * ay.output + y) * ax.output + xo) * c + ch] = clamp(v, bounds);
                        }
                    }
                }
            }
            Ok(())
        }),
    })
}

/// FULLY_CONNECTED: the input is rows of `in` values (weights [out, in]);
/// out[r, o] = bias[o] + sum over i of in[r, i] * w[o, i].
pub(crate) fn fully_connected(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::FullyConnected { activation, keep_num_dims, shuffled_weights, .. } = op.op.params else {
        return Err(op.bad("missing FullyConnected options"));
    };
    if shuffled_weights {
        return Err(op.unsupported("shuffled weights format"));
    }
    require_f32(op, &[0, 1, 2])?;
    let x = op.input(0)?.shape.clone();
    let ws = &op.input(1)?.shape;
    let [units, depth] = <[usize; 2]>::try_from(&ws[..]).map_err(|_| op.bad(format!("weights must be 2-D, got {ws:?}")))?;
    let total = count(op, &x, 4)?;
    if depth == 0 || total % depth != 0 {
        return Err(op.bad(format!("input {x:?} is not a whole number of rows of {depth}")));
    }
    let rows = total / depth;
    let has_bias = check_bias(op, 2, units)?;
    let out_shape = if keep_num_dims {
        let mut s = x.clone();
        match s.last_mut() {
            Some(l) if *l == depth => *l = units,
            _ => return Err(op.bad(format!("keep_num_dims needs the input's last dimension {x:?} to be {depth}"))),
        }
        s
    } else {
        vec![rows, units]
    };
    let (n_w, n_out) = (count(op, &[units, depth], 4)?, count(op, &out_shape, 4)?);
    let bounds = clamp_bounds(activation);
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let xv = input::<f32>(ins, 0, total)?;
            let wv = input::<f32>(ins, 1, n_w)?;
            let bias = if has_bias { Some(input::<f32>(ins, 2, units)?) } else { None };
            let out = output::<f32>(outs, 0, n_out)?;
            for r in 0..rows {
                for o in 0..units {
                    let mut acc = bias.map_or(0.0, |b| f64::from(b[o]));
                    for i in 0..depth {
                        acc += f64::from(xv[r * depth + i]) * f64::from(wv[o * depth + i]);
                    }
                    out[r * units + o] = clamp(acc as f32, bounds);
                }
            }
            Ok(())
        }),
    })
}

/// TRANSPOSE_CONV (inputs: output_shape, weights [oc, kh, kw, ic], input, bias):
/// the gradient of a convolution. Input pixel (iy, ix) tap (ky, kx) adds to
/// output (iy*sh + ky - pad_top, ix*sw + kx - pad_left); computed here per output
/// element by finding the input pixels that land on it.
pub(crate) fn transpose_conv(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    require_f32(op, &[1, 2, 3])?;
    let target = op.const_ints(0)?;
    let [n, h, w, c] = rank4(op, op.input(2)?, "input")?;
    let [oc, kh, kw, kc] = rank4(op, op.input(1)?, "filter")?;
    if target.len() != 4 || target.iter().any(|&d| d <= 0) || target[0] as usize != n || target[3] as usize != oc || kc != c {
        return Err(op.bad(format!("output_shape {target:?} does not match input {:?} / filter {:?}", op.input(2)?.shape, op.input(1)?.shape)));
    }
    let (oh, ow) = (usize::try_from(target[1]).map_err(|_| op.bad("output height"))?, usize::try_from(target[2]).map_err(|_| op.bad("output width"))?);
    let has_bias = check_bias(op, 3, oc)?;
    let out_shape = vec![n, oh, ow, oc];
    let (n_in, n_w, n_out) = (count(op, &[n, h, w, c], 4)?, count(op, &[oc, kh, kw, c], 4)?, count(op, &out_shape, 4)?);
    let (sh, sw) = stride;
    if sh == 0 || sw == 0 {
        return Err(op.bad("stride 0"));
    }
    // The padding of the forward convolution that maps this output back onto the
    // input: SAME pads half of what covering the output needs, VALID none.
    let pad = |out: usize, k: usize, s: usize, inp: usize| match padding {
        Padding::Same => ((inp.max(1) - 1) * s + k).saturating_sub(out) / 2,
        Padding::Valid => 0,
    };
    let (pt, pl) = (pad(oh, kh, sh, h), pad(ow, kw, sw, w));
    let bounds = clamp_bounds(activation);
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 2, n_in)?;
            let wt = input::<f32>(ins, 1, n_w)?;
            let bias = if has_bias { Some(input::<f32>(ins, 3, oc)?) } else { None };
            let out = output::<f32>(outs, 0, n_out)?;
            // Input position landing on output position `o` through tap `k`.
            let source =
                |o: usize, k: usize, s: usize, pad: usize, size: usize| (o + pad).checked_sub(k).filter(|v| v % s == 0).map(|v| v / s).filter(|&i| i < size);
            for b in 0..n {
                for y in 0..oh {
                    for xo in 0..ow {
                        for o in 0..oc {
                            let mut acc = bias.map_or(0.0, |bv| f64::from(bv[o]));
                            for ky in 0..kh {
                                let Some(iy) = source(y, ky, sh, pt, h) else { continue };
                                for kx in 0..kw {
                                    let Some(ix) = source(xo, kx, sw, pl, w) else { continue };
                                    for ci in 0..c {
                                        acc += f64::from(x[((b * h + iy) * w + ix) * c + ci]) * f64::from(wt[((o * kh + ky) * kw + kx) * c + ci]);
                                    }
                                }
                            }
                            out[((b * oh + y) * ow + xo) * oc + o] = clamp(acc as f32, bounds);
                        }
                    }
                }
            }
            Ok(())
        }),
    })
}

/// BATCH_MATMUL: out[..., i, j] = sum over k of A[..., i, k] * B[..., k, j], with
/// A or B read transposed (adj_x / adj_y) and the batch dimensions broadcast.
pub(crate) fn batch_matmul(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::BatchMatMul { adj_x, adj_y, .. } = op.op.params else { return Err(op.bad("missing BatchMatMul options")) };
    require_f32(op, &[0, 1])?;
    let (a, b) = (op.input(0)?.shape.clone(), op.input(1)?.shape.clone());
    if a.len() < 2 || b.len() < 2 {
        return Err(op.bad(format!("operands must be at least 2-D, got {a:?} and {b:?}")));
    }
    let (ra, rb) = (a.len(), b.len());
    let (m, ka) = if adj_x { (a[ra - 1], a[ra - 2]) } else { (a[ra - 2], a[ra - 1]) };
    let (kb, nn) = if adj_y { (b[rb - 1], b[rb - 2]) } else { (b[rb - 2], b[rb - 1]) };
    if ka != kb {
        return Err(op.bad(format!("inner dimensions differ: {a:?} x {b:?}")));
    }
    let k = ka;
    let (ba, bb) = (a[..ra - 2].to_vec(), b[..rb - 2].to_vec());
    let batch = super::broadcast_shapes(&ba, &bb).ok_or_else(|| op.bad(format!("batch dims of {a:?} and {b:?} do not broadcast")))?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, nn]);
    let (n_a, n_b, n_out) = (count(op, &a, 4)?, count(op, &b, 4)?, count(op, &out_shape, 4)?);
    let batches = count(op, &batch, 4)?;
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let av = input::<f32>(ins, 0, n_a)?;
            let bv = input::<f32>(ins, 1, n_b)?;
            let out = output::<f32>(outs, 0, n_out)?;
            for p in 0..batches {
                // The operands' own batch (a broadcast dim of size 1 always reads index 0).
                let (pa, pb) = (super::broadcast_source(p, &batch, &ba), super::broadcast_source(p, &batch, &bb));
                for i in 0..m {
                    for j in 0..nn {
                        let mut acc = 0.0f64;
                        for kk in 0..k {
                            // A is stored [m, k], or [k, m] when adj_x; B [k, n], or [n, k] when adj_y.
                            let x = av[pa * m * k + if adj_x { kk * m + i } else { i * k + kk }];
                            let y = bv[pb * k * nn + if adj_y { j * k + kk } else { kk * nn + j }];
                            acc += f64::from(x) * f64::from(y);
                        }
                        out[(p * m + i) * nn + j] = acc as f32;
                    }
                }
            }
            Ok(())
        }),
    })
}

/// SOFTMAX along the last dimension: exp(beta * (x - max)) / sum; LOG_SOFTMAX:
/// (x - max) - ln(sum exp(x - max)). Subtracting the row maximum keeps exp finite.
pub(crate) fn softmax(op: &OpContext<'_>, log: bool) -> Result<Built> {
    require_f32(op, &[0])?;
    let beta = match op.op.params {
        OpParams::Softmax { beta } => beta,
        _ => 1.0,
    };
    let s = op.input(0)?.shape.clone();
    let depth = *s.last().ok_or_else(|| op.bad("softmax of a scalar"))?;
    let total = count(op, &s, 4)?;
    Ok(Built {
        outputs: vec![(DType::F32, s)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, total)?;
            let out = output::<f32>(outs, 0, total)?;
            if depth == 0 {
                return Ok(());
            }
            for r in 0..total / depth {
                let row = &x[r * depth..(r + 1) * depth];
                let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
                let scale = if log { 1.0 } else { f64::from(beta) };
                let sum: f64 = row.iter().map(|&v| ((f64::from(v) - max) * scale).exp()).sum();
                for (i, &v) in row.iter().enumerate() {
                    let shifted = (f64::from(v) - max) * scale;
                    out[r * depth + i] = if log { (shifted - sum.ln()) as f32 } else { (shifted.exp() / sum) as f32 };
                }
            }
            Ok(())
        }),
    })
}

/// Shape checks and geometry of CONV_3D / CONV_3D_TRANSPOSE, shared with the CPU
/// kernels (ferrite-kernels); the arithmetic below is this backend's own.
fn conv3d_geometry(op: &OpContext<'_>, transpose: bool) -> Result<(ferrite_kernels::conv3d::Window3, Vec<usize>, (f32, f32))> {
    let OpParams::Conv3D { padding, stride, dilation, activation } = op.op.params else { return Err(op.bad("missing Conv3D options")) };
    let same = padding == Padding::Same;
    let g = if transpose {
        require_f32(op, &[1, 2, 3])?;
        let target = op.const_ints(0)?;
        let out: Vec<usize> = target
            .iter()
            .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
            .collect::<Option<_>>()
            .ok_or_else(|| op.bad(format!("output_shape {target:?}")))?;
        ferrite_kernels::conv3d::conv3d_transpose_geometry(&out, &op.input(1)?.shape, &op.input(2)?.shape, stride, dilation, same)
    } else {
        require_f32(op, &[0, 1, 2])?;
        ferrite_kernels::conv3d::conv3d_geometry(&op.input(0)?.shape, &op.input(1)?.shape, stride, dilation, same)
    }
    .map_err(|e| op.bad(e))?;
    let (big, small) = if transpose { (g.input, g.output) } else { (g.output, g.input) };
    let out_c = if transpose { g.in_c } else { g.out_c };
    let out = vec![g.batch, big[0], big[1], big[2], out_c];
    // Bounds every index the loops compute.
    count(op, &[g.batch, small[0], small[1], small[2], g.in_c.max(g.out_c)], 4)?;
    count(op, &out, 4)?;
    count(op, &[g.kernel[0], g.kernel[1], g.kernel[2], g.in_c, g.out_c], 4)?;
    Ok((g, out, clamp_bounds(activation)))
}

/// CONV_3D: out[b, z, y, x, o] = bias[o] + sum over (kz, ky, kx, c) of
/// in[b, z*sd + kz*dd - pd, y*sh + ky*dh - ph, x*sw + kx*dw - pw, c] * w[kz, ky, kx, c, o],
/// taps in the padding reading zero.
pub(crate) fn conv3d(op: &OpContext<'_>) -> Result<Built> {
    let (g, out_shape, bounds) = conv3d_geometry(op, false)?;
    let has_bias = check_bias(op, 2, g.out_c)?;
    let [id, ih, iw] = g.input;
    let [od, oh, ow] = g.output;
    let [kd, kh, kw] = g.kernel;
    let (ic, oc) = (g.in_c, g.out_c);
    let (n_in, n_w, n_out) = (g.batch * id * ih * iw * ic, kd * kh * kw * ic * oc, g.batch * od * oh * ow * oc);
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, n_in)?;
            let wt = input::<f32>(ins, 1, n_w)?;
            let bias = if has_bias { Some(input::<f32>(ins, 2, oc)?) } else { None };
            let out = output::<f32>(outs, 0, n_out)?;
            let at = |o: usize, k: usize, a: usize| (o * g.stride[a] + k * g.dilation[a]) as i64 - g.pad[a] as i64;
            for (i, v) in out.iter_mut().enumerate() {
                let o = i % oc;
                let (x_, y_, z_, b) = ((i / oc) % ow, (i / oc / ow) % oh, (i / oc / ow / oh) % od, i / oc / ow / oh / od);
                let mut acc = bias.map_or(0.0, |bv| f64::from(bv[o]));
                for kz in 0..kd {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let (pz, py, px) = (at(z_, kz, 0), at(y_, ky, 1), at(x_, kx, 2));
                            if pz < 0 || py < 0 || px < 0 || pz >= id as i64 || py >= ih as i64 || px >= iw as i64 {
                                continue;
                            }
                            let (pz, py, px) = (pz as usize, py as usize, px as usize);
                            for c in 0..ic {
                                acc += f64::from(x[(((b * id + pz) * ih + py) * iw + px) * ic + c])
                                    * f64::from(wt[(((kz * kh + ky) * kw + kx) * ic + c) * oc + o]);
                            }
                        }
                    }
                }
                *v = clamp(acc as f32, bounds);
            }
            Ok(())
        }),
    })
}

/// CONV_3D_TRANSPOSE: out[b, z, y, x, o] = bias[o] + sum over the input positions
/// (iz, iy, ix) and taps (kz, ky, kx) with iz*sd + kz*dd - pd == z (likewise for y and
/// x) of in[b, iz, iy, ix, c] * w[kz, ky, kx, o, c].
pub(crate) fn conv3d_transpose(op: &OpContext<'_>) -> Result<Built> {
    let (g, out_shape, bounds) = conv3d_geometry(op, true)?;
    // In the forward view: g.input is this op's output, g.output its input.
    let [od, oh, ow] = g.input;
    let [id, ih, iw] = g.output;
    let [kd, kh, kw] = g.kernel;
    let (oc, ic) = (g.in_c, g.out_c);
    let has_bias = check_bias(op, 3, oc)?;
    let (n_in, n_w, n_out) = (g.batch * id * ih * iw * ic, kd * kh * kw * oc * ic, g.batch * od * oh * ow * oc);
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 2, n_in)?;
            let wt = input::<f32>(ins, 1, n_w)?;
            let bias = if has_bias { Some(input::<f32>(ins, 3, oc)?) } else { None };
            let out = output::<f32>(outs, 0, n_out)?;
            // Input coordinate reaching output coordinate `o` through tap `k`.
            let source = |o: usize, k: usize, a: usize, size: usize| {
                (o + g.pad[a]).checked_sub(k * g.dilation[a]).filter(|v| v % g.stride[a] == 0).map(|v| v / g.stride[a]).filter(|&i| i < size)
            };
            for (i, v) in out.iter_mut().enumerate() {
                let o = i % oc;
                let (x_, y_, z_, b) = ((i / oc) % ow, (i / oc / ow) % oh, (i / oc / ow / oh) % od, i / oc / ow / oh / od);
                let mut acc = 0f64;
                for kz in 0..kd {
                    let Some(iz) = source(z_, kz, 0, id) else { continue };
                    for ky in 0..kh {
                        let Some(iy) = source(y_, ky, 1, ih) else { continue };
                        for kx in 0..kw {
                            let Some(ix) = source(x_, kx, 2, iw) else { continue };
                            for c in 0..ic {
                                acc += f64::from(x[(((b * id + iz) * ih + iy) * iw + ix) * ic + c])
                                    * f64::from(wt[(((kz * kh + ky) * kw + kx) * oc + o) * ic + c]);
                            }
                        }
                    }
                }
                *v = clamp((acc + bias.map_or(0.0, |bv| f64::from(bv[o]))) as f32, bounds);
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::float_test_util::*;
    use crate::ops::{Activation, OpParams, Padding};
    use ferrite_format::ops::BuiltinOp as B;

    fn conv_params(padding: Padding, stride: (usize, usize), dilation: (usize, usize), activation: Activation) -> OpParams {
        OpParams::Conv2D { padding, stride, dilation, activation }
    }

    /// L2_POOL_2D on both backends, SAME and VALID, with fused activations.
    #[test]
    fn l2_pool_matches_cpu() {
        let mut r = Rng::new(0x12);
        let mut worst = 0.0f64;
        for case in 0..80 {
            let (h, w, c) = (r.range(1, 8), r.range(1, 8), r.range(1, 6));
            let filter = (r.range(1, h.min(3)), r.range(1, w.min(3)));
            let padding = if r.coin() { Padding::Same } else { Padding::Valid };
            let activation = if r.coin() { Activation::None } else { Activation::ReluN1To1 };
            let params = OpParams::Pool2D { padding, stride: (r.range(1, 2), r.range(1, 2)), filter, activation };
            let t = TestOp::new(B::L2_POOL_2D, params, vec![f32_input(&[1, h, w, c], &r.floats(h * w * c))], 1);
            worst = worst.max(t.compare_with_cpu(1e-6, &format!("case {case}")));
        }
        eprintln!("L2_POOL_2D: worst relative error {worst:e}");
    }

    #[test]
    fn window_taps_are_exactly_the_in_bounds_ones() {
        for input in 0..6 {
            for kernel in 1..5 {
                for stride in 1..4 {
                    for dilation in 1..4 {
                        for pad_before in 0..5 {
                            let a = super::Axis { input, output: 8, kernel, stride, dilation, pad_before };
                            for o in 0..8 {
                                let want: Vec<usize> = (0..kernel).filter(|&k| a.source(o, k).is_some()).collect();
                                assert_eq!(a.taps(o).collect::<Vec<_>>(), want, "{a:?} output {o}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn conv_hand_computed() {
        // 1x3x3x1 input 1..9, 2x2 filter of ones, VALID stride 1: sums of 2x2 blocks.
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let t = TestOp::new(
            B::CONV_2D,
            conv_params(Padding::Valid, (1, 1), (1, 1), Activation::None),
            vec![f32_input(&[1, 3, 3, 1], &x), f32_const(&[1, 2, 2, 1], &[1.0; 4]), f32_const(&[1], &[0.5])],
            1,
        );
        assert_eq!(t.reference_f32(), (vec![1, 2, 2, 1], vec![12.5, 16.5, 24.5, 28.5]));
        // SAME with stride 2: output 2x2, padding after only (needed 1, before 0).
        let t = TestOp::new(
            B::CONV_2D,
            conv_params(Padding::Same, (2, 2), (1, 1), Activation::Relu6),
            vec![f32_input(&[1, 3, 3, 1], &x), f32_const(&[1, 2, 2, 1], &[1.0; 4]), None],
            1,
        );
        assert_eq!(t.reference_f32(), (vec![1, 2, 2, 1], vec![6.0, 6.0, 6.0, 6.0]));
    }

    #[test]
    fn conv_folded_pad_equals_padded_input() {
        // A VALID conv over x with a folded pad of 1 on every side equals the same conv
        // over x explicitly zero-padded.
        let x: Vec<f32> = (1..=4).map(|v| v as f32).collect();
        let padded = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let w = [1.0, 2.0, 3.0, 4.0];
        let p = conv_params(Padding::Valid, (1, 1), (1, 1), Activation::None);
        let folded = TestOp::new(B::CONV_2D, p.clone(), vec![f32_input(&[1, 2, 2, 1], &x), f32_const(&[1, 2, 2, 1], &w), None], 1);
        let explicit = TestOp::new(B::CONV_2D, p, vec![f32_input(&[1, 4, 4, 1], &padded), f32_const(&[1, 2, 2, 1], &w), None], 1);
        let a = folded.run_on(&crate::backend::reference::ReferenceBackend, Some([1, 1, 1, 1])).unwrap();
        assert_eq!(a[0].1, vec![1, 3, 3, 1]);
        assert_eq!(f32s(&a[0].2), explicit.reference_f32().1);
        // And equals the CPU backend given the same folded pad.
        let c = folded.run_on(&crate::backend::cpu::CpuBackend, Some([1, 1, 1, 1])).unwrap();
        assert_eq!(a, c);
    }

    #[test]
    fn never_applies_epilogues() {
        // The compiler folds following activations into a kernel only when its
        // backend declares it applies them; a reference kernel never folds them in.
        let t = TestOp::new(
            B::CONV_2D,
            conv_params(Padding::Valid, (1, 1), (1, 1), Activation::None),
            vec![f32_input(&[1, 1, 1, 1], &[1.0]), f32_const(&[1, 1, 1, 1], &[1.0]), None],
            1,
        );
        let mut ctx = t.context(None);
        ctx.epilogue = Some(Default::default());
        use crate::backend::Backend;
        let reference = crate::backend::reference::ReferenceBackend;
        reference.build(&ctx, &mut crate::backend::BackendContext::new(1)).unwrap();
        assert!(!reference.applies_epilogues(&ctx));
        assert!(crate::backend::cpu::CpuBackend.applies_epilogues(&ctx));
    }

    #[test]
    fn depthwise_and_pool_hand_computed() {
        // Two channels, multiplier 2: output channel o reads input channel o / 2.
        let x = [1.0, 10.0, 2.0, 20.0];
        let w = [1.0, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 1.0];
        let t = TestOp::new(
            B::DEPTHWISE_CONV_2D,
            OpParams::DepthwiseConv2D { padding: Padding::Valid, stride: (1, 1), dilation: (1, 1), depth_multiplier: 2, activation: Activation::None },
            vec![f32_input(&[1, 1, 2, 2], &x), f32_const(&[1, 1, 2, 4], &w), None],
            1,
        );
        assert_eq!(t.reference_f32(), (vec![1, 1, 1, 4], vec![3.0, 4.0, 50.0, 60.0]));
        // Average pool SAME 2x2 stride 1 on 2x2: the last row/column windows have fewer taps.
        let params = OpParams::Pool2D { padding: Padding::Same, stride: (1, 1), filter: (2, 2), activation: Activation::None };
        let t = TestOp::new(B::AVERAGE_POOL_2D, params.clone(), vec![f32_input(&[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0])], 1);
        assert_eq!(t.reference_f32().1, vec![2.5, 3.0, 3.5, 4.0]);
        let t = TestOp::new(B::MAX_POOL_2D, params, vec![f32_input(&[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0])], 1);
        assert_eq!(t.reference_f32().1, vec![4.0, 4.0, 4.0, 4.0]);
    }

    #[test]
    fn fc_matmul_softmax_transpose_conv_hand_computed() {
        let fc = OpParams::FullyConnected { activation: Activation::None, keep_num_dims: false, shuffled_weights: false, asymmetric_quantize_inputs: false };
        let t = TestOp::new(B::FULLY_CONNECTED, fc, vec![f32_input(&[1, 2], &[1.0, 2.0]), f32_const(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), None], 1);
        assert_eq!(t.reference_f32(), (vec![1, 3], vec![1.0, 2.0, 3.0]));
        let bmm = OpParams::BatchMatMul { adj_x: false, adj_y: true, asymmetric_quantize_inputs: false };
        let t = TestOp::new(B::BATCH_MATMUL, bmm, vec![f32_input(&[1, 2], &[1.0, 2.0]), f32_input(&[2, 2], &[3.0, 4.0, 5.0, 6.0])], 1);
        assert_eq!(t.reference_f32(), (vec![1, 2], vec![11.0, 17.0]));
        let t = TestOp::new(B::SOFTMAX, OpParams::Softmax { beta: 1.0 }, vec![f32_input(&[2], &[0.0, 2.0f32.ln()])], 1);
        let (_, v) = t.reference_f32();
        assert!((v[0] - 1.0 / 3.0).abs() < 1e-7 && (v[1] - 2.0 / 3.0).abs() < 1e-7, "{v:?}");
        // Transpose conv VALID stride 2, 1x1 input of 1, 2x2 filter: output is the filter.
        let tc = OpParams::TransposeConv { padding: Padding::Valid, stride: (2, 2), activation: Activation::None };
        let t = TestOp::new(
            B::TRANSPOSE_CONV,
            tc,
            vec![i32_const(&[4], &[1, 2, 2, 1]), f32_const(&[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]), f32_input(&[1, 1, 1, 1], &[2.0]), None],
            1,
        );
        assert_eq!(t.reference_f32().1, vec![2.0, 4.0, 6.0, 8.0]);
    }

    fn activation(r: &mut Rng) -> Activation {
        [Activation::None, Activation::Relu, Activation::Relu6, Activation::ReluN1To1, Activation::Tanh][r.below(5)]
    }

    fn padding(r: &mut Rng) -> Padding {
        if r.coin() {
            Padding::Same
        } else {
            Padding::Valid
        }
    }

    #[test]
    fn random_convolutions_match_cpu() {
        let mut r = Rng::new(0x5eed_c0a7);
        let mut worst = 0.0f64;
        for case in 0..120 {
            let (n, h, w) = (r.range(1, 2), r.range(1, 9), r.range(1, 9));
            let (kh, kw) = (r.range(1, 3), r.range(1, 3));
            let stride = (r.range(1, 3), r.range(1, 3));
            let dilation = (r.range(1, 2), r.range(1, 2));
            let pad = padding(&mut r);
            let act = activation(&mut r);
            if pad == Padding::Valid && (h < (kh - 1) * dilation.0 + 1 || w < (kw - 1) * dilation.1 + 1) {
                continue;
            }
            let c = r.range(1, 20);
            let bias = r.coin();
            let x = r.floats(n * h * w * c);
            let depthwise = case % 2 == 1;
            let t = if depthwise {
                let m = r.range(1, 3);
                TestOp::new(
                    B::DEPTHWISE_CONV_2D,
                    OpParams::DepthwiseConv2D { padding: pad, stride, dilation, depth_multiplier: m as i32, activation: act },
                    vec![
                        f32_input(&[n, h, w, c], &x),
                        f32_const(&[1, kh, kw, c * m], &r.floats(kh * kw * c * m)),
                        bias.then(|| f32_const(&[c * m], &r.floats(c * m))).flatten(),
                    ],
                    1,
                )
            } else {
                let oc = r.range(1, 24);
                TestOp::new(
                    B::CONV_2D,
                    conv_params(pad, stride, dilation, act),
                    vec![
                        f32_input(&[n, h, w, c], &x),
                        f32_const(&[oc, kh, kw, c], &r.floats(oc * kh * kw * c)),
                        bias.then(|| f32_const(&[oc], &r.floats(oc))).flatten(),
                    ],
                    1,
                )
            };
            let mut t = t;
            // Now and then a zero PAD folded into a VALID window.
            if pad == Padding::Valid && r.below(3) == 0 {
                t.input_pad = Some([r.below(3), r.below(3), r.below(3), r.below(3)]);
            }
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("case {case} depthwise={depthwise} folded pad {:?}", t.input_pad)));
        }
        eprintln!("random convolutions: worst relative error {worst:e}");
    }

    #[test]
    fn random_dense_ops_match_cpu() {
        let mut r = Rng::new(0xfee1_600d);
        let mut worst = 0.0f64;
        for case in 0..60 {
            // Fully connected.
            let (rows, depth, units) = (r.range(1, 5), r.range(1, 40), r.range(1, 20));
            let keep = r.coin();
            let fc =
                OpParams::FullyConnected { activation: activation(&mut r), keep_num_dims: keep, shuffled_weights: false, asymmetric_quantize_inputs: false };
            let bias = r.coin().then(|| f32_const(&[units], &r.floats(units))).flatten();
            let t = TestOp::new(
                B::FULLY_CONNECTED,
                fc,
                vec![f32_input(&[1, rows, depth], &r.floats(rows * depth)), f32_const(&[units, depth], &r.floats(units * depth)), bias],
                1,
            );
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("fc {case}")));
            // Batch matmul with broadcast batch dims.
            let (m, k, n) = (r.range(1, 6), r.range(1, 12), r.range(1, 6));
            let (adj_x, adj_y) = (r.coin(), r.coin());
            let (b0, b1) = (r.range(1, 3), r.range(1, 3));
            let (ba, bb) = if r.coin() { (vec![b0, b1], vec![1, b1]) } else { (vec![b1], vec![b0, 1]) };
            let mut sa = ba.clone();
            sa.extend(if adj_x { [k, m] } else { [m, k] });
            let mut sb = bb.clone();
            sb.extend(if adj_y { [n, k] } else { [k, n] });
            let (na, nb) = (sa.iter().product(), sb.iter().product());
            let t = TestOp::new(
                B::BATCH_MATMUL,
                OpParams::BatchMatMul { adj_x, adj_y, asymmetric_quantize_inputs: false },
                vec![f32_input(&sa, &r.floats(na)), f32_input(&sb, &r.floats(nb))],
                1,
            );
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("batch matmul {case} {sa:?} {sb:?}")));
            // Transpose conv.
            let (h, w, c, oc, kh, kw) = (r.range(1, 5), r.range(1, 5), r.range(1, 6), r.range(1, 6), r.range(1, 4), r.range(1, 4));
            let stride = (r.range(1, 3), r.range(1, 3));
            let pad = padding(&mut r);
            let (oh, ow) = match pad {
                Padding::Same => (h * stride.0, w * stride.1),
                Padding::Valid => ((h - 1) * stride.0 + kh, (w - 1) * stride.1 + kw),
            };
            let bias = r.coin().then(|| f32_const(&[oc], &r.floats(oc))).flatten();
            let t = TestOp::new(
                B::TRANSPOSE_CONV,
                OpParams::TransposeConv { padding: pad, stride, activation: activation(&mut r) },
                vec![
                    i32_const(&[4], &[1, oh as i32, ow as i32, oc as i32]),
                    f32_const(&[oc, kh, kw, c], &r.floats(oc * kh * kw * c)),
                    f32_input(&[1, h, w, c], &r.floats(h * w * c)),
                    bias,
                ],
                1,
            );
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("transpose conv {case}")));
            // Pools.
            let (h, w, c) = (r.range(1, 8), r.range(1, 8), r.range(1, 5));
            let filter = (r.range(1, 3.min(h)), r.range(1, 3.min(w)));
            let params = OpParams::Pool2D { padding: padding(&mut r), stride: (r.range(1, 2), r.range(1, 2)), filter, activation: activation(&mut r) };
            let code = if r.coin() { B::MAX_POOL_2D } else { B::AVERAGE_POOL_2D };
            let t = TestOp::new(code, params, vec![f32_input(&[1, h, w, c], &r.floats(h * w * c))], 1);
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("pool {case}")));
            // Softmax / log-softmax.
            let (rows, depth) = (r.range(1, 4), r.range(1, 30));
            let x: Vec<f32> = r.floats(rows * depth).iter().map(|v| v * 8.0).collect();
            let code = if r.coin() { B::SOFTMAX } else { B::LOG_SOFTMAX };
            let params = if code == B::SOFTMAX { OpParams::Softmax { beta: 0.5 + r.unit().abs() } } else { OpParams::None };
            let t = TestOp::new(code, params, vec![f32_input(&[rows, depth], &x)], 1);
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("softmax {case}")));
        }
        eprintln!("random dense ops: worst relative error {worst:e}");
    }

    #[test]
    fn hostile_shapes_are_errors_not_panics() {
        // Filter larger than the input under VALID, mismatched bias, rank-3 input.
        let p = conv_params(Padding::Valid, (1, 1), (1, 1), Activation::None);
        let t = TestOp::new(B::CONV_2D, p.clone(), vec![f32_input(&[1, 1, 1, 1], &[1.0]), f32_const(&[1, 3, 3, 1], &[1.0; 9]), None], 1);
        assert!(t.reference().is_err());
        let t = TestOp::new(B::CONV_2D, p.clone(), vec![f32_input(&[1, 2, 2, 1], &[1.0; 4]), f32_const(&[1, 1, 1, 1], &[1.0]), f32_const(&[2], &[1.0; 2])], 1);
        assert!(t.reference().is_err());
        let t = TestOp::new(B::CONV_2D, p, vec![f32_input(&[2, 2, 1], &[1.0; 4]), f32_const(&[1, 1, 1, 1], &[1.0]), None], 1);
        assert!(t.reference().is_err());
        // A buffer shorter than its declared shape fails at run time instead of panicking.
        let mut t = TestOp::new(B::SOFTMAX, OpParams::Softmax { beta: 1.0 }, vec![f32_input(&[4], &[1.0; 4])], 1);
        if let Some(i) = t.inputs[0].as_mut() {
            i.data.truncate(8);
        }
        assert!(t.reference().is_err());
    }
}
