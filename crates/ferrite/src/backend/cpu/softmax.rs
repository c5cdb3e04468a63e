//! SOFTMAX and LOG_SOFTMAX: float, int8/uint8 (LiteRT's float tables), int16 (its
//! exp and reciprocal lookup tables); the other normalizations along the last
//! dimension, L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION (float); the math
//! is in `ferrite_kernels::softmax`.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::softmax as ksoftmax;

use super::quant::*;
use super::require_f32;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The softmax family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        #[cfg(feature = "type-int")]
        B::SOFTMAX if op.is_int() => softmax_int(op),
        #[cfg(feature = "type-float")]
        B::SOFTMAX | B::LOG_SOFTMAX => softmax(op, code == B::LOG_SOFTMAX),
        // Reached only when a type feature left the op's kernel out of this build.
        #[allow(unreachable_patterns)]
        B::SOFTMAX | B::LOG_SOFTMAX => super::type_not_built(op),
        B::L2_NORMALIZATION | B::LOCAL_RESPONSE_NORMALIZATION => normalize(op, code == B::L2_NORMALIZATION),
        _ => return None,
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

/// SOFTMAX on int8 / uint8 as LiteRT's optimized kernel (`ksoftmax::SoftmaxQ8`: a
/// float table indexed from each row's maximum, a float sum, each output rounded
/// half away from zero); int16 as [`softmax_i16`].
pub(crate) fn softmax_int(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if dtype == DType::I16 {
        return softmax_i16(op);
    }
    if !matches!(dtype, DType::I8 | DType::U8) || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized SOFTMAX of {} to {}", dtype.name(), op.outputs[0].dtype.name())));
    }
    let beta = match op.op.params {
        OpParams::Softmax { beta } => beta,
        _ => 1.0,
    };
    let (in_scale, _) = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let n = *x.shape.last().ok_or_else(|| op.bad("softmax of a scalar"))?;
    let p = ksoftmax::SoftmaxQ8::new(in_scale, beta, out_scale, out_zp);
    Ok(Built {
        outputs: vec![(dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            if dtype == DType::I8 {
                ksoftmax::softmax_q8::<i8>(typed(arg(ins, 0)?)?, n, &p, typed_mut(outs[0])?);
            } else {
                ksoftmax::softmax_q8::<u8>(arg(ins, 0)?, n, &p, outs[0]);
            }
            Ok(())
        }),
    })
}

/// SOFTMAX on int16 (zero points 0, output scale 1/32768) as LiteRT
/// (`ksoftmax::SoftmaxI16`: an exp table over [-10, 0], the sum's reciprocal from a
/// 1/(1+x) table, products rounded back to Q0.15).
fn softmax_i16(op: &OpContext<'_>) -> Result<Built> {
    // Compiled out without `type-int16` (the dispatch refuses int16 ops then).
    if !cfg!(feature = "type-int16") {
        return super::type_not_built(op);
    }
    let x = op.input(0)?;
    if op.outputs[0].dtype != DType::I16 {
        return Err(op.unsupported(format!("quantized SOFTMAX of int16 to {}", op.outputs[0].dtype.name())));
    }
    let beta = match op.op.params {
        OpParams::Softmax { beta } => beta,
        _ => 1.0,
    };
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let (_, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    if in_zp != 0 || out_zp != 0 {
        return Err(op.bad("int16 SOFTMAX requires zero points of 0"));
    }
    let p = ksoftmax::SoftmaxI16::new(in_scale, beta);
    let n = *x.shape.last().ok_or_else(|| op.bad("softmax of a scalar"))?;
    Ok(Built {
        outputs: vec![(DType::I16, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            ksoftmax::softmax_i16(typed(arg(ins, 0)?)?, n, &p, typed_mut(outs[0])?);
            Ok(())
        }),
    })
}

/// L2_NORMALIZATION (`l2`: each row along the last dimension divided by its L2
/// norm, then the fused activation) and LOCAL_RESPONSE_NORMALIZATION (each element
/// scaled by the squares of its `radius` neighbours along the last dimension).
pub(crate) fn normalize(op: &OpContext<'_>, l2: bool) -> Result<Built> {
    if op.is_int() {
        return Err(op.unsupported(format!("quantized {}", op.op.code.name())));
    }
    require_f32(op, &[0])?;
    let s = op.input(0)?.shape.clone();
    let depth = *s.last().ok_or_else(|| op.bad("normalization of a scalar"))?;
    let n = op.checked_elements(&s, 4)?;
    let params = op.op.params.clone();
    let clamp = match params {
        OpParams::Activation(a) => super::clamp_of(op, a)?,
        _ => ferrite_kernels::Clamp::NONE,
    };
    let lrn = match params {
        OpParams::LocalResponseNorm { radius, bias, alpha, beta } => {
            Some((usize::try_from(radius).map_err(|_| op.bad(format!("negative radius {radius}")))?, bias, alpha, beta))
        }
        _ if !l2 => return Err(op.bad("missing LocalResponseNormalization options")),
        _ => None,
    };
    Ok(Built {
        outputs: vec![(DType::F32, s)],
        kernel: Box::new(move |ins, outs| {
            let (x, o) = (typed::<f32>(arg(ins, 0)?)?, typed_mut::<f32>(outs[0])?);
            if x.len() != n || o.len() != n {
                return Err(super::runtime(format!("normalization buffers of {} and {} elements, the op needs {n}", x.len(), o.len())));
            }
            match lrn {
                Some((radius, bias, alpha, beta)) => ksoftmax::local_response_normalize(x, depth, radius, bias, alpha, beta, o),
                None => {
                    ksoftmax::l2_normalize(x, depth, o);
                    o.iter_mut().for_each(|v| *v = clamp.apply(*v));
                }
            }
            Ok(())
        }),
    })
}
