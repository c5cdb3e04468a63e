//! The model IR: subgraphs of typed tensors and ops with typed parameters,
//! built from the lenient flatbuffer view. Constant data stays in the model
//! bytes (memory-mapped file or caller buffer) and is referenced by range.
//!
//! Everything read from the file is validated here — indices, dimensions,
//! buffer sizes, producer order — so later stages can rely on it.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ferrite_format::schema as fb;
use ferrite_format::Table;

use crate::error::{invalid, Error, Location, Result};
use crate::ops::parse_params;
pub use crate::ops::{Activation, OpParams, Padding};
/// The coverage report: every builtin of the schema per element type.
pub use ferrite_format::coverage;
pub use ferrite_format::ops::{markdown_table as op_table_markdown, Arity, BuiltinOp, Types, MANY};
pub use ferrite_format::FileKind;

/// Largest tensor rank accepted from a file.
pub const MAX_RANK: usize = 16;
/// Largest element count of a single tensor accepted from a file (2^40).
pub const MAX_ELEMENTS: u64 = 1 << 40;

/// Element types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum DType {
    F32,
    F16,
    F64,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    Bool,
    String,
    Complex64,
    Complex128,
    Resource,
    Variant,
    Int4,
    /// circle only.
    Uint4,
    /// circle only: GGML block-quantized types, reported but not executed.
    Ggml(i8),
}

impl DType {
    /// Decodes a file's tensor type code; circle adds negative codes.
    pub fn from_code(code: i8, kind: FileKind) -> Option<DType> {
        Some(match code {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::I32,
            3 => DType::U8,
            4 => DType::I64,
            5 => DType::String,
            6 => DType::Bool,
            7 => DType::I16,
            8 => DType::Complex64,
            9 => DType::I8,
            10 => DType::F64,
            11 => DType::Complex128,
            12 => DType::U64,
            13 => DType::Resource,
            14 => DType::Variant,
            15 => DType::U32,
            16 => DType::U16,
            17 => DType::Int4,
            -1 if kind == FileKind::Circle => DType::Uint4,
            -5..=-2 if kind == FileKind::Circle => DType::Ggml(code),
            _ => return None,
        })
    }

    /// Bytes per element, or `None` for types without a fixed size.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::I16 | DType::U16 => 2,
            DType::F64 | DType::I64 | DType::U64 | DType::Complex64 => 8,
            DType::Complex128 => 16,
            DType::I8 | DType::U8 | DType::Bool => 1,
            // A resource tensor holds the session's id of its variable.
            DType::Resource => 4,
            _ => return None,
        })
    }

    /// Lower-case name as numpy spells it where it can.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::F64 => "float64",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::I16 => "int16",
            DType::U16 => "uint16",
            DType::I32 => "int32",
            DType::U32 => "uint32",
            DType::I64 => "int64",
            DType::U64 => "uint64",
            DType::Bool => "bool",
            DType::String => "string",
            DType::Complex64 => "complex64",
            DType::Complex128 => "complex128",
            DType::Resource => "resource",
            DType::Variant => "variant",
            DType::Int4 => "int4",
            DType::Uint4 => "uint4",
            DType::Ggml(_) => "ggml",
        }
    }
}

/// Affine quantization: `real = scale * (q - zero_point)`, per tensor or along `axis`.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantization {
    /// Scales (one, or one per channel of `axis`).
    pub scale: Vec<f32>,
    /// Zero points, same length as `scale`.
    pub zero_point: Vec<i64>,
    /// Quantized dimension for per-channel parameters.
    pub axis: usize,
}

/// Index metadata of one traversed dimension of a sparse tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum SparseDim {
    /// Stored densely with this many entries.
    Dense(usize),
    /// CSR: segment offsets and the indices they delimit.
    Csr {
        /// Segment boundaries.
        segments: SparseIndices,
        /// Indices inside this dimension.
        indices: SparseIndices,
    },
}

/// One index array of a sparse tensor (CSR segments or indices), read in place
/// from the bytes it was loaded from at the width the file stores it (uint8,
/// uint16 or int32). Widened to `usize` at load, a sparse model's index arrays
/// took 8 bytes an entry on the heap for the model's whole life (5.5 MB for
/// MediaPipe's pose detector, three times its stored weights) although only
/// DENSIFY reads them, once, at prepare; in place they cost nothing, and the file
/// pages they occupy are given back once the tensor is densified.
#[derive(Clone)]
pub struct SparseIndices {
    bytes: ModelBytes,
    /// Where the first entry lies in `bytes`.
    start: usize,
    len: usize,
    width: IndexWidth,
}

/// How a [`SparseIndices`] array stores its entries (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexWidth {
    U8,
    U16,
    /// int32 in the file; checked non-negative at load.
    I32,
    /// u64, for arrays built in memory ([`SparseIndices::from_values`]).
    U64,
}

impl IndexWidth {
    fn bytes(self) -> usize {
        match self {
            IndexWidth::U8 => 1,
            IndexWidth::U16 => 2,
            IndexWidth::I32 => 4,
            IndexWidth::U64 => 8,
        }
    }
}

impl SparseIndices {
    /// An array holding `values` in memory of its own (for descriptions built in
    /// code rather than read from a file).
    pub fn from_values(values: &[usize]) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|&v| (v as u64).to_le_bytes()).collect();
        SparseIndices { bytes: Arc::new(bytes), start: 0, len: values.len(), width: IndexWidth::U64 }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the array has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entry `i`, or `None` past the end (or, for an array built in memory on a
    /// 32-bit target, a value that does not fit a `usize`).
    #[inline]
    pub fn get(&self, i: usize) -> Option<usize> {
        if i >= self.len {
            return None;
        }
        // start + len x width lies inside the bytes (checked when the array was
        // made), so for i < len this neither overflows nor leaves them.
        let w = self.width.bytes();
        let at = self.start + i * w;
        let b = (*self.bytes).as_ref().get(at..at + w)?;
        match self.width {
            IndexWidth::U8 => Some(usize::from(b[0])),
            IndexWidth::U16 => Some(usize::from(u16::from_le_bytes([b[0], b[1]]))),
            IndexWidth::I32 => usize::try_from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok(),
            IndexWidth::U64 => usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok(),
        }
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len).map_while(|i| self.get(i))
    }

    /// The entries collected into a vector.
    pub fn to_vec(&self) -> Vec<usize> {
        self.iter().collect()
    }

    /// The bytes the entries occupy in `file` when this array is read from it
    /// (`file` is the buffer it was loaded from), for giving their pages back.
    pub(crate) fn range_in(&self, file: &[u8]) -> Option<Range<usize>> {
        let own = (*self.bytes).as_ref();
        (std::ptr::eq(own.as_ptr(), file.as_ptr()) && own.len() == file.len()).then(|| self.start..self.start + self.len * self.width.bytes())
    }
}

impl PartialEq for SparseIndices {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for SparseIndices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Sparsity description of a constant tensor (TACO-style).
#[derive(Debug, Clone, PartialEq)]
pub struct Sparsity {
    /// Traversal order of the (original + block) dimensions.
    pub traversal_order: Vec<usize>,
    /// Original dimension of each block dimension.
    pub block_map: Vec<usize>,
    /// Per traversed dimension metadata.
    pub dims: Vec<SparseDim>,
}

impl Sparsity {
    /// The bytes of `file` (the buffer the model was loaded from) that hold this
    /// description's index arrays.
    pub(crate) fn index_ranges_in<'a>(&'a self, file: &'a [u8]) -> impl Iterator<Item = Range<usize>> + 'a {
        self.dims
            .iter()
            .flat_map(move |d| match d {
                SparseDim::Csr { segments, indices } => [segments.range_in(file), indices.range_in(file)],
                SparseDim::Dense(_) => [None, None],
            })
            .flatten()
    }
}

/// A tensor's static description.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// Name from the file.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape as stored (unknown dims are usually 1 here).
    pub shape: Vec<usize>,
    /// Shape with -1 for dims unknown until run time (equals `shape` if absent).
    pub shape_signature: Vec<i64>,
    /// Quantization parameters, if any.
    pub quant: Option<Quantization>,
    /// Constant data as a byte range into the model bytes.
    pub data: Option<Range<usize>>,
    /// Sparse encoding of `data`, if any.
    pub sparsity: Option<Sparsity>,
    /// Variable tensors persist across runs (stateful ops).
    pub is_variable: bool,
}

impl TensorInfo {
    /// Element count of the stored shape.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// True when the tensor holds constant data.
    pub fn is_const(&self) -> bool {
        self.data.is_some()
    }
}

/// What an op is.
#[derive(Debug, Clone, PartialEq)]
pub enum OpCode {
    /// A builtin op of ferrite's op table.
    Builtin(BuiltinOp),
    /// A builtin code ferrite has no table line for (a newer builtin, or a circle
    /// extension with a negative code): loads, is listed by `inspect`, and is
    /// refused by `prepare` as unsupported.
    Other(i32),
    /// A custom op by name.
    Custom(String),
}

impl OpCode {
    /// Human-readable name (`CONV_2D`, circle's `INSTANCE_NORM`, or the custom name).
    pub fn name(&self) -> String {
        match self {
            OpCode::Custom(n) => n.clone(),
            OpCode::Builtin(op) => op.name().to_string(),
            OpCode::Other(c) => match *c {
                -2 => "INSTANCE_NORM".into(),
                -3 => "BCQ_FULLY_CONNECTED".into(),
                -4 => "BCQ_GATHER".into(),
                -5 => "GRU".into(),
                -6 => "RMS_NORM".into(),
                c => fb::BuiltinOperator(c).variant_name().map(str::to_string).unwrap_or_else(|| format!("BUILTIN_{c}")),
            },
        }
    }

    /// The table op, for builtins ferrite knows.
    pub fn builtin(&self) -> Option<BuiltinOp> {
        match self {
            OpCode::Builtin(op) => Some(*op),
            _ => None,
        }
    }
}

/// One operation of a subgraph.
#[derive(Debug, Clone)]
pub struct Op {
    /// What the op is.
    pub code: OpCode,
    /// Op version from the file.
    pub version: i32,
    /// Input tensor indices; `None` marks an omitted optional input.
    pub inputs: Vec<Option<usize>>,
    /// Output tensor indices.
    pub outputs: Vec<usize>,
    /// Typed builtin parameters.
    pub params: OpParams,
    /// Custom options bytes as a range into the model bytes.
    pub custom_options: Option<Range<usize>>,
}

/// A subgraph: tensors and ops in execution order.
#[derive(Debug, Clone)]
pub struct Subgraph {
    /// Name from the file.
    pub name: String,
    /// Tensors.
    pub tensors: Vec<TensorInfo>,
    /// Ops in execution order.
    pub ops: Vec<Op>,
    /// Input tensor indices.
    pub inputs: Vec<usize>,
    /// Output tensor indices.
    pub outputs: Vec<usize>,
}

/// A signature: named entry point into a subgraph.
#[derive(Debug, Clone)]
pub struct Signature {
    /// Signature key.
    pub key: String,
    /// Subgraph it runs.
    pub subgraph: usize,
    /// (name, tensor index) of inputs.
    pub inputs: Vec<(String, usize)>,
    /// (name, tensor index) of outputs.
    pub outputs: Vec<(String, usize)>,
}

/// Owner of model bytes: a memory map, or any caller-provided byte container.
pub type ModelBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

struct Mapped(memmap2::Mmap);
impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Mapped {
    /// Drops the resident pages lying wholly inside `range` of the map (pages it
    /// shares with a neighbouring tensor stay).
    #[cfg(unix)]
    fn release(&self, range: Range<usize>) {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0);
        if page == 0 || range.end > self.0.len() {
            return;
        }
        let base = self.0.as_ptr() as usize;
        let start = (base + range.start).next_multiple_of(page) - base;
        let end = (base + range.end) / page * page;
        let end = end.saturating_sub(base);
        if end > start {
            // SAFETY: a read-only file mapping is never written, so MADV_DONTNEED only
            // drops page-table entries: the next read of these bytes faults the same
            // data in again from the file (the map's standing assumption is that the
            // file is not changed underneath it). No byte anyone sees changes. The
            // range is page-aligned, so memmap2 does not widen it.
            let _ = unsafe { self.0.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }

    #[cfg(not(unix))]
    fn release(&self, _range: Range<usize>) {}
}

/// A loaded model: the IR plus the bytes its constants live in. A clone shares the bytes.
///
/// Read-only outside the crate (accessors, no public fields): every index in it
/// was validated at load, and sessions rely on that, so a caller must not be able
/// to edit a loaded model into one that would make them index out of bounds.
#[derive(Clone)]
pub struct Model {
    bytes: ModelBytes,
    /// The same bytes when they are a map of the model file (pages can be given back).
    mapped: Option<Arc<Mapped>>,
    pub(crate) kind: FileKind,
    pub(crate) version: u32,
    pub(crate) description: String,
    pub(crate) subgraphs: Vec<Subgraph>,
    pub(crate) signatures: Vec<Signature>,
    /// When parsing started and ended, for the `parse` slice of a session's trace.
    #[cfg_attr(not(feature = "observe"), allow(dead_code))]
    pub(crate) parse_span: (std::time::Instant, std::time::Instant),
    /// The constants its sessions share (prepacked weights, converted and folded
    /// constants), held weakly: the sessions own it, and it goes with the last one.
    shared: SharedSlot,
    /// The scratch pool its sessions may share ([`Model::shared_arena`]), held weakly.
    arena: ArenaSlot,
}

/// A model's link to the scratch pool of its sessions; a clone starts with none.
#[derive(Default)]
struct ArenaSlot(std::sync::Mutex<crate::shared_arena::WeakArena>);

impl Clone for ArenaSlot {
    fn clone(&self) -> Self {
        ArenaSlot::default()
    }
}

/// A model's link to its sessions' shared constants. A clone of a model starts
/// with none of its own: the crate may edit a clone (more outputs, trained
/// weights), so its tensor identities must not find the original's values.
#[derive(Default)]
struct SharedSlot(std::sync::Mutex<std::sync::Weak<crate::backend::SharedConstants>>);

impl Clone for SharedSlot {
    fn clone(&self) -> Self {
        SharedSlot::default()
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("kind", &self.kind).field("subgraphs", &self.subgraphs.len()).finish()
    }
}

impl Model {
    /// Memory-maps and loads a model file. Constants are used in place from the map.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.display().to_string(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; like every mmap-based loader we assume the file
        // is not truncated by another process while the model is alive.
        let map = Arc::new(Mapped(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?));
        let mut m = Model::from_bytes(map.clone())?;
        m.mapped = Some(map);
        Ok(m)
    }

    /// Loads a model from caller-owned bytes without copying them.
    pub fn from_bytes(bytes: ModelBytes) -> Result<Model> {
        let started = std::time::Instant::now();
        let (kind, version, description, subgraphs, signatures) = parse(&bytes)?;
        Ok(Model {
            bytes,
            kind,
            version,
            description,
            subgraphs,
            signatures,
            parse_span: (started, std::time::Instant::now()),
            shared: SharedSlot::default(),
            arena: ArenaSlot::default(),
            mapped: None,
        })
    }

    /// The cache of constants shared by this model's sessions: the live one, or a
    /// new one when no session holds it.
    pub(crate) fn shared_constants(&self) -> Arc<crate::backend::SharedConstants> {
        let mut slot = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.upgrade().unwrap_or_else(|| {
            let fresh = Arc::new(crate::backend::SharedConstants::default());
            *slot = Arc::downgrade(&fresh);
            fresh
        })
    }

    /// The pool of scratch arenas for this model's sessions: give it to each session in
    /// [`SessionOptions::shared_arena`](crate::SessionOptions::shared_arena) and their
    /// intermediate tensors live in memory borrowed only while a session runs, so
    /// sessions that do not run at the same time use one arena. The model holds the
    /// pool weakly: it goes with the last session (or handle) using it.
    pub fn shared_arena(&self) -> crate::SharedArena {
        let mut slot = self.arena.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.upgrade().unwrap_or_else(|| {
            let fresh = crate::SharedArena::new();
            *slot = fresh.downgrade();
            fresh
        })
    }

    /// Prepared constants (prepacked weights, converted and folded constants) that
    /// this model's sessions share now. 0 once the last session using them is gone:
    /// they are freed with it, even while the model stays loaded.
    pub fn shared_constant_count(&self) -> usize {
        let slot = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.upgrade().map_or(0, |c| c.live())
    }

    /// Gives back the resident pages of the memory-mapped file that lie wholly inside
    /// `range` (a constant a kernel has repacked and no longer reads): they count in
    /// the process's RSS until released. Reading them later faults them in again from
    /// the file, so this is safe whoever reads them; models loaded from caller bytes
    /// are left alone (those pages are the caller's memory).
    pub(crate) fn release_pages(&self, range: Range<usize>) {
        if let Some(m) = self.mapped.as_ref() {
            m.release(range);
        }
    }

    /// File flavour (TensorFlow Lite or circle).
    pub fn kind(&self) -> FileKind {
        self.kind
    }

    /// The schema version field.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The description string.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Subgraphs; 0 is the entry point.
    pub fn subgraphs(&self) -> &[Subgraph] {
        &self.subgraphs
    }

    /// Signatures (named entry points).
    pub fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    /// The whole model file.
    pub fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    /// Constant data of a tensor, if it has any.
    pub fn const_data(&self, t: &TensorInfo) -> Option<&[u8]> {
        t.data.as_ref().and_then(|r| self.bytes().get(r.clone()))
    }

    /// Custom options bytes of an op.
    pub fn custom_options(&self, op: &Op) -> &[u8] {
        op.custom_options.as_ref().and_then(|r| self.bytes().get(r.clone())).unwrap_or(&[])
    }
}

type Parsed = (FileKind, u32, String, Vec<Subgraph>, Vec<Signature>);

fn idx(v: i64, len: usize, what: impl Fn() -> String) -> Result<usize> {
    if v < 0 || v as u64 >= len as u64 {
        return Err(invalid(format!("{}: index {v} out of range (0..{len})", what())));
    }
    Ok(v as usize)
}

/// Parses the model in `file` (sparse tensors' index arrays keep a handle on it
/// and are read in place).
fn parse(file: &ModelBytes) -> Result<Parsed> {
    let data = (**file).as_ref();
    let (kind, root) = ferrite_format::open(data)?;
    let version = root.scalar::<u32>(fb::Model::VT_VERSION, 0)?;
    let description = root.string(fb::Model::VT_DESCRIPTION)?.unwrap_or_default();

    // Buffers: resolve each to a byte range in the file (inline data or offset/size).
    let fb_buffers = root.tables(fb::Model::VT_BUFFERS)?;
    let mut buffers: Vec<Option<Range<usize>>> = Vec::with_capacity(fb_buffers.len().min(1 << 20));
    for (i, b) in fb_buffers.iter().enumerate() {
        let b = b?;
        let inline = b.bytes(fb::Buffer::VT_DATA)?;
        let offset = b.scalar::<u64>(fb::Buffer::VT_OFFSET, 0)?;
        let size = b.scalar::<u64>(fb::Buffer::VT_SIZE, 0)?;
        let range = match inline {
            Some((start, bytes)) if !bytes.is_empty() => Some(start..start + bytes.len()),
            // Offsets 0 and 1 are the format's "not used" markers.
            _ if offset > 1 => {
                let end = offset
                    .checked_add(size)
                    .filter(|&e| e <= data.len() as u64)
                    .ok_or_else(|| invalid(format!("buffer {i}: offset {offset} + size {size} lies outside the file ({} bytes)", data.len())))?;
                Some(offset as usize..end as usize)
            }
            _ => None,
        };
        buffers.push(range);
    }

    // Operator codes: the extended field wins unless the old byte field is larger.
    let mut codes = Vec::new();
    for (i, c) in root.tables(fb::Model::VT_OPERATOR_CODES)?.iter().enumerate() {
        let c = c?;
        let dep = i32::from(c.scalar::<i8>(fb::OperatorCode::VT_DEPRECATED_BUILTIN_CODE, 0)?);
        let ext = c.scalar::<i32>(fb::OperatorCode::VT_BUILTIN_CODE, 0)?;
        let code = if kind == FileKind::Circle && ext < 0 { ext } else { dep.max(ext) };
        let version = c.scalar::<i32>(fb::OperatorCode::VT_VERSION, 1)?;
        let op = if code == fb::BuiltinOperator::CUSTOM.0 {
            let name = c.string(fb::OperatorCode::VT_CUSTOM_CODE)?.ok_or_else(|| invalid(format!("operator code {i}: CUSTOM without a custom_code name")))?;
            OpCode::Custom(name)
        } else {
            BuiltinOp::from_code(code).map_or(OpCode::Other(code), OpCode::Builtin)
        };
        codes.push((op, version));
    }

    let fb_subgraphs = root.tables(fb::Model::VT_SUBGRAPHS)?;
    if fb_subgraphs.is_empty() {
        return Err(invalid("model has no subgraphs"));
    }
    let mut subgraphs = Vec::with_capacity(fb_subgraphs.len().min(1 << 16));
    for (si, sg) in fb_subgraphs.iter().enumerate() {
        subgraphs.push(parse_subgraph(file, kind, si, sg?, &buffers, &codes)?);
    }
    if READS_HLO_OPTIONS {
        crate::ops_hlo::resolve_bodies(&mut subgraphs);
    }

    let mut signatures = Vec::new();
    for (i, s) in root.tables(fb::Model::VT_SIGNATURE_DEFS)?.iter().enumerate() {
        let s = s?;
        let key = s.string(fb::SignatureDef::VT_SIGNATURE_KEY)?.unwrap_or_else(|| format!("signature_{i}"));
        let sub = s.scalar::<u32>(fb::SignatureDef::VT_SUBGRAPH_INDEX, 0)? as usize;
        let sg = subgraphs.get(sub).ok_or_else(|| invalid(format!("signature {i} ('{key}'): subgraph {sub} does not exist")))?;
        let maps = |slot| -> Result<Vec<(String, usize)>> {
            let mut v = Vec::new();
            for m in s.tables(slot)?.iter() {
                let m = m?;
                let name = m.string(fb::TensorMap::VT_NAME)?.unwrap_or_default();
                let t = m.scalar::<u32>(fb::TensorMap::VT_TENSOR_INDEX, 0)? as i64;
                v.push((name.clone(), idx(t, sg.tensors.len(), || format!("signature '{key}' tensor '{name}'"))?));
            }
            Ok(v)
        };
        signatures.push(Signature {
            key: key.clone(),
            subgraph: sub,
            inputs: maps(fb::SignatureDef::VT_INPUTS)?,
            outputs: maps(fb::SignatureDef::VT_OUTPUTS)?,
        });
    }
    Ok((kind, version, description, subgraphs, signatures))
}

fn parse_subgraph(file: &ModelBytes, kind: FileKind, si: usize, sg: Table<'_>, buffers: &[Option<Range<usize>>], codes: &[(OpCode, i32)]) -> Result<Subgraph> {
    let data = (**file).as_ref();
    let name = sg.string(fb::SubGraph::VT_NAME)?.unwrap_or_default();
    let fb_tensors = sg.tables(fb::SubGraph::VT_TENSORS)?;
    let mut tensors = Vec::with_capacity(fb_tensors.len().min(1 << 20));
    for (ti, t) in fb_tensors.iter().enumerate() {
        let info = parse_tensor(file, kind, t?, buffers).map_err(|e| e.located(Location::tensor(si, ti)))?;
        check_string_constant(data, &info).map_err(|e| e.located(Location::tensor(si, ti)))?;
        tensors.push(info);
    }
    let n = tensors.len();
    let io = |slot, what: &str| -> Result<Vec<usize>> {
        sg.vec_of::<i32>(slot)?.into_iter().map(|v| idx(i64::from(v), n, || format!("subgraph {si} {what}"))).collect()
    };
    let inputs = io(fb::SubGraph::VT_INPUTS, "input")?;
    let outputs = io(fb::SubGraph::VT_OUTPUTS, "output")?;

    let mut ops = Vec::new();
    for (oi, o) in sg.tables(fb::SubGraph::VT_OPERATORS)?.iter().enumerate() {
        let o = o?;
        let ci = o.scalar::<u32>(fb::Operator::VT_OPCODE_INDEX, 0)? as i64;
        let mut op = parse_op(data, o, n, codes).map_err(|e| {
            // The op's name when its code resolves, for the error location.
            let op_name = usize::try_from(ci).ok().and_then(|c| codes.get(c)).map(|(c, _)| c.name());
            e.located(Location { subgraph: Some(si), op: Some(oi), op_name, tensor: None })
        })?;
        // Recurrent ops keep the quantization of their intermediate tensors (the
        // integer LSTM's gate and hidden scales); other ops ignore them, as LiteRT does.
        if let OpParams::Recurrent(p) = &mut op.params {
            let listed = o.vec_of::<i32>(fb::Operator::VT_INTERMEDIATES)?;
            p.intermediates.count = listed.len();
            for (slot, &t) in p.intermediates.quant.iter_mut().zip(&listed) {
                let t = idx(i64::from(t), n, || "intermediate".into())
                    .map_err(|e| e.located(Location { subgraph: Some(si), op: Some(oi), op_name: None, tensor: None }))?;
                *slot = tensors[t].quant.as_ref().and_then(|q| Some((*q.scale.first()?, *q.zero_point.first()?)));
            }
        }
        ops.push(op);
    }
    let sg = Subgraph { name, tensors, ops, inputs, outputs };
    check_dataflow(si, &sg)?;
    Ok(sg)
}

/// One operator; errors are located by the caller.
fn parse_op(data: &[u8], o: Table<'_>, n: usize, codes: &[(OpCode, i32)]) -> Result<Op> {
    let ci = o.scalar::<u32>(fb::Operator::VT_OPCODE_INDEX, 0)? as i64;
    let (code, version) = codes.get(idx(ci, codes.len(), || "opcode_index".into())?).cloned().ok_or_else(|| invalid("opcode_index out of range"))?;
    let mut op_inputs = Vec::new();
    for v in o.vec_of::<i32>(fb::Operator::VT_INPUTS)? {
        op_inputs.push(if v < 0 { None } else { Some(idx(i64::from(v), n, || "input".into())?) });
    }
    let op_outputs = o.vec_of::<i32>(fb::Operator::VT_OUTPUTS)?.into_iter().map(|v| idx(i64::from(v), n, || "output".into())).collect::<Result<Vec<_>>>()?;
    if let OpCode::Builtin(b) = code {
        check_arity(b, &op_inputs, &op_outputs).map_err(invalid)?;
    }
    let opt_type = o.scalar::<u8>(fb::Operator::VT_BUILTIN_OPTIONS_TYPE, 0)?;
    let options = o.table(fb::Operator::VT_BUILTIN_OPTIONS)?;
    let mut params = match &code {
        OpCode::Builtin(b) => parse_params(*b, opt_type, options)?,
        OpCode::Other(_) | OpCode::Custom(_) => OpParams::None,
    };
    if let (OpCode::Builtin(b), true) = (&code, READS_HLO_OPTIONS) {
        if let Some(hlo) = crate::ops_hlo::parse(*b, o)? {
            params = OpParams::Hlo(hlo);
        }
    }
    let mut custom_options = o.bytes(fb::Operator::VT_CUSTOM_OPTIONS)?.map(|(s, b)| s..s + b.len());
    let large_off = o.scalar::<u64>(fb::Operator::VT_LARGE_CUSTOM_OPTIONS_OFFSET, 0)?;
    let large_size = o.scalar::<u64>(fb::Operator::VT_LARGE_CUSTOM_OPTIONS_SIZE, 0)?;
    if large_off > 1 {
        let end = large_off.checked_add(large_size).filter(|&e| e <= data.len() as u64).ok_or_else(|| invalid("custom options lie outside the file"))?;
        custom_options = Some(large_off as usize..end as usize);
    }
    Ok(Op { code, version, inputs: op_inputs, outputs: op_outputs, params, custom_options })
}

/// Whether a backend of this build reads the StableHLO ops' options (the second
/// options union, `OpParams::Hlo`): the CPU backend's `op-hlo` and `op-random`
/// families and the reference backend. A selective build without them leaves those
/// ops' params `None` (their reader and its tables are not linked); the CPU
/// backend refuses the ops as not built either way.
const READS_HLO_OPTIONS: bool = cfg!(any(feature = "op-hlo", feature = "op-random", feature = "reference"));

/// What is wrong with a quantization scale that is not a positive normal number,
/// in words: the message names it without formatting the float (the one float
/// formatted on the load path would link the float printer into every build).
fn scale_flaw(s: f32) -> &'static str {
    if s.is_nan() {
        "NaN"
    } else if s.is_infinite() {
        "infinite"
    } else if s == 0.0 {
        "zero"
    } else if s < 0.0 {
        "negative"
    } else {
        "subnormal"
    }
}

/// One tensor; errors are located by the caller and name the tensor.
fn parse_tensor(file: &ModelBytes, kind: FileKind, t: Table<'_>, buffers: &[Option<Range<usize>>]) -> Result<TensorInfo> {
    let name = t.string(fb::Tensor::VT_NAME)?.unwrap_or_default();
    let code = t.scalar::<i8>(fb::Tensor::VT_TYPE_, 0)?;
    let dtype = DType::from_code(code, kind).ok_or_else(|| invalid(format!("'{name}': unknown tensor type code {code}")))?;
    let raw_shape = t.vec_of::<i32>(fb::Tensor::VT_SHAPE)?;
    if raw_shape.len() > MAX_RANK {
        return Err(invalid(format!("'{name}': rank {} exceeds {MAX_RANK}", raw_shape.len())));
    }
    let mut numel: u64 = 1;
    // Product of the non-zero dims: an empty tensor with huge other dims ([0, 2^31,
    // 2^31]) holds nothing, but kernels loop over those dims.
    let mut extent: u64 = 1;
    let mut shape = Vec::with_capacity(raw_shape.len());
    for &d in &raw_shape {
        // -1 in `shape` appears in some converter output for dynamic dims; treat it as 1 until resized.
        let d = if d == -1 { 1 } else { d };
        if d < 0 {
            return Err(invalid(format!("'{name}': negative dimension {d} in shape {raw_shape:?}")));
        }
        numel = numel.saturating_mul(d as u64);
        extent = extent.saturating_mul((d as u64).max(1));
        shape.push(d as usize);
    }
    if numel > MAX_ELEMENTS || extent > MAX_ELEMENTS {
        return Err(invalid(format!("'{name}': shape {raw_shape:?} has too many elements")));
    }
    let sig = t.vec_of::<i32>(fb::Tensor::VT_SHAPE_SIGNATURE)?;
    let shape_signature = if sig.len() == shape.len() { sig.iter().map(|&v| i64::from(v)).collect() } else { shape.iter().map(|&v| v as i64).collect() };

    let quant = match t.table(fb::Tensor::VT_QUANTIZATION)? {
        None => None,
        Some(q) => {
            let scale = q.vec_of::<f32>(fb::QuantizationParameters::VT_SCALE)?;
            let zero_point = q.vec_of::<i64>(fb::QuantizationParameters::VT_ZERO_POINT)?;
            let axis = q.scalar::<i32>(fb::QuantizationParameters::VT_QUANTIZED_DIMENSION, 0)?;
            if scale.is_empty() {
                None
            } else {
                if axis < 0 || (axis as usize) >= shape.len().max(1) {
                    return Err(invalid(format!("'{name}': quantized_dimension {axis} out of range for rank {}", shape.len())));
                }
                if zero_point.len() != scale.len() && !zero_point.is_empty() {
                    return Err(invalid(format!("'{name}': {} scales but {} zero points", scale.len(), zero_point.len())));
                }
                // Kernels divide by scales and derive fixed-point multipliers and clamp
                // ranges from them: zero, negative, denormal, NaN and infinite scales have
                // no meaning and must not reach them.
                if let Some((k, bad)) = scale.iter().enumerate().find(|(_, s)| !(s.is_normal() && **s > 0.0)) {
                    return Err(invalid(format!(
                        "'{name}': quantization scale {k} is {} (bits {:#010x}); scales must be finite, positive and normal",
                        scale_flaw(*bad),
                        bad.to_bits()
                    )));
                }
                let zero_point = if zero_point.is_empty() { vec![0; scale.len()] } else { zero_point };
                // Kernels do 32-bit arithmetic on (value - zero point): a zero point
                // outside the element type's range is invalid, as LiteRT's kernels also
                // require, and must not reach them.
                let range = match dtype {
                    DType::I8 => Some(-128..=127),
                    DType::U8 => Some(0..=255),
                    DType::I16 => Some(-32768..=32767),
                    _ => None,
                };
                if let Some(bad) = range.and_then(|r| zero_point.iter().find(|z| !r.contains(*z))) {
                    return Err(invalid(format!("'{name}': zero point {bad} outside the range of {}", dtype.name())));
                }
                Some(Quantization { scale, zero_point, axis: axis as usize })
            }
        }
    };

    let sparsity = match t.table(fb::Tensor::VT_SPARSITY)? {
        None => None,
        Some(s) => Some(parse_sparsity(file, s).map_err(|e| match e {
            Error::InvalidModel(m) => invalid(format!("'{name}' sparsity: {m}")),
            e => e,
        })?),
    };

    let bi = t.scalar::<u32>(fb::Tensor::VT_BUFFER, 0)? as i64;
    let data = if bi == 0 { None } else { buffers.get(idx(bi, buffers.len(), || format!("'{name}' buffer"))?).cloned().flatten() };
    if let (Some(r), Some(size), None) = (&data, dtype.size(), &sparsity) {
        let want = numel.saturating_mul(size as u64);
        if r.len() as u64 != want {
            return Err(invalid(format!("'{name}': buffer holds {} bytes but {} {:?} needs {want}", r.len(), dtype.name(), shape)));
        }
    }
    let is_variable = t.scalar::<bool>(fb::Tensor::VT_IS_VARIABLE, false)?;
    Ok(TensorInfo { name, dtype, shape, shape_signature, quant, data, sparsity, is_variable })
}

/// A constant STRING tensor's buffer is untrusted: its count and offsets are
/// checked (`ferrite_format::strings::parse`) at load, and the count must be the
/// shape's element count, so no later reader trusts a hostile layout.
fn check_string_constant(file: &[u8], t: &TensorInfo) -> Result<()> {
    let (DType::String, Some(r)) = (t.dtype, &t.data) else { return Ok(()) };
    let bytes = file.get(r.clone()).ok_or_else(|| invalid(format!("'{}': string buffer outside the file", t.name)))?;
    let strings = ferrite_format::strings::parse(bytes).map_err(|e| invalid(format!("'{}': {e}", t.name)))?;
    let numel = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if numel != Some(strings.len()) {
        return Err(invalid(format!("'{}': {} strings for shape {:?}", t.name, strings.len(), t.shape)));
    }
    Ok(())
}

fn parse_sparsity(file: &ModelBytes, s: Table<'_>) -> Result<Sparsity> {
    let to_usize = |v: Vec<i32>, what: &str| -> Result<Vec<usize>> {
        v.into_iter().map(|x| usize::try_from(x).map_err(|_| invalid(format!("negative {what} {x}")))).collect()
    };
    let traversal_order = to_usize(s.vec_of::<i32>(fb::SparsityParameters::VT_TRAVERSAL_ORDER)?, "traversal order")?;
    let block_map = to_usize(s.vec_of::<i32>(fb::SparsityParameters::VT_BLOCK_MAP)?, "block map")?;
    if traversal_order.len() > 2 * MAX_RANK {
        return Err(invalid("too many traversal dimensions"));
    }
    let mut dims = Vec::new();
    for d in s.tables(fb::SparsityParameters::VT_DIM_METADATA)?.iter() {
        let d = d?;
        let format = d.scalar::<i8>(fb::DimensionMetadata::VT_FORMAT, 0)?;
        if format == 0 {
            let n = d.scalar::<i32>(fb::DimensionMetadata::VT_DENSE_SIZE, 0)?;
            dims.push(SparseDim::Dense(usize::try_from(n).map_err(|_| invalid(format!("negative dense size {n}")))?));
        } else {
            // The arrays stay in the file, at its width: only their place is noted
            // (the reader has checked that they lie inside it).
            let read = |type_slot, value_slot| -> Result<SparseIndices> {
                let ty = d.scalar::<u8>(type_slot, 0)?;
                let tab = d.table(value_slot)?.ok_or_else(|| invalid("CSR dimension without index arrays"))?;
                // Int32Vector, Uint16Vector and Uint8Vector all keep `values` in slot 4.
                let (start, len, width) = match ty {
                    1 => {
                        let v = tab.vector::<i32>(fb::Int32Vector::VT_VALUES)?;
                        // Negative entries are refused here, so readers see indices only.
                        if let Some(x) = v.as_ref().and_then(|v| v.iter().find(|&x| x < 0)) {
                            return Err(invalid(format!("negative sparse index {x}")));
                        }
                        v.map_or((0, 0, IndexWidth::I32), |v| (v.offset(), v.len(), IndexWidth::I32))
                    }
                    2 => tab.vector::<u16>(fb::Uint16Vector::VT_VALUES)?.map_or((0, 0, IndexWidth::U16), |v| (v.offset(), v.len(), IndexWidth::U16)),
                    3 => tab.vector::<u8>(fb::Uint8Vector::VT_VALUES)?.map_or((0, 0, IndexWidth::U8), |v| (v.offset(), v.len(), IndexWidth::U8)),
                    t => return Err(invalid(format!("unknown sparse index vector type {t}"))),
                };
                Ok(SparseIndices { bytes: file.clone(), start, len, width })
            };
            let segments = read(fb::DimensionMetadata::VT_ARRAY_SEGMENTS_TYPE, fb::DimensionMetadata::VT_ARRAY_SEGMENTS)?;
            let indices = read(fb::DimensionMetadata::VT_ARRAY_INDICES_TYPE, fb::DimensionMetadata::VT_ARRAY_INDICES)?;
            dims.push(SparseDim::Csr { segments, indices });
        }
    }
    if dims.len() != traversal_order.len() {
        return Err(invalid(format!("{} dim_metadata entries for {} traversal dimensions", dims.len(), traversal_order.len())));
    }
    Ok(Sparsity { traversal_order, block_map, dims })
}

/// Checks an op's input and output counts against its op table line, and that no
/// required input is omitted, so no kernel builder can index past what it was given.
fn check_arity(op: BuiltinOp, inputs: &[Option<usize>], outputs: &[usize]) -> std::result::Result<(), String> {
    let (want_in, want_out) = (op.inputs(), op.outputs());
    if !want_in.admits(inputs.len()) {
        return Err(format!("takes {want_in} inputs, the model gives {}", inputs.len()));
    }
    if let Some(k) = inputs.iter().take(want_in.min).position(Option::is_none) {
        return Err(format!("required input {k} is omitted"));
    }
    if !want_out.admits(outputs.len()) {
        return Err(format!("produces {want_out} outputs, the model lists {}", outputs.len()));
    }
    Ok(())
}

/// An op may not read a tensor that the same or a later op produces (a cycle in
/// execution order), and a tensor is produced at most once. Tensors that nothing
/// produces read as zeros, as in LiteRT.
fn check_dataflow(si: usize, sg: &Subgraph) -> Result<()> {
    let mut producer = vec![usize::MAX; sg.tensors.len()];
    for (oi, op) in sg.ops.iter().enumerate() {
        for &o in &op.outputs {
            if producer[o] != usize::MAX && !sg.tensors[o].is_variable {
                return Err(invalid(format!(
                    "subgraph {si} op {oi} ({}) writes tensor {o} ('{}') which op {} already writes",
                    op.code.name(),
                    sg.tensors[o].name,
                    producer[o]
                )));
            }
            if sg.tensors[o].is_const() {
                return Err(invalid(format!("subgraph {si} op {oi} ({}) writes constant tensor {o} ('{}')", op.code.name(), sg.tensors[o].name)));
            }
            producer[o] = producer[o].min(oi);
        }
    }
    for (oi, op) in sg.ops.iter().enumerate() {
        for &i in op.inputs.iter().flatten() {
            if producer[i] != usize::MAX && producer[i] >= oi && !sg.tensors[i].is_variable {
                return Err(invalid(format!(
                    "subgraph {si} op {oi} ({}) reads tensor {i} ('{}') that op {} produces later (cycle)",
                    op.code.name(),
                    sg.tensors[i].name,
                    producer[i]
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod string_constant_tests {
    use super::Model;
    use ferrite_format::schema::TensorType;
    use ferrite_format::writer::{BuiltinOperator, ModelSpec, OpCode, Options, TensorSpec};

    /// A model whose only constant is a STRING tensor of shape [3] (a RESHAPE
    /// reads it, so it is a real operand), with the buffer's bytes edited by `f`.
    fn model_with(items: &[&str], f: impl Fn(&mut Vec<u8>)) -> super::ModelBytes {
        let mut spec = TensorSpec::const_strings("words", &[3], items).unwrap();
        if let Some(d) = spec.data.as_mut() {
            f(d);
        }
        let mut m = ModelSpec::default();
        let s = m.add_tensor(spec);
        let shape = m.add_tensor(TensorSpec::const_i32("shape", &[1], &[3]));
        let o = m.add_tensor(TensorSpec::activation("out", TensorType::STRING, &[3]));
        m.add_op(OpCode::Builtin(BuiltinOperator::RESHAPE), &[s, shape], &[o], Options::None);
        m.outputs.push(o);
        std::sync::Arc::new(m.to_bytes().unwrap())
    }

    #[test]
    fn string_constants_are_validated_at_load() {
        assert!(Model::from_bytes(model_with(&["", "héllo", "a"], |_| ())).is_ok());
        // Two strings for a shape of three.
        assert!(Model::from_bytes(model_with(&["a", "b"], |_| ())).is_err());
        // An offset past the buffer's end, and a count the buffer cannot hold.
        assert!(Model::from_bytes(model_with(&["x", "y", "z"], |d| d[8..12].copy_from_slice(&1000i32.to_le_bytes()))).is_err());
        assert!(Model::from_bytes(model_with(&["x", "y", "z"], |d| d[..4].copy_from_slice(&i32::MAX.to_le_bytes()))).is_err());
    }

    #[test]
    fn sparse_indices_read_each_width_in_place() {
        use super::{IndexWidth, SparseIndices};
        // uint8 [7, 200], uint16 [1, 60000], int32 [5, 70000] after a 3-byte header.
        let file: Vec<u8> = [&[9u8, 9, 9][..], &[7, 200], &1u16.to_le_bytes(), &60000u16.to_le_bytes(), &5i32.to_le_bytes(), &70000i32.to_le_bytes()].concat();
        let file: super::ModelBytes = std::sync::Arc::new(file);
        let at = |start, width| SparseIndices { bytes: file.clone(), start, len: 2, width };
        let (a, b, c) = (at(3, IndexWidth::U8), at(5, IndexWidth::U16), at(9, IndexWidth::I32));
        assert_eq!((a.to_vec(), b.to_vec(), c.to_vec()), (vec![7, 200], vec![1, 60000], vec![5, 70000]));
        assert_eq!((a.get(2), c.get(usize::MAX)), (None, None));
        // Equal by value whatever the width; built in memory, it has no place in the file.
        assert_eq!(b, SparseIndices::from_values(&[1, 60000]));
        assert_ne!(b, SparseIndices::from_values(&[1, 60001]));
        let bytes = (*file).as_ref();
        assert_eq!((b.range_in(bytes), c.range_in(bytes)), (Some(5..9), Some(9..17)));
        assert_eq!(SparseIndices::from_values(&[1]).range_in(bytes), None);
        assert_eq!(c.range_in(&bytes[..bytes.len() - 1]), None);
    }
}
