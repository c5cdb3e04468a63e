//! Finding where two runs of a model part ways: [`capture`] runs a session once
//! and keeps a copy of every tensor an op of its subgraph materialises; [`compare`]
//! walks those ops in execution order against a reference's tensors (another
//! session's capture, or values read from files) and names the first op whose
//! output departs beyond a [`Tolerance`]. `ferrite compare` is built on it.
//!
//! Only tensors both sides hold are compared: a fused-away intermediate (a
//! convolution output whose activation its kernel applied) is not, the fused op's
//! own output is. Quantized tensors are compared as the real numbers they encode
//! (`scale * (q - zero_point)`) and their error is counted in units of the tensor's
//! scale, so "1" means one quantization step whatever the scale.

use std::collections::HashMap;

use crate::compile::OpRun;
use crate::error::{Error, Result};
use crate::model::{DType, Quantization};
use crate::observe::{Flow, RunOutcome, TensorState};
use crate::session::Session;

/// A tensor's value as one run left it.
#[derive(Debug, Clone)]
pub struct CapturedTensor {
    /// Tensor index in the subgraph.
    pub tensor: usize,
    /// Name in the model.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Quantization parameters, if any.
    pub quant: Option<Quantization>,
    /// Raw little-endian bytes.
    pub data: Vec<u8>,
}

/// What a capture keeps of a tensor an op reads or writes, without its data.
#[derive(Debug, Clone)]
pub struct TensorMeta {
    /// Tensor index in the subgraph.
    pub tensor: usize,
    /// Name in the model.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape under the plan that ran.
    pub shape: Vec<usize>,
    /// Whether the run materialised it.
    pub state: TensorState,
    /// Constant data (weights), as opposed to a value computed by the run.
    pub constant: bool,
}

/// One op of a captured run.
#[derive(Debug, Clone)]
pub struct CapturedOp {
    /// Op index in the subgraph.
    pub index: usize,
    /// The op's type (`CONV_2D`, or a custom op's name).
    pub op_type: String,
    /// Its parameters (options), as text.
    pub params: String,
    /// Where it ran.
    pub runs_on: OpRun,
    /// Its inputs (omitted optional ones left out).
    pub inputs: Vec<TensorMeta>,
    /// Its outputs.
    pub outputs: Vec<TensorMeta>,
}

/// Every op of one run, in execution order, and a copy of each tensor it materialised.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// The ops, in the order they ran.
    pub ops: Vec<CapturedOp>,
    /// Materialised op outputs by tensor index.
    pub tensors: HashMap<usize, CapturedTensor>,
}

/// Runs `s` once (it must be prepared, inputs set) and copies every op output it
/// materialises. An error if the run fails or does not complete.
pub fn capture(s: &mut Session) -> Result<Capture> {
    let main = s.subgraph_index();
    let consts: Vec<bool> = s.model().subgraphs[main].tensors.iter().map(|t| t.is_const()).collect();
    let mut cap = Capture::default();
    let outcome = s.run_with_callbacks(
        |_| Flow::Continue,
        |ev| {
            // Tensor indices are per subgraph: only the session's own are captured.
            if ev.subgraph != main {
                return Flow::Continue;
            }
            let meta = |v: &crate::TensorView<'_>| TensorMeta {
                tensor: v.tensor,
                name: v.name.to_string(),
                dtype: v.dtype,
                shape: v.shape.to_vec(),
                state: v.state,
                constant: consts.get(v.tensor).copied().unwrap_or(false),
            };
            for v in ev.outputs {
                if let (TensorState::Ready, Some(d)) = (v.state, v.data) {
                    cap.tensors.insert(
                        v.tensor,
                        CapturedTensor {
                            tensor: v.tensor,
                            name: v.name.to_string(),
                            dtype: v.dtype,
                            shape: v.shape.to_vec(),
                            quant: v.quant.cloned(),
                            data: d.to_vec(),
                        },
                    );
                }
            }
            cap.ops.push(CapturedOp {
                index: ev.index,
                op_type: ev.op_name(),
                params: format!("{:?}", ev.op.params),
                runs_on: ev.runs_on,
                inputs: ev.inputs.iter().map(meta).collect(),
                outputs: ev.outputs.iter().map(meta).collect(),
            });
            Flow::Continue
        },
    )?;
    if outcome != RunOutcome::Completed {
        return Err(Error::Runtime(format!("the captured run did not complete ({outcome:?})").into()));
    }
    Ok(cap)
}

/// How far a tensor may depart from the reference before it counts as diverged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Floating-point tensors: the largest error relative to the reference's range
    /// (its largest magnitude). Kernels that sum in another order differ by a few
    /// ulps per op; over most networks that stays below 1e-4 of the range, but deep
    /// ones fed random inputs amplify it (MediaPipe's pose landmark model reaches
    /// 4e-3 after 220 ops against LiteRT). A wrong kernel is off by far more.
    pub float: f64,
    /// Quantized tensors: the largest error in units of the tensor's scale. One unit
    /// is a rounding tie broken the other way, which LiteRT's own kernels disagree on.
    pub quantized: f64,
    /// Other integer and boolean tensors (indices, shapes, masks): absolute.
    pub integer: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance { float: 1e-2, quantized: 1.0, integer: 0.0 }
    }
}

impl Tolerance {
    /// Parses `--tolerance`: one number for floating-point tensors (`1e-4`), or
    /// `float=1e-4,quantized=2,integer=0` with any of the three keys.
    pub fn parse(spec: &str) -> std::result::Result<Tolerance, String> {
        let mut t = Tolerance::default();
        let num = |v: &str| -> std::result::Result<f64, String> {
            v.trim().parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0).ok_or_else(|| format!("tolerance '{v}' is not a number >= 0"))
        };
        if !spec.contains('=') {
            t.float = num(spec)?;
            return Ok(t);
        }
        for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("tolerance '{part}': expected key=value"))?;
            match k.trim() {
                "float" => t.float = num(v)?,
                "quantized" | "quant" => t.quantized = num(v)?,
                "integer" | "int" => t.integer = num(v)?,
                other => return Err(format!("tolerance key '{other}': expected float, quantized or integer")),
            }
        }
        Ok(t)
    }
}

/// How one tensor departs from the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDiff {
    /// Tensor index.
    pub tensor: usize,
    /// Which tolerance applies.
    pub kind: ValueKind,
    /// Elements compared.
    pub elements: usize,
    /// Largest absolute error (for quantized tensors, of the real values).
    pub max_abs: f64,
    /// Where it is (a multi-index into the shape).
    pub at: Vec<usize>,
    /// Our value there.
    pub ours: f64,
    /// The reference's value there.
    pub reference: f64,
    /// The reference's largest magnitude.
    pub range: f64,
    /// `max_abs` relative to `range` (for every kind; the tolerance of floats).
    pub relative: f64,
    /// For a quantized tensor: the largest error in units of its scale.
    pub units: Option<f64>,
    /// Elements whose error is beyond the tolerance.
    pub beyond: usize,
    /// Whether the tensor diverged.
    pub diverged: bool,
    /// Why the tensors could not be compared element by element (dtype or shape differ).
    pub mismatch: Option<String>,
}

impl TensorDiff {
    /// The error in the unit its tolerance is given in: scale units for quantized
    /// tensors, relative to the range for floats, absolute for other integers.
    pub fn score(&self) -> f64 {
        match self.kind {
            ValueKind::Quantized => self.units.unwrap_or(0.0),
            ValueKind::Float => self.relative,
            ValueKind::Integer => self.max_abs,
        }
    }
}

/// Which tolerance a tensor is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// float32/16/64: relative to the reference's range.
    Float,
    /// Integers with a scale: in units of the scale.
    Quantized,
    /// Other integers and booleans: absolute.
    Integer,
}

/// The tensor's elements as real numbers (dequantized), or `None` for element types
/// that are not numbers.
fn values(t: &CapturedTensor) -> Option<Vec<f64>> {
    let d = &t.data;
    let raw: Vec<f64> = match t.dtype {
        DType::F32 => d.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        DType::F16 => d.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        DType::F64 => d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
        DType::I8 => d.iter().map(|&b| b as i8 as f64).collect(),
        DType::U8 | DType::Bool => d.iter().map(|&b| b as f64).collect(),
        DType::I16 => d.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as f64).collect(),
        DType::U16 => d.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as f64).collect(),
        DType::I32 => d.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        DType::U32 => d.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        DType::I64 => d.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64).collect(),
        DType::U64 => d.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64).collect(),
        _ => return None,
    };
    Some(raw)
}

/// The quantization step and zero point of element `i` of a tensor of `shape`.
fn scale_at(q: &Quantization, shape: &[usize], i: usize) -> (f64, f64) {
    let k = if q.scale.len() > 1 {
        let inner: usize = shape.iter().skip(q.axis + 1).product();
        let dim = shape.get(q.axis).copied().unwrap_or(1).max(1);
        (i / inner.max(1)) % dim
    } else {
        0
    };
    let s = q.scale.get(k).or(q.scale.first()).copied().unwrap_or(1.0) as f64;
    let z = q.zero_point.get(k).or(q.zero_point.first()).copied().unwrap_or(0) as f64;
    (s, z)
}

fn multi_index(shape: &[usize], mut i: usize) -> Vec<usize> {
    let mut at = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        let n = n.max(1);
        at[d] = i % n;
        i /= n;
    }
    at
}

/// Compares `ours` with `reference` (the same tensor from the other run).
pub fn diff_tensor(ours: &CapturedTensor, reference: &CapturedTensor, tol: &Tolerance) -> TensorDiff {
    // Dequantize with our parameters on both sides: the reference's file may not carry
    // them, and both runs read the same model.
    let float = matches!(ours.dtype, DType::F32 | DType::F16 | DType::F64);
    let quant = ours.quant.as_ref().filter(|q| !q.scale.is_empty() && !float);
    let kind = match (float, quant) {
        (true, _) => ValueKind::Float,
        (false, Some(_)) => ValueKind::Quantized,
        (false, None) => ValueKind::Integer,
    };
    let mut d = TensorDiff {
        tensor: ours.tensor,
        kind,
        elements: 0,
        max_abs: 0.0,
        at: Vec::new(),
        ours: 0.0,
        reference: 0.0,
        range: 0.0,
        relative: 0.0,
        units: quant.map(|_| 0.0),
        beyond: 0,
        diverged: false,
        mismatch: None,
    };
    let mismatch = |mut d: TensorDiff, why: String| {
        d.mismatch = Some(why);
        d.diverged = true;
        d.max_abs = f64::INFINITY;
        d.relative = f64::INFINITY;
        d.units = d.units.map(|_| f64::INFINITY);
        d
    };
    // A scalar is [] in one runtime and [1] in another: unit dimensions aside, the same shape.
    let squeezed = |s: &[usize]| s.iter().copied().filter(|&n| n != 1).collect::<Vec<_>>();
    if ours.shape != reference.shape && (squeezed(&ours.shape) != squeezed(&reference.shape) || ours.shape.contains(&0) || reference.shape.contains(&0)) {
        return mismatch(d, format!("shape {:?}, reference {:?}", ours.shape, reference.shape));
    }
    if ours.dtype != reference.dtype {
        return mismatch(d, format!("{}, reference {}", ours.dtype.name(), reference.dtype.name()));
    }
    let (Some(a), Some(b)) = (values(ours), values(reference)) else {
        // Strings and other non-numbers: equal bytes or not.
        return if ours.data == reference.data { d } else { mismatch(d, format!("{} data differs", ours.dtype.name())) };
    };
    if a.len() != b.len() {
        return mismatch(d, format!("{} elements, reference {}", a.len(), b.len()));
    }
    d.elements = a.len();
    // (ours, reference, error in the tolerance's unit before the range is known) per element.
    let real: Vec<(f64, f64, f64)> = (0..a.len())
        .map(|i| {
            let (x, y, step) = match quant {
                Some(q) => {
                    let (s, z) = scale_at(q, &ours.shape, i);
                    ((a[i] - z) * s, (b[i] - z) * s, s)
                }
                None => (a[i], b[i], 1.0),
            };
            let err = match (x.is_nan(), y.is_nan()) {
                (true, true) => 0.0,
                (false, false) if x == y => 0.0,
                (false, false) => (x - y).abs(),
                _ => f64::INFINITY,
            };
            (x, y, err / step)
        })
        .collect();
    d.range = real.iter().map(|r| r.1.abs()).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let limit = match kind {
        ValueKind::Float => tol.float * d.range,
        ValueKind::Quantized => tol.quantized + 1e-9,
        ValueKind::Integer => tol.integer,
    };
    let mut worst = (-1.0f64, 0usize);
    for (i, &(_, _, e)) in real.iter().enumerate() {
        d.beyond += (e > limit) as usize;
        if e > worst.0 {
            worst = (e, i);
        }
    }
    let (x, y, e) = real.get(worst.1).copied().unwrap_or((0.0, 0.0, 0.0));
    d.at = multi_index(&ours.shape, worst.1);
    (d.ours, d.reference) = (x, y);
    d.max_abs = if x.is_nan() != y.is_nan() {
        f64::INFINITY
    } else if x == y || (x.is_nan() && y.is_nan()) {
        0.0
    } else {
        (x - y).abs()
    };
    d.relative = if d.range > 0.0 {
        d.max_abs / d.range
    } else if d.max_abs > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    if quant.is_some() {
        d.units = Some(e.max(0.0));
    }
    d.diverged = d.beyond > 0;
    d
}

/// One op of the walk: its description and the comparison of each output both runs hold.
#[derive(Debug, Clone)]
pub struct OpComparison {
    /// The op, as our run saw it.
    pub op: CapturedOp,
    /// One entry per output both runs materialised.
    pub diffs: Vec<TensorDiff>,
}

impl OpComparison {
    /// Whether an output of the op diverged.
    pub fn diverged(&self) -> bool {
        self.diffs.iter().any(|d| d.diverged)
    }

    /// The output that departs most (by [`TensorDiff::score`]).
    pub fn worst(&self) -> Option<&TensorDiff> {
        self.diffs.iter().max_by(|a, b| (a.diverged, a.score()).partial_cmp(&(b.diverged, b.score())).unwrap_or(std::cmp::Ordering::Equal))
    }
}

/// The walk over every op of our run.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Every op, in execution order.
    pub ops: Vec<OpComparison>,
    /// Position in `ops` of the first op with a diverged output.
    pub first_divergence: Option<usize>,
    /// Tensors compared.
    pub compared: usize,
    /// Tensors we materialised that the reference does not hold.
    pub missing_in_reference: usize,
}

/// Walks `ours` in execution order and compares each materialised output with the
/// reference's tensor of the same index, where the reference holds it.
pub fn compare(ours: &Capture, reference: &HashMap<usize, CapturedTensor>, tol: &Tolerance) -> Comparison {
    let mut out = Comparison { ops: Vec::with_capacity(ours.ops.len()), first_divergence: None, compared: 0, missing_in_reference: 0 };
    for op in &ours.ops {
        let mut diffs = Vec::new();
        for o in &op.outputs {
            let Some(mine) = ours.tensors.get(&o.tensor).filter(|_| o.state == TensorState::Ready) else { continue };
            match reference.get(&o.tensor) {
                Some(r) => diffs.push(diff_tensor(mine, r, tol)),
                None => out.missing_in_reference += 1,
            }
        }
        out.compared += diffs.len();
        let c = OpComparison { op: op.clone(), diffs };
        if out.first_divergence.is_none() && c.diverged() {
            out.first_divergence = Some(out.ops.len());
        }
        out.ops.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_tensor(v: &[f32], shape: &[usize]) -> CapturedTensor {
        CapturedTensor {
            tensor: 3,
            name: "t".into(),
            dtype: DType::F32,
            shape: shape.to_vec(),
            quant: None,
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn float_error_is_relative_to_the_range_and_located() {
        let tol = Tolerance { float: 1e-3, ..Tolerance::default() };
        let a = f32_tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let mut v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        v[4] += 1e-5;
        let d = diff_tensor(&a, &f32_tensor(&v, &[2, 3]), &tol);
        assert!(!d.diverged);
        assert_eq!(d.at, [1, 1]);
        assert!((d.max_abs - 1e-5).abs() < 1e-6 && (d.relative - d.max_abs / 6.0).abs() < 1e-12, "{d:?}");
        v[5] = 7.0;
        let d = diff_tensor(&a, &f32_tensor(&v, &[2, 3]), &tol);
        assert!(d.diverged);
        assert_eq!((d.at.clone(), d.beyond), (vec![1, 2], 1));
        assert_eq!((d.ours, d.reference), (6.0, 7.0));
        // NaN on one side only is a divergence; on both sides it is agreement.
        let d = diff_tensor(&f32_tensor(&[f32::NAN, 1.0], &[2]), &f32_tensor(&[0.0, 1.0], &[2]), &tol);
        assert!(d.diverged);
        assert!(!diff_tensor(&f32_tensor(&[f32::NAN], &[1]), &f32_tensor(&[f32::NAN], &[1]), &tol).diverged);
        // Shapes that differ cannot agree.
        assert!(diff_tensor(&a, &f32_tensor(&[1.0; 6], &[3, 2]), &tol).mismatch.is_some());
    }

    #[test]
    fn quantized_error_is_counted_in_scale_units() {
        let q = |d: &[i8]| CapturedTensor {
            tensor: 0,
            name: "q".into(),
            dtype: DType::I8,
            shape: vec![d.len()],
            quant: Some(Quantization { scale: vec![0.5], zero_point: vec![-3], axis: 0 }),
            data: d.iter().map(|&x| x as u8).collect(),
        };
        let tol = Tolerance::default();
        let d = diff_tensor(&q(&[0, 10, 20]), &q(&[0, 11, 20]), &tol);
        assert_eq!((d.units, d.max_abs, d.diverged), (Some(1.0), 0.5, false));
        assert_eq!((d.ours, d.reference), (6.5, 7.0));
        let d = diff_tensor(&q(&[0, 10, 20]), &q(&[0, 10, 23]), &tol);
        assert_eq!((d.units, d.at.clone(), d.diverged), (Some(3.0), vec![2], true));
    }

    #[test]
    fn tolerance_parses_one_number_or_keys() {
        assert_eq!(Tolerance::parse("1e-4").unwrap().float, 1e-4);
        let t = Tolerance::parse("quantized=2, integer=1").unwrap();
        assert_eq!((t.float, t.quantized, t.integer), (1e-2, 2.0, 1.0));
        assert!(Tolerance::parse("-1").is_err());
        assert!(Tolerance::parse("speed=3").is_err());
    }
}
