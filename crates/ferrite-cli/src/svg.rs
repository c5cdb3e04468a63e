//! Pictures as SVG: the graph (`inspect --svg`), where the time goes
//! (`bench --profile --svg`) and the arena plan (`--mem-svg`).
//!
//! The graph is laid out by Graphviz's `dot` when it is installed: its layered
//! layout (rank assignment, crossing reduction, spline routing around clusters) is
//! the standard one and stays readable for models of several hundred ops, and it is
//! one `apt-get install graphviz` away on every platform. Without it, a built-in
//! layered layout (longest-path ranks, one barycentre pass, straight splines) draws
//! the same nodes, edges and clusters, so the command never depends on it. A Rust
//! layout crate would add a dependency that does less than `dot` for clusters.
//! Both produce one `<g class="node">` per op and per model input/output, one
//! `<g class="edge">` per tensor edge and one `<g class="cluster">` per group.

use std::collections::HashMap;
use std::fmt::Write as _;

use ferrite::model::{Model, OpParams};
use ferrite::{ArenaBlock, OpRun};

/// How `inspect --svg` lays out the graph.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Layout {
    /// Graphviz `dot` when it is on the PATH, else the built-in layout.
    #[default]
    Auto,
    /// Graphviz `dot` (an error when it is missing).
    Dot,
    /// The built-in layered layout.
    Builtin,
}

/// Escapes text for XML content and attributes.
pub fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// Bytes as a short size: `512 B`, `4.0 KB`, `1.5 MB`.
pub fn size(b: usize) -> String {
    match b {
        b if b < 1024 => format!("{b} B"),
        b if b < 1 << 20 => format!("{:.1} KB", b as f64 / 1024.0),
        b => format!("{:.1} MB", b as f64 / (1 << 20) as f64),
    }
}

fn shape_text(s: &[usize]) -> String {
    if s.is_empty() {
        "scalar".into()
    } else {
        s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
    }
}

/// Fill colour of an op by where it runs.
fn colour(r: Option<&OpRun>) -> &'static str {
    match r {
        Some(OpRun::Backend("cpu")) => "#cfe2ff",
        Some(OpRun::Backend("reference")) => "#ffe0b2",
        Some(OpRun::Backend("gpu")) => "#d1f2d1",
        Some(OpRun::Backend(_)) | Some(OpRun::Custom) => "#e8d5f5",
        Some(OpRun::Executor) => "#f5d0e0",
        Some(OpRun::Folded) => "#e0e0e0",
        Some(OpRun::Alias) => "#ffffff",
        Some(OpRun::Fused { .. }) => "#dff5f2",
        Some(OpRun::Dynamic) => "#fff6bf",
        None => "#f4f4f4",
    }
}

/// The legend: (label, colour) for each kind present.
fn legend(runs: &HashMap<(usize, usize), OpRun>) -> Vec<(String, &'static str)> {
    let mut seen: Vec<(String, &'static str)> = Vec::new();
    let mut v: Vec<&OpRun> = runs.values().collect();
    v.sort_by_key(|r| r.kind());
    for r in v {
        let label = match r {
            OpRun::Fused { .. } => "fused".to_string(),
            OpRun::Folded => "folded at prepare".into(),
            r => r.kind().to_string(),
        };
        if !seen.iter().any(|s| s.0 == label) {
            seen.push((label, colour(Some(r))));
        }
    }
    seen
}

/// A node of the graph picture: an op, or a model input/output.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    lines: Vec<String>,
    fill: &'static str,
    io: bool,
    subgraph: usize,
    /// The cluster it is drawn in (innermost), if any.
    cluster: Option<usize>,
    tooltip: String,
}

#[derive(Debug, Clone)]
struct Edge {
    from: usize,
    to: usize,
    label: String,
    dashed: bool,
}

#[derive(Debug, Clone)]
struct Cluster {
    label: String,
    parent: Option<usize>,
    /// A child subgraph (solid) or a fused group (dashed).
    fused: bool,
}

/// The graph picture before layout.
#[derive(Debug, Default)]
pub struct Graph {
    title: String,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    clusters: Vec<Cluster>,
    legend: Vec<(String, &'static str)>,
}

impl Graph {
    /// Sets the title drawn above the graph.
    pub fn set_title(&mut self, title: String) {
        self.title = title;
    }
    /// Ops drawn (model inputs and outputs aside).
    pub fn op_count(&self) -> usize {
        self.nodes.iter().filter(|n| !n.io).count()
    }
    /// All nodes: ops, model inputs and outputs.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
    /// Edges drawn.
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }
}

/// Builds the picture of `model`'s subgraph `main` and the subgraphs its control-flow
/// ops call. `runs`: where each (subgraph, op) runs, from a prepared session (empty
/// if the model could not be prepared); `shape_of`: a tensor's shape in `main` as the
/// plan has it (else the model's).
pub fn build_graph(title: &str, model: &Model, main: usize, runs: &HashMap<(usize, usize), OpRun>, shape_of: &dyn Fn(usize, usize) -> Vec<usize>) -> Graph {
    let mut g = Graph { title: title.to_string(), legend: legend(runs), ..Graph::default() };
    // Subgraphs in drawing order, each with the cluster it is drawn in and who calls it.
    let mut order: Vec<(usize, Option<usize>)> = vec![(main, None)];
    let mut first_node: HashMap<usize, usize> = HashMap::new();
    let mut calls: Vec<(usize, usize, usize, &'static str)> = Vec::new(); // (caller sg, caller op, callee sg, role)
    let mut k = 0;
    while k < order.len() {
        let (sg, cluster) = order[k];
        k += 1;
        let Some(sub) = model.subgraphs().get(sg) else { continue };
        let base = g.nodes.len();
        first_node.insert(sg, base);
        // Inputs.
        let mut producer: HashMap<usize, usize> = HashMap::new();
        for (i, &t) in sub.inputs.iter().enumerate() {
            let info = &sub.tensors[t];
            producer.insert(t, g.nodes.len());
            g.nodes.push(Node {
                id: format!("sg{sg}_in{i}"),
                lines: vec![format!("input {i}"), format!("{} {}", info.dtype.name(), shape_text(&shape_of(sg, t)))],
                fill: "#ffffff",
                io: true,
                subgraph: sg,
                cluster,
                tooltip: info.name.clone(),
            });
        }
        // Fused groups: one cluster per host op.
        let mut fused_cluster: HashMap<usize, usize> = HashMap::new();
        for (oi, _) in sub.ops.iter().enumerate() {
            if let Some(OpRun::Fused { into }) = runs.get(&(sg, oi)) {
                fused_cluster.entry(*into).or_insert_with(|| {
                    g.clusters.push(Cluster { label: format!("fused into #{into}"), parent: cluster, fused: true });
                    g.clusters.len() - 1
                });
            }
        }
        for (oi, op) in sub.ops.iter().enumerate() {
            let run = runs.get(&(sg, oi));
            let out_shape = op.outputs.first().map(|&t| shape_text(&shape_of(sg, t))).unwrap_or_default();
            let host = match run {
                Some(OpRun::Fused { into }) => Some(*into),
                _ => fused_cluster.contains_key(&oi).then_some(oi),
            };
            let weights: usize = op
                .inputs
                .iter()
                .flatten()
                .filter(|&&t| sub.tensors[t].is_const())
                .map(|&t| sub.tensors[t].dtype.size().unwrap_or(0) * sub.tensors[t].shape.iter().product::<usize>())
                .sum();
            let mut lines = vec![format!("#{oi} {}", op.code.name()), out_shape];
            if weights > 0 {
                lines.push(format!("const {}", size(weights)));
            }
            let node = g.nodes.len();
            g.nodes.push(Node {
                id: format!("sg{sg}_op{oi}"),
                lines,
                fill: colour(run),
                io: false,
                subgraph: sg,
                cluster: host.and_then(|h| fused_cluster.get(&h).copied()).or(cluster),
                tooltip: format!("op {oi} {} ({}) {:?}", op.code.name(), run.map_or("not prepared".into(), |r| r.describe()), op.params),
            });
            for &t in op.inputs.iter().flatten() {
                if let Some(&p) = producer.get(&t) {
                    let info = &sub.tensors[t];
                    let shape = shape_of(sg, t);
                    let bytes = info.dtype.size().unwrap_or(0) * shape.iter().product::<usize>();
                    g.edges.push(Edge { from: p, to: node, label: format!("{} {}", shape_text(&shape), size(bytes)), dashed: false });
                }
            }
            for &t in &op.outputs {
                producer.insert(t, node);
            }
            let roles: Vec<(usize, &'static str)> = match &op.params {
                OpParams::If { then_subgraph, else_subgraph } => vec![(*then_subgraph, "then"), (*else_subgraph, "else")],
                OpParams::While { cond_subgraph, body_subgraph } => vec![(*cond_subgraph, "cond"), (*body_subgraph, "body")],
                OpParams::CallOnce { init_subgraph } => vec![(*init_subgraph, "init")],
                _ => Vec::new(),
            };
            for (callee, role) in roles {
                calls.push((sg, node, callee, role));
                if !order.iter().any(|o| o.0 == callee) && order.len() < 64 {
                    let name = model.subgraphs().get(callee).map_or(String::new(), |s| s.name.clone());
                    g.clusters.push(Cluster {
                        label: format!("subgraph {callee} '{name}': {role} of {} #{oi}", op.code.name()),
                        parent: cluster,
                        fused: false,
                    });
                    order.push((callee, Some(g.clusters.len() - 1)));
                }
            }
        }
        for (i, &t) in sub.outputs.iter().enumerate() {
            let info = &sub.tensors[t];
            let node = g.nodes.len();
            g.nodes.push(Node {
                id: format!("sg{sg}_out{i}"),
                lines: vec![format!("output {i}"), format!("{} {}", info.dtype.name(), shape_text(&shape_of(sg, t)))],
                fill: "#ffffff",
                io: true,
                subgraph: sg,
                cluster,
                tooltip: info.name.clone(),
            });
            if let Some(&p) = producer.get(&t) {
                g.edges.push(Edge { from: p, to: node, label: String::new(), dashed: false });
            }
        }
    }
    // Control flow: a dashed edge from the op to its subgraph's first node.
    for (_, from, callee, role) in calls {
        if let Some(&to) = first_node.get(&callee) {
            if to < g.nodes.len() {
                g.edges.push(Edge { from, to, label: role.to_string(), dashed: true });
            }
        }
    }
    g
}

/// Graphviz DOT text of the picture.
pub fn to_dot(g: &Graph) -> String {
    let q = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut o = String::new();
    let legend: Vec<String> = g.legend.iter().map(|(l, c)| format!("<FONT COLOR=\"{c}\">&#9632;</FONT> {}", xml(l))).collect();
    let _ = writeln!(o, "digraph ferrite {{");
    let _ = writeln!(
        o,
        "  graph [rankdir=TB, nodesep=0.25, ranksep=0.35, fontname=\"Helvetica\", fontsize=12, labelloc=t, label=<<B>{}</B><BR/>fill: where the op runs &#8212; {}>];",
        xml(&g.title),
        legend.join(" &#160; ")
    );
    let _ = writeln!(o, "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, color=\"#555555\", penwidth=0.8];");
    let _ = writeln!(o, "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#777777\", arrowsize=0.6, fontcolor=\"#555555\"];");
    let node_line = |n: &Node| {
        let shape = if n.io { ", shape=ellipse, style=filled" } else { "" };
        format!("\"{}\" [label=\"{}\", fillcolor=\"{}\", tooltip=\"{}\"{shape}];", n.id, q(&n.lines.join("\n")), n.fill, q(&n.tooltip))
    };
    // Clusters nest: write each with its members and child clusters, recursively.
    fn write_cluster(o: &mut String, g: &Graph, c: Option<usize>, depth: usize, node_line: &dyn Fn(&Node) -> String) {
        let pad = "  ".repeat(depth + 1);
        for n in g.nodes.iter().filter(|n| n.cluster == c) {
            let _ = writeln!(o, "{pad}{}", node_line(n));
        }
        for (ci, cl) in g.clusters.iter().enumerate().filter(|(_, cl)| cl.parent == c) {
            let style = if cl.fused {
                "style=\"rounded,dashed\"; color=\"#3366cc\"; fontcolor=\"#3366cc\";"
            } else {
                "style=\"rounded\"; color=\"#999999\"; bgcolor=\"#fafafa\";"
            };
            let _ = writeln!(o, "{pad}subgraph cluster_{ci} {{ label=\"{}\"; fontsize=9; {style}", cl.label.replace('"', "'"));
            write_cluster(o, g, Some(ci), depth + 1, node_line);
            let _ = writeln!(o, "{pad}}}");
        }
    }
    write_cluster(&mut o, g, None, 0, &node_line);
    for e in &g.edges {
        let style = if e.dashed { ", style=dashed, color=\"#aa3377\", fontcolor=\"#aa3377\", constraint=false" } else { "" };
        let _ = writeln!(o, "  \"{}\" -> \"{}\" [label=\"{}\"{style}];", g.nodes[e.from].id, g.nodes[e.to].id, q(&e.label));
    }
    o.push_str("}\n");
    o
}

/// Renders with Graphviz `dot`, or `None` when it cannot be run.
fn run_dot(dot: &str) -> Option<Result<String, String>> {
    use std::io::Write;
    let mut child = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let text = dot.to_string();
    // Written from a thread: dot may fill its stdout pipe before reading all its input.
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let out = child.wait_with_output().ok()?;
    let _ = writer.join();
    if !out.status.success() {
        return Some(Err(format!("dot failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Some(String::from_utf8(out.stdout).map_err(|e| format!("dot wrote non-UTF-8 output: {e}")))
}

/// The picture as SVG, laid out as `layout` asks. Returns the SVG and the layout used.
pub fn graph_svg(g: &Graph, layout: Layout) -> Result<(String, &'static str), String> {
    if layout != Layout::Builtin {
        match run_dot(&to_dot(g)) {
            Some(r) => return r.map(|s| (s, "dot")),
            None if layout == Layout::Dot => return Err("--layout dot: Graphviz's `dot` could not be run (install graphviz)".into()),
            None => {}
        }
    }
    Ok((builtin_svg(g), "builtin"))
}

const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// The built-in layered layout: each subgraph's nodes in ranks by longest path from
/// its inputs, ordered in a rank by the mean position of their predecessors;
/// subgraphs side by side; clusters as boxes around their members.
fn builtin_svg(g: &Graph) -> String {
    let n = g.nodes.len();
    let w: Vec<f64> = g
        .nodes
        .iter()
        .map(|nd| nd.lines.iter().enumerate().map(|(k, l)| l.chars().count() as f64 * if k == 0 { 6.9 } else { 6.0 }).fold(24.0, f64::max) + 18.0)
        .collect();
    let h: Vec<f64> = g.nodes.iter().map(|nd| nd.lines.len() as f64 * 13.0 + 10.0).collect();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in g.edges.iter().filter(|e| !e.dashed) {
        preds[e.to].push(e.from);
    }
    // Ranks: nodes are in topological order within a subgraph (the file's op order).
    let mut rank = vec![0usize; n];
    for i in 0..n {
        rank[i] = preds[i].iter().filter(|&&p| p < i).map(|&p| rank[p] + 1).max().unwrap_or(0);
    }
    // An op that reads only constants (a DEQUANTIZE of weights) goes just above its
    // first reader, not into one crowded top row.
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in g.edges.iter().filter(|e| !e.dashed) {
        succs[e.from].push(e.to);
    }
    for i in (0..n).rev() {
        if preds[i].is_empty() && !g.nodes[i].io {
            if let Some(r) = succs[i].iter().filter(|&&s| s > i).map(|&s| rank[s]).min() {
                rank[i] = r.saturating_sub(1);
            }
        }
    }
    let (mut x, mut y) = (vec![0.0f64; n], vec![0.0f64; n]);
    let mut subgraphs: Vec<usize> = g.nodes.iter().map(|nd| nd.subgraph).collect();
    subgraphs.dedup();
    let row_h = 74.0;
    let mut left = 20.0;
    let top = 70.0;
    let mut bottom: f64 = 0.0;
    let mut blocks: Vec<(usize, f64, f64, f64, f64)> = Vec::new(); // subgraph, x0, y0, x1, y1
    for &sg in &subgraphs {
        let members: Vec<usize> = (0..n).filter(|&i| g.nodes[i].subgraph == sg).collect();
        let max_rank = members.iter().map(|&i| rank[i]).max().unwrap_or(0);
        let mut rows: Vec<Vec<usize>> = vec![Vec::new(); max_rank + 1];
        for &i in &members {
            rows[rank[i]].push(i);
        }
        let mut width: f64 = 0.0;
        // Place rows top-down; each row ordered by its predecessors' mean x.
        let mut pos: HashMap<usize, f64> = HashMap::new();
        for row in rows.iter_mut() {
            row.sort_by(|&a, &b| {
                let bary = |i: usize| {
                    let p: Vec<f64> = preds[i].iter().filter_map(|p| pos.get(p).copied()).collect();
                    if p.is_empty() {
                        i as f64 * 1e-3
                    } else {
                        p.iter().sum::<f64>() / p.len() as f64
                    }
                };
                bary(a).total_cmp(&bary(b))
            });
            let mut cx = 0.0;
            for &i in row.iter() {
                pos.insert(i, cx + w[i] / 2.0);
                cx += w[i] + 28.0;
            }
            width = width.max(cx);
        }
        let y0 = top + if sg == subgraphs[0] { 0.0 } else { 24.0 };
        for (r, row) in rows.iter().enumerate() {
            let row_w: f64 = row.iter().map(|&i| w[i] + 28.0).sum();
            let shift = (width - row_w) / 2.0;
            for &i in row {
                x[i] = left + shift + pos[&i];
                y[i] = y0 + r as f64 * row_h + h[i] / 2.0;
            }
        }
        let y1 = y0 + rows.len() as f64 * row_h;
        blocks.push((sg, left - 10.0, y0 - 24.0, left + width - 18.0, y1 - 20.0));
        bottom = bottom.max(y1);
        left += width + 60.0;
    }
    let total_w = left.max(420.0);
    let total_h = bottom + 40.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{total_w:.0}\" height=\"{total_h:.0}\" viewBox=\"0 0 {total_w:.0} {total_h:.0}\" {FONT} font-size=\"10\">"
    );
    let _ = writeln!(o, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(o, "<text x=\"20\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{}</text>", xml(&g.title));
    let mut lx = 20.0;
    let _ = write!(o, "<text x=\"{lx}\" y=\"42\" font-size=\"11\">fill: where the op runs</text>");
    lx += 130.0;
    for (label, c) in &g.legend {
        let _ = write!(
            o,
            "<rect x=\"{lx}\" y=\"33\" width=\"11\" height=\"11\" fill=\"{c}\" stroke=\"#555\"/><text x=\"{}\" y=\"42\">{}</text>",
            lx + 15.0,
            xml(label)
        );
        lx += 24.0 + label.len() as f64 * 6.2;
    }
    o.push('\n');
    // Clusters: subgraph blocks, then fused groups around their members.
    for (ci, cl) in g.clusters.iter().enumerate() {
        let members: Vec<usize> = (0..n).filter(|&i| g.nodes[i].cluster == Some(ci)).collect();
        let (x0, y0, x1, y1) = if cl.fused {
            if members.is_empty() {
                continue;
            }
            let x0 = members.iter().map(|&i| x[i] - w[i] / 2.0).fold(f64::MAX, f64::min) - 8.0;
            let x1 = members.iter().map(|&i| x[i] + w[i] / 2.0).fold(f64::MIN, f64::max) + 8.0;
            let y0 = members.iter().map(|&i| y[i] - h[i] / 2.0).fold(f64::MAX, f64::min) - 16.0;
            let y1 = members.iter().map(|&i| y[i] + h[i] / 2.0).fold(f64::MIN, f64::max) + 6.0;
            (x0, y0, x1, y1)
        } else {
            let Some(sg) = g
                .nodes
                .iter()
                .find(|nd| nd.cluster == Some(ci) || g.clusters.get(nd.cluster.unwrap_or(usize::MAX)).is_some_and(|c| c.parent == Some(ci)))
                .map(|nd| nd.subgraph)
            else {
                continue;
            };
            let Some(b) = blocks.iter().find(|b| b.0 == sg) else { continue };
            (b.1, b.2, b.3, b.4)
        };
        let style = if cl.fused { "fill=\"none\" stroke=\"#3366cc\" stroke-dasharray=\"4 3\"" } else { "fill=\"#fafafa\" stroke=\"#999\"" };
        let colour = if cl.fused { "#3366cc" } else { "#333" };
        let _ = writeln!(
            o,
            "<g class=\"cluster\"><rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"6\" {style}/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"{colour}\">{}</text></g>",
            x1 - x0,
            y1 - y0,
            x0 + 6.0,
            y0 + 11.0,
            xml(&cl.label)
        );
    }
    for e in &g.edges {
        let (a, b) = (e.from, e.to);
        let (x0, y0) = (x[a], y[a] + h[a] / 2.0);
        let (x1, y1) = (x[b], y[b] - h[b] / 2.0);
        let (stroke, dash) = if e.dashed { ("#aa3377", " stroke-dasharray=\"5 3\"") } else { ("#777", "") };
        let d = if e.dashed || y1 <= y0 {
            // To another subgraph, or upwards: a plain line.
            format!("M{x0:.1},{y0:.1} L{x1:.1},{y1:.1}")
        } else {
            let my = (y0 + y1) / 2.0;
            format!("M{x0:.1},{y0:.1} C{x0:.1},{my:.1} {x1:.1},{my:.1} {x1:.1},{y1:.1}")
        };
        let _ = write!(o, "<g class=\"edge\"><path d=\"{d}\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"0.9\"{dash}/>");
        let _ = write!(o, "<path d=\"M{x1:.1},{y1:.1} l-3,-6 l6,0 z\" fill=\"{stroke}\"/>");
        if !e.label.is_empty() {
            let (lx, ly) = ((x0 + x1) / 2.0 + 4.0, (y0 + y1) / 2.0 + 3.0);
            let _ = write!(o, "<text x=\"{lx:.1}\" y=\"{ly:.1}\" font-size=\"8\" fill=\"#555\">{}</text>", xml(&e.label));
        }
        o.push_str("</g>\n");
    }
    for (i, nd) in g.nodes.iter().enumerate() {
        let (x0, y0) = (x[i] - w[i] / 2.0, y[i] - h[i] / 2.0);
        let rx = if nd.io { h[i] / 2.0 } else { 5.0 };
        let _ = write!(
            o,
            "<g class=\"node\" id=\"{}\"><title>{}</title><rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"{rx:.1}\" fill=\"{}\" stroke=\"#555\" stroke-width=\"0.8\"/>",
            xml(&nd.id),
            xml(&nd.tooltip),
            w[i],
            h[i],
            nd.fill
        );
        for (k, line) in nd.lines.iter().enumerate() {
            let weight = if k == 0 && !nd.io { " font-weight=\"bold\"" } else { "" };
            let _ = write!(o, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\"{weight}>{}</text>", x[i], y0 + 15.0 + k as f64 * 13.0, xml(line));
        }
        o.push_str("</g>\n");
    }
    o.push_str("</svg>\n");
    o
}

/// One bar of a chart: label, value, text after the bar.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub note: String,
}

/// Where the time goes: a bar chart of time per op type and one of the slowest ops.
/// Each bar is a `<rect class="bar">`.
pub fn profile_svg(title: &str, subtitle: &str, by_type: &[Bar], slowest: &[Bar]) -> String {
    let label_w = 250.0;
    let bar_w = 460.0;
    let row = 20.0;
    let width = label_w + bar_w + 190.0;
    let height = 90.0 + (by_type.len() + slowest.len()) as f64 * row + 70.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" {FONT} font-size=\"11\">"
    );
    let _ = writeln!(o, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(o, "<text x=\"16\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>", xml(title));
    let _ = writeln!(o, "<text x=\"16\" y=\"42\" fill=\"#555\">{}</text>", xml(subtitle));
    let mut y = 66.0;
    for (heading, bars, fill) in
        [("Time per op type (time per run, % of op time)", by_type, "#4a7fc1"), ("Slowest ops (time per run, % of op time)", slowest, "#d9822b")]
    {
        let _ = writeln!(o, "<text x=\"16\" y=\"{y:.0}\" font-size=\"13\" font-weight=\"bold\">{}</text>", xml(heading));
        y += 10.0;
        let max = bars.iter().map(|b| b.value).fold(0.0, f64::max).max(1e-12);
        for b in bars {
            let len = (b.value / max * bar_w).max(1.0);
            let _ = writeln!(
                o,
                "<g><text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text><rect class=\"bar\" x=\"{label_w:.0}\" y=\"{:.1}\" width=\"{len:.1}\" height=\"{:.1}\" fill=\"{fill}\"><title>{}: {}</title></rect><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#333\">{}</text></g>",
                label_w - 8.0,
                y + 13.0,
                xml(&b.label),
                y + 3.0,
                row - 5.0,
                xml(&b.label),
                xml(&b.note),
                label_w + len + 6.0,
                y + 13.0,
                xml(&b.note)
            );
            y += row;
        }
        y += 26.0;
    }
    o.push_str("</svg>\n");
    o
}

/// The arena plan: each tensor a rectangle spanning the ops it is alive for (x) and
/// its bytes (y). Each tensor is a `<rect class="block">`.
pub fn memory_svg(title: &str, blocks: &[ArenaBlock], names: &dyn Fn(usize) -> String, ops: usize, arena: usize, lower: usize) -> String {
    let (left, top, plot_w, plot_h) = (84.0, 64.0, 820.0, 460.0);
    let width = left + plot_w + 30.0;
    let height = top + plot_h + 60.0;
    let ops = ops.max(1) as f64;
    let arena_f = arena.max(1) as f64;
    let sx = |op: f64| left + op / ops * plot_w;
    let sy = |b: f64| top + b / arena_f * plot_h;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" {FONT} font-size=\"11\">"
    );
    let _ = writeln!(o, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(o, "<text x=\"16\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>", xml(title));
    let _ = writeln!(
        o,
        "<text x=\"16\" y=\"44\" fill=\"#555\">arena {} ({} B), lower bound {} ({:.3}x); {} tensors; x: op index, y: byte offset</text>",
        size(arena),
        arena,
        size(lower),
        if lower > 0 { arena as f64 / lower as f64 } else { 1.0 },
        blocks.len()
    );
    let _ = writeln!(o, "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"#f7f7f7\" stroke=\"#888\"/>");
    // Ticks: about eight along each axis.
    let step = |range: f64| {
        let raw = range / 8.0;
        let mag = 10f64.powf(raw.max(1.0).log10().floor());
        [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(mag * 10.0).max(1.0)
    };
    let xs = step(ops);
    let mut t = 0.0;
    while t <= ops {
        let _ = writeln!(
            o,
            "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" stroke=\"#ddd\"/><text x=\"{0:.1}\" y=\"{3:.1}\" text-anchor=\"middle\">{4}</text>",
            sx(t),
            top,
            top + plot_h,
            top + plot_h + 16.0,
            t as usize
        );
        t += xs;
    }
    // Byte ticks on powers of two, about eight of them.
    let ys = (arena_f / 8.0).max(1.0).log2().ceil().exp2();
    let mut b = 0.0;
    while b <= arena_f {
        let _ = writeln!(o, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", left - 6.0, sy(b) + 4.0, size(b as usize));
        b += ys;
    }
    let _ = writeln!(o, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">op index</text>", left + plot_w / 2.0, top + plot_h + 36.0);
    for blk in blocks {
        let x0 = sx(blk.first_op as f64);
        let x1 = sx(blk.last_op as f64 + 1.0);
        let y0 = sy(blk.offset as f64);
        let hgt = (blk.bytes as f64 / arena_f * plot_h).max(0.8);
        // A colour per tensor, stable across runs: a hue from its index.
        let hue = (blk.tensor * 137) % 360;
        let _ = writeln!(
            o,
            "<rect class=\"block\" x=\"{x0:.2}\" y=\"{y0:.2}\" width=\"{:.2}\" height=\"{hgt:.2}\" fill=\"hsl({hue},55%,62%)\" stroke=\"#333\" stroke-width=\"0.3\"><title>tensor {} '{}': {} at offset {}, ops {}..{}</title></rect>",
            (x1 - x0).max(0.8),
            blk.tensor,
            xml(&names(blk.tensor)),
            size(blk.bytes),
            blk.offset,
            blk.first_op,
            blk.last_op
        );
        if x1 - x0 > 28.0 && hgt > 12.0 {
            let _ = writeln!(o, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"#222\">#{}</text>", x0 + 3.0, y0 + 10.0, blk.tensor);
        }
    }
    if lower > 0 && lower <= arena {
        let ly = sy(lower as f64);
        let _ = writeln!(
            o,
            "<line x1=\"{left}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"#c0392b\" stroke-dasharray=\"6 4\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#c0392b\" text-anchor=\"end\">lower bound</text>",
            left + plot_w,
            left + plot_w - 4.0,
            ly - 4.0
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(xml("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
        assert_eq!(size(100), "100 B");
        assert_eq!(size(4096), "4.0 KB");
        assert_eq!(shape_text(&[1, 8, 8]), "1x8x8");
    }
}
