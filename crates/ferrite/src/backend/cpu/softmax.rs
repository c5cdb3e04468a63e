//! SOFTMAX and LOG_SOFTMAX: float, int8/uint8 (LiteRT's float tables), int16 (its
//! exp and reciprocal lookup tables).

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::quant::{self as kq};
use ferrite_kernels::softmax as ksoftmax;

use super::quant::*;
use super::require_f32;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The softmax family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::SOFTMAX if op.is_int() => softmax_int(op),
        B::SOFTMAX | B::LOG_SOFTMAX => softmax(op, code == B::LOG_SOFTMAX),
        _ => return None,
    })
}

pub(crate) fn softmax(op: &OpContext<'_>, log: bool) -> Result<Built> {
    require_f32(op, &[0])?;
    let beta = match op.op.params {
        OpParams::Softmax { beta } => beta,
        _ => 1.0,
    };
    let s = op.input(0)?.shape.clone();
    let n = *s.last().ok_or_else(|| op.bad("softmax of a scalar"))?;
    Ok(Built {
        outputs: vec![(DType::F32, s)],
        kernel: Box::new(move |ins, outs| {
            if n == 0 {
                return Ok(());
            }
            if log {
                ksoftmax::log_softmax(typed(arg(ins, 0)?)?, n, typed_mut(outs[0])?)
            } else {
                ksoftmax::softmax(typed(arg(ins, 0)?)?, n, beta, typed_mut(outs[0])?)
            }
            Ok(())
        }),
    })
}

/// SOFTMAX on int8 / uint8 as LiteRT's optimized kernel: a float table of
/// `exp(-input_scale * beta * v)` indexed from each row's maximum, a float sum,
/// and each output rounded half away from zero.
pub(crate) fn softmax_int(op: &OpContext<'_>) -> Result<Built> {
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
