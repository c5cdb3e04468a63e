//! MEAN on int8, uint8 and int16, and CONCATENATION of quantized tensors.
//!
//! MEAN follows LiteRT's integer mean: the sum of the reduced elements in int32
//! (wrapping), less `count * in_zp`, rescaled by one fixed-point multiplier that
//! folds in both `in_scale / out_scale` and the division by the count.
//!
//! CONCATENATION follows LiteRT's rules for integer inputs: int8 inputs must share
//! the output's scale and zero point; int16 inputs must have zero points of 0 and
//! are copied whatever their scales; uint8 inputs quantized differently from the
//! output are requantized through single-precision float.

use ferrite_kernels::quant::{multiply_by_quantized_multiplier as mbqm, quantize_multiplier};

use super::{elements, int_range, per_tensor, read_ints, write_ints};
use crate::backend::{arg, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams};

/// `a` (possibly negative) as an axis of a rank-`rank` tensor.
fn axis(op: &OpContext<'_>, a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if !(0..r).contains(&v) {
        return Err(op.bad(format!("axis {a} out of range for rank {rank}")));
    }
    Ok(v as usize)
}

/// The output offset that input element `flat` of `shape` contributes to when the
/// dims flagged in `reduced` collapse.
fn reduced_offset(shape: &[usize], reduced: &[bool], flat: usize) -> usize {
    let (mut rest, mut offset, mut stride) = (flat, 0, 1);
    for d in (0..shape.len()).rev() {
        let coord = rest % shape[d].max(1);
        rest /= shape[d].max(1);
        if !reduced[d] {
            offset += coord * stride;
            stride *= shape[d];
        }
    }
    offset
}

/// MEAN over the constant axes of input 1 (`keep_dims` keeps them as 1s).
pub(super) fn mean(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    let out = op.outputs.first().ok_or_else(|| op.bad("missing output"))?;
    if out.dtype != dtype {
        return Err(op.unsupported(format!("MEAN of {} to {}", dtype.name(), out.dtype.name())));
    }
    let (in_scale, in_zp) = per_tensor(op, x.quant, dtype, "input")?;
    let (out_scale, out_zp) = per_tensor(op, out.quant.as_ref(), dtype, "output")?;
    let shape = x.shape.clone();
    let mut reduced = vec![false; shape.len()];
    for a in op.const_ints(1)? {
        reduced[axis(op, a, shape.len())?] = true;
    }
    let keep = matches!(op.op.params, OpParams::Reducer { keep_dims: true });
    let out_shape: Vec<usize> = if keep {
        shape.iter().zip(&reduced).map(|(&s, &r)| if r { 1 } else { s }).collect()
    } else {
        shape.iter().zip(&reduced).filter(|(_, &r)| !r).map(|(&s, _)| s).collect()
    };
    let count: usize = shape.iter().zip(&reduced).filter(|(_, &r)| r).map(|(&s, _)| s).product();
    let (n_in, n_out) = (elements(op, &shape)?, elements(op, &out_shape)?);
    // 1/count folded into the multiplier: shifted left by floor(log2 count) (at
    // most 32, and no further than the shift can go) before dividing by count.
    let (m, e) = quantize_multiplier(f64::from(in_scale) / f64::from(out_scale));
    let (mult, shift) = if count == 0 {
        (0, e)
    } else {
        let s = (count.ilog2() as i32).min(32).min(31 + e).max(0);
        (((i64::from(m) << s) / count as i64) as i32, e - s)
    };
    let (lo, hi) = int_range(dtype);
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = read_ints(dtype, arg(ins, 0)?, n_in, "input")?;
            let mut sums = vec![0i32; n_out];
            for (i, &v) in x.iter().enumerate() {
                let o = reduced_offset(&shape, &reduced, i);
                sums[o] = sums[o].wrapping_add(v);
            }
            let zp_share = (i64::from(in_zp) * count as i64) as i32;
            let y: Vec<i32> = sums.iter().map(|&s| mbqm(s.wrapping_sub(zp_share), mult, shift).saturating_add(out_zp).clamp(lo, hi)).collect();
            write_ints(dtype, &y, outs[0])
        }),
    })
}

/// CONCATENATION along the op's axis, under LiteRT's rules for integer inputs.
pub(super) fn concatenation(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Concatenation { axis: a, activation } = op.op.params else { return Err(op.bad("missing Concatenation options")) };
    let inputs: Vec<_> = op.inputs.iter().map(|i| i.as_ref().ok_or_else(|| op.bad("missing input"))).collect::<Result<_>>()?;
    let first = *inputs.first().ok_or_else(|| op.bad("no inputs"))?;
    let dtype = first.dtype;
    let out = op.outputs.first().ok_or_else(|| op.bad("missing output"))?;
    if activation != Activation::None {
        return Err(op.unsupported("fused activation on an integer CONCATENATION"));
    }
    if out.dtype != dtype {
        return Err(op.unsupported(format!("CONCATENATION of {} to {}", dtype.name(), out.dtype.name())));
    }
    let ax = axis(op, i64::from(a), first.shape.len())?;
    let mut out_shape = first.shape.clone();
    out_shape[ax] = 0;
    for (i, t) in inputs.iter().enumerate() {
        let fits = t.dtype == dtype && t.shape.len() == out_shape.len() && t.shape.iter().zip(&out_shape).enumerate().all(|(d, (x, y))| d == ax || x == y);
        if !fits {
            return Err(op.bad(format!("input {i} ({} {:?}) does not match input 0 ({} {:?})", t.dtype.name(), t.shape, dtype.name(), first.shape)));
        }
        out_shape[ax] += t.shape[ax];
    }
    // Each input's quantization as written, compared exactly with the output's.
    let params = |q: Option<&crate::model::Quantization>| q.map(|q| (q.scale.first().copied(), q.zero_point.first().copied()));
    let out_q = params(out.quant.as_ref());
    // Per input: None to copy, or (scale, bias) of the single-precision requantization.
    let mut rescale: Vec<Option<(f32, f32)>> = vec![None; inputs.len()];
    match dtype {
        DType::I8 if inputs.iter().any(|t| params(t.quant) != out_q) => {
            return Err(op.bad("int8 CONCATENATION inputs must share the output's scale and zero point"));
        }
        DType::I16 if inputs.iter().map(|t| params(t.quant)).chain([out_q]).any(|q| q.is_some_and(|(_, zp)| zp.is_some_and(|z| z != 0))) => {
            return Err(op.bad("int16 CONCATENATION requires zero points of 0"));
        }
        DType::U8 => {
            for (r, t) in rescale.iter_mut().zip(&inputs) {
                if params(t.quant) != out_q {
                    let (out_scale, _) = per_tensor(op, out.quant.as_ref(), dtype, "output")?;
                    let (s, zp) = per_tensor(op, t.quant, dtype, "input")?;
                    let scale = s * (1.0 / out_scale);
                    *r = Some((scale, -(zp as f32) * scale));
                }
            }
        }
        _ => {}
    }
    let out_zp = match out_q {
        Some((_, Some(z))) => i32::try_from(z).map_err(|_| op.bad("output zero point out of range"))?,
        _ => 0,
    };
    let outer: usize = out_shape[..ax].iter().product();
    let inner: usize = out_shape[ax + 1..].iter().product();
    let sizes: Vec<usize> = inputs.iter().map(|t| elements(op, &t.shape)).collect::<Result<_>>()?;
    let chunks: Vec<usize> = inputs.iter().map(|t| t.shape[ax] * inner).collect();
    elements(op, &out_shape)?;
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let parts: Vec<Vec<i32>> = sizes.iter().enumerate().map(|(i, &n)| read_ints(dtype, arg(ins, i)?, n, "input")).collect::<Result<_>>()?;
            let mut y = Vec::with_capacity(outer * chunks.iter().sum::<usize>());
            for k in 0..outer {
                for ((part, &chunk), r) in parts.iter().zip(&chunks).zip(&rescale) {
                    for &v in &part[k * chunk..(k + 1) * chunk] {
                        y.push(match *r {
                            None => v,
                            Some((scale, bias)) => ((v as f32 * scale + bias).round() as i32).saturating_add(out_zp).clamp(0, 255),
                        });
                    }
                }
            }
            write_ints(dtype, &y, outs[0])
        }),
    })
}

#[cfg(test)]
mod tests {
    use ferrite_format::ops::BuiltinOp as B;

    use super::super::super::quant_test_util::{mismatches, out, q, run_ref, Rng, T};
    use crate::model::DType;
    use crate::ops::{Activation, OpParams};

    #[test]
    fn mean_by_hand() {
        // Mean of [1, 2, 4] (scale 1, zp 0) = 7/3 -> 2 at the same scale.
        let x = T::ints(DType::I8, &[1, 3], q(1.0, 0), &[1, 2, 4]);
        let axes = T::ints(DType::I32, &[1], None, &[1]).constant();
        let (spec, r) = run_ref(B::MEAN, &OpParams::Reducer { keep_dims: false }, &[Some(&x), Some(&axes)], &out(DType::I8, q(1.0, 0))).expect("mean");
        assert_eq!((spec, r), ((DType::I8, vec![1]), vec![2u8]));
    }

    #[test]
    fn mean_matches_cpu() {
        let mut rng = Rng::new(91);
        let axes_sets: [&[i32]; 5] = [&[1, 2], &[-1], &[0], &[1], &[0, 2, 3]];
        for case in 0..60 {
            let dtype = [DType::I8, DType::U8, DType::I16][case % 3];
            let shape = [rng.usize(1, 3), rng.usize(1, 5), rng.usize(1, 5), rng.usize(1, 4)];
            let n: usize = shape.iter().product();
            let x = T::ints(dtype, &shape, q(rng.scale(0.05), rng.zp(dtype)), &rng.ints(dtype, n));
            let a = axes_sets[(case / 3) % 5];
            let axes = T::ints(DType::I32, &[a.len()], None, a).constant();
            let keep = rng.one_in(2);
            let o = out(dtype, q(rng.scale(0.05), rng.zp(dtype)));
            let n = mismatches(B::MEAN, &OpParams::Reducer { keep_dims: keep }, &[Some(&x), Some(&axes)], &o);
            assert_eq!(n, 0, "case {case}: MEAN {dtype:?} {shape:?} over {a:?}: {n} mismatching outputs");
        }
    }

    #[test]
    fn concatenation_matches_cpu() {
        let mut rng = Rng::new(101);
        for case in 0..45 {
            let dtype = [DType::I8, DType::U8, DType::I16][case % 3];
            let ax = rng.usize(0, 2);
            let oq = q(rng.scale(0.05), rng.zp(dtype));
            let inputs: Vec<T> = (0..rng.usize(1, 3))
                .map(|_| {
                    let mut shape = vec![2, 3, 2];
                    shape[ax] = rng.usize(1, 3);
                    // uint8 inputs may be quantized unlike the output (requantized); int16
                    // ones may differ in scale (copied); int8 ones must match.
                    let quant = match dtype {
                        DType::U8 if rng.one_in(2) => q(rng.scale(0.05), rng.zp(dtype)),
                        DType::I16 => q(rng.scale(0.05), 0),
                        _ => oq.clone(),
                    };
                    T::ints(dtype, &shape, quant, &rng.ints(dtype, shape.iter().product()))
                })
                .collect();
            let refs: Vec<Option<&T>> = inputs.iter().map(Some).collect();
            let p = OpParams::Concatenation { axis: ax as i32 - if case % 2 == 0 { 3 } else { 0 }, activation: Activation::None };
            let n = mismatches(B::CONCATENATION, &p, &refs, &out(dtype, oq));
            assert_eq!(n, 0, "case {case}: CONCATENATION {dtype:?} axis {ax}: {n} mismatching outputs");
        }
    }

    #[test]
    fn concatenation_refuses_mismatched_int8() {
        let a = T::ints(DType::I8, &[1, 2], q(0.5, 0), &[1, 2]);
        let b = T::ints(DType::I8, &[1, 2], q(0.25, 0), &[1, 2]);
        let p = OpParams::Concatenation { axis: 1, activation: Activation::None };
        let r = run_ref(B::CONCATENATION, &p, &[Some(&a), Some(&b)], &out(DType::I8, q(0.5, 0)));
        assert!(matches!(r, Err(crate::error::Error::InvalidModel(_))), "{:?}", r.err());
    }
}
