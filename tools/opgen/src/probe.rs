//! `ferrite-opgen probe OUTDIR`: one single-op model per op of the op table and
//! element-type column of the coverage report, for `tools/litert_types.py` to ask
//! LiteRT whether it runs each one.
//!
//! A column's model is the generator's own case for that variant where it has one
//! (`CONV_2D_INT8`, `FULLY_CONNECTED_HYBRID`, ...: those carry the quantization
//! LiteRT requires), else the op's float case retyped: its data tensors (the
//! float32 ones, or the bool/int ones of an op without float tensors) become the
//! column's type, constants converted value by value, quantized tensors sharing
//! one scale sized to the inputs' ranges. Multi-op cases (bool operands made by a
//! comparison) are cut down to the probed op, its non-constant inputs becoming
//! model inputs, so a refusal can only come from that op.

use crate::{gen, Case, Rng, OPS};
use ferrite_format::coverage::TYPE_COLUMNS;
use ferrite_format::ops::{BuiltinOp, Types};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, ModelSpec, OpCode, Options, TensorSpec};
use serde_json::{json, Value};

/// Table ops the generator has a float case for although `OPS` leaves them out
/// (LiteRT's reference resolver lacks them; the probe asks its builtin kernels).
const EXTRA_BASES: &[&str] = &["ELU", "CEIL", "ROUND", "BROADCAST_TO"];

/// Ops with dynamic-range (hybrid) kernels: the weight-carrying ones, where the
/// converter's dynamic-range mode quantizes a constant operand. Any other op given
/// an int8 constant beside float activations would only read it as garbage floats
/// (LiteRT's PRELU does), so the column does not apply to it.
const HYBRID_OPS: &[&str] = &[
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "FULLY_CONNECTED",
    "BATCH_MATMUL",
    "TRANSPOSE_CONV",
    "CONV_3D",
    "CONV_3D_TRANSPOSE",
    "EMBEDDING_LOOKUP",
    "LSTM",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "RNN",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "SVDF",
];

/// Columns a retyped float case cannot stand for, and why: the probe would test
/// its own model, not LiteRT.
fn not_probed(op: &str, col: &str) -> Option<&'static str> {
    match (op, col) {
        ("LSTM" | "UNIDIRECTIONAL_SEQUENCE_LSTM", "int8" | "uint8" | "int16x8") => {
            Some("not probed: a quantized LSTM needs its gate intermediates' scales and int32 biases, which a retyped float case lacks")
        }
        ("BITCAST", _) => Some("not probed: retyping changes the element sizes the case's shapes were made for"),
        // Conversions: the column is the type converted from (or to), which retyping
        // the case's float side does not give.
        ("QUANTIZE" | "DEQUANTIZE", _) => Some("not probed: a conversion op's column is the type it converts, not its float side"),
        _ => None,
    }
}

/// Output quantization LiteRT requires of some quantized ops (it refuses any other).
fn fixed_output_quant(op: &str, ty: TensorType) -> Option<(f32, i64)> {
    let unsigned = ty == TensorType::UINT8;
    match (op, ty) {
        ("LOG_SOFTMAX", TensorType::INT8 | TensorType::UINT8) => Some((16.0 / 256.0, if unsigned { 255 } else { 127 })),
        ("L2_NORMALIZATION", TensorType::INT8 | TensorType::UINT8) => Some((1.0 / 128.0, if unsigned { 128 } else { 0 })),
        ("LOGISTIC", TensorType::INT8 | TensorType::UINT8) => Some((1.0 / 256.0, if unsigned { 0 } else { -128 })),
        ("TANH", TensorType::INT8 | TensorType::UINT8) => Some((1.0 / 128.0, if unsigned { 128 } else { 0 })),
        ("SOFTMAX", TensorType::INT8 | TensorType::UINT8) => Some((1.0 / 256.0, if unsigned { 0 } else { -128 })),
        _ => None,
    }
}

/// The generator's case-name suffixes of a column's variants, most specific first.
fn variant_suffixes(col: &str) -> &'static [&'static str] {
    match col {
        "int8" => &["_INT8"],
        "uint8" => &["_UINT8"],
        "int16x8" => &["_INT16X8", "_INT16"],
        "hybrid" => &["_HYBRID"],
        _ => &[],
    }
}

/// The case the float column (and the retyped columns) start from: the op's own
/// name, else its first variant.
fn base_case(op: &str) -> Option<&'static str> {
    if let Some(c) = OPS.iter().chain(EXTRA_BASES).find(|c| **c == op) {
        return Some(c);
    }
    OPS.iter().copied().find(|c| c.strip_prefix(op).is_some_and(|rest| rest.starts_with('_')))
}

/// One model input of a probe: where its values come from.
struct ProbeInput {
    range: Option<(f32, f32)>,
    fixed: Option<Vec<i32>>,
}

/// The first op of `case` with builtin `code`, alone in a model of its own:
/// its non-constant, non-variable inputs are the model's inputs (keeping the
/// case's value ranges and fixed values), its outputs the model's outputs.
fn isolate(case: &Case, code: ferrite_format::schema::BuiltinOperator) -> Option<(ModelSpec, Vec<ProbeInput>)> {
    let spec = &case.spec;
    let op = spec.ops.iter().find(|o| o.code == OpCode::Builtin(code))?;
    // Value sources of the case's own inputs, as the harness assigns them: fixed
    // values by input index, ranges in order over the float inputs.
    let mut ranges = case.ranges.iter();
    let mut source = std::collections::HashMap::new();
    for (k, &t) in spec.inputs.iter().enumerate() {
        if let Some((_, v)) = case.fixed.iter().find(|(i, _)| *i == k) {
            source.insert(t, ProbeInput { range: None, fixed: Some(v.clone()) });
        } else if spec.tensors[t as usize].dtype == TensorType::FLOAT32 {
            source.insert(t, ProbeInput { range: ranges.next().copied(), fixed: None });
        }
    }
    // Further subgraphs come along: an op's body (STABLEHLO_REDUCE_WINDOW's) is one.
    let mut m = ModelSpec {
        description: format!("ferrite type probe: {}", code.variant_name().unwrap_or("?")),
        subgraphs: spec.subgraphs.clone(),
        ..Default::default()
    };
    let mut map = std::collections::HashMap::new();
    let mut inputs = vec![];
    let mut new_index = |m: &mut ModelSpec, t: i32| -> i32 { *map.entry(t).or_insert_with(|| m.add_tensor(spec.tensors[t as usize].clone())) };
    let mut ins = vec![];
    let mut seen = std::collections::HashSet::new();
    for &t in &op.inputs {
        if t < 0 {
            ins.push(t);
            continue;
        }
        let n = new_index(&mut m, t);
        let ts = &spec.tensors[t as usize];
        if ts.data.is_none() && !ts.is_variable && seen.insert(t) {
            m.inputs.push(n);
            inputs.push(source.remove(&t).unwrap_or(ProbeInput { range: None, fixed: None }));
        }
        ins.push(n);
    }
    let outs: Vec<i32> = op.outputs.iter().map(|&t| new_index(&mut m, t)).collect();
    // Intermediates carry scales the integer LSTM reads: copied like the rest.
    let intermediates: Vec<i32> = op.intermediates.iter().map(|&t| new_index(&mut m, t)).collect();
    m.outputs = outs.clone();
    m.ops.push(ferrite_format::writer::OpSpec {
        code: op.code.clone(),
        inputs: ins,
        outputs: outs,
        options: op.options.clone(),
        custom_options: op.custom_options.clone(),
        version: op.version,
        intermediates,
    });
    Some((m, inputs))
}

/// Values of a constant tensor as reals (dequantized where quantized).
fn const_values(t: &TensorSpec) -> Vec<f64> {
    let d = t.data.as_deref().unwrap_or(&[]);
    let (scale, zp) = t.quant.as_ref().and_then(|q| Some((*q.0.first()? as f64, *q.1.first()? as f64))).unwrap_or((1.0, 0.0));
    let deq = |q: f64| (q - zp) * scale;
    match t.dtype {
        TensorType::FLOAT32 => d.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        TensorType::INT32 => d.chunks_exact(4).map(|c| deq(i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)).collect(),
        TensorType::INT64 => d.chunks_exact(8).map(|c| deq(i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)).collect(),
        TensorType::INT16 => d.chunks_exact(2).map(|c| deq(i16::from_le_bytes([c[0], c[1]]) as f64)).collect(),
        TensorType::INT8 => d.iter().map(|&b| deq(b as i8 as f64)).collect(),
        TensorType::UINT8 => d.iter().map(|&b| deq(b as f64)).collect(),
        TensorType::BOOL => d.iter().map(|&b| (b != 0) as u8 as f64).collect(),
        _ => vec![],
    }
}

/// The probed op's tensors whose type decides the column: float32 where it has
/// any, else bool, else int32, else int64, else the narrow integers (bitwise ops).
fn data_type(m: &ModelSpec) -> Option<TensorType> {
    [TensorType::FLOAT32, TensorType::BOOL, TensorType::INT32, TensorType::INT64, TensorType::INT8, TensorType::UINT8, TensorType::INT16, TensorType::UINT32]
        .into_iter()
        .find(|ty| m.tensors.iter().any(|t| t.dtype == *ty))
}

/// Retypes the float case's data tensors for `col`; `Err` when the column has no
/// meaning for the op (a hybrid op needs constant weights to quantize).
fn retype(m: &mut ModelSpec, inputs: &[ProbeInput], op: &str, col: &str) -> Result<(), String> {
    let Some(src) = data_type(m) else { return Err("the probe case has no float, bool or integer tensor".into()) };
    if col == "hybrid" {
        if !HYBRID_OPS.contains(&op) {
            return Err("dynamic-range quantization applies to weight-carrying ops only".into());
        }
        // Dynamic range: float activations, int8 weights (constants of rank >= 2).
        let mut any = false;
        for t in m.tensors.iter_mut().filter(|t| t.dtype == TensorType::FLOAT32 && t.data.is_some() && t.shape.len() >= 2) {
            let v = const_values(t);
            let amax = v.iter().fold(1e-6f64, |a, &x| a.max(x.abs()));
            let s = amax / 127.0;
            t.data = Some(v.iter().map(|&x| (x / s).round().clamp(-127.0, 127.0) as i8 as u8).collect());
            t.dtype = TensorType::INT8;
            t.quant = Some((vec![s as f32], vec![0], 0));
            any = true;
        }
        return if any { Ok(()) } else { Err("the op has no constant weights: its hybrid model is its float32 model".into()) };
    }
    let (ty, zp, levels) = match col {
        "float32" => (TensorType::FLOAT32, 0, 0.0),
        "int8" => (TensorType::INT8, 0, 100.0),
        "uint8" => (TensorType::UINT8, 128, 100.0),
        "int16x8" => (TensorType::INT16, 0, 30000.0),
        // int32/int64/bool: an op whose case is integer or bool already is probed as it is.
        "int" if matches!(src, TensorType::BOOL | TensorType::INT32 | TensorType::INT64) => return Ok(()),
        "int" if src != TensorType::FLOAT32 => (TensorType::INT32, 0, 0.0),
        "int" => (TensorType::INT32, 0, 0.0),
        _ => return Err(format!("unknown column {col}")),
    };
    if ty == src {
        return Ok(());
    }
    // One scale for every quantized tensor, sized to the largest input or constant.
    let mut amax = inputs.iter().filter_map(|i| i.range).fold(0.0f64, |a, (lo, hi)| a.max(lo.abs() as f64).max(hi.abs() as f64));
    for t in m.tensors.iter().filter(|t| t.dtype == src && t.data.is_some()) {
        amax = const_values(t).iter().fold(amax, |a, &x| a.max(x.abs()));
    }
    let scale = if amax > 0.0 { amax / levels } else { 2.0 / levels };
    for t in m.tensors.iter_mut().filter(|t| t.dtype == src) {
        let values = t.data.is_some().then(|| const_values(t));
        t.dtype = ty;
        t.quant = (levels > 0.0).then(|| (vec![scale as f32], vec![zp], 0));
        if let Some(v) = values {
            t.data = Some(match ty {
                TensorType::FLOAT32 => v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
                TensorType::INT32 => v.iter().flat_map(|&x| (x.round() as i32).to_le_bytes()).collect(),
                TensorType::INT16 => v.iter().flat_map(|&x| ((x / scale).round().clamp(-32767.0, 32767.0) as i16).to_le_bytes()).collect(),
                TensorType::INT8 => v.iter().map(|&x| ((x / scale).round().clamp(-128.0, 127.0) as i8) as u8).collect(),
                _ => v.iter().map(|&x| ((x / scale).round() + zp as f64).clamp(0.0, 255.0) as u8).collect(),
            });
        }
    }
    if let Some((s, z)) = fixed_output_quant(op, ty) {
        for &o in &m.outputs {
            m.tensors[o as usize].quant = Some((vec![s], vec![z], 0));
        }
    }
    Ok(())
}

/// Writes the probe models and `OUTDIR/manifest.json` (one entry per op and column:
/// `file` and its inputs' value sources, `na` with why the column does not apply to
/// the op, or `unprobed` with why the probe cannot build it).
pub fn write(dir: &std::path::Path, seed: u64) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut entries: Vec<Value> = vec![];
    for op in BuiltinOp::ALL.iter() {
        if op.types().contains(Types::EXECUTOR) {
            continue;
        }
        let name = op.name();
        let Some(base) = base_case(name) else {
            for &(col, _) in TYPE_COLUMNS.iter() {
                entries.push(json!({"op": name, "type": col, "unprobed": "the generator has no case for it"}));
            }
            continue;
        };
        for (ci, &(col, _)) in TYPE_COLUMNS.iter().enumerate() {
            // Seeded by the op's name, not its place in the table, so that adding an
            // op leaves every other probe's model (and the checked-in result) as it was.
            let name_hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
            let mut r = Rng(seed.wrapping_mul(1_000_003).wrapping_add(name_hash.wrapping_shl(20) | ci as u64));
            let variant = variant_suffixes(col).iter().map(|s| format!("{name}{s}")).find(|v| OPS.contains(&v.as_str()));
            let case = gen(variant.as_deref().unwrap_or(base), &mut r);
            let Some((mut m, inputs)) = isolate(&case, op.operator()) else {
                entries.push(json!({"op": name, "type": col, "na": format!("the generator's case {base} holds no {name} op")}));
                continue;
            };
            if let Some(why) = not_probed(name, col).filter(|_| variant.is_none()) {
                entries.push(json!({"op": name, "type": col, "unprobed": why}));
                continue;
            }
            if variant.is_none() {
                if let Err(why) = retype(&mut m, &inputs, name, col) {
                    entries.push(json!({"op": name, "type": col, "na": why}));
                    continue;
                }
            }
            // LiteRT's integer SVDF takes RELU only (its float and hybrid kernels any
            // activation): the probe asks about the type, not that option.
            if col == "int8" {
                for o in &mut m.ops {
                    if let Options::Svdf { activation, .. } = &mut o.options {
                        *activation = Activation::RELU;
                    }
                }
            }
            let file = format!("{}_{col}.tflite", name.to_lowercase());
            let bytes = m.to_bytes().map_err(|e| format!("{file}: {e}"))?;
            std::fs::write(dir.join(&file), bytes).map_err(|e| e.to_string())?;
            let ins: Vec<Value> = inputs.iter().map(|i| json!({"range": i.range.map(|(a, b)| [a, b]), "fixed": i.fixed})).collect();
            entries.push(json!({"op": name, "type": col, "file": file, "case": variant.as_deref().unwrap_or(base), "inputs": ins}));
        }
    }
    std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&entries).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}
