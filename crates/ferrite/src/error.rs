//! The runtime's error type: a kind (the variant), what went wrong, and where —
//! a structured [`Location`] (subgraph, op index and name, tensor) when the error
//! concerns part of a model. `Display` reads "invalid model: subgraph 0 op 3
//! (CONV_2D): ...", so a user can find the place in `ferrite inspect`.

use ferrite_format::FormatError;

/// Where in a model an error arose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// Subgraph index.
    pub subgraph: Option<usize>,
    /// Op index within the subgraph.
    pub op: Option<usize>,
    /// The op's name (`CONV_2D`, or a custom op's name).
    pub op_name: Option<String>,
    /// Tensor index within the subgraph.
    pub tensor: Option<usize>,
}

impl Location {
    /// Op `op` (called `name`) of subgraph `subgraph`.
    pub fn op(subgraph: usize, op: usize, name: impl Into<String>) -> Location {
        Location { subgraph: Some(subgraph), op: Some(op), op_name: Some(name.into()), tensor: None }
    }

    /// Tensor `tensor` of subgraph `subgraph`.
    pub fn tensor(subgraph: usize, tensor: usize) -> Location {
        Location { subgraph: Some(subgraph), tensor: Some(tensor), ..Location::default() }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        if let Some(s) = self.subgraph {
            write!(f, "subgraph {s}")?;
            sep = " ";
        }
        if let Some(o) = self.op {
            write!(f, "{sep}op {o}")?;
            if let Some(n) = &self.op_name {
                write!(f, " ({n})")?;
            }
            sep = " ";
        }
        if let Some(t) = self.tensor {
            write!(f, "{sep}tensor {t}")?;
        }
        Ok(())
    }
}

/// What an error says, and where it arose when it concerns part of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    /// Where, when known.
    pub location: Option<Location>,
    /// What went wrong.
    pub message: String,
}

impl Detail {
    /// A message located at `location`.
    pub fn at(location: Location, message: impl Into<String>) -> Detail {
        Detail { location: Some(location), message: message.into() }
    }
}

impl std::fmt::Display for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Some(l) => write!(f, "{l}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl From<String> for Detail {
    fn from(message: String) -> Detail {
        Detail { location: None, message }
    }
}

impl From<&str> for Detail {
    fn from(message: &str) -> Detail {
        Detail { location: None, message: message.to_string() }
    }
}

/// Everything that can go wrong loading, preparing or running a model. The
/// variant is the kind of failure (the C API's status codes and the Python
/// exception types follow it).
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
    InvalidModel(Detail),
    /// The model uses something ferrite does not implement.
    #[error("unsupported: {0}")]
    Unsupported(Detail),
    /// A call got an argument it cannot accept (wrong dtype, size, index, name).
    #[error("invalid argument: {0}")]
    InvalidArgument(Detail),
    /// A call was made in the wrong session state (e.g. run before prepare).
    #[error("invalid state: {0}")]
    InvalidState(Detail),
    /// A configured limit (arena size, ...) would be exceeded.
    #[error("resource limit: {0}")]
    ResourceLimit(Detail),
    /// An op's output shape depends on tensor values known only at run time; the
    /// compiler runs such ops dynamically instead of failing.
    #[error("shape depends on run-time values: {0}")]
    DataDependent(Detail),
    /// A kernel failed at run time (e.g. a gather index out of range).
    #[error("runtime error: {0}")]
    Runtime(Detail),
}

impl Error {
    /// The detail of a located or locatable error (`None` for I/O and format errors).
    pub fn detail(&self) -> Option<&Detail> {
        match self {
            Error::InvalidModel(d)
            | Error::Unsupported(d)
            | Error::InvalidArgument(d)
            | Error::InvalidState(d)
            | Error::ResourceLimit(d)
            | Error::DataDependent(d)
            | Error::Runtime(d) => Some(d),
            Error::Format(_) | Error::Io { .. } => None,
        }
    }

    /// Where in the model the error arose, when it concerns part of one.
    pub fn location(&self) -> Option<&Location> {
        self.detail().and_then(|d| d.location.as_ref())
    }

    /// The same error located at `location`, unless it already has a location
    /// (I/O and format errors are returned unchanged).
    pub fn located(self, location: Location) -> Error {
        if self.location().is_some() {
            return self;
        }
        let at = |d: Detail| Detail { location: Some(location), ..d };
        match self {
            Error::InvalidModel(d) => Error::InvalidModel(at(d)),
            Error::Unsupported(d) => Error::Unsupported(at(d)),
            Error::InvalidArgument(d) => Error::InvalidArgument(at(d)),
            Error::InvalidState(d) => Error::InvalidState(at(d)),
            Error::ResourceLimit(d) => Error::ResourceLimit(at(d)),
            Error::DataDependent(d) => Error::DataDependent(at(d)),
            Error::Runtime(d) => Error::Runtime(at(d)),
            e @ (Error::Format(_) | Error::Io { .. }) => e,
        }
    }
}

/// Shorthand result type.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidModel(Detail::from(msg.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_keeps_the_readable_text_and_the_location_is_structured() {
        let e = Error::Unsupported(Detail::at(Location::op(0, 3, "CONV_2D"), "no kernel"));
        assert_eq!(e.to_string(), "unsupported: subgraph 0 op 3 (CONV_2D): no kernel");
        assert_eq!(e.location().and_then(|l| l.op), Some(3));
        let t = Error::InvalidModel(Detail::at(Location::tensor(1, 7), "negative dimension")).to_string();
        assert_eq!(t, "invalid model: subgraph 1 tensor 7: negative dimension");
        let plain = Error::InvalidState("run() needs prepare()".into());
        assert_eq!(plain.location(), None);
        let located = plain.located(Location::op(0, 1, "ADD"));
        assert_eq!(located.location().map(|l| l.to_string()), Some("subgraph 0 op 1 (ADD)".into()));
    }
}
