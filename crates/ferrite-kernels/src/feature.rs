//! Feature-preprocessing ops of TensorFlow 1 graphs: BUCKETIZE, FAKE_QUANT and
//! EMBEDDING_LOOKUP_SPARSE, with LiteRT's arithmetic (float32 throughout, C++
//! comparison and rounding rules).

/// An input element BUCKETIZE can compare with its float32 boundaries, the way
/// C++ compares mixed types: integers are converted to float32, doubles compare
/// with the boundary widened to double.
pub trait BucketValue: Copy {
    /// `self < boundary` under those conversions.
    fn below(self, boundary: f32) -> bool;
}

impl BucketValue for f32 {
    fn below(self, b: f32) -> bool {
        self < b
    }
}
impl BucketValue for f64 {
    fn below(self, b: f32) -> bool {
        self < f64::from(b)
    }
}
impl BucketValue for i32 {
    fn below(self, b: f32) -> bool {
        (self as f32) < b
    }
}
impl BucketValue for i64 {
    fn below(self, b: f32) -> bool {
        (self as f32) < b
    }
}

/// True when no boundary is smaller than the one before it (NaNs compare as
/// neither, so they never break the order), the check LiteRT makes at prepare.
pub fn boundaries_sorted(boundaries: &[f32]) -> bool {
    boundaries.windows(2).all(|w| w[1].partial_cmp(&w[0]) != Some(std::cmp::Ordering::Less))
}

/// BUCKETIZE: each output is the index of the first boundary greater than the
/// input (the number of boundaries at or below it), found by the same halving
/// search as C++'s `upper_bound`, so unordered NaN boundaries land where LiteRT's do.
pub fn bucketize<T: BucketValue>(input: &[T], boundaries: &[f32], out: &mut [i32]) {
    for (o, &v) in out.iter_mut().zip(input) {
        let (mut first, mut len) = (0usize, boundaries.len());
        while len > 0 {
            let half = len / 2;
            if v.below(boundaries[first + half]) {
                len = half;
            } else {
                first += half + 1;
                len -= half + 1;
            }
        }
        *o = first as i32;
    }
}

/// FAKE_QUANT's range nudged so that zero is exactly representable: (nudged min,
/// nudged max, scale) for integers `quant_min..=quant_max`, with TensorFlow's
/// formula (the zero point from `min` rounded half away from zero and clamped).
pub fn nudge(min: f32, max: f32, quant_min: i32, quant_max: i32) -> (f32, f32, f32) {
    let (qmin, qmax) = (quant_min as f32, quant_max as f32);
    let scale = (max - min) / (qmax - qmin);
    let zero_from_min = qmin - min / scale;
    let zero = if zero_from_min < qmin {
        qmin
    } else if zero_from_min > qmax {
        qmax
    } else {
        zero_from_min.round()
    };
    ((qmin - zero) * scale, (qmax - zero) * scale, scale)
}

/// FAKE_QUANT: each value clamped to the nudged range, snapped to the nearest of
/// its `scale` steps (half away from zero) and mapped back to float. `max(lo, x)`
/// then `min(hi, ..)` with C++'s argument order, so a NaN input gives the
/// nudged minimum as in LiteRT.
pub fn fake_quant(input: &[f32], nudged_min: f32, nudged_max: f32, scale: f32, out: &mut [f32]) {
    let inv = 1.0f32 / scale;
    for (o, &x) in out.iter_mut().zip(input) {
        let lifted = if nudged_min < x { x } else { nudged_min };
        let clamped = if lifted < nudged_max { lifted } else { nudged_max };
        *o = ((clamped - nudged_min) * inv).round() * scale + nudged_min;
    }
}

/// How EMBEDDING_LOOKUP_SPARSE combines the weighted rows of one output position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combiner {
    /// The weighted sum.
    Sum,
    /// The weighted sum over the sum of the weights.
    Mean,
    /// The weighted sum over the square root of the sum of squared weights.
    Sqrtn,
}

/// A failure of EMBEDDING_LOOKUP_SPARSE on its data: an id or an index outside its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SparseLookupError {
    /// A lookup names a params row outside `0..rows`.
    #[allow(missing_docs)]
    Id { i: usize, id: i32, rows: usize },
    /// A lookup's coordinate in dimension `dim` is outside `0..size`.
    #[allow(missing_docs)]
    Index { i: usize, dim: usize, index: i32, size: usize },
}

impl std::fmt::Display for SparseLookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SparseLookupError::Id { i, id, rows } => write!(f, "lookup {i}: id {id} outside the {rows} rows of params"),
            SparseLookupError::Index { i, dim, index, size } => write!(f, "lookup {i}: index {index} in dimension {dim} outside 0..{size}"),
        }
    }
}

/// EMBEDDING_LOOKUP_SPARSE over a sparse tensor given as `ids` (one params row per
/// lookup), `indices` (`ids.len()` tuples of `lookup_rank` coordinates) and
/// `weights` (one per lookup). The output has one position per coordinate tuple
/// without its last coordinate (`out_dims`, the dense shape without its last
/// dimension), each `emb` floats wide.
///
/// As in LiteRT, lookups accumulate `row * weight` into their position; when a
/// lookup moves to a different position than the one before it, the previous
/// position's sum is divided by its combiner (sum of weights, or square root of
/// the sum of squared weights, of the lookups since the last move), and so is the
/// last one's at the end. Sparse tensors list their positions in order, so each
/// position is finished once.
#[allow(clippy::too_many_arguments)]
pub fn embedding_lookup_sparse(
    ids: &[i32],
    indices: &[i32],
    lookup_rank: usize,
    out_dims: &[usize],
    weights: &[f32],
    params: &[f32],
    emb: usize,
    combiner: Combiner,
    out: &mut [f32],
) -> Result<(), SparseLookupError> {
    out.fill(0.0);
    let rows = params.len().checked_div(emb).unwrap_or(0);
    let finish = |out: &mut [f32], at: usize, n: usize, total: f32, squares: f32| {
        if combiner == Combiner::Sum || n == 0 {
            return;
        }
        let by = if combiner == Combiner::Mean { total } else { squares.sqrt() };
        out[at..at + emb].iter_mut().for_each(|v| *v /= by);
    };
    let (mut at, mut n, mut total, mut squares) = (0usize, 0usize, 0f32, 0f32);
    for (i, (&id, &w)) in ids.iter().zip(weights).enumerate() {
        if id < 0 || id as usize >= rows {
            return Err(SparseLookupError::Id { i, id, rows });
        }
        // Row-major position of the tuple's leading coordinates.
        let tuple = &indices[i * lookup_rank..(i + 1) * lookup_rank];
        let mut position = 0usize;
        for (dim, (&index, &size)) in tuple.iter().zip(out_dims).enumerate() {
            if index < 0 || index as usize >= size {
                return Err(SparseLookupError::Index { i, dim, index, size });
            }
            position = position * size + index as usize;
        }
        let offset = position * emb;
        if offset != at {
            finish(out, at, n, total, squares);
            (at, n, total, squares) = (offset, 0, 0.0, 0.0);
        }
        n += 1;
        squares += w * w;
        total += w;
        let row = &params[id as usize * emb..(id as usize + 1) * emb];
        out[at..at + emb].iter_mut().zip(row).for_each(|(o, &p)| *o += p * w);
    }
    if !out.is_empty() {
        finish(out, at, n, total, squares);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn bucketize_counts_the_boundaries_at_or_below() {
        let mut r = Rng::new(3);
        for _ in 0..50 {
            let mut b: Vec<f32> = (0..r.size(0, 7)).map(|_| r.scale(-10.0, 10.0)).collect();
            b.sort_by(f32::total_cmp);
            assert!(boundaries_sorted(&b));
            let x: Vec<f32> = (0..30).map(|_| r.scale(-12.0, 12.0).round()).chain(b.iter().copied()).collect();
            let mut o = vec![0; x.len()];
            bucketize(&x, &b, &mut o);
            for (v, got) in x.iter().zip(&o) {
                assert_eq!(*got as usize, b.iter().filter(|&&e| e <= *v).count());
            }
            let xi: Vec<i64> = x.iter().map(|&v| v as i64).collect();
            bucketize(&xi, &b, &mut o);
            for (v, got) in xi.iter().zip(&o) {
                assert_eq!(*got as usize, b.iter().filter(|&&e| e <= *v as f32).count());
            }
        }
        assert!(!boundaries_sorted(&[1.0, 0.5]));
        let mut o = [9];
        bucketize(&[f32::NAN], &[0.0, 1.0], &mut o);
        assert_eq!(o, [2]);
    }

    #[test]
    fn fake_quant_snaps_to_the_nudged_grid() {
        // 8 bits over [-1, 1]: scale 2/255, the zero point (127.5 in exact
        // arithmetic) an integer, so zero lies on the grid.
        let (lo, hi, s) = nudge(-1.0, 1.0, 0, 255);
        assert_eq!(s, 2.0 / 255.0);
        let zero = -lo / s;
        assert!(zero == zero.round() && (127.0..=128.0).contains(&zero), "zero point {zero}");
        assert_eq!(hi, (255.0 - zero) * s);
        let x = [-2.0, -1.0, 0.0, 0.004, 0.5, 3.0, f32::NAN];
        let mut o = [0.0; 7];
        fake_quant(&x, lo, hi, s, &mut o);
        assert_eq!(o[0], lo);
        assert_eq!(o[2], 0.0);
        assert!((o[5] - hi).abs() <= 1e-6);
        assert_eq!(o[6], lo);
        for (&v, &q) in x.iter().zip(&o).take(6) {
            let k = (q - lo) / s;
            assert!((k - k.round()).abs() < 1e-3, "{q} is not on the grid");
            assert!((v.clamp(lo, hi) - q).abs() <= s / 2.0 + 1e-6);
        }
        // A range wholly above zero is moved down to start at zero.
        assert_eq!(nudge(0.5, 2.0, 0, 15).0, 0.0);
    }

    #[test]
    fn sparse_lookup_combines_rows_per_position() {
        // Dense shape [3, 4]: positions 0 and 2 get two lookups, position 1 none.
        let params = [1.0, 2.0, 10.0, 20.0, 100.0, 200.0];
        let ids = [0, 1, 2, 2];
        let indices = [0, 0, 0, 3, 2, 1, 2, 2];
        let weights = [1.0, 3.0, 2.0, 2.0];
        let mut o = [0.0; 6];
        for (c, want) in [
            (Combiner::Sum, [31.0, 62.0, 0.0, 0.0, 400.0, 800.0]),
            (Combiner::Mean, [31.0 / 4.0, 62.0 / 4.0, 0.0, 0.0, 100.0, 200.0]),
            (Combiner::Sqrtn, [31.0 / 10f32.sqrt(), 62.0 / 10f32.sqrt(), 0.0, 0.0, 400.0 / 8f32.sqrt(), 800.0 / 8f32.sqrt()]),
        ] {
            embedding_lookup_sparse(&ids, &indices, 2, &[3], &weights, &params, 2, c, &mut o).unwrap();
            assert_eq!(o, want, "{c:?}");
        }
        let e = embedding_lookup_sparse(&[3], &[0, 0], 2, &[3], &[1.0], &params, 2, Combiner::Sum, &mut o);
        assert_eq!(e, Err(SparseLookupError::Id { i: 0, id: 3, rows: 3 }));
        let e = embedding_lookup_sparse(&[0], &[3, 0], 2, &[3], &[1.0], &params, 2, Combiner::Sum, &mut o);
        assert_eq!(e, Err(SparseLookupError::Index { i: 0, dim: 0, index: 3, size: 3 }));
    }
}
