//! STABLEHLO_GATHER and STABLEHLO_SCATTER: the dimension numbers of the options
//! checked against the input shapes at prepare (a model's options are untrusted:
//! every dimension number, slice and window size is bounded before anything is
//! sized from it), then the index kernels of `ferrite_kernels::hlo_index`. Element
//! types are those LiteRT runs: float32, int8 (stored values), uint8, int16, int32,
//! int64 and bool (a scatter combines booleans as logic: add is or, multiply and);
//! indices int32 or int64.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::hlo::Combine;
use ferrite_kernels::hlo_index::{self as k, GatherDims, ScatterDims};

use super::hlo::{sized, view, view_mut};
use crate::backend::{arg, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;
use crate::ops_hlo::{by_hlo_type, HloParams};

/// The operand's element type, refused where LiteRT has no kernel.
pub(crate) fn data_type(op: &OpContext<'_>, dtype: DType) -> Result<DType> {
    match dtype {
        DType::F32 | DType::I8 | DType::U8 | DType::I16 | DType::I32 | DType::I64 | DType::Bool => Ok(dtype),
        t => Err(op.unsupported(format!("element type {} (LiteRT's kernel takes float32, int8, uint8, int16, int32, int64 and bool)", t.name()))),
    }
}

/// Whether the indices of input `i` are int64 (else int32; other types refused, as
/// LiteRT refuses them at prepare).
pub(crate) fn wide_indices(op: &OpContext<'_>, i: usize) -> Result<bool> {
    match op.input(i)?.dtype {
        DType::I32 => Ok(false),
        DType::I64 => Ok(true),
        t => Err(op.unsupported(format!("indices of type {} (LiteRT takes int32 and int64)", t.name()))),
    }
}

/// The checked gather geometry of `op` (shared with the reference backend).
pub(crate) fn gather_dims(op: &OpContext<'_>) -> Result<GatherDims> {
    let OpParams::Hlo(HloParams::Gather { offset_dims, collapsed_slice_dims, start_index_map, index_vector_dim, slice_sizes }) = &op.op.params else {
        return Err(op.bad("missing StablehloGatherOptions"));
    };
    let (x, i) = (op.input(0)?, op.input(1)?);
    GatherDims::new(&x.shape, &i.shape, offset_dims, collapsed_slice_dims, start_index_map, *index_vector_dim, slice_sizes).map_err(|e| op.bad(e))
}

/// The checked scatter geometry of `op` and its update computation (`None`:
/// replace), shared with the reference backend.
pub(crate) fn scatter_dims(op: &OpContext<'_>) -> Result<(ScatterDims, Option<Combine>)> {
    let OpParams::Hlo(HloParams::Scatter { update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims, index_vector_dim, body, .. }) =
        &op.op.params
    else {
        return Err(op.bad("missing StablehloScatterOptions"));
    };
    let code = body.as_ref().map_err(|why| op.unsupported(why))?;
    // LiteRT recognises the StableHLO ops only (a builtin ADD body is refused).
    let c = match code {
        None => None,
        Some(B::STABLEHLO_ADD) => Some(Combine::Add),
        Some(B::STABLEHLO_MULTIPLY) => Some(Combine::Mul),
        Some(B::STABLEHLO_MAXIMUM) => Some(Combine::Max),
        Some(B::STABLEHLO_MINIMUM) => Some(Combine::Min),
        Some(other) => {
            return Err(op.unsupported(format!(
                "update computation {other} (LiteRT runs a body returning the update, or one STABLEHLO_ADD, MULTIPLY, MAXIMUM or MINIMUM)"
            )))
        }
    };
    let (x, i, u) = (op.input(0)?, op.input(1)?, op.input(2)?);
    if u.dtype != x.dtype {
        return Err(op.bad(format!("updates of type {}, operand of type {}", u.dtype.name(), x.dtype.name())));
    }
    let s = ScatterDims::new(&x.shape, &i.shape, &u.shape, update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims, *index_vector_dim)
        .map_err(|e| op.bad(e))?;
    Ok((s, c))
}

/// STABLEHLO_GATHER (operand, start indices): slices of the operand at clamped starts.
pub(super) fn gather(op: &OpContext<'_>) -> Result<Built> {
    let dtype = data_type(op, op.input(0)?.dtype)?;
    let wide = wide_indices(op, 1)?;
    let g = gather_dims(op)?;
    let size = dtype.size().unwrap_or(1);
    let (n_x, n_i, n_o) = (op.checked_elements(&g.operand, size)?, op.checked_elements(&g.indices, 8)?, op.checked_elements(&g.output, size)?);
    let out = g.output.clone();
    let c = Combine::Add;
    by_hlo_type!(op, dtype, c, T => {
        let _ = c;
        Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                let (x, o) = (view::<T>(arg(ins, 0)?)?, view_mut::<T>(outs[0])?);
                sized("operand", x.len(), n_x)?;
                sized("output", o.len(), n_o)?;
                if wide {
                    let i = view::<i64>(arg(ins, 1)?)?;
                    sized("indices", i.len(), n_i)?;
                    k::gather(&g, x, i, o);
                } else {
                    let i = view::<i32>(arg(ins, 1)?)?;
                    sized("indices", i.len(), n_i)?;
                    k::gather(&g, x, i, o);
                }
                Ok(())
            }),
        })
    })
}

/// STABLEHLO_SCATTER (operand, scatter indices, updates): the operand with the
/// updates combined in by the update computation; out-of-bounds updates skipped.
pub(super) fn scatter(op: &OpContext<'_>) -> Result<Built> {
    let dtype = data_type(op, op.input(0)?.dtype)?;
    let wide = wide_indices(op, 1)?;
    let (s, comb) = scatter_dims(op)?;
    let size = dtype.size().unwrap_or(1);
    let (n_x, n_i, n_u) = (op.checked_elements(&s.operand, size)?, op.checked_elements(&s.indices, 8)?, op.checked_elements(&s.updates, size)?);
    let out = s.operand.clone();
    let c = comb.unwrap_or(Combine::Add);
    by_hlo_type!(op, dtype, c, T => {
        let comb = comb.map(|_| c);
        Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                let (x, u, o) = (view::<T>(arg(ins, 0)?)?, view::<T>(arg(ins, 2)?)?, view_mut::<T>(outs[0])?);
                sized("operand", x.len(), n_x)?;
                sized("updates", u.len(), n_u)?;
                sized("output", o.len(), n_x)?;
                if wide {
                    let i = view::<i64>(arg(ins, 1)?)?;
                    sized("indices", i.len(), n_i)?;
                    k::scatter(&s, comb, x, i, u, o);
                } else {
                    let i = view::<i32>(arg(ins, 1)?)?;
                    sized("indices", i.len(), n_i)?;
                    k::scatter(&s, comb, x, i, u, o);
                }
                Ok(())
            }),
        })
    })
}
