//! Softmax and log-softmax over the last dimension.

/// `out = softmax(beta * x)` row by row, rows of length `n`.
pub fn softmax(input: &[f32], n: usize, beta: f32, out: &mut [f32]) {
    for (x, o) in input.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut s = 0.0;
        for (ov, &v) in o.iter_mut().zip(x) {
            *ov = ((v - m) * beta).exp();
            s += *ov;
        }
        let inv = 1.0 / s;
        for ov in o.iter_mut() {
            *ov *= inv;
        }
    }
}

/// `out = log_softmax(x)` row by row.
pub fn log_softmax(input: &[f32], n: usize, out: &mut [f32]) {
    for (x, o) in input.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let s: f32 = x.iter().map(|&v| (v - m).exp()).sum();
        let ls = s.ln();
        for (ov, &v) in o.iter_mut().zip(x) {
            *ov = v - m - ls;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn softmax_sums_to_one() {
        let mut o = [0.0; 4];
        super::softmax(&[1.0, 2.0, 3.0, 4.0], 4, 1.0, &mut o);
        assert!((o.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}
