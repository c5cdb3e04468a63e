//! Aliasing: a shape-only op (RESHAPE, SQUEEZE, EXPAND_DIMS) moves no data, so its
//! output shares its input's memory — the input's constant, or its arena slot,
//! which the memory plan then gives to the alias root alone.

use super::{Compilation, Loc, OpRun};
use crate::model::{BuiltinOp as B, Op, OpCode};

/// Makes op `oi`'s output an alias of its input when the op only changes the
/// shape, and the output is not a variable (which keeps its own memory) and has
/// the input's type. Runs after the op is built, so the output's shape is known.
/// True when aliased (the op needs no step).
pub(super) fn alias(c: &mut Compilation<'_>, oi: usize) -> bool {
    let g = c.g;
    let op = &g.ops[oi];
    if !is_shape_only(op) {
        return false;
    }
    let (Some(&Some(src)), Some(&dst)) = (op.inputs.first(), op.outputs.first()) else { return false };
    if c.tensors[src].dtype != c.tensors[dst].dtype || g.tensors[dst].is_variable {
        return false;
    }
    match c.tensors[src].loc.clone() {
        loc @ (Loc::Model(_) | Loc::Owned(_)) => c.tensors[dst].loc = loc,
        // Chains collapse onto the root: the plan sizes and places roots only.
        _ => c.alias_of[dst] = c.alias_of[src],
    }
    c.aliased_ops += 1;
    c.assignment[oi] = OpRun::Alias;
    true
}

fn is_shape_only(op: &Op) -> bool {
    matches!(op.code, OpCode::Builtin(B::RESHAPE | B::SQUEEZE | B::EXPAND_DIMS))
}
