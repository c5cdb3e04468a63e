//! Sessions of one loaded model share its prepared constants.
//!
//! - A second session of a model prepares without a second copy of the packed
//!   weights and converted (fp16) constants: its heap grows by its arena and
//!   kernels' scratch, not by the weights.
//! - Sessions sharing weights give the same bits as sessions of separate loads,
//!   alone and running concurrently on several threads.
//! - Any drop order works (sessions before or after the model's last handle), and
//!   the shared constants are freed with the last session even while the model
//!   stays loaded.

use std::path::PathBuf;
use std::sync::Arc;

use ferrite::{Model, Session, SessionOptions};
use ferrite_format::writer::{Activation, BuiltinOperator as W, ModelSpec, OpCode, Options, Padding, TensorSpec, TensorType};

#[path = "support/live_heap.rs"]
mod live_heap;
use live_heap::{live, SERIAL};

/// float32 weights of a 3x3 convolution with 64 in and out channels: 147 KB.
const C: usize = 64;

/// x [1,8,8,C] -> CONV_2D 3x3 (fp16 weights through DEQUANTIZE, float bias)
/// -> FULLY_CONNECTED [32, 8*8*C] (float32 weights) -> y [1,32]; the convolution's
/// output is a second model output.
fn model_bytes() -> Vec<u8> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 8, 8, C as i32]));
    let w16: Vec<u8> = (0..C * 9 * C).flat_map(|i| half::f16::from_f32(((i * 37) % 101) as f32 / 101.0 - 0.5).to_le_bytes()).collect();
    let w16 = m.add_tensor(TensorSpec { data: Some(w16), ..TensorSpec::activation("w16", TensorType::FLOAT16, &[C as i32, 3, 3, C as i32]) });
    let w = m.add_tensor(TensorSpec::activation("w", TensorType::FLOAT32, &[C as i32, 3, 3, C as i32]));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[C as i32], &(0..C).map(|i| i as f32 / 64.0).collect::<Vec<_>>()));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &[1, 8, 8, C as i32]));
    let fc_in = 8 * 8 * C;
    let fw: Vec<f32> = (0..32 * fc_in).map(|i| ((i * 13) % 97) as f32 / 970.0 - 0.05).collect();
    let fw = m.add_tensor(TensorSpec::const_f32("fw", &[32, fc_in as i32], &fw));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 32]));
    m.add_op(OpCode::Builtin(W::DEQUANTIZE), &[w16], &[w], Options::None);
    let conv = Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::RELU };
    m.add_op(OpCode::Builtin(W::CONV_2D), &[x, w, b], &[h], conv);
    let fc = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(W::FULLY_CONNECTED), &[h, fw, -1], &[y], fc);
    m.inputs = vec![x];
    m.outputs = vec![y, h];
    m.to_bytes().unwrap()
}

fn load(bytes: &[u8]) -> Arc<Model> {
    Arc::new(Model::from_bytes(Arc::new(bytes.to_vec())).unwrap())
}

fn session(model: &Arc<Model>, threads: usize) -> Session {
    let mut s = Session::with_options(model.clone(), SessionOptions { threads, ..Default::default() }).unwrap();
    s.prepare().unwrap();
    s
}

/// Runs `s` on input `seed` and returns every output's bytes.
fn run(s: &mut Session, seed: usize) -> Vec<Vec<u8>> {
    for (k, d) in s.inputs().iter().enumerate() {
        let n: usize = d.shape.iter().product();
        let bytes: Vec<u8> = if d.dtype == ferrite::DType::F32 {
            (0..n).flat_map(|i| (((i * 7919 + seed * 31) % 1000) as f32 / 500.0 - 1.0).to_le_bytes()).collect()
        } else {
            // Integer inputs: small values, as bytes of every element.
            (0..n * d.dtype.size().unwrap_or(1)).map(|i| ((i * 7919 + seed * 31) % 17) as u8).collect()
        };
        s.set_input(k, &bytes).unwrap();
    }
    s.run().unwrap();
    (0..s.outputs().len()).map(|k| s.output(k).unwrap().bytes.to_vec()).collect()
}

#[test]
fn a_second_session_adds_no_copy_of_the_weights() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = model_bytes();
    // Prepared constants: the conv weights converted to float32 and packed, the FC
    // weights packed: at least the float32 weights' size.
    let weights = (C * 9 * C + 32 * 8 * 8 * C) as isize * 4;
    let model = load(&bytes);
    assert_eq!(model.shared_constant_count(), 0);
    let before = live();
    let mut first = session(&model, 1);
    let first_growth = live() - before;
    assert!(first_growth > weights, "the first session packs the weights: {first_growth} B against {weights} B of weights");
    let shared = model.shared_constant_count();
    assert!(shared >= 2, "the packed conv and FC weights are in the model's cache ({shared})");
    let before = live();
    let mut second = session(&model, 1);
    let second_growth = live() - before;
    assert!(
        second_growth < first_growth - weights * 9 / 10,
        "a second session of the same model grew by {second_growth} B, the first by {first_growth} B ({weights} B of weights)"
    );
    assert_eq!(model.shared_constant_count(), shared, "the second session found every constant in the cache");
    // A separately loaded model shares nothing with this one.
    let other = load(&bytes);
    let before = live();
    let mut separate = session(&other, 1);
    assert!(live() - before > weights, "a separate load packs its own weights");
    for seed in 0..3 {
        let want = run(&mut separate, seed);
        assert_eq!(run(&mut first, seed), want);
        assert_eq!(run(&mut second, seed), want);
    }
}

#[test]
fn shared_constants_are_freed_with_the_last_session_in_any_drop_order() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = model_bytes();
    let want = run(&mut session(&load(&bytes), 1), 7);
    // Model kept, sessions dropped first then last: the cache empties with the last
    // session, the memory comes back, and a new session prepares from scratch.
    let model = load(&bytes);
    let base = live();
    let (a, mut b) = (session(&model, 1), session(&model, 2));
    assert!(model.shared_constant_count() > 0);
    drop(a);
    assert!(model.shared_constant_count() > 0, "the other session still holds them");
    assert_eq!(run(&mut b, 7), want);
    drop(b);
    assert_eq!(model.shared_constant_count(), 0, "freed with the last session");
    assert!(live() - base < 4096, "{} B still held after the last session", live() - base);
    let mut c = session(&model, 1);
    assert_eq!(run(&mut c, 7), want);
    drop(c);
    // The model's handle dropped before its sessions: they keep it (and the shared
    // constants) alive and run on.
    let model = load(&bytes);
    let (mut a, mut b) = (session(&model, 1), session(&model, 1));
    drop(model);
    assert_eq!(run(&mut a, 7), want);
    drop(a);
    assert_eq!(run(&mut b, 7), want);
    let m = b.model().clone();
    drop(b);
    assert_eq!(m.shared_constant_count(), 0);
}

#[test]
fn sessions_sharing_weights_run_concurrently_bit_identical_to_separate_ones() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = model_bytes();
    let mut reference = session(&load(&bytes), 1);
    let want: Vec<Vec<Vec<u8>>> = (0..8).map(|seed| run(&mut reference, seed)).collect();
    let model = load(&bytes);
    // Sessions are created and prepared on their own threads at the same time (the
    // cache's per-constant lock makes all but one wait for the packing), then run.
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (model, want) = (model.clone(), &want);
                scope.spawn(move || {
                    let mut s = session(&model, 1 + t % 2);
                    for round in 0..5 {
                        for (seed, w) in want.iter().enumerate() {
                            assert_eq!(&run(&mut s, seed), w, "thread {t} round {round} input {seed}");
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    assert_eq!(model.shared_constant_count(), 0);
}

fn corpus() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite"))];
    if let Ok(dir) = std::env::var("FERRITE_CORPUS") {
        let mut stack = vec![PathBuf::from(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "tflite") {
                    v.push(p);
                }
            }
        }
    }
    v.sort();
    v
}

/// Every corpus model: two sessions of one mapped load (the second on two threads)
/// give the bits of a session of a separate load, and release the model's pages and
/// cache without harm to each other.
#[test]
fn corpus_models_give_the_same_bits_shared_and_separate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut checked = 0;
    for p in corpus() {
        let melspec = p.file_name().is_some_and(|n| n == "melspectrogram.tflite");
        let prepare = |model: &Arc<Model>, threads: usize| -> Option<Session> {
            let mut s = Session::with_options(model.clone(), SessionOptions { threads, ..Default::default() }).ok()?;
            if melspec {
                s.resize_input(0, &[1, 16000]).ok()?;
            }
            s.prepare().ok()?;
            Some(s)
        };
        let Some(mut separate) = prepare(&Arc::new(Model::from_file(&p).unwrap()), 1) else { continue };
        let model = Arc::new(Model::from_file(&p).unwrap());
        let (mut a, mut b) = (prepare(&model, 1).unwrap(), prepare(&model, 2).unwrap());
        for seed in 0..2 {
            let want = run(&mut separate, seed);
            assert_eq!(run(&mut a, seed), want, "{}", p.display());
            assert_eq!(run(&mut b, seed), want, "{}", p.display());
        }
        drop(a);
        assert_eq!(run(&mut b, 5), run(&mut separate, 5), "{}", p.display());
        checked += 1;
    }
    assert!(checked >= 1);
}

/// A first layer (3 input channels, 3x3 stride 2): its weights are prepared once
/// for both sessions (by the direct first-layer kernel where AVX-512 runs, else by
/// the GEMM), and both sessions give a separate load's bits.
#[test]
fn a_first_layer_convolution_is_packed_once_for_both_sessions() {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 33, 33, 3]));
    let w: Vec<f32> = (0..24 * 9 * 3).map(|i| ((i * 29) % 83) as f32 / 83.0 - 0.5).collect();
    let w = m.add_tensor(TensorSpec::const_f32("w", &[24, 3, 3, 3], &w));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[24], &(0..24).map(|i| i as f32 / 24.0).collect::<Vec<_>>()));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 16, 16, 24]));
    let conv = Options::Conv2D { padding: Padding::VALID, stride: (2, 2), dilation: (1, 1), activation: Activation::RELU6 };
    m.add_op(OpCode::Builtin(W::CONV_2D), &[x, w, b], &[y], conv);
    m.inputs = vec![x];
    m.outputs = vec![y];
    let bytes = m.to_bytes().unwrap();
    let model = load(&bytes);
    let mut first = session(&model, 1);
    let shared = model.shared_constant_count();
    assert!(shared >= 1, "the packed weights are in the model's cache");
    let mut second = session(&model, 2);
    assert_eq!(model.shared_constant_count(), shared, "the second session found them there");
    let mut separate = session(&load(&bytes), 1);
    for seed in 0..3 {
        let want = run(&mut separate, seed);
        assert_eq!(run(&mut first, seed), want);
        assert_eq!(run(&mut second, seed), want);
    }
}
