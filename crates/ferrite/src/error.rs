//! The runtime's error type. Messages say what is wrong and where
//! (subgraph / op / tensor index), so a user can find it in `ferrite inspect`.

use ferrite_format::FormatError;

/// Everything that can go wrong loading, preparing or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not a readable model file.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// Reading the file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// Path involved.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The model is readable but inconsistent (bad index, shape, buffer size, cycle ...).
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// The model uses something ferrite does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A call got an argument it cannot accept (wrong dtype, size, index, name).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A call was made in the wrong session state (e.g. run before prepare).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// A configured limit (arena size, ...) would be exceeded.
    #[error("resource limit: {0}")]
    ResourceLimit(String),
    /// An op's output shape depends on tensor values known only at run time; the
    /// compiler runs such ops dynamically instead of failing.
    #[error("shape depends on run-time values: {0}")]
    DataDependent(String),
    /// A kernel failed at run time (e.g. a gather index out of range).
    #[error("runtime error: {0}")]
    Runtime(String),
}

/// Shorthand result type.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidModel(msg.into())
}
