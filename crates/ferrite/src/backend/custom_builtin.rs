//! Custom ops ferrite ships: MediaPipe's `Convolution2DTransposeBias`.

use super::{Built, CustomOp, OpContext};
use crate::backend::cpu::transpose_conv_built;
use crate::error::Result;
use crate::model::DType;
use crate::ops::Padding;

/// MediaPipe's transposed convolution with bias. Its custom options are the raw
/// bytes of a C struct: padding (1 = SAME, 2 = VALID), stride_width, stride_height,
/// each a little-endian int32.
pub struct TransposeConvBias;

impl CustomOp for TransposeConvBias {
    fn build(&self, op: &OpContext<'_>) -> Result<Built> {
        let o = op.custom_options;
        let int = |i: usize| o.get(4 * i..4 * i + 4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let (Some(pad), Some(sw), Some(sh)) = (int(0), int(1), int(2)) else {
            return Err(op.bad(format!("custom options hold {} bytes, need 12", o.len())));
        };
        let padding = match pad {
            1 => Padding::Same,
            2 => Padding::Valid,
            p => return Err(op.bad(format!("unknown padding {p}"))),
        };
        if sw <= 0 || sh <= 0 {
            return Err(op.bad(format!("strides must be positive, got {sh}x{sw}")));
        }
        let (sh, sw) = (sh as usize, sw as usize);
        let x = op.input(0)?;
        let w = op.input(1)?;
        if x.dtype != DType::F32 || w.dtype != DType::F32 || x.shape.len() != 4 || w.shape.len() != 4 {
            return Err(op.unsupported("Convolution2DTransposeBias needs 4-D float32 input and weights"));
        }
        let out = |i: usize, k: usize, s: usize| if padding == Padding::Same { i * s } else { i * s + k.saturating_sub(s) };
        let (oh, ow) = (out(x.shape[1], w.shape[1], sh), out(x.shape[2], w.shape[2], sw));
        transpose_conv_built(op, &x.shape.clone(), &w.shape.clone(), oh, ow, (sh, sw), padding, ferrite_kernels::Clamp::NONE, 0, 1, Some(2))
    }
}
