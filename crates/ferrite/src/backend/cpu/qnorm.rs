//! LOG_SOFTMAX and L2_NORMALIZATION on int8 / uint8 (`ferrite_kernels::qnorm`),
//! with the fixed output quantization LiteRT requires of each (it refuses any
//! other, so a model with another one is refused here too rather than run with
//! results LiteRT never defines). The reference backend shares these builders.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::qnorm as kq;

use super::quant::per_tensor;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams};

/// This family's builders: the int8 / uint8 variants only.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    let is_q8 = op.opt_input(0).is_some_and(|d| matches!(d.dtype, DType::I8 | DType::U8));
    Some(match code {
        B::LOG_SOFTMAX if is_q8 => log_softmax(op),
        B::L2_NORMALIZATION if is_q8 => l2_normalize(op),
        _ => return None,
    })
}

/// Input and output of one 8-bit type, the output with the quantization `want`
/// gives for the type: (type, shape, input scale, input zero point, output scale,
/// output zero point, elements).
#[allow(clippy::type_complexity)]
fn io(op: &OpContext<'_>, want: fn(DType) -> (f32, i32)) -> Result<(DType, Vec<usize>, f32, i32, f32, i32, usize)> {
    let x = op.input(0)?;
    let dtype = x.dtype;
    if op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized {} of {} to {}", op.op.code.name(), dtype.name(), op.outputs[0].dtype.name())));
    }
    let (in_scale, in_zp) = per_tensor(op, x.quant, "input")?;
    let (out_scale, out_zp) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let (scale, zp) = want(dtype);
    if out_scale != scale || out_zp != zp {
        return Err(op.bad(format!(
            "{} on {} requires output scale {scale} and zero point {zp}, not {out_scale} and {out_zp}",
            op.op.code.name(),
            dtype.name()
        )));
    }
    if !(in_scale.is_finite() && in_scale > 0.0) {
        return Err(op.bad(format!("input scale {in_scale}")));
    }
    let shape = x.shape.clone();
    if shape.is_empty() {
        return Err(op.bad(format!("{} of a scalar", op.op.code.name())));
    }
    let n = op.checked_elements(&shape, 1)?;
    Ok((dtype, shape, in_scale, in_zp, out_scale, out_zp, n))
}

/// Checks the kernel's buffers against the prepared element count.
fn sized(x: &[u8], o: &[u8], n: usize) -> Result<()> {
    if x.len() != n || o.len() != n {
        return Err(super::runtime(format!("buffers of {} and {} elements, the op needs {n}", x.len(), o.len())));
    }
    Ok(())
}

/// LOG_SOFTMAX on int8 / uint8: output scale 16/256, zero point 127 / 255.
pub(crate) fn log_softmax(op: &OpContext<'_>) -> Result<Built> {
    let (dtype, shape, in_scale, _, out_scale, out_zp, n) = io(op, |t| (16.0 / 256.0, if t == DType::U8 { 255 } else { 127 }))?;
    let depth = *shape.last().unwrap_or(&1);
    let p = kq::LogSoftmaxQ8::new(in_scale, out_scale, out_zp);
    Ok(Built {
        outputs: vec![(dtype, shape)],
        kernel: Box::new(move |ins, outs| {
            let x = arg(ins, 0)?;
            sized(x, outs[0], n)?;
            if dtype == DType::I8 {
                kq::log_softmax_q8::<i8>(typed(x)?, depth, &p, typed_mut(outs[0])?);
            } else {
                kq::log_softmax_q8::<u8>(x, depth, &p, outs[0]);
            }
            Ok(())
        }),
    })
}

/// L2_NORMALIZATION on int8 / uint8: output scale 1/128, zero point 0 / 128; LiteRT
/// takes no fused activation on these types.
pub(crate) fn l2_normalize(op: &OpContext<'_>) -> Result<Built> {
    if let OpParams::Activation(a) = op.op.params {
        if a != Activation::None {
            return Err(op.unsupported("quantized L2_NORMALIZATION with a fused activation"));
        }
    }
    let (dtype, shape, _, in_zp, _, _, n) = io(op, |t| (1.0 / 128.0, if t == DType::U8 { 128 } else { 0 }))?;
    let depth = *shape.last().unwrap_or(&1);
    Ok(Built {
        outputs: vec![(dtype, shape)],
        kernel: Box::new(move |ins, outs| {
            let x = arg(ins, 0)?;
            sized(x, outs[0], n)?;
            if dtype == DType::I8 {
                kq::l2_normalize_q8::<i8>(typed(x)?, depth, in_zp, typed_mut(outs[0])?);
            } else {
                kq::l2_normalize_q8::<u8>(x, depth, in_zp, outs[0]);
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use ferrite_format::ops::BuiltinOp as B;

    use crate::backend::cpu::CpuBackend;
    use crate::backend::reference::quant_test_util::{out, q, run_on, run_ref, T};
    use crate::model::DType;
    use crate::ops::{Activation, OpParams};

    #[test]
    fn both_backends_run_the_fixed_output_quantization() {
        // (3, 4) at zero point 0: (0.6, 0.8) in 1/128 steps; uint8 adds 128.
        let x = T::ints(DType::I8, &[1, 2], q(0.5, 0), &[3, 4]);
        let l2 = OpParams::Activation(Activation::None);
        for r in [
            run_ref(B::L2_NORMALIZATION, &l2, &[Some(&x)], &out(DType::I8, q(1.0 / 128.0, 0))),
            run_on(&CpuBackend, B::L2_NORMALIZATION, &l2, &[Some(&x)], &out(DType::I8, q(1.0 / 128.0, 0))),
        ] {
            assert_eq!(r.expect("l2").1, vec![77u8, 102]);
        }
        let x = T::ints(DType::U8, &[2, 1], q(0.5, 10), &[10, 200]);
        let (_, r) = run_on(&CpuBackend, B::L2_NORMALIZATION, &l2, &[Some(&x)], &out(DType::U8, q(1.0 / 128.0, 128))).expect("l2 u8");
        // A zero row stays at the zero point; a lone value saturates at 255.
        assert_eq!(r, vec![128u8, 255]);
        // Two equal values: log(1/2) = -11.09 steps of 1/16 below 255.
        let x = T::ints(DType::U8, &[1, 2], q(0.1, 3), &[7, 7]);
        let (_, r) = run_ref(B::LOG_SOFTMAX, &OpParams::None, &[Some(&x)], &out(DType::U8, q(16.0 / 256.0, 255))).expect("log_softmax");
        assert_eq!(r, vec![244u8, 244]);
    }

    #[test]
    fn other_output_quantization_or_activation_is_refused() {
        let x = T::ints(DType::I8, &[1, 2], q(0.5, 0), &[3, 4]);
        assert!(run_on(&CpuBackend, B::LOG_SOFTMAX, &OpParams::None, &[Some(&x)], &out(DType::I8, q(16.0 / 256.0, 0))).is_err());
        assert!(run_on(&CpuBackend, B::LOG_SOFTMAX, &OpParams::None, &[Some(&x)], &out(DType::U8, q(16.0 / 256.0, 255))).is_err());
        let relu = OpParams::Activation(Activation::Relu);
        assert!(run_on(&CpuBackend, B::L2_NORMALIZATION, &relu, &[Some(&x)], &out(DType::I8, q(1.0 / 128.0, 0))).is_err());
        assert!(run_on(&CpuBackend, B::L2_NORMALIZATION, &OpParams::None, &[Some(&x)], &out(DType::I8, q(1.0 / 64.0, 0))).is_err());
    }
}
