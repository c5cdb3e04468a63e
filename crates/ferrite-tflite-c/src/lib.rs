//! `libtensorflowlite_c.so` on ferrite: the TensorFlow Lite C API.
//!
//! A program (or a binding that opens the library with `dlopen`/ctypes) written
//! against LiteRT's C API switches to ferrite by library path alone: the same symbol
//! names, argument and return types, enum numbers (`TfLiteStatus`, `TfLiteType`) and
//! struct layouts (`TfLiteQuantizationParams`, the public fields of `TfLiteTensor`).
//! The declarations are in `include/tensorflow/lite/c/`, written from the API's
//! documented contract. This crate is separate from `ferrite-capi` so that the TFLite
//! ABI stays out of ferrite's own C API.
//!
//! The flow is LiteRT's: `TfLiteModelCreate[FromFile]` -> `TfLiteInterpreterCreate`
//! -> `TfLiteInterpreterAllocateTensors` -> write inputs (`TfLiteTensorCopyFromBuffer`,
//! or through `TfLiteTensorData`) -> `TfLiteInterpreterInvoke` -> read outputs.
//! Signature runners (`TfLiteInterpreterGetSignatureRunner`) run a named signature.
//!
//! Conventions, those of `ferrite-capi`: every entry point accepts NULL and
//! out-of-range arguments (returning NULL, 0, -1 or `kTfLiteError`), no Rust panic
//! crosses the boundary (one is caught, reported, and turned into `kTfLiteError`),
//! and errors go to the error reporter set in the interpreter options, or to stderr
//! as `ERROR: <message>` lines when none is set (as LiteRT prints them).

#![allow(non_snake_case)] // the C API's function names

mod interpreter;
mod report;
mod signature;
mod tensor;

use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use interpreter::{TfLiteInterpreter, TfLiteInterpreterOptions, TfLiteModel};
pub use report::{TfLiteErrorReporter, VaList};
pub use signature::TfLiteSignatureRunner;
pub use tensor::{TfLiteQuantizationParams, TfLiteTensor, TfLiteType};

use report::Reporter;

/// Result of a call, numbered as c_api_types.h numbers `TfLiteStatus`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TfLiteStatus {
    /// Success.
    Ok = 0,
    /// A runtime error (the message went to the error reporter).
    Error = 1,
    /// A delegate failed (ferrite applies no delegates; never returned).
    DelegateError = 2,
    /// A delegate could not be applied (never returned).
    ApplicationError = 3,
    /// Delegate serialization data not found (never returned).
    DelegateDataNotFound = 4,
    /// Delegate serialization write error (never returned).
    DelegateDataWriteError = 5,
    /// Delegate serialization read error (never returned).
    DelegateDataReadError = 6,
    /// The model has ops the runtime cannot resolve.
    UnresolvedOps = 7,
    /// The invocation was cancelled (never returned).
    Cancelled = 8,
}

/// The message for a panic caught at the boundary.
const PANIC_MESSAGE: &str = "internal error in ferrite: a panic was caught at the TensorFlow Lite C API boundary";

/// Runs `f`, turning a panic into `fallback` and a report.
pub(crate) fn guard<R>(reporter: Reporter, fallback: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            reporter.report(PANIC_MESSAGE);
            fallback
        }
    }
}

/// The TFLite API level implemented (the C API of LiteRT 2.17), with ferrite's version
/// as semver build metadata, which version comparisons ignore.
const VERSION: &str = concat!("2.17.0+ferrite.", env!("CARGO_PKG_VERSION"), "\0");

/// The runtime's version: `2.17.0+ferrite.<version>` (semver 2, as the API asks).
#[no_mangle]
pub extern "C" fn TfLiteVersion() -> *const c_char {
    VERSION.as_ptr().cast()
}

/// The model schema version read: 3.
#[no_mangle]
pub extern "C" fn TfLiteSchemaVersion() -> c_int {
    3
}

/// The name of a `TfLiteType` (`"FLOAT32"`, `"INT8"`, ...; `"Unknown type"` otherwise),
/// a static string.
#[no_mangle]
pub extern "C" fn TfLiteTypeGetName(type_: c_int) -> *const c_char {
    let name: &'static std::ffi::CStr = match type_ {
        0 => c"NOTYPE",
        1 => c"FLOAT32",
        2 => c"INT32",
        3 => c"UINT8",
        4 => c"INT64",
        5 => c"STRING",
        6 => c"BOOL",
        7 => c"INT16",
        8 => c"COMPLEX64",
        9 => c"INT8",
        10 => c"FLOAT16",
        11 => c"FLOAT64",
        12 => c"COMPLEX128",
        13 => c"UINT64",
        14 => c"RESOURCE",
        15 => c"VARIANT",
        16 => c"UINT32",
        17 => c"UINT16",
        18 => c"INT4",
        19 => c"BFLOAT16",
        _ => c"Unknown type",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn version_is_semver_with_ferrite_metadata() {
        // SAFETY: a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(TfLiteVersion()) }.to_str().unwrap();
        assert!(v.starts_with("2.17.0+ferrite."), "{v}");
        assert_eq!(TfLiteSchemaVersion(), 3);
    }

    #[test]
    fn type_names_follow_the_enum() {
        // SAFETY: static NUL-terminated strings.
        let name = |t| unsafe { CStr::from_ptr(TfLiteTypeGetName(t)) }.to_str().unwrap();
        assert_eq!(name(TfLiteType::Float32 as c_int), "FLOAT32");
        assert_eq!(name(TfLiteType::Int8 as c_int), "INT8");
        assert_eq!(name(TfLiteType::UInt8 as c_int), "UINT8");
        assert_eq!(name(-3), "Unknown type");
    }
}
