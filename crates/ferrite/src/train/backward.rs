//! The backward op of each forward op: which forward tensors it reads and the
//! kernel (from `ferrite_kernels::grad`) that writes its inputs' gradients.
//!
//! To give an op a backward kernel, add an arm to [`build`]: declare what the
//! kernel reads ([`Operand`]s, in the order the kernel receives them) and return
//! a kernel that writes the gradient of every input flagged in
//! [`BackwardOp::needs`], in input order, overwriting them. The training graph
//! applies the op's fused activation to the output gradient before this kernel
//! runs (`Operand::OutputGrad` is the gradient before the activation), sums the
//! gradients of tensors read by several ops, and plans every slot.

use std::sync::Arc;

use smallvec::SmallVec;

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::grad::{self, BinaryGrad, UnaryGrad};
use ferrite_kernels::parallel::ThreadPool;

use crate::backend::{typed, typed_mut, KernelFn};
use crate::error::{Detail, Error, Location, Result};
use crate::model::{Op, OpCode};
use crate::ops::OpParams;

mod spatial;

/// What the backward kernel of one op is built from.
pub(super) struct BackwardOp<'a> {
    /// The forward op.
    pub op: &'a Op,
    /// Its index in the subgraph.
    pub op_index: usize,
    /// Shapes of the op's inputs at the training batch size (None: omitted input).
    pub in_shapes: Vec<Option<Vec<usize>>>,
    /// Shapes of its outputs.
    pub out_shapes: Vec<Vec<usize>>,
    /// Values of inputs that are frozen constants (axes, shapes, frozen weights).
    pub consts: Vec<Option<&'a [u8]>>,
    /// Inputs whose gradient the kernel must write.
    pub needs: Vec<bool>,
    /// The trainer's worker threads.
    pub pool: Option<Arc<ThreadPool>>,
}

impl BackwardOp<'_> {
    fn location(&self) -> Location {
        Location::op(0, self.op_index, self.op.code.name())
    }
    fn bad(&self, msg: impl Into<String>) -> Error {
        Error::Unsupported(Detail::at(self.location(), msg.into()))
    }
    fn shape(&self, i: usize) -> Result<&[usize]> {
        self.in_shapes.get(i).and_then(|s| s.as_deref()).ok_or_else(|| self.bad(format!("input {i} is missing")))
    }
    /// Integer values of a constant input (axes, paddings, slice bounds), int32 or
    /// int64: told apart by the bytes per element of the input's shape.
    fn const_ints(&self, i: usize) -> Result<Vec<i64>> {
        let v = self.consts.get(i).copied().flatten().ok_or_else(|| self.bad(format!("input {i} must be a constant for training")))?;
        let n: usize = self.shape(i)?.iter().product();
        if n > 0 && v.len() == n * 8 {
            return Ok(v.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect());
        }
        if v.len() != n * 4 {
            return Err(self.bad(format!("input {i} must be an int32 or int64 constant of {n} values, got {} bytes", v.len())));
        }
        Ok(v.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect())
    }
}

/// A forward tensor (or gradient) a backward kernel reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operand {
    /// The op's forward input `i`.
    Input(usize),
    /// The op's forward output `i`.
    Output(usize),
    /// The gradient of output 0, before the fused activation.
    OutputGrad,
}

/// A backward kernel and what it reads. The kernel gets the operands in `reads`
/// order and one output per needed input, in input order.
pub(super) struct Backward {
    pub reads: Vec<Operand>,
    pub kernel: KernelFn,
}

fn f32s<'a>(ins: &[Option<&'a [u8]>], i: usize) -> Result<&'a [f32]> {
    typed::<f32>(ins.get(i).copied().flatten().ok_or_else(|| Error::Runtime("backward operand missing".into()))?)
}

/// Splits the outputs into the (optional) gradients of `needs`, in input order.
/// No heap allocation: the training step allocates nothing.
fn grads<'o>(outs: &'o mut [&mut [u8]], needs: &[bool]) -> Result<SmallVec<[Option<&'o mut [f32]>; 4]>> {
    let mut it = outs.iter_mut();
    needs.iter().map(|&n| if n { it.next().map(|o| typed_mut::<f32>(o)).transpose() } else { Ok(None) }).collect()
}

/// The element-wise activations' backward kinds.
fn unary_kind(code: B, params: &OpParams) -> Option<UnaryGrad> {
    Some(match (code, params) {
        (B::RELU, _) => UnaryGrad::Relu,
        (B::RELU6, _) => UnaryGrad::Relu6,
        (B::RELU_N1_TO_1, _) => UnaryGrad::ReluN1To1,
        (B::RELU_0_TO_1, _) => UnaryGrad::Relu0To1,
        (B::LEAKY_RELU, OpParams::LeakyRelu { alpha }) => UnaryGrad::LeakyRelu(*alpha),
        (B::HARD_SWISH, _) => UnaryGrad::HardSwish,
        (B::LOGISTIC, _) => UnaryGrad::Logistic,
        (B::TANH, _) => UnaryGrad::Tanh,
        (B::GELU, OpParams::Gelu { approximate }) => UnaryGrad::Gelu { approximate: *approximate },
        _ => return None,
    })
}

/// The backward op of `b.op`, or `None` when ferrite has no backward kernel for it.
pub(super) fn build(b: &BackwardOp<'_>) -> Option<Result<Backward>> {
    let OpCode::Builtin(code) = b.op.code else { return None };
    let pool = b.pool.clone();
    let needs = b.needs.clone();
    if let Some(kind) = unary_kind(code, &b.op.params) {
        return Some(Ok(Backward {
            reads: vec![Operand::Input(0), Operand::Output(0), Operand::OutputGrad],
            kernel: Box::new(move |ins, outs| {
                let (x, y, dy) = (f32s(ins, 0)?, f32s(ins, 1)?, f32s(ins, 2)?);
                if let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() {
                    grad::unary(kind, x, y, dy, dx, pool.as_deref());
                }
                Ok(())
            }),
        }));
    }
    if let Some(r) = spatial::build(b, code) {
        return Some(r);
    }
    Some(match code {
        B::FULLY_CONNECTED => fully_connected(b),
        B::ADD | B::SUB | B::MUL | B::DIV => binary(b, code),
        B::PRELU => prelu(b),
        B::SOFTMAX | B::LOG_SOFTMAX => softmax(b, code),
        B::MEAN | B::SUM => reduce(b, code),
        B::RESHAPE | B::SQUEEZE | B::EXPAND_DIMS => Ok(Backward {
            reads: vec![Operand::OutputGrad],
            kernel: Box::new(move |ins, outs| {
                let dy = f32s(ins, 0)?;
                if let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() {
                    grad::reshape(dy, dx);
                }
                Ok(())
            }),
        }),
        _ => return None,
    })
}

fn fully_connected(b: &BackwardOp<'_>) -> Result<Backward> {
    let (x, w) = (b.shape(0)?, b.shape(1)?);
    if w.len() != 2 {
        return Err(b.bad(format!("weights must be 2-D, got {w:?}")));
    }
    let (out_n, in_n) = (w[0], w[1]);
    let batch = x.iter().product::<usize>() / in_n.max(1);
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    Ok(Backward {
        reads: vec![Operand::Input(0), Operand::Input(1), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let (x, w, dy) = (f32s(ins, 0)?, f32s(ins, 1)?, f32s(ins, 2)?);
            if x.len() < batch * in_n || w.len() < out_n * in_n || dy.len() < batch * out_n {
                return Err(Error::Runtime("fully-connected backward buffers do not match the planned shapes".into()));
            }
            let mut g = grads(outs, &needs)?.into_iter();
            let (dx, dw, db) = (g.next().flatten(), g.next().flatten(), g.next().flatten());
            grad::fully_connected(x, w, dy, (batch, in_n, out_n), dx, dw, db, pool.as_deref());
            Ok(())
        }),
    })
}

fn binary(b: &BackwardOp<'_>, code: B) -> Result<Backward> {
    let op = match code {
        B::ADD => BinaryGrad::Add,
        B::SUB => BinaryGrad::Sub,
        B::MUL => BinaryGrad::Mul,
        _ => BinaryGrad::Div,
    };
    let (ash, bsh) = (b.shape(0)?.to_vec(), b.shape(1)?.to_vec());
    let osh = b.out_shapes.first().cloned().unwrap_or_default();
    if ash.len() > ferrite_kernels::MAX_DIMS || bsh.len() > ferrite_kernels::MAX_DIMS || osh.len() > ferrite_kernels::MAX_DIMS {
        return Err(b.bad("rank above the kernels' limit"));
    }
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    Ok(Backward {
        reads: vec![Operand::Input(0), Operand::Input(1), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let (a, bv, dy) = (f32s(ins, 0)?, f32s(ins, 1)?, f32s(ins, 2)?);
            let mut g = grads(outs, &needs)?.into_iter();
            let (da, db) = (g.next().flatten(), g.next().flatten());
            grad::binary(op, (a, &ash), (bv, &bsh), dy, &osh, da, db, pool.as_deref());
            Ok(())
        }),
    })
}

fn prelu(b: &BackwardOp<'_>) -> Result<Backward> {
    let (xs, als) = (b.shape(0)?.to_vec(), b.shape(1)?.to_vec());
    let needs = b.needs.clone();
    Ok(Backward {
        reads: vec![Operand::Input(0), Operand::Input(1), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let (x, alpha, dy) = (f32s(ins, 0)?, f32s(ins, 1)?, f32s(ins, 2)?);
            let mut g = grads(outs, &needs)?.into_iter();
            let (dx, da) = (g.next().flatten(), g.next().flatten());
            grad::prelu(x, &xs, alpha, &als, dy, dx, da);
            Ok(())
        }),
    })
}

fn softmax(b: &BackwardOp<'_>, code: B) -> Result<Backward> {
    let n = b.shape(0)?.last().copied().unwrap_or(1);
    let beta = match b.op.params {
        OpParams::Softmax { beta } => beta,
        _ => 1.0,
    };
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    Ok(Backward {
        reads: vec![Operand::Output(0), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let (y, dy) = (f32s(ins, 0)?, f32s(ins, 1)?);
            if let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() {
                if code == B::SOFTMAX {
                    grad::softmax(y, dy, n, beta, dx, pool.as_deref());
                } else {
                    grad::log_softmax(y, dy, n, dx, pool.as_deref());
                }
            }
            Ok(())
        }),
    })
}

fn reduce(b: &BackwardOp<'_>, code: B) -> Result<Backward> {
    let shape = b.shape(0)?.to_vec();
    let rank = shape.len() as i64;
    let mut flags = vec![false; shape.len()];
    for a in b.const_ints(1)? {
        let a = if a < 0 { a + rank } else { a };
        if !(0..rank).contains(&a) {
            return Err(b.bad(format!("axis {a} out of range for rank {rank}")));
        }
        flags[a as usize] = true;
    }
    let count: usize = shape.iter().zip(&flags).filter(|(_, &f)| f).map(|(&d, _)| d).product();
    let scale = if code == B::MEAN { 1.0 / count.max(1) as f32 } else { 1.0 };
    let needs = b.needs.clone();
    Ok(Backward {
        reads: vec![Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let dy = f32s(ins, 0)?;
            if let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() {
                grad::reduce(&shape, &flags, dy, scale, dx);
            }
            Ok(())
        }),
    })
}

/// The inputs of `op` that are trainable weights when they are float constants:
/// the weights and biases of the layers Keras trains, PRELU's alpha, GATHER's
/// params (an embedding table) and BATCH_MATMUL's constant operands (a dense
/// layer on a rank-3 input converts to one).
pub(super) fn trainable_inputs(op: &Op) -> &'static [usize] {
    match op.code {
        OpCode::Builtin(B::FULLY_CONNECTED | B::CONV_2D | B::DEPTHWISE_CONV_2D) => &[1, 2],
        OpCode::Builtin(B::TRANSPOSE_CONV) => &[1, 3],
        OpCode::Builtin(B::PRELU) => &[1],
        OpCode::Builtin(B::GATHER) => &[0],
        OpCode::Builtin(B::BATCH_MATMUL) => &[0, 1],
        _ => &[],
    }
}
