//! Integer kernels with LiteRT's builtin-kernel numerics: int8 convolution,
//! depthwise convolution and fully-connected (per-channel weights), table-driven
//! LOGISTIC / TANH, and QUANTIZE.

use std::sync::Mutex;

use ferrite_kernels::fixed16 as f16;
use ferrite_kernels::pool as kpool;
use ferrite_kernels::qgemm;
use ferrite_kernels::quant::{self as kq, QConv, Requant};

use super::nn::window;
use crate::backend::{arg, typed, typed_mut, Built, OpContext};
use crate::error::Result;
use crate::model::{DType, Quantization};
use crate::ops::{Activation, OpParams};

/// (scale, zero point) of a per-tensor quantized input or output.
fn per_tensor(op: &OpContext<'_>, q: Option<&Quantization>, what: &str) -> Result<(f32, i32)> {
    let q = q.ok_or_else(|| op.bad(format!("{what} has no quantization parameters")))?;
    Ok((q.scale[0], q.zero_point[0] as i32))
}

/// Value range of an int8 (default), uint8 or int16 element.
pub(crate) fn int_range(dtype: DType) -> (i32, i32) {
    match dtype {
        DType::U8 => (0, 255),
        DType::I16 => (-32768, 32767),
        _ => (-128, 127),
    }
}

/// The fused activation's range in the output's quantized domain, as LiteRT computes it.
pub(crate) fn activation_range(act: Activation, scale: f32, zp: i32, dtype: DType) -> (i32, i32) {
    let (qmin, qmax) = int_range(dtype);
    // Saturating: an extreme scale or zero point must give a range, not overflow
    // (`as` saturates a huge quotient; the addition must too).
    let q = |f: f32| zp.saturating_add((f / scale).round() as i32);
    let (lo, hi) = match act {
        Activation::Relu => (qmin.max(q(0.0)), qmax),
        Activation::Relu6 => (qmin.max(q(0.0)), qmax.min(q(6.0))),
        Activation::ReluN1To1 => (qmin.max(q(-1.0)), qmax.min(q(1.0))),
        _ => (qmin, qmax),
    };
    // Callers clamp to the range, which panics on an inverted one (a zero point at the
    // edge of the type's range): collapse it instead.
    (lo.min(qmax), hi.max(lo.min(qmax)))
}

/// Requantization for accumulators of `in_scale * w_scale[c]` onto the output.
fn requant(op: &OpContext<'_>, in_scale: f32, w_scales: &[f32], act: Activation) -> Result<Requant> {
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let (mut multiplier, mut shift) = (Vec::with_capacity(w_scales.len()), Vec::with_capacity(w_scales.len()));
    for &ws in w_scales {
        let (m, s) = kq::quantize_multiplier(f64::from(in_scale) * f64::from(ws) / f64::from(out_scale));
        multiplier.push(m);
        shift.push(s);
    }
    let (min, max) = activation_range(act, out_scale, out_zp, op.outputs[0].dtype);
    Ok(Requant { multiplier, shift, out_zp, min, max })
}

/// The integer scheme of a convolution or fully-connected op.
#[derive(Clone, Copy, PartialEq, Eq)]
enum IntKind {
    /// int8 activations and weights, int32 bias.
    I8,
    /// uint8 activations and weights, int32 bias.
    U8,
    /// int16 activations, int8 weights, int64 bias, zero points 0.
    I16x8,
}

/// Checks the input, weight, bias and output types of an integer conv / FC.
fn int_types(op: &OpContext<'_>) -> Result<IntKind> {
    let (x, w) = (op.input(0)?, op.input(1)?);
    let bias = op.opt_input(2).map(|b| b.dtype);
    match (x.dtype, w.dtype, op.outputs[0].dtype, bias) {
        (DType::I8, DType::I8, DType::I8, None | Some(DType::I32)) => Ok(IntKind::I8),
        (DType::U8, DType::U8, DType::U8, None | Some(DType::I32)) => Ok(IntKind::U8),
        (DType::I16, DType::I8, DType::I16, None | Some(DType::I64)) => Ok(IntKind::I16x8),
        _ => Err(op.unsupported(format!(
            "integer kernel for {} input with {} weights (int8 or uint8 with int32 bias, int16 with int8 weights and int64 bias are implemented)",
            x.dtype.name(),
            w.dtype.name()
        ))),
    }
}

/// int16x8 checks: zero points must be 0 (as LiteRT requires) and every shift
/// small enough for the 64-bit requantization. Returns the constant int64 bias,
/// copied so that its alignment in the file does not matter.
fn int16x8_setup(op: &OpContext<'_>, in_zp: i32, w_zp: i32, rq: &Requant) -> Result<Option<Vec<i64>>> {
    int16x8_setup_at(op, 2, in_zp, w_zp, rq)
}

/// [`int16x8_setup`] with the bias at input `bias_index`.
fn int16x8_setup_at(op: &OpContext<'_>, bias_index: usize, in_zp: i32, w_zp: i32, rq: &Requant) -> Result<Option<Vec<i64>>> {
    if in_zp != 0 || w_zp != 0 || rq.out_zp != 0 {
        return Err(op.bad("int16x8 requires zero points of 0 on input, weights and output"));
    }
    if rq.shift.iter().any(|&s| s > 7) {
        return Err(op.unsupported("int16x8 output multiplier above 2^7"));
    }
    let Some(b) = op.opt_input(bias_index) else { return Ok(None) };
    let bytes = b.value.ok_or_else(|| op.unsupported("int16x8 bias computed at run time"))?;
    Ok(Some(bytes.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()))
}

/// uint8 runs through the int8 kernels: `u ^ 0x80` is `u - 128` as an int8, so inputs,
/// weights and outputs flip that bit and every zero point and clamp bound moves by
/// 128. The arithmetic is otherwise identical.
struct Unsigned {
    /// Weights flipped once at prepare.
    weights: Vec<i8>,
    /// Input flipped each run (scratch sized at prepare).
    input: Mutex<Vec<i8>>,
}

impl Unsigned {
    fn new(op: &OpContext<'_>, input_len: usize) -> Result<Unsigned> {
        let w = op.input(1)?.value.ok_or_else(|| op.unsupported("uint8 weights computed at run time"))?;
        Ok(Unsigned { weights: w.iter().map(|&b| (b ^ 0x80) as i8).collect(), input: Mutex::new(vec![0; input_len]) })
    }

    /// Flips `src` into the input scratch and returns it.
    fn input<'a>(&'a self, src: &[u8]) -> std::sync::MutexGuard<'a, Vec<i8>> {
        let mut input = self.input.lock().unwrap_or_else(|e| e.into_inner());
        for (d, &s) in input.iter_mut().zip(src) {
            *d = (s ^ 0x80) as i8;
        }
        input
    }
}

fn shift_requant(rq: &mut Requant) {
    rq.out_zp -= 128;
    rq.min -= 128;
    rq.max -= 128;
}

pub(crate) fn conv(op: &OpContext<'_>, depthwise: bool, ctx: &mut crate::backend::BackendContext) -> Result<Built> {
    let kind = int_types(op)?;
    let (x, w) = (op.input(0)?, op.input(1)?);
    let (padding, stride, dilation, act) = match op.op.params {
        OpParams::Conv2D { padding, stride, dilation, activation } if !depthwise => (padding, stride, dilation, activation),
        OpParams::DepthwiseConv2D { padding, stride, dilation, activation, .. } if depthwise => (padding, stride, dilation, activation),
        _ => return Err(op.bad("missing convolution options")),
    };
    if x.shape.len() != 4 || w.shape.len() != 4 {
        return Err(op.bad("input and filter must be 4-D"));
    }
    let (in_c, kh, kw) = (x.shape[3], w.shape[1], w.shape[2]);
    let out_c = if depthwise { w.shape[3] } else { w.shape[0] };
    if (!depthwise && w.shape[3] != in_c) || (depthwise && (w.shape[0] != 1 || in_c == 0 || out_c % in_c != 0)) {
        return Err(op.bad(format!("filter {:?} does not match input {:?}", w.shape, x.shape)));
    }
    check_bias(op, out_c, x.dtype)?;
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let wq = w.quant.ok_or_else(|| op.bad("filter has no quantization parameters"))?;
    if wq.scale.len() != 1 && wq.scale.len() != out_c {
        return Err(op.bad(format!("{} filter scales for {out_c} channels", wq.scale.len())));
    }
    let g = window(op, &x.shape, (kh, kw), stride, dilation, padding)?;
    let mut q = QConv {
        g,
        in_c,
        out_c,
        depth_multiplier: if depthwise { out_c / in_c } else { 0 },
        in_zp,
        w_zp: wq.zero_point[0] as i32,
        rq: requant(op, in_scale, &wq.scale, act)?,
    };
    let out_shape = vec![g.batch, g.out_h, g.out_w, out_c];
    // Accumulators and the uint8 input copy are sized from file shapes: bounded first.
    op.checked_elements(&out_shape, 4)?;
    op.checked_elements(&x.shape, 1)?;
    if kind == IntKind::I16x8 {
        let bias = int16x8_setup(op, q.in_zp, q.w_zp, &q.rq)?;
        let acc = Mutex::new(vec![0i64; out_c]);
        return Ok(Built {
            outputs: vec![(DType::I16, out_shape)],
            kernel: Box::new(move |ins, outs| {
                let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
                kq::conv_i16(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, bias.as_deref(), &q, typed_mut(outs[0])?, &mut acc);
                Ok(())
            }),
        });
    }
    if kind == IntKind::I8 && depthwise && q.depth_multiplier == 1 && q.w_zp == 0 && w.constant {
        // Channel multiplier 1: taps as flat multiply-adds along output rows.
        let bytes = w.value.ok_or_else(|| op.bad("constant weights without data"))?;
        let dw = Mutex::new(qgemm::Depthwise::new(typed::<i8>(bytes)?, &q));
        let has_bias = op.opt_input(2).is_some();
        return Ok(Built {
            outputs: vec![(DType::I8, out_shape)],
            kernel: Box::new(move |ins, outs| {
                let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
                let mut dw = dw.lock().unwrap_or_else(|e| e.into_inner());
                qgemm::depthwise_i8(arg(ins, 0)?, &mut dw, bias, &q, typed_mut(outs[0])?);
                Ok(())
            }),
        });
    }
    if kind == IntKind::I8 && !depthwise && q.w_zp == 0 && w.constant {
        // The common int8 case: weights packed once for the int8 GEMM.
        let bytes = w.value.ok_or_else(|| op.bad("constant weights without data"))?;
        let key = crate::backend::PackKey { subgraph: op.subgraph, tensor: w.tensor, with: None, packing: crate::backend::Packing::QGemm };
        let k = kh * kw * in_c;
        let pk = ctx.packed(key, || Ok(qgemm::QPacked::new(typed::<i8>(bytes)?, out_c, k)))?;
        let scratch = Mutex::new(qgemm::ConvScratch::new(&pk, &q.rq));
        let has_bias = op.opt_input(2).is_some();
        return Ok(Built {
            outputs: vec![(DType::I8, out_shape)],
            kernel: Box::new(move |ins, outs| {
                let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
                let mut s = scratch.lock().unwrap_or_else(|e| e.into_inner());
                qgemm::conv_i8(arg(ins, 0)?, &pk, bias, &q, typed_mut(outs[0])?, &mut s);
                Ok(())
            }),
        });
    }
    let flipped = if kind == IntKind::U8 {
        q.in_zp -= 128;
        q.w_zp -= 128;
        shift_requant(&mut q.rq);
        Some(Unsigned::new(op, x.shape.iter().product())?)
    } else {
        None
    };
    let has_bias = op.opt_input(2).is_some();
    let acc = Mutex::new(vec![0i32; g.batch * g.out_h * g.out_w * out_c]);
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
            let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
            match &flipped {
                None => kq::conv_i8(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, bias, &q, typed_mut(outs[0])?, &mut acc),
                Some(u) => {
                    kq::conv_i8(&u.input(arg(ins, 0)?), &u.weights, bias, &q, typed_mut(outs[0])?, &mut acc);
                    outs[0].iter_mut().for_each(|b| *b ^= 0x80);
                }
            }
            Ok(())
        }),
    })
}

/// The optional bias (input 2) of an integer convolution or fully-connected layer:
/// one value per output channel, int32 (int64 for int16 activations), as the
/// kernels read it.
fn check_bias(op: &OpContext<'_>, channels: usize, activations: DType) -> Result<()> {
    let Some(b) = op.opt_input(2) else { return Ok(()) };
    let want = if activations == DType::I16 { DType::I64 } else { DType::I32 };
    let n = b.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if b.dtype != want || n != Some(channels) {
        return Err(op.bad(format!("bias is {} {:?}; {channels} {} values (one per output channel) are needed", b.dtype.name(), b.shape, want.name())));
    }
    Ok(())
}

pub(crate) fn fully_connected(op: &OpContext<'_>) -> Result<Built> {
    let kind = int_types(op)?;
    let OpParams::FullyConnected { activation, keep_num_dims, .. } = op.op.params else { return Err(op.bad("missing FullyConnected options")) };
    let (x, w) = (op.input(0)?, op.input(1)?);
    if w.shape.len() != 2 {
        return Err(op.bad("weights must be 2-D"));
    }
    let (out_n, in_n) = (w.shape[0], w.shape[1]);
    // Sizes the uint8 path's input scratch: bounded before anything is allocated.
    let total = op.checked_elements(&x.shape, 1)?;
    if in_n == 0 || !total.is_multiple_of(in_n) {
        return Err(op.bad(format!("input {:?} is not a multiple of {in_n}", x.shape)));
    }
    let batch = total / in_n;
    // The kernels read one bias per output row.
    check_bias(op, out_n, x.dtype)?;
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let wq = w.quant.ok_or_else(|| op.bad("weights have no quantization parameters"))?;
    if wq.scale.len() != 1 && wq.scale.len() != out_n {
        return Err(op.bad(format!("{} weight scales for {out_n} outputs", wq.scale.len())));
    }
    let mut rq = requant(op, in_scale, &wq.scale, activation)?;
    let (mut in_zp, mut w_zp) = (in_zp, wq.zero_point[0] as i32);
    let flipped = if kind == IntKind::U8 {
        in_zp -= 128;
        w_zp -= 128;
        shift_requant(&mut rq);
        Some(Unsigned::new(op, total)?)
    } else {
        None
    };
    // keep_num_dims keeps the input's leading dims: its last dim must be the rows' length.
    if keep_num_dims && x.shape.last().is_some_and(|&l| l != in_n) {
        return Err(op.bad(format!("keep_num_dims needs the input's last dim {:?} to be {in_n}", x.shape)));
    }
    let out_shape = if keep_num_dims {
        let mut s = x.shape.clone();
        if let Some(l) = s.last_mut() {
            *l = out_n;
        } else {
            // A rank-0 input is one row: the output is that row's out_n values.
            s = vec![out_n];
        }
        s
    } else {
        vec![batch, out_n]
    };
    if kind == IntKind::I16x8 {
        let bias = int16x8_setup(op, in_zp, w_zp, &rq)?;
        return Ok(Built {
            outputs: vec![(DType::I16, out_shape)],
            kernel: Box::new(move |ins, outs| {
                kq::fully_connected_i16(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, bias.as_deref(), batch, in_n, out_n, &rq, typed_mut(outs[0])?);
                Ok(())
            }),
        });
    }
    let has_bias = op.opt_input(2).is_some();
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
            match &flipped {
                None => kq::fully_connected_i8(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, bias, batch, in_n, out_n, in_zp, w_zp, &rq, typed_mut(outs[0])?),
                Some(u) => {
                    kq::fully_connected_i8(&u.input(arg(ins, 0)?), &u.weights, bias, batch, in_n, out_n, in_zp, w_zp, &rq, typed_mut(outs[0])?);
                    outs[0].iter_mut().for_each(|b| *b ^= 0x80);
                }
            }
            Ok(())
        }),
    })
}

/// TRANSPOSE_CONV on int8 (per-channel int8 weights, int32 bias), uint8 (uint8
/// weights with a zero point, run through the int8 kernel shifted by 128) or
/// int16x8 (int64 bias, 64-bit sums): integer scatter of the zero-point-corrected
/// input, bias, per-channel requantization.
pub(crate) fn transpose_conv(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    let (w, x) = (op.input(1)?, op.input(2)?);
    let bias_type = op.opt_input(3).map(|b| b.dtype);
    let kind = match (x.dtype, w.dtype, op.outputs[0].dtype, bias_type) {
        (DType::I8, DType::I8, DType::I8, None | Some(DType::I32)) => IntKind::I8,
        (DType::U8, DType::U8, DType::U8, None | Some(DType::I32)) => IntKind::U8,
        (DType::I16, DType::I8, DType::I16, None | Some(DType::I64)) => IntKind::I16x8,
        _ => {
            return Err(op.unsupported(format!(
                "quantized TRANSPOSE_CONV of {} with {} weights (int8, uint8, and int16 with int8 weights and int64 bias, are implemented)",
                x.dtype.name(),
                w.dtype.name()
            )))
        }
    };
    let out_shape = op.const_ints(0)?;
    if x.shape.len() != 4 || w.shape.len() != 4 || out_shape.len() != 4 || out_shape.iter().any(|&d| d <= 0) {
        return Err(op.bad(format!("TRANSPOSE_CONV of {:?} with filter {:?} to {out_shape:?}", x.shape, w.shape)));
    }
    let (oc, kh, kw, ic) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
    let (out_h, out_w) = (out_shape[1] as usize, out_shape[2] as usize);
    if ic != x.shape[3] || out_shape[0] as usize != x.shape[0] || out_shape[3] as usize != oc || stride.0 == 0 || stride.1 == 0 {
        return Err(op.bad(format!("output_shape {out_shape:?} does not match input {:?} / filter {:?}", x.shape, w.shape)));
    }
    if op.opt_input(3).is_some_and(|b| b.shape.iter().product::<usize>() != oc) {
        return Err(op.bad("bias size does not match the output channels"));
    }
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let wq = w.quant.ok_or_else(|| op.bad("filter has no quantization parameters"))?;
    if wq.scale.len() != 1 && wq.scale.len() != oc {
        return Err(op.bad(format!("{} filter scales for {oc} channels", wq.scale.len())));
    }
    let mut rq = requant(op, in_scale, &wq.scale, activation)?;
    // Padding is that of the forward convolution mapping the output onto the input.
    let same = padding == crate::ops::Padding::Same;
    let pad = |o: usize, k: usize, s: usize, i: usize| if same { (((i.max(1) - 1) * s + k).saturating_sub(o)) / 2 } else { 0 };
    let g = ferrite_kernels::conv::Window {
        batch: x.shape[0],
        in_h: out_h,
        in_w: out_w,
        out_h: x.shape[1],
        out_w: x.shape[2],
        k_h: kh,
        k_w: kw,
        stride_h: stride.0,
        stride_w: stride.1,
        dil_h: 1,
        dil_w: 1,
        pad_top: pad(out_h, kh, stride.0, x.shape[1]),
        pad_left: pad(out_w, kw, stride.1, x.shape[2]),
    };
    let n_out = op.checked_elements(&[g.batch, out_h, out_w, oc], 8)?;
    if kind == IntKind::I16x8 {
        let bias = int16x8_setup_at(op, 3, in_zp, wq.zero_point[0] as i32, &rq)?;
        let acc = Mutex::new(vec![0i64; n_out]);
        return Ok(Built {
            outputs: vec![(DType::I16, vec![g.batch, out_h, out_w, oc])],
            kernel: Box::new(move |ins, outs| {
                let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
                kq::transpose_conv_acc_i16(typed(arg(ins, 2)?)?, ic, typed(arg(ins, 1)?)?, oc, &g, &mut acc);
                for (i, (o, &a)) in typed_mut::<i16>(outs[0])?.iter_mut().zip(acc.iter()).enumerate() {
                    let c = i % oc;
                    *o = kq::requant_i64(&rq, a.wrapping_add(bias.as_ref().map_or(0, |b| b[c])), c, kq::multiply_by_quantized_multiplier_i64);
                }
                Ok(())
            }),
        });
    }
    let (mut in_zp, mut w_zp) = (in_zp, wq.zero_point[0] as i32);
    let flipped = if kind == IntKind::U8 {
        in_zp -= 128;
        w_zp -= 128;
        shift_requant(&mut rq);
        Some(Unsigned::new(op, x.shape.iter().product())?)
    } else {
        if w_zp != 0 {
            return Err(op.bad("int8 TRANSPOSE_CONV weights must have zero point 0"));
        }
        None
    };
    let has_bias = op.opt_input(3).is_some();
    let acc = Mutex::new(vec![0i32; n_out]);
    Ok(Built {
        outputs: vec![(x.dtype, vec![g.batch, out_h, out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<i32>(arg(ins, 3)?)?) } else { None };
            let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
            match &flipped {
                None => kq::transpose_conv_acc_i8(typed(arg(ins, 2)?)?, ic, typed(arg(ins, 1)?)?, oc, &g, in_zp, w_zp, &mut acc),
                Some(u) => kq::transpose_conv_acc_i8(&u.input(arg(ins, 2)?), ic, &u.weights, oc, &g, in_zp, w_zp, &mut acc),
            }
            // The uint8 results flip back from the int8 domain.
            let flip = if flipped.is_some() { 0x80 } else { 0 };
            for (i, (o, &a)) in outs[0].iter_mut().zip(acc.iter()).enumerate() {
                let c = i % oc;
                *o = (rq.apply(a.wrapping_add(bias.map_or(0, |b| b[c])), c) as i8 as u8) ^ flip;
            }
            Ok(())
        }),
    })
}

/// LOGISTIC / TANH on int8 or uint8 through a 256-entry table, built the way
/// LiteRT's optimized kernels build theirs (float function, round, clamp).
pub(crate) fn table(op: &OpContext<'_>, f: fn(f32) -> f32) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::I8 | DType::U8) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("table kernel for {}", dtype.name())));
    }
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let (lo, hi) = int_range(dtype);
    let inverse = 1.0 / out_scale;
    let mut lut = [0u8; 256];
    for (byte, slot) in lut.iter_mut().enumerate() {
        let v = if dtype == DType::I8 { i32::from(byte as u8 as i8) } else { byte as i32 };
        let y = f(in_scale * (v - in_zp) as f32);
        *slot = (((y * inverse).round() as i32 + out_zp).clamp(lo, hi)) as u8;
    }
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            for (o, &i) in outs[0].iter_mut().zip(arg(ins, 0)?) {
                *o = lut[usize::from(i)];
            }
            Ok(())
        }),
    })
}

/// LOGISTIC / TANH on int16 (zero points 0, output scale 2^-15) as LiteRT runs
/// them: the 16-bit fixed-point functions when the input scale is 2^-12 (or 2^-11
/// for TANH), otherwise the interpolated sigmoid table after rescaling the input.
pub(crate) fn logistic_tanh_i16(op: &OpContext<'_>, tanh: bool) -> Result<Built> {
    let x = op.input(0)?;
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if in_zp != 0 || out_zp != 0 {
        return Err(op.bad("int16 LOGISTIC / TANH require zero points of 0"));
    }
    if (f64::from(out_scale).log2() + 15.0).abs() >= 1e-3 {
        return Err(op.bad(format!("int16 LOGISTIC / TANH require an output scale of 2^-15, not {out_scale}")));
    }
    let f: Box<dyn Fn(i16) -> i16 + Send + Sync> = match (f16::input_rescale(f64::from(in_scale), tanh), tanh) {
        (f16::InputRescale::Table(m, s), false) => Box::new(move |v| f16::logistic_table(v, m, s)),
        (f16::InputRescale::Table(m, s), true) => Box::new(move |v| f16::tanh_table(v, m, s)),
        (f16::InputRescale::FixedPoint(_), false) => Box::new(f16::logistic_q3),
        (f16::InputRescale::FixedPoint(shift), true) => Box::new(move |v| f16::tanh_q3(f16::saturating_shl(v, shift))),
    };
    Ok(Built {
        outputs: vec![(DType::I16, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            for (o, &v) in typed_mut::<i16>(outs[0])?.iter_mut().zip(typed::<i16>(arg(ins, 0)?)?) {
                *o = f(v);
            }
            Ok(())
        }),
    })
}

/// QUANTIZE: float to integer (round half away from zero), or integer to integer
/// through a fixed-point multiplier.
pub(crate) fn quantize(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let to = op.outputs[0].dtype;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if !matches!(to, DType::I8 | DType::U8 | DType::I16) {
        return Err(op.unsupported(format!("QUANTIZE to {}", to.name())));
    }
    let (lo, hi) = int_range(to);
    let from = x.dtype;
    let store = move |o: &mut [u8], i: usize, v: i32| store_int(to, o, i, v);
    let n: usize = x.shape.iter().product();
    let kernel: crate::backend::KernelFn = match from {
        DType::F32 => Box::new(move |ins, outs| {
            let x = typed::<f32>(arg(ins, 0)?)?;
            match to {
                DType::I8 => kq::quantize_f32_i8(x, out_scale, out_zp, typed_mut(outs[0])?),
                DType::U8 => kq::quantize_f32_u8(x, out_scale, out_zp, outs[0]),
                _ => kq::quantize_f32_i16(x, out_scale, out_zp, typed_mut(outs[0])?),
            }
            Ok(())
        }),
        DType::I8 | DType::U8 | DType::I16 => {
            let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
            let (m, s) = kq::quantize_multiplier(f64::from(in_scale) / f64::from(out_scale));
            Box::new(move |ins, outs| {
                let src = arg(ins, 0)?;
                for i in 0..n {
                    let v = load_int(from, src, i);
                    store(outs[0], i, (kq::multiply_by_quantized_multiplier(v - in_zp, m, s) + out_zp).clamp(lo, hi));
                }
                Ok(())
            })
        }
        t => return Err(op.unsupported(format!("QUANTIZE from {}", t.name()))),
    };
    Ok(Built { outputs: vec![(to, x.shape.clone())], kernel })
}

/// ADD / SUB / MUL (int8, uint8, int16) and PRELU (int8, uint8, and int16 with an
/// int8 alpha) with broadcasting, as LiteRT's builtin kernels: ADD and SUB shift
/// both inputs left (20 bits, 15 for int16), rescale them to twice the larger input
/// scale, combine, and rescale to the output; MUL rescales the product; PRELU
/// rescales x or x * alpha.
pub(crate) fn binary(op: &OpContext<'_>, code: ferrite_format::schema::BuiltinOperator) -> Result<Built> {
    use ferrite_format::schema::BuiltinOperator as B;
    let (a, b) = (op.input(0)?, op.input(1)?);
    let dtype = a.dtype;
    // LiteRT's int16 PRELU reads its alpha as int8 (the int16x8 scheme).
    let alpha16x8 = code == B::PRELU && dtype == DType::I16;
    let b_type = if alpha16x8 { DType::I8 } else { dtype };
    if !matches!(dtype, DType::I8 | DType::U8 | DType::I16) || b.dtype != b_type || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized {} of {} and {}", op.op.code.name(), a.dtype.name(), b.dtype.name())));
    }
    let (s1, z1) = per_tensor(op, a.quant, "input 0")?;
    let (s2, z2) = per_tensor(op, b.quant, "input 1")?;
    let (so, zo) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let (act, pot_scale_int16) = match op.op.params {
        OpParams::Binary { activation, pot_scale_int16 } => (activation, pot_scale_int16),
        _ => (Activation::None, false),
    };
    let (lo, hi) = activation_range(act, so, zo, dtype);
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let out = ferrite_kernels::elementwise::broadcast_shape(&sa, &sb).ok_or_else(|| op.bad(format!("shapes {sa:?} and {sb:?} do not broadcast")))?;
    let os = out.clone();
    let pot_exponent = |s: f32| {
        let l = f64::from(s).log2();
        ((l - l.round()).abs() < 1e-3).then_some(l.round() as i32)
    };
    let pot = (pot_exponent(s1), pot_exponent(s2), pot_exponent(so));
    // Set for the general ADD / SUB: equal shapes then take a vectorized loop.
    let mut add_sub = None;
    let f: Box<dyn Fn(i32, i32) -> i32 + Send + Sync> = match (code, pot) {
        (B::ADD | B::SUB, (Some(l1), Some(l2), Some(lo_exp))) if dtype == DType::I16 && pot_scale_int16 => {
            // LiteRT's shift-only int16 path: every scale a power of two, one input
            // already at the output's scale, the other shifted right onto it
            // (rounding), then a saturating add or subtract in Q0.15.
            if z1 != 0 || z2 != 0 || zo != 0 {
                return Err(op.bad("int16 ADD / SUB require zero points of 0"));
            }
            let (e1, e2) = (l1 - lo_exp, l2 - lo_exp);
            if (e1 != 0 && e2 != 0) || e1 > 0 || e2 > 0 {
                return Err(op.bad(format!("int16 {} with power-of-two scales needs one input at the output's scale and the other finer", op.op.code.name())));
            }
            let sign = if code == B::SUB { -1 } else { 1 };
            Box::new(move |x, y| {
                let (x, y) = (i32::from(f16::rdpot(x as i16, -e1)), i32::from(f16::rdpot(y as i16, -e2)));
                (x + sign * y).clamp(-32768, 32767).clamp(lo, hi)
            })
        }
        (B::ADD | B::SUB, _) => {
            // LiteRT's general int16 path (scales not all powers of two) keeps 15 bits
            // of headroom instead of 20 so the shifted int16 values fit in int32.
            let left_shift = if dtype == DType::I16 { 15 } else { 20 };
            let twice_max = 2.0 * f64::from(s1.max(s2));
            let p = kq::AddSub {
                zp: (z1, z2),
                out_zp: zo,
                left_shift,
                scale: (kq::Scale::new(f64::from(s1) / twice_max), kq::Scale::new(f64::from(s2) / twice_max)),
                out_scale: kq::Scale::new(twice_max / (f64::from(1u32 << left_shift) * f64::from(so))),
                sign: if code == B::SUB { -1 } else { 1 },
                min: lo,
                max: hi,
            };
            add_sub = Some(p);
            Box::new(move |x, y| p.apply(x, y))
        }
        (B::PRELU, _) => {
            // x >= 0: x rescaled to the output; else x * alpha rescaled. Multipliers
            // in single precision, as LiteRT's prepare forms them.
            let (m1, e1) = kq::quantize_multiplier(f64::from(s1 / so));
            let (m2, e2) = kq::quantize_multiplier(f64::from(s1 * s2 / so));
            Box::new(move |x, a| {
                let x = x - z1;
                let v = if x >= 0 { kq::multiply_by_quantized_multiplier(x, m1, e1) } else { kq::multiply_by_quantized_multiplier(x * (a - z2), m2, e2) };
                (v + zo).clamp(lo, hi)
            })
        }
        (B::MUL, _) => {
            // LiteRT forms this multiplier in single precision (float scales multiplied
            // and divided as floats); the double-precision value differs in its last
            // bits and, on near-ties, in the output's last bit.
            let (m, e) = kq::quantize_multiplier(f64::from(s1 * s2 / so));
            Box::new(move |x, y| (kq::multiply_by_quantized_multiplier((x - z1) * (y - z2), m, e) + zo).clamp(lo, hi))
        }
        _ => return Err(op.unsupported(format!("quantized {}", op.op.code.name()))),
    };
    let signed = dtype == DType::I8;
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            if let Some(p) = add_sub.as_ref().filter(|_| sa == sb) {
                match dtype {
                    DType::I8 => kq::add_sub_i8(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, p, typed_mut(outs[0])?),
                    DType::U8 => kq::add_sub_u8(arg(ins, 0)?, arg(ins, 1)?, p, outs[0]),
                    _ => kq::add_sub_i16(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, p, typed_mut(outs[0])?),
                }
                return Ok(());
            }
            if alpha16x8 {
                let (x, y) = (typed::<i16>(arg(ins, 0)?)?, typed::<i8>(arg(ins, 1)?)?);
                ferrite_kernels::elementwise::binary(x, &sa, y, &sb, typed_mut::<i16>(outs[0])?, &os, |x, y| f(i32::from(x), i32::from(y)) as i16);
                return Ok(());
            }
            if dtype == DType::I16 {
                let (x, y) = (typed::<i16>(arg(ins, 0)?)?, typed::<i16>(arg(ins, 1)?)?);
                ferrite_kernels::elementwise::binary(x, &sa, y, &sb, typed_mut::<i16>(outs[0])?, &os, |x, y| f(i32::from(x), i32::from(y)) as i16);
                return Ok(());
            }
            let widen = |v: u8| if signed { i32::from(v as i8) } else { i32::from(v) };
            ferrite_kernels::elementwise::binary(arg(ins, 0)?, &sa, arg(ins, 1)?, &sb, outs[0], &os, |x, y| f(widen(x), widen(y)) as u8);
            Ok(())
        }),
    })
}

/// Element `i` of an int8, uint8 or int16 (little-endian) buffer.
#[inline(always)]
pub(crate) fn load_int(dtype: DType, b: &[u8], i: usize) -> i32 {
    match dtype {
        DType::I8 => i32::from(b[i] as i8),
        DType::I16 => i32::from(i16::from_le_bytes([b[2 * i], b[2 * i + 1]])),
        _ => i32::from(b[i]),
    }
}

/// Stores `v` (already clamped to the type's range) as element `i`.
#[inline(always)]
pub(crate) fn store_int(dtype: DType, b: &mut [u8], i: usize, v: i32) {
    match dtype {
        DType::I16 => b[2 * i..2 * i + 2].copy_from_slice(&(v as i16).to_le_bytes()),
        _ => b[i] = v as u8,
    }
}

/// AVERAGE_POOL_2D / MAX_POOL_2D on int8, uint8 or int16: input and output share a scale;
/// the average rounds half away from zero over the positions inside the input.
pub(crate) fn pool(op: &OpContext<'_>, max: bool) -> Result<Built> {
    let OpParams::Pool2D { padding, stride, filter, activation } = op.op.params else { return Err(op.bad("missing Pool2D options")) };
    let x = op.input(0)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::I8 | DType::U8 | DType::I16) || op.outputs[0].dtype != dtype || x.shape.len() != 4 {
        return Err(op.unsupported(format!("quantized pooling of {} {:?}", dtype.name(), x.shape)));
    }
    let (so, zo) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let (lo, hi) = activation_range(activation, so, zo, dtype);
    let g = window(op, &x.shape, filter, stride, (1, 1), padding)?;
    let c = x.shape[3];
    // The per-channel accumulators are sized by the file's channel count: bounded first.
    let acc = Mutex::new(vec![0i32; op.checked_elements(&[c], 4)?]);
    Ok(Built {
        outputs: vec![(dtype, vec![g.batch, g.out_h, g.out_w, c])],
        kernel: Box::new(move |ins, outs| {
            let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
            let (input, out) = (arg(ins, 0)?, &mut *outs[0]);
            match dtype {
                DType::I8 => kpool::pool_i8(typed(input)?, c, &g, max, lo, hi, typed_mut(out)?, &mut acc),
                DType::U8 => kpool::pool_u8(input, c, &g, max, lo, hi, out, &mut acc),
                _ => kpool::pool_i16(typed(input)?, c, &g, max, lo, hi, typed_mut(out)?, &mut acc),
            }
            Ok(())
        }),
    })
}

/// SOFTMAX on int8 / uint8 as LiteRT's optimized kernel: a float table of
/// `exp(-input_scale * beta * v)` indexed from each row's maximum, a float sum,
/// and each output rounded half away from zero.
pub(crate) fn softmax(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if dtype == DType::I16 {
        return softmax_i16(op);
    }
    if !matches!(dtype, DType::I8 | DType::U8) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized SOFTMAX of {} to {}", dtype.name(), op.outputs[0].dtype.name())));
    }
    let beta = match op.op.params {
        OpParams::Softmax { beta } => beta,
        _ => 1.0,
    };
    let (in_scale, _) = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let n = *x.shape.last().ok_or_else(|| op.bad("softmax of a scalar"))?;
    let scale = -in_scale * beta;
    let mut table = [0.0f32; 256];
    for v in 0..256usize {
        table[255 - v] = (scale * v as f32).exp();
    }
    let (lo, hi) = int_range(dtype);
    let signed = dtype == DType::I8;
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            if n == 0 {
                return Ok(());
            }
            let widen = |v: u8| if signed { i32::from(v as i8) } else { i32::from(v) };
            for (row, orow) in arg(ins, 0)?.chunks_exact(n).zip(outs[0].chunks_exact_mut(n)) {
                let max = row.iter().map(|&v| widen(v)).max().unwrap_or(0);
                let at = |v: u8| table[(255 - max + widen(v)) as usize];
                let sum: f32 = row.iter().fold(0.0f32, |s, &v| s + at(v));
                let inv = 1.0 / (sum * out_scale);
                for (o, &v) in orow.iter_mut().zip(row) {
                    *o = ((at(v) * inv).round() as i32 + out_zp).clamp(lo, hi) as u8;
                }
            }
            Ok(())
        }),
    })
}

/// A 513-entry Q0.15 table of `f` over [min, max] for [`lut_lookup_i16`]: each
/// entry is biased by half the error of linear interpolation at the midpoint of
/// its step, as LiteRT builds its int16 tables.
fn lut_i16(f: impl Fn(f64) -> f64, min: f64, max: f64) -> [i16; 513] {
    let step = (max - min) / 512.0;
    let mut lut = [0i16; 513];
    for (i, slot) in lut.iter_mut().enumerate().take(512) {
        let at = min + i as f64 * step;
        let sample = (f(at) * 32768.0).round();
        let interp = ((f(min + (i + 1) as f64 * step) * 32768.0 + sample) / 2.0).round();
        let mid = (f(at + step / 2.0) * 32768.0).round();
        let bias = ((interp - mid) / 2.0).round();
        *slot = (sample - bias).clamp(-32768.0, 32767.0) as i16;
    }
    lut[512] = (f(max) * 32768.0).round().clamp(-32768.0, 32767.0) as i16;
    lut
}

/// Linear interpolation in a [`lut_i16`] table: the top 9 bits of `v` pick the
/// step, the low 7 the position inside it.
#[inline(always)]
fn lut_lookup_i16(v: i16, lut: &[i16; 513]) -> i16 {
    let index = (256 + (i32::from(v) >> 7)) as usize;
    let offset = i32::from(v) & 0x7f;
    let (base, slope) = (i32::from(lut[index]), i32::from(lut[index + 1]) - i32::from(lut[index]));
    (base + ((slope * offset + 64) >> 7)) as i16
}

/// SOFTMAX on int16 (zero points 0, output scale 1/32768) as LiteRT: differences
/// from the row maximum rescaled onto [-10, 0] and looked up in an exp table, the
/// sum's reciprocal from a 1/(1+x) table, products rounded back to Q0.15.
fn softmax_i16(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    if op.outputs[0].dtype != DType::I16 {
        return Err(op.unsupported(format!("quantized SOFTMAX of int16 to {}", op.outputs[0].dtype.name())));
    }
    let beta = match op.op.params {
        OpParams::Softmax { beta } => beta,
        _ => 1.0,
    };
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let (_, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if in_zp != 0 || out_zp != 0 {
        return Err(op.bad("int16 SOFTMAX requires zero points of 0"));
    }
    // The product is taken in single precision, as LiteRT's prepare does.
    let (mult, shift) = kq::quantize_multiplier(f64::from(in_scale * beta) / (10.0 / 65535.0));
    let exp_lut = lut_i16(f64::exp, -10.0, 0.0);
    let recip_lut = lut_i16(|v| 1.0 / (1.0 + v), 0.0, 1.0);
    let n = *x.shape.last().ok_or_else(|| op.bad("softmax of a scalar"))?;
    Ok(Built {
        outputs: vec![(DType::I16, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            if n == 0 {
                return Ok(());
            }
            let (input, out) = (typed::<i16>(arg(ins, 0)?)?, typed_mut::<i16>(outs[0])?);
            for (row, orow) in input.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
                let max = i32::from(row.iter().copied().max().unwrap_or(0));
                let mut sum = 0i32;
                for (o, &v) in orow.iter_mut().zip(row) {
                    let scaled = kq::multiply_by_quantized_multiplier(i32::from(v) - max, mult, shift);
                    *o = lut_lookup_i16((scaled + 32767).clamp(-32768, 32767) as i16, &exp_lut);
                    sum = sum.wrapping_add(i32::from(*o));
                }
                // The row maximum contributes exp(0) ~ 32767, so a real sum has 2 to 17
                // leading zeros; the clamp only keeps hostile shapes from breaking shifts.
                let headroom_plus_one = (sum as u32).leading_zeros().clamp(1, 30);
                let shifted = ((i64::from(sum) << (headroom_plus_one - 1)) + (1 << 13)) >> 14;
                let sym = (shifted - ((1 << 15) + (1 << 16))).clamp(-32768, 32767) as i16;
                let recip = i64::from(lut_lookup_i16(sym, &recip_lut));
                let right_shift = 31 - headroom_plus_one;
                for o in orow.iter_mut() {
                    let r = (i64::from(*o) * recip + (1i64 << (right_shift - 1))) >> right_shift;
                    *o = r.clamp(0, 32767) as i16;
                }
            }
            Ok(())
        }),
    })
}

/// Rounds a 31-bit fixed-point multiplier to 15 bits, saturating at the top.
fn multiplier_to_i16(m: i32) -> i16 {
    if m >= i32::MAX - (1 << 15) {
        i16::MAX
    } else {
        ((m + (1 << 15)) >> 16) as i16
    }
}

/// HARD_SWISH on int8 / uint8 with LiteRT's 16-bit fixed-point scheme: the input
/// moved to a scale 128 times finer, a "reluish" factor relu6(x + 3) / 6 in Q0.15,
/// their product rescaled to the output.
pub(crate) fn hard_swish(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::I8 | DType::U8) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized HARD_SWISH of {}", dtype.name())));
    }
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    // Single-precision scales, as LiteRT's prepare computes them.
    let hires = in_scale / 128.0;
    let (om, oe) = kq::quantize_multiplier(f64::from(hires / out_scale));
    if oe > 0 {
        return Err(op.unsupported("HARD_SWISH with an output scale below input scale / 128"));
    }
    let (rm, re) = kq::quantize_multiplier(f64::from(hires / (3.0 / 32768.0)));
    let (om, rm) = (multiplier_to_i16(om), multiplier_to_i16(rm));
    let (lo, hi) = int_range(dtype);
    let signed = dtype == DType::I8;
    let f = move |v: i32| -> u8 {
        let hires_v = ((v - in_zp) * 128) as i16;
        let pre_out = f16::srdhm(hires_v, om);
        let mut relu = hires_v;
        if re > 0 {
            relu = f16::saturating_shl(relu, re - 1);
        }
        relu = f16::srdhm(relu, rm);
        if re > 0 {
            relu = f16::saturating_shl(relu, 1);
        }
        if re < 0 {
            relu = f16::rdpot(relu, -re);
        }
        let relu = ((i32::from(relu) + (1 << 15)) >> 1) as i16;
        let out = i32::from(f16::rdpot(f16::sdhm(relu, pre_out), -oe)) + out_zp;
        out.clamp(lo, hi) as u8
    };
    // A function of one byte: tabulated once.
    let mut lut = [0u8; 256];
    for (b, slot) in lut.iter_mut().enumerate() {
        *slot = f(if signed { i32::from(b as u8 as i8) } else { b as i32 });
    }
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            for (o, &i) in outs[0].iter_mut().zip(arg(ins, 0)?) {
                *o = lut[usize::from(i)];
            }
            Ok(())
        }),
    })
}

/// RELU, RELU6, RELU_N1_TO_1 and LEAKY_RELU on int8 / uint8 / int16: (x - in_zp) rescaled
/// to the output scale (by `alpha` below zero for LEAKY_RELU), clamped to the
/// activation's quantized range.
pub(crate) fn relu_like(op: &OpContext<'_>, code: ferrite_format::schema::BuiltinOperator) -> Result<Built> {
    use ferrite_format::schema::BuiltinOperator as B;
    let x = op.input(0)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::I8 | DType::U8 | DType::I16) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized {} of {}", op.op.code.name(), dtype.name())));
    }
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let act = match code {
        B::RELU => Activation::Relu,
        B::RELU6 => Activation::Relu6,
        B::RELU_N1_TO_1 => Activation::ReluN1To1,
        _ => Activation::None,
    };
    let (lo, hi) = activation_range(act, out_scale, out_zp, dtype);
    let (m_id, s_id) = kq::quantize_multiplier(f64::from(in_scale) / f64::from(out_scale));
    let alpha = match op.op.params {
        OpParams::LeakyRelu { alpha } if code == B::LEAKY_RELU => Some(alpha),
        _ => None,
    };
    // The negative side's multiplier may be negative; LiteRT folds the sign into it.
    let (m_a, s_a) = match alpha {
        Some(a) => {
            let real = f64::from(in_scale) * f64::from(a) / f64::from(out_scale);
            let (m, s) = kq::quantize_multiplier(real.abs());
            (if real < 0.0 { -m } else { m }, s)
        }
        None => (m_id, s_id),
    };
    let leaky = alpha.is_some();
    let n: usize = x.shape.iter().product();
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let input = arg(ins, 0)?;
            for i in 0..n {
                let d = load_int(dtype, input, i) - in_zp;
                let (m, s) = if leaky && d < 0 { (m_a, s_a) } else { (m_id, s_id) };
                store_int(dtype, outs[0], i, kq::multiply_by_quantized_multiplier(d, m, s).saturating_add(out_zp).clamp(lo, hi));
            }
            Ok(())
        }),
    })
}

/// Hybrid (dynamic-range) convolution and fully-connected layers: float input and
/// output, int8 weights. Each batch row of the input is quantized symmetrically at
/// run time, multiplied in integers, and rescaled by `row scale x weight scale`.
pub(crate) fn hybrid(op: &OpContext<'_>, code: ferrite_format::schema::BuiltinOperator) -> Result<Built> {
    use ferrite_format::schema::BuiltinOperator as B;
    let (x, w) = (op.input(0)?, op.input(1)?);
    if x.dtype != DType::F32 || w.dtype != DType::I8 || op.outputs[0].dtype != DType::F32 || op.opt_input(2).is_some_and(|b| b.dtype != DType::F32) {
        return Err(op.unsupported("hybrid kernels take float32 input, int8 weights and float32 bias"));
    }
    let wq = w.quant.ok_or_else(|| op.bad("weights have no quantization parameters"))?;
    if wq.zero_point.iter().any(|&z| z != 0) {
        return Err(op.unsupported("hybrid weights with a nonzero zero point"));
    }
    let w_scales = wq.scale.clone();
    let has_bias = op.opt_input(2).is_some();
    let (act, batch, out_shape, q): (Activation, usize, Vec<usize>, Option<QConv>) = match (code, &op.op.params) {
        (B::FULLY_CONNECTED, OpParams::FullyConnected { activation, keep_num_dims, .. }) => {
            // The kernel reads out_n rows of in_n weights.
            if w.shape.len() != 2 {
                return Err(op.bad(format!("weights must be 2-D, got {:?}", w.shape)));
            }
            let in_n = w.shape[1];
            let total = op.checked_elements(&x.shape, 4)?;
            if in_n == 0 || !total.is_multiple_of(in_n) {
                return Err(op.bad(format!("input {:?} is not a multiple of {in_n}", x.shape)));
            }
            let out_n = w.shape[0];
            // keep_num_dims keeps the input's leading dims: its last dim must be the rows' length.
            if *keep_num_dims && x.shape.last().is_some_and(|&l| l != in_n) {
                return Err(op.bad(format!("keep_num_dims needs the input's last dim {:?} to be {in_n}", x.shape)));
            }
            let shape = if *keep_num_dims {
                let mut s = x.shape.clone();
                if let Some(l) = s.last_mut() {
                    *l = out_n;
                } else {
                    // A rank-0 input is one row: the output is that row's out_n values.
                    s = vec![out_n];
                }
                s
            } else {
                vec![total / in_n, out_n]
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
            if x.shape.len() != 4 || w.shape.len() != 4 {
                return Err(op.bad("input and filter must be 4-D"));
            }
            let in_c = x.shape[3];
            let out_c = if depthwise { w.shape[3] } else { w.shape[0] };
            if (!depthwise && w.shape[3] != in_c) || (depthwise && (w.shape[0] != 1 || in_c == 0 || out_c % in_c != 0)) {
                return Err(op.bad(format!("filter {:?} does not match input {:?}", w.shape, x.shape)));
            }
            let g = window(op, &x.shape, (w.shape[1], w.shape[2]), stride, dilation, padding)?;
            let rq = Requant { multiplier: vec![], shift: vec![], out_zp: 0, min: 0, max: 0 };
            let q = QConv { g, in_c, out_c, depth_multiplier: if depthwise { out_c / in_c } else { 0 }, in_zp: 0, w_zp: 0, rq };
            (act, g.batch, vec![g.batch, g.out_h, g.out_w, out_c], Some(q))
        }
        _ => return Err(op.unsupported("hybrid op")),
    };
    let clamp = super::clamp_of(op, act)?;
    let out_c = *out_shape.last().unwrap_or(&1);
    // One float bias per output channel, as the kernel reads it.
    if let Some(b) = op.opt_input(2).filter(|b| b.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(out_c)) {
        return Err(op.bad(format!("bias {:?} does not have one value per output channel ({out_c})", b.shape)));
    }
    let out_len = op.checked_elements(&out_shape, 4)?;
    if w_scales.len() != 1 && w_scales.len() != out_c {
        return Err(op.bad(format!("{} weight scales for {out_c} channels", w_scales.len())));
    }
    let in_len = op.checked_elements(&x.shape, 4)?;
    // LiteRT quantizes each batch asymmetrically for per-channel hybrid convolution
    // (and depthwise), and for fully-connected when its option asks; symmetrically
    // otherwise.
    let asymmetric = match op.op.params {
        OpParams::FullyConnected { asymmetric_quantize_inputs, .. } => asymmetric_quantize_inputs,
        _ => code == B::DEPTHWISE_CONV_2D || (code == B::CONV_2D && w_scales.len() > 1),
    };
    // Weight row sums take the input zero points' share out of fully-connected sums.
    let row_sums: Vec<i32> = match (&q, w.value) {
        (None, Some(bytes)) if asymmetric => {
            let in_n = w.shape.get(1).copied().unwrap_or(0);
            bytes.chunks_exact(in_n.max(1)).map(|r| r.iter().map(|&v| i32::from(v as i8)).sum()).collect()
        }
        (None, None) if asymmetric => return Err(op.unsupported("asymmetric hybrid FULLY_CONNECTED with weights computed at run time")),
        _ => vec![],
    };
    // Run-time scratch, sized once here: quantized input, accumulators, row scales,
    // row zero points.
    let scratch = Mutex::new((vec![0i8; in_len], vec![0i32; out_len], vec![0.0f32; batch], vec![0i32; batch]));
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let (input, weights) = (typed::<f32>(arg(ins, 0)?)?, typed::<i8>(arg(ins, 1)?)?);
            let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
            let out = typed_mut::<f32>(outs[0])?;
            let mut guard = scratch.lock().unwrap_or_else(|e| e.into_inner());
            let (qx, acc, row_scale, row_zp) = &mut *guard;
            if batch == 0 {
                // An empty batch has no rows (and no row zero points) to work on.
                return Ok(());
            }
            let row = in_len / batch.max(1);
            for (b, (sf, zp)) in row_scale.iter_mut().zip(row_zp.iter_mut()).enumerate() {
                let (src, dst) = (&input[b * row..(b + 1) * row], &mut qx[b * row..(b + 1) * row]);
                if asymmetric {
                    (*sf, *zp) = kq::asymmetric_quantize(src, dst);
                } else {
                    *sf = kq::symmetric_quantize(src, dst);
                }
            }
            match &q {
                Some(q) => {
                    // One input zero point for the whole convolution, as LiteRT's kernel takes.
                    if row_zp.iter().any(|&z| z != row_zp[0]) {
                        return Err(super::runtime("hybrid convolution over batches with different input zero points"));
                    }
                    let q = QConv { in_zp: row_zp[0], ..q.clone() };
                    kq::conv_acc_i8(qx, weights, &q, acc)
                }
                None => {
                    let in_n = row;
                    for b in 0..batch {
                        for o in 0..out_c {
                            let wr = &weights[o * in_n..(o + 1) * in_n];
                            let dot: i32 = qx[b * in_n..(b + 1) * in_n].iter().zip(wr).map(|(&a, &c)| i32::from(a) * i32::from(c)).sum();
                            acc[b * out_c + o] = dot - row_sums.get(o).map_or(0, |&s| s * row_zp[b]);
                        }
                    }
                }
            }
            let per_batch = out_len / batch.max(1);
            for (i, (o, &a)) in out.iter_mut().zip(acc.iter()).enumerate() {
                let c = i % out_c;
                let ws = w_scales[if w_scales.len() == 1 { 0 } else { c }];
                let scale = row_scale[i / per_batch] * ws;
                *o = clamp.apply(bias.map_or(0.0, |b| b[c]) + a as f32 * scale);
            }
            Ok(())
        }),
    })
}

/// Run-time scratch of a hybrid BATCH_MATMUL, sized at prepare.
struct HybridMatMulScratch {
    /// Quantized rows of every left matrix.
    qa: Vec<i8>,
    /// Scale and zero point of each quantized row.
    row_scale: Vec<f32>,
    row_zp: Vec<i32>,
    /// Column sums of every right matrix.
    col_sum: Vec<i32>,
    /// One left row gathered contiguously (for a transposed left operand).
    row: Vec<f32>,
}

/// Hybrid BATCH_MATMUL (float left operand, int8 right operand) as LiteRT computes
/// it: each row of the left operand quantized to int8 (symmetrically, or with its
/// own zero point when the op asks), integer dot products, the zero point's share
/// removed through the right operand's column sums, and the sum rescaled by the row
/// scale times the weight scale (per tensor or per output column).
pub(crate) fn batch_matmul_hybrid(
    op: &OpContext<'_>,
    (m, k, n): (usize, usize, usize),
    (adj_x, adj_y): (bool, bool),
    ia: Vec<usize>,
    ib: Vec<usize>,
    out_shape: Vec<usize>,
) -> Result<Built> {
    let OpParams::BatchMatMul { asymmetric_quantize_inputs: asymmetric, .. } = op.op.params else {
        return Err(op.bad("missing BatchMatMul options"));
    };
    if op.outputs[0].dtype != DType::F32 {
        return Err(op.unsupported("hybrid BATCH_MATMUL with a non-float output"));
    }
    let w = op.input(1)?;
    let wq = w.quant.ok_or_else(|| op.bad("int8 operand has no quantization parameters"))?;
    if wq.zero_point.iter().any(|&z| z != 0) {
        return Err(op.unsupported("hybrid BATCH_MATMUL weights with a nonzero zero point"));
    }
    if wq.scale.len() != 1 && wq.scale.len() != n {
        return Err(op.bad(format!("{} weight scales for {n} output columns", wq.scale.len())));
    }
    let w_scales = wq.scale.clone();
    let (na, nb) = (ia.iter().max().map_or(0, |&v| v + 1), ib.iter().max().map_or(0, |&v| v + 1));
    let scratch = Mutex::new(HybridMatMulScratch {
        qa: vec![0; op.checked_elements(&[na, m, k], 1)?],
        row_scale: vec![0.0; na * m],
        row_zp: vec![0; na * m],
        col_sum: vec![0; nb * n],
        row: vec![0.0; k],
    });
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let (a, b) = (typed::<f32>(arg(ins, 0)?)?, typed::<i8>(arg(ins, 1)?)?);
            let out = typed_mut::<f32>(outs[0])?;
            let mut guard = scratch.lock().unwrap_or_else(|e| e.into_inner());
            let s = &mut *guard;
            for r in 0..na * m {
                let (pa, i) = (r / m, r % m);
                let src = &a[pa * m * k..][..m * k];
                let row: &[f32] = if adj_x {
                    for (kk, v) in s.row.iter_mut().enumerate() {
                        *v = src[kk * m + i];
                    }
                    &s.row
                } else {
                    &src[i * k..][..k]
                };
                let dst = &mut s.qa[r * k..][..k];
                if asymmetric {
                    (s.row_scale[r], s.row_zp[r]) = kq::asymmetric_quantize(row, dst);
                } else {
                    s.row_scale[r] = kq::symmetric_quantize(row, dst);
                }
            }
            let at = |bm: &[i8], kk: usize, j: usize| i32::from(bm[if adj_y { j * k + kk } else { kk * n + j }]);
            for pb in 0..nb {
                let bm = &b[pb * k * n..][..k * n];
                for j in 0..n {
                    s.col_sum[pb * n + j] = (0..k).map(|kk| at(bm, kk, j)).sum();
                }
            }
            for (p, (&pa, &pb)) in ia.iter().zip(&ib).enumerate() {
                let bm = &b[pb * k * n..][..k * n];
                for i in 0..m {
                    let r = pa * m + i;
                    let qa = &s.qa[r * k..][..k];
                    for j in 0..n {
                        let dot: i32 = qa.iter().enumerate().map(|(kk, &v)| i32::from(v) * at(bm, kk, j)).sum();
                        let total = dot - s.row_zp[r] * s.col_sum[pb * n + j];
                        let ws = w_scales[if w_scales.len() == 1 { 0 } else { j }];
                        out[(p * m + i) * n + j] = s.row_scale[r] * ws * total as f32;
                    }
                }
            }
            Ok(())
        }),
    })
}
