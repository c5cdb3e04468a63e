//! Cases of the random ops (RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL, MULTINOMIAL)
//! and of the TensorFlow 1 feature ops (BUCKETIZE, FAKE_QUANT,
//! EMBEDDING_LOOKUP_SPARSE). The random cases run as a stream of invocations in one
//! session on each side ([`STEPS`]), with nonzero seeds, and must match LiteRT
//! value for value: the stream carries on from run to run.

use super::{f32in, n_of, out, single, Case, Rng};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, ModelSpec, Options, TensorSpec};

/// The cases of this module.
pub(super) const OPS: &[&str] = &[
    "RANDOM_UNIFORM",
    "RANDOM_UNIFORM_DYNAMIC",
    "RANDOM_STANDARD_NORMAL",
    "RANDOM_STANDARD_NORMAL_DYNAMIC",
    "MULTINOMIAL",
    "MULTINOMIAL_INT32",
    "MULTINOMIAL_DYNAMIC",
    "BUCKETIZE",
    "BUCKETIZE_FLOAT64",
    "BUCKETIZE_INT32",
    "BUCKETIZE_INT64",
    "FAKE_QUANT",
    "FAKE_QUANT_INT32",
    "EMBEDDING_LOOKUP_SPARSE",
    "EMBEDDING_LOOKUP_SPARSE_DYNAMIC",
];

/// Cases LiteRT refuses (both runtimes must): narrow_range FAKE_QUANT.
pub(super) const REFUSED: &[&str] = &["FAKE_QUANT_NARROW"];

/// Invocations per random case, in one session.
pub(super) const STEPS: usize = 3;

/// True for the cases run as a stream and compared exactly.
pub(super) fn is_stream(op: &str) -> bool {
    op.starts_with("RANDOM_") || op.starts_with("MULTINOMIAL")
}

/// A nonzero seed pair: either may be zero, not both (both zero is nondeterministic).
fn seeds(r: &mut Rng) -> Options {
    let mut s = || match r.u(0, 3) {
        0 => 0,
        1 => r.int(1, 1000),
        2 => -r.int(1, 1 << 40),
        _ => r.next() as i64,
    };
    let (seed, seed2) = (s(), s());
    Options::Random { seed: if seed == 0 && seed2 == 0 { 7 } else { seed }, seed2 }
}

pub(super) fn gen(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let mut ranges = vec![];
    let mut fixed = vec![];
    let dynamic = op.ends_with("_DYNAMIC");
    match op {
        "RANDOM_UNIFORM" | "RANDOM_UNIFORM_DYNAMIC" | "RANDOM_STANDARD_NORMAL" | "RANDOM_STANDARD_NORMAL_DYNAMIC" => {
            // Shapes of rank 0 to 4; odd sizes (a part-used block), now and then empty.
            let rank = r.u(0, 4);
            let lo = if r.u(0, 9) == 0 { 0 } else { 1 };
            let s = r.shape(rank, lo, 7);
            let shape = if dynamic {
                let t = m.add_tensor(TensorSpec::activation("shape", TensorType::INT32, &[rank as i32]));
                m.inputs.push(t);
                fixed.push((0, s.clone()));
                t
            } else {
                m.add_tensor(TensorSpec::const_i32("shape", &[rank as i32], &s))
            };
            let code = if op.starts_with("RANDOM_UNIFORM") { B::RANDOM_UNIFORM } else { B::RANDOM_STANDARD_NORMAL };
            let o = out(&mut m, TensorType::FLOAT32, &s);
            single(code, &[shape], o, seeds(r), &mut m);
        }
        "MULTINOMIAL" | "MULTINOMIAL_INT32" | "MULTINOMIAL_DYNAMIC" => {
            let (batch, classes) = (r.u(1, 4) as i32, r.u(1, 9) as i32);
            // At least one sample: LiteRT's Python API cannot read the empty dynamic
            // output of zero samples ("Invalid tensor size").
            let samples = r.u(1, 13) as i32;
            let l = f32in(&mut m, "logits", &[batch, classes]);
            ranges.push((-3.0, 3.0));
            let n = if dynamic {
                let t = m.add_tensor(TensorSpec::activation("num_samples", TensorType::INT32, &[]));
                m.inputs.push(t);
                fixed.push((1, vec![samples]));
                t
            } else {
                m.add_tensor(TensorSpec::const_i32("num_samples", &[], &[samples]))
            };
            let ty = if op == "MULTINOMIAL_INT32" { TensorType::INT32 } else { TensorType::INT64 };
            let o = out(&mut m, ty, &[batch, samples]);
            single(B::MULTINOMIAL, &[l, n], o, seeds(r), &mut m);
        }
        "BUCKETIZE" | "BUCKETIZE_FLOAT64" | "BUCKETIZE_INT32" | "BUCKETIZE_INT64" => {
            // Sorted boundaries (repeats now and then, none at all sometimes); integer
            // inputs fixed near them, float inputs drawn across them.
            let nb = r.u(0, 8);
            let mut b: Vec<f32> = (0..nb).map(|_| (r.f(-6.0, 6.0) * 4.0).round() / 4.0).collect();
            b.sort_by(f32::total_cmp);
            let rank = r.u(0, 3);
            let s = r.shape(rank, 1, 6);
            let ty = match op {
                "BUCKETIZE_FLOAT64" => TensorType::FLOAT64,
                "BUCKETIZE_INT32" => TensorType::INT32,
                "BUCKETIZE_INT64" => TensorType::INT64,
                _ => TensorType::FLOAT32,
            };
            let x = m.add_tensor(TensorSpec::activation("x", ty, &s));
            m.inputs.push(x);
            if matches!(ty, TensorType::INT32 | TensorType::INT64) {
                fixed.push((0, (0..n_of(&s)).map(|_| r.int(-8, 8) as i32).collect()));
            } else {
                ranges.push((-7.0, 7.0));
            }
            let o = out(&mut m, TensorType::INT32, &s);
            single(B::BUCKETIZE, &[x], o, Options::Bucketize { boundaries: b }, &mut m);
        }
        "FAKE_QUANT" | "FAKE_QUANT_NARROW" | "FAKE_QUANT_INT32" => {
            // Ranges across zero, wholly above or below it; 2 to 16 bits. On int32
            // LiteRT takes each element's bits as a float32 (and writes the result's
            // bits back): the values mix the bits of floats in range, small integers
            // (subnormal floats, NaNs when negative) and the infinities' neighbours.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 6);
            let int = op == "FAKE_QUANT_INT32";
            let x = if int {
                let x = m.add_tensor(TensorSpec::activation("x", TensorType::INT32, &s));
                m.inputs.push(x);
                let bits = |r: &mut Rng| match r.u(0, 3) {
                    0 | 1 => r.f(-4.0, 4.0).to_bits() as i32,
                    2 => r.int(-100, 100) as i32,
                    // Around +inf, or with the sign bit set, around -inf.
                    _ => (0x7F80_0000 + r.int(-2, 2) as i32) | if r.coin() { 0 } else { i32::MIN },
                };
                fixed.push((0, (0..n_of(&s)).map(|_| bits(r)).collect()));
                x
            } else {
                ranges.push((-4.0, 4.0));
                f32in(&mut m, "x", &s)
            };
            let (min, max) = match r.u(0, 2) {
                0 => (r.f(-3.0, -0.1), r.f(0.1, 3.0)),
                1 => (r.f(0.1, 1.0), r.f(1.5, 3.0)),
                _ => (r.f(-3.0, -1.5), r.f(-1.0, -0.1)),
            };
            let o = out(&mut m, if int { TensorType::INT32 } else { TensorType::FLOAT32 }, &s);
            let opts = Options::FakeQuant { min, max, num_bits: r.u(2, 16) as i32, narrow_range: op.ends_with("NARROW") };
            single(B::FAKE_QUANT, &[x], o, opts, &mut m);
        }
        "EMBEDDING_LOOKUP_SPARSE" | "EMBEDDING_LOOKUP_SPARSE_DYNAMIC" => {
            // A sparse tensor of dense shape [d0, .., last] listing its entries in
            // row-major order (several per output position, some positions empty);
            // params [rows, e1 (, e2)]; positive weights (MEAN divides by their sum).
            let lookup_rank = r.u(1, 3);
            let dense = r.shape(lookup_rank, 1, 4);
            let positions = n_of(&dense[..lookup_rank - 1]);
            let last = dense[lookup_rank - 1] as usize;
            let mut tuples = vec![];
            for p in 0..positions {
                let mut c = vec![0i32; lookup_rank - 1];
                let mut f = p;
                for d in (0..lookup_rank - 1).rev() {
                    c[d] = (f % dense[d] as usize) as i32;
                    f /= dense[d] as usize;
                }
                for k in 0..last {
                    if r.u(0, 2) > 0 {
                        tuples.push(c.iter().copied().chain([k as i32]).collect::<Vec<i32>>());
                    }
                }
            }
            let n = tuples.len() as i32;
            let rows = r.u(1, 6) as i32;
            let mut pshape = vec![rows, r.u(1, 5) as i32];
            if r.u(0, 3) == 0 {
                pshape.push(r.u(1, 3) as i32);
            }
            let ids: Vec<i32> = (0..n).map(|_| r.int(0, i64::from(rows) - 1) as i32).collect();
            let idx: Vec<i32> = tuples.concat();
            let ids_t = m.add_tensor(TensorSpec::const_i32("ids", &[n], &ids));
            let idx_t = m.add_tensor(TensorSpec::const_i32("indices", &[n, lookup_rank as i32], &idx));
            let shape_t = if dynamic {
                let t = m.add_tensor(TensorSpec::activation("dense_shape", TensorType::INT32, &[lookup_rank as i32]));
                m.inputs.push(t);
                fixed.push((0, dense.clone()));
                t
            } else {
                m.add_tensor(TensorSpec::const_i32("dense_shape", &[lookup_rank as i32], &dense))
            };
            let w = f32in(&mut m, "weights", &[n]);
            ranges.push((0.25, 2.0));
            let p = f32in(&mut m, "params", &pshape);
            ranges.push((-2.0, 2.0));
            let oshape: Vec<i32> = dense[..lookup_rank - 1].iter().chain(&pshape[1..]).copied().collect();
            let o = out(&mut m, TensorType::FLOAT32, &oshape);
            let opts = Options::EmbeddingLookupSparse { combiner: r.u(0, 2) as i8 };
            m.add_op(ferrite_format::writer::OpCode::Builtin(B::EMBEDDING_LOOKUP_SPARSE), &[ids_t, idx_t, shape_t, w, p], &[o], opts);
        }
        _ => panic!("unknown case {op}"),
    }
    Case { spec: m, ranges, fixed }
}
