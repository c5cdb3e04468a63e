//! Control-flow lowering: IF, WHILE and CALL_ONCE become executor steps holding
//! their child subgraphs, each compiled here for the shapes its operands have; the
//! resource-variable ops are run by the executor too (VAR_HANDLE becomes a
//! constant, the variable's id in the session).

use std::sync::Arc;

use super::{bytes_of, compile_at, AlignedBytes, Child, Compilation, Env, Loc, OpRun, Step, Work};
use crate::backend::BackendContext;
use crate::error::{Error, Result};
use crate::model::{BuiltinOp as B, DType, OpCode};
use crate::ops::OpParams;
use smallvec::SmallVec;

/// Lowers op `oi` when the executor runs it; false for every other op. `held` is
/// where the op's inputs are (constants reach IF's branches as constants).
pub(super) fn lower(c: &mut Compilation<'_>, env: &Env<'_>, ctx: &mut BackendContext, oi: usize, held: &[Option<Loc>], depth: usize) -> Result<bool> {
    let (g, sg) = (c.g, c.sg);
    let op = &g.ops[oi];
    let OpCode::Builtin(code) = op.code else { return Ok(false) };
    let at = || format!("subgraph {sg} op {oi} ({})", op.code.name());
    let work = match (code, &op.params) {
        (B::IF, OpParams::If { then_subgraph, else_subgraph }) => {
            let operands = &op.inputs[1.min(op.inputs.len())..];
            let n = op.outputs.len();
            // Constant operands reach the branches as constants (IF passes them
            // unchanged, unlike WHILE's loop-carried values).
            let consts = held.get(1..).unwrap_or(&[]);
            let then = child(c, env, ctx, oi, *then_subgraph, operands, consts, n, depth)?;
            let otherwise = child(c, env, ctx, oi, *else_subgraph, operands, consts, n, depth)?;
            let outs = |ch: &Child| ch.graph.output_specs(env.model);
            if outs(&then) != outs(&otherwise) || outs(&then).len() != op.outputs.len() {
                return Err(Error::Unsupported(format!("{}: branches produce different outputs", at()).into()));
            }
            for (&t, (dtype, shape)) in op.outputs.iter().zip(outs(&then)) {
                c.tensors[t].dtype = dtype;
                c.tensors[t].shape = shape;
            }
            Work::If { then: Box::new(then), otherwise: Box::new(otherwise) }
        }
        (B::WHILE, OpParams::While { cond_subgraph, body_subgraph }) => {
            let cond = child(c, env, ctx, oi, *cond_subgraph, &op.inputs, &[], 1, depth)?;
            let body = child(c, env, ctx, oi, *body_subgraph, &op.inputs, &[], op.inputs.len(), depth)?;
            let vars: Vec<(DType, Vec<usize>)> = op
                .inputs
                .iter()
                .map(|t| {
                    t.map(|t| (c.tensors[t].dtype, c.tensors[t].shape.clone()))
                        .ok_or_else(|| Error::InvalidModel(format!("{}: missing loop variable", at()).into()))
                })
                .collect::<Result<_>>()?;
            if body.graph.output_specs(env.model) != vars || op.outputs.len() != vars.len() {
                return Err(Error::Unsupported(format!("{}: loop variables change shape (dynamic loop shapes are not supported yet)", at()).into()));
            }
            if !matches!(cond.graph.output_specs(env.model).first(), Some((DType::Bool, s)) if s.iter().product::<usize>() == 1) {
                return Err(Error::InvalidModel(format!("{}: condition subgraph must produce one bool", at()).into()));
            }
            let mut next = Vec::with_capacity(vars.len());
            for (&t, (dtype, shape)) in op.outputs.iter().zip(&vars) {
                c.tensors[t].dtype = *dtype;
                c.tensors[t].shape = shape.clone();
                next.push(AlignedBytes::zeroed(bytes_of(*dtype, shape, &c.limits, at)?));
            }
            Work::While { cond: Box::new(cond), body: Box::new(body), next, flag: AlignedBytes::zeroed(1) }
        }
        (B::CALL_ONCE, OpParams::CallOnce { init_subgraph }) => {
            Work::CallOnce { init: Box::new(child(c, env, ctx, oi, *init_subgraph, &[], &[], 0, depth)?), ran_at: None }
        }
        (B::VAR_HANDLE, OpParams::VarHandle { container, shared_name }) => {
            // The handle is a constant: the variable's id in the session. No step.
            let id = ctx.variables.id(&format!("{container}/{shared_name}"));
            let t = *op.outputs.first().ok_or_else(|| Error::InvalidModel(format!("{}: no output", at()).into()))?;
            c.tensors[t].dtype = DType::Resource;
            c.tensors[t].shape = vec![];
            c.tensors[t].loc = Loc::Owned(Arc::new(AlignedBytes::from_slice(&(id as i32).to_le_bytes())));
            c.assignment[oi] = OpRun::Executor;
            return Ok(true);
        }
        (B::READ_VARIABLE, _) => {
            let t = *op.outputs.first().ok_or_else(|| Error::InvalidModel(format!("{}: no output", at()).into()))?;
            if g.tensors[t].shape_signature.iter().any(|&d| d < 0) {
                return Err(Error::Unsupported(format!("{}: variable of unknown shape", at()).into()));
            }
            Work::ReadVariable
        }
        (B::ASSIGN_VARIABLE, _) => match assign_in_place(c, oi, &at)? {
            Some(step) => {
                c.steps.push(step);
                c.assignment[oi] = OpRun::Executor;
                return Ok(true);
            }
            None => Work::AssignVariable,
        },
        _ => return Ok(false),
    };
    c.steps.push(Step {
        op: oi,
        work,
        inputs: SmallVec::new(),
        prepacked: SmallVec::new(),
        outputs: SmallVec::new(),
        extra: SmallVec::new(),
        substituted: SmallVec::new(),
        io: None,
        views: Default::default(),
    });
    c.assignment[oi] = OpRun::Executor;
    Ok(true)
}

/// ASSIGN_VARIABLE op `oi` as one step with the kernel computing its value, when
/// that value is read by nothing else and its producer is the step just built (a
/// streaming model's state shifted by a frame: the STRIDED_SLICE of a
/// CONCATENATION, assigned back). The producer's kernel then writes the variable
/// itself: its output takes no arena memory, and the run saves a step and a copy.
/// The producer is marked fused into the assignment; the step reads the
/// producer's inputs in its place (input 1 substituted, the rest as extra inputs).
/// None leaves the assignment as it was (a copy of its value).
fn assign_in_place(c: &mut Compilation<'_>, oi: usize, at: &dyn Fn() -> String) -> Result<Option<Step>> {
    let g = c.g;
    let op = &g.ops[oi];
    let Some(&Some(value)) = op.inputs.get(1) else { return Ok(None) };
    let p = c.producer_of[value];
    let Some(last) = c.steps.last() else { return Ok(None) };
    if p == usize::MAX || last.op != p || c.readers_of[value] != 1 || g.tensors[value].is_variable || c.alias_of[value] != value {
        return Ok(None);
    }
    let producer = &g.ops[p];
    // A plain kernel of a host backend, with one output and its own inputs as the
    // op lists them (a GPU op is run by its segment; a substituted, prepacked or
    // fused input would need its bookkeeping carried over).
    let host = matches!(c.assignment[p], OpRun::Backend(b) if b != "gpu");
    let plain = matches!(last.work, Work::Kernel(_)) && last.io.is_none() && last.extra.is_empty() && last.substituted.is_empty() && last.prepacked.is_empty();
    let step_index = c.steps.len() - 1;
    let awaited = c.pending_epilogues.iter().any(|e| e.step == step_index);
    let Some(Some(first)) = producer.inputs.first().copied() else { return Ok(None) };
    if !host || !plain || awaited || producer.outputs.len() != 1 || producer.inputs.iter().any(Option::is_none) {
        return Ok(None);
    }
    let len = bytes_of(c.tensors[value].dtype, &c.tensors[value].shape, &c.limits, at)?;
    let Some(Step { work: Work::Kernel(kernel), .. }) = c.steps.pop() else { return Ok(None) };
    c.assignment[p] = OpRun::Fused { into: oi };
    c.fused_ops += 1;
    let mut substituted = SmallVec::new();
    substituted.push((1, first));
    Ok(Some(Step {
        op: oi,
        work: Work::AssignComputed { kernel, len },
        inputs: SmallVec::new(),
        prepacked: SmallVec::new(),
        outputs: SmallVec::new(),
        extra: producer.inputs[1..].iter().flatten().copied().collect(),
        substituted,
        io: None,
        views: Default::default(),
    }))
}

/// The inputs of kernel op `oi` that are READ_VARIABLE outputs only it reads: the
/// kernel reads those variables itself (a streaming model's state, concatenated
/// with the new frame), so the reads' steps and copies go. Each such read is
/// marked fused into `oi`, its step removed, and the input slot substituted by
/// the resource handle; returned as (slot, bytes) for `Work::KernelOnVariables`.
///
/// Only where nothing between the read and `oi` may assign that variable (an
/// ASSIGN_VARIABLE of another, known variable is fine; control flow, whose
/// children may assign anything, is not), so the kernel sees the value the read
/// would have copied. `prepacked` slots are not read at run time: left alone.
pub(super) fn read_in_place(
    c: &mut Compilation<'_>,
    oi: usize,
    prepacked: &[usize],
    substituted: &mut SmallVec<[(usize, usize); 1]>,
) -> SmallVec<[(usize, usize); 2]> {
    let g = c.g;
    let mut reads = SmallVec::new();
    if !matches!(c.assignment[oi], OpRun::Backend(b) if b != "gpu") {
        return reads;
    }
    // The variable a handle tensor names, when it is a VAR_HANDLE's constant.
    let variable = |c: &Compilation<'_>, t: usize| match &c.tensors[t].loc {
        Loc::Owned(b) if c.tensors[t].dtype == DType::Resource => Some(b.bytes().to_vec()),
        _ => None,
    };
    for (k, input) in g.ops[oi].inputs.iter().enumerate() {
        let Some(t) = *input else { continue };
        let r = c.producer_of[t];
        if r == usize::MAX || c.readers_of[t] != 1 || prepacked.contains(&k) || substituted.iter().any(|s| s.0 == k) || c.alias_of[t] != t {
            continue;
        }
        if !matches!(g.ops[r].code, OpCode::Builtin(B::READ_VARIABLE)) || c.assignment[r] != OpRun::Executor {
            continue;
        }
        let Some(&Some(handle)) = g.ops[r].inputs.first() else { continue };
        let Some(id) = variable(c, handle) else { continue };
        let may_write = g.ops[r + 1..oi].iter().any(|o| match o.code {
            OpCode::Builtin(B::ASSIGN_VARIABLE) => o.inputs.first().copied().flatten().is_none_or(|h| variable(c, h).is_none_or(|v| v == id)),
            OpCode::Builtin(B::IF | B::WHILE | B::CALL_ONCE) => true,
            OpCode::Builtin(_) => false,
            // A custom op is not known to leave variables alone.
            _ => true,
        });
        let Some(si) = c.steps.iter().rposition(|st| st.op == r) else { continue };
        let Ok(len) = bytes_of(c.tensors[t].dtype, &c.tensors[t].shape, &c.limits, String::new) else { continue };
        if may_write || !matches!(c.steps[si].work, Work::ReadVariable) {
            continue;
        }
        c.steps.remove(si);
        // Kernels waiting for an epilogue name their step by index.
        for e in &mut c.pending_epilogues {
            if e.step > si {
                e.step -= 1;
            }
        }
        c.assignment[r] = OpRun::Fused { into: oi };
        c.fused_ops += 1;
        substituted.push((k, handle));
        reads.push((k, len));
    }
    reads
}

/// Compiles subgraph `sub`, called by op `oi` with `operands` (their shapes so far)
/// and expecting `n_out` outputs. Children run on the parent's buffers, so their
/// signature must match the call exactly.
#[allow(clippy::too_many_arguments)]
fn child(
    c: &Compilation<'_>,
    env: &Env<'_>,
    ctx: &mut BackendContext,
    oi: usize,
    sub: usize,
    operands: &[Option<usize>],
    consts: &[Option<Loc>],
    n_out: usize,
    depth: usize,
) -> Result<Child> {
    let sg = c.sg;
    let shapes: Vec<Vec<usize>> = operands.iter().map(|t| t.map(|t| c.tensors[t].shape.clone()).unwrap_or_default()).collect();
    let s = env.model.subgraphs.get(sub).ok_or_else(|| Error::InvalidModel(format!("subgraph {sg} op {oi}: subgraph {sub} does not exist").into()))?;
    if s.inputs.len() != shapes.len() || s.outputs.len() != n_out {
        return Err(Error::InvalidModel(
            format!(
                "subgraph {sg} op {oi}: subgraph {sub} takes {} inputs and gives {} outputs, the op passes {} and expects {n_out}",
                s.inputs.len(),
                s.outputs.len(),
                shapes.len()
            )
            .into(),
        ));
    }
    // The child reads the parent's bytes as its own input types.
    for (k, (&t, &i)) in operands.iter().zip(&s.inputs).enumerate() {
        if let Some(t) = t.filter(|&t| c.tensors[t].dtype != s.tensors[i].dtype) {
            return Err(Error::InvalidModel(
                format!("subgraph {sg} op {oi}: operand {k} is {} but subgraph {sub} input {k} is {}", c.tensors[t].dtype.name(), s.tensors[i].dtype.name())
                    .into(),
            ));
        }
    }
    compile_at(env, sub, &shapes, consts, ctx, depth + 1).map(Child::new)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::compile_cpu;
    use super::super::CompiledGraph;
    use super::*;
    use ferrite_format::writer::{Activation, BuiltinOperator as W, ModelSpec, OpCode as WOp, Options, TensorSpec, TensorType};

    /// A graph of one unary op: x ([2, 3] float) -> y (of `out_shape`).
    fn unary(code: W, out_shape: &[i32]) -> ModelSpec {
        let mut g = ModelSpec::default();
        let x = g.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 3]));
        let y = g.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, out_shape));
        if code == W::RESHAPE {
            let s = g.add_tensor(TensorSpec::const_i32("shape", &[1], &[6]));
            g.add_op(WOp::Builtin(code), &[x, s], &[y], Options::None);
        } else {
            g.add_op(WOp::Builtin(code), &[x], &[y], Options::None);
        }
        g.inputs = vec![x];
        g.outputs = vec![y];
        g
    }

    /// IF(c, x or a constant) -> y with branches `then` (subgraph 1) and `otherwise` (2).
    fn if_model(then: ModelSpec, otherwise: ModelSpec, constant_operand: bool) -> ModelSpec {
        let mut m = ModelSpec::default();
        let c = m.add_tensor(TensorSpec::activation("c", TensorType::BOOL, &[1]));
        let x = if constant_operand {
            m.add_tensor(TensorSpec::const_f32("k", &[2, 3], &[-1.0, 2.0, -3.0, 4.0, -5.0, 6.0]))
        } else {
            m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 3]))
        };
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1]));
        m.add_op(WOp::Builtin(W::IF), &[c, x], &[y], Options::If { then_subgraph: 1, else_subgraph: 2 });
        m.inputs = if constant_operand { vec![c] } else { vec![c, x] };
        m.outputs = vec![y];
        m.subgraphs = vec![then, otherwise];
        m
    }

    fn children(cg: &CompiledGraph) -> Vec<&CompiledGraph> {
        cg.steps.iter().flat_map(|s| s.children()).collect()
    }

    #[test]
    fn if_becomes_an_executor_step_with_both_branches_compiled() {
        let (_, cg) = compile_cpu(&if_model(unary(W::RELU, &[2, 3]), unary(W::NEG, &[2, 3]), false)).unwrap();
        assert_eq!(cg.assignment, [OpRun::Executor]);
        assert!(matches!(cg.steps[0].work, Work::If { .. }));
        let kids = children(&cg);
        assert_eq!(kids.iter().map(|k| k.subgraph).collect::<Vec<_>>(), [1, 2]);
        assert!(kids.iter().all(|k| k.assignment == [OpRun::Backend("cpu")] && k.steps.len() == 1));
        // The output takes the branches' shape, not the one the file declares.
        assert_eq!(cg.tensors[2].shape, [2, 3]);
        assert!(cg.assignments().contains(&(2, 0, OpRun::Backend("cpu"))));
    }

    #[test]
    fn constant_operands_reach_the_branches_as_constants() {
        let (_, cg) = compile_cpu(&if_model(unary(W::RELU, &[2, 3]), unary(W::NEG, &[2, 3]), true)).unwrap();
        // Each branch's op reads only a constant, so it is folded there.
        assert!(children(&cg).iter().all(|k| k.assignment == [OpRun::Folded]));
    }

    #[test]
    fn branches_must_agree_and_recursion_stops() {
        let err = compile_cpu(&if_model(unary(W::RELU, &[2, 3]), unary(W::RESHAPE, &[6]), false)).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("branches produce different outputs"), "{err}");
        // The then-branch is the main graph itself.
        let mut m = if_model(unary(W::RELU, &[2, 3]), unary(W::NEG, &[2, 3]), false);
        m.ops[0].options = Options::If { then_subgraph: 0, else_subgraph: 2 };
        let err = compile_cpu(&m).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("takes 2 inputs"), "{err}");
        // A branch that calls itself (its condition, written by nothing, reads as false).
        let mut looping = unary(W::RELU, &[2, 3]);
        let c = looping.add_tensor(TensorSpec::activation("c", TensorType::BOOL, &[1]));
        let z = looping.add_tensor(TensorSpec::activation("z", TensorType::FLOAT32, &[2, 3]));
        looping.add_op(WOp::Builtin(W::IF), &[c, 0], &[z], Options::If { then_subgraph: 1, else_subgraph: 1 });
        looping.outputs = vec![z];
        let err = compile_cpu(&if_model(looping, unary(W::NEG, &[2, 3]), false)).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("nested deeper than"), "{err}");
    }

    #[test]
    fn while_compiles_its_condition_and_body_for_the_loop_variables() {
        // i := i + 1 while i < 10.
        let mut m = ModelSpec::default();
        let i = m.add_tensor(TensorSpec::activation("i", TensorType::FLOAT32, &[1]));
        let o = m.add_tensor(TensorSpec::activation("o", TensorType::FLOAT32, &[1]));
        m.add_op(WOp::Builtin(W::WHILE), &[i], &[o], Options::While { cond_subgraph: 1, body_subgraph: 2 });
        m.inputs = vec![i];
        m.outputs = vec![o];
        let mut cond = ModelSpec::default();
        let ci = cond.add_tensor(TensorSpec::activation("i", TensorType::FLOAT32, &[1]));
        let ten = cond.add_tensor(TensorSpec::const_f32("ten", &[1], &[10.0]));
        let cb = cond.add_tensor(TensorSpec::activation("b", TensorType::BOOL, &[1]));
        cond.add_op(WOp::Builtin(W::LESS), &[ci, ten], &[cb], Options::None);
        (cond.inputs, cond.outputs) = (vec![ci], vec![cb]);
        let mut body = ModelSpec::default();
        let bi = body.add_tensor(TensorSpec::activation("i", TensorType::FLOAT32, &[1]));
        let one = body.add_tensor(TensorSpec::const_f32("one", &[1], &[1.0]));
        let bo = body.add_tensor(TensorSpec::activation("o", TensorType::FLOAT32, &[1]));
        body.add_op(WOp::Builtin(W::ADD), &[bi, one], &[bo], Options::Binary { activation: Activation::NONE });
        (body.inputs, body.outputs) = (vec![bi], vec![bo]);
        m.subgraphs = vec![cond, body];
        let (_, cg) = compile_cpu(&m).unwrap();
        assert!(matches!(&cg.steps[0].work, Work::While { next, .. } if next.len() == 1 && next[0].bytes().len() == 4));
        assert_eq!(children(&cg).iter().map(|k| k.subgraph).collect::<Vec<_>>(), [1, 2]);

        // A body that gives back a loop variable of another type is refused.
        let mut cast = ModelSpec::default();
        let bi = cast.add_tensor(TensorSpec::activation("i", TensorType::FLOAT32, &[1]));
        let bo = cast.add_tensor(TensorSpec::activation("o", TensorType::INT32, &[1]));
        cast.add_op(WOp::Builtin(W::CAST), &[bi], &[bo], Options::None);
        (cast.inputs, cast.outputs) = (vec![bi], vec![bo]);
        m.subgraphs[1] = cast;
        let err = compile_cpu(&m).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("loop variables change shape"), "{err}");
    }

    #[test]
    fn a_variable_handle_is_a_constant_and_other_ops_are_left_alone() {
        let mut m = ModelSpec::default();
        let h = m.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
        let v = m.add_tensor(TensorSpec::activation("v", TensorType::FLOAT32, &[2]));
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2]));
        m.add_op(WOp::Builtin(W::VAR_HANDLE), &[], &[h], Options::VarHandle { container: String::new(), shared_name: "state".into() });
        m.add_op(WOp::Builtin(W::READ_VARIABLE), &[h], &[v], Options::None);
        m.add_op(WOp::Builtin(W::RELU), &[v], &[y], Options::None);
        // The read's value is a graph output too: it keeps its step and its copy.
        m.outputs = vec![y, v];
        let (_, cg) = compile_cpu(&m).unwrap();
        assert_eq!(cg.assignment, [OpRun::Executor, OpRun::Executor, OpRun::Backend("cpu")]);
        // No step for the handle: its output is the variable's id.
        assert_eq!(cg.steps.iter().map(|s| s.op).collect::<Vec<_>>(), [1, 2]);
        assert!(matches!(cg.steps[0].work, Work::ReadVariable));
        assert!(matches!(cg.steps[1].work, Work::Kernel(_)));
        assert!(matches!(&cg.tensors[0].loc, Loc::Owned(b) if b.bytes().len() == 4));
        assert_eq!(cg.tensors[0].dtype, DType::Resource);

        // Read only by the RELU: the RELU reads the variable itself, through the handle.
        m.outputs = vec![y];
        let (_, cg) = compile_cpu(&m).unwrap();
        assert_eq!(cg.assignment, [OpRun::Executor, OpRun::Fused { into: 2 }, OpRun::Backend("cpu")]);
        assert_eq!(cg.steps.iter().map(|s| s.op).collect::<Vec<_>>(), [2]);
        assert!(matches!(&cg.steps[0].work, Work::KernelOnVariables { reads, .. } if reads[..] == [(0, 8)]));
        assert_eq!(cg.steps[0].substituted[..], [(0, 0)]);
        assert!(matches!(cg.tensors[1].loc, Loc::None), "the read's value takes no memory");
    }
}
