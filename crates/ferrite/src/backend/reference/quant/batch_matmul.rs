//! BATCH_MATMUL on int8, int16 (zero points 0) and hybrid (float left operand,
//! int8 right operand).
//!
//! `out[p, i, j] = sum_k A[p, i, k] * B[p, k, j]`, with `adj_x` / `adj_y` reading
//! an operand transposed and the leading (batch) dimensions broadcast.
//!
//! * int8: `clamp(out_zp + MultiplyByQuantizedMultiplier(sum (a - a_zp) * (b - b_zp)))`,
//!   the multiplier from `sa * sb / so` in single precision (as LiteRT's prepare).
//! * int16: int64 sums requantized through the 64-bit multiply.
//! * hybrid: each row of A quantized to int8 at run time (symmetric, or asymmetric
//!   when the op asks); `out = row_scale * w_scale[j] * sum (q - row_zp) * b`.

use ferrite_kernels::quant::{multiply_by_quantized_multiplier as mbqm, multiply_by_quantized_multiplier_i64, quantize_multiplier};

use super::hybrid::{quantize_asymmetric, quantize_symmetric};
use super::{elements, per_tensor, read_f32, read_ints, write_f32, write_ints};
use crate::backend::{arg, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// Shapes of one BATCH_MATMUL: (m, k, n), the broadcast batch shape, and for every
/// output batch the index of each operand's matrix.
struct Geometry {
    m: usize,
    k: usize,
    n: usize,
    batches: Vec<(usize, usize)>,
    out_shape: Vec<usize>,
}

/// The operand matrix of flat output batch `flat` (broadcast dims of 1 repeat).
fn operand_batch(batch: &[usize], shape: &[usize], flat: usize) -> usize {
    let (mut rest, mut index, mut stride) = (flat, 0, 1);
    for d in (0..batch.len()).rev() {
        let coord = rest % batch[d].max(1);
        rest /= batch[d].max(1);
        if let Some(s) = (d + shape.len()).checked_sub(batch.len()) {
            if shape[s] != 1 {
                index += coord * stride;
            }
            stride *= shape[s];
        }
    }
    index
}

/// The shapes of a BATCH_MATMUL, checked.
fn geometry(op: &OpContext<'_>, adj_x: bool, adj_y: bool) -> Result<Geometry> {
    let (a, b) = (&op.input(0)?.shape, &op.input(1)?.shape);
    let (ra, rb) = (a.len(), b.len());
    if ra < 2 || rb < 2 {
        return Err(op.bad(format!("operands must be at least 2-D, got {a:?} and {b:?}")));
    }
    let (m, ka) = if adj_x { (a[ra - 1], a[ra - 2]) } else { (a[ra - 2], a[ra - 1]) };
    let (kb, n) = if adj_y { (b[rb - 1], b[rb - 2]) } else { (b[rb - 2], b[rb - 1]) };
    if ka != kb {
        return Err(op.bad(format!("inner dimensions differ: {a:?} x {b:?}")));
    }
    let (ba, bb) = (&a[..ra - 2], &b[..rb - 2]);
    let r = ba.len().max(bb.len());
    let dim = |s: &[usize], i: usize| (i + s.len()).checked_sub(r).map_or(1, |j| s[j]);
    let batch: Vec<usize> = (0..r)
        .map(|i| match (dim(ba, i), dim(bb, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(op.bad(format!("batch dims of {a:?} and {b:?} do not broadcast"))),
        })
        .collect::<Result<_>>()?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    elements(op, &out_shape)?;
    let count: usize = batch.iter().product();
    let batches = (0..count).map(|p| (operand_batch(&batch, ba, p), operand_batch(&batch, bb, p))).collect();
    Ok(Geometry { m, k: ka, n, batches, out_shape })
}

/// BATCH_MATMUL of int8 or int16 operands, or hybrid (float by int8).
pub(super) fn batch_matmul(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::BatchMatMul { adj_x, adj_y, asymmetric_quantize_inputs } = op.op.params else { return Err(op.bad("missing BatchMatMul options")) };
    let (a, b) = (op.input(0)?, op.input(1)?);
    let out = op.outputs.first().ok_or_else(|| op.bad("missing output"))?;
    let hybrid = a.dtype == DType::F32 && b.dtype == DType::I8;
    if !hybrid && (!matches!(a.dtype, DType::I8 | DType::I16) || b.dtype != a.dtype || out.dtype != a.dtype) {
        return Err(op.unsupported(format!("BATCH_MATMUL of {} and {} to {}", a.dtype.name(), b.dtype.name(), out.dtype.name())));
    }
    let g = geometry(op, adj_x, adj_y)?;
    let (m, k, n) = (g.m, g.k, g.n);
    let (n_a, n_b) = (elements(op, &a.shape)?, elements(op, &b.shape)?);
    // Element (i, kk) of the left matrix starting at `base`, and (kk, j) of the right.
    let at_a = move |base: usize, i: usize, kk: usize| base + if adj_x { kk * m + i } else { i * k + kk };
    let at_b = move |base: usize, kk: usize, j: usize| base + if adj_y { j * k + kk } else { kk * n + j };
    if hybrid {
        if out.dtype != DType::F32 {
            return Err(op.unsupported("hybrid BATCH_MATMUL with a non-float output"));
        }
        let wq = b.quant.ok_or_else(|| op.bad("int8 operand has no quantization parameters"))?;
        if wq.zero_point.iter().any(|&z| z != 0) {
            return Err(op.unsupported("hybrid BATCH_MATMUL weights with a nonzero zero point"));
        }
        if (wq.scale.len() != 1 && wq.scale.len() != n) || wq.scale.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(op.bad(format!("{} weight scales for {n} output columns, or a scale not finite and positive", wq.scale.len())));
        }
        let w_scales = wq.scale.clone();
        return Ok(Built {
            outputs: vec![(DType::F32, g.out_shape)],
            kernel: Box::new(move |ins, outs| {
                let av = read_f32(arg(ins, 0)?, n_a, "input 0")?;
                let bv = read_ints(DType::I8, arg(ins, 1)?, n_b, "input 1")?;
                let mut y = vec![0.0f32; g.batches.len() * m * n];
                for (p, &(pa, pb)) in g.batches.iter().enumerate() {
                    for i in 0..m {
                        let row: Vec<f32> = (0..k).map(|kk| av[at_a(pa * m * k, i, kk)]).collect();
                        let (q, row_scale, zp) = if asymmetric_quantize_inputs { quantize_asymmetric(&row) } else { quantize_symmetric(&row) };
                        for j in 0..n {
                            let mut acc = 0i32;
                            for (kk, &qv) in q.iter().enumerate() {
                                acc = acc.wrapping_add((qv - zp) * bv[at_b(pb * k * n, kk, j)]);
                            }
                            let ws = w_scales[if w_scales.len() == 1 { 0 } else { j }];
                            y[(p * m + i) * n + j] = row_scale * ws * acc as f32;
                        }
                    }
                }
                write_f32(&y, outs[0])
            }),
        });
    }
    let dtype = a.dtype;
    let (sa, za) = per_tensor(op, a.quant, dtype, "input 0")?;
    let (sb, zb) = per_tensor(op, b.quant, dtype, "input 1")?;
    let (so, zo) = per_tensor(op, out.quant.as_ref(), dtype, "output")?;
    if dtype == DType::I16 && (za != 0 || zb != 0 || zo != 0) {
        return Err(op.bad("int16 BATCH_MATMUL requires zero points of 0"));
    }
    let (mult, shift) = quantize_multiplier(f64::from(sa * sb / so));
    let (lo, hi) = super::int_range(dtype);
    Ok(Built {
        outputs: vec![(dtype, g.out_shape)],
        kernel: Box::new(move |ins, outs| {
            let av = read_ints(dtype, arg(ins, 0)?, n_a, "input 0")?;
            let bv = read_ints(dtype, arg(ins, 1)?, n_b, "input 1")?;
            let mut y = vec![0i32; g.batches.len() * m * n];
            for (p, &(pa, pb)) in g.batches.iter().enumerate() {
                for i in 0..m {
                    for j in 0..n {
                        let mut acc = 0i64;
                        for kk in 0..k {
                            acc += i64::from((av[at_a(pa * m * k, i, kk)] - za) * (bv[at_b(pb * k * n, kk, j)] - zb));
                        }
                        let v = if dtype == DType::I16 { multiply_by_quantized_multiplier_i64(acc, mult, shift) } else { mbqm(acc as i32, mult, shift) };
                        y[(p * m + i) * n + j] = v.saturating_add(zo).clamp(lo, hi);
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

    use super::super::super::quant_test_util::{mismatches, out, q, qc, run_ref, Rng, T};
    use crate::model::DType;
    use crate::ops::OpParams;

    #[test]
    fn int8_by_hand() {
        // [1, 2] x [[3], [4]] = 11 at scales 1 x 1 / 0.5: 22.
        let a = T::ints(DType::I8, &[1, 2], q(1.0, 0), &[1, 2]);
        let b = T::ints(DType::I8, &[2, 1], q(1.0, 0), &[3, 4]);
        let p = OpParams::BatchMatMul { adj_x: false, adj_y: false, asymmetric_quantize_inputs: false };
        let (spec, r) = run_ref(B::BATCH_MATMUL, &p, &[Some(&a), Some(&b)], &out(DType::I8, q(0.5, 0))).expect("bmm");
        assert_eq!((spec, r), ((DType::I8, vec![1, 1]), vec![22u8]));
    }

    #[test]
    fn batch_matmul_matches_cpu() {
        let mut rng = Rng::new(111);
        let batch_shapes: [(&[usize], &[usize]); 4] = [(&[], &[]), (&[2], &[2]), (&[2, 1], &[3]), (&[1], &[2, 2])];
        for case in 0..72 {
            let kind = case % 3; // 0: int8, 1: int16, 2: hybrid
            let (adj_x, adj_y) = (rng.one_in(2), rng.one_in(2));
            let (m, k, n) = (rng.usize(1, 4), rng.usize(1, 9), rng.usize(1, 5));
            let (ba, bb) = batch_shapes[(case / 3) % 4];
            let a_shape = [ba, &(if adj_x { [k, m] } else { [m, k] })[..]].concat();
            let b_shape = [bb, &(if adj_y { [n, k] } else { [k, n] })[..]].concat();
            let (na, nb) = (a_shape.iter().product::<usize>(), b_shape.iter().product::<usize>());
            let p = OpParams::BatchMatMul { adj_x, adj_y, asymmetric_quantize_inputs: rng.one_in(2) };
            let (a, b, o) = match kind {
                0 => (
                    T::ints(DType::I8, &a_shape, q(rng.scale(0.05), rng.zp(DType::I8)), &rng.ints(DType::I8, na)),
                    T::ints(DType::I8, &b_shape, q(rng.scale(0.05), rng.zp(DType::I8)), &rng.ints(DType::I8, nb)),
                    out(DType::I8, q(rng.scale(0.1), rng.zp(DType::I8))),
                ),
                1 => (
                    T::ints(DType::I16, &a_shape, q(rng.scale(0.001), 0), &rng.ints(DType::I16, na)),
                    T::ints(DType::I16, &b_shape, q(rng.scale(0.001), 0), &rng.ints(DType::I16, nb)),
                    out(DType::I16, q(rng.scale(0.01), 0)),
                ),
                _ => {
                    let wq = if rng.one_in(2) { qc((0..n).map(|_| rng.scale(0.02)).collect(), b_shape.len() - 1) } else { q(rng.scale(0.02), 0) };
                    (
                        T::f32s(&a_shape, &(0..na).map(|_| rng.f32(-2.0, 3.0)).collect::<Vec<_>>()),
                        T::ints(DType::I8, &b_shape, wq, &rng.ints(DType::I8, nb)).constant(),
                        out(DType::F32, None),
                    )
                }
            };
            let mism = mismatches(B::BATCH_MATMUL, &p, &[Some(&a), Some(&b)], &o);
            assert_eq!(mism, 0, "case {case}: BATCH_MATMUL kind {kind} {a_shape:?} x {b_shape:?} ({p:?}): {mism} mismatching outputs");
        }
    }
}
