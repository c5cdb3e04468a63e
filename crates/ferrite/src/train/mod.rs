//! On-device training: a [`Trainer`] runs training steps (forward at the
//! training batch size, loss, backward, optimizer update) on a float32 model,
//! evaluates, exports the model with its trained weights, and saves and resumes
//! checkpoints.
//!
//! ```no_run
//! use ferrite::{Loss, Optimizer, TrainConfig, Trainer};
//! let config = TrainConfig { batch_size: 32, loss: Loss::MeanSquaredError, optimizer: Optimizer::sgd(0.01), ..Default::default() };
//! let mut trainer = Trainer::from_file("model.tflite", config)?;
//! let x = vec![0.5f32; trainer.input_shape(0)?.iter().product()];
//! let y = vec![0.0f32; trainer.expected_shape().iter().product()];
//! let loss = trainer.step(&[&x], &y)?;
//! trainer.export("trained.tflite")?;
//! # Ok::<(), ferrite::Error>(())
//! ```
//!
//! Semantics follow Keras (`fit` with `shuffle=False`) and onert_train: the loss
//! is the step's forward pass before its update, MSE is the mean over all
//! elements, categorical cross-entropy is computed from the logits of the
//! model's final SOFTMAX, Adam is Keras' form. Only the last
//! [`TrainConfig::num_trainable_ops`] ops in execution order train.

mod backward;
mod graph;
mod persist;

use std::path::Path;
use std::sync::Arc;

use crate::backend::BackendContext;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::session::Session;

/// The loss a [`Trainer`] minimizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Mean squared error over all output elements.
    MeanSquaredError,
    /// Categorical cross-entropy on the model's final SOFTMAX output, computed
    /// from its logits (fused with the SOFTMAX for stability).
    CategoricalCrossEntropy,
}

/// How the loss sums over the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReduction {
    /// Mean over the batch (the default, Keras' `sum_over_batch_size`).
    SumOverBatchSize,
    /// Sum over the batch of each sample's loss.
    Sum,
}

/// The optimizer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// `w -= lr * g`; with `momentum > 0`, Keras' momentum form (and Nesterov's).
    Sgd {
        /// Learning rate.
        learning_rate: f32,
        /// Momentum (0: plain SGD).
        momentum: f32,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// Adam, Keras' form: `w -= lr·sqrt(1−β2^t)/(1−β1^t)·m/(sqrt(v)+ε)`.
    Adam {
        /// Learning rate.
        learning_rate: f32,
        /// β1 (0.9).
        beta1: f32,
        /// β2 (0.999).
        beta2: f32,
        /// ε (1e-7).
        epsilon: f32,
    },
}

impl Optimizer {
    /// Plain SGD.
    pub fn sgd(learning_rate: f32) -> Optimizer {
        Optimizer::Sgd { learning_rate, momentum: 0.0, nesterov: false }
    }
    /// Adam with Keras' defaults (β1 0.9, β2 0.999, ε 1e-7).
    pub fn adam(learning_rate: f32) -> Optimizer {
        Optimizer::Adam { learning_rate, beta1: 0.9, beta2: 0.999, epsilon: 1e-7 }
    }
    /// The learning rate.
    pub fn learning_rate(&self) -> f32 {
        match *self {
            Optimizer::Sgd { learning_rate, .. } | Optimizer::Adam { learning_rate, .. } => learning_rate,
        }
    }
}

/// How to train.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// Samples per step: the model's batch dimension (1 in the file) is rewritten to it.
    pub batch_size: usize,
    /// The loss.
    pub loss: Loss,
    /// How the loss sums over the batch.
    pub reduction: LossReduction,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// Train only the last N ops in execution order (weightless ops count too);
    /// `None`: all. `Some(0)`: none (steps compute the loss and change nothing).
    pub num_trainable_ops: Option<usize>,
    /// Worker threads (1: the calling thread only).
    pub threads: usize,
    /// The largest arena the training step may plan.
    pub max_arena_bytes: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch_size: 32,
            loss: Loss::MeanSquaredError,
            reduction: LossReduction::SumOverBatchSize,
            optimizer: Optimizer::sgd(0.01),
            num_trainable_ops: None,
            threads: 1,
            max_arena_bytes: 4 << 30,
        }
    }
}

/// Loss and categorical accuracy of one batch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchMetrics {
    /// The loss.
    pub loss: f32,
    /// Fraction of samples whose prediction's first maximum is at the label's.
    pub accuracy: f32,
}

/// The training step's memory plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrainMemory {
    /// Bytes of the planned arena (activations, gradients, weights, optimizer state).
    pub arena_bytes: usize,
    /// The largest total of buffers alive at one step: no plan can be smaller.
    pub arena_lower_bound_bytes: usize,
}

/// A trainable weight or bias of the training step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainableTensor {
    /// Its tensor index in the model's subgraph.
    pub tensor: usize,
    /// Its name in the model.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
}

/// Trains a float32 model: see the [module docs](self).
pub struct Trainer {
    model: Arc<Model>,
    subgraph: usize,
    config: TrainConfig,
    graph: graph::TrainGraph,
    arena: Vec<crate::memory::Line>,
    // Holds the kernels' thread pool and prepacked frozen weights.
    _ctx: BackendContext,
    steps_done: u64,
    last: BatchMetrics,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer").field("config", &self.config).field("steps", &self.steps_done).finish()
    }
}

impl Trainer {
    /// A trainer for subgraph 0 of `model`.
    pub fn new(model: Arc<Model>, config: TrainConfig) -> Result<Trainer> {
        Trainer::for_subgraph(model, 0, config)
    }

    /// A trainer for the model file at `path`.
    pub fn from_file(path: impl AsRef<Path>, config: TrainConfig) -> Result<Trainer> {
        Trainer::new(Arc::new(Model::from_file(path)?), config)
    }

    /// A trainer for the model and subgraph a session runs (its weights as in the
    /// file: the session is not changed).
    pub fn from_session(session: &Session, config: TrainConfig) -> Result<Trainer> {
        Trainer::for_subgraph(session.model().clone(), session.subgraph_index(), config)
    }

    fn for_subgraph(model: Arc<Model>, subgraph: usize, config: TrainConfig) -> Result<Trainer> {
        let mut ctx = BackendContext::new(config.threads);
        let graph = graph::build(&model, subgraph, &config, &mut ctx)?;
        let mut arena = crate::memory::Line::zeroed(graph.plan.arena_bytes);
        {
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut arena);
            let g = model.subgraphs().get(subgraph).ok_or_else(|| Error::InvalidArgument(format!("no subgraph {subgraph}").into()))?;
            for p in &graph.params {
                let info = &g.tensors[p.stored];
                let data = model.const_data(info).ok_or_else(|| Error::InvalidModel(format!("weights tensor {} has no data", p.stored).into()))?;
                let dst = graph.slot_bytes_mut(bytes, p.value);
                if p.fp16 {
                    for (d, s) in dst.chunks_exact_mut(4).zip(data.chunks_exact(2)) {
                        d.copy_from_slice(&half::f16::from_le_bytes([s[0], s[1]]).to_f32().to_le_bytes());
                    }
                } else if data.len() == dst.len() {
                    dst.copy_from_slice(data);
                } else {
                    return Err(Error::InvalidModel(format!("weights tensor {} holds {} bytes, its shape needs {}", p.stored, data.len(), dst.len()).into()));
                }
            }
        }
        Ok(Trainer { model, subgraph, config, graph, arena, _ctx: ctx, steps_done: 0, last: BatchMetrics::default() })
    }

    /// The configuration.
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The model being trained (its file bytes are the original weights).
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Number of model inputs.
    pub fn input_count(&self) -> usize {
        self.graph.inputs.len()
    }

    /// Shape of input `i` at the training batch size.
    pub fn input_shape(&self, i: usize) -> Result<&[usize]> {
        self.graph.inputs.get(i).map(|s| s.shape.as_slice()).ok_or_else(|| Error::InvalidArgument(format!("no input {i}").into()))
    }

    /// Shape of the expected output (labels) of one batch.
    pub fn expected_shape(&self) -> &[usize] {
        &self.graph.expected.shape
    }

    /// Training steps taken (restored from checkpoints).
    pub fn step_count(&self) -> u64 {
        self.steps_done
    }

    /// The training step's memory plan.
    pub fn memory(&self) -> TrainMemory {
        TrainMemory { arena_bytes: self.graph.plan.arena_bytes, arena_lower_bound_bytes: self.graph.plan.lower_bound_bytes }
    }

    /// The trainable tensors, in the order [`Trainer::weights`] indexes them.
    pub fn trainable_tensors(&self) -> Vec<TrainableTensor> {
        let g = &self.model.subgraphs()[self.subgraph];
        self.graph
            .params
            .iter()
            .map(|p| TrainableTensor { tensor: p.tensor, name: g.tensors[p.tensor].name.clone(), shape: g.tensors[p.tensor].shape.clone() })
            .collect()
    }

    /// The current values of trainable tensor `i` (see [`Trainer::trainable_tensors`]).
    pub fn weights(&self, i: usize) -> Result<&[f32]> {
        let p = self.graph.params.get(i).ok_or_else(|| Error::InvalidArgument(format!("no trainable tensor {i}").into()))?;
        Ok(&bytemuck::cast_slice::<u8, f32>(self.graph.slot_bytes(self.arena_bytes(), p.value))[..p.numel])
    }

    fn arena_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.arena)
    }

    fn bind(&mut self, inputs: &[&[f32]], expected: &[f32]) -> Result<()> {
        if inputs.len() != self.graph.inputs.len() {
            return Err(Error::InvalidArgument(format!("the model has {} inputs, {} given", self.graph.inputs.len(), inputs.len()).into()));
        }
        let arena: &mut [u8] = bytemuck::cast_slice_mut(&mut self.arena);
        for (i, (x, io)) in inputs.iter().zip(&self.graph.inputs).enumerate() {
            let dst = self.graph.slot_bytes_mut(arena, io.slot);
            if x.len() * 4 != dst.len() {
                return Err(Error::InvalidArgument(format!("input {i} needs {} floats (shape {:?}), {} given", dst.len() / 4, io.shape, x.len()).into()));
            }
            dst.copy_from_slice(bytemuck::cast_slice(x));
        }
        let dst = self.graph.slot_bytes_mut(arena, self.graph.expected.slot);
        if expected.len() * 4 != dst.len() {
            return Err(Error::InvalidArgument(
                format!("expected output needs {} floats (shape {:?}), {} given", dst.len() / 4, self.graph.expected.shape, expected.len()).into(),
            ));
        }
        dst.copy_from_slice(bytemuck::cast_slice(expected));
        Ok(())
    }

    fn read_metrics(&self) -> BatchMetrics {
        let m: &[f32] = bytemuck::cast_slice(self.graph.slot_bytes(self.arena_bytes(), self.graph.metrics));
        BatchMetrics { loss: m[0], accuracy: m[1] }
    }

    /// One training step on one batch: `inputs` (one slice per model input, each
    /// [`Trainer::input_shape`]) and `expected` ([`Trainer::expected_shape`]).
    /// Returns the batch's loss from the forward pass before the update.
    pub fn step(&mut self, inputs: &[&[f32]], expected: &[f32]) -> Result<f32> {
        self.bind(inputs, expected)?;
        self.graph.set_step(self.steps_done + 1);
        let arena: &mut [u8] = bytemuck::cast_slice_mut(&mut self.arena);
        self.graph.run(arena, graph::Phase::Backward)?;
        self.steps_done += 1;
        self.last = self.read_metrics();
        Ok(self.last.loss)
    }

    /// Loss and accuracy of the last [`Trainer::step`] or [`Trainer::evaluate`].
    pub fn last_metrics(&self) -> BatchMetrics {
        self.last
    }

    /// Loss and accuracy on one batch, without changing anything.
    pub fn evaluate(&mut self, inputs: &[&[f32]], expected: &[f32]) -> Result<BatchMetrics> {
        self.bind(inputs, expected)?;
        let arena: &mut [u8] = bytemuck::cast_slice_mut(&mut self.arena);
        self.graph.run(arena, graph::Phase::Loss)?;
        self.last = self.read_metrics();
        Ok(self.last)
    }

    /// The model's output for the batch of the last step or evaluation (computed
    /// before that step's update).
    pub fn output(&self) -> &[f32] {
        bytemuck::cast_slice(self.graph.slot_bytes(self.arena_bytes(), self.graph.output.slot))
    }

    /// The model file with the trained weights: the original bytes with only the
    /// trained weight buffers rewritten (same ops, tensors, inputs and outputs).
    /// `circle` writes the circle file identifier.
    pub fn export_bytes(&self, circle: bool) -> Result<Vec<u8>> {
        persist::export(self, circle)
    }

    /// Writes [`Trainer::export_bytes`] to `path` (circle when it ends in
    /// `.circle`), through a temporary file renamed into place.
    pub fn export(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let circle = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("circle"));
        persist::write_atomic(path, &self.export_bytes(circle)?)
    }

    /// Saves the weights, optimizer state and step count to `path` (through a
    /// temporary file renamed into place).
    pub fn save_checkpoint(&self, path: impl AsRef<Path>) -> Result<()> {
        persist::write_atomic(path.as_ref(), &persist::checkpoint(self))
    }

    /// Restores a checkpoint saved by a trainer of the same model and
    /// configuration: training continues bit-identically.
    pub fn load_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
        persist::restore(self, &bytes).map_err(|e| match e {
            Error::InvalidArgument(d) => Error::InvalidArgument(format!("checkpoint {}: {}", path.display(), d.message).into()),
            e => e,
        })
    }
}
