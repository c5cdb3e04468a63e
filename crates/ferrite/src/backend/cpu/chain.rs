//! A chain of float element-wise ops run as one step: block by block over the
//! elements, each op of the chain applied to the block before the next block
//! starts, so the values passed between the ops stay in a few cache-sized
//! buffers instead of whole tensors in memory. Each op runs the same vectorized
//! kernel (`unary_f32`, `binary_f32`) its own step would, element for element, so
//! the results are bit-identical to running the ops one by one.
//!
//! The compiler's chain pass (`compile/chains.rs`) decides which ops form a chain.

use std::sync::{Arc, Mutex};

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::elementwise::{self as kel, Binary, Unary};
use ferrite_kernels::parallel::ThreadPool;
use ferrite_kernels::Clamp;
use smallvec::SmallVec;

use super::runtime;
use crate::backend::{typed, typed_mut};
use crate::error::Result;
use crate::observe::{Flow, OnOp, OpByOp};
use crate::ops::OpParams;

/// Elements per block: 4 KiB a value, so a chain's live values stay in L1.
pub(crate) const BLOCK: usize = 1024;

/// Most step inputs and outputs of a chain (the executor's fast path takes as many).
pub(crate) const MAX_INPUTS: usize = 8;
/// See [`MAX_INPUTS`].
pub(crate) const MAX_OUTPUTS: usize = 4;

/// The vectorized kernel of float unary builtin `code` (with its parameters), the
/// one its own step runs.
pub(crate) fn unary_kind(code: B, params: &OpParams) -> Option<Unary> {
    Some(match code {
        B::ABS => Unary::Abs,
        B::NEG => Unary::Neg,
        B::EXP => Unary::Exp,
        B::LOG => Unary::Log,
        B::SQRT => Unary::Sqrt,
        B::RSQRT => Unary::Rsqrt,
        B::SQUARE => Unary::Square,
        B::TANH => Unary::Tanh,
        B::LOGISTIC => Unary::Logistic,
        B::RELU => Unary::Relu,
        B::RELU6 => Unary::Relu6,
        B::RELU_N1_TO_1 => Unary::ReluN1To1,
        B::RELU_0_TO_1 => Unary::Relu0To1,
        B::HARD_SWISH => Unary::HardSwish,
        B::LEAKY_RELU => Unary::LeakyRelu(match params {
            OpParams::LeakyRelu { alpha } => *alpha,
            _ => 0.0,
        }),
        B::ELU => Unary::Elu,
        B::FLOOR => Unary::Floor,
        B::CEIL => Unary::Ceil,
        B::ROUND => Unary::Round,
        B::SIN => Unary::Sin,
        B::COS => Unary::Cos,
        B::GELU => Unary::Gelu(matches!(params, OpParams::Gelu { approximate: true })),
        B::SIGN => Unary::Sign,
        _ => return None,
    })
}

/// The kernel of float binary builtin `code`, the one its own step runs.
pub(crate) fn binary_kind(code: B) -> Option<Binary> {
    Some(match code {
        B::ADD => Binary::Add,
        B::SUB => Binary::Sub,
        B::MUL => Binary::Mul,
        B::DIV => Binary::Div,
        B::MAXIMUM => Binary::Max,
        B::MINIMUM => Binary::Min,
        B::SQUARED_DIFFERENCE => Binary::SquaredDifference,
        B::POW => Binary::Pow,
        B::FLOOR_DIV => Binary::FloorDiv,
        B::FLOOR_MOD => Binary::FloorMod,
        B::PRELU => Binary::Prelu,
        _ => return None,
    })
}

/// What a chain op computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ChainKind {
    Unary(Unary),
    /// With the clamp of the op's fused activation.
    Binary(Binary, Clamp),
}

/// Where a chain op reads an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand {
    /// Step input `k`, one element per element of the chain.
    Input(usize),
    /// Step input `k` of `period` elements, repeated along the chain (a scalar, a
    /// per-channel row): the trailing dimensions of the op's output.
    Periodic(usize, usize),
    /// The value of chain op `j` (an earlier one).
    Value(usize),
}

/// One op of a chain.
#[derive(Debug, Clone)]
pub(crate) struct ChainOp {
    pub(crate) kind: ChainKind,
    /// Its operands in the op's input order (one for a unary op).
    pub(crate) args: SmallVec<[Operand; 2]>,
    /// The step output its value is written to, when something outside the chain
    /// reads it; otherwise it lives only in a block buffer.
    pub(crate) out: Option<usize>,
}

/// Where a block's op reads an operand.
#[derive(Debug, Clone, Copy)]
enum BlockSrc {
    /// Step input k at the block's elements.
    Input(usize),
    /// Step input k whole (a period).
    Periodic(usize),
    /// Block buffer s.
    Slot(usize),
}

/// Where a block's op writes its value.
#[derive(Debug, Clone, Copy)]
enum BlockDst {
    /// Step output k at the block's elements: a written value no later op reads.
    Out(usize),
    /// Block buffer s, copied to step output `copy` when that is set (a value
    /// both written and read further down the chain).
    Slot { slot: usize, copy: Option<usize> },
}

/// One op of a chain as the block loop runs it, its operands resolved.
#[derive(Debug, Clone, Copy)]
struct BlockOp {
    kind: ChainKind,
    x: BlockSrc,
    y: Option<BlockSrc>,
    dst: BlockDst,
}

/// A chain ready to run: its ops over `n` elements, in blocks of `block`.
#[derive(Debug)]
pub(crate) struct Chain {
    n: usize,
    block: usize,
    ops: Vec<ChainOp>,
    /// The ops as the block loop runs them.
    plan: Vec<BlockOp>,
    slots: usize,
    /// Step inputs: the elements each must have (n, or its period).
    input_len: Vec<usize>,
    outputs: usize,
}

impl Chain {
    /// A chain of `ops` over `n` elements reading `input_len[k]` floats from step
    /// input k and writing `outputs` step outputs. Blocks are a multiple of every
    /// period, so a periodic operand starts each block at its first element. None
    /// when the ops do not describe a chain (an operand out of range, a period not
    /// dividing `n`, an output not written by exactly one op, the last value not
    /// written).
    pub(crate) fn new(n: usize, ops: Vec<ChainOp>, input_len: Vec<usize>, outputs: usize) -> Option<Chain> {
        let mut period = 1usize;
        for (j, op) in ops.iter().enumerate() {
            let arity = match op.kind {
                ChainKind::Unary(_) => 1,
                ChainKind::Binary(..) => 2,
            };
            if op.args.len() != arity || op.args.iter().all(|a| matches!(a, Operand::Periodic(..))) || op.out.is_some_and(|k| k >= outputs) {
                return None;
            }
            for a in &op.args {
                match *a {
                    Operand::Input(k) if input_len.get(k) == Some(&n) => {}
                    Operand::Periodic(k, p) if p > 0 && input_len.get(k) == Some(&p) && n.is_multiple_of(p) => {
                        period = lcm(period, p);
                    }
                    Operand::Value(v) if v < j => {}
                    _ => return None,
                }
            }
        }
        // Each output written by exactly one op, the last one's among them.
        let mut written: Vec<usize> = ops.iter().filter_map(|o| o.out).collect();
        written.sort_unstable();
        written.dedup();
        if written.len() != outputs
            || outputs > MAX_OUTPUTS
            || input_len.len() > MAX_INPUTS
            || ops.iter().filter(|o| o.out.is_some()).count() != outputs
            || ops.last().is_none_or(|o| o.out.is_none())
            || period > BLOCK
        {
            return None;
        }
        let block = (BLOCK / period).max(1) * period;
        // Block buffers by liveness: a value's buffer is free again after its last
        // reader. A written value no later op reads goes straight to its output.
        let mut last_read = vec![None; ops.len()];
        for (j, op) in ops.iter().enumerate() {
            for a in &op.args {
                if let Operand::Value(v) = *a {
                    last_read[v] = Some(j);
                }
            }
        }
        let (mut slot_of, mut free, mut slots) = (vec![usize::MAX; ops.len()], Vec::new(), 0);
        let mut plan = Vec::with_capacity(ops.len());
        for (j, op) in ops.iter().enumerate() {
            let dst = match (op.out, last_read[j]) {
                (Some(k), None) => BlockDst::Out(k),
                (copy, _) => {
                    slot_of[j] = free.pop().unwrap_or_else(|| {
                        slots += 1;
                        slots - 1
                    });
                    BlockDst::Slot { slot: slot_of[j], copy }
                }
            };
            let src = |a: Operand| match a {
                Operand::Input(k) => BlockSrc::Input(k),
                Operand::Periodic(k, _) => BlockSrc::Periodic(k),
                Operand::Value(v) => BlockSrc::Slot(slot_of[v]),
            };
            plan.push(BlockOp { kind: op.kind, x: src(op.args[0]), y: op.args.get(1).map(|&a| src(a)), dst });
            for a in &op.args {
                if let Operand::Value(v) = *a {
                    if last_read[v] == Some(j) && slot_of[v] != usize::MAX && !free.contains(&slot_of[v]) {
                        free.push(slot_of[v]);
                    }
                }
            }
        }
        Some(Chain { n, block, ops, plan, slots, input_len, outputs })
    }

    /// Elements per block.
    #[cfg(test)]
    pub(crate) fn block(&self) -> usize {
        self.block
    }

    /// Block buffers the chain needs (per thread).
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Runs `f` on the step's inputs and outputs as the chain's floats, checked
    /// against the plan (where the kernel and the op-by-op run both start).
    fn with_views<R>(&self, ins: &[Option<&[u8]>], outs: &mut [&mut [u8]], f: impl FnOnce(&[&[f32]], &mut [&mut [f32]]) -> Result<R>) -> Result<R> {
        let mut in_views: [&[f32]; MAX_INPUTS] = [&[]; MAX_INPUTS];
        let mut out_views: [&mut [f32]; MAX_OUTPUTS] = Default::default();
        self.inputs(ins, &mut in_views)?;
        self.outputs(outs, &mut out_views)?;
        f(&in_views[..self.input_len.len()], &mut out_views[..self.outputs])
    }

    /// The step inputs as floats into `v`, checked against the plan.
    fn inputs<'a>(&self, ins: &[Option<&'a [u8]>], v: &mut [&'a [f32]; MAX_INPUTS]) -> Result<()> {
        if ins.len() != self.input_len.len() || ins.len() > MAX_INPUTS {
            return Err(runtime("element-wise chain inputs do not match the plan"));
        }
        for ((slot, &x), &len) in v.iter_mut().zip(ins).zip(&self.input_len) {
            *slot = typed::<f32>(x.unwrap_or(&[]))?;
            if slot.len() != len {
                return Err(runtime("element-wise chain input sizes do not match the plan"));
            }
        }
        Ok(())
    }

    /// The step outputs as floats into `v`, checked against the plan.
    fn outputs<'a>(&self, outs: &'a mut [&mut [u8]], v: &mut [&'a mut [f32]; MAX_OUTPUTS]) -> Result<()> {
        if outs.len() != self.outputs || outs.len() > MAX_OUTPUTS {
            return Err(runtime("element-wise chain outputs do not match the plan"));
        }
        for (slot, o) in v.iter_mut().zip(outs.iter_mut()) {
            *slot = typed_mut::<f32>(o)?;
            if slot.len() != self.n {
                return Err(runtime("element-wise chain output sizes do not match the plan"));
            }
        }
        Ok(())
    }

    /// Runs the chain over elements `base..base + len` (a whole number of blocks,
    /// or up to the end): `outs` hold those elements of the step outputs, `scratch`
    /// the block buffers, one after another.
    fn run_part(&self, ins: &[&[f32]], outs: &mut [&mut [f32]], base: usize, len: usize, scratch: &mut [f32]) {
        let b = self.block;
        let mut s = 0;
        while s < len {
            let l = b.min(len - s);
            let at = base + s;
            for op in &self.plan {
                // The destination's buffer is split off the others, which the
                // operands read (never the destination's: buffers are by liveness).
                let (lo, hi, d) = match op.dst {
                    BlockDst::Slot { slot, .. } => {
                        let (lo, rest) = scratch.split_at_mut(slot * b);
                        let (dst, hi) = rest.split_at_mut(b);
                        (&*lo, &*hi, Some((slot, dst)))
                    }
                    BlockDst::Out(_) => (&*scratch, &[][..], None),
                };
                let split = d.as_ref().map_or(usize::MAX, |x| x.0);
                let arg = |src: BlockSrc| match src {
                    BlockSrc::Input(k) => Arg::Full(&ins[k][at..at + l]),
                    BlockSrc::Periodic(k) => Arg::Periodic(ins[k]),
                    BlockSrc::Slot(v) if v < split => Arg::Full(&lo[v * b..v * b + l]),
                    BlockSrc::Slot(v) => Arg::Full(&hi[(v - split - 1) * b..(v - split - 1) * b + l]),
                };
                let (x, y) = (arg(op.x), op.y.map(arg));
                match (d, op.dst) {
                    (Some((_, dst)), BlockDst::Slot { copy, .. }) => {
                        let dst = &mut dst[..l];
                        apply(op.kind, x, y, dst);
                        if let Some(k) = copy {
                            outs[k][s..s + l].copy_from_slice(dst);
                        }
                    }
                    (_, BlockDst::Out(k)) => apply(op.kind, x, y, &mut outs[k][s..s + l]),
                    _ => {}
                }
            }
            s += l;
        }
    }
}

/// An operand's elements for one block (or the whole tensor).
#[derive(Clone, Copy)]
enum Arg<'a> {
    /// As many as the destination.
    Full(&'a [f32]),
    /// A period repeated over the destination (which is a whole number of periods).
    Periodic(&'a [f32]),
}

impl<'a> Arg<'a> {
    fn data(self) -> &'a [f32] {
        match self {
            Arg::Full(v) | Arg::Periodic(v) => v,
        }
    }
}

/// `kind` on `x` (and `y`) into `dst`, through the kernel the op's own step runs.
fn apply(kind: ChainKind, x: Arg<'_>, y: Option<Arg<'_>>, dst: &mut [f32]) {
    let l = dst.len();
    match (kind, x, y) {
        (ChainKind::Unary(u), Arg::Full(x), _) => kel::unary_f32(u, x, dst),
        (ChainKind::Binary(b, clamp), x, Some(y)) => {
            // A periodic operand is the trailing row of a [l / p, p] output.
            let (out_shape, sx, sy) = match (x, y) {
                (Arg::Periodic(v), _) => ([l / v.len().max(1), v.len()], [1, v.len()], [l / v.len().max(1), v.len()]),
                (_, Arg::Periodic(v)) => ([l / v.len().max(1), v.len()], [l / v.len().max(1), v.len()], [1, v.len()]),
                _ => ([1, l], [1, l], [1, l]),
            };
            kel::binary_f32(b, x.data(), &sx, y.data(), &sy, dst, &out_shape, clamp);
        }
        _ => {}
    }
}

/// The least common multiple of two operand periods.
pub(crate) fn lcm(a: usize, b: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    a / gcd(a, b) * b
}

/// Chains of at least this many element-operations split over the pool (as a
/// binary op of this size would).
const PARALLEL_MIN_ELEMENT_OPS: usize = super::PARALLEL_MIN_FLOPS / 4;

/// One part's share of a chain step's outputs.
type OutPieces<'a> = SmallVec<[&'a mut [f32]; 4]>;

/// A chain's kernel: the step's inputs are the chain's, its outputs the values
/// written. Large chains split their blocks over the pool's threads.
pub(crate) fn chain_kernel(chain: Arc<Chain>, pool: Option<Arc<ThreadPool>>) -> crate::backend::KernelFn {
    let blocks = chain.n.div_ceil(chain.block);
    let parts = match &pool {
        Some(p) if chain.n * chain.ops.len() >= PARALLEL_MIN_ELEMENT_OPS => p.threads().min(blocks).max(1),
        _ => 1,
    };
    let pool = pool.filter(|_| parts > 1);
    // Block buffers for each part, made once.
    let mut scratch: Vec<Mutex<Vec<f32>>> = (0..parts).map(|_| Mutex::new(vec![0.0; chain.block * chain.slots])).collect();
    Box::new(move |ins, outs| {
        chain.with_views(ins, outs, |ins, outs| {
            let Some(pool) = pool.as_deref() else {
                let s = scratch[0].get_mut().unwrap_or_else(|e| e.into_inner());
                chain.run_part(ins, outs, 0, chain.n, s);
                return Ok(());
            };
            // Each part's share of every output, split at whole blocks.
            let range = |i: usize| {
                let b = ferrite_kernels::parallel::chunk(blocks, parts, i);
                (b.start * chain.block).min(chain.n)..(b.end * chain.block).min(chain.n)
            };
            let mut pieces: SmallVec<[Mutex<OutPieces<'_>>; 8]> = SmallVec::new();
            let mut rest: SmallVec<[&mut [f32]; 4]> = outs.iter_mut().map(std::mem::take).collect();
            for i in 0..parts {
                let len = range(i).len();
                let mut mine = SmallVec::new();
                for r in rest.iter_mut() {
                    let (a, b) = std::mem::take(r).split_at_mut(len);
                    mine.push(a);
                    *r = b;
                }
                pieces.push(Mutex::new(mine));
            }
            let scratch = &scratch;
            pool.run(parts, &|i| {
                let mut outs = pieces[i].lock().unwrap_or_else(|e| e.into_inner());
                let mut s = scratch[i].lock().unwrap_or_else(|e| e.into_inner());
                let r = range(i);
                chain.run_part(ins, &mut outs, r.start, r.len(), &mut s);
            });
            Ok(())
        })
    })
}

/// A chain run op by op, each over the whole tensor, for an observed run (a
/// profile, a trace, callbacks): the values between the ops get memory of their
/// own for that run, so each op can be timed and its tensors shown.
pub(crate) struct ChainByOp(pub(crate) Arc<Chain>);

impl OpByOp for ChainByOp {
    fn run_op_by_op(&mut self, ins: &[Option<&[u8]>], outs: &mut [&mut [u8]], read_back: bool, on_op: OnOp<'_>) -> Result<Flow> {
        let chain = &*self.0;
        chain.with_views(ins, outs, |ins, outs| {
            let mut values: Vec<Vec<f32>> = chain.ops.iter().map(|o| if o.out.is_none() { vec![0.0; chain.n] } else { Vec::new() }).collect();
            for (j, op) in chain.ops.iter().enumerate() {
                let bytes = |a: Operand, outs: &[&mut [f32]], values: &[Vec<f32>]| -> Vec<u8> {
                    let v: &[f32] = match a {
                        Operand::Input(k) | Operand::Periodic(k, _) => ins[k],
                        Operand::Value(v) => match chain.ops[v].out {
                            Some(k) => &outs[k][..],
                            None => &values[v],
                        },
                    };
                    bytemuck::cast_slice(v).to_vec()
                };
                let op_ins: Vec<Vec<u8>> = if read_back { op.args.iter().map(|&a| bytes(a, outs, &values)).collect() } else { Vec::new() };
                let op_ins: Vec<Option<&[u8]>> = op_ins.iter().map(|b| Some(&b[..])).collect();
                match on_op(j, &op_ins, None) {
                    Flow::Continue => {}
                    Flow::Skip => continue,
                    Flow::Stop => return Ok(Flow::Stop),
                }
                // The whole tensor as one block: the same kernels over the same elements.
                let (mut dst_out, mut dst_tmp): (&mut [f32], Vec<f32>) = (&mut [], Vec::new());
                match op.out {
                    Some(k) => dst_out = std::mem::take(&mut outs[k]),
                    None => dst_tmp = std::mem::take(&mut values[j]),
                }
                {
                    let arg = |a: Operand| -> Arg<'_> {
                        match a {
                            Operand::Input(k) => Arg::Full(ins[k]),
                            Operand::Periodic(k, _) => Arg::Periodic(ins[k]),
                            Operand::Value(v) => Arg::Full(match chain.ops[v].out {
                                Some(k) => &outs[k][..],
                                None => &values[v],
                            }),
                        }
                    };
                    let dst = if op.out.is_some() { &mut *dst_out } else { &mut dst_tmp[..] };
                    apply(op.kind, arg(op.args[0]), op.args.get(1).map(|&a| arg(a)), dst);
                }
                match op.out {
                    Some(k) => outs[k] = dst_out,
                    None => values[j] = dst_tmp,
                }
                let written: Vec<u8> = if read_back {
                    match op.out {
                        Some(k) => bytemuck::cast_slice(&outs[k][..]).to_vec(),
                        None => bytemuck::cast_slice(&values[j][..]).to_vec(),
                    }
                } else {
                    Vec::new()
                };
                let out_views: Vec<&[u8]> = if read_back { vec![&written[..]] } else { Vec::new() };
                if on_op(j, &op_ins, Some(&out_views)) == Flow::Stop {
                    return Ok(Flow::Stop);
                }
            }
            Ok(Flow::Continue)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain against its ops run one by one over whole tensors, with the
    /// kernels each op's own step runs, over random chains and sizes (blocks with a
    /// short last one, periods of 1, 3 and 7 elements), on one thread and split over
    /// a pool. (The kernels' own tests cover each vector level; this runs the
    /// detected one, which `FERRITE_CPU_MAX_ISA` caps.)
    #[test]
    fn chains_match_their_ops_run_one_by_one() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let unaries = [Unary::Relu6, Unary::HardSwish, Unary::Logistic, Unary::Tanh, Unary::Abs, Unary::Exp, Unary::LeakyRelu(0.1), Unary::Neg];
        let binaries = [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Max, Binary::Prelu, Binary::SquaredDifference];
        {
            for case in 0..60 {
                let period = [1usize, 3, 7][case % 3];
                let n = period * (1 + (rnd() as usize) % 900);
                let input_len = vec![n, n, period];
                let inputs: Vec<Vec<f32>> = input_len.iter().map(|&l| (0..l).map(|_| ((rnd() % 2001) as f32 - 1000.0) / 250.0).collect()).collect();
                let len = 2 + (rnd() as usize) % 5;
                let mut ops = Vec::new();
                for j in 0..len {
                    let value = |r: u64| if j == 0 { Operand::Input(0) } else { Operand::Value((r as usize) % j) };
                    let kind = if rnd() % 2 == 0 {
                        ChainKind::Unary(unaries[(rnd() as usize) % unaries.len()])
                    } else {
                        ChainKind::Binary(binaries[(rnd() as usize) % binaries.len()], if rnd() % 3 == 0 { Clamp::RELU6 } else { Clamp::NONE })
                    };
                    let args: SmallVec<[Operand; 2]> = match kind {
                        ChainKind::Unary(_) => smallvec::smallvec![value(rnd())],
                        ChainKind::Binary(..) => {
                            let other = [Operand::Input(1), Operand::Periodic(2, period), value(rnd())][(rnd() as usize) % 3];
                            if rnd() % 2 == 0 {
                                smallvec::smallvec![value(rnd()), other]
                            } else {
                                smallvec::smallvec![other, value(rnd())]
                            }
                        }
                    };
                    ops.push(ChainOp { kind, args, out: None });
                }
                // The last value and one random other are written.
                let mid = (rnd() as usize) % len;
                ops[mid].out = Some(0);
                let outputs = if mid + 1 == len { 1 } else { 2 };
                ops[len - 1].out = Some(outputs - 1);
                // Reference: every op over whole tensors, as its own step.
                let mut vals: Vec<Vec<f32>> = Vec::new();
                for op in &ops {
                    let full = |a: Operand, vals: &[Vec<f32>]| -> (Vec<f32>, Vec<usize>) {
                        match a {
                            Operand::Input(k) => (inputs[k].clone(), vec![n / period, period]),
                            Operand::Periodic(k, p) => (inputs[k].clone(), vec![p]),
                            Operand::Value(v) => (vals[v].clone(), vec![n / period, period]),
                        }
                    };
                    let mut o = vec![0.0; n];
                    match op.kind {
                        ChainKind::Unary(u) => kel::unary_f32(u, &full(op.args[0], &vals).0, &mut o),
                        ChainKind::Binary(b, c) => {
                            let ((x, sx), (y, sy)) = (full(op.args[0], &vals), full(op.args[1], &vals));
                            kel::binary_f32(b, &x, &sx, &y, &sy, &mut o, &[n / period, period], c);
                        }
                    }
                    vals.push(o);
                }
                let chain = Arc::new(Chain::new(n, ops.clone(), input_len.clone(), outputs).expect("a valid chain"));
                let in_bytes: Vec<&[u8]> = inputs.iter().map(|v| bytemuck::cast_slice(&v[..])).collect();
                let ins: Vec<Option<&[u8]>> = in_bytes.iter().map(|b| Some(*b)).collect();
                let want: Vec<&[f32]> = if outputs == 2 { vec![&vals[mid], &vals[len - 1]] } else { vec![&vals[len - 1]] };
                let pools = [None, Some(Arc::new(ThreadPool::new(3)))];
                for pool in pools {
                    let mut bufs = vec![vec![0u8; 4 * n]; outputs];
                    let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                    let mut k = chain_kernel(chain.clone(), pool);
                    k(&ins, &mut outs).unwrap();
                    for (got, want) in bufs.iter().zip(&want) {
                        let got: &[f32] = bytemuck::cast_slice(got);
                        assert!(got.iter().zip(*want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())), "case {case}: {ops:?}");
                    }
                }
                // Op by op, as an observed run.
                let mut bufs = vec![vec![0u8; 4 * n]; outputs];
                let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                let mut seen = 0;
                ChainByOp(chain.clone())
                    .run_op_by_op(&ins, &mut outs, true, &mut |_, _, o| {
                        if let Some(o) = o {
                            assert_eq!(o.len(), 1);
                            seen += 1;
                        }
                        Flow::Continue
                    })
                    .unwrap();
                assert_eq!(seen, len);
                for (got, want) in bufs.iter().zip(&want) {
                    let got: &[f32] = bytemuck::cast_slice(got);
                    assert!(got.iter().zip(*want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())));
                }
            }
        }
    }

    #[test]
    fn chains_reject_bad_descriptions() {
        let op = |args: SmallVec<[Operand; 2]>, out| ChainOp { kind: ChainKind::Binary(Binary::Add, Clamp::NONE), args, out };
        // A period that does not divide the elements, an operand from a later op,
        // a last value not written, two periodic operands.
        assert!(Chain::new(10, vec![op(smallvec::smallvec![Operand::Input(0), Operand::Periodic(1, 3)], Some(0))], vec![10, 3], 1).is_none());
        assert!(Chain::new(9, vec![op(smallvec::smallvec![Operand::Input(0), Operand::Value(0)], Some(0))], vec![9], 1).is_none());
        assert!(Chain::new(9, vec![op(smallvec::smallvec![Operand::Input(0), Operand::Input(0)], None)], vec![9], 0).is_none());
        assert!(Chain::new(9, vec![op(smallvec::smallvec![Operand::Periodic(0, 3), Operand::Periodic(0, 3)], Some(0))], vec![3], 1).is_none());
        let c = Chain::new(9, vec![op(smallvec::smallvec![Operand::Input(0), Operand::Periodic(1, 3)], Some(0))], vec![9, 3], 1).unwrap();
        assert_eq!(c.block() % 3, 0);
        assert_eq!(c.slots(), 0);
    }
}
