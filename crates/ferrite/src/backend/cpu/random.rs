//! Random ops: RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL, MULTINOMIAL, with LiteRT's
//! streams (`ferrite_kernels::random`).
//!
//! Each op's Philox stream belongs to the session ([`BackendContext::op_state`]):
//! it carries on from run to run, also where the op is built again at every run
//! because its output shape comes from values, and starts again from the seeds
//! when the session compiles again (LiteRT reseeds in Prepare). Seeds (0, 0) mean
//! a nondeterministic seed, as in LiteRT. The compiler never folds these ops.

use std::sync::{Arc, Mutex};

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::random::{self as k, Philox};

use super::runtime;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The random family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::RANDOM_UNIFORM => fill(op, ctx, false),
        B::RANDOM_STANDARD_NORMAL => fill(op, ctx, true),
        B::MULTINOMIAL => multinomial(op, ctx),
        B::STABLEHLO_RNG_BIT_GENERATOR => bit_generator(op).map(|(g, built)| g.kernel(built, k::rng_bit_generator)),
        _ => return None,
    })
}

/// The op's stream in this session, seeded from its options the first time.
pub(crate) fn stream(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Arc<Mutex<Philox>>> {
    let OpParams::Random { seed, seed2 } = op.op.params else { return Err(op.bad("missing RandomOptions")) };
    // LiteRT keeps the seeds in `TfLiteRandomParams` as C `int`s: the schema's 64-bit
    // values arrive truncated to their low 32 bits, sign-extended (measured: a seed
    // of 2^32 + 5 gives the stream of seed 5, and 2^32 is "unset").
    let (seed, seed2) = (i64::from(seed as i32), i64::from(seed2 as i32));
    Ok(ctx.op_state(op.subgraph, op.op_index, || Mutex::new(seeded(seed, seed2))))
}

/// The stream for seeds `(seed, seed2)`; both zero: seeds from the process's
/// randomness (std's hasher keys), different for every stream.
pub(crate) fn seeded(seed: i64, seed2: i64) -> Philox {
    if seed != 0 || seed2 != 0 {
        return Philox::from_seeds(seed, seed2);
    }
    use std::hash::BuildHasher;
    let fresh = || std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now()) as i64;
    Philox::from_seeds(fresh(), fresh())
}

/// The output shape of RANDOM_UNIFORM / RANDOM_STANDARD_NORMAL: the values of the
/// int32 vector input 0 (known at prepare when constant; else the op is built at
/// run time, when they exist).
pub(crate) fn shape_from_input(op: &OpContext<'_>) -> Result<Vec<usize>> {
    let s = op.input(0)?;
    if s.dtype != DType::I32 || s.shape.len() != 1 {
        return Err(op.bad(format!("the shape must be an int32 vector, got {} of shape {:?}", s.dtype.name(), s.shape)));
    }
    op.const_ints(0)?.iter().map(|&d| usize::try_from(d).map_err(|_| op.bad(format!("negative output dimension {d}")))).collect()
}

/// RANDOM_UNIFORM (floats in [0, 1)) and RANDOM_STANDARD_NORMAL, float32 only as in LiteRT.
fn fill(op: &OpContext<'_>, ctx: &mut BackendContext, normal: bool) -> Result<Built> {
    // The stream exists from prepare on, even when the shape is only known at run time.
    let rng = stream(op, ctx)?;
    let out_type = op.outputs.first().map_or(DType::F32, |t| t.dtype);
    if out_type != DType::F32 {
        return Err(op.unsupported(format!("{} output (LiteRT's kernel makes float32 only)", out_type.name())));
    }
    let shape = shape_from_input(op)?;
    let n = op.checked_elements(&shape, 4)?;
    Ok(Built {
        outputs: vec![(DType::F32, shape)],
        kernel: Box::new(move |_, outs| {
            let o = typed_mut::<f32>(outs[0])?;
            if o.len() != n {
                return Err(runtime(format!("random output holds {} values, the op makes {n}", o.len())));
            }
            let mut rng = rng.lock().map_err(|_| runtime("random stream poisoned by a failed run"))?;
            if normal {
                k::standard_normal(&mut rng, o);
            } else {
                k::uniform(&mut rng, o);
            }
            Ok(())
        }),
    })
}

/// MULTINOMIAL: (logits [batch, classes] float32, num_samples int32 scalar) ->
/// [batch, num_samples] class indices, int64 or int32 as the model declares.
fn multinomial(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let rng = stream(op, ctx)?;
    let (l, s) = (op.input(0)?, op.input(1)?);
    if l.dtype != DType::F32 {
        return Err(op.unsupported(format!("{} logits (LiteRT's kernel takes float32)", l.dtype.name())));
    }
    let [batch, classes] = l.shape[..] else { return Err(op.bad(format!("logits must be [batch, classes], got shape {:?}", l.shape))) };
    if classes == 0 {
        return Err(op.bad("logits without classes"));
    }
    if s.dtype != DType::I32 || !s.shape.is_empty() {
        return Err(op.bad(format!("num_samples must be an int32 scalar, got {} of shape {:?}", s.dtype.name(), s.shape)));
    }
    let samples = match op.const_ints(1)?[..] {
        [v] => usize::try_from(v).map_err(|_| op.bad(format!("negative num_samples {v}")))?,
        _ => return Err(op.bad("num_samples holds no value")),
    };
    let out_type = op.outputs.first().map_or(DType::I64, |t| t.dtype);
    if !matches!(out_type, DType::I64 | DType::I32) {
        return Err(op.unsupported(format!("{} output (LiteRT's kernel makes int64 or int32)", out_type.name())));
    }
    let n = op.checked_elements(&[batch, samples], 8)?;
    let mut wide = vec![0i64; if out_type == DType::I32 { n } else { 0 }];
    Ok(Built {
        outputs: vec![(out_type, vec![batch, samples])],
        kernel: Box::new(move |ins, outs| {
            let logits = typed::<f32>(arg(ins, 0)?)?;
            if logits.len() != batch * classes {
                return Err(runtime(format!("MULTINOMIAL logits hold {} values, expected {}", logits.len(), batch * classes)));
            }
            let mut rng = rng.lock().map_err(|_| runtime("random stream poisoned by a failed run"))?;
            if out_type == DType::I64 {
                let o = typed_mut::<i64>(outs[0])?;
                if o.len() != n {
                    return Err(runtime("MULTINOMIAL output of the wrong size"));
                }
                k::multinomial(&mut rng, logits, batch, classes, samples, o);
            } else {
                let o = typed_mut::<i32>(outs[0])?;
                if o.len() != n {
                    return Err(runtime("MULTINOMIAL output of the wrong size"));
                }
                k::multinomial(&mut rng, logits, batch, classes, samples, &mut wide);
                // Class indices are below `classes + 1`, a tensor dimension: they fit.
                o.iter_mut().zip(&wide).for_each(|(o, &w)| *o = w as i32);
            }
            Ok(())
        }),
    })
}

/// STABLEHLO_RNG_BIT_GENERATOR's prepared geometry, shared with the reference
/// backend (which computes the words its own way).
pub(crate) struct BitGenerator {
    /// The algorithm, DEFAULT already read as PHILOX.
    pub algorithm: k::RngAlgorithm,
    /// u64 values of the state.
    pub state_len: usize,
    /// 32-bit words of the output.
    pub words: usize,
}

/// Checks STABLEHLO_RNG_BIT_GENERATOR: (initial state uint64[2] or [3]) -> (next
/// state, same type and shape; random bits, int32/int64/uint32/uint64 of the
/// output's declared shape, the op's only size source). Its outputs as built.
pub(crate) fn bit_generator(op: &OpContext<'_>) -> Result<(BitGenerator, Vec<crate::backend::OutSpec>)> {
    let OpParams::Hlo(crate::ops_hlo::HloParams::RngBitGenerator { algorithm }) = op.op.params else {
        return Err(op.bad("missing StablehloRngBitGeneratorOptions"));
    };
    let algorithm = match algorithm {
        0 | 1 => k::RngAlgorithm::Philox,
        2 => k::RngAlgorithm::Threefry,
        a => return Err(op.unsupported(format!("RngAlgorithm {a} (LiteRT knows DEFAULT, PHILOX and THREEFRY)"))),
    };
    let s = op.input(0)?;
    if s.dtype != DType::U64 || s.shape.len() != 1 {
        return Err(op.bad(format!("the state must be a uint64 vector, got {} of shape {:?}", s.dtype.name(), s.shape)));
    }
    let state_len = s.shape[0];
    let fits = match algorithm {
        k::RngAlgorithm::Threefry => state_len == 2,
        k::RngAlgorithm::Philox => matches!(state_len, 2 | 3),
    };
    if !fits {
        // LiteRT refuses these at its first invocation (measured).
        return Err(op.unsupported(format!(
            "{algorithm:?} takes a uint64[2]{} state, got uint64[{state_len}]",
            if algorithm == k::RngAlgorithm::Philox { " or [3]" } else { "" }
        )));
    }
    let [st, o] = op.outputs[..] else { return Err(op.bad(format!("{} outputs, the op has 2 (state, bits)", op.outputs.len()))) };
    if st.dtype != DType::U64 {
        return Err(op.bad(format!("the output state must be uint64, got {}", st.dtype.name())));
    }
    let width = match o.dtype {
        DType::I32 | DType::U32 => 4,
        DType::I64 | DType::U64 => 8,
        t => return Err(op.unsupported(format!("{} random bits (LiteRT makes int32, int64, uint32 and uint64)", t.name()))),
    };
    // The output's declared shape is all there is to size it by: a dimension left
    // unknown in its signature has no value to take.
    if o.shape_signature.iter().any(|&d| d < 0) {
        return Err(op.bad(format!("the random bits' shape {:?} has unknown dimensions", o.shape_signature)));
    }
    let n = op.checked_elements(&o.shape, width)?;
    let g = BitGenerator { algorithm, state_len, words: n * width / 4 };
    Ok((g, vec![(DType::U64, vec![state_len]), (o.dtype, o.shape.clone())]))
}

impl BitGenerator {
    /// The op's kernel, computing the words with `fill` (the state, the next
    /// state's slot, the words; `Err` on a state of the wrong length).
    pub(crate) fn kernel(self, outputs: Vec<crate::backend::OutSpec>, fill: GeneratorFill) -> Built {
        let BitGenerator { algorithm, state_len, words } = self;
        Built {
            outputs,
            kernel: Box::new(move |ins, outs| {
                let state = typed::<u64>(arg(ins, 0)?)?;
                let [next, bits] = outs else { return Err(runtime("the bit generator writes two outputs")) };
                let next = typed_mut::<u64>(next)?;
                let bits = typed_mut::<u32>(bits)?;
                if state.len() != state_len || next.len() != state_len || bits.len() != words {
                    return Err(runtime(format!(
                        "bit generator buffers of {}/{}/{} values, built for {state_len}/{state_len}/{words}",
                        state.len(),
                        next.len(),
                        bits.len()
                    )));
                }
                fill(algorithm, state, next, bits).map_err(runtime)
            }),
        }
    }
}

/// How a backend computes the bit generator's words.
pub(crate) type GeneratorFill = fn(k::RngAlgorithm, &[u64], &mut [u64], &mut [u32]) -> std::result::Result<(), String>;
