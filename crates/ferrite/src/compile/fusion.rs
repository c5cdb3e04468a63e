//! Fusion: ops that run inside a neighbouring kernel instead of as steps of
//! their own — a zero PAD folded into the VALID convolution reading it, and
//! element-wise epilogues (activations, PRELU, a residual ADD) applied by the
//! convolution producing their input while its output is in cache.

use super::{Compilation, Loc, OpRun, Step, TensorSlot};
use crate::backend::EpilogueSlot;
use crate::model::{BuiltinOp as B, DType, Model, OpCode};

/// A PAD op folded into its reader: the reader takes the PAD's input with this
/// explicit padding.
pub(super) struct FoldedPad {
    /// The PAD's output, which no step computes.
    output: usize,
    /// The PAD's input.
    input: usize,
    /// (top, bottom, left, right).
    pads: [usize; 4],
}

/// Folds PAD op `oi` into its reader when [`foldable_pad`] allows: its output gets
/// the padded shape but no memory, and the reader is built on the PAD's input.
/// `held` is where the op's inputs are.
/// Whether this build has the float convolutions, the only kernels that take a
/// folded PAD or an epilogue: both passes fold float tensors only, so without them
/// they are constant no-ops and the optimizer drops their code.
const FUSES: bool = cfg!(all(feature = "type-float", feature = "op-conv"));

pub(super) fn fold_pad(c: &mut Compilation<'_>, oi: usize, held: &[Option<Loc>]) -> bool {
    let g = c.g;
    let op = &g.ops[oi];
    let Some(pads) = foldable_pad(g, oi, &c.tensors, &c.readers_of, |k| if k == 1 { c.value(held, 1) } else { None }) else {
        return false;
    };
    let (Some(&Some(src)), Some(&dst)) = (op.inputs.first(), op.outputs.first()) else { return false };
    c.tensors[dst].dtype = c.tensors[src].dtype;
    c.tensors[dst].shape = c.tensors[src]
        .shape
        .iter()
        .enumerate()
        .map(|(d, &n)| match d {
            1 => n + pads[0] + pads[1],
            2 => n + pads[2] + pads[3],
            _ => n,
        })
        .collect();
    c.folded_pads.push(FoldedPad { output: dst, input: src, pads });
    c.fused_ops += 1;
    c.assignment[oi] = OpRun::Fused { into: g.ops.iter().skip(oi + 1).position(|o| o.inputs.contains(&Some(dst))).map_or(oi, |j| oi + 1 + j) };
    true
}

/// For a reader of a folded PAD: the PAD's input, which the reader takes as its
/// input 0, and the padding to apply to it.
pub(super) fn padded_input(c: &Compilation<'_>, oi: usize) -> Option<(usize, [usize; 4])> {
    let t = c.g.ops[oi].inputs.first().copied().flatten()?;
    c.folded_pads.iter().find(|p| p.output == t).map(|p| (p.input, p.pads))
}

/// Folds op `oi` into the kernel of a pending epilogue waiting for it, the first
/// one it qualifies for, and keeps that chain going to its own reader; the other
/// chains waiting for it stop here. True when folded.
pub(super) fn fold_into_producer(c: &mut Compilation<'_>, model: &Model, oi: usize) -> bool {
    let g = c.g;
    let op = &g.ops[oi];
    let mut folded = false;
    while let Some(p) = c.pending_epilogues.iter().position(|e| e.reader == oi) {
        let ok = !folded && fold_epilogue(model, g, oi, &c.tensors, &c.producer_of, c.pending_epilogues[p].step, &mut c.pending_epilogues[p], &mut c.steps);
        match (ok, op.outputs.first()) {
            (true, Some(&dst)) => {
                folded = true;
                let e = &mut c.pending_epilogues[p];
                c.tensors[dst].dtype = c.tensors[e.tensor].dtype;
                c.tensors[dst].shape = c.tensors[e.tensor].shape.clone();
                c.alias_of[dst] = c.alias_of[e.tensor];
                c.fused_ops += 1;
                c.assignment[oi] = OpRun::Fused { into: c.steps[e.step].op };
                match epilogue_reader(g, oi, dst, &c.readers_of) {
                    Some(next) => (e.reader, e.tensor) = (next, dst),
                    None => {
                        let e = c.pending_epilogues.swap_remove(p);
                        let _ = e.slot.set(e.ops);
                    }
                }
            }
            _ => {
                let e = c.pending_epilogues.swap_remove(p);
                let _ = e.slot.set(e.ops);
            }
        }
    }
    folded
}

/// The epilogue slot offered to convolution `oi`'s kernel, with the op that may
/// fold into it: its output's only reader when that qualifies.
pub(super) fn offer_epilogue(c: &Compilation<'_>, oi: usize) -> Option<(usize, EpilogueSlot)> {
    let op = &c.g.ops[oi];
    // Epilogues are applied by the float convolutions only: a build without them
    // links neither this pass nor the epilogue code of the kernels.
    if !FUSES || !matches!(op.code, OpCode::Builtin(B::CONV_2D | B::DEPTHWISE_CONV_2D)) {
        return None;
    }
    let &out = op.outputs.first()?;
    epilogue_reader(c.g, oi, out, &c.readers_of).map(|j| (j, EpilogueSlot::default()))
}

/// Kernel `oi` (about to become the next step) took the offered slot and applies
/// epilogues: its output's reader is folded in when the driver reaches it, if it
/// qualifies.
pub(super) fn await_epilogue(c: &mut Compilation<'_>, oi: usize, offered: Option<(usize, EpilogueSlot)>) {
    if let (Some((reader, slot)), Some(&tensor)) = (offered, c.g.ops[oi].outputs.first()) {
        c.pending_epilogues.push(PendingEpilogue { reader, tensor, step: c.steps.len(), slot, ops: Vec::new() });
    }
}

/// Hands every kernel still waiting the epilogue gathered so far.
pub(super) fn close_epilogues(c: &mut Compilation<'_>) {
    for e in c.pending_epilogues.drain(..) {
        let _ = e.slot.set(e.ops);
    }
}

/// Whether PAD op `oi` folds into its reader: a float tensor padded with zeros in
/// height and width only, by constant amounts, read by exactly one op, a float
/// CONV_2D or DEPTHWISE_CONV_2D with VALID padding taking it as input 0. Returns
/// the padding (top, bottom, left, right). `value` gives the constant value of the
/// op's input slot.
pub(super) fn foldable_pad<'b>(
    g: &crate::model::Subgraph,
    oi: usize,
    tensors: &[TensorSlot],
    readers_of: &[usize],
    value: impl Fn(usize) -> Option<&'b [u8]>,
) -> Option<[usize; 4]> {
    let op = &g.ops[oi];
    if !FUSES || op.code != OpCode::Builtin(B::PAD) {
        return None;
    }
    let (&[Some(x), Some(_)], &[y]) = (&op.inputs[..], &op.outputs[..]) else { return None };
    if tensors[x].dtype != DType::F32 || tensors[x].shape.len() != 4 || readers_of[y] != 1 || g.tensors[y].is_variable {
        return None;
    }
    let p: Vec<i64> = match value(1)? {
        b if b.len() == 32 => b.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
        b if b.len() == 64 => b.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect(),
        _ => return None,
    };
    if p[0] != 0 || p[1] != 0 || p[6] != 0 || p[7] != 0 || p[2..6].iter().any(|&v| !(0..=64).contains(&v)) {
        return None;
    }
    let j = oi + 1 + g.ops[oi + 1..].iter().position(|o| o.inputs.iter().flatten().any(|&t| t == y))?;
    let reader = &g.ops[j];
    let valid = match &reader.params {
        crate::ops::OpParams::Conv2D { padding, .. } | crate::ops::OpParams::DepthwiseConv2D { padding, .. } => *padding == crate::ops::Padding::Valid,
        _ => false,
    };
    let conv = matches!(reader.code, OpCode::Builtin(B::CONV_2D | B::DEPTHWISE_CONV_2D));
    (conv && valid && reader.inputs.first() == Some(&Some(y)) && reader.inputs.iter().skip(1).all(|&i| i != Some(y)))
        .then(|| [p[2] as usize, p[3] as usize, p[4] as usize, p[5] as usize])
}

/// A kernel that took an epilogue slot, and the element-wise ops folded into it so far.
pub(super) struct PendingEpilogue {
    /// The op reading `tensor`, next to try folding.
    pub(super) reader: usize,
    /// The tensor the fused chain has produced so far (the kernel's output, aliased).
    pub(super) tensor: usize,
    /// The kernel's step.
    pub(super) step: usize,
    pub(super) slot: EpilogueSlot,
    pub(super) ops: Vec<crate::backend::Epilogue>,
}

/// The op that may fold into the kernel producing `out` (op `oi`'s output): the
/// only reader of a float `out` that does not leave the subgraph, if it is a PRELU
/// or an activation taking it as its first input, or an ADD.
pub(super) fn epilogue_reader(g: &crate::model::Subgraph, oi: usize, out: usize, readers_of: &[usize]) -> Option<usize> {
    if readers_of[out] != 1 || g.tensors[out].dtype != DType::F32 {
        return None;
    }
    let j = oi + 1 + g.ops[oi + 1..].iter().position(|o| o.inputs.iter().flatten().any(|&t| t == out))?;
    let next = &g.ops[j];
    let ok = match next.code {
        OpCode::Builtin(B::PRELU) => next.inputs.first() == Some(&Some(out)),
        OpCode::Builtin(code) if activation_epilogue(code, &next.params).is_some() => next.inputs.first() == Some(&Some(out)),
        OpCode::Builtin(B::ADD) => next.inputs.len() == 2,
        _ => false,
    };
    ok.then_some(j)
}

/// The element-wise activation a builtin op computes, when it can run as an epilogue.
pub(super) fn activation_epilogue(code: B, params: &crate::ops::OpParams) -> Option<ferrite_kernels::elementwise::Unary> {
    use ferrite_kernels::elementwise::Unary;
    Some(match code {
        B::RELU => Unary::Relu,
        B::RELU6 => Unary::Relu6,
        B::RELU_N1_TO_1 => Unary::ReluN1To1,
        B::RELU_0_TO_1 => Unary::Relu0To1,
        B::HARD_SWISH => Unary::HardSwish,
        B::LEAKY_RELU => match params {
            crate::ops::OpParams::LeakyRelu { alpha } => Unary::LeakyRelu(*alpha),
            _ => return None,
        },
        _ => return None,
    })
}

/// Folds op `j` into the pending kernel when it qualifies: an activation (RELU
/// family, HARD_SWISH, LEAKY_RELU) of a float tensor; a PRELU whose alpha is a
/// constant (by now, as constants before it are folded) with one value or one per
/// channel; or an ADD of a float tensor of the same shape computed before the
/// kernel runs (a residual), with at most a clamping activation. Returns whether
/// it was folded.
#[allow(clippy::too_many_arguments)]
pub(super) fn fold_epilogue(
    model: &Model,
    g: &crate::model::Subgraph,
    j: usize,
    tensors: &[TensorSlot],
    producer_of: &[usize],
    step: usize,
    e: &mut PendingEpilogue,
    steps: &mut [Step],
) -> bool {
    use crate::backend::Epilogue;
    let op = &g.ops[j];
    let x = e.tensor;
    let &[y] = &op.outputs[..] else { return false };
    if g.tensors[y].is_variable || tensors[x].dtype != DType::F32 {
        return false;
    }
    match (&op.code, &op.inputs[..], &op.params) {
        (OpCode::Builtin(code), &[Some(_)], params) => match activation_epilogue(*code, params) {
            // A float activation declared to produce another type is left to its
            // own kernel, which reports the mismatch.
            Some(u) if g.tensors[y].dtype == DType::F32 => {
                e.ops.push(Epilogue::Unary(u));
                true
            }
            _ => false,
        },
        (OpCode::Builtin(B::PRELU), &[Some(_), Some(alpha)], _) => {
            let bytes = match &tensors[alpha].loc {
                Loc::Model(r) => model.bytes().get(r.clone()),
                Loc::Owned(b) => Some(b.bytes()),
                _ => None,
            };
            let shape = &tensors[alpha].shape;
            let n: usize = shape.iter().product();
            let channels = tensors[x].shape.last().copied().unwrap_or(0);
            match bytes {
                Some(bytes) if tensors[alpha].dtype == DType::F32 && bytes.len() == 4 * n && (n == 1 || (shape.last() == Some(&n) && n == channels)) => {
                    let alpha: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                    e.ops.push(Epilogue::Prelu(alpha.into()));
                    true
                }
                _ => false,
            }
        }
        (OpCode::Builtin(B::ADD), &[Some(a), Some(b)], crate::ops::OpParams::Binary { activation, .. }) => {
            let other = if a == x { b } else { a };
            let clamp = match activation {
                crate::ops::Activation::None => ferrite_kernels::Clamp::NONE,
                crate::ops::Activation::Relu => ferrite_kernels::Clamp::RELU,
                crate::ops::Activation::Relu6 => ferrite_kernels::Clamp::RELU6,
                crate::ops::Activation::ReluN1To1 => ferrite_kernels::Clamp::RELU_N1_TO_1,
                _ => return false,
            };
            // The residual must exist when the kernel runs and match the output exactly.
            let kernel_op = steps[step].op;
            let ready = producer_of[other] == usize::MAX || producer_of[other] < kernel_op;
            if other == x
                || !ready
                || tensors[other].dtype != DType::F32
                || tensors[other].shape != tensors[x].shape
                || matches!(tensors[other].loc, Loc::None) && producer_of[other] == usize::MAX && !g.inputs.contains(&other)
            {
                return false;
            }
            let arg = g.ops[kernel_op].inputs.len() + steps[step].extra.len();
            steps[step].extra.push(other);
            e.ops.push(Epilogue::Add { arg, clamp });
            true
        }
        _ => false,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::model::{Op, Subgraph, TensorInfo};
    use crate::ops::{Activation, OpParams, Padding};

    pub(in crate::compile) fn tensor(dtype: DType, shape: &[usize]) -> TensorInfo {
        TensorInfo {
            name: String::new(),
            dtype,
            shape: shape.to_vec(),
            shape_signature: shape.iter().map(|&d| d as i64).collect(),
            quant: None,
            data: None,
            sparsity: None,
            is_variable: false,
        }
    }

    pub(in crate::compile) fn op(code: B, inputs: &[usize], outputs: &[usize], params: OpParams) -> Op {
        Op {
            code: OpCode::Builtin(code),
            version: 1,
            inputs: inputs.iter().map(|&i| Some(i)).collect(),
            outputs: outputs.to_vec(),
            params,
            custom_options: None,
        }
    }

    fn slots(g: &Subgraph) -> Vec<TensorSlot> {
        g.tensors.iter().map(|t| TensorSlot { dtype: t.dtype, shape: t.shape.clone(), loc: Loc::None }).collect()
    }

    fn readers(g: &Subgraph) -> Vec<usize> {
        let mut r = vec![0; g.tensors.len()];
        for t in g.ops.iter().flat_map(|o| o.inputs.iter().flatten()).chain(&g.outputs) {
            r[*t] += 1;
        }
        r
    }

    fn conv(padding: Padding) -> OpParams {
        OpParams::Conv2D { padding, stride: (1, 1), dilation: (1, 1), activation: Activation::None }
    }

    /// x -PAD(pads)-> p -CONV(w)-> y: tensors x=0, pads=1, p=2, w=3, y=4.
    fn pad_then_conv(padding: Padding, dtype: DType) -> Subgraph {
        Subgraph {
            name: String::new(),
            tensors: vec![
                tensor(dtype, &[1, 4, 4, 2]),
                tensor(DType::I32, &[4, 2]),
                tensor(dtype, &[1, 6, 6, 2]),
                tensor(dtype, &[3, 3, 3, 2]),
                tensor(dtype, &[1, 4, 4, 3]),
            ],
            ops: vec![op(B::PAD, &[0, 1], &[2], OpParams::None), op(B::CONV_2D, &[2, 3], &[4], conv(padding))],
            inputs: vec![0],
            outputs: vec![4],
        }
    }

    fn pads(v: [i32; 8]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn zero_pad_of_height_and_width_folds_into_a_valid_conv() {
        let g = pad_then_conv(Padding::Valid, DType::F32);
        let p = pads([0, 0, 1, 1, 2, 0, 0, 0]);
        let fold = |g: &Subgraph, p: &[u8]| foldable_pad(g, 0, &slots(g), &readers(g), |k| (k == 1).then_some(p));
        assert_eq!(fold(&g, &p), Some([1, 1, 2, 0]));
        // Not when the conv pads itself, the tensor is not float, the batch or
        // channels are padded, or the padding is unknown at prepare.
        assert_eq!(fold(&pad_then_conv(Padding::Same, DType::F32), &p), None);
        assert_eq!(fold(&pad_then_conv(Padding::Valid, DType::I8), &p), None);
        assert_eq!(fold(&g, &pads([1, 0, 1, 1, 0, 0, 0, 0])), None);
        assert_eq!(fold(&g, &pads([0, 0, 1, 1, 0, 0, 0, 1])), None);
        assert_eq!(foldable_pad(&g, 0, &slots(&g), &readers(&g), |_| None), None);
        // Nor when the padded tensor has a second reader.
        let mut two = g.clone();
        two.outputs.push(2);
        assert_eq!(fold(&two, &p), None);
    }

    #[test]
    fn epilogue_reader_is_the_only_reader_and_an_activation_prelu_or_add() {
        // x -CONV-> y -RELU6-> z -ADD(x)-> s
        let g = Subgraph {
            name: String::new(),
            tensors: vec![
                tensor(DType::F32, &[1, 4, 4, 3]),
                tensor(DType::F32, &[3, 1, 1, 3]),
                tensor(DType::F32, &[1, 4, 4, 3]),
                tensor(DType::F32, &[1, 4, 4, 3]),
                tensor(DType::F32, &[1, 4, 4, 3]),
            ],
            ops: vec![
                op(B::CONV_2D, &[0, 1], &[2], conv(Padding::Same)),
                op(B::RELU6, &[2], &[3], OpParams::None),
                op(B::ADD, &[3, 0], &[4], OpParams::Binary { activation: Activation::None, pot_scale_int16: true }),
            ],
            inputs: vec![0],
            outputs: vec![4],
        };
        let r = readers(&g);
        assert_eq!(epilogue_reader(&g, 0, 2, &r), Some(1));
        assert_eq!(epilogue_reader(&g, 1, 3, &r), Some(2));
        // A graph output has a reader outside the subgraph: nothing folds into its producer.
        assert_eq!(epilogue_reader(&g, 2, 4, &r), None);
        let mut shared = g.clone();
        shared.outputs.push(2);
        assert_eq!(epilogue_reader(&shared, 0, 2, &readers(&shared)), None);
        assert_eq!(activation_epilogue(B::LEAKY_RELU, &OpParams::LeakyRelu { alpha: 0.2 }), Some(ferrite_kernels::elementwise::Unary::LeakyRelu(0.2)));
        assert_eq!(activation_epilogue(B::TANH, &OpParams::None), None);
    }
}
