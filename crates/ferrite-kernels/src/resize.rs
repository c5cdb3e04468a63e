//! Image resizing with TFLite's align_corners / half_pixel_centers semantics.

fn scale(in_size: usize, out_size: usize, align_corners: bool) -> f32 {
    if align_corners && out_size > 1 {
        (in_size as f32 - 1.0) / (out_size as f32 - 1.0)
    } else {
        in_size as f32 / out_size as f32
    }
}

/// Source coordinate and the two neighbours (lower clamped at 0, upper at size-1).
fn interp(v: usize, scale: f32, half_pixel: bool, in_size: usize) -> (f32, usize, usize) {
    let s = if half_pixel { (v as f32 + 0.5) * scale - 0.5 } else { v as f32 * scale };
    let lo = (s.floor() as i64).max(0) as usize;
    let hi = (s.ceil() as i64).min(in_size as i64 - 1).max(0) as usize;
    (s, lo.min(in_size - 1), hi)
}

/// Bilinear resize of NHWC `input` to `out_h x out_w`.
#[allow(clippy::too_many_arguments)]
pub fn resize_bilinear(
    input: &[f32],
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    out_h: usize,
    out_w: usize,
    align_corners: bool,
    half_pixel: bool,
    out: &mut [f32],
) {
    let (sy, sx) = (scale(h, out_h, align_corners), scale(w, out_w, align_corners));
    let xs: Vec<_> = (0..out_w).map(|x| interp(x, sx, half_pixel, w)).collect();
    for b in 0..n {
        for y in 0..out_h {
            let (fy, y0, y1) = interp(y, sy, half_pixel, h);
            let dy = fy - y0 as f32;
            for (x, &(fx, x0, x1)) in xs.iter().enumerate() {
                let dx = fx - x0 as f32;
                let p = |yy: usize, xx: usize| &input[((b * h + yy) * w + xx) * c..][..c];
                let (a, bb, cc, d) = (p(y0, x0), p(y1, x0), p(y0, x1), p(y1, x1));
                let o = &mut out[((b * out_h + y) * out_w + x) * c..][..c];
                for k in 0..c {
                    o[k] = a[k] * (1.0 - dy) * (1.0 - dx) + bb[k] * dy * (1.0 - dx) + cc[k] * (1.0 - dy) * dx + d[k] * dy * dx;
                }
            }
        }
    }
}

fn nearest(v: usize, in_size: usize, out_size: usize, align_corners: bool, half_pixel: bool) -> usize {
    let s = scale(in_size, out_size, align_corners);
    let off = if half_pixel { 0.5 } else { 0.0 };
    let f = (v as f32 + off) * s;
    let i = if align_corners { f.round() as i64 } else { f.floor() as i64 };
    i.min(in_size as i64 - 1).max(0) as usize
}

/// Nearest-neighbour resize, generic over the element type.
#[allow(clippy::too_many_arguments)]
pub fn resize_nearest<T: Copy>(
    input: &[T],
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    out_h: usize,
    out_w: usize,
    align_corners: bool,
    half_pixel: bool,
    out: &mut [T],
) {
    let xs: Vec<usize> = (0..out_w).map(|x| nearest(x, w, out_w, align_corners, half_pixel)).collect();
    for b in 0..n {
        for y in 0..out_h {
            let iy = nearest(y, h, out_h, align_corners, half_pixel);
            for (x, &ix) in xs.iter().enumerate() {
                let src = ((b * h + iy) * w + ix) * c;
                let dst = ((b * out_h + y) * out_w + x) * c;
                out[dst..dst + c].copy_from_slice(&input[src..src + c]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_identity_and_upsample() {
        let x = [0.0, 1.0, 2.0, 3.0];
        let mut o = [0.0; 4];
        resize_bilinear(&x, 1, 2, 2, 1, 2, 2, false, false, &mut o);
        assert_eq!(o, x);
        let mut up = [0.0; 9];
        resize_bilinear(&x, 1, 2, 2, 1, 3, 3, true, false, &mut up);
        assert_eq!(up[4], 1.5);
    }
}
