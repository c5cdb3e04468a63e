//! Reference float32 kernels and type-agnostic data movement.
//!
//! Every kernel here is written from the op's definition: it visits each output
//! element and computes it from the input elements the definition names, with
//! plain nested loops and flat-index arithmetic. Nothing is blocked, vectorized,
//! threaded or prepacked, so a reader can check a kernel against the op's
//! specification line by line. Sums of products accumulate in f64, so the
//! reference is at least as accurate as any float32 kernel it is compared with.
//!
//! Hostile models: everything a kernel indexes with is checked when the op is
//! built (ranks, shape agreement, sizes through `checked_elements`), and each
//! kernel checks its buffers' lengths before reading them, so no input can make a
//! kernel index out of bounds.

mod elementwise;
mod hlo;
mod hlo_index;
mod index;
mod movement;
mod nn;
mod reduce;
mod sets;
mod spatial;
mod text;

#[cfg(feature = "gpu")]
pub(crate) use movement::strided_slice_plan;

use ferrite_format::ops::BuiltinOp as B;

use crate::backend::{arg, typed, typed_mut, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::{DType, OpCode};
use crate::ops::Activation;

/// Builds a float32 (or data-movement) op, or reports it unsupported.
pub(crate) fn build(op: &OpContext<'_>) -> Result<Built> {
    let OpCode::Builtin(code) = op.op.code else {
        return Err(op.unsupported("custom op: no reference kernel"));
    };
    if let Some(built) = hlo::build(code, op) {
        return built;
    }
    match code {
        B::CONV_2D => nn::conv2d(op),
        B::DEPTHWISE_CONV_2D => nn::depthwise(op),
        B::FULLY_CONNECTED => nn::fully_connected(op),
        B::TRANSPOSE_CONV => nn::transpose_conv(op),
        B::CONV_3D => nn::conv3d(op),
        B::CONV_3D_TRANSPOSE => nn::conv3d_transpose(op),
        B::BATCH_MATMUL => nn::batch_matmul(op),
        B::AVERAGE_POOL_2D => nn::pool(op, nn::Pool::Average),
        B::MAX_POOL_2D => nn::pool(op, nn::Pool::Max),
        B::L2_POOL_2D => nn::pool(op, nn::Pool::L2),
        B::SOFTMAX => nn::softmax(op, false),
        B::LOG_SOFTMAX => nn::softmax(op, true),

        B::ADD => elementwise::binary(op, elementwise::BinaryOp::Add),
        B::SUB => elementwise::binary(op, elementwise::BinaryOp::Sub),
        B::MUL => elementwise::binary(op, elementwise::BinaryOp::Mul),
        B::DIV => elementwise::binary(op, elementwise::BinaryOp::Div),
        B::MAXIMUM => elementwise::binary(op, elementwise::BinaryOp::Maximum),
        B::MINIMUM => elementwise::binary(op, elementwise::BinaryOp::Minimum),
        B::ADD_N => elementwise::add_n(op),
        B::SQUARED_DIFFERENCE => elementwise::binary(op, elementwise::BinaryOp::SquaredDifference),
        B::POW => elementwise::binary(op, elementwise::BinaryOp::Pow),
        B::FLOOR_DIV => elementwise::binary(op, elementwise::BinaryOp::FloorDiv),
        B::FLOOR_MOD => elementwise::binary(op, elementwise::BinaryOp::FloorMod),
        B::PRELU => elementwise::binary(op, elementwise::BinaryOp::Prelu),
        B::LESS => elementwise::compare(op, elementwise::CompareOp::Less),
        B::LESS_EQUAL => elementwise::compare(op, elementwise::CompareOp::LessEqual),
        B::GREATER => elementwise::compare(op, elementwise::CompareOp::Greater),
        B::GREATER_EQUAL => elementwise::compare(op, elementwise::CompareOp::GreaterEqual),
        B::EQUAL => elementwise::compare(op, elementwise::CompareOp::Equal),
        B::NOT_EQUAL => elementwise::compare(op, elementwise::CompareOp::NotEqual),
        B::LOGICAL_AND => elementwise::logical(op, Some(true)),
        B::LOGICAL_OR => elementwise::logical(op, Some(false)),
        B::LOGICAL_NOT => elementwise::logical(op, None),
        B::SELECT | B::SELECT_V2 => elementwise::select(op),
        B::ABS => elementwise::unary(op, elementwise::UnaryOp::Abs),
        B::NEG => elementwise::unary(op, elementwise::UnaryOp::Neg),
        B::EXP => elementwise::unary(op, elementwise::UnaryOp::Exp),
        B::LOG => elementwise::unary(op, elementwise::UnaryOp::Log),
        B::SQRT => elementwise::unary(op, elementwise::UnaryOp::Sqrt),
        B::RSQRT => elementwise::unary(op, elementwise::UnaryOp::Rsqrt),
        B::SQUARE => elementwise::unary(op, elementwise::UnaryOp::Square),
        B::SIN => elementwise::unary(op, elementwise::UnaryOp::Sin),
        B::COS => elementwise::unary(op, elementwise::UnaryOp::Cos),
        B::FLOOR => elementwise::unary(op, elementwise::UnaryOp::Floor),
        B::CEIL => elementwise::unary(op, elementwise::UnaryOp::Ceil),
        B::ROUND => elementwise::unary(op, elementwise::UnaryOp::Round),
        B::SIGN => elementwise::unary(op, elementwise::UnaryOp::Sign),
        B::RELU => elementwise::unary(op, elementwise::UnaryOp::Relu),
        B::RELU6 => elementwise::unary(op, elementwise::UnaryOp::Relu6),
        B::RELU_N1_TO_1 => elementwise::unary(op, elementwise::UnaryOp::ReluN1To1),
        B::RELU_0_TO_1 => elementwise::unary(op, elementwise::UnaryOp::Relu0To1),
        B::LEAKY_RELU => elementwise::unary(op, elementwise::UnaryOp::LeakyRelu),
        B::HARD_SWISH => elementwise::unary(op, elementwise::UnaryOp::HardSwish),
        B::LOGISTIC => elementwise::unary(op, elementwise::UnaryOp::Logistic),
        B::TANH => elementwise::unary(op, elementwise::UnaryOp::Tanh),
        B::GELU => elementwise::unary(op, elementwise::UnaryOp::Gelu),
        B::ELU => elementwise::unary(op, elementwise::UnaryOp::Elu),

        B::MEAN => reduce::reduce(op, reduce::Reduction::Mean),
        B::SUM => reduce::reduce(op, reduce::Reduction::Sum),
        B::REDUCE_MAX => reduce::reduce(op, reduce::Reduction::Max),
        B::REDUCE_MIN => reduce::reduce(op, reduce::Reduction::Min),
        B::REDUCE_PROD => reduce::reduce(op, reduce::Reduction::Prod),
        B::ARG_MAX => reduce::arg_extreme(op, true),
        B::ARG_MIN => reduce::arg_extreme(op, false),
        B::REDUCE_ALL => reduce::reduce_bool(op, true),
        B::REDUCE_ANY => reduce::reduce_bool(op, false),

        B::RESHAPE => movement::reshape(op),
        B::SQUEEZE => movement::squeeze(op),
        B::EXPAND_DIMS => movement::expand_dims(op),
        B::CONCATENATION => movement::concatenation(op, false),
        B::PACK => movement::concatenation(op, true),
        B::UNPACK => movement::unpack(op),
        B::SPLIT => movement::split(op, false),
        B::SPLIT_V => movement::split(op, true),
        B::SLICE => movement::slice(op),
        B::STRIDED_SLICE => movement::strided_slice(op),
        B::TRANSPOSE => movement::transpose(op),
        B::REVERSE_V2 => movement::reverse(op),
        B::REVERSE_SEQUENCE => movement::reverse_sequence(op),
        B::RANK => movement::rank(op),
        B::PAD | B::PADV2 => movement::pad(op),
        B::GATHER => movement::gather(op),
        B::TILE => movement::tile(op, false),
        B::BROADCAST_TO => movement::tile(op, true),
        B::DEPTH_TO_SPACE => movement::depth_to_space(op, true),
        B::SPACE_TO_DEPTH => movement::depth_to_space(op, false),
        B::RESIZE_BILINEAR => movement::resize(op, true),
        B::RESIZE_NEAREST_NEIGHBOR => movement::resize(op, false),
        B::SHAPE => movement::shape(op),
        B::FILL => movement::fill(op),
        B::ZEROS_LIKE => movement::zeros_like(op),
        B::CAST => movement::cast(op),
        B::DEQUANTIZE => movement::dequantize_f16(op),
        B::DENSIFY => movement::densify(op),

        B::GATHER_ND => index::gather_nd(op),
        B::SCATTER_ND => index::scatter_nd(op),
        B::SPARSE_TO_DENSE => index::sparse_to_dense(op),
        B::DYNAMIC_UPDATE_SLICE => index::dynamic_update_slice(op),
        B::EMBEDDING_LOOKUP => index::embedding_lookup(op),
        B::HASHTABLE_LOOKUP => text::hashtable_lookup(op),
        B::LSH_PROJECTION => text::lsh_projection(op),
        B::TOPK_V2 => index::top_k(op),
        B::ONE_HOT => index::one_hot(op),
        B::RANGE => index::range(op),
        B::CUMSUM => index::cumsum(op),
        B::WHERE => sets::where_op(op),
        B::MIRROR_PAD => spatial::mirror_pad(op),
        B::SPACE_TO_BATCH_ND => spatial::space_batch(op, true),
        B::BATCH_TO_SPACE_ND => spatial::space_batch(op, false),
        B::L2_NORMALIZATION => spatial::normalize(op, true),
        B::LOCAL_RESPONSE_NORMALIZATION => spatial::normalize(op, false),
        B::ATAN2 => spatial::atan2(op),
        B::RFFT2D => spatial::rfft2d(op),
        B::COMPLEX_ABS => spatial::complex_part(op, 0),
        B::REAL => spatial::complex_part(op, 1),
        B::IMAG => spatial::complex_part(op, 2),
        B::UNIQUE => sets::unique(op),
        B::SEGMENT_SUM => sets::segments(op, None),
        B::UNSORTED_SEGMENT_SUM => sets::segments(op, Some("sum")),
        B::UNSORTED_SEGMENT_PROD => sets::segments(op, Some("prod")),
        B::UNSORTED_SEGMENT_MAX => sets::segments(op, Some("max")),
        B::UNSORTED_SEGMENT_MIN => sets::segments(op, Some("min")),
        B::MATRIX_DIAG => sets::diag(op, false),
        B::MATRIX_SET_DIAG => sets::diag(op, true),
        B::BROADCAST_ARGS => sets::broadcast_args(op),
        B::BITCAST => sets::bitcast(op),
        B::RIGHT_SHIFT => sets::bitwise(op, true),
        B::BITWISE_XOR => sets::bitwise(op, false),
        _ => Err(op.unsupported("no reference kernel for this op")),
    }
}

/// A run-time error for buffers that do not match the shapes planned at build.
fn runtime(msg: impl Into<String>) -> Error {
    Error::Runtime(msg.into().into())
}

/// The first `n` elements of kernel input `i`, or an error when it holds fewer.
fn input<'b, T: bytemuck::Pod>(ins: &[Option<&'b [u8]>], i: usize, n: usize) -> Result<&'b [T]> {
    let v = typed::<T>(arg(ins, i)?)?;
    v.get(..n).ok_or_else(|| runtime(format!("kernel input {i} holds {} elements, the op needs {n}", v.len())))
}

/// The first `n` elements of kernel output `i`, or an error when it holds fewer.
fn output<'b, T: bytemuck::Pod>(outs: &'b mut [&mut [u8]], i: usize, n: usize) -> Result<&'b mut [T]> {
    let o = outs.get_mut(i).ok_or_else(|| runtime(format!("kernel output {i} is missing")))?;
    let v = typed_mut::<T>(o)?;
    let len = v.len();
    v.get_mut(..n).ok_or_else(|| runtime(format!("kernel output {i} holds {len} elements, the op writes {n}")))
}

/// Element count of `shape`, bounded so a hostile shape cannot overflow the
/// index arithmetic or ask for an absurd buffer.
fn count(op: &OpContext<'_>, shape: &[usize], elem: usize) -> Result<usize> {
    op.checked_elements(shape, elem.max(1))
}

/// Requires float32 for each listed input that is present.
fn require_f32(op: &OpContext<'_>, inputs: &[usize]) -> Result<()> {
    for &i in inputs {
        if let Some(d) = op.opt_input(i) {
            if d.dtype != DType::F32 {
                return Err(op.unsupported(format!("input {i} is {}; the reference kernel is float32 only", d.dtype.name())));
            }
        }
    }
    Ok(())
}

/// The bounds a fused activation clamps to. LiteRT's builtin kernels apply no
/// clamp for a fused TANH or SIGN_BIT, and LiteRT is what ferrite matches.
fn clamp_bounds(a: Activation) -> (f32, f32) {
    match a {
        Activation::Relu => (0.0, f32::INFINITY),
        Activation::Relu6 => (0.0, 6.0),
        Activation::ReluN1To1 => (-1.0, 1.0),
        Activation::None | Activation::Tanh | Activation::SignBit => (f32::NEG_INFINITY, f32::INFINITY),
    }
}

/// Applies clamp bounds; a NaN passes through unchanged.
fn clamp(v: f32, (lo, hi): (f32, f32)) -> f32 {
    if v < lo {
        lo
    } else if v > hi {
        hi
    } else {
        v
    }
}

/// Normalises a possibly negative axis against `rank`.
fn axis(op: &OpContext<'_>, a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if v < 0 || v >= r {
        return Err(op.bad(format!("axis {a} out of range for rank {rank}")));
    }
    Ok(v as usize)
}

/// The numpy broadcast of two shapes (aligned at the last dimension; a dimension
/// of 1 stretches to the other's size), or `None` when they do not broadcast.
fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for d in 0..rank {
        // Dimension d of the result, counted from the left; missing leading dims are 1.
        let da = if d + a.len() >= rank { a[d + a.len() - rank] } else { 1 };
        let db = if d + b.len() >= rank { b[d + b.len() - rank] } else { 1 };
        out.push(if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        });
    }
    Some(out)
}

/// Flat index into a tensor of shape `src` (which broadcasts to `out`) of the
/// element that output element `flat` reads: the output's multi-index with
/// every dimension where `src` has size 1 (or does not exist) set to 0.
fn broadcast_source(flat: usize, out: &[usize], src: &[usize]) -> usize {
    let mut rest = flat;
    let mut index = 0;
    let mut stride = 1;
    for d in (0..out.len()).rev() {
        // An empty output has no elements, so a dimension of 0 never indexes.
        let i = rest.checked_rem(out[d]).unwrap_or(0);
        rest = rest.checked_div(out[d]).unwrap_or(0);
        // The source's dimension aligned with output dimension d, if any.
        if d + src.len() >= out.len() {
            let sd = src[d + src.len() - out.len()];
            if sd != 1 {
                index += i * stride;
            }
            stride *= sd;
        }
    }
    index
}

/// The multi-index of flat (row-major) index `flat` in `shape`.
fn unravel(flat: usize, shape: &[usize], index: &mut [usize]) {
    let mut rest = flat;
    for d in (0..shape.len()).rev() {
        if shape[d] == 0 {
            index[d] = 0;
            continue;
        }
        index[d] = rest % shape[d];
        rest /= shape[d];
    }
}

/// The flat (row-major) index of a multi-index in `shape`.
fn ravel(index: &[usize], shape: &[usize]) -> usize {
    index.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

/// Refuses a quantized data-movement op whose output is quantized differently
/// from input `i`: moving raw values is then wrong, the values need requantizing.
fn same_quantization(op: &OpContext<'_>, i: usize) -> Result<()> {
    let d = op.input(i)?;
    if !matches!(d.dtype, DType::I8 | DType::U8 | DType::I16) {
        return Ok(());
    }
    let params = |q: Option<&crate::model::Quantization>| q.map(|q| (q.scale.clone(), q.zero_point.clone()));
    let want = params(d.quant);
    for (k, t) in op.outputs.iter().enumerate() {
        if params(t.quant.as_ref()) != want {
            return Err(op.unsupported(format!("output {k} is quantized unlike input {i} (needs requantization)")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::float_test_util::*;
    use super::*;
    use crate::ops::{OpParams, Padding};

    /// Parameters of the right family for `code`, with hostile values mixed in.
    fn hostile_params(code: B, r: &mut Rng) -> OpParams {
        let big = |r: &mut Rng| [1, 2, 3, 1 << 20, usize::MAX >> 1][r.below(5)];
        let int = |r: &mut Rng| [0, 1, -1, 2, -3, 5, i32::MAX, i32::MIN][r.below(8)];
        let padding = if r.coin() { Padding::Same } else { Padding::Valid };
        let act = [Activation::None, Activation::Relu, Activation::Tanh][r.below(3)];
        match code {
            B::CONV_2D => OpParams::Conv2D { padding, stride: (big(r), big(r)), dilation: (big(r), big(r)), activation: act },
            B::DEPTHWISE_CONV_2D => {
                OpParams::DepthwiseConv2D { padding, stride: (big(r), big(r)), dilation: (big(r), big(r)), depth_multiplier: int(r), activation: act }
            }
            B::AVERAGE_POOL_2D | B::MAX_POOL_2D => OpParams::Pool2D { padding, stride: (big(r), big(r)), filter: (big(r), big(r)), activation: act },
            B::FULLY_CONNECTED => {
                OpParams::FullyConnected { activation: act, keep_num_dims: r.coin(), shuffled_weights: false, asymmetric_quantize_inputs: false }
            }
            B::TRANSPOSE_CONV => OpParams::TransposeConv { padding, stride: (big(r), big(r)), activation: act },
            B::CONV_3D | B::CONV_3D_TRANSPOSE => {
                OpParams::Conv3D { padding, stride: [big(r), big(r), big(r)], dilation: [big(r), big(r), big(r)], activation: act }
            }
            B::BATCH_MATMUL => OpParams::BatchMatMul { adj_x: r.coin(), adj_y: r.coin(), asymmetric_quantize_inputs: false },
            B::CONCATENATION => OpParams::Concatenation { axis: int(r), activation: act },
            B::PACK => OpParams::Pack { values_count: int(r), axis: int(r) },
            B::UNPACK => OpParams::Unpack { num: int(r), axis: int(r) },
            B::SPLIT | B::SPLIT_V => OpParams::Split { num_splits: big(r) },
            B::GATHER => OpParams::Gather { axis: int(r), batch_dims: int(r) },
            B::SQUEEZE => OpParams::Squeeze { dims: vec![int(r)] },
            B::STRIDED_SLICE => OpParams::StridedSlice {
                begin_mask: int(r),
                end_mask: int(r),
                ellipsis_mask: int(r),
                new_axis_mask: int(r),
                shrink_axis_mask: int(r),
                offset: r.coin(),
            },
            B::DEPTH_TO_SPACE | B::SPACE_TO_DEPTH => OpParams::BlockSize(big(r)),
            B::RESIZE_BILINEAR | B::RESIZE_NEAREST_NEIGHBOR => OpParams::Resize { align_corners: r.coin(), half_pixel_centers: r.coin() },
            B::MEAN | B::SUM | B::REDUCE_MAX | B::REDUCE_MIN | B::REDUCE_PROD => OpParams::Reducer { keep_dims: r.coin() },
            B::ADD | B::SUB | B::MUL | B::DIV => OpParams::Binary { activation: act, pot_scale_int16: true },
            B::ARG_MAX | B::ARG_MIN | B::SHAPE => OpParams::OutType(if r.coin() { 2 } else { 4 }),
            _ => OpParams::None,
        }
    }

    #[test]
    fn hostile_ops_never_panic() {
        let codes = [
            B::CONV_2D,
            B::DEPTHWISE_CONV_2D,
            B::AVERAGE_POOL_2D,
            B::MAX_POOL_2D,
            B::FULLY_CONNECTED,
            B::TRANSPOSE_CONV,
            B::CONV_3D,
            B::CONV_3D_TRANSPOSE,
            B::BATCH_MATMUL,
            B::SOFTMAX,
            B::ADD,
            B::FLOOR_DIV,
            B::PRELU,
            B::LESS,
            B::LOGICAL_AND,
            B::LOGICAL_NOT,
            B::SELECT,
            B::SELECT_V2,
            B::TANH,
            B::MEAN,
            B::REDUCE_MAX,
            B::ARG_MAX,
            B::RESHAPE,
            B::SQUEEZE,
            B::EXPAND_DIMS,
            B::CONCATENATION,
            B::PACK,
            B::UNPACK,
            B::SPLIT,
            B::SPLIT_V,
            B::SLICE,
            B::STRIDED_SLICE,
            B::TRANSPOSE,
            B::PAD,
            B::PADV2,
            B::GATHER,
            B::TILE,
            B::BROADCAST_TO,
            B::DEPTH_TO_SPACE,
            B::SPACE_TO_DEPTH,
            B::RESIZE_BILINEAR,
            B::RESIZE_NEAREST_NEIGHBOR,
            B::SHAPE,
            B::FILL,
            B::ZEROS_LIKE,
            B::CAST,
            B::DEQUANTIZE,
        ];
        let mut r = Rng::new(0xbad_f00d);
        let mut built = 0;
        for case in 0..6000 {
            let code = codes[case % codes.len()];
            let params = hostile_params(code, &mut r);
            let n_in = r.range(0, 4);
            let inputs = (0..n_in)
                .map(|_| {
                    if r.below(8) == 0 {
                        return None;
                    }
                    let rank = r.range(0, 5);
                    let shape: Vec<usize> = (0..rank).map(|_| [0, 1, 1, 2, 3, 4, 7, 1 << 31][r.below(8)]).collect();
                    let dtype = [DType::F32, DType::I32, DType::I64, DType::Bool, DType::I8, DType::F16][r.below(6)];
                    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX).min(64);
                    // Sometimes fewer bytes than the shape needs.
                    let bytes = n * dtype.size().unwrap_or(1) - if n > 0 && r.below(4) == 0 { 1 } else { 0 };
                    let data: Vec<u8> = (0..bytes).map(|_| [0u8, 1, 2, 0xff, 0x80, 7][r.below(6)]).collect();
                    Some(TestInput { dtype, shape, data, constant: r.coin(), quant: None })
                })
                .collect();
            let outs = vec![[DType::F32, DType::I32, DType::Bool][r.below(3)]; r.range(1, 3)];
            let t = TestOp::typed(code, params, inputs, outs);
            // Any Ok or Err is fine; a panic fails the test.
            built += usize::from(t.reference().is_ok());
        }
        eprintln!("hostile ops: {built} of 6000 built and ran");
    }

    #[test]
    fn broadcast_rules() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shapes(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_shapes(&[2, 3], &[3, 3]), None);
        // Output [2, 4, 3] element (1, 2, 0) reads source [4, 1] at (2, 0) = 2.
        let flat = ravel(&[1, 2, 0], &[2, 4, 3]);
        assert_eq!(broadcast_source(flat, &[2, 4, 3], &[4, 1]), 2);
        assert_eq!(broadcast_source(flat, &[2, 4, 3], &[2, 1, 3]), 3);
        let mut idx = [0; 3];
        unravel(flat, &[2, 4, 3], &mut idx);
        assert_eq!(idx, [1, 2, 0]);
    }
}
