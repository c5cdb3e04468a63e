//! Native half of the `ferrite` Python package: a thin session object that moves
//! raw bytes, shapes and quantization parameters. `python/ferrite/__init__.py`
//! builds the LiteRT-style `Interpreter` (numpy arrays, detail dicts) on top.

use std::sync::{Arc, Mutex, MutexGuard};

use ferrite::{DType, Model, Session, SessionOptions};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The Python exception for a ferrite error: `ValueError` for a bad argument,
/// `RuntimeError` otherwise, with ferrite's message. Where the error concerns part
/// of the model, the exception also carries `subgraph`, `op_index`, `op_name` and
/// `tensor_index` attributes (None where unknown), so a caller can find the op
/// without parsing the message.
fn err(e: ferrite::Error) -> PyErr {
    let location = e.location().cloned();
    let py_err = match e {
        ferrite::Error::InvalidArgument(_) => PyValueError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    };
    Python::with_gil(|py| {
        let value = py_err.value(py);
        let l = location.unwrap_or_default();
        // Attribute assignment on a fresh exception object cannot fail in practice;
        // if it did, the exception still carries the message.
        let _ = value.setattr("subgraph", l.subgraph);
        let _ = value.setattr("op_index", l.op);
        let _ = value.setattr("op_name", l.op_name);
        let _ = value.setattr("tensor_index", l.tensor);
    });
    py_err
}

/// Runs one entry point, turning a panic into a RuntimeError. Hostile model files
/// must give errors, and ferrite reports them as such; this is the last line of
/// defence for a bug that panics anyway: pyo3 would raise `PanicException`, a
/// BaseException that `except Exception` does not catch.
fn contain<T>(what: &str, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
        Err(PyRuntimeError::new_err(format!("internal error in {what}: {msg}")))
    })
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::I8 => "int8",
        DType::U8 => "uint8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::Bool => "bool",
        other => other.name(),
    }
}

/// (name, tensor index, dtype, shape, shape signature, scales, zero points, quantized dim).
type Detail = (String, usize, &'static str, Vec<usize>, Vec<i64>, Vec<f32>, Vec<i64>, usize);

/// One ferrite session. The mutex makes the object shareable between Python
/// threads; calls on one session are serialized.
#[pyclass(module = "ferrite._ferrite")]
struct NativeSession {
    session: Mutex<Session>,
}

fn detail(s: &Session, d: &ferrite::TensorDesc, shape: Vec<usize>) -> Detail {
    let info = &s.model().subgraphs()[s.subgraph_index()].tensors[d.tensor];
    let (scales, zps, axis) = info.quant.as_ref().map_or((vec![], vec![], 0), |q| (q.scale.clone(), q.zero_point.clone(), q.axis));
    (d.name.clone(), d.tensor, dtype_name(d.dtype), shape, d.shape_signature.clone(), scales, zps, axis)
}

impl NativeSession {
    fn lock(&self) -> MutexGuard<'_, Session> {
        // A panic inside a call cannot leave the session half-updated in a way later
        // calls rely on (each call re-validates state), so a poisoned lock is reused.
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl NativeSession {
    /// Loads from a path or from bytes (copied once into the session's model).
    #[new]
    #[pyo3(signature = (path=None, content=None, threads=1))]
    fn new(path: Option<String>, content: Option<Vec<u8>>, threads: usize) -> PyResult<Self> {
        contain("loading the model", || {
            let model = match (path, content) {
                (Some(p), None) => Model::from_file(p).map_err(err)?,
                (None, Some(c)) => Model::from_bytes(Arc::new(c)).map_err(err)?,
                _ => return Err(PyValueError::new_err("give exactly one of model_path and model_content")),
            };
            let options = SessionOptions { threads: threads.max(1), ..SessionOptions::default().with_env_backends().map_err(err)? };
            Ok(NativeSession { session: Mutex::new(Session::with_options(Arc::new(model), options).map_err(err)?) })
        })
    }

    fn inputs(&self) -> PyResult<Vec<Detail>> {
        contain("inputs", || {
            let s = self.lock();
            Ok(s.inputs().iter().map(|d| detail(&s, d, d.shape.clone())).collect())
        })
    }

    /// Outputs with the shapes of the last run where there was one.
    fn outputs(&self) -> PyResult<Vec<Detail>> {
        contain("outputs", || {
            let s = self.lock();
            Ok(s.outputs()
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let shape =
                        s.output(i).map(|o| o.shape.to_vec()).or_else(|_| s.output_slot(i).map(|(_, sh)| sh.to_vec())).unwrap_or_else(|_| d.shape.clone());
                    detail(&s, d, shape)
                })
                .collect())
        })
    }

    fn signatures(&self) -> PyResult<Vec<String>> {
        contain("signatures", || Ok(self.lock().signatures()))
    }

    fn select_signature(&mut self, key: &str) -> PyResult<()> {
        contain("select_signature", || self.lock().select_signature(key).map_err(err))
    }

    fn resize_input(&mut self, index: usize, shape: Vec<usize>) -> PyResult<()> {
        contain("resize_input", || self.lock().resize_input(index, &shape).map_err(err))
    }

    fn prepare(&mut self) -> PyResult<()> {
        contain("prepare", || self.lock().prepare().map_err(err))
    }

    /// Input `index` from any contiguous byte buffer (a numpy array viewed as uint8).
    fn set_input(&mut self, index: usize, data: PyBuffer<u8>) -> PyResult<()> {
        if !data.is_c_contiguous() {
            return Err(PyValueError::new_err("input buffer must be C-contiguous"));
        }
        // SAFETY: the buffer is C-contiguous u8 memory held by `data` (the export
        // stays alive for this call) and is only read.
        let bytes = unsafe { std::slice::from_raw_parts(data.buf_ptr().cast::<u8>(), data.len_bytes()) };
        contain("set_input", || self.lock().set_input(index, bytes).map_err(err))
    }

    fn run(&mut self, py: Python<'_>) -> PyResult<()> {
        // Inference does not touch Python objects: let other Python threads run.
        py.allow_threads(|| contain("run", || self.lock().run().map_err(err)))
    }

    /// (dtype, shape, bytes) of output `index` of the last run.
    fn output<'py>(&self, py: Python<'py>, index: usize) -> PyResult<(&'static str, Vec<usize>, Bound<'py, PyBytes>)> {
        contain("output", || {
            let s = self.lock();
            let o = s.output(index).map_err(err)?;
            Ok((dtype_name(o.dtype), o.shape.to_vec(), PyBytes::new(py, o.bytes)))
        })
    }
}

#[pymodule]
fn _ferrite(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeSession>()?;
    Ok(())
}
