//! The GPU backend (wgpu) against the CPU.
//!
//! Without an adapter these tests skip with an install hint, except under
//! `CI=true`, where a missing adapter fails: a GPU suite that silently skips must
//! not pass CI. scripts/test.sh installs Mesa's lavapipe and pins its ICD.
//!
//! - single ops: a map larger than one dispatch grid (65,535 workgroups of 64),
//!   LOGISTIC/TANH at ±80, a CONCATENATION of more inputs than a shader stage may
//!   bind, a chain that stays on the GPU between ops (one segment);
//! - fp16 precision (opt-in, adapters with SHADER_F16): single ops within 2e-3 of
//!   the reference backend;
//! - real models (with FERRITE_CORPUS): within 1e-4 of the CPU in the measure of
//!   [`model_err`] (RMS error relative to the output's scale; no element beyond
//!   1e-3 of it), every output of all five models, with a checked-in expectation of
//!   which ops run where (`tests/gpu_assignment.txt`), and with every third op
//!   forced to the CPU (the two smaller models);
//! - sessions on several threads sharing the device, and 200 create/run/drop
//!   cycles without growth of the process's memory or of the GPU memory wgpu
//!   counts.

#![cfg(feature = "gpu")]

use std::sync::Arc;

use ferrite::model::{BuiltinOp, Model};
use ferrite::{parse_op_backends, OpRun, Session, SessionOptions};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, ModelSpec, OpCode, Options, TensorSpec};

/// The tests run one at a time: the memory test reads the process's RSS, which
/// another test's models would move.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// True when an adapter exists; under CI=true its absence is a failure.
fn have_gpu() -> bool {
    match ferrite::gpu::available() {
        Ok(_) => true,
        Err(e) => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but the GPU backend has no adapter: {e}");
            eprintln!("skipping the GPU tests: {e}");
            false
        }
    }
}

fn options(backends: &[&str], overrides: &str) -> SessionOptions {
    SessionOptions {
        backends: backends.iter().map(|b| b.to_string()).collect(),
        op_backends: parse_op_backends(overrides).unwrap(),
        ..SessionOptions::default()
    }
}

/// Runs `bytes` on `backends` with deterministic inputs; the outputs and where each op ran.
fn run(model: &Arc<Model>, backends: &[&str], overrides: &str, inputs: &[Vec<f32>]) -> (Vec<Vec<f32>>, Vec<OpRun>) {
    run_with(model, options(backends, overrides), inputs)
}

/// [`run`] with the given options.
fn run_with(model: &Arc<Model>, options: SessionOptions, inputs: &[Vec<f32>]) -> (Vec<Vec<f32>>, Vec<OpRun>) {
    let mut s = Session::with_options(model.clone(), options).unwrap();
    s.prepare().unwrap();
    for (k, d) in s.inputs().iter().enumerate() {
        let n: usize = d.shape.iter().product();
        let x: Vec<f32> = match inputs.get(k) {
            Some(v) => v.clone(),
            None => (0..n).map(|i| (((i * 37 + k * 11) % 101) as f32 / 50.0) - 1.0).collect(),
        };
        s.set_input_f32(k, &x).unwrap();
    }
    s.run().unwrap();
    let outs = (0..s.outputs().len()).map(|k| s.output(k).unwrap().to_f32().unwrap()).collect();
    let ran = s.op_assignments().unwrap().into_iter().filter(|a| a.0 == 0).map(|a| a.2).collect();
    (outs, ran)
}

/// The error of `a` against `b`, per output tensor: max|a - b| / max(1, max|b|),
/// the conformance suite's measure. It is relative to the output's scale (its
/// largest magnitude), so a landmark output in pixels (up to ~1300 in
/// pose_landmark_full) and a probability output are held to the same 1e-4; the
/// floor of 1 keeps outputs near zero from turning rounding noise into a large
/// relative error.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() }).fold(0.0, f32::max) / scale
}

fn float(name: &str, shape: &[i32]) -> TensorSpec {
    TensorSpec::activation(name, TensorType::FLOAT32, shape)
}

/// x -> op -> y, one float input of `shape`.
fn unary_model(op: BuiltinOp, shape: &[i32]) -> Arc<Model> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(float("x", shape));
    let y = m.add_tensor(float("y", shape));
    m.add_op(OpCode::Builtin(op.operator()), &[x], &[y], Options::None);
    (m.inputs, m.outputs) = (vec![x], vec![y]);
    Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap())
}

#[test]
fn a_map_larger_than_one_dispatch_grid_and_saturating_activations() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !have_gpu() {
        return;
    }
    // 65,535 workgroups of 64 cover 4,194,240 elements: this map needs the folded grid.
    let n = 65_535 * 64 + 1000;
    let model = unary_model(BuiltinOp::HARD_SWISH, &[1, n as i32]);
    let x: Vec<f32> = (0..n).map(|i| ((i % 1999) as f32 - 999.0) / 100.0).collect();
    let (gpu, ran) = run(&model, &["gpu"], "", std::slice::from_ref(&x));
    assert_eq!(ran, [OpRun::Backend("gpu")]);
    let (cpu, _) = run(&model, &["cpu"], "", &[x]);
    let e = rel_err(&gpu[0], &cpu[0]);
    assert!(e <= 1e-5, "HARD_SWISH over {n} elements: {e}");
    // The last elements were written (a grid that stopped at the limit would leave them).
    assert_eq!(gpu[0][n - 1], cpu[0][n - 1]);

    for op in [BuiltinOp::LOGISTIC, BuiltinOp::TANH] {
        let model = unary_model(op, &[1, 9]);
        let x = vec![-80.0, -20.0, -1.5, -1e-4, 0.0, 1e-4, 1.5, 20.0, 80.0];
        let (gpu, _) = run(&model, &["gpu"], "", std::slice::from_ref(&x));
        let (reference, _) = run(&model, &["reference"], "", &[x]);
        assert!(gpu[0].iter().all(|v| v.is_finite()), "{op:?}: {:?}", gpu[0]);
        let e = rel_err(&gpu[0], &reference[0]);
        assert!(e <= 1e-5, "{op:?} at ±80: {e} ({:?} vs {:?})", gpu[0], reference[0]);
    }
}

/// The adapter's rounding of multiply-adds, on values where one and two roundings
/// differ (the probe errs on any third result), and the convolutions' `mad` against
/// the host's fused multiply-add. The CPU's convolutions (FMA GEMM) round each
/// product-sum once; lavapipe (Mesa 22.3) lowers WGSL `fma` to a multiply and an
/// add, each rounded, so there the shaders emulate one rounding: it must agree with
/// `f32::mul_add` far more often than two roundings do (never more than an ulp
/// apart), including sums that cancel.
#[test]
fn the_convolutions_multiply_add_rounds_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !have_gpu() {
        return;
    }
    let (fused, contracted) = ferrite::gpu::fma_rounding().unwrap();
    let name = ferrite::gpu::available().unwrap().name;
    let emulated = ferrite::gpu::emulates_fma().unwrap();
    println!("{name}: fma() rounds {}, a * b + c {}; emulated: {emulated}", if fused { "once" } else { "twice" }, if contracted { "once" } else { "twice" });
    assert_eq!(emulated, !fused);
    // Products and addends of activations and weights, a third of them cancelling.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let triples: Vec<[f32; 3]> = (0..30_000)
        .map(|i| {
            let (a, b) = (next() * 8.0, next() * 0.5);
            let c = if i % 3 == 0 { -(a * b) * (1.0 + next() * 1e-3) } else { next() * 4.0 };
            [a, b, c]
        })
        .collect();
    let got = ferrite::gpu::multiply_add(&triples).unwrap();
    let ulps = |x: f32, y: f32| (x.to_bits() as i64 - y.to_bits() as i64).unsigned_abs();
    let (mut differ, mut worst) = (0usize, 0u64);
    for (t, g) in triples.iter().zip(&got) {
        let want = t[0].mul_add(t[1], t[2]);
        if *g != want {
            differ += 1;
            worst = worst.max(ulps(*g, want));
        }
    }
    let plain = triples.iter().filter(|t| t[0] * t[1] + t[2] != t[0].mul_add(t[1], t[2])).count();
    println!("mad vs f32::mul_add: {differ} of {} differ (at most {worst} ulp); two roundings would differ on {plain}", triples.len());
    // Fused: exact. Emulated (lavapipe): 1,723 of 30,000 escape as two roundings
    // (measured), against 14,060 for plain two roundings.
    let allowed = if emulated { plain / 5 } else { 0 };
    assert!(worst <= 1 && differ <= allowed, "mad: {differ} of {} differ from one rounding (allowed {allowed}), up to {worst} ulp", triples.len());
}

#[test]
fn concatenation_of_more_inputs_than_a_stage_binds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !have_gpu() {
        return;
    }
    let limit = ferrite::gpu::available().unwrap().max_storage_buffers_per_stage as usize;
    // More inputs than the per-stage limit (lavapipe's is large: cap the model's size).
    let k = (limit + 1).clamp(40, 200);
    let mut m = ModelSpec::default();
    let ins: Vec<i32> = (0..k).map(|i| m.add_tensor(float(&format!("x{i}"), &[2, 1, 3]))).collect();
    let y = m.add_tensor(float("y", &[2, k as i32, 3]));
    m.add_op(OpCode::Builtin(BuiltinOp::CONCATENATION.operator()), &ins, &[y], Options::Concatenation { axis: 1, activation: Activation::NONE });
    (m.inputs, m.outputs) = (ins, vec![y]);
    let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
    let (gpu, ran) = run(&model, &["gpu"], "", &[]);
    assert_eq!(ran, [OpRun::Backend("gpu")]);
    let (cpu, _) = run(&model, &["cpu"], "", &[]);
    assert_eq!(gpu[0], cpu[0], "{k} inputs (the stage binds {limit})");
}

/// x -> CONV_2D 3x3 (SAME, RELU6) -> DEPTHWISE 3x3 -> ADD(x) -> MEAN -> y, plus
/// a LOGISTIC the CPU runs when pinned.
fn chain_model() -> Arc<Model> {
    let mut m = ModelSpec::default();
    let (h, w, c) = (9, 7, 5);
    let x = m.add_tensor(float("x", &[1, h, w, c]));
    let wv: Vec<f32> = (0..c * 9 * c).map(|i| ((i * 7 % 13) as f32 - 6.0) / 13.0).collect();
    let wt = m.add_tensor(TensorSpec::const_f32("w", &[c, 3, 3, c], &wv));
    let bv: Vec<f32> = (0..c).map(|i| i as f32 / 10.0).collect();
    let b = m.add_tensor(TensorSpec::const_f32("b", &[c], &bv));
    let a = m.add_tensor(float("a", &[1, h, w, c]));
    m.add_op(
        OpCode::Builtin(BuiltinOp::CONV_2D.operator()),
        &[x, wt, b],
        &[a],
        Options::Conv2D { padding: ferrite_format::writer::Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::RELU6 },
    );
    let dv: Vec<f32> = (0..9 * c).map(|i| ((i * 5 % 11) as f32 - 5.0) / 11.0).collect();
    let dw = m.add_tensor(TensorSpec::const_f32("dw", &[1, 3, 3, c], &dv));
    let d = m.add_tensor(float("d", &[1, h, w, c]));
    m.add_op(
        OpCode::Builtin(BuiltinOp::DEPTHWISE_CONV_2D.operator()),
        &[a, dw, -1],
        &[d],
        Options::DepthwiseConv2D {
            padding: ferrite_format::writer::Padding::SAME,
            stride: (1, 1),
            dilation: (1, 1),
            depth_multiplier: 1,
            activation: Activation::NONE,
        },
    );
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

#[test]
fn consecutive_gpu_ops_run_as_one_segment_and_crossings_are_copies() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !have_gpu() {
        return;
    }
    let model = chain_model();
    let (cpu, _) = run(&model, &["cpu"], "", &[]);
    let mut s = Session::with_options(model.clone(), options(&["gpu", "cpu"], "")).unwrap();
    s.prepare().unwrap();
    let plan = s.gpu_plan();
    assert_eq!((plan.segments, plan.ops), (1, 5), "{plan:?}");
    assert!(plan.buffer_bytes >= plan.lower_bound_bytes && plan.lower_bound_bytes > 0, "{plan:?}");
    let (gpu, ran) = run(&model, &["gpu", "cpu"], "", &[]);
    assert!(ran.iter().all(|r| *r == OpRun::Backend("gpu")), "{ran:?}");
    assert!(rel_err(&gpu[0], &cpu[0]) <= 1e-5, "{gpu:?} vs {cpu:?}");

    // LOGISTIC pinned to the CPU splits the run into two segments, with a
    // readback before it and an upload after.
    let mut s = Session::with_options(model.clone(), options(&["gpu", "cpu"], "LOGISTIC=cpu")).unwrap();
    s.prepare().unwrap();
    assert_eq!(s.gpu_plan().segments, 2);
    let crossings = s.backend_crossings().unwrap();
    let kinds: Vec<&str> = crossings.iter().map(|c| c.transfer).collect();
    assert_eq!(kinds, ["copy (GPU readback)", "copy (GPU upload)"], "{crossings:?}");
    let (split, _) = run(&model, &["gpu", "cpu"], "LOGISTIC=cpu", &[]);
    assert!(rel_err(&split[0], &cpu[0]) <= 1e-5);
}

/// x[1, 17] x FC weights [9, 17] + bias -> y[1, 9] (one GEMM, K not a tile multiple).
fn fc_model() -> Arc<Model> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(float("x", &[1, 17]));
    let wv: Vec<f32> = (0..9 * 17).map(|i| ((i * 13 % 29) as f32 - 14.0) / 29.0).collect();
    let w = m.add_tensor(TensorSpec::const_f32("w", &[9, 17], &wv));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[9], &[0.5, -0.25, 0.0, 1.0, -1.0, 0.125, 0.75, -0.5, 0.3]));
    let y = m.add_tensor(float("y", &[1, 9]));
    m.add_op(
        OpCode::Builtin(BuiltinOp::FULLY_CONNECTED.operator()),
        &[x, w, b],
        &[y],
        Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false },
    );
    (m.inputs, m.outputs) = (vec![x], vec![y]);
    Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap())
}

#[test]
fn fp16_precision_single_ops_within_2e_3_of_the_reference() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !have_gpu() {
        return;
    }
    let half = SessionOptions { gpu_precision: ferrite::GpuPrecision::Fp16, ..options(&["gpu", "cpu"], "") };
    if !ferrite::gpu::available().unwrap().shader_f16 {
        // The option then leaves every op to the CPU (with a warning): say so.
        let (_, ran) = run_with(&chain_model(), half, &[]);
        assert!(ran.iter().all(|r| *r != OpRun::Backend("gpu")), "{ran:?}");
        eprintln!("the adapter lacks SHADER_F16: fp16 kernels not tested");
        return;
    }
    let mut cases: Vec<(String, Arc<Model>, Vec<Vec<f32>>)> =
        vec![("CONV_2D/DEPTHWISE/LOGISTIC/ADD/MEAN chain".into(), chain_model(), vec![]), ("FULLY_CONNECTED".into(), fc_model(), vec![])];
    let x: Vec<f32> = (0..2 * 3 * 5 * 7).map(|i| ((i * 37 % 101) as f32 - 50.0) / 12.5).collect();
    for op in [BuiltinOp::HARD_SWISH, BuiltinOp::LOGISTIC, BuiltinOp::TANH, BuiltinOp::GELU, BuiltinOp::RELU6, BuiltinOp::EXP, BuiltinOp::ABS] {
        cases.push((format!("{op:?}"), unary_model(op, &[2, 3, 5, 7]), vec![x.clone()]));
    }
    for (what, model, inputs) in &cases {
        let (gpu, ran) = run_with(model, half.clone(), inputs);
        assert!(ran.iter().all(|r| *r == OpRun::Backend("gpu")), "{what}: {ran:?}");
        let (reference, _) = run(model, &["reference"], "", inputs);
        let (full, _) = run(model, &["gpu"], "", inputs);
        for k in 0..gpu.len() {
            let e = rel_err(&gpu[k], &reference[k]);
            let e32 = rel_err(&full[k], &reference[k]);
            println!("{what}: fp16 vs reference {e:.2e} (fp32 {e32:.2e})");
            assert!(e <= 2e-3, "{what} in fp16: {e}");
            // The fp32 kernels on the same case, for comparison.
            assert!(e32 <= 1e-5, "{what} in fp32: {e32}");
        }
    }
    // One fp16 and one fp32 session of one model side by side: their weights are
    // packed apart (a shared float32 buffer read as float16 would be garbage).
    let model = chain_model();
    let (a, _) = run_with(&model, half.clone(), &[]);
    let (b, _) = run(&model, &["gpu", "cpu"], "", &[]);
    let (c, _) = run_with(&model, half, &[]);
    assert_eq!(a, c);
    assert!(rel_err(&a[0], &b[0]) <= 2e-3 && a != b, "{a:?} vs {b:?}");
}

/// The measure of "within 1e-4 of the CPU" for a model's output tensor `a` against
/// the CPU's `b`: (RMS error, largest error), both relative to the output's scale
/// max(1, max|b|). The RMS is held to 1e-4 and the largest element to 1e-3. Why not
/// the largest element to 1e-4: a deep model has outputs whose few ill-conditioned
/// elements amplify fp32 rounding by 10^4 and more, so any two correct fp32
/// implementations summing in another order differ there: pose_landmark_full's
/// segmentation logits (scale ~1260) differ between the CPU and the reference
/// backend by 4.1e-4 at one cluster of pixels, while the RMS over the map is 6e-6.
/// The RMS catches a wrong kernel (a wrong edge or channel moves a whole row or
/// plane: far above 1e-4), and the 1e-3 bound a wrong single element.
fn model_err(a: &[f32], b: &[f32]) -> (f64, f64) {
    assert_eq!(a.len(), b.len());
    let scale = f64::from(b.iter().fold(1.0f32, |m, v| m.max(v.abs())));
    let d = |(x, y): (&f32, &f32)| if x == y { 0.0 } else { f64::from(*x) - f64::from(*y) };
    let sq: f64 = a.iter().zip(b).map(|p| d(p) * d(p)).sum();
    let max = a.iter().zip(b).map(|p| d(p).abs()).fold(0.0, f64::max);
    ((sq / a.len().max(1) as f64).sqrt() / scale, max / scale)
}

/// The corpus models of the GPU issue and where their ops are expected to run.
const MODELS: &[&str] = &[
    "mediapipe-0.10.14/mediapipe/modules/face_detection/face_detection_short_range.tflite",
    "mediapipe-0.10.14/mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
    "mediapipe-0.10.14/mediapipe/modules/palm_detection/palm_detection_lite.tflite",
    "mediapipe-0.10.14/mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
    "mediapipe-0.10.14/mediapipe/modules/pose_landmark/pose_landmark_full.tflite",
];

/// "model: gpu N/M; cpu: OP, OP" lines of the checked-in expectation.
fn expectation() -> Vec<(String, String)> {
    include_str!("gpu_assignment.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once(": ").map(|(m, r)| (m.to_string(), r.to_string())))
        .collect()
}

/// What `ran` says in the expectation's words: GPU ops / ops with a kernel, and
/// the ops (by type) that a kernel ran elsewhere.
fn describe(model: &Model, ran: &[OpRun]) -> String {
    let ops = &model.subgraphs()[0].ops;
    let with_kernel: Vec<usize> = (0..ran.len()).filter(|&i| matches!(ran[i], OpRun::Backend(_) | OpRun::Custom)).collect();
    let on_gpu = with_kernel.iter().filter(|&&i| ran[i] == OpRun::Backend("gpu")).count();
    let mut elsewhere: Vec<String> = with_kernel.iter().filter(|&&i| ran[i] != OpRun::Backend("gpu")).map(|&i| ops[i].code.name().to_string()).collect();
    elsewhere.sort();
    elsewhere.dedup();
    format!("gpu {on_gpu}/{}; elsewhere: {}", with_kernel.len(), if elsewhere.is_empty() { "-".to_string() } else { elsewhere.join(", ") })
}

#[test]
fn corpus_models_match_the_cpu_and_the_expected_assignment() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Ok(dir) = std::env::var("FERRITE_CORPUS") else {
        eprintln!("FERRITE_CORPUS not set: skipping the corpus models on the GPU");
        return;
    };
    if !have_gpu() {
        return;
    }
    let expected = expectation();
    let mut changed = Vec::new();
    for rel in MODELS {
        let path = std::path::Path::new(&dir).join(rel);
        let model = Arc::new(Model::from_file(&path).unwrap_or_else(|e| panic!("{rel}: {e}")));
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let (cpu, _) = run(&model, &["cpu"], "", &[]);
        let (gpu, ran) = run(&model, &["gpu", "cpu"], "", &[]);
        // 1e-4 of the CPU's results in the measure of `model_err`, every output.
        let (mut e, mut worst) = (0.0f64, 0.0f64);
        for (k, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
            let (rms, max) = model_err(g, c);
            println!("{name} output {k}: gpu vs cpu rms {rms:.2e}, max {max:.2e} (scale {:.3e})", c.iter().fold(1.0f32, |m, v| m.max(v.abs())));
            assert!(rms <= 1e-4 && max <= 1e-3, "{name} output {k}: GPU vs CPU rms {rms}, max {max}");
            (e, worst) = (e.max(rms), worst.max(max));
        }
        let got = describe(&model, &ran);
        println!("{name}: {got}; worst error vs cpu: rms {e:.2e}, max {worst:.2e}");
        let want = expected.iter().find(|(m, _)| *m == name).map(|(_, r)| r.as_str());
        if want != Some(got.as_str()) {
            changed.push(format!("{name}: {got}"));
        }
        // Every third op forced to the CPU: crossings in both directions, same
        // results (on the two smaller models: lavapipe on two cores is slow).
        if !(name.starts_with("face_detection") || name.starts_with("hand_landmark")) {
            continue;
        }
        let n = ran.len();
        let third: Vec<String> = (0..n).filter(|i| i % 3 == 2).map(|i| format!("{i}=cpu")).collect();
        let (alternating, _) = run(&model, &["gpu", "cpu"], &third.join(","), &[]);
        for (k, (c, g)) in cpu.iter().zip(&alternating).enumerate() {
            let (rms, max) = model_err(g, c);
            println!("{name} output {k}: every third op on the cpu, vs cpu rms {rms:.2e}, max {max:.2e}");
            assert!(rms <= 1e-4 && max <= 1e-3, "{name} output {k}: alternating GPU/CPU vs CPU rms {rms}, max {max}");
        }
    }
    // A regression that quietly moves ops to the CPU fails here (all models listed).
    assert!(changed.is_empty(), "the ops' assignment changed; if intended, tests/gpu_assignment.txt becomes:\n{}", changed.join("\n"));
}

/// How far the reference backend (naive kernels, convolutions summed in f64)
/// is from the CPU on the same five models, in [`model_err`]'s measure, and the GPU
/// from the reference: the yardstick for the GPU's distance from the CPU (two fp32
/// implementations whose convolutions round differently: lavapipe rounds `fma`
/// twice, the CPU's FMA GEMM once). Ignored by default (the naive kernels are
/// slow on pose_landmark_full); run with `--ignored` to measure.
#[test]
#[ignore]
fn reference_backend_distance_from_the_cpu_on_the_corpus_models() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Ok(dir) = std::env::var("FERRITE_CORPUS") else {
        eprintln!("FERRITE_CORPUS not set");
        return;
    };
    for rel in MODELS {
        let path = std::path::Path::new(&dir).join(rel);
        let model = Arc::new(Model::from_file(&path).unwrap_or_else(|e| panic!("{rel}: {e}")));
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let (cpu, _) = run(&model, &["cpu"], "", &[]);
        let (reference, _) = run(&model, &["reference", "cpu"], "", &[]);
        let gpu = if have_gpu() { Some(run(&model, &["gpu", "cpu"], "", &[]).0) } else { None };
        for (k, (c, r)) in cpu.iter().zip(&reference).enumerate() {
            let (rms, max) = model_err(r, c);
            print!("{name} output {k}: reference vs cpu rms {rms:.2e}, max {max:.2e}");
            if let Some(g) = &gpu {
                let (grms, gmax) = model_err(&g[k], r);
                print!("; gpu vs reference rms {grms:.2e}, max {gmax:.2e}");
            }
            println!();
            // Not the largest element: selfie_segmentation's reference results are
            // 2.7e-3 from the CPU's (and the GPU's) at a few pixels.
            assert!(rms <= 1e-4, "{name} output {k}: reference vs CPU rms {rms}, max {max}");
        }
    }
}

#[test]
fn sessions_on_several_threads_share_the_device() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !have_gpu() {
        return;
    }
    let model = chain_model();
    let (cpu, _) = run(&model, &["cpu"], "", &[]);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let model = model.clone();
            std::thread::spawn(move || (0..5).map(|_| run(&model, &["gpu", "cpu"], "", &[]).0).collect::<Vec<_>>())
        })
        .collect();
    for h in handles {
        for out in h.join().unwrap() {
            assert!(rel_err(&out[0], &cpu[0]) <= 1e-5);
        }
    }
}

/// Resident set size of this process, in KiB (Linux).
fn rss_kib() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn two_hundred_sessions_created_run_and_dropped_do_not_grow_memory() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !have_gpu() {
        return;
    }
    let model = chain_model();
    let cycle = || {
        let mut s = Session::with_options(model.clone(), options(&["gpu", "cpu"], "")).unwrap();
        s.prepare().unwrap();
        s.set_input_f32(0, &vec![0.25; 9 * 7 * 5]).unwrap();
        s.run().unwrap();
        assert_eq!(s.gpu_plan().segments, 1);
    };
    // Warm-up: the shared device, its pipelines and the allocators' pools.
    for _ in 0..50 {
        cycle();
    }
    let before = rss_kib();
    let gpu_before = ferrite::gpu::memory_in_use().unwrap();
    for _ in 0..200 {
        cycle();
    }
    // wgpu's own count of live buffers and their bytes: every session's weights,
    // parameters, planned buffers and staging buffer were released (the device's
    // cached pipelines and zero buffer were made in the warm-up). The counters
    // exist (non-zero) once a session has run.
    let gpu_after = ferrite::gpu::memory_in_use().unwrap();
    println!("GPU (buffers, buffer bytes, allocations) before {gpu_before:?}, after 200 cycles {gpu_after:?}");
    assert!(gpu_before.0 > 0 && gpu_before.1 > 0, "wgpu's memory counters read zero: {gpu_before:?}");
    assert_eq!((gpu_after.0, gpu_after.1), (gpu_before.0, gpu_before.1), "GPU buffers grew over 200 create/run/drop cycles");
    assert!(gpu_after.2 <= gpu_before.2 + 4, "GPU memory allocations grew: {gpu_before:?} -> {gpu_after:?}");

    if let (Some(a), Some(b)) = (before, rss_kib()) {
        // Each session uploads its weights and plans its buffers (~10 KiB here): a
        // leak of them over 200 cycles would show as megabytes.
        println!("RSS before {a} KiB, after 200 cycles {b} KiB");
        assert!(b <= a + 2048, "RSS grew from {a} to {b} KiB over 200 create/run/drop cycles");
    }
}
