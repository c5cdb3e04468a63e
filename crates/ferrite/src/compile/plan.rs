//! Memory planning: tensor lifetimes over the steps, the static arena plan, and
//! each step's input and output locations resolved once, so running a step needs
//! no lookup.

use std::sync::Arc;

use super::{bytes_of, AlignedBytes, Limits, Loc, OutPlan, Src, Step, TensorSlot};
use crate::error::{Error, Result};
use crate::memory::{self, Lifetime, MemoryPlan};
use crate::model::Subgraph;

/// Plans the arena for the tensors the steps produce and read, on alias roots
/// (`alias_of[t]` is the tensor whose memory `t` shares), and gives each such
/// tensor its arena location.
pub(super) fn plan_memory(
    g: &Subgraph,
    sg: usize,
    steps: &[Step],
    tensors: &mut [TensorSlot],
    alias_of: &[usize],
    dynamic_from: Option<usize>,
    limits: &Limits,
) -> Result<MemoryPlan> {
    // Lifetimes, on alias roots: subgraph inputs from step 0, step outputs from their
    // step, each to its last use. Graph inputs and outputs stay valid for the whole run,
    // as in LiteRT: a caller may run again without setting inputs, and reads outputs after.
    let n_steps = steps.len();
    let root = |t: usize| alias_of[t];
    let mut first = vec![usize::MAX; tensors.len()];
    let mut last = vec![0usize; tensors.len()];
    for &t in &g.inputs {
        if matches!(tensors[root(t)].loc, Loc::None) {
            first[root(t)] = 0;
        }
    }
    for (si, st) in steps.iter().enumerate() {
        let op = &g.ops[st.op];
        for &t in st.writes(op) {
            first[root(t)] = first[root(t)].min(si);
            last[root(t)] = last[root(t)].max(si);
        }
        for t in st.reads(op) {
            if first[root(t)] != usize::MAX {
                last[root(t)] = last[root(t)].max(si);
            }
        }
    }
    for &t in g.inputs.iter().chain(&g.outputs) {
        if first[root(t)] != usize::MAX {
            last[root(t)] = n_steps.max(1) - 1;
        }
    }
    // Variable tensors no op produces (the state of recurrent ops, which their kernels
    // update in place) hold their values from one run to the next: they live over the
    // whole run, so no other tensor ever shares their memory.
    // What must outlive a run: graph inputs and outputs, and that state.
    let mut keep = vec![false; tensors.len()];
    for &t in g.inputs.iter().chain(&g.outputs) {
        keep[root(t)] = true;
    }
    for t in 0..tensors.len() {
        if g.tensors[t].is_variable
            && root(t) == t
            && first[t] == usize::MAX
            && matches!(tensors[t].loc, Loc::None)
            && steps.iter().any(|st| st.reads(&g.ops[st.op]).contains(&t))
        {
            first[t] = 0;
            last[t] = n_steps.max(1) - 1;
            keep[t] = true;
        }
    }
    // Tensors the dynamic tail reads must outlive every static step.
    if let Some(d) = dynamic_from {
        for op in &g.ops[d..] {
            for &t in op.inputs.iter().flatten() {
                if first[root(t)] != usize::MAX {
                    last[root(t)] = n_steps.max(1) - 1;
                }
            }
        }
    }
    let mut lifetimes = Vec::new();
    for t in 0..tensors.len() {
        // A STRING graph input has no fixed size: it is kept with the dynamic
        // tail's values (set_input puts it there), never in the arena.
        if root(t) == t && first[t] != usize::MAX && matches!(tensors[t].loc, Loc::None) && tensors[t].dtype != crate::model::DType::String {
            let b = bytes_of(tensors[t].dtype, &tensors[t].shape, limits, || format!("subgraph {sg} tensor {t} ('{}')", g.tensors[t].name))?;
            lifetimes.push(Lifetime { tensor: t, bytes: b, first: first[t], last: last[t].max(first[t]) });
        }
    }
    let plan = if limits.shared_scratch {
        memory::plan_split(&lifetimes, |t| keep[t], limits.max_arena_bytes)?
    } else {
        memory::plan(&lifetimes, limits.max_arena_bytes)?
    };
    let mut offset_of = vec![usize::MAX; tensors.len()];
    for &(t, offset) in &plan.offsets {
        offset_of[t] = offset;
    }
    for t in 0..tensors.len() {
        let off = offset_of[root(t)];
        if off != usize::MAX {
            let len = bytes_of(tensors[t].dtype, &tensors[t].shape, limits, || format!("subgraph {sg} tensor {t}"))?;
            tensors[t].loc = Loc::Arena { offset: off, len };
        }
    }

    Ok(plan)
}

/// Resolves every step's input and output locations, and how each graph output
/// reaches a caller-bound buffer (written in place by its producer, or copied).
pub(super) fn resolve_io(g: &Subgraph, sg: usize, steps: &mut [Step], tensors: &[TensorSlot], alias_of: &[usize]) -> Result<Vec<OutPlan>> {
    let root = |t: usize| alias_of[t];
    // Resolve every step's input and output locations once.
    let input_of_root = |t: usize| g.inputs.iter().position(|&i| root(i) == root(t));
    let src_of = |t: usize| -> Result<Src> {
        match &tensors[t].loc {
            Loc::Arena { offset, len } => Ok(match input_of_root(t) {
                Some(k) => Src::Input(k, *offset, *len),
                None => Src::Arena(*offset, *len),
            }),
            Loc::Model(r) => Ok(Src::Model(r.clone())),
            Loc::Owned(b) => Ok(Src::Owned(b.clone())),
            Loc::None => Err(Error::Runtime(format!("internal: subgraph {sg} tensor {t} has no storage").into())),
        }
    };
    // A graph output is written in place into a bound buffer when a step produces its
    // memory, nothing else reads that memory, and no other output or input shares it.
    let mut readers = vec![0usize; tensors.len()];
    for st in steps.iter() {
        for t in st.reads(&g.ops[st.op]) {
            readers[root(t)] += 1;
        }
    }
    let mut produced_by = vec![usize::MAX; tensors.len()];
    for (si, st) in steps.iter().enumerate() {
        for &t in st.writes(&g.ops[st.op]) {
            produced_by[root(t)] = si;
        }
    }
    let mut out_plans = Vec::with_capacity(g.outputs.len());
    let mut direct: Vec<(usize, usize, usize)> = Vec::new(); // (step, root, output k)
    for (k, &t) in g.outputs.iter().enumerate() {
        let r = root(t);
        let shared = g.outputs.iter().enumerate().any(|(j, &o)| j != k && root(o) == r) || input_of_root(t).is_some();
        if matches!(tensors[t].loc, Loc::Arena { .. }) && produced_by[r] != usize::MAX && readers[r] == 0 && !shared {
            direct.push((produced_by[r], r, k));
            out_plans.push(OutPlan::Direct);
        } else if matches!(tensors[t].loc, Loc::None) {
            // Produced by the dynamic tail: only known after the run.
            out_plans.push(OutPlan::Copy(Src::Owned(Arc::new(AlignedBytes::zeroed(0)))));
        } else {
            out_plans.push(OutPlan::Copy(src_of(t)?));
        }
    }
    for (si, st) in steps.iter_mut().enumerate() {
        let op = &g.ops[st.op];
        // A variable tensor an op reads is its state, which the kernel updates in place:
        // it reaches the kernel as a writable view after the op's outputs (in input
        // order), and its input slot is empty.
        let is_state = |t: usize| {
            g.tensors[t].is_variable && produced_by[root(t)] == usize::MAX && matches!(tensors[t].loc, Loc::Arena { .. }) && input_of_root(t).is_none()
        };
        if let Some(io) = &st.io {
            st.inputs = io.reads.iter().map(|&t| src_of(t).map(Some)).collect::<Result<_>>()?;
            let writes = io.writes.clone();
            st.outputs = writes
                .iter()
                .map(|&t| match tensors[t].loc {
                    Loc::Arena { offset, len } => Ok((offset, len, direct.iter().find(|d| d.0 == si && d.1 == root(t)).map(|d| d.2))),
                    _ => Err(Error::Runtime(format!("internal: subgraph {sg} segment output tensor {t} has no arena slot").into())),
                })
                .collect::<Result<_>>()?;
            continue;
        }
        st.inputs = op
            .inputs
            .iter()
            .enumerate()
            .map(|(k, i)| {
                i.map(|t| st.substituted.iter().find(|s| s.0 == k).map_or(t, |s| s.1))
                    .filter(|&t| !st.prepacked.contains(&k) && !is_state(t))
                    .map(src_of)
                    .transpose()
            })
            .collect::<Result<_>>()?;
        for &t in &st.extra {
            st.inputs.push(Some(src_of(t)?));
        }
        st.outputs = op
            .outputs
            .iter()
            .map(|&t| match tensors[t].loc {
                Loc::Arena { offset, len } => Ok((offset, len, direct.iter().find(|d| d.0 == si && d.1 == root(t)).map(|d| d.2))),
                _ => Err(Error::Runtime(format!("internal: subgraph {sg} op {} output tensor {t} has no arena slot", st.op).into())),
            })
            .collect::<Result<_>>()?;
        for t in op.inputs.iter().flatten().copied().filter(|&t| is_state(t)) {
            if let Loc::Arena { offset, len } = tensors[t].loc {
                st.outputs.push((offset, len, None));
            }
        }
    }
    Ok(out_plans)
}

#[cfg(test)]
mod tests {
    use super::super::fusion::tests::{op, tensor};
    use super::super::Work;
    use super::*;
    use crate::model::{BuiltinOp as B, DType};
    use crate::ops::OpParams;
    use smallvec::SmallVec;

    fn step(op: usize) -> Step {
        Step {
            op,
            work: Work::Kernel(Box::new(|_, _| Ok(()))),
            inputs: SmallVec::new(),
            prepacked: SmallVec::new(),
            outputs: SmallVec::new(),
            extra: SmallVec::new(),
            substituted: SmallVec::new(),
            io: None,
            views: Default::default(),
        }
    }

    /// x -RELU-> a -RELU-> b -RELU-> c -RELU-> y, 1 KiB each: the graph input and
    /// output live all run, the intermediates two steps each.
    fn chain() -> (Subgraph, Vec<TensorSlot>) {
        let g = Subgraph {
            name: String::new(),
            tensors: (0..5).map(|_| tensor(DType::F32, &[256])).collect(),
            ops: (0..4).map(|i| op(B::RELU, &[i], &[i + 1], OpParams::None)).collect(),
            inputs: vec![0],
            outputs: vec![4],
        };
        let slots = g.tensors.iter().map(|t| TensorSlot { dtype: t.dtype, shape: t.shape.clone(), loc: Loc::None }).collect();
        (g, slots)
    }

    #[test]
    fn chain_reuses_memory_down_to_its_lower_bound() {
        let (g, mut tensors) = chain();
        let steps: Vec<Step> = (0..4).map(step).collect();
        let alias: Vec<usize> = (0..5).collect();
        let limits = Limits { max_arena_bytes: 1 << 20, shared_scratch: false, fuse_chains: true };
        let plan = plan_memory(&g, 0, &steps, &mut tensors, &alias, None, &limits).unwrap();
        // At each step three tensors are live: the graph input x (all run) and the
        // step's own input and output.
        assert_eq!(plan.lower_bound_bytes, 3 * 1024);
        assert_eq!(plan.arena_bytes, plan.lower_bound_bytes);
        let at = |t: usize| match tensors[t].loc {
            Loc::Arena { offset, len } => (offset, len),
            _ => panic!("tensor {t} not in the arena"),
        };
        // a (read by step 1) and c (written by step 2) are never alive together: they share.
        assert_eq!(at(1).0, at(3).0);
        assert_ne!(at(0).0, at(4).0);
    }

    #[test]
    fn aliased_tensors_share_their_root_and_limits_are_enforced() {
        let (g, mut tensors) = chain();
        let steps: Vec<Step> = (0..4).map(step).collect();
        // b is an alias of a (a RESHAPE that moved no data).
        let mut alias: Vec<usize> = (0..5).collect();
        alias[2] = 1;
        let plan =
            plan_memory(&g, 0, &steps, &mut tensors.clone(), &alias, None, &Limits { max_arena_bytes: 1 << 20, shared_scratch: false, fuse_chains: true })
                .unwrap();
        assert!(plan.offsets.iter().all(|&(t, _)| t != 2));
        let err = plan_memory(&g, 0, &steps, &mut tensors, &alias, None, &Limits { max_arena_bytes: 1000, shared_scratch: false, fuse_chains: true });
        assert!(matches!(err, Err(Error::ResourceLimit(_))), "{err:?}");
    }

    #[test]
    fn a_plan_for_a_shared_arena_keeps_inputs_and_outputs_in_the_own_region() {
        let (g, mut tensors) = chain();
        let steps: Vec<Step> = (0..4).map(step).collect();
        let alias: Vec<usize> = (0..5).collect();
        let plan =
            plan_memory(&g, 0, &steps, &mut tensors, &alias, None, &Limits { max_arena_bytes: 1 << 20, shared_scratch: true, fuse_chains: true }).unwrap();
        let at = |t: usize| match tensors[t].loc {
            Loc::Arena { offset, .. } => offset,
            _ => panic!("tensor {t} not in the arena"),
        };
        // x and y below the split, the intermediates a, b, c above it (two at a time).
        assert_eq!(plan.own_bytes, 2 * 1024);
        assert!(at(0) < plan.own_bytes && at(4) < plan.own_bytes);
        assert!((1..4).all(|t| at(t) >= plan.own_bytes));
        assert_eq!(plan.arena_bytes, 4 * 1024);
    }

    #[test]
    fn outputs_written_in_place_when_nothing_else_reads_them() {
        let (g, mut tensors) = chain();
        let mut steps: Vec<Step> = (0..4).map(step).collect();
        let alias: Vec<usize> = (0..5).collect();
        plan_memory(&g, 0, &steps, &mut tensors, &alias, None, &Limits { max_arena_bytes: 1 << 20, shared_scratch: false, fuse_chains: true }).unwrap();
        let out = resolve_io(&g, 0, &mut steps, &tensors, &alias).unwrap();
        assert!(matches!(out[..], [OutPlan::Direct]));
        // The last step writes graph output 0 straight into a bound buffer; the first reads graph input 0.
        assert_eq!(steps[3].outputs[0].2, Some(0));
        assert!(matches!(steps[0].inputs[0], Some(Src::Input(0, _, _))));
    }
}
