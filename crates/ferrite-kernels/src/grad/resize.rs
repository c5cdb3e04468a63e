//! Gradient of RESIZE_BILINEAR (float32, NHWC) with the coordinate tables of
//! [`crate::resize::bilinear_table`], so align_corners / half_pixel_centers mean
//! what they mean in the forward op. Each output pixel's gradient goes to its
//! four source pixels with the forward weights; sums run in output order, image
//! by image (one thread per image range): the same bits for any thread count.

use super::split::for_rows;
use crate::parallel::ThreadPool;

/// Backward pass of [`crate::resize::resize_bilinear`]: input `n x h x w x c`,
/// `dy` `n x ys.len() x xs.len() x c`; writes `dx` (the input's shape). False,
/// writing nothing, on short slices or a table pointing outside the input.
#[allow(clippy::too_many_arguments)]
pub fn resize_bilinear_backward(
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    ys: &[(f32, usize, usize)],
    xs: &[(f32, usize, usize)],
    dy: &[f32],
    dx: &mut [f32],
    pool: Option<&ThreadPool>,
) -> bool {
    let (oh, ow) = (ys.len(), xs.len());
    if !crate::holds(dy.len(), &[n, oh, ow, c])
        || !crate::holds(dx.len(), &[n, h, w, c])
        || ys.iter().any(|&(_, a, b)| a >= h || b >= h)
        || xs.iter().any(|&(_, a, b)| a >= w || b >= w)
    {
        return false;
    }
    let img = h * w * c;
    for_rows(pool, dx, n, img, 1, &|_, images, out| {
        out.fill(0.0);
        for (b, dxi) in images.zip(out.chunks_exact_mut(img.max(1))) {
            for (y, &(fy, y0, y1)) in ys.iter().enumerate() {
                let ty = fy - y0 as f32;
                for (x, &(fx, x0, x1)) in xs.iter().enumerate() {
                    let tx = fx - x0 as f32;
                    let d = &dy[((b * oh + y) * ow + x) * c..][..c];
                    let taps = [(y0, x0, (1.0 - ty) * (1.0 - tx)), (y1, x0, ty * (1.0 - tx)), (y0, x1, (1.0 - ty) * tx), (y1, x1, ty * tx)];
                    for (yy, xx, wgt) in taps {
                        let px = &mut dxi[(yy * w + xx) * c..][..c];
                        for (a, &v) in px.iter_mut().zip(d) {
                            *a += v * wgt;
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
    use crate::grad::check::{assert_grad, bits_equal_across_threads, Rng};
    use crate::resize::bilinear_table;

    #[test]
    fn resize_bilinear_gradient_matches_finite_differences() {
        let mut rng = Rng::new(31);
        for case in 0..24 {
            let (n, h, w, c) = (rng.size(1, 3), rng.size(1, 7), rng.size(1, 7), rng.size(1, 5));
            let (oh, ow) = (rng.size(1, 13), rng.size(1, 13));
            let (align, half) = match case % 3 {
                0 => (false, false),
                1 => (true, false),
                _ => (false, true),
            };
            let (ys, xs) = (bilinear_table(h, oh, align, half), bilinear_table(w, ow, align, half));
            let x = rng.vec(n * h * w * c);
            let dy = rng.vec(n * oh * ow * c);
            let got = bits_equal_across_threads(|t| {
                let mut dx = vec![f32::NAN; x.len()];
                assert!(resize_bilinear_backward(n, h, w, c, &ys, &xs, &dy, &mut dx, Some(&ThreadPool::new(t))));
                vec![dx]
            });
            let fwd = |x: &[f32]| {
                let mut y = vec![0.0; dy.len()];
                crate::resize::resize_bilinear(x, n, h, w, c, &ys, &xs, &mut y);
                y
            };
            assert_grad(&format!("case {case}: {n}x{h}x{w}x{c} -> {oh}x{ow}, align {align} half {half}"), &x, &got[0], &dy, fwd, true);
        }
    }
}
