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

#[cfg(test)]
mod tests {
    use super::super::fusion::tests::{op, tensor};
    use super::super::test_util::{compile_cpu, start};
    use super::super::OutPlan;
    use super::*;
    use crate::model::{DType, Subgraph};
    use crate::ops::OpParams;
    use ferrite_format::writer::{BuiltinOperator as W, ModelSpec, OpCode as WOp, Options, TensorSpec, TensorType};

    /// x -RELU-> a -RESHAPE-> b -SQUEEZE-> c; k (constant) -EXPAND_DIMS-> d.
    /// Tensors x=0, a=1, b=2, c=3, k=4, d=5; k's 24 bytes start the model bytes.
    fn graph() -> Subgraph {
        let mut k = tensor(DType::F32, &[2, 3]);
        k.data = Some(0..24);
        Subgraph {
            name: String::new(),
            tensors: vec![
                tensor(DType::F32, &[2, 3]),
                tensor(DType::F32, &[2, 3]),
                tensor(DType::F32, &[1, 6]),
                tensor(DType::F32, &[6]),
                k,
                tensor(DType::F32, &[1, 2, 3]),
            ],
            ops: vec![
                op(B::RELU, &[0], &[1], OpParams::None),
                op(B::RESHAPE, &[1], &[2], OpParams::Reshape { new_shape: Some(vec![1, 6]) }),
                op(B::SQUEEZE, &[2], &[3], OpParams::Squeeze { dims: vec![0] }),
                op(B::EXPAND_DIMS, &[4], &[5], OpParams::None),
            ],
            inputs: vec![0],
            outputs: vec![3, 5],
        }
    }

    #[test]
    fn shape_only_ops_share_their_inputs_memory_and_chains_share_the_root() {
        let g = graph();
        let bytes = [0u8; 32];
        let mut c = start(&g, &bytes);
        assert!(!alias(&mut c, 0), "RELU computes: not an alias");
        assert!(alias(&mut c, 1));
        assert_eq!(c.alias_of[2], 1);
        // The SQUEEZE of the RESHAPE's output shares the RELU's output, not the RESHAPE's.
        assert!(alias(&mut c, 2));
        assert_eq!(c.alias_of[3], 1);
        // A shape-only op of a constant is that constant, where the model keeps it.
        assert!(alias(&mut c, 3));
        assert!(matches!(&c.tensors[5].loc, Loc::Model(r) if *r == (0..24)));
        assert_eq!(c.alias_of[5], 5);
        assert_eq!(c.aliased_ops, 3);
        assert_eq!(c.assignment[1..], [OpRun::Alias; 3]);
        assert_eq!(c.assignment[0], OpRun::Dynamic, "the pass leaves other ops alone");
    }

    #[test]
    fn variables_and_type_changes_keep_their_own_memory() {
        let mut g = graph();
        g.tensors[2].is_variable = true;
        let bytes = [0u8; 32];
        let mut c = start(&g, &bytes);
        assert!(!alias(&mut c, 1), "a variable output is written, not shared");
        let mut g = graph();
        g.tensors[2].dtype = DType::I32;
        let mut c = start(&g, &bytes);
        assert!(!alias(&mut c, 1), "a reshape declared to change the type is left to its kernel");
        assert_eq!((c.alias_of[2], c.aliased_ops), (2, 0));
    }

    fn reshape_model(outputs_a_too: bool, relu_first: bool) -> ModelSpec {
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 3]));
        let a = m.add_tensor(TensorSpec::activation("a", TensorType::FLOAT32, &[2, 3]));
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[6]));
        let shape = m.add_tensor(TensorSpec::const_i32("shape", &[1], &[6]));
        let first = if relu_first { W::RELU } else { W::RESHAPE };
        let first_inputs: &[i32] = if relu_first { &[x] } else { &[x, shape] };
        m.add_op(WOp::Builtin(first), first_inputs, &[a], Options::None);
        m.add_op(WOp::Builtin(W::RESHAPE), &[a, shape], &[y], Options::None);
        m.inputs = vec![x];
        m.outputs = if outputs_a_too { vec![a, y] } else { vec![y] };
        m
    }

    fn arena_offset(loc: &Loc) -> usize {
        match loc {
            Loc::Arena { offset, .. } => *offset,
            other => panic!("not in the arena: {other:?}"),
        }
    }

    #[test]
    fn an_alias_chain_ending_at_a_graph_output() {
        // x -RESHAPE-> a -RESHAPE-> y: no step at all; y is x's memory, so a bound
        // output buffer gets a copy (writing it in place would need a step).
        let (_, cg) = compile_cpu(&reshape_model(false, false)).unwrap();
        assert_eq!((cg.aliased_ops, cg.steps.len()), (2, 0));
        assert_eq!(arena_offset(&cg.tensors[2].loc), arena_offset(&cg.tensors[0].loc));
        assert!(matches!(cg.out_plans[..], [OutPlan::Copy(_)]));

        // x -RELU-> a -RESHAPE-> y: the RELU writes the output's bound buffer itself.
        let (_, cg) = compile_cpu(&reshape_model(false, true)).unwrap();
        assert_eq!((cg.aliased_ops, cg.steps.len()), (1, 1));
        assert!(matches!(cg.out_plans[..], [OutPlan::Direct]));
        assert_eq!(cg.steps[0].outputs[0].2, Some(0));

        // With a and y both graph outputs, two bound buffers share one memory: both
        // are copied, the RELU writes the arena.
        let (_, cg) = compile_cpu(&reshape_model(true, true)).unwrap();
        assert!(matches!(cg.out_plans[..], [OutPlan::Copy(_), OutPlan::Copy(_)]));
        assert_eq!(cg.steps[0].outputs[0].2, None);
        assert_eq!(arena_offset(&cg.tensors[1].loc), arena_offset(&cg.tensors[2].loc));
    }
}
