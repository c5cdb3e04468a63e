//! Backends: where an op's kernel comes from.
//!
//! A [`Backend`] turns one op, with its input shapes and any constant inputs,
//! into output shapes plus a [`KernelFn`]. The CPU backend is the first; a GPU
//! backend implements the same trait. Per-session state (thread count,
//! prepacked weights) lives in a [`BackendContext`] the session owns.

pub(crate) mod cpu;
// Registered only with `op-custom` (a selective build whose models use none of them
// leaves them out); the gpu backend borrows the transposed convolution's checks.
#[cfg_attr(not(feature = "op-custom"), allow(dead_code))]
pub(crate) mod custom_builtin;
#[cfg_attr(not(feature = "op-custom"), allow(dead_code))]
pub(crate) mod custom_mediapipe;
#[cfg(feature = "gpu")]
pub(crate) mod gpu;
#[cfg(feature = "reference")]
pub(crate) mod reference;
pub(crate) mod select;

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Detail, Error, Location, Result};
use crate::model::{DType, Op, Quantization, Sparsity, TensorInfo};

/// A compiled kernel: reads input bytes (absent optional inputs are `None`) and
/// writes output bytes. Shapes and parameters were fixed when it was built.
///
/// An input that is a variable tensor of the model (`is_variable`: the state of a
/// recurrent op, kept from one run to the next) arrives instead as a writable view
/// after the op's outputs, one per such input in input order, and its input slot is
/// `None`: the kernel reads and updates the state in place.
pub type KernelFn = Box<dyn FnMut(&[Option<&[u8]>], &mut [&mut [u8]]) -> Result<()> + Send>;

/// What a backend knows about one input of an op when building its kernel.
#[derive(Debug, Clone)]
pub struct InputDesc<'a> {
    /// Tensor index in the subgraph.
    pub tensor: usize,
    /// Element type.
    pub dtype: DType,
    /// Shape (resolved for this prepare).
    pub shape: Vec<usize>,
    /// The tensor's value when known while building: constants at prepare, and
    /// every input when an op is built at run time (data-dependent shapes).
    pub value: Option<&'a [u8]>,
    /// True only for constants of the model (values that never change). Caches
    /// such as prepacked weights may only be keyed on these.
    pub constant: bool,
    /// Quantization parameters.
    pub quant: Option<&'a Quantization>,
    /// Sparse encoding of `value`, if any.
    pub sparsity: Option<&'a Sparsity>,
}

/// Everything a backend sees of the op it builds.
pub struct OpContext<'a> {
    /// Subgraph index.
    pub subgraph: usize,
    /// Op index in the subgraph.
    pub op_index: usize,
    /// The op.
    pub op: &'a Op,
    /// Inputs (None = omitted optional input).
    pub inputs: Vec<Option<InputDesc<'a>>>,
    /// Output tensors as declared in the file (dtype, stored shape, quantization).
    pub outputs: Vec<&'a TensorInfo>,
    /// Custom options bytes (custom ops).
    pub custom_options: &'a [u8],
    /// Element-wise ops the compiler may fold into this op's kernel (see
    /// [`Backend::applies_epilogues`]). A kernel that applies epilogues keeps this
    /// slot and, at run time, applies whatever it holds; the compiler fills it once
    /// the subgraph is compiled, and only when the building backend declared that it
    /// applies them — otherwise it stays empty and the ops run as their own steps.
    pub(crate) epilogue: Option<EpilogueSlot>,
    /// Explicit zero padding (top, bottom, left, right) of input 0 folded in from a
    /// PAD op before this VALID convolution: input 0 is the PAD's input.
    pub(crate) input_pad: Option<[usize; 4]>,
    /// The session's memory limit (`SessionOptions::max_arena_bytes`): the most any
    /// one buffer a builder sizes from file data may take.
    pub(crate) max_bytes: usize,
}

/// The element-wise ops fused into a kernel, set once when the compiler has
/// finished with the subgraph (empty when nothing qualified).
pub(crate) type EpilogueSlot = Arc<std::sync::OnceLock<Vec<Epilogue>>>;

/// An element-wise op folded into the kernel producing its input, applied to each
/// block of output rows while the block is still in cache.
#[derive(Debug, Clone)]
pub(crate) enum Epilogue {
    /// PRELU: `x < 0 ? x * alpha : x`, alpha per channel (or one value).
    Prelu(Arc<[f32]>),
    /// ADD of a tensor of the output's shape (a residual), kernel input `arg`,
    /// then the ADD's own activation clamp.
    Add { arg: usize, clamp: ferrite_kernels::Clamp },
    /// An activation (RELU family, HARD_SWISH, LEAKY_RELU), computed as its own op
    /// computes it.
    Unary(ferrite_kernels::elementwise::Unary),
}

/// Applies `epilogue` to output rows starting at row `first` (held by `out`, rows
/// of `row_len` floats with `channels` channels), reading fused operands from the
/// kernel inputs `ins`. False when an operand is missing or too short.
pub(crate) fn apply_epilogue(epilogue: &[Epilogue], ins: &[Option<&[u8]>], first: usize, row_len: usize, channels: usize, out: &mut [f32]) -> bool {
    for e in epilogue {
        match e {
            Epilogue::Prelu(alpha) if alpha.len() == 1 => {
                let a = alpha[0];
                out.iter_mut().for_each(|v| *v = if *v < 0.0 { *v * a } else { *v });
            }
            Epilogue::Prelu(alpha) => ferrite_kernels::elementwise::prelu_rows(out, &alpha[..channels.min(alpha.len())]),
            Epilogue::Add { arg, clamp } => {
                let Some(other) =
                    ins.get(*arg).copied().flatten().and_then(|b| typed::<f32>(b).ok()).and_then(|o| o.get(first * row_len..first * row_len + out.len()))
                else {
                    return false;
                };
                ferrite_kernels::elementwise::add_clamp(out, other, *clamp);
            }
            Epilogue::Unary(op) => ferrite_kernels::elementwise::unary_in_place(*op, out),
        }
    }
    true
}

impl<'a> OpContext<'a> {
    /// "subgraph S op I (NAME)", for messages.
    pub fn at(&self) -> String {
        format!("subgraph {} op {} ({})", self.subgraph, self.op_index, self.op.code.name())
    }
    /// True for float activations with int8 weights (dynamic-range quantization):
    /// the hybrid kernels' business.
    pub fn is_hybrid(&self) -> bool {
        self.opt_input(0).is_some_and(|d| d.dtype == DType::F32) && self.opt_input(1).is_some_and(|d| d.dtype == DType::I8)
    }
    /// True when the op's first input holds quantized integers (int8, uint8, int16).
    pub fn is_int(&self) -> bool {
        self.opt_input(0).is_some_and(|d| matches!(d.dtype, DType::I8 | DType::U8 | DType::I16))
    }
    /// This op's place in the model, for errors.
    pub fn location(&self) -> Location {
        Location::op(self.subgraph, self.op_index, self.op.code.name())
    }
    /// A model error located at this op.
    pub fn bad(&self, msg: impl std::fmt::Display) -> Error {
        Error::InvalidModel(Detail::at(self.location(), msg.to_string()))
    }
    /// An unsupported-feature error located at this op.
    pub fn unsupported(&self, msg: impl std::fmt::Display) -> Error {
        Error::Unsupported(Detail::at(self.location(), msg.to_string()))
    }
    /// Element count of a shape a kernel sizes memory by at prepare (scratch, output
    /// shapes read from constants), checked before anything is allocated: a hostile
    /// file must not make `prepare` attempt an absurd allocation. The cap is the
    /// session's memory limit, at `elem` bytes per element.
    pub fn checked_elements(&self, dims: &[usize], elem: usize) -> Result<usize> {
        let cap = self.max_bytes;
        dims.iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n.checked_mul(elem).is_some_and(|b| b <= cap))
            .ok_or_else(|| Error::ResourceLimit(Detail::at(self.location(), format!("shape {dims:?} needs more than the session limit of {cap} bytes"))))
    }
    /// Required input `i`.
    pub fn input(&self, i: usize) -> Result<&InputDesc<'a>> {
        self.inputs.get(i).and_then(|x| x.as_ref()).ok_or_else(|| self.bad(format!("missing required input {i}")))
    }
    /// Optional input `i`.
    pub fn opt_input(&self, i: usize) -> Option<&InputDesc<'a>> {
        self.inputs.get(i).and_then(|x| x.as_ref())
    }
    /// Constant integer values of input `i` (int32 or int64), required at prepare.
    pub fn const_ints(&self, i: usize) -> Result<Vec<i64>> {
        let d = self.input(i)?;
        let v = d.value.ok_or_else(|| Error::DataDependent(Detail::at(self.location(), format!("input {i} is computed at run time"))))?;
        // These are shape-like parameters (axes, shapes, paddings, begin/end, sizes):
        // a few values each. A huge one is hostile, and messages print the values.
        const MAX_VALUES: usize = 4096;
        if v.len() > MAX_VALUES * 8 || d.shape.iter().product::<usize>() > MAX_VALUES {
            return Err(self.bad(format!("input {i} (shape {:?}) holds more than {MAX_VALUES} parameter values", d.shape)));
        }
        Ok(match d.dtype {
            DType::I32 => v.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
            DType::I64 => v.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
            t => return Err(self.bad(format!("input {i} must be int32 or int64, got {}", t.name()))),
        })
    }
    /// Checks the number of outputs.
    pub fn expect_outputs(&self, n: usize) -> Result<()> {
        if self.outputs.len() != n {
            return Err(self.bad(format!("expected {n} outputs, found {}", self.outputs.len())));
        }
        Ok(())
    }
}

/// Output description a backend returns for each output of an op.
pub type OutSpec = (DType, Vec<usize>);

/// A built op: output specs plus its kernel.
pub struct Built {
    /// Output dtypes and shapes, in op output order.
    pub outputs: Vec<OutSpec>,
    /// The kernel.
    pub kernel: KernelFn,
}

/// How prepacked data is laid out, part of its cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Packing {
    /// Conv / fully-connected weights (and bias) in GEMM panels for one kernel ISA.
    Gemm(ferrite_kernels::igemm::Isa),
    /// The same panels read as whole filter rows (this many columns merged per tap).
    GemmRows(ferrite_kernels::igemm::Isa, usize),
    /// A BATCH_MATMUL's constant right operand in GEMM panels (its columns are
    /// the output channels; `true` when stored transposed, `adj_y`).
    GemmColumns(ferrite_kernels::igemm::Isa, bool),
    /// Weights dequantized or converted to float32.
    DenseF32,
    /// int8 convolution weights in the int8 GEMM's panels.
    QGemm,
    /// Depthwise weights tiled along output rows of this many pixels.
    DepthwiseRows(usize),
    /// Float32 weights copied as they are onto cache lines (64-byte aligned).
    Lines,
    /// A first-layer CONV_2D's weights and bias in its direct kernel's layout
    /// (`ferrite_kernels::conv::FirstLayer`).
    FirstLayer,
    /// The outputs of an op on constants, evaluated at prepare (`tensor` is its
    /// first output).
    Folded,
    /// Uploaded to the GPU as they are (float32).
    Gpu,
    /// Uploaded to the GPU converted to float16 (once per model, like the others).
    GpuF16,
}

/// Identity of a prepacked constant: tensor ids within the session's model, never addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PackKey {
    /// Subgraph index.
    pub subgraph: usize,
    /// The packed tensor (weights).
    pub tensor: usize,
    /// A second tensor folded into the packing (a bias), if any.
    pub with: Option<usize>,
    /// Layout.
    pub packing: Packing,
}

/// Prepared constants the sessions of one loaded model share: prepacked weights,
/// converted (fp16, densified) and folded constants. Keys are tensor identities
/// within the model plus the packing, the instruction set and the value's type,
/// never addresses. The cache holds only weak references: each session keeps the
/// values its kernels use alive, so a value is freed with the last session using
/// it, and the model holds the cache itself only weakly (see
/// [`crate::model::Model::shared_constant_count`]), so it goes with the last session too.
#[derive(Default)]
pub(crate) struct SharedConstants {
    /// One slot per key; the slot's own lock makes a second session preparing the
    /// same constant wait for the first instead of computing a second copy.
    slots: std::sync::Mutex<HashMap<SharedKey, Arc<std::sync::Mutex<Option<SharedValue>>>>>,
}

type SharedValue = std::sync::Weak<dyn std::any::Any + Send + Sync>;

/// A prepared constant of any type. The caches hold and make these type-erased,
/// so their code is compiled once, not once per packing type and maker closure.
type AnyValue = Arc<dyn std::any::Any + Send + Sync>;

/// Runs the maker of a `T` (once: the caches call their maker at most once) and
/// erases the type.
fn make_erased<T: Send + Sync + 'static>(make: &mut Option<impl FnOnce() -> Result<T>>) -> Result<AnyValue> {
    let make = make.take().ok_or_else(|| Error::InvalidState("a constant's maker was called twice".into()))?;
    Ok(Arc::new(make()?))
}

/// The `T` a typed cache lookup asked for (the caches key by type, so it is one).
fn downcast<T: Send + Sync + 'static>(v: AnyValue) -> Result<Arc<T>> {
    v.downcast::<T>().map_err(|_| Error::InvalidState("a prepared constant of another type under the same key".into()))
}

/// What a shared value is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SharedKey {
    key: PackKey,
    /// The kernels' instruction sets when the value was prepared: a packing for one
    /// ISA is never handed to a kernel of another.
    isa: (ferrite_kernels::igemm::Isa, ferrite_kernels::qgemm::QIsa),
    ty: std::any::TypeId,
}

impl SharedConstants {
    /// The value under `key`, prepared by `make` when no live session holds it. The
    /// flag says whether `make` ran.
    fn get_or_make(&self, key: PackKey, ty: std::any::TypeId, make: &mut dyn FnMut() -> Result<AnyValue>) -> Result<(AnyValue, bool)> {
        let key = SharedKey { key, isa: (ferrite_kernels::igemm::Isa::detect(), ferrite_kernels::qgemm::QIsa::detect()), ty };
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            // Dead entries (every session using them dropped) go as new ones come.
            if slots.len() >= 64 && slots.len().is_power_of_two() {
                slots.retain(|_, s| Arc::strong_count(s) > 1 || s.lock().map_or(true, |v| v.as_ref().is_some_and(|w| w.strong_count() > 0)));
            }
            slots.entry(key).or_default().clone()
        };
        let mut held = slot.lock().unwrap_or_else(|e| e.into_inner());
        // `(*v).type_id()` is the value's type (the key holds the type too).
        if let Some(v) = held.as_ref().and_then(|w| w.upgrade()).filter(|v| (**v).type_id() == ty) {
            return Ok((v, false));
        }
        let v = make()?;
        *held = Some(Arc::downgrade(&v));
        Ok((v, true))
    }

    /// Values some session still holds.
    pub(crate) fn live(&self) -> usize {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.values().filter(|s| s.lock().is_ok_and(|v| v.as_ref().is_some_and(|w| w.strong_count() > 0))).count()
    }
}

/// Per-session backend state. Owned by exactly one session; never thread-local,
/// and cache keys are tensor identities, never data addresses. Prepared constants
/// come from the model's [`SharedConstants`] when the session has them, so
/// sessions of one model hold one copy.
#[derive(Default)]
pub struct BackendContext {
    /// Worker threads the session asked for.
    pub threads: usize,
    packed: HashMap<PackKey, Arc<dyn std::any::Any + Send + Sync>>,
    /// Tensors packed by the build in progress (see [`BackendContext::packed`]).
    packed_by_current_build: Vec<usize>,
    /// The session's worker threads (absent for one thread). Shared by every
    /// subgraph and kernel of the session; joined when the session is dropped.
    pool: Option<Arc<ferrite_kernels::parallel::ThreadPool>>,
    /// The session's resource variables.
    pub variables: crate::variables::Variables,
    /// Prepare phases recorded for the session's trace (None while not tracing).
    pub(crate) phases: Option<Vec<crate::observe::PhaseSpan>>,
    /// The model's shared constants (None: this context keeps its own).
    pub(crate) shared: Option<Arc<SharedConstants>>,
    /// True while compiling a subgraph whose inputs include constants its caller
    /// passed: values there depend on the call site, so they stay private.
    pub(crate) private_now: bool,
    /// Why backends earlier in the list refused ops that a later one took:
    /// (subgraph, op, refusing backend, reason), for `inspect --backends`.
    pub(crate) refusals: Vec<(usize, usize, &'static str, String)>,
    /// The block buffers of the session's int8 GEMM convolutions: they run one at
    /// a time, so they take turns with one set grown to the largest instead of
    /// holding one each (a MobileNet's 35 sets were 1.3 MB).
    pub(crate) conv_buffers: Arc<std::sync::Mutex<ferrite_kernels::qgemm::ConvBuffers>>,
    /// The GPU device and the ops built for it, awaiting their segments.
    #[cfg(feature = "gpu")]
    pub(crate) gpu: gpu::GpuContext,
    /// State ops carry from run to run, by (subgraph, op): random ops' streams (see
    /// [`BackendContext::op_state`]).
    op_states: HashMap<(usize, usize), Arc<dyn std::any::Any + Send + Sync>>,
    /// Byte sizes of the STRING outputs of the op being built at run time. A
    /// string tensor's size is its data's, so ops producing strings run only in
    /// the dynamic tail: it sets this to `Some(empty)` before each build, a string
    /// builder (which sees its inputs' values there) pushes each STRING output's
    /// byte size, and the tail allocates them so. `None` at prepare: a string
    /// builder then answers `Error::DataDependent`.
    pub(crate) string_sizes: Option<Vec<usize>>,
    /// The session's hash tables (HASHTABLE ops), shared with the kernels that use them.
    pub(crate) tables: Arc<std::sync::Mutex<crate::tables::Tables>>,
}

impl std::fmt::Debug for BackendContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendContext").field("threads", &self.threads).field("packed", &self.packed.len()).field("shared", &self.shared.is_some()).finish()
    }
}

impl BackendContext {
    /// A context for `threads` worker threads.
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let pool = (threads > 1).then(|| Arc::new(ferrite_kernels::parallel::ThreadPool::new(threads)));
        BackendContext {
            threads,
            packed: HashMap::new(),
            packed_by_current_build: Vec::new(),
            pool,
            variables: Default::default(),
            phases: None,
            shared: None,
            private_now: false,
            refusals: Vec::new(),
            conv_buffers: Default::default(),
            #[cfg(feature = "gpu")]
            gpu: Default::default(),
            op_states: HashMap::new(),
            string_sizes: None,
            tables: Default::default(),
        }
    }

    /// The state op `op` of `subgraph` keeps across this session's runs, made by
    /// `make` the first time. Kept here rather than in the kernel because an op whose
    /// shapes come from values is built again at every run, and its state (a random
    /// stream) must carry on. Cleared by [`BackendContext::reset_op_states`] when the
    /// session compiles again, as LiteRT re-prepares its ops (and reseeds them) then.
    pub fn op_state<T: Send + Sync + 'static>(&mut self, subgraph: usize, op: usize, make: impl FnOnce() -> T) -> Arc<T> {
        if let Some(s) = self.op_states.get(&(subgraph, op)).and_then(|s| s.clone().downcast::<T>().ok()) {
            return s;
        }
        let s = Arc::new(make());
        self.op_states.insert((subgraph, op), s.clone());
        s
    }

    /// Forgets every op's state (a new compilation of the session).
    pub(crate) fn reset_op_states(&mut self) {
        self.op_states.clear();
    }

    /// Returns the cached packing for `key`, computing it once.
    ///
    /// Contract: a kernel built with a packing of its constant inputs (`key.tensor`
    /// and `key.with`) reads only the packing at run time, never those inputs; the
    /// compiler then drops the step's references to them, so their memory can be
    /// released.
    pub fn packed<T: Send + Sync + 'static>(&mut self, key: PackKey, make: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        let mut make = Some(make);
        downcast(self.packed_erased(key, std::any::TypeId::of::<T>(), &mut || make_erased(&mut make))?)
    }

    /// [`BackendContext::packed`] on erased values (compiled once for every type).
    fn packed_erased(&mut self, key: PackKey, ty: std::any::TypeId, make: &mut dyn FnMut() -> Result<AnyValue>) -> Result<AnyValue> {
        self.packed_by_current_build.push(key.tensor);
        self.packed_by_current_build.extend(key.with);
        if let Some(p) = self.packed.get(&key).filter(|p| (***p).type_id() == ty) {
            return Ok(p.clone());
        }
        let p = self.prepared_erased(key, ty, "pack weights", make)?;
        self.packed.insert(key, p.clone());
        Ok(p)
    }

    /// A constant prepared once for all sessions of the model (from the shared cache
    /// when another session holds it), else for this session alone. Unlike
    /// [`BackendContext::packed`] the session keeps no reference of its own: the
    /// caller's holds it, and it is freed when that goes (a folded constant that
    /// nothing reads any more).
    pub(crate) fn prepared<T: Send + Sync + 'static>(&mut self, key: PackKey, phase: &'static str, make: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        let mut make = Some(make);
        downcast(self.prepared_erased(key, std::any::TypeId::of::<T>(), phase, &mut || make_erased(&mut make))?)
    }

    /// [`BackendContext::prepared`] on erased values.
    fn prepared_erased(&mut self, key: PackKey, ty: std::any::TypeId, phase: &'static str, make: &mut dyn FnMut() -> Result<AnyValue>) -> Result<AnyValue> {
        let started = self.phases.is_some().then(std::time::Instant::now);
        let (p, made) = match self.shared.as_ref().filter(|_| !self.private_now) {
            Some(shared) => shared.get_or_make(key, ty, make)?,
            None => (make()?, true),
        };
        if let Some(start) = started.filter(|_| made) {
            self.record_phase(phase.into(), &[("subgraph", key.subgraph), ("tensor", key.tensor)], start);
        }
        Ok(p)
    }

    /// Runs `f` as a prepare phase of the trace called `name`, recorded when `keep`
    /// says its result is worth a slice (a pass that took the op). Not tracing: `f`
    /// alone, no clock read.
    pub(crate) fn phase<T>(&mut self, name: &'static str, args: &[(&'static str, usize)], f: impl FnOnce(&mut Self) -> T, keep: impl FnOnce(&T) -> bool) -> T {
        let started = self.phases.is_some().then(std::time::Instant::now);
        let r = f(self);
        if let Some(start) = started.filter(|_| keep(&r)) {
            self.record_phase(name.into(), args, start);
        }
        r
    }

    /// Records a prepare phase from `start` to now, while tracing.
    pub(crate) fn record_phase(&mut self, name: std::borrow::Cow<'static, str>, args: &[(&'static str, usize)], start: std::time::Instant) {
        if let Some(p) = self.phases.as_mut() {
            p.push(crate::observe::PhaseSpan { name, args: args.iter().copied().collect(), start, end: std::time::Instant::now() });
        }
    }

    /// Tensors packed since the last call (by the op just built), and forgets them.
    pub fn take_packed_by_build(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.packed_by_current_build)
    }

    /// The session's thread pool, for kernels to split large work over.
    pub fn pool(&self) -> Option<Arc<ferrite_kernels::parallel::ThreadPool>> {
        self.pool.clone()
    }

    /// Number of cached packings.
    pub fn packed_count(&self) -> usize {
        self.packed.len()
    }
}

/// A source of kernels.
pub trait Backend: Send + Sync {
    /// Backend name for reports.
    fn name(&self) -> &'static str;
    /// Builds the op, or returns [`Error::Unsupported`] so another backend may try.
    fn build(&self, op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built>;
    /// Where the backend's kernels read and write tensors. Ops of backends with the
    /// same memory exchange tensors in place; the compiler plans a copy between
    /// different memories.
    fn memory(&self) -> select::Memory {
        select::Memory::Host
    }
    /// Whether the kernel this backend built for `op` applies the element-wise
    /// epilogue the compiler offers in [`OpContext`] (activations, PRELU, a residual
    /// ADD after a convolution). Declaring it lets the compiler fold those ops into
    /// the kernel; the default, `false`, runs them as steps of their own.
    fn applies_epilogues(&self, _op: &OpContext<'_>) -> bool {
        false
    }
    /// Whether this backend has its own kernel for the custom op `name`. Such a
    /// backend, when listed, is offered the op before the custom-op registry (the
    /// GPU's `Convolution2DTransposeBias`); the default, `false`, leaves custom ops
    /// to the registry.
    fn builds_custom(&self, _name: &str) -> bool {
        false
    }
}

impl std::fmt::Debug for dyn Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({})", self.name())
    }
}

/// A user-registered custom op: shape function plus kernel.
pub trait CustomOp: Send + Sync {
    /// Builds the op for the given inputs (shapes, dtypes, constant values).
    fn build(&self, op: &OpContext<'_>) -> Result<Built>;

    /// Builds the op with the session's thread pool (None with one thread), for a
    /// kernel that splits its work over it. The session calls this one; the default
    /// ignores the pool and calls [`CustomOp::build`].
    fn build_with_pool(&self, op: &OpContext<'_>, pool: Option<Arc<crate::ext::ThreadPool>>) -> Result<Built> {
        let _ = pool;
        self.build(op)
    }
}

/// Registry of custom ops by name, shared by sessions.
#[derive(Clone, Default)]
pub struct CustomOpRegistry {
    ops: HashMap<String, Arc<dyn CustomOp>>,
}

impl std::fmt::Debug for CustomOpRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.ops.keys()).finish()
    }
}

/// The custom ops [`CustomOpRegistry::with_builtins`] registers (feature `op-custom`).
pub const BUILTIN_CUSTOM_OPS: &[&str] =
    &["Convolution2DTransposeBias", "TFLite_Detection_PostProcess", "Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks"];

impl CustomOpRegistry {
    /// The registry with ferrite's built-in custom ops (MediaPipe's
    /// `Convolution2DTransposeBias` and its landmark ops `Landmarks2TransformMatrix`,
    /// `TransformTensorBilinear`, `TransformLandmarks`; LiteRT's
    /// `TFLite_Detection_PostProcess`; [`BUILTIN_CUSTOM_OPS`]), when the build has
    /// the `op-custom` feature.
    pub fn with_builtins() -> Self {
        #[cfg_attr(not(feature = "op-custom"), allow(unused_mut))]
        let mut r = CustomOpRegistry::default();
        #[cfg(feature = "op-custom")]
        {
            r.register("Convolution2DTransposeBias", Arc::new(custom_builtin::TransposeConvBias));
            r.register("TFLite_Detection_PostProcess", Arc::new(custom_builtin::DetectionPostProcess));
            r.register("Landmarks2TransformMatrix", Arc::new(custom_mediapipe::Landmarks2TransformMatrix));
            r.register("TransformTensorBilinear", Arc::new(custom_mediapipe::TransformTensorBilinear));
            r.register("TransformLandmarks", Arc::new(custom_mediapipe::TransformLandmarks));
        }
        r
    }
    /// Registers (or replaces) a custom op.
    pub fn register(&mut self, name: &str, op: Arc<dyn CustomOp>) {
        self.ops.insert(name.to_string(), op);
    }
    /// Looks up a custom op.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn CustomOp>> {
        self.ops.get(name)
    }
}

/// Views bytes as `T` elements; fails instead of panicking on bad alignment or length.
#[inline]
pub fn typed<T: bytemuck::Pod>(b: &[u8]) -> Result<&[T]> {
    bytemuck::try_cast_slice(b).map_err(|e| Error::Runtime(format!("tensor data cannot be viewed as {}: {e:?}", std::any::type_name::<T>()).into()))
}

/// Mutable variant of [`typed`].
#[inline]
pub fn typed_mut<T: bytemuck::Pod>(b: &mut [u8]) -> Result<&mut [T]> {
    bytemuck::try_cast_slice_mut(b).map_err(|e| Error::Runtime(format!("tensor data cannot be viewed as {}: {e:?}", std::any::type_name::<T>()).into()))
}

/// Required input `i` of a running kernel.
#[inline]
pub fn arg<'b>(ins: &[Option<&'b [u8]>], i: usize) -> Result<&'b [u8]> {
    ins.get(i).copied().flatten().ok_or_else(|| Error::Runtime(format!("kernel input {i} is missing").into()))
}
