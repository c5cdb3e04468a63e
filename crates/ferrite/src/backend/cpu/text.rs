//! Legacy text-model ops: HASHTABLE_LOOKUP (sorted int32 keys, rows of any
//! non-string type, a hit flag per key) and LSH_PROJECTION (FarmHash-based
//! locality-sensitive hashing of any input's rows). Part of the index family
//! (its dispatch falls through to this one, under the `op-index` feature): they
//! are lookups and hashes of indices, in a file of their own.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::text as k;

use super::runtime;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The text family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::HASHTABLE_LOOKUP => hashtable_lookup(op),
        B::LSH_PROJECTION => lsh_projection(op),
        // Ops on string tensors, in a file of their own.
        _ => return super::strings::build(code, op, ctx),
    })
}

fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(runtime(format!("{what} holds {got} bytes, the op needs {want}")));
    }
    Ok(())
}

/// What both backends check of a HASHTABLE_LOOKUP: (lookup ids, keys, values) ->
/// (rows, hits). Returns the output shape, the bytes per value row and the
/// value type.
pub(crate) fn hashtable_lookup_shapes(op: &OpContext<'_>) -> Result<(Vec<usize>, usize, DType)> {
    let (lookup, keys, values) = (op.input(0)?, op.input(1)?, op.input(2)?);
    for (name, d) in [("lookup", lookup), ("keys", keys)] {
        if d.dtype != DType::I32 || d.shape.len() != 1 {
            return Err(op.bad(format!("{name} must be a 1-D int32 tensor, got {} {:?}", d.dtype.name(), d.shape)));
        }
    }
    if values.shape.first() != Some(&keys.shape[0]) {
        return Err(op.bad(format!("values of shape {:?} for {} keys", values.shape, keys.shape[0])));
    }
    let size = values.dtype.size().filter(|_| values.dtype != DType::Resource);
    let Some(size) = size else {
        return Err(op.unsupported(format!("HASHTABLE_LOOKUP of {} values (string values are not implemented)", values.dtype.name())));
    };
    if let Some(t) = op.outputs.first().filter(|t| t.dtype != values.dtype) {
        return Err(op.bad(format!("output of type {} for {} values", t.dtype.name(), values.dtype.name())));
    }
    if op.outputs.get(1).is_some_and(|t| t.dtype != DType::U8) {
        return Err(op.bad("the hits output must be uint8"));
    }
    let mut out = values.shape.clone();
    out[0] = lookup.shape[0];
    op.checked_elements(&out, size)?;
    // Rows are moved as bytes: `checked_elements` counts elements, so times the size.
    let row = op.checked_elements(&values.shape[1..], size)? * size;
    Ok((out, row, values.dtype))
}

/// HASHTABLE_LOOKUP: each id's value row found by binary search in the sorted
/// keys (a zero row and hit 0 when absent).
fn hashtable_lookup(op: &OpContext<'_>) -> Result<Built> {
    let (out, row, dtype) = hashtable_lookup_shapes(op)?;
    let (n_lookup, n_keys) = (op.input(0)?.shape[0], op.input(1)?.shape[0]);
    Ok(Built {
        outputs: vec![(dtype, out), (DType::U8, vec![n_lookup])],
        kernel: Box::new(move |ins, outs| {
            let (lookup, keys, values) = (typed::<i32>(arg(ins, 0)?)?, typed::<i32>(arg(ins, 1)?)?, arg(ins, 2)?);
            check_len("HASHTABLE_LOOKUP lookup", lookup.len() * 4, n_lookup * 4)?;
            check_len("HASHTABLE_LOOKUP keys", keys.len() * 4, n_keys * 4)?;
            check_len("HASHTABLE_LOOKUP values", values.len(), n_keys * row)?;
            let [o, hits] = outs else { return Err(runtime("HASHTABLE_LOOKUP has two outputs")) };
            check_len("HASHTABLE_LOOKUP output", o.len(), n_lookup * row)?;
            check_len("HASHTABLE_LOOKUP hits", hits.len(), n_lookup)?;
            k::hashtable_lookup(lookup, keys, values, row, o, hits);
            Ok(())
        }),
    })
}

/// What both backends check of an LSH_PROJECTION: (hash seeds `[num_hash,
/// num_bits]`, input of rank >= 1, optional weight per input row). Returns
/// (num_hash, num_bits, rows, bytes per row, sparse, output shape).
pub(crate) fn lsh_shapes(op: &OpContext<'_>) -> Result<(usize, usize, usize, usize, bool, Vec<usize>)> {
    let OpParams::LshProjection { kind } = op.op.params else { return Err(op.bad("missing LSHProjection options")) };
    let sparse = match kind {
        1 => true,
        2 => false,
        k => return Err(op.bad(format!("unknown LSH projection type {k} (1 sparse, 2 dense)"))),
    };
    let (hash, input) = (op.input(0)?, op.input(1)?);
    let [num_hash, num_bits] = hash.shape[..] else { return Err(op.bad(format!("hash seeds must be 2-D, got {:?}", hash.shape))) };
    if hash.dtype != DType::F32 {
        return Err(op.unsupported(format!("{} hash seeds (LiteRT reads them as float32)", hash.dtype.name())));
    }
    if num_bits > 32 {
        return Err(op.bad(format!("{num_bits} bits per hash function (at most 32)")));
    }
    let Some(&rows) = input.shape.first() else { return Err(op.bad("the input must have rank 1 or more")) };
    let size = input.dtype.size().filter(|_| input.dtype != DType::Resource);
    let Some(size) = size else { return Err(op.unsupported(format!("LSH_PROJECTION of a {} input", input.dtype.name()))) };
    // Rows are hashed as bytes: `checked_elements` counts elements, so times the size.
    let row = op.checked_elements(&input.shape[1..], size)? * size;
    if let Some(w) = op.opt_input(2) {
        if w.dtype != DType::F32 || w.shape[..] != [rows] {
            return Err(op.bad(format!("weight must be float32 of shape [{rows}], got {} {:?}", w.dtype.name(), w.shape)));
        }
    }
    let out = if sparse { vec![num_hash] } else { vec![op.checked_elements(&[num_hash, num_bits], 4)?] };
    Ok((num_hash, num_bits, rows, row, sparse, out))
}

/// LSH_PROJECTION: int32 signatures (sparse) or sign bits (dense).
fn lsh_projection(op: &OpContext<'_>) -> Result<Built> {
    let (num_hash, num_bits, rows, row, sparse, out) = lsh_shapes(op)?;
    let weighted = op.opt_input(2).is_some();
    let n_out = out[0];
    Ok(Built {
        outputs: vec![(DType::I32, out)],
        kernel: Box::new(move |ins, outs| {
            let (hash, input) = (typed::<f32>(arg(ins, 0)?)?, arg(ins, 1)?);
            check_len("LSH_PROJECTION hash", hash.len() * 4, num_hash * num_bits * 4)?;
            check_len("LSH_PROJECTION input", input.len(), rows * row)?;
            let weight = if weighted { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
            if let Some(w) = weight {
                check_len("LSH_PROJECTION weight", w.len() * 4, rows * 4)?;
            }
            let o = typed_mut::<i32>(outs.first_mut().ok_or_else(|| runtime("LSH_PROJECTION has one output"))?)?;
            check_len("LSH_PROJECTION output", o.len() * 4, n_out * 4)?;
            k::lsh_projection(hash, num_bits, input, rows, row, weight, sparse, o);
            Ok(())
        }),
    })
}
