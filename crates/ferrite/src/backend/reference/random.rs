//! Reference kernels of the random ops and the TensorFlow 1 feature ops, written
//! from their definitions:
//! - RANDOM_UNIFORM / RANDOM_STANDARD_NORMAL: output element `i` comes from word
//!   `i % 4` of the stream's block `i / 4` (each block computed on its own from the
//!   counter, rather than streamed), normals as Box–Muller pairs of a block's words;
//! - MULTINOMIAL: sample `j` of row `b` is pair `b * samples + j` of the words, the
//!   class found by walking the cumulative mass;
//! - BUCKETIZE counts the boundaries at or below each value; FAKE_QUANT applies the
//!   nudged quantization formula per element; EMBEDDING_LOOKUP_SPARSE sums each run
//!   of lookups at one position in f64.
//!
//! - STABLEHLO_RNG_BIT_GENERATOR: word `i` is word `i % n` of block `i / n` (n = 4
//!   for Philox, 2 for Threefry), each block computed on its own from the counter
//!   `state[1] + i / n` (mod 2^64); the next state's counter is the first block
//!   not used.
//!
//! The random ops share the session's stream with the CPU backend's kernels
//! ([`BackendContext::op_state`]), so either backend continues it.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::random::{box_muller, philox4x32_10, threefry2x32_20, uint32_to_float, uint64_to_double, RngAlgorithm};

use crate::backend::cpu::{feature, random};
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::{DType, OpCode};

fn runtime(msg: impl Into<String>) -> Error {
    Error::Runtime(msg.into().into())
}

/// The reference kernels of these ops; `None` for other ops.
pub(super) fn build(op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    let OpCode::Builtin(code) = op.op.code else { return None };
    Some(match code {
        B::RANDOM_UNIFORM | B::RANDOM_STANDARD_NORMAL => fill(op, ctx, code == B::RANDOM_STANDARD_NORMAL),
        B::MULTINOMIAL => multinomial(op, ctx),
        B::STABLEHLO_RNG_BIT_GENERATOR => random::bit_generator(op).map(|(g, outs)| g.kernel(outs, bit_words)),
        B::BUCKETIZE => bucketize(op),
        B::FAKE_QUANT => fake_quant(op),
        B::EMBEDDING_LOOKUP_SPARSE => embedding_lookup_sparse(op),
        _ => return None,
    })
}

/// STABLEHLO_RNG_BIT_GENERATOR's words from the definition, block by block.
fn bit_words(algorithm: RngAlgorithm, state: &[u64], next: &mut [u64], words: &mut [u32]) -> std::result::Result<(), String> {
    let halves = |v: u64| [v as u32, (v >> 32) as u32];
    let (&key, &counter) = match state {
        [k, c] | [k, c, _] => (k, c),
        _ => return Err(format!("a state of {} values", state.len())),
    };
    // Philox's counter high half: the third value, or with a two-value state the key.
    let high = halves(*state.get(2).unwrap_or(&key));
    let per_block: usize = if algorithm == RngAlgorithm::Philox { 4 } else { 2 };
    for (i, w) in words.iter_mut().enumerate() {
        let c = halves(counter.wrapping_add((i / per_block) as u64));
        *w = match algorithm {
            RngAlgorithm::Philox => philox4x32_10(halves(key), [c[0], c[1], high[0], high[1]])[i % 4],
            RngAlgorithm::Threefry => threefry2x32_20(halves(key), c)[i % 2],
        };
    }
    if next.len() != state.len() {
        return Err("next state of another length".into());
    }
    next.copy_from_slice(state);
    next[1] = counter.wrapping_add(words.len().div_ceil(per_block) as u64);
    Ok(())
}

fn fill(op: &OpContext<'_>, ctx: &mut BackendContext, normal: bool) -> Result<Built> {
    let rng = random::stream(op, ctx)?;
    if op.outputs.first().is_some_and(|t| t.dtype != DType::F32) {
        return Err(op.unsupported("random output other than float32 (LiteRT's kernel makes float32 only)"));
    }
    let shape = random::shape_from_input(op)?;
    let n = op.checked_elements(&shape, 4)?;
    Ok(Built {
        outputs: vec![(DType::F32, shape)],
        kernel: Box::new(move |_, outs| {
            let o = typed_mut::<f32>(outs[0])?;
            if o.len() != n {
                return Err(runtime("random output of the wrong size"));
            }
            let mut rng = rng.lock().map_err(|_| runtime("random stream poisoned by a failed run"))?;
            for (i, v) in o.iter_mut().enumerate() {
                let block = rng.block_at((i / 4) as u64);
                *v = if normal {
                    let pair = i % 4 / 2 * 2;
                    let (a, b) = box_muller(block[pair], block[pair + 1]);
                    if i % 2 == 0 {
                        a
                    } else {
                        b
                    }
                } else {
                    uint32_to_float(block[i % 4])
                };
            }
            rng.skip(n.div_ceil(4) as u64);
            Ok(())
        }),
    })
}

fn multinomial(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    // The CPU builder's checks (types, ranks, num_samples) and output shape.
    let cpu = crate::backend::cpu::CpuBackend;
    let shape = crate::backend::Backend::build(&cpu, op, ctx)?.outputs;
    let rng = random::stream(op, ctx)?;
    let (out_type, dims) = shape.into_iter().next().ok_or_else(|| op.bad("MULTINOMIAL without an output"))?;
    let (batch, samples) = (dims[0], dims[1]);
    let classes = op.input(0)?.shape[1];
    Ok(Built {
        outputs: vec![(out_type, dims)],
        kernel: Box::new(move |ins, outs| {
            let logits = typed::<f32>(arg(ins, 0)?)?;
            if logits.len() != batch * classes {
                return Err(runtime("MULTINOMIAL logits of the wrong size"));
            }
            let mut rng = rng.lock().map_err(|_| runtime("random stream poisoned by a failed run"))?;
            let mut picks = Vec::with_capacity(batch * samples);
            for b in 0..batch {
                let row = &logits[b * classes..(b + 1) * classes];
                let max = row.iter().copied().filter(|v| v.is_finite()).fold(f32::MIN, f32::max);
                let mass: Vec<f64> = row.iter().map(|&l| if l.is_finite() { (f64::from(l) - f64::from(max)).exp() } else { 0.0 }).collect();
                let total = mass.iter().fold(0.0, |a, m| a + m);
                for j in 0..samples {
                    let pair = b * samples + j;
                    let block = rng.block_at((pair / 2) as u64);
                    let target = uint64_to_double(block[pair % 2 * 2], block[pair % 2 * 2 + 1]) * total;
                    let mut acc = 0.0;
                    let class = mass.iter().position(|m| {
                        acc += m;
                        acc > target
                    });
                    picks.push(class.unwrap_or(classes) as i64);
                }
            }
            rng.skip(ferrite_kernels::random::multinomial_skip(batch, samples));
            match out_type {
                DType::I64 => typed_mut::<i64>(outs[0])?.iter_mut().zip(&picks).for_each(|(o, &p)| *o = p),
                _ => typed_mut::<i32>(outs[0])?.iter_mut().zip(&picks).for_each(|(o, &p)| *o = p as i32),
            }
            Ok(())
        }),
    })
}

fn bucketize(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let boundaries = feature::bucketize_boundaries(op)?;
    let n = op.checked_elements(&x.shape, 8)?;
    // Each value as C++ compares it with a float boundary.
    let widen: fn(&[u8], usize) -> Option<f64> = match x.dtype {
        DType::F32 => |b, i| typed::<f32>(b).ok()?.get(i).map(|&v| f64::from(v)),
        DType::F64 => |b, i| typed::<f64>(b).ok()?.get(i).copied(),
        DType::I32 => |b, i| typed::<i32>(b).ok()?.get(i).map(|&v| f64::from(v as f32)),
        DType::I64 => |b, i| typed::<i64>(b).ok()?.get(i).map(|&v| f64::from(v as f32)),
        t => return Err(op.unsupported(format!("BUCKETIZE of {} (LiteRT takes float32, float64, int32 and int64)", t.name()))),
    };
    Ok(Built {
        outputs: vec![(DType::I32, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let x = arg(ins, 0)?;
            let o = typed_mut::<i32>(outs[0])?;
            for (i, o) in o.iter_mut().enumerate().take(n) {
                let v = widen(x, i).ok_or_else(|| runtime("BUCKETIZE input of the wrong size"))?;
                *o = boundaries.iter().filter(|&&b| f64::from(b) <= v).count() as i32;
            }
            Ok(())
        }),
    })
}

fn fake_quant(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    // float32, or int32 whose bits LiteRT reads (and writes) as float32.
    feature::fake_quant_type(op, x.dtype)?;
    let (lo, hi, scale) = feature::fake_quant_params(op)?;
    let n = op.checked_elements(&x.shape, 4)?;
    Ok(Built {
        outputs: vec![(x.dtype, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let x: Vec<f32> = typed::<u32>(arg(ins, 0)?)?.iter().map(|&b| f32::from_bits(b)).collect();
            let o = typed_mut::<u32>(outs[0])?;
            if x.len() != n || o.len() != n {
                return Err(runtime("FAKE_QUANT buffers of the wrong size"));
            }
            for (o, &v) in o.iter_mut().zip(&x) {
                // NaN fails both comparisons and lands on the low end, as in LiteRT.
                let c = if v > lo { v } else { lo };
                let c = if c < hi { c } else { hi };
                let steps = ((c - lo) * (1.0 / scale)).round();
                *o = (steps * scale + lo).to_bits();
            }
            Ok(())
        }),
    })
}

fn embedding_lookup_sparse(op: &OpContext<'_>) -> Result<Built> {
    let feature::SparseLookup { combiner, lookups, lookup_rank, out_dims, rows, emb, shape } = feature::sparse_lookup(op)?;
    use ferrite_kernels::feature::Combiner;
    Ok(Built {
        outputs: vec![(DType::F32, shape)],
        kernel: Box::new(move |ins, outs| {
            let (ids, idx, w, p) = (typed::<i32>(arg(ins, 0)?)?, typed::<i32>(arg(ins, 1)?)?, typed::<f32>(arg(ins, 3)?)?, typed::<f32>(arg(ins, 4)?)?);
            let o = typed_mut::<f32>(outs[0])?;
            if ids.len() != lookups || w.len() != lookups || idx.len() != lookups * lookup_rank || p.len() != rows * emb {
                return Err(runtime("EMBEDDING_LOOKUP_SPARSE inputs of the wrong size"));
            }
            // Each lookup's output position, checked.
            let mut at = Vec::with_capacity(lookups);
            for i in 0..lookups {
                if ids[i] < 0 || ids[i] as usize >= rows {
                    return Err(runtime(format!("EMBEDDING_LOOKUP_SPARSE: lookup {i}: id {} outside the {rows} rows of params", ids[i])));
                }
                let mut pos = 0usize;
                for (d, &size) in out_dims.iter().enumerate() {
                    let c = idx[i * lookup_rank + d];
                    if c < 0 || c as usize >= size {
                        return Err(runtime(format!("EMBEDDING_LOOKUP_SPARSE: lookup {i}: index {c} in dimension {d} outside 0..{size}")));
                    }
                    pos = pos * size + c as usize;
                }
                at.push(pos);
            }
            o.fill(0.0);
            // Runs of consecutive lookups at one position, each combined on its own.
            let mut start = 0;
            while start < lookups {
                let end = (start..lookups).find(|&j| at[j] != at[start]).unwrap_or(lookups);
                let (total, squares) = w[start..end].iter().fold((0f64, 0f64), |(t, s), &w| (t + f64::from(w), s + f64::from(w) * f64::from(w)));
                let by = match combiner {
                    Combiner::Sum => 1.0,
                    Combiner::Mean => total,
                    Combiner::Sqrtn => squares.sqrt(),
                };
                for k in 0..emb {
                    let sum: f64 = (start..end).map(|j| f64::from(p[ids[j] as usize * emb + k]) * f64::from(w[j])).sum();
                    let cell = &mut o[at[start] * emb + k];
                    *cell = ((f64::from(*cell) + sum) / by) as f32;
                }
                start = end;
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::super::float_test_util::*;
    use crate::model::DType;
    use crate::ops::OpParams;
    use ferrite_format::ops::BuiltinOp as B;

    /// The bit generator's block-by-block words against the kernel's stream, for
    /// both algorithms, both Philox state lengths, word counts that leave a block
    /// part-used, and counters that wrap; a state of another length is refused.
    #[test]
    fn bit_generator_words_match_the_kernel() {
        use ferrite_kernels::random::{rng_bit_generator, RngAlgorithm as A};
        let mut r = Rng::new(0xb175);
        for case in 0..60 {
            let algorithm = if case % 2 == 0 { A::Philox } else { A::Threefry };
            let len = if algorithm == A::Philox && case % 4 == 0 { 3 } else { 2 };
            let mut state: Vec<u64> = (0..len).map(|_| r.next()).collect();
            if case % 3 == 0 {
                state[1] = u64::MAX - r.below(3) as u64;
            }
            let n = 1 + r.below(23);
            let (mut want, mut got) = (vec![0u32; n], vec![0u32; n]);
            let (mut want_next, mut got_next) = (vec![0u64; len], vec![0u64; len]);
            rng_bit_generator(algorithm, &state, &mut want_next, &mut want).unwrap();
            super::bit_words(algorithm, &state, &mut got_next, &mut got).unwrap();
            assert_eq!((got, got_next), (want, want_next), "case {case}: {algorithm:?} state {state:?}, {n} words");
        }
        assert!(super::bit_words(A::Philox, &[1], &mut [0], &mut [0; 4]).is_err());
    }

    /// FAKE_QUANT on int32 takes each element's bits as a float32 and writes the
    /// result's bits back, as LiteRT's kernel does; a NaN pattern (-1) lands on the
    /// range's low end. Other integer types are refused.
    #[test]
    fn fake_quant_int32_works_on_float_bits() {
        let fq = OpParams::FakeQuant { min: -1.0, max: 1.0, num_bits: 8, narrow_range: false };
        let (lo, hi, scale) = ferrite_kernels::feature::nudge(-1.0, 1.0, 0, 255);
        let xs = [0.5f32, -2.0, 1.0];
        let mut want = [0.0f32; 3];
        ferrite_kernels::feature::fake_quant(&xs, lo, hi, scale, &mut want);
        let mut ints: Vec<i32> = xs.iter().map(|v| v.to_bits() as i32).collect();
        ints.push(-1);
        let bytes: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
        for backend in [&super::super::ReferenceBackend as &dyn crate::backend::Backend, &crate::backend::cpu::CpuBackend] {
            let op = TestOp::typed(B::FAKE_QUANT, fq.clone(), vec![raw_input(DType::I32, &[4], bytes.clone())], vec![DType::I32]);
            let out = op.run_on(backend, None).expect("int32 FAKE_QUANT");
            let got: Vec<i32> = out[0].2.chunks(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            let expect: Vec<i32> = want.iter().chain(&[lo]).map(|v| v.to_bits() as i32).collect();
            assert_eq!((out[0].0, got), (DType::I32, expect));
            let op = TestOp::typed(B::FAKE_QUANT, fq.clone(), vec![raw_input(DType::I64, &[1], vec![0; 8])], vec![DType::I64]);
            assert!(op.run_on(backend, None).is_err(), "int64 FAKE_QUANT must be refused");
        }
    }

    /// Each reference kernel against the CPU kernel on random cases: the random
    /// ops from the same seeds (a fresh stream each), all exact but the sparse
    /// lookup's f64 sums.
    #[test]
    fn random_and_feature_ops_match_cpu() {
        let mut r = Rng::new(0x5eed);
        for case in 0..30 {
            let what = format!("case {case}");
            let dims: Vec<i32> = (0..r.below(4)).map(|_| r.range(0, 6) as i32).collect();
            let seeds = OpParams::Random { seed: r.range(1, 1000) as i64, seed2: r.next() as i64 };
            for code in [B::RANDOM_UNIFORM, B::RANDOM_STANDARD_NORMAL] {
                TestOp::new(code, seeds.clone(), vec![i32_const(&[dims.len()], &dims)], 1).compare_with_cpu(0.0, &what);
            }
            let (batch, classes) = (r.range(1, 3), r.range(1, 6));
            let logits = f32_input(&[batch, classes], &r.floats(batch * classes));
            let samples = i32_const(&[], &[r.range(0, 9) as i32]);
            TestOp::typed(B::MULTINOMIAL, seeds.clone(), vec![logits, samples], vec![crate::model::DType::I64]).compare_with_cpu(0.0, &what);

            let n = r.range(1, 12);
            let x: Vec<f32> = r.floats(n).iter().map(|v| (v * 8.0).round() / 2.0).collect();
            let mut boundaries: Vec<f32> = (0..r.below(6)).map(|_| (r.unit() * 8.0).round() / 2.0).collect();
            boundaries.sort_by(f32::total_cmp);
            TestOp::typed(B::BUCKETIZE, OpParams::Bucketize { boundaries }, vec![f32_input(&[n], &x)], vec![crate::model::DType::I32])
                .compare_with_cpu(0.0, &what);
            let fq = OpParams::FakeQuant { min: -r.unit().abs() - 0.1, max: r.unit().abs() + 0.1, num_bits: r.range(2, 16) as i32, narrow_range: false };
            TestOp::new(B::FAKE_QUANT, fq.clone(), vec![f32_input(&[n], &r.floats(n).iter().map(|v| v * 2.0).collect::<Vec<_>>())], 1)
                .compare_with_cpu(0.0, &what);
            // int32 read as float32 bits: floats' bits, small integers (subnormals,
            // NaNs when negative).
            let bits: Vec<u8> = (0..n)
                .flat_map(|_| if r.below(2) == 0 { (r.unit() * 4.0 - 2.0).to_bits() as i32 } else { r.range(0, 200) as i32 - 100 }.to_le_bytes())
                .collect();
            TestOp::typed(B::FAKE_QUANT, fq, vec![raw_input(DType::I32, &[n], bits)], vec![DType::I32]).compare_with_cpu(0.0, &what);

            // Two positions of a [2, 3] sparse tensor, entries in row-major order.
            let ids: Vec<i32> = (0..4).map(|_| r.below(3) as i32).collect();
            let els = vec![
                i32_const(&[4], &ids),
                i32_const(&[4, 2], &[0, 0, 0, 2, 1, 0, 1, 1]),
                i32_const(&[2], &[2, 3]),
                f32_input(&[4], &[0.5, 1.0, 1.5, 2.0]),
                f32_input(&[3, 2], &r.floats(6)),
            ];
            TestOp::new(B::EMBEDDING_LOOKUP_SPARSE, OpParams::EmbeddingLookupSparse { combiner: r.below(3) as i8 }, els, 1).compare_with_cpu(1e-6, &what);
        }
        // A hostile dense shape and an id outside params are errors on both.
        let bad = |ids: &[i32], dense: &[i32]| {
            TestOp::new(
                B::EMBEDDING_LOOKUP_SPARSE,
                OpParams::EmbeddingLookupSparse { combiner: 0 },
                vec![i32_const(&[1], ids), i32_const(&[1, 2], &[0, 0]), i32_const(&[2], dense), f32_input(&[1], &[1.0]), f32_input(&[2, 2], &[0.0; 4])],
                1,
            )
        };
        for t in [bad(&[0], &[-1, 3]), bad(&[0], &[i32::MAX, i32::MAX]), bad(&[5], &[2, 2])] {
            assert!(t.reference().is_err() && t.cpu().is_err());
        }
    }
}
