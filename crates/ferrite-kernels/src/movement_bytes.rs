//! Data movement on raw bytes, for any element type of `width` bytes: transpose,
//! strided slice, reverse and tile.
//!
//! The generic kernels of [`crate::movement`] compile once per element size; the
//! CPU backend's builders ran them for 1-, 2-, 4- and 8-byte elements, four
//! copies of every loop and of every closure around it (issue 16, library size).
//! These take the width at run time instead. Whole runs of elements move with one
//! `copy_from_slice`; where elements are not adjacent (a transpose's inner loop, a
//! slice with a step, a reversed innermost axis) [`copy_strided`] moves them one at
//! a time with a fixed-size copy per supported width, so the per-element cost is
//! the load and store the typed loop had.

use crate::strides;

/// Copies `dst.len() / width` elements of `width` bytes: element `k` comes from
/// `src[start + k * step..][..width]` (`step` in bytes, negative walks backwards).
/// The caller keeps every source element inside `src` (slicing panics otherwise).
pub fn copy_strided(src: &[u8], start: usize, step: isize, width: usize, dst: &mut [u8]) {
    if step == width as isize {
        dst.copy_from_slice(&src[start..start + dst.len()]);
        return;
    }
    // One loop per width with a constant-size copy: a single load and store per
    // element, as the typed kernels had, instead of a memcpy call.
    fn each<const W: usize>(src: &[u8], start: usize, step: isize, dst: &mut [u8]) {
        let mut s = start as isize;
        for d in dst.chunks_exact_mut(W) {
            let at = s as usize;
            d.copy_from_slice(&src[at..at + W]);
            s += step;
        }
    }
    match width {
        1 => each::<1>(src, start, step, dst),
        2 => each::<2>(src, start, step, dst),
        4 => each::<4>(src, start, step, dst),
        8 => each::<8>(src, start, step, dst),
        _ => {
            let mut s = start as isize;
            for d in dst.chunks_exact_mut(width.max(1)) {
                let at = s as usize;
                d.copy_from_slice(&src[at..at + width]);
                s += step;
            }
        }
    }
}

/// Advances the row-major counter `idx` over `shape` (the dims to count), last
/// dim fastest.
#[inline]
fn next(idx: &mut [usize], shape: &[usize]) {
    for d in (0..shape.len()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return;
        }
        idx[d] = 0;
    }
}

/// The same permutation on fewer dims: dims of size 1 dropped, and input dims
/// that stay adjacent and in order in the output merged into one. Returns the
/// input shape and permutation of that form and its rank (0 when nothing but a
/// copy is left).
fn simplify(in_shape: &[usize], perm: &[usize]) -> ([usize; crate::MAX_DIMS], [usize; crate::MAX_DIMS], usize) {
    // Output order of the input dims other than those of size 1.
    let mut order = [0usize; crate::MAX_DIMS];
    let mut n = 0;
    for &p in perm {
        if in_shape[p] != 1 {
            order[n] = p;
            n += 1;
        }
    }
    // Runs of consecutive input dims in output order: each becomes one dim, of
    // the runs' product size, placed in the input by its first dim (`head`).
    let mut size = [1usize; crate::MAX_DIMS];
    let mut head = [0usize; crate::MAX_DIMS];
    let mut runs = 0;
    for i in 0..n {
        // A dim continues the previous run when it follows it in the input,
        // skipping dims of size 1 (dropped) in between.
        let cont = i > 0 && (order[i - 1] + 1..order[i]).all(|d| in_shape[d] == 1) && order[i] > order[i - 1];
        if !cont {
            head[runs] = order[i];
            runs += 1;
        }
        size[runs - 1] *= in_shape[order[i]];
    }
    // Input order of the runs: by their first dim; the output takes them in run order.
    let mut shape = [0usize; crate::MAX_DIMS];
    let mut new_perm = [0usize; crate::MAX_DIMS];
    for r in 0..runs {
        let rank = (0..runs).filter(|&q| head[q] < head[r]).count();
        shape[rank] = size[r];
        new_perm[r] = rank;
    }
    (shape, new_perm, if runs <= 1 { 0 } else { runs })
}

/// Permutes dimensions: `out` dim `i` is input dim `perm[i]` (elements of `width` bytes).
/// Dims of size 1 are dropped and dims that stay together merged first, so a
/// permutation that only moves dims of size 1 is one copy, and the innermost
/// loop runs over as many elements as it can.
pub fn transpose(input: &[u8], in_shape: &[usize], perm: &[usize], width: usize, out: &mut [u8]) {
    let r = in_shape.len();
    if r == 0 || out.is_empty() {
        out.copy_from_slice(&input[..out.len()]);
        return;
    }
    let (shape, p, rank) = simplify(in_shape, perm);
    if rank == 0 {
        out.copy_from_slice(&input[..out.len()]);
        return;
    }
    if rank < r {
        return transpose(input, &shape[..rank], &p[..rank], width, out);
    }
    // A swap of the two innermost dims (with any batch dims outside): by tiles,
    // which read and write whole short runs instead of one element per strided
    // load (a spectrogram's [frames, bins] <-> [bins, frames] turns, issue 13).
    if r >= 2 && perm[r - 2] == r - 1 && perm[r - 1] == r - 2 && (0..r - 2).all(|d| perm[d] == d) {
        let (rows, cols) = (in_shape[r - 2], in_shape[r - 1]);
        let plane = rows * cols * width;
        if plane > 0 {
            for (src, dst) in input.chunks_exact(plane).zip(out.chunks_exact_mut(plane)) {
                match width {
                    1 => swap_inner::<1>(src, rows, cols, dst),
                    2 => swap_inner::<2>(src, rows, cols, dst),
                    4 => swap_inner4(src, rows, cols, dst),
                    8 => swap_inner::<8>(src, rows, cols, dst),
                    _ => break,
                }
            }
            if matches!(width, 1 | 2 | 4 | 8) {
                return;
            }
        }
    }
    let in_st = strides(in_shape);
    let mut out_shape = [0usize; crate::MAX_DIMS];
    let mut src_st = [0usize; crate::MAX_DIMS];
    for (d, &p) in perm.iter().enumerate() {
        out_shape[d] = in_shape[p];
        src_st[d] = in_st[p];
    }
    let row = out_shape[r - 1] * width;
    if row == 0 {
        return;
    }
    let step = (src_st[r - 1] * width) as isize;
    let mut idx = [0usize; crate::MAX_DIMS];
    for dst in out.chunks_exact_mut(row) {
        let base: usize = (0..r - 1).map(|d| idx[d] * src_st[d]).sum();
        copy_strided(input, base * width, step, width, dst);
        next(&mut idx[..r - 1], &out_shape[..r - 1]);
    }
}

/// Side of the square tiles of [`swap_inner`]: 8 rows of 8 elements, so a tile of
/// 4-byte elements is one 256-bit register per row.
const TILE: usize = 8;

/// [`swap_inner`] for 4-byte elements: with AVX2 the whole tiles go through
/// eight 256-bit registers and three rounds of shuffles (the portable tile still
/// moved each element by itself, about 6 instructions apiece).
fn swap_inner4(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if crate::level::has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 (checked just above, with FMA, so the
        // capped levels of the tests pick the portable tile).
        return unsafe { swap_inner4_avx2(src, rows, cols, dst) };
    }
    swap_inner::<4>(src, rows, cols, dst)
}

/// The tiles of [`swap_inner4`] with AVX2; edges as [`swap_inner`] does them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn swap_inner4_avx2(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) {
    use std::arch::x86_64::*;
    let (full_r, full_c) = (rows / TILE * TILE, cols / TILE * TILE);
    assert!(src.len() >= rows * cols * 4 && dst.len() >= rows * cols * 4);
    for i0 in (0..full_r).step_by(TILE) {
        for j0 in (0..full_c).step_by(TILE) {
            // SAFETY: rows i0..i0+8 and columns j0..j0+8 lie inside the [rows, cols]
            // source and, turned, inside the [cols, rows] destination (both sizes
            // asserted above); unaligned loads and stores.
            unsafe {
                let sp = src.as_ptr().add((i0 * cols + j0) * 4) as *const f32;
                let r: [__m256; TILE] = std::array::from_fn(|i| _mm256_loadu_ps(sp.add(i * cols)));
                let a0 = _mm256_unpacklo_ps(r[0], r[1]);
                let a1 = _mm256_unpackhi_ps(r[0], r[1]);
                let a2 = _mm256_unpacklo_ps(r[2], r[3]);
                let a3 = _mm256_unpackhi_ps(r[2], r[3]);
                let a4 = _mm256_unpacklo_ps(r[4], r[5]);
                let a5 = _mm256_unpackhi_ps(r[4], r[5]);
                let a6 = _mm256_unpacklo_ps(r[6], r[7]);
                let a7 = _mm256_unpackhi_ps(r[6], r[7]);
                let b0 = _mm256_shuffle_ps::<0x44>(a0, a2);
                let b1 = _mm256_shuffle_ps::<0xEE>(a0, a2);
                let b2 = _mm256_shuffle_ps::<0x44>(a1, a3);
                let b3 = _mm256_shuffle_ps::<0xEE>(a1, a3);
                let b4 = _mm256_shuffle_ps::<0x44>(a4, a6);
                let b5 = _mm256_shuffle_ps::<0xEE>(a4, a6);
                let b6 = _mm256_shuffle_ps::<0x44>(a5, a7);
                let b7 = _mm256_shuffle_ps::<0xEE>(a5, a7);
                let c = [
                    _mm256_permute2f128_ps::<0x20>(b0, b4),
                    _mm256_permute2f128_ps::<0x20>(b1, b5),
                    _mm256_permute2f128_ps::<0x20>(b2, b6),
                    _mm256_permute2f128_ps::<0x20>(b3, b7),
                    _mm256_permute2f128_ps::<0x31>(b0, b4),
                    _mm256_permute2f128_ps::<0x31>(b1, b5),
                    _mm256_permute2f128_ps::<0x31>(b2, b6),
                    _mm256_permute2f128_ps::<0x31>(b3, b7),
                ];
                let dp = dst.as_mut_ptr().add((j0 * rows + i0) * 4) as *mut f32;
                for (j, v) in c.iter().enumerate() {
                    _mm256_storeu_ps(dp.add(j * rows), *v);
                }
            }
        }
    }
    swap_edges::<4>(src, rows, cols, full_r, full_c, dst);
}

/// Writes the `[cols, rows]` transpose of the row-major `[rows, cols]` matrix
/// `src` (elements of `W` bytes) into `dst`: whole 8x8 tiles through a local
/// block, the ragged right and bottom edges element by element.
#[inline(always)]
fn swap_inner<const W: usize>(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) {
    let (full_r, full_c) = (rows / TILE * TILE, cols / TILE * TILE);
    let mut i0 = 0;
    while i0 < full_r {
        let mut j0 = 0;
        while j0 < full_c {
            let mut t = [[[0u8; W]; TILE]; TILE];
            for (i, row) in t.iter_mut().enumerate() {
                let s = &src[((i0 + i) * cols + j0) * W..][..TILE * W];
                for (e, v) in row.iter_mut().zip(s.chunks_exact(W)) {
                    e.copy_from_slice(v);
                }
            }
            for j in 0..TILE {
                let d = &mut dst[((j0 + j) * rows + i0) * W..][..TILE * W];
                for (i, v) in d.chunks_exact_mut(W).enumerate() {
                    v.copy_from_slice(&t[i][j]);
                }
            }
            j0 += TILE;
        }
        i0 += TILE;
    }
    swap_edges::<W>(src, rows, cols, full_r, full_c, dst);
}

/// The elements [`swap_inner`] leaves outside whole tiles: columns past
/// `full_c` for the tiled rows, then every column of rows past `full_r`.
#[inline(always)]
fn swap_edges<const W: usize>(src: &[u8], rows: usize, cols: usize, full_r: usize, full_c: usize, dst: &mut [u8]) {
    let edge = |i: usize, j: usize, dst: &mut [u8]| {
        dst[(j * rows + i) * W..][..W].copy_from_slice(&src[(i * cols + j) * W..][..W]);
    };
    for i in 0..full_r {
        for j in full_c..cols {
            edge(i, j, dst);
        }
    }
    for i in full_r..rows {
        for j in 0..cols {
            edge(i, j, dst);
        }
    }
}

/// Copies elements `begin[d] + i * stride[d]` (stride may be negative) for the
/// output shape `out_shape`; the caller has validated every index.
pub fn strided_slice(input: &[u8], in_shape: &[usize], begin: &[i64], stride: &[i64], out_shape: &[usize], width: usize, out: &mut [u8]) {
    let r = in_shape.len();
    if out.is_empty() {
        return;
    }
    if r == 0 {
        out[..width].copy_from_slice(&input[..width]);
        return;
    }
    let st = strides(in_shape);
    // The trailing dims taken whole, plus the dim before them, form rows: the
    // row's elements are adjacent when that dim steps by 1 (one copy), else they
    // are `stride` apart (copied one by one).
    let mut inner = r;
    while inner > 0 && begin[inner - 1] == 0 && stride[inner - 1] == 1 && out_shape[inner - 1] == in_shape[inner - 1] {
        inner -= 1;
    }
    // `outer` dims are counted; each output row is `row_elems` elements made of
    // blocks of `block` adjacent elements, `step` elements apart in the input
    // (adjacent when the row's dim steps by 1: then the row is one run).
    let (outer, row_elems, block, step) = if inner == 0 {
        (0, out_shape.iter().product::<usize>(), 0, 0)
    } else {
        let od = inner - 1;
        let block: usize = out_shape[inner..].iter().product();
        (od, out_shape[od] * block, block, stride[od] * st[od] as i64)
    };
    let contiguous = inner == 0 || stride[inner - 1] == 1;
    if row_elems == 0 {
        return;
    }
    let row_start: i64 = (outer..r).map(|d| begin[d] * st[d] as i64).sum();
    let mut idx = [0usize; crate::MAX_DIMS];
    for dst in out.chunks_exact_mut(row_elems * width) {
        let mut src = row_start;
        for d in 0..outer {
            src += (begin[d] + idx[d] as i64 * stride[d]) * st[d] as i64;
        }
        let src = src as usize * width;
        if contiguous {
            dst.copy_from_slice(&input[src..src + dst.len()]);
        } else if block == 1 {
            copy_strided(input, src, step as isize * width as isize, width, dst);
        } else {
            let bytes = block * width;
            let mut s = src as isize;
            for d in dst.chunks_exact_mut(bytes) {
                let at = s as usize;
                d.copy_from_slice(&input[at..at + bytes]);
                s += step as isize * width as isize;
            }
        }
        next(&mut idx[..outer], &out_shape[..outer]);
    }
}

/// One contiguous piece of a data-movement op, resolved at prepare: `len` bytes
/// of input `input` from byte `src` go to the output at byte `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRun {
    /// Which of the op's inputs the bytes come from.
    pub input: usize,
    /// Byte offset in that input.
    pub src: usize,
    /// Byte offset in the output.
    pub dst: usize,
    /// Bytes.
    pub len: usize,
}

/// A list of copy runs kept short: adjacent pieces (the next one continuing both
/// the source and the destination of the last) merge into one, and pushing more
/// than `max` runs gives up (`None`), so a small op's copy list stays a handful of
/// `memcpy` calls and a large one keeps its general loop.
struct Runs {
    runs: Vec<CopyRun>,
    max: usize,
}

impl Runs {
    fn push(&mut self, r: CopyRun) -> Option<()> {
        if r.len == 0 {
            return Some(());
        }
        if let Some(last) = self.runs.last_mut() {
            if last.input == r.input && last.src + last.len == r.src && last.dst + last.len == r.dst {
                last.len += r.len;
                return Some(());
            }
        }
        if self.runs.len() == self.max {
            return None;
        }
        self.runs.push(r);
        Some(())
    }
}

/// The copies [`strided_slice`] makes, as at most `max` runs (`None` when there
/// would be more): small slices, such as a streaming model's state shifted by one
/// frame, then cost a few copies per run instead of the general loop's set-up.
/// Every run lies inside the input (`in_shape` elements of `width` bytes) and the
/// output (`out_shape`), for a `begin` / `stride` that [`strided_slice`] accepts.
pub fn strided_slice_runs(in_shape: &[usize], begin: &[i64], stride: &[i64], out_shape: &[usize], width: usize, max: usize) -> Option<Vec<CopyRun>> {
    let r = in_shape.len();
    if r > crate::MAX_DIMS || begin.len() != r || stride.len() != r || out_shape.len() != r {
        return None;
    }
    let total: usize = out_shape.iter().product();
    let mut runs = Runs { runs: Vec::new(), max };
    if total == 0 {
        return Some(runs.runs);
    }
    if r == 0 {
        runs.push(CopyRun { input: 0, src: 0, dst: 0, len: width })?;
        return Some(runs.runs);
    }
    let st = strides(in_shape);
    // The pieces `strided_slice` copies: rows of the trailing dims taken whole
    // (plus the dim before them) when that dim steps by 1, else blocks of the
    // whole trailing dims, one per step. Counted before they are listed, so a
    // large slice gives up without walking its elements.
    let mut inner = r;
    while inner > 0 && begin[inner - 1] == 0 && stride[inner - 1] == 1 && out_shape[inner - 1] == in_shape[inner - 1] {
        inner -= 1;
    }
    let contiguous = inner == 0 || stride[inner - 1] == 1;
    let counted = if contiguous { inner.saturating_sub(1) } else { inner };
    let piece: usize = out_shape[counted..].iter().product();
    if total / piece > max {
        return None;
    }
    let mut idx = [0usize; crate::MAX_DIMS];
    for k in 0..total / piece {
        let mut src: i64 = 0;
        for d in 0..r {
            let i = if d < counted { idx[d] as i64 } else { 0 };
            src += (begin[d] + i * stride[d]) * st[d] as i64;
        }
        let src = usize::try_from(src).ok()?;
        runs.push(CopyRun { input: 0, src: src * width, dst: k * piece * width, len: piece * width })?;
        next(&mut idx[..counted], &out_shape[..counted]);
    }
    Some(runs.runs)
}

/// The copies of a concatenation along `axis` of inputs with the given shapes
/// (in bytes: each shape ends with the element width), as at most `max` runs.
pub fn concat_runs(shapes: &[&[usize]], axis: usize, max: usize) -> Option<Vec<CopyRun>> {
    let s0 = shapes.first()?;
    if axis >= s0.len() {
        return None;
    }
    let outer: usize = s0[..axis].iter().product();
    let chunks: Vec<usize> = shapes.iter().map(|s| Some(s.get(axis..)?.iter().product())).collect::<Option<_>>()?;
    let mut runs = Runs { runs: Vec::new(), max };
    // Counted before they are listed, so that a huge outer extent (a hostile
    // model's dims) gives up or collapses at once instead of walking it. Empty
    // inputs add no run. Two or more non-empty inputs alternate in the output, so
    // no run merges with the one before it: there are `outer` times as many runs
    // as such inputs. A single non-empty input is one contiguous copy.
    let live: Vec<usize> = (0..chunks.len()).filter(|&i| chunks[i] > 0).collect();
    match live[..] {
        [] => return Some(runs.runs),
        [i] => {
            runs.push(CopyRun { input: i, src: 0, dst: 0, len: outer.checked_mul(chunks[i])? })?;
            return Some(runs.runs);
        }
        _ => match outer.checked_mul(live.len()) {
            Some(n) if n <= max => {}
            _ => return None,
        },
    }
    let mut o = 0;
    for k in 0..outer {
        for &i in &live {
            let chunk = chunks[i];
            runs.push(CopyRun { input: i, src: k * chunk, dst: o, len: chunk })?;
            o += chunk;
        }
    }
    Some(runs.runs)
}

/// Makes the copies `runs` list into `out`, reading input `i` from `inputs[i]`;
/// false (after copying the runs before it) when a run does not fit its buffers
/// or names an input that is missing. Not generic (the inputs are the executor's
/// views as they are): it compiles here, at this crate's optimization level, and
/// not in the runtime crate, which the shipped library optimizes for size.
pub fn copy_runs(runs: &[CopyRun], inputs: &[Option<&[u8]>], out: &mut [u8]) -> bool {
    for r in runs {
        let src = inputs.get(r.input).copied().flatten().and_then(|x| x.get(r.src..r.src.checked_add(r.len)?));
        let dst = out.get_mut(r.dst..r.dst.wrapping_add(r.len));
        match (src, dst) {
            (Some(s), Some(d)) if r.dst.checked_add(r.len).is_some() => d.copy_from_slice(s),
            _ => return false,
        }
    }
    true
}

/// Reverses the dimensions marked in `flip` (one flag per dimension of `shape`):
/// `out[i0, .., ik, ..] = input[i0, .., n_k - 1 - ik, ..]` for every flipped `k`.
pub fn reverse(input: &[u8], shape: &[usize], flip: &[bool], width: usize, out: &mut [u8]) {
    let r = shape.len().min(flip.len());
    let Some(last) = flip[..r].iter().rposition(|&f| f) else {
        out.copy_from_slice(&input[..out.len()]);
        return;
    };
    // Dims after the last flipped one keep their order: one block each.
    let block = shape[last + 1..r].iter().product::<usize>() * width;
    let st = strides(&shape[..=last]);
    let n_last = shape[last];
    let row = n_last * block;
    if row == 0 {
        return;
    }
    // Rows along the last flipped dim, read backwards.
    let mut idx = [0usize; crate::MAX_DIMS];
    for dst in out.chunks_exact_mut(row) {
        let src: usize = (0..last).map(|d| if flip[d] { shape[d] - 1 - idx[d] } else { idx[d] } * st[d]).sum();
        let start = (src + n_last - 1) * block;
        if block == width {
            copy_strided(input, start, -(width as isize), width, dst);
        } else {
            for (k, d) in dst.chunks_exact_mut(block).enumerate() {
                let at = start - k * block;
                d.copy_from_slice(&input[at..at + block]);
            }
        }
        next(&mut idx[..last], &shape[..last]);
    }
}

/// Repeats the input `multiples[d]` times along each dimension.
pub fn tile(input: &[u8], shape: &[usize], multiples: &[usize], width: usize, out: &mut [u8]) {
    let r = shape.len();
    if r == 0 {
        out.copy_from_slice(&input[..out.len()]);
        return;
    }
    let mut out_shape = [0usize; crate::MAX_DIMS];
    for (d, (&s, &m)) in shape.iter().zip(multiples).enumerate() {
        out_shape[d] = s * m;
    }
    let st = strides(shape);
    // Each output row (the last dim) is the input row repeated.
    let in_row = shape[r - 1] * width;
    let row = in_row * multiples[r - 1];
    if row == 0 {
        return;
    }
    let mut idx = [0usize; crate::MAX_DIMS];
    for dst in out.chunks_exact_mut(row) {
        let src = (0..r - 1).map(|d| (idx[d] % shape[d]) * st[d]).sum::<usize>() * width;
        for d in dst.chunks_exact_mut(in_row) {
            d.copy_from_slice(&input[src..src + in_row]);
        }
        next(&mut idx[..r - 1], &out_shape[..r - 1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::movement;

    /// Little-endian bytes of `v`.
    fn bytes(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Distinct values per element, so a misplaced byte shows.
    fn data(n: usize) -> Vec<u32> {
        (0..n as u32).map(|i| i.wrapping_mul(0x0101_0101).wrapping_add(0x0302_0100)).collect()
    }

    /// Each shape/perm against the typed kernel, for 4-byte elements and for
    /// 1-byte ones (the u32 data's low bytes).
    /// Permutations the simplification changes: dims of size 1 moved (a copy),
    /// dims that stay adjacent merged (around a size-1 dim too), and a few random
    /// ones of rank 2-6 with sizes 1-3.
    fn transpose_shapes() -> Vec<(Vec<usize>, Vec<usize>)> {
        let mut v = vec![
            (vec![1, 1, 16], vec![0, 2, 1]),
            (vec![1, 1, 7, 1], vec![0, 1, 3, 2]),
            (vec![1, 5, 7], vec![0, 2, 1]),
            (vec![2, 3, 4, 5], vec![0, 3, 1, 2]),
            (vec![2, 3, 1, 4, 5], vec![3, 4, 0, 1, 2]),
            (vec![4, 1, 3, 2], vec![2, 3, 1, 0]),
            (vec![1], vec![0]),
            // Inner swaps with whole tiles, ragged edges and a batch dim.
            (vec![17, 23], vec![1, 0]),
            (vec![16, 8], vec![1, 0]),
            (vec![3, 9, 26], vec![0, 2, 1]),
            (vec![2, 7, 1, 33], vec![0, 3, 2, 1]),
        ];
        let mut next = crate::testutil::xorshift(0x9e37_79b9);
        for _ in 0..60 {
            let r = 2 + next(5);
            let shape: Vec<usize> = (0..r).map(|_| 1 + next(3)).collect();
            let mut perm: Vec<usize> = (0..r).collect();
            for i in (1..r).rev() {
                perm.swap(i, next(i + 1));
            }
            v.push((shape, perm));
        }
        v
    }

    #[test]
    fn transpose_matches_typed() {
        crate::level::each(|_| transpose_cases());
    }

    fn transpose_cases() {
        for (shape, perm) in
            [(vec![2, 3, 4], vec![2, 0, 1]), (vec![2, 3, 4], vec![0, 1, 2]), (vec![5, 1, 3], vec![1, 2, 0]), (vec![3, 4], vec![1, 0]), (vec![7], vec![0])]
                .into_iter()
                .chain(transpose_shapes())
        {
            let x = data(shape.iter().product());
            let mut want = vec![0u32; x.len()];
            movement::transpose(&x, &shape, &perm, &mut want);
            let mut got = vec![0u8; x.len() * 4];
            transpose(&bytes(&x), &shape, &perm, 4, &mut got);
            assert_eq!(got, bytes(&want), "{shape:?} {perm:?}");
            let x8: Vec<u8> = x.iter().map(|&v| v as u8).collect();
            let mut want8 = vec![0u8; x8.len()];
            movement::transpose(&x8, &shape, &perm, &mut want8);
            let mut got8 = vec![0u8; x8.len()];
            transpose(&x8, &shape, &perm, 1, &mut got8);
            assert_eq!(got8, want8, "{shape:?} {perm:?} bytes");
        }
    }

    #[test]
    fn strided_slice_matches_typed() {
        // (shape, begin, stride, out_shape): unit steps, a stepped innermost dim,
        // negative steps, a stepped outer dim with whole inner dims.
        type Case = (Vec<usize>, Vec<i64>, Vec<i64>, Vec<usize>);
        let cases: Vec<Case> = vec![
            (vec![4, 5, 6], vec![1, 0, 0], vec![1, 1, 1], vec![2, 5, 6]),
            (vec![4, 5, 6], vec![0, 1, 2], vec![1, 1, 1], vec![4, 3, 4]),
            (vec![4, 5, 6], vec![0, 0, 1], vec![1, 2, 2], vec![4, 3, 3]),
            (vec![4, 5, 6], vec![3, 4, 5], vec![-1, -2, -1], vec![4, 3, 6]),
            (vec![4, 5, 6], vec![0, 4, 0], vec![2, -1, 1], vec![2, 5, 6]),
            (vec![6], vec![5], vec![-2], vec![3]),
            (vec![2, 3], vec![0, 0], vec![1, 1], vec![2, 3]),
        ];
        for (shape, begin, stride, out_shape) in cases {
            let x = data(shape.iter().product());
            let n: usize = out_shape.iter().product();
            let mut want = vec![0u32; n];
            movement::strided_slice(&x, &shape, &begin, &stride, &out_shape, &mut want);
            let mut got = vec![0u8; n * 4];
            strided_slice(&bytes(&x), &shape, &begin, &stride, &out_shape, 4, &mut got);
            assert_eq!(got, bytes(&want), "{shape:?} {begin:?} {stride:?}");
        }
    }

    /// Random slices (unit and stepped dims, negative steps, whole and partial
    /// dims, empty outputs, widths 1, 2 and 4): where the copy runs exist, making
    /// them gives what `strided_slice` writes.
    #[test]
    fn strided_slice_runs_match_the_loop() {
        let mut rng = crate::testutil::Rng::new(7);
        let mut listed = 0;
        for case in 0..3000 {
            let r = rng.size(1, 5);
            let shape: Vec<usize> = (0..r).map(|_| rng.size(1, 6)).collect();
            let (mut begin, mut stride, mut out_shape) = (vec![], vec![], vec![]);
            for &n in &shape {
                let (b, s, m) = match rng.size(0, 4) {
                    // The whole dim, as a streaming state's inner dims.
                    0 | 1 => (0, 1, n),
                    2 => {
                        let b = rng.size(0, n - 1);
                        (b as i64, 1, rng.size(0, n - b))
                    }
                    3 => {
                        let s = rng.size(2, 3);
                        let b = rng.size(0, n - 1);
                        (b as i64, s as i64, (n - b).div_ceil(s))
                    }
                    _ => {
                        let s = rng.size(1, 2) as i64;
                        let b = rng.size(0, n - 1);
                        (b as i64, -s, (b + 1).div_ceil(s as usize))
                    }
                };
                begin.push(b);
                stride.push(s);
                out_shape.push(m);
            }
            let width = [1, 2, 4][case % 3];
            let x: Vec<u8> = (0..shape.iter().product::<usize>() * width).map(|i| (i * 7 + 3) as u8).collect();
            let n = out_shape.iter().product::<usize>() * width;
            let mut want = vec![0u8; n];
            strided_slice(&x, &shape, &begin, &stride, &out_shape, width, &mut want);
            let max = rng.size(1, 12);
            if let Some(runs) = strided_slice_runs(&shape, &begin, &stride, &out_shape, width, max) {
                assert!(runs.len() <= max);
                let mut got = vec![0u8; n];
                assert!(copy_runs(&runs, &[Some(&x[..])], &mut got));
                assert_eq!(got, want, "{shape:?} {begin:?} {stride:?} {out_shape:?} w{width}");
                listed += 1;
            }
        }
        // Most cases are small enough to list: the comparison ran.
        assert!(listed > 1000, "{listed}");
    }

    /// Random concatenations along each axis against the loop, and runs that do
    /// not fit their buffers refused rather than copied out of bounds.
    #[test]
    fn concat_runs_match_the_loop() {
        let mut rng = crate::testutil::Rng::new(11);
        for _ in 0..1000 {
            let r = rng.size(1, 4);
            let axis = rng.size(0, r - 1);
            let base: Vec<usize> = (0..r).map(|_| rng.size(1, 4)).collect();
            let width = rng.size(1, 4);
            let shapes: Vec<Vec<usize>> = (0..rng.size(1, 4))
                .map(|_| {
                    let mut s = base.clone();
                    s[axis] = rng.size(0, 3);
                    s.push(width);
                    s
                })
                .collect();
            let data: Vec<Vec<u8>> =
                shapes.iter().enumerate().map(|(i, s)| (0..s.iter().product::<usize>()).map(|k| (k * 5 + i * 31) as u8).collect()).collect();
            let parts: Vec<(&[u8], &[usize])> = data.iter().zip(&shapes).map(|(d, s)| (&d[..], &s[..])).collect();
            let n: usize = data.iter().map(Vec::len).sum();
            let mut want = vec![0u8; n];
            crate::movement::concat(&parts, axis, &mut want);
            let refs: Vec<&[usize]> = shapes.iter().map(|s| &s[..]).collect();
            if let Some(runs) = concat_runs(&refs, axis, 16) {
                assert!(runs.len() <= 16);
                let ins: Vec<Option<&[u8]>> = data.iter().map(|d| Some(&d[..])).collect();
                let mut got = vec![0u8; n];
                assert!(copy_runs(&runs, &ins, &mut got));
                assert_eq!(got, want, "{shapes:?} axis {axis}");
                if n > 0 {
                    assert!(!copy_runs(&runs, &ins, &mut vec![0u8; n - 1]));
                }
            }
        }
    }

    /// Fuzz seed 16110: a concatenation with an outer extent of 2^30 walked every
    /// outer index while its runs merged into one. Now counted first: one run for a
    /// single non-empty input, none (the general loop) past `max`.
    #[test]
    fn concat_runs_of_huge_outer_extents() {
        let big: &[usize] = &[1 << 30, 4, 255, 4];
        let empty: &[usize] = &[1 << 30, 0, 255, 4];
        let t = std::time::Instant::now();
        let one = concat_runs(&[big], 1, 16).unwrap();
        assert_eq!(one, vec![CopyRun { input: 0, src: 0, dst: 0, len: (1 << 30) * 4 * 255 * 4 }]);
        let with_empty = concat_runs(&[empty, big, empty], 1, 16).unwrap();
        assert_eq!(with_empty, vec![CopyRun { input: 1, src: 0, dst: 0, len: (1 << 30) * 4 * 255 * 4 }]);
        assert_eq!(concat_runs(&[big, big], 1, 16), None);
        assert_eq!(concat_runs(&[&[usize::MAX, 2, 2], &[usize::MAX, 2, 2]], 1, 16), None);
        assert_eq!(concat_runs(&[&[usize::MAX, 2, 2]], 1, 16), None);
        assert_eq!(concat_runs(&[empty, empty], 1, 16), Some(vec![]));
        assert!(t.elapsed().as_millis() < 100, "{:?}", t.elapsed());
    }

    #[test]
    fn reverse_and_tile_match_typed() {
        for (shape, flip) in
            [(vec![2, 3, 4], vec![true, false, true]), (vec![2, 3, 4], vec![false, true, false]), (vec![5], vec![true]), (vec![2, 3], vec![false, false])]
        {
            let x = data(shape.iter().product());
            let mut want = vec![0u32; x.len()];
            movement::reverse(&x, &shape, &flip, &mut want);
            let mut got = vec![0u8; x.len() * 4];
            reverse(&bytes(&x), &shape, &flip, 4, &mut got);
            assert_eq!(got, bytes(&want), "{shape:?} {flip:?}");
        }
        for (shape, mult) in [(vec![2, 3], vec![2, 3]), (vec![1, 3, 1], vec![4, 1, 2]), (vec![3], vec![3])] {
            let x = data(shape.iter().product());
            let n: usize = shape.iter().zip(&mult).map(|(a, b)| a * b).product();
            let mut want = vec![0u32; n];
            movement::tile(&x, &shape, &mult, &mut want);
            let mut got = vec![0u8; n * 4];
            tile(&bytes(&x), &shape, &mult, 4, &mut got);
            assert_eq!(got, bytes(&want), "{shape:?} {mult:?}");
        }
    }
}
