//! Convolutions: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV — float (implicit GEMM on
//! prepacked panels, fused epilogues), int8 / uint8 / int16x8 (the int8 GEMM and exact
//! requantization), and hybrid (float activations, int8 weights) side by side.

use std::sync::{Arc, Mutex};

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::conv::{self, out_size_and_pad, Window};
#[cfg(feature = "type-float")]
use ferrite_kernels::conv3d;
use ferrite_kernels::igemm::{self, Isa, Packed};
use ferrite_kernels::quant::{self as kq, QConv};
use ferrite_kernels::{qgemm, Clamp};

use super::quant::*;
use super::{clamp_of, for_row_chunks, for_row_chunks_aligned, require_f32, rows_with_epilogue};
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext, PackKey, Packing};
use crate::error::{Detail, Error, Result};
use crate::model::DType;
use crate::ops::{OpParams, Padding};

/// The convolution family's builders, by op and element types.
pub(super) fn build(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        #[cfg(feature = "type-hybrid")]
        B::CONV_2D | B::DEPTHWISE_CONV_2D if op.is_hybrid() => super::linear::hybrid(op, code),
        #[cfg(feature = "type-int")]
        B::CONV_2D | B::DEPTHWISE_CONV_2D if op.is_int() => conv_int(op, code == B::DEPTHWISE_CONV_2D, ctx),
        #[cfg(feature = "type-float")]
        B::CONV_2D => conv2d(op, ctx),
        #[cfg(feature = "type-float")]
        B::DEPTHWISE_CONV_2D => depthwise(op, ctx),
        #[cfg(feature = "type-float")]
        B::CONV_3D => conv3d(op),
        #[cfg(feature = "type-float")]
        B::CONV_3D_TRANSPOSE => conv3d_transpose(op),
        // Reached only when a type feature left the op's kernel out of this build.
        #[allow(unreachable_patterns)]
        B::CONV_2D | B::DEPTHWISE_CONV_2D | B::CONV_3D | B::CONV_3D_TRANSPOSE => super::type_not_built(op),
        _ => return None,
    })
}

/// TRANSPOSE_CONV's builders (family `op-transpose-conv`), by element types.
pub(super) fn build_transpose(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    if code != B::TRANSPOSE_CONV {
        return None;
    }
    Some(match () {
        #[cfg(feature = "type-hybrid")]
        () if super::tconv_hybrid::is_hybrid(op) => super::tconv_hybrid::build(op),
        #[cfg(feature = "type-int")]
        () if op.opt_input(2).is_some_and(|d| matches!(d.dtype, DType::I8 | DType::U8 | DType::I16)) => transpose_conv_int(op),
        #[cfg(feature = "type-float")]
        () => transpose_conv(op, ctx),
        // Reached only when a type feature left the op's kernel out of this build.
        #[allow(unreachable_patterns)]
        () => super::type_not_built(op),
    })
}

pub(super) fn rank4<'s>(op: &OpContext<'_>, shape: &'s [usize], what: &str) -> Result<&'s [usize]> {
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
    // Each output pixel visits the window's taps inside the input: a window larger
    // than the input (a hostile filter of 2^31 rows under SAME padding) makes every
    // output read the whole input. Bound that work, before any channel, so such a
    // model is an error and not minutes of arithmetic.
    const MAX_TAP_VISITS: u128 = 1 << 32;
    let taps = |k: usize, d: usize, n: usize| (k.saturating_sub(1).saturating_mul(d).saturating_add(1)).min(n.max(1)) as u128;
    let visits = input[0] as u128 * oh as u128 * ow as u128 * taps(k.0, dil.0, input[1]) * taps(k.1, dil.1, input[2]);
    if visits > MAX_TAP_VISITS {
        return Err(Error::ResourceLimit(Detail::at(
            op.location(),
            format!("window {k:?} over input {input:?} visits {visits} input pixels (more than {MAX_TAP_VISITS})"),
        )));
    }
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

pub(super) fn check_bias(op: &OpContext<'_>, i: usize, n: usize) -> Result<()> {
    if let Some(b) = op.opt_input(i) {
        if b.shape.iter().product::<usize>() != n {
            return Err(op.bad(format!("bias has shape {:?}, expected {n} elements", b.shape)));
        }
    }
    Ok(())
}

/// Weights (and bias) as GEMM panels: from the session cache when constant,
/// otherwise a private copy repacked on every run.
pub(super) enum Weights {
    Cached(Arc<Packed>),
    PerRun(Packed),
}

/// GEMM packing of conv / FC weights `[n][taps][k]`; `merged_kw > 1` merges that
/// many filter columns into each tap (taps = kh, k = kw * in_c).
pub(super) fn gemm_weights(op: &OpContext<'_>, ctx: &mut BackendContext, n: usize, taps: usize, k: usize, merged_kw: usize) -> Result<Weights> {
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
    pub(super) fn get(&mut self, ins: &[Option<&[u8]>], has_bias: bool) -> Result<&Packed> {
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
    // One or two output channels (segmentation and saliency heads, often on the
    // largest maps): a depthwise pass per output channel and a channel sum, where a
    // GEMM tile would spend most of its multiply-adds on padded output channels.
    // Per pixel the GEMM costs about taps * in_c / 2 cycles, the channel sum about
    // in_c (scalar adds) plus the depthwise pass's taps * in_c / 16: so only filters
    // of 4 taps or more gain (a 1x1 head over 256 channels ran 3x slower this way).
    // Its scratch holds at least one output row of per-channel products: rows past
    // 64 Ki floats (256 KiB, far wider than any image) stay on the GEMM, which
    // bounds its own scratch per tile.
    if oc <= conv::FEW_OUTPUTS && kh * kw >= 4 && g.out_w.saturating_mul(ic) <= 1 << 16 && g.indices_fit(ic) {
        return conv2d_few_outputs(op, ctx, g, ic, oc, has_bias, clamp);
    }
    // First layers (1-4 input channels, at most 64 outputs, a filter of more than
    // one tap, rows at least one kernel block wide) on AVX-512: the direct kernel,
    // outputs along the lanes (it declines other CPUs and shapes, which take the
    // GEMM below).
    if ic <= conv::first::MAX_IN && oc <= conv::first::MAX_OUT && kh.saturating_mul(kw) > 1 {
        if let Some(built) = conv2d_first_layer(op, g, ic, oc, kh, kw, has_bias, clamp, ctx)? {
            return Ok(built);
        }
    }
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
    let packed = match &weights {
        Weights::Cached(p) => p,
        Weights::PerRun(p) => p,
    };
    let (template, group) = (packed.scratch(&g), packed.row_group(&g));
    let scratch: Vec<Mutex<igemm::ConvScratch>> = (0..ctx.threads).map(|_| Mutex::new(template.clone())).collect();
    let rows = g.batch * g.out_h;
    let flops = 2 * rows * g.out_w * oc * kh * kw * ic;
    let epilogue = op.epilogue.clone();
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let pk = weights.get(ins, has_bias)?;
            let input = typed::<f32>(arg(ins, 0)?)?;
            let out = typed_mut::<f32>(outs[0])?;
            if merged_kw > 1 {
                // Chunks of whole row groups, so the tiling is the same for any
                // thread count (as for the pixel chunks below).
                return for_row_chunks_aligned(pool.as_deref(), flops, out, rows, g.out_w * oc, group, &|i, r, out| {
                    let mut sc = scratch[i].lock().unwrap_or_else(|e| e.into_inner());
                    rows_with_epilogue(epilogue.as_ref(), ins, oc, g.out_w * oc, group, r, out, |r, out| igemm::conv2d(input, pk, &g, clamp, out, r, &mut sc))
                });
            }
            // Chunks of whole tiles of pixels: the tiling, and so every result, is
            // then the same for any thread count.
            let mr = pk.isa().mr();
            for_row_chunks_aligned(pool.as_deref(), flops, out, rows * g.out_w, oc, mr, &|i, p, out| {
                let mut sc = scratch[i].lock().unwrap_or_else(|e| e.into_inner());
                rows_with_epilogue(epilogue.as_ref(), ins, oc, oc, mr, p, out, |p, out| igemm::conv2d_pixels(input, pk, &g, clamp, out, p, &mut sc))
            })
        }),
    })
}

/// CONV_2D on [`conv::FirstLayer`], or `None` where it declines the shape or the
/// CPU. Constant weights are packed here, once for every session of the model (the
/// shared cache); others are repacked on every run.
#[allow(clippy::too_many_arguments)]
fn conv2d_first_layer(
    op: &OpContext<'_>,
    g: Window,
    ic: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    has_bias: bool,
    clamp: Clamp,
    ctx: &mut BackendContext,
) -> Result<Option<Built>> {
    let (w, bias) = (op.input(1)?, op.opt_input(2));
    let constant = w.constant && bias.is_none_or(|b| b.constant);
    // Filters past the kernel's tap limit are no first layer (and the probe below
    // must not be sized by an unchecked filter shape).
    if kh.checked_mul(kw).and_then(|t| t.checked_mul(ic)).is_none_or(|t| t > conv::first::MAX_TAPS) {
        return Ok(None);
    }
    // Whether the kernel takes this shape on this CPU, and its scratch size: a
    // layer of zeros answers both before anything is packed for real.
    let Some(probe) = conv::FirstLayer::new(&vec![0.0; oc * kh * kw * ic], None, oc, kh, kw, ic) else { return Ok(None) };
    // Rows narrower than one kernel block stay on the GEMM (see `block_pixels`).
    if g.out_w < probe.block_pixels() {
        return Ok(None);
    }
    // Its scratch holds the input rows the filter reaches, widened: sized from the
    // geometry, so bounded first.
    let Some(len) = probe.scratch_len(&g) else { return Ok(None) };
    op.checked_elements(&[len.max(1)], 4)?;
    let scratch: Vec<Mutex<conv::FirstScratch>> = (0..ctx.threads).map(|_| Mutex::new(probe.scratch(&g))).collect();
    enum Layer {
        /// Packed once from constants, shared by the model's sessions.
        Shared(Arc<conv::FirstLayer>),
        /// Repacked from the weights on every run.
        Own(Mutex<conv::FirstLayer>),
    }
    let layer = if constant {
        let key = PackKey { subgraph: op.subgraph, tensor: w.tensor, with: bias.map(|b| b.tensor), packing: Packing::FirstLayer };
        let shared = ctx.packed(key, || {
            let wv = typed::<f32>(w.value.ok_or_else(|| op.bad("constant weights without data"))?)?;
            let bv = bias.and_then(|b| b.value).map(typed::<f32>).transpose()?;
            conv::FirstLayer::new(wv, bv, oc, kh, kw, ic).ok_or_else(|| op.bad("first-layer kernel declined constant weights it took as zeros"))
        })?;
        Layer::Shared(shared)
    } else {
        Layer::Own(Mutex::new(probe))
    };
    let pool = ctx.pool();
    let rows = g.batch * g.out_h;
    let flops = 2 * rows * g.out_w * oc * kh * kw * ic;
    let epilogue = op.epilogue.clone();
    Ok(Some(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let input = typed::<f32>(arg(ins, 0)?)?;
            // Weights computed at run time are repacked into this session's own layer.
            let guard;
            let layer: &conv::FirstLayer = match &layer {
                Layer::Shared(shared) => shared,
                Layer::Own(own) => {
                    let mut l = own.lock().unwrap_or_else(|e| e.into_inner());
                    let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
                    l.repack(typed::<f32>(arg(ins, 1)?)?, bias);
                    guard = l;
                    &guard
                }
            };
            let out = typed_mut::<f32>(outs[0])?;
            // Every pixel's sum is the same wherever a chunk starts: any row split works.
            for_row_chunks(pool.as_deref(), flops, out, rows, g.out_w * oc, &|i, r, out| {
                let mut sc = scratch[i].lock().unwrap_or_else(|e| e.into_inner());
                rows_with_epilogue(epilogue.as_ref(), ins, oc, g.out_w * oc, 1, r, out, |r, out| layer.run(input, &g, clamp, out, r, &mut sc))
            })
        }),
    }))
}

/// CONV_2D with at most [`conv::FEW_OUTPUTS`] output channels, on
/// [`conv::conv2d_few_outputs`]; weights and bias are read as stored on every run.
fn conv2d_few_outputs(op: &OpContext<'_>, ctx: &mut BackendContext, g: Window, ic: usize, oc: usize, has_bias: bool, clamp: Clamp) -> Result<Built> {
    let scratch_len = conv::few_outputs_scratch(&g, ic);
    op.checked_elements(&[scratch_len], 4)?;
    // Scratch per thread, sized once here so runs do not allocate.
    let scratch: Vec<Mutex<Vec<f32>>> = (0..ctx.threads).map(|_| Mutex::new(vec![0.0; scratch_len])).collect();
    let pool = ctx.pool();
    let rows = g.batch * g.out_h;
    let flops = 2 * rows * g.out_w * oc * g.k_h * g.k_w * ic;
    let epilogue = op.epilogue.clone();
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let input = typed::<f32>(arg(ins, 0)?)?;
            let w = typed::<f32>(arg(ins, 1)?)?;
            let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
            let out = typed_mut::<f32>(outs[0])?;
            for_row_chunks(pool.as_deref(), flops, out, rows, g.out_w * oc, &|i, r, out| {
                let mut sc = scratch[i].lock().unwrap_or_else(|e| e.into_inner());
                rows_with_epilogue(epilogue.as_ref(), ins, oc, g.out_w * oc, 1, r, out, |r, out| {
                    conv::conv2d_few_outputs(input, ic, w, bias, oc, &g, clamp, out, r, &mut sc);
                    true
                })
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
    // The kernel refuses (panics on) a window whose input offsets could wrap
    // around: a huge stride or dilation is a model error here.
    if !g.indices_fit(oc) {
        return Err(op.bad(format!("stride {stride:?} and dilation {dilation:?} put input offsets out of range")));
    }
    let ic = x[3];
    let has_bias = op.opt_input(2).is_some();
    let pool = ctx.pool();
    let rows = g.batch * g.out_h;
    let flops = 2 * rows * g.out_w * oc * kh * kw;
    let epilogue = op.epilogue.clone();
    // A multiplier above 1 (first layers: 4-16 on 1-3 channels) runs as multiplier 1
    // over the input's channels repeated `mult` times into scratch once per run: the
    // copy costs one output-sized write, the multiplier-1 kernels are vectorized where
    // the general path goes pixel by pixel.
    // With AVX2 and no AVX-512 the kernel reads a multiplier straight from the input
    // and takes any stride in register tiles (8 channels a block), so neither the
    // repeat nor the tiled rows below pay off, except for fewer than 8 channels at
    // horizontal stride 1, where the rows run full width and a block would not.
    // NEON on aarch64 reads the multiplier the same way (4-channel blocks), and so
    // does AVX-512 (a lane permutation of one load), which also packs the pixels
    // of fewer than 8 channels into full vectors.
    let direct = conv::depthwise_direct_tiles() && (conv::depthwise_masks_tails() || oc >= 8 || g.stride_w > 1);
    let wide = if mult > 1 && !direct { Some(Mutex::new(vec![0.0f32; op.checked_elements(&[g.batch, g.in_h, g.in_w, oc], 4)?])) } else { None };
    // Channels the kernel sees.
    let kc = if wide.is_some() { oc } else { ic };
    // Runs the rows on the (possibly repeated) input.
    let with_input = move |ins: &[Option<&[u8]>], run: &mut dyn FnMut(&[f32]) -> Result<()>| -> Result<()> {
        let raw = typed::<f32>(arg(ins, 0)?)?;
        match &wide {
            Some(buf) => {
                let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
                conv::expand_channels(raw, ic, mult, &mut b);
                run(&b)
            }
            None => run(raw),
        }
    };
    // Horizontal stride 1, constant weights, and a channel count the 16-lane kernel
    // leaves a scalar remainder of (not a multiple of 16; without AVX-512 that
    // includes the divisors of 16, whose whole-pixel strips are AVX-512 code):
    // weights tiled along the output row once here, each tap then one flat
    // multiply-add per row. (With 16-multiple channels the register-tiled kernel is
    // faster: the tiled rows cost cache traffic.)
    let wt = op.input(1)?;
    let awkward = kc % 16 != 0 && !conv::depthwise_masks_tails();
    if g.stride_w == 1 && wt.constant && awkward && !direct {
        let bytes = wt.value.ok_or_else(|| op.bad("constant weights without data"))?;
        let key = PackKey { subgraph: op.subgraph, tensor: wt.tensor, with: None, packing: Packing::DepthwiseRows(g.out_w) };
        let tiled = ctx.packed(key, || Ok(conv::tile_depthwise(typed::<f32>(bytes)?, kc, kh * kw, g.out_w)))?;
        return Ok(Built {
            outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, oc])],
            kernel: Box::new(move |ins, outs| {
                let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
                let out = typed_mut::<f32>(outs[0])?;
                with_input(ins, &mut |input| {
                    for_row_chunks(pool.as_deref(), flops, &mut *out, rows, g.out_w * oc, &|_, r, out| {
                        rows_with_epilogue(epilogue.as_ref(), ins, oc, g.out_w * oc, 1, r, out, |r, out| {
                            conv::depthwise_rows(input, kc, &tiled, bias, &g, clamp, out, r);
                            true
                        })
                    })
                })
            }),
        });
    }
    let kmult = if kc == ic { mult } else { 1 };
    // Constant weights copied onto cache lines once (a model file's tensors lie at
    // whatever alignment it gives them): the AVX-512 tiles load a channel block of
    // weights per tap, which at 4-byte alignment spans two lines.
    let lined = match wt.value {
        Some(bytes) if wt.constant && conv::depthwise_masks_tails() => {
            let key = PackKey { subgraph: op.subgraph, tensor: wt.tensor, with: None, packing: Packing::Lines };
            Some(ctx.packed(key, || Ok(ferrite_kernels::aligned::LineVec::from_slice(typed::<f32>(bytes)?)))?)
        }
        _ => None,
    };
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.out_h, g.out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
            let w = match &lined {
                Some(l) => &l[..],
                None => typed::<f32>(arg(ins, 1)?)?,
            };
            let out = typed_mut::<f32>(outs[0])?;
            with_input(ins, &mut |input| {
                for_row_chunks(pool.as_deref(), flops, &mut *out, rows, g.out_w * oc, &|_, r, out| {
                    rows_with_epilogue(epilogue.as_ref(), ins, oc, g.out_w * oc, 1, r, out, |r, out| {
                        conv::depthwise_conv2d(input, kc, kmult, w, bias, &g, clamp, out, r);
                        true
                    })
                })
            })
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
    pool: Option<Arc<ferrite_kernels::parallel::ThreadPool>>,
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
    if let Some(built) = upsampling_transpose_conv(op, &g, ic, oc, clamp, input_idx, weight_idx, bias_idx, &pool)? {
        return Ok(built);
    }
    let rows = x[0] * out_h;
    let flops = 2 * x[0] * x[1] * x[2] * kh * kw * ic * oc;
    Ok(Built {
        outputs: vec![(DType::F32, vec![x[0], out_h, out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let bias = match bias_idx {
                Some(b) if ins.get(b).copied().flatten().is_some() => Some(typed::<f32>(arg(ins, b)?)?),
                _ => None,
            };
            let (input, w) = (typed::<f32>(arg(ins, input_idx)?)?, typed::<f32>(arg(ins, weight_idx)?)?);
            // Output rows split over the threads: each row gathers its own taps.
            for_row_chunks(pool.as_deref(), flops, typed_mut(outs[0])?, rows, out_w * oc, &|_, r, out| {
                conv::transpose_conv2d_rows(input, ic, w, bias, oc, &g, clamp, out, r);
                true
            })
        }),
    })
}

/// A transposed convolution whose filter equals its stride with no padding (the
/// learned upsampling of segmentation decoders): every input pixel then writes its
/// own `k_h x k_w` block of the output, and output row `y` is input row `y / k_h`
/// times the filter row `y % k_h` as a `[in_c] x [k_w * out_c]` matrix, which is
/// the output row's own layout. So each output row is one GEMM over the input
/// row's pixels, vectorized over `k_w * out_c`, where the general kernel takes a
/// dot product (and its horizontal sum) per output pixel and channel. None when
/// the op is not of that form or its weights or bias are not constant.
#[allow(clippy::too_many_arguments)]
fn upsampling_transpose_conv(
    op: &OpContext<'_>,
    g: &Window,
    ic: usize,
    oc: usize,
    clamp: Clamp,
    input_idx: usize,
    weight_idx: usize,
    bias_idx: Option<usize>,
    pool: &Option<Arc<ferrite_kernels::parallel::ThreadPool>>,
) -> Result<Option<Built>> {
    // `g` is the forward window: its output is this op's input.
    let (kh, kw) = (g.k_h, g.k_w);
    let (ih, iw, oh, ow) = (g.out_h, g.out_w, g.in_h, g.in_w);
    let blocks = kh == g.stride_h && kw == g.stride_w && g.pad_top == 0 && g.pad_left == 0 && oh == ih * kh && ow == iw * kw;
    let w = op.input(weight_idx)?;
    let bias = bias_idx.and_then(|b| op.opt_input(b));
    if !blocks || ic == 0 || oc == 0 || !w.constant || bias.is_some_and(|b| !b.constant) {
        return Ok(None);
    }
    let wv = typed::<f32>(w.value.ok_or_else(|| op.bad("constant weights without data"))?)?;
    let bv = bias.map(|b| b.value.ok_or_else(|| op.bad("constant bias without data")).and_then(typed::<f32>)).transpose()?;
    let n = kw * oc;
    op.checked_elements(&[kh, n, ic], 4)?;
    if wv.len() < oc * kh * kw * ic || bv.is_some_and(|b| b.len() < oc) {
        return Err(op.bad("weights or bias shorter than their shapes"));
    }
    // Filter row ky as GEMM weights [kx * oc + o][c], the bias repeated per column.
    let isa = Isa::for_channels(n);
    let tiled_bias: Vec<f32> = (0..n).map(|j| bv.map_or(0.0, |b| b[j % oc])).collect();
    let packs: Vec<Packed> = (0..kh)
        .map(|ky| {
            let mut rows = vec![0.0f32; n * ic];
            for kx in 0..kw {
                for o in 0..oc {
                    let src = &wv[((o * kh + ky) * kw + kx) * ic..][..ic];
                    rows[(kx * oc + o) * ic..][..ic].copy_from_slice(src);
                }
            }
            Packed::new(isa, &rows, Some(&tiled_bias), n, 1, ic)
        })
        .collect();
    let (rows, batch_rows) = (g.batch * oh, ow * oc);
    let flops = 2 * g.batch * ih * iw * kh * kw * ic * oc;
    let (pool, batch) = (pool.clone(), g.batch);
    Ok(Some(Built {
        outputs: vec![(DType::F32, vec![batch, oh, ow, oc])],
        kernel: Box::new(move |ins, outs| {
            let input = typed::<f32>(arg(ins, input_idx)?)?;
            if input.len() < batch * ih * iw * ic {
                return Err(super::runtime("transposed convolution input is shorter than its shape"));
            }
            for_row_chunks(pool.as_deref(), flops, typed_mut(outs[0])?, rows, batch_rows, &|_, r, out| {
                r.zip(out.chunks_exact_mut(batch_rows)).all(|(row, o)| {
                    let (b, y) = (row / oh, row % oh);
                    let line = &input[(b * ih + y / kh) * iw * ic..][..iw * ic];
                    igemm::fully_connected(line, iw, &packs[y % kh], clamp, o)
                })
            })
        }),
    }))
}

pub(crate) fn transpose_conv(op: &OpContext<'_>, ctx: &BackendContext) -> Result<Built> {
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    require_f32(op, &[1, 2, 3])?;
    let out_shape = op.const_ints(0)?;
    let x = rank4(op, &op.input(2)?.shape, "input")?.to_vec();
    let w = rank4(op, &op.input(1)?.shape, "filter")?.to_vec();
    if out_shape.len() != 4 || out_shape.iter().any(|&d| d <= 0) || out_shape[0] as usize != x[0] || out_shape[3] as usize != w[0] {
        return Err(op.bad(format!("output_shape {out_shape:?} does not match input {x:?} / filter {w:?}")));
    }
    let clamp = clamp_of(op, activation)?;
    transpose_conv_built(op, &x, &w, out_shape[1] as usize, out_shape[2] as usize, stride, padding, clamp, 2, 1, Some(3), ctx.pool())
}

pub(crate) fn conv_int(op: &OpContext<'_>, depthwise: bool, ctx: &mut crate::backend::BackendContext) -> Result<Built> {
    let kind = int_types(op)?;
    let (x, w) = (op.input(0)?, op.input(1)?);
    let (padding, stride, dilation, act) = match op.op.params {
        OpParams::Conv2D { padding, stride, dilation, activation } if !depthwise => (padding, stride, dilation, activation),
        OpParams::DepthwiseConv2D { padding, stride, dilation, activation, .. } if depthwise => (padding, stride, dilation, activation),
        _ => return Err(op.bad("missing convolution options")),
    };
    if x.shape.len() != 4 || w.shape.len() != 4 {
        return Err(op.bad("input and filter must be 4-D"));
    }
    let (in_c, kh, kw) = (x.shape[3], w.shape[1], w.shape[2]);
    let out_c = if depthwise { w.shape[3] } else { w.shape[0] };
    if (!depthwise && w.shape[3] != in_c) || (depthwise && (w.shape[0] != 1 || in_c == 0 || out_c % in_c != 0)) {
        return Err(op.bad(format!("filter {:?} does not match input {:?}", w.shape, x.shape)));
    }
    check_int_bias(op, out_c, x.dtype)?;
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let wq = w.quant.ok_or_else(|| op.bad("filter has no quantization parameters"))?;
    if wq.scale.len() != 1 && wq.scale.len() != out_c {
        return Err(op.bad(format!("{} filter scales for {out_c} channels", wq.scale.len())));
    }
    let g = window(op, &x.shape, (kh, kw), stride, dilation, padding)?;
    let mut q = QConv {
        g,
        in_c,
        out_c,
        depth_multiplier: if depthwise { out_c / in_c } else { 0 },
        in_zp,
        w_zp: wq.zero_point[0] as i32,
        rq: requant(op, in_scale, &wq.scale, act)?,
    };
    let out_shape = vec![g.batch, g.out_h, g.out_w, out_c];
    // Accumulators and the uint8 input copy are sized from file shapes: bounded first.
    op.checked_elements(&out_shape, 4)?;
    op.checked_elements(&x.shape, 1)?;
    if kind == IntKind::I16x8 {
        // Compiled out without `type-int16` (the dispatch refuses int16 ops then).
        if !cfg!(feature = "type-int16") {
            return super::type_not_built(op);
        }
        let bias = int16x8_setup(op, q.in_zp, q.w_zp, &q.rq)?;
        let acc = Mutex::new(vec![0i64; out_c]);
        return Ok(Built {
            outputs: vec![(DType::I16, out_shape)],
            kernel: Box::new(move |ins, outs| {
                let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
                kq::conv_i16(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, bias.as_deref(), &q, typed_mut(outs[0])?, &mut acc);
                Ok(())
            }),
        });
    }
    // Widened input lines a few times the input's size at most (a hostile
    // dilation could stretch them far past it).
    let dw_lines_fit =
        qgemm::Depthwise::scratch_bytes(&q).is_some_and(|b| b <= x.shape.iter().product::<usize>().saturating_mul(16 * q.depth_multiplier.max(1)).max(1 << 20));
    // Zero points inside the 8-bit type (the fast kernels' arithmetic relies on it).
    let zp_range = if kind == IntKind::U8 { 0..=255 } else { -128..=127 };
    let eight_bit = matches!(kind, IntKind::I8 | IntKind::U8) && zp_range.contains(&q.in_zp) && zp_range.contains(&q.w_zp) && w.constant;
    let has_bias = op.opt_input(2).is_some();
    if eight_bit && depthwise && dw_lines_fit {
        // Any channel multiplier: pairs of taps on widened input lines.
        let bytes = w.value.ok_or_else(|| op.bad("constant weights without data"))?;
        let unsigned = kind == IntKind::U8;
        let dw = Mutex::new(if unsigned { qgemm::Depthwise::new_u8(bytes, &q) } else { qgemm::Depthwise::new(typed::<i8>(bytes)?, &q) });
        return Ok(Built {
            outputs: vec![(x.dtype, out_shape)],
            kernel: Box::new(move |ins, outs| {
                let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
                let mut dw = dw.lock().unwrap_or_else(|e| e.into_inner());
                if unsigned {
                    qgemm::depthwise_u8(arg(ins, 0)?, &mut dw, bias, &q, typed_mut(outs[0])?);
                } else {
                    qgemm::depthwise_i8(arg(ins, 0)?, &mut dw, bias, &q, typed_mut(outs[0])?);
                }
                Ok(())
            }),
        });
    }
    if eight_bit && !depthwise {
        // Weights packed once for the int8 GEMM (uint8 ones shifted into int8).
        let bytes = w.value.ok_or_else(|| op.bad("constant weights without data"))?;
        let key = crate::backend::PackKey { subgraph: op.subgraph, tensor: w.tensor, with: None, packing: crate::backend::Packing::QGemm };
        let k = kh * kw * in_c;
        let unsigned = kind == IntKind::U8;
        let pk = ctx.packed(key, || {
            Ok(if unsigned {
                qgemm::QPacked::new(&bytes.iter().map(|&b| (b ^ 0x80) as i8).collect::<Vec<_>>(), out_c, k)
            } else {
                qgemm::QPacked::new(typed::<i8>(bytes)?, out_c, k)
            })
        })?;
        // The block buffers are the session's, shared by its convolutions.
        let shared = ctx.conv_buffers.clone();
        let scratch = Mutex::new(qgemm::ConvScratch::sharing(&pk, &q.rq, unsigned, &mut shared.lock().unwrap_or_else(|e| e.into_inner())));
        return Ok(Built {
            outputs: vec![(x.dtype, out_shape)],
            kernel: Box::new(move |ins, outs| {
                let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
                let mut s = scratch.lock().unwrap_or_else(|e| e.into_inner());
                let mut bufs = shared.lock().unwrap_or_else(|e| e.into_inner());
                if unsigned {
                    qgemm::conv_u8_in(arg(ins, 0)?, &pk, bias, &q, typed_mut(outs[0])?, &mut s, &mut bufs);
                } else {
                    qgemm::conv_i8_in(arg(ins, 0)?, &pk, bias, &q, typed_mut(outs[0])?, &mut s, &mut bufs);
                }
                Ok(())
            }),
        });
    }
    let flipped = if kind == IntKind::U8 {
        q.in_zp -= 128;
        q.w_zp -= 128;
        q.rq.shift_to_signed();
        Some(Unsigned::new(op, x.shape.iter().product())?)
    } else {
        None
    };
    let has_bias = op.opt_input(2).is_some();
    let acc = Mutex::new(vec![0i32; g.batch * g.out_h * g.out_w * out_c]);
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
            let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
            match &flipped {
                None => kq::conv_i8(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, bias, &q, typed_mut(outs[0])?, &mut acc),
                Some(u) => {
                    kq::conv_i8(&u.input(arg(ins, 0)?), &u.weights, bias, &q, typed_mut(outs[0])?, &mut acc);
                    kq::flip_sign_bits(outs[0]);
                }
            }
            Ok(())
        }),
    })
}

/// TRANSPOSE_CONV on int8 (per-channel int8 weights, int32 bias), uint8 (uint8
/// weights with a zero point, run through the int8 kernel shifted by 128) or
/// int16x8 (int64 bias, 64-bit sums): integer scatter of the zero-point-corrected
/// input, bias, per-channel requantization.
/// A TRANSPOSE_CONV's shapes, checked against each other: the filter `[oc, kh, kw, ic]`,
/// the input `[batch, h, w, ic]` (input 2), the constant output shape (input 0)
/// `[batch, out_h, out_w, oc]`, and the bias (input 3) `oc` long.
pub(super) struct TransposeGeometry {
    pub oc: usize,
    pub kh: usize,
    pub kw: usize,
    pub ic: usize,
    pub out_h: usize,
    pub out_w: usize,
}

/// Checks the shapes of the quantized and hybrid TRANSPOSE_CONVs (see
/// [`TransposeGeometry`]) and a non-zero stride.
pub(super) fn transpose_geometry(op: &OpContext<'_>, stride: (usize, usize)) -> Result<TransposeGeometry> {
    let (w, x) = (op.input(1)?, op.input(2)?);
    let out_shape = op.const_ints(0)?;
    if x.shape.len() != 4 || w.shape.len() != 4 || out_shape.len() != 4 || out_shape.iter().any(|&d| d <= 0) {
        return Err(op.bad(format!("TRANSPOSE_CONV of {:?} with filter {:?} to {out_shape:?}", x.shape, w.shape)));
    }
    let (oc, kh, kw, ic) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
    if ic != x.shape[3] || out_shape[0] as usize != x.shape[0] || out_shape[3] as usize != oc || stride.0 == 0 || stride.1 == 0 {
        return Err(op.bad(format!("output_shape {out_shape:?} does not match input {:?} / filter {:?}", x.shape, w.shape)));
    }
    if op.opt_input(3).is_some_and(|b| b.shape.iter().product::<usize>() != oc) {
        return Err(op.bad("bias size does not match the output channels"));
    }
    Ok(TransposeGeometry { oc, kh, kw, ic, out_h: out_shape[1] as usize, out_w: out_shape[2] as usize })
}

pub(crate) fn transpose_conv_int(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    let (w, x) = (op.input(1)?, op.input(2)?);
    let bias_type = op.opt_input(3).map(|b| b.dtype);
    let kind = match (x.dtype, w.dtype, op.outputs[0].dtype, bias_type) {
        (DType::I8, DType::I8, DType::I8, None | Some(DType::I32)) => IntKind::I8,
        (DType::U8, DType::U8, DType::U8, None | Some(DType::I32)) => IntKind::U8,
        (DType::I16, DType::I8, DType::I16, None | Some(DType::I64)) => IntKind::I16x8,
        _ => {
            return Err(op.unsupported(format!(
                "quantized TRANSPOSE_CONV of {} with {} weights (int8, uint8, and int16 with int8 weights and int64 bias, are implemented)",
                x.dtype.name(),
                w.dtype.name()
            )))
        }
    };
    let TransposeGeometry { oc, kh, kw, ic, out_h, out_w } = transpose_geometry(op, stride)?;
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let wq = w.quant.ok_or_else(|| op.bad("filter has no quantization parameters"))?;
    if wq.scale.len() != 1 && wq.scale.len() != oc {
        return Err(op.bad(format!("{} filter scales for {oc} channels", wq.scale.len())));
    }
    let mut rq = requant(op, in_scale, &wq.scale, activation)?;
    // Padding is that of the forward convolution mapping the output onto the input.
    let same = padding == crate::ops::Padding::Same;
    let pad = |o: usize, k: usize, s: usize, i: usize| if same { (((i.max(1) - 1) * s + k).saturating_sub(o)) / 2 } else { 0 };
    let g = ferrite_kernels::conv::Window {
        batch: x.shape[0],
        in_h: out_h,
        in_w: out_w,
        out_h: x.shape[1],
        out_w: x.shape[2],
        k_h: kh,
        k_w: kw,
        stride_h: stride.0,
        stride_w: stride.1,
        dil_h: 1,
        dil_w: 1,
        pad_top: pad(out_h, kh, stride.0, x.shape[1]),
        pad_left: pad(out_w, kw, stride.1, x.shape[2]),
    };
    let n_out = op.checked_elements(&[g.batch, out_h, out_w, oc], 8)?;
    if kind == IntKind::I16x8 {
        // Compiled out without `type-int16` (the dispatch refuses int16 ops then).
        if !cfg!(feature = "type-int16") {
            return super::type_not_built(op);
        }
        let bias = int16x8_setup_at(op, 3, in_zp, wq.zero_point[0] as i32, &rq)?;
        let acc = Mutex::new(vec![0i64; n_out]);
        return Ok(Built {
            outputs: vec![(DType::I16, vec![g.batch, out_h, out_w, oc])],
            kernel: Box::new(move |ins, outs| {
                let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
                kq::transpose_conv_i16(typed(arg(ins, 2)?)?, ic, typed(arg(ins, 1)?)?, oc, &g, bias.as_deref(), &rq, &mut acc, typed_mut(outs[0])?);
                Ok(())
            }),
        });
    }
    let (mut in_zp, mut w_zp) = (in_zp, wq.zero_point[0] as i32);
    let flipped = if kind == IntKind::U8 {
        in_zp -= 128;
        w_zp -= 128;
        rq.shift_to_signed();
        Some(Unsigned::new(op, x.shape.iter().product())?)
    } else {
        if w_zp != 0 {
            return Err(op.bad("int8 TRANSPOSE_CONV weights must have zero point 0"));
        }
        None
    };
    let has_bias = op.opt_input(3).is_some();
    let acc = Mutex::new(vec![0i32; n_out]);
    Ok(Built {
        outputs: vec![(x.dtype, vec![g.batch, out_h, out_w, oc])],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<i32>(arg(ins, 3)?)?) } else { None };
            let mut acc = acc.lock().unwrap_or_else(|e| e.into_inner());
            match &flipped {
                None => kq::transpose_conv_i8(typed(arg(ins, 2)?)?, ic, typed(arg(ins, 1)?)?, oc, &g, in_zp, w_zp, bias, &rq, &mut acc, typed_mut(outs[0])?),
                Some(u) => {
                    kq::transpose_conv_i8(&u.input(arg(ins, 2)?), ic, &u.weights, oc, &g, in_zp, w_zp, bias, &rq, &mut acc, typed_mut(outs[0])?);
                    // The uint8 results flip back from the int8 domain.
                    kq::flip_sign_bits(outs[0]);
                }
            }
            Ok(())
        }),
    })
}

/// CONV_3D (float32): input [n, d, h, w, c], filter [kd, kh, kw, c, out_c], optional bias.
#[cfg(feature = "type-float")]
fn conv3d(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Conv3D { padding, stride, dilation, activation } = op.op.params else { return Err(op.bad("missing Conv3D options")) };
    require_f32(op, &[0, 1, 2])?;
    let g = conv3d::conv3d_geometry(&op.input(0)?.shape, &op.input(1)?.shape, stride, dilation, padding == Padding::Same).map_err(|e| op.bad(e))?;
    let has_bias = op.opt_input(2).is_some();
    if has_bias {
        check_bias(op, 2, g.out_c)?;
    }
    let clamp = clamp_of(op, activation)?;
    Ok(Built {
        outputs: vec![(DType::F32, vec![g.batch, g.output[0], g.output[1], g.output[2], g.out_c])],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
            conv3d::conv3d(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, bias, &g, clamp, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}

/// CONV_3D_TRANSPOSE (float32): output_shape (constant), filter [kd, kh, kw, out_c, c],
/// input [n, d, h, w, c], optional bias [out_c].
#[cfg(feature = "type-float")]
fn conv3d_transpose(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Conv3D { padding, stride, dilation, activation } = op.op.params else { return Err(op.bad("missing Conv3D options")) };
    require_f32(op, &[1, 2, 3])?;
    let target = op.const_ints(0)?;
    let out: Vec<usize> =
        target.iter().map(|&d| usize::try_from(d).ok().filter(|&d| d > 0)).collect::<Option<_>>().ok_or_else(|| op.bad(format!("output_shape {target:?}")))?;
    let g =
        conv3d::conv3d_transpose_geometry(&out, &op.input(1)?.shape, &op.input(2)?.shape, stride, dilation, padding == Padding::Same).map_err(|e| op.bad(e))?;
    let has_bias = op.opt_input(3).is_some();
    if has_bias {
        check_bias(op, 3, g.in_c)?;
    }
    let clamp = clamp_of(op, activation)?;
    Ok(Built {
        outputs: vec![(DType::F32, out)],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<f32>(arg(ins, 3)?)?) } else { None };
            conv3d::conv3d_transpose(typed(arg(ins, 2)?)?, typed(arg(ins, 1)?)?, bias, &g, clamp, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}
