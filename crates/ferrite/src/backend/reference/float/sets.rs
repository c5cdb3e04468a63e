//! Set, segment, diagonal and bit ops, written from their definitions: WHERE
//! (coordinates of the true elements, visited in row-major order), UNIQUE (each
//! element compared with the distinct values seen before it), SEGMENT_SUM and
//! UNSORTED_SEGMENT_* (each output element combines, in row order, the data
//! elements whose id names its segment), MATRIX_DIAG, MATRIX_SET_DIAG,
//! BROADCAST_ARGS, BITCAST (the bytes themselves), RIGHT_SHIFT and BITWISE_XOR
//! (each output element from the broadcast pair it names, in 64-bit arithmetic).

use super::{broadcast_shapes, broadcast_source, count, input, output, ravel, runtime, unravel};
use crate::backend::{Built, OpContext};
use crate::error::{Detail, Error, Result};
use crate::model::DType;
use crate::ops::OpParams;

/// An element of a plain integer or bool tensor, widened to i64 (sign-extended
/// for signed types, zero-extended for unsigned ones).
fn int_at(dtype: DType, b: &[u8]) -> Option<i64> {
    Some(match dtype {
        DType::Bool | DType::U8 => i64::from(b[0]),
        DType::I8 => i64::from(b[0] as i8),
        DType::I16 => i64::from(i16::from_le_bytes([b[0], b[1]])),
        DType::U16 => i64::from(u16::from_le_bytes([b[0], b[1]])),
        DType::I32 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::U32 => i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::I64 => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        _ => return None,
    })
}

/// Writes the low bytes of `v` (two's complement truncation to the element type).
fn put_int(v: i64, o: &mut [u8]) {
    let n = o.len();
    o.copy_from_slice(&v.to_le_bytes()[..n]);
}

fn f32_at(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn size(op: &OpContext<'_>, dtype: DType) -> Result<usize> {
    dtype.size().ok_or_else(|| op.unsupported(format!("element type {}", dtype.name())))
}

/// The bytes of input `i` when known while building; `DataDependent` otherwise.
fn known<'a>(op: &OpContext<'a>, i: usize) -> Result<&'a [u8]> {
    op.input(i)?.value.ok_or_else(|| Error::DataDependent(Detail::at(op.location(), format!("input {i} is computed at run time"))))
}

/// Whether element `b` of a WHERE condition is true: nonzero (floats: not ±0).
fn truth(dtype: DType, b: &[u8]) -> bool {
    if dtype == DType::F32 {
        f32_at(b) != 0.0
    } else {
        int_at(dtype, b).is_some_and(|v| v != 0)
    }
}

/// WHERE: row `k` of the `[count, rank]` int64 output is the multi-index of the
/// `k`-th true element in row-major order.
pub(crate) fn where_op(op: &OpContext<'_>) -> Result<Built> {
    let c = op.input(0)?;
    let (dtype, shape) = (c.dtype, c.shape.clone());
    if dtype != DType::F32 && int_at(dtype, &[0; 8]).is_none() {
        return Err(op.unsupported(format!("WHERE of a {} condition", dtype.name())));
    }
    let es = size(op, dtype)?;
    let n = count(op, &shape, es)?;
    let v = known(op, 0)?.get(..n * es).ok_or_else(|| op.bad("condition holds fewer values than its shape"))?;
    let trues = v.chunks_exact(es).filter(|b| truth(dtype, b)).count();
    let rank = shape.len();
    let n_out = count(op, &[trues, rank], 8)?;
    Ok(Built {
        outputs: vec![(DType::I64, vec![trues, rank])],
        kernel: Box::new(move |ins, outs| {
            let cond = input::<u8>(ins, 0, n * es)?;
            let out = output::<i64>(outs, 0, n_out)?;
            let mut at = vec![0; rank];
            let mut row = 0;
            for (e, b) in cond.chunks_exact(es).enumerate() {
                if !truth(dtype, b) {
                    continue;
                }
                if (row + 1) * rank > out.len() {
                    return Err(runtime("WHERE: more true elements than the output was sized for"));
                }
                unravel(e, &shape, &mut at);
                for (o, &i) in out[row * rank..(row + 1) * rank].iter_mut().zip(&at) {
                    *o = i as i64;
                }
                row += 1;
            }
            if row * rank != out.len() {
                return Err(runtime("WHERE: fewer true elements than the output was sized for"));
            }
            Ok(())
        }),
    })
}

/// Element `b` as a comparable key: floats by value (so -0 equals +0), integers exactly.
fn key(dtype: DType, b: &[u8]) -> Option<f64> {
    if dtype == DType::F32 {
        Some(f64::from(f32_at(b)))
    } else {
        int_at(dtype, b).map(|v| v as f64)
    }
}

/// UNIQUE: walking the input in order, an element equal to no earlier distinct
/// value is appended to the values; each element's index is its value's position.
pub(crate) fn unique(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    op.expect_outputs(2)?;
    if x.shape.len() != 1 || !matches!(x.dtype, DType::F32 | DType::I8 | DType::U8 | DType::I16 | DType::I32 | DType::I64) {
        return Err(op.unsupported(format!("UNIQUE of {} {:?}", x.dtype.name(), x.shape)));
    }
    let idx_type = match op.op.params {
        OpParams::OutType(4) => DType::I64,
        OpParams::OutType(2) | OpParams::None => DType::I32,
        _ => return Err(op.bad("idx_out_type must be int32 or int64")),
    };
    let (dtype, n) = (x.dtype, x.shape[0]);
    let es = size(op, dtype)?;
    let is = size(op, idx_type)?;
    count(op, &[n], 8)?;
    // Distinct values and each element's position among them.
    let distinct = move |v: &[u8]| -> (Vec<usize>, Vec<usize>) {
        let (mut firsts, mut idx) = (Vec::<usize>::new(), Vec::with_capacity(n));
        for e in 0..n {
            let k = key(dtype, &v[e * es..(e + 1) * es]);
            match firsts.iter().position(|&f| key(dtype, &v[f * es..(f + 1) * es]) == k) {
                Some(p) => idx.push(p),
                None => {
                    idx.push(firsts.len());
                    firsts.push(e);
                }
            }
        }
        (firsts, idx)
    };
    let v = known(op, 0)?.get(..n * es).ok_or_else(|| op.bad("input holds fewer values than its shape"))?;
    let m = distinct(v).0.len();
    Ok(Built {
        outputs: vec![(dtype, vec![m]), (idx_type, vec![n])],
        kernel: Box::new(move |ins, outs| {
            let v = input::<u8>(ins, 0, n * es)?;
            let (firsts, idx) = distinct(v);
            if firsts.len() != m {
                return Err(runtime("UNIQUE: the values changed since the output was sized"));
            }
            let y = output::<u8>(outs, 0, m * es)?;
            for (o, &f) in y.chunks_exact_mut(es).zip(&firsts) {
                o.copy_from_slice(&v[f * es..(f + 1) * es]);
            }
            let io = output::<u8>(outs, 1, n * is)?;
            for (o, &p) in io.chunks_exact_mut(is).zip(&idx) {
                put_int(p as i64, o);
            }
            Ok(())
        }),
    })
}

/// SEGMENT_SUM (`kind` None) and UNSORTED_SEGMENT_SUM/PROD/MAX/MIN: output element
/// `(s, j)` combines, in row order, data element `(i, j)` of every row `i` whose
/// id is `s`, starting from the reduction's identity (0, 1, the lowest or the
/// highest value). Negative ids name no segment; one past the last is an error.
pub(crate) fn segments(op: &OpContext<'_>, kind: Option<&'static str>) -> Result<Built> {
    let (x, ids) = (op.input(0)?, op.input(1)?);
    if ids.dtype != DType::I32 || !matches!(x.dtype, DType::F32 | DType::I32) {
        return Err(op.unsupported(format!("segment op of {} data and {} ids", x.dtype.name(), ids.dtype.name())));
    }
    let r = ids.shape.len();
    let prefix = r >= 1 && r <= x.shape.len() && x.shape[..r] == ids.shape[..];
    if !prefix || (kind.is_none() && r != 1) {
        return Err(op.bad(format!("segment ids of shape {:?} for data of shape {:?}", ids.shape, x.shape)));
    }
    let n_ids = count(op, &ids.shape, 4)?;
    let segs = match kind {
        Some(_) => match op.const_ints(2)?[..] {
            [s] if s >= 0 => s as usize,
            _ => return Err(op.bad("num_segments must be one value, 0 or more")),
        },
        None => {
            let v: Vec<i32> = known(op, 1)?.chunks_exact(4).take(n_ids).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            // LiteRT's definition: ids start at 0 and grow by 0 or 1.
            if v.windows(2).any(|w| w[1] != w[0] && w[1] != w[0] + 1) || v.first().is_some_and(|&f| f != 0) {
                let m = "SEGMENT_SUM ids must start at 0 and grow by 0 or 1";
                // Ids computed at run time fail the run, constant ones the model.
                return Err(if ids.constant { op.bad(m) } else { runtime(format!("{}: {m}", op.at())) });
            }
            v.last().map_or(0, |&l| l as usize + 1)
        }
    };
    let kind = kind.unwrap_or("sum");
    let inner: usize = x.shape[r..].iter().product();
    let mut out_shape = vec![segs];
    out_shape.extend_from_slice(&x.shape[r..]);
    let (dtype, n_x, n_out) = (x.dtype, count(op, &x.shape, 4)?, count(op, &out_shape, 4)?);
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let d = input::<u8>(ins, 0, n_x * 4)?;
            let id = input::<i32>(ins, 1, n_ids)?;
            let out = output::<u8>(outs, 0, n_out * 4)?;
            if let Some(bad) = id.iter().find(|&&i| i >= 0 && i as usize >= segs) {
                return Err(runtime(format!("segment id {bad} out of range for {segs} segments")));
            }
            for (e, o) in out.chunks_exact_mut(4).enumerate() {
                let (s, j) = (e / inner, e % inner);
                let rows = (0..n_ids).filter(|&i| id[i] == s as i32).map(|i| &d[(i * inner + j) * 4..][..4]);
                if dtype == DType::F32 {
                    let vals = rows.map(f32_at);
                    let v = match kind {
                        "sum" => vals.fold(0.0f32, |a, v| a + v),
                        "prod" => vals.fold(1.0f32, |a, v| a * v),
                        "max" => vals.fold(f32::MIN, |a, v| if v > a { v } else { a }),
                        _ => vals.fold(f32::MAX, |a, v| if v < a { v } else { a }),
                    };
                    o.copy_from_slice(&v.to_le_bytes());
                } else {
                    let vals = rows.map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    let v = match kind {
                        "sum" => vals.fold(0i32, i32::wrapping_add),
                        "prod" => vals.fold(1i32, i32::wrapping_mul),
                        "max" => vals.fold(i32::MIN, i32::max),
                        _ => vals.fold(i32::MAX, i32::min),
                    };
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            Ok(())
        }),
    })
}

/// MATRIX_DIAG (`set` false: output `[..., n, n]` element `(b, i, j)` is
/// `diag[b, i]` when `i == j`, else zero) and MATRIX_SET_DIAG (`set`: it is
/// `diag[b, i]` on the diagonal, else the input's element).
pub(crate) fn diag(op: &OpContext<'_>, set: bool) -> Result<Built> {
    let x = op.input(0)?;
    let es = size(op, x.dtype)?;
    let (out_shape, dshape) = if set {
        let r = x.shape.len();
        if r < 2 {
            return Err(op.bad("MATRIX_SET_DIAG takes rank 2 or more"));
        }
        let mut d = x.shape[..r - 2].to_vec();
        d.push(x.shape[r - 2].min(x.shape[r - 1]));
        let di = op.input(1)?;
        if di.shape != d || di.dtype != x.dtype {
            return Err(op.bad(format!("diagonal {:?} for input {:?}", di.shape, x.shape)));
        }
        (x.shape.clone(), d)
    } else {
        let n = *x.shape.last().ok_or_else(|| op.bad("MATRIX_DIAG takes rank 1 or more"))?;
        let mut o = x.shape.clone();
        o.push(n);
        (o, x.shape.clone())
    };
    let r = out_shape.len();
    let (n_out, n_d) = (count(op, &out_shape, es)?, count(op, &dshape, es)?);
    let (os, ds) = (out_shape.clone(), dshape);
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let (d, src) = if set { (input::<u8>(ins, 1, n_d * es)?, Some(input::<u8>(ins, 0, n_out * es)?)) } else { (input::<u8>(ins, 0, n_d * es)?, None) };
            let out = output::<u8>(outs, 0, n_out * es)?;
            let mut at = vec![0; r];
            for (e, o) in out.chunks_exact_mut(es).enumerate() {
                unravel(e, &os, &mut at);
                if at[r - 2] == at[r - 1] {
                    let s = ravel(&at[..r - 1], &ds);
                    o.copy_from_slice(&d[s * es..(s + 1) * es]);
                } else {
                    match src {
                        Some(x) => o.copy_from_slice(&x[e * es..(e + 1) * es]),
                        None => o.fill(0),
                    }
                }
            }
            Ok(())
        }),
    })
}

/// BROADCAST_ARGS: output dimension `d` (of the longer rank, aligned at the end)
/// is the dimension of the two that is not 1 (they must agree when neither is).
pub(crate) fn broadcast_args(op: &OpContext<'_>) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype || !matches!(a.dtype, DType::I32 | DType::I64) || a.shape.len() != 1 || b.shape.len() != 1 {
        return Err(op.bad("BROADCAST_ARGS takes two 1-D int32 or int64 shapes of one type"));
    }
    let (dtype, na, nb) = (a.dtype, a.shape[0], b.shape[0]);
    let es = size(op, dtype)?;
    let r = na.max(nb);
    count(op, &[r], es)?;
    Ok(Built {
        outputs: vec![(dtype, vec![r])],
        kernel: Box::new(move |ins, outs| {
            let (x, y) = (input::<u8>(ins, 0, na * es)?, input::<u8>(ins, 1, nb * es)?);
            let dim = |v: &[u8], n: usize, d: usize| if d + n >= r { int_at(dtype, &v[(d + n - r) * es..]).unwrap_or(1) } else { 1 };
            let out = output::<u8>(outs, 0, r * es)?;
            for (d, o) in out.chunks_exact_mut(es).enumerate() {
                let (p, q) = (dim(x, na, d), dim(y, nb, d));
                let v = match (p, q) {
                    _ if p == q || q == 1 => p,
                    (1, _) => q,
                    _ => return Err(runtime(format!("BROADCAST_ARGS: dimensions {p} and {q} do not broadcast"))),
                };
                put_int(v, o);
            }
            Ok(())
        }),
    })
}

/// BITCAST: the output's bytes are the input's bytes; its shape gains (larger
/// input element) or loses (smaller) a last dimension of the size ratio.
pub(crate) fn bitcast(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let to = op.outputs.first().ok_or_else(|| op.bad("no output"))?.dtype;
    let (si, so) = (size(op, x.dtype)?, size(op, to)?);
    let mut shape = x.shape.clone();
    if si > so {
        shape.push(si / so);
    } else if si < so && shape.pop() != Some(so / si) {
        return Err(op.bad(format!("BITCAST to a larger type needs a last dimension of {}", so / si)));
    }
    let bytes = count(op, &x.shape, si)? * si;
    Ok(Built {
        outputs: vec![(to, shape)],
        kernel: Box::new(move |ins, outs| {
            output::<u8>(outs, 0, bytes)?.copy_from_slice(input::<u8>(ins, 0, bytes)?);
            Ok(())
        }),
    })
}

/// RIGHT_SHIFT (`shift`) and BITWISE_XOR: each output element from the pair of
/// input elements it broadcasts from; the shift amount is clamped to
/// `0 ..= bits - 1`, signed values shift in copies of their sign bit.
pub(crate) fn bitwise(op: &OpContext<'_>, shift: bool) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    let dtype = a.dtype;
    if b.dtype != dtype || !matches!(dtype, DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32 | DType::U32) {
        return Err(op.unsupported(format!("bitwise op of {} and {}", dtype.name(), b.dtype.name())));
    }
    let es = size(op, dtype)?;
    let out_shape = broadcast_shapes(&a.shape, &b.shape).ok_or_else(|| op.bad(format!("shapes {:?} and {:?} do not broadcast", a.shape, b.shape)))?;
    let (sa, sb, os) = (a.shape.clone(), b.shape.clone(), out_shape.clone());
    let (n_a, n_b, n_out) = (count(op, &sa, es)?, count(op, &sb, es)?, count(op, &os, es)?);
    let bits = 8 * es as i64;
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let (x, y) = (input::<u8>(ins, 0, n_a * es)?, input::<u8>(ins, 1, n_b * es)?);
            let out = output::<u8>(outs, 0, n_out * es)?;
            for (e, o) in out.chunks_exact_mut(es).enumerate() {
                let (i, j) = (broadcast_source(e, &os, &sa), broadcast_source(e, &os, &sb));
                let p = int_at(dtype, &x[i * es..]).unwrap_or(0);
                let q = int_at(dtype, &y[j * es..]).unwrap_or(0);
                put_int(if shift { p >> q.clamp(0, bits - 1) } else { p ^ q }, o);
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

    /// A constant input (its values are shown to the builder, as the ops whose
    /// output shape depends on values need).
    fn konst(dtype: DType, shape: &[usize], v: &[i64]) -> Option<TestInput> {
        let es = dtype.size().unwrap_or(1);
        let data = v.iter().flat_map(|x| x.to_le_bytes()[..es].to_vec()).collect();
        raw_input(dtype, shape, data).map(|t| TestInput { constant: true, ..t })
    }

    fn ints(dtype: DType, b: &[u8]) -> Vec<i64> {
        b.chunks_exact(dtype.size().unwrap_or(1)).map(|c| super::int_at(dtype, c).unwrap_or(0)).collect()
    }

    #[test]
    fn hand_computed_set_ops() {
        // WHERE on a bool [2, 3]: coordinates of the true elements.
        let t = TestOp::typed(B::WHERE, OpParams::None, vec![konst(DType::Bool, &[2, 3], &[0, 1, 0, 1, 0, 1])], vec![DType::I64]);
        let r = t.reference().unwrap();
        assert_eq!((r[0].1.clone(), ints(DType::I64, &r[0].2)), (vec![3, 2], vec![0, 1, 1, 0, 1, 2]));
        // UNIQUE with int64 indices.
        let t = TestOp::typed(B::UNIQUE, OpParams::OutType(4), vec![konst(DType::I32, &[5], &[4, -1, 4, 7, -1])], vec![DType::I32, DType::I64]);
        let r = t.reference().unwrap();
        assert_eq!(ints(DType::I32, &r[0].2), [4, -1, 7]);
        assert_eq!(ints(DType::I64, &r[1].2), [0, 1, 0, 2, 1]);
        // UNSORTED_SEGMENT_MAX with an empty segment and a negative id (dropped).
        let t = TestOp::typed(
            B::UNSORTED_SEGMENT_MAX,
            OpParams::None,
            vec![konst(DType::I32, &[4], &[5, 9, -2, 3]), konst(DType::I32, &[4], &[2, 0, 2, -1]), i32_const(&[], &[3])],
            vec![DType::I32],
        );
        assert_eq!(ints(DType::I32, &t.reference().unwrap()[0].2), [9, i64::from(i32::MIN), 5]);
        // RIGHT_SHIFT clamps its amounts; BITWISE_XOR.
        let x = || konst(DType::I8, &[4], &[-128, 64, -7, 100]);
        let t = TestOp::typed(B::RIGHT_SHIFT, OpParams::None, vec![x(), konst(DType::I8, &[4], &[100, 3, 1, -5])], vec![DType::I8]);
        assert_eq!(ints(DType::I8, &t.reference().unwrap()[0].2), [-1, 8, -4, 100]);
        let t = TestOp::typed(B::BITWISE_XOR, OpParams::None, vec![x(), konst(DType::I8, &[1], &[-1])], vec![DType::I8]);
        assert_eq!(ints(DType::I8, &t.reference().unwrap()[0].2), [127, -65, 6, -101]);
        // BITCAST float32 -> uint8 adds a dimension of 4.
        let t = TestOp::typed(B::BITCAST, OpParams::None, vec![f32_input(&[2], &[1.0, -2.0])], vec![DType::U8]);
        let r = t.reference().unwrap();
        assert_eq!((r[0].1.clone(), r[0].2.clone()), (vec![2, 4], [1.0f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat()));
    }

    #[test]
    fn random_set_ops_match_cpu() {
        let mut r = Rng::new(0x5e75);
        let types = [DType::I8, DType::U8, DType::I16, DType::U16, DType::I32, DType::U32];
        for _ in 0..120 {
            let rank = r.range(1, 4);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 4)).collect();
            let n: usize = shape.iter().product();
            let small: Vec<i64> = (0..n).map(|_| r.below(5) as i64 - 2).collect();
            for dt in [DType::Bool, DType::F32, DType::I32, DType::I64] {
                let v: Vec<i64> = small.iter().map(|&v| if dt == DType::Bool { v.abs().min(1) } else { v }).collect();
                let input = if dt == DType::F32 { f32_const(&shape, &v.iter().map(|&x| x as f32).collect::<Vec<_>>()) } else { konst(dt, &shape, &v) };
                TestOp::typed(B::WHERE, OpParams::None, vec![input], vec![DType::I64]).compare_with_cpu(0.0, "where");
            }
            let flat = konst(DType::I32, &[n], &small);
            TestOp::typed(B::UNIQUE, OpParams::OutType(2), vec![flat], vec![DType::I32, DType::I32]).compare_with_cpu(0.0, "unique");
            // Segments over the leading dimensions, ids sometimes outside.
            let ir = r.range(1, rank);
            let rows: usize = shape[..ir].iter().product();
            let segs = r.range(0, 4);
            let ids: Vec<i64> = (0..rows).map(|_| r.below(segs + 2) as i64 - 1).collect();
            let data = f32_input(&shape, &r.floats(n));
            for code in [B::UNSORTED_SEGMENT_SUM, B::UNSORTED_SEGMENT_PROD, B::UNSORTED_SEGMENT_MAX, B::UNSORTED_SEGMENT_MIN] {
                let t = TestOp::new(code, OpParams::None, vec![data.clone(), konst(DType::I32, &shape[..ir], &ids), i32_const(&[], &[segs as i32])], 1);
                // An id past the last segment fails on both backends.
                if ids.iter().any(|&i| i >= segs as i64) {
                    assert!(t.reference().is_err() && t.cpu().is_err());
                } else {
                    t.compare_with_cpu(0.0, "unsorted segment");
                }
            }
            let mut sorted: Vec<i64> = vec![0];
            for _ in 1..shape[0] {
                let last = sorted[sorted.len() - 1];
                sorted.push(last + r.below(2) as i64);
            }
            TestOp::new(B::SEGMENT_SUM, OpParams::None, vec![data.clone(), konst(DType::I32, &shape[..1], &sorted)], 1).compare_with_cpu(0.0, "segment_sum");
            TestOp::new(B::MATRIX_DIAG, OpParams::None, vec![data.clone()], 1).compare_with_cpu(0.0, "matrix_diag");
            if rank >= 2 {
                let mut ds = shape[..rank - 2].to_vec();
                ds.push(shape[rank - 2].min(shape[rank - 1]));
                let d = f32_input(&ds, &r.floats(ds.iter().product()));
                TestOp::new(B::MATRIX_SET_DIAG, OpParams::None, vec![data.clone(), d], 1).compare_with_cpu(0.0, "matrix_set_diag");
            }
            // Bit ops of every integer type, with broadcasting.
            let dt = types[r.below(types.len())];
            let bits = 8 * dt.size().unwrap_or(1) as i64;
            let skip = r.below(rank);
            let other: Vec<usize> = shape.iter().map(|&d| if r.coin() { 1 } else { d }).skip(skip).collect();
            let xs: Vec<i64> = (0..n).map(|_| r.next() as i64).collect();
            let ys: Vec<i64> = (0..other.iter().product::<usize>()).map(|_| r.below(bits as usize + 6) as i64 - 3).collect();
            for code in [B::RIGHT_SHIFT, B::BITWISE_XOR] {
                let t = TestOp::typed(code, OpParams::None, vec![konst(dt, &shape, &xs), konst(dt, &other, &ys)], vec![dt]);
                t.compare_with_cpu(0.0, "bitwise");
            }
            let t = TestOp::typed(B::BITCAST, OpParams::None, vec![konst(DType::I16, &shape, &xs)], vec![DType::U8]);
            t.compare_with_cpu(0.0, "bitcast");
        }
        for (a, b) in [(vec![2, 1, 3], vec![4, 3]), (vec![], vec![5]), (vec![1], vec![1, 7])] {
            let t =
                TestOp::typed(B::BROADCAST_ARGS, OpParams::None, vec![konst(DType::I64, &[a.len()], &a), konst(DType::I64, &[b.len()], &b)], vec![DType::I64]);
            t.compare_with_cpu(0.0, "broadcast_args");
        }
    }
}
