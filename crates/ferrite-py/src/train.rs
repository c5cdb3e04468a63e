//! Native half of `ferrite.Trainer` (`python/ferrite/trainer.py`): a
//! [`ferrite::Trainer`] behind a mutex, fed one batch at a time from float32
//! buffers (numpy arrays); the Python side makes the batches, epochs and history.

use std::sync::{Arc, Mutex, MutexGuard};

use ferrite::{Loss, LossReduction, Model, Optimizer, TrainConfig, Trainer};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use crate::{contain, err, err_as, ReadBuffer};

/// One trainer; calls are serialized.
#[pyclass(module = "ferrite._ferrite", frozen)]
pub(crate) struct NativeTrainer {
    trainer: Mutex<Trainer>,
}

/// The floats of a C-contiguous float32 buffer (copied: numpy's memory needs no
/// particular alignment for the bytes, and the batch is small next to a step).
fn floats(obj: &Bound<'_, PyAny>, what: &str, need: usize) -> PyResult<Vec<f32>> {
    let buf = ReadBuffer::get(obj)?;
    let bytes = buf.bytes();
    if bytes.len() != need * 4 {
        return Err(PyValueError::new_err(format!("{what} holds {} bytes, a batch of it takes {} float32 values", bytes.len(), need)));
    }
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

impl NativeTrainer {
    fn lock(&self) -> PyResult<MutexGuard<'_, Trainer>> {
        self.trainer.lock().map_err(|_| PyRuntimeError::new_err("the trainer was poisoned by a panic"))
    }

    /// The batch as float vectors, checked against the trainer's shapes.
    fn batch(t: &Trainer, inputs: &[Bound<'_, PyAny>], expected: &Bound<'_, PyAny>) -> PyResult<(Vec<Vec<f32>>, Vec<f32>)> {
        if inputs.len() != t.input_count() {
            return Err(PyValueError::new_err(format!("the model has {} inputs, {} given", t.input_count(), inputs.len())));
        }
        let xs = inputs
            .iter()
            .enumerate()
            .map(|(i, x)| floats(x, &format!("input {i}"), t.input_shape(i).map_err(err)?.iter().product()))
            .collect::<PyResult<Vec<_>>>()?;
        let y = floats(expected, "the expected output", t.expected_shape().iter().product())?;
        Ok((xs, y))
    }
}

#[pymethods]
impl NativeTrainer {
    /// Loads the model (from a path or bytes) and builds its training step;
    /// `num_trainable_ops` None trains every op.
    #[new]
    #[pyo3(signature = (path=None, content=None, batch_size=32, loss="mse", reduction="sum_over_batch_size", optimizer="sgd", learning_rate=0.01, momentum=0.0, nesterov=false, num_trainable_ops=None, threads=1))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        path: Option<String>,
        content: Option<&Bound<'_, PyAny>>,
        batch_size: usize,
        loss: &str,
        reduction: &str,
        optimizer: &str,
        learning_rate: f32,
        momentum: f32,
        nesterov: bool,
        num_trainable_ops: Option<usize>,
        threads: i64,
    ) -> PyResult<Self> {
        let content = content.map(ReadBuffer::get).transpose()?;
        let loss = match loss {
            "mse" | "mean_squared_error" => Loss::MeanSquaredError,
            "cce" | "categorical_crossentropy" => Loss::CategoricalCrossEntropy,
            other => return Err(PyValueError::new_err(format!("loss {other:?}: 'mse' or 'cce'"))),
        };
        let reduction = match reduction {
            "sum_over_batch_size" => LossReduction::SumOverBatchSize,
            "sum" => LossReduction::Sum,
            other => return Err(PyValueError::new_err(format!("loss reduction {other:?}: 'sum_over_batch_size' or 'sum'"))),
        };
        if !(learning_rate.is_finite() && learning_rate > 0.0) {
            return Err(PyValueError::new_err(format!("learning rate {learning_rate} must be positive")));
        }
        let optimizer = match optimizer {
            "sgd" => {
                if !(momentum.is_finite() && (0.0..1.0).contains(&momentum)) {
                    return Err(PyValueError::new_err(format!("momentum {momentum} must be in [0, 1)")));
                }
                Optimizer::Sgd { learning_rate, momentum, nesterov }
            }
            "adam" => Optimizer::adam(learning_rate),
            other => return Err(PyValueError::new_err(format!("optimizer {other:?}: 'sgd' or 'adam'"))),
        };
        let threads = match threads {
            -1 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => usize::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| PyValueError::new_err("num_threads should >= 1 (or -1 for all cores)"))?,
        };
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        let config = TrainConfig { batch_size, loss, reduction, optimizer, num_trainable_ops, threads, ..TrainConfig::default() };
        contain("building the trainer", || {
            let model = match (path, content) {
                (Some(p), None) => Model::from_file(p).map_err(err_as::<PyValueError>)?,
                (None, Some(c)) => Model::from_bytes(Arc::new(c.bytes().to_vec())).map_err(err_as::<PyValueError>)?,
                _ => return Err(PyValueError::new_err("give exactly one of model_path and model_content")),
            };
            let trainer = Trainer::new(Arc::new(model), config).map_err(err)?;
            Ok(NativeTrainer { trainer: Mutex::new(trainer) })
        })
    }

    /// Shapes of the model inputs for one batch.
    fn input_shapes(&self) -> PyResult<Vec<Vec<usize>>> {
        let t = self.lock()?;
        (0..t.input_count()).map(|i| t.input_shape(i).map(<[usize]>::to_vec).map_err(err)).collect()
    }

    /// Shape of the expected output of one batch.
    fn expected_shape(&self) -> PyResult<Vec<usize>> {
        Ok(self.lock()?.expected_shape().to_vec())
    }

    /// One step on one batch; (loss, accuracy) of its forward pass before the update.
    fn step(&self, inputs: Vec<Bound<'_, PyAny>>, expected: &Bound<'_, PyAny>) -> PyResult<(f32, f32)> {
        let mut t = self.lock()?;
        let (xs, y) = NativeTrainer::batch(&t, &inputs, expected)?;
        contain("step", || {
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            t.step(&refs, &y).map_err(err)?;
            let m = t.last_metrics();
            Ok((m.loss, m.accuracy))
        })
    }

    /// (loss, accuracy) on one batch, changing nothing.
    fn evaluate(&self, inputs: Vec<Bound<'_, PyAny>>, expected: &Bound<'_, PyAny>) -> PyResult<(f32, f32)> {
        let mut t = self.lock()?;
        let (xs, y) = NativeTrainer::batch(&t, &inputs, expected)?;
        contain("evaluate", || {
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            let m = t.evaluate(&refs, &y).map_err(err)?;
            Ok((m.loss, m.accuracy))
        })
    }

    /// The model output of the last step or evaluation's batch, as float32 bytes.
    fn output<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyByteArray>> {
        let t = self.lock()?;
        let out: Vec<u8> = t.output().iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(PyByteArray::new(py, &out))
    }

    /// Steps taken (restored from checkpoints).
    fn step_count(&self) -> PyResult<u64> {
        Ok(self.lock()?.step_count())
    }

    /// (arena bytes, lower bound bytes) of the training step's memory plan.
    fn memory(&self) -> PyResult<(usize, usize)> {
        let m = self.lock()?.memory();
        Ok((m.arena_bytes, m.arena_lower_bound_bytes))
    }

    /// (tensor index, name, shape) of each trainable tensor.
    fn trainable(&self) -> PyResult<Vec<(usize, String, Vec<usize>)>> {
        Ok(self.lock()?.trainable_tensors().into_iter().map(|t| (t.tensor, t.name, t.shape)).collect())
    }

    /// The current values of trainable tensor `i`, as float32 bytes.
    fn weights<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyByteArray>> {
        let t = self.lock()?;
        let w: Vec<u8> = t.weights(i).map_err(err)?.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(PyByteArray::new(py, &w))
    }

    /// The model with the trained weights, as file bytes (circle or tflite).
    #[pyo3(signature = (circle=false))]
    fn export_bytes<'py>(&self, py: Python<'py>, circle: bool) -> PyResult<Bound<'py, PyBytes>> {
        let t = self.lock()?;
        let b = contain("export", || t.export_bytes(circle).map_err(err))?;
        Ok(PyBytes::new(py, &b))
    }

    /// Writes the model with the trained weights to `path` (circle by extension).
    fn export(&self, path: std::path::PathBuf) -> PyResult<()> {
        let t = self.lock()?;
        contain("export", || t.export(&path).map_err(err))
    }

    /// Saves weights, optimizer state and step count.
    fn save_checkpoint(&self, path: std::path::PathBuf) -> PyResult<()> {
        let t = self.lock()?;
        contain("save_checkpoint", || t.save_checkpoint(&path).map_err(err))
    }

    /// Restores a checkpoint of the same model and configuration.
    fn load_checkpoint(&self, path: std::path::PathBuf) -> PyResult<()> {
        let mut t = self.lock()?;
        contain("load_checkpoint", || t.load_checkpoint(&path).map_err(err))
    }
}
