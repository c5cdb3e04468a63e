//! The `reference` backend: naive kernels written for clarity from each op's
//! definition — nested loops over indices, no blocking, no SIMD, no threads.
//!
//! It answers "does the optimized path cause my numeric difference?" (run a model
//! with `--backends reference`, or move single ops to it with `--op-backend`), and it
//! is the oracle the optimized CPU kernels and future backends are checked against.
//! Integer kernels follow LiteRT's reference kernels step by step (same
//! fixed-point multipliers, same rounding), so they are bit-exact with it.
//!
//! An op this backend has no kernel for returns [`Error::Unsupported`], and the
//! session gives it to the next backend in its list.

mod float;
#[cfg(feature = "gpu")]
pub(crate) use float::strided_slice_plan;
#[cfg(test)]
mod float_test_util;
mod quant;
#[cfg(test)]
pub(crate) mod quant_test_util;
mod random;
mod recurrent;
mod strings;

use super::{Backend, BackendContext, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::DType;

/// Naive, obviously correct kernels (float32 and the integer types).
#[derive(Debug, Default, Clone, Copy)]
pub struct ReferenceBackend;

impl Backend for ReferenceBackend {
    fn name(&self) -> &'static str {
        "reference"
    }

    fn build(&self, op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
        // Random ops (their streams live in the session's context) and feature ops.
        if let Some(built) = random::build(op, ctx) {
            return built;
        }
        // Ops on string tensors (sized at run time through the context).
        if let Some(built) = strings::build(op, ctx) {
            return built;
        }
        // Recurrent ops, float and hybrid alike.
        if let Some(built) = recurrent::build(op) {
            return built;
        }
        if !is_quantized(op) {
            return float::build(op);
        }
        // Quantized ops that only move elements (RESHAPE, TRANSPOSE, SLICE, ...) are
        // type-agnostic and live with the float kernels; `float` refuses any of them
        // whose output is quantized unlike its input (that needs requantization).
        match quant::build(op) {
            Err(Error::Unsupported(_)) => float::build(op),
            r => r,
        }
    }
}

/// True when the op computes on quantized integers or mixes float activations
/// with quantized weights (hybrid): the integer kernels' business.
pub(crate) fn is_quantized(op: &OpContext<'_>) -> bool {
    let quantized = |d: DType| matches!(d, DType::I8 | DType::U8 | DType::I16);
    let input_q = op.inputs.iter().flatten().any(|d| quantized(d.dtype) && d.quant.is_some());
    let output_q = op.outputs.iter().any(|t| quantized(t.dtype) && t.quant.is_some());
    input_q || output_q
}
