//! `ferrite train MODEL`: onert_train's options over `ferrite::Trainer`.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use ferrite::{DType, Loss, LossReduction, Optimizer, TrainConfig, Trainer};
use serde_json::{json, Value};

use crate::npy;
use crate::observe::Progress;

/// Options of `ferrite train`, named and meaning as onert_train's.
#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// The model (.tflite or .circle, float32, one subgraph).
    pub model: PathBuf,
    /// Epochs.
    #[arg(long = "epoch", default_value_t = 1)]
    pub epoch: usize,
    /// Samples per step; the model's batch dimension (1) is rewritten to it.
    #[arg(long = "batch_size", default_value_t = 32)]
    pub batch_size: usize,
    /// Learning rate.
    #[arg(long = "learning_rate", default_value_t = 0.001)]
    pub learning_rate: f32,
    /// Loss: mse (mean squared error) or cce (categorical cross-entropy on the final SOFTMAX).
    #[arg(long = "loss", default_value = "mse", value_parser = ["mse", "cce"])]
    pub loss: String,
    /// Loss reduction over the batch.
    #[arg(long = "loss_reduction", default_value = "sum_over_batch_size", value_parser = ["sum_over_batch_size", "sum"])]
    pub loss_reduction: String,
    /// Optimizer.
    #[arg(long = "optimizer", default_value = "sgd", value_parser = ["sgd", "adam"])]
    pub optimizer: String,
    /// SGD momentum (Keras' form).
    #[arg(long = "momentum", default_value_t = 0.0)]
    pub momentum: f32,
    /// Nesterov momentum (with --momentum).
    #[arg(long = "nesterov")]
    pub nesterov: bool,
    /// Metric to report: accuracy (categorical).
    #[arg(long = "metric", value_parser = ["accuracy"])]
    pub metric: Option<String>,
    /// Validate on the last fraction F of the data (not shuffled) after each epoch.
    #[arg(long = "validation_split", default_value_t = 0.0)]
    pub validation_split: f64,
    /// Train the last N ops in execution order (-1: all, 0: none).
    #[arg(long = "num_trainable_ops", default_value_t = -1, allow_negative_numbers = true)]
    pub num_trainable_ops: i64,
    /// Input data, `.npy` shaped [N, *sample_shape]; once per model input, in order.
    #[arg(long = "load_input", value_name = "X.npy")]
    pub load_input: Vec<PathBuf>,
    /// Expected outputs, `.npy` shaped [N, *output_shape].
    #[arg(long = "load_expected", value_name = "Y.npy")]
    pub load_expected: Option<PathBuf>,
    /// Input data as raw little-endian float32 samples back to back; once per model input.
    #[arg(long = "load_input_raw", value_name = "FILE")]
    pub load_input_raw: Vec<PathBuf>,
    /// Expected outputs as raw little-endian float32 samples back to back.
    #[arg(long = "load_expected_raw", value_name = "FILE")]
    pub load_expected_raw: Option<PathBuf>,
    /// Shuffle the training samples each epoch with this seed (default: file order).
    #[arg(long = "shuffle", value_name = "SEED")]
    pub shuffle: Option<u64>,
    /// Resume from this checkpoint (weights, optimizer state, step).
    #[arg(long = "checkpoint_in", value_name = "FILE")]
    pub checkpoint_in: Option<PathBuf>,
    /// Save a checkpoint here after training.
    #[arg(long = "checkpoint_out", value_name = "FILE")]
    pub checkpoint_out: Option<PathBuf>,
    /// Export the trained model (.tflite or .circle).
    #[arg(long = "export_path", value_name = "OUT")]
    pub export_path: Option<PathBuf>,
    /// Worker threads.
    #[arg(long = "threads", default_value_t = 1)]
    pub threads: usize,
    /// Print one JSON object per epoch per line, then a summary object.
    #[arg(long = "json")]
    pub json: bool,
}

/// Samples of one tensor: `n` rows of `row` floats.
struct Data {
    values: Vec<f32>,
    row: usize,
    n: usize,
}

fn load(path: &Path, raw: bool, sample: &[usize], what: &str) -> Result<Data, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let row: usize = sample.iter().product();
    if row == 0 {
        return Err(format!("{what} has an empty sample shape {sample:?}"));
    }
    let (data, n) = if raw {
        if bytes.len() % (row * 4) != 0 {
            return Err(format!("{}: {} bytes is not a whole number of {what} samples of {row} float32 values", path.display(), bytes.len()));
        }
        (bytes, 0)
    } else {
        let a = npy::read(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        if a.dtype != DType::F32 {
            return Err(format!("{}: {what} must be float32, the file holds {}", path.display(), a.dtype.name()));
        }
        if a.shape.len() != sample.len() + 1 || a.shape[1..] != *sample {
            return Err(format!("{}: {what} must be shaped [N, {}], the file is {:?}", path.display(), dims(sample), a.shape));
        }
        let n = a.shape[0];
        (a.data, n)
    };
    let values: Vec<f32> = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let n = if raw { values.len() / row } else { n };
    Ok(Data { values, row, n })
}

fn dims(s: &[usize]) -> String {
    s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}

/// A small seeded generator for `--shuffle` (splitmix64).
fn shuffle(order: &mut [usize], seed: u64, epoch: u64) {
    let mut s = seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..order.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
}

/// Copies samples `idx` of each tensor into the batch buffers.
fn gather(data: &[Data], idx: &[usize], bufs: &mut [Vec<f32>]) {
    for (d, buf) in data.iter().zip(bufs.iter_mut()) {
        for (k, &i) in idx.iter().enumerate() {
            buf[k * d.row..][..d.row].copy_from_slice(&d.values[i * d.row..][..d.row]);
        }
    }
}

pub fn train(a: &TrainArgs) -> Result<(), String> {
    if a.batch_size == 0 {
        return Err("--batch_size must be at least 1".into());
    }
    if !(0.0..1.0).contains(&a.validation_split) {
        return Err(format!("--validation_split must be in [0, 1), got {}", a.validation_split));
    }
    if !a.load_input.is_empty() && !a.load_input_raw.is_empty() {
        return Err("give the inputs as --load_input (.npy) or --load_input_raw, not both".into());
    }
    if a.load_expected.is_some() && a.load_expected_raw.is_some() {
        return Err("give the expected outputs as --load_expected (.npy) or --load_expected_raw, not both".into());
    }
    let optimizer = match a.optimizer.as_str() {
        "adam" => Optimizer::adam(a.learning_rate),
        _ => Optimizer::Sgd { learning_rate: a.learning_rate, momentum: a.momentum, nesterov: a.nesterov },
    };
    let config = TrainConfig {
        batch_size: a.batch_size,
        loss: if a.loss == "cce" { Loss::CategoricalCrossEntropy } else { Loss::MeanSquaredError },
        reduction: if a.loss_reduction == "sum" { LossReduction::Sum } else { LossReduction::SumOverBatchSize },
        optimizer,
        num_trainable_ops: usize::try_from(a.num_trainable_ops).ok(),
        threads: a.threads.max(1),
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::from_file(&a.model, config).map_err(|e| format!("{}: {e}", a.model.display()))?;

    // The data, checked before anything is trained or written.
    let raw = !a.load_input_raw.is_empty();
    let input_files = if raw { &a.load_input_raw } else { &a.load_input };
    if input_files.len() != trainer.input_count() {
        return Err(format!(
            "the model has {} inputs; give one --load_input (or --load_input_raw) per input, {} given",
            trainer.input_count(),
            input_files.len()
        ));
    }
    let mut inputs = Vec::new();
    for (i, f) in input_files.iter().enumerate() {
        let sample = trainer.input_shape(i).map_err(|e| e.to_string())?[1..].to_vec();
        inputs.push(load(f, raw, &sample, &format!("input {i}"))?);
    }
    let (expected_file, expected_raw) = match (&a.load_expected, &a.load_expected_raw) {
        (Some(f), None) => (f, false),
        (None, Some(f)) => (f, true),
        _ => return Err("give the expected outputs with --load_expected (or --load_expected_raw)".into()),
    };
    let expected = load(expected_file, expected_raw, &trainer.expected_shape()[1..], "the expected output")?;
    let n = expected.n;
    if let Some((i, d)) = inputs.iter().enumerate().find(|(_, d)| d.n != n) {
        return Err(format!("input {i} has {} samples, the expected output {n}: the sample counts must match", d.n));
    }
    let n_train = ((n as f64) * (1.0 - a.validation_split)).floor() as usize;
    let b = a.batch_size;
    let steps = n_train / b;
    let val_batches = (n - n_train) / b;
    if steps == 0 {
        return Err(format!("--batch_size {b} is larger than the {n_train} training samples"));
    }
    if let Some(ck) = &a.checkpoint_in {
        trainer.load_checkpoint(ck).map_err(|e| e.to_string())?;
    }
    let metric = a.metric.is_some();
    let mut in_bufs: Vec<Vec<f32>> = inputs.iter().map(|d| vec![0.0; d.row * b]).collect();
    let mut exp_buf = vec![vec![0.0f32; expected.row * b]];
    let mut order: Vec<usize> = (0..n_train).collect();
    let mut epochs = Vec::new();
    let mut step_allocs = 0u64;
    for epoch in 0..a.epoch {
        if let Some(seed) = a.shuffle {
            order = (0..n_train).collect();
            shuffle(&mut order, seed, epoch as u64);
        }
        let mut progress = Progress::new();
        let (mut loss_sum, mut acc_sum) = (0.0f64, 0.0f64);
        let mut step_time = 0.0f64;
        for s in 0..steps {
            let idx = &order[s * b..(s + 1) * b];
            gather(&inputs, idx, &mut in_bufs);
            gather(std::slice::from_ref(&expected), idx, &mut exp_buf);
            let refs: Vec<&[f32]> = in_bufs.iter().map(|v| v.as_slice()).collect();
            let t0 = Instant::now();
            let before = crate::ALLOCS.load(Ordering::Relaxed);
            crate::COUNTING.store(true, Ordering::Relaxed);
            let r = trainer.step(&refs, &exp_buf[0]);
            crate::COUNTING.store(false, Ordering::Relaxed);
            step_allocs += crate::ALLOCS.load(Ordering::Relaxed) - before;
            step_time += t0.elapsed().as_secs_f64();
            let loss = r.map_err(|e| e.to_string())?;
            loss_sum += f64::from(loss);
            acc_sum += f64::from(trainer.last_metrics().accuracy);
            let text = format!(
                "epoch {}/{} {}/{steps} loss {:.4}{} {:.2} ms/step",
                epoch + 1,
                a.epoch,
                s + 1,
                loss_sum / (s + 1) as f64,
                if metric { format!(" accuracy {:.4}", acc_sum / (s + 1) as f64) } else { String::new() },
                step_time * 1e3 / (s + 1) as f64
            );
            progress.update((s + 1) as f64 / steps as f64, &text);
        }
        progress.finish();
        let mut e = json!({
            "epoch": epoch + 1,
            "loss": loss_sum / steps as f64,
            "ms_per_step": step_time * 1e3 / steps as f64,
        });
        if metric {
            e["accuracy"] = json!(acc_sum / steps as f64);
        }
        if val_batches > 0 {
            let (mut vl, mut va) = (0.0f64, 0.0f64);
            for v in 0..val_batches {
                let idx: Vec<usize> = (n_train + v * b..n_train + (v + 1) * b).collect();
                gather(&inputs, &idx, &mut in_bufs);
                gather(std::slice::from_ref(&expected), &idx, &mut exp_buf);
                let refs: Vec<&[f32]> = in_bufs.iter().map(|v| v.as_slice()).collect();
                let m = trainer.evaluate(&refs, &exp_buf[0]).map_err(|e| e.to_string())?;
                vl += f64::from(m.loss);
                va += f64::from(m.accuracy);
            }
            e["val_loss"] = json!(vl / val_batches as f64);
            if metric {
                e["val_accuracy"] = json!(va / val_batches as f64);
            }
        }
        if a.json {
            outln!("{e}");
        } else {
            outln!("{}", epoch_line(&e, a.epoch));
        }
        epochs.push(e);
    }
    let mem = trainer.memory();
    let total_steps = (steps * a.epoch).max(1) as f64;
    if a.json {
        outln!(
            "{}",
            json!({
                "epochs": epochs,
                "arena_bytes": mem.arena_bytes,
                "arena_lower_bound_bytes": mem.arena_lower_bound_bytes,
                "steps_per_epoch": steps,
                "validation_batches": val_batches,
                "heap_allocs_per_step": step_allocs as f64 / total_steps,
            })
        );
    } else {
        outln!("arena {} bytes (lower bound {}), {} heap allocations per step", mem.arena_bytes, mem.arena_lower_bound_bytes, step_allocs as f64 / total_steps);
    }
    if let Some(p) = &a.checkpoint_out {
        trainer.save_checkpoint(p).map_err(|e| e.to_string())?;
    }
    if let Some(p) = &a.export_path {
        trainer.export(p).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn epoch_line(e: &Value, epochs: usize) -> String {
    let mut s = format!("Epoch {}/{epochs} - loss: {:.6}", e["epoch"], e["loss"].as_f64().unwrap_or(f64::NAN));
    for k in ["accuracy", "val_loss", "val_accuracy"] {
        if let Some(v) = e.get(k).and_then(Value::as_f64) {
            s.push_str(&format!(" - {k}: {v:.6}"));
        }
    }
    s.push_str(&format!(" - {:.3} ms/step", e["ms_per_step"].as_f64().unwrap_or(0.0)));
    s
}
