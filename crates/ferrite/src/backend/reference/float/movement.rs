//! Data movement for any element type (elements are moved as opaque bytes), plus
//! the conversions CAST and DEQUANTIZE (float16), SHAPE, FILL and ZEROS_LIKE.
//!
//! Each kernel says, for every output element, which input element it copies:
//! the output's multi-index is mapped back to an input multi-index by the op's
//! definition. A quantized input may only move to an output quantized the same
//! way; anything else needs requantizing, which is not movement.

use super::{axis, count, input, output, ravel, runtime, same_quantization, unravel};
use crate::backend::{arg, Built, InputDesc, KernelFn, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// Bytes per element of `dtype`, or unsupported.
fn elem_size(op: &OpContext<'_>, dtype: DType) -> Result<usize> {
    dtype.size().ok_or_else(|| op.unsupported(format!("element type {}", dtype.name())))
}

/// Writes output element `i` (of `es` bytes) from input element `source(i)` for
/// every output element; a source outside the input is a run-time error.
fn copy_elements(src: &[u8], out: &mut [u8], es: usize, mut source: impl FnMut(usize) -> usize) -> Result<()> {
    for (i, o) in out.chunks_exact_mut(es).enumerate() {
        let s = source(i);
        let v = s.checked_mul(es).and_then(|b| src.get(b..b + es)).ok_or_else(|| runtime(format!("element {s} is outside the input")))?;
        o.copy_from_slice(v);
    }
    Ok(())
}

/// A kernel copying input 0 to output 0 unchanged (the element order of
/// RESHAPE, SQUEEZE and EXPAND_DIMS is that of the input).
fn copy_kernel(bytes: usize) -> KernelFn {
    Box::new(move |ins, outs| {
        output::<u8>(outs, 0, bytes)?.copy_from_slice(input::<u8>(ins, 0, bytes)?);
        Ok(())
    })
}

/// An element-moving op's Built: output of input 0's type and `shape`, each
/// output element copied from the input element `source` names given the
/// output's multi-index (and a scratch multi-index to fill).
fn remap(op: &OpContext<'_>, x: &InputDesc<'_>, out_shape: Vec<usize>, source: impl Fn(&[usize]) -> usize + Send + 'static) -> Result<Built> {
    same_quantization(op, 0)?;
    let es = elem_size(op, x.dtype)?;
    let (n_in, n_out) = (count(op, &x.shape, es)?, count(op, &out_shape, es)?);
    let shape = out_shape.clone();
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_in * es)?;
            let mut index = vec![0usize; shape.len()];
            copy_elements(src, output::<u8>(outs, 0, n_out * es)?, es, |i| {
                unravel(i, &shape, &mut index);
                source(&index)
            })
        }),
    })
}

/// RESHAPE: same elements, new shape from input 1 (or the options, or the
/// declared output), one dimension possibly -1 (inferred).
pub(crate) fn reshape(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    same_quantization(op, 0)?;
    let es = elem_size(op, x.dtype)?;
    let numel = count(op, &x.shape, es)?;
    let target: Vec<i64> = if op.opt_input(1).is_some() {
        // A shape tensor with no elements asks for a scalar.
        if op.input(1)?.shape.iter().product::<usize>() == 0 {
            vec![]
        } else {
            op.const_ints(1)?
        }
    } else if let OpParams::Reshape { new_shape: Some(s) } = &op.op.params {
        s.iter().map(|&v| i64::from(v)).collect()
    } else {
        op.outputs.first().ok_or_else(|| op.bad("no output"))?.shape.iter().map(|&v| v as i64).collect()
    };
    let bad = || op.bad(format!("cannot reshape {:?} to {target:?}", x.shape));
    if target.iter().any(|&d| d < -1) || target.iter().filter(|&&d| d == -1).count() > 1 {
        return Err(bad());
    }
    let known = target.iter().filter(|&&d| d >= 0).try_fold(1usize, |a, &d| a.checked_mul(d as usize)).ok_or_else(bad)?;
    let shape: Vec<usize> = if target.contains(&-1) {
        if known == 0 || numel % known != 0 {
            return Err(bad());
        }
        target.iter().map(|&d| if d == -1 { numel / known } else { d as usize }).collect()
    } else {
        target.iter().map(|&d| d as usize).collect()
    };
    if known != numel && !target.contains(&-1) {
        return Err(bad());
    }
    Ok(Built { outputs: vec![(x.dtype, shape)], kernel: copy_kernel(numel * es) })
}

/// SQUEEZE: drops the listed size-1 dimensions (all of them when none are listed).
pub(crate) fn squeeze(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    same_quantization(op, 0)?;
    let es = elem_size(op, x.dtype)?;
    let numel = count(op, &x.shape, es)?;
    let dims = match &op.op.params {
        OpParams::Squeeze { dims } => dims.clone(),
        _ => vec![],
    };
    let mut drop = vec![false; x.shape.len()];
    if dims.is_empty() {
        for (d, &s) in x.shape.iter().enumerate() {
            drop[d] = s == 1;
        }
    }
    for &d in &dims {
        let a = axis(op, i64::from(d), x.shape.len())?;
        if x.shape[a] != 1 {
            return Err(op.bad(format!("cannot squeeze dimension {a} of size {}", x.shape[a])));
        }
        drop[a] = true;
    }
    let shape = x.shape.iter().zip(&drop).filter(|(_, &d)| !d).map(|(&s, _)| s).collect();
    Ok(Built { outputs: vec![(x.dtype, shape)], kernel: copy_kernel(numel * es) })
}

/// EXPAND_DIMS: inserts a dimension of 1 at the axis of input 1 (-rank-1..=rank).
pub(crate) fn expand_dims(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    same_quantization(op, 0)?;
    let es = elem_size(op, x.dtype)?;
    let numel = count(op, &x.shape, es)?;
    let a = *op.const_ints(1)?.first().ok_or_else(|| op.bad("EXPAND_DIMS axis is empty"))?;
    let at = axis(op, a, x.shape.len() + 1)?;
    let mut shape = x.shape.clone();
    shape.insert(at, 1);
    Ok(Built { outputs: vec![(x.dtype, shape)], kernel: copy_kernel(numel * es) })
}

/// CONCATENATION along an axis, or PACK (stacking along a new axis): the output
/// holds, for each index over the dimensions before the axis, input 0's slab,
/// then input 1's, and so on.
pub(crate) fn concatenation(op: &OpContext<'_>, pack: bool) -> Result<Built> {
    let inputs: Vec<&InputDesc<'_>> = (0..op.inputs.len()).map(|i| op.input(i)).collect::<Result<_>>()?;
    let first = *inputs.first().ok_or_else(|| op.bad("no inputs"))?;
    let dtype = first.dtype;
    for i in 0..inputs.len() {
        same_quantization(op, i)?;
    }
    let es = elem_size(op, dtype)?;
    let mut bounds = None;
    let (ax, shapes): (usize, Vec<Vec<usize>>) = if pack {
        let OpParams::Pack { axis: a, .. } = op.op.params else { return Err(op.bad("missing Pack options")) };
        let ax = axis(op, i64::from(a), first.shape.len() + 1)?;
        // Each input is a slab of thickness 1 along the new axis.
        let shapes = inputs
            .iter()
            .map(|d| {
                let mut s = d.shape.clone();
                s.insert(ax.min(s.len()), 1);
                s
            })
            .collect();
        (ax, shapes)
    } else {
        let a = match op.op.params {
            OpParams::Concatenation { axis, activation } => {
                if activation != crate::ops::Activation::None {
                    super::require_f32(op, &[0])?;
                    bounds = Some(super::clamp_bounds(activation));
                }
                axis
            }
            _ => 0,
        };
        (axis(op, i64::from(a), first.shape.len())?, inputs.iter().map(|d| d.shape.clone()).collect())
    };
    let mut out_shape = shapes[0].clone();
    out_shape[ax] = 0;
    for (i, s) in shapes.iter().enumerate() {
        let agree = s.len() == out_shape.len() && s.iter().zip(&out_shape).enumerate().all(|(d, (a, b))| d == ax || a == b);
        if inputs[i].dtype != dtype || !agree {
            return Err(op.bad(format!("input {i} ({} {s:?}) does not match input 0 ({} {:?})", inputs[i].dtype.name(), dtype.name(), shapes[0])));
        }
        out_shape[ax] = out_shape[ax].checked_add(s[ax]).ok_or_else(|| op.bad("concatenated size overflows"))?;
    }
    let n_out = count(op, &out_shape, es)?;
    let outer: usize = out_shape[..ax].iter().product();
    let inner: usize = out_shape[ax + 1..].iter().product();
    // Elements each input contributes per outer index.
    let slabs: Vec<usize> = shapes.iter().map(|s| s[ax] * inner).collect();
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let parts: Vec<&[u8]> = slabs.iter().enumerate().map(|(i, &n)| input::<u8>(ins, i, outer * n * es)).collect::<Result<_>>()?;
            let out = output::<u8>(outs, 0, n_out * es)?;
            let mut at = 0;
            for o in 0..outer {
                for (part, &n) in parts.iter().zip(&slabs) {
                    out[at..at + n * es].copy_from_slice(&part[o * n * es..(o + 1) * n * es]);
                    at += n * es;
                }
            }
            if let Some(b) = bounds {
                for v in output::<f32>(outs, 0, n_out)? {
                    *v = super::clamp(*v, b);
                }
            }
            Ok(())
        }),
    })
}

/// Splits `x` along `ax` into consecutive pieces of `sizes`; UNPACK drops the axis.
fn split_pieces(op: &OpContext<'_>, data: usize, ax: usize, sizes: Vec<usize>, drop_axis: bool) -> Result<Built> {
    let x = op.input(data)?;
    same_quantization(op, data)?;
    if sizes.len() != op.outputs.len() {
        return Err(op.bad(format!("{} pieces but {} outputs", sizes.len(), op.outputs.len())));
    }
    let es = elem_size(op, x.dtype)?;
    let shape = x.shape.clone();
    let n_in = count(op, &shape, es)?;
    let outputs: Vec<(DType, Vec<usize>)> = sizes
        .iter()
        .map(|&s| {
            let mut o = shape.clone();
            if drop_axis {
                o.remove(ax);
            } else {
                o[ax] = s;
            }
            (x.dtype, o)
        })
        .collect();
    let (outer, len, inner): (usize, usize, usize) = (shape[..ax].iter().product(), shape[ax], shape[ax + 1..].iter().product());
    Ok(Built {
        outputs,
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, data, n_in * es)?;
            let mut start = 0;
            for (k, &s) in sizes.iter().enumerate() {
                // Output k element (o, j, i) is input element (o, start + j, i).
                copy_elements(src, output::<u8>(outs, k, outer * s * inner * es)?, es, |e| {
                    let (i, rest) = (e % inner.max(1), e / inner.max(1));
                    let (j, o) = (rest % s.max(1), rest / s.max(1));
                    (o * len + start + j) * inner + i
                })?;
                start += s;
            }
            Ok(())
        }),
    })
}

/// UNPACK: one output per index along the axis, that axis removed.
pub(crate) fn unpack(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::Unpack { axis: a, .. } = op.op.params else { return Err(op.bad("missing Unpack options")) };
    let ax = axis(op, i64::from(a), x.shape.len())?;
    // Checked before sizing anything by the (file-given) dimension.
    if x.shape[ax] != op.outputs.len() {
        return Err(op.bad(format!("{} pieces but {} outputs", x.shape[ax], op.outputs.len())));
    }
    split_pieces(op, 0, ax, vec![1; x.shape[ax]], true)
}

/// SPLIT (inputs axis, x: equal pieces, one per output) and SPLIT_V (inputs x,
/// size_splits, axis: the given sizes, one of them possibly -1 for the rest).
pub(crate) fn split(op: &OpContext<'_>, v: bool) -> Result<Built> {
    if !v {
        let x = op.input(1)?;
        let ax = axis(op, *op.const_ints(0)?.first().ok_or_else(|| op.bad("empty axis"))?, x.shape.len())?;
        let n = op.outputs.len();
        if n == 0 || x.shape[ax] % n != 0 {
            return Err(op.bad(format!("cannot split a dimension of {} into {n}", x.shape[ax])));
        }
        return split_pieces(op, 1, ax, vec![x.shape[ax] / n; n], false);
    }
    let x = op.input(0)?;
    let ax = axis(op, *op.const_ints(2)?.first().ok_or_else(|| op.bad("empty axis"))?, x.shape.len())?;
    let raw = op.const_ints(1)?;
    let dim = x.shape[ax];
    let bad = || op.bad(format!("size_splits {raw:?} do not fit a dimension of {dim}"));
    if raw.iter().any(|&s| s < -1) || raw.iter().filter(|&&s| s == -1).count() > 1 {
        return Err(bad());
    }
    let known = raw.iter().filter(|&&s| s >= 0).try_fold(0usize, |a, &s| a.checked_add(s as usize)).ok_or_else(bad)?;
    let rest = dim.checked_sub(known).ok_or_else(bad)?;
    let sizes: Vec<usize> = raw.iter().map(|&s| if s == -1 { rest } else { s as usize }).collect();
    if sizes.iter().sum::<usize>() != dim {
        return Err(bad());
    }
    split_pieces(op, 0, ax, sizes, false)
}

/// SLICE: `size[d]` elements from `begin[d]` in every dimension (size -1: to the end).
pub(crate) fn slice(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let shape = x.shape.clone();
    let (b, s) = (op.const_ints(1)?, op.const_ints(2)?);
    if b.len() != shape.len() || s.len() != shape.len() {
        return Err(op.bad("begin and size must have one entry per input dimension"));
    }
    let mut begin = Vec::new();
    let mut sizes = Vec::new();
    for d in 0..shape.len() {
        let dim = shape[d] as i64;
        let size = if s[d] == -1 { dim.saturating_sub(b[d]) } else { s[d] };
        if b[d] < 0 || size < 0 || b[d].checked_add(size).is_none_or(|e| e > dim) {
            return Err(op.bad(format!("slice of begin {} size {} does not fit dimension {dim}", b[d], s[d])));
        }
        begin.push(b[d] as usize);
        sizes.push(size as usize);
    }
    remap(op, x, sizes, move |idx| {
        let mut i = 0;
        for d in 0..idx.len() {
            i = i * shape[d] + begin[d] + idx[d];
        }
        i
    })
}

/// STRIDED_SLICE with every mask, resolved to one (start, stride, count) per
/// input dimension: begin_mask / end_mask take the whole range on that side,
/// ellipsis_mask stands for as many whole dimensions as the spec leaves out,
/// new_axis_mask inserts a dimension of 1, shrink_axis_mask takes the single
/// element at begin and drops the dimension; `offset` makes end relative to begin.
/// The slice STRIDED_SLICE takes: the input shape, then per input dimension
/// its first index, step and element count, and the output shape (shared with
/// the GPU backend, which copies the same elements).
#[allow(clippy::type_complexity)]
pub(crate) fn strided_slice_plan(op: &OpContext<'_>) -> Result<(Vec<usize>, Vec<i64>, Vec<i64>, Vec<usize>, Vec<usize>)> {
    let OpParams::StridedSlice { begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask, offset } = op.op.params else {
        return Err(op.bad("missing StridedSlice options"));
    };
    let x = op.input(0)?;
    let shape = x.shape.clone();
    let rank = shape.len();
    let (begin, end) = (op.const_ints(1)?, op.const_ints(2)?);
    let strides = if op.opt_input(3).is_some() { op.const_ints(3)? } else { vec![1; begin.len()] };
    let n = begin.len();
    if end.len() != n || strides.len() != n || n > 32 {
        return Err(op.bad("begin, end and strides must have one length (at most 32)"));
    }
    let bit = |mask: i32, i: usize| mask >> i & 1 == 1;
    // One spec per input dimension: (begin, end, stride, begin masked, end masked, shrink).
    type Spec = (i64, i64, i64, bool, bool, bool);
    let whole: Spec = (0, 0, 1, true, true, false);
    let mut specs: Vec<Spec> = Vec::with_capacity(rank);
    // Output dimensions in order: Some(input dim) or None for an inserted axis.
    let mut layout: Vec<Option<usize>> = Vec::new();
    let mut ellipsis_seen = false;
    for i in 0..n {
        if bit(ellipsis_mask, i) && !ellipsis_seen {
            ellipsis_seen = true;
            let later = (i + 1..n).filter(|&j| !bit(new_axis_mask, j)).count();
            for _ in 0..rank.saturating_sub(specs.len() + later) {
                layout.push(Some(specs.len()));
                specs.push(whole);
            }
        } else if bit(new_axis_mask, i) {
            layout.push(None);
        } else {
            if specs.len() >= rank {
                return Err(op.bad(format!("slice spec names more dimensions than the input's {rank}")));
            }
            if !bit(shrink_axis_mask, i) {
                layout.push(Some(specs.len()));
            }
            specs.push((begin[i], end[i], strides[i], bit(begin_mask, i), bit(end_mask, i), bit(shrink_axis_mask, i)));
        }
    }
    while specs.len() < rank {
        layout.push(Some(specs.len()));
        specs.push(whole);
    }
    let mut starts = Vec::with_capacity(rank);
    let mut steps = Vec::with_capacity(rank);
    let mut counts = Vec::with_capacity(rank);
    for (d, &(b, e, s, bm, em, shrink)) in specs.iter().enumerate() {
        let dim = shape[d] as i64;
        if s == 0 {
            return Err(op.bad("stride 0"));
        }
        // Negative positions count from the end.
        let wrap = |v: i64| if v < 0 { v + dim } else { v };
        if shrink {
            let at = wrap(b);
            if !(0..dim).contains(&at) {
                return Err(op.bad(format!("shrink index {b} outside dimension {dim}")));
            }
            starts.push(at);
            steps.push(1);
            counts.push(1);
            continue;
        }
        // Forward slices run over [start, stop) within [0, dim]; backward ones over
        // (stop, start] within [-1, dim - 1], -1 meaning "before the first".
        let (lo, hi) = if s > 0 { (0, dim) } else { (-1, dim - 1) };
        let start = if bm {
            if s > 0 {
                0
            } else {
                dim - 1
            }
        } else {
            wrap(b).clamp(lo, hi)
        };
        let stop = if em {
            if s > 0 {
                dim
            } else {
                -1
            }
        } else if offset {
            start.saturating_add(e).clamp(lo, hi)
        } else {
            wrap(e).clamp(lo, hi)
        };
        let span = if s > 0 { stop - start } else { start - stop };
        // Elements start, start + s, ... before stop: ceil(span / |s|), written so
        // that no stride (even i64::MIN) overflows.
        let step = s.unsigned_abs();
        counts.push(if span > 0 { ((span as u64 - 1) / step + 1) as usize } else { 0 });
        starts.push(start);
        steps.push(s);
    }
    let out_shape: Vec<usize> = layout.iter().map(|l| l.map_or(1, |d| counts[d])).collect();
    Ok((shape, starts, steps, counts, out_shape))
}

pub(crate) fn strided_slice(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let (shape, starts, steps, counts, out_shape) = strided_slice_plan(op)?;
    same_quantization(op, 0)?;
    let es = elem_size(op, x.dtype)?;
    let (n_in, n_out) = (count(op, &shape, es)?, count(op, &counts, es)?);
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_in * es)?;
            let mut idx = vec![0usize; counts.len()];
            // Output elements in row-major order over `counts`: inserted and shrunk
            // dimensions have size 1 and do not change that order.
            copy_elements(src, output::<u8>(outs, 0, n_out * es)?, es, |i| {
                unravel(i, &counts, &mut idx);
                let mut flat = 0usize;
                for d in 0..counts.len() {
                    // Within [0, dim) by construction of start, step and count.
                    let pos = starts[d] + steps[d] * idx[d] as i64;
                    flat = flat * shape[d] + pos.max(0) as usize;
                }
                flat
            })
        }),
    })
}

/// TRANSPOSE: output dimension j is input dimension perm[j].
pub(crate) fn transpose(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let perm = op.const_ints(1)?;
    let rank = x.shape.len();
    let mut seen = vec![false; rank];
    for &p in &perm {
        match usize::try_from(p).ok().filter(|&p| p < rank) {
            Some(p) if !seen[p] => seen[p] = true,
            _ => return Err(op.bad(format!("perm {perm:?} is not a permutation of {rank} dimensions"))),
        }
    }
    if perm.len() != rank {
        return Err(op.bad(format!("perm {perm:?} is not a permutation of {rank} dimensions")));
    }
    let perm: Vec<usize> = perm.iter().map(|&p| p as usize).collect();
    let shape = x.shape.clone();
    let out_shape = perm.iter().map(|&p| shape[p]).collect();
    remap(op, x, out_shape, move |idx| {
        let mut src = vec![0usize; idx.len()];
        for (j, &p) in perm.iter().enumerate() {
            src[p] = idx[j];
        }
        ravel(&src, &shape)
    })
}

/// REVERSE_V2: output index `i` reads input index `i` with every listed axis `d`
/// mirrored (`n_d - 1 - i_d`); axes may be negative, a repeated axis counts once.
pub(crate) fn reverse(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let rank = x.shape.len();
    let mut flip = vec![false; rank];
    for a in op.const_ints(1)? {
        let d = if a < 0 { a + rank as i64 } else { a };
        match usize::try_from(d).ok().filter(|&d| d < rank) {
            Some(d) => flip[d] = true,
            None => return Err(op.bad(format!("axis {a} out of range for rank {rank}"))),
        }
    }
    let shape = x.shape.clone();
    remap(op, x, shape.clone(), move |idx| {
        let src: Vec<usize> = idx.iter().enumerate().map(|(d, &i)| if flip[d] { shape[d] - 1 - i } else { i }).collect();
        ravel(&src, &shape)
    })
}

/// REVERSE_SEQUENCE: output element at `idx` reads the input at `idx` with
/// coordinate `k = idx[seq_dim]` replaced by `len - 1 - k` when `k < len`, where
/// `len = seq_lengths[idx[batch_dim]]` (checked against the dimension at run time).
pub(crate) fn reverse_sequence(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::ReverseSequence { seq_dim, batch_dim } = op.op.params else { return Err(op.bad("missing ReverseSequence options")) };
    let (x, l) = (op.input(0)?, op.input(1)?);
    let rank = x.shape.len();
    let dim = |d: i32| usize::try_from(d).ok().filter(|&d| d < rank).ok_or_else(|| op.bad(format!("dimension {d} out of range for rank {rank}")));
    let (seq, batch) = (dim(seq_dim)?, dim(batch_dim)?);
    if seq == batch || l.shape != [x.shape[batch]] {
        return Err(op.bad(format!("seq_dim {seq}, batch_dim {batch} and seq_lengths {:?} do not fit input {:?}", l.shape, x.shape)));
    }
    if !matches!(x.dtype, DType::F32 | DType::U8 | DType::I16 | DType::I32 | DType::I64) {
        return Err(op.unsupported(format!("REVERSE_SEQUENCE of {}", x.dtype.name())));
    }
    let wide = match l.dtype {
        DType::I32 => false,
        DType::I64 => true,
        t => return Err(op.bad(format!("seq_lengths must be int32 or int64, got {}", t.name()))),
    };
    let es = elem_size(op, x.dtype)?;
    let shape = x.shape.clone();
    let n = count(op, &shape, es)?;
    let batches = shape[batch];
    Ok(Built {
        outputs: vec![(x.dtype, shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n * es)?;
            let lengths: Vec<i64> =
                if wide { input::<i64>(ins, 1, batches)?.to_vec() } else { input::<i32>(ins, 1, batches)?.iter().map(|&v| i64::from(v)).collect() };
            let lengths: Vec<usize> = lengths
                .iter()
                .map(|&v| {
                    usize::try_from(v).ok().filter(|&v| v <= shape[seq]).ok_or_else(|| runtime(format!("sequence length {v} outside 0..={}", shape[seq])))
                })
                .collect::<Result<_>>()?;
            let mut index = vec![0usize; shape.len()];
            copy_elements(src, output::<u8>(outs, 0, n * es)?, es, |i| {
                unravel(i, &shape, &mut index);
                let len = lengths[index[batch]];
                if index[seq] < len {
                    index[seq] = len - 1 - index[seq];
                }
                ravel(&index, &shape)
            })
        }),
    })
}

/// PAD / PADV2: paddings [rank, 2] (before, after) of input 1; the fill value is
/// PADV2's input 2, else the zero point of a quantized tensor, else zero.
pub(crate) fn pad(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    same_quantization(op, 0)?;
    let p = op.const_ints(1)?;
    let rank = x.shape.len();
    // The same bound on each padding as the CPU backend, so both reject alike.
    if p.len() != 2 * rank || p.iter().any(|&v| !(0..=1 << 24).contains(&v)) {
        return Err(op.bad(format!("paddings {p:?} invalid for rank {rank}")));
    }
    let before: Vec<usize> = p.iter().step_by(2).map(|&v| v as usize).collect();
    let shape = x.shape.clone();
    let out_shape: Vec<usize> = shape.iter().zip(p.chunks(2)).map(|(&s, c)| s + c[0] as usize + c[1] as usize).collect();
    let es = elem_size(op, x.dtype)?;
    let (n_in, n_out) = (count(op, &shape, es)?, count(op, &out_shape, es)?);
    let has_value = op.opt_input(2).is_some();
    // A zero point as the element's little-endian bytes (two's complement truncation).
    let zero_point = x.quant.and_then(|q| q.zero_point.first().copied()).unwrap_or(0);
    let zp_bytes: Vec<u8> = zero_point.to_le_bytes().iter().copied().chain(std::iter::repeat(if zero_point < 0 { 0xff } else { 0 })).take(es).collect();
    let os = out_shape.clone();
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_in * es)?;
            let value = if has_value { input::<u8>(ins, 2, es)? } else { &zp_bytes[..] };
            let out = output::<u8>(outs, 0, n_out * es)?;
            let mut idx = vec![0usize; os.len()];
            for (i, o) in out.chunks_exact_mut(es).enumerate() {
                unravel(i, &os, &mut idx);
                // Inside the input's box: copy; in the padding: the fill value.
                let mut flat = Some(0usize);
                for d in 0..os.len() {
                    flat = flat.and_then(|f| idx[d].checked_sub(before[d]).filter(|&v| v < shape[d]).map(|v| f * shape[d] + v));
                }
                match flat {
                    Some(f) => o.copy_from_slice(&src[f * es..(f + 1) * es]),
                    None => o.copy_from_slice(value),
                }
            }
            Ok(())
        }),
    })
}

/// GATHER: out[b, o, j, i] = params[b, o, indices[b, j], i] with `b` over the
/// batch_dims leading dimensions (shared), `o` the params dims before the axis,
/// `j` the remaining index dims and `i` the params dims after the axis.
pub(crate) fn gather(op: &OpContext<'_>) -> Result<Built> {
    let (p, ix) = (op.input(0)?, op.input(1)?);
    let OpParams::Gather { axis: a, batch_dims } = op.op.params else { return Err(op.bad("missing Gather options")) };
    same_quantization(op, 0)?;
    let ax = axis(op, i64::from(a), p.shape.len())?;
    let bd = if batch_dims < 0 { i64::from(batch_dims) + ix.shape.len() as i64 } else { i64::from(batch_dims) };
    let bd = usize::try_from(bd).map_err(|_| op.bad(format!("batch_dims {batch_dims} invalid")))?;
    if bd > ax || bd > ix.shape.len() || p.shape[..bd] != ix.shape[..bd] {
        return Err(op.bad(format!("batch_dims {batch_dims} invalid")));
    }
    if !matches!(ix.dtype, DType::I32 | DType::I64) {
        return Err(op.bad("indices must be int32 or int64"));
    }
    let mut out_shape: Vec<usize> = p.shape[..ax].to_vec();
    out_shape.extend_from_slice(&ix.shape[bd..]);
    out_shape.extend_from_slice(&p.shape[ax + 1..]);
    let es = elem_size(op, p.dtype)?;
    let (n_p, n_i, n_out) = (count(op, &p.shape, es)?, count(op, &ix.shape, 8)?, count(op, &out_shape, es)?);
    let outer: usize = p.shape[bd..ax].iter().product();
    let len = p.shape[ax];
    let inner: usize = p.shape[ax + 1..].iter().product();
    let per_batch: usize = ix.shape[bd..].iter().product();
    let wide = ix.dtype == DType::I64;
    Ok(Built {
        outputs: vec![(p.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_p * es)?;
            let indices: Vec<i64> = if wide { input::<i64>(ins, 1, n_i)?.to_vec() } else { input::<i32>(ins, 1, n_i)?.iter().map(|&v| i64::from(v)).collect() };
            if let Some(&bad) = indices.iter().find(|&&v| v < 0 || v as usize >= len) {
                return Err(runtime(format!("gather index {bad} out of range 0..{len}")));
            }
            copy_elements(src, output::<u8>(outs, 0, n_out * es)?, es, |e| {
                let (i, rest) = (e % inner.max(1), e / inner.max(1));
                let (j, rest) = (rest % per_batch.max(1), rest / per_batch.max(1));
                let (o, b) = (rest % outer.max(1), rest / outer.max(1));
                let k = indices[b * per_batch + j] as usize;
                ((b * outer + o) * len + k) * inner + i
            })
        }),
    })
}

/// TILE (input 1: multiples per dimension) and BROADCAST_TO (input 1: target
/// shape, aligned at the last dimension): output element index d reads input
/// index d modulo the input's size there.
pub(crate) fn tile(op: &OpContext<'_>, broadcast_to: bool) -> Result<Built> {
    let x = op.input(0)?;
    let v = op.const_ints(1)?;
    let (shape, out_shape): (Vec<usize>, Vec<usize>) = if broadcast_to {
        if v.len() < x.shape.len() || v.iter().any(|&d| d < 0) {
            return Err(op.bad(format!("cannot broadcast {:?} to {v:?}", x.shape)));
        }
        let mut s = vec![1; v.len() - x.shape.len()];
        s.extend_from_slice(&x.shape);
        for (&a, &b) in s.iter().zip(&v) {
            if a != b as usize && a != 1 {
                return Err(op.bad(format!("cannot broadcast {:?} to {v:?}", x.shape)));
            }
        }
        (s, v.iter().map(|&d| d as usize).collect())
    } else {
        if v.len() != x.shape.len() || v.iter().any(|&d| d < 0) {
            return Err(op.bad(format!("multiples {v:?} invalid for rank {}", x.shape.len())));
        }
        let out = x.shape.iter().zip(&v).map(|(&s, &m)| s.checked_mul(m as usize).ok_or_else(|| op.bad("tiled size overflows"))).collect::<Result<_>>()?;
        (x.shape.clone(), out)
    };
    remap(op, x, out_shape, move |idx| {
        let mut flat = 0;
        for d in 0..idx.len() {
            flat = flat * shape[d] + idx[d] % shape[d].max(1);
        }
        flat
    })
}

/// DEPTH_TO_SPACE: out[n, y, x, c] = in[n, y / b, x / b, ((y % b) * b + x % b) * C' + c]
/// with C' the output depth; SPACE_TO_DEPTH is its inverse.
pub(crate) fn depth_to_space(op: &OpContext<'_>, to_space: bool) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::BlockSize(b) = op.op.params else { return Err(op.bad("missing block size")) };
    let [n, h, w, c] = <[usize; 4]>::try_from(&x.shape[..]).map_err(|_| op.bad("input must be 4-D"))?;
    if b == 0 {
        return Err(op.bad("block size 0"));
    }
    let bb = b.checked_mul(b).ok_or_else(|| op.bad("block size overflows"))?;
    let out_shape = if to_space {
        if c % bb != 0 {
            return Err(op.bad(format!("depth {c} not divisible by block size squared")));
        }
        vec![n, h.checked_mul(b).ok_or_else(|| op.bad("size overflows"))?, w.checked_mul(b).ok_or_else(|| op.bad("size overflows"))?, c / bb]
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(op.bad("spatial dimensions not divisible by the block size"));
        }
        vec![n, h / b, w / b, c.checked_mul(bb).ok_or_else(|| op.bad("size overflows"))?]
    };
    let oc = out_shape[3];
    remap(op, x, out_shape, move |idx| {
        let [bi, y, xo, k] = [idx[0], idx[1], idx[2], idx[3]];
        if to_space {
            ((bi * h + y / b) * w + xo / b) * c + ((y % b) * b + xo % b) * oc + k
        } else {
            // Output channel k = ((dy * b) + dx) * c + ci.
            let (block, ci) = (k / c, k % c);
            ((bi * h + y * b + block / b) * w + xo * b + block % b) * c + ci
        }
    })
}

/// The scale from output to input coordinates of one resized axis.
fn resize_scale(input: usize, output: usize, align_corners: bool) -> f32 {
    if align_corners && output > 1 {
        (input as f32 - 1.0) / (output as f32 - 1.0)
    } else {
        input as f32 / output as f32
    }
}

/// RESIZE_BILINEAR (float32) and RESIZE_NEAREST_NEIGHBOR (any type) of NHWC
/// images to the size in input 1, with LiteRT's coordinate conventions.
pub(crate) fn resize(op: &OpContext<'_>, bilinear: bool) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::Resize { align_corners, half_pixel_centers } = op.op.params else { return Err(op.bad("missing resize options")) };
    if bilinear {
        super::require_f32(op, &[0])?;
    }
    let size = op.const_ints(1)?;
    let [n, h, w, c] = <[usize; 4]>::try_from(&x.shape[..]).map_err(|_| op.bad(format!("resize of {:?}", x.shape)))?;
    if size.len() != 2 || size.iter().any(|&v| v <= 0) {
        return Err(op.bad(format!("resize to {size:?}")));
    }
    let (oh, ow) = (size[0] as usize, size[1] as usize);
    count(op, &[n, oh, ow, c], x.dtype.size().unwrap_or(4))?;
    if h == 0 || w == 0 {
        return Err(op.bad(format!("cannot resize an empty image {:?}", x.shape)));
    }
    let (sy, sx) = (resize_scale(h, oh, align_corners), resize_scale(w, ow, align_corners));
    let out_shape = vec![n, oh, ow, c];
    if !bilinear {
        // Nearest: source = floor((o + offset) * scale) (rounded instead with
        // align_corners), offset 0.5 with half-pixel centers, clamped to the image.
        let nearest = move |o: usize, scale: f32, size: usize| {
            let offset = if half_pixel_centers { 0.5 } else { 0.0 };
            let f = (o as f32 + offset) * scale;
            let i = if align_corners { f.round() } else { f.floor() } as i64;
            i.clamp(0, size as i64 - 1) as usize
        };
        return remap(op, x, out_shape, move |idx| ((idx[0] * h + nearest(idx[1], sy, h)) * w + nearest(idx[2], sx, w)) * c + idx[3]);
    }
    let (n_in, n_out) = (count(op, &x.shape, 4)?, count(op, &out_shape, 4)?);
    // Source coordinate of output position o (half-pixel: of its centre), the two
    // neighbours (lower at least 0, upper at most size - 1), and the fraction.
    let interp = move |o: usize, scale: f32, size: usize| {
        let f = if half_pixel_centers { (o as f32 + 0.5) * scale - 0.5 } else { o as f32 * scale };
        let lo = (f.floor() as i64).clamp(0, size as i64 - 1) as usize;
        let hi = (f.ceil() as i64).clamp(0, size as i64 - 1) as usize;
        (lo, hi, f - lo as f32)
    };
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<f32>(ins, 0, n_in)?;
            let out = output::<f32>(outs, 0, n_out)?;
            let at = |b: usize, y: usize, xx: usize, k: usize| src[((b * h + y) * w + xx) * c + k];
            for b in 0..n {
                for y in 0..oh {
                    let (y0, y1, dy) = interp(y, sy, h);
                    for xo in 0..ow {
                        let (x0, x1, dx) = interp(xo, sx, w);
                        for k in 0..c {
                            let top = at(b, y0, x0, k) * (1.0 - dx) + at(b, y0, x1, k) * dx;
                            let bottom = at(b, y1, x0, k) * (1.0 - dx) + at(b, y1, x1, k) * dx;
                            out[((b * oh + y) * ow + xo) * c + k] = top * (1.0 - dy) + bottom * dy;
                        }
                    }
                }
            }
            Ok(())
        }),
    })
}

/// SHAPE: the input's dimensions as int32 (or int64 when the options ask).
pub(crate) fn shape(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let wide = matches!(op.op.params, OpParams::OutType(4));
    let dims: Vec<i64> = x.shape.iter().map(|&d| d as i64).collect();
    let n = dims.len();
    Ok(Built {
        outputs: vec![(if wide { DType::I64 } else { DType::I32 }, vec![n])],
        kernel: Box::new(move |_, outs| {
            if wide {
                output::<i64>(outs, 0, n)?.copy_from_slice(&dims);
            } else {
                for (o, &d) in output::<i32>(outs, 0, n)?.iter_mut().zip(&dims) {
                    *o = d as i32;
                }
            }
            Ok(())
        }),
    })
}

/// RANK: the input's number of dimensions, an int32 scalar.
pub(crate) fn rank(op: &OpContext<'_>) -> Result<Built> {
    let rank = i32::try_from(op.input(0)?.shape.len()).map_err(|_| op.bad("rank beyond int32"))?;
    Ok(Built {
        outputs: vec![(DType::I32, vec![])],
        kernel: Box::new(move |_, outs| {
            output::<i32>(outs, 0, 1)?[0] = rank;
            Ok(())
        }),
    })
}

/// FILL: a tensor of the dims in input 0, every element input 1's value.
pub(crate) fn fill(op: &OpContext<'_>) -> Result<Built> {
    let dims = op.const_ints(0)?;
    let dims: Vec<usize> = dims.iter().map(|&d| usize::try_from(d).map_err(|_| op.bad(format!("negative dims {dims:?}")))).collect::<Result<_>>()?;
    let v = op.input(1)?;
    let es = elem_size(op, v.dtype)?;
    let n = count(op, &dims, es)?;
    Ok(Built {
        outputs: vec![(v.dtype, dims)],
        kernel: Box::new(move |ins, outs| {
            let value = arg(ins, 1)?.get(..es).ok_or_else(|| runtime("FILL value is empty"))?;
            for o in output::<u8>(outs, 0, n * es)?.chunks_exact_mut(es) {
                o.copy_from_slice(value);
            }
            Ok(())
        }),
    })
}

/// ZEROS_LIKE: zeros of the input's type and shape.
pub(crate) fn zeros_like(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let es = elem_size(op, x.dtype)?;
    let n = count(op, &x.shape, es)?;
    Ok(Built {
        outputs: vec![(x.dtype, x.shape.clone())],
        kernel: Box::new(move |_, outs| {
            output::<u8>(outs, 0, n * es)?.fill(0);
            Ok(())
        }),
    })
}

/// A value read for CAST: integers exactly, floats as f64.
#[derive(Clone, Copy)]
enum Scalar {
    Int(i128),
    Float(f64),
}

/// Element `i` of `b`, of type `dtype`.
fn read_scalar(dtype: DType, b: &[u8], i: usize) -> Option<Scalar> {
    let es = dtype.size()?;
    let v = b.get(i * es..(i + 1) * es)?;
    let mut a8 = [0u8; 8];
    a8[..es.min(8)].copy_from_slice(&v[..es.min(8)]);
    Some(match dtype {
        DType::F32 => Scalar::Float(f64::from(f32::from_le_bytes([v[0], v[1], v[2], v[3]]))),
        DType::F64 => Scalar::Float(f64::from_le_bytes(a8)),
        DType::F16 => Scalar::Float(f64::from(half::f16::from_le_bytes([v[0], v[1]]).to_f32())),
        DType::I8 => Scalar::Int(i128::from(v[0] as i8)),
        DType::U8 => Scalar::Int(i128::from(v[0])),
        DType::Bool => Scalar::Int(i128::from(v[0] != 0)),
        DType::I16 => Scalar::Int(i128::from(i16::from_le_bytes([v[0], v[1]]))),
        DType::U16 => Scalar::Int(i128::from(u16::from_le_bytes([v[0], v[1]]))),
        DType::I32 => Scalar::Int(i128::from(i32::from_le_bytes([v[0], v[1], v[2], v[3]]))),
        DType::U32 => Scalar::Int(i128::from(u32::from_le_bytes([v[0], v[1], v[2], v[3]]))),
        DType::I64 => Scalar::Int(i128::from(i64::from_le_bytes(a8))),
        _ => return None,
    })
}

/// CAST between the numeric types and bool. Integers narrow by keeping the low
/// bits (two's complement, as a C cast does); floats convert to integers by
/// truncation toward zero, saturating at the type's range; anything to bool is
/// "not zero".
pub(crate) fn cast(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let from = x.dtype;
    let to = op.outputs.first().ok_or_else(|| op.bad("no output"))?.dtype;
    let numeric = |t: DType| {
        matches!(t, DType::F32 | DType::F64 | DType::F16 | DType::I8 | DType::U8 | DType::Bool | DType::I16 | DType::U16 | DType::I32 | DType::U32 | DType::I64)
    };
    if !numeric(from) || !numeric(to) {
        return Err(op.unsupported(format!("CAST from {} to {}", from.name(), to.name())));
    }
    let (es_in, es_out) = (elem_size(op, from)?, elem_size(op, to)?);
    let n = count(op, &x.shape, es_in.max(es_out))?;
    Ok(Built {
        outputs: vec![(to, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n * es_in)?;
            let out = output::<u8>(outs, 0, n * es_out)?;
            for (i, o) in out.chunks_exact_mut(es_out).enumerate() {
                let v = read_scalar(from, src, i).ok_or_else(|| runtime("CAST input too short"))?;
                // As an integer: exact, or the float truncated toward zero and saturated.
                let int = match v {
                    Scalar::Int(i) => i,
                    Scalar::Float(f) => f as i128,
                };
                let float = match v {
                    Scalar::Int(i) => i as f64,
                    Scalar::Float(f) => f,
                };
                let saturate = |lo: i128, hi: i128| match v {
                    Scalar::Float(_) => int.clamp(lo, hi),
                    Scalar::Int(_) => int,
                };
                match to {
                    // Integers round to float32 once (not through f64 first).
                    DType::F32 => o.copy_from_slice(
                        &match v {
                            Scalar::Int(i) => i as f32,
                            Scalar::Float(f) => f as f32,
                        }
                        .to_le_bytes(),
                    ),
                    DType::F64 => o.copy_from_slice(&float.to_le_bytes()),
                    DType::F16 => o.copy_from_slice(&half::f16::from_f64(float).to_le_bytes()),
                    DType::Bool => o[0] = u8::from(float != 0.0),
                    DType::I8 => o[0] = saturate(i128::from(i8::MIN), i128::from(i8::MAX)) as i8 as u8,
                    DType::U8 => o[0] = saturate(0, i128::from(u8::MAX)) as u8,
                    DType::I16 => o.copy_from_slice(&(saturate(i128::from(i16::MIN), i128::from(i16::MAX)) as i16).to_le_bytes()),
                    DType::U16 => o.copy_from_slice(&(saturate(0, i128::from(u16::MAX)) as u16).to_le_bytes()),
                    DType::I32 => o.copy_from_slice(&(saturate(i128::from(i32::MIN), i128::from(i32::MAX)) as i32).to_le_bytes()),
                    DType::U32 => o.copy_from_slice(&(saturate(0, i128::from(u32::MAX)) as u32).to_le_bytes()),
                    _ => o.copy_from_slice(&(saturate(i128::from(i64::MIN), i128::from(i64::MAX)) as i64).to_le_bytes()),
                }
            }
            Ok(())
        }),
    })
}

/// DEQUANTIZE of float16 to float32 (integer dequantization is the quantized half's).
pub(crate) fn dequantize_f16(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    if x.dtype != DType::F16 {
        return Err(op.unsupported(format!("DEQUANTIZE of {}", x.dtype.name())));
    }
    let n = count(op, &x.shape, 4)?;
    Ok(Built {
        outputs: vec![(DType::F32, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n * 2)?;
            for (o, h) in output::<f32>(outs, 0, n)?.iter_mut().zip(src.chunks_exact(2)) {
                *o = half::f16::from_le_bytes([h[0], h[1]]).to_f32();
            }
            Ok(())
        }),
    })
}

/// Expands a sparse constant (TACO-style levels: dense, or CSR segments and
/// indices) into `dst`, its dense row-major form. Levels are visited in the
/// file's traversal order; the values are stored in the order their leaves are
/// reached. Level `l < rank` indexes original dimension `traversal_order[l]`;
/// a block level (value rank + b) indexes within block b of original dimension
/// `block_map[b]`, whose size is that level's dense size.
fn densify_into(shape: &[usize], es: usize, sp: &crate::model::Sparsity, src: &[u8], dst: &mut [u8]) -> std::result::Result<(), String> {
    use crate::model::SparseDim;
    let rank = shape.len();
    let levels = sp.traversal_order.len();
    let is_perm = |v: &[usize], base: usize| {
        let mut seen = vec![false; v.len()];
        v.iter().all(|&t| t.checked_sub(base).filter(|&i| i < seen.len()).is_some_and(|i| !std::mem::replace(&mut seen[i], true)))
    };
    if levels < rank
        || sp.dims.len() != levels
        || sp.block_map.len() != levels - rank
        || !is_perm(&sp.traversal_order[..rank], 0)
        || !is_perm(&sp.traversal_order[rank..], rank)
        || sp.block_map.iter().any(|&d| d >= rank)
    {
        return Err("traversal order, block map and level metadata do not fit the tensor's rank".into());
    }
    // Block b's size: the dense size of the level that traverses it.
    let mut block_size = vec![0usize; levels - rank];
    for (level, &t) in sp.traversal_order.iter().enumerate().skip(rank) {
        match sp.dims[level] {
            SparseDim::Dense(size) => block_size[t - rank] = size,
            _ => return Err("a block level must be dense".into()),
        }
    }
    struct Walk<'a> {
        shape: &'a [usize],
        sp: &'a crate::model::Sparsity,
        block_size: &'a [usize],
        es: usize,
        src: &'a [u8],
    }
    /// Visits the children of position `pos` at `level`; `index[l]` holds the
    /// coordinate chosen at each level above.
    fn visit(
        w: &Walk<'_>,
        level: usize,
        pos: usize,
        index: &mut [usize],
        next: &mut usize,
        budget: &mut usize,
        dst: &mut [u8],
    ) -> std::result::Result<(), String> {
        // Bounds the work a hostile description can ask for (each call is a node).
        *budget = budget.checked_sub(1).ok_or("sparse description requires too much work")?;
        let rank = w.shape.len();
        if level == index.len() {
            let mut coord = vec![0usize; rank];
            for l in 0..rank {
                coord[w.sp.traversal_order[l]] = index[l];
            }
            for (&t, &i) in w.sp.traversal_order[rank..].iter().zip(&index[rank..]) {
                let b = t - rank;
                let d = w.sp.block_map[b];
                coord[d] = coord[d].checked_mul(w.block_size[b]).and_then(|v| v.checked_add(i)).ok_or("sparse index overflows")?;
            }
            let mut flat = 0usize;
            for (d, (&c, &size)) in coord.iter().zip(w.shape).enumerate() {
                if c >= size {
                    return Err(format!("sparse index {c} outside dimension {d} of size {size}"));
                }
                flat = flat * size + c;
            }
            let v = w.src.get(*next * w.es..(*next + 1) * w.es).ok_or("sparse values are too few")?;
            dst.get_mut(flat * w.es..(flat + 1) * w.es).ok_or("dense buffer too short")?.copy_from_slice(v);
            *next += 1;
            return Ok(());
        }
        match &w.sp.dims[level] {
            crate::model::SparseDim::Dense(size) => {
                for i in 0..*size {
                    index[level] = i;
                    let child = pos.checked_mul(*size).and_then(|p| p.checked_add(i)).ok_or("sparse position overflows")?;
                    visit(w, level + 1, child, index, next, budget, dst)?;
                }
            }
            crate::model::SparseDim::Csr { segments, indices } => {
                let (from, to) = (segments.get(pos), pos.checked_add(1).and_then(|p| segments.get(p)));
                let (Some(from), Some(to)) = (from, to) else { return Err("sparse segment out of range".into()) };
                if from > to || to > indices.len() {
                    return Err("sparse segments are unordered or exceed the indices".into());
                }
                for k in from..to {
                    index[level] = indices.get(k).ok_or("sparse index out of range")?;
                    visit(w, level + 1, k, index, next, budget, dst)?;
                }
            }
        }
        Ok(())
    }
    let numel: usize = shape.iter().product();
    let mut budget = numel.saturating_mul(levels + 1).saturating_add(1 << 16);
    let w = Walk { shape, sp, block_size: &block_size, es, src };
    dst.fill(0);
    visit(&w, 0, 0, &mut vec![0; levels], &mut 0, &mut budget, dst)
}

/// DENSIFY: the dense form of a sparse constant (zeros where nothing is stored).
pub(crate) fn densify(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let sp = x.sparsity.ok_or_else(|| op.bad("DENSIFY input is not sparse"))?.clone();
    let src = x.value.ok_or_else(|| op.unsupported("DENSIFY of a tensor computed at run time"))?.to_vec();
    same_quantization(op, 0)?;
    let es = elem_size(op, x.dtype)?;
    let shape = x.shape.clone();
    let n = count(op, &shape, es)?;
    let at = op.at();
    Ok(Built {
        outputs: vec![(x.dtype, x.shape.clone())],
        kernel: Box::new(move |_, outs| {
            densify_into(&shape, es, &sp, &src, output::<u8>(outs, 0, n * es)?).map_err(|m| crate::error::Error::InvalidModel(format!("{at}: {m}").into()))
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::float_test_util::*;
    use crate::model::{DType, Quantization};
    use crate::ops::{Activation, OpParams};
    use ferrite_format::ops::BuiltinOp as B;

    fn seq(n: usize) -> Vec<f32> {
        (0..n).map(|v| v as f32).collect()
    }

    /// REVERSE_SEQUENCE and RANK on both backends; a length past the dimension is
    /// an error on both.
    #[test]
    fn reverse_sequence_and_rank_match_cpu() {
        let mut r = Rng::new(0x2e5e);
        for case in 0..100 {
            let rank = r.range(2, 4);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 5)).collect();
            let seq = r.below(rank);
            let batch = (seq + r.range(1, rank - 1)) % rank;
            let n = shape.iter().product();
            let lengths: Vec<i32> = (0..shape[batch]).map(|_| r.below(shape[seq] + 1) as i32).collect();
            let params = OpParams::ReverseSequence { seq_dim: seq as i32, batch_dim: batch as i32 };
            let x = r.floats(n);
            let t = TestOp::new(B::REVERSE_SEQUENCE, params.clone(), vec![f32_input(&shape, &x), i32_const(&[shape[batch]], &lengths)], 1);
            t.compare_with_cpu(0.0, &format!("case {case}"));
            let mut bad = lengths.clone();
            bad[0] = shape[seq] as i32 + 1;
            let t = TestOp::new(B::REVERSE_SEQUENCE, params, vec![f32_input(&shape, &x), i32_const(&[shape[batch]], &bad)], 1);
            assert!(t.reference().is_err() && t.cpu().is_err(), "case {case}: a length past the dimension");
            let t = TestOp::typed(B::RANK, OpParams::None, vec![f32_input(&shape, &x)], vec![DType::I32]);
            t.compare_with_cpu(0.0, "rank");
            assert_eq!(t.reference().unwrap()[0].2, (rank as i32).to_le_bytes());
        }
        // seq_dim equal to batch_dim is a model error.
        let t = TestOp::new(
            B::REVERSE_SEQUENCE,
            OpParams::ReverseSequence { seq_dim: 1, batch_dim: 1 },
            vec![f32_input(&[2, 2], &[0.0; 4]), i32_const(&[2], &[1, 1])],
            1,
        );
        assert!(t.reference().is_err() && t.cpu().is_err());
    }

    #[test]
    fn hand_computed_movement() {
        // Transpose of a 2x3 matrix.
        let t = TestOp::new(B::TRANSPOSE, OpParams::None, vec![f32_input(&[2, 3], &seq(6)), i32_const(&[2], &[1, 0])], 1);
        assert_eq!(t.reference_f32(), (vec![3, 2], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]));
        // PADV2 with a value, one row before and one column after.
        let t = TestOp::new(B::PADV2, OpParams::None, vec![f32_input(&[1, 2], &[1.0, 2.0]), i32_const(&[2, 2], &[1, 0, 0, 1]), f32_input(&[], &[9.0])], 1);
        assert_eq!(t.reference_f32(), (vec![2, 3], vec![9.0, 9.0, 9.0, 1.0, 2.0, 9.0]));
        // Strided slice backwards with stride -2 and a shrunk leading axis.
        let params = OpParams::StridedSlice { begin_mask: 0, end_mask: 2, ellipsis_mask: 0, new_axis_mask: 0, shrink_axis_mask: 1, offset: false };
        let t = TestOp::new(
            B::STRIDED_SLICE,
            params,
            vec![f32_input(&[2, 5], &seq(10)), i32_const(&[2], &[1, -1]), i32_const(&[2], &[2, 0]), i32_const(&[2], &[1, -2])],
            1,
        );
        assert_eq!(t.reference_f32(), (vec![3], vec![9.0, 7.0, 5.0]));
        // Gather along axis 1 with batch_dims 1: row b picks its own columns.
        let idx = raw_input(DType::I32, &[2, 2], bytemuck::cast_slice(&[2i32, 0, 1, 1]).to_vec());
        let t = TestOp::new(B::GATHER, OpParams::Gather { axis: 1, batch_dims: 1 }, vec![f32_input(&[2, 3], &seq(6)), idx], 1);
        assert_eq!(t.reference_f32(), (vec![2, 2], vec![2.0, 0.0, 4.0, 4.0]));
        // An out-of-range index is a run-time error.
        let idx = raw_input(DType::I32, &[1], bytemuck::cast_slice(&[3i32]).to_vec());
        let t = TestOp::new(B::GATHER, OpParams::Gather { axis: 0, batch_dims: 0 }, vec![f32_input(&[3], &seq(3)), idx], 1);
        assert!(t.reference().is_err());
        // Depth to space of one pixel with 4 channels.
        let t = TestOp::new(B::DEPTH_TO_SPACE, OpParams::BlockSize(2), vec![f32_input(&[1, 1, 1, 4], &seq(4))], 1);
        assert_eq!(t.reference_f32(), (vec![1, 2, 2, 1], seq(4)));
        // Bilinear 2 -> 4 with half-pixel centres: [0, 1] becomes [0, .25, .75, 1].
        let t = TestOp::new(
            B::RESIZE_BILINEAR,
            OpParams::Resize { align_corners: false, half_pixel_centers: true },
            vec![f32_input(&[1, 1, 2, 1], &[0.0, 1.0]), i32_const(&[2], &[1, 4])],
            1,
        );
        assert_eq!(t.reference_f32().1, vec![0.0, 0.25, 0.75, 1.0]);
        // Concatenation with a fused RELU.
        let t = TestOp::new(
            B::CONCATENATION,
            OpParams::Concatenation { axis: -1, activation: Activation::Relu },
            vec![f32_input(&[2, 1], &[-1.0, 2.0]), f32_input(&[2, 2], &[3.0, -4.0, 5.0, 6.0])],
            1,
        );
        assert_eq!(t.reference_f32(), (vec![2, 3], vec![0.0, 3.0, 0.0, 2.0, 5.0, 6.0]));
        // CAST narrows integers by keeping the low bits, as a C cast does.
        let t = TestOp::typed(B::CAST, OpParams::None, vec![raw_input(DType::I32, &[2], bytemuck::cast_slice(&[300i32, -1]).to_vec())], vec![DType::U8]);
        assert_eq!(t.reference().unwrap()[0].2, vec![44, 255]);
    }

    #[test]
    fn densify_csr_and_blocks() {
        use crate::model::{SparseDim, SparseIndices, Sparsity};
        // A 3x4 matrix, rows dense, columns CSR: row 0 has (0, 1.0), row 2 has (1, 2.0), (3, 3.0).
        let csr = Sparsity {
            traversal_order: vec![0, 1],
            block_map: vec![],
            dims: vec![
                SparseDim::Dense(3),
                SparseDim::Csr { segments: SparseIndices::from_values(&[0, 1, 1, 3]), indices: SparseIndices::from_values(&[0, 1, 3]) },
            ],
        };
        // The same matrix as 1x2 blocks: block columns CSR (row 0: block 0; row 2:
        // blocks 0 and 1), then a dense level within each block.
        let blocked = Sparsity {
            traversal_order: vec![0, 1, 2],
            block_map: vec![1],
            dims: vec![
                SparseDim::Dense(3),
                SparseDim::Csr { segments: SparseIndices::from_values(&[0, 1, 1, 3]), indices: SparseIndices::from_values(&[0, 0, 1]) },
                SparseDim::Dense(2),
            ],
        };
        let want = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 3.0];
        for (sp, values) in [(csr, vec![1.0f32, 2.0, 3.0]), (blocked, vec![1.0, 0.0, 0.0, 2.0, 0.0, 3.0])] {
            let mut x = f32_const(&[3, 4], &values);
            if let Some(x) = x.as_mut() {
                x.shape = vec![3, 4];
            }
            let t = TestOp::new(B::DENSIFY, OpParams::None, vec![x], 1);
            let ctx = t.context(None);
            let ctx = crate::backend::OpContext {
                inputs: ctx.inputs.into_iter().map(|d| d.map(|d| crate::backend::InputDesc { sparsity: Some(&sp), ..d })).collect(),
                ..ctx
            };
            let mut built = super::densify(&ctx).unwrap();
            let mut out = vec![0u8; 48];
            (built.kernel)(&[], &mut [&mut out[..]]).unwrap();
            assert_eq!(f32s(&out), want);
            let mut cpu = crate::backend::Backend::build(&crate::backend::cpu::CpuBackend, &ctx, &mut crate::backend::BackendContext::new(1)).unwrap();
            let mut out_cpu = vec![0u8; 48];
            (cpu.kernel)(&[], &mut [&mut out_cpu[..]]).unwrap();
            assert_eq!(out, out_cpu);
        }
        // A CSR index past the dimension is a model error, not a panic.
        let bad = Sparsity {
            traversal_order: vec![0, 1],
            block_map: vec![],
            dims: vec![SparseDim::Dense(1), SparseDim::Csr { segments: SparseIndices::from_values(&[0, 1]), indices: SparseIndices::from_values(&[9]) }],
        };
        let mut dst = vec![0u8; 16];
        assert!(super::densify_into(&[1, 4], 4, &bad, &[0; 4], &mut dst).is_err());
    }

    fn int8_quant(scale: f32, zero_point: i64) -> Option<Quantization> {
        Some(Quantization { scale: vec![scale], zero_point: vec![zero_point], axis: 0 })
    }

    #[test]
    fn quantized_movement_needs_matching_quantization() {
        let mut x = raw_input(DType::I8, &[1, 2], vec![1, 2]);
        if let Some(x) = x.as_mut() {
            x.quant = int8_quant(0.5, -3);
        }
        let mut t = TestOp::typed(B::PAD, OpParams::None, vec![x, i32_const(&[2, 2], &[0, 0, 1, 1])], vec![DType::I8]);
        t.outputs[0].quant = int8_quant(0.5, -3);
        // Padded with the zero point -3.
        assert_eq!(t.reference().unwrap()[0].2, vec![(-3i8) as u8, 1, 2, (-3i8) as u8]);
        t.outputs[0].quant = int8_quant(0.25, -3);
        assert!(matches!(t.reference(), Err(crate::error::Error::Unsupported(_))));
        // Concatenation: every input must share the output's parameters.
        let q = |v: Vec<u8>, scale: f32| {
            let mut x = raw_input(DType::I8, &[v.len()], v);
            if let Some(x) = x.as_mut() {
                x.quant = int8_quant(scale, 0);
            }
            x
        };
        let mut t = TestOp::typed(
            B::CONCATENATION,
            OpParams::Concatenation { axis: 0, activation: Activation::None },
            vec![q(vec![1, 2], 0.5), q(vec![3], 0.5)],
            vec![DType::I8],
        );
        t.outputs[0].quant = int8_quant(0.5, 0);
        assert_eq!(t.reference().unwrap()[0].2, vec![1, 2, 3]);
        t.inputs[1] = q(vec![3], 0.125);
        let r = t.reference();
        // The quantized half refuses it as LiteRT does (an invalid model for int8).
        assert!(matches!(r, Err(crate::error::Error::Unsupported(_) | crate::error::Error::InvalidModel(_))), "{r:?}");
        // Through the backend's dispatch (quantized half first, then these kernels).
        let mut t = TestOp::typed(B::TRANSPOSE, OpParams::None, vec![q(vec![1, 2, 3, 4], 0.5), i32_const(&[1], &[0])], vec![DType::I8]);
        t.outputs[0].quant = int8_quant(0.5, 0);
        assert_eq!(t.reference().unwrap()[0].2, vec![1, 2, 3, 4]);
    }

    /// Random data of `n` elements of a random element size, with its dtype.
    fn random_data(r: &mut Rng, n: usize) -> (DType, Vec<u8>) {
        let dtype = [DType::F32, DType::I8, DType::I16, DType::I64, DType::Bool][r.below(5)];
        let size = dtype.size().unwrap_or(1);
        let bytes = (0..n * size).map(|_| if dtype == DType::Bool { (r.next() & 1) as u8 } else { r.next() as u8 }).collect();
        (dtype, bytes)
    }

    fn random_shape(r: &mut Rng, rank: usize, max: usize) -> Vec<usize> {
        (0..rank).map(|_| r.range(1, max)).collect()
    }

    /// Both backends succeed with equal outputs.
    fn same(t: &TestOp, what: &str) {
        t.compare_with_cpu(0.0, what);
    }

    /// Both backends agree: equal outputs (true), or both refuse (false).
    fn agree(t: &TestOp, what: &str) -> bool {
        match (t.reference(), t.cpu()) {
            (Ok(_), Ok(_)) => {
                t.compare_with_cpu(0.0, what);
                true
            }
            (Err(_), Err(_)) => false,
            (a, b) => panic!("{what}: reference {:?} but cpu {:?}", a.map(|_| ()), b.map(|_| ())),
        }
    }

    #[test]
    fn random_movement_matches_cpu() {
        let mut r = Rng::new(0x0dd_ba11);
        let mut strided_ran = 0;
        for case in 0..200 {
            let rank = r.range(1, 4);
            let shape = random_shape(&mut r, rank, 4);
            let n: usize = shape.iter().product();
            let (dtype, data) = random_data(&mut r, n);
            let x = || raw_input(dtype, &shape, data.clone());
            let ty = vec![dtype];
            // Transpose by a random permutation.
            let mut perm: Vec<i32> = (0..rank as i32).collect();
            for i in (1..rank).rev() {
                perm.swap(i, r.below(i + 1));
            }
            same(&TestOp::typed(B::TRANSPOSE, OpParams::None, vec![x(), i32_const(&[rank], &perm)], ty.clone()), "transpose");
            // Pad, tile, slice.
            let pads: Vec<i32> = (0..2 * rank).map(|_| r.below(3) as i32).collect();
            same(&TestOp::typed(B::PAD, OpParams::None, vec![x(), i32_const(&[rank, 2], &pads)], ty.clone()), "pad");
            let (_, value) = random_data(&mut r, 1);
            let value = value.into_iter().cycle().take(dtype.size().unwrap_or(1)).collect();
            let t = TestOp::typed(B::PADV2, OpParams::None, vec![x(), i32_const(&[rank, 2], &pads), raw_input(dtype, &[], value)], ty.clone());
            same(&t, "padv2");
            if rank == 4 {
                let params = OpParams::Resize { align_corners: r.coin(), half_pixel_centers: false };
                let t =
                    TestOp::typed(B::RESIZE_NEAREST_NEIGHBOR, params, vec![x(), i32_const(&[2], &[r.range(1, 7) as i32, r.range(1, 7) as i32])], ty.clone());
                same(&t, "resize nearest");
            }
            let mult: Vec<i32> = (0..rank).map(|_| r.range(1, 3) as i32).collect();
            same(&TestOp::typed(B::TILE, OpParams::None, vec![x(), i32_const(&[rank], &mult)], ty.clone()), "tile");
            let target: Vec<i32> =
                [r.range(1, 3) as i32].into_iter().chain(shape.iter().map(|&d| if d == 1 { r.range(1, 3) as i32 } else { d as i32 })).collect();
            same(&TestOp::typed(B::BROADCAST_TO, OpParams::None, vec![x(), i32_const(&[rank + 1], &target)], ty.clone()), "broadcast_to");
            let begin: Vec<i32> = shape.iter().map(|&d| r.below(d) as i32).collect();
            let size: Vec<i32> = shape.iter().zip(&begin).map(|(&d, &b)| if r.coin() { -1 } else { r.range(0, d - b as usize) as i32 }).collect();
            same(&TestOp::typed(B::SLICE, OpParams::None, vec![x(), i32_const(&[rank], &begin), i32_const(&[rank], &size)], ty.clone()), "slice");
            // Strided slice with random masks, positions and strides.
            let m = r.range(1, rank + 1);
            let mask = |r: &mut Rng| (r.next() as i32) & ((1 << m) - 1);
            let ellipsis = if r.below(4) == 0 { 1 << r.below(m) } else { 0 };
            let params = OpParams::StridedSlice {
                begin_mask: mask(&mut r),
                end_mask: mask(&mut r),
                ellipsis_mask: ellipsis,
                new_axis_mask: if r.below(3) == 0 { mask(&mut r) } else { 0 },
                shrink_axis_mask: if r.below(3) == 0 { mask(&mut r) } else { 0 },
                offset: r.below(4) == 0,
            };
            let pos = |r: &mut Rng| r.below(13) as i32 - 6;
            let (b, e): (Vec<i32>, Vec<i32>) = (0..m).map(|_| (pos(&mut r), pos(&mut r))).unzip();
            let s: Vec<i32> = (0..m).map(|_| [1, 2, 3, -1, -2][r.below(5)]).collect();
            let t = TestOp::typed(B::STRIDED_SLICE, params.clone(), vec![x(), i32_const(&[m], &b), i32_const(&[m], &e), i32_const(&[m], &s)], ty.clone());
            strided_ran += usize::from(agree(&t, &format!("strided slice {case} {shape:?} {params:?} {b:?} {e:?} {s:?}")));
            // Gather with batch dims.
            let ax = r.below(rank);
            let bd = r.below(ax + 1);
            let mut ishape = shape[..bd].to_vec();
            let extra = r.below(3);
            ishape.extend(random_shape(&mut r, extra, 3));
            let idx: Vec<i64> = (0..ishape.iter().product()).map(|_| r.below(shape[ax]) as i64).collect();
            // int32 or int64 indices.
            let indices = if r.coin() {
                raw_input(DType::I64, &ishape, bytemuck::cast_slice(&idx).to_vec())
            } else {
                raw_input(DType::I32, &ishape, idx.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect())
            };
            let t = TestOp::typed(B::GATHER, OpParams::Gather { axis: ax as i32, batch_dims: bd as i32 }, vec![x(), indices], ty.clone());
            same(&t, "gather");
            // Concatenation / pack of two, split / split_v / unpack.
            let ax = r.below(rank);
            let mut other = shape.clone();
            other[ax] = r.range(1, 3);
            let (_, data2) = random_data(&mut r, other.iter().product::<usize>() * dtype.size().unwrap_or(1) / dtype.size().unwrap_or(1));
            let data2 = data2.into_iter().cycle().take(other.iter().product::<usize>() * dtype.size().unwrap_or(1)).collect();
            let t = TestOp::typed(
                B::CONCATENATION,
                OpParams::Concatenation { axis: ax as i32 - if r.coin() { rank as i32 } else { 0 }, activation: Activation::None },
                vec![x(), raw_input(dtype, &other, data2)],
                ty.clone(),
            );
            same(&t, "concatenation");
            let pack_axis = r.below(rank + 1) as i32;
            same(&TestOp::typed(B::PACK, OpParams::Pack { values_count: 2, axis: pack_axis }, vec![x(), x()], ty.clone()), "pack");
            same(&TestOp::typed(B::UNPACK, OpParams::Unpack { num: shape[ax] as i32, axis: ax as i32 }, vec![x()], vec![dtype; shape[ax]]), "unpack");
            let pieces = if shape[ax].is_multiple_of(2) { 2 } else { 1 };
            same(&TestOp::typed(B::SPLIT, OpParams::Split { num_splits: pieces }, vec![i32_const(&[], &[ax as i32]), x()], vec![dtype; pieces]), "split");
            let first = r.below(shape[ax] + 1) as i32;
            let t = TestOp::typed(
                B::SPLIT_V,
                OpParams::Split { num_splits: 2 },
                vec![x(), i32_const(&[2], &[first, -1]), i32_const(&[], &[ax as i32])],
                vec![dtype; 2],
            );
            same(&t, "split_v");
            // Reshape / squeeze / expand_dims, shape, zeros_like.
            same(&TestOp::typed(B::RESHAPE, OpParams::Reshape { new_shape: None }, vec![x(), i32_const(&[2], &[-1, shape[0] as i32])], ty.clone()), "reshape");
            same(&TestOp::typed(B::SQUEEZE, OpParams::Squeeze { dims: vec![] }, vec![x()], ty.clone()), "squeeze");
            same(&TestOp::typed(B::EXPAND_DIMS, OpParams::None, vec![x(), i32_const(&[], &[-1])], ty.clone()), "expand_dims");
            same(&TestOp::typed(B::SHAPE, OpParams::OutType(2), vec![x()], vec![DType::I32]), "shape");
            same(&TestOp::typed(B::ZEROS_LIKE, OpParams::None, vec![x()], ty.clone()), "zeros_like");
        }
        // Most random specs are valid; the rest must be refused by both.
        assert!(strided_ran > 120, "only {strided_ran} of 200 strided slices were valid");
    }

    #[test]
    fn random_images_match_cpu() {
        let mut r = Rng::new(0x1a6e_5eed);
        let mut worst = 0.0f64;
        for case in 0..120 {
            let (n, h, w, c) = (r.range(1, 2), r.range(1, 5), r.range(1, 5), r.range(1, 3));
            let x = r.floats(n * h * w * c);
            let (oh, ow) = (r.range(1, 9) as i32, r.range(1, 9) as i32);
            let align_corners = r.coin();
            // LiteRT rejects align_corners together with half-pixel centres.
            let half_pixel_centers = !align_corners && r.coin();
            let params = OpParams::Resize { align_corners, half_pixel_centers };
            let code = if case % 2 == 0 { B::RESIZE_BILINEAR } else { B::RESIZE_NEAREST_NEIGHBOR };
            let t = TestOp::new(code, params.clone(), vec![f32_input(&[n, h, w, c], &x), i32_const(&[2], &[oh, ow])], 1);
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("{code:?} {params:?} {h}x{w} -> {oh}x{ow}")));
            let b = r.range(1, 2);
            let t = TestOp::new(B::SPACE_TO_DEPTH, OpParams::BlockSize(b), vec![f32_input(&[n, h * b, w * b, c], &r.floats(n * h * w * c * b * b))], 1);
            t.compare_with_cpu(0.0, "space_to_depth");
            let t = TestOp::new(B::DEPTH_TO_SPACE, OpParams::BlockSize(b), vec![f32_input(&[n, h, w, c * b * b], &r.floats(n * h * w * c * b * b))], 1);
            t.compare_with_cpu(0.0, "depth_to_space");
        }
        eprintln!("random resizes: worst relative error {worst:e}");
    }

    #[test]
    fn conversions_match_cpu() {
        let mut r = Rng::new(0xca57);
        // Values every type holds exactly, so saturating and wrapping casts agree.
        let v: Vec<f32> = (0..64).map(|_| (r.unit() * 100.0).trunc()).map(|v| if v < 0.0 { -v } else { v }).collect();
        let types = [DType::F32, DType::I32, DType::I64, DType::I16, DType::U8, DType::I8, DType::Bool, DType::F16];
        for &from in &types {
            let bytes: Vec<u8> = match from {
                DType::F32 => bytemuck::cast_slice(&v).to_vec(),
                DType::I32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
                DType::I64 => v.iter().flat_map(|&x| (x as i64).to_le_bytes()).collect(),
                DType::I16 => v.iter().flat_map(|&x| (x as i16).to_le_bytes()).collect(),
                DType::U8 | DType::I8 => v.iter().map(|&x| x as u8).collect(),
                DType::Bool => v.iter().map(|&x| u8::from(x != 0.0)).collect(),
                _ => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
            };
            for &to in &types {
                let t = TestOp::typed(B::CAST, OpParams::None, vec![raw_input(from, &[v.len()], bytes.clone())], vec![to]);
                t.compare_with_cpu(0.0, &format!("cast {from:?} -> {to:?}"));
            }
            if from == DType::F16 {
                let t = TestOp::new(B::DEQUANTIZE, OpParams::None, vec![raw_input(from, &[v.len()], bytes.clone())], 1);
                t.compare_with_cpu(0.0, "dequantize f16");
            }
        }
        let t = TestOp::typed(B::FILL, OpParams::None, vec![i32_const(&[2], &[2, 3]), raw_input(DType::I16, &[], vec![7, 1])], vec![DType::I16]);
        t.compare_with_cpu(0.0, "fill");
    }
}
