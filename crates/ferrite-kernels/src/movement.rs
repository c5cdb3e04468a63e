//! Data movement, generic over the element type: transpose, pad, concat,
//! slices, gather, tile, depth/space rearrangements.

use crate::strides;

/// Permutes dimensions: `out` dim `i` is input dim `perm[i]`.
pub fn transpose<T: Copy>(input: &[T], in_shape: &[usize], perm: &[usize], out: &mut [T]) {
    let r = in_shape.len();
    if r == 0 || out.is_empty() {
        out.copy_from_slice(&input[..out.len()]);
        return;
    }
    let in_st = strides(in_shape);
    let mut out_shape = [0usize; crate::MAX_DIMS];
    let mut src_st = [0usize; crate::MAX_DIMS];
    for (d, &p) in perm.iter().enumerate() {
        out_shape[d] = in_shape[p];
        src_st[d] = in_st[p];
    }
    let mut idx = [0usize; crate::MAX_DIMS];
    let inner = out_shape[r - 1];
    let inner_st = src_st[r - 1];
    let mut o = 0;
    while o < out.len() {
        let base: usize = (0..r - 1).map(|d| idx[d] * src_st[d]).sum();
        for k in 0..inner {
            out[o + k] = input[base + k * inner_st];
        }
        o += inner;
        for d in (0..r - 1).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Pads each dimension with `pads[d] = (before, after)` copies of `value`.
/// Dims from the last padded one inward are contiguous in input and output, so
/// each such span is one copy (a whole image row for spatial padding of NHWC).
pub fn pad<T: Copy>(input: &[T], in_shape: &[usize], pads: &[(usize, usize)], value: T, out: &mut [T]) {
    let r = in_shape.len();
    if input.is_empty() {
        out.fill(value);
        return;
    }
    if r == 0 {
        out[0] = input[0];
        return;
    }
    let mut out_shape = [0usize; crate::MAX_DIMS];
    for (d, (&s, &(b, a))) in in_shape.iter().zip(pads).enumerate() {
        out_shape[d] = s + b + a;
    }
    let ost = strides(&out_shape[..r]);
    // Innermost dims without padding, plus the last padded dim itself, copy as one span.
    let lp = (0..r).rev().find(|&d| pads[d] != (0, 0)).unwrap_or(0);
    let inner: usize = in_shape[lp..].iter().product();
    if inner == 0 {
        out.fill(value);
        return;
    }
    // Only the padding needs the fill value when spans cover the rest; fill all for simplicity
    // when padding is present, since spans are written right after.
    out.fill(value);
    let mut idx = [0usize; crate::MAX_DIMS];
    let mut i = 0;
    while i < input.len() {
        let mut o = pads[lp].0 * ost[lp];
        for d in 0..lp {
            o += (idx[d] + pads[d].0) * ost[d];
        }
        out[o..o + inner].copy_from_slice(&input[i..i + inner]);
        i += inner;
        for d in (0..lp).rev() {
            idx[d] += 1;
            if idx[d] < in_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Concatenates inputs (data, shape) along `axis`.
pub fn concat<T: Copy>(inputs: &[(&[T], &[usize])], axis: usize, out: &mut [T]) {
    let Some((_, s0)) = inputs.first() else { return };
    let outer: usize = s0[..axis].iter().product();
    let mut o = 0;
    for k in 0..outer {
        for (data, shape) in inputs {
            let chunk: usize = shape[axis..].iter().product();
            out[o..o + chunk].copy_from_slice(&data[k * chunk..(k + 1) * chunk]);
            o += chunk;
        }
    }
}

/// Copies elements `begin[d] + i * stride[d]` (stride may be negative) for the
/// output shape `out_shape`; the caller has validated every index.
pub fn strided_slice<T: Copy>(input: &[T], in_shape: &[usize], begin: &[i64], stride: &[i64], out_shape: &[usize], out: &mut [T]) {
    let r = in_shape.len();
    if out.is_empty() {
        return;
    }
    if r == 0 {
        out[0] = input[0];
        return;
    }
    let st = strides(in_shape);
    let mut idx = [0usize; crate::MAX_DIMS];
    for o in out.iter_mut() {
        let mut src = 0i64;
        for d in 0..r {
            src += (begin[d] + idx[d] as i64 * stride[d]) * st[d] as i64;
        }
        *o = input[src as usize];
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Gather along `axis` with `batch_dims` leading batch dimensions. Returns the
/// first index outside `0..shape[axis]` as an error (output then incomplete).
pub fn gather<T: Copy, I: Copy + Into<i64>>(
    params: &[T],
    shape: &[usize],
    indices: &[I],
    n_indices_per_batch: usize,
    axis: usize,
    batch_dims: usize,
    out: &mut [T],
) -> Result<(), i64> {
    let batch: usize = shape[..batch_dims].iter().product();
    let outer: usize = shape[batch_dims..axis].iter().product();
    let axis_len = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut o = 0;
    for b in 0..batch {
        for k in 0..outer {
            for &ix in &indices[b * n_indices_per_batch..(b + 1) * n_indices_per_batch] {
                let ix: i64 = ix.into();
                if ix < 0 || ix as usize >= axis_len {
                    return Err(ix);
                }
                let src = ((b * outer + k) * axis_len + ix as usize) * inner;
                out[o..o + inner].copy_from_slice(&params[src..src + inner]);
                o += inner;
            }
        }
    }
    Ok(())
}

/// Repeats the input `multiples[d]` times along each dimension.
pub fn tile<T: Copy>(input: &[T], shape: &[usize], multiples: &[usize], out: &mut [T]) {
    let r = shape.len();
    if r == 0 {
        out.copy_from_slice(input);
        return;
    }
    let mut out_shape = [0usize; crate::MAX_DIMS];
    for (d, (&s, &m)) in shape.iter().zip(multiples).enumerate() {
        out_shape[d] = s * m;
    }
    let st = strides(shape);
    let mut idx = [0usize; crate::MAX_DIMS];
    for o in out.iter_mut() {
        let src: usize = (0..r).map(|d| (idx[d] % shape[d]) * st[d]).sum();
        *o = input[src];
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// DEPTH_TO_SPACE (DCR order, as TFLite): [n, h, w, c*b*b] -> [n, h*b, w*b, c].
pub fn depth_to_space<T: Copy>(input: &[T], n: usize, h: usize, w: usize, c_in: usize, block: usize, out: &mut [T]) {
    let c_out = c_in / (block * block);
    for b in 0..n {
        for y in 0..h * block {
            for x in 0..w * block {
                let (iy, ix) = (y / block, x / block);
                let off = ((y % block) * block + (x % block)) * c_out;
                let src = ((b * h + iy) * w + ix) * c_in + off;
                let dst = ((b * h * block + y) * w * block + x) * c_out;
                out[dst..dst + c_out].copy_from_slice(&input[src..src + c_out]);
            }
        }
    }
}

/// SPACE_TO_DEPTH: [n, h, w, c] -> [n, h/b, w/b, c*b*b].
pub fn space_to_depth<T: Copy>(input: &[T], n: usize, h: usize, w: usize, c: usize, block: usize, out: &mut [T]) {
    let (oh, ow, oc) = (h / block, w / block, c * block * block);
    for b in 0..n {
        for y in 0..h {
            for x in 0..w {
                let off = ((y % block) * block + (x % block)) * c;
                let dst = ((b * oh + y / block) * ow + x / block) * oc + off;
                let src = ((b * h + y) * w + x) * c;
                out[dst..dst + c].copy_from_slice(&input[src..src + c]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_2d() {
        let mut o = [0; 6];
        transpose(&[1, 2, 3, 4, 5, 6], &[2, 3], &[1, 0], &mut o);
        assert_eq!(o, [1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn pad_and_slice_roundtrip() {
        let x = [1, 2, 3, 4];
        let mut p = [0; 16];
        pad(&x, &[2, 2], &[(1, 1), (1, 1)], 0, &mut p);
        let mut back = [0; 4];
        strided_slice(&p, &[4, 4], &[1, 1], &[1, 1], &[2, 2], &mut back);
        assert_eq!(back, x);
    }

    #[test]
    fn depth_space_roundtrip() {
        let x: Vec<u8> = (0..32).collect();
        let mut d = vec![0; 32];
        let mut back = vec![0; 32];
        depth_to_space(&x, 1, 2, 2, 8, 2, &mut d);
        space_to_depth(&d, 1, 4, 4, 2, 2, &mut back);
        assert_eq!(back, x);
    }
}
