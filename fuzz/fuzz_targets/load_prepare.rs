//! Fuzz target: arbitrary bytes through model loading, prepare and one run.
//! Any `Err` is fine; a panic, abort, or sanitizer report is a bug.
#![no_main]

use std::sync::Arc;

use ferrite::{Model, Session, SessionOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = Model::from_bytes(Arc::new(data.to_vec())) else { return };
    // A small arena limit keeps each input fast and memory-bounded.
    let opts = SessionOptions { max_arena_bytes: 16 << 20, ..Default::default() };
    let Ok(mut s) = Session::with_options(Arc::new(model), opts) else { return };
    if s.prepare().is_err() {
        return;
    }
    for (k, d) in s.inputs().iter().enumerate() {
        let n = d.shape.iter().product::<usize>() * d.dtype.size().unwrap_or(1);
        let _ = s.set_input(k, &vec![1u8; n]);
    }
    let _ = s.run();
});
