//! Seeing inside a run through the C API (the `observe` feature): per-op callbacks
//! with views of each op's tensors, and Chrome traces. Declared in the header under
//! `FERRITE_FEATURE_OBSERVE`; a library built without the feature lacks these symbols.

use std::ffi::{c_char, c_void, CStr, CString};

use ferrite::Session;

use crate::{c_string, dtype_of, with_session, FerriteSession, FerriteStatus, FerriteType};

/// Whether a [`FerriteTensorView`] holds the tensor's value, and if not, why.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerriteTensorState {
    /// `data` holds the tensor's value.
    Ready = 0,
    /// An output seen before its op ran.
    Pending = 1,
    /// Never materialised: computed inside a fused neighbouring kernel.
    Fused = 2,
    /// No storage at this point (a constant released after packing, an unused tensor).
    Absent = 3,
}

/// What a per-op callback returns (as an `int`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerriteFlow {
    /// Go on.
    Continue = 0,
    /// From `before`: do not run this op (its outputs keep what their memory held).
    Skip = 1,
    /// End the run here.
    Stop = 2,
}

/// A read-only view of one tensor of an op, passed to a per-op callback. The
/// pointers are valid during the callback only, but for `name` (owned by the session).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FerriteTensorView {
    /// Tensor index in the subgraph.
    pub tensor: usize,
    /// NUL-terminated name, owned by the session (valid until it is closed).
    pub name: *const c_char,
    /// Element type.
    pub dtype: FerriteType,
    /// Number of dimensions.
    pub rank: usize,
    /// `rank` dimensions.
    pub dims: *const usize,
    /// Number of quantization scales and zero points (0: not quantized).
    pub quant_count: usize,
    /// `quant_count` scales.
    pub scales: *const f32,
    /// `quant_count` zero points.
    pub zero_points: *const i64,
    /// The quantized dimension when there are several scales.
    pub quant_axis: usize,
    /// Whether `data` holds the value.
    pub state: FerriteTensorState,
    /// The raw bytes; NULL unless `state` is `FERRITE_TENSOR_STATE_READY`.
    pub data: *const c_void,
    /// Size of `data` in bytes (0 when it is NULL).
    pub bytes: usize,
}

/// One op as a per-op callback sees it; valid during the callback.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FerriteOpInfo {
    /// Subgraph of the op.
    pub subgraph: usize,
    /// Op index in the subgraph.
    pub index: usize,
    /// NUL-terminated op type (`CONV_2D`), owned by the session.
    pub op_type: *const c_char,
    /// Where it runs, NUL-terminated, owned by the session: a backend's name
    /// (`cpu`, `reference`), or `fused`, `folded`, `alias`, `executor`, `custom`, `dynamic`.
    pub runs_on: *const c_char,
    /// The op whose kernel computes this one when `runs_on` is `fused`; -1 otherwise.
    pub fused_into: isize,
    /// Number of inputs (omitted optional inputs are left out).
    pub input_count: usize,
    /// `input_count` input views.
    pub inputs: *const FerriteTensorView,
    /// Number of outputs.
    pub output_count: usize,
    /// `output_count` output views (`FERRITE_TENSOR_STATE_PENDING` before the op runs).
    pub outputs: *const FerriteTensorView,
    /// For an op inside an IF/WHILE/CALL_ONCE body: the subgraph and op index of the
    /// innermost control-flow op running it; -1 for the session's own ops.
    pub caller_subgraph: isize,
    /// See `caller_subgraph`.
    pub caller_op: isize,
    /// The pass (from 0) of the innermost WHILE the op runs inside; -1 outside loops.
    pub iteration: isize,
}

/// A per-op callback: returns a [`FerriteFlow`] value (any other value stops the run).
pub type FerriteOpCallback = Option<unsafe extern "C" fn(info: *const FerriteOpInfo, user_data: *mut c_void) -> i32>;

/// The C strings per-op callbacks point to, made once per session.
pub(crate) struct CallbackNames {
    /// Per subgraph: control-flow bodies report their ops too.
    ops: Vec<Vec<CString>>,
    tensors: Vec<Vec<CString>>,
    runs_on: Vec<(&'static str, CString)>,
}

impl CallbackNames {
    fn new(s: &Session) -> CallbackNames {
        let gs = s.model().subgraphs();
        let mut kinds: Vec<&'static str> = s.backend_names();
        kinds.extend(["custom", "executor", "folded", "alias", "fused", "dynamic"]);
        CallbackNames {
            ops: gs.iter().map(|g| g.ops.iter().map(|o| c_string(&o.code.name())).collect()).collect(),
            tensors: gs.iter().map(|g| g.tensors.iter().map(|t| c_string(&t.name)).collect()).collect(),
            runs_on: kinds.into_iter().map(|k| (k, c_string(k))).collect(),
        }
    }

    fn view(&self, subgraph: usize, v: &ferrite::TensorView<'_>) -> FerriteTensorView {
        let (quant_count, scales, zero_points, quant_axis) = match v.quant {
            Some(q) => (q.scale.len().min(q.zero_point.len()), q.scale.as_ptr(), q.zero_point.as_ptr(), q.axis),
            None => (0, std::ptr::null(), std::ptr::null(), 0),
        };
        FerriteTensorView {
            tensor: v.tensor,
            name: self.tensors.get(subgraph).and_then(|t| t.get(v.tensor)).map_or(c"".as_ptr(), |c| c.as_ptr()),
            dtype: dtype_of(v.dtype),
            rank: v.shape.len(),
            dims: v.shape.as_ptr(),
            quant_count,
            scales,
            zero_points,
            quant_axis,
            state: match v.state {
                ferrite::TensorState::Ready => FerriteTensorState::Ready,
                ferrite::TensorState::Pending => FerriteTensorState::Pending,
                ferrite::TensorState::Fused => FerriteTensorState::Fused,
                ferrite::TensorState::Absent => FerriteTensorState::Absent,
            },
            data: v.data.map_or(std::ptr::null(), |d| d.as_ptr().cast()),
            bytes: v.data.map_or(0, <[u8]>::len),
        }
    }

    /// Calls `cb` with `ev` as a [`FerriteOpInfo`].
    ///
    /// # Safety
    /// `cb` is a function of the [`FerriteOpCallback`] contract; `user` is passed through.
    unsafe fn call(&self, cb: unsafe extern "C" fn(*const FerriteOpInfo, *mut c_void) -> i32, user: *mut c_void, ev: &ferrite::OpEvent<'_>) -> ferrite::Flow {
        let inputs: Vec<FerriteTensorView> = ev.inputs.iter().map(|v| self.view(ev.subgraph, v)).collect();
        let outputs: Vec<FerriteTensorView> = ev.outputs.iter().map(|v| self.view(ev.subgraph, v)).collect();
        let kind = ev.runs_on.kind();
        let info = FerriteOpInfo {
            subgraph: ev.subgraph,
            index: ev.index,
            op_type: self.ops.get(ev.subgraph).and_then(|o| o.get(ev.index)).map_or(c"".as_ptr(), |c| c.as_ptr()),
            runs_on: self.runs_on.iter().find(|k| k.0 == kind).map_or(c"".as_ptr(), |k| k.1.as_ptr()),
            fused_into: match ev.runs_on {
                ferrite::OpRun::Fused { into } => isize::try_from(into).unwrap_or(-1),
                _ => -1,
            },
            input_count: inputs.len(),
            inputs: inputs.as_ptr(),
            output_count: outputs.len(),
            outputs: outputs.as_ptr(),
            caller_subgraph: ev.calls.last().map_or(-1, |f| isize::try_from(f.subgraph).unwrap_or(-1)),
            caller_op: ev.calls.last().map_or(-1, |f| isize::try_from(f.op).unwrap_or(-1)),
            iteration: ev.iteration().map_or(-1, |i| isize::try_from(i).unwrap_or(-1)),
        };
        // SAFETY: `info` and the views it points to live until the call returns; the
        // caller guarantees `cb` follows the callback contract.
        match unsafe { cb(&info, user) } {
            0 => ferrite::Flow::Continue,
            1 => ferrite::Flow::Skip,
            _ => ferrite::Flow::Stop,
        }
    }
}

impl FerriteSession {
    /// A run with per-op callbacks on the session's memory; the bound outputs are
    /// filled when it completes.
    ///
    /// # Safety
    /// `before` and `after` follow the [`FerriteOpCallback`] contract.
    unsafe fn run_with_callbacks(&mut self, before: FerriteOpCallback, after: FerriteOpCallback, user: *mut c_void, completed: &mut bool) -> FerriteStatus {
        *completed = false;
        let st = self.copy_inputs();
        if st != FerriteStatus::Ok {
            return st;
        }
        if self.callback_names.is_none() {
            self.callback_names = Some(CallbackNames::new(&self.session));
        }
        let FerriteSession { session, callback_names: Some(names), .. } = self else { return FerriteStatus::Error };
        let call = |cb: FerriteOpCallback, ev: &ferrite::OpEvent<'_>| match cb {
            // SAFETY: `cb` follows the callback contract, as this function's caller guarantees.
            Some(cb) => unsafe { names.call(cb, user, ev) },
            None => ferrite::Flow::Continue,
        };
        let r = session.run_with_callbacks(|ev| call(before, ev), |ev| call(after, ev));
        match r {
            Ok(ferrite::RunOutcome::Completed) => {
                *completed = true;
                self.copy_outputs()
            }
            Ok(ferrite::RunOutcome::Stopped { .. }) => FerriteStatus::Ok,
            Err(e) => self.fail_error(&e),
        }
    }
}

/// Runs the model on the bound inputs (all must be bound) with per-op callbacks:
/// `before` and `after` (either may be NULL) are called around every op of the
/// session's subgraph, in execution order, with a [`FerriteOpInfo`] and `user_data`.
/// `before` may return `FERRITE_FLOW_SKIP` (the op does not run) or
/// `FERRITE_FLOW_STOP`, `after` `FERRITE_FLOW_STOP`. Ops fused into a neighbouring
/// kernel are reported too (`runs_on` "fused"), and tensors that never held their
/// own value come as `FERRITE_TENSOR_STATE_FUSED` with NULL data. `*completed` says
/// whether every op ran; the bound outputs are filled only then. The callbacks must
/// not call into this session.
///
/// # Safety
/// `s` is NULL or a live session whose bound buffers are valid; `before` and `after`
/// are NULL or functions that read the info (and the memory it points to) only
/// during the call; `completed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_run_with_callbacks(
    s: *mut FerriteSession,
    before: FerriteOpCallback,
    after: FerriteOpCallback,
    user_data: *mut c_void,
    completed: *mut bool,
) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `completed` checked for null before the write.
    unsafe {
        with_session(s, |s| {
            let mut done = false;
            let st = s.run_with_callbacks(before, after, user_data, &mut done);
            if let Some(c) = completed.as_mut() {
                *c = done;
            }
            st
        })
    }
}

/// Starts (`on`) or stops recording a trace: prepare phases after this call, and one
/// slice per executed op of every run, with worker-thread slices. Stopping keeps what
/// was recorded for `ferrite_session_write_trace`. Before the thread count is set or
/// after, at any time.
///
/// # Safety
/// `s` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_set_tracing(s: *mut FerriteSession, on: bool) -> FerriteStatus {
    // SAFETY: forwarded caller contract.
    unsafe {
        with_session(s, |s| {
            s.tracing = on;
            s.session.set_tracing(on);
            FerriteStatus::Ok
        })
    }
}

/// Writes the trace recorded so far to the file at `path` as Chrome trace-event JSON
/// (loads in Perfetto and chrome://tracing). `FERRITE_STATUS_INVALID_STATE` when
/// tracing was never started.
///
/// # Safety
/// `s` is NULL or a live session; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_write_trace(s: *mut FerriteSession, path: *const c_char) -> FerriteStatus {
    // SAFETY: forwarded caller contract; `path` checked for null.
    unsafe {
        with_session(s, |s| {
            if path.is_null() {
                return FerriteStatus::NullArgument;
            }
            let path = CStr::from_ptr(path).to_string_lossy().into_owned();
            let r = s.session.write_trace(path);
            s.check(r)
        })
    }
}
