//! The CLI's windows into a run: `run --dump` writes what the callbacks see (the
//! final tensors byte for byte as the outputs), `--trace` writes a Chrome trace, and
//! `bench` honours its timing options and reports per-run times and RSS samples.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};
use serde_json::Value;

fn ferrite() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
}

fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/demo.tflite")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrite-cli-observe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(cmd: &mut Command) -> (String, String) {
    let out = cmd.output().expect("the ferrite binary runs");
    let (o, e) = (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string());
    assert!(out.status.success(), "{cmd:?} failed:\n{o}\n{e}");
    (o, e)
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn dump_writes_every_op_and_the_final_tensors_match_the_outputs() {
    let d = tmp("dump");
    ok(ferrite().arg("run").arg(demo()).arg("-o").arg(d.join("out")).arg("--dump").arg(d.join("dump")).arg("--seed").arg("7"));
    let index = json(&d.join("dump/index.json"));
    let ops = index["ops"].as_array().unwrap();
    assert_eq!(ops.iter().map(|o| o["op_index"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    for o in ops {
        let t = &o["outputs"][0];
        assert_eq!(t["state"], "ready");
        let file = d.join("dump").join(t["file"].as_str().unwrap());
        assert!(file.exists(), "{}", file.display());
    }
    assert_eq!(ops[0]["type"], "CONV_2D");
    assert_eq!(ops[4]["outputs"][0]["file"], "0004_SOFTMAX_probabilities.npy");
    // The last op's output is the model's output: the same .npy, byte for byte.
    let dumped = std::fs::read(d.join("dump/0004_SOFTMAX_probabilities.npy")).unwrap();
    assert_eq!(dumped, std::fs::read(d.join("out/output_0.npy")).unwrap());

    // Chosen ops only, by index and by type; with --steps, one directory per step.
    ok(ferrite().arg("run").arg(demo()).arg("-o").arg(d.join("out2")).arg("--dump").arg(d.join("some")).args(["--dump-ops", "softmax,1", "--steps", "2"]));
    for step in ["step_0000", "step_0001"] {
        let index = json(&d.join("some").join(step).join("index.json"));
        let chosen: Vec<u64> = index["ops"].as_array().unwrap().iter().map(|o| o["op_index"].as_u64().unwrap()).collect();
        assert_eq!(chosen, [1, 4]);
    }
    let names: Vec<String> = std::fs::read_dir(d.join("some/step_0001")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // A bad selection is an error, not an empty dump.
    for bad in ["99", "NOT_AN_OP", ""] {
        let out = ferrite().arg("run").arg(demo()).arg("-o").arg(d.join("out3")).arg("--dump").arg(d.join("bad")).args(["--dump-ops", bad]).output().unwrap();
        assert!(!out.status.success(), "--dump-ops '{bad}' was accepted");
    }
    std::fs::remove_dir_all(&d).ok();
}

/// x -CONV-> RELU: the RELU runs inside the convolution, so the convolution's own
/// output never exists.
fn fused_model(path: &Path) {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 6, 6, 3]));
    let wv: Vec<f32> = (0..4 * 9 * 3).map(|i| ((i * 5 % 11) as f32 - 5.0) / 10.0).collect();
    let w = m.add_tensor(TensorSpec::const_f32("w", &[4, 3, 3, 3], &wv));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[4], &[0.1, -0.1, 0.2, 0.0]));
    let c = m.add_tensor(TensorSpec::activation("conv", TensorType::FLOAT32, &[1, 6, 6, 4]));
    m.add_op(
        OpCode::Builtin(B::CONV_2D),
        &[x, w, b],
        &[c],
        Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE },
    );
    let y = m.add_tensor(TensorSpec::activation("relu", TensorType::FLOAT32, &[1, 6, 6, 4]));
    m.add_op(OpCode::Builtin(B::RELU), &[c], &[y], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![y];
    std::fs::write(path, m.to_bytes().unwrap()).unwrap();
}

#[test]
fn dump_lists_fused_tensors_without_writing_them() {
    let d = tmp("fused");
    let model = d.join("fused.tflite");
    fused_model(&model);
    ok(ferrite().arg("run").arg(&model).arg("-o").arg(d.join("out")).arg("--dump").arg(d.join("dump")));
    let index = json(&d.join("dump/index.json"));
    let ops = index["ops"].as_array().unwrap();
    assert_eq!(ops[0]["outputs"][0]["state"], "fused");
    assert_eq!(ops[0]["outputs"][0]["file"], Value::Null);
    assert_eq!(ops[1]["runs_on"], "fused into op 0");
    assert_eq!(ops[1]["outputs"][0]["state"], "ready");
    let file = ops[1]["outputs"][0]["file"].as_str().unwrap();
    assert_eq!(std::fs::read(d.join("dump").join(file)).unwrap(), std::fs::read(d.join("out/output_0.npy")).unwrap());
    assert_eq!(std::fs::read_dir(d.join("dump")).unwrap().count(), 2, "one .npy and index.json");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn run_and_bench_write_traces_and_bench_reports_its_timeline() {
    let d = tmp("trace");
    ok(ferrite().arg("run").arg(demo()).arg("-o").arg(d.join("out")).arg("--trace").arg(d.join("run.json")));
    let t = json(&d.join("run.json"));
    let ops = t["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "op").count();
    assert_eq!(ops, 5);

    let (stdout, stderr) = ok(ferrite()
        .arg("bench")
        .arg(demo())
        .args(["--runs", "4", "--warmup", "1", "--json", "--mem-poll", "1", "--run-delay", "0.05", "--trace"])
        .arg(d.join("bench.json")));
    // Not a terminal: no progress bar.
    assert!(!stderr.contains('\r'), "{stderr:?}");
    let doc: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(doc["runs"], 4);
    let run_ms = doc["run_ms"].as_array().unwrap();
    assert_eq!(run_ms.len(), 4);
    assert!(run_ms.iter().all(|t| t.as_f64().unwrap() > 0.0));
    let mem = &doc["memory"];
    let timeline = mem["timeline"].as_array().unwrap();
    // Four runs 50 ms apart, sampled every millisecond: several samples, in time
    // order. (10 ms apart gave the sampler thread only two wake-ups in a CI run on
    // two cores under load 6.)
    assert!(timeline.len() >= 3, "{} samples", timeline.len());
    assert!(timeline.windows(2).all(|w| w[0][0].as_f64() <= w[1][0].as_f64()));
    let max = timeline.iter().map(|s| s[1].as_u64().unwrap()).max().unwrap();
    assert_eq!(mem["max_rss_kb"].as_u64(), Some(max));
    // The trace has the warmup and the timed runs, five op slices each.
    let t = json(&d.join("bench.json"));
    let evs = t["traceEvents"].as_array().unwrap();
    assert_eq!(evs.iter().filter(|e| e["cat"] == "run").count(), 5);
    assert_eq!(evs.iter().filter(|e| e["cat"] == "op").count(), 25);

    // --max-secs bounds the runs (at least one); --min-secs extends them.
    let (stdout, _) = ok(ferrite().arg("bench").arg(demo()).args(["--runs", "1000000", "--warmup", "0", "--max-secs", "0", "--json"]));
    let doc: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(doc["runs"], 1);
    let (stdout, _) = ok(ferrite().arg("bench").arg(demo()).args(["--runs", "1", "--warmup", "0", "--min-secs", "0.2", "--run-delay", "0.05", "--json"]));
    let doc: Value = serde_json::from_str(stdout.trim()).unwrap();
    // 0.2 s with 50 ms between runs: more than the one asked for, and not hundreds
    // (a loaded machine oversleeps, never undersleeps).
    let n = doc["runs"].as_u64().unwrap();
    assert!((2..=6).contains(&n), "{n} runs");

    // --profile with --json: stdout is the one document, with every op's time per run.
    let (stdout, _) = ok(ferrite().arg("bench").arg(demo()).args(["--runs", "3", "--warmup", "1", "--profile", "--json"]));
    let doc: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(doc["profile"]["runs"], 3);
    let ops = doc["profile"]["ops"].as_array().unwrap();
    let mut seen: Vec<u64> = ops.iter().map(|o| o["op"].as_u64().unwrap()).collect();
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2, 3, 4], "{ops:?}");
    assert_eq!(ops.iter().find(|o| o["op"] == 0).unwrap()["type"], "CONV_2D");
    assert!(ops.iter().all(|o| o["min_ms"].as_f64().unwrap() <= o["ms_per_run"].as_f64().unwrap() + 1e-9), "{ops:?}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn compare_finds_no_divergence_on_a_clean_model_and_reports_one_past_a_zero_tolerance() {
    let (stdout, _) = ok(ferrite().arg("compare").arg(demo()));
    assert!(stdout.contains("no divergence"), "{stdout}");
    assert!(stdout.contains("5 tensors of 5 ops compared"), "{stdout}");
    // cpu and reference kernels sum in different orders: with no tolerance at all the
    // first op already departs, and the exit status says so.
    let out = ferrite().arg("compare").arg(demo()).args(["--tolerance", "0", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &doc["first_divergence"];
    assert_eq!((first["index"].as_u64(), first["type"].as_str()), (Some(0), Some("CONV_2D")));
    assert!(first["params"].as_str().unwrap().contains("padding"), "{first}");
    assert_eq!(first["diffs"][0]["at"].as_array().unwrap().len(), 4);
    assert_eq!(doc["per_op"].as_array().unwrap().len(), 5);
}

/// LiteRT as the reference, where the oracle venv is installed (scripts/test.sh installs it).
#[test]
fn compare_against_litert_agrees_on_a_clean_model() {
    let python = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/ferrite/venv/bin/python")).filter(|p| p.exists());
    let Some(python) = python.or_else(|| std::env::var_os("FERRITE_PYTHON").map(PathBuf::from)) else {
        assert!(std::env::var_os("CI").is_none(), "CI runs need the oracle venv for this test");
        return;
    };
    let (stdout, _) = ok(ferrite().arg("compare").arg(demo()).args(["--reference", "litert", "--python"]).arg(python));
    assert!(stdout.contains("against LiteRT") && stdout.contains("no divergence"), "{stdout}");
}

/// x -WHILE(i from 0 while i < 3: i + 1, x * 2)-> y: the counter starts as a constant.
fn while_model() -> Vec<u8> {
    let f = TensorType::FLOAT32;
    let mul = Options::Binary { activation: Activation::NONE };
    let mut m = ModelSpec::default();
    let i0 = m.add_tensor(TensorSpec::const_f32("i0", &[1], &[0.0]));
    let x = m.add_tensor(TensorSpec::activation("x", f, &[4]));
    let i = m.add_tensor(TensorSpec::activation("i", f, &[1]));
    let y = m.add_tensor(TensorSpec::activation("y", f, &[4]));
    m.add_op(OpCode::Builtin(B::WHILE), &[i0, x], &[i, y], Options::While { cond_subgraph: 1, body_subgraph: 2 });
    (m.inputs, m.outputs) = (vec![x], vec![y]);
    let mut cond = ModelSpec::default();
    let ci = cond.add_tensor(TensorSpec::activation("i", f, &[1]));
    let cx = cond.add_tensor(TensorSpec::activation("x", f, &[4]));
    let limit = cond.add_tensor(TensorSpec::const_f32("limit", &[1], &[3.0]));
    let b = cond.add_tensor(TensorSpec::activation("go_on", TensorType::BOOL, &[1]));
    cond.add_op(OpCode::Builtin(B::LESS), &[ci, limit], &[b], Options::None);
    (cond.inputs, cond.outputs) = (vec![ci, cx], vec![b]);
    let mut body = ModelSpec::default();
    let bi = body.add_tensor(TensorSpec::activation("i", f, &[1]));
    let bx = body.add_tensor(TensorSpec::activation("x", f, &[4]));
    let one = body.add_tensor(TensorSpec::const_f32("one", &[1], &[1.0]));
    let two = body.add_tensor(TensorSpec::const_f32("two", &[1], &[2.0]));
    let ni = body.add_tensor(TensorSpec::activation("i_next", f, &[1]));
    body.add_op(OpCode::Builtin(B::ADD), &[bi, one], &[ni], mul.clone());
    let nx = body.add_tensor(TensorSpec::activation("x_next", f, &[4]));
    body.add_op(OpCode::Builtin(B::MUL), &[bx, two], &[nx], mul);
    (body.inputs, body.outputs) = (vec![bi, bx], vec![ni, nx]);
    m.subgraphs = vec![cond, body];
    m.to_bytes().unwrap()
}

#[test]
fn dump_writes_each_execution_of_the_ops_inside_a_while() {
    let d = tmp("while");
    let model = d.join("while.tflite");
    std::fs::write(&model, while_model()).unwrap();
    ok(ferrite().arg("run").arg(&model).arg("-o").arg(d.join("out")).arg("--dump").arg(d.join("dump")).arg("--seed").arg("3"));
    let index = json(&d.join("dump/index.json"));
    let ops = index["ops"].as_array().unwrap();
    // Execution order: the condition and the body per pass, the condition once more, the WHILE.
    let mut want: Vec<String> = Vec::new();
    for pass in 0..3 {
        want.push(format!("0000-it{pass}_sg1_0000_LESS_go_on.npy"));
        want.push(format!("0000-it{pass}_sg2_0000_ADD_i_next.npy"));
        want.push(format!("0000-it{pass}_sg2_0001_MUL_x_next.npy"));
    }
    want.push("0000-it3_sg1_0000_LESS_go_on.npy".into());
    want.push("0000_WHILE_i.npy".into());
    let files: Vec<String> = ops.iter().map(|o| o["outputs"][0]["file"].as_str().unwrap().to_string()).collect();
    assert_eq!(files, want);
    for f in &files {
        assert!(d.join("dump").join(f).exists(), "{f}");
    }
    let body_mul = &ops[2];
    assert_eq!((body_mul["subgraph"].as_u64(), body_mul["op_index"].as_u64()), (Some(2), Some(1)));
    assert_eq!(body_mul["calls"], serde_json::json!([{"subgraph": 0, "op_index": 0, "callee": 2, "iteration": 0}]));
    assert!(ops[10].get("calls").is_none(), "the WHILE itself is the session's op");
    // The last pass's MUL wrote the model's output; the WHILE's second output is the same.
    let last_mul = std::fs::read(d.join("dump/0000-it2_sg2_0001_MUL_x_next.npy")).unwrap();
    assert_eq!(last_mul, std::fs::read(d.join("out/output_0.npy")).unwrap());
    let npy_f32 = |b: &[u8]| -> Vec<f32> { b[b.len() - 16..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    let first_mul = std::fs::read(d.join("dump/0000-it0_sg2_0001_MUL_x_next.npy")).unwrap();
    let eight: Vec<f32> = npy_f32(&first_mul).iter().map(|v| v * 4.0).collect();
    assert_eq!(npy_f32(&last_mul), eight, "three doublings");
    let counter = std::fs::read(d.join("dump/0000-it1_sg2_0000_ADD_i_next.npy")).unwrap();
    assert_eq!(counter[counter.len() - 4..], 2.0f32.to_le_bytes(), "the second pass counts to 2");
    // Selecting by type reaches into the body.
    ok(ferrite().arg("run").arg(&model).arg("-o").arg(d.join("out2")).arg("--dump").arg(d.join("muls")).args(["--dump-ops", "MUL"]));
    let index = json(&d.join("muls/index.json"));
    assert_eq!(index["ops"].as_array().unwrap().len(), 3);
}
