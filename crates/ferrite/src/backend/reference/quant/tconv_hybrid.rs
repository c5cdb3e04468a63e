//! Hybrid TRANSPOSE_CONV: float32 input and output, int8 OHWI weights (zero point
//! 0, one scale or one per output channel), optional float32 bias. LiteRT's
//! definition, written as its loops:
//!
//! 1. each batch of the input is quantized asymmetrically as a whole (one scale
//!    and zero point per batch);
//! 2. every input value is scattered through every tap that lands inside the
//!    output: `out += float((q - zp) * w) * w_scale[c] * batch_scale`, in the
//!    order batch, input row, input column, input channel, tap row, tap column,
//!    output channel (the float sums depend on that order);
//! 3. `out = act(out + bias[c])`.

use super::hybrid::quantize_asymmetric;
use super::{elements, read_f32, write_f32};
use crate::backend::{arg, typed, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::DType;
use crate::ops::{Activation, OpParams, Padding};

/// Leading padding of one axis from the output size, as LiteRT derives it (the
/// forward convolution of `padding` over the output gives the input size it
/// expects).
fn pad_of(padding: Padding, out: usize, k: usize, s: usize) -> usize {
    let (out, k, s) = (out as i64, k as i64, s as i64);
    let forward = match padding {
        Padding::Same => (out + s - 1) / s,
        Padding::Valid => (out - k + s) / s,
    };
    (((forward - 1) * s + k - out) / 2).max(0) as usize
}

pub(super) fn build(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    let (w, x) = (op.input(1)?, op.input(2)?);
    if x.dtype != DType::F32
        || w.dtype != DType::I8
        || op.outputs.first().is_some_and(|o| o.dtype != DType::F32)
        || op.opt_input(3).is_some_and(|b| b.dtype != DType::F32)
    {
        return Err(op.unsupported("hybrid TRANSPOSE_CONV takes float32 input, output and bias with int8 weights"));
    }
    let sizes = op.const_ints(0)?;
    let (&[n, ih, iw, ic], &[oc, kh, kw, wc], &[sn, oh, ow, sc]) = (&x.shape[..], &w.shape[..], &sizes[..]) else {
        return Err(op.bad(format!("TRANSPOSE_CONV of {:?} with filter {:?} to {sizes:?}", x.shape, w.shape)));
    };
    if wc != ic || sn != n as i64 || sc != oc as i64 || oh <= 0 || ow <= 0 || stride.0 == 0 || stride.1 == 0 {
        return Err(op.bad(format!("output_shape {sizes:?} does not match input {:?} / filter {:?}", x.shape, w.shape)));
    }
    let (oh, ow) = (oh as usize, ow as usize);
    let wq = w.quant.ok_or_else(|| op.bad("filter has no quantization parameters"))?;
    if wq.zero_point.iter().any(|&z| z != 0) {
        return Err(op.bad("hybrid TRANSPOSE_CONV weights must have zero point 0"));
    }
    let scales: Vec<f32> = match wq.scale.len() {
        1 => vec![wq.scale[0]; oc],
        k if k == oc && wq.axis == 0 => wq.scale.clone(),
        k => return Err(op.bad(format!("{k} filter scales on axis {} for {oc} output channels", wq.axis))),
    };
    if op.opt_input(3).is_some_and(|b| b.shape.iter().product::<usize>() != oc) {
        return Err(op.bad("bias size does not match the output channels"));
    }
    let (lo, hi) = match activation {
        Activation::Relu => (0.0, f32::INFINITY),
        Activation::Relu6 => (0.0, 6.0),
        Activation::ReluN1To1 => (-1.0, 1.0),
        Activation::None | Activation::Tanh | Activation::SignBit => (f32::NEG_INFINITY, f32::INFINITY),
    };
    let (pt, pl) = (pad_of(padding, oh, kh, stride.0), pad_of(padding, ow, kw, stride.1));
    let n_in = elements(op, &x.shape)?;
    let n_w = elements(op, &w.shape)?;
    let out_shape = vec![n, oh, ow, oc];
    let n_out = elements(op, &out_shape)?;
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let input = read_f32(arg(ins, 2)?, n_in, "input")?;
            let weights = typed::<i8>(arg(ins, 1)?)?;
            if weights.len() != n_w {
                return Err(Error::Runtime("hybrid weights do not match their shape".into()));
            }
            let bias = match ins.get(3).copied().flatten() {
                Some(b) => Some(read_f32(b, oc, "bias")?),
                None => None,
            };
            let mut out = vec![0.0f32; n_out];
            let per = ih * iw * ic;
            for b in 0..n {
                let (q, scale, zp) = quantize_asymmetric(&input[b * per..(b + 1) * per]);
                for y in 0..ih {
                    for xx in 0..iw {
                        for c in 0..ic {
                            let qv = q[(y * iw + xx) * ic + c] - zp;
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    // Output pixel reached: y*stride + ky - pad, inside the output.
                                    let (Some(o_y), Some(o_x)) = ((y * stride.0 + ky).checked_sub(pt), (xx * stride.1 + kx).checked_sub(pl)) else { continue };
                                    if o_y >= oh || o_x >= ow {
                                        continue;
                                    }
                                    for (o, &ws) in scales.iter().enumerate() {
                                        let wv = i32::from(weights[((o * kh + ky) * kw + kx) * ic + c]);
                                        out[((b * oh + o_y) * ow + o_x) * oc + o] += (qv * wv) as f32 * ws * scale;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            for (i, v) in out.iter_mut().enumerate() {
                let with_bias = bias.as_ref().map_or(*v, |bv| *v + bv[i % oc]);
                *v = with_bias.max(lo).min(hi);
            }
            write_f32(&out, outs[0])
        }),
    })
}

#[cfg(test)]
mod tests {
    use ferrite_format::ops::BuiltinOp as B;

    use super::super::super::quant_test_util::{mismatches, out, q, qc, run_ref, Rng, T};
    use crate::model::DType;
    use crate::ops::{Activation, OpParams, Padding};

    #[test]
    fn one_pixel_by_hand() {
        // Input [2, -1] quantizes over [-1, 2]: scale 3/255, zero point -43 (from the
        // max end: 127 - 2/(3/255) = -43), values [127, -128]. Weights [[1, 2]] at
        // 0.5, one 1x1 tap: (127+43)*1 -> 170*0.5*s, then (-128+43)*2 = -170 -> the
        // same with a minus sign: the sum is 0, plus bias 0.25.
        let x = T::f32s(&[1, 1, 1, 2], &[2.0, -1.0]);
        let w = T::ints(DType::I8, &[1, 1, 1, 2], q(0.5, 0), &[1, 2]).constant();
        let sizes = T::ints(DType::I32, &[4], None, &[1, 1, 1, 1]).constant();
        let b = T::f32s(&[1], &[0.25]).constant();
        let p = OpParams::TransposeConv { padding: Padding::Valid, stride: (1, 1), activation: Activation::None };
        let (_, r) = run_ref(B::TRANSPOSE_CONV, &p, &[Some(&sizes), Some(&w), Some(&x), Some(&b)], &out(DType::F32, None)).expect("hybrid tconv");
        let s = 3.0f32 / 255.0;
        let want = (170.0f32 * 0.5 * s + (-170.0f32) * 0.5 * s) + 0.25;
        assert_eq!(f32::from_le_bytes([r[0], r[1], r[2], r[3]]), want);
    }

    #[test]
    fn matches_cpu() {
        let mut rng = Rng::new(91);
        for case in 0..60 {
            let (n, in_c, out_c) = (rng.usize(1, 3), rng.usize(1, 4), rng.usize(1, 5));
            let (h, w, kh, kw) = (rng.usize(1, 4), rng.usize(1, 4), rng.usize(1, 3), rng.usize(1, 3));
            let stride = (rng.usize(1, 3), rng.usize(1, 3));
            let same = rng.one_in(2);
            // Any output size the padding maps back onto the input.
            let size = |i: usize, k: usize, s: usize, extra: usize| if same { (i - 1) * s + 1 + extra % s } else { (i - 1) * s + k + extra % s };
            let (oh, ow) = (size(h, kh, stride.0, rng.usize(0, 2)), size(w, kw, stride.1, rng.usize(0, 2)));
            let x: Vec<f32> = (0..n * h * w * in_c).map(|_| rng.int(-300, 200) as f32 / 97.0).collect();
            let x = T::f32s(&[n, h, w, in_c], &x);
            let wq = if rng.one_in(2) { qc((0..out_c).map(|_| rng.scale(0.02)).collect(), 0) } else { q(rng.scale(0.02), 0) };
            let weights = T::ints(DType::I8, &[out_c, kh, kw, in_c], wq, &rng.ints(DType::I8, out_c * kh * kw * in_c)).constant();
            let sizes = T::ints(DType::I32, &[4], None, &[n as i32, oh as i32, ow as i32, out_c as i32]).constant();
            let bias = T::f32s(&[out_c], &(0..out_c).map(|_| rng.int(-100, 100) as f32 / 50.0).collect::<Vec<_>>()).constant();
            let padding = if same { Padding::Same } else { Padding::Valid };
            let activation = [Activation::None, Activation::Relu, Activation::Relu6, Activation::ReluN1To1][case % 4];
            let params = OpParams::TransposeConv { padding, stride, activation };
            let with_bias = rng.one_in(2);
            let m = mismatches(B::TRANSPOSE_CONV, &params, &[Some(&sizes), Some(&weights), Some(&x), with_bias.then_some(&bias)], &out(DType::F32, None));
            assert_eq!(m, 0, "case {case}: {n}x{h}x{w}x{in_c} -> {oh}x{ow}x{out_c}, stride {stride:?}, {padding:?}: {m} mismatching outputs");
        }
    }
}
