//! Models, interpreter options and interpreters.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::Arc;

use ferrite::{Error, Model, ModelBytes, Session, SessionOptions, TensorDesc};

use crate::report::{Reporter, TfLiteErrorReporter};
use crate::signature::Runner;
use crate::tensor::{TensorBox, TensorMeta, TfLiteQuantizationParams, TfLiteTensor};
use crate::{guard, TfLiteStatus};

/// A loaded model, shared by the interpreters made from it (each holds its own
/// reference, so the model may be deleted right after they are created).
pub struct TfLiteModel {
    pub(crate) model: Arc<Model>,
}

/// Interpreter settings: thread count and error reporter.
#[derive(Debug, Clone, Copy)]
pub struct TfLiteInterpreterOptions {
    threads: i32,
    reporter: Reporter,
}

/// A model's caller-owned bytes, read in place (`TfLiteModelCreate` does not copy).
struct CallerBytes {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the API requires the buffer to outlive the model and every interpreter made
// from it, unchanged; ferrite only reads it, from any thread.
unsafe impl Send for CallerBytes {}
// SAFETY: as above; shared reads only.
unsafe impl Sync for CallerBytes {}

impl AsRef<[u8]> for CallerBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr`/`len` describe the live caller buffer (see the Send impl).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

fn model_box(r: Result<Model, Error>, reporter: Reporter) -> *mut TfLiteModel {
    match r {
        Ok(m) => Box::into_raw(Box::new(TfLiteModel { model: Arc::new(m) })),
        Err(e) => {
            reporter.report(&e.to_string());
            ptr::null_mut()
        }
    }
}

/// # Safety
/// `data` is NULL or points to `size` bytes that outlive the model and its interpreters.
unsafe fn create_from_buffer(data: *const c_void, size: usize, reporter: Reporter) -> *mut TfLiteModel {
    if data.is_null() {
        reporter.report("TfLiteModelCreate: the model buffer is NULL");
        return ptr::null_mut();
    }
    guard(reporter, ptr::null_mut(), || {
        let bytes: ModelBytes = Arc::new(CallerBytes { ptr: data.cast(), len: size });
        model_box(Model::from_bytes(bytes), reporter)
    })
}

/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn create_from_file(path: *const c_char, reporter: Reporter) -> *mut TfLiteModel {
    if path.is_null() {
        reporter.report("TfLiteModelCreateFromFile: the path is NULL");
        return ptr::null_mut();
    }
    // SAFETY: a NUL-terminated string (caller contract).
    let path = unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned();
    guard(reporter, ptr::null_mut(), || model_box(Model::from_file(&path), reporter))
}

/// Loads a model from `model_size` bytes at `model_data`, read in place: the buffer
/// must stay valid and unchanged until the model and every interpreter made from it
/// are deleted. NULL on failure (the reason is printed to stderr).
///
/// # Safety
/// `model_data` is NULL or points to `model_size` readable bytes with that lifetime.
#[no_mangle]
pub unsafe extern "C" fn TfLiteModelCreate(model_data: *const c_void, model_size: usize) -> *mut TfLiteModel {
    // SAFETY: forwarded caller contract.
    unsafe { create_from_buffer(model_data, model_size, Reporter::STDERR) }
}

/// `TfLiteModelCreate` reporting failures to `reporter` (NULL: stderr).
///
/// # Safety
/// As `TfLiteModelCreate`; `reporter` and `user_data` stay valid during the call.
#[no_mangle]
pub unsafe extern "C" fn TfLiteModelCreateWithErrorReporter(
    model_data: *const c_void,
    model_size: usize,
    reporter: TfLiteErrorReporter,
    user_data: *mut c_void,
) -> *mut TfLiteModel {
    // SAFETY: forwarded caller contract.
    unsafe { create_from_buffer(model_data, model_size, Reporter::new(reporter, user_data)) }
}

/// Loads the model file at `model_path` (memory-mapped: the file must not change while
/// the model or its interpreters exist). NULL on failure (the reason is printed to stderr).
///
/// # Safety
/// `model_path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn TfLiteModelCreateFromFile(model_path: *const c_char) -> *mut TfLiteModel {
    // SAFETY: forwarded caller contract.
    unsafe { create_from_file(model_path, Reporter::STDERR) }
}

/// `TfLiteModelCreateFromFile` reporting failures to `reporter` (NULL: stderr).
///
/// # Safety
/// As `TfLiteModelCreateFromFile`; `reporter` and `user_data` stay valid during the call.
#[no_mangle]
pub unsafe extern "C" fn TfLiteModelCreateFromFileWithErrorReporter(
    model_path: *const c_char,
    reporter: TfLiteErrorReporter,
    user_data: *mut c_void,
) -> *mut TfLiteModel {
    // SAFETY: forwarded caller contract.
    unsafe { create_from_file(model_path, Reporter::new(reporter, user_data)) }
}

/// Deletes a model (NULL is ignored). Interpreters made from it keep working.
///
/// # Safety
/// `model` is NULL or a model not deleted before.
#[no_mangle]
pub unsafe extern "C" fn TfLiteModelDelete(model: *mut TfLiteModel) {
    if !model.is_null() {
        // SAFETY: made by Box::into_raw in `model_box`, deleted once (caller contract).
        guard(Reporter::STDERR, (), || drop(unsafe { Box::from_raw(model) }));
    }
}

/// New options: the runtime's default thread count (-1), errors to stderr.
#[no_mangle]
pub extern "C" fn TfLiteInterpreterOptionsCreate() -> *mut TfLiteInterpreterOptions {
    Box::into_raw(Box::new(TfLiteInterpreterOptions { threads: -1, reporter: Reporter::STDERR }))
}

/// A copy of `from` (NULL for NULL), to be deleted with `TfLiteInterpreterOptionsDelete`.
///
/// # Safety
/// `from` is NULL or live options.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterOptionsCopy(from: *const TfLiteInterpreterOptions) -> *mut TfLiteInterpreterOptions {
    // SAFETY: NULL or live options (caller contract).
    match unsafe { from.as_ref() } {
        Some(o) => Box::into_raw(Box::new(*o)),
        None => ptr::null_mut(),
    }
}

/// Deletes options (NULL is ignored); interpreters made with them are unaffected.
///
/// # Safety
/// `options` is NULL or options not deleted before.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterOptionsDelete(options: *mut TfLiteInterpreterOptions) {
    if !options.is_null() {
        // SAFETY: made by Box::into_raw, deleted once (caller contract).
        drop(unsafe { Box::from_raw(options) });
    }
}

/// Worker threads for interpreters made with these options; values below 1 (-1 is
/// the API's "runtime default") mean one thread.
///
/// # Safety
/// `options` is NULL or live options.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterOptionsSetNumThreads(options: *mut TfLiteInterpreterOptions, num_threads: i32) {
    // SAFETY: NULL or live options (caller contract).
    if let Some(o) = unsafe { options.as_mut() } {
        o.threads = num_threads;
    }
}

/// Sends the errors of interpreters made with these options to
/// `reporter(user_data, format, args)` (NULL: stderr).
///
/// # Safety
/// `options` is NULL or live options; `reporter` and `user_data` stay valid for the
/// lifetime of every interpreter made with them.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterOptionsSetErrorReporter(
    options: *mut TfLiteInterpreterOptions,
    reporter: TfLiteErrorReporter,
    user_data: *mut c_void,
) {
    // SAFETY: NULL or live options (caller contract).
    if let Some(o) = unsafe { options.as_mut() } {
        o.reporter = Reporter::new(reporter, user_data);
    }
}

/// One runnable session and the tensors handed out for its inputs and outputs: the
/// interpreter's own, or a signature runner's.
pub(crate) struct Exec {
    pub(crate) session: Session,
    pub(crate) inputs: Vec<TensorBox>,
    pub(crate) outputs: Vec<TensorBox>,
    /// The tensors point at the active plan's memory: no resize since the last
    /// AllocateTensors. Invoke refuses to run otherwise, as LiteRT does.
    allocated: bool,
    pub(crate) reporter: Reporter,
}

impl Exec {
    /// Wraps a session, preparing it at once: the common create-then-allocate sequence
    /// compiles once. A failure is not an error yet: as in LiteRT, a model whose ops
    /// cannot be prepared still gets an interpreter, and AllocateTensors reports why
    /// (the placeholder shapes of resizable inputs may also only work after a resize).
    pub(crate) fn new(model: &Model, mut session: Session, reporter: Reporter) -> Exec {
        // Ignored on purpose: the session stays unprepared and AllocateTensors retries.
        let _ = session.prepare();
        let g = &model.subgraphs()[session.subgraph_index()];
        let make = |d: &TensorDesc| {
            let info = &g.tensors[d.tensor];
            let params = match &info.quant {
                Some(q) if q.scale.len() == 1 => {
                    TfLiteQuantizationParams { scale: q.scale[0], zero_point: q.zero_point.first().and_then(|&z| i32::try_from(z).ok()).unwrap_or(0) }
                }
                _ => TfLiteQuantizationParams::default(),
            };
            let meta =
                TensorMeta { name: &info.name, dtype: d.dtype, shape: &d.shape, shape_signature: &d.shape_signature, params, is_variable: info.is_variable };
            TensorBox::new(&meta, reporter)
        };
        let inputs = session.inputs().iter().map(make).collect();
        let outputs = session.outputs().iter().map(make).collect();
        Exec { session, inputs, outputs, allocated: false, reporter }
    }

    /// OK, or an error status with the message reported: `kTfLiteUnresolvedOps` when a
    /// custom op has no implementation (LiteRT's answer from AllocateTensors), else
    /// `kTfLiteError`.
    pub(crate) fn status(&self, r: Result<(), Error>) -> TfLiteStatus {
        let Err(e) = r else { return TfLiteStatus::Ok };
        self.reporter.report(&e.to_string());
        let unresolved_custom_op = matches!(&e, Error::Unsupported(_))
            && e.location().and_then(|l| Some((l.subgraph?, l.op?))).is_some_and(|(g, op)| {
                let ops = self.session.model().subgraphs().get(g).map(|g| &g.ops[..]).unwrap_or_default();
                ops.get(op).is_some_and(|op| op.code.builtin().is_none())
            });
        if unresolved_custom_op {
            TfLiteStatus::UnresolvedOps
        } else {
            TfLiteStatus::Error
        }
    }

    /// Makes the plan current for the input shapes and points every tensor at its
    /// memory. Nothing to do (and nothing done) when no input was resized since the last time.
    pub(crate) fn allocate(&mut self) -> Result<(), Error> {
        if self.allocated {
            return Ok(());
        }
        self.session.allocate_tensors()?;
        let (ins, outs) = (self.session.inputs(), self.session.outputs());
        for (t, d) in self.inputs.iter_mut().zip(&ins) {
            let t = t.get_mut();
            match self.session.tensor_data_mut(d.tensor) {
                Ok(b) => t.set_data(b.as_mut_ptr(), b.len(), false),
                // No op reads this input: it gets memory of its own for apps to write.
                Err(_) => t.use_spare(),
            }
        }
        for (k, d) in outs.iter().enumerate() {
            let t = self.outputs[k].get_mut();
            t.set_shape(&d.shape);
            match self.session.tensor_data_mut(d.tensor) {
                Ok(b) => t.set_data(b.as_mut_ptr(), b.len(), false),
                // Known only after a run (data-dependent shape) or a constant: set by invoke.
                Err(_) => t.clear_data(),
            }
        }
        self.allocated = true;
        Ok(())
    }

    /// Runs on the inputs' memory and points the outputs at what the run produced.
    pub(crate) fn invoke(&mut self) -> Result<(), Error> {
        if !self.allocated {
            return Err(Error::InvalidState(
                "Invoke called before AllocateTensors: call TfLiteInterpreterAllocateTensors after creating the interpreter and after every resize".into(),
            ));
        }
        self.session.run()?;
        for (k, t) in self.outputs.iter_mut().enumerate() {
            let out = self.session.output(k)?;
            let t = t.get_mut();
            // Same shape in the common case: set_shape then writes nothing new.
            let same = t.shape().len() == out.shape.len() && t.shape().iter().zip(out.shape).all(|(&a, &b)| usize::try_from(a) == Ok(b));
            if !same {
                t.set_shape(out.shape);
            }
            let planned = t.data_ptr() == out.bytes.as_ptr();
            t.set_data(out.bytes.as_ptr().cast_mut(), out.bytes.len(), !planned);
        }
        Ok(())
    }

    /// Gives input `i` the shape `dims`. `strict` allows changing only the dims the model
    /// marks unknown (-1), as LiteRT's signature runners do. The new shape takes effect
    /// at the next AllocateTensors; a resize to the current shape changes nothing.
    pub(crate) fn resize(&mut self, i: usize, dims: &[c_int], strict: bool) -> Result<(), Error> {
        let n = self.inputs.len();
        let t = self.inputs.get(i).ok_or_else(|| Error::InvalidArgument(format!("input {i} does not exist ({n} inputs)").into()))?.get();
        // Built only for a message: a resize to the current shape runs per frame in some apps.
        let name = || {
            // SAFETY: the tensor's own NUL-terminated name, alive as long as the tensor.
            unsafe { CStr::from_ptr(t.name_ptr()) }.to_string_lossy().into_owned()
        };
        if let Some(&d) = dims.iter().find(|&&d| d < 0) {
            return Err(Error::InvalidArgument(format!("cannot resize input '{}' to {dims:?}: dimension {d} is negative", name()).into()));
        }
        if strict {
            let sig = t.shape_signature();
            let fixed_changed = sig.len() != dims.len() || sig.iter().zip(dims).any(|(&s, &d)| s != -1 && s != d);
            if fixed_changed {
                return Err(Error::InvalidArgument(
                    format!("cannot resize input '{}' from signature {sig:?} to {dims:?}: only dimensions marked -1 may change", name()).into(),
                ));
            }
        }
        if t.shape() == dims {
            return Ok(());
        }
        let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        self.session.resize_input(i, &shape)?;
        let t = self.inputs[i].get_mut();
        t.set_shape(&shape);
        t.clear_data();
        self.allocated = false;
        Ok(())
    }
}

/// An interpreter: a ferrite session over the model's main subgraph, its input and
/// output tensors, and the signature runners made from it.
pub struct TfLiteInterpreter {
    model: Arc<Model>,
    /// Options for the sessions of signature runners.
    pub(crate) session_options: SessionOptions,
    pub(crate) main: Exec,
    input_indices: Vec<c_int>,
    output_indices: Vec<c_int>,
    pub(crate) signature_keys: Vec<CString>,
    /// One per signature, made by the first TfLiteInterpreterGetSignatureRunner for it;
    /// every runner handle for that signature shares it.
    pub(crate) runners: Vec<Option<Box<Runner>>>,
}

impl TfLiteInterpreter {
    fn new(model: Arc<Model>, options: TfLiteInterpreterOptions) -> Result<TfLiteInterpreter, Error> {
        let mut session_options = SessionOptions::default().with_env_backends()?;
        session_options.threads = usize::try_from(options.threads).ok().filter(|&n| n >= 1).unwrap_or(1);
        let session = Session::with_options(model.clone(), session_options.clone())?;
        let main = Exec::new(&model, session, options.reporter);
        let index = |d: &TensorDesc| c_int::try_from(d.tensor).unwrap_or(-1);
        let input_indices = main.session.inputs().iter().map(index).collect();
        let output_indices = main.session.outputs().iter().map(index).collect();
        let signature_keys = model.signatures().iter().map(|s| CString::new(s.key.replace('\0', " ")).unwrap_or_default()).collect();
        let runners = model.signatures().iter().map(|_| None).collect();
        Ok(TfLiteInterpreter { model, session_options, main, input_indices, output_indices, signature_keys, runners })
    }

    pub(crate) fn model(&self) -> &Arc<Model> {
        &self.model
    }
}

/// # Safety
/// `p` is NULL or a live interpreter, used by one thread at a time (the API's rule).
pub(crate) unsafe fn interpreter<'a>(p: *const TfLiteInterpreter) -> Option<&'a mut TfLiteInterpreter> {
    // SAFETY: per this function's contract; interpreters come from Box::into_raw, so
    // the pointer may be written through even where the API passes it as const.
    unsafe { p.cast_mut().as_mut() }
}

/// A new interpreter for `model` (which may be deleted afterwards), with
/// `optional_options` (NULL: defaults; they may be deleted afterwards too). NULL on
/// failure, reported to the options' error reporter (a NULL model, a bad
/// `FERRITE_BACKENDS`). Ops that cannot be prepared are reported by
/// TfLiteInterpreterAllocateTensors, as LiteRT does.
///
/// # Safety
/// `model` is NULL or a live model; `optional_options` NULL or live options.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterCreate(model: *const TfLiteModel, optional_options: *const TfLiteInterpreterOptions) -> *mut TfLiteInterpreter {
    // SAFETY: NULL or live options (caller contract).
    let options = unsafe { optional_options.as_ref() }.copied().unwrap_or(TfLiteInterpreterOptions { threads: -1, reporter: Reporter::STDERR });
    // SAFETY: NULL or a live model (caller contract).
    let Some(model) = (unsafe { model.as_ref() }) else {
        options.reporter.report("TfLiteInterpreterCreate: the model is NULL");
        return ptr::null_mut();
    };
    guard(options.reporter, ptr::null_mut(), || match TfLiteInterpreter::new(model.model.clone(), options) {
        Ok(it) => Box::into_raw(Box::new(it)),
        Err(e) => {
            options.reporter.report(&e.to_string());
            ptr::null_mut()
        }
    })
}

/// Deletes an interpreter and its tensors (NULL is ignored). Delete its signature
/// runners first.
///
/// # Safety
/// `interpreter` is NULL or an interpreter not deleted before.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterDelete(interpreter: *mut TfLiteInterpreter) {
    if !interpreter.is_null() {
        // SAFETY: made by Box::into_raw in TfLiteInterpreterCreate, deleted once.
        guard(Reporter::STDERR, (), || drop(unsafe { Box::from_raw(interpreter) }));
    }
}

/// Number of inputs (0 for NULL).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetInputTensorCount(interpreter: *const TfLiteInterpreter) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { interpreter_ref(interpreter) }.map_or(0, |it| it.main.inputs.len() as i32)
}

/// Number of outputs (0 for NULL).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetOutputTensorCount(interpreter: *const TfLiteInterpreter) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { interpreter_ref(interpreter) }.map_or(0, |it| it.main.outputs.len() as i32)
}

/// # Safety
/// `p` is NULL or a live interpreter.
unsafe fn interpreter_ref<'a>(p: *const TfLiteInterpreter) -> Option<&'a TfLiteInterpreter> {
    // SAFETY: per this function's contract.
    unsafe { p.as_ref() }
}

fn tensor_at(tensors: &[TensorBox], index: i32) -> *mut TfLiteTensor {
    usize::try_from(index).ok().and_then(|i| tensors.get(i)).map_or(ptr::null_mut(), TensorBox::ptr)
}

/// Input `input_index`, valid for the interpreter's lifetime (NULL when out of range).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetInputTensor(interpreter: *const TfLiteInterpreter, input_index: i32) -> *mut TfLiteTensor {
    // SAFETY: forwarded caller contract.
    unsafe { interpreter_ref(interpreter) }.map_or(ptr::null_mut(), |it| tensor_at(&it.main.inputs, input_index))
}

/// Output `output_index`, valid for the interpreter's lifetime (NULL when out of range).
/// Its shape and data are final after TfLiteInterpreterInvoke.
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetOutputTensor(interpreter: *const TfLiteInterpreter, output_index: i32) -> *const TfLiteTensor {
    // SAFETY: forwarded caller contract.
    unsafe { interpreter_ref(interpreter) }.map_or(ptr::null(), |it| tensor_at(&it.main.outputs, output_index).cast_const())
}

/// The model's tensor indices of the inputs (as many as
/// TfLiteInterpreterGetInputTensorCount; NULL for NULL).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterInputTensorIndices(interpreter: *const TfLiteInterpreter) -> *const c_int {
    // SAFETY: forwarded caller contract.
    unsafe { interpreter_ref(interpreter) }.map_or(ptr::null(), |it| it.input_indices.as_ptr())
}

/// The model's tensor indices of the outputs (NULL for NULL).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterOutputTensorIndices(interpreter: *const TfLiteInterpreter) -> *const c_int {
    // SAFETY: forwarded caller contract.
    unsafe { interpreter_ref(interpreter) }.map_or(ptr::null(), |it| it.output_indices.as_ptr())
}

/// The model's tensor index of input `input_index` (-1 when out of range or NULL).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetInputTensorIndex(interpreter: *const TfLiteInterpreter, input_index: i32) -> i32 {
    // SAFETY: forwarded caller contract.
    let it = unsafe { interpreter_ref(interpreter) };
    it.and_then(|it| usize::try_from(input_index).ok().and_then(|i| it.input_indices.get(i))).copied().unwrap_or(-1)
}

/// The model's tensor index of output `output_index` (-1 when out of range or NULL).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetOutputTensorIndex(interpreter: *const TfLiteInterpreter, output_index: i32) -> i32 {
    // SAFETY: forwarded caller contract.
    let it = unsafe { interpreter_ref(interpreter) };
    it.and_then(|it| usize::try_from(output_index).ok().and_then(|i| it.output_indices.get(i))).copied().unwrap_or(-1)
}

/// Runs `f` on the interpreter's session, catching panics; ERROR for NULL.
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
unsafe fn with_main(interpreter: *const TfLiteInterpreter, f: impl FnOnce(&mut Exec) -> Result<(), Error>) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    let Some(it) = (unsafe { self::interpreter(interpreter) }) else { return TfLiteStatus::Error };
    let reporter = it.main.reporter;
    guard(reporter, TfLiteStatus::Error, || {
        let r = f(&mut it.main);
        it.main.status(r)
    })
}

/// Gives input `input_index` the shape `input_dims[0..input_dims_size]` (copied). It
/// takes effect at the next TfLiteInterpreterAllocateTensors, which must come before
/// the next invoke; until then the input's data is NULL. The rank may change, as in
/// LiteRT (each op checks the ranks it takes when the interpreter is allocated).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter; `input_dims` is NULL or points to
/// `input_dims_size` ints.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterResizeInputTensor(
    interpreter: *mut TfLiteInterpreter,
    input_index: i32,
    input_dims: *const c_int,
    input_dims_size: i32,
) -> TfLiteStatus {
    // SAFETY: forwarded caller contract; `input_dims` is read by `dims_arg` under its own.
    unsafe { with_main(interpreter, |e| e.resize(index_arg(input_index)?, dims_arg(input_dims, input_dims_size)?, false)) }
}

/// A C index argument as `usize` (negative: an error).
pub(crate) fn index_arg(i: i32) -> Result<usize, Error> {
    usize::try_from(i).map_err(|_| Error::InvalidArgument(format!("index {i} is negative").into()))
}

/// The dims argument of a resize (read during the call only).
///
/// # Safety
/// `dims` is NULL or points to `size` ints that stay valid for `'a`.
pub(crate) unsafe fn dims_arg<'a>(dims: *const c_int, size: i32) -> Result<&'a [c_int], Error> {
    let n = usize::try_from(size).map_err(|_| Error::InvalidArgument(format!("dims size {size} is negative").into()))?;
    if n == 0 {
        return Ok(&[]);
    }
    if dims.is_null() {
        return Err(Error::InvalidArgument("the dims array is NULL".into()));
    }
    // SAFETY: `dims` points to `n` ints (caller contract).
    Ok(unsafe { std::slice::from_raw_parts(dims, n) })
}

/// Plans memory for the current input shapes and points every tensor at it. Cheap
/// when nothing was resized since the last call (nothing is recompiled).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterAllocateTensors(interpreter: *mut TfLiteInterpreter) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_main(interpreter, Exec::allocate) }
}

/// Runs the model on the inputs' current contents; ERROR before AllocateTensors or
/// after a resize without one.
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterInvoke(interpreter: *mut TfLiteInterpreter) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_main(interpreter, Exec::invoke) }
}

/// Resets the model's variable tensors (`is_variable`: zeros, an int8 one its zero
/// point). Resource variables (VAR_HANDLE) keep their values, as in LiteRT.
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterResetVariableTensors(interpreter: *mut TfLiteInterpreter) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    let Some(it) = (unsafe { self::interpreter(interpreter) }) else { return TfLiteStatus::Error };
    guard(it.main.reporter, TfLiteStatus::Error, || {
        // Signature runners run sessions of their own: their tensors are reset too.
        it.main.session.reset_variable_tensors();
        for r in it.runners.iter_mut().flatten() {
            r.exec.session.reset_variable_tensors();
        }
        TfLiteStatus::Ok
    })
}
