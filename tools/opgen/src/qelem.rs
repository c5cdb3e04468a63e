//! Cases of the quantized element-wise variants (DIV, NEG, EXP, LOG, SQRT, RSQRT,
//! ELU, RELU_0_TO_1, FLOOR_DIV, FLOOR_MOD, TOPK_V2 on int8 / uint8 / int16):
//! random scales and zero points, broadcasting for DIV, and divisors or inputs
//! fixed where LiteRT refuses values (a divisor at its zero point, a negative
//! square root).

use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

use super::{act, gen, n_of, quantized_variant, Case, Rng};

/// The cases of this module, listed in the generator's `OPS`.
pub(crate) const OPS: &[&str] = &[
    "DIV_INT8",
    "DIV_UINT8",
    "DIV_INT16",
    "NEG_INT8",
    "NEG_INT16",
    "EXP_INT8",
    "EXP_INT16",
    "LOG_INT8",
    "LOG_INT16",
    "SQRT_INT8",
    "SQRT_INT16",
    "RSQRT_INT16",
    "ELU_INT8",
    "RELU_0_TO_1_INT8",
    "RELU_0_TO_1_UINT8",
    "FLOOR_DIV_INT8",
    "FLOOR_DIV_INT16",
    "FLOOR_MOD_INT8",
    "FLOOR_MOD_INT16",
    "TOPK_V2_INT16",
    "GELU_INT16",
];

/// Cases compared with LiteRT's builtin kernels: its reference resolver has no
/// ELU kernel.
pub(crate) const BUILTIN_ORACLE: &[&str] = &["ELU_INT8"];

fn qtensor(m: &mut ModelSpec, name: &str, ty: TensorType, shape: &[i32], (scale, zp): (f32, i64)) -> i32 {
    m.add_tensor(TensorSpec { quant: Some((vec![scale], vec![zp], 0)), ..TensorSpec::activation(name, ty, shape) })
}

fn type_of(op: &str) -> (TensorType, i64, i64) {
    if op.ends_with("_INT16") {
        (TensorType::INT16, -32768, 32767)
    } else if op.ends_with("_UINT8") {
        (TensorType::UINT8, 0, 255)
    } else {
        (TensorType::INT8, -128, 127)
    }
}

fn any_shape(r: &mut Rng) -> Vec<i32> {
    let rk = r.u(1, 4);
    r.shape(rk, 1, 6)
}

/// `n` stored values of `lo..=hi` other than `avoid`, with the values next to it
/// (the smallest divisors) over-represented.
fn divisors(r: &mut Rng, n: usize, (lo, hi): (i64, i64), avoid: i64) -> Vec<i32> {
    (0..n)
        .map(|_| loop {
            let v = if r.int(0, 3) == 0 { avoid + r.pick(&[-2, -1, 1, 2]) } else { r.int(lo, hi) };
            if v != avoid && (lo..=hi).contains(&v) {
                break v as i32;
            }
        })
        .collect()
}

/// The case `op`, one of [`OPS`].
pub(crate) fn gen_case(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let mut fixed = vec![];
    let (ty, lo, hi) = type_of(op);
    let wide = ty == TensorType::INT16;
    let base = op.rsplit_once('_').map_or(op, |(b, _)| b);
    match base {
        "DIV" => {
            // Broadcast shapes as the float case's; int16 inputs of one shape take
            // LiteRT's float path, broadcast ones its integer path.
            let rank = r.u(1, 4);
            let full = r.shape(rank, 1, 5);
            let (sa, sb) = if wide && r.coin() {
                (full.clone(), full.clone())
            } else {
                let skip = r.u(0, rank - 1);
                let other: Vec<i32> = full.iter().map(|&d| if r.coin() { 1 } else { d }).skip(skip).collect();
                if r.coin() {
                    (full.clone(), other)
                } else {
                    (other, full.clone())
                }
            };
            let zp = |r: &mut Rng| match ty {
                TensorType::INT16 => 0,
                TensorType::UINT8 => r.int(90, 170),
                _ => r.int(-40, 40),
            };
            let (s1, s2) = if wide { (r.f(1e-4, 1e-3), r.f(1e-4, 1e-3)) } else { (r.f(0.01, 0.2), r.f(0.01, 0.2)) };
            let (z1, z2) = (zp(r), zp(r));
            let a = qtensor(&mut m, "a", ty, &sa, (s1, z1));
            let b = qtensor(&mut m, "b", ty, &sb, (s2, z2));
            m.inputs.extend([a, b]);
            // Quotients span up to the type's range over one step: the output's range
            // a fraction of that, so large ones saturate and small ones keep digits.
            let so = s1 / s2 * if wide { r.f(0.002, 0.05) } else { r.f(0.05, 1.0) };
            let o = qtensor(&mut m, "y", ty, &[], (so, zp(r)));
            m.outputs.push(o);
            m.add_op(OpCode::Builtin(B::DIV), &[a, b], &[o], Options::Binary { activation: act(r) });
            fixed.push((1, divisors(r, n_of(&sb), (lo, hi), z2)));
        }
        "NEG" => {
            // LiteRT negates the stored integers: the output keeps the input's parameters.
            let shape = any_shape(r);
            let q = if wide { (r.f(1e-4, 1e-3), 0) } else { (r.f(0.01, 0.1), r.int(-20, 20)) };
            let x = qtensor(&mut m, "x", ty, &shape, q);
            let o = qtensor(&mut m, "y", ty, &shape, q);
            m.inputs.push(x);
            m.outputs.push(o);
            m.add_op(OpCode::Builtin(B::NEG), &[x], &[o], Options::None);
        }
        "EXP" | "LOG" | "SQRT" | "RSQRT" | "ELU" => {
            let shape = any_shape(r);
            let (in_q, out_q) = match (base, wide) {
                ("EXP", false) => {
                    let (s, z) = (r.f(0.005, 0.03), r.int(-40, 40));
                    ((s, z), (((127 - z) as f32 * s).exp() / r.f(150.0, 255.0), r.int(-128, -110)))
                }
                ("EXP", true) => {
                    let s = r.f(5e-5, 1.2e-4);
                    ((s, 0), ((32767.0 * s).exp() / r.f(16000.0, 32767.0), 0))
                }
                ("LOG", false) => ((r.f(0.01, 0.05), r.int(-128, -100)), (r.f(0.02, 0.05), r.int(20, 80))),
                ("LOG", true) => ((r.f(1e-4, 1e-3), 0), (r.f(8.0, 16.0) / 32768.0, 0)),
                ("SQRT", false) => {
                    // The zero point at the bottom: every value a non-negative real.
                    let s = r.f(0.01, 0.1);
                    ((s, -128), ((255.0 * s).sqrt() / r.f(100.0, 255.0), r.int(-128, -100)))
                }
                ("SQRT", true) => {
                    let s = r.f(1e-4, 1e-3);
                    ((s, 0), ((32767.0 * s).sqrt() / r.f(10000.0, 32767.0), 0))
                }
                ("RSQRT", _) => {
                    let s = r.f(1e-4, 1e-3);
                    ((s, 0), (1.0 / s.sqrt() / r.f(8000.0, 32767.0), 0))
                }
                _ => ((r.f(0.01, 0.05), r.int(-40, 40)), (r.f(0.01, 0.05), r.int(-128, -90))),
            };
            let x = qtensor(&mut m, "x", ty, &shape, in_q);
            let o = qtensor(&mut m, "y", ty, &shape, out_q);
            m.inputs.push(x);
            m.outputs.push(o);
            let code = match base {
                "EXP" => B::EXP,
                "LOG" => B::LOG,
                "SQRT" => B::SQRT,
                "RSQRT" => B::RSQRT,
                _ => B::ELU,
            };
            m.add_op(OpCode::Builtin(code), &[x], &[o], Options::None);
            if wide && matches!(base, "SQRT" | "RSQRT") {
                // LiteRT refuses negative int16 inputs (zero point 0): non-negative
                // values, 0 and the smallest ones included.
                let v = (0..n_of(&shape)).map(|_| if r.int(0, 4) == 0 { r.int(0, 3) as i32 } else { r.int(0, 32767) as i32 }).collect();
                fixed.push((0, v));
            }
        }
        "GELU" => {
            // int16 zero points 0; GELU's range of about [-0.17, max input].
            let shape = any_shape(r);
            let s = r.f(5e-5, 2e-4);
            let x = qtensor(&mut m, "x", ty, &shape, (s, 0));
            let o = qtensor(&mut m, "y", ty, &shape, (s * r.f(0.8, 1.5), 0));
            m.inputs.push(x);
            m.outputs.push(o);
            m.add_op(OpCode::Builtin(B::GELU), &[x], &[o], Options::Gelu { approximate: r.coin() });
        }
        "RELU_0_TO_1" => {
            let shape = any_shape(r);
            let z = |r: &mut Rng| if ty == TensorType::UINT8 { r.int(0, 200) } else { r.int(-128, 60) };
            let in_q = (r.f(0.005, 0.02), z(r));
            let out_q = (r.f(0.8, 1.5) / 255.0, z(r));
            let x = qtensor(&mut m, "x", ty, &shape, in_q);
            let o = qtensor(&mut m, "y", ty, &shape, out_q);
            m.inputs.push(x);
            m.outputs.push(o);
            m.add_op(OpCode::Builtin(B::RELU_0_TO_1), &[x], &[o], Options::None);
        }
        "FLOOR_DIV" | "FLOOR_MOD" => {
            // LiteRT runs these on the stored integers; the quantization is carried
            // unread. Shapes of up to rank 4 (LiteRT's broadcast handles 4).
            let rank = r.u(1, 4);
            let full = r.shape(rank, 1, 5);
            let other: Vec<i32> = full.iter().map(|&d| if r.coin() { 1 } else { d }).collect();
            let (sa, sb) = if r.coin() { (full.clone(), other) } else { (other, full.clone()) };
            let q = (1.0, 0);
            let a = qtensor(&mut m, "a", ty, &sa, q);
            let b = qtensor(&mut m, "b", ty, &sb, q);
            m.inputs.extend([a, b]);
            let o = qtensor(&mut m, "y", ty, &[], q);
            m.outputs.push(o);
            m.add_op(OpCode::Builtin(if base == "FLOOR_DIV" { B::FLOOR_DIV } else { B::FLOOR_MOD }), &[a, b], &[o], Options::None);
            fixed.push((1, divisors(r, n_of(&sb), (lo, hi), 0)));
        }
        _ => {
            // TOPK_V2_INT16: the float case's model with int16 values (zero point 0).
            let case = gen("TOPK_V2", r);
            return quantized_variant(case, TensorType::INT16, r);
        }
    }
    Case { spec: m, ranges: vec![], fixed }
}
