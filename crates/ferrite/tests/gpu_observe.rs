//! Seeing inside a GPU segment: with callbacks, tracing or a profile, a segment runs
//! its ops one at a time and each is reported as a step of its own; callbacks see
//! copies of its tensors read back from the device (the values the CPU computes),
//! and a stop inside the segment ends the run. A plain run still submits the segment
//! at once, with the same outputs.
//!
//! Without an adapter these tests skip, except under `CI=true` (see tests/gpu.rs).

#![cfg(feature = "gpu")]

use std::sync::Arc;

use ferrite::model::{BuiltinOp, Model};
use ferrite::{Flow, OpRun, RunOutcome, Session, SessionOptions, TensorState};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, ModelSpec, OpCode, Options, Padding, TensorSpec};
use serde_json::Value;

fn have_gpu() -> bool {
    match ferrite::gpu::available() {
        Ok(_) => true,
        Err(e) => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but the GPU backend has no adapter: {e}");
            eprintln!("skipping the GPU observation tests: {e}");
            false
        }
    }
}

fn float(name: &str, shape: &[i32]) -> TensorSpec {
    TensorSpec::activation(name, TensorType::FLOAT32, shape)
}

/// CONV_2D (RELU6) -> DEPTHWISE_CONV_2D -> LOGISTIC -> ADD(x) -> MEAN: one GPU segment.
fn chain_model() -> Arc<Model> {
    let mut m = ModelSpec::default();
    let (h, w, c) = (9, 7, 5);
    let x = m.add_tensor(float("x", &[1, h, w, c]));
    let wv: Vec<f32> = (0..c * 9 * c).map(|i| ((i * 7 % 13) as f32 - 6.0) / 13.0).collect();
    let wt = m.add_tensor(TensorSpec::const_f32("w", &[c, 3, 3, c], &wv));
    let bv: Vec<f32> = (0..c).map(|i| i as f32 / 10.0).collect();
    let b = m.add_tensor(TensorSpec::const_f32("b", &[c], &bv));
    let a = m.add_tensor(float("a", &[1, h, w, c]));
    let conv = Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::RELU6 };
    m.add_op(OpCode::Builtin(BuiltinOp::CONV_2D.operator()), &[x, wt, b], &[a], conv);
    let dv: Vec<f32> = (0..9 * c).map(|i| ((i * 5 % 11) as f32 - 5.0) / 11.0).collect();
    let dw = m.add_tensor(TensorSpec::const_f32("dw", &[1, 3, 3, c], &dv));
    let d = m.add_tensor(float("d", &[1, h, w, c]));
    let depthwise = Options::DepthwiseConv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), depth_multiplier: 1, activation: Activation::NONE };
    m.add_op(OpCode::Builtin(BuiltinOp::DEPTHWISE_CONV_2D.operator()), &[a, dw, -1], &[d], depthwise);
    let s = m.add_tensor(float("s", &[1, h, w, c]));
    m.add_op(OpCode::Builtin(BuiltinOp::LOGISTIC.operator()), &[d], &[s], Options::None);
    let e = m.add_tensor(float("e", &[1, h, w, c]));
    m.add_op(OpCode::Builtin(BuiltinOp::ADD.operator()), &[s, x], &[e], Options::Binary { activation: Activation::NONE });
    let axes = m.add_tensor(TensorSpec::const_i32("axes", &[2], &[1, 2]));
    let y = m.add_tensor(float("y", &[1, c]));
    m.add_op(OpCode::Builtin(BuiltinOp::MEAN.operator()), &[e, axes], &[y], Options::Reducer { keep_dims: false });
    (m.inputs, m.outputs) = (vec![x], vec![y]);
    Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap())
}

fn session(model: &Arc<Model>, backends: &[&str], trace: bool) -> Session {
    let options = SessionOptions { backends: backends.iter().map(|b| b.to_string()).collect(), trace, ..SessionOptions::default() };
    let mut s = Session::with_options(model.clone(), options).unwrap();
    s.prepare().unwrap();
    let n = 9 * 7 * 5;
    let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
    s.set_input_f32(0, &x).unwrap();
    s
}

/// (op index, runs on, input views, output views) of each `after` callback.
type Seen = (usize, OpRun, Vec<(usize, TensorState, Option<Vec<f32>>)>, Vec<(usize, TensorState, Option<Vec<f32>>)>);

fn observe(s: &mut Session, stop_before: Option<usize>) -> (Vec<usize>, Vec<Seen>, RunOutcome) {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let views = |v: &[ferrite::TensorView<'_>]| v.iter().map(|t| (t.tensor, t.state, t.to_f32())).collect::<Vec<_>>();
    let outcome = s
        .run_with_callbacks(
            |ev| {
                before.push(ev.index);
                assert!(ev.outputs.iter().all(|t| t.state == TensorState::Pending), "{ev:?}");
                if Some(ev.index) == stop_before {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            },
            |ev| {
                after.push((ev.index, ev.runs_on, views(ev.inputs), views(ev.outputs)));
                Flow::Continue
            },
        )
        .unwrap();
    (before, after, outcome)
}

fn close(a: &[f32], b: &[f32]) -> bool {
    let scale = b.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * scale)
}

#[test]
fn callbacks_see_each_op_of_a_gpu_segment_with_its_tensors() {
    if !have_gpu() {
        return;
    }
    let model = chain_model();
    let mut gpu = session(&model, &["gpu", "cpu"], false);
    assert_eq!((gpu.gpu_plan().segments, gpu.gpu_plan().ops), (1, 5));
    gpu.run().unwrap();
    let plain = gpu.output(0).unwrap().bytes.to_vec();

    let (before, after, outcome) = observe(&mut gpu, None);
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(before, [0, 1, 2, 3, 4]);
    assert_eq!(after.iter().map(|e| e.0).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    assert!(after.iter().all(|e| e.1 == OpRun::Backend("gpu")), "{after:?}");
    // Observation changes nothing: the same output bytes as the plain run.
    assert_eq!(gpu.output(0).unwrap().bytes, &plain[..]);

    // Every tensor as the CPU computes it, op by op.
    let mut cpu = session(&model, &["cpu"], false);
    let (_, cpu_after, _) = observe(&mut cpu, None);
    for (g, c) in after.iter().zip(&cpu_after) {
        for (gv, cv) in g.2.iter().chain(&g.3).zip(c.2.iter().chain(&c.3)) {
            assert_eq!((gv.0, gv.1), (cv.0, cv.1), "op {}", g.0);
            // Constants a backend packed and released have no data on that side.
            let (Some(gd), Some(cd)) = (&gv.2, &cv.2) else { continue };
            assert!(close(gd, cd), "op {} tensor {}: GPU view {gd:?} vs CPU {cd:?}", g.0, gv.0);
        }
    }
    // What the GPU computed is always shown: each op's first input and its output.
    assert!(after.iter().all(|e| e.2[0].2.is_some() && e.3.iter().all(|o| o.1 == TensorState::Ready && o.2.is_some())), "{after:?}");
    // An op's input is what the op before it wrote; the last output is the model's.
    for pair in after.windows(2) {
        assert_eq!(pair[1].2[0].2, pair[0].3[0].2, "op {} reads op {}'s output", pair[1].0, pair[0].0);
    }
    let y = after[4].3[0].2.clone().unwrap();
    assert_eq!(y, gpu.output(0).unwrap().to_f32().unwrap());

    // A stop inside the segment ends the run there.
    let (before, after, outcome) = observe(&mut gpu, Some(2));
    assert_eq!(outcome, RunOutcome::Stopped { subgraph: 0, op: 2 });
    assert_eq!(before, [0, 1, 2]);
    assert_eq!(after.iter().map(|e| e.0).collect::<Vec<_>>(), [0, 1]);
    assert!(gpu.output(0).is_err());
    gpu.run().unwrap();
    assert_eq!(gpu.output(0).unwrap().bytes, &plain[..]);
}

#[test]
fn a_traced_gpu_segment_has_one_slice_per_op() {
    if !have_gpu() {
        return;
    }
    let model = chain_model();
    let mut s = session(&model, &["gpu", "cpu"], true);
    let runs = 2;
    for _ in 0..runs {
        s.run().unwrap();
    }
    let mut buf = Vec::new();
    s.write_trace_to(&mut buf).unwrap();
    let trace: Value = serde_json::from_slice(&buf).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    for run in 0..runs {
        let ops: Vec<(u64, &str, &str)> = events
            .iter()
            .filter(|e| e["cat"] == "op" && e["args"]["run"] == run)
            .map(|e| (e["args"]["op_index"].as_u64().unwrap(), e["name"].as_str().unwrap(), e["args"]["backend"].as_str().unwrap()))
            .collect();
        let want = [(0, "CONV_2D"), (1, "DEPTHWISE_CONV_2D"), (2, "LOGISTIC"), (3, "ADD"), (4, "MEAN")];
        assert_eq!(ops.iter().map(|o| (o.0, o.1)).collect::<Vec<_>>(), want, "run {run}");
        assert!(ops.iter().all(|o| o.2 == "gpu"), "{ops:?}");
    }
    // And the traced runs computed what an untraced session does.
    let mut plain = session(&model, &["gpu", "cpu"], false);
    plain.run().unwrap();
    assert_eq!(plain.output(0).unwrap().bytes, s.output(0).unwrap().bytes);
}
