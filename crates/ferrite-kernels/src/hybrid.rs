//! Hybrid (dynamic-range) kernels, as LiteRT computes them: float activations
//! quantized to int8 row by row at run time, integer products with int8 weights,
//! and the sums rescaled to float by `row scale x weight scale`.

use crate::quant::{asymmetric_quantize, symmetric_quantize};
use crate::Clamp;

/// Quantizes `input` in rows of `row` floats into `q`: each row asymmetrically
/// (its scale and zero point into `row_scale`, `row_zp`) or symmetrically (its
/// scale; `row_zp` is left as it is, 0 for symmetric callers). One row per entry
/// of `row_scale`.
pub fn quantize_rows(input: &[f32], row: usize, asymmetric: bool, q: &mut [i8], row_scale: &mut [f32], row_zp: &mut [i32]) {
    for (b, (sf, zp)) in row_scale.iter_mut().zip(row_zp.iter_mut()).enumerate() {
        let (src, dst) = (&input[b * row..(b + 1) * row], &mut q[b * row..(b + 1) * row]);
        if asymmetric {
            (*sf, *zp) = asymmetric_quantize(src, dst);
        } else {
            *sf = symmetric_quantize(src, dst);
        }
    }
}

/// Sum of each row of `w` (rows of `in_n` weights): with them a fully-connected
/// sum over asymmetrically quantized inputs takes out the zero point's share.
pub fn row_sums(w: &[i8], in_n: usize) -> Vec<i32> {
    w.chunks_exact(in_n.max(1)).map(|r| r.iter().map(|&v| i32::from(v)).sum()).collect()
}

/// Hybrid fully-connected sums: `acc[b, o] = sum_i q[b, i] * w[o, i] - row_sums[o] *
/// row_zp[b]`, i.e. the sum over `q - row_zp` (`row_sums` empty: symmetric inputs).
#[allow(clippy::too_many_arguments)]
pub fn fully_connected_acc(q: &[i8], w: &[i8], batch: usize, in_n: usize, out_c: usize, row_sums: &[i32], row_zp: &[i32], acc: &mut [i32]) {
    for b in 0..batch {
        for o in 0..out_c {
            let wr = &w[o * in_n..(o + 1) * in_n];
            let dot: i32 = q[b * in_n..(b + 1) * in_n].iter().zip(wr).map(|(&a, &c)| i32::from(a) * i32::from(c)).sum();
            acc[b * out_c + o] = dot - row_sums.get(o).map_or(0, |&s| s * row_zp[b]);
        }
    }
}

/// The float outputs of hybrid sums: `clamp(bias[c] + acc * (row_scale[r] *
/// w_scale[c]))` for channel `c = i % out_c` and row `r = i / per_row` (one weight
/// scale, or one per channel).
#[allow(clippy::too_many_arguments)]
pub fn rescale(acc: &[i32], out_c: usize, per_row: usize, w_scales: &[f32], row_scale: &[f32], bias: Option<&[f32]>, clamp: Clamp, out: &mut [f32]) {
    for (i, (o, &a)) in out.iter_mut().zip(acc.iter()).enumerate() {
        let c = i % out_c;
        let ws = w_scales[if w_scales.len() == 1 { 0 } else { c }];
        let scale = row_scale[i / per_row] * ws;
        *o = clamp.apply(bias.map_or(0.0, |b| b[c]) + a as f32 * scale);
    }
}

/// Shapes and weight quantization of a hybrid BATCH_MATMUL (float left operand,
/// int8 right operand with zero points 0).
#[derive(Debug, Clone, PartialEq)]
pub struct HybridMatMul {
    /// Rows of each output matrix.
    pub m: usize,
    /// Inner (summed) dimension.
    pub k: usize,
    /// Columns of each output matrix.
    pub n: usize,
    /// The left matrices are stored transposed (`k x m`).
    pub adj_x: bool,
    /// The right matrices are stored transposed (`n x k`).
    pub adj_y: bool,
    /// Each left row quantized with its own zero point (else symmetrically).
    pub asymmetric: bool,
    /// Right operand scale: one, or one per output column.
    pub w_scales: Vec<f32>,
}

/// Run-time scratch of [`batch_matmul_hybrid`], sized once for `na` left and `nb`
/// right matrices.
#[derive(Debug, Clone)]
pub struct HybridMatMulScratch {
    /// Quantized rows of every left matrix.
    qa: Vec<i8>,
    /// Scale of each quantized row.
    row_scale: Vec<f32>,
    /// Zero point of each quantized row.
    row_zp: Vec<i32>,
    /// Column sums of every right matrix.
    col_sum: Vec<i32>,
    /// One left row gathered contiguously (for a transposed left operand).
    row: Vec<f32>,
}

impl HybridMatMulScratch {
    /// Scratch for `na` left matrices and `nb` right ones of `p`'s shapes.
    pub fn new(p: &HybridMatMul, na: usize, nb: usize) -> HybridMatMulScratch {
        HybridMatMulScratch {
            qa: vec![0; na * p.m * p.k],
            row_scale: vec![0.0; na * p.m],
            row_zp: vec![0; na * p.m],
            col_sum: vec![0; nb * p.n],
            row: vec![0.0; p.k],
        }
    }
}

/// Hybrid BATCH_MATMUL as LiteRT computes it: every row of the `na` left matrices
/// quantized to int8 (symmetrically, or with its own zero point), integer dot
/// products with the right matrices, the zero point's share removed through the
/// right operand's column sums, and each sum rescaled by the row scale times the
/// weight scale. Output batch `p` multiplies left matrix `ia[p]` by right matrix `ib[p]`.
pub fn batch_matmul_hybrid(a: &[f32], b: &[i8], ia: &[usize], ib: &[usize], p: &HybridMatMul, s: &mut HybridMatMulScratch, out: &mut [f32]) {
    let (m, k, n) = (p.m, p.k, p.n);
    let (na, nb) = (s.row_scale.len() / m.max(1), s.col_sum.len() / n.max(1));
    for r in 0..na * m {
        let (pa, i) = (r / m, r % m);
        let src = &a[pa * m * k..][..m * k];
        let row: &[f32] = if p.adj_x {
            for (kk, v) in s.row.iter_mut().enumerate() {
                *v = src[kk * m + i];
            }
            &s.row
        } else {
            &src[i * k..][..k]
        };
        let dst = &mut s.qa[r * k..][..k];
        if p.asymmetric {
            (s.row_scale[r], s.row_zp[r]) = asymmetric_quantize(row, dst);
        } else {
            s.row_scale[r] = symmetric_quantize(row, dst);
        }
    }
    let adj_y = p.adj_y;
    let at = |bm: &[i8], kk: usize, j: usize| i32::from(bm[if adj_y { j * k + kk } else { kk * n + j }]);
    for pb in 0..nb {
        let bm = &b[pb * k * n..][..k * n];
        for j in 0..n {
            s.col_sum[pb * n + j] = (0..k).map(|kk| at(bm, kk, j)).sum();
        }
    }
    for (q, (&pa, &pb)) in ia.iter().zip(ib).enumerate() {
        let bm = &b[pb * k * n..][..k * n];
        for i in 0..m {
            let r = pa * m + i;
            let qa = &s.qa[r * k..][..k];
            for j in 0..n {
                let dot: i32 = qa.iter().enumerate().map(|(kk, &v)| i32::from(v) * at(bm, kk, j)).sum();
                let total = dot - s.row_zp[r] * s.col_sum[pb * n + j];
                let ws = p.w_scales[if p.w_scales.len() == 1 { 0 } else { j }];
                out[(q * m + i) * n + j] = s.row_scale[r] * ws * total as f32;
            }
        }
    }
}

/// Run-time scratch of [`transpose_conv_hybrid`]: the quantized input and one
/// scale and zero point per batch.
#[derive(Debug, Clone, Default)]
pub struct TransposeConvHybridScratch {
    q: Vec<i8>,
    batch_scale: Vec<f32>,
    batch_zp: Vec<i32>,
}

impl TransposeConvHybridScratch {
    /// Scratch for an input of `batch` batches of `per_batch` values each.
    pub fn new(batch: usize, per_batch: usize) -> TransposeConvHybridScratch {
        TransposeConvHybridScratch { q: vec![0; batch * per_batch], batch_scale: vec![0.0; batch], batch_zp: vec![0; batch] }
    }
}

/// Hybrid TRANSPOSE_CONV as LiteRT computes it (float input and output, int8 OHWI
/// filter with zero points 0, one scale per output channel in `w_scales`):
/// each batch of the input is quantized asymmetrically as a whole; every product
/// `(q - zp) * w` of an input value and a tap is turned to float at once, times
/// the channel's weight scale, times the batch's scale, and added to its output
/// in input order (input pixel, then input channel). Then the bias and the clamp.
/// LiteRT accumulates in float term by term rather than in integers, and the
/// order of those float additions is part of its result, so it is kept here.
/// `g` describes the forward conv mapping the output onto the input, as for
/// [`crate::conv::transpose_conv2d`].
#[allow(clippy::too_many_arguments)]
pub fn transpose_conv_hybrid(
    x: &[f32],
    in_c: usize,
    w: &[i8],
    w_scales: &[f32],
    bias: Option<&[f32]>,
    out_c: usize,
    g: &crate::conv::Window,
    clamp: Clamp,
    s: &mut TransposeConvHybridScratch,
    out: &mut [f32],
) {
    let per_batch = g.out_h * g.out_w * in_c;
    quantize_rows(x, per_batch, true, &mut s.q, &mut s.batch_scale, &mut s.batch_zp);
    let taps = g.k_h * g.k_w;
    let pixels = (g.out_h * g.out_w).max(1);
    out.fill(0.0);
    crate::conv::transpose_scatter(g, |ip, op, tap| {
        let b = ip / pixels;
        let (sf, zp) = (s.batch_scale[b], s.batch_zp[b]);
        let px = &s.q[ip * in_c..][..in_c];
        let o = &mut out[op * out_c..][..out_c];
        for (ic, &v) in px.iter().enumerate() {
            let xv = i32::from(v) - zp;
            for (oc, ov) in o.iter_mut().enumerate() {
                let t = xv * i32::from(w[(oc * taps + tap) * in_c + ic]);
                *ov += t as f32 * w_scales[oc] * sf;
            }
        }
    });
    for px in out.chunks_exact_mut(out_c.max(1)) {
        for (c, v) in px.iter_mut().enumerate() {
            *v = clamp.apply(bias.map_or(*v, |b| *v + b[c]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    fn floats(rng: &mut Rng, len: usize) -> Vec<f32> {
        // Mostly spread values; now and then a row of one sign or all zeros.
        let offset = if rng.one_in(4) { 3.0 } else { 0.0 };
        let zero = rng.one_in(10);
        (0..len).map(|_| if zero { 0.0 } else { (rng.unit() * 8.0 - 4.0 + offset) as f32 }).collect()
    }

    fn int8s(rng: &mut Rng, len: usize) -> Vec<i8> {
        rng.ints(len, -127, 127).into_iter().map(|v| v as i8).collect()
    }

    /// One quantized row, for the references: the quantizers are not what is
    /// under test here.
    fn quantize(row: &[f32], asymmetric: bool) -> (Vec<i8>, f32, i32) {
        let mut q = vec![0i8; row.len()];
        let (scale, zp) = if asymmetric { asymmetric_quantize(row, &mut q) } else { (symmetric_quantize(row, &mut q), 0) };
        (q, scale, zp)
    }

    #[test]
    fn fully_connected_matches_the_definition() {
        let mut rng = Rng::new(31);
        for round in 0..300 {
            let (batch, in_n, out_c) = (rng.dim(), rng.dim(), rng.dim());
            let asymmetric = rng.one_in(2);
            let x = floats(&mut rng, batch * in_n);
            let w = int8s(&mut rng, out_c * in_n);
            let w_scales: Vec<f32> = (0..if rng.one_in(2) { 1 } else { out_c }).map(|_| rng.scale(-3.0, 0.0)).collect();
            let bias: Option<Vec<f32>> = rng.one_in(2).then(|| floats(&mut rng, out_c));
            let clamp = [Clamp::NONE, Clamp::RELU, Clamp::RELU6][rng.size(0, 2)];

            let (mut q, mut row_scale, mut row_zp) = (vec![0i8; batch * in_n], vec![0.0f32; batch], vec![0i32; batch]);
            quantize_rows(&x, in_n, asymmetric, &mut q, &mut row_scale, &mut row_zp);
            let sums = if asymmetric { row_sums(&w, in_n) } else { vec![] };
            let mut acc = vec![0i32; batch * out_c];
            fully_connected_acc(&q, &w, batch, in_n, out_c, &sums, &row_zp, &mut acc);
            let mut got = vec![0.0f32; batch * out_c];
            rescale(&acc, out_c, out_c, &w_scales, &row_scale, bias.as_deref(), clamp, &mut got);

            for b in 0..batch {
                let (qr, scale, zp) = quantize(&x[b * in_n..][..in_n], asymmetric);
                assert_eq!((&q[b * in_n..][..in_n], row_scale[b]), (&qr[..], scale), "round {round} row {b}");
                for o in 0..out_c {
                    let sum: i64 = (0..in_n).map(|i| (i64::from(qr[i]) - i64::from(zp)) * i64::from(w[o * in_n + i])).sum();
                    let ws = w_scales[if w_scales.len() == 1 { 0 } else { o }];
                    let want = clamp.apply(bias.as_ref().map_or(0.0, |bv| bv[o]) + sum as f32 * (scale * ws));
                    assert_eq!(got[b * out_c + o].to_bits(), want.to_bits(), "round {round} ({b}, {o})");
                }
            }
        }
    }

    #[test]
    fn batch_matmul_matches_the_definition() {
        let mut rng = Rng::new(32);
        for round in 0..300 {
            let (m, k, n) = (rng.dim(), rng.dim(), rng.dim());
            let (na, nb) = (rng.size(1, 3), rng.size(1, 3));
            let batches = rng.size(0, 5);
            let ia: Vec<usize> = (0..batches).map(|_| rng.size(0, na - 1)).collect();
            let ib: Vec<usize> = (0..batches).map(|_| rng.size(0, nb - 1)).collect();
            let w_scales = (0..if rng.one_in(2) { 1 } else { n }).map(|_| rng.scale(-3.0, 0.0)).collect();
            let p = HybridMatMul { m, k, n, adj_x: rng.one_in(2), adj_y: rng.one_in(2), asymmetric: rng.one_in(2), w_scales };
            let a = floats(&mut rng, na * m * k);
            let b = int8s(&mut rng, nb * k * n);
            let mut s = HybridMatMulScratch::new(&p, na, nb);
            let mut got = vec![0.0f32; batches * m * n];
            batch_matmul_hybrid(&a, &b, &ia, &ib, &p, &mut s, &mut got);
            for (q, (&pa, &pb)) in ia.iter().zip(&ib).enumerate() {
                for i in 0..m {
                    let row: Vec<f32> = (0..k).map(|kk| a[pa * m * k + if p.adj_x { kk * m + i } else { i * k + kk }]).collect();
                    let (qr, scale, zp) = quantize(&row, p.asymmetric);
                    for j in 0..n {
                        let right = |kk: usize| i64::from(b[pb * k * n + if p.adj_y { j * k + kk } else { kk * n + j }]);
                        let sum: i64 = (0..k).map(|kk| (i64::from(qr[kk]) - i64::from(zp)) * right(kk)).sum();
                        let ws = p.w_scales[if p.w_scales.len() == 1 { 0 } else { j }];
                        let want = scale * ws * sum as f32;
                        assert_eq!(got[(q * m + i) * n + j].to_bits(), want.to_bits(), "round {round} {p:?} batch {q} ({i}, {j})");
                    }
                }
            }
        }
    }

    /// Against LiteRT's definition written as its seven nested loops (batch, input
    /// row, column, channel, tap row, tap column, output channel), bit for bit.
    #[test]
    fn transpose_conv_matches_the_definition() {
        let mut rng = Rng::new(33);
        for round in 0..300 {
            let (n, ih, iw, ic, oc) = (rng.size(1, 3), rng.size(1, 5), rng.size(1, 5), rng.size(1, 5), rng.size(1, 6));
            let (kh, kw, sh, sw) = (rng.size(1, 4), rng.size(1, 4), rng.size(1, 3), rng.size(1, 3));
            let (oh, ow) = ((ih - 1) * sh + rng.size(1, kh + sh), (iw - 1) * sw + rng.size(1, kw + sw));
            let (pt, pl) = (rng.size(0, kh - 1), rng.size(0, kw - 1));
            let g = crate::conv::Window {
                batch: n,
                in_h: oh,
                in_w: ow,
                out_h: ih,
                out_w: iw,
                k_h: kh,
                k_w: kw,
                stride_h: sh,
                stride_w: sw,
                dil_h: 1,
                dil_w: 1,
                pad_top: pt,
                pad_left: pl,
            };
            let x = floats(&mut rng, n * ih * iw * ic);
            let w = int8s(&mut rng, oc * kh * kw * ic);
            let w_scales: Vec<f32> = (0..oc).map(|_| rng.scale(-3.0, -1.0)).collect();
            let bias: Option<Vec<f32>> = rng.one_in(2).then(|| floats(&mut rng, oc));
            let clamp = if rng.one_in(2) { Clamp::NONE } else { Clamp { min: -1.0, max: 1.0 } };
            let mut s = TransposeConvHybridScratch::new(n, ih * iw * ic);
            let mut got = vec![f32::NAN; n * oh * ow * oc];
            transpose_conv_hybrid(&x, ic, &w, &w_scales, bias.as_deref(), oc, &g, clamp, &mut s, &mut got);
            let mut want = vec![0.0f32; got.len()];
            for b in 0..n {
                let per = ih * iw * ic;
                let (q, scale, zp) = quantize(&x[b * per..][..per], true);
                for y in 0..ih {
                    for xx in 0..iw {
                        for c in 0..ic {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    for o in 0..oc {
                                        let (oy, ox) = ((y * sh + ky) as isize - pt as isize, (xx * sw + kx) as isize - pl as isize);
                                        if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                            continue;
                                        }
                                        let qv = i32::from(q[(y * iw + xx) * ic + c]) - zp;
                                        let wv = i32::from(w[((o * kh + ky) * kw + kx) * ic + c]);
                                        want[((b * oh + oy as usize) * ow + ox as usize) * oc + o] += (qv * wv) as f32 * w_scales[o] * scale;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            for (i, v) in want.iter_mut().enumerate() {
                *v = clamp.apply(bias.as_ref().map_or(*v, |bv| *v + bv[i % oc]));
            }
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "round {round}: output {i}: {a} vs {b}");
            }
        }
    }
}
