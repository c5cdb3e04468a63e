//! Training: a small MLP trained by `Trainer` against the same training done by
//! hand in f64 (forward, MSE / cross-entropy, backward, SGD / Adam), checkpoints
//! that resume bit-identically, export, and the errors of bad setups.

use std::sync::Arc;

use ferrite::{Loss, LossReduction, Model, Optimizer, TrainConfig, Trainer};
use ferrite_format::writer::{Activation, BuiltinOperator as BO, ModelSpec, OpCode, Options, TensorSpec, TensorType};

fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

const IN: usize = 6;
const HID: usize = 5;
const OUT: usize = 3;

/// x[1, IN] -> FC(RELU) -> FC -> (SOFTMAX when `softmax`).
fn mlp(softmax: bool) -> (Vec<u8>, [Vec<f32>; 4]) {
    let (w1, b1, w2, b2) = (rand(HID * IN, 1), rand(HID, 2), rand(OUT * HID, 3), rand(OUT, 4));
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, IN as i32]));
    let tw1 = m.add_tensor(TensorSpec::const_f32("w1", &[HID as i32, IN as i32], &w1));
    let tb1 = m.add_tensor(TensorSpec::const_f32("b1", &[HID as i32], &b1));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &[1, HID as i32]));
    let tw2 = m.add_tensor(TensorSpec::const_f32("w2", &[OUT as i32, HID as i32], &w2));
    let tb2 = m.add_tensor(TensorSpec::const_f32("b2", &[OUT as i32], &b2));
    let z = m.add_tensor(TensorSpec::activation("z", TensorType::FLOAT32, &[1, OUT as i32]));
    let fc = |a| Options::FullyConnected { activation: a, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[x, tw1, tb1], &[h], fc(Activation::RELU));
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[h, tw2, tb2], &[z], fc(Activation::NONE));
    let mut out = z;
    if softmax {
        out = m.add_tensor(TensorSpec::activation("p", TensorType::FLOAT32, &[1, OUT as i32]));
        m.add_op(OpCode::Builtin(BO::SOFTMAX), &[z], &[out], Options::Softmax { beta: 1.0 });
    }
    m.inputs = vec![x];
    m.outputs = vec![out];
    (m.to_bytes().unwrap(), [w1, b1, w2, b2])
}

/// The same training in f64, by hand. Returns per-step losses and final weights.
fn reference(w: &[Vec<f32>; 4], xs: &[Vec<f32>], ys: &[Vec<f32>], batch: usize, loss: Loss, opt: Optimizer) -> (Vec<f64>, Vec<Vec<f64>>) {
    let mut p: Vec<Vec<f64>> = w.iter().map(|v| v.iter().map(|&a| f64::from(a)).collect()).collect();
    let mut m: Vec<Vec<f64>> = p.iter().map(|v| vec![0.0; v.len()]).collect();
    let mut v = m.clone();
    let mut losses = Vec::new();
    for (t, (x, y)) in xs.iter().zip(ys).enumerate() {
        let (mut g, mut total) = (p.iter().map(|v| vec![0.0; v.len()]).collect::<Vec<_>>(), 0.0);
        for b in 0..batch {
            let xb: Vec<f64> = x[b * IN..][..IN].iter().map(|&a| f64::from(a)).collect();
            let yb: Vec<f64> = y[b * OUT..][..OUT].iter().map(|&a| f64::from(a)).collect();
            let h: Vec<f64> = (0..HID).map(|j| ((0..IN).map(|i| xb[i] * p[0][j * IN + i]).sum::<f64>() + p[1][j]).max(0.0)).collect();
            let z: Vec<f64> = (0..OUT).map(|o| (0..HID).map(|j| h[j] * p[2][o * HID + j]).sum::<f64>() + p[3][o]).collect();
            let dz: Vec<f64> = match loss {
                Loss::MeanSquaredError => {
                    total += z.iter().zip(&yb).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / (batch * OUT) as f64;
                    z.iter().zip(&yb).map(|(a, b)| 2.0 * (a - b) / (batch * OUT) as f64).collect()
                }
                Loss::CategoricalCrossEntropy => {
                    let mx = z.iter().fold(f64::MIN, |a, &b| a.max(b));
                    let s: f64 = z.iter().map(|a| (a - mx).exp()).sum();
                    let pr: Vec<f64> = z.iter().map(|a| (a - mx).exp() / s).collect();
                    total -= yb.iter().zip(&pr).map(|(a, b)| a * b.ln()).sum::<f64>() / batch as f64;
                    pr.iter().zip(&yb).map(|(a, b)| (a - b) / batch as f64).collect()
                }
            };
            for o in 0..OUT {
                g[3][o] += dz[o];
                for j in 0..HID {
                    g[2][o * HID + j] += dz[o] * h[j];
                }
            }
            let dh: Vec<f64> = (0..HID).map(|j| if h[j] > 0.0 { (0..OUT).map(|o| dz[o] * p[2][o * HID + j]).sum() } else { 0.0 }).collect();
            for j in 0..HID {
                g[1][j] += dh[j];
                for i in 0..IN {
                    g[0][j * IN + i] += dh[j] * xb[i];
                }
            }
        }
        losses.push(total);
        for k in 0..4 {
            for i in 0..p[k].len() {
                match opt {
                    Optimizer::Sgd { learning_rate, .. } => p[k][i] -= f64::from(learning_rate) * g[k][i],
                    Optimizer::Adam { learning_rate, beta1, beta2, epsilon } => {
                        let (b1, b2) = (f64::from(beta1), f64::from(beta2));
                        m[k][i] += (g[k][i] - m[k][i]) * (1.0 - b1);
                        v[k][i] += (g[k][i] * g[k][i] - v[k][i]) * (1.0 - b2);
                        let n = (t + 1) as i32;
                        let alpha = f64::from(learning_rate) * (1.0 - b2.powi(n)).sqrt() / (1.0 - b1.powi(n));
                        p[k][i] -= alpha * m[k][i] / (v[k][i].sqrt() + f64::from(epsilon));
                    }
                }
            }
        }
    }
    (losses, p)
}

fn data(steps: usize, batch: usize, seed: u64) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let xs = (0..steps).map(|s| rand(batch * IN, seed + s as u64)).collect();
    let ys = (0..steps)
        .map(|s| {
            let r = rand(batch * OUT, seed + 100 + s as u64);
            // One-hot labels (they serve MSE as well).
            r.chunks(OUT).flat_map(|c| (0..OUT).map(move |i| if i == (c[0].abs() * 3.0) as usize % OUT { 1.0 } else { 0.0 })).collect()
        })
        .collect();
    (xs, ys)
}

fn check(loss: Loss, opt: Optimizer, threads: usize) {
    let (bytes, w) = mlp(loss == Loss::CategoricalCrossEntropy);
    let batch = 4;
    let model = Arc::new(Model::from_bytes(Arc::new(bytes)).unwrap());
    let cfg = TrainConfig { batch_size: batch, loss, optimizer: opt, threads, ..Default::default() };
    let mut t = Trainer::new(model, cfg).unwrap();
    assert_eq!(t.input_shape(0).unwrap(), &[batch, IN]);
    assert_eq!(t.trainable_tensors().len(), 4);
    let (xs, ys) = data(6, batch, 10);
    let (want_losses, want_w) = reference(&w, &xs, &ys, batch, loss, opt);
    for (i, (x, y)) in xs.iter().zip(&ys).enumerate() {
        let l = t.step(&[x], y).unwrap();
        assert!((f64::from(l) - want_losses[i]).abs() <= 1e-5 * (1.0 + want_losses[i].abs()), "step {i}: loss {l} vs {}", want_losses[i]);
    }
    for (k, want) in want_w.iter().enumerate() {
        for (a, b) in t.weights(k).unwrap().iter().zip(want) {
            assert!((f64::from(*a) - b).abs() <= 1e-5 * (1.0 + b.abs()), "weight {k}: {a} vs {b}");
        }
    }
    let mem = t.memory();
    assert!(mem.arena_bytes >= mem.arena_lower_bound_bytes && mem.arena_lower_bound_bytes > 0);
}

#[test]
fn mlp_mse_sgd_matches_the_hand_computed_training() {
    check(Loss::MeanSquaredError, Optimizer::sgd(0.1), 1);
}

#[test]
fn mlp_cce_adam_matches_the_hand_computed_training() {
    check(Loss::CategoricalCrossEntropy, Optimizer::adam(0.01), 1);
    check(Loss::CategoricalCrossEntropy, Optimizer::adam(0.01), 3);
}

#[test]
fn sum_reduction_scales_the_loss_by_the_batch() {
    let (bytes, _) = mlp(false);
    let model = Arc::new(Model::from_bytes(Arc::new(bytes)).unwrap());
    let (xs, ys) = data(1, 4, 3);
    let mut a = Trainer::new(model.clone(), TrainConfig { batch_size: 4, ..Default::default() }).unwrap();
    let mut b = Trainer::new(model, TrainConfig { batch_size: 4, reduction: LossReduction::Sum, ..Default::default() }).unwrap();
    let (la, lb) = (a.evaluate(&[&xs[0]], &ys[0]).unwrap().loss, b.evaluate(&[&xs[0]], &ys[0]).unwrap().loss);
    assert!((lb - 4.0 * la).abs() < 1e-5 * lb.abs().max(1.0));
}

#[test]
fn checkpoints_resume_bit_identically_and_export_keeps_frozen_weights() {
    let (bytes, w) = mlp(true);
    let model = Arc::new(Model::from_bytes(Arc::new(bytes.clone())).unwrap());
    let cfg = TrainConfig { batch_size: 4, loss: Loss::CategoricalCrossEntropy, optimizer: Optimizer::adam(0.01), ..Default::default() };
    let (xs, ys) = data(6, 4, 20);
    let dir = std::env::temp_dir().join(format!("ferrite-train-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ck = dir.join("ck.bin");
    let mut straight = Trainer::new(model.clone(), cfg.clone()).unwrap();
    let mut first = Trainer::new(model.clone(), cfg.clone()).unwrap();
    for i in 0..3 {
        straight.step(&[&xs[i]], &ys[i]).unwrap();
        first.step(&[&xs[i]], &ys[i]).unwrap();
    }
    first.save_checkpoint(&ck).unwrap();
    let mut resumed = Trainer::new(model.clone(), cfg.clone()).unwrap();
    resumed.load_checkpoint(&ck).unwrap();
    assert_eq!(resumed.step_count(), 3);
    for i in 3..6 {
        let a = straight.step(&[&xs[i]], &ys[i]).unwrap();
        let b = resumed.step(&[&xs[i]], &ys[i]).unwrap();
        assert_eq!(a.to_bits(), b.to_bits());
    }
    for k in 0..4 {
        assert!(straight.weights(k).unwrap().iter().zip(resumed.weights(k).unwrap()).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
    // A checkpoint of another setup is refused, and changes nothing.
    let mut sgd = Trainer::new(model.clone(), TrainConfig { optimizer: Optimizer::sgd(0.1), ..cfg.clone() }).unwrap();
    assert!(sgd.load_checkpoint(&ck).is_err());
    assert_eq!(sgd.step_count(), 0);

    // Only the last op (SOFTMAX, weightless) and the second FC train: the first FC
    // comes back bit-identical in the export, and the export runs with the trained weights.
    let mut head = Trainer::new(model, TrainConfig { num_trainable_ops: Some(2), ..cfg }).unwrap();
    assert_eq!(head.trainable_tensors().len(), 2);
    head.step(&[&xs[0]], &ys[0]).unwrap();
    let out = dir.join("head.tflite");
    head.export(&out).unwrap();
    let exported = Model::from_file(&out).unwrap();
    let g = &exported.subgraphs()[0];
    let read = |t: usize| -> Vec<f32> { bytemuck_f32(exported.const_data(&g.tensors[t]).unwrap()) };
    assert_eq!(read(1), w[0]);
    assert_eq!(read(2), w[1]);
    assert_eq!(read(4), head.weights(0).unwrap());
    assert_ne!(read(4), w[2]);
    assert_eq!(std::fs::read(&out).unwrap().len(), bytes.len());
    let mut s = ferrite::Session::from_file(&out).unwrap();
    s.prepare().unwrap();
    s.set_input_f32(0, &xs[0][..IN]).unwrap();
    s.run().unwrap();
    let after = s.output(0).unwrap().to_f32().unwrap();
    let mut probe = Trainer::new(Arc::new(exported), TrainConfig { batch_size: 4, loss: Loss::CategoricalCrossEntropy, ..Default::default() }).unwrap();
    probe.evaluate(&[&xs[0]], &ys[0]).unwrap();
    for (a, b) in after.iter().zip(probe.output()) {
        assert!((a - b).abs() < 1e-6);
    }
    let circle = dir.join("head.circle");
    head.export(&circle).unwrap();
    assert_eq!(&std::fs::read(&circle).unwrap()[4..8], b"CIR0");
    assert!(Model::from_file(&circle).is_ok());
    std::fs::remove_dir_all(&dir).ok();
}

fn bytemuck_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn bad_setups_are_refused_with_clear_errors() {
    let (bytes, _) = mlp(false);
    let model = Arc::new(Model::from_bytes(Arc::new(bytes)).unwrap());
    // Cross-entropy without a SOFTMAX output.
    let e = Trainer::new(model.clone(), TrainConfig { loss: Loss::CategoricalCrossEntropy, ..Default::default() }).unwrap_err();
    assert!(e.to_string().contains("SOFTMAX"), "{e}");
    // Wrong input sizes.
    let mut t = Trainer::new(model, TrainConfig { batch_size: 2, ..Default::default() }).unwrap();
    assert!(t.step(&[&[0.0; 3]], &[0.0; 6]).is_err());
    assert!(t.step(&[&[0.0; 12]], &[0.0; 5]).is_err());
    assert!(t.step(&[], &[0.0; 6]).is_err());

    // An op without a backward kernel inside the trainable part is named.
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 4]));
    let w = m.add_tensor(TensorSpec::const_f32("w", &[4, 4], &rand(16, 1)));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &[1, 4]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 4]));
    let fc = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[x, w, -1], &[h], fc.clone());
    m.add_op(OpCode::Builtin(BO::ABS), &[h], &[y], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![y];
    let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
    let e = Trainer::new(model.clone(), TrainConfig::default()).unwrap_err();
    assert!(e.to_string().contains("ABS") && e.to_string().contains("no backward kernel"), "{e}");
    // Frozen, it only runs forward: training just the last op (no weights) works.
    assert!(Trainer::new(model, TrainConfig { num_trainable_ops: Some(1), ..Default::default() }).is_ok());

    // One weight tensor read by two ops is refused.
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 4]));
    let w = m.add_tensor(TensorSpec::const_f32("w", &[4, 4], &rand(16, 1)));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &[1, 4]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 4]));
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[x, w, -1], &[h], fc.clone());
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[h, w, -1], &[y], fc);
    m.inputs = vec![x];
    m.outputs = vec![y];
    let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
    let e = Trainer::new(model, TrainConfig::default()).unwrap_err();
    assert!(e.to_string().contains("shared"), "{e}");
}

#[test]
fn a_model_with_control_flow_is_refused() {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 2]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 2]));
    let mut c = TensorSpec::activation("c", TensorType::BOOL, &[]);
    c.data = Some(vec![1]);
    let c = m.add_tensor(c);
    m.add_op(OpCode::Builtin(BO::IF), &[c, x], &[y], Options::If { then_subgraph: 1, else_subgraph: 1 });
    m.inputs = vec![x];
    m.outputs = vec![y];
    let mut sub = ModelSpec::default();
    let sx = sub.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 2]));
    let sy = sub.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 2]));
    sub.add_op(OpCode::Builtin(BO::RELU), &[sx], &[sy], Options::None);
    sub.inputs = vec![sx];
    sub.outputs = vec![sy];
    m.subgraphs.push(sub);
    let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
    let e = Trainer::new(model, TrainConfig::default()).unwrap_err().to_string();
    assert!(e.contains("control flow") && e.contains("IF"), "{e}");
}

#[test]
fn float16_weights_are_promoted_and_exported_as_float16() {
    // x[1, 4] -> FC(w = DEQUANTIZE(float16 const)) -> y[1, 2].
    let w: Vec<f32> = rand(8, 5).iter().map(|v| half_round(*v)).collect();
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 4]));
    let mut w16 = TensorSpec::activation("w16", TensorType::FLOAT16, &[2, 4]);
    w16.data = Some(w.iter().flat_map(|v| f32_to_f16_bits(*v).to_le_bytes()).collect());
    let w16 = m.add_tensor(w16);
    let w32 = m.add_tensor(TensorSpec::activation("w", TensorType::FLOAT32, &[2, 4]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 2]));
    m.add_op(OpCode::Builtin(BO::DEQUANTIZE), &[w16], &[w32], Options::None);
    let fc = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[x, w32, -1], &[y], fc);
    m.inputs = vec![x];
    m.outputs = vec![y];
    let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
    let mut t = Trainer::new(model, TrainConfig { batch_size: 2, optimizer: Optimizer::sgd(0.5), ..Default::default() }).unwrap();
    assert_eq!(t.trainable_tensors().len(), 1);
    assert_eq!(t.weights(0).unwrap(), w.as_slice());
    let xs = rand(8, 6);
    let ys = rand(4, 7);
    let before = t.evaluate(&[&xs], &ys).unwrap().loss;
    for _ in 0..5 {
        t.step(&[&xs], &ys).unwrap();
    }
    let after = t.evaluate(&[&xs], &ys).unwrap().loss;
    assert!(after < before, "loss {before} -> {after}");
    let bytes = t.export_bytes(false).unwrap();
    let exported = Model::from_bytes(Arc::new(bytes)).unwrap();
    let g = &exported.subgraphs()[0];
    let d = exported.const_data(&g.tensors[w16 as usize]).unwrap();
    let got: Vec<f32> = d.chunks_exact(2).map(|c| f16_bits_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect();
    for (a, b) in got.iter().zip(t.weights(0).unwrap()) {
        assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "{a} vs {b}");
    }
    assert_ne!(got, w);
}

/// float16 bits of a value (round to nearest even; normal range only, as these tests need).
fn f32_to_f16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if v == 0.0 || exp <= 0 {
        return sign;
    }
    let mant = b & 0x7f_ffff;
    let mut h = (sign as u32) | ((exp as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
        h += 1;
    }
    h as u16
}

fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let mant = (h & 0x3ff) as f32;
    if exp == 0 {
        return sign * mant * 2f32.powi(-24);
    }
    sign * (1.0 + mant / 1024.0) * 2f32.powi(exp - 15)
}

fn half_round(v: f32) -> f32 {
    f16_bits_to_f32(f32_to_f16_bits(v))
}

/// x[1, 6] -> FC(RELU) h -> LOGISTIC s; MUL(h, s) (h fans out) -> ADD const ->
/// RESHAPE [1, 2, 2] -> MEAN axis 2 -> TANH -> FC -> y[1, 3].
fn graph_model(w1: &[f32], b1: &[f32], w2: &[f32]) -> Arc<Model> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 6]));
    let tw1 = m.add_tensor(TensorSpec::const_f32("w1", &[4, 6], w1));
    let tb1 = m.add_tensor(TensorSpec::const_f32("b1", &[4], b1));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &[1, 4]));
    let s = m.add_tensor(TensorSpec::activation("s", TensorType::FLOAT32, &[1, 4]));
    let p = m.add_tensor(TensorSpec::activation("p", TensorType::FLOAT32, &[1, 4]));
    let c = m.add_tensor(TensorSpec::const_f32("c", &[4], &[0.1, -0.2, 0.3, 0.05]));
    let a = m.add_tensor(TensorSpec::activation("a", TensorType::FLOAT32, &[1, 4]));
    let shape = m.add_tensor(TensorSpec::const_i32("shape", &[3], &[1, 2, 2]));
    let r = m.add_tensor(TensorSpec::activation("r", TensorType::FLOAT32, &[1, 2, 2]));
    let axis = m.add_tensor(TensorSpec::const_i32("axis", &[1], &[2]));
    let mn = m.add_tensor(TensorSpec::activation("mean", TensorType::FLOAT32, &[1, 2]));
    let th = m.add_tensor(TensorSpec::activation("tanh", TensorType::FLOAT32, &[1, 2]));
    let tw2 = m.add_tensor(TensorSpec::const_f32("w2", &[3, 2], w2));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 3]));
    let fc = |a| Options::FullyConnected { activation: a, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[x, tw1, tb1], &[h], fc(Activation::RELU));
    m.add_op(OpCode::Builtin(BO::LOGISTIC), &[h], &[s], Options::None);
    m.add_op(OpCode::Builtin(BO::MUL), &[h, s], &[p], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(BO::ADD), &[p, c], &[a], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(BO::RESHAPE), &[a, shape], &[r], Options::None);
    m.add_op(OpCode::Builtin(BO::MEAN), &[r, axis], &[mn], Options::Reducer { keep_dims: false });
    m.add_op(OpCode::Builtin(BO::TANH), &[mn], &[th], Options::None);
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[th, tw2, -1], &[y], fc(Activation::NONE));
    m.inputs = vec![x];
    m.outputs = vec![y];
    Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap())
}

#[test]
fn gradients_through_fan_out_broadcast_reshape_and_mean_match_finite_differences() {
    let (w1, b1, w2) = (rand(24, 30), rand(4, 31).iter().map(|v| v + 0.5).collect::<Vec<_>>(), rand(6, 32));
    let batch = 3;
    let (xs, ys) = (rand(batch * 6, 33), rand(batch * 3, 34));
    let cfg = TrainConfig { batch_size: batch, optimizer: Optimizer::sgd(1.0), ..Default::default() };
    let loss_at = |w1: &[f32], b1: &[f32], w2: &[f32]| -> f64 {
        let mut t = Trainer::new(graph_model(w1, b1, w2), cfg.clone()).unwrap();
        f64::from(t.evaluate(&[&xs], &ys).unwrap().loss)
    };
    // One SGD step with learning rate 1 moves each weight by its gradient.
    let mut t = Trainer::new(graph_model(&w1, &b1, &w2), cfg.clone()).unwrap();
    assert_eq!(t.input_shape(0).unwrap(), &[batch, 6]);
    t.step(&[&xs], &ys).unwrap();
    let originals = [w1.clone(), b1.clone(), w2.clone()];
    let eps = 1e-2f32;
    for (k, orig) in originals.iter().enumerate() {
        let moved = t.weights(k).unwrap().to_vec();
        for i in 0..orig.len() {
            let got = f64::from(orig[i] - moved[i]);
            let mut vals = originals.clone();
            vals[k][i] = orig[i] + eps;
            let hi = loss_at(&vals[0], &vals[1], &vals[2]);
            vals[k][i] = orig[i] - eps;
            let lo = loss_at(&vals[0], &vals[1], &vals[2]);
            let want = (hi - lo) / (2.0 * f64::from(eps));
            assert!((got - want).abs() <= 2e-3 * (1.0 + want.abs()), "weight {k}[{i}]: gradient {got} vs finite difference {want}");
        }
    }
}

#[test]
fn training_is_bit_identical_for_any_thread_count_and_from_a_session() {
    // Wide enough that the kernels split their work over the pool.
    let (n_in, hid, out, batch) = (96, 64, 10, 32);
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, n_in as i32]));
    let w1 = m.add_tensor(TensorSpec::const_f32("w1", &[hid as i32, n_in as i32], &rand(hid * n_in, 40)));
    let b1 = m.add_tensor(TensorSpec::const_f32("b1", &[hid as i32], &rand(hid, 41)));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &[1, hid as i32]));
    let g = m.add_tensor(TensorSpec::activation("g", TensorType::FLOAT32, &[1, hid as i32]));
    let w2 = m.add_tensor(TensorSpec::const_f32("w2", &[out as i32, hid as i32], &rand(out * hid, 42)));
    let b2 = m.add_tensor(TensorSpec::const_f32("b2", &[out as i32], &rand(out, 43)));
    let z = m.add_tensor(TensorSpec::activation("z", TensorType::FLOAT32, &[1, out as i32]));
    let p = m.add_tensor(TensorSpec::activation("p", TensorType::FLOAT32, &[1, out as i32]));
    let fc = |a| Options::FullyConnected { activation: a, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[x, w1, b1], &[h], fc(Activation::NONE));
    m.add_op(OpCode::Builtin(BO::GELU), &[h], &[g], Options::Gelu { approximate: false });
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[g, w2, b2], &[z], fc(Activation::NONE));
    m.add_op(OpCode::Builtin(BO::LOG_SOFTMAX), &[z], &[p], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![p];
    let bytes = Arc::new(m.to_bytes().unwrap());
    let (xs, ys) = (rand(batch * n_in, 44), rand(batch * out, 45));
    let run = |threads: usize| {
        let cfg =
            TrainConfig { batch_size: batch, optimizer: Optimizer::Sgd { learning_rate: 0.002, momentum: 0.9, nesterov: true }, threads, ..Default::default() };
        let session = ferrite::Session::from_bytes(bytes.clone()).unwrap();
        let mut t = Trainer::from_session(&session, cfg).unwrap();
        let losses: Vec<u32> = (0..4).map(|_| t.step(&[&xs], &ys).unwrap().to_bits()).collect();
        let w: Vec<u32> = (0..4).flat_map(|k| t.weights(k).unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>()).collect();
        (losses, w)
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(4));
    // The loss falls (regressing the log-probabilities to the targets with MSE).
    let losses: Vec<f32> = one.0.iter().map(|&b| f32::from_bits(b)).collect();
    assert!(losses[3] < losses[0], "{losses:?}");
}

#[test]
fn a_trainer_can_move_between_threads() {
    fn is_send<T: Send>() {}
    is_send::<Trainer>();
    let (bytes, _) = mlp(false);
    let model = Arc::new(Model::from_bytes(Arc::new(bytes)).unwrap());
    let mut t = Trainer::new(model, TrainConfig { batch_size: 2, threads: 2, ..Default::default() }).unwrap();
    let loss = std::thread::spawn(move || t.step(&[&[0.5; 12]], &[0.0; 6]).unwrap()).join().unwrap();
    assert!(loss.is_finite());
}

/// x[1, 4] + GATHER(table[3, 4], [2]) -> RESHAPE [1, 2, 2] -> MEAN over an int64
/// axis constant -> BATCH_MATMUL by a constant [2, 3] -> y[1, 3]: the embedding
/// table and the matmul's constant operand are the trainable weights.
fn embedding_model(table: &[f32], w: &[f32]) -> Arc<Model> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 4]));
    let tt = m.add_tensor(TensorSpec::const_f32("table", &[3, 4], table));
    let idx = m.add_tensor(TensorSpec::const_i32("idx", &[1], &[2]));
    let e = m.add_tensor(TensorSpec::activation("e", TensorType::FLOAT32, &[1, 4]));
    let a = m.add_tensor(TensorSpec::activation("a", TensorType::FLOAT32, &[1, 4]));
    let shape = m.add_tensor(TensorSpec::const_i32("shape", &[3], &[1, 2, 2]));
    let r = m.add_tensor(TensorSpec::activation("r", TensorType::FLOAT32, &[1, 2, 2]));
    let axis = m.add_tensor(TensorSpec { data: Some(2i64.to_le_bytes().to_vec()), ..TensorSpec::activation("axis", TensorType::INT64, &[1]) });
    let mn = m.add_tensor(TensorSpec::activation("mean", TensorType::FLOAT32, &[1, 2]));
    let tw = m.add_tensor(TensorSpec::const_f32("w", &[2, 3], w));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 3]));
    m.add_op(OpCode::Builtin(BO::GATHER), &[tt, idx], &[e], Options::Gather { axis: 0, batch_dims: 0 });
    m.add_op(OpCode::Builtin(BO::ADD), &[x, e], &[a], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(BO::RESHAPE), &[a, shape], &[r], Options::None);
    m.add_op(OpCode::Builtin(BO::MEAN), &[r, axis], &[mn], Options::Reducer { keep_dims: false });
    m.add_op(OpCode::Builtin(BO::BATCH_MATMUL), &[mn, tw], &[y], Options::BatchMatMul { adj_x: false, adj_y: false, asymmetric_quantize_inputs: false });
    m.inputs = vec![x];
    m.outputs = vec![y];
    Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap())
}

#[test]
fn gather_params_and_batch_matmul_constants_train_as_weights() {
    let (table, w) = (rand(12, 40), rand(6, 41));
    let batch = 3;
    let (xs, ys) = (rand(batch * 4, 42), rand(batch * 3, 43));
    let cfg = TrainConfig { batch_size: batch, optimizer: Optimizer::sgd(1.0), ..Default::default() };
    let loss_at = |table: &[f32], w: &[f32]| -> f64 {
        let mut t = Trainer::new(embedding_model(table, w), cfg.clone()).unwrap();
        f64::from(t.evaluate(&[&xs], &ys).unwrap().loss)
    };
    let mut t = Trainer::new(embedding_model(&table, &w), cfg.clone()).unwrap();
    t.step(&[&xs], &ys).unwrap();
    let originals = [table.clone(), w.clone()];
    let eps = 1e-2f32;
    for (k, orig) in originals.iter().enumerate() {
        let moved = t.weights(k).unwrap().to_vec();
        for i in 0..orig.len() {
            let got = f64::from(orig[i] - moved[i]);
            let mut vals = originals.clone();
            vals[k][i] = orig[i] + eps;
            let hi = loss_at(&vals[0], &vals[1]);
            vals[k][i] = orig[i] - eps;
            let lo = loss_at(&vals[0], &vals[1]);
            let want = (hi - lo) / (2.0 * f64::from(eps));
            assert!((got - want).abs() <= 2e-3 * (1.0 + want.abs()), "weight {k}[{i}]: gradient {got} vs finite difference {want}");
        }
        // Rows of the table that no index selects get no gradient.
        if k == 0 {
            assert_eq!(&moved[..8], &orig[..8], "unselected embedding rows moved");
            assert_ne!(&moved[8..], &orig[8..], "the selected embedding row did not train");
        }
    }
}
