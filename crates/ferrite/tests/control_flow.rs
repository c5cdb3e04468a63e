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

/// A streaming state of the last 4 frames: c = concat(state, x); state := c[1..]
/// (the read is read only by the concatenation, which then reads the variable
/// itself; the slice only by the assignment, which then writes it); returns c,
/// the last 5 frames. The initializer zero-fills the state.
fn frame_window() -> Vec<u8> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 1, 3]));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
    let st = m.add_tensor(TensorSpec::activation("state", TensorType::FLOAT32, &[1, 4, 3]));
    let c = m.add_tensor(TensorSpec::activation("c", TensorType::FLOAT32, &[1, 5, 3]));
    let s = m.add_tensor(TensorSpec::activation("s", TensorType::FLOAT32, &[1, 4, 3]));
    let begin = m.add_tensor(TensorSpec::const_i32("begin", &[3], &[0, 1, 0]));
    let end = m.add_tensor(TensorSpec::const_i32("end", &[3], &[1, 5, 3]));
    let strides = m.add_tensor(TensorSpec::const_i32("strides", &[3], &[1, 1, 1]));
    m.add_op(OpCode::Builtin(B::CALL_ONCE), &[], &[], Options::CallOnce { init_subgraph: 1 });
    m.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[h], Options::VarHandle { container: String::new(), shared_name: "window".into() });
    m.add_op(OpCode::Builtin(B::READ_VARIABLE), &[h], &[st], Options::None);
    m.add_op(OpCode::Builtin(B::CONCATENATION), &[st, x], &[c], Options::Concatenation { axis: 1, activation: Activation::NONE });
    let slice = Options::StridedSlice { begin_mask: 0, end_mask: 0, ellipsis_mask: 0, new_axis_mask: 0, shrink_axis_mask: 0, offset: false };
    m.add_op(OpCode::Builtin(B::STRIDED_SLICE), &[c, begin, end, strides], &[s], slice);
    m.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[h, s], &[], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![c];
    let mut init = ModelSpec::default();
    let ih = init.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
    let iz = init.add_tensor(TensorSpec::const_f32("z", &[1, 4, 3], &[0.0; 12]));
    init.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[ih], Options::VarHandle { container: String::new(), shared_name: "window".into() });
    init.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[ih, iz], &[], Options::None);
    m.subgraphs.push(init);
    m.to_bytes().unwrap()
}

#[test]
fn a_sliced_state_assigned_in_place_streams_across_runs() {
    let mut s = Session::from_bytes(Arc::new(frame_window())).unwrap();
    s.prepare().unwrap();
    let frame = |k: usize| [k as f32, k as f32 + 0.25, -(k as f32)];
    // The concatenation reads the variable itself, and the slice runs inside the
    // assignment: steps for CALL_ONCE, the concatenation and the assignment only.
    assert_eq!(s.fused_op_count(), Some(2));
    assert_eq!(s.step_stats().map(|t| t.0), Some(3));
    let mut frames: Vec<[f32; 3]> = vec![[0.0; 3]; 4];
    for k in 1..=12 {
        s.set_input_f32(0, &frame(k)).unwrap();
        s.run().unwrap();
        frames.push(frame(k));
        let want: Vec<f32> = frames[frames.len() - 5..].iter().flatten().copied().collect();
        assert_eq!(s.output(0).unwrap().to_f32().unwrap(), want, "run {k}");
    }
    s.reset_variables();
    s.set_input_f32(0, &frame(1)).unwrap();
    s.run().unwrap();
    let want: Vec<f32> = [[0.0; 3]; 4].iter().chain([&frame(1)]).flatten().copied().collect();
    assert_eq!(s.output(0).unwrap().to_f32().unwrap(), want, "the state starts again from zeros");
}

/// y = state + x with the state read before `state := x` and added after it: the
/// addition must see the value read, so it does not read the variable itself.
#[test]
fn a_read_stays_a_copy_when_the_variable_is_assigned_before_its_reader() {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[3]));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
    let st = m.add_tensor(TensorSpec::activation("state", TensorType::FLOAT32, &[3]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[3]));
    m.add_op(OpCode::Builtin(B::CALL_ONCE), &[], &[], Options::CallOnce { init_subgraph: 1 });
    m.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[h], Options::VarHandle { container: String::new(), shared_name: "last".into() });
    m.add_op(OpCode::Builtin(B::READ_VARIABLE), &[h], &[st], Options::None);
    m.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[h, x], &[], Options::None);
    m.add_op(OpCode::Builtin(B::ADD), &[st, x], &[y], Options::Binary { activation: Activation::NONE });
    m.inputs = vec![x];
    m.outputs = vec![y];
    let mut init = ModelSpec::default();
    let ih = init.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
    let iz = init.add_tensor(TensorSpec::const_f32("z", &[3], &[0.0; 3]));
    init.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[ih], Options::VarHandle { container: String::new(), shared_name: "last".into() });
    init.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[ih, iz], &[], Options::None);
    m.subgraphs.push(init);
    let mut s = Session::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap();
    s.prepare().unwrap();
    assert_eq!(s.fused_op_count(), Some(0));
    let mut last = [0.0f32; 3];
    for k in 1..=5 {
        let x = [k as f32, 2.0 * k as f32, -0.5];
        s.set_input_f32(0, &x).unwrap();
        s.run().unwrap();
        let want: Vec<f32> = last.iter().zip(x).map(|(a, b)| a + b).collect();
        assert_eq!(s.output(0).unwrap().to_f32().unwrap(), want, "run {k}");
        last = x;
    }
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
