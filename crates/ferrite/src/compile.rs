//! Compilation: shape inference and kernel selection per op (through the
//! backends), constant folding, then the static memory plan.

use std::sync::Arc;

use crate::backend::{Backend, BackendContext, Built, CustomOpRegistry, InputDesc, KernelFn, OpContext};
use crate::error::{Error, Result};
use crate::memory::{self, Lifetime, MemoryPlan};
use crate::model::{builtin, DType, Model, OpCode};

/// Owned, 8-byte aligned bytes (folded constants, realigned constants).
#[derive(Debug, Clone)]
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// Zeroed storage of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        AlignedBytes { words: vec![0; len.div_ceil(8)], len }
    }
    /// Copy of `b`.
    pub fn from_slice(b: &[u8]) -> Self {
        let mut a = Self::zeroed(b.len());
        a.bytes_mut().copy_from_slice(b);
        a
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
    /// The bytes, mutable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// Where a tensor's bytes live during execution.
#[derive(Debug, Clone)]
pub enum Loc {
    /// Not materialised (unused).
    None,
    /// In the session arena.
    Arena {
        /// Byte offset.
        offset: usize,
        /// Byte length.
        len: usize,
    },
    /// In the model bytes, used in place.
    Model(std::ops::Range<usize>),
    /// Owned by the compiled graph (folded or realigned constant).
    Owned(Arc<AlignedBytes>),
}

/// A tensor as compiled: resolved dtype, shape and location.
#[derive(Debug, Clone)]
pub struct TensorSlot {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Location.
    pub loc: Loc,
}

/// One executable step.
pub struct Step {
    /// Op index in the subgraph.
    pub op: usize,
    /// The kernel.
    pub kernel: KernelFn,
}

/// A subgraph ready to run.
pub struct CompiledGraph {
    /// Subgraph index.
    pub subgraph: usize,
    /// Per-tensor slots.
    pub tensors: Vec<TensorSlot>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// The memory plan.
    pub plan: MemoryPlan,
    /// Ops evaluated once at prepare because all their inputs were constant.
    pub folded_ops: usize,
}

/// Limits applied while compiling.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest arena (and largest folded constant) allowed.
    pub max_arena_bytes: usize,
}

fn bytes_of(dtype: DType, shape: &[usize], limits: &Limits, what: impl Fn() -> String) -> Result<usize> {
    let size = dtype.size().ok_or_else(|| Error::Unsupported(format!("{}: element type {}", what(), dtype.name())))?;
    let n = shape.iter().try_fold(size, |acc, &d| acc.checked_mul(d)).filter(|&b| b <= limits.max_arena_bytes);
    n.ok_or_else(|| {
        Error::ResourceLimit(format!("{}: shape {shape:?} of {} exceeds the session limit of {} bytes", what(), dtype.name(), limits.max_arena_bytes))
    })
}

/// Compiles subgraph `sg` with the given input shapes.
pub fn compile(
    model: &Model,
    sg: usize,
    input_shapes: &[Vec<usize>],
    backends: &[&dyn Backend],
    custom: &CustomOpRegistry,
    ctx: &mut BackendContext,
    limits: Limits,
) -> Result<CompiledGraph> {
    let g = model.subgraphs.get(sg).ok_or_else(|| Error::InvalidArgument(format!("subgraph {sg} does not exist")))?;
    let bytes = model.bytes();
    let mut tensors: Vec<TensorSlot> = g
        .tensors
        .iter()
        .map(|t| {
            let loc = match &t.data {
                None => Loc::None,
                // Kernels view constants as typed slices; realign the rare misaligned one.
                Some(r) if !(bytes.as_ptr() as usize + r.start).is_multiple_of(t.dtype.size().unwrap_or(1).min(8)) => {
                    Loc::Owned(Arc::new(AlignedBytes::from_slice(&bytes[r.clone()])))
                }
                Some(r) => Loc::Model(r.clone()),
            };
            TensorSlot { dtype: t.dtype, shape: t.shape.clone(), loc }
        })
        .collect();
    for (k, &t) in g.inputs.iter().enumerate() {
        if let Some(s) = input_shapes.get(k) {
            tensors[t].shape = s.clone();
        }
    }

    // Tensors that are read but never written (nor inputs) read as zeros, as in LiteRT.
    let mut produced = vec![false; tensors.len()];
    for &t in g.inputs.iter().chain(g.ops.iter().flat_map(|o| o.outputs.iter())) {
        produced[t] = true;
    }
    for op in &g.ops {
        for &t in op.inputs.iter().flatten() {
            if !produced[t] && matches!(tensors[t].loc, Loc::None) {
                let n = bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || format!("subgraph {sg} tensor {t}"))?;
                tensors[t].loc = Loc::Owned(Arc::new(AlignedBytes::zeroed(n)));
            }
        }
    }

    let mut steps = Vec::with_capacity(g.ops.len());
    let mut folded_ops = 0;
    for (oi, op) in g.ops.iter().enumerate() {
        // Snapshot constant sources so descriptors do not borrow `tensors`, which this loop updates.
        let held: Vec<Option<Loc>> = op.inputs.iter().map(|i| i.map(|t| tensors[t].loc.clone())).collect();
        let value_of = |k: usize| -> Option<&[u8]> {
            match held.get(k)?.as_ref()? {
                Loc::Model(r) => bytes.get(r.clone()),
                Loc::Owned(b) => Some(b.bytes()),
                _ => None,
            }
        };
        let inputs: Vec<Option<InputDesc<'_>>> = op
            .inputs
            .iter()
            .enumerate()
            .map(|(k, i)| {
                i.map(|t| InputDesc {
                    tensor: t,
                    dtype: tensors[t].dtype,
                    shape: tensors[t].shape.clone(),
                    value: value_of(k),
                    quant: g.tensors[t].quant.as_ref(),
                    sparsity: g.tensors[t].sparsity.as_ref(),
                })
            })
            .collect();
        let all_const = inputs.iter().flatten().all(|d| d.value.is_some());
        let octx = OpContext {
            subgraph: sg,
            op_index: oi,
            op,
            inputs,
            outputs: op.outputs.iter().map(|&o| &g.tensors[o]).collect(),
            custom_options: model.custom_options(op),
        };
        let built: Built = match &op.code {
            OpCode::Custom(name) => match custom.get(name) {
                Some(c) => c.build(&octx)?,
                None => return Err(octx.unsupported(format!("custom op '{name}' is not registered"))),
            },
            OpCode::Builtin(_) => {
                let mut last = None;
                let mut found = None;
                for b in backends {
                    match b.build(&octx, ctx) {
                        Ok(built) => {
                            found = Some(built);
                            break;
                        }
                        Err(Error::Unsupported(m)) => last = Some(Error::Unsupported(m)),
                        Err(e) => return Err(e),
                    }
                }
                match found {
                    Some(b) => b,
                    None => return Err(last.unwrap_or_else(|| octx.unsupported("no backend"))),
                }
            }
        };
        if built.outputs.len() != op.outputs.len() {
            return Err(octx.bad(format!("kernel produces {} outputs, the model lists {}", built.outputs.len(), op.outputs.len())));
        }
        for (k, (dtype, _)) in built.outputs.iter().enumerate() {
            let declared = g.tensors[op.outputs[k]].dtype;
            if *dtype != declared {
                return Err(octx.unsupported(format!(
                    "output {k} is declared {} but this kernel computes {} (quantized kernels are not implemented yet)",
                    declared.name(),
                    dtype.name()
                )));
            }
        }
        let Built { outputs, mut kernel } = built;
        for (&t, (dtype, shape)) in op.outputs.iter().zip(outputs) {
            tensors[t].dtype = dtype;
            tensors[t].shape = shape;
        }
        // SHAPE's result depends only on static shapes; ops on constants need running once only.
        let foldable = (all_const || op.code == OpCode::Builtin(builtin::SHAPE)) && !op.outputs.iter().any(|&o| g.tensors[o].is_variable);
        if foldable {
            let ins: Vec<Option<&[u8]>> = (0..op.inputs.len()).map(value_of).collect();
            let mut outs: Vec<AlignedBytes> = op
                .outputs
                .iter()
                .map(|&t| Ok(AlignedBytes::zeroed(bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || octx.at())?)))
                .collect::<Result<_>>()?;
            {
                let mut views: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.bytes_mut()).collect();
                kernel(&ins, &mut views).map_err(|e| Error::InvalidModel(format!("{}: evaluating constant op: {e}", octx.at())))?;
            }
            for (&t, o) in op.outputs.iter().zip(outs) {
                tensors[t].loc = Loc::Owned(Arc::new(o));
            }
            folded_ops += 1;
        } else {
            steps.push(Step { op: oi, kernel });
        }
    }

    // Lifetimes: subgraph inputs from step 0, step outputs from their step, to last use.
    let n_steps = steps.len();
    let mut first = vec![usize::MAX; tensors.len()];
    let mut last = vec![0usize; tensors.len()];
    for &t in &g.inputs {
        if matches!(tensors[t].loc, Loc::None) {
            first[t] = 0;
        }
    }
    for (si, st) in steps.iter().enumerate() {
        let op = &g.ops[st.op];
        for &t in &op.outputs {
            first[t] = first[t].min(si);
            last[t] = last[t].max(si);
        }
        for &t in op.inputs.iter().flatten() {
            if first[t] != usize::MAX {
                last[t] = last[t].max(si);
            }
        }
    }
    // Graph inputs and outputs stay valid for the whole run, as in LiteRT: a caller may
    // run again without setting inputs, and reads outputs after the run.
    for &t in g.inputs.iter().chain(&g.outputs) {
        if first[t] != usize::MAX {
            last[t] = n_steps.max(1) - 1;
        }
    }
    let mut lifetimes = Vec::new();
    for t in 0..tensors.len() {
        if first[t] != usize::MAX && matches!(tensors[t].loc, Loc::None) {
            let b = bytes_of(tensors[t].dtype, &tensors[t].shape, &limits, || format!("subgraph {sg} tensor {t} ('{}')", g.tensors[t].name))?;
            lifetimes.push(Lifetime { tensor: t, bytes: b, first: first[t], last: last[t].max(first[t]) });
        }
    }
    let plan = memory::plan(&lifetimes, limits.max_arena_bytes)?;
    for &(t, offset) in &plan.offsets {
        let len = lifetimes.iter().find(|l| l.tensor == t).map_or(0, |l| l.bytes);
        tensors[t].loc = Loc::Arena { offset, len };
    }
    Ok(CompiledGraph { subgraph: sg, tensors, steps, plan, folded_ops })
}

/// Runs the compiled steps over `arena`.
pub fn execute(g: &mut CompiledGraph, model: &Model, arena: &mut [u8]) -> Result<()> {
    let sub = &model.subgraphs[g.subgraph];
    let bytes = model.bytes();
    let CompiledGraph { steps, tensors, .. } = g;
    for st in steps.iter_mut() {
        let op = &sub.ops[st.op];
        let out_ranges: Vec<(usize, usize)> = op
            .outputs
            .iter()
            .map(|&t| match tensors[t].loc {
                Loc::Arena { offset, len } => Ok((offset, len)),
                _ => Err(Error::Runtime(format!("internal: output tensor {t} has no arena slot"))),
            })
            .collect::<Result<_>>()?;
        let (mut outs, gaps) = memory::split_regions(arena, &out_ranges)?;
        let ins: Vec<Option<&[u8]>> = op
            .inputs
            .iter()
            .map(|i| match i {
                None => Ok(None),
                Some(t) => match &tensors[*t].loc {
                    Loc::Arena { offset, len } => memory::find_in_gaps(&gaps, *offset, *len).map(Some),
                    Loc::Model(r) => Ok(bytes.get(r.clone())),
                    Loc::Owned(b) => Ok(Some(b.bytes())),
                    Loc::None => Err(Error::Runtime(format!("internal: input tensor {t} has no storage"))),
                },
            })
            .collect::<Result<_>>()?;
        (st.kernel)(&ins, &mut outs).map_err(|e| match e {
            Error::Runtime(m) => Error::Runtime(format!("subgraph {} op {} ({}): {m}", g.subgraph, st.op, op.code.name())),
            e => e,
        })?;
    }
    Ok(())
}
