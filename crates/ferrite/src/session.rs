//! The public session API: load -> (resize) -> prepare -> set inputs -> run -> read outputs.

use std::path::Path;
use std::sync::Arc;

use crate::backend::select::{self, Backends, OpSelector};
use crate::backend::{Backend, BackendContext, CustomOp, CustomOpRegistry};
use crate::compile::{self, CompiledGraph, Limits, Loc};
use crate::error::{Error, Result};
use crate::memory::RunArena;
use crate::model::{DType, Model, ModelBytes};
use crate::observe::{self, RunHooks, RunOutcome, TraceLog};
#[cfg(feature = "observe")]
use crate::observe::{Flow, OpEvent};

/// Options fixed when a session is created.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Worker threads for this session's backend context.
    pub threads: usize,
    /// Largest arena the session may plan (bytes).
    pub max_arena_bytes: usize,
    /// Custom ops available to the model.
    pub custom_ops: CustomOpRegistry,
    /// Backends in order of preference (`"cpu"`, `"reference"`). Each op runs on the
    /// first that has a kernel for it; `cpu` is always tried last.
    pub backends: Vec<String>,
    /// Ops pinned to one backend, by type or by op index in the session's subgraph.
    pub op_backends: Vec<(OpSelector, String)>,
    /// Backends the application provides (see [`crate::ext`]); each is used where
    /// [`backends`](Self::backends) or [`op_backends`](Self::op_backends) names it.
    pub custom_backends: Vec<Arc<dyn Backend>>,
    /// Record a trace from the start: the model's parse, every prepare phase, every
    /// run (see [`Session::set_tracing`], [`Session::write_trace`]). With the
    /// `observe` feature.
    #[cfg(feature = "observe")]
    pub trace: bool,
    /// How the GPU backend stores tensors (float32 unless float16 is asked for).
    pub gpu_precision: crate::GpuPrecision,
    /// Borrow the memory of intermediate tensors from this pool for each run instead
    /// of keeping an arena of them (`None`, the default: the session keeps it all).
    /// Sessions sharing a pool ([`Model::shared_arena`] for a model's sessions,
    /// [`SharedArena::new`](crate::SharedArena::new) for any group) that do not run at
    /// the same time use one arena; runs at the same time each get one, so the pool
    /// holds as many as ran at once. The session keeps what outlives a run: inputs,
    /// outputs, recurrent state. What it gives up: an intermediate tensor has no memory
    /// between runs, so [`Session::tensor_data`] on one is an error (with
    /// [`Session::set_preserve_all_tensors`] every tensor is kept and readable), and
    /// graph outputs hold memory of their own for the whole run (the scratch of steps
    /// before they are written cannot reuse it).
    pub shared_arena: Option<crate::SharedArena>,
}

impl Default for SessionOptions {
    /// One thread, a 4 GiB arena limit, the built-in custom ops, the CPU backend.
    fn default() -> Self {
        SessionOptions {
            threads: 1,
            max_arena_bytes: 4 << 30,
            custom_ops: CustomOpRegistry::with_builtins(),
            backends: vec!["cpu".into()],
            op_backends: Vec::new(),
            custom_backends: Vec::new(),
            #[cfg(feature = "observe")]
            trace: false,
            gpu_precision: crate::GpuPrecision::Fp32,
            shared_arena: None,
        }
    }
}

impl SessionOptions {
    /// Takes the backends named by `FERRITE_BACKENDS` (`reference,cpu`), the
    /// overrides in `FERRITE_OP_BACKEND` (`CONV_2D=cpu;17=reference`) and the GPU's
    /// `FERRITE_GPU_PRECISION` (`fp16`), where set, so an
    /// app that cannot be rebuilt can still choose. [`Session::from_file`],
    /// [`Session::from_bytes`], the C API, Python and the CLI apply it.
    pub fn with_env_backends(mut self) -> Result<Self> {
        if let Ok(v) = std::env::var("FERRITE_BACKENDS") {
            self.backends = select::parse_backend_list(&v).map_err(|e| Error::InvalidArgument(format!("FERRITE_BACKENDS: {e}").into()))?;
        }
        if let Ok(v) = std::env::var("FERRITE_OP_BACKEND") {
            self.op_backends = select::parse_op_backends(&v).map_err(|e| Error::InvalidArgument(format!("FERRITE_OP_BACKEND: {e}").into()))?;
        }
        if let Ok(v) = std::env::var("FERRITE_GPU_PRECISION") {
            self.gpu_precision = v.parse().map_err(|e| Error::InvalidArgument(format!("FERRITE_GPU_PRECISION: {e}").into()))?;
        }
        Ok(self)
    }
}

/// Static description of a session input or output.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDesc {
    /// Name (the signature's alias when a signature is selected).
    pub name: String,
    /// Tensor index in the subgraph.
    pub tensor: usize,
    /// Element type.
    pub dtype: DType,
    /// Current shape (after any resize / prepare).
    pub shape: Vec<usize>,
    /// Shape with -1 for dims that may change.
    pub shape_signature: Vec<i64>,
}

/// A view of a tensor's data after a run.
#[derive(Debug, Clone, Copy)]
pub struct TensorData<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: &'a [usize],
    /// Raw little-endian bytes.
    pub bytes: &'a [u8],
}

impl TensorData<'_> {
    /// The data as float32, if that is its type.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        if self.dtype != DType::F32 {
            return Err(Error::InvalidArgument(format!("tensor is {}, not float32", self.dtype.name()).into()));
        }
        Ok(self.bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// The strings of a STRING tensor (its bytes are TFLite's string buffer), in
    /// row-major order.
    pub fn strings(&self) -> Result<Vec<&[u8]>> {
        if self.dtype != DType::String {
            return Err(Error::InvalidArgument(format!("tensor is {}, not string", self.dtype.name()).into()));
        }
        ferrite_format::strings::parse(self.bytes).map_err(|e| Error::Runtime(format!("string tensor: {e}").into()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Loaded; shapes may be changed; not runnable.
    Loaded,
    /// Compiled and planned; inputs may be set and the session run.
    Prepared,
}

/// One model instance with its own backend context, plan and arena.
///
/// A session is `Send`: it may be moved to and run from any thread. It owns
/// everything it uses (no thread-local state), and dropping it frees it all.
pub struct Session {
    model: Arc<Model>,
    options: SessionOptions,
    subgraph: usize,
    inputs: Vec<(String, usize)>,
    outputs: Vec<(String, usize)>,
    input_shapes: Vec<Vec<usize>>,
    state: State,
    compiled: Option<CompiledGraph>,
    /// Input shapes `compiled` was planned for.
    compiled_shapes: Vec<Vec<usize>>,
    /// Inactive plans for other input shapes, most recently used last.
    plan_cache: Vec<(Vec<Vec<usize>>, CompiledGraph)>,
    /// Inputs were resized since the active plan was made.
    dirty: bool,
    /// The memory the session keeps between runs: the whole arena, or with a shared
    /// arena its region of inputs, outputs and state (the plan's `own_bytes`).
    arena: Vec<crate::memory::Line>,
    /// The pool lending the rest for each run ([`SessionOptions::shared_arena`]).
    arena_member: Option<crate::shared_arena::Membership>,
    ctx: BackendContext,
    backends: Backends,
    ran: bool,
    stats: PlanStats,
    last_run: RunStats,
    /// Input bytes copied by `set_input` since the last run.
    pending_input_bytes: usize,
    /// Per-step times of the runs since profiling was enabled.
    profile: Option<Vec<(usize, std::time::Duration)>>,
    /// Every tensor keeps its own memory (see [`Session::set_preserve_all_tensors`]).
    preserve_all: bool,
    /// Whether chains of element-wise ops run as one step (see [`Session::set_fuse_chains`]).
    fuse_chains: bool,
    /// With `preserve_all`, the model compiled and run in place of `model`: the same
    /// bytes and IR, with every tensor an op produces listed among the subgraph's outputs.
    keep_all: Option<Arc<Model>>,
    /// The trace recorded so far (kept after tracing stops, until written or restarted).
    trace: Option<Box<TraceLog>>,
    /// Whether prepares and runs are being traced now.
    tracing: bool,
    /// Counts plans made active, so the trace describes each op under the plan it ran with.
    plan_generation: u64,
}

/// `model` with every tensor that an op of subgraph `sg` produces listed among the
/// subgraph's outputs. The memory planner keeps graph outputs alive for the whole run
/// and never reuses their memory, and fusion leaves tensors that leave the graph alone,
/// so compiling this model gives every intermediate its own storage.
fn keeping_all_tensors(model: &Model, sg: usize) -> Model {
    let mut m = model.clone();
    if let Some(g) = m.subgraphs.get_mut(sg) {
        let mut listed = vec![false; g.tensors.len()];
        for &t in &g.outputs {
            listed[t] = true;
        }
        let produced: Vec<usize> = g.ops.iter().flat_map(|op| op.outputs.iter().copied()).collect();
        for t in produced {
            if !std::mem::replace(&mut listed[t], true) {
                g.outputs.push(t);
            }
        }
    }
    m
}

/// For a run of a session with a shared arena, the scratch its plan needs, lent by the pool.
fn lend_scratch<'p>(member: &'p Option<crate::shared_arena::Membership>, plan: &crate::memory::MemoryPlan) -> Option<crate::shared_arena::Lease<'p>> {
    let scratch = plan.arena_bytes - plan.own_bytes;
    member.as_ref().filter(|_| scratch > 0).map(|m| m.pool().lend(scratch))
}

/// The arena of one run: the session's own region, and the lent scratch above it.
fn run_arena<'a>(
    own: &'a mut [crate::memory::Line],
    plan: &crate::memory::MemoryPlan,
    lease: &'a mut Option<crate::shared_arena::Lease<'_>>,
) -> Result<RunArena<'a>> {
    let own = bytemuck::cast_slice_mut::<crate::memory::Line, u8>(own)
        .get_mut(..plan.own_bytes)
        .ok_or_else(|| Error::Runtime(format!("internal: the arena is smaller than the plan's {} bytes", plan.own_bytes).into()))?;
    let scratch: &mut [u8] = match lease {
        Some(l) => l.bytes_mut(),
        None if plan.own_bytes == plan.arena_bytes => &mut [],
        None => return Err(Error::Runtime("internal: a plan for a shared arena in a session without one".into())),
    };
    Ok(RunArena { own, scratch })
}

/// The error for reading an intermediate tensor of a session with a shared arena.
fn lent_only(t: usize, name: &str) -> Error {
    Error::InvalidState(
        format!(
            "tensor {t} ('{name}') is an intermediate of a session with a shared arena: its memory is the session's only while it runs \
             (turn set_preserve_all_tensors on before prepare to keep every tensor, or give the session an arena of its own)"
        )
        .into(),
    )
}

/// Plans kept per session for alternating input shapes (the active one included).
pub const PLAN_CACHE_SIZE: usize = 4;

/// Whether this build can observe runs (traces, profiles, per-op callbacks: the
/// `observe` feature). Without it the run paths that feed them are constant-false
/// branches, so the recorders, the trace writer and its JSON are not linked.
const OBSERVE: bool = cfg!(feature = "observe");

/// How often the session compiled a plan and how often it reused a cached one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Plans compiled (prepare, or a resize to shapes not in the cache).
    pub compiles: usize,
    /// Resizes served from the plan cache.
    pub cache_hits: usize,
    /// Times the arena was (re)allocated.
    pub arena_allocations: usize,
}

/// Bytes copied at the I/O boundary by the last run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Input bytes copied into the session (`set_input`); 0 for buffers bound with `run_with`.
    pub input_bytes_copied: usize,
    /// Output bytes copied out to caller buffers; 0 when kernels wrote them in place.
    pub output_bytes_copied: usize,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("subgraph", &self.subgraph).field("state", &self.state).finish()
    }
}

impl Session {
    /// Loads a model file (memory-mapped) with default options.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Session> {
        Session::with_options(Arc::new(Model::from_file(path)?), SessionOptions::default().with_env_backends()?)
    }

    /// Loads a model from caller-owned bytes (not copied).
    pub fn from_bytes(bytes: ModelBytes) -> Result<Session> {
        Session::with_options(Arc::new(Model::from_bytes(bytes)?), SessionOptions::default().with_env_backends()?)
    }

    /// A session over an already loaded model (models may be shared by sessions).
    pub fn with_options(model: Arc<Model>, options: SessionOptions) -> Result<Session> {
        let g = &model.subgraphs[0];
        let named = |ts: &[usize]| ts.iter().map(|&t| (g.tensors[t].name.clone(), t)).collect::<Vec<_>>();
        let (inputs, outputs) = (named(&g.inputs), named(&g.outputs));
        let input_shapes = g.inputs.iter().map(|&t| g.tensors[t].shape.clone()).collect();
        let mut ctx = BackendContext::new(options.threads);
        // Sessions of one loaded model hold one copy of its prepared constants.
        ctx.shared = Some(model.shared_constants());
        #[cfg(feature = "gpu")]
        {
            ctx.gpu.half = options.gpu_precision == crate::GpuPrecision::Fp16;
        }
        let backends = Backends::new(&options.backends, &options.op_backends, &options.custom_backends)?;
        #[cfg(feature = "observe")]
        let trace = options.trace;
        let arena_member = options.shared_arena.as_ref().map(crate::SharedArena::join);
        let s = Session {
            model,
            options,
            subgraph: 0,
            inputs,
            outputs,
            input_shapes,
            state: State::Loaded,
            compiled: None,
            compiled_shapes: Vec::new(),
            plan_cache: Vec::new(),
            dirty: false,
            arena: Vec::new(),
            arena_member,
            ctx,
            backends,
            ran: false,
            stats: PlanStats::default(),
            last_run: RunStats::default(),
            pending_input_bytes: 0,
            profile: None,
            preserve_all: false,
            fuse_chains: true,
            keep_all: None,
            trace: None,
            tracing: false,
            plan_generation: 0,
        };
        #[cfg(feature = "observe")]
        let s = {
            let mut s = s;
            if trace {
                s.start_trace(true);
            }
            s
        };
        Ok(s)
    }

    /// Starts recording a trace (or stops, with `false`): the prepare phases that
    /// follow (kernel builds, weight packing, the memory plan), and for every run one
    /// slice per executed op — its index, type, backend, input and output shapes and
    /// bytes, FLOPs for convolutions and matrix products — with the slices the worker
    /// threads spend in parallel kernels. [`Session::write_trace`] writes it as Chrome
    /// trace-event JSON (Perfetto, chrome://tracing). Starting again after a stop goes
    /// on with the same trace. Started before the first `prepare`, the trace begins
    /// with the model's parse. Off (the default), runs read no clock for it.
    #[cfg(feature = "observe")]
    pub fn set_tracing(&mut self, on: bool) {
        match (on, self.tracing) {
            (true, false) => {
                if self.trace.is_none() {
                    self.start_trace(self.stats.compiles == 0);
                } else {
                    self.enable_trace_sources(true);
                }
            }
            (false, true) => {
                self.collect_phases();
                self.enable_trace_sources(false);
            }
            _ => {}
        }
    }

    /// A new trace, from the model's parse (its first slice) or from now.
    #[cfg(feature = "observe")]
    fn start_trace(&mut self, with_parse: bool) {
        let now = std::time::Instant::now();
        let (parsed, done) = self.model.parse_span;
        let mut t = TraceLog::new(if with_parse { parsed.min(now) } else { now });
        if with_parse {
            let args = [("subgraphs", self.model.subgraphs.len())].into_iter().collect();
            t.phase(observe::PhaseSpan { name: "parse".into(), args, start: parsed, end: done });
        }
        self.trace = Some(Box::new(t));
        self.enable_trace_sources(true);
    }

    /// Turns the recorders tracing reads on or off: prepare phases in the backend
    /// context, worker spans in the thread pool.
    #[cfg(feature = "observe")]
    fn enable_trace_sources(&mut self, on: bool) {
        self.tracing = on;
        self.ctx.phases = on.then(Vec::new);
        if let Some(p) = self.ctx.pool() {
            p.set_tracing(on);
        }
    }

    /// Moves the prepare phases recorded in the backend context into the trace.
    fn collect_phases(&mut self) {
        if let (Some(t), Some(phases)) = (self.trace.as_deref_mut(), self.ctx.phases.as_mut()) {
            for p in phases.drain(..) {
                t.phase(p);
            }
        }
    }

    /// Runs traced so far (0 without a trace).
    #[cfg(feature = "observe")]
    pub fn traced_runs(&self) -> usize {
        self.trace.as_ref().map_or(0, |t| t.runs() as usize)
    }

    /// Writes the trace recorded so far as Chrome trace-event JSON to `w`. An error
    /// when no trace was started ([`Session::set_tracing`], [`SessionOptions::trace`]).
    #[cfg(feature = "observe")]
    pub fn write_trace_to(&mut self, w: &mut dyn std::io::Write) -> Result<()> {
        self.collect_phases();
        let t = self.trace.as_ref().ok_or_else(|| Error::InvalidState("no trace: turn tracing on (set_tracing, SessionOptions::trace) first".into()))?;
        t.write_chrome(w, "ferrite", &self.model).map_err(|e| Error::Runtime(format!("writing the trace: {e}").into()))
    }

    /// Writes the trace recorded so far to the file `path` (see [`Session::write_trace_to`]).
    #[cfg(feature = "observe")]
    pub fn write_trace(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.display().to_string(), source };
        let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        self.write_trace_to(&mut w)?;
        std::io::Write::flush(&mut w).map_err(io)
    }

    /// Index of the subgraph this session runs (0, or the selected signature's).
    pub fn subgraph_index(&self) -> usize {
        self.subgraph
    }

    /// The loaded model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Registers a custom op for this session (before `prepare`).
    pub fn register_custom_op(&mut self, name: &str, op: Arc<dyn CustomOp>) -> Result<()> {
        self.require(State::Loaded, "register_custom_op")?;
        self.options.custom_ops.register(name, op);
        Ok(())
    }

    /// Signature keys of the model.
    pub fn signatures(&self) -> Vec<String> {
        self.model.signatures.iter().map(|s| s.key.clone()).collect()
    }

    /// Selects the signature whose inputs/outputs the session exposes (before `prepare`).
    pub fn select_signature(&mut self, key: &str) -> Result<()> {
        self.require(State::Loaded, "select_signature")?;
        let s = self
            .model
            .signatures
            .iter()
            .find(|s| s.key == key)
            .ok_or_else(|| Error::InvalidArgument(format!("no signature '{key}' (have: {:?})", self.signatures()).into()))?;
        let g = &self.model.subgraphs[s.subgraph];
        self.subgraph = s.subgraph;
        self.backends.set_main_subgraph(s.subgraph);
        self.inputs = s.inputs.clone();
        self.outputs = s.outputs.clone();
        self.input_shapes = s.inputs.iter().map(|(_, t)| g.tensors[*t].shape.clone()).collect();
        Ok(())
    }

    fn require(&self, state: State, call: &str) -> Result<()> {
        if self.state != state {
            let need = if state == State::Loaded { "before prepare()" } else { "after prepare()" };
            return Err(Error::InvalidState(format!("{call}() must be called {need}").into()));
        }
        Ok(())
    }

    fn desc(&self, name: &str, t: usize, input_pos: Option<usize>) -> TensorDesc {
        let info = &self.model.subgraphs[self.subgraph].tensors[t];
        let shape = match (&self.compiled, input_pos) {
            (_, Some(k)) => self.input_shapes[k].clone(),
            (Some(c), None) => c.tensors[t].shape.clone(),
            (None, None) => info.shape.clone(),
        };
        TensorDesc { name: name.to_string(), tensor: t, dtype: info.dtype, shape, shape_signature: info.shape_signature.clone() }
    }

    /// Inputs in model order.
    pub fn inputs(&self) -> Vec<TensorDesc> {
        self.inputs.iter().enumerate().map(|(k, (n, t))| self.desc(n, *t, Some(k))).collect()
    }

    /// Outputs in model order (shapes are final after `prepare`).
    pub fn outputs(&self) -> Vec<TensorDesc> {
        self.outputs.iter().map(|(n, t)| self.desc(n, *t, None)).collect()
    }

    /// Index of the input called `name`.
    pub fn input_index(&self, name: &str) -> Result<usize> {
        self.inputs.iter().position(|(n, _)| n == name).ok_or_else(|| Error::InvalidArgument(format!("no input named '{name}'").into()))
    }

    /// Index of the output called `name`.
    pub fn output_index(&self, name: &str) -> Result<usize> {
        self.outputs.iter().position(|(n, _)| n == name).ok_or_else(|| Error::InvalidArgument(format!("no output named '{name}'").into()))
    }

    /// Changes the shape of input `i`. Before `prepare`, the plan is made for it.
    /// After `prepare`, the next `set_input`/`run` re-plans once for the new shapes (or
    /// reuses a cached plan for shapes seen before); runs with the same shapes then reuse
    /// that plan and allocate nothing.
    pub fn resize_input(&mut self, i: usize, shape: &[usize]) -> Result<()> {
        let cur =
            self.input_shapes.get_mut(i).ok_or_else(|| Error::InvalidArgument(format!("input {i} does not exist ({} inputs)", self.inputs.len()).into()))?;
        if cur.as_slice() == shape {
            return Ok(());
        }
        if cur.len() == shape.len() {
            // In place: same rank, so no allocation.
            cur.copy_from_slice(shape);
        } else {
            // A new rank (LiteRT allows it; each op checks the ranks it takes).
            *cur = shape.to_vec();
        }
        if self.state == State::Prepared {
            self.dirty = self.input_shapes != self.compiled_shapes;
            self.ran = false;
        }
        Ok(())
    }

    /// Compiles the model for the current input shapes and plans its memory.
    pub fn prepare(&mut self) -> Result<()> {
        self.plan_cache.clear();
        self.prepare_now()
    }

    fn compile_current(&mut self) -> Result<CompiledGraph> {
        self.ctx.refusals.clear();
        // Random streams start again from their seeds, as LiteRT's Prepare reseeds them.
        self.ctx.reset_op_states();
        let limits = self.limits();
        let model = self.keep_all.as_ref().unwrap_or(&self.model);
        let c = compile::compile(model, self.subgraph, &self.input_shapes, &self.backends, &self.options.custom_ops, &mut self.ctx, limits)?;
        self.stats.compiles += 1;
        Ok(c)
    }

    /// Compilation limits, and whether the plan is for a shared arena.
    fn limits(&self) -> Limits {
        Limits { max_arena_bytes: self.options.max_arena_bytes, shared_scratch: self.arena_member.is_some(), fuse_chains: self.fuse_chains }
    }

    /// Makes the arena at least `bytes` long. Growing drops the old arena before
    /// allocating the new one, so both never exist at once.
    fn reserve_arena(&mut self, bytes: usize) {
        let lines = bytes.div_ceil(crate::memory::ALIGN);
        if self.arena.len() < lines {
            self.arena = Vec::new();
            self.arena = crate::memory::Line::zeroed(bytes);
            self.stats.arena_allocations += 1;
        }
    }

    fn prepare_now(&mut self) -> Result<()> {
        let started = self.tracing.then(std::time::Instant::now);
        let r = self.prepare_plan();
        if let Some(start) = started {
            self.ctx.record_phase("prepare".into(), &[("subgraph", self.subgraph)], start);
            self.collect_phases();
        }
        r
    }

    fn prepare_plan(&mut self) -> Result<()> {
        // Drop the previous plan and arena first so old and new memory never coexist.
        self.compiled = None;
        self.arena = Vec::new();
        self.state = State::Loaded;
        self.ran = false;
        self.dirty = false;
        // The subgraph is fixed from here on (selecting one needs the Loaded state).
        self.keep_all = self.preserve_all.then(|| Arc::new(keeping_all_tensors(&self.model, self.subgraph)));
        let c = self.compile_current()?;
        self.reserve_arena(c.plan.own_bytes);
        self.compiled = Some(c);
        self.plan_generation += 1;
        self.compiled_shapes = self.input_shapes.clone();
        self.state = State::Prepared;
        // Recurrent state starts from zero (an int8 one from its zero point), as LiteRT's
        // AllocateTensors leaves it.
        self.reset_variable_tensors();
        Ok(())
    }

    /// Switches to a plan for the current input shapes if they changed since the last one.
    fn ensure_plan(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let cached = self.plan_cache.iter().position(|(shapes, _)| *shapes == self.input_shapes);
        // The cached entry's key equals the current shapes; reuse it rather than clone, so
        // switching between cached plans allocates nothing.
        let (key, next) = match cached {
            Some(k) => {
                self.stats.cache_hits += 1;
                self.plan_cache.remove(k)
            }
            None => {
                let c = self.compile_current()?;
                (self.input_shapes.clone(), c)
            }
        };
        self.reserve_arena(next.plan.own_bytes);
        self.plan_generation += 1;
        let prev_key = std::mem::replace(&mut self.compiled_shapes, key);
        if let Some(prev) = self.compiled.replace(next) {
            if self.plan_cache.len() + 1 >= PLAN_CACHE_SIZE {
                self.plan_cache.remove(0);
            }
            self.plan_cache.push((prev_key, prev));
        }
        // Another plan's tensors overwrote the state's memory: start it again from zero.
        self.reset_variable_tensors();
        self.dirty = false;
        if self.tracing {
            self.collect_phases();
        }
        Ok(())
    }

    /// Starts recording how long each op takes in the following runs (or stops, with
    /// `false`). Off by default; when on, a record is pushed per executed step.
    #[cfg(feature = "observe")]
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(Vec::new);
    }

    /// Total time per op index over the profiled runs, slowest first: (op, op name, time).
    #[cfg(feature = "observe")]
    pub fn profile(&self) -> Vec<(usize, String, std::time::Duration)> {
        let mut total: std::collections::BTreeMap<usize, std::time::Duration> = Default::default();
        for &(op, d) in self.profile.iter().flatten() {
            *total.entry(op).or_default() += d;
        }
        let ops = &self.model.subgraphs[self.subgraph].ops;
        let mut v: Vec<_> = total.into_iter().map(|(op, d)| (op, ops[op].code.name(), d)).collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.2));
        v
    }

    /// Forgets the values of all resource variables (streaming state); CALL_ONCE
    /// initializers run again on the next run.
    pub fn reset_variables(&mut self) {
        self.ctx.variables.reset();
    }

    /// Keeps every tensor of the session's subgraph in memory of its own, so that after
    /// a run each intermediate holds the value its op computed (LiteRT's
    /// `experimental_preserve_all_tensors`), readable with [`Session::tensor_data`]. Costs
    /// memory (tensors share none) and fusion across ops, whose fused-away intermediates
    /// would never be written. Before `prepare`.
    pub fn set_preserve_all_tensors(&mut self, on: bool) -> Result<()> {
        self.require(State::Loaded, "set_preserve_all_tensors")?;
        self.preserve_all = on;
        Ok(())
    }

    /// Runs each chain of float element-wise ops (activations, unary math, binary ops
    /// with a tensor, scalar or per-channel row) as one step that takes the chain
    /// block by block, its intermediate tensors never written (on by default). Off,
    /// every op is a step of its own; the results are bit-identical either way.
    /// Before `prepare`.
    pub fn set_fuse_chains(&mut self, on: bool) -> Result<()> {
        self.require(State::Loaded, "set_fuse_chains")?;
        self.fuse_chains = on;
        Ok(())
    }

    /// LiteRT's `AllocateTensors`: prepares a loaded session; after a resize, switches to
    /// the plan for the new shapes (a cached one, or compiled once); with nothing changed
    /// it does nothing, so it may be called before every run. Returns whether the plan
    /// changed (shapes may differ and tensor memory may have moved).
    pub fn allocate_tensors(&mut self) -> Result<bool> {
        match self.state {
            State::Loaded => self.prepare().map(|_| true),
            State::Prepared if self.dirty => self.ensure_plan().map(|_| true),
            State::Prepared => Ok(false),
        }
    }

    /// Whether the active plan computes some shapes at run time (ops from the first
    /// data-dependent one on): their tensors' descriptions change with each run.
    pub fn has_dynamic_shapes(&self) -> bool {
        self.compiled.as_ref().is_some_and(|c| c.dynamic.is_some())
    }

    /// Tensors in the session's subgraph; [`Session::tensor_desc`] and
    /// [`Session::tensor_data`] address them by index, as the model file does.
    pub fn tensor_count(&self) -> usize {
        self.model.subgraphs[self.subgraph].tensors.len()
    }

    fn tensor_info(&self, t: usize) -> Result<&crate::model::TensorInfo> {
        let ts = &self.model.subgraphs[self.subgraph].tensors;
        ts.get(t).ok_or_else(|| Error::InvalidArgument(format!("tensor {t} does not exist ({} tensors)", ts.len()).into()))
    }

    /// Tensor `t` of the session's subgraph (its name in the model, not a signature's
    /// alias). The shape is an input's as last resized; otherwise the active plan's (for
    /// shapes computed at run time, the last run's), or the model's before `prepare`.
    pub fn tensor_desc(&self, t: usize) -> Result<TensorDesc> {
        let info = self.tensor_info(t)?;
        let shape = match (self.inputs.iter().position(|x| x.1 == t), &self.compiled) {
            (Some(k), _) => self.input_shapes[k].clone(),
            (None, Some(c)) => match c.dynamic.as_ref().and_then(|d| d.values[t].as_ref()) {
                Some(v) => v.shape.clone(),
                None => c.tensors[t].shape.clone(),
            },
            (None, None) => info.shape.clone(),
        };
        Ok(TensorDesc { name: info.name.clone(), tensor: t, dtype: info.dtype, shape, shape_signature: info.shape_signature.clone() })
    }

    /// The active plan, unless a resize waits for `allocate_tensors` (its memory is stale).
    fn current_plan(&self) -> Option<&CompiledGraph> {
        self.compiled.as_ref().filter(|_| !self.dirty)
    }

    /// The bytes of tensor `t` of the session's subgraph: a constant's at any time; after
    /// `prepare`, every tensor that has storage — inputs as last set, outputs and
    /// intermediates as the last run left them (an intermediate's memory is shared with
    /// others unless [`Session::set_preserve_all_tensors`] is on), zeros before the
    /// first run. With a [shared arena](SessionOptions::shared_arena), an intermediate
    /// has no memory between runs: an error, unless every tensor is preserved. An error for a tensor without storage (unused, computed at run time
    /// and not yet run, or a folded constant released at prepare) and, but for
    /// constants, before `prepare` or while a resize waits for `allocate_tensors`.
    pub fn tensor_data(&self, t: usize) -> Result<TensorData<'_>> {
        let info = self.tensor_info(t)?;
        let constant = || self.model.const_data(info).map(|bytes| TensorData { dtype: info.dtype, shape: &info.shape, bytes });
        let no_data = || Error::InvalidState(format!("tensor {t} ('{}') has no data: allocate tensors (and run) first", info.name).into());
        let Some(c) = self.current_plan() else { return constant().ok_or_else(no_data) };
        if let Some(v) = c.dynamic.as_ref().and_then(|d| d.values[t].as_ref()) {
            return Ok(TensorData { dtype: v.dtype, shape: &v.shape, bytes: v.data.bytes() });
        }
        let slot = &c.tensors[t];
        let bytes: &[u8] = match &slot.loc {
            Loc::Arena { offset, len } => self.kept(c, t, *offset, *len)?,
            Loc::Model(r) => self.model.bytes().get(r.clone()).ok_or_else(no_data)?,
            Loc::Owned(b) => b.bytes(),
            Loc::None => return constant().ok_or_else(no_data),
        };
        Ok(TensorData { dtype: slot.dtype, shape: &slot.shape, bytes })
    }

    /// Tensor `t`'s memory, writable: an input to fill in place (LiteRT's
    /// `interpreter.tensor(i)`), an output or intermediate to edit. Constants are refused.
    /// The memory keeps its address until the session replaces it: `prepare`, or the
    /// first `allocate_tensors`, `set_input` or `run` after a resize that changes shapes.
    pub fn tensor_data_mut(&mut self, t: usize) -> Result<&mut [u8]> {
        let info = self.tensor_info(t)?;
        let name = info.name.clone();
        if self.current_plan().is_none() {
            return Err(Error::InvalidState(format!("tensor {t} ('{name}') has no memory: allocate tensors first").into()));
        }
        let Session { compiled, arena, .. } = self;
        let c = compiled.as_mut().ok_or_else(|| Error::InvalidState("session is not prepared".into()))?;
        if let Some(v) = c.dynamic.as_mut().and_then(|d| d.values[t].as_mut()) {
            return Ok(v.data.bytes_mut());
        }
        match c.tensors[t].loc {
            Loc::Arena { offset, len } if offset + len > c.plan.own_bytes => Err(lent_only(t, &name)),
            Loc::Arena { offset, len } => Ok(&mut bytemuck::cast_slice_mut::<crate::memory::Line, u8>(arena)[offset..offset + len]),
            Loc::Model(_) | Loc::Owned(_) => Err(Error::InvalidArgument(format!("tensor {t} ('{name}') is a constant and cannot be written").into())),
            Loc::None => Err(Error::InvalidState(format!("tensor {t} ('{name}') has no memory (unused, or computed at run time)").into())),
        }
    }

    /// The bytes of arena slot `offset..offset + len` of tensor `t` under plan `c`: an
    /// error for a slot in the scratch a shared arena lends only during runs.
    fn kept(&self, c: &CompiledGraph, t: usize, offset: usize, len: usize) -> Result<&[u8]> {
        let name = || self.model.subgraphs[self.subgraph].tensors.get(t).map_or("", |i| i.name.as_str());
        if offset + len > c.plan.own_bytes {
            return Err(lent_only(t, name()));
        }
        bytemuck::cast_slice::<crate::memory::Line, u8>(&self.arena)
            .get(offset..offset + len)
            .ok_or_else(|| Error::Runtime(format!("internal: tensor {t} lies outside the arena").into()))
    }

    /// LiteRT's `ResetVariableTensors`: each tensor the model marks as variable
    /// (`is_variable`, the state of LSTM-style ops) that has memory is filled with zeros,
    /// an int8 one with its zero point. Resource variables (VAR_HANDLE) keep their
    /// values, as in LiteRT; [`Session::reset_variables`] forgets those.
    pub fn reset_variable_tensors(&mut self) {
        let Some(c) = self.compiled.as_ref() else { return };
        let arena = bytemuck::cast_slice_mut::<crate::memory::Line, u8>(&mut self.arena);
        for (t, info) in self.model.subgraphs[self.subgraph].tensors.iter().enumerate() {
            if let (true, Loc::Arena { offset, len }) = (info.is_variable, &c.tensors[t].loc) {
                let zero_point = match (info.dtype, info.quant.as_ref().and_then(|q| q.zero_point.first())) {
                    // The zero point's low byte is the int8 value's two's-complement encoding.
                    (DType::I8, Some(&z)) => z as u8,
                    _ => 0,
                };
                arena[*offset..*offset + *len].fill(zero_point);
            }
        }
    }

    /// Upload / GPU / readback time of the GPU segments, summed over the session's
    /// runs (zero without GPU ops): differences between two calls time the runs
    /// between them.
    pub fn gpu_times(&self) -> crate::GpuTimes {
        #[cfg(feature = "gpu")]
        {
            self.ctx.gpu.times.snapshot()
        }
        #[cfg(not(feature = "gpu"))]
        {
            crate::GpuTimes::default()
        }
    }

    /// Compile / cache / arena counters, for tests and reports.
    pub fn plan_stats(&self) -> PlanStats {
        self.stats
    }

    /// Why backends before the one that took an op refused it, from the last
    /// compilation: (subgraph, op index, refusing backend, reason). With
    /// `--backends gpu,cpu`, each op the GPU left to the CPU and why.
    pub fn op_fallbacks(&self) -> Vec<(usize, usize, &'static str, String)> {
        self.ctx.refusals.clone()
    }

    /// The GPU segments of the session's subgraph and their planned GPU memory
    /// (all zero when no op runs on the GPU or before `prepare`).
    pub fn gpu_plan(&self) -> crate::compile::GpuPlan {
        self.compiled.as_ref().map(|c| c.gpu).unwrap_or_default()
    }

    /// I/O copies of the last run.
    pub fn last_run_stats(&self) -> RunStats {
        self.last_run
    }

    /// Bytes held by the session's own arena (its capacity, at least the active plan's
    /// size; with a shared arena, the region of inputs, outputs and state only).
    pub fn arena_capacity_bytes(&self) -> usize {
        self.arena.len() * crate::memory::ALIGN
    }

    /// The pool this session borrows scratch from ([`SessionOptions::shared_arena`]).
    pub fn shared_arena(&self) -> Option<&crate::SharedArena> {
        self.arena_member.as_ref().map(|m| m.pool())
    }

    fn slot(&self, t: usize) -> Result<(usize, usize)> {
        let c = self.compiled.as_ref().ok_or_else(|| Error::InvalidState("session is not prepared".into()))?;
        match c.tensors[t].loc {
            Loc::Arena { offset, len } => Ok((offset, len)),
            _ => Err(Error::InvalidArgument(format!("tensor {t} is not stored in the arena").into())),
        }
    }

    /// Copies raw little-endian bytes into input `i`; the length must match exactly.
    pub fn set_input(&mut self, i: usize, data: &[u8]) -> Result<()> {
        self.require(State::Prepared, "set_input")?;
        self.ensure_plan()?;
        let (_, t) = *self.inputs.get(i).ok_or_else(|| Error::InvalidArgument(format!("input {i} does not exist ({} inputs)", self.inputs.len()).into()))?;
        if self.model.subgraphs[self.subgraph].tensors[t].dtype == DType::String {
            return self.set_string_input(i, t, data);
        }
        let (offset, len) = match self.slot(t) {
            Ok(s) => s,
            // An input no op reads (or a constant input) needs no data.
            Err(_) => return Ok(()),
        };
        if data.len() != len {
            let d = self.desc(&self.inputs[i].0, t, Some(i));
            return Err(Error::InvalidArgument(
                format!("input {i} ('{}') is {} {:?} = {len} bytes, got {} bytes", d.name, d.dtype.name(), d.shape, data.len()).into(),
            ));
        }
        bytemuck::cast_slice_mut::<crate::memory::Line, u8>(&mut self.arena)[offset..offset + len].copy_from_slice(data);
        self.pending_input_bytes += len;
        Ok(())
    }

    /// A STRING input: `data` is TFLite's string buffer (see [`Session::set_input_strings`]),
    /// checked as untrusted (layout, and one string per element of the input's shape).
    /// It is kept with the dynamic tail's run-time values, since its size is its data's.
    fn set_string_input(&mut self, i: usize, t: usize, data: &[u8]) -> Result<()> {
        let shape = self.input_shapes[i].clone();
        let count = ferrite_format::strings::parse(data).map_err(|e| Error::InvalidArgument(format!("input {i}: {e}").into()))?.len();
        if count != shape.iter().product::<usize>() {
            return Err(Error::InvalidArgument(format!("input {i} is string {shape:?}, got {count} strings").into()));
        }
        let c = self.compiled.as_mut().ok_or_else(|| Error::InvalidState("session is not prepared".into()))?;
        // No dynamic tail: no op reads the input.
        if let Some(d) = c.dynamic.as_mut() {
            d.values[t] = Some(compile::DynValue { dtype: DType::String, shape, data: compile::AlignedBytes::from_slice(data) });
        }
        self.pending_input_bytes += data.len();
        Ok(())
    }

    /// Sets a STRING input from its strings (bytes, UTF-8 or not), in row-major
    /// order; their count must match the input's shape (see [`Session::resize_input`]).
    pub fn set_input_strings<S: AsRef<[u8]>>(&mut self, i: usize, items: &[S]) -> Result<()> {
        let buf = ferrite_format::strings::write(items).ok_or_else(|| Error::InvalidArgument(format!("input {i}: strings exceed 2 GiB").into()))?;
        self.set_input(i, &buf)
    }

    /// Sets a float32 input.
    pub fn set_input_f32(&mut self, i: usize, data: &[f32]) -> Result<()> {
        let t = self.inputs.get(i).map(|x| x.1).ok_or_else(|| Error::InvalidArgument(format!("input {i} does not exist").into()))?;
        let dtype = self.model.subgraphs[self.subgraph].tensors[t].dtype;
        if dtype != DType::F32 {
            return Err(Error::InvalidArgument(format!("input {i} is {}, not float32", dtype.name()).into()));
        }
        self.set_input(i, bytemuck::cast_slice(data))
    }

    /// Runs the model on the current inputs.
    pub fn run(&mut self) -> Result<()> {
        self.run_observed(None, None).map(|_| ())
    }

    /// Runs the model on the current inputs, calling `before` and `after` around every
    /// op of the session's subgraph, in execution order, with the op's index, type,
    /// backend and read-only views of its tensors (MNN's `runWithCallBack`). `before`
    /// may return [`Flow::Skip`] (the op does not run) or [`Flow::Stop`] (the run ends
    /// there), as may `after` ([`Flow::Stop`]).
    ///
    /// Every op is seen once per run: ops the plan runs as steps, and also those it
    /// folded at prepare, turned into aliases, or fused into a neighbouring kernel —
    /// a folded PAD where its index falls, an epilogue right after the convolution that
    /// computed it. A tensor that never held its own value (a fused op's output, a
    /// convolution output its epilogue was applied to) has state
    /// [`TensorState::Fused`](crate::TensorState::Fused) and no data. Ops inside
    /// IF, WHILE and CALL_ONCE bodies are reported the same way, at each execution,
    /// after their control-flow op's `before` and before its `after`; `OpEvent::calls`
    /// says which control-flow op (and WHILE pass) runs them. A
    /// [`Flow::Stop`] inside a body ends the whole run.
    ///
    /// Without callbacks, [`Session::run`] takes none of this path.
    #[cfg(feature = "observe")]
    pub fn run_with_callbacks(&mut self, mut before: impl FnMut(&OpEvent<'_>) -> Flow, mut after: impl FnMut(&OpEvent<'_>) -> Flow) -> Result<RunOutcome> {
        self.run_observed(Some(&mut before), Some(&mut after))
    }

    fn run_observed(&mut self, before: Option<observe::OpCallback<'_>>, after: Option<observe::OpCallback<'_>>) -> Result<RunOutcome> {
        self.require(State::Prepared, "run")?;
        self.ensure_plan()?;
        let limits = self.limits();
        let c = self.compiled.as_mut().ok_or_else(|| Error::InvalidState("session is not prepared".into()))?;
        self.ran = false;
        let model = self.keep_all.as_ref().unwrap_or(&self.model);
        // Returned to the pool when the run ends, whichever way (after `arena`, which borrows it).
        let mut lease = lend_scratch(&self.arena_member, &c.plan);
        let arena = run_arena(&mut self.arena, &c.plan, &mut lease)?;
        let mut env = crate::exec::DynEnv { backends: &self.backends, custom: &self.options.custom_ops, ctx: &mut self.ctx, limits, hooks: None };
        // Constant false without the `observe` feature: the hooks and what they record are not linked.
        let observed = OBSERVE && (self.tracing || self.profile.is_some() || before.is_some() || after.is_some());
        let outcome = if !observed {
            crate::exec::execute(c, model, arena, None, &mut env)?;
            RunOutcome::Completed
        } else {
            let mut hooks = RunHooks::new();
            // Shortens the callbacks' lifetime to the hooks' (a coercion, which `Option` does not apply itself).
            hooks.before = before.map(|f| -> observe::OpCallback<'_> { f });
            hooks.after = after.map(|f| -> observe::OpCallback<'_> { f });
            hooks.profile = self.profile.as_mut();
            if let (true, Some(t)) = (self.tracing, self.trace.as_deref_mut()) {
                let generation = self.plan_generation;
                t.use_plan(generation, || observe::describe_plan(model, c));
                t.begin_run();
                hooks.pool = env.ctx.pool();
                hooks.trace = Some(t);
            }
            env.hooks = Some(&mut hooks);
            let r = crate::exec::execute(c, model, arena, None, &mut env);
            let stopped = hooks.stopped;
            if let Some(t) = hooks.trace {
                t.end_run(r.is_ok() && stopped.is_none());
            }
            r?;
            match stopped {
                Some((subgraph, op)) => RunOutcome::Stopped { subgraph, op },
                None => RunOutcome::Completed,
            }
        };
        self.ran = outcome == RunOutcome::Completed;
        // Outputs are read in place with `output()`: nothing is copied out.
        self.last_run = RunStats { input_bytes_copied: std::mem::take(&mut self.pending_input_bytes), output_bytes_copied: 0 };
        Ok(outcome)
    }

    /// Runs on caller-owned buffers without copying them: kernels read `inputs`
    /// directly and write each output straight into `outputs[k]` where the graph
    /// allows it (see [`RunStats`] for what was copied). Buffer sizes must match
    /// the inputs' and outputs' byte sizes exactly. A model with data-dependent
    /// shapes runs as [`Session::run`] does and its outputs are copied into
    /// `outputs`, whose sizes must then match the sizes the run produced.
    pub fn run_with(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<RunStats> {
        self.require(State::Prepared, "run_with")?;
        self.ensure_plan()?;
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(Error::InvalidArgument(
                format!("run_with got {} inputs and {} outputs; the model has {} and {}", inputs.len(), outputs.len(), self.inputs.len(), self.outputs.len())
                    .into(),
            ));
        }
        let limits = self.limits();
        let c = self.compiled.as_mut().ok_or_else(|| Error::InvalidState("session is not prepared".into()))?;
        let check = |what: &str, k: usize, t: usize, got: usize| -> Result<()> {
            let slot = &c.tensors[t];
            let want = slot.shape.iter().product::<usize>() * slot.dtype.size().unwrap_or(0);
            if want != got {
                return Err(Error::InvalidArgument(format!("{what} {k} is {} {:?} = {want} bytes, buffer has {got}", slot.dtype.name(), slot.shape).into()));
            }
            Ok(())
        };
        for (k, (_, t)) in self.inputs.iter().enumerate() {
            check("input", k, *t, inputs[k].len())?;
        }
        // Outputs of a model with data-dependent shapes have their size only after
        // the run: it runs on the arena and copies at both ends (the zero-copy path
        // is for static models and never the reason to refuse one).
        let dynamic = c.dynamic.is_some();
        for (k, (_, t)) in self.outputs.iter().enumerate() {
            if !dynamic {
                check("output", k, *t, outputs[k].len())?;
            }
        }
        if self.keep_all.is_some() || dynamic {
            return self.run_with_copies(inputs, outputs);
        }
        self.ran = false;
        let mut env = crate::exec::DynEnv { backends: &self.backends, custom: &self.options.custom_ops, ctx: &mut self.ctx, limits, hooks: None };
        let mut lease = lend_scratch(&self.arena_member, &c.plan);
        let arena = run_arena(&mut self.arena, &c.plan, &mut lease)?;
        let copied = if !OBSERVE || (!self.tracing && self.profile.is_none()) {
            crate::exec::execute(c, &self.model, arena, Some((inputs, outputs)), &mut env)?
        } else {
            // Timers only: callbacks need the arena run (`run_with_callbacks`).
            let mut hooks = RunHooks::new();
            hooks.profile = self.profile.as_mut();
            if let (true, Some(t)) = (self.tracing, self.trace.as_deref_mut()) {
                let generation = self.plan_generation;
                t.use_plan(generation, || observe::describe_plan(&self.model, c));
                t.begin_run();
                hooks.pool = env.ctx.pool();
                hooks.trace = Some(t);
            }
            env.hooks = Some(&mut hooks);
            let r = crate::exec::execute(c, &self.model, arena, Some((inputs, outputs)), &mut env);
            if let Some(t) = hooks.trace {
                t.end_run(r.is_ok());
            }
            r?
        };
        self.pending_input_bytes = 0;
        self.last_run = RunStats { input_bytes_copied: 0, output_bytes_copied: copied };
        Ok(self.last_run)
    }

    /// `run_with` when every tensor is preserved (the compiled graph lists every
    /// intermediate among its outputs, so the caller's buffers, the model's outputs
    /// only, cannot be bound) or when output sizes come from values: the run uses
    /// the arena and copies at both ends.
    fn run_with_copies(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<RunStats> {
        for (k, data) in inputs.iter().enumerate() {
            self.set_input(k, data)?;
        }
        self.run()?;
        let mut copied = 0;
        for (k, out) in outputs.iter_mut().enumerate() {
            let data = self.output(k)?;
            if data.bytes.len() != out.len() {
                return Err(Error::InvalidArgument(format!("output {k} has {} bytes after the run, buffer has {}", data.bytes.len(), out.len()).into()));
            }
            out.copy_from_slice(data.bytes);
            copied += out.len();
        }
        self.last_run.output_bytes_copied = copied;
        Ok(self.last_run)
    }

    /// Output `i` of the last run.
    pub fn output(&self, i: usize) -> Result<TensorData<'_>> {
        if !self.ran {
            return Err(Error::InvalidState("output() needs a completed run()".into()));
        }
        let (_, t) =
            *self.outputs.get(i).ok_or_else(|| Error::InvalidArgument(format!("output {i} does not exist ({} outputs)", self.outputs.len()).into()))?;
        let c = self.compiled.as_ref().ok_or_else(|| Error::InvalidState("session is not prepared".into()))?;
        if let Some(v) = c.dynamic.as_ref().and_then(|d| d.values[t].as_ref()) {
            return Ok(TensorData { dtype: v.dtype, shape: &v.shape, bytes: v.data.bytes() });
        }
        let slot = &c.tensors[t];
        let bytes: &[u8] = match &slot.loc {
            Loc::Arena { offset, len } => self.kept(c, t, *offset, *len)?,
            Loc::Model(r) => &self.model.bytes()[r.clone()],
            Loc::Owned(b) => b.bytes(),
            Loc::None => &[],
        };
        Ok(TensorData { dtype: slot.dtype, shape: &slot.shape, bytes })
    }

    /// Dtype and shape of output `i` under the active plan.
    pub fn output_slot(&self, i: usize) -> Result<(DType, &[usize])> {
        let (_, t) =
            *self.outputs.get(i).ok_or_else(|| Error::InvalidArgument(format!("output {i} does not exist ({} outputs)", self.outputs.len()).into()))?;
        let c = self.compiled.as_ref().ok_or_else(|| Error::InvalidState("session is not prepared".into()))?;
        if let Some(v) = c.dynamic.as_ref().and_then(|d| d.values[t].as_ref()) {
            return Ok((v.dtype, &v.shape));
        }
        Ok((c.tensors[t].dtype, &c.tensors[t].shape))
    }

    /// Arena size and its lower bound for the current plan, in bytes.
    pub fn arena_stats(&self) -> Option<(usize, usize)> {
        self.compiled.as_ref().map(|c| (c.plan.arena_bytes, c.plan.lower_bound_bytes))
    }

    /// The active plan's arena, tensor by tensor: offset, size, and the ops (by index)
    /// between which it is alive. `None` before `prepare`.
    pub fn arena_blocks(&self) -> Option<Vec<crate::memory::ArenaBlock>> {
        let c = self.compiled.as_ref()?;
        let op_at = |step: usize| c.steps.get(step).map_or(step, |s| s.op);
        let offset: std::collections::HashMap<usize, usize> = c.plan.offsets.iter().copied().collect();
        let blocks = c.plan.lifetimes.iter().filter_map(|l| {
            let offset = *offset.get(&l.tensor)?;
            Some(crate::memory::ArenaBlock { tensor: l.tensor, offset, bytes: l.bytes, first_op: op_at(l.first), last_op: op_at(l.last) })
        });
        Some(blocks.collect())
    }

    /// Execution steps, ops folded at prepare, and shape-only ops aliased to their input.
    pub fn step_stats(&self) -> Option<(usize, usize, usize)> {
        self.compiled.as_ref().map(|c| (c.steps.len(), c.folded_ops, c.aliased_ops))
    }

    /// Ops fused into a neighbouring kernel: a zero PAD before a convolution (read
    /// as explicit padding), a residual ADD and PRELU after it (applied while its
    /// output is in cache), a slice computed by the ASSIGN_VARIABLE storing it.
    pub fn fused_op_count(&self) -> Option<usize> {
        self.compiled.as_ref().map(|c| c.fused_ops)
    }

    /// Element-wise ops run in chains, several to a step, block by block (see
    /// [`Session::set_fuse_chains`]).
    pub fn chained_op_count(&self) -> Option<usize> {
        self.compiled.as_ref().map(|c| c.chained_ops)
    }

    /// Where each op runs after `prepare` — a backend's name, or how it runs
    /// otherwise (folded, fused, alias, executor) — for the session's subgraph and
    /// the subgraphs it calls: (subgraph, op index, assignment).
    pub fn op_assignments(&self) -> Result<Vec<(usize, usize, compile::OpRun)>> {
        let c = self.compiled.as_ref().ok_or_else(|| Error::InvalidState("op_assignments() must be called after prepare()".into()))?;
        Ok(c.assignments())
    }

    /// Tensors passed between ops that run on different backends (after `prepare`).
    pub fn backend_crossings(&self) -> Result<Vec<compile::Crossing>> {
        let c = self.compiled.as_ref().ok_or_else(|| Error::InvalidState("backend_crossings() must be called after prepare()".into()))?;
        Ok(c.crossings(&self.model))
    }

    /// The session's backends, in the order ops try them.
    pub fn backend_names(&self) -> Vec<&'static str> {
        self.backends.names()
    }

    /// Runs subgraph `index` directly, with its own inputs and outputs (before `prepare`).
    pub fn select_subgraph(&mut self, index: usize) -> Result<()> {
        self.require(State::Loaded, "select_subgraph")?;
        let g = self
            .model
            .subgraphs
            .get(index)
            .ok_or_else(|| Error::InvalidArgument(format!("subgraph {index} does not exist ({} subgraphs)", self.model.subgraphs.len()).into()))?;
        let named = |ts: &[usize]| ts.iter().map(|&t| (g.tensors[t].name.clone(), t)).collect::<Vec<_>>();
        self.inputs = named(&g.inputs);
        self.outputs = named(&g.outputs);
        self.input_shapes = g.inputs.iter().map(|&t| g.tensors[t].shape.clone()).collect();
        self.subgraph = index;
        self.backends.set_main_subgraph(index);
        Ok(())
    }
}
