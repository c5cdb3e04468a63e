//! Multi-model packages (nnpackage): a directory with `metadata/MANIFEST` naming
//! model files, the package inputs/outputs, and the edges between models, as
//! `"model:subgraph:io"` descriptors. Loaded as one [`PackageSession`]; a tensor
//! crossing a model edge is handed to the next model without a copy.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::compile::AlignedBytes;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::session::{Session, SessionOptions, TensorData, TensorDesc};

/// One end of a connection: model index, subgraph index, input/output index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoDesc {
    /// Model index in `models`.
    pub model: usize,
    /// Subgraph of that model.
    pub subgraph: usize,
    /// Input or output position within the subgraph.
    pub index: usize,
}

impl IoDesc {
    fn parse(s: &str) -> Result<IoDesc> {
        let bad = || Error::InvalidModel(format!("MANIFEST: '{s}' is not a \"model:subgraph:io\" descriptor").into());
        let mut it = s.split(':').map(|p| p.trim().parse::<usize>().map_err(|_| bad()));
        let d = IoDesc { model: it.next().ok_or_else(bad)??, subgraph: it.next().ok_or_else(bad)??, index: it.next().ok_or_else(bad)?? };
        if it.next().is_some() {
            return Err(bad());
        }
        Ok(d)
    }
}

/// A parsed, validated package.
#[derive(Debug)]
pub struct Package {
    /// Package directory.
    pub root: PathBuf,
    /// Models, in MANIFEST order.
    pub models: Vec<Arc<Model>>,
    /// Package inputs.
    pub inputs: Vec<IoDesc>,
    /// Package outputs.
    pub outputs: Vec<IoDesc>,
    /// Edges: (producer output, consumer input).
    pub edges: Vec<(IoDesc, IoDesc)>,
    /// `KEY=VALUE` pairs from the config files named in `configs`.
    pub config: Vec<(String, String)>,
    /// Model indices in an order where every model runs after its producers.
    pub order: Vec<usize>,
}

/// True if `path` looks like a package directory.
pub fn is_package(path: &Path) -> bool {
    path.join("metadata").join("MANIFEST").is_file()
}

fn strings(v: &Value, key: &str) -> Result<Vec<String>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => {
            a.iter().map(|x| x.as_str().map(str::to_string).ok_or_else(|| Error::InvalidModel(format!("MANIFEST: '{key}' must hold strings").into()))).collect()
        }
        Some(_) => Err(Error::InvalidModel(format!("MANIFEST: '{key}' must be an array").into())),
    }
}

impl Package {
    /// Reads and validates the package in directory `root`.
    pub fn open(root: impl AsRef<Path>) -> Result<Package> {
        let root = root.as_ref().to_path_buf();
        let manifest_path = root.join("metadata").join("MANIFEST");
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| Error::Io { path: p.display().to_string(), source }
        };
        let text = std::fs::read_to_string(&manifest_path).map_err(io(&manifest_path))?;
        let m: Value = serde_json::from_str(&text).map_err(|e| Error::InvalidModel(format!("MANIFEST is not valid JSON: {e}").into()))?;
        let names = strings(&m, "models")?;
        if names.is_empty() {
            return Err(Error::InvalidModel("MANIFEST lists no models".into()));
        }
        let types = strings(&m, "model-types")?;
        let mut models = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            if let Some(t) = types.get(i) {
                if t != "tflite" && t != "circle" {
                    return Err(Error::Unsupported(format!("MANIFEST: model {i} ('{name}') has type '{t}'").into()));
                }
            }
            let rel = Path::new(name);
            if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
                return Err(Error::InvalidModel(format!("MANIFEST: model path '{name}' must stay inside the package").into()));
            }
            models.push(Arc::new(Model::from_file(root.join(rel))?));
        }
        let mut config = Vec::new();
        for c in strings(&m, "configs")? {
            let p = root.join("metadata").join(&c);
            for line in std::fs::read_to_string(&p).map_err(io(&p))?.lines() {
                let line = line.split('#').next().unwrap_or("").trim();
                if let Some((k, v)) = line.split_once('=') {
                    config.push((k.trim().to_string(), v.trim().to_string()));
                }
            }
        }
        let mut inputs = strings(&m, "pkg-inputs")?.iter().map(|s| IoDesc::parse(s)).collect::<Result<Vec<_>>>()?;
        let mut outputs = strings(&m, "pkg-outputs")?.iter().map(|s| IoDesc::parse(s)).collect::<Result<Vec<_>>>()?;
        let mut edges = Vec::new();
        if let Some(conns) = m.get("model-connect") {
            for c in conns.as_array().ok_or_else(|| Error::InvalidModel("MANIFEST: 'model-connect' must be an array".into()))? {
                let from =
                    IoDesc::parse(c.get("from").and_then(Value::as_str).ok_or_else(|| Error::InvalidModel("MANIFEST: connection without 'from'".into()))?)?;
                for to in strings(c, "to")? {
                    edges.push((from, IoDesc::parse(&to)?));
                }
            }
        }
        // A single-model package without explicit I/O exposes the first model's.
        if inputs.is_empty() && outputs.is_empty() && edges.is_empty() {
            let g = &models[0].subgraphs[0];
            inputs = (0..g.inputs.len()).map(|index| IoDesc { model: 0, subgraph: 0, index }).collect();
            outputs = (0..g.outputs.len()).map(|index| IoDesc { model: 0, subgraph: 0, index }).collect();
        }
        let mut p = Package { root, models, inputs, outputs, edges, config, order: vec![] };
        p.validate()?;
        Ok(p)
    }

    fn check(&self, d: IoDesc, input: bool, what: &str) -> Result<()> {
        let m =
            self.models.get(d.model).ok_or_else(|| Error::InvalidModel(format!("MANIFEST: {what} names model {} of {}", d.model, self.models.len()).into()))?;
        let g = m
            .subgraphs
            .get(d.subgraph)
            .ok_or_else(|| Error::InvalidModel(format!("MANIFEST: {what} names subgraph {} of model {}", d.subgraph, d.model).into()))?;
        if d.subgraph != 0 {
            return Err(Error::Unsupported(format!("MANIFEST: {what} uses subgraph {}; packages run subgraph 0 of each model", d.subgraph).into()));
        }
        let n = if input { g.inputs.len() } else { g.outputs.len() };
        if d.index >= n {
            return Err(Error::InvalidModel(
                format!("MANIFEST: {what} names {} {} of model {} which has {n}", if input { "input" } else { "output" }, d.index, d.model).into(),
            ));
        }
        Ok(())
    }

    fn validate(&mut self) -> Result<()> {
        for &d in &self.inputs {
            self.check(d, true, "pkg-inputs")?;
        }
        for &d in &self.outputs {
            self.check(d, false, "pkg-outputs")?;
        }
        for &(f, t) in &self.edges {
            self.check(f, false, "model-connect 'from'")?;
            self.check(t, true, "model-connect 'to'")?;
        }
        // Every model input must be fed exactly once: by the package or by one edge.
        for (mi, m) in self.models.iter().enumerate() {
            for index in 0..m.subgraphs[0].inputs.len() {
                let d = IoDesc { model: mi, subgraph: 0, index };
                let feeds = self.inputs.iter().filter(|&&x| x == d).count() + self.edges.iter().filter(|e| e.1 == d).count();
                if feeds != 1 {
                    return Err(Error::InvalidModel(
                        format!("MANIFEST: input {index} of model {mi} is fed {feeds} times (needs exactly one package input or edge)").into(),
                    ));
                }
            }
        }
        // Topological order of models (Kahn); a cycle is an error.
        let n = self.models.len();
        let mut indeg = vec![0usize; n];
        for e in &self.edges {
            indeg[e.1.model] += 1;
        }
        let mut ready: Vec<usize> = (0..n).filter(|&m| indeg[m] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(m) = ready.pop() {
            order.push(m);
            for e in self.edges.iter().filter(|e| e.0.model == m) {
                indeg[e.1.model] -= 1;
                if indeg[e.1.model] == 0 {
                    ready.push(e.1.model);
                }
            }
        }
        if order.len() != n {
            return Err(Error::InvalidModel("MANIFEST: model-connect forms a cycle".into()));
        }
        self.order = order;
        Ok(())
    }
}

/// Where a model input's bytes come from during a package run.
#[derive(Debug, Clone, Copy)]
enum Feed {
    /// Package input k.
    Package(usize),
    /// Output `index` of model `model`.
    Edge { model: usize, index: usize },
}

/// A package loaded as one runnable unit: one [`Session`] per model, run in
/// dependency order over package-owned buffers, so edges need no copies.
pub struct PackageSession {
    package: Package,
    sessions: Vec<Session>,
    feeds: Vec<Vec<Feed>>,
    input_bufs: Vec<AlignedBytes>,
    /// Per model, per output: the buffer its kernel writes into.
    output_bufs: Vec<Vec<AlignedBytes>>,
    prepared: bool,
    ran: bool,
}

impl std::fmt::Debug for PackageSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackageSession").field("models", &self.sessions.len()).finish()
    }
}

impl PackageSession {
    /// Opens the package in `dir` with `options` for every model's session.
    pub fn open(dir: impl AsRef<Path>, options: SessionOptions) -> Result<PackageSession> {
        let package = Package::open(dir)?;
        let sessions = package.models.iter().map(|m| Session::with_options(m.clone(), options.clone())).collect::<Result<Vec<_>>>()?;
        let feeds = package
            .models
            .iter()
            .enumerate()
            .map(|(mi, m)| {
                (0..m.subgraphs[0].inputs.len())
                    .map(|index| {
                        let d = IoDesc { model: mi, subgraph: 0, index };
                        match package.inputs.iter().position(|&x| x == d) {
                            Some(k) => Feed::Package(k),
                            None => {
                                let e = package.edges.iter().find(|e| e.1 == d).map(|e| e.0).unwrap_or(d);
                                Feed::Edge { model: e.model, index: e.index }
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        Ok(PackageSession { package, sessions, feeds, input_bufs: vec![], output_bufs: vec![], prepared: false, ran: false })
    }

    /// The package description.
    pub fn package(&self) -> &Package {
        &self.package
    }

    /// Package inputs.
    pub fn inputs(&self) -> Vec<TensorDesc> {
        self.package.inputs.iter().map(|d| self.sessions[d.model].inputs()[d.index].clone()).collect()
    }

    /// Package outputs (final shapes after `prepare`).
    pub fn outputs(&self) -> Vec<TensorDesc> {
        self.package.outputs.iter().map(|d| self.sessions[d.model].outputs()[d.index].clone()).collect()
    }

    /// Resizes package input `i` (before `prepare`).
    pub fn resize_input(&mut self, i: usize, shape: &[usize]) -> Result<()> {
        if self.prepared {
            return Err(Error::InvalidState("package inputs are resized before prepare()".into()));
        }
        let d = *self.package.inputs.get(i).ok_or_else(|| Error::InvalidArgument(format!("package input {i} does not exist").into()))?;
        self.sessions[d.model].resize_input(d.index, shape)
    }

    /// Prepares every model in dependency order; an edge input takes its producer's
    /// output shape (element counts must match; the consumer's own shape is kept when
    /// only the layout of dims differs, since the bytes are the same).
    pub fn prepare(&mut self) -> Result<()> {
        for &m in &self.package.order.clone() {
            for (index, feed) in self.feeds[m].clone().into_iter().enumerate() {
                if let Feed::Edge { model, index: out } = feed {
                    let produced = self.sessions[model].outputs()[out].clone();
                    let want = self.sessions[m].inputs()[index].clone();
                    if produced.dtype != want.dtype {
                        return Err(Error::InvalidModel(
                            format!("edge {model}:0:{out} -> {m}:0:{index}: {} feeds a {} input", produced.dtype.name(), want.dtype.name()).into(),
                        ));
                    }
                    let (pn, wn): (usize, usize) = (produced.shape.iter().product(), want.shape.iter().product());
                    if pn != wn {
                        if produced.shape.len() == want.shape.len() {
                            self.sessions[m].resize_input(index, &produced.shape)?;
                        } else {
                            return Err(Error::InvalidModel(
                                format!("edge {model}:0:{out} -> {m}:0:{index}: shape {:?} cannot feed {:?}", produced.shape, want.shape).into(),
                            ));
                        }
                    }
                }
            }
            self.sessions[m].prepare()?;
        }
        let bytes = |d: &TensorDesc| d.shape.iter().product::<usize>() * d.dtype.size().unwrap_or(0);
        self.input_bufs = self.inputs().iter().map(|d| AlignedBytes::zeroed(bytes(d))).collect();
        self.output_bufs = self.sessions.iter().map(|s| s.outputs().iter().map(|d| AlignedBytes::zeroed(bytes(d))).collect()).collect();
        self.prepared = true;
        self.ran = false;
        Ok(())
    }

    /// Copies `data` into package input `i`.
    pub fn set_input(&mut self, i: usize, data: &[u8]) -> Result<()> {
        if !self.prepared {
            return Err(Error::InvalidState("set_input() must be called after prepare()".into()));
        }
        let b = self.input_bufs.get_mut(i).ok_or_else(|| Error::InvalidArgument(format!("package input {i} does not exist").into()))?;
        if b.bytes().len() != data.len() {
            return Err(Error::InvalidArgument(format!("package input {i} is {} bytes, got {}", b.bytes().len(), data.len()).into()));
        }
        b.bytes_mut().copy_from_slice(data);
        Ok(())
    }

    /// Runs every model once, in dependency order.
    pub fn run(&mut self) -> Result<()> {
        if !self.prepared {
            return Err(Error::InvalidState("run() must be called after prepare()".into()));
        }
        self.ran = false;
        for &m in &self.package.order {
            // Producers come earlier in `order`, so their buffers are complete; the
            // consumer reads them in place.
            let (before, rest) = self.output_bufs.split_at_mut(m);
            let (mine, after) = rest.split_first_mut().ok_or_else(|| Error::Runtime("internal: model index".into()))?;
            let input_bufs = &self.input_bufs;
            let ins: smallvec::SmallVec<[&[u8]; 8]> = self.feeds[m]
                .iter()
                .map(|f| match *f {
                    Feed::Package(k) => input_bufs[k].bytes(),
                    Feed::Edge { model, index } => {
                        let b = if model < m { &before[model] } else { &after[model - m - 1] };
                        b[index].bytes()
                    }
                })
                .collect();
            let mut outs: smallvec::SmallVec<[&mut [u8]; 4]> = mine.iter_mut().map(|b| b.bytes_mut()).collect();
            self.sessions[m].run_with(&ins, &mut outs)?;
        }
        self.ran = true;
        Ok(())
    }

    /// Package output `i` of the last run, read in place.
    pub fn output(&self, i: usize) -> Result<TensorData<'_>> {
        if !self.ran {
            return Err(Error::InvalidState("output() needs a completed run()".into()));
        }
        let d = *self.package.outputs.get(i).ok_or_else(|| Error::InvalidArgument(format!("package output {i} does not exist").into()))?;
        let desc = &self.sessions[d.model];
        let slot = desc.output_slot(d.index)?;
        Ok(TensorData { dtype: slot.0, shape: slot.1, bytes: self.output_bufs[d.model][d.index].bytes() })
    }

    /// Sum of the models' arenas and lower bounds.
    pub fn arena_stats(&self) -> Option<(usize, usize)> {
        self.sessions.iter().map(Session::arena_stats).try_fold((0, 0), |acc, s| s.map(|(a, l)| (acc.0 + a, acc.1 + l)))
    }
}
