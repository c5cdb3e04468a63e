//! Extending ferrite: custom ops and custom backends.
//!
//! A **custom op** implements [`CustomOp`]: given the op's [`OpContext`] (input
//! descriptions, constant values, output tensors, the custom options bytes) it
//! returns a [`Built`] — the output shapes and a kernel closure. Register it in
//! [`SessionOptions::custom_ops`](crate::SessionOptions::custom_ops) or with
//! [`Session::register_custom_op`](crate::Session::register_custom_op).
//!
//! A **backend** implements [`Backend`]: it is asked, op by op, to build a kernel
//! and refuses ops it has no kernel for with [`Error::Unsupported`](crate::Error::Unsupported),
//! so the op falls to the next backend of the session's list (the CPU last). Add
//! it to [`SessionOptions::custom_backends`](crate::SessionOptions::custom_backends)
//! and name it in [`SessionOptions::backends`](crate::SessionOptions::backends).
//! Per-session state (packed weights, the thread pool) lives in the
//! [`BackendContext`] the session passes in, never in the backend value or in
//! thread-local storage, so one backend value can serve many sessions.
//!
//! ```
//! use ferrite::ext::{arg, typed, typed_mut, Backend, BackendContext, Built, OpContext};
//! use ferrite::model::BuiltinOp;
//! use ferrite::{DType, Result};
//!
//! /// Runs float ABS; refuses everything else.
//! struct Abs;
//!
//! impl Backend for Abs {
//!     fn name(&self) -> &'static str {
//!         "abs-only"
//!     }
//!     fn build(&self, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Result<Built> {
//!         let x = op.input(0)?;
//!         if op.op.code.builtin() != Some(BuiltinOp::ABS) || x.dtype != DType::F32 {
//!             return Err(op.unsupported("abs-only runs float ABS"));
//!         }
//!         Ok(Built {
//!             outputs: vec![(DType::F32, x.shape.clone())],
//!             kernel: Box::new(|ins, outs| {
//!                 let (x, y) = (typed::<f32>(arg(ins, 0)?)?, typed_mut::<f32>(&mut *outs[0])?);
//!                 y.iter_mut().zip(x).for_each(|(y, x)| *y = x.abs());
//!                 Ok(())
//!             }),
//!         })
//!     }
//! }
//!
//! let mut options = ferrite::SessionOptions::default();
//! options.custom_backends.push(std::sync::Arc::new(Abs));
//! options.backends = vec!["abs-only".into(), "cpu".into()];
//! ```

pub use crate::backend::select::Memory;
pub use crate::backend::{
    arg, typed, typed_mut, Backend, BackendContext, Built, CustomOp, CustomOpRegistry, InputDesc, KernelFn, OpContext, OutSpec, PackKey, Packing,
};
/// The session's worker pool, handed to [`CustomOp::build_with_pool`] for ops
/// that split their work over it ([`ThreadPool::run`]).
pub use ferrite_kernels::parallel::ThreadPool;
