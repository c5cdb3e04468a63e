//! Element-wise ops fused into the convolution before them (a residual ADD, then
//! PRELU; activations such as HARD_SWISH and RELU6) give the unfused result, and
//! are fused only when that is sound: not when the residual is computed after the
//! convolution, nor when the convolution's output has another reader.

use std::sync::Arc;

use ferrite::Session;
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};

const C: usize = 3;
const HW: usize = 5;

/// 1x1 conv (weights `w[o][i]`) -> ADD(residual) -> PRELU(alpha per channel).
/// `late_residual`: the residual is a second conv placed after the first;
/// `also_output`: the first conv's output is a graph output too.
fn model(late_residual: bool, also_output: bool) -> Vec<u8> {
    let s = [1, HW as i32, HW as i32, C as i32];
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &s));
    let conv = |m: &mut ModelSpec, name: &str, scale: f32| {
        let t = m.add_tensor(TensorSpec::activation(name, TensorType::FLOAT32, &s));
        let wv: Vec<f32> = (0..C * C).map(|i| scale * (i as f32 - 4.0) / 8.0).collect();
        let w = m.add_tensor(TensorSpec::const_f32(&format!("{name}/w"), &[C as i32, 1, 1, C as i32], &wv));
        let b = m.add_tensor(TensorSpec::const_f32(&format!("{name}/b"), &[C as i32], &[0.1, -0.2, 0.05]));
        m.add_op(
            OpCode::Builtin(B::CONV_2D),
            &[x, w, b],
            &[t],
            Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE },
        );
        t
    };
    let y = conv(&mut m, "conv1", 1.0);
    let residual = if late_residual { conv(&mut m, "conv2", -0.5) } else { x };
    let sum = m.add_tensor(TensorSpec::activation("sum", TensorType::FLOAT32, &s));
    m.add_op(OpCode::Builtin(B::ADD), &[y, residual], &[sum], Options::Binary { activation: Activation::NONE });
    let alpha = m.add_tensor(TensorSpec::const_f32("alpha", &[1, 1, C as i32], &[0.1, 0.2, 0.3]));
    let out = m.add_tensor(TensorSpec::activation("out", TensorType::FLOAT32, &s));
    m.add_op(OpCode::Builtin(B::PRELU), &[sum, alpha], &[out], Options::None);
    m.inputs = vec![x];
    m.outputs = if also_output { vec![out, y] } else { vec![out] };
    m.to_bytes().unwrap()
}

/// The model's arithmetic, written out directly.
fn reference(x: &[f32], late_residual: bool) -> Vec<f32> {
    let conv = |scale: f32, px: &[f32]| -> Vec<f32> {
        let b = [0.1f32, -0.2, 0.05];
        (0..C).map(|o| b[o] + (0..C).map(|i| scale * ((o * C + i) as f32 - 4.0) / 8.0 * px[i]).sum::<f32>()).collect()
    };
    let alpha = [0.1f32, 0.2, 0.3];
    x.chunks_exact(C)
        .flat_map(|px| {
            let y = conv(1.0, px);
            let r = if late_residual { conv(-0.5, px) } else { px.to_vec() };
            (0..C).map(move |c| {
                let v = y[c] + r[c];
                if v < 0.0 {
                    v * alpha[c]
                } else {
                    v
                }
            })
        })
        .collect()
}

#[test]
fn residual_add_and_prelu_fold_into_the_convolution_only_when_sound() {
    let x: Vec<f32> = (0..HW * HW * C).map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0).collect();
    // With a late residual the ADD cannot fold into the first conv, but it can into
    // the second (whose other operand, the first conv's output, exists by then).
    for (late, also_output, fused) in [(false, false, 2), (true, false, 2), (false, true, 0)] {
        for threads in [1, 2] {
            let m = Arc::new(ferrite::Model::from_bytes(Arc::new(model(late, also_output))).unwrap());
            let mut s = Session::with_options(m, ferrite::SessionOptions { threads, ..Default::default() }).unwrap();
            s.prepare().unwrap();
            assert_eq!(s.fused_op_count(), Some(fused), "late {late} also_output {also_output}");
            s.set_input_f32(0, &x).unwrap();
            s.run().unwrap();
            let got = s.output(0).unwrap().to_f32().unwrap();
            let want = reference(&x, late);
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(err < 1e-5, "late {late} also_output {also_output} threads {threads}: worst error {err}");
        }
    }
}

/// 1x1 conv -> HARD_SWISH -> RELU6; `also_output`: the conv's output is a graph
/// output too (so nothing may fold into it).
fn activation_model(also_output: bool) -> Vec<u8> {
    let s = [1, HW as i32, HW as i32, C as i32];
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &s));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &s));
    let wv: Vec<f32> = (0..C * C).map(|i| (i as f32 - 4.0) * 0.9).collect();
    let w = m.add_tensor(TensorSpec::const_f32("w", &[C as i32, 1, 1, C as i32], &wv));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[C as i32], &[0.1, -0.2, 0.05]));
    let conv = Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE };
    m.add_op(OpCode::Builtin(B::CONV_2D), &[x, w, b], &[y], conv);
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &s));
    m.add_op(OpCode::Builtin(B::HARD_SWISH), &[y], &[h], Options::None);
    let out = m.add_tensor(TensorSpec::activation("out", TensorType::FLOAT32, &s));
    m.add_op(OpCode::Builtin(B::RELU6), &[h], &[out], Options::None);
    m.inputs = vec![x];
    m.outputs = if also_output { vec![out, y] } else { vec![out] };
    m.to_bytes().unwrap()
}

#[test]
fn activations_fold_into_the_convolution_only_when_sound() {
    let x: Vec<f32> = (0..HW * HW * C).map(|i| ((i * 37 % 23) as f32 - 11.0) / 3.0).collect();
    let want: Vec<f32> = x
        .chunks_exact(C)
        .flat_map(|px| {
            (0..C).map(move |o| {
                let b = [0.1f32, -0.2, 0.05];
                let v = b[o] + (0..C).map(|i| ((o * C + i) as f32 - 4.0) * 0.9 * px[i]).sum::<f32>();
                (v * (v + 3.0).clamp(0.0, 6.0) / 6.0).clamp(0.0, 6.0)
            })
        })
        .collect();
    // The values span both clamps of RELU6 and both bends of HARD_SWISH.
    assert!(want.contains(&6.0) && want.contains(&0.0) && want.iter().any(|&v| v > 0.0 && v < 6.0));
    for (also_output, fused) in [(false, 2), (true, 0)] {
        for threads in [1, 2] {
            let m = Arc::new(ferrite::Model::from_bytes(Arc::new(activation_model(also_output))).unwrap());
            let mut s = Session::with_options(m, ferrite::SessionOptions { threads, ..Default::default() }).unwrap();
            s.prepare().unwrap();
            assert_eq!(s.fused_op_count(), Some(fused), "also_output {also_output}");
            s.set_input_f32(0, &x).unwrap();
            s.run().unwrap();
            let got = s.output(0).unwrap().to_f32().unwrap();
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(err < 1e-4, "also_output {also_output} threads {threads}: worst error {err}");
        }
    }
}
