//! Index and set ops: kernels that address elements through index values read
//! from tensor data (GATHER_ND, SCATTER_ND, EMBEDDING_LOOKUP, DYNAMIC_UPDATE_SLICE)
//! or that order, count or enumerate elements (TOPK_V2, ONE_HOT, RANGE, CUMSUM,
//! WHERE, UNIQUE), reduce by segment ids, or build matrices along their diagonal.
//!
//! Index values come from files and from other ops' outputs, so every one is
//! checked before it addresses memory: a kernel returns the offending value
//! (`Err(index)`) rather than reading or writing outside its slices.

/// Addition as the ops that sum elements define it for their element types:
/// IEEE addition for floats, two's complement (wrapping) for integers, as
/// LiteRT's C++ kernels compute it.
pub trait Accumulate: Copy + Default {
    /// `self + other`.
    fn acc(self, other: Self) -> Self;
}

impl Accumulate for f32 {
    fn acc(self, other: f32) -> f32 {
        self + other
    }
}

macro_rules! wrapping_acc {
    ($($t:ty),*) => {$(
        impl Accumulate for $t {
            fn acc(self, other: $t) -> $t {
                self.wrapping_add(other)
            }
        }
    )*};
}
wrapping_acc!(i8, u8, i16, i32, i64);

/// A total order for ranking values (TOPK_V2, UNIQUE): floats compare as numbers
/// with -0 equal to +0 (so ties between them fall to the lower index, as between
/// any equal values) and NaNs at the ends (`f32::total_cmp`: a negative NaN below
/// everything, a positive one above); integers compare as integers.
///
/// The order is given as an order-preserving `u64` key: the sorts of TOPK_V2 and
/// UNIQUE then run over `(key, index)` pairs, one instantiation of the standard
/// library's sorts for every element type instead of one per type and comparator
/// (each is several kB of code), and compare plain integers instead of reading the
/// values through the indices.
pub trait RankKey: Copy {
    /// The key: `a.rank_key() < b.rank_key()` exactly when `a` ranks below `b`.
    fn rank_key(&self) -> u64;
}

/// Flips the sign bit: signed integers (widened to 64 bits) to unsigned ones in
/// the same order.
fn signed_key(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

impl RankKey for f32 {
    fn rank_key(&self) -> u64 {
        // Adding +0 turns -0 into +0 and leaves every other value unchanged. Then
        // `total_cmp`'s trick: negative values have their magnitude bits flipped,
        // so the bits compare as a signed integer in the float order.
        let b = (*self + 0.0).to_bits() as i32;
        signed_key(i64::from(b ^ ((((b >> 31) as u32) >> 1) as i32)))
    }
}

macro_rules! ord_rank {
    ($($t:ty),*) => {$(
        impl RankKey for $t {
            fn rank_key(&self) -> u64 {
                signed_key(i64::from(*self))
            }
        }
    )*};
}
ord_rank!(i8, u8, i16, i32, i64);

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Flat offset of the slice one index tuple of GATHER_ND / SCATTER_ND names: the
/// tuple addresses the first `tuple.len()` dimensions of `shape`; each coordinate
/// must lie inside its dimension (a bad one is returned).
fn tuple_offset<I: Copy + Into<i64>>(tuple: &[I], shape: &[usize], strides: &[usize]) -> Result<usize, i64> {
    let mut at = 0;
    for (d, &c) in tuple.iter().enumerate() {
        let c: i64 = c.into();
        if c < 0 || c as u64 >= shape[d] as u64 {
            return Err(c);
        }
        at += c as usize * strides[d];
    }
    Ok(at)
}

/// GATHER_ND: `indices` holds `out.len() / slice` tuples of `nd` coordinates
/// into the leading dimensions of `params` (shape `shape`); tuple `i` copies the
/// slice of the remaining dimensions (`slice` elements) it names to slice `i`
/// of `out`. Fails with the first coordinate outside its dimension.
pub fn gather_nd<T: Copy, I: Copy + Into<i64>>(params: &[T], shape: &[usize], indices: &[I], nd: usize, out: &mut [T]) -> Result<(), i64> {
    let slice: usize = shape[nd..].iter().product();
    if slice == 0 {
        return Ok(());
    }
    let st = strides(shape);
    for (i, o) in out.chunks_exact_mut(slice).enumerate() {
        let at = tuple_offset(&indices[i * nd..(i + 1) * nd], shape, &st)?;
        o.copy_from_slice(&params[at..at + slice]);
    }
    Ok(())
}

/// SCATTER_ND: `out` (shape `shape`) is zero except where the tuples of `nd`
/// coordinates in `indices` name slices; update slice `i` is added to the slice
/// tuple `i` names, so duplicate tuples sum. Fails with the first coordinate
/// outside its dimension (`out` is then partly written).
pub fn scatter_nd<T: Accumulate, I: Copy + Into<i64>>(indices: &[I], nd: usize, updates: &[T], shape: &[usize], out: &mut [T]) -> Result<(), i64> {
    out.fill(T::default());
    let slice: usize = shape[nd..].iter().product();
    if slice == 0 {
        return Ok(());
    }
    let st = strides(shape);
    for (i, u) in updates.chunks_exact(slice).enumerate() {
        let at = tuple_offset(&indices[i * nd..(i + 1) * nd], shape, &st)?;
        for (o, &v) in out[at..at + slice].iter_mut().zip(u) {
            *o = o.acc(v);
        }
    }
    Ok(())
}

/// SPARSE_TO_DENSE: `out` (shape `shape`) holds `default` except at the `n`
/// positions the tuples of `nd` coordinates in `indices` name (`nd` is the rank of
/// `shape`), written in order with `values[i]`, or `values[0]` for every position
/// when `values` holds one element; a repeated position keeps the last value.
/// Fails with the first coordinate outside its dimension (`out` is then partly
/// written).
pub fn sparse_to_dense<T: Copy, I: Copy + Into<i64>>(indices: &[I], nd: usize, values: &[T], default: T, shape: &[usize], out: &mut [T]) -> Result<(), i64> {
    out.fill(default);
    let st = strides(shape);
    let n = indices.len().checked_div(nd).unwrap_or(0);
    for i in 0..n {
        let at = tuple_offset(&indices[i * nd..(i + 1) * nd], shape, &st)?;
        out[at] = if values.len() == 1 { values[0] } else { values[i] };
    }
    Ok(())
}

/// DYNAMIC_UPDATE_SLICE's start position: each start is clamped so the update
/// lies inside the operand (`0 ..= operand - update` per dimension), as XLA and
/// LiteRT define it. Requires `update[d] <= operand[d]`.
pub fn clamp_start<I: Copy + Into<i64>>(start: &[I], operand: &[usize], update: &[usize]) -> Vec<usize> {
    start.iter().zip(operand.iter().zip(update)).map(|(&s, (&o, &u))| s.into().clamp(0, (o - u) as i64) as usize).collect()
}

/// DYNAMIC_UPDATE_SLICE: `out` is `operand` (shape `shape`) with the box of shape
/// `update_shape` at `start` (already clamped, [`clamp_start`]) replaced by `update`.
pub fn dynamic_update_slice<T: Copy>(operand: &[T], shape: &[usize], update: &[T], update_shape: &[usize], start: &[usize], out: &mut [T]) {
    out.copy_from_slice(operand);
    let r = shape.len();
    if update.is_empty() {
        return;
    }
    if r == 0 {
        out.copy_from_slice(update);
        return;
    }
    let st = strides(shape);
    let row = update_shape[r - 1];
    let mut idx = vec![0usize; r];
    for u in update.chunks_exact(row) {
        let at: usize = (0..r).map(|d| (start[d] + idx[d]) * st[d]).sum();
        out[at..at + row].copy_from_slice(u);
        // Next row of the update box (the last coordinate stays 0).
        for d in (0..r - 1).rev() {
            idx[d] += 1;
            if idx[d] < update_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// EMBEDDING_LOOKUP with the table's own type: output row `i` is row `ids[i]` of
/// `table` (rows of `row` elements). Fails with an id outside the table.
pub fn embedding_lookup<T: Copy>(ids: &[i32], table: &[T], row: usize, out: &mut [T]) -> Result<(), i32> {
    let rows = table.len().checked_div(row).unwrap_or(0);
    for (&id, o) in ids.iter().zip(out.chunks_exact_mut(row.max(1))) {
        if id < 0 || id as usize >= rows {
            return Err(id);
        }
        let at = id as usize * row;
        o[..row].copy_from_slice(&table[at..at + row]);
    }
    Ok(())
}

/// EMBEDDING_LOOKUP of an int8 table into float32 (dynamic-range models): row
/// `ids[i]` times its scale, `scales[id]` when there is one per row, else
/// `scales[0]`. The zero point is not applied: LiteRT's hybrid kernel defines the
/// op as `value * scale` (the converter quantizes such tables symmetrically).
pub fn embedding_lookup_dequant(ids: &[i32], table: &[i8], row: usize, scales: &[f32], out: &mut [f32]) -> Result<(), i32> {
    let rows = table.len().checked_div(row).unwrap_or(0);
    for (&id, o) in ids.iter().zip(out.chunks_exact_mut(row.max(1))) {
        if id < 0 || id as usize >= rows {
            return Err(id);
        }
        let scale = if scales.len() > 1 { scales.get(id as usize).copied().ok_or(id)? } else { scales.first().copied().unwrap_or(1.0) };
        let at = id as usize * row;
        for (o, &v) in o[..row].iter_mut().zip(&table[at..at + row]) {
            *o = f32::from(v) * scale;
        }
    }
    Ok(())
}

/// TOPK_V2: for each row of `n` elements of `input`, the `k` largest values in
/// decreasing order and their positions in the row; equal values keep their
/// row order (the lower index first). `values` and `indices` hold `k` per row.
pub fn top_k<T: RankKey>(input: &[T], n: usize, k: usize, values: &mut [T], indices: &mut [i32]) {
    if k == 0 || n == 0 {
        return;
    }
    // Larger values first, then lower positions: a total order, so the k selected
    // and their order do not depend on the selection algorithm. The key is
    // inverted so that the pairs' ascending order is that order.
    let mut order: Vec<(u64, usize)> = Vec::with_capacity(n);
    for ((row, v), ix) in input.chunks_exact(n).zip(values.chunks_exact_mut(k)).zip(indices.chunks_exact_mut(k)) {
        order.clear();
        order.extend(row.iter().enumerate().map(|(p, x)| (!x.rank_key(), p)));
        if k < n {
            order.select_nth_unstable(k - 1);
        }
        order[..k].sort_unstable();
        for (j, &(_, p)) in order[..k].iter().enumerate() {
            v[j] = row[p];
            ix[j] = p as i32;
        }
    }
}

/// ONE_HOT: indices of shape `[outer, inner]` (split where the depth dimension
/// goes) -> output `[outer, depth, inner]`, `on` where the index equals the depth
/// position and `off` elsewhere (an index outside `0..depth` gives a row of `off`).
pub fn one_hot<T: Copy, I: Copy + Into<i64>>(indices: &[I], outer: usize, depth: usize, inner: usize, on: T, off: T, out: &mut [T]) {
    for o in 0..outer {
        for d in 0..depth {
            let dst = &mut out[(o * depth + d) * inner..][..inner];
            for (x, &ix) in dst.iter_mut().zip(&indices[o * inner..(o + 1) * inner]) {
                *x = if ix.into() == d as i64 { on } else { off };
            }
        }
    }
}

/// RANGE's length for integers: `ceil(|limit - start| / |delta|)`, or `None` when
/// `delta` is 0 or points away from `limit` (LiteRT refuses both).
pub fn range_len_int(start: i64, limit: i64, delta: i64) -> Option<u64> {
    if delta == 0 || (start < limit && delta < 0) || (start > limit && delta > 0) {
        return None;
    }
    let span = (i128::from(limit) - i128::from(start)).unsigned_abs();
    let step = i128::from(delta).unsigned_abs();
    u64::try_from(span.div_ceil(step)).ok()
}

/// RANGE's length for floats: `ceil(|(limit - start) / delta|)`, or `None` when
/// `delta` is 0, points away from `limit`, or a value is not finite.
pub fn range_len_f32(start: f32, limit: f32, delta: f32) -> Option<u64> {
    if delta == 0.0 || (start < limit && delta < 0.0) || (start > limit && delta > 0.0) {
        return None;
    }
    let n = ((limit - start) / delta).abs().ceil();
    (n.is_finite() && n < u64::MAX as f32).then_some(n as u64)
}

/// RANGE: `out[i]` is `start` plus `delta` added `i` times, accumulated in the
/// element type as LiteRT's kernel does (for floats this differs from
/// `start + i * delta` in the last bits).
pub fn range<T: Accumulate>(start: T, delta: T, out: &mut [T]) {
    let mut v = start;
    for o in out {
        *o = v;
        v = v.acc(delta);
    }
}

/// CUMSUM along the middle dimension of `[outer, len, inner]`: each element is the
/// sum of the elements before it along that dimension and itself (`exclusive`:
/// without itself), counted from the end when `reverse`. Sums accumulate in order
/// in the element type.
pub fn cumsum<T: Accumulate>(input: &[T], outer: usize, len: usize, inner: usize, exclusive: bool, reverse: bool, out: &mut [T]) {
    for o in 0..outer {
        for i in 0..inner {
            let mut sum = T::default();
            for step in 0..len {
                let k = if reverse { len - 1 - step } else { step };
                let at = (o * len + k) * inner + i;
                let v = input[at];
                if exclusive {
                    out[at] = sum;
                    sum = sum.acc(v);
                } else {
                    sum = sum.acc(v);
                    out[at] = sum;
                }
            }
        }
    }
}

/// What a WHERE condition element means: true when nonzero (for floats: not
/// ±0, so NaN is true), as TensorFlow converts any element type to bool.
pub trait Truth: Copy {
    /// True when the element counts as true.
    fn truth(self) -> bool;
}

macro_rules! int_truth {
    ($($t:ty),*) => {$(
        impl Truth for $t {
            fn truth(self) -> bool {
                self != 0
            }
        }
    )*};
}
int_truth!(i8, u8, i16, u16, i32, u32, i64, u64);

impl Truth for f32 {
    fn truth(self) -> bool {
        self != 0.0
    }
}

/// How many elements of a WHERE condition are true: the first dimension of its output.
pub fn count_true<T: Truth>(cond: &[T]) -> usize {
    cond.iter().filter(|v| v.truth()).count()
}

/// WHERE: the coordinates (in `shape`, row-major order) of the true elements of
/// `cond`, one row of `shape.len()` int64 values each. `out` holds
/// `count_true(cond) * shape.len()` values.
pub fn where_coords<T: Truth>(cond: &[T], shape: &[usize], out: &mut [i64]) {
    let r = shape.len();
    let mut rows = out.chunks_exact_mut(r.max(1));
    let mut c = vec![0usize; r];
    for &v in cond {
        if v.truth() && r > 0 {
            let Some(row) = rows.next() else { return };
            for (o, &x) in row.iter_mut().zip(&c) {
                *o = x as i64;
            }
        }
        // Next coordinate, last dimension fastest.
        for d in (0..r).rev() {
            c[d] += 1;
            if c[d] < shape[d] {
                break;
            }
            c[d] = 0;
        }
    }
}

/// UNIQUE: the distinct values of `x` in the order of their first occurrence, and
/// for each element of `x` the position of its value in that list. Values equal
/// under [`RankKey`] are one value (so -0 and +0 are one, the first seen kept).
pub fn unique<T: RankKey>(x: &[T]) -> (Vec<T>, Vec<usize>) {
    // Sorted by key, equal keys by position: within a run of equal values the
    // first occurrence comes first.
    let mut order: Vec<(u64, usize)> = x.iter().enumerate().map(|(i, v)| (v.rank_key(), i)).collect();
    order.sort_unstable();
    // Runs of equal values, each a group.
    let mut group_of = vec![0usize; x.len()];
    let mut groups = 0;
    for (k, &(key, i)) in order.iter().enumerate() {
        if k == 0 || order[k - 1].0 != key {
            groups += 1;
        }
        group_of[i] = groups - 1;
    }
    // Groups numbered by first occurrence: the order in which a scan of `x` meets
    // them.
    let mut rank = vec![usize::MAX; groups];
    let mut values = Vec::with_capacity(groups);
    for (&g, &v) in group_of.iter().zip(x) {
        if rank[g] == usize::MAX {
            rank[g] = values.len();
            values.push(v);
        }
    }
    (values, group_of.iter().map(|&g| rank[g]).collect())
}

/// How the segment ops combine the rows of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentOp {
    /// Sum (an empty segment is 0).
    Sum,
    /// Product (an empty segment is 1).
    Prod,
    /// Maximum (an empty segment is the type's lowest value).
    Max,
    /// Minimum (an empty segment is the type's highest value).
    Min,
}

/// Element types the segment ops reduce: the identities of each reduction, and
/// the reductions as LiteRT's kernels compute them (integers wrap).
pub trait SegmentValue: Copy + PartialOrd {
    /// The value of an empty segment under `op`.
    fn identity(op: SegmentOp) -> Self;
    /// `acc` combined with `v` under `op`.
    fn combine(op: SegmentOp, acc: Self, v: Self) -> Self;
}

impl SegmentValue for f32 {
    fn identity(op: SegmentOp) -> f32 {
        match op {
            SegmentOp::Sum => 0.0,
            SegmentOp::Prod => 1.0,
            SegmentOp::Max => f32::MIN,
            SegmentOp::Min => f32::MAX,
        }
    }
    fn combine(op: SegmentOp, acc: f32, v: f32) -> f32 {
        match op {
            SegmentOp::Sum => acc + v,
            SegmentOp::Prod => acc * v,
            SegmentOp::Max => {
                if v > acc {
                    v
                } else {
                    acc
                }
            }
            SegmentOp::Min => {
                if v < acc {
                    v
                } else {
                    acc
                }
            }
        }
    }
}

impl SegmentValue for i32 {
    fn identity(op: SegmentOp) -> i32 {
        match op {
            SegmentOp::Sum => 0,
            SegmentOp::Prod => 1,
            SegmentOp::Max => i32::MIN,
            SegmentOp::Min => i32::MAX,
        }
    }
    fn combine(op: SegmentOp, acc: i32, v: i32) -> i32 {
        match op {
            SegmentOp::Sum => acc.wrapping_add(v),
            SegmentOp::Prod => acc.wrapping_mul(v),
            SegmentOp::Max => acc.max(v),
            SegmentOp::Min => acc.min(v),
        }
    }
}

/// SEGMENT_SUM and UNSORTED_SEGMENT_*: row `i` of `data` (rows of `inner`
/// elements, one per id) is combined into output row `ids[i]`; `out` holds
/// `segments` segments, each starting at the reduction's identity. Rows with a
/// negative id are skipped and an id past the last segment is an error (its
/// value returned), as LiteRT defines the op.
pub fn segment_reduce<T: SegmentValue>(op: SegmentOp, data: &[T], ids: &[i32], inner: usize, segments: usize, out: &mut [T]) -> Result<(), i32> {
    out.fill(T::identity(op));
    if let Some(&bad) = ids.iter().find(|&&id| id >= 0 && id as usize >= segments) {
        return Err(bad);
    }
    if inner == 0 {
        return Ok(());
    }
    for (&id, row) in ids.iter().zip(data.chunks_exact(inner)) {
        let Ok(s) = usize::try_from(id) else { continue };
        for (o, &v) in out[s * inner..(s + 1) * inner].iter_mut().zip(row) {
            *o = T::combine(op, *o, v);
        }
    }
    Ok(())
}

/// MATRIX_DIAG: each row of `n` values of `diag` becomes an `n x n` matrix with
/// the row on its diagonal and `zero` elsewhere.
pub fn matrix_diag<T: Copy>(diag: &[T], n: usize, zero: T, out: &mut [T]) {
    out.fill(zero);
    if n == 0 {
        return;
    }
    for (d, m) in diag.chunks_exact(n).zip(out.chunks_exact_mut(n * n)) {
        for (i, &v) in d.iter().enumerate() {
            m[i * n + i] = v;
        }
    }
}

/// MATRIX_SET_DIAG: each `rows x cols` matrix of `input` with its main diagonal
/// (`min(rows, cols)` values per matrix, from `diag`) replaced.
pub fn matrix_set_diag<T: Copy>(input: &[T], rows: usize, cols: usize, diag: &[T], out: &mut [T]) {
    out.copy_from_slice(input);
    let k = rows.min(cols);
    if k == 0 {
        return;
    }
    for (d, m) in diag.chunks_exact(k).zip(out.chunks_exact_mut(rows * cols)) {
        for (i, &v) in d.iter().enumerate() {
            m[i * cols + i] = v;
        }
    }
}

/// BROADCAST_ARGS: the numpy broadcast of shapes `a` and `b` (aligned at the
/// end; a 1 stretches to the other's size), written to `out` (the longer rank).
/// Fails with the first pair of dimensions that do not broadcast.
pub fn broadcast_args(a: &[i64], b: &[i64], out: &mut [i64]) -> Result<(), (i64, i64)> {
    let r = out.len();
    for (d, o) in out.iter_mut().enumerate() {
        let x = if d + a.len() >= r { a[d + a.len() - r] } else { 1 };
        let y = if d + b.len() >= r { b[d + b.len() - r] } else { 1 };
        *o = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return Err((x, y));
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    /// Unflattens `flat` over `shape`.
    fn coords(mut flat: usize, shape: &[usize]) -> Vec<usize> {
        let mut c = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            c[d] = flat % shape[d];
            flat /= shape[d];
        }
        c
    }

    fn flat(c: &[usize], shape: &[usize]) -> usize {
        c.iter().zip(shape).fold(0, |a, (&i, &s)| a * s + i)
    }

    fn shape(r: &mut Rng, rank: usize, lo: usize, hi: usize) -> Vec<usize> {
        (0..rank).map(|_| r.size(lo, hi)).collect()
    }

    /// SPARSE_TO_DENSE against its definition: random positions (some repeated:
    /// the last write wins), one value for all or one each, bad coordinates refused.
    #[test]
    fn sparse_to_dense_matches_definition() {
        let mut r = Rng::new(0x5a25e);
        for _ in 0..200 {
            let rank = r.size(1, 4);
            let s = shape(&mut r, rank, 1, 4);
            let total: usize = s.iter().product();
            let n = r.size(0, 6);
            let flats: Vec<usize> = (0..n).map(|_| r.size(0, total - 1)).collect();
            let idx: Vec<i64> = flats.iter().flat_map(|&f| coords(f, &s)).map(|c| c as i64).collect();
            let scalar = r.one_in(3);
            let values: Vec<i32> = (0..if scalar { 1 } else { n }).map(|_| r.range(-100, 100) as i32).collect();
            let mut out = vec![0i32; total];
            sparse_to_dense(&idx, rank, &values, -7, &s, &mut out).unwrap();
            let mut want = vec![-7i32; total];
            for (i, &f) in flats.iter().enumerate() {
                want[f] = if scalar { values[0] } else { values[i] };
            }
            assert_eq!(out, want);
            assert_eq!(flats.iter().map(|&f| flat(&coords(f, &s), &s)).collect::<Vec<_>>(), flats);
            if n > 0 {
                let mut bad = idx.clone();
                let d = r.size(0, rank - 1);
                bad[d] = if r.one_in(2) { -1 } else { s[d] as i64 };
                assert_eq!(sparse_to_dense(&bad, rank, &values, 0, &s, &mut out), Err(bad[d]));
            }
        }
    }

    #[test]
    fn gather_nd_and_scatter_nd_match_definition() {
        let mut r = Rng::new(11);
        for _ in 0..200 {
            let rank = r.size(1, 4);
            let s = shape(&mut r, rank, 1, 4);
            let nd = r.size(0, rank);
            let n = r.size(1, 5);
            let params: Vec<i32> = (0..s.iter().product::<usize>() as i32).collect();
            let idx: Vec<i64> = (0..n).flat_map(|_| s[..nd].to_vec()).map(|d| r.size(0, d - 1) as i64).collect();
            let slice: usize = s[nd..].iter().product();
            let mut out = vec![0; n * slice];
            gather_nd(&params, &s, &idx, nd, &mut out).unwrap();
            // Output element (i, rest) is params at (tuple i, rest).
            for (e, &v) in out.iter().enumerate() {
                let (i, rest) = (e / slice, e % slice);
                let mut c: Vec<usize> = idx[i * nd..(i + 1) * nd].iter().map(|&v| v as usize).collect();
                c.extend(coords(rest, &s[nd..]));
                assert_eq!(v, params[flat(&c, &s)]);
            }
            // Scatter: each output element sums the updates whose tuple names it.
            let updates: Vec<i32> = (0..n * slice).map(|_| r.size(0, 100 - 1) as i32).collect();
            let mut sc = vec![7; params.len()];
            scatter_nd(&idx, nd, &updates, &s, &mut sc).unwrap();
            let mut want = vec![0; params.len()];
            for (e, &u) in updates.iter().enumerate() {
                let (i, rest) = (e / slice, e % slice);
                let mut c: Vec<usize> = idx[i * nd..(i + 1) * nd].iter().map(|&v| v as usize).collect();
                c.extend(coords(rest, &s[nd..]));
                want[flat(&c, &s)] += u;
            }
            assert_eq!(sc, want);
            // A coordinate one past its dimension (or negative) is refused.
            if nd > 0 {
                let mut bad = idx.clone();
                bad[0] = if r.bits() & 1 == 1 { s[0] as i64 } else { -1 };
                assert_eq!(gather_nd(&params, &s, &bad, nd, &mut out), Err(bad[0]));
                assert_eq!(scatter_nd(&bad, nd, &updates, &s, &mut sc), Err(bad[0]));
            }
        }
    }

    #[test]
    fn dynamic_update_slice_matches_definition() {
        let mut r = Rng::new(12);
        for _ in 0..200 {
            let rank = r.size(0, 4);
            let s = shape(&mut r, rank, 1, 5);
            let u: Vec<usize> = s.iter().map(|&d| r.size(0, d)).collect();
            let start_raw: Vec<i32> = s.iter().map(|&d| r.size(0, 2 * d + 2) as i32 - d as i32).collect();
            let start = clamp_start(&start_raw, &s, &u);
            let operand: Vec<u16> = (0..s.iter().product::<usize>() as u16).collect();
            let update: Vec<u16> = (0..u.iter().product::<usize>() as u16).map(|v| 1000 + v).collect();
            let mut out = vec![0; operand.len()];
            dynamic_update_slice(&operand, &s, &update, &u, &start, &mut out);
            for (e, &v) in out.iter().enumerate() {
                let c = coords(e, &s);
                // Clamped into 0 ..= operand - update.
                let st: Vec<usize> = start_raw.iter().zip(s.iter().zip(&u)).map(|(&b, (&o, &n))| (b.max(0) as usize).min(o - n)).collect();
                let inside = (0..rank).all(|d| c[d] >= st[d] && c[d] < st[d] + u[d]);
                if inside && !update.is_empty() {
                    let uc: Vec<usize> = (0..rank).map(|d| c[d] - st[d]).collect();
                    assert_eq!(v, update[flat(&uc, &u)]);
                } else {
                    assert_eq!(v, operand[e]);
                }
            }
        }
    }

    #[test]
    fn embedding_lookup_rows_and_scales() {
        let table: Vec<i8> = vec![1, 2, 3, -4, 5, -6];
        let mut out = vec![0.0f32; 6];
        embedding_lookup_dequant(&[2, 0, 1], &table, 2, &[0.5], &mut out).unwrap();
        assert_eq!(out, [2.5, -3.0, 0.5, 1.0, 1.5, -2.0]);
        embedding_lookup_dequant(&[2, 0, 1], &table, 2, &[1.0, 2.0, 3.0], &mut out).unwrap();
        assert_eq!(out, [15.0, -18.0, 1.0, 2.0, 6.0, -8.0]);
        let mut raw = vec![0i8; 4];
        embedding_lookup(&[1, 1], &table, 2, &mut raw).unwrap();
        assert_eq!(raw, [3, -4, 3, -4]);
        assert_eq!(embedding_lookup(&[3], &table, 2, &mut raw), Err(3));
        assert_eq!(embedding_lookup_dequant(&[-1], &table, 2, &[1.0], &mut out), Err(-1));
    }

    #[test]
    fn top_k_matches_a_full_sort() {
        let mut r = Rng::new(13);
        for _ in 0..300 {
            let n = r.size(1, 12);
            let rows = r.size(1, 4);
            let k = r.size(0, n);
            // Few distinct values, so ties are common.
            let x: Vec<f32> = (0..n * rows).map(|_| [-1.0, -0.0, 0.0, 2.0, 3.5][r.size(0, 5 - 1)]).collect();
            let (mut v, mut ix) = (vec![0.0; rows * k], vec![0; rows * k]);
            top_k(&x, n, k, &mut v, &mut ix);
            for row in 0..rows {
                let xs = &x[row * n..(row + 1) * n];
                let mut want: Vec<usize> = (0..n).collect();
                // Stable sort by decreasing value: equal values keep index order.
                want.sort_by(|&a, &b| xs[b].partial_cmp(&xs[a]).unwrap());
                for j in 0..k {
                    assert_eq!(ix[row * k + j] as usize, want[j], "{xs:?} k={k}");
                    assert_eq!(v[row * k + j], xs[want[j]]);
                }
            }
        }
        let (mut v, mut ix) = (vec![0i8; 2], vec![0; 2]);
        top_k(&[3i8, -7, 3, 9], 4, 2, &mut v, &mut ix);
        assert_eq!((v, ix), (vec![9, 3], vec![3, 0]));
    }

    #[test]
    fn one_hot_range_and_cumsum() {
        // indices [2, 3] -> depth 4 at axis 1: [2, 4, 3].
        let idx = [0i32, 3, -1, 4, 1, 1];
        let mut out = vec![0i32; 24];
        one_hot(&idx, 2, 4, 3, 1, 0, &mut out);
        for o in 0..2 {
            for d in 0..4 {
                for i in 0..3 {
                    assert_eq!(out[(o * 4 + d) * 3 + i], i32::from(idx[o * 3 + i] == d as i32));
                }
            }
        }
        assert_eq!(range_len_int(3, 18, 4), Some(4));
        assert_eq!(range_len_int(3, -1, -2), Some(2));
        assert_eq!(range_len_int(0, 0, 5), Some(0));
        assert_eq!(range_len_int(0, 5, -1), None);
        assert_eq!(range_len_int(i64::MIN, i64::MAX, 1), Some(u64::MAX));
        assert_eq!(range_len_f32(0.0, 1.0, 0.3), Some(4));
        assert_eq!(range_len_f32(1.0, 1.0, 0.0), None);
        let mut v = vec![0i32; 4];
        range(3, 4, &mut v);
        assert_eq!(v, [3, 7, 11, 15]);
        // Sequential accumulation in float32.
        let mut f = vec![0.0f32; 4];
        range(0.0, 0.1, &mut f);
        assert_eq!(f, [0.0, 0.1, 0.1 + 0.1, 0.1 + 0.1 + 0.1]);
        let x = [1, 2, 3, 4, 5, 6];
        let mut out = [0; 6];
        for (exclusive, reverse, want) in
            [(false, false, [1, 2, 4, 6, 9, 12]), (true, false, [0, 0, 1, 2, 4, 6]), (false, true, [9, 12, 8, 10, 5, 6]), (true, true, [8, 10, 5, 6, 0, 0])]
        {
            cumsum(&x, 1, 3, 2, exclusive, reverse, &mut out);
            assert_eq!(out, want, "exclusive {exclusive} reverse {reverse}");
        }
    }

    #[test]
    fn where_lists_true_coordinates_in_order() {
        let mut r = Rng::new(21);
        for _ in 0..100 {
            let rank = r.size(0, 3);
            let s = shape(&mut r, rank, 0, 4);
            let n: usize = s.iter().product();
            let cond: Vec<f32> = (0..n).map(|_| [0.0, -0.0, 1.0, f32::NAN][r.size(0, 3)]).collect();
            let k = count_true(&cond);
            let mut out = vec![-1i64; k * rank];
            where_coords(&cond, &s, &mut out);
            let want: Vec<i64> = (0..n).filter(|&e| cond[e] != 0.0).flat_map(|e| coords(e, &s)).map(|c| c as i64).collect();
            assert_eq!(out, want);
        }
    }

    #[test]
    fn rank_keys_order_as_the_values() {
        // Floats: total_cmp with -0 taken as +0; integers: their own order, at the
        // ends of each type's range too.
        let f = [f32::NEG_INFINITY, -f32::NAN, f32::NAN, -3.5, -f32::MIN_POSITIVE, -0.0, 0.0, 1e-45, 2.0, f32::MAX, f32::INFINITY];
        for &a in &f {
            for &b in &f {
                assert_eq!(a.rank_key().cmp(&b.rank_key()), (a + 0.0).total_cmp(&(b + 0.0)), "{a} {b}");
            }
        }
        let i = [i64::MIN, -1, 0, 1, i64::MAX];
        for &a in &i {
            for &b in &i {
                assert_eq!(a.rank_key().cmp(&b.rank_key()), a.cmp(&b));
            }
        }
        assert!(i8::MIN.rank_key() < (-1i8).rank_key() && 0u8.rank_key() < 255u8.rank_key() && (-1i32).rank_key() < 0i32.rank_key());
    }

    #[test]
    fn unique_keeps_first_occurrence_order() {
        let mut r = Rng::new(22);
        for _ in 0..100 {
            let n = r.size(0, 12);
            let x: Vec<i32> = (0..n).map(|_| r.size(0, 5) as i32 - 2).collect();
            let (v, idx) = unique(&x);
            let mut want: Vec<i32> = vec![];
            for &e in &x {
                if !want.contains(&e) {
                    want.push(e);
                }
            }
            assert_eq!(v, want);
            for (i, &e) in x.iter().enumerate() {
                assert_eq!(v[idx[i]], e);
            }
        }
        let (v, idx) = unique(&[-0.0f32, 1.0, 0.0]);
        assert_eq!((v[0].to_bits(), v[1], idx), ((-0.0f32).to_bits(), 1.0, vec![0, 1, 0]));
    }

    #[test]
    fn segments_reduce_by_id_skip_negative_and_refuse_large_ids() {
        let mut r = Rng::new(23);
        for _ in 0..200 {
            let (rows, inner, segs) = (r.size(0, 6), r.size(0, 3), r.size(0, 4));
            let data: Vec<i32> = (0..rows * inner).map(|_| r.size(0, 9) as i32 - 4).collect();
            let ids: Vec<i32> = (0..rows).map(|_| r.size(0, segs + 1) as i32 - 1).collect();
            for op in [SegmentOp::Sum, SegmentOp::Prod, SegmentOp::Max, SegmentOp::Min] {
                let mut out = vec![7; segs * inner];
                let res = segment_reduce(op, &data, &ids, inner, segs, &mut out);
                if let Some(&bad) = ids.iter().find(|&&i| i >= segs as i32) {
                    assert_eq!(res, Err(bad));
                    continue;
                }
                assert_eq!(res, Ok(()));
                for s in 0..segs {
                    for j in 0..inner {
                        let vals: Vec<i32> = (0..rows).filter(|&i| ids[i] == s as i32).map(|i| data[i * inner + j]).collect();
                        let want = match op {
                            SegmentOp::Sum => vals.iter().sum(),
                            SegmentOp::Prod => vals.iter().product(),
                            SegmentOp::Max => vals.iter().copied().max().unwrap_or(i32::MIN),
                            SegmentOp::Min => vals.iter().copied().min().unwrap_or(i32::MAX),
                        };
                        assert_eq!(out[s * inner + j], want, "{op:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn diagonals_and_broadcast_args() {
        let mut out = vec![9i16; 8];
        matrix_diag(&[1, 2, 3, 4], 2, 0, &mut out);
        assert_eq!(out, [1, 0, 0, 2, 3, 0, 0, 4]);
        let x: Vec<u8> = (0..12).collect();
        let mut out = vec![0u8; 12];
        // Two 2x3 matrices: diagonals of 2.
        matrix_set_diag(&x, 2, 3, &[100, 101, 102, 103], &mut out);
        assert_eq!(out, [100, 1, 2, 3, 101, 5, 102, 7, 8, 9, 103, 11]);
        let mut o = vec![0; 3];
        assert_eq!(broadcast_args(&[2, 1, 5], &[4, 1], &mut o), Ok(()));
        assert_eq!(o, [2, 4, 5]);
        assert_eq!(broadcast_args(&[3], &[2, 4], &mut o[..2]), Err((3, 4)));
        let mut o = vec![0; 0];
        assert_eq!(broadcast_args(&[], &[], &mut o), Ok(()));
    }
}
