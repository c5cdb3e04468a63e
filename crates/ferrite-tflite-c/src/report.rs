//! Error reporting the way the TFLite C API does it: a caller's
//! `void (*reporter)(void* user_data, const char* format, va_list args)`, or, without
//! one, a line `ERROR: <message>` on stderr (what LiteRT's default reporter prints).

use std::ffi::{c_char, c_void, CString};

/// Stand-in for the `va_list` a reporter receives. Every platform this library builds
/// for passes a `va_list` argument as one pointer-sized value: a pointer to the
/// argument state on x86-64 System V (the array type decays), a pointer to a copy on
/// AArch64 Linux (its 32-byte struct is larger than 16 bytes, so AAPCS64 passes it by
/// reference), and a plain `char*` on Windows and Apple targets. The reporter is only
/// ever given a format without conversions (see [`Reporter::report`]), so it never
/// reads an argument from it; the zeroed, generously sized and aligned storage makes a
/// `va_copy` of it harmless too.
#[repr(C, align(16))]
pub struct VaList {
    _state: [u8; 32],
}

/// A caller's error reporter callback (NULL allowed).
pub type TfLiteErrorReporter = Option<unsafe extern "C" fn(user_data: *mut c_void, format: *const c_char, args: *mut VaList)>;

/// Where an interpreter's errors go.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reporter {
    callback: TfLiteErrorReporter,
    user_data: *mut c_void,
}

impl Reporter {
    /// No callback: messages go to stderr.
    pub(crate) const STDERR: Reporter = Reporter { callback: None, user_data: std::ptr::null_mut() };

    pub(crate) fn new(callback: TfLiteErrorReporter, user_data: *mut c_void) -> Reporter {
        Reporter { callback, user_data }
    }

    /// Sends `msg` to the callback, or prints it to stderr without one.
    pub(crate) fn report(&self, msg: &str) {
        let Some(callback) = self.callback else {
            eprintln!("ERROR: {msg}");
            return;
        };
        // The message is the format itself, its '%' doubled: the callback's printf
        // prints it verbatim and consumes no argument.
        let format = CString::new(msg.replace('\0', " ").replace('%', "%%")).unwrap_or_default();
        let mut args = VaList { _state: [0; 32] };
        // SAFETY: the caller registered `callback` with this signature and keeps
        // `user_data` valid for the interpreter's lifetime (the API's contract); `format`
        // is NUL-terminated and has no conversions, so `args` is never read (see VaList).
        unsafe { callback(self.user_data, format.as_ptr(), &mut args) };
    }
}
