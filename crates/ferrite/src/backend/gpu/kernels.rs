//! Builders: one op -> a [`GpuOp`] (its dispatches and bindings). Output shapes
//! and the op's validity come from the reference backend's build, so the GPU
//! accepts exactly the shapes and attributes the reference kernels do; the
//! builders here only derive each shader's parameters. Every data tensor is
//! float32; an op outside what the shaders cover is refused with the reason
//! (`Error::Unsupported`), and the next backend of the list takes it.

use super::device::GpuDevice;
use super::segment::{Bind, Dispatch, GpuOp};
use crate::backend::{BackendContext, OpContext, OutSpec, PackKey, Packing};
use crate::error::Result;
use crate::model::{BuiltinOp as B, DType, OpCode};
use crate::ops::{Activation, OpParams, Padding};

/// Rank of the index space the strided shaders (copy, binary, reduce) walk.
const RANK: usize = 6;
/// Invocations per workgroup of the one-dimensional shaders.
const WORKGROUP: u64 = 64;

/// The state of one op's build.
struct Build<'a, 'o> {
    dev: &'a GpuDevice,
    op: &'a OpContext<'o>,
    ctx: &'a mut BackendContext,
    dispatches: Vec<Dispatch>,
    /// Bytes of each input read at run time.
    inputs: Vec<Option<usize>>,
    /// Tensors stored as float16 (2 bytes an element on the GPU instead of 4).
    half: bool,
}

fn f(v: f32) -> u32 {
    v.to_bits()
}

fn u(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| crate::error::Error::Unsupported(format!("{v} exceeds the GPU kernels' 32-bit indices").into()))
}

fn i(v: i64) -> Result<u32> {
    i32::try_from(v).map(|x| x as u32).map_err(|_| crate::error::Error::Unsupported(format!("{v} exceeds the GPU kernels' 32-bit indices").into()))
}

/// Bytes of one tensor element on the GPU.
fn elem_bytes(half: bool) -> usize {
    if half {
        2
    } else {
        4
    }
}

/// Little-endian float32 bytes as float16 bytes (round to nearest even; a value
/// past float16's range becomes ±inf, as the GPU's own conversion would make it).
pub(super) fn to_f16_bytes(v: &[u8]) -> Vec<u8> {
    v.chunks_exact(4).flat_map(|c| half::f16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()).collect()
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Clamp bounds of a fused activation; TANH and SIGN_BIT are not fused on the GPU.
fn bounds(op: &OpContext<'_>, a: Activation) -> Result<(u32, u32)> {
    Ok(match a {
        Activation::None => (f(f32::NEG_INFINITY), f(f32::INFINITY)),
        Activation::Relu => (f(0.0), f(f32::INFINITY)),
        Activation::Relu6 => (f(0.0), f(6.0)),
        Activation::ReluN1To1 => (f(-1.0), f(1.0)),
        other => return Err(op.unsupported(format!("fused activation {other:?} on the GPU"))),
    })
}

impl<'a, 'o> Build<'a, 'o> {
    /// A dispatch of `shader` with `params` over `groups` workgroups.
    fn dispatch(&mut self, shader: &'static str, params: &[u32], binds: Vec<Bind>, groups: [u32; 3]) -> Result<()> {
        let pipeline = self.dev.pipeline(shader, self.half)?;
        let params = self.dev.upload(shader, bytemuck::cast_slice(params));
        self.dispatches.push(Dispatch { pipeline, params, binds, groups });
        Ok(())
    }

    /// A one-invocation-per-element dispatch over `n` elements.
    fn elementwise(&mut self, shader: &'static str, params: &[u32], binds: Vec<Bind>, n: usize) -> Result<()> {
        let groups = self.dev.fold((n as u64).div_ceil(WORKGROUP))?;
        self.dispatch(shader, params, binds, groups)
    }

    /// Input `k` bound as an operand: a constant is uploaded once per session (keyed
    /// by its tensor), anything else is read at run time.
    fn operand(&mut self, k: usize) -> Result<Bind> {
        let d = self.op.input(k)?;
        if d.dtype != DType::F32 {
            return Err(self.op.unsupported(format!("input {k} is {}, the GPU kernels take float32", d.dtype.name())));
        }
        match d.value {
            Some(v) => {
                let packing = if self.half { Packing::GpuF16 } else { Packing::Gpu };
                let key = PackKey { subgraph: self.op.subgraph, tensor: d.tensor, with: None, packing };
                let (dev, half) = (self.dev, self.half);
                // float16 weights are converted once, here, and shared like the others.
                let buf = self.ctx.packed(key, || Ok(if half { dev.upload("constant", &to_f16_bytes(v)) } else { dev.upload("constant", v) }))?;
                Ok(Bind::Const(buf))
            }
            None => {
                let bytes = numel(&d.shape) * elem_bytes(self.half);
                if self.inputs.len() <= k {
                    self.inputs.resize(k + 1, None);
                }
                self.inputs[k] = Some(bytes);
                Ok(Bind::In(k))
            }
        }
    }

    /// Optional input `k` (a bias): its binding and whether it exists.
    fn optional(&mut self, k: usize) -> Result<(Bind, u32)> {
        match self.op.opt_input(k) {
            Some(_) => Ok((self.operand(k)?, 1)),
            None => Ok((Bind::Zero, 0)),
        }
    }

    fn shape(&self, k: usize) -> Result<Vec<usize>> {
        Ok(self.op.input(k)?.shape.clone())
    }
}

/// Builds `op` for the GPU given the output specs the reference backend inferred.
pub(super) fn build(dev: &GpuDevice, op: &OpContext<'_>, ctx: &mut BackendContext, outs: &[OutSpec]) -> Result<GpuOp> {
    if let Some((_, s)) = outs.iter().find(|(t, _)| *t != DType::F32) {
        return Err(op.unsupported(format!("a non-float32 output {s:?}; the GPU kernels are float32")));
    }
    if op.inputs.iter().flatten().any(|d| d.value.is_some() && !d.constant) {
        return Err(op.unsupported("built at run time (data-dependent shapes) stays on the host"));
    }
    if outs.iter().chain(op.inputs.iter().flatten().map(|d| (d.dtype, d.shape.clone())).collect::<Vec<_>>().iter()).any(|(_, s)| s.contains(&0)) {
        return Err(op.unsupported("an empty tensor"));
    }
    let half = ctx.gpu.half;
    let mut b = Build { dev, op, ctx, dispatches: Vec::new(), inputs: vec![None; op.inputs.len()], half };
    let out = &outs.first().ok_or_else(|| op.bad("no output"))?.1;
    let n_out = numel(out);
    let code = match &op.op.code {
        OpCode::Builtin(code) => Some(*code),
        OpCode::Custom(name) if name == "Convolution2DTransposeBias" => {
            transpose_conv_bias(&mut b, out)?;
            None
        }
        _ => return Err(op.unsupported("no GPU kernel for this op")),
    };
    match code {
        None => {}
        Some(code) => match code {
            B::CONV_2D => conv(&mut b, out)?,
            B::DEPTHWISE_CONV_2D => depthwise(&mut b, out)?,
            B::FULLY_CONNECTED => fully_connected(&mut b, out)?,
            B::BATCH_MATMUL => batch_matmul(&mut b, out)?,
            B::TRANSPOSE_CONV => transpose_conv(&mut b, out)?,
            B::ADD | B::SUB | B::MUL | B::DIV | B::MAXIMUM | B::MINIMUM | B::SQUARED_DIFFERENCE | B::PRELU => binary(&mut b, code, out)?,
            B::RELU
            | B::RELU6
            | B::RELU_N1_TO_1
            | B::RELU_0_TO_1
            | B::HARD_SWISH
            | B::LEAKY_RELU
            | B::LOGISTIC
            | B::TANH
            | B::GELU
            | B::ABS
            | B::NEG
            | B::SQRT
            | B::RSQRT
            | B::SQUARE
            | B::EXP
            | B::ELU => unary(&mut b, code, n_out)?,
            B::MAX_POOL_2D | B::AVERAGE_POOL_2D => pool(&mut b, code == B::MAX_POOL_2D, out)?,
            B::MEAN | B::SUM | B::REDUCE_MAX | B::REDUCE_MIN => reduce(&mut b, code, out)?,
            B::SOFTMAX => softmax(&mut b, n_out)?,
            B::CONCATENATION => concatenation(&mut b, out)?,
            B::PAD | B::PADV2 => pad(&mut b, out)?,
            B::TRANSPOSE => transpose(&mut b, out)?,
            B::SLICE | B::STRIDED_SLICE => slice(&mut b, code, out)?,
            B::DEPTH_TO_SPACE | B::SPACE_TO_DEPTH => depth_space(&mut b, code == B::DEPTH_TO_SPACE, out)?,
            B::RESIZE_BILINEAR | B::RESIZE_NEAREST_NEIGHBOR => resize(&mut b, code == B::RESIZE_BILINEAR, out)?,
            other => return Err(op.unsupported(format!("no GPU kernel for {}", other.name()))),
        },
    }
    let Build { dispatches, mut inputs, .. } = b;
    inputs.resize(op.inputs.len(), None);
    Ok(GpuOp { dispatches, inputs, outputs: outs.iter().map(|(_, s)| numel(s) * elem_bytes(half)).collect(), half })
}

/// SAME padding before the first element: half of what covering the output needs.
fn same_pad(padding: Padding, input: usize, output: usize, kernel: usize, stride: usize, dilation: usize) -> usize {
    match padding {
        Padding::Same => {
            let extent = (kernel.max(1) - 1) * dilation + 1;
            ((output.max(1) - 1) * stride + extent).saturating_sub(input) / 2
        }
        Padding::Valid => 0,
    }
}

fn rank4(op: &OpContext<'_>, s: &[usize]) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(s).map_err(|_| op.unsupported(format!("shape {s:?} is not 4-D")))
}

fn conv(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::Conv2D { padding, stride, dilation, activation } = op.op.params else { return Err(op.bad("missing Conv2D options")) };
    let [n, h, w, c] = rank4(op, &b.shape(0)?)?;
    let [o, kh, kw, gc] = rank4(op, &b.shape(1)?)?;
    let [_, oh, ow, _] = rank4(op, out)?;
    let (lo, hi) = bounds(op, activation)?;
    let (pt, pl) = match op.input_pad {
        Some([t, _, l, _]) => (t, l),
        None => (same_pad(padding, h, oh, kh, stride.0, dilation.0), same_pad(padding, w, ow, kw, stride.1, dilation.1)),
    };
    let groups = c / gc.max(1);
    let x = b.operand(0)?;
    let wt = b.operand(1)?;
    let (bias, has_bias) = b.optional(2)?;
    if kh == 1 && kw == 1 && stride == (1, 1) && pt == 0 && pl == 0 && groups == 1 && (oh, ow) == (h, w) {
        // A 1x1 convolution is a GEMM of the pixels [N*H*W, C] by the filter [O, C].
        let m = n * h * w;
        return gemm(b, [m, o, c, 1], [c, 1, 0], [c, 1, 0], (lo, hi), has_bias, vec![x, wt, bias, Bind::Out(0)]);
    }
    let go = o / groups.max(1);
    let params = [
        u(numel(out))?,
        u(h)?,
        u(w)?,
        u(c)?,
        u(oh)?,
        u(ow)?,
        u(o)?,
        u(kh)?,
        u(kw)?,
        u(stride.0)?,
        u(stride.1)?,
        u(dilation.0)?,
        u(dilation.1)?,
        u(pt)?,
        u(pl)?,
        lo,
        hi,
        has_bias,
        u(gc)?,
        u(go)?,
    ];
    b.elementwise("conv", &params, vec![x, wt, bias, Bind::Out(0)], numel(out))
}

fn depthwise(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::DepthwiseConv2D { padding, stride, dilation, activation, .. } = op.op.params else { return Err(op.bad("missing DepthwiseConv2D options")) };
    let [_, h, w, c] = rank4(op, &b.shape(0)?)?;
    let [_, kh, kw, oc] = rank4(op, &b.shape(1)?)?;
    let [_, oh, ow, _] = rank4(op, out)?;
    let (lo, hi) = bounds(op, activation)?;
    let (pt, pl) = match op.input_pad {
        Some([t, _, l, _]) => (t, l),
        None => (same_pad(padding, h, oh, kh, stride.0, dilation.0), same_pad(padding, w, ow, kw, stride.1, dilation.1)),
    };
    let mult = oc / c.max(1);
    let x = b.operand(0)?;
    let wt = b.operand(1)?;
    let (bias, has_bias) = b.optional(2)?;
    let params = [
        u(numel(out))?,
        u(h)?,
        u(w)?,
        u(c)?,
        u(oh)?,
        u(ow)?,
        u(oc)?,
        u(kh)?,
        u(kw)?,
        u(stride.0)?,
        u(stride.1)?,
        u(dilation.0)?,
        u(dilation.1)?,
        u(pt)?,
        u(pl)?,
        lo,
        hi,
        has_bias,
        u(mult.max(1))?,
    ];
    b.elementwise("depthwise", &params, vec![x, wt, bias, Bind::Out(0)], numel(out))
}

/// The tiled GEMM: `dims` [M, N, K, batch], A strides [m, k, batch], B strides
/// (as [N, K]) [n, k, batch]; binds: A, B, bias, C.
fn gemm(b: &mut Build<'_, '_>, dims: [usize; 4], a: [usize; 3], bs: [usize; 3], (lo, hi): (u32, u32), has_bias: u32, binds: Vec<Bind>) -> Result<()> {
    let [m, n, k, batch] = dims;
    let m_tiles = m.div_ceil(16);
    let lin = (m_tiles * batch) as u64;
    let max = u64::from(b.dev.limits.max_compute_workgroups_per_dimension.max(1));
    let z = lin.div_ceil(max);
    let y = lin.div_ceil(z);
    if z > max {
        return Err(b.op.unsupported("GEMM grid exceeds the adapter's limits"));
    }
    let params = [u(m)?, u(n)?, u(k)?, u(batch)?, u(a[0])?, u(a[1])?, u(a[2])?, u(bs[0])?, u(bs[1])?, u(bs[2])?, lo, hi, has_bias, u(m_tiles)?];
    b.dispatch("gemm", &params, binds, [u(n.div_ceil(16))?, y as u32, z as u32])
}

fn fully_connected(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::FullyConnected { activation, shuffled_weights: false, .. } = op.op.params else {
        return Err(op.unsupported("fully-connected options (shuffled weights) the GPU kernel does not take"));
    };
    let w = b.shape(1)?;
    let &[n, k] = &w[..] else { return Err(op.unsupported(format!("weights {w:?} are not 2-D"))) };
    let m = numel(out) / n.max(1);
    let (lo, hi) = bounds(op, activation)?;
    let x = b.operand(0)?;
    let wt = b.operand(1)?;
    let (bias, has_bias) = b.optional(2)?;
    gemm(b, [m, n, k, 1], [k, 1, 0], [k, 1, 0], (lo, hi), has_bias, vec![x, wt, bias, Bind::Out(0)])
}

fn batch_matmul(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::BatchMatMul { adj_x, adj_y, .. } = op.op.params else { return Err(op.bad("missing BatchMatMul options")) };
    let (xs, ys) = (b.shape(0)?, b.shape(1)?);
    if xs.len() < 2 || ys.len() < 2 || out.len() < 2 {
        return Err(op.unsupported("BATCH_MATMUL below rank 2"));
    }
    let (xr, xc) = (xs[xs.len() - 2], xs[xs.len() - 1]);
    let (yr, yc) = (ys[ys.len() - 2], ys[ys.len() - 1]);
    let (m, k) = if adj_x { (xc, xr) } else { (xr, xc) };
    let n = if adj_y { yr } else { yc };
    let batch = numel(&out[..out.len() - 2]);
    let (bx, by) = (numel(&xs[..xs.len() - 2]), numel(&ys[..ys.len() - 2]));
    // Batches broadcast only whole (one side has one): anything else stays on the CPU.
    if !((bx == batch || bx == 1) && (by == batch || by == 1)) {
        return Err(op.unsupported("BATCH_MATMUL with partly broadcast batch dimensions"));
    }
    let a = if adj_x { [1, m, if bx == 1 { 0 } else { m * k }] } else { [k, 1, if bx == 1 { 0 } else { m * k }] };
    let bs = if adj_y { [k, 1, if by == 1 { 0 } else { n * k }] } else { [1, n, if by == 1 { 0 } else { n * k }] };
    let x = b.operand(0)?;
    let y = b.operand(1)?;
    gemm(b, [m, n, k, batch], a, bs, (f(f32::NEG_INFINITY), f(f32::INFINITY)), 0, vec![x, y, Bind::Zero, Bind::Out(0)])
}

fn transpose_conv(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::TransposeConv { padding, stride, activation } = op.op.params else { return Err(op.bad("missing TransposeConv options")) };
    transposed(b, out, padding, stride, activation, [2, 1, 3])
}

/// MediaPipe's `Convolution2DTransposeBias`: input, weights, bias; options are
/// int32 padding (1 SAME, 2 VALID), stride width, stride height (checked by the
/// registered op's build, which gave the output shape).
fn transpose_conv_bias(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let o = op.custom_options;
    let int = |i: usize| o.get(4 * i..4 * i + 4).map(|v| i32::from_le_bytes([v[0], v[1], v[2], v[3]]));
    let (Some(pad), Some(sw), Some(sh)) = (int(0), int(1), int(2)) else { return Err(op.bad("custom options hold fewer than 12 bytes")) };
    let padding = if pad == 1 { Padding::Same } else { Padding::Valid };
    let stride = (usize::try_from(sh).map_err(|_| op.bad("stride"))?, usize::try_from(sw).map_err(|_| op.bad("stride"))?);
    transposed(b, out, padding, stride, Activation::None, [0, 1, 2])
}

/// A transposed convolution with its inputs at `at` = [input, weights, bias].
fn transposed(b: &mut Build<'_, '_>, out: &[usize], padding: Padding, stride: (usize, usize), activation: Activation, at: [usize; 3]) -> Result<()> {
    let op = b.op;
    let [_, h, w, c] = rank4(op, &b.shape(at[0])?)?;
    let [o, kh, kw, _] = rank4(op, &b.shape(at[1])?)?;
    let [_, oh, ow, _] = rank4(op, out)?;
    let (lo, hi) = bounds(op, activation)?;
    let pad = |out: usize, k: usize, s: usize, inp: usize| match padding {
        Padding::Same => ((inp.max(1) - 1) * s + k).saturating_sub(out) / 2,
        Padding::Valid => 0,
    };
    let (pt, pl) = (pad(oh, kh, stride.0, h), pad(ow, kw, stride.1, w));
    let wt = b.operand(at[1])?;
    let x = b.operand(at[0])?;
    let (bias, has_bias) = b.optional(at[2])?;
    let params = [u(numel(out))?, u(h)?, u(w)?, u(c)?, u(oh)?, u(ow)?, u(o)?, u(kh)?, u(kw)?, u(stride.0)?, u(stride.1)?, u(pt)?, u(pl)?, lo, hi, has_bias];
    b.elementwise("transpose_conv", &params, vec![x, wt, bias, Bind::Out(0)], numel(out))
}

/// `shape` right-aligned into [`RANK`] dimensions.
fn pad_rank(op: &OpContext<'_>, shape: &[usize]) -> Result<[usize; RANK]> {
    if shape.len() > RANK {
        return Err(op.unsupported(format!("rank {} above {RANK}", shape.len())));
    }
    let mut r = [1; RANK];
    r[RANK - shape.len()..].copy_from_slice(shape);
    Ok(r)
}

fn binary(b: &mut Build<'_, '_>, code: B, out: &[usize]) -> Result<()> {
    let op = b.op;
    let activation = match op.op.params {
        OpParams::Binary { activation, .. } => activation,
        _ => Activation::None,
    };
    let (lo, hi) = bounds(op, activation)?;
    let code_of = match code {
        B::ADD => 0,
        B::SUB => 1,
        B::MUL => 2,
        B::DIV => 3,
        B::MAXIMUM => 4,
        B::MINIMUM => 5,
        B::SQUARED_DIFFERENCE => 6,
        _ => 7,
    };
    let dims = pad_rank(op, out)?;
    let bstrides = |s: &[usize]| -> Result<[usize; RANK]> {
        let full = pad_rank(op, s)?;
        let st = strides(&full);
        let mut r = [0; RANK];
        for d in 0..RANK {
            r[d] = if full[d] == 1 && dims[d] != 1 { 0 } else { st[d] };
        }
        Ok(r)
    };
    let (sa, sb) = (bstrides(&b.shape(0)?)?, bstrides(&b.shape(1)?)?);
    let mut params = vec![u(numel(out))?, code_of, lo, hi];
    for v in dims.iter().chain(&sa).chain(&sb) {
        params.push(u(*v)?);
    }
    let x = b.operand(0)?;
    let y = b.operand(1)?;
    b.elementwise("binary", &params, vec![x, y, Bind::Out(0)], numel(out))
}

fn unary(b: &mut Build<'_, '_>, code: B, n: usize) -> Result<()> {
    let op = b.op;
    let inf = f32::INFINITY;
    let (which, a, c) = match code {
        B::RELU => (0, 0.0, inf),
        B::RELU6 => (0, 0.0, 6.0),
        B::RELU_N1_TO_1 => (0, -1.0, 1.0),
        B::RELU_0_TO_1 => (0, 0.0, 1.0),
        B::HARD_SWISH => (1, 0.0, 0.0),
        B::LEAKY_RELU => match op.op.params {
            OpParams::LeakyRelu { alpha } => (2, alpha, 0.0),
            _ => return Err(op.bad("missing LeakyRelu options")),
        },
        B::LOGISTIC => (3, 0.0, 0.0),
        B::TANH => (4, 0.0, 0.0),
        B::GELU => match op.op.params {
            OpParams::Gelu { approximate: true } => (6, 0.0, 0.0),
            _ => (5, 0.0, 0.0),
        },
        B::ABS => (7, 0.0, 0.0),
        B::NEG => (8, 0.0, 0.0),
        B::SQRT => (9, 0.0, 0.0),
        B::RSQRT => (10, 0.0, 0.0),
        B::SQUARE => (11, 0.0, 0.0),
        B::EXP => (12, 0.0, 0.0),
        _ => (13, 0.0, 0.0),
    };
    let x = b.operand(0)?;
    b.elementwise("unary", &[u(n)?, which, f(a), f(c)], vec![x, Bind::Out(0)], n)
}

fn pool(b: &mut Build<'_, '_>, is_max: bool, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::Pool2D { padding, stride, filter, activation } = op.op.params else { return Err(op.bad("missing Pool2D options")) };
    let [_, h, w, c] = rank4(op, &b.shape(0)?)?;
    let [_, oh, ow, _] = rank4(op, out)?;
    let (lo, hi) = bounds(op, activation)?;
    let (pt, pl) = (same_pad(padding, h, oh, filter.0, stride.0, 1), same_pad(padding, w, ow, filter.1, stride.1, 1));
    let x = b.operand(0)?;
    let params = [
        u(numel(out))?,
        u(h)?,
        u(w)?,
        u(c)?,
        u(oh)?,
        u(ow)?,
        u(filter.0)?,
        u(filter.1)?,
        u(stride.0)?,
        u(stride.1)?,
        u(pt)?,
        u(pl)?,
        u32::from(is_max),
        lo,
        hi,
    ];
    b.elementwise("pool", &params, vec![x, Bind::Out(0)], numel(out))
}

fn reduce(b: &mut Build<'_, '_>, code: B, out: &[usize]) -> Result<()> {
    let op = b.op;
    let shape = b.shape(0)?;
    let rank = shape.len();
    if rank > RANK {
        return Err(op.unsupported(format!("rank {rank} above {RANK}")));
    }
    let mut reduced = vec![false; rank];
    for a in op.const_ints(1)? {
        let a = if a < 0 { a + rank as i64 } else { a };
        if let Some(r) = usize::try_from(a).ok().and_then(|a| reduced.get_mut(a)) {
            *r = true;
        }
    }
    let st = strides(&shape);
    // Kept dimensions (the output's elements, in order) and reduced ones, each with
    // its stride into the input, padded to RANK with size-1 dimensions.
    let (mut kd, mut ks, mut rd, mut rs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for d in 0..rank {
        if reduced[d] {
            rd.push(shape[d]);
            rs.push(st[d]);
        } else {
            kd.push(shape[d]);
            ks.push(st[d]);
        }
    }
    let count = numel(&rd);
    if numel(&kd) != numel(out) {
        return Err(op.unsupported("reduction output does not match its axes"));
    }
    let fill = |v: &mut Vec<usize>, with: usize| {
        while v.len() < RANK {
            v.insert(0, with);
        }
    };
    fill(&mut kd, 1);
    fill(&mut ks, 0);
    fill(&mut rd, 1);
    fill(&mut rs, 0);
    let which = match code {
        B::MEAN => 0,
        B::SUM => 1,
        B::REDUCE_MAX => 2,
        _ => 3,
    };
    let mut params = vec![u(numel(out))?, which, u(count)?];
    for v in kd.iter().chain(&ks).chain(&rd).chain(&rs) {
        params.push(u(*v)?);
    }
    let x = b.operand(0)?;
    b.elementwise("reduce", &params, vec![x, Bind::Out(0)], numel(out))
}

fn softmax(b: &mut Build<'_, '_>, n: usize) -> Result<()> {
    let op = b.op;
    let OpParams::Softmax { beta } = op.op.params else { return Err(op.bad("missing Softmax options")) };
    let shape = b.shape(0)?;
    let len = *shape.last().ok_or_else(|| op.unsupported("SOFTMAX of a scalar"))?;
    let rows = n / len.max(1);
    let x = b.operand(0)?;
    b.elementwise("softmax", &[u(rows)?, u(len)?, f(beta)], vec![x, Bind::Out(0)], rows)
}

/// A copy of every element of a `dims` index space: y[dst + Σ c·dst_strides] =
/// x[src + Σ c·src_strides].
fn copy(b: &mut Build<'_, '_>, from: Bind, dims: &[usize], src: (i64, &[i64]), dst: (i64, &[i64])) -> Result<()> {
    let op = b.op;
    if dims.len() > RANK {
        return Err(op.unsupported(format!("rank {} above {RANK}", dims.len())));
    }
    let lead = RANK - dims.len();
    let n = numel(dims);
    let mut params = vec![u(n)?, i(src.0)?, i(dst.0)?];
    for d in 0..RANK {
        params.push(if d < lead { 1 } else { u(dims[d - lead])? });
    }
    for s in [src.1, dst.1] {
        for d in 0..RANK {
            params.push(if d < lead { 0 } else { i(s[d - lead])? });
        }
    }
    b.elementwise("copy", &params, vec![from, Bind::Out(0)], n)
}

fn signed(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

fn concatenation(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::Concatenation { axis, activation: Activation::None } = op.op.params else {
        return Err(op.unsupported("CONCATENATION with a fused activation"));
    };
    let rank = out.len() as i64;
    let axis = usize::try_from(if axis < 0 { i64::from(axis) + rank } else { i64::from(axis) }).map_err(|_| op.bad("axis"))?;
    let ost = signed(&strides(out));
    // One copy per input, each writing its slab of the output: any number of
    // inputs, never more than two buffers bound per dispatch.
    let mut at = 0usize;
    for k in 0..op.inputs.len() {
        let s = b.shape(k)?;
        let from = b.operand(k)?;
        copy(b, from, &s, (0, &signed(&strides(&s))), (at as i64 * ost.get(axis).copied().unwrap_or(0), &ost))?;
        at += s.get(axis).copied().unwrap_or(1);
    }
    Ok(())
}

fn pad(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let s = b.shape(0)?;
    let pads = op.const_ints(1)?;
    let value = match op.opt_input(2) {
        Some(d) => match (d.value, d.dtype) {
            (Some(v), DType::F32) if v.len() >= 4 => f32::from_le_bytes([v[0], v[1], v[2], v[3]]),
            _ => return Err(op.unsupported("a PADV2 value computed at run time")),
        },
        None => 0.0,
    };
    if pads.len() != 2 * s.len() {
        return Err(op.unsupported("paddings do not match the input rank"));
    }
    let ost = signed(&strides(out));
    let base: i64 = (0..s.len()).map(|d| pads[2 * d] * ost[d]).sum();
    b.elementwise("fill", &[u(numel(out))?, f(value)], vec![Bind::Out(0)], numel(out))?;
    let x = b.operand(0)?;
    copy(b, x, &s, (0, &signed(&strides(&s))), (base, &ost))
}

fn transpose(b: &mut Build<'_, '_>, out: &[usize]) -> Result<()> {
    let op = b.op;
    let s = b.shape(0)?;
    let perm = op.const_ints(1)?;
    let ist = signed(&strides(&s));
    // Walk the output in order; output dimension d reads input dimension perm[d].
    let src: Vec<i64> = perm.iter().map(|&p| usize::try_from(p).ok().and_then(|p| ist.get(p).copied()).unwrap_or(0)).collect();
    let x = b.operand(0)?;
    copy(b, x, out, (0, &src), (0, &signed(&strides(out))))
}

fn slice(b: &mut Build<'_, '_>, code: B, out: &[usize]) -> Result<()> {
    let op = b.op;
    let (shape, starts, steps, counts) = if code == B::SLICE {
        let s = b.shape(0)?;
        let begin = op.const_ints(1)?;
        let n = s.len();
        (s, begin, vec![1; n], out.to_vec())
    } else {
        let (shape, starts, steps, counts, _) = crate::backend::reference::strided_slice_plan(op)?;
        (shape, starts, steps, counts)
    };
    if numel(&counts) != numel(out) {
        return Err(op.unsupported("slice plan does not match the output"));
    }
    let ist = signed(&strides(&shape));
    let base: i64 = starts.iter().zip(&ist).map(|(a, s)| a * s).sum();
    let src: Vec<i64> = steps.iter().zip(&ist).map(|(a, s)| a * s).collect();
    let x = b.operand(0)?;
    copy(b, x, &counts, (base, &src), (0, &signed(&strides(&counts))))
}

fn depth_space(b: &mut Build<'_, '_>, to_space: bool, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::BlockSize(bs) = op.op.params else { return Err(op.bad("missing block size")) };
    let [n, h, w, c] = rank4(op, &b.shape(0)?)?;
    let x = b.operand(0)?;
    let [_, oh, ow, oc] = rank4(op, out)?;
    let bs = bs as i64;
    if to_space {
        // The input as [N, H, W, bs, bs, C'] (contiguous), written to
        // out[n, h*bs + by, w*bs + bx, c].
        let cp = oc as i64;
        let (oh, ow) = (oh as i64, ow as i64);
        let dims = [n, h, w, bs as usize, bs as usize, oc];
        let dst = [oh * ow * cp, bs * ow * cp, bs * cp, ow * cp, cp, 1];
        copy(b, x, &dims, (0, &signed(&strides(&dims))), (0, &dst))
    } else {
        // The input as [N, OH, bs, OW, bs, C] (contiguous), written to
        // out[n, oh, ow, (by*bs + bx)*C + c].
        let cc = c as i64;
        let dims = [n, oh, bs as usize, ow, bs as usize, c];
        let ocs = oc as i64;
        let dst = [oh as i64 * ow as i64 * ocs, ow as i64 * ocs, bs * cc, ocs, cc, 1];
        copy(b, x, &dims, (0, &signed(&strides(&dims))), (0, &dst))
    }
}

fn resize(b: &mut Build<'_, '_>, bilinear: bool, out: &[usize]) -> Result<()> {
    let op = b.op;
    let OpParams::Resize { align_corners, half_pixel_centers } = op.op.params else { return Err(op.bad("missing Resize options")) };
    let [_, h, w, c] = rank4(op, &b.shape(0)?)?;
    let [_, oh, ow, _] = rank4(op, out)?;
    let scale = |i: usize, o: usize| if align_corners && o > 1 { (i as f32 - 1.0) / (o as f32 - 1.0) } else { i as f32 / o as f32 };
    let x = b.operand(0)?;
    let params = [
        u(numel(out))?,
        u(h)?,
        u(w)?,
        u(c)?,
        u(oh)?,
        u(ow)?,
        f(scale(h, oh)),
        f(scale(w, ow)),
        u32::from(bilinear),
        u32::from(align_corners),
        u32::from(half_pixel_centers),
    ];
    b.elementwise("resize", &params, vec![x, Bind::Out(0)], numel(out))
}
