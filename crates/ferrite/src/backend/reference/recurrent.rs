//! Reference recurrent ops (LSTM and its sequence forms, the RNNs, SVDF), float32
//! and hybrid, written from their equations with plain loops in f64. They share
//! the CPU backend's validation ([`layout`]) so both take the same ops; the
//! arithmetic here is independent of the CPU kernels.
//!
//! Hybrid matrices follow LiteRT's definition: each input row is quantized to int8
//! (symmetric, or asymmetric with a zero point), multiplied with the int8 weights
//! in integers, and the sum scaled by `row scale x weight scale`.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::quant::{asymmetric_quantize, symmetric_quantize};
use ferrite_kernels::recurrent::CellActivation;

use crate::backend::cpu::recurrent::{
    integer_lstm, integer_lstm_kernel, integer_svdf, integer_svdf_kernel, is_integer_lstm, is_integer_svdf, layout, split_io, vector_f32, Cell, Layout, Slot,
};
use crate::backend::{arg, typed, Built, OpContext};
use crate::error::Result;
use crate::model::{DType, OpCode};

/// Builds a recurrent op, or `None` when `op` is not one.
pub(crate) fn build(op: &OpContext<'_>) -> Option<Result<Built>> {
    let OpCode::Builtin(code) = op.op.code else { return None };
    if !matches!(
        code,
        B::LSTM
            | B::UNIDIRECTIONAL_SEQUENCE_LSTM
            | B::BIDIRECTIONAL_SEQUENCE_LSTM
            | B::RNN
            | B::UNIDIRECTIONAL_SEQUENCE_RNN
            | B::BIDIRECTIONAL_SEQUENCE_RNN
            | B::SVDF
    ) {
        return None;
    }
    // The integer LSTM's and SVDF's arithmetic is LiteRT's integer definition
    // itself (no float reformulation exists to check it against): both backends
    // run the same plain-loop kernels.
    if crate::backend::cpu::basic_lstm::is_basic_lstm(code, op) {
        return Some(crate::backend::cpu::basic_lstm::build(op));
    }
    if is_integer_lstm(code, op) {
        return Some(integer_lstm(code, op).map(|l| Built { outputs: vec![(DType::I8, l.output_shape.clone())], kernel: integer_lstm_kernel(l) }));
    }
    if is_integer_svdf(code, op) {
        return Some(
            integer_svdf(op).map(|(p, batch)| Built { outputs: vec![(DType::I8, vec![batch, p.filters / p.rank])], kernel: integer_svdf_kernel(p, batch) }),
        );
    }
    Some(layout(code, op).map(|l| {
        let outputs = l.output_specs();
        let n_out = outputs.len();
        Built { outputs, kernel: Box::new(move |ins, outs| run(&l, n_out, ins, outs)) }
    }))
}

/// An activation, evaluated in float32 (the precision the op is defined in: the
/// hybrid cells quantize what it returns).
fn act(a: CellActivation, x: f64) -> f64 {
    let x = x as f32;
    f64::from(match a {
        CellActivation::None => x,
        CellActivation::Relu => x.max(0.0),
        CellActivation::ReluN1To1 => x.clamp(-1.0, 1.0),
        CellActivation::Relu6 => x.clamp(0.0, 6.0),
        CellActivation::Tanh => x.tanh(),
        CellActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
    })
}

/// `m x` for one row `x` of `cols` values: float weights in f64; int8 weights
/// with `x` quantized the hybrid way.
fn matvec(ins: &[Option<&[u8]>], s: &Slot, x: &[f32], rows: usize, cols: usize, asymmetric: bool) -> Result<Vec<f64>> {
    let b = arg(ins, s.idx)?;
    Ok(match s.scale {
        None => {
            let w = typed::<f32>(b)?;
            (0..rows).map(|r| (0..cols).map(|c| f64::from(w[r * cols + c]) * f64::from(x[c])).sum()).collect()
        }
        Some(ws) => {
            let mut q = vec![0i8; cols];
            let (xs, zp) = if asymmetric { asymmetric_quantize(x, &mut q) } else { (symmetric_quantize(x, &mut q), 0) };
            (0..rows)
                .map(|r| {
                    let acc: i64 = (0..cols).map(|c| i64::from(b[r * cols + c] as i8) * (i64::from(q[c]) - i64::from(zp))).sum();
                    // LiteRT forms the scale product in float, then scales the integer sum.
                    f64::from(acc as f32 * (xs * ws))
                })
                .collect()
        }
    })
}

fn floats(ins: &[Option<&[u8]>], s: &Option<Slot>) -> Result<Option<Vec<f64>>> {
    s.as_ref().map(|s| Ok(vector_f32(ins, s)?.into_iter().map(f64::from).collect())).transpose()
}

/// Input row of time step `t`, sequence `b`.
fn row(l: &Layout, t: usize, b: usize) -> usize {
    if l.time_major {
        t * l.batch + b
    } else {
        b * l.time + t
    }
}

fn run(l: &Layout, n_out: usize, ins: &[Option<&[u8]>], outs: &mut [&mut [u8]]) -> Result<()> {
    let (mut outputs, mut states) = split_io(l, ins, outs, n_out)?;
    let x = typed::<f32>(arg(ins, 0)?)?;
    let ni = l.n_input;
    let units = l.out_units();
    let merged = l.merge && units.len() == 2;
    let out_row = if merged { units.iter().sum() } else { units[0] };
    match &l.cell {
        Cell::Lstm(dirs) => {
            for (d, dir) in dirs.iter().enumerate() {
                let (nc, no) = (dir.n_cell, dir.n_output);
                let peep: Vec<Option<Vec<f64>>> = dir.peephole.iter().map(|s| floats(ins, s)).collect::<Result<_>>()?;
                let bias: Vec<Option<Vec<f64>>> = dir.bias.iter().map(|s| floats(ins, s)).collect::<Result<_>>()?;
                let ln: Vec<Option<Vec<f64>>> = dir.layer_norm.iter().map(|s| floats(ins, s)).collect::<Result<_>>()?;
                let pbias = floats(ins, &dir.projection_bias)?;
                let (hs, cs) = states[2 * d..].split_at_mut(1);
                let (h, c) = (&mut *hs[0], &mut *cs[0]);
                for k in 0..l.time {
                    let t = if d == 1 { l.time - 1 - k } else { k };
                    for b in 0..l.batch {
                        let xr = &x[row(l, t, b) * ni..][..ni];
                        let hr: Vec<f32> = h[b * no..][..no].to_vec();
                        let c_prev: Vec<f64> = c[b * nc..][..nc].iter().map(|&v| f64::from(v)).collect();
                        // Each gate in float32, in the definition's order: bias (after the
                        // normalization with layer norm), input and recurrent products,
                        // peephole, normalization.
                        let gate = |g: usize, cell: &[f64]| -> Result<Vec<f64>> {
                            let mut v: Vec<f32> = match (&ln[g], &bias[g]) {
                                (None, Some(bv)) => bv.iter().map(|&b| b as f32).collect(),
                                _ => vec![0.0; nc],
                            };
                            if let Some(s) = &dir.input_w[g] {
                                v.iter_mut().zip(matvec(ins, s, xr, nc, ni, l.asymmetric)?).for_each(|(a, m)| *a += m as f32);
                            }
                            if let Some(s) = &dir.recurrent_w[g] {
                                v.iter_mut().zip(matvec(ins, s, &hr, nc, no, l.asymmetric)?).for_each(|(a, m)| *a += m as f32);
                            }
                            let p = match g {
                                0 => &peep[0],
                                1 => &peep[1],
                                3 => &peep[2],
                                _ => &None,
                            };
                            if let Some(p) = p {
                                v.iter_mut().enumerate().for_each(|(j, a)| *a += (p[j] * cell[j]) as f32);
                            }
                            let mut v: Vec<f64> = v.into_iter().map(f64::from).collect();
                            if let Some(coef) = &ln[g] {
                                let mean = v.iter().sum::<f64>() / nc as f64;
                                let var = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / nc as f64;
                                let inv = 1.0 / (var + 1e-8).sqrt();
                                v.iter_mut().enumerate().for_each(|(j, a)| *a = (*a - mean) * inv * coef[j] + bias[g].as_ref().map_or(0.0, |b| b[j]));
                            }
                            Ok(v)
                        };
                        let f: Vec<f64> = gate(1, &c_prev)?.into_iter().map(|v| act(CellActivation::Sigmoid, v)).collect();
                        let i: Vec<f64> = if dir.input_w[0].is_some() {
                            gate(0, &c_prev)?.into_iter().map(|v| act(CellActivation::Sigmoid, v)).collect()
                        } else {
                            f.iter().map(|f| 1.0 - f).collect()
                        };
                        let g: Vec<f64> = gate(2, &c_prev)?.into_iter().map(|v| act(l.activation, v)).collect();
                        let clip = |v: f64, lim: f32| if lim > 0.0 { v.clamp(-f64::from(lim), f64::from(lim)) } else { v };
                        // The cell state is float32: f * c, plus i * g.
                        let c_new: Vec<f64> =
                            (0..nc).map(|j| clip(f64::from((f[j] as f32 * c_prev[j] as f32) + (i[j] as f32 * g[j] as f32)), l.cell_clip)).collect();
                        let o: Vec<f64> = gate(3, &c_new)?.into_iter().map(|v| act(CellActivation::Sigmoid, v)).collect();
                        let hidden: Vec<f32> = (0..nc).map(|j| o[j] as f32 * act(l.activation, c_new[j]) as f32).collect();
                        let h_new: Vec<f64> = match &dir.projection {
                            Some(s) => matvec(ins, s, &hidden, no, nc, l.asymmetric)?
                                .into_iter()
                                .enumerate()
                                .map(|(j, v)| clip(v + pbias.as_ref().map_or(0.0, |pb| pb[j]), l.proj_clip))
                                .collect(),
                            None => hidden.iter().map(|&v| f64::from(v)).collect(),
                        };
                        for j in 0..nc {
                            c[b * nc + j] = c_new[j] as f32;
                        }
                        let off = if merged && d == 1 { units[0] } else { 0 };
                        let out = &mut *outputs[if merged { 0 } else { d }];
                        for j in 0..no {
                            h[b * no + j] = h_new[j] as f32;
                            out[row(l, t, b) * out_row + off + j] = h_new[j] as f32;
                        }
                    }
                }
            }
        }
        Cell::Rnn(dirs) => {
            for (d, dir) in dirs.iter().enumerate() {
                let u = dir.units;
                let bias = vector_f32(ins, &dir.bias)?;
                let h = &mut *states[d];
                let out_row = if merged { out_row } else { u };
                for k in 0..l.time {
                    let t = if d == 1 { l.time - 1 - k } else { k };
                    for b in 0..l.batch {
                        let xr = &x[row(l, t, b) * ni..][..ni];
                        let hr: Vec<f32> = h[b * u..][..u].to_vec();
                        let wx = matvec(ins, &dir.w, xr, u, ni, l.asymmetric)?;
                        let rh = matvec(ins, &dir.r, &hr, u, u, l.asymmetric)?;
                        let off = if merged && d == 1 { units[0] } else { 0 };
                        let out = &mut *outputs[if merged { 0 } else { d }];
                        for j in 0..u {
                            // float32, in the definition's order: bias, plus W x, plus R h.
                            let v = act(l.activation, f64::from(bias[j] + wx[j] as f32 + rh[j] as f32)) as f32;
                            h[b * u + j] = v;
                            out[row(l, t, b) * out_row + off + j] = v;
                        }
                    }
                }
            }
        }
        Cell::Svdf { filters, memory, rank, features, time, bias } => {
            let (nf, mem, rank) = (*filters, *memory, *rank);
            let tw = vector_f32(ins, time)?;
            let bias = floats(ins, bias)?;
            let state = &mut *states[0];
            let out = &mut *outputs[0];
            for b in 0..l.batch {
                let proj = matvec(ins, features, &x[b * ni..][..ni], nf, ni, l.asymmetric)?;
                for f in 0..nf {
                    // Each filter's memory drops its oldest value and takes the new one.
                    let m = &mut state[(b * nf + f) * mem..][..mem];
                    m.rotate_left(1);
                    m[mem - 1] = proj[f] as f32;
                }
                for u in 0..nf / rank {
                    let mut acc = bias.as_ref().map_or(0.0, |bv| bv[u]);
                    for f in u * rank..(u + 1) * rank {
                        acc += (0..mem).map(|j| f64::from(tw[f * mem + j]) * f64::from(state[(b * nf + f) * mem + j])).sum::<f64>();
                    }
                    out[b * (nf / rank) + u] = act(l.activation, acc) as f32;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrite_format::writer::{Activation as A, BuiltinOperator as BO, ModelSpec, OpCode, Options, TensorSpec, TensorType};

    use crate::model::Model;
    use crate::session::{Session, SessionOptions};

    /// A small deterministic generator for weights and inputs.
    struct Gen(u64);
    impl Gen {
        fn f(&mut self) -> f32 {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
        fn v(&mut self, n: usize, scale: f32) -> Vec<f32> {
            (0..n).map(|_| self.f() * scale).collect()
        }
    }

    fn weights(m: &mut ModelSpec, g: &mut Gen, shape: &[i32], hybrid: bool) -> i32 {
        let n = shape.iter().product::<i32>() as usize;
        if hybrid {
            let data: Vec<u8> = (0..n).map(|_| (g.f() * 127.0) as i8 as u8).collect();
            m.add_tensor(TensorSpec { data: Some(data), quant: Some((vec![0.004], vec![0], 0)), ..TensorSpec::activation("w", TensorType::INT8, shape) })
        } else {
            let v = g.v(n, 0.5);
            m.add_tensor(TensorSpec::const_f32("w", shape, &v))
        }
    }

    fn state(m: &mut ModelSpec, shape: &[i32]) -> i32 {
        m.add_tensor(TensorSpec { is_variable: true, ..TensorSpec::activation("state", TensorType::FLOAT32, shape) })
    }

    /// UNIDIRECTIONAL_SEQUENCE_LSTM with peepholes, projection, layer norm and clips
    /// (batch-major, 2 sequences of 3 steps, 4 features, 5 cells, 3 outputs).
    fn lstm_model(hybrid: bool) -> ModelSpec {
        let mut g = Gen(7);
        let mut m = ModelSpec::default();
        let (b, t, ni, nc, no) = (2, 3, 4, 5, 3);
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[b, t, ni]));
        let mut ins = vec![x];
        (0..4).for_each(|_| ins.push(weights(&mut m, &mut g, &[nc, ni], hybrid)));
        (0..4).for_each(|_| ins.push(weights(&mut m, &mut g, &[nc, no], hybrid)));
        (0..3).for_each(|_| ins.push(weights(&mut m, &mut g, &[nc], hybrid)));
        for _ in 0..4 {
            let v = g.v(nc as usize, 0.5);
            ins.push(m.add_tensor(TensorSpec::const_f32("b", &[nc], &v)));
        }
        ins.push(weights(&mut m, &mut g, &[no, nc], hybrid));
        ins.push(-1);
        ins.push(state(&mut m, &[b, no]));
        ins.push(state(&mut m, &[b, nc]));
        for _ in 0..4 {
            let v: Vec<f32> = g.v(nc as usize, 0.3).iter().map(|v| v + 1.0).collect();
            ins.push(m.add_tensor(TensorSpec::const_f32("ln", &[nc], &v)));
        }
        let o = m.add_tensor(TensorSpec::activation("out", TensorType::FLOAT32, &[]));
        let opts = Options::Recurrent {
            activation: A::TANH,
            cell_clip: 0.8,
            proj_clip: 0.6,
            time_major: false,
            merge_outputs: false,
            asymmetric_quantize_inputs: hybrid,
        };
        m.add_op(OpCode::Builtin(BO::UNIDIRECTIONAL_SEQUENCE_LSTM), &ins, &[o], opts);
        m.inputs = vec![x];
        m.outputs = vec![o];
        m
    }

    /// BIDIRECTIONAL_SEQUENCE_RNN, time-major, merged (3 steps, 2 sequences).
    fn bidi_rnn_model(hybrid: bool) -> ModelSpec {
        let mut g = Gen(11);
        let mut m = ModelSpec::default();
        let (t, b, ni) = (3, 2, 4);
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[t, b, ni]));
        let mut ins = vec![x];
        for u in [3, 5] {
            ins.push(weights(&mut m, &mut g, &[u, ni], hybrid));
            ins.push(weights(&mut m, &mut g, &[u, u], hybrid));
            let v = g.v(u as usize, 0.5);
            ins.push(m.add_tensor(TensorSpec::const_f32("b", &[u], &v)));
            ins.push(state(&mut m, &[b, u]));
        }
        ins.extend([-1, -1, -1]);
        let o = m.add_tensor(TensorSpec::activation("out", TensorType::FLOAT32, &[]));
        let opts = Options::Recurrent {
            activation: A::RELU,
            cell_clip: 0.0,
            proj_clip: 0.0,
            time_major: true,
            merge_outputs: true,
            asymmetric_quantize_inputs: false,
        };
        m.add_op(OpCode::Builtin(BO::BIDIRECTIONAL_SEQUENCE_RNN), &ins, &[o], opts);
        m.inputs = vec![x];
        m.outputs = vec![o];
        m
    }

    /// SVDF of rank 2 (3 units, memory 4) on 2 sequences of 5 features.
    fn svdf_model(hybrid: bool) -> ModelSpec {
        let mut g = Gen(13);
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[2, 5]));
        let wf = weights(&mut m, &mut g, &[6, 5], hybrid);
        let wt = weights(&mut m, &mut g, &[6, 4], hybrid);
        let bv = g.v(3, 0.5);
        let bias = m.add_tensor(TensorSpec::const_f32("b", &[3], &bv));
        let st = state(&mut m, &[2, 24]);
        let o = m.add_tensor(TensorSpec::activation("out", TensorType::FLOAT32, &[]));
        m.add_op(OpCode::Builtin(BO::SVDF), &[x, wf, wt, bias, st], &[o], Options::Svdf { rank: 2, activation: A::NONE, asymmetric_quantize_inputs: false });
        m.inputs = vec![x];
        m.outputs = vec![o];
        m
    }

    fn session(spec: &ModelSpec, backend: &str) -> Session {
        let model = Model::from_bytes(Arc::new(spec.to_bytes().unwrap())).unwrap();
        let options = SessionOptions { backends: vec![backend.into()], ..Default::default() };
        let mut s = Session::with_options(Arc::new(model), options).unwrap();
        s.prepare().unwrap();
        s
    }

    fn run(s: &mut Session, x: &[f32]) -> Vec<f32> {
        s.set_input_f32(0, x).unwrap();
        s.run().unwrap();
        s.output(0).unwrap().to_f32().unwrap()
    }

    /// The CPU kernels agree with these reference kernels over several runs (the
    /// state carrying from run to run), the state changes the result, and
    /// resetting the variable tensors starts over.
    #[test]
    fn cpu_kernels_match_the_reference_and_state_carries_between_runs() {
        for (name, spec, inputs) in [
            ("lstm", lstm_model(false), 24),
            ("lstm hybrid", lstm_model(true), 24),
            ("bidirectional rnn", bidi_rnn_model(false), 24),
            ("bidirectional rnn hybrid", bidi_rnn_model(true), 24),
            ("svdf", svdf_model(false), 10),
            ("svdf hybrid", svdf_model(true), 10),
        ] {
            let (mut cpu, mut reference) = (session(&spec, "cpu"), session(&spec, "reference"));
            let mut g = Gen(3);
            let x = g.v(inputs, 1.5);
            let mut first = Vec::new();
            for k in 0..4 {
                let (a, b) = (run(&mut cpu, &x), run(&mut reference, &x));
                assert!(!a.is_empty() && a.len() == b.len(), "{name}");
                for (p, q) in a.iter().zip(&b) {
                    assert!((p - q).abs() <= 1e-5 * q.abs().max(1.0), "{name} run {k}: cpu {p} vs reference {q}");
                }
                if k == 0 {
                    first = a;
                } else {
                    assert_ne!(a, first, "{name}: run {k} with the same input gave the first run's result: no state carried");
                }
            }
            cpu.reset_variable_tensors();
            assert_eq!(run(&mut cpu, &x), first, "{name}: after a reset the first run's result comes back");
        }
    }

    /// A quantized tensor: constant when `data` is given, else an activation.
    fn q(m: &mut ModelSpec, ty: TensorType, shape: &[i32], scale: f32, zp: i64, data: Option<Vec<u8>>) -> i32 {
        m.add_tensor(TensorSpec { data, quant: Some((vec![scale], vec![zp], 0)), ..TensorSpec::activation("t", ty, shape) })
    }

    /// An integer UNIDIRECTIONAL_SEQUENCE_LSTM with layer norm, peepholes and a
    /// projection (batch-major, 2 sequences of 3 steps, 4 features, 5 cells, 3
    /// outputs), its five intermediate tensors listed.
    fn integer_lstm_model() -> ModelSpec {
        let mut g = Gen(17);
        let mut m = ModelSpec::default();
        let (b, t, ni, nc, no) = (2, 3, 4, 5, 3);
        let x = q(&mut m, TensorType::INT8, &[b, t, ni], 0.01, 3, None);
        let i8s = |g: &mut Gen, n: i32| -> Vec<u8> { (0..n).map(|_| (g.f() * 120.0) as i8 as u8).collect() };
        let mut ins = vec![x];
        for _ in 0..4 {
            let d = i8s(&mut g, nc * ni);
            ins.push(q(&mut m, TensorType::INT8, &[nc, ni], 0.02, 0, Some(d)));
        }
        for _ in 0..4 {
            let d = i8s(&mut g, nc * no);
            ins.push(q(&mut m, TensorType::INT8, &[nc, no], 0.02, 0, Some(d)));
        }
        let i16s =
            |g: &mut Gen, n: i32, lo: f32, hi: f32| -> Vec<u8> { (0..n).flat_map(|_| ((lo + (hi - lo) * (g.f() + 1.0) / 2.0) as i16).to_le_bytes()).collect() };
        for _ in 0..3 {
            let d = i16s(&mut g, nc, -20000.0, 20000.0);
            ins.push(q(&mut m, TensorType::INT16, &[nc], 1.0 / 32768.0, 0, Some(d)));
        }
        for _ in 0..4 {
            let d: Vec<u8> = (0..nc).flat_map(|_| ((g.f() * 10000.0) as i32).to_le_bytes()).collect();
            ins.push(q(&mut m, TensorType::INT32, &[nc], 1.0, 0, Some(d)));
        }
        let d = i8s(&mut g, no * nc);
        ins.push(q(&mut m, TensorType::INT8, &[no, nc], 0.03, 0, Some(d)));
        ins.push(-1);
        let h = q(&mut m, TensorType::INT8, &[b, no], 0.008, -2, None);
        let c = q(&mut m, TensorType::INT16, &[b, nc], 1.0 / 4096.0, 0, None);
        for v in [h, c] {
            m.tensors[v as usize].is_variable = true;
        }
        ins.extend([h, c]);
        for _ in 0..4 {
            let d = i16s(&mut g, nc, 8000.0, 24000.0);
            ins.push(q(&mut m, TensorType::INT16, &[nc], 1.0 / 16384.0, 0, Some(d)));
        }
        let mut inter: Vec<i32> = (0..4).map(|_| q(&mut m, TensorType::INT16, &[b, nc], 1.0 / 4096.0, 0, None)).collect();
        inter.push(q(&mut m, TensorType::INT8, &[b, nc], 0.007, 1, None));
        let o = q(&mut m, TensorType::INT8, &[], 0.008, -2, None);
        let opts = Options::Recurrent {
            activation: A::TANH,
            cell_clip: 1.5,
            proj_clip: 0.9,
            time_major: false,
            merge_outputs: false,
            asymmetric_quantize_inputs: false,
        };
        m.add_op(OpCode::Builtin(BO::UNIDIRECTIONAL_SEQUENCE_LSTM), &ins, &[o], opts);
        if let Some(op) = m.ops.last_mut() {
            op.intermediates = inter;
        }
        m.inputs = vec![x];
        m.outputs = vec![o];
        m
    }

    /// The integer LSTM runs on both backends alike, its output depends on the
    /// state carried in its variables (int8 output state, int16 cell state), and a
    /// reset starts over; without its intermediate tensors it is refused.
    #[test]
    fn integer_lstm_carries_its_state_and_needs_its_intermediates() {
        let spec = integer_lstm_model();
        let (mut cpu, mut reference) = (session(&spec, "cpu"), session(&spec, "reference"));
        let x: Vec<u8> = (0..24).map(|k| (k * 37 % 256) as u8).collect();
        let run = |s: &mut Session| -> Vec<u8> {
            s.set_input(0, &x).unwrap();
            s.run().unwrap();
            s.output(0).unwrap().bytes.to_vec()
        };
        let first = run(&mut cpu);
        assert_eq!(first, run(&mut reference));
        assert!(first.iter().any(|&v| v != first[0]), "a constant output: {first:?}");
        let second = run(&mut cpu);
        assert_eq!(second, run(&mut reference));
        assert_ne!(first, second, "the second run gave the first's result: no state carried");
        cpu.reset_variable_tensors();
        assert_eq!(run(&mut cpu), first);

        let mut bare = integer_lstm_model();
        bare.ops[0].intermediates.clear();
        let model = Model::from_bytes(Arc::new(bare.to_bytes().unwrap())).unwrap();
        let mut s = Session::with_options(Arc::new(model), SessionOptions::default()).unwrap();
        let err = s.prepare().unwrap_err().to_string();
        assert!(err.contains("intermediate"), "{err}");
    }

    #[test]
    fn state_inputs_must_be_variable_tensors() {
        let mut spec = svdf_model(false);
        spec.tensors.iter_mut().for_each(|t| t.is_variable = false);
        let model = Model::from_bytes(Arc::new(spec.to_bytes().unwrap())).unwrap();
        let mut s = Session::with_options(Arc::new(model), SessionOptions::default()).unwrap();
        s.prepare().unwrap();
        s.set_input_f32(0, &[0.5; 10]).unwrap();
        let err = s.run().unwrap_err().to_string();
        assert!(err.contains("variable"), "{err}");
    }
}
