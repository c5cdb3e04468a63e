//! C API for ferrite.
//!
//! A session is an opaque `FerriteSession*`: create it from a file or a caller
//! buffer, optionally set the thread count and resize inputs, prepare, bind input
//! and output buffers, run, and read outputs. Every call returns a
//! [`FerriteStatus`]; on failure `ferrite_session_last_error` says what went wrong.
//! Arguments are checked (null pointers, indices, sizes) and no Rust panic crosses
//! the boundary: one is caught and reported as `FERRITE_STATUS_ERROR`.
//!
//! Seeing inside a run: `ferrite_session_run_with_callbacks` calls a C function
//! before and after every op with its index, type, backend and read-only views of
//! its tensors (MNN's `runWithCallBack`); `ferrite_session_set_tracing` and
//! `ferrite_session_write_trace` record a Chrome trace (Perfetto, chrome://tracing).
//! With the `observe` feature (default): see [`observe`].
//!
//! Buffers stay owned by the caller. A model buffer passed to
//! `ferrite_session_create_from_buffer` and every bound input or output buffer
//! must stay valid until the session is closed or the buffer is rebound.
//!
//! Training (`ferrite_session_train_*`, nnfw's training calls): see [`train`].

use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use ferrite::ModelBytes;
use ferrite::{DType, Error, Model, Session, SessionOptions};

#[cfg(feature = "observe")]
pub mod observe;
#[cfg(feature = "train")]
pub mod train;

/// Result of every call.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerriteStatus {
    /// Success.
    Ok = 0,
    /// A model or runtime error; see `ferrite_session_last_error`.
    Error = 1,
    /// A required pointer argument was null.
    NullArgument = 2,
    /// The call is not valid in the session's current state (e.g. run before prepare).
    InvalidState = 3,
    /// A size limit was exceeded or memory could not be had.
    OutOfMemory = 4,
    /// A caller buffer is smaller than the tensor it should hold.
    InsufficientSize = 5,
    /// An index, name, shape or size argument is invalid.
    InvalidArgument = 6,
    /// The model uses something ferrite does not implement.
    Unsupported = 7,
}

/// Element type of a tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerriteType {
    /// A type without a C-side name here (strings, complex, resources, ...).
    Other = 0,
    /// 32-bit float.
    Float32 = 1,
    /// 16-bit float.
    Float16 = 2,
    /// Signed 8-bit integer.
    Int8 = 3,
    /// Unsigned 8-bit integer.
    Uint8 = 4,
    /// Signed 16-bit integer.
    Int16 = 5,
    /// Signed 32-bit integer.
    Int32 = 6,
    /// Signed 64-bit integer.
    Int64 = 7,
    /// One byte per boolean.
    Bool = 8,
}

/// Most dimensions a tensor reported through [`FerriteTensorInfo`] can have.
pub const FERRITE_MAX_DIMS: usize = 8;

/// Description of an input or output tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FerriteTensorInfo {
    /// Element type.
    pub dtype: FerriteType,
    /// Number of dimensions (at most `FERRITE_MAX_DIMS`).
    pub rank: usize,
    /// Dimensions; entries past `rank` are 0.
    pub dims: [usize; FERRITE_MAX_DIMS],
    /// Size of the tensor's data in bytes.
    pub bytes: usize,
    /// NUL-terminated name, owned by the session (valid until it is closed).
    pub name: *const c_char,
}

/// An opaque session.
pub struct FerriteSession {
    session: Session,
    model: Arc<Model>,
    /// Set once a call has changed the session (resize, prepare): the thread count
    /// can no longer be changed by re-creating it.
    configured: bool,
    inputs: Vec<Option<(*const u8, usize)>>,
    outputs: Vec<Option<(*mut u8, usize)>>,
    input_names: Vec<CString>,
    output_names: Vec<CString>,
    last_error: CString,
    /// Where in the model the last error arose, when it concerns part of it.
    last_location: Option<ferrite::Location>,
    /// Tracing was asked for (kept when the session is re-created for a thread count).
    #[cfg(feature = "observe")]
    tracing: bool,
    /// Thread count and backend list asked for (None: the defaults), kept when the
    /// session is re-created for the other.
    threads: usize,
    backends: Option<Vec<String>>,
    /// Intermediates in the model's shared arena (`ferrite_session_set_shared_arena`).
    shared_arena: bool,
    /// Names for per-op callbacks, made on the first run with callbacks.
    #[cfg(feature = "observe")]
    callback_names: Option<observe::CallbackNames>,
    /// Training: its info, trainer and bound batch (`ferrite_session_train_*`).
    #[cfg(feature = "train")]
    train: train::TrainState,
}

/// A caller-owned model buffer, used in place.
struct CallerBytes {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the caller guarantees the buffer outlives the session and is not written
// while the session exists (documented on `ferrite_session_create_from_buffer`);
// the runtime only reads it.
unsafe impl Send for CallerBytes {}
// SAFETY: as above; shared reads only.
unsafe impl Sync for CallerBytes {}

impl AsRef<[u8]> for CallerBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: ptr/len describe a live caller buffer (see the Send impl).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

fn status_of(e: &Error) -> FerriteStatus {
    match e {
        Error::InvalidState(_) => FerriteStatus::InvalidState,
        Error::InvalidArgument(_) => FerriteStatus::InvalidArgument,
        Error::ResourceLimit(_) => FerriteStatus::OutOfMemory,
        Error::Unsupported(_) => FerriteStatus::Unsupported,
        _ => FerriteStatus::Error,
    }
}

fn dtype_of(d: DType) -> FerriteType {
    match d {
        DType::F32 => FerriteType::Float32,
        DType::F16 => FerriteType::Float16,
        DType::I8 => FerriteType::Int8,
        DType::U8 => FerriteType::Uint8,
        DType::I16 => FerriteType::Int16,
        DType::I32 => FerriteType::Int32,
        DType::I64 => FerriteType::Int64,
        DType::Bool => FerriteType::Bool,
        _ => FerriteType::Other,
    }
}

/// A C string from a Rust message (interior NULs, impossible in practice, dropped).
fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// Writes `msg` into an optional caller buffer, truncated and NUL-terminated.
///
/// # Safety
/// `buf` is null or points to `len` writable bytes.
unsafe fn write_message(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the caller provides `len` writable bytes at `buf`; n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

impl FerriteSession {
    /// Re-creates the (not yet configured) session with `threads` and `backends`
    /// over the environment's defaults; the bindings made so far stay (same model,
    /// same inputs and outputs).
    fn recreate(&mut self, threads: usize, backends: Option<Vec<String>>) -> FerriteStatus {
        let options = SessionOptions::default().with_env_backends().map(|o| SessionOptions {
            threads,
            #[cfg(feature = "observe")]
            trace: self.tracing,
            backends: backends.clone().unwrap_or(o.backends.clone()),
            shared_arena: self.shared_arena.then(|| self.model.shared_arena()),
            ..o
        });
        match options.and_then(|options| Session::with_options(self.model.clone(), options)) {
            Ok(new) => {
                self.session = new;
                (self.threads, self.backends) = (threads, backends);
                FerriteStatus::Ok
            }
            Err(e) => self.fail_error(&e),
        }
    }

    fn new(session: Session, model: Arc<Model>) -> FerriteSession {
        let mut s = FerriteSession {
            session,
            model,
            configured: false,
            inputs: Vec::new(),
            outputs: Vec::new(),
            input_names: Vec::new(),
            output_names: Vec::new(),
            last_error: CString::default(),
            last_location: None,
            #[cfg(feature = "observe")]
            tracing: false,
            threads: 1,
            backends: None,
            shared_arena: false,
            #[cfg(feature = "observe")]
            callback_names: None,
            #[cfg(feature = "train")]
            train: train::TrainState::default(),
        };
        s.refresh_io();
        s
    }

    fn refresh_io(&mut self) {
        let (ins, outs) = (self.session.inputs(), self.session.outputs());
        self.inputs = vec![None; ins.len()];
        self.outputs = vec![None; outs.len()];
        self.input_names = ins.iter().map(|d| c_string(&d.name)).collect();
        self.output_names = outs.iter().map(|d| c_string(&d.name)).collect();
    }

    fn fail(&mut self, status: FerriteStatus, msg: &str) -> FerriteStatus {
        self.last_error = c_string(msg);
        self.last_location = None;
        status
    }

    /// Records a runtime error: its message, and where in the model it arose.
    fn fail_error(&mut self, e: &Error) -> FerriteStatus {
        let st = self.fail(status_of(e), &e.to_string());
        self.last_location = e.location().cloned();
        st
    }

    /// OK, or INVALID_ARGUMENT with `r`'s message recorded.
    fn result(&mut self, r: Result<(), String>) -> FerriteStatus {
        match r {
            Ok(()) => FerriteStatus::Ok,
            Err(msg) => self.fail(FerriteStatus::InvalidArgument, &msg),
        }
    }

    fn check(&mut self, r: Result<(), Error>) -> FerriteStatus {
        match r {
            Ok(()) => FerriteStatus::Ok,
            Err(e) => self.fail_error(&e),
        }
    }

    /// Copies the bound inputs into the session (all must be bound): the run with
    /// callbacks, which runs on the session's memory.
    #[cfg(feature = "observe")]
    fn copy_inputs(&mut self) -> FerriteStatus {
        let n_in = self.inputs.len();
        let Some(ins) = self.inputs.iter().copied().collect::<Option<Vec<_>>>() else {
            return self.fail(FerriteStatus::InvalidState, &format!("run needs all {n_in} inputs bound with ferrite_session_set_input"));
        };
        for (i, (p, n)) in ins.into_iter().enumerate() {
            // SAFETY: bound buffers are live caller memory of the recorded sizes (the
            // binding contract of ferrite_session_set_input).
            let data = unsafe { std::slice::from_raw_parts(p, n) };
            let r = self.session.set_input(i, data);
            if let Err(e) = r {
                return self.fail_error(&e);
            }
        }
        FerriteStatus::Ok
    }

    /// Copies the last run's outputs into the bound output buffers (after a run
    /// with callbacks).
    #[cfg(feature = "observe")]
    fn copy_outputs(&mut self) -> FerriteStatus {
        for i in 0..self.outputs.len() {
            let Some((p, cap)) = self.outputs[i] else { continue };
            let data = match self.session.output(i) {
                Ok(d) => d.bytes,
                Err(e) => return self.fail_error(&e),
            };
            if data.len() > cap {
                let msg = format!("output {i} needs {} bytes, the bound buffer has {cap}", data.len());
                return self.fail(FerriteStatus::InsufficientSize, &msg);
            }
            // SAFETY: `p` is a live caller buffer of `cap >= data.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        }
        FerriteStatus::Ok
    }

    fn run(&mut self) -> FerriteStatus {
        let n_in = self.inputs.len();
        let Some(ins) = self.inputs.iter().copied().collect::<Option<Vec<_>>>() else {
            return self.fail(FerriteStatus::InvalidState, &format!("run needs all {n_in} inputs bound with ferrite_session_set_input"));
        };
        // SAFETY: bound buffers are live caller memory of the recorded sizes (the
        // binding contract of ferrite_session_set_input).
        let in_slices: Vec<&[u8]> = ins.iter().map(|&(p, n)| unsafe { std::slice::from_raw_parts(p, n) }).collect();
        let outs = self.outputs.iter().copied().collect::<Option<Vec<_>>>().filter(|_| !self.session.has_dynamic_shapes());
        if let Some(outs) = outs {
            // Every output bound and sizes known before the run: kernels read and
            // write the caller's memory directly. Outputs of data-dependent size take
            // the copying path below, which accepts any buffer large enough.
            // SAFETY: as above, for the output bindings (writable, not aliased by inputs).
            let mut out_slices: Vec<&mut [u8]> = outs.iter().map(|&(p, n)| unsafe { std::slice::from_raw_parts_mut(p, n) }).collect();
            let r = self.session.run_with(&in_slices, &mut out_slices).map(|_| ());
            return self.check(r);
        }
        let mut r = Ok(());
        for (i, data) in in_slices.iter().enumerate() {
            r = r.and_then(|()| self.session.set_input(i, data));
        }
        let r = r.and_then(|()| self.session.run());
        let st = self.check(r);
        if st != FerriteStatus::Ok {
            return st;
        }
        // Copy into the outputs that are bound; the others are read in place.
        for i in 0..self.outputs.len() {
            let Some((p, cap)) = self.outputs[i] else { continue };
            let data = match self.session.output(i) {
                Ok(d) => d.bytes,
                Err(e) => return self.fail_error(&e),
            };
            if data.len() > cap {
                let msg = format!("output {i} needs {} bytes, the bound buffer has {cap}", data.len());
                return self.fail(FerriteStatus::InsufficientSize, &msg);
            }
            // SAFETY: `p` is a live caller buffer of `cap >= data.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        }
        FerriteStatus::Ok
    }
}

/// Records buffer `(ptr, bytes)` as binding `index` of `slots` (inputs or outputs).
fn bind<P>(slots: &mut [Option<(P, usize)>], index: usize, ptr: P, bytes: usize, what: &str) -> Result<(), String> {
    let n = slots.len();
    let slot = slots.get_mut(index).ok_or_else(|| format!("invalid argument: {what} {index} does not exist ({n} {what}s)"))?;
    *slot = Some((ptr, bytes));
    Ok(())
}

/// Runs `f` on the session behind `s`, catching panics.
///
/// # Safety
/// `s` is null or a pointer returned by a create function and not yet closed.
unsafe fn with_session(s: *mut FerriteSession, f: impl FnOnce(&mut FerriteSession) -> FerriteStatus) -> FerriteStatus {
    // SAFETY: per the contract above, a non-null `s` is a live, exclusively used session.
    let Some(s) = (unsafe { s.as_mut() }) else { return FerriteStatus::NullArgument };
    match catch_unwind(AssertUnwindSafe(|| f(&mut *s))) {
        Ok(st) => st,
        Err(_) => s.fail(FerriteStatus::Error, "internal error: a panic was caught at the C boundary"),
    }
}

/// Creates a session from a session-independent result, reporting failures in `err`.
///
/// # Safety
/// `out` is non-null and writable; `err` is null or `err_len` writable bytes.
unsafe fn create(load: impl FnOnce() -> Result<Arc<Model>, Error>, out: *mut *mut FerriteSession, err: *mut c_char, err_len: usize) -> FerriteStatus {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let model = load()?;
        let session = Session::with_options(model.clone(), SessionOptions::default().with_env_backends()?)?;
        Ok::<_, Error>(FerriteSession::new(session, model))
    }));
    let (status, msg) = match r {
        Ok(Ok(s)) => {
            // SAFETY: `out` is non-null and writable (checked by the callers).
            unsafe { *out = Box::into_raw(Box::new(s)) };
            return FerriteStatus::Ok;
        }
        Ok(Err(e)) => (status_of(&e), e.to_string()),
        Err(_) => (FerriteStatus::Error, "internal error: a panic was caught at the C boundary".to_string()),
    };
    // SAFETY: as documented for this function.
    unsafe {
        *out = std::ptr::null_mut();
        write_message(err, err_len, &msg);
    }
    status
}

/// Loads the model file at `path` (memory-mapped) into a new session stored in `*out`.
/// On failure `*out` is set to NULL and, if `err` is not NULL, a message is written
/// there (at most `err_len` bytes, NUL-terminated).
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable; `err` is NULL or points to
/// `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_create_from_file(
    path: *const c_char,
    out: *mut *mut FerriteSession,
    err: *mut c_char,
    err_len: usize,
) -> FerriteStatus {
    if path.is_null() || out.is_null() {
        return FerriteStatus::NullArgument;
    }
    // SAFETY: `path` is a NUL-terminated string (caller contract).
    let path = unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned();
    // SAFETY: forwarded caller contract.
    unsafe { create(|| Model::from_file(&path).map(Arc::new), out, err, err_len) }
}

/// Loads a model from `len` bytes at `data`, used in place (not copied): the buffer
/// must stay valid and unchanged until the session is closed.
///
/// # Safety
/// `data` points to `len` readable bytes that outlive the session; `out` is
/// writable; `err` is NULL or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_create_from_buffer(
    data: *const u8,
    len: usize,
    out: *mut *mut FerriteSession,
    err: *mut c_char,
    err_len: usize,
) -> FerriteStatus {
    if data.is_null() || out.is_null() {
        return FerriteStatus::NullArgument;
    }
    let bytes: ModelBytes = Arc::new(CallerBytes { ptr: data, len });
    // SAFETY: forwarded caller contract.
    unsafe { create(|| Model::from_bytes(bytes).map(Arc::new), out, err, err_len) }
}

/// Creates a new session over the model `other` runs, stored in `*out`: no second
/// load, and the prepared constants (packed weights, converted and folded constants)
/// are shared by every session of that model, so each further session costs only its
/// own arena, scratch and threads. The sessions are independent otherwise (inputs,
/// thread count, bindings, state) and may run at the same time on different threads;
/// they may be closed in any order (the model and the shared constants are freed
/// with the last). For a model from `ferrite_session_create_from_buffer`, the buffer
/// must outlive every session sharing it. On failure `*out` is NULL and `err` (if
/// not NULL) receives a message.
///
/// # Safety
/// `other` is a live session that no other thread uses during this call (like
/// every call on a session); `out` is writable; `err` is NULL or points to
/// `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_create_shared(
    other: *const FerriteSession,
    out: *mut *mut FerriteSession,
    err: *mut c_char,
    err_len: usize,
) -> FerriteStatus {
    if other.is_null() || out.is_null() {
        return FerriteStatus::NullArgument;
    }
    // SAFETY: `other` is a live session not in use elsewhere (caller contract).
    let model = unsafe { &(*other).model }.clone();
    // SAFETY: forwarded caller contract.
    unsafe { create(|| Ok(model), out, err, err_len) }
}

/// Closes a session and frees everything it owns. NULL is ignored.
///
/// # Safety
/// `s` is NULL or a session not closed before; it must not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_close(s: *mut FerriteSession) {
    if !s.is_null() {
        // SAFETY: `s` came from Box::into_raw in `create` and is closed only once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(s) })));
    }
}

/// The message of the session's last failed call ("" if none). Owned by the
/// session; valid until its next call or close.
///
/// # Safety
/// `s` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_last_error(s: *const FerriteSession) -> *const c_char {
    // SAFETY: a non-null `s` is a live session (caller contract).
    match unsafe { s.as_ref() } {
        Some(s) => s.last_error.as_ptr(),
        None => c"null session".as_ptr(),
    }
}

/// Where in the model the session's last failed call went wrong: the subgraph, op
/// and tensor indices, each -1 where unknown or not applicable (all -1 after a
/// failure that concerns no part of the model). Any output pointer may be NULL.
///
/// # Safety
/// `s` is NULL or a live session; each non-null pointer is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_last_error_location(s: *const FerriteSession, subgraph: *mut i32, op: *mut i32, tensor: *mut i32) -> FerriteStatus {
    // SAFETY: a non-null `s` is a live session (caller contract).
    let Some(s) = (unsafe { s.as_ref() }) else { return FerriteStatus::NullArgument };
    let l = s.last_location.clone().unwrap_or_default();
    let index = |v: Option<usize>| v.and_then(|v| i32::try_from(v).ok()).unwrap_or(-1);
    for (ptr, v) in [(subgraph, l.subgraph), (op, l.op), (tensor, l.tensor)] {
        // SAFETY: non-null output pointers are writable (caller contract).
        if let Some(p) = unsafe { ptr.as_mut() } {
            *p = index(v);
        }
    }
    FerriteStatus::Ok
}

/// Sets the number of worker threads. Only before the first resize or prepare.
///
/// # Safety
/// `s` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_set_num_threads(s: *mut FerriteSession, threads: usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            if s.configured {
                return s.fail(FerriteStatus::InvalidState, "invalid state: the thread count is set before resizing or preparing");
            }
            if threads == 0 {
                return s.fail(FerriteStatus::InvalidArgument, "invalid argument: the thread count must be at least 1");
            }
            s.recreate(threads, s.backends.clone())
        })
    }
}

/// Sets the backends the session's ops run on, in order of preference, as a
/// comma-separated list (`"gpu,cpu"`, `"reference,cpu"`; cpu is always tried
/// last): each op runs on the first with a kernel for it. Only before the first
/// resize or prepare. `reference` needs a library built with the `reference`
/// feature (an unknown name is `FERRITE_STATUS_INVALID_ARGUMENT`), `gpu` one built
/// with the `gpu` feature; without
/// an adapter its ops run on the next backend (with a warning on stderr).
/// `FERRITE_BACKENDS` is the default; this call overrides it.
///
/// # Safety
/// `s` is NULL or a live session; `backends` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_set_backends(s: *mut FerriteSession, backends: *const c_char) -> FerriteStatus {
    if backends.is_null() {
        return FerriteStatus::NullArgument;
    }
    // SAFETY: non-null and NUL-terminated (caller contract).
    let list = unsafe { CStr::from_ptr(backends) }.to_string_lossy().into_owned();
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            if s.configured {
                return s.fail(FerriteStatus::InvalidState, "invalid state: the backends are set before resizing or preparing");
            }
            match ferrite::parse_backend_list(&list) {
                Ok(b) => s.recreate(s.threads, Some(b)),
                Err(e) => s.fail_error(&e),
            }
        })
    }
}

/// With `on`, the session borrows the memory of its intermediate tensors, for each
/// run, from a pool shared by the sessions of its model that set this too (see
/// `ferrite_session_create_shared`), instead of keeping an arena of its own: sessions
/// that run one after another use one arena, and runs at the same time on several
/// threads each get one. The session keeps its inputs, outputs and state; outputs are
/// the same bits either way. Only before the first resize or prepare.
///
/// # Safety
/// `s` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_set_shared_arena(s: *mut FerriteSession, on: bool) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            if s.configured {
                return s.fail(FerriteStatus::InvalidState, "invalid state: the arena is chosen before resizing or preparing");
            }
            s.shared_arena = on;
            s.recreate(s.threads, s.backends.clone())
        })
    }
}

/// Number of inputs in `*count`.
///
/// # Safety
/// `s` is NULL or a live session; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_input_count(s: *mut FerriteSession, count: *mut usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `count` checked for null before the write.
    unsafe {
        with_session(s, |s| match count.as_mut() {
            Some(c) => {
                *c = s.inputs.len();
                FerriteStatus::Ok
            }
            None => FerriteStatus::NullArgument,
        })
    }
}

/// Number of outputs in `*count`.
///
/// # Safety
/// `s` is NULL or a live session; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_output_count(s: *mut FerriteSession, count: *mut usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `count` checked for null before the write.
    unsafe {
        with_session(s, |s| match count.as_mut() {
            Some(c) => {
                *c = s.outputs.len();
                FerriteStatus::Ok
            }
            None => FerriteStatus::NullArgument,
        })
    }
}

fn fill_info(s: &mut FerriteSession, dtype: DType, shape: &[usize], name: *const c_char, info: &mut FerriteTensorInfo) -> FerriteStatus {
    if shape.len() > FERRITE_MAX_DIMS {
        let msg = format!("unsupported: rank {} exceeds FERRITE_MAX_DIMS", shape.len());
        return s.fail(FerriteStatus::Unsupported, &msg);
    }
    let mut dims = [0usize; FERRITE_MAX_DIMS];
    dims[..shape.len()].copy_from_slice(shape);
    let n: usize = shape.iter().product();
    *info = FerriteTensorInfo { dtype: dtype_of(dtype), rank: shape.len(), dims, bytes: n * dtype.size().unwrap_or(0), name };
    FerriteStatus::Ok
}

/// Description of input `index` (its current shape, after any resize).
///
/// # Safety
/// `s` is NULL or a live session; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_input_info(s: *mut FerriteSession, index: usize, info: *mut FerriteTensorInfo) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `info` checked for null before the write.
    unsafe {
        with_session(s, |s| {
            let Some(info) = info.as_mut() else { return FerriteStatus::NullArgument };
            let descs = s.session.inputs();
            let Some(d) = descs.get(index) else {
                return s.fail(FerriteStatus::InvalidArgument, &format!("invalid argument: input {index} does not exist ({} inputs)", descs.len()));
            };
            let name = s.input_names[index].as_ptr();
            fill_info(s, d.dtype, &d.shape, name, info)
        })
    }
}

/// Description of output `index`: after prepare its planned shape, after a run the
/// shape that run produced (outputs of data-dependent shape change with it).
///
/// # Safety
/// `s` is NULL or a live session; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_output_info(s: *mut FerriteSession, index: usize, info: *mut FerriteTensorInfo) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `info` checked for null before the write.
    unsafe {
        with_session(s, |s| {
            let Some(info) = info.as_mut() else { return FerriteStatus::NullArgument };
            if index >= s.outputs.len() {
                return s.fail(FerriteStatus::InvalidArgument, &format!("invalid argument: output {index} does not exist ({} outputs)", s.outputs.len()));
            }
            let name = s.output_names[index].as_ptr();
            let (dtype, shape) = match s.session.output(index) {
                Ok(d) => (d.dtype, d.shape.to_vec()),
                Err(_) => match s.session.output_slot(index) {
                    Ok((d, sh)) => (d, sh.to_vec()),
                    Err(_) => {
                        let d = &s.session.outputs()[index];
                        (d.dtype, d.shape.clone())
                    }
                },
            };
            fill_info(s, dtype, &shape, name, info)
        })
    }
}

/// Index of the input or output named `name` (`is_output` selects which).
///
/// # Safety
/// `s` is NULL or a live session; `name` is NULL or NUL-terminated; `index` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_index_by_name(s: *mut FerriteSession, name: *const c_char, is_output: bool, index: *mut usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract; pointers checked for null before use.
    unsafe {
        with_session(s, |s| {
            if name.is_null() || index.is_null() {
                return FerriteStatus::NullArgument;
            }
            let name = CStr::from_ptr(name).to_string_lossy();
            let r = if is_output { s.session.output_index(&name) } else { s.session.input_index(&name) };
            match r {
                Ok(i) => {
                    *index = i;
                    FerriteStatus::Ok
                }
                Err(e) => s.fail_error(&e),
            }
        })
    }
}

/// Gives input `index` a new shape (`rank` dims at `dims`). Before prepare it is
/// planned at prepare; after prepare the next run re-plans once.
///
/// # Safety
/// `s` is NULL or a live session; `dims` points to `rank` readable values.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_resize_input(s: *mut FerriteSession, index: usize, dims: *const usize, rank: usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `dims` checked for null.
    unsafe {
        with_session(s, |s| {
            if dims.is_null() && rank > 0 {
                return FerriteStatus::NullArgument;
            }
            let shape = if rank == 0 { Vec::new() } else { std::slice::from_raw_parts(dims, rank).to_vec() };
            s.configured = true;
            let r = s.session.resize_input(index, &shape);
            s.check(r)
        })
    }
}

/// Compiles the session: shapes, kernels, memory plan.
///
/// # Safety
/// `s` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_prepare(s: *mut FerriteSession) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            s.configured = true;
            let r = s.session.prepare();
            s.check(r)
        })
    }
}

/// Binds `bytes` bytes at `data` as input `index`. Not copied: the buffer is read
/// by every run until it is rebound, so it must stay valid until then.
///
/// # Safety
/// `s` is NULL or a live session; `data` points to `bytes` readable bytes that stay
/// valid while bound.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_set_input(s: *mut FerriteSession, index: usize, data: *const c_void, bytes: usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            if data.is_null() {
                return FerriteStatus::NullArgument;
            }
            let r = bind(&mut s.inputs, index, data.cast::<u8>(), bytes, "input");
            s.result(r)
        })
    }
}

/// Binds `bytes` writable bytes at `data` as output `index`. When every output is
/// bound, runs write results there directly; otherwise results are copied into the
/// bound ones after each run (and `FERRITE_STATUS_INSUFFICIENT_SIZE` reports a
/// buffer too small for a data-dependent output).
///
/// # Safety
/// `s` is NULL or a live session; `data` points to `bytes` writable bytes that stay
/// valid while bound and do not overlap any input buffer.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_set_output(s: *mut FerriteSession, index: usize, data: *mut c_void, bytes: usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            if data.is_null() {
                return FerriteStatus::NullArgument;
            }
            let r = bind(&mut s.outputs, index, data.cast::<u8>(), bytes, "output");
            s.result(r)
        })
    }
}

/// Runs the model on the bound inputs (all must be bound; the session must be prepared).
///
/// # Safety
/// `s` is NULL or a live session whose bound buffers are valid.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_run(s: *mut FerriteSession) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_session(s, |s| s.run()) }
}

/// Output `index` of the last run, in place: `*data` points into the session's
/// memory (valid until the next run or close) and `*bytes` is its size.
///
/// # Safety
/// `s` is NULL or a live session; `data` and `bytes` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_output_data(s: *mut FerriteSession, index: usize, data: *mut *const c_void, bytes: *mut usize) -> FerriteStatus {
    // SAFETY: forwarded caller contract; pointers checked for null before the writes.
    unsafe {
        with_session(s, |s| {
            if data.is_null() || bytes.is_null() {
                return FerriteStatus::NullArgument;
            }
            let r = s.session.output(index).map(|d| (d.bytes.as_ptr(), d.bytes.len()));
            match r {
                Ok((p, n)) => {
                    *data = p.cast::<c_void>();
                    *bytes = n;
                    FerriteStatus::Ok
                }
                Err(e) => s.fail_error(&e),
            }
        })
    }
}
