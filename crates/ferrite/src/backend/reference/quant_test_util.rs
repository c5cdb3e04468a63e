//! Test helpers for the quantized reference kernels: tensors with quantization,
//! one-op contexts, running an op on a backend, and a tiny deterministic PRNG.

use ferrite_format::ops::BuiltinOp;

use crate::backend::cpu::CpuBackend;
use crate::backend::reference::ReferenceBackend;
use crate::backend::{Backend, BackendContext, InputDesc, OpContext, OutSpec};
use crate::error::Result;
use crate::model::{DType, Op, OpCode, Quantization, TensorInfo};
use crate::ops::OpParams;

/// A test tensor: type, shape, quantization and little-endian data.
#[derive(Debug, Clone)]
pub(crate) struct T {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub quant: Option<Quantization>,
    pub data: Vec<u8>,
    /// Passed to the builder as a model constant (weights, biases).
    pub constant: bool,
}

/// Per-tensor quantization.
pub(crate) fn q(scale: f32, zp: i64) -> Option<Quantization> {
    Some(Quantization { scale: vec![scale], zero_point: vec![zp], axis: 0 })
}

/// Per-channel quantization along `axis` (zero points 0).
pub(crate) fn qc(scales: Vec<f32>, axis: usize) -> Option<Quantization> {
    let n = scales.len();
    Some(Quantization { scale: scales, zero_point: vec![0; n], axis })
}

impl T {
    /// int8 / uint8 / int16 tensor from `i32` values.
    pub fn ints(dtype: DType, shape: &[usize], quant: Option<Quantization>, v: &[i32]) -> T {
        let data = match dtype {
            DType::I16 => v.iter().flat_map(|&x| (x as i16).to_le_bytes()).collect(),
            DType::I32 => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
            _ => v.iter().map(|&x| x as u8).collect(),
        };
        T { dtype, shape: shape.to_vec(), quant, data, constant: false }
    }
    /// int64 tensor.
    pub fn i64s(shape: &[usize], v: &[i64]) -> T {
        T { dtype: DType::I64, shape: shape.to_vec(), quant: None, data: v.iter().flat_map(|x| x.to_le_bytes()).collect(), constant: true }
    }
    /// float32 tensor.
    pub fn f32s(shape: &[usize], v: &[f32]) -> T {
        T { dtype: DType::F32, shape: shape.to_vec(), quant: None, data: v.iter().flat_map(|x| x.to_le_bytes()).collect(), constant: false }
    }
    /// Marks the tensor a model constant.
    pub fn constant(mut self) -> T {
        self.constant = true;
        self
    }
}

/// Declared output tensor.
pub(crate) fn out(dtype: DType, quant: Option<Quantization>) -> TensorInfo {
    TensorInfo { name: "out".into(), dtype, shape: vec![], shape_signature: vec![], quant, data: None, sparsity: None, is_variable: false }
}

/// Builds the op on `backend` and runs it once: (output spec, output bytes).
pub(crate) fn run_on(backend: &dyn Backend, code: BuiltinOp, params: &OpParams, inputs: &[Option<&T>], output: &TensorInfo) -> Result<(OutSpec, Vec<u8>)> {
    run_padded(backend, code, params, inputs, output, None)
}

/// [`run_on`] with a PAD folded into the op (`OpContext::input_pad`).
pub(crate) fn run_padded(
    backend: &dyn Backend,
    code: BuiltinOp,
    params: &OpParams,
    inputs: &[Option<&T>],
    output: &TensorInfo,
    input_pad: Option<[usize; 4]>,
) -> Result<(OutSpec, Vec<u8>)> {
    let op = test_op(code, params, inputs);
    let ctx = context(&op, inputs, output, input_pad);
    let mut bctx = BackendContext::new(1);
    let mut built = backend.build(&ctx, &mut bctx)?;
    let (dtype, shape) = built.outputs[0].clone();
    let n: usize = shape.iter().product::<usize>() * dtype.size().unwrap_or(1);
    let mut o = vec![0u8; n];
    let ins: Vec<Option<&[u8]>> = inputs.iter().map(|t| t.map(|t| &t.data[..])).collect();
    (built.kernel)(&ins, &mut [&mut o[..]])?;
    Ok(((dtype, shape), o))
}

/// The op under test: inputs are tensors 0.. (absent ones omitted), the output the
/// tensor after them.
fn test_op(code: BuiltinOp, params: &OpParams, inputs: &[Option<&T>]) -> Op {
    Op {
        code: OpCode::Builtin(code),
        version: 1,
        inputs: inputs.iter().enumerate().map(|(i, t)| t.map(|_| i)).collect(),
        outputs: vec![inputs.len()],
        params: params.clone(),
        custom_options: None,
    }
}

/// What a backend sees of `op` with these test tensors.
fn context<'a>(op: &'a Op, inputs: &[Option<&'a T>], output: &'a TensorInfo, input_pad: Option<[usize; 4]>) -> OpContext<'a> {
    OpContext { subgraph: 0, op_index: 0, op, inputs: descs(inputs), outputs: vec![output], custom_options: &[], epilogue: None, input_pad, max_bytes: 1 << 30 }
}

/// Input descriptions of test tensors (tensor index = position).
fn descs<'a>(inputs: &[Option<&'a T>]) -> Vec<Option<InputDesc<'a>>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.map(|t| InputDesc {
                tensor: i,
                dtype: t.dtype,
                shape: t.shape.clone(),
                value: t.constant.then_some(&t.data[..]),
                constant: t.constant,
                quant: t.quant.as_ref(),
                sparsity: None,
            })
        })
        .collect()
}

/// Builds the op on the reference backend without running it: the planned
/// output's byte size, or None when the build fails.
pub(crate) fn build_only(code: BuiltinOp, params: &OpParams, inputs: &[Option<&T>], output: &TensorInfo) -> Option<usize> {
    let op = test_op(code, params, inputs);
    let ctx = context(&op, inputs, output, None);
    let built = ReferenceBackend.build(&ctx, &mut BackendContext::new(1)).ok()?;
    let (dtype, shape) = &built.outputs[0];
    shape.iter().try_fold(dtype.size().unwrap_or(1), |a, &d| a.checked_mul(d))
}

/// Runs the op on the reference backend.
pub(crate) fn run_ref(code: BuiltinOp, params: &OpParams, inputs: &[Option<&T>], output: &TensorInfo) -> Result<(OutSpec, Vec<u8>)> {
    run_on(&ReferenceBackend, code, params, inputs, output)
}

/// Runs the op on both backends and returns the number of output elements that
/// differ (element size `elem` bytes); panics when the types or shapes differ or
/// either backend fails.
pub(crate) fn mismatches(code: BuiltinOp, params: &OpParams, inputs: &[Option<&T>], output: &TensorInfo) -> usize {
    mismatches_padded(code, params, inputs, output, None)
}

/// [`mismatches`] with a PAD folded into the op.
pub(crate) fn mismatches_padded(code: BuiltinOp, params: &OpParams, inputs: &[Option<&T>], output: &TensorInfo, input_pad: Option<[usize; 4]>) -> usize {
    let r = run_padded(&ReferenceBackend, code, params, inputs, output, input_pad);
    let c = run_padded(&CpuBackend, code, params, inputs, output, input_pad);
    let (((rt, rs), rb), ((ct, cs), cb)) = match (r, c) {
        (Ok(r), Ok(c)) => (r, c),
        (r, c) => panic!("reference {:?} / cpu {:?}", r.err(), c.err()),
    };
    assert_eq!((rt, &rs), (ct, &cs), "output type and shape");
    let elem = rt.size().unwrap_or(1);
    rb.chunks(elem).zip(cb.chunks(elem)).filter(|(a, b)| a != b).count()
}

/// xorshift64*: a tiny deterministic generator for random test cases.
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// True one time in `n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
    /// Uniform in `lo..=hi`.
    pub fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i32
    }
    /// Uniform in `lo..=hi`.
    pub fn usize(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % ((hi - lo + 1) as u64)) as usize
    }
    /// Uniform in `[lo, hi)`.
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
    /// A scale spread over several octaves around `center`.
    pub fn scale(&mut self, center: f32) -> f32 {
        center * 2f32.powf(self.f32(-2.0, 2.0))
    }
    /// `n` values in the type's range.
    pub fn ints(&mut self, dtype: DType, n: usize) -> Vec<i32> {
        let (lo, hi) = match dtype {
            DType::U8 => (0, 255),
            DType::I16 => (-32768, 32767),
            _ => (-128, 127),
        };
        (0..n).map(|_| self.int(lo, hi)).collect()
    }
    /// A zero point in the type's range (0 for int16, as LiteRT requires there).
    pub fn zp(&mut self, dtype: DType) -> i64 {
        match dtype {
            DType::U8 => i64::from(self.int(0, 255)),
            DType::I8 => i64::from(self.int(-128, 127)),
            _ => 0,
        }
    }
}
