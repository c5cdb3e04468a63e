//! Structure-aware fuzzing: seeded hostile models (see support/structure_gen.rs)
//! go through load -> prepare -> set inputs -> run under a 64 MiB arena limit. Any
//! `Ok` or `Err` is acceptable; a panic, or a model taking seconds, fails the test
//! with its seed and a description of the model.
//!
//! Aborts and hangs: the support module's global allocator refuses (reporting the
//! seed, then aborting) any single allocation over 256 MiB, four times the session
//! limit, so an allocation sized by unchecked file data cannot pass unnoticed; a
//! model taking over 3 s counts as a hang (`FERRITE_FUZZ_TRACE=1` prints each seed
//! before it runs, to find one that never returns). Generated WHILE loops stop after
//! three iterations (see the support module), far below MAX_WHILE_ITERATIONS.
//!
//! CI (`CI=true`) and a plain `cargo test` run the same bounded count, 100,000
//! models (about 15 s in release on this two-core machine); by hand,
//! `FERRITE_FUZZ_MODELS=N` runs N models starting at seed `FERRITE_FUZZ_SEED`
//! (default 0), e.g.
//! `FERRITE_FUZZ_MODELS=1000000 cargo test --release -p ferrite --test structure_fuzz -- --nocapture`;
//! `FERRITE_FUZZ_STATS=1` counts the errors the models end in, `FERRITE_FUZZ_BACKTRACE=1`
//! adds a backtrace to each panic reported.
//! Every failure found is kept as a case in structure_fuzz_regressions.rs.

#[path = "support/structure_gen.rs"]
mod structure_gen;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use structure_gen::{exercise, generate, Outcome, CURRENT_SEED};

/// Models per run in CI and by default.
const DEFAULT_MODELS: u64 = 100_000;
/// Under instruction emulation (`FERRITE_EMULATED`, set by scripts/aarch64.sh, where
/// qemu runs each model tens of times slower), the run is a smoke check of the
/// other architecture's kernels on hostile input: fewer models, a longer hang limit.
const EMULATED_MODELS: u64 = 1_000;
/// A single tiny model taking this long is a hang for the fuzzer's purposes.
const SLOW: Duration = Duration::from_secs(3);
const SLOW_EMULATED: Duration = Duration::from_secs(60);

#[test]
fn hostile_models_never_panic() {
    let emulated = std::env::var("FERRITE_EMULATED").is_ok();
    let default_models = if emulated { EMULATED_MODELS } else { DEFAULT_MODELS };
    let slow = if emulated { SLOW_EMULATED } else { SLOW };
    let count = std::env::var("FERRITE_FUZZ_MODELS").ok().and_then(|v| v.parse().ok()).unwrap_or(default_models);
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
    // The slowest model, printed at the end: the 3 s limit is a hang detector, and a
    // model near it on a quiet machine crosses it under load (seed 16110 did).
    let mut slowest = (Duration::ZERO, first);
    for seed in first..first + count {
        CURRENT_SEED.store(seed, Ordering::Relaxed);
        if trace {
            eprintln!("seed {seed}");
        }
        let (bytes, desc) = generate(seed);
        let t = Instant::now();
        let r = exercise(bytes, seed);
        let took = t.elapsed();
        slowest = slowest.max((took, seed));
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
                if took > slow {
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
        "structure_fuzz: seeds {first}..{} in {:?}: {loaded} loaded, {prepared} prepared, {ran} ran, {} failures; slowest seed {} ({:?})",
        first + count,
        start.elapsed(),
        failures.len(),
        slowest.1,
        slowest.0
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
