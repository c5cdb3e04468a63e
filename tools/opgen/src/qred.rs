//! Generated cases of the quantized reductions (issue 14): SUM of int8 / uint8
//! onto a differently quantized output, REDUCE_PROD of int8 / int16, and MEAN of
//! int32 / int64. (Same-quantization SUM_INT8 / _UINT8 / _INT16 are the generic
//! retyped float cases.)

use super::{n_of, out, single, Case, Rng};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, ModelSpec, Options, TensorSpec};

/// The cases this module generates.
pub(crate) const OPS: &[&str] =
    &["SUM_RESCALED_INT8", "SUM_RESCALED_UINT8", "SUM_RESCALED_INT16", "REDUCE_PROD_INT8", "REDUCE_PROD_INT16", "MEAN_INT32", "MEAN_INT64"];

/// A random shape (edge sizes: 1s, odd sizes, sometimes one long axis) and
/// axes over it: random subsets, negative spellings, an axis named twice, and
/// now and then none at all (`allow_none`).
fn shape_and_axes(r: &mut Rng, allow_none: bool) -> (Vec<i32>, Vec<i32>) {
    let rank = r.u(1, 4);
    let mut s = r.shape(rank, 1, 5);
    if r.int(0, 5) == 0 {
        let d = r.u(0, rank - 1);
        s[d] = r.u(9, 23) as i32;
    }
    let mut axes: Vec<i32> = vec![];
    for a in 0..rank as i32 {
        if r.coin() {
            axes.push(if r.coin() { a - rank as i32 } else { a });
        }
    }
    if axes.is_empty() && !(allow_none && r.int(0, 3) == 0) {
        axes.push(if r.coin() { 0 } else { -1 });
    }
    if !axes.is_empty() && r.int(0, 5) == 0 {
        // The same axis twice, once negative: reduced once.
        let a = axes[0];
        axes.push(if a < 0 { a + rank as i32 } else { a - rank as i32 });
    }
    (s, axes)
}

fn quantized(name: &str, ty: TensorType, shape: &[i32], scale: f32, zp: i64) -> TensorSpec {
    TensorSpec { quant: Some((vec![scale], vec![zp], 0)), ..TensorSpec::activation(name, ty, shape) }
}

/// Elements reduced into each output.
fn reduced_count(s: &[i32], axes: &[i32]) -> usize {
    let rank = s.len() as i32;
    (0..rank).filter(|d| axes.iter().any(|&a| a == *d || a + rank == *d)).map(|d| s[d as usize] as usize).product()
}

/// The case named `op` (one of [`OPS`]).
pub(crate) fn gen(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let mut fixed = vec![];
    match op {
        "SUM_RESCALED_INT8" | "SUM_RESCALED_UINT8" | "SUM_RESCALED_INT16" => {
            let (s, axes) = shape_and_axes(r, true);
            let (ty, off) = match op {
                "SUM_RESCALED_UINT8" => (TensorType::UINT8, 128),
                "SUM_RESCALED_INT8" => (TensorType::INT8, 0),
                _ => (TensorType::INT16, 0),
            };
            let wide = ty == TensorType::INT16;
            let s_in = r.f(0.005, 0.1) / if wide { 256.0 } else { 1.0 };
            // The output's range covers a fraction of the sum's, so some outputs clamp.
            let n = reduced_count(&s, &axes).max(1) as f32;
            let s_out = s_in * n.sqrt() * r.f(0.3, 3.0);
            let zp = |r: &mut Rng| if wide { 0 } else { r.int(-40, 40) + off };
            let x = m.add_tensor(quantized("x", ty, &s, s_in, zp(r)));
            m.inputs.push(x);
            let a = m.add_tensor(TensorSpec::const_i32("axes", &[axes.len() as i32], &axes));
            let o = m.add_tensor(quantized("y", ty, &[], s_out, zp(r)));
            m.outputs.push(o);
            single(B::SUM, &[x, a], o, Options::Reducer { keep_dims: r.coin() }, &mut m);
        }
        "REDUCE_PROD_INT8" | "REDUCE_PROD_INT16" => {
            // Reals within about [-1.5, 1.5]; the output scale spans the products'
            // range (times 0.5 to 2, so some clamp).
            let wide = op.ends_with("INT16");
            let (s, axes) = shape_and_axes(r, false);
            let (ty, qmax) = if wide { (TensorType::INT16, 32767.0) } else { (TensorType::INT8, 127.0) };
            let s_in = r.f(0.5, 1.5) / qmax;
            let n = reduced_count(&s, &axes).max(1) as i32;
            let s_out = 1.5f32.powi(n.min(12)) / qmax * r.f(0.5, 2.0);
            let (zi, zo) = if wide { (0, 0) } else { (r.int(-20, 20), r.int(-20, 20)) };
            let x = m.add_tensor(quantized("x", ty, &s, s_in, zi));
            m.inputs.push(x);
            let a = m.add_tensor(TensorSpec::const_i32("axes", &[axes.len() as i32], &axes));
            let o = m.add_tensor(quantized("y", ty, &[], s_out, zo));
            m.outputs.push(o);
            single(B::REDUCE_PROD, &[x, a], o, Options::Reducer { keep_dims: r.coin() }, &mut m);
        }
        _ => {
            // MEAN_INT32 / MEAN_INT64: values of both signs (truncation toward
            // zero differs from a floor there), now and then the whole int32 range.
            let (s, axes) = shape_and_axes(r, true);
            let ty = if op.ends_with("INT64") { TensorType::INT64 } else { TensorType::INT32 };
            let x = m.add_tensor(TensorSpec::activation("x", ty, &s));
            m.inputs.push(x);
            let big = r.coin();
            let vals: Vec<i32> =
                (0..n_of(&s)).map(|_| if big { r.int(i64::from(i32::MIN), i64::from(i32::MAX)) as i32 } else { r.int(-100, 100) as i32 }).collect();
            fixed.push((0, vals));
            let a = m.add_tensor(TensorSpec::const_i32("axes", &[axes.len() as i32], &axes));
            let o = out(&mut m, ty, &[]);
            single(B::MEAN, &[x, a], o, Options::Reducer { keep_dims: r.coin() }, &mut m);
        }
    }
    Case { spec: m, ranges: vec![], fixed }
}
