//! Signal ops: RFFT2D (float32 -> complex64) and COMPLEX_ABS, REAL, IMAG
//! (complex64 -> float32); the math is in `ferrite_kernels::signal`.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::signal::{self as ks, ComplexPart};

use super::runtime;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;

/// The signal family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::RFFT2D => rfft2d(op),
        B::COMPLEX_ABS => part(op, ComplexPart::Abs),
        B::REAL => part(op, ComplexPart::Real),
        B::IMAG => part(op, ComplexPart::Imag),
        _ => return None,
    })
}

/// RFFT2D: (input `[..., rows, cols]` float32, constant fft_length `[2]`) ->
/// complex64 `[..., fft_length[0], fft_length[1] / 2 + 1]`; the input is cropped or
/// zero-padded to fft_length, whose entries LiteRT requires to be powers of two.
fn rfft2d(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    if x.dtype != DType::F32 {
        return Err(op.unsupported(format!("RFFT2D of {}", x.dtype.name())));
    }
    let r = x.shape.len();
    if r < 2 {
        return Err(op.bad(format!("RFFT2D takes rank 2 or more, got {:?}", x.shape)));
    }
    let len = op.const_ints(1)?;
    let [fr, fc] = len[..] else { return Err(op.bad(format!("fft_length must hold 2 values, got {len:?}"))) };
    let pow2 = |v: i64| v > 0 && v <= 1 << 20 && v & (v - 1) == 0;
    if !pow2(fr) || !pow2(fc) {
        return Err(op.bad(format!("fft_length {len:?} must be powers of two")));
    }
    let (fr, fc) = (fr as usize, fc as usize);
    let (rows, cols) = (x.shape[r - 2], x.shape[r - 1]);
    let batch: usize = x.shape[..r - 2].iter().product();
    let mut out = x.shape[..r - 2].to_vec();
    out.extend([fr, fc / 2 + 1]);
    let (n_in, n_out) = (op.checked_elements(&x.shape, 4)?, op.checked_elements(&out, 8)?);
    Ok(Built {
        outputs: vec![(DType::Complex64, out)],
        kernel: Box::new(move |ins, outs| {
            let (x, o) = (typed::<f32>(arg(ins, 0)?)?, typed_mut::<f32>(outs[0])?);
            if x.len() != n_in || o.len() != 2 * n_out {
                return Err(runtime(format!("RFFT2D buffers of {} and {} floats, the op needs {n_in} and {}", x.len(), o.len(), 2 * n_out)));
            }
            ks::rfft2d(x, batch, rows, cols, fr, fc, o);
            Ok(())
        }),
    })
}

/// COMPLEX_ABS, REAL, IMAG: one float32 per complex64 element.
fn part(op: &OpContext<'_>, part: ComplexPart) -> Result<Built> {
    let x = op.input(0)?;
    if x.dtype != DType::Complex64 {
        return Err(op.unsupported(format!("{} of {}", op.op.code.name(), x.dtype.name())));
    }
    let n = op.checked_elements(&x.shape, 8)?;
    Ok(Built {
        outputs: vec![(DType::F32, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let (z, o) = (typed::<f32>(arg(ins, 0)?)?, typed_mut::<f32>(outs[0])?);
            if z.len() != 2 * n || o.len() != n {
                return Err(runtime(format!("complex part buffers of {} and {} floats for {n} values", z.len(), o.len())));
            }
            ks::complex_part(part, z, o);
            Ok(())
        }),
    })
}
