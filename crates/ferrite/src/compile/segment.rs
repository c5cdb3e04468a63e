//! GPU segments: each maximal run of consecutive steps whose kernels the GPU
//! backend built becomes one step that uploads the host tensors the run reads
//! (at entry), runs every op of the run in one command submission with the
//! tensors between them kept in GPU buffers, and reads back the tensors that
//! leave the run (at exit): those a host step, the data-dependent tail or the
//! caller reads. The memory plan then gives host memory only to those crossings;
//! the run's intermediates live in the segment's GPU buffers, planned from their
//! lifetimes in `backend/gpu/segment.rs`.

use super::{Compilation, GpuPlan};
use crate::backend::BackendContext;
use crate::error::Result;

/// Replaces the runs of GPU steps of `c` by segment steps. Without the `gpu`
/// feature, or when no op went to the GPU, nothing changes.
#[cfg(not(feature = "gpu"))]
pub(super) fn form_segments(_c: &mut Compilation<'_>, _dynamic_from: Option<usize>, _ctx: &mut BackendContext) -> Result<GpuPlan> {
    Ok(GpuPlan::default())
}

/// Replaces the runs of GPU steps of `c` by segment steps. Without the `gpu`
/// feature, or when no op went to the GPU, nothing changes.
#[cfg(feature = "gpu")]
pub(super) fn form_segments(c: &mut Compilation<'_>, dynamic_from: Option<usize>, ctx: &mut BackendContext) -> Result<GpuPlan> {
    use super::{OpRun, SegmentIo, Step, Work};
    use crate::backend::gpu::segment::{Member, Segment};
    use smallvec::SmallVec;
    use std::collections::HashMap;

    let mut plan = GpuPlan::default();
    let sg = c.sg;
    // This subgraph's GPU ops leave the context now, whatever happens to them.
    let keys: Vec<(usize, usize)> = ctx.gpu.built.keys().filter(|k| k.0 == sg).copied().collect();
    let built: HashMap<usize, _> = keys.into_iter().filter_map(|k| ctx.gpu.built.remove(&k).map(|op| (k.1, op))).collect();
    let Some(dev) = ctx.gpu.device.clone() else { return Ok(plan) };
    if built.is_empty() {
        return Ok(plan);
    }
    let g = c.g;
    let alias_of = c.alias_of.clone();
    let root = |t: usize| alias_of[t];
    let steps = std::mem::take(&mut c.steps);
    let on_gpu: Vec<bool> = steps
        .iter()
        .map(|st| {
            matches!(st.work, Work::Kernel(_))
                && c.assignment.get(st.op) == Some(&OpRun::Backend("gpu"))
                && st.extra.is_empty()
                && st.io.is_none()
                && built.contains_key(&st.op)
        })
        .collect();
    // Who reads each tensor's memory (by alias root): steps, by index; and what
    // leaves the static steps (graph outputs, the dynamic tail's inputs).
    let mut readers: Vec<SmallVec<[usize; 4]>> = vec![SmallVec::new(); c.tensors.len()];
    for (si, st) in steps.iter().enumerate() {
        for t in st.reads(&g.ops[st.op]) {
            readers[root(t)].push(si);
        }
    }
    let mut escapes = vec![false; c.tensors.len()];
    for &t in &g.outputs {
        escapes[root(t)] = true;
    }
    if let Some(d) = dynamic_from {
        for op in &g.ops[d..] {
            for &t in op.inputs.iter().flatten() {
                escapes[root(t)] = true;
            }
        }
    }

    let n = steps.len();
    let mut pending: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
    let mut out: Vec<Step> = Vec::with_capacity(n);
    let mut si = 0;
    while si < n {
        if !on_gpu[si] {
            out.extend(pending[si].take());
            si += 1;
            continue;
        }
        let end = (si..n).find(|&j| !on_gpu[j]).unwrap_or(n);
        let mut members = Vec::with_capacity(end - si);
        let (mut reads, mut read_roots): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut produced: Vec<usize> = Vec::new();
        for st in pending[si..end].iter().flatten() {
            let op = &g.ops[st.op];
            let gop = built[&st.op].clone();
            let mut inputs = Vec::with_capacity(op.inputs.len());
            for (k, i) in op.inputs.iter().enumerate() {
                let t = i.map(|t| st.substituted.iter().find(|s| s.0 == k).map_or(t, |s| s.1));
                match (t, gop.inputs.get(k).copied().flatten()) {
                    (Some(t), Some(_)) => {
                        let r = root(t);
                        if !produced.contains(&r) && !read_roots.contains(&r) {
                            reads.push(t);
                            read_roots.push(r);
                        }
                        inputs.push(Some(r));
                    }
                    _ => inputs.push(None),
                }
            }
            produced.extend(op.outputs.iter().map(|&t| root(t)));
            members.push(Member { op: gop, inputs, outputs: op.outputs.iter().map(|&t| root(t)).collect() });
        }
        let mut writes: Vec<usize> = Vec::new();
        for st in pending[si..end].iter().flatten() {
            for &t in &g.ops[st.op].outputs {
                let r = root(t);
                if (escapes[r] || readers[r].iter().any(|&x| x < si || x >= end)) && !writes.contains(&t) {
                    writes.push(t);
                }
            }
        }
        let write_roots: Vec<usize> = writes.iter().map(|&t| root(t)).collect();
        let mut seg = Segment::new(dev.clone(), &members, &read_roots, &write_roots)?;
        seg.times = ctx.gpu.times.clone();
        plan.segments += 1;
        plan.ops += end - si;
        plan.buffer_bytes += seg.memory.buffer_bytes;
        plan.lower_bound_bytes += seg.memory.lower_bound_bytes;
        let first = pending[si].as_ref().map_or(0, |st| st.op);
        let ops = pending[si..end].iter().flatten().map(|st| (st.op, st.substituted.iter().map(|s| s.0).collect())).collect();
        // Shared with the executor, which runs it op by op when the run is observed.
        let seg = std::sync::Arc::new(std::sync::Mutex::new(seg));
        let by_op = crate::observe::OpByOpHandle(seg.clone());
        out.push(Step {
            op: first,
            work: Work::Kernel(Box::new(move |ins, outs| {
                seg.lock().map_err(|_| crate::error::Error::Runtime("GPU segment lock poisoned".into()))?.run(ins, outs)
            })),
            inputs: SmallVec::new(),
            prepacked: SmallVec::new(),
            outputs: SmallVec::new(),
            extra: SmallVec::new(),
            substituted: SmallVec::new(),
            io: Some(Box::new(SegmentIo { reads, writes, ops, by_op: Some(by_op) })),
            views: Default::default(),
        });
        si = end;
    }
    c.steps = out;
    Ok(plan)
}
