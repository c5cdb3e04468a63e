//! Structure-aware fuzzing: seeded hostile models (see support/structure_gen.rs)
//! go through load -> prepare -> set inputs -> run under a 64 MiB arena limit. Any
//! `Ok` or `Err` is acceptable; a panic, or a model taking seconds, fails the test
//! with its seed and a description of the model.
//!
//! CI (`CI=true`) runs a bounded count (well under a minute in release on two
//! cores); by hand, `FERRITE_FUZZ_MODELS=N` runs N models starting at seed
//! `FERRITE_FUZZ_SEED` (default 0), e.g.
//! `FERRITE_FUZZ_MODELS=1000000 cargo test --release -p ferrite --test structure_fuzz -- --nocapture`.
//! Every failure found is kept as a case in structure_fuzz_regressions.rs.

#[path = "support/structure_gen.rs"]
mod structure_gen;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use structure_gen::{exercise, generate, Outcome};

/// Models per run in CI and by default.
const DEFAULT_MODELS: u64 = 100_000;
/// A single tiny model taking this long is a hang for the fuzzer's purposes.
const SLOW: Duration = Duration::from_secs(3);

/// No single allocation may exceed this while a fuzzed model runs: the session limit
/// is 64 MiB, so anything near this size was sized by unchecked file data.
const ALLOCATION_CAP: usize = 256 << 20;

/// The seed being run, for the report of an allocation over the cap.
static CURRENT_SEED: AtomicU64 = AtomicU64::new(u64::MAX);

/// The system allocator, refusing (with the seed, then an abort) any allocation over
/// [`ALLOCATION_CAP`]. An absurd allocation would otherwise abort the test binary
/// without saying which model asked for it, or succeed lazily and go unnoticed.
struct Capped;

impl Capped {
    fn check(size: usize) {
        if size > ALLOCATION_CAP {
            // Formatting integers into stderr does not allocate.
            let _ = writeln!(
                std::io::stderr(),
                "structure_fuzz: seed {} asked for an allocation of {size} bytes (cap {ALLOCATION_CAP})",
                CURRENT_SEED.load(Ordering::Relaxed)
            );
            // The capture's own allocations are small and pass the check.
            let _ = writeln!(std::io::stderr(), "{}", std::backtrace::Backtrace::force_capture());
            std::process::abort();
        }
    }
}

// SAFETY: forwards to `System` unchanged; only the size check is added.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::check(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

#[test]
fn hostile_models_never_panic() {
    let count = std::env::var("FERRITE_FUZZ_MODELS").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_MODELS);
    let first: u64 = std::env::var("FERRITE_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let start = Instant::now();
    let (mut loaded, mut prepared, mut ran) = (0u64, 0u64, 0u64);
    let mut failures: Vec<String> = Vec::new();
    let mut reported = 0;
    // FERRITE_FUZZ_STATS=1: counts of error messages (digits blanked), to see what the generator reaches.
    let stats = std::env::var("FERRITE_FUZZ_STATS").is_ok();
    // FERRITE_FUZZ_TRACE=1: each seed before it runs, to find a model that hangs or aborts.
    let trace = std::env::var("FERRITE_FUZZ_TRACE").is_ok();
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for seed in first..first + count {
        CURRENT_SEED.store(seed, Ordering::Relaxed);
        if trace {
            eprintln!("seed {seed}");
        }
        let (bytes, desc) = generate(seed);
        let t = Instant::now();
        let r = exercise(bytes, seed);
        let took = t.elapsed();
        match r {
            Ok(o) => {
                if stats {
                    let key = o.error().unwrap_or("ok").chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).take(90).collect::<String>();
                    *seen.entry(key).or_default() += 1;
                }
                match o {
                    Outcome::Ok => (loaded, prepared, ran) = (loaded + 1, prepared + 1, ran + 1),
                    Outcome::Run(_) => (loaded, prepared) = (loaded + 1, prepared + 1),
                    Outcome::Prepare(_) => loaded += 1,
                    Outcome::Load(_) => {}
                }
                if took > SLOW {
                    failures.push(format!("seed {seed}: took {took:?}\n{desc}"));
                }
            }
            Err(panic) => failures.push(format!("seed {seed}: panicked: {panic}\n{desc}")),
        }
        if failures.len() > reported {
            // Reported as found too: a later abort must not lose it.
            eprintln!("{}", failures[reported]);
            reported += 1;
        }
        if failures.len() >= 20 {
            break;
        }
        if count >= 100_000 && (seed - first + 1).is_multiple_of(100_000) {
            eprintln!("structure_fuzz: {} models in {:?}, {} failures", seed - first + 1, start.elapsed(), failures.len());
        }
    }
    let mut seen: Vec<_> = seen.into_iter().collect();
    seen.sort_by_key(|e| std::cmp::Reverse(e.1));
    for (msg, n) in seen.iter().take(60) {
        println!("{n:8} {msg}");
    }
    println!(
        "structure_fuzz: seeds {first}..{} in {:?}: {loaded} loaded, {prepared} prepared, {ran} ran, {} failures",
        first + count,
        start.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} hostile models failed:\n{}", failures.len(), failures.join("\n"));
}

/// The generator is deterministic: a reported seed rebuilds the same model.
#[test]
fn generator_is_deterministic() {
    for seed in [0, 1, 12345, u64::MAX] {
        assert_eq!(generate(seed), generate(seed));
    }
}
