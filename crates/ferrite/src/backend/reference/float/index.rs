//! Index and set ops, written from their definitions: each output element is
//! computed on its own from the input elements the definition names (GATHER_ND,
//! SCATTER_ND, DYNAMIC_UPDATE_SLICE, EMBEDDING_LOOKUP, ONE_HOT, CUMSUM), or the
//! output is built by the definition's selection (TOPK_V2: repeatedly the largest
//! value not yet taken) and enumeration (RANGE). Every index read from tensor data
//! is checked before it is used.

use super::{axis, count, input, output, ravel, runtime, unravel};
use crate::backend::{arg, Built, OpContext};
use crate::error::{Detail, Error, Result};
use crate::model::DType;
use crate::ops::OpParams;

/// Integer values of an int32 or int64 tensor's bytes.
fn ints(dtype: DType, b: &[u8]) -> Vec<i64> {
    match dtype {
        DType::I64 => b.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect(),
        _ => b.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
    }
}

fn index_type(op: &OpContext<'_>, dtype: DType, what: &str) -> Result<usize> {
    match dtype {
        DType::I32 => Ok(4),
        DType::I64 => Ok(8),
        t => Err(op.bad(format!("{what} must be int32 or int64, got {}", t.name()))),
    }
}

fn elem(op: &OpContext<'_>, dtype: DType) -> Result<usize> {
    dtype.size().ok_or_else(|| op.unsupported(format!("element type {}", dtype.name())))
}

/// One scalar input's value known while building; `DataDependent` when it is
/// computed at run time (the op is then built again when it is known).
fn known_scalar(op: &OpContext<'_>, i: usize) -> Result<Vec<u8>> {
    let d = op.input(i)?;
    let v = d.value.ok_or_else(|| Error::DataDependent(Detail::at(op.location(), format!("input {i} is computed at run time"))))?;
    let es = elem(op, d.dtype)?;
    if d.shape.iter().product::<usize>() != 1 || v.len() < es {
        return Err(op.bad(format!("input {i} must hold one value")));
    }
    Ok(v[..es].to_vec())
}

/// Checks each coordinate of `tuple` against the leading dims of `shape` and
/// returns the tuple as a multi-index.
fn checked_tuple(tuple: &[i64], shape: &[usize]) -> Result<Vec<usize>> {
    tuple
        .iter()
        .zip(shape)
        .map(|(&c, &d)| usize::try_from(c).ok().filter(|&c| c < d).ok_or_else(|| runtime(format!("index {c} out of range 0..{d}"))))
        .collect()
}

/// GATHER_ND: output `[lead.., rest..]` element `(i, r)` is params at (tuple i, r).
pub(crate) fn gather_nd(op: &OpContext<'_>) -> Result<Built> {
    let (p, ix) = (op.input(0)?, op.input(1)?);
    let ies = index_type(op, ix.dtype, "indices")?;
    let nd = *ix.shape.last().ok_or_else(|| op.bad("indices must have rank 1 or more"))?;
    if p.shape.is_empty() || nd > p.shape.len() {
        return Err(op.bad(format!("tuples of {nd} coordinates for params {:?}", p.shape)));
    }
    let mut out_shape = ix.shape[..ix.shape.len() - 1].to_vec();
    out_shape.extend_from_slice(&p.shape[nd..]);
    let es = elem(op, p.dtype)?;
    let (n_p, n_i, n_out) = (count(op, &p.shape, es)?, count(op, &ix.shape, ies)?, count(op, &out_shape, es)?);
    let (shape, idt) = (p.shape.clone(), ix.dtype);
    let slice: usize = shape[nd..].iter().product();
    Ok(Built {
        outputs: vec![(p.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_p * es)?;
            let idx = ints(idt, input::<u8>(ins, 1, n_i * ies)?);
            let out = output::<u8>(outs, 0, n_out * es)?;
            let mut rest = vec![0; shape.len() - nd];
            for (e, o) in out.chunks_exact_mut(es).enumerate() {
                let (i, r) = (e / slice, e % slice);
                let mut at = checked_tuple(&idx[i * nd..(i + 1) * nd], &shape)?;
                unravel(r, &shape[nd..], &mut rest);
                at.extend_from_slice(&rest);
                let s = ravel(&at, &shape);
                o.copy_from_slice(&src[s * es..(s + 1) * es]);
            }
            Ok(())
        }),
    })
}

/// A number of one of the summed element types, read and written as bytes.
#[derive(Clone, Copy)]
enum Num {
    F(f32),
    I(i64),
}

fn read_num(dtype: DType, b: &[u8]) -> Num {
    match dtype {
        DType::F32 => Num::F(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::I8 => Num::I(i64::from(b[0] as i8)),
        DType::U8 => Num::I(i64::from(b[0])),
        DType::I32 => Num::I(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        _ => Num::I(i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
    }
}

/// Writes `v` in the element type (integers keep their low bits: two's complement
/// wrap-around, as the C++ kernels' sums overflow).
fn write_num(v: Num, o: &mut [u8]) {
    match v {
        Num::F(f) => o.copy_from_slice(&f.to_le_bytes()),
        Num::I(i) => {
            let n = o.len();
            o.copy_from_slice(&i.to_le_bytes()[..n]);
        }
    }
}

fn add(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::F(x), Num::F(y)) => Num::F(x + y),
        (Num::I(x), Num::I(y)) => Num::I(x.wrapping_add(y)),
        (a, _) => a,
    }
}

fn summable(op: &OpContext<'_>, dtype: DType) -> Result<Num> {
    match dtype {
        DType::F32 => Ok(Num::F(0.0)),
        DType::I8 | DType::U8 | DType::I32 | DType::I64 => Ok(Num::I(0)),
        t => Err(op.unsupported(format!("sums of {}", t.name()))),
    }
}

/// SCATTER_ND: output element `x` is the sum, in update order, of the update
/// elements whose tuple and trailing position name `x` (zero when none do).
pub(crate) fn scatter_nd(op: &OpContext<'_>) -> Result<Built> {
    let (ix, u) = (op.input(0)?, op.input(1)?);
    let ies = index_type(op, ix.dtype, "indices")?;
    let shape: Vec<usize> =
        op.const_ints(2)?.iter().map(|&d| usize::try_from(d).map_err(|_| op.bad(format!("negative dimension {d}")))).collect::<Result<_>>()?;
    let nd = *ix.shape.last().ok_or_else(|| op.bad("indices must have rank 1 or more"))?;
    let lead = &ix.shape[..ix.shape.len() - 1];
    let mut want = lead.to_vec();
    want.extend_from_slice(shape.get(nd..).unwrap_or(&[]));
    if nd > shape.len() || u.shape != want || op.input(2)?.dtype != ix.dtype {
        return Err(op.bad(format!("updates {:?} do not fit indices {:?} and shape {shape:?}", u.shape, ix.shape)));
    }
    let zero = summable(op, u.dtype)?;
    let es = elem(op, u.dtype)?;
    let (n_i, n_u, n_out) = (count(op, &ix.shape, ies)?, count(op, &u.shape, es)?, count(op, &shape, es)?);
    let (idt, udt) = (ix.dtype, u.dtype);
    let slice: usize = shape[nd..].iter().product();
    let tuples: usize = lead.iter().product();
    Ok(Built {
        outputs: vec![(u.dtype, shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let idx = ints(idt, input::<u8>(ins, 0, n_i * ies)?);
            let upd = input::<u8>(ins, 1, n_u * es)?;
            // Every tuple is checked, also those whose slices are empty.
            let targets: Vec<usize> =
                (0..tuples).map(|t| checked_tuple(&idx[t * nd..(t + 1) * nd], &shape).map(|c| ravel(&c, &shape[..nd]))).collect::<Result<_>>()?;
            let out = output::<u8>(outs, 0, n_out * es)?;
            for (x, o) in out.chunks_exact_mut(es).enumerate() {
                let (at, r) = (x / slice.max(1), x % slice.max(1));
                let mut sum = zero;
                for (t, _) in targets.iter().enumerate().filter(|(_, &p)| p == at) {
                    let e = t * slice + r;
                    sum = add(sum, read_num(udt, &upd[e * es..(e + 1) * es]));
                }
                write_num(sum, o);
            }
            Ok(())
        }),
    })
}

/// SPARSE_TO_DENSE: output element `x` is `values[i]` (or the one value) for the
/// last index `i` whose coordinates name `x`, else the default value. Indices are
/// a scalar or vector of positions in a rank-1 output, or `[n, rank]` tuples.
pub(crate) fn sparse_to_dense(op: &OpContext<'_>) -> Result<Built> {
    let (ix, v, d) = (op.input(0)?, op.input(2)?, op.input(3)?);
    let ies = index_type(op, ix.dtype, "indices")?;
    index_type(op, op.input(1)?.dtype, "output_shape")?;
    let shape: Vec<usize> =
        op.const_ints(1)?.iter().map(|&d| usize::try_from(d).map_err(|_| op.bad(format!("negative dimension {d}")))).collect::<Result<_>>()?;
    let (n, nd) = match ix.shape[..] {
        [] => (1, 1),
        [n] => (n, 1),
        [n, nd] => (n, nd),
        _ => return Err(op.bad("indices of rank 3 or more")),
    };
    let n_values: usize = v.shape.iter().product();
    let values_fit = match v.shape[..] {
        [] => true,
        [k] => k == n,
        _ => false,
    };
    if nd != shape.len() || op.input(1)?.shape.len() != 1 || !values_fit || d.dtype != v.dtype || !d.shape.is_empty() {
        return Err(op.bad(format!("indices {:?}, values {:?} and default {:?} do not fit output shape {shape:?}", ix.shape, v.shape, d.shape)));
    }
    let es = elem(op, v.dtype)?;
    let (n_i, n_out) = (count(op, &ix.shape, ies)?, count(op, &shape, es)?);
    let idt = ix.dtype;
    Ok(Built {
        outputs: vec![(v.dtype, shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let idx = ints(idt, input::<u8>(ins, 0, n_i * ies)?);
            let values = input::<u8>(ins, 2, n_values * es)?;
            let default = input::<u8>(ins, 3, es)?;
            let targets: Vec<usize> = (0..n).map(|t| checked_tuple(&idx[t * nd..(t + 1) * nd], &shape).map(|c| ravel(&c, &shape))).collect::<Result<_>>()?;
            let out = output::<u8>(outs, 0, n_out * es)?;
            for (x, o) in out.chunks_exact_mut(es).enumerate() {
                let src = match targets.iter().rposition(|&t| t == x) {
                    Some(_) if n_values == 1 => &values[..es],
                    Some(i) => &values[i * es..(i + 1) * es],
                    None => default,
                };
                o.copy_from_slice(src);
            }
            Ok(())
        }),
    })
}

/// DYNAMIC_UPDATE_SLICE: output element `x` is the update's element at `x - start`
/// when `x` lies in the update's box at the clamped start, else the operand's.
pub(crate) fn dynamic_update_slice(op: &OpContext<'_>) -> Result<Built> {
    let (x, u, s) = (op.input(0)?, op.input(1)?, op.input(2)?);
    let ies = index_type(op, s.dtype, "start indices")?;
    let r = x.shape.len();
    if u.dtype != x.dtype || u.shape.len() != r || u.shape.iter().zip(&x.shape).any(|(a, b)| a > b) || s.shape != [r] {
        return Err(op.bad(format!("update {:?} at start {:?} does not fit operand {:?}", u.shape, s.shape, x.shape)));
    }
    let es = elem(op, x.dtype)?;
    let (n, nu) = (count(op, &x.shape, es)?, count(op, &u.shape, es)?);
    let (shape, ushape, sdt) = (x.shape.clone(), u.shape.clone(), s.dtype);
    Ok(Built {
        outputs: vec![(x.dtype, shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let (src, upd) = (input::<u8>(ins, 0, n * es)?, input::<u8>(ins, 1, nu * es)?);
            let start_raw = ints(sdt, input::<u8>(ins, 2, r * ies)?);
            // Clamped so that the whole update lies inside the operand.
            let start: Vec<usize> = (0..r).map(|d| start_raw[d].clamp(0, (shape[d] - ushape[d]) as i64) as usize).collect();
            let out = output::<u8>(outs, 0, n * es)?;
            let mut at = vec![0; r];
            for (e, o) in out.chunks_exact_mut(es).enumerate() {
                unravel(e, &shape, &mut at);
                let inside = (0..r).all(|d| at[d] >= start[d] && at[d] < start[d] + ushape[d]);
                if inside && nu > 0 {
                    let local: Vec<usize> = (0..r).map(|d| at[d] - start[d]).collect();
                    let k = ravel(&local, &ushape);
                    o.copy_from_slice(&upd[k * es..(k + 1) * es]);
                } else {
                    o.copy_from_slice(&src[e * es..(e + 1) * es]);
                }
            }
            Ok(())
        }),
    })
}

/// EMBEDDING_LOOKUP: output element `(i, c)` is table element `(ids[i], c)`; an
/// int8 table read into float32 is multiplied by its (row's) scale.
pub(crate) fn embedding_lookup(op: &OpContext<'_>) -> Result<Built> {
    let (ids, v) = (op.input(0)?, op.input(1)?);
    if ids.dtype != DType::I32 || ids.shape.len() != 1 || v.shape.len() < 2 {
        return Err(op.bad("EMBEDDING_LOOKUP takes 1-D int32 ids and a table of rank 2 or more"));
    }
    let out_type = op.outputs.first().map_or(v.dtype, |t| t.dtype);
    let scales: Option<Vec<f32>> = match (v.dtype, out_type) {
        (DType::I8, DType::F32) => {
            let s = v.quant.map(|q| q.scale.clone()).unwrap_or_default();
            if s.is_empty() || (s.len() > 1 && s.len() != v.shape[0]) {
                return Err(op.bad("int8 table needs one scale or one per row"));
            }
            Some(s)
        }
        (a, b) if a == b => None,
        (a, b) => return Err(op.unsupported(format!("EMBEDDING_LOOKUP of a {} table into {}", a.name(), b.name()))),
    };
    let mut out_shape = v.shape.clone();
    out_shape[0] = ids.shape[0];
    let es = elem(op, v.dtype)?;
    let (rows, row) = (v.shape[0], v.shape[1..].iter().product::<usize>());
    let (n_ids, n_v, n_out) = (ids.shape[0], count(op, &v.shape, es)?, count(op, &out_shape, 4)?);
    Ok(Built {
        outputs: vec![(out_type, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let ids = input::<i32>(ins, 0, n_ids)?;
            let table = input::<u8>(ins, 1, n_v * es)?;
            let source = |e: usize| -> Result<(usize, usize)> {
                let id = ids[e / row];
                let r = usize::try_from(id).ok().filter(|&r| r < rows).ok_or_else(|| runtime(format!("id {id} out of range 0..{rows}")))?;
                Ok((r, r * row + e % row))
            };
            match &scales {
                Some(scales) => {
                    for (e, o) in output::<f32>(outs, 0, n_out)?.iter_mut().enumerate() {
                        let (r, s) = source(e)?;
                        *o = f32::from(table[s] as i8) * if scales.len() > 1 { scales[r] } else { scales[0] };
                    }
                }
                None => {
                    for (e, o) in output::<u8>(outs, 0, n_out * es)?.chunks_exact_mut(es).enumerate() {
                        let (_, s) = source(e)?;
                        o.copy_from_slice(&table[s * es..(s + 1) * es]);
                    }
                }
            }
            Ok(())
        }),
    })
}

/// A value compared by TOPK_V2: the number it stands for.
fn rank_value(dtype: DType, b: &[u8]) -> Option<f64> {
    Some(match dtype {
        DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::I8 => f64::from(b[0] as i8),
        DType::U8 => f64::from(b[0]),
        DType::I16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
        DType::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => return None,
    })
}

/// TOPK_V2: per row, take `k` times the largest value not taken yet (the first of
/// equal values), writing it and its position.
pub(crate) fn top_k(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    op.expect_outputs(2)?;
    let n = *x.shape.last().ok_or_else(|| op.bad("input must have rank 1 or more"))?;
    let k = op.const_ints(1)?;
    let k = match k[..] {
        [k] if k >= 0 && k as u64 <= n as u64 => k as usize,
        _ => return Err(op.bad(format!("k {k:?} for rows of {n}"))),
    };
    if rank_value(x.dtype, &[0; 8]).is_none() {
        return Err(op.unsupported(format!("TOPK_V2 of {}", x.dtype.name())));
    }
    let mut out_shape = x.shape.clone();
    if let Some(l) = out_shape.last_mut() {
        *l = k;
    }
    let (es, dtype) = (elem(op, x.dtype)?, x.dtype);
    let (n_in, n_out) = (count(op, &x.shape, es)?, count(op, &out_shape, es.max(4))?);
    Ok(Built {
        outputs: vec![(dtype, out_shape.clone()), (DType::I32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_in * es)?;
            let mut values = vec![0u8; n_out * es];
            let mut indices = vec![0i32; n_out];
            for row in 0..n_in.checked_div(n).unwrap_or(0) {
                let v = |j: usize| rank_value(dtype, &src[(row * n + j) * es..]).unwrap_or(0.0);
                let mut taken = vec![false; n];
                for slot in 0..k {
                    let mut best: Option<usize> = None;
                    for j in (0..n).filter(|&j| !taken[j]) {
                        if best.is_none_or(|b| v(j) > v(b)) {
                            best = Some(j);
                        }
                    }
                    let b = best.ok_or_else(|| runtime("TOPK_V2 ran out of elements"))?;
                    taken[b] = true;
                    let o = row * k + slot;
                    values[o * es..(o + 1) * es].copy_from_slice(&src[(row * n + b) * es..(row * n + b + 1) * es]);
                    indices[o] = b as i32;
                }
            }
            output::<u8>(outs, 0, n_out * es)?.copy_from_slice(&values);
            output::<i32>(outs, 1, n_out)?.copy_from_slice(&indices);
            Ok(())
        }),
    })
}

/// ONE_HOT: output element at multi-index `x` is `on` when the indices element at
/// `x` without the depth axis equals `x`'s depth coordinate, else `off`.
pub(crate) fn one_hot(op: &OpContext<'_>) -> Result<Built> {
    let ix = op.input(0)?;
    let OpParams::OneHot { axis: a } = op.op.params else { return Err(op.bad("missing OneHot options")) };
    let ies = index_type(op, ix.dtype, "indices")?;
    let depth = match op.const_ints(1)?[..] {
        [d] if d >= 0 => d as usize,
        ref d => return Err(op.bad(format!("depth {d:?}"))),
    };
    let (on, off) = (op.input(2)?, op.input(3)?);
    if on.dtype != off.dtype || on.shape.iter().product::<usize>() != 1 || off.shape.iter().product::<usize>() != 1 {
        return Err(op.bad("on and off values must be scalars of one type"));
    }
    let rank = ix.shape.len();
    let ax = if a == -1 { rank } else { axis(op, i64::from(a), rank + 1)? };
    let mut out_shape = ix.shape.clone();
    out_shape.insert(ax, depth);
    let es = elem(op, on.dtype)?;
    let (n_i, n_out) = (count(op, &ix.shape, ies)?, count(op, &out_shape, es)?);
    let (idt, ishape, os) = (ix.dtype, ix.shape.clone(), out_shape.clone());
    Ok(Built {
        outputs: vec![(on.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let idx = ints(idt, input::<u8>(ins, 0, n_i * ies)?);
            let (on, off) = (input::<u8>(ins, 2, es)?, input::<u8>(ins, 3, es)?);
            let mut at = vec![0; os.len()];
            for (e, o) in output::<u8>(outs, 0, n_out * es)?.chunks_exact_mut(es).enumerate() {
                unravel(e, &os, &mut at);
                let d = at.remove(ax);
                let hit = idx[ravel(&at, &ishape)] == d as i64;
                at.insert(ax, d);
                o.copy_from_slice(if hit { on } else { off });
            }
            Ok(())
        }),
    })
}

/// RANGE: `ceil(|limit - start| / |delta|)` elements, element `i` being `start`
/// with `delta` added `i` times in the element type (LiteRT's definition).
pub(crate) fn range(op: &OpContext<'_>) -> Result<Built> {
    let dtype = op.input(0)?.dtype;
    if (0..3).any(|i| op.input(i).map_or(true, |d| d.dtype != dtype || !d.shape.is_empty())) {
        return Err(op.bad("start, limit and delta must be scalars of one type"));
    }
    let v: Vec<Vec<u8>> = (0..3).map(|i| known_scalar(op, i)).collect::<Result<_>>()?;
    let len = match dtype {
        DType::F32 => {
            let f: Vec<f64> = v.iter().map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect();
            let (start, limit, delta) = (f[0], f[1], f[2]);
            if delta == 0.0 || (limit - start) * delta < 0.0 {
                return Err(op.bad("RANGE delta is 0 or points away from the limit"));
            }
            // The quotient in float32, as LiteRT computes it.
            let n = ((f[1] as f32 - f[0] as f32) / f[2] as f32).abs().ceil();
            if !n.is_finite() {
                return Err(op.bad("RANGE length is not finite"));
            }
            n as u64
        }
        DType::I32 | DType::I64 => {
            let i: Vec<i128> = v.iter().map(|b| i128::from(ints(dtype, b)[0])).collect();
            if i[2] == 0 || (i[1] - i[0]) * i[2].signum() < 0 {
                return Err(op.bad("RANGE delta is 0 or points away from the limit"));
            }
            u64::try_from((i[1] - i[0]).abs().div_euclid(i[2].abs()) + i128::from((i[1] - i[0]) % i[2] != 0)).unwrap_or(u64::MAX)
        }
        t => return Err(op.unsupported(format!("RANGE of {}", t.name()))),
    };
    let len = usize::try_from(len).map_err(|_| op.bad("RANGE too long"))?;
    let es = elem(op, dtype)?;
    count(op, &[len], es)?;
    Ok(Built {
        outputs: vec![(dtype, vec![len])],
        kernel: Box::new(move |ins, outs| {
            let (start, delta) = (read_num(dtype, arg(ins, 0)?), read_num(dtype, arg(ins, 2)?));
            let mut value = start;
            for o in output::<u8>(outs, 0, len * es)?.chunks_exact_mut(es) {
                write_num(value, o);
                // Integers wrap in the element type's width, as its C++ sum does.
                value = match add(value, delta) {
                    Num::I(i) if es == 4 => Num::I(i64::from(i as i32)),
                    s => s,
                };
            }
            Ok(())
        }),
    })
}

/// CUMSUM: output element at position `p` along the axis is the sum of the input
/// elements at positions before `p` (after, when `reverse`) and `p` itself (not
/// itself when `exclusive`), added in order from the start of the run.
pub(crate) fn cumsum(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::Cumsum { exclusive, reverse } = op.op.params else { return Err(op.bad("missing Cumsum options")) };
    let a = match op.const_ints(1)?[..] {
        [a] => axis(op, a, x.shape.len())?,
        _ => return Err(op.bad("axis must hold one value")),
    };
    if matches!(x.dtype, DType::I8 | DType::U8) {
        return Err(op.unsupported("CUMSUM of 8-bit integers"));
    }
    let zero = summable(op, x.dtype)?;
    let es = elem(op, x.dtype)?;
    let n = count(op, &x.shape, es)?;
    let (shape, dtype) = (x.shape.clone(), x.dtype);
    Ok(Built {
        outputs: vec![(dtype, shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n * es)?;
            let mut at = vec![0; shape.len()];
            for (e, o) in output::<u8>(outs, 0, n * es)?.chunks_exact_mut(es).enumerate() {
                unravel(e, &shape, &mut at);
                let p = at[a];
                // The positions summed, in the order the running sum adds them.
                let run: Vec<usize> = if reverse { (p + usize::from(exclusive)..shape[a]).rev().collect() } else { (0..p + usize::from(!exclusive)).collect() };
                let mut sum = zero;
                for q in run {
                    at[a] = q;
                    let s = ravel(&at, &shape);
                    sum = add(sum, read_num(dtype, &src[s * es..(s + 1) * es]));
                }
                write_num(sum, o);
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::float_test_util::*;
    use crate::model::{DType, Quantization};
    use crate::ops::OpParams;
    use ferrite_format::ops::BuiltinOp as B;

    fn i32s(shape: &[usize], v: &[i32]) -> Option<TestInput> {
        raw_input(DType::I32, shape, v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    /// SPARSE_TO_DENSE on both backends: scalar, vector and tuple indices, one
    /// value for all or one each, repeated positions; an index outside the output
    /// is an error on both.
    #[test]
    fn sparse_to_dense_matches_cpu() {
        let mut r = Rng::new(0x5a25);
        for case in 0..120 {
            let rank = r.range(1, 4);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 4)).collect();
            let form = if rank == 1 { r.below(3) } else { 2 };
            let n = if form == 0 { 1 } else { r.range(1, 6) };
            let idx: Vec<i32> = (0..n).flat_map(|_| shape.iter().map(|&d| r.below(d) as i32).collect::<Vec<_>>()).collect();
            let ishape = match form {
                0 => vec![],
                1 => vec![n],
                _ => vec![n, rank],
            };
            let one = form == 0 || r.coin();
            let values = r.floats(if one { 1 } else { n });
            let dims: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
            let params = OpParams::SparseToDense { validate_indices: r.coin() };
            let vshape = if one { vec![] } else { vec![n] };
            let t = TestOp::new(
                B::SPARSE_TO_DENSE,
                params.clone(),
                vec![i32_const(&ishape, &idx), i32_const(&[rank], &dims), f32_input(&vshape, &values), f32_input(&[], &[-0.5])],
                1,
            );
            t.compare_with_cpu(0.0, &format!("case {case}"));
            let mut bad = idx.clone();
            let at = r.below(bad.len());
            bad[at] = if r.coin() { -1 } else { 9 };
            let t = TestOp::new(
                B::SPARSE_TO_DENSE,
                params,
                vec![i32_const(&ishape, &bad), i32_const(&[rank], &dims), f32_input(&vshape, &values), f32_input(&[], &[0.0])],
                1,
            );
            assert!(t.reference().is_err() && t.cpu().is_err(), "case {case}: an index outside the output");
        }
        // A hostile output shape is refused before anything is allocated.
        let t = TestOp::new(
            B::SPARSE_TO_DENSE,
            OpParams::SparseToDense { validate_indices: false },
            vec![i32_const(&[1, 3], &[0, 0, 0]), i32_const(&[3], &[1 << 30, 1 << 30, 1 << 30]), f32_input(&[], &[1.0]), f32_input(&[], &[0.0])],
            1,
        );
        assert!(t.reference().is_err() && t.cpu().is_err());
    }

    #[test]
    fn hand_computed_index_ops() {
        let x = || f32_input(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        // GATHER_ND: whole rows (tuples of 1) and single elements (tuples of 2).
        let t = TestOp::new(B::GATHER_ND, OpParams::None, vec![x(), i32s(&[2, 1], &[1, 0])], 1);
        assert_eq!(t.reference_f32(), (vec![2, 3], vec![3.0, 4.0, 5.0, 0.0, 1.0, 2.0]));
        let t = TestOp::new(B::GATHER_ND, OpParams::None, vec![x(), i32s(&[2], &[1, 2])], 1);
        assert_eq!(t.reference_f32(), (vec![], vec![5.0]));
        // A coordinate past its dimension is an error even when the flat position exists.
        assert!(TestOp::new(B::GATHER_ND, OpParams::None, vec![x(), i32s(&[2], &[0, 4])], 1).reference().is_err());
        // SCATTER_ND: duplicates add.
        let t = TestOp::new(B::SCATTER_ND, OpParams::None, vec![i32s(&[3, 1], &[2, 0, 2]), f32_input(&[3], &[1.0, 2.0, 4.0]), i32_const(&[1], &[4])], 1);
        assert_eq!(t.reference_f32(), (vec![4], vec![2.0, 0.0, 5.0, 0.0]));
        // DYNAMIC_UPDATE_SLICE: a start past the end is clamped.
        let t = TestOp::new(B::DYNAMIC_UPDATE_SLICE, OpParams::None, vec![x(), f32_input(&[1, 2], &[8.0, 9.0]), i32s(&[2], &[5, 2])], 1);
        assert_eq!(t.reference_f32().1, vec![0.0, 1.0, 2.0, 3.0, 8.0, 9.0]);
        // TOPK_V2: ties keep index order.
        let t = TestOp::typed(B::TOPK_V2, OpParams::None, vec![f32_input(&[4], &[1.0, 3.0, 1.0, 3.0]), i32_const(&[], &[3])], vec![DType::F32, DType::I32]);
        let r = t.reference().unwrap();
        assert_eq!(f32s(&r[0].2), [3.0, 3.0, 1.0]);
        assert_eq!(r[1].2, [1i32, 3, 0].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        // ONE_HOT at axis 0 with an out-of-range index.
        let t = TestOp::new(
            B::ONE_HOT,
            OpParams::OneHot { axis: 0 },
            vec![i32s(&[2], &[1, 3]), i32_const(&[], &[2]), f32_input(&[], &[5.0]), f32_input(&[], &[-1.0])],
            1,
        );
        assert_eq!(t.reference_f32(), (vec![2, 2], vec![-1.0, -1.0, 5.0, -1.0]));
        // CUMSUM exclusive and reverse.
        let t = TestOp::new(B::CUMSUM, OpParams::Cumsum { exclusive: true, reverse: true }, vec![f32_input(&[3], &[1.0, 2.0, 4.0]), i32_const(&[], &[0])], 1);
        assert_eq!(t.reference_f32().1, vec![6.0, 4.0, 0.0]);
    }

    #[test]
    fn random_index_ops_match_cpu() {
        let mut r = Rng::new(0x1dec5);
        for _ in 0..150 {
            let rank = r.range(1, 4);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 4)).collect();
            let n: usize = shape.iter().product();
            let x = f32_input(&shape, &r.floats(n));
            // GATHER_ND / SCATTER_ND with random tuples (sometimes out of range).
            let nd = r.range(1, rank);
            let tuples = r.range(1, 5);
            let idx: Vec<i32> = (0..tuples * nd)
                .map(|k| {
                    let past = usize::from(r.below(20) == 0);
                    r.below(shape[k % nd] + past) as i32
                })
                .collect();
            let t = TestOp::new(B::GATHER_ND, OpParams::None, vec![x.clone(), i32s(&[tuples, nd], &idx)], 1);
            let ok = t.reference().is_ok();
            assert_eq!(ok, t.cpu().is_ok());
            if ok {
                t.compare_with_cpu(0.0, "gather_nd");
            }
            let slice: usize = shape[nd..].iter().product();
            let shape_i32: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
            let mut ushape = vec![tuples];
            ushape.extend_from_slice(&shape[nd..]);
            let t = TestOp::new(
                B::SCATTER_ND,
                OpParams::None,
                vec![i32s(&[tuples, nd], &idx), f32_input(&ushape, &r.floats(tuples * slice)), i32_const(&[rank], &shape_i32)],
                1,
            );
            assert_eq!(t.reference().is_ok(), t.cpu().is_ok());
            if ok {
                t.compare_with_cpu(0.0, "scatter_nd");
            }
            // DYNAMIC_UPDATE_SLICE with starts anywhere.
            let us: Vec<usize> = shape.iter().map(|&d| r.range(0, d)).collect();
            let start: Vec<i32> = shape.iter().map(|&d| r.below(2 * d + 3) as i32 - d as i32 - 1).collect();
            let t =
                TestOp::new(B::DYNAMIC_UPDATE_SLICE, OpParams::None, vec![x.clone(), f32_input(&us, &r.floats(us.iter().product())), i32s(&[rank], &start)], 1);
            t.compare_with_cpu(0.0, "dynamic_update_slice");
            // TOPK_V2 with ties, ONE_HOT, CUMSUM.
            let last = shape[rank - 1];
            let ties: Vec<f32> = (0..n).map(|_| r.below(3) as f32).collect();
            let t = TestOp::typed(
                B::TOPK_V2,
                OpParams::None,
                vec![f32_input(&shape, &ties), i32_const(&[], &[r.range(0, last) as i32])],
                vec![DType::F32, DType::I32],
            );
            t.compare_with_cpu(0.0, "topk");
            let depth = r.range(0, 4);
            let hot: Vec<i32> = (0..n).map(|_| r.below(depth + 3) as i32 - 1).collect();
            let params = OpParams::OneHot { axis: r.below(rank + 2) as i32 - 1 };
            let t =
                TestOp::new(B::ONE_HOT, params, vec![i32s(&shape, &hot), i32_const(&[], &[depth as i32]), f32_input(&[], &[1.5]), f32_input(&[], &[-0.5])], 1);
            t.compare_with_cpu(0.0, "one_hot");
            let params = OpParams::Cumsum { exclusive: r.coin(), reverse: r.coin() };
            let t = TestOp::new(B::CUMSUM, params, vec![x.clone(), i32_const(&[], &[r.below(rank) as i32])], 1);
            t.compare_with_cpu(0.0, "cumsum");
            // EMBEDDING_LOOKUP, float and int8 -> float.
            let ids: Vec<i32> = (0..r.range(1, 4)).map(|_| r.below(shape[0]) as i32).collect();
            let t = TestOp::new(B::EMBEDDING_LOOKUP, OpParams::None, vec![i32s(&[ids.len()], &ids), x.clone()], 1);
            if rank >= 2 {
                t.compare_with_cpu(0.0, "embedding_lookup");
                let mut table = raw_input(DType::I8, &shape, (0..n).map(|_| r.next() as u8).collect());
                if let Some(t) = table.as_mut() {
                    t.quant = Some(Quantization { scale: (0..shape[0]).map(|k| 0.01 * (k + 1) as f32).collect(), zero_point: vec![0; shape[0]], axis: 0 });
                }
                let t = TestOp::typed(B::EMBEDDING_LOOKUP, OpParams::None, vec![i32s(&[ids.len()], &ids), table], vec![DType::F32]);
                t.compare_with_cpu(0.0, "embedding_lookup hybrid");
            }
        }
        // RANGE in both directions, integer and float.
        for (s, l, d) in [(0, 10, 3), (5, -4, -2), (-3, -3, 1)] {
            let t = TestOp::typed(B::RANGE, OpParams::None, vec![i32_const(&[], &[s]), i32_const(&[], &[l]), i32_const(&[], &[d])], vec![DType::I32]);
            t.compare_with_cpu(0.0, "range");
            let f = |v: i32| f32_const(&[], &[v as f32 * 0.7]);
            let t = TestOp::new(B::RANGE, OpParams::None, vec![f(s), f(l), f(d)], 1);
            t.compare_with_cpu(0.0, "range float");
        }
    }
}
