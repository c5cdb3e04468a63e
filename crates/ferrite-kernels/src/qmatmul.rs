//! Integer BATCH_MATMUL (int8, int16) with LiteRT's numerics: zero-point-corrected
//! dot products, one fixed-point rescale per output.

use crate::quant::{multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_i64};

/// Shapes and quantization of an integer batched matrix product
/// `out[p] = a[ia[p]] x b[ib[p]]`, each matrix row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QMatMul {
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
    /// Zero point of the left operand (0 for int16).
    pub a_zp: i32,
    /// Zero point of the right operand (0 for int16).
    pub b_zp: i32,
    /// Output zero point (0 for int16).
    pub out_zp: i32,
    /// Fixed-point multiplier of `a_scale * b_scale / out_scale`.
    pub multiplier: i32,
    /// Its shift.
    pub shift: i32,
}

/// int8 BATCH_MATMUL: for output batch `p`, left matrix `ia[p]` and right matrix
/// `ib[p]` (broadcast batches repeat an index), `out = clamp(rescale(sum (a - a_zp) *
/// (b - b_zp)) + out_zp)` with TFLite's double rounding.
pub fn batch_matmul_i8(a: &[i8], b: &[i8], ia: &[usize], ib: &[usize], q: &QMatMul, out: &mut [i8]) {
    let QMatMul { m, k, n, adj_x, adj_y, a_zp: za, b_zp: zb, out_zp: zo, multiplier: mult, shift } = *q;
    for (p, (&pa, &pb)) in ia.iter().zip(ib).enumerate() {
        let (asl, bsl) = (&a[pa * m * k..][..m * k], &b[pb * k * n..][..k * n]);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0i32;
                for kk in 0..k {
                    let x = asl[if adj_x { kk * m + i } else { i * k + kk }];
                    let y = bsl[if adj_y { j * k + kk } else { kk * n + j }];
                    acc += (i32::from(x) - za) * (i32::from(y) - zb);
                }
                let v = multiply_by_quantized_multiplier(acc, mult, shift) + zo;
                out[(p * m + i) * n + j] = v.clamp(-128, 127) as i8;
            }
        }
    }
}

/// int16 BATCH_MATMUL (zero points 0): 64-bit sums rescaled with the 16-bit
/// reduced multiplier ([`multiply_by_quantized_multiplier_i64`]), as LiteRT's
/// int16 kernel (measured: the full multiplier is off by one LSB at times).
pub fn batch_matmul_i16(a: &[i16], b: &[i16], ia: &[usize], ib: &[usize], q: &QMatMul, out: &mut [i16]) {
    let QMatMul { m, k, n, adj_x, adj_y, multiplier: mult, shift, .. } = *q;
    for (p, (&pa, &pb)) in ia.iter().zip(ib).enumerate() {
        let (asl, bsl) = (&a[pa * m * k..][..m * k], &b[pb * k * n..][..k * n]);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0i64;
                for kk in 0..k {
                    let x = asl[if adj_x { kk * m + i } else { i * k + kk }];
                    let y = bsl[if adj_y { j * k + kk } else { kk * n + j }];
                    acc += i64::from(i32::from(x) * i32::from(y));
                }
                let v = multiply_by_quantized_multiplier_i64(acc, mult, shift);
                out[(p * m + i) * n + j] = v.clamp(-32768, 32767) as i16;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{mbqm_ref, multiplier, Rng};

    /// A random problem: shapes (odd, 1, larger), transposes, broadcast batch
    /// indices, and its operands.
    struct Case {
        q: QMatMul,
        ia: Vec<usize>,
        ib: Vec<usize>,
        na: usize,
        nb: usize,
    }

    fn case(rng: &mut Rng) -> Case {
        let (m, k, n) = (rng.dim(), rng.dim(), rng.dim());
        let (na, nb) = (rng.size(1, 3), rng.size(1, 3));
        let batches = rng.size(0, 5);
        let ia = (0..batches).map(|_| rng.size(0, na - 1)).collect();
        let ib = (0..batches).map(|_| rng.size(0, nb - 1)).collect();
        let (multiplier, shift) = multiplier(rng);
        let q = QMatMul { m, k, n, adj_x: rng.one_in(2), adj_y: rng.one_in(2), a_zp: 0, b_zp: 0, out_zp: 0, multiplier, shift };
        Case { q, ia, ib, na, nb }
    }

    /// Element (i, kk) of left matrix `p` and (kk, j) of right matrix `p`, read by
    /// the definition of the stored layout.
    fn left<T: Copy>(a: &[T], q: &QMatMul, p: usize, i: usize, kk: usize) -> T {
        let base = p * q.m * q.k;
        if q.adj_x {
            a[base + kk * q.m + i]
        } else {
            a[base + i * q.k + kk]
        }
    }

    fn right<T: Copy>(b: &[T], q: &QMatMul, p: usize, kk: usize, j: usize) -> T {
        let base = p * q.k * q.n;
        if q.adj_y {
            b[base + j * q.k + kk]
        } else {
            b[base + kk * q.n + j]
        }
    }

    #[test]
    fn int8_matches_the_definition() {
        let mut rng = Rng::new(21);
        for round in 0..400 {
            let Case { mut q, ia, ib, na, nb } = case(&mut rng);
            // Shifts above 8 would overflow the rescaled 32-bit sums here (real
            // multipliers are below 1); up to 8 they still saturate the output.
            q.shift = q.shift.min(8);
            // Zero points anywhere in (and at the ends of) the int8 range; small
            // multipliers keep the sums in range, large ones saturate the output.
            q.a_zp = if rng.one_in(4) { [-128, 127][rng.size(0, 1)] } else { rng.range(-128, 127) as i32 };
            q.b_zp = rng.range(-128, 127) as i32;
            q.out_zp = rng.range(-128, 127) as i32;
            let a: Vec<i8> = rng.ints(na * q.m * q.k, -128, 127).into_iter().map(|v| v as i8).collect();
            let b: Vec<i8> = rng.ints(nb * q.k * q.n, -128, 127).into_iter().map(|v| v as i8).collect();
            let mut got = vec![0i8; ia.len() * q.m * q.n];
            batch_matmul_i8(&a, &b, &ia, &ib, &q, &mut got);
            for (p, (&pa, &pb)) in ia.iter().zip(&ib).enumerate() {
                for i in 0..q.m {
                    for j in 0..q.n {
                        let mut sum = 0i64;
                        for kk in 0..q.k {
                            sum += (i64::from(left(&a, &q, pa, i, kk)) - i64::from(q.a_zp)) * (i64::from(right(&b, &q, pb, kk, j)) - i64::from(q.b_zp));
                        }
                        let want = (i64::from(mbqm_ref(sum as i32, q.multiplier, q.shift)) + i64::from(q.out_zp)).clamp(-128, 127);
                        assert_eq!(i64::from(got[(p * q.m + i) * q.n + j]), want, "round {round} {q:?} batch {p} ({i}, {j})");
                    }
                }
            }
        }
    }

    /// The 16-bit reduced multiplier, from its definition: the 31-bit multiplier
    /// rounded (half up) to 15 bits, saturating, then one rounding (half up) of
    /// `x * reduced / 2^(15 - shift)`, narrowed to 32 bits as LiteRT's result is.
    fn reduced_ref(x: i64, multiplier: i32, shift: i32) -> i64 {
        let reduced = ((i64::from(multiplier) + (1 << 15)) >> 16).min(32767);
        let total = 15 - shift;
        i64::from((i128::from(x) * i128::from(reduced) + (1i128 << (total - 1))).div_euclid(1i128 << total) as i32)
    }

    #[test]
    fn int16_matches_the_definition() {
        let mut rng = Rng::new(22);
        for round in 0..400 {
            let Case { mut q, ia, ib, na, nb } = case(&mut rng);
            // int16 shifts are at most 7 (checked at prepare).
            q.shift = q.shift.min(7);
            let extreme = rng.one_in(3);
            let value = |rng: &mut Rng| if extreme { [-32768, 32767][rng.size(0, 1)] } else { rng.range(-32768, 32767) };
            let a: Vec<i16> = (0..na * q.m * q.k).map(|_| value(&mut rng) as i16).collect();
            let b: Vec<i16> = (0..nb * q.k * q.n).map(|_| value(&mut rng) as i16).collect();
            let mut got = vec![0i16; ia.len() * q.m * q.n];
            batch_matmul_i16(&a, &b, &ia, &ib, &q, &mut got);
            for (p, (&pa, &pb)) in ia.iter().zip(&ib).enumerate() {
                for i in 0..q.m {
                    for j in 0..q.n {
                        let sum: i64 = (0..q.k).map(|kk| i64::from(left(&a, &q, pa, i, kk)) * i64::from(right(&b, &q, pb, kk, j))).sum();
                        let want = reduced_ref(sum, q.multiplier, q.shift).clamp(-32768, 32767);
                        assert_eq!(i64::from(got[(p * q.m + i) * q.n + j]), want, "round {round} {q:?} batch {p} ({i}, {j})");
                    }
                }
            }
        }
    }
}
