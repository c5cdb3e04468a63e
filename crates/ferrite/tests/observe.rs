//! Seeing inside a run: per-op callbacks see every op once, in execution order, with
//! the tensors the run really computed (fused-away ones flagged, never garbage), can
//! skip an op or stop the run; the Chrome trace has one slice per executed op per
//! run, nested in its run, with worker-thread slices inside their op.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ferrite::{Flow, Model, OpEvent, OpRun, RunOutcome, Session, SessionOptions, TensorState};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};
use serde_json::Value;

const HW: usize = 32;
const CIN: usize = 8;
const COUT: usize = 16;

/// x -PAD-> CONV (VALID, 3x3) -ADD(x2)-> RELU -RESHAPE-> ADD(k1 + k2) -> SOFTMAX.
/// The PAD folds into the convolution, the ADD and RELU run inside it as epilogues,
/// k1 + k2 is folded at prepare, the RESHAPE is an alias: only the convolution, the
/// second ADD and the SOFTMAX are steps. The convolution is large enough to run on
/// two threads.
fn model() -> Vec<u8> {
    let mut m = ModelSpec::default();
    let f = TensorType::FLOAT32;
    let x = m.add_tensor(TensorSpec::activation("x", f, &[1, HW as i32, HW as i32, CIN as i32]));
    let x2 = m.add_tensor(TensorSpec::activation("x2", f, &[1, HW as i32, HW as i32, COUT as i32]));
    let pads = m.add_tensor(TensorSpec::const_i32("pads", &[4, 2], &[0, 0, 1, 1, 1, 1, 0, 0]));
    let p = m.add_tensor(TensorSpec::activation("padded", f, &[1, HW as i32 + 2, HW as i32 + 2, CIN as i32]));
    m.add_op(OpCode::Builtin(B::PAD), &[x, pads], &[p], Options::None);
    let wv: Vec<f32> = (0..COUT * 9 * CIN).map(|i| ((i * 7 % 19) as f32 - 9.0) / 40.0).collect();
    let w = m.add_tensor(TensorSpec::const_f32("conv/w", &[COUT as i32, 3, 3, CIN as i32], &wv));
    let bv: Vec<f32> = (0..COUT).map(|i| i as f32 / 20.0 - 0.3).collect();
    let b = m.add_tensor(TensorSpec::const_f32("conv/b", &[COUT as i32], &bv));
    let s4 = [1, HW as i32, HW as i32, COUT as i32];
    let c = m.add_tensor(TensorSpec::activation("conv", f, &s4));
    m.add_op(
        OpCode::Builtin(B::CONV_2D),
        &[p, w, b],
        &[c],
        Options::Conv2D { padding: Padding::VALID, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE },
    );
    let k1 = m.add_tensor(TensorSpec::const_f32("k1", &[COUT as i32], &[0.25; COUT]));
    let k2 = m.add_tensor(TensorSpec::const_f32("k2", &[COUT as i32], &bv));
    let kb = m.add_tensor(TensorSpec::activation("k", f, &[COUT as i32]));
    m.add_op(OpCode::Builtin(B::ADD), &[k1, k2], &[kb], Options::Binary { activation: Activation::NONE });
    let sum = m.add_tensor(TensorSpec::activation("residual", f, &s4));
    m.add_op(OpCode::Builtin(B::ADD), &[c, x2], &[sum], Options::Binary { activation: Activation::NONE });
    let r = m.add_tensor(TensorSpec::activation("relu", f, &s4));
    m.add_op(OpCode::Builtin(B::RELU), &[sum], &[r], Options::None);
    let shape = m.add_tensor(TensorSpec::const_i32("shape", &[3], &[1, (HW * HW) as i32, COUT as i32]));
    let rs = m.add_tensor(TensorSpec::activation("flat", f, &[1, (HW * HW) as i32, COUT as i32]));
    m.add_op(OpCode::Builtin(B::RESHAPE), &[r, shape], &[rs], Options::Reshape { new_shape: vec![1, (HW * HW) as i32, COUT as i32] });
    let a = m.add_tensor(TensorSpec::activation("biased", f, &[1, (HW * HW) as i32, COUT as i32]));
    m.add_op(OpCode::Builtin(B::ADD), &[rs, kb], &[a], Options::Binary { activation: Activation::NONE });
    let y = m.add_tensor(TensorSpec::activation("y", f, &[1, (HW * HW) as i32, COUT as i32]));
    m.add_op(OpCode::Builtin(B::SOFTMAX), &[a], &[y], Options::Softmax { beta: 1.0 });
    m.inputs = vec![x, x2];
    m.outputs = vec![y];
    m.to_bytes().unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn inputs(seed: usize) -> [Vec<u8>; 2] {
    let x: Vec<f32> = (0..HW * HW * CIN).map(|i| (((i + seed) * 37 % 23) as f32 - 11.0) / 7.0).collect();
    let x2: Vec<f32> = (0..HW * HW * COUT).map(|i| (((i + seed) * 13 % 17) as f32 - 8.0) / 9.0).collect();
    [f32_bytes(&x), f32_bytes(&x2)]
}

fn session(options: SessionOptions, preserve_all: bool) -> Session {
    let m = Arc::new(Model::from_bytes(Arc::new(model())).unwrap());
    let mut s = Session::with_options(m, options).unwrap();
    s.set_preserve_all_tensors(preserve_all).unwrap();
    s.prepare().unwrap();
    s
}

fn set_inputs(s: &mut Session, seed: usize) {
    for (k, b) in inputs(seed).iter().enumerate() {
        s.set_input(k, b).unwrap();
    }
}

/// What a callback saw of one tensor.
#[derive(Debug, Clone)]
struct Seen {
    tensor: usize,
    state: TensorState,
    data: Option<Vec<u8>>,
}

/// What callbacks saw of one op.
#[derive(Debug, Clone)]
struct Event {
    index: usize,
    runs_on: OpRun,
    inputs: Vec<Seen>,
    outputs: Vec<Seen>,
}

fn record(ev: &OpEvent<'_>) -> Event {
    let seen = |v: &[ferrite::TensorView<'_>]| v.iter().map(|t| Seen { tensor: t.tensor, state: t.state, data: t.data.map(<[u8]>::to_vec) }).collect();
    Event { index: ev.index, runs_on: ev.runs_on, inputs: seen(ev.inputs), outputs: seen(ev.outputs) }
}

/// Runs with callbacks that record everything; returns (before events, after events, outcome).
fn observe(s: &mut Session, stop_before: Option<usize>) -> (Vec<Event>, Vec<Event>, RunOutcome) {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let outcome = s
        .run_with_callbacks(
            |ev| {
                before.push(record(ev));
                if Some(ev.index) == stop_before {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            },
            |ev| {
                after.push(record(ev));
                Flow::Continue
            },
        )
        .unwrap();
    (before, after, outcome)
}

fn close(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (to_f32(a), to_f32(b));
    a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits() || (x - y).abs() <= 1e-4 * (1.0 + y.abs()))
}

#[test]
fn callbacks_see_every_op_once_in_execution_order_with_what_the_run_computed() {
    for threads in [1, 2] {
        let mut s = session(SessionOptions { threads, ..Default::default() }, false);
        let ops = s.model().subgraphs()[0].ops.len();
        // The plan this test is about: a folded PAD, epilogues, a folded ADD, an alias.
        let runs: Vec<OpRun> = s.op_assignments().unwrap().into_iter().map(|a| a.2).collect();
        assert_eq!(
            runs,
            [
                OpRun::Fused { into: 1 },
                OpRun::Backend("cpu"),
                OpRun::Folded,
                OpRun::Fused { into: 1 },
                OpRun::Fused { into: 1 },
                OpRun::Alias,
                OpRun::Backend("cpu"),
                OpRun::Backend("cpu")
            ]
        );
        set_inputs(&mut s, 0);
        let (before, after, outcome) = observe(&mut s, None);
        assert_eq!(outcome, RunOutcome::Completed);
        // Each op once, before then after; execution order: epilogues right after their
        // convolution, every other op where its index falls between the steps.
        let order: Vec<usize> = before.iter().map(|e| e.index).collect();
        assert_eq!(order, [0, 1, 3, 4, 2, 5, 6, 7]);
        assert_eq!(after.iter().map(|e| e.index).collect::<Vec<_>>(), order);
        assert_eq!(order.len(), ops);
        for e in &before {
            assert_eq!(e.runs_on, runs[e.index], "{e:?}");
            assert!(e.outputs.iter().all(|t| t.state == TensorState::Pending && t.data.is_none()), "before shows no outputs: {e:?}");
        }

        // The same model with every tensor kept, unfused: the value each tensor should hold.
        let mut truth = session(SessionOptions { threads, ..Default::default() }, true);
        set_inputs(&mut truth, 0);
        truth.run().unwrap();
        let state_of = |t: usize| after.iter().flat_map(|e| e.inputs.iter().chain(&e.outputs)).find(|v| v.tensor == t).map(|v| v.state);
        // Never materialised: the folded PAD's output, the convolution's (its epilogues
        // wrote theirs there) and the ADD between the convolution and the RELU.
        for t in [3usize, 6, 10] {
            let name = &s.model().subgraphs()[0].tensors[t].name;
            assert_eq!(state_of(t), Some(TensorState::Fused), "tensor {t} '{name}'");
        }
        let mut ready = 0;
        for e in before.iter().chain(&after) {
            for v in e.inputs.iter().chain(&e.outputs) {
                match (&v.state, &v.data) {
                    (TensorState::Ready, Some(d)) => {
                        let want = truth.tensor_data(v.tensor).unwrap();
                        assert!(close(d, want.bytes), "op {} tensor {}: the view differs from the unfused run", e.index, v.tensor);
                        ready += 1;
                    }
                    (TensorState::Ready, None) => panic!("ready without data: {v:?}"),
                    (_, Some(_)) => panic!("data without ready: {v:?}"),
                    _ => {}
                }
            }
        }
        assert!(ready >= 20, "{ready} ready views");
        // The final op's output is the model's output, byte for byte.
        let last = after.last().unwrap();
        assert_eq!(last.outputs[0].data.as_deref(), Some(s.output(0).unwrap().bytes));
        // An op's inputs, when ready, hold what its producer's after-callback showed.
        let mut produced: HashMap<usize, Vec<u8>> = HashMap::new();
        for (b, a) in before.iter().zip(&after) {
            for v in &b.inputs {
                if let (Some(d), Some(p)) = (&v.data, produced.get(&v.tensor)) {
                    assert_eq!(d, p, "op {} reads tensor {} as it was written", b.index, v.tensor);
                }
            }
            for v in &a.outputs {
                if let Some(d) = &v.data {
                    produced.insert(v.tensor, d.clone());
                }
            }
        }
    }
}

#[test]
fn callbacks_stop_the_run_and_skip_ops() {
    let mut s = session(SessionOptions::default(), false);
    set_inputs(&mut s, 0);
    s.run().unwrap();
    let first = s.output(0).unwrap().bytes.to_vec();
    // Stop before op 6: ops after it are never announced, and the outputs are not valid.
    set_inputs(&mut s, 1);
    let (before, after, outcome) = observe(&mut s, Some(6));
    assert_eq!(outcome, RunOutcome::Stopped { subgraph: 0, op: 6 });
    assert_eq!(before.last().unwrap().index, 6);
    assert_eq!(after.iter().map(|e| e.index).collect::<Vec<_>>(), [0, 1, 3, 4, 2, 5]);
    assert!(s.output(0).is_err(), "a stopped run has no outputs");
    // The intermediates it computed can be read: the RELU's output is the reshape's.
    let relu = after.iter().find(|e| e.index == 4).unwrap().outputs[0].data.clone().unwrap();
    assert_eq!(s.tensor_data(11).unwrap().bytes, &relu[..]);

    // Skipping the SOFTMAX: it is not run (nor its `after` called), so the output is
    // not the softmax a full run computes (its memory holds what the plan put there
    // earlier in the run).
    let mut after_ops = Vec::new();
    let skipped = s
        .run_with_callbacks(
            |ev| if ev.index == 7 { Flow::Skip } else { Flow::Continue },
            |ev| {
                after_ops.push(ev.index);
                Flow::Continue
            },
        )
        .unwrap();
    assert_eq!(skipped, RunOutcome::Completed);
    assert_eq!(after_ops, [0, 1, 3, 4, 2, 5, 6]);
    let left = s.output(0).unwrap().bytes.to_vec();
    s.run().unwrap();
    assert_ne!(s.output(0).unwrap().bytes, &left[..]);
    assert_ne!(s.output(0).unwrap().bytes, &first[..], "the inputs changed");
    // Stopping from `after` ends the run at that op.
    let mut seen = 0;
    let stopped = s
        .run_with_callbacks(
            |_| {
                seen += 1;
                Flow::Continue
            },
            |ev| if ev.index == 1 { Flow::Stop } else { Flow::Continue },
        )
        .unwrap();
    assert_eq!(stopped, RunOutcome::Stopped { subgraph: 0, op: 1 });
    assert_eq!(seen, 2, "op 0 and op 1");
    // And a plain run afterwards is complete and matches a fresh session.
    s.run().unwrap();
    let mut fresh = session(SessionOptions::default(), false);
    set_inputs(&mut fresh, 1);
    fresh.run().unwrap();
    assert_eq!(s.output(0).unwrap().bytes, fresh.output(0).unwrap().bytes);
}

fn events(trace: &Value) -> &Vec<Value> {
    trace["traceEvents"].as_array().expect("traceEvents is an array")
}

fn span(e: &Value) -> (f64, f64) {
    let ts = e["ts"].as_f64().unwrap();
    (ts, ts + e["dur"].as_f64().unwrap())
}

fn inside(inner: (f64, f64), outer: (f64, f64)) -> bool {
    // Timestamps are written in microseconds with nanosecond digits.
    inner.0 >= outer.0 - 1e-3 && inner.1 <= outer.1 + 1e-3
}

#[test]
fn trace_has_one_slice_per_executed_op_per_run_nested_with_worker_threads() {
    let mut s = session(SessionOptions { threads: 2, trace: true, ..Default::default() }, false);
    set_inputs(&mut s, 0);
    let runs = 3;
    for _ in 0..runs {
        s.run().unwrap();
    }
    // Runs after tracing stops are not recorded.
    s.set_tracing(false);
    s.run().unwrap();
    assert_eq!(s.traced_runs(), runs);
    let mut out = Vec::new();
    s.write_trace_to(&mut out).unwrap();
    let trace: Value = serde_json::from_slice(&out).expect("the trace is JSON");
    let evs = events(&trace);
    let of = |cat: &'static str| evs.iter().filter(move |e| e["cat"] == cat && e["ph"] == "X");

    // Thread names for every thread that has slices.
    let named: Vec<u64> = evs.iter().filter(|e| e["ph"] == "M" && e["name"] == "thread_name").map(|e| e["tid"].as_u64().unwrap()).collect();
    for e in evs.iter().filter(|e| e["ph"] == "X") {
        assert!(named.contains(&e["tid"].as_u64().unwrap()), "unnamed thread in {e}");
    }

    // Prepare: parse, the compile with its per-op passes, packing, the memory plan.
    let prepare: Vec<&Value> = of("prepare").collect();
    let names: Vec<&str> = prepare.iter().map(|e| e["name"].as_str().unwrap()).collect();
    for want in ["parse", "prepare", "compile subgraph 0", "plan memory", "build kernel", "pack weights", "fold constants", "CONV_2D #1"] {
        assert!(names.contains(&want), "no '{want}' slice in {names:?}");
    }
    let whole = span(prepare.iter().find(|e| e["name"] == "prepare").unwrap());
    for e in prepare.iter().filter(|e| e["name"] != "parse" && e["name"] != "prepare") {
        assert!(inside(span(e), whole), "{e} outside prepare");
    }

    // One run slice per run; in each, exactly the steps (ops 1, 6, 7), each once,
    // one after the other on the session's thread, inside the run.
    let run_slices: Vec<&Value> = of("run").collect();
    assert_eq!(run_slices.len(), runs);
    let session_tid = run_slices[0]["tid"].as_u64().unwrap();
    let ops: Vec<&Value> = of("op").collect();
    for (r, run) in run_slices.iter().enumerate() {
        assert_eq!(run["args"]["run"], r);
        let mut these: Vec<&Value> = ops.iter().copied().filter(|e| e["args"]["run"] == r).collect();
        these.sort_by(|a, b| a["ts"].as_f64().unwrap().total_cmp(&b["ts"].as_f64().unwrap()));
        let idx: Vec<u64> = these.iter().map(|e| e["args"]["op_index"].as_u64().unwrap()).collect();
        assert_eq!(idx, [1, 6, 7], "run {r}");
        for w in these.windows(2) {
            assert!(span(w[0]).1 <= span(w[1]).0 + 1e-3, "op slices overlap: {} {}", w[0], w[1]);
        }
        for e in &these {
            assert_eq!(e["tid"].as_u64(), Some(session_tid));
            assert!(inside(span(e), span(run)), "{e} outside its run");
        }
    }
    // The convolution's description: type, backend, shapes, bytes, FLOPs, fused ops.
    let conv = ops.iter().find(|e| e["args"]["op_index"] == 1).unwrap();
    let a = &conv["args"];
    assert_eq!(conv["name"], "CONV_2D");
    assert_eq!(a["backend"], "cpu");
    assert_eq!(a["inputs"][0]["shape"], serde_json::json!([1, HW + 2, HW + 2, CIN]));
    assert_eq!(a["outputs"][0]["shape"], serde_json::json!([1, HW, HW, COUT]));
    assert_eq!(a["outputs"][0]["bytes"], 4 * HW * HW * COUT);
    assert_eq!(a["flops"], 2 * HW * HW * COUT * 9 * CIN);
    assert_eq!(a["fused"], serde_json::json!([0, 3, 4]));
    assert!(ops.iter().find(|e| e["args"]["op_index"] == 7).unwrap()["args"].get("flops").is_none());

    // Worker slices: each inside its op's slice of the same run; the threads together
    // ran every task of the convolution's parallel region, every run.
    let workers: Vec<&Value> = of("worker").collect();
    let mut tasks: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for w in &workers {
        let (r, op) = (w["args"]["run"].as_u64().unwrap(), w["args"]["op_index"].as_u64().unwrap());
        let owner = ops.iter().find(|e| e["args"]["run"] == r && e["args"]["op_index"] == op).expect("a worker slice belongs to an op slice");
        assert!(inside(span(w), span(owner)), "{w} outside {owner}");
        let tid = w["tid"].as_u64().unwrap();
        assert!(tid == session_tid || tid == session_tid + 1, "{w}");
        *tasks.entry((r, op)).or_default() += w["args"]["tasks"].as_u64().unwrap();
    }
    for r in 0..runs as u64 {
        assert_eq!(tasks.get(&(r, 1)), Some(&2), "run {r}: the convolution's two chunks");
    }
    assert_eq!(trace["otherData"]["dropped_events"], 0);
}

#[test]
fn tracing_starts_late_and_covers_callback_runs() {
    let mut s = session(SessionOptions::default(), false);
    assert!(s.write_trace_to(&mut Vec::new()).is_err(), "no trace before tracing starts");
    s.set_tracing(true);
    set_inputs(&mut s, 0);
    s.run().unwrap();
    let outcome = s.run_with_callbacks(|ev| if ev.index == 6 { Flow::Stop } else { Flow::Continue }, |_| Flow::Continue).unwrap();
    assert!(matches!(outcome, RunOutcome::Stopped { .. }));
    let mut out = Vec::new();
    s.write_trace_to(&mut out).unwrap();
    let trace: Value = serde_json::from_slice(&out).unwrap();
    let evs = events(&trace);
    let runs: Vec<&Value> = evs.iter().filter(|e| e["cat"] == "run").collect();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["args"]["completed"], true);
    assert_eq!(runs[1]["args"]["completed"], false);
    // The stopped run traced only the step that ran before the stop.
    let second: Vec<u64> = evs.iter().filter(|e| e["cat"] == "op" && e["args"]["run"] == 1).map(|e| e["args"]["op_index"].as_u64().unwrap()).collect();
    assert_eq!(second, [1]);
    // Started after prepare: no prepare slices, and no parse.
    assert!(evs.iter().all(|e| e["cat"] != "prepare"));
}

/// The corpus models (FERRITE_CORPUS), sorted.
fn corpus() -> Vec<std::path::PathBuf> {
    let mut v = Vec::new();
    if let Ok(dir) = std::env::var("FERRITE_CORPUS") {
        let mut stack = vec![std::path::PathBuf::from(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "tflite") {
                    v.push(p);
                }
            }
        }
    }
    v.sort();
    v
}

/// Over the corpus, callbacks see every op of the session's subgraph once, and
/// every view they get as ready holds the value a run with every tensor kept (and
/// nothing fused) computes: arena reuse and fusion never show a callback garbage.
#[test]
fn corpus_views_hold_what_an_unfused_run_computes() {
    let mut checked = 0;
    for p in corpus() {
        let open = |keep: bool| -> ferrite::Result<Session> {
            let mut s = Session::from_file(&p)?;
            s.set_preserve_all_tensors(keep)?;
            if p.file_name().is_some_and(|n| n == "melspectrogram.tflite") {
                s.resize_input(0, &[1, 16000])?;
            }
            s.prepare()?;
            for (k, d) in s.inputs().iter().enumerate() {
                let n = d.shape.iter().product::<usize>();
                // Small values every element type reads as valid (indices included).
                let bytes: Vec<u8> = match d.dtype {
                    ferrite::DType::F32 => (0..n).flat_map(|i| (((i * 29 % 17) as f32 - 8.0) / 10.0).to_le_bytes()).collect(),
                    t => vec![0; n * t.size().unwrap_or(1)],
                };
                s.set_input(k, &bytes)?;
            }
            Ok(s)
        };
        let (Ok(mut s), Ok(mut truth)) = (open(false), open(true)) else { continue };
        if truth.run().is_err() {
            continue;
        }
        let ops = s.model().subgraphs()[s.subgraph_index()].ops.len();
        let mut seen = vec![0usize; ops];
        let bad = std::cell::RefCell::new(Vec::new());
        let ready = std::cell::Cell::new(0);
        // The unfused run keeps the session's subgraph's tensors: bodies of control flow
        // (reported too, with their own tensor indices) are checked in observe_control_flow.rs.
        let check = |ev: &OpEvent<'_>| {
            if !ev.calls.is_empty() {
                return;
            }
            for v in ev.inputs.iter().chain(ev.outputs) {
                let Some(d) = v.data else { continue };
                ready.set(ready.get() + 1);
                let Ok(want) = truth.tensor_data(v.tensor) else { continue };
                let same = match v.dtype {
                    ferrite::DType::F32 => close(d, want.bytes),
                    _ => d == want.bytes,
                };
                if !same {
                    bad.borrow_mut().push(format!("op {} ({}) tensor {} '{}' {:?}", ev.index, ev.op_name(), v.tensor, v.name, v.state));
                }
            }
        };
        let outcome = s
            .run_with_callbacks(
                |ev| {
                    if ev.calls.is_empty() {
                        seen[ev.index] += 1;
                    }
                    check(ev);
                    Flow::Continue
                },
                |ev| {
                    check(ev);
                    Flow::Continue
                },
            )
            .unwrap();
        assert_eq!(outcome, RunOutcome::Completed);
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        assert!(seen.iter().all(|&n| n == 1), "{name}: ops seen {seen:?}");
        let (bad, ready) = (bad.into_inner(), ready.get());
        assert!(bad.is_empty(), "{name}: views that differ from the unfused run: {bad:?}");
        println!("{name:<45} {ops} ops, {ready} ready views match");
        checked += 1;
    }
    println!("{checked} corpus models checked");
}
