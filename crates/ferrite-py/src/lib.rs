//! Native half of the `ferrite` Python package: a session object addressed by tensor
//! index, as LiteRT's interpreter is, that moves raw bytes, shapes and quantization
//! parameters, and hands out zero-copy views of tensor memory. `python/ferrite/interpreter.py`
//! builds LiteRT's `Interpreter` (numpy arrays, detail dicts, LiteRT's errors) on top.
//!
//! Views: [`TensorBuffer`] exports a tensor's memory through the buffer protocol (numpy
//! wraps it without a copy). Each live buffer object is counted on its session (under the
//! session's lock), and every call that could move or free session memory, or write it
//! from another thread (allocate, resize, run), is refused while the count is not zero,
//! so a view never dangles. The buffer object also holds its session, so dropping the
//! interpreter cannot free memory a view still shows. As in LiteRT, `set` and `get` stay
//! allowed while views exist: they copy with the GIL held, as numpy's element access is.
//!
//! Per-op callbacks ([`NativeSession::run_with_callbacks`]) call Python with the GIL held
//! and the session locked: each op's tensors are handed over as copies, and every other
//! call on the session (from the callbacks, or from another thread, which would wait for
//! the lock while holding the GIL the callbacks need) is refused until the run ends.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ferrite::{DType, Model, Session, SessionOptions};

mod train;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use pyo3::{ffi, PyTypeInfo};

/// The Python exception for a ferrite error, of type `E`, with ferrite's message. Where
/// the error concerns part of the model, the exception also carries `subgraph`,
/// `op_index`, `op_name` and `tensor_index` attributes (None where unknown), so a
/// caller can find the op without parsing the message.
fn err_as<E: PyTypeInfo>(e: ferrite::Error) -> PyErr {
    let l = e.location().cloned().unwrap_or_default();
    let py_err = PyErr::new::<E, _>(e.to_string());
    Python::with_gil(|py| {
        let value = py_err.value(py);
        // Attribute assignment on a fresh exception object cannot fail in practice;
        // if it did, the exception still carries the message.
        let _ = value.setattr("subgraph", l.subgraph);
        let _ = value.setattr("op_index", l.op);
        let _ = value.setattr("op_name", l.op_name);
        let _ = value.setattr("tensor_index", l.tensor);
    });
    py_err
}

/// `ValueError` for a bad argument, `RuntimeError` otherwise.
fn err(e: ferrite::Error) -> PyErr {
    match e {
        ferrite::Error::InvalidArgument(_) => err_as::<PyValueError>(e),
        _ => err_as::<PyRuntimeError>(e),
    }
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

/// The numpy name of a dtype; the Python side maps the rest (string, resource, ...).
fn dtype_name(d: DType) -> &'static str {
    d.name()
}

/// Static sparsity of a constant: (traversal order, block map, per dimension
/// `(0, dense size, [], [])` or `(1, 0, segments, indices)`).
type Sparsity = (Vec<usize>, Vec<usize>, Vec<(u8, usize, Vec<usize>, Vec<usize>)>);

/// (name, dtype, shape, shape signature, scales, zero points, quantized dim, sparsity).
type Detail = (String, &'static str, Vec<usize>, Vec<i64>, Vec<f32>, Vec<i64>, usize, Option<Sparsity>);

fn detail(info: &ferrite::model::TensorInfo, shape: Vec<usize>) -> Detail {
    let (scales, zps, axis) = info.quant.as_ref().map_or((vec![], vec![], 0), |q| (q.scale.clone(), q.zero_point.clone(), q.axis));
    let sparsity = info.sparsity.as_ref().map(|s| {
        let dims = s
            .dims
            .iter()
            .map(|d| match d {
                ferrite::model::SparseDim::Dense(n) => (0, *n, vec![], vec![]),
                ferrite::model::SparseDim::Csr { segments, indices } => (1, 0, segments.to_vec(), indices.to_vec()),
            })
            .collect();
        (s.traversal_order.clone(), s.block_map.clone(), dims)
    });
    (info.name.clone(), dtype_name(info.dtype), shape, info.shape_signature.clone(), scales, zps, axis, sparsity)
}

/// Borrows the bytes of any C-contiguous buffer-protocol object (a numpy array of
/// any dtype) for one call.
struct ReadBuffer {
    view: ffi::Py_buffer,
}

impl ReadBuffer {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<ReadBuffer> {
        ReadBuffer::with_flags(obj, ffi::PyBUF_SIMPLE)
    }

    /// A writable view: the exporter refuses read-only memory.
    fn get_mut(obj: &Bound<'_, PyAny>) -> PyResult<ReadBuffer> {
        ReadBuffer::with_flags(obj, ffi::PyBUF_WRITABLE)
    }

    fn with_flags(obj: &Bound<'_, PyAny>, flags: c_int) -> PyResult<ReadBuffer> {
        let mut view = ffi::Py_buffer::new();
        // SAFETY: `obj` is a live object (the GIL is held); PyBUF_SIMPLE asks for one
        // contiguous block of bytes (PyBUF_WRITABLE: and writable), and a failure sets a
        // Python exception.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut view, flags) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(ReadBuffer { view })
    }

    fn len(&self) -> usize {
        usize::try_from(self.view.len).unwrap_or(0)
    }

    fn bytes(&self) -> &[u8] {
        match self.len() {
            // SAFETY: the exporter guarantees `len` readable bytes at `buf` until the view
            // is released, which happens only when `self` is dropped.
            n if n > 0 && !self.view.buf.is_null() => unsafe { std::slice::from_raw_parts(self.view.buf.cast::<u8>(), n) },
            _ => &[],
        }
    }

    /// The bytes, writable; only for a view taken with [`ReadBuffer::get_mut`].
    fn bytes_mut(&mut self) -> &mut [u8] {
        match self.len() {
            // SAFETY: as in `bytes`; the view was requested writable, and `&mut self`
            // makes this the only slice over it on the Rust side.
            n if n > 0 && !self.view.buf.is_null() && self.view.readonly == 0 => unsafe { std::slice::from_raw_parts_mut(self.view.buf.cast::<u8>(), n) },
            _ => &mut [],
        }
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        // SAFETY: the view was filled by a successful PyObject_GetBuffer and is released
        // once; the GIL is held wherever a ReadBuffer lives (it is never sent across
        // `allow_threads`).
        unsafe { ffi::PyBuffer_Release(&mut self.view) };
    }
}

/// Session options from the Python arguments; `threads` -1 means all cores.
fn session_options(threads: i64, reference: bool, backends: Option<Vec<String>>, gpu_precision: Option<String>) -> PyResult<SessionOptions> {
    let threads = match threads {
        -1 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => usize::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| PyValueError::new_err("num_threads should >= 1 (or -1 for all cores)"))?,
    };
    let mut options = SessionOptions { threads, ..SessionOptions::default().with_env_backends().map_err(err_as::<PyValueError>)? };
    if reference {
        // LiteRT's reference kernels (BUILTIN_REF): ferrite's naive ones.
        options.backends = vec!["reference".into()];
    }
    if let Some(b) = backends {
        // The session checks the names (an unknown one is a ValueError when it is built).
        options.backends = b;
    }
    if let Some(p) = gpu_precision {
        // "fp32" or "fp16", as --gpu-precision and FERRITE_GPU_PRECISION (which it overrides).
        options.gpu_precision = p.parse().map_err(err_as::<PyValueError>)?;
    }
    Ok(options)
}

/// Models loaded by path for sharing, held weakly: an entry lives as long as a
/// session of its model does. Keyed by the canonical path and the file's identity
/// and modification time, so a file replaced on disk is loaded afresh.
type SharedKey = (std::path::PathBuf, u64, u64, u64, std::time::SystemTime);
static SHARED_MODELS: Mutex<Vec<(SharedKey, std::sync::Weak<Model>)>> = Mutex::new(Vec::new());

/// The model at `path`, from a live session of this process when one loaded the same
/// file for sharing.
fn shared_load(path: &str) -> PyResult<Arc<Model>> {
    let io = |e: std::io::Error| PyValueError::new_err(format!("cannot read {path}: {e}"));
    let canonical = std::fs::canonicalize(path).map_err(io)?;
    let meta = std::fs::metadata(&canonical).map_err(io)?;
    #[cfg(unix)]
    let (dev, ino) = {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    };
    #[cfg(not(unix))]
    let (dev, ino) = (0, 0);
    let key: SharedKey = (canonical, dev, ino, meta.len(), meta.modified().map_err(io)?);
    let mut models = SHARED_MODELS.lock().unwrap_or_else(|e| e.into_inner());
    models.retain(|(_, m)| m.strong_count() > 0);
    if let Some(m) = models.iter().find(|(k, _)| *k == key).and_then(|(_, m)| m.upgrade()) {
        return Ok(m);
    }
    let m = Arc::new(Model::from_file(&key.0).map_err(err_as::<PyValueError>)?);
    models.push((key, Arc::downgrade(&m)));
    Ok(m)
}

/// One ferrite session. The mutex makes the object shareable between Python threads;
/// calls on one session are serialized.
#[pyclass(module = "ferrite._ferrite", frozen)]
struct NativeSession {
    model: Arc<Model>,
    options: SessionOptions,
    preserve_all: bool,
    session: Mutex<Session>,
    /// Live [`TensorBuffer`]s of this session.
    views: Arc<AtomicUsize>,
    /// A run with Python callbacks is in progress (see the module notes).
    in_callbacks: AtomicBool,
}

impl NativeSession {
    fn lock(&self) -> PyResult<MutexGuard<'_, Session>> {
        if self.in_callbacks.load(Ordering::SeqCst) {
            return Err(PyRuntimeError::new_err(
                "the interpreter is running with op callbacks: it cannot be used until invoke_with_callbacks returns \
                 (each callback gets its op's tensors as arguments)",
            ));
        }
        // A panic inside a call cannot leave the session half-updated in a way later
        // calls rely on (each call re-validates state), so a poisoned lock is reused.
        Ok(self.session.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn build(model: Arc<Model>, options: SessionOptions, preserve_all: bool, signature: Option<&str>) -> PyResult<NativeSession> {
        let mut s = Session::with_options(model.clone(), options.clone()).map_err(err_as::<PyValueError>)?;
        if let Some(key) = signature {
            s.select_signature(key).map_err(err_as::<PyValueError>)?;
        }
        s.set_preserve_all_tensors(preserve_all).map_err(err)?;
        Ok(NativeSession { model, options, preserve_all, session: Mutex::new(s), views: Arc::new(AtomicUsize::new(0)), in_callbacks: AtomicBool::new(false) })
    }

    /// Refuses a call that may move or free session memory while views exist.
    fn no_views(&self, what: &str) -> PyResult<()> {
        match self.views.load(Ordering::SeqCst) {
            0 => Ok(()),
            n => {
                // LiteRT's words, which applications may search for, then ferrite's count.
                Err(PyRuntimeError::new_err(format!(
                    "There is at least 1 reference to internal data in the interpreter in the form of a numpy array or slice. \
                     Be sure to only hold the function returned from tensor() if you are using raw data access. \
                     ({what}: {n} view(s) alive)"
                )))
            }
        }
    }

    fn input_position(s: &Session, t: usize) -> PyResult<usize> {
        s.inputs().iter().position(|d| d.tensor == t).ok_or_else(|| PyValueError::new_err(format!("tensor {t} is not an input of this interpreter")))
    }
}

#[pymethods]
impl NativeSession {
    /// Loads from a path or from bytes (copied once into the session's model). Every
    /// load failure is a `ValueError`, as in LiteRT. `threads` -1 means all cores.
    /// With `share` and a path, a model file already loaded by a live session of this
    /// process (same path, same file) is not loaded again: the new session shares its
    /// model and prepared weights. With `share_arena`, intermediates live in the model's
    /// shared arena, borrowed only while the session runs.
    #[new]
    #[pyo3(signature = (path=None, content=None, threads=1, preserve_all=false, reference=false, share=false, backends=None, share_arena=false, gpu_precision=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        path: Option<String>,
        content: Option<&Bound<'_, PyAny>>,
        threads: i64,
        preserve_all: bool,
        reference: bool,
        share: bool,
        backends: Option<Vec<String>>,
        share_arena: bool,
        gpu_precision: Option<String>,
    ) -> PyResult<Self> {
        let content = content.map(ReadBuffer::get).transpose()?;
        contain("loading the model", || {
            let model = match (path, content) {
                (Some(p), None) if share => shared_load(&p)?,
                (Some(p), None) => Arc::new(Model::from_file(p).map_err(err_as::<PyValueError>)?),
                (None, Some(c)) => Arc::new(Model::from_bytes(Arc::new(c.bytes().to_vec())).map_err(err_as::<PyValueError>)?),
                _ => return Err(PyValueError::new_err("give exactly one of model_path and model_content")),
            };
            let mut options = session_options(threads, reference, backends, gpu_precision)?;
            options.shared_arena = share_arena.then(|| model.shared_arena());
            NativeSession::build(model, options, preserve_all, None)
        })
    }

    /// A new, independent session of this session's model: no second load, and the
    /// prepared weights are shared (freed with the last session using them). With
    /// `share_arena`, its intermediates live in the model's shared arena.
    #[pyo3(signature = (threads=1, preserve_all=false, reference=false, backends=None, share_arena=false, gpu_precision=None))]
    fn shared(
        &self,
        threads: i64,
        preserve_all: bool,
        reference: bool,
        backends: Option<Vec<String>>,
        share_arena: bool,
        gpu_precision: Option<String>,
    ) -> PyResult<NativeSession> {
        contain("sharing the model", || {
            let mut options = session_options(threads, reference, backends, gpu_precision)?;
            options.shared_arena = share_arena.then(|| self.model.shared_arena());
            NativeSession::build(self.model.clone(), options, preserve_all, None)
        })
    }

    /// Prepared constants (packed weights, converted constants) the sessions of this
    /// session's model share now.
    fn shared_constants(&self) -> usize {
        self.model.shared_constant_count()
    }

    /// A second session of the same model (shared, not reloaded) running signature `key`.
    fn for_signature(&self, key: &str) -> PyResult<NativeSession> {
        contain("for_signature", || NativeSession::build(self.model.clone(), self.options.clone(), self.preserve_all, Some(key)))
    }

    /// Index of the subgraph the session runs.
    fn subgraph(&self) -> PyResult<usize> {
        Ok(self.lock()?.subgraph_index())
    }

    fn num_subgraphs(&self) -> usize {
        self.model.subgraphs().len()
    }

    fn num_tensors(&self, subgraph: usize) -> usize {
        self.model.subgraphs().get(subgraph).map_or(0, |g| g.tensors.len())
    }

    /// Tensor indices of the session's inputs and outputs.
    fn io(&self) -> PyResult<(Vec<usize>, Vec<usize>)> {
        let s = self.lock()?;
        Ok((s.inputs().iter().map(|d| d.tensor).collect(), s.outputs().iter().map(|d| d.tensor).collect()))
    }

    /// Details of tensor `t` of `subgraph`: the session's current shapes for its own
    /// subgraph, the model's for the others.
    fn describe(&self, subgraph: usize, t: usize) -> PyResult<Detail> {
        contain("describe", || {
            let g = self.model.subgraphs().get(subgraph).ok_or_else(|| PyValueError::new_err(format!("subgraph {subgraph} does not exist")))?;
            let info =
                g.tensors.get(t).ok_or_else(|| PyValueError::new_err(format!("Invalid tensor index {t} exceeds max tensor index {}", g.tensors.len())))?;
            let s = self.lock()?;
            let shape = if subgraph == s.subgraph_index() { s.tensor_desc(t).map_err(err)?.shape } else { info.shape.clone() };
            Ok(detail(info, shape))
        })
    }

    /// Op `i` of the session's subgraph: (name, inputs with -1 for omitted ones, outputs).
    fn op(&self, i: usize) -> PyResult<(String, Vec<i64>, Vec<i64>)> {
        let sg = self.lock()?.subgraph_index();
        let op = self.model.subgraphs()[sg].ops.get(i).ok_or_else(|| PyValueError::new_err("Invalid node index"))?;
        let index = |t: &usize| i64::try_from(*t).unwrap_or(-1);
        Ok((op.code.name(), op.inputs.iter().map(|t| t.as_ref().map_or(-1, index)).collect(), op.outputs.iter().map(index).collect()))
    }

    fn num_ops(&self) -> PyResult<usize> {
        let sg = self.lock()?.subgraph_index();
        Ok(self.model.subgraphs()[sg].ops.len())
    }

    /// Signatures: (key, subgraph, [(input name, tensor)], [(output name, tensor)]).
    #[allow(clippy::type_complexity)]
    fn signatures(&self) -> Vec<(String, usize, Vec<(String, usize)>, Vec<(String, usize)>)> {
        self.model.signatures().iter().map(|s| (s.key.clone(), s.subgraph, s.inputs.clone(), s.outputs.clone())).collect()
    }

    /// Resizes input tensor `t`. With `strict`, only dimensions the model marks -1 may
    /// change. Returns whether the shape changed (the session then needs `allocate`).
    fn resize(&self, t: usize, dims: Vec<i64>, strict: bool) -> PyResult<bool> {
        contain("resize", || {
            let mut s = self.lock()?;
            let k = NativeSession::input_position(&s, t)?;
            let cur = s.tensor_desc(t).map_err(err)?;
            let shape: Vec<usize> = dims
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<Result<_, _>>()
                .map_err(|_| PyRuntimeError::new_err(format!("tensor {t}: cannot resize to {dims:?}: dimensions must not be negative")))?;
            if strict {
                let sig = &cur.shape_signature;
                if sig.len() != shape.len() {
                    return Err(PyRuntimeError::new_err(format!(
                        "tensor {t}: ResizeInputTensorStrict cannot change the rank from {} to {}",
                        sig.len(),
                        shape.len()
                    )));
                }
                for (i, (&want, (&have, &to))) in sig.iter().zip(cur.shape.iter().zip(&shape)).enumerate() {
                    if want != -1 && have != to {
                        return Err(PyRuntimeError::new_err(format!(
                            "Attempting to resize dimension {i} of tensor {t} with value {have} to {to}. ResizeInputTensorStrict only allows mutating unknown dimensions identified by -1."
                        )));
                    }
                }
            }
            if cur.shape == shape {
                return Ok(false);
            }
            self.no_views("resize_tensor_input")?;
            s.resize_input(k, &shape).map_err(err_as::<PyRuntimeError>)?;
            Ok(true)
        })
    }

    /// LiteRT's AllocateTensors; a no-op when nothing changed. Returns whether the plan
    /// changed. Every failure is a RuntimeError, as in LiteRT.
    fn allocate(&self) -> PyResult<bool> {
        contain("allocate", || {
            // Checked under the lock, which `view` also holds while it counts a new view.
            let mut s = self.lock()?;
            self.no_views("allocate_tensors")?;
            s.allocate_tensors().map_err(err_as::<PyRuntimeError>)
        })
    }

    /// Whether shapes are computed by runs (their details change per run).
    fn dynamic_shapes(&self) -> PyResult<bool> {
        Ok(self.lock()?.has_dynamic_shapes())
    }

    /// Copies a C-contiguous buffer into tensor `t`; the byte count must match.
    fn set(&self, t: usize, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = ReadBuffer::get(data)?;
        contain("set", || {
            let mut s = self.lock()?;
            let dst = s.tensor_data_mut(t).map_err(err_as::<PyValueError>)?;
            if dst.len() != data.bytes().len() {
                return Err(PyValueError::new_err(format!("tensor {t} holds {} bytes, got {}", dst.len(), data.bytes().len())));
            }
            dst.copy_from_slice(data.bytes());
            Ok(())
        })
    }

    /// Sets STRING input `k` (its position among the inputs) from a TFLite string buffer
    /// (count, offsets, bytes) the Python side encoded; the session validates the buffer
    /// and the count against the input's shape, as it does for any caller.
    fn set_strings(&self, k: usize, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = ReadBuffer::get(data)?;
        contain("set_strings", || self.lock()?.set_input(k, data.bytes()).map_err(err_as::<PyValueError>))
    }

    /// Copies tensor `t` into `out` (a fresh C-contiguous numpy array the Python side made
    /// for the tensor's dtype and shape). Returns false, copying nothing, when the sizes
    /// differ (a sparse constant's stored values); `get` then gives the shape.
    fn read_into(&self, t: usize, out: &Bound<'_, PyAny>) -> PyResult<bool> {
        let mut out = ReadBuffer::get_mut(out)?;
        contain("read_into", || {
            let s = self.lock()?;
            let d = s.tensor_data(t).map_err(err_as::<PyValueError>)?;
            if d.bytes.len() != out.len() {
                return Ok(false);
            }
            out.bytes_mut().copy_from_slice(d.bytes);
            Ok(true)
        })
    }

    /// A copy of tensor `t`: (shape, bytes). A sparse constant's stored values come as
    /// one flat dimension, as LiteRT returns them.
    fn get<'py>(&self, py: Python<'py>, t: usize) -> PyResult<(Vec<usize>, Bound<'py, PyByteArray>)> {
        contain("get", || {
            let s = self.lock()?;
            let d = s.tensor_data(t).map_err(err_as::<PyValueError>)?;
            Ok((flat_if_packed(d.shape, d.dtype, d.bytes.len()), PyByteArray::new(py, d.bytes)))
        })
    }

    /// A constant of another subgraph: (shape, bytes).
    fn get_constant<'py>(&self, py: Python<'py>, subgraph: usize, t: usize) -> PyResult<(Vec<usize>, Bound<'py, PyByteArray>)> {
        let info = self.model.subgraphs().get(subgraph).and_then(|g| g.tensors.get(t)).ok_or_else(|| PyValueError::new_err("Invalid tensor index"))?;
        let bytes = self.model.const_data(info).ok_or_else(|| {
            PyValueError::new_err(format!(
                "tensor {t} of subgraph {subgraph} is not a constant: ferrite reads run-time tensors of the interpreter's own subgraph only"
            ))
        })?;
        Ok((flat_if_packed(&info.shape, info.dtype, bytes.len()), PyByteArray::new(py, bytes)))
    }

    /// A live view of tensor `t`'s memory (see the module notes): (shape, buffer object).
    fn view(slf: Bound<'_, Self>, t: usize) -> PyResult<(Vec<usize>, TensorBuffer)> {
        let this = slf.get();
        contain("view", || {
            let mut s = this.lock()?;
            // Writable where the session allows writes (arena tensors, run-time values),
            // read-only for constants (their bytes may be the read-only model map).
            let (shape, ptr, len, readonly) = match s.tensor_data_mut(t) {
                Ok(b) => (None, b.as_mut_ptr(), b.len(), false),
                Err(ferrite::Error::InvalidArgument(_)) => {
                    let d = s.tensor_data(t).map_err(err_as::<PyValueError>)?;
                    (Some(flat_if_packed(d.shape, d.dtype, d.bytes.len())), d.bytes.as_ptr().cast_mut(), d.bytes.len(), true)
                }
                Err(e) => return Err(err_as::<PyValueError>(e)),
            };
            let shape = match shape {
                Some(sh) => sh,
                None => s.tensor_data(t).map(|d| flat_if_packed(d.shape, d.dtype, d.bytes.len())).map_err(err_as::<PyValueError>)?,
            };
            this.views.fetch_add(1, Ordering::SeqCst);
            Ok((shape, TensorBuffer { _session: slf.clone().unbind(), views: this.views.clone(), ptr: ptr as usize, len, readonly }))
        })
    }

    /// Live views of this session.
    fn views(&self) -> usize {
        self.views.load(Ordering::SeqCst)
    }

    fn run(&self, py: Python<'_>) -> PyResult<()> {
        // Inference does not touch Python objects: let other Python threads run. The view
        // check is under the lock, so no view can be made between it and the run.
        py.allow_threads(|| {
            contain("run", || {
                let mut s = self.lock()?;
                self.no_views("invoke")?;
                s.run().map_err(err_as::<PyRuntimeError>)
            })
        })
    }

    /// LiteRT's ResetVariableTensors (variable tensors only, not resource variables).
    fn reset_variable_tensors(&self) -> PyResult<()> {
        self.lock()?.reset_variable_tensors();
        Ok(())
    }

    /// Starts or stops recording a trace (prepare phases from now, every run's ops).
    fn set_tracing(&self, on: bool) -> PyResult<()> {
        self.lock()?.set_tracing(on);
        Ok(())
    }

    /// Writes the trace recorded so far to `path` as Chrome trace-event JSON.
    fn write_trace(&self, path: std::path::PathBuf) -> PyResult<()> {
        contain("write_trace", || self.lock()?.write_trace(&path).map_err(err))
    }

    /// Runs with `before` and `after` (callables or None) called around every op with
    /// (subgraph, op index, op type, runs on, fused into or -1, inputs, outputs); each
    /// tensor is (index, name, dtype, shape, scales, zero points, quantized dim, state,
    /// bytes or None). A callable returns 0 (continue), 1 (skip; from `before`) or 2
    /// (stop). Returns whether the run completed; an exception in a callback stops the
    /// run and is raised here.
    #[pyo3(signature = (before=None, after=None))]
    fn run_with_callbacks(&self, py: Python<'_>, before: Option<PyObject>, after: Option<PyObject>) -> PyResult<bool> {
        contain("run_with_callbacks", || {
            let mut s = self.lock()?;
            self.no_views("invoke_with_callbacks")?;
            let raised: std::cell::RefCell<Option<PyErr>> = std::cell::RefCell::new(None);
            let call = |cb: &Option<PyObject>, ev: &ferrite::OpEvent<'_>| -> ferrite::Flow {
                let Some(cb) = cb else { return ferrite::Flow::Continue };
                match cb.call1(py, (event_tuple(py, ev),)).and_then(|r| r.extract::<i64>(py)) {
                    Ok(0) => ferrite::Flow::Continue,
                    Ok(1) => ferrite::Flow::Skip,
                    Ok(_) => ferrite::Flow::Stop,
                    Err(e) => {
                        raised.borrow_mut().get_or_insert(e);
                        ferrite::Flow::Stop
                    }
                }
            };
            self.in_callbacks.store(true, Ordering::SeqCst);
            let r = s.run_with_callbacks(|ev| call(&before, ev), |ev| call(&after, ev));
            self.in_callbacks.store(false, Ordering::SeqCst);
            if let Some(e) = raised.into_inner() {
                return Err(e);
            }
            Ok(r.map_err(err_as::<PyRuntimeError>)? == ferrite::RunOutcome::Completed)
        })
    }
}

/// One tensor of an op for a Python callback: (index, name, dtype, shape, scales, zero
/// points, quantized dim, state, a copy of its bytes or None).
type TensorTuple<'py> = (usize, String, &'static str, Vec<usize>, Vec<f32>, Vec<i64>, usize, &'static str, Option<Bound<'py, pyo3::types::PyBytes>>);

fn tensor_tuple<'py>(py: Python<'py>, v: &ferrite::TensorView<'_>) -> TensorTuple<'py> {
    let (scales, zps, axis) = v.quant.map_or((vec![], vec![], 0), |q| (q.scale.clone(), q.zero_point.clone(), q.axis));
    let data = v.data.map(|d| pyo3::types::PyBytes::new(py, d));
    (v.tensor, v.name.to_string(), dtype_name(v.dtype), v.shape.to_vec(), scales, zps, axis, v.state.name(), data)
}

/// A control-flow op on an op's call path: (subgraph, op index, callee, WHILE pass).
type FrameTuple = (usize, usize, usize, Option<usize>);

/// An op for a Python callback: (subgraph, index, type, runs on, fused into or -1,
/// inputs, outputs, call path).
#[allow(clippy::type_complexity)]
fn event_tuple<'py>(
    py: Python<'py>,
    ev: &ferrite::OpEvent<'_>,
) -> (usize, usize, String, &'static str, i64, Vec<TensorTuple<'py>>, Vec<TensorTuple<'py>>, Vec<FrameTuple>) {
    let fused_into = match ev.runs_on {
        ferrite::OpRun::Fused { into } => i64::try_from(into).unwrap_or(-1),
        _ => -1,
    };
    let tensors = |vs: &[ferrite::TensorView<'_>]| vs.iter().map(|v| tensor_tuple(py, v)).collect();
    let calls = ev.calls.iter().map(|f| (f.subgraph, f.op, f.callee, f.iteration)).collect();
    (ev.subgraph, ev.index, ev.op_name(), ev.runs_on.kind(), fused_into, tensors(ev.inputs), tensors(ev.outputs), calls)
}

/// The shape to present `len` bytes of `dtype` in: `shape`, or one flat dimension when
/// the bytes are not the dense tensor (a sparse constant's stored values).
fn flat_if_packed(shape: &[usize], dtype: DType, len: usize) -> Vec<usize> {
    match dtype.size() {
        Some(size) if shape.iter().product::<usize>() * size != len => vec![len / size],
        _ => shape.to_vec(),
    }
}

/// A tensor's memory exported through the buffer protocol (numpy wraps it without a
/// copy). Counted on its session while alive; the session refuses to move memory
/// meanwhile, and is kept alive by this object.
#[pyclass(module = "ferrite._ferrite", frozen)]
struct TensorBuffer {
    _session: Py<NativeSession>,
    views: Arc<AtomicUsize>,
    /// Address of the first byte (kept as an integer: the object is shared between
    /// threads, and the memory's validity is guaranteed by the view count, not by Rust).
    ptr: usize,
    len: usize,
    readonly: bool,
}

#[pymethods]
impl TensorBuffer {
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let len = ffi::Py_ssize_t::try_from(this.len).map_err(|_| PyValueError::new_err("tensor too large for a buffer"))?;
        // SAFETY: `view` comes from the interpreter's buffer machinery. The memory stays
        // valid and in place while this object lives: it belongs to the session this
        // object holds, and the session refuses every call that could move it while the
        // view count (which this object is part of) is not zero. PyBuffer_FillInfo takes
        // a new reference to `slf` for the view and raises if a writable view of
        // read-only memory is requested.
        if unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), this.ptr as *mut std::ffi::c_void, len, c_int::from(this.readonly), flags) } != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

impl Drop for TensorBuffer {
    fn drop(&mut self) {
        self.views.fetch_sub(1, Ordering::SeqCst);
    }
}

#[pymodule]
fn _ferrite(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeSession>()?;
    m.add_class::<TensorBuffer>()?;
    m.add_class::<train::NativeTrainer>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
