//! Hybrid TRANSPOSE_CONV: float32 input and output, a constant int8 filter (OHWI,
//! zero points 0, one scale or one per output channel), an optional float32 bias.
//! LiteRT's kernel (the same for its reference and optimized registrations)
//! quantizes each batch of the input asymmetrically and sums the rescaled
//! products in float; `ferrite_kernels::hybrid::transpose_conv_hybrid` does the same.

use std::sync::Mutex;

use ferrite_kernels::conv::Window;
use ferrite_kernels::hybrid::{self, TransposeConvHybridScratch};

use super::clamp_of;
use super::conv::{transpose_geometry, TransposeGeometry};
use crate::backend::{arg, typed, typed_mut, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{OpParams, Padding};

/// True for a TRANSPOSE_CONV of float32 input with int8 weights.
pub(super) fn is_hybrid(op: &OpContext<'_>) -> bool {
    op.opt_input(2).is_some_and(|d| d.dtype == DType::F32) && op.opt_input(1).is_some_and(|d| d.dtype == DType::I8)
}

/// Padding before the first output row (column) as LiteRT derives it: from the
/// output size, through the forward convolution of `padding` that maps the output
/// onto an input, whatever the input's actual size.
pub(crate) fn litert_pad(padding: Padding, out: usize, k: usize, s: usize) -> usize {
    let (out, k, s) = (out as i64, k as i64, s as i64);
    let forward = if padding == Padding::Same { (out + s - 1) / s } else { (out - k + s) / s };
    (((forward - 1) * s + k - out) / 2).max(0) as usize
}

pub(super) fn build(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    let (w, x) = (op.input(1)?, op.input(2)?);
    if op.outputs.first().is_some_and(|o| o.dtype != DType::F32) || op.opt_input(3).is_some_and(|b| b.dtype != DType::F32) {
        return Err(op.unsupported("hybrid TRANSPOSE_CONV takes float32 input, output and bias with int8 weights"));
    }
    let TransposeGeometry { oc, kh, kw, ic, out_h, out_w } = transpose_geometry(op, stride)?;
    let wq = w.quant.ok_or_else(|| op.bad("filter has no quantization parameters"))?;
    if wq.zero_point.iter().any(|&z| z != 0) {
        return Err(op.bad("hybrid TRANSPOSE_CONV weights must have zero point 0"));
    }
    // One scale for the tensor stands for every channel, as LiteRT expands it.
    let w_scales: Vec<f32> = match wq.scale.len() {
        1 => vec![wq.scale[0]; oc],
        n if n == oc && wq.axis == 0 => wq.scale.clone(),
        n => return Err(op.bad(format!("{n} filter scales on axis {} for {oc} output channels", wq.axis))),
    };
    let clamp = clamp_of(op, activation)?;
    let g = Window {
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
        pad_top: litert_pad(padding, out_h, kh, stride.0),
        pad_left: litert_pad(padding, out_w, kw, stride.1),
    };
    op.checked_elements(&[g.batch, out_h, out_w, oc], 4)?;
    let per_batch = op.checked_elements(&[g.out_h, g.out_w, ic], 1)?;
    op.checked_elements(&[g.batch, per_batch], 1)?;
    let scratch = Mutex::new(TransposeConvHybridScratch::new(g.batch, per_batch));
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, out_h, out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let bias = match ins.get(3).copied().flatten() {
                Some(b) => Some(typed::<f32>(b)?),
                None => None,
            };
            let mut s = scratch.lock().unwrap_or_else(|e| e.into_inner());
            hybrid::transpose_conv_hybrid(typed(arg(ins, 2)?)?, ic, typed(arg(ins, 1)?)?, &w_scales, bias, oc, &g, clamp, &mut s, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}
