//! TensorFlow 1 feature-preprocessing ops: BUCKETIZE, FAKE_QUANT and
//! EMBEDDING_LOOKUP_SPARSE (`ferrite_kernels::feature`).
//!
//! EMBEDDING_LOOKUP_SPARSE's output shape comes from its `dense_shape` values: a
//! constant one fixes it at prepare; a computed one makes the op data-dependent
//! (built at run time, when the values exist). Every dimension is checked and the
//! output sized against the session limit before anything is allocated.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::feature::{self as k, Combiner};

use super::runtime;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// The feature family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::BUCKETIZE => bucketize(op),
        B::FAKE_QUANT => fake_quant(op),
        B::EMBEDDING_LOOKUP_SPARSE => embedding_lookup_sparse(op),
        _ => return None,
    })
}

/// The parameters of a FAKE_QUANT op as LiteRT runs it: (nudged min, nudged max,
/// scale). narrow_range is refused, as LiteRT refuses it at prepare.
pub(crate) fn fake_quant_params(op: &OpContext<'_>) -> Result<(f32, f32, f32)> {
    let OpParams::FakeQuant { min, max, num_bits, narrow_range } = op.op.params else { return Err(op.bad("missing FakeQuantOptions")) };
    if narrow_range {
        return Err(op.unsupported("narrow_range FAKE_QUANT (LiteRT refuses it at run time: it is meant for weights, which the converter folds)"));
    }
    // LiteRT's nudged zero point is a uint16: wider ranges are outside its kernel's contract.
    if !(2..=16).contains(&num_bits) {
        return Err(op.unsupported(format!("num_bits {num_bits} (LiteRT's kernel takes 2 to 16 bits)")));
    }
    Ok(k::nudge(min, max, 0, (1 << num_bits) - 1))
}

/// The sorted boundaries of a BUCKETIZE op.
pub(crate) fn bucketize_boundaries(op: &OpContext<'_>) -> Result<Vec<f32>> {
    let OpParams::Bucketize { boundaries } = &op.op.params else { return Err(op.bad("missing BucketizeOptions")) };
    if !k::boundaries_sorted(boundaries) {
        return Err(op.bad("BUCKETIZE boundaries must be sorted"));
    }
    Ok(boundaries.clone())
}

/// BUCKETIZE: float32, float64, int32 or int64 in, int32 bucket indices out.
fn bucketize(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let boundaries = bucketize_boundaries(op)?;
    let (dtype, n) = (x.dtype, op.checked_elements(&x.shape, 4)?);
    macro_rules! buckets {
        ($T:ty) => {
            Ok(Built {
                outputs: vec![(DType::I32, x.shape.clone())],
                kernel: Box::new(move |ins, outs| {
                    let (x, o) = (typed::<$T>(arg(ins, 0)?)?, typed_mut::<i32>(outs[0])?);
                    if x.len() != n || o.len() != n {
                        return Err(runtime(format!("BUCKETIZE buffers of {} and {} elements, the op needs {n}", x.len(), o.len())));
                    }
                    k::bucketize(x, &boundaries, o);
                    Ok(())
                }),
            })
        };
    }
    match dtype {
        DType::F32 => buckets!(f32),
        DType::F64 => buckets!(f64),
        DType::I32 => buckets!(i32),
        DType::I64 => buckets!(i64),
        t => Err(op.unsupported(format!("BUCKETIZE of {} (LiteRT takes float32, float64, int32 and int64)", t.name()))),
    }
}

/// The element types FAKE_QUANT runs: LiteRT's kernel takes every element as the
/// four bytes of a float32, in and out, whatever the tensor's type. On int32 that
/// is well defined (the int32 bits read as a float32, the result's bits written
/// back as an int32) and ferrite does the same; a narrower or wider element would
/// have LiteRT read or write past the buffers, or leave half the output unwritten.
pub(crate) fn fake_quant_type(op: &OpContext<'_>, dtype: DType) -> Result<()> {
    match dtype {
        DType::F32 | DType::I32 => Ok(()),
        t => Err(op.unsupported(format!(
            "FAKE_QUANT of {} (LiteRT's kernel takes each element as 4 bytes of float32: for this type that reads or writes past the tensors, or leaves part of the output unwritten)",
            t.name()
        ))),
    }
}

/// FAKE_QUANT on float32, and on int32 taken bit for bit as float32 as LiteRT does.
fn fake_quant(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    fake_quant_type(op, x.dtype)?;
    let (lo, hi, scale) = fake_quant_params(op)?;
    let n = op.checked_elements(&x.shape, 4)?;
    Ok(Built {
        outputs: vec![(x.dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let (x, o) = (typed::<f32>(arg(ins, 0)?)?, typed_mut::<f32>(outs[0])?);
            if x.len() != n || o.len() != n {
                return Err(runtime(format!("FAKE_QUANT buffers of {} and {} elements, the op needs {n}", x.len(), o.len())));
            }
            k::fake_quant(x, lo, hi, scale, o);
            Ok(())
        }),
    })
}

/// EMBEDDING_LOOKUP_SPARSE's checked geometry: the combiner, the lookup rank, the
/// output's leading dimensions (the dense shape without its last) and the
/// embedding width, plus the output shape.
pub(crate) struct SparseLookup {
    pub combiner: Combiner,
    pub lookups: usize,
    pub lookup_rank: usize,
    pub out_dims: Vec<usize>,
    pub rows: usize,
    pub emb: usize,
    pub shape: Vec<usize>,
}

/// Checks EMBEDDING_LOOKUP_SPARSE's inputs as LiteRT's Prepare and Eval do:
/// (ids [n] int32, indices [n, rank] int32, dense_shape [rank] int32, weights [n]
/// float32, params [rows, ...] float32), the dense shape's values known.
pub(crate) fn sparse_lookup(op: &OpContext<'_>) -> Result<SparseLookup> {
    let OpParams::EmbeddingLookupSparse { combiner } = op.op.params else { return Err(op.bad("missing EmbeddingLookupSparseOptions")) };
    let combiner = match combiner {
        0 => Combiner::Sum,
        1 => Combiner::Mean,
        2 => Combiner::Sqrtn,
        c => return Err(op.bad(format!("unknown combiner {c}"))),
    };
    let (ids, idx, ds, w, p) = (op.input(0)?, op.input(1)?, op.input(2)?, op.input(3)?, op.input(4)?);
    for (what, d, t, rank) in [("ids", ids, DType::I32, 1), ("indices", idx, DType::I32, 2), ("dense_shape", ds, DType::I32, 1), ("weights", w, DType::F32, 1)]
    {
        if d.dtype != t || d.shape.len() != rank {
            return Err(op.bad(format!("{what} must be a rank-{rank} {} tensor, got {} of shape {:?}", t.name(), d.dtype.name(), d.shape)));
        }
    }
    if p.dtype != DType::F32 || p.shape.len() < 2 {
        return Err(op.bad(format!("params must be float32 of rank 2 or more, got {} of shape {:?}", p.dtype.name(), p.shape)));
    }
    let lookups = ids.shape[0];
    if idx.shape[0] != lookups || w.shape[0] != lookups {
        return Err(op.bad(format!("{lookups} ids with {} index tuples and {} weights", idx.shape[0], w.shape[0])));
    }
    let lookup_rank = idx.shape[1];
    if lookup_rank == 0 || ds.shape[0] != lookup_rank {
        return Err(op.bad(format!("index tuples of {lookup_rank} coordinates for a dense shape of {} dimensions", ds.shape[0])));
    }
    let dense = op.const_ints(2)?;
    let out_dims: Vec<usize> = dense[..lookup_rank - 1]
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| op.bad(format!("negative dense_shape dimension {d}"))))
        .collect::<Result<_>>()?;
    let shape: Vec<usize> = out_dims.iter().chain(&p.shape[1..]).copied().collect();
    op.checked_elements(&shape, 4)?;
    Ok(SparseLookup { combiner, lookups, lookup_rank, out_dims, rows: p.shape[0], emb: p.shape[1..].iter().product(), shape })
}

/// EMBEDDING_LOOKUP_SPARSE: the weighted, combined params rows of a sparse tensor.
fn embedding_lookup_sparse(op: &OpContext<'_>) -> Result<Built> {
    let SparseLookup { combiner, lookups, lookup_rank, out_dims, rows, emb, shape } = sparse_lookup(op)?;
    Ok(Built {
        outputs: vec![(DType::F32, shape)],
        kernel: Box::new(move |ins, outs| {
            let (ids, idx, w, p) = (typed::<i32>(arg(ins, 0)?)?, typed::<i32>(arg(ins, 1)?)?, typed::<f32>(arg(ins, 3)?)?, typed::<f32>(arg(ins, 4)?)?);
            let o = typed_mut::<f32>(outs[0])?;
            if ids.len() != lookups || w.len() != lookups || idx.len() != lookups * lookup_rank || p.len() != rows * emb {
                return Err(runtime("EMBEDDING_LOOKUP_SPARSE inputs of the wrong size"));
            }
            k::embedding_lookup_sparse(ids, idx, lookup_rank, &out_dims, w, p, emb, combiner, o).map_err(|e| runtime(format!("EMBEDDING_LOOKUP_SPARSE: {e}")))
        }),
    })
}
