//! The session API on models built with ferrite's writer: call order, names,
//! signatures, circle files, external buffers, custom ops, threads.

use std::sync::Arc;

use ferrite::ext::{arg, typed, typed_mut, Built, CustomOp, OpContext};
use ferrite::{DType, Error, Model, Session, SessionOptions};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

/// y = relu(x * w + b) over a [2, 3] input, with a signature "serve".
fn small_model() -> ModelSpec {
    let mut m = ModelSpec { signature_key: Some("serve".into()), ..Default::default() };
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 3]));
    let w = m.add_tensor(TensorSpec::const_f32("w", &[3], &[1.0, -2.0, 0.5]));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[3], &[0.25, 0.25, 0.25]));
    let xw = m.add_tensor(TensorSpec::activation("xw", TensorType::FLOAT32, &[2, 3]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2, 3]));
    m.add_op(OpCode::Builtin(B::MUL), &[x, w], &[xw], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(B::ADD), &[xw, b], &[y], Options::Binary { activation: Activation::RELU });
    m.inputs = vec![x];
    m.outputs = vec![y];
    m
}

fn expected(x: &[f32]) -> Vec<f32> {
    let w = [1.0, -2.0, 0.5];
    x.iter().enumerate().map(|(i, v)| (v * w[i % 3] + 0.25f32).max(0.0)).collect()
}

fn run(bytes: Vec<u8>, x: &[f32]) -> Vec<f32> {
    let mut s = Session::from_bytes(Arc::new(bytes)).unwrap();
    s.prepare().unwrap();
    s.set_input_f32(0, x).unwrap();
    s.run().unwrap();
    s.output(0).unwrap().to_f32().unwrap()
}

const X: [f32; 6] = [1.0, 2.0, -3.0, 0.5, -0.5, 4.0];

#[test]
fn runs_and_matches_hand_computation() {
    assert_eq!(run(small_model().to_bytes().unwrap(), &X), expected(&X));
}

#[test]
fn calls_in_the_wrong_state_are_errors() {
    let mut s = Session::from_bytes(Arc::new(small_model().to_bytes().unwrap())).unwrap();
    assert!(matches!(s.set_input_f32(0, &X), Err(Error::InvalidState(_))));
    assert!(matches!(s.run(), Err(Error::InvalidState(_))));
    s.prepare().unwrap();
    assert!(matches!(s.output(0), Err(Error::InvalidState(_))));
    assert!(matches!(s.select_signature("serve"), Err(Error::InvalidState(_))));
    assert!(matches!(s.set_input_f32(0, &X[..5]), Err(Error::InvalidArgument(_))));
    assert!(matches!(s.set_input(0, &[0u8; 7]), Err(Error::InvalidArgument(_))));
    assert!(matches!(s.set_input_f32(3, &X), Err(Error::InvalidArgument(_))));
    s.set_input_f32(0, &X).unwrap();
    s.run().unwrap();
    assert!(matches!(s.output(1), Err(Error::InvalidArgument(_))));
}

#[test]
fn names_and_signatures() {
    let mut s = Session::from_bytes(Arc::new(small_model().to_bytes().unwrap())).unwrap();
    assert_eq!(s.signatures(), vec!["serve".to_string()]);
    assert!(s.select_signature("nope").is_err());
    s.select_signature("serve").unwrap();
    assert_eq!(s.input_index("x").unwrap(), 0);
    assert_eq!(s.output_index("y").unwrap(), 0);
    assert!(s.input_index("zz").is_err());
    let d = &s.inputs()[0];
    assert_eq!((d.dtype, d.shape.clone()), (DType::F32, vec![2, 3]));
}

#[test]
fn circle_identifier_is_recognised_and_runs() {
    let mut bytes = small_model().to_bytes().unwrap();
    bytes[4..8].copy_from_slice(b"CIR0");
    let m = Model::from_bytes(Arc::new(bytes.clone())).unwrap();
    assert_eq!(m.kind(), ferrite_format::FileKind::Circle);
    assert_eq!(run(bytes, &X), expected(&X));
}

#[test]
fn buffers_stored_after_the_flatbuffer_are_used() {
    let inline = small_model().to_bytes().unwrap();
    let external = small_model().to_bytes_external().unwrap();
    assert_ne!(inline, external);
    let m = Model::from_bytes(Arc::new(external.clone())).unwrap();
    let w = &m.subgraphs()[0].tensors[1];
    assert!(w.data.as_ref().unwrap().start >= 16, "constant lives in the trailing region");
    assert_eq!(run(external, &X), expected(&X));
}

#[test]
fn resize_before_and_after_prepare() {
    let mut s = Session::from_bytes(Arc::new(small_model().to_bytes().unwrap())).unwrap();
    s.resize_input(0, &[1, 3]).unwrap();
    s.prepare().unwrap();
    s.set_input_f32(0, &X[..3]).unwrap();
    s.run().unwrap();
    assert_eq!(s.output(0).unwrap().to_f32().unwrap(), expected(&X[..3]));
    s.resize_input(0, &[2, 3]).unwrap();
    s.set_input_f32(0, &X).unwrap();
    s.run().unwrap();
    assert_eq!(s.output(0).unwrap().shape, &[2, 3]);
    assert_eq!(s.output(0).unwrap().to_f32().unwrap(), expected(&X));
    // A new rank is accepted, as in LiteRT; the ops decide whether they take it.
    s.resize_input(0, &[3]).unwrap();
    s.set_input_f32(0, &X[..3]).unwrap();
    s.run().unwrap();
    assert_eq!(s.output(0).unwrap().shape, &[3]);
    assert_eq!(s.output(0).unwrap().to_f32().unwrap(), expected(&X[..3]));
    s.resize_input(0, &[6]).unwrap();
    assert!(s.run().is_err(), "MUL cannot broadcast [6] with its [3] weights");
}

fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn live_buffers_are_where_runs_read_and_write() {
    let mut s = Session::from_bytes(Arc::new(small_model().to_bytes().unwrap())).unwrap();
    let (x, y) = (s.inputs()[0].tensor, s.outputs()[0].tensor);
    assert!(matches!(s.tensor_data_mut(x), Err(Error::InvalidState(_))));
    assert!(s.allocate_tensors().unwrap(), "the first allocation prepares");
    assert!(!s.allocate_tensors().unwrap(), "nothing changed");
    assert_eq!(s.plan_stats().compiles, 1, "nothing changed: no second compile");

    // Inputs written in place are what the run reads, and they stay for the next run.
    let input = s.tensor_data_mut(x).unwrap();
    input.copy_from_slice(&f32_bytes(&X));
    let in_ptr = input.as_ptr();
    let out_ptr = s.tensor_data_mut(y).unwrap().as_ptr();
    for _ in 0..2 {
        s.run().unwrap();
        let out = s.output(0).unwrap();
        assert_eq!(out.bytes.as_ptr(), out_ptr, "the output is where tensor_data_mut said");
        assert_eq!(out.to_f32().unwrap(), expected(&X));
    }
    assert_eq!(s.tensor_data_mut(x).unwrap().as_ptr(), in_ptr, "no plan change: the input did not move");

    // A resize takes effect at allocate_tensors; the buffers then have the new sizes.
    s.resize_input(0, &[1, 3]).unwrap();
    assert!(matches!(s.tensor_data_mut(x), Err(Error::InvalidState(_))), "stale until allocated");
    assert!(s.allocate_tensors().unwrap());
    s.tensor_data_mut(x).unwrap().copy_from_slice(&f32_bytes(&X[..3]));
    assert_eq!(s.tensor_data_mut(y).unwrap().len(), 12);
    s.run().unwrap();
    assert_eq!(s.output(0).unwrap().to_f32().unwrap(), expected(&X[..3]));
    assert!(matches!(s.tensor_data_mut(1000), Err(Error::InvalidArgument(_))));
}

struct Double;
impl CustomOp for Double {
    fn build(&self, op: &OpContext<'_>) -> ferrite::Result<Built> {
        let x = op.input(0)?;
        Ok(Built {
            outputs: vec![(x.dtype, x.shape.clone())],
            kernel: Box::new(|ins, outs| {
                for (o, &i) in typed_mut::<f32>(outs[0])?.iter_mut().zip(typed::<f32>(arg(ins, 0)?)?) {
                    *o = 2.0 * i;
                }
                Ok(())
            }),
        })
    }
}

#[test]
fn custom_ops_are_registered_by_name() {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[4]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[4]));
    m.add_op(OpCode::Custom("MyDouble".into()), &[x], &[y], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![y];
    let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
    let mut s = Session::with_options(model.clone(), SessionOptions::default()).unwrap();
    let e = s.prepare().unwrap_err();
    assert!(e.to_string().contains("MyDouble"), "{e}");
    let mut s = Session::with_options(model, SessionOptions::default()).unwrap();
    s.register_custom_op("MyDouble", Arc::new(Double)).unwrap();
    s.prepare().unwrap();
    s.set_input_f32(0, &[1.0, 2.0, 3.0, -1.0]).unwrap();
    s.run().unwrap();
    assert_eq!(s.output(0).unwrap().to_f32().unwrap(), vec![2.0, 4.0, 6.0, -2.0]);
}

#[test]
fn session_survives_the_thread_that_created_it() {
    let s = std::thread::spawn(|| {
        let mut s = Session::from_bytes(Arc::new(small_model().to_bytes().unwrap())).unwrap();
        s.prepare().unwrap();
        s.set_input_f32(0, &X).unwrap();
        s.run().unwrap();
        s
    })
    .join()
    .unwrap();
    let out = std::thread::spawn(move || {
        let mut s = s;
        s.run().unwrap();
        s.output(0).unwrap().to_f32().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(out, expected(&X));
}

#[test]
fn demo_model_classifies() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite");
    let mut s = Session::from_file(path).unwrap();
    s.prepare().unwrap();
    s.set_input_f32(0, &vec![0.5; 32 * 32 * 3]).unwrap();
    s.run().unwrap();
    let p = s.output(0).unwrap().to_f32().unwrap();
    assert_eq!(p.len(), 10);
    assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    let (arena, lower) = s.arena_stats().unwrap();
    assert!(arena >= lower && lower > 0);
}

/// A constant converted at prepare (fp16 bias) shared by a kernel that reads it at
/// run time and a later one that folds it into its packing must stay available.
#[test]
fn shared_prepare_time_constant_survives_packing() {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 2, 2, 2]));
    let b16: Vec<u8> = [0x3c00u16, 0x4000].iter().flat_map(|v| v.to_le_bytes()).collect(); // 1.0, 2.0 in fp16
    let bh = m.add_tensor(TensorSpec { data: Some(b16), ..TensorSpec::activation("b16", TensorType::FLOAT16, &[2]) });
    let b = m.add_tensor(TensorSpec::activation("b", TensorType::FLOAT32, &[2]));
    let wd = m.add_tensor(TensorSpec::const_f32("wd", &[1, 1, 1, 2], &[2.0, 3.0]));
    let wc = m.add_tensor(TensorSpec::const_f32("wc", &[2, 1, 1, 2], &[1.0, 0.0, 0.0, 1.0]));
    let y1 = m.add_tensor(TensorSpec::activation("y1", TensorType::FLOAT32, &[1, 2, 2, 2]));
    let y2 = m.add_tensor(TensorSpec::activation("y2", TensorType::FLOAT32, &[1, 2, 2, 2]));
    let conv = |stride| (ferrite_format::writer::Padding::VALID, stride);
    m.add_op(OpCode::Builtin(B::DEQUANTIZE), &[bh], &[b], Options::None);
    let (padding, stride) = conv((1, 1));
    m.add_op(
        OpCode::Builtin(B::DEPTHWISE_CONV_2D),
        &[x, wd, b],
        &[y1],
        Options::DepthwiseConv2D { padding, stride, dilation: (1, 1), depth_multiplier: 1, activation: Activation::NONE },
    );
    m.add_op(OpCode::Builtin(B::CONV_2D), &[y1, wc, b], &[y2], Options::Conv2D { padding, stride, dilation: (1, 1), activation: Activation::NONE });
    m.inputs = vec![x];
    m.outputs = vec![y2];
    let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
    // y1 = x * [2, 3] + [1, 2]; y2 = y1 (identity 1x1) + [1, 2]
    let want: Vec<f32> = x.iter().enumerate().map(|(i, v)| if i % 2 == 0 { v * 2.0 + 2.0 } else { v * 3.0 + 4.0 }).collect();
    assert_eq!(run(m.to_bytes().unwrap(), &x), want);
}

/// x -> MUL w -> a -> ADD b -> c -> MUL w -> d -> ADD b (relu) -> y: the planner may
/// give `d` the memory of `a` (their lifetimes do not overlap).
fn chain_model() -> (ModelSpec, [i32; 3]) {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 3]));
    let w = m.add_tensor(TensorSpec::const_f32("w", &[3], &[1.0, -2.0, 0.5]));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[3], &[0.25, 0.25, 0.25]));
    let mut t = [0; 3];
    for (k, slot) in t.iter_mut().enumerate() {
        *slot = m.add_tensor(TensorSpec::activation(&format!("t{k}"), TensorType::FLOAT32, &[2, 3]));
    }
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2, 3]));
    let none = Options::Binary { activation: Activation::NONE };
    m.add_op(OpCode::Builtin(B::MUL), &[x, w], &[t[0]], none.clone());
    m.add_op(OpCode::Builtin(B::ADD), &[t[0], b], &[t[1]], none.clone());
    m.add_op(OpCode::Builtin(B::MUL), &[t[1], w], &[t[2]], none);
    m.add_op(OpCode::Builtin(B::ADD), &[t[2], b], &[y], Options::Binary { activation: Activation::RELU });
    m.inputs = vec![x];
    m.outputs = vec![y];
    (m, t)
}

#[test]
fn preserved_tensors_hold_every_intermediate_after_a_run() {
    let (m, t) = chain_model();
    let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
    let w = [1.0f32, -2.0, 0.5];
    let t0: Vec<f32> = X.iter().enumerate().map(|(i, v)| v * w[i % 3]).collect();
    let t1: Vec<f32> = t0.iter().map(|v| v + 0.25).collect();
    let t2: Vec<f32> = t1.iter().enumerate().map(|(i, v)| v * w[i % 3]).collect();
    let y: Vec<f32> = t2.iter().map(|v| (v + 0.25f32).max(0.0)).collect();
    let mut s = Session::with_options(model.clone(), SessionOptions::default()).unwrap();
    s.set_preserve_all_tensors(true).unwrap();
    s.prepare().unwrap();
    assert!(matches!(s.set_preserve_all_tensors(false), Err(Error::InvalidState(_))), "fixed once prepared");
    s.set_input_f32(0, &X).unwrap();
    s.run().unwrap();
    for (tensor, want) in t.iter().zip([&t0, &t1, &t2]) {
        let got = s.tensor_data(*tensor as usize).unwrap().to_f32().unwrap();
        assert_eq!(&got, want, "tensor {tensor}");
    }
    assert_eq!(s.output(0).unwrap().to_f32().unwrap(), y);
    // Bound buffers give the same result (the compiled graph lists more outputs than the model).
    let mut out = vec![0u8; 24];
    s.run_with(&[bytemuck_f32(&X).as_slice()], &mut [out.as_mut_slice()]).unwrap();
    assert_eq!(out, bytemuck_f32(&y));
    // Every intermediate in memory of its own: the arena holds all five tensors.
    let (arena, _) = s.arena_stats().unwrap();
    assert!(arena >= 5 * 64, "arena of {arena} bytes shares memory");
    let mut plain = Session::with_options(model, SessionOptions::default()).unwrap();
    plain.prepare().unwrap();
    assert!(plain.arena_stats().unwrap().0 < arena, "without the option, t0 and t2 share memory");
}

fn bytemuck_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn allocate_tensors_compiles_only_when_shapes_change() {
    let mut s = Session::from_bytes(Arc::new(small_model().to_bytes().unwrap())).unwrap();
    assert!(s.allocate_tensors().unwrap(), "first call prepares");
    assert!(!s.allocate_tensors().unwrap(), "nothing changed");
    assert_eq!(s.plan_stats().compiles, 1);
    s.resize_input(0, &[2, 3]).unwrap();
    assert!(!s.allocate_tensors().unwrap(), "resize to the current shape");
    s.resize_input(0, &[1, 3]).unwrap();
    assert!(s.allocate_tensors().unwrap());
    assert_eq!(s.tensor_desc(4).unwrap().shape, vec![1, 3], "the output follows the new plan");
    s.resize_input(0, &[2, 3]).unwrap();
    assert!(s.allocate_tensors().unwrap());
    let stats = s.plan_stats();
    assert_eq!((stats.compiles, stats.cache_hits), (2, 1), "the first shape's plan comes from the cache");
}

#[test]
fn tensors_by_index_before_and_after_prepare() {
    let mut s = Session::from_bytes(Arc::new(small_model().to_bytes().unwrap())).unwrap();
    assert_eq!(s.tensor_count(), 5);
    assert_eq!(s.tensor_data(1).unwrap().to_f32().unwrap(), vec![1.0, -2.0, 0.5], "constants before prepare");
    assert!(matches!(s.tensor_data(0), Err(Error::InvalidState(_))), "no memory before prepare");
    assert!(matches!(s.tensor_data(5), Err(Error::InvalidArgument(_))));
    assert!(matches!(s.tensor_data_mut(0), Err(Error::InvalidState(_))));
    s.prepare().unwrap();
    assert!(matches!(s.tensor_data_mut(1), Err(Error::InvalidArgument(_))), "constants are read-only");
    assert_eq!(s.tensor_data(0).unwrap().bytes, &[0u8; 24], "inputs read as zeros before they are set");
    // Filling the input in place is what set_input does.
    s.tensor_data_mut(0).unwrap().copy_from_slice(&bytemuck_f32(&X));
    s.run().unwrap();
    assert_eq!(s.tensor_data(4).unwrap().to_f32().unwrap(), expected(&X));
    assert_eq!(s.tensor_desc(4).unwrap().name, "y");
    s.resize_input(0, &[1, 3]).unwrap();
    assert!(matches!(s.tensor_data(0), Err(Error::InvalidState(_))), "stale memory while a resize waits");
    assert!(s.tensor_data(1).is_ok(), "constants stay readable");
    assert_eq!(s.tensor_desc(0).unwrap().shape, vec![1, 3], "an input's shape follows the resize at once");
}

#[test]
fn reset_variable_tensors_zeroes_variable_tensors_only() {
    let (mut m, t) = chain_model();
    m.tensors[t[0] as usize].is_variable = true;
    let model = Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap();
    let mut s = Session::with_options(Arc::new(model), SessionOptions::default()).unwrap();
    s.set_preserve_all_tensors(true).unwrap();
    s.prepare().unwrap();
    s.set_input_f32(0, &X).unwrap();
    s.run().unwrap();
    let before = s.tensor_data(t[1] as usize).unwrap().to_f32().unwrap();
    assert!(s.tensor_data(t[0] as usize).unwrap().to_f32().unwrap().iter().any(|&v| v != 0.0));
    s.reset_variable_tensors();
    assert!(s.tensor_data(t[0] as usize).unwrap().to_f32().unwrap().iter().all(|&v| v == 0.0));
    assert_eq!(s.tensor_data(t[1] as usize).unwrap().to_f32().unwrap(), before, "other tensors keep their values");
}
