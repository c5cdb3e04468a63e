//! Index and set ops: GATHER_ND, SCATTER_ND, DYNAMIC_UPDATE_SLICE, EMBEDDING_LOOKUP,
//! SPARSE_TO_DENSE, TOPK_V2, ONE_HOT, RANGE, CUMSUM, WHERE, UNIQUE, SEGMENT_SUM, UNSORTED_SEGMENT_*,
//! MATRIX_DIAG, MATRIX_SET_DIAG, BROADCAST_ARGS, NON_MAX_SUPPRESSION_V4/V5.
//!
//! Index values read from tensor data are checked by the kernels (an index outside
//! its dimension is a run-time error, as in LiteRT, never an out-of-bounds access).
//! An output shape that depends on input values (SCATTER_ND's and SPARSE_TO_DENSE's shape, TOPK_V2's k,
//! ONE_HOT's depth, RANGE's bounds, WHERE's count of true elements, UNIQUE's count
//! of distinct values, SEGMENT_SUM's largest id) is read with [`OpContext::const_ints`] or
//! [`known`]; when the values are computed at run time that yields
//! `Error::DataDependent`, and the compiler builds the op again when they exist.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::index as k;

use super::{axis, by_size, runtime};
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::{Detail, Error, Result};
use crate::model::DType;
use crate::ops::OpParams;

/// The index family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::GATHER_ND => gather_nd(op),
        B::SCATTER_ND => scatter_nd(op),
        B::SPARSE_TO_DENSE => sparse_to_dense(op),
        B::DYNAMIC_UPDATE_SLICE => dynamic_update_slice(op),
        B::EMBEDDING_LOOKUP => embedding_lookup(op),
        B::TOPK_V2 => top_k(op),
        B::ONE_HOT => one_hot(op),
        B::RANGE => range(op),
        B::CUMSUM => cumsum(op),
        B::WHERE => where_op(op),
        B::UNIQUE => unique(op),
        B::SEGMENT_SUM => segments(op, None),
        B::UNSORTED_SEGMENT_SUM => segments(op, Some(k::SegmentOp::Sum)),
        B::UNSORTED_SEGMENT_PROD => segments(op, Some(k::SegmentOp::Prod)),
        B::UNSORTED_SEGMENT_MAX => segments(op, Some(k::SegmentOp::Max)),
        B::UNSORTED_SEGMENT_MIN => segments(op, Some(k::SegmentOp::Min)),
        B::MATRIX_DIAG => matrix_diag(op),
        B::MATRIX_SET_DIAG => matrix_set_diag(op),
        B::BROADCAST_ARGS => broadcast_args(op),
        B::NON_MAX_SUPPRESSION_V4 | B::NON_MAX_SUPPRESSION_V5 => non_max_suppression(op, code == B::NON_MAX_SUPPRESSION_V5),
        // The legacy text ops share the index family's feature (text.rs).
        _ => return super::text::build(code, op, _ctx),
    })
}

/// Runs `$body` with `$I` bound to the Rust type of an int32 or int64 index tensor.
macro_rules! by_index {
    ($op:expr, $dtype:expr, $what:expr, $I:ident => $body:expr) => {
        match $dtype {
            DType::I32 => {
                type $I = i32;
                $body
            }
            DType::I64 => {
                type $I = i64;
                $body
            }
            t => Err($op.bad(format!("{} must be int32 or int64, got {}", $what, t.name()))),
        }
    };
}

/// The bytes of input `i` when known while building (constants at prepare, every
/// input when the op is built at run time); `DataDependent` otherwise.
pub(crate) fn known<'a>(op: &OpContext<'a>, i: usize) -> Result<&'a [u8]> {
    op.input(i)?.value.ok_or_else(|| Error::DataDependent(Detail::at(op.location(), format!("input {i} is computed at run time"))))
}

/// The one value of a scalar (or one-element) integer input known while building.
fn const_scalar(op: &OpContext<'_>, i: usize, what: &str) -> Result<i64> {
    match op.const_ints(i)?[..] {
        [v] => Ok(v),
        ref v => Err(op.bad(format!("{what} must hold one value, got {}", v.len()))),
    }
}

/// A kernel-side length check: planned buffers always match, but a kernel never
/// indexes past a slice it was handed.
fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(runtime(format!("{what} holds {got} elements, the op needs {want}")));
    }
    Ok(())
}

/// GATHER_ND: the last dimension of the indices is the length of each index tuple
/// (at most the params' rank); output shape is the indices' leading dimensions
/// followed by the params' dimensions the tuples leave.
fn gather_nd(op: &OpContext<'_>) -> Result<Built> {
    let (p, i) = (op.input(0)?, op.input(1)?);
    let (Some(&nd), true) = (i.shape.last(), !p.shape.is_empty()) else {
        return Err(op.bad("params and indices must have rank 1 or more"));
    };
    if nd > p.shape.len() {
        return Err(op.bad(format!("index tuples of {nd} coordinates for params of rank {}", p.shape.len())));
    }
    let mut out: Vec<usize> = i.shape[..i.shape.len() - 1].to_vec();
    out.extend_from_slice(&p.shape[nd..]);
    let (shape, dtype) = (p.shape.clone(), p.dtype);
    let (n_params, n_out) = (op.checked_elements(&shape, 1)?, op.checked_elements(&out, 1)?);
    let n_indices = op.checked_elements(&i.shape, 1)?;
    by_index!(op, i.dtype, "GATHER_ND indices", I => by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (params, indices, o) = (typed::<T>(arg(ins, 0)?)?, typed::<I>(arg(ins, 1)?)?, typed_mut::<T>(outs[0])?);
            check_len("GATHER_ND params", params.len(), n_params)?;
            check_len("GATHER_ND indices", indices.len(), n_indices)?;
            check_len("GATHER_ND output", o.len(), n_out)?;
            k::gather_nd(params, &shape, indices, nd, o).map_err(|v| runtime(format!("GATHER_ND index {v} out of range for params of shape {shape:?}")))
        }),
    })))
}

/// SCATTER_ND: inputs (indices, updates, shape); the output of `shape` is zero but
/// for the updates, added at the slices the index tuples name (duplicates sum).
fn scatter_nd(op: &OpContext<'_>) -> Result<Built> {
    let (i, u) = (op.input(0)?, op.input(1)?);
    let shape: Vec<usize> =
        op.const_ints(2)?.iter().map(|&d| usize::try_from(d).map_err(|_| op.bad(format!("negative output dimension {d}")))).collect::<Result<_>>()?;
    let Some(&nd) = i.shape.last() else { return Err(op.bad("indices must have rank 1 or more")) };
    let lead = &i.shape[..i.shape.len() - 1];
    // updates = indices' leading dims + the output dims the tuples leave.
    if nd > shape.len() || u.shape.len() != lead.len() + shape.len() - nd || u.shape[..lead.len()] != *lead || u.shape[lead.len()..] != shape[nd..] {
        return Err(op.bad(format!("updates {:?} do not fit indices {:?} and output shape {shape:?}", u.shape, i.shape)));
    }
    if op.input(2)?.dtype != i.dtype {
        return Err(op.bad("SCATTER_ND shape and indices must have the same type"));
    }
    let dtype = u.dtype;
    let n_out = op.checked_elements(&shape, dtype.size().unwrap_or(1))?;
    let (n_idx, n_upd) = (op.checked_elements(&i.shape, 1)?, op.checked_elements(&u.shape, 1)?);
    macro_rules! scatter {
        ($T:ty) => {
            by_index!(op, i.dtype, "SCATTER_ND indices", I => Ok(Built {
                outputs: vec![(dtype, shape.clone())],
                kernel: Box::new(move |ins, outs| {
                    let (idx, upd, o) = (typed::<I>(arg(ins, 0)?)?, typed::<$T>(arg(ins, 1)?)?, typed_mut::<$T>(outs[0])?);
                    check_len("SCATTER_ND indices", idx.len(), n_idx)?;
                    check_len("SCATTER_ND updates", upd.len(), n_upd)?;
                    check_len("SCATTER_ND output", o.len(), n_out)?;
                    k::scatter_nd(idx, nd, upd, &shape, o).map_err(|v| runtime(format!("SCATTER_ND index {v} out of range for output shape {shape:?}")))
                }),
            }))
        };
    }
    match dtype {
        DType::F32 => scatter!(f32),
        DType::I8 => scatter!(i8),
        DType::U8 => scatter!(u8),
        DType::I32 => scatter!(i32),
        DType::I64 => scatter!(i64),
        t => Err(op.unsupported(format!("SCATTER_ND of {}", t.name()))),
    }
}

/// SPARSE_TO_DENSE: (indices, output_shape, values, default_value). The indices
/// are a scalar or a vector of positions in a rank-1 output, or an `[n, rank]`
/// matrix of coordinate tuples; `values` holds one value per position or one for
/// all. The output's shape is a value (a run-time one makes the op data-dependent);
/// an index outside it is a run-time error.
fn sparse_to_dense(op: &OpContext<'_>) -> Result<Built> {
    let (i, v, d) = (op.input(0)?, op.input(2)?, op.input(3)?);
    let shape: Vec<usize> =
        op.const_ints(1)?.iter().map(|&d| usize::try_from(d).map_err(|_| op.bad(format!("negative output dimension {d}")))).collect::<Result<_>>()?;
    if op.input(1)?.shape.len() != 1 {
        return Err(op.bad(format!("output_shape must be a vector, got shape {:?}", op.input(1)?.shape)));
    }
    let (n, nd) = match i.shape[..] {
        [] => (1, 1),
        [n] => (n, 1),
        [n, nd] => (n, nd),
        _ => return Err(op.bad(format!("indices of rank {} (at most 2)", i.shape.len()))),
    };
    if nd != shape.len() {
        return Err(op.bad(format!("index tuples of {nd} coordinates for an output of rank {}", shape.len())));
    }
    let n_values = v.shape.iter().product::<usize>();
    if v.shape.len() > 1 || (n_values != n && n_values != 1) || (n_values == 1 && n != 1 && !v.shape.is_empty()) {
        return Err(op.bad(format!("values of shape {:?} for {n} indices", v.shape)));
    }
    if d.dtype != v.dtype || !d.shape.is_empty() {
        return Err(op.bad("default_value must be a scalar of the values' type"));
    }
    let dtype = v.dtype;
    let n_out = op.checked_elements(&shape, dtype.size().unwrap_or(1))?;
    let n_idx = op.checked_elements(&i.shape, 1)?;
    macro_rules! densify {
        ($T:ty) => {
            by_index!(op, i.dtype, "SPARSE_TO_DENSE indices", I => Ok(Built {
                outputs: vec![(dtype, shape.clone())],
                kernel: Box::new(move |ins, outs| {
                    let (idx, vals, o) = (typed::<I>(arg(ins, 0)?)?, typed::<$T>(arg(ins, 2)?)?, typed_mut::<$T>(outs[0])?);
                    let default = typed::<$T>(arg(ins, 3)?)?.first().copied().ok_or_else(|| runtime("SPARSE_TO_DENSE default value is empty"))?;
                    check_len("SPARSE_TO_DENSE indices", idx.len(), n_idx)?;
                    check_len("SPARSE_TO_DENSE values", vals.len(), n_values)?;
                    check_len("SPARSE_TO_DENSE output", o.len(), n_out)?;
                    k::sparse_to_dense(idx, nd, vals, default, &shape, o)
                        .map_err(|v| runtime(format!("SPARSE_TO_DENSE index {v} out of range for output shape {shape:?}")))
                }),
            }))
        };
    }
    match dtype {
        DType::F32 => densify!(f32),
        DType::I8 => densify!(i8),
        DType::U8 => densify!(u8),
        DType::I32 => densify!(i32),
        DType::I64 => densify!(i64),
        t => Err(op.unsupported(format!("SPARSE_TO_DENSE of {} (LiteRT takes float32, int8, uint8, int32 and int64)", t.name()))),
    }
}

/// DYNAMIC_UPDATE_SLICE: (operand, update, start indices); the start indices may be
/// computed at run time (a KV cache's write position): only shapes fix the output.
fn dynamic_update_slice(op: &OpContext<'_>) -> Result<Built> {
    let (x, u, s) = (op.input(0)?, op.input(1)?, op.input(2)?);
    let r = x.shape.len();
    if u.dtype != x.dtype {
        return Err(op.bad(format!("update is {}, operand {}", u.dtype.name(), x.dtype.name())));
    }
    if u.shape.len() != r || u.shape.iter().zip(&x.shape).any(|(a, b)| a > b) {
        return Err(op.bad(format!("update {:?} does not fit in operand {:?}", u.shape, x.shape)));
    }
    if s.shape != [r] {
        return Err(op.bad(format!("start indices of shape {:?} for an operand of rank {r}", s.shape)));
    }
    let (shape, ushape, dtype) = (x.shape.clone(), u.shape.clone(), x.dtype);
    let (n, nu) = (op.checked_elements(&shape, 1)?, op.checked_elements(&ushape, 1)?);
    by_index!(op, s.dtype, "start indices", I => by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let (x, upd, st, o) = (typed::<T>(arg(ins, 0)?)?, typed::<T>(arg(ins, 1)?)?, typed::<I>(arg(ins, 2)?)?, typed_mut::<T>(outs[0])?);
            check_len("DYNAMIC_UPDATE_SLICE operand", x.len(), n)?;
            check_len("DYNAMIC_UPDATE_SLICE update", upd.len(), nu)?;
            check_len("DYNAMIC_UPDATE_SLICE start", st.len(), shape.len())?;
            check_len("DYNAMIC_UPDATE_SLICE output", o.len(), n)?;
            let start = k::clamp_start(st, &shape, &ushape);
            k::dynamic_update_slice(x, &shape, upd, &ushape, &start, o);
            Ok(())
        }),
    })))
}

/// EMBEDDING_LOOKUP: (ids, table); output row `i` is table row `ids[i]`. A table
/// of the output's type is copied; an int8 table with a float32 output is scaled
/// (dynamic-range models).
fn embedding_lookup(op: &OpContext<'_>) -> Result<Built> {
    let (ids, v) = (op.input(0)?, op.input(1)?);
    if ids.dtype != DType::I32 || ids.shape.len() != 1 {
        return Err(op.bad(format!("ids must be a 1-D int32 tensor, got {} {:?}", ids.dtype.name(), ids.shape)));
    }
    if v.shape.len() < 2 {
        return Err(op.bad(format!("the table must have rank 2 or more, got {:?}", v.shape)));
    }
    let mut out = v.shape.clone();
    out[0] = ids.shape[0];
    let row: usize = v.shape[1..].iter().product();
    let out_type = op.outputs.first().map_or(v.dtype, |t| t.dtype);
    let (n_table, n_ids, n_out) = (op.checked_elements(&v.shape, 1)?, ids.shape[0], op.checked_elements(&out, 4)?);
    let lookup_error = move |id: i32| runtime(format!("EMBEDDING_LOOKUP id {id} out of range for a table of {} rows", n_table.checked_div(row).unwrap_or(0)));
    if out_type == DType::F32 && v.dtype == DType::I8 {
        let q = v.quant.ok_or_else(|| op.bad("int8 table without quantization parameters"))?;
        let scales = q.scale.clone();
        if scales.is_empty() || (scales.len() > 1 && scales.len() != v.shape[0]) {
            return Err(op.bad(format!("{} scales for a table of {} rows", scales.len(), v.shape[0])));
        }
        return Ok(Built {
            outputs: vec![(DType::F32, out)],
            kernel: Box::new(move |ins, outs| {
                let (ids, table, o) = (typed::<i32>(arg(ins, 0)?)?, typed::<i8>(arg(ins, 1)?)?, typed_mut::<f32>(outs[0])?);
                check_len("EMBEDDING_LOOKUP ids", ids.len(), n_ids)?;
                check_len("EMBEDDING_LOOKUP table", table.len(), n_table)?;
                check_len("EMBEDDING_LOOKUP output", o.len(), n_out)?;
                k::embedding_lookup_dequant(ids, table, row, &scales, o).map_err(lookup_error)
            }),
        });
    }
    if out_type != v.dtype {
        return Err(op.unsupported(format!("EMBEDDING_LOOKUP of a {} table into {}", v.dtype.name(), out_type.name())));
    }
    let dtype = v.dtype;
    by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (ids, table, o) = (typed::<i32>(arg(ins, 0)?)?, typed::<T>(arg(ins, 1)?)?, typed_mut::<T>(outs[0])?);
            check_len("EMBEDDING_LOOKUP ids", ids.len(), n_ids)?;
            check_len("EMBEDDING_LOOKUP table", table.len(), n_table)?;
            check_len("EMBEDDING_LOOKUP output", o.len(), n_out)?;
            k::embedding_lookup(ids, table, row, o).map_err(lookup_error)
        }),
    }))
}

/// TOPK_V2: (input, k) -> (values, int32 indices) of the k largest along the last
/// dimension, largest first, ties in index order. k computed at run time makes the
/// op data-dependent.
fn top_k(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    op.expect_outputs(2)?;
    let Some(&n) = x.shape.last() else { return Err(op.bad("TOPK_V2 input must have rank 1 or more")) };
    let kk = const_scalar(op, 1, "k")?;
    if kk < 0 || kk as u64 > n as u64 {
        return Err(op.bad(format!("k = {kk} for rows of {n} elements")));
    }
    let kk = kk as usize;
    let mut out = x.shape.clone();
    if let Some(last) = out.last_mut() {
        *last = kk;
    }
    let (dtype, n_in, n_out) = (x.dtype, op.checked_elements(&x.shape, 1)?, op.checked_elements(&out, 1)?);
    macro_rules! topk {
        ($T:ty) => {
            Ok(Built {
                outputs: vec![(dtype, out.clone()), (DType::I32, out)],
                kernel: Box::new(move |ins, outs| {
                    let x = typed::<$T>(arg(ins, 0)?)?;
                    check_len("TOPK_V2 input", x.len(), n_in)?;
                    let [v, ix] = outs else { return Err(runtime("TOPK_V2 needs two outputs")) };
                    let (v, ix) = (typed_mut::<$T>(v)?, typed_mut::<i32>(ix)?);
                    check_len("TOPK_V2 values", v.len(), n_out)?;
                    check_len("TOPK_V2 indices", ix.len(), n_out)?;
                    k::top_k(x, n, kk, v, ix);
                    Ok(())
                }),
            })
        };
    }
    match dtype {
        DType::F32 => topk!(f32),
        DType::I8 => topk!(i8),
        DType::U8 => topk!(u8),
        DType::I16 => topk!(i16),
        DType::I32 => topk!(i32),
        DType::I64 => topk!(i64),
        t => Err(op.unsupported(format!("TOPK_V2 of {}", t.name()))),
    }
}

/// ONE_HOT: (indices, depth, on_value, off_value); the depth dimension is inserted
/// at `axis` (-1: last). A depth computed at run time makes the op data-dependent.
fn one_hot(op: &OpContext<'_>) -> Result<Built> {
    let i = op.input(0)?;
    let OpParams::OneHot { axis: a } = op.op.params else { return Err(op.bad("missing OneHot options")) };
    let depth = const_scalar(op, 1, "depth")?;
    let depth = usize::try_from(depth).map_err(|_| op.bad(format!("negative depth {depth}")))?;
    let (on, off) = (op.input(2)?, op.input(3)?);
    if on.dtype != off.dtype || on.shape.iter().product::<usize>() != 1 || off.shape.iter().product::<usize>() != 1 {
        return Err(op.bad("on_value and off_value must be scalars of one type"));
    }
    let r = i.shape.len();
    let ax = if a == -1 { r } else { axis(op, i64::from(a), r + 1)? };
    let mut out = i.shape.clone();
    out.insert(ax, depth);
    let dtype = on.dtype;
    let n_out = op.checked_elements(&out, dtype.size().unwrap_or(1))?;
    let (outer, inner): (usize, usize) = (i.shape[..ax].iter().product(), i.shape[ax..].iter().product());
    by_index!(op, i.dtype, "ONE_HOT indices", I => by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (idx, o) = (typed::<I>(arg(ins, 0)?)?, typed_mut::<T>(outs[0])?);
            let scalar = |k: usize| typed::<T>(arg(ins, k)?)?.first().copied().ok_or_else(|| runtime("ONE_HOT on/off value is empty"));
            let (on, off) = (scalar(2)?, scalar(3)?);
            check_len("ONE_HOT indices", idx.len(), outer * inner)?;
            check_len("ONE_HOT output", o.len(), n_out)?;
            k::one_hot(idx, outer, depth, inner, on, off, o);
            Ok(())
        }),
    })))
}

/// RANGE: (start, limit, delta) scalars of one type; the output's length depends
/// on their values, so values computed at run time make the op data-dependent.
fn range(op: &OpContext<'_>) -> Result<Built> {
    let dtype = op.input(0)?.dtype;
    for i in 0..3 {
        let d = op.input(i)?;
        // Scalars, as LiteRT requires (it refuses one-element vectors too).
        if d.dtype != dtype || !d.shape.is_empty() {
            return Err(op.bad("start, limit and delta must be scalars of one type"));
        }
    }
    let len = match dtype {
        DType::F32 => {
            let v = |i| known(op, i).and_then(|b| typed::<f32>(b)?.first().copied().ok_or_else(|| op.bad("empty scalar")));
            k::range_len_f32(v(0)?, v(1)?, v(2)?)
        }
        DType::I32 | DType::I64 => k::range_len_int(const_scalar(op, 0, "start")?, const_scalar(op, 1, "limit")?, const_scalar(op, 2, "delta")?),
        t => return Err(op.unsupported(format!("RANGE of {}", t.name()))),
    };
    let len = len.ok_or_else(|| op.bad("RANGE delta is 0 or points away from the limit"))?;
    let len = usize::try_from(len).map_err(|_| op.bad(format!("RANGE of {len} elements")))?;
    op.checked_elements(&[len], dtype.size().unwrap_or(4))?;
    macro_rules! ranged {
        ($T:ty) => {
            Ok(Built {
                outputs: vec![(dtype, vec![len])],
                kernel: Box::new(move |ins, outs| {
                    let scalar = |k: usize| typed::<$T>(arg(ins, k)?)?.first().copied().ok_or_else(|| runtime("RANGE input is empty"));
                    let o = typed_mut::<$T>(outs[0])?;
                    check_len("RANGE output", o.len(), len)?;
                    k::range(scalar(0)?, scalar(2)?, o);
                    Ok(())
                }),
            })
        };
    }
    match dtype {
        DType::F32 => ranged!(f32),
        DType::I32 => ranged!(i32),
        _ => ranged!(i64),
    }
}

/// CUMSUM: (input, axis); running sums along the axis, `exclusive` and `reverse`
/// from the options.
fn cumsum(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::Cumsum { exclusive, reverse } = op.op.params else { return Err(op.bad("missing Cumsum options")) };
    let ax = axis(op, const_scalar(op, 1, "axis")?, x.shape.len())?;
    let (outer, len, inner) = (x.shape[..ax].iter().product::<usize>(), x.shape[ax], x.shape[ax + 1..].iter().product::<usize>());
    let (dtype, n) = (x.dtype, op.checked_elements(&x.shape, 1)?);
    macro_rules! sums {
        ($T:ty) => {
            Ok(Built {
                outputs: vec![(dtype, x.shape.clone())],
                kernel: Box::new(move |ins, outs| {
                    let (x, o) = (typed::<$T>(arg(ins, 0)?)?, typed_mut::<$T>(outs[0])?);
                    check_len("CUMSUM input", x.len(), n)?;
                    check_len("CUMSUM output", o.len(), n)?;
                    k::cumsum(x, outer, len, inner, exclusive, reverse, o);
                    Ok(())
                }),
            })
        };
    }
    match dtype {
        DType::F32 => sums!(f32),
        DType::I32 => sums!(i32),
        DType::I64 => sums!(i64),
        t => Err(op.unsupported(format!("CUMSUM of {}", t.name()))),
    }
}

/// Runs `$body` with `$T` bound to the Rust type of a WHERE condition's element
/// type (bool as its byte).
macro_rules! by_truth {
    ($op:expr, $dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::Bool | DType::U8 => {
                type $T = u8;
                $body
            }
            DType::I8 => {
                type $T = i8;
                $body
            }
            DType::I16 => {
                type $T = i16;
                $body
            }
            DType::U16 => {
                type $T = u16;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::U32 => {
                type $T = u32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::F32 => {
                type $T = f32;
                $body
            }
            t => Err($op.unsupported(format!("WHERE of a {} condition", t.name()))),
        }
    };
}

/// WHERE with one input: the int64 coordinates of the condition's true (nonzero)
/// elements, `[count, rank]`. The count depends on the values, so a condition
/// computed at run time makes the op data-dependent.
fn where_op(op: &OpContext<'_>) -> Result<Built> {
    let c = op.input(0)?;
    let (dtype, shape) = (c.dtype, c.shape.clone());
    let n = op.checked_elements(&shape, dtype.size().unwrap_or(1))?;
    let bytes = known(op, 0)?;
    by_truth!(op, dtype, T => {
        let count = k::count_true(typed::<T>(bytes)?.get(..n).ok_or_else(|| op.bad("condition holds fewer values than its shape"))?);
        let out = vec![count, shape.len()];
        let n_out = op.checked_elements(&out, 8)?;
        Ok(Built {
            outputs: vec![(DType::I64, out)],
            kernel: Box::new(move |ins, outs| {
                let (cond, o) = (typed::<T>(arg(ins, 0)?)?, typed_mut::<i64>(outs[0])?);
                check_len("WHERE condition", cond.len(), n)?;
                check_len("WHERE output", o.len(), n_out)?;
                // The output was sized from these values; a kernel run on others fails.
                check_len("WHERE true elements", k::count_true(cond) * shape.len(), n_out)?;
                k::where_coords(cond, &shape, o);
                Ok(())
            }),
        })
    })
}

/// UNIQUE: (x) -> (distinct values in first-occurrence order, index of each
/// element's value), the index int32 or int64 by `idx_out_type`. The number of
/// distinct values depends on the values: data-dependent unless `x` is constant.
fn unique(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    op.expect_outputs(2)?;
    if x.shape.len() != 1 {
        return Err(op.bad(format!("UNIQUE takes a 1-D tensor, got shape {:?}", x.shape)));
    }
    let idx_type = match op.op.params {
        OpParams::OutType(2) => DType::I32,
        OpParams::OutType(4) => DType::I64,
        OpParams::OutType(t) => return Err(op.bad(format!("idx_out_type must be int32 or int64, got type code {t}"))),
        _ => DType::I32,
    };
    let (dtype, n) = (x.dtype, x.shape[0]);
    op.checked_elements(&[n], 8)?;
    let bytes = known(op, 0)?;
    macro_rules! uniq {
        ($T:ty) => {{
            let vals = typed::<$T>(bytes)?.get(..n).ok_or_else(|| op.bad("input holds fewer values than its shape"))?;
            let distinct = k::unique(vals).0.len();
            Ok(Built {
                outputs: vec![(dtype, vec![distinct]), (idx_type, vec![n])],
                kernel: Box::new(move |ins, outs| {
                    let x = typed::<$T>(arg(ins, 0)?)?;
                    check_len("UNIQUE input", x.len(), n)?;
                    let (v, ix) = k::unique(x);
                    let [yo, io] = outs else { return Err(runtime("UNIQUE needs two outputs")) };
                    let y = typed_mut::<$T>(yo)?;
                    check_len("UNIQUE values", y.len(), v.len())?;
                    y.copy_from_slice(&v);
                    if idx_type == DType::I32 {
                        let o = typed_mut::<i32>(io)?;
                        check_len("UNIQUE indices", o.len(), n)?;
                        o.iter_mut().zip(&ix).for_each(|(o, &i)| *o = i as i32);
                    } else {
                        let o = typed_mut::<i64>(io)?;
                        check_len("UNIQUE indices", o.len(), n)?;
                        o.iter_mut().zip(&ix).for_each(|(o, &i)| *o = i as i64);
                    }
                    Ok(())
                }),
            })
        }};
    }
    match dtype {
        DType::F32 => uniq!(f32),
        DType::I8 => uniq!(i8),
        DType::U8 => uniq!(u8),
        DType::I16 => uniq!(i16),
        DType::I32 => uniq!(i32),
        DType::I64 => uniq!(i64),
        t => Err(op.unsupported(format!("UNIQUE of {}", t.name()))),
    }
}

/// SEGMENT_SUM (`kind` None: (data, sorted ids) with one id per row, output rows
/// `0..=last id`) and UNSORTED_SEGMENT_SUM/PROD/MAX/MIN ((data, ids, num_segments):
/// ids of any order whose shape is a prefix of data's, `num_segments` output
/// rows; rows with a negative id are dropped, an id of `num_segments` or more is
/// an error, as in LiteRT). Segments no row names hold the reduction's identity.
/// LiteRT's SEGMENT_SUM takes ids that start at 0 and grow by 0 or 1, so it has no
/// empty segments; ferrite refuses other ids alike.
fn segments(op: &OpContext<'_>, kind: Option<k::SegmentOp>) -> Result<Built> {
    let (x, ids) = (op.input(0)?, op.input(1)?);
    if ids.dtype != DType::I32 {
        return Err(op.bad(format!("segment ids must be int32, got {}", ids.dtype.name())));
    }
    let r = ids.shape.len();
    if r == 0 || x.shape.is_empty() {
        return Err(op.bad(format!("segment ops take ids and data of rank 1 or more, got {:?} and {:?}", ids.shape, x.shape)));
    }
    let sorted = kind.is_none();
    if (sorted && (r != 1 || x.shape.first() != Some(&ids.shape[0]))) || (!sorted && (r > x.shape.len() || x.shape[..r] != ids.shape[..])) {
        return Err(op.bad(format!("segment ids of shape {:?} for data of shape {:?}", ids.shape, x.shape)));
    }
    let n_ids = op.checked_elements(&ids.shape, 4)?;
    let segs = if let Some(_kind) = kind {
        let s = const_scalar(op, 2, "num_segments")?;
        usize::try_from(s).map_err(|_| op.bad(format!("negative num_segments {s}")))?
    } else {
        // Sorted ids: the last names the last segment. Ids computed at run time
        // (known here when the op is built on their values) fail the run, constant
        // ones the model.
        let constant = ids.constant;
        let bad_ids = |m: String| if constant { op.bad(m) } else { runtime(format!("{}: {m}", op.at())) };
        let v = typed::<i32>(known(op, 1)?)?;
        let v = v.get(..n_ids).ok_or_else(|| op.bad("segment ids hold fewer values than their shape"))?;
        if let Some(w) = v.windows(2).find(|w| !(0..=1).contains(&(i64::from(w[1]) - i64::from(w[0])))) {
            return Err(bad_ids(format!("SEGMENT_SUM ids must grow by 0 or 1, found {} after {}", w[1], w[0])));
        }
        match v.first() {
            Some(&f) if f != 0 => return Err(bad_ids(format!("SEGMENT_SUM ids must start at 0, got {f}"))),
            _ => v.last().map_or(0, |&l| l as usize + 1),
        }
    };
    let mut out = vec![segs];
    out.extend_from_slice(&x.shape[r..]);
    let inner: usize = x.shape[r..].iter().product();
    let (dtype, n_x, n_out) = (x.dtype, op.checked_elements(&x.shape, 4)?, op.checked_elements(&out, 4)?);
    let kind = kind.unwrap_or(k::SegmentOp::Sum);
    macro_rules! seg {
        ($T:ty) => {
            Ok(Built {
                outputs: vec![(dtype, out)],
                kernel: Box::new(move |ins, outs| {
                    let (d, ids, o) = (typed::<$T>(arg(ins, 0)?)?, typed::<i32>(arg(ins, 1)?)?, typed_mut::<$T>(outs[0])?);
                    check_len("segment data", d.len(), n_x)?;
                    check_len("segment ids", ids.len(), n_ids)?;
                    check_len("segment output", o.len(), n_out)?;
                    k::segment_reduce(kind, d, ids, inner, segs, o).map_err(|id| runtime(format!("segment id {id} out of range for {segs} segments")))
                }),
            })
        };
    }
    match dtype {
        DType::F32 => seg!(f32),
        DType::I32 => seg!(i32),
        t => Err(op.unsupported(format!("{} of {}", op.op.code.name(), t.name()))),
    }
}

/// MATRIX_DIAG: `[..., n]` -> `[..., n, n]` with the input on the diagonals.
fn matrix_diag(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let Some(&n) = x.shape.last() else { return Err(op.bad("MATRIX_DIAG takes a tensor of rank 1 or more")) };
    let mut out = x.shape.clone();
    out.push(n);
    let (dtype, n_in) = (x.dtype, op.checked_elements(&x.shape, 1)?);
    let n_out = op.checked_elements(&out, dtype.size().unwrap_or(1))?;
    by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (d, o) = (typed::<T>(arg(ins, 0)?)?, typed_mut::<T>(outs[0])?);
            check_len("MATRIX_DIAG input", d.len(), n_in)?;
            check_len("MATRIX_DIAG output", o.len(), n_out)?;
            // All-zero bits: 0 for every numeric type and false for bool.
            k::matrix_diag(d, n, 0 as T, o);
            Ok(())
        }),
    }))
}

/// MATRIX_SET_DIAG: (input `[..., m, n]`, diagonal `[..., min(m, n)]`) -> the input
/// with its main diagonals replaced.
fn matrix_set_diag(op: &OpContext<'_>) -> Result<Built> {
    let (x, d) = (op.input(0)?, op.input(1)?);
    let r = x.shape.len();
    if r < 2 {
        return Err(op.bad(format!("MATRIX_SET_DIAG takes a tensor of rank 2 or more, got {:?}", x.shape)));
    }
    let (m, n) = (x.shape[r - 2], x.shape[r - 1]);
    let mut want = x.shape[..r - 2].to_vec();
    want.push(m.min(n));
    if d.shape != want || d.dtype != x.dtype {
        return Err(op.bad(format!("diagonal {} {:?} for input {} {:?} (needs {want:?})", d.dtype.name(), d.shape, x.dtype.name(), x.shape)));
    }
    let (dtype, shape) = (x.dtype, x.shape.clone());
    let (n_x, n_d) = (op.checked_elements(&shape, dtype.size().unwrap_or(1))?, op.checked_elements(&want, 1)?);
    by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, shape)],
        kernel: Box::new(move |ins, outs| {
            let (x, d, o) = (typed::<T>(arg(ins, 0)?)?, typed::<T>(arg(ins, 1)?)?, typed_mut::<T>(outs[0])?);
            check_len("MATRIX_SET_DIAG input", x.len(), n_x)?;
            check_len("MATRIX_SET_DIAG diagonal", d.len(), n_d)?;
            check_len("MATRIX_SET_DIAG output", o.len(), n_x)?;
            k::matrix_set_diag(x, m, n, d, o);
            Ok(())
        }),
    }))
}

/// BROADCAST_ARGS: (shape a, shape b), 1-D int32 or int64 -> their broadcast
/// shape. Only the lengths fix the output's shape, so the values may come at run time.
// `I` is i32 or i64: the casts widen and narrow one, and are no-ops for the other.
#[allow(clippy::unnecessary_cast)]
fn broadcast_args(op: &OpContext<'_>) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype || a.shape.len() != 1 || b.shape.len() != 1 {
        return Err(op.bad(format!(
            "BROADCAST_ARGS takes two 1-D shapes of one type, got {} {:?} and {} {:?}",
            a.dtype.name(),
            a.shape,
            b.dtype.name(),
            b.shape
        )));
    }
    let (na, nb) = (a.shape[0], b.shape[0]);
    let r = na.max(nb);
    op.checked_elements(&[r], 8)?;
    by_index!(op, a.dtype, "BROADCAST_ARGS shapes", I => Ok(Built {
        outputs: vec![(a.dtype, vec![r])],
        kernel: Box::new(move |ins, outs| {
            let (x, y, o) = (typed::<I>(arg(ins, 0)?)?, typed::<I>(arg(ins, 1)?)?, typed_mut::<I>(outs[0])?);
            check_len("BROADCAST_ARGS shape 0", x.len(), na)?;
            check_len("BROADCAST_ARGS shape 1", y.len(), nb)?;
            check_len("BROADCAST_ARGS output", o.len(), r)?;
            let wide = |v: &[I]| v.iter().map(|&d| d as i64).collect::<Vec<i64>>();
            let mut res = vec![0i64; r];
            k::broadcast_args(&wide(x), &wide(y), &mut res).map_err(|(p, q)| runtime(format!("BROADCAST_ARGS: dimensions {p} and {q} do not broadcast")))?;
            o.iter_mut().zip(&res).for_each(|(o, &v)| *o = v as I);
            Ok(())
        }),
    }))
}

/// NON_MAX_SUPPRESSION_V4 (boxes, scores, max_output_size, iou_threshold,
/// score_threshold -> selected indices, count) and V5 (+ soft_nms_sigma -> selected
/// indices, their scores, count). The selections are padded with zeros to
/// max_output_size, which fixes the outputs' shapes: computed at run time it makes
/// the op data-dependent.
fn non_max_suppression(op: &OpContext<'_>, v5: bool) -> Result<Built> {
    let (b, s) = (op.input(0)?, op.input(1)?);
    op.expect_outputs(if v5 { 3 } else { 2 })?;
    if b.dtype != DType::F32 || s.dtype != DType::F32 {
        return Err(op.unsupported(format!("{} of {} boxes and {} scores", op.op.code.name(), b.dtype.name(), s.dtype.name())));
    }
    let n = match (&b.shape[..], &s.shape[..]) {
        (&[n, 4], &[m]) if n == m => n,
        _ => return Err(op.bad(format!("boxes {:?} and scores {:?} must be [n, 4] and [n]", b.shape, s.shape))),
    };
    let max_out = const_scalar(op, 2, "max_output_size")?;
    let max_out = usize::try_from(max_out).map_err(|_| op.bad(format!("negative max_output_size {max_out}")))?;
    op.checked_elements(&[max_out], 4)?;
    for i in 3..if v5 { 6 } else { 5 } {
        let t = op.input(i)?;
        if t.dtype != DType::F32 || t.shape.iter().product::<usize>() != 1 {
            return Err(op.bad(format!("input {i} must be a float32 scalar")));
        }
    }
    let scalar =
        |ins: &[Option<&[u8]>], i: usize| -> Result<f32> { typed::<f32>(arg(ins, i)?)?.first().copied().ok_or_else(|| runtime("empty NMS threshold")) };
    let mut outputs = vec![(DType::I32, vec![max_out])];
    if v5 {
        outputs.push((DType::F32, vec![max_out]));
    }
    outputs.push((DType::I32, vec![]));
    Ok(Built {
        outputs,
        kernel: Box::new(move |ins, outs| {
            let (boxes, scores) = (typed::<f32>(arg(ins, 0)?)?, typed::<f32>(arg(ins, 1)?)?);
            check_len("NMS boxes", boxes.len(), 4 * n)?;
            check_len("NMS scores", scores.len(), n)?;
            let (iou, thr) = (scalar(ins, 3)?, scalar(ins, 4)?);
            let sigma = if v5 { scalar(ins, 5)? } else { 0.0 };
            // LiteRT's bounds on the thresholds.
            if !(0.0..=1.0).contains(&iou) || sigma < 0.0 {
                return Err(runtime(format!("NMS iou_threshold {iou} must lie in [0, 1] and soft_nms_sigma {sigma} be 0 or more")));
            }
            let mut scratch = vec![0.0f32; if v5 { 0 } else { max_out }];
            let (ix, rest) = outs.split_first_mut().ok_or_else(|| runtime("NMS outputs missing"))?;
            let (sel_scores, count) = match rest {
                [sc, c] => (typed_mut::<f32>(sc)?, c),
                [c] => (&mut scratch[..], c),
                _ => return Err(runtime("NMS outputs missing")),
            };
            let ix = typed_mut::<i32>(ix)?;
            check_len("NMS selected indices", ix.len(), max_out)?;
            check_len("NMS selected scores", sel_scores.len(), max_out)?;
            let k = ferrite_kernels::detection::non_max_suppression(boxes, scores, max_out, iou, thr, sigma, ix, sel_scores);
            let c = typed_mut::<i32>(count)?;
            check_len("NMS count", c.len(), 1)?;
            c[0] = k as i32;
            Ok(())
        }),
    })
}
