//! Detection ops: NON_MAX_SUPPRESSION_V4 and V5 (hard and soft NMS over boxes
//! given as `[y1, x1, y2, x2]` corners in any order).

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
}
