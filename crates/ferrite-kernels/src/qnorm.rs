//! LOG_SOFTMAX and L2_NORMALIZATION on int8 / uint8, bit-exact with LiteRT's
//! builtin kernels. Both have a fixed output quantization (checked by callers):
//! log-softmax 16/256 with the zero point at the type's top (127 / 255), so the
//! range covers [-16, 0]; L2 normalization 1/128 with the zero point in the
//! middle (0 / 128), covering [-1, 1).

use crate::qactivation::inv_sqrt_multiplier;
use crate::quant::{multiply_by_quantized_multiplier, QuantInt};

/// Parameters of an int8 / uint8 LOG_SOFTMAX as LiteRT's builtin kernel runs it:
/// `exp(-input_scale * d)` from a float table for each distance `d` from the row's
/// maximum, their float sum in order, its natural log, and each output
/// `rint(x * in_scale / out_scale - (in_scale * max + log(sum)) / out_scale) + zp`
/// in single precision (ties to even).
#[derive(Debug, Clone, PartialEq)]
pub struct LogSoftmaxQ8 {
    /// `table[255 - d] = exp(-input_scale * d)`.
    table: [f32; 256],
    /// Input scale.
    in_scale: f32,
    /// Output scale (LiteRT requires 16/256).
    out_scale: f32,
    /// Output zero point (LiteRT requires the type's maximum).
    out_zp: i32,
}

impl LogSoftmaxQ8 {
    /// The table for `in_scale` (the product taken in single precision).
    pub fn new(in_scale: f32, out_scale: f32, out_zp: i32) -> LogSoftmaxQ8 {
        let scale = -in_scale;
        let mut table = [0.0f32; 256];
        for v in 0..256usize {
            table[255 - v] = (scale * v as f32).exp();
        }
        LogSoftmaxQ8 { table, in_scale, out_scale, out_zp }
    }
}

/// int8 / uint8 LOG_SOFTMAX over rows of `n` (see [`LogSoftmaxQ8`]); a trailing
/// partial row is left alone.
pub fn log_softmax_q8<T: QuantInt>(input: &[T], n: usize, p: &LogSoftmaxQ8, out: &mut [T]) {
    if n == 0 {
        return;
    }
    let ratio = p.in_scale / p.out_scale;
    for (row, orow) in input.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let max = row.iter().map(|&v| v.widen()).max().unwrap_or(0);
        // Indexed by distance from the maximum (0..=255 for 8-bit values), so no
        // exp overflows and the maximum contributes exactly 1.
        let sum: f32 = row.iter().fold(0.0f32, |s, &v| s + p.table[(255 - max + v.widen()) as usize]);
        let offset = (p.in_scale * max as f32 + sum.ln()) / p.out_scale;
        for (o, &v) in orow.iter_mut().zip(row) {
            let q = (ratio * v.widen() as f32 - offset).round_ties_even() as i32;
            *o = T::narrow(q.saturating_add(p.out_zp).clamp(T::MIN, T::MAX));
        }
    }
}

/// Output zero point of an int8 / uint8 L2_NORMALIZATION (LiteRT requires it).
pub fn l2_output_zero_point<T: QuantInt>() -> i32 {
    // The middle of the type: 0 for int8, 128 for uint8.
    (T::MIN + T::MAX + 1) / 2
}

/// int8 / uint8 L2_NORMALIZATION over rows of `depth`, as LiteRT: the row's sum of
/// squared differences from `in_zp` in int32 (wrapping like LiteRT's, reachable
/// only past 33 000 elements a row), its inverse square root as a fixed-point
/// multiplier ([`inv_sqrt_multiplier`]; a zero row counts as 1), and each
/// difference rescaled to the output's 1/128 steps. int8 scales `diff` by 2^7 in
/// the shift (one rounding); uint8 multiplies `128 * diff` first, then rounds the
/// high product and the shift separately and adds 128, as LiteRT's two kernels do.
pub fn l2_normalize_q8<T: QuantInt>(input: &[T], depth: usize, in_zp: i32, out: &mut [T]) {
    if depth == 0 {
        return;
    }
    let zp = l2_output_zero_point::<T>();
    let unsigned = T::MIN == 0;
    for (row, orow) in input.chunks_exact(depth).zip(out.chunks_exact_mut(depth)) {
        let sq = row.iter().fold(0i32, |s, &v| {
            let d = v.widen() - in_zp;
            s.wrapping_add(d.wrapping_mul(d))
        });
        // A wrapped (negative) sum is treated as LiteRT's `input <= 1` case.
        let (m, shift) = inv_sqrt_multiplier(sq);
        for (o, &v) in orow.iter_mut().zip(row) {
            let d = v.widen() - in_zp;
            let y = if unsigned { multiply_by_quantized_multiplier(d.wrapping_mul(128), m, shift) } else { multiply_by_quantized_multiplier(d, m, shift + 7) };
            *o = T::narrow(y.saturating_add(zp).clamp(T::MIN, T::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn int(&mut self, lo: i32, hi: i32) -> i32 {
            lo + (self.next() % (hi - lo + 1) as u64) as i32
        }
    }

    /// Log-softmax in double precision, quantized: the kernel's single-precision
    /// result may differ by one step only where the exact value is near a tie.
    fn log_softmax_close<T: QuantInt>(rng: &mut Rng, from: fn(i32) -> T, zp: i32) {
        for _ in 0..300 {
            let n = rng.int(1, 13) as usize;
            let rows = rng.int(1, 3) as usize;
            let in_scale = 0.005 + rng.int(0, 1000) as f32 * 1e-4;
            let x: Vec<i32> = (0..n * rows).map(|_| rng.int(T::MIN, T::MAX)).collect();
            let xt: Vec<T> = x.iter().map(|&v| from(v)).collect();
            let mut o = vec![from(0); n * rows];
            log_softmax_q8(&xt, n, &LogSoftmaxQ8::new(in_scale, 16.0 / 256.0, zp), &mut o);
            for (row, orow) in x.chunks(n).zip(o.chunks(n)) {
                let r: Vec<f64> = row.iter().map(|&v| f64::from(in_scale) * f64::from(v)).collect();
                let max = r.iter().cloned().fold(f64::MIN, f64::max);
                let lse = max + r.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
                for (&v, &q) in r.iter().zip(orow) {
                    let want = ((v - lse) / (16.0 / 256.0)).round() + f64::from(zp);
                    let want = want.clamp(f64::from(T::MIN), f64::from(T::MAX)) as i32;
                    assert!((q.widen() - want).abs() <= 1, "n {n} scale {in_scale}: {} vs {want}", q.widen());
                }
                // The row's maximum has the largest log-probability.
                let at_max = row.iter().zip(orow).filter(|(&v, _)| v == *row.iter().max().unwrap()).map(|(_, q)| q.widen());
                assert!(at_max.clone().all(|m| orow.iter().all(|q| q.widen() <= m)));
            }
        }
    }

    #[test]
    fn log_softmax_int8_and_uint8() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        log_softmax_close::<i8>(&mut rng, |v| v as i8, 127);
        log_softmax_close::<u8>(&mut rng, |v| v as u8, 255);
    }

    #[test]
    fn log_softmax_single_element_is_zero() {
        // log(1) = 0: the output is the zero point whatever the input.
        let mut o = [0i8; 3];
        log_softmax_q8(&[-128i8, 5, 127], 1, &LogSoftmaxQ8::new(0.1, 16.0 / 256.0, 127), &mut o);
        assert_eq!(o, [127; 3]);
        let mut o = [0u8; 2];
        log_softmax_q8(&[0u8, 200], 1, &LogSoftmaxQ8::new(0.1, 16.0 / 256.0, 255), &mut o);
        assert_eq!(o, [255; 2]);
        // Two equal values: log(1/2) / (1/16) = -11.09 steps.
        let mut o = [0i8; 2];
        log_softmax_q8(&[3i8, 3], 2, &LogSoftmaxQ8::new(0.1, 16.0 / 256.0, 127), &mut o);
        assert_eq!(o, [116; 2]);
    }

    fn l2_close<T: QuantInt>(rng: &mut Rng, from: fn(i32) -> T) {
        let zp = l2_output_zero_point::<T>();
        for _ in 0..300 {
            let depth = rng.int(1, 17) as usize;
            let in_zp = rng.int(T::MIN, T::MAX);
            let x: Vec<i32> = (0..depth * 2).map(|_| rng.int(T::MIN, T::MAX)).collect();
            let xt: Vec<T> = x.iter().map(|&v| from(v)).collect();
            let mut o = vec![from(0); depth * 2];
            l2_normalize_q8(&xt, depth, in_zp, &mut o);
            for (row, orow) in x.chunks(depth).zip(o.chunks(depth)) {
                let d: Vec<f64> = row.iter().map(|&v| f64::from(v - in_zp)).collect();
                let norm = d.iter().map(|v| v * v).sum::<f64>().sqrt();
                for (&v, &q) in d.iter().zip(orow) {
                    // A zero row divides by 1 (LiteRT's guard), giving 128 * 0.
                    let want = (v / norm.max(1.0) * 128.0).round() + f64::from(zp);
                    let want = want.clamp(f64::from(T::MIN), f64::from(T::MAX)) as i32;
                    assert!((q.widen() - want).abs() <= 1, "depth {depth}: {} vs {want}", q.widen());
                }
            }
        }
    }

    #[test]
    fn l2_normalization_int8_and_uint8() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        l2_close::<i8>(&mut rng, |v| v as i8);
        l2_close::<u8>(&mut rng, |v| v as u8);
    }

    #[test]
    fn l2_normalization_exact_cases() {
        // (3, 4) / 5 = (0.6, 0.8): 76.8 and 102.4 steps of 1/128.
        let mut o = [0i8; 2];
        l2_normalize_q8(&[3i8, 4], 2, 0, &mut o);
        assert_eq!(o, [77, 102]);
        let mut o = [0u8; 2];
        l2_normalize_q8(&[131u8, 124], 2, 128, &mut o);
        assert_eq!(o, [128 + 77, 128 - 102]);
        // A single element normalizes to +1, saturating at 127/128.
        let mut o = [0i8; 1];
        l2_normalize_q8(&[-20i8], 1, -30, &mut o);
        assert_eq!(o, [127]);
        assert_eq!(l2_output_zero_point::<i8>(), 0);
        assert_eq!(l2_output_zero_point::<u8>(), 128);
    }
}
