//! Cases of hybrid TRANSPOSE_CONV: float32 input and output, a constant int8 filter
//! (OHWI, zero points 0) with one scale per output channel or one for the tensor,
//! and a float32 bias or none. LiteRT quantizes each batch of the input with its own
//! scale and zero point, so the cases have up to three batches, over a range off
//! centre (a zero point far from 0). Strides differ per axis; output sizes are any the padding maps back onto
//! the input (not only `input * stride`). ferrite sums in LiteRT's order, so
//! these cases are compared exactly (the manifest's `exact`).

use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};

use super::{act, same_or_valid, Case, Rng};

/// The cases of this module, listed in the generator's `OPS`.
pub(crate) const OPS: &[&str] = &["TRANSPOSE_CONV_HYBRID", "TRANSPOSE_CONV_HYBRID_PER_TENSOR"];

/// An output size that the forward convolution of `padding` maps back onto an input
/// of `i`: SAME takes any of `(i-1)*s+1 ..= i*s`, VALID any of `(i-1)*s+k ..= (i-1)*s+k+s-1`.
fn out_size(r: &mut Rng, padding: Padding, i: usize, k: usize, s: usize) -> usize {
    if padding == Padding::SAME {
        (i - 1) * s + r.u(1, s)
    } else {
        (i - 1) * s + k + r.u(0, s - 1)
    }
}

/// The case `op`, one of [`OPS`].
pub(crate) fn gen(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let per_tensor = op.ends_with("_PER_TENSOR");
    let (n, h, w, c, oc) = (r.u(1, 3), r.u(1, 6), r.u(1, 6), r.u(1, 5), r.u(1, 6));
    let (kh, kw) = (r.u(1, 4), r.u(1, 4));
    let (sh, sw) = (r.u(1, 3), r.u(1, 3));
    let padding = same_or_valid(r);
    let (oh, ow) = (out_size(r, padding, h, kh, sh), out_size(r, padding, w, kw, sw));
    let os = m.add_tensor(TensorSpec::const_i32("output_shape", &[4], &[n as i32, oh as i32, ow as i32, oc as i32]));
    let scales: Vec<f32> = (0..if per_tensor { 1 } else { oc }).map(|_| r.f(0.002, 0.02)).collect();
    let wdata: Vec<u8> = (0..oc * kh * kw * c).map(|_| r.int(-127, 127) as i8 as u8).collect();
    let zps = vec![0; scales.len()];
    let wt = m.add_tensor(TensorSpec {
        data: Some(wdata),
        quant: Some((scales, zps, 0)),
        ..TensorSpec::activation("w", TensorType::INT8, &[oc as i32, kh as i32, kw as i32, c as i32])
    });
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[n as i32, h as i32, w as i32, c as i32]));
    m.inputs.push(x);
    // An off-centre range: the input's zero point is then far from 0.
    let lo = r.f(-3.0, 0.5);
    let ranges = vec![(lo, lo + r.f(0.5, 4.0))];
    let mut ins = vec![os, wt, x];
    if r.coin() {
        let bv = r.floats(oc, -1.0, 1.0);
        ins.push(m.add_tensor(TensorSpec::const_f32("b", &[oc as i32], &bv)));
    }
    let o = m.add_tensor(TensorSpec::activation("out", TensorType::FLOAT32, &[]));
    m.outputs.push(o);
    let opts = Options::TransposeConv { padding, stride: (sh as i32, sw as i32), activation: act(r) };
    m.add_op(OpCode::Builtin(B::TRANSPOSE_CONV), &ins, &[o], opts);
    Case { spec: m, ranges, fixed: vec![] }
}
