//! AVERAGE_POOL_2D and MAX_POOL_2D, float and integer; L2_POOL_2D, float.

use std::sync::Mutex;

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::pool as kpool;

use super::conv::{rank4, window};
use super::quant::*;
use super::{clamp_of, for_row_chunks, require_f32};
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The pooling family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        #[cfg(feature = "type-int")]
        B::AVERAGE_POOL_2D | B::MAX_POOL_2D if op.is_int() => pool_int(op, code == B::MAX_POOL_2D),
        #[cfg(feature = "type-float")]
        B::AVERAGE_POOL_2D | B::MAX_POOL_2D => pool(op, ctx, code == B::MAX_POOL_2D),
        // Reached only when a type feature left the op's kernel out of this build.
        #[allow(unreachable_patterns)]
        B::AVERAGE_POOL_2D | B::MAX_POOL_2D => super::type_not_built(op),
        #[cfg(feature = "type-float")]
        B::L2_POOL_2D => l2_pool(op),
        #[allow(unreachable_patterns)]
        B::L2_POOL_2D => super::type_not_built(op),
        _ => return None,
    })
}

pub(crate) fn pool(op: &OpContext<'_>, ctx: &mut BackendContext, max: bool) -> Result<Built> {
    let OpParams::Pool2D { padding, stride, filter, activation } = op.op.params else { return Err(op.bad("missing Pool2D options")) };
    require_f32(op, &[0])?;
    let x = rank4(op, &op.input(0)?.shape, "input")?.to_vec();
    let clamp = clamp_of(op, activation)?;
    let g = window(op, &x, filter, stride, (1, 1), padding)?;
    let c = x[3];
    let pool = ctx.pool();
    let rows = g.batch * g.out_h;
    // One compare or add per window position and channel: the work measure that
    // decides whether the rows are worth splitting over the pool.
    let flops = rows * g.out_w * c * g.k_h * g.k_w;
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, c])],
        kernel: Box::new(move |ins, outs| {
            let i = typed::<f32>(arg(ins, 0)?)?;
            for_row_chunks(pool.as_deref(), flops, typed_mut::<f32>(outs[0])?, rows, g.out_w * c, &|_, r, o| {
                if max {
                    kpool::max_pool(i, c, &g, clamp, o, r)
                } else {
                    kpool::average_pool(i, c, &g, clamp, o, r)
                }
                true
            })
        }),
    })
}

/// L2_POOL_2D (float32 only, as in LiteRT): the square root of the mean square
/// over each window clipped to the input, then the fused activation.
pub(crate) fn l2_pool(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Pool2D { padding, stride, filter, activation } = op.op.params else { return Err(op.bad("missing Pool2D options")) };
    require_f32(op, &[0])?;
    let x = rank4(op, &op.input(0)?.shape, "input")?.to_vec();
    let clamp = clamp_of(op, activation)?;
    let g = window(op, &x, filter, stride, (1, 1), padding)?;
    let c = x[3];
    let rows = g.batch * g.out_h;
    let n_out = op.checked_elements(&[rows, g.out_w, c], 4)?;
    let n_in = op.checked_elements(&x, 4)?;
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, c])],
        kernel: Box::new(move |ins, outs| {
            let (i, o) = (typed::<f32>(arg(ins, 0)?)?, typed_mut::<f32>(outs[0])?);
            if i.len() != n_in || o.len() != n_out {
                return Err(super::runtime("L2_POOL_2D buffers do not match the planned shapes"));
            }
            kpool::l2_pool(i, c, &g, clamp, o, 0..rows);
            Ok(())
        }),
    })
}

/// AVERAGE_POOL_2D / MAX_POOL_2D on int8, uint8 or int16: input and output share a scale;
/// the average rounds half away from zero over the positions inside the input.
pub(crate) fn pool_int(op: &OpContext<'_>, max: bool) -> Result<Built> {
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
