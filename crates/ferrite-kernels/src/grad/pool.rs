//! Gradients of MAX_POOL_2D and AVERAGE_POOL_2D (float32, NHWC) for the pooling
//! of [`crate::pool`]: windows clipped to the input. Max pooling sends each
//! output's gradient to the first maximum of its window in scan order (rows,
//! then columns), as TensorFlow's MaxPoolGrad; average pooling spreads it over
//! the cells inside the input, divided by their count (padding does not count,
//! as the forward op). Overlapping windows add up in output order, image by
//! image, one thread per image range: the same bits for any thread count.

use super::split::for_rows;
use crate::conv::Window;
use crate::parallel::ThreadPool;

/// Channels whose running maxima and positions live on the stack at a time.
const BLOCK: usize = 16;

/// The input rows and columns of output pixel (oy, ox)'s window, clipped.
fn window_cells(g: &Window, oy: usize, ox: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    let clip = |o: usize, stride: usize, pad: usize, k: usize, size: usize| {
        let start = (o * stride) as isize - pad as isize;
        start.max(0) as usize..((start + k as isize).min(size as isize)).max(0) as usize
    };
    (clip(oy, g.stride_h, g.pad_top, g.k_h, g.in_h), clip(ox, g.stride_w, g.pad_left, g.k_w, g.in_w))
}

/// Checks the buffers of a pooling gradient.
fn sizes_ok(g: &Window, c: usize, dy: &[f32], dx: &[f32]) -> bool {
    crate::holds(dy.len(), &[g.batch, g.out_h, g.out_w, c]) && crate::holds(dx.len(), &[g.batch, g.in_h, g.in_w, c])
}

/// Backward pass of MAX_POOL_2D: `x` the forward input `[batch, in_h, in_w, c]`,
/// `dy` `[batch, out_h, out_w, c]`; writes `dx` (x's shape). The fused
/// activation's gradient is the caller's. False, writing nothing, on short slices.
pub fn max_pool_backward(x: &[f32], c: usize, g: &Window, dy: &[f32], dx: &mut [f32], pool: Option<&ThreadPool>) -> bool {
    // Cell indices within an image are kept as u32 (vector lanes).
    if !sizes_ok(g, c, dy, dx) || !crate::holds(x.len(), &[g.batch, g.in_h, g.in_w, c]) || g.in_h * g.in_w > u32::MAX as usize {
        return false;
    }
    let img = g.in_h * g.in_w * c;
    for_rows(pool, dx, g.batch, img, 1, &|_, images, out| {
        for (b, dxi) in images.zip(out.chunks_exact_mut(img.max(1))) {
            max_pool_image(&x[b * img..][..img], c, g, &dy[b * g.out_h * g.out_w * c..][..g.out_h * g.out_w * c], dxi);
        }
    });
    true
}

simd_fn! {
    /// [`max_pool_backward`] of one image: `xi` its input, `dyi` its output
    /// gradient, `dxi` its input gradient.
    fn max_pool_image(xi: &[f32], c: usize, g: &Window, dyi: &[f32], dxi: &mut [f32]) {
        dxi.fill(0.0);
        for oy in 0..g.out_h {
            for ox in 0..g.out_w {
                let (ys, xs) = window_cells(g, oy, ox);
                if ys.is_empty() || xs.is_empty() {
                    continue;
                }
                let d = &dyi[(oy * g.out_w + ox) * c..][..c];
                let first = (ys.start * g.in_w + xs.start) as u32;
                let mut c0 = 0;
                while c0 + BLOCK <= c {
                    max_pool_block::<BLOCK>(xi, c, g.in_w, (&ys, &xs), first, c0, BLOCK, &d[c0..], dxi);
                    c0 += BLOCK;
                }
                while c0 + 8 <= c {
                    max_pool_block::<8>(xi, c, g.in_w, (&ys, &xs), first, c0, 8, &d[c0..], dxi);
                    c0 += 8;
                }
                if c0 < c {
                    max_pool_block::<8>(xi, c, g.in_w, (&ys, &xs), first, c0, c - c0, &d[c0..], dxi);
                }
            }
        }
    }
}

/// One output pixel's window of [`max_pool_image`] for `width <= L` channels from
/// `c0`: finds each channel's first maximum over the cells `ys` x `xs` and adds
/// `d` (the pixel's gradient from `c0`) there. Fixed `L` lanes so that the selects
/// vectorize (a last block narrower than `L` takes the same steps lane by lane).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn max_pool_block<const L: usize>(
    xi: &[f32],
    c: usize,
    in_w: usize,
    (ys, xs): (&std::ops::Range<usize>, &std::ops::Range<usize>),
    first: u32,
    c0: usize,
    width: usize,
    d: &[f32],
    dxi: &mut [f32],
) {
    // As the forward op: the maximum starts below every value and moves on a
    // strict `<`, so the first maximum keeps it (NaN never wins); a window of
    // NaNs or minima sends it to its first cell. Selects, not branches.
    let mut best = [f32::MIN; L];
    let mut at = [first; L];
    for y in ys.clone() {
        for xx in xs.clone() {
            let q = y * in_w + xx;
            if width == L {
                let px: &[f32; L] = xi[q * c + c0..][..L].try_into().expect("L lanes");
                for j in 0..L {
                    let more = best[j] < px[j];
                    best[j] = if more { px[j] } else { best[j] };
                    at[j] = if more { q as u32 } else { at[j] };
                }
            } else {
                let px = &xi[q * c + c0..][..width];
                for j in 0..width {
                    let more = best[j] < px[j];
                    best[j] = if more { px[j] } else { best[j] };
                    at[j] = if more { q as u32 } else { at[j] };
                }
            }
        }
    }
    for j in 0..width {
        dxi[at[j] as usize * c + c0 + j] += d[j];
    }
}

/// Backward pass of AVERAGE_POOL_2D: `dy` `[batch, out_h, out_w, c]`; writes
/// `dx` `[batch, in_h, in_w, c]`. False, writing nothing, on short slices.
pub fn average_pool_backward(c: usize, g: &Window, dy: &[f32], dx: &mut [f32], pool: Option<&ThreadPool>) -> bool {
    if !sizes_ok(g, c, dy, dx) {
        return false;
    }
    let img = g.in_h * g.in_w * c;
    for_rows(pool, dx, g.batch, img, 1, &|_, images, out| {
        out.fill(0.0);
        for (b, dxi) in images.zip(out.chunks_exact_mut(img.max(1))) {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    let (ys, xs) = window_cells(g, oy, ox);
                    let count = ys.len() * xs.len();
                    if count == 0 {
                        continue;
                    }
                    // The forward op multiplies the sum by 1/count.
                    let inv = 1.0 / count as f32;
                    let d = &dy[((b * g.out_h + oy) * g.out_w + ox) * c..][..c];
                    for y in ys.clone() {
                        for xx in xs.clone() {
                            let px = &mut dxi[(y * g.in_w + xx) * c..][..c];
                            for (a, &v) in px.iter_mut().zip(d) {
                                *a += v * inv;
                            }
                        }
                    }
                }
            }
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::out_size_and_pad;
    use crate::grad::check::{assert_grad, bits_equal_across_threads, Rng};
    use crate::Clamp;

    fn window(rng: &mut Rng) -> Window {
        loop {
            let (ih, iw) = (rng.size(1, 9), rng.size(1, 9));
            let (kh, kw) = (rng.size(1, 3), rng.size(1, 3));
            let (sh, sw) = (rng.size(1, 2), rng.size(1, 2));
            let same = rng.size(0, 1) == 1;
            let (Some((oh, pt)), Some((ow, pl))) = (out_size_and_pad(ih, kh, sh, 1, same), out_size_and_pad(iw, kw, sw, 1, same)) else { continue };
            if oh == 0 || ow == 0 {
                continue;
            }
            return Window {
                batch: rng.size(1, 3),
                in_h: ih,
                in_w: iw,
                out_h: oh,
                out_w: ow,
                k_h: kh,
                k_w: kw,
                stride_h: sh,
                stride_w: sw,
                dil_h: 1,
                dil_w: 1,
                pad_top: pt,
                pad_left: pl,
            };
        }
    }

    #[test]
    fn pooling_gradients_match_finite_differences() {
        let mut rng = Rng::new(21);
        for case in 0..30 {
            let g = window(&mut rng);
            let c = [1, 3, 17, 70][case % 4];
            let n = g.batch * g.in_h * g.in_w * c;
            // Distinct values at least 0.01 apart: a step of 1e-3 moves no maximum.
            let mut x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.01) - n as f32 * 0.005).collect();
            for i in (1..n).rev() {
                x.swap(i, rng.size(0, i));
            }
            let dy = rng.vec(g.batch * g.out_h * g.out_w * c);
            let fwd = |max: bool, x: &[f32]| {
                let mut y = vec![0.0; dy.len()];
                let rows = 0..g.batch * g.out_h;
                if max {
                    crate::pool::max_pool(x, c, &g, Clamp::NONE, &mut y, rows)
                } else {
                    crate::pool::average_pool(x, c, &g, Clamp::NONE, &mut y, rows)
                }
                y
            };
            let what = format!("case {case}: {g:?} c {c}");
            let got = bits_equal_across_threads(|t| {
                let pool = ThreadPool::new(t);
                let (mut a, mut m) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                assert!(average_pool_backward(c, &g, &dy, &mut a, Some(&pool)));
                assert!(max_pool_backward(&x, c, &g, &dy, &mut m, Some(&pool)));
                vec![a, m]
            });
            assert_grad(&what, &x, &got[0], &dy, |x| fwd(false, x), true);
            assert_grad(&what, &x, &got[1], &dy, |x| fwd(true, x), false);
        }
    }

    #[test]
    fn max_pool_ties_go_to_the_first_maximum() {
        // One 2x2 window over equal values, and a window whose maximum appears twice.
        let g =
            Window { batch: 1, in_h: 2, in_w: 2, out_h: 1, out_w: 1, k_h: 2, k_w: 2, stride_h: 1, stride_w: 1, dil_h: 1, dil_w: 1, pad_top: 0, pad_left: 0 };
        let mut dx = [0.0; 4];
        assert!(max_pool_backward(&[5.0; 4], 1, &g, &[2.0], &mut dx, None));
        assert_eq!(dx, [2.0, 0.0, 0.0, 0.0]);
        assert!(max_pool_backward(&[1.0, 7.0, 3.0, 7.0], 1, &g, &[2.0], &mut dx, None));
        assert_eq!(dx, [0.0, 2.0, 0.0, 0.0]);
        assert!(max_pool_backward(&[f32::NAN, 1.0, f32::NAN, 4.0], 1, &g, &[2.0], &mut dx, None));
        assert_eq!(dx, [0.0, 0.0, 0.0, 2.0]);
        assert!(!max_pool_backward(&[0.0; 3], 1, &g, &[2.0], &mut dx, None));
    }
}
