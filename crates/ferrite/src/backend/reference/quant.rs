//! Reference integer kernels (int8, uint8, int16x8) and hybrid ops, bit-exact
//! with LiteRT's reference kernels.

use crate::backend::{Built, OpContext};
use crate::error::Result;

/// Builds a quantized or hybrid op, or reports it unsupported.
pub(crate) fn build(op: &OpContext<'_>) -> Result<Built> {
    Err(op.unsupported("no reference kernel for this op"))
}
