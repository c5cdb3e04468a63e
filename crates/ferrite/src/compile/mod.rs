//! Compilation: shape inference and kernel selection per op (through the
//! backends), constant folding, then the static memory plan.

use std::sync::Arc;

use crate::backend::select::{Backends, Candidates};
use crate::backend::{BackendContext, Built, CustomOpRegistry, InputDesc, KernelFn, OpContext};
use crate::error::{Detail, Error, Result};
use crate::memory::MemoryPlan;
use crate::model::{BuiltinOp as B, DType, Model, OpCode};
use smallvec::SmallVec;

mod fusion;
mod plan;

use fusion::{epilogue_reader, fold_epilogue, foldable_pad, PendingEpilogue};

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
}

impl Step {
    /// The compiled subgraphs this step runs (control flow).
    fn children(&self) -> Vec<&CompiledGraph> {
        match &self.work {
            Work::If { then, otherwise } => vec![&then.graph, &otherwise.graph],
            Work::While { cond, body, .. } => vec![&cond.graph, &body.graph],
            Work::CallOnce { init, .. } => vec![&init.graph],
            _ => Vec::new(),
        }
    }

    /// The tensors this step reads: the op's inputs (after substitutions), then the
    /// fused ops' extra inputs.
    fn reads<'a>(&'a self, op: &'a crate::model::Op) -> impl Iterator<Item = usize> + 'a {
        op.inputs.iter().enumerate().filter_map(|(k, i)| self.substituted.iter().find(|s| s.0 == k).map(|s| s.1).or(*i)).chain(self.extra.iter().copied())
    }
}

/// A child subgraph (branch, loop part, initializer) with its own plan and arena,
/// run in the same session context as its parent.
pub(crate) struct Child {
    pub(crate) graph: CompiledGraph,
    pub(crate) arena: Vec<u64>,
}

impl Child {
    fn new(graph: CompiledGraph) -> Child {
        let arena = vec![0u64; graph.plan.arena_bytes.div_ceil(8)];
        Child { graph, arena }
    }
}

/// Deepest nesting of control flow, which also stops recursive subgraph references.
pub const MAX_NESTING: usize = 16;

/// What one step does.
pub(crate) enum Work {
    Kernel(KernelFn),
    If { then: Box<Child>, otherwise: Box<Child> },
    While { cond: Box<Child>, body: Box<Child>, next: Vec<AlignedBytes>, flag: AlignedBytes },
    CallOnce { init: Box<Child>, ran_at: Option<u64> },
    ReadVariable,
    AssignVariable,
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
    pub(crate) out_plans: Vec<OutPlan>,
    /// Ops from the first one whose output shape depends on run-time values; they are
    /// built and run one by one at run time on tensors allocated then.
    pub dynamic: Option<DynamicTail>,
    /// Where each op of the subgraph runs.
    pub assignment: Vec<OpRun>,
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
    compile_at(model, sg, input_shapes, &[], backends, custom, ctx, limits, 0)
}

#[allow(clippy::too_many_arguments)]
fn compile_at(
    model: &Model,
    sg: usize,
    input_shapes: &[Vec<usize>],
    const_inputs: &[Option<Loc>],
    backends: &Backends,
    custom: &CustomOpRegistry,
    ctx: &mut BackendContext,
    limits: Limits,
    depth: usize,
) -> Result<CompiledGraph> {
    if depth > MAX_NESTING {
        return Err(Error::Unsupported(format!("control flow nested deeper than {MAX_NESTING} (or recursive) at subgraph {sg}").into()));
    }
    let g = model.subgraphs.get(sg).ok_or_else(|| Error::InvalidModel(format!("subgraph {sg} does not exist").into()))?;
    let bytes = model.bytes();
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
    let mut produced = vec![false; tensors.len()];
    for &t in g.inputs.iter().chain(g.ops.iter().flat_map(|o| o.outputs.iter())) {
        produced[t] = true;
    }
    for op in &g.ops {
        for &t in op.inputs.iter().flatten() {
            if !produced[t] && matches!(tensors[t].loc, Loc::None) {
                let n = bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || format!("subgraph {sg} tensor {t}"))?;
                tensors[t].loc = Loc::Owned(Arc::new(AlignedBytes::zeroed(n)));
            }
        }
    }

    let mut steps = Vec::with_capacity(g.ops.len());
    let mut folded_ops = 0;
    let mut aliased_ops = 0;
    let mut fused_ops = 0;
    // PAD ops folded into their reader: (PAD output, PAD input, [top, bottom, left, right]).
    let mut folded_pads: Vec<(usize, usize, [usize; 4])> = Vec::new();
    // Kernels that took an epilogue slot, waiting for their output's reader.
    let mut pending_epilogues: Vec<PendingEpilogue> = Vec::new();
    // The op producing each tensor (usize::MAX for inputs and constants).
    let mut producer_of = vec![usize::MAX; tensors.len()];
    for (oi, op) in g.ops.iter().enumerate() {
        for &t in &op.outputs {
            producer_of[t] = oi;
        }
    }
    // How many ops read each tensor, and whether it leaves the subgraph.
    let mut readers_of = vec![0usize; tensors.len()];
    for op in &g.ops {
        for &t in op.inputs.iter().flatten() {
            readers_of[t] += 1;
        }
    }
    for &t in &g.outputs {
        readers_of[t] += 1;
    }
    let mut dynamic_from: Option<usize> = None;
    // Where each op runs, for `inspect --backends` and the crossing report.
    let mut assignment = vec![OpRun::Dynamic; g.ops.len()];
    // Last op reading each tensor, and whether a step reads it at run time, so
    // prepare-time constants can be freed as soon as nothing needs them.
    let mut read_at_run = vec![false; tensors.len()];
    let mut last_reader = vec![0usize; tensors.len()];
    for (oi, op) in g.ops.iter().enumerate() {
        for &t in op.inputs.iter().flatten() {
            last_reader[t] = oi;
        }
    }
    // alias_of[t] = the tensor whose memory `t` shares (itself when not an alias).
    let mut alias_of: Vec<usize> = (0..tensors.len()).collect();
    for (oi, op) in g.ops.iter().enumerate() {
        // Snapshot constant sources so descriptors do not borrow `tensors`, which this loop updates.
        let held: Vec<Option<Loc>> = op.inputs.iter().map(|i| i.map(|t| tensors[t].loc.clone())).collect();
        let value_of = |k: usize| -> Option<&[u8]> {
            match held.get(k)?.as_ref()? {
                Loc::Model(r) => bytes.get(r.clone()),
                Loc::Owned(b) => Some(b.bytes()),
                _ => None,
            }
        };
        let inputs: Vec<Option<InputDesc<'_>>> = op
            .inputs
            .iter()
            .enumerate()
            .map(|(k, i)| {
                i.map(|t| InputDesc {
                    tensor: t,
                    dtype: tensors[t].dtype,
                    shape: tensors[t].shape.clone(),
                    value: value_of(k),
                    constant: value_of(k).is_some(),
                    quant: g.tensors[t].quant.as_ref(),
                    sparsity: g.tensors[t].sparsity.as_ref(),
                })
            })
            .collect();
        // Control flow and resource variables are run by the executor itself.
        if let OpCode::Builtin(code) = op.code {
            let child = |ctx: &mut BackendContext, sub: usize, operands: &[Option<usize>], consts: &[Option<Loc>], n_out: usize| -> Result<Child> {
                let shapes: Vec<Vec<usize>> = operands.iter().map(|t| t.map(|t| tensors[t].shape.clone()).unwrap_or_default()).collect();
                let s = model.subgraphs.get(sub).ok_or_else(|| Error::InvalidModel(format!("subgraph {sg} op {oi}: subgraph {sub} does not exist").into()))?;
                // Children run on the parent's buffers: their signatures must match exactly.
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
                    if let Some(t) = t.filter(|&t| tensors[t].dtype != s.tensors[i].dtype) {
                        return Err(Error::InvalidModel(
                            format!(
                                "subgraph {sg} op {oi}: operand {k} is {} but subgraph {sub} input {k} is {}",
                                tensors[t].dtype.name(),
                                s.tensors[i].dtype.name()
                            )
                            .into(),
                        ));
                    }
                }
                compile_at(model, sub, &shapes, consts, backends, custom, ctx, limits, depth + 1).map(Child::new)
            };
            let at = || format!("subgraph {sg} op {oi} ({})", op.code.name());
            let work = match (code, &op.params) {
                (B::IF, crate::ops::OpParams::If { then_subgraph, else_subgraph }) => {
                    let shapes = &op.inputs[1.min(op.inputs.len())..];
                    let n = op.outputs.len();
                    // Constant operands reach the branches as constants (IF passes them
                    // unchanged, unlike WHILE's loop-carried values).
                    let consts = held.get(1..).unwrap_or(&[]);
                    let (then, otherwise) = (child(ctx, *then_subgraph, shapes, consts, n)?, child(ctx, *else_subgraph, shapes, consts, n)?);
                    let outs = |c: &Child| c.graph.output_specs(model);
                    if outs(&then) != outs(&otherwise) || outs(&then).len() != op.outputs.len() {
                        return Err(Error::Unsupported(format!("{}: branches produce different outputs", at()).into()));
                    }
                    for (&t, (dtype, shape)) in op.outputs.iter().zip(outs(&then)) {
                        tensors[t].dtype = dtype;
                        tensors[t].shape = shape;
                    }
                    Some(Work::If { then: Box::new(then), otherwise: Box::new(otherwise) })
                }
                (B::WHILE, crate::ops::OpParams::While { cond_subgraph, body_subgraph }) => {
                    let (cond, body) = (child(ctx, *cond_subgraph, &op.inputs, &[], 1)?, child(ctx, *body_subgraph, &op.inputs, &[], op.inputs.len())?);
                    let vars: Vec<(DType, Vec<usize>)> = op
                        .inputs
                        .iter()
                        .map(|t| {
                            t.map(|t| (tensors[t].dtype, tensors[t].shape.clone()))
                                .ok_or_else(|| Error::InvalidModel(format!("{}: missing loop variable", at()).into()))
                        })
                        .collect::<Result<_>>()?;
                    if body.graph.output_specs(model) != vars || op.outputs.len() != vars.len() {
                        return Err(Error::Unsupported(format!("{}: loop variables change shape (dynamic loop shapes are not supported yet)", at()).into()));
                    }
                    if !matches!(cond.graph.output_specs(model).first(), Some((DType::Bool, s)) if s.iter().product::<usize>() == 1) {
                        return Err(Error::InvalidModel(format!("{}: condition subgraph must produce one bool", at()).into()));
                    }
                    let mut next = Vec::with_capacity(vars.len());
                    for (&t, (dtype, shape)) in op.outputs.iter().zip(&vars) {
                        tensors[t].dtype = *dtype;
                        tensors[t].shape = shape.clone();
                        next.push(AlignedBytes::zeroed(bytes_of(*dtype, shape, &limits, at)?));
                    }
                    Some(Work::While { cond: Box::new(cond), body: Box::new(body), next, flag: AlignedBytes::zeroed(1) })
                }
                (B::CALL_ONCE, crate::ops::OpParams::CallOnce { init_subgraph }) => {
                    Some(Work::CallOnce { init: Box::new(child(ctx, *init_subgraph, &[], &[], 0)?), ran_at: None })
                }
                (B::VAR_HANDLE, crate::ops::OpParams::VarHandle { container, shared_name }) => {
                    // The handle is a constant: the variable's id in the session.
                    let id = ctx.variables.id(&format!("{container}/{shared_name}"));
                    let t = *op.outputs.first().ok_or_else(|| Error::InvalidModel(format!("{}: no output", at()).into()))?;
                    tensors[t].dtype = DType::Resource;
                    tensors[t].shape = vec![];
                    tensors[t].loc = Loc::Owned(Arc::new(AlignedBytes::from_slice(&(id as i32).to_le_bytes())));
                    assignment[oi] = OpRun::Executor;
                    continue;
                }
                (B::READ_VARIABLE, _) => {
                    let t = *op.outputs.first().ok_or_else(|| Error::InvalidModel(format!("{}: no output", at()).into()))?;
                    if g.tensors[t].shape_signature.iter().any(|&d| d < 0) {
                        return Err(Error::Unsupported(format!("{}: variable of unknown shape", at()).into()));
                    }
                    Some(Work::ReadVariable)
                }
                (B::ASSIGN_VARIABLE, _) => Some(Work::AssignVariable),
                _ => None,
            };
            if let Some(work) = work {
                steps.push(Step {
                    op: oi,
                    work,
                    inputs: SmallVec::new(),
                    prepacked: SmallVec::new(),
                    outputs: SmallVec::new(),
                    extra: SmallVec::new(),
                    substituted: SmallVec::new(),
                });
                assignment[oi] = OpRun::Executor;
                continue;
            }
        }
        // An op whose producer's kernel took an epilogue slot: fold it into the first
        // such kernel it qualifies for, keeping the chain going to its own reader;
        // the others stop here.
        // A zero PAD of height and width read only by a float VALID convolution runs
        // inside it: the convolution reads the PAD's input with explicit padding.
        if let Some(pads) = foldable_pad(g, oi, &tensors, &readers_of, |t| {
            held.get(1)
                .and_then(|l| match l.as_ref()? {
                    Loc::Model(r) => bytes.get(r.clone()),
                    Loc::Owned(b) => Some(b.bytes()),
                    _ => None,
                })
                .filter(|_| t == 1)
        }) {
            if let (Some(&Some(src)), Some(&dst)) = (op.inputs.first(), op.outputs.first()) {
                tensors[dst].dtype = tensors[src].dtype;
                tensors[dst].shape = tensors[src]
                    .shape
                    .iter()
                    .enumerate()
                    .map(|(d, &n)| {
                        if d == 1 {
                            n + pads[0] + pads[1]
                        } else if d == 2 {
                            n + pads[2] + pads[3]
                        } else {
                            n
                        }
                    })
                    .collect();
                folded_pads.push((dst, src, pads));
                fused_ops += 1;
                assignment[oi] = OpRun::Fused { into: g.ops.iter().skip(oi + 1).position(|o| o.inputs.contains(&Some(dst))).map_or(oi, |j| oi + 1 + j) };
                continue;
            }
        }
        let mut folded = false;
        while let Some(p) = pending_epilogues.iter().position(|e| e.reader == oi) {
            let ok = !folded && fold_epilogue(model, g, oi, &tensors, &producer_of, pending_epilogues[p].step, &mut pending_epilogues[p], &mut steps);
            match (ok, op.outputs.first()) {
                (true, Some(&dst)) => {
                    folded = true;
                    let e = &mut pending_epilogues[p];
                    tensors[dst].dtype = tensors[e.tensor].dtype;
                    tensors[dst].shape = tensors[e.tensor].shape.clone();
                    alias_of[dst] = alias_of[e.tensor];
                    fused_ops += 1;
                    assignment[oi] = OpRun::Fused { into: steps[e.step].op };
                    match epilogue_reader(g, oi, dst, &readers_of) {
                        Some(next) => (e.reader, e.tensor) = (next, dst),
                        None => {
                            let e = pending_epilogues.swap_remove(p);
                            let _ = e.slot.set(e.ops);
                        }
                    }
                }
                _ => {
                    let e = pending_epilogues.swap_remove(p);
                    let _ = e.slot.set(e.ops);
                }
            }
        }
        if folded {
            continue;
        }
        // A reader of a folded PAD: input 0 becomes the PAD's input, padded explicitly.
        let mut inputs = inputs;
        let mut input_pad = None;
        let mut substituted: SmallVec<[(usize, usize); 1]> = SmallVec::new();
        if let Some(&(_, src, pads)) = op.inputs.first().copied().flatten().and_then(|t| folded_pads.iter().find(|p| p.0 == t)) {
            if let Some(Some(d)) = inputs.get_mut(0) {
                d.tensor = src;
                d.shape = tensors[src].shape.clone();
                d.value = None;
                d.constant = false;
                input_pad = Some(pads);
                substituted.push((0, src));
            }
        }
        let all_const = inputs.iter().flatten().all(|d| d.value.is_some());
        let offered = op
            .outputs
            .first()
            .filter(|_| matches!(op.code, OpCode::Builtin(B::CONV_2D | B::DEPTHWISE_CONV_2D)))
            .and_then(|&out| epilogue_reader(g, oi, out, &readers_of))
            .map(|j| (j, crate::backend::EpilogueSlot::default()));
        let octx = OpContext {
            subgraph: sg,
            op_index: oi,
            op,
            inputs,
            outputs: op.outputs.iter().map(|&o| &g.tensors[o]).collect(),
            custom_options: model.custom_options(op),
            epilogue: offered.as_ref().map(|(_, slot)| slot.clone()),
            input_pad,
            max_bytes: limits.max_arena_bytes,
        };
        ctx.take_packed_by_build();
        let built = match build_op(&octx, backends, custom, ctx) {
            Err(Error::DataDependent(_)) => {
                dynamic_from = Some(oi);
                break;
            }
            r => r?,
        };
        let (Built { outputs, mut kernel }, ran, applies_epilogues) = built;
        assignment[oi] = ran;
        for (&t, (dtype, shape)) in op.outputs.iter().zip(outputs) {
            tensors[t].dtype = dtype;
            tensors[t].shape = shape;
        }
        // A shape-only op moves no data: its output shares the input's memory (or constant).
        if is_shape_only(op) {
            if let (Some(&Some(src)), Some(&dst)) = (op.inputs.first(), op.outputs.first()) {
                if tensors[src].dtype == tensors[dst].dtype && !g.tensors[dst].is_variable {
                    match tensors[src].loc.clone() {
                        loc @ (Loc::Model(_) | Loc::Owned(_)) => tensors[dst].loc = loc,
                        _ => alias_of[dst] = alias_of[src],
                    }
                    aliased_ops += 1;
                    assignment[oi] = OpRun::Alias;
                    continue;
                }
            }
        }
        // SHAPE's result depends only on static shapes; ops on constants need running once only.
        let foldable = (all_const || op.code == OpCode::Builtin(B::SHAPE)) && !op.outputs.iter().any(|&o| g.tensors[o].is_variable);
        if foldable {
            let ins: Vec<Option<&[u8]>> = (0..op.inputs.len()).map(value_of).collect();
            let mut outs: Vec<AlignedBytes> = op
                .outputs
                .iter()
                .map(|&t| Ok(AlignedBytes::zeroed(bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || octx.at())?)))
                .collect::<Result<_>>()?;
            {
                let mut views: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.bytes_mut()).collect();
                kernel(&ins, &mut views).map_err(|e| Error::InvalidModel(Detail::at(octx.location(), format!("evaluating constant op: {e}"))))?;
            }
            for (&t, o) in op.outputs.iter().zip(outs) {
                tensors[t].loc = Loc::Owned(Arc::new(o));
            }
            folded_ops += 1;
            assignment[oi] = OpRun::Folded;
            release_consumed(&mut tensors, g, oi, &last_reader, &read_at_run, |_| true);
        } else {
            let packed = ctx.take_packed_by_build();
            let prepacked: SmallVec<[usize; 2]> =
                op.inputs.iter().enumerate().filter(|(_, i)| i.is_some_and(|t| packed.contains(&t))).map(|(k, _)| k).collect();
            for (k, i) in op.inputs.iter().enumerate() {
                if let (Some(t), false) = (i, prepacked.contains(&k)) {
                    read_at_run[*t] = true;
                }
            }
            release_consumed(&mut tensors, g, oi, &last_reader, &read_at_run, |k| prepacked.contains(&k));
            // The kernel took the slot: its reader is folded in when reached, if it qualifies.
            if let (Some((reader, slot)), true, Some(&tensor)) = (offered, applies_epilogues, op.outputs.first()) {
                pending_epilogues.push(PendingEpilogue { reader, tensor, step: steps.len(), slot, ops: Vec::new() });
            }
            steps.push(Step {
                op: oi,
                work: Work::Kernel(kernel),
                inputs: SmallVec::new(),
                prepacked,
                outputs: SmallVec::new(),
                extra: SmallVec::new(),
                substituted,
            });
        }
    }

    for e in pending_epilogues.drain(..) {
        let _ = e.slot.set(e.ops);
    }

    let plan = plan::plan_memory(g, sg, &steps, &mut tensors, &alias_of, dynamic_from, &limits)?;
    let out_plans = plan::resolve_io(g, sg, &mut steps, &tensors, &alias_of)?;
    // Release constants made at prepare (folded, dequantized, realigned) that nothing
    // reads at run time any more: their consumers were folded too, or keep a packing.
    if dynamic_from.is_none() {
        let mut keep = vec![false; tensors.len()];
        for st in &steps {
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
    let dynamic = dynamic_from.map(|first_op| {
        let mut last_use = vec![usize::MAX; tensors.len()];
        for (oi, op) in g.ops.iter().enumerate().skip(first_op) {
            for &t in op.inputs.iter().flatten() {
                last_use[t] = oi;
            }
        }
        DynamicTail { first_op, last_use, values: (0..tensors.len()).map(|_| None).collect() }
    });
    Ok(CompiledGraph { subgraph: sg, tensors, steps, plan, folded_ops, aliased_ops, fused_ops, out_plans, dynamic, assignment })
}

/// Frees prepare-time constants (folded, dequantized) right after their last reader
/// is built, when that reader does not need them at run time (`unneeded(input
/// position)`: a folded op, or a kernel holding a packing) and no step built earlier
/// reads them at run time either. Keeps peak memory
/// during prepare near one layer's worth of converted weights.
fn release_consumed(
    tensors: &mut [TensorSlot],
    g: &crate::model::Subgraph,
    oi: usize,
    last_reader: &[usize],
    read_at_run: &[bool],
    unneeded: impl Fn(usize) -> bool,
) {
    for (k, i) in g.ops[oi].inputs.iter().enumerate() {
        if let Some(t) = *i {
            if last_reader[t] == oi && !read_at_run[t] && unneeded(k) && matches!(tensors[t].loc, Loc::Owned(_)) && !g.outputs.contains(&t) {
                tensors[t].loc = Loc::None;
            }
        }
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
    /// How the tensor gets across: every backend of this build works in host
    /// memory, so the reader takes the producer's buffer in place.
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
        let g = &model.subgraphs[self.subgraph];
        let mut producer = vec![usize::MAX; g.tensors.len()];
        for (oi, op) in g.ops.iter().enumerate() {
            for &t in &op.outputs {
                producer[t] = oi;
            }
        }
        // The backend whose kernel computes op `oi`'s outputs (following fusions and aliases).
        let resolve = |mut oi: usize| -> Option<&'static str> {
            for _ in 0..g.ops.len() + 1 {
                match self.assignment.get(oi)? {
                    OpRun::Backend(b) => return Some(b),
                    OpRun::Custom => return Some("custom"),
                    OpRun::Executor => return Some("executor"),
                    OpRun::Fused { into } if *into != oi => oi = *into,
                    OpRun::Alias => {
                        let src = g.ops[oi].inputs.first().copied().flatten()?;
                        oi = *producer.get(src).filter(|&&p| p != usize::MAX)?;
                    }
                    _ => return None,
                }
            }
            None
        };
        let mut out: Vec<Crossing> = Vec::new();
        for (oi, op) in g.ops.iter().enumerate() {
            if !matches!(self.assignment[oi], OpRun::Backend(_) | OpRun::Custom) {
                continue;
            }
            let Some(to) = resolve(oi) else { continue };
            for &t in op.inputs.iter().flatten() {
                let p = producer[t];
                if p == usize::MAX {
                    continue;
                }
                match resolve(p) {
                    Some(from) if from != to && !out.iter().any(|c| c.tensor == t && c.to.1 == to) => {
                        out.push(Crossing { subgraph: self.subgraph, tensor: t, from: (p, from), to: (oi, to), transfer: "in place (host memory)" })
                    }
                    _ => {}
                }
            }
        }
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

/// Builds one op through the custom-op registry or the backends, and checks what
/// the kernel says it produces against the model.
pub(crate) fn build_op(octx: &OpContext<'_>, backends: &Backends, custom: &CustomOpRegistry, ctx: &mut BackendContext) -> Result<(Built, OpRun, bool)> {
    let op = octx.op;
    let (built, ran, applies_epilogues) = match &op.code {
        OpCode::Custom(name) => match custom.get(name) {
            Some(c) => (c.build(octx)?, OpRun::Custom, false),
            None => return Err(octx.unsupported(format!("custom op '{name}' is not registered"))),
        },
        OpCode::Other(_) => return Err(octx.unsupported("ferrite has no kernel for this builtin op yet")),
        OpCode::Builtin(_) => match backends.candidates(octx.subgraph, octx.op_index, op) {
            Candidates::Pinned(i) => {
                let b = backends.get(i).ok_or_else(|| octx.unsupported("no backend"))?;
                match b.build(octx, ctx) {
                    Ok(built) => (built, OpRun::Backend(b.name()), b.applies_epilogues(octx)),
                    Err(Error::Unsupported(m)) => {
                        return Err(Error::Unsupported(format!("{m} (the op is pinned to the {} backend by an op-backend override)", b.name()).into()))
                    }
                    Err(e) => return Err(e),
                }
            }
            Candidates::List(n) => {
                let mut last = None;
                let mut found = None;
                for b in (0..n).filter_map(|i| backends.get(i)) {
                    match b.build(octx, ctx) {
                        Ok(built) => {
                            found = Some((built, OpRun::Backend(b.name()), b.applies_epilogues(octx)));
                            break;
                        }
                        Err(Error::Unsupported(m)) => last = Some(Error::Unsupported(m)),
                        Err(e) => return Err(e),
                    }
                }
                match found {
                    Some(f) => f,
                    None => return Err(last.unwrap_or_else(|| octx.unsupported("no backend"))),
                }
            }
        },
    };
    if built.outputs.len() != op.outputs.len() {
        return Err(octx.bad(format!("kernel produces {} outputs, the model lists {}", built.outputs.len(), op.outputs.len())));
    }
    for (k, (dtype, _)) in built.outputs.iter().enumerate() {
        let declared = octx.outputs[k].dtype;
        if *dtype != declared {
            return Err(octx.unsupported(format!(
                "output {k} is declared {} but this kernel computes {} (quantized kernels are not implemented yet)",
                declared.name(),
                dtype.name()
            )));
        }
    }
    if let Some((_, s)) = built.outputs.iter().find(|(_, s)| s.len() > ferrite_kernels::MAX_DIMS) {
        return Err(octx.unsupported(format!("output rank {} exceeds {}", s.len(), ferrite_kernels::MAX_DIMS)));
    }
    // An empty tensor's other dims stay within the session limit, as if its zero dims
    // were 1: kernels loop over them ([0, 2^20, 2^20] holds nothing but is a hang).
    // Other shapes are sized against the limit where they are planned.
    let fits = |s: &[usize]| !s.contains(&0) || s.iter().try_fold(1usize, |a, &d| a.checked_mul(d.max(1))).is_some_and(|n| n <= octx.max_bytes);
    let shapes = octx.inputs.iter().flatten().map(|d| &d.shape[..]).chain(built.outputs.iter().map(|(_, s)| &s[..]));
    if let Some(s) = shapes.into_iter().find(|s| !fits(s)) {
        return Err(Error::ResourceLimit(Detail::at(octx.location(), format!("shape {s:?} exceeds the session limit of {} bytes", octx.max_bytes))));
    }
    Ok((built, ran, applies_epilogues))
}

fn is_shape_only(op: &crate::model::Op) -> bool {
    matches!(op.code, OpCode::Builtin(B::RESHAPE | B::SQUEEZE | B::EXPAND_DIMS))
}
