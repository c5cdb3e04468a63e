//! Data-dependent shapes: ops whose output shape depends on values computed at run
//! time are built and run when those values exist; their tensors are allocated then.

use std::sync::Arc;

use ferrite::Session;
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

/// y = reshape(relu(x), s) + 1, where `s` is a second model input.
fn model() -> Vec<u8> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 6]));
    let s = m.add_tensor(TensorSpec::activation("shape", TensorType::INT32, &[2]));
    let r = m.add_tensor(TensorSpec::activation("r", TensorType::FLOAT32, &[2, 6]));
    let rs = m.add_tensor(TensorSpec::activation("reshaped", TensorType::FLOAT32, &[2, 6]));
    let one = m.add_tensor(TensorSpec::const_f32("one", &[], &[1.0]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2, 6]));
    m.add_op(OpCode::Builtin(B::RELU), &[x], &[r], Options::None);
    m.add_op(OpCode::Builtin(B::RESHAPE), &[r, s], &[rs], Options::Reshape { new_shape: vec![2, 6] });
    m.add_op(OpCode::Builtin(B::ADD), &[rs, one], &[y], Options::Binary { activation: Activation::NONE });
    m.inputs = vec![x, s];
    m.outputs = vec![y];
    m.to_bytes().unwrap()
}

#[test]
fn reshape_by_a_runtime_shape() {
    let mut s = Session::from_bytes(Arc::new(model())).unwrap();
    s.prepare().unwrap();
    let x: Vec<f32> = (0..12).map(|i| i as f32 - 5.0).collect();
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0) + 1.0).collect();
    for shape in [[3i32, 4], [4, 3], [12, 1], [1, 12]] {
        s.set_input_f32(0, &x).unwrap();
        s.set_input(1, &shape.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>()).unwrap();
        s.run().unwrap();
        let out = s.output(0).unwrap();
        assert_eq!(out.shape, &[shape[0] as usize, shape[1] as usize], "output shape follows the run-time value");
        assert_eq!(out.to_f32().unwrap(), want);
    }
    // An impossible shape is a clear run-time error, not a panic.
    s.set_input(1, &[5i32, 5].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>()).unwrap();
    let e = s.run().unwrap_err().to_string();
    assert!(e.contains("RESHAPE") && e.contains("reshape"), "{e}");
    // run_with on a model with data-dependent shapes runs it and copies the outputs
    // (zero copy is for static models; it is no reason to refuse this one).
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let sb: Vec<u8> = [3i32, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut yb = vec![0u8; 48];
    let stats = s.run_with(&[&xb, &sb], &mut [&mut yb]).unwrap();
    assert_eq!(stats.output_bytes_copied, 48);
    let got: Vec<f32> = yb.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(got, want);
    assert_eq!(s.output(0).unwrap().shape, &[3, 4], "the real shape is reported after run_with too");
    // A buffer whose size is not the run's output size is an error, not a partial copy.
    let mut short = vec![0u8; 40];
    let e = s.run_with(&[&xb, &sb], &mut [&mut short]).unwrap_err().to_string();
    assert!(e.contains("output 0"), "{e}");
}
