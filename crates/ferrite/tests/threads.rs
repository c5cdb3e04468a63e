//! Threads: outputs are bit-identical for 1 and N threads on every corpus model;
//! sessions run concurrently on many threads, move between threads, and survive
//! the thread that created them.

use std::path::PathBuf;
use std::sync::Arc;

use ferrite::{Model, Session, SessionOptions};

#[path = "support/live_heap.rs"]
mod live_heap;
use live_heap::{live, SERIAL};

// Memory measurements need the process to themselves: tests here run one at a time.

fn corpus() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite"))];
    if let Ok(dir) = std::env::var("FERRITE_CORPUS") {
        let mut stack = vec![PathBuf::from(dir)];
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

fn outputs(model: &Arc<Model>, threads: usize, melspec: bool) -> Option<Vec<Vec<u8>>> {
    let mut s = Session::with_options(model.clone(), SessionOptions { threads, ..Default::default() }).ok()?;
    if melspec {
        s.resize_input(0, &[1, 16000]).ok()?;
    }
    s.prepare().ok()?;
    for (k, d) in s.inputs().iter().enumerate() {
        let n: usize = d.shape.iter().product();
        let bytes: Vec<u8> = (0..n).flat_map(|i| (((i * 7919) % 1000) as f32 / 500.0 - 1.0).to_le_bytes()).collect();
        s.set_input(k, &bytes).ok()?;
    }
    s.run().ok()?;
    Some((0..s.outputs().len()).map(|k| s.output(k).unwrap().bytes.to_vec()).collect())
}

#[test]
fn one_and_many_threads_give_identical_bits() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut checked = 0;
    for p in corpus() {
        let model = Arc::new(Model::from_file(&p).unwrap());
        let mel = p.file_name().is_some_and(|n| n == "melspectrogram.tflite");
        let Some(one) = outputs(&model, 1, mel) else { continue };
        for threads in [2, 3] {
            assert_eq!(outputs(&model, threads, mel).unwrap(), one, "{} with {threads} threads", p.display());
        }
        checked += 1;
    }
    println!("threads: {checked} models bit-identical for 1, 2 and 3 threads");
}

fn demo() -> Arc<Model> {
    Arc::new(Model::from_file(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/demo.tflite")).unwrap())
}

fn run_demo(s: &mut Session, seed: f32) -> Vec<f32> {
    let x: Vec<f32> = (0..32 * 32 * 3).map(|i| (i as f32 * 0.01 + seed).sin()).collect();
    s.set_input_f32(0, &x).unwrap();
    s.run().unwrap();
    s.output(0).unwrap().to_f32().unwrap()
}

#[test]
fn sessions_on_eight_threads_at_once_agree_with_one() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let model = demo();
    let mut reference = Session::with_options(model.clone(), SessionOptions::default()).unwrap();
    reference.prepare().unwrap();
    let want: Vec<Vec<f32>> = (0..8).map(|t| run_demo(&mut reference, t as f32)).collect();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let model = model.clone();
            std::thread::spawn(move || {
                let mut s = Session::with_options(model, SessionOptions { threads: 2, ..Default::default() }).unwrap();
                s.prepare().unwrap();
                (0..50).map(|_| run_demo(&mut s, t as f32)).last().unwrap()
            })
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), want[t]);
    }
}

#[test]
fn a_session_outlives_its_creating_thread_and_moves_between_threads() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let model = demo();
    // Created and prepared (pool spawned) on a thread that then exits.
    let mut s = std::thread::spawn({
        let model = model.clone();
        move || {
            let mut s = Session::with_options(model, SessionOptions { threads: 2, ..Default::default() }).unwrap();
            s.prepare().unwrap();
            s
        }
    })
    .join()
    .unwrap();
    let first = run_demo(&mut s, 0.5);
    for _ in 0..3 {
        let want = first.clone();
        s = std::thread::spawn(move || {
            let mut s = s;
            assert_eq!(run_demo(&mut s, 0.5), want);
            s
        })
        .join()
        .unwrap();
    }
}

fn rss_kb() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

#[test]
fn a_thousand_create_run_drop_cycles_do_not_grow_memory() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let model = demo();
    let cycle = |i: usize| {
        let mut s = Session::with_options(model.clone(), SessionOptions { threads: 1 + i % 2, ..Default::default() }).unwrap();
        s.prepare().unwrap();
        run_demo(&mut s, i as f32);
    };
    for i in 0..100 {
        cycle(i);
    }
    let (live_before, rss_before) = (live(), rss_kb());
    for i in 0..1000 {
        cycle(i);
    }
    let (live_after, rss_after) = (live(), rss_kb());
    println!("1000 create/run/drop cycles (half with a 2-thread pool): live heap {live_before} -> {live_after} bytes, RSS {rss_before} -> {rss_after} kB");
    assert_eq!(live_after, live_before, "heap bytes leaked");
    // Under qemu-user (the aarch64 check) RSS includes the emulator's per-thread memory.
    if std::env::var_os("FERRITE_EMULATED").is_none() {
        assert!(rss_after <= rss_before + 1024, "RSS grew from {rss_before} kB to {rss_after} kB");
    }
}
