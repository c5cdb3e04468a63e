//! Windows wider than their input: a VALID convolution or pooling whose dilated
//! filter does not fit gives an output with zero columns (or rows). LiteRT runs
//! such a model and returns an empty tensor; so must ferrite, on every backend,
//! instead of reporting a buffer mismatch (the float convolution's row split did
//! until the generated single-op suite drew such a case).

use std::sync::Arc;

use ferrite::model::{BuiltinOp, Model};
use ferrite::{Session, SessionOptions};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, ModelSpec, OpCode, Options, Padding, TensorSpec};

/// One float op over a [2, h, w, c] input whose output shape the file leaves
/// unknown (as the converter does), with a filter of `k` (height, width).
fn model(op: BuiltinOp, h: i32, w: i32, c: i32, k: (i32, i32), dilation: (i32, i32)) -> Vec<u8> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, h, w, c]));
    let out = m.add_tensor(TensorSpec::activation("out", TensorType::FLOAT32, &[]));
    let oc = 3;
    let (inputs, options) = match op {
        BuiltinOp::CONV_2D => {
            let n = (oc * k.0 * k.1 * c) as usize;
            let wt = m.add_tensor(TensorSpec::const_f32("w", &[oc, k.0, k.1, c], &(0..n).map(|i| i as f32 * 0.01).collect::<Vec<_>>()));
            let b = m.add_tensor(TensorSpec::const_f32("b", &[oc], &[0.5, -0.5, 1.0]));
            (vec![x, wt, b], Options::Conv2D { padding: Padding::VALID, stride: (1, 1), dilation, activation: Activation::RELU })
        }
        BuiltinOp::DEPTHWISE_CONV_2D => {
            let n = (k.0 * k.1 * c) as usize;
            let wt = m.add_tensor(TensorSpec::const_f32("w", &[1, k.0, k.1, c], &(0..n).map(|i| i as f32 * 0.01).collect::<Vec<_>>()));
            let b = m.add_tensor(TensorSpec::const_f32("b", &[c], &vec![0.25; c as usize]));
            (vec![x, wt, b], Options::DepthwiseConv2D { padding: Padding::VALID, stride: (1, 1), dilation, depth_multiplier: 1, activation: Activation::NONE })
        }
        _ => (vec![x], Options::Pool2D { padding: Padding::VALID, stride: (1, 1), filter: k, activation: Activation::NONE }),
    };
    m.add_op(OpCode::Builtin(op.operator()), &inputs, &[out], options);
    m.inputs = vec![x];
    m.outputs = vec![out];
    m.to_bytes().unwrap()
}

#[test]
fn windows_wider_than_the_input_give_empty_outputs() {
    // (op, h, w, c, filter, dilation, the output's expected [h, w]).
    let cases = [
        (BuiltinOp::CONV_2D, 6, 4, 1, (1, 3), (1, 2), (6, 0)),
        (BuiltinOp::CONV_2D, 3, 5, 4, (4, 1), (1, 1), (0, 5)),
        (BuiltinOp::CONV_2D, 6, 6, 2, (3, 3), (3, 3), (0, 0)),
        (BuiltinOp::DEPTHWISE_CONV_2D, 6, 4, 5, (1, 3), (1, 2), (6, 0)),
        (BuiltinOp::DEPTHWISE_CONV_2D, 2, 7, 8, (3, 3), (1, 1), (0, 5)),
        (BuiltinOp::MAX_POOL_2D, 4, 3, 2, (2, 4), (1, 1), (3, 0)),
        (BuiltinOp::AVERAGE_POOL_2D, 3, 6, 2, (4, 2), (1, 1), (0, 5)),
    ];
    for backend in ["cpu", "reference"] {
        for &(op, h, w, c, k, dilation, (oh, ow)) in &cases {
            let bytes = model(op, h, w, c, k, dilation);
            let model = Arc::new(Model::from_bytes(Arc::new(bytes)).unwrap());
            let options = SessionOptions { backends: vec![backend.into()], ..SessionOptions::default() };
            let mut s = Session::with_options(model, options).unwrap();
            s.prepare().unwrap_or_else(|e| panic!("{backend} {op} {h}x{w}x{c} k{k:?} d{dilation:?}: prepare: {e}"));
            let x: Vec<f32> = (0..2 * h * w * c).map(|i| (i % 7) as f32 - 3.0).collect();
            s.set_input_f32(0, &x).unwrap();
            // Twice: the second run reuses the planned (empty) buffers.
            for _ in 0..2 {
                s.run().unwrap_or_else(|e| panic!("{backend} {op} {h}x{w}x{c} k{k:?} d{dilation:?}: {e}"));
            }
            let y = s.output(0).unwrap();
            assert_eq!(y.shape, &[2, oh as usize, ow as usize, if op == BuiltinOp::CONV_2D { 3 } else { c as usize }], "{backend} {op}");
            assert!(y.bytes.is_empty(), "{backend} {op}");
        }
    }
}
