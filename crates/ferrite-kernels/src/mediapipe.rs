//! MediaPipe's landmark custom ops (version 2, as `face_landmark_with_attention`
//! uses them): `Landmarks2TransformMatrix` turns a set of landmarks into the
//! affine matrix of a rotated crop around them, `TransformTensorBilinear` samples
//! a feature map through such a matrix, and `TransformLandmarks` maps points with
//! it. The matrices are 4x4, row-major; only their first two rows act on `(x, y)`
//! (the third column multiplies z = 0, the fourth is the translation).
//!
//! Written from the ops' documented definitions; float32 throughout, computed in
//! the order the definitions give so that results stay close to MediaPipe's own.

/// The options of `Landmarks2TransformMatrix` (version 2).
#[derive(Debug, Clone, PartialEq)]
pub struct LandmarksToMatrixParams {
    /// Pairs of landmark indices whose points bound the crop (a pair only groups
    /// indices; every index of every pair is one point of the set).
    pub subset: Vec<[usize; 2]>,
    /// The landmark the rotation is measured from.
    pub left: usize,
    /// The landmark the rotation is measured to.
    pub right: usize,
    /// The angle the left-to-right direction should have in the crop.
    pub target_rotation: f32,
    /// The crop's size in output pixels.
    pub output_height: i32,
    /// See `output_height`.
    pub output_width: i32,
    /// How much larger than the landmarks' bounding box the crop is.
    pub scale_x: f32,
    /// See `scale_x`.
    pub scale_y: f32,
}

/// Reads the `(x, y)` of landmark `i` from `[x, y, z]` triples.
fn xy(landmarks: &[f32], i: usize) -> (f32, f32) {
    (landmarks[3 * i], landmarks[3 * i + 1])
}

/// `Landmarks2TransformMatrix` v2: the matrix that maps a pixel `(x, y, 0, 1)` of
/// an `output_width x output_height` crop to landmark coordinates.
///
/// The crop is rotated by `rotation = target_rotation - atan2(dy, dx)` of the
/// left-to-right landmark direction; its centre is the centre of the subset's
/// bounding box measured in the rotated frame, and its size is that box's size
/// times `scale`. The matrix is `shift(centre) * rotate(-rotation) *
/// scale(scale_x * box_w / out_w, scale_y * box_h / out_h) * shift(-out_w / 2,
/// -out_h / 2)`.
///
/// `landmarks` holds `[x, y, z]` triples; every index in `p` must be below
/// `landmarks.len() / 3` and `p.subset` must not be empty (the caller checks).
pub fn landmarks_to_transform_matrix(landmarks: &[f32], p: &LandmarksToMatrixParams) -> [f32; 16] {
    let (lx, ly) = xy(landmarks, p.left);
    let (rx, ry) = xy(landmarks, p.right);
    let rotation = p.target_rotation - (ry - ly).atan2(rx - lx);
    // The bounding box of the subset in the frame rotated by `rotation`.
    let (cos, sin) = (rotation.cos(), rotation.sin());
    let (mut min, mut max) = ((f32::INFINITY, f32::INFINITY), (f32::NEG_INFINITY, f32::NEG_INFINITY));
    for &i in p.subset.iter().flatten() {
        let (x, y) = xy(landmarks, i);
        let (u, v) = (cos * x - sin * y, sin * x + cos * y);
        min = (min.0.min(u), min.1.min(v));
        max = (max.0.max(u), max.1.max(v));
    }
    let (box_w, box_h) = (max.0 - min.0, max.1 - min.1);
    let (mu, mv) = ((min.0 + max.0) / 2.0, (min.1 + max.1) / 2.0);
    // Back to landmark coordinates: rotate the box centre by -rotation.
    let (cos_b, sin_b) = ((-rotation).cos(), (-rotation).sin());
    let (cx, cy) = (cos_b * mu - sin_b * mv, sin_b * mu + cos_b * mv);
    let (ow, oh) = (p.output_width as f32, p.output_height as f32);
    let (sx, sy) = (p.scale_x * box_w / ow, p.scale_y * box_h / oh);
    // shift(c) * rotate(-rotation) * scale(s) * shift(-out / 2), multiplied out:
    // the linear part is rotate * scale, the translation is c + rotate * scale * (-out / 2).
    let (a, b, c, d) = (cos_b * sx, -sin_b * sy, sin_b * sx, cos_b * sy);
    let (hx, hy) = (-(ow / 2.0), -(oh / 2.0));
    let tx = a * hx + b * hy + cx;
    let ty = c * hx + d * hy + cy;
    [a, b, 0.0, tx, c, d, 0.0, ty, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
}

/// `TransformTensorBilinear` v2: samples `input` (`[height, width, channels]`,
/// batch 1) at `matrix * (x, y, 0, 1)` for each pixel of the
/// `[out_height, out_width, channels]` output, bilinearly.
///
/// The matrix maps pixel centres (version 2 aligns corners: the sample point of
/// output pixel `p` is `M (p + 0.5) - 0.5`). A sample point outside
/// `[0, width - 1] x [0, height - 1]` (or NaN) gives 0 for every channel; inside,
/// the four neighbours are weighted by distance, and a neighbour past the last
/// row or column (only reached with weight 0, on the border) reads as 0.
///
/// `input.len()` must be `height * width * channels`, `out.len()`
/// `out_height * out_width * channels` (the caller checks).
pub fn transform_tensor_bilinear(input: &[f32], (height, width, channels): (usize, usize, usize), matrix: &[f32; 16], out_width: usize, out: &mut [f32]) {
    let [m0, m1, m2, mut m3, m4, m5, m6, mut m7, ..] = *matrix;
    let _ = (m2, m6); // they multiply z = 0
                      // Align corners: T -> shift(-0.5) * T * shift(0.5), folded into the translation.
    m3 += m0 * 0.5 + m1 * 0.5 - 0.5;
    m7 += m4 * 0.5 + m5 * 0.5 - 0.5;
    let (last_x, last_y) = (width as f32 - 1.0, height as f32 - 1.0);
    let at = |y: isize, x: isize, ch: usize| -> f32 {
        if y < 0 || x < 0 || y as usize >= height || x as usize >= width {
            0.0
        } else {
            input[(y as usize * width + x as usize) * channels + ch]
        }
    };
    if channels == 0 || out_width == 0 {
        return;
    }
    for (p, px) in out.chunks_exact_mut(channels).enumerate() {
        let (ox, oy) = ((p % out_width) as f32, (p / out_width) as f32);
        let tx = m0 * ox + m1 * oy + m3;
        let ty = m4 * ox + m5 * oy + m7;
        // Written so NaN lands here too: a NaN coordinate fails every comparison.
        let inside = tx >= 0.0 && tx <= last_x && ty >= 0.0 && ty <= last_y;
        if !inside {
            px.fill(0.0);
            continue;
        }
        let (fx, fy) = (tx.floor(), ty.floor());
        let (x0, y0) = (fx as isize, fy as isize);
        let (right, lower) = (tx - fx, ty - fy);
        for (ch, o) in px.iter_mut().enumerate() {
            let upper_v = (1.0 - right) * at(y0, x0, ch) + right * at(y0, x0 + 1, ch);
            let lower_v = (1.0 - right) * at(y0 + 1, x0, ch) + right * at(y0 + 1, x0 + 1, ch);
            *o = lower * lower_v + (1.0 - lower) * upper_v;
        }
    }
}

/// `TransformLandmarks` v2: maps each point of `landmarks` (`dims` = 2 or 3
/// values per point, batch 1) by the matrix's first two rows, with z = 0 in the
/// product; a third value (z) is copied unchanged.
///
/// `out.len()` must equal `landmarks.len()`, a multiple of `dims` (the caller checks).
pub fn transform_landmarks(landmarks: &[f32], dims: usize, matrix: &[f32; 16], out: &mut [f32]) {
    let [m0, m1, _, m3, m4, m5, _, m7, ..] = *matrix;
    for (src, dst) in landmarks.chunks_exact(dims).zip(out.chunks_exact_mut(dims)) {
        let (x, y) = (src[0], src[1]);
        dst[0] = m0 * x + m1 * y + m3;
        dst[1] = m4 * x + m5 * y + m7;
        if dims == 3 {
            dst[2] = src[2];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(subset: Vec<[usize; 2]>, left: usize, right: usize) -> LandmarksToMatrixParams {
        LandmarksToMatrixParams { subset, left, right, target_rotation: 0.0, output_height: 16, output_width: 16, scale_x: 1.5, scale_y: 1.5 }
    }

    fn apply(m: &[f32; 16], x: f32, y: f32) -> (f32, f32) {
        (m[0] * x + m[1] * y + m[3], m[4] * x + m[5] * y + m[7])
    }

    /// Landmarks of an axis-aligned box `[10, 30] x [20, 28]` with the eye line
    /// horizontal: no rotation, the crop centred on the box, 1.5 times its size.
    #[test]
    fn matrix_of_an_upright_box() {
        #[rustfmt::skip]
        let lm = [10.0, 20.0, 0.0,  30.0, 20.0, 5.0,  30.0, 28.0, 0.0,  10.0, 28.0, 0.0,  20.0, 24.0, 0.0];
        let m = landmarks_to_transform_matrix(&lm, &params(vec![[0, 1], [2, 3]], 0, 1));
        // Centre of the crop -> centre of the box; corners -> box corners widened 1.5x.
        let (cx, cy) = apply(&m, 8.0, 8.0);
        assert!((cx - 20.0).abs() < 1e-5 && (cy - 24.0).abs() < 1e-5, "{cx} {cy}");
        let (x0, y0) = apply(&m, 0.0, 0.0);
        assert!((x0 - (20.0 - 15.0)).abs() < 1e-5 && (y0 - (24.0 - 6.0)).abs() < 1e-5, "{x0} {y0}");
        assert_eq!(&m[8..], &[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!((m[2], m[6]), (0.0, 0.0));
    }

    /// The same box turned by 30 degrees about a point: the matrix turns the crop
    /// with it, so it maps crop pixels onto the turned box, and the crop's x axis
    /// runs along the turned left-to-right direction.
    #[test]
    fn matrix_follows_a_rotation() {
        let base = [(10.0f32, 20.0f32), (30.0, 20.0), (30.0, 28.0), (10.0, 28.0)];
        let (t, pivot) = (30f32.to_radians(), (5.0f32, -3.0f32));
        let turn = |(x, y): (f32, f32)| {
            let (dx, dy) = (x - pivot.0, y - pivot.1);
            (pivot.0 + t.cos() * dx - t.sin() * dy, pivot.1 + t.sin() * dx + t.cos() * dy)
        };
        let lm: Vec<f32> = base
            .iter()
            .flat_map(|&p| {
                let (x, y) = turn(p);
                [x, y, 0.0]
            })
            .collect();
        let m = landmarks_to_transform_matrix(&lm, &params(vec![[0, 1], [2, 3]], 0, 1));
        let (cx, cy) = apply(&m, 8.0, 8.0);
        let want = turn((20.0, 24.0));
        assert!((cx - want.0).abs() < 1e-4 && (cy - want.1).abs() < 1e-4, "{cx} {cy} vs {want:?}");
        // One crop pixel along x moves 1.5 * 20 / 16 along the turned x axis.
        let step = 1.5 * 20.0 / 16.0;
        assert!((m[0] - step * t.cos()).abs() < 1e-5 && (m[4] - step * t.sin()).abs() < 1e-5, "{m:?}");
        let step_y = 1.5 * 8.0 / 16.0;
        assert!((m[1] + step_y * t.sin()).abs() < 1e-5 && (m[5] - step_y * t.cos()).abs() < 1e-5, "{m:?}");
    }

    /// A target rotation turns the crop so the eye line lands at that angle.
    #[test]
    fn matrix_with_a_target_rotation() {
        let lm = [0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 10.0, 10.0, 0.0, 0.0, 10.0, 0.0];
        let mut p = params(vec![[0, 1], [2, 3]], 0, 1);
        p.target_rotation = std::f32::consts::FRAC_PI_2;
        let m = landmarks_to_transform_matrix(&lm, &p);
        // rotation = pi/2, the crop axes are the landmark axes turned by -pi/2.
        let s = 1.5 * 10.0 / 16.0;
        let want = [0.0, s, -s, 0.0];
        for (g, w) in [m[0], m[1], m[4], m[5]].iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{m:?}");
        }
        let (cx, cy) = apply(&m, 8.0, 8.0);
        assert!((cx - 5.0).abs() < 1e-5 && (cy - 5.0).abs() < 1e-5);
    }

    /// An identity matrix reproduces the input where output and input overlap,
    /// including the last row and column, and gives 0 outside it.
    #[test]
    fn bilinear_identity_copies_and_zeroes_outside() {
        let (h, w, c) = (3, 4, 2);
        let input: Vec<f32> = (0..h * w * c).map(|i| i as f32 + 1.0).collect();
        let mut id = [0.0f32; 16];
        (id[0], id[5], id[10], id[15]) = (1.0, 1.0, 1.0, 1.0);
        let (oh, ow) = (4, 5);
        let mut out = vec![f32::NAN; oh * ow * c];
        transform_tensor_bilinear(&input, (h, w, c), &id, ow, &mut out);
        for y in 0..oh {
            for x in 0..ow {
                for ch in 0..c {
                    let got = out[(y * ow + x) * c + ch];
                    let want = if y < h && x < w { input[(y * w + x) * c + ch] } else { 0.0 };
                    assert_eq!(got, want, "({y}, {x}, {ch})");
                }
            }
        }
    }

    /// Half-pixel shifts and a 2x zoom interpolate a plane exactly; points past
    /// the border are 0, and a NaN matrix gives zeros rather than garbage.
    #[test]
    fn bilinear_interpolates_a_plane() {
        let (h, w) = (5, 6);
        let plane = |x: f32, y: f32| 3.0 * x - 2.0 * y + 1.0;
        let input: Vec<f32> = (0..h * w).map(|i| plane((i % w) as f32, (i / w) as f32)).collect();
        // Scale by 0.5 about pixel centres: sample point = 0.5 (p + 0.5) - 0.5 + shift.
        let mut m = [0.0f32; 16];
        (m[0], m[5], m[10], m[15]) = (0.5, 0.5, 1.0, 1.0);
        (m[3], m[7]) = (1.0, 0.5);
        let (oh, ow) = (8, 8);
        let mut out = vec![0.0; oh * ow];
        transform_tensor_bilinear(&input, (h, w, 1), &m, ow, &mut out);
        for y in 0..oh {
            for x in 0..ow {
                let (sx, sy) = (0.5 * (x as f32 + 0.5) - 0.5 + 1.0, 0.5 * (y as f32 + 0.5) - 0.5 + 0.5);
                let inside = sx >= 0.0 && sx <= (w - 1) as f32 && sy >= 0.0 && sy <= (h - 1) as f32;
                let want = if inside { plane(sx, sy) } else { 0.0 };
                assert!((out[y * ow + x] - want).abs() < 1e-5, "({y}, {x}): {} vs {want}", out[y * ow + x]);
            }
        }
        let nan = [f32::NAN; 16];
        transform_tensor_bilinear(&input, (h, w, 1), &nan, ow, &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn landmarks_are_mapped_and_z_kept() {
        let m = [2.0, 1.0, 7.0, 10.0, -1.0, 3.0, 7.0, 20.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0];
        let lm = [1.0, 2.0, 5.0, -1.0, 0.5, -4.0];
        let mut out = [0.0; 6];
        transform_landmarks(&lm, 3, &m, &mut out);
        assert_eq!(out, [14.0, 25.0, 5.0, 8.5, 22.5, -4.0]);
        let mut out2 = [0.0; 4];
        transform_landmarks(&lm[..4], 2, &m, &mut out2);
        assert_eq!(out2, [14.0, 25.0, 19.0, 12.0]);
    }
}
