//! The CPU backend: the optimized kernels of `ferrite-kernels`, one file per op
//! family, each holding its float, int8, uint8, int16x8 and hybrid builders side
//! by side and its own dispatch (`build`); `quant` holds the parameter helpers
//! the integer builders share. The builders check types and shapes and build
//! parameters; the arithmetic on tensor data is in `ferrite-kernels`.

// A selective build (some op or type features off) leaves helpers unused.
#![cfg_attr(not(feature = "all-ops"), allow(dead_code, unused_imports, unused_variables))]

mod activation;
#[cfg(feature = "op-recurrent")]
pub(crate) mod basic_lstm;
pub(crate) mod chain;
mod conv;
mod convert;
mod elementwise;
pub(crate) mod feature;
mod hlo;
pub(crate) mod hlo_index;
mod index;
mod linear;
mod movement;
mod pool;
mod qelem;
pub(crate) mod qnorm;
mod qreduce;
mod quant;
pub(crate) mod random;
pub(crate) mod recurrent;
mod reduce;
mod signal;
mod softmax;
pub(crate) mod strings;
#[cfg(feature = "type-hybrid")]
mod tconv_hybrid;
pub(crate) mod text;

/// The strided-slice resolution, shared with the training graph's backward op.
pub(crate) use movement::resolve_strided_slice;

pub(crate) use conv::transpose_conv_built;

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::Clamp;

use super::{Backend, BackendContext, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::{DType, OpCode};
use crate::ops::Activation;

/// The portable CPU backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn build(&self, op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
        build_builtin(op, ctx)
    }

    /// The float convolutions (`nn::conv2d`, `nn::depthwise`: the dispatch below sends
    /// CONV_2D and DEPTHWISE_CONV_2D there when they are neither integer nor hybrid)
    /// apply epilogues block by block while their output is in cache.
    fn applies_epilogues(&self, op: &OpContext<'_>) -> bool {
        matches!(op.op.code, OpCode::Builtin(B::CONV_2D | B::DEPTHWISE_CONV_2D)) && !op.is_hybrid() && !op.is_int()
    }
}

fn build_builtin(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let code = match &op.op.code {
        OpCode::Builtin(code) => *code,
        OpCode::Other(_) => return Err(op.unsupported("ferrite has no kernel for this builtin op yet")),
        OpCode::Custom(_) => return Err(op.unsupported("custom op without a registered implementation")),
    };
    // The int16 kernels of the typed families are left out without `type-int16`
    // (the families' own int16 branches are compiled out; this refuses the ops of
    // those families whose int16 paths share a kernel with int8, so that a build
    // runs exactly the ops `features_for` says it has).
    if !cfg!(feature = "type-int16") && int16_data(code, op) {
        return type_not_built(op);
    }
    // Each op belongs to one family; the family picks the builder for its types.
    for family in FAMILIES {
        if let Some(built) = family(code, op, ctx) {
            return built;
        }
    }
    Err(op.unsupported(if cfg!(feature = "all-ops") {
        "no CPU kernel for this op yet"
    } else {
        "no CPU kernel for this op in this build (a selective build: see the op-* cargo features)"
    }))
}

/// A family's dispatch: `None` when the op is not one of its ops.
type Family = fn(B, &OpContext<'_>, &mut BackendContext) -> Option<Result<Built>>;

/// The op families, each with its own dispatch. A selective build (cargo features
/// `op-<family>`, see the crate's Cargo.toml) leaves out the families its models do
/// not use, and with them their kernels; their ops are then refused at prepare.
const FAMILIES: &[Family] = &[
    // Quantized element-wise variants first: they take only integer inputs.
    #[cfg(feature = "op-elementwise")]
    qelem::build,
    #[cfg(feature = "op-conv")]
    conv::build,
    #[cfg(feature = "op-transpose-conv")]
    conv::build_transpose,
    #[cfg(feature = "op-linear")]
    linear::build,
    #[cfg(feature = "op-pool")]
    pool::build,
    // Before `softmax`: the int8 / uint8 LOG_SOFTMAX and L2_NORMALIZATION.
    #[cfg(feature = "op-softmax")]
    qnorm::build,
    #[cfg(feature = "op-softmax")]
    softmax::build,
    #[cfg(feature = "op-activation")]
    activation::build,
    #[cfg(feature = "op-elementwise")]
    elementwise::build,
    #[cfg(feature = "op-reduce")]
    reduce::build,
    #[cfg(feature = "op-movement")]
    movement::build,
    #[cfg(feature = "op-layout")]
    movement::build_layout,
    #[cfg(feature = "op-index")]
    index::build,
    #[cfg(feature = "op-convert")]
    convert::build,
    #[cfg(feature = "op-densify")]
    convert::build_densify,
    #[cfg(feature = "op-signal")]
    signal::build,
    #[cfg(feature = "op-recurrent")]
    recurrent::build,
    #[cfg(feature = "op-hlo")]
    hlo::build,
    #[cfg(feature = "op-random")]
    random::build,
    #[cfg(feature = "op-feature")]
    feature::build,
];

/// The cargo feature (`op-<family>`) of the CPU family that builds `code`; `None`
/// for ops the executor runs itself (control flow, variables) or no family builds.
/// A test checks it against the families' own dispatch.
pub(crate) fn family_feature(code: B) -> Option<&'static str> {
    Some(match code {
        B::CONV_2D | B::DEPTHWISE_CONV_2D | B::CONV_3D | B::CONV_3D_TRANSPOSE => "op-conv",
        B::TRANSPOSE_CONV => "op-transpose-conv",
        B::FULLY_CONNECTED | B::BATCH_MATMUL => "op-linear",
        B::AVERAGE_POOL_2D | B::MAX_POOL_2D | B::L2_POOL_2D => "op-pool",
        B::SOFTMAX | B::LOG_SOFTMAX | B::L2_NORMALIZATION | B::LOCAL_RESPONSE_NORMALIZATION => "op-softmax",
        B::ABS
        | B::CEIL
        | B::COS
        | B::ELU
        | B::EXP
        | B::FLOOR
        | B::GELU
        | B::HARD_SWISH
        | B::LEAKY_RELU
        | B::LOG
        | B::LOGISTIC
        | B::NEG
        | B::RELU
        | B::RELU6
        | B::RELU_0_TO_1
        | B::RELU_N1_TO_1
        | B::ROUND
        | B::RSQRT
        | B::SIGN
        | B::SIN
        | B::SQRT
        | B::SQUARE
        | B::TANH => "op-activation",
        B::ADD
        | B::ADD_N
        | B::DIV
        | B::EQUAL
        | B::FLOOR_DIV
        | B::FLOOR_MOD
        | B::GREATER
        | B::GREATER_EQUAL
        | B::LESS
        | B::LESS_EQUAL
        | B::LOGICAL_AND
        | B::LOGICAL_NOT
        | B::LOGICAL_OR
        | B::MAXIMUM
        | B::MINIMUM
        | B::MUL
        | B::NOT_EQUAL
        | B::POW
        | B::PRELU
        | B::SELECT
        | B::SELECT_V2
        | B::SQUARED_DIFFERENCE
        | B::SUB
        | B::RIGHT_SHIFT
        | B::BITWISE_XOR
        | B::ATAN2 => "op-elementwise",
        B::STABLEHLO_ADD
        | B::STABLEHLO_MULTIPLY
        | B::STABLEHLO_MAXIMUM
        | B::STABLEHLO_MINIMUM
        | B::STABLEHLO_AND
        | B::STABLEHLO_PAD
        | B::DILATE
        | B::REDUCE_WINDOW
        | B::STABLEHLO_REDUCE_WINDOW
        | B::STABLEHLO_GATHER
        | B::STABLEHLO_SCATTER => "op-hlo",
        B::ARG_MAX | B::ARG_MIN | B::MEAN | B::REDUCE_MAX | B::REDUCE_MIN | B::REDUCE_PROD | B::SUM | B::REDUCE_ALL | B::REDUCE_ANY => "op-reduce",
        B::CONCATENATION
        | B::EXPAND_DIMS
        | B::FILL
        | B::GATHER
        | B::PACK
        | B::PAD
        | B::PADV2
        | B::RESHAPE
        | B::RANK
        | B::SHAPE
        | B::SLICE
        | B::SPLIT
        | B::SPLIT_V
        | B::SQUEEZE
        | B::STRIDED_SLICE
        | B::TRANSPOSE
        | B::UNPACK
        | B::ZEROS_LIKE => "op-movement",
        B::BROADCAST_TO
        | B::DEPTH_TO_SPACE
        | B::RESIZE_BILINEAR
        | B::RESIZE_NEAREST_NEIGHBOR
        | B::REVERSE_V2
        | B::REVERSE_SEQUENCE
        | B::SPACE_TO_DEPTH
        | B::TILE
        | B::MIRROR_PAD
        | B::SPACE_TO_BATCH_ND
        | B::BATCH_TO_SPACE_ND => "op-layout",
        B::BROADCAST_ARGS
        | B::MATRIX_DIAG
        | B::MATRIX_SET_DIAG
        | B::NON_MAX_SUPPRESSION_V4
        | B::NON_MAX_SUPPRESSION_V5
        | B::SEGMENT_SUM
        | B::UNIQUE
        | B::UNSORTED_SEGMENT_MAX
        | B::UNSORTED_SEGMENT_MIN
        | B::UNSORTED_SEGMENT_PROD
        | B::UNSORTED_SEGMENT_SUM
        | B::WHERE
        | B::CUMSUM
        | B::DYNAMIC_UPDATE_SLICE
        | B::EMBEDDING_LOOKUP
        | B::GATHER_ND
        | B::ONE_HOT
        | B::RANGE
        | B::SCATTER_ND
        | B::SPARSE_TO_DENSE
        | B::TOPK_V2
        | B::HASHTABLE_LOOKUP
        | B::LSH_PROJECTION
        | B::SKIP_GRAM
        | B::HASHTABLE
        | B::HASHTABLE_IMPORT
        | B::HASHTABLE_FIND
        | B::HASHTABLE_SIZE => "op-index",
        B::BITCAST | B::CAST | B::DEQUANTIZE | B::QUANTIZE => "op-convert",
        B::DENSIFY => "op-densify",
        B::RFFT2D | B::COMPLEX_ABS | B::REAL | B::IMAG => "op-signal",
        B::LSTM
        | B::UNIDIRECTIONAL_SEQUENCE_LSTM
        | B::BIDIRECTIONAL_SEQUENCE_LSTM
        | B::RNN
        | B::UNIDIRECTIONAL_SEQUENCE_RNN
        | B::BIDIRECTIONAL_SEQUENCE_RNN
        | B::SVDF => "op-recurrent",
        B::RANDOM_UNIFORM | B::RANDOM_STANDARD_NORMAL | B::MULTINOMIAL | B::STABLEHLO_RNG_BIT_GENERATOR => "op-random",
        B::BUCKETIZE | B::FAKE_QUANT | B::EMBEDDING_LOOKUP_SPARSE => "op-feature",
        _ => return None,
    })
}

/// Families whose kernels are chosen by element type (the `type-*` features).
const TYPED_FAMILIES: [&str; 6] = ["op-conv", "op-transpose-conv", "op-linear", "op-pool", "op-softmax", "op-activation"];

/// The input whose element type picks a typed family's kernel: TRANSPOSE_CONV's
/// data is its third input, every other op's its first.
fn data_input(code: B) -> usize {
    if code == B::TRANSPOSE_CONV {
        2
    } else {
        0
    }
}

/// Whether `op` is an op of a typed family on int16 data (what needs `type-int16`).
fn int16_data(code: B, op: &OpContext<'_>) -> bool {
    family_feature(code).is_some_and(|f| TYPED_FAMILIES.contains(&f)) && op.opt_input(data_input(code)).is_some_and(|d| d.dtype == DType::I16)
}

/// The cargo features of `ferrite` a build needs to run `model` on the CPU
/// backend: the op families of its ops and, for the families with kernels per
/// element type, the types (`type-float`, `type-int` for int8 and uint8,
/// `type-int16`, `type-hybrid`). Sorted.
pub fn features_for(model: &crate::model::Model) -> Vec<&'static str> {
    let mut out = std::collections::BTreeSet::new();
    for g in model.subgraphs() {
        let dtype = |i: Option<&Option<usize>>| i.copied().flatten().and_then(|t| g.tensors.get(t)).map(|t| t.dtype);
        for op in &g.ops {
            // The custom ops ferrite ships run without a family of their own.
            if let OpCode::Custom(name) = &op.code {
                if crate::backend::BUILTIN_CUSTOM_OPS.contains(&name.as_str()) {
                    out.insert("op-custom");
                }
            }
            let Some(code) = op.code.builtin() else { continue };
            let Some(family) = family_feature(code) else { continue };
            out.insert(family);
            if TYPED_FAMILIES.contains(&family) {
                out.insert(match (dtype(op.inputs.get(data_input(code))), dtype(op.inputs.get(1))) {
                    (Some(DType::I8 | DType::U8), _) => "type-int",
                    (Some(DType::I16), _) => "type-int16",
                    (Some(DType::F32), Some(DType::I8)) => "type-hybrid",
                    _ => "type-float",
                });
            }
        }
    }
    out.into_iter().collect()
}

/// The refusal of an op whose element type this build's features left out.
fn type_not_built(op: &OpContext<'_>) -> Result<Built> {
    let t = op.opt_input(0).map_or("?", |d| d.dtype.name());
    Err(op.unsupported(format!("this build of ferrite has no kernel for this op with {t} input (a selective build: see the type-* cargo features)")))
}

/// Clamp range of a fused activation. LiteRT's builtin kernels turn a fused TANH or
/// SIGN_BIT into an unbounded range (they are not applied), and LiteRT is the
/// reference ferrite matches, so they clamp nothing here too (tested in conformance).
pub(crate) fn clamp_of(_op: &OpContext<'_>, a: Activation) -> Result<Clamp> {
    Ok(activation_clamp(a))
}

/// [`clamp_of`] without an op: the clamp of a fused activation.
pub(crate) fn activation_clamp(a: Activation) -> Clamp {
    match a {
        Activation::Relu => Clamp::RELU,
        Activation::Relu6 => Clamp::RELU6,
        Activation::ReluN1To1 => Clamp::RELU_N1_TO_1,
        Activation::None | Activation::Tanh | Activation::SignBit => Clamp::NONE,
    }
}

/// Requires float32 for the listed inputs.
pub(crate) fn require_f32(op: &OpContext<'_>, inputs: &[usize]) -> Result<()> {
    for &i in inputs {
        if let Some(d) = op.opt_input(i) {
            if d.dtype != DType::F32 {
                return Err(op.unsupported(format!("input {i} has type {}; only float32 is implemented for this op", d.dtype.name())));
            }
        }
    }
    Ok(())
}

/// Normalises a possibly negative axis against `rank`.
pub(crate) fn axis(op: &OpContext<'_>, a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    // A rank-0 tensor has no axis: accepting 0 there made callers index an empty shape.
    if v < 0 || v >= r {
        return Err(op.bad(format!("axis {a} out of range for rank {rank}")));
    }
    Ok(v as usize)
}

/// Runs `$body` with `$T` bound to an unsigned integer type of the dtype's size,
/// for kernels that only move elements.
macro_rules! by_size {
    ($op:expr, $dtype:expr, $T:ident => $body:expr) => {
        match $dtype.size() {
            Some(1) => {
                type $T = u8;
                $body
            }
            Some(2) => {
                type $T = u16;
                $body
            }
            Some(4) => {
                type $T = u32;
                $body
            }
            Some(8) => {
                type $T = u64;
                $body
            }
            _ => Err($op.unsupported(format!("element type {}", $dtype.name()))),
        }
    };
}
pub(crate) use by_size;

pub(crate) fn runtime(msg: impl Into<String>) -> Error {
    Error::Runtime(msg.into().into())
}

/// Runs `f` over the output rows `r` (held by `out`, `row_len` floats each), and
/// when element-wise ops were fused applies them to each block of about 32 KB
/// right after `f` wrote it, while the block is still in cache.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rows_with_epilogue(
    epilogue: Option<&crate::backend::EpilogueSlot>,
    ins: &[Option<&[u8]>],
    channels: usize,
    row_len: usize,
    granule: usize,
    r: std::ops::Range<usize>,
    out: &mut [f32],
    mut f: impl FnMut(std::ops::Range<usize>, &mut [f32]) -> bool,
) -> bool {
    let Some(e) = epilogue.and_then(|s| s.get()).filter(|e| !e.is_empty()) else { return f(r, out) };
    // Blocks in whole granules, so the kernel's tiling is the same as unblocked.
    let granule = granule.max(1);
    let block = (32 * 1024 / (row_len * 4).max(1)).max(1).div_ceil(granule) * granule;
    let mut start = r.start;
    for o in out.chunks_mut(block * row_len.max(1)) {
        let end = (start + block).min(r.end);
        if !f(start..end, o) || !crate::backend::apply_epilogue(e, ins, start, row_len, channels, o) {
            return false;
        }
        start = end;
    }
    true
}

/// Work below this many flops runs on one thread: splitting it costs more than it saves.
pub(crate) const PARALLEL_MIN_FLOPS: usize = 1 << 19;

/// Chunks per thread [`for_row_chunks`] aims for when the work pays for them: the
/// pool hands chunks out as threads ask, so a thread that starts late (woken late,
/// or sharing its core with another process) or meets slower rows takes fewer, and
/// the region ends close to when the work is done rather than when the slowest
/// half is.
const CHUNKS_PER_THREAD: usize = 4;

/// Most chunks of one region: their output slices live on the stack.
const MAX_CHUNKS: usize = 16;

/// Least work of one chunk beyond the first per thread: claiming a chunk and
/// starting its kernel costs a fraction of a microsecond, a chunk of this much
/// work about twenty at 1 thread, so the finer split costs at most a few percent.
const CHUNK_MIN_FLOPS: usize = 1 << 22;

/// A kernel body run on one chunk: (scratch slot, its output rows, its output) -> ok.
/// The slot is below the pool's thread count and no two chunks running at the same
/// time get the same one, so it indexes per-thread scratch.
pub(crate) type RowTask<'a> = dyn Fn(usize, std::ops::Range<usize>, &mut [f32]) -> bool + Sync + 'a;

/// A scratch slot of [`for_row_chunks_aligned`], freed when dropped (also when the
/// chunk's kernel panics, so the slot is not lost to the chunks after it).
struct SlotGuard<'a>(usize, &'a [std::sync::atomic::AtomicBool]);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.1[self.0].store(false, std::sync::atomic::Ordering::Release);
    }
}

/// Runs `f(rows_i, out_i)` over contiguous chunks of `rows` output rows of
/// `row_len` floats each, on the pool when there is one and the work is large
/// enough. Chunks are disjoint and each row is computed exactly as on one thread,
/// so results do not depend on the thread count.
pub(crate) fn for_row_chunks(
    pool: Option<&ferrite_kernels::parallel::ThreadPool>,
    flops: usize,
    out: &mut [f32],
    rows: usize,
    row_len: usize,
    f: &RowTask<'_>,
) -> Result<()> {
    for_row_chunks_aligned(pool, flops, out, rows, row_len, 1, f)
}

/// [`for_row_chunks`] with chunk boundaries on multiples of `granule` rows, for
/// kernels whose tiling must not depend on where a chunk starts.
pub(crate) fn for_row_chunks_aligned(
    pool: Option<&ferrite_kernels::parallel::ThreadPool>,
    flops: usize,
    out: &mut [f32],
    rows: usize,
    row_len: usize,
    granule: usize,
    f: &RowTask<'_>,
) -> Result<()> {
    // An empty output (a VALID window wider than its input gives zero columns) has
    // nothing to compute; the kernels' shape checks would reject it as a mismatch.
    if out.is_empty() {
        return Ok(());
    }
    let granule = granule.max(1);
    let units = rows.div_ceil(granule);
    // Chunk `i` of the rows, in whole granules (the last one possibly short).
    let chunk = |rows: usize, parts: usize, i: usize| {
        let u = ferrite_kernels::parallel::chunk(units, parts, i);
        (u.start * granule).min(rows)..(u.end * granule).min(rows)
    };
    let (parts, threads) = match pool {
        Some(p) if flops >= PARALLEL_MIN_FLOPS => {
            let threads = p.threads().min(units);
            // A whole number of chunks per thread: with equal chunks, any other count
            // leaves one thread a chunk more than the rest (3 chunks on 2 threads end at
            // 2/3 of the work, not 1/2).
            let finer = (threads * CHUNKS_PER_THREAD).min(MAX_CHUNKS).min(units).min(flops / CHUNK_MIN_FLOPS);
            ((finer / threads.max(1) * threads).max(threads), threads)
        }
        _ => (1, 1),
    };
    let ok = match pool {
        Some(p) if parts > 1 => {
            // Scratch slots: a running chunk holds one, and at most `threads` run at once.
            let busy: smallvec::SmallVec<[std::sync::atomic::AtomicBool; 8]> = (0..threads).map(|_| std::sync::atomic::AtomicBool::new(false)).collect();
            let take_slot = || loop {
                for (s, b) in busy.iter().enumerate() {
                    if b.compare_exchange(false, true, std::sync::atomic::Ordering::Acquire, std::sync::atomic::Ordering::Relaxed).is_ok() {
                        return s;
                    }
                }
                // Only reached while another chunk is between finishing and freeing its slot.
                std::hint::spin_loop();
            };
            let mut pieces: smallvec::SmallVec<[std::sync::Mutex<&mut [f32]>; MAX_CHUNKS]> = smallvec::SmallVec::new();
            let mut rest = out;
            for i in 0..parts {
                let len = (chunk(rows, parts, i).len() * row_len).min(rest.len());
                let (a, b) = std::mem::take(&mut rest).split_at_mut(len);
                pieces.push(std::sync::Mutex::new(a));
                rest = b;
            }
            let ok = std::sync::atomic::AtomicBool::new(true);
            p.run(parts, &|i| {
                let mut o = pieces[i].lock().unwrap_or_else(|e| e.into_inner());
                let slot = SlotGuard(take_slot(), &busy);
                if !f(slot.0, chunk(rows, parts, i), &mut o) {
                    ok.store(false, std::sync::atomic::Ordering::Relaxed);
                }
            });
            ok.into_inner()
        }
        _ => f(0, 0..rows, out),
    };
    if ok {
        Ok(())
    } else {
        Err(runtime("kernel buffers do not match the planned shapes"))
    }
}

#[cfg(all(test, feature = "all-ops"))]
mod tests {
    use super::*;
    use crate::backend::InputDesc;
    use crate::model::{Op, OpParams, TensorInfo};

    /// `family_feature` names, for every op of the table, the family whose dispatch
    /// takes it: a selective build with the features `ferrite features` lists then
    /// has every kernel its models need.
    /// `features_for` names `op-custom` exactly for the corpus models (FERRITE_CORPUS)
    /// with a custom op ferrite ships, so a selective build registers every custom op
    /// its models use; the shipped list is what the registry holds.
    #[cfg(feature = "op-custom")]
    #[test]
    fn op_custom_follows_the_shipped_custom_ops() {
        let registry = crate::backend::CustomOpRegistry::with_builtins();
        for name in crate::backend::BUILTIN_CUSTOM_OPS {
            assert!(registry.get(name).is_some(), "{name} is not registered");
        }
        let Ok(dir) = std::env::var("FERRITE_CORPUS") else { return };
        let mut stack = vec![std::path::PathBuf::from(dir)];
        let mut seen = [0usize; 2];
        while let Some(d) = stack.pop() {
            for p in std::fs::read_dir(&d).unwrap().flatten().map(|e| e.path()) {
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let Some(m) = p.extension().filter(|x| *x == "tflite").and_then(|_| crate::Model::from_file(&p).ok()) else { continue };
                let uses = m.subgraphs().iter().flat_map(|g| &g.ops).any(|op| matches!(&op.code, OpCode::Custom(n) if registry.get(n).is_some()));
                assert_eq!(features_for(&m).contains(&"op-custom"), uses, "{}", p.display());
                seen[usize::from(uses)] += 1;
            }
        }
        assert!(seen[0] > 0 && seen[1] > 0, "the corpus needs models with and without shipped custom ops: {seen:?}");
    }

    #[test]
    fn family_features_follow_the_dispatch() {
        let names = [
            // The quantized element-wise variants (integer inputs only: they take
            // none of these float skeletons).
            "op-elementwise",
            "op-conv",
            "op-transpose-conv",
            "op-linear",
            "op-pool",
            // qnorm (int8 / uint8 only, like qelem), then softmax.
            "op-softmax",
            "op-softmax",
            "op-activation",
            "op-elementwise",
            "op-reduce",
            "op-movement",
            "op-layout",
            "op-index",
            "op-convert",
            "op-densify",
            "op-signal",
            "op-recurrent",
            "op-hlo",
            "op-random",
            "op-feature",
        ];
        assert_eq!(names.len(), FAMILIES.len());
        let info = TensorInfo {
            name: "t".into(),
            dtype: DType::F32,
            shape: vec![1, 1, 1, 1],
            shape_signature: vec![1, 1, 1, 1],
            quant: None,
            data: None,
            sparsity: None,
            is_variable: false,
        };
        let mut claimed = 0;
        for &code in B::ALL {
            let op = Op {
                code: OpCode::Builtin(code),
                version: 1,
                inputs: (0..code.inputs().min).map(Some).collect(),
                outputs: (0..code.outputs().min).collect(),
                params: OpParams::None,
                custom_options: None,
            };
            let input =
                |t| Some(InputDesc { tensor: t, dtype: DType::F32, shape: vec![1, 1, 1, 1], value: None, constant: false, quant: None, sparsity: None });
            let octx = OpContext {
                subgraph: 0,
                op_index: 0,
                op: &op,
                inputs: (0..code.inputs().min).map(input).collect(),
                outputs: (0..code.outputs().min).map(|_| &info).collect(),
                custom_options: &[],
                epilogue: None,
                input_pad: None,
                max_bytes: 1 << 20,
            };
            let mut ctx = BackendContext::new(1);
            // A builder may refuse (or, on this skeleton op, even trip over) the op:
            // what counts is that its family's dispatch took it.
            let taken = FAMILIES
                .iter()
                .zip(names)
                .find(|(f, _)| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(code, &octx, &mut ctx).is_some())).unwrap_or(true));
            assert_eq!(taken.map(|t| t.1), family_feature(code), "{code}");
            claimed += usize::from(taken.is_some());
        }
        assert!(claimed >= 97, "{claimed} ops claimed by a family");
    }
}
