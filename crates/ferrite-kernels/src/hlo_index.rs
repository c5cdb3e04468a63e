//! STABLEHLO_GATHER and STABLEHLO_SCATTER: slices of an operand addressed by
//! index vectors, read (gather) or combined into a copy of it (scatter), with the
//! dimension numbers of the StableHLO definitions. Gather clamps each start index
//! so the whole slice fits the operand; scatter skips each update element whose
//! target lies outside the operand. Both walk their iteration space row-major (the
//! output for gather, the updates for scatter), so repeated scatter targets combine
//! in the order LiteRT applies them.
//!
//! The dimension numbers are checked once by [`GatherDims::new`] and
//! [`ScatterDims::new`] (every list against the ranks and shapes it indexes), so the
//! kernels index only within the buffers those shapes size.

use crate::hlo::{Combine, HloElem};

/// An index element type (LiteRT reads int32 and int64 indices).
pub trait IndexElem: Copy {
    /// The index as a 64-bit value.
    fn value(self) -> i64;
}

impl IndexElem for i32 {
    #[inline]
    fn value(self) -> i64 {
        i64::from(self)
    }
}

impl IndexElem for i64 {
    #[inline]
    fn value(self) -> i64 {
        self
    }
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(shape[d + 1]);
    }
    s
}

/// Advances the row-major counter `at` within `shape`; false once it wraps.
fn next(at: &mut [usize], shape: &[usize]) -> bool {
    for d in (0..at.len()).rev() {
        at[d] += 1;
        if at[d] < shape[d] {
            return true;
        }
        at[d] = 0;
    }
    false
}

/// Checks a list of dimension numbers: each in `0..bound`, no repeats, and (when
/// `sorted`) increasing, as the definitions require.
fn dim_list(name: &str, v: &[i64], bound: usize, sorted: bool) -> Result<Vec<usize>, String> {
    let out: Vec<usize> = v
        .iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d < bound).ok_or_else(|| format!("{name} {v:?}: {d} is not a dimension of rank {bound}")))
        .collect::<Result<_, _>>()?;
    for (i, d) in out.iter().enumerate() {
        if out[..i].contains(d) {
            return Err(format!("{name} {v:?} repeats dimension {d}"));
        }
    }
    if sorted && out.windows(2).any(|w| w[0] > w[1]) {
        return Err(format!("{name} {v:?} must be sorted"));
    }
    Ok(out)
}

/// The index vector dimension and the index vectors' length: `dim ==
/// rank(indices)` means an implicit trailing dimension of size 1.
fn index_vector(indices: &[usize], dim: i64) -> Result<(usize, usize), String> {
    let ivd =
        usize::try_from(dim).ok().filter(|&d| d <= indices.len()).ok_or_else(|| format!("index_vector_dim {dim} for indices of rank {}", indices.len()))?;
    Ok((ivd, indices.get(ivd).copied().unwrap_or(1)))
}

/// Where the index vector of the batch position `batch` (the indices' dimensions
/// but the index vector one, in order) starts in the indices buffer.
fn index_base(batch: impl Iterator<Item = usize>, ivd: usize, idx_strides: &[usize]) -> usize {
    let dims = (0..idx_strides.len()).filter(|&d| d != ivd);
    batch.zip(dims).map(|(i, d)| i * idx_strides[d]).sum()
}

/// STABLEHLO_GATHER's checked dimension numbers and shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatherDims {
    /// Operand shape.
    pub operand: Vec<usize>,
    /// Start indices' shape.
    pub indices: Vec<usize>,
    /// The indices' dimension holding the index vectors (`rank(indices)`: implicit).
    pub index_vector_dim: usize,
    /// Output dimensions that index within a slice, increasing.
    pub offset_dims: Vec<usize>,
    /// Operand dimensions of slice size 1 dropped from the output, increasing.
    pub collapsed_slice_dims: Vec<usize>,
    /// Operand dimension each index vector element starts.
    pub start_index_map: Vec<usize>,
    /// Slice size per operand dimension.
    pub slice_sizes: Vec<usize>,
    /// Output shape: the indices' batch dimensions, with the slice's uncollapsed
    /// dimensions at `offset_dims`.
    pub output: Vec<usize>,
}

impl GatherDims {
    /// Checks the options against the operand and indices shapes (the
    /// definition's constraints) and derives the output shape.
    pub fn new(
        operand: &[usize],
        indices: &[usize],
        offset_dims: &[i64],
        collapsed_slice_dims: &[i64],
        start_index_map: &[i64],
        index_vector_dim: i64,
        slice_sizes: &[i64],
    ) -> Result<Self, String> {
        let r = operand.len();
        let (ivd, n) = index_vector(indices, index_vector_dim)?;
        if slice_sizes.len() != r {
            return Err(format!("slice_sizes {slice_sizes:?} for an operand of rank {r}"));
        }
        let sizes: Vec<usize> = slice_sizes
            .iter()
            .zip(operand)
            .map(|(&s, &d)| usize::try_from(s).ok().filter(|&s| s <= d))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("slice_sizes {slice_sizes:?} must lie within the operand shape {operand:?}"))?;
        let collapsed = dim_list("collapsed_slice_dims", collapsed_slice_dims, r, true)?;
        // The definition allows a collapsed size of 0, but its output elements would
        // then read past the operand (LiteRT's kernel does): only 1 is taken.
        if let Some(&d) = collapsed.iter().find(|&&d| sizes[d] != 1) {
            return Err(format!("collapsed dimension {d} has slice size {} (must be 1)", sizes[d]));
        }
        let map = dim_list("start_index_map", start_index_map, r, false)?;
        if map.len() != n {
            return Err(format!("start_index_map {start_index_map:?} for index vectors of {n} elements"));
        }
        let batch = indices.len() - usize::from(ivd < indices.len());
        if offset_dims.len() + collapsed.len() != r {
            return Err(format!("{} offset_dims and {} collapsed_slice_dims for an operand of rank {r}", offset_dims.len(), collapsed.len()));
        }
        let offsets = dim_list("offset_dims", offset_dims, batch + offset_dims.len(), true)?;
        let mut slice_dims = (0..r).filter(|d| !collapsed.contains(d)).map(|d| sizes[d]);
        let mut batch_dims = (0..indices.len()).filter(|&d| d != ivd).map(|d| indices[d]);
        let output = (0..batch + offsets.len())
            .map(|d| if offsets.contains(&d) { slice_dims.next() } else { batch_dims.next() })
            .collect::<Option<Vec<_>>>()
            .ok_or("gather output shape")?;
        Ok(GatherDims {
            operand: operand.to_vec(),
            indices: indices.to_vec(),
            index_vector_dim: ivd,
            offset_dims: offsets,
            collapsed_slice_dims: collapsed,
            start_index_map: map,
            slice_sizes: sizes,
            output,
        })
    }
}

/// Gathers `x` (of `g.operand`) at the index vectors of `idx` (of `g.indices`) into
/// `out` (of `g.output`). Each start index is clamped to `0..=dim - slice_size`.
/// Buffers shorter than their shapes leave the rest of `out` untouched.
pub fn gather<T: Copy, I: IndexElem>(g: &GatherDims, x: &[T], idx: &[I], out: &mut [T]) {
    let r = g.operand.len();
    let (xs, is) = (strides(&g.operand), strides(&g.indices));
    let ivd_stride = is.get(g.index_vector_dim).copied().unwrap_or(0);
    // The operand dimension each offset output dimension walks.
    let slice_dims: Vec<usize> = (0..r).filter(|d| !g.collapsed_slice_dims.contains(d)).collect();
    let mut at = vec![0usize; g.output.len()];
    let mut start = vec![0i64; r];
    for o in out.iter_mut() {
        let batch = (0..at.len()).filter(|d| !g.offset_dims.contains(d)).map(|d| at[d]);
        let base = index_base(batch, g.index_vector_dim, &is);
        start.fill(0);
        for (j, &d) in g.start_index_map.iter().enumerate() {
            start[d] = idx.get(base + j * ivd_stride).map_or(0, |v| v.value());
        }
        let mut flat = 0usize;
        for d in 0..r {
            let hi = (g.operand[d] - g.slice_sizes[d]) as i64;
            flat += start[d].clamp(0, hi) as usize * xs[d];
        }
        for (k, &od) in g.offset_dims.iter().enumerate() {
            flat += at[od] * xs[slice_dims[k]];
        }
        if let Some(&v) = x.get(flat) {
            *o = v;
        }
        if !next(&mut at, &g.output) {
            break;
        }
    }
}

/// STABLEHLO_SCATTER's checked dimension numbers and shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScatterDims {
    /// Operand (and output) shape.
    pub operand: Vec<usize>,
    /// Scatter indices' shape.
    pub indices: Vec<usize>,
    /// Updates' shape.
    pub updates: Vec<usize>,
    /// The indices' dimension holding the index vectors (`rank(indices)`: implicit).
    pub index_vector_dim: usize,
    /// Updates' dimensions that index within a window, increasing.
    pub update_window_dims: Vec<usize>,
    /// Operand dimensions a window does not span, increasing.
    pub inserted_window_dims: Vec<usize>,
    /// Operand dimension each index vector element starts.
    pub scatter_dims_to_operand_dims: Vec<usize>,
}

impl ScatterDims {
    /// Checks the options against the operand, indices and updates shapes (the
    /// definition's constraints).
    pub fn new(
        operand: &[usize],
        indices: &[usize],
        updates: &[usize],
        update_window_dims: &[i64],
        inserted_window_dims: &[i64],
        scatter_dims_to_operand_dims: &[i64],
        index_vector_dim: i64,
    ) -> Result<Self, String> {
        let r = operand.len();
        let (ivd, n) = index_vector(indices, index_vector_dim)?;
        let window = dim_list("update_window_dims", update_window_dims, updates.len(), true)?;
        let inserted = dim_list("inserted_window_dims", inserted_window_dims, r, true)?;
        if window.len() + inserted.len() != r {
            return Err(format!("{} update_window_dims and {} inserted_window_dims for an operand of rank {r}", window.len(), inserted.len()));
        }
        let map = dim_list("scatter_dims_to_operand_dims", scatter_dims_to_operand_dims, r, false)?;
        if map.len() != n {
            return Err(format!("scatter_dims_to_operand_dims {scatter_dims_to_operand_dims:?} for index vectors of {n} elements"));
        }
        let scatter: Vec<usize> = (0..updates.len()).filter(|d| !window.contains(d)).map(|d| updates[d]).collect();
        let batch: Vec<usize> = (0..indices.len()).filter(|&d| d != ivd).map(|d| indices[d]).collect();
        if scatter != batch {
            return Err(format!("updates' scatter dimensions {scatter:?} differ from the indices' batch dimensions {batch:?}"));
        }
        let spanned = (0..r).filter(|d| !inserted.contains(d));
        if let Some((w, d)) = window.iter().zip(spanned).find(|(&w, d)| updates[w] > operand[*d]) {
            return Err(format!("update window dimension {w} of size {} exceeds operand dimension {d} of size {}", updates[*w], operand[d]));
        }
        Ok(ScatterDims {
            operand: operand.to_vec(),
            indices: indices.to_vec(),
            updates: updates.to_vec(),
            index_vector_dim: ivd,
            update_window_dims: window,
            inserted_window_dims: inserted,
            scatter_dims_to_operand_dims: map,
        })
    }
}

/// Scatters `upd` (of `s.updates`) into `out`, a copy of `x` (of `s.operand`), at
/// the index vectors of `idx` (of `s.indices`): each update element combines with
/// its target by `c` (`None`: replaces it), in row-major order of the updates.
/// Update elements whose target lies outside the operand are skipped.
pub fn scatter<T: HloElem, I: IndexElem>(s: &ScatterDims, c: Option<Combine>, x: &[T], idx: &[I], upd: &[T], out: &mut [T]) {
    let n = x.len().min(out.len());
    out[..n].copy_from_slice(&x[..n]);
    let r = s.operand.len();
    let (xs, is) = (strides(&s.operand), strides(&s.indices));
    let ivd_stride = is.get(s.index_vector_dim).copied().unwrap_or(0);
    // The operand dimension each update window dimension walks.
    let window_to_operand: Vec<usize> = (0..r).filter(|d| !s.inserted_window_dims.contains(d)).collect();
    let mut at = vec![0usize; s.updates.len()];
    let mut target = vec![0i64; r];
    for &u in upd.iter().take(s.updates.iter().product()) {
        let batch = (0..at.len()).filter(|d| !s.update_window_dims.contains(d)).map(|d| at[d]);
        let base = index_base(batch, s.index_vector_dim, &is);
        target.fill(0);
        for (j, &d) in s.scatter_dims_to_operand_dims.iter().enumerate() {
            target[d] = idx.get(base + j * ivd_stride).map_or(0, |v| v.value());
        }
        for (k, &ud) in s.update_window_dims.iter().enumerate() {
            target[window_to_operand[k]] += at[ud] as i64;
        }
        let inside = target.iter().zip(&s.operand).all(|(&t, &d)| t >= 0 && (t as u64) < d as u64);
        if inside {
            let flat: usize = target.iter().zip(&xs).map(|(&t, &st)| t as usize * st).sum();
            if let Some(o) = out.get_mut(flat) {
                *o = match c {
                    None => u,
                    Some(c) => o.combine(c, u),
                };
            }
        }
        if !next(&mut at, &s.updates) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    /// Every index of `shape`, row-major.
    fn all(shape: &[usize]) -> Vec<Vec<usize>> {
        let mut v = vec![vec![]];
        for &d in shape {
            v = v.into_iter().flat_map(|p: Vec<usize>| (0..d).map(move |i| [p.clone(), vec![i]].concat())).collect();
        }
        v
    }

    fn flat(i: &[usize], shape: &[usize]) -> usize {
        i.iter().zip(shape).fold(0, |a, (&i, &d)| a * d + i)
    }

    /// The index vector of the batch position `batch`, read as the definition says:
    /// the indices at `batch` with the whole index vector dimension in its place.
    fn vector(indices: &[i64], shape: &[usize], ivd: usize, batch: &[usize]) -> Vec<i64> {
        if ivd == shape.len() {
            return vec![indices[flat(batch, shape)]];
        }
        (0..shape[ivd])
            .map(|k| {
                let mut at = batch.to_vec();
                at.insert(ivd, k);
                indices[flat(&at, shape)]
            })
            .collect()
    }

    /// Random dimension numbers: an operand, the dims its index vectors start, and
    /// the indices' batch shape with the index vector dimension placed in it.
    fn layout(rng: &mut Rng) -> (Vec<usize>, Vec<usize>, Vec<usize>, usize) {
        let rank = rng.size(0, 3);
        let operand: Vec<usize> = (0..rank).map(|_| rng.size(1, 4)).collect();
        let mut map: Vec<usize> = (0..rank).filter(|_| rng.one_in(2)).collect();
        map.reverse();
        let mut indices: Vec<usize> = (0..rng.size(0, 2)).map(|_| rng.size(1, 3)).collect();
        let ivd = if map.len() == 1 && rng.one_in(2) {
            indices.len()
        } else {
            let at = rng.size(0, indices.len());
            indices.insert(at, map.len());
            at
        };
        (operand, map, indices, ivd)
    }

    #[test]
    fn gather_matches_the_definition() {
        let mut rng = Rng::new(14);
        for _ in 0..400 {
            let (operand, map, indices, ivd) = layout(&mut rng);
            let r = operand.len();
            let collapsed: Vec<usize> = (0..r).filter(|_| rng.one_in(2)).collect();
            let sizes: Vec<usize> = (0..r).map(|d| if collapsed.contains(&d) { 1 } else { rng.size(0, operand[d]) }).collect();
            let batch = indices.len() - usize::from(ivd < indices.len());
            let out_rank = batch + r - collapsed.len();
            let mut offsets: Vec<usize> = (0..out_rank).collect();
            while offsets.len() > r - collapsed.len() {
                offsets.remove(rng.size(0, offsets.len() - 1));
            }
            let i64s = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
            let g = GatherDims::new(&operand, &indices, &i64s(&offsets), &i64s(&collapsed), &i64s(&map), ivd as i64, &i64s(&sizes)).expect("valid");
            let x: Vec<i32> = (0..operand.iter().product::<usize>() as i32).collect();
            let idx: Vec<i64> = rng.ints(indices.iter().product(), -3, 6);
            let mut out = vec![-1; g.output.iter().product()];
            gather(&g, &x, &idx, &mut out);
            // The definition: batch and offset parts of each output index, the
            // start clamped, the offset expanded around the collapsed dimensions.
            let kept: Vec<usize> = (0..r).filter(|d| !collapsed.contains(d)).collect();
            for at in all(&g.output) {
                let b: Vec<usize> = (0..out_rank).filter(|d| !offsets.contains(d)).map(|d| at[d]).collect();
                let v = vector(&idx, &indices, ivd, &b);
                let mut full = vec![0i64; r];
                for (k, &d) in map.iter().enumerate() {
                    full[d] = v[k];
                }
                let mut src = vec![0usize; r];
                for d in 0..r {
                    src[d] = full[d].clamp(0, (operand[d] - sizes[d]) as i64) as usize;
                }
                for (k, &od) in offsets.iter().enumerate() {
                    src[kept[k]] += at[od];
                }
                assert_eq!(out[flat(&at, &g.output)], x[flat(&src, &operand)], "{g:?} at {at:?}");
            }
        }
    }

    #[test]
    fn scatter_matches_the_definition() {
        let mut rng = Rng::new(15);
        for case in 0..400 {
            let (operand, map, indices, ivd) = layout(&mut rng);
            let r = operand.len();
            let inserted: Vec<usize> = (0..r).filter(|_| rng.one_in(2)).collect();
            let window: Vec<usize> = (0..r).filter(|d| !inserted.contains(d)).map(|d| rng.size(0, operand[d])).collect();
            let batch: Vec<usize> = (0..indices.len()).filter(|&d| d != ivd).map(|d| indices[d]).collect();
            let mut updates = batch.clone();
            let mut window_dims = vec![];
            for &w in &window {
                let at = rng.size(window_dims.last().map_or(0, |&p: &usize| p + 1), updates.len());
                updates.insert(at, w);
                window_dims.push(at);
            }
            let i64s = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
            let s = ScatterDims::new(&operand, &indices, &updates, &i64s(&window_dims), &i64s(&inserted), &i64s(&map), ivd as i64).expect("valid");
            let x: Vec<i32> = (0..operand.iter().product::<usize>() as i32).collect();
            let idx: Vec<i32> = rng.ints(indices.iter().product(), -2, 5).into_iter().map(|v| v as i32).collect();
            let upd: Vec<i32> = rng.ints(updates.iter().product(), -50, 50).into_iter().map(|v| v as i32).collect();
            let c = [None, Some(Combine::Add), Some(Combine::Mul), Some(Combine::Max), Some(Combine::Min)][case % 5];
            let mut out = vec![0; x.len()];
            scatter(&s, c, &x, &idx, &upd, &mut out);
            let mut want = x.clone();
            let idx64: Vec<i64> = idx.iter().map(|&v| i64::from(v)).collect();
            let spanned: Vec<usize> = (0..r).filter(|d| !inserted.contains(d)).collect();
            for at in all(&updates) {
                let b: Vec<usize> = (0..updates.len()).filter(|d| !window_dims.contains(d)).map(|d| at[d]).collect();
                let v = vector(&idx64, &indices, ivd, &b);
                let mut t = vec![0i64; r];
                for (k, &d) in map.iter().enumerate() {
                    t[d] = v[k];
                }
                for (k, &ud) in window_dims.iter().enumerate() {
                    t[spanned[k]] += at[ud] as i64;
                }
                if t.iter().zip(&operand).any(|(&t, &d)| t < 0 || t >= d as i64) {
                    continue;
                }
                let f = flat(&t.iter().map(|&t| t as usize).collect::<Vec<_>>(), &operand);
                let u = upd[flat(&at, &updates)];
                want[f] = match c {
                    None => u,
                    Some(Combine::Add) => want[f].wrapping_add(u),
                    Some(Combine::Mul) => want[f].wrapping_mul(u),
                    Some(Combine::Max) => want[f].max(u),
                    _ => want[f].min(u),
                };
            }
            assert_eq!(out, want, "{s:?} {c:?}");
        }
    }

    /// Options that break the definition's constraints are refused by name.
    #[test]
    fn bad_dimension_numbers_are_refused() {
        let g = |o: &[i64], c: &[i64], m: &[i64], ivd: i64, s: &[i64]| GatherDims::new(&[4, 3], &[2, 1], o, c, m, ivd, s);
        assert!(g(&[1], &[0], &[0], 1, &[1, 3]).is_ok());
        assert!(g(&[1], &[0], &[0], 3, &[1, 3]).is_err_and(|e| e.contains("index_vector_dim")));
        assert!(g(&[1], &[0], &[0], 1, &[1, 4]).is_err_and(|e| e.contains("slice_sizes")));
        assert!(g(&[1], &[0, 0], &[0], 1, &[1, 1]).is_err_and(|e| e.contains("repeats")));
        assert!(g(&[1], &[0], &[2], 1, &[1, 3]).is_err_and(|e| e.contains("not a dimension")));
        assert!(g(&[1], &[0], &[0], 1, &[2, 3]).is_err_and(|e| e.contains("collapsed")));
        assert!(g(&[1], &[0], &[0, 1], 1, &[1, 3]).is_err_and(|e| e.contains("start_index_map")));
        assert!(g(&[5], &[0], &[0], 1, &[1, 3]).is_err_and(|e| e.contains("offset_dims")));
        assert!(g(&[1], &[0], &[0], 1, &[1, i64::MAX]).is_err());
        let s = |w: &[i64], i: &[i64], m: &[i64], u: &[usize]| ScatterDims::new(&[4, 3], &[2, 1], u, w, i, m, 1);
        assert!(s(&[1], &[0], &[0], &[2, 3]).is_ok());
        assert!(s(&[1], &[0], &[0], &[2, 4]).is_err_and(|e| e.contains("exceeds")));
        assert!(s(&[1], &[0], &[0], &[3, 3]).is_err_and(|e| e.contains("batch")));
        assert!(s(&[1], &[], &[0], &[2, 3]).is_err());
        assert!(s(&[1], &[0], &[1, 0], &[2, 3]).is_err());
        assert!(s(&[2], &[0], &[0], &[2, 3]).is_err_and(|e| e.contains("not a dimension")));
    }

    /// tf.gather's lowering: rows of a matrix, out-of-range rows clamped.
    #[test]
    fn gather_rows_clamps() {
        let g = GatherDims::new(&[3, 2], &[3, 1], &[1], &[0], &[0], 1, &[1, 2]).expect("valid");
        assert_eq!(g.output, vec![3, 2]);
        let mut out = [0.0f32; 6];
        gather(&g, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2i32, -4, 9], &mut out);
        assert_eq!(out, [5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
    }
}
