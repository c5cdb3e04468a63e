//! Reference float32 kernels and type-agnostic data movement.

use crate::backend::{Built, OpContext};
use crate::error::Result;

/// Builds a float32 (or data-movement) op, or reports it unsupported.
pub(crate) fn build(op: &OpContext<'_>) -> Result<Built> {
    Err(op.unsupported("no reference kernel for this op"))
}
