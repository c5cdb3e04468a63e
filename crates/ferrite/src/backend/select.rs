//! Which backend runs each op: a session's ordered backend list and per-op overrides.
//!
//! Each op goes to the first backend of the list that builds it (a backend refuses
//! an op it has no kernel for, for those types, shapes or attributes, with
//! `Error::Unsupported`); the CPU backend is always last, so every op ferrite
//! implements finds a kernel. An override pins ops, by type or by index in the
//! session's subgraph, to one backend (onert's `OP_BACKEND_*`): such an op runs
//! there or `prepare` fails saying why. Apps that cannot be rebuilt set
//! `FERRITE_BACKENDS=reference,cpu` and `FERRITE_OP_BACKEND="CONV_2D=cpu;17=reference"`.

use super::cpu::CpuBackend;
#[cfg(feature = "reference")]
use super::reference::ReferenceBackend;
use super::Backend;
use crate::error::{Error, Result};
use crate::model::Op;
use std::sync::Arc;

/// Names of the backends this build has, in the order `ferrite devices` lists them.
pub const BACKEND_NAMES: &[&str] = &[
    "cpu",
    #[cfg(feature = "reference")]
    "reference",
    #[cfg(feature = "gpu")]
    "gpu",
];

/// Where a backend keeps its tensors. Backends sharing a memory read each
/// other's tensors in place; a crossing between memories needs a copy step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Host memory: the session arena, the mapped model, caller buffers.
    Host,
    /// A GPU's buffers: tensors cross to and from the host by copies.
    Gpu,
}

impl Memory {
    /// Name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Memory::Host => "host",
            Memory::Gpu => "gpu",
        }
    }
}

/// Which ops an override applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpSelector {
    /// Every op of this type (`CONV_2D`, or a custom op's name).
    Type(String),
    /// The op at this index of the session's subgraph.
    Index(usize),
}

impl OpSelector {
    fn matches(&self, subgraph: usize, main: usize, op_index: usize, op: &Op) -> bool {
        match self {
            OpSelector::Type(name) => op.code.name() == *name,
            OpSelector::Index(i) => subgraph == main && op_index == *i,
        }
    }
}

/// Parses a comma- or semicolon-separated backend list (`reference,cpu`). Names
/// are checked when a session is created, which knows the custom backends too.
pub fn parse_backend_list(s: &str) -> Result<Vec<String>> {
    let names: Vec<String> = s.split([',', ';']).map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect();
    if names.is_empty() {
        return Err(Error::InvalidArgument(format!("backend list '{s}' names no backend").into()));
    }
    Ok(names)
}

/// Parses per-op overrides: `OP=backend` items (`CONV_2D=cpu`, `17=reference`),
/// separated by commas or semicolons.
pub fn parse_op_backends(s: &str) -> Result<Vec<(OpSelector, String)>> {
    s.split([',', ';']).map(str::trim).filter(|p| !p.is_empty()).map(parse_op_backend).collect()
}

/// Parses one `OP=backend` override.
pub fn parse_op_backend(item: &str) -> Result<(OpSelector, String)> {
    let (op, backend) = item
        .split_once('=')
        .ok_or_else(|| Error::InvalidArgument(format!("op backend '{item}' is not OP=BACKEND (e.g. CONV_2D=cpu or 17=reference)").into()))?;
    let (op, backend) = (op.trim(), backend.trim());
    if backend.is_empty() {
        return Err(Error::InvalidArgument(format!("op backend '{item}' names no backend").into()));
    }
    let selector = match op.parse::<usize>() {
        Ok(i) => OpSelector::Index(i),
        Err(_) if !op.is_empty() => OpSelector::Type(op.to_string()),
        Err(_) => return Err(Error::InvalidArgument(format!("op backend '{item}' names no op").into())),
    };
    Ok((selector, backend.to_string()))
}

/// Finds backend `name` among the built-ins and `custom`.
fn make(name: &str, custom: &[Arc<dyn Backend>]) -> Result<Arc<dyn Backend>> {
    Ok(match name {
        "cpu" => Arc::new(CpuBackend),
        #[cfg(feature = "reference")]
        "reference" => Arc::new(ReferenceBackend),
        #[cfg(feature = "gpu")]
        "gpu" => Arc::new(super::gpu::GpuBackend),
        _ => {
            if let Some(b) = custom.iter().find(|b| b.name() == name) {
                return Ok(b.clone());
            }
            let mut known: Vec<&str> = BACKEND_NAMES.to_vec();
            known.extend(custom.iter().map(|b| b.name()));
            return Err(Error::InvalidArgument(format!("unknown backend '{name}' (this session has: {})", known.join(", ")).into()));
        }
    })
}

/// A session's backends in order of preference, and its per-op overrides.
pub struct Backends {
    /// The listed backends (`cpu` last), then those only overrides name.
    list: Vec<Arc<dyn Backend>>,
    /// How many of `list` unpinned ops try, in order.
    listed: usize,
    overrides: Vec<(OpSelector, usize)>,
    /// The session's subgraph, which op-index overrides refer to.
    main: usize,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends").field("list", &self.names()).field("overrides", &self.overrides).finish()
    }
}

impl Backends {
    /// Builds the list from names (duplicates dropped, `cpu` appended when absent)
    /// and resolves the overrides' backend names, among the built-in backends and `custom`.
    pub fn new(names: &[String], overrides: &[(OpSelector, String)], custom: &[Arc<dyn Backend>]) -> Result<Backends> {
        // A custom backend may not take a built-in's name: `cpu` must stay the
        // complete kernel set every op falls back to.
        if let Some(b) = custom.iter().find(|b| BACKEND_NAMES.contains(&b.name())) {
            return Err(Error::InvalidArgument(format!("custom backend '{}' has the name of a built-in backend", b.name()).into()));
        }
        let mut order: Vec<&str> = Vec::new();
        for n in names {
            if !order.contains(&n.as_str()) {
                order.push(n);
            }
        }
        if !order.contains(&"cpu") {
            order.push("cpu");
        }
        let mut list = Vec::with_capacity(order.len() + overrides.len());
        for n in &order {
            list.push(make(n, custom)?);
        }
        let listed = list.len();
        let mut resolved = Vec::with_capacity(overrides.len());
        for (sel, name) in overrides {
            let i = match list.iter().position(|b| b.name() == name) {
                Some(i) => i,
                // An override may name a backend outside the list: it runs only the ops pinned to it.
                None => {
                    list.push(make(name, custom)?);
                    list.len() - 1
                }
            };
            resolved.push((sel.clone(), i));
        }
        Ok(Backends { list, listed, overrides: resolved, main: 0 })
    }

    /// The given backends, in order, with overrides pinning ops to backend indices:
    /// for tests of the assignment with backends made for them.
    #[cfg(test)]
    pub(crate) fn from_backends(list: Vec<Arc<dyn Backend>>, overrides: Vec<(OpSelector, usize)>) -> Backends {
        Backends { listed: list.len(), list, overrides, main: 0 }
    }

    /// Names of the listed backends, in order (override-only backends last).
    pub fn names(&self) -> Vec<&'static str> {
        self.list.iter().map(|b| b.name()).collect()
    }

    /// Backend `i`.
    pub fn get(&self, i: usize) -> Option<&dyn Backend> {
        self.list.get(i).map(|b| &**b)
    }

    /// Sets the session's subgraph, which op-index overrides refer to.
    pub fn set_main_subgraph(&mut self, subgraph: usize) {
        self.main = subgraph;
    }

    /// The backends to try for op `op_index` of `subgraph`, in order: the overriding
    /// backend alone when an override matches (the last matching one wins), else the list.
    pub fn candidates(&self, subgraph: usize, op_index: usize, op: &Op) -> Candidates {
        match self.overrides.iter().rev().find(|(sel, _)| sel.matches(subgraph, self.main, op_index, op)) {
            Some(&(_, i)) => Candidates::Pinned(i),
            None => Candidates::List(self.listed),
        }
    }
}

/// The backends an op may go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidates {
    /// Only this backend (an override).
    Pinned(usize),
    /// The first this many backends, in order.
    List(usize),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BuiltinOp, OpCode};
    use crate::ops::OpParams;

    fn op(code: BuiltinOp) -> Op {
        Op { code: OpCode::Builtin(code), version: 1, inputs: vec![], outputs: vec![], params: OpParams::None, custom_options: None }
    }

    #[test]
    fn cpu_is_always_last_and_names_are_checked() {
        let b = Backends::new(&["reference".into()], &[], &[]).unwrap();
        assert_eq!(b.names(), ["reference", "cpu"]);
        let b = Backends::new(&["cpu".into(), "reference".into(), "cpu".into()], &[], &[]).unwrap();
        assert_eq!(b.names(), ["cpu", "reference"]);
        assert!(matches!(Backends::new(&["gpu0".into()], &[], &[]), Err(Error::InvalidArgument(_))));
        assert_eq!(parse_backend_list(" reference ; cpu ").unwrap(), ["reference", "cpu"]);
    }

    #[test]
    fn overrides_pin_ops_by_type_and_index() {
        let ov = parse_op_backends("CONV_2D=reference, 3=reference;ADD=cpu").unwrap();
        assert_eq!(ov[1], (OpSelector::Index(3), "reference".into()));
        let b = Backends::new(&["cpu".into()], &ov, &[]).unwrap();
        // reference is only there for the overrides: unpinned ops use the list (cpu).
        assert_eq!(b.names(), ["cpu", "reference"]);
        assert_eq!(b.candidates(0, 0, &op(BuiltinOp::CONV_2D)), Candidates::Pinned(1));
        assert_eq!(b.candidates(0, 3, &op(BuiltinOp::MUL)), Candidates::Pinned(1));
        // An index selects ops of the session's subgraph only.
        assert_eq!(b.candidates(1, 3, &op(BuiltinOp::MUL)), Candidates::List(1));
        assert_eq!(b.candidates(0, 4, &op(BuiltinOp::ADD)), Candidates::Pinned(0));
        assert!(parse_op_backend("CONV_2D").is_err());
        assert!(parse_op_backend("=cpu").is_err());
        assert!(parse_op_backend("CONV_2D=").is_err());
        assert!(parse_backend_list(" ; ").is_err());
        // A name is checked against the session's backends, custom ones included.
        let tpu = parse_op_backends("CONV_2D=tpu").unwrap();
        assert!(matches!(Backends::new(&["cpu".into()], &tpu, &[]), Err(Error::InvalidArgument(_))));
    }
}

/// How the GPU backend stores tensors (`--gpu-precision`). Float16 halves GPU
/// memory and bandwidth; arithmetic stays float32 in both (see the shaders).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum GpuPrecision {
    /// float32 everywhere (the default; within 1e-5 of the reference kernels per op).
    #[default]
    Fp32,
    /// float16 tensors and weights on the GPU, float32 arithmetic: an opt-in for
    /// adapters with `SHADER_F16` (within about 2e-3 per op); a session asking for it
    /// on an adapter without it fails to prepare its GPU ops with that reason.
    Fp16,
}

impl std::str::FromStr for GpuPrecision {
    type Err = Error;

    /// `fp32` or `fp16`.
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "fp32" | "f32" | "float32" => Ok(GpuPrecision::Fp32),
            "fp16" | "f16" | "float16" => Ok(GpuPrecision::Fp16),
            other => Err(Error::InvalidArgument(format!("GPU precision '{other}': expected fp32 or fp16").into())),
        }
    }
}
