//! Data movement, generic over the element type: transpose, pad, concat,
//! slices, gather, tile, reverse, depth/space rearrangements.

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

/// The element sizes PAD runs on (the runtime views any type as the unsigned
/// integer of its size), each with its [`pad`] compiled in this crate: a generic
/// function compiles in the crate that instantiates it, and the runtime crate is
/// optimized for size in the shipped library (`dist` profile), where the fill and
/// copy loops lose their unrolling and vector stores.
pub trait PadWord: Copy {
    /// [`pad`] for this element size.
    fn pad(input: &[Self], in_shape: &[usize], pads: &[(usize, usize)], value: Self, out: &mut [Self]);
}

macro_rules! pad_words {
    ($($t:ty),*) => {$(
        impl PadWord for $t {
            // Never inlined into a caller: the loops keep this crate's optimization level.
            #[inline(never)]
            fn pad(input: &[Self], in_shape: &[usize], pads: &[(usize, usize)], value: Self, out: &mut [Self]) {
                pad(input, in_shape, pads, value, out)
            }
        }
    )*};
}
pad_words!(u8, u16, u32, u64);

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
    // The trailing dims taken whole, plus the dim before them if it steps by 1,
    // form contiguous runs: copy those with one memcpy each.
    let mut inner = r;
    while inner > 0 && begin[inner - 1] == 0 && stride[inner - 1] == 1 && out_shape[inner - 1] == in_shape[inner - 1] {
        inner -= 1;
    }
    if inner > 0 && stride[inner - 1] == 1 {
        inner -= 1;
    }
    let run: usize = out_shape[inner..].iter().product();
    let run_start: i64 = (inner..r).map(|d| begin[d] * st[d] as i64).sum();
    if run == 0 {
        return;
    }
    let mut idx = [0usize; crate::MAX_DIMS];
    for chunk in out.chunks_exact_mut(run) {
        let mut src = run_start;
        for d in 0..inner {
            src += (begin[d] + idx[d] as i64 * stride[d]) * st[d] as i64;
        }
        let src = src as usize;
        chunk.copy_from_slice(&input[src..src + run]);
        for d in (0..inner).rev() {
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

/// Reverses the dimensions marked in `flip` (one flag per dimension of `shape`):
/// `out[i0, .., ik, ..] = input[i0, .., n_k - 1 - ik, ..]` for every flipped `k`.
/// The run of trailing dimensions that are not flipped is moved as one block.
pub fn reverse<T: Copy>(input: &[T], shape: &[usize], flip: &[bool], out: &mut [T]) {
    let r = shape.len().min(flip.len());
    // Dimensions after the last flipped one are contiguous and keep their order.
    let last = flip[..r].iter().rposition(|&f| f);
    let Some(last) = last else {
        out.copy_from_slice(&input[..out.len()]);
        return;
    };
    let block: usize = shape[last + 1..r].iter().product();
    let st = strides(&shape[..=last]);
    let outer: usize = shape[..=last].iter().product();
    let mut idx = [0usize; crate::MAX_DIMS];
    for o in 0..outer {
        let src: usize = (0..=last).map(|d| if flip[d] { shape[d] - 1 - idx[d] } else { idx[d] } * st[d]).sum();
        out[o * block..(o + 1) * block].copy_from_slice(&input[src * block..(src + 1) * block]);
        for d in (0..=last).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// REVERSE_SEQUENCE: along `seq_dim`, the first `lengths[b]` elements of each
/// slice are reversed, where `b` is the slice's coordinate along `batch_dim`; the
/// elements past the length keep their place. Fails with the first length that
/// is negative or longer than `shape[seq_dim]` (then `out` is partly written).
pub fn reverse_sequence<T: Copy, I: Copy + Into<i64>>(
    input: &[T],
    shape: &[usize],
    seq_dim: usize,
    batch_dim: usize,
    lengths: &[I],
    out: &mut [T],
) -> Result<(), i64> {
    if let Some(&bad) = lengths.iter().find(|&&l| !(0..=shape[seq_dim] as i64).contains(&l.into())) {
        return Err(bad.into());
    }
    let st = strides(shape);
    let mut result = Ok(());
    for_each_coord(shape, |e, c| {
        let len = lengths.get(c[batch_dim]).map_or(0, |&l| l.into() as usize);
        let k = c[seq_dim];
        let src = if k < len { e - k * st[seq_dim] + (len - 1 - k) * st[seq_dim] } else { e };
        match input.get(src) {
            Some(&v) => out[e] = v,
            None => result = Err(-1),
        }
    });
    result
}

/// Visits every coordinate of `shape` in row-major order.
fn for_each_coord(shape: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let n: usize = shape.iter().product();
    let mut c = vec![0usize; shape.len()];
    for e in 0..n {
        f(e, &c);
        for d in (0..shape.len()).rev() {
            c[d] += 1;
            if c[d] < shape[d] {
                break;
            }
            c[d] = 0;
        }
    }
}

/// MIRROR_PAD: `input` (shape `shape`) padded with its own mirror image: REFLECT
/// (`symmetric` false) leaves out the edge element (`[a b c]` -> `b | a b c | b`),
/// SYMMETRIC repeats it (`a | a b c | c`). Requires each padding at most
/// `dim - 1` (REFLECT) or `dim` (SYMMETRIC), so one reflection reaches every element.
pub fn mirror_pad<T: Copy>(input: &[T], shape: &[usize], pads: &[(usize, usize)], symmetric: bool, out: &mut [T]) {
    let out_shape: Vec<usize> = shape.iter().zip(pads).map(|(&s, &(a, b))| s + a + b).collect();
    let mut src = vec![0usize; shape.len()];
    for_each_coord(&out_shape, |e, c| {
        for d in 0..shape.len() {
            let (n, j) = (shape[d] as isize, c[d] as isize - pads[d].0 as isize);
            let k = if j < 0 {
                -j - isize::from(symmetric)
            } else if j >= n {
                2 * n - 2 - j + isize::from(symmetric)
            } else {
                j
            };
            src[d] = k.clamp(0, n - 1) as usize;
        }
        let at = src.iter().zip(shape).fold(0, |a, (&i, &s)| a * s + i);
        out[e] = input[at];
    });
}

/// SPACE_TO_BATCH_ND: `input` `[b, s_1..s_m, rest..]` (shape `in_shape`), each
/// spatial dimension padded by `pad_before` (and after, up to `out_shape`) and cut
/// into `block[k]` interleaved parts that go to the batch: output batch
/// `(o_1..o_m) * b + n` (offsets row-major over `block`) at spatial `y_k` holds
/// input `n` at `y_k * block_k + o_k - pad_before_k`, or `value` in the padding.
pub fn space_to_batch<T: Copy>(input: &[T], in_shape: &[usize], block: &[usize], pad_before: &[usize], value: T, out_shape: &[usize], out: &mut [T]) {
    let (b, m) = (in_shape[0], block.len());
    let mut src = in_shape.to_vec();
    for_each_coord(out_shape, |e, c| {
        let (mut off, mut inside) = (c[0] / b, true);
        src[0] = c[0] % b;
        for k in (0..m).rev() {
            let o = off % block[k];
            off /= block[k];
            let p = (c[k + 1] * block[k] + o) as isize - pad_before[k] as isize;
            inside &= p >= 0 && (p as usize) < in_shape[k + 1];
            src[k + 1] = p.max(0) as usize;
        }
        src[m + 1..].copy_from_slice(&c[m + 1..]);
        out[e] = if inside { input[src.iter().zip(in_shape).fold(0, |a, (&i, &s)| a * s + i)] } else { value };
    });
}

/// BATCH_TO_SPACE_ND: the inverse of [`space_to_batch`] with crops for paddings:
/// output `[b, y_1..y_m, rest..]` holds input batch `(o_1..o_m) * b + n` at
/// spatial `(y_k + crop_before_k) / block_k`, where `o_k` is the remainder.
pub fn batch_to_space<T: Copy>(input: &[T], in_shape: &[usize], block: &[usize], crop_before: &[usize], out_shape: &[usize], out: &mut [T]) {
    let (b, m) = (out_shape[0], block.len());
    let mut src = in_shape.to_vec();
    for_each_coord(out_shape, |e, c| {
        let mut off = 0;
        for k in 0..m {
            let u = c[k + 1] + crop_before[k];
            off = off * block[k] + u % block[k];
            src[k + 1] = u / block[k];
        }
        src[0] = off * b + c[0];
        src[m + 1..].copy_from_slice(&c[m + 1..]);
        out[e] = input[src.iter().zip(in_shape).fold(0, |a, (&i, &s)| a * s + i)];
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `reverse_sequence` against its definition, with seq and batch dims in either
    /// order, lengths from 0 to the full dimension, and bad lengths refused.
    #[test]
    fn reverse_sequence_matches_definition() {
        let shape = [3usize, 4, 2, 5];
        let n: usize = shape.iter().product();
        let input: Vec<u32> = (0..n as u32).collect();
        for seq_dim in 0..4 {
            for batch_dim in (0..4).filter(|&b| b != seq_dim) {
                let lengths: Vec<i64> = (0..shape[batch_dim]).map(|b| ((b * 3 + seq_dim) % (shape[seq_dim] + 1)) as i64).collect();
                let mut out = vec![0u32; n];
                reverse_sequence(&input, &shape, seq_dim, batch_dim, &lengths, &mut out).unwrap();
                for (o, &v) in out.iter().enumerate() {
                    let mut c = [o / 40, o / 10 % 4, o / 5 % 2, o % 5];
                    let len = lengths[c[batch_dim]] as usize;
                    if c[seq_dim] < len {
                        c[seq_dim] = len - 1 - c[seq_dim];
                    }
                    assert_eq!(v as usize, ((c[0] * 4 + c[1]) * 2 + c[2]) * 5 + c[3], "seq {seq_dim} batch {batch_dim} at {o}");
                }
                let mut bad = lengths.clone();
                bad[0] = shape[seq_dim] as i64 + 1;
                assert_eq!(reverse_sequence(&input, &shape, seq_dim, batch_dim, &bad, &mut out), Err(bad[0]));
                bad[0] = -1;
                assert_eq!(reverse_sequence(&input, &shape, seq_dim, batch_dim, &bad, &mut out), Err(-1));
            }
        }
    }

    /// `reverse` against its definition, index by index, on every subset of axes.
    #[test]
    fn reverse_matches_definition() {
        let shape = [2usize, 3, 1, 4];
        let n: usize = shape.iter().product();
        let input: Vec<u32> = (0..n as u32).collect();
        for mask in 0u32..16 {
            let flip: Vec<bool> = (0..4).map(|d| mask >> d & 1 == 1).collect();
            let mut out = vec![0u32; n];
            reverse(&input, &shape, &flip, &mut out);
            for (o, &v) in out.iter().enumerate() {
                // Unflatten `o`, flip the marked coordinates, flatten again.
                let (mut rest, mut src, mut stride) = (o, 0, 1);
                let mut coords = [0usize; 4];
                for d in (0..4).rev() {
                    coords[d] = rest % shape[d];
                    rest /= shape[d];
                }
                for d in (0..4).rev() {
                    let c = if flip[d] { shape[d] - 1 - coords[d] } else { coords[d] };
                    src += c * stride;
                    stride *= shape[d];
                }
                assert_eq!(v, input[src], "mask {mask:04b} output {o}");
            }
        }
    }

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
    fn strided_slice_matches_per_element_indexing() {
        // Every begin/stride/size combination on a 3x4x5 tensor (strides -2..=2),
        // against the plain per-element definition.
        let shape = [3usize, 4, 5];
        let x: Vec<i32> = (0..60).collect();
        let mut cases = 0;
        for mask in 0..(5usize * 5 * 5) {
            let stride: Vec<i64> = [mask % 5, mask / 5 % 5, mask / 25].iter().map(|&v| v as i64 - 2).collect();
            if stride.contains(&0) {
                continue;
            }
            for b in 0..shape.iter().product::<usize>() {
                let begin = [(b / 20) as i64, (b / 5 % 4) as i64, (b % 5) as i64];
                // The longest run each dim allows from `begin` with its stride.
                let out_shape: Vec<usize> = (0..3)
                    .map(|d| if stride[d] > 0 { (shape[d] as i64 - begin[d] + stride[d] - 1) / stride[d] } else { (begin[d] + 1 + (-stride[d]) - 1) / -stride[d] } as usize)
                    .collect();
                let n: usize = out_shape.iter().product();
                let mut got = vec![-1; n];
                strided_slice(&x, &shape, &begin, &stride, &out_shape, &mut got);
                let mut want = Vec::with_capacity(n);
                for i in 0..out_shape[0] {
                    for j in 0..out_shape[1] {
                        for k in 0..out_shape[2] {
                            let idx = [i, j, k].iter().enumerate().map(|(d, &v)| (begin[d] + v as i64 * stride[d]) as usize).collect::<Vec<_>>();
                            want.push(x[(idx[0] * 4 + idx[1]) * 5 + idx[2]]);
                        }
                    }
                }
                assert_eq!(got, want, "begin {begin:?} stride {stride:?}");
                cases += 1;
            }
        }
        assert!(cases > 3000);
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

    #[test]
    fn mirror_pad_reflect_and_symmetric() {
        let x = [1, 2, 3];
        let mut o = [0; 7];
        mirror_pad(&x, &[3], &[(2, 2)], false, &mut o);
        assert_eq!(o, [3, 2, 1, 2, 3, 2, 1]);
        let mut o = [0; 9];
        mirror_pad(&x, &[3], &[(3, 3)], true, &mut o);
        assert_eq!(o, [3, 2, 1, 1, 2, 3, 3, 2, 1]);
        // 2-D: both dimensions mirrored.
        let mut o = [0; 12];
        mirror_pad(&[1, 2, 3, 4], &[2, 2], &[(1, 0), (1, 1)], true, &mut o);
        assert_eq!(o, [1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn space_to_batch_and_back() {
        // [1, 4, 4, 1] with block 2x2: four batches of the interleaved pixels.
        let x: Vec<i32> = (0..16).collect();
        let mut o = vec![0; 16];
        space_to_batch(&x, &[1, 4, 4, 1], &[2, 2], &[0, 0], -1, &[4, 2, 2, 1], &mut o);
        assert_eq!(o, [0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15]);
        let mut back = vec![0; 16];
        batch_to_space(&o, &[4, 2, 2, 1], &[2, 2], &[0, 0], &[1, 4, 4, 1], &mut back);
        assert_eq!(back, x);
        // Padding one before on a length-3 axis with block 2: [p 0 1 2] -> batches [p 1], [0 2].
        let mut o = vec![0; 4];
        space_to_batch(&[0, 1, 2], &[1, 3], &[2], &[1], 9, &[2, 2], &mut o);
        assert_eq!(o, [9, 1, 0, 2]);
        // Cropping it back.
        let mut back = vec![0; 3];
        batch_to_space(&o, &[2, 2], &[2], &[1], &[1, 3], &mut back);
        assert_eq!(back, [0, 1, 2]);
    }
}
