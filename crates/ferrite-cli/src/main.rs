//! `ferrite`: inspect, run, benchmark and train TensorFlow Lite / circle models.

mod npy;
mod observe;

/// Prints a line to stdout; a closed pipe (`ferrite inspect m | head`) ends the
/// program quietly instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout().lock(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

mod compare;
mod pictures;
mod svg;
mod train;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counts heap allocations while armed, for `bench`'s `heap_allocs_per_run`.
struct CountingAlloc;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set on the CLI's own helper threads (the RSS sampler), whose allocations are
    /// not the runtime's.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Leaves the calling thread's allocations out of `heap_allocs_per_run`.
fn quiet_allocations() {
    QUIET.with(|q| q.set(true));
}

fn counted() -> bool {
    COUNTING.load(Ordering::Relaxed) && !QUIET.try_with(std::cell::Cell::get).unwrap_or(false)
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if counted() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if counted() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use ferrite::is_package;
use ferrite::model::BuiltinOp;
use ferrite::model::{Model, Subgraph, TensorInfo};
use ferrite::{parse_backend_list, parse_op_backend};
use ferrite::{DType, PackageSession, Session, SessionOptions, TensorData, TensorDesc};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(name = "ferrite", version, about = "Run TensorFlow Lite and circle models")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Which backends run the model's ops.
#[derive(clap::Args, Clone, Default)]
struct BackendArgs {
    /// Backends in order of preference, e.g. `reference,cpu`; each op runs on the
    /// first with a kernel for it, cpu last. Default: $FERRITE_BACKENDS, else cpu.
    #[arg(long)]
    backends: Option<String>,
    /// Pin ops to a backend, by type or op index: `CONV_2D=cpu`, `17=reference`.
    /// Repeatable. Default: $FERRITE_OP_BACKEND.
    #[arg(long = "op-backend")]
    op_backends: Vec<String>,
    /// How the gpu backend stores tensors: fp32 (default) or fp16 (adapters with
    /// SHADER_F16; arithmetic stays float32). Default: $FERRITE_GPU_PRECISION, else fp32.
    #[arg(long = "gpu-precision")]
    gpu_precision: Option<String>,
    /// Run each element-wise op as a step of its own instead of fusing chains of
    /// them into one step (to compare; the results are the same).
    #[arg(long = "no-fuse-chains")]
    no_fuse_chains: bool,
}

impl BackendArgs {
    fn given(&self) -> bool {
        self.backends.is_some() || !self.op_backends.is_empty()
    }

    /// Session options for `threads` with these backends (flags over environment).
    fn options(&self, threads: usize) -> Result<SessionOptions, String> {
        let mut o = SessionOptions { threads, ..SessionOptions::default().with_env_backends().map_err(|e| e.to_string())? };
        if let Some(b) = &self.backends {
            o.backends = parse_backend_list(b).map_err(|e| e.to_string())?;
        }
        if !self.op_backends.is_empty() {
            o.op_backends = self.op_backends.iter().map(|b| parse_op_backend(b)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
        }
        if let Some(p) = &self.gpu_precision {
            o.gpu_precision = p.parse().map_err(|e: ferrite::Error| format!("--gpu-precision: {e}"))?;
        }
        Ok(o)
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Train a float32 model on .npy (or raw) data with onert_train's options, and
    /// export it or save a checkpoint.
    Train(Box<train::TrainArgs>),
    /// Show subgraphs, inputs/outputs and every op with its tensors.
    Inspect {
        model: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Print each subgraph's memory plan: arena bytes against the live-bytes lower bound.
        #[arg(long)]
        memory: bool,
        /// With --backends or --op-backend: prepare the model and show where each op
        /// runs and which tensors cross between backends.
        #[command(flatten)]
        backends: BackendArgs,
        /// Input shape for that prepare, e.g. `--shape 1,16000`; repeat once per input.
        #[arg(long = "shape")]
        shapes: Vec<String>,
        #[command(flatten)]
        pictures: pictures::InspectPictures,
    },
    /// List the backends of this build and the GPU adapters wgpu finds (name, type,
    /// driver, limits, fp16 support).
    Devices {
        #[arg(long)]
        json: bool,
    },
    /// List the builtin ops ferrite implements (arity and element types, from the op
    /// table), then every builtin of the schema per element type: supported, refused
    /// as LiteRT refuses it, or missing (with the reason).
    Ops {
        #[arg(long)]
        json: bool,
        /// Print the table as the Markdown of docs/ops.md.
        #[arg(long)]
        markdown: bool,
    },
    /// Print the cargo features of `ferrite` a selective build needs for these models
    /// (the op families and element types they use), and the command that builds the
    /// C library with only those.
    Features {
        #[arg(required = true)]
        models: Vec<PathBuf>,
    },
    /// Run a model on .npy inputs (or seeded random ones) and write .npy outputs.
    Run {
        model: PathBuf,
        /// Input .npy files in model input order.
        #[arg(short = 'i', long = "input")]
        inputs: Vec<PathBuf>,
        /// Directory for output_<k>.npy.
        #[arg(short = 'o', long = "output-dir")]
        out_dir: PathBuf,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Seed for random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Run N steps in one session (streaming models keep their state between
        /// steps): each input .npy has a leading axis of N, and outputs are stacked the same way.
        #[arg(long)]
        steps: Option<usize>,
        #[command(flatten)]
        backends: BackendArgs,
        /// Write a Chrome trace-event file (Perfetto, chrome://tracing): prepare
        /// phases and one slice per executed op, with shapes, bytes and FLOPs.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        #[command(flatten)]
        dump: DumpArgs,
    },
    /// Time load, prepare and execute.
    Bench {
        model: PathBuf,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Input shape, e.g. `--shape 1,16000`; repeat once per input, in input order.
        #[arg(long = "shape")]
        shapes: Vec<String>,
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        #[arg(long, default_value_t = 20)]
        runs: usize,
        #[arg(long)]
        json: bool,
        /// Print where the time goes: per op type, and the slowest ops.
        #[arg(long)]
        profile: bool,
        #[command(flatten)]
        backends: BackendArgs,
        /// Write a Chrome trace-event file of the whole benchmark (Perfetto, chrome://tracing).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        #[command(flatten)]
        timing: TimingArgs,
        #[command(flatten)]
        pictures: pictures::BenchPictures,
    },
    /// Run the model in ferrite and in a reference (ferrite's reference backend, or
    /// LiteRT), tensor by tensor, and report the first op whose output departs.
    Compare(compare::CompareArgs),
}

/// `run --dump`: every op's outputs as .npy files.
#[derive(clap::Args, Clone, Default)]
struct DumpArgs {
    /// Write each op's outputs to DIR as `<op>_<TYPE>_<tensor>.npy`, with `index.json`
    /// (per step in `step_NNNN/` with --steps). Fused-away tensors are listed, not written.
    #[arg(long, value_name = "DIR")]
    dump: Option<PathBuf>,
    /// Only these ops: indices and/or types, e.g. `3,17` or `CONV_2D`.
    #[arg(long = "dump-ops", value_name = "LIST", requires = "dump")]
    dump_ops: Option<String>,
}

/// How long `bench` runs, and what it samples meanwhile.
#[derive(clap::Args, Clone, Copy, Default)]
struct TimingArgs {
    /// Sleep this long between timed runs (thermal and frequency effects), not timed.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    run_delay: f64,
    /// Keep running past --runs until this much time has passed.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    min_secs: f64,
    /// Stop after this much time even if fewer than --runs ran (at least one run).
    #[arg(long, value_name = "SECONDS")]
    max_secs: Option<f64>,
    /// Sample the process's RSS every MS milliseconds from load to the end: the
    /// maximum and the timeline go in the JSON.
    #[arg(long, value_name = "MS")]
    mem_poll: Option<u64>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Train(args) => train::train(&args),
        Cmd::Inspect { model, json, memory, backends, shapes, pictures } => model_files(&model).and_then(|files| {
            files.iter().try_for_each(|f| {
                if pictures.any() {
                    pictures::inspect(f, &pictures, &backends, &shapes)
                } else if memory {
                    inspect_memory(f, json)
                } else if backends.given() {
                    inspect_backends(f, json, &backends, &shapes)
                } else {
                    inspect(f, json)
                }
            })
        }),
        Cmd::Devices { json } => {
            devices(json);
            Ok(())
        }
        Cmd::Ops { json, markdown } => {
            if markdown {
                print!("{}", ferrite::model::op_table_markdown());
            } else {
                list_ops(json);
            }
            Ok(())
        }
        Cmd::Features { models } => features(&models),
        Cmd::Run { model, inputs, out_dir, threads, seed, steps, backends, trace, dump } => {
            run(&model, &inputs, &out_dir, threads, seed, steps, &backends, trace.as_deref(), &dump)
        }
        Cmd::Bench { model, threads, shapes, warmup, runs, json, profile, backends, trace, timing, pictures } => {
            bench(&model, threads, &shapes, warmup, runs, json, profile, &backends, trace.as_deref(), &timing, &pictures)
        }
        Cmd::Compare(args) => compare::main(&args),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrite: error: {}", e.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn tensor_json(model: &Model, g: &Subgraph, t: usize) -> Value {
    let info: &TensorInfo = &g.tensors[t];
    let bytes = info.dtype.size().map(|s| s * info.numel());
    let mut v = json!({
        "index": t, "name": info.name, "dtype": info.dtype.name(), "shape": info.shape,
        "shape_signature": info.shape_signature, "bytes": bytes, "constant": info.is_const(),
    });
    if let Some(q) = &info.quant {
        v["quantization"] = json!({"scale": q.scale, "zero_point": q.zero_point, "axis": q.axis});
    }
    if info.sparsity.is_some() {
        v["sparse"] = json!(true);
    }
    let _ = model;
    v
}

fn describe(t: &Value) -> String {
    let mut s = format!(
        "#{} {} {}{} {}B{}",
        t["index"],
        t["dtype"].as_str().unwrap_or("?"),
        t["shape"],
        if t["shape"] != t["shape_signature"] { format!(" (signature {})", t["shape_signature"]) } else { String::new() },
        t["bytes"],
        if t["constant"] == json!(true) { " const" } else { "" }
    );
    if let Some(q) = t.get("quantization") {
        s.push_str(&format!(" q(scale={}, zp={})", q["scale"], q["zero_point"]));
    }
    format!("{s} '{}'", t["name"].as_str().unwrap_or(""))
}

fn inspect(path: &Path, as_json: bool) -> Result<(), String> {
    let model = Model::from_file(path).map_err(|e| e.to_string())?;
    let mut subgraphs = Vec::new();
    for (si, g) in model.subgraphs().iter().enumerate() {
        let ops: Vec<Value> = g
            .ops
            .iter()
            .enumerate()
            .map(|(oi, op)| {
                json!({
                    "index": oi, "op": op.code.name(), "version": op.version,
                    "params": format!("{:?}", op.params),
                    "inputs": op.inputs.iter().map(|i| i.map_or(Value::Null, |t| tensor_json(&model, g, t))).collect::<Vec<_>>(),
                    "outputs": op.outputs.iter().map(|&t| tensor_json(&model, g, t)).collect::<Vec<_>>(),
                })
            })
            .collect();
        subgraphs.push(json!({
            "index": si, "name": g.name, "tensors": g.tensors.len(),
            "inputs": g.inputs.iter().map(|&t| tensor_json(&model, g, t)).collect::<Vec<_>>(),
            "outputs": g.outputs.iter().map(|&t| tensor_json(&model, g, t)).collect::<Vec<_>>(),
            "ops": ops,
        }));
    }
    let sigs: Vec<Value> = model.signatures().iter().map(|s| json!({"key": s.key, "subgraph": s.subgraph, "inputs": s.inputs, "outputs": s.outputs})).collect();
    let doc = json!({"file": path.display().to_string(), "format": model.kind().name(), "version": model.version(), "description": model.description(), "subgraphs": subgraphs, "signatures": sigs});
    if as_json {
        outln!("{doc}");
        return Ok(());
    }
    outln!("{} ({} v{}) {}", path.display(), model.kind().name(), model.version(), model.description());
    for s in &sigs {
        outln!("signature '{}' -> subgraph {}", s["key"].as_str().unwrap_or(""), s["subgraph"]);
    }
    for g in doc["subgraphs"].as_array().into_iter().flatten() {
        outln!("\nsubgraph {} '{}': {} tensors, {} ops", g["index"], g["name"].as_str().unwrap_or(""), g["tensors"], g["ops"].as_array().map_or(0, Vec::len));
        for t in g["inputs"].as_array().into_iter().flatten() {
            outln!("  input  {}", describe(t));
        }
        for t in g["outputs"].as_array().into_iter().flatten() {
            outln!("  output {}", describe(t));
        }
        for op in g["ops"].as_array().into_iter().flatten() {
            outln!("  [{}] {} {}", op["index"], op["op"].as_str().unwrap_or(""), op["params"].as_str().unwrap_or(""));
            for t in op["inputs"].as_array().into_iter().flatten() {
                if t.is_null() {
                    outln!("      in  (none)");
                } else {
                    outln!("      in  {}", describe(t));
                }
            }
            for t in op["outputs"].as_array().into_iter().flatten() {
                outln!("      out {}", describe(t));
            }
        }
    }
    Ok(())
}

/// Parses a `--shape` value: `1,16000`.
fn parse_shape(spec: &str) -> Result<Vec<usize>, String> {
    spec.split(',').map(|d| d.trim().parse::<usize>().map_err(|_| format!("--shape '{spec}': '{d}' is not a dimension"))).collect()
}

/// Prints the op table: every builtin ferrite implements, its arity and element types.
fn list_ops(as_json: bool) {
    let arity = |a: ferrite::model::Arity| if a.max == usize::MAX { json!({"min": a.min, "max": null}) } else { json!({"min": a.min, "max": a.max}) };
    let rows: Vec<Value> = BuiltinOp::ALL
        .iter()
        .map(|op| json!({"op": op.name(), "code": op.code(), "inputs": arity(op.inputs()), "outputs": arity(op.outputs()), "types": op.types().names()}))
        .collect();
    if as_json {
        let report = ferrite::model::coverage::report();
        let (supported, refused, missing) = ferrite::model::coverage::counts(&report);
        let coverage: Vec<Value> = report
            .iter()
            .map(|op| {
                let types: serde_json::Map<String, Value> = ferrite::model::coverage::TYPE_COLUMNS
                    .iter()
                    .zip(&op.types)
                    .map(|(c, t)| (c.0.to_string(), json!({"status": t.0.name(), "reason": t.1})))
                    .collect();
                json!({"op": op.name, "code": op.code, "litert": op.litert, "status": op.status().name(), "reason": op.reason(), "types": types})
            })
            .collect();
        let counts = json!({"supported": supported, "refused": refused, "missing": missing});
        outln!("{}", json!({"ops": rows, "coverage": coverage, "counts": counts}));
        return;
    }
    outln!("{:<24} {:<12} {:<12} element types", "op", "inputs", "outputs");
    for op in BuiltinOp::ALL {
        outln!("{:<24} {:<12} {:<12} {}", op.name(), op.inputs().to_string(), op.outputs().to_string(), op.types().names().join(", "));
    }
    outln!("{} builtin ops", BuiltinOp::ALL.len());
    let report = ferrite::model::coverage::report();
    let (supported, refused, missing) = ferrite::model::coverage::counts(&report);
    let columns: Vec<&str> = ferrite::model::coverage::TYPE_COLUMNS.iter().map(|c| c.0).collect();
    outln!("\ncoverage of the schema's {} builtins (refused: LiteRT refuses it too; missing: LiteRT runs it, ferrite does not)", report.len());
    outln!("{:<30} {:<7} {}  reason", "op", "LiteRT", columns.iter().map(|c| format!("{c:<10}")).collect::<String>());
    for op in &report {
        let cells: String = op.types.iter().map(|t| format!("{:<10}", t.0.name())).collect();
        outln!("{:<30} {:<7} {cells}  {}", op.name, if op.litert { "yes" } else { "no" }, op.reason().unwrap_or(""));
    }
    outln!("{supported} supported, {refused} refused as LiteRT refuses them, {missing} missing");
}

/// Prints the backends of this build and, with the `gpu` feature, every adapter.
fn devices(as_json: bool) {
    #[cfg(feature = "gpu")]
    let adapters: Vec<Value> = ferrite::gpu::list_adapters()
        .into_iter()
        .map(|a| {
            json!({"name": a.name, "type": a.device_type, "api": a.backend, "driver": a.driver,
                   "max_storage_binding_bytes": a.max_storage_binding, "max_buffer_bytes": a.max_buffer,
                   "max_storage_buffers_per_stage": a.max_storage_buffers_per_stage,
                   "max_workgroups_per_dimension": a.max_workgroups_per_dimension,
                   "max_invocations_per_workgroup": a.max_invocations_per_workgroup, "shader_f16": a.shader_f16,
                   "timestamp_query": a.timestamps})
        })
        .collect();
    #[cfg(not(feature = "gpu"))]
    let adapters: Vec<Value> = Vec::new();
    let (float_isa, int8_isa) = ferrite::cpu_kernel_isas();
    if as_json {
        outln!("{}", json!({"backends": ferrite::BACKEND_NAMES, "cpu_kernels": {"float": float_isa, "int8": int8_isa}, "gpu_adapters": adapters}));
        return;
    }
    outln!("backends: {}", ferrite::BACKEND_NAMES.join(", "));
    outln!("cpu kernels: float {float_isa}, int8 {int8_isa} (FERRITE_CPU_MAX_ISA caps them)");
    if !cfg!(feature = "gpu") {
        outln!("gpu: not in this build (cargo feature `gpu`)");
    } else if adapters.is_empty() {
        outln!("gpu adapters: none (on Debian/Ubuntu, `apt-get install mesa-vulkan-drivers libvulkan1` gives the lavapipe software adapter)");
    }
    for (i, a) in adapters.iter().enumerate() {
        outln!(
            "gpu adapter {i}: {} ({}, {}), driver {}",
            a["name"].as_str().unwrap_or(""),
            a["type"].as_str().unwrap_or(""),
            a["api"].as_str().unwrap_or(""),
            a["driver"].as_str().unwrap_or("")
        );
        outln!(
            "  max storage binding {} B, max buffer {} B, {} storage buffers per stage, {} workgroups per dimension, {} invocations per workgroup, shader f16: {}, timestamp query: {}",
            a["max_storage_binding_bytes"], a["max_buffer_bytes"], a["max_storage_buffers_per_stage"], a["max_workgroups_per_dimension"],
            a["max_invocations_per_workgroup"], a["shader_f16"], a["timestamp_query"]
        );
    }
}

/// Prepares the model with the given backends and prints where each op runs and
/// the tensors that cross from one backend to another.
fn inspect_backends(path: &Path, as_json: bool, backends: &BackendArgs, shapes: &[String]) -> Result<(), String> {
    let model = Arc::new(Model::from_file(path).map_err(|e| e.to_string())?);
    let mut s = Session::with_options(model.clone(), backends.options(1)?).map_err(|e| e.to_string())?;
    for (k, spec) in shapes.iter().enumerate() {
        s.resize_input(k, &parse_shape(spec)?).map_err(|e| e.to_string())?;
    }
    s.prepare().map_err(|e| e.to_string())?;
    let assignments = s.op_assignments().map_err(|e| e.to_string())?;
    let crossings = s.backend_crossings().map_err(|e| e.to_string())?;
    let name = |sg: usize, oi: usize| model.subgraphs()[sg].ops[oi].code.name();
    let fallbacks = s.op_fallbacks();
    // Why the backends before the one that took the op refused it.
    let why =
        |sg: usize, oi: usize| -> Vec<String> { fallbacks.iter().filter(|f| f.0 == sg && f.1 == oi).map(|f| format!("{} refused: {}", f.2, f.3)).collect() };
    let gpu = s.gpu_plan();
    let mut per_backend: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, _, r) in &assignments {
        *per_backend.entry(r.kind()).or_default() += 1;
    }
    if as_json {
        let ops: Vec<Value> = assignments
            .iter()
            .map(|(sg, oi, r)| json!({"subgraph": sg, "index": oi, "op": name(*sg, *oi), "runs_on": r.describe(), "fell_back": why(*sg, *oi)}))
            .collect();
        let cr: Vec<Value> = crossings
            .iter()
            .map(|c| {
                json!({"subgraph": c.subgraph, "tensor": c.tensor, "name": model.subgraphs()[c.subgraph].tensors[c.tensor].name,
                            "from_op": c.from.0, "from": c.from.1, "to_op": c.to.0, "to": c.to.1, "transfer": c.transfer})
            })
            .collect();
        let segments = json!({"segments": gpu.segments, "ops": gpu.ops, "buffer_bytes": gpu.buffer_bytes, "lower_bound_bytes": gpu.lower_bound_bytes});
        outln!(
            "{}",
            json!({"file": path.display().to_string(), "backends": s.backend_names(), "ops": ops, "crossings": cr, "ops_per_backend": per_backend, "gpu": segments})
        );
        return Ok(());
    }
    outln!("{}: backends {}", path.display(), s.backend_names().join(", "));
    for (sg, oi, r) in &assignments {
        outln!("  subgraph {sg} op {oi:<4} {:<28} {}", name(*sg, *oi), r.describe());
        for w in why(*sg, *oi) {
            outln!("      ({w})");
        }
    }
    if gpu.segments > 0 {
        outln!(
            "gpu: {} ops in {} segments (one submission each); GPU buffers {} bytes, lower bound {} bytes",
            gpu.ops,
            gpu.segments,
            gpu.buffer_bytes,
            gpu.lower_bound_bytes
        );
    }
    outln!("crossings: {}", crossings.len());
    for c in &crossings {
        let t = &model.subgraphs()[c.subgraph].tensors[c.tensor];
        outln!("  subgraph {} tensor {} '{}': op {} ({}) -> op {} ({}), {}", c.subgraph, c.tensor, t.name, c.from.0, c.from.1, c.to.0, c.to.1, c.transfer);
    }
    let summary: Vec<String> = per_backend.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    outln!("ops per backend: {}", summary.join(", "));
    Ok(())
}

/// Plans every subgraph that ferrite can prepare and reports arena vs lower bound.
fn inspect_memory(path: &Path, as_json: bool) -> Result<(), String> {
    let model = Arc::new(Model::from_file(path).map_err(|e| e.to_string())?);
    let mut rows = Vec::new();
    for (si, g) in model.subgraphs().iter().enumerate() {
        let mut s = Session::with_options(model.clone(), SessionOptions::default()).map_err(|e| e.to_string())?;
        let row = match s.select_subgraph(si).and_then(|_| s.prepare()) {
            Ok(()) => {
                let (arena, lower) = s.arena_stats().unwrap_or((0, 0));
                let (steps, folded, aliased) = s.step_stats().unwrap_or((0, 0, 0));
                json!({"subgraph": si, "name": g.name, "arena_bytes": arena, "lower_bound_bytes": lower,
                       "ratio": if lower > 0 { arena as f64 / lower as f64 } else { 1.0 },
                       "steps": steps, "folded_ops": folded, "aliased_ops": aliased, "fused_ops": s.fused_op_count().unwrap_or(0),
                       "chained_ops": s.chained_op_count().unwrap_or(0)})
            }
            Err(e) => json!({"subgraph": si, "name": g.name, "error": e.to_string()}),
        };
        rows.push(row);
    }
    if as_json {
        outln!("{}", json!({"file": path.display().to_string(), "subgraphs": rows}));
        return Ok(());
    }
    for r in &rows {
        match r.get("error") {
            Some(e) => outln!("subgraph {} '{}': not planned: {}", r["subgraph"], r["name"].as_str().unwrap_or(""), e.as_str().unwrap_or("")),
            None => outln!(
                "subgraph {} '{}': arena {} bytes, lower bound {} bytes, ratio {:.3}; {} steps, {} ops folded at prepare, {} aliased, {} fused into a neighbouring convolution, {} in element-wise chains",
                r["subgraph"],
                r["name"].as_str().unwrap_or(""),
                r["arena_bytes"],
                r["lower_bound_bytes"],
                r["ratio"].as_f64().unwrap_or(0.0),
                r["steps"],
                r["folded_ops"],
                r["aliased_ops"],
                r["fused_ops"],
                r["chained_ops"]
            ),
        }
    }
    Ok(())
}

/// SplitMix64: small, seeded, reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn random_bytes(dtype: DType, n: usize, rng: &mut Rng) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(n * dtype.size().unwrap_or(1));
    for _ in 0..n {
        let u = rng.unit();
        match dtype {
            DType::F32 => out.extend_from_slice(&((u * 2.0 - 1.0) as f32).to_le_bytes()),
            DType::I32 => out.extend_from_slice(&((u * 10.0) as i32).to_le_bytes()),
            DType::I64 => out.extend_from_slice(&((u * 10.0) as i64).to_le_bytes()),
            DType::I8 => out.push(((u * 256.0) as i32 - 128) as i8 as u8),
            DType::U8 => out.push((u * 256.0) as u8),
            DType::I16 => out.extend_from_slice(&(((u * 65536.0) as i32 - 32768) as i16).to_le_bytes()),
            DType::Bool => out.push((u < 0.5) as u8),
            t => return Err(format!("cannot generate random {} input", t.name())),
        }
    }
    Ok(out)
}

/// A model file or a package directory, behind one interface for the commands.
enum Runner {
    Model(Box<Session>),
    Package(Box<PackageSession>),
}

impl Runner {
    fn inputs(&self) -> Vec<TensorDesc> {
        match self {
            Runner::Model(s) => s.inputs(),
            Runner::Package(p) => p.inputs(),
        }
    }
    fn outputs(&self) -> Vec<TensorDesc> {
        match self {
            Runner::Model(s) => s.outputs(),
            Runner::Package(p) => p.outputs(),
        }
    }
    fn resize_input(&mut self, i: usize, shape: &[usize]) -> ferrite::Result<()> {
        match self {
            Runner::Model(s) => s.resize_input(i, shape),
            Runner::Package(p) => p.resize_input(i, shape),
        }
    }
    fn prepare(&mut self) -> ferrite::Result<()> {
        match self {
            Runner::Model(s) => s.prepare(),
            Runner::Package(p) => p.prepare(),
        }
    }
    fn set_input(&mut self, i: usize, b: &[u8]) -> ferrite::Result<()> {
        match self {
            Runner::Model(s) => s.set_input(i, b),
            Runner::Package(p) => p.set_input(i, b),
        }
    }
    fn run(&mut self) -> ferrite::Result<()> {
        match self {
            Runner::Model(s) => s.run(),
            Runner::Package(p) => p.run(),
        }
    }
    fn output(&self, i: usize) -> ferrite::Result<TensorData<'_>> {
        match self {
            Runner::Model(s) => s.output(i),
            Runner::Package(p) => p.output(i),
        }
    }
    fn arena_stats(&self) -> Option<(usize, usize)> {
        match self {
            Runner::Model(s) => s.arena_stats(),
            Runner::Package(p) => p.arena_stats(),
        }
    }
}

fn open_session(path: &Path, threads: usize, backends: &BackendArgs, trace: bool) -> Result<Runner, String> {
    let options = SessionOptions { trace, ..backends.options(threads)? };
    if is_package(path) {
        if trace {
            return Err("--trace works on a model file, not a package".into());
        }
        if backends.no_fuse_chains {
            return Err("--no-fuse-chains works on a model file, not a package".into());
        }
        return Ok(Runner::Package(Box::new(PackageSession::open(path, options).map_err(|e| e.to_string())?)));
    }
    let model = Model::from_file(path).map_err(|e| e.to_string())?;
    let mut s = Session::with_options(Arc::new(model), options).map_err(|e| e.to_string())?;
    if backends.no_fuse_chains {
        s.set_fuse_chains(false).map_err(|e| e.to_string())?;
    }
    Ok(Runner::Model(Box::new(s)))
}

/// The model files to inspect: the file itself, or each model of a package.
/// `ferrite features`: the union of what each model needs, one line of features and
/// the C library's build command.
fn features(models: &[PathBuf]) -> Result<(), String> {
    let mut all = std::collections::BTreeSet::new();
    for path in models {
        for f in model_files(path)? {
            let m = ferrite::Model::from_file(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            all.extend(ferrite::features_for(&m));
        }
    }
    let list: Vec<&str> = all.into_iter().collect();
    outln!("{}", list.join(","));
    let qualified: Vec<String> = list.iter().map(|f| format!("ferrite/{f}")).collect();
    // The x86-64 vector levels are the device's choice, not the models': the command
    // keeps both (run-time dispatch, as the default build); a device build drops the
    // ones its CPU lacks.
    eprintln!("build: cargo build --release -p ferrite-capi --no-default-features --features {},x86-avx512,x86-avx2", qualified.join(","));
    Ok(())
}

fn model_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    if is_package(path) {
        let p = ferrite::Package::open(path).map_err(|e| e.to_string())?;
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path.join("metadata/MANIFEST")).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        let names = manifest["models"].as_array().cloned().unwrap_or_default();
        outln!(
            "package {}: {} models, inputs {:?}, outputs {:?}, edges {:?}",
            path.display(),
            p.models.len(),
            p.inputs.iter().map(|d| format!("{}:{}:{}", d.model, d.subgraph, d.index)).collect::<Vec<_>>(),
            p.outputs.iter().map(|d| format!("{}:{}:{}", d.model, d.subgraph, d.index)).collect::<Vec<_>>(),
            p.edges.iter().map(|(f, t)| format!("{}:{}:{} -> {}:{}:{}", f.model, f.subgraph, f.index, t.model, t.subgraph, t.index)).collect::<Vec<_>>()
        );
        return Ok(names.iter().filter_map(|n| n.as_str()).map(|n| path.join(n)).collect());
    }
    Ok(vec![path.to_path_buf()])
}

#[allow(clippy::too_many_arguments)]
fn run(
    path: &Path,
    inputs: &[PathBuf],
    out_dir: &Path,
    threads: usize,
    seed: u64,
    steps: Option<usize>,
    backends: &BackendArgs,
    trace: Option<&Path>,
    dump: &DumpArgs,
) -> Result<(), String> {
    let mut s = open_session(path, threads, backends, trace.is_some())?;
    if dump.dump.is_some() && matches!(s, Runner::Package(_)) {
        return Err("--dump works on a model file, not a package".into());
    }
    let descs = s.inputs();
    if !inputs.is_empty() && inputs.len() != descs.len() {
        return Err(format!("model has {} inputs but {} -i files were given", descs.len(), inputs.len()));
    }
    let n_steps = steps.unwrap_or(1).max(1);
    // Per input: the bytes of every step, back to back (`None`: random, made after prepare).
    let mut data: Vec<Option<Vec<u8>>> = Vec::new();
    for (k, d) in descs.iter().enumerate() {
        if let Some(p) = inputs.get(k) {
            let a = npy::read(&std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?).map_err(|e| format!("{}: {e}", p.display()))?;
            if a.dtype != d.dtype {
                return Err(format!("{}: array is {} but input {k} ('{}') is {}", p.display(), a.dtype.name(), d.name, d.dtype.name()));
            }
            let shape = if steps.is_some() {
                if a.shape.first() != Some(&n_steps) {
                    return Err(format!("{}: with --steps {n_steps} the array needs a leading axis of {n_steps}, got {:?}", p.display(), a.shape));
                }
                a.shape[1..].to_vec()
            } else {
                a.shape.clone()
            };
            if shape != d.shape {
                s.resize_input(k, &shape).map_err(|e| e.to_string())?;
            }
            data.push(Some(a.data));
        } else {
            data.push(None);
        }
    }
    s.prepare().map_err(|e| e.to_string())?;
    // Random inputs are sized only now: prepare has checked the declared shapes against
    // the session's memory limit, and the steps' total is checked against it too (a
    // hostile file must not make the CLI allocate whatever its shapes say).
    let limit = SessionOptions::default().max_arena_bytes;
    let descs = s.inputs();
    let mut rng = Rng(seed);
    let data: Vec<Vec<u8>> = data
        .into_iter()
        .zip(&descs)
        .enumerate()
        .map(|(k, (given, d))| match given {
            Some(b) => Ok(b),
            None if d.dtype == DType::String => Err(format!("input {k} ('{}') is a string tensor: give it with -i (.npy of bytes or unicode)", d.name)),
            None => {
                let n = d
                    .shape
                    .iter()
                    .try_fold(n_steps, |a, &x| a.checked_mul(x))
                    .filter(|&n| n.checked_mul(d.dtype.size().unwrap_or(1)).is_some_and(|b| b <= limit))
                    .ok_or_else(|| {
                        format!("input {k} ('{}'): {} {:?} x {n_steps} steps exceeds the memory limit of {limit} bytes", d.name, d.dtype.name(), d.shape)
                    })?;
                random_bytes(d.dtype, n, &mut rng)
            }
        })
        .collect::<Result<_, String>>()?;
    let filter = match (&s, &dump.dump_ops) {
        (Runner::Model(sess), Some(spec)) => Some(observe::OpFilter::parse(spec, sess)?),
        _ => None,
    };
    let mut stacked: Vec<(DType, Vec<usize>, Vec<u8>)> = Vec::new();
    for step in 0..n_steps {
        for (k, d) in data.iter().enumerate() {
            if descs[k].dtype == DType::String {
                // A string buffer is not split by bytes: each step takes its share of the items.
                let items = ferrite_format::strings::parse(d).map_err(|e| e.to_string())?;
                let per = items.len() / n_steps;
                let chunk = ferrite_format::strings::write(&items[step * per..(step + 1) * per]).ok_or("string input exceeds 2 GiB")?;
                s.set_input(k, &chunk).map_err(|e| e.to_string())?;
                continue;
            }
            let per = d.len() / n_steps;
            s.set_input(k, &d[step * per..(step + 1) * per]).map_err(|e| e.to_string())?;
        }
        match (&mut s, &dump.dump) {
            (Runner::Model(sess), Some(dir)) => observe::dump_run(sess, &observe::dump_dir(dir, steps.map(|_| step)), filter.as_ref(), path)?,
            _ => s.run().map_err(|e| e.to_string())?,
        }
        for k in 0..s.outputs().len() {
            let o = s.output(k).map_err(|e| e.to_string())?;
            if step == 0 {
                stacked.push((o.dtype, o.shape.to_vec(), Vec::with_capacity(o.bytes.len() * n_steps)));
            }
            if o.dtype == DType::String && step > 0 {
                // Steps' string buffers are merged item by item.
                let mut items: Vec<Vec<u8>> =
                    ferrite_format::strings::parse(&stacked[k].2).map_err(|e| e.to_string())?.into_iter().map(<[u8]>::to_vec).collect();
                items.extend(o.strings().map_err(|e| e.to_string())?.into_iter().map(<[u8]>::to_vec));
                stacked[k].2 = ferrite_format::strings::write(&items).ok_or("string outputs exceed 2 GiB")?;
                continue;
            }
            stacked[k].2.extend_from_slice(o.bytes);
        }
    }
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    for (k, (dtype, shape, bytes)) in stacked.iter().enumerate() {
        let mut shape = shape.clone();
        if steps.is_some() {
            shape.insert(0, n_steps);
        }
        let p = out_dir.join(format!("output_{k}.npy"));
        std::fs::write(&p, npy::write(*dtype, &shape, bytes)?).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let (Some(file), Runner::Model(sess)) = (trace, &mut s) {
        sess.write_trace(file).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

#[allow(clippy::too_many_arguments)]
fn bench(
    path: &Path,
    threads: usize,
    shapes: &[String],
    warmup: usize,
    runs: usize,
    as_json: bool,
    profile: bool,
    backends: &BackendArgs,
    trace: Option<&Path>,
    timing: &TimingArgs,
    pics: &pictures::BenchPictures,
) -> Result<(), String> {
    let runs = runs.max(1);
    let TimingArgs { run_delay, min_secs, max_secs, mem_poll } = *timing;
    for (flag, v) in [("--run-delay", run_delay), ("--min-secs", min_secs), ("--max-secs", max_secs.unwrap_or(0.0))] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("{flag} must be a number of seconds >= 0, got {v}"));
        }
    }
    let t0 = Instant::now();
    let poller = match mem_poll {
        Some(0) => return Err("--mem-poll needs a period of at least 1 ms".into()),
        Some(ms) => Some(observe::RssPoller::start(std::time::Duration::from_millis(ms), t0)),
        None => None,
    };
    let mut s = open_session(path, threads, backends, trace.is_some())?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    for (k, spec) in shapes.iter().enumerate() {
        s.resize_input(k, &parse_shape(spec)?).map_err(|e| e.to_string())?;
    }
    let t1 = Instant::now();
    s.prepare().map_err(|e| e.to_string())?;
    let prepare_ms = t1.elapsed().as_secs_f64() * 1e3;
    let mut rng = Rng(0);
    for (k, d) in s.inputs().iter().enumerate() {
        let b = random_bytes(d.dtype, d.shape.iter().product(), &mut rng)?;
        s.set_input(k, &b).map_err(|e| e.to_string())?;
    }
    for _ in 0..warmup {
        s.run().map_err(|e| e.to_string())?;
    }
    // Timed runs: at least --runs and --min-secs, at most --max-secs (at least one).
    let mut times = Vec::with_capacity(runs);
    let gpu_before = match &s {
        Runner::Model(sess) => sess.gpu_times(),
        _ => Default::default(),
    };
    let mut progress = observe::Progress::new();
    let started = Instant::now();
    ALLOCS.store(0, Ordering::Relaxed);
    loop {
        let elapsed = started.elapsed().as_secs_f64();
        let enough = times.len() >= runs && elapsed >= min_secs;
        if enough || (!times.is_empty() && max_secs.is_some_and(|m| elapsed >= m)) {
            break;
        }
        if !times.is_empty() && run_delay > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(run_delay));
        }
        let t = Instant::now();
        COUNTING.store(true, Ordering::Relaxed);
        let r = s.run();
        COUNTING.store(false, Ordering::Relaxed);
        r.map_err(|e| e.to_string())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        let elapsed = started.elapsed().as_secs_f64();
        let mut done = (times.len() as f64 / runs as f64).min(if min_secs > 0.0 { elapsed / min_secs } else { 1.0 });
        if let Some(m) = max_secs.filter(|&m| m > 0.0) {
            done = done.max(elapsed / m);
        }
        progress.update(done, &format!("{} runs, {elapsed:.1} s", times.len()));
    }
    progress.finish();
    let n = times.len();
    let heap_allocs_per_run = ALLOCS.load(Ordering::Relaxed) as f64 / n as f64;
    // Per-op times of the profiled runs, for the JSON document (`tools/gflops.py --paths` reads them).
    let mut profiled: Option<Value> = None;
    if profile {
        let Runner::Model(sess) = &mut s else { return Err("--profile works on a model file, not a package".into()) };
        sess.set_profiling(true);
        // Each op's fastest run as well as its mean: on a shared machine the mean of a
        // few runs takes in other work's interruptions, the minimum mostly does not.
        let mut fastest: std::collections::HashMap<usize, f64> = Default::default();
        let mut before: std::collections::HashMap<usize, std::time::Duration> = Default::default();
        for _ in 0..runs {
            sess.run().map_err(|e| e.to_string())?;
            for (op, _, d) in sess.profile() {
                let this_run = (d - before.get(&op).copied().unwrap_or_default()).as_secs_f64() * 1e3;
                fastest.entry(op).and_modify(|m| *m = m.min(this_run)).or_insert(this_run);
                before.insert(op, d);
            }
        }
        let ops = sess.profile();
        let total: f64 = ops.iter().map(|o| o.2.as_secs_f64()).sum::<f64>().max(1e-12);
        let mut by_type: std::collections::BTreeMap<String, (f64, usize)> = Default::default();
        for (_, name, d) in &ops {
            let e = by_type.entry(name.clone()).or_default();
            e.0 += d.as_secs_f64();
            e.1 += 1;
        }
        let mut by_type: Vec<_> = by_type.into_iter().collect();
        by_type.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        let slowest = std::env::var("FERRITE_PROFILE_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
        // With --json the per-op times go in the document instead (stdout stays one JSON line).
        if !as_json {
            outln!("profile ({runs} runs): time per op type");
            for (name, (t, n)) in &by_type {
                outln!("  {name:<28} {:>8.3} ms/run {:>5.1}%  ({n} ops)", t * 1e3 / runs as f64, 100.0 * t / total);
            }
            outln!("slowest ops:");
            for (op, name, d) in ops.iter().take(slowest) {
                outln!("  op {op:<5} {name:<28} {:>8.3} ms/run", d.as_secs_f64() * 1e3 / runs as f64);
            }
        }
        if let Some(file) = &pics.svg {
            pictures::profile(path, file, &by_type, &ops, runs, slowest)?;
        }
        let per_run = |d: std::time::Duration| d.as_secs_f64() * 1e3 / runs as f64;
        profiled = Some(json!({
            "runs": runs,
            "ops": ops.iter().map(|(op, name, d)| json!({"op": op, "type": name, "ms_per_run": per_run(*d), "min_ms": fastest.get(op)})).collect::<Vec<_>>(),
        }));
        sess.set_profiling(false);
    }
    if let (Some(file), Runner::Model(sess)) = (trace, &mut s) {
        sess.write_trace(file).map_err(|e| e.to_string())?;
    }
    if let Some(file) = &pics.mem_svg {
        let Runner::Model(sess) = &s else { return Err("--mem-svg works on a model file, not a package".into()) };
        pictures::memory(path, file, sess)?;
    }
    let samples = poller.map(observe::RssPoller::stop);
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
    let mean = times.iter().sum::<f64>() / n as f64;
    let geomean = (times.iter().map(|t| t.max(1e-9).ln()).sum::<f64>() / n as f64).exp();
    let (arena, lower) = s.arena_stats().unwrap_or((0, 0));
    let mut doc = json!({
        "model": path.display().to_string(), "threads": threads, "runs": n, "warmup": warmup,
        "load_ms": load_ms, "prepare_ms": prepare_ms,
        "execute_ms": {"mean": mean, "median": median, "min": sorted[0], "max": sorted[n - 1], "geomean": geomean},
        "run_ms": times, "run_delay_s": run_delay, "min_secs": min_secs, "max_secs": max_secs,
        "peak_rss_kb": peak_rss_kb(), "arena_bytes": arena, "arena_lower_bound_bytes": lower,
        "heap_allocs_per_run": heap_allocs_per_run,
    });
    if let Some(file) = trace {
        doc["trace"] = json!(file.display().to_string());
    }
    if let Some(p) = profiled {
        doc["profile"] = p;
    }
    if let Runner::Model(sess) = &s {
        let g = sess.gpu_plan();
        if g.segments > 0 {
            // Per timed run (warm-up excluded): the three phases of the GPU segments.
            let (a, b) = (gpu_before, sess.gpu_times());
            let per_run = |x: f64, y: f64| (y - x) * 1e3 / n as f64;
            doc["gpu"] = json!({
                "segments": g.segments, "ops": g.ops, "buffer_bytes": g.buffer_bytes, "lower_bound_bytes": g.lower_bound_bytes,
                "upload_ms": per_run(a.upload_s, b.upload_s), "gpu_ms": per_run(a.gpu_s, b.gpu_s), "readback_ms": per_run(a.readback_s, b.readback_s),
                "gpu_ms_from": if b.gpu_timestamps { "GPU timestamps (TIMESTAMP_QUERY)" } else { "host clock: submission until the GPU is done (no TIMESTAMP_QUERY)" },
                "upload_readback_from": "host clock",
            });
        }
    }
    if let (Some(ms), Some(samples)) = (mem_poll, &samples) {
        let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
        let timeline: Vec<Value> = samples.iter().map(|(t, kb)| json!([(t * 1000.0).round() / 1000.0, kb])).collect();
        doc["memory"] = json!({"poll_ms": ms, "samples": samples.len(), "max_rss_kb": max, "timeline": timeline});
    }
    if as_json {
        outln!("{doc}");
    } else {
        outln!("model      {}", path.display());
        outln!("load       {load_ms:.3} ms");
        outln!("prepare    {prepare_ms:.3} ms");
        outln!(
            "execute    median {median:.3} ms, mean {mean:.3}, min {:.3}, max {:.3}, geomean {geomean:.3} ({n} runs, {warmup} warmup, {threads} thread(s))",
            sorted[0],
            sorted[n - 1]
        );
        outln!("arena      {arena} bytes (lower bound {lower})");
        outln!("heap       {heap_allocs_per_run} allocations per run");
        outln!("peak RSS   {} kB", peak_rss_kb());
        if let (Some(ms), Some(samples)) = (mem_poll, &samples) {
            outln!("RSS        max {} kB over {} samples, every {ms} ms", samples.iter().map(|s| s.1).max().unwrap_or(0), samples.len());
        }
        if let Some(file) = trace {
            outln!("trace      {}", file.display());
        }
    }
    Ok(())
}
