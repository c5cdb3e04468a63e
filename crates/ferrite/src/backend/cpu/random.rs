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
