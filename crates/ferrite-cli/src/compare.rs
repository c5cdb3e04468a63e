//! `ferrite compare`: runs a model in ferrite (cpu backend) and in a reference, tensor
//! by tensor, and reports the first op whose output departs beyond tolerance.
//!
//! References: ferrite's own `reference` backend (naive kernels written from each
//! op's definition, in a second session), or LiteRT through a Python helper that
//! this binary carries (`tools/litert_dump.py`) and runs with the oracle venv's
//! python, `--python` or `$FERRITE_PYTHON`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite::compare::{capture, compare, Capture, CapturedTensor, Comparison, OpComparison, TensorDiff, Tolerance, ValueKind};
use ferrite::model::Model;
use ferrite::{DType, OpRun, Session, SessionOptions};
use serde_json::{json, Value};

use crate::npy;

/// The LiteRT helper, carried in the binary so `compare` works wherever it is installed.
const LITERT_HELPER: &str = include_str!("../../../tools/litert_dump.py");

/// What ferrite's run is compared against.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// ferrite's `reference` backend: naive kernels, in a second session.
    Reference,
    /// LiteRT (its builtin kernels, no delegate) through the Python helper.
    Litert,
}

/// `ferrite compare` options.
#[derive(clap::Args, Clone, Debug)]
pub struct CompareArgs {
    /// The model file.
    pub model: PathBuf,
    /// Input .npy files in model input order (default: seeded random inputs).
    #[arg(short = 'i', long = "input")]
    pub inputs: Vec<PathBuf>,
    /// What to compare against.
    #[arg(long, value_enum, default_value = "reference")]
    pub reference: Reference,
    /// Largest tolerated error: one number for float tensors (relative to the
    /// reference's range, default 1e-2), or `float=1e-2,quantized=1,integer=0`
    /// (quantized: in units of the tensor's scale; integer: absolute).
    #[arg(long)]
    pub tolerance: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Python with LiteRT for `--reference litert` (default: $FERRITE_PYTHON, else
    /// ~/.cache/ferrite/venv/bin/python, else python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// LiteRT's kernels: `builtin` (its optimized ones) or `ref` (its reference ones).
    #[arg(long, default_value = "ref", value_parser = ["builtin", "ref"])]
    pub litert_kernels: String,
    /// Seed for random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Threads for ferrite's run.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Ops shown before and after the divergent one.
    #[arg(long, default_value_t = 3)]
    pub context: usize,
}

/// Runs the comparison and prints it. Exits with status 1 when a divergence is found
/// (like `diff`), so scripts can test for it.
pub fn main(a: &CompareArgs) -> Result<(), String> {
    let tol = match &a.tolerance {
        Some(t) => Tolerance::parse(t).map_err(|e| format!("--tolerance: {e}"))?,
        None => Tolerance::default(),
    };
    let model = Arc::new(Model::from_file(&a.model).map_err(|e| e.to_string())?);
    let options =
        |backends: &[&str]| SessionOptions { threads: a.threads, backends: backends.iter().map(|b| b.to_string()).collect(), ..SessionOptions::default() };
    let mut ours = Session::with_options(model.clone(), options(&["cpu"])).map_err(|e| e.to_string())?;
    let inputs = load_inputs(&mut ours, &a.inputs, a.seed)?;
    let mine = capture(&mut ours).map_err(|e| format!("ferrite's run: {e}"))?;
    let (reference, what) = match a.reference {
        Reference::Reference => {
            let mut r = Session::with_options(model.clone(), options(&["reference", "cpu"])).map_err(|e| e.to_string())?;
            prepare_like(&mut r, &inputs)?;
            let c = capture(&mut r).map_err(|e| format!("the reference backend's run: {e}"))?;
            (c.tensors, "ferrite's reference backend".to_string())
        }
        Reference::Litert => (run_litert(a, &model, ours.subgraph_index(), &inputs)?, format!("LiteRT ({} kernels)", a.litert_kernels)),
    };
    let cmp = compare(&mine, &reference, &tol);
    let source =
        if a.inputs.is_empty() { format!("random (seed {})", a.seed) } else { a.inputs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") };
    if a.json {
        outln!("{}", report_json(a, &what, &source, &tol, &mine, &cmp));
    } else {
        print_report(a, &what, &source, &tol, &mine, &cmp);
    }
    if cmp.first_divergence.is_some() {
        std::process::exit(1);
    }
    Ok(())
}

/// The inputs as given (resizing the session to their shapes) or seeded random ones;
/// prepares `s` and sets them. Returns their shapes and bytes, for the reference.
fn load_inputs(s: &mut Session, files: &[PathBuf], seed: u64) -> Result<Inputs, String> {
    let descs = s.inputs();
    if !files.is_empty() && files.len() != descs.len() {
        return Err(format!("model has {} inputs but {} -i files were given", descs.len(), files.len()));
    }
    let mut given = Vec::new();
    for (k, p) in files.iter().enumerate() {
        let a = npy::read(&std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?).map_err(|e| format!("{}: {e}", p.display()))?;
        if a.dtype != descs[k].dtype {
            return Err(format!("{}: array is {} but input {k} ('{}') is {}", p.display(), a.dtype.name(), descs[k].name, descs[k].dtype.name()));
        }
        if a.shape != descs[k].shape {
            s.resize_input(k, &a.shape).map_err(|e| e.to_string())?;
        }
        given.push(a.data);
    }
    s.prepare().map_err(|e| e.to_string())?;
    let descs = s.inputs();
    let data = if files.is_empty() {
        let mut rng = crate::Rng(seed);
        descs.iter().map(|d| crate::random_bytes(d.dtype, d.shape.iter().product(), &mut rng)).collect::<Result<Vec<_>, _>>()?
    } else {
        given
    };
    let inputs = Inputs { shapes: descs.into_iter().map(|d| d.shape).collect(), data };
    for (k, d) in inputs.data.iter().enumerate() {
        s.set_input(k, d).map_err(|e| e.to_string())?;
    }
    Ok(inputs)
}

/// The inputs both runs get: shapes and raw bytes, in model input order.
struct Inputs {
    shapes: Vec<Vec<usize>>,
    data: Vec<Vec<u8>>,
}

/// Prepares `s` for the same input shapes as ours and sets the same inputs.
fn prepare_like(s: &mut Session, inputs: &Inputs) -> Result<(), String> {
    for (k, shape) in inputs.shapes.iter().enumerate() {
        s.resize_input(k, shape).map_err(|e| e.to_string())?;
    }
    s.prepare().map_err(|e| e.to_string())?;
    for (k, d) in inputs.data.iter().enumerate() {
        s.set_input(k, d).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The python that runs the LiteRT helper.
fn python(a: &CompareArgs) -> PathBuf {
    if let Some(p) = &a.python {
        return p.clone();
    }
    if let Some(p) = std::env::var_os("FERRITE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/ferrite/venv/bin/python"));
    venv.filter(|p| p.exists()).unwrap_or_else(|| PathBuf::from("python3"))
}

/// Runs the model in LiteRT on `inputs` and reads back every op output it kept.
fn run_litert(a: &CompareArgs, model: &Model, subgraph: usize, inputs: &Inputs) -> Result<HashMap<usize, CapturedTensor>, String> {
    if subgraph != 0 {
        return Err("--reference litert compares subgraph 0 only".into());
    }
    let dir = std::env::temp_dir().join(format!("ferrite-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = (|| {
        let helper = dir.join("litert_dump.py");
        std::fs::write(&helper, LITERT_HELPER).map_err(|e| format!("{}: {e}", helper.display()))?;
        let g = &model.subgraphs()[0];
        let mut cmd = std::process::Command::new(python(a));
        cmd.arg(&helper).arg(&a.model).arg("--out").arg(dir.join("out")).args(["--resolver", &a.litert_kernels]);
        // Our inputs, with the shapes ferrite's run had.
        for (k, &t) in g.inputs.iter().enumerate() {
            let (Some(shape), Some(bytes)) = (inputs.shapes.get(k), inputs.data.get(k)) else { return Err(format!("input {k} is missing")) };
            let p = dir.join(format!("input_{k}.npy"));
            std::fs::write(&p, npy::write(g.tensors[t].dtype, shape, bytes)?).map_err(|e| format!("{}: {e}", p.display()))?;
            cmd.arg("-i").arg(p);
        }
        let out = cmd.output().map_err(|e| format!("running {} for LiteRT: {e} (give --python or FERRITE_PYTHON)", python(a).display()))?;
        if !out.status.success() {
            return Err(format!("the LiteRT helper failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let index: Value = serde_json::from_slice(&std::fs::read(dir.join("out/index.json")).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        let mut tensors = HashMap::new();
        for (k, file) in index["tensors"].as_object().into_iter().flatten() {
            let (Ok(t), Some(file)) = (k.parse::<usize>(), file.as_str()) else { continue };
            let Some(info) = g.tensors.get(t) else { continue };
            let arr = npy::read(&std::fs::read(dir.join("out").join(file)).map_err(|e| e.to_string())?).map_err(|e| format!("{file}: {e}"))?;
            tensors.insert(
                t,
                CapturedTensor { tensor: t, name: info.name.clone(), dtype: arr.dtype, shape: arr.shape, quant: info.quant.clone(), data: arr.data },
            );
        }
        Ok(tensors)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The error of a diff in its tolerance's unit, as text.
fn score_text(d: &TensorDiff) -> String {
    if let Some(m) = &d.mismatch {
        return format!("mismatch: {m}");
    }
    match d.kind {
        ValueKind::Quantized => units(d.score()),
        ValueKind::Float => format!("{} rel", short(d.score())),
        ValueKind::Integer => format!("{} abs", short(d.score())),
    }
}

/// `n units`, in the singular for one.
fn units(x: f64) -> String {
    format!("{} unit{}", short(x), if x == 1.0 { "" } else { "s" })
}

/// A number in few characters.
fn short(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.is_infinite() {
        "inf".into()
    } else if (0.01..10000.0).contains(&x.abs()) {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{x:.2e}")
    }
}

fn tolerance_text(t: &Tolerance) -> String {
    format!("float {} of the range, quantized {} of the scale, integer {}", short(t.float), units(t.quantized), short(t.integer))
}

fn runs_on(r: &OpRun) -> String {
    match r {
        OpRun::Fused { into } => format!("fused into {into}"),
        r => r.describe(),
    }
}

fn dtype_shape(d: DType, shape: &[usize]) -> String {
    format!("{} {:?}", d.name(), shape)
}

/// Where each tensor was compared: tensor -> its diff.
fn diffs_by_tensor(cmp: &Comparison) -> HashMap<usize, &TensorDiff> {
    cmp.ops.iter().flat_map(|o| o.diffs.iter().map(|d| (d.tensor, d))).collect()
}

fn diff_sentence(d: &TensorDiff, tol: &Tolerance) -> String {
    if let Some(m) = &d.mismatch {
        return format!("cannot be compared: {m}");
    }
    let limit = match d.kind {
        ValueKind::Quantized => units(tol.quantized),
        ValueKind::Float => format!("{} of the range", short(tol.float)),
        ValueKind::Integer => short(tol.integer),
    };
    let in_units = d.units.map_or(String::new(), |u| format!(" = {} of the scale", units(u)));
    format!(
        "max abs error {}{in_units} at {:?} (ours {}, reference {}); {} of the reference's range {}; {} of {} elements beyond tolerance ({limit})",
        short(d.max_abs),
        d.at,
        short(d.ours),
        short(d.reference),
        short(d.relative),
        short(d.range),
        d.beyond,
        d.elements
    )
}

fn print_report(a: &CompareArgs, what: &str, source: &str, tol: &Tolerance, cap: &Capture, cmp: &Comparison) {
    outln!("compare {}: ferrite (cpu) against {what}", a.model.display());
    outln!("inputs: {source}");
    outln!("{} tensors of {} ops compared; tolerance: {}", cmp.compared, cap.ops.len(), tolerance_text(tol));
    let by_tensor = diffs_by_tensor(cmp);
    let Some(first) = cmp.first_divergence else {
        let worst =
            cmp.ops.iter().filter_map(|o| o.worst().map(|d| (o, d))).max_by(|x, y| x.1.score().partial_cmp(&y.1.score()).unwrap_or(std::cmp::Ordering::Equal));
        outln!("no divergence: every tensor both runs hold agrees within tolerance");
        if let Some((o, d)) = worst {
            outln!("largest error: op {} {} output #{}: {}", o.op.index, o.op.op_type, d.tensor, score_text(d));
        }
        return;
    };
    let oc = &cmp.ops[first];
    let op = &oc.op;
    outln!("");
    outln!("first divergence: op {} {} (runs on {})", op.index, op.op_type, runs_on(&op.runs_on));
    for d in oc.diffs.iter().filter(|d| d.diverged) {
        let meta = op.outputs.iter().find(|m| m.tensor == d.tensor);
        let (name, ds) = meta.map_or((String::new(), String::new()), |m| (m.name.clone(), dtype_shape(m.dtype, &m.shape)));
        outln!("  output #{} '{name}' {ds}:", d.tensor);
        outln!("    {}", diff_sentence(d, tol));
    }
    outln!("  params: {}", op.params);
    for m in &op.inputs {
        let status = if m.constant {
            "constant".to_string()
        } else if let Some(d) = by_tensor.get(&m.tensor) {
            format!("agrees ({})", score_text(d))
        } else {
            "not compared (model input, or not held by both)".to_string()
        };
        outln!("  in   #{} '{}' {}: {status}", m.tensor, m.name, dtype_shape(m.dtype, &m.shape));
    }
    for m in &op.outputs {
        outln!("  out  #{} '{}' {} ({})", m.tensor, m.name, dtype_shape(m.dtype, &m.shape), m.state.name());
    }
    // An error can be carried in: inputs that differ within tolerance can add up past it.
    let carried = op.inputs.iter().filter_map(|m| by_tensor.get(&m.tensor)).filter(|d| d.score() > 0.0).max_by(|x, y| x.score().total_cmp(&y.score()));
    match carried {
        Some(d) => outln!("  note: input #{} already differed ({}): the error may have been carried in and grown here", d.tensor, score_text(d)),
        None => outln!("  every compared input agreed exactly: the error starts in this op"),
    }
    outln!("");
    outln!("  ops around it:");
    outln!("     {:>5}  {:<24} {:<14} {:<30} error", "op", "type", "runs on", "output");
    let lo = first.saturating_sub(a.context);
    let hi = (first + a.context + 1).min(cmp.ops.len());
    for (i, o) in cmp.ops[lo..hi].iter().enumerate() {
        outln!("  {} {}", if lo + i == first { ">>" } else { "  " }, row(o));
    }
}

fn row(o: &OpComparison) -> String {
    let out = o.op.outputs.first().map_or(String::new(), |m| format!("#{} {}", m.tensor, dtype_shape(m.dtype, &m.shape)));
    let err = match o.worst() {
        Some(d) => format!("{}{}", score_text(d), if d.diverged { "  DIVERGED" } else { "" }),
        None => "-".into(),
    };
    format!("{:>5}  {:<24} {:<14} {:<30} {err}", o.op.index, o.op.op_type, runs_on(&o.op.runs_on), out)
}

fn diff_json(d: &TensorDiff) -> Value {
    let num = |x: f64| if x.is_finite() { json!(x) } else { json!(x.to_string()) };
    json!({
        "tensor": d.tensor, "kind": format!("{:?}", d.kind).to_lowercase(), "elements": d.elements, "max_abs": num(d.max_abs), "at": d.at,
        "ours": num(d.ours), "reference": num(d.reference), "range": num(d.range), "relative": num(d.relative),
        "units": d.units.map(num), "beyond": d.beyond, "diverged": d.diverged, "mismatch": d.mismatch,
    })
}

fn report_json(a: &CompareArgs, what: &str, source: &str, tol: &Tolerance, cap: &Capture, cmp: &Comparison) -> Value {
    let op_json = |o: &OpComparison| {
        let meta = |m: &ferrite::compare::TensorMeta| json!({"tensor": m.tensor, "name": m.name, "dtype": m.dtype.name(), "shape": m.shape, "state": m.state.name(), "constant": m.constant});
        json!({
            "index": o.op.index, "type": o.op.op_type, "runs_on": runs_on(&o.op.runs_on), "params": o.op.params,
            "inputs": o.op.inputs.iter().map(meta).collect::<Vec<_>>(), "outputs": o.op.outputs.iter().map(meta).collect::<Vec<_>>(),
            "diffs": o.diffs.iter().map(diff_json).collect::<Vec<_>>(), "diverged": o.diverged(),
        })
    };
    json!({
        "model": a.model.display().to_string(), "reference": what, "inputs": source,
        "tolerance": {"float": tol.float, "quantized": tol.quantized, "integer": tol.integer},
        "ops": cap.ops.len(), "compared": cmp.compared, "missing_in_reference": cmp.missing_in_reference,
        "first_divergence": cmp.first_divergence.map(|i| op_json(&cmp.ops[i])),
        "per_op": cmp.ops.iter().map(op_json).collect::<Vec<_>>(),
    })
}
