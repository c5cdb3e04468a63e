//! Reductions (MEAN, SUM, REDUCE_MAX/MIN/PROD) of float32, and ARG_MAX / ARG_MIN.

use super::{axis, count, input, output, ravel, unravel};
use crate::backend::{Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// What a reduction computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduction {
    Mean,
    Sum,
    Max,
    Min,
    Prod,
}

/// The dims a reduction over the constant axes of input 1 reduces (negative axes
/// count from the end; an axis named twice reduces once; a scalar reduces to
/// itself, LiteRT accepting axis 0 / -1 there, as the CPU backend does), its
/// output shape (reduced dims kept as 1 with keep_dims), and the input's shape with
/// the reduced dims collapsed to 1: the output's index space for `ravel`.
fn reduced_shapes(op: &OpContext<'_>, shape: &[usize]) -> Result<(Vec<bool>, Vec<usize>, Vec<usize>)> {
    let keep = matches!(op.op.params, OpParams::Reducer { keep_dims: true });
    let mut reduced = vec![false; shape.len()];
    for a in op.const_ints(1)? {
        if shape.is_empty() && (a == 0 || a == -1) {
            continue;
        }
        reduced[axis(op, a, shape.len())?] = true;
    }
    let out_shape: Vec<usize> = if keep {
        shape.iter().zip(&reduced).map(|(&s, &r)| if r { 1 } else { s }).collect()
    } else {
        shape.iter().zip(&reduced).filter(|(_, &r)| !r).map(|(&s, _)| s).collect()
    };
    let collapsed: Vec<usize> = shape.iter().zip(&reduced).map(|(&s, &r)| if r { 1 } else { s }).collect();
    Ok((reduced, out_shape, collapsed))
}

/// MEAN / SUM / REDUCE_MAX / REDUCE_MIN / REDUCE_PROD of float32 over the
/// constant axes of input 1 (negative axes count from the end; an axis named
/// twice reduces once). keep_dims keeps reduced dimensions as size 1.
pub(crate) fn reduce(op: &OpContext<'_>, kind: Reduction) -> Result<Built> {
    if op.input(0)?.dtype != DType::F32 {
        return reduce_int(op, kind);
    }
    super::require_f32(op, &[0])?;
    let shape = op.input(0)?.shape.clone();
    let (reduced, out_shape, collapsed) = reduced_shapes(op, &shape)?;
    let (n_in, n_out) = (count(op, &shape, 4)?, count(op, &out_shape, 4)?);
    let taps: usize = shape.iter().zip(&reduced).filter(|(_, &r)| r).map(|(&s, _)| s).product();
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, n_in)?;
            let out = output::<f32>(outs, 0, n_out)?;
            // Sums and products in f64; max / min start where LiteRT starts them.
            let init = match kind {
                Reduction::Mean | Reduction::Sum => 0.0,
                Reduction::Prod => 1.0,
                Reduction::Max => f64::from(f32::MIN),
                Reduction::Min => f64::from(f32::MAX),
            };
            let mut acc = vec![init; n_out];
            let mut index = vec![0usize; shape.len()];
            for (i, &v) in x.iter().enumerate() {
                // Output element: the input's multi-index with reduced dimensions zeroed.
                unravel(i, &shape, &mut index);
                for (d, r) in reduced.iter().enumerate() {
                    if *r {
                        index[d] = 0;
                    }
                }
                let a = &mut acc[ravel(&index, &collapsed)];
                let v = f64::from(v);
                *a = match kind {
                    Reduction::Mean | Reduction::Sum => *a + v,
                    Reduction::Prod => *a * v,
                    Reduction::Max => a.max(v),
                    Reduction::Min => a.min(v),
                };
            }
            for (o, a) in out.iter_mut().zip(acc) {
                *o = if kind == Reduction::Mean { (a / taps as f64) as f32 } else { a as f32 };
            }
            Ok(())
        }),
    })
}

/// SUM / REDUCE_PROD / REDUCE_MAX / REDUCE_MIN of int32 and int64, and REDUCE_MAX /
/// REDUCE_MIN of int8 / uint8 / int16 on the stored integers. Sums and products
/// in i128, wrapped to the element type at the end: the same value as LiteRT's
/// element-type arithmetic, which wraps (addition and multiplication agree modulo
/// 2^bits whatever the order).
fn reduce_int(op: &OpContext<'_>, kind: Reduction) -> Result<Built> {
    let dtype = op.input(0)?.dtype;
    let plain = matches!(dtype, DType::I32 | DType::I64);
    // Quantized SUM / REDUCE_PROD rescale: the quantized half's business.
    let stored = matches!(dtype, DType::I8 | DType::U8 | DType::I16) && matches!(kind, Reduction::Max | Reduction::Min);
    if !(plain || stored) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("{kind:?} of {}", dtype.name())));
    }
    let shape = op.input(0)?.shape.clone();
    let (reduced, out_shape, collapsed) = reduced_shapes(op, &shape)?;
    // MEAN of int32 / int64 divides by the reduced count, truncating.
    let taps: usize = shape.iter().zip(&reduced).filter(|(_, &r)| r).map(|(&s, _)| s).product();
    let width = dtype.size().unwrap_or(1);
    let (n_in, n_out) = (count(op, &shape, width)?, count(op, &out_shape, width)?);
    // The element type's range, for the start of max / min and for reading it.
    let (lo, hi): (i128, i128) = match dtype {
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        _ => (i64::MIN.into(), i64::MAX.into()),
    };
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let bytes = input::<u8>(ins, 0, n_in * width)?;
            let read = |i: usize| -> i128 {
                let b = &bytes[i * width..(i + 1) * width];
                let mut w = [0u8; 8];
                w[..width].copy_from_slice(b);
                match dtype {
                    DType::I8 => i128::from(b[0] as i8),
                    DType::U8 => i128::from(b[0]),
                    DType::I16 => i128::from(i16::from_le_bytes([b[0], b[1]])),
                    DType::I32 => i128::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                    _ => i128::from(i64::from_le_bytes(w)),
                }
            };
            let init = match kind {
                Reduction::Max => lo,
                Reduction::Min => hi,
                Reduction::Prod => 1,
                _ => 0,
            };
            let mut acc = vec![init; n_out];
            let mut index = vec![0usize; shape.len()];
            for i in 0..n_in {
                unravel(i, &shape, &mut index);
                for (d, r) in reduced.iter().enumerate() {
                    if *r {
                        index[d] = 0;
                    }
                }
                let a = &mut acc[ravel(&index, &collapsed)];
                let v = read(i);
                *a = match kind {
                    Reduction::Max => (*a).max(v),
                    Reduction::Min => (*a).min(v),
                    Reduction::Prod => a.wrapping_mul(v),
                    _ => a.wrapping_add(v),
                };
            }
            if kind == Reduction::Mean {
                for a in acc.iter_mut() {
                    // The sum as LiteRT's int64 accumulator holds it (wrapped), then
                    // divided with the quotient truncated; an empty reduction is 0.
                    let wrapped = *a as i64;
                    *a = if taps == 0 { 0 } else { i128::from(wrapped.wrapping_div(taps as i64)) };
                }
            }
            let out = output::<u8>(outs, 0, n_out * width)?;
            for (o, a) in acc.into_iter().enumerate() {
                // Truncating to the low `width` bytes is the wrap.
                out[o * width..(o + 1) * width].copy_from_slice(&a.to_le_bytes()[..width]);
            }
            Ok(())
        }),
    })
}

/// REDUCE_ALL (`all`) / REDUCE_ANY of bool over the constant axes of input 1:
/// an output element is true when every (any) input element that reduces to it
/// is true; with none, ALL is true and ANY false.
pub(crate) fn reduce_bool(op: &OpContext<'_>, all: bool) -> Result<Built> {
    let x = op.input(0)?;
    if x.dtype != DType::Bool {
        return Err(op.unsupported(format!("{} of {}: bool only", op.op.code.name(), x.dtype.name())));
    }
    let shape = x.shape.clone();
    let (reduced, out_shape, collapsed) = reduced_shapes(op, &shape)?;
    let (n_in, n_out) = (count(op, &shape, 1)?, count(op, &out_shape, 1)?);
    Ok(Built {
        outputs: vec![(DType::Bool, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<u8>(ins, 0, n_in)?;
            let out = output::<u8>(outs, 0, n_out)?;
            let mut acc = vec![all; n_out];
            let mut index = vec![0usize; shape.len()];
            for (i, &v) in x.iter().enumerate() {
                unravel(i, &shape, &mut index);
                for (d, r) in reduced.iter().enumerate() {
                    if *r {
                        index[d] = 0;
                    }
                }
                let a = &mut acc[ravel(&index, &collapsed)];
                *a = if all { *a && v != 0 } else { *a || v != 0 };
            }
            for (o, a) in out.iter_mut().zip(acc) {
                *o = u8::from(a);
            }
            Ok(())
        }),
    })
}

/// ARG_MAX / ARG_MIN along the constant axis of input 1: the index of the first
/// largest (smallest) element; int32 or int64 output as the options ask.
pub(crate) fn arg_extreme(op: &OpContext<'_>, want_max: bool) -> Result<Built> {
    let x = op.input(0)?;
    let shape = x.shape.clone();
    let a = axis(op, *op.const_ints(1)?.first().ok_or_else(|| op.bad("empty axis"))?, shape.len())?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::F32 | DType::I32 | DType::I8 | DType::U8) {
        return Err(op.unsupported(format!("ARG_MAX/ARG_MIN of {}", dtype.name())));
    }
    let mut out_shape = shape.clone();
    out_shape.remove(a);
    let wide = !matches!(op.op.params, OpParams::OutType(2));
    let n_in = count(op, &shape, 4)?;
    let n_out = count(op, &out_shape, 8)?;
    let (outer, len, inner): (usize, usize, usize) = (shape[..a].iter().product(), shape[a], shape[a + 1..].iter().product());
    Ok(Built {
        outputs: vec![(if wide { DType::I64 } else { DType::I32 }, out_shape)],
        kernel: Box::new(move |ins, outs| {
            // Every element as f64 (exact for all four input types), so one loop serves.
            let values: Vec<f64> = match dtype {
                DType::F32 => input::<f32>(ins, 0, n_in)?.iter().map(|&v| f64::from(v)).collect(),
                DType::I32 => input::<i32>(ins, 0, n_in)?.iter().map(|&v| f64::from(v)).collect(),
                DType::I8 => input::<i8>(ins, 0, n_in)?.iter().map(|&v| f64::from(v)).collect(),
                _ => input::<u8>(ins, 0, n_in)?.iter().map(|&v| f64::from(v)).collect(),
            };
            let mut best = vec![0i64; n_out];
            for o in 0..outer {
                for i in 0..inner {
                    let mut bi = 0;
                    for k in 1..len {
                        let (v, b) = (values[(o * len + k) * inner + i], values[(o * len + bi) * inner + i]);
                        if (want_max && v > b) || (!want_max && v < b) {
                            bi = k;
                        }
                    }
                    best[o * inner + i] = bi as i64;
                }
            }
            if wide {
                output::<i64>(outs, 0, n_out)?.copy_from_slice(&best);
            } else {
                for (o, &b) in output::<i32>(outs, 0, n_out)?.iter_mut().zip(&best) {
                    *o = b as i32;
                }
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::float_test_util::*;
    use crate::model::DType;
    use crate::ops::OpParams;
    use ferrite_format::ops::BuiltinOp as B;

    #[test]
    fn hand_computed() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let t = TestOp::new(B::SUM, OpParams::Reducer { keep_dims: true }, vec![f32_input(&[2, 3], &x), i32_const(&[2], &[-1, 1])], 1);
        assert_eq!(t.reference_f32(), (vec![2, 1], vec![6.0, 15.0]));
        let t = TestOp::new(B::MEAN, OpParams::Reducer { keep_dims: false }, vec![f32_input(&[2, 3], &x), i32_const(&[1], &[0])], 1);
        assert_eq!(t.reference_f32(), (vec![3], vec![2.5, 3.5, 4.5]));
        let t = TestOp::new(B::REDUCE_PROD, OpParams::Reducer { keep_dims: false }, vec![f32_input(&[2, 3], &x), i32_const(&[2], &[0, 1])], 1);
        assert_eq!(t.reference_f32(), (vec![], vec![720.0]));
        let t = TestOp::typed(
            B::ARG_MAX,
            OpParams::OutType(2),
            vec![f32_input(&[2, 3], &[1.0, 3.0, 3.0, 0.0, -1.0, 5.0]), i32_const(&[1], &[1])],
            vec![DType::I32],
        );
        assert_eq!(t.reference().unwrap()[0].2, bytemuck::cast_slice::<i32, u8>(&[1, 2]));
        // An axis beyond the rank is a model error.
        let t = TestOp::new(B::SUM, OpParams::Reducer { keep_dims: false }, vec![f32_input(&[2], &[1.0, 2.0]), i32_const(&[1], &[3])], 1);
        assert!(t.reference().is_err());
    }

    #[test]
    fn random_reductions_match_cpu() {
        let mut r = Rng::new(0x4ed0_ce55);
        let mut worst = 0.0f64;
        let codes = [B::MEAN, B::SUM, B::REDUCE_MAX, B::REDUCE_MIN, B::REDUCE_PROD];
        for case in 0..150 {
            let rank = r.range(1, 4);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 5)).collect();
            let n = shape.iter().product();
            let axes: Vec<i32> = (0..r.range(1, 3)).map(|_| r.below(2 * rank) as i32 - rank as i32).collect();
            let code = codes[case % codes.len()];
            let x: Vec<f32> = r.floats(n).iter().map(|v| if code == B::REDUCE_PROD { 1.0 + v * 0.5 } else { *v }).collect();
            let t = TestOp::new(code, OpParams::Reducer { keep_dims: r.coin() }, vec![f32_input(&shape, &x), i32_const(&[axes.len()], &axes)], 1);
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("{code:?} {shape:?} {axes:?}")));
            let code = if r.coin() { B::ARG_MAX } else { B::ARG_MIN };
            let a = r.below(rank) as i32;
            let out = if r.coin() { DType::I32 } else { DType::I64 };
            let params = OpParams::OutType(if out == DType::I32 { 2 } else { 4 });
            // Few distinct values, so ties (first index wins) happen.
            let x: Vec<f32> = x.iter().map(|v| (v * 3.0).round()).collect();
            let t = TestOp::typed(code, params, vec![f32_input(&shape, &x), i32_const(&[1], &[a])], vec![out]);
            t.compare_with_cpu(0.0, &format!("{code:?}"));
        }
        eprintln!("random reductions: worst relative error {worst:e}");
    }

    /// MEAN of int32 / int64 truncates the quotient toward zero, as LiteRT's, and
    /// agrees with the CPU backend on random signed values.
    #[test]
    fn integer_means_truncate_and_match_cpu() {
        let x: Vec<u8> = [-3i32, -4, 7, 8].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t =
            TestOp::typed(B::MEAN, OpParams::Reducer { keep_dims: false }, vec![raw_input(DType::I32, &[2, 2], x), i32_const(&[1], &[1])], vec![DType::I32]);
        // -7 / 2 = -3 (a floor would give -4), 15 / 2 = 7.
        assert_eq!(t.reference().unwrap()[0].2, bytemuck::cast_slice::<i32, u8>(&[-3, 7]));
        let mut r = Rng::new(0x3ea);
        for case in 0..60 {
            let rank = r.range(1, 4);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 5)).collect();
            let n: usize = shape.iter().product();
            let axes: Vec<i32> = (0..r.range(1, 3)).map(|_| r.below(2 * rank) as i32 - rank as i32).collect();
            let wide = case % 2 == 1;
            let vals: Vec<i64> = (0..n).map(|_| r.next() as i64 >> if r.coin() { 33 } else { 56 }).collect();
            let (dtype, data): (DType, Vec<u8>) = if wide {
                (DType::I64, vals.iter().flat_map(|v| v.to_le_bytes()).collect())
            } else {
                (DType::I32, vals.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect())
            };
            let t = TestOp::typed(
                B::MEAN,
                OpParams::Reducer { keep_dims: r.coin() },
                vec![raw_input(dtype, &shape, data), i32_const(&[axes.len()], &axes)],
                vec![dtype],
            );
            let (a, b) = (t.reference().unwrap(), t.cpu().unwrap());
            assert_eq!(a[0].2, b[0].2, "case {case}: {dtype:?} {shape:?} over {axes:?}");
        }
    }
}
