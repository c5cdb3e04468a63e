//! Cases of STABLEHLO_RNG_BIT_GENERATOR: each algorithm (DEFAULT, PHILOX, THREEFRY)
//! with each output type LiteRT makes, a random uint64 state (of both lengths
//! Philox takes), and output shapes whose word counts leave a block part-used.
//! The op is a pure function of its state input, so one invocation per case is
//! compared exactly (both outputs: the next state and the bits).

use super::{out, Case, Rng};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, HloOptions, ModelSpec, OpCode, Options, TensorSpec};

/// The cases of this module: `STABLEHLO_RNG_BIT_GENERATOR_<algorithm>_<type>`.
pub(super) const OPS: &[&str] = &[
    "STABLEHLO_RNG_BIT_GENERATOR_DEFAULT_UINT32",
    "STABLEHLO_RNG_BIT_GENERATOR_DEFAULT_INT64",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_UINT32",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_UINT64",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_INT32",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_INT64",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY_UINT32",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY_UINT64",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY_INT32",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY_INT64",
];

/// Cases both runtimes must refuse: bits of a type LiteRT does not make, a
/// Threefry state of three values, an algorithm code the schema does not name.
pub(super) const REFUSED: &[&str] = &[
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_FLOAT32",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_INT16",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY3_UINT32",
    "STABLEHLO_RNG_BIT_GENERATOR_UNKNOWN_UINT32",
];

/// True for this module's cases (compared exactly).
pub(super) fn handles(op: &str) -> bool {
    OPS.contains(&op) || REFUSED.contains(&op)
}

pub(super) fn gen(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let parts: Vec<&str> = op.trim_start_matches("STABLEHLO_RNG_BIT_GENERATOR_").split('_').collect();
    let (algorithm, ty) = match parts[..] {
        [a, t] => (a, t),
        _ => ("DEFAULT", "UINT32"),
    };
    let code: i8 = match algorithm {
        "PHILOX" => 1,
        "THREEFRY" | "THREEFRY3" => 2,
        "UNKNOWN" => 3,
        _ => 0,
    };
    let ty = match ty {
        "UINT64" => TensorType::UINT64,
        "INT32" => TensorType::INT32,
        "INT64" => TensorType::INT64,
        "FLOAT32" => TensorType::FLOAT32,
        "INT16" => TensorType::INT16,
        _ => TensorType::UINT32,
    };
    // Threefry takes a u64[2] state; Philox a u64[2] or u64[3].
    let state_len = if algorithm == "THREEFRY3" {
        3
    } else if code == 2 || r.coin() {
        2
    } else {
        3
    };
    let s = m.add_tensor(TensorSpec::activation("state", TensorType::UINT64, &[state_len]));
    m.inputs.push(s);
    let rank = r.u(1, 3);
    let shape = r.shape(rank, 1, 7);
    let next = out(&mut m, TensorType::UINT64, &[state_len]);
    let o = out(&mut m, ty, &shape);
    m.add_op(OpCode::Builtin(B::STABLEHLO_RNG_BIT_GENERATOR), &[s], &[next, o], Options::Hlo(HloOptions::RngBitGenerator { algorithm: code }));
    Case { spec: m, ranges: vec![], fixed: vec![] }
}
