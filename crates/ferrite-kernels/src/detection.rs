//! Detection ops: NON_MAX_SUPPRESSION_V4 and V5 (hard and soft NMS over boxes
//! given as `[y1, x1, y2, x2]` corners in any order), and the SSD post-processing
//! of LiteRT's built-in custom op `TFLite_Detection_PostProcess` (box decoding
//! against anchors, then fast or regular multi-class NMS).

/// Intersection over union of boxes `a` and `b` (`[y1, x1, y2, x2]`, corners in
/// any order); 0 when either has no area.
pub fn iou(a: &[f32], b: &[f32]) -> f32 {
    let span = |v: &[f32]| (v[0].min(v[2]), v[1].min(v[3]), v[0].max(v[2]), v[1].max(v[3]));
    let (ay0, ax0, ay1, ax1) = span(a);
    let (by0, bx0, by1, bx1) = span(b);
    let (area_a, area_b) = ((ay1 - ay0) * (ax1 - ax0), (by1 - by0) * (bx1 - bx0));
    if area_a <= 0.0 || area_b <= 0.0 {
        return 0.0;
    }
    let h = (ay1.min(by1) - ay0.max(by0)).max(0.0);
    let w = (ax1.min(bx1) - ax0.max(bx0)).max(0.0);
    let inter = h * w;
    inter / (area_a + area_b - inter)
}

/// A box waiting for selection: its current (possibly decayed) score and how many
/// selected boxes it has already been compared with.
#[derive(Clone, Copy)]
struct Candidate {
    index: usize,
    score: f32,
    checked: usize,
}

/// NON_MAX_SUPPRESSION_V4 / V5 (TensorFlow's definition): boxes whose score is
/// above `score_threshold` are taken in order of decreasing score (equal scores:
/// lower index first); a candidate is compared with each box selected since its
/// last comparison, newest first: an IoU of `iou_threshold` or more drops it;
/// otherwise, with `sigma > 0`, its score decays by `exp(-0.5 * iou^2 / sigma)`.
/// A candidate whose score did not change is selected; a decayed one still above
/// the threshold goes back in line. Up to `max_out` selections are written to
/// `indices` and `selected_scores` (the rest zero); returns how many.
pub fn non_max_suppression(
    boxes: &[f32],
    scores: &[f32],
    max_out: usize,
    iou_threshold: f32,
    score_threshold: f32,
    sigma: f32,
    indices: &mut [i32],
    selected_scores: &mut [f32],
) -> usize {
    indices.fill(0);
    selected_scores.fill(0.0);
    let scale = if sigma > 0.0 { -0.5 / sigma } else { 0.0 };
    let mut queue: Vec<Candidate> =
        scores.iter().enumerate().filter(|(_, &s)| s > score_threshold).map(|(index, &score)| Candidate { index, score, checked: 0 }).collect();
    let mut selected: Vec<usize> = Vec::new();
    // The best candidate: highest score, then lowest index.
    let best =
        |q: &[Candidate]| (0..q.len()).reduce(|a, b| if q[b].score > q[a].score || (q[b].score == q[a].score && q[b].index < q[a].index) { b } else { a });
    while selected.len() < max_out.min(indices.len()) {
        let Some(at) = best(&queue) else { break };
        let mut c = queue.swap_remove(at);
        let original = c.score;
        let mut dropped = false;
        let b = &boxes[c.index * 4..c.index * 4 + 4];
        for &s in selected[c.checked..].iter().rev() {
            let o = iou(b, &boxes[s * 4..s * 4 + 4]);
            if o >= iou_threshold {
                dropped = true;
                break;
            }
            if sigma > 0.0 {
                c.score *= (scale * o * o).exp();
            }
            if c.score <= score_threshold {
                break;
            }
        }
        c.checked = selected.len();
        if dropped {
            continue;
        }
        if c.score == original {
            indices[selected.len()] = c.index as i32;
            selected_scores[selected.len()] = c.score;
            selected.push(c.index);
        } else if c.score > score_threshold {
            queue.push(c);
        }
    }
    selected.len()
}

/// The options of `TFLite_Detection_PostProcess`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PostProcessParams {
    /// Boxes kept after NMS (rows of the outputs: `max_detections * max_classes_per_detection`).
    pub max_detections: usize,
    /// Fast NMS: classes reported per kept box.
    pub max_classes_per_detection: usize,
    /// Regular NMS: boxes kept per class before the classes are merged.
    pub detections_per_class: usize,
    /// Scores below this never take part.
    pub score_threshold: f32,
    /// A box whose IoU with a kept box exceeds this is dropped.
    pub iou_threshold: f32,
    /// Classes, without the background column.
    pub num_classes: usize,
    /// Divisors of the encoded (y, x, h, w).
    pub scale: [f32; 4],
    /// Regular (per-class) NMS instead of fast (class-agnostic) NMS.
    pub regular_nms: bool,
}

/// Decodes center-size box encodings against center-size anchors into corners
/// `[ymin, xmin, ymax, xmax]`, as the SSD box coder defines it:
/// `yc = y / y_scale * ah + ay`, `half_h = 0.5 * exp(h / h_scale) * ah` (x, w
/// likewise). `enc` holds one row of `stride` values per box (values past the
/// first four, keypoints, are ignored); `anchors` four per box. LiteRT computes
/// the decoding in double precision and rounds each of the centre and half
/// size once; so does this.
pub fn decode_center_size(enc: &[f32], stride: usize, anchors: &[f32], scale: [f32; 4], out: &mut [f32]) {
    let [sy, sx, sh, sw] = scale.map(f64::from);
    for ((e, a), o) in enc.chunks_exact(stride).zip(anchors.chunks_exact(4)).zip(out.chunks_exact_mut(4)) {
        let [y, x, h, w] = [e[0], e[1], e[2], e[3]].map(f64::from);
        let [ay, ax, ah, aw] = [a[0], a[1], a[2], a[3]].map(f64::from);
        let yc = (y / sy * ah + ay) as f32;
        let xc = (x / sx * aw + ax) as f32;
        let half_h = (0.5 * (h / sh).exp() * ah) as f32;
        let half_w = (0.5 * (w / sw).exp() * aw) as f32;
        o.copy_from_slice(&[yc - half_h, xc - half_w, yc + half_h, xc + half_w]);
    }
}

/// IoU of two corner boxes `[ymin, xmin, ymax, xmax]` taken as ordered (the
/// post-processing checks the order first); 0 when either has no area.
fn corner_iou(a: &[f32], b: &[f32]) -> f32 {
    let area_a = (a[2] - a[0]) * (a[3] - a[1]);
    let area_b = (b[2] - b[0]) * (b[3] - b[1]);
    if area_a <= 0.0 || area_b <= 0.0 {
        return 0.0;
    }
    let inter = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0) * (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    inter / (area_a + area_b - inter)
}

/// A sort key ordering scores as LiteRT's `a > b` comparisons do (-0 equals 0),
/// with NaN, which no comparison ranks, last: a total order, so sorting never
/// meets an inconsistent comparison.
fn rank(s: f32) -> f32 {
    if s.is_nan() {
        f32::NEG_INFINITY
    } else {
        s + 0.0
    }
}

/// The indices of the `k` highest of `values`, highest first, in the order
/// LiteRT's fast NMS ranks a box's classes. For `k == 1` that is the first
/// maximum. For more it is C++'s `std::partial_sort` with a "greater" comparison,
/// whose order among equal values the C++ standard leaves open; LiteRT's Linux
/// builds use GNU libstdc++'s algorithm (a heap of the first `k` indices, each
/// later index that beats the heap's least replacing it, then a heap sort), and
/// equal scores are common with uint8 scores, so the same steps are taken here
/// to report equal-scoring classes in the order LiteRT does.
fn top_k_like_litert(values: &[f32], k: usize) -> Vec<usize> {
    let k = k.min(values.len());
    if k == 0 {
        return Vec::new();
    }
    // "a ranks before b": a strictly greater score.
    let before = |a: usize, b: usize| rank(values[a]) > rank(values[b]);
    if k == 1 {
        let mut best = 0;
        for i in 1..values.len() {
            if before(i, best) {
                best = i;
            }
        }
        return vec![best];
    }
    let mut v: Vec<usize> = (0..values.len()).collect();
    // Moves the hole at `hole` down to a leaf of the heap v[..len], then sifts
    // `value` up from there (no higher than `top`).
    let adjust = |v: &mut [usize], mut hole: usize, len: usize, value: usize| {
        let top = hole;
        let mut child = hole;
        while child < (len - 1) / 2 {
            child = 2 * (child + 1);
            if before(v[child], v[child - 1]) {
                child -= 1;
            }
            v[hole] = v[child];
            hole = child;
        }
        if len.is_multiple_of(2) && child == (len - 2) / 2 {
            child = 2 * (child + 1);
            v[hole] = v[child - 1];
            hole = child - 1;
        }
        let mut parent = hole.wrapping_sub(1) / 2;
        while hole > top && before(v[parent], value) {
            v[hole] = v[parent];
            hole = parent;
            parent = hole.wrapping_sub(1) / 2;
        }
        v[hole] = value;
    };
    // Heap of the first k (its root ranks last among them).
    if k >= 2 {
        let mut parent = (k - 2) / 2;
        loop {
            let value = v[parent];
            adjust(&mut v, parent, k, value);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    for i in k..values.len() {
        if before(v[i], v[0]) {
            let value = v[i];
            v[i] = v[0];
            adjust(&mut v, 0, k, value);
        }
    }
    // Heap sort of the first k.
    let mut last = k;
    while last > 1 {
        last -= 1;
        let value = v[last];
        v[last] = v[0];
        adjust(&mut v, 0, last, value);
    }
    v.truncate(k);
    v
}

/// Greedy single-class NMS of the post-processing: the boxes scoring at least the
/// threshold, in decreasing score order (a stable sort: equal scores keep box
/// order), each kept unless a kept box overlaps it by more than the IoU
/// threshold, until `max_out` are kept. Returns the kept box indices in order.
fn single_class_nms(boxes: &[f32], scores: &[f32], p: &PostProcessParams, max_out: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] >= p.score_threshold).collect();
    order.sort_by(|&a, &b| rank(scores[b]).total_cmp(&rank(scores[a])));
    let mut active = vec![true; order.len()];
    let mut kept = Vec::new();
    for i in 0..order.len() {
        if kept.len() >= max_out {
            break;
        }
        if !active[i] {
            continue;
        }
        let bi = &boxes[order[i] * 4..order[i] * 4 + 4];
        kept.push(order[i]);
        for j in i + 1..order.len() {
            if active[j] && corner_iou(bi, &boxes[order[j] * 4..order[j] * 4 + 4]) > p.iou_threshold {
                active[j] = false;
            }
        }
    }
    kept
}

/// Why the post-processing refuses its inputs (LiteRT fails the invocation on each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostProcessError {
    /// A decoded box has `ymin > ymax` or `xmin > xmax` (NaN included).
    InvalidBox(usize),
    /// The IoU threshold is not in (0, 1].
    IouThreshold,
}

/// `TFLite_Detection_PostProcess` after decoding: `boxes` are the decoded corners
/// (four per box), `scores` one row of `classes_with_bg` per box, whose last
/// `num_classes` columns are the classes (a first, background, column when
/// `classes_with_bg == num_classes + 1` is skipped). Writes
/// `max_detections * max_classes_per_detection` rows of `out_boxes` (four
/// each), `out_classes` (class index without background) and `out_scores`;
/// rows past the detections are zero. Returns the number of detections.
///
/// - Fast NMS: each box is ranked by its best class; NMS over those scores keeps
///   up to `max_detections` boxes, each reported with its best
///   `min(max_classes_per_detection, num_classes)` classes (highest first, equal
///   scores in LiteRT's order, see [`top_k_like_litert`]) in its block of
///   `max_classes_per_detection` rows.
/// - Regular NMS: NMS per class keeps up to `detections_per_class` boxes; class
///   by class they are merged with the best so far, keeping the
///   `max_detections` highest scores (a stable merge: on equal scores earlier
///   classes first).
#[allow(clippy::too_many_arguments)]
pub fn detection_postprocess(
    boxes: &[f32],
    scores: &[f32],
    classes_with_bg: usize,
    p: &PostProcessParams,
    out_boxes: &mut [f32],
    out_classes: &mut [f32],
    out_scores: &mut [f32],
) -> Result<usize, PostProcessError> {
    out_boxes.fill(0.0);
    out_classes.fill(0.0);
    out_scores.fill(0.0);
    if !(p.iou_threshold > 0.0 && p.iou_threshold <= 1.0) {
        return Err(PostProcessError::IouThreshold);
    }
    let num_boxes = boxes.len() / 4;
    for (i, b) in boxes.chunks_exact(4).enumerate() {
        // Written so that NaN fails too: a valid box has ymin <= ymax, xmin <= xmax.
        if !(b[0] <= b[2] && b[1] <= b[3]) {
            return Err(PostProcessError::InvalidBox(i));
        }
    }
    let offset = classes_with_bg - p.num_classes;
    let row = |i: usize| &scores[i * classes_with_bg + offset..(i + 1) * classes_with_bg];
    let mut put = |slot: usize, b: usize, class: usize, score: f32| {
        out_boxes[slot * 4..slot * 4 + 4].copy_from_slice(&boxes[b * 4..b * 4 + 4]);
        out_classes[slot] = class as f32;
        out_scores[slot] = score;
    };
    if p.regular_nms {
        // (score, box, class) of the best detections so far, best first.
        let mut best: Vec<(f32, usize, usize)> = Vec::new();
        let mut class_scores = vec![0.0f32; num_boxes];
        for c in 0..p.num_classes {
            for (i, s) in class_scores.iter_mut().enumerate() {
                *s = row(i)[c];
            }
            let kept = single_class_nms(boxes, &class_scores, p, p.detections_per_class);
            best.extend(kept.into_iter().map(|b| (class_scores[b], b, c)));
            best.sort_by(|a, b| rank(b.0).total_cmp(&rank(a.0)));
            best.truncate(p.max_detections);
        }
        for (slot, &(s, b, c)) in best.iter().enumerate() {
            put(slot, b, c, s);
        }
        Ok(best.len())
    } else {
        let per_box = p.max_classes_per_detection.min(p.num_classes);
        let top_classes = |i: usize| top_k_like_litert(row(i), per_box);
        if per_box == 0 {
            return Ok(0);
        }
        let max_scores: Vec<f32> = (0..num_boxes).map(|i| row(i)[top_classes(i)[0]]).collect();
        let kept = single_class_nms(boxes, &max_scores, p, p.max_detections);
        for (k, &b) in kept.iter().enumerate() {
            for (col, c) in top_classes(b).into_iter().enumerate() {
                put(p.max_classes_per_detection * k + col, b, c, row(b)[c]);
            }
        }
        Ok(kept.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_and_soft_suppression() {
        // Three overlapping boxes and one apart.
        let boxes = [0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9, 0.0, 10.0, 1.0, 11.0];
        let scores = [0.9, 0.75, 0.6, 0.95];
        let (mut ix, mut sc) = (vec![-1; 6], vec![-1.0; 6]);
        let n = non_max_suppression(&boxes, &scores, 6, 0.5, 0.0, 0.0, &mut ix, &mut sc);
        assert_eq!((n, &ix[..]), (2, &[3, 0, 0, 0, 0, 0][..]));
        assert_eq!(sc[..2], [0.95, 0.9]);
        // A score threshold above the lower ones.
        let n = non_max_suppression(&boxes, &scores, 6, 1.0, 0.7, 0.0, &mut ix, &mut sc);
        assert_eq!((n, &ix[..3]), (3, &[3, 0, 1][..]));
        // Soft NMS: nothing dropped at threshold 1, scores decay by exp(-iou^2 / (2 sigma)).
        let n = non_max_suppression(&boxes, &scores, 6, 1.0, 0.0, 0.5, &mut ix, &mut sc);
        assert_eq!((n, &ix[..4]), (4, &[3, 0, 1, 2][..]));
        let o = iou(&boxes[0..4], &boxes[4..8]);
        assert!((sc[2] - 0.75 * (-o * o).exp()).abs() < 1e-6, "{sc:?}");
        assert!((o - 0.9 / 1.1).abs() < 1e-6);
        assert_eq!(iou(&[0.0, 0.0, 0.0, 1.0], &boxes[0..4]), 0.0);
    }

    /// Four boxes (0 and 1 overlap by IoU 0.6; 2 and 3 apart), background plus
    /// two classes, decoded from anchors: fast and regular NMS by hand.
    #[test]
    fn detection_postprocess_fast_and_regular() {
        // Anchors (y, x, h, w) with zero encodings decode to the anchors' corners.
        let anchors = [0.5, 0.5, 1.0, 1.0, 0.5, 0.75, 1.0, 1.0, 5.0, 5.0, 1.0, 1.0, 9.0, 9.0, 2.0, 2.0];
        let mut enc = [0.0f32; 4 * 5];
        // Box 3: y shifted by 1 (y / 10 * 2 = 0.2), width doubled (exp(ln 2 * 5 / 5)).
        enc[15] = 10.0 * 0.1;
        enc[18] = 5.0 * std::f32::consts::LN_2;
        let mut boxes = [0.0f32; 16];
        decode_center_size(&enc, 5, &anchors, [10.0, 10.0, 5.0, 5.0], &mut boxes);
        assert_eq!(boxes[..8], [0.0, 0.0, 1.0, 1.0, 0.0, 0.25, 1.0, 1.25]);
        let b3 = &boxes[12..16];
        assert!((b3[0] - 8.2).abs() < 1e-5 && (b3[1] - 7.0).abs() < 1e-5 && (b3[2] - 10.2).abs() < 1e-5 && (b3[3] - 11.0).abs() < 1e-5, "{b3:?}");
        assert!((corner_iou(&boxes[0..4], &boxes[4..8]) - 0.6).abs() < 1e-6);
        #[rustfmt::skip]
        let scores = [
            0.9, 0.8, 0.1,  // box 0: class 0 best
            0.0, 0.7, 0.75, // box 1: class 1 best, overlaps box 0
            0.0, 0.2, 0.3,  // box 2
            0.0, 0.05, 0.6, // box 3
        ];
        let mut p = PostProcessParams {
            max_detections: 3,
            max_classes_per_detection: 2,
            detections_per_class: 2,
            score_threshold: 0.25,
            iou_threshold: 0.5,
            num_classes: 2,
            scale: [10.0, 10.0, 5.0, 5.0],
            regular_nms: false,
        };
        let (mut ob, mut oc, mut os) = (vec![9.0; 24], vec![9.0; 6], vec![9.0; 6]);
        // Fast: best-class scores 0.8, 0.75, 0.3, 0.6; box 1 is suppressed by box 0.
        let n = detection_postprocess(&boxes, &scores, 3, &p, &mut ob, &mut oc, &mut os).unwrap();
        assert_eq!(n, 3);
        assert_eq!(oc, [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]);
        assert_eq!(os, [0.8, 0.1, 0.6, 0.05, 0.3, 0.2]);
        assert_eq!(ob[..8], [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);
        assert_eq!(ob[8..12], boxes[12..16]);
        // Regular: class 0 keeps box 0 (box 1 suppressed; box 2 below the
        // threshold); class 1 keeps boxes 1 and 3 (box 2 at 0.3 is the third).
        p.regular_nms = true;
        let n = detection_postprocess(&boxes, &scores, 3, &p, &mut ob, &mut oc, &mut os).unwrap();
        assert_eq!(n, 3);
        assert_eq!(os, [0.8, 0.75, 0.6, 0.0, 0.0, 0.0]);
        assert_eq!(oc, [0.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(ob[4..8], boxes[4..8]);
        // Without the background column, and a tie broken by order.
        let no_bg: Vec<f32> = scores.chunks(3).flat_map(|r| [r[1], r[1]]).collect();
        p.regular_nms = false;
        p.max_classes_per_detection = 1;
        let n = detection_postprocess(&boxes, &no_bg, 2, &p, &mut ob, &mut oc, &mut os).unwrap();
        assert_eq!((n, &oc[..3], &os[..3]), (1, &[0.0, 0.0, 0.0][..], &[0.8, 0.0, 0.0][..]));
        // Refusals: a box with ymin > ymax, an IoU threshold of 0.
        let mut bad = boxes;
        bad[0] = 2.0;
        assert_eq!(detection_postprocess(&bad, &scores, 3, &p, &mut ob, &mut oc, &mut os), Err(PostProcessError::InvalidBox(0)));
        p.iou_threshold = 0.0;
        assert_eq!(detection_postprocess(&boxes, &scores, 3, &p, &mut ob, &mut oc, &mut os), Err(PostProcessError::IouThreshold));
    }

    /// The class ranking: the top k, highest first, for any input; among equal
    /// scores the order libstdc++'s partial sort gives (worked by hand for these).
    #[test]
    fn top_k_like_litert_ranks() {
        let v = [0.5, 0.9, 0.1, 0.9, 0.7, 0.9];
        assert_eq!(top_k_like_litert(&v, 1), [1]);
        for k in 1..=v.len() {
            let t = top_k_like_litert(&v, k);
            let mut want: Vec<f32> = v.to_vec();
            want.sort_by(|a, b| b.total_cmp(a));
            assert_eq!(t.iter().map(|&i| v[i]).collect::<Vec<_>>(), want[..k], "k={k}");
            let mut seen = t.clone();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), k);
        }
        // Equal scores: making the heap of [0, 1] swaps them (root 1); 2 and 3 do
        // not beat the root; the heap sort swaps them back.
        assert_eq!(top_k_like_litert(&[0.5, 0.5, 0.5, 0.5], 2), [0, 1]);
        // A row of uint8 scores from a generated case where LiteRT reported class 3
        // before class 1 (a stable sort would give 1, 3).
        let row = [234.0 / 256.0, 250.0 / 256.0, 36.0 / 256.0, 250.0 / 256.0];
        assert_eq!(top_k_like_litert(&row, 2), [3, 1]);
        assert_eq!(top_k_like_litert(&[], 3), Vec::<usize>::new());
    }
}
