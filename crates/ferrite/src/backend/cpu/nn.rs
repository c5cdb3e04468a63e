//! Convolutions, pooling, fully-connected, matmul, softmax.

use ferrite_kernels::conv::{self, out_size_and_pad, Window};
use std::sync::Arc;

use ferrite_kernels::igemm::{self, Isa, Packed};
use ferrite_kernels::{gemm, pool as kpool, softmax as ksoftmax, Clamp};

use std::sync::Mutex;

use super::{clamp_of, for_row_chunks, for_row_chunks_aligned, require_f32, rows_with_epilogue};
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext, PackKey, Packing};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{OpParams, Padding};

fn rank4<'s>(op: &OpContext<'_>, shape: &'s [usize], what: &str) -> Result<&'s [usize]> {
    if shape.len() != 4 {
        return Err(op.bad(format!("{what} must be 4-D, got {shape:?}")));
    }
    Ok(shape)
}

/// Builds the window geometry of a conv/pool over an NHWC input.
pub(crate) fn window(op: &OpContext<'_>, input: &[usize], k: (usize, usize), stride: (usize, usize), dil: (usize, usize), padding: Padding) -> Result<Window> {
    let same = padding == Padding::Same;
    let fit = || op.bad(format!("window {k:?} does not fit input {input:?}"));
    let ((oh, pt), (ow, pl)) = match op.input_pad {
        // A folded PAD before a VALID window: VALID over the padded size, with the
        // padding as explicit leading offsets (taps past the end read zeros).
        Some([top, bottom, left, right]) if !same => (
            (out_size_and_pad(input[1] + top + bottom, k.0, stride.0, dil.0, false).ok_or_else(fit)?.0, top),
            (out_size_and_pad(input[2] + left + right, k.1, stride.1, dil.1, false).ok_or_else(fit)?.0, left),
        ),
        _ => (out_size_and_pad(input[1], k.0, stride.0, dil.0, same).ok_or_else(fit)?, out_size_and_pad(input[2], k.1, stride.1, dil.1, same).ok_or_else(fit)?),
    };
    Ok(Window {
        batch: input[0],
        in_h: input[1],
        in_w: input[2],
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
    })
}

fn check_bias(op: &OpContext<'_>, i: usize, n: usize) -> Result<()> {
    if let Some(b) = op.opt_input(i) {
        if b.shape.iter().product::<usize>() != n {
            return Err(op.bad(format!("bias has shape {:?}, expected {n} elements", b.shape)));
        }
    }
    Ok(())
}

/// Weights (and bias) as GEMM panels: from the session cache when constant,
/// otherwise a private copy repacked on every run.
enum Weights {
    Cached(Arc<Packed>),
    PerRun(Packed),
}

/// GEMM packing of conv / FC weights `[n][taps][k]`; `merged_kw > 1` merges that
/// many filter columns into each tap (taps = kh, k = kw * in_c).
fn gemm_weights(op: &OpContext<'_>, ctx: &mut BackendContext, n: usize, taps: usize, k: usize, merged_kw: usize) -> Result<Weights> {
    // Packings (and run-time weights' zeroed staging) are sized from the shapes,
    // output channels padded to whole panels, plus a row of k zeros even when there
    // are no output channels: bounded by the session limit first.
    let isa = Isa::for_channels(n);
    op.checked_elements(&[(n.div_ceil(isa.nr()) * isa.nr()).max(1), taps.max(1), k.max(1)], 4)?;
    let (w, bias) = (op.input(1)?, op.opt_input(2));
    let pack = |w: &[f32], b: Option<&[f32]>| {
        if merged_kw > 1 {
            Packed::with_merged_rows(isa, w, b, n, taps, merged_kw, k / merged_kw)
        } else {
            Packed::new(isa, w, b, n, taps, k)
        }
    };
    if w.constant && bias.is_none_or(|b| b.constant) {
        let (wv, bv) = (w.value.ok_or_else(|| op.bad("constant weights without data"))?, bias.and_then(|b| b.value));
        let packing = if merged_kw > 1 { Packing::GemmRows(isa, merged_kw) } else { Packing::Gemm(isa) };
        let key = PackKey { subgraph: op.subgraph, tensor: w.tensor, with: bias.map(|b| b.tensor), packing };
        let p = ctx.packed(key, || Ok(pack(typed::<f32>(wv)?, bv.map(typed::<f32>).transpose()?)))?;
        Ok(Weights::Cached(p))
    } else {
        Ok(Weights::PerRun(pack(&vec![0.0; n * taps * k], None)))
    }
}

impl Weights {
    /// The packing to use for this run, repacking run-time weights first.
    fn get(&mut self, ins: &[Option<&[u8]>], has_bias: bool) -> Result<&Packed> {
        match self {
            Weights::Cached(p) => Ok(p),
            Weights::PerRun(p) => {
                let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
                p.repack(typed::<f32>(arg(ins, 1)?)?, bias);
                Ok(p)
            }
        }
    }
}

pub(crate) fn conv2d(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let OpParams::Conv2D { padding, stride, dilation, activation } = op.op.params else { return Err(op.bad("missing Conv2D options")) };
    require_f32(op, &[0, 1, 2])?;
    let x = rank4(op, &op.input(0)?.shape, "input")?.to_vec();
    let w = rank4(op, &op.input(1)?.shape, "filter")?.to_vec();
    let (oc, kh, kw, ic) = (w[0], w[1], w[2], w[3]);
    if ic != x[3] {
        return Err(op.unsupported(format!("grouped convolution (input has {} channels, filter {ic})", x[3])));
    }
    check_bias(op, 2, oc)?;
    let clamp = clamp_of(op, activation)?;
    let g = window(op, &x, (kh, kw), stride, dilation, padding)?;
    let has_bias = op.opt_input(2).is_some();
    // Few input channels: merge each filter row into one tap (k = kw * in_c), so
    // the GEMM's inner loop is the whole window row rather than a few channels.
    let merged_kw = if ic <= 8 && kw > 1 && g.dil_w == 1 { kw } else { 1 };
    let mut weights = if merged_kw > 1 { gemm_weights(op, ctx, oc, kh, kw * ic, merged_kw)? } else { gemm_weights(op, ctx, oc, kh * kw, ic, 1)? };
    let pool = ctx.pool();
    // The scratch holds a pointer per output column and tap and, with merged rows,
    // one padded input row per tap: sized from the geometry, so bounded first (an
    // over-estimate of the kernels' exact sizes; the row-tile width is under 64).
    let taps = if merged_kw > 1 { kh } else { kh * kw };
    op.checked_elements(&[g.out_w.saturating_add(64), taps.max(1)], 8)?;
    if merged_kw > 1 {
        let width = (g.pad_left.saturating_add(g.in_w)).max(g.out_w.saturating_mul(g.stride_w).saturating_add(g.k_w.saturating_mul(g.dil_w)));
        op.checked_elements(&[kh, width, ic], 4)?;
    }
    // Scratch per thread, sized once here so runs do not allocate.
    let template = match &weights {
        Weights::Cached(p) => p,
        Weights::PerRun(p) => p,
    }
    .scratch(&g);
    let scratch: Vec<Mutex<igemm::ConvScratch>> = (0..ctx.threads).map(|_| Mutex::new(template.clone())).collect();
    let rows = g.batch * g.out_h;
    let flops = 2 * rows * g.out_w * oc * kh * kw * ic;
    let epilogue = op.epilogue.take();
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let pk = weights.get(ins, has_bias)?;
            let input = typed::<f32>(arg(ins, 0)?)?;
            let out = typed_mut::<f32>(outs[0])?;
            if merged_kw > 1 {
                return for_row_chunks(pool.as_deref(), flops, out, rows, g.out_w * oc, &|i, r, out| {
                    let mut sc = scratch[i].lock().unwrap_or_else(|e| e.into_inner());
                    rows_with_epilogue(epilogue.as_ref(), ins, oc, g.out_w * oc, 1, r, out, |r, out| igemm::conv2d(input, pk, &g, clamp, out, r, &mut sc))
                });
            }
            // Chunks of whole tiles of pixels: the tiling, and so every result, is
            // then the same for any thread count.
            let mr = pk.isa.mr();
            for_row_chunks_aligned(pool.as_deref(), flops, out, rows * g.out_w, oc, mr, &|i, p, out| {
                let mut sc = scratch[i].lock().unwrap_or_else(|e| e.into_inner());
                rows_with_epilogue(epilogue.as_ref(), ins, oc, oc, mr, p, out, |p, out| igemm::conv2d_pixels(input, pk, &g, clamp, out, p, &mut sc))
            })
        }),
    })
}

pub(crate) fn depthwise(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let OpParams::DepthwiseConv2D { padding, stride, dilation, activation, .. } = op.op.params else { return Err(op.bad("missing DepthwiseConv2D options")) };
    require_f32(op, &[0, 1, 2])?;
    let x = rank4(op, &op.input(0)?.shape, "input")?.to_vec();
    let w = rank4(op, &op.input(1)?.shape, "filter")?.to_vec();
    let (kh, kw, oc) = (w[1], w[2], w[3]);
    if w[0] != 1 || x[3] == 0 || oc % x[3] != 0 {
        return Err(op.bad(format!("depthwise filter {w:?} does not match input {x:?}")));
    }
    // The multiplier follows from the shapes; the option field is redundant in newer files.
    let mult = oc / x[3];
    check_bias(op, 2, oc)?;
    let clamp = clamp_of(op, activation)?;
    let g = window(op, &x, (kh, kw), stride, dilation, padding)?;
    let ic = x[3];
    let has_bias = op.opt_input(2).is_some();
    let pool = ctx.pool();
    let rows = g.batch * g.out_h;
    let flops = 2 * rows * g.out_w * oc * kh * kw;
    let epilogue = op.epilogue.take();
    // Multiplier 1, horizontal stride 1, constant weights, and a channel count the
    // 16-lane kernel leaves a scalar remainder of (not a multiple of 16 nor a
    // divisor): weights tiled along the output row once here, each tap then one flat
    // multiply-add per row. (With 16-multiple channels the register-tiled kernel is
    // faster: the tiled rows cost cache traffic.)
    let wt = op.input(1)?;
    let awkward = ic % 16 != 0 && !(ic < 16 && 16 % ic == 0) && !conv::depthwise_masks_tails();
    if mult == 1 && g.stride_w == 1 && wt.constant && awkward {
        let bytes = wt.value.ok_or_else(|| op.bad("constant weights without data"))?;
        let key = PackKey { subgraph: op.subgraph, tensor: wt.tensor, with: None, packing: Packing::DepthwiseRows(g.out_w) };
        let tiled = ctx.packed(key, || Ok(conv::tile_depthwise(typed::<f32>(bytes)?, ic, kh * kw, g.out_w)))?;
        return Ok(Built {
            outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, oc])],
            kernel: Box::new(move |ins, outs| {
                let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
                let input = typed::<f32>(arg(ins, 0)?)?;
                for_row_chunks(pool.as_deref(), flops, typed_mut::<f32>(outs[0])?, rows, g.out_w * oc, &|_, r, out| {
                    rows_with_epilogue(epilogue.as_ref(), ins, oc, g.out_w * oc, 1, r, out, |r, out| {
                        conv::depthwise_rows(input, ic, &tiled, bias, &g, clamp, out, r);
                        true
                    })
                })
            }),
        });
    }
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
            let (input, w) = (typed::<f32>(arg(ins, 0)?)?, typed::<f32>(arg(ins, 1)?)?);
            for_row_chunks(pool.as_deref(), flops, typed_mut::<f32>(outs[0])?, rows, g.out_w * oc, &|_, r, out| {
                rows_with_epilogue(epilogue.as_ref(), ins, oc, g.out_w * oc, 1, r, out, |r, out| {
                    conv::depthwise_conv2d(input, ic, mult, w, bias, &g, clamp, out, r);
                    true
                })
            })
        }),
    })
}

pub(crate) fn pool(op: &OpContext<'_>, ctx: &mut BackendContext, max: bool) -> Result<Built> {
    let OpParams::Pool2D { padding, stride, filter, activation } = op.op.params else { return Err(op.bad("missing Pool2D options")) };
    require_f32(op, &[0])?;
    let x = rank4(op, &op.input(0)?.shape, "input")?.to_vec();
    let clamp = clamp_of(op, activation)?;
    let g = window(op, &x, filter, stride, (1, 1), padding)?;
    let c = x[3];
    let pool = ctx.pool();
    let rows = g.batch * g.out_h;
    // One compare or add per window position and channel: the work measure that
    // decides whether the rows are worth splitting over the pool.
    let flops = rows * g.out_w * c * g.k_h * g.k_w;
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, c])],
        kernel: Box::new(move |ins, outs| {
            let i = typed::<f32>(arg(ins, 0)?)?;
            for_row_chunks(pool.as_deref(), flops, typed_mut::<f32>(outs[0])?, rows, g.out_w * c, &|_, r, o| {
                if max {
                    kpool::max_pool(i, c, &g, clamp, o, r)
                } else {
                    kpool::average_pool(i, c, &g, clamp, o, r)
                }
                true
            })
        }),
    })
}

pub(crate) fn fully_connected(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let OpParams::FullyConnected { activation, keep_num_dims, shuffled_weights, .. } = op.op.params else {
        return Err(op.bad("missing FullyConnected options"));
    };
    if shuffled_weights {
        return Err(op.unsupported("shuffled weights format"));
    }
    require_f32(op, &[0, 1, 2])?;
    let x = op.input(0)?.shape.clone();
    let w = op.input(1)?.shape.clone();
    if w.len() != 2 {
        return Err(op.bad(format!("weights must be 2-D, got {w:?}")));
    }
    let (out_n, in_n) = (w[0], w[1]);
    let total: usize = x.iter().product();
    if in_n == 0 || !total.is_multiple_of(in_n) {
        return Err(op.bad(format!("input {x:?} is not a multiple of the weights' input size {in_n}")));
    }
    let batch = total / in_n;
    check_bias(op, 2, out_n)?;
    let clamp = clamp_of(op, activation)?;
    // keep_num_dims keeps the input's leading dims: its last dim must be the rows' length.
    if keep_num_dims && x.last().is_some_and(|&l| l != in_n) {
        return Err(op.bad(format!("keep_num_dims needs the input's last dim {x:?} to be {in_n}")));
    }
    let out_shape = if keep_num_dims {
        let mut s = x.clone();
        if let Some(l) = s.last_mut() {
            *l = out_n;
        } else {
            // A rank-0 input is one row: the output is that row's out_n values.
            s = vec![out_n];
        }
        s
    } else {
        vec![batch, out_n]
    };
    let has_bias = op.opt_input(2).is_some();
    let mut weights = gemm_weights(op, ctx, out_n, 1, in_n, 1)?;
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let pk = weights.get(ins, has_bias)?;
            if !igemm::fully_connected(typed::<f32>(arg(ins, 0)?)?, batch, pk, clamp, typed_mut::<f32>(outs[0])?) {
                return Err(crate::error::Error::Runtime("fully-connected buffers do not match the planned shapes".into()));
            }
            Ok(())
        }),
    })
}

/// Shared by TRANSPOSE_CONV and MediaPipe's Convolution2DTransposeBias.
#[allow(clippy::too_many_arguments)]
pub(crate) fn transpose_conv_built(
    op: &OpContext<'_>,
    x: &[usize],
    w: &[usize],
    out_h: usize,
    out_w: usize,
    stride: (usize, usize),
    padding: Padding,
    clamp: Clamp,
    input_idx: usize,
    weight_idx: usize,
    bias_idx: Option<usize>,
) -> Result<Built> {
    let (oc, kh, kw, ic) = (w[0], w[1], w[2], w[3]);
    if ic != x[3] {
        return Err(op.bad(format!("filter {w:?} does not match input {x:?}")));
    }
    // Padding is that of the forward conv mapping the output back onto the input.
    let same = padding == Padding::Same;
    let pad = |o: usize, k: usize, s: usize, i: usize| if same { (((i.max(1) - 1) * s + k).saturating_sub(o)) / 2 } else { 0 };
    let g = Window {
        batch: x[0],
        in_h: out_h,
        in_w: out_w,
        out_h: x[1],
        out_w: x[2],
        k_h: kh,
        k_w: kw,
        stride_h: stride.0,
        stride_w: stride.1,
        dil_h: 1,
        dil_w: 1,
        pad_top: pad(out_h, kh, stride.0, x[1]),
        pad_left: pad(out_w, kw, stride.1, x[2]),
    };
    if let Some(b) = bias_idx {
        check_bias(op, b, oc)?;
    }
    Ok(Built {
        outputs: vec![(DType::F32, vec![x[0], out_h, out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let bias = match bias_idx {
                Some(b) if ins.get(b).copied().flatten().is_some() => Some(typed::<f32>(arg(ins, b)?)?),
                _ => None,
            };
            conv::transpose_conv2d(typed(arg(ins, input_idx)?)?, ic, typed(arg(ins, weight_idx)?)?, bias, oc, &g, clamp, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}

pub(crate) fn transpose_conv(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    require_f32(op, &[1, 2, 3])?;
    let out_shape = op.const_ints(0)?;
    let x = rank4(op, &op.input(2)?.shape, "input")?.to_vec();
    let w = rank4(op, &op.input(1)?.shape, "filter")?.to_vec();
    if out_shape.len() != 4 || out_shape.iter().any(|&d| d <= 0) || out_shape[0] as usize != x[0] || out_shape[3] as usize != w[0] {
        return Err(op.bad(format!("output_shape {out_shape:?} does not match input {x:?} / filter {w:?}")));
    }
    let clamp = clamp_of(op, activation)?;
    transpose_conv_built(op, &x, &w, out_shape[1] as usize, out_shape[2] as usize, stride, padding, clamp, 2, 1, Some(3))
}

pub(crate) fn batch_matmul(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::BatchMatMul { adj_x, adj_y, .. } = op.op.params else { return Err(op.bad("missing BatchMatMul options")) };
    let int_type = op.input(0)?.dtype;
    let int8 = matches!(int_type, DType::I8 | DType::I16);
    let hybrid = int_type == DType::F32 && op.input(1)?.dtype == DType::I8;
    if !int8 && !hybrid {
        require_f32(op, &[0, 1])?;
    } else if int8 && (op.input(1)?.dtype != int_type || op.outputs[0].dtype != int_type) {
        return Err(op.unsupported(format!("{} BATCH_MATMUL needs {0} operands and output", int_type.name())));
    }
    let a = op.input(0)?.shape.clone();
    let b = op.input(1)?.shape.clone();
    if a.len() < 2 || b.len() < 2 {
        return Err(op.bad(format!("operands must be at least 2-D, got {a:?} and {b:?}")));
    }
    let (ra, rb) = (a.len(), b.len());
    let (m, ka) = if adj_x { (a[ra - 1], a[ra - 2]) } else { (a[ra - 2], a[ra - 1]) };
    let (kb, n) = if adj_y { (b[rb - 1], b[rb - 2]) } else { (b[rb - 2], b[rb - 1]) };
    if ka != kb {
        return Err(op.bad(format!("inner dimensions differ: {a:?} x {b:?}")));
    }
    let batch = ferrite_kernels::elementwise::broadcast_shape(&a[..ra - 2], &b[..rb - 2])
        .ok_or_else(|| op.bad(format!("batch dims of {a:?} and {b:?} do not broadcast")))?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    // Batch index tables (8 bytes per batch) and transpose scratch are sized from
    // file shapes: bounded by the session limit before anything is allocated.
    let nb = op.checked_elements(&batch, 8)?;
    op.checked_elements(&out_shape, 4)?;
    op.checked_elements(&[m, ka], 4)?;
    op.checked_elements(&[ka, n], 4)?;
    let bstr = |s: &[usize]| -> Vec<usize> {
        // Flat batch index -> operand batch index, honouring broadcast.
        let sh = &s[..s.len() - 2];
        (0..nb)
            .map(|flat| {
                let mut rem = flat;
                let mut idx = 0;
                let mut mul = 1;
                for d in (0..batch.len()).rev() {
                    let i = rem % batch[d];
                    rem /= batch[d];
                    if d + sh.len() >= batch.len() {
                        let sd = d + sh.len() - batch.len();
                        idx += if sh[sd] == 1 { 0 } else { i } * mul;
                        mul *= sh[sd];
                    }
                }
                idx
            })
            .collect()
    };
    let (ia, ib) = (bstr(&a), bstr(&b));
    let k = ka;
    if int8 {
        return batch_matmul_int(op, (m, k, n), (adj_x, adj_y), ia, ib, out_shape);
    }
    if hybrid {
        return super::quant::batch_matmul_hybrid(op, (m, k, n), (adj_x, adj_y), ia, ib, out_shape);
    }
    // Transpose scratch, sized once here so runs do not allocate.
    let mut ta = vec![0.0f32; if adj_x { m * k } else { 0 }];
    let mut tb = vec![0.0f32; if adj_y { k * n } else { 0 }];
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let (av, bv) = (typed::<f32>(arg(ins, 0)?)?, typed::<f32>(arg(ins, 1)?)?);
            let out = typed_mut::<f32>(outs[0])?;
            for p in 0..nb {
                let asl = &av[ia[p] * m * k..][..m * k];
                let bsl = &bv[ib[p] * k * n..][..k * n];
                let asl = if adj_x {
                    ferrite_kernels::movement::transpose(asl, &[k, m], &[1, 0], &mut ta);
                    &ta[..]
                } else {
                    asl
                };
                let bsl = if adj_y {
                    ferrite_kernels::movement::transpose(bsl, &[n, k], &[1, 0], &mut tb);
                    &tb[..]
                } else {
                    bsl
                };
                gemm::matmul(asl, bsl, m, k, n, &mut out[p * m * n..][..m * n]);
            }
            Ok(())
        }),
    })
}

pub(crate) fn softmax(op: &OpContext<'_>, log: bool) -> Result<Built> {
    require_f32(op, &[0])?;
    let beta = match op.op.params {
        OpParams::Softmax { beta } => beta,
        _ => 1.0,
    };
    let s = op.input(0)?.shape.clone();
    let n = *s.last().ok_or_else(|| op.bad("softmax of a scalar"))?;
    Ok(Built {
        outputs: vec![(DType::F32, s)],
        kernel: Box::new(move |ins, outs| {
            if n == 0 {
                return Ok(());
            }
            if log {
                ksoftmax::log_softmax(typed(arg(ins, 0)?)?, n, typed_mut(outs[0])?)
            } else {
                ksoftmax::softmax(typed(arg(ins, 0)?)?, n, beta, typed_mut(outs[0])?)
            }
            Ok(())
        }),
    })
}

/// int8 / int16 BATCH_MATMUL as LiteRT: zero-point-corrected integer dot products
/// rescaled by a multiplier formed in single precision (as its prepare does); int16
/// (zero points 0) sums in 64 bits and rescales with the 16-bit reduced multiplier,
/// like the int16x8 convolutions (measured: the full one is off by 1 LSB at times).
fn batch_matmul_int(
    op: &OpContext<'_>,
    (m, k, n): (usize, usize, usize),
    (adj_x, adj_y): (bool, bool),
    ia: Vec<usize>,
    ib: Vec<usize>,
    out_shape: Vec<usize>,
) -> Result<Built> {
    let q = |t: Option<&crate::model::Quantization>, what: &str| {
        t.map(|q| (q.scale[0], q.zero_point[0] as i32)).ok_or_else(|| op.bad(format!("quantized BATCH_MATMUL {what} has no quantization parameters")))
    };
    let dtype = op.input(0)?.dtype;
    let (sa, za) = q(op.input(0)?.quant, "input 0")?;
    let (sb, zb) = q(op.input(1)?.quant, "input 1")?;
    let (so, zo) = q(op.outputs[0].quant.as_ref(), "output")?;
    let (mult, shift) = ferrite_kernels::quant::quantize_multiplier(f64::from(sa * sb / so));
    if dtype == DType::I16 {
        if za != 0 || zb != 0 || zo != 0 {
            return Err(op.bad("int16 BATCH_MATMUL requires zero points of 0"));
        }
        return Ok(Built {
            outputs: vec![(DType::I16, out_shape)],
            kernel: Box::new(move |ins, outs| {
                let (av, bv) = (typed::<i16>(arg(ins, 0)?)?, typed::<i16>(arg(ins, 1)?)?);
                let out = typed_mut::<i16>(outs[0])?;
                for (p, (&pa, &pb)) in ia.iter().zip(&ib).enumerate() {
                    let (asl, bsl) = (&av[pa * m * k..][..m * k], &bv[pb * k * n..][..k * n]);
                    for i in 0..m {
                        for j in 0..n {
                            let mut acc = 0i64;
                            for kk in 0..k {
                                let x = asl[if adj_x { kk * m + i } else { i * k + kk }];
                                let y = bsl[if adj_y { j * k + kk } else { kk * n + j }];
                                acc += i64::from(i32::from(x) * i32::from(y));
                            }
                            let v = ferrite_kernels::quant::multiply_by_quantized_multiplier_i64(acc, mult, shift);
                            out[(p * m + i) * n + j] = v.clamp(-32768, 32767) as i16;
                        }
                    }
                }
                Ok(())
            }),
        });
    }
    Ok(Built {
        outputs: vec![(DType::I8, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let (av, bv) = (typed::<i8>(arg(ins, 0)?)?, typed::<i8>(arg(ins, 1)?)?);
            let out = typed_mut::<i8>(outs[0])?;
            for (p, (&pa, &pb)) in ia.iter().zip(&ib).enumerate() {
                let (asl, bsl) = (&av[pa * m * k..][..m * k], &bv[pb * k * n..][..k * n]);
                for i in 0..m {
                    for j in 0..n {
                        let mut acc = 0i32;
                        for kk in 0..k {
                            let x = asl[if adj_x { kk * m + i } else { i * k + kk }];
                            let y = bsl[if adj_y { j * k + kk } else { kk * n + j }];
                            acc += (i32::from(x) - za) * (i32::from(y) - zb);
                        }
                        let v = ferrite_kernels::quant::multiply_by_quantized_multiplier(acc, mult, shift) + zo;
                        out[(p * m + i) * n + j] = v.clamp(-128, 127) as i8;
                    }
                }
            }
            Ok(())
        }),
    })
}
