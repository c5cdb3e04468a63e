//! Reductions (MEAN, SUM, REDUCE_*, the boolean REDUCE_ALL / REDUCE_ANY) and ARG_MAX / ARG_MIN.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::reduce::{self as kred, MeanQ, Reducer};

use super::{axis, require_f32};
use crate::backend::{arg, typed, typed_mut, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The reduction family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut crate::backend::BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::MEAN | B::SUM | B::REDUCE_MAX | B::REDUCE_MIN | B::REDUCE_PROD => reduce(op, code),
        B::ARG_MAX | B::ARG_MIN => arg_minmax(op, code == B::ARG_MAX),
        B::REDUCE_ALL | B::REDUCE_ANY => reduce_bool(op, code == B::REDUCE_ALL),
        _ => return None,
    })
}

pub(crate) fn reduce(op: &OpContext<'_>, code: B) -> Result<Built> {
    if code == B::MEAN && matches!(op.input(0)?.dtype, DType::I8 | DType::U8 | DType::I16) {
        return mean_int(op);
    }
    let dtype = op.input(0)?.dtype;
    // Quantized SUM / REDUCE_PROD and integer MEAN: their own family file.
    if let Some(built) = super::qreduce::build(op, code, dtype) {
        return built;
    }
    if dtype != DType::F32 {
        return reduce_int(op, code, dtype);
    }
    require_f32(op, &[0])?;
    let shape = op.input(0)?.shape.clone();
    let (out, flags) = reduced_shape(op, &shape)?;
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

/// Integer reductions as LiteRT runs them: SUM / REDUCE_PROD / REDUCE_MAX /
/// REDUCE_MIN of int32 and int64 in the element type, and REDUCE_MAX / REDUCE_MIN
/// of int8 / uint8 / int16 on the stored integers (no rescale: LiteRT takes the
/// output's quantization to be the input's, which is what the converter writes).
fn reduce_int(op: &OpContext<'_>, code: B, dtype: DType) -> Result<Built> {
    let kind = match code {
        B::SUM => Reducer::Sum,
        B::REDUCE_MAX => Reducer::Max,
        B::REDUCE_MIN => Reducer::Min,
        B::REDUCE_PROD => Reducer::Prod,
        _ => return Err(op.unsupported(format!("{code:?} of {}", dtype.name()))),
    };
    let plain = matches!(dtype, DType::I32 | DType::I64);
    let stored = matches!(dtype, DType::I8 | DType::U8 | DType::I16) && matches!(kind, Reducer::Max | Reducer::Min);
    if !(plain || stored) {
        return Err(op.unsupported(format!("{code:?} of {}", dtype.name())));
    }
    if op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("{code:?} of {} to {}", dtype.name(), op.outputs[0].dtype.name())));
    }
    let shape = op.input(0)?.shape.clone();
    if shape.len() > ferrite_kernels::MAX_DIMS {
        return Err(op.unsupported(format!("{code:?} of rank {}", shape.len())));
    }
    let (out, flags) = reduced_shape(op, &shape)?;
    fn kernel<T: kred::IntReduce + bytemuck::Pod>(shape: Vec<usize>, flags: Vec<bool>, kind: Reducer) -> crate::backend::KernelFn {
        Box::new(move |ins, outs| {
            kred::reduce_ints::<T>(typed(arg(ins, 0)?)?, &shape, &flags, kind, typed_mut(outs[0])?);
            Ok(())
        })
    }
    let kernel = match dtype {
        DType::I32 => kernel::<i32>(shape, flags, kind),
        DType::I64 => kernel::<i64>(shape, flags, kind),
        DType::I8 => kernel::<i8>(shape, flags, kind),
        DType::U8 => kernel::<u8>(shape, flags, kind),
        _ => kernel::<i16>(shape, flags, kind),
    };
    Ok(Built { outputs: vec![(dtype, out)], kernel })
}

/// REDUCE_ALL / REDUCE_ANY of a bool tensor over the constant axes of input 1.
pub(crate) fn reduce_bool(op: &OpContext<'_>, all: bool) -> Result<Built> {
    let x = op.input(0)?;
    if x.dtype != DType::Bool {
        return Err(op.unsupported(format!("{} of {} (LiteRT takes bool only)", op.op.code.name(), x.dtype.name())));
    }
    let shape = x.shape.clone();
    let (out, flags) = reduced_shape(op, &shape)?;
    let (n_in, n_out) = (op.checked_elements(&shape, 1)?, op.checked_elements(&out, 1)?);
    Ok(Built {
        outputs: vec![(DType::Bool, out)],
        kernel: Box::new(move |ins, outs| {
            let (input, o) = (arg(ins, 0)?, &mut *outs[0]);
            if input.len() < n_in || o.len() != n_out {
                return Err(super::runtime("REDUCE_ALL/REDUCE_ANY buffers do not match the planned shapes"));
            }
            kred::reduce_bool(&input[..n_in], &shape, &flags, all, o);
            Ok(())
        }),
    })
}

/// Output shape of a reduction over the op's constant axes, and which dims reduce.
pub(super) fn reduced_shape(op: &OpContext<'_>, shape: &[usize]) -> Result<(Vec<usize>, Vec<bool>)> {
    let keep = matches!(op.op.params, OpParams::Reducer { keep_dims: true });
    let mut flags = vec![false; shape.len()];
    for a in op.const_ints(1)? {
        // A scalar reduces to itself; LiteRT accepts axis 0 / -1 there.
        if shape.is_empty() && (a == 0 || a == -1) {
            continue;
        }
        flags[axis(op, a, shape.len())?] = true;
    }
    let out = if keep {
        shape.iter().zip(&flags).map(|(&s, &f)| if f { 1 } else { s }).collect()
    } else {
        shape.iter().zip(&flags).filter(|(_, &f)| !f).map(|(&s, _)| s).collect()
    };
    Ok((out, flags))
}

/// MEAN of int8 / uint8 / int16 as LiteRT computes it (`kred::MeanQ`: integer
/// sums, the zero point taken out, one fixed-point rescale that also divides by
/// the count).
fn mean_int(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("MEAN of {} to {}", dtype.name(), op.outputs[0].dtype.name())));
    }
    let q = |t: Option<&crate::model::Quantization>, what: &str| {
        t.map(|q| (q.scale[0], q.zero_point[0] as i32)).ok_or_else(|| op.bad(format!("quantized MEAN {what} has no quantization parameters")))
    };
    let in_q = q(x.quant, "input")?;
    let out_q = q(op.outputs[0].quant.as_ref(), "output")?;
    let shape = x.shape.clone();
    let (out, flags) = reduced_shape(op, &shape)?;
    // The accumulators are sized by the output: bounded (and the sums cannot
    // overflow) before anything is allocated.
    op.checked_elements(&shape, 1)?;
    op.checked_elements(&out, 8)?;
    let p = MeanQ::new(&shape, &flags, in_q, out_q);
    // Scratch sized here so that runs do not allocate.
    let scratch = std::sync::Mutex::new((vec![0i64; p.outputs()], vec![0usize; p.rank()]));
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let mut guard = scratch.lock().unwrap_or_else(|e| e.into_inner());
            let (sums, index) = &mut *guard;
            let (input, out) = (arg(ins, 0)?, &mut *outs[0]);
            match dtype {
                DType::I8 => kred::mean_int_i8(typed(input)?, &p, sums, index, typed_mut(out)?),
                DType::U8 => kred::mean_int_u8(input, &p, sums, index, out),
                _ => kred::mean_int_i16(typed(input)?, &p, sums, index, typed_mut(out)?),
            }
            Ok(())
        }),
    })
}

pub(crate) fn arg_minmax(op: &OpContext<'_>, want_max: bool) -> Result<Built> {
    let x = op.input(0)?;
    let a = axis(op, *op.const_ints(1)?.first().ok_or_else(|| op.bad("empty axis"))?, x.shape.len())?;
    let shape = x.shape.clone();
    // The kernel reads the first element of each reduced run: an empty axis has none.
    if shape[a] == 0 {
        return Err(op.bad(format!("{} over axis {a} of size 0", op.op.code.name())));
    }
    let mut out = shape.clone();
    out.remove(a);
    let wide = !matches!(op.op.params, OpParams::OutType(2));
    let dtype = x.dtype;
    // Sized once here so runs do not allocate.
    let mut scratch = vec![0i64; op.checked_elements(&out, 8)?];
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
