//! Control flow and state: a variable keeps its value across runs (streaming) and
//! resets on request; a subgraph that calls itself is an error, not a stack overflow.

use std::sync::Arc;

use ferrite::Session;
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

/// state := state + x (state starts at `z` via CALL_ONCE); returns the new state.
fn accumulator(z: &[f32]) -> Vec<u8> {
    let n = z.len() as i32;
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[n]));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
    let st = m.add_tensor(TensorSpec::activation("state", TensorType::FLOAT32, &[n]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[n]));
    m.add_op(OpCode::Builtin(B::CALL_ONCE), &[], &[], Options::CallOnce { init_subgraph: 1 });
    m.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[h], Options::VarHandle { container: String::new(), shared_name: "acc".into() });
    m.add_op(OpCode::Builtin(B::READ_VARIABLE), &[h], &[st], Options::None);
    m.add_op(OpCode::Builtin(B::ADD), &[st, x], &[y], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[h, y], &[], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![y];
    let mut init = ModelSpec::default();
    let ih = init.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
    let iz = init.add_tensor(TensorSpec::const_f32("z", &[n], z));
    init.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[ih], Options::VarHandle { container: String::new(), shared_name: "acc".into() });
    init.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[ih, iz], &[], Options::None);
    m.subgraphs.push(init);
    m.to_bytes().unwrap()
}

#[test]
fn variables_stream_across_runs_and_reset() {
    let z = [1.0f32, -2.0, 0.5];
    let mut s = Session::from_bytes(Arc::new(accumulator(&z))).unwrap();
    s.prepare().unwrap();
    let x = [0.25f32, 1.0, -1.0];
    let mut want = z.to_vec();
    for _ in 0..50 {
        s.set_input_f32(0, &x).unwrap();
        s.run().unwrap();
        for (w, d) in want.iter_mut().zip(x) {
            *w += d;
        }
        assert_eq!(s.output(0).unwrap().to_f32().unwrap(), want);
    }
    s.reset_variables();
    s.set_input_f32(0, &x).unwrap();
    s.run().unwrap();
    let after_reset: Vec<f32> = z.iter().zip(x).map(|(a, b)| a + b).collect();
    assert_eq!(s.output(0).unwrap().to_f32().unwrap(), after_reset, "CALL_ONCE ran again after reset");
}

#[test]
fn recursive_control_flow_is_an_error() {
    // Subgraph 1 calls itself through IF: nesting stops at the limit with an error.
    let if_on = |g: &mut ModelSpec, x: i32, y: i32| {
        let mut c = TensorSpec::activation("c", TensorType::BOOL, &[]);
        c.data = Some(vec![1]);
        let c = g.add_tensor(c);
        g.add_op(OpCode::Builtin(B::IF), &[c, x], &[y], Options::If { then_subgraph: 1, else_subgraph: 1 });
    };
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2]));
    if_on(&mut m, x, y);
    m.inputs = vec![x];
    m.outputs = vec![y];
    let mut sub = ModelSpec::default();
    let sx = sub.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2]));
    let sy = sub.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2]));
    if_on(&mut sub, sx, sy);
    sub.inputs = vec![sx];
    sub.outputs = vec![sy];
    m.subgraphs.push(sub);
    let mut s = Session::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap();
    let e = s.prepare().unwrap_err().to_string();
    assert!(e.contains("nested deeper"), "{e}");
}
