//! `run()` performs no heap allocation after the first run, on the demo model and
//! every corpus model (FERRITE_CORPUS), measured with a counting global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ferrite::{Model, Session};

struct Counting;
static COUNT: AtomicUsize = AtomicUsize::new(0);
static ARMED: AtomicBool = AtomicBool::new(false);

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
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
        if ARMED.load(Ordering::Relaxed) {
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
    ARMED.store(true, Ordering::Relaxed);
    for _ in 0..runs {
        s.run().unwrap();
    }
    ARMED.store(false, Ordering::Relaxed);
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
    let _g = SERIAL.lock().unwrap();
    let mut checked = 0;
    for p in models() {
        // Models ferrite cannot prepare yet (custom ops LiteRT also lacks, IF) are covered elsewhere.
        let prepared = Session::from_file(&p).and_then(|mut s| s.prepare());
        if prepared.is_err() && p.file_name().is_some_and(|n| n == "face_landmark_with_attention.tflite" || n == "hey_jarvis_v0.1.tflite") {
            continue;
        }
        let n = allocs_per_run(&p);
        println!("{:<45} heap allocations per run: {n}", p.file_name().unwrap().to_string_lossy());
        assert_eq!(n, 0, "{} allocates in run()", p.display());
        checked += 1;
    }
    println!("no-alloc: {checked} models checked");
}
