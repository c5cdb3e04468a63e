//! Training through the C API, in the style of nnfw's training functions: set the
//! training info, prepare, bind a batch of inputs and expected outputs, step, read
//! the loss, export the trained model, save or restore a checkpoint. The trainer
//! belongs to the session (one per session, made by `ferrite_session_train_prepare`
//! from the session's model) and is freed with it.

use std::ffi::{c_char, c_void, CStr};

use ferrite::{Loss, LossReduction, Optimizer, TrainConfig, Trainer};

use crate::{fill_info, with_session, FerriteSession, FerriteStatus, FerriteTensorInfo};

/// The loss of `FerriteTrainInfo::loss`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerriteLoss {
    /// Mean squared error over all output elements.
    MeanSquaredError = 0,
    /// Categorical cross-entropy on the model's final SOFTMAX.
    CategoricalCrossEntropy = 1,
}

/// The reduction of `FerriteTrainInfo::loss_reduction`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerriteLossReduction {
    /// Mean over the batch (Keras' default).
    SumOverBatchSize = 0,
    /// Sum over the batch.
    Sum = 1,
}

/// The optimizer of `FerriteTrainInfo::optimizer`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerriteOptimizer {
    /// SGD, with `momentum` (and `nesterov`) when momentum is above 0.
    Sgd = 0,
    /// Adam (β1 0.9, β2 0.999, ε 1e-7).
    Adam = 1,
}

/// How to train (`ferrite_session_train_set_info`). The enum-valued fields are
/// plain integers holding a `FerriteLoss`, `FerriteLossReduction` or
/// `FerriteOptimizer` value, so an out-of-range value is an error, not undefined.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FerriteTrainInfo {
    /// Learning rate.
    pub learning_rate: f32,
    /// Samples per step (the model's batch dimension is rewritten to it).
    pub batch_size: usize,
    /// A `FerriteLoss`.
    pub loss: i32,
    /// A `FerriteLossReduction`.
    pub loss_reduction: i32,
    /// A `FerriteOptimizer`.
    pub optimizer: i32,
    /// SGD momentum (0: plain SGD).
    pub momentum: f32,
    /// Nesterov momentum (SGD with momentum only).
    pub nesterov: bool,
    /// Train the last N ops in execution order; -1: all, 0: none.
    pub num_trainable_ops: i32,
    /// Worker threads (at least 1).
    pub threads: usize,
}

/// A session's training state.
#[derive(Debug, Default)]
pub(crate) struct TrainState {
    config: Option<TrainConfig>,
    trainer: Option<Trainer>,
    inputs: Vec<Option<(*const u8, usize)>>,
    expected: Option<(*const u8, usize)>,
    /// Set after a step or an evaluation.
    stepped: bool,
}

fn config_of(info: &FerriteTrainInfo) -> Result<TrainConfig, String> {
    let loss = match info.loss {
        0 => Loss::MeanSquaredError,
        1 => Loss::CategoricalCrossEntropy,
        v => return Err(format!("invalid argument: loss {v} (0: mean squared error, 1: categorical cross-entropy)")),
    };
    let reduction = match info.loss_reduction {
        0 => LossReduction::SumOverBatchSize,
        1 => LossReduction::Sum,
        v => return Err(format!("invalid argument: loss reduction {v} (0: sum over batch size, 1: sum)")),
    };
    let lr = info.learning_rate;
    if !(lr.is_finite() && lr > 0.0) {
        return Err(format!("invalid argument: learning rate {lr}"));
    }
    let optimizer = match info.optimizer {
        0 => {
            if !(info.momentum.is_finite() && (0.0..1.0).contains(&info.momentum)) {
                return Err(format!("invalid argument: momentum {} (0 <= momentum < 1)", info.momentum));
            }
            Optimizer::Sgd { learning_rate: lr, momentum: info.momentum, nesterov: info.nesterov }
        }
        1 => Optimizer::adam(lr),
        v => return Err(format!("invalid argument: optimizer {v} (0: SGD, 1: Adam)")),
    };
    if info.batch_size == 0 || info.threads == 0 {
        return Err("invalid argument: the batch size and the thread count must be at least 1".into());
    }
    let num_trainable_ops = match info.num_trainable_ops {
        -1 => None,
        n if n >= 0 => Some(n as usize),
        n => return Err(format!("invalid argument: num_trainable_ops {n} (-1: all)")),
    };
    Ok(TrainConfig { batch_size: info.batch_size, loss, reduction, optimizer, num_trainable_ops, threads: info.threads, ..TrainConfig::default() })
}

impl FerriteSession {
    fn trainer(&mut self) -> Result<&mut Trainer, FerriteStatus> {
        if self.train.trainer.is_none() {
            return Err(self.fail(FerriteStatus::InvalidState, "invalid state: call ferrite_session_train_prepare first"));
        }
        self.train.trainer.as_mut().ok_or(FerriteStatus::InvalidState)
    }

    fn train_step(&mut self, update: bool) -> FerriteStatus {
        let t = match self.trainer() {
            Ok(t) => t,
            Err(st) => return st,
        };
        let (n_in, expected_len) = (t.input_count(), t.expected_shape().iter().product::<usize>());
        let lens: Vec<usize> = (0..n_in).map(|i| t.input_shape(i).map_or(0, |s| s.iter().product())).collect();
        let bound: Option<Vec<(*const u8, usize)>> = self.train.inputs.iter().copied().collect();
        let (Some(ins), Some(exp)) = (bound, self.train.expected) else {
            let msg = format!("invalid state: a step needs all {n_in} inputs and the expected output bound (ferrite_session_train_set_input / _set_expected)");
            return self.fail(FerriteStatus::InvalidState, &msg);
        };
        for (i, (&(_, bytes), &need)) in ins.iter().zip(&lens).enumerate() {
            if bytes != need * 4 {
                return self.fail(FerriteStatus::InvalidArgument, &format!("invalid argument: input {i} of a batch takes {} bytes, {bytes} bound", need * 4));
            }
        }
        if exp.1 != expected_len * 4 {
            return self
                .fail(FerriteStatus::InvalidArgument, &format!("invalid argument: the expected output takes {} bytes, {} bound", expected_len * 4, exp.1));
        }
        // SAFETY: bound buffers are live caller memory of the recorded sizes,
        // 4-byte aligned (checked when bound), holding floats (the binding contract).
        let as_f32 = |(p, n): (*const u8, usize)| unsafe { std::slice::from_raw_parts(p.cast::<f32>(), n / 4) };
        let in_slices: Vec<&[f32]> = ins.into_iter().map(as_f32).collect();
        let y = as_f32(exp);
        let Some(t) = self.train.trainer.as_mut() else { return FerriteStatus::InvalidState };
        let r = if update { t.step(&in_slices, y).map(|_| ()) } else { t.evaluate(&in_slices, y).map(|_| ()) };
        let st = self.check(r);
        if st == FerriteStatus::Ok {
            self.train.stepped = true;
        }
        st
    }
}

/// Reads a NUL-terminated path.
///
/// # Safety
/// `path` is a NUL-terminated string.
unsafe fn path_of(path: *const c_char) -> String {
    // SAFETY: per this function's contract.
    unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned()
}

/// Sets how to train. Before `ferrite_session_train_prepare` (again, to change it).
///
/// # Safety
/// `s` is NULL or a live session; `info` is NULL or points to a `FerriteTrainInfo`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_set_info(s: *mut FerriteSession, info: *const FerriteTrainInfo) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `info` checked for null.
    unsafe {
        with_session(s, |s| {
            let Some(info) = info.as_ref() else { return FerriteStatus::NullArgument };
            match config_of(info) {
                Ok(c) => {
                    s.train.config = Some(c);
                    FerriteStatus::Ok
                }
                Err(msg) => s.fail(FerriteStatus::InvalidArgument, &msg),
            }
        })
    }
}

/// Builds the training step for the session's model with the info set before:
/// the model's weights as in the file (a new prepare starts over from them).
///
/// # Safety
/// `s` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_prepare(s: *mut FerriteSession) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            let Some(config) = s.train.config.clone() else {
                return s.fail(FerriteStatus::InvalidState, "invalid state: call ferrite_session_train_set_info first");
            };
            s.train.trainer = None;
            s.train.stepped = false;
            match Trainer::from_session(&s.session, config) {
                Ok(t) => {
                    s.train.inputs = vec![None; t.input_count()];
                    s.train.expected = None;
                    s.train.trainer = Some(t);
                    FerriteStatus::Ok
                }
                Err(e) => s.fail_error(&e),
            }
        })
    }
}

/// Description of input `index` of one training batch (float32, batch first).
///
/// # Safety
/// `s` is NULL or a live session; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_input_info(s: *mut FerriteSession, index: usize, info: *mut FerriteTensorInfo) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `info` checked for null.
    unsafe {
        with_session(s, |s| {
            let Some(info) = info.as_mut() else { return FerriteStatus::NullArgument };
            let shape = match s.trainer() {
                Ok(t) => t.input_shape(index).map(<[usize]>::to_vec),
                Err(st) => return st,
            };
            let name = s.input_names.get(index).map_or(std::ptr::null(), |n| n.as_ptr());
            match shape {
                Ok(shape) => fill_info(s, ferrite::DType::F32, &shape, name, info),
                Err(e) => s.fail_error(&e),
            }
        })
    }
}

/// Description of the expected output of one training batch (float32).
///
/// # Safety
/// `s` is NULL or a live session; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_expected_info(s: *mut FerriteSession, info: *mut FerriteTensorInfo) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `info` checked for null.
    unsafe {
        with_session(s, |s| {
            let Some(info) = info.as_mut() else { return FerriteStatus::NullArgument };
            let shape = match s.trainer() {
                Ok(t) => t.expected_shape().to_vec(),
                Err(st) => return st,
            };
            let name = s.output_names.first().map_or(std::ptr::null(), |n| n.as_ptr());
            fill_info(s, ferrite::DType::F32, &shape, name, info)
        })
    }
}

/// Checks and records a training binding.
fn bind_batch(s: &mut FerriteSession, data: *const c_void, bytes: usize) -> Result<(*const u8, usize), FerriteStatus> {
    if data.is_null() {
        return Err(FerriteStatus::NullArgument);
    }
    if !data.cast::<f32>().is_aligned() {
        return Err(s.fail(FerriteStatus::InvalidArgument, "invalid argument: training buffers hold floats and must be 4-byte aligned"));
    }
    Ok((data.cast::<u8>(), bytes))
}

/// Binds `bytes` bytes of floats at `data` as input `index` of the training
/// batches (shape from `ferrite_session_train_input_info`). Not copied: read by
/// every step until rebound.
///
/// # Safety
/// `s` is NULL or a live session; `data` points to `bytes` readable bytes that
/// stay valid while bound.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_set_input(s: *mut FerriteSession, index: usize, data: *const c_void, bytes: usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            if let Err(st) = s.trainer() {
                return st;
            }
            let b = match bind_batch(s, data, bytes) {
                Ok(b) => b,
                Err(st) => return st,
            };
            let n = s.train.inputs.len();
            match s.train.inputs.get_mut(index) {
                Some(slot) => {
                    *slot = Some(b);
                    FerriteStatus::Ok
                }
                None => s.fail(FerriteStatus::InvalidArgument, &format!("invalid argument: input {index} does not exist ({n} inputs)")),
            }
        })
    }
}

/// Binds the expected output of the training batches (`index` 0: the model's
/// output the loss reads), as `ferrite_session_train_set_input` binds inputs.
///
/// # Safety
/// As `ferrite_session_train_set_input`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_set_expected(s: *mut FerriteSession, index: usize, data: *const c_void, bytes: usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            if let Err(st) = s.trainer() {
                return st;
            }
            if index != 0 {
                return s.fail(FerriteStatus::InvalidArgument, &format!("invalid argument: expected output {index} does not exist (training reads output 0)"));
            }
            match bind_batch(s, data, bytes) {
                Ok(b) => {
                    s.train.expected = Some(b);
                    FerriteStatus::Ok
                }
                Err(st) => st,
            }
        })
    }
}

/// One training step on the bound batch (`update_weights`), or an evaluation of
/// it that changes nothing (`!update_weights`, as nnfw_train's flag).
///
/// # Safety
/// `s` is NULL or a live session whose bound training buffers are valid.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_step(s: *mut FerriteSession, update_weights: bool) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_session(s, |s| s.train_step(update_weights)) }
}

/// The loss of the last step or evaluation in `*loss` (its forward pass, before
/// the update); `index` 0 (the one loss).
///
/// # Safety
/// `s` is NULL or a live session; `loss` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_loss(s: *mut FerriteSession, index: usize, loss: *mut f32) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `loss` checked for null.
    unsafe { with_session(s, |s| metric(s, index, loss, |m| m.loss)) }
}

/// The categorical accuracy of the last step or evaluation's batch in `*accuracy`.
///
/// # Safety
/// `s` is NULL or a live session; `accuracy` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_accuracy(s: *mut FerriteSession, accuracy: *mut f32) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `accuracy` checked for null.
    unsafe { with_session(s, |s| metric(s, 0, accuracy, |m| m.accuracy)) }
}

/// # Safety
/// `out` is NULL or writable.
unsafe fn metric(s: &mut FerriteSession, index: usize, out: *mut f32, pick: fn(&ferrite::BatchMetrics) -> f32) -> FerriteStatus {
    // SAFETY: per this function's contract.
    let Some(out) = (unsafe { out.as_mut() }) else { return FerriteStatus::NullArgument };
    if index != 0 {
        return s.fail(FerriteStatus::InvalidArgument, &format!("invalid argument: loss {index} does not exist (one loss)"));
    }
    let m = match s.trainer() {
        Ok(t) => t.last_metrics(),
        Err(st) => return st,
    };
    if !s.train.stepped {
        return s.fail(FerriteStatus::InvalidState, "invalid state: no training step or evaluation has run");
    }
    *out = pick(&m);
    FerriteStatus::Ok
}

/// Writes the model with the trained weights to `path` (circle when it ends in
/// `.circle`, else tflite), through a temporary file renamed into place.
///
/// # Safety
/// `s` is NULL or a live session; `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_export(s: *mut FerriteSession, path: *const c_char) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_path(s, path, |t, p| t.export(p)) }
}

/// Saves the trained weights, optimizer state and step count to `path`.
///
/// # Safety
/// `s` is NULL or a live session; `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_save_checkpoint(s: *mut FerriteSession, path: *const c_char) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_path(s, path, |t, p| t.save_checkpoint(p)) }
}

/// Restores a checkpoint saved with the same model and training info: training
/// then goes on bit-identically to never having stopped.
///
/// # Safety
/// `s` is NULL or a live session; `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_train_load_checkpoint(s: *mut FerriteSession, path: *const c_char) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_path(s, path, |t, p| t.load_checkpoint(p)) }
}

/// Runs `f` on the session's trainer with a path argument.
///
/// # Safety
/// `s` is NULL or a live session; `path` is NULL or a NUL-terminated string.
unsafe fn with_path(s: *mut FerriteSession, path: *const c_char, f: impl FnOnce(&mut Trainer, &str) -> ferrite::Result<()>) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            if path.is_null() {
                return FerriteStatus::NullArgument;
            }
            let p = path_of(path);
            let r = match s.trainer() {
                Ok(t) => f(t, &p),
                Err(st) => return st,
            };
            s.check(r)
        })
    }
}
