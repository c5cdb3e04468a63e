//! Quantized SUM (int8 / uint8 / int16) and REDUCE_PROD (int8 / int16), and MEAN
//! of int32 / int64, as LiteRT runs them (kernels in `ferrite_kernels::qreduce`).

use std::sync::Mutex;

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::qreduce::{self as kq, ProdQ, Reduction, SumQ};

use super::reduce::reduced_shape;
use crate::backend::{arg, typed, typed_mut, Built, OpContext};
use crate::error::Result;
use crate::model::DType;

/// The builder for the reductions this file covers, or `None` for the others
/// (float, the stored-integer REDUCE_MAX / REDUCE_MIN, integer SUM / PROD).
pub(super) fn build(op: &OpContext<'_>, code: B, dtype: DType) -> Option<Result<Built>> {
    Some(match (code, dtype) {
        (B::MEAN, DType::I32 | DType::I64) => mean_int(op, dtype),
        (B::SUM, DType::I8 | DType::U8 | DType::I16) => sum_quantized(op, dtype),
        (B::REDUCE_PROD, DType::I8 | DType::I16 | DType::U8) => prod_quantized(op, dtype),
        _ => return None,
    })
}

/// Checks the run's buffers against the planned element counts (`width` bytes
/// each), so a kernel never indexes past them.
fn check(input: &[u8], out: &[u8], r: &Reduction, width: usize) -> Result<()> {
    let n_in: usize = r.shape.iter().product();
    if input.len() != n_in * width || out.len() != r.outputs * width {
        return Err(super::runtime("quantized reduction buffers do not match the planned shapes"));
    }
    Ok(())
}

/// `(scale, zero point)` of a per-tensor quantized tensor.
fn qparams(op: &OpContext<'_>, q: Option<&crate::model::Quantization>, what: &str) -> Result<(f32, i32)> {
    let q = q.filter(|q| !q.scale.is_empty() && !q.zero_point.is_empty());
    q.map(|q| (q.scale[0], q.zero_point[0] as i32)).ok_or_else(|| op.bad(format!("quantized {} {what} has no quantization parameters", op.op.code.name())))
}

/// The reduction's geometry, checked: rank, output type, element counts.
fn geometry(op: &OpContext<'_>, dtype: DType) -> Result<(Reduction, Vec<usize>)> {
    let name = op.op.code.name();
    if op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("{name} of {} to {}", dtype.name(), op.outputs[0].dtype.name())));
    }
    let shape = op.input(0)?.shape.clone();
    if shape.len() > ferrite_kernels::MAX_DIMS {
        return Err(op.unsupported(format!("{name} of rank {}", shape.len())));
    }
    op.checked_elements(&shape, 8)?;
    let (out, flags) = reduced_shape(op, &shape)?;
    op.checked_elements(&out, 8)?;
    Ok((Reduction::new(&shape, &flags), out))
}

/// SUM of int8 / uint8 / int16 as LiteRT's builtin kernel runs it: always
/// through the rescale of `kq::SumQ`, even onto the input's own quantization
/// (so the zero point is taken out and results clamp); int16 with zero points 0.
fn sum_quantized(op: &OpContext<'_>, dtype: DType) -> Result<Built> {
    let in_q = qparams(op, op.input(0)?.quant, "input")?;
    let out_q = qparams(op, op.outputs[0].quant.as_ref(), "output")?;
    let (r, out) = geometry(op, dtype)?;
    if dtype == DType::I16 && (in_q.1 != 0 || out_q.1 != 0) {
        return Err(op.unsupported("int16 SUM with a nonzero zero point (LiteRT requires 0)"));
    }
    let p = SumQ::new(in_q, out_q, r.count);
    let scratch = Mutex::new(vec![0i32; r.outputs]);
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let mut sums = scratch.lock().unwrap_or_else(|e| e.into_inner());
            let (input, o) = (arg(ins, 0)?, &mut *outs[0]);
            check(input, o, &r, if dtype == DType::I16 { 2 } else { 1 })?;
            match dtype {
                DType::I8 => kq::sum_rescaled::<i8>(typed(input)?, &r, &p, &mut sums, typed_mut(o)?),
                DType::U8 => kq::sum_rescaled::<u8>(input, &r, &p, &mut sums, o),
                _ => kq::sum_rescaled::<i16>(typed(input)?, &r, &p, &mut sums, typed_mut(o)?),
            }
            Ok(())
        }),
    })
}

/// REDUCE_PROD of quantized int8 / int16 (LiteRT has no uint8 one).
fn prod_quantized(op: &OpContext<'_>, dtype: DType) -> Result<Built> {
    if dtype == DType::U8 {
        return Err(op.unsupported("REDUCE_PROD of uint8 (LiteRT: unsupported quantized data type)"));
    }
    let in_q = qparams(op, op.input(0)?.quant, "input")?;
    let out_q = qparams(op, op.outputs[0].quant.as_ref(), "output")?;
    let (r, out) = geometry(op, dtype)?;
    if dtype == DType::I16 && (in_q.1 != 0 || out_q.1 != 0) {
        return Err(op.unsupported("int16 REDUCE_PROD with a nonzero zero point (LiteRT requires 0)"));
    }
    // LiteRT's reduced count: input elements per output element.
    let n_in: usize = r.shape.iter().product();
    let count = n_in.checked_div(r.outputs).unwrap_or(1);
    let p = ProdQ::new(in_q, out_q, count);
    if !r.empty_input() && !p.shift_in_range() {
        return Err(op.unsupported(format!("REDUCE_PROD scaling {} / {}^(1/{count}) out of LiteRT's 64-bit rescale range", in_q.0, out_q.0)));
    }
    let scratch = Mutex::new(vec![0i32; r.outputs]);
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let mut prods = scratch.lock().unwrap_or_else(|e| e.into_inner());
            let (input, o) = (arg(ins, 0)?, &mut *outs[0]);
            check(input, o, &r, if dtype == DType::I16 { 2 } else { 1 })?;
            // An empty input leaves LiteRT's output unwritten; ferrite's is zeros.
            o.fill(0);
            if dtype == DType::I8 {
                kq::prod_rescaled::<i8>(typed(input)?, &r, &p, &mut prods, typed_mut(o)?);
            } else {
                kq::prod_rescaled::<i16>(typed(input)?, &r, &p, &mut prods, typed_mut(o)?);
            }
            Ok(())
        }),
    })
}

/// MEAN of int32 / int64: int64 sums, the quotient truncated.
fn mean_int(op: &OpContext<'_>, dtype: DType) -> Result<Built> {
    let (r, out) = geometry(op, dtype)?;
    let scratch = Mutex::new(vec![0i64; r.outputs]);
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let mut sums = scratch.lock().unwrap_or_else(|e| e.into_inner());
            let (input, o) = (arg(ins, 0)?, &mut *outs[0]);
            check(input, o, &r, if dtype == DType::I32 { 4 } else { 8 })?;
            if dtype == DType::I32 {
                kq::mean_ints::<i32>(typed(input)?, &r, &mut sums, typed_mut(o)?);
            } else {
                kq::mean_ints::<i64>(typed(input)?, &r, &mut sums, typed_mut(o)?);
            }
            Ok(())
        }),
    })
}
