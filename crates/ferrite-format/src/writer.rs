//! Builds `.tflite` model files with the generated flatbuffer builders.
//!
//! Used by the test suite to generate single-op models with randomized
//! parameters, to build the small demo model the repository ships, and later
//! by training export. The writer is deliberately explicit: every tensor and op
//! is described by value, nothing is inferred.

use crate::ops::BuiltinOp;
use crate::schema as fb;
use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

/// Fused activations.
pub use fb::ActivationFunctionType as Activation;
/// Builtin operator codes.
pub use fb::BuiltinOperator;
/// Padding kinds.
pub use fb::Padding;
/// Tensor element types the writer can describe (a subset of the format's).
pub use fb::TensorType;

/// One tensor of the subgraph being written.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: TensorType,
    /// Static shape (unknown dims written as 1 here and -1 in `shape_signature`).
    pub shape: Vec<i32>,
    /// Shape with -1 for dims unknown until run time.
    pub shape_signature: Option<Vec<i32>>,
    /// Constant data, little-endian, or `None` for activations.
    pub data: Option<Vec<u8>>,
    /// Per-tensor or per-axis quantization: (scales, zero points, axis).
    pub quant: Option<(Vec<f32>, Vec<i64>, i32)>,
    /// A variable tensor (state kept across invocations; reset by `ResetVariableTensors`).
    pub is_variable: bool,
}

impl TensorSpec {
    /// A non-constant tensor.
    pub fn activation(name: &str, dtype: TensorType, shape: &[i32]) -> Self {
        TensorSpec { name: name.into(), dtype, shape: shape.to_vec(), shape_signature: None, data: None, quant: None, is_variable: false }
    }
    /// A constant float32 tensor.
    pub fn const_f32(name: &str, shape: &[i32], values: &[f32]) -> Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorSpec { data: Some(data), ..Self::activation(name, TensorType::FLOAT32, shape) }
    }
    /// A constant STRING tensor (the layout of [`crate::strings`]); `None` when
    /// the strings exceed what its int32 offsets address.
    pub fn const_strings<S: AsRef<[u8]>>(name: &str, shape: &[i32], items: &[S]) -> Option<Self> {
        Some(TensorSpec { data: Some(crate::strings::write(items)?), ..Self::activation(name, TensorType::STRING, shape) })
    }
    /// A constant int32 tensor.
    pub fn const_i32(name: &str, shape: &[i32], values: &[i32]) -> Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorSpec { data: Some(data), ..Self::activation(name, TensorType::INT32, shape) }
    }
}

/// Builtin options of an op, for the ops the writer can express. A variant is
/// written as the options table of the op it is given to, which must be one the
/// variant fits (see [`ModelSpec::to_bytes`]).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Options {
    /// No options table: the reader takes the format's defaults. Fits every op.
    None,
    Conv2D {
        padding: Padding,
        stride: (i32, i32),
        dilation: (i32, i32),
        activation: Activation,
    },
    DepthwiseConv2D {
        padding: Padding,
        stride: (i32, i32),
        dilation: (i32, i32),
        depth_multiplier: i32,
        activation: Activation,
    },
    /// CONV_3D and CONV_3D_TRANSPOSE; strides and dilations as (depth, height, width).
    Conv3D {
        padding: Padding,
        stride: (i32, i32, i32),
        dilation: (i32, i32, i32),
        activation: Activation,
    },
    Pool2D {
        padding: Padding,
        stride: (i32, i32),
        filter: (i32, i32),
        activation: Activation,
    },
    FullyConnected {
        activation: Activation,
        keep_num_dims: bool,
        /// Hybrid kernels quantize each input row with its own zero point.
        asymmetric_quantize_inputs: bool,
    },
    Softmax {
        beta: f32,
    },
    Concatenation {
        axis: i32,
        activation: Activation,
    },
    /// ADD, SUB, MUL, DIV: the fused activation (ADD / SUB keep the default `pot_scale_int16`).
    Binary {
        activation: Activation,
    },
    /// ADD / SUB options with an explicit `pot_scale_int16`.
    AddSub {
        activation: Activation,
        pot_scale_int16: bool,
    },
    Reshape {
        new_shape: Vec<i32>,
    },
    Resize {
        align_corners: bool,
        half_pixel_centers: bool,
    },
    ResizeNearest {
        align_corners: bool,
        half_pixel_centers: bool,
    },
    /// DEPTH_TO_SPACE / SPACE_TO_DEPTH.
    BlockSize(i32),
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
    /// SPLIT / SPLIT_V.
    Split {
        num_splits: i32,
    },
    StridedSlice {
        begin_mask: i32,
        end_mask: i32,
        ellipsis_mask: i32,
        new_axis_mask: i32,
        shrink_axis_mask: i32,
        offset: bool,
    },
    /// ARG_MAX / ARG_MIN.
    ArgMinMax {
        output_type: TensorType,
    },
    TransposeConv {
        padding: Padding,
        stride: (i32, i32),
        activation: Activation,
    },
    Shape {
        out_type: TensorType,
    },
    /// UNIQUE: the element type of its index output (int32 or int64).
    Unique {
        idx_out_type: TensorType,
    },
    /// LSH_PROJECTION: the schema's `LSHProjectionType` (1 sparse, 2 dense; 0,
    /// unknown, is written as is so that refusals can be tested).
    LshProjection {
        kind: i8,
    },
    /// SKIP_GRAM: n-gram size, most words skipped between two, and whether
    /// the shorter n-grams are produced too.
    SkipGram {
        ngram_size: i32,
        max_skip_size: i32,
        include_all_ngrams: bool,
    },
    /// HASHTABLE: the table's id and its key and value types.
    Hashtable {
        table_id: i32,
        key_dtype: TensorType,
        value_dtype: TensorType,
    },
    /// MIRROR_PAD: REFLECT (false) or SYMMETRIC (true).
    MirrorPad {
        symmetric: bool,
    },
    /// L2_NORMALIZATION.
    L2Norm {
        activation: Activation,
    },
    LocalResponseNormalization {
        radius: i32,
        bias: f32,
        alpha: f32,
        beta: f32,
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
        /// Hybrid kernels quantize each input row with its own zero point.
        asymmetric_quantize_inputs: bool,
    },
    Gelu {
        approximate: bool,
    },
    /// ONE_HOT: the axis the depth dimension is inserted at (negative counts from the end).
    OneHot {
        axis: i32,
    },
    /// CUMSUM.
    Cumsum {
        exclusive: bool,
        reverse: bool,
    },
    /// REVERSE_SEQUENCE: the dimension reversed and the one indexing `seq_lengths`.
    ReverseSequence {
        seq_dim: i32,
        batch_dim: i32,
    },
    /// SPARSE_TO_DENSE.
    SparseToDense {
        validate_indices: bool,
    },
    /// RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL, MULTINOMIAL.
    Random {
        seed: i64,
        seed2: i64,
    },
    /// BUCKETIZE.
    Bucketize {
        boundaries: Vec<f32>,
    },
    /// FAKE_QUANT.
    FakeQuant {
        min: f32,
        max: f32,
        num_bits: i32,
        narrow_range: bool,
    },
    /// EMBEDDING_LOOKUP_SPARSE: the CombinerType code (0 SUM, 1 MEAN, 2 SQRTN).
    EmbeddingLookupSparse {
        combiner: i8,
    },
    /// An options table of this type with every field at its default. Fits an op
    /// whose options table is this type.
    Empty(fb::BuiltinOptions),
    If {
        then_subgraph: i32,
        else_subgraph: i32,
    },
    While {
        cond_subgraph: i32,
        body_subgraph: i32,
    },
    CallOnce {
        init_subgraph: i32,
    },
    VarHandle {
        container: String,
        shared_name: String,
    },
    /// The recurrent ops' options (LSTM, the sequence LSTMs and RNNs, RNN): each
    /// table takes the fields it has and ignores the others.
    Recurrent {
        activation: Activation,
        cell_clip: f32,
        proj_clip: f32,
        time_major: bool,
        merge_outputs: bool,
        asymmetric_quantize_inputs: bool,
    },
    /// LSTM with the basic kernel (`kernel_type` BASIC): LiteRT's legacy 8-bit cell.
    LstmBasic {
        activation: Activation,
        cell_clip: f32,
        proj_clip: f32,
    },
    /// SVDF.
    Svdf {
        rank: i32,
        activation: Activation,
        asymmetric_quantize_inputs: bool,
    },
    /// These options written as they are, whatever the op reads: a table of the
    /// inner variant's own type (the first it fits; `Empty`'s given type), never
    /// checked against the op table. For tests of how readers treat a file whose
    /// options are of the wrong type.
    Unchecked(Box<Options>),
    /// Options of an op whose table lives in the second options union
    /// (`builtin_options_2`): the StableHLO-derived ops. Written there, with no table
    /// in the first union.
    Hlo(HloOptions),
}

/// Options tables of the second union (`BuiltinOptions2`), for the ops the
/// StableHLO legalization emits. Vectors are written as the format's int64 lists.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum HloOptions {
    /// STABLEHLO_PAD: per-dimension low, high (negative crops) and interior padding.
    Pad { low: Vec<i64>, high: Vec<i64>, interior: Vec<i64> },
    /// REDUCE_WINDOW: the `ReduceWindowFunction` code (1 ADD, 2 MUL, 3 MINIMUM, 4 MAXIMUM, 5 ALL, 6 ANY).
    ReduceWindow { function: i32 },
    /// STABLEHLO_REDUCE_WINDOW: window geometry per dimension, padding as
    /// `[low0, high0, low1, high1, ...]`, and the subgraph holding the reduction body.
    StablehloReduceWindow {
        window_dimensions: Vec<i64>,
        window_strides: Vec<i64>,
        base_dilations: Vec<i64>,
        window_dilations: Vec<i64>,
        padding: Vec<i64>,
        body_subgraph_index: i32,
    },
    /// STABLEHLO_RNG_BIT_GENERATOR: the `RngAlgorithm` code (0 DEFAULT, 1 PHILOX, 2 THREEFRY).
    RngBitGenerator { algorithm: i8 },
    /// STABLEHLO_GATHER: the gather's dimension numbers and slice sizes.
    Gather {
        offset_dims: Vec<i64>,
        collapsed_slice_dims: Vec<i64>,
        start_index_map: Vec<i64>,
        index_vector_dim: i64,
        slice_sizes: Vec<i64>,
        indices_are_sorted: bool,
    },
    /// STABLEHLO_SCATTER: the scatter's dimension numbers and the subgraph holding
    /// the update computation.
    Scatter {
        update_window_dims: Vec<i64>,
        inserted_window_dims: Vec<i64>,
        scatter_dims_to_operand_dims: Vec<i64>,
        index_vector_dim: i64,
        indices_are_sorted: bool,
        unique_indices: bool,
        update_computation_subgraph_index: i32,
    },
}

impl HloOptions {
    /// The member of the second union these options are.
    pub fn table(&self) -> fb::BuiltinOptions2 {
        match self {
            HloOptions::Pad { .. } => fb::BuiltinOptions2::StablehloPadOptions,
            HloOptions::ReduceWindow { .. } => fb::BuiltinOptions2::ReduceWindowOptions,
            HloOptions::StablehloReduceWindow { .. } => fb::BuiltinOptions2::StablehloReduceWindowOptions,
            HloOptions::RngBitGenerator { .. } => fb::BuiltinOptions2::StablehloRngBitGeneratorOptions,
            HloOptions::Gather { .. } => fb::BuiltinOptions2::StablehloGatherOptions,
            HloOptions::Scatter { .. } => fb::BuiltinOptions2::StablehloScatterOptions,
        }
    }

    fn write(&self, b: &mut FlatBufferBuilder) -> WIPOffset<UnionWIPOffset> {
        match self {
            HloOptions::Pad { low, high, interior } => {
                let (low, high, interior) = (b.create_vector(low), b.create_vector(high), b.create_vector(interior));
                fb::StablehloPadOptions::create(
                    b,
                    &fb::StablehloPadOptionsArgs { edge_padding_low: Some(low), edge_padding_high: Some(high), interior_padding: Some(interior) },
                )
                .as_union_value()
            }
            HloOptions::RngBitGenerator { algorithm } => {
                fb::StablehloRngBitGeneratorOptions::create(b, &fb::StablehloRngBitGeneratorOptionsArgs { algorithm: fb::RngAlgorithm(*algorithm) })
                    .as_union_value()
            }
            HloOptions::ReduceWindow { function } => {
                fb::ReduceWindowOptions::create(b, &fb::ReduceWindowOptionsArgs { reduce_function: fb::ReduceWindowFunction(*function) }).as_union_value()
            }
            HloOptions::StablehloReduceWindow { window_dimensions, window_strides, base_dilations, window_dilations, padding, body_subgraph_index } => {
                let wd = b.create_vector(window_dimensions);
                let ws = b.create_vector(window_strides);
                let bd = b.create_vector(base_dilations);
                let wdl = b.create_vector(window_dilations);
                let pd = b.create_vector(padding);
                fb::StablehloReduceWindowOptions::create(
                    b,
                    &fb::StablehloReduceWindowOptionsArgs {
                        window_dimensions: Some(wd),
                        window_strides: Some(ws),
                        base_dilations: Some(bd),
                        window_dilations: Some(wdl),
                        padding: Some(pd),
                        body_subgraph_index: *body_subgraph_index,
                    },
                )
                .as_union_value()
            }
            HloOptions::Gather { offset_dims, collapsed_slice_dims, start_index_map, index_vector_dim, slice_sizes, indices_are_sorted } => {
                let od = b.create_vector(offset_dims);
                let cd = b.create_vector(collapsed_slice_dims);
                let sm = b.create_vector(start_index_map);
                let ss = b.create_vector(slice_sizes);
                fb::StablehloGatherOptions::create(
                    b,
                    &fb::StablehloGatherOptionsArgs {
                        offset_dims: Some(od),
                        collapsed_slice_dims: Some(cd),
                        start_index_map: Some(sm),
                        index_vector_dim: *index_vector_dim,
                        slice_sizes: Some(ss),
                        indices_are_sorted: *indices_are_sorted,
                    },
                )
                .as_union_value()
            }
            HloOptions::Scatter {
                update_window_dims,
                inserted_window_dims,
                scatter_dims_to_operand_dims,
                index_vector_dim,
                indices_are_sorted,
                unique_indices,
                update_computation_subgraph_index,
            } => {
                let uw = b.create_vector(update_window_dims);
                let iw = b.create_vector(inserted_window_dims);
                let so = b.create_vector(scatter_dims_to_operand_dims);
                fb::StablehloScatterOptions::create(
                    b,
                    &fb::StablehloScatterOptionsArgs {
                        indices_are_sorted: *indices_are_sorted,
                        update_window_dims: Some(uw),
                        inserted_window_dims: Some(iw),
                        scatter_dims_to_operand_dims: Some(so),
                        index_vector_dim: *index_vector_dim,
                        unique_indices: *unique_indices,
                        update_computation_subgraph_index: *update_computation_subgraph_index,
                    },
                )
                .as_union_value()
            }
        }
    }
}

impl Options {
    /// The options tables these options can be written as.
    fn tables(&self) -> &'static [fb::BuiltinOptions] {
        use fb::BuiltinOptions as T;
        match self {
            Options::None | Options::Empty(_) | Options::Unchecked(_) | Options::Hlo(_) => &[],
            Options::Conv2D { .. } => &[T::Conv2DOptions],
            Options::DepthwiseConv2D { .. } => &[T::DepthwiseConv2DOptions],
            Options::Conv3D { .. } => &[T::Conv3DOptions],
            Options::Pool2D { .. } => &[T::Pool2DOptions],
            Options::FullyConnected { .. } => &[T::FullyConnectedOptions],
            Options::Softmax { .. } => &[T::SoftmaxOptions],
            Options::Concatenation { .. } => &[T::ConcatenationOptions],
            Options::Binary { .. } => &[T::AddOptions, T::SubOptions, T::MulOptions, T::DivOptions],
            Options::AddSub { .. } => &[T::AddOptions, T::SubOptions],
            Options::Reshape { .. } => &[T::ReshapeOptions],
            Options::Resize { .. } => &[T::ResizeBilinearOptions],
            Options::ResizeNearest { .. } => &[T::ResizeNearestNeighborOptions],
            Options::BlockSize(_) => &[T::SpaceToDepthOptions, T::DepthToSpaceOptions],
            Options::Gather { .. } => &[T::GatherOptions],
            Options::Reducer { .. } => &[T::ReducerOptions],
            Options::Squeeze { .. } => &[T::SqueezeOptions],
            Options::Split { .. } => &[T::SplitOptions, T::SplitVOptions],
            Options::StridedSlice { .. } => &[T::StridedSliceOptions],
            Options::ArgMinMax { .. } => &[T::ArgMaxOptions, T::ArgMinOptions],
            Options::TransposeConv { .. } => &[T::TransposeConvOptions],
            Options::Shape { .. } => &[T::ShapeOptions],
            Options::Unique { .. } => &[T::UniqueOptions],
            Options::MirrorPad { .. } => &[T::MirrorPadOptions],
            Options::LshProjection { .. } => &[T::LSHProjectionOptions],
            Options::SkipGram { .. } => &[T::SkipGramOptions],
            Options::Hashtable { .. } => &[T::HashtableOptions],
            Options::L2Norm { .. } => &[T::L2NormOptions],
            Options::LocalResponseNormalization { .. } => &[T::LocalResponseNormalizationOptions],
            Options::Pack { .. } => &[T::PackOptions],
            Options::Unpack { .. } => &[T::UnpackOptions],
            Options::LeakyRelu { .. } => &[T::LeakyReluOptions],
            Options::BatchMatMul { .. } => &[T::BatchMatMulOptions],
            Options::Gelu { .. } => &[T::GeluOptions],
            Options::OneHot { .. } => &[T::OneHotOptions],
            Options::Cumsum { .. } => &[T::CumsumOptions],
            Options::ReverseSequence { .. } => &[T::ReverseSequenceOptions],
            Options::SparseToDense { .. } => &[T::SparseToDenseOptions],
            Options::Random { .. } => &[T::RandomOptions],
            Options::Bucketize { .. } => &[T::BucketizeOptions],
            Options::FakeQuant { .. } => &[T::FakeQuantOptions],
            Options::EmbeddingLookupSparse { .. } => &[T::EmbeddingLookupSparseOptions],
            Options::If { .. } => &[T::IfOptions],
            Options::While { .. } => &[T::WhileOptions],
            Options::CallOnce { .. } => &[T::CallOnceOptions],
            Options::VarHandle { .. } => &[T::VarHandleOptions],
            Options::Recurrent { .. } => &[
                T::LSTMOptions,
                T::UnidirectionalSequenceLSTMOptions,
                T::BidirectionalSequenceLSTMOptions,
                T::RNNOptions,
                T::SequenceRNNOptions,
                T::BidirectionalSequenceRNNOptions,
            ],
            Options::LstmBasic { .. } => &[T::LSTMOptions],
            Options::Svdf { .. } => &[T::SVDFOptions],
        }
    }

    /// The table written for an op that reads `expected` (`NONE` for custom ops and
    /// builtins without an op-table line), or `None` when these options fit no
    /// table of it. `Ok(NONE)` means no table is written.
    fn table_for(&self, expected: fb::BuiltinOptions) -> Option<fb::BuiltinOptions> {
        use fb::BuiltinOptions as T;
        match self {
            Options::None | Options::Hlo(_) => Some(T::NONE),
            Options::Empty(t) => (*t == expected && expected != T::NONE).then_some(expected),
            Options::Unchecked(inner) => Some(inner.own_table()),
            o => o.tables().contains(&expected).then_some(expected),
        }
    }

    /// The table these options are written as when nothing chooses among the ones
    /// they fit.
    fn own_table(&self) -> fb::BuiltinOptions {
        match self {
            Options::Empty(t) => *t,
            Options::Unchecked(inner) => inner.own_table(),
            o => o.tables().first().copied().unwrap_or(fb::BuiltinOptions::NONE),
        }
    }

    /// The variant's name, for errors.
    fn kind(&self) -> String {
        let debug = format!("{self:?}");
        debug.split([' ', '(', '{']).next().unwrap_or_default().to_string()
    }
}

/// Why a model could not be written.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    /// An op was given options that fit no options table it reads.
    #[error("subgraph {subgraph} op {op} ({name}): {given} options do not fit its options table ({expected})")]
    OptionsMismatch {
        /// Subgraph index (0 is the main graph, then `ModelSpec::subgraphs` in order).
        subgraph: usize,
        /// Op index in the subgraph.
        op: usize,
        /// The op's name.
        name: String,
        /// The `Options` variant given.
        given: String,
        /// The options table the op table names for the op (`NONE`: the op reads none).
        expected: &'static str,
    },
}

/// What an op is: a builtin code or a custom op name.
#[derive(Debug, Clone, PartialEq)]
pub enum OpCode {
    /// A builtin operator.
    Builtin(BuiltinOperator),
    /// A custom operator with its name.
    Custom(String),
}

/// One operator of the subgraph being written.
#[derive(Debug, Clone)]
pub struct OpSpec {
    /// The op code.
    pub code: OpCode,
    /// Input tensor indices (-1 for an omitted optional input).
    pub inputs: Vec<i32>,
    /// Output tensor indices.
    pub outputs: Vec<i32>,
    /// Builtin options.
    pub options: Options,
    /// Custom options bytes (custom ops only).
    pub custom_options: Option<Vec<u8>>,
    /// The op code's version (1 from [`ModelSpec::add_op`]; MediaPipe's custom ops
    /// choose their definition by it). Ops of one code and version share an
    /// operator-code entry.
    pub version: i32,
    /// Intermediate tensors (the integer LSTM reads its gate and hidden scales
    /// from them); written only when there are some.
    pub intermediates: Vec<i32>,
}

/// A single-subgraph model description.
#[derive(Debug, Clone, Default)]
pub struct ModelSpec {
    /// Tensors, indexed by position.
    pub tensors: Vec<TensorSpec>,
    /// Operators in execution order.
    pub ops: Vec<OpSpec>,
    /// Subgraph input tensor indices.
    pub inputs: Vec<i32>,
    /// Subgraph output tensor indices.
    pub outputs: Vec<i32>,
    /// Model description string.
    pub description: String,
    /// When set, writes a signature with this key naming every input and output.
    pub signature_key: Option<String>,
    /// Further subgraphs (indices 1, 2, ...), e.g. branches and loop bodies. Their own
    /// `subgraphs`, `description` and `signature_key` are ignored.
    pub subgraphs: Vec<ModelSpec>,
}

impl ModelSpec {
    /// Adds a tensor and returns its index.
    pub fn add_tensor(&mut self, t: TensorSpec) -> i32 {
        self.tensors.push(t);
        (self.tensors.len() - 1) as i32
    }

    /// Adds an op.
    pub fn add_op(&mut self, code: OpCode, inputs: &[i32], outputs: &[i32], options: Options) {
        self.ops.push(OpSpec { code, inputs: inputs.to_vec(), outputs: outputs.to_vec(), options, custom_options: None, version: 1, intermediates: vec![] });
    }

    /// Serializes the model to `.tflite` bytes, constants inline.
    ///
    /// Fails when an op's options fit no options table the op reads (its op-table
    /// line's; none for custom ops and builtins without a line), except
    /// [`Options::None`] and [`Options::Unchecked`].
    pub fn to_bytes(&self) -> Result<Vec<u8>, WriteError> {
        self.build(None)
    }

    /// Serializes with every constant stored after the flatbuffer and referenced by
    /// `offset`/`size` (the layout converters use for models over 2 GiB). Fails as
    /// [`ModelSpec::to_bytes`] does.
    pub fn to_bytes_external(&self) -> Result<Vec<u8>, WriteError> {
        // The u64 fields are always present, so the flatbuffer's length does not depend on
        // their values: build once to learn it, then again with the real offsets.
        let probe = self.build(Some(0))?;
        let base = probe.len().div_ceil(16) * 16;
        let mut out = self.build(Some(base as u64))?;
        out.resize(base, 0);
        for d in std::iter::once(self).chain(self.subgraphs.iter()).flat_map(|g| &g.tensors).filter_map(|t| t.data.as_ref()) {
            out.extend_from_slice(d);
            out.resize(out.len().div_ceil(16) * 16, 0);
        }
        Ok(out)
    }

    /// The options table each op of each graph is written with, or the first op
    /// whose options fit none of its op's.
    fn option_tables(graphs: &[&ModelSpec]) -> Result<Vec<Vec<fb::BuiltinOptions>>, WriteError> {
        graphs
            .iter()
            .enumerate()
            .map(|(gi, g)| {
                g.ops
                    .iter()
                    .enumerate()
                    .map(|(oi, op)| {
                        let (expected, name) = match &op.code {
                            OpCode::Builtin(code) => match BuiltinOp::from_code(code.0) {
                                Some(b) => (b.options(), b.name().to_string()),
                                None => (fb::BuiltinOptions::NONE, code.variant_name().map_or_else(|| format!("BUILTIN_{}", code.0), str::to_string)),
                            },
                            OpCode::Custom(name) => (fb::BuiltinOptions::NONE, name.clone()),
                        };
                        op.options.table_for(expected).ok_or_else(|| WriteError::OptionsMismatch {
                            subgraph: gi,
                            op: oi,
                            name,
                            given: op.options.kind(),
                            expected: expected.variant_name().unwrap_or("?"),
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn build(&self, external_base: Option<u64>) -> Result<Vec<u8>, WriteError> {
        let mut external_base = external_base;
        let graphs: Vec<&ModelSpec> = std::iter::once(self).chain(self.subgraphs.iter()).collect();
        let option_tables = Self::option_tables(&graphs)?;
        let mut b = FlatBufferBuilder::with_capacity(1024);
        b.force_defaults(external_base.is_some());

        // Buffer 0 is the format's empty sentinel; each constant gets its own buffer.
        let mut buffers = vec![fb::Buffer::create(&mut b, &fb::BufferArgs::default())];
        let mut tensor_buffers: Vec<Vec<u32>> = Vec::with_capacity(graphs.len());
        for g in &graphs {
            let mut tensor_buffer = Vec::with_capacity(g.tensors.len());
            for t in &g.tensors {
                match &t.data {
                    Some(d) => {
                        let buf = match external_base.as_mut() {
                            Some(next) => {
                                let args = fb::BufferArgs { data: None, offset: *next, size: d.len() as u64 };
                                *next = (*next + d.len() as u64).div_ceil(16) * 16;
                                fb::Buffer::create(&mut b, &args)
                            }
                            None => {
                                let data = b.create_vector(d);
                                fb::Buffer::create(&mut b, &fb::BufferArgs { data: Some(data), ..Default::default() })
                            }
                        };
                        buffers.push(buf);
                        tensor_buffer.push((buffers.len() - 1) as u32);
                    }
                    None => tensor_buffer.push(0),
                }
            }
            tensor_buffers.push(tensor_buffer);
        }

        // One operator code per distinct (builtin, custom name), shared by all subgraphs.
        let mut codes: Vec<(OpCode, i32)> = Vec::new();
        for op in graphs.iter().flat_map(|g| &g.ops) {
            if !codes.iter().any(|(c, v)| *c == op.code && *v == op.version) {
                codes.push((op.code.clone(), op.version));
            }
        }
        let code_index = |c: &OpCode, v: i32| codes.iter().position(|x| x.0 == *c && x.1 == v).unwrap_or(0) as u32;
        let fb_codes: Vec<_> = codes
            .iter()
            .map(|(c, version)| {
                let (code, custom) = match c {
                    OpCode::Builtin(op) => (*op, None),
                    OpCode::Custom(name) => (BuiltinOperator::CUSTOM, Some(b.create_string(name))),
                };
                // Old readers only look at the one-byte field; codes above 127 use the placeholder there.
                let deprecated = code.0.min(127) as i8;
                fb::OperatorCode::create(
                    &mut b,
                    &fb::OperatorCodeArgs { deprecated_builtin_code: deprecated, custom_code: custom, version: *version, builtin_code: code },
                )
            })
            .collect();

        let mut fb_subgraphs = Vec::with_capacity(graphs.len());
        for (gi, g) in graphs.iter().enumerate() {
            let mut tensors = Vec::with_capacity(g.tensors.len());
            for (t, &buffer) in g.tensors.iter().zip(&tensor_buffers[gi]) {
                let shape = b.create_vector(&t.shape);
                let shape_signature = t.shape_signature.as_ref().map(|s| b.create_vector(s));
                let name = b.create_string(&t.name);
                let quantization = t.quant.as_ref().map(|(s, z, axis)| {
                    let scale = b.create_vector(s);
                    let zero_point = b.create_vector(z);
                    fb::QuantizationParameters::create(
                        &mut b,
                        &fb::QuantizationParametersArgs { scale: Some(scale), zero_point: Some(zero_point), quantized_dimension: *axis, ..Default::default() },
                    )
                });
                tensors.push(fb::Tensor::create(
                    &mut b,
                    &fb::TensorArgs {
                        shape: Some(shape),
                        type_: t.dtype,
                        buffer,
                        name: Some(name),
                        quantization,
                        shape_signature,
                        has_rank: true,
                        is_variable: t.is_variable,
                        ..Default::default()
                    },
                ));
            }
            let mut ops = Vec::with_capacity(g.ops.len());
            for (op, &options_type) in g.ops.iter().zip(&option_tables[gi]) {
                let inputs = b.create_vector(&op.inputs);
                let outputs = b.create_vector(&op.outputs);
                let options = write_options(&mut b, options_type, &op.options);
                let (options_2_type, options_2) = match &op.options {
                    Options::Hlo(h) => (h.table(), Some(h.write(&mut b))),
                    _ => (fb::BuiltinOptions2::NONE, None),
                };
                let custom_options = op.custom_options.as_ref().map(|c| b.create_vector(c));
                let intermediates = (!op.intermediates.is_empty()).then(|| b.create_vector(&op.intermediates));
                ops.push(fb::Operator::create(
                    &mut b,
                    &fb::OperatorArgs {
                        opcode_index: code_index(&op.code, op.version),
                        inputs: Some(inputs),
                        outputs: Some(outputs),
                        builtin_options_type: options_type,
                        builtin_options: options,
                        builtin_options_2_type: options_2_type,
                        builtin_options_2: options_2,
                        custom_options,
                        intermediates,
                        ..Default::default()
                    },
                ));
            }
            let tensors = b.create_vector(&tensors);
            let inputs = b.create_vector(&g.inputs);
            let outputs = b.create_vector(&g.outputs);
            let ops = b.create_vector(&ops);
            let name = b.create_string(if gi == 0 { "main" } else { "sub" });
            fb_subgraphs.push(fb::SubGraph::create(
                &mut b,
                &fb::SubGraphArgs { tensors: Some(tensors), inputs: Some(inputs), outputs: Some(outputs), operators: Some(ops), name: Some(name) },
            ));
        }
        let subgraphs = b.create_vector(&fb_subgraphs);
        let codes = b.create_vector(&fb_codes);
        let buffers = b.create_vector(&buffers);
        let description = b.create_string(&self.description);
        let signature_defs = self.signature_key.as_ref().map(|key| {
            let inputs = tensor_maps(&mut b, self, &self.inputs);
            let outputs = tensor_maps(&mut b, self, &self.outputs);
            let key = b.create_string(key);
            let sig = fb::SignatureDef::create(
                &mut b,
                &fb::SignatureDefArgs { inputs: Some(inputs), outputs: Some(outputs), signature_key: Some(key), subgraph_index: 0 },
            );
            b.create_vector(&[sig])
        });
        let model = fb::Model::create(
            &mut b,
            &fb::ModelArgs {
                version: 3,
                operator_codes: Some(codes),
                subgraphs: Some(subgraphs),
                description: Some(description),
                buffers: Some(buffers),
                signature_defs,
                ..Default::default()
            },
        );
        b.finish(model, Some("TFL3"));
        Ok(b.finished_data().to_vec())
    }
}

/// Signature entries naming each tensor in `ts` by its tensor name.
fn tensor_maps<'b>(
    b: &mut FlatBufferBuilder<'b>,
    spec: &ModelSpec,
    ts: &[i32],
) -> WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<fb::TensorMap<'b>>>> {
    let v: Vec<_> = ts
        .iter()
        .map(|&t| {
            let name = b.create_string(&spec.tensors[t as usize].name);
            fb::TensorMap::create(b, &fb::TensorMapArgs { name: Some(name), tensor_index: t as u32 })
        })
        .collect();
    b.create_vector(&v)
}

/// Writes `o` as an options table of type `table` (one the options fit, chosen by
/// `Options::table_for`); nothing for `NONE`.
fn write_options(b: &mut FlatBufferBuilder, table: fb::BuiltinOptions, o: &Options) -> Option<WIPOffset<UnionWIPOffset>> {
    use fb::BuiltinOptions as T;
    if table == T::NONE {
        return None;
    }
    Some(match o {
        Options::None | Options::Hlo(_) => return None,
        Options::Unchecked(inner) => return write_options(b, table, inner),
        Options::Conv2D { padding, stride, dilation, activation } => fb::Conv2DOptions::create(
            b,
            &fb::Conv2DOptionsArgs {
                padding: *padding,
                stride_w: stride.1,
                stride_h: stride.0,
                fused_activation_function: *activation,
                dilation_w_factor: dilation.1,
                dilation_h_factor: dilation.0,
                ..Default::default()
            },
        )
        .as_union_value(),
        Options::DepthwiseConv2D { padding, stride, dilation, depth_multiplier, activation } => fb::DepthwiseConv2DOptions::create(
            b,
            &fb::DepthwiseConv2DOptionsArgs {
                padding: *padding,
                stride_w: stride.1,
                stride_h: stride.0,
                depth_multiplier: *depth_multiplier,
                fused_activation_function: *activation,
                dilation_w_factor: dilation.1,
                dilation_h_factor: dilation.0,
            },
        )
        .as_union_value(),
        Options::Conv3D { padding, stride, dilation, activation } => fb::Conv3DOptions::create(
            b,
            &fb::Conv3DOptionsArgs {
                padding: *padding,
                stride_d: stride.0,
                stride_h: stride.1,
                stride_w: stride.2,
                fused_activation_function: *activation,
                dilation_d_factor: dilation.0,
                dilation_h_factor: dilation.1,
                dilation_w_factor: dilation.2,
            },
        )
        .as_union_value(),
        Options::Pool2D { padding, stride, filter, activation } => fb::Pool2DOptions::create(
            b,
            &fb::Pool2DOptionsArgs {
                padding: *padding,
                stride_w: stride.1,
                stride_h: stride.0,
                filter_width: filter.1,
                filter_height: filter.0,
                fused_activation_function: *activation,
            },
        )
        .as_union_value(),
        Options::FullyConnected { activation, keep_num_dims, asymmetric_quantize_inputs } => fb::FullyConnectedOptions::create(
            b,
            &fb::FullyConnectedOptionsArgs {
                fused_activation_function: *activation,
                keep_num_dims: *keep_num_dims,
                asymmetric_quantize_inputs: *asymmetric_quantize_inputs,
                ..Default::default()
            },
        )
        .as_union_value(),
        Options::Softmax { beta } => fb::SoftmaxOptions::create(b, &fb::SoftmaxOptionsArgs { beta: *beta }).as_union_value(),
        Options::Concatenation { axis, activation } => {
            fb::ConcatenationOptions::create(b, &fb::ConcatenationOptionsArgs { axis: *axis, fused_activation_function: *activation }).as_union_value()
        }
        // ADD and SUB default pot_scale_int16 to true, as the schema does.
        Options::Binary { activation } => binary_options(b, table, *activation, true),
        Options::AddSub { activation, pot_scale_int16 } => binary_options(b, table, *activation, *pot_scale_int16),
        Options::Reshape { new_shape } => {
            let s = b.create_vector(new_shape);
            fb::ReshapeOptions::create(b, &fb::ReshapeOptionsArgs { new_shape: Some(s) }).as_union_value()
        }
        Options::Resize { align_corners, half_pixel_centers } => {
            fb::ResizeBilinearOptions::create(b, &fb::ResizeBilinearOptionsArgs { align_corners: *align_corners, half_pixel_centers: *half_pixel_centers })
                .as_union_value()
        }
        Options::ResizeNearest { align_corners, half_pixel_centers } => fb::ResizeNearestNeighborOptions::create(
            b,
            &fb::ResizeNearestNeighborOptionsArgs { align_corners: *align_corners, half_pixel_centers: *half_pixel_centers },
        )
        .as_union_value(),
        Options::BlockSize(n) => match table {
            T::DepthToSpaceOptions => fb::DepthToSpaceOptions::create(b, &fb::DepthToSpaceOptionsArgs { block_size: *n }).as_union_value(),
            _ => fb::SpaceToDepthOptions::create(b, &fb::SpaceToDepthOptionsArgs { block_size: *n }).as_union_value(),
        },
        Options::OneHot { axis } => fb::OneHotOptions::create(b, &fb::OneHotOptionsArgs { axis: *axis }).as_union_value(),
        Options::LstmBasic { activation, cell_clip, proj_clip } => fb::LSTMOptions::create(
            b,
            &fb::LSTMOptionsArgs {
                fused_activation_function: *activation,
                cell_clip: *cell_clip,
                proj_clip: *proj_clip,
                kernel_type: fb::LSTMKernelType::BASIC,
                ..Default::default()
            },
        )
        .as_union_value(),
        Options::Recurrent { activation, cell_clip, proj_clip, time_major, merge_outputs, asymmetric_quantize_inputs } => {
            let (activation, cell_clip, proj_clip, time_major, merge_outputs, asymmetric_quantize_inputs) =
                (*activation, *cell_clip, *proj_clip, *time_major, *merge_outputs, *asymmetric_quantize_inputs);
            let fused_activation_function = activation;
            match table {
                T::LSTMOptions => fb::LSTMOptions::create(
                    b,
                    &fb::LSTMOptionsArgs { fused_activation_function, cell_clip, proj_clip, asymmetric_quantize_inputs, ..Default::default() },
                )
                .as_union_value(),
                T::BidirectionalSequenceLSTMOptions => fb::BidirectionalSequenceLSTMOptions::create(
                    b,
                    &fb::BidirectionalSequenceLSTMOptionsArgs {
                        fused_activation_function,
                        cell_clip,
                        proj_clip,
                        merge_outputs,
                        time_major,
                        asymmetric_quantize_inputs,
                    },
                )
                .as_union_value(),
                T::RNNOptions => fb::RNNOptions::create(b, &fb::RNNOptionsArgs { fused_activation_function, asymmetric_quantize_inputs }).as_union_value(),
                T::SequenceRNNOptions => {
                    fb::SequenceRNNOptions::create(b, &fb::SequenceRNNOptionsArgs { time_major, fused_activation_function, asymmetric_quantize_inputs })
                        .as_union_value()
                }
                T::BidirectionalSequenceRNNOptions => fb::BidirectionalSequenceRNNOptions::create(
                    b,
                    &fb::BidirectionalSequenceRNNOptionsArgs { time_major, fused_activation_function, merge_outputs, asymmetric_quantize_inputs },
                )
                .as_union_value(),
                _ => fb::UnidirectionalSequenceLSTMOptions::create(
                    b,
                    &fb::UnidirectionalSequenceLSTMOptionsArgs {
                        fused_activation_function,
                        cell_clip,
                        proj_clip,
                        time_major,
                        asymmetric_quantize_inputs,
                        ..Default::default()
                    },
                )
                .as_union_value(),
            }
        }
        Options::Svdf { rank, activation, asymmetric_quantize_inputs } => fb::SVDFOptions::create(
            b,
            &fb::SVDFOptionsArgs { rank: *rank, fused_activation_function: *activation, asymmetric_quantize_inputs: *asymmetric_quantize_inputs },
        )
        .as_union_value(),
        Options::Cumsum { exclusive, reverse } => {
            fb::CumsumOptions::create(b, &fb::CumsumOptionsArgs { exclusive: *exclusive, reverse: *reverse }).as_union_value()
        }
        Options::ReverseSequence { seq_dim, batch_dim } => {
            fb::ReverseSequenceOptions::create(b, &fb::ReverseSequenceOptionsArgs { seq_dim: *seq_dim, batch_dim: *batch_dim }).as_union_value()
        }
        Options::SparseToDense { validate_indices } => {
            fb::SparseToDenseOptions::create(b, &fb::SparseToDenseOptionsArgs { validate_indices: *validate_indices }).as_union_value()
        }
        Options::Random { seed, seed2 } => fb::RandomOptions::create(b, &fb::RandomOptionsArgs { seed: *seed, seed2: *seed2 }).as_union_value(),
        Options::Bucketize { boundaries } => {
            let v = b.create_vector(boundaries);
            fb::BucketizeOptions::create(b, &fb::BucketizeOptionsArgs { boundaries: Some(v) }).as_union_value()
        }
        Options::FakeQuant { min, max, num_bits, narrow_range } => {
            fb::FakeQuantOptions::create(b, &fb::FakeQuantOptionsArgs { min: *min, max: *max, num_bits: *num_bits, narrow_range: *narrow_range })
                .as_union_value()
        }
        Options::EmbeddingLookupSparse { combiner } => {
            fb::EmbeddingLookupSparseOptions::create(b, &fb::EmbeddingLookupSparseOptionsArgs { combiner: fb::CombinerType(*combiner) }).as_union_value()
        }
        Options::Gather { axis, batch_dims } => fb::GatherOptions::create(b, &fb::GatherOptionsArgs { axis: *axis, batch_dims: *batch_dims }).as_union_value(),
        Options::Reducer { keep_dims } => fb::ReducerOptions::create(b, &fb::ReducerOptionsArgs { keep_dims: *keep_dims }).as_union_value(),
        Options::Squeeze { dims } => {
            let d = b.create_vector(dims);
            fb::SqueezeOptions::create(b, &fb::SqueezeOptionsArgs { squeeze_dims: Some(d) }).as_union_value()
        }
        Options::Split { num_splits } => match table {
            T::SplitVOptions => fb::SplitVOptions::create(b, &fb::SplitVOptionsArgs { num_splits: *num_splits }).as_union_value(),
            _ => fb::SplitOptions::create(b, &fb::SplitOptionsArgs { num_splits: *num_splits }).as_union_value(),
        },
        Options::StridedSlice { begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask, offset } => fb::StridedSliceOptions::create(
            b,
            &fb::StridedSliceOptionsArgs {
                begin_mask: *begin_mask,
                end_mask: *end_mask,
                ellipsis_mask: *ellipsis_mask,
                new_axis_mask: *new_axis_mask,
                shrink_axis_mask: *shrink_axis_mask,
                offset: *offset,
            },
        )
        .as_union_value(),
        Options::ArgMinMax { output_type } => match table {
            T::ArgMinOptions => fb::ArgMinOptions::create(b, &fb::ArgMinOptionsArgs { output_type: *output_type }).as_union_value(),
            _ => fb::ArgMaxOptions::create(b, &fb::ArgMaxOptionsArgs { output_type: *output_type }).as_union_value(),
        },
        Options::TransposeConv { padding, stride, activation } => fb::TransposeConvOptions::create(
            b,
            &fb::TransposeConvOptionsArgs {
                padding: *padding,
                stride_w: stride.1,
                stride_h: stride.0,
                fused_activation_function: *activation,
                ..Default::default()
            },
        )
        .as_union_value(),
        Options::Shape { out_type } => fb::ShapeOptions::create(b, &fb::ShapeOptionsArgs { out_type: *out_type }).as_union_value(),
        Options::Unique { idx_out_type } => fb::UniqueOptions::create(b, &fb::UniqueOptionsArgs { idx_out_type: *idx_out_type }).as_union_value(),
        Options::LshProjection { kind } => {
            fb::LSHProjectionOptions::create(b, &fb::LSHProjectionOptionsArgs { type_: fb::LSHProjectionType(*kind) }).as_union_value()
        }
        Options::Hashtable { table_id, key_dtype, value_dtype } => {
            fb::HashtableOptions::create(b, &fb::HashtableOptionsArgs { table_id: *table_id, key_dtype: *key_dtype, value_dtype: *value_dtype })
                .as_union_value()
        }
        Options::SkipGram { ngram_size, max_skip_size, include_all_ngrams } => fb::SkipGramOptions::create(
            b,
            &fb::SkipGramOptionsArgs { ngram_size: *ngram_size, max_skip_size: *max_skip_size, include_all_ngrams: *include_all_ngrams },
        )
        .as_union_value(),
        Options::MirrorPad { symmetric } => {
            let mode = if *symmetric { fb::MirrorPadMode::SYMMETRIC } else { fb::MirrorPadMode::REFLECT };
            fb::MirrorPadOptions::create(b, &fb::MirrorPadOptionsArgs { mode }).as_union_value()
        }
        Options::L2Norm { activation } => fb::L2NormOptions::create(b, &fb::L2NormOptionsArgs { fused_activation_function: *activation }).as_union_value(),
        Options::LocalResponseNormalization { radius, bias, alpha, beta } => fb::LocalResponseNormalizationOptions::create(
            b,
            &fb::LocalResponseNormalizationOptionsArgs { radius: *radius, bias: *bias, alpha: *alpha, beta: *beta },
        )
        .as_union_value(),
        Options::Pack { values_count, axis } => fb::PackOptions::create(b, &fb::PackOptionsArgs { values_count: *values_count, axis: *axis }).as_union_value(),
        Options::Unpack { num, axis } => fb::UnpackOptions::create(b, &fb::UnpackOptionsArgs { num: *num, axis: *axis }).as_union_value(),
        Options::LeakyRelu { alpha } => fb::LeakyReluOptions::create(b, &fb::LeakyReluOptionsArgs { alpha: *alpha }).as_union_value(),
        Options::BatchMatMul { adj_x, adj_y, asymmetric_quantize_inputs } => fb::BatchMatMulOptions::create(
            b,
            &fb::BatchMatMulOptionsArgs { adj_x: *adj_x, adj_y: *adj_y, asymmetric_quantize_inputs: *asymmetric_quantize_inputs },
        )
        .as_union_value(),
        Options::Gelu { approximate } => fb::GeluOptions::create(b, &fb::GeluOptionsArgs { approximate: *approximate }).as_union_value(),
        Options::If { then_subgraph, else_subgraph } => {
            fb::IfOptions::create(b, &fb::IfOptionsArgs { then_subgraph_index: *then_subgraph, else_subgraph_index: *else_subgraph }).as_union_value()
        }
        Options::While { cond_subgraph, body_subgraph } => {
            fb::WhileOptions::create(b, &fb::WhileOptionsArgs { cond_subgraph_index: *cond_subgraph, body_subgraph_index: *body_subgraph }).as_union_value()
        }
        Options::CallOnce { init_subgraph } => {
            fb::CallOnceOptions::create(b, &fb::CallOnceOptionsArgs { init_subgraph_index: *init_subgraph }).as_union_value()
        }
        Options::VarHandle { container, shared_name } => {
            let c = b.create_string(container);
            let n = b.create_string(shared_name);
            fb::VarHandleOptions::create(b, &fb::VarHandleOptionsArgs { container: Some(c), shared_name: Some(n) }).as_union_value()
        }
        Options::Empty(_) => {
            // An empty table reads as every field's default, whatever its type.
            let start = b.start_table();
            b.end_table(start).as_union_value()
        }
    })
}

/// The options table of a binary op (ADD, SUB, MUL, DIV): `pot_scale_int16` exists
/// in ADD's and SUB's only.
fn binary_options(b: &mut FlatBufferBuilder, table: fb::BuiltinOptions, activation: Activation, pot_scale_int16: bool) -> WIPOffset<UnionWIPOffset> {
    use fb::BuiltinOptions as T;
    match table {
        T::SubOptions => fb::SubOptions::create(b, &fb::SubOptionsArgs { fused_activation_function: activation, pot_scale_int16 }).as_union_value(),
        T::MulOptions => fb::MulOptions::create(b, &fb::MulOptionsArgs { fused_activation_function: activation }).as_union_value(),
        T::DivOptions => fb::DivOptions::create(b, &fb::DivOptionsArgs { fused_activation_function: activation }).as_union_value(),
        _ => fb::AddOptions::create(b, &fb::AddOptionsArgs { fused_activation_function: activation, pot_scale_int16 }).as_union_value(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fb::BuiltinOptions as T;

    /// A one-op model: a float input, an output, and `op` between them.
    fn one_op(code: OpCode, options: Options) -> ModelSpec {
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 4]));
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 4]));
        m.add_op(code, &[x], &[y], options);
        m.inputs = vec![x];
        m.outputs = vec![y];
        m
    }

    /// The options union type written for op 0 of the main graph, and whether a table is there.
    fn written(bytes: &[u8]) -> (u8, bool) {
        let (_, root) = crate::open(bytes).unwrap();
        let sg = root.tables(fb::Model::VT_SUBGRAPHS).unwrap().get(0).unwrap();
        let op = sg.tables(fb::SubGraph::VT_OPERATORS).unwrap().get(0).unwrap();
        (op.scalar::<u8>(fb::Operator::VT_BUILTIN_OPTIONS_TYPE, 0).unwrap(), op.table(fb::Operator::VT_BUILTIN_OPTIONS).unwrap().is_some())
    }

    fn builtin(op: BuiltinOperator) -> OpCode {
        OpCode::Builtin(op)
    }

    #[test]
    fn shared_options_take_the_op_tables_type() {
        let act = Activation::RELU;
        for (op, options, table) in [
            (BuiltinOperator::ADD, Options::Binary { activation: act }, T::AddOptions),
            (BuiltinOperator::SUB, Options::Binary { activation: act }, T::SubOptions),
            (BuiltinOperator::MUL, Options::Binary { activation: act }, T::MulOptions),
            (BuiltinOperator::DIV, Options::Binary { activation: act }, T::DivOptions),
            (BuiltinOperator::SUB, Options::AddSub { activation: act, pot_scale_int16: false }, T::SubOptions),
            (BuiltinOperator::DEPTH_TO_SPACE, Options::BlockSize(2), T::DepthToSpaceOptions),
            (BuiltinOperator::SPACE_TO_DEPTH, Options::BlockSize(2), T::SpaceToDepthOptions),
            (BuiltinOperator::ARG_MIN, Options::ArgMinMax { output_type: TensorType::INT32 }, T::ArgMinOptions),
            (BuiltinOperator::ARG_MAX, Options::ArgMinMax { output_type: TensorType::INT32 }, T::ArgMaxOptions),
            (BuiltinOperator::SPLIT_V, Options::Split { num_splits: 2 }, T::SplitVOptions),
            (BuiltinOperator::GELU, Options::Empty(T::GeluOptions), T::GeluOptions),
        ] {
            assert_eq!(written(&one_op(builtin(op), options).to_bytes().unwrap()), (table.0, true), "{op:?}");
        }
        // No options: no table, for any op.
        assert_eq!(written(&one_op(builtin(BuiltinOperator::CONV_2D), Options::None).to_bytes().unwrap()), (0, false));
    }

    #[test]
    fn options_of_another_table_are_an_error_unless_unchecked() {
        let conv = Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE };
        let err = one_op(builtin(BuiltinOperator::ADD), conv.clone()).to_bytes().unwrap_err();
        assert_eq!(err.to_string(), "subgraph 0 op 0 (ADD): Conv2D options do not fit its options table (AddOptions)");
        let mul = Options::AddSub { activation: Activation::NONE, pot_scale_int16: false };
        assert!(one_op(builtin(BuiltinOperator::MUL), mul).to_bytes_external().is_err());
        // An op that reads no options, a custom op, and an empty table of another type.
        assert!(one_op(builtin(BuiltinOperator::TRANSPOSE), Options::Empty(T::TransposeOptions)).to_bytes().is_err());
        assert!(one_op(OpCode::Custom("MyOp".into()), Options::Softmax { beta: 1.0 }).to_bytes().is_err());
        assert!(one_op(builtin(BuiltinOperator::SOFTMAX), Options::Empty(T::GeluOptions)).to_bytes().is_err());
        // In a later subgraph, the error names it.
        let mut m = one_op(builtin(BuiltinOperator::RELU), Options::None);
        m.subgraphs.push(one_op(builtin(BuiltinOperator::RELU), Options::LeakyRelu { alpha: 0.1 }));
        assert!(matches!(m.to_bytes(), Err(WriteError::OptionsMismatch { subgraph: 1, op: 0, .. })));
        // Unchecked: the inner options' own table, whatever the op.
        let bytes = one_op(builtin(BuiltinOperator::ADD), Options::Unchecked(Box::new(conv))).to_bytes().unwrap();
        assert_eq!(written(&bytes), (T::Conv2DOptions.0, true));
        let bytes = one_op(builtin(BuiltinOperator::ADD), Options::Unchecked(Box::new(Options::Empty(T(77))))).to_bytes().unwrap();
        assert_eq!(written(&bytes), (77, true));
    }
}
