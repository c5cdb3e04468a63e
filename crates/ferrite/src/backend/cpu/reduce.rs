//! Reductions (MEAN, SUM, REDUCE_*) and ARG_MAX / ARG_MIN.

use ferrite_format::schema::BuiltinOperator as B;
use ferrite_kernels::reduce::{self as kred, Reducer};

use super::{axis, require_f32};
use crate::backend::{arg, typed, typed_mut, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

pub(crate) fn reduce(op: &OpContext<'_>, code: B) -> Result<Built> {
    require_f32(op, &[0])?;
    let x = op.input(0)?;
    let keep = matches!(op.op.params, OpParams::Reducer { keep_dims: true });
    let shape = x.shape.clone();
    let mut flags = vec![false; shape.len()];
    for a in op.const_ints(1)? {
        flags[axis(op, a, shape.len())?] = true;
    }
    let out: Vec<usize> = if keep {
        shape.iter().zip(&flags).map(|(&s, &f)| if f { 1 } else { s }).collect()
    } else {
        shape.iter().zip(&flags).filter(|(_, &f)| !f).map(|(&s, _)| s).collect()
    };
    let kind = match code {
        B::MEAN => Reducer::Mean,
        B::SUM => Reducer::Sum,
        B::REDUCE_MAX => Reducer::Max,
        B::REDUCE_MIN => Reducer::Min,
        _ => Reducer::Prod,
    };
    Ok(Built {
        outputs: vec![(DType::F32, out)],
        kernel: Box::new(move |ins, outs| {
            kred::reduce(typed(arg(ins, 0)?)?, &shape, &flags, kind, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}

pub(crate) fn arg_minmax(op: &OpContext<'_>, want_max: bool) -> Result<Built> {
    let x = op.input(0)?;
    let a = axis(op, *op.const_ints(1)?.first().ok_or_else(|| op.bad("empty axis"))?, x.shape.len())?;
    let shape = x.shape.clone();
    let mut out = shape.clone();
    out.remove(a);
    let wide = !matches!(op.op.params, OpParams::OutType(2));
    let dtype = x.dtype;
    // Sized once here so runs do not allocate.
    let mut scratch = vec![0i64; out.iter().product()];
    Ok(Built {
        outputs: vec![(if wide { DType::I64 } else { DType::I32 }, out)],
        kernel: Box::new(move |ins, outs| {
            let idx = &mut scratch[..];
            let raw = arg(ins, 0)?;
            match dtype {
                DType::F32 => kred::arg_extreme(typed::<f32>(raw)?, &shape, a, want_max, idx),
                DType::I32 => kred::arg_extreme(typed::<i32>(raw)?, &shape, a, want_max, idx),
                DType::I8 => kred::arg_extreme(typed::<i8>(raw)?, &shape, a, want_max, idx),
                DType::U8 => kred::arg_extreme(typed::<u8>(raw)?, &shape, a, want_max, idx),
                t => return Err(super::runtime(format!("ARG_MAX/ARG_MIN of {}", t.name()))),
            }
            if wide {
                typed_mut::<i64>(outs[0])?.copy_from_slice(idx);
            } else {
                for (o, &v) in typed_mut::<i32>(outs[0])?.iter_mut().zip(idx.iter()) {
                    *o = v as i32;
                }
            }
            Ok(())
        }),
    })
}
