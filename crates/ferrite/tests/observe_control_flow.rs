//! Seeing inside control flow: ops of IF branches and WHILE conditions and bodies are
//! reported to callbacks at each execution, in order, with their call path (the
//! control-flow op and WHILE pass), traced one slice each, nested in their
//! control-flow op's slice; a stop inside a body ends the whole run cleanly.

use std::sync::Arc;

use ferrite::{CallFrame, Flow, Model, OpEvent, RunOutcome, Session, SessionOptions, TensorState};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};
use serde_json::Value;

const N: usize = 4;
const ADD: Options = Options::Binary { activation: Activation::NONE };

/// Subgraph 0: x0 -RELU-> x; WHILE(i0, x) -> (i, xw); xw -NEG-> y. Outputs y, i.
/// Subgraph 1 (condition): i < limit.
/// Subgraph 2 (body): i + 1; x * 2 + k.
fn while_model() -> Vec<u8> {
    let f = TensorType::FLOAT32;
    let mut m = ModelSpec::default();
    let i0 = m.add_tensor(TensorSpec::activation("i0", f, &[1]));
    let x0 = m.add_tensor(TensorSpec::activation("x0", f, &[N as i32]));
    let x = m.add_tensor(TensorSpec::activation("x", f, &[N as i32]));
    m.add_op(OpCode::Builtin(B::RELU), &[x0], &[x], Options::None);
    let i = m.add_tensor(TensorSpec::activation("i", f, &[1]));
    let xw = m.add_tensor(TensorSpec::activation("xw", f, &[N as i32]));
    m.add_op(OpCode::Builtin(B::WHILE), &[i0, x], &[i, xw], Options::While { cond_subgraph: 1, body_subgraph: 2 });
    let y = m.add_tensor(TensorSpec::activation("y", f, &[N as i32]));
    m.add_op(OpCode::Builtin(B::NEG), &[xw], &[y], Options::None);
    (m.inputs, m.outputs) = (vec![i0, x0], vec![y, i]);

    let mut cond = ModelSpec::default();
    let ci = cond.add_tensor(TensorSpec::activation("i", f, &[1]));
    let cx = cond.add_tensor(TensorSpec::activation("x", f, &[N as i32]));
    let limit = cond.add_tensor(TensorSpec::const_f32("limit", &[1], &[3.0]));
    let b = cond.add_tensor(TensorSpec::activation("go_on", TensorType::BOOL, &[1]));
    cond.add_op(OpCode::Builtin(B::LESS), &[ci, limit], &[b], Options::None);
    (cond.inputs, cond.outputs) = (vec![ci, cx], vec![b]);

    let mut body = ModelSpec::default();
    let bi = body.add_tensor(TensorSpec::activation("i", f, &[1]));
    let bx = body.add_tensor(TensorSpec::activation("x", f, &[N as i32]));
    let one = body.add_tensor(TensorSpec::const_f32("one", &[1], &[1.0]));
    let two = body.add_tensor(TensorSpec::const_f32("two", &[1], &[2.0]));
    let k = body.add_tensor(TensorSpec::const_f32("k", &[N as i32], &[0.5, -1.0, 0.25, 3.0]));
    let ni = body.add_tensor(TensorSpec::activation("i_next", f, &[1]));
    body.add_op(OpCode::Builtin(B::ADD), &[bi, one], &[ni], ADD);
    let doubled = body.add_tensor(TensorSpec::activation("doubled", f, &[N as i32]));
    body.add_op(OpCode::Builtin(B::MUL), &[bx, two], &[doubled], ADD);
    let nx = body.add_tensor(TensorSpec::activation("x_next", f, &[N as i32]));
    body.add_op(OpCode::Builtin(B::ADD), &[doubled, k], &[nx], ADD);
    (body.inputs, body.outputs) = (vec![bi, bx], vec![ni, nx]);
    m.subgraphs = vec![cond, body];
    m.to_bytes().unwrap()
}

/// Subgraph 0: IF(c, x) -> z; z -ABS-> y. Then (1): x * x + 1. Else (2): -x.
fn if_model() -> Vec<u8> {
    let f = TensorType::FLOAT32;
    let mut m = ModelSpec::default();
    let c = m.add_tensor(TensorSpec::activation("c", TensorType::BOOL, &[1]));
    let x = m.add_tensor(TensorSpec::activation("x", f, &[N as i32]));
    let z = m.add_tensor(TensorSpec::activation("z", f, &[N as i32]));
    m.add_op(OpCode::Builtin(B::IF), &[c, x], &[z], Options::If { then_subgraph: 1, else_subgraph: 2 });
    let y = m.add_tensor(TensorSpec::activation("y", f, &[N as i32]));
    m.add_op(OpCode::Builtin(B::ABS), &[z], &[y], Options::None);
    (m.inputs, m.outputs) = (vec![c, x], vec![y]);

    let mut then = ModelSpec::default();
    let tx = then.add_tensor(TensorSpec::activation("x", f, &[N as i32]));
    let sq = then.add_tensor(TensorSpec::activation("squared", f, &[N as i32]));
    then.add_op(OpCode::Builtin(B::MUL), &[tx, tx], &[sq], ADD);
    let one = then.add_tensor(TensorSpec::const_f32("one", &[1], &[1.0]));
    let ty = then.add_tensor(TensorSpec::activation("plus_one", f, &[N as i32]));
    then.add_op(OpCode::Builtin(B::ADD), &[sq, one], &[ty], ADD);
    (then.inputs, then.outputs) = (vec![tx], vec![ty]);

    let mut otherwise = ModelSpec::default();
    let ex = otherwise.add_tensor(TensorSpec::activation("x", f, &[N as i32]));
    let ey = otherwise.add_tensor(TensorSpec::activation("negated", f, &[N as i32]));
    otherwise.add_op(OpCode::Builtin(B::NEG), &[ex], &[ey], Options::None);
    (otherwise.inputs, otherwise.outputs) = (vec![ex], vec![ey]);
    m.subgraphs = vec![then, otherwise];
    m.to_bytes().unwrap()
}

fn session(bytes: Vec<u8>, trace: bool) -> Session {
    let m = Arc::new(Model::from_bytes(Arc::new(bytes)).unwrap());
    let mut s = Session::with_options(m, SessionOptions { trace, ..Default::default() }).unwrap();
    s.prepare().unwrap();
    s
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

const X0: [f32; N] = [1.5, -2.0, 0.75, 4.0];

fn set_while_inputs(s: &mut Session) {
    s.set_input_f32(0, &[0.0]).unwrap();
    s.set_input_f32(1, &X0).unwrap();
}

/// One callback event: (subgraph, op, call path, input values, output values).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    subgraph: usize,
    index: usize,
    calls: Vec<CallFrame>,
    inputs: Vec<Option<Vec<f32>>>,
    outputs: Vec<(TensorState, Option<Vec<f32>>)>,
}

fn seen(ev: &OpEvent<'_>) -> Seen {
    Seen {
        subgraph: ev.subgraph,
        index: ev.index,
        calls: ev.calls.to_vec(),
        inputs: ev.inputs.iter().map(|v| v.to_f32()).collect(),
        outputs: ev.outputs.iter().map(|v| (v.state, v.to_f32())).collect(),
    }
}

/// Runs with recording callbacks; `stop(ev)` decides where `before` stops.
fn observe(s: &mut Session, stop: impl Fn(&OpEvent<'_>) -> bool) -> (Vec<Seen>, Vec<Seen>, RunOutcome) {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let outcome = s
        .run_with_callbacks(
            |ev| {
                before.push(seen(ev));
                if stop(ev) {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            },
            |ev| {
                after.push(seen(ev));
                Flow::Continue
            },
        )
        .unwrap();
    (before, after, outcome)
}

fn body_frame(callee: usize, iteration: usize) -> CallFrame {
    CallFrame { subgraph: 0, op: 1, callee, iteration: Some(iteration) }
}

/// The (subgraph, op, WHILE pass) order a full run of `while_model` executes its ops in,
/// as `after` callbacks see it: three passes of the body, the condition a fourth time.
fn while_order() -> Vec<(usize, usize, Option<usize>)> {
    let mut order = vec![(0, 0, None)];
    for pass in 0..3 {
        order.push((1, 0, Some(pass)));
        order.extend((0..3).map(|op| (2, op, Some(pass))));
    }
    order.push((1, 0, Some(3)));
    order.extend([(0, 1, None), (0, 2, None)]);
    order
}

fn key(e: &Seen) -> (usize, usize, Option<usize>) {
    (e.subgraph, e.index, e.calls.last().and_then(|f| f.iteration))
}

#[test]
fn callbacks_see_each_execution_of_a_while_body_op_in_order_with_its_values() {
    let mut s = session(while_model(), false);
    set_while_inputs(&mut s);
    let (before, after, outcome) = observe(&mut s, |_| false);
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(after.iter().map(key).collect::<Vec<_>>(), while_order());
    // `before` sees the WHILE before its condition and body ran, `after` once they have.
    let mut want_before = while_order();
    let w = want_before.iter().position(|k| *k == (0, 1, None)).unwrap();
    let while_op = want_before.remove(w);
    want_before.insert(1, while_op);
    assert_eq!(before.iter().map(key).collect::<Vec<_>>(), want_before);
    for e in before.iter().chain(&after) {
        match e.subgraph {
            0 => assert!(e.calls.is_empty(), "{e:?}"),
            sg => {
                let pass = e.calls[0].iteration.unwrap();
                assert_eq!(e.calls, [body_frame(sg, pass)], "{e:?}");
            }
        }
    }
    for e in &before {
        assert!(e.outputs.iter().all(|o| o.0 == TensorState::Pending && o.1.is_none()), "{e:?}");
    }

    // The values each body op saw and wrote, pass by pass.
    let mut x: Vec<f32> = X0.iter().map(|v| v.max(0.0)).collect();
    let k = [0.5, -1.0, 0.25, 3.0];
    for pass in 0..3 {
        let at = |sg: usize, op: usize| after.iter().find(|e| key(e) == (sg, op, Some(pass))).unwrap();
        let i = pass as f32;
        assert_eq!(at(1, 0).inputs[0], Some(vec![i]));
        assert_eq!(at(1, 0).outputs[0].0, TensorState::Ready);
        assert_eq!(at(2, 0).inputs, [Some(vec![i]), Some(vec![1.0])]);
        assert_eq!(at(2, 0).outputs[0].1, Some(vec![i + 1.0]));
        assert_eq!(at(2, 1).inputs[0], Some(x.clone()));
        let doubled: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
        assert_eq!(at(2, 1).outputs[0].1, Some(doubled.clone()));
        assert_eq!(at(2, 2).inputs[0], Some(doubled.clone()));
        x = doubled.iter().zip(k).map(|(d, k)| d + k).collect();
        assert_eq!(at(2, 2).outputs, [(TensorState::Ready, Some(x.clone()))]);
    }
    // The loop's result reaches the op after it and the model's outputs.
    let neg: Vec<f32> = x.iter().map(|v| -v).collect();
    assert_eq!(after.last().unwrap().inputs[0], Some(x.clone()));
    assert_eq!(f32s(s.output(0).unwrap().bytes), neg);
    assert_eq!(f32s(s.output(1).unwrap().bytes), [3.0]);
    // Callbacks change nothing: a plain run computes the same.
    let mut plain = session(while_model(), false);
    set_while_inputs(&mut plain);
    plain.run().unwrap();
    assert_eq!(plain.output(0).unwrap().bytes, s.output(0).unwrap().bytes);
}

#[test]
fn a_stop_inside_a_body_ends_the_run_and_the_next_run_is_whole() {
    let mut s = session(while_model(), false);
    set_while_inputs(&mut s);
    // Stop before the body's MUL in the second pass.
    let (before, after, outcome) = observe(&mut s, |ev| ev.subgraph == 2 && ev.index == 1 && ev.iteration() == Some(1));
    assert_eq!(outcome, RunOutcome::Stopped { subgraph: 2, op: 1 });
    let last = before.last().unwrap();
    assert_eq!(key(last), (2, 1, Some(1)));
    // Nothing after the stop: neither the rest of the body, nor the WHILE's `after`, nor the NEG.
    let order = while_order();
    let upto = order.iter().position(|k| *k == (2, 1, Some(1))).unwrap();
    assert_eq!(after.iter().map(key).collect::<Vec<_>>(), order[..upto]);
    assert!(s.output(0).is_err(), "a stopped run has no outputs");
    // A stop from `after` inside the condition, then a plain run: complete and right.
    let mut afters = 0;
    let outcome = s
        .run_with_callbacks(
            |_| Flow::Continue,
            |ev| {
                afters += 1;
                if ev.subgraph == 1 && ev.iteration() == Some(2) {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            },
        )
        .unwrap();
    assert_eq!(outcome, RunOutcome::Stopped { subgraph: 1, op: 0 });
    assert_eq!(afters, 1 + 2 * 4 + 1);
    s.run().unwrap();
    let mut plain = session(while_model(), false);
    set_while_inputs(&mut plain);
    plain.run().unwrap();
    assert_eq!(plain.output(0).unwrap().bytes, s.output(0).unwrap().bytes);
    assert_eq!(f32s(s.output(1).unwrap().bytes), [3.0]);
    // Skipping a body op leaves its output as it was: the loop still ends.
    let outcome = s.run_with_callbacks(|ev| if ev.subgraph == 2 && ev.index == 1 { Flow::Skip } else { Flow::Continue }, |_| Flow::Continue).unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(f32s(s.output(1).unwrap().bytes), [3.0]);
}

#[test]
fn callbacks_see_the_branch_an_if_takes() {
    let mut s = session(if_model(), false);
    let x = [1.0f32, -2.0, 0.5, 3.0];
    for take in [true, false] {
        s.set_input(0, &[take as u8]).unwrap();
        s.set_input_f32(1, &x).unwrap();
        let (before, after, outcome) = observe(&mut s, |_| false);
        assert_eq!(outcome, RunOutcome::Completed);
        let branch = if take { 1 } else { 2 };
        let frame = CallFrame { subgraph: 0, op: 0, callee: branch, iteration: None };
        let branch_ops: Vec<(usize, usize)> = if take { vec![(1, 0), (1, 1)] } else { vec![(2, 0)] };
        let mut want_after = branch_ops.clone();
        want_after.extend([(0, 0), (0, 1)]);
        assert_eq!(after.iter().map(|e| (e.subgraph, e.index)).collect::<Vec<_>>(), want_after);
        let mut want_before = vec![(0, 0)];
        want_before.extend(branch_ops);
        want_before.push((0, 1));
        assert_eq!(before.iter().map(|e| (e.subgraph, e.index)).collect::<Vec<_>>(), want_before);
        for e in after.iter().filter(|e| e.subgraph != 0) {
            assert_eq!(e.calls, [frame]);
            assert_eq!(e.inputs[0], Some(if e.index == 0 { x.to_vec() } else { x.iter().map(|v| v * v).collect() }));
        }
        let z: Vec<f32> = if take { x.iter().map(|v| v * v + 1.0).collect() } else { x.iter().map(|v| -v).collect() };
        let branch_out = &after[after.len() - 3].outputs[0];
        assert_eq!(branch_out, &(TensorState::Ready, Some(z.clone())));
        assert_eq!(after[after.len() - 2].outputs[0].1, Some(z.clone()), "the IF's output is its branch's");
        assert_eq!(f32s(s.output(0).unwrap().bytes), z.iter().map(|v| v.abs()).collect::<Vec<_>>());
    }
}

fn trace_of(s: &mut Session) -> Value {
    let mut buf = Vec::new();
    s.write_trace_to(&mut buf).unwrap();
    serde_json::from_slice(&buf).unwrap()
}

#[test]
fn trace_has_one_slice_per_executed_body_op_inside_its_while_slice() {
    let mut s = session(while_model(), true);
    set_while_inputs(&mut s);
    let runs = 2;
    for _ in 0..runs {
        s.run().unwrap();
    }
    // A run with callbacks is traced the same way.
    let (_, after, _) = observe(&mut s, |_| false);
    assert_eq!(after.len(), while_order().len());
    let trace = trace_of(&mut s);
    let events = trace["traceEvents"].as_array().unwrap();
    let span = |e: &Value| {
        let ts = e["ts"].as_f64().unwrap();
        (ts, ts + e["dur"].as_f64().unwrap())
    };
    for run in 0..=runs as u64 {
        let ops: Vec<&Value> = events.iter().filter(|e| e["cat"] == "op" && e["args"]["run"] == run).collect();
        let got: Vec<(usize, usize, Option<usize>)> = ops
            .iter()
            .map(|e| {
                let a = &e["args"];
                (a["subgraph"].as_u64().unwrap() as usize, a["op_index"].as_u64().unwrap() as usize, a["iteration"].as_u64().map(|i| i as usize))
            })
            .collect();
        // Slices are recorded when an op ends: the WHILE after its body's ops.
        assert_eq!(got, while_order(), "run {run}");
        let while_slice = ops.iter().find(|e| e["args"]["subgraph"] == 0 && e["args"]["op_index"] == 1).unwrap();
        assert_eq!(while_slice["name"], "WHILE");
        let (w0, w1) = span(while_slice);
        for e in ops.iter().filter(|e| e["args"]["subgraph"] != 0) {
            let (a, b) = span(e);
            assert!(a >= w0 - 1e-3 && b <= w1 + 1e-3, "{e} inside the WHILE");
            assert_eq!(e["args"]["called_by"], serde_json::json!({"subgraph": 0, "op_index": 1}));
            assert_eq!(e["tid"], while_slice["tid"]);
            assert!(e["args"]["backend"].is_string() && e["args"]["outputs"].is_array(), "{e}");
        }
        let body_add = ops.iter().find(|e| e["args"]["subgraph"] == 2 && e["args"]["op_index"] == 2).unwrap();
        assert_eq!(body_add["name"], "ADD");
        assert_eq!(body_add["args"]["outputs"][0]["name"], "x_next");
    }
}
