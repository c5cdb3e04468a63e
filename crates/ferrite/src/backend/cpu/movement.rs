//! Shape and data movement for every element type: reshape-like ops, concat,
//! split, slices, transpose, reverse, pad, mirror pad, gather, tile, depth/space,
//! space/batch, resize, shape, rank, fill, reverse_sequence.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::quant::RescaleU8;
use ferrite_kernels::{movement, movement_bytes, resize as kresize};

use super::{axis, by_size, require_f32};
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, KernelFn, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The data-movement family's builders (any element type): the common ops
/// (feature `op-movement`).
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::RESHAPE | B::SQUEEZE | B::EXPAND_DIMS => reshape_like(op, code),
        B::CONCATENATION | B::PACK => concat(op, code == B::PACK),
        B::UNPACK | B::SPLIT | B::SPLIT_V => split(op, code),
        B::SLICE | B::STRIDED_SLICE => slice(op, code == B::STRIDED_SLICE),
        B::TRANSPOSE => transpose(op),
        B::RANK => rank(op),
        B::PAD | B::PADV2 => pad(op),
        B::GATHER => gather(op),
        B::SHAPE => shape(op),
        B::FILL | B::ZEROS_LIKE => fill(op, code == B::ZEROS_LIKE),
        _ => return None,
    })
}

/// The rest of the family (feature `op-layout`): rearrangements and resizes that
/// few models use, kept out of a selective build that only slices and concatenates.
pub(super) fn build_layout(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::MIRROR_PAD => mirror_pad(op),
        B::SPACE_TO_BATCH_ND | B::BATCH_TO_SPACE_ND => space_batch(op, code == B::SPACE_TO_BATCH_ND),
        B::REVERSE_V2 => reverse(op),
        B::REVERSE_SEQUENCE => reverse_sequence(op),
        B::TILE | B::BROADCAST_TO => tile(op, code == B::BROADCAST_TO),
        B::DEPTH_TO_SPACE | B::SPACE_TO_DEPTH => depth_space(op, code == B::DEPTH_TO_SPACE),
        B::RESIZE_BILINEAR | B::RESIZE_NEAREST_NEIGHBOR => resize(op, code == B::RESIZE_BILINEAR, ctx.pool()),
        _ => return None,
    })
}

fn copy_kernel() -> KernelFn {
    Box::new(|ins, outs| {
        let i = arg(ins, 0)?;
        let n = outs[0].len().min(i.len());
        outs[0][..n].copy_from_slice(&i[..n]);
        Ok(())
    })
}

/// The element width in bytes of a type the byte-level movement kernels take.
/// They run once for every width (`movement_bytes`) instead of once per element
/// size, which kept four copies of each kernel and closure in the library.
fn width(op: &OpContext<'_>, dtype: DType) -> Result<usize> {
    match dtype.size() {
        Some(w @ (1 | 2 | 4 | 8)) => Ok(w),
        _ => Err(op.unsupported(format!("element type {}", dtype.name()))),
    }
}

pub(crate) fn reshape_like(op: &OpContext<'_>, code: B) -> Result<Built> {
    let x = op.input(0)?;
    let numel: usize = x.shape.iter().product();
    let out: Vec<usize> = match code {
        B::RESHAPE => {
            // Target shape: input 1 when present (a value computed at run time makes the
            // op data-dependent), else the options, else the declared output shape.
            let target: Vec<i64> = if op.opt_input(1).is_some() {
                let v = op.const_ints(1)?;
                // A shape tensor of shape [0] with one -1-free entry encodes a scalar.
                if op.input(1)?.shape.iter().product::<usize>() == 0 {
                    vec![]
                } else {
                    v
                }
            } else if let OpParams::Reshape { new_shape: Some(s) } = &op.op.params {
                s.iter().map(|&v| i64::from(v)).collect()
            } else {
                op.outputs[0].shape.iter().map(|&v| v as i64).collect()
            };
            let known: i64 = target.iter().filter(|&&d| d >= 0).product();
            let unknown = target.iter().filter(|&&d| d == -1).count();
            if target.iter().any(|&d| d < -1) || unknown > 1 {
                return Err(op.bad(format!("invalid target shape {target:?}")));
            }
            let fill = if unknown == 1 {
                if known == 0 || numel as i64 % known != 0 {
                    return Err(op.bad(format!("cannot reshape {:?} to {target:?}", x.shape)));
                }
                numel as i64 / known
            } else {
                0
            };
            let s: Vec<usize> = target.iter().map(|&d| if d == -1 { fill as usize } else { d as usize }).collect();
            if s.iter().product::<usize>() != numel {
                return Err(op.bad(format!("cannot reshape {:?} ({numel} elements) to {target:?}", x.shape)));
            }
            s
        }
        B::SQUEEZE => {
            let dims = match &op.op.params {
                OpParams::Squeeze { dims } => dims.clone(),
                _ => vec![],
            };
            let r = x.shape.len();
            let mut drop = vec![false; r];
            if dims.is_empty() {
                for (d, &s) in x.shape.iter().enumerate() {
                    drop[d] = s == 1;
                }
            } else {
                for &d in &dims {
                    let a = axis(op, i64::from(d), r)?;
                    if x.shape[a] != 1 {
                        return Err(op.bad(format!("cannot squeeze dim {a} of size {}", x.shape[a])));
                    }
                    drop[a] = true;
                }
            }
            x.shape.iter().enumerate().filter(|(d, _)| !drop[*d]).map(|(_, &s)| s).collect()
        }
        _ => {
            let a = op.const_ints(1)?;
            let a = *a.first().ok_or_else(|| op.bad("EXPAND_DIMS axis is empty"))?;
            let p = axis(op, a, x.shape.len() + 1)?;
            let mut s = x.shape.clone();
            s.insert(p, 1);
            s
        }
    };
    Ok(Built { outputs: vec![(x.dtype, out)], kernel: copy_kernel() })
}

/// Most copies a concatenation or slice lists at prepare (see [`runs_kernel`]);
/// one with more keeps its general loop, whose set-up is then small beside the copies.
const SMALL_COPY_RUNS: usize = 16;

/// A kernel making copies resolved at prepare: the shape walk of a small
/// concatenation or slice (a streaming model's state shifted by a frame, a few
/// hundred bytes) cost more than its copies when done every run.
fn runs_kernel(runs: Vec<movement_bytes::CopyRun>, what: &'static str) -> KernelFn {
    Box::new(move |ins, outs| {
        let out = outs.first_mut().ok_or_else(|| super::runtime("copy without an output"))?;
        if movement_bytes::copy_runs(&runs, ins, out) {
            Ok(())
        } else {
            Err(super::runtime(format!("{what} buffers do not match the planned shapes")))
        }
    })
}

pub(crate) fn concat(op: &OpContext<'_>, pack: bool) -> Result<Built> {
    let inputs: Vec<_> = op.inputs.iter().map(|i| i.as_ref().ok_or_else(|| op.bad("missing input"))).collect::<Result<_>>()?;
    let first = *inputs.first().ok_or_else(|| op.bad("no inputs"))?;
    let dtype = first.dtype;
    // A copy cannot change the element type: refused here, as the reference
    // backend refuses it, rather than left to the session's output-type check.
    if op.outputs[0].dtype != dtype {
        let name = if pack { "PACK" } else { "CONCATENATION" };
        return Err(op.unsupported(format!("{name} of {} to {}", dtype.name(), op.outputs[0].dtype.name())));
    }
    let (ax, shapes): (usize, Vec<Vec<usize>>) = if pack {
        let OpParams::Pack { axis: a, .. } = op.op.params else { return Err(op.bad("missing Pack options")) };
        let a = axis(op, i64::from(a), first.shape.len() + 1)?;
        (
            a,
            inputs
                .iter()
                .map(|i| {
                    let mut s = i.shape.clone();
                    s.insert(a.min(s.len()), 1);
                    s
                })
                .collect(),
        )
    } else {
        let a = match op.op.params {
            OpParams::Concatenation { axis, activation } => {
                if activation != crate::ops::Activation::None {
                    require_f32(op, &[0])?;
                }
                axis
            }
            _ => 0,
        };
        (axis(op, i64::from(a), first.shape.len())?, inputs.iter().map(|i| i.shape.clone()).collect())
    };
    // LiteRT's rules for integer inputs: int8 must share the output's scale and zero
    // point; int16 must have zero points of 0 and is copied whatever the scales;
    // uint8 inputs quantized differently from the output are requantized.
    let mut rescale: Option<Vec<Option<RescaleU8>>> = None;
    if matches!(dtype, DType::I8 | DType::U8 | DType::I16) && !pack {
        let out_q = op.outputs[0].quant.as_ref().map(|q| (q.scale.first().copied().unwrap_or(1.0), q.zero_point.first().copied().unwrap_or(0)));
        let in_q: Vec<_> =
            inputs.iter().map(|i| i.quant.map(|q| (q.scale.first().copied().unwrap_or(1.0), q.zero_point.first().copied().unwrap_or(0)))).collect();
        match dtype {
            DType::I8 if in_q.iter().any(|q| *q != out_q) => {
                return Err(op.bad("int8 CONCATENATION inputs must share the output's scale and zero point"));
            }
            DType::I16 if in_q.iter().chain([&out_q]).any(|q| q.is_some_and(|(_, zp)| zp != 0)) => {
                return Err(op.bad("int16 CONCATENATION requires zero points of 0"));
            }
            DType::U8 if in_q.iter().any(|q| *q != out_q) => {
                let (out_scale, _) = out_q.ok_or_else(|| op.bad("uint8 CONCATENATION output has no quantization parameters"))?;
                let out_zp = out_q.map_or(0, |(_, zp)| zp) as i32;
                rescale = Some(
                    in_q.iter()
                        .map(|q| {
                            let (s, zp) = q.ok_or_else(|| op.bad("uint8 CONCATENATION input has no quantization parameters"))?;
                            Ok((Some((s, zp)) != out_q).then(|| RescaleU8::new(s, zp, out_scale, out_zp)))
                        })
                        .collect::<Result<_>>()?,
                );
            }
            _ => {}
        }
    }
    let mut out = shapes[0].clone();
    out[ax] = 0;
    for (i, s) in shapes.iter().enumerate() {
        if inputs[i].dtype != dtype || s.len() != out.len() || s.iter().zip(&out).enumerate().any(|(d, (a, b))| d != ax && a != b) {
            return Err(op.bad(format!("input {i} ({} {s:?}) does not match input 0 ({} {:?})", inputs[i].dtype.name(), dtype.name(), shapes[0])));
        }
        out[ax] += s[ax];
    }
    let clamp = match op.op.params {
        OpParams::Concatenation { activation, .. } => super::clamp_of(op, activation)?,
        _ => ferrite_kernels::Clamp::NONE,
    };
    if let Some(rescale) = rescale {
        let outer: usize = out[..ax].iter().product();
        let inner: usize = out[ax + 1..].iter().product();
        let sizes: Vec<usize> = shapes.iter().map(|s| s[ax] * inner).collect();
        return Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                let mut o = 0;
                for k in 0..outer {
                    for (i, (&n, r)) in sizes.iter().zip(&rescale).enumerate() {
                        let src = &arg(ins, i)?[k * n..][..n];
                        let dst = &mut outs[0][o..][..n];
                        match r {
                            None => dst.copy_from_slice(src),
                            Some(r) => r.apply(src, dst),
                        }
                        o += n;
                    }
                }
                Ok(())
            }),
        });
    }
    // Bytes: each shape gains a trailing dim of the element width.
    let w = width(op, dtype)?;
    let byte_shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.iter().copied().chain([w]).collect()).collect();
    if clamp == ferrite_kernels::Clamp::NONE {
        let refs: Vec<&[usize]> = byte_shapes.iter().map(|s| &s[..]).collect();
        if let Some(runs) = movement_bytes::concat_runs(&refs, ax, SMALL_COPY_RUNS) {
            return Ok(Built { outputs: vec![(dtype, out)], kernel: runs_kernel(runs, "CONCATENATION") });
        }
    }
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let parts: smallvec::SmallVec<[(&[u8], &[usize]); 8]> =
                (0..byte_shapes.len()).map(|i| Ok((arg(ins, i)?, &byte_shapes[i][..]))).collect::<Result<_>>()?;
            movement::concat(&parts, ax, &mut *outs[0]);
            if clamp != ferrite_kernels::Clamp::NONE {
                clamp.apply_slice(typed_mut::<f32>(outs[0])?);
            }
            Ok(())
        }),
    })
}

pub(crate) fn split(op: &OpContext<'_>, code: B) -> Result<Built> {
    let (x, ax, sizes): (_, usize, Vec<usize>) = match code {
        B::UNPACK => {
            let x = op.input(0)?;
            let OpParams::Unpack { axis: a, .. } = op.op.params else { return Err(op.bad("missing Unpack options")) };
            let a = axis(op, i64::from(a), x.shape.len())?;
            // Checked before the piece list is sized by the file's dimension.
            if x.shape[a] != op.outputs.len() {
                return Err(op.bad(format!("UNPACK of dim {a} (size {}) into {} outputs", x.shape[a], op.outputs.len())));
            }
            (x, a, vec![1; x.shape[a]])
        }
        B::SPLIT => {
            let x = op.input(1)?;
            let a = axis(op, *op.const_ints(0)?.first().ok_or_else(|| op.bad("empty axis"))?, x.shape.len())?;
            let n = op.outputs.len();
            if n == 0 || x.shape[a] % n != 0 {
                return Err(op.bad(format!("cannot split dim of size {} into {n}", x.shape[a])));
            }
            (x, a, vec![x.shape[a] / n; n])
        }
        _ => {
            let x = op.input(0)?;
            let a = axis(op, *op.const_ints(2)?.first().ok_or_else(|| op.bad("empty axis"))?, x.shape.len())?;
            let raw = op.const_ints(1)?;
            let known: i64 = raw.iter().filter(|&&v| v >= 0).sum();
            let rest = x.shape[a] as i64 - known;
            if raw.iter().filter(|&&v| v == -1).count() > 1 || raw.iter().any(|&v| v < -1) || rest < 0 {
                return Err(op.bad(format!("invalid size_splits {raw:?} for dim {}", x.shape[a])));
            }
            let s: Vec<usize> = raw.iter().map(|&v| if v == -1 { rest as usize } else { v as usize }).collect();
            if s.iter().sum::<usize>() != x.shape[a] {
                return Err(op.bad(format!("size_splits {raw:?} do not sum to {}", x.shape[a])));
            }
            (x, a, s)
        }
    };
    if sizes.len() != op.outputs.len() {
        return Err(op.bad(format!("{} pieces but {} outputs", sizes.len(), op.outputs.len())));
    }
    let dtype = x.dtype;
    let in_shape = x.shape.clone();
    let outputs: Vec<_> = sizes
        .iter()
        .map(|&s| {
            let mut sh = in_shape.clone();
            if code == B::UNPACK {
                sh.remove(ax);
            } else {
                sh[ax] = s;
            }
            (dtype, sh)
        })
        .collect();
    let outer: usize = in_shape[..ax].iter().product();
    // In bytes: the inner block is `width` times longer.
    let inner: usize = in_shape[ax + 1..].iter().product::<usize>() * width(op, dtype)?;
    let total = in_shape[ax];
    Ok(Built {
        outputs,
        kernel: Box::new(move |ins, outs| {
            let x = arg(ins, usize::from(code == B::SPLIT))?;
            if x.is_empty() {
                return Ok(());
            }
            let mut start = 0;
            for (k, &s) in sizes.iter().enumerate() {
                let o = &mut *outs[k];
                for b in 0..outer {
                    let src = (b * total + start) * inner;
                    o[b * s * inner..(b + 1) * s * inner].copy_from_slice(&x[src..src + s * inner]);
                }
                start += s;
            }
            Ok(())
        }),
    })
}

/// Per input dim begin and stride, the sliced sizes, and the final output shape.
pub(crate) type SlicePlan = (Vec<i64>, Vec<i64>, Vec<usize>, Vec<usize>);

/// Resolves a strided slice (masks, ellipsis, new axes) against the input shape.
fn strided_plan(op: &OpContext<'_>, shape: &[usize]) -> Result<SlicePlan> {
    let begin = op.const_ints(1)?;
    let end = op.const_ints(2)?;
    let strides = if op.opt_input(3).is_some() { op.const_ints(3)? } else { vec![1; begin.len()] };
    resolve_strided_slice(&op.op.params, &begin, &end, &strides, shape).map_err(|m| op.bad(m))
}

/// The strided slice of `params` (STRIDED_SLICE's options) with constant
/// `begin`, `end` and `strides` over an input of `shape`: per input dim the begin,
/// stride and count taken, and the output shape. Shared by the forward kernel and
/// the training graph's backward op; the error is a message for the op.
pub(crate) fn resolve_strided_slice(params: &OpParams, begin: &[i64], end: &[i64], strides: &[i64], shape: &[usize]) -> std::result::Result<SlicePlan, String> {
    let OpParams::StridedSlice { begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask, offset } = *params else {
        return Err("missing StridedSlice options".into());
    };
    let n = begin.len();
    if end.len() != n || strides.len() != n || n > 32 {
        return Err("begin, end and strides must have the same length".into());
    }
    let bit = |m: i32, i: usize| (m >> i) & 1 == 1;
    let r = shape.len();
    // Expand the sparse spec (with ellipsis / new axes) into one entry per input dim.
    struct Dense {
        b: i64,
        e: i64,
        s: i64,
        bm: bool,
        em: bool,
        shrink: bool,
    }
    let mut dense: Vec<Dense> = Vec::with_capacity(r);
    let mut final_shape_plan: Vec<Option<usize>> = Vec::new(); // Some(dense dim) or None for a new axis
    let mut seen_ellipsis = false;
    for i in 0..n {
        if bit(ellipsis_mask, i) && !seen_ellipsis {
            seen_ellipsis = true;
            // The ellipsis covers the input dims the rest of the spec (new axes aside) leaves over.
            let remaining = (i + 1..n).filter(|&j| !bit(new_axis_mask, j)).count();
            let cover = r.saturating_sub(dense.len() + remaining);
            for _ in 0..cover {
                final_shape_plan.push(Some(dense.len()));
                dense.push(Dense { b: 0, e: 0, s: 1, bm: true, em: true, shrink: false });
            }
        } else if bit(new_axis_mask, i) {
            final_shape_plan.push(None);
        } else {
            if dense.len() >= r {
                return Err(format!("slice spec has more dims than the input rank {r}"));
            }
            if !bit(shrink_axis_mask, i) {
                final_shape_plan.push(Some(dense.len()));
            }
            dense.push(Dense { b: begin[i], e: end[i], s: strides[i], bm: bit(begin_mask, i), em: bit(end_mask, i), shrink: bit(shrink_axis_mask, i) });
        }
    }
    while dense.len() < r {
        final_shape_plan.push(Some(dense.len()));
        dense.push(Dense { b: 0, e: 0, s: 1, bm: true, em: true, shrink: false });
    }
    let mut bs = Vec::with_capacity(r);
    let mut ss = Vec::with_capacity(r);
    let mut sizes = Vec::with_capacity(r);
    for (d, dd) in dense.iter().enumerate() {
        let dim = shape[d] as i64;
        if dd.s == 0 {
            return Err("stride 0".into());
        }
        let norm = |v: i64| if v < 0 { v + dim } else { v };
        if dd.shrink {
            let b = norm(dd.b);
            if b < 0 || b >= dim {
                return Err(format!("shrink index {} out of range for dim {dim}", dd.b));
            }
            bs.push(b);
            ss.push(1);
            sizes.push(1);
            continue;
        }
        let (b, e) = if dd.s > 0 {
            let b = if dd.bm { 0 } else { norm(dd.b).clamp(0, dim) };
            let e = if dd.em {
                dim
            } else if offset {
                (b + dd.e).clamp(0, dim)
            } else {
                norm(dd.e).clamp(0, dim)
            };
            (b, e)
        } else {
            let b = if dd.bm { dim - 1 } else { norm(dd.b).clamp(-1, dim - 1) };
            let e = if dd.em {
                -1
            } else if offset {
                (b + dd.e).clamp(-1, dim - 1)
            } else {
                norm(dd.e).clamp(-1, dim - 1)
            };
            (b, e)
        };
        let size = if dd.s > 0 {
            if e > b {
                (e - b + dd.s - 1) / dd.s
            } else {
                0
            }
        } else if b > e {
            (b - e + (-dd.s) - 1) / (-dd.s)
        } else {
            0
        };
        bs.push(b);
        ss.push(dd.s);
        sizes.push(size as usize);
    }
    let final_shape = final_shape_plan.iter().map(|p| p.map_or(1, |d| sizes[d])).collect();
    Ok((bs, ss, sizes, final_shape))
}

pub(crate) fn slice(op: &OpContext<'_>, strided: bool) -> Result<Built> {
    let x = op.input(0)?;
    let shape = x.shape.clone();
    let (begin, stride, sizes, out) = if strided {
        strided_plan(op, &shape)?
    } else {
        let b = op.const_ints(1)?;
        let s = op.const_ints(2)?;
        if b.len() != shape.len() || s.len() != shape.len() {
            return Err(op.bad("begin/size length must equal the input rank"));
        }
        let mut sizes = Vec::new();
        for d in 0..shape.len() {
            let dim = shape[d] as i64;
            let size = if s[d] == -1 { dim - b[d] } else { s[d] };
            if b[d] < 0 || size < 0 || b[d] + size > dim {
                return Err(op.bad(format!("slice begin {} size {} out of range for dim {dim}", b[d], s[d])));
            }
            sizes.push(size as usize);
        }
        (b, vec![1; shape.len()], sizes.clone(), sizes)
    };
    let dtype = x.dtype;
    let w = width(op, dtype)?;
    if let Some(runs) = movement_bytes::strided_slice_runs(&shape, &begin, &stride, &sizes, w, SMALL_COPY_RUNS) {
        return Ok(Built { outputs: vec![(dtype, out)], kernel: runs_kernel(runs, "slice") });
    }
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            movement_bytes::strided_slice(arg(ins, 0)?, &shape, &begin, &stride, &sizes, w, outs[0]);
            Ok(())
        }),
    })
}

/// REVERSE_V2: input 1 lists the axes to reverse (negative counts from the end;
/// a repeated axis is reversed once, as in LiteRT).
pub(crate) fn reverse(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let r = x.shape.len();
    let mut flip = vec![false; r];
    for a in op.const_ints(1)? {
        flip[super::axis(op, a, r)?] = true;
    }
    let (shape, dtype) = (x.shape.clone(), x.dtype);
    let w = width(op, dtype)?;
    Ok(Built {
        outputs: vec![(dtype, shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let (input, out) = (arg(ins, 0)?, &mut *outs[0]);
            if input.len() != out.len() {
                return Err(super::runtime("REVERSE_V2 buffers do not match the planned shape"));
            }
            movement_bytes::reverse(input, &shape, &flip, w, out);
            Ok(())
        }),
    })
}

/// REVERSE_SEQUENCE: (input, seq_lengths); along `seq_dim` the first
/// `seq_lengths[b]` elements of each slice at batch index `b` (along `batch_dim`)
/// are reversed. A length that is negative or past the dimension is a run-time
/// error (the lengths are data).
pub(crate) fn reverse_sequence(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::ReverseSequence { seq_dim, batch_dim } = op.op.params else { return Err(op.bad("missing ReverseSequence options")) };
    let (x, l) = (op.input(0)?, op.input(1)?);
    let r = x.shape.len();
    let dim = |d: i32, what: &str| usize::try_from(d).ok().filter(|&d| d < r).ok_or_else(|| op.bad(format!("{what} {d} out of range for rank {r}")));
    let (seq, batch) = (dim(seq_dim, "seq_dim")?, dim(batch_dim, "batch_dim")?);
    if seq == batch {
        return Err(op.bad(format!("seq_dim and batch_dim are both {seq}")));
    }
    if l.shape != [x.shape[batch]] {
        return Err(op.bad(format!("seq_lengths of shape {:?} for a batch dimension of {}", l.shape, x.shape[batch])));
    }
    if !matches!(x.dtype, DType::F32 | DType::U8 | DType::I16 | DType::I32 | DType::I64) {
        return Err(op.unsupported(format!("REVERSE_SEQUENCE of {} (LiteRT takes float32, uint8, int16, int32 and int64)", x.dtype.name())));
    }
    let (shape, dtype, len_type) = (x.shape.clone(), x.dtype, l.dtype);
    let (n, batches) = (op.checked_elements(&shape, 1)?, shape[batch]);
    let seq_len = shape[seq];
    let bad_len = move |v: i64| super::runtime(format!("REVERSE_SEQUENCE length {v} outside 0..={seq_len}"));
    by_size!(op, dtype, T => {
        macro_rules! with_lengths {
            ($I:ty) => {
                Ok(Built {
                    outputs: vec![(dtype, shape.clone())],
                    kernel: Box::new(move |ins, outs| {
                        let (input, lengths, out) = (typed::<T>(arg(ins, 0)?)?, typed::<$I>(arg(ins, 1)?)?, typed_mut::<T>(outs[0])?);
                        if input.len() != n || out.len() != n || lengths.len() != batches {
                            return Err(super::runtime("REVERSE_SEQUENCE buffers do not match the planned shapes"));
                        }
                        movement::reverse_sequence(input, &shape, seq, batch, lengths, out).map_err(bad_len)
                    }),
                })
            };
        }
        match len_type {
            DType::I32 => with_lengths!(i32),
            DType::I64 => with_lengths!(i64),
            t => Err(op.bad(format!("seq_lengths must be int32 or int64, got {}", t.name()))),
        }
    })
}

pub(crate) fn transpose(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let perm = op.const_ints(1)?;
    let r = x.shape.len();
    let mut seen = vec![false; r];
    if perm.len() != r || perm.iter().any(|&p| p < 0 || p as usize >= r || std::mem::replace(&mut seen[p as usize], true)) {
        return Err(op.bad(format!("perm {perm:?} is not a permutation of rank {r}")));
    }
    let perm: Vec<usize> = perm.iter().map(|&p| p as usize).collect();
    let shape = x.shape.clone();
    let out = perm.iter().map(|&p| shape[p]).collect();
    let dtype = x.dtype;
    let w = width(op, dtype)?;
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            movement_bytes::transpose(arg(ins, 0)?, &shape, &perm, w, outs[0]);
            Ok(())
        }),
    })
}

// PAD stays typed: its fill of the whole output compiles, per element size, to a
// vector store loop; the byte fill (memset) counted twice the instructions under
// callgrind on face_detection_short_range (issue 16), so the four copies stay.
pub(crate) fn pad(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let p = op.const_ints(1)?;
    let r = x.shape.len();
    if p.len() != 2 * r || p.iter().any(|&v| !(0..=1 << 24).contains(&v)) {
        return Err(op.bad(format!("paddings {p:?} invalid for rank {r}")));
    }
    let pads: Vec<(usize, usize)> = p.chunks(2).map(|c| (c[0] as usize, c[1] as usize)).collect();
    let shape = x.shape.clone();
    let out = shape.iter().zip(&pads).map(|(&s, &(a, b))| s + a + b).collect();
    let dtype = x.dtype;
    // Quantized tensors pad with their zero point; float with 0 unless PADV2 gives a value.
    let zp = x.quant.and_then(|q| q.zero_point.first().copied()).unwrap_or(0);
    let has_value = op.opt_input(2).is_some();
    by_size!(op, dtype, T => {
        Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                let value: T = if has_value { typed::<T>(arg(ins, 2)?)?.first().copied().unwrap_or(0 as T) } else { zp as T };
                <T as movement::PadWord>::pad(typed::<T>(arg(ins, 0)?)?, &shape, &pads, value, typed_mut::<T>(outs[0])?);
                Ok(())
            }),
        })
    })
}

pub(crate) fn gather(op: &OpContext<'_>) -> Result<Built> {
    let (p, i) = (op.input(0)?, op.input(1)?);
    let OpParams::Gather { axis: a, batch_dims } = op.op.params else { return Err(op.bad("missing Gather options")) };
    let ax = axis(op, i64::from(a), p.shape.len())?;
    let bd = if batch_dims < 0 { batch_dims + i.shape.len() as i32 } else { batch_dims };
    if bd < 0 || bd as usize > ax || bd as usize > i.shape.len() || p.shape[..bd as usize] != i.shape[..bd as usize] {
        return Err(op.bad(format!("batch_dims {batch_dims} invalid")));
    }
    let bd = bd as usize;
    let mut out: Vec<usize> = p.shape[..ax].to_vec();
    out.extend_from_slice(&i.shape[bd..]);
    out.extend_from_slice(&p.shape[ax + 1..]);
    let shape = p.shape.clone();
    let per_batch: usize = i.shape[bd..].iter().product();
    let (dtype, idx_type) = (p.dtype, i.dtype);
    if !matches!(idx_type, DType::I32 | DType::I64) {
        return Err(op.bad("indices must be int32 or int64"));
    }
    by_size!(op, dtype, T => {
        Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                let (params, raw, o) = (typed::<T>(arg(ins, 0)?)?, arg(ins, 1)?, typed_mut::<T>(outs[0])?);
                let r = if idx_type == DType::I32 {
                    movement::gather(params, &shape, typed::<i32>(raw)?, per_batch, ax, bd, o)
                } else {
                    movement::gather(params, &shape, typed::<i64>(raw)?, per_batch, ax, bd, o)
                };
                r.map_err(|v| super::runtime(format!("gather index {v} out of range 0..{}", shape[ax])))
            }),
        })
    })
}

pub(crate) fn tile(op: &OpContext<'_>, broadcast_to: bool) -> Result<Built> {
    let x = op.input(0)?;
    let v = op.const_ints(1)?;
    let (shape, mult) = if broadcast_to {
        if v.len() < x.shape.len() || v.iter().any(|&d| d < 0) {
            return Err(op.bad(format!("cannot broadcast {:?} to {v:?}", x.shape)));
        }
        let mut s = vec![1; v.len() - x.shape.len()];
        s.extend_from_slice(&x.shape);
        let mut m = Vec::new();
        for (&a, &b) in s.iter().zip(&v) {
            if a != b as usize && a != 1 {
                return Err(op.bad(format!("cannot broadcast {:?} to {v:?}", x.shape)));
            }
            m.push(if a == 1 { b as usize } else { 1 });
        }
        (s, m)
    } else {
        if v.len() != x.shape.len() || v.iter().any(|&d| d < 0) {
            return Err(op.bad(format!("multiples {v:?} invalid for rank {}", x.shape.len())));
        }
        (x.shape.clone(), v.iter().map(|&d| d as usize).collect())
    };
    let out: Vec<usize> = shape.iter().zip(&mult).map(|(&a, &b)| a * b).collect();
    let dtype = x.dtype;
    let w = width(op, dtype)?;
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            movement_bytes::tile(arg(ins, 0)?, &shape, &mult, w, outs[0]);
            Ok(())
        }),
    })
}

pub(crate) fn depth_space(op: &OpContext<'_>, to_space: bool) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::BlockSize(b) = op.op.params else { return Err(op.bad("missing block size")) };
    let s = x.shape.clone();
    if s.len() != 4 {
        return Err(op.bad("input must be 4-D"));
    }
    let out = if to_space {
        if s[3] % (b * b) != 0 {
            return Err(op.bad(format!("depth {} not divisible by block^2", s[3])));
        }
        vec![s[0], s[1] * b, s[2] * b, s[3] / (b * b)]
    } else {
        if s[1] % b != 0 || s[2] % b != 0 {
            return Err(op.bad("spatial dims not divisible by block size"));
        }
        vec![s[0], s[1] / b, s[2] / b, s[3] * b * b]
    };
    let dtype = x.dtype;
    // Bytes: the channel dim counts `w` bytes per element; only whole channel runs move.
    let w = width(op, dtype)?;
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (i, o) = (arg(ins, 0)?, &mut *outs[0]);
            if to_space {
                movement::depth_to_space(i, s[0], s[1], s[2], s[3] * w, b, o)
            } else {
                movement::space_to_depth(i, s[0], s[1], s[2], s[3] * w, b, o)
            }
            Ok(())
        }),
    })
}

pub(crate) fn resize(op: &OpContext<'_>, bilinear: bool, pool: Option<std::sync::Arc<ferrite_kernels::parallel::ThreadPool>>) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::Resize { align_corners, half_pixel_centers } = op.op.params else { return Err(op.bad("missing resize options")) };
    let size = op.const_ints(1)?;
    let s = x.shape.clone();
    if s.len() != 4 || size.len() != 2 || size.iter().any(|&v| v <= 0) {
        return Err(op.bad(format!("resize of {s:?} to {size:?}")));
    }
    let (oh, ow) = (size[0] as usize, size[1] as usize);
    // The target size comes from the file: bound it before the tables are built.
    op.checked_elements(&[s[0], oh, ow, s[3]], x.dtype.size().unwrap_or(4))?;
    // The coordinate tables are sized by the target alone (an empty batch or channel
    // count leaves the output empty but not the tables): bounded too, at up to 24
    // bytes per entry.
    op.checked_elements(&[oh.saturating_add(ow)], 24)?;
    if s[1] == 0 || s[2] == 0 {
        return Err(op.bad(format!("cannot resize an empty image {s:?}")));
    }
    let out = vec![s[0], oh, ow, s[3]];
    let dtype = x.dtype;
    // Coordinate tables depend only on shapes: computed here, once per prepare.
    if bilinear && matches!(dtype, DType::I8 | DType::I16) {
        let (ys, xs) =
            (kresize::bilinear_table_q(s[1], oh, align_corners, half_pixel_centers), kresize::bilinear_table_q(s[2], ow, align_corners, half_pixel_centers));
        return Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                if dtype == DType::I8 {
                    kresize::resize_bilinear_int(typed::<i8>(arg(ins, 0)?)?, s[0], s[1], s[2], s[3], &ys, &xs, typed_mut::<i8>(outs[0])?);
                } else {
                    kresize::resize_bilinear_int(typed::<i16>(arg(ins, 0)?)?, s[0], s[1], s[2], s[3], &ys, &xs, typed_mut::<i16>(outs[0])?);
                }
                Ok(())
            }),
        });
    }
    if bilinear && dtype == DType::U8 {
        // uint8 follows LiteRT's float formulation on the raw values, rounded half up.
        let (ys, xs) =
            (kresize::bilinear_table(s[1], oh, align_corners, half_pixel_centers), kresize::bilinear_table(s[2], ow, align_corners, half_pixel_centers));
        return Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                kresize::resize_bilinear_u8(arg(ins, 0)?, s[0], s[1], s[2], s[3], &ys, &xs, outs[0]);
                Ok(())
            }),
        });
    }
    if bilinear {
        require_f32(op, &[0])?;
        let (ys, xs) =
            (kresize::bilinear_table(s[1], oh, align_corners, half_pixel_centers), kresize::bilinear_table(s[2], ow, align_corners, half_pixel_centers));
        // Rows of a single image split over the pool (each output row reads only the
        // input; bit-identical for any split).
        let work = 8 * oh * ow * s[3];
        return Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                let (x, o) = (typed(arg(ins, 0)?)?, typed_mut(outs[0])?);
                if s[0] != 1 {
                    kresize::resize_bilinear(x, s[0], s[1], s[2], s[3], &ys, &xs, o);
                    return Ok(());
                }
                super::for_row_chunks(pool.as_deref(), work, o, oh, ow * s[3], &|_, r, o| {
                    kresize::resize_bilinear(x, 1, s[1], s[2], s[3], &ys[r], &xs, o);
                    true
                })
            }),
        });
    }
    let (ys, xs) = (kresize::nearest_table(s[1], oh, align_corners, half_pixel_centers), kresize::nearest_table(s[2], ow, align_corners, half_pixel_centers));
    by_size!(op, dtype, T => {
        Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                kresize::resize_nearest(typed::<T>(arg(ins, 0)?)?, s[0], s[1], s[2], s[3], &ys, &xs, typed_mut::<T>(outs[0])?);
                Ok(())
            }),
        })
    })
}

pub(crate) fn shape(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let wide = matches!(op.op.params, OpParams::OutType(4));
    let dims: Vec<i64> = x.shape.iter().map(|&d| d as i64).collect();
    let n = dims.len();
    Ok(Built {
        outputs: vec![(if wide { DType::I64 } else { DType::I32 }, vec![n])],
        kernel: Box::new(move |_, outs| {
            if wide {
                typed_mut::<i64>(outs[0])?.copy_from_slice(&dims);
            } else {
                for (o, &d) in typed_mut::<i32>(outs[0])?.iter_mut().zip(&dims) {
                    *o = d as i32;
                }
            }
            Ok(())
        }),
    })
}

/// RANK: the input's number of dimensions as an int32 scalar (the input's data
/// is never read).
pub(crate) fn rank(op: &OpContext<'_>) -> Result<Built> {
    let rank = i32::try_from(op.input(0)?.shape.len()).map_err(|_| op.bad("rank beyond int32"))?;
    Ok(Built {
        outputs: vec![(DType::I32, vec![])],
        kernel: Box::new(move |_, outs| {
            typed_mut::<i32>(outs[0])?.fill(rank);
            Ok(())
        }),
    })
}

pub(crate) fn fill(op: &OpContext<'_>, zeros_like: bool) -> Result<Built> {
    if zeros_like {
        let x = op.input(0)?;
        return Ok(Built {
            outputs: vec![(x.dtype, x.shape.clone())],
            kernel: Box::new(|_, outs| {
                outs[0].fill(0);
                Ok(())
            }),
        });
    }
    let dims = op.const_ints(0)?;
    if dims.iter().any(|&d| d < 0) {
        return Err(op.bad(format!("negative dims {dims:?}")));
    }
    let v = op.input(1)?;
    let dtype = v.dtype;
    let size = dtype.size().ok_or_else(|| op.unsupported("element type"))?;
    Ok(Built {
        outputs: vec![(dtype, dims.iter().map(|&d| d as usize).collect())],
        kernel: Box::new(move |ins, outs| {
            let v = arg(ins, 1)?;
            let v = v.get(..size).ok_or_else(|| super::runtime("FILL value is empty"))?;
            for c in outs[0].chunks_exact_mut(size) {
                c.copy_from_slice(v);
            }
            Ok(())
        }),
    })
}

/// MIRROR_PAD: (input, paddings `[rank, 2]`) padded with the input's mirror image,
/// REFLECT or SYMMETRIC; each padding at most `dim - 1` (REFLECT) or `dim`
/// (SYMMETRIC), as TensorFlow defines the op.
pub(crate) fn mirror_pad(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::MirrorPad { symmetric } = op.op.params else { return Err(op.bad("missing MirrorPad options")) };
    let p = op.const_ints(1)?;
    let r = x.shape.len();
    if p.len() != 2 * r {
        return Err(op.bad(format!("{} paddings for rank {r}", p.len())));
    }
    let mut pads = Vec::with_capacity(r);
    for (d, c) in p.chunks(2).enumerate() {
        let most = x.shape[d] as i64 - i64::from(!symmetric);
        if c.iter().any(|&v| v < 0 || v > most) {
            return Err(op.bad(format!("paddings {c:?} of dimension {d} (size {}) outside 0..={most}", x.shape[d])));
        }
        pads.push((c[0] as usize, c[1] as usize));
    }
    let shape = x.shape.clone();
    let out: Vec<usize> = shape.iter().zip(&pads).map(|(&s, &(a, b))| s + a + b).collect();
    let dtype = x.dtype;
    let (n_in, n_out) = (op.checked_elements(&shape, dtype.size().unwrap_or(1))?, op.checked_elements(&out, dtype.size().unwrap_or(1))?);
    by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (x, o) = (typed::<T>(arg(ins, 0)?)?, typed_mut::<T>(outs[0])?);
            if x.len() != n_in || o.len() != n_out {
                return Err(super::runtime(format!("MIRROR_PAD buffers of {} and {} elements, the op needs {n_in} and {n_out}", x.len(), o.len())));
            }
            movement::mirror_pad(x, &shape, &pads, symmetric, o);
            Ok(())
        }),
    }))
}

/// SPACE_TO_BATCH_ND (`to_batch`: input, block shape `[m]`, paddings `[m, 2]`) and
/// BATCH_TO_SPACE_ND (input, block shape, crops `[m, 2]`) over the `m` dimensions
/// after the batch. Padding holds 0, or the zero point of a quantized tensor.
pub(crate) fn space_batch(op: &OpContext<'_>, to_batch: bool) -> Result<Built> {
    let x = op.input(0)?;
    let block = op.const_ints(1)?;
    let pc = op.const_ints(2)?;
    let (r, m) = (x.shape.len(), block.len());
    if m == 0 || m + 1 > r || pc.len() != 2 * m {
        return Err(op.bad(format!("block shape {block:?} and paddings/crops {pc:?} for input of shape {:?}", x.shape)));
    }
    if block.iter().any(|&b| !(1..=1 << 16).contains(&b)) || pc.iter().any(|&v| !(0..=1 << 24).contains(&v)) {
        return Err(op.bad(format!("block shape {block:?} must be positive and paddings/crops {pc:?} not negative")));
    }
    let block: Vec<usize> = block.iter().map(|&b| b as usize).collect();
    let before: Vec<usize> = pc.iter().step_by(2).map(|&v| v as usize).collect();
    let prod: usize = block.iter().product();
    let mut out = x.shape.clone();
    if to_batch {
        out[0] = x.shape[0] * prod;
        for k in 0..m {
            let padded = x.shape[k + 1] + pc[2 * k] as usize + pc[2 * k + 1] as usize;
            if !padded.is_multiple_of(block[k]) {
                return Err(op.bad(format!("padded dimension {} of {padded} is not a multiple of block {}", k + 1, block[k])));
            }
            out[k + 1] = padded / block[k];
        }
    } else {
        if !x.shape[0].is_multiple_of(prod) {
            return Err(op.bad(format!("batch {} is not a multiple of the block's {prod} elements", x.shape[0])));
        }
        out[0] = x.shape[0] / prod;
        for k in 0..m {
            let full = x.shape[k + 1] * block[k];
            let crop = pc[2 * k] as usize + pc[2 * k + 1] as usize;
            out[k + 1] = full.checked_sub(crop).ok_or_else(|| op.bad(format!("crops {crop} larger than dimension {} of {full}", k + 1)))?;
        }
    }
    let (shape, dtype) = (x.shape.clone(), x.dtype);
    let es = dtype.size().unwrap_or(1);
    let (n_in, n_out) = (op.checked_elements(&shape, es)?, op.checked_elements(&out, es)?);
    let zp = x.quant.and_then(|q| q.zero_point.first().copied()).unwrap_or(0);
    let os = out.clone();
    by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (x, o) = (typed::<T>(arg(ins, 0)?)?, typed_mut::<T>(outs[0])?);
            if x.len() != n_in || o.len() != n_out {
                return Err(super::runtime(format!("space/batch buffers of {} and {} elements, the op needs {n_in} and {n_out}", x.len(), o.len())));
            }
            if to_batch {
                movement::space_to_batch(x, &shape, &block, &before, zp as T, &os, o);
            } else {
                movement::batch_to_space(x, &shape, &block, &before, &os, o);
            }
            Ok(())
        }),
    }))
}
