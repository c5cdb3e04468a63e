//! Signal ops: RFFT2D (the 2-D discrete Fourier transform of real input, the
//! non-negative frequencies of the last dimension) and the parts of complex64
//! values (COMPLEX_ABS, REAL, IMAG). Complex values are `[re, im]` float32 pairs.

/// RFFT2D of `batch` real matrices `[rows, cols]` (`input`), each cropped or
/// zero-padded to `[fft_rows, fft_cols]`, into `[fft_rows, fft_cols / 2 + 1]`
/// complex values per matrix (`out` holds `re, im` pairs):
/// `X[k, l] = sum over (m, n) of x[m, n] * exp(-2 pi i (k m / fft_rows + l n / fft_cols))`.
/// Computed as row transforms then column transforms, accumulated in f64 with
/// twiddles from exact angles, so the result is as accurate as float32 can hold.
pub fn rfft2d(input: &[f32], batch: usize, rows: usize, cols: usize, fft_rows: usize, fft_cols: usize, out: &mut [f32]) {
    let half = fft_cols / 2 + 1;
    let (r, c) = (rows.min(fft_rows), cols.min(fft_cols));
    // exp(-2 pi i j / n), indexed by j = (frequency * position) mod n.
    let tw = |j: usize, n: usize| {
        let a = -2.0 * std::f64::consts::PI * j as f64 / n as f64;
        (a.cos(), a.sin())
    };
    let col_tw: Vec<(f64, f64)> = (0..fft_cols).map(|j| tw(j, fft_cols)).collect();
    let row_tw: Vec<(f64, f64)> = (0..fft_rows).map(|j| tw(j, fft_rows)).collect();
    // Row transforms of the rows that hold data (padded rows transform to zero).
    let mut rowf = vec![(0.0f64, 0.0f64); r * half];
    for b in 0..batch {
        let x = &input[b * rows * cols..(b + 1) * rows * cols];
        for m in 0..r {
            for l in 0..half {
                let mut acc = (0.0, 0.0);
                for n in 0..c {
                    let (co, si) = col_tw[(l * n) % fft_cols];
                    let v = f64::from(x[m * cols + n]);
                    acc.0 += v * co;
                    acc.1 += v * si;
                }
                rowf[m * half + l] = acc;
            }
        }
        let o = &mut out[b * fft_rows * half * 2..(b + 1) * fft_rows * half * 2];
        for k in 0..fft_rows {
            for l in 0..half {
                let mut acc = (0.0, 0.0);
                for m in 0..r {
                    let (co, si) = row_tw[(k * m) % fft_rows];
                    let (re, im) = rowf[m * half + l];
                    acc.0 += re * co - im * si;
                    acc.1 += re * si + im * co;
                }
                o[(k * half + l) * 2] = acc.0 as f32;
                o[(k * half + l) * 2 + 1] = acc.1 as f32;
            }
        }
    }
}

/// Which part of a complex value COMPLEX_ABS, REAL and IMAG take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComplexPart {
    /// `|z|` (computed without overflow in the squares).
    Abs,
    /// The real part.
    Real,
    /// The imaginary part.
    Imag,
}

/// One float32 per complex value of `z` (`re, im` pairs).
pub fn complex_part(part: ComplexPart, z: &[f32], out: &mut [f32]) {
    for (o, p) in out.iter_mut().zip(z.chunks_exact(2)) {
        *o = match part {
            ComplexPart::Abs => p[0].hypot(p[1]),
            ComplexPart::Real => p[0],
            ComplexPart::Imag => p[1],
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn rfft2d_matches_the_direct_sum() {
        let mut r = Rng::new(31);
        for _ in 0..30 {
            let (batch, rows, cols) = (r.size(1, 2), r.size(1, 6), r.size(1, 9));
            let (fr, fc) = ([1, 2, 4, 8][r.size(0, 3)], [1, 2, 4, 8, 16][r.size(0, 4)]);
            let x: Vec<f32> = (0..batch * rows * cols).map(|_| r.size(0, 200) as f32 / 50.0 - 2.0).collect();
            let half = fc / 2 + 1;
            let mut out = vec![0.0; batch * fr * half * 2];
            rfft2d(&x, batch, rows, cols, fr, fc, &mut out);
            for b in 0..batch {
                for k in 0..fr {
                    for l in 0..half {
                        let (mut re, mut im) = (0.0f64, 0.0f64);
                        for m in 0..rows.min(fr) {
                            for n in 0..cols.min(fc) {
                                let a = -2.0 * std::f64::consts::PI * (k as f64 * m as f64 / fr as f64 + l as f64 * n as f64 / fc as f64);
                                let v = f64::from(x[(b * rows + m) * cols + n]);
                                re += v * a.cos();
                                im += v * a.sin();
                            }
                        }
                        let at = ((b * fr + k) * half + l) * 2;
                        assert!(
                            (f64::from(out[at]) - re).abs() < 1e-4 && (f64::from(out[at + 1]) - im).abs() < 1e-4,
                            "{k} {l}: {} {} vs {re} {im}",
                            out[at],
                            out[at + 1]
                        );
                    }
                }
            }
        }
        let mut o = [0.0; 3];
        complex_part(ComplexPart::Abs, &[3.0, -4.0, 0.0, 1.0, -2.0, 0.0], &mut o);
        assert_eq!(o, [5.0, 1.0, 2.0]);
        complex_part(ComplexPart::Imag, &[3.0, -4.0, 0.0, 1.0, -2.0, 0.0], &mut o);
        assert_eq!(o, [-4.0, 1.0, 0.0]);
    }
}
