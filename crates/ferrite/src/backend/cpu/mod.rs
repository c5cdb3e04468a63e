//! The CPU backend: float32 kernels from `ferrite-kernels`, plus data movement
//! for every element type.

mod convert;
pub(crate) use nn::transpose_conv_built;
mod elementwise;
mod nn;
mod quant;
mod reduce;
mod shape;

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
        matches!(op.op.code, OpCode::Builtin(B::CONV_2D | B::DEPTHWISE_CONV_2D)) && !is_hybrid(op) && !is_int(op)
    }
}

fn build_builtin(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let code = match &op.op.code {
        OpCode::Builtin(code) => *code,
        OpCode::Other(_) => return Err(op.unsupported("ferrite has no kernel for this builtin op yet")),
        OpCode::Custom(_) => return Err(op.unsupported("custom op without a registered implementation")),
    };
    match code {
        B::CONV_2D | B::DEPTHWISE_CONV_2D | B::FULLY_CONNECTED if is_hybrid(op) => quant::hybrid(op, code),
        B::CONV_2D | B::DEPTHWISE_CONV_2D | B::FULLY_CONNECTED if is_int(op) => match code {
            B::FULLY_CONNECTED => quant::fully_connected(op),
            c => quant::conv(op, c == B::DEPTHWISE_CONV_2D, ctx),
        },
        B::HARD_SWISH if is_int(op) => quant::hard_swish(op),
        B::TRANSPOSE_CONV if op.opt_input(2).is_some_and(|d| matches!(d.dtype, DType::I8 | DType::U8 | DType::I16)) => quant::transpose_conv(op),
        B::LOGISTIC | B::TANH if is_int(op) && op.outputs[0].dtype == DType::I16 => quant::logistic_tanh_i16(op, code == B::TANH),
        B::LOGISTIC if is_int(op) => quant::table(op, ferrite_kernels::elementwise::logistic),
        B::TANH if is_int(op) => quant::table(op, f32::tanh),
        B::QUANTIZE => quant::quantize(op),
        B::SOFTMAX if is_int(op) => quant::softmax(op),
        B::RELU | B::RELU6 | B::RELU_N1_TO_1 | B::LEAKY_RELU if is_int(op) => quant::relu_like(op, code),
        B::ADD | B::SUB | B::MUL | B::PRELU if is_int(op) && op.opt_input(0).is_some_and(|d| d.quant.is_some()) => quant::binary(op, code),
        B::AVERAGE_POOL_2D | B::MAX_POOL_2D if is_int(op) => quant::pool(op, code == B::MAX_POOL_2D),
        B::CONV_2D => nn::conv2d(op, ctx),
        B::DEPTHWISE_CONV_2D => nn::depthwise(op, ctx),
        B::AVERAGE_POOL_2D | B::MAX_POOL_2D => nn::pool(op, ctx, code == B::MAX_POOL_2D),
        B::FULLY_CONNECTED => nn::fully_connected(op, ctx),
        B::TRANSPOSE_CONV => nn::transpose_conv(op),
        B::BATCH_MATMUL => nn::batch_matmul(op),
        B::SOFTMAX | B::LOG_SOFTMAX => nn::softmax(op, code == B::LOG_SOFTMAX),

        B::ADD | B::SUB | B::MUL | B::DIV | B::MAXIMUM | B::MINIMUM | B::SQUARED_DIFFERENCE | B::POW | B::FLOOR_DIV | B::FLOOR_MOD | B::PRELU => {
            elementwise::binary(op, code, ctx.pool())
        }
        B::LESS | B::LESS_EQUAL | B::GREATER | B::GREATER_EQUAL | B::EQUAL | B::NOT_EQUAL => elementwise::compare(op, code),
        B::LOGICAL_AND | B::LOGICAL_OR | B::LOGICAL_NOT => elementwise::logical(op, code),
        B::SELECT | B::SELECT_V2 => elementwise::select(op),
        B::ABS
        | B::NEG
        | B::EXP
        | B::LOG
        | B::SQRT
        | B::RSQRT
        | B::SQUARE
        | B::TANH
        | B::LOGISTIC
        | B::RELU
        | B::RELU6
        | B::RELU_N1_TO_1
        | B::RELU_0_TO_1
        | B::HARD_SWISH
        | B::LEAKY_RELU
        | B::ELU
        | B::FLOOR
        | B::CEIL
        | B::ROUND
        | B::SIN
        | B::COS
        | B::GELU
        | B::SIGN => elementwise::unary(op, code),

        B::RESHAPE | B::SQUEEZE | B::EXPAND_DIMS => shape::reshape_like(op, code),
        B::CONCATENATION | B::PACK => shape::concat(op, code == B::PACK),
        B::UNPACK | B::SPLIT | B::SPLIT_V => shape::split(op, code),
        B::SLICE | B::STRIDED_SLICE => shape::slice(op, code == B::STRIDED_SLICE),
        B::TRANSPOSE => shape::transpose(op),
        B::REVERSE_V2 => shape::reverse(op),
        B::PAD | B::PADV2 => shape::pad(op),
        B::GATHER => shape::gather(op),
        B::TILE | B::BROADCAST_TO => shape::tile(op, code == B::BROADCAST_TO),
        B::DEPTH_TO_SPACE | B::SPACE_TO_DEPTH => shape::depth_space(op, code == B::DEPTH_TO_SPACE),
        B::RESIZE_BILINEAR | B::RESIZE_NEAREST_NEIGHBOR => shape::resize(op, code == B::RESIZE_BILINEAR, ctx.pool()),
        B::SHAPE => shape::shape(op),
        B::FILL | B::ZEROS_LIKE => shape::fill(op, code == B::ZEROS_LIKE),

        B::MEAN | B::SUM | B::REDUCE_MAX | B::REDUCE_MIN | B::REDUCE_PROD => reduce::reduce(op, code),
        B::ARG_MAX | B::ARG_MIN => reduce::arg_minmax(op, code == B::ARG_MAX),

        B::DEQUANTIZE => convert::dequantize(op),
        B::DENSIFY => convert::densify(op),
        B::CAST => convert::cast(op),
        _ => Err(op.unsupported("no CPU kernel for this op yet")),
    }
}

/// True for float activations with int8 weights (dynamic-range quantization).
fn is_hybrid(op: &OpContext<'_>) -> bool {
    op.opt_input(0).is_some_and(|d| d.dtype == DType::F32) && op.opt_input(1).is_some_and(|d| d.dtype == DType::I8)
}

/// True when the op's first input holds quantized integers.
fn is_int(op: &OpContext<'_>) -> bool {
    op.opt_input(0).is_some_and(|d| matches!(d.dtype, DType::I8 | DType::U8 | DType::I16))
}

/// Clamp range of a fused activation. LiteRT's builtin kernels turn a fused TANH or
/// SIGN_BIT into an unbounded range (they are not applied), and LiteRT is the
/// reference ferrite matches, so they clamp nothing here too (tested in conformance).
pub(crate) fn clamp_of(_op: &OpContext<'_>, a: Activation) -> Result<Clamp> {
    Ok(match a {
        Activation::Relu => Clamp::RELU,
        Activation::Relu6 => Clamp::RELU6,
        Activation::ReluN1To1 => Clamp::RELU_N1_TO_1,
        Activation::None | Activation::Tanh | Activation::SignBit => Clamp::NONE,
    })
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

/// A kernel body run on one chunk: (chunk index, its output rows, its output) -> ok.
pub(crate) type RowTask<'a> = dyn Fn(usize, std::ops::Range<usize>, &mut [f32]) -> bool + Sync + 'a;

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
    let granule = granule.max(1);
    let units = rows.div_ceil(granule);
    // Chunk `i` of the rows, in whole granules (the last one possibly short).
    let chunk = |rows: usize, parts: usize, i: usize| {
        let u = ferrite_kernels::parallel::chunk(units, parts, i);
        (u.start * granule).min(rows)..(u.end * granule).min(rows)
    };
    let parts = match pool {
        Some(p) if flops >= PARALLEL_MIN_FLOPS => p.threads().min(units),
        _ => 1,
    };
    let ok = match pool {
        Some(p) if parts > 1 => {
            let mut pieces: smallvec::SmallVec<[std::sync::Mutex<&mut [f32]>; 8]> = smallvec::SmallVec::new();
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
                if !f(i, chunk(rows, parts, i), &mut o) {
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
