//! Backward ops of the convolutions, pooling, BATCH_MATMUL, the data-movement
//! ops and RESIZE_BILINEAR: each arm reads the forward op's options and shapes
//! (at the training batch size), makes its kernel's scratch once, and calls the
//! kernel of `ferrite_kernels::grad` on every step (no allocation there).

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::conv::{out_size_and_pad, Window};
use ferrite_kernels::grad::conv::{self as gconv, Conv2dScratch, ConvGrads, TransposeConvScratch};
use ferrite_kernels::grad::{matmul as gmatmul, movement as gmove, pool as gpool, resize as gresize};
use ferrite_kernels::parallel::ThreadPool;

use super::{f32s, grads, Backward, BackwardOp, Operand};
use crate::error::{Error, Result};
use crate::ops::{OpParams, Padding};

/// The error of a kernel refusing its buffers: the plan and the kernel disagree.
fn mismatch(what: &str) -> Error {
    Error::Runtime(format!("{what} backward: buffers do not match the planned shapes").into())
}

fn ok_or(ok: bool, what: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(mismatch(what))
    }
}

/// Threads of the trainer's pool.
fn threads(b: &BackwardOp<'_>) -> usize {
    b.pool.as_deref().map_or(1, ThreadPool::threads)
}

/// A 4-D shape, or an error naming what it is.
fn rank4<'s>(b: &BackwardOp<'_>, s: &'s [usize], what: &str) -> Result<&'s [usize]> {
    if s.len() == 4 {
        Ok(s)
    } else {
        Err(b.bad(format!("{what} must be 4-D, got {s:?}")))
    }
}

/// The window of a convolution or pooling over NHWC `x`, as the forward op
/// computes it (TFLite's SAME / VALID rules).
fn window(b: &BackwardOp<'_>, x: &[usize], k: (usize, usize), stride: (usize, usize), dil: (usize, usize), padding: Padding) -> Result<Window> {
    let same = padding == Padding::Same;
    let fit = || b.bad(format!("window {k:?} does not fit input {x:?}"));
    let (oh, pt) = out_size_and_pad(x[1], k.0, stride.0, dil.0, same).ok_or_else(fit)?;
    let (ow, pl) = out_size_and_pad(x[2], k.1, stride.1, dil.1, same).ok_or_else(fit)?;
    let g = Window {
        batch: x[0],
        in_h: x[1],
        in_w: x[2],
        out_h: oh,
        out_w: ow,
        k_h: k.0,
        k_w: k.1,
        stride_h: stride.0,
        stride_w: stride.1,
        dil_h: dil.0,
        dil_w: dil.1,
        pad_top: pt,
        pad_left: pl,
    };
    if !g.indices_fit(x[3].max(1)) {
        return Err(b.bad(format!("window {k:?} with stride {stride:?} and dilation {dil:?} is too large")));
    }
    Ok(g)
}

/// The backward op of the ops this file covers, or `None` for another op.
pub(super) fn build(b: &BackwardOp<'_>, code: B) -> Option<Result<Backward>> {
    Some(match code {
        B::CONV_2D => conv2d(b),
        B::DEPTHWISE_CONV_2D => depthwise(b),
        B::TRANSPOSE_CONV => transpose_conv(b),
        B::MAX_POOL_2D | B::AVERAGE_POOL_2D => pool(b, code == B::MAX_POOL_2D),
        B::BATCH_MATMUL => batch_matmul(b),
        B::PAD | B::PADV2 => pad(b),
        B::CONCATENATION => concat(b),
        B::TRANSPOSE => transpose(b),
        B::STRIDED_SLICE | B::SLICE => slice(b, code == B::STRIDED_SLICE),
        B::GATHER => gather(b),
        B::RESIZE_BILINEAR => resize(b),
        _ => return None,
    })
}

fn conv2d(b: &BackwardOp<'_>) -> Result<Backward> {
    let OpParams::Conv2D { padding, stride, dilation, .. } = b.op.params else { return Err(b.bad("missing Conv2D options")) };
    let x = rank4(b, b.shape(0)?, "input")?.to_vec();
    let w = rank4(b, b.shape(1)?, "filter")?.to_vec();
    let (oc, kh, kw, ic) = (w[0], w[1], w[2], w[3]);
    if ic != x[3] {
        return Err(b.bad(format!("grouped convolution (input has {} channels, filter {ic})", x[3])));
    }
    let g = window(b, &x, (kh, kw), stride, dilation, padding)?;
    let mut scratch = Conv2dScratch::new(&g, ic, oc, threads(b));
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    Ok(Backward {
        reads: vec![Operand::Input(0), Operand::Input(1), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let (x, w, dy) = (f32s(ins, 0)?, f32s(ins, 1)?, f32s(ins, 2)?);
            let mut g3 = grads(outs, &needs)?.into_iter();
            let grads = ConvGrads { dx: g3.next().flatten(), dw: g3.next().flatten(), db: g3.next().flatten() };
            ok_or(gconv::conv2d_backward(&g, ic, oc, x, w, dy, grads, &mut scratch, pool.as_deref()), "CONV_2D")
        }),
    })
}

fn depthwise(b: &BackwardOp<'_>) -> Result<Backward> {
    let OpParams::DepthwiseConv2D { padding, stride, dilation, .. } = b.op.params else { return Err(b.bad("missing DepthwiseConv2D options")) };
    let x = rank4(b, b.shape(0)?, "input")?.to_vec();
    let w = rank4(b, b.shape(1)?, "filter")?.to_vec();
    let (kh, kw, oc, c) = (w[1], w[2], w[3], x[3]);
    if w[0] != 1 || c == 0 || oc % c != 0 {
        return Err(b.bad(format!("depthwise filter {w:?} does not match input {x:?}")));
    }
    let mult = oc / c;
    let g = window(b, &x, (kh, kw), stride, dilation, padding)?;
    let mut scratch = vec![0.0f32; kh * kw * oc];
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    Ok(Backward {
        reads: vec![Operand::Input(0), Operand::Input(1), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let (x, w, dy) = (f32s(ins, 0)?, f32s(ins, 1)?, f32s(ins, 2)?);
            let mut g3 = grads(outs, &needs)?.into_iter();
            let grads = ConvGrads { dx: g3.next().flatten(), dw: g3.next().flatten(), db: g3.next().flatten() };
            ok_or(gconv::depthwise_conv2d_backward(&g, c, mult, x, w, dy, grads, &mut scratch, pool.as_deref()), "DEPTHWISE_CONV_2D")
        }),
    })
}

fn transpose_conv(b: &BackwardOp<'_>) -> Result<Backward> {
    let OpParams::TransposeConv { padding, stride, .. } = b.op.params else { return Err(b.bad("missing TransposeConv options")) };
    // Inputs: output shape, filter, input, optional bias.
    let x = rank4(b, b.shape(2)?, "input")?.to_vec();
    let w = rank4(b, b.shape(1)?, "filter")?.to_vec();
    let y = rank4(b, b.out_shapes.first().map_or(&[][..], Vec::as_slice), "output")?.to_vec();
    let (oc, kh, kw, ic) = (w[0], w[1], w[2], w[3]);
    if ic != x[3] || y[3] != oc || y[0] != x[0] {
        return Err(b.bad(format!("filter {w:?} does not match input {x:?} and output {y:?}")));
    }
    // The forward conv mapping the output back onto the input, as the forward op builds it.
    let same = padding == Padding::Same;
    let pad = |o: usize, k: usize, s: usize, i: usize| if same { (((i.max(1) - 1) * s + k).saturating_sub(o)) / 2 } else { 0 };
    let g = Window {
        batch: x[0],
        in_h: y[1],
        in_w: y[2],
        out_h: x[1],
        out_w: x[2],
        k_h: kh,
        k_w: kw,
        stride_h: stride.0,
        stride_w: stride.1,
        dil_h: 1,
        dil_w: 1,
        pad_top: pad(y[1], kh, stride.0, x[1]),
        pad_left: pad(y[2], kw, stride.1, x[2]),
    };
    if !g.indices_fit(oc.max(ic).max(1)) {
        return Err(b.bad("transposed convolution geometry too large"));
    }
    let mut scratch = TransposeConvScratch::new(&g, ic, oc, threads(b));
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    Ok(Backward {
        reads: vec![Operand::Input(2), Operand::Input(1), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let (x, w, dy) = (f32s(ins, 0)?, f32s(ins, 1)?, f32s(ins, 2)?);
            // Gradients in input order: output shape (never), filter, input, bias.
            let mut g4 = grads(outs, &needs)?.into_iter();
            let _shape = g4.next();
            let dw = g4.next().flatten();
            let dx = g4.next().flatten();
            let db = g4.next().flatten();
            ok_or(gconv::transpose_conv2d_backward(&g, ic, oc, x, w, dy, ConvGrads { dx, dw, db }, &mut scratch, pool.as_deref()), "TRANSPOSE_CONV")
        }),
    })
}

fn pool(b: &BackwardOp<'_>, max: bool) -> Result<Backward> {
    let OpParams::Pool2D { padding, stride, filter, .. } = b.op.params else { return Err(b.bad("missing Pool2D options")) };
    let x = rank4(b, b.shape(0)?, "input")?.to_vec();
    let g = window(b, &x, filter, stride, (1, 1), padding)?;
    let c = x[3];
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    let reads = if max { vec![Operand::Input(0), Operand::OutputGrad] } else { vec![Operand::OutputGrad] };
    Ok(Backward {
        reads,
        kernel: Box::new(move |ins, outs| {
            let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() else { return Ok(()) };
            if max {
                ok_or(gpool::max_pool_backward(f32s(ins, 0)?, c, &g, f32s(ins, 1)?, dx, pool.as_deref()), "MAX_POOL_2D")
            } else {
                ok_or(gpool::average_pool_backward(c, &g, f32s(ins, 0)?, dx, pool.as_deref()), "AVERAGE_POOL_2D")
            }
        }),
    })
}

/// Flat output batch -> operand batch, with broadcasting (as the forward op).
fn batch_map(batch: &[usize], operand: &[usize]) -> Vec<usize> {
    let n: usize = batch.iter().product();
    (0..n)
        .map(|flat| {
            let (mut rem, mut idx, mut mul) = (flat, 0, 1);
            for d in (0..batch.len()).rev() {
                let i = rem % batch[d];
                rem /= batch[d];
                if d + operand.len() >= batch.len() {
                    let sd = d + operand.len() - batch.len();
                    idx += if operand[sd] == 1 { 0 } else { i } * mul;
                    mul *= operand[sd];
                }
            }
            idx
        })
        .collect()
}

fn batch_matmul(b: &BackwardOp<'_>) -> Result<Backward> {
    let OpParams::BatchMatMul { adj_x, adj_y, .. } = b.op.params else { return Err(b.bad("missing BatchMatMul options")) };
    let (a, bs) = (b.shape(0)?.to_vec(), b.shape(1)?.to_vec());
    if a.len() < 2 || bs.len() < 2 {
        return Err(b.bad(format!("operands must be at least 2-D, got {a:?} and {bs:?}")));
    }
    let (ra, rb) = (a.len(), bs.len());
    let (m, ka) = if adj_x { (a[ra - 1], a[ra - 2]) } else { (a[ra - 2], a[ra - 1]) };
    let (kb, n) = if adj_y { (bs[rb - 1], bs[rb - 2]) } else { (bs[rb - 2], bs[rb - 1]) };
    if ka != kb {
        return Err(b.bad(format!("inner dimensions differ: {a:?} x {bs:?}")));
    }
    let batch = ferrite_kernels::elementwise::broadcast_shape(&a[..ra - 2], &bs[..rb - 2])
        .ok_or_else(|| b.bad(format!("batch dims of {a:?} and {bs:?} do not broadcast")))?;
    let (ia, ib) = (batch_map(&batch, &a[..ra - 2]), batch_map(&batch, &bs[..rb - 2]));
    let s = gmatmul::MatMul { m, k: ka, n, adj_x, adj_y };
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    Ok(Backward {
        reads: vec![Operand::Input(0), Operand::Input(1), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let (av, bv, dy) = (f32s(ins, 0)?, f32s(ins, 1)?, f32s(ins, 2)?);
            let mut g2 = grads(outs, &needs)?.into_iter();
            let (da, db) = (g2.next().flatten(), g2.next().flatten());
            ok_or(gmatmul::batch_matmul_backward(av, bv, &ia, &ib, &s, dy, da, db, pool.as_deref()), "BATCH_MATMUL")
        }),
    })
}

fn pad(b: &BackwardOp<'_>) -> Result<Backward> {
    let shape = b.shape(0)?.to_vec();
    let p = b.const_ints(1)?;
    if p.len() != 2 * shape.len() || p.iter().any(|&v| v < 0) {
        return Err(b.bad(format!("paddings {p:?} do not fit input {shape:?}")));
    }
    let pads: Vec<(usize, usize)> = p.chunks_exact(2).map(|c| (c[0] as usize, c[1] as usize)).collect();
    let needs = b.needs.clone();
    Ok(Backward {
        reads: vec![Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() else { return Ok(()) };
            ok_or(gmove::pad_backward(f32s(ins, 0)?, &shape, &pads, dx), "PAD")
        }),
    })
}

fn concat(b: &BackwardOp<'_>) -> Result<Backward> {
    let OpParams::Concatenation { axis, .. } = b.op.params else { return Err(b.bad("missing Concatenation options")) };
    let out = b.out_shapes.first().cloned().unwrap_or_default();
    let rank = out.len() as i64;
    let ax = if axis < 0 { i64::from(axis) + rank } else { i64::from(axis) };
    if !(0..rank).contains(&ax) {
        return Err(b.bad(format!("axis {axis} out of range for rank {rank}")));
    }
    let ax = ax as usize;
    // Each input's shape and its offset along the axis.
    let mut parts = Vec::new();
    let mut offset = 0;
    for i in 0..b.op.inputs.len() {
        let s = b.shape(i)?.to_vec();
        let along = s.get(ax).copied().unwrap_or(0);
        parts.push((s, offset));
        offset += along;
    }
    let needs = b.needs.clone();
    Ok(Backward {
        reads: vec![Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let dy = f32s(ins, 0)?;
            for ((shape, off), dx) in parts.iter().zip(grads(outs, &needs)?) {
                if let Some(dx) = dx {
                    ok_or(gmove::concat_backward(dy, &out, ax, *off, shape, dx), "CONCATENATION")?;
                }
            }
            Ok(())
        }),
    })
}

fn transpose(b: &BackwardOp<'_>) -> Result<Backward> {
    let shape = b.shape(0)?.to_vec();
    let perm: Vec<usize> =
        b.const_ints(1)?.into_iter().map(|p| if p < 0 { p + shape.len() as i64 } else { p }).map(|p| usize::try_from(p).unwrap_or(usize::MAX)).collect();
    let needs = b.needs.clone();
    Ok(Backward {
        reads: vec![Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() else { return Ok(()) };
            ok_or(gmove::transpose_backward(f32s(ins, 0)?, &shape, &perm, dx), "TRANSPOSE")
        }),
    })
}

fn slice(b: &BackwardOp<'_>, strided: bool) -> Result<Backward> {
    let shape = b.shape(0)?.to_vec();
    let (begin, stride, sizes) = if strided {
        let begin = b.const_ints(1)?;
        let end = b.const_ints(2)?;
        let strides = if b.op.inputs.get(3).copied().flatten().is_some() { b.const_ints(3)? } else { vec![1; begin.len()] };
        let (bs, ss, sizes, _) = crate::backend::cpu::resolve_strided_slice(&b.op.params, &begin, &end, &strides, &shape).map_err(|m| b.bad(m))?;
        (bs, ss, sizes)
    } else {
        let (bg, sz) = (b.const_ints(1)?, b.const_ints(2)?);
        if bg.len() != shape.len() || sz.len() != shape.len() {
            return Err(b.bad("begin/size length must equal the input rank"));
        }
        let mut sizes = Vec::new();
        for d in 0..shape.len() {
            let dim = shape[d] as i64;
            let size = if sz[d] == -1 { dim - bg[d] } else { sz[d] };
            if bg[d] < 0 || size < 0 || bg[d] + size > dim {
                return Err(b.bad(format!("slice begin {} size {} out of range for dim {dim}", bg[d], sz[d])));
            }
            sizes.push(size as usize);
        }
        (bg, vec![1; shape.len()], sizes)
    };
    let needs = b.needs.clone();
    Ok(Backward {
        reads: vec![Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() else { return Ok(()) };
            ok_or(gmove::strided_slice_backward(f32s(ins, 0)?, &shape, &begin, &stride, &sizes, dx), "STRIDED_SLICE")
        }),
    })
}

fn gather(b: &BackwardOp<'_>) -> Result<Backward> {
    let OpParams::Gather { axis, batch_dims } = b.op.params else { return Err(b.bad("missing Gather options")) };
    let shape = b.shape(0)?.to_vec();
    let ishape = b.shape(1)?.to_vec();
    let r = shape.len() as i64;
    let ax = if axis < 0 { i64::from(axis) + r } else { i64::from(axis) };
    let bd = if batch_dims < 0 { i64::from(batch_dims) + ishape.len() as i64 } else { i64::from(batch_dims) };
    if !(0..r).contains(&ax) || bd < 0 || bd > ax || bd as usize > ishape.len() {
        return Err(b.bad(format!("axis {axis} / batch_dims {batch_dims} out of range for params {shape:?}, indices {ishape:?}")));
    }
    let (ax, bd) = (ax as usize, bd as usize);
    let batch: usize = shape[..bd].iter().product();
    let n_idx: usize = ishape.iter().product();
    let per_batch = n_idx / batch.max(1);
    let needs = b.needs.clone();
    Ok(Backward {
        reads: vec![Operand::Input(1), Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let raw = ins.first().copied().flatten().ok_or_else(|| mismatch("GATHER"))?;
            let dy = f32s(ins, 1)?;
            let mut g2 = grads(outs, &needs)?.into_iter();
            let (dparams, dindices) = (g2.next().flatten(), g2.next().flatten());
            if let Some(d) = dindices {
                // Integer indices have no gradient.
                d.fill(0.0);
            }
            let Some(dp) = dparams else { return Ok(()) };
            let r = if raw.len() == n_idx * 8 {
                gmove::gather_backward(&shape, crate::backend::typed::<i64>(raw)?, per_batch, ax, bd, dy, dp, None)
            } else {
                gmove::gather_backward(&shape, crate::backend::typed::<i32>(raw)?, per_batch, ax, bd, dy, dp, None)
            };
            match r {
                Ok(ok) => ok_or(ok, "GATHER"),
                Err(i) => Err(Error::Runtime(format!("GATHER backward: index {i} out of range for axis {ax} of params {shape:?}").into())),
            }
        }),
    })
}

fn resize(b: &BackwardOp<'_>) -> Result<Backward> {
    let OpParams::Resize { align_corners, half_pixel_centers } = b.op.params else { return Err(b.bad("missing Resize options")) };
    let x = rank4(b, b.shape(0)?, "input")?.to_vec();
    let y = rank4(b, b.out_shapes.first().map_or(&[][..], Vec::as_slice), "output")?.to_vec();
    if x[1] == 0 || x[2] == 0 {
        return Err(b.bad(format!("empty input {x:?}")));
    }
    let ys = ferrite_kernels::resize::bilinear_table(x[1], y[1], align_corners, half_pixel_centers);
    let xs = ferrite_kernels::resize::bilinear_table(x[2], y[2], align_corners, half_pixel_centers);
    let (pool, needs) = (b.pool.clone(), b.needs.clone());
    Ok(Backward {
        reads: vec![Operand::OutputGrad],
        kernel: Box::new(move |ins, outs| {
            let Some(dx) = grads(outs, &needs)?.into_iter().next().flatten() else { return Ok(()) };
            ok_or(gresize::resize_bilinear_backward(x[0], x[1], x[2], x[3], &ys, &xs, f32s(ins, 0)?, dx, pool.as_deref()), "RESIZE_BILINEAR")
        }),
    })
}
