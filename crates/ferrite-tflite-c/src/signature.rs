//! Signature runners: a model's named entry points, their inputs and outputs called by
//! the signature's names.
//!
//! Each signature gets a ferrite session of its own (made by the first
//! `TfLiteInterpreterGetSignatureRunner` for it and owned by the interpreter), so a
//! runner's tensors and variables are separate from the interpreter's. Handles for the
//! same signature share it; deleting a handle frees only the handle.

use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr;

use ferrite::{Error, Session};

use crate::interpreter::{dims_arg, interpreter, Exec, TfLiteInterpreter};
use crate::tensor::{TensorBox, TfLiteTensor};
use crate::{guard, TfLiteStatus};

/// The session of one signature and its input and output names.
pub(crate) struct Runner {
    pub(crate) exec: Exec,
    input_names: Vec<CString>,
    output_names: Vec<CString>,
}

/// A handle on one signature of an interpreter; delete it before the interpreter.
pub struct TfLiteSignatureRunner {
    interpreter: *mut TfLiteInterpreter,
    signature: usize,
}

fn c_names(names: impl Iterator<Item = String>) -> Vec<CString> {
    names.map(|n| CString::new(n.replace('\0', " ")).unwrap_or_default()).collect()
}

impl TfLiteInterpreter {
    /// The runner of signature `k`, made on first use.
    fn runner(&mut self, k: usize) -> Result<&mut Runner, Error> {
        if self.runners[k].is_none() {
            let key = self.model().signatures()[k].key.clone();
            let mut session = Session::with_options(self.model().clone(), self.session_options.clone())?;
            session.select_signature(&key)?;
            let exec = Exec::new(self.model(), session, self.main.reporter);
            let input_names = c_names(exec.session.inputs().into_iter().map(|d| d.name));
            let output_names = c_names(exec.session.outputs().into_iter().map(|d| d.name));
            self.runners[k] = Some(Box::new(Runner { exec, input_names, output_names }));
        }
        self.runners[k].as_deref_mut().ok_or_else(|| Error::InvalidState("signature runner missing".into()))
    }
}

/// # Safety
/// `r` is NULL or a live runner handle whose interpreter is alive.
unsafe fn runner<'a>(r: *const TfLiteSignatureRunner) -> Option<&'a mut Runner> {
    // SAFETY: per this function's contract.
    let r = unsafe { r.as_ref() }?;
    // SAFETY: a runner's interpreter outlives it (the API's rule).
    let it = unsafe { interpreter(r.interpreter) }?;
    it.runners.get_mut(r.signature)?.as_deref_mut()
}

/// Index of `name` in `names`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn position(names: &[CString], name: *const c_char) -> Option<usize> {
    if name.is_null() {
        return None;
    }
    // SAFETY: NUL-terminated (caller contract).
    let name = unsafe { CStr::from_ptr(name) };
    names.iter().position(|n| n.as_c_str() == name)
}

fn name_at(names: &[CString], index: i32) -> *const c_char {
    usize::try_from(index).ok().and_then(|i| names.get(i)).map_or(ptr::null(), |n| n.as_ptr())
}

fn tensor_named(names: &[CString], tensors: &[TensorBox], name: *const c_char) -> *mut TfLiteTensor {
    // SAFETY: `name` is NULL or NUL-terminated (the entry points' contract).
    unsafe { position(names, name) }.map_or(ptr::null_mut(), |i| tensors[i].ptr())
}

/// Number of signatures in the model (0 for NULL).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetSignatureCount(interpreter: *const TfLiteInterpreter) -> i32 {
    // SAFETY: NULL or a live interpreter (caller contract).
    unsafe { interpreter.as_ref() }.map_or(0, |it| it.signature_keys.len() as i32)
}

/// The key of signature `signature_index`, owned by the interpreter (NULL when out of range).
///
/// # Safety
/// `interpreter` is NULL or a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetSignatureKey(interpreter: *const TfLiteInterpreter, signature_index: i32) -> *const c_char {
    // SAFETY: NULL or a live interpreter (caller contract).
    unsafe { interpreter.as_ref() }.map_or(ptr::null(), |it| name_at(&it.signature_keys, signature_index))
}

/// A runner for the signature called `signature_key`; NULL when there is none, or when
/// its session cannot be made (reported). Delete it with TfLiteSignatureRunnerDelete
/// before the interpreter.
///
/// # Safety
/// `interpreter` is NULL or a live interpreter; `signature_key` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn TfLiteInterpreterGetSignatureRunner(
    interpreter: *const TfLiteInterpreter,
    signature_key: *const c_char,
) -> *mut TfLiteSignatureRunner {
    // SAFETY: forwarded caller contract.
    let Some(it) = (unsafe { self::interpreter(interpreter) }) else { return ptr::null_mut() };
    // SAFETY: forwarded caller contract.
    let Some(k) = (unsafe { position(&it.signature_keys, signature_key) }) else { return ptr::null_mut() };
    let reporter = it.main.reporter;
    guard(reporter, ptr::null_mut(), || match it.runner(k) {
        Ok(_) => Box::into_raw(Box::new(TfLiteSignatureRunner { interpreter: interpreter.cast_mut(), signature: k })),
        Err(e) => {
            reporter.report(&e.to_string());
            ptr::null_mut()
        }
    })
}

/// Number of inputs of the signature (0 for NULL).
///
/// # Safety
/// `signature_runner` is NULL or a live runner.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerGetInputCount(signature_runner: *const TfLiteSignatureRunner) -> usize {
    // SAFETY: forwarded caller contract.
    unsafe { runner(signature_runner) }.map_or(0, |r| r.input_names.len())
}

/// Number of outputs of the signature (0 for NULL).
///
/// # Safety
/// `signature_runner` is NULL or a live runner.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerGetOutputCount(signature_runner: *const TfLiteSignatureRunner) -> usize {
    // SAFETY: forwarded caller contract.
    unsafe { runner(signature_runner) }.map_or(0, |r| r.output_names.len())
}

/// The signature's name of input `input_index` (NULL when out of range).
///
/// # Safety
/// `signature_runner` is NULL or a live runner.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerGetInputName(signature_runner: *const TfLiteSignatureRunner, input_index: i32) -> *const c_char {
    // SAFETY: forwarded caller contract.
    unsafe { runner(signature_runner) }.map_or(ptr::null(), |r| name_at(&r.input_names, input_index))
}

/// The signature's name of output `output_index` (NULL when out of range).
///
/// # Safety
/// `signature_runner` is NULL or a live runner.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerGetOutputName(signature_runner: *const TfLiteSignatureRunner, output_index: i32) -> *const c_char {
    // SAFETY: forwarded caller contract.
    unsafe { runner(signature_runner) }.map_or(ptr::null(), |r| name_at(&r.output_names, output_index))
}

/// The input called `input_name` (NULL when there is none).
///
/// # Safety
/// `signature_runner` is NULL or a live runner; `input_name` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerGetInputTensor(signature_runner: *mut TfLiteSignatureRunner, input_name: *const c_char) -> *mut TfLiteTensor {
    // SAFETY: forwarded caller contract.
    unsafe { runner(signature_runner) }.map_or(ptr::null_mut(), |r| tensor_named(&r.input_names, &r.exec.inputs, input_name))
}

/// The output called `output_name` (NULL when there is none).
///
/// # Safety
/// `signature_runner` is NULL or a live runner; `output_name` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerGetOutputTensor(
    signature_runner: *const TfLiteSignatureRunner,
    output_name: *const c_char,
) -> *const TfLiteTensor {
    // SAFETY: forwarded caller contract.
    unsafe { runner(signature_runner) }.map_or(ptr::null(), |r| tensor_named(&r.output_names, &r.exec.outputs, output_name).cast_const())
}

/// Runs `f` on the runner's session, catching panics; ERROR for NULL.
///
/// # Safety
/// `signature_runner` is NULL or a live runner.
unsafe fn with_runner(signature_runner: *const TfLiteSignatureRunner, f: impl FnOnce(&mut Runner) -> Result<(), Error>) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    let Some(r) = (unsafe { runner(signature_runner) }) else { return TfLiteStatus::Error };
    guard(r.exec.reporter, TfLiteStatus::Error, || {
        let result = f(&mut *r);
        r.exec.status(result)
    })
}

/// Gives the input called `input_name` the shape `input_dims[0..input_dims_size]`;
/// only dimensions the model marks unknown (-1) may change. Takes effect at the next
/// TfLiteSignatureRunnerAllocateTensors.
///
/// # Safety
/// `signature_runner` is NULL or a live runner; `input_name` NULL or NUL-terminated;
/// `input_dims` NULL or `input_dims_size` ints.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerResizeInputTensor(
    signature_runner: *mut TfLiteSignatureRunner,
    input_name: *const c_char,
    input_dims: *const c_int,
    input_dims_size: i32,
) -> TfLiteStatus {
    // SAFETY: forwarded caller contract (each pointer read under its own).
    unsafe {
        with_runner(signature_runner, |r| {
            let i = position(&r.input_names, input_name).ok_or_else(|| Error::InvalidArgument("no signature input by that name".into()))?;
            r.exec.resize(i, dims_arg(input_dims, input_dims_size)?, true)
        })
    }
}

/// Plans memory for the signature's current input shapes (cheap when nothing changed).
///
/// # Safety
/// `signature_runner` is NULL or a live runner.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerAllocateTensors(signature_runner: *mut TfLiteSignatureRunner) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_runner(signature_runner, |r| r.exec.allocate()) }
}

/// Runs the signature on its inputs' contents.
///
/// # Safety
/// `signature_runner` is NULL or a live runner.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerInvoke(signature_runner: *mut TfLiteSignatureRunner) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    unsafe { with_runner(signature_runner, |r| r.exec.invoke()) }
}

/// Deletes a runner handle (NULL is ignored); the signature's session stays with the
/// interpreter for later handles.
///
/// # Safety
/// `signature_runner` is NULL or a handle not deleted before.
#[no_mangle]
pub unsafe extern "C" fn TfLiteSignatureRunnerDelete(signature_runner: *mut TfLiteSignatureRunner) {
    if !signature_runner.is_null() {
        // SAFETY: made by Box::into_raw in TfLiteInterpreterGetSignatureRunner, deleted once.
        drop(unsafe { Box::from_raw(signature_runner) });
    }
}
