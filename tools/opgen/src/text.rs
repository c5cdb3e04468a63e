//! Generated cases of the legacy text-model ops: HASHTABLE_LOOKUP (sorted unique
//! int32 keys, ids that hit and miss, values of several element types) and
//! LSH_PROJECTION (sparse and dense, with and without weights, float and int32
//! inputs, seeds that are whole numbers now and then).

use crate::{n_of, out, single, Case, Rng};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, ModelSpec, Options, TensorSpec};

/// The case names this module generates.
pub(crate) const TEXT_OPS: &[&str] =
    &["HASHTABLE_LOOKUP", "HASHTABLE_LOOKUP_INT32", "HASHTABLE_LOOKUP_INT8", "HASHTABLE_LOOKUP_UINT8", "LSH_PROJECTION", "LSH_PROJECTION_INT32"];

pub(crate) fn gen(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let (mut ranges, mut fixed) = (vec![], vec![]);
    if op.starts_with("HASHTABLE_LOOKUP") {
        // Keys: distinct, sorted (LiteRT binary-searches them), negative ones too.
        let n_keys = r.u(1, 8);
        let mut keys: Vec<i32> = vec![];
        while keys.len() < n_keys {
            let k = r.int(-20, 20) as i32;
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys.sort_unstable();
        let ty = match op {
            "HASHTABLE_LOOKUP_INT32" => TensorType::INT32,
            "HASHTABLE_LOOKUP_INT8" => TensorType::INT8,
            "HASHTABLE_LOOKUP_UINT8" => TensorType::UINT8,
            _ => TensorType::FLOAT32,
        };
        let n = r.u(1, 7);
        let lookup = m.add_tensor(TensorSpec::activation("lookup", TensorType::INT32, &[n as i32]));
        m.inputs.push(lookup);
        // Ids: about half are keys, the rest usually not (repeats allowed).
        fixed.push((0, (0..n).map(|_| if r.coin() { r.pick(&keys) } else { r.int(-22, 22) as i32 }).collect()));
        let k = m.add_tensor(TensorSpec::const_i32("keys", &[n_keys as i32], &keys));
        let mut vshape = vec![n_keys as i32];
        let rank = r.u(0, 2);
        vshape.extend(r.shape(rank, 1, 4));
        let v = m.add_tensor(TensorSpec::activation("values", ty, &vshape));
        m.inputs.push(v);
        if ty == TensorType::FLOAT32 {
            ranges.push((-2.0, 2.0));
        }
        let mut oshape = vshape.clone();
        oshape[0] = n as i32;
        let o = out(&mut m, ty, &oshape);
        let hits = m.add_tensor(TensorSpec::activation("hits", TensorType::UINT8, &[n as i32]));
        m.outputs.push(hits);
        m.add_op(ferrite_format::writer::OpCode::Builtin(B::HASHTABLE_LOOKUP), &[lookup, k, v], &[o, hits], Options::None);
        return Case { spec: m, ranges, fixed };
    }
    // LSH_PROJECTION: seeds a constant [num_hash, num_bits] (up to 16 bits, so
    // sparse ids stay well inside int32), the input a model input of rank 1 to 3,
    // the weight a constant (sometimes absent).
    let (num_hash, num_bits) = (r.u(1, 5), r.u(1, 16));
    let seeds: Vec<f32> = (0..num_hash * num_bits).map(|_| if r.u(0, 3) == 0 { r.int(-9, 9) as f32 } else { r.f(-100.0, 100.0) }).collect();
    let h = m.add_tensor(TensorSpec::const_f32("hash", &[num_hash as i32, num_bits as i32], &seeds));
    let mut shape = vec![r.u(1, 6) as i32];
    let rank = r.u(0, 2);
    shape.extend(r.shape(rank, 1, 4));
    let ty = if op.ends_with("INT32") { TensorType::INT32 } else { TensorType::FLOAT32 };
    let x = m.add_tensor(TensorSpec::activation("input", ty, &shape));
    m.inputs.push(x);
    if ty == TensorType::FLOAT32 {
        ranges.push((-3.0, 3.0));
    } else {
        fixed.push((0, (0..n_of(&shape)).map(|_| r.int(-1000, 1000) as i32).collect()));
    }
    let mut ins = vec![h, x];
    if r.u(0, 2) > 0 {
        let w = r.floats(shape[0] as usize, -1.0, 1.0);
        ins.push(m.add_tensor(TensorSpec::const_f32("weight", &[shape[0]], &w)));
    }
    let sparse = r.coin();
    let o = out(&mut m, TensorType::INT32, &[if sparse { num_hash } else { num_hash * num_bits } as i32]);
    single(B::LSH_PROJECTION, &ins, o, Options::LshProjection { kind: if sparse { 1 } else { 2 } }, &mut m);
    Case { spec: m, ranges, fixed }
}
