//! Hybrid (dynamic-range) FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D: float
//! input and output, int8 weights (zero point 0, one scale or one per output
//! channel), float bias. As LiteRT computes them:
//!
//! 1. each batch row of the input is quantized to int8 at run time, symmetrically
//!    (`scale = max|x| / 127`) or asymmetrically (range including 0, zero point
//!    nudged onto the grid) as the op asks;
//! 2. integer sums `acc = sum (q - row_zp) * w` over the taps inside the input;
//! 3. `out = act(bias[c] + acc * (row_scale * w_scale[c]))` in single precision.

use ferrite_format::ops::BuiltinOp as B;

use super::{elements, out_and_pad, read_f32, write_f32};
use crate::backend::{arg, typed, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::DType;
use crate::ops::{Activation, OpParams, Padding};

/// Symmetric quantization of one row to [-127, 127]: returns the scale
/// (`max|x| / 127`, or 1 for an all-zero row).
pub(super) fn quantize_symmetric(x: &[f32]) -> (Vec<i32>, f32, i32) {
    let range = x.iter().fold(0.0f32, |m, &v| m.max(v.abs()));
    if range == 0.0 {
        return (vec![0; x.len()], 1.0, 0);
    }
    let inverse = 127.0 / range;
    (x.iter().map(|&v| ((v * inverse).round() as i32).clamp(-127, 127)).collect(), range / 127.0, 0)
}

/// Asymmetric quantization of one row to [-128, 127] over the range [min(0, lo),
/// max(0, hi)]: the zero point comes from whichever end gives the smaller error,
/// rounded onto the grid. Returns (values, scale, zero point).
pub(super) fn quantize_asymmetric(x: &[f32]) -> (Vec<i32>, f32, i32) {
    let (lo, hi) = x.iter().fold((0.0f32, 0.0f32), |(l, h), &v| (l.min(v), h.max(v)));
    if lo == hi {
        return (vec![0; x.len()], 1.0, 0);
    }
    let (qmin, qmax) = (-128.0f64, 127.0f64);
    let (rmin, rmax) = (f64::from(lo), f64::from(hi));
    // The range's width is taken in single precision, as LiteRT does.
    let scale = f64::from(hi - lo) / (qmax - qmin);
    let from_min = qmin - rmin / scale;
    let from_max = qmax - rmax / scale;
    let zp_real = if qmin.abs() + (rmin / scale).abs() < qmax.abs() + (rmax / scale).abs() { from_min } else { from_max };
    let zp = if zp_real <= qmin {
        -128
    } else if zp_real >= qmax {
        127
    } else {
        zp_real.round() as i32
    };
    let scale = scale as f32;
    let inverse = (1.0 / f64::from(scale)) as f32;
    (x.iter().map(|&v| ((zp as f32 + v * inverse).round() as i32).clamp(-128, 127)).collect(), scale, zp)
}

/// Geometry of a hybrid convolution.
#[derive(Clone, Copy)]
struct Window {
    in_h: usize,
    in_w: usize,
    in_c: usize,
    k_h: usize,
    k_w: usize,
    out_w: usize,
    stride: (usize, usize),
    dilation: (usize, usize),
    pad: (usize, usize),
    /// Channel multiplier (0: regular convolution).
    depth_multiplier: usize,
}

/// A hybrid FULLY_CONNECTED, CONV_2D or DEPTHWISE_CONV_2D (`code`).
pub(super) fn build(op: &OpContext<'_>, code: B) -> Result<Built> {
    let (x, w) = (op.input(0)?, op.input(1)?);
    let out = op.outputs.first().ok_or_else(|| op.bad("missing output"))?;
    if out.dtype != DType::F32 || op.opt_input(2).is_some_and(|b| b.dtype != DType::F32) {
        return Err(op.unsupported("hybrid kernels take float32 input, int8 weights and float32 bias"));
    }
    let wq = w.quant.ok_or_else(|| op.bad("weights have no quantization parameters"))?;
    if wq.zero_point.iter().any(|&z| z != 0) {
        return Err(op.unsupported("hybrid weights with a nonzero zero point"));
    }
    if wq.scale.is_empty() || wq.scale.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return Err(op.bad("weight scales must be finite and positive"));
    }
    let (act, batch, out_shape, window) = match (code, &op.op.params) {
        (B::FULLY_CONNECTED, OpParams::FullyConnected { activation, keep_num_dims, .. }) => {
            let &[out_n, in_n] = &w.shape[..] else { return Err(op.bad(format!("weights {:?} must be 2-D", w.shape))) };
            let total = elements(op, &x.shape)?;
            if in_n == 0 || !total.is_multiple_of(in_n) {
                return Err(op.bad(format!("input {:?} is not a multiple of {in_n}", x.shape)));
            }
            let shape = match x.shape.split_last() {
                Some((_, lead)) if *keep_num_dims => [lead, &[out_n]].concat(),
                _ => vec![total / in_n, out_n],
            };
            (*activation, total / in_n, shape, None)
        }
        (B::CONV_2D | B::DEPTHWISE_CONV_2D, params) => {
            let depthwise = code == B::DEPTHWISE_CONV_2D;
            let (padding, stride, dilation, act) = match params {
                OpParams::Conv2D { padding, stride, dilation, activation } if !depthwise => (*padding, *stride, *dilation, *activation),
                OpParams::DepthwiseConv2D { padding, stride, dilation, activation, .. } if depthwise => (*padding, *stride, *dilation, *activation),
                _ => return Err(op.bad("missing convolution options")),
            };
            let (&[batch, in_h, in_w, in_c], &[w0, k_h, k_w, w3]) = (&x.shape[..], &w.shape[..]) else {
                return Err(op.bad(format!("input {:?} and filter {:?} must be 4-D", x.shape, w.shape)));
            };
            let out_c = if depthwise { w3 } else { w0 };
            if (!depthwise && w3 != in_c) || (depthwise && (w0 != 1 || in_c == 0 || out_c % in_c != 0)) {
                return Err(op.bad(format!("filter {:?} does not match input {:?}", w.shape, x.shape)));
            }
            let same = padding == Padding::Same;
            let ((out_h, pad_top), (out_w, pad_left)) = match op.input_pad {
                // A zero PAD folded into this VALID convolution by the compiler: VALID
                // over the padded extent, the padding as leading offsets. The padded
                // zeros would quantize to the row's zero point exactly and contribute
                // nothing, like the taps skipped here.
                Some([top, bottom, left, right]) if !same => {
                    let padded =
                        |n: usize, a: usize, b: usize| n.checked_add(a).and_then(|v| v.checked_add(b)).ok_or_else(|| op.bad("folded padding overflows"));
                    let (oh, _) = out_and_pad(op, padded(in_h, top, bottom)?, k_h, stride.0, dilation.0, false)?;
                    let (ow, _) = out_and_pad(op, padded(in_w, left, right)?, k_w, stride.1, dilation.1, false)?;
                    ((oh, top), (ow, left))
                }
                Some(_) => return Err(op.unsupported("folded PAD before a SAME convolution")),
                None => (out_and_pad(op, in_h, k_h, stride.0, dilation.0, same)?, out_and_pad(op, in_w, k_w, stride.1, dilation.1, same)?),
            };
            let depth_multiplier = if depthwise { out_c / in_c } else { 0 };
            let g = Window { in_h, in_w, in_c, k_h, k_w, out_w, stride, dilation, pad: (pad_top, pad_left), depth_multiplier };
            (act, batch, vec![batch, out_h, out_w, out_c], Some(g))
        }
        _ => return Err(op.unsupported("hybrid op")),
    };
    let out_c = *out_shape.last().unwrap_or(&1);
    if wq.scale.len() != 1 && wq.scale.len() != out_c {
        return Err(op.bad(format!("{} weight scales for {out_c} channels", wq.scale.len())));
    }
    if op.opt_input(2).is_some_and(|b| b.shape.iter().product::<usize>() != out_c) {
        return Err(op.bad("bias size does not match the output channels"));
    }
    // LiteRT quantizes asymmetrically for fully-connected layers that ask, for
    // depthwise convolutions, and for convolutions with per-channel weights.
    let asymmetric = match op.op.params {
        OpParams::FullyConnected { asymmetric_quantize_inputs, .. } => asymmetric_quantize_inputs,
        _ => code == B::DEPTHWISE_CONV_2D || (code == B::CONV_2D && wq.scale.len() > 1),
    };
    if code == B::FULLY_CONNECTED && asymmetric && w.value.is_none() {
        // The CPU backend takes the weights' row sums at prepare.
        return Err(op.unsupported("asymmetric hybrid FULLY_CONNECTED with weights computed at run time"));
    }
    let (lo, hi) = match act {
        Activation::Relu => (0.0, f32::INFINITY),
        Activation::Relu6 => (0.0, 6.0),
        Activation::ReluN1To1 => (-1.0, 1.0),
        Activation::None | Activation::Tanh | Activation::SignBit => (f32::NEG_INFINITY, f32::INFINITY),
    };
    let n_in = elements(op, &x.shape)?;
    let n_w = elements(op, &w.shape)?;
    let n_out = elements(op, &out_shape)?;
    let w_scales = wq.scale.clone();
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let input = read_f32(arg(ins, 0)?, n_in, "input")?;
            let weights: Vec<i32> = typed::<i8>(arg(ins, 1)?)?.iter().map(|&v| i32::from(v)).collect();
            if weights.len() != n_w {
                return Err(Error::Runtime("hybrid weights do not match their shape".into()));
            }
            let bias = match ins.get(2).copied().flatten() {
                Some(b) => read_f32(b, out_c, "bias")?,
                None => vec![0.0; out_c],
            };
            let row = n_in / batch.max(1);
            let rows: Vec<(Vec<i32>, f32, i32)> = (0..batch)
                .map(|b| {
                    let r = &input[b * row..(b + 1) * row];
                    if asymmetric {
                        quantize_asymmetric(r)
                    } else {
                        quantize_symmetric(r)
                    }
                })
                .collect();
            if window.is_some() && rows.iter().any(|r| r.2 != rows[0].2) {
                // LiteRT's convolution takes one input zero point for the whole batch.
                return Err(Error::Runtime("hybrid convolution over batches with different input zero points".into()));
            }
            let per_batch = n_out / batch.max(1);
            let mut result = vec![0.0f32; n_out];
            for (b, (q, row_scale, zp)) in rows.iter().enumerate() {
                for i in 0..per_batch {
                    let c = i % out_c;
                    let mut acc = 0i32;
                    match &window {
                        None => {
                            for k in 0..row {
                                acc = acc.wrapping_add((q[k] - zp) * weights[c * row + k]);
                            }
                        }
                        Some(g) => {
                            let (oy, ox) = (i / out_c / g.out_w, (i / out_c) % g.out_w);
                            for ky in 0..g.k_h {
                                let Some(iy) = (oy * g.stride.0 + ky * g.dilation.0).checked_sub(g.pad.0).filter(|&y| y < g.in_h) else { continue };
                                for kx in 0..g.k_w {
                                    let Some(ix) = (ox * g.stride.1 + kx * g.dilation.1).checked_sub(g.pad.1).filter(|&v| v < g.in_w) else { continue };
                                    let pixel = (iy * g.in_w + ix) * g.in_c;
                                    if let Some(ic) = c.checked_div(g.depth_multiplier) {
                                        let v = q[pixel + ic] - zp;
                                        acc = acc.wrapping_add(v * weights[(ky * g.k_w + kx) * out_c + c]);
                                    } else {
                                        for ic in 0..g.in_c {
                                            let v = q[pixel + ic] - zp;
                                            acc = acc.wrapping_add(v * weights[((c * g.k_h + ky) * g.k_w + kx) * g.in_c + ic]);
                                        }
                                    }
                                }
                            }
                        }
                    }
                    let w_scale = w_scales[if w_scales.len() == 1 { 0 } else { c }];
                    result[b * per_batch + i] = (bias[c] + acc as f32 * (row_scale * w_scale)).max(lo).min(hi);
                }
            }
            write_f32(&result, outs[0])
        }),
    })
}

#[cfg(test)]
mod tests {
    use ferrite_format::ops::BuiltinOp as B;

    use super::super::super::quant_test_util::{mismatches_padded, out, q, qc, run_ref, Rng, T};
    use crate::model::DType;
    use crate::ops::{Activation, OpParams, Padding};

    #[test]
    fn symmetric_fully_connected_by_hand() {
        // Row [1, -2] quantizes to [64, -127] at scale 2/127 (63.5 rounds away from 0);
        // weights [[1, 1]] at scale 0.5: acc -63 -> -63 * (2/127) * 0.5 + bias 1.
        let x = T::f32s(&[1, 2], &[1.0, -2.0]);
        let w = T::ints(DType::I8, &[1, 2], q(0.5, 0), &[1, 1]).constant();
        let b = T::f32s(&[1], &[1.0]).constant();
        let p = OpParams::FullyConnected { activation: Activation::None, keep_num_dims: false, shuffled_weights: false, asymmetric_quantize_inputs: false };
        let (_, r) = run_ref(B::FULLY_CONNECTED, &p, &[Some(&x), Some(&w), Some(&b)], &out(DType::F32, None)).expect("hybrid fc");
        let expected = 1.0 + -63.0f32 * ((2.0f32 / 127.0) * 0.5);
        assert_eq!(f32::from_le_bytes([r[0], r[1], r[2], r[3]]), expected);
    }

    #[test]
    fn hybrid_ops_match_cpu() {
        let mut rng = Rng::new(81);
        for case in 0..90 {
            let code = [B::FULLY_CONNECTED, B::CONV_2D, B::DEPTHWISE_CONV_2D][case % 3];
            let act = [Activation::None, Activation::Relu, Activation::Relu6][(case / 3) % 3];
            let per_channel = case % 2 == 0;
            let (x_shape, w_shape, params, out_c) = match code {
                B::FULLY_CONNECTED => {
                    let (batch, in_n, out_n) = (rng.usize(1, 3), rng.usize(1, 30), rng.usize(1, 7));
                    let p =
                        OpParams::FullyConnected { activation: act, keep_num_dims: false, shuffled_weights: false, asymmetric_quantize_inputs: case % 4 < 2 };
                    (vec![batch, in_n], vec![out_n, in_n], p, out_n)
                }
                _ => {
                    let depthwise = code == B::DEPTHWISE_CONV_2D;
                    let (in_c, k) = (rng.usize(1, 4), rng.usize(1, 3));
                    let out_c = if depthwise { in_c * rng.usize(1, 2) } else { rng.usize(1, 5) };
                    let (h, w) = (rng.usize(k, 6), rng.usize(k, 6));
                    let padding = if rng.one_in(2) { Padding::Same } else { Padding::Valid };
                    let stride = (rng.usize(1, 2), rng.usize(1, 2));
                    let p = if depthwise {
                        OpParams::DepthwiseConv2D { padding, stride, dilation: (1, 1), depth_multiplier: 0, activation: act }
                    } else {
                        OpParams::Conv2D { padding, stride, dilation: (1, 1), activation: act }
                    };
                    let ws = if depthwise { vec![1, k, k, out_c] } else { vec![out_c, k, k, in_c] };
                    // One batch: LiteRT's hybrid convolutions share one zero point across the batch.
                    (vec![1, h, w, in_c], ws, p, out_c)
                }
            };
            let n_x: usize = x_shape.iter().product();
            let shift = if case % 5 == 0 { 0.0 } else { rng.f32(-1.0, 1.0) };
            let x = T::f32s(&x_shape, &(0..n_x).map(|_| rng.f32(-2.0, 2.0) + shift).collect::<Vec<_>>());
            let axis = if code == B::DEPTHWISE_CONV_2D { 3 } else { 0 };
            let wq = if per_channel { qc((0..out_c).map(|_| rng.scale(0.02)).collect(), axis) } else { q(rng.scale(0.02), 0) };
            let mut w_values = rng.ints(DType::I8, w_shape.iter().product());
            w_values.iter_mut().for_each(|v| *v = (*v).max(-127));
            let w = T::ints(DType::I8, &w_shape, wq, &w_values).constant();
            let b = T::f32s(&[out_c], &(0..out_c).map(|_| rng.f32(-1.0, 1.0)).collect::<Vec<_>>()).constant();
            let with_bias = case % 7 != 0;
            // Some VALID convolutions with a PAD folded in front, as the compiler folds them.
            let folded =
                matches!(params, OpParams::Conv2D { padding: Padding::Valid, .. } | OpParams::DepthwiseConv2D { padding: Padding::Valid, .. }) && rng.one_in(2);
            let pad = folded.then(|| [rng.usize(0, 2), rng.usize(0, 2), rng.usize(0, 2), rng.usize(0, 2)]);
            let n = mismatches_padded(code, &params, &[Some(&x), Some(&w), with_bias.then_some(&b)], &out(DType::F32, None), pad);
            assert_eq!(n, 0, "case {case}: {code:?}: {n} mismatching outputs (input {x_shape:?}, weights {w_shape:?}, per channel {per_channel}, pad {pad:?})");
        }
    }
}
