//! CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED on int8 (per-tensor or
//! per-channel weights), uint8 and int16x8 (int16 activations, int8 weights, int64
//! bias), as LiteRT's reference kernels compute them:
//!
//! ```text
//! acc = bias[c] + sum over taps inside the input of (x - x_zp) * (w - w_zp)
//! out = clamp(out_zp + MultiplyByQuantizedMultiplier(acc, M[c], shift[c]), act_min, act_max)
//! ```
//!
//! with `M[c] * 2^shift[c] ~ x_scale * w_scale[c] / out_scale` (in double
//! precision). 8-bit accumulators are int32 (wrapping, as LiteRT's overflow would);
//! int16x8 accumulators are int64 and requantize through the 64-bit multiply.

use ferrite_kernels::quant as kq;

use super::{activation_range, check_scale, elements, out_and_pad, per_tensor, read_i32, read_i64, read_ints, write_ints};
use crate::backend::{arg, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams, Padding};

/// The integer scheme of a convolution or fully-connected op.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// int8 activations and weights, int32 bias.
    I8,
    /// uint8 activations and weights, int32 bias.
    U8,
    /// int16 activations, int8 weights, int64 bias, zero points 0.
    I16x8,
}

/// Input, weight, bias and output types; refuses the combinations the CPU
/// backend refuses.
fn kind(op: &OpContext<'_>, x: usize, w: usize, bias: usize) -> Result<Kind> {
    let (xd, wd) = (op.input(x)?.dtype, op.input(w)?.dtype);
    let out = op.outputs.first().ok_or_else(|| op.bad("missing output"))?.dtype;
    match (xd, wd, out, op.opt_input(bias).map(|b| b.dtype)) {
        (DType::I8, DType::I8, DType::I8, None | Some(DType::I32)) => Ok(Kind::I8),
        (DType::U8, DType::U8, DType::U8, None | Some(DType::I32)) => Ok(Kind::U8),
        (DType::I16, DType::I8, DType::I16, None | Some(DType::I64)) => Ok(Kind::I16x8),
        _ => Err(op.unsupported(format!("integer {} of {} input with {} weights", op.op.code.name(), xd.name(), wd.name()))),
    }
}

/// Everything the requantization of accumulators needs.
struct Requant {
    /// Fixed-point multiplier and shift per output channel (one entry: per tensor).
    mult: Vec<(i32, i32)>,
    out_zp: i32,
    min: i32,
    max: i32,
}

impl Requant {
    fn at(&self, c: usize) -> (i32, i32) {
        self.mult[if self.mult.len() == 1 { 0 } else { c }]
    }
    /// An int32 accumulator requantized (int8 / uint8).
    fn apply(&self, acc: i32, c: usize) -> i32 {
        let (m, s) = self.at(c);
        kq::multiply_by_quantized_multiplier(acc, m, s).saturating_add(self.out_zp).clamp(self.min, self.max)
    }
    /// An int64 accumulator requantized (int16x8) with one of LiteRT's two 64-bit
    /// products (convolutions round the multiplier to 16 bits first, the
    /// fully-connected kernel keeps all 31).
    fn apply64(&self, acc: i64, c: usize, mul: fn(i64, i32, i32) -> i32) -> i32 {
        let (m, s) = self.at(c);
        mul(acc, m, s).saturating_add(self.out_zp).clamp(self.min, self.max)
    }
}

/// The quantization of the input, weights (per tensor or one scale per output
/// channel) and output, and the requantization they imply.
struct Params {
    x_zp: i32,
    w_zp: i32,
    rq: Requant,
}

/// How LiteRT's prepare forms the requantization multiplier of an op.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Product {
    /// `double(x_scale) * double(w_scale[c]) / double(out_scale)`: the per-channel
    /// path of `PopulateConvolutionQuantizationParams`, which int8 and int16x8
    /// convolutions use even with one weight scale.
    Double,
    /// `double(float(x_scale * w_scale)) / double(out_scale)`, the scales multiplied
    /// in single precision first (`GetQuantizedConvolutionMultipler`): the one
    /// multiplier of per-tensor uint8 convolutions.
    Single,
}

/// The multiplier rule of the op whose weights are input `w`.
fn product(op: &OpContext<'_>, kind: Kind, w: usize, fully_connected: bool) -> Result<Product> {
    let per_tensor = op.input(w)?.quant.is_some_and(|q| q.scale.len() == 1);
    // LiteRT 2.3.0 forms every fully-connected multiplier in double precision, one
    // weight scale or several (measured: the single-precision product left converter
    // models with per-tensor weights 1 LSB off).
    Ok(if per_tensor && !fully_connected && kind == Kind::U8 { Product::Single } else { Product::Double })
}

fn params(op: &OpContext<'_>, kind: Kind, (x, w): (usize, usize), channels: usize, act: Activation, rule: Product) -> Result<Params> {
    let (xd, wd) = (op.input(x)?, op.input(w)?);
    let out = op.outputs[0];
    let (x_scale, x_zp) = per_tensor(op, xd.quant, xd.dtype, "input")?;
    let (out_scale, out_zp) = per_tensor(op, out.quant.as_ref(), out.dtype, "output")?;
    let wq = wd.quant.ok_or_else(|| op.bad("weights have no quantization parameters"))?;
    if wq.scale.len() != 1 && wq.scale.len() != channels {
        return Err(op.bad(format!("{} weight scales for {channels} output channels", wq.scale.len())));
    }
    let (_, w_zp) = per_tensor(op, Some(wq), wd.dtype, "weights")?;
    let mut mult = Vec::with_capacity(wq.scale.len());
    for &ws in &wq.scale {
        check_scale(op, ws, "weight")?;
        let real = match rule {
            Product::Double => f64::from(x_scale) * f64::from(ws) / f64::from(out_scale),
            Product::Single => f64::from(x_scale * ws) / f64::from(out_scale),
        };
        mult.push(kq::quantize_multiplier(real));
    }
    let (min, max) = activation_range(act, out_scale, out_zp, out.dtype);
    if kind == Kind::I16x8 {
        // LiteRT's int16x8 kernels require symmetric quantization, and its 64-bit
        // requantization takes shifts up to 7 (the CPU backend refuses more too).
        if x_zp != 0 || w_zp != 0 || out_zp != 0 {
            return Err(op.bad("int16x8 requires zero points of 0 on input, weights and output"));
        }
        if mult.iter().any(|&(_, s)| s > 7) {
            return Err(op.unsupported("int16x8 output multiplier above 2^7"));
        }
    }
    Ok(Params { x_zp, w_zp, rq: Requant { mult, out_zp, min, max } })
}

/// Refusals shared with the CPU backend: uint8 weights and int16x8 biases are
/// read at prepare there, so they must be constants.
fn check_constants(op: &OpContext<'_>, kind: Kind, w: usize, bias: usize) -> Result<()> {
    if kind == Kind::U8 && op.input(w)?.value.is_none() {
        return Err(op.unsupported("uint8 weights computed at run time"));
    }
    if kind == Kind::I16x8 && op.opt_input(bias).is_some_and(|b| b.value.is_none()) {
        return Err(op.unsupported("int16x8 bias computed at run time"));
    }
    Ok(())
}

/// The bias as int64 values (int32 widened), or zeros.
fn bias_values(ins: &[Option<&[u8]>], i: usize, kind: Kind, n: usize) -> Result<Vec<i64>> {
    match ins.get(i).copied().flatten() {
        None => Ok(vec![0; n]),
        Some(b) if kind == Kind::I16x8 => read_i64(b, n, "bias"),
        Some(b) => Ok(read_i32(b, n, "bias")?.into_iter().map(i64::from).collect()),
    }
}

/// CONV_2D (weights OHWI) or DEPTHWISE_CONV_2D (weights 1HW(C*M), output channel
/// `c * M + m` reading input channel `c`).
pub(super) fn conv(op: &OpContext<'_>, depthwise: bool) -> Result<Built> {
    if op.input_pad.is_some() {
        // The compiler folds PADs into float convolutions only.
        return Err(op.unsupported("folded PAD before an integer convolution"));
    }
    let kind = kind(op, 0, 1, 2)?;
    let (padding, stride, dilation, act) = match op.op.params {
        OpParams::Conv2D { padding, stride, dilation, activation } if !depthwise => (padding, stride, dilation, activation),
        OpParams::DepthwiseConv2D { padding, stride, dilation, activation, .. } if depthwise => (padding, stride, dilation, activation),
        _ => return Err(op.bad("missing convolution options")),
    };
    let (x, w) = (op.input(0)?, op.input(1)?);
    let (&[batch, in_h, in_w, in_c], &[w0, kh, kw, w3]) = (&x.shape[..], &w.shape[..]) else {
        return Err(op.bad(format!("input {:?} and filter {:?} must be 4-D", x.shape, w.shape)));
    };
    let out_c = if depthwise { w3 } else { w0 };
    if (!depthwise && w3 != in_c) || (depthwise && (w0 != 1 || in_c == 0 || out_c % in_c != 0)) {
        return Err(op.bad(format!("filter {:?} does not match input {:?}", w.shape, x.shape)));
    }
    let mult = if depthwise { out_c / in_c } else { 0 };
    if op.opt_input(2).is_some_and(|b| b.shape.iter().product::<usize>() != out_c) {
        return Err(op.bad("bias size does not match the output channels"));
    }
    check_constants(op, kind, 1, 2)?;
    let p = params(op, kind, (0, 1), out_c, act, product(op, kind, 1, false)?)?;
    let same = padding == Padding::Same;
    let (out_h, pad_top) = out_and_pad(op, in_h, kh, stride.0, dilation.0, same)?;
    let (out_w, pad_left) = out_and_pad(op, in_w, kw, stride.1, dilation.1, same)?;
    let out_shape = vec![batch, out_h, out_w, out_c];
    let n_out = elements(op, &out_shape)?;
    let n_in = elements(op, &x.shape)?;
    let n_w = elements(op, &w.shape)?;
    let (xdt, wdt, odt) = (x.dtype, w.dtype, op.outputs[0].dtype);
    Ok(Built {
        outputs: vec![(odt, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let input = read_ints(xdt, arg(ins, 0)?, n_in, "input")?;
            let filter = read_ints(wdt, arg(ins, 1)?, n_w, "filter")?;
            let bias = bias_values(ins, 2, kind, out_c)?;
            let mut out = vec![0i32; n_out];
            for b in 0..batch {
                for oy in 0..out_h {
                    for ox in 0..out_w {
                        for oc in 0..out_c {
                            // int64 holds every int16x8 sum; 8-bit sums wrap in int32 below.
                            let mut acc = 0i64;
                            for ky in 0..kh {
                                let Some(iy) = (oy * stride.0 + ky * dilation.0).checked_sub(pad_top).filter(|&y| y < in_h) else { continue };
                                for kx in 0..kw {
                                    let Some(ix) = (ox * stride.1 + kx * dilation.1).checked_sub(pad_left).filter(|&v| v < in_w) else { continue };
                                    let pixel = ((b * in_h + iy) * in_w + ix) * in_c;
                                    if depthwise {
                                        let xv = input[pixel + oc / mult] - p.x_zp;
                                        let wv = filter[(ky * kw + kx) * out_c + oc] - p.w_zp;
                                        acc += i64::from(xv * wv);
                                    } else {
                                        for ic in 0..in_c {
                                            let xv = input[pixel + ic] - p.x_zp;
                                            let wv = filter[((oc * kh + ky) * kw + kx) * in_c + ic] - p.w_zp;
                                            acc += i64::from(xv * wv);
                                        }
                                    }
                                }
                            }
                            let i = ((b * out_h + oy) * out_w + ox) * out_c + oc;
                            out[i] = if kind == Kind::I16x8 {
                                p.rq.apply64(acc.wrapping_add(bias[oc]), oc, kq::multiply_by_quantized_multiplier_i64)
                            } else {
                                p.rq.apply((acc as i32).wrapping_add(bias[oc] as i32), oc)
                            };
                        }
                    }
                }
            }
            write_ints(odt, &out, outs[0])
        }),
    })
}

/// FULLY_CONNECTED: `out[b, o] = requant(bias[o] + sum_i (x[b, i] - x_zp) * (w[o, i] - w_zp))`
/// over the input viewed as rows of the weights' depth; `keep_num_dims` keeps the
/// input's leading dimensions.
pub(super) fn fully_connected(op: &OpContext<'_>) -> Result<Built> {
    let kind = kind(op, 0, 1, 2)?;
    let OpParams::FullyConnected { activation, keep_num_dims, .. } = op.op.params else { return Err(op.bad("missing FullyConnected options")) };
    let (x, w) = (op.input(0)?, op.input(1)?);
    let &[out_n, in_n] = &w.shape[..] else { return Err(op.bad(format!("weights {:?} must be 2-D", w.shape))) };
    let total = elements(op, &x.shape)?;
    if in_n == 0 || total % in_n != 0 {
        return Err(op.bad(format!("input {:?} is not a multiple of {in_n}", x.shape)));
    }
    let batch = total / in_n;
    if op.opt_input(2).is_some_and(|b| b.shape.iter().product::<usize>() != out_n) {
        return Err(op.bad("bias size does not match the output count"));
    }
    check_constants(op, kind, 1, 2)?;
    let p = params(op, kind, (0, 1), out_n, activation, product(op, kind, 1, true)?)?;
    let out_shape = match x.shape.split_last() {
        Some((_, lead)) if keep_num_dims => [lead, &[out_n]].concat(),
        _ => vec![batch, out_n],
    };
    let n_w = elements(op, &w.shape)?;
    elements(op, &out_shape)?;
    let (xdt, wdt, odt) = (x.dtype, w.dtype, op.outputs[0].dtype);
    // LiteRT 2.3.0's reference fully-connected layers round the product once for every
    // type, int8 with one weight scale too (measured on converter models).
    Ok(Built {
        outputs: vec![(odt, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let input = read_ints(xdt, arg(ins, 0)?, total, "input")?;
            let weights = read_ints(wdt, arg(ins, 1)?, n_w, "weights")?;
            let bias = bias_values(ins, 2, kind, out_n)?;
            let mut out = vec![0i32; batch * out_n];
            for b in 0..batch {
                for o in 0..out_n {
                    let mut acc = 0i64;
                    for i in 0..in_n {
                        acc += i64::from((input[b * in_n + i] - p.x_zp) * (weights[o * in_n + i] - p.w_zp));
                    }
                    out[b * out_n + o] = p.rq.apply64(acc.wrapping_add(bias[o]), o, kq::multiply_by_quantized_multiplier_i64_full);
                }
            }
            write_ints(odt, &out, outs[0])
        }),
    })
}

/// TRANSPOSE_CONV (inputs: output shape, weights OHWI, input, optional bias) on
/// int8, uint8 and int16x8: every input pixel scattered through every filter tap
/// onto the output (`out_y = in_y * stride - pad + ky`), sums of
/// `(x - x_zp) * (w - w_zp)`, then the bias and the same requantization as a
/// convolution. The padding is the forward convolution's that maps the output
/// back onto the input.
pub(super) fn transpose_conv(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    let kind = kind(op, 2, 1, 3)?;
    let (w, x) = (op.input(1)?, op.input(2)?);
    let sizes = op.const_ints(0)?;
    let (&[batch, in_h, in_w, in_c], &[out_c, kh, kw, w_in_c], &[ob, oh, ow, oc]) = (&x.shape[..], &w.shape[..], &sizes[..]) else {
        return Err(op.bad(format!("TRANSPOSE_CONV of {:?} with filter {:?} to {sizes:?}", x.shape, w.shape)));
    };
    let fits = |v: i64, want: Option<usize>| v > 0 && want.is_none_or(|u| usize::try_from(v) == Ok(u));
    if !(fits(ob, Some(batch)) && fits(oh, None) && fits(ow, None) && fits(oc, Some(out_c))) || w_in_c != in_c || stride.0 == 0 || stride.1 == 0 {
        return Err(op.bad(format!("output_shape {sizes:?} does not match input {:?} / filter {:?}", x.shape, w.shape)));
    }
    let (out_h, out_w) = (oh as usize, ow as usize);
    if op.opt_input(3).is_some_and(|b| b.shape.iter().product::<usize>() != out_c) {
        return Err(op.bad("bias size does not match the output channels"));
    }
    check_constants(op, kind, 1, 3)?;
    let p = params(op, kind, (2, 1), out_c, activation, product(op, kind, 1, false)?)?;
    if kind == Kind::I8 && p.w_zp != 0 {
        return Err(op.bad("int8 TRANSPOSE_CONV weights must have zero point 0"));
    }
    let same = padding == Padding::Same;
    let pad = |o: usize, k: usize, s: usize, i: usize| if same { ((i.max(1) - 1) * s + k).saturating_sub(o) / 2 } else { 0 };
    let (pad_top, pad_left) = (pad(out_h, kh, stride.0, in_h), pad(out_w, kw, stride.1, in_w));
    let out_shape = vec![batch, out_h, out_w, out_c];
    let n_out = elements(op, &out_shape)?;
    let (n_in, n_w) = (elements(op, &x.shape)?, elements(op, &w.shape)?);
    let (xdt, wdt, odt) = (x.dtype, w.dtype, op.outputs[0].dtype);
    Ok(Built {
        outputs: vec![(odt, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let input = read_ints(xdt, arg(ins, 2)?, n_in, "input")?;
            let filter = read_ints(wdt, arg(ins, 1)?, n_w, "filter")?;
            let bias = bias_values(ins, 3, kind, out_c)?;
            let mut acc = vec![0i64; n_out];
            for b in 0..batch {
                for iy in 0..in_h {
                    for ix in 0..in_w {
                        for ky in 0..kh {
                            let Some(oy) = (iy * stride.0 + ky).checked_sub(pad_top).filter(|&y| y < out_h) else { continue };
                            for kx in 0..kw {
                                let Some(ox) = (ix * stride.1 + kx).checked_sub(pad_left).filter(|&v| v < out_w) else { continue };
                                for o in 0..out_c {
                                    for ic in 0..in_c {
                                        let xv = input[((b * in_h + iy) * in_w + ix) * in_c + ic] - p.x_zp;
                                        let wv = filter[((o * kh + ky) * kw + kx) * in_c + ic] - p.w_zp;
                                        acc[((b * out_h + oy) * out_w + ox) * out_c + o] += i64::from(xv * wv);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            let y: Vec<i32> = acc
                .iter()
                .enumerate()
                .map(|(i, &a)| {
                    let c = i % out_c;
                    if kind == Kind::I16x8 {
                        p.rq.apply64(a.wrapping_add(bias[c]), c, kq::multiply_by_quantized_multiplier_i64)
                    } else {
                        p.rq.apply((a as i32).wrapping_add(bias[c] as i32), c)
                    }
                })
                .collect();
            write_ints(odt, &y, outs[0])
        }),
    })
}

#[cfg(test)]
mod tests {
    use ferrite_format::ops::BuiltinOp as B;

    use ferrite_kernels::quant::quantize_multiplier;

    use super::super::super::quant_test_util::{mismatches, out, q, qc, run_ref, Rng, T};
    use crate::model::{DType, Quantization, TensorInfo};
    use crate::ops::{Activation, OpParams, Padding};

    /// An input scale: a power of two half the time (its products with the weight
    /// scales are then exact in single precision, so LiteRT's two multiplier rules
    /// agree), otherwise spread over a few octaves.
    fn pot_or_random(rng: &mut Rng) -> f32 {
        if rng.one_in(2) {
            2f32.powi(-rng.int(3, 7))
        } else {
            rng.scale(0.05)
        }
    }

    /// Whether the multipliers of the single-precision rule (the reference's for
    /// per-tensor FULLY_CONNECTED and uint8 convolutions, as LiteRT's prepare) equal
    /// the double-precision ones the CPU backend forms.
    fn rules_agree(x: &T, w: &T, o: &TensorInfo) -> bool {
        let scales = |q: Option<&Quantization>| q.map_or(vec![1.0], |q| q.scale.clone());
        let (xs, os) = (scales(x.quant.as_ref())[0], scales(o.quant.as_ref())[0]);
        scales(w.quant.as_ref())
            .iter()
            .all(|&ws| quantize_multiplier(f64::from(xs * ws) / f64::from(os)) == quantize_multiplier(f64::from(xs) * f64::from(ws) / f64::from(os)))
    }

    /// Cases where the reference (following LiteRT) and the CPU backend form
    /// different multipliers: counted and reported, not failed.
    #[derive(Default)]
    struct Disagreements {
        cases: usize,
        outputs: usize,
    }

    impl Disagreements {
        fn note(&mut self, mismatching_outputs: usize) {
            self.cases += 1;
            self.outputs += mismatching_outputs;
        }
        fn report(&self, what: &str) {
            eprintln!("{what}: {} cases with single- and double-precision multipliers differing; {} of their outputs differ", self.cases, self.outputs);
        }
    }

    fn conv_params(depthwise: bool, padding: Padding, stride: (usize, usize), dilation: (usize, usize), activation: Activation) -> OpParams {
        if depthwise {
            OpParams::DepthwiseConv2D { padding, stride, dilation, depth_multiplier: 0, activation }
        } else {
            OpParams::Conv2D { padding, stride, dilation, activation }
        }
    }

    #[test]
    fn conv_int8_by_hand() {
        // 1x2x2x1 input [1, 2, 3, 4] (scale 0.5, zp 1), 1x2x2x1 filter of 1s (scale 1),
        // VALID: acc = (0 + 1 + 2 + 3) + bias 2 = 8; real = 8 * 0.5 = 4; out scale 0.25,
        // zp -3: 16 - 3 = 13.
        let x = T::ints(DType::I8, &[1, 2, 2, 1], q(0.5, 1), &[1, 2, 3, 4]);
        let w = T::ints(DType::I8, &[1, 2, 2, 1], q(1.0, 0), &[1, 1, 1, 1]).constant();
        let b = T::ints(DType::I32, &[1], None, &[2]).constant();
        let params = conv_params(false, Padding::Valid, (1, 1), (1, 1), Activation::None);
        let r = run_ref(B::CONV_2D, &params, &[Some(&x), Some(&w), Some(&b)], &out(DType::I8, q(0.25, -3)));
        let ((dt, shape), bytes) = r.expect("conv builds and runs");
        assert_eq!((dt, shape, bytes), (DType::I8, vec![1, 1, 1, 1], vec![13u8]));
    }

    #[test]
    fn fully_connected_int16_by_hand() {
        // x [100, -200] (scale 1/64), w [[3, 1]] (scale 1/2), bias 1000 (scale 1/128):
        // acc = 300 - 200 + 1000 = 1100; out scale 1/16: 1100 * (1/128) * 16 = 137.5 -> 138.
        let x = T::ints(DType::I16, &[1, 2], q(1.0 / 64.0, 0), &[100, -200]);
        let w = T::ints(DType::I8, &[1, 2], q(0.5, 0), &[3, 1]).constant();
        let b = T::i64s(&[1], &[1000]);
        let params =
            OpParams::FullyConnected { activation: Activation::None, keep_num_dims: false, shuffled_weights: false, asymmetric_quantize_inputs: false };
        let ((dt, shape), bytes) = run_ref(B::FULLY_CONNECTED, &params, &[Some(&x), Some(&w), Some(&b)], &out(DType::I16, q(1.0 / 16.0, 0))).expect("fc runs");
        assert_eq!((dt, shape), (DType::I16, vec![1, 1]));
        assert_eq!(i16::from_le_bytes([bytes[0], bytes[1]]), 138);
    }

    #[test]
    fn fully_connected_int8_rounds_once_with_any_weight_scales() {
        // acc 1 times a real multiplier of 0.3 (input and output scale 1, weight scale
        // 0.3): the doubling high multiply would round 0.6 up to 1 and the shift by one
        // then the half up to 1; one rounding of the exact 0.3 gives 0. LiteRT 2.3.0's
        // reference kernels round once with one weight scale as with one per output row.
        let x = T::ints(DType::I8, &[1, 1], q(1.0, 0), &[1]);
        let params =
            OpParams::FullyConnected { activation: Activation::None, keep_num_dims: false, shuffled_weights: false, asymmetric_quantize_inputs: false };
        let o = out(DType::I8, q(1.0, 0));
        for (wq, want) in [(q(0.3, 0), vec![0u8, 0]), (qc(vec![0.3, 0.3], 0), vec![0u8, 0])] {
            let per_channel = wq.as_ref().is_some_and(|q| q.scale.len() > 1);
            let w = T::ints(DType::I8, &[2, 1], wq, &[1, 1]).constant();
            let ((_, shape), bytes) = run_ref(B::FULLY_CONNECTED, &params, &[Some(&x), Some(&w), None], &o).expect("fc runs");
            assert_eq!((shape, bytes), (vec![1, 2], want), "per channel {per_channel}");
            assert_eq!(mismatches(B::FULLY_CONNECTED, &params, &[Some(&x), Some(&w), None], &o), 0, "cpu, per channel {per_channel}");
        }
    }

    /// Random convolutions of every kind against the CPU backend, bit for bit.
    fn random_convs(depthwise: bool) {
        let mut rng = Rng::new(if depthwise { 7 } else { 3 });
        let kinds = [(DType::I8, DType::I8), (DType::U8, DType::U8), (DType::I16, DType::I8)];
        let acts = [Activation::None, Activation::Relu, Activation::Relu6, Activation::ReluN1To1];
        let (mut total, mut disagreements) = (0, Disagreements::default());
        for case in 0..60 {
            let (xt, wt) = kinds[case % 3];
            let (in_c, mult) = (rng.usize(1, 5), rng.usize(1, 3));
            let out_c = if depthwise { in_c * mult } else { rng.usize(1, 6) };
            let (kh, kw) = (rng.usize(1, 3), rng.usize(1, 3));
            let (h, w) = (rng.usize(kh + 1, 7), rng.usize(kw + 1, 7));
            let batch = rng.usize(1, 2);
            let padding = if rng.one_in(2) { Padding::Same } else { Padding::Valid };
            let stride = (rng.usize(1, 2), rng.usize(1, 2));
            let dilation = if case % 5 == 0 { (2, 1) } else { (1, 1) };
            if (kh - 1) * dilation.0 + 1 > h {
                continue;
            }
            let x_scale = pot_or_random(&mut rng);
            let x = T::ints(xt, &[batch, h, w, in_c], q(x_scale, rng.zp(xt)), &rng.ints(xt, batch * h * w * in_c));
            let w_shape = if depthwise { vec![1, kh, kw, out_c] } else { vec![out_c, kh, kw, in_c] };
            let per_channel = xt != DType::U8 && rng.one_in(2);
            let w_scales: Vec<f32> = (0..if per_channel { out_c } else { 1 }).map(|_| rng.scale(0.02)).collect();
            let wq =
                if per_channel { qc(w_scales, if depthwise { 3 } else { 0 }) } else { q(w_scales[0], if xt == DType::U8 { rng.zp(DType::U8) } else { 0 }) };
            let weights = T::ints(wt, &w_shape, wq, &rng.ints(wt, w_shape.iter().product())).constant();
            let bias = if xt == DType::I16 {
                T::i64s(&[out_c], &(0..out_c).map(|_| i64::from(rng.int(-100_000, 100_000))).collect::<Vec<_>>())
            } else {
                T::ints(DType::I32, &[out_c], None, &(0..out_c).map(|_| rng.int(-5000, 5000)).collect::<Vec<_>>()).constant()
            };
            let with_bias = !rng.one_in(4);
            let out_scale = x_scale * 0.02 * rng.scale(if xt == DType::I16 { 16.0 } else { 24.0 });
            let o = out(xt, q(out_scale, rng.zp(xt)));
            let params = conv_params(depthwise, padding, stride, dilation, acts[case % 4]);
            let code = if depthwise { B::DEPTHWISE_CONV_2D } else { B::CONV_2D };
            let n = mismatches(code, &params, &[Some(&x), Some(&weights), with_bias.then_some(&bias)], &o);
            if xt == DType::U8 && !rules_agree(&x, &weights, &o) {
                disagreements.note(n);
                continue;
            }
            assert_eq!(n, 0, "case {case}: {n} mismatching outputs ({xt:?}, in {:?}, filter {w_shape:?})", x.shape);
            total += 1;
        }
        disagreements.report(if depthwise { "uint8 DEPTHWISE_CONV_2D" } else { "uint8 CONV_2D" });
        assert!(total > 30, "only {total} cases compared");
    }

    #[test]
    fn conv_matches_cpu() {
        random_convs(false);
    }

    #[test]
    fn depthwise_matches_cpu() {
        random_convs(true);
    }

    #[test]
    fn fully_connected_matches_cpu() {
        let mut rng = Rng::new(11);
        let (mut compared, mut disagreements) = (0, Disagreements::default());
        let kinds = [(DType::I8, DType::I8), (DType::U8, DType::U8), (DType::I16, DType::I8)];
        for case in 0..60 {
            let (xt, wt) = kinds[case % 3];
            let (batch, in_n, out_n) = (rng.usize(1, 4), rng.usize(1, 40), rng.usize(1, 9));
            let keep = rng.one_in(2);
            let x_shape = if keep { vec![1, batch, in_n] } else { vec![batch, in_n] };
            let x_scale = pot_or_random(&mut rng);
            let x = T::ints(xt, &x_shape, q(x_scale, rng.zp(xt)), &rng.ints(xt, batch * in_n));
            let per_channel = xt == DType::I8 && rng.one_in(2);
            let w_scales: Vec<f32> = (0..if per_channel { out_n } else { 1 }).map(|_| rng.scale(0.02)).collect();
            let wq = if per_channel { qc(w_scales, 0) } else { q(w_scales[0], if xt == DType::U8 { rng.zp(DType::U8) } else { 0 }) };
            let w = T::ints(wt, &[out_n, in_n], wq, &rng.ints(wt, out_n * in_n)).constant();
            let bias = if xt == DType::I16 {
                T::i64s(&[out_n], &(0..out_n).map(|_| i64::from(rng.int(-100_000, 100_000))).collect::<Vec<_>>())
            } else {
                T::ints(DType::I32, &[out_n], None, &(0..out_n).map(|_| rng.int(-5000, 5000)).collect::<Vec<_>>()).constant()
            };
            let with_bias = !rng.one_in(3);
            let o = out(xt, q(x_scale * 0.02 * rng.scale(8.0), rng.zp(xt)));
            let act = [Activation::None, Activation::Relu, Activation::Relu6][case % 3];
            let params = OpParams::FullyConnected { activation: act, keep_num_dims: keep, shuffled_weights: false, asymmetric_quantize_inputs: false };
            let n = mismatches(B::FULLY_CONNECTED, &params, &[Some(&x), Some(&w), with_bias.then_some(&bias)], &o);
            if !per_channel && !rules_agree(&x, &w, &o) {
                disagreements.note(n);
                continue;
            }
            assert_eq!(n, 0, "case {case}: {n} mismatching outputs ({xt:?}, batch {batch}, {in_n} -> {out_n})");
            compared += 1;
        }
        disagreements.report("per-tensor FULLY_CONNECTED");
        assert!(compared > 25, "only {compared} cases compared");
    }

    #[test]
    fn transpose_conv_matches_cpu() {
        let mut rng = Rng::new(13);
        let mut disagreements = Disagreements::default();
        let kinds = [(DType::I8, DType::I8), (DType::U8, DType::U8), (DType::I16, DType::I8)];
        for case in 0..45 {
            let (xt, wt) = kinds[case % 3];
            let (in_c, out_c, k) = (rng.usize(1, 4), rng.usize(1, 4), rng.usize(1, 3));
            let (h, w) = (rng.usize(1, 4), rng.usize(1, 4));
            let stride = (rng.usize(1, 2), rng.usize(1, 2));
            let same = rng.one_in(2);
            let (oh, ow) = if same { (h * stride.0, w * stride.1) } else { ((h - 1) * stride.0 + k, (w - 1) * stride.1 + k) };
            let x_scale = pot_or_random(&mut rng);
            let x = T::ints(xt, &[1, h, w, in_c], q(x_scale, rng.zp(xt)), &rng.ints(xt, h * w * in_c));
            let per_channel = xt != DType::U8 && rng.one_in(2);
            let wq = if per_channel {
                qc((0..out_c).map(|_| rng.scale(0.02)).collect(), 0)
            } else {
                q(rng.scale(0.02), if xt == DType::U8 { rng.zp(xt) } else { 0 })
            };
            let weights = T::ints(wt, &[out_c, k, k, in_c], wq, &rng.ints(wt, out_c * k * k * in_c)).constant();
            let sizes = T::ints(DType::I32, &[4], None, &[1, oh as i32, ow as i32, out_c as i32]).constant();
            let bias = if xt == DType::I16 {
                T::i64s(&[out_c], &(0..out_c).map(|_| i64::from(rng.int(-50_000, 50_000))).collect::<Vec<_>>())
            } else {
                T::ints(DType::I32, &[out_c], None, &(0..out_c).map(|_| rng.int(-3000, 3000)).collect::<Vec<_>>()).constant()
            };
            let with_bias = !rng.one_in(3);
            let o = out(xt, q(x_scale * 0.02 * rng.scale(6.0), rng.zp(xt)));
            let padding = if same { Padding::Same } else { Padding::Valid };
            let params = OpParams::TransposeConv { padding, stride, activation: [Activation::None, Activation::Relu][case % 2] };
            let n = mismatches(B::TRANSPOSE_CONV, &params, &[Some(&sizes), Some(&weights), Some(&x), with_bias.then_some(&bias)], &o);
            if xt == DType::U8 && !rules_agree(&x, &weights, &o) {
                disagreements.note(n);
                continue;
            }
            assert_eq!(n, 0, "case {case}: TRANSPOSE_CONV {xt:?} {h}x{w}x{in_c} -> {oh}x{ow}x{out_c}: {n} mismatching outputs");
        }
        disagreements.report("uint8 TRANSPOSE_CONV");
    }

    #[test]
    fn refuses_what_cpu_refuses() {
        // int8 input with uint8 weights: no integer kernel on either backend.
        let x = T::ints(DType::I8, &[1, 2], q(1.0, 0), &[1, 2]);
        let w = T::ints(DType::U8, &[1, 2], q(1.0, 0), &[1, 2]).constant();
        let params =
            OpParams::FullyConnected { activation: Activation::None, keep_num_dims: false, shuffled_weights: false, asymmetric_quantize_inputs: false };
        let r = run_ref(B::FULLY_CONNECTED, &params, &[Some(&x), Some(&w)], &out(DType::I8, q(1.0, 0)));
        assert!(matches!(r, Err(crate::error::Error::Unsupported(_))), "{:?}", r.err());
        // A NaN weight scale is a model error, not a panic.
        let w = T::ints(DType::I8, &[1, 2], q(f32::NAN, 0), &[1, 2]).constant();
        let r = run_ref(B::FULLY_CONNECTED, &params, &[Some(&x), Some(&w)], &out(DType::I8, q(1.0, 0)));
        assert!(matches!(r, Err(crate::error::Error::InvalidModel(_))), "{:?}", r.err());
        // Too few inputs.
        let r = run_ref(B::FULLY_CONNECTED, &params, &[Some(&x)], &out(DType::I8, q(1.0, 0)));
        assert!(r.is_err());
    }
}
