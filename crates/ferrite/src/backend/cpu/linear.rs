//! FULLY_CONNECTED and BATCH_MATMUL: float GEMM/GEMV, int8 / uint8 / int16x8, and hybrid
//! (activations quantized per row at run time) side by side.

use std::sync::Mutex;

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::gemm;
use ferrite_kernels::hybrid::{self, HybridMatMul, HybridMatMulScratch};
use ferrite_kernels::igemm::{self};
use ferrite_kernels::qgemm;
use ferrite_kernels::qmatmul::{self, QMatMul};
use ferrite_kernels::quant::{self as kq, QConv, Requant};

use super::conv::{gemm_weights, window};
use super::quant::*;
use super::{clamp_of, require_f32};
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams};

/// The fully-connected / matmul family's builders, by op and element types.
pub(super) fn build(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        #[cfg(feature = "type-hybrid")]
        B::FULLY_CONNECTED if op.is_hybrid() => hybrid(op, code),
        #[cfg(feature = "type-int")]
        B::FULLY_CONNECTED if op.is_int() => fully_connected_int(op, ctx),
        #[cfg(feature = "type-float")]
        B::FULLY_CONNECTED => fully_connected(op, ctx),
        B::BATCH_MATMUL => batch_matmul(op, ctx),
        // Reached only when a type feature left the op's kernel out of this build.
        #[allow(unreachable_patterns)]
        B::FULLY_CONNECTED => super::type_not_built(op),
        _ => return None,
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
    super::conv::check_bias(op, 2, out_n)?;
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

pub(crate) fn batch_matmul(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
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
    // Each element type's kernels are linked only into builds with its feature
    // (`features_for` names them by the same operand types).
    let built = match (int8, hybrid) {
        (true, _) => cfg!(feature = "type-int"),
        (false, true) => cfg!(feature = "type-hybrid"),
        (false, false) => cfg!(feature = "type-float"),
    };
    if !built {
        return super::type_not_built(op);
    }
    if int8 {
        return batch_matmul_int(op, (m, k, n), (adj_x, adj_y), ia, ib, out_shape);
    }
    if hybrid {
        return batch_matmul_hybrid(op, (m, k, n), (adj_x, adj_y), ia, ib, out_shape);
    }
    // A constant right operand shared by every batch, with the left operand's
    // batches not broadcast: all batches' rows are one fully-connected product
    // through the GEMM kernels (B packed once into panels), instead of the
    // portable row-by-row loop (spectrogram filter banks: [frames, bins] x [bins, mels]).
    let bt = op.input(1)?;
    if !adj_x && bt.constant && ib.iter().all(|&i| i == 0) && ia.iter().enumerate().all(|(p, &i)| i == p) {
        let bytes = bt.value.ok_or_else(|| op.bad("constant operand without data"))?;
        let isa = igemm::Isa::for_channels(n);
        op.checked_elements(&[(n.div_ceil(isa.nr()) * isa.nr()).max(1), k.max(1)], 4)?;
        let key = crate::backend::PackKey { subgraph: op.subgraph, tensor: bt.tensor, with: None, packing: crate::backend::Packing::GemmColumns(isa, adj_y) };
        let pk = ctx.packed(key, || {
            let b = typed::<f32>(bytes)?;
            let b = b.get(..k * n).ok_or_else(|| op.bad("constant operand shorter than its shape"))?;
            // Packed takes [n][k] (output channel major): B^T, or B itself under adj_y.
            if adj_y {
                return Ok(igemm::Packed::new(isa, b, None, n, 1, k));
            }
            let mut t = vec![0.0f32; k * n];
            ferrite_kernels::movement::transpose(b, &[k, n], &[1, 0], &mut t);
            Ok(igemm::Packed::new(isa, &t, None, n, 1, k))
        })?;
        let rows = nb * m;
        return Ok(Built {
            outputs: vec![(DType::F32, out_shape)],
            kernel: Box::new(move |ins, outs| {
                if !igemm::fully_connected(typed::<f32>(arg(ins, 0)?)?, rows, &pk, ferrite_kernels::Clamp::NONE, typed_mut::<f32>(outs[0])?) {
                    return Err(crate::error::Error::Runtime("batch matmul buffers do not match the planned shapes".into()));
                }
                Ok(())
            }),
        });
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

/// int8 / int16 BATCH_MATMUL as LiteRT (`qmatmul`): zero-point-corrected integer
/// dot products, one fixed-point rescale; int16 requires zero points of 0.
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
    // The real multiplier is formed in single precision, as LiteRT's prepare does.
    let (multiplier, shift) = kq::quantize_multiplier(f64::from(sa * sb / so));
    let q = QMatMul { m, k, n, adj_x, adj_y, a_zp: za, b_zp: zb, out_zp: zo, multiplier, shift };
    if dtype == DType::I16 {
        // Compiled out without `type-int16` (the dispatch refuses int16 ops then).
        if !cfg!(feature = "type-int16") {
            return super::type_not_built(op);
        }
        if za != 0 || zb != 0 || zo != 0 {
            return Err(op.bad("int16 BATCH_MATMUL requires zero points of 0"));
        }
        return Ok(Built {
            outputs: vec![(DType::I16, out_shape)],
            kernel: Box::new(move |ins, outs| {
                qmatmul::batch_matmul_i16(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, &ia, &ib, &q, typed_mut(outs[0])?);
                Ok(())
            }),
        });
    }
    Ok(Built {
        outputs: vec![(DType::I8, out_shape)],
        kernel: Box::new(move |ins, outs| {
            qmatmul::batch_matmul_i8(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, &ia, &ib, &q, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}

pub(crate) fn fully_connected_int(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let kind = int_types(op)?;
    let OpParams::FullyConnected { activation, keep_num_dims, .. } = op.op.params else { return Err(op.bad("missing FullyConnected options")) };
    let (x, w) = (op.input(0)?, op.input(1)?);
    if w.shape.len() != 2 {
        return Err(op.bad("weights must be 2-D"));
    }
    let (out_n, in_n) = (w.shape[0], w.shape[1]);
    // Sizes the uint8 path's input scratch: bounded before anything is allocated.
    let total = op.checked_elements(&x.shape, 1)?;
    if in_n == 0 || !total.is_multiple_of(in_n) {
        return Err(op.bad(format!("input {:?} is not a multiple of {in_n}", x.shape)));
    }
    let batch = total / in_n;
    // The kernels read one bias per output row.
    check_int_bias(op, out_n, x.dtype)?;
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let wq = w.quant.ok_or_else(|| op.bad("weights have no quantization parameters"))?;
    if wq.scale.len() != 1 && wq.scale.len() != out_n {
        return Err(op.bad(format!("{} weight scales for {out_n} outputs", wq.scale.len())));
    }
    let mut rq = requant(op, in_scale, &wq.scale, activation)?;
    let (mut in_zp, mut w_zp) = (in_zp, wq.zero_point[0] as i32);
    let flipped = if kind == IntKind::U8 {
        in_zp -= 128;
        w_zp -= 128;
        rq.shift_to_signed();
        Some(Unsigned::new(op, total)?)
    } else {
        None
    };
    // keep_num_dims keeps the input's leading dims: its last dim must be the rows' length.
    if keep_num_dims && x.shape.last().is_some_and(|&l| l != in_n) {
        return Err(op.bad(format!("keep_num_dims needs the input's last dim {:?} to be {in_n}", x.shape)));
    }
    let out_shape = if keep_num_dims {
        let mut s = x.shape.clone();
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
    if kind == IntKind::I16x8 {
        // Compiled out without `type-int16` (the dispatch refuses int16 ops then).
        if !cfg!(feature = "type-int16") {
            return super::type_not_built(op);
        }
        let bias = int16x8_setup(op, in_zp, w_zp, &rq)?;
        return Ok(Built {
            outputs: vec![(DType::I16, out_shape)],
            kernel: Box::new(move |ins, outs| {
                kq::fully_connected_i16(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, bias.as_deref(), batch, in_n, out_n, &rq, typed_mut(outs[0])?);
                Ok(())
            }),
        });
    }
    let has_bias = op.opt_input(2).is_some();
    // LiteRT 2.3.0's reference kernels round an int8 layer's requantized product once,
    // with one weight scale as with a scale per output row (measured on converter
    // models of both kinds: rounding twice left 22 of 43,000 values 1 LSB off, where
    // the first rounding meets an exact half).
    let i8_rounding = kq::Rounding::Single;
    if let (None, Some(bytes), true) = (&flipped, w.value.filter(|_| w.constant), out_n >= 8 && (-128..=127).contains(&in_zp) && (-128..=127).contains(&w_zp)) {
        // int8 with constant weights: the rows as 1x1 "pixels" of the int8 GEMM,
        // requantized with one rounding as above. A layer of a few outputs (a
        // classifier's last) stays on the plain dot products, which cost less than the GEMM's setup there.
        let g = ferrite_kernels::conv::Window::rows(batch);
        let q = QConv { g, in_c: in_n, out_c: out_n, depth_multiplier: 0, in_zp, w_zp, rq };
        // Packed once for every session of the model (the kernel reads only the packing).
        let key = crate::backend::PackKey { subgraph: op.subgraph, tensor: op.input(1)?.tensor, with: None, packing: crate::backend::Packing::QGemm };
        let pk = ctx.packed(key, || Ok(qgemm::QPacked::new(typed::<i8>(bytes)?, out_n, in_n)))?;
        // A constant bias (or none) with the constant weights and zero points
        // fixes each output's starting value: computed here once, not per run.
        let const_bias = match op.opt_input(2) {
            None => Some(None),
            Some(b) => b.value.filter(|_| b.constant).map(|v| typed::<i32>(v).map(Some)).transpose()?,
        };
        // The kernel is the op's own (`FnMut`): its scratch needs no lock.
        if let Some(bias) = const_bias {
            let mut fc = qgemm::FullyConnectedI8::new(&pk, bias, q);
            return Ok(Built {
                outputs: vec![(x.dtype, out_shape)],
                kernel: Box::new(move |ins, outs| {
                    fc.run(arg(ins, 0)?, &pk, typed_mut(outs[0])?);
                    Ok(())
                }),
            });
        }
        let mut scratch = qgemm::ConvScratch::with_rounding(&pk, &q.rq, i8_rounding);
        return Ok(Built {
            outputs: vec![(x.dtype, out_shape)],
            kernel: Box::new(move |ins, outs| {
                let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
                qgemm::conv_i8(arg(ins, 0)?, &pk, bias, &q, typed_mut(outs[0])?, &mut scratch);
                Ok(())
            }),
        });
    }
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let bias = if has_bias { Some(typed::<i32>(arg(ins, 2)?)?) } else { None };
            match &flipped {
                None => kq::fully_connected_i8(
                    typed(arg(ins, 0)?)?,
                    typed(arg(ins, 1)?)?,
                    bias,
                    batch,
                    in_n,
                    out_n,
                    in_zp,
                    w_zp,
                    &rq,
                    i8_rounding,
                    typed_mut(outs[0])?,
                ),
                Some(u) => {
                    // LiteRT rounds uint8 fully-connected products once (measured against 2.3.0).
                    let r = kq::Rounding::Single;
                    kq::fully_connected_i8(&u.input(arg(ins, 0)?), &u.weights, bias, batch, in_n, out_n, in_zp, w_zp, &rq, r, typed_mut(outs[0])?);
                    kq::flip_sign_bits(outs[0]);
                }
            }
            Ok(())
        }),
    })
}

/// Hybrid (dynamic-range) convolution and fully-connected layers: float input and
/// output, int8 weights. Each batch row of the input is quantized symmetrically at
/// run time, multiplied in integers, and rescaled by `row scale x weight scale`.
pub(crate) fn hybrid(op: &OpContext<'_>, code: ferrite_format::ops::BuiltinOp) -> Result<Built> {
    use ferrite_format::ops::BuiltinOp as B;
    let (x, w) = (op.input(0)?, op.input(1)?);
    if x.dtype != DType::F32 || w.dtype != DType::I8 || op.outputs[0].dtype != DType::F32 || op.opt_input(2).is_some_and(|b| b.dtype != DType::F32) {
        return Err(op.unsupported("hybrid kernels take float32 input, int8 weights and float32 bias"));
    }
    let wq = w.quant.ok_or_else(|| op.bad("weights have no quantization parameters"))?;
    if wq.zero_point.iter().any(|&z| z != 0) {
        return Err(op.unsupported("hybrid weights with a nonzero zero point"));
    }
    let w_scales = wq.scale.clone();
    let has_bias = op.opt_input(2).is_some();
    let (act, batch, out_shape, q): (Activation, usize, Vec<usize>, Option<QConv>) = match (code, &op.op.params) {
        (B::FULLY_CONNECTED, OpParams::FullyConnected { activation, keep_num_dims, .. }) => {
            // The kernel reads out_n rows of in_n weights.
            if w.shape.len() != 2 {
                return Err(op.bad(format!("weights must be 2-D, got {:?}", w.shape)));
            }
            let in_n = w.shape[1];
            let total = op.checked_elements(&x.shape, 4)?;
            if in_n == 0 || !total.is_multiple_of(in_n) {
                return Err(op.bad(format!("input {:?} is not a multiple of {in_n}", x.shape)));
            }
            let out_n = w.shape[0];
            // keep_num_dims keeps the input's leading dims: its last dim must be the rows' length.
            if *keep_num_dims && x.shape.last().is_some_and(|&l| l != in_n) {
                return Err(op.bad(format!("keep_num_dims needs the input's last dim {:?} to be {in_n}", x.shape)));
            }
            let shape = if *keep_num_dims {
                let mut s = x.shape.clone();
                if let Some(l) = s.last_mut() {
                    *l = out_n;
                } else {
                    // A rank-0 input is one row: the output is that row's out_n values.
                    s = vec![out_n];
                }
                s
            } else {
                vec![total / in_n, out_n]
            };
            (*activation, total / in_n, shape, None)
        }
        (B::CONV_2D | B::DEPTHWISE_CONV_2D, params) => {
            let depthwise = code == B::DEPTHWISE_CONV_2D;
            let (padding, stride, dilation, act) = match params {
                OpParams::Conv2D { padding, stride, dilation, activation } if !depthwise => (*padding, *stride, *dilation, *activation),
                OpParams::DepthwiseConv2D { padding, stride, dilation, activation, .. } if depthwise => (*padding, *stride, *dilation, *activation),
                _ => return Err(op.bad("missing convolution options")),
            };
            if x.shape.len() != 4 || w.shape.len() != 4 {
                return Err(op.bad("input and filter must be 4-D"));
            }
            let in_c = x.shape[3];
            let out_c = if depthwise { w.shape[3] } else { w.shape[0] };
            if (!depthwise && w.shape[3] != in_c) || (depthwise && (w.shape[0] != 1 || in_c == 0 || out_c % in_c != 0)) {
                return Err(op.bad(format!("filter {:?} does not match input {:?}", w.shape, x.shape)));
            }
            let g = window(op, &x.shape, (w.shape[1], w.shape[2]), stride, dilation, padding)?;
            let rq = Requant { multiplier: vec![], shift: vec![], out_zp: 0, min: 0, max: 0 };
            let q = QConv { g, in_c, out_c, depth_multiplier: if depthwise { out_c / in_c } else { 0 }, in_zp: 0, w_zp: 0, rq };
            (act, g.batch, vec![g.batch, g.out_h, g.out_w, out_c], Some(q))
        }
        _ => return Err(op.unsupported("hybrid op")),
    };
    let clamp = super::clamp_of(op, act)?;
    let out_c = *out_shape.last().unwrap_or(&1);
    // One float bias per output channel, as the kernel reads it.
    if let Some(b) = op.opt_input(2).filter(|b| b.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(out_c)) {
        return Err(op.bad(format!("bias {:?} does not have one value per output channel ({out_c})", b.shape)));
    }
    let out_len = op.checked_elements(&out_shape, 4)?;
    if w_scales.len() != 1 && w_scales.len() != out_c {
        return Err(op.bad(format!("{} weight scales for {out_c} channels", w_scales.len())));
    }
    let in_len = op.checked_elements(&x.shape, 4)?;
    // LiteRT quantizes each batch asymmetrically for per-channel hybrid convolution
    // (and depthwise), and for fully-connected when its option asks; symmetrically
    // otherwise.
    let asymmetric = match op.op.params {
        OpParams::FullyConnected { asymmetric_quantize_inputs, .. } => asymmetric_quantize_inputs,
        _ => code == B::DEPTHWISE_CONV_2D || (code == B::CONV_2D && w_scales.len() > 1),
    };
    // Weight row sums take the input zero points' share out of fully-connected sums.
    let row_sums: Vec<i32> = match (&q, w.value) {
        (None, Some(bytes)) if asymmetric => hybrid::row_sums(typed::<i8>(bytes)?, w.shape.get(1).copied().unwrap_or(0)),
        (None, None) if asymmetric => return Err(op.unsupported("asymmetric hybrid FULLY_CONNECTED with weights computed at run time")),
        _ => vec![],
    };
    // Run-time scratch, sized once here: quantized input, accumulators, row scales,
    // row zero points.
    let scratch = Mutex::new((vec![0i8; in_len], vec![0i32; out_len], vec![0.0f32; batch], vec![0i32; batch]));
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let (input, weights) = (typed::<f32>(arg(ins, 0)?)?, typed::<i8>(arg(ins, 1)?)?);
            let bias = if has_bias { Some(typed::<f32>(arg(ins, 2)?)?) } else { None };
            let out = typed_mut::<f32>(outs[0])?;
            let mut guard = scratch.lock().unwrap_or_else(|e| e.into_inner());
            let (qx, acc, row_scale, row_zp) = &mut *guard;
            if batch == 0 {
                // An empty batch has no rows (and no row zero points) to work on.
                return Ok(());
            }
            let row = in_len / batch.max(1);
            hybrid::quantize_rows(input, row, asymmetric, qx, row_scale, row_zp);
            match &q {
                Some(q) => {
                    // One input zero point for the whole convolution, as LiteRT's kernel takes.
                    if row_zp.iter().any(|&z| z != row_zp[0]) {
                        return Err(super::runtime("hybrid convolution over batches with different input zero points"));
                    }
                    let q = QConv { in_zp: row_zp[0], ..q.clone() };
                    kq::conv_acc_i8(qx, weights, &q, acc)
                }
                None => hybrid::fully_connected_acc(qx, weights, batch, row, out_c, &row_sums, row_zp, acc),
            }
            hybrid::rescale(acc, out_c, out_len / batch.max(1), &w_scales, row_scale, bias, clamp, out);
            Ok(())
        }),
    })
}

/// Hybrid BATCH_MATMUL (float left operand, int8 right operand) as LiteRT computes
/// it: each row of the left operand quantized to int8 (symmetrically, or with its
/// own zero point when the op asks), integer dot products, the zero point's share
/// removed through the right operand's column sums, and the sum rescaled by the row
/// scale times the weight scale (per tensor or per output column).
pub(crate) fn batch_matmul_hybrid(
    op: &OpContext<'_>,
    (m, k, n): (usize, usize, usize),
    (adj_x, adj_y): (bool, bool),
    ia: Vec<usize>,
    ib: Vec<usize>,
    out_shape: Vec<usize>,
) -> Result<Built> {
    let OpParams::BatchMatMul { asymmetric_quantize_inputs: asymmetric, .. } = op.op.params else {
        return Err(op.bad("missing BatchMatMul options"));
    };
    if op.outputs[0].dtype != DType::F32 {
        return Err(op.unsupported("hybrid BATCH_MATMUL with a non-float output"));
    }
    let w = op.input(1)?;
    let wq = w.quant.ok_or_else(|| op.bad("int8 operand has no quantization parameters"))?;
    if wq.zero_point.iter().any(|&z| z != 0) {
        return Err(op.unsupported("hybrid BATCH_MATMUL weights with a nonzero zero point"));
    }
    if wq.scale.len() != 1 && wq.scale.len() != n {
        return Err(op.bad(format!("{} weight scales for {n} output columns", wq.scale.len())));
    }
    let p = HybridMatMul { m, k, n, adj_x, adj_y, asymmetric, w_scales: wq.scale.clone() };
    let (na, nb) = (ia.iter().max().map_or(0, |&v| v + 1), ib.iter().max().map_or(0, |&v| v + 1));
    // The quantized left rows are sized from file shapes: bounded first.
    op.checked_elements(&[na, m, k], 1)?;
    let scratch = Mutex::new(HybridMatMulScratch::new(&p, na, nb));
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let mut s = scratch.lock().unwrap_or_else(|e| e.into_inner());
            hybrid::batch_matmul_hybrid(typed(arg(ins, 0)?)?, typed(arg(ins, 1)?)?, &ia, &ib, &p, &mut s, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}
