//! Every distinct failure the structure-aware fuzzer (structure_fuzz.rs) found, and
//! the hostile-model crashes reported before it, rebuilt by hand as the smallest
//! model that showed it. Each must now end in a clean error that says what and
//! where (or, where the model is legitimate, run), never a panic, abort or hang.
//!
//! Found by the fuzzer (seed in the original generator):
//! - quantized SOFTMAX / QUANTIZE / relu-like / MEAN / BATCH_MATMUL and the CPU dispatch
//!   with an empty `outputs` list (seeds 129, 160, 532, 603, 652, 781, 1847)
//! - UNPACK / SPLIT / SPLIT_V / CONCATENATION / ARG_MAX / MEAN axis 0 on a rank-0 tensor (1561)
//! - BATCH_MATMUL index tables, ARG_MAX scratch, int8 MEAN accumulators, hybrid and
//!   quantized pooling scratch sized by unchecked shapes (3405, 17316, 81749, 1093875)
//! - IF passing an int8 operand to a subgraph whose input is int32 (833)
//! - int8 FULLY_CONNECTED with a bias shorter than the weight rows (20404);
//!   hybrid FULLY_CONNECTED likewise (121142, 124193)
//! - an error message printing a 4M-value run-time TRANSPOSE perm (119263)
//! - SPLIT of an empty tensor with huge other dims: a 2^40-step loop (119827)
//! - RELU of uint8 with an extreme (but valid) scale: clamp(min > max) (161474)
//! - FULLY_CONNECTED keep_num_dims of a rank-0 input wrote past its output (1080717)
//! - float convolution / FULLY_CONNECTED weight staging and panel-padded packing, and
//!   a packing's zero row with no output channels, sized past the limit (1196732,
//!   1843399, 2323950)
//! - float convolution scratch sized by a resized input's width (87803, after inputs
//!   with unknown dims were resized)
//! - hybrid convolution of an empty batch (2474884)
//! - resize coordinate tables sized by the target of an empty image batch (2585526)
//! - FULLY_CONNECTED keep_num_dims with an input whose last dim is not the row length
//!   (5677705, 5910835, 6887340)
//! - DEPTHWISE_CONV_2D with a stride of 2^31 - 1: the kernel's index-range check
//!   panicked (10290777, on the merged op table and kernel API)
//! - int16 MAX_POOL_2D with a 2^31-row SAME window: every output read the whole
//!   65,536-row input, 419 s of work (10369336)
//! - CONCATENATION of one [2^30, 4, 255] input on axis 1: listing its copies walked
//!   2^30 outer indices before the arena limit refused the model, 3-6 s (16110)
//!
//! Seeds are of the generator at the commit that found them; the generator has
//! changed since, so the cases are rebuilt here by hand.

#[path = "support/structure_gen.rs"]
mod structure_gen;

use ferrite_format::schema::TensorType as T;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};
use structure_gen::{exercise, Outcome};

type Q = Option<(Vec<f32>, Vec<i64>, i32)>;

/// One single-op case: op, tensors, op inputs, op outputs, options.
type Case = (B, Vec<TensorSpec>, Vec<i32>, Vec<i32>, Options);

fn q(scale: f32, zp: i64) -> Q {
    Some((vec![scale], vec![zp], 0))
}

fn act(name: &str, t: T, shape: &[i32], quant: Q) -> TensorSpec {
    TensorSpec { quant, ..TensorSpec::activation(name, t, shape) }
}

fn constant(name: &str, t: T, shape: &[i32], data: Vec<u8>, quant: Q) -> TensorSpec {
    TensorSpec { data: Some(data), quant, ..TensorSpec::activation(name, t, shape) }
}

/// A one-op model: `tensors` are added in order, the op reads `inputs` and writes
/// `outputs` (indices into `tensors`); graph inputs are the non-constant tensors
/// nothing writes.
fn one_op(tensors: Vec<TensorSpec>, op: B, inputs: &[i32], outputs: &[i32], options: Options) -> Vec<u8> {
    let mut m = ModelSpec::default();
    for t in tensors {
        m.add_tensor(t);
    }
    m.add_op(OpCode::Builtin(op), inputs, outputs, options);
    m.inputs = inputs.iter().copied().filter(|&i| i >= 0 && m.tensors[i as usize].data.is_none()).collect();
    m.outputs = if outputs.is_empty() { inputs.iter().copied().filter(|&i| i >= 0).take(1).collect() } else { outputs.to_vec() };
    m.to_bytes().unwrap()
}

/// Runs the model (load, prepare, random inputs, run) and requires an error whose
/// message contains every one of `want`. Returns the message.
#[track_caller]
fn expect_error(what: &str, bytes: Vec<u8>, want: &[&str]) -> String {
    let outcome = exercise(bytes, 1).unwrap_or_else(|p| panic!("{what}: panicked: {p}"));
    let msg = outcome.error().unwrap_or_else(|| panic!("{what}: ran without an error")).to_string();
    for w in want {
        assert!(msg.contains(w), "{what}: error does not mention '{w}': {msg}");
    }
    msg
}

/// Runs the model and requires only that it does not panic.
#[track_caller]
fn expect_no_panic(what: &str, bytes: Vec<u8>) -> Outcome {
    exercise(bytes, 1).unwrap_or_else(|p| panic!("{what}: panicked: {p}"))
}

/// Known crash 1: builders indexed their first output. The op table's arity check
/// refuses an op without outputs at load, naming the op.
#[test]
fn ops_without_outputs() {
    let cases: Vec<(B, Vec<TensorSpec>, Vec<i32>, Options)> = vec![
        (B::SOFTMAX, vec![act("x", T::INT8, &[4], q(0.1, 0))], vec![0], Options::Softmax { beta: 1.0 }),
        (B::SOFTMAX, vec![act("x", T::INT16, &[4], q(0.1, 0))], vec![0], Options::Softmax { beta: 1.0 }),
        (B::QUANTIZE, vec![act("x", T::FLOAT32, &[4], None)], vec![0], Options::None),
        (B::LOGISTIC, vec![act("x", T::INT16, &[4], q(0.1, 0))], vec![0], Options::None),
        (B::RELU, vec![act("x", T::INT8, &[4], q(0.1, 0))], vec![0], Options::None),
        (B::MEAN, vec![act("x", T::INT8, &[4], q(0.1, 0)), TensorSpec::const_i32("a", &[1], &[0])], vec![0, 1], Options::Reducer { keep_dims: false }),
        (
            B::BATCH_MATMUL,
            vec![act("a", T::INT8, &[2, 2], q(0.1, 0)), act("b", T::INT8, &[2, 2], q(0.1, 0))],
            vec![0, 1],
            Options::BatchMatMul { adj_x: false, adj_y: false, asymmetric_quantize_inputs: false },
        ),
        (B::ADD, vec![act("a", T::FLOAT32, &[2], None), act("b", T::FLOAT32, &[2], None)], vec![0, 1], Options::Binary { activation: Activation::NONE }),
    ];
    for (op, tensors, inputs, options) in cases {
        let what = format!("{op:?} without outputs");
        expect_error(&what, one_op(tensors, op, &inputs, &[], options), &["op 0"]);
    }
}

/// Known crash 2: axis 0 was accepted on a rank-0 tensor, then an empty shape indexed.
#[test]
fn axis_on_a_scalar() {
    let x = || act("x", T::FLOAT32, &[], None);
    let y = |n: &str| act(n, T::FLOAT32, &[], None);
    let zero = |n: &str| TensorSpec::const_i32(n, &[1], &[0]);
    let cases: Vec<Case> = vec![
        (B::UNPACK, vec![x(), y("y")], vec![0], vec![1], Options::Unpack { num: 1, axis: 0 }),
        (B::SPLIT, vec![zero("axis"), x(), y("y")], vec![0, 1], vec![2], Options::Split { num_splits: 1 }),
        (B::SPLIT_V, vec![x(), TensorSpec::const_i32("sizes", &[1], &[1]), zero("axis"), y("y")], vec![0, 1, 2], vec![3], Options::Split { num_splits: 1 }),
        (B::CONCATENATION, vec![x(), y("b"), y("y")], vec![0, 1], vec![2], Options::Concatenation { axis: 0, activation: Activation::NONE }),
        (B::ARG_MAX, vec![x(), zero("axis"), act("y", T::INT64, &[], None)], vec![0, 1], vec![2], Options::ArgMinMax { output_type: T::INT64 }),
        (B::ARG_MIN, vec![x(), zero("axis"), act("y", T::INT32, &[], None)], vec![0, 1], vec![2], Options::ArgMinMax { output_type: T::INT32 }),
        (B::GATHER, vec![x(), TensorSpec::const_i32("i", &[1], &[0]), y("y")], vec![0, 1], vec![2], Options::Gather { axis: 0, batch_dims: 0 }),
    ];
    for (op, tensors, inputs, outputs, options) in cases {
        expect_error(&format!("{op:?} of a scalar"), one_op(tensors, op, &inputs, &outputs, options), &["op 0", "axis 0 out of range for rank 0"]);
    }
    // A reduction of a scalar over axis 0 is the scalar, as in LiteRT.
    let mean = one_op(vec![x(), zero("axis"), y("y")], B::MEAN, &[0, 1], &[2], Options::Reducer { keep_dims: false });
    assert_eq!(expect_no_panic("MEAN of a scalar", mean), Outcome::Ok);
}

/// Known crash 3: ARG_MIN / ARG_MAX over a zero-length axis read out of bounds.
#[test]
fn arg_over_an_empty_axis() {
    for op in [B::ARG_MAX, B::ARG_MIN] {
        let bytes = one_op(
            vec![act("x", T::FLOAT32, &[2, 0], None), TensorSpec::const_i32("axis", &[1], &[1]), act("y", T::INT64, &[2], None)],
            op,
            &[0, 1],
            &[2],
            Options::ArgMinMax { output_type: T::INT64 },
        );
        expect_error(&format!("{op:?} over an empty axis"), bytes, &["op 0", "axis 1 of size 0"]);
    }
}

/// Known crash 4 (fuzz seed 20404): a quantized FULLY_CONNECTED bias shorter than the
/// weight rows was read out of bounds; the hybrid kernel likewise (seeds 121142, 124193);
/// a convolution bias of the wrong type was viewed as int32.
#[test]
fn short_or_mistyped_bias() {
    let fc = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false };
    let int8 = one_op(
        vec![
            act("x", T::INT8, &[2, 3], q(0.02, 0)),
            constant("w", T::INT8, &[3, 3], vec![1; 9], q(0.5, 0)),
            constant("b", T::INT32, &[1], vec![0; 4], q(0.01, 0)),
            act("y", T::INT8, &[2, 3], q(1.0, 0)),
        ],
        B::FULLY_CONNECTED,
        &[0, 1, 2],
        &[3],
        fc.clone(),
    );
    expect_error("int8 FULLY_CONNECTED with a short bias", int8, &["op 0", "bias", "3 int32"]);
    let hybrid = one_op(
        vec![
            act("x", T::FLOAT32, &[2, 3], None),
            constant("w", T::INT8, &[3, 3], vec![1; 9], q(0.5, 0)),
            constant("b", T::FLOAT32, &[1], vec![0; 4], None),
            act("y", T::FLOAT32, &[2, 3], None),
        ],
        B::FULLY_CONNECTED,
        &[0, 1, 2],
        &[3],
        fc.clone(),
    );
    expect_error("hybrid FULLY_CONNECTED with a short bias", hybrid, &["op 0", "bias"]);
    let hybrid_3d = one_op(
        vec![act("x", T::FLOAT32, &[2, 3], None), constant("w", T::INT8, &[3, 3, 0], vec![], q(0.5, 0)), act("y", T::FLOAT32, &[2, 3], None)],
        B::FULLY_CONNECTED,
        &[0, 1],
        &[2],
        fc,
    );
    expect_error("hybrid FULLY_CONNECTED with 3-D weights", hybrid_3d, &["op 0", "2-D"]);
    let conv = one_op(
        vec![
            act("x", T::INT8, &[1, 2, 2, 1], q(0.02, 0)),
            constant("w", T::INT8, &[4, 1, 1, 1], vec![1; 4], q(0.5, 0)),
            constant("b", T::INT8, &[4], vec![0; 4], q(0.01, 0)),
            act("y", T::INT8, &[1, 2, 2, 4], q(1.0, 0)),
        ],
        B::CONV_2D,
        &[0, 1, 2],
        &[3],
        Options::Conv2D { padding: Padding::VALID, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE },
    );
    expect_error("int8 CONV_2D with an int8 bias", conv, &["op 0", "bias"]);
}

/// Known crash 5: scales that are zero, negative, denormal, NaN or infinite are refused
/// at load, naming the tensor; extreme but valid scales give saturated ranges (fuzz
/// seeds 161474, 167060: a uint8 RELU's clamp range overflowed).
#[test]
fn hostile_quantization_scales() {
    for scale in [0.0, -0.5, 1e-40, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let bytes = one_op(vec![act("x", T::INT8, &[4], q(scale, 0)), act("y", T::INT8, &[4], q(0.1, 0))], B::RELU, &[0], &[1], Options::None);
        expect_error(&format!("scale {scale}"), bytes, &["tensor 0", "scale"]);
    }
    let per_channel = one_op(
        vec![act("x", T::INT8, &[2, 2], Some((vec![0.1, 0.0], vec![0, 0], 1))), act("y", T::INT8, &[2, 2], q(0.1, 0))],
        B::RELU,
        &[0],
        &[1],
        Options::None,
    );
    expect_error("a zero per-channel scale", per_channel, &["tensor 0", "scale 1"]);
    for (op, t, zp) in [(B::RELU, T::UINT8, 217), (B::RELU6, T::INT8, 127), (B::RELU_N1_TO_1, T::INT16, -32768), (B::LEAKY_RELU, T::UINT8, 255)] {
        for (s_in, s_out) in [(1e-9, 1e-9), (f32::MAX, f32::MIN_POSITIVE), (f32::MIN_POSITIVE, f32::MAX)] {
            let opts = if op == B::LEAKY_RELU { Options::LeakyRelu { alpha: 0.5 } } else { Options::None };
            let bytes = one_op(vec![act("x", t, &[4], q(s_in, zp)), act("y", t, &[4], q(s_out, zp))], op, &[0], &[1], opts);
            expect_no_panic(&format!("{op:?} {t:?} zero point {zp} scales {s_in:e} -> {s_out:e}"), bytes);
        }
    }
    // A fused activation with an extreme output scale on an integer convolution.
    let conv = one_op(
        vec![
            act("x", T::INT8, &[1, 1, 1, 1], q(1e-30, 127)),
            constant("w", T::INT8, &[1, 1, 1, 1], vec![1], q(1e30, 0)),
            act("y", T::INT8, &[1, 1, 1, 1], q(f32::MIN_POSITIVE, 127)),
        ],
        B::CONV_2D,
        &[0, 1],
        &[2],
        Options::Conv2D { padding: Padding::VALID, stride: (1, 1), dilation: (1, 1), activation: Activation::RELU6 },
    );
    expect_no_panic("CONV_2D with extreme scales", conv);
}

/// Known crash 6 and fuzz seeds 3405, 17316, 81749, 1093875: scratch and tables sized
/// from file shapes are checked against the session limit (64 MiB here) first.
#[test]
fn scratch_sized_by_file_shapes() {
    let big = 1 << 30;
    let pool = one_op(
        vec![act("x", T::INT8, &[1, 1, 1, big], q(0.1, 0)), act("y", T::INT8, &[1, 1, 1, big], q(0.1, 0))],
        B::AVERAGE_POOL_2D,
        &[0],
        &[1],
        Options::Pool2D { padding: Padding::VALID, stride: (1, 1), filter: (1, 1), activation: Activation::NONE },
    );
    expect_error("quantized AVERAGE_POOL_2D with 2^30 channels", pool, &["resource limit", "op 0"]);
    let arg = one_op(
        vec![act("x", T::FLOAT32, &[1, big, 8], None), TensorSpec::const_i32("axis", &[1], &[0]), act("y", T::INT64, &[], None)],
        B::ARG_MAX,
        &[0, 1],
        &[2],
        Options::ArgMinMax { output_type: T::INT64 },
    );
    expect_error("ARG_MAX of 2^33 elements", arg, &["resource limit", "op 0"]);
    let bmm = one_op(
        vec![act("a", T::FLOAT32, &[big, 1, 1], None), act("b", T::FLOAT32, &[1, 1, 1], None), act("y", T::FLOAT32, &[], None)],
        B::BATCH_MATMUL,
        &[0, 1],
        &[2],
        Options::BatchMatMul { adj_x: false, adj_y: false, asymmetric_quantize_inputs: false },
    );
    expect_error("BATCH_MATMUL over 2^30 batches", bmm, &["resource limit", "op 0"]);
    let mean = one_op(
        vec![act("x", T::INT8, &[big, 4], q(0.1, 0)), TensorSpec::const_i32("axis", &[1], &[1]), act("y", T::INT8, &[], q(0.1, 0))],
        B::MEAN,
        &[0, 1],
        &[2],
        Options::Reducer { keep_dims: false },
    );
    expect_error("int8 MEAN of 2^32 elements", mean, &["resource limit", "op 0"]);
    let hybrid = one_op(
        vec![act("x", T::FLOAT32, &[big, 2], None), constant("w", T::INT8, &[2, 2], vec![1; 4], q(0.5, 0)), act("y", T::FLOAT32, &[], None)],
        B::FULLY_CONNECTED,
        &[0, 1],
        &[2],
        Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false },
    );
    expect_error("hybrid FULLY_CONNECTED of 2^31 inputs", hybrid, &["resource limit", "op 0"]);
}

/// Fuzz seed 119827: an empty tensor with huge other dims holds nothing, but kernels
/// loop over those dims (SPLIT ran 2^40 empty copies).
#[test]
fn empty_tensors_with_huge_dims() {
    let t = std::time::Instant::now();
    let split = one_op(
        vec![TensorSpec::const_i32("axis", &[1], &[1]), act("x", T::FLOAT32, &[1 << 20, 0, 1 << 20], None), act("y", T::FLOAT32, &[], None)],
        B::SPLIT,
        &[0, 1],
        &[2],
        Options::Split { num_splits: 1 },
    );
    expect_error("SPLIT of [2^20, 0, 2^20]", split, &["resource limit", "op 0"]);
    let declared = one_op(vec![act("x", T::FLOAT32, &[1 << 30, 0, 1 << 30], None), act("y", T::FLOAT32, &[], None)], B::RELU, &[0], &[1], Options::None);
    expect_error("a declared [2^30, 0, 2^30]", declared, &["tensor 0", "too many elements"]);
    assert!(t.elapsed().as_secs() < 5, "empty tensors took {:?}", t.elapsed());
}

/// Fuzz seed 16110: the copies of a concatenation are listed at prepare, and with
/// an outer extent of 2^30 that listing walked every outer index (3-6 s) before the
/// arena limit refused the model. One and two inputs, both refused at once.
#[test]
fn concatenation_with_a_huge_outer_extent() {
    let t = std::time::Instant::now();
    let x = || act("x", T::FLOAT32, &[1 << 30, 4, 255], None);
    let cat = Options::Concatenation { axis: 1, activation: Activation::NONE };
    let one = one_op(vec![x(), act("y", T::FLOAT32, &[], None)], B::CONCATENATION, &[0], &[1], cat.clone());
    expect_error("CONCATENATION of one [2^30, 4, 255]", one, &["resource limit", "[1073741824, 4, 255]"]);
    let two = one_op(vec![x(), x(), act("y", T::FLOAT32, &[], None)], B::CONCATENATION, &[0, 1], &[2], cat);
    expect_error("CONCATENATION of two [2^30, 4, 255]", two, &["resource limit", "[1073741824, 4, 255]"]);
    assert!(t.elapsed().as_secs() < 1, "took {:?}", t.elapsed());
}

/// Fuzz seed 833: IF passed an int8 operand to a subgraph reading int32, whose kernels
/// then read past the int8 buffer.
#[test]
fn control_flow_operand_types() {
    let mut m = ModelSpec::default();
    let cond = m.add_tensor(constant("c", T::BOOL, &[], vec![1], None));
    let x = m.add_tensor(act("x", T::INT8, &[3, 64], q(0.5, 0)));
    let y = m.add_tensor(act("y", T::BOOL, &[], None));
    m.add_op(OpCode::Builtin(B::IF), &[cond, x], &[y], Options::If { then_subgraph: 1, else_subgraph: 1 });
    m.inputs = vec![x];
    m.outputs = vec![y];
    let mut sub = ModelSpec::default();
    let a = sub.add_tensor(act("a", T::INT32, &[], None));
    let three = sub.add_tensor(TensorSpec::const_i32("three", &[], &[3]));
    let b = sub.add_tensor(act("b", T::BOOL, &[], None));
    sub.add_op(OpCode::Builtin(B::LESS), &[a, three], &[b], Options::None);
    sub.inputs = vec![a];
    sub.outputs = vec![b];
    m.subgraphs.push(sub);
    expect_error("IF with an int8 operand for an int32 input", m.to_bytes().unwrap(), &["op 0", "operand 0 is int8", "subgraph 1 input 0 is int32"]);
}

/// Fuzz seed 119263: a run-time TRANSPOSE perm of 4M values went into the error
/// message whole (and into a 4M-entry vector); parameter tensors are bounded.
#[test]
fn huge_parameter_tensors() {
    let bytes = one_op(
        vec![act("x", T::FLOAT32, &[2, 2], None), act("perm", T::INT32, &[1 << 22], None), act("y", T::FLOAT32, &[], None)],
        B::TRANSPOSE,
        &[0, 1],
        &[2],
        Options::None,
    );
    let msg = expect_error("TRANSPOSE with a 4M-value perm", bytes, &["op 0", "parameter values"]);
    assert!(msg.len() < 400, "message of {} bytes", msg.len());
}

/// Fuzz seed 1080717: FULLY_CONNECTED with keep_num_dims on a rank-0 input declared a
/// one-element output and the kernel wrote out_n values into it.
#[test]
fn fully_connected_keep_num_dims_of_a_scalar() {
    let keep = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: true, asymmetric_quantize_inputs: false };
    let int8 = one_op(
        vec![act("x", T::INT8, &[], q(0.0039, 0)), constant("w", T::INT8, &[2, 1], vec![1, 2], q(0.1, 21)), act("y", T::INT8, &[], q(1.0, 0))],
        B::FULLY_CONNECTED,
        &[0, 1, -1],
        &[2],
        keep.clone(),
    );
    assert_eq!(expect_no_panic("int8 FULLY_CONNECTED keep_num_dims of a scalar", int8), Outcome::Ok);
    let float = one_op(
        vec![act("x", T::FLOAT32, &[], None), TensorSpec::const_f32("w", &[2, 1], &[1.0, 2.0]), act("y", T::FLOAT32, &[], None)],
        B::FULLY_CONNECTED,
        &[0, 1, -1],
        &[2],
        keep,
    );
    assert_eq!(expect_no_panic("float FULLY_CONNECTED keep_num_dims of a scalar", float), Outcome::Ok);
}

/// Fuzz seed 1196732: a float convolution with run-time weights staged a zeroed
/// buffer of out x taps x in floats before any check (80 GB).
#[test]
fn convolution_weights_sized_by_file_shapes() {
    let bytes = one_op(
        vec![act("x", T::FLOAT32, &[1, 1, 1, 4096], None), act("w", T::FLOAT32, &[1 << 20, 1, 1, 4096], None), act("y", T::FLOAT32, &[], None)],
        B::CONV_2D,
        &[0, 1],
        &[2],
        Options::Conv2D { padding: Padding::VALID, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE },
    );
    expect_error("CONV_2D with 2^32 run-time weights", bytes, &["resource limit"]);
}

/// Fuzz seed 1843399: a FULLY_CONNECTED whose weights are a tensor nothing writes
/// (zeros, so a constant) of 32 MiB: the packing pads the one output channel to a
/// whole panel, 16 times that, past the session limit unchecked.
#[test]
fn weight_packing_padded_past_the_limit() {
    let k = 1 << 23;
    let mut m = ModelSpec::default();
    let x = m.add_tensor(act("x", T::FLOAT32, &[1, k], None));
    let w = m.add_tensor(act("w", T::FLOAT32, &[1, k], None));
    let y = m.add_tensor(act("y", T::FLOAT32, &[1, 1], None));
    let fc = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(B::FULLY_CONNECTED), &[x, w], &[y], fc);
    m.inputs = vec![x];
    m.outputs = vec![y];
    expect_error("FULLY_CONNECTED packing 16 x 32 MiB", m.to_bytes().unwrap(), &["resource limit", "op 0"]);
}

/// Fuzz seed 2323950: a FULLY_CONNECTED with no output channels (weights [0, 2^31])
/// packed nothing but still allocated a row of 2^31 zeros.
#[test]
fn weight_packing_without_output_channels() {
    let k = i32::MAX;
    let fc = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false };
    let bytes = one_op(
        vec![act("x", T::FLOAT32, &[0, k], None), constant("w", T::FLOAT32, &[0, k], vec![], None), act("y", T::FLOAT32, &[], None)],
        B::FULLY_CONNECTED,
        &[0, 1],
        &[2],
        fc,
    );
    expect_error("FULLY_CONNECTED of weights [0, 2^31]", bytes, &["resource limit", "op 0"]);
}

/// Fuzz seed 87803 (with resized inputs): a float convolution's scratch (a padded
/// input row per filter row) was sized from the geometry before any check: 64 filter
/// rows over a 2^21-wide input is 4 GiB.
#[test]
fn convolution_scratch_sized_by_the_geometry() {
    let w: Vec<f32> = vec![0.5; 64 * 2 * 8];
    let bytes = one_op(
        vec![act("x", T::FLOAT32, &[1, 1, 1 << 21, 8], None), TensorSpec::const_f32("w", &[1, 64, 2, 8], &w), act("y", T::FLOAT32, &[], None)],
        B::CONV_2D,
        &[0, 1],
        &[2],
        Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE },
    );
    expect_error("CONV_2D scratch of 64 rows x 2^21 x 8", bytes, &["resource limit", "op 0"]);
}

/// Fuzz seed 2474884: a hybrid depthwise convolution of an empty batch read the first
/// batch's input zero point.
#[test]
fn hybrid_convolution_of_an_empty_batch() {
    let bytes = one_op(
        vec![act("x", T::FLOAT32, &[0, 4, 2, 3], None), constant("w", T::INT8, &[1, 3, 3, 3], vec![1; 27], q(0.25, 0)), act("y", T::FLOAT32, &[], None)],
        B::DEPTHWISE_CONV_2D,
        &[0, 1],
        &[2],
        Options::DepthwiseConv2D { padding: Padding::SAME, stride: (2, 1), dilation: (3, 1), depth_multiplier: 1, activation: Activation::NONE },
    );
    expect_no_panic("hybrid DEPTHWISE_CONV_2D of batch 0", bytes);
}

/// Recursive control flow (an IF whose branches are the graph holding it) is refused
/// at a fixed depth; with several such ops per graph the work must not grow as
/// (ops x branches)^depth.
#[test]
fn recursive_control_flow_is_bounded() {
    let t = std::time::Instant::now();
    let mut m = ModelSpec::default();
    let c = m.add_tensor(constant("c", T::BOOL, &[], vec![1], None));
    let x = m.add_tensor(act("x", T::FLOAT32, &[2], None));
    let y = m.add_tensor(act("y", T::FLOAT32, &[2], None));
    let z = m.add_tensor(act("z", T::FLOAT32, &[2], None));
    m.add_op(OpCode::Builtin(B::IF), &[c, x], &[y], Options::If { then_subgraph: 0, else_subgraph: 0 });
    m.add_op(OpCode::Builtin(B::IF), &[c, y], &[z], Options::If { then_subgraph: 0, else_subgraph: 0 });
    m.inputs = vec![x];
    m.outputs = vec![z];
    expect_error("two IFs recursing into their own graph", m.to_bytes().unwrap(), &["recursive"]);
    assert!(t.elapsed().as_secs() < 5, "recursive IFs took {:?}", t.elapsed());
}

/// Fuzz seed 2585526: a resize of an empty batch to 2^31 x 2^31 passed the output size
/// check (zero elements) and built coordinate tables of 2^31 entries each.
#[test]
fn resize_tables_sized_by_the_target() {
    for op in [B::RESIZE_NEAREST_NEIGHBOR, B::RESIZE_BILINEAR] {
        let opts = if op == B::RESIZE_BILINEAR {
            Options::Resize { align_corners: false, half_pixel_centers: false }
        } else {
            Options::ResizeNearest { align_corners: false, half_pixel_centers: false }
        };
        let bytes = one_op(
            vec![act("x", T::FLOAT32, &[0, 2, 2, 1], None), TensorSpec::const_i32("size", &[2], &[i32::MAX, i32::MAX]), act("y", T::FLOAT32, &[], None)],
            op,
            &[0, 1],
            &[2],
            opts,
        );
        expect_error(&format!("{op:?} of an empty batch to 2^31 x 2^31"), bytes, &["resource limit", "op 0"]);
    }
}

/// Fuzz seeds 5677705, 5910835, 6887340: FULLY_CONNECTED with keep_num_dims on an
/// input whose last dim is not the weights' row length declared an output smaller
/// than batch x out_n and the kernels wrote past it (int8, hybrid).
#[test]
fn fully_connected_keep_num_dims_needs_matching_rows() {
    let keep = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: true, asymmetric_quantize_inputs: false };
    let int8 = one_op(
        vec![act("x", T::INT8, &[2, 3], q(0.25, 0)), constant("w", T::INT8, &[3, 2], vec![1; 6], q(0.02, 0)), act("y", T::INT8, &[2, 3], q(0.5, 43))],
        B::FULLY_CONNECTED,
        &[0, 1, -1],
        &[2],
        keep.clone(),
    );
    expect_error("int8 FULLY_CONNECTED keep_num_dims [2, 3] x [3, 2]", int8, &["op 0", "keep_num_dims"]);
    let hybrid = one_op(
        vec![act("x", T::FLOAT32, &[2, 3], None), constant("w", T::INT8, &[3, 2], vec![1; 6], q(0.02, 0)), act("y", T::FLOAT32, &[2, 3], None)],
        B::FULLY_CONNECTED,
        &[0, 1, -1],
        &[2],
        keep.clone(),
    );
    expect_error("hybrid FULLY_CONNECTED keep_num_dims [2, 3] x [3, 2]", hybrid, &["op 0", "keep_num_dims"]);
    let float = one_op(
        vec![act("x", T::FLOAT32, &[2, 3], None), TensorSpec::const_f32("w", &[3, 2], &[1.0; 6]), act("y", T::FLOAT32, &[2, 3], None)],
        B::FULLY_CONNECTED,
        &[0, 1, -1],
        &[2],
        keep,
    );
    expect_error("float FULLY_CONNECTED keep_num_dims [2, 3] x [3, 2]", float, &["op 0", "keep_num_dims"]);
}

/// Fuzz seed 10290777: a float depthwise convolution with a stride of 2^31 - 1 (one
/// output pixel under SAME padding) reached the kernel, whose index-range check then
/// panicked; the builder now refuses the geometry.
#[test]
fn depthwise_with_a_huge_stride() {
    let w: Vec<f32> = vec![0.5; 3 * 3 * 4];
    let bytes = one_op(
        vec![act("x", T::FLOAT32, &[1, 3, 3, 4], None), TensorSpec::const_f32("w", &[1, 3, 3, 4], &w), act("y", T::FLOAT32, &[], None)],
        B::DEPTHWISE_CONV_2D,
        &[0, 1],
        &[2],
        Options::DepthwiseConv2D { padding: Padding::SAME, stride: (i32::MAX, i32::MAX), dilation: (1, 3), depth_multiplier: 1, activation: Activation::NONE },
    );
    expect_error("DEPTHWISE_CONV_2D stride 2^31 - 1", bytes, &["op 0", "DEPTHWISE_CONV_2D", "out of range"]);
}

/// Fuzz seed 10369336: a pooling window of 2^31 - 1 rows under SAME padding made
/// every output pixel visit the whole input (minutes of work on a 64 MiB tensor);
/// window ops now bound the input pixels their outputs visit.
#[test]
fn pooling_window_larger_than_the_input() {
    let bytes = one_op(
        vec![act("x", T::INT16, &[1, 65536, 3, 2], q(0.5, 0)), act("y", T::INT16, &[], q(0.5, 0))],
        B::MAX_POOL_2D,
        &[0],
        &[1],
        Options::Pool2D { padding: Padding::SAME, stride: (2, 2), filter: (i32::MAX, 3), activation: Activation::NONE },
    );
    expect_error("MAX_POOL_2D window of 2^31 - 1 rows", bytes, &["resource limit", "op 0", "MAX_POOL_2D"]);
}
