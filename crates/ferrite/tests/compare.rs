//! The first-divergence finder (`ferrite::compare`) finds a planted error where it
//! was planted: a backend written for this test (through `ferrite::ext`) runs one
//! builtin op correctly but for one element it moves, and is pinned to that op; the
//! comparison against ferrite's reference backend names exactly that op. A clean run
//! against the reference reports nothing, compares the fused op's output and leaves
//! the tensor fusion removed alone.

use std::sync::Arc;

use ferrite::compare::{capture, compare, Tolerance, ValueKind};
use ferrite::ext::{arg, typed, typed_mut, Backend, BackendContext, Built, OpContext};
use ferrite::model::{BuiltinOp, Model};
use ferrite::{parse_op_backends, DType, OpRun, Result, Session, SessionOptions, TensorState};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};

/// x -CONV-> RELU (fused into the convolution on cpu) -MUL c-> TANH -ADD relu-> LOGISTIC.
fn chain() -> Arc<Model> {
    let mut m = ModelSpec::default();
    let f = TensorType::FLOAT32;
    let x = m.add_tensor(TensorSpec::activation("x", f, &[1, 6, 6, 3]));
    let wv: Vec<f32> = (0..4 * 9 * 3).map(|i| ((i * 5 % 11) as f32 - 5.0) / 10.0).collect();
    let w = m.add_tensor(TensorSpec::const_f32("w", &[4, 3, 3, 3], &wv));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[4], &[0.1, -0.1, 0.2, 0.0]));
    let conv = m.add_tensor(TensorSpec::activation("conv", f, &[1, 6, 6, 4]));
    m.add_op(
        OpCode::Builtin(B::CONV_2D),
        &[x, w, b],
        &[conv],
        Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE },
    );
    let relu = m.add_tensor(TensorSpec::activation("relu", f, &[1, 6, 6, 4]));
    m.add_op(OpCode::Builtin(B::RELU), &[conv], &[relu], Options::None);
    let cv: Vec<f32> = (0..144).map(|i| 0.5 + (i % 7) as f32 / 7.0).collect();
    let c = m.add_tensor(TensorSpec::const_f32("c", &[1, 6, 6, 4], &cv));
    let mul = m.add_tensor(TensorSpec::activation("mul", f, &[1, 6, 6, 4]));
    m.add_op(OpCode::Builtin(B::MUL), &[relu, c], &[mul], Options::None);
    let tanh = m.add_tensor(TensorSpec::activation("tanh", f, &[1, 6, 6, 4]));
    m.add_op(OpCode::Builtin(B::TANH), &[mul], &[tanh], Options::None);
    let add = m.add_tensor(TensorSpec::activation("add", f, &[1, 6, 6, 4]));
    m.add_op(OpCode::Builtin(B::ADD), &[tanh, relu], &[add], Options::None);
    let y = m.add_tensor(TensorSpec::activation("y", f, &[1, 6, 6, 4]));
    m.add_op(OpCode::Builtin(B::LOGISTIC), &[add], &[y], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![y];
    Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap())
}

/// Runs float MUL and TANH, then moves element 5 of the result by 0.25: the kernel
/// a bug would leave behind.
struct Perturb;

impl Backend for Perturb {
    fn name(&self) -> &'static str {
        "perturb"
    }
    fn build(&self, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Result<Built> {
        let x = op.input(0)?;
        let code = op.op.code.builtin();
        if x.dtype != DType::F32 || !matches!(code, Some(BuiltinOp::MUL) | Some(BuiltinOp::TANH)) {
            return Err(op.unsupported("perturb runs float MUL and TANH"));
        }
        let mul = code == Some(BuiltinOp::MUL);
        Ok(Built {
            outputs: vec![(DType::F32, x.shape.clone())],
            kernel: Box::new(move |ins, outs| {
                let a = typed::<f32>(arg(ins, 0)?)?;
                let y = typed_mut::<f32>(&mut *outs[0])?;
                if mul {
                    let b = typed::<f32>(arg(ins, 1)?)?;
                    y.iter_mut().zip(a.iter().zip(b)).for_each(|(y, (a, b))| *y = a * b);
                } else {
                    y.iter_mut().zip(a).for_each(|(y, a)| *y = a.tanh());
                }
                y[5] += 0.25;
                Ok(())
            }),
        })
    }
}

fn session(model: &Arc<Model>, backends: &[&str], pin: &str) -> Session {
    let options = SessionOptions {
        backends: backends.iter().map(|b| b.to_string()).collect(),
        op_backends: parse_op_backends(pin).unwrap(),
        custom_backends: vec![Arc::new(Perturb)],
        ..SessionOptions::default()
    };
    let mut s = Session::with_options(model.clone(), options).unwrap();
    s.prepare().unwrap();
    let x: Vec<f32> = (0..108).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
    s.set_input_f32(0, &x).unwrap();
    s
}

#[test]
fn a_perturbed_op_is_reported_at_exactly_that_op() {
    let model = chain();
    let reference = capture(&mut session(&model, &["reference", "cpu"], "")).unwrap().tensors;
    for (pinned, op_index) in [("2=perturb", 2), ("3=perturb", 3)] {
        let mine = capture(&mut session(&model, &["cpu"], pinned)).unwrap();
        assert_eq!(mine.ops.iter().find(|o| o.index == op_index).unwrap().runs_on, OpRun::Backend("perturb"));
        let cmp = compare(&mine, &reference, &Tolerance::default());
        let first = &cmp.ops[cmp.first_divergence.expect("the planted error is found")];
        assert_eq!(first.op.index, op_index, "planted at {op_index}");
        let d = first.worst().unwrap();
        // Element 5 of [1, 6, 6, 4] is [0, 0, 1, 1]; TANH's bound output moves it by 0.25 exactly.
        assert_eq!((d.at.clone(), d.beyond, d.kind), (vec![0, 0, 1, 1], 1, ValueKind::Float));
        assert!((d.max_abs - 0.25).abs() < 1e-3, "{d:?}");
        // Ops before it agree; the error travels on to the ops after it.
        assert!(cmp.ops[..cmp.first_divergence.unwrap()].iter().all(|o| !o.diverged()));
        assert!(cmp.ops.last().unwrap().diffs[0].max_abs > 0.0);
    }
}

#[test]
fn a_clean_run_agrees_and_fused_intermediates_are_skipped() {
    let model = chain();
    let mine = capture(&mut session(&model, &["cpu"], "")).unwrap();
    let reference = capture(&mut session(&model, &["reference", "cpu"], "")).unwrap();
    // The convolution's own output never exists on cpu: RELU ran inside its kernel.
    assert_eq!(mine.ops[0].outputs[0].state, TensorState::Fused);
    assert_eq!(mine.ops[1].runs_on, OpRun::Fused { into: 0 });
    let cmp = compare(&mine, &reference.tensors, &Tolerance { float: 1e-5, ..Tolerance::default() });
    assert_eq!(cmp.first_divergence, None, "{:?}", cmp.ops.iter().map(|o| o.worst().map(|d| d.relative)).collect::<Vec<_>>());
    // RELU, MUL, TANH, ADD, LOGISTIC: five outputs compared, the convolution's skipped.
    assert_eq!(cmp.compared, 5);
    assert!(cmp.ops[0].diffs.is_empty());
    assert_eq!(cmp.ops[1].diffs[0].elements, 144);
}
