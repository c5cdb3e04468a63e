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
        let observed = hooks(&env.hooks).is_some_and(|h| h.wants_views());
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

/// The run's hooks. Always none without the `observe` feature: a constant, so the
/// paths that announce ops and build views for them are not linked.
#[inline(always)]
fn hooks<'h>(slot: &'h Option<&mut dyn Hooks>) -> Option<&'h dyn Hooks> {
    if cfg!(feature = "observe") {
        slot.as_deref()
    } else {
        None
    }
}

/// [`hooks`], to call.
#[inline(always)]
fn hooks_mut<'h, 'a>(slot: &'h mut Option<&'a mut dyn Hooks>) -> Option<&'h mut (dyn Hooks + 'a)> {
    if cfg!(feature = "observe") {
        slot.as_deref_mut()
    } else {
        None
    }
}

/// Whether a hook stopped the run (a control-flow op's child may have).
fn stopped(env: &DynEnv<'_>) -> bool {
    hooks(&env.hooks).is_some_and(|h| h.stopped())
}

/// Runs `f` with `frame` on the hooks' call path.
fn in_frame<T>(env: &mut DynEnv<'_>, frame: CallFrame, f: impl FnOnce(&mut DynEnv<'_>) -> T) -> T {
    if let Some(h) = hooks_mut(&mut env.hooks) {
        h.enter(frame);
    }
    let r = f(env);
    if let Some(h) = hooks_mut(&mut env.hooks) {
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
    let views = !is_bound && hooks(&env.hooks).is_some_and(|h| h.wants_views());
    let (steps, tensors, assignment) = (&mut g.steps, &g.tensors, &g.assignment);
    // Ops below this index were announced to the hooks (with views).
    let mut announced = 0;
    for si in 0..steps.len() {
        if let (true, Some(h)) = (views, hooks_mut(&mut env.hooks)) {
            let at = Announce { sub, subgraph, tensors, assignment, steps: &steps[..si], arena: arena.as_ref(), bytes };
            if at.stepless(announced..steps[si].op, h) == Flow::Stop {
                return Ok(0);
            }
            announced = steps[si].op + 1;
        }
        let st = &mut steps[si];
        if hooks(&env.hooks).is_none() {
            // The common step, unobserved: views checked once for this arena (see
            // `StepViews`), built here without checks or searching.
            let RunArena { own, scratch } = arena.reborrow();
            let key = (own.len(), scratch.len(), is_bound);
            if st.views.key != Some(key) {
                st.views = StepViews::check(&st.inputs, &st.outputs, key);
            }
            if st.views.fast {
                let caller: &[&[u8]] = bound.as_ref().map_or(&[], |b| b.0);
                // `Default` (element by element) rather than `[None; N]`: the runtime crate is
                // size-optimized in the shipped library, where the repeat form stays a loop
                // (about 30 instructions per op under callgrind; docs/memory.md, fifth round).
                let mut in_views: [Option<&[u8]>; FAST_INPUTS] = Default::default();
                let mut out_views: [&mut [u8]; FAST_OUTPUTS] = Default::default();
                if let Some((n_out, n_in)) = st.views.resolve(own, scratch, &st.inputs, caller, bytes, &mut in_views, &mut out_views) {
                    let (ins, outs) = (&in_views[..n_in], &mut out_views[..n_out]);
                    let result = match &mut st.work {
                        Work::Kernel(k) => k(ins, outs),
                        work => run_work(work, (subgraph, st.op), ins, outs, model, env),
                    };
                    result.map_err(|e| op_error(st.op, e))?;
                    continue;
                }
            }
        }
        // The common step: at most one output, in the arena. Its views come
        // from two splits of the arena, without the general path's sorting and
        // searching (this loop runs once per op per invocation).
        let single = match &st.outputs[..] {
            [] => Some((0, 0)),
            [(off, len, tag)] if !(is_bound && tag.is_some()) => Some((*off, *len)),
            _ => None,
        };
        if let (Some((off, len)), None) = (single, hooks(&env.hooks)) {
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
        if let (Some(h), Some(io)) = (hooks_mut(&mut env.hooks), st.io.as_deref()) {
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
        if let Some(h) = hooks_mut(&mut env.hooks) {
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
        if let Some(h) = hooks_mut(&mut env.hooks) {
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
    if let (true, Some(h)) = (views, hooks_mut(&mut env.hooks)) {
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

/// Most inputs a step may have to take the fast path (its views live in an array
/// on the stack); steps with more take the checked path.
const FAST_INPUTS: usize = 8;

/// Most outputs a step may have to take the fast path (SPLIT, UNPACK and the like
/// have several; their views live in an array on the stack too).
const FAST_OUTPUTS: usize = 4;

/// Where one input of a step lies, checked by [`StepViews::check`].
#[derive(Debug, Clone, Copy)]
enum FastIn {
    /// An optional input left out.
    Absent,
    /// `len` bytes at `at` of the session's own region (`scratch` false) or of the lent scratch.
    Arena { scratch: bool, at: usize, len: usize },
    /// Resolved from the step's `Src` each run (model bytes, owned constants, a
    /// caller's bound input): no arena view.
    Other,
}

/// A step's arena views, resolved and checked once for the arena sizes a run
/// lends, so the run loop builds them without bounds or overlap checks. The
/// offsets are copied out of the step here: the views a run builds are exactly
/// the ones checked, whatever happens to the step's `inputs` and `outputs` later.
/// Checked again whenever a run's arena sizes, or whether it binds caller
/// buffers, differ from the ones checked (a resize re-plans and builds new steps).
#[derive(Debug, Default)]
pub(crate) struct StepViews {
    /// (own bytes, scratch bytes, bound) the views were checked for; None before the first run.
    key: Option<(usize, usize, bool)>,
    /// Whether the step takes the fast path: at most [`FAST_OUTPUTS`] outputs, none
    /// a caller's buffer, every arena range inside its region, the outputs clear of
    /// each other and the inputs clear of the outputs.
    fast: bool,
    /// The outputs: (in the scratch, offset in its region, bytes).
    outs: SmallVec<[(bool, usize, usize); 1]>,
    ins: SmallVec<[FastIn; 8]>,
}

/// Whether two ranges of one region share a byte (empty ones share none).
fn overlap((a, alen): (usize, usize), (b, blen): (usize, usize)) -> bool {
    alen > 0 && blen > 0 && a < b + blen && b < a + alen
}

impl StepViews {
    /// Checks a step's locations against an arena of `own` + `scratch` bytes.
    /// Anything out of place (which a correct plan never has) leaves the step on the
    /// checked path, which reports it.
    fn check(inputs: &[Option<Src>], outputs: &[(usize, usize, Option<usize>)], key: (usize, usize, bool)) -> StepViews {
        let (own, scratch, is_bound) = key;
        let slow = StepViews { key: Some(key), ..StepViews::default() };
        // An arena range as (in the scratch, offset in its region), if inside it.
        let place = |off: usize, len: usize| -> Option<(bool, usize)> {
            let (in_scratch, at, size) = if off >= own { (true, off - own, scratch) } else { (false, off, own) };
            (at.checked_add(len)? <= size).then_some((in_scratch, at))
        };
        if inputs.len() > FAST_INPUTS || outputs.len() > FAST_OUTPUTS {
            return slow;
        }
        let mut outs: SmallVec<[(bool, usize, usize); 1]> = SmallVec::new();
        for &(off, len, tag) in outputs {
            if is_bound && tag.is_some() {
                return slow;
            }
            let Some((s, at)) = place(off, len) else { return slow };
            // The kernel gets a mutable view of each: they must not share a byte.
            if outs.iter().any(|&(os, oat, olen)| os == s && overlap((at, len), (oat, olen))) {
                return slow;
            }
            outs.push((s, at, len));
        }
        let mut ins = SmallVec::new();
        for src in inputs {
            let (off, len) = match src {
                None => {
                    ins.push(FastIn::Absent);
                    continue;
                }
                Some(Src::Arena(o, l)) => (*o, *l),
                Some(Src::Input(_, o, l)) if !is_bound => (*o, *l),
                Some(_) => {
                    ins.push(FastIn::Other);
                    continue;
                }
            };
            let Some((s, at)) = place(off, len) else { return slow };
            // An input must not overlap an output the kernel writes while reading it.
            if outs.iter().any(|&(os, oat, olen)| os == s && overlap((at, len), (oat, olen))) {
                return slow;
            }
            ins.push(FastIn::Arena { scratch: s, at, len });
        }
        StepViews { key: Some(key), fast: true, outs, ins }
    }

    /// The step's views built from the run's arena regions: its outputs written
    /// into `outs` and its inputs into `ins`, returning how many of each; None
    /// (and no view) unless the step passed its check for these region sizes.
    ///
    /// `own` and `scratch` are the regions whose sizes were checked: the views are
    /// built only when `key` holds their sizes and `fast` is set.
    #[allow(clippy::too_many_arguments)]
    fn resolve<'a>(
        &self,
        own: &'a mut [u8],
        scratch: &'a mut [u8],
        srcs: &'a [Option<Src>],
        caller: &'a [&'a [u8]],
        bytes: &'a [u8],
        ins: &mut [Option<&'a [u8]>; FAST_INPUTS],
        outs: &mut [&'a mut [u8]; FAST_OUTPUTS],
    ) -> Option<(usize, usize)> {
        let (own_len, scratch_len) = (own.len(), scratch.len());
        // The soundness of the views below rests on these sizes being the checked
        // ones; one comparison per step keeps that local to this function.
        if !self.fast || self.key.is_none_or(|k| (k.0, k.1) != (own_len, scratch_len)) {
            return None;
        }
        let (own_p, scratch_p) = (own.as_mut_ptr(), scratch.as_mut_ptr());
        let region = |s: bool| if s { scratch_p } else { own_p };
        // Empty views too point into their region at their planned offset, never at a
        // dangling address: kernels view the bytes as wider types, which checks alignment.
        for (&(s, at, len), slot) in self.outs.iter().zip(outs.iter_mut()) {
            debug_assert!(at + len <= if s { scratch_len } else { own_len });
            // SAFETY: `check` placed `at..at + len` inside the region, whose size is
            // the one checked (compared above), so the range is in bounds of the
            // allocation `own` / `scratch` borrow mutably for 'a. No other view of
            // it exists while the kernel runs: `check` kept the outputs clear of each
            // other and every arena input clear of them, and `own` / `scratch`
            // themselves are not used again.
            *slot = unsafe { std::slice::from_raw_parts_mut(region(s).add(at), len) };
        }
        for (k, (f, slot)) in self.ins.iter().zip(ins.iter_mut()).enumerate() {
            *slot = match *f {
                FastIn::Absent => None,
                FastIn::Arena { scratch: s, at, len } => {
                    debug_assert!(at + len <= if s { scratch_len } else { own_len });
                    // SAFETY: in bounds of its region as the outputs are (checked for
                    // these sizes), and disjoint from every output, the only mutable
                    // views: shared reads of it for 'a alias nothing written.
                    Some(unsafe { std::slice::from_raw_parts(region(s).add(at).cast_const(), len) })
                }
                FastIn::Other => match srcs.get(k) {
                    Some(Some(Src::Model(r))) => bytes.get(r.clone()),
                    Some(Some(Src::Owned(b))) => Some(b.bytes()),
                    Some(Some(Src::Input(i, ..))) => caller.get(*i).copied(),
                    _ => None,
                },
            };
        }
        Some((self.outs.len().min(FAST_OUTPUTS), self.ins.len().min(FAST_INPUTS)))
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
        Work::KernelOnVariables { kernel, reads } => {
            let mut with: SmallVec<[Option<&[u8]>; 8]> = ins.iter().copied().collect();
            for &(k, len) in reads.iter() {
                let id = resource_id(ins.get(k).copied().flatten().unwrap_or(&[]))?;
                let v = env.ctx.variables.get(id)?;
                if v.len() != len {
                    return Err(Error::Runtime(format!("variable {id} holds {} bytes, the read expects {len}", v.len()).into()));
                }
                if let Some(slot) = with.get_mut(k) {
                    *slot = Some(v);
                }
            }
            kernel(&with, outs)
        }
        Work::AssignComputed { kernel, len } => {
            let id = resource_id(ins.first().copied().flatten().unwrap_or(&[]))?;
            let value = env.ctx.variables.assign_in_place(id, *len)?;
            kernel(ins.get(1..).unwrap_or(&[]), &mut [value])
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
    let views_on = hooks(&env.hooks).is_some_and(|h| h.wants_views());
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
            if let Some(h) = hooks_mut(&mut env.hooks) {
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
            if let (Flow::Continue, Some(h)) = (flow, hooks_mut(&mut env.hooks)) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Checks a step with one output at `out` over an arena of 256 own + 128
    /// scratch bytes, not bound.
    fn check(inputs: &[Option<Src>], out: (usize, usize)) -> StepViews {
        StepViews::check(inputs, &[(out.0, out.1, None)], (256, 128, false))
    }

    #[test]
    fn views_are_checked_against_the_arena_and_the_output() {
        // Inputs in both regions, clear of the output: fast.
        let v = check(&[Some(Src::Arena(0, 64)), None, Some(Src::Arena(256, 32))], (64, 64));
        assert!(v.fast);
        assert!(matches!(v.ins[..], [FastIn::Arena { scratch: false, at: 0, len: 64 }, FastIn::Absent, FastIn::Arena { scratch: true, at: 0, len: 32 }]));
        // An output in the scratch, an input ending right where it starts.
        let v = check(&[Some(Src::Arena(256, 64))], (320, 64));
        assert!(v.fast && v.outs[..] == [(true, 64, 64)]);
        // An input overlapping the output by one byte, in either region: the checked path.
        assert!(!check(&[Some(Src::Arena(0, 65))], (64, 64)).fast);
        assert!(!check(&[Some(Src::Arena(300, 64))], (256, 64)).fast);
        // The same range in the other region does not overlap.
        assert!(check(&[Some(Src::Arena(0, 64))], (256, 64)).fast);
        // Ranges leaving their region (or crossing from own into scratch).
        assert!(!check(&[Some(Src::Arena(200, 64))], (0, 64)).fast);
        assert!(!check(&[Some(Src::Arena(320, 65))], (0, 64)).fast);
        assert!(!check(&[Some(Src::Arena(usize::MAX, 2))], (0, 64)).fast);
        assert!(!check(&[], (384, 64)).fast);
        // Too many inputs or outputs: the checked path.
        let many: Vec<Option<Src>> = (0..=FAST_INPUTS).map(|_| None).collect();
        assert!(!check(&many, (0, 64)).fast);
        let outs: Vec<(usize, usize, Option<usize>)> = (0..=FAST_OUTPUTS).map(|k| (k * 8, 8, None)).collect();
        assert!(!StepViews::check(&[], &outs, (256, 128, false)).fast);
        assert!(StepViews::check(&[], &outs[..FAST_OUTPUTS], (256, 128, false)).fast);
        // Several outputs: fast when clear of each other (empty ones overlap nothing),
        // and every input clear of all of them.
        let two = [(0, 8, None), (264, 8, None)];
        assert!(StepViews::check(&[Some(Src::Arena(8, 8)), Some(Src::Arena(256, 8))], &two, (256, 128, false)).fast);
        assert!(!StepViews::check(&[Some(Src::Arena(260, 8))], &two, (256, 128, false)).fast);
        assert!(!StepViews::check(&[], &[(0, 8, None), (7, 8, None)], (256, 128, false)).fast);
        assert!(StepViews::check(&[], &[(0, 8, None), (4, 0, None)], (256, 128, false)).fast);
        assert!(!StepViews::check(&[], &[(0, 8, None), (64, 8, Some(1))], (256, 128, true)).fast);
        // A graph output written in place into a bound caller buffer: the checked path
        // then, the arena otherwise.
        assert!(!StepViews::check(&[], &[(0, 8, Some(0))], (256, 128, true)).fast);
        assert!(StepViews::check(&[], &[(0, 8, Some(0))], (256, 128, false)).fast);
    }

    #[test]
    fn views_resolve_only_for_the_checked_sizes() {
        let owned = Arc::new(AlignedBytes::zeroed(4));
        let srcs = [Some(Src::Arena(8, 4)), Some(Src::Input(0, 16, 4)), Some(Src::Model(1..3)), Some(Src::Owned(owned)), None];
        let (mut own, mut scratch) = (vec![0u8; 32], vec![0u8; 16]);
        own[8] = 7;
        own[16] = 5;
        scratch[2] = 9;
        let bytes = [1u8, 2, 3, 4];
        let caller: [&[u8]; 1] = [&[42, 43, 44, 45]];
        // Unbound: the graph input is read from its arena slot.
        let v = StepViews::check(&srcs, &[(34, 4, None)], (32, 16, false));
        assert!(v.fast);
        let mut ins = [None; FAST_INPUTS];
        let mut outs: [&mut [u8]; FAST_OUTPUTS] = Default::default();
        assert_eq!(v.resolve(&mut own, &mut scratch, &srcs, &caller, &bytes, &mut ins, &mut outs), Some((1, 5)));
        assert_eq!((outs[0].len(), outs[0][0]), (4, 9));
        assert_eq!(ins[0], Some(&[7u8, 0, 0, 0][..]));
        assert_eq!(ins[1].map(|s| s[0]), Some(5));
        assert_eq!(ins[2], Some(&[2u8, 3][..]));
        assert_eq!(ins[3], Some(&[0u8; 4][..]));
        assert_eq!(ins[4], None);
        outs[0][1] = 1;
        assert_eq!(scratch[3], 1);
        // Bound: the caller's buffer.
        let v = StepViews::check(&srcs, &[(34, 4, None)], (32, 16, true));
        let mut ins = [None; FAST_INPUTS];
        let mut outs: [&mut [u8]; FAST_OUTPUTS] = Default::default();
        let _ = v.resolve(&mut own, &mut scratch, &srcs, &caller, &bytes, &mut ins, &mut outs);
        assert_eq!(ins[1], Some(&[42u8, 43, 44, 45][..]));
        // Other sizes than the checked ones (a resized scratch): no views at all.
        let mut small = vec![0u8; 8];
        let mut ins = [None; FAST_INPUTS];
        let mut outs: [&mut [u8]; FAST_OUTPUTS] = Default::default();
        assert_eq!(v.resolve(&mut own, &mut small, &srcs, &caller, &bytes, &mut ins, &mut outs), None);
        assert!(ins.iter().all(Option::is_none) && outs.iter().all(|o| o.is_empty()));
        // Empty views point at their planned offset (kernels check the alignment of
        // what they view as wider types), not at a dangling address.
        let srcs = [Some(Src::Arena(8, 0))];
        let v = StepViews::check(&srcs, &[(32, 0, None)], (32, 16, false));
        assert!(v.fast);
        let base = (own.as_ptr() as usize, scratch.as_ptr() as usize);
        let mut ins = [None; FAST_INPUTS];
        let mut outs: [&mut [u8]; FAST_OUTPUTS] = Default::default();
        assert_eq!(v.resolve(&mut own, &mut scratch, &srcs, &caller, &bytes, &mut ins, &mut outs), Some((1, 1)));
        assert_eq!((outs[0].len(), outs[0].as_ptr() as usize), (0, base.1));
        assert_eq!(ins[0].map(|i| (i.len(), i.as_ptr() as usize)), Some((0, base.0 + 8)));
        // Two outputs, one in each region, each written where the plan put it.
        let v = StepViews::check(&[Some(Src::Arena(0, 4))], &[(4, 4, None), (40, 2, None)], (32, 16, false));
        let mut ins = [None; FAST_INPUTS];
        let mut outs: [&mut [u8]; FAST_OUTPUTS] = Default::default();
        assert_eq!(v.resolve(&mut own, &mut scratch, &srcs, &caller, &bytes, &mut ins, &mut outs), Some((2, 1)));
        outs[0][3] = 6;
        outs[1][1] = 8;
        assert_eq!((own[7], scratch[9]), (6, 8));
        // Nor from a step that failed its check.
        let slow = StepViews::check(&[Some(Src::Arena(34, 4))], &[(34, 4, None)], (32, 16, false));
        assert!(!slow.fast);
        let mut ins = [None; FAST_INPUTS];
        let mut outs: [&mut [u8]; FAST_OUTPUTS] = Default::default();
        assert_eq!(slow.resolve(&mut own, &mut scratch, &srcs, &caller, &bytes, &mut ins, &mut outs), None);
    }
}
