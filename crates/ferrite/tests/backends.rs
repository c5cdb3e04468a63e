//! The op table's arity check and sessions over several backends.
//!
//! - Every op of the table refuses, at load, a model that gives it too few or too
//!   many inputs or outputs, or omits a required input: before this check, an empty
//!   or short `outputs` list made `prepare()` panic in 16 builders.
//! - A model run on `cpu`, on `reference` (falling back to `cpu` op by op), and split
//!   op by op between the two gives the same results; the session reports where each
//!   op ran and which tensors cross between backends.
//! - A backend the application writes (the `ext` module) takes the ops it supports
//!   and leaves the rest to the next backend of the list.

use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

use ferrite::ext::{arg, typed, typed_mut, Backend, BackendContext, Built, OpContext};
use ferrite::model::{BuiltinOp, Model, MANY};
use ferrite::{parse_op_backends, DType, Error, OpRun, OpSelector, Session, SessionOptions};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{ModelSpec, OpCode, Options, TensorSpec};

/// One op with `n_in` float inputs of shape [2, 3] (the first `omit` of them given
/// as -1) and `n_out` outputs.
fn single_op(op: BuiltinOp, n_in: usize, n_out: usize, omit: usize) -> Vec<u8> {
    let mut m = ModelSpec::default();
    let ins: Vec<i32> =
        (0..n_in).map(|k| if k < omit { -1 } else { m.add_tensor(TensorSpec::activation(&format!("in{k}"), TensorType::FLOAT32, &[2, 3])) }).collect();
    let outs: Vec<i32> = (0..n_out).map(|k| m.add_tensor(TensorSpec::activation(&format!("out{k}"), TensorType::FLOAT32, &[2, 3]))).collect();
    m.add_op(OpCode::Builtin(op.operator()), &ins, &outs, Options::None);
    m.inputs = ins.iter().copied().filter(|&i| i >= 0).collect();
    m.outputs = outs;
    m.to_bytes().unwrap()
}

fn load_error(bytes: Vec<u8>) -> Option<String> {
    match Model::from_bytes(Arc::new(bytes)) {
        Ok(_) => None,
        Err(Error::InvalidModel(m)) => Some(m.to_string()),
        Err(e) => panic!("expected an invalid-model error, got {e}"),
    }
}

#[test]
fn every_op_refuses_a_wrong_arity_at_load() {
    let mut checked = 0;
    for &op in BuiltinOp::ALL {
        let (ins, outs) = (op.inputs(), op.outputs());
        let n_in = ins.min.max(1).min(ins.max);
        if outs.min > 0 {
            let m = load_error(single_op(op, n_in, outs.min - 1, 0)).unwrap_or_else(|| panic!("{op}: too few outputs accepted"));
            assert!(m.contains(op.name()) && m.contains("outputs"), "{op}: {m}");
            checked += 1;
        }
        if outs.max != MANY {
            let m = load_error(single_op(op, n_in, outs.max + 1, 0)).unwrap_or_else(|| panic!("{op}: too many outputs accepted"));
            assert!(m.contains("outputs"), "{op}: {m}");
            checked += 1;
        }
        if ins.min > 0 {
            let m = load_error(single_op(op, ins.min - 1, outs.min.max(1).min(outs.max), 0)).unwrap_or_else(|| panic!("{op}: too few inputs accepted"));
            assert!(m.contains("inputs"), "{op}: {m}");
            let m = load_error(single_op(op, ins.min, outs.min.max(1).min(outs.max), 1)).unwrap_or_else(|| panic!("{op}: omitted required input accepted"));
            assert!(m.contains("required input 0"), "{op}: {m}");
            checked += 2;
        }
        if ins.max != MANY {
            let m = load_error(single_op(op, ins.max + 1, outs.min.max(1).min(outs.max), 0)).unwrap_or_else(|| panic!("{op}: too many inputs accepted"));
            assert!(m.contains("inputs"), "{op}: {m}");
            checked += 1;
        }
    }
    println!("{checked} wrong-arity models refused over {} ops", BuiltinOp::ALL.len());
    assert!(checked > 300);
}

fn demo_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/demo.tflite")
}

fn run_with(backends: &[&str], overrides: &str) -> (Vec<f32>, Vec<(usize, usize, OpRun)>, usize) {
    let model = Arc::new(Model::from_file(demo_path()).unwrap());
    let options = SessionOptions {
        backends: backends.iter().map(|b| b.to_string()).collect(),
        op_backends: parse_op_backends(overrides).unwrap(),
        ..SessionOptions::default()
    };
    let mut s = Session::with_options(model, options).unwrap();
    s.prepare().unwrap();
    let n: usize = s.inputs()[0].shape.iter().product();
    let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
    s.set_input_f32(0, &x).unwrap();
    s.run().unwrap();
    let y = s.output(0).unwrap().to_f32().unwrap();
    (y, s.op_assignments().unwrap(), s.backend_crossings().unwrap().len())
}

fn worst(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn reference_cpu_and_alternating_backends_agree() {
    let (cpu, cpu_ops, cpu_crossings) = run_with(&["cpu"], "");
    assert!(cpu_ops.iter().all(|(_, _, r)| !matches!(r, OpRun::Backend(b) if *b != "cpu")), "{cpu_ops:?}");
    assert_eq!(cpu_crossings, 0);

    let (reference, ref_ops, _) = run_with(&["reference"], "");
    let on_reference = ref_ops.iter().filter(|(_, _, r)| *r == OpRun::Backend("reference")).count();
    let e = worst(&cpu, &reference);
    println!("reference backend: {on_reference} of {} ops, worst error against cpu {e:.3e}", ref_ops.len());
    assert!(e <= 1e-5, "reference vs cpu: {e}");

    // Even ops on reference, odd ones on cpu: every tensor crosses.
    let n = cpu_ops.len();
    let alternate: Vec<String> = (0..n).map(|i| format!("{i}={}", if i % 2 == 0 { "reference" } else { "cpu" })).collect();
    let (mixed, mixed_ops, _) = run_with(&["reference", "cpu"], &alternate.join(","));
    let e = worst(&cpu, &mixed);
    println!("alternating reference/cpu: worst error against cpu {e:.3e}");
    assert!(e <= 1e-5, "alternating vs cpu: {e}");
    for (_, oi, r) in &mixed_ops {
        if let OpRun::Backend(b) = r {
            assert_eq!(*b, if oi % 2 == 0 { "reference" } else { "cpu" }, "op {oi}");
        }
    }
}

#[test]
fn pinned_op_runs_where_it_is_pinned_or_fails_saying_so() {
    let (_, ops, _) = run_with(&["reference"], "SOFTMAX=cpu");
    let softmax = ops.iter().find(|(sg, oi, _)| *sg == 0 && *oi == 4).map(|x| x.2);
    assert_eq!(softmax, Some(OpRun::Backend("cpu")));
    let sel = parse_op_backends("17=reference").unwrap();
    assert_eq!(sel[0].0, OpSelector::Index(17));
    let bad =
        Session::with_options(Arc::new(Model::from_file(demo_path()).unwrap()), SessionOptions { backends: vec!["tpu".into()], ..SessionOptions::default() });
    assert!(matches!(bad, Err(Error::InvalidArgument(m)) if m.message.contains("unknown backend 'tpu'")));
}

/// An application's backend: float ABS only, counting the kernels it built.
struct AbsOnly {
    built: AtomicUsize,
}

impl Backend for AbsOnly {
    fn name(&self) -> &'static str {
        "abs-only"
    }

    fn build(&self, op: &OpContext<'_>, _ctx: &mut BackendContext) -> ferrite::Result<Built> {
        let x = op.input(0)?;
        if op.op.code.builtin() != Some(BuiltinOp::ABS) || x.dtype != DType::F32 {
            return Err(op.unsupported("abs-only runs float ABS"));
        }
        self.built.fetch_add(1, Ordering::Relaxed);
        Ok(Built {
            outputs: vec![(DType::F32, x.shape.clone())],
            kernel: Box::new(|ins, outs| {
                let x = typed::<f32>(arg(ins, 0)?)?;
                let y = typed_mut::<f32>(&mut *outs[0])?;
                // Negated on purpose: a result that only this kernel gives shows it ran.
                y.iter_mut().zip(x).for_each(|(y, x)| *y = -x.abs());
                Ok(())
            }),
        })
    }
}

/// x -> ABS -> ADD(·, x) -> y.
fn abs_add_model() -> Vec<u8> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 3]));
    let a = m.add_tensor(TensorSpec::activation("a", TensorType::FLOAT32, &[2, 3]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2, 3]));
    m.add_op(OpCode::Builtin(BuiltinOp::ABS.operator()), &[x], &[a], Options::None);
    m.add_op(OpCode::Builtin(BuiltinOp::ADD.operator()), &[a, x], &[y], Options::Binary { activation: ferrite_format::writer::Activation::NONE });
    m.inputs = vec![x];
    m.outputs = vec![y];
    m.to_bytes().unwrap()
}

#[test]
fn an_application_backend_takes_its_ops_and_leaves_the_rest() {
    let model = Arc::new(Model::from_bytes(Arc::new(abs_add_model())).unwrap());
    let backend = Arc::new(AbsOnly { built: AtomicUsize::new(0) });
    let x = [-1.5f32, 2.0, -0.25, 0.0, 3.0, -4.0];
    // One backend value serves two sessions; each session keeps its own state.
    for _ in 0..2 {
        let options = SessionOptions { backends: vec!["abs-only".into(), "cpu".into()], custom_backends: vec![backend.clone()], ..SessionOptions::default() };
        let mut s = Session::with_options(model.clone(), options).unwrap();
        s.prepare().unwrap();
        s.set_input_f32(0, &x).unwrap();
        s.run().unwrap();
        let y = s.output(0).unwrap().to_f32().unwrap();
        let want: Vec<f32> = x.iter().map(|v| v - v.abs()).collect();
        assert_eq!(y, want);
        let runs: Vec<OpRun> = s.op_assignments().unwrap().into_iter().map(|(_, _, r)| r).collect();
        assert_eq!(runs, [OpRun::Backend("abs-only"), OpRun::Backend("cpu")]);
        let crossings = s.backend_crossings().unwrap();
        assert_eq!(crossings.len(), 1, "{crossings:?}");
        assert_eq!((crossings[0].from.1, crossings[0].to.1), ("abs-only", "cpu"));
        assert_eq!(s.backend_names(), ["abs-only", "cpu"]);
    }
    assert_eq!(backend.built.load(Ordering::Relaxed), 2);

    // Pinning an op the backend refuses fails at prepare, naming the op.
    let options =
        SessionOptions { op_backends: parse_op_backends("ADD=abs-only").unwrap(), custom_backends: vec![backend.clone()], ..SessionOptions::default() };
    let err = Session::with_options(model.clone(), options).unwrap().prepare().unwrap_err();
    assert!(err.to_string().contains("ADD"), "{err}");

    // Names are checked against the built-ins and the application's backends.
    let unknown = SessionOptions { backends: vec!["tpu".into()], custom_backends: vec![backend.clone()], ..SessionOptions::default() };
    let err = Session::with_options(model.clone(), unknown).unwrap_err().to_string();
    assert!(err.contains("'tpu'") && err.contains("abs-only"), "{err}");
    // A backend may not take a built-in's name: `cpu` stays the complete fallback.
    struct Impostor;
    impl Backend for Impostor {
        fn name(&self) -> &'static str {
            "cpu"
        }
        fn build(&self, op: &OpContext<'_>, _: &mut BackendContext) -> ferrite::Result<Built> {
            Err(op.unsupported("nothing"))
        }
    }
    let clash = SessionOptions { custom_backends: vec![Arc::new(Impostor)], ..SessionOptions::default() };
    assert!(matches!(Session::with_options(model, clash), Err(Error::InvalidArgument(_))));
}

/// BATCH_MATMUL with a constant right operand shared by the batches runs on the
/// CPU backend's packed GEMM path: it agrees with the reference backend across
/// output widths under, at and over one panel (16 and 32 channels), several
/// panels, `adj_y` (the operand stored transposed), batch dims on the left
/// operand only, and rows not a multiple of the tile height.
#[test]
fn batch_matmul_with_a_constant_operand_matches_the_reference() {
    let cases: [(&[i32], &[i32], bool); 6] = [
        (&[2, 5, 7], &[7, 40], false),
        (&[1, 1, 9, 33], &[33, 12], false),
        (&[2, 3, 6], &[20, 6], true),
        (&[13, 37], &[37, 70], false),
        (&[1, 4, 16], &[1, 16, 32], false),
        (&[3, 1, 5], &[16, 5], true),
    ];
    for (a_shape, b_shape, adj_y) in cases {
        let (rb, ra) = (b_shape.len(), a_shape.len());
        let n = if adj_y { b_shape[rb - 2] } else { b_shape[rb - 1] };
        let b_len: i32 = b_shape.iter().product();
        let b: Vec<f32> = (0..b_len).map(|i| ((i * 7 % 13) as f32) * 0.1 - 0.6).collect();
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec::activation("a", TensorType::FLOAT32, a_shape));
        let w = m.add_tensor(TensorSpec::const_f32("b", b_shape, &b));
        let mut out_shape = a_shape.to_vec();
        out_shape[ra - 1] = n;
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &out_shape));
        m.add_op(
            OpCode::Builtin(BuiltinOp::BATCH_MATMUL.operator()),
            &[x, w],
            &[y],
            Options::BatchMatMul { adj_x: false, adj_y, asymmetric_quantize_inputs: false },
        );
        m.inputs = vec![x];
        m.outputs = vec![y];
        let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
        let a_len: i32 = a_shape.iter().product();
        let a: Vec<f32> = (0..a_len).map(|i| ((i * 5 % 11) as f32) * 0.2 - 1.0).collect();
        let run = |backend: &str| {
            let options = SessionOptions { backends: vec![backend.into()], ..SessionOptions::default() };
            let mut s = Session::with_options(model.clone(), options).unwrap();
            s.prepare().unwrap();
            s.set_input_f32(0, &a).unwrap();
            s.run().unwrap();
            s.output(0).unwrap().to_f32().unwrap()
        };
        let (got, want) = (run("cpu"), run("reference"));
        assert_eq!(got.len(), want.len());
        assert!(worst(&got, &want) < 1e-4, "{a_shape:?} x {b_shape:?} adj_y {adj_y}: off by {}", worst(&got, &want));
    }
}
