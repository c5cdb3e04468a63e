//! ferrite: an on-device neural-network runtime for TensorFlow Lite and circle models.
//!
//! Load a model, optionally resize inputs, prepare (compile and plan), bind
//! inputs, run, read outputs — all through [`Session`]:
//!
//! ```no_run
//! let mut s = ferrite::Session::from_file("model.tflite")?;
//! s.prepare()?;
//! let n: usize = s.inputs()[0].shape.iter().product();
//! s.set_input_f32(0, &vec![0.5; n])?;
//! s.run()?;
//! let y = s.output(0)?.to_f32()?;
//! # Ok::<(), ferrite::Error>(())
//! ```
//!
//! The public surface, by purpose:
//! - running models: [`Session`], [`SessionOptions`], [`TensorDesc`], [`TensorData`],
//!   multi-model packages ([`Package`], [`PackageSession`]);
//! - choosing backends: [`SessionOptions::backends`] and per-op overrides
//!   ([`OpSelector`], [`parse_op_backends`]); what prepare chose: [`OpRun`], [`Crossing`];
//! - seeing inside a run: per-op callbacks ([`Session::run_with_callbacks`] with
//!   [`OpEvent`], [`TensorView`], [`Flow`]) and Chrome traces ([`Session::set_tracing`],
//!   [`Session::write_trace`]); finding the first op where two runs part ways: [`compare`];
//! - training on the device: [`Trainer`] with [`TrainConfig`] ([`Loss`], [`Optimizer`]);
//! - errors: [`Error`] with a [`Location`] in the model;
//! - reading a model's structure: [`model`] (subgraphs, tensors, ops, the op table);
//! - extending the runtime with custom ops and backends: [`ext`].
//!
//! Internally the pipeline is: bytes -> model (IR, validated) -> compile (shape
//! inference, passes, backend assignment, memory plan) -> session (bind, run);
//! docs/architecture.md names the module that owns each step.

#![warn(missing_docs)]

// The pipeline's stages are private: what a user programs against is re-exported
// below, so the inside can be rearranged without breaking anyone.
mod backend;
mod compile;
mod error;
mod exec;
mod memory;
mod observe;
mod ops;
mod ops_hlo;
mod package;
mod session;
mod shared_arena;
mod tables;
#[cfg(feature = "train")]
mod train;
mod variables;

#[cfg(feature = "observe")]
pub mod compare;
pub mod ext;
/// The GPU backend's adapters (`ferrite devices`), with the `gpu` feature.
#[cfg(feature = "gpu")]
pub mod gpu {
    pub use crate::backend::gpu::{available, emulates_fma, fma_rounding, list_adapters, memory_in_use, multiply_add, AdapterSummary};
}
pub mod model;

pub use backend::cpu::features_for;
pub use backend::select::{parse_backend_list, parse_op_backend, parse_op_backends, GpuPrecision, OpSelector, BACKEND_NAMES};
pub use compile::{Crossing, GpuPlan, GpuTimes, OpRun};
pub use error::{Detail, Error, Location, Result};
pub use memory::ArenaBlock;
pub use model::{DType, Model, ModelBytes};
pub use observe::{CallFrame, Flow, OpEvent, RunOutcome, TensorState, TensorView, MAX_TRACE_EVENTS};
pub use package::{is_package, IoDesc, Package, PackageSession};
pub use session::{PlanStats, RunStats, Session, SessionOptions, TensorData, TensorDesc, PLAN_CACHE_SIZE};
pub use shared_arena::SharedArena;
#[cfg(feature = "train")]
pub use train::{BatchMetrics, Loss, LossReduction, Optimizer, TrainConfig, TrainMemory, TrainableTensor, Trainer};

/// The instruction sets the CPU backend's kernels use on this machine: the float
/// GEMM/convolution kernels' and the int8 GEMM's (`ferrite devices` prints them).
/// They follow the CPU's features, capped by `FERRITE_CPU_MAX_ISA` when it is set.
pub fn cpu_kernel_isas() -> (&'static str, &'static str) {
    (ferrite_kernels::igemm::Isa::detect().name(), ferrite_kernels::qgemm::QIsa::detect().name())
}
