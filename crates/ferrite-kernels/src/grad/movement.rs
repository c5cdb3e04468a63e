//! Gradients of the data-movement ops: PAD, CONCATENATION, TRANSPOSE,
//! STRIDED_SLICE and GATHER (into its params). All but GATHER move each element
//! of `dy` to one place (or drop it); GATHER adds up the rows of repeated
//! indices, in index order.

use super::split::for_rows;
use crate::parallel::ThreadPool;
use crate::{strides, MAX_DIMS};

/// Backward pass of PAD ([`crate::movement::pad`]): `dx` (the input's shape
/// `in_shape`) is the unpadded part of `dy`. False, writing nothing, on bad shapes.
pub fn pad_backward(dy: &[f32], in_shape: &[usize], pads: &[(usize, usize)], dx: &mut [f32]) -> bool {
    let r = in_shape.len();
    if r > MAX_DIMS || pads.len() != r {
        return false;
    }
    let (mut padded, mut begin, stride) = ([0usize; MAX_DIMS], [0i64; MAX_DIMS], [1i64; MAX_DIMS]);
    for d in 0..r {
        padded[d] = in_shape[d] + pads[d].0 + pads[d].1;
        begin[d] = pads[d].0 as i64;
    }
    if !crate::holds(dy.len(), &padded[..r]) || !crate::holds(dx.len(), in_shape) {
        return false;
    }
    let n = crate::numel(in_shape);
    crate::movement::strided_slice(dy, &padded[..r], &begin[..r], &stride[..r], in_shape, &mut dx[..n]);
    true
}

/// Backward pass of CONCATENATION for one input: the input of shape `in_shape`
/// sits at `offset` along `axis` of the output (`out_shape`); writes its part of
/// `dy` to `dx`. False, writing nothing, on inconsistent shapes.
pub fn concat_backward(dy: &[f32], out_shape: &[usize], axis: usize, offset: usize, in_shape: &[usize], dx: &mut [f32]) -> bool {
    if axis >= out_shape.len()
        || in_shape.len() != out_shape.len()
        || offset + in_shape[axis] > out_shape[axis]
        || !crate::holds(dy.len(), out_shape)
        || !crate::holds(dx.len(), in_shape)
    {
        return false;
    }
    let outer: usize = out_shape[..axis].iter().product();
    let inner: usize = out_shape[axis + 1..].iter().product();
    let (chunk_in, chunk_out) = (in_shape[axis] * inner, out_shape[axis] * inner);
    for k in 0..outer {
        dx[k * chunk_in..(k + 1) * chunk_in].copy_from_slice(&dy[k * chunk_out + offset * inner..][..chunk_in]);
    }
    true
}

/// Backward pass of TRANSPOSE by `perm` of an input of shape `in_shape`: `dx`
/// is `dy` transposed back. False, writing nothing, if `perm` is no permutation.
pub fn transpose_backward(dy: &[f32], in_shape: &[usize], perm: &[usize], dx: &mut [f32]) -> bool {
    let r = in_shape.len();
    if r > MAX_DIMS || perm.len() != r || !crate::holds(dx.len(), in_shape) || !crate::holds(dy.len(), in_shape) {
        return false;
    }
    let (mut inverse, mut out_shape, mut seen) = ([0usize; MAX_DIMS], [0usize; MAX_DIMS], [false; MAX_DIMS]);
    for (i, &p) in perm.iter().enumerate() {
        if p >= r || seen[p] {
            return false;
        }
        seen[p] = true;
        inverse[p] = i;
        out_shape[i] = in_shape[p];
    }
    let n = crate::numel(in_shape);
    crate::movement::transpose(&dy[..n], &out_shape[..r], &inverse[..r], &mut dx[..n]);
    true
}

/// Backward pass of STRIDED_SLICE (and SLICE) in the resolved form the forward
/// kernel [`crate::movement::strided_slice`] takes: per input dimension a begin,
/// a stride (may be negative) and the number taken (`sizes`; the masks, ellipsis,
/// new and shrunk axes only reshape this). `dx` is zero except where the slice
/// read. False, writing nothing, if an index falls outside the input.
pub fn strided_slice_backward(dy: &[f32], in_shape: &[usize], begin: &[i64], stride: &[i64], sizes: &[usize], dx: &mut [f32]) -> bool {
    let r = in_shape.len();
    if r > MAX_DIMS || begin.len() != r || stride.len() != r || sizes.len() != r || !crate::holds(dx.len(), in_shape) || !crate::holds(dy.len(), sizes) {
        return false;
    }
    // Every element read lies inside the input (the first and last of each dim).
    for d in 0..r {
        let last = begin[d] + (sizes[d] as i64 - 1) * stride[d];
        if sizes[d] > 0 && (begin[d] < 0 || begin[d] >= in_shape[d] as i64 || last < 0 || last >= in_shape[d] as i64) {
            return false;
        }
    }
    let n = crate::numel(in_shape);
    dx[..n].fill(0.0);
    let total = crate::numel(sizes);
    if total == 0 {
        return true;
    }
    let st = strides(in_shape);
    let mut idx = [0usize; MAX_DIMS];
    for &v in &dy[..total] {
        let src: i64 = (0..r).map(|d| (begin[d] + idx[d] as i64 * stride[d]) * st[d] as i64).sum();
        dx[src as usize] = v;
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    true
}

/// Backward pass of GATHER into its params ([`crate::movement::gather`] with
/// the same arguments): `dparams` (the params' shape `shape`) is zero but for the
/// gathered rows, where the rows of `dy` add up (repeated indices accumulate, in
/// index order). Threads take disjoint (batch, outer) blocks of the params.
/// Returns the first index outside `0..shape[axis]` as an error, writing nothing;
/// `Ok(false)` if a shape is inconsistent.
#[allow(clippy::too_many_arguments)]
pub fn gather_backward<I: Copy + Into<i64> + Sync>(
    shape: &[usize],
    indices: &[I],
    n_indices_per_batch: usize,
    axis: usize,
    batch_dims: usize,
    dy: &[f32],
    dparams: &mut [f32],
    pool: Option<&ThreadPool>,
) -> Result<bool, i64> {
    if axis >= shape.len() || batch_dims > axis || !crate::holds(dparams.len(), shape) {
        return Ok(false);
    }
    let batch: usize = shape[..batch_dims].iter().product();
    let outer: usize = shape[batch_dims..axis].iter().product();
    let axis_len = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    if indices.len() < batch * n_indices_per_batch || !crate::holds(dy.len(), &[batch, outer, n_indices_per_batch, inner]) {
        return Ok(false);
    }
    if let Some(&bad) = indices[..batch * n_indices_per_batch].iter().find(|&&i| !(0..axis_len as i64).contains(&i.into())) {
        return Err(bad.into());
    }
    for_rows(pool, dparams, batch * outer, axis_len * inner, 1, &|_, blocks, out| {
        out.fill(0.0);
        for (bk, dst) in blocks.zip(out.chunks_exact_mut((axis_len * inner).max(1))) {
            let b = bk / outer.max(1);
            for (j, &ix) in indices[b * n_indices_per_batch..(b + 1) * n_indices_per_batch].iter().enumerate() {
                let row = &mut dst[ix.into() as usize * inner..][..inner];
                for (a, &v) in row.iter_mut().zip(&dy[(bk * n_indices_per_batch + j) * inner..][..inner]) {
                    *a += v;
                }
            }
        }
    });
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grad::check::{assert_grad, bits_equal_across_threads, Rng};

    fn shape(rng: &mut Rng, rank: usize) -> Vec<usize> {
        (0..rank).map(|_| rng.size(1, 5)).collect()
    }

    #[test]
    fn pad_concat_transpose_match_finite_differences() {
        let mut rng = Rng::new(41);
        for case in 0..20 {
            let rank = rng.size(1, 4);
            let s = shape(&mut rng, rank);
            let x = rng.vec(crate::numel(&s));
            let what = format!("case {case}: {s:?}");
            // PAD
            let pads: Vec<(usize, usize)> = (0..rank).map(|_| (rng.size(0, 2), rng.size(0, 2))).collect();
            let padded: Vec<usize> = s.iter().zip(&pads).map(|(&d, &(a, b))| d + a + b).collect();
            let dy = rng.vec(crate::numel(&padded));
            let mut dx = vec![f32::NAN; x.len()];
            assert!(pad_backward(&dy, &s, &pads, &mut dx));
            assert_grad(
                &what,
                &x,
                &dx,
                &dy,
                |x| {
                    let mut y = vec![0.0; dy.len()];
                    crate::movement::pad(x, &s, &pads, 0.5, &mut y);
                    y
                },
                true,
            );
            // TRANSPOSE
            let mut perm: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                perm.swap(i, rng.size(0, i));
            }
            let dy = rng.vec(x.len());
            assert!(transpose_backward(&dy, &s, &perm, &mut dx));
            assert_grad(
                &what,
                &x,
                &dx,
                &dy,
                |x| {
                    let mut y = vec![0.0; dy.len()];
                    crate::movement::transpose(x, &s, &perm, &mut y);
                    y
                },
                true,
            );
            // CONCATENATION of x with another tensor on one side.
            let axis = rng.size(0, rank - 1);
            let mut other = s.clone();
            other[axis] = rng.size(1, 3);
            let o = rng.vec(crate::numel(&other));
            let x_first = rng.size(0, 1) == 1;
            let mut out = s.clone();
            out[axis] += other[axis];
            let dy = rng.vec(crate::numel(&out));
            let offset = if x_first { 0 } else { other[axis] };
            assert!(concat_backward(&dy, &out, axis, offset, &s, &mut dx));
            assert_grad(
                &what,
                &x,
                &dx,
                &dy,
                |x| {
                    let mut y = vec![0.0; dy.len()];
                    let parts: [(&[f32], &[usize]); 2] = if x_first { [(x, &s), (&o, &other)] } else { [(&o, &other), (x, &s)] };
                    crate::movement::concat(&parts, axis, &mut y);
                    y
                },
                true,
            );
        }
    }

    #[test]
    fn strided_slice_matches_finite_differences() {
        let mut rng = Rng::new(42);
        for case in 0..30 {
            let rank = rng.size(1, 4);
            let s: Vec<usize> = (0..rank).map(|_| rng.size(1, 7)).collect();
            let (mut begin, mut stride, mut sizes) = (vec![], vec![], vec![]);
            for &d in &s {
                let st = [1i64, 2, 3, -1, -2][rng.size(0, 4)];
                let b = rng.size(0, d - 1) as i64;
                // How many fit from b in the stride's direction.
                let room = if st > 0 { (d as i64 - b + st - 1) / st } else { (b + 1 + (-st) - 1) / (-st) };
                sizes.push(rng.size(0, room as usize));
                begin.push(b);
                stride.push(st);
            }
            let x = rng.vec(crate::numel(&s));
            let dy = rng.vec(crate::numel(&sizes));
            let mut dx = vec![f32::NAN; x.len()];
            assert!(strided_slice_backward(&dy, &s, &begin, &stride, &sizes, &mut dx));
            assert_grad(
                &format!("case {case}: {s:?} {begin:?} {stride:?} {sizes:?}"),
                &x,
                &dx,
                &dy,
                |x| {
                    let mut y = vec![0.0; dy.len()];
                    crate::movement::strided_slice(x, &s, &begin, &stride, &sizes, &mut y);
                    y
                },
                true,
            );
        }
        // A slice reading outside the input is refused.
        assert!(!strided_slice_backward(&[0.0; 3], &[4], &[2], &[1], &[3], &mut [0.0; 4]));
    }

    #[test]
    fn gather_scatter_adds_and_matches_finite_differences() {
        let mut rng = Rng::new(43);
        for case in 0..20 {
            let rank = rng.size(1, 4);
            let s = shape(&mut rng, rank);
            let axis = rng.size(0, rank - 1);
            let batch_dims = rng.size(0, axis);
            let batch: usize = s[..batch_dims].iter().product();
            let per = rng.size(1, 6);
            // Indices repeat often (per batch more indices than rows, sometimes).
            let idx: Vec<i32> = (0..batch * per).map(|_| rng.size(0, s[axis] - 1) as i32).collect();
            let outer: usize = s[batch_dims..axis].iter().product();
            let inner: usize = s[axis + 1..].iter().product();
            let x = rng.vec(crate::numel(&s));
            let dy = rng.vec(batch * outer * per * inner);
            let got = bits_equal_across_threads(|t| {
                let mut dx = vec![f32::NAN; x.len()];
                assert_eq!(gather_backward(&s, &idx, per, axis, batch_dims, &dy, &mut dx, Some(&ThreadPool::new(t))), Ok(true));
                vec![dx]
            });
            assert_grad(
                &format!("case {case}: {s:?} axis {axis} batch_dims {batch_dims}"),
                &x,
                &got[0],
                &dy,
                |x| {
                    let mut y = vec![0.0; dy.len()];
                    crate::movement::gather(x, &s, &idx, per, axis, batch_dims, &mut y).unwrap();
                    y
                },
                true,
            );
        }
        let mut d = [7.0; 3];
        assert_eq!(gather_backward(&[3], &[0i32, 3], 2, 0, 0, &[1.0, 1.0], &mut d, None), Err(3));
        assert_eq!(d, [7.0; 3], "nothing written on a bad index");
        assert_eq!(gather_backward(&[3], &[2i64, 2], 2, 0, 0, &[1.0, 2.5], &mut d, None), Ok(true));
        assert_eq!(d, [0.0, 0.0, 3.5]);
    }
}
