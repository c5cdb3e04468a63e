//! Reference STABLEHLO_GATHER and STABLEHLO_SCATTER, element by element from the
//! StableHLO definitions: each output (update) index split into its batch and
//! offset (window) parts, the index vector read at the batch part, scattered into
//! an operand index by the start map, clamped (gather) or bounds-checked
//! (scatter). The options are checked by the CPU backend's shared checks.

use ferrite_kernels::hlo::{Combine, HloElem};

use super::{count, input, output, ravel, runtime, unravel};
use crate::backend::cpu::hlo_index::{data_type, gather_dims, scatter_dims, wide_indices};
use crate::backend::{arg, typed, Built, OpContext};
use crate::error::Result;
use crate::ops_hlo::by_hlo_type;

/// The indices of input 1 as 64-bit values.
fn indices(ins: &[Option<&[u8]>], wide: bool, n: usize) -> Result<Vec<i64>> {
    let v: Vec<i64> = if wide { typed::<i64>(arg(ins, 1)?)?.to_vec() } else { typed::<i32>(arg(ins, 1)?)?.iter().map(|&i| i64::from(i)).collect() };
    if v.len() < n {
        return Err(runtime(format!("indices hold {} values, the op needs {n}", v.len())));
    }
    Ok(v)
}

/// The index vector at batch position `batch`: the indices at `batch` with the
/// index vector dimension `ivd` inserted (a single value when it is implicit).
fn index_vector(idx: &[i64], shape: &[usize], ivd: usize, batch: &[usize], len: usize) -> Vec<i64> {
    (0..len)
        .map(|j| {
            let mut at = batch.to_vec();
            if ivd < shape.len() {
                at.insert(ivd, j);
            }
            idx[ravel(&at, shape)]
        })
        .collect()
}

/// STABLEHLO_GATHER by the definition.
pub(super) fn gather(op: &OpContext<'_>) -> Result<Built> {
    let dtype = data_type(op, op.input(0)?.dtype)?;
    let wide = wide_indices(op, 1)?;
    let g = gather_dims(op)?;
    let es = dtype.size().unwrap_or(1);
    let (n_x, n_i, n_o) = (count(op, &g.operand, es)?, count(op, &g.indices, 8)?, count(op, &g.output, es)?);
    let out_shape = g.output.clone();
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            if n_o == 0 {
                return Ok(());
            }
            let x = input::<u8>(ins, 0, n_x * es)?;
            let idx = indices(ins, wide, n_i)?;
            let o = output::<u8>(outs, 0, n_o * es)?;
            let r = g.operand.len();
            let kept: Vec<usize> = (0..r).filter(|d| !g.collapsed_slice_dims.contains(d)).collect();
            let mut at = vec![0; g.output.len()];
            for (e, dst) in o.chunks_exact_mut(es).enumerate() {
                unravel(e, &g.output, &mut at);
                let batch: Vec<usize> = (0..at.len()).filter(|d| !g.offset_dims.contains(d)).map(|d| at[d]).collect();
                let v = index_vector(&idx, &g.indices, g.index_vector_dim, &batch, g.start_index_map.len());
                let mut src = vec![0usize; r];
                for (j, &d) in g.start_index_map.iter().enumerate() {
                    src[d] = v[j].clamp(0, (g.operand[d] - g.slice_sizes[d]) as i64) as usize;
                }
                for (k, &od) in g.offset_dims.iter().enumerate() {
                    src[kept[k]] += at[od];
                }
                let s = ravel(&src, &g.operand) * es;
                dst.copy_from_slice(x.get(s..s + es).ok_or_else(|| runtime("gather source out of range"))?);
            }
            Ok(())
        }),
    })
}

/// STABLEHLO_SCATTER by the definition.
pub(super) fn scatter(op: &OpContext<'_>) -> Result<Built> {
    let dtype = data_type(op, op.input(0)?.dtype)?;
    let wide = wide_indices(op, 1)?;
    let (s, comb) = scatter_dims(op)?;
    let es = dtype.size().unwrap_or(1);
    let (n_x, n_i, n_u) = (count(op, &s.operand, es)?, count(op, &s.indices, 8)?, count(op, &s.updates, es)?);
    let out_shape = s.operand.clone();
    let c = comb.unwrap_or(Combine::Add);
    by_hlo_type!(op, dtype, c, T => {
        let comb = comb.map(|_| c);
        Ok(Built {
            outputs: vec![(dtype, out_shape)],
            kernel: Box::new(move |ins, outs| {
                if n_x == 0 {
                    return Ok(());
                }
                let x = input::<T>(ins, 0, n_x)?;
                let o = output::<T>(outs, 0, n_x)?;
                o.copy_from_slice(x);
                if n_u == 0 {
                    return Ok(());
                }
                let u = input::<T>(ins, 2, n_u)?;
                let idx = indices(ins, wide, n_i)?;
                let r = s.operand.len();
                let spanned: Vec<usize> = (0..r).filter(|d| !s.inserted_window_dims.contains(d)).collect();
                let mut at = vec![0; s.updates.len()];
                for (e, &val) in u.iter().enumerate() {
                    unravel(e, &s.updates, &mut at);
                    let batch: Vec<usize> = (0..at.len()).filter(|d| !s.update_window_dims.contains(d)).map(|d| at[d]).collect();
                    let v = index_vector(&idx, &s.indices, s.index_vector_dim, &batch, s.scatter_dims_to_operand_dims.len());
                    let mut t = vec![0i64; r];
                    for (j, &d) in s.scatter_dims_to_operand_dims.iter().enumerate() {
                        t[d] = v[j];
                    }
                    for (k, &ud) in s.update_window_dims.iter().enumerate() {
                        t[spanned[k]] += at[ud] as i64;
                    }
                    if t.iter().zip(&s.operand).any(|(&t, &d)| t < 0 || t >= d as i64) {
                        continue;
                    }
                    let f = ravel(&t.iter().map(|&t| t as usize).collect::<Vec<_>>(), &s.operand);
                    o[f] = match comb {
                        None => val,
                        Some(c) => o[f].combine(c, val),
                    };
                }
                Ok(())
            }),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::float_test_util::*;
    use crate::model::DType;
    use crate::ops::OpParams;
    use crate::ops_hlo::HloParams;
    use ferrite_format::ops::BuiltinOp as B;

    fn ints(dtype: DType, shape: &[usize], v: &[i64]) -> Option<TestInput> {
        let data = match dtype {
            DType::I64 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            _ => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
        };
        raw_input(dtype, shape, data)
    }

    fn gather_op(x: Option<TestInput>, i: Option<TestInput>, o: &[i64], c: &[i64], m: &[i64], ivd: i64, s: &[i64]) -> TestOp {
        let params = OpParams::Hlo(HloParams::Gather {
            offset_dims: o.to_vec(),
            collapsed_slice_dims: c.to_vec(),
            start_index_map: m.to_vec(),
            index_vector_dim: ivd,
            slice_sizes: s.to_vec(),
        });
        TestOp::new(B::STABLEHLO_GATHER, params, vec![x, i], 1)
    }

    fn scatter_op(x: Option<TestInput>, i: Option<TestInput>, u: Option<TestInput>, w: &[i64], ins: &[i64], m: &[i64], ivd: i64, body: Option<B>) -> TestOp {
        let params = OpParams::Hlo(HloParams::Scatter {
            update_window_dims: w.to_vec(),
            inserted_window_dims: ins.to_vec(),
            scatter_dims_to_operand_dims: m.to_vec(),
            index_vector_dim: ivd,
            body_subgraph: 1,
            body: Ok(body),
        });
        TestOp::new(B::STABLEHLO_SCATTER, params, vec![x, i, u], 1)
    }

    /// Random tf.gather / gather_nd style and general layouts: the reference equals
    /// the CPU kernel exactly, int32 and int64 indices, clamped starts included.
    #[test]
    fn gather_and_scatter_match_cpu() {
        let mut r = Rng::new(0x6a7e);
        for case in 0..300 {
            let rank = r.range(1, 3);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 4)).collect();
            let n: usize = shape.iter().product();
            let x = f32_input(&shape, &r.floats(n));
            let map: Vec<i64> = (0..rank as i64).filter(|_| r.coin()).collect();
            let k = map.len().max(1);
            let map = if map.is_empty() { vec![0] } else { map };
            let batch = r.range(1, 3);
            let idt = if case % 2 == 0 { DType::I32 } else { DType::I64 };
            let iv: Vec<i64> = (0..batch * k).map(|_| r.range(0, 7) as i64 - 2).collect();
            let idx = ints(idt, &[batch, k], &iv);
            // Gather: collapse the mapped dims, keep the others whole.
            let sizes: Vec<i64> = (0..rank).map(|d| if map.contains(&(d as i64)) { 1 } else { r.range(1, shape[d]) as i64 }).collect();
            let offsets: Vec<i64> = (1..=(rank - map.len()) as i64).collect();
            gather_op(x.clone(), idx.clone(), &offsets, &map, &map, 1, &sizes).compare_with_cpu(0.0, "gather");
            // Scatter: updates of the windows left after inserting the mapped dims.
            let win: Vec<usize> = (0..rank).filter(|d| !map.contains(&(*d as i64))).map(|d| r.range(1, shape[d])).collect();
            let ushape: Vec<usize> = [vec![batch], win].concat();
            let un: usize = ushape.iter().product();
            let u = f32_input(&ushape, &r.floats(un));
            let body = [None, Some(B::STABLEHLO_ADD), Some(B::STABLEHLO_MULTIPLY), Some(B::STABLEHLO_MAXIMUM), Some(B::STABLEHLO_MINIMUM)][case % 5];
            let wdims: Vec<i64> = (1..ushape.len() as i64).collect();
            scatter_op(x.clone(), idx.clone(), u, &wdims, &map, &map, 1, body).compare_with_cpu(0.0, "scatter");
        }
    }

    /// Hostile dimension numbers, sizes and types are refused when the op is built.
    #[test]
    fn hostile_index_options_are_refused() {
        let x = f32_input(&[4, 3], &[0.0; 12]);
        let i = ints(DType::I32, &[2, 1], &[0, 1]);
        assert!(gather_op(x.clone(), i.clone(), &[1], &[0], &[0], 1, &[1, 3]).cpu().is_ok());
        for t in [
            gather_op(x.clone(), i.clone(), &[1], &[0], &[0], 1, &[1, 4]),
            gather_op(x.clone(), i.clone(), &[1], &[0], &[0], 9, &[1, 3]),
            gather_op(x.clone(), i.clone(), &[1], &[0], &[0], -1, &[1, 3]),
            gather_op(x.clone(), i.clone(), &[1], &[0, 0], &[0], 1, &[1, 3]),
            gather_op(x.clone(), i.clone(), &[1], &[0], &[7], 1, &[1, 3]),
            gather_op(x.clone(), i.clone(), &[1], &[0], &[0], 1, &[1, 1 << 40]),
            gather_op(x.clone(), i.clone(), &[1], &[0], &[0], 1, &[1]),
            gather_op(x.clone(), ints(DType::I32, &[1 << 20, 1 << 20, 1], &[]), &[2], &[0], &[0], 2, &[1, 3]),
            gather_op(x.clone(), raw_input(DType::I16, &[2, 1], vec![0; 4]), &[1], &[0], &[0], 1, &[1, 3]),
            gather_op(raw_input(DType::F16, &[4, 3], vec![0; 24]), i.clone(), &[1], &[0], &[0], 1, &[1, 3]),
        ] {
            assert!(t.cpu().is_err(), "cpu accepted");
            assert!(t.reference().is_err(), "reference accepted");
        }
        let u = f32_input(&[2, 3], &[0.0; 6]);
        let add = Some(B::STABLEHLO_ADD);
        assert!(scatter_op(x.clone(), i.clone(), u.clone(), &[1], &[0], &[0], 1, add).cpu().is_ok());
        for t in [
            scatter_op(x.clone(), i.clone(), u.clone(), &[1], &[0], &[0], 1, Some(B::ADD)),
            scatter_op(x.clone(), i.clone(), u.clone(), &[1], &[0], &[0], 1, Some(B::SUB)),
            scatter_op(x.clone(), i.clone(), u.clone(), &[2], &[0], &[0], 1, add),
            scatter_op(x.clone(), i.clone(), u.clone(), &[1], &[0, 0], &[0], 1, add),
            scatter_op(x.clone(), i.clone(), u.clone(), &[1], &[0], &[0, 1], 1, add),
            scatter_op(x.clone(), i.clone(), f32_input(&[2, 4], &[0.0; 8]), &[1], &[0], &[0], 1, add),
            scatter_op(x.clone(), i.clone(), f32_input(&[3, 3], &[0.0; 9]), &[1], &[0], &[0], 1, add),
            scatter_op(x.clone(), i.clone(), raw_input(DType::I32, &[2, 3], vec![0; 24]), &[1], &[0], &[0], 1, add),
            scatter_op(x.clone(), i.clone(), u.clone(), &[1], &[0], &[0], 5, add),
        ] {
            assert!(t.cpu().is_err(), "cpu accepted");
            assert!(t.reference().is_err(), "reference accepted");
        }
    }
}
