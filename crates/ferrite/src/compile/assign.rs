//! Backend assignment: each op goes to the first backend of the session's list
//! that builds it (or to the one an override pins it to); the build infers the op's
//! output types and shapes. Where consecutive ops run on different backends the
//! tensor between them is a crossing, reported by `inspect --backends`.

use super::{Compilation, Crossing, Env, Loc, OpRun};
use crate::backend::select::{Backends, Candidates};
use crate::backend::{BackendContext, Built, CustomOpRegistry, EpilogueSlot, InputDesc, KernelFn, OpContext};
use crate::error::{Detail, Error, Result};
use crate::model::{OpCode, Subgraph};
use smallvec::SmallVec;

/// An op built by its backend, before the later passes decide what becomes of it.
pub(super) struct Assigned {
    /// Its kernel.
    pub(super) kernel: KernelFn,
    /// Whether the kernel applies the epilogue it was offered.
    pub(super) applies_epilogues: bool,
    /// Every input's value is known at prepare.
    pub(super) all_const: bool,
    /// Inputs read from another tensor: (input slot, tensor).
    pub(super) substituted: SmallVec<[(usize, usize); 1]>,
}

/// Builds op `oi` on its backend and records the backend and the output types and
/// shapes it gives. `held` is where the op's inputs are; `pad` the input a folded
/// PAD leaves its reader (and the padding); `epilogue` the slot offered to a
/// kernel that may apply epilogues. `None` when the op's shapes depend on run-time
/// values.
pub(super) fn assign(
    c: &mut Compilation<'_>,
    env: &Env<'_>,
    ctx: &mut BackendContext,
    oi: usize,
    held: &[Option<Loc>],
    pad: Option<(usize, [usize; 4])>,
    epilogue: Option<&EpilogueSlot>,
) -> Result<Option<Assigned>> {
    let g = c.g;
    let op = &g.ops[oi];
    let mut inputs: Vec<Option<InputDesc<'_>>> = op
        .inputs
        .iter()
        .enumerate()
        .map(|(k, i)| {
            i.map(|t| InputDesc {
                tensor: t,
                dtype: c.tensors[t].dtype,
                shape: c.tensors[t].shape.clone(),
                value: c.value(held, k),
                constant: c.value(held, k).is_some(),
                quant: g.tensors[t].quant.as_ref(),
                sparsity: g.tensors[t].sparsity.as_ref(),
            })
        })
        .collect();
    // A reader of a folded PAD: input 0 becomes the PAD's input, padded explicitly.
    let mut input_pad = None;
    let mut substituted: SmallVec<[(usize, usize); 1]> = SmallVec::new();
    if let (Some((src, pads)), Some(Some(d))) = (pad, inputs.get_mut(0)) {
        d.tensor = src;
        d.shape = c.tensors[src].shape.clone();
        d.value = None;
        d.constant = false;
        input_pad = Some(pads);
        substituted.push((0, src));
    }
    // String tensors live only in the dynamic tail (their size is their data's):
    // an op reading a string known only at run time runs there.
    if inputs.iter().flatten().any(|d| d.dtype == crate::model::DType::String && d.value.is_none()) {
        return Ok(None);
    }
    let all_const = inputs.iter().flatten().all(|d| d.value.is_some());
    let octx = OpContext {
        subgraph: c.sg,
        op_index: oi,
        op,
        inputs,
        outputs: op.outputs.iter().map(|&o| &g.tensors[o]).collect(),
        custom_options: env.model.custom_options(op),
        epilogue: epilogue.cloned(),
        input_pad,
        max_bytes: env.limits.max_arena_bytes,
    };
    ctx.take_packed_by_build();
    let (Built { outputs, kernel }, ran, applies_epilogues) = match build_op(&octx, env.backends, env.custom, ctx) {
        Err(Error::DataDependent(_)) => return Ok(None),
        r => r?,
    };
    c.assignment[oi] = ran;
    for (&t, (dtype, shape)) in op.outputs.iter().zip(outputs) {
        c.tensors[t].dtype = dtype;
        c.tensors[t].shape = shape;
    }
    Ok(Some(Assigned { kernel, applies_epilogues, all_const, substituted }))
}

/// Builds one op through the custom-op registry or the backends, and checks what
/// the kernel says it produces against the model.
pub(crate) fn build_op(octx: &OpContext<'_>, backends: &Backends, custom: &CustomOpRegistry, ctx: &mut BackendContext) -> Result<(Built, OpRun, bool)> {
    let op = octx.op;
    let (built, ran, applies_epilogues) = match &op.code {
        OpCode::Custom(name) => {
            // A listed backend with its own kernel for this custom op goes first.
            let mut own = None;
            if let Candidates::List(n) = backends.candidates(octx.subgraph, octx.op_index, op) {
                for b in (0..n).filter_map(|i| backends.get(i)).filter(|b| b.builds_custom(name)) {
                    match b.build(octx, ctx) {
                        Ok(built) => {
                            own = Some((built, OpRun::Backend(b.name()), false));
                            break;
                        }
                        Err(Error::Unsupported(m)) => {
                            let (sg, oi) = (octx.subgraph, octx.op_index);
                            if !ctx.refusals.iter().any(|r| (r.0, r.1, r.2) == (sg, oi, b.name())) {
                                ctx.refusals.push((sg, oi, b.name(), m.to_string()));
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            match (own, custom.get(name)) {
                (Some(o), _) => o,
                (None, Some(c)) => (c.build_with_pool(octx, ctx.pool())?, OpRun::Custom, false),
                (None, None) => return Err(octx.unsupported(format!("custom op '{name}' is not registered"))),
            }
        }
        OpCode::Other(_) => return Err(octx.unsupported("ferrite has no kernel for this builtin op yet")),
        OpCode::Builtin(_) => match backends.candidates(octx.subgraph, octx.op_index, op) {
            Candidates::Pinned(i) => {
                let b = backends.get(i).ok_or_else(|| octx.unsupported("no backend"))?;
                match b.build(octx, ctx) {
                    Ok(built) => (built, OpRun::Backend(b.name()), b.applies_epilogues(octx)),
                    Err(Error::Unsupported(m)) => {
                        return Err(Error::Unsupported(format!("{m} (the op is pinned to the {} backend by an op-backend override)", b.name()).into()))
                    }
                    Err(e) => return Err(e),
                }
            }
            Candidates::List(n) => {
                let mut last = None;
                let mut found = None;
                let mut refused: SmallVec<[(&'static str, String); 2]> = SmallVec::new();
                for b in (0..n).filter_map(|i| backends.get(i)) {
                    match b.build(octx, ctx) {
                        Ok(built) => {
                            found = Some((built, OpRun::Backend(b.name()), b.applies_epilogues(octx)));
                            break;
                        }
                        Err(Error::Unsupported(m)) => {
                            refused.push((b.name(), m.to_string()));
                            last = Some(Error::Unsupported(m))
                        }
                        Err(e) => return Err(e),
                    }
                }
                if found.is_some() {
                    for (b, why) in refused {
                        let (sg, oi) = (octx.subgraph, octx.op_index);
                        if !ctx.refusals.iter().any(|r| (r.0, r.1, r.2) == (sg, oi, b)) {
                            ctx.refusals.push((sg, oi, b, why));
                        }
                    }
                }
                match found {
                    Some(f) => f,
                    None => return Err(last.unwrap_or_else(|| octx.unsupported("no backend"))),
                }
            }
        },
    };
    if built.outputs.len() != op.outputs.len() {
        return Err(octx.bad(format!("kernel produces {} outputs, the model lists {}", built.outputs.len(), op.outputs.len())));
    }
    for (k, (dtype, _)) in built.outputs.iter().enumerate() {
        let declared = octx.outputs[k].dtype;
        if *dtype != declared {
            return Err(octx.unsupported(format!(
                "output {k} is declared {} but this kernel computes {} (quantized kernels are not implemented yet)",
                declared.name(),
                dtype.name()
            )));
        }
    }
    if let Some((_, s)) = built.outputs.iter().find(|(_, s)| s.len() > ferrite_kernels::MAX_DIMS) {
        return Err(octx.unsupported(format!("output rank {} exceeds {}", s.len(), ferrite_kernels::MAX_DIMS)));
    }
    // An empty tensor's other dims stay within the session limit, as if its zero dims
    // were 1: kernels loop over them ([0, 2^20, 2^20] holds nothing but is a hang).
    // Other shapes are sized against the limit where they are planned.
    let fits = |s: &[usize]| !s.contains(&0) || s.iter().try_fold(1usize, |a, &d| a.checked_mul(d.max(1))).is_some_and(|n| n <= octx.max_bytes);
    let shapes = octx.inputs.iter().flatten().map(|d| &d.shape[..]).chain(built.outputs.iter().map(|(_, s)| &s[..]));
    if let Some(s) = shapes.into_iter().find(|s| !fits(s)) {
        return Err(Error::ResourceLimit(Detail::at(octx.location(), format!("shape {s:?} exceeds the session limit of {} bytes", octx.max_bytes))));
    }
    Ok((built, ran, applies_epilogues))
}

/// The tensors of subgraph `sg` (graph `g`) passed between ops of different
/// backends under `assignment`. An op fused into a kernel or aliased to its input
/// counts as running where that kernel (or its input's producer) runs.
pub(super) fn crossings(g: &Subgraph, sg: usize, assignment: &[OpRun]) -> Vec<Crossing> {
    let mut producer = vec![usize::MAX; g.tensors.len()];
    for (oi, op) in g.ops.iter().enumerate() {
        for &t in &op.outputs {
            producer[t] = oi;
        }
    }
    // The backend whose kernel computes op `oi`'s outputs (following fusions and aliases).
    let resolve = |mut oi: usize| -> Option<&'static str> {
        for _ in 0..g.ops.len() + 1 {
            match assignment.get(oi)? {
                OpRun::Backend(b) => return Some(b),
                OpRun::Custom => return Some("custom"),
                OpRun::Executor => return Some("executor"),
                OpRun::Fused { into } if *into != oi => oi = *into,
                OpRun::Alias => {
                    let src = g.ops[oi].inputs.first().copied().flatten()?;
                    oi = *producer.get(src).filter(|&&p| p != usize::MAX)?;
                }
                _ => return None,
            }
        }
        None
    };
    let mut out: Vec<Crossing> = Vec::new();
    for (oi, op) in g.ops.iter().enumerate() {
        if !matches!(assignment.get(oi), Some(OpRun::Backend(_) | OpRun::Custom)) {
            continue;
        }
        let Some(to) = resolve(oi) else { continue };
        for &t in op.inputs.iter().flatten() {
            let p = producer[t];
            if p == usize::MAX {
                continue;
            }
            match resolve(p) {
                Some(from) if from != to && !out.iter().any(|c| c.tensor == t && c.to.1 == to) => {
                    let transfer = match (from, to) {
                        ("gpu", _) => "copy (GPU readback)",
                        (_, "gpu") => "copy (GPU upload)",
                        _ => "in place (host memory)",
                    };
                    out.push(Crossing { subgraph: sg, tensor: t, from: (p, from), to: (oi, to), transfer })
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fusion::tests::{op, tensor};
    use super::super::test_util::{compile_on, LIMITS};
    use super::*;
    use crate::backend::select::OpSelector;
    use crate::backend::Backend;
    use crate::model::{BuiltinOp as B, DType};
    use crate::ops::OpParams;
    use ferrite_format::writer::{BuiltinOperator as W, ModelSpec, OpCode as WOp, Options, TensorSpec, TensorType};

    /// A backend with kernels for `ops` only; they produce the declared outputs.
    struct Only {
        name: &'static str,
        ops: &'static [B],
    }

    impl Backend for Only {
        fn name(&self) -> &'static str {
            self.name
        }
        fn build(&self, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Result<Built> {
            if !op.op.code.builtin().is_some_and(|b| self.ops.contains(&b)) {
                return Err(op.unsupported(format!("{} has no kernel", self.name)));
            }
            Ok(Built { outputs: op.outputs.iter().map(|t| (t.dtype, t.shape.clone())).collect(), kernel: Box::new(|_, _| Ok(())) })
        }
    }

    fn backends(list: &[(&'static str, &'static [B])], pins: Vec<(OpSelector, usize)>) -> Backends {
        Backends::from_backends(list.iter().map(|&(name, ops)| std::sync::Arc::new(Only { name, ops }) as std::sync::Arc<dyn Backend>).collect(), pins)
    }

    /// x -RELU-> a -NEG-> b -RELU-> y, all float [4].
    fn chain() -> ModelSpec {
        let mut m = ModelSpec::default();
        let t: Vec<i32> = ["x", "a", "b", "y"].iter().map(|n| m.add_tensor(TensorSpec::activation(n, TensorType::FLOAT32, &[4]))).collect();
        m.add_op(WOp::Builtin(W::RELU), &[t[0]], &[t[1]], Options::None);
        m.add_op(WOp::Builtin(W::NEG), &[t[1]], &[t[2]], Options::None);
        m.add_op(WOp::Builtin(W::RELU), &[t[2]], &[t[3]], Options::None);
        (m.inputs, m.outputs) = (vec![t[0]], vec![t[3]]);
        m
    }

    const FIRST: (&str, &[B]) = ("first", &[B::RELU]);
    const SECOND: (&str, &[B]) = ("second", &[B::RELU, B::NEG]);

    #[test]
    fn each_op_goes_to_the_first_backend_that_builds_it_and_crossings_are_recorded() {
        let (model, cg) = compile_on(&chain(), &backends(&[FIRST, SECOND], vec![]), LIMITS).unwrap();
        assert_eq!(cg.assignment, [OpRun::Backend("first"), OpRun::Backend("second"), OpRun::Backend("first")]);
        let crossings: Vec<_> = cg.crossings(&model).into_iter().map(|c| (c.tensor, c.from, c.to)).collect();
        assert_eq!(crossings, [(1, (0, "first"), (1, "second")), (2, (1, "second"), (2, "first"))]);
        // In the other order the second backend takes every op: nothing crosses.
        let (model, cg) = compile_on(&chain(), &backends(&[SECOND, FIRST], vec![]), LIMITS).unwrap();
        assert_eq!(cg.assignment, [OpRun::Backend("second"); 3]);
        assert!(cg.crossings(&model).is_empty());
    }

    #[test]
    fn an_override_pins_an_op_or_fails_saying_so() {
        let pin_last_relu = vec![(OpSelector::Index(2), 1)];
        let (_, cg) = compile_on(&chain(), &backends(&[FIRST, SECOND], pin_last_relu), LIMITS).unwrap();
        assert_eq!(cg.assignment[2], OpRun::Backend("second"));
        let pin_neg = vec![(OpSelector::Type("NEG".into()), 0)];
        let err = compile_on(&chain(), &backends(&[FIRST, SECOND], pin_neg), LIMITS).map(|_| ()).unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("pinned to the first backend"), "{err}");
        // No backend builds NEG: the last refusal is the error.
        let err = compile_on(&chain(), &backends(&[FIRST], vec![]), LIMITS).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("first has no kernel"), "{err}");
    }

    #[test]
    fn crossings_follow_aliases_and_fusions_to_the_kernel_computing_the_tensor() {
        // x -RELU-> a -RESHAPE-> b -RELU-> c -RELU-> y.
        let g = Subgraph {
            name: String::new(),
            tensors: (0..5).map(|_| tensor(DType::F32, &[4])).collect(),
            ops: vec![
                op(B::RELU, &[0], &[1], OpParams::None),
                op(B::RESHAPE, &[1], &[2], OpParams::Reshape { new_shape: None }),
                op(B::RELU, &[2], &[3], OpParams::None),
                op(B::RELU, &[3], &[4], OpParams::None),
            ],
            inputs: vec![0],
            outputs: vec![4],
        };
        let run = |a: [OpRun; 4]| crossings(&g, 0, &a).into_iter().map(|c| (c.tensor, c.from, c.to)).collect::<Vec<_>>();
        let (r, c) = (OpRun::Backend("reference"), OpRun::Backend("cpu"));
        // The RESHAPE's output comes from the RELU before it, on reference.
        assert_eq!(run([r, OpRun::Alias, c, c]), [(2, (1, "reference"), (2, "cpu"))]);
        // Op 2 fused into op 0's kernel: c is computed on reference.
        assert_eq!(run([r, OpRun::Alias, OpRun::Fused { into: 0 }, c]), [(3, (2, "reference"), (3, "cpu"))]);
        assert!(run([c, OpRun::Alias, c, c]).is_empty());
        // A folded producer hands over a constant: no crossing there.
        assert_eq!(run([OpRun::Folded, OpRun::Alias, c, r]), [(3, (2, "cpu"), (3, "reference"))]);
    }
}
