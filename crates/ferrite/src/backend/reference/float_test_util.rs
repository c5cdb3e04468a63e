//! Test support: builds single ops without a model file, runs them on a backend,
//! and compares float results.

use crate::backend::{Backend, BackendContext, InputDesc, OpContext};
use crate::error::Result;
use crate::model::{DType, Op, OpCode, Quantization, TensorInfo};
use crate::ops::OpParams;

/// One input of a test op: its data is handed to the kernel, and also shown to
/// the builder when `constant`.
#[derive(Clone)]
pub(crate) struct TestInput {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
    pub constant: bool,
    pub quant: Option<Quantization>,
}

/// A float32 input computed at run time.
pub(crate) fn f32_input(shape: &[usize], v: &[f32]) -> Option<TestInput> {
    Some(TestInput { dtype: DType::F32, shape: shape.to_vec(), data: bytemuck::cast_slice(v).to_vec(), constant: false, quant: None })
}

/// A constant float32 input (weights, bias).
pub(crate) fn f32_const(shape: &[usize], v: &[f32]) -> Option<TestInput> {
    f32_input(shape, v).map(|t| TestInput { constant: true, ..t })
}

/// A constant int32 input (axes, shapes, paddings).
pub(crate) fn i32_const(shape: &[usize], v: &[i32]) -> Option<TestInput> {
    Some(TestInput { dtype: DType::I32, shape: shape.to_vec(), data: bytemuck::cast_slice(v).to_vec(), constant: true, quant: None })
}

/// An input of any type from raw little-endian bytes, computed at run time.
pub(crate) fn raw_input(dtype: DType, shape: &[usize], data: Vec<u8>) -> Option<TestInput> {
    Some(TestInput { dtype, shape: shape.to_vec(), data, constant: false, quant: None })
}

/// One computed output: dtype, shape, bytes.
pub(crate) type Output = (DType, Vec<usize>, Vec<u8>);

/// A single op with its tensors.
pub(crate) struct TestOp {
    pub op: Op,
    pub inputs: Vec<Option<TestInput>>,
    pub outputs: Vec<TensorInfo>,
    /// A zero PAD folded into a VALID convolution (top, bottom, left, right).
    pub input_pad: Option<[usize; 4]>,
}

/// A declared output tensor of `dtype` (shape left to the backend).
pub(crate) fn out_info(dtype: DType, quant: Option<Quantization>) -> TensorInfo {
    TensorInfo { name: String::new(), dtype, shape: vec![], shape_signature: vec![], quant, data: None, sparsity: None, is_variable: false }
}

impl TestOp {
    /// Builtin op `code` with these inputs and `n_out` float32 outputs.
    pub fn new(code: ferrite_format::ops::BuiltinOp, params: OpParams, inputs: Vec<Option<TestInput>>, n_out: usize) -> Self {
        Self::typed(code, params, inputs, vec![DType::F32; n_out])
    }

    /// Builtin op `code` with these inputs and outputs declared of these types.
    pub fn typed(code: ferrite_format::ops::BuiltinOp, params: OpParams, inputs: Vec<Option<TestInput>>, out_types: Vec<DType>) -> Self {
        let n_in = inputs.len();
        let op = Op {
            code: OpCode::Builtin(code),
            version: 1,
            inputs: (0..n_in).map(|i| inputs[i].as_ref().map(|_| i)).collect(),
            outputs: (n_in..n_in + out_types.len()).collect(),
            params,
            custom_options: None,
        };
        TestOp { op, inputs, outputs: out_types.into_iter().map(|t| out_info(t, None)).collect(), input_pad: None }
    }

    /// The context a backend sees, optionally with a folded zero padding.
    pub fn context(&self, input_pad: Option<[usize; 4]>) -> OpContext<'_> {
        OpContext {
            subgraph: 0,
            op_index: 0,
            op: &self.op,
            inputs: self
                .inputs
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    t.as_ref().map(|t| InputDesc {
                        tensor: i,
                        dtype: t.dtype,
                        shape: t.shape.clone(),
                        value: t.constant.then_some(&t.data[..]),
                        constant: t.constant,
                        quant: t.quant.as_ref(),
                        sparsity: None,
                    })
                })
                .collect(),
            outputs: self.outputs.iter().collect(),
            custom_options: &[],
            epilogue: None,
            input_pad,
            max_bytes: 1 << 30,
        }
    }

    /// Builds and runs the op on `backend`: (dtype, shape, bytes) per output.
    pub fn run_on(&self, backend: &dyn Backend, input_pad: Option<[usize; 4]>) -> Result<Vec<Output>> {
        let ctx = self.context(input_pad);
        let mut bctx = BackendContext::new(1);
        let mut built = backend.build(&ctx, &mut bctx)?;
        // Hostile-shape tests may plan outputs far larger than a test should allocate.
        if built.outputs.iter().map(|(t, s)| s.iter().product::<usize>() * t.size().unwrap_or(1)).sum::<usize>() > 1 << 22 {
            return Ok(vec![]);
        }
        // f32-aligned buffers, so the kernels' typed views always succeed.
        let mut bufs: Vec<Vec<u64>> =
            built.outputs.iter().map(|(t, s)| vec![0u64; (s.iter().product::<usize>() * t.size().unwrap_or(1)).div_ceil(8)]).collect();
        let in_bufs: Vec<Option<Vec<u64>>> = self
            .inputs
            .iter()
            .map(|t| {
                t.as_ref().map(|t| {
                    let mut b = vec![0u64; t.data.len().div_ceil(8)];
                    bytemuck::cast_slice_mut::<u64, u8>(&mut b)[..t.data.len()].copy_from_slice(&t.data);
                    b
                })
            })
            .collect();
        let ins: Vec<Option<&[u8]>> = in_bufs
            .iter()
            .zip(&self.inputs)
            .map(|(b, t)| b.as_ref().zip(t.as_ref()).map(|(b, t)| &bytemuck::cast_slice::<u64, u8>(b)[..t.data.len()]))
            .collect();
        let sizes: Vec<usize> = built.outputs.iter().map(|(t, s)| s.iter().product::<usize>() * t.size().unwrap_or(1)).collect();
        {
            let mut outs: Vec<&mut [u8]> = bufs.iter_mut().zip(&sizes).map(|(b, &n)| &mut bytemuck::cast_slice_mut::<u64, u8>(b)[..n]).collect();
            (built.kernel)(&ins, &mut outs)?;
        }
        Ok(built.outputs.iter().zip(bufs).zip(sizes).map(|(((t, s), b), n)| (*t, s.clone(), bytemuck::cast_slice::<u64, u8>(&b)[..n].to_vec())).collect())
    }

    /// Runs on the reference backend.
    pub fn reference(&self) -> Result<Vec<Output>> {
        self.run_on(&super::ReferenceBackend, self.input_pad)
    }

    /// Runs on the CPU backend.
    pub fn cpu(&self) -> Result<Vec<Output>> {
        self.run_on(&crate::backend::cpu::CpuBackend, self.input_pad)
    }

    /// Output 0 of the reference backend as float32 values, with its shape.
    pub fn reference_f32(&self) -> (Vec<usize>, Vec<f32>) {
        let r = self.reference().unwrap_or_else(|e| panic!("reference failed: {e}"));
        (r[0].1.clone(), f32s(&r[0].2))
    }

    /// Runs both backends and checks every output: same dtypes and shapes, equal
    /// bytes for non-float outputs, and float32 within `tol` relative (to
    /// max(1, |cpu value|)). Returns the worst relative error seen.
    pub fn compare_with_cpu(&self, tol: f64, what: &str) -> f64 {
        let r = self.reference().unwrap_or_else(|e| panic!("{what}: reference failed: {e}"));
        let c = self.cpu().unwrap_or_else(|e| panic!("{what}: cpu failed: {e}"));
        assert_eq!(r.len(), c.len(), "{what}: output count");
        let mut worst = 0.0f64;
        for (k, (a, b)) in r.iter().zip(&c).enumerate() {
            assert_eq!((a.0, &a.1), (b.0, &b.1), "{what}: output {k} dtype/shape");
            if a.0 == DType::F32 {
                let (x, y) = (f32s(&a.2), f32s(&b.2));
                for (i, (&p, &q)) in x.iter().zip(&y).enumerate() {
                    if p.is_nan() && q.is_nan() || p == q {
                        continue;
                    }
                    let e = (f64::from(p) - f64::from(q)).abs() / f64::from(q.abs()).max(1.0);
                    assert!(e <= tol, "{what}: output {k} element {i}: reference {p} cpu {q} (relative error {e:e} > {tol:e})");
                    worst = worst.max(e);
                }
            } else {
                assert_eq!(a.2, b.2, "{what}: output {k} bytes");
            }
        }
        worst
    }
}

/// Little-endian bytes as float32 values.
pub(crate) fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A tiny deterministic generator (xorshift64*) for random test cases.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    /// Uniform float in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    /// `n` floats in [-1, 1).
    pub fn floats(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
    /// True with probability 1/2.
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}
