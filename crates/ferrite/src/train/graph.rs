//! The training step as one list of steps over one planned arena: the forward
//! ops at the training batch size (kernels from the same backends inference
//! uses), the loss, the backward ops in reverse order with gradient sums where a
//! tensor fans out, and an optimizer update per trainable weight right after its
//! gradient is computed. Every tensor of the step (activations, gradients, weights,
//! optimizer state) is a slot planned from its lifetime by `memory::plan`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::grad;
use smallvec::SmallVec;

use super::backward::{self, Backward, BackwardOp, Operand};
use super::{Loss, LossReduction, Optimizer, TrainConfig};
use crate::backend::cpu::CpuBackend;
#[cfg(feature = "reference")]
use crate::backend::reference::ReferenceBackend;
use crate::backend::{typed, typed_mut, Backend, BackendContext, InputDesc, KernelFn, OpContext};
use crate::compile::AlignedBytes;
use crate::error::{Detail, Error, Location, Result};
use crate::memory::{self, Lifetime, MemoryPlan};
use crate::model::{DType, Model, Op, OpCode};
use crate::ops::{Activation, OpParams};

/// Where a step reads an input from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Src {
    /// An arena slot.
    Slot(usize),
    /// A frozen constant (owned, aligned copy).
    Const(usize),
}

/// What part of the training step a step belongs to (in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    Forward,
    Loss,
    Backward,
}

pub(super) struct Step {
    pub ins: SmallVec<[Option<Src>; 8]>,
    pub outs: SmallVec<[usize; 4]>,
    pub kernel: KernelFn,
    pub phase: Phase,
    /// The model op this step belongs to, for errors.
    pub op: Option<usize>,
}

/// One planned buffer of the step.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub bytes: usize,
    /// Alive for the whole step and kept between steps (inputs, labels, weights,
    /// optimizer state, metrics).
    pub persistent: bool,
    pub offset: usize,
    first: usize,
    last: usize,
}

/// A trainable weight or bias.
#[derive(Debug, Clone)]
pub(super) struct Param {
    /// The tensor the op reads (a DEQUANTIZE output for promoted float16 weights).
    pub tensor: usize,
    /// The tensor whose buffer holds the weights in the file.
    pub stored: usize,
    /// The weights are stored as float16 in the file.
    pub fp16: bool,
    pub value: usize,
    /// Optimizer state slots (momentum; Adam's m and v).
    pub state: Vec<usize>,
    pub numel: usize,
}

/// A model input of the training step.
#[derive(Debug, Clone)]
pub(super) struct IoSlot {
    /// The model tensor.
    #[allow(dead_code)]
    pub tensor: usize,
    pub slot: usize,
    pub shape: Vec<usize>,
}

pub(super) struct TrainGraph {
    pub slots: Vec<Slot>,
    pub steps: Vec<Step>,
    pub consts: Vec<AlignedBytes>,
    pub inputs: Vec<IoSlot>,
    pub expected: IoSlot,
    pub output: IoSlot,
    pub metrics: usize,
    pub params: Vec<Param>,
    pub plan: MemoryPlan,
    /// The optimizer's step number t (from 1) of the update being run.
    pub step_counter: Arc<AtomicU64>,
}

fn unsupported(op: usize, name: &str, msg: impl Into<String>) -> Error {
    Error::Unsupported(Detail::at(Location::op(0, op, name), msg.into()))
}

/// The fused activation of an op's options.
fn fused_activation(p: &OpParams) -> Activation {
    match p {
        OpParams::Conv2D { activation, .. }
        | OpParams::DepthwiseConv2D { activation, .. }
        | OpParams::Pool2D { activation, .. }
        | OpParams::FullyConnected { activation, .. }
        | OpParams::Concatenation { activation, .. }
        | OpParams::Binary { activation, .. }
        | OpParams::TransposeConv { activation, .. } => *activation,
        _ => Activation::None,
    }
}

struct Builder {
    sg: usize,
    slots: Vec<Slot>,
    steps: Vec<Step>,
    consts: Vec<AlignedBytes>,
    max_bytes: usize,
}

impl Builder {
    fn slot(&mut self, bytes: usize, persistent: bool) -> usize {
        self.slots.push(Slot { bytes, persistent, offset: 0, first: usize::MAX, last: 0 });
        self.slots.len() - 1
    }
    fn push(&mut self, ins: SmallVec<[Option<Src>; 8]>, outs: SmallVec<[usize; 4]>, kernel: KernelFn, phase: Phase, op: Option<usize>) {
        let si = self.steps.len();
        for s in ins.iter().flatten().filter_map(|s| if let Src::Slot(s) = s { Some(*s) } else { None }).chain(outs.iter().copied()) {
            let sl = &mut self.slots[s];
            sl.first = sl.first.min(si);
            sl.last = sl.last.max(si);
        }
        self.steps.push(Step { ins, outs, kernel, phase, op });
    }
    fn bytes_of(&self, dtype: DType, shape: &[usize], what: impl Fn() -> String) -> Result<usize> {
        let size = dtype.size().ok_or_else(|| Error::Unsupported(format!("{}: element type {}", what(), dtype.name()).into()))?;
        shape
            .iter()
            .try_fold(size, |a, &d| a.checked_mul(d))
            .filter(|&b| b <= self.max_bytes)
            .ok_or_else(|| Error::ResourceLimit(format!("{}: shape {shape:?} exceeds the limit of {} bytes", what(), self.max_bytes).into()))
    }
}

/// Builds the training step of subgraph `sg` of `model`.
pub(super) fn build(model: &Model, sg: usize, cfg: &TrainConfig, ctx: &mut BackendContext) -> Result<TrainGraph> {
    let g = model.subgraphs().get(sg).ok_or_else(|| Error::InvalidArgument(format!("no subgraph {sg}").into()))?;
    let batch = cfg.batch_size;
    if batch == 0 {
        return Err(Error::InvalidArgument("batch size must be at least 1".into()));
    }
    let n_ops = g.ops.len();
    for (k, op) in g.ops.iter().enumerate() {
        if matches!(op.code, OpCode::Builtin(B::IF | B::WHILE | B::CALL_ONCE)) {
            return Err(unsupported(k, &op.code.name(), "training does not support control flow"));
        }
    }
    if g.outputs.len() != 1 {
        return Err(Error::Unsupported(format!("training needs a model with one output, this one has {}", g.outputs.len()).into()));
    }
    let first_trainable = match cfg.num_trainable_ops {
        None => 0,
        Some(n) => n_ops.saturating_sub(n),
    };
    let mut b = Builder { sg, slots: Vec::new(), steps: Vec::new(), consts: Vec::new(), max_bytes: cfg.max_arena_bytes };
    let nt = g.tensors.len();
    let mut shape: Vec<Option<Vec<usize>>> = vec![None; nt];
    let mut dtype: Vec<DType> = g.tensors.iter().map(|t| t.dtype).collect();
    let mut slot_of: Vec<Option<usize>> = vec![None; nt];
    let mut const_of: Vec<Option<usize>> = vec![None; nt];
    let mut producer: Vec<Option<usize>> = vec![None; nt];
    // float16 constants behind DEQUANTIZE are promoted: the DEQUANTIZE output is
    // a float32 constant and the op does not run.
    let mut promoted: Vec<Option<usize>> = vec![None; nt];
    let mut skip = vec![false; n_ops];
    for (k, op) in g.ops.iter().enumerate() {
        if let (OpCode::Builtin(B::DEQUANTIZE), Some(Some(src)), Some(&out)) = (&op.code, op.inputs.first(), op.outputs.first()) {
            let t = &g.tensors[*src];
            if t.dtype == DType::F16 && t.is_const() && t.sparsity.is_none() {
                let data = model.const_data(t).ok_or_else(|| unsupported(k, "DEQUANTIZE", "float16 constant without data"))?;
                let vals: Vec<f32> = data.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
                b.consts.push(AlignedBytes::from_slice(bytemuck::cast_slice(&vals)));
                const_of[out] = Some(b.consts.len() - 1);
                promoted[out] = Some(*src);
                dtype[out] = DType::F32;
                shape[out] = Some(t.shape.clone());
                skip[k] = true;
            }
        }
    }
    let is_const = |t: usize| g.tensors[t].is_const() || promoted[t].is_some();
    // Uses of each tensor as an op input (for the shared-weight check).
    let mut uses = vec![0usize; nt];
    for (k, op) in g.ops.iter().enumerate() {
        if !skip[k] {
            for &t in op.inputs.iter().flatten() {
                uses[t] += 1;
            }
        }
    }
    // Trainable weights: float constants in the trainable inputs of trainable ops.
    let mut params: Vec<Param> = Vec::new();
    let mut param_of: Vec<Option<usize>> = vec![None; nt];
    let mut op_params: Vec<SmallVec<[(usize, usize); 2]>> = vec![SmallVec::new(); n_ops];
    for (k, op) in g.ops.iter().enumerate().skip(first_trainable) {
        if skip[k] {
            continue;
        }
        for &i in backward::trainable_inputs(op) {
            let Some(Some(t)) = op.inputs.get(i).copied() else { continue };
            if !is_const(t) || dtype[t] != DType::F32 {
                continue;
            }
            let info = &g.tensors[t];
            if info.sparsity.is_some() {
                return Err(unsupported(k, &op.code.name(), format!("trainable tensor {t} ('{}') is stored sparse", info.name)));
            }
            if uses[t] > 1 || param_of[t].is_some() {
                // One buffer read by several ops would train into one value from several
                // gradients; the model is refused (see the README: shared constants).
                return Err(unsupported(
                    k,
                    &op.code.name(),
                    format!("trainable tensor {t} ('{}') is shared by {} ops; training needs each op's weights in a buffer of its own", info.name, uses[t]),
                ));
            }
            let numel = info.numel();
            let bytes = b.bytes_of(DType::F32, &info.shape, || format!("tensor {t}"))?;
            let value = b.slot(bytes, true);
            let state_n = match cfg.optimizer {
                Optimizer::Sgd { momentum: 0.0, .. } => 0,
                Optimizer::Sgd { .. } => 1,
                Optimizer::Adam { .. } => 2,
            };
            let state = (0..state_n).map(|_| b.slot(bytes, true)).collect();
            param_of[t] = Some(params.len());
            op_params[k].push((i, params.len()));
            slot_of[t] = Some(value);
            shape[t] = Some(info.shape.clone());
            params.push(Param { tensor: t, stored: promoted[t].unwrap_or(t), fp16: promoted[t].is_some(), value, state, numel });
        }
    }
    // Frozen constants: an aligned copy each.
    for (t, info) in g.tensors.iter().enumerate() {
        if info.is_const() && param_of[t].is_none() && const_of[t].is_none() {
            if let Some(d) = model.const_data(info) {
                b.consts.push(AlignedBytes::from_slice(d));
                const_of[t] = Some(b.consts.len() - 1);
                shape[t] = Some(info.shape.clone());
            }
        }
    }
    // Model inputs at the training batch size.
    let mut inputs = Vec::new();
    for &t in &g.inputs {
        let info = &g.tensors[t];
        if info.dtype != DType::F32 {
            return Err(Error::Unsupported(format!("input tensor {t} ('{}') is {}; training takes float32 inputs", info.name, info.dtype.name()).into()));
        }
        let mut s = info.shape.clone();
        match s.first_mut() {
            Some(d) if *d == 1 || *d == batch => *d = batch,
            _ => {
                return Err(Error::Unsupported(
                    format!("input tensor {t} ('{}') has shape {:?}; training needs a leading batch dimension of 1", info.name, info.shape).into(),
                ))
            }
        }
        let bytes = b.bytes_of(DType::F32, &s, || format!("input {t}"))?;
        let slot = b.slot(bytes, true);
        slot_of[t] = Some(slot);
        shape[t] = Some(s.clone());
        inputs.push(IoSlot { tensor: t, slot, shape: s });
    }
    // Forward steps.
    let cpu = CpuBackend;
    // Ops the CPU backend lacks (in a selective build too) run on the reference
    // backend when the build has it.
    #[cfg(feature = "reference")]
    let reference = ReferenceBackend;
    for (k, op) in g.ops.iter().enumerate() {
        if skip[k] {
            continue;
        }
        let name = op.code.name();
        // A leading 1 in a RESHAPE target means the batch: rewritten to the training batch.
        let mut op_owned: Option<Op> = None;
        let mut patched: Option<usize> = None;
        if op.code == OpCode::Builtin(B::RESHAPE) && batch != 1 {
            if let Some(Some(st)) = op.inputs.get(1).copied() {
                if let (Some(c), DType::I32) = (const_of[st], dtype[st]) {
                    let mut v: Vec<i32> = b.consts[c].bytes().chunks_exact(4).map(|x| i32::from_le_bytes([x[0], x[1], x[2], x[3]])).collect();
                    if v.first() == Some(&1) {
                        v[0] = batch as i32;
                        b.consts.push(AlignedBytes::from_slice(bytemuck::cast_slice(&v)));
                        patched = Some(b.consts.len() - 1);
                    }
                }
            }
            if let OpParams::Reshape { new_shape: Some(ns) } = &op.params {
                if ns.first() == Some(&1) {
                    let mut o = op.clone();
                    let mut ns = ns.clone();
                    ns[0] = batch as i32;
                    o.params = OpParams::Reshape { new_shape: Some(ns) };
                    op_owned = Some(o);
                }
            }
        }
        let op_ref = op_owned.as_ref().unwrap_or(op);
        let mut srcs: SmallVec<[Option<Src>; 8]> = SmallVec::new();
        for (i, inp) in op.inputs.iter().enumerate() {
            srcs.push(match inp {
                None => None,
                Some(t) => {
                    let t = *t;
                    if i == 1 && patched.is_some() {
                        patched.map(Src::Const)
                    } else if let Some(s) = slot_of[t] {
                        Some(Src::Slot(s))
                    } else if let Some(c) = const_of[t] {
                        Some(Src::Const(c))
                    } else {
                        return Err(unsupported(k, &name, format!("input tensor {t} is not computed before this op")));
                    }
                }
            });
        }
        let built = {
            let mut descs = Vec::with_capacity(op.inputs.len());
            for (inp, src) in op.inputs.iter().zip(&srcs) {
                descs.push(match (inp, src) {
                    (Some(t), Some(src)) => {
                        let info = &g.tensors[*t];
                        let (value, constant) = match src {
                            Src::Const(c) => (Some(b.consts[*c].bytes()), true),
                            Src::Slot(_) => (None, false),
                        };
                        let s = match src {
                            Src::Const(c) if Some(*c) == patched => vec![b.consts[*c].bytes().len() / 4],
                            _ => shape[*t].clone().unwrap_or_default(),
                        };
                        Some(InputDesc {
                            tensor: *t,
                            dtype: dtype[*t],
                            shape: s,
                            value,
                            constant,
                            quant: info.quant.as_ref(),
                            sparsity: if promoted[*t].is_some() { None } else { info.sparsity.as_ref() },
                        })
                    }
                    _ => None,
                });
            }
            let octx = OpContext {
                subgraph: b.sg,
                op_index: k,
                op: op_ref,
                inputs: descs,
                outputs: op.outputs.iter().map(|&o| &g.tensors[o]).collect(),
                custom_options: model.custom_options(op),
                epilogue: None,
                input_pad: None,
                max_bytes: b.max_bytes,
            };
            match cpu.build(&octx, ctx) {
                #[cfg(feature = "reference")]
                Err(Error::Unsupported(_)) => reference.build(&octx, ctx).or_else(|_| cpu.build(&octx, ctx)),
                r => r,
            }
        }
        .map_err(|e| e.located(Location::op(sg, k, name.clone())))?;
        ctx.take_packed_by_build();
        if built.outputs.len() != op.outputs.len() {
            return Err(unsupported(k, &name, "kernel output count differs from the model's"));
        }
        // Ops on constants (and SHAPE, which reads only its input's shape) run once
        // here: a converter's dynamic-batch shape arithmetic (SHAPE -> STRIDED_SLICE ->
        // PACK -> RESHAPE) becomes the constant target of the RESHAPE at batch B.
        let shape_only = op.code == OpCode::Builtin(B::SHAPE);
        if shape_only || (op_params[k].is_empty() && srcs.iter().all(|s| matches!(s, None | Some(Src::Const(_))))) {
            let mut kernel = built.kernel;
            let mut results = Vec::with_capacity(built.outputs.len());
            for (&t, (dt, s)) in op.outputs.iter().zip(&built.outputs) {
                results.push(AlignedBytes::zeroed(b.bytes_of(*dt, s, || format!("tensor {t}"))?));
            }
            let placeholders: Vec<Option<AlignedBytes>> =
                srcs.iter().map(|s| if let Some(Src::Slot(s)) = s { Some(AlignedBytes::zeroed(b.slots[*s].bytes)) } else { None }).collect();
            let ins: Vec<Option<&[u8]>> = srcs
                .iter()
                .zip(&placeholders)
                .map(|(s, p)| match s {
                    Some(Src::Const(c)) => Some(b.consts[*c].bytes()),
                    Some(Src::Slot(_)) => p.as_ref().map(AlignedBytes::bytes),
                    None => None,
                })
                .collect();
            {
                let mut outs: Vec<&mut [u8]> = results.iter_mut().map(AlignedBytes::bytes_mut).collect();
                kernel(&ins, &mut outs).map_err(|e| e.located(Location::op(sg, k, name.clone())))?;
            }
            for ((&t, (dt, s)), r) in op.outputs.iter().zip(&built.outputs).zip(results) {
                b.consts.push(r);
                const_of[t] = Some(b.consts.len() - 1);
                shape[t] = Some(s.clone());
                dtype[t] = *dt;
            }
            skip[k] = true;
            continue;
        }
        let mut outs: SmallVec<[usize; 4]> = SmallVec::new();
        for (&t, (dt, s)) in op.outputs.iter().zip(&built.outputs) {
            let bytes = b.bytes_of(*dt, s, || format!("tensor {t}"))?;
            let slot = b.slot(bytes, false);
            slot_of[t] = Some(slot);
            shape[t] = Some(s.clone());
            dtype[t] = *dt;
            producer[t] = Some(k);
            outs.push(slot);
        }
        b.push(srcs, outs, built.kernel, Phase::Forward, Some(k));
    }
    // The model output, the labels and the loss.
    let out_t = g.outputs[0];
    let out_slot = slot_of[out_t].ok_or_else(|| Error::Unsupported("the model output is not computed by any op".into()))?;
    let out_shape = shape[out_t].clone().unwrap_or_default();
    if dtype[out_t] != DType::F32 {
        return Err(Error::Unsupported(format!("the model output is {}; training needs float32", dtype[out_t].name()).into()));
    }
    let out_bytes = b.slots[out_slot].bytes;
    let expected_slot = b.slot(out_bytes, true);
    let metrics = b.slot(8, true);
    let classes = out_shape.last().copied().unwrap_or(1).max(1);
    let reduction = match cfg.reduction {
        LossReduction::SumOverBatchSize => grad::Reduction::SumOverBatchSize,
        LossReduction::Sum => grad::Reduction::Sum,
    };
    let mut grad_of: Vec<Option<usize>> = vec![None; nt];
    // Ops whose backward the loss computes (the SOFTMAX under cross-entropy).
    let mut fused_into_loss = vec![false; n_ops];
    match cfg.loss {
        Loss::MeanSquaredError => {
            let gslot = b.slot(out_bytes, false);
            grad_of[out_t] = Some(gslot);
            b.push(
                smallvec::smallvec![Some(Src::Slot(out_slot)), Some(Src::Slot(expected_slot))],
                smallvec::smallvec![gslot, metrics],
                Box::new(move |ins, outs| {
                    let (p, y) = (typed::<f32>(arg(ins, 0)?)?, typed::<f32>(arg(ins, 1)?)?);
                    let (d, m) = outs.split_at_mut(1);
                    let loss = grad::mse(p, y, batch, reduction, typed_mut::<f32>(d[0])?);
                    let acc = grad::categorical_accuracy(p, y, classes);
                    typed_mut::<f32>(m[0])?.copy_from_slice(&[loss, acc]);
                    Ok(())
                }),
                Phase::Loss,
                None,
            );
        }
        Loss::CategoricalCrossEntropy => {
            let sm = producer[out_t]
                .filter(|&k| g.ops[k].code == OpCode::Builtin(B::SOFTMAX))
                .ok_or_else(|| Error::Unsupported("categorical cross-entropy needs the model output to come from a SOFTMAX op".into()))?;
            let beta = match g.ops[sm].params {
                OpParams::Softmax { beta } => beta,
                _ => 1.0,
            };
            let z = g.ops[sm].inputs.first().copied().flatten().ok_or_else(|| unsupported(sm, "SOFTMAX", "missing input"))?;
            let zslot = slot_of[z].ok_or_else(|| unsupported(sm, "SOFTMAX", "its input is a constant"))?;
            let gslot = b.slot(b.slots[zslot].bytes, false);
            grad_of[z] = Some(gslot);
            fused_into_loss[sm] = true;
            b.push(
                smallvec::smallvec![Some(Src::Slot(zslot)), Some(Src::Slot(out_slot)), Some(Src::Slot(expected_slot))],
                smallvec::smallvec![gslot, metrics],
                Box::new(move |ins, outs| {
                    let (z, p, y) = (typed::<f32>(arg(ins, 0)?)?, typed::<f32>(arg(ins, 1)?)?, typed::<f32>(arg(ins, 2)?)?);
                    let (d, m) = outs.split_at_mut(1);
                    let loss = grad::softmax_cross_entropy(z, p, y, classes, beta, reduction, typed_mut::<f32>(d[0])?);
                    let acc = grad::categorical_accuracy(p, y, classes);
                    typed_mut::<f32>(m[0])?.copy_from_slice(&[loss, acc]);
                    Ok(())
                }),
                Phase::Loss,
                None,
            );
        }
    }
    // Which tensors lead back to a trainable weight: only those need gradients.
    let mut upstream = vec![false; nt];
    for (k, op) in g.ops.iter().enumerate().skip(first_trainable) {
        if skip[k] {
            continue;
        }
        let feeds = !op_params[k].is_empty() || op.inputs.iter().flatten().any(|&t| upstream[t]);
        if feeds {
            for &t in &op.outputs {
                upstream[t] = true;
            }
        }
    }
    let step_counter = Arc::new(AtomicU64::new(0));
    let pool = ctx.pool();
    // Backward, last op first.
    for k in (first_trainable..n_ops).rev() {
        let op = &g.ops[k];
        if skip[k] || fused_into_loss[k] {
            continue;
        }
        let name = op.code.name();
        let needs: Vec<bool> = op
            .inputs
            .iter()
            .enumerate()
            .map(|(i, t)| t.is_some_and(|t| op_params[k].iter().any(|&(pi, _)| pi == i) || (upstream[t] && !is_const(t))))
            .collect();
        if !needs.iter().any(|&n| n) {
            continue;
        }
        let Some(&y) = op.outputs.first() else { continue };
        let Some(mut gy) = grad_of[y] else { continue };
        if op.outputs.len() != 1 {
            return Err(unsupported(k, &name, "no backward kernel for an op with several outputs: it cannot be in the trainable part"));
        }
        let yslot = slot_of[y].ok_or_else(|| unsupported(k, &name, "output not computed"))?;
        // The fused activation first: the gradient at the op's pre-activation output.
        let act = fused_activation(&op.params);
        if act != Activation::None {
            let tmp = b.slot(b.slots[gy].bytes, false);
            let clamp = match act {
                Activation::Relu => Some(ferrite_kernels::Clamp::RELU),
                Activation::Relu6 => Some(ferrite_kernels::Clamp::RELU6),
                Activation::ReluN1To1 => Some(ferrite_kernels::Clamp::RELU_N1_TO_1),
                Activation::Tanh => None,
                _ => return Err(unsupported(k, &name, format!("no backward kernel for the fused activation {}", act.name()))),
            };
            let pool = pool.clone();
            b.push(
                smallvec::smallvec![Some(Src::Slot(yslot)), Some(Src::Slot(gy))],
                smallvec::smallvec![tmp],
                Box::new(move |ins, outs| {
                    let (yv, dy) = (typed::<f32>(arg(ins, 0)?)?, typed::<f32>(arg(ins, 1)?)?);
                    let dx = typed_mut::<f32>(outs[0])?;
                    match clamp {
                        Some(c) => grad::clamp(c, yv, dy, dx),
                        None => grad::unary(grad::UnaryGrad::Tanh, yv, yv, dy, dx, pool.as_deref()),
                    }
                    Ok(())
                }),
                Phase::Backward,
                Some(k),
            );
            gy = tmp;
        }
        let bop = BackwardOp {
            op,
            op_index: k,
            in_shapes: op.inputs.iter().map(|t| t.and_then(|t| shape[t].clone())).collect(),
            out_shapes: op.outputs.iter().map(|&t| shape[t].clone().unwrap_or_default()).collect(),
            consts: op.inputs.iter().map(|t| t.and_then(|t| if param_of[t].is_none() { const_of[t].map(|c| b.consts[c].bytes()) } else { None })).collect(),
            needs: needs.clone(),
            pool: pool.clone(),
        };
        let Backward { reads, kernel } = match backward::build(&bop) {
            None => return Err(unsupported(k, &name, format!("{name} has no backward kernel, and it is in the trainable part (see --num_trainable_ops)"))),
            Some(r) => r.map_err(|e| e.located(Location::op(sg, k, name.clone())))?,
        };
        let mut ins: SmallVec<[Option<Src>; 8]> = SmallVec::new();
        for r in reads {
            ins.push(Some(match r {
                Operand::Input(i) => {
                    let t = op.inputs.get(i).copied().flatten().ok_or_else(|| unsupported(k, &name, format!("input {i} is missing")))?;
                    match (slot_of[t], const_of[t]) {
                        (Some(s), _) => Src::Slot(s),
                        (None, Some(c)) => Src::Const(c),
                        _ => return Err(unsupported(k, &name, format!("input {i} has no value"))),
                    }
                }
                Operand::Output(i) => {
                    Src::Slot(op.outputs.get(i).and_then(|&t| slot_of[t]).ok_or_else(|| unsupported(k, &name, format!("output {i} is missing")))?)
                }
                Operand::OutputGrad => Src::Slot(gy),
            }));
        }
        // Where each needed gradient goes: a weight's own gradient slot; a tensor's
        // gradient slot on its first contribution, else a temporary added to it.
        let mut outs: SmallVec<[usize; 4]> = SmallVec::new();
        let mut accumulate: SmallVec<[(usize, usize); 2]> = SmallVec::new();
        let mut updates: SmallVec<[(usize, usize); 2]> = SmallVec::new();
        for (i, t) in op.inputs.iter().enumerate() {
            let (true, Some(t)) = (needs[i], *t) else { continue };
            let bytes = shape[t].as_ref().map_or(Ok(0), |s| b.bytes_of(DType::F32, s, || format!("gradient of tensor {t}")))?;
            if let Some(&(_, p)) = op_params[k].iter().find(|&&(pi, _)| pi == i) {
                let gslot = b.slot(bytes, false);
                outs.push(gslot);
                updates.push((p, gslot));
            } else if let Some(acc) = grad_of[t] {
                let tmp = b.slot(bytes, false);
                outs.push(tmp);
                accumulate.push((acc, tmp));
            } else {
                let gslot = b.slot(bytes, false);
                grad_of[t] = Some(gslot);
                outs.push(gslot);
            }
        }
        b.push(ins, outs, kernel, Phase::Backward, Some(k));
        for (acc, tmp) in accumulate {
            b.push(
                smallvec::smallvec![Some(Src::Slot(tmp))],
                smallvec::smallvec![acc],
                Box::new(|ins, outs| {
                    grad::accumulate(typed_mut::<f32>(outs[0])?, typed::<f32>(arg(ins, 0)?)?);
                    Ok(())
                }),
                Phase::Backward,
                Some(k),
            );
        }
        for (p, gslot) in updates {
            let param = &params[p];
            let mut outs: SmallVec<[usize; 4]> = smallvec::smallvec![param.value];
            outs.extend(param.state.iter().copied());
            let kernel = update_kernel(cfg.optimizer, step_counter.clone());
            b.push(smallvec::smallvec![Some(Src::Slot(gslot))], outs, kernel, Phase::Backward, Some(k));
        }
    }
    // Plan: persistent slots live through every step.
    let n_steps = b.steps.len().max(1);
    let mut lifetimes = Vec::with_capacity(b.slots.len());
    for (i, s) in b.slots.iter().enumerate() {
        let (first, last) = if s.persistent || s.first == usize::MAX { (0, n_steps - 1) } else { (s.first, s.last.max(s.first)) };
        lifetimes.push(Lifetime { tensor: i, bytes: s.bytes, first, last });
    }
    let plan = memory::plan(&lifetimes, cfg.max_arena_bytes)?;
    for &(i, off) in &plan.offsets {
        b.slots[i].offset = off;
    }
    Ok(TrainGraph {
        slots: b.slots,
        steps: b.steps,
        consts: b.consts,
        inputs,
        expected: IoSlot { tensor: out_t, slot: expected_slot, shape: out_shape.clone() },
        output: IoSlot { tensor: out_t, slot: out_slot, shape: out_shape },
        metrics,
        params,
        plan,
        step_counter,
    })
}

fn arg<'a>(ins: &[Option<&'a [u8]>], i: usize) -> Result<&'a [u8]> {
    crate::backend::arg(ins, i)
}

/// The update of one weight: outputs are the weight, then its optimizer state.
fn update_kernel(opt: Optimizer, t: Arc<AtomicU64>) -> KernelFn {
    match opt {
        Optimizer::Sgd { learning_rate, momentum, nesterov } => Box::new(move |ins, outs| {
            let g = typed::<f32>(arg(ins, 0)?)?;
            if momentum == 0.0 {
                grad::sgd(typed_mut::<f32>(outs[0])?, g, learning_rate);
            } else {
                let (w, v) = outs.split_at_mut(1);
                grad::sgd_momentum(typed_mut::<f32>(w[0])?, g, typed_mut::<f32>(v[0])?, learning_rate, momentum, nesterov);
            }
            Ok(())
        }),
        Optimizer::Adam { learning_rate, beta1, beta2, epsilon } => Box::new(move |ins, outs| {
            let g = typed::<f32>(arg(ins, 0)?)?;
            // Keras computes the step's factor in float32 from the powers of the betas.
            let step = t.load(Ordering::Relaxed).max(1) as i32;
            let alpha = learning_rate * (1.0 - beta2.powi(step)).sqrt() / (1.0 - beta1.powi(step));
            let (w, rest) = outs.split_at_mut(1);
            let (m, v) = rest.split_at_mut(1);
            grad::adam(typed_mut::<f32>(w[0])?, g, typed_mut::<f32>(m[0])?, typed_mut::<f32>(v[0])?, alpha, beta1, beta2, epsilon);
            Ok(())
        }),
    }
}

impl TrainGraph {
    /// Runs the steps up to and including `upto` on `arena`.
    pub(super) fn run(&mut self, arena: &mut [u8], upto: Phase) -> Result<()> {
        let TrainGraph { slots, steps, consts, .. } = self;
        for step in steps.iter_mut() {
            if step.phase > upto {
                break;
            }
            let regions: SmallVec<[(usize, usize); 4]> = step.outs.iter().map(|&s| (slots[s].offset, slots[s].bytes)).collect();
            let (mut outs, gaps) = memory::split_regions(arena, &regions)?;
            let mut ins: SmallVec<[Option<&[u8]>; 8]> = SmallVec::new();
            for src in &step.ins {
                ins.push(match src {
                    None => None,
                    Some(Src::Const(c)) => Some(consts[*c].bytes()),
                    Some(Src::Slot(s)) => Some(memory::find_in_gaps(&gaps, slots[*s].offset, slots[*s].bytes)?),
                });
            }
            (step.kernel)(&ins, &mut outs).map_err(|e| match step.op {
                Some(k) => e.located(Location::op(0, k, String::new())),
                None => e,
            })?;
        }
        Ok(())
    }

    /// A slot's bytes.
    pub(super) fn slot_bytes<'a>(&self, arena: &'a [u8], s: usize) -> &'a [u8] {
        &arena[self.slots[s].offset..][..self.slots[s].bytes]
    }

    /// A slot's bytes, mutable.
    pub(super) fn slot_bytes_mut<'a>(&self, arena: &'a mut [u8], s: usize) -> &'a mut [u8] {
        &mut arena[self.slots[s].offset..][..self.slots[s].bytes]
    }

    /// Every persistent slot that holds training state (weights, then optimizer state), in a fixed order.
    pub(super) fn state_slots(&self) -> Vec<usize> {
        self.params.iter().map(|p| p.value).chain(self.params.iter().flat_map(|p| p.state.iter().copied())).collect()
    }

    /// Sets the optimizer step number of the next update.
    pub(super) fn set_step(&self, t: u64) {
        self.step_counter.store(t, Ordering::Relaxed);
    }
}
