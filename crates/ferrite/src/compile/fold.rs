//! Constant folding: an op whose inputs are all constant (or a SHAPE, whose result
//! depends only on static shapes) runs once at prepare, on the kernel its backend
//! built, and its outputs become constants owned by the compiled graph. Constants
//! made at prepare (folded, dequantized, realigned) are freed as soon as nothing
//! reads them any more, keeping peak memory during prepare near one layer's worth.

use std::sync::Arc;

use super::assign::Assigned;
use super::{bytes_of, AlignedBytes, Compilation, Loc, OpRun, Step, TensorSlot};
use crate::error::{Detail, Error, Location, Result};
use crate::model::{BuiltinOp as B, OpCode, Subgraph};

/// Runs op `oi` now when it can be folded, its outputs becoming owned constants.
/// `held` is where its inputs are. True when folded (the op needs no step).
pub(super) fn fold(c: &mut Compilation<'_>, oi: usize, held: &[Option<Loc>], built: &mut Assigned) -> Result<bool> {
    let (g, sg) = (c.g, c.sg);
    let op = &g.ops[oi];
    // Variables change between runs: whatever writes one runs every time.
    if !(built.all_const || op.code == OpCode::Builtin(B::SHAPE)) || op.outputs.iter().any(|&o| g.tensors[o].is_variable) {
        return Ok(false);
    }
    let location = || Location::op(sg, oi, op.code.name());
    let ins: Vec<Option<&[u8]>> = (0..op.inputs.len()).map(|k| c.value(held, k)).collect();
    // Sized against the session limit before anything is allocated.
    let mut outs: Vec<AlignedBytes> = op
        .outputs
        .iter()
        .map(|&t| {
            let n = bytes_of(c.tensors[t].dtype, &c.tensors[t].shape, &c.limits, || format!("subgraph {sg} op {oi} ({})", op.code.name()))?;
            Ok(AlignedBytes::zeroed(n))
        })
        .collect::<Result<_>>()?;
    {
        let mut views: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.bytes_mut()).collect();
        (built.kernel)(&ins, &mut views).map_err(|e| Error::InvalidModel(Detail::at(location(), format!("evaluating constant op: {e}"))))?;
    }
    for (&t, o) in op.outputs.iter().zip(outs) {
        c.tensors[t].loc = Loc::Owned(Arc::new(o));
    }
    c.folded_ops += 1;
    c.assignment[oi] = OpRun::Folded;
    release_consumed(c, oi, |_| true);
    Ok(true)
}

/// Frees prepare-time constants (folded, dequantized) right after their last reader
/// `oi` is built, when that reader does not need them at run time (`unneeded(input
/// position)`: a folded op, or a kernel holding a packing) and no step built earlier
/// reads them at run time either.
pub(super) fn release_consumed(c: &mut Compilation<'_>, oi: usize, unneeded: impl Fn(usize) -> bool) {
    let g = c.g;
    for (k, i) in g.ops[oi].inputs.iter().enumerate() {
        if let Some(t) = *i {
            if c.last_reader[t] == oi && !c.read_at_run[t] && unneeded(k) && matches!(c.tensors[t].loc, Loc::Owned(_)) && !g.outputs.contains(&t) {
                c.tensors[t].loc = Loc::None;
            }
        }
    }
}

/// After planning: frees the constants made at prepare that no step reads at run
/// time (their readers were folded too, or keep a packing) and that are neither a
/// graph input nor output.
pub(super) fn release_unread_constants(g: &Subgraph, steps: &[Step], tensors: &mut [TensorSlot]) {
    let mut keep = vec![false; tensors.len()];
    for st in steps {
        for (k, i) in g.ops[st.op].inputs.iter().enumerate() {
            if let (Some(t), Some(_)) = (i, &st.inputs[k]) {
                keep[st.substituted.iter().find(|s| s.0 == k).map_or(*t, |s| s.1)] = true;
            }
        }
        for &t in &st.extra {
            keep[t] = true;
        }
    }
    for &t in g.outputs.iter().chain(&g.inputs) {
        keep[t] = true;
    }
    for (t, slot) in tensors.iter_mut().enumerate() {
        if matches!(slot.loc, Loc::Owned(_)) && !keep[t] {
            slot.loc = Loc::None;
        }
    }
}
