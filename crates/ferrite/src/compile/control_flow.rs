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
        (B::ASSIGN_VARIABLE, _) => Work::AssignVariable,
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
    });
    c.assignment[oi] = OpRun::Executor;
    Ok(true)
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
