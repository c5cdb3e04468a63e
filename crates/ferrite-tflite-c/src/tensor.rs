//! `TfLiteTensor` and its accessors.
//!
//! The C API hands out `TfLiteTensor*` and documents functions to read it, but common.h
//! also declares the struct and some programs read its fields directly. So the struct
//! starts with common.h's public fields, in their order and with their C types, and
//! ferrite's own bookkeeping follows them. A tensor is allocated once per interpreter
//! input or output and keeps its address for the interpreter's lifetime; the
//! interpreter rewrites its shape, size and data pointer when it allocates and runs.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::{self, NonNull};

use ferrite::DType;

use crate::report::Reporter;
use crate::{guard, TfLiteStatus};

/// Element types, numbered as c_api_types.h numbers them.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum TfLiteType {
    NoType = 0,
    Float32 = 1,
    Int32 = 2,
    UInt8 = 3,
    Int64 = 4,
    String = 5,
    Bool = 6,
    Int16 = 7,
    Complex64 = 8,
    Int8 = 9,
    Float16 = 10,
    Float64 = 11,
    Complex128 = 12,
    UInt64 = 13,
    Resource = 14,
    Variant = 15,
    UInt32 = 16,
    UInt16 = 17,
    Int4 = 18,
}

/// The C API's type for a ferrite element type (`NoType` for circle-only types).
pub(crate) fn tflite_type(d: DType) -> TfLiteType {
    match d {
        DType::F32 => TfLiteType::Float32,
        DType::I32 => TfLiteType::Int32,
        DType::U8 => TfLiteType::UInt8,
        DType::I64 => TfLiteType::Int64,
        DType::String => TfLiteType::String,
        DType::Bool => TfLiteType::Bool,
        DType::I16 => TfLiteType::Int16,
        DType::Complex64 => TfLiteType::Complex64,
        DType::I8 => TfLiteType::Int8,
        DType::F16 => TfLiteType::Float16,
        DType::F64 => TfLiteType::Float64,
        DType::Complex128 => TfLiteType::Complex128,
        DType::U64 => TfLiteType::UInt64,
        DType::Resource => TfLiteType::Resource,
        DType::Variant => TfLiteType::Variant,
        DType::U32 => TfLiteType::UInt32,
        DType::U16 => TfLiteType::UInt16,
        DType::Int4 => TfLiteType::Int4,
        DType::Uint4 | DType::Ggml(_) => TfLiteType::NoType,
    }
}

/// Per-tensor affine quantization, `real = scale * (q - zero_point)`; both zero when
/// the tensor is not quantized or is quantized per channel (as LiteRT fills it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TfLiteQuantizationParams {
    /// Scale.
    pub scale: f32,
    /// Zero point.
    pub zero_point: i32,
}

/// common.h's `TfLiteQuantization`: left as "no quantization" here (the per-channel
/// parameter struct it would point to changed layout between LiteRT versions); the
/// per-tensor values are in `params` and `TfLiteTensorQuantizationParams`.
#[repr(C)]
struct TfLiteQuantization {
    kind: c_int,
    params: *mut c_void,
}

/// `kTfLiteArenaRw`: memory planned in the interpreter's arena.
const ARENA_RW: c_int = 2;
/// `kTfLiteDynamic`: memory decided while running (data-dependent shapes).
const DYNAMIC: c_int = 4;
/// `kTfLiteNullBufferHandle`.
const NULL_BUFFER_HANDLE: c_int = -1;

/// A tensor as the C API sees it (see the module documentation for the layout).
#[repr(C)]
pub struct TfLiteTensor {
    type_: TfLiteType,
    data: *mut c_void,
    /// A `TfLiteIntArray*`: points at `own.dims`, the count followed by the dims.
    dims: *const c_int,
    params: TfLiteQuantizationParams,
    allocation_type: c_int,
    bytes: usize,
    allocation: *const c_void,
    name: *const c_char,
    delegate: *mut c_void,
    buffer_handle: c_int,
    data_is_stale: bool,
    is_variable: bool,
    quantization: TfLiteQuantization,
    sparsity: *mut c_void,
    dims_signature: *const c_int,
    own: Own,
}

/// The storage behind the public fields, and what the accessors need.
struct Own {
    dims: Vec<c_int>,
    dims_signature: Vec<c_int>,
    name: CString,
    elem_size: usize,
    reporter: Reporter,
    /// Memory for an input the plan gives none (no op reads it), so that writing it
    /// through the API still works.
    spare: Vec<u64>,
}

/// `[count, dims...]`, each dim clamped to `int` (ferrite bounds shapes far below).
fn int_array(dims: impl ExactSizeIterator<Item = i64>) -> Vec<c_int> {
    let mut v = Vec::with_capacity(dims.len() + 1);
    v.push(c_int::try_from(dims.len()).unwrap_or(c_int::MAX));
    v.extend(dims.map(|d| c_int::try_from(d).unwrap_or(if d < 0 { -1 } else { c_int::MAX })));
    v
}

/// What an interpreter knows about one of its inputs or outputs when it makes the tensor.
pub(crate) struct TensorMeta<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub shape_signature: &'a [i64],
    pub params: TfLiteQuantizationParams,
    pub is_variable: bool,
}

impl TfLiteTensor {
    fn new(m: &TensorMeta<'_>, reporter: Reporter) -> TfLiteTensor {
        let name = CString::new(m.name.replace('\0', " ")).unwrap_or_default();
        let mut t = TfLiteTensor {
            type_: tflite_type(m.dtype),
            data: ptr::null_mut(),
            dims: ptr::null(),
            params: m.params,
            allocation_type: ARENA_RW,
            bytes: 0,
            allocation: ptr::null(),
            name: ptr::null(),
            delegate: ptr::null_mut(),
            buffer_handle: NULL_BUFFER_HANDLE,
            data_is_stale: false,
            is_variable: m.is_variable,
            quantization: TfLiteQuantization { kind: 0, params: ptr::null_mut() },
            sparsity: ptr::null_mut(),
            dims_signature: ptr::null(),
            own: Own {
                dims: Vec::new(),
                dims_signature: int_array(m.shape_signature.iter().copied()),
                name,
                elem_size: m.dtype.size().unwrap_or(0),
                reporter,
                spare: Vec::new(),
            },
        };
        t.name = t.own.name.as_ptr();
        if !m.shape_signature.is_empty() {
            t.dims_signature = t.own.dims_signature.as_ptr();
        }
        t.set_shape(m.shape);
        t
    }

    /// Sets the dims (and the byte size they imply); no allocation when the rank is unchanged.
    pub(crate) fn set_shape(&mut self, shape: &[usize]) {
        if self.own.dims.len() != shape.len() + 1 {
            self.own.dims = int_array(shape.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)));
        } else {
            for (slot, &d) in self.own.dims[1..].iter_mut().zip(shape) {
                *slot = c_int::try_from(d).unwrap_or(c_int::MAX);
            }
        }
        self.dims = self.own.dims.as_ptr();
        self.bytes = shape.iter().product::<usize>().saturating_mul(self.own.elem_size);
    }

    /// The current shape (as `int`s).
    pub(crate) fn shape(&self) -> &[c_int] {
        &self.own.dims[1..]
    }

    /// The shape with -1 for dims that may change (the current shape when the model
    /// declares no signature for it).
    pub(crate) fn shape_signature(&self) -> &[c_int] {
        if self.own.dims_signature.len() > 1 {
            &self.own.dims_signature[1..]
        } else {
            self.shape()
        }
    }

    /// Points the tensor at `len` bytes of live runtime memory.
    pub(crate) fn set_data(&mut self, data: *mut u8, len: usize, dynamic: bool) {
        self.data = data.cast();
        self.bytes = len;
        self.allocation_type = if dynamic { DYNAMIC } else { ARENA_RW };
    }

    /// Gives the tensor memory of its own (zeroed, `bytes` long): for an input the
    /// runtime does not read.
    pub(crate) fn use_spare(&mut self) {
        let words = self.bytes.div_ceil(8);
        if self.own.spare.len() != words {
            self.own.spare = vec![0; words];
        }
        self.data = self.own.spare.as_mut_ptr().cast();
    }

    /// No memory until the next allocation (after a resize).
    pub(crate) fn clear_data(&mut self) {
        self.data = ptr::null_mut();
    }

    pub(crate) fn name_ptr(&self) -> *const c_char {
        self.name
    }

    pub(crate) fn data_ptr(&self) -> *const u8 {
        self.data.cast_const().cast()
    }
}

/// A tensor owned through a raw pointer: the C side keeps `*mut TfLiteTensor`s, so the
/// interpreter reaches the tensor through the same pointer rather than a `Box` that
/// would claim unique access to it.
pub(crate) struct TensorBox(NonNull<TfLiteTensor>);

impl TensorBox {
    pub(crate) fn new(m: &TensorMeta<'_>, reporter: Reporter) -> TensorBox {
        TensorBox(NonNull::from(Box::leak(Box::new(TfLiteTensor::new(m, reporter)))))
    }

    pub(crate) fn ptr(&self) -> *mut TfLiteTensor {
        self.0.as_ptr()
    }

    pub(crate) fn get(&self) -> &TfLiteTensor {
        // SAFETY: the pointer came from Box::leak in `new` and lives until Drop; the C API
        // is single-threaded per interpreter, so no C call writes it during this borrow.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn get_mut(&mut self) -> &mut TfLiteTensor {
        // SAFETY: as in `get`; `&mut self` makes this the only Rust borrow.
        unsafe { self.0.as_mut() }
    }
}

impl Drop for TensorBox {
    fn drop(&mut self) {
        // SAFETY: allocated by Box in `new`, freed only here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// # Safety
/// `t` is NULL or a tensor of a live interpreter.
unsafe fn tensor<'a>(t: *const TfLiteTensor) -> Option<&'a TfLiteTensor> {
    // SAFETY: per this function's contract.
    unsafe { t.as_ref() }
}

/// The element type (`kTfLiteNoType` for NULL).
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorType(t: *const TfLiteTensor) -> TfLiteType {
    // SAFETY: forwarded caller contract.
    unsafe { tensor(t) }.map_or(TfLiteType::NoType, |t| t.type_)
}

/// The number of dimensions (-1 for NULL).
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorNumDims(t: *const TfLiteTensor) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { tensor(t) }.map_or(-1, |t| t.shape().len() as i32)
}

/// Dimension `dim_index` (-1 for NULL or an index out of range).
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorDim(t: *const TfLiteTensor, dim_index: i32) -> i32 {
    // SAFETY: forwarded caller contract.
    let Some(t) = (unsafe { tensor(t) }) else { return -1 };
    usize::try_from(dim_index).ok().and_then(|i| t.shape().get(i)).copied().unwrap_or(-1)
}

/// The size of the tensor's data in bytes (0 for NULL).
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorByteSize(t: *const TfLiteTensor) -> usize {
    // SAFETY: forwarded caller contract.
    unsafe { tensor(t) }.map_or(0, |t| t.bytes)
}

/// The live data: for an input, the memory the next invoke reads; for an output, where
/// the last invoke wrote. NULL before `TfLiteInterpreterAllocateTensors`, after a resize
/// until the next allocation, and for NULL.
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorData(t: *const TfLiteTensor) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { tensor(t) }.map_or(ptr::null_mut(), |t| t.data)
}

/// The tensor's name in the model (NULL for NULL).
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorName(t: *const TfLiteTensor) -> *const c_char {
    // SAFETY: forwarded caller contract.
    unsafe { tensor(t) }.map_or(ptr::null(), |t| t.name)
}

/// Per-tensor quantization (zeros when not quantized per tensor, and for NULL).
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorQuantizationParams(t: *const TfLiteTensor) -> TfLiteQuantizationParams {
    // SAFETY: forwarded caller contract.
    unsafe { tensor(t) }.map_or_else(TfLiteQuantizationParams::default, |t| t.params)
}

/// Checks a copy between the tensor and a caller buffer of `size` bytes. The message
/// is only built on failure: copies are per-invoke calls.
fn check_copy(t: &TfLiteTensor, buffer: *const c_void, size: usize, what: &str) -> Result<(), String> {
    if size == t.bytes && (size == 0 || (!t.data.is_null() && !buffer.is_null())) {
        return Ok(());
    }
    let name = t.own.name.to_string_lossy();
    Err(if size != t.bytes {
        format!("{what}: tensor '{name}' holds {} bytes, the buffer has {size}", t.bytes)
    } else if t.data.is_null() {
        format!("{what}: tensor '{name}' has no memory yet: call TfLiteInterpreterAllocateTensors first (and after every resize)")
    } else {
        format!("{what}: the buffer is NULL")
    })
}

/// Copies `input_data_size` bytes into the tensor; the size must equal its byte size.
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter; `input_data` is NULL or points to
/// `input_data_size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorCopyFromBuffer(t: *mut TfLiteTensor, input_data: *const c_void, input_data_size: usize) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    let Some(t) = (unsafe { tensor(t) }) else { return TfLiteStatus::Error };
    guard(t.own.reporter, TfLiteStatus::Error, || match check_copy(t, input_data, input_data_size, "TfLiteTensorCopyFromBuffer") {
        Err(msg) => {
            t.own.reporter.report(&msg);
            TfLiteStatus::Error
        }
        Ok(()) => {
            if input_data_size > 0 {
                // SAFETY: `t.data` is the tensor's live memory of `t.bytes` bytes (set by the
                // interpreter at allocation), the caller's buffer has as many (checked above);
                // `copy` allows the two to overlap.
                unsafe { ptr::copy(input_data.cast::<u8>(), t.data.cast::<u8>(), input_data_size) };
            }
            TfLiteStatus::Ok
        }
    })
}

/// Copies the tensor's bytes into `output_data`; the size must equal its byte size.
///
/// # Safety
/// `t` is NULL or a tensor of a live interpreter; `output_data` is NULL or points to
/// `output_data_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn TfLiteTensorCopyToBuffer(t: *const TfLiteTensor, output_data: *mut c_void, output_data_size: usize) -> TfLiteStatus {
    // SAFETY: forwarded caller contract.
    let Some(t) = (unsafe { tensor(t) }) else { return TfLiteStatus::Error };
    guard(t.own.reporter, TfLiteStatus::Error, || match check_copy(t, output_data, output_data_size, "TfLiteTensorCopyToBuffer") {
        Err(msg) => {
            t.own.reporter.report(&msg);
            TfLiteStatus::Error
        }
        Ok(()) => {
            if output_data_size > 0 {
                // SAFETY: as in TfLiteTensorCopyFromBuffer, in the other direction.
                unsafe { ptr::copy(t.data.cast::<u8>().cast_const(), output_data.cast::<u8>(), output_data_size) };
            }
            TfLiteStatus::Ok
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The public prefix sits where a C compiler puts common.h's fields on LP64 targets.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn public_fields_have_common_h_offsets() {
        assert_eq!(offset_of!(TfLiteTensor, type_), 0);
        assert_eq!(offset_of!(TfLiteTensor, data), 8);
        assert_eq!(offset_of!(TfLiteTensor, dims), 16);
        assert_eq!(offset_of!(TfLiteTensor, params), 24);
        assert_eq!(offset_of!(TfLiteTensor, allocation_type), 32);
        assert_eq!(offset_of!(TfLiteTensor, bytes), 40);
        assert_eq!(offset_of!(TfLiteTensor, allocation), 48);
        assert_eq!(offset_of!(TfLiteTensor, name), 56);
        assert_eq!(offset_of!(TfLiteTensor, delegate), 64);
        assert_eq!(offset_of!(TfLiteTensor, buffer_handle), 72);
        assert_eq!(offset_of!(TfLiteTensor, data_is_stale), 76);
        assert_eq!(offset_of!(TfLiteTensor, is_variable), 77);
        assert_eq!(offset_of!(TfLiteTensor, quantization), 80);
        assert_eq!(offset_of!(TfLiteTensor, sparsity), 96);
        assert_eq!(offset_of!(TfLiteTensor, dims_signature), 104);
        assert_eq!(size_of::<TfLiteQuantizationParams>(), 8);
        assert_eq!(size_of::<TfLiteType>(), size_of::<c_int>());
    }

    fn meta<'a>(shape: &'a [usize], sig: &'a [i64]) -> TensorMeta<'a> {
        TensorMeta { name: "x", dtype: DType::F32, shape, shape_signature: sig, params: TfLiteQuantizationParams::default(), is_variable: false }
    }

    #[test]
    fn dims_are_an_int_array_and_follow_resizes() {
        let mut t = TensorBox::new(&meta(&[1, 3, 40], &[1, -1, 40]), Reporter::STDERR);
        // SAFETY: `dims` points at `own.dims`, which holds count + 3 dims.
        let read = |t: &TfLiteTensor| unsafe { std::slice::from_raw_parts(t.dims, 4).to_vec() };
        assert_eq!(read(t.get()), vec![3, 1, 3, 40]);
        assert_eq!(t.get().bytes, 480);
        t.get_mut().set_shape(&[1, 6, 40]);
        assert_eq!(read(t.get()), vec![3, 1, 6, 40]);
        assert_eq!(t.get().bytes, 960);
        assert_eq!(t.get().shape_signature(), &[1, -1, 40]);
        // SAFETY: a live tensor.
        unsafe {
            assert_eq!(TfLiteTensorNumDims(t.ptr()), 3);
            assert_eq!(TfLiteTensorDim(t.ptr(), 1), 6);
            assert_eq!(TfLiteTensorDim(t.ptr(), 3), -1);
            assert_eq!(TfLiteTensorDim(t.ptr(), -1), -1);
            assert_eq!(TfLiteTensorByteSize(t.ptr()), 960);
        }
    }

    #[test]
    fn copies_check_size_and_memory() {
        let mut t = TensorBox::new(&meta(&[2], &[]), Reporter::STDERR);
        let src = [1.5f32, -2.0];
        let mut dst = [0f32; 2];
        // SAFETY: a live tensor and buffers of the sizes passed.
        unsafe {
            assert_eq!(TfLiteTensorCopyFromBuffer(t.ptr(), src.as_ptr().cast(), 8), TfLiteStatus::Error, "no memory yet");
            t.get_mut().use_spare();
            assert_eq!(TfLiteTensorCopyFromBuffer(t.ptr(), src.as_ptr().cast(), 4), TfLiteStatus::Error, "wrong size");
            assert_eq!(TfLiteTensorCopyFromBuffer(t.ptr(), ptr::null(), 8), TfLiteStatus::Error, "NULL buffer");
            assert_eq!(TfLiteTensorCopyFromBuffer(t.ptr(), src.as_ptr().cast(), 8), TfLiteStatus::Ok);
            assert_eq!(TfLiteTensorCopyToBuffer(t.ptr(), dst.as_mut_ptr().cast(), 8), TfLiteStatus::Ok);
            assert_eq!(TfLiteTensorCopyToBuffer(ptr::null(), dst.as_mut_ptr().cast(), 8), TfLiteStatus::Error);
        }
        assert_eq!(dst, src);
    }
}
