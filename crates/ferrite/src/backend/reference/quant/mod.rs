//! Reference integer kernels (int8, uint8, int16x8) and hybrid ops, bit-exact
//! with LiteRT's kernels.
//!
//! Every kernel reads its inputs into plain `i32` (or `i64`) vectors, computes each
//! output element from the op's definition with nested loops, and writes the
//! results back. Only the scalar fixed-point primitives of `ferrite-kernels`
//! (`quantize_multiplier`, `multiply_by_quantized_multiplier`, the 16-bit helpers)
//! are shared with the optimized backend: they *are* the arithmetic being
//! matched. One file per op family, each ending in its tests.
//!
//! "LiteRT's kernels" means the numerics its builtin kernels produce whichever
//! kernel variant runs: int8 / uint8 LOGISTIC, TANH and SOFTMAX through the float
//! tables LiteRT's prepare fills (its reference and generic kernels both read
//! them), and multipliers formed in the precision its prepare forms them (double
//! for convolutions' per-channel scales, single for the RELU family's and for
//! per-tensor fully-connected scale products). The tests compare every kernel bit
//! for bit with the CPU backend and count the few cases where the two forms of a
//! multiplier differ.

mod batch_matmul;
mod conv;
mod elementwise;
mod hybrid;
mod pool;
mod qreduce;
mod reduce;
mod tconv_hybrid;

use ferrite_format::ops::BuiltinOp as B;

use crate::backend::{Built, OpContext};
use crate::error::{Error, Result};
use crate::model::{DType, OpCode, Quantization};
use crate::ops::Activation;

/// Builds a quantized or hybrid op, or reports it unsupported.
///
/// The guards mirror the CPU backend's dispatch, so that both backends take the
/// same ops and produce the same output types and shapes.
pub(crate) fn build(op: &OpContext<'_>) -> Result<Built> {
    let OpCode::Builtin(code) = op.op.code else {
        return Err(op.unsupported("no reference kernel for this op"));
    };
    match code {
        B::CONV_2D | B::DEPTHWISE_CONV_2D | B::FULLY_CONNECTED if op.is_hybrid() => hybrid::build(op, code),
        B::FULLY_CONNECTED if op.is_int() => conv::fully_connected(op),
        B::CONV_2D | B::DEPTHWISE_CONV_2D if op.is_int() => conv::conv(op, code == B::DEPTHWISE_CONV_2D),
        B::HARD_SWISH if op.is_int() => elementwise::hard_swish(op),
        B::LOGISTIC | B::TANH if op.is_int() => elementwise::logistic_tanh(op, code == B::TANH),
        B::QUANTIZE => elementwise::quantize(op),
        B::DEQUANTIZE if op.is_int() => elementwise::dequantize(op),
        B::SOFTMAX if op.is_int() => elementwise::softmax(op),
        // Shared with the CPU backend: LiteRT defines these only by its kernels.
        B::LOG_SOFTMAX if op.is_int() => crate::backend::cpu::qnorm::log_softmax(op),
        B::L2_NORMALIZATION if op.is_int() => crate::backend::cpu::qnorm::l2_normalize(op),
        B::RELU | B::RELU6 | B::RELU_N1_TO_1 | B::LEAKY_RELU if op.is_int() => elementwise::relu_like(op, code),
        B::ADD | B::SUB | B::MUL | B::PRELU if op.is_int() && op.opt_input(0).is_some_and(|d| d.quant.is_some()) => elementwise::binary(op, code),
        B::MAXIMUM | B::MINIMUM if op.is_int() => elementwise::maximum_minimum(op, code == B::MAXIMUM),
        B::LESS | B::LESS_EQUAL | B::GREATER | B::GREATER_EQUAL | B::EQUAL | B::NOT_EQUAL
            if op.opt_input(0).is_some_and(|d| matches!(d.dtype, DType::I8 | DType::U8) && d.quant.is_some()) =>
        {
            elementwise::compare(op, code)
        }
        B::AVERAGE_POOL_2D | B::MAX_POOL_2D if op.is_int() => pool::pool(op, code == B::MAX_POOL_2D),
        B::TRANSPOSE_CONV if op.opt_input(2).is_some_and(|d| is_int_type(d.dtype)) => conv::transpose_conv(op),
        B::TRANSPOSE_CONV if op.opt_input(2).is_some_and(|d| d.dtype == DType::F32) && op.opt_input(1).is_some_and(|d| d.dtype == DType::I8) => {
            tconv_hybrid::build(op)
        }
        B::BATCH_MATMUL if op.is_int() || op.is_hybrid() => batch_matmul::batch_matmul(op),
        B::MEAN if op.is_int() => reduce::mean(op),
        B::SUM | B::REDUCE_PROD if op.is_int() => qreduce::build(op, code),
        B::CONCATENATION if op.is_int() => reduce::concatenation(op),
        _ => Err(op.unsupported(FALL_THROUGH)),
    }
}

/// Why an op is left to the float half of the backend.
const FALL_THROUGH: &str = "no quantized reference kernel for this op";

/// int8, uint8 or int16.
fn is_int_type(d: DType) -> bool {
    matches!(d, DType::I8 | DType::U8 | DType::I16)
}

/// Value range of an int8, uint8 or int16 element.
fn int_range(dtype: DType) -> (i32, i32) {
    match dtype {
        DType::U8 => (0, 255),
        DType::I16 => (-32768, 32767),
        _ => (-128, 127),
    }
}

/// Scale and zero point of a per-tensor quantized tensor of type `dtype`,
/// checked: a scale must be finite and positive, and the zero point inside the
/// type's range (hostile files may hold anything).
fn per_tensor(op: &OpContext<'_>, q: Option<&Quantization>, dtype: DType, what: &str) -> Result<(f32, i32)> {
    let q = q.ok_or_else(|| op.bad(format!("{what} has no quantization parameters")))?;
    let (Some(&scale), Some(&zp)) = (q.scale.first(), q.zero_point.first()) else {
        return Err(op.bad(format!("{what} has empty quantization parameters")));
    };
    check_scale(op, scale, what)?;
    let (lo, hi) = int_range(dtype);
    if zp < i64::from(lo) || zp > i64::from(hi) {
        return Err(op.bad(format!("{what} zero point {zp} outside the {} range", dtype.name())));
    }
    Ok((scale, zp as i32))
}

/// A scale must be finite and positive.
fn check_scale(op: &OpContext<'_>, scale: f32, what: &str) -> Result<()> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(op.bad(format!("{what} scale {scale} is not finite and positive")));
    }
    Ok(())
}

/// The fused activation's range in the output's quantized domain, as LiteRT's
/// `CalculateActivationRangeQuantized`: `zp + round(f / scale)` (single precision),
/// intersected with the type's range. TANH and SIGN_BIT clamp nothing there.
fn activation_range(act: Activation, scale: f32, zp: i32, dtype: DType) -> (i32, i32) {
    let (qmin, qmax) = int_range(dtype);
    let q = |f: f32| zp.saturating_add((f / scale).round() as i32);
    match act {
        Activation::Relu => (qmin.max(q(0.0)), qmax),
        Activation::Relu6 => (qmin.max(q(0.0)), qmax.min(q(6.0))),
        Activation::ReluN1To1 => (qmin.max(q(-1.0)), qmax.min(q(1.0))),
        Activation::None | Activation::Tanh | Activation::SignBit => (qmin, qmax),
    }
}

/// Element count of `shape`, bounded like every size a kernel allocates by.
fn elements(op: &OpContext<'_>, shape: &[usize]) -> Result<usize> {
    op.checked_elements(shape, 8)
}

/// A run-time error for buffers that do not match the planned shapes.
fn short(what: &str) -> Error {
    Error::Runtime(format!("reference kernel: {what} buffer does not match its planned shape").into())
}

/// Reads `n` little-endian int8 / uint8 / int16 elements as `i32`.
fn read_ints(dtype: DType, b: &[u8], n: usize, what: &str) -> Result<Vec<i32>> {
    let size = if dtype == DType::I16 { 2 } else { 1 };
    if b.len() != n.checked_mul(size).ok_or_else(|| short(what))? {
        return Err(short(what));
    }
    Ok(match dtype {
        DType::I8 => b.iter().map(|&v| i32::from(v as i8)).collect(),
        DType::I16 => b.chunks_exact(2).map(|c| i32::from(i16::from_le_bytes([c[0], c[1]]))).collect(),
        _ => b.iter().map(|&v| i32::from(v)).collect(),
    })
}

/// Writes values (already inside the type's range) as little-endian elements.
fn write_ints(dtype: DType, v: &[i32], out: &mut [u8]) -> Result<()> {
    let size = if dtype == DType::I16 { 2 } else { 1 };
    if out.len() != v.len() * size {
        return Err(short("output"));
    }
    match dtype {
        DType::I16 => out.chunks_exact_mut(2).zip(v).for_each(|(o, &x)| o.copy_from_slice(&(x as i16).to_le_bytes())),
        _ => out.iter_mut().zip(v).for_each(|(o, &x)| *o = x as u8),
    }
    Ok(())
}

/// Reads `n` little-endian `f32` values.
fn read_f32(b: &[u8], n: usize, what: &str) -> Result<Vec<f32>> {
    if b.len() != n.checked_mul(4).ok_or_else(|| short(what))? {
        return Err(short(what));
    }
    Ok(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Writes `f32` values.
fn write_f32(v: &[f32], out: &mut [u8]) -> Result<()> {
    if out.len() != v.len() * 4 {
        return Err(short("output"));
    }
    out.chunks_exact_mut(4).zip(v).for_each(|(o, x)| o.copy_from_slice(&x.to_le_bytes()));
    Ok(())
}

/// Reads `n` little-endian `i32` values (biases).
fn read_i32(b: &[u8], n: usize, what: &str) -> Result<Vec<i32>> {
    if b.len() != n.checked_mul(4).ok_or_else(|| short(what))? {
        return Err(short(what));
    }
    Ok(b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Reads `n` little-endian `i64` values (int16x8 biases).
fn read_i64(b: &[u8], n: usize, what: &str) -> Result<Vec<i64>> {
    if b.len() != n.checked_mul(8).ok_or_else(|| short(what))? {
        return Err(short(what));
    }
    Ok(b.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect())
}

/// Output extent and leading padding of one spatial dimension, as LiteRT's
/// `ComputePaddingHeightWidth`: SAME gives `ceil(in / stride)` outputs and half the
/// needed padding (rounded down) before; VALID none.
fn out_and_pad(op: &OpContext<'_>, input: usize, filter: usize, stride: usize, dilation: usize, same: bool) -> Result<(usize, usize)> {
    ferrite_kernels::conv::out_size_and_pad(input, filter, stride, dilation, same)
        .ok_or_else(|| op.bad(format!("window {filter} (stride {stride}, dilation {dilation}) does not fit input extent {input}")))
}

#[cfg(test)]
mod tests {
    use super::super::quant_test_util::{out, run_ref, Rng, T};
    use super::*;
    use crate::ops::{OpParams, Padding};

    /// Every op with a quantized reference kernel.
    const HOSTILE_CODES: [B; 25] = [
        B::CONV_2D,
        B::DEPTHWISE_CONV_2D,
        B::FULLY_CONNECTED,
        B::HARD_SWISH,
        B::LOGISTIC,
        B::TANH,
        B::QUANTIZE,
        B::DEQUANTIZE,
        B::SOFTMAX,
        B::RELU,
        B::RELU6,
        B::RELU_N1_TO_1,
        B::LEAKY_RELU,
        B::ADD,
        B::SUB,
        B::MUL,
        B::PRELU,
        B::AVERAGE_POOL_2D,
        B::MAX_POOL_2D,
        B::TRANSPOSE_CONV,
        B::BATCH_MATMUL,
        B::MEAN,
        B::CONCATENATION,
        B::SUM,
        B::REDUCE_PROD,
    ];

    /// A mostly plausible tensor of type `base` and rank `rank`, each property
    /// corrupted now and then: another type or rank, empty dims, quantization that
    /// is NaN, zero, negative, out of range or of the wrong length, data too short.
    fn hostile_tensor(rng: &mut Rng, base: DType, rank: usize) -> T {
        let dtype = if rng.one_in(10) { [DType::I8, DType::U8, DType::I16, DType::F32, DType::I32, DType::I64][rng.usize(0, 5)] } else { base };
        let rank = if rng.one_in(10) { rng.usize(0, 5) } else { rank };
        let shape: Vec<usize> = (0..rank).map(|_| if rng.one_in(15) { 0 } else { rng.usize(1, 4) }).collect();
        let quant = if rng.one_in(6) {
            let scales = [f32::NAN, 0.0, -1.0, f32::INFINITY, 1e-30, 0.5, 3e30];
            let zps = [-1000i64, 0, 5, 70000, -128, 255];
            (!rng.one_in(4)).then(|| Quantization {
                scale: (0..rng.usize(1, 3)).map(|_| scales[rng.usize(0, scales.len() - 1)]).collect(),
                zero_point: (0..rng.usize(0, 3)).map(|_| zps[rng.usize(0, zps.len() - 1)]).collect(),
                axis: rng.usize(0, 4),
            })
        } else {
            let zp = if matches!(dtype, DType::I8 | DType::U8) && rng.one_in(2) { i64::from(rng.int(0, 100)) } else { 0 };
            Some(Quantization { scale: vec![rng.scale(0.05)], zero_point: vec![zp], axis: 0 })
        };
        let n = shape.iter().product::<usize>() * dtype.size().unwrap_or(1);
        let len = if rng.one_in(10) { rng.usize(0, n + 3) } else { n };
        let data = if dtype == DType::I32 {
            // Integer operands (axes, output shapes) small, sometimes negative.
            (0..len / 4).flat_map(|_| rng.int(-2, 6).to_le_bytes()).collect()
        } else {
            (0..len).map(|_| rng.next() as u8).collect()
        };
        T { dtype, shape, quant, data, constant: !rng.one_in(6) }
    }

    /// Plausible input types and ranks of `code` for activations of type `base`.
    fn hostile_inputs(rng: &mut Rng, code: B, base: DType) -> Vec<(DType, usize)> {
        let weights = if base == DType::U8 { DType::U8 } else { DType::I8 };
        let bias = match base {
            DType::I16 => DType::I64,
            DType::F32 => DType::F32,
            _ => DType::I32,
        };
        match code {
            B::CONV_2D | B::DEPTHWISE_CONV_2D => vec![(base, 4), (weights, 4), (bias, 1)],
            B::FULLY_CONNECTED => vec![(base, rng.usize(1, 3)), (weights, 2), (bias, 1)],
            B::TRANSPOSE_CONV => vec![(DType::I32, 1), (weights, 4), (base, 4), (bias, 1)],
            B::BATCH_MATMUL => vec![(base, rng.usize(2, 4)), (if base == DType::F32 { DType::I8 } else { base }, rng.usize(2, 4))],
            B::MEAN | B::SUM | B::REDUCE_PROD => vec![(base, rng.usize(1, 4)), (DType::I32, 1)],
            B::ADD | B::SUB | B::MUL => vec![(base, rng.usize(0, 4)), (base, rng.usize(0, 4))],
            B::PRELU => vec![(base, rng.usize(1, 4)), (if base == DType::I16 { DType::I8 } else { base }, rng.usize(0, 4))],
            B::CONCATENATION => (0..rng.usize(1, 3)).map(|_| (base, 3)).collect(),
            B::AVERAGE_POOL_2D | B::MAX_POOL_2D => vec![(base, 4)],
            _ => vec![(base, rng.usize(0, 4))],
        }
    }

    fn hostile_params(rng: &mut Rng, code: B) -> OpParams {
        let act = [Activation::None, Activation::Relu, Activation::Relu6, Activation::ReluN1To1, Activation::Tanh][rng.usize(0, 4)];
        let padding = if rng.one_in(2) { Padding::Same } else { Padding::Valid };
        let pair = |rng: &mut Rng, lo: usize| (rng.usize(lo, 3), rng.usize(lo, 3));
        match code {
            B::CONV_2D => OpParams::Conv2D { padding, stride: pair(rng, 0), dilation: pair(rng, 0), activation: act },
            B::DEPTHWISE_CONV_2D => {
                OpParams::DepthwiseConv2D { padding, stride: pair(rng, 0), dilation: pair(rng, 0), depth_multiplier: rng.int(-1, 3), activation: act }
            }
            B::FULLY_CONNECTED => {
                OpParams::FullyConnected { activation: act, keep_num_dims: rng.one_in(2), shuffled_weights: false, asymmetric_quantize_inputs: rng.one_in(2) }
            }
            B::AVERAGE_POOL_2D | B::MAX_POOL_2D => OpParams::Pool2D { padding, stride: pair(rng, 0), filter: pair(rng, 0), activation: act },
            B::ADD | B::SUB | B::MUL => OpParams::Binary { activation: act, pot_scale_int16: rng.one_in(2) },
            B::SOFTMAX => OpParams::Softmax { beta: [1.0, f32::NAN, -2.0, 1e30][rng.usize(0, 3)] },
            B::LEAKY_RELU => OpParams::LeakyRelu { alpha: [0.1, f32::NAN, -3.0, 1e30][rng.usize(0, 3)] },
            B::MEAN | B::SUM | B::REDUCE_PROD => OpParams::Reducer { keep_dims: rng.one_in(2) },
            B::CONCATENATION => OpParams::Concatenation { axis: rng.int(-5, 5), activation: act },
            B::TRANSPOSE_CONV => OpParams::TransposeConv { padding, stride: pair(rng, 0), activation: act },
            B::BATCH_MATMUL => OpParams::BatchMatMul { adj_x: rng.one_in(2), adj_y: rng.one_in(2), asymmetric_quantize_inputs: rng.one_in(2) },
            _ => OpParams::None,
        }
    }

    /// Hostile models must give errors, never panics: random types, shapes,
    /// parameters and buffers through every quantized op, built and (when the
    /// build succeeds and the output is small) run.
    #[test]
    fn hostile_inputs_never_panic() {
        let codes = HOSTILE_CODES;
        let mut rng = Rng::new(1234);
        let (mut built, mut ran) = (0, 0);
        for case in 0..20_000 {
            let code = codes[case % codes.len()];
            let base = [DType::I8, DType::U8, DType::I16, DType::F32][rng.usize(0, 3)];
            let inputs: Vec<T> = hostile_inputs(&mut rng, code, base).into_iter().map(|(d, r)| hostile_tensor(&mut rng, d, r)).collect();
            let present: Vec<Option<&T>> = inputs.iter().map(|t| (!rng.one_in(12)).then_some(t)).collect();
            let out_type = if matches!(code, B::DEQUANTIZE) || (base == DType::F32 && code != B::QUANTIZE) {
                DType::F32
            } else if code == B::QUANTIZE && base == DType::F32 {
                DType::I8
            } else {
                base
            };
            let o = hostile_tensor(&mut rng, out_type, 0);
            let params = hostile_params(&mut rng, code);
            match run_ref_bounded(code, &params, &present, &out(o.dtype, o.quant.clone())) {
                Some(true) => ran += 1,
                Some(false) => built += 1,
                None => {}
            }
        }
        eprintln!("hostile inputs: {ran} ran to completion, {built} built without completing");
        assert!(ran > 2000, "only {built} built, {ran} ran");
    }

    /// The reference backend takes the ops the CPU backend takes: over plausible and
    /// hostile random cases, an op the CPU backend builds is built here too (unless
    /// its parameters are invalid, which this backend checks more strictly), and an
    /// op the CPU backend reports unsupported is not built here.
    #[test]
    fn refusals_follow_the_cpu_backend() {
        use crate::backend::{cpu::CpuBackend, Backend, BackendContext, OpContext};
        use crate::error::Error;
        use crate::model::{Op, OpCode};
        let mut rng = Rng::new(4321);
        let (mut both, mut cpu_only, mut ref_only, mut cpu_panics) = (0, Vec::new(), Vec::new(), 0);
        for case in 0..6000 {
            let code = HOSTILE_CODES[case % HOSTILE_CODES.len()];
            let base = [DType::I8, DType::U8, DType::I16, DType::F32][rng.usize(0, 3)];
            let inputs: Vec<T> = hostile_inputs(&mut rng, code, base).into_iter().map(|(d, r)| loader_valid(hostile_tensor(&mut rng, d, r))).collect();
            let out_type = if matches!(code, B::DEQUANTIZE) || (base == DType::F32 && code != B::QUANTIZE) {
                DType::F32
            } else if code == B::QUANTIZE && base == DType::F32 {
                DType::I8
            } else {
                base
            };
            let o = loader_valid(hostile_tensor(&mut rng, out_type, 0));
            let output = out(o.dtype, o.quant.clone());
            let params = hostile_params(&mut rng, code);
            let op = Op {
                code: OpCode::Builtin(code),
                version: 1,
                inputs: (0..inputs.len()).map(Some).collect(),
                outputs: vec![inputs.len()],
                params,
                custom_options: None,
            };
            let descs: Vec<_> = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Some(crate::backend::InputDesc {
                        tensor: i,
                        dtype: t.dtype,
                        shape: t.shape.clone(),
                        value: t.constant.then_some(&t.data[..]),
                        constant: t.constant,
                        quant: t.quant.as_ref(),
                        sparsity: None,
                    })
                })
                .collect();
            let ctx = OpContext {
                subgraph: 0,
                op_index: 0,
                op: &op,
                inputs: descs,
                outputs: vec![&output],
                custom_options: &[],
                epilogue: None,
                input_pad: None,
                max_bytes: 1 << 30,
            };
            if !crate::backend::reference::is_quantized(&ctx) {
                continue;
            }
            let r = build(&ctx);
            let c = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| CpuBackend.build(&ctx, &mut BackendContext::new(1)).map(|_| ())));
            let Ok(c) = c else {
                cpu_panics += 1;
                continue;
            };
            match (&r, &c) {
                (Ok(_), Ok(_)) => both += 1,
                // Not an integer op (a float input): the float half's business.
                (Err(Error::Unsupported(m)), Ok(_)) if m.message.ends_with(FALL_THROUGH) => {}
                (Err(Error::Unsupported(m)), Ok(_)) => ref_only.push(format!("{code:?}: {m}")),
                (Ok(_), Err(Error::Unsupported(m))) => cpu_only.push(format!("{code:?}: {m}")),
                _ => {}
            }
        }
        eprintln!("refusals: {both} built by both; {cpu_panics} CPU panics; reference refuses what CPU builds: {ref_only:#?}; reference builds what CPU refuses: {cpu_only:#?}");
        assert!(ref_only.is_empty() && cpu_only.is_empty(), "{ref_only:#?}\n{cpu_only:#?}");
    }

    /// The tensor with quantization the model loader would accept: as many zero
    /// points as scales, inside the type's range, a quantized dimension inside the
    /// rank (scales may still be NaN, zero or negative).
    fn loader_valid(mut t: T) -> T {
        let (lo, hi) = int_range(t.dtype);
        let rank = t.shape.len();
        let typed = is_int_type(t.dtype);
        if let Some(q) = t.quant.as_mut() {
            let zp = q.zero_point.first().copied().unwrap_or(0);
            q.zero_point = vec![if typed { zp.clamp(i64::from(lo), i64::from(hi)) } else { zp }; q.scale.len()];
            q.axis = q.axis.min(rank.max(1) - 1);
        }
        t
    }

    /// Builds on the reference backend and runs when the planned output is small:
    /// Some(true) ran to completion, Some(false) built but failed or was skipped,
    /// None failed to build.
    fn run_ref_bounded(code: B, params: &OpParams, inputs: &[Option<&T>], output: &crate::model::TensorInfo) -> Option<bool> {
        let probe = super::super::quant_test_util::build_only(code, params, inputs, output)?;
        if probe > 1 << 20 {
            return Some(false);
        }
        Some(run_ref(code, params, inputs, output).is_ok())
    }

    #[test]
    fn activation_ranges() {
        // RELU6 at scale 0.05, zero point -10: [max(-128, -10), min(127, -10 + 120)].
        assert_eq!(activation_range(Activation::Relu6, 0.05, -10, DType::I8), (-10, 110));
        assert_eq!(activation_range(Activation::Relu, 1.0, 3, DType::U8), (3, 255));
        assert_eq!(activation_range(Activation::ReluN1To1, 1.0 / 256.0, 0, DType::I16), (-256, 256));
        assert_eq!(activation_range(Activation::None, 1.0, 0, DType::I16), (-32768, 32767));
    }

    #[test]
    fn int_buffers_round_trip() {
        let bytes = [0x00u8, 0x80, 0xff, 0x7f];
        assert_eq!(read_ints(DType::I8, &bytes, 4, "x").ok(), Some(vec![0, -128, -1, 127]));
        assert_eq!(read_ints(DType::U8, &bytes, 4, "x").ok(), Some(vec![0, 128, 255, 127]));
        assert_eq!(read_ints(DType::I16, &bytes, 2, "x").ok(), Some(vec![-32768, 32767]));
        assert!(read_ints(DType::I16, &bytes, 3, "x").is_err());
        let mut out = [0u8; 4];
        assert!(write_ints(DType::I16, &[-32768, 32767], &mut out).is_ok());
        assert_eq!(out, bytes);
    }
}
