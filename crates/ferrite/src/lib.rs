//! ferrite: an on-device neural-network runtime for TensorFlow Lite and circle models.
//!
//! The pipeline, one module per stage:
//! bytes -> [`model`] (IR, validated) -> [`compile`] (shape inference, kernel
//! selection through a [`backend::Backend`], constant folding, [`memory`] plan)
//! -> [`session`] (bind inputs, run, read outputs).
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

#![warn(missing_docs)]

pub mod backend;
pub mod compile;
pub mod error;
pub mod exec;
pub mod memory;
pub mod model;
pub mod ops;
pub mod package;
pub mod session;
pub mod variables;

pub use backend::{CustomOp, CustomOpRegistry};
pub use error::{Detail, Error, Location, Result};
pub use model::{DType, Model};
pub use package::{Package, PackageSession};
pub use session::{PlanStats, RunStats, Session, SessionOptions, TensorData, TensorDesc};
