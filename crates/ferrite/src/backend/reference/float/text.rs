//! HASHTABLE_LOOKUP and LSH_PROJECTION written from their definitions: a linear
//! search for each key, and each sign bit as the sum over input rows of the
//! signed fingerprint of (seed bytes, row bytes). The shape checks are the CPU
//! builders' (they are the op's contract, not an optimization); the hash is
//! FarmHash's Fingerprint64, which defines the op's result.

use ferrite_kernels::text::fingerprint64;

use super::{input, output, runtime};
use crate::backend::cpu::text::{hashtable_lookup_shapes, lsh_shapes};
use crate::backend::{arg, Built, OpContext};
use crate::error::Result;
use crate::model::DType;

/// HASHTABLE_LOOKUP: output row `i` is the value row of the key equal to
/// `lookup[i]` (hit 1), or zeros (hit 0) when no key equals it.
pub(crate) fn hashtable_lookup(op: &OpContext<'_>) -> Result<Built> {
    let (out, row, dtype) = hashtable_lookup_shapes(op)?;
    let (n, n_keys) = (op.input(0)?.shape[0], op.input(1)?.shape[0]);
    Ok(Built {
        outputs: vec![(dtype, out), (DType::U8, vec![n])],
        kernel: Box::new(move |ins, outs| {
            let (lookup, keys, values) = (input::<i32>(ins, 0, n)?, input::<i32>(ins, 1, n_keys)?, input::<u8>(ins, 2, n_keys * row)?);
            let found: Vec<Option<usize>> = lookup.iter().map(|id| keys.iter().position(|k| k == id)).collect();
            let o = output::<u8>(outs, 0, n * row)?;
            for (i, f) in found.iter().enumerate() {
                for b in 0..row {
                    o[i * row + b] = f.map_or(0, |k| values[k * row + b]);
                }
            }
            let hits = output::<u8>(outs, 1, n)?;
            for (h, f) in hits.iter_mut().zip(&found) {
                *h = u8::from(f.is_some());
            }
            Ok(())
        }),
    })
}

/// LSH_PROJECTION: bit `(i, j)` is 1 when the (weighted) sum over input rows `r`
/// of `fingerprint64(seed[i][j] bytes ++ row r bytes)`, read as a signed 64-bit
/// integer, is positive. Dense: the bits; sparse: per function `i` the bits read
/// as a binary number (first bit highest) plus `i * 2^num_bits`.
pub(crate) fn lsh_projection(op: &OpContext<'_>) -> Result<Built> {
    let (num_hash, num_bits, rows, row, sparse, out) = lsh_shapes(op)?;
    let weighted = op.opt_input(2).is_some();
    let n_out = out[0];
    Ok(Built {
        outputs: vec![(DType::I32, out)],
        kernel: Box::new(move |ins, outs| {
            let hash = input::<f32>(ins, 0, num_hash * num_bits)?;
            let x = arg(ins, 1)?.get(..rows * row).ok_or_else(|| runtime("LSH_PROJECTION input is short"))?;
            let weight = if weighted { Some(input::<f32>(ins, 2, rows)?) } else { None };
            let bit = |seed: f32| -> i64 {
                let mut score = 0.0f64;
                for r in 0..rows {
                    let key: Vec<u8> = seed.to_le_bytes().iter().chain(&x[r * row..(r + 1) * row]).copied().collect();
                    let h = fingerprint64(&key) as i64 as f64;
                    score += weight.map_or(h, |w| f64::from(w[r]) * h);
                }
                i64::from(score > 0.0)
            };
            let o = output::<i32>(outs, 0, n_out)?;
            for i in 0..num_hash {
                let bits: Vec<i64> = (0..num_bits).map(|j| bit(hash[i * num_bits + j])).collect();
                if sparse {
                    let value = bits.iter().fold(0i64, |acc, b| acc * 2 + b) + ((i as i64) << (num_bits % 32));
                    // The sum is taken in 32-bit arithmetic, as LiteRT's int32 output holds it.
                    o[i] = value as i32;
                } else {
                    for (j, b) in bits.iter().enumerate() {
                        o[i * num_bits + j] = *b as i32;
                    }
                }
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use crate::backend::reference::float_test_util::{f32_const, f32_input, i32_const, raw_input, Rng, TestOp};
    use crate::model::DType;
    use crate::ops::OpParams;
    use ferrite_format::ops::BuiltinOp as B;

    /// Both kernels on random cases: keys that hit and miss, values of 1- and
    /// 4-byte types; sparse and dense projections of float and int8 inputs, with
    /// and without weights. Integer outputs compared byte for byte.
    #[test]
    fn random_text_ops_match_cpu() {
        let mut r = Rng::new(0x7e47);
        for _ in 0..60 {
            let n_keys = r.range(1, 6);
            let mut keys: Vec<i32> = (0..n_keys).map(|k| k as i32 * 3 - 4 + r.below(3) as i32).collect();
            keys.dedup();
            let lookup: Vec<i32> = (0..r.range(1, 6)).map(|_| r.below(20) as i32 - 6).collect();
            let row = r.range(1, 3);
            let values = f32_input(&[keys.len(), row], &r.floats(keys.len() * row));
            let ids = raw_input(DType::I32, &[lookup.len()], lookup.iter().flat_map(|v| v.to_le_bytes()).collect());
            let t = TestOp::typed(B::HASHTABLE_LOOKUP, OpParams::None, vec![ids.clone(), i32_const(&[keys.len()], &keys), values], vec![DType::F32, DType::U8]);
            t.compare_with_cpu(0.0, "hashtable_lookup float");
            let bytes = raw_input(DType::I8, &[keys.len()], (0..keys.len()).map(|_| r.next() as u8).collect());
            let t = TestOp::typed(B::HASHTABLE_LOOKUP, OpParams::None, vec![ids, i32_const(&[keys.len()], &keys), bytes], vec![DType::I8, DType::U8]);
            t.compare_with_cpu(0.0, "hashtable_lookup int8");

            let (num_hash, num_bits, rows) = (r.range(1, 4), r.range(1, 12), r.range(1, 5));
            let seeds: Vec<f32> = r.floats(num_hash * num_bits).iter().map(|s| s * 50.0).collect();
            let input = if r.coin() {
                f32_input(&[rows, 2], &r.floats(rows * 2))
            } else {
                raw_input(DType::I8, &[rows, 3], (0..rows * 3).map(|_| r.next() as u8).collect())
            };
            let mut ins = vec![f32_const(&[num_hash, num_bits], &seeds), input];
            if r.coin() {
                ins.push(f32_const(&[rows], &r.floats(rows)));
            }
            let kind = 1 + r.below(2) as i8;
            let t = TestOp::typed(B::LSH_PROJECTION, OpParams::LshProjection { kind }, ins, vec![DType::I32]);
            t.compare_with_cpu(0.0, "lsh_projection");
        }
    }

    /// An unknown projection type (0) and seeds of another type are refused.
    #[test]
    fn lsh_projection_refuses_unknown_types() {
        let x = f32_input(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let t = TestOp::typed(B::LSH_PROJECTION, OpParams::LshProjection { kind: 0 }, vec![f32_const(&[1, 2], &[0.5, 1.5]), x.clone()], vec![DType::I32]);
        assert!(t.reference().is_err() && t.cpu().is_err());
        let t = TestOp::typed(B::LSH_PROJECTION, OpParams::LshProjection { kind: 1 }, vec![i32_const(&[1, 2], &[1, 2]), x], vec![DType::I32]);
        assert!(t.reference().is_err() && t.cpu().is_err());
    }
}
