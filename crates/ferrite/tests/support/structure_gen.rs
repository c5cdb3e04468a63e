//! A structure-aware generator of hostile models, shared by `structure_fuzz.rs` (the
//! seeded fuzzer) and `structure_fuzz_regressions.rs` (the failures it found).
//!
//! Bit flips of real models (`corruption.rs`) rarely get past the loader's checks;
//! these models are well-formed flatbuffers written with the project's own writer,
//! so they reach the op builders and kernels with wrong arity, omitted inputs,
//! every element type, zero / huge / rank-0 / high-rank shapes, inconsistent
//! quantization, wrong or missing options, out-of-range axes and subgraph indices,
//! and chains of 1-4 ops. Each model is tiny, so thousands run per second.
//!
//! Control flow: a generated WHILE never loops long. Its loop variable is a
//! constant 0 and its condition `x < 3` (or a constant false), so a hostile
//! model cannot spend the executor's MAX_WHILE_ITERATIONS (10^7) per run; the
//! hostile variants are in the subgraph indices (missing, recursive) instead.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrite::{Model, Session, SessionOptions};
use ferrite_format::schema::{BuiltinOptions, TensorType as T};
use ferrite_format::writer::{Activation, BuiltinOperator as B, HloOptions, ModelSpec, OpCode, Options, Padding, TensorSpec};

/// Arena limit of every fuzzed session: legitimate-but-huge models end in a
/// resource-limit error instead of an allocation.
pub const MAX_ARENA_BYTES: usize = 64 << 20;

/// No single allocation may exceed this while a fuzzed model runs: the session limit
/// is 64 MiB, so anything near this size was sized by unchecked file data.
const ALLOCATION_CAP: usize = 256 << 20;

/// The seed being run (u64::MAX outside the fuzzer), for the report of an allocation over the cap.
pub static CURRENT_SEED: AtomicU64 = AtomicU64::new(u64::MAX);

/// The system allocator, refusing (with the seed, then an abort) any allocation over
/// [`ALLOCATION_CAP`]. An absurd allocation would otherwise abort the test binary
/// without saying which model asked for it, or succeed lazily and go unnoticed.
struct Capped;

impl Capped {
    fn check(size: usize) {
        if size > ALLOCATION_CAP {
            // Formatting integers into stderr does not allocate.
            let _ = writeln!(
                std::io::stderr(),
                "structure_fuzz: seed {} asked for an allocation of {size} bytes (cap {ALLOCATION_CAP})",
                CURRENT_SEED.load(Ordering::Relaxed)
            );
            // The capture's own allocations are small and pass the check.
            let _ = writeln!(std::io::stderr(), "{}", std::backtrace::Backtrace::force_capture());
            std::process::abort();
        }
    }
}

// SAFETY: forwards to `System` unchanged; only the size check is added.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        // SAFETY: the caller's contract for this call is the one `System` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        // SAFETY: the caller's contract for this call is the one `System` requires.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::check(new_size);
        // SAFETY: the caller's contract for this call is the one `System` requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for this call is the one `System` requires.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

/// xorshift64* PRNG: small, seedable, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Spread small seeds and avoid the all-zero state.
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        if s == 0 {
            s = 1;
        }
        let mut r = Rng(s);
        r.next();
        r
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// True with probability `pct`/100.
    pub fn pct(&mut self, pct: usize) -> bool {
        self.below(100) < pct
    }
    pub fn pick<'a, X>(&mut self, xs: &'a [X]) -> &'a X {
        &xs[self.below(xs.len())]
    }
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as usize) as i64
    }
}

/// Every builtin the CPU backend dispatches (backend/cpu/mod.rs) plus the ones the
/// compiler runs itself (control flow, resource variables), with the arity of the
/// well-formed op: (code, inputs, outputs). The generator gets the arity right most
/// of the time so models reach the kernels, and wrong on purpose otherwise.
pub const OPS: &[(B, usize, usize)] = &[
    (B::CONV_2D, 3, 1),
    (B::DEPTHWISE_CONV_2D, 3, 1),
    (B::FULLY_CONNECTED, 3, 1),
    (B::TRANSPOSE_CONV, 4, 1),
    (B::BATCH_MATMUL, 2, 1),
    (B::AVERAGE_POOL_2D, 1, 1),
    (B::MAX_POOL_2D, 1, 1),
    (B::SOFTMAX, 1, 1),
    (B::LOG_SOFTMAX, 1, 1),
    (B::QUANTIZE, 1, 1),
    (B::DEQUANTIZE, 1, 1),
    (B::DENSIFY, 1, 1),
    (B::CAST, 1, 1),
    (B::ADD, 2, 1),
    (B::SUB, 2, 1),
    (B::MUL, 2, 1),
    (B::DIV, 2, 1),
    (B::MAXIMUM, 2, 1),
    (B::MINIMUM, 2, 1),
    (B::SQUARED_DIFFERENCE, 2, 1),
    (B::POW, 2, 1),
    (B::FLOOR_DIV, 2, 1),
    (B::FLOOR_MOD, 2, 1),
    (B::PRELU, 2, 1),
    (B::LESS, 2, 1),
    (B::LESS_EQUAL, 2, 1),
    (B::GREATER, 2, 1),
    (B::GREATER_EQUAL, 2, 1),
    (B::EQUAL, 2, 1),
    (B::NOT_EQUAL, 2, 1),
    (B::LOGICAL_AND, 2, 1),
    (B::LOGICAL_OR, 2, 1),
    (B::LOGICAL_NOT, 1, 1),
    (B::SELECT, 3, 1),
    (B::SELECT_V2, 3, 1),
    (B::ABS, 1, 1),
    (B::NEG, 1, 1),
    (B::EXP, 1, 1),
    (B::LOG, 1, 1),
    (B::SQRT, 1, 1),
    (B::RSQRT, 1, 1),
    (B::SQUARE, 1, 1),
    (B::TANH, 1, 1),
    (B::LOGISTIC, 1, 1),
    (B::RELU, 1, 1),
    (B::RELU6, 1, 1),
    (B::RELU_N1_TO_1, 1, 1),
    (B::RELU_0_TO_1, 1, 1),
    (B::HARD_SWISH, 1, 1),
    (B::LEAKY_RELU, 1, 1),
    (B::ELU, 1, 1),
    (B::FLOOR, 1, 1),
    (B::CEIL, 1, 1),
    (B::ROUND, 1, 1),
    (B::SIN, 1, 1),
    (B::COS, 1, 1),
    (B::GELU, 1, 1),
    (B::SIGN, 1, 1),
    (B::RESHAPE, 2, 1),
    (B::SQUEEZE, 1, 1),
    (B::EXPAND_DIMS, 2, 1),
    (B::CONCATENATION, 2, 1),
    (B::PACK, 2, 1),
    (B::UNPACK, 1, 2),
    (B::SPLIT, 2, 2),
    (B::SPLIT_V, 3, 2),
    (B::SLICE, 3, 1),
    (B::STRIDED_SLICE, 4, 1),
    (B::TRANSPOSE, 2, 1),
    (B::PAD, 2, 1),
    (B::PADV2, 3, 1),
    (B::GATHER, 2, 1),
    (B::TILE, 2, 1),
    (B::BROADCAST_TO, 2, 1),
    (B::DEPTH_TO_SPACE, 1, 1),
    (B::SPACE_TO_DEPTH, 1, 1),
    (B::RESIZE_BILINEAR, 2, 1),
    (B::RESIZE_NEAREST_NEIGHBOR, 2, 1),
    (B::SHAPE, 1, 1),
    (B::FILL, 2, 1),
    (B::ZEROS_LIKE, 1, 1),
    (B::MEAN, 2, 1),
    (B::SUM, 2, 1),
    (B::REDUCE_MAX, 2, 1),
    (B::REDUCE_MIN, 2, 1),
    (B::REDUCE_PROD, 2, 1),
    (B::ARG_MAX, 2, 1),
    (B::ARG_MIN, 2, 1),
    (B::GATHER_ND, 2, 1),
    (B::SCATTER_ND, 3, 1),
    (B::DYNAMIC_UPDATE_SLICE, 3, 1),
    (B::EMBEDDING_LOOKUP, 2, 1),
    (B::TOPK_V2, 2, 2),
    (B::ONE_HOT, 4, 1),
    (B::RANGE, 3, 1),
    (B::CUMSUM, 2, 1),
    (B::ADD_N, 3, 1),
    (B::RANK, 1, 1),
    (B::REDUCE_ALL, 2, 1),
    (B::REDUCE_ANY, 2, 1),
    (B::REVERSE_SEQUENCE, 2, 1),
    (B::SPARSE_TO_DENSE, 4, 1),
    (B::RANDOM_UNIFORM, 1, 1),
    (B::RANDOM_STANDARD_NORMAL, 1, 1),
    (B::MULTINOMIAL, 2, 1),
    (B::BUCKETIZE, 1, 1),
    (B::FAKE_QUANT, 1, 1),
    (B::EMBEDDING_LOOKUP_SPARSE, 5, 1),
    (B::L2_POOL_2D, 1, 1),
    (B::IF, 2, 1),
    (B::WHILE, 1, 1),
    (B::CALL_ONCE, 0, 0),
    (B::VAR_HANDLE, 0, 1),
    (B::READ_VARIABLE, 1, 1),
    (B::ASSIGN_VARIABLE, 2, 0),
    (B::STABLEHLO_GATHER, 2, 1),
    (B::STABLEHLO_SCATTER, 3, 1),
];

/// Which op inputs are small integer parameter tensors (axes, shapes, paddings,
/// begin/end/strides, sizes), generated as int32 constants most of the time.
fn int_param(op: B, k: usize) -> bool {
    matches!(
        (op, k),
        (B::RESHAPE | B::EXPAND_DIMS | B::TRANSPOSE | B::PAD | B::PADV2 | B::TILE | B::BROADCAST_TO, 1)
            | (B::RESIZE_BILINEAR | B::RESIZE_NEAREST_NEIGHBOR | B::GATHER, 1)
            | (B::MEAN | B::SUM | B::REDUCE_MAX | B::REDUCE_MIN | B::REDUCE_PROD | B::ARG_MAX | B::ARG_MIN | B::REDUCE_ALL | B::REDUCE_ANY, 1)
            | (B::REVERSE_SEQUENCE, 1)
            | (B::SPARSE_TO_DENSE, 0 | 1)
            | (B::RANDOM_UNIFORM | B::RANDOM_STANDARD_NORMAL, 0)
            | (B::MULTINOMIAL, 1)
            | (B::EMBEDDING_LOOKUP_SPARSE, 0..=2)
            | (B::SPLIT | B::FILL | B::TRANSPOSE_CONV, 0)
            | (B::SPLIT_V, 1 | 2)
            | (B::SLICE, 1 | 2)
            | (B::STRIDED_SLICE, 1..=3)
            | (B::GATHER_ND | B::TOPK_V2 | B::ONE_HOT | B::CUMSUM | B::STABLEHLO_GATHER | B::STABLEHLO_SCATTER, 1)
            | (B::SCATTER_ND, 0 | 2)
            | (B::DYNAMIC_UPDATE_SLICE, 2)
            | (B::EMBEDDING_LOOKUP, 0)
            | (B::RANGE, 0..=2)
    )
}

/// Ops whose input 1 (and 2) are weights / bias: constants most of the time.
fn weight_input(op: B, k: usize) -> bool {
    matches!((op, k), (B::CONV_2D | B::DEPTHWISE_CONV_2D | B::FULLY_CONNECTED, 1 | 2) | (B::TRANSPOSE_CONV, 1 | 3) | (B::PRELU, 1) | (B::BATCH_MATMUL, 1))
}

const QUANT_TYPES: &[T] = &[T::INT8, T::UINT8, T::INT16];

fn dtype(rng: &mut Rng) -> T {
    match rng.below(100) {
        0..=39 => T::FLOAT32,
        40..=54 => T::INT8,
        55..=62 => T::UINT8,
        63..=69 => T::INT16,
        70..=79 => T::INT32,
        80..=84 => T::INT64,
        85..=89 => T::BOOL,
        90..=92 => T::FLOAT16,
        _ => *rng.pick(&[T::STRING, T::COMPLEX64, T::UINT32, T::UINT16, T::FLOAT64, T::INT4, T::RESOURCE, T::UINT64, T::VARIANT]),
    }
}

fn elem_size(t: T) -> usize {
    match t {
        T::FLOAT32 | T::INT32 | T::UINT32 | T::RESOURCE => 4,
        T::FLOAT16 | T::INT16 | T::UINT16 => 2,
        T::INT64 | T::UINT64 | T::FLOAT64 | T::COMPLEX64 => 8,
        T::COMPLEX128 => 16,
        _ => 1,
    }
}

fn dim(rng: &mut Rng) -> i32 {
    match rng.below(100) {
        0..=69 => rng.range(1, 4) as i32,
        70..=79 => rng.range(5, 9) as i32,
        80..=87 => 0,
        88..=97 => *rng.pick(&[16, 31, 64, 255]),
        // Huge dims: alone they exceed the arena limit, together their product overflows.
        _ => *rng.pick(&[1 << 16, 1 << 20, 1 << 24, i32::MAX, 46341, 1 << 30]),
    }
}

fn shape(rng: &mut Rng) -> Vec<i32> {
    let rank = match rng.below(100) {
        0..=9 => 0,
        10..=24 => 1,
        25..=39 => 2,
        40..=54 => 3,
        55..=89 => 4,
        90..=95 => rng.range(5, 6) as usize,
        _ => rng.range(7, 9) as usize,
    };
    (0..rank).map(|_| dim(rng)).collect()
}

fn scale(rng: &mut Rng) -> f32 {
    // Invalid scales end at load, so they are rarer than extreme valid ones, which
    // reach the kernels' range and multiplier arithmetic.
    match rng.below(200) {
        0..=169 => [0.5f32, 0.1, 0.02, 0.0039, 1.0, 0.25][rng.below(6)],
        170..=189 => *rng.pick(&[1e-30, 1e30, f32::MAX, f32::MIN_POSITIVE, 1e-9, 1e9, 3e-5]),
        _ => *rng.pick(&[0.0, f32::NAN, f32::INFINITY, -0.5, 1e-40, f32::NEG_INFINITY]),
    }
}

fn zero_point(rng: &mut Rng, t: T) -> i64 {
    let (lo, hi) = match t {
        T::INT8 => (-128, 127),
        T::UINT8 => (0, 255),
        T::INT16 => (-32768, 32767),
        _ => (-10, 10),
    };
    match rng.below(200) {
        0..=119 => 0.clamp(lo, hi),
        120..=195 => rng.range(lo, hi),
        196 => hi + 1,
        197 => lo - 1,
        198 => i64::MAX,
        _ => i64::MIN,
    }
}

/// Quantization parameters for a tensor of this type and shape: sane most of the
/// time for quantized types, hostile otherwise.
fn quant(rng: &mut Rng, t: T, shape: &[i32]) -> Option<(Vec<f32>, Vec<i64>, i32)> {
    let quantized = QUANT_TYPES.contains(&t);
    if !(quantized && rng.pct(90) || rng.pct(5)) {
        return None;
    }
    let rank = shape.len() as i32;
    if rng.pct(80) {
        return Some((vec![scale(rng)], vec![zero_point(rng, t)], 0));
    }
    // Per-channel: right or wrong length along a right or wrong dimension.
    let axis = match rng.below(40) {
        0 => -1,
        1 => rank + rng.range(0, 2) as i32,
        _ => {
            if rank == 0 {
                0
            } else {
                rng.below(rank as usize) as i32
            }
        }
    };
    let channels = shape.get(axis.max(0) as usize).copied().unwrap_or(1).clamp(0, 64) as usize;
    let n = match rng.below(10) {
        0 => 0,
        1 => channels + 1,
        2 => channels.saturating_sub(1),
        3 => 2,
        _ => channels,
    };
    let scales = (0..n).map(|_| scale(rng)).collect();
    let zps = if rng.pct(3) { vec![0; n + 1] } else { (0..n).map(|_| if rng.pct(80) { 0 } else { zero_point(rng, t) }).collect() };
    Some((scales, zps, axis))
}

fn numel(shape: &[i32]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| usize::try_from(d).ok().and_then(|d| a.checked_mul(d)))
}

/// Random bytes for a constant of `numel` elements of `t`, sometimes of the wrong length.
fn const_data(rng: &mut Rng, t: T, n: usize) -> Vec<u8> {
    let mut len = n * elem_size(t);
    if rng.pct(3) {
        len = if rng.pct(50) { len / 2 } else { len + 1 };
    }
    let mut v = Vec::with_capacity(len);
    for _ in 0..len {
        v.push(rng.next() as u8);
    }
    if t == T::FLOAT32 && v.len().is_multiple_of(4) && rng.pct(80) {
        // Mostly ordinary floats, so data-dependent paths see plausible values.
        for c in v.chunks_exact_mut(4) {
            let f = (rng.below(2001) as f32 - 1000.0) / 250.0;
            c.copy_from_slice(&f.to_le_bytes());
        }
    }
    if t == T::BOOL {
        v.iter_mut().for_each(|b| *b &= 1);
    }
    v
}

/// An integer parameter tensor (axis, shape, paddings, ...), mostly small values.
fn int_tensor(rng: &mut Rng, m: &mut ModelSpec, name: &str, rank_hint: usize) -> i32 {
    let len = match rng.below(10) {
        0 => 0,
        1 => 1,
        2 => rank_hint * 2,
        3 => rng.range(1, 9) as usize,
        _ => rank_hint.max(1),
    };
    let vals: Vec<i32> = (0..len)
        .map(|_| match rng.below(100) {
            0..=59 => rng.range(0, 3) as i32,
            60..=74 => rng.range(-4, -1) as i32,
            75..=89 => rng.range(4, 9) as i32,
            90..=94 => *rng.pick(&[1 << 16, 1 << 20, 1 << 30]),
            _ => *rng.pick(&[i32::MAX, i32::MIN, -1 << 30]),
        })
        .collect();
    let shape: Vec<i32> = match rng.below(10) {
        0 => vec![],
        1 => vec![1, len as i32],
        _ => vec![len as i32],
    };
    let shape = if shape.is_empty() && len != 1 { vec![len as i32] } else { shape };
    if rng.pct(10) {
        // Int64 parameters, or a parameter computed at run time.
        if rng.pct(50) {
            let data = vals.iter().flat_map(|&v| i64::from(v).to_le_bytes()).collect();
            return m.add_tensor(TensorSpec { data: Some(data), ..TensorSpec::activation(name, T::INT64, &shape) });
        }
        return m.add_tensor(TensorSpec::activation(name, T::INT32, &shape));
    }
    m.add_tensor(TensorSpec::const_i32(name, &shape, &vals))
}

fn activation(rng: &mut Rng) -> Activation {
    match rng.below(20) {
        0..=11 => Activation::NONE,
        12 | 13 => Activation::RELU,
        14 | 15 => Activation::RELU6,
        16 => Activation::RELU_N1_TO_1,
        17 => Activation::TANH,
        18 => Activation::SIGN_BIT,
        _ => Activation(rng.range(6, 100) as i8),
    }
}

fn small(rng: &mut Rng) -> i32 {
    match rng.below(20) {
        0 => 0,
        1 => -1,
        2 => i32::MAX,
        3 => rng.range(4, 9) as i32,
        _ => rng.range(1, 3) as i32,
    }
}

fn axis_value(rng: &mut Rng, rank: usize) -> i32 {
    match rng.below(10) {
        0 => rank as i32,
        1 => -(rank as i32) - 1,
        2 => i32::MIN,
        3 => rng.range(-(rank as i64), -1) as i32,
        _ => rng.below(rank.max(1)) as i32,
    }
}

fn padding(rng: &mut Rng) -> Padding {
    match rng.below(10) {
        0..=4 => Padding::SAME,
        5..=8 => Padding::VALID,
        _ => Padding(2),
    }
}

/// Options for `op`: the right kind with random values most of the time, else
/// missing or of another kind.
fn options(rng: &mut Rng, op: B, rank: usize, n_out: usize, subgraphs: usize) -> Options {
    if rng.pct(4) {
        return Options::None;
    }
    if rng.pct(3) {
        // Options of some other op's kind, written as their own table type (the
        // writer refuses these unless told not to check them).
        let pick = rng.below(4);
        return Options::Unchecked(Box::new(match pick {
            0 => Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE },
            1 => Options::Reshape { new_shape: vec![-1] },
            2 => Options::Empty(BuiltinOptions(rng.range(1, 120) as u8)),
            _ => Options::Split { num_splits: 3 },
        }));
    }
    let sg = |rng: &mut Rng| -> i32 {
        match rng.below(10) {
            0 => 0, // recursive: the main graph
            1 => subgraphs as i32 + rng.range(0, 3) as i32,
            2 => -1,
            _ => rng.range(1, subgraphs.max(1) as i64) as i32,
        }
    };
    let stride = |rng: &mut Rng| (small(rng), small(rng));
    match op {
        B::CONV_2D => Options::Conv2D { padding: padding(rng), stride: stride(rng), dilation: stride(rng), activation: activation(rng) },
        B::CONV_3D | B::CONV_3D_TRANSPOSE => {
            let (s, d) = (stride(rng), stride(rng));
            Options::Conv3D { padding: padding(rng), stride: (s.0, s.1, s.0), dilation: (d.0, d.1, d.1), activation: activation(rng) }
        }
        B::DEPTHWISE_CONV_2D => Options::DepthwiseConv2D {
            padding: padding(rng),
            stride: stride(rng),
            dilation: stride(rng),
            depth_multiplier: small(rng),
            activation: activation(rng),
        },
        B::AVERAGE_POOL_2D | B::MAX_POOL_2D | B::L2_POOL_2D => {
            Options::Pool2D { padding: padding(rng), stride: stride(rng), filter: stride(rng), activation: activation(rng) }
        }
        B::FULLY_CONNECTED => Options::FullyConnected { activation: activation(rng), keep_num_dims: rng.pct(30), asymmetric_quantize_inputs: rng.pct(30) },
        B::SOFTMAX => Options::Softmax { beta: *rng.pick(&[1.0, 0.5, 0.0, -1.0, f32::NAN, f32::INFINITY, 1e30]) },
        B::CONCATENATION => Options::Concatenation { axis: axis_value(rng, rank), activation: activation(rng) },
        B::ADD | B::SUB if rng.pct(30) => Options::AddSub { activation: activation(rng), pot_scale_int16: rng.pct(50) },
        B::ADD | B::SUB | B::MUL | B::DIV => Options::Binary { activation: activation(rng) },
        B::RESHAPE => Options::Reshape { new_shape: (0..rng.below(5)).map(|_| rng.range(-2, 6) as i32).collect() },
        B::RESIZE_BILINEAR => Options::Resize { align_corners: rng.pct(30), half_pixel_centers: rng.pct(30) },
        B::RESIZE_NEAREST_NEIGHBOR => Options::ResizeNearest { align_corners: rng.pct(30), half_pixel_centers: rng.pct(30) },
        B::DEPTH_TO_SPACE | B::SPACE_TO_DEPTH => Options::BlockSize(small(rng)),
        B::GATHER => Options::Gather { axis: axis_value(rng, rank), batch_dims: rng.range(-2, 3) as i32 },
        B::MEAN | B::SUM | B::REDUCE_MAX | B::REDUCE_MIN | B::REDUCE_PROD | B::REDUCE_ALL | B::REDUCE_ANY => Options::Reducer { keep_dims: rng.pct(50) },
        B::REVERSE_SEQUENCE => Options::ReverseSequence { seq_dim: rng.range(-1, rank as i64) as i32, batch_dim: rng.range(-1, rank as i64) as i32 },
        B::SPARSE_TO_DENSE => Options::SparseToDense { validate_indices: rng.pct(50) },
        B::RANDOM_UNIFORM | B::RANDOM_STANDARD_NORMAL | B::MULTINOMIAL => Options::Random { seed: rng.range(-3, 3), seed2: rng.range(-3, 3) },
        B::BUCKETIZE => Options::Bucketize { boundaries: (0..rng.below(5)).map(|_| *rng.pick(&[0.0, f32::NAN, 1.0, -1.0, f32::INFINITY])).collect() },
        B::FAKE_QUANT => Options::FakeQuant {
            min: *rng.pick(&[0.0, -1.0, f32::NAN, 1e30]),
            max: *rng.pick(&[0.0, 1.0, f32::INFINITY, -1.0]),
            num_bits: rng.range(-1, 40) as i32,
            narrow_range: rng.pct(30),
        },
        B::EMBEDDING_LOOKUP_SPARSE => Options::EmbeddingLookupSparse { combiner: rng.range(-1, 4) as i8 },
        B::SQUEEZE => Options::Squeeze { dims: (0..rng.below(3)).map(|_| axis_value(rng, rank)).collect() },
        B::SPLIT | B::SPLIT_V => Options::Split { num_splits: if rng.pct(80) { n_out as i32 } else { small(rng) } },
        B::STRIDED_SLICE => Options::StridedSlice {
            begin_mask: rng.below(16) as i32,
            end_mask: rng.below(16) as i32,
            ellipsis_mask: if rng.pct(20) { rng.below(16) as i32 } else { 0 },
            new_axis_mask: if rng.pct(20) { rng.below(16) as i32 } else { 0 },
            shrink_axis_mask: if rng.pct(30) { rng.below(16) as i32 } else { 0 },
            offset: rng.pct(20),
        },
        B::ARG_MAX | B::ARG_MIN => Options::ArgMinMax { output_type: *rng.pick(&[T::INT32, T::INT64, T::INT64, T::INT8, T::FLOAT32]) },
        B::TRANSPOSE_CONV => Options::TransposeConv { padding: padding(rng), stride: stride(rng), activation: activation(rng) },
        B::SHAPE => Options::Shape { out_type: *rng.pick(&[T::INT32, T::INT64, T::INT16, T::FLOAT32]) },
        B::PACK => Options::Pack { values_count: if rng.pct(80) { 2 } else { small(rng) }, axis: axis_value(rng, rank + 1) },
        B::UNPACK => Options::Unpack { num: if rng.pct(70) { n_out as i32 } else { small(rng) }, axis: axis_value(rng, rank) },
        B::LEAKY_RELU => Options::LeakyRelu { alpha: *rng.pick(&[0.2, -1.0, 0.0, f32::NAN, 1e30, f32::INFINITY]) },
        B::BATCH_MATMUL => Options::BatchMatMul { adj_x: rng.pct(30), adj_y: rng.pct(30), asymmetric_quantize_inputs: rng.pct(20) },
        B::IF => Options::If { then_subgraph: sg(rng), else_subgraph: sg(rng) },
        B::WHILE => Options::While { cond_subgraph: sg(rng), body_subgraph: sg(rng) },
        // Dimension numbers of any length: out of range, repeated, negative, huge.
        B::STABLEHLO_GATHER => {
            let dims = |rng: &mut Rng| (0..rng.below(5)).map(|_| i64::from(axis_value(rng, rank))).collect::<Vec<_>>();
            Options::Hlo(HloOptions::Gather {
                offset_dims: dims(rng),
                collapsed_slice_dims: dims(rng),
                start_index_map: dims(rng),
                index_vector_dim: i64::from(axis_value(rng, rank)),
                slice_sizes: (0..rng.below(5)).map(|_| i64::from(small(rng))).collect(),
                indices_are_sorted: rng.pct(50),
            })
        }
        B::STABLEHLO_SCATTER => {
            let dims = |rng: &mut Rng| (0..rng.below(5)).map(|_| i64::from(axis_value(rng, rank))).collect::<Vec<_>>();
            Options::Hlo(HloOptions::Scatter {
                update_window_dims: dims(rng),
                inserted_window_dims: dims(rng),
                scatter_dims_to_operand_dims: dims(rng),
                index_vector_dim: i64::from(axis_value(rng, rank)),
                indices_are_sorted: rng.pct(50),
                unique_indices: rng.pct(50),
                update_computation_subgraph_index: sg(rng),
            })
        }
        B::CALL_ONCE => Options::CallOnce { init_subgraph: sg(rng) },
        B::VAR_HANDLE => Options::VarHandle { container: String::new(), shared_name: format!("v{}", rng.below(3)) },
        B::GELU => Options::Gelu { approximate: rng.pct(50) },
        B::ONE_HOT => Options::OneHot { axis: axis_value(rng, rank + 1) },
        B::CUMSUM => Options::Cumsum { exclusive: rng.pct(50), reverse: rng.pct(50) },
        _ => Options::None,
    }
}

fn tensor(rng: &mut Rng, name: String, t: T, shape: Vec<i32>) -> TensorSpec {
    let q = quant(rng, t, &shape);
    TensorSpec { quant: q, ..TensorSpec::activation(&name, t, &shape) }
}

/// A shape for a weight input of `op` related to the data input's shape, so convolutions
/// and fully-connected layers often get consistent operands.
fn weight_shape(rng: &mut Rng, op: B, k: usize, x: &[i32]) -> Vec<i32> {
    if rng.pct(25) {
        return shape(rng);
    }
    let c = x.last().copied().unwrap_or(1).clamp(0, 64);
    let o = rng.range(1, 4) as i32;
    let kh = rng.range(1, 3) as i32;
    match (op, k) {
        (B::CONV_2D, 1) => vec![o, kh, kh, c],
        (B::DEPTHWISE_CONV_2D, 1) => vec![1, kh, kh, c * rng.range(1, 2) as i32],
        (B::FULLY_CONNECTED, 1) => vec![o, c],
        (B::CONV_2D | B::DEPTHWISE_CONV_2D | B::FULLY_CONNECTED, 2) => vec![*rng.pick(&[o, c, 1, 0, c + 1])],
        (B::TRANSPOSE_CONV, 1) => vec![o, kh, kh, c],
        (B::TRANSPOSE_CONV, 3) => vec![o],
        (B::PRELU, _) => vec![c],
        (B::BATCH_MATMUL, _) => {
            let mut s = x.to_vec();
            if let Some(l) = s.last_mut() {
                *l = o;
            }
            let r = s.len();
            if r >= 2 {
                s[r - 2] = c;
            }
            s
        }
        _ => shape(rng),
    }
}

/// A quantized weight type matching the data input mostly.
fn weight_type(rng: &mut Rng, op: B, k: usize, x: T) -> T {
    if rng.pct(15) {
        return dtype(rng);
    }
    let bias = matches!((op, k), (B::CONV_2D | B::DEPTHWISE_CONV_2D | B::FULLY_CONNECTED, 2) | (B::TRANSPOSE_CONV, 3));
    match x {
        T::INT8 | T::UINT8 if bias => T::INT32,
        T::INT16 if bias => T::INT64,
        T::FLOAT32 if !bias && rng.pct(20) => T::INT8, // hybrid
        t => t,
    }
}

struct Graph {
    spec: ModelSpec,
    /// Tensors ops may read: (index, dtype, shape).
    pool: Vec<(i32, T, Vec<i32>)>,
}

impl Graph {
    fn fresh(&mut self, rng: &mut Rng, name: &str) -> (i32, T, Vec<i32>) {
        let t = dtype(rng);
        let s = shape(rng);
        let mut spec = tensor(rng, name.to_string(), t, s.clone());
        if rng.pct(15) {
            // Dims unknown until run time: `exercise` resizes them, which sends ops down
            // the run-time (data-dependent) build path too.
            spec.shape_signature = Some(s.iter().map(|&d| if rng.pct(50) { -1 } else { d }).collect());
        }
        let i = self.spec.add_tensor(spec);
        (i, t, s)
    }
}

/// A small subgraph for IF / WHILE / CALL_ONCE to call: a pass-through of its inputs,
/// a one-op body, or a loop condition `x < 3`.
fn child_graph(rng: &mut Rng, k: usize) -> ModelSpec {
    let mut g = ModelSpec::default();
    let kind = (k + rng.below(3)) % 4;
    let t = match rng.below(10) {
        // A pass-through of int32 would be a WHILE body that never moves the
        // counter, a 10^7-iteration loop: pass-throughs carry other types.
        _ if kind == 0 => *rng.pick(&[T::FLOAT32, T::INT8, T::BOOL, T::INT64]),
        0..=6 => T::INT32,
        _ => dtype(rng),
    };
    let x = g.add_tensor(TensorSpec::activation("x", t, &[]));
    g.inputs = vec![x];
    match kind {
        0 => g.outputs = vec![x],
        1 => {
            // Loop condition x < 3.
            let three = g.add_tensor(TensorSpec::const_i32("three", &[], &[3]));
            let c = g.add_tensor(TensorSpec::activation("c", T::BOOL, &[]));
            g.add_op(OpCode::Builtin(B::LESS), &[x, three], &[c], Options::None);
            g.outputs = vec![c];
        }
        2 => {
            // Loop body x + 1.
            let one = g.add_tensor(TensorSpec::const_i32("one", &[], &[1]));
            let y = g.add_tensor(TensorSpec::activation("y", t, &[]));
            g.add_op(OpCode::Builtin(B::ADD), &[x, one], &[y], Options::Binary { activation: Activation::NONE });
            g.outputs = vec![y];
        }
        _ => {
            // A constant false condition, or no inputs and no outputs (CALL_ONCE).
            if rng.pct(50) {
                let f = g.add_tensor(TensorSpec { data: Some(vec![0]), ..TensorSpec::activation("f", T::BOOL, &[]) });
                g.outputs = vec![f];
            } else {
                g.inputs.clear();
            }
        }
    }
    g
}

/// Builds the model for `seed`: returns the file bytes and a one-line description.
pub fn generate(seed: u64) -> (Vec<u8>, String) {
    let mut rng = Rng::new(seed);
    let rng = &mut rng;
    // Short chains most often: one failing op ends the whole model at prepare.
    let n_ops = match rng.below(10) {
        0..=3 => 1,
        4..=6 => 2,
        7 | 8 => 3,
        _ => 4,
    };
    let ops: Vec<(B, usize, usize)> = (0..n_ops).map(|_| *rng.pick(OPS)).collect();
    // Subgraphs for control flow to call (some of their indices are made wrong in `options`).
    let calls = ops.iter().any(|o| matches!(o.0, B::IF | B::WHILE | B::CALL_ONCE));
    let n_sub = if calls {
        rng.range(2, 4) as usize
    } else if rng.pct(3) {
        1
    } else {
        0
    };
    let mut g = Graph { spec: ModelSpec::default(), pool: Vec::new() };
    for k in 0..n_sub {
        g.spec.subgraphs.push(child_graph(rng, k));
    }
    let n_inputs = rng.range(1, 3);
    for k in 0..n_inputs {
        let t = g.fresh(rng, &format!("in{k}"));
        g.pool.push(t);
    }
    let mut last_outputs: Vec<(i32, T, Vec<i32>)> = Vec::new();
    for (oi, &(op, n_in, n_out)) in ops.iter().enumerate() {
        // Arity: right most of the time; one more, one fewer, none, or many otherwise.
        let n_in = match rng.below(20) {
            0 => n_in.saturating_sub(1),
            1 => n_in + 1,
            2 => 0,
            _ if matches!(op, B::CONCATENATION | B::PACK) => rng.range(1, 4) as usize,
            _ => n_in,
        };
        let n_out = match rng.below(20) {
            0 => 0,
            1 => n_out.saturating_sub(1),
            2 => n_out + 1,
            _ if matches!(op, B::UNPACK | B::SPLIT | B::SPLIT_V) => rng.range(1, 4) as usize,
            _ => n_out,
        };
        // The data input: the previous op's output (a chain) or any pooled tensor.
        let mut x = if !last_outputs.is_empty() && rng.pct(70) { rng.pick(&last_outputs).clone() } else { rng.pick(&g.pool).clone() };
        if matches!(op, B::LOGICAL_AND | B::LOGICAL_OR | B::LOGICAL_NOT | B::SELECT | B::SELECT_V2) && x.1 != T::BOOL && rng.pct(70) {
            // Logical ops and SELECT's condition want bools.
            let s = if rng.pct(70) { x.2.clone() } else { shape(rng) };
            let i = g.spec.add_tensor(TensorSpec::activation(&format!("op{oi}_bool"), T::BOOL, &s));
            x = (i, T::BOOL, s);
        }
        let x_index = if matches!(op, B::SPLIT) {
            1
        } else if op == B::WHILE {
            usize::MAX // every loop variable is a constant (below)
        } else if op == B::TRANSPOSE_CONV {
            2
        } else {
            0
        };
        let mut inputs = Vec::with_capacity(n_in);
        for k in 0..n_in {
            let name = format!("op{oi}_in{k}");
            let idx = if k == x_index {
                x.0
            } else if rng.pct(5) {
                -1 // omitted optional input
            } else if int_param(op, k) && rng.pct(85) {
                int_tensor(rng, &mut g.spec, &name, x.2.len())
            } else if weight_input(op, k) && rng.pct(85) {
                let t = weight_type(rng, op, k, x.1);
                let s = weight_shape(rng, op, k, &x.2);
                let mut spec = tensor(rng, name, t, s.clone());
                if rng.pct(85) {
                    if let Some(n) = numel(&s).filter(|&n| n <= 4096) {
                        spec.data = Some(const_data(rng, t, n));
                    }
                }
                g.spec.add_tensor(spec)
            } else if matches!(op, B::WHILE) {
                // Loop variables start at 0 so `x < 3` stops after three iterations: a
                // run-time start value could make the loop run MAX_WHILE_ITERATIONS
                // (10^7, seconds) times, which the executor allows by design.
                g.spec.add_tensor(TensorSpec::const_i32(&name, &[], &[0]))
            } else if rng.pct(50) {
                rng.pick(&g.pool).0
            } else if matches!(op, B::IF) && k == 0 {
                g.spec.add_tensor(TensorSpec { data: Some(vec![rng.below(2) as u8]), ..TensorSpec::activation(&name, T::BOOL, &[]) })
            } else {
                // A same-shaped operand (broadcast-compatible) or a fresh one.
                let (t, s) = if rng.pct(60) { (x.1, x.2.clone()) } else { (dtype(rng), shape(rng)) };
                let mut spec = tensor(rng, name, t, s.clone());
                if rng.pct(40) {
                    if let Some(n) = numel(&s).filter(|&n| n <= 4096) {
                        spec.data = Some(const_data(rng, t, n));
                    }
                }
                g.spec.add_tensor(spec)
            };
            inputs.push(idx);
        }
        let mut outputs: Vec<(i32, T, Vec<i32>)> = Vec::with_capacity(n_out);
        for k in 0..n_out {
            let t = match op {
                _ if rng.pct(10) => dtype(rng),
                B::LESS | B::LESS_EQUAL | B::GREATER | B::GREATER_EQUAL | B::EQUAL | B::NOT_EQUAL | B::LOGICAL_AND | B::LOGICAL_OR | B::LOGICAL_NOT => T::BOOL,
                B::ARG_MAX | B::ARG_MIN => *rng.pick(&[T::INT32, T::INT64]),
                B::SHAPE => T::INT32,
                B::DEQUANTIZE => T::FLOAT32,
                B::QUANTIZE => *rng.pick(QUANT_TYPES),
                B::CAST => dtype(rng),
                B::VAR_HANDLE => T::RESOURCE,
                B::WHILE => T::INT32,
                _ => x.1,
            };
            // Declared output shapes are mostly ignored (computed by the builder); keep some random.
            let s = if rng.pct(70) { x.2.clone() } else { shape(rng) };
            let mut spec = tensor(rng, format!("op{oi}_out{k}"), t, s.clone());
            if spec.quant.is_none() && QUANT_TYPES.contains(&t) && rng.pct(50) {
                spec.quant = Some((vec![0.1], vec![0], 0));
            }
            let i = g.spec.add_tensor(spec);
            outputs.push((i, t, s));
        }
        let mut opts = options(rng, op, x.2.len(), n_out, n_sub);
        let mut custom = None;
        let code = if rng.pct(1) {
            // A custom op with the builtin's options table beside its custom options.
            opts = Options::Unchecked(Box::new(opts));
            let name = *rng.pick(&["Convolution2DTransposeBias", "Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks"]);
            if name != "Convolution2DTransposeBias" {
                custom = Some(mediapipe_options(rng));
            }
            OpCode::Custom(name.into())
        } else {
            OpCode::Builtin(op)
        };
        g.spec.add_op(code, &inputs, &outputs.iter().map(|o| o.0).collect::<Vec<_>>(), opts);
        if let (Some((bytes, version)), Some(last)) = (custom, g.spec.ops.last_mut()) {
            last.custom_options = Some(bytes);
            last.version = version;
        }
        g.pool.extend(outputs.iter().cloned());
        if !outputs.is_empty() {
            last_outputs = outputs;
        }
    }
    // Graph inputs: every non-constant tensor no op writes (some left out: those read as zeros).
    let written: Vec<i32> = g.spec.ops.iter().flat_map(|o| o.outputs.iter().copied()).collect();
    let inputs: Vec<i32> = (0..g.spec.tensors.len() as i32)
        .filter(|t| !written.contains(t) && g.spec.tensors[*t as usize].data.is_none() && g.spec.ops.iter().any(|o| o.inputs.contains(t)))
        .filter(|_| rng.pct(95))
        .collect();
    g.spec.inputs = inputs;
    g.spec.outputs = last_outputs.iter().map(|o| o.0).collect();
    if g.spec.outputs.is_empty() || rng.pct(10) {
        g.spec.outputs.push(rng.pick(&g.pool).0);
    }
    let desc = describe(&g.spec);
    // Options of the wrong type are all `Options::Unchecked`: the writer accepts every model.
    let bytes = if rng.pct(5) { g.spec.to_bytes_external() } else { g.spec.to_bytes() }.expect("generated options fit their ops or are unchecked");
    (bytes, desc)
}

fn type_name(t: T) -> String {
    t.variant_name().map(str::to_string).unwrap_or_else(|| format!("type{}", t.0))
}

/// Custom options and op version for one of MediaPipe's landmark ops: mostly a
/// FlexBuffers map of the keys they read with values from sane to hostile
/// (negative, zero, huge, out-of-range indices), sometimes random bytes.
fn mediapipe_options(rng: &mut Rng) -> (Vec<u8>, i32) {
    use ferrite_format::flexbuffers::{encode_map_with_vectors, FlexValue};
    let version = if rng.pct(90) { 2 } else { rng.range(0, 3) as i32 };
    if rng.pct(10) {
        return ((0..rng.below(40)).map(|_| rng.next() as u8).collect(), version);
    }
    let int = |rng: &mut Rng| {
        let small = rng.range(0, 8);
        *rng.pick(&[0i64, 1, 2, 3, 16, -1, 1 << 20, i32::MAX as i64, small])
    };
    let float = |rng: &mut Rng| *rng.pick(&[0.0f64, 1.5, -1.0, 1e30, f64::NAN, 0.25]);
    let subset: Vec<i32> = (0..rng.below(6)).map(|_| int(rng) as i32).collect();
    let scalars = [
        ("left_rotation_idx", FlexValue::Int(int(rng))),
        ("right_rotation_idx", FlexValue::Int(int(rng))),
        ("target_rotation_radians", FlexValue::Float(float(rng))),
        ("output_height", FlexValue::Int(int(rng))),
        ("output_width", FlexValue::Int(int(rng))),
        ("scale_x", FlexValue::Float(float(rng))),
        ("scale_y", FlexValue::Float(float(rng))),
    ];
    (encode_map_with_vectors(&scalars, &[("subset_idxs", &subset)]), version)
}

/// One line per graph: tensors (type, shape, quantization, const) and ops.
pub fn describe(m: &ModelSpec) -> String {
    let mut s = String::new();
    for (gi, g) in std::iter::once(m).chain(m.subgraphs.iter()).enumerate() {
        s.push_str(&format!("subgraph {gi}: inputs {:?} outputs {:?}\n", g.inputs, g.outputs));
        for (i, t) in g.tensors.iter().enumerate() {
            let q = t.quant.as_ref().map(|(sc, zp, ax)| format!(" q(scale {sc:?} zp {zp:?} axis {ax})")).unwrap_or_default();
            let c = t.data.as_ref().map(|d| format!(" const {} bytes", d.len())).unwrap_or_default();
            s.push_str(&format!("  t{i} {} {:?}{q}{c}\n", type_name(t.dtype), t.shape));
        }
        for op in &g.ops {
            let name = match &op.code {
                OpCode::Builtin(b) => b.variant_name().unwrap_or("?").to_string(),
                OpCode::Custom(n) => n.clone(),
            };
            s.push_str(&format!("  {name} {:?} -> {:?} {:?}\n", op.inputs, op.outputs, op.options));
        }
    }
    s
}

/// Loads, prepares, fills inputs with random bytes and runs a model under the fuzz
/// arena limit. Errors are fine; only a panic is returned (as its message).
pub fn exercise(bytes: Vec<u8>, seed: u64) -> Result<Outcome, String> {
    install_quiet_hook();
    QUIET.with(|q| q.set(true));
    let r = catch_unwind(AssertUnwindSafe(|| {
        let model = match Model::from_bytes(Arc::new(bytes)) {
            Ok(m) => m,
            Err(e) => return Outcome::Load(e.to_string()),
        };
        let opts = SessionOptions { max_arena_bytes: MAX_ARENA_BYTES, ..Default::default() };
        let mut s = match Session::with_options(Arc::new(model), opts) {
            Ok(s) => s,
            Err(e) => return Outcome::Prepare(e.to_string()),
        };
        let mut rng = Rng::new(seed ^ 0x5eed);
        // Inputs with unknown dims get new sizes: small, zero or huge.
        for (k, d) in s.inputs().iter().enumerate() {
            if d.shape_signature.iter().any(|&v| v < 0) {
                let shape: Vec<usize> = d
                    .shape_signature
                    .iter()
                    .map(|&v| match (v, rng.below(20)) {
                        (v, _) if v >= 0 => v as usize,
                        (_, 0) => 0,
                        (_, 1) => 1 << 20,
                        (_, 2) => usize::MAX / 2,
                        _ => 1 + rng.below(6),
                    })
                    .collect();
                if let Err(e) = s.resize_input(k, &shape) {
                    return Outcome::Prepare(e.to_string());
                }
            }
        }
        if let Err(e) = s.prepare() {
            return Outcome::Prepare(e.to_string());
        }
        for (k, d) in s.inputs().iter().enumerate() {
            let Some(size) = d.dtype.size() else {
                // A string input holds the caller's buffer, not arena memory, so its
                // shape is not bounded by the arena limit: a few short random strings
                // when the shape is small, none otherwise.
                let count = d.shape.iter().try_fold(1usize, |a, &v| a.checked_mul(v)).filter(|&c| c <= 4096);
                if let Some(c) = count {
                    let items: Vec<Vec<u8>> = (0..c).map(|_| (0..rng.below(6)).map(|_| rng.next() as u8).collect()).collect();
                    let _ = s.set_input_strings(k, &items);
                }
                continue;
            };
            // Prepare planned the arena within the limit, so these sizes are bounded.
            let n = d.shape.iter().product::<usize>() * size;
            let data: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            let _ = s.set_input(k, &data);
        }
        if let Err(e) = s.run() {
            return Outcome::Run(e.to_string());
        }
        for k in 0..s.outputs().len() {
            let _ = s.output(k);
        }
        Outcome::Ok
    }));
    QUIET.with(|q| q.set(false));
    r.map_err(|_| LAST_PANIC.with(|p| p.borrow().clone()))
}

/// How a model ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ok,
    Load(String),
    Prepare(String),
    Run(String),
}

impl Outcome {
    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::Ok => None,
            Outcome::Load(e) | Outcome::Prepare(e) | Outcome::Run(e) => Some(e),
        }
    }
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    /// Set while a model runs: its panics are recorded, not printed.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Records panic messages (with their location) per thread instead of printing them:
/// the fuzzer reports each with its seed and model. Other panics (the test's own
/// assertions) go to the default hook.
fn install_quiet_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                return default(info);
            }
            let msg =
                info.payload().downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| info.payload().downcast_ref::<String>().cloned()).unwrap_or_default();
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            // FERRITE_FUZZ_BACKTRACE=1 adds where the panic came from.
            let trace =
                if std::env::var_os("FERRITE_FUZZ_BACKTRACE").is_some() { format!("\n{}", std::backtrace::Backtrace::force_capture()) } else { String::new() };
            LAST_PANIC.with(|p| *p.borrow_mut() = format!("{msg} at {at}{trace}"));
        }));
    });
}
