//! Type conversion: QUANTIZE, DEQUANTIZE, CAST, DENSIFY, BITCAST.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::quant::{self as kq};

use super::quant::*;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::{DType, SparseDim, Sparsity};

/// The conversion family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::QUANTIZE => quantize(op),
        B::DEQUANTIZE => dequantize(op),
        B::CAST => cast(op),
        B::BITCAST => bitcast(op),
        _ => return None,
    })
}

/// DENSIFY's builder (family `op-densify`).
pub(super) fn build_densify(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    (code == B::DENSIFY).then(|| densify(op))
}

pub(crate) fn dequantize(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let shape = x.shape.clone();
    let dtype = x.dtype;
    if dtype == DType::F16 {
        return Ok(Built {
            outputs: vec![(DType::F32, shape)],
            kernel: Box::new(|ins, outs| {
                let src = arg(ins, 0)?;
                for (o, c) in typed_mut::<f32>(outs[0])?.iter_mut().zip(src.chunks_exact(2)) {
                    *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
                Ok(())
            }),
        });
    }
    let q = x.quant.ok_or_else(|| op.bad("DEQUANTIZE input has no quantization parameters"))?.clone();
    if !matches!(dtype, DType::I8 | DType::U8 | DType::I16 | DType::I32) {
        return Err(op.unsupported(format!("DEQUANTIZE of {}", dtype.name())));
    }
    let channels = q.scale.len();
    if channels > 1 && shape.get(q.axis) != Some(&channels) {
        return Err(op.bad(format!("{channels} scales for dim {} of {shape:?}", q.axis)));
    }
    let inner: usize = shape.get(q.axis + 1..).map_or(1, |s| s.iter().product());
    Ok(Built {
        outputs: vec![(DType::F32, shape)],
        kernel: Box::new(move |ins, outs| {
            let src = arg(ins, 0)?;
            let out = typed_mut::<f32>(outs[0])?;
            let (scale, zp) = (&q.scale[..], &q.zero_point[..]);
            // One scale (and a zero point whose difference with any 8-bit
            // value fits in int32, as it does in the general loop's int64):
            // the vector loops, same bits.
            let per_tensor = match (scale, zp) {
                ([s], [z]) if z.unsigned_abs() < 1 << 30 => Some((*s, *z as i32)),
                _ => None,
            };
            match (dtype, per_tensor) {
                (DType::I8, Some((s, z))) => kq::dequantize_i8(typed::<i8>(src)?, s, z, out),
                (DType::U8, Some((s, z))) => kq::dequantize_u8(src, s, z, out),
                (DType::I8, None) => kq::dequantize(typed::<i8>(src)?, scale, zp, inner, out),
                (DType::U8, None) => kq::dequantize(src, scale, zp, inner, out),
                (DType::I16, _) => kq::dequantize(typed::<i16>(src)?, scale, zp, inner, out),
                _ => kq::dequantize(typed::<i32>(src)?, scale, zp, inner, out),
            }
            Ok(())
        }),
    })
}

/// QUANTIZE: float to integer (round half away from zero), or integer to integer
/// through a fixed-point multiplier.
pub(crate) fn quantize(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let to = op.outputs[0].dtype;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if !matches!(to, DType::I8 | DType::U8 | DType::I16) {
        return Err(op.unsupported(format!("QUANTIZE to {}", to.name())));
    }
    let from = x.dtype;
    let kernel: crate::backend::KernelFn = match from {
        DType::F32 => Box::new(move |ins, outs| {
            let x = typed::<f32>(arg(ins, 0)?)?;
            match to {
                DType::I8 => kq::quantize_f32_i8(x, out_scale, out_zp, typed_mut(outs[0])?),
                DType::U8 => kq::quantize_f32_u8(x, out_scale, out_zp, outs[0]),
                _ => kq::quantize_f32_i16(x, out_scale, out_zp, typed_mut(outs[0])?),
            }
            Ok(())
        }),
        DType::I8 | DType::U8 | DType::I16 => {
            let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
            let (m, s) = kq::quantize_multiplier(f64::from(in_scale) / f64::from(out_scale));
            Box::new(move |ins, outs| {
                let (src, out) = (arg(ins, 0)?, &mut *outs[0]);
                // Every pair of int8, uint8 and int16 (LiteRT's requantizing QUANTIZE).
                macro_rules! to {
                    ($x:expr) => {
                        match to {
                            DType::I8 => kq::requantize::<_, i8>($x, in_zp, m, s, out_zp, typed_mut(out)?),
                            DType::U8 => kq::requantize::<_, u8>($x, in_zp, m, s, out_zp, out),
                            _ => kq::requantize::<_, i16>($x, in_zp, m, s, out_zp, typed_mut(out)?),
                        }
                    };
                }
                match from {
                    DType::I8 => to!(typed::<i8>(src)?),
                    DType::U8 => to!(src),
                    _ => to!(typed::<i16>(src)?),
                }
                Ok(())
            })
        }
        t => return Err(op.unsupported(format!("QUANTIZE from {}", t.name()))),
    };
    Ok(Built { outputs: vec![(to, x.shape.clone())], kernel })
}

/// Expands a sparse constant into `dst`, its dense form (zeros where nothing is
/// stored), validating every index.
fn densify_bytes(shape: &[usize], elem: usize, sp: &Sparsity, src: &[u8], dst: &mut [u8]) -> std::result::Result<(), String> {
    let n = shape.len();
    let levels = sp.traversal_order.len();
    if n > crate::model::MAX_RANK
        || levels < n
        || sp.block_map.len() != levels - n
        || sp.traversal_order.iter().any(|&t| t >= levels)
        || sp.block_map.iter().any(|&b| b >= n)
    {
        return Err("traversal order / block map inconsistent with the tensor rank".into());
    }
    // The format takes a block's size from the metadata entry its traversal slot names.
    let block_size: Vec<usize> = (0..levels - n)
        .map(|i| match sp.dims.get(sp.traversal_order[n + i]) {
            Some(SparseDim::Dense(s)) => Ok(*s),
            _ => Err("block dimension without a dense size".to_string()),
        })
        .collect::<std::result::Result<_, _>>()?;
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or("dense shape overflows")?;
    if numel.checked_mul(elem) != Some(dst.len()) {
        return Err("dense size mismatch".into());
    }
    dst.fill(0);
    let strides = ferrite_kernels::strides(shape);
    let mut indices = vec![0usize; levels];
    let mut src_pos = 0usize;
    // Bounds the work a hostile description can ask for, independent of what it writes.
    let mut budget = numel.saturating_mul(levels + 1).saturating_add(1 << 16);
    struct W<'a> {
        shape: &'a [usize],
        sp: &'a Sparsity,
        block_size: &'a [usize],
        strides: &'a [usize],
        elem: usize,
        src: &'a [u8],
    }
    fn go(
        w: &W<'_>,
        level: usize,
        prev: usize,
        indices: &mut [usize],
        src_pos: &mut usize,
        dst: &mut [u8],
        budget: &mut usize,
    ) -> std::result::Result<(), String> {
        *budget = budget.checked_sub(1).ok_or("sparse description requires too much work")?;
        let n = w.shape.len();
        if level == indices.len() {
            // On the stack: this runs once per stored value (hundreds of thousands).
            let mut orig = [0usize; crate::model::MAX_RANK];
            let orig = &mut orig[..n];
            for i in 0..n {
                orig[w.sp.traversal_order[i]] = indices[i];
            }
            for (&t, &ix) in w.sp.traversal_order[n..].iter().zip(&indices[n..]) {
                let b = t - n;
                let d = w.sp.block_map[b];
                orig[d] = orig[d] * w.block_size[b] + ix;
            }
            let mut flat = 0usize;
            for (d, (&o, (&size, &stride))) in orig.iter().zip(w.shape.iter().zip(w.strides)).enumerate() {
                if o >= size {
                    return Err(format!("sparse index {o} out of range for dim {d} of size {size}"));
                }
                flat += o * stride;
            }
            let s = w.src.get(*src_pos * w.elem..(*src_pos + 1) * w.elem).ok_or("sparse values buffer too short")?;
            dst[flat * w.elem..(flat + 1) * w.elem].copy_from_slice(s);
            *src_pos += 1;
            return Ok(());
        }
        match &w.sp.dims[level] {
            SparseDim::Dense(size) => {
                for i in 0..*size {
                    indices[level] = i;
                    go(w, level + 1, prev.checked_mul(*size).and_then(|v| v.checked_add(i)).ok_or("sparse index overflow")?, indices, src_pos, dst, budget)?;
                }
            }
            SparseDim::Csr { segments, indices: idx } => {
                let (a, b) = (segments.get(prev).ok_or("sparse segment out of range")?, segments.get(prev + 1).ok_or("sparse segment out of range")?);
                if a > b || b > idx.len() {
                    return Err("sparse segments are not ordered or exceed the indices".into());
                }
                for i in a..b {
                    indices[level] = idx.get(i).ok_or("sparse index out of range")?;
                    go(w, level + 1, i, indices, src_pos, dst, budget)?;
                }
            }
        }
        Ok(())
    }
    let w = W { shape, sp, block_size: &block_size, strides: &strides, elem, src };
    go(&w, 0, 0, &mut indices, &mut src_pos, dst, &mut budget)
}

pub(crate) fn densify(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let sp = x.sparsity.ok_or_else(|| op.bad("DENSIFY input is not sparse"))?;
    let src = x.value.ok_or_else(|| op.unsupported("DENSIFY of a non-constant tensor"))?;
    let elem = x.dtype.size().ok_or_else(|| op.unsupported("element type"))?;
    let (shape, sp, src) = (x.shape.clone(), sp.clone(), src.to_vec());
    let at = op.at();
    // The input is constant, so this runs once, when prepare folds the op; by then
    // the dense size has been checked against the session's memory limit.
    Ok(Built {
        outputs: vec![(x.dtype, x.shape.clone())],
        // Written straight into the output: no second dense buffer at prepare.
        kernel: Box::new(move |_, outs| {
            let out = outs.first_mut().ok_or_else(|| Error::Runtime(format!("{at}: no output").into()))?;
            densify_bytes(&shape, elem, &sp, &src, out).map_err(|m| Error::InvalidModel(format!("{at}: {m}").into()))
        }),
    })
}

/// Element `i` of `b` (of type `dtype`) as f64.
fn elem_f64(dtype: DType, b: &[u8], i: usize) -> f64 {
    let at = |n: usize| &b[i * n..(i + 1) * n];
    match dtype {
        DType::F32 => f64::from(f32::from_le_bytes(at(4).try_into().unwrap_or_default())),
        DType::F64 => f64::from_le_bytes(at(8).try_into().unwrap_or_default()),
        DType::I32 => f64::from(i32::from_le_bytes(at(4).try_into().unwrap_or_default())),
        DType::I64 => i64::from_le_bytes(at(8).try_into().unwrap_or_default()) as f64,
        DType::I16 => f64::from(i16::from_le_bytes(at(2).try_into().unwrap_or_default())),
        DType::U16 => f64::from(u16::from_le_bytes(at(2).try_into().unwrap_or_default())),
        DType::U32 => f64::from(u32::from_le_bytes(at(4).try_into().unwrap_or_default())),
        DType::I8 => f64::from(b[i] as i8),
        DType::F16 => f64::from(half::f16::from_le_bytes(at(2).try_into().unwrap_or_default()).to_f32()),
        _ => f64::from(b[i]),
    }
}

pub(crate) fn cast(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let to = op.outputs[0].dtype;
    let from = x.dtype;
    if to.size().is_none() {
        return Err(op.unsupported(format!("CAST to {}", to.name())));
    }
    if !matches!(
        from,
        DType::F32 | DType::F64 | DType::I32 | DType::I64 | DType::I16 | DType::U16 | DType::U32 | DType::I8 | DType::U8 | DType::Bool | DType::F16
    ) {
        return Err(op.unsupported(format!("CAST from {}", from.name())));
    }
    let n: usize = x.shape.iter().product();
    Ok(Built {
        outputs: vec![(to, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let src = arg(ins, 0)?;
            let v = (0..n).map(|i| elem_f64(from, src, i));
            let o = &mut *outs[0];
            // Float to integer truncates toward zero (saturating), as a C cast on in-range values.
            macro_rules! put {
                ($t:ty) => {
                    for (d, x) in typed_mut::<$t>(o)?.iter_mut().zip(v) {
                        *d = x as $t;
                    }
                };
            }
            match to {
                DType::F32 => put!(f32),
                DType::F64 => put!(f64),
                DType::I32 => put!(i32),
                DType::I64 => put!(i64),
                DType::I16 => put!(i16),
                DType::U16 => put!(u16),
                DType::U32 => put!(u32),
                DType::I8 => put!(i8),
                DType::U8 => put!(u8),
                DType::Bool => {
                    for (d, x) in o.iter_mut().zip(v) {
                        *d = (x != 0.0) as u8;
                    }
                }
                DType::F16 => {
                    for (d, x) in o.chunks_exact_mut(2).zip(v) {
                        d.copy_from_slice(&half::f16::from_f64(x).to_le_bytes());
                    }
                }
                t => return Err(Error::Runtime(format!("CAST to {}", t.name()).into())),
            }
            Ok(())
        }),
    })
}

/// BITCAST: the input's bytes reinterpreted as the output's element type. Equal
/// sizes keep the shape; a larger input element becomes a new last dimension of
/// `in / out` elements; a smaller one needs a last dimension of `out / in`
/// elements, which goes.
pub(crate) fn bitcast(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let to = op.outputs.first().map(|t| t.dtype).ok_or_else(|| op.bad("BITCAST has no output"))?;
    let (Some(si), Some(so)) = (x.dtype.size(), to.size()) else {
        return Err(op.unsupported(format!("BITCAST from {} to {}", x.dtype.name(), to.name())));
    };
    let mut shape = x.shape.clone();
    if si > so {
        shape.push(si / so);
    } else if si < so {
        if shape.last() != Some(&(so / si)) {
            return Err(op.bad(format!("BITCAST from {} to {} needs a last dimension of {}, got shape {:?}", x.dtype.name(), to.name(), so / si, x.shape)));
        }
        shape.pop();
    }
    let n = op.checked_elements(&x.shape, si)? * si;
    Ok(Built {
        outputs: vec![(to, shape)],
        kernel: Box::new(move |ins, outs| {
            let i = arg(ins, 0)?;
            let (Some(src), Some(dst)) = (i.get(..n), outs[0].get_mut(..n)) else {
                return Err(Error::Runtime(format!("BITCAST buffers of {} and {} bytes, the op moves {n}", i.len(), outs[0].len()).into()));
            };
            dst.copy_from_slice(src);
            Ok(())
        }),
    })
}
