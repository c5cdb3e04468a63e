//! Seeing inside a run: per-op callbacks with read-only views of each op's tensors
//! ([`Session::run_with_callbacks`](crate::Session::run_with_callbacks)), and a
//! trace recorder that writes Chrome trace-event JSON (Perfetto, chrome://tracing):
//! prepare phases, one slice per executed op per run, and the slices each worker
//! thread spends in a parallel kernel.
//!
//! Both reach the executor through one hook object ([`Hooks`]). A run with neither
//! (nor profiling) passes none, and the executor's plain path then reads no clock
//! and allocates nothing.
//!
//! What a callback sees follows what the plan really computes. ferrite fuses ops and
//! shares memory between tensors whose lifetimes do not overlap, so some tensors
//! never hold their own value: a folded PAD's output, a convolution's output whose
//! epilogue (activation, residual ADD, PRELU) the convolution applied in place. Such
//! tensors come with [`TensorState::Fused`] and no data, never with bytes that hold
//! something else.

// Without the `observe` feature the session never records a trace: the recorder
// stays in the source (the executor's hook types share this module) but is not used.
#![cfg_attr(not(feature = "observe"), allow(dead_code))]

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use smallvec::SmallVec;

use crate::compile::{CompiledGraph, Loc, OpRun, TensorSlot};
use crate::model::{BuiltinOp, DType, Model, Op, OpCode, Quantization, Subgraph};
use crate::ops::OpParams;
use ferrite_kernels::parallel::{ThreadPool, WorkSpan};

/// What a per-op callback asks of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on: run the op (from `before`), continue with the next op (from `after`).
    Continue,
    /// From `before`: do not run this op (its `after` is not called either); its
    /// outputs keep whatever their memory held, and the run goes on. From `after`:
    /// the same as `Continue`.
    Skip,
    /// End the run here. [`RunOutcome::Stopped`] names the op; the model's outputs
    /// are not valid, but intermediates the run computed can still be read.
    Stop,
}

/// How a run with callbacks ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every op ran; outputs are valid.
    Completed,
    /// A callback returned [`Flow::Stop`] at this op.
    Stopped {
        /// Subgraph of the op.
        subgraph: usize,
        /// Op index in that subgraph.
        op: usize,
    },
}

/// Whether a [`TensorView`] holds the tensor's value, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorState {
    /// `data` holds the tensor's value.
    Ready,
    /// An output seen in a `before` callback: the op has not computed it yet.
    Pending,
    /// Never materialised: the op producing it was fused into a neighbouring kernel
    /// (a PAD folded into the convolution reading it), or a fused kernel wrote a later
    /// op's result where it would be (a convolution whose epilogue ops it applied).
    Fused,
    /// No storage at this point: a constant released after its kernel packed it, or
    /// a tensor nothing reads.
    Absent,
}

impl TensorState {
    /// Lower-case name, for reports and index files.
    pub fn name(self) -> &'static str {
        match self {
            TensorState::Ready => "ready",
            TensorState::Pending => "pending",
            TensorState::Fused => "fused",
            TensorState::Absent => "absent",
        }
    }
}

/// A read-only view of one tensor of an op, valid during the callback.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    /// Tensor index in the subgraph.
    pub tensor: usize,
    /// Name in the model.
    pub name: &'a str,
    /// Element type.
    pub dtype: DType,
    /// Shape under the current plan.
    pub shape: &'a [usize],
    /// Quantization parameters, if any.
    pub quant: Option<&'a Quantization>,
    /// Whether `data` holds the value.
    pub state: TensorState,
    /// The raw little-endian bytes, present exactly when `state` is `Ready`. For a
    /// sparse constant these are its stored values as the file keeps them, not the
    /// dense tensor (kernels read a densified packing).
    pub data: Option<&'a [u8]>,
}

impl TensorView<'_> {
    /// The data as float32, when it is ready and of that type.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        let d = self.data.filter(|_| self.dtype == DType::F32)?;
        Some(d.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}

/// A control-flow op (IF, WHILE, CALL_ONCE) whose child subgraph is running: one
/// level of the path from the session's subgraph down to an op inside a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallFrame {
    /// Subgraph of the control-flow op.
    pub subgraph: usize,
    /// Its op index in that subgraph.
    pub op: usize,
    /// The subgraph it is running: a branch of IF, the condition or the body of
    /// WHILE, the initializer of CALL_ONCE.
    pub callee: usize,
    /// For WHILE, the loop's pass, from 0: pass `i` evaluates the condition for the
    /// `i + 1`-th time and, when it holds, runs the body for the `i + 1`-th time.
    /// None for IF and CALL_ONCE.
    pub iteration: Option<usize>,
}

/// One op as a callback sees it.
///
/// An op is identified by `(subgraph, index)`; an op inside a control-flow body
/// (a WHILE body runs its ops once per pass) is one execution of it, told apart by
/// `calls`, the control-flow ops it runs inside, outermost first.
#[derive(Debug, Clone, Copy)]
pub struct OpEvent<'a> {
    /// Subgraph of the op: the session's own, or a control-flow op's child.
    pub subgraph: usize,
    /// Op index in the subgraph, as the model file numbers it.
    pub index: usize,
    /// The control-flow ops running this op's subgraph, outermost first; empty for an
    /// op of the session's subgraph.
    pub calls: &'a [CallFrame],
    /// The op: its type (`op.code.name()`), options and tensor indices.
    pub op: &'a Op,
    /// Where it runs: a backend, or fused into another op, folded at prepare, an alias.
    pub runs_on: OpRun,
    /// Its inputs, in order; optional inputs the model omits are left out.
    pub inputs: &'a [TensorView<'a>],
    /// Its outputs, in order ([`TensorState::Pending`] in `before`).
    pub outputs: &'a [TensorView<'a>],
}

impl OpEvent<'_> {
    /// The op's type: the builtin's name (`CONV_2D`) or the custom op's.
    pub fn op_name(&self) -> String {
        self.op.code.name()
    }

    /// The pass of the innermost WHILE this op runs inside, if any.
    pub fn iteration(&self) -> Option<usize> {
        self.calls.iter().rev().find_map(|f| f.iteration)
    }
}

/// The executor's view of whoever watches a run.
pub(crate) trait Hooks {
    /// Whether ops are reported with tensor views (and ops that run no step of their
    /// own reported at all): callbacks want them, timers do not. Control-flow
    /// children then run on their own arenas, as the session's subgraph does.
    fn wants_views(&self) -> bool;
    /// A control-flow op starts running a child subgraph; ops reported until the
    /// matching `leave` run inside it.
    fn enter(&mut self, frame: CallFrame);
    /// The child started by the last `enter` returned.
    fn leave(&mut self);
    /// Whether a callback stopped the run: a control-flow op whose child was
    /// stopped ends the run too.
    fn stopped(&self) -> bool;
    /// Before an op. `step`: the op runs as a step of its own (it is timed and traced).
    fn before(&mut self, ev: &OpEvent<'_>, step: bool) -> Flow;
    /// After an op that `before` let run.
    fn after(&mut self, ev: &OpEvent<'_>, step: bool) -> Flow;
}

/// What a multi-op step calls around each of its ops when run op by op: (op's
/// position in the step, its inputs, None before it runs or its outputs after).
pub(crate) type OnOp<'c> = &'c mut dyn FnMut(usize, &[Option<&[u8]>], Option<&[&[u8]]>) -> Flow;

/// A step that runs several ops (a GPU segment) and can run them one at a time for
/// observation.
pub(crate) trait OpByOp: Send {
    /// Runs the step's ops in order, each on its own, calling `on_op(member, inputs,
    /// None)` before and `on_op(member, inputs, Some(outputs))` after each (a
    /// `before` answer of [`Flow::Skip`] leaves the op out, [`Flow::Stop`] ends the
    /// step). With `read_back`, `inputs` (one per op input, None for a constant or
    /// an absent one) and `outputs` hold copies of the op's tensors read back from
    /// the device; without, both are empty and the ops are only run one by one, so
    /// each can be timed. The step's outputs are written to `outs` as its plain run
    /// writes them, unless it stopped.
    fn run_op_by_op(&mut self, ins: &[Option<&[u8]>], outs: &mut [&mut [u8]], read_back: bool, on_op: OnOp<'_>) -> crate::error::Result<Flow>;
}

/// A multi-op step's way of running op by op, shared with its kernel.
#[derive(Clone)]
pub(crate) struct OpByOpHandle(pub Arc<std::sync::Mutex<dyn OpByOp>>);

impl std::fmt::Debug for OpByOpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpByOpHandle")
    }
}

/// A user callback over ops.
pub(crate) type OpCallback<'c> = &'c mut dyn FnMut(&OpEvent<'_>) -> Flow;

/// The hooks of one session run: any of tracing, profiling and user callbacks.
pub(crate) struct RunHooks<'h> {
    pub trace: Option<&'h mut TraceLog>,
    /// The session's thread pool, whose worker spans the trace collects after each op.
    pub pool: Option<Arc<ThreadPool>>,
    pub profile: Option<&'h mut Vec<(usize, Duration)>>,
    pub before: Option<OpCallback<'h>>,
    pub after: Option<OpCallback<'h>>,
    /// Start times of the steps in progress (control flow nests them).
    starts: SmallVec<[Instant; 8]>,
    /// The control-flow ops whose children are running, outermost first.
    frames: SmallVec<[CallFrame; 4]>,
    /// The op a callback stopped the run at.
    pub stopped: Option<(usize, usize)>,
}

impl<'h> RunHooks<'h> {
    pub fn new() -> Self {
        RunHooks { trace: None, pool: None, profile: None, before: None, after: None, starts: SmallVec::new(), frames: SmallVec::new(), stopped: None }
    }

    fn timing(&self) -> bool {
        self.trace.is_some() || self.profile.is_some()
    }

    fn call(cb: &mut Option<OpCallback<'h>>, ev: &OpEvent<'_>) -> Flow {
        cb.as_mut().map_or(Flow::Continue, |f| f(ev))
    }
}

impl Hooks for RunHooks<'_> {
    fn wants_views(&self) -> bool {
        self.before.is_some() || self.after.is_some()
    }

    fn enter(&mut self, frame: CallFrame) {
        self.frames.push(frame);
    }

    fn leave(&mut self) {
        self.frames.pop();
    }

    fn stopped(&self) -> bool {
        self.stopped.is_some()
    }

    fn before(&mut self, ev: &OpEvent<'_>, step: bool) -> Flow {
        // The executor does not know the call path; the hooks keep it.
        let flow = Self::call(&mut self.before, &OpEvent { calls: &self.frames, ..*ev });
        match flow {
            Flow::Stop => self.stopped = Some((ev.subgraph, ev.index)),
            // Taken last, so a callback's own time is not counted as the op's.
            Flow::Continue if step && self.timing() => self.starts.push(Instant::now()),
            _ => {}
        }
        flow
    }

    fn after(&mut self, ev: &OpEvent<'_>, step: bool) -> Flow {
        if step && self.timing() {
            let end = Instant::now();
            let start = self.starts.pop().unwrap_or(end);
            if let Some(t) = self.trace.as_deref_mut() {
                t.op(ev.subgraph, ev.index, self.frames.last(), start, end, self.pool.as_deref());
            }
            // The profile covers the session's subgraph: a body's time is its control-flow op's.
            if let (Some(p), true) = (self.profile.as_deref_mut(), self.frames.is_empty()) {
                p.push((ev.index, end - start));
            }
        }
        let flow = Self::call(&mut self.after, &OpEvent { calls: &self.frames, ..*ev });
        if flow == Flow::Stop {
            self.stopped = Some((ev.subgraph, ev.index));
        }
        flow
    }
}

/// A view of tensor `t` as the plan describes it (the model's description where the
/// plan has none). `data` is kept only when the state is `Ready`.
pub(crate) fn tensor_view<'a>(sub: &'a Subgraph, slots: &'a [TensorSlot], t: usize, state: TensorState, data: Option<&'a [u8]>) -> TensorView<'a> {
    let info = &sub.tensors[t];
    let (dtype, shape) = slots.get(t).map_or((info.dtype, &info.shape[..]), |s| (s.dtype, &s.shape[..]));
    let (state, data) = match (state, data) {
        (TensorState::Ready, Some(d)) => (TensorState::Ready, Some(d)),
        (TensorState::Ready, None) => (TensorState::Absent, None),
        (s, _) => (s, None),
    };
    TensorView { tensor: t, name: &info.name, dtype, shape, quant: info.quant.as_ref(), state, data }
}

/// The bytes at a tensor location, in `arena` or the model.
pub(crate) fn loc_bytes<'a>(loc: &'a Loc, arena: crate::memory::ArenaRef<'a>, model_bytes: &'a [u8]) -> Option<&'a [u8]> {
    match loc {
        Loc::None => None,
        Loc::Arena { offset, len } => arena.get(*offset, *len),
        Loc::Model(r) => model_bytes.get(r.clone()),
        Loc::Owned(b) => Some(b.bytes()),
    }
}

/// An op's input tensors as views: `view(slot, tensor)` gives each present input's.
pub(crate) fn input_views<'a>(op: &'a Op, mut view: impl FnMut(usize, usize) -> TensorView<'a>) -> SmallVec<[TensorView<'a>; 8]> {
    op.inputs.iter().enumerate().filter_map(|(k, t)| t.map(|t| view(k, t))).collect()
}

/// An op's output tensors as views.
pub(crate) fn output_views<'a>(op: &'a Op, mut view: impl FnMut(usize, usize) -> TensorView<'a>) -> SmallVec<[TensorView<'a>; 4]> {
    op.outputs.iter().enumerate().map(|(k, &t)| view(k, t)).collect()
}

/// Floating-point operations of one run of `op`, for the ops whose cost is their
/// multiply-accumulates (convolutions, fully-connected, matrix products): two per
/// multiply-accumulate. None for the others.
pub(crate) fn estimate_flops(op: &Op, shape_of: impl Fn(usize) -> Option<Vec<usize>>) -> Option<u64> {
    let input = |k: usize| op.inputs.get(k).copied().flatten().and_then(&shape_of);
    let numel = |s: &[usize]| s.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
    let out = numel(&shape_of(*op.outputs.first()?)?)?;
    let macs = match op.code.builtin()? {
        // Filter [out channels, kh, kw, in channels per group].
        BuiltinOp::CONV_2D => match input(1)?[..] {
            [_, kh, kw, ci] => out.checked_mul((kh * kw * ci) as u64)?,
            _ => return None,
        },
        // Filter [1, kh, kw, channels]: one multiply-accumulate per tap and output.
        BuiltinOp::DEPTHWISE_CONV_2D => match input(1)?[..] {
            [_, kh, kw, _] => out.checked_mul((kh * kw) as u64)?,
            _ => return None,
        },
        // Weights [units, depth].
        BuiltinOp::FULLY_CONNECTED => out.checked_mul(*input(1)?.last()? as u64)?,
        BuiltinOp::BATCH_MATMUL => {
            let a = input(0)?;
            let adj_x = matches!(op.params, OpParams::BatchMatMul { adj_x: true, .. });
            let depth = if adj_x { *a.get(a.len().checked_sub(2)?)? } else { *a.last()? };
            out.checked_mul(depth as u64)?
        }
        // Every input element scatters kh*kw*out_channels products: weights [out, kh, kw, in].
        BuiltinOp::TRANSPOSE_CONV => match input(1)?[..] {
            [co, kh, kw, _] => numel(&input(2)?)?.checked_mul((co * kh * kw) as u64)?,
            _ => return None,
        },
        _ => return None,
    };
    macs.checked_mul(2)
}

/// A prepare phase recorded for the trace: a pass over one op, a weight packing,
/// the memory plan. Kept in the session's [`BackendContext`](crate::ext::BackendContext)
/// while tracing, where every pass can reach it.
#[derive(Debug, Clone)]
pub(crate) struct PhaseSpan {
    pub name: Cow<'static, str>,
    pub args: SmallVec<[(&'static str, usize); 3]>,
    pub start: Instant,
    pub end: Instant,
}

/// Most events a trace keeps; later ones are counted as dropped, so a long
/// benchmark cannot grow the trace without bound (about 48 bytes per event).
pub const MAX_TRACE_EVENTS: usize = 4 << 20;

/// The Chrome trace thread id of the thread calling `run` (worker `i` is 1 + i).
const SESSION_TID: u64 = 1;

/// Start and duration in nanoseconds since the trace's epoch.
#[derive(Debug, Clone, Copy)]
struct Time {
    start: u64,
    dur: u64,
}

#[derive(Debug)]
enum Event {
    Phase {
        name: Cow<'static, str>,
        args: SmallVec<[(&'static str, usize); 3]>,
        t: Time,
    },
    Run {
        run: u32,
        completed: bool,
        t: Time,
    },
    /// `caller`: the innermost control-flow op running the op's subgraph (subgraph,
    /// op, WHILE pass or `u32::MAX`), `u32::MAX` in its first field for none.
    Op {
        sg: u32,
        op: u32,
        run: u32,
        plan: u32,
        caller: [u32; 3],
        t: Time,
    },
    Worker {
        thread: u32,
        sg: u32,
        op: u32,
        run: u32,
        tasks: u32,
        t: Time,
    },
}

/// Each op's static description for the trace (type, backend, tensor shapes and
/// bytes, FLOPs), under one plan, keyed by (subgraph, op).
type PlanArgs = HashMap<(usize, usize), (String, Map<String, Value>)>;

/// A session's trace: events in memory until written as Chrome trace-event JSON.
#[derive(Debug)]
pub(crate) struct TraceLog {
    epoch: Instant,
    events: Vec<Event>,
    dropped: usize,
    /// Runs recorded so far (the index of the next one).
    runs: u32,
    run_start: Option<Instant>,
    /// Op descriptions per plan the traced runs used, and the generation of each.
    plans: Vec<(u64, PlanArgs)>,
    /// Worker spans taken from the pool, reused between ops.
    spans: Vec<WorkSpan>,
    /// Highest worker index seen.
    workers: usize,
}

impl TraceLog {
    /// An empty trace whose time 0 is `epoch`.
    pub fn new(epoch: Instant) -> Self {
        TraceLog { epoch, events: Vec::new(), dropped: 0, runs: 0, run_start: None, plans: Vec::new(), spans: Vec::new(), workers: 0 }
    }

    fn time(&self, start: Instant, end: Instant) -> Time {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Time { start: ns(start.saturating_duration_since(self.epoch)), dur: ns(end.saturating_duration_since(start)) }
    }

    fn push(&mut self, e: Event) {
        if self.events.len() < MAX_TRACE_EVENTS {
            self.events.push(e);
        } else {
            self.dropped += 1;
        }
    }

    /// Records a prepare phase.
    pub fn phase(&mut self, span: PhaseSpan) {
        let t = self.time(span.start, span.end);
        self.push(Event::Phase { name: span.name, args: span.args, t });
    }

    /// Makes the plan of `generation` the one later op slices are described by;
    /// `describe` is called only for a plan not seen before.
    pub fn use_plan(&mut self, generation: u64, describe: impl FnOnce() -> PlanArgs) {
        if self.plans.last().is_some_and(|p| p.0 == generation) {
            return;
        }
        match self.plans.iter().position(|p| p.0 == generation) {
            Some(i) => {
                let p = self.plans.remove(i);
                self.plans.push(p);
            }
            None => self.plans.push((generation, describe())),
        }
    }

    /// A run starts.
    pub fn begin_run(&mut self) {
        self.run_start = Some(Instant::now());
    }

    /// The run started by `begin_run` ended (`completed`: not stopped or failed).
    pub fn end_run(&mut self, completed: bool) {
        let end = Instant::now();
        let start = self.run_start.take().unwrap_or(end);
        let t = self.time(start, end);
        self.push(Event::Run { run: self.runs, completed, t });
        self.runs += 1;
    }

    /// An executed op, and the worker spans its kernel left in `pool`.
    fn op(&mut self, sg: usize, op: usize, caller: Option<&CallFrame>, start: Instant, end: Instant, pool: Option<&ThreadPool>) {
        let t = self.time(start, end);
        let (sg, op) = (sg as u32, op as u32);
        let plan = self.plans.len().saturating_sub(1) as u32;
        let caller = caller.map_or([u32::MAX; 3], |f| [f.subgraph as u32, f.op as u32, f.iteration.map_or(u32::MAX, |i| i as u32)]);
        self.push(Event::Op { sg, op, run: self.runs, plan, caller, t });
        let Some(pool) = pool else { return };
        let mut spans = std::mem::take(&mut self.spans);
        pool.take_spans(&mut spans);
        for s in spans.drain(..) {
            self.workers = self.workers.max(s.thread);
            let t = self.time(s.start, s.end);
            self.push(Event::Worker { thread: s.thread as u32, sg, op, run: self.runs, tasks: s.tasks as u32, t });
        }
        self.spans = spans;
    }

    /// Runs recorded so far.
    pub fn runs(&self) -> u32 {
        self.runs
    }

    /// Writes the trace as Chrome trace-event JSON (the object form, with
    /// `traceEvents`), one event per line. `title` names the process.
    pub fn write_chrome(&self, w: &mut dyn Write, title: &str, model: &Model) -> std::io::Result<()> {
        let pid = std::process::id();
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut first = true;
        let mut emit = |w: &mut dyn Write, v: Value| -> std::io::Result<()> {
            w.write_all(if first { b"\n" } else { b",\n" })?;
            first = false;
            serde_json::to_writer(&mut *w, &v).map_err(std::io::Error::other)
        };
        w.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[")?;
        emit(w, json!({"name": "process_name", "ph": "M", "pid": pid, "tid": SESSION_TID, "args": {"name": title}}))?;
        emit(w, json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": SESSION_TID, "args": {"name": "session (caller of run)"}}))?;
        emit(w, json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": SESSION_TID, "args": {"sort_index": 0}}))?;
        for i in 1..=self.workers {
            let tid = SESSION_TID + i as u64;
            emit(w, json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": format!("ferrite-worker-{i}")}}))?;
            emit(w, json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": i}}))?;
        }
        let op_name =
            |sg: u32, op: u32| model.subgraphs.get(sg as usize).and_then(|g| g.ops.get(op as usize)).map_or_else(|| "?".to_string(), |o| o.code.name());
        for e in &self.events {
            let v = match e {
                Event::Phase { name, args, t } => {
                    let args: Map<String, Value> = args.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect();
                    json!({"name": name, "cat": "prepare", "ph": "X", "ts": us(t.start), "dur": us(t.dur), "pid": pid, "tid": SESSION_TID, "args": args})
                }
                Event::Run { run, completed, t } => json!({"name": format!("run {run}"), "cat": "run", "ph": "X", "ts": us(t.start), "dur": us(t.dur),
                    "pid": pid, "tid": SESSION_TID, "args": {"run": run, "completed": completed}}),
                Event::Op { sg, op, run, plan, caller, t } => {
                    let described = self.plans.get(*plan as usize).and_then(|p| p.1.get(&(*sg as usize, *op as usize)));
                    let (name, mut args) = match described {
                        Some((name, args)) => (name.clone(), args.clone()),
                        None => (op_name(*sg, *op), Map::new()),
                    };
                    args.insert("op_index".into(), json!(op));
                    args.insert("subgraph".into(), json!(sg));
                    args.insert("run".into(), json!(run));
                    if caller[0] != u32::MAX {
                        args.insert("called_by".into(), json!({"subgraph": caller[0], "op_index": caller[1]}));
                    }
                    if caller[2] != u32::MAX {
                        args.insert("iteration".into(), json!(caller[2]));
                    }
                    json!({"name": name, "cat": "op", "ph": "X", "ts": us(t.start), "dur": us(t.dur), "pid": pid, "tid": SESSION_TID, "args": args})
                }
                Event::Worker { thread, sg, op, run, tasks, t } => json!({"name": op_name(*sg, *op), "cat": "worker", "ph": "X", "ts": us(t.start),
                    "dur": us(t.dur), "pid": pid, "tid": SESSION_TID + u64::from(*thread),
                    "args": {"op_index": op, "subgraph": sg, "run": run, "tasks": tasks}}),
            };
            emit(w, v)?;
        }
        w.write_all(b"\n],\"otherData\":")?;
        let other =
            json!({"producer": concat!("ferrite ", env!("CARGO_PKG_VERSION")), "runs": self.runs, "events": self.events.len(), "dropped_events": self.dropped});
        serde_json::to_writer(&mut *w, &other).map_err(std::io::Error::other)?;
        w.write_all(b"}\n")
    }
}

/// The trace's description of every op of `g` and of the subgraphs it calls: type,
/// backend, input and output tensors (dtype, shape, bytes), FLOPs where estimated,
/// and the ops fused into it.
pub(crate) fn describe_plan(model: &Model, g: &CompiledGraph) -> PlanArgs {
    let mut out = PlanArgs::new();
    describe_graph(model, g, &mut out);
    out
}

fn describe_graph(model: &Model, g: &CompiledGraph, out: &mut PlanArgs) {
    let sg = g.subgraph;
    let Some(sub) = model.subgraphs.get(sg) else { return };
    if out.keys().any(|k| k.0 == sg) {
        // A subgraph called from two places is described by its first compilation.
        return;
    }
    let shape_of = |t: usize| g.tensors.get(t).map(|s| s.shape.clone());
    let tensor = |t: usize| {
        let slot = &g.tensors[t];
        let bytes = slot.dtype.size().map(|s| s * slot.shape.iter().product::<usize>());
        json!({"tensor": t, "name": sub.tensors[t].name, "dtype": slot.dtype.name(), "shape": slot.shape, "bytes": bytes})
    };
    for (oi, op) in sub.ops.iter().enumerate() {
        let ins: Vec<Value> = op.inputs.iter().flatten().filter(|&&t| t < g.tensors.len()).map(|&t| tensor(t)).collect();
        let outs: Vec<Value> = op.outputs.iter().filter(|&&t| t < g.tensors.len()).map(|&t| tensor(t)).collect();
        let total = |v: &[Value]| v.iter().filter_map(|t| t["bytes"].as_u64()).sum::<u64>();
        let mut args = Map::new();
        args.insert("type".into(), json!(op.code.name()));
        args.insert("backend".into(), json!(g.assignment.get(oi).map_or_else(|| "?".into(), OpRun::describe)));
        args.insert("input_bytes".into(), json!(total(&ins)));
        args.insert("output_bytes".into(), json!(total(&outs)));
        args.insert("bytes".into(), json!(total(&ins) + total(&outs)));
        args.insert("inputs".into(), Value::Array(ins));
        args.insert("outputs".into(), Value::Array(outs));
        if let Some(f) = estimate_flops(op, shape_of) {
            args.insert("flops".into(), json!(f));
        }
        let fused: Vec<usize> = g.assignment.iter().enumerate().filter(|(_, r)| **r == OpRun::Fused { into: oi }).map(|(j, _)| j).collect();
        if !fused.is_empty() {
            args.insert("fused".into(), json!(fused));
        }
        let name = match &op.code {
            OpCode::Custom(n) => n.clone(),
            c => c.name(),
        };
        out.insert((sg, oi), (name, args));
    }
    for step in &g.steps {
        for child in step.children() {
            describe_graph(model, child, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flops(code: BuiltinOp, params: OpParams, shapes: &[&[usize]]) -> Option<u64> {
        let n = shapes.len();
        let o = Op { code: OpCode::Builtin(code), version: 1, inputs: (0..n - 1).map(Some).collect(), outputs: vec![n - 1], params, custom_options: None };
        estimate_flops(&o, |t| shapes.get(t).map(|s| s.to_vec()))
    }

    #[test]
    fn flops_count_two_per_multiply_accumulate() {
        // 1x8x8x16 output of a 3x3 conv over 4 input channels: 1024 outputs x 36 taps.
        assert_eq!(flops(BuiltinOp::CONV_2D, OpParams::None, &[&[1, 10, 10, 4], &[16, 3, 3, 4], &[1, 8, 8, 16]]), Some(2 * 1024 * 36));
        assert_eq!(flops(BuiltinOp::DEPTHWISE_CONV_2D, OpParams::None, &[&[1, 10, 10, 4], &[1, 3, 3, 4], &[1, 8, 8, 4]]), Some(2 * 256 * 9));
        assert_eq!(flops(BuiltinOp::FULLY_CONNECTED, OpParams::None, &[&[2, 64], &[10, 64], &[2, 10]]), Some(2 * 20 * 64));
        let bmm = |adj_x| OpParams::BatchMatMul { adj_x, adj_y: false, asymmetric_quantize_inputs: false };
        assert_eq!(flops(BuiltinOp::BATCH_MATMUL, bmm(false), &[&[3, 4, 5], &[3, 5, 6], &[3, 4, 6]]), Some(2 * 72 * 5));
        assert_eq!(flops(BuiltinOp::BATCH_MATMUL, bmm(true), &[&[3, 5, 4], &[3, 5, 6], &[3, 4, 6]]), Some(2 * 72 * 5));
        assert_eq!(flops(BuiltinOp::TRANSPOSE_CONV, OpParams::None, &[&[4], &[8, 3, 3, 4], &[1, 5, 5, 4], &[1, 10, 10, 8]]), Some(2 * 100 * 72));
        assert_eq!(flops(BuiltinOp::ADD, OpParams::None, &[&[4], &[4], &[4]]), None);
    }
}
