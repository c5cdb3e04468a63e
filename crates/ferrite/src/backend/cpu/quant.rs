//! Parameter helpers shared by the families' quantized builders: per-tensor
//! parameters, activation ranges and requantization from a tensor's quantization,
//! type checks, and the uint8-as-int8 scratch. The arithmetic itself is in
//! `ferrite_kernels::quant`.

use std::sync::Mutex;

use ferrite_kernels::quant::{self as kq, Requant};

use crate::backend::OpContext;
use crate::error::Result;
use crate::model::{DType, Quantization};
use crate::ops::Activation;

/// (scale, zero point) of a per-tensor quantized input or output.
pub(super) fn per_tensor(op: &OpContext<'_>, q: Option<&Quantization>, what: &str) -> Result<(f32, i32)> {
    let q = q.ok_or_else(|| op.bad(format!("{what} has no quantization parameters")))?;
    Ok((q.scale[0], q.zero_point[0] as i32))
}

/// Value range of an int8 (default), uint8 or int16 element.
pub(super) fn int_range(dtype: DType) -> (i32, i32) {
    match dtype {
        DType::U8 => (0, 255),
        DType::I16 => (-32768, 32767),
        _ => (-128, 127),
    }
}

/// The fused activation's range in the output's quantized domain, as LiteRT computes it
/// (a fused TANH or SIGN_BIT clamps nothing, as in `clamp_of`).
pub(super) fn activation_range(act: Activation, scale: f32, zp: i32, dtype: DType) -> (i32, i32) {
    kq::activation_range(super::activation_clamp(act), scale, zp, int_range(dtype))
}

/// Requantization for accumulators of `in_scale * w_scale[c]` onto the output.
pub(super) fn requant(op: &OpContext<'_>, in_scale: f32, w_scales: &[f32], act: Activation) -> Result<Requant> {
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let range = activation_range(act, out_scale, out_zp, op.outputs[0].dtype);
    Ok(Requant::per_channel(in_scale, w_scales, out_scale, out_zp, range))
}

/// The integer scheme of a convolution or fully-connected op.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum IntKind {
    /// int8 activations and weights, int32 bias.
    I8,
    /// uint8 activations and weights, int32 bias.
    U8,
    /// int16 activations, int8 weights, int64 bias, zero points 0.
    I16x8,
}

/// Checks the input, weight, bias and output types of an integer conv / FC.
pub(super) fn int_types(op: &OpContext<'_>) -> Result<IntKind> {
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
pub(super) fn int16x8_setup(op: &OpContext<'_>, in_zp: i32, w_zp: i32, rq: &Requant) -> Result<Option<Vec<i64>>> {
    int16x8_setup_at(op, 2, in_zp, w_zp, rq)
}

/// [`int16x8_setup`] with the bias at input `bias_index`.
pub(super) fn int16x8_setup_at(op: &OpContext<'_>, bias_index: usize, in_zp: i32, w_zp: i32, rq: &Requant) -> Result<Option<Vec<i64>>> {
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
pub(super) struct Unsigned {
    /// Weights flipped once at prepare.
    pub(super) weights: Vec<i8>,
    /// Input flipped each run (scratch sized at prepare).
    pub(super) input: Mutex<Vec<i8>>,
}

impl Unsigned {
    pub(super) fn new(op: &OpContext<'_>, input_len: usize) -> Result<Unsigned> {
        let w = op.input(1)?.value.ok_or_else(|| op.unsupported("uint8 weights computed at run time"))?;
        let mut weights = vec![0; w.len()];
        kq::flip_u8_to_i8(w, &mut weights);
        Ok(Unsigned { weights, input: Mutex::new(vec![0; input_len]) })
    }

    /// Flips `src` into the input scratch and returns it.
    pub(super) fn input<'a>(&'a self, src: &[u8]) -> std::sync::MutexGuard<'a, Vec<i8>> {
        let mut input = self.input.lock().unwrap_or_else(|e| e.into_inner());
        kq::flip_u8_to_i8(src, &mut input);
        input
    }
}

/// The optional bias (input 2) of an integer convolution or fully-connected layer:
/// one value per output channel, int32 (int64 for int16 activations), as the
/// kernels read it.
pub(super) fn check_int_bias(op: &OpContext<'_>, channels: usize, activations: DType) -> Result<()> {
    let Some(b) = op.opt_input(2) else { return Ok(()) };
    let want = if activations == DType::I16 { DType::I64 } else { DType::I32 };
    let n = b.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if b.dtype != want || n != Some(channels) {
        return Err(op.bad(format!("bias is {} {:?}; {channels} {} values (one per output channel) are needed", b.dtype.name(), b.shape, want.name())));
    }
    Ok(())
}
