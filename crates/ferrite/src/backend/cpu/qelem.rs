//! Quantized element-wise variants (`ferrite_kernels::qelem`): DIV on int8 /
//! uint8 / int16, NEG, FLOOR_DIV and FLOOR_MOD on the stored int8 / int16
//! integers, EXP / LOG / ELU through 256-entry tables and EXP / LOG / RSQRT on
//! int16 through interpolated 513-entry ones, SQRT per element, RELU_0_TO_1 on
//! int8 / uint8, as LiteRT's builtin kernels compute them.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::elementwise::{binary as broadcast_binary, broadcast_shape};
use ferrite_kernels::qactivation::{self as qact, ReluQ};
use ferrite_kernels::qelem::{self as kq, DivQ, Lut16Q};

use super::quant::*;
use super::runtime;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams};

/// The family's builders: only integer inputs; float and int32 stay with the
/// element-wise and activation families.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    let dtype = op.opt_input(0)?.dtype;
    let quantized = op.opt_input(0).is_some_and(|d| d.quant.is_some());
    Some(match code {
        B::DIV if op.is_int() => div(op),
        B::NEG if matches!(dtype, DType::I8 | DType::I16) => neg(op),
        B::FLOOR_DIV | B::FLOOR_MOD if matches!(dtype, DType::I8 | DType::I16) => floor_div_mod(op, code == B::FLOOR_DIV),
        B::EXP | B::LOG | B::ELU if matches!(dtype, DType::I8) => table8(op, code),
        B::EXP | B::LOG | B::RSQRT | B::GELU if dtype == DType::I16 && quantized => table16(op, code),
        B::SQRT if matches!(dtype, DType::I8 | DType::I16) => sqrt(op),
        B::RELU_0_TO_1 if matches!(dtype, DType::I8 | DType::U8) => relu_0_to_1(op),
        _ => return None,
    })
}

/// Input and output of one type among `types`; the output's type must match.
fn same_type(op: &OpContext<'_>, types: &[DType]) -> Result<DType> {
    let x = op.input(0)?;
    if !types.contains(&x.dtype) || op.outputs[0].dtype != x.dtype {
        return Err(op.unsupported(format!("quantized {} from {} to {}", op.op.code.name(), x.dtype.name(), op.outputs[0].dtype.name())));
    }
    Ok(x.dtype)
}

/// DIV of int8 / uint8 / int16 (`DivQ`). The divisor is checked first, as
/// LiteRT checks it: a value at its zero point (a zero real) fails the run.
fn div(op: &OpContext<'_>) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    let dtype = same_type(op, &[DType::I8, DType::U8, DType::I16])?;
    if b.dtype != dtype {
        return Err(op.bad(format!("input types differ: {} and {}", dtype.name(), b.dtype.name())));
    }
    let q1 = per_tensor(op, a.quant, "input 0")?;
    let q2 = per_tensor(op, b.quant, "input 1")?;
    let (so, zo) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let act = match op.op.params {
        OpParams::Binary { activation, .. } => activation,
        _ => Activation::None,
    };
    let p = DivQ::new(q1, q2, (so, zo), activation_range(act, so, zo, dtype));
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let out = broadcast_shape(&sa, &sb).ok_or_else(|| op.bad(format!("shapes {sa:?} and {sb:?} do not broadcast")))?;
    let os = out.clone();
    let (zp2, at) = (q2.1, op.location());
    macro_rules! run {
        ($T:ty, $x:expr, $y:expr, $o:expr) => {{
            let (x, y, o): (&[$T], &[$T], &mut [$T]) = ($x, $y, $o);
            if let Some(v) = y.iter().find(|&&v| i32::from(v) == zp2) {
                return Err(runtime(format!("{at}: division by zero (divisor {v} at its zero point)")));
            }
            broadcast_binary(x, &sa, y, &sb, o, &os, |u: $T, v: $T| p.apply(i32::from(u), i32::from(v)).unwrap_or(0) as $T);
            Ok(())
        }};
    }
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| match dtype {
            DType::I8 => run!(i8, typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, typed_mut(outs[0])?),
            DType::U8 => run!(u8, arg(ins, 0)?, arg(ins, 1)?, &mut *outs[0]),
            _ => run!(i16, typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, typed_mut(outs[0])?),
        }),
    })
}

/// NEG of int8 / int16: LiteRT negates the stored integers (wrapping at the
/// type's minimum) and reads no quantization parameters.
fn neg(op: &OpContext<'_>) -> Result<Built> {
    let dtype = same_type(op, &[DType::I8, DType::I16])?;
    Ok(Built {
        outputs: vec![(dtype, op.input(0)?.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            if dtype == DType::I8 {
                for (o, &v) in typed_mut::<i8>(outs[0])?.iter_mut().zip(typed::<i8>(arg(ins, 0)?)?) {
                    *o = v.wrapping_neg();
                }
            } else {
                for (o, &v) in typed_mut::<i16>(outs[0])?.iter_mut().zip(typed::<i16>(arg(ins, 0)?)?) {
                    *o = v.wrapping_neg();
                }
            }
            Ok(())
        }),
    })
}

/// FLOOR_DIV / FLOOR_MOD of int8 / int16 on the stored integers, as LiteRT runs
/// them (quantization unread); a zero divisor fails the run.
fn floor_div_mod(op: &OpContext<'_>, div: bool) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    let dtype = same_type(op, &[DType::I8, DType::I16])?;
    if b.dtype != dtype {
        return Err(op.bad(format!("input types differ: {} and {}", dtype.name(), b.dtype.name())));
    }
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let out = broadcast_shape(&sa, &sb).ok_or_else(|| op.bad(format!("shapes {sa:?} and {sb:?} do not broadcast")))?;
    let os = out.clone();
    let f = if div { kq::floor_div_int } else { kq::floor_mod_int };
    let at = op.location();
    macro_rules! run {
        ($T:ty, $bits:expr) => {
            Box::new(move |ins, outs| {
                let (x, y) = (typed::<$T>(arg(ins, 0)?)?, typed::<$T>(arg(ins, 1)?)?);
                if y.contains(&0) {
                    return Err(runtime(format!("{at}: division by 0")));
                }
                broadcast_binary(x, &sa, y, &sb, typed_mut::<$T>(outs[0])?, &os, |u: $T, v: $T| f(i32::from(u), i32::from(v), $bits).unwrap_or(0) as $T);
                Ok(())
            })
        };
    }
    let kernel: crate::backend::KernelFn = if dtype == DType::I8 { run!(i8, 8) } else { run!(i16, 16) };
    Ok(Built { outputs: vec![(dtype, out)], kernel })
}

/// EXP, LOG and ELU on int8 through the 256-entry table LiteRT's prepare fills.
fn table8(op: &OpContext<'_>, code: B) -> Result<Built> {
    same_type(op, &[DType::I8])?;
    let x = op.input(0)?;
    let in_q = per_tensor(op, x.quant, "input")?;
    let out_q = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let lut = match code {
        B::EXP => kq::lut8(true, f32::exp, in_q, out_q),
        B::LOG => {
            let output_min = (-128 - out_q.1) as f32 * out_q.0;
            kq::lut8(true, |v| kq::log_for_table(v, output_min), in_q, out_q)
        }
        _ => kq::lut8(true, kq::elu_for_table, in_q, out_q),
    };
    Ok(Built {
        outputs: vec![(DType::I8, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            kq::apply_lut8(&lut, arg(ins, 0)?, outs[0]);
            Ok(())
        }),
    })
}

/// EXP, LOG, RSQRT and GELU on int16 (zero points 0) through LiteRT's interpolated
/// 513-entry table. RSQRT of a negative value fails the run, as in LiteRT.
fn table16(op: &OpContext<'_>, code: B) -> Result<Built> {
    same_type(op, &[DType::I16])?;
    let x = op.input(0)?;
    let in_q = per_tensor(op, x.quant, "input")?;
    let out_q = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if in_q.1 != 0 || out_q.1 != 0 {
        return Err(op.unsupported(format!("int16 {} with nonzero zero points", op.op.code.name())));
    }
    let lut = match code {
        B::EXP => Lut16Q::new(f32::exp, in_q, out_q),
        B::LOG => {
            let output_min = -32768.0 * out_q.0;
            Lut16Q::new(|v| kq::log_for_table(v, output_min), in_q, out_q)
        }
        B::RSQRT => Lut16Q::new(|v| kq::rsqrt_for_table(v, out_q.0), in_q, out_q),
        _ => {
            let approximate = matches!(op.op.params, OpParams::Gelu { approximate: true });
            Lut16Q::new(|v| qact::gelu_for_table(v, approximate), in_q, out_q)
        }
    };
    let (check_sign, at) = (code == B::RSQRT, op.location());
    Ok(Built {
        outputs: vec![(DType::I16, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let x = typed::<i16>(arg(ins, 0)?)?;
            if check_sign && x.iter().any(|&v| v < 0) {
                return Err(runtime(format!("{at}: RSQRT of a negative value")));
            }
            lut.apply(x, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}

/// SQRT of int8 / int16 per element in single precision (`kq::sqrt_q`); a
/// negative real input fails the run, as in LiteRT.
fn sqrt(op: &OpContext<'_>) -> Result<Built> {
    let dtype = same_type(op, &[DType::I8, DType::I16])?;
    let x = op.input(0)?;
    let in_q = per_tensor(op, x.quant, "input")?;
    let out_q = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if dtype == DType::I16 && (in_q.1 != 0 || out_q.1 != 0) {
        return Err(op.bad("int16 SQRT requires zero points of 0"));
    }
    let range = int_range(dtype);
    let at = op.location();
    let negative = move || runtime(format!("{at}: SQRT of a negative value"));
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            if dtype == DType::I8 {
                for (o, &v) in typed_mut::<i8>(outs[0])?.iter_mut().zip(typed::<i8>(arg(ins, 0)?)?) {
                    *o = kq::sqrt_q(i32::from(v), in_q, out_q, range).ok_or_else(&negative)? as i8;
                }
            } else {
                for (o, &v) in typed_mut::<i16>(outs[0])?.iter_mut().zip(typed::<i16>(arg(ins, 0)?)?) {
                    *o = kq::sqrt_q(i32::from(v), in_q, out_q, range).ok_or_else(&negative)? as i16;
                }
            }
            Ok(())
        }),
    })
}

/// RELU_0_TO_1 on int8 / uint8 (`ReluQ`): the input rescaled to the output and
/// clamped to the codes of 0 and 1 (`zp + round(1 / scale)` in single precision).
fn relu_0_to_1(op: &OpContext<'_>) -> Result<Built> {
    let dtype = same_type(op, &[DType::I8, DType::U8])?;
    let x = op.input(0)?;
    let in_q = per_tensor(op, x.quant, "input")?;
    let (so, zo) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let (lo, hi) = int_range(dtype);
    let range = (lo.max(zo), hi.min(zo.saturating_add((1.0 / so).round() as i32)));
    let p = ReluQ::new(in_q, (so, zo), None, range);
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            if dtype == DType::I8 {
                qact::relu::<i8>(typed(arg(ins, 0)?)?, &p, typed_mut(outs[0])?);
            } else {
                qact::relu::<u8>(arg(ins, 0)?, &p, outs[0]);
            }
            Ok(())
        }),
    })
}
