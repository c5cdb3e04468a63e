//! Activations and unary math: float (vectorized element-wise kernels) and the
//! integer RELU family, LEAKY_RELU, HARD_SWISH, LOGISTIC and TANH.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::elementwise::{self as kel, Unary};
use ferrite_kernels::fixed16 as f16;
use ferrite_kernels::quant::{self as kq};

use super::quant::*;
use super::require_f32;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams};

/// The activation family's builders: integer variants first, float otherwise.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::HARD_SWISH if op.is_int() => hard_swish(op),
        B::LOGISTIC | B::TANH if op.is_int() && op.outputs.first().is_some_and(|o| o.dtype == DType::I16) => logistic_tanh_i16(op, code == B::TANH),
        B::LOGISTIC if op.is_int() => table(op, ferrite_kernels::elementwise::logistic),
        B::TANH if op.is_int() => table(op, f32::tanh),
        B::RELU | B::RELU6 | B::RELU_N1_TO_1 | B::LEAKY_RELU if op.is_int() => relu_like(op, code),
        B::ABS
        | B::NEG
        | B::EXP
        | B::LOG
        | B::SQRT
        | B::RSQRT
        | B::SQUARE
        | B::TANH
        | B::LOGISTIC
        | B::RELU
        | B::RELU6
        | B::RELU_N1_TO_1
        | B::RELU_0_TO_1
        | B::HARD_SWISH
        | B::LEAKY_RELU
        | B::ELU
        | B::FLOOR
        | B::CEIL
        | B::ROUND
        | B::SIN
        | B::COS
        | B::GELU
        | B::SIGN => unary(op, code),
        _ => return None,
    })
}

pub(crate) fn unary(op: &OpContext<'_>, code: B) -> Result<Built> {
    let x = op.input(0)?;
    let shape = x.shape.clone();
    if x.dtype == DType::I32 && matches!(code, B::ABS | B::NEG | B::SQUARE | B::RELU | B::SIGN) {
        let f: fn(i32) -> i32 = match code {
            B::ABS => i32::wrapping_abs,
            B::NEG => i32::wrapping_neg,
            B::SQUARE => |v| v.wrapping_mul(v),
            B::RELU => |v| v.max(0),
            _ => i32::signum,
        };
        return Ok(Built {
            outputs: vec![(DType::I32, shape)],
            kernel: Box::new(move |ins, outs| {
                for (o, &i) in typed_mut::<i32>(outs[0])?.iter_mut().zip(typed::<i32>(arg(ins, 0)?)?) {
                    *o = f(i);
                }
                Ok(())
            }),
        });
    }
    require_f32(op, &[0])?;
    let alpha = match op.op.params {
        OpParams::LeakyRelu { alpha } => alpha,
        _ => 0.0,
    };
    let approximate = matches!(op.op.params, OpParams::Gelu { approximate: true });
    let kind = match code {
        B::ABS => Unary::Abs,
        B::NEG => Unary::Neg,
        B::EXP => Unary::Exp,
        B::LOG => Unary::Log,
        B::SQRT => Unary::Sqrt,
        B::RSQRT => Unary::Rsqrt,
        B::SQUARE => Unary::Square,
        B::TANH => Unary::Tanh,
        B::LOGISTIC => Unary::Logistic,
        B::RELU => Unary::Relu,
        B::RELU6 => Unary::Relu6,
        B::RELU_N1_TO_1 => Unary::ReluN1To1,
        B::RELU_0_TO_1 => Unary::Relu0To1,
        B::HARD_SWISH => Unary::HardSwish,
        B::LEAKY_RELU => Unary::LeakyRelu(alpha),
        B::ELU => Unary::Elu,
        B::FLOOR => Unary::Floor,
        B::CEIL => Unary::Ceil,
        B::ROUND => Unary::Round,
        B::SIN => Unary::Sin,
        B::COS => Unary::Cos,
        B::GELU => Unary::Gelu(approximate),
        B::SIGN => Unary::Sign,
        _ => return Err(op.unsupported("unary op")),
    };
    Ok(Built {
        outputs: vec![(DType::F32, shape)],
        kernel: Box::new(move |ins, outs| {
            kel::unary_f32(kind, typed::<f32>(arg(ins, 0)?)?, typed_mut::<f32>(outs[0])?);
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
pub(crate) fn relu_like(op: &OpContext<'_>, code: ferrite_format::ops::BuiltinOp) -> Result<Built> {
    use ferrite_format::ops::BuiltinOp as B;
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
