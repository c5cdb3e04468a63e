//! The LSTM op's basic kernel (`kernel_type` BASIC) on uint8 activations: LiteRT's
//! legacy 8-bit LSTM cell (see [`ferrite_kernels::qlstm_basic`]). Five inputs
//! (input, previous activation, concatenated weights, biases, previous state) and
//! four outputs (activation, state, and the two scratch tensors LiteRT exposes).
//!
//! LiteRT copies the new activation and state back into the two state inputs after
//! each step; when those inputs are variable tensors (as ferrite's writer makes
//! them) the state carries from one invocation to the next, and ferrite does the
//! same. When they are plain inputs, each invocation starts from the values given.
//! The float form of the basic cell is not implemented (refused).

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::qlstm_basic::{self as kb, BasicLstm, BasicLstmIn, BasicLstmOut};
use ferrite_kernels::quant::quantize_multiplier;

use crate::backend::{typed, typed_mut, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::DType;
use crate::ops::OpParams;

/// True for an LSTM op with the basic kernel type.
pub(crate) fn is_basic_lstm(code: B, op: &OpContext<'_>) -> bool {
    code == B::LSTM && matches!(op.op.params, OpParams::Recurrent(p) if p.basic_kernel)
}

/// Validates a basic LSTM as LiteRT's prepare and eval do and builds its kernel.
pub(crate) fn build(op: &OpContext<'_>) -> Result<Built> {
    if op.inputs.len() != 5 || op.outputs.len() != 4 {
        return Err(op.bad(format!("the basic LSTM takes 5 inputs and 4 outputs, got {} and {}", op.inputs.len(), op.outputs.len())));
    }
    let types = [DType::U8, DType::U8, DType::U8, DType::I32, DType::I16];
    let out_types = [DType::U8, DType::I16, DType::U8, DType::I16];
    let all_f32 = (0..5).all(|k| op.input(k).is_ok_and(|d| d.dtype == DType::F32)) && op.outputs.iter().all(|o| o.dtype == DType::F32);
    if all_f32 {
        return Err(op.unsupported("the float32 basic LSTM kernel (LSTMKernelType BASIC)"));
    }
    for (k, t) in types.iter().enumerate() {
        if op.input(k)?.dtype != *t {
            return Err(
                op.unsupported(format!("basic LSTM input {k} of type {} (the 8-bit cell takes uint8, uint8, uint8, int32, int16)", op.input(k)?.dtype.name()))
            );
        }
    }
    for (k, t) in out_types.iter().enumerate() {
        if op.outputs[k].dtype != *t {
            return Err(
                op.unsupported(format!("basic LSTM output {k} of type {} (the 8-bit cell writes uint8, int16, uint8, int16)", op.outputs[k].dtype.name()))
            );
        }
    }
    let dims2 = |k: usize| -> Result<(usize, usize)> {
        match op.input(k)?.shape[..] {
            [a, b] => Ok((a, b)),
            ref s => Err(op.bad(format!("basic LSTM input {k} must be 2-D, got {s:?}"))),
        }
    };
    let (batch, n_input) = dims2(0)?;
    let (ab, n_output) = dims2(1)?;
    let (wr, wc) = dims2(2)?;
    let (sb, sd) = dims2(4)?;
    let bias = op.input(3)?;
    if ab != batch || wr != 4 * n_output || wc != n_input + n_output || bias.shape != [4 * n_output] || (sb, sd) != (batch, n_output) {
        return Err(op.bad("basic LSTM shapes do not agree (activation [batch, n], weights [4n, input + n], bias [4n], state [batch, n])"));
    }
    // LiteRT reads the state's scale from the state output and takes 2^-11 only.
    let state_scale =
        op.outputs[1].quant.as_ref().and_then(|q| q.scale.first().copied()).ok_or_else(|| op.bad("the basic LSTM's state output has no scale"))?;
    let log2 = ferrite_kernels::qrecurrent::checked_log2(state_scale).ok_or_else(|| op.unsupported("a basic LSTM state whose scale is not a power of two"))?;
    if 15 + log2 != kb::STATE_INTEGER_BITS {
        return Err(op.unsupported(format!("a basic LSTM state of scale 2^{log2} (LiteRT's 8-bit cell takes 2^-11 only)")));
    }
    let scale_zp = |k: usize| op.input(k).ok().and_then(|d| d.quant).and_then(|q| Some((*q.scale.first()?, *q.zero_point.first()?)));
    let (bias_scale, _) = scale_zp(3).ok_or_else(|| op.bad("the basic LSTM's bias has no scale"))?;
    let (_, weights_zp) = scale_zp(2).ok_or_else(|| op.bad("the basic LSTM's weights have no quantization"))?;
    let weights_zp = i32::try_from(weights_zp).map_err(|_| op.bad("weights zero point out of range"))?;
    let accum = quantize_multiplier(4096.0 * f64::from(bias_scale));
    let (act_len, cat_len, gate_len) =
        (op.checked_elements(&[batch, n_output], 1)?, op.checked_elements(&[batch, n_input + n_output], 1)?, op.checked_elements(&[batch, 4 * n_output], 1)?);
    let p = BasicLstm { batch, n_input, n_output, weights_zp, accum };
    // Each state input is a variable (a writable view after the outputs) or a plain
    // input; which one is known only from the arguments, so the kernel checks both.
    let mut prev = (Vec::<u8>::new(), Vec::<i16>::new());
    let kernel: crate::backend::KernelFn = Box::new(move |ins, outs| {
        let arg = |k: usize| crate::backend::arg(ins, k);
        let x = arg(0)?;
        let weights = arg(2)?;
        let bias = typed::<i32>(arg(3)?)?;
        if x.len() != batch * n_input || weights.len() != 4 * n_output * (n_input + n_output) || bias.len() != 4 * n_output {
            return Err(Error::Runtime("basic LSTM inputs of the wrong size".into()));
        }
        let (head, views) = outs.split_at_mut(4.min(outs.len()));
        let [o_act, o_state, o_cat, o_gates] = head else { return Err(Error::Runtime("the basic LSTM writes four outputs".into())) };
        let mut views = views.iter_mut();
        let mut var_act = None;
        let mut var_state = None;
        // Previous activation and state: the given input, or the variable's view.
        prev.0.clear();
        match ins.get(1).copied().flatten() {
            Some(b) => prev.0.extend_from_slice(b),
            None => {
                let v = views.next().ok_or_else(|| Error::Runtime("basic LSTM activation state missing".into()))?;
                prev.0.extend_from_slice(v);
                var_act = Some(v);
            }
        }
        prev.1.clear();
        match ins.get(4).copied().flatten() {
            Some(b) => prev.1.extend_from_slice(typed::<i16>(b)?),
            None => {
                let v = views.next().ok_or_else(|| Error::Runtime("basic LSTM cell state missing".into()))?;
                prev.1.extend_from_slice(typed::<i16>(v)?);
                var_state = Some(v);
            }
        }
        let (state, gates) = (typed_mut::<i16>(o_state)?, typed_mut::<i16>(o_gates)?);
        if prev.0.len() != act_len
            || prev.1.len() != act_len
            || o_act.len() != act_len
            || state.len() != act_len
            || o_cat.len() != cat_len
            || gates.len() != gate_len
        {
            return Err(Error::Runtime("basic LSTM buffers of the wrong size".into()));
        }
        let i = BasicLstmIn { x, activation: &prev.0, state: &prev.1, weights, bias };
        kb::basic_lstm_step(&p, i, BasicLstmOut { activation: o_act, state, concat: o_cat, gates });
        // LiteRT copies the new activation and state into the state inputs.
        if let Some(v) = var_act {
            v.copy_from_slice(o_act);
        }
        if let Some(v) = var_state {
            v.copy_from_slice(bytemuck::cast_slice(state));
        }
        Ok(())
    });
    Ok(Built {
        outputs: vec![
            (DType::U8, vec![batch, n_output]),
            (DType::I16, vec![batch, n_output]),
            (DType::U8, vec![batch, n_input + n_output]),
            (DType::I16, vec![batch, 4 * n_output]),
        ],
        kernel,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrite_format::writer::{Activation, BuiltinOperator as BO, ModelSpec, OpCode, Options, TensorSpec, TensorType};

    use crate::model::Model;
    use crate::session::{Session, SessionOptions};

    /// A basic uint8 LSTM cell (batch 2, 3 inputs, 4 units); its two state inputs
    /// are variables when `variables`, else model inputs 1 and 2.
    fn model(variables: bool) -> ModelSpec {
        let mut m = ModelSpec::default();
        let (b, ni, no) = (2, 3, 4);
        let t = |m: &mut ModelSpec, ty, shape: &[i32], scale: f32, zp: i64, data: Option<Vec<u8>>, var: bool| {
            m.add_tensor(TensorSpec { data, is_variable: var, quant: Some((vec![scale], vec![zp], 0)), ..TensorSpec::activation("t", ty, shape) })
        };
        let x = t(&mut m, TensorType::UINT8, &[b, ni], 1.0 / 128.0, 128, None, false);
        let a = t(&mut m, TensorType::UINT8, &[b, no], 1.0 / 128.0, 128, None, variables);
        let w: Vec<u8> = (0..4 * no * (ni + no)).map(|k| (k * 97 % 251) as u8).collect();
        let w = t(&mut m, TensorType::UINT8, &[4 * no, ni + no], 0.01, 120, Some(w), false);
        let bias: Vec<u8> = (0..4 * no).flat_map(|k| (k * 1000 - 6000).to_le_bytes()).collect();
        let bias = t(&mut m, TensorType::INT32, &[4 * no], 0.01 / 128.0, 0, Some(bias), false);
        let s = t(&mut m, TensorType::INT16, &[b, no], 1.0 / 2048.0, 0, None, variables);
        let outs = [
            t(&mut m, TensorType::UINT8, &[b, no], 1.0 / 128.0, 128, None, false),
            t(&mut m, TensorType::INT16, &[b, no], 1.0 / 2048.0, 0, None, false),
            t(&mut m, TensorType::UINT8, &[b, ni + no], 1.0 / 128.0, 128, None, false),
            t(&mut m, TensorType::INT16, &[b, 4 * no], 1.0 / 4096.0, 0, None, false),
        ];
        m.add_op(OpCode::Builtin(BO::LSTM), &[x, a, w, bias, s], &outs, Options::LstmBasic { activation: Activation::TANH, cell_clip: 0.0, proj_clip: 0.0 });
        m.inputs = if variables { vec![x] } else { vec![x, a, s] };
        m.outputs = outs.to_vec();
        m
    }

    fn session(spec: &ModelSpec, backend: &str) -> Session {
        let model = Model::from_bytes(Arc::new(spec.to_bytes().unwrap())).unwrap();
        let mut s = Session::with_options(Arc::new(model), SessionOptions { backends: vec![backend.into()], ..Default::default() }).unwrap();
        s.prepare().unwrap();
        s
    }

    const X: [u8; 6] = [10, 200, 128, 90, 255, 0];

    /// Activation and state after one invocation.
    fn run(s: &mut Session, states: Option<(&[u8], &[u8])>) -> (Vec<u8>, Vec<u8>) {
        s.set_input(0, &X).unwrap();
        if let Some((a, st)) = states {
            s.set_input(1, a).unwrap();
            s.set_input(2, st).unwrap();
        }
        s.run().unwrap();
        (s.output(0).unwrap().bytes.to_vec(), s.output(1).unwrap().bytes.to_vec())
    }

    /// Both backends agree; the state carries in the variables (a second run with
    /// the same input differs and equals a run from the first's state given as
    /// plain inputs); a reset starts over.
    #[test]
    fn basic_lstm_carries_its_state_in_variables_or_takes_it_as_inputs() {
        let spec = model(true);
        let (mut cpu, mut reference) = (session(&spec, "cpu"), session(&spec, "reference"));
        let first = run(&mut cpu, None);
        assert_eq!(first, run(&mut reference, None));
        assert!(first.0.iter().any(|&v| v != first.0[0]), "a constant activation: {first:?}");
        let second = run(&mut cpu, None);
        assert_eq!(second, run(&mut reference, None));
        assert_ne!(first, second, "no state carried");
        cpu.reset_variable_tensors();
        assert_eq!(run(&mut cpu, None), first);

        // Variables start as zero bytes; as plain inputs, the same values give the
        // first run, and the first run's results give the second.
        let mut plain = session(&model(false), "cpu");
        assert_eq!(run(&mut plain, Some((&[0; 8], &[0; 16]))), first);
        assert_eq!(run(&mut plain, Some((&first.0, &first.1))), second);
    }
}
