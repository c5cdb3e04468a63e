//! Typed op parameters, parsed from the builtin options tables.

use ferrite_format::ops::BuiltinOp;
use ferrite_format::schema as fb;
use ferrite_format::Table;

use crate::error::{invalid, Result};

/// Padding scheme of window ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// Output = ceil(input / stride), zero padding split before/after.
    Same,
    /// No padding.
    Valid,
}

/// Fused activation applied to an op's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// None.
    None,
    /// max(x, 0).
    Relu,
    /// clamp(x, -1, 1).
    ReluN1To1,
    /// clamp(x, 0, 6).
    Relu6,
    /// tanh.
    Tanh,
    /// Sign bit.
    SignBit,
}

impl Activation {
    fn from_code(c: i8) -> Result<Activation> {
        Ok(match c {
            0 => Activation::None,
            1 => Activation::Relu,
            2 => Activation::ReluN1To1,
            3 => Activation::Relu6,
            4 => Activation::Tanh,
            5 => Activation::SignBit,
            _ => return Err(invalid(format!("unknown fused activation {c}"))),
        })
    }
    /// Name as the format spells it.
    pub fn name(self) -> &'static str {
        match self {
            Activation::None => "NONE",
            Activation::Relu => "RELU",
            Activation::ReluN1To1 => "RELU_N1_TO_1",
            Activation::Relu6 => "RELU6",
            Activation::Tanh => "TANH",
            Activation::SignBit => "SIGN_BIT",
        }
    }
}

/// Parameters of an op, by family.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum OpParams {
    None,
    Conv2D {
        padding: Padding,
        stride: (usize, usize),
        dilation: (usize, usize),
        activation: Activation,
    },
    DepthwiseConv2D {
        padding: Padding,
        stride: (usize, usize),
        dilation: (usize, usize),
        depth_multiplier: i32,
        activation: Activation,
    },
    /// CONV_3D and CONV_3D_TRANSPOSE: strides and dilations as (depth, height, width).
    Conv3D {
        padding: Padding,
        stride: [usize; 3],
        dilation: [usize; 3],
        activation: Activation,
    },
    Pool2D {
        padding: Padding,
        stride: (usize, usize),
        filter: (usize, usize),
        activation: Activation,
    },
    FullyConnected {
        activation: Activation,
        keep_num_dims: bool,
        shuffled_weights: bool,
        asymmetric_quantize_inputs: bool,
    },
    Softmax {
        beta: f32,
    },
    Concatenation {
        axis: i32,
        activation: Activation,
    },
    /// ADD / SUB / MUL / DIV.
    Binary {
        activation: Activation,
        /// ADD / SUB on int16: take the shift-only path when every scale is a power
        /// of two (the schema's default is true; MUL and DIV have no such option).
        pot_scale_int16: bool,
    },
    Reshape {
        new_shape: Option<Vec<i32>>,
    },
    Resize {
        align_corners: bool,
        half_pixel_centers: bool,
    },
    BlockSize(usize),
    Gather {
        axis: i32,
        batch_dims: i32,
    },
    Reducer {
        keep_dims: bool,
    },
    Squeeze {
        dims: Vec<i32>,
    },
    Split {
        num_splits: usize,
    },
    StridedSlice {
        begin_mask: i32,
        end_mask: i32,
        ellipsis_mask: i32,
        new_axis_mask: i32,
        shrink_axis_mask: i32,
        offset: bool,
    },
    /// Output type code for ARG_MAX / ARG_MIN / SHAPE, and UNIQUE's index output
    /// (a TensorType code).
    OutType(i8),
    TransposeConv {
        padding: Padding,
        stride: (usize, usize),
        activation: Activation,
    },
    Pack {
        values_count: i32,
        axis: i32,
    },
    Unpack {
        num: i32,
        axis: i32,
    },
    LeakyRelu {
        alpha: f32,
    },
    BatchMatMul {
        adj_x: bool,
        adj_y: bool,
        asymmetric_quantize_inputs: bool,
    },
    Gelu {
        approximate: bool,
    },
    MirrorPad {
        symmetric: bool,
    },
    /// LSH_PROJECTION: the schema's projection type (1 sparse, 2 dense); kept raw
    /// so the builder can refuse 0 (unknown) and other values, as LiteRT does.
    LshProjection {
        kind: i8,
    },
    /// SKIP_GRAM: n-grams of `ngram_size` words (all sizes up to it with
    /// `include_all_ngrams`), skipping at most `max_skip_size` words between two.
    SkipGram {
        ngram_size: i32,
        max_skip_size: i32,
        include_all_ngrams: bool,
    },
    /// HASHTABLE: the table's id in the session, and its key and value types
    /// (the schema's `TensorType` codes, kept raw so the builder can refuse pairs).
    Hashtable {
        table_id: i32,
        key_dtype: i8,
        value_dtype: i8,
    },
    /// An options table holding only a fused activation (L2_NORMALIZATION).
    Activation(Activation),
    /// LOCAL_RESPONSE_NORMALIZATION.
    LocalResponseNorm {
        radius: i32,
        bias: f32,
        alpha: f32,
        beta: f32,
    },
    /// ONE_HOT: where the depth dimension goes (negative counts from the end).
    OneHot {
        axis: i32,
    },
    Cumsum {
        exclusive: bool,
        reverse: bool,
    },
    /// REVERSE_SEQUENCE: the dimension whose leading elements are reversed, and the
    /// one whose index picks the length from `seq_lengths`.
    ReverseSequence {
        seq_dim: i32,
        batch_dim: i32,
    },
    /// SPARSE_TO_DENSE. LiteRT reads `validate_indices` and ignores it; ferrite
    /// checks every index whatever it says (an index outside the output is an error).
    SparseToDense {
        validate_indices: bool,
    },
    /// RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL, MULTINOMIAL: the stream's seeds (both
    /// zero: seeded nondeterministically, as LiteRT does).
    Random {
        seed: i64,
        seed2: i64,
    },
    /// BUCKETIZE: the bucket boundaries (LiteRT requires them sorted).
    Bucketize {
        boundaries: Vec<f32>,
    },
    /// FAKE_QUANT: the quantization range and bit width.
    FakeQuant {
        min: f32,
        max: f32,
        num_bits: i32,
        narrow_range: bool,
    },
    /// EMBEDDING_LOOKUP_SPARSE: the schema's CombinerType (0 SUM, 1 MEAN, 2 SQRTN).
    EmbeddingLookupSparse {
        combiner: i8,
    },
    If {
        then_subgraph: usize,
        else_subgraph: usize,
    },
    While {
        cond_subgraph: usize,
        body_subgraph: usize,
    },
    CallOnce {
        init_subgraph: usize,
    },
    VarHandle {
        container: String,
        shared_name: String,
    },
    /// LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM and the RNN ops.
    Recurrent(RecurrentParams),
    /// SVDF.
    Svdf {
        rank: i32,
        activation: Activation,
        asymmetric_quantize_inputs: bool,
    },
    /// Ops of the StableHLO legalization, with options from the second options union.
    Hlo(crate::ops_hlo::HloParams),
}

/// Options of the recurrent ops (each options table holds a subset; the rest keep
/// these defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecurrentParams {
    /// Activation of the cell gate and of the cell's output (LSTM), of the hidden state (RNN).
    pub activation: Activation,
    /// Cell state clipped to `[-cell_clip, cell_clip]` when positive.
    pub cell_clip: f32,
    /// Projected output clipped to `[-proj_clip, proj_clip]` when positive.
    pub proj_clip: f32,
    /// Sequence input laid out `[time, batch, ..]` rather than `[batch, time, ..]`.
    pub time_major: bool,
    /// Bidirectional ops: both directions concatenated into one output.
    pub merge_outputs: bool,
    /// Hybrid kernels quantize each input row with its own zero point.
    pub asymmetric_quantize_inputs: bool,
    /// LSTM: the four-input "basic" kernel (LSTMKernelType BASIC) rather than the full one.
    pub basic_kernel: bool,
    /// UNIDIRECTIONAL_SEQUENCE_LSTM: recurrent weights given as diagonals.
    pub diagonal_recurrent: bool,
    /// The op's intermediate tensors (the fully integer LSTM takes the scales of its
    /// gates and hidden state from them); filled in by the loader, not the options.
    pub intermediates: Intermediates,
}

/// The quantization of an op's intermediate tensors: how many the op lists, and the
/// (scale, zero point) of the first [`Intermediates::MAX`] (none when a tensor has no
/// quantization). The integer LSTM kernel of LiteRT reads five.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Intermediates {
    /// Intermediate tensors the op lists.
    pub count: usize,
    /// Scale and zero point of each of the first ones.
    pub quant: [Option<(f32, i64)>; Intermediates::MAX],
}

impl Intermediates {
    /// Intermediates whose quantization is kept.
    pub const MAX: usize = 5;
}

impl Default for RecurrentParams {
    fn default() -> Self {
        RecurrentParams {
            activation: Activation::None,
            cell_clip: 0.0,
            proj_clip: 0.0,
            time_major: false,
            merge_outputs: false,
            asymmetric_quantize_inputs: false,
            basic_kernel: false,
            diagonal_recurrent: false,
            intermediates: Intermediates::default(),
        }
    }
}

fn padding(c: i8) -> Result<Padding> {
    match c {
        0 => Ok(Padding::Same),
        1 => Ok(Padding::Valid),
        _ => Err(invalid(format!("unknown padding {c}"))),
    }
}

fn positive(v: i32, what: &str) -> Result<usize> {
    if v <= 0 {
        return Err(invalid(format!("{what} must be positive, got {v}")));
    }
    Ok(v as usize)
}

fn subgraph_index(v: i32, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| invalid(format!("{what} {v} is negative")))
}

/// Whether this build reads the options of an op family: its CPU kernels are built,
/// or the reference backend or training (which read every op's) are. The options of
/// a family left out of a selective build stay unread (`OpParams::None`, their
/// parsing code not linked): the CPU backend refuses those ops as not built anyway.
macro_rules! reads {
    ($family:literal) => {
        cfg!(any(feature = $family, feature = "reference", feature = "train"))
    };
}

/// Parses the options of builtin `op`, by the options table its op-table line
/// names. `opt_type` is the union type id in the file; an absent or mismatched
/// table yields the format's defaults, as LiteRT does.
pub fn parse_params(op: BuiltinOp, opt_type: u8, options: Option<Table<'_>>) -> Result<OpParams> {
    use fb::BuiltinOptions as T;
    let expected = op.options();
    if expected == T::NONE {
        return Ok(OpParams::None);
    }
    // A table of another union member would be read with the wrong layout; ignore it.
    let t = if opt_type == expected.0 { options } else { None };
    let i32f = |slot: u16, d: i32| t.map_or(Ok(d), |t| t.scalar::<i32>(slot, d));
    let i8f = |slot: u16, d: i8| t.map_or(Ok(d), |t| t.scalar::<i8>(slot, d));
    let boolf = |slot: u16, d: bool| t.map_or(Ok(d), |t| t.scalar::<bool>(slot, d));
    let f32f = |slot: u16, d: f32| t.map_or(Ok(d), |t| t.scalar::<f32>(slot, d));
    let act = |slot: u16| -> Result<Activation> { Activation::from_code(i8f(slot, 0)?) };

    Ok(match expected {
        T::Conv2DOptions if reads!("op-conv") => {
            use fb::Conv2DOptions as O;
            OpParams::Conv2D {
                padding: padding(i8f(O::VT_PADDING, 0)?)?,
                stride: (positive(i32f(O::VT_STRIDE_H, 0)?, "stride_h")?, positive(i32f(O::VT_STRIDE_W, 0)?, "stride_w")?),
                dilation: (positive(i32f(O::VT_DILATION_H_FACTOR, 1)?, "dilation_h")?, positive(i32f(O::VT_DILATION_W_FACTOR, 1)?, "dilation_w")?),
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
            }
        }
        T::DepthwiseConv2DOptions if reads!("op-conv") => {
            use fb::DepthwiseConv2DOptions as O;
            OpParams::DepthwiseConv2D {
                padding: padding(i8f(O::VT_PADDING, 0)?)?,
                stride: (positive(i32f(O::VT_STRIDE_H, 0)?, "stride_h")?, positive(i32f(O::VT_STRIDE_W, 0)?, "stride_w")?),
                dilation: (positive(i32f(O::VT_DILATION_H_FACTOR, 1)?, "dilation_h")?, positive(i32f(O::VT_DILATION_W_FACTOR, 1)?, "dilation_w")?),
                depth_multiplier: i32f(O::VT_DEPTH_MULTIPLIER, 0)?,
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
            }
        }
        T::Conv3DOptions if reads!("op-conv") => {
            use fb::Conv3DOptions as O;
            OpParams::Conv3D {
                padding: padding(i8f(O::VT_PADDING, 0)?)?,
                stride: [
                    positive(i32f(O::VT_STRIDE_D, 0)?, "stride_d")?,
                    positive(i32f(O::VT_STRIDE_H, 0)?, "stride_h")?,
                    positive(i32f(O::VT_STRIDE_W, 0)?, "stride_w")?,
                ],
                dilation: [
                    positive(i32f(O::VT_DILATION_D_FACTOR, 1)?, "dilation_d")?,
                    positive(i32f(O::VT_DILATION_H_FACTOR, 1)?, "dilation_h")?,
                    positive(i32f(O::VT_DILATION_W_FACTOR, 1)?, "dilation_w")?,
                ],
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
            }
        }
        T::Pool2DOptions if reads!("op-pool") => {
            use fb::Pool2DOptions as O;
            OpParams::Pool2D {
                padding: padding(i8f(O::VT_PADDING, 0)?)?,
                stride: (positive(i32f(O::VT_STRIDE_H, 0)?, "stride_h")?, positive(i32f(O::VT_STRIDE_W, 0)?, "stride_w")?),
                filter: (positive(i32f(O::VT_FILTER_HEIGHT, 0)?, "filter_height")?, positive(i32f(O::VT_FILTER_WIDTH, 0)?, "filter_width")?),
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
            }
        }
        T::FullyConnectedOptions if reads!("op-linear") => {
            use fb::FullyConnectedOptions as O;
            OpParams::FullyConnected {
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
                keep_num_dims: boolf(O::VT_KEEP_NUM_DIMS, false)?,
                shuffled_weights: i8f(O::VT_WEIGHTS_FORMAT, 0)? != 0,
                asymmetric_quantize_inputs: boolf(O::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
            }
        }
        T::SoftmaxOptions if reads!("op-softmax") => OpParams::Softmax { beta: f32f(fb::SoftmaxOptions::VT_BETA, 0.0)? },
        T::ConcatenationOptions if reads!("op-movement") => OpParams::Concatenation {
            axis: i32f(fb::ConcatenationOptions::VT_AXIS, 0)?,
            activation: act(fb::ConcatenationOptions::VT_FUSED_ACTIVATION_FUNCTION)?,
        },
        // Add, Sub, Mul and Div keep the activation in slot 4.
        // ADD and SUB keep pot_scale_int16 in slot 6.
        T::AddOptions | T::SubOptions | T::MulOptions | T::DivOptions if reads!("op-elementwise") => OpParams::Binary {
            activation: act(fb::AddOptions::VT_FUSED_ACTIVATION_FUNCTION)?,
            pot_scale_int16: matches!(expected, T::AddOptions | T::SubOptions) && boolf(fb::AddOptions::VT_POT_SCALE_INT16, true)?,
        },
        T::ReshapeOptions if reads!("op-movement") => {
            OpParams::Reshape { new_shape: t.map(|t| t.vector::<i32>(fb::ReshapeOptions::VT_NEW_SHAPE)).transpose()?.flatten().map(|v| v.iter().collect()) }
        }
        T::ResizeBilinearOptions if reads!("op-layout") => OpParams::Resize {
            align_corners: boolf(fb::ResizeBilinearOptions::VT_ALIGN_CORNERS, false)?,
            half_pixel_centers: boolf(fb::ResizeBilinearOptions::VT_HALF_PIXEL_CENTERS, false)?,
        },
        T::ResizeNearestNeighborOptions if reads!("op-layout") => OpParams::Resize {
            align_corners: boolf(fb::ResizeNearestNeighborOptions::VT_ALIGN_CORNERS, false)?,
            half_pixel_centers: boolf(fb::ResizeNearestNeighborOptions::VT_HALF_PIXEL_CENTERS, false)?,
        },
        // Both tables keep block_size in slot 4.
        T::SpaceToDepthOptions | T::DepthToSpaceOptions if reads!("op-layout") => {
            OpParams::BlockSize(positive(i32f(fb::SpaceToDepthOptions::VT_BLOCK_SIZE, 0)?, "block_size")?)
        }
        T::GatherOptions if reads!("op-movement") => {
            OpParams::Gather { axis: i32f(fb::GatherOptions::VT_AXIS, 0)?, batch_dims: i32f(fb::GatherOptions::VT_BATCH_DIMS, 0)? }
        }
        T::ReducerOptions if reads!("op-reduce") => OpParams::Reducer { keep_dims: boolf(fb::ReducerOptions::VT_KEEP_DIMS, false)? },
        T::SqueezeOptions if reads!("op-movement") => {
            OpParams::Squeeze { dims: t.map(|t| t.vec_of::<i32>(fb::SqueezeOptions::VT_SQUEEZE_DIMS)).transpose()?.unwrap_or_default() }
        }
        // SplitOptions and SplitVOptions keep num_splits in slot 4.
        T::SplitOptions | T::SplitVOptions if reads!("op-movement") => {
            OpParams::Split { num_splits: positive(i32f(fb::SplitOptions::VT_NUM_SPLITS, 0)?, "num_splits")? }
        }
        T::StridedSliceOptions if reads!("op-movement") => {
            use fb::StridedSliceOptions as O;
            OpParams::StridedSlice {
                begin_mask: i32f(O::VT_BEGIN_MASK, 0)?,
                end_mask: i32f(O::VT_END_MASK, 0)?,
                ellipsis_mask: i32f(O::VT_ELLIPSIS_MASK, 0)?,
                new_axis_mask: i32f(O::VT_NEW_AXIS_MASK, 0)?,
                shrink_axis_mask: i32f(O::VT_SHRINK_AXIS_MASK, 0)?,
                offset: boolf(O::VT_OFFSET, false)?,
            }
        }
        // ArgMax/ArgMin/Shape all hold their output type in slot 4.
        T::ArgMaxOptions | T::ArgMinOptions if reads!("op-reduce") => OpParams::OutType(i8f(fb::ArgMaxOptions::VT_OUTPUT_TYPE, 4)?),
        T::ShapeOptions if reads!("op-movement") => OpParams::OutType(i8f(fb::ShapeOptions::VT_OUT_TYPE, 2)?),
        T::UniqueOptions if reads!("op-index") => OpParams::OutType(i8f(fb::UniqueOptions::VT_IDX_OUT_TYPE, 2)?),
        T::TransposeConvOptions if reads!("op-transpose-conv") => {
            use fb::TransposeConvOptions as O;
            OpParams::TransposeConv {
                padding: padding(i8f(O::VT_PADDING, 0)?)?,
                stride: (positive(i32f(O::VT_STRIDE_H, 0)?, "stride_h")?, positive(i32f(O::VT_STRIDE_W, 0)?, "stride_w")?),
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
            }
        }
        T::PackOptions if reads!("op-movement") => {
            OpParams::Pack { values_count: i32f(fb::PackOptions::VT_VALUES_COUNT, 0)?, axis: i32f(fb::PackOptions::VT_AXIS, 0)? }
        }
        T::UnpackOptions if reads!("op-movement") => OpParams::Unpack { num: i32f(fb::UnpackOptions::VT_NUM, 0)?, axis: i32f(fb::UnpackOptions::VT_AXIS, 0)? },
        T::LeakyReluOptions if reads!("op-activation") => OpParams::LeakyRelu { alpha: f32f(fb::LeakyReluOptions::VT_ALPHA, 0.0)? },
        T::BatchMatMulOptions if reads!("op-linear") => OpParams::BatchMatMul {
            adj_x: boolf(fb::BatchMatMulOptions::VT_ADJ_X, false)?,
            adj_y: boolf(fb::BatchMatMulOptions::VT_ADJ_Y, false)?,
            asymmetric_quantize_inputs: boolf(fb::BatchMatMulOptions::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
        },
        T::GeluOptions if reads!("op-activation") => OpParams::Gelu { approximate: boolf(fb::GeluOptions::VT_APPROXIMATE, false)? },
        // TensorFlow's default axis is -1 and converters write it; a file without the
        // table gets the schema's 0, as LiteRT's zero-initialized parameters do.
        T::OneHotOptions if reads!("op-index") => OpParams::OneHot { axis: i32f(fb::OneHotOptions::VT_AXIS, 0)? },
        T::CumsumOptions if reads!("op-index") => {
            OpParams::Cumsum { exclusive: boolf(fb::CumsumOptions::VT_EXCLUSIVE, false)?, reverse: boolf(fb::CumsumOptions::VT_REVERSE, false)? }
        }
        T::ReverseSequenceOptions if reads!("op-layout") => OpParams::ReverseSequence {
            seq_dim: i32f(fb::ReverseSequenceOptions::VT_SEQ_DIM, 0)?,
            batch_dim: i32f(fb::ReverseSequenceOptions::VT_BATCH_DIM, 0)?,
        },
        T::SparseToDenseOptions if reads!("op-index") => {
            OpParams::SparseToDense { validate_indices: boolf(fb::SparseToDenseOptions::VT_VALIDATE_INDICES, false)? }
        }
        T::LSHProjectionOptions if reads!("op-index") => OpParams::LshProjection { kind: i8f(fb::LSHProjectionOptions::VT_TYPE_, 0)? },
        T::HashtableOptions if reads!("op-index") => OpParams::Hashtable {
            table_id: i32f(fb::HashtableOptions::VT_TABLE_ID, 0)?,
            key_dtype: i8f(fb::HashtableOptions::VT_KEY_DTYPE, 0)?,
            value_dtype: i8f(fb::HashtableOptions::VT_VALUE_DTYPE, 0)?,
        },
        T::SkipGramOptions if reads!("op-index") => OpParams::SkipGram {
            ngram_size: i32f(fb::SkipGramOptions::VT_NGRAM_SIZE, 0)?,
            max_skip_size: i32f(fb::SkipGramOptions::VT_MAX_SKIP_SIZE, 0)?,
            include_all_ngrams: boolf(fb::SkipGramOptions::VT_INCLUDE_ALL_NGRAMS, false)?,
        },
        T::RandomOptions if reads!("op-random") => {
            let i64f = |slot: u16| t.map_or(Ok(0), |t| t.scalar::<i64>(slot, 0));
            OpParams::Random { seed: i64f(fb::RandomOptions::VT_SEED)?, seed2: i64f(fb::RandomOptions::VT_SEED2)? }
        }
        T::BucketizeOptions if reads!("op-feature") => {
            OpParams::Bucketize { boundaries: t.map(|t| t.vec_of::<f32>(fb::BucketizeOptions::VT_BOUNDARIES)).transpose()?.unwrap_or_default() }
        }
        T::FakeQuantOptions if reads!("op-feature") => {
            use fb::FakeQuantOptions as O;
            OpParams::FakeQuant {
                min: f32f(O::VT_MIN, 0.0)?,
                max: f32f(O::VT_MAX, 0.0)?,
                num_bits: i32f(O::VT_NUM_BITS, 0)?,
                narrow_range: boolf(O::VT_NARROW_RANGE, false)?,
            }
        }
        T::EmbeddingLookupSparseOptions if reads!("op-feature") => {
            OpParams::EmbeddingLookupSparse { combiner: i8f(fb::EmbeddingLookupSparseOptions::VT_COMBINER, 0)? }
        }
        T::MirrorPadOptions if reads!("op-layout") => OpParams::MirrorPad { symmetric: i8f(fb::MirrorPadOptions::VT_MODE, 0)? == 1 },
        T::L2NormOptions if reads!("op-softmax") => OpParams::Activation(act(fb::L2NormOptions::VT_FUSED_ACTIVATION_FUNCTION)?),
        T::LocalResponseNormalizationOptions if reads!("op-softmax") => {
            use fb::LocalResponseNormalizationOptions as O;
            OpParams::LocalResponseNorm {
                radius: i32f(O::VT_RADIUS, 0)?,
                bias: f32f(O::VT_BIAS, 0.0)?,
                alpha: f32f(O::VT_ALPHA, 0.0)?,
                beta: f32f(O::VT_BETA, 0.0)?,
            }
        }
        T::IfOptions => OpParams::If {
            then_subgraph: subgraph_index(i32f(fb::IfOptions::VT_THEN_SUBGRAPH_INDEX, 0)?, "then_subgraph_index")?,
            else_subgraph: subgraph_index(i32f(fb::IfOptions::VT_ELSE_SUBGRAPH_INDEX, 0)?, "else_subgraph_index")?,
        },
        T::WhileOptions => OpParams::While {
            cond_subgraph: subgraph_index(i32f(fb::WhileOptions::VT_COND_SUBGRAPH_INDEX, 0)?, "cond_subgraph_index")?,
            body_subgraph: subgraph_index(i32f(fb::WhileOptions::VT_BODY_SUBGRAPH_INDEX, 0)?, "body_subgraph_index")?,
        },
        T::CallOnceOptions => {
            OpParams::CallOnce { init_subgraph: subgraph_index(i32f(fb::CallOnceOptions::VT_INIT_SUBGRAPH_INDEX, 0)?, "init_subgraph_index")? }
        }
        T::VarHandleOptions => OpParams::VarHandle {
            container: t.map(|t| t.string(fb::VarHandleOptions::VT_CONTAINER)).transpose()?.flatten().unwrap_or_default(),
            shared_name: t.map(|t| t.string(fb::VarHandleOptions::VT_SHARED_NAME)).transpose()?.flatten().unwrap_or_default(),
        },
        T::LSTMOptions if reads!("op-recurrent") => {
            use fb::LSTMOptions as O;
            OpParams::Recurrent(RecurrentParams {
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
                cell_clip: f32f(O::VT_CELL_CLIP, 0.0)?,
                proj_clip: f32f(O::VT_PROJ_CLIP, 0.0)?,
                basic_kernel: i8f(O::VT_KERNEL_TYPE, 0)? == 1,
                asymmetric_quantize_inputs: boolf(O::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
                ..Default::default()
            })
        }
        T::UnidirectionalSequenceLSTMOptions if reads!("op-recurrent") => {
            use fb::UnidirectionalSequenceLSTMOptions as O;
            OpParams::Recurrent(RecurrentParams {
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
                cell_clip: f32f(O::VT_CELL_CLIP, 0.0)?,
                proj_clip: f32f(O::VT_PROJ_CLIP, 0.0)?,
                time_major: boolf(O::VT_TIME_MAJOR, false)?,
                asymmetric_quantize_inputs: boolf(O::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
                diagonal_recurrent: boolf(O::VT_DIAGONAL_RECURRENT_TENSORS, false)?,
                ..Default::default()
            })
        }
        T::BidirectionalSequenceLSTMOptions if reads!("op-recurrent") => {
            use fb::BidirectionalSequenceLSTMOptions as O;
            OpParams::Recurrent(RecurrentParams {
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
                cell_clip: f32f(O::VT_CELL_CLIP, 0.0)?,
                proj_clip: f32f(O::VT_PROJ_CLIP, 0.0)?,
                merge_outputs: boolf(O::VT_MERGE_OUTPUTS, false)?,
                // The schema's default is time-major for this op alone.
                time_major: boolf(O::VT_TIME_MAJOR, true)?,
                asymmetric_quantize_inputs: boolf(O::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
                ..Default::default()
            })
        }
        T::RNNOptions if reads!("op-recurrent") => {
            use fb::RNNOptions as O;
            OpParams::Recurrent(RecurrentParams {
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
                asymmetric_quantize_inputs: boolf(O::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
                ..Default::default()
            })
        }
        T::SequenceRNNOptions if reads!("op-recurrent") => {
            use fb::SequenceRNNOptions as O;
            OpParams::Recurrent(RecurrentParams {
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
                time_major: boolf(O::VT_TIME_MAJOR, false)?,
                asymmetric_quantize_inputs: boolf(O::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
                ..Default::default()
            })
        }
        T::BidirectionalSequenceRNNOptions if reads!("op-recurrent") => {
            use fb::BidirectionalSequenceRNNOptions as O;
            OpParams::Recurrent(RecurrentParams {
                activation: act(O::VT_FUSED_ACTIVATION_FUNCTION)?,
                time_major: boolf(O::VT_TIME_MAJOR, false)?,
                merge_outputs: boolf(O::VT_MERGE_OUTPUTS, false)?,
                asymmetric_quantize_inputs: boolf(O::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
                ..Default::default()
            })
        }
        T::SVDFOptions if reads!("op-recurrent") => OpParams::Svdf {
            rank: i32f(fb::SVDFOptions::VT_RANK, 0)?,
            activation: act(fb::SVDFOptions::VT_FUSED_ACTIVATION_FUNCTION)?,
            asymmetric_quantize_inputs: boolf(fb::SVDFOptions::VT_ASYMMETRIC_QUANTIZE_INPUTS, false)?,
        },
        _ => OpParams::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;
    use fb::BuiltinOptions as T;
    use ferrite_format::writer::{Activation as A, ModelSpec, OpCode, Options, Padding as P, TensorSpec, TensorType};

    /// Ops of the op table whose options the writer cannot express yet, and why.
    /// Empty: the writer covers every options table the runtime reads. An op added
    /// with a new options table goes here, or gets its `Options` variant and a pair
    /// in `representative` below.
    const NOT_WRITTEN: &[(BuiltinOp, &str)] = &[];

    /// For an options table: writer options with every field off its default, and
    /// the parameters the runtime must parse from them.
    fn representative(table: T) -> Option<(Options, OpParams)> {
        let act = Activation::Relu6;
        Some(match table {
            T::Conv2DOptions => (
                Options::Conv2D { padding: P::VALID, stride: (2, 3), dilation: (3, 2), activation: A::RELU6 },
                OpParams::Conv2D { padding: Padding::Valid, stride: (2, 3), dilation: (3, 2), activation: act },
            ),
            T::DepthwiseConv2DOptions => (
                Options::DepthwiseConv2D { padding: P::VALID, stride: (2, 3), dilation: (3, 2), depth_multiplier: 4, activation: A::RELU },
                OpParams::DepthwiseConv2D { padding: Padding::Valid, stride: (2, 3), dilation: (3, 2), depth_multiplier: 4, activation: Activation::Relu },
            ),
            T::Conv3DOptions => (
                Options::Conv3D { padding: P::VALID, stride: (2, 3, 4), dilation: (3, 2, 5), activation: A::RELU6 },
                OpParams::Conv3D { padding: Padding::Valid, stride: [2, 3, 4], dilation: [3, 2, 5], activation: act },
            ),
            T::TransposeConvOptions => (
                Options::TransposeConv { padding: P::VALID, stride: (2, 3), activation: A::RELU_N1_TO_1 },
                OpParams::TransposeConv { padding: Padding::Valid, stride: (2, 3), activation: Activation::ReluN1To1 },
            ),
            T::Pool2DOptions => (
                Options::Pool2D { padding: P::VALID, stride: (2, 3), filter: (4, 5), activation: A::TANH },
                OpParams::Pool2D { padding: Padding::Valid, stride: (2, 3), filter: (4, 5), activation: Activation::Tanh },
            ),
            T::FullyConnectedOptions => (
                Options::FullyConnected { activation: A::RELU6, keep_num_dims: true, asymmetric_quantize_inputs: true },
                OpParams::FullyConnected { activation: act, keep_num_dims: true, shuffled_weights: false, asymmetric_quantize_inputs: true },
            ),
            T::BatchMatMulOptions => (
                Options::BatchMatMul { adj_x: true, adj_y: true, asymmetric_quantize_inputs: true },
                OpParams::BatchMatMul { adj_x: true, adj_y: true, asymmetric_quantize_inputs: true },
            ),
            T::AddOptions | T::SubOptions => {
                (Options::AddSub { activation: A::RELU6, pot_scale_int16: false }, OpParams::Binary { activation: act, pot_scale_int16: false })
            }
            // MUL and DIV have no pot_scale_int16: the runtime reads it as false.
            T::MulOptions | T::DivOptions => (Options::Binary { activation: A::RELU6 }, OpParams::Binary { activation: act, pot_scale_int16: false }),
            T::LeakyReluOptions => (Options::LeakyRelu { alpha: 0.25 }, OpParams::LeakyRelu { alpha: 0.25 }),
            T::OneHotOptions => (Options::OneHot { axis: -1 }, OpParams::OneHot { axis: -1 }),
            T::CumsumOptions => (Options::Cumsum { exclusive: true, reverse: true }, OpParams::Cumsum { exclusive: true, reverse: true }),
            T::ReverseSequenceOptions => (Options::ReverseSequence { seq_dim: 2, batch_dim: -1 }, OpParams::ReverseSequence { seq_dim: 2, batch_dim: -1 }),
            T::SparseToDenseOptions => (Options::SparseToDense { validate_indices: true }, OpParams::SparseToDense { validate_indices: true }),
            T::GeluOptions => (Options::Gelu { approximate: true }, OpParams::Gelu { approximate: true }),
            T::RandomOptions => (Options::Random { seed: -3, seed2: 1 << 40 }, OpParams::Random { seed: -3, seed2: 1 << 40 }),
            T::BucketizeOptions => (Options::Bucketize { boundaries: vec![-1.5, 0.0, 2.0] }, OpParams::Bucketize { boundaries: vec![-1.5, 0.0, 2.0] }),
            T::FakeQuantOptions => (
                Options::FakeQuant { min: -1.0, max: 2.0, num_bits: 4, narrow_range: true },
                OpParams::FakeQuant { min: -1.0, max: 2.0, num_bits: 4, narrow_range: true },
            ),
            T::EmbeddingLookupSparseOptions => (Options::EmbeddingLookupSparse { combiner: 2 }, OpParams::EmbeddingLookupSparse { combiner: 2 }),
            T::SoftmaxOptions => (Options::Softmax { beta: 0.5 }, OpParams::Softmax { beta: 0.5 }),
            T::ReducerOptions => (Options::Reducer { keep_dims: true }, OpParams::Reducer { keep_dims: true }),
            // The schema's default output type is INT64.
            T::ArgMaxOptions | T::ArgMinOptions => (Options::ArgMinMax { output_type: TensorType::INT32 }, OpParams::OutType(TensorType::INT32.0)),
            T::ReshapeOptions => (Options::Reshape { new_shape: vec![2, -1, 3] }, OpParams::Reshape { new_shape: Some(vec![2, -1, 3]) }),
            T::SqueezeOptions => (Options::Squeeze { dims: vec![0, -2] }, OpParams::Squeeze { dims: vec![0, -2] }),
            T::ConcatenationOptions => (Options::Concatenation { axis: -2, activation: A::RELU6 }, OpParams::Concatenation { axis: -2, activation: act }),
            T::PackOptions => (Options::Pack { values_count: 3, axis: -1 }, OpParams::Pack { values_count: 3, axis: -1 }),
            T::UnpackOptions => (Options::Unpack { num: 3, axis: -1 }, OpParams::Unpack { num: 3, axis: -1 }),
            T::SplitOptions | T::SplitVOptions => (Options::Split { num_splits: 3 }, OpParams::Split { num_splits: 3 }),
            T::StridedSliceOptions => (
                Options::StridedSlice { begin_mask: 1, end_mask: 2, ellipsis_mask: 4, new_axis_mask: 8, shrink_axis_mask: 16, offset: true },
                OpParams::StridedSlice { begin_mask: 1, end_mask: 2, ellipsis_mask: 4, new_axis_mask: 8, shrink_axis_mask: 16, offset: true },
            ),
            T::GatherOptions => (Options::Gather { axis: -1, batch_dims: 1 }, OpParams::Gather { axis: -1, batch_dims: 1 }),
            T::DepthToSpaceOptions | T::SpaceToDepthOptions => (Options::BlockSize(3), OpParams::BlockSize(3)),
            T::ResizeBilinearOptions => {
                (Options::Resize { align_corners: true, half_pixel_centers: true }, OpParams::Resize { align_corners: true, half_pixel_centers: true })
            }
            T::ResizeNearestNeighborOptions => {
                (Options::ResizeNearest { align_corners: true, half_pixel_centers: true }, OpParams::Resize { align_corners: true, half_pixel_centers: true })
            }
            // The schema's default output type is INT32.
            T::ShapeOptions => (Options::Shape { out_type: TensorType::INT64 }, OpParams::OutType(TensorType::INT64.0)),
            // The schema's default index type is INT32.
            T::UniqueOptions => (Options::Unique { idx_out_type: TensorType::INT64 }, OpParams::OutType(TensorType::INT64.0)),
            T::MirrorPadOptions => (Options::MirrorPad { symmetric: true }, OpParams::MirrorPad { symmetric: true }),
            T::LSHProjectionOptions => (Options::LshProjection { kind: 2 }, OpParams::LshProjection { kind: 2 }),
            T::HashtableOptions => (
                Options::Hashtable { table_id: 7, key_dtype: TensorType::STRING, value_dtype: TensorType::INT64 },
                OpParams::Hashtable { table_id: 7, key_dtype: TensorType::STRING.0, value_dtype: TensorType::INT64.0 },
            ),
            T::SkipGramOptions => (
                Options::SkipGram { ngram_size: 3, max_skip_size: 2, include_all_ngrams: true },
                OpParams::SkipGram { ngram_size: 3, max_skip_size: 2, include_all_ngrams: true },
            ),
            T::L2NormOptions => (Options::L2Norm { activation: A::RELU6 }, OpParams::Activation(act)),
            T::LocalResponseNormalizationOptions => (
                Options::LocalResponseNormalization { radius: 3, bias: 1.5, alpha: 0.25, beta: 0.75 },
                OpParams::LocalResponseNorm { radius: 3, bias: 1.5, alpha: 0.25, beta: 0.75 },
            ),
            T::IfOptions => (Options::If { then_subgraph: 2, else_subgraph: 3 }, OpParams::If { then_subgraph: 2, else_subgraph: 3 }),
            T::WhileOptions => (Options::While { cond_subgraph: 2, body_subgraph: 3 }, OpParams::While { cond_subgraph: 2, body_subgraph: 3 }),
            T::CallOnceOptions => (Options::CallOnce { init_subgraph: 2 }, OpParams::CallOnce { init_subgraph: 2 }),
            T::VarHandleOptions => {
                (Options::VarHandle { container: "c".into(), shared_name: "v".into() }, OpParams::VarHandle { container: "c".into(), shared_name: "v".into() })
            }
            T::LSTMOptions
            | T::UnidirectionalSequenceLSTMOptions
            | T::BidirectionalSequenceLSTMOptions
            | T::RNNOptions
            | T::SequenceRNNOptions
            | T::BidirectionalSequenceRNNOptions => {
                let lstm = matches!(table, T::LSTMOptions | T::UnidirectionalSequenceLSTMOptions | T::BidirectionalSequenceLSTMOptions);
                let time = !matches!(table, T::LSTMOptions | T::RNNOptions);
                let bidi = matches!(table, T::BidirectionalSequenceLSTMOptions | T::BidirectionalSequenceRNNOptions);
                // BIDIRECTIONAL_SEQUENCE_LSTM defaults to time-major: write the other value.
                let time_major = time && table != T::BidirectionalSequenceLSTMOptions;
                let w = Options::Recurrent {
                    activation: A::TANH,
                    cell_clip: if lstm { 3.0 } else { 0.0 },
                    proj_clip: if lstm { 2.0 } else { 0.0 },
                    time_major,
                    merge_outputs: bidi,
                    asymmetric_quantize_inputs: true,
                };
                let p = RecurrentParams {
                    activation: Activation::Tanh,
                    cell_clip: if lstm { 3.0 } else { 0.0 },
                    proj_clip: if lstm { 2.0 } else { 0.0 },
                    time_major,
                    merge_outputs: bidi,
                    asymmetric_quantize_inputs: true,
                    ..Default::default()
                };
                (w, OpParams::Recurrent(p))
            }
            T::SVDFOptions => (
                Options::Svdf { rank: 2, activation: A::RELU, asymmetric_quantize_inputs: true },
                OpParams::Svdf { rank: 2, activation: Activation::Relu, asymmetric_quantize_inputs: true },
            ),
            _ => return None,
        })
    }

    /// A model holding `op` alone, with its fewest inputs and outputs (float32 [2, 3]).
    fn one_op(op: BuiltinOp, options: Options) -> ModelSpec {
        let mut m = ModelSpec::default();
        let tensor = |m: &mut ModelSpec, name: String| m.add_tensor(TensorSpec::activation(&name, TensorType::FLOAT32, &[2, 3]));
        let inputs: Vec<i32> = (0..op.inputs().min).map(|k| tensor(&mut m, format!("in{k}"))).collect();
        let outputs: Vec<i32> = (0..op.outputs().min).map(|k| tensor(&mut m, format!("out{k}"))).collect();
        m.add_op(OpCode::Builtin(op.operator()), &inputs, &outputs, options);
        m.inputs = inputs;
        m.outputs = outputs;
        m
    }

    /// The writer's options and the runtime's parser cannot drift apart: for every op
    /// of the op table that reads options, the writer writes them as the op's table
    /// and the runtime parses back exactly the parameters written.
    #[test]
    fn writer_options_round_trip_through_the_parser_for_every_table_op() {
        let mut checked = 0;
        for &op in BuiltinOp::ALL.iter().filter(|op| op.options() != T::NONE) {
            let unwritten = NOT_WRITTEN.iter().any(|(o, _)| *o == op);
            let Some((options, want)) = representative(op.options()) else {
                assert!(unwritten, "{op}: the writer has no options for {:?}; add them (or list the op in NOT_WRITTEN)", op.options().variant_name());
                continue;
            };
            assert!(!unwritten, "{op} is in NOT_WRITTEN but the writer expresses its options: drop it from the list");
            // Defaults would pass without the table being read at all.
            let defaults = parse_params(op, op.options().0, None).unwrap_or(OpParams::None);
            assert_ne!(want, defaults, "{op}: the representative options are the defaults");
            for bytes in [one_op(op, options.clone()).to_bytes(), one_op(op, options).to_bytes_external()] {
                let bytes = bytes.unwrap_or_else(|e| panic!("{op}: {e}"));
                let model = Model::from_bytes(std::sync::Arc::new(bytes)).unwrap_or_else(|e| panic!("{op}: {e}"));
                assert_eq!(model.subgraphs[0].ops[0].params, want, "{op}");
            }
            checked += 1;
        }
        assert!(checked >= 30, "only {checked} ops read options");
    }
}
