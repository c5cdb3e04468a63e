//! Compilation of a subgraph for a session's input shapes and backends, as named
//! passes, one file each, run op by op by the driver ([`compile`]):
//!
//! 1. `control_flow.rs`: IF, WHILE and CALL_ONCE become executor steps holding their
//!    compiled child subgraphs; resource variables are the executor's too.
//! 2. `fusion.rs`: a zero PAD runs inside the VALID convolution reading it, and
//!    element-wise epilogues inside the convolution producing their input.
//! 3. `assign.rs`: the first backend of the session's list that builds the op (or
//!    the one an override pins it to) gives its kernel and output shapes.
//! 4. `alias.rs`: shape-only ops (RESHAPE, SQUEEZE, EXPAND_DIMS) share their input's memory.
//! 5. `fold.rs`: ops whose inputs are all constant run once, at prepare.
//! 6. `plan.rs`: the static memory plan over the remaining steps, and each step's
//!    input and output locations.
//!
//! Ops whose output shapes depend on run-time values, and every op after them, form
//! the dynamic tail the executor builds and runs at run time.

use std::sync::Arc;

use crate::backend::select::Backends;
use crate::backend::{BackendContext, CustomOpRegistry, KernelFn};
use crate::error::{Error, Result};
use crate::memory::MemoryPlan;
use crate::model::{DType, Model, Subgraph};
use smallvec::SmallVec;

mod alias;
mod assign;
mod chains;
mod control_flow;
mod fold;
mod fusion;
mod plan;
mod segment;
#[cfg(test)]
mod test_util;

pub(crate) use assign::build_op;
use fusion::PendingEpilogue;

/// Owned, 8-byte aligned bytes (folded constants, realigned constants).
#[derive(Debug, Clone)]
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// Zeroed storage of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        AlignedBytes { words: vec![0; len.div_ceil(8)], len }
    }
    /// Copy of `b`.
    pub fn from_slice(b: &[u8]) -> Self {
        let mut a = Self::zeroed(b.len());
        a.bytes_mut().copy_from_slice(b);
        a
    }
    /// The bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
    /// The bytes, mutable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// Where a tensor's bytes live during execution.
#[derive(Debug, Clone)]
pub enum Loc {
    /// Not materialised (unused).
    None,
    /// In the session arena.
    Arena {
        /// Byte offset.
        offset: usize,
        /// Byte length.
        len: usize,
    },
    /// In the model bytes, used in place.
    Model(std::ops::Range<usize>),
    /// Owned by the compiled graph (folded or realigned constant).
    Owned(Arc<AlignedBytes>),
}

/// A tensor as compiled: resolved dtype, shape and location.
#[derive(Debug, Clone)]
pub struct TensorSlot {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Location.
    pub loc: Loc,
}

/// Where a step reads one input from; resolved once after planning.
#[derive(Debug, Clone)]
pub(crate) enum Src {
    Arena(usize, usize),
    /// Graph input k (or an alias of it): the caller's buffer when bound, else its arena slot.
    Input(usize, usize, usize),
    Model(std::ops::Range<usize>),
    Owned(Arc<AlignedBytes>),
}

/// How graph output k reaches a caller-bound buffer.
#[derive(Debug, Clone)]
pub(crate) enum OutPlan {
    /// Its producing kernel writes into the caller's buffer.
    Direct,
    /// Copied after the run from here.
    Copy(Src),
}

/// One executable step, with its input and output locations resolved at prepare
/// so that running it needs no lookups and no heap allocation.
pub struct Step {
    /// Op index in the subgraph.
    pub op: usize,
    /// What the step does.
    pub(crate) work: Work,
    pub(crate) inputs: SmallVec<[Option<Src>; 8]>,
    /// Inputs the kernel does not read at run time (it holds a prepacked copy).
    pub(crate) prepacked: SmallVec<[usize; 2]>,
    /// (arena offset, length, graph output index when written in place for a bound buffer).
    pub(crate) outputs: SmallVec<[(usize, usize, Option<usize>); 4]>,
    /// Tensors read by element-wise ops fused into this step's kernel, passed after
    /// the op's own inputs.
    pub(crate) extra: SmallVec<[usize; 2]>,
    /// Op inputs read from another tensor: (input slot, tensor). A folded PAD's
    /// reader reads the PAD's input.
    pub(crate) substituted: SmallVec<[(usize, usize); 1]>,
    /// A step running several ops (a GPU segment): the tensors it reads and
    /// writes, in place of its op's.
    pub(crate) io: Option<Box<SegmentIo>>,
    /// The step's arena views, checked once for the arena the runs lend (the
    /// executor's fast path); empty until the first run.
    pub(crate) views: crate::exec::StepViews,
}

/// The host tensors a multi-op step exchanges: those it uploads at entry and
/// those it reads back at exit (its crossings).
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentIo {
    pub(crate) reads: Vec<usize>,
    pub(crate) writes: Vec<usize>,
    /// Its ops, in order: (op index, input slots read through a folded PAD).
    pub(crate) ops: Vec<(usize, SmallVec<[usize; 1]>)>,
    /// Runs them one by one when a run is observed (callbacks, tracing, profile).
    pub(crate) by_op: Option<crate::observe::OpByOpHandle>,
}

impl Step {
    /// The compiled subgraphs this step runs (control flow).
    pub(crate) fn children(&self) -> Vec<&CompiledGraph> {
        match &self.work {
            Work::If { then, otherwise } => vec![&then.graph, &otherwise.graph],
            Work::While { cond, body, .. } => vec![&cond.graph, &body.graph],
            Work::CallOnce { init, .. } => vec![&init.graph],
            _ => Vec::new(),
        }
    }

    /// The tensors this step reads: the op's inputs (after substitutions), then the
    /// fused ops' extra inputs.
    fn reads(&self, op: &crate::model::Op) -> SmallVec<[usize; 8]> {
        if let Some(io) = &self.io {
            return io.reads.iter().copied().collect();
        }
        op.inputs
            .iter()
            .enumerate()
            .filter_map(|(k, i)| self.substituted.iter().find(|s| s.0 == k).map(|s| s.1).or(*i))
            .chain(self.extra.iter().copied())
            .collect()
    }

    /// The tensors this step writes: its op's outputs, or a segment's crossings.
    fn writes<'a>(&'a self, op: &'a crate::model::Op) -> &'a [usize] {
        match &self.io {
            Some(io) => &io.writes,
            None => &op.outputs,
        }
    }
}

/// A child subgraph (branch, loop part, initializer) with its own plan and arena,
/// run in the same session context as its parent.
pub(crate) struct Child {
    pub(crate) graph: CompiledGraph,
    pub(crate) arena: Vec<crate::memory::Line>,
}

impl Child {
    fn new(graph: CompiledGraph) -> Child {
        let arena = crate::memory::Line::zeroed(graph.plan.arena_bytes);
        Child { graph, arena }
    }
}

/// Deepest nesting of control flow, which also stops recursive subgraph references.
pub const MAX_NESTING: usize = 16;

/// What one step does.
pub(crate) enum Work {
    Kernel(KernelFn),
    If {
        then: Box<Child>,
        otherwise: Box<Child>,
    },
    While {
        cond: Box<Child>,
        body: Box<Child>,
        next: Vec<AlignedBytes>,
        flag: AlignedBytes,
    },
    CallOnce {
        init: Box<Child>,
        ran_at: Option<u64>,
    },
    ReadVariable,
    AssignVariable,
    /// ASSIGN_VARIABLE whose value's producer runs here, writing the variable's
    /// `len` bytes itself (see `control_flow::assign_in_place`): its kernel reads
    /// the step's inputs after the resource handle.
    AssignComputed {
        kernel: KernelFn,
        len: usize,
    },
    /// A kernel reading some inputs straight from variables (see
    /// `control_flow::read_in_place`): (input slot holding the resource handle, the
    /// value's bytes) for each.
    KernelOnVariables {
        kernel: KernelFn,
        reads: SmallVec<[(usize, usize); 2]>,
    },
}

/// A subgraph ready to run.
pub struct CompiledGraph {
    /// Subgraph index.
    pub subgraph: usize,
    /// Per-tensor slots.
    pub tensors: Vec<TensorSlot>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// The memory plan.
    pub plan: MemoryPlan,
    /// Ops evaluated once at prepare because all their inputs were constant.
    pub folded_ops: usize,
    /// Shape-only ops (RESHAPE, SQUEEZE, EXPAND_DIMS) whose output shares its input's memory.
    pub aliased_ops: usize,
    /// Ops run inside a neighbouring convolution (folded PADs and epilogues).
    pub fused_ops: usize,
    /// Element-wise ops run in chains, several ops to a step, block by block
    /// (`compile/chains.rs`).
    pub chained_ops: usize,
    pub(crate) out_plans: Vec<OutPlan>,
    /// Ops from the first one whose output shape depends on run-time values; they are
    /// built and run one by one at run time on tensors allocated then.
    pub dynamic: Option<DynamicTail>,
    /// Where each op of the subgraph runs.
    pub assignment: Vec<OpRun>,
    /// The GPU segments of this subgraph and their memory.
    pub gpu: GpuPlan,
}

/// GPU segments of a compiled subgraph: runs of consecutive GPU ops executed as
/// one submission, and the GPU memory planned for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuPlan {
    /// Segments (one command submission each per run).
    pub segments: usize,
    /// Ops run inside them.
    pub ops: usize,
    /// Bytes of GPU buffers planned for their tensors (weights excluded).
    pub buffer_bytes: usize,
    /// Sum over segments of the most tensor bytes alive at one op: the plan's lower bound.
    pub lower_bound_bytes: usize,
}

/// Where the GPU segments' run time went, summed over the runs since prepare:
/// uploading host inputs, the GPU's work, reading outputs back.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuTimes {
    /// Segment runs counted.
    pub runs: u64,
    /// Host time writing inputs into GPU buffers (converted to float16 there with
    /// that precision), seconds.
    pub upload_s: f64,
    /// GPU time: from the adapter's timestamps around each submission's compute
    /// pass where it has `TIMESTAMP_QUERY` (`gpu_timestamps`), else host time from
    /// the submission until the GPU is done, seconds.
    pub gpu_s: f64,
    /// Host time mapping the staging buffer and copying (converting) the outputs, seconds.
    pub readback_s: f64,
    /// Whether `gpu_s` comes from GPU timestamps.
    pub gpu_timestamps: bool,
}

/// Where one op runs after compilation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpRun {
    /// A kernel of this backend.
    Backend(&'static str),
    /// A registered custom op's kernel.
    Custom,
    /// The executor itself (control flow, resource variables).
    Executor,
    /// Evaluated once at prepare: every input was constant.
    Folded,
    /// Moves no data: its output shares its input's memory.
    Alias,
    /// Runs inside the kernel of op `into` (a folded PAD, an epilogue).
    Fused {
        /// The op whose kernel computes it.
        into: usize,
    },
    /// Built when it runs (its shapes depend on run-time values).
    Dynamic,
}

impl OpRun {
    /// One word for tallies: the backend's name, or how the op runs
    /// (`custom`, `executor`, `folded`, `alias`, `fused`, `dynamic`).
    pub fn kind(&self) -> &'static str {
        match self {
            OpRun::Backend(b) => b,
            OpRun::Custom => "custom",
            OpRun::Executor => "executor",
            OpRun::Folded => "folded",
            OpRun::Alias => "alias",
            OpRun::Fused { .. } => "fused",
            OpRun::Dynamic => "dynamic",
        }
    }

    /// Short text for reports: the backend's name, or how the op runs.
    pub fn describe(&self) -> String {
        match self {
            OpRun::Backend(b) => (*b).to_string(),
            OpRun::Custom => "custom".into(),
            OpRun::Executor => "executor".into(),
            OpRun::Folded => "folded at prepare".into(),
            OpRun::Alias => "alias (no kernel)".into(),
            OpRun::Fused { into } => format!("fused into op {into}"),
            OpRun::Dynamic => "at run time".into(),
        }
    }
}

/// A tensor allocated at run time (data-dependent shape).
#[derive(Debug)]
pub struct DynValue {
    /// Element type.
    pub dtype: DType,
    /// Shape computed at run time.
    pub shape: Vec<usize>,
    /// The data.
    pub data: AlignedBytes,
}

/// The data-dependent part of a subgraph.
#[derive(Debug)]
pub struct DynamicTail {
    /// First op run dynamically.
    pub first_op: usize,
    /// Per tensor: the last tail op reading it (dynamic values are freed after it).
    pub(crate) last_use: Vec<usize>,
    /// Run-time tensors of the current run.
    pub values: Vec<Option<DynValue>>,
}

/// Limits applied while compiling.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest arena (and largest folded constant) allowed.
    pub max_arena_bytes: usize,
    /// Plan the session's subgraph for a shared arena: what outlives a run at the
    /// arena's start, the intermediates above it (see `MemoryPlan::own_bytes`).
    pub shared_scratch: bool,
    /// Run chains of float element-wise ops as one step each, block by block (the
    /// `chains` pass); off, each op is a step of its own. The results are the same.
    pub fuse_chains: bool,
}

pub(crate) fn bytes_of(dtype: DType, shape: &[usize], limits: &Limits, what: impl Fn() -> String) -> Result<usize> {
    let size = dtype.size().ok_or_else(|| Error::Unsupported(format!("{}: element type {}", what(), dtype.name()).into()))?;
    let n = shape.iter().try_fold(size, |acc, &d| acc.checked_mul(d)).filter(|&b| b <= limits.max_arena_bytes);
    n.ok_or_else(|| {
        Error::ResourceLimit(format!("{}: shape {shape:?} of {} exceeds the session limit of {} bytes", what(), dtype.name(), limits.max_arena_bytes).into())
    })
}

/// Compiles subgraph `sg` with the given input shapes.
pub fn compile(
    model: &Model,
    sg: usize,
    input_shapes: &[Vec<usize>],
    backends: &Backends,
    custom: &CustomOpRegistry,
    ctx: &mut BackendContext,
    limits: Limits,
) -> Result<CompiledGraph> {
    compile_at(&Env { model, backends, custom, limits }, sg, input_shapes, &[], ctx, 0)
}

/// What every pass of one compilation reads: the model and the session's choices.
struct Env<'a> {
    model: &'a Model,
    backends: &'a Backends,
    custom: &'a CustomOpRegistry,
    limits: Limits,
}

/// The driver: the passes, in order, over each op of the subgraph. Shapes flow from
/// op to op (a kernel's build infers its outputs), so each op goes through every pass
/// before the next op starts; an op a pass takes (lowers, fuses, aliases, folds) goes
/// no further. Then the memory plan, over the steps that remain.
fn compile_at(
    env: &Env<'_>,
    sg: usize,
    input_shapes: &[Vec<usize>],
    const_inputs: &[Option<Loc>],
    ctx: &mut BackendContext,
    depth: usize,
) -> Result<CompiledGraph> {
    // Constants a caller passes in depend on the call site (and may come from its
    // input shapes): what is prepared from them here is not the model's to share.
    let private = ctx.private_now;
    ctx.private_now = private || const_inputs.iter().any(Option::is_some);
    let r = compile_subgraph(env, sg, input_shapes, const_inputs, ctx, depth);
    ctx.private_now = private;
    r
}

fn compile_subgraph(
    env: &Env<'_>,
    sg: usize,
    input_shapes: &[Vec<usize>],
    const_inputs: &[Option<Loc>],
    ctx: &mut BackendContext,
    depth: usize,
) -> Result<CompiledGraph> {
    if depth > MAX_NESTING {
        return Err(Error::Unsupported(format!("control flow nested deeper than {MAX_NESTING} (or recursive) at subgraph {sg}").into()));
    }
    let g = env.model.subgraphs.get(sg).ok_or_else(|| Error::InvalidModel(format!("subgraph {sg} does not exist").into()))?;
    let compile_started = ctx.phases.is_some().then(std::time::Instant::now);
    let mut c = Compilation::new(g, sg, env.model.bytes(), input_shapes, const_inputs, env.limits)?;
    let mut dynamic_from: Option<usize> = None;
    for oi in 0..g.ops.len() {
        let started = ctx.phases.is_some().then(std::time::Instant::now);
        let dynamic = compile_op(&mut c, env, ctx, oi, depth)?;
        // The mapped pages of constants just repacked or converted, which nothing
        // reads any more, go now: the file's copy and the prepared one never both
        // stay resident.
        for r in c.unread_model_ranges.drain(..) {
            env.model.release_pages(r);
        }
        if let Some(start) = started {
            ctx.record_phase(format!("{} #{oi}", g.ops[oi].code.name()).into(), &[("subgraph", sg), ("op", oi)], start);
        }
        if dynamic {
            dynamic_from = Some(oi);
            break;
        }
    }
    fusion::close_epilogues(&mut c);
    let chained_ops = ctx.phase("fuse element-wise chains", &[("subgraph", sg)], |ctx| chains::fuse_chains(&mut c, dynamic_from, ctx), |&n| n > 0);
    let gpu = segment::form_segments(&mut c, dynamic_from, ctx)?;

    let Compilation { mut tensors, mut steps, alias_of, assignment, folded_ops, aliased_ops, fused_ops, .. } = c;
    let (plan, out_plans) = ctx.phase(
        "plan memory",
        &[("subgraph", sg)],
        |_| -> Result<_> {
            // Only the session's own subgraph borrows scratch; the subgraphs it calls
            // keep their arenas.
            let limits = Limits { shared_scratch: env.limits.shared_scratch && depth == 0, ..env.limits };
            let plan = plan::plan_memory(g, sg, &steps, &mut tensors, &alias_of, dynamic_from, &limits)?;
            let out_plans = plan::resolve_io(g, sg, &mut steps, &tensors, &alias_of)?;
            if dynamic_from.is_none() {
                fold::release_unread_constants(g, &steps, &mut tensors);
            }
            Ok((plan, out_plans))
        },
        |_| true,
    )?;
    let dynamic = dynamic_from.map(|first_op| {
        let mut last_use = vec![usize::MAX; tensors.len()];
        for (oi, op) in g.ops.iter().enumerate().skip(first_op) {
            for &t in op.inputs.iter().flatten() {
                last_use[t] = oi;
            }
        }
        DynamicTail { first_op, last_use, values: (0..tensors.len()).map(|_| None).collect() }
    });
    if let Some(start) = compile_started {
        ctx.record_phase(format!("compile subgraph {sg}").into(), &[("subgraph", sg), ("ops", g.ops.len()), ("steps", steps.len())], start);
    }
    Ok(CompiledGraph { subgraph: sg, tensors, steps, plan, folded_ops, aliased_ops, fused_ops, chained_ops, out_plans, dynamic, assignment, gpu })
}

/// Op `oi` through the passes, in order, until one takes it. True when its shapes
/// depend on run-time values: it starts the dynamic tail. While the session traces,
/// the passes that take the op (and every kernel build) are prepare-phase slices.
fn compile_op(c: &mut Compilation<'_>, env: &Env<'_>, ctx: &mut BackendContext, oi: usize, depth: usize) -> Result<bool> {
    let at = [("subgraph", c.sg), ("op", oi)];
    let took = |r: &Result<bool>| matches!(r, Ok(true));
    let held = c.held_inputs(oi);
    // IF / WHILE / CALL_ONCE (children compiled here) and variables: executor steps.
    if ctx.phase("control flow", &at, |ctx| control_flow::lower(c, env, ctx, oi, &held, depth), took)? {
        return Ok(false);
    }
    // A zero PAD into the VALID convolution reading it; an element-wise op into
    // the convolution producing its input.
    if fusion::fold_pad(c, oi, &held) || fusion::fold_into_producer(c, env.model, oi) {
        return Ok(false);
    }
    // The first backend that builds the op; its build infers the output shapes.
    // An op whose shapes depend on run-time values starts the dynamic tail.
    let pad = fusion::padded_input(c, oi);
    let offered = fusion::offer_epilogue(c, oi);
    let assigned = ctx.phase("build kernel", &at, |ctx| assign::assign(c, env, ctx, oi, &held, pad, offered.as_ref().map(|o| &o.1)), |_| true)?;
    let Some(mut built) = assigned else { return Ok(true) };
    // A shape-only op moves no data: its output shares its input's memory.
    if alias::alias(c, oi) {
        return Ok(false);
    }
    // An op on constants runs once, now.
    if ctx.phase("fold constants", &at, |ctx| fold::fold(c, ctx, oi, &held, &mut built), took)? {
        return Ok(false);
    }
    c.kernel_step(oi, built, offered, ctx);
    Ok(false)
}

/// One subgraph's compilation in progress: what the passes read and update as
/// they go through its ops in order.
struct Compilation<'m> {
    g: &'m Subgraph,
    sg: usize,
    /// The model's bytes, where constants live.
    bytes: &'m [u8],
    limits: Limits,
    /// Each tensor's dtype, shape and location as resolved so far.
    tensors: Vec<TensorSlot>,
    steps: Vec<Step>,
    /// alias_of[t] = the tensor whose memory `t` shares (itself when not an alias).
    alias_of: Vec<usize>,
    /// Where each op runs, for `inspect --backends` and the crossing report.
    assignment: Vec<OpRun>,
    folded_ops: usize,
    aliased_ops: usize,
    fused_ops: usize,
    /// The op producing each tensor (usize::MAX for inputs and constants).
    producer_of: Vec<usize>,
    /// How many ops read each tensor, plus one when it leaves the subgraph.
    readers_of: Vec<usize>,
    /// Last op reading each tensor, and whether a step reads it at run time, so
    /// prepare-time constants can be freed as soon as nothing needs them.
    last_reader: Vec<usize>,
    read_at_run: Vec<bool>,
    /// PAD ops folded into their reader.
    folded_pads: Vec<fusion::FoldedPad>,
    /// Ranges of the model bytes holding constants that no step reads at run time
    /// and whose last reader is built (it folded or packed them), to give back.
    unread_model_ranges: Vec<std::ops::Range<usize>>,
    /// Kernels that took an epilogue slot, waiting for their output's reader.
    pending_epilogues: Vec<PendingEpilogue>,
}

impl<'m> Compilation<'m> {
    /// The starting state: constants where the model keeps them (realigned when
    /// kernels could not view them in place), the given input shapes, and the
    /// constants a parent passes for inputs.
    fn new(g: &'m Subgraph, sg: usize, bytes: &'m [u8], input_shapes: &[Vec<usize>], const_inputs: &[Option<Loc>], limits: Limits) -> Result<Self> {
        let mut tensors: Vec<TensorSlot> = g
            .tensors
            .iter()
            .map(|t| {
                let loc = match &t.data {
                    None => Loc::None,
                    // Kernels view constants as typed slices; realign the rare misaligned one.
                    Some(r) if !(bytes.as_ptr() as usize + r.start).is_multiple_of(t.dtype.size().unwrap_or(1).min(8)) => {
                        Loc::Owned(Arc::new(AlignedBytes::from_slice(&bytes[r.clone()])))
                    }
                    Some(r) => Loc::Model(r.clone()),
                };
                TensorSlot { dtype: t.dtype, shape: t.shape.clone(), loc }
            })
            .collect();
        for (k, &t) in g.inputs.iter().enumerate() {
            if let Some(s) = input_shapes.get(k) {
                tensors[t].shape = s.clone();
            }
            // A branch input the parent passes from a constant is that constant here, so
            // kernels pack it once at prepare instead of treating it as run-time data.
            if let Some(Some(loc @ (Loc::Model(_) | Loc::Owned(_)))) = const_inputs.get(k) {
                tensors[t].loc = loc.clone();
            }
        }

        // Tensors that are read but never written (nor inputs) read as zeros, as in LiteRT.
        // Variable tensors are state that kernels write in place: the plan gives them
        // arena memory that lasts from run to run.
        let mut produced = vec![false; tensors.len()];
        for &t in g.inputs.iter().chain(g.ops.iter().flat_map(|o| o.outputs.iter())) {
            produced[t] = true;
        }
        for op in &g.ops {
            for &t in op.inputs.iter().flatten() {
                if !produced[t] && !g.tensors[t].is_variable && matches!(tensors[t].loc, Loc::None) {
                    let n = bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || format!("subgraph {sg} tensor {t}"))?;
                    tensors[t].loc = Loc::Owned(Arc::new(AlignedBytes::zeroed(n)));
                }
            }
        }

        let n = tensors.len();
        let mut producer_of = vec![usize::MAX; n];
        let mut readers_of = vec![0usize; n];
        let mut last_reader = vec![0usize; n];
        for (oi, op) in g.ops.iter().enumerate() {
            for &t in &op.outputs {
                producer_of[t] = oi;
            }
            for &t in op.inputs.iter().flatten() {
                readers_of[t] += 1;
                last_reader[t] = oi;
            }
        }
        for &t in &g.outputs {
            readers_of[t] += 1;
        }
        Ok(Compilation {
            g,
            sg,
            bytes,
            limits,
            tensors,
            steps: Vec::with_capacity(g.ops.len()),
            alias_of: (0..n).collect(),
            assignment: vec![OpRun::Dynamic; g.ops.len()],
            folded_ops: 0,
            aliased_ops: 0,
            fused_ops: 0,
            producer_of,
            readers_of,
            last_reader,
            read_at_run: vec![false; n],
            folded_pads: Vec::new(),
            unread_model_ranges: Vec::new(),
            pending_epilogues: Vec::new(),
        })
    }

    /// Where op `oi`'s inputs are now (None for omitted ones): a snapshot, so the
    /// passes can read constant values while they update `tensors`.
    fn held_inputs(&self, oi: usize) -> Vec<Option<Loc>> {
        self.g.ops[oi].inputs.iter().map(|i| i.map(|t| self.tensors[t].loc.clone())).collect()
    }

    /// The value of input `k` of an op, from `held`, when it is known at prepare.
    fn value<'a>(&'a self, held: &'a [Option<Loc>], k: usize) -> Option<&'a [u8]> {
        match held.get(k)?.as_ref()? {
            Loc::Model(r) => self.bytes.get(r.clone()),
            Loc::Owned(b) => Some(b.bytes()),
            _ => None,
        }
    }

    /// Op `oi` as a step running its kernel. Inputs the kernel keeps a packing of
    /// are not read at run time, and constants made at prepare that nothing reads
    /// any more are freed.
    fn kernel_step(&mut self, oi: usize, built: assign::Assigned, offered: Option<(usize, crate::backend::EpilogueSlot)>, ctx: &mut BackendContext) {
        let op = &self.g.ops[oi];
        let packed = ctx.take_packed_by_build();
        let prepacked: SmallVec<[usize; 2]> = op.inputs.iter().enumerate().filter(|(_, i)| i.is_some_and(|t| packed.contains(&t))).map(|(k, _)| k).collect();
        for (k, i) in op.inputs.iter().enumerate() {
            if let (Some(t), false) = (i, prepacked.contains(&k)) {
                self.read_at_run[*t] = true;
            }
        }
        fold::release_consumed(self, oi, |k| prepacked.contains(&k));
        let mut substituted = built.substituted;
        let reads = control_flow::read_in_place(self, oi, &prepacked, &mut substituted);
        if built.applies_epilogues {
            fusion::await_epilogue(self, oi, offered);
        }
        let work = if reads.is_empty() { Work::Kernel(built.kernel) } else { Work::KernelOnVariables { kernel: built.kernel, reads } };
        self.steps.push(Step {
            op: oi,
            work,
            inputs: SmallVec::new(),
            prepacked,
            outputs: SmallVec::new(),
            extra: SmallVec::new(),
            substituted,
            io: None,
            views: Default::default(),
        });
    }
}

/// A tensor that one backend produces and another reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crossing {
    /// Subgraph index.
    pub subgraph: usize,
    /// The tensor crossing.
    pub tensor: usize,
    /// The op producing it, and where that runs.
    pub from: (usize, &'static str),
    /// The op reading it, and where that runs.
    pub to: (usize, &'static str),
    /// How the tensor gets across: in place between host backends, a copy
    /// (upload or readback) to and from the GPU.
    pub transfer: &'static str,
}

impl CompiledGraph {
    /// Where each op runs, for this subgraph and every subgraph it calls
    /// (branches, loop parts, initializers): (subgraph, op index, how it runs).
    pub fn assignments(&self) -> Vec<(usize, usize, OpRun)> {
        let mut out: Vec<(usize, usize, OpRun)> = self.assignment.iter().enumerate().map(|(oi, r)| (self.subgraph, oi, *r)).collect();
        for step in &self.steps {
            for child in step.children() {
                // A subgraph called twice (both branches of two IFs) is listed once.
                let new: Vec<_> = child.assignments().into_iter().filter(|a| !out.contains(a)).collect();
                out.extend(new);
            }
        }
        out
    }

    /// The tensors passed between ops of different backends, in this subgraph and
    /// the subgraphs it calls.
    pub fn crossings(&self, model: &Model) -> Vec<Crossing> {
        let mut out = assign::crossings(&model.subgraphs[self.subgraph], self.subgraph, &self.assignment);
        for step in &self.steps {
            for child in step.children() {
                out.extend(child.crossings(model).into_iter().filter(|c| !out.contains(c)).collect::<Vec<_>>());
            }
        }
        out
    }

    /// Dtype and shape of each subgraph output under this plan.
    fn output_specs(&self, model: &Model) -> Vec<(DType, Vec<usize>)> {
        model.subgraphs[self.subgraph].outputs.iter().map(|&t| (self.tensors[t].dtype, self.tensors[t].shape.clone())).collect()
    }
}
