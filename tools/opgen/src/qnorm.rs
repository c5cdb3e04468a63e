//! Cases of LOG_SOFTMAX and L2_NORMALIZATION on int8 / uint8: random input scales
//! and zero points, shapes of rank 1 to 4 whose last dimension is sometimes 1 and
//! often odd, and the output quantization LiteRT requires of each op. Some
//! L2_NORMALIZATION cases fix rows at the input's zero point (a zero norm).

use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

use super::{n_of, Case, Rng};

/// The cases of this module, listed in the generator's `OPS`.
pub(crate) const OPS: &[&str] = &["LOG_SOFTMAX_INT8", "LOG_SOFTMAX_UINT8", "L2_NORMALIZATION_INT8", "L2_NORMALIZATION_UINT8"];

fn qtensor(m: &mut ModelSpec, name: &str, ty: TensorType, shape: &[i32], (scale, zp): (f32, i64)) -> i32 {
    m.add_tensor(TensorSpec { quant: Some((vec![scale], vec![zp], 0)), ..TensorSpec::activation(name, ty, shape) })
}

/// The case `op`, one of [`OPS`].
pub(crate) fn gen_case(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let unsigned = op.ends_with("_UINT8");
    let (ty, lo, hi) = if unsigned { (TensorType::UINT8, 0, 255) } else { (TensorType::INT8, -128, 127) };
    let log = op.starts_with("LOG_SOFTMAX");
    let rank = r.u(1, 4);
    let mut shape = r.shape(rank, 1, 4);
    // The reduced (last) dimension: 1, odd, or up to 17.
    shape[rank - 1] = match r.u(0, 3) {
        0 => 1,
        1 => (2 * r.u(1, 8) + 1) as i32,
        _ => r.u(2, 17) as i32,
    };
    // Small scales keep every difference inside log-softmax's 16 units; large ones
    // push the smallest values past it (saturating at the type's minimum).
    let in_q = (if r.coin() { r.f(0.002, 0.05) } else { r.f(0.05, 0.6) }, r.int(lo, hi));
    let out_q = match (log, unsigned) {
        (true, false) => (16.0 / 256.0, 127),
        (true, true) => (16.0 / 256.0, 255),
        (false, false) => (1.0 / 128.0, 0),
        (false, true) => (1.0 / 128.0, 128),
    };
    let x = qtensor(&mut m, "x", ty, &shape, in_q);
    let o = qtensor(&mut m, "y", ty, &shape, out_q);
    m.inputs.push(x);
    m.outputs.push(o);
    let mut fixed = vec![];
    if log {
        m.add_op(OpCode::Builtin(B::LOG_SOFTMAX), &[x], &[o], Options::None);
    } else {
        m.add_op(OpCode::Builtin(B::L2_NORMALIZATION), &[x], &[o], Options::L2Norm { activation: Activation::NONE });
        if r.coin() {
            // Rows at the zero point (LiteRT's zero-norm guard), rows one step off
            // it (the smallest norms), and random rows.
            let depth = shape[rank - 1] as usize;
            let mut v = Vec::with_capacity(n_of(&shape));
            for _ in 0..n_of(&shape) / depth {
                let kind = r.u(0, 2);
                for _ in 0..depth {
                    v.push(match kind {
                        0 => in_q.1 as i32,
                        1 => (in_q.1 + r.pick(&[-1, 0, 1])).clamp(lo, hi) as i32,
                        _ => r.int(lo, hi) as i32,
                    });
                }
            }
            fixed.push((0, v));
        }
    }
    Case { spec: m, ranges: vec![], fixed }
}
