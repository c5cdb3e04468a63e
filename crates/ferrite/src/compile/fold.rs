//! Constant folding: an op whose inputs are all constant (or a SHAPE, whose result
//! depends only on static shapes) runs once at prepare, on the kernel its backend
//! built, and its outputs become constants owned by the compiled graph. Constants
//! made at prepare (folded, dequantized, realigned) are freed as soon as nothing
//! reads them any more, keeping peak memory during prepare near one layer's worth.

use std::sync::Arc;

use super::assign::Assigned;
use super::{bytes_of, AlignedBytes, Compilation, Loc, OpRun, Step, TensorSlot};
use crate::backend::{BackendContext, PackKey, Packing};
use crate::error::{Detail, Error, Location, Result};
use crate::model::{BuiltinOp as B, OpCode, Subgraph};

/// Runs op `oi` now when it can be folded, its outputs becoming owned constants.
/// `held` is where its inputs are. True when folded (the op needs no step).
pub(super) fn fold(c: &mut Compilation<'_>, ctx: &mut BackendContext, oi: usize, held: &[Option<Loc>], built: &mut Assigned) -> Result<bool> {
    let (g, sg) = (c.g, c.sg);
    let op = &g.ops[oi];
    // Variables change between runs: whatever writes one runs every time.
    if !(built.all_const || op.code == OpCode::Builtin(B::SHAPE)) || op.outputs.iter().any(|&o| g.tensors[o].is_variable) {
        return Ok(false);
    }
    // Random ops draw new numbers at every run, whatever their inputs.
    if matches!(op.code, OpCode::Builtin(B::RANDOM_UNIFORM | B::RANDOM_STANDARD_NORMAL | B::MULTINOMIAL)) {
        return Ok(false);
    }
    let location = || Location::op(sg, oi, op.code.name());
    let ins: Vec<Option<&[u8]>> = (0..op.inputs.len()).map(|k| c.value(held, k)).collect();
    let mut evaluate = || -> Result<Vec<AlignedBytes>> {
        // Sized against the session limit before anything is allocated.
        let mut outs: Vec<AlignedBytes> = op
            .outputs
            .iter()
            .map(|&t| {
                let n = bytes_of(c.tensors[t].dtype, &c.tensors[t].shape, &c.limits, || format!("subgraph {sg} op {oi} ({})", op.code.name()))?;
                Ok(AlignedBytes::zeroed(n))
            })
            .collect::<Result<_>>()?;
        let mut views: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.bytes_mut()).collect();
        (built.kernel)(&ins, &mut views).map_err(|e| Error::InvalidModel(Detail::at(location(), format!("evaluating constant op: {e}"))))?;
        Ok(outs)
    };
    // An op on the file's own constants gives the same values in every session of
    // the model (fp16 weights converted, sparse ones densified): evaluated once for
    // all of them. SHAPE reads input shapes and stays per session.
    let from_file = op.code != OpCode::Builtin(B::SHAPE) && held.iter().flatten().all(|l| matches!(l, Loc::Model(_)));
    // (Single-output ops: each session then holds the value itself, as its graph's
    // constant, and the cache only finds it while one does.)
    let outs: Vec<Arc<AlignedBytes>> = match op.outputs[..] {
        [only] if from_file => {
            let key = PackKey { subgraph: sg, tensor: only, with: None, packing: Packing::Folded };
            let one = || evaluate()?.pop().ok_or_else(|| Error::InvalidModel(Detail::at(location(), "constant op without an output".to_string())));
            vec![ctx.prepared(key, "fold constants", one)?]
        }
        _ => evaluate()?.into_iter().map(Arc::new).collect(),
    };
    for (&t, o) in op.outputs.iter().zip(outs) {
        c.tensors[t].loc = Loc::Owned(o);
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
            if c.last_reader[t] == oi && !c.read_at_run[t] && unneeded(k) && !g.outputs.contains(&t) {
                match &c.tensors[t].loc {
                    Loc::Owned(_) => c.tensors[t].loc = Loc::None,
                    // The file's constant stays where it is (a later reader of the same
                    // bytes faults them in again); only its resident pages go, with
                    // those of its sparse index arrays when it was stored sparse.
                    Loc::Model(r) => {
                        c.unread_model_ranges.push(r.clone());
                        if let Some(sp) = &g.tensors[t].sparsity {
                            c.unread_model_ranges.extend(sp.index_ranges_in(c.bytes));
                        }
                    }
                    _ => {}
                }
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
        if let Some(io) = &st.io {
            io.reads.iter().for_each(|&t| keep[t] = true);
            continue;
        }
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

#[cfg(test)]
mod tests {
    use super::super::test_util::{compile_cpu, compile_on, owned_f32};
    use super::*;
    use crate::backend::select::Backends;
    use ferrite_format::writer::{Activation, BuiltinOperator as W, ModelSpec, OpCode as WOp, Options, TensorSpec, TensorType};

    const ADD: Options = Options::Binary { activation: Activation::NONE };

    /// k1 + k2 -> s; (NEG s -> t when `negate`); x * (t or s) -> y, x the input.
    fn constant_subgraph(negate: bool) -> ModelSpec {
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[3]));
        let k1 = m.add_tensor(TensorSpec::const_f32("k1", &[3], &[1.0, 2.0, 3.0]));
        let k2 = m.add_tensor(TensorSpec::const_f32("k2", &[3], &[10.0, 20.0, 30.0]));
        let s = m.add_tensor(TensorSpec::activation("s", TensorType::FLOAT32, &[3]));
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[3]));
        m.add_op(WOp::Builtin(W::ADD), &[k1, k2], &[s], ADD);
        let mut factor = s;
        if negate {
            factor = m.add_tensor(TensorSpec::activation("t", TensorType::FLOAT32, &[3]));
            m.add_op(WOp::Builtin(W::NEG), &[s], &[factor], Options::None);
        }
        m.add_op(WOp::Builtin(W::MUL), &[x, factor], &[y], ADD);
        m.inputs = vec![x];
        m.outputs = vec![y];
        m
    }

    #[test]
    fn a_constant_op_is_evaluated_once_at_prepare() {
        let (_, cg) = compile_cpu(&constant_subgraph(false)).unwrap();
        assert_eq!(cg.folded_ops, 1);
        assert_eq!(cg.assignment, [OpRun::Folded, OpRun::Backend("cpu")]);
        // Only the MUL, which reads x, is left to run.
        assert_eq!(cg.steps.iter().map(|s| s.op).collect::<Vec<_>>(), [1]);
        assert_eq!(owned_f32(&cg.tensors[3].loc), Some(vec![11.0, 22.0, 33.0]));
    }

    #[test]
    fn a_constant_chain_folds_and_frees_what_only_folded_ops_read() {
        let (_, cg) = compile_cpu(&constant_subgraph(true)).unwrap();
        assert_eq!(cg.folded_ops, 2);
        assert_eq!(owned_f32(&cg.tensors[5].loc), Some(vec![-11.0, -22.0, -33.0]));
        // s was read only by the folded NEG: freed once the NEG ran.
        assert!(matches!(cg.tensors[3].loc, Loc::None), "{:?}", cg.tensors[3].loc);
        // The model's own constants are never freed.
        assert!(matches!(cg.tensors[1].loc, Loc::Model(_)));
    }

    #[test]
    fn shape_folds_without_constant_inputs() {
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 5]));
        let s = m.add_tensor(TensorSpec::activation("s", TensorType::INT32, &[2]));
        m.add_op(WOp::Builtin(W::SHAPE), &[x], &[s], Options::None);
        m.inputs = vec![x];
        m.outputs = vec![s];
        let (_, cg) = compile_cpu(&m).unwrap();
        assert_eq!(cg.assignment, [OpRun::Folded]);
        let Loc::Owned(b) = &cg.tensors[1].loc else { panic!("SHAPE not folded: {:?}", cg.tensors[1].loc) };
        assert_eq!(b.bytes(), [2i32.to_le_bytes(), 5i32.to_le_bytes()].concat());
    }

    #[test]
    fn a_folded_constant_is_sized_against_the_session_limit() {
        let mut m = constant_subgraph(false);
        // k1 + k2 of 1,000 floats each: 4,000 bytes over a 2,000-byte limit.
        m.tensors[1] = TensorSpec::const_f32("k1", &[1000], &[1.0; 1000]);
        m.tensors[2] = TensorSpec::const_f32("k2", &[1000], &[2.0; 1000]);
        m.tensors[3].shape = vec![1000];
        let backends = Backends::new(&[], &[], &[]).unwrap();
        let err = compile_on(&m, &backends, super::super::Limits { max_arena_bytes: 2000, shared_scratch: false, fuse_chains: true }).map(|_| ()).unwrap_err();
        assert!(matches!(err, Error::ResourceLimit(_)), "{err}");
        assert!(err.to_string().contains("subgraph 0 op 0 (ADD)"), "{err}");
    }
}
