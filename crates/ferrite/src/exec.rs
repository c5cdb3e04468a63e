//! The executor: runs a compiled subgraph's steps over its arena — kernels,
//! control flow (IF, WHILE, CALL_ONCE), resource variables — and the
//! data-dependent tail, whose ops are built when their input values exist.
//! Nothing here allocates for a static-shape model: every location was resolved
//! at prepare.

use smallvec::SmallVec;

use crate::backend::select::Backends;
use crate::backend::{BackendContext, Built, CustomOpRegistry, InputDesc, OpContext};
use crate::compile::{build_op, bytes_of, AlignedBytes, Child, CompiledGraph, DynValue, Limits, Loc, OutPlan, Src, Work};
use crate::error::{Error, Location, Result};
use crate::memory;
use crate::model::{DType, Model};
use crate::variables::resource_id;

impl Child {
    /// Runs on bound inputs and outputs (read and written in place).
    pub(crate) fn run(&mut self, model: &Model, inputs: &[&[u8]], outputs: &mut [&mut [u8]], env: &mut DynEnv<'_>) -> Result<()> {
        let Child { graph, arena } = self;
        execute(graph, model, bytemuck::cast_slice_mut(arena), Some((inputs, outputs)), env, None).map(|_| ())
    }
}

/// Most iterations a WHILE may run, so a hostile model cannot hang a session.
pub const MAX_WHILE_ITERATIONS: usize = 10_000_000;

/// What the executor needs to build ops at run time.
pub struct DynEnv<'a> {
    /// Backends, in order of preference.
    pub backends: &'a Backends,
    /// Custom ops.
    pub custom: &'a CustomOpRegistry,
    /// The session's backend context.
    pub ctx: &'a mut BackendContext,
    /// Limits for run-time allocations.
    pub limits: Limits,
}

/// Caller buffers bound for one run: graph inputs, and graph outputs to fill.
pub type Bound<'b, 'c> = (&'b [&'b [u8]], &'b mut [&'c mut [u8]]);

/// Runs the compiled steps over `arena`. Allocates nothing: locations were resolved
/// at prepare and the per-step views live on the stack. With `bound` buffers, kernels
/// read the caller's inputs and write outputs in place where the plan allows; the
/// rest are copied after the run, and the number of bytes copied is returned.
pub fn execute(
    g: &mut CompiledGraph,
    model: &Model,
    arena: &mut [u8],
    mut bound: Option<Bound<'_, '_>>,
    env: &mut DynEnv<'_>,
    mut profile: Option<&mut Vec<(usize, std::time::Duration)>>,
) -> Result<usize> {
    let bytes = model.bytes();
    let is_bound = bound.is_some();
    let subgraph = g.subgraph;
    let op_error = |op: usize, e: Error| e.located(Location::op(subgraph, op, model.subgraphs[subgraph].ops[op].code.name()));
    for st in g.steps.iter_mut() {
        // The common step: at most one output, in the arena. Its views come
        // from two splits of the arena, without the general path's sorting and
        // searching (this loop runs once per op per invocation).
        let single = match &st.outputs[..] {
            [] => Some((0, 0)),
            [(off, len, tag)] if !(is_bound && tag.is_some()) => Some((*off, *len)),
            _ => None,
        };
        if let (Some((off, len)), None) = (single, profile.as_ref()) {
            if off.checked_add(len).is_none_or(|end| end > arena.len()) {
                return Err(Error::Runtime(format!("internal: output region {off}+{len} leaves the arena").into()));
            }
            let (head, rest) = arena.split_at_mut(off);
            let (out, tail) = rest.split_at_mut(len);
            let (head, tail) = (&*head, &*tail);
            let end = off + len;
            let view = |o: usize, l: usize| -> Result<&[u8]> {
                if o + l <= off {
                    Ok(&head[o..o + l])
                } else if o >= end && o - end + l <= tail.len() {
                    Ok(&tail[o - end..o - end + l])
                } else {
                    Err(Error::Runtime(format!("internal: input region {o}+{l} overlaps an output of the same op").into()))
                }
            };
            let mut ins: SmallVec<[Option<&[u8]>; 16]> = SmallVec::new();
            for src in &st.inputs {
                ins.push(match src {
                    None => None,
                    Some(Src::Input(k, o, l)) => match &bound {
                        Some((inputs, _)) => Some(inputs[*k]),
                        None => Some(view(*o, *l)?),
                    },
                    Some(Src::Arena(o, l)) => Some(view(*o, *l)?),
                    Some(Src::Model(r)) => bytes.get(r.clone()),
                    Some(Src::Owned(b)) => Some(b.bytes()),
                });
            }
            let result =
                if st.outputs.is_empty() { run_work(&mut st.work, &ins, &mut [], model, env) } else { run_work(&mut st.work, &ins, &mut [out], model, env) };
            result.map_err(|e| op_error(st.op, e))?;
            continue;
        }
        let in_place = |o: &(usize, usize, Option<usize>)| is_bound && o.2.is_some();
        let ranges: SmallVec<[(usize, usize); 4]> = st.outputs.iter().filter(|o| !in_place(o)).map(|o| (o.0, o.1)).collect();
        let (arena_outs, gaps) = memory::split_regions(arena, &ranges)?;
        let mut ins: SmallVec<[Option<&[u8]>; 16]> = SmallVec::new();
        for src in &st.inputs {
            ins.push(match src {
                None => None,
                Some(Src::Input(k, off, len)) => match &bound {
                    Some((inputs, _)) => Some(inputs[*k]),
                    None => Some(memory::find_in_gaps(&gaps, *off, *len)?),
                },
                Some(Src::Arena(off, len)) => Some(memory::find_in_gaps(&gaps, *off, *len)?),
                Some(Src::Model(r)) => bytes.get(r.clone()),
                Some(Src::Owned(b)) => Some(b.bytes()),
            });
        }
        // Merge arena views and caller buffers back into op output order.
        let mut outs: SmallVec<[&mut [u8]; 4]> = SmallVec::new();
        let mut arena_outs = arena_outs.into_iter();
        let mut callers: SmallVec<[(usize, &mut [u8]); 4]> = SmallVec::new();
        if let Some((_, outputs)) = bound.as_mut() {
            for (k, buf) in outputs.iter_mut().enumerate() {
                if st.outputs.iter().any(|o| o.2 == Some(k)) {
                    callers.push((k, &mut **buf));
                }
            }
        }
        for o in &st.outputs {
            let view = match o.2 {
                Some(k) if is_bound => callers.iter().position(|c| c.0 == k).map(|p| std::mem::take(&mut callers[p].1)),
                _ => arena_outs.next(),
            };
            outs.push(view.ok_or_else(|| Error::Runtime("internal: output view missing".into()))?);
        }
        let started = profile.is_some().then(std::time::Instant::now);
        let result = run_work(&mut st.work, &ins, &mut outs, model, env);
        if let (Some(p), Some(t0)) = (profile.as_deref_mut(), started) {
            p.push((st.op, t0.elapsed()));
        }
        result.map_err(|e| op_error(st.op, e))?;
    }
    if g.dynamic.is_some() {
        if bound.is_some() {
            return Err(Error::Unsupported("run_with() on a model with data-dependent shapes: use run() and output()".into()));
        }
        run_dynamic_tail(g, model, arena, env)?;
    }
    let mut copied = 0;
    if let Some((inputs, outputs)) = bound {
        for (k, plan) in g.out_plans.iter().enumerate() {
            let OutPlan::Copy(src) = plan else { continue };
            let from: &[u8] = match src {
                Src::Arena(off, len) => &arena[*off..*off + *len],
                Src::Input(i, _, _) => inputs[*i],
                Src::Model(r) => bytes.get(r.clone()).unwrap_or(&[]),
                Src::Owned(b) => b.bytes(),
            };
            let n = from.len().min(outputs[k].len());
            outputs[k][..n].copy_from_slice(&from[..n]);
            copied += n;
        }
    }
    Ok(copied)
}

/// Runs one step's work on its input and output views.
fn run_work(work: &mut Work, ins: &[Option<&[u8]>], outs: &mut [&mut [u8]], model: &Model, env: &mut DynEnv<'_>) -> Result<()> {
    match work {
        Work::Kernel(k) => k(ins, outs),
        Work::If { then, otherwise } => {
            let cond = ins.first().copied().flatten().and_then(|c| c.first()).ok_or_else(|| Error::Runtime("IF condition is empty".into()))?;
            let args: SmallVec<[&[u8]; 16]> = ins.get(1..).unwrap_or(&[]).iter().map(|i| i.unwrap_or(&[])).collect();
            let branch = if *cond != 0 { then } else { otherwise };
            branch.run(model, &args, outs, env)
        }
        Work::While { cond, body, next, flag } => run_while(model, ins, outs, cond, body, next, flag, env),
        Work::CallOnce { init, ran_at } => {
            if *ran_at != Some(env.ctx.variables.generation()) {
                init.run(model, &[], &mut [], env)?;
                *ran_at = Some(env.ctx.variables.generation());
            }
            Ok(())
        }
        Work::ReadVariable => {
            let id = resource_id(ins.first().copied().flatten().unwrap_or(&[]))?;
            let v = env.ctx.variables.get(id)?;
            match outs.first_mut() {
                Some(o) if o.len() == v.len() => {
                    o.copy_from_slice(v);
                    Ok(())
                }
                Some(o) => Err(Error::Runtime(format!("variable {id} holds {} bytes, the read expects {}", v.len(), o.len()).into())),
                None => Ok(()),
            }
        }
        Work::AssignVariable => {
            let id = resource_id(ins.first().copied().flatten().unwrap_or(&[]))?;
            env.ctx.variables.set(id, ins.get(1).copied().flatten().unwrap_or(&[]))
        }
    }
}

/// Builds and runs the data-dependent ops one by one: each op sees the actual
/// values of its inputs, its outputs are allocated for the shapes it reports, and
/// run-time tensors are freed after their last reader.
fn run_dynamic_tail(g: &mut CompiledGraph, model: &Model, arena: &[u8], env: &mut DynEnv<'_>) -> Result<()> {
    let sub = &model.subgraphs[g.subgraph];
    let bytes = model.bytes();
    let CompiledGraph { tensors, dynamic, subgraph, .. } = g;
    let Some(tail) = dynamic.as_mut() else { return Ok(()) };
    for v in tail.values.iter_mut() {
        *v = None;
    }
    for oi in tail.first_op..sub.ops.len() {
        let op = &sub.ops[oi];
        let mut outs: Vec<(usize, DynValue)> = Vec::with_capacity(op.outputs.len());
        {
            let mut views: Vec<Option<&[u8]>> = Vec::with_capacity(op.inputs.len());
            let mut descs: Vec<Option<InputDesc<'_>>> = Vec::with_capacity(op.inputs.len());
            for &i in &op.inputs {
                let Some(t) = i else {
                    views.push(None);
                    descs.push(None);
                    continue;
                };
                let (dtype, shape, data, constant): (DType, &[usize], &[u8], bool) = match (&tail.values[t], &tensors[t].loc) {
                    (Some(v), _) => (v.dtype, &v.shape, v.data.bytes(), false),
                    (None, Loc::Arena { offset, len }) => (tensors[t].dtype, &tensors[t].shape, &arena[*offset..*offset + *len], false),
                    (None, Loc::Model(r)) => (tensors[t].dtype, &tensors[t].shape, bytes.get(r.clone()).unwrap_or(&[]), true),
                    (None, Loc::Owned(b)) => (tensors[t].dtype, &tensors[t].shape, b.bytes(), true),
                    (None, Loc::None) => return Err(Error::Runtime(format!("subgraph {subgraph} op {oi}: input tensor {t} has no value").into())),
                };
                views.push(Some(data));
                descs.push(Some(InputDesc {
                    tensor: t,
                    dtype,
                    shape: shape.to_vec(),
                    value: Some(data),
                    constant,
                    quant: sub.tensors[t].quant.as_ref(),
                    sparsity: sub.tensors[t].sparsity.as_ref(),
                }));
            }
            let octx = OpContext {
                subgraph: *subgraph,
                op_index: oi,
                op,
                inputs: descs,
                outputs: op.outputs.iter().map(|&o| &sub.tensors[o]).collect(),
                custom_options: model.custom_options(op),
                epilogue: None,
                input_pad: None,
                max_bytes: env.limits.max_arena_bytes,
            };
            let (Built { outputs, mut kernel }, _, _) = build_op(&octx, env.backends, env.custom, env.ctx)?;
            for (&t, (dtype, shape)) in op.outputs.iter().zip(outputs) {
                let n = bytes_of(dtype, &shape, &env.limits, || octx.at())?;
                outs.push((t, DynValue { dtype, shape, data: AlignedBytes::zeroed(n) }));
            }
            let mut out_views: Vec<&mut [u8]> = outs.iter_mut().map(|(_, v)| v.data.bytes_mut()).collect();
            kernel(&views, &mut out_views).map_err(|e| e.located(octx.location()))?;
        }
        for (t, v) in outs {
            tail.values[t] = Some(v);
        }
        for &t in op.inputs.iter().flatten() {
            if tail.last_use[t] == oi && !sub.outputs.contains(&t) {
                tail.values[t] = None;
            }
        }
    }
    Ok(())
}

/// WHILE: loop variables live in the op's outputs; the body writes the next values
/// into `next`, which are then copied back.
#[allow(clippy::too_many_arguments)]
fn run_while(
    model: &Model,
    ins: &[Option<&[u8]>],
    outs: &mut [&mut [u8]],
    cond: &mut Child,
    body: &mut Child,
    next: &mut [AlignedBytes],
    flag: &mut AlignedBytes,
    env: &mut DynEnv<'_>,
) -> Result<()> {
    for (o, i) in outs.iter_mut().zip(ins) {
        let i = i.ok_or_else(|| Error::Runtime("WHILE loop variable is missing".into()))?;
        o.copy_from_slice(i);
    }
    for _ in 0..MAX_WHILE_ITERATIONS {
        {
            let vars: SmallVec<[&[u8]; 8]> = outs.iter().map(|o| &**o).collect();
            cond.run(model, &vars, &mut [flag.bytes_mut()], env)?;
        }
        if flag.bytes().first().is_none_or(|&b| b == 0) {
            return Ok(());
        }
        {
            let vars: SmallVec<[&[u8]; 8]> = outs.iter().map(|o| &**o).collect();
            let mut out_views: SmallVec<[&mut [u8]; 8]> = next.iter_mut().map(|n| n.bytes_mut()).collect();
            body.run(model, &vars, &mut out_views, env)?;
        }
        for (o, n) in outs.iter_mut().zip(next.iter()) {
            o.copy_from_slice(n.bytes());
        }
    }
    Err(Error::Runtime(format!("WHILE ran {MAX_WHILE_ITERATIONS} iterations without stopping").into()))
}
