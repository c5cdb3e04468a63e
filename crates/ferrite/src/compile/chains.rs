//! Element-wise chains: consecutive CPU steps of float element-wise ops (unary
//! math and activations, binary ops with a tensor of the same size, a scalar or
//! a per-channel row) that feed one another become one step, which runs the whole
//! chain block by block (`backend/cpu/chain.rs`). The tensors passed only between
//! the chain's ops are never written: they leave the memory plan, and the chain
//! reads and writes memory once instead of once per op. A hard-swish written out
//! as ADD, RELU6, MUL, MUL, or a normalization's SUB, MUL, ADD, are such chains.
//!
//! The pass runs after every op has its step, so it sees the steps that remain
//! after the other passes (epilogues fused into convolutions, folded constants);
//! [`Limits::fuse_chains`](super::Limits) turns it off.

use std::sync::Arc;

use smallvec::SmallVec;

use super::{Compilation, OpRun, SegmentIo, Step, Work};
use crate::backend::cpu::chain::{self, Chain, ChainByOp, ChainKind, ChainOp, Operand};
use crate::backend::BackendContext;
use crate::model::{DType, OpCode};
use crate::ops::{Activation, OpParams};

/// Smallest tensors chained: two blocks. A tensor of one block stays in L1 from
/// one op to the next anyway, so a chain of them saves no memory traffic, only
/// steps, and running a chain costs about what the steps it replaces did
/// (measured: a wake-word head's layer norms over 128 floats ran 5% more
/// instructions chained).
const MIN_ELEMENTS: usize = 2 * chain::BLOCK;

/// A step that may join a chain: its op's kernel, operands and output.
struct Candidate {
    kind: ChainKind,
    /// (tensor, period: None when it has the output's elements).
    args: SmallVec<[(usize, Option<usize>); 2]>,
    out: usize,
    /// Output elements.
    n: usize,
}

/// Replaces each run of two or more consecutive chainable steps, each after the
/// first reading a value of an earlier one, by one chain step. Returns how many
/// ops now run in chains.
pub(super) fn fuse_chains(c: &mut Compilation<'_>, dynamic_from: Option<usize>, ctx: &BackendContext) -> usize {
    // A build without the float element-wise family has no chain to run (its ops are
    // unsupported there); leaving the pass out keeps the chain step, and every float
    // kernel it names, out of a selective library (144 KB of them in the wake-word build).
    if !cfg!(all(feature = "type-float", feature = "op-elementwise")) || !c.limits.fuse_chains {
        return 0;
    }
    let g = c.g;
    let root = |t: usize| c.alias_of[t];
    let cands: Vec<Option<Candidate>> = c.steps.iter().map(|st| candidate(c, st)).collect();
    if cands.iter().filter(|x| x.is_some()).count() < 2 {
        return 0;
    }
    // Who reads each tensor's memory (by alias root), and what leaves the steps.
    let mut readers: Vec<SmallVec<[usize; 4]>> = vec![SmallVec::new(); c.tensors.len()];
    for (si, st) in c.steps.iter().enumerate() {
        for t in st.reads(&g.ops[st.op]) {
            readers[root(t)].push(si);
        }
    }
    let mut escapes = vec![false; c.tensors.len()];
    for &t in &g.outputs {
        escapes[root(t)] = true;
    }
    for (t, info) in g.tensors.iter().enumerate() {
        if info.is_variable {
            escapes[root(t)] = true;
        }
    }
    if let Some(d) = dynamic_from {
        for op in &g.ops[d..] {
            for &t in op.inputs.iter().flatten() {
                escapes[root(t)] = true;
            }
        }
    }

    let steps = std::mem::take(&mut c.steps);
    let n_steps = steps.len();
    let mut pending: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
    let mut out: Vec<Step> = Vec::with_capacity(n_steps);
    let mut chained = 0;
    let mut si = 0;
    while si < n_steps {
        let end = chain_end(&cands, si, &root);
        if end - si < 2 {
            out.extend(pending[si].take());
            si += 1;
            continue;
        }
        match chain_step(c, &cands[si..end], si..end, &readers, &escapes, &pending, ctx) {
            Some(step) => {
                chained += end - si;
                for p in &mut pending[si..end] {
                    *p = None;
                }
                out.push(step);
                si = end;
            }
            None => {
                out.extend(pending[si].take());
                si += 1;
            }
        }
    }
    c.steps = out;
    chained
}

/// The end of the chain starting at step `si`: the steps after it join while each
/// is chainable over as many elements and reads a value of the chain (only ever
/// whole), and the periods of their operands fit a block.
fn chain_end(cands: &[Option<Candidate>], si: usize, root: &impl Fn(usize) -> usize) -> usize {
    let Some(first) = &cands[si] else { return si };
    if first.args.iter().all(|a| a.1.is_some()) {
        return si;
    }
    let mut produced: SmallVec<[usize; 8]> = smallvec::smallvec![root(first.out)];
    let mut period = first.args.iter().filter_map(|a| a.1).fold(1, chain::lcm);
    let mut end = si + 1;
    while let Some(Some(next)) = cands.get(end) {
        let inside = |t: usize| produced.contains(&root(t));
        let p = next.args.iter().filter_map(|a| a.1).fold(period, chain::lcm);
        let joins = next.n == first.n
            && next.args.iter().any(|a| inside(a.0))
            && next.args.iter().all(|a| !inside(a.0) || a.1.is_none())
            && next.args.iter().any(|a| a.1.is_none())
            && p <= chain::BLOCK;
        if !joins {
            break;
        }
        period = p;
        produced.push(root(next.out));
        end += 1;
    }
    end
}

/// Step `st` as a chain candidate: a plain CPU kernel of a float unary op, or of a
/// float binary op whose operands are each whole (the output's elements) or
/// periodic (a scalar, or the output's trailing dimensions).
fn candidate(c: &Compilation<'_>, st: &Step) -> Option<Candidate> {
    let g = c.g;
    let op = &g.ops[st.op];
    if !matches!(st.work, Work::Kernel(_))
        || c.assignment.get(st.op) != Some(&OpRun::Backend("cpu"))
        || !st.extra.is_empty()
        || !st.substituted.is_empty()
        || !st.prepacked.is_empty()
        || st.io.is_some()
    {
        return None;
    }
    let OpCode::Builtin(code) = op.code else { return None };
    let &[out] = &op.outputs[..] else { return None };
    let f32_tensor = |t: usize| c.tensors[t].dtype == DType::F32 && g.tensors[t].quant.is_none() && !g.tensors[t].is_variable;
    if !f32_tensor(out) {
        return None;
    }
    let shape = &c.tensors[out].shape;
    let n: usize = shape.iter().product();
    if n < MIN_ELEMENTS {
        return None;
    }
    // Whole: the output's elements; periodic: the output's trailing dimensions.
    let operand = |t: usize| -> Option<(usize, Option<usize>)> {
        if !f32_tensor(t) {
            return None;
        }
        let s = &c.tensors[t].shape;
        let len: usize = s.iter().product();
        if len == n && s.iter().filter(|&&d| d != 1).eq(shape.iter().filter(|&&d| d != 1)) {
            return Some((t, None));
        }
        let s = &s[s.iter().take_while(|&&d| d == 1).count()..];
        (len > 0 && s.len() <= shape.len() && s == &shape[shape.len() - s.len()..]).then_some((t, Some(len)))
    };
    let (kind, args) = match (&op.inputs[..], &op.params) {
        (&[Some(x)], params) => {
            let u = chain::unary_kind(code, params)?;
            let (x, None) = operand(x)? else { return None };
            (ChainKind::Unary(u), smallvec::smallvec![(x, None)])
        }
        (&[Some(a), Some(b)], params) => {
            let kind = chain::binary_kind(code)?;
            let act = match params {
                OpParams::Binary { activation, .. } => *activation,
                _ => Activation::None,
            };
            (ChainKind::Binary(kind, crate::backend::cpu::activation_clamp(act)), smallvec::smallvec![operand(a)?, operand(b)?])
        }
        _ => return None,
    };
    Some(Candidate { kind, args, out, n })
}

/// The chain step for steps `range` (their candidates `cands`), or None when it
/// cannot be described.
fn chain_step(
    c: &Compilation<'_>,
    cands: &[Option<Candidate>],
    range: std::ops::Range<usize>,
    readers: &[SmallVec<[usize; 4]>],
    escapes: &[bool],
    pending: &[Option<Step>],
    ctx: &BackendContext,
) -> Option<Step> {
    let root = |t: usize| c.alias_of[t];
    let cands: Vec<&Candidate> = cands.iter().map(Option::as_ref).collect::<Option<_>>()?;
    let n = cands[0].n;
    let (mut reads, mut read_roots, mut writes): (Vec<usize>, Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new(), Vec::new());
    let mut input_len = Vec::new();
    let mut ops = Vec::with_capacity(cands.len());
    for (j, cand) in cands.iter().enumerate() {
        let mut args = SmallVec::new();
        for &(t, period) in &cand.args {
            let r = root(t);
            let arg = match cands[..j].iter().position(|p| root(p.out) == r) {
                Some(v) => Operand::Value(v),
                None => {
                    let k = read_roots.iter().position(|&x| x == r).unwrap_or_else(|| {
                        reads.push(t);
                        read_roots.push(r);
                        input_len.push(period.unwrap_or(n));
                        reads.len() - 1
                    });
                    // One tensor read both whole and periodically is read at its own size.
                    match period {
                        Some(p) if input_len[k] == p => Operand::Periodic(k, p),
                        None if input_len[k] == n => Operand::Input(k),
                        _ => return None,
                    }
                }
            };
            args.push(arg);
        }
        // Written when something outside the chain reads it, and always the last.
        let r = root(cand.out);
        let outside = escapes[r] || readers[r].iter().any(|s| !range.contains(s)) || j + 1 == cands.len();
        let out = outside.then(|| {
            writes.push(cand.out);
            writes.len() - 1
        });
        ops.push(ChainOp { kind: cand.kind, args, out });
    }
    let outputs = writes.len();
    let chain = Arc::new(Chain::new(n, ops, input_len, outputs)?);
    let first = pending[range.start].as_ref()?.op;
    let members = range.clone().filter_map(|s| pending[s].as_ref().map(|st| (st.op, SmallVec::new()))).collect();
    let by_op = crate::observe::OpByOpHandle(Arc::new(std::sync::Mutex::new(ChainByOp(chain.clone()))));
    Some(Step {
        op: first,
        work: Work::Kernel(chain::chain_kernel(chain, ctx.pool())),
        inputs: SmallVec::new(),
        prepacked: SmallVec::new(),
        outputs: SmallVec::new(),
        extra: SmallVec::new(),
        substituted: SmallVec::new(),
        io: Some(Box::new(SegmentIo { reads, writes, ops: members, by_op: Some(by_op) })),
        views: Default::default(),
    })
}
