//! The op table: every builtin operator ferrite knows, declared once.
//!
//! One line per op gives its name (as the format spells it), the options table it
//! reads, its input arity (inputs past the required count are optional and may be
//! omitted with index -1), its output arity, and the element types ferrite has
//! kernels for. Everything that enumerates ops reads this table: the loader's
//! options and arity checks (run before any kernel builder sees the op), the
//! runtime's dispatch (which matches on [`BuiltinOp`]), `ferrite ops`, the docs and
//! the single-op generator's coverage check.
//!
//! The flatbuffer's raw `BuiltinOperator` code is converted here
//! ([`BuiltinOp::from_code`]) and nowhere else is it matched.

use crate::schema::{BuiltinOperator, BuiltinOptions};

/// An unbounded arity (variadic ops such as CONCATENATION's inputs).
pub const MANY: usize = usize::MAX;

/// Element types an op has kernels for, as a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Types(u16);

impl Types {
    /// float32 (fp16 weights are converted to it at prepare).
    pub const F32: Types = Types(1);
    /// int8 with affine quantization.
    pub const I8: Types = Types(1 << 1);
    /// uint8 with affine quantization.
    pub const U8: Types = Types(1 << 2);
    /// int16 activations with int8 weights (LiteRT's 16x8 mode).
    pub const I16: Types = Types(1 << 3);
    /// float32 activations with int8 weights quantized on the fly (dynamic range).
    pub const HYBRID: Types = Types(1 << 4);
    /// Plain integers (int32 / int64) and booleans.
    pub const INT: Types = Types(1 << 5);
    /// Any element type: the op only moves or inspects elements.
    pub const ANY: Types = Types(1 << 6);
    /// Not a kernel at all: run by the executor (control flow, variables).
    pub const EXECUTOR: Types = Types(1 << 7);

    const NAMES: [(Types, &'static str); 8] = [
        (Types::F32, "float32"),
        (Types::I8, "int8"),
        (Types::U8, "uint8"),
        (Types::I16, "int16x8"),
        (Types::HYBRID, "hybrid"),
        (Types::INT, "int32/int64/bool"),
        (Types::ANY, "any"),
        (Types::EXECUTOR, "executor"),
    ];

    /// True when every type of `other` is in `self`.
    pub const fn contains(self, other: Types) -> bool {
        self.0 & other.0 == other.0
    }

    /// Names of the types in the set, in a fixed order.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES.iter().filter(|(t, _)| self.contains(*t)).map(|(_, n)| *n).collect()
    }
}

impl std::ops::BitOr for Types {
    type Output = Types;
    fn bitor(self, rhs: Types) -> Types {
        Types(self.0 | rhs.0)
    }
}

/// How many tensors an op takes or produces: `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arity {
    /// Required count (inputs: these may not be omitted).
    pub min: usize,
    /// Largest count accepted ([`MANY`] for variadic ops).
    pub max: usize,
}

impl Arity {
    /// True when `n` lies in the range.
    pub fn admits(self, n: usize) -> bool {
        (self.min..=self.max).contains(&n)
    }
}

impl std::fmt::Display for Arity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.min, self.max) {
            (a, b) if a == b => write!(f, "{a}"),
            (a, MANY) => write!(f, "{a} or more"),
            (a, b) => write!(f, "{a} to {b}"),
        }
    }
}

/// Declares the op table: `NAME: Options, inputs, outputs, types;` per line.
macro_rules! op_table {
    ($( $name:ident : $opts:ident, $in_min:literal ..= $in_max:tt, $out_min:literal ..= $out_max:tt, $types:expr; )*) => {
        /// A builtin operator ferrite has a table line for. Variants are spelled as
        /// the format spells the operator, so code reads like the model files.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum BuiltinOp {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                $name,
            )*
        }

        impl BuiltinOp {
            /// Every op of the table, in table order.
            pub const ALL: &'static [BuiltinOp] = &[$(BuiltinOp::$name),*];

            /// The op for a file's builtin code, when ferrite has a table line for it.
            pub fn from_code(code: i32) -> Option<BuiltinOp> {
                $( if code == BuiltinOperator::$name.0 { return Some(BuiltinOp::$name); } )*
                None
            }

            /// The file's builtin code.
            pub fn code(self) -> i32 {
                match self { $(BuiltinOp::$name => BuiltinOperator::$name.0,)* }
            }

            /// The format's operator code.
            pub fn operator(self) -> BuiltinOperator {
                BuiltinOperator(self.code())
            }

            /// The name as the format spells it (`CONV_2D`).
            pub fn name(self) -> &'static str {
                match self { $(BuiltinOp::$name => stringify!($name),)* }
            }

            /// The op called `name` (as the format spells it).
            pub fn from_name(name: &str) -> Option<BuiltinOp> {
                Self::ALL.iter().copied().find(|op| op.name() == name)
            }

            /// The options table the op reads (`NONE` for ops without options).
            pub fn options(self) -> BuiltinOptions {
                match self { $(BuiltinOp::$name => BuiltinOptions::$opts,)* }
            }

            /// Inputs the op takes; those past `min` are optional.
            pub fn inputs(self) -> Arity {
                match self { $(BuiltinOp::$name => Arity { min: $in_min, max: $in_max },)* }
            }

            /// Outputs the op produces.
            pub fn outputs(self) -> Arity {
                match self { $(BuiltinOp::$name => Arity { min: $out_min, max: $out_max },)* }
            }

            /// Element types ferrite has kernels for.
            pub fn types(self) -> Types {
                match self { $(BuiltinOp::$name => $types,)* }
            }
        }
    };
}

const F32: Types = Types::F32;
const I8: Types = Types::I8;
const U8: Types = Types::U8;
const I16: Types = Types::I16;
const HYBRID: Types = Types::HYBRID;
const INT: Types = Types::INT;
const ANY: Types = Types::ANY;
const EXECUTOR: Types = Types::EXECUTOR;

op_table! {
    // Convolution and linear.
    CONV_2D:                 Conv2DOptions,               2..=3, 1..=1, F32 | I8 | U8 | I16 | HYBRID;
    DEPTHWISE_CONV_2D:       DepthwiseConv2DOptions,      2..=3, 1..=1, F32 | I8 | U8 | I16 | HYBRID;
    TRANSPOSE_CONV:          TransposeConvOptions,        3..=4, 1..=1, F32 | I8 | U8 | I16 | HYBRID;
    CONV_3D:                 Conv3DOptions,               2..=3, 1..=1, F32;
    CONV_3D_TRANSPOSE:       Conv3DOptions,               3..=4, 1..=1, F32;
    FULLY_CONNECTED:         FullyConnectedOptions,       2..=3, 1..=1, F32 | I8 | U8 | I16 | HYBRID;
    BATCH_MATMUL:            BatchMatMulOptions,          2..=2, 1..=1, F32 | I8 | I16 | HYBRID;
    AVERAGE_POOL_2D:         Pool2DOptions,               1..=1, 1..=1, F32 | I8 | U8 | I16;
    MAX_POOL_2D:             Pool2DOptions,               1..=1, 1..=1, F32 | I8 | U8 | I16;
    L2_POOL_2D:              Pool2DOptions,               1..=1, 1..=1, F32;
    // Element-wise arithmetic, with broadcasting.
    ADD:                     AddOptions,                  2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    SUB:                     SubOptions,                  2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    MUL:                     MulOptions,                  2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    DIV:                     DivOptions,                  2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    MAXIMUM:                 NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    MINIMUM:                 NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    SQUARED_DIFFERENCE:      NONE,                        2..=2, 1..=1, F32 | I8 | INT;
    POW:                     NONE,                        2..=2, 1..=1, F32 | INT;
    FLOOR_DIV:               NONE,                        2..=2, 1..=1, F32 | I8 | I16 | INT;
    FLOOR_MOD:               NONE,                        2..=2, 1..=1, F32 | I8 | I16 | INT;
    PRELU:                   NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16;
    ADD_N:                   NONE,                        2..=MANY, 1..=1, F32 | INT;
    // Comparison and logic.
    LESS:                    NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    LESS_EQUAL:              NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    GREATER:                 NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    GREATER_EQUAL:           NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    EQUAL:                   NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    NOT_EQUAL:               NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    LOGICAL_AND:             NONE,                        2..=2, 1..=1, INT;
    LOGICAL_OR:              NONE,                        2..=2, 1..=1, INT;
    LOGICAL_NOT:             NONE,                        1..=1, 1..=1, INT;
    SELECT:                  NONE,                        3..=3, 1..=1, ANY;
    SELECT_V2:               NONE,                        3..=3, 1..=1, ANY;
    // Activations and unary math.
    RELU:                    NONE,                        1..=1, 1..=1, F32 | I8 | U8 | I16;
    RELU6:                   NONE,                        1..=1, 1..=1, F32 | I8 | U8 | I16;
    RELU_N1_TO_1:            NONE,                        1..=1, 1..=1, F32 | I8 | U8 | I16;
    RELU_0_TO_1:             NONE,                        1..=1, 1..=1, F32 | I8 | U8;
    LEAKY_RELU:              LeakyReluOptions,            1..=1, 1..=1, F32 | I8 | U8 | I16;
    HARD_SWISH:              NONE,                        1..=1, 1..=1, F32 | I8 | U8;
    ELU:                     NONE,                        1..=1, 1..=1, F32 | I8;
    GELU:                    GeluOptions,                 1..=1, 1..=1, F32 | I8 | U8 | I16;
    LOGISTIC:                NONE,                        1..=1, 1..=1, F32 | I8 | U8 | I16;
    TANH:                    NONE,                        1..=1, 1..=1, F32 | I8 | U8 | I16;
    EXP:                     NONE,                        1..=1, 1..=1, F32 | I8 | I16;
    LOG:                     NONE,                        1..=1, 1..=1, F32 | I8 | I16;
    SQRT:                    NONE,                        1..=1, 1..=1, F32 | I8 | I16;
    RSQRT:                   NONE,                        1..=1, 1..=1, F32 | I8 | I16;
    SQUARE:                  NONE,                        1..=1, 1..=1, F32;
    ABS:                     NONE,                        1..=1, 1..=1, F32 | I8 | I16 | INT;
    NEG:                     NONE,                        1..=1, 1..=1, F32 | I8 | I16 | INT;
    SIN:                     NONE,                        1..=1, 1..=1, F32;
    COS:                     NONE,                        1..=1, 1..=1, F32;
    FLOOR:                   NONE,                        1..=1, 1..=1, F32;
    CEIL:                    NONE,                        1..=1, 1..=1, F32;
    ROUND:                   NONE,                        1..=1, 1..=1, F32;
    SIGN:                    NONE,                        1..=1, 1..=1, F32 | INT;
    ATAN2:                   NONE,                        2..=2, 1..=1, F32;
    // Signal: RFFT2D makes complex64 values, these take their parts.
    RFFT2D:                  NONE,                        2..=2, 1..=1, F32;
    COMPLEX_ABS:             NONE,                        1..=1, 1..=1, F32;
    REAL:                    NONE,                        1..=1, 1..=1, F32;
    IMAG:                    NONE,                        1..=1, 1..=1, F32;
    SOFTMAX:                 SoftmaxOptions,              1..=1, 1..=1, F32 | I8 | U8 | I16;
    LOG_SOFTMAX:             NONE,                        1..=1, 1..=1, F32 | I8 | U8;
    L2_NORMALIZATION:        L2NormOptions,               1..=1, 1..=1, F32 | I8 | U8;
    LOCAL_RESPONSE_NORMALIZATION: LocalResponseNormalizationOptions, 1..=1, 1..=1, F32;
    // Reductions.
    MEAN:                    ReducerOptions,              2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    SUM:                     ReducerOptions,              2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    REDUCE_MAX:              ReducerOptions,              2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    REDUCE_MIN:              ReducerOptions,              2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    REDUCE_PROD:             ReducerOptions,              2..=2, 1..=1, F32 | I8 | I16 | INT;
    REDUCE_ALL:              ReducerOptions,              2..=2, 1..=1, INT;
    REDUCE_ANY:              ReducerOptions,              2..=2, 1..=1, INT;
    ARG_MAX:                 ArgMaxOptions,               2..=2, 1..=1, F32 | I8 | U8 | INT;
    ARG_MIN:                 ArgMinOptions,               2..=2, 1..=1, F32 | I8 | U8 | INT;
    // Shape and data movement (any element type).
    RESHAPE:                 ReshapeOptions,              1..=2, 1..=1, ANY;
    SQUEEZE:                 SqueezeOptions,              1..=1, 1..=1, ANY;
    EXPAND_DIMS:             NONE,                        2..=2, 1..=1, ANY;
    CONCATENATION:           ConcatenationOptions,        1..=MANY, 1..=1, ANY;
    PACK:                    PackOptions,                 1..=MANY, 1..=1, ANY;
    UNPACK:                  UnpackOptions,               1..=1, 1..=MANY, ANY;
    SPLIT:                   SplitOptions,                2..=2, 1..=MANY, ANY;
    SPLIT_V:                 SplitVOptions,               3..=3, 1..=MANY, ANY;
    SLICE:                   NONE,                        3..=3, 1..=1, ANY;
    STRIDED_SLICE:           StridedSliceOptions,         4..=4, 1..=1, ANY;
    TRANSPOSE:               NONE,                        2..=2, 1..=1, ANY;
    PAD:                     NONE,                        2..=2, 1..=1, ANY;
    PADV2:                   NONE,                        3..=3, 1..=1, ANY;
    GATHER:                  GatherOptions,               2..=2, 1..=1, ANY;
    TILE:                    NONE,                        2..=2, 1..=1, ANY;
    REVERSE_V2:              NONE,                        2..=2, 1..=1, ANY;
    REVERSE_SEQUENCE:        ReverseSequenceOptions,      2..=2, 1..=1, F32 | U8 | I16 | INT;
    BROADCAST_TO:            NONE,                        2..=2, 1..=1, ANY;
    DEPTH_TO_SPACE:          DepthToSpaceOptions,         1..=1, 1..=1, ANY;
    SPACE_TO_BATCH_ND:       NONE,                        3..=3, 1..=1, ANY;
    BATCH_TO_SPACE_ND:       NONE,                        3..=3, 1..=1, ANY;
    MIRROR_PAD:              MirrorPadOptions,            2..=2, 1..=1, ANY;
    SPACE_TO_DEPTH:          SpaceToDepthOptions,         1..=1, 1..=1, ANY;
    RESIZE_BILINEAR:         ResizeBilinearOptions,       2..=2, 1..=1, F32 | I8 | U8 | I16;
    RESIZE_NEAREST_NEIGHBOR: ResizeNearestNeighborOptions, 2..=2, 1..=1, ANY;
    SHAPE:                   ShapeOptions,                1..=1, 1..=1, ANY;
    RANK:                    NONE,                        1..=1, 1..=1, ANY;
    FILL:                    NONE,                        2..=2, 1..=1, ANY;
    ZEROS_LIKE:              NONE,                        1..=1, 1..=1, ANY;
    // Index and set ops (options tables without fields are read as NONE).
    GATHER_ND:               NONE,                        2..=2, 1..=1, ANY;
    SCATTER_ND:              NONE,                        3..=3, 1..=1, F32 | I8 | U8 | INT;
    SPARSE_TO_DENSE:         SparseToDenseOptions,        4..=4, 1..=1, F32 | I8 | U8 | INT;
    DYNAMIC_UPDATE_SLICE:    NONE,                        3..=3, 1..=1, ANY;
    EMBEDDING_LOOKUP:        NONE,                        2..=2, 1..=1, ANY | HYBRID;
    TOPK_V2:                 NONE,                        2..=2, 2..=2, F32 | I8 | U8 | I16 | INT;
    ONE_HOT:                 OneHotOptions,               4..=4, 1..=1, ANY;
    RANGE:                   NONE,                        3..=3, 1..=1, F32 | INT;
    CUMSUM:                  CumsumOptions,               2..=2, 1..=1, F32 | INT;
    WHERE:                   NONE,                        1..=1, 1..=1, F32 | I8 | U8 | INT;
    UNIQUE:                  UniqueOptions,               1..=1, 2..=2, F32 | I8 | U8 | I16 | INT;
    SEGMENT_SUM:             NONE,                        2..=2, 1..=1, F32 | INT;
    UNSORTED_SEGMENT_SUM:    NONE,                        3..=3, 1..=1, F32 | INT;
    UNSORTED_SEGMENT_PROD:   NONE,                        3..=3, 1..=1, F32 | INT;
    UNSORTED_SEGMENT_MAX:    NONE,                        3..=3, 1..=1, F32 | INT;
    UNSORTED_SEGMENT_MIN:    NONE,                        3..=3, 1..=1, F32 | INT;
    MATRIX_DIAG:             NONE,                        1..=1, 1..=1, ANY;
    MATRIX_SET_DIAG:         NONE,                        2..=2, 1..=1, ANY;
    BROADCAST_ARGS:          NONE,                        2..=2, 1..=1, INT;
    // Legacy text-model ops: a sorted-key row lookup (values of any non-string
    // type) and locality-sensitive hashing of any input's rows into int32 ids.
    HASHTABLE_LOOKUP:        NONE,                        3..=3, 2..=2, ANY;
    LSH_PROJECTION:          LSHProjectionOptions,        2..=3, 1..=1, ANY;
    // String tensors (run at run time: a string's size is its data's): the
    // n-grams of a sentence's words.
    SKIP_GRAM:               SkipGramOptions,             1..=1, 1..=1, ANY;
    // Hash tables in the session's resources (string -> int64, int64 -> string):
    // the table's handle; import (keys, values); find (keys, default); size.
    HASHTABLE:               HashtableOptions,            0..=0, 1..=1, ANY;
    HASHTABLE_IMPORT:        NONE,                        3..=3, 0..=0, ANY;
    HASHTABLE_FIND:          NONE,                        3..=3, 1..=1, ANY;
    HASHTABLE_SIZE:          NONE,                        1..=1, 1..=1, ANY;
    // Detection: boxes [n, 4], scores [n], max outputs, IoU and score thresholds (V5: soft-NMS sigma).
    NON_MAX_SUPPRESSION_V4:  NONE,                        5..=5, 2..=2, F32;
    NON_MAX_SUPPRESSION_V5:  NONE,                        6..=6, 3..=3, F32;
    // Bit-level ops on plain (unquantized) integers of 8 to 32 bits.
    BITCAST:                 NONE,                        1..=1, 1..=1, ANY;
    RIGHT_SHIFT:             NONE,                        2..=2, 1..=1, I8 | U8 | I16 | INT;
    BITWISE_XOR:             NONE,                        2..=2, 1..=1, I8 | U8 | I16 | INT;
    // Random numbers: a Philox stream per op and session (see ferrite-kernels' random).
    RANDOM_UNIFORM:          RandomOptions,               1..=1, 1..=1, F32;
    RANDOM_STANDARD_NORMAL:  RandomOptions,               1..=1, 1..=1, F32;
    MULTINOMIAL:             RandomOptions,               2..=2, 1..=1, F32;
    // TensorFlow 1 feature preprocessing.
    BUCKETIZE:               BucketizeOptions,            1..=1, 1..=1, F32 | INT;
    FAKE_QUANT:              FakeQuantOptions,            1..=1, 1..=1, F32 | INT;
    EMBEDDING_LOOKUP_SPARSE: EmbeddingLookupSparseOptions, 5..=5, 1..=1, F32;
    // Type conversion.
    CAST:                    NONE,                        1..=1, 1..=1, ANY;
    QUANTIZE:                NONE,                        1..=1, 1..=1, F32 | I8 | U8 | I16;
    DEQUANTIZE:              NONE,                        1..=1, 1..=1, I8 | U8 | I16 | F32;
    DENSIFY:                 NONE,                        1..=1, 1..=1, ANY;
    // Recurrent ops: their state lives in variable tensors the kernel updates in place.
    // Inputs past the first are checked by the builders: the optional ones (CIFG,
    // peephole, projection, layer norm, aux input) sit among the required ones.
    LSTM:                         LSTMOptions,                       1..=24, 1..=4, F32 | I8 | U8 | HYBRID;
    UNIDIRECTIONAL_SEQUENCE_LSTM: UnidirectionalSequenceLSTMOptions, 1..=24, 1..=1, F32 | I8 | HYBRID;
    BIDIRECTIONAL_SEQUENCE_LSTM:  BidirectionalSequenceLSTMOptions,  1..=48, 1..=2, F32 | HYBRID;
    RNN:                          RNNOptions,                        5..=5, 1..=1, F32 | HYBRID;
    UNIDIRECTIONAL_SEQUENCE_RNN:  SequenceRNNOptions,                5..=5, 1..=1, F32 | HYBRID;
    BIDIRECTIONAL_SEQUENCE_RNN:   BidirectionalSequenceRNNOptions,   9..=12, 1..=2, F32 | HYBRID;
    SVDF:                         SVDFOptions,                       3..=5, 1..=1, F32 | I8 | HYBRID;
    // Ops of the StableHLO legalization. Their options tables (where they have one) are
    // in the format's second options union, which ferrite's model layer reads itself.
    STABLEHLO_ADD:           NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    STABLEHLO_MULTIPLY:      NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    STABLEHLO_MAXIMUM:       NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    STABLEHLO_MINIMUM:       NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    STABLEHLO_AND:           NONE,                        2..=2, 1..=1, I8 | U8 | I16 | INT;
    STABLEHLO_PAD:           NONE,                        2..=2, 1..=1, ANY;
    DILATE:                  NONE,                        3..=3, 1..=1, ANY;
    REDUCE_WINDOW:           NONE,                        5..=5, 1..=1, F32 | I8 | U8 | I16 | INT;
    STABLEHLO_REDUCE_WINDOW: NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    // (initial state uint64) -> (next state, random bits); options in the second union.
    STABLEHLO_RNG_BIT_GENERATOR: NONE,                    1..=1, 2..=2, INT;
    // (operand, start indices) -> slices; (operand, indices, updates) -> operand updated.
    STABLEHLO_GATHER:        NONE,                        2..=2, 1..=1, F32 | I8 | U8 | I16 | INT;
    STABLEHLO_SCATTER:       NONE,                        3..=3, 1..=1, F32 | I8 | U8 | I16 | INT;
    // Control flow and state, run by the executor.
    IF:                      IfOptions,                   1..=MANY, 0..=MANY, EXECUTOR;
    WHILE:                   WhileOptions,                0..=MANY, 0..=MANY, EXECUTOR;
    CALL_ONCE:               CallOnceOptions,             0..=0, 0..=0, EXECUTOR;
    VAR_HANDLE:              VarHandleOptions,            0..=0, 1..=1, EXECUTOR;
    READ_VARIABLE:           NONE,                        1..=1, 1..=1, EXECUTOR;
    ASSIGN_VARIABLE:         NONE,                        2..=2, 0..=0, EXECUTOR;
}

/// The op table and the coverage report as a Markdown document (`docs/ops.md` is
/// this, kept in sync by a test).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "# Builtin ops\n\nGenerated from the op table (`crates/ferrite-format/src/ops.rs`) by `ferrite ops --markdown`; a test keeps this \
         file in sync.\nInputs past the required count are optional. Element types are those of the `cpu` backend's kernels; \
         `executor` ops are run by the executor itself.\n\n| op | options | inputs | outputs | element types |\n|---|---|---|---|---|\n",
    );
    for op in BuiltinOp::ALL {
        let options = op.options().variant_name().unwrap_or("?");
        let options = if options == "NONE" { "—" } else { options };
        out.push_str(&format!("| {} | {} | {} | {} | {} |\n", op.name(), options, op.inputs(), op.outputs(), op.types().names().join(", ")));
    }
    out.push_str(&format!("\n{} builtin ops.\n\n", BuiltinOp::ALL.len()));
    out.push_str(&crate::coverage::markdown());
    out
}

impl std::fmt::Display for BuiltinOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for &op in BuiltinOp::ALL {
            assert_eq!(BuiltinOp::from_code(op.code()), Some(op));
            assert_eq!(BuiltinOp::from_name(op.name()), Some(op));
            // The table's spelling is the schema's.
            assert_eq!(op.operator().variant_name(), Some(op.name()));
        }
        assert_eq!(BuiltinOp::from_code(-1), None);
        assert_eq!(BuiltinOp::from_code(BuiltinOperator::CUSTOM.0), None);
    }

    #[test]
    fn docs_list_the_table() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ops.md");
        let doc = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(doc == markdown_table(), "docs/ops.md is out of date: regenerate it with `ferrite ops --markdown > docs/ops.md`");
    }

    #[test]
    fn arities_are_ranges_and_every_op_has_kernel_types() {
        for &op in BuiltinOp::ALL {
            assert!(op.inputs().min <= op.inputs().max, "{op}");
            assert!(op.outputs().min <= op.outputs().max, "{op}");
            assert_ne!(op.types(), Types::default(), "{op} declares no element types");
        }
        assert_eq!(BuiltinOp::CONV_2D.inputs().to_string(), "2 to 3");
        assert_eq!(BuiltinOp::CONCATENATION.inputs().to_string(), "1 or more");
        assert!(BuiltinOp::SPLIT.outputs().admits(7));
        assert!(!BuiltinOp::ADD.inputs().admits(1));
    }
}
