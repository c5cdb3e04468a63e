//! Measures what sessions of one model cost in process memory (Linux).
//!
//! ```sh
//! cargo run --release -p ferrite --example footprint -- MODEL [--sessions N] [--shape 1,16000] [--shared-arena]
//! ```
//!
//! With `--smaps` it also prints to stderr where the resident memory grew, per
//! mapping (`/proc/self/smaps`: the binary's code, the heap, anonymous mappings,
//! the model file), the RSS after the runs against the RSS before loading.
//!
//! With `--shared-arena` the sessions borrow their intermediates' memory from the
//! model's pool (`SessionOptions::shared_arena`) only while they run.
//!
//! Resets the process's peak RSS (`/proc/self/clear_refs`), loads MODEL once
//! (memory-mapped), creates N sessions of it, prepares each and runs each twice, then
//! prints one JSON line: the peak RSS growth over the RSS before loading, the model's
//! constant bytes (its weights as stored) and the sessions' arenas. Run one
//! measurement per process: the peak is the process's.

use std::sync::Arc;

use ferrite::{Model, Session, SessionOptions};

/// A `/proc/self/status` field in kB.
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Resident kB per mapping of `/proc/self/smaps`, keyed by the mapping's name (or
/// its permissions and size for anonymous ones).
fn smaps() -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut name = String::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first().is_some_and(|a| a.contains('-') && a.chars().all(|c| c.is_ascii_hexdigit() || c == '-')) {
            let (lo, hi) = f[0].split_once('-').unwrap_or(("0", "0"));
            let kb = (u64::from_str_radix(hi, 16).unwrap_or(0) - u64::from_str_radix(lo, 16).unwrap_or(0)) / 1024;
            name = match f.get(5) {
                Some(n) => format!("{n} {}", f[1]),
                None => format!("[anon {} {kb} kB]", f[1]),
            };
        } else if f.first() == Some(&"Rss:") {
            *out.entry(name.clone()).or_insert(0) += f.get(1).and_then(|v| v.parse().ok()).unwrap_or(0);
        }
    }
    out
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut model_path = None;
    let (mut sessions, mut shapes, mut shared_arena, mut by_mapping) = (1usize, Vec::new(), false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--sessions" => sessions = it.next().and_then(|v| v.parse().ok()).ok_or("--sessions N")?,
            "--shared-arena" => shared_arena = true,
            "--smaps" => by_mapping = true,
            "--shape" => {
                let s = it.next().ok_or("--shape D,D,...")?;
                shapes.push(s.split(',').map(|d| d.trim().parse::<usize>().map_err(|e| format!("--shape {s}: {e}"))).collect::<Result<Vec<_>, _>>()?);
            }
            p if model_path.is_none() => model_path = Some(p.to_string()),
            other => return Err(format!("unexpected argument {other}")),
        }
    }
    let path = model_path.ok_or("usage: footprint MODEL [--sessions N] [--shape D,D,...]")?;
    // The high-water mark restarts from the current RSS (Linux 4.0 and later).
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = status_kb("VmRSS:");
    let maps_before = if by_mapping { smaps() } else { Default::default() };
    let model = Arc::new(Model::from_file(&path).map_err(|e| e.to_string())?);
    let mut all = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let options = SessionOptions { shared_arena: shared_arena.then(|| model.shared_arena()), ..SessionOptions::default() };
        let mut s = Session::with_options(model.clone(), options).map_err(|e| e.to_string())?;
        for (k, shape) in shapes.iter().enumerate() {
            s.resize_input(k, shape).map_err(|e| e.to_string())?;
        }
        s.prepare().map_err(|e| e.to_string())?;
        for (k, d) in s.inputs().iter().enumerate() {
            let n = d.shape.iter().product::<usize>() * d.dtype.size().unwrap_or(1);
            s.set_input(k, &(0..n).map(|i| (i % 7) as u8).collect::<Vec<_>>()).map_err(|e| e.to_string())?;
        }
        for _ in 0..2 {
            s.run().map_err(|e| e.to_string())?;
        }
        all.push(s);
    }
    let peak = status_kb("VmHWM:");
    if by_mapping {
        for (name, kb) in smaps() {
            let was = maps_before.get(&name).copied().unwrap_or(0);
            if kb != was {
                eprintln!("{:>8} kB {name}", kb as i64 - was as i64);
            }
        }
    }
    // Constant bytes as stored, each buffer once (tensors may share one).
    let mut ranges: Vec<_> = model.subgraphs().iter().flat_map(|g| g.tensors.iter().filter_map(|t| t.data.clone())).collect();
    ranges.sort_by_key(|r| (r.start, r.end));
    ranges.dedup();
    let weights: usize = ranges.iter().map(|r| r.len()).sum();
    // The constants as the kernels take them: sparse ones densified, float16 ones
    // at float32 size (the float kernels get them converted once, at prepare). The
    // least a session must hold for its weights.
    let mut dense: Vec<_> = model
        .subgraphs()
        .iter()
        .flat_map(|g| g.tensors.iter())
        .filter_map(|t| {
            let r = t.data.clone()?;
            let size = if t.dtype == ferrite::DType::F16 { 4 } else { t.dtype.size().unwrap_or(1) };
            Some((r.start, r.end, (t.numel() * size).max(r.len())))
        })
        .collect();
    dense.sort_unstable();
    dense.dedup_by_key(|d| (d.0, d.1));
    let weights_f32: usize = dense.iter().map(|d| d.2).sum();
    // The sessions' own arenas, and the scratch buffers of their pool.
    let own: usize = all.iter().map(Session::arena_capacity_bytes).sum();
    let scratch = all.first().and_then(Session::shared_arena).map_or(0, |p| p.bytes());
    let arena = own + scratch;
    println!(
        "{{\"model\": {path:?}, \"sessions\": {sessions}, \"rss_before_kb\": {before}, \"peak_rss_kb\": {peak}, \"growth_kb\": {}, \
         \"weights_bytes\": {weights}, \"weights_f32_bytes\": {weights_f32}, \"arena_bytes\": {arena}, \"scratch_bytes\": {scratch}, \"shared_arena\": {shared_arena}, \"shared_constants\": {}, \"peak_reset\": {reset}}}",
        peak.saturating_sub(before),
        model.shared_constant_count()
    );
    Ok(())
}
