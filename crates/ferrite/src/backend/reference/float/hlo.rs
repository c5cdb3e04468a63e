//! Reference kernels of the StableHLO legalization's ops, from the StableHLO
//! definitions: element-wise ops on equal shapes, padding (STABLEHLO_PAD, DILATE)
//! by looking up each output element's source, and window reductions by visiting
//! each window element of each output. Values combine as LiteRT's kernels combine
//! them (`HloElem::combine`: wrapping integers, LiteRT's maximum/minimum).

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::hlo::{Combine, HloElem};

use super::{count, input, output, ravel, runtime, unravel};
use crate::backend::{Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;
use crate::ops_hlo::{by_hlo_type, HloParams};

/// Builds one of the family's ops; `None` for other ops.
pub(super) fn build(code: B, op: &OpContext<'_>) -> Option<Result<Built>> {
    Some(match code {
        B::STABLEHLO_ADD => binary(op, Combine::Add),
        B::STABLEHLO_MULTIPLY => binary(op, Combine::Mul),
        B::STABLEHLO_MAXIMUM => binary(op, Combine::Max),
        B::STABLEHLO_MINIMUM => binary(op, Combine::Min),
        B::STABLEHLO_AND => binary(op, Combine::And),
        B::STABLEHLO_PAD => pad_op(op),
        B::DILATE => dilate(op),
        B::REDUCE_WINDOW => reduce_window(op),
        B::STABLEHLO_REDUCE_WINDOW => stablehlo_reduce_window(op),
        B::STABLEHLO_GATHER => super::hlo_index::gather(op),
        B::STABLEHLO_SCATTER => super::hlo_index::scatter(op),
        _ => return None,
    })
}

fn binary(op: &OpContext<'_>, c: Combine) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype || a.shape != b.shape {
        return Err(op.bad(format!("inputs {} {:?} and {} {:?} differ", a.dtype.name(), a.shape, b.dtype.name(), b.shape)));
    }
    if c == Combine::And && a.dtype == DType::F32 {
        return Err(op.unsupported("bitwise/logical AND of float32"));
    }
    let (dtype, shape) = (a.dtype, a.shape.clone());
    let n = count(op, &shape, dtype.size().unwrap_or(1))?;
    by_hlo_type!(op, dtype, c, T => Ok(Built {
        outputs: vec![(dtype, shape)],
        kernel: Box::new(move |ins, outs| {
            // An empty tensor's buffer may be unaligned: nothing to view or compute.
            if n == 0 {
                return Ok(());
            }
            let (x, y) = (input::<T>(ins, 0, n)?, input::<T>(ins, 1, n)?);
            let o = output::<T>(outs, 0, n)?;
            for ((o, &a), &b) in o.iter_mut().zip(x).zip(y) {
                *o = a.combine(c, b);
            }
            Ok(())
        }),
    }))
}

/// Output element `o` of a dimension holds input element `(o - low) / (interior + 1)`
/// when that division is exact and lands inside the input; else the padding value.
fn pad(op: &OpContext<'_>, value_input: usize, low: Vec<i64>, high: Vec<i64>, interior: Vec<i64>) -> Result<Built> {
    let (x, v) = (op.input(0)?, op.input(value_input)?);
    let r = x.shape.len();
    if v.dtype != x.dtype || v.shape.iter().product::<usize>() == 0 {
        return Err(op.bad("padding value must be a non-empty tensor of the input's type"));
    }
    if low.len() != r || high.len() != r || interior.len() != r || interior.iter().any(|&i| i < 0) {
        return Err(op.bad(format!("padding low {low:?} high {high:?} interior {interior:?} for rank {r}")));
    }
    let mut out_shape = Vec::with_capacity(r);
    for d in 0..r {
        let n = x.shape[d] as i128;
        let size = low[d] as i128 + high[d] as i128 + n + (n - 1).max(0) * interior[d] as i128;
        out_shape.push(usize::try_from(size).map_err(|_| op.bad(format!("dimension {d} padded to size {size}")))?);
    }
    let es = x.dtype.size().ok_or_else(|| op.unsupported("element type without a size"))?;
    let (shape, os) = (x.shape.clone(), out_shape.clone());
    let (n_in, n_out) = (count(op, &shape, es)?, count(op, &out_shape, es)?);
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_in * es)?;
            let value = input::<u8>(ins, value_input, es)?.to_vec();
            let out = output::<u8>(outs, 0, n_out * es)?;
            let (mut at, mut from) = (vec![0; r], vec![0; r]);
            for (e, o) in out.chunks_exact_mut(es).enumerate() {
                unravel(e, &os, &mut at);
                let mut inside = true;
                for d in 0..r {
                    let rel = at[d] as i64 - low[d];
                    let step = interior[d] + 1;
                    if rel < 0 || rel % step != 0 || rel / step >= shape[d] as i64 {
                        inside = false;
                        break;
                    }
                    from[d] = (rel / step) as usize;
                }
                let s = ravel(&from, &shape) * es;
                o.copy_from_slice(if inside { src.get(s..s + es).ok_or_else(|| runtime("pad source out of range"))? } else { &value });
            }
            Ok(())
        }),
    })
}

fn pad_op(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Hlo(HloParams::Pad { low, high, interior }) = &op.op.params else {
        return Err(op.bad("missing StablehloPadOptions"));
    };
    pad(op, 1, low.clone(), high.clone(), interior.clone())
}

fn dilate(op: &OpContext<'_>) -> Result<Built> {
    let r = op.input(0)?.shape.len();
    if op.input(1)?.dtype != DType::I32 {
        return Err(op.unsupported("dilations of another type than int32 (LiteRT takes int32 only)"));
    }
    let d = op.const_ints(1)?;
    if d.len() != r || d.iter().any(|&k| k < 1) {
        return Err(op.bad(format!("dilations {d:?} for rank {r}")));
    }
    pad(op, 2, vec![0; r], vec![0; r], d.iter().map(|k| k - 1).collect())
}

fn reduce_window(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Hlo(HloParams::ReduceWindow { function }) = op.op.params else {
        return Err(op.bad("missing ReduceWindowOptions"));
    };
    let c = Combine::of_reduce_function(function).ok_or_else(|| op.unsupported(format!("reduce function code {function}")))?;
    let r = op.input(0)?.shape.len();
    let mut lists = vec![];
    for i in 2..5 {
        if op.input(i)?.dtype != DType::I64 {
            return Err(op.unsupported(format!("window list {i} of type {} (LiteRT takes int64 only)", op.input(i)?.dtype.name())));
        }
        lists.push(op.const_ints(i)?);
    }
    window_op(op, c, &lists[0], &lists[1], &[], &lists[2], &vec![0; 2 * r])
}

fn stablehlo_reduce_window(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Hlo(HloParams::StablehloReduceWindow { window, strides, base_dilations, window_dilations, padding, body, .. }) = &op.op.params else {
        return Err(op.bad("missing StablehloReduceWindowOptions"));
    };
    let c = match body.as_ref().map_err(|why| op.unsupported(why))? {
        B::ADD | B::STABLEHLO_ADD => Combine::Add,
        B::MUL | B::STABLEHLO_MULTIPLY => Combine::Mul,
        B::MAXIMUM | B::STABLEHLO_MAXIMUM => Combine::Max,
        B::MINIMUM | B::STABLEHLO_MINIMUM => Combine::Min,
        B::LOGICAL_AND | B::STABLEHLO_AND => Combine::All,
        B::LOGICAL_OR => Combine::Any,
        other => return Err(op.unsupported(format!("reduction body op {other}"))),
    };
    let r = op.input(0)?.shape.len();
    let or_default = |v: &[i64], d: i64, n: usize| if v.is_empty() { vec![d; n] } else { v.to_vec() };
    window_op(op, c, window, &or_default(strides, 1, r), &or_default(base_dilations, 1, r), &or_default(window_dilations, 1, r), &or_default(padding, 0, 2 * r))
}

/// The window reduction from StableHLO's definition: the input padded with the
/// init value (`padding` low/high per dimension, `base` - 1 between elements; an
/// empty `base` means 1), then per output element the init value combined with
/// each window element, window elements at `o * stride + w * dilation` of the
/// padded input.
fn window_op(op: &OpContext<'_>, c: Combine, window: &[i64], strides: &[i64], base: &[i64], dil: &[i64], padding: &[i64]) -> Result<Built> {
    let (x, init) = (op.input(0)?, op.input(1)?);
    let r = x.shape.len();
    if init.dtype != x.dtype || init.shape.iter().product::<usize>() == 0 {
        return Err(op.bad("init value must be a non-empty tensor of the input's type"));
    }
    let base = if base.is_empty() { vec![1; r] } else { base.to_vec() };
    for (name, v) in [("window", window), ("strides", strides), ("base dilations", &base[..]), ("window dilations", dil)] {
        if v.len() != r || v.iter().any(|&k| k < 1) {
            return Err(op.bad(format!("{name} {v:?} must hold {r} positive values")));
        }
    }
    if padding.len() != 2 * r {
        return Err(op.bad(format!("padding {padding:?} for rank {r}")));
    }
    let (low, shape) = (padding.iter().step_by(2).copied().collect::<Vec<i64>>(), x.shape.clone());
    // Padded size, then the window positions whose last element lies inside it.
    let mut out_shape = Vec::with_capacity(r);
    for d in 0..r {
        let n = shape[d] as i128;
        let padded = padding[2 * d] as i128 + padding[2 * d + 1] as i128 + n + (n - 1).max(0) * (base[d] as i128 - 1);
        if padded < 0 {
            return Err(op.bad(format!("dimension {d} padded to size {padded}")));
        }
        let last = (window[d] as i128 - 1) * dil[d] as i128;
        let positions = if padded > last { (padded - 1 - last) / strides[d] as i128 + 1 } else { 0 };
        out_shape.push(usize::try_from(positions).map_err(|_| op.bad("window positions overflow"))?);
    }
    let window: Vec<usize> = window.iter().map(|&k| k as usize).collect();
    let (strides, dil, base) = (strides.to_vec(), dil.to_vec(), base.clone());
    let es = x.dtype.size().unwrap_or(1);
    let (dtype, os) = (x.dtype, out_shape.clone());
    let (n_in, n_out, n_win) = (count(op, &shape, es)?, count(op, &out_shape, es)?, count(op, &window, es)?);
    by_hlo_type!(op, dtype, c, T => Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            // An empty tensor's buffer may be unaligned: it is not viewed.
            if n_out == 0 {
                return Ok(());
            }
            let src: &[T] = if n_in == 0 { &[] } else { input::<T>(ins, 0, n_in)? };
            let init = input::<T>(ins, 1, 1)?[0];
            let out = output::<T>(outs, 0, n_out)?;
            let (mut at, mut w, mut from) = (vec![0; r], vec![0; r], vec![0; r]);
            for (e, o) in out.iter_mut().enumerate() {
                unravel(e, &os, &mut at);
                let mut acc = init;
                for k in 0..n_win {
                    unravel(k, &window, &mut w);
                    let mut inside = true;
                    for d in 0..r {
                        let p = (at[d] as i64) * strides[d] + (w[d] as i64) * dil[d] - low[d];
                        if p < 0 || p % base[d] != 0 || p / base[d] >= shape[d] as i64 {
                            inside = false;
                            break;
                        }
                        from[d] = (p / base[d]) as usize;
                    }
                    acc = acc.combine(c, if inside { src[ravel(&from, &shape)] } else { init });
                }
                *o = acc;
            }
            Ok(())
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::super::float_test_util::*;
    use crate::model::DType;
    use crate::ops::OpParams;
    use crate::ops_hlo::HloParams;
    use ferrite_format::ops::BuiltinOp as B;

    fn i64_const(v: &[i64]) -> Option<TestInput> {
        Some(TestInput { dtype: DType::I64, shape: vec![v.len()], data: bytemuck::cast_slice(v).to_vec(), constant: true, quant: None })
    }

    #[test]
    fn random_hlo_ops_match_cpu() {
        let mut r = Rng::new(0x41c0);
        for case in 0..200 {
            let rank = r.range(1, 4);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 4)).collect();
            let n: usize = shape.iter().product();
            let (x, y) = (f32_input(&shape, &r.floats(n)), f32_input(&shape, &r.floats(n)));
            let ints = |r: &mut Rng| raw_input(DType::I32, &shape, (0..n).flat_map(|_| (r.next() as i32).to_le_bytes()).collect());
            let (xi, yi) = (ints(&mut r), ints(&mut r));
            for code in [B::STABLEHLO_ADD, B::STABLEHLO_MULTIPLY, B::STABLEHLO_MAXIMUM, B::STABLEHLO_MINIMUM] {
                TestOp::new(code, OpParams::None, vec![x.clone(), y.clone()], 1).compare_with_cpu(0.0, code.name());
                TestOp::typed(code, OpParams::None, vec![xi.clone(), yi.clone()], vec![DType::I32]).compare_with_cpu(0.0, code.name());
            }
            TestOp::typed(B::STABLEHLO_AND, OpParams::None, vec![xi.clone(), yi.clone()], vec![DType::I32]).compare_with_cpu(0.0, "and");
            let low: Vec<i64> = shape.iter().map(|_| r.range(0, 4) as i64 - 2).collect();
            let high: Vec<i64> = shape.iter().map(|_| r.range(0, 4) as i64 - 1).collect();
            let interior: Vec<i64> = shape.iter().map(|_| r.range(0, 2) as i64).collect();
            let params = OpParams::Hlo(HloParams::Pad { low, high, interior });
            let t = TestOp::new(B::STABLEHLO_PAD, params, vec![x.clone(), f32_input(&[], &[0.5])], 1);
            if t.cpu().is_ok() {
                t.compare_with_cpu(0.0, "pad");
            }
            let dil: Vec<i32> = shape.iter().map(|_| r.range(1, 3) as i32).collect();
            TestOp::new(B::DILATE, OpParams::None, vec![x.clone(), i32_const(&[rank], &dil), f32_input(&[], &[-1.0])], 1).compare_with_cpu(0.0, "dilate");
            let window: Vec<i64> = shape.iter().map(|&d| r.range(1, d) as i64).collect();
            let strides: Vec<i64> = shape.iter().map(|_| r.range(1, 2) as i64).collect();
            let dils: Vec<i64> = shape.iter().map(|_| r.range(1, 2) as i64).collect();
            let params = OpParams::Hlo(HloParams::ReduceWindow { function: (case % 6) as i32 + 1 });
            let ins = |x: Option<TestInput>, init| vec![x, init, i64_const(&window), i64_const(&strides), i64_const(&dils)];
            TestOp::new(B::REDUCE_WINDOW, params.clone(), ins(x.clone(), f32_input(&[], &[0.0])), 1).compare_with_cpu(1e-6, "reduce_window");
            let init = raw_input(DType::I32, &[], 1i32.to_le_bytes().to_vec());
            TestOp::typed(B::REDUCE_WINDOW, params, ins(xi.clone(), init.clone()), vec![DType::I32]).compare_with_cpu(0.0, "reduce_window int");
            let body = [B::STABLEHLO_ADD, B::MUL, B::STABLEHLO_MAXIMUM, B::MINIMUM, B::STABLEHLO_AND, B::LOGICAL_OR][case % 6];
            let padding: Vec<i64> = shape.iter().flat_map(|_| [r.range(0, 3) as i64 - 1, r.range(0, 2) as i64]).collect();
            let params = OpParams::Hlo(HloParams::StablehloReduceWindow {
                window: window.clone(),
                strides: strides.clone(),
                base_dilations: shape.iter().map(|_| r.range(1, 2) as i64).collect(),
                window_dilations: dils.clone(),
                padding,
                body_subgraph: 1,
                body: Ok(body),
            });
            for (x, init, t) in [(x.clone(), f32_input(&[], &[0.25]), DType::F32), (xi.clone(), init, DType::I32)] {
                let t = TestOp::typed(B::STABLEHLO_REDUCE_WINDOW, params.clone(), vec![x, init], vec![t]);
                if t.reference().is_ok() {
                    t.compare_with_cpu(1e-6, "stablehlo_reduce_window");
                }
            }
        }
    }

    /// Hostile options are refused when the op is built.
    #[test]
    fn hostile_hlo_options_are_refused() {
        let x = f32_input(&[2, 3], &[0.0; 6]);
        let v = f32_input(&[], &[0.0]);
        for (low, high, interior) in [(vec![0], vec![0], vec![0]), (vec![0, 0], vec![0, 0], vec![-1, 0]), (vec![-5, 0], vec![0, 0], vec![0, 0])] {
            let params = OpParams::Hlo(HloParams::Pad { low, high, interior });
            let t = TestOp::new(B::STABLEHLO_PAD, params, vec![x.clone(), v.clone()], 1);
            assert!(t.cpu().is_err() && t.reference().is_err());
        }
        let huge = OpParams::Hlo(HloParams::Pad { low: vec![0, 0], high: vec![1 << 40, 1 << 40], interior: vec![0, 0] });
        let t = TestOp::new(B::STABLEHLO_PAD, huge, vec![x.clone(), v.clone()], 1);
        assert!(t.cpu().is_err() && t.reference().is_err());
        let t = TestOp::new(B::DILATE, OpParams::None, vec![x.clone(), i32_const(&[2], &[1, 0]), v.clone()], 1);
        assert!(t.cpu().is_err() && t.reference().is_err());
        let t = TestOp::new(B::DILATE, OpParams::None, vec![x.clone(), i32_const(&[2], &[1, i32::MAX]), v.clone()], 1);
        assert!(t.cpu().is_err());
        let rw = |f: i32, w: &[i64], s: &[i64]| {
            TestOp::new(
                B::REDUCE_WINDOW,
                OpParams::Hlo(HloParams::ReduceWindow { function: f }),
                vec![x.clone(), v.clone(), i64_const(w), i64_const(s), i64_const(&[1, 1])],
                1,
            )
        };
        for t in [rw(0, &[1, 1], &[1, 1]), rw(1, &[0, 1], &[1, 1]), rw(1, &[1, 1], &[1, 0]), rw(1, &[1], &[1, 1]), rw(1, &[1 << 40, 1 << 40], &[1, 1])] {
            assert!(t.cpu().is_err(), "cpu accepted");
            assert!(t.reference().is_err(), "reference accepted");
        }
        let t = TestOp::new(B::STABLEHLO_AND, OpParams::None, vec![x.clone(), x.clone()], 1);
        assert!(t.cpu().is_err());
        let t = TestOp::new(B::STABLEHLO_ADD, OpParams::None, vec![x.clone(), f32_input(&[3, 2], &[0.0; 6])], 1);
        assert!(t.cpu().is_err());
    }
}
