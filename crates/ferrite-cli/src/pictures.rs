//! The CLI side of the pictures: `inspect --svg/--mem-svg` and `bench --profile
//! --svg/--mem-svg` options, and what they draw from a session (see `svg.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferrite::model::Model;
use ferrite::{OpRun, Session};

use crate::svg::{self, Bar, Layout};

/// `inspect`'s pictures.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct InspectPictures {
    /// Draw the graph as SVG: ops as boxes (type, output shape), tensors as edges
    /// (shape, bytes), fused ops grouped, colour by backend, IF/WHILE subgraphs as clusters.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Draw the arena plan as SVG: each tensor a rectangle over op index x byte offset.
    #[arg(long = "mem-svg", value_name = "FILE")]
    pub mem_svg: Option<PathBuf>,
    /// Graph layout: Graphviz `dot` when installed (auto), or the built-in one.
    #[arg(long, value_enum, default_value = "auto")]
    pub layout: Layout,
}

impl InspectPictures {
    /// Whether a picture was asked for.
    pub fn any(&self) -> bool {
        self.svg.is_some() || self.mem_svg.is_some()
    }
}

/// `bench`'s pictures.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct BenchPictures {
    /// With --profile: draw where the time goes as SVG (per op type, slowest ops).
    #[arg(long, value_name = "FILE", requires = "profile")]
    pub svg: Option<PathBuf>,
    /// Draw the arena plan as SVG: each tensor a rectangle over op index x byte offset.
    #[arg(long = "mem-svg", value_name = "FILE")]
    pub mem_svg: Option<PathBuf>,
}

fn write(file: &Path, text: &str) -> Result<(), String> {
    std::fs::write(file, text).map_err(|e| format!("{}: {e}", file.display()))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// `inspect MODEL --svg/--mem-svg`: prepares the model (with `--backends`, `--shape`)
/// and draws it. A model that cannot be prepared is still drawn, uncoloured.
pub fn inspect(path: &Path, pics: &InspectPictures, backends: &crate::BackendArgs, shapes: &[String]) -> Result<(), String> {
    let model = Arc::new(Model::from_file(path).map_err(|e| e.to_string())?);
    let mut s = Session::with_options(model.clone(), backends.options(1)?).map_err(|e| e.to_string())?;
    for (k, spec) in shapes.iter().enumerate() {
        s.resize_input(k, &crate::parse_shape(spec)?).map_err(|e| e.to_string())?;
    }
    let prepared = match s.prepare() {
        Ok(()) => true,
        Err(e) if pics.mem_svg.is_none() => {
            eprintln!("ferrite: note: drawing without backends, the model could not be prepared: {e}");
            false
        }
        Err(e) => return Err(e.to_string()),
    };
    if let Some(file) = &pics.svg {
        let runs: HashMap<(usize, usize), OpRun> =
            if prepared { s.op_assignments().map_err(|e| e.to_string())?.into_iter().map(|(sg, oi, r)| ((sg, oi), r)).collect() } else { HashMap::new() };
        let main = s.subgraph_index();
        let shape_of = |sg: usize, t: usize| -> Vec<usize> {
            if sg == main && prepared {
                if let Ok(d) = s.tensor_desc(t) {
                    return d.shape;
                }
            }
            model.subgraphs()[sg].tensors[t].shape.clone()
        };
        let backends = if prepared { format!(", backends {}", s.backend_names().join(",")) } else { String::new() };
        let mut g = svg::build_graph("", &model, main, &runs, &shape_of);
        let in_main = model.subgraphs()[main].ops.len();
        let ops = if g.op_count() == in_main { format!("{in_main} ops") } else { format!("{} ops, {in_main} in subgraph {main}", g.op_count()) };
        g.set_title(format!("{} ({ops}{backends})", file_name(path)));
        let (text, used) = svg::graph_svg(&g, pics.layout)?;
        write(file, &text)?;
        outln!("{}: {} ops, {} nodes, {} edges, layout {used}", file.display(), g.op_count(), g.node_count(), g.edge_count());
    }
    if let Some(file) = &pics.mem_svg {
        memory(path, file, &s)?;
    }
    Ok(())
}

/// Draws `s`'s arena plan to `file`.
pub fn memory(path: &Path, file: &Path, s: &Session) -> Result<(), String> {
    let blocks = s.arena_blocks().ok_or("--mem-svg: the session is not prepared")?;
    let (arena, lower) = s.arena_stats().unwrap_or((0, 0));
    let g = &s.model().subgraphs()[s.subgraph_index()];
    let names = |t: usize| g.tensors.get(t).map_or(String::new(), |i| i.name.clone());
    let title = format!("{}: arena plan", file_name(path));
    write(file, &svg::memory_svg(&title, &blocks, &names, g.ops.len(), arena, lower))?;
    eprintln!("{}: {} tensors in an arena of {} bytes", file.display(), blocks.len(), arena);
    Ok(())
}

/// Draws `bench --profile`'s numbers to `file`: `by_type` (name, seconds over all
/// runs, ops), `ops` (op, name, time over all runs, slowest first).
pub fn profile(
    path: &Path,
    file: &Path,
    by_type: &[(String, (f64, usize))],
    ops: &[(usize, String, Duration)],
    runs: usize,
    slowest: usize,
) -> Result<(), String> {
    let runs_f = runs.max(1) as f64;
    let total: f64 = ops.iter().map(|o| o.2.as_secs_f64()).sum::<f64>().max(1e-12);
    let pct = |t: f64| 100.0 * t / total;
    // Milliseconds per run, in microseconds below a hundredth of one.
    let per_run = |t: f64| {
        let ms = t * 1e3 / runs_f;
        if ms < 0.01 {
            format!("{:.1} us", ms * 1e3)
        } else {
            format!("{ms:.3} ms")
        }
    };
    let types: Vec<Bar> = by_type
        .iter()
        .map(|(name, (t, n))| Bar {
            label: format!("{name} ({n} op{})", if *n == 1 { "" } else { "s" }),
            value: *t,
            note: format!("{}  {:.1}%", per_run(*t), pct(*t)),
        })
        .collect();
    let top: Vec<Bar> = ops
        .iter()
        .take(slowest)
        .map(|(op, name, d)| {
            let t = d.as_secs_f64();
            Bar { label: format!("#{op} {name}"), value: t, note: format!("{}  {:.1}%", per_run(t), pct(t)) }
        })
        .collect();
    let title = format!("{}: where the time goes", file_name(path));
    let subtitle = format!("{:.3} ms of op time per run, {} ops timed, mean of {runs} profiled runs", total * 1e3 / runs_f, ops.len());
    write(file, &svg::profile_svg(&title, &subtitle, &types, &top))?;
    eprintln!("profile picture: {}", file.display());
    Ok(())
}
