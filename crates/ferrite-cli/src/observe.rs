//! What `run --dump` and `bench` use to look inside a run: tensor dumps built on
//! the session's per-op callbacks, a terminal progress bar, and an RSS sampler.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::{Flow, OpEvent, Session, TensorState};
use serde_json::{json, Value};

use crate::npy;

/// Which ops `--dump-ops` selects: op indices of the session's subgraph and op types
/// in any subgraph (`3,17`, `CONV_2D`, mixed).
#[derive(Debug, Clone, Default)]
pub struct OpFilter {
    indices: Vec<usize>,
    types: Vec<String>,
}

impl OpFilter {
    /// Parses a comma-separated list: an index must exist in `s`'s subgraph, a type
    /// must occur in the model (control-flow bodies included).
    pub fn parse(spec: &str, s: &Session) -> Result<OpFilter, String> {
        let ops = &s.model().subgraphs()[s.subgraph_index()].ops;
        let mut all = s.model().subgraphs().iter().flat_map(|g| &g.ops);
        let mut f = OpFilter::default();
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.parse::<usize>() {
                Ok(i) if i < ops.len() => f.indices.push(i),
                Ok(i) => return Err(format!("--dump-ops: op {i} does not exist (the model has {} ops)", ops.len())),
                Err(_) if all.any(|o| o.code.name().eq_ignore_ascii_case(item)) => f.types.push(item.to_ascii_uppercase()),
                Err(_) => return Err(format!("--dump-ops: no op of type '{item}' in the model")),
            }
        }
        if f.indices.is_empty() && f.types.is_empty() {
            return Err("--dump-ops: give op indices or types, e.g. 3,17 or CONV_2D".into());
        }
        Ok(f)
    }

    fn selects(&self, ev: &OpEvent<'_>) -> bool {
        (ev.calls.is_empty() && self.indices.contains(&ev.index)) || self.types.iter().any(|t| t.eq_ignore_ascii_case(&ev.op_name()))
    }
}

/// A file-name-safe version of a tensor name (at most 80 characters).
fn file_safe(name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).take(80).collect();
    let s = s.trim_matches(['_', '.']).to_string();
    if s.is_empty() {
        "tensor".into()
    } else {
        s
    }
}

/// The file-name prefix of an op inside control flow: for each control-flow op on its
/// path, its index (and `-it<pass>` for a WHILE), then `sg<subgraph>`; e.g.
/// `0001-it2_sg2_` for an op of the body run by WHILE op 1 in its third pass. Empty
/// for the session's own ops, so their names stay `<op index>_<TYPE>_<tensor>`.
fn call_prefix(ev: &OpEvent<'_>) -> String {
    let mut p = String::new();
    for f in ev.calls {
        p += &format!("{:04}", f.op);
        if let Some(i) = f.iteration {
            p += &format!("-it{i}");
        }
        p += "_";
    }
    if !ev.calls.is_empty() {
        p += &format!("sg{}_", ev.subgraph);
    }
    p
}

/// Runs `s` once, writing the outputs of every op (or those `only` selects) to `dir`
/// as `.npy` files named `<op index>_<TYPE>_<tensor name>.npy` (ops inside
/// IF/WHILE/CALL_ONCE bodies: each execution, prefixed by [`call_prefix`]), and `index.json`
/// describing each: op, backend, tensor, dtype, shape, quantization, file. A tensor
/// the run never materialised (fused into a neighbouring kernel) is listed with its
/// state and no file.
pub fn dump_run(s: &mut Session, dir: &Path, only: Option<&OpFilter>, model_path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut ops: Vec<Value> = Vec::new();
    let mut failed: Option<String> = None;
    let write = |ev: &OpEvent<'_>| -> Result<Value, String> {
        let mut outputs = Vec::new();
        let mut used: Vec<String> = Vec::new();
        for v in ev.outputs {
            let mut entry = json!({
                "tensor": v.tensor, "name": v.name, "dtype": v.dtype.name(), "shape": v.shape, "state": v.state.name(), "file": null,
            });
            if let Some(q) = v.quant {
                entry["quantization"] = json!({"scale": q.scale, "zero_point": q.zero_point, "axis": q.axis});
            }
            if let (TensorState::Ready, Some(data)) = (v.state, v.data) {
                let prefix = call_prefix(ev);
                let mut file = format!("{prefix}{:04}_{}_{}.npy", ev.index, file_safe(&ev.op_name()), file_safe(v.name));
                if used.contains(&file) {
                    file = format!("{prefix}{:04}_{}_{}_{}.npy", ev.index, file_safe(&ev.op_name()), file_safe(v.name), v.tensor);
                }
                let p = dir.join(&file);
                std::fs::write(&p, npy::write(v.dtype, v.shape, data)?).map_err(|e| format!("{}: {e}", p.display()))?;
                entry["file"] = json!(file);
                used.push(file);
            }
            outputs.push(entry);
        }
        let mut entry = json!({
            "op_index": ev.index, "type": ev.op_name(), "runs_on": ev.runs_on.describe(),
            "inputs": ev.inputs.iter().map(|v| v.tensor).collect::<Vec<_>>(), "outputs": outputs,
        });
        if !ev.calls.is_empty() {
            entry["subgraph"] = json!(ev.subgraph);
            entry["calls"] =
                ev.calls.iter().map(|f| json!({"subgraph": f.subgraph, "op_index": f.op, "callee": f.callee, "iteration": f.iteration})).collect::<Value>();
        }
        Ok(entry)
    };
    let outcome = s
        .run_with_callbacks(
            |_| Flow::Continue,
            |ev| {
                if only.is_some_and(|f| !f.selects(ev)) {
                    return Flow::Continue;
                }
                match write(ev) {
                    Ok(v) => {
                        ops.push(v);
                        Flow::Continue
                    }
                    Err(e) => {
                        failed = Some(e);
                        Flow::Stop
                    }
                }
            },
        )
        .map_err(|e| e.to_string())?;
    if let Some(e) = failed {
        return Err(format!("--dump: {e}"));
    }
    if outcome != ferrite::RunOutcome::Completed {
        return Err(format!("--dump: the run did not complete ({outcome:?})"));
    }
    let index = json!({"model": model_path.display().to_string(), "subgraph": s.subgraph_index(), "ops": ops});
    let p = dir.join("index.json");
    let text = serde_json::to_string_pretty(&index).map_err(|e| e.to_string())?;
    std::fs::write(&p, text + "\n").map_err(|e| format!("{}: {e}", p.display()))
}

/// The directory for step `step` of a `--steps` run (`step_0003`), or `dir` itself.
pub fn dump_dir(dir: &Path, step: Option<usize>) -> PathBuf {
    match step {
        Some(k) => dir.join(format!("step_{k:04}")),
        None => dir.to_path_buf(),
    }
}

/// A one-line progress bar on stderr, drawn only when stdout and stderr are both
/// terminals, and only once the work has taken more than a second.
pub struct Progress {
    enabled: bool,
    started: Instant,
    drawn: Option<Instant>,
}

impl Progress {
    pub fn new() -> Progress {
        Progress { enabled: std::io::stdout().is_terminal() && std::io::stderr().is_terminal(), started: Instant::now(), drawn: None }
    }

    /// Shows `fraction` done (0..=1) with a short text, at most ten times a second.
    pub fn update(&mut self, fraction: f64, text: &str) {
        let now = Instant::now();
        if !self.enabled || now - self.started < Duration::from_secs(1) || self.drawn.is_some_and(|d| now - d < Duration::from_millis(100)) {
            return;
        }
        self.drawn = Some(now);
        let width = 30;
        let done = ((fraction.clamp(0.0, 1.0) * width as f64) as usize).min(width);
        let bar: String = "#".repeat(done) + &".".repeat(width - done);
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r[{bar}] {:>3.0}% {text}  ", fraction.clamp(0.0, 1.0) * 100.0);
        let _ = e.flush();
    }

    /// Erases the bar, if one was drawn.
    pub fn finish(&mut self) {
        if self.drawn.take().is_some() {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r{}\r", " ".repeat(72));
            let _ = e.flush();
        }
    }
}

/// Resident set size of this process in kB (Linux `/proc/self/status`, `VmRSS`),
/// read into a stack buffer so sampling allocates nothing.
fn rss_kb() -> Option<u64> {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    let mut f = std::fs::File::open("/proc/self/status").ok()?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

/// Samples the process's RSS every `every` on a thread of its own, from creation
/// until [`RssPoller::stop`]: (milliseconds since `origin`, kB).
pub struct RssPoller {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(f64, u64)>>>,
}

impl RssPoller {
    pub fn start(every: Duration, origin: Instant) -> RssPoller {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ferrite-mem-poll".into())
            .spawn(move || {
                // The benchmark counts heap allocations during runs; the sampler's own
                // are not the runtime's.
                crate::quiet_allocations();
                let mut samples = Vec::with_capacity(1024);
                loop {
                    if let Some(kb) = rss_kb() {
                        samples.push((origin.elapsed().as_secs_f64() * 1e3, kb));
                    }
                    if flag.load(Ordering::Relaxed) {
                        return samples;
                    }
                    std::thread::park_timeout(every);
                }
            })
            .ok();
        RssPoller { stop, thread }
    }

    /// Stops sampling (after one last sample) and returns the samples.
    pub fn stop(mut self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => {
                t.thread().unpark();
                t.join().unwrap_or_default()
            }
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_names_become_file_names() {
        assert_eq!(file_safe("model/conv2d/Conv2D;bias"), "model_conv2d_Conv2D_bias");
        assert_eq!(file_safe(""), "tensor");
        assert_eq!(file_safe("../../etc/passwd"), "etc_passwd");
        assert_eq!(file_safe(&"x".repeat(200)).len(), 80);
    }

    #[test]
    fn rss_is_sampled_over_time() {
        let origin = Instant::now();
        let p = RssPoller::start(Duration::from_millis(5), origin);
        std::thread::sleep(Duration::from_millis(40));
        let samples = p.stop();
        assert!(samples.len() >= 3, "{samples:?}");
        assert!(samples.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(samples.iter().all(|s| s.1 > 0));
    }
}
