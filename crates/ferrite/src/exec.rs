//! The executor: runs a compiled subgraph's steps over its arena — kernels,
//! control flow (IF, WHILE, CALL_ONCE), resource variables — and the
//! data-dependent tail, whose ops are built when their input values exist.
//! Nothing here allocates for a static-shape model: every location was resolved
//! at prepare.

use smallvec::SmallVec;

use crate::backend::select::Backends;
use crate::backend::{BackendContext, Built, CustomOpRegistry, InputDesc, OpContext};
use crate::compile::{build_op, bytes_of, AlignedBytes, Child, CompiledGraph, DynValue, Limits, Loc, OpRun, OutPlan, SegmentIo, Src, Step, TensorSlot, Work};
use crate::error::{Error, Location, Result};
use crate::memory::{self, ArenaRef, RunArena};
use crate::model::{DType, Model, Subgraph};
use crate::observe::{self, tensor_view, CallFrame, Flow, Hooks, OpByOpHandle, OpEvent, TensorState, TensorView};
use crate::variables::resource_id;

impl Child {
    /// Runs on bound inputs and outputs (read and written in place).
    ///
    /// A child whose shapes depend on values (a WHILE body that slices at its loop
    /// counter) cannot run bound: its tail reads tensors where the plan put them and
    /// writes outputs whose size is known only after it ran. With callbacks, a child
    /// runs unbound too: views of ops that run no step read tensors from the arena,
    /// which a bound run bypasses for its inputs and in-place outputs. Then its inputs
    /// are copied into their arena slots, it runs unbound, and its outputs are copied
    /// out (the copies cost only such runs); an output whose size is not the one the
    /// caller planned is an error.
    pub(crate) fn run(&mut self, model: &Model, inputs: &[&[u8]], outputs: &mut [&mut [u8]], env: &mut DynEnv<'_>) -> Result<()> {
        let Child { graph, arena } = self;
        let arena: &mut [u8] = bytemuck::cast_slice_mut(arena);
        let observed = env.hooks.as_deref().is_some_and(|h| h.wants_views());
        if graph.dynamic.is_none() && !observed {
            return execute(graph, model, RunArena::whole(arena), Some((inputs, outputs)), env).map(|_| ());
        }
        let sg = graph.subgraph;
        let sub = &model.subgraphs[sg];
        let wrong =
            |what: &str, k: usize, want: usize, got: usize| Error::Runtime(format!("subgraph {sg} {what} {k}: {want} bytes expected, {got} given").into());
        for (k, &t) in sub.inputs.iter().enumerate() {
            // Constant operands (an IF's) were compiled into the child: nothing to copy.
            if let (Loc::Arena { offset, len }, Some(src)) = (&graph.tensors[t].loc, inputs.get(k)) {
                let dst = arena.get_mut(*offset..offset + len).ok_or_else(|| wrong("input", k, *len, 0))?;
                if src.len() != *len {
                    return Err(wrong("input", k, *len, src.len()));
                }
                dst.copy_from_slice(src);
            }
        }
        execute(graph, model, RunArena::whole(&mut *arena), None, env)?;
        if stopped(env) {
            return Ok(());
        }
        for (k, &t) in sub.outputs.iter().enumerate() {
            let src: &[u8] = match (graph.dynamic.as_ref().and_then(|d| d.values[t].as_ref()), &graph.tensors[t].loc) {
                (Some(v), _) => v.data.bytes(),
                (None, Loc::Arena { offset, len }) => arena.get(*offset..*offset + *len).unwrap_or(&[]),
                (None, Loc::Model(r)) => model.bytes().get(r.clone()).unwrap_or(&[]),
                (None, Loc::Owned(b)) => b.bytes(),
                (None, Loc::None) => &[],
            };
            let dst = outputs.get_mut(k).ok_or_else(|| wrong("output", k, src.len(), 0))?;
            if dst.len() != src.len() {
                return Err(wrong("output", k, src.len(), dst.len()));
            }
            dst.copy_from_slice(src);
        }
        Ok(())
    }
}

/// Whether a hook stopped the run (a control-flow op's child may have).
fn stopped(env: &DynEnv<'_>) -> bool {
    env.hooks.as_deref().is_some_and(|h| h.stopped())
}

/// Runs `f` with `frame` on the hooks' call path.
fn in_frame<T>(env: &mut DynEnv<'_>, frame: CallFrame, f: impl FnOnce(&mut DynEnv<'_>) -> T) -> T {
    if let Some(h) = env.hooks.as_deref_mut() {
        h.enter(frame);
    }
    let r = f(env);
    if let Some(h) = env.hooks.as_deref_mut() {
        h.leave();
    }
    r
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
    /// Whoever watches the run (trace, profile, callbacks). None on the plain path,
    /// which then reads no clock and builds no view.
    pub hooks: Option<&'a mut dyn Hooks>,
}

/// Caller buffers bound for one run: graph inputs, and graph outputs to fill.
pub type Bound<'b, 'c> = (&'b [&'b [u8]], &'b mut [&'c mut [u8]]);

/// Runs the compiled steps over `arena` (the session's own region and the scratch
/// lent for the run, addressed by the plan's offsets). Allocates nothing: locations were resolved
/// at prepare and the per-step views live on the stack. With `bound` buffers, kernels
/// read the caller's inputs and write outputs in place where the plan allows; the
/// rest are copied after the run, and the number of bytes copied is returned.
///
/// With hooks, each step is announced before and after it runs. Where they want
/// views (callbacks on the session's own subgraph, which runs on the arena), every op
/// of the subgraph is announced once, in execution order: ops without a step of their
/// own (folded, aliases, a folded PAD) where their index falls between the steps, an
/// epilogue right after the convolution that computed it. A hook's
/// [`Flow::Stop`] ends the run (the hooks record where).
pub fn execute(g: &mut CompiledGraph, model: &Model, mut arena: RunArena<'_>, mut bound: Option<Bound<'_, '_>>, env: &mut DynEnv<'_>) -> Result<usize> {
    let bytes = model.bytes();
    let is_bound = bound.is_some();
    let subgraph = g.subgraph;
    let sub = &model.subgraphs[subgraph];
    let op_error = |op: usize, e: Error| e.located(Location::op(subgraph, op, sub.ops[op].code.name()));
    let views = !is_bound && env.hooks.as_deref().is_some_and(|h| h.wants_views());
    let (steps, tensors, assignment) = (&mut g.steps, &g.tensors, &g.assignment);
    // Ops below this index were announced to the hooks (with views).
    let mut announced = 0;
    for si in 0..steps.len() {
        if let (true, Some(h)) = (views, env.hooks.as_deref_mut()) {
            let at = Announce { sub, subgraph, tensors, assignment, steps: &steps[..si], arena: arena.as_ref(), bytes };
            if at.stepless(announced..steps[si].op, h) == Flow::Stop {
                return Ok(0);
            }
            announced = steps[si].op + 1;
        }
        let st = &mut steps[si];
        // The common step: at most one output, in the arena. Its views come
        // from two splits of the arena, without the general path's sorting and
        // searching (this loop runs once per op per invocation).
        let single = match &st.outputs[..] {
            [] => Some((0, 0)),
            [(off, len, tag)] if !(is_bound && tag.is_some()) => Some((*off, *len)),
            _ => None,
        };
        if let (Some((off, len)), None) = (single, env.hooks.as_ref()) {
            // The output's region (own or scratch) is split around it; the other is read whole.
            let RunArena { own, scratch } = arena.reborrow();
            let base = own.len();
            let in_scratch = off >= base && len > 0;
            let (region, other, rbase): (&mut [u8], &[u8], usize) = if in_scratch { (scratch, &*own, base) } else { (own, &*scratch, 0) };
            let rel = off - rbase;
            if rel.checked_add(len).is_none_or(|end| end > region.len()) {
                return Err(Error::Runtime(format!("internal: output region {off}+{len} leaves the arena").into()));
            }
            let (head, rest) = region.split_at_mut(rel);
            let (out, tail) = rest.split_at_mut(len);
            let (head, tail) = (&*head, &*tail);
            let end = rel + len;
            let view = |o: usize, l: usize| -> Result<&[u8]> {
                let outside = || Error::Runtime(format!("internal: input region {o}+{l} is not in the arena").into());
                if (o >= base) != in_scratch {
                    // In the other region: the scratch's offsets start at `base`.
                    let r = if in_scratch { o } else { o - base };
                    return r.checked_add(l).and_then(|e| other.get(r..e)).ok_or_else(outside);
                }
                let o = o - rbase;
                if o + l <= rel {
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
            let at = (subgraph, st.op);
            let result = if st.outputs.is_empty() {
                run_work(&mut st.work, at, &ins, &mut [], model, env)
            } else {
                run_work(&mut st.work, at, &ins, &mut [out], model, env)
            };
            result.map_err(|e| op_error(st.op, e))?;
            continue;
        }
        let in_place = |o: &(usize, usize, Option<usize>)| is_bound && o.2.is_some();
        let ranges: SmallVec<[(usize, usize); 4]> = st.outputs.iter().filter(|o| !in_place(o)).map(|o| (o.0, o.1)).collect();
        let (arena_outs, gaps) = arena.reborrow().split_regions(&ranges)?;
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
        let op = &sub.ops[st.op];
        let runs_on = assignment.get(st.op).copied().unwrap_or(OpRun::Executor);
        if let (Some(h), Some(io)) = (env.hooks.as_deref_mut(), st.io.as_deref()) {
            if let Some(by_op) = &io.by_op {
                // A GPU segment, observed: its ops run one at a time, each reported.
                let seg = Segment { sub, subgraph, tensors, assignment, io, bytes, views };
                if seg.run(by_op, &ins, &mut outs, h).map_err(|e| op_error(st.op, e))? == Flow::Stop {
                    return Ok(0);
                }
                continue;
            }
        }
        // A multi-op step that cannot run op by op: announced as its first op, without views.
        let views = views && st.io.is_none();
        if let Some(h) = env.hooks.as_deref_mut() {
            let flow = if views {
                let inputs = step_input_views(sub, tensors, st, &ins, bytes);
                let outputs = observe::output_views(op, |_, t| tensor_view(sub, tensors, t, TensorState::Pending, None));
                h.before(&OpEvent { calls: &[], subgraph, index: st.op, op, runs_on, inputs: &inputs, outputs: &outputs }, true)
            } else {
                h.before(&OpEvent { calls: &[], subgraph, index: st.op, op, runs_on, inputs: &[], outputs: &[] }, true)
            };
            match flow {
                Flow::Continue => {}
                Flow::Skip => continue,
                Flow::Stop => return Ok(0),
            }
        }
        let result = run_work(&mut st.work, (subgraph, st.op), &ins, &mut outs, model, env);
        result.map_err(|e| op_error(st.op, e))?;
        if stopped(env) {
            // Stopped inside a control-flow op's child: the op did not finish.
            return Ok(0);
        }
        if let Some(h) = env.hooks.as_deref_mut() {
            let written: SmallVec<[&[u8]; 4]> = outs.iter().map(|o| &**o).collect();
            let flow = if views {
                // A convolution that applied fused epilogues wrote their result, not its own.
                let fused_away = assignment.iter().skip(st.op + 1).any(|r| *r == OpRun::Fused { into: st.op });
                let state = if fused_away { TensorState::Fused } else { TensorState::Ready };
                let inputs = step_input_views(sub, tensors, st, &ins, bytes);
                let outputs = observe::output_views(op, |k, t| tensor_view(sub, tensors, t, state, written.get(k).copied()));
                match h.after(&OpEvent { calls: &[], subgraph, index: st.op, op, runs_on, inputs: &inputs, outputs: &outputs }, true) {
                    Flow::Stop => Flow::Stop,
                    _ => announce_epilogues(sub, subgraph, tensors, assignment, (st.op, &st.extra), &ins, written.first().copied(), bytes, h),
                }
            } else {
                h.after(&OpEvent { calls: &[], subgraph, index: st.op, op, runs_on, inputs: &[], outputs: &[] }, true)
            };
            if flow == Flow::Stop {
                return Ok(0);
            }
        }
    }
    let tail_from = g.dynamic.as_ref().map_or(sub.ops.len(), |d| d.first_op);
    if let (true, Some(h)) = (views, env.hooks.as_deref_mut()) {
        let at = Announce { sub, subgraph, tensors: &g.tensors, assignment: &g.assignment, steps: &g.steps, arena: arena.as_ref(), bytes };
        if at.stepless(announced..tail_from, h) == Flow::Stop {
            return Ok(0);
        }
    }
    if g.dynamic.is_some() {
        if bound.is_some() {
            return Err(Error::Unsupported("run_with() on a model with data-dependent shapes: use run() and output()".into()));
        }
        if run_dynamic_tail(g, model, arena.as_ref(), env)? == Flow::Stop {
            return Ok(0);
        }
    }
    let mut copied = 0;
    if let Some((inputs, outputs)) = bound {
        for (k, plan) in g.out_plans.iter().enumerate() {
            let OutPlan::Copy(src) = plan else { continue };
            let from: &[u8] = match src {
                Src::Arena(off, len) => arena.as_ref().get(*off, *len).unwrap_or(&[]),
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

/// A step's inputs as views: what its kernel reads, a prepacked constant where the
/// kernel reads its packing, and a folded PAD's output (read as the PAD's input with
/// padding) as never materialised.
fn step_input_views<'a>(sub: &'a Subgraph, tensors: &'a [TensorSlot], st: &Step, ins: &[Option<&'a [u8]>], bytes: &'a [u8]) -> SmallVec<[TensorView<'a>; 8]> {
    observe::input_views(&sub.ops[st.op], |k, t| {
        if st.substituted.iter().any(|s| s.0 == k) {
            return tensor_view(sub, tensors, t, TensorState::Fused, None);
        }
        let data = if st.prepacked.contains(&k) { observe::loc_bytes(&tensors[t].loc, ArenaRef::default(), bytes) } else { ins.get(k).copied().flatten() };
        tensor_view(sub, tensors, t, TensorState::Ready, data)
    })
}

/// Announces the epilogue ops fused into the kernel of op `host` (they ran inside
/// it): the tensors between them were never materialised, the last one's output is
/// the kernel's, and their other operands were the kernel's `extra` inputs (passed
/// after the op's own in `ins`).
#[allow(clippy::too_many_arguments)]
fn announce_epilogues(
    sub: &Subgraph,
    subgraph: usize,
    tensors: &[TensorSlot],
    assignment: &[OpRun],
    (host, extra): (usize, &[usize]),
    ins: &[Option<&[u8]>],
    written: Option<&[u8]>,
    bytes: &[u8],
    h: &mut dyn Hooks,
) -> Flow {
    let chain: SmallVec<[usize; 4]> = (host + 1..sub.ops.len()).filter(|&o| assignment.get(o) == Some(&OpRun::Fused { into: host })).collect();
    let first_extra = sub.ops[host].inputs.len();
    for (i, &e) in chain.iter().enumerate() {
        let op = &sub.ops[e];
        let inside = |t: usize| sub.ops[host].outputs.contains(&t) || chain[..i].iter().any(|&c| sub.ops[c].outputs.contains(&t));
        let inputs = observe::input_views(op, |_, t| {
            if inside(t) {
                return tensor_view(sub, tensors, t, TensorState::Fused, None);
            }
            let data = match extra.iter().position(|&x| x == t) {
                Some(j) => ins.get(first_extra + j).copied().flatten(),
                // Only constants are left (an arena tensor not passed to the kernel is not known to be live).
                None => observe::loc_bytes(&tensors[t].loc, ArenaRef::default(), bytes),
            };
            tensor_view(sub, tensors, t, TensorState::Ready, data)
        });
        let pending = observe::output_views(op, |_, t| tensor_view(sub, tensors, t, TensorState::Pending, None));
        let runs_on = OpRun::Fused { into: host };
        match h.before(&OpEvent { calls: &[], subgraph, index: e, op, runs_on, inputs: &inputs, outputs: &pending }, false) {
            Flow::Stop => return Flow::Stop,
            Flow::Skip => continue,
            Flow::Continue => {}
        }
        let last = i + 1 == chain.len();
        let outputs = observe::output_views(op, |_, t| {
            if last {
                tensor_view(sub, tensors, t, TensorState::Ready, written)
            } else {
                tensor_view(sub, tensors, t, TensorState::Fused, None)
            }
        });
        if h.after(&OpEvent { calls: &[], subgraph, index: e, op, runs_on, inputs: &inputs, outputs: &outputs }, false) == Flow::Stop {
            return Flow::Stop;
        }
    }
    Flow::Continue
}

/// A GPU segment step of an observed run: what reporting its ops needs.
struct Segment<'a> {
    sub: &'a Subgraph,
    subgraph: usize,
    tensors: &'a [TensorSlot],
    assignment: &'a [OpRun],
    io: &'a SegmentIo,
    bytes: &'a [u8],
    /// Callbacks want tensor views: each op's outputs are read back after it.
    views: bool,
}

impl Segment<'_> {
    /// Runs the segment op by op, each announced to `h` as a step of its own (so
    /// timed and traced one by one), with views of what it read and wrote when
    /// callbacks want them.
    fn run(&self, by_op: &OpByOpHandle, ins: &[Option<&[u8]>], outs: &mut [&mut [u8]], h: &mut dyn Hooks) -> Result<Flow> {
        let Segment { sub, subgraph, tensors, assignment, io, bytes, views } = *self;
        let mut seg = by_op.0.lock().map_err(|_| Error::Runtime("GPU segment lock poisoned".into()))?;
        seg.run_op_by_op(ins, outs, views, &mut |m, op_ins, op_outs| {
            let Some((oi, through_pad)) = io.ops.get(m) else { return Flow::Stop };
            let (oi, op) = (*oi, &sub.ops[*oi]);
            let runs_on = assignment.get(oi).copied().unwrap_or(OpRun::Executor);
            let ev = |inputs, outputs| OpEvent { calls: &[], subgraph, index: oi, op, runs_on, inputs, outputs };
            if !views {
                return match op_outs {
                    None => h.before(&ev(&[], &[]), true),
                    Some(_) => h.after(&ev(&[], &[]), true),
                };
            }
            let inputs = observe::input_views(op, |k, t| {
                if through_pad.contains(&k) {
                    return tensor_view(sub, tensors, t, TensorState::Fused, None);
                }
                // Constants stay on the host where the GPU did not take them away.
                let data = op_ins.get(k).copied().flatten().or_else(|| observe::loc_bytes(&tensors[t].loc, ArenaRef::default(), bytes));
                tensor_view(sub, tensors, t, TensorState::Ready, data)
            });
            match op_outs {
                None => {
                    let outputs = observe::output_views(op, |_, t| tensor_view(sub, tensors, t, TensorState::Pending, None));
                    h.before(&ev(&inputs, &outputs), true)
                }
                Some(written) => {
                    let fused_away = assignment.iter().skip(oi + 1).any(|r| *r == OpRun::Fused { into: oi });
                    let state = if fused_away { TensorState::Fused } else { TensorState::Ready };
                    let outputs = observe::output_views(op, |k, t| tensor_view(sub, tensors, t, state, written.get(k).copied()));
                    match h.after(&ev(&inputs, &outputs), true) {
                        Flow::Stop => Flow::Stop,
                        _ => announce_epilogues(sub, subgraph, tensors, assignment, (oi, &[]), op_ins, written.first().copied(), bytes, h),
                    }
                }
            }
        })
    }
}

/// What announcing the ops without a step of their own needs: the subgraph, its
/// plan, the steps run so far and the arena as they left it.
struct Announce<'a> {
    sub: &'a Subgraph,
    subgraph: usize,
    tensors: &'a [TensorSlot],
    assignment: &'a [OpRun],
    steps: &'a [Step],
    arena: ArenaRef<'a>,
    bytes: &'a [u8],
}

impl Announce<'_> {
    /// Announces the ops of `range` that run no step (folded at prepare, aliases, a
    /// folded PAD); epilogues are announced with their kernel instead.
    fn stepless(&self, range: std::ops::Range<usize>, h: &mut dyn Hooks) -> Flow {
        let (sub, tensors) = (self.sub, self.tensors);
        for oi in range {
            let runs_on = self.assignment.get(oi).copied().unwrap_or(OpRun::Dynamic);
            match runs_on {
                OpRun::Fused { into } if into < oi => continue,
                OpRun::Dynamic => continue,
                _ => {}
            }
            // An op of a GPU segment is announced by its segment, which runs it op by op.
            if self.steps.iter().any(|st| st.io.as_ref().is_some_and(|io| io.ops.iter().any(|o| o.0 == oi))) {
                continue;
            }
            let op = &sub.ops[oi];
            let inputs = observe::input_views(op, |_, t| self.view(t));
            let pending = observe::output_views(op, |_, t| tensor_view(sub, tensors, t, TensorState::Pending, None));
            match h.before(&OpEvent { calls: &[], subgraph: self.subgraph, index: oi, op, runs_on, inputs: &inputs, outputs: &pending }, false) {
                Flow::Stop => return Flow::Stop,
                Flow::Skip => continue,
                Flow::Continue => {}
            }
            let outputs = observe::output_views(op, |_, t| match runs_on {
                OpRun::Fused { .. } => tensor_view(sub, tensors, t, TensorState::Fused, None),
                _ => self.view(t),
            });
            if h.after(&OpEvent { calls: &[], subgraph: self.subgraph, index: oi, op, runs_on, inputs: &inputs, outputs: &outputs }, false) == Flow::Stop {
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    /// Tensor `t` as its location holds it now: a constant, or an arena slot that
    /// still holds its value. The plan keeps a tensor's memory only while a step
    /// reads it, and an op without a step is not such a reader, so the slot is
    /// checked: the last step that wrote over it must be the one that wrote `t`.
    fn view(&self, t: usize) -> TensorView<'_> {
        let slot = &self.tensors[t];
        let data = match slot.loc {
            Loc::Arena { offset, len } => {
                let overlaps = |st: &&Step| st.outputs.iter().any(|&(o, l, _)| o < offset + len && offset < o + l);
                let last_writer = self.steps.iter().rev().find(overlaps).map(|st| st.op);
                if last_writer == self.writer(t) {
                    observe::loc_bytes(&slot.loc, self.arena, self.bytes)
                } else {
                    None
                }
            }
            _ => observe::loc_bytes(&slot.loc, self.arena, self.bytes),
        };
        tensor_view(self.sub, self.tensors, t, TensorState::Ready, data)
    }

    /// The op whose step writes `t`'s bytes: its producer, through aliases to the
    /// aliased tensor's, through an epilogue to its convolution; None for a graph input.
    fn writer(&self, mut t: usize) -> Option<usize> {
        for _ in 0..self.sub.ops.len() + 1 {
            let p = self.sub.ops.iter().rposition(|o| o.outputs.contains(&t))?;
            match self.assignment.get(p) {
                Some(OpRun::Alias) => t = self.sub.ops[p].inputs.first().copied().flatten()?,
                Some(OpRun::Fused { into }) if *into < p => return Some(*into),
                _ => return Some(p),
            }
        }
        None
    }
}

/// Runs one step's work on its input and output views; `at` is the step's op
/// (subgraph, index), the call frame of a control-flow op's child.
fn run_work(work: &mut Work, at: (usize, usize), ins: &[Option<&[u8]>], outs: &mut [&mut [u8]], model: &Model, env: &mut DynEnv<'_>) -> Result<()> {
    let frame = |callee: &Child, iteration: Option<usize>| CallFrame { subgraph: at.0, op: at.1, callee: callee.graph.subgraph, iteration };
    match work {
        Work::Kernel(k) => k(ins, outs),
        Work::If { then, otherwise } => {
            let cond = ins.first().copied().flatten().and_then(|c| c.first()).ok_or_else(|| Error::Runtime("IF condition is empty".into()))?;
            let args: SmallVec<[&[u8]; 16]> = ins.get(1..).unwrap_or(&[]).iter().map(|i| i.unwrap_or(&[])).collect();
            let branch = if *cond != 0 { then } else { otherwise };
            in_frame(env, frame(branch, None), |env| branch.run(model, &args, outs, env))
        }
        Work::While { cond, body, next, flag } => run_while(model, at, ins, outs, cond, body, next, flag, env),
        Work::CallOnce { init, ran_at } => {
            if *ran_at != Some(env.ctx.variables.generation()) {
                in_frame(env, frame(init, None), |env| init.run(model, &[], &mut [], env))?;
                // An initializer a callback stopped has not run: it runs again next time.
                if !stopped(env) {
                    *ran_at = Some(env.ctx.variables.generation());
                }
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
/// run-time tensors are freed after their last reader. Hooks see each op; a
/// [`Flow::Stop`] is returned after storing what the op computed.
fn run_dynamic_tail(g: &mut CompiledGraph, model: &Model, arena: ArenaRef<'_>, env: &mut DynEnv<'_>) -> Result<Flow> {
    let sub = &model.subgraphs[g.subgraph];
    let bytes = model.bytes();
    let CompiledGraph { tensors, dynamic, subgraph, .. } = g;
    let Some(tail) = dynamic.as_mut() else { return Ok(Flow::Continue) };
    let views_on = env.hooks.as_deref().is_some_and(|h| h.wants_views());
    // Graph inputs held here (STRING inputs, set by `Session::set_input`) stay.
    for (t, v) in tail.values.iter_mut().enumerate() {
        if !sub.inputs.contains(&t) {
            *v = None;
        }
    }
    for oi in tail.first_op..sub.ops.len() {
        let op = &sub.ops[oi];
        let mut outs: Vec<(usize, DynValue)> = Vec::with_capacity(op.outputs.len());
        let mut flow = Flow::Continue;
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
                    (None, Loc::Arena { offset, len }) => {
                        let data = arena.get(*offset, *len).ok_or_else(|| Error::Runtime(format!("internal: tensor {t} is not in the arena").into()))?;
                        (tensors[t].dtype, &tensors[t].shape, data, false)
                    }
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
            env.ctx.string_sizes = Some(Vec::new());
            let built = build_op(&octx, env.backends, env.custom, env.ctx);
            let mut string_sizes = env.ctx.string_sizes.take().unwrap_or_default().into_iter();
            let (Built { outputs, mut kernel }, runs_on, _) = built?;
            for (&t, (dtype, shape)) in op.outputs.iter().zip(outputs) {
                let n = match dtype {
                    // A STRING output's size is what its builder computed.
                    DType::String => string_sizes
                        .next()
                        .filter(|&n| n <= env.limits.max_arena_bytes)
                        .ok_or_else(|| Error::Runtime(format!("{}: string output of unknown or excessive size", octx.at()).into()))?,
                    _ => bytes_of(dtype, &shape, &env.limits, || octx.at())?,
                };
                outs.push((t, DynValue { dtype, shape, data: AlignedBytes::zeroed(n) }));
            }
            let input_views = |on: bool| -> SmallVec<[TensorView<'_>; 8]> {
                if on {
                    octx.inputs.iter().flatten().map(|d| desc_view(sub, d)).collect()
                } else {
                    SmallVec::new()
                }
            };
            if let Some(h) = env.hooks.as_deref_mut() {
                let inputs = input_views(views_on);
                let outputs: SmallVec<[TensorView<'_>; 4]> = if views_on {
                    outs.iter().map(|(t, v)| TensorView { state: TensorState::Pending, data: None, ..dyn_view(sub, *t, v) }).collect()
                } else {
                    SmallVec::new()
                };
                flow = h.before(&OpEvent { calls: &[], subgraph: *subgraph, index: oi, op, runs_on, inputs: &inputs, outputs: &outputs }, true);
            }
            if flow == Flow::Continue {
                let mut out_views: Vec<&mut [u8]> = outs.iter_mut().map(|(_, v)| v.data.bytes_mut()).collect();
                kernel(&views, &mut out_views).map_err(|e| e.located(octx.location()))?;
            }
            if let (Flow::Continue, Some(h)) = (flow, env.hooks.as_deref_mut()) {
                let inputs = input_views(views_on);
                let outputs: SmallVec<[TensorView<'_>; 4]> = if views_on { outs.iter().map(|(t, v)| dyn_view(sub, *t, v)).collect() } else { SmallVec::new() };
                flow = h.after(&OpEvent { calls: &[], subgraph: *subgraph, index: oi, op, runs_on, inputs: &inputs, outputs: &outputs }, true);
            }
        }
        for (t, v) in outs {
            tail.values[t] = Some(v);
        }
        if flow == Flow::Stop {
            return Ok(Flow::Stop);
        }
        for &t in op.inputs.iter().flatten() {
            if tail.last_use[t] == oi && !sub.outputs.contains(&t) && !sub.inputs.contains(&t) {
                tail.values[t] = None;
            }
        }
    }
    Ok(Flow::Continue)
}

/// An input of a run-time op as a view.
fn desc_view<'a>(sub: &'a Subgraph, d: &'a InputDesc<'a>) -> TensorView<'a> {
    let info = &sub.tensors[d.tensor];
    TensorView { tensor: d.tensor, name: &info.name, dtype: d.dtype, shape: &d.shape, quant: d.quant, state: TensorState::Ready, data: d.value }
}

/// A run-time tensor as a view.
fn dyn_view<'a>(sub: &'a Subgraph, t: usize, v: &'a DynValue) -> TensorView<'a> {
    let info = &sub.tensors[t];
    TensorView {
        tensor: t,
        name: &info.name,
        dtype: v.dtype,
        shape: &v.shape,
        quant: info.quant.as_ref(),
        state: TensorState::Ready,
        data: Some(v.data.bytes()),
    }
}

/// WHILE: loop variables live in the op's outputs; the body writes the next values
/// into `next`, which are then copied back.
#[allow(clippy::too_many_arguments)]
fn run_while(
    model: &Model,
    at: (usize, usize),
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
    let frame = |callee: &Child, i: usize| CallFrame { subgraph: at.0, op: at.1, callee: callee.graph.subgraph, iteration: Some(i) };
    for i in 0..MAX_WHILE_ITERATIONS {
        {
            let vars: SmallVec<[&[u8]; 8]> = outs.iter().map(|o| &**o).collect();
            in_frame(env, frame(cond, i), |env| cond.run(model, &vars, &mut [flag.bytes_mut()], env))?;
        }
        if stopped(env) || flag.bytes().first().is_none_or(|&b| b == 0) {
            return Ok(());
        }
        {
            let vars: SmallVec<[&[u8]; 8]> = outs.iter().map(|o| &**o).collect();
            let mut out_views: SmallVec<[&mut [u8]; 8]> = next.iter_mut().map(|n| n.bytes_mut()).collect();
            in_frame(env, frame(body, i), |env| body.run(model, &vars, &mut out_views, env))?;
        }
        if stopped(env) {
            return Ok(());
        }
        for (o, n) in outs.iter_mut().zip(next.iter()) {
            o.copy_from_slice(n.bytes());
        }
    }
    Err(Error::Runtime(format!("WHILE ran {MAX_WHILE_ITERATIONS} iterations without stopping").into()))
}
