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
