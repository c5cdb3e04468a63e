//! SUM of int8 / uint8 / int16 and REDUCE_PROD of int8 / int16, as LiteRT's
//! builtin kernels compute them.
//!
//! SUM: int32 sums of the stored values, then in single precision
//! `round(sum * s + (-in_zp * s) * count)` with `s = in_scale / out_scale` (also
//! when the two quantizations are equal), rounding halves away from zero, plus
//! the output zero point, clamped. An empty input gives stored zeros.
//!
//! REDUCE_PROD: per output, the first element's `v - in_zp`, then for every
//! further element the product with `v - in_zp` rescaled (64-bit, multiplier
//! rounded to 16 bits) by `in_scale / out_scale^(1/n)`, n the input elements per
//! output; once more rescaled at the end, plus the output zero point, clamped.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::quant::quantize_multiplier;

use super::{elements, int_range, per_tensor, read_ints, write_ints};
use crate::backend::{arg, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The reduced dims and output shape of the op's constant axes.
fn reduction(op: &OpContext<'_>, shape: &[usize]) -> Result<(Vec<bool>, Vec<usize>)> {
    let axes = op.const_ints(1)?;
    let rank = shape.len() as i64;
    let mut reduced = vec![false; shape.len()];
    for &a in &axes {
        let v = if a < 0 { a + rank } else { a };
        if shape.is_empty() && (a == 0 || a == -1) {
            continue;
        }
        if !(0..rank).contains(&v) {
            return Err(op.bad(format!("axis {a} out of range for rank {rank}")));
        }
        reduced[v as usize] = true;
    }
    let keep = matches!(op.op.params, OpParams::Reducer { keep_dims: true });
    let out: Vec<usize> = if keep {
        shape.iter().zip(&reduced).map(|(&s, &r)| if r { 1 } else { s }).collect()
    } else {
        shape.iter().zip(&reduced).filter(|(_, &r)| !r).map(|(&s, _)| s).collect()
    };
    Ok((reduced, out))
}

/// Output offset of input element `flat`, and whether its reduced coordinates are all 0.
fn place(shape: &[usize], reduced: &[bool], flat: usize) -> (usize, bool) {
    let mut coords = vec![0usize; shape.len()];
    let mut rest = flat;
    for d in (0..shape.len()).rev() {
        coords[d] = rest % shape[d];
        rest /= shape[d];
    }
    let o = (0..shape.len()).filter(|&d| !reduced[d]).fold(0, |o, d| o * shape[d] + coords[d]);
    (o, (0..shape.len()).all(|d| !reduced[d] || coords[d] == 0))
}

/// LiteRT's 64-bit rescale: the multiplier rounded to 16 bits, one right shift
/// by `15 - shift` rounding halves up.
fn mbqm64(x: i64, m: i32, shift: i32) -> i32 {
    let reduced = if m < 0x7FFF_0000 { (i128::from(m) + (1 << 15)) >> 16 } else { 0x7FFF };
    let total = 15 - shift;
    ((i128::from(x) * reduced + (1i128 << (total - 1))) >> total) as i32
}

/// SUM / REDUCE_PROD of quantized inputs.
pub(super) fn build(op: &OpContext<'_>, code: B) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    let out = op.outputs.first().ok_or_else(|| op.bad("missing output"))?;
    if out.dtype != dtype {
        return Err(op.unsupported(format!("{} of {} to {}", code.name(), dtype.name(), out.dtype.name())));
    }
    let (in_scale, in_zp) = per_tensor(op, x.quant, dtype, "input")?;
    let (out_scale, out_zp) = per_tensor(op, out.quant.as_ref(), dtype, "output")?;
    let prod = code == B::REDUCE_PROD;

    if prod && dtype == DType::U8 {
        return Err(op.unsupported("REDUCE_PROD of uint8 (LiteRT: unsupported quantized data type)"));
    }
    if dtype == DType::I16 && (in_zp != 0 || out_zp != 0) {
        return Err(op.unsupported(format!("int16 {} with a nonzero zero point (LiteRT requires 0)", code.name())));
    }
    let shape = x.shape.clone();
    let (reduced, out_shape) = reduction(op, &shape)?;
    let (n_in, n_out) = (elements(op, &shape)?, elements(op, &out_shape)?);
    let count: usize = shape.iter().zip(&reduced).filter(|(_, &r)| r).map(|(&s, _)| s).product();
    let (lo, hi) = int_range(dtype);
    let n = n_in.checked_div(n_out).unwrap_or(1).max(1);
    let (m, e) = quantize_multiplier(f64::from(in_scale) / f64::from(out_scale).powf(1.0 / n as f64));
    if prod && n_in > 0 && !(-31..8).contains(&e) {
        return Err(op.unsupported("REDUCE_PROD scaling out of LiteRT's 64-bit rescale range"));
    }
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = read_ints(dtype, arg(ins, 0)?, n_in, "input")?;
            let mut acc = vec![0i64; n_out];
            if n_in == 0 {
                return write_ints(dtype, &vec![0; n_out], outs[0]);
            }
            let s = in_scale / out_scale;
            let bias = (-(in_zp as f32) * s) * count as f32;
            for (i, &v) in x.iter().enumerate() {
                let (o, first) = place(&shape, &reduced, i);
                let v = i64::from(v);
                acc[o] = if !prod {
                    // int32 accumulation, wrapping as LiteRT's does.
                    i64::from((acc[o] as i32).wrapping_add(v as i32))
                } else if first {
                    v - i64::from(in_zp)
                } else {
                    i64::from(mbqm64(acc[o] * (v - i64::from(in_zp)), m, e))
                };
            }
            let y: Vec<i32> = acc
                .iter()
                .map(|&a| {
                    let r = if prod { mbqm64(a, m, e) } else { ((a as i32) as f32 * s + bias).round() as i32 };
                    r.saturating_add(out_zp).clamp(lo, hi)
                })
                .collect();
            write_ints(dtype, &y, outs[0])
        }),
    })
}

#[cfg(test)]
mod tests {
    use ferrite_format::ops::BuiltinOp as B;

    use super::super::super::quant_test_util::{mismatches, out, q, Rng, T};
    use crate::model::DType;
    use crate::ops::OpParams;

    /// SUM of int8 / uint8 / int16 and REDUCE_PROD of int8 / int16, bit for bit
    /// with the CPU backend over random shapes, axes (negative, repeated, none)
    /// and quantizations.
    #[test]
    fn sum_and_prod_match_cpu() {
        let mut rng = Rng::new(0x5a3);
        let axes_sets: [&[i32]; 6] = [&[1, 2], &[-1], &[0], &[], &[0, -4, 3], &[2, 1, 0, 3]];
        for case in 0..120 {
            let prod = case % 2 == 1;
            let dtype = if prod { [DType::I8, DType::I16][case / 2 % 2] } else { [DType::I8, DType::U8, DType::I16][case / 2 % 3] };
            let shape = [rng.usize(1, 3), rng.usize(1, 5), rng.usize(1, 5), rng.usize(1, 4)];
            let n: usize = shape.iter().product();
            let a = axes_sets[(case / 6) % axes_sets.len()];
            let axes = T::ints(DType::I32, &[a.len()], None, a).constant();
            let qmax = if dtype == DType::I16 { 32767.0 } else { 127.0 };
            let (x_q, o) = if prod {
                // Reals within about [-1.5, 1.5]; the output spans their products.
                let reduced: usize = (0..4).filter(|d| a.iter().any(|&v| (v + 4) % 4 == *d as i32)).map(|d| shape[d]).product();
                let s_out = 1.5f32.powi(reduced.min(12) as i32) / qmax;
                (q(rng.scale(1.2 / qmax), rng.zp(dtype) / 8), out(dtype, q(s_out, rng.zp(dtype) / 8)))
            } else {
                (q(rng.scale(0.05), rng.zp(dtype)), out(dtype, q(rng.scale(0.2), rng.zp(dtype))))
            };
            let x = T::ints(dtype, &shape, x_q, &rng.ints(dtype, n));
            let code = if prod { B::REDUCE_PROD } else { B::SUM };
            let keep = rng.one_in(2);
            let bad = mismatches(code, &OpParams::Reducer { keep_dims: keep }, &[Some(&x), Some(&axes)], &o);
            assert_eq!(bad, 0, "case {case}: {code:?} {dtype:?} {shape:?} over {a:?}: {bad} mismatching outputs");
        }
    }
}
