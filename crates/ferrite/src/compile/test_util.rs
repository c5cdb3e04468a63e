//! Helpers for the passes' tests: models built with the writer, compiled whole or
//! one pass at a time.

use std::sync::Arc;

use super::{compile, Compilation, CompiledGraph, Limits, Loc};
use crate::backend::select::Backends;
use crate::backend::{BackendContext, CustomOpRegistry};
use crate::error::Result;
use crate::model::{Model, Subgraph};
use ferrite_format::writer::ModelSpec;

pub(super) const LIMITS: Limits = Limits { max_arena_bytes: 1 << 20, shared_scratch: false, fuse_chains: true };

/// The model `spec` describes.
pub(super) fn model(spec: &ModelSpec) -> Model {
    Model::from_bytes(Arc::new(spec.to_bytes().expect("the test's options fit its ops"))).expect("the test's model loads")
}

/// Subgraph 0 of `spec` compiled for its declared input shapes, on `backends`.
pub(super) fn compile_on(spec: &ModelSpec, backends: &Backends, limits: Limits) -> Result<(Model, CompiledGraph)> {
    let model = model(spec);
    let shapes: Vec<Vec<usize>> = model.subgraphs[0].inputs.iter().map(|&t| model.subgraphs[0].tensors[t].shape.clone()).collect();
    let compiled = compile(&model, 0, &shapes, backends, &CustomOpRegistry::default(), &mut BackendContext::new(1), limits)?;
    Ok((model, compiled))
}

/// Subgraph 0 of `spec` compiled on the CPU backend.
pub(super) fn compile_cpu(spec: &ModelSpec) -> Result<(Model, CompiledGraph)> {
    compile_on(spec, &Backends::new(&[], &[], &[]).expect("the cpu backend exists"), LIMITS)
}

/// The starting state of a compilation of `g`, whose constants live in `bytes`,
/// for running one pass by hand.
pub(super) fn start<'m>(g: &'m Subgraph, bytes: &'m [u8]) -> Compilation<'m> {
    Compilation::new(g, 0, bytes, &[], &[], LIMITS).expect("the test graph is within the limits")
}

/// The float32 values of a tensor the compilation owns (a folded constant).
pub(super) fn owned_f32(loc: &Loc) -> Option<Vec<f32>> {
    match loc {
        Loc::Owned(b) => Some(b.bytes().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        _ => None,
    }
}
