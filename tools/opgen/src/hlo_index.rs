//! Cases of STABLEHLO_GATHER and STABLEHLO_SCATTER: random dimension numbers
//! (operands of rank 1 to 4 with size-1 and odd dimensions, index vectors of any
//! length and start map order, the index vector dimension anywhere or implicit,
//! collapsed / inserted dimensions, offset / window dimensions interleaved with
//! the batch ones), per element type, int32 or int64 indices; and the lowerings
//! TensorFlow's converter emits for tf.gather (`_TAKE`), gather_nd (`_ND`),
//! tensor_scatter_update (`_UPDATE`) and tensor_scatter_add (`_ADD`).
//!
//! Indices are constants reaching past the operand: gather clamps them (negative
//! ones too). Scatter skips out-of-range targets; its indices are never negative
//! here, as LiteRT's kernel checks only the upper bound (a negative target is
//! undefined behaviour there, skipped by ferrite as the definition says).
//! Every output dimension keeps at least one element: LiteRT's kernels walk their
//! iteration space with a do-while that touches one element even of an empty one.

use crate::{Case, Rng};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, HloOptions, ModelSpec, OpCode, Options, TensorSpec};

/// The cases of this module (`OPS` in main lists them too).
pub(crate) const OPS: &[&str] = &[
    "STABLEHLO_GATHER",
    "STABLEHLO_GATHER_INT8",
    "STABLEHLO_GATHER_UINT8",
    "STABLEHLO_GATHER_INT16",
    "STABLEHLO_GATHER_INT32",
    "STABLEHLO_GATHER_INT64",
    "STABLEHLO_GATHER_TAKE",
    "STABLEHLO_GATHER_TAKE_INT32",
    "STABLEHLO_GATHER_ND",
    "STABLEHLO_GATHER_ND_INT8",
    "STABLEHLO_SCATTER",
    "STABLEHLO_SCATTER_INT8",
    "STABLEHLO_SCATTER_UINT8",
    "STABLEHLO_SCATTER_INT16",
    "STABLEHLO_SCATTER_INT32",
    "STABLEHLO_SCATTER_INT64",
    "STABLEHLO_SCATTER_UPDATE",
    "STABLEHLO_SCATTER_UPDATE_INT32",
    "STABLEHLO_SCATTER_ADD",
    "STABLEHLO_SCATTER_ADD_INT64",
    "STABLEHLO_GATHER_BOOL",
    "STABLEHLO_SCATTER_BOOL",
];

/// Cases LiteRT refuses (and ferrite must too): int16 indices, update
/// computations of a builtin ADD, MUL, MAXIMUM or MINIMUM (LiteRT names the
/// StableHLO ops only) or SUB, a body of two ops.
pub(crate) const REFUSED: &[&str] = &["STABLEHLO_GATHER_NARROW_INDICES", "STABLEHLO_SCATTER_BUILTIN", "STABLEHLO_SCATTER_SUB", "STABLEHLO_SCATTER_TWO_OPS"];

/// True for this module's cases.
pub(crate) fn handles(name: &str) -> bool {
    OPS.contains(&name) || REFUSED.contains(&name)
}

/// The element type a case name ends in (float32 without a suffix).
fn dtype_of(name: &str) -> TensorType {
    let types = [
        ("_UINT8", TensorType::UINT8),
        ("_INT8", TensorType::INT8),
        ("_INT16", TensorType::INT16),
        ("_INT32", TensorType::INT32),
        ("_INT64", TensorType::INT64),
        ("_BOOL", TensorType::BOOL),
    ];
    types.iter().find(|(s, _)| name.ends_with(s)).map_or(TensorType::FLOAT32, |(_, t)| *t)
}

/// A model input of type `t`; float inputs take values in [-2, 2].
fn input(m: &mut ModelSpec, ranges: &mut Vec<(f32, f32)>, name: &str, t: TensorType, s: &[usize]) -> i32 {
    let x = m.add_tensor(TensorSpec::activation(name, t, &dims(s)));
    m.inputs.push(x);
    if t == TensorType::FLOAT32 {
        ranges.push((-2.0, 2.0));
    }
    x
}

fn dims(s: &[usize]) -> Vec<i32> {
    s.iter().map(|&d| d as i32).collect()
}

fn i64s(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&d| d as i64).collect()
}

/// Constant indices of `shape`, int64 when `wide` (int16 for `narrow`), each
/// value drawn from `lo..=hi`.
fn indices(r: &mut Rng, shape: &[usize], lo: i64, hi: i64, wide: bool, narrow: bool) -> TensorSpec {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n).map(|_| r.int(lo, hi)).collect();
    let (dtype, data) = if narrow {
        (TensorType::INT16, v.iter().flat_map(|&x| (x as i16).to_le_bytes()).collect())
    } else if wide {
        (TensorType::INT64, v.iter().flat_map(|&x| x.to_le_bytes()).collect())
    } else {
        (TensorType::INT32, v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect())
    };
    TensorSpec { data: Some(data), ..TensorSpec::activation("indices", dtype, &dims(shape)) }
}

/// `k` distinct dimensions of `0..rank` in random order.
fn distinct(r: &mut Rng, rank: usize, k: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..rank).collect();
    for i in (1..all.len()).rev() {
        let j = r.u(0, i);
        all.swap(i, j);
    }
    all.truncate(k);
    all
}

/// `k` increasing positions of `0..n`.
fn sorted_subset(r: &mut Rng, n: usize, k: usize) -> Vec<usize> {
    let mut v = distinct(r, n, k);
    v.sort_unstable();
    v
}

/// The indices' shape for index vectors of `k` elements at batch shape `batch`:
/// the index vector dimension inserted at a random place. Returns it and the
/// dimension. Never the definition's implicit trailing dimension (`rank(indices)`):
/// LiteRT's kernels read the size of that missing dimension out of bounds and
/// crash; ferrite's unit tests cover it.
fn index_layout(r: &mut Rng, batch: &[usize], k: usize) -> (Vec<usize>, usize) {
    let at = r.u(0, batch.len());
    let mut s = batch.to_vec();
    s.insert(at, k);
    (s, at)
}

/// The case called `name` (one [`handles`]).
pub(crate) fn gen(name: &str, r: &mut Rng) -> Case {
    if name.starts_with("STABLEHLO_GATHER") {
        gather(name, r)
    } else {
        scatter(name, r)
    }
}

fn gather(name: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {name}"), ..Default::default() };
    let mut ranges = vec![];
    let t = dtype_of(name);
    let rank = r.u(1, 4);
    let operand: Vec<usize> = (0..rank).map(|_| r.u(1, 5)).collect();
    let (map, collapsed, sizes, batch, offsets, ivd, ishape);
    if name.contains("_TAKE") {
        // tf.gather(params, idx, axis): rows along `axis`, indices of batch rank 0 to
        // 2 with a trailing index vector dimension of 1.
        let axis = r.u(0, rank - 1);
        map = vec![axis];
        collapsed = vec![axis];
        sizes = (0..rank).map(|d| if d == axis { 1 } else { operand[d] }).collect::<Vec<_>>();
        batch = (0..r.u(0, 2)).map(|_| r.u(1, 4)).collect::<Vec<_>>();
        ishape = [batch.clone(), vec![1]].concat();
        ivd = batch.len();
        offsets = (0..rank - 1 + batch.len()).filter(|d| *d < axis || *d >= axis + batch.len()).collect::<Vec<_>>();
    } else if name.contains("_ND") {
        // tf.gather_nd(params, idx): idx [K..., m] picks along the first m dimensions.
        let k = r.u(1, rank);
        map = (0..k).collect::<Vec<_>>();
        collapsed = map.clone();
        sizes = (0..rank).map(|d| if d < k { 1 } else { operand[d] }).collect();
        batch = (0..r.u(1, 2)).map(|_| r.u(1, 4)).collect();
        ishape = [batch.clone(), vec![k]].concat();
        ivd = batch.len();
        offsets = (batch.len()..batch.len() + rank - k).collect();
    } else {
        let k = r.u(1, rank);
        map = distinct(r, rank, k);
        collapsed = (0..rank).filter(|_| r.u(0, 2) == 0).collect::<Vec<_>>();
        sizes = (0..rank).map(|d| if collapsed.contains(&d) { 1 } else { r.u(1, operand[d]) }).collect();
        batch = (0..r.u(0, 2)).map(|_| r.u(1, 3)).collect();
        let (s, v) = index_layout(r, &batch, k);
        (ishape, ivd) = (s, v);
        offsets = sorted_subset(r, batch.len() + rank - collapsed.len(), rank - collapsed.len());
    }
    let x = input(&mut m, &mut ranges, "operand", t, &operand);
    let hi = *operand.iter().max().unwrap_or(&1) as i64 + 1;
    let wide = r.coin();
    let idx = m.add_tensor(indices(r, &ishape, -2, hi, wide, name.ends_with("_NARROW_INDICES")));
    let mut slice = (0..rank).filter(|d| !collapsed.contains(d)).map(|d| sizes[d]);
    let mut bdims = batch.iter().copied();
    let out_shape: Vec<usize> = (0..batch.len() + offsets.len()).map(|d| if offsets.contains(&d) { slice.next() } else { bdims.next() }.unwrap_or(1)).collect();
    let o = m.add_tensor(TensorSpec::activation("out", t, &dims(&out_shape)));
    m.outputs.push(o);
    let options = HloOptions::Gather {
        offset_dims: i64s(&offsets),
        collapsed_slice_dims: i64s(&collapsed),
        start_index_map: i64s(&map),
        index_vector_dim: ivd as i64,
        slice_sizes: i64s(&sizes),
        indices_are_sorted: false,
    };
    m.add_op(OpCode::Builtin(B::STABLEHLO_GATHER), &[x, idx], &[o], Options::Hlo(options));
    Case { spec: m, ranges, fixed: vec![] }
}

fn scatter(name: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {name}"), ..Default::default() };
    let mut ranges = vec![];
    let t = dtype_of(name);
    let rank = r.u(1, 4);
    let operand: Vec<usize> = (0..rank).map(|_| r.u(1, 5)).collect();
    let lowered = name.contains("_UPDATE") || name.contains("_ADD");
    let (map, inserted, window, batch, ishape, ivd, wdims);
    if lowered {
        // tensor_scatter_nd_update / _add: indices [K..., m] address the first m
        // dimensions; updates [K..., rest of the operand].
        let k = r.u(1, rank);
        map = (0..k).collect::<Vec<_>>();
        inserted = map.clone();
        window = operand[k..].to_vec();
        batch = (0..r.u(1, 2)).map(|_| r.u(1, 4)).collect::<Vec<_>>();
        ishape = [batch.clone(), vec![k]].concat();
        ivd = batch.len();
        wdims = (batch.len()..batch.len() + window.len()).collect::<Vec<_>>();
    } else {
        let k = r.u(1, rank);
        map = distinct(r, rank, k);
        inserted = (0..rank).filter(|_| r.u(0, 2) == 0).collect();
        window = (0..rank).filter(|d| !inserted.contains(d)).map(|d| r.u(1, operand[d])).collect();
        batch = (0..r.u(0, 2)).map(|_| r.u(1, 3)).collect();
        let (s, v) = index_layout(r, &batch, k);
        (ishape, ivd) = (s, v);
        wdims = sorted_subset(r, batch.len() + window.len(), window.len());
    }
    let mut w = window.iter().copied();
    let mut b = batch.iter().copied();
    let ushape: Vec<usize> = (0..batch.len() + window.len()).map(|d| if wdims.contains(&d) { w.next() } else { b.next() }.unwrap_or(1)).collect();
    let x = input(&mut m, &mut ranges, "operand", t, &operand);
    let hi = *operand.iter().max().unwrap_or(&1) as i64;
    let wide = r.coin();
    let idx = m.add_tensor(indices(r, &ishape, 0, hi, wide, false));
    let u = input(&mut m, &mut ranges, "updates", t, &ushape);
    let o = m.add_tensor(TensorSpec::activation("out", t, &dims(&operand)));
    m.outputs.push(o);
    // The update computation's body subgraph: no op (the update replaces the
    // value), or one op of the two scalars.
    let ops: &[B] = if name.contains("_UPDATE") {
        &[]
    } else if name.contains("_ADD") {
        &[B::STABLEHLO_ADD]
    } else if name.contains("_BUILTIN") {
        let all = [&[B::ADD][..], &[B::MUL], &[B::MAXIMUM], &[B::MINIMUM]];
        all[r.u(0, all.len() - 1)]
    } else if name.ends_with("_SUB") {
        &[B::SUB]
    } else if name.ends_with("_TWO_OPS") {
        &[B::STABLEHLO_ADD, B::STABLEHLO_MAXIMUM]
    } else {
        let all = [&[][..], &[B::STABLEHLO_ADD], &[B::STABLEHLO_MULTIPLY], &[B::STABLEHLO_MAXIMUM], &[B::STABLEHLO_MINIMUM]];
        all[r.u(0, all.len() - 1)]
    };
    let mut body = ModelSpec::default();
    let (lhs, rhs) = (body.add_tensor(TensorSpec::activation("lhs", t, &[])), body.add_tensor(TensorSpec::activation("rhs", t, &[])));
    let mut last = rhs;
    for (k, &code) in ops.iter().enumerate() {
        let res = body.add_tensor(TensorSpec::activation(&format!("res{k}"), t, &[]));
        body.add_op(OpCode::Builtin(code), &[if k == 0 { lhs } else { last }, rhs], &[res], Options::None);
        last = res;
    }
    body.inputs = vec![lhs, rhs];
    body.outputs = vec![last];
    m.subgraphs.push(body);
    let options = HloOptions::Scatter {
        update_window_dims: i64s(&wdims),
        inserted_window_dims: i64s(&inserted),
        scatter_dims_to_operand_dims: i64s(&map),
        index_vector_dim: ivd as i64,
        indices_are_sorted: false,
        unique_indices: false,
        update_computation_subgraph_index: 1,
    };
    m.add_op(OpCode::Builtin(B::STABLEHLO_SCATTER), &[x, idx, u], &[o], Options::Hlo(options));
    Case { spec: m, ranges, fixed: vec![] }
}
