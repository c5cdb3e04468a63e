//! Activations and unary math: float (vectorized element-wise kernels) and the
//! integer RELU family, LEAKY_RELU, HARD_SWISH, LOGISTIC, TANH, ABS, RSQRT and
//! GELU (`ferrite_kernels::qactivation`).

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::elementwise::{self as kel, IntUnary};
use ferrite_kernels::qactivation::{self as qact, AbsQ, HardSwishQ, LogisticTanh16, Lut8, ReluQ, RsqrtQ};

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
        B::ABS if op.is_int() => abs_int(op),
        B::RSQRT if op.is_int() => rsqrt_int8(op),
        B::GELU if op.is_int() => gelu_table(op),
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
        let kind = match code {
            B::ABS => IntUnary::Abs,
            B::NEG => IntUnary::Neg,
            B::SQUARE => IntUnary::Square,
            B::RELU => IntUnary::Relu,
            _ => IntUnary::Sign,
        };
        return Ok(Built {
            outputs: vec![(DType::I32, shape)],
            kernel: Box::new(move |ins, outs| {
                kel::unary_i32(kind, typed(arg(ins, 0)?)?, typed_mut(outs[0])?);
                Ok(())
            }),
        });
    }
    require_f32(op, &[0])?;
    // The float kernels (every unary function in three vector levels) are linked
    // only into builds with float kernels; an integer-only build refuses here.
    if !cfg!(feature = "type-float") {
        return super::type_not_built(op);
    }
    let kind = super::chain::unary_kind(code, &op.op.params).ok_or_else(|| op.unsupported("unary op"))?;
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
    let in_q = per_tensor(op, x.quant, "input")?;
    let out_q = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let lut = Lut8::of_real(dtype == DType::I8, f, in_q, out_q);
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            lut.apply(arg(ins, 0)?, outs[0]);
            Ok(())
        }),
    })
}

/// LOGISTIC / TANH on int16 (zero points 0, output scale 2^-15) as LiteRT runs
/// them (`LogisticTanh16`: the 16-bit fixed-point functions when the input scale
/// is 2^-12, or 2^-11 for TANH, otherwise the interpolated sigmoid table).
pub(crate) fn logistic_tanh_i16(op: &OpContext<'_>, tanh: bool) -> Result<Built> {
    // Compiled out without `type-int16` (the dispatch refuses int16 ops then).
    if !cfg!(feature = "type-int16") {
        return super::type_not_built(op);
    }
    let x = op.input(0)?;
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if in_zp != 0 || out_zp != 0 {
        return Err(op.bad("int16 LOGISTIC / TANH require zero points of 0"));
    }
    if (f64::from(out_scale).log2() + 15.0).abs() >= 1e-3 {
        // The scale's bits, not its value: formatting a float here would link the
        // float printer into integer-only builds for this one message.
        return Err(op.bad(format!("int16 LOGISTIC / TANH require an output scale of 2^-15, not the float with bits {:#010x}", out_scale.to_bits())));
    }
    let f = LogisticTanh16::new(f64::from(in_scale), tanh);
    Ok(Built {
        outputs: vec![(DType::I16, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            f.apply(typed(arg(ins, 0)?)?, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}

/// HARD_SWISH on int8 / uint8 with LiteRT's 16-bit fixed-point scheme
/// (`HardSwishQ`), tabulated: a function of one byte.
pub(crate) fn hard_swish(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::I8 | DType::U8) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized HARD_SWISH of {}", dtype.name())));
    }
    let in_q = per_tensor(op, x.quant, "input")?;
    let out_q = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let p = HardSwishQ::new(in_q, out_q, int_range(dtype)).ok_or_else(|| op.unsupported("HARD_SWISH with an output scale below input scale / 128"))?;
    let lut = p.table(dtype == DType::I8);
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            lut.apply(arg(ins, 0)?, outs[0]);
            Ok(())
        }),
    })
}

/// RELU, RELU6, RELU_N1_TO_1 and LEAKY_RELU on int8 / uint8 / int16 (`ReluQ`): (x -
/// in_zp) rescaled to the output scale (by `alpha` below zero for LEAKY_RELU),
/// clamped to the activation's quantized range.
pub(crate) fn relu_like(op: &OpContext<'_>, code: ferrite_format::ops::BuiltinOp) -> Result<Built> {
    use ferrite_format::ops::BuiltinOp as B;
    let x = op.input(0)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::I8 | DType::U8 | DType::I16) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized {} of {}", op.op.code.name(), dtype.name())));
    }
    let in_q = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let act = match code {
        B::RELU => Activation::Relu,
        B::RELU6 => Activation::Relu6,
        B::RELU_N1_TO_1 => Activation::ReluN1To1,
        _ => Activation::None,
    };
    let range = activation_range(act, out_scale, out_zp, dtype);
    let alpha = match op.op.params {
        OpParams::LeakyRelu { alpha } if code == B::LEAKY_RELU => Some(alpha),
        _ => None,
    };
    let p = ReluQ::new(in_q, (out_scale, out_zp), alpha, range);
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let (input, out) = (arg(ins, 0)?, &mut *outs[0]);
            match dtype {
                DType::I8 => qact::relu::<i8>(typed(input)?, &p, typed_mut(out)?),
                DType::U8 => qact::relu::<u8>(input, &p, out),
                _ => qact::relu::<i16>(typed(input)?, &p, typed_mut(out)?),
            }
            Ok(())
        }),
    })
}

/// ABS on int8, or int16 with zero points 0 (`AbsQ`); an int16 tensor without
/// quantization parameters takes the plain absolute value (wrapping at -32768, as
/// LiteRT's does).
pub(crate) fn abs_int(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::I8 | DType::I16) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("ABS of {} (int8, int16 and int32 are implemented, as in LiteRT)", dtype.name())));
    }
    let shape = x.shape.clone();
    if dtype == DType::I16 && x.quant.is_none() {
        return Ok(Built {
            outputs: vec![(dtype, shape)],
            kernel: Box::new(move |ins, outs| {
                let out = typed_mut::<i16>(outs[0])?;
                for (o, &v) in out.iter_mut().zip(typed::<i16>(arg(ins, 0)?)?) {
                    *o = v.wrapping_abs();
                }
                Ok(())
            }),
        });
    }
    let in_q = per_tensor(op, x.quant, "input")?;
    let out_q = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if dtype == DType::I16 && (in_q.1 != 0 || out_q.1 != 0) {
        return Err(op.bad("int16 ABS requires zero points of 0"));
    }
    let p = AbsQ::new(in_q, out_q, int_range(dtype));
    if dtype == DType::I8 {
        let lut = Lut8::new(true, |v| p.apply(v));
        return Ok(Built {
            outputs: vec![(dtype, shape)],
            kernel: Box::new(move |ins, outs| {
                lut.apply(arg(ins, 0)?, outs[0]);
                Ok(())
            }),
        });
    }
    Ok(Built {
        outputs: vec![(dtype, shape)],
        kernel: Box::new(move |ins, outs| {
            let out = typed_mut::<i16>(outs[0])?;
            for (o, &v) in out.iter_mut().zip(typed::<i16>(arg(ins, 0)?)?) {
                *o = p.apply(i32::from(v)) as i16;
            }
            Ok(())
        }),
    })
}

/// RSQRT on int8 (`RsqrtQ`), tabulated. A value below the input's zero point (a
/// negative real) fails the run, as it does in LiteRT.
pub(crate) fn rsqrt_int8(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    if x.dtype != DType::I8 || op.outputs[0].dtype != DType::I8 {
        return Err(op.unsupported(format!("RSQRT of {} (float32 and int8 are implemented)", x.dtype.name())));
    }
    let in_q = per_tensor(op, x.quant, "input")?;
    let out_q = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let p = RsqrtQ::new(in_q, out_q);
    let lut = Lut8::new(true, |v| p.apply(v).unwrap_or(0));
    let zp = in_q.1;
    let at = op.location();
    Ok(Built {
        outputs: vec![(DType::I8, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let input = typed::<i8>(arg(ins, 0)?)?;
            if let Some(v) = input.iter().find(|&&v| i32::from(v) < zp) {
                return Err(crate::error::Error::Runtime(format!("{at}: RSQRT of a negative value (int8 {v} below the zero point {zp})").into()));
            }
            lut.apply(arg(ins, 0)?, outs[0]);
            Ok(())
        }),
    })
}

/// GELU on int8 / uint8 through a 256-entry table of the float function, built
/// as LiteRT's `LUTPopulate` builds it (`qact::gelu_for_table`).
pub(crate) fn gelu_table(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::I8 | DType::U8) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("GELU of {} (float32, int8 and uint8 are implemented)", dtype.name())));
    }
    let approximate = matches!(op.op.params, OpParams::Gelu { approximate: true });
    let in_q = per_tensor(op, x.quant, "input")?;
    let out_q = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let lut = Lut8::of_real(dtype == DType::I8, |v| qact::gelu_for_table(v, approximate), in_q, out_q);
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            lut.apply(arg(ins, 0)?, outs[0]);
            Ok(())
        }),
    })
}
