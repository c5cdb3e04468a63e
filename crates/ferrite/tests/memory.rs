//! Memory behaviour, measured with a counting global allocator:
//! - `run()` performs no heap allocation after the first run, on the demo model and
//!   every corpus model (FERRITE_CORPUS);
//! - the five orders of resizing inputs (never / before prepare / after prepare /
//!   before every run, alternating / before and after prepare);
//! - zero-copy runs on caller buffers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ferrite::{Model, Session};

struct Counting;
static COUNT: AtomicUsize = AtomicUsize::new(0);

// Armed per thread, so allocations by the test harness's other threads are not
// counted against the code under test (test code only; the runtime has no
// thread-local state).
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn armed() -> bool {
    ARMED.try_with(Cell::get).unwrap_or(false)
}

fn arm(on: bool) {
    ARMED.with(|a| a.set(on));
}

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if armed() {
            COUNT.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if armed() {
            COUNT.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// The counter is global: tests touching it run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn allocs_per_run(path: &std::path::Path) -> usize {
    let model = Arc::new(Model::from_file(path).unwrap());
    let mut s = Session::with_options(model, Default::default()).unwrap();
    if path.file_name().is_some_and(|n| n == "melspectrogram.tflite") {
        s.resize_input(0, &[1, 16000]).unwrap();
    }
    s.prepare().unwrap();
    for (k, d) in s.inputs().iter().enumerate() {
        let n = d.shape.iter().product::<usize>() * d.dtype.size().unwrap();
        s.set_input(k, &vec![0x3e; n]).unwrap();
    }
    s.run().unwrap();
    let runs = 3;
    COUNT.store(0, Ordering::Relaxed);
    arm(true);
    for _ in 0..runs {
        s.run().unwrap();
    }
    arm(false);
    COUNT.load(Ordering::Relaxed) / runs
}

fn models() -> Vec<std::path::PathBuf> {
    let mut v = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite"))];
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

#[test]
fn steady_state_run_does_not_allocate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut checked = 0;
    for p in models() {
        // Models ferrite cannot prepare yet (IF) are covered elsewhere.
        let prepared = Session::from_file(&p).and_then(|mut s| s.prepare());
        if prepared.is_err() && p.file_name().is_some_and(|n| n == "hey_jarvis_v0.1.tflite") {
            continue;
        }
        let n = allocs_per_run(&p);
        println!("{:<45} heap allocations per run: {n}", p.file_name().unwrap().to_string_lossy());
        assert_eq!(n, 0, "{} allocates in run()", p.display());
        checked += 1;
    }
    println!("no-alloc: {checked} models checked");
}

/// Tracing and callbacks leave nothing behind on the plain path: a session that
/// traced, ran with callbacks, and stopped tracing runs without allocating, on two
/// threads (the pool's span recording is off again too).
#[test]
fn plain_runs_after_tracing_and_callbacks_do_not_allocate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite");
    let model = Arc::new(Model::from_file(path).unwrap());
    let mut s = Session::with_options(model, ferrite::SessionOptions { threads: 2, trace: true, ..Default::default() }).unwrap();
    s.prepare().unwrap();
    s.set_input(0, &[0x3e; 32 * 32 * 3 * 4]).unwrap();
    s.run().unwrap();
    let mut ops = 0;
    s.run_with_callbacks(
        |_| {
            ops += 1;
            ferrite::Flow::Continue
        },
        |_| ferrite::Flow::Continue,
    )
    .unwrap();
    assert_eq!(ops, 5);
    s.set_tracing(false);
    s.run().unwrap();
    COUNT.store(0, Ordering::Relaxed);
    arm(true);
    for _ in 0..3 {
        s.run().unwrap();
    }
    arm(false);
    assert_eq!(COUNT.load(Ordering::Relaxed), 0);
    assert_eq!(s.traced_runs(), 2);
}

/// The planner's target on the fetched corpus: arena within 5% of the largest
/// total live at one step. (Models whose activations total a few hundred bytes are
/// dominated by 64-byte tensor alignment and are left out.)
#[test]
fn arenas_stay_within_five_percent_of_the_lower_bound() {
    let mut checked = 0;
    for p in models() {
        let Ok(mut s) = Session::from_file(&p) else { continue };
        if s.prepare().is_err() {
            continue;
        }
        let (arena, bound) = s.arena_stats().unwrap();
        if bound < 4096 {
            continue;
        }
        let ratio = arena as f64 / bound as f64;
        println!("{:<45} arena {arena} B, lower bound {bound} B, ratio {ratio:.3}", p.file_name().unwrap().to_string_lossy());
        assert!(ratio <= 1.05, "{}: arena {arena} B is {ratio:.3} x the lower bound {bound} B", p.display());
        checked += 1;
    }
    println!("plan quality: {checked} models checked");
}

use ferrite::{PlanStats, RunStats};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

/// y = relu(x * w + b) over a [batch, 3] input whose batch is dynamic.
fn dynamic_model() -> Vec<u8> {
    let mut m = ModelSpec::default();
    let mut xs = TensorSpec::activation("x", TensorType::FLOAT32, &[1, 3]);
    xs.shape_signature = Some(vec![-1, 3]);
    let x = m.add_tensor(xs);
    let w = m.add_tensor(TensorSpec::const_f32("w", &[3], &[1.0, -2.0, 0.5]));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[3], &[0.25, 0.25, 0.25]));
    let xw = m.add_tensor(TensorSpec::activation("xw", TensorType::FLOAT32, &[1, 3]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 3]));
    m.add_op(OpCode::Builtin(B::MUL), &[x, w], &[xw], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(B::ADD), &[xw, b], &[y], Options::Binary { activation: Activation::RELU });
    m.inputs = vec![x];
    m.outputs = vec![y];
    m.to_bytes().unwrap()
}

fn expected(x: &[f32]) -> Vec<f32> {
    let w = [1.0, -2.0, 0.5];
    x.iter().enumerate().map(|(i, v)| (v * w[i % 3] + 0.25f32).max(0.0)).collect()
}

fn input(batch: usize) -> Vec<f32> {
    (0..batch * 3).map(|i| i as f32 * 0.37 - 1.0).collect()
}

fn session() -> Session {
    Session::from_bytes(Arc::new(dynamic_model())).unwrap()
}

fn run_batch(s: &mut Session, batch: usize) {
    let x = input(batch);
    s.set_input_f32(0, &x).unwrap();
    s.run().unwrap();
    let out = s.output(0).unwrap();
    assert_eq!(out.shape, &[batch, 3]);
    assert_eq!(out.to_f32().unwrap(), expected(&x));
}

/// Heap allocations made by `f`.
fn count(f: impl FnOnce()) -> usize {
    COUNT.store(0, Ordering::Relaxed);
    arm(true);
    f();
    arm(false);
    COUNT.load(Ordering::Relaxed)
}

#[test]
fn a_never_resized_plans_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = session();
    s.prepare().unwrap();
    run_batch(&mut s, 1);
    let x = input(1);
    let allocs = count(|| {
        for _ in 0..100 {
            s.set_input_f32(0, &x).unwrap();
            s.run().unwrap();
        }
    });
    assert_eq!(allocs, 0);
    assert_eq!(s.plan_stats(), PlanStats { compiles: 1, cache_hits: 0, arena_allocations: 1 });
}

#[test]
fn b_resized_before_prepare_plans_once_with_new_shapes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = session();
    s.resize_input(0, &[4, 3]).unwrap();
    s.prepare().unwrap();
    run_batch(&mut s, 4);
    assert_eq!(s.plan_stats().compiles, 1);
    assert_eq!(s.arena_stats().unwrap().0, s.arena_capacity_bytes());
}

#[test]
fn c_resized_after_prepare_replans_once_then_allocates_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = session();
    s.resize_input(0, &[2, 3]).unwrap();
    s.prepare().unwrap();
    run_batch(&mut s, 2);
    s.resize_input(0, &[50, 3]).unwrap();
    run_batch(&mut s, 50);
    assert_eq!(s.plan_stats().compiles, 2, "one re-plan for the new shape");
    let x = input(50);
    let allocs = count(|| {
        for _ in 0..100 {
            s.set_input_f32(0, &x).unwrap();
            s.run().unwrap();
        }
    });
    assert_eq!(allocs, 0, "runs with the same shapes reuse the plan");
    assert_eq!(s.plan_stats().compiles, 2);
    // The arena grew once, to the new plan's size; the old one was dropped first.
    assert_eq!(s.plan_stats().arena_allocations, 2);
    assert_eq!(s.arena_capacity_bytes(), s.arena_stats().unwrap().0.div_ceil(8) * 8);
}

#[test]
fn d_alternating_shapes_reuse_cached_plans_without_growth() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = session();
    s.prepare().unwrap();
    let (xa, xb) = (input(2), input(7));
    // Warm both shapes, then 1000 alternating runs must not allocate or compile.
    for x in [&xa, &xb] {
        s.resize_input(0, &[x.len() / 3, 3]).unwrap();
        s.set_input_f32(0, x).unwrap();
        s.run().unwrap();
    }
    let before = s.plan_stats();
    let allocs = count(|| {
        for i in 0..1000 {
            let x = if i % 2 == 0 { &xa } else { &xb };
            s.resize_input(0, &[x.len() / 3, 3]).unwrap();
            s.set_input_f32(0, x).unwrap();
            s.run().unwrap();
        }
    });
    let after = s.plan_stats();
    assert_eq!(allocs, 0, "alternating between cached plans allocates nothing");
    assert_eq!(after.compiles, before.compiles, "no recompiles");
    assert_eq!(after.arena_allocations, before.arena_allocations, "no arena growth");
    assert_eq!(after.cache_hits - before.cache_hits, 1000);
    run_batch(&mut s, 7);
}

#[test]
fn e_resized_before_and_after_prepare() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = session();
    s.resize_input(0, &[3, 3]).unwrap();
    s.prepare().unwrap();
    run_batch(&mut s, 3);
    s.resize_input(0, &[6, 3]).unwrap();
    run_batch(&mut s, 6);
    s.resize_input(0, &[3, 3]).unwrap();
    run_batch(&mut s, 3);
    assert_eq!(s.plan_stats().compiles, 2, "the first shape's plan came back from the cache");
    assert_eq!(s.plan_stats().cache_hits, 1);
}

#[test]
fn zero_copy_runs_on_caller_buffers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = session();
    s.resize_input(0, &[4, 3]).unwrap();
    s.prepare().unwrap();
    let x = input(4);
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut yb = vec![0u8; 4 * 3 * 4];
    let allocs = count(|| {
        let stats = s.run_with(&[&xb], &mut [&mut yb]).unwrap();
        assert_eq!(stats, RunStats { input_bytes_copied: 0, output_bytes_copied: 0 });
    });
    assert_eq!(allocs, 0);
    let y: Vec<f32> = yb.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(y, expected(&x));
    // The copying path reports its copies.
    s.set_input_f32(0, &x).unwrap();
    s.run().unwrap();
    assert_eq!(s.last_run_stats().input_bytes_copied, 48);
    // Wrong sizes are refused.
    assert!(s.run_with(&[&xb[..8]], &mut [&mut yb]).is_err());
}

#[test]
fn zero_copy_matches_copying_runs_on_the_corpus() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for p in models() {
        let Ok(mut s) = Session::from_file(&p) else { continue };
        if p.file_name().is_some_and(|n| n == "melspectrogram.tflite") {
            s.resize_input(0, &[1, 16000]).unwrap();
        }
        if s.prepare().is_err() {
            continue;
        }
        let ins: Vec<Vec<u8>> = s
            .inputs()
            .iter()
            .map(|d| match d.dtype.size() {
                Some(4) => (0..d.shape.iter().product::<usize>()).flat_map(|i| ((i % 97) as f32 / 97.0).to_le_bytes()).collect(),
                _ => (0..d.shape.iter().product::<usize>() * d.dtype.size().unwrap_or(1)).map(|i| (i * 37 % 251) as u8).collect(),
            })
            .collect();
        for (k, b) in ins.iter().enumerate() {
            s.set_input(k, b).unwrap();
        }
        // Streaming models keep state between runs: start both runs from the same state.
        s.reset_variables();
        s.run().unwrap();
        let want: Vec<Vec<u8>> = (0..s.outputs().len()).map(|k| s.output(k).unwrap().bytes.to_vec()).collect();
        let mut outs: Vec<Vec<u8>> = want.iter().map(|w| vec![0u8; w.len()]).collect();
        let in_refs: Vec<&[u8]> = ins.iter().map(|v| &v[..]).collect();
        let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(|v| &mut v[..]).collect();
        s.reset_variables();
        let stats = s.run_with(&in_refs, &mut out_refs).unwrap();
        assert_eq!(outs, want, "{}", p.display());
        println!(
            "{:<45} zero-copy run: {} input bytes and {} output bytes copied",
            p.file_name().unwrap().to_string_lossy(),
            stats.input_bytes_copied,
            stats.output_bytes_copied
        );
        assert_eq!(stats.input_bytes_copied, 0);
    }
}
