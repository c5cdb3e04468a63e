//! Cases of the StableHLO legalization's ops: the element-wise STABLEHLO_ADD,
//! MULTIPLY, MAXIMUM, MINIMUM and AND, STABLEHLO_PAD, DILATE and REDUCE_WINDOW,
//! with randomized shapes (scalars, size-1 and odd dimensions) and options, per
//! element type. LiteRT computes them on stored values (int8 without its
//! quantization), so integer cases draw values over the type's whole range.

use crate::{out, Case, Rng};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, HloOptions, ModelSpec, OpCode, Options, TensorSpec};

/// True for the cases this module writes (named by the op and, but for the
/// first, the element type: `STABLEHLO_ADD_INT8`); `OPS` in main lists them.
pub(crate) fn handles(name: &str) -> bool {
    [
        "STABLEHLO_ADD",
        "STABLEHLO_MULTIPLY",
        "STABLEHLO_MAXIMUM",
        "STABLEHLO_MINIMUM",
        "STABLEHLO_AND",
        "STABLEHLO_PAD",
        "DILATE",
        "REDUCE_WINDOW",
        "STABLEHLO_REDUCE_WINDOW",
    ]
    .iter()
    .any(|p| name == *p || name.strip_prefix(p).is_some_and(|rest| rest.starts_with('_')))
}

/// Cases LiteRT refuses (and ferrite must too): AND of floats, the UNSUPPORTED
/// reduce function, window lists of int32 (LiteRT reads them as int64 only), a
/// SUB reduction body.
pub(crate) const REFUSED: &[&str] = &["STABLEHLO_AND_FLOAT32", "REDUCE_WINDOW_UNSUPPORTED", "REDUCE_WINDOW_INT32_WINDOW", "STABLEHLO_REDUCE_WINDOW_SUB"];

/// The element type a case name ends in (float32 without a suffix).
fn dtype_of(name: &str) -> TensorType {
    let types = [
        ("_INT8", TensorType::INT8),
        ("_UINT8", TensorType::UINT8),
        ("_INT16", TensorType::INT16),
        ("_INT32", TensorType::INT32),
        ("_INT64", TensorType::INT64),
        ("_BOOL", TensorType::BOOL),
    ];
    types.iter().find(|(s, _)| name.ends_with(s)).map_or(TensorType::FLOAT32, |(_, t)| *t)
}

/// A shape of rank 0 to 4 with dimensions 1 to 5 (odd and size-1 ones common).
fn shape(r: &mut Rng, lo: usize) -> Vec<i32> {
    let rank = r.u(lo, 4);
    r.shape(rank, 1, 5)
}

/// A model input of type `t`; float inputs take values in [-2, 2].
fn input(m: &mut ModelSpec, ranges: &mut Vec<(f32, f32)>, name: &str, t: TensorType, s: &[i32]) -> i32 {
    let x = m.add_tensor(TensorSpec::activation(name, t, s));
    m.inputs.push(x);
    if t == TensorType::FLOAT32 {
        ranges.push((-2.0, 2.0));
    }
    x
}

fn const_i64(name: &str, v: &[i64]) -> TensorSpec {
    let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    TensorSpec { data: Some(data), ..TensorSpec::activation(name, TensorType::INT64, &[v.len() as i32]) }
}

/// The case called `name` (one [`handles`]).
pub(crate) fn gen(name: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {name}"), ..Default::default() };
    let mut ranges = vec![];
    let t = dtype_of(name);
    let (code, options) = if name.starts_with("STABLEHLO_PAD") {
        // Edge padding -2..=3 (negative crops, never past the whole dimension),
        // interior 0..=2. Every output dimension keeps at least one element: where a
        // crop empties one, LiteRT reports every dimension as 0 (an empty tensor
        // either way, but not the shape StableHLO defines, which ferrite gives).
        let s = shape(r, 1);
        let x = input(&mut m, &mut ranges, "x", t, &s);
        let v = input(&mut m, &mut ranges, "value", t, &[]);
        let mut low = vec![];
        let mut high = vec![];
        let interior: Vec<i64> = s.iter().map(|_| r.int(0, 2)).collect();
        for (&d, &it) in s.iter().zip(&interior) {
            let inner = i64::from(d) + (i64::from(d) - 1) * it;
            let lo = r.int(-(inner - 1).min(2), 3);
            low.push(lo);
            high.push(r.int((-2).max(1 - (inner + lo)), 3));
        }
        let o = out(&mut m, t, &[]);
        m.add_op(OpCode::Builtin(B::STABLEHLO_PAD), &[x, v], &[o], Options::Hlo(HloOptions::Pad { low, high, interior }));
        return Case { spec: m, ranges, fixed: vec![] };
    } else if name.starts_with("DILATE") {
        let s = shape(r, 1);
        let x = input(&mut m, &mut ranges, "x", t, &s);
        let d: Vec<i32> = s.iter().map(|_| r.int(1, 3) as i32).collect();
        let dt = m.add_tensor(TensorSpec::const_i32("dilations", &[d.len() as i32], &d));
        let v = input(&mut m, &mut ranges, "value", t, &[]);
        let o = out(&mut m, t, &[]);
        m.add_op(OpCode::Builtin(B::DILATE), &[x, dt, v], &[o], Options::None);
        return Case { spec: m, ranges, fixed: vec![] };
    } else if name.starts_with("STABLEHLO_REDUCE_WINDOW") {
        // Window, strides, base and window dilations, edge padding -1..=2 (crops
        // never past the dimension); the body subgraph's single op at random, or the
        // case's own (SUB: refused by both).
        let s = shape(r, 1);
        let x = input(&mut m, &mut ranges, "x", t, &s);
        let init = input(&mut m, &mut ranges, "init", t, &[]);
        let window: Vec<i64> = s.iter().map(|&d| r.int(1, i64::from(d).min(3))).collect();
        let strides: Vec<i64> = s.iter().map(|_| r.int(1, 2)).collect();
        let base_dilations: Vec<i64> = s.iter().map(|_| r.int(1, 2)).collect();
        let window_dilations: Vec<i64> = s.iter().map(|_| r.int(1, 2)).collect();
        let padding: Vec<i64> = s.iter().flat_map(|&d| [r.int(-(i64::from(d) - 1).min(1), 2), r.int(0, 2)]).collect();
        let bodies = [
            B::STABLEHLO_ADD,
            B::STABLEHLO_MULTIPLY,
            B::STABLEHLO_MAXIMUM,
            B::STABLEHLO_MINIMUM,
            B::ADD,
            B::MAXIMUM,
            B::LOGICAL_AND,
            B::LOGICAL_OR,
            B::STABLEHLO_AND,
        ];
        let body_code = if name.ends_with("_SUB") { B::SUB } else { r.pick(if t == TensorType::FLOAT32 { &bodies[..8] } else { &bodies[..] }) };
        let mut body = ModelSpec::default();
        let (lhs, rhs) = (body.add_tensor(TensorSpec::activation("lhs", t, &[])), body.add_tensor(TensorSpec::activation("rhs", t, &[])));
        let res = body.add_tensor(TensorSpec::activation("res", t, &[]));
        body.add_op(OpCode::Builtin(body_code), &[lhs, rhs], &[res], Options::None);
        body.inputs = vec![lhs, rhs];
        body.outputs = vec![res];
        m.subgraphs.push(body);
        let o = out(&mut m, t, &[]);
        let options = HloOptions::StablehloReduceWindow {
            window_dimensions: window,
            window_strides: strides,
            base_dilations,
            window_dilations,
            padding,
            body_subgraph_index: 1,
        };
        m.add_op(OpCode::Builtin(B::STABLEHLO_REDUCE_WINDOW), &[x, init], &[o], Options::Hlo(options));
        return Case { spec: m, ranges, fixed: vec![] };
    } else if name.starts_with("REDUCE_WINDOW") {
        // Windows up to one past the dimension (an empty output), strides 1 to 3,
        // dilations 1 to 2; the function at random (UNSUPPORTED for its case).
        let s = shape(r, 1);
        let x = input(&mut m, &mut ranges, "x", t, &s);
        let init = input(&mut m, &mut ranges, "init", t, &[]);
        let window: Vec<i64> = s
            .iter()
            .map(|&d| {
                let past = i64::from(r.u(0, 4) == 0);
                r.int(1, i64::from(d) + past)
            })
            .collect();
        let strides: Vec<i64> = s.iter().map(|_| r.int(1, 3)).collect();
        let dil: Vec<i64> = s.iter().map(|_| r.int(1, 2)).collect();
        let lists = if name.ends_with("_INT32_WINDOW") {
            let i32s = |n: &str, v: &[i64]| TensorSpec::const_i32(n, &[v.len() as i32], &v.iter().map(|&k| k as i32).collect::<Vec<_>>());
            [i32s("window", &window), i32s("strides", &strides), i32s("dilations", &dil)]
        } else {
            [const_i64("window", &window), const_i64("strides", &strides), const_i64("dilations", &dil)]
        };
        let ids: Vec<i32> = lists.into_iter().map(|l| m.add_tensor(l)).collect();
        let o = out(&mut m, t, &[]);
        let function = if name.ends_with("UNSUPPORTED") { 0 } else { r.int(1, 6) as i32 };
        m.add_op(OpCode::Builtin(B::REDUCE_WINDOW), &[x, init, ids[0], ids[1], ids[2]], &[o], Options::Hlo(HloOptions::ReduceWindow { function }));
        return Case { spec: m, ranges, fixed: vec![] };
    } else {
        let code = [
            ("STABLEHLO_ADD", B::STABLEHLO_ADD),
            ("STABLEHLO_MULTIPLY", B::STABLEHLO_MULTIPLY),
            ("STABLEHLO_MAXIMUM", B::STABLEHLO_MAXIMUM),
            ("STABLEHLO_MINIMUM", B::STABLEHLO_MINIMUM),
            ("STABLEHLO_AND", B::STABLEHLO_AND),
        ]
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map_or(B::STABLEHLO_ADD, |(_, c)| *c);
        (code, Options::None)
    };
    // Element-wise: equal shapes, rank 0 to 4; now and then an empty dimension.
    let mut s = shape(r, 0);
    if !s.is_empty() && r.u(0, 7) == 0 {
        let d = r.u(0, s.len() - 1);
        s[d] = 0;
    }
    let a = input(&mut m, &mut ranges, "a", t, &s);
    let b = input(&mut m, &mut ranges, "b", t, &s);
    let o = out(&mut m, t, &s);
    m.add_op(OpCode::Builtin(code), &[a, b], &[o], options);
    Case { spec: m, ranges, fixed: vec![] }
}
