//! Sessions that borrow their intermediates' memory from a shared pool
//! (`SessionOptions::shared_arena`) only while they run.
//!
//! - Outputs are bit-identical to sessions with arenas of their own, on every corpus
//!   model (recurrent ones too, whose state must stay each session's), run one after
//!   another and on four threads at once.
//! - What the session gives up is an error, never stale data: an intermediate tensor
//!   after a run. With preserve-all, every tensor stays readable; callbacks see
//!   intermediates during the run.
//! - Re-planning after a resize keeps working; any drop order works; the pool holds no
//!   more buffers than runs at once, and 1,000 create/run/drop cycles leak nothing.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use ferrite::{DType, Error, Flow, Model, Session, SessionOptions, SharedArena};
use ferrite_format::writer::{Activation, BuiltinOperator as W, ModelSpec, OpCode, Options, Padding, TensorSpec, TensorType};

#[path = "support/live_heap.rs"]
mod live_heap;
use live_heap::{live, SERIAL};

/// The demo model, the corpus (`FERRITE_CORPUS`) and the recurrent models (`FERRITE_RNN_MODELS`).
fn corpus() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite"))];
    for var in ["FERRITE_CORPUS", "FERRITE_RNN_MODELS"] {
        let Ok(dir) = std::env::var(var) else { continue };
        let mut stack = vec![PathBuf::from(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
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

fn demo() -> Arc<Model> {
    Arc::new(Model::from_file(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite")).unwrap())
}

fn options(pool: Option<&SharedArena>) -> SessionOptions {
    SessionOptions { shared_arena: pool.cloned(), ..Default::default() }
}

/// A prepared session of `model`, the melspectrogram model at one second of audio.
fn prepared(model: &Arc<Model>, pool: Option<&SharedArena>, path: &std::path::Path) -> Option<Session> {
    let mut s = Session::with_options(model.clone(), options(pool)).ok()?;
    if path.file_name().is_some_and(|n| n == "melspectrogram.tflite") {
        s.resize_input(0, &[1, 16000]).ok()?;
    }
    s.prepare().ok()?;
    Some(s)
}

/// Sets every input from `seed` (float inputs in [-1, 1), integer ones small values).
fn fill(s: &mut Session, seed: usize) {
    for (k, d) in s.inputs().iter().enumerate() {
        let n: usize = d.shape.iter().product();
        let bytes: Vec<u8> = if d.dtype == DType::F32 {
            (0..n).flat_map(|i| (((i * 7919 + seed * 131) % 1000) as f32 / 500.0 - 1.0).to_le_bytes()).collect()
        } else {
            (0..n * d.dtype.size().unwrap_or(1)).map(|i| ((i * 7919 + seed * 31) % 17) as u8).collect()
        };
        s.set_input(k, &bytes).unwrap();
    }
}

/// Runs on inputs from `seed` and returns every output's bytes.
fn run(s: &mut Session, seed: usize) -> Vec<Vec<u8>> {
    fill(s, seed);
    s.run().unwrap();
    (0..s.outputs().len()).map(|k| s.output(k).unwrap().bytes.to_vec()).collect()
}

#[test]
fn shared_and_own_arenas_give_identical_bits_on_the_corpus() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut checked, mut own_total, mut shared_total) = (0, 0, 0);
    for p in corpus() {
        let model = Arc::new(Model::from_file(&p).unwrap());
        let pool = model.shared_arena();
        // Two sessions with arenas of their own, two sharing the pool; each pair runs
        // the same inputs in the same order (recurrent models carry state from run to run).
        let Some(mut own_a) = prepared(&model, None, &p) else { continue };
        let mut own_b = prepared(&model, None, &p).unwrap();
        let mut a = prepared(&model, Some(&pool), &p).unwrap();
        let mut b = prepared(&model, Some(&pool), &p).unwrap();
        for seed in 0..3 {
            let want_a = run(&mut own_a, seed);
            let want_b = run(&mut own_b, seed + 10);
            assert_eq!(run(&mut a, seed), want_a, "{}: run {seed} of the first shared session", p.display());
            assert_eq!(run(&mut b, seed + 10), want_b, "{}: run {seed} of the second shared session", p.display());
        }
        assert!(pool.buffers() <= 1, "{}: runs one after another borrow one buffer ({})", p.display(), pool.buffers());
        own_total += own_a.arena_capacity_bytes() + own_b.arena_capacity_bytes();
        shared_total += a.arena_capacity_bytes() + b.arena_capacity_bytes() + pool.bytes();
        // Then at the same time, on two threads: each run may get either buffer, so
        // nothing may depend on where a session's scratch was last time.
        for seed in 3..6 {
            let want_a = run(&mut own_a, seed);
            let want_b = run(&mut own_b, seed + 10);
            let (got_a, got_b) = std::thread::scope(|sc| {
                let other = sc.spawn(|| run(&mut a, seed));
                let got_b = run(&mut b, seed + 10);
                (other.join().unwrap(), got_b)
            });
            assert_eq!(got_a, want_a, "{}: concurrent run {seed} of the first shared session", p.display());
            assert_eq!(got_b, want_b, "{}: concurrent run {seed} of the second shared session", p.display());
        }
        assert!(pool.buffers() <= 2);
        checked += 1;
    }
    assert!(checked > 0);
    println!("shared arena: {checked} models bit-identical; two sessions each hold {own_total} B with own arenas, {shared_total} B sharing one");
    assert!(shared_total < own_total, "two sessions sharing an arena hold {shared_total} B, with their own {own_total} B");
}

#[test]
fn concurrent_runs_on_four_threads_match_own_arenas() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut models = vec![PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite"))];
    // A large float model and a recurrent one where the corpus has them.
    models.extend(corpus().into_iter().filter(|p| p.file_name().is_some_and(|n| n == "hand_landmark_lite.tflite" || n == "kws_fused_lstm_float.tflite")));
    for p in models {
        let model = Arc::new(Model::from_file(&p).unwrap());
        let pool = model.shared_arena();
        // Thread t runs seeds t, t+4, t+8, ...: its expected outputs from a session of its own.
        let want: Vec<Vec<Vec<Vec<u8>>>> = (0..4)
            .map(|t| {
                let mut s = prepared(&model, None, &p).unwrap();
                (0..12).map(|i| run(&mut s, t + 4 * i)).collect()
            })
            .collect();
        let start = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (model, pool, start, p) = (model.clone(), pool.clone(), start.clone(), p.clone());
                std::thread::spawn(move || {
                    let mut s = prepared(&model, Some(&pool), &p).unwrap();
                    start.wait();
                    let outs = (0..12).map(|i| run(&mut s, t + 4 * i)).collect::<Vec<_>>();
                    // Every session still a member and none running: the pool holds
                    // the buffers it made.
                    start.wait();
                    let buffers = pool.buffers();
                    start.wait();
                    (outs, buffers)
                })
            })
            .collect();
        let mut n = 0;
        for (t, h) in handles.into_iter().enumerate() {
            let (outs, buffers) = h.join().unwrap();
            assert_eq!(outs, want[t], "{}: thread {t}", p.display());
            n = buffers;
        }
        assert!((1..=4).contains(&n), "{}: the pool holds {n} buffers after runs on four threads", p.display());
        assert_eq!(pool.sessions(), 0, "the threads' sessions left the pool");
        println!("{}: four threads, {n} scratch buffer(s) made", p.display());
    }
}

/// Every op output a run's callbacks see with data: (tensor, bytes), in order.
fn seen_by_callbacks(s: &mut Session) -> Vec<(usize, Vec<u8>)> {
    let mut seen = Vec::new();
    s.run_with_callbacks(
        |_| Flow::Continue,
        |ev| {
            seen.extend(ev.outputs.iter().filter_map(|o| Some((o.tensor, o.data?.to_vec()))));
            Flow::Continue
        },
    )
    .unwrap();
    seen
}

#[test]
fn an_intermediate_after_a_run_is_an_error_not_stale_data() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let model = demo();
    let pool = model.shared_arena();
    let path = PathBuf::from("demo.tflite");
    let mut s = prepared(&model, Some(&pool), &path).unwrap();
    let mut own = prepared(&model, None, &path).unwrap();
    fill(&mut s, 1);
    fill(&mut own, 1);
    // Callbacks see every intermediate while the run holds its memory.
    let seen = seen_by_callbacks(&mut s);
    assert_eq!(seen, seen_by_callbacks(&mut own));
    let outputs: Vec<usize> = s.outputs().iter().map(|d| d.tensor).collect();
    // Intermediates with memory of their own in a session that keeps its arena.
    let inner: Vec<usize> = seen.iter().map(|e| e.0).filter(|t| !outputs.contains(t) && own.tensor_data(*t).is_ok()).collect();
    assert!(inner.len() > 3, "the demo model has intermediates: {inner:?}");
    for &t in &inner {
        let e = s.tensor_data(t).unwrap_err();
        assert!(matches!(e, Error::InvalidState(_)) && e.to_string().contains("shared arena"), "tensor {t}: {e}");
        assert!(s.tensor_data_mut(t).is_err());
    }
    // Inputs and outputs stay the session's.
    let input = s.inputs()[0].tensor;
    assert_eq!(s.tensor_data(input).unwrap().bytes, own.tensor_data(input).unwrap().bytes);
    assert!(s.tensor_data_mut(input).is_ok());
    assert_eq!(s.output(0).unwrap().bytes, own.output(0).unwrap().bytes);
    // With every tensor preserved, every tensor is the session's and readable.
    let mut keep = Session::with_options(model.clone(), options(Some(&pool))).unwrap();
    keep.set_preserve_all_tensors(true).unwrap();
    keep.prepare().unwrap();
    let mut keep_own = Session::with_options(model.clone(), options(None)).unwrap();
    keep_own.set_preserve_all_tensors(true).unwrap();
    keep_own.prepare().unwrap();
    run(&mut keep, 2);
    run(&mut keep_own, 2);
    for &t in &inner {
        assert_eq!(keep.tensor_data(t).unwrap().bytes, keep_own.tensor_data(t).unwrap().bytes, "tensor {t}");
    }
}

/// x [1,8,8,4] -> CONV 3x3 SAME RELU [8] -> CONV 3x3 SAME [4] -> y: any height,
/// width and batch.
fn conv_model() -> Arc<Model> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 8, 8, 4]));
    let w1 = m.add_tensor(TensorSpec::const_f32("w1", &[8, 3, 3, 4], &(0..8 * 9 * 4).map(|i| ((i * 37) % 19) as f32 / 19.0 - 0.5).collect::<Vec<_>>()));
    let b1 = m.add_tensor(TensorSpec::const_f32("b1", &[8], &[0.1; 8]));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &[1, 8, 8, 8]));
    let w2 = m.add_tensor(TensorSpec::const_f32("w2", &[4, 3, 3, 8], &(0..4 * 9 * 8).map(|i| ((i * 13) % 23) as f32 / 23.0 - 0.5).collect::<Vec<_>>()));
    let b2 = m.add_tensor(TensorSpec::const_f32("b2", &[4], &[-0.1; 4]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 8, 8, 4]));
    let conv = |activation| Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation };
    m.add_op(OpCode::Builtin(W::CONV_2D), &[x, w1, b1], &[h], conv(Activation::RELU));
    m.add_op(OpCode::Builtin(W::CONV_2D), &[h, w2, b2], &[y], conv(Activation::NONE));
    m.inputs = vec![x];
    m.outputs = vec![y];
    Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap())
}

#[test]
fn resizing_re_plans_with_a_shared_arena() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let model = conv_model();
    let pool = model.shared_arena();
    let mut s = Session::with_options(model.clone(), options(Some(&pool))).unwrap();
    let mut own = Session::with_options(model.clone(), options(None)).unwrap();
    s.prepare().unwrap();
    own.prepare().unwrap();
    let small = pool.bytes();
    for (i, shape) in [[1, 8, 8, 4], [2, 16, 12, 4], [1, 8, 8, 4], [3, 5, 7, 4], [2, 16, 12, 4]].iter().enumerate() {
        s.resize_input(0, shape).unwrap();
        own.resize_input(0, shape).unwrap();
        assert_eq!(run(&mut s, i), run(&mut own, i), "input shape {shape:?}");
        assert_eq!(s.outputs()[0].shape, own.outputs()[0].shape);
    }
    assert!(pool.bytes() > small, "the pool's buffer grew for the larger shapes");
    assert_eq!(pool.buffers(), 1);
    assert!(s.plan_stats().cache_hits >= 2, "shapes seen before reuse their plans: {:?}", s.plan_stats());
}

#[test]
fn any_drop_order_and_a_thousand_cycles_leave_nothing_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = PathBuf::from("demo.tflite");
    for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2]] {
        let model = demo();
        let pool = model.shared_arena();
        let mut sessions: Vec<Option<Session>> = (0..3).map(|_| prepared(&model, Some(&pool), &path)).collect();
        let want = run(sessions[0].as_mut().unwrap(), 5);
        // The model's last handle goes first: the sessions hold what they need.
        drop(model);
        for (k, &i) in order.iter().enumerate() {
            sessions[i] = None;
            for s in sessions.iter_mut().flatten() {
                assert_eq!(run(s, 5), want, "after dropping {:?}", &order[..=k]);
            }
            assert_eq!(pool.sessions(), 2 - k);
            assert!(pool.buffers() <= pool.sessions());
        }
        assert_eq!((pool.buffers(), pool.bytes()), (0, 0), "the last session took the pool's buffers with it");
    }
    // Sessions created and dropped while another runs on a second thread.
    let model = demo();
    let pool = model.shared_arena();
    let runner = {
        let (model, pool) = (model.clone(), pool.clone());
        std::thread::spawn(move || {
            let mut s = prepared(&model, Some(&pool), std::path::Path::new("demo.tflite")).unwrap();
            let want = run(&mut s, 3);
            for _ in 0..200 {
                assert_eq!(run(&mut s, 3), want);
            }
        })
    };
    for i in 0..50 {
        let mut s = prepared(&model, Some(&pool), &path).unwrap();
        run(&mut s, i);
    }
    runner.join().unwrap();
    assert_eq!((pool.sessions(), pool.buffers()), (0, 0));
    // 1,000 cycles, with a long-lived session keeping the pool and without one.
    let keeper = prepared(&model, Some(&pool), &path);
    for keep in [true, false] {
        let pool = if keep { pool.clone() } else { SharedArena::new() };
        let cycle = |i: usize| {
            let mut s = prepared(&model, Some(&pool), &path).unwrap();
            run(&mut s, i);
        };
        for i in 0..100 {
            cycle(i);
        }
        let before = live();
        for i in 0..1000 {
            cycle(i);
        }
        let after = live();
        println!("1000 create/run/drop cycles sharing an arena (a long-lived member: {keep}): live heap {before} -> {after} bytes");
        assert_eq!(after, before, "heap bytes leaked");
        assert!(pool.buffers() <= 1);
    }
    drop(keeper);
}

#[test]
fn sessions_of_different_models_share_one_group() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let group = SharedArena::new();
    let (m1, m2) = (demo(), conv_model());
    let path = PathBuf::from("demo.tflite");
    let mut a = prepared(&m1, Some(&group), &path).unwrap();
    let mut b = prepared(&m2, Some(&group), &path).unwrap();
    let mut own_a = prepared(&m1, None, &path).unwrap();
    let mut own_b = prepared(&m2, None, &path).unwrap();
    for seed in 0..3 {
        assert_eq!(run(&mut a, seed), run(&mut own_a, seed));
        assert_eq!(run(&mut b, seed), run(&mut own_b, seed));
    }
    assert_eq!(group.buffers(), 1, "two models run one after another use one scratch buffer");
    assert!(a.shared_arena().is_some_and(|p| p.same_pool(&group)));
    assert!(!m1.shared_arena().same_pool(&group), "a model's own pool is another");
}
