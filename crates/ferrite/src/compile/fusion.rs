//! Fusion: ops that run inside a neighbouring kernel instead of as steps of
//! their own — a zero PAD folded into the VALID convolution reading it, and
//! element-wise epilogues (activations, PRELU, a residual ADD) applied by the
//! convolution producing their input while its output is in cache.

use super::{Loc, Step, TensorSlot};
use crate::model::{BuiltinOp as B, DType, Model, OpCode};

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
    if op.code != OpCode::Builtin(B::PAD) {
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
    pub(super) slot: crate::backend::EpilogueSlot,
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
