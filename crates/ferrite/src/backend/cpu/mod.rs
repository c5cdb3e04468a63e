//! The CPU backend: the optimized kernels of `ferrite-kernels`, one file per op
//! family, each holding its float, int8, uint8, int16x8 and hybrid builders side
//! by side and its own dispatch (`build`); `quant` holds the parameter helpers
//! the integer builders share. The builders check types and shapes and build
//! parameters; the arithmetic on tensor data is in `ferrite-kernels`.

mod activation;
mod conv;
mod convert;
mod elementwise;
mod index;
mod linear;
mod movement;
mod pool;
mod quant;
mod reduce;
mod softmax;

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
    // Each op belongs to one family; the family picks the builder for its types.
    for family in FAMILIES {
        if let Some(built) = family(code, op, ctx) {
            return built;
        }
    }
    Err(op.unsupported("no CPU kernel for this op yet"))
}

/// A family's dispatch: `None` when the op is not one of its ops.
type Family = fn(B, &OpContext<'_>, &mut BackendContext) -> Option<Result<Built>>;

/// The op families, each with its own dispatch.
const FAMILIES: [Family; 10] = [
    conv::build,
    linear::build,
    pool::build,
    softmax::build,
    activation::build,
    elementwise::build,
    reduce::build,
    movement::build,
    index::build,
    convert::build,
];

/// Clamp range of a fused activation. LiteRT's builtin kernels turn a fused TANH or
/// SIGN_BIT into an unbounded range (they are not applied), and LiteRT is the
/// reference ferrite matches, so they clamp nothing here too (tested in conformance).
pub(crate) fn clamp_of(_op: &OpContext<'_>, a: Activation) -> Result<Clamp> {
    Ok(activation_clamp(a))
}

/// [`clamp_of`] without an op: the clamp of a fused activation.
fn activation_clamp(a: Activation) -> Clamp {
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
