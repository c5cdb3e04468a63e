//! Compilation: shape inference and kernel selection per op (through the
//! backends), constant folding, then the static memory plan.

use std::sync::Arc;

use crate::backend::{Backend, BackendContext, Built, CustomOpRegistry, InputDesc, KernelFn, OpContext};
use crate::error::{Error, Result};
use crate::memory::{self, Lifetime, MemoryPlan};
use crate::model::{builtin, DType, Model, OpCode};
use smallvec::SmallVec;

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
enum Src {
    Arena(usize, usize),
    /// Graph input k (or an alias of it): the caller's buffer when bound, else its arena slot.
    Input(usize, usize, usize),
    Model(std::ops::Range<usize>),
    Owned(Arc<AlignedBytes>),
}

/// How graph output k reaches a caller-bound buffer.
#[derive(Debug, Clone)]
enum OutPlan {
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
    work: Work,
    inputs: SmallVec<[Option<Src>; 8]>,
    /// Inputs the kernel does not read at run time (it holds a prepacked copy).
    prepacked: SmallVec<[usize; 2]>,
    /// (arena offset, length, graph output index when written in place for a bound buffer).
    outputs: SmallVec<[(usize, usize, Option<usize>); 4]>,
    /// Tensors read by element-wise ops fused into this step's kernel, passed after
    /// the op's own inputs.
    extra: SmallVec<[usize; 2]>,
    /// Op inputs read from another tensor: (input slot, tensor). A folded PAD's
    /// reader reads the PAD's input.
    substituted: SmallVec<[(usize, usize); 1]>,
}

impl Step {
    /// The tensors this step reads: the op's inputs (after substitutions), then the
    /// fused ops' extra inputs.
    fn reads<'a>(&'a self, op: &'a crate::model::Op) -> impl Iterator<Item = usize> + 'a {
        op.inputs.iter().enumerate().filter_map(|(k, i)| self.substituted.iter().find(|s| s.0 == k).map(|s| s.1).or(*i)).chain(self.extra.iter().copied())
    }
}

/// A child subgraph (branch, loop part, initializer) with its own plan and arena,
/// run in the same session context as its parent.
struct Child {
    graph: CompiledGraph,
    arena: Vec<u64>,
}

impl Child {
    fn new(graph: CompiledGraph) -> Child {
        let arena = vec![0u64; graph.plan.arena_bytes.div_ceil(8)];
        Child { graph, arena }
    }

    /// Runs on bound inputs and outputs (read and written in place).
    fn run(&mut self, model: &Model, inputs: &[&[u8]], outputs: &mut [&mut [u8]], env: &mut DynEnv<'_>) -> Result<()> {
        let Child { graph, arena } = self;
        execute(graph, model, bytemuck::cast_slice_mut(arena), Some((inputs, outputs)), env, None).map(|_| ())
    }
}

/// Most iterations a WHILE may run, so a hostile model cannot hang a session.
pub const MAX_WHILE_ITERATIONS: usize = 10_000_000;
/// Deepest nesting of control flow, which also stops recursive subgraph references.
pub const MAX_NESTING: usize = 16;

/// What one step does.
enum Work {
    Kernel(KernelFn),
    If { then: Box<Child>, otherwise: Box<Child> },
    While { cond: Box<Child>, body: Box<Child>, next: Vec<AlignedBytes>, flag: AlignedBytes },
    CallOnce { init: Box<Child>, ran_at: Option<u64> },
    ReadVariable,
    AssignVariable,
}

/// Resource variables of a session (VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE),
/// persisting across runs until reset.
#[derive(Debug, Default)]
pub struct Variables {
    names: Vec<String>,
    values: Vec<Option<Vec<u8>>>,
    /// Bumped by `reset`, so CALL_ONCE initializers run again.
    generation: u64,
}

impl Variables {
    /// The id of the variable called `name`, created on first use.
    pub fn id(&mut self, name: &str) -> usize {
        match self.names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                self.names.push(name.to_string());
                self.values.push(None);
                self.names.len() - 1
            }
        }
    }

    /// Forgets every value; initializers (CALL_ONCE) run again on the next run.
    pub fn reset(&mut self) {
        for v in &mut self.values {
            *v = None;
        }
        self.generation += 1;
    }

    fn get(&self, id: usize) -> Result<&[u8]> {
        self.values.get(id).and_then(|v| v.as_deref()).ok_or_else(|| Error::Runtime(format!("variable {id} is read before it is assigned")))
    }

    fn set(&mut self, id: usize, value: &[u8]) -> Result<()> {
        let slot = self.values.get_mut(id).ok_or_else(|| Error::Runtime(format!("variable {id} does not exist")))?;
        match slot {
            // Same size: overwrite in place, so steady-state assigns do not allocate.
            Some(v) if v.len() == value.len() => v.copy_from_slice(value),
            _ => *slot = Some(value.to_vec()),
        }
        Ok(())
    }
}

fn resource_id(b: &[u8]) -> Result<usize> {
    let v = b.get(..4).map(|x| i32::from_le_bytes([x[0], x[1], x[2], x[3]])).ok_or_else(|| Error::Runtime("resource handle is empty".into()))?;
    usize::try_from(v).map_err(|_| Error::Runtime(format!("invalid resource handle {v}")))
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
    out_plans: Vec<OutPlan>,
    /// Ops from the first one whose output shape depends on run-time values; they are
    /// built and run one by one at run time on tensors allocated then.
    pub dynamic: Option<DynamicTail>,
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
    last_use: Vec<usize>,
    /// Run-time tensors of the current run.
    pub values: Vec<Option<DynValue>>,
}

/// What the executor needs to build ops at run time.
pub struct DynEnv<'a> {
    /// Backends, in order of preference.
    pub backends: &'a [&'a dyn Backend],
    /// Custom ops.
    pub custom: &'a CustomOpRegistry,
    /// The session's backend context.
    pub ctx: &'a mut BackendContext,
    /// Limits for run-time allocations.
    pub limits: Limits,
}

/// Limits applied while compiling.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest arena (and largest folded constant) allowed.
    pub max_arena_bytes: usize,
}

fn bytes_of(dtype: DType, shape: &[usize], limits: &Limits, what: impl Fn() -> String) -> Result<usize> {
    let size = dtype.size().ok_or_else(|| Error::Unsupported(format!("{}: element type {}", what(), dtype.name())))?;
    let n = shape.iter().try_fold(size, |acc, &d| acc.checked_mul(d)).filter(|&b| b <= limits.max_arena_bytes);
    n.ok_or_else(|| {
        Error::ResourceLimit(format!("{}: shape {shape:?} of {} exceeds the session limit of {} bytes", what(), dtype.name(), limits.max_arena_bytes))
    })
}

/// Compiles subgraph `sg` with the given input shapes.
pub fn compile(
    model: &Model,
    sg: usize,
    input_shapes: &[Vec<usize>],
    backends: &[&dyn Backend],
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
    backends: &[&dyn Backend],
    custom: &CustomOpRegistry,
    ctx: &mut BackendContext,
    limits: Limits,
    depth: usize,
) -> Result<CompiledGraph> {
    if depth > MAX_NESTING {
        return Err(Error::Unsupported(format!("control flow nested deeper than {MAX_NESTING} (or recursive) at subgraph {sg}")));
    }
    let g = model.subgraphs.get(sg).ok_or_else(|| Error::InvalidModel(format!("subgraph {sg} does not exist")))?;
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
                let s = model.subgraphs.get(sub).ok_or_else(|| Error::InvalidModel(format!("subgraph {sg} op {oi}: subgraph {sub} does not exist")))?;
                // Children run on the parent's buffers: their signatures must match exactly.
                if s.inputs.len() != shapes.len() || s.outputs.len() != n_out {
                    return Err(Error::InvalidModel(format!(
                        "subgraph {sg} op {oi}: subgraph {sub} takes {} inputs and gives {} outputs, the op passes {} and expects {n_out}",
                        s.inputs.len(),
                        s.outputs.len(),
                        shapes.len()
                    )));
                }
                // The child reads the parent's bytes as its own input types.
                for (k, (&t, &i)) in operands.iter().zip(&s.inputs).enumerate() {
                    if let Some(t) = t.filter(|&t| tensors[t].dtype != s.tensors[i].dtype) {
                        return Err(Error::InvalidModel(format!(
                            "subgraph {sg} op {oi}: operand {k} is {} but subgraph {sub} input {k} is {}",
                            tensors[t].dtype.name(),
                            s.tensors[i].dtype.name()
                        )));
                    }
                }
                compile_at(model, sub, &shapes, consts, backends, custom, ctx, limits, depth + 1).map(Child::new)
            };
            let at = || format!("subgraph {sg} op {oi} ({})", op.code.name());
            let work = match (ferrite_format::schema::BuiltinOperator(code), &op.params) {
                (ferrite_format::schema::BuiltinOperator::IF, crate::ops::OpParams::If { then_subgraph, else_subgraph }) => {
                    let shapes = &op.inputs[1.min(op.inputs.len())..];
                    let n = op.outputs.len();
                    // Constant operands reach the branches as constants (IF passes them
                    // unchanged, unlike WHILE's loop-carried values).
                    let consts = held.get(1..).unwrap_or(&[]);
                    let (then, otherwise) = (child(ctx, *then_subgraph, shapes, consts, n)?, child(ctx, *else_subgraph, shapes, consts, n)?);
                    let outs = |c: &Child| c.graph.output_specs(model);
                    if outs(&then) != outs(&otherwise) || outs(&then).len() != op.outputs.len() {
                        return Err(Error::Unsupported(format!("{}: branches produce different outputs", at())));
                    }
                    for (&t, (dtype, shape)) in op.outputs.iter().zip(outs(&then)) {
                        tensors[t].dtype = dtype;
                        tensors[t].shape = shape;
                    }
                    Some(Work::If { then: Box::new(then), otherwise: Box::new(otherwise) })
                }
                (ferrite_format::schema::BuiltinOperator::WHILE, crate::ops::OpParams::While { cond_subgraph, body_subgraph }) => {
                    let (cond, body) = (child(ctx, *cond_subgraph, &op.inputs, &[], 1)?, child(ctx, *body_subgraph, &op.inputs, &[], op.inputs.len())?);
                    let vars: Vec<(DType, Vec<usize>)> = op
                        .inputs
                        .iter()
                        .map(|t| {
                            t.map(|t| (tensors[t].dtype, tensors[t].shape.clone()))
                                .ok_or_else(|| Error::InvalidModel(format!("{}: missing loop variable", at())))
                        })
                        .collect::<Result<_>>()?;
                    if body.graph.output_specs(model) != vars || op.outputs.len() != vars.len() {
                        return Err(Error::Unsupported(format!("{}: loop variables change shape (dynamic loop shapes are not supported yet)", at())));
                    }
                    if !matches!(cond.graph.output_specs(model).first(), Some((DType::Bool, s)) if s.iter().product::<usize>() == 1) {
                        return Err(Error::InvalidModel(format!("{}: condition subgraph must produce one bool", at())));
                    }
                    let mut next = Vec::with_capacity(vars.len());
                    for (&t, (dtype, shape)) in op.outputs.iter().zip(&vars) {
                        tensors[t].dtype = *dtype;
                        tensors[t].shape = shape.clone();
                        next.push(AlignedBytes::zeroed(bytes_of(*dtype, shape, &limits, at)?));
                    }
                    Some(Work::While { cond: Box::new(cond), body: Box::new(body), next, flag: AlignedBytes::zeroed(1) })
                }
                (ferrite_format::schema::BuiltinOperator::CALL_ONCE, crate::ops::OpParams::CallOnce { init_subgraph }) => {
                    Some(Work::CallOnce { init: Box::new(child(ctx, *init_subgraph, &[], &[], 0)?), ran_at: None })
                }
                (ferrite_format::schema::BuiltinOperator::VAR_HANDLE, crate::ops::OpParams::VarHandle { container, shared_name }) => {
                    // The handle is a constant: the variable's id in the session.
                    let id = ctx.variables.id(&format!("{container}/{shared_name}"));
                    let t = *op.outputs.first().ok_or_else(|| Error::InvalidModel(format!("{}: no output", at())))?;
                    tensors[t].dtype = DType::Resource;
                    tensors[t].shape = vec![];
                    tensors[t].loc = Loc::Owned(Arc::new(AlignedBytes::from_slice(&(id as i32).to_le_bytes())));
                    continue;
                }
                (ferrite_format::schema::BuiltinOperator::READ_VARIABLE, _) => {
                    let t = *op.outputs.first().ok_or_else(|| Error::InvalidModel(format!("{}: no output", at())))?;
                    if g.tensors[t].shape_signature.iter().any(|&d| d < 0) {
                        return Err(Error::Unsupported(format!("{}: variable of unknown shape", at())));
                    }
                    Some(Work::ReadVariable)
                }
                (ferrite_format::schema::BuiltinOperator::ASSIGN_VARIABLE, _) => Some(Work::AssignVariable),
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
            .filter(|_| matches!(op.code, OpCode::Builtin(builtin::CONV_2D | builtin::DEPTHWISE_CONV_2D)))
            .and_then(|&out| epilogue_reader(g, oi, out, &readers_of))
            .map(|j| (j, crate::backend::EpilogueSlot::default()));
        let octx = OpContext {
            subgraph: sg,
            op_index: oi,
            op,
            inputs,
            outputs: op.outputs.iter().map(|&o| &g.tensors[o]).collect(),
            custom_options: model.custom_options(op),
            epilogue: std::cell::Cell::new(offered.as_ref().map(|(_, slot)| slot.clone())),
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
        let Built { outputs, mut kernel } = built;
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
                    continue;
                }
            }
        }
        // SHAPE's result depends only on static shapes; ops on constants need running once only.
        let foldable = (all_const || op.code == OpCode::Builtin(builtin::SHAPE)) && !op.outputs.iter().any(|&o| g.tensors[o].is_variable);
        if foldable {
            let ins: Vec<Option<&[u8]>> = (0..op.inputs.len()).map(value_of).collect();
            let mut outs: Vec<AlignedBytes> = op
                .outputs
                .iter()
                .map(|&t| Ok(AlignedBytes::zeroed(bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || octx.at())?)))
                .collect::<Result<_>>()?;
            {
                let mut views: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.bytes_mut()).collect();
                kernel(&ins, &mut views).map_err(|e| Error::InvalidModel(format!("{}: evaluating constant op: {e}", octx.at())))?;
            }
            for (&t, o) in op.outputs.iter().zip(outs) {
                tensors[t].loc = Loc::Owned(Arc::new(o));
            }
            folded_ops += 1;
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
            if let (Some((reader, slot)), None, Some(&tensor)) = (offered, octx.epilogue.take(), op.outputs.first()) {
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

    // Lifetimes, on alias roots: subgraph inputs from step 0, step outputs from their
    // step, each to its last use. Graph inputs and outputs stay valid for the whole run,
    // as in LiteRT: a caller may run again without setting inputs, and reads outputs after.
    let n_steps = steps.len();
    let root = |t: usize| alias_of[t];
    let mut first = vec![usize::MAX; tensors.len()];
    let mut last = vec![0usize; tensors.len()];
    for &t in &g.inputs {
        if matches!(tensors[root(t)].loc, Loc::None) {
            first[root(t)] = 0;
        }
    }
    for (si, st) in steps.iter().enumerate() {
        let op = &g.ops[st.op];
        for &t in &op.outputs {
            first[root(t)] = first[root(t)].min(si);
            last[root(t)] = last[root(t)].max(si);
        }
        for t in st.reads(op) {
            if first[root(t)] != usize::MAX {
                last[root(t)] = last[root(t)].max(si);
            }
        }
    }
    for &t in g.inputs.iter().chain(&g.outputs) {
        if first[root(t)] != usize::MAX {
            last[root(t)] = n_steps.max(1) - 1;
        }
    }
    // Tensors the dynamic tail reads must outlive every static step.
    if let Some(d) = dynamic_from {
        for op in &g.ops[d..] {
            for &t in op.inputs.iter().flatten() {
                if first[root(t)] != usize::MAX {
                    last[root(t)] = n_steps.max(1) - 1;
                }
            }
        }
    }
    let mut lifetimes = Vec::new();
    for t in 0..tensors.len() {
        if root(t) == t && first[t] != usize::MAX && matches!(tensors[t].loc, Loc::None) {
            let b = bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || format!("subgraph {sg} tensor {t} ('{}')", g.tensors[t].name))?;
            lifetimes.push(Lifetime { tensor: t, bytes: b, first: first[t], last: last[t].max(first[t]) });
        }
    }
    let plan = memory::plan(&lifetimes, limits.max_arena_bytes)?;
    let mut offset_of = vec![usize::MAX; tensors.len()];
    for &(t, offset) in &plan.offsets {
        offset_of[t] = offset;
    }
    for t in 0..tensors.len() {
        let off = offset_of[root(t)];
        if off != usize::MAX {
            let len = bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || format!("subgraph {sg} tensor {t}"))?;
            tensors[t].loc = Loc::Arena { offset: off, len };
        }
    }

    // Resolve every step's input and output locations once.
    let input_of_root = |t: usize| g.inputs.iter().position(|&i| root(i) == root(t));
    let src_of = |t: usize| -> Result<Src> {
        match &tensors[t].loc {
            Loc::Arena { offset, len } => Ok(match input_of_root(t) {
                Some(k) => Src::Input(k, *offset, *len),
                None => Src::Arena(*offset, *len),
            }),
            Loc::Model(r) => Ok(Src::Model(r.clone())),
            Loc::Owned(b) => Ok(Src::Owned(b.clone())),
            Loc::None => Err(Error::Runtime(format!("internal: subgraph {sg} tensor {t} has no storage"))),
        }
    };
    // A graph output is written in place into a bound buffer when a step produces its
    // memory, nothing else reads that memory, and no other output or input shares it.
    let mut readers = vec![0usize; tensors.len()];
    for st in &steps {
        for t in st.reads(&g.ops[st.op]) {
            readers[root(t)] += 1;
        }
    }
    let mut produced_by = vec![usize::MAX; tensors.len()];
    for (si, st) in steps.iter().enumerate() {
        for &t in &g.ops[st.op].outputs {
            produced_by[root(t)] = si;
        }
    }
    let mut out_plans = Vec::with_capacity(g.outputs.len());
    let mut direct: Vec<(usize, usize, usize)> = Vec::new(); // (step, root, output k)
    for (k, &t) in g.outputs.iter().enumerate() {
        let r = root(t);
        let shared = g.outputs.iter().enumerate().any(|(j, &o)| j != k && root(o) == r) || input_of_root(t).is_some();
        if matches!(tensors[t].loc, Loc::Arena { .. }) && produced_by[r] != usize::MAX && readers[r] == 0 && !shared {
            direct.push((produced_by[r], r, k));
            out_plans.push(OutPlan::Direct);
        } else if matches!(tensors[t].loc, Loc::None) {
            // Produced by the dynamic tail: only known after the run.
            out_plans.push(OutPlan::Copy(Src::Owned(Arc::new(AlignedBytes::zeroed(0)))));
        } else {
            out_plans.push(OutPlan::Copy(src_of(t)?));
        }
    }
    for (si, st) in steps.iter_mut().enumerate() {
        let op = &g.ops[st.op];
        st.inputs = op
            .inputs
            .iter()
            .enumerate()
            .map(|(k, i)| i.map(|t| st.substituted.iter().find(|s| s.0 == k).map_or(t, |s| s.1)).filter(|_| !st.prepacked.contains(&k)).map(src_of).transpose())
            .collect::<Result<_>>()?;
        for &t in &st.extra {
            st.inputs.push(Some(src_of(t)?));
        }
        st.outputs = op
            .outputs
            .iter()
            .map(|&t| match tensors[t].loc {
                Loc::Arena { offset, len } => Ok((offset, len, direct.iter().find(|d| d.0 == si && d.1 == root(t)).map(|d| d.2))),
                _ => Err(Error::Runtime(format!("internal: subgraph {sg} op {} output tensor {t} has no arena slot", st.op))),
            })
            .collect::<Result<_>>()?;
    }
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
    Ok(CompiledGraph { subgraph: sg, tensors, steps, plan, folded_ops, aliased_ops, fused_ops, out_plans, dynamic })
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

impl CompiledGraph {
    /// Dtype and shape of each subgraph output under this plan.
    fn output_specs(&self, model: &Model) -> Vec<(DType, Vec<usize>)> {
        model.subgraphs[self.subgraph].outputs.iter().map(|&t| (self.tensors[t].dtype, self.tensors[t].shape.clone())).collect()
    }
}

/// Builds one op through the custom-op registry or the backends, and checks what
/// the kernel says it produces against the model.
fn build_op(octx: &OpContext<'_>, backends: &[&dyn Backend], custom: &CustomOpRegistry, ctx: &mut BackendContext) -> Result<Built> {
    let op = octx.op;
    let built = match &op.code {
        OpCode::Custom(name) => match custom.get(name) {
            Some(c) => c.build(octx)?,
            None => return Err(octx.unsupported(format!("custom op '{name}' is not registered"))),
        },
        // Builders index their first declared output. Stop-gap until the op table's
        // arity check (run at load) covers it: refuse an op that declares none.
        OpCode::Builtin(_) if op.outputs.is_empty() => return Err(octx.bad("op declares no outputs")),
        OpCode::Builtin(_) => {
            let mut last = None;
            let mut found = None;
            for b in backends {
                match b.build(octx, ctx) {
                    Ok(built) => {
                        found = Some(built);
                        break;
                    }
                    Err(Error::Unsupported(m)) => last = Some(Error::Unsupported(m)),
                    Err(e) => return Err(e),
                }
            }
            match found {
                Some(b) => b,
                None => return Err(last.unwrap_or_else(|| octx.unsupported("no backend"))),
            }
        }
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
        return Err(Error::ResourceLimit(format!("{}: shape {s:?} exceeds the session limit of {} bytes", octx.at(), octx.max_bytes)));
    }
    Ok(built)
}

fn is_shape_only(op: &crate::model::Op) -> bool {
    use ferrite_format::schema::BuiltinOperator as B;
    matches!(op.code, OpCode::Builtin(c) if c == B::RESHAPE.0 || c == B::SQUEEZE.0 || c == B::EXPAND_DIMS.0)
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
    let op_error = |op: usize, e: Error| {
        let name = model.subgraphs[subgraph].ops[op].code.name();
        match e {
            Error::Runtime(m) => Error::Runtime(format!("subgraph {subgraph} op {op} ({name}): {m}")),
            e => e,
        }
    };
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
                return Err(Error::Runtime(format!("internal: output region {off}+{len} leaves the arena")));
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
                    Err(Error::Runtime(format!("internal: input region {o}+{l} overlaps an output of the same op")))
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

/// Whether PAD op `oi` folds into its reader: a float tensor padded with zeros in
/// height and width only, by constant amounts, read by exactly one op, a float
/// CONV_2D or DEPTHWISE_CONV_2D with VALID padding taking it as input 0. Returns
/// the padding (top, bottom, left, right). `value` gives the constant value of the
/// op's input slot.
fn foldable_pad<'b>(
    g: &crate::model::Subgraph,
    oi: usize,
    tensors: &[TensorSlot],
    readers_of: &[usize],
    value: impl Fn(usize) -> Option<&'b [u8]>,
) -> Option<[usize; 4]> {
    let op = &g.ops[oi];
    if op.code != OpCode::Builtin(builtin::PAD) {
        return None;
    }
    let (&[Some(x), Some(_)], &[y]) = (&op.inputs[..], &op.outputs[..]) else { return None };
    if tensors[x].dtype != DType::F32 || tensors[x].shape.len() != 4 || readers_of[y] != 1 || g.tensors[y].is_variable {
        return None;
    }
    let p: Vec<i64> = match value(1)? {
        b if b.len() == 32 => b.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
        b if b.len() == 64 => b.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect(),
        _ => return None,
    };
    if p[0] != 0 || p[1] != 0 || p[6] != 0 || p[7] != 0 || p[2..6].iter().any(|&v| !(0..=64).contains(&v)) {
        return None;
    }
    let j = oi + 1 + g.ops[oi + 1..].iter().position(|o| o.inputs.iter().flatten().any(|&t| t == y))?;
    let reader = &g.ops[j];
    let valid = match &reader.params {
        crate::ops::OpParams::Conv2D { padding, .. } | crate::ops::OpParams::DepthwiseConv2D { padding, .. } => *padding == crate::ops::Padding::Valid,
        _ => false,
    };
    let conv = matches!(reader.code, OpCode::Builtin(builtin::CONV_2D | builtin::DEPTHWISE_CONV_2D));
    (conv && valid && reader.inputs.first() == Some(&Some(y)) && reader.inputs.iter().skip(1).all(|&i| i != Some(y)))
        .then(|| [p[2] as usize, p[3] as usize, p[4] as usize, p[5] as usize])
}

/// A kernel that took an epilogue slot, and the element-wise ops folded into it so far.
struct PendingEpilogue {
    /// The op reading `tensor`, next to try folding.
    reader: usize,
    /// The tensor the fused chain has produced so far (the kernel's output, aliased).
    tensor: usize,
    /// The kernel's step.
    step: usize,
    slot: crate::backend::EpilogueSlot,
    ops: Vec<crate::backend::Epilogue>,
}

/// The op that may fold into the kernel producing `out` (op `oi`'s output): the
/// only reader of a float `out` that does not leave the subgraph, if it is a PRELU
/// or an activation taking it as its first input, or an ADD.
fn epilogue_reader(g: &crate::model::Subgraph, oi: usize, out: usize, readers_of: &[usize]) -> Option<usize> {
    if readers_of[out] != 1 || g.tensors[out].dtype != DType::F32 {
        return None;
    }
    let j = oi + 1 + g.ops[oi + 1..].iter().position(|o| o.inputs.iter().flatten().any(|&t| t == out))?;
    let next = &g.ops[j];
    let ok = match next.code {
        OpCode::Builtin(builtin::PRELU) => next.inputs.first() == Some(&Some(out)),
        OpCode::Builtin(code) if activation_epilogue(code, &next.params).is_some() => next.inputs.first() == Some(&Some(out)),
        OpCode::Builtin(builtin::ADD) => next.inputs.len() == 2,
        _ => false,
    };
    ok.then_some(j)
}

/// The element-wise activation a builtin op computes, when it can run as an epilogue.
fn activation_epilogue(code: i32, params: &crate::ops::OpParams) -> Option<ferrite_kernels::elementwise::Unary> {
    use ferrite_kernels::elementwise::Unary;
    Some(match code {
        builtin::RELU => Unary::Relu,
        builtin::RELU6 => Unary::Relu6,
        builtin::RELU_N1_TO_1 => Unary::ReluN1To1,
        builtin::RELU_0_TO_1 => Unary::Relu0To1,
        builtin::HARD_SWISH => Unary::HardSwish,
        builtin::LEAKY_RELU => match params {
            crate::ops::OpParams::LeakyRelu { alpha } => Unary::LeakyRelu(*alpha),
            _ => return None,
        },
        _ => return None,
    })
}

/// Folds op `j` into the pending kernel when it qualifies: an activation (RELU
/// family, HARD_SWISH, LEAKY_RELU) of a float tensor; a PRELU whose alpha is a
/// constant (by now, as constants before it are folded) with one value or one per
/// channel; or an ADD of a float tensor of the same shape computed before the
/// kernel runs (a residual), with at most a clamping activation. Returns whether
/// it was folded.
#[allow(clippy::too_many_arguments)]
fn fold_epilogue(
    model: &Model,
    g: &crate::model::Subgraph,
    j: usize,
    tensors: &[TensorSlot],
    producer_of: &[usize],
    step: usize,
    e: &mut PendingEpilogue,
    steps: &mut [Step],
) -> bool {
    use crate::backend::Epilogue;
    let op = &g.ops[j];
    let x = e.tensor;
    let &[y] = &op.outputs[..] else { return false };
    if g.tensors[y].is_variable || tensors[x].dtype != DType::F32 {
        return false;
    }
    match (&op.code, &op.inputs[..], &op.params) {
        (OpCode::Builtin(code), &[Some(_)], params) => match activation_epilogue(*code, params) {
            // A float activation declared to produce another type is left to its
            // own kernel, which reports the mismatch.
            Some(u) if g.tensors[y].dtype == DType::F32 => {
                e.ops.push(Epilogue::Unary(u));
                true
            }
            _ => false,
        },
        (OpCode::Builtin(builtin::PRELU), &[Some(_), Some(alpha)], _) => {
            let bytes = match &tensors[alpha].loc {
                Loc::Model(r) => model.bytes().get(r.clone()),
                Loc::Owned(b) => Some(b.bytes()),
                _ => None,
            };
            let shape = &tensors[alpha].shape;
            let n: usize = shape.iter().product();
            let channels = tensors[x].shape.last().copied().unwrap_or(0);
            match bytes {
                Some(bytes) if tensors[alpha].dtype == DType::F32 && bytes.len() == 4 * n && (n == 1 || (shape.last() == Some(&n) && n == channels)) => {
                    let alpha: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                    e.ops.push(Epilogue::Prelu(alpha.into()));
                    true
                }
                _ => false,
            }
        }
        (OpCode::Builtin(builtin::ADD), &[Some(a), Some(b)], crate::ops::OpParams::Binary { activation, .. }) => {
            let other = if a == x { b } else { a };
            let clamp = match activation {
                crate::ops::Activation::None => ferrite_kernels::Clamp::NONE,
                crate::ops::Activation::Relu => ferrite_kernels::Clamp::RELU,
                crate::ops::Activation::Relu6 => ferrite_kernels::Clamp::RELU6,
                crate::ops::Activation::ReluN1To1 => ferrite_kernels::Clamp::RELU_N1_TO_1,
                _ => return false,
            };
            // The residual must exist when the kernel runs and match the output exactly.
            let kernel_op = steps[step].op;
            let ready = producer_of[other] == usize::MAX || producer_of[other] < kernel_op;
            if other == x
                || !ready
                || tensors[other].dtype != DType::F32
                || tensors[other].shape != tensors[x].shape
                || matches!(tensors[other].loc, Loc::None) && producer_of[other] == usize::MAX && !g.inputs.contains(&other)
            {
                return false;
            }
            let arg = g.ops[kernel_op].inputs.len() + steps[step].extra.len();
            steps[step].extra.push(other);
            e.ops.push(Epilogue::Add { arg, clamp });
            true
        }
        _ => false,
    }
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
            if *ran_at != Some(env.ctx.variables.generation) {
                init.run(model, &[], &mut [], env)?;
                *ran_at = Some(env.ctx.variables.generation);
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
                Some(o) => Err(Error::Runtime(format!("variable {id} holds {} bytes, the read expects {}", v.len(), o.len()))),
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
                    (None, Loc::None) => return Err(Error::Runtime(format!("subgraph {subgraph} op {oi}: input tensor {t} has no value"))),
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
                epilogue: std::cell::Cell::new(None),
                input_pad: None,
                max_bytes: env.limits.max_arena_bytes,
            };
            let Built { outputs, mut kernel } = build_op(&octx, env.backends, env.custom, env.ctx)?;
            for (&t, (dtype, shape)) in op.outputs.iter().zip(outputs) {
                let n = bytes_of(dtype, &shape, &env.limits, || octx.at())?;
                outs.push((t, DynValue { dtype, shape, data: AlignedBytes::zeroed(n) }));
            }
            let mut out_views: Vec<&mut [u8]> = outs.iter_mut().map(|(_, v)| v.data.bytes_mut()).collect();
            kernel(&views, &mut out_views).map_err(|e| match e {
                Error::Runtime(m) => Error::Runtime(format!("{}: {m}", octx.at())),
                e => e,
            })?;
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
    Err(Error::Runtime(format!("WHILE ran {MAX_WHILE_ITERATIONS} iterations without stopping")))
}
