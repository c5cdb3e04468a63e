//! Recurrent ops: LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM,
//! RNN, UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN and SVDF, float32
//! and hybrid (int8 weight matrices with one scale, float activations).
//!
//! Their state (output and cell state, hidden state, SVDF memory) lives in the
//! model's variable tensors, which the kernel receives as writable views after its
//! outputs (see [`crate::backend::KernelFn`]) and updates in place, so it carries
//! from one invocation to the next. LiteRT requires these inputs to be variables,
//! and so does ferrite.
//!
//! [`layout`] validates an op once and describes where everything is; the CPU
//! kernels here and the reference backend's naive ones both run from it.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::qrecurrent as kq;
use ferrite_kernels::recurrent::{self as kr, CellActivation, Mat};

use crate::backend::{typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::DType;
use crate::ops::{Activation, OpParams, RecurrentParams};

/// The recurrent family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
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
    // The basic cell's module is gated with the family (this file also serves
    // builds without it).
    #[cfg(feature = "op-recurrent")]
    if super::basic_lstm::is_basic_lstm(code, op) {
        return Some(super::basic_lstm::build(op));
    }
    if is_integer_lstm(code, op) {
        return Some(integer_lstm(code, op).map(|l| Built { outputs: vec![(DType::I8, l.output_shape.clone())], kernel: integer_lstm_kernel(l) }));
    }
    if is_integer_svdf(code, op) {
        return Some(
            integer_svdf(op).map(|(p, batch)| Built { outputs: vec![(DType::I8, vec![batch, p.filters / p.rank])], kernel: integer_svdf_kernel(p, batch) }),
        );
    }
    Some(layout(code, op).map(|l| Built { outputs: l.output_specs(), kernel: kernel(l) }))
}

/// One tensor input a kernel reads: its input slot, and scale when it holds int8
/// weights (hybrid).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub idx: usize,
    pub scale: Option<f32>,
}

/// One direction of an LSTM: the slots of its tensors (gates input, forget, cell,
/// output) and sizes.
#[derive(Debug, Clone)]
pub(crate) struct LstmDir {
    pub n_cell: usize,
    pub n_output: usize,
    pub input_w: [Option<Slot>; 4],
    pub recurrent_w: [Option<Slot>; 4],
    pub peephole: [Option<Slot>; 3],
    pub bias: [Option<Slot>; 4],
    pub layer_norm: [Option<Slot>; 4],
    pub projection: Option<Slot>,
    pub projection_bias: Option<Slot>,
}

/// One direction of an RNN: weights `[units, n_input]`, recurrent `[units, units]`, bias.
#[derive(Debug, Clone)]
pub(crate) struct RnnDir {
    pub units: usize,
    pub w: Slot,
    pub r: Slot,
    pub bias: Slot,
}

/// What a recurrent op computes.
#[derive(Debug, Clone)]
pub(crate) enum Cell {
    /// One LSTM per direction.
    Lstm(Vec<LstmDir>),
    /// One RNN per direction.
    Rnn(Vec<RnnDir>),
    /// SVDF.
    Svdf { filters: usize, memory: usize, rank: usize, features: Slot, time: Slot, bias: Option<Slot> },
}

/// A validated recurrent op.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub cell: Cell,
    /// Time steps (1 for the non-sequence ops).
    pub time: usize,
    pub batch: usize,
    pub n_input: usize,
    pub time_major: bool,
    /// Bidirectional ops: one output holding both directions.
    pub merge: bool,
    pub activation: CellActivation,
    pub cell_clip: f32,
    pub proj_clip: f32,
    pub asymmetric: bool,
    /// The input's shape, whose last dimension the outputs replace.
    pub input_shape: Vec<usize>,
    /// Element count of each state tensor, in input order.
    pub states: Vec<usize>,
    /// Element counts the kernel checks every input against (present inputs).
    pub present: Vec<(usize, usize)>,
}

impl Layout {
    /// Output dtypes and shapes.
    pub(crate) fn output_specs(&self) -> Vec<(DType, Vec<usize>)> {
        let with_last = |n: usize| {
            let mut s = self.input_shape.clone();
            if let Some(l) = s.last_mut() {
                *l = n;
            }
            (DType::F32, s)
        };
        match &self.cell {
            Cell::Lstm(dirs) if dirs.len() == 2 && self.merge => vec![with_last(dirs[0].n_output + dirs[1].n_output)],
            Cell::Lstm(dirs) => dirs.iter().map(|d| with_last(d.n_output)).collect(),
            Cell::Rnn(dirs) if dirs.len() == 2 && self.merge => vec![with_last(dirs[0].units + dirs[1].units)],
            Cell::Rnn(dirs) => dirs.iter().map(|d| with_last(d.units)).collect(),
            Cell::Svdf { filters, rank, .. } => vec![with_last(filters / rank)],
        }
    }

    /// Output units of direction `d`, and where they start in a merged output row.
    pub(crate) fn out_units(&self) -> Vec<usize> {
        match &self.cell {
            Cell::Lstm(dirs) => dirs.iter().map(|d| d.n_output).collect(),
            Cell::Rnn(dirs) => dirs.iter().map(|d| d.units).collect(),
            Cell::Svdf { filters, rank, .. } => vec![filters / rank],
        }
    }

    /// The sequence walk of direction `d` over output `k`'s rows.
    pub(crate) fn sequence(&self, d: usize) -> kr::Sequence {
        let units = self.out_units();
        let merged = self.merge && units.len() == 2;
        kr::Sequence {
            time: self.time,
            batch: self.batch,
            time_major: self.time_major,
            reverse: d == 1,
            out_row: if merged { units.iter().sum() } else { units[d] },
            out_offset: if merged && d == 1 { units[0] } else { 0 },
        }
    }
}

fn cell_activation(op: &OpContext<'_>, a: Activation) -> Result<CellActivation> {
    Ok(match a {
        Activation::None => CellActivation::None,
        Activation::Relu => CellActivation::Relu,
        Activation::ReluN1To1 => CellActivation::ReluN1To1,
        Activation::Relu6 => CellActivation::Relu6,
        Activation::Tanh => CellActivation::Tanh,
        Activation::SignBit => return Err(op.unsupported("SIGN_BIT activation in a recurrent cell")),
    })
}

/// Validates a recurrent op: types, shapes, which optional tensors are there.
pub(crate) fn layout(code: B, op: &OpContext<'_>) -> Result<Layout> {
    let x = op.input(0)?;
    if x.dtype != DType::F32 {
        return Err(op.unsupported(format!("{} input: only float32 (and hybrid int8 weights) is implemented", x.dtype.name())));
    }
    let (p, rank) = match op.op.params {
        OpParams::Recurrent(p) => (p, 0),
        OpParams::Svdf { rank, activation, asymmetric_quantize_inputs } => {
            (RecurrentParams { activation, asymmetric_quantize_inputs, ..Default::default() }, rank)
        }
        _ => return Err(op.bad("missing recurrent options")),
    };
    if p.basic_kernel {
        return Err(op.unsupported("the basic LSTM kernel (LSTMKernelType BASIC)"));
    }
    if p.diagonal_recurrent {
        return Err(op.unsupported("diagonal recurrent weights"));
    }
    let sequence =
        matches!(code, B::UNIDIRECTIONAL_SEQUENCE_LSTM | B::BIDIRECTIONAL_SEQUENCE_LSTM | B::UNIDIRECTIONAL_SEQUENCE_RNN | B::BIDIRECTIONAL_SEQUENCE_RNN);
    let shape = x.shape.clone();
    let (time, batch, n_input) = match (sequence, &shape[..]) {
        (true, &[a, b, i]) => {
            if p.time_major {
                (a, b, i)
            } else {
                (b, a, i)
            }
        }
        (false, &[b, i]) => (1, b, i),
        _ => return Err(op.bad(format!("input shape {shape:?} has the wrong rank"))),
    };
    let mut present = vec![(0, op.checked_elements(&shape, 4)?)];
    let mut states = Vec::new();
    let mut c = Checker { op, present: &mut present };
    let cell = match code {
        B::LSTM | B::UNIDIRECTIONAL_SEQUENCE_LSTM => {
            let d = c.lstm_dir(n_input, [1, 5, 9, 12, 16], Some(20))?;
            states.extend([c.state(18, batch * d.n_output)?, c.state(19, batch * d.n_cell)?]);
            Cell::Lstm(vec![d])
        }
        B::BIDIRECTIONAL_SEQUENCE_LSTM => {
            if (39..48).any(|k| op.opt_input(k).is_some()) {
                return Err(op.unsupported("auxiliary input"));
            }
            let fw = c.lstm_dir(n_input, [1, 5, 9, 12, 16], None)?;
            let bw = c.lstm_dir(n_input, [18, 22, 26, 29, 33], None)?;
            states.extend([
                c.state(35, batch * fw.n_output)?,
                c.state(36, batch * fw.n_cell)?,
                c.state(37, batch * bw.n_output)?,
                c.state(38, batch * bw.n_cell)?,
            ]);
            Cell::Lstm(vec![fw, bw])
        }
        B::RNN | B::UNIDIRECTIONAL_SEQUENCE_RNN => {
            let d = c.rnn_dir(n_input, 1)?;
            states.push(c.state(4, batch * d.units)?);
            Cell::Rnn(vec![d])
        }
        B::BIDIRECTIONAL_SEQUENCE_RNN => {
            if (9..12).any(|k| op.opt_input(k).is_some()) {
                return Err(op.unsupported("auxiliary input"));
            }
            let fw = c.rnn_dir(n_input, 1)?;
            let bw = c.rnn_dir(n_input, 5)?;
            states.extend([c.state(4, batch * fw.units)?, c.state(8, batch * bw.units)?]);
            Cell::Rnn(vec![fw, bw])
        }
        _ => {
            let features = c.matrix(1, None, Some(n_input))?;
            let (filters, _) = c.dims2(1)?;
            let (tf, memory) = c.dims2(2)?;
            if tf != filters || memory == 0 {
                return Err(op.bad(format!("time weights [{tf}, {memory}] do not match {filters} filters")));
            }
            let time = c.matrix(2, Some(filters), Some(memory))?;
            let rank = usize::try_from(rank)
                .ok()
                .filter(|&r| r > 0 && filters % r == 0)
                .ok_or_else(|| op.bad(format!("rank {rank} does not divide {filters} filters")))?;
            let bias = c.vector(3, filters / rank, false)?;
            states.push(c.state(4, batch * filters * memory)?);
            Cell::Svdf { filters, memory, rank, features, time, bias }
        }
    };
    let bidirectional = matches!(code, B::BIDIRECTIONAL_SEQUENCE_LSTM | B::BIDIRECTIONAL_SEQUENCE_RNN);
    op.expect_outputs(if bidirectional && !p.merge_outputs { 2 } else { 1 })?;
    if let Some(o) = op.outputs.iter().find(|o| o.dtype != DType::F32) {
        return Err(op.unsupported(format!("{} output of a float recurrent op", o.dtype.name())));
    }
    Ok(Layout {
        cell,
        time,
        batch,
        n_input,
        time_major: p.time_major,
        merge: p.merge_outputs,
        activation: cell_activation(op, p.activation)?,
        cell_clip: p.cell_clip.max(0.0),
        proj_clip: p.proj_clip.max(0.0),
        asymmetric: p.asymmetric_quantize_inputs,
        input_shape: shape,
        states,
        present,
    })
}

/// Shape and type checks of the weights, recording each present input's size.
struct Checker<'c, 'a> {
    op: &'c OpContext<'a>,
    present: &'c mut Vec<(usize, usize)>,
}

impl Checker<'_, '_> {
    fn dims2(&self, k: usize) -> Result<(usize, usize)> {
        match self.op.input(k)?.shape[..] {
            [a, b] => Ok((a, b)),
            ref s => Err(self.op.bad(format!("input {k} must be 2-D, got {s:?}"))),
        }
    }

    /// A float or int8 (per-tensor scale, zero point 0) tensor of exactly `dims`.
    fn typed_slot(&mut self, k: usize, dims: &[usize], int8_ok: bool) -> Result<Slot> {
        let d = self.op.input(k)?;
        if d.shape != dims {
            return Err(self.op.bad(format!("input {k} has shape {:?}, expected {dims:?}", d.shape)));
        }
        let len = self.op.checked_elements(dims, 4)?;
        let scale = match d.dtype {
            DType::F32 => None,
            DType::I8 if int8_ok => {
                let q = d.quant.ok_or_else(|| self.op.bad(format!("int8 input {k} has no quantization")))?;
                if q.scale.len() != 1 || q.zero_point.first().is_some_and(|&z| z != 0) {
                    return Err(self.op.unsupported(format!("input {k}: only int8 weights with one scale and zero point 0 are implemented")));
                }
                Some(q.scale[0])
            }
            t => return Err(self.op.unsupported(format!("input {k} has type {}", t.name()))),
        };
        self.present.push((k, len));
        Ok(Slot { idx: k, scale })
    }

    fn matrix(&mut self, k: usize, rows: Option<usize>, cols: Option<usize>) -> Result<Slot> {
        let (r, c) = self.dims2(k)?;
        if rows.is_some_and(|v| v != r) || cols.is_some_and(|v| v != c) {
            return Err(self.op.bad(format!("input {k} has shape [{r}, {c}], expected [{}, {}]", rows.unwrap_or(r), cols.unwrap_or(c))));
        }
        self.typed_slot(k, &[r, c], true)
    }

    fn opt_matrix(&mut self, k: usize, rows: usize, cols: usize) -> Result<Option<Slot>> {
        self.op.opt_input(k).map(|_| self.matrix(k, Some(rows), Some(cols))).transpose()
    }

    fn vector(&mut self, k: usize, n: usize, int8_ok: bool) -> Result<Option<Slot>> {
        self.op.opt_input(k).map(|_| self.typed_slot(k, &[n], int8_ok)).transpose()
    }

    /// A state input: float32 of `n` elements (any shape).
    fn state(&mut self, k: usize, n: usize) -> Result<usize> {
        let d = self.op.input(k)?;
        if d.dtype != DType::F32 {
            return Err(self.op.unsupported(format!("state input {k} has type {}", d.dtype.name())));
        }
        if d.shape.iter().product::<usize>() != n {
            return Err(self.op.bad(format!("state input {k} has shape {:?}, expected {n} elements", d.shape)));
        }
        Ok(n)
    }

    /// An LSTM direction whose input weights start at slot `at[0]`, recurrent
    /// weights at `at[1]`, peepholes at `at[2]`, biases at `at[3]`, projection at
    /// `at[4]`; layer-norm coefficients at `ln`.
    fn lstm_dir(&mut self, n_input: usize, at: [usize; 5], ln: Option<usize>) -> Result<LstmDir> {
        let (n_cell, _) = self.dims2(at[0] + 3)?;
        let (_, n_output) = self.dims2(at[1] + 3)?;
        let cifg = self.op.opt_input(at[0]).is_none();
        let gate = |g: usize| !(cifg && g == 0);
        let mut input_w = [None; 4];
        let mut recurrent_w = [None; 4];
        let mut bias = [None; 4];
        let mut layer_norm = [None; 4];
        for g in (0..4).filter(|&g| gate(g)) {
            input_w[g] = Some(self.matrix(at[0] + g, Some(n_cell), Some(n_input))?);
            recurrent_w[g] = Some(self.matrix(at[1] + g, Some(n_cell), Some(n_output))?);
            bias[g] = Some(self.typed_slot(at[3] + g, &[n_cell], false)?);
            if let Some(l) = ln {
                layer_norm[g] = self.vector(l + g, n_cell, false)?;
            }
        }
        if layer_norm.iter().enumerate().any(|(g, s)| gate(g) && s.is_none()) && layer_norm.iter().any(Option::is_some) {
            return Err(self.op.bad("layer-norm coefficients are given for some gates only"));
        }
        let mut peephole = [None; 3];
        for (g, slot) in peephole.iter_mut().enumerate() {
            if g != 0 || !cifg {
                *slot = self.vector(at[2] + g, n_cell, true)?;
            }
        }
        if peephole.iter().any(Option::is_some) && (peephole[1].is_none() || peephole[2].is_none() || (!cifg && peephole[0].is_none())) {
            return Err(self.op.bad("peephole weights are given for some gates only"));
        }
        let projection = self.opt_matrix(at[4], n_output, n_cell)?;
        if projection.is_none() && n_output != n_cell {
            return Err(self.op.bad(format!("without a projection the output size {n_output} must equal the cell size {n_cell}")));
        }
        let projection_bias = self.vector(at[4] + 1, n_output, false)?;
        Ok(LstmDir { n_cell, n_output, input_w, recurrent_w, peephole, bias, layer_norm, projection, projection_bias })
    }

    /// An RNN direction whose weights, recurrent weights and bias start at `at`.
    fn rnn_dir(&mut self, n_input: usize, at: usize) -> Result<RnnDir> {
        let (units, _) = self.dims2(at)?;
        let w = self.matrix(at, Some(units), Some(n_input))?;
        let r = self.matrix(at + 1, Some(units), Some(units))?;
        let bias = self.typed_slot(at + 2, &[units], false)?;
        Ok(RnnDir { units, w, r, bias })
    }
}

/// A kernel's writable float views: its outputs, and its state tensors.
pub(crate) type OutputsAndStates<'o> = (Vec<&'o mut [f32]>, Vec<&'o mut [f32]>);

/// The run-time views of one invocation: present inputs checked against the
/// layout, states split off the outputs.
pub(crate) fn split_io<'o>(l: &Layout, ins: &[Option<&[u8]>], outs: &'o mut [&mut [u8]], n_outputs: usize) -> Result<OutputsAndStates<'o>> {
    for &(k, len) in &l.present {
        let b = ins.get(k).copied().flatten().ok_or_else(|| Error::Runtime(format!("input {k} is a variable tensor or missing").into()))?;
        if b.len() != len * if l.is_int8(k) { 1 } else { 4 } {
            return Err(Error::Runtime(format!("input {k} holds {} bytes, expected {len} elements", b.len()).into()));
        }
    }
    if outs.len() != n_outputs + l.states.len() {
        return Err(Error::Runtime("the state inputs of a recurrent op must be variable tensors".into()));
    }
    let mut outputs = Vec::new();
    let mut states = Vec::new();
    for (k, o) in outs.iter_mut().enumerate() {
        let v = typed_mut::<f32>(o)?;
        if k < n_outputs {
            outputs.push(v);
        } else {
            if v.len() != l.states[k - n_outputs] {
                return Err(Error::Runtime(format!("state {} holds {} values, expected {}", k - n_outputs, v.len(), l.states[k - n_outputs]).into()));
            }
            states.push(v);
        }
    }
    Ok((outputs, states))
}

impl Layout {
    /// True when input `k` holds int8 weights.
    fn is_int8(&self, k: usize) -> bool {
        let any = |s: &[Option<Slot>]| s.iter().flatten().any(|s| s.idx == k && s.scale.is_some());
        match &self.cell {
            Cell::Lstm(dirs) => dirs.iter().any(|d| any(&d.input_w) || any(&d.recurrent_w) || any(&d.peephole) || any(&[d.projection])),
            Cell::Rnn(dirs) => dirs.iter().any(|d| any(&[Some(d.w), Some(d.r)])),
            Cell::Svdf { features, time, .. } => any(&[Some(*features), Some(*time)]),
        }
    }
}

/// The float values of a vector input (int8 ones dequantized).
pub(crate) fn vector_f32(ins: &[Option<&[u8]>], s: &Slot) -> Result<Vec<f32>> {
    let b = ins.get(s.idx).copied().flatten().ok_or_else(|| Error::Runtime(format!("input {} is missing", s.idx).into()))?;
    Ok(match s.scale {
        Some(scale) => b.iter().map(|&v| f32::from(v as i8) * scale).collect(),
        None => typed::<f32>(b)?.to_vec(),
    })
}

/// A matrix input as the kernels read it, with its row sums when asymmetric hybrid.
fn matrix<'a>(ins: &[Option<&'a [u8]>], s: &Slot, sums: &'a [i32]) -> Result<Mat<'a>> {
    let b = ins.get(s.idx).copied().flatten().ok_or_else(|| Error::Runtime(format!("input {} is missing", s.idx).into()))?;
    Ok(match s.scale {
        Some(scale) => Mat::I8 { w: bytemuck::cast_slice(b), scale, row_sums: sums },
        None => Mat::F32(typed::<f32>(b)?),
    })
}

/// Row sums of a hybrid matrix (needed when inputs are quantized asymmetrically).
fn row_sums(ins: &[Option<&[u8]>], s: &Option<Slot>, cols: usize, asymmetric: bool) -> Vec<i32> {
    match (s, asymmetric) {
        (Some(s), true) if s.scale.is_some() => {
            ins.get(s.idx).copied().flatten().map(|b| ferrite_kernels::hybrid::row_sums(bytemuck::cast_slice(b), cols)).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

fn kernel(l: Layout) -> crate::backend::KernelFn {
    let n_outputs = l.output_specs().len();
    let mut lstm_scratch: Vec<kr::LstmScratch> = vec![Default::default(); 2];
    let mut rnn_scratch: Vec<kr::RnnScratch> = vec![Default::default(); 2];
    let mut svdf_scratch = kr::SvdfScratch::default();
    Box::new(move |ins, outs| {
        let (mut outputs, mut states) = split_io(&l, ins, outs, n_outputs)?;
        let x = typed::<f32>(crate::backend::arg(ins, 0)?)?;
        match &l.cell {
            Cell::Lstm(dirs) => {
                for (d, dir) in dirs.iter().enumerate() {
                    // Row sums and float peepholes, per invocation (the weights may be run-time tensors).
                    let ni = l.n_input;
                    let sums_x: Vec<Vec<i32>> = dir.input_w.iter().map(|s| row_sums(ins, s, ni, l.asymmetric)).collect();
                    let sums_h: Vec<Vec<i32>> = dir.recurrent_w.iter().map(|s| row_sums(ins, s, dir.n_output, l.asymmetric)).collect();
                    let sums_p = row_sums(ins, &dir.projection, dir.n_cell, l.asymmetric);
                    let peep: Vec<Option<Vec<f32>>> = dir.peephole.iter().map(|s| s.as_ref().map(|s| vector_f32(ins, s)).transpose()).collect::<Result<_>>()?;
                    let vec_of =
                        |s: &Option<Slot>| -> Result<Option<&[f32]>> { s.as_ref().map(|s| typed::<f32>(crate::backend::arg(ins, s.idx)?)).transpose() };
                    let mut input_w = [None; 4];
                    let mut recurrent_w = [None; 4];
                    let mut bias = [None; 4];
                    let mut layer_norm = [None; 4];
                    for g in 0..4 {
                        input_w[g] = dir.input_w[g].as_ref().map(|s| matrix(ins, s, &sums_x[g])).transpose()?;
                        recurrent_w[g] = dir.recurrent_w[g].as_ref().map(|s| matrix(ins, s, &sums_h[g])).transpose()?;
                        bias[g] = vec_of(&dir.bias[g])?;
                        layer_norm[g] = vec_of(&dir.layer_norm[g])?;
                    }
                    let cell = kr::Lstm {
                        n_input: ni,
                        n_cell: dir.n_cell,
                        n_output: dir.n_output,
                        input_w,
                        recurrent_w,
                        peephole: std::array::from_fn(|g| peep[g].as_deref()),
                        bias,
                        layer_norm,
                        projection: dir.projection.as_ref().map(|s| matrix(ins, s, &sums_p)).transpose()?,
                        projection_bias: vec_of(&dir.projection_bias)?,
                        activation: l.activation,
                        cell_clip: l.cell_clip,
                        proj_clip: l.proj_clip,
                        asymmetric: l.asymmetric,
                    };
                    let out = &mut *outputs[if l.merge { 0 } else { d }];
                    let (h, c) = states[2 * d..].split_at_mut(1);
                    kr::lstm_sequence(&cell, &l.sequence(d), x, out, &mut *h[0], &mut *c[0], &mut lstm_scratch[d]);
                }
            }
            Cell::Rnn(dirs) => {
                for (d, dir) in dirs.iter().enumerate() {
                    let sw = row_sums(ins, &Some(dir.w), l.n_input, l.asymmetric);
                    let sr = row_sums(ins, &Some(dir.r), dir.units, l.asymmetric);
                    let (w, r) = (matrix(ins, &dir.w, &sw)?, matrix(ins, &dir.r, &sr)?);
                    let bias = typed::<f32>(crate::backend::arg(ins, dir.bias.idx)?)?;
                    let out = &mut *outputs[if l.merge { 0 } else { d }];
                    kr::rnn_sequence(
                        &w,
                        &r,
                        bias,
                        l.activation,
                        l.asymmetric,
                        l.n_input,
                        dir.units,
                        &l.sequence(d),
                        x,
                        out,
                        &mut *states[d],
                        &mut rnn_scratch[d],
                    );
                }
            }
            Cell::Svdf { filters, memory, rank, features, time, bias } => {
                let sf = row_sums(ins, &Some(*features), l.n_input, l.asymmetric);
                let time_w = vector_f32(ins, time)?;
                let bias = bias.as_ref().map(|s| typed::<f32>(crate::backend::arg(ins, s.idx)?)).transpose()?;
                let p = kr::Svdf {
                    n_input: l.n_input,
                    filters: *filters,
                    memory: *memory,
                    rank: *rank,
                    features: matrix(ins, features, &sf)?,
                    time: &time_w,
                    bias,
                    activation: l.activation,
                    asymmetric: l.asymmetric,
                };
                kr::svdf_step(&p, l.batch, x, &mut *states[0], &mut *outputs[0], &mut svdf_scratch);
            }
        }
        Ok(())
    })
}

/// True when the op is the fully integer LSTM (int8 input): LSTM and
/// UNIDIRECTIONAL_SEQUENCE_LSTM run it with int8 weights and output state and an
/// int16 cell state.
pub(crate) fn is_integer_lstm(code: B, op: &OpContext<'_>) -> bool {
    matches!(code, B::LSTM | B::UNIDIRECTIONAL_SEQUENCE_LSTM) && op.opt_input(0).is_some_and(|x| x.dtype == DType::I8)
}

/// A constant input's little-endian values (read element by element: a constant's
/// bytes need not be aligned for its type).
fn const_values<T, const N: usize>(op: &OpContext<'_>, k: usize, n: usize, from: fn([u8; N]) -> T) -> Result<Vec<T>> {
    let d = op.input(k)?;
    let v = d.value.filter(|_| d.constant).ok_or_else(|| op.unsupported(format!("input {k} of an integer LSTM must be a constant")))?;
    if v.len() != n * N {
        return Err(op.bad(format!("input {k} holds {} bytes, expected {n} values of {N} bytes", v.len())));
    }
    Ok(v.chunks_exact(N).map(|c| from(c.try_into().unwrap_or([0; N]))).collect())
}

/// The per-tensor scale and zero point of input `k`, which must be of type `t`.
fn scale_of(op: &OpContext<'_>, k: usize, t: DType) -> Result<(f32, i32)> {
    let d = op.input(k)?;
    if d.dtype != t {
        return Err(op.unsupported(format!("input {k} of an integer LSTM has type {}, expected {}", d.dtype.name(), t.name())));
    }
    let q = d.quant.ok_or_else(|| op.bad(format!("input {k} of an integer LSTM has no quantization")))?;
    match (q.scale.first(), q.zero_point.first()) {
        (Some(&s), Some(&z)) if s > 0.0 && s.is_finite() => Ok((s, i32::try_from(z).map_err(|_| op.bad("zero point out of range"))?)),
        _ => Err(op.bad(format!("input {k} of an integer LSTM has no usable scale"))),
    }
}

/// The integer LSTM's validated shape and parameters.
#[derive(Debug, Clone)]
pub(crate) struct IntegerLstm {
    pub cell: kq::QLstm,
    pub time: usize,
    pub batch: usize,
    pub time_major: bool,
    pub output_shape: Vec<usize>,
}

/// Validates an integer LSTM as LiteRT's prepare does and derives its kernel
/// parameters (the weights must be constants: the zero points are folded into the
/// biases once, as LiteRT does at prepare).
pub(crate) fn integer_lstm(code: B, op: &OpContext<'_>) -> Result<IntegerLstm> {
    let OpParams::Recurrent(p) = op.op.params else { return Err(op.bad("missing recurrent options")) };
    if p.basic_kernel {
        return Err(op.unsupported("the basic LSTM kernel (LSTMKernelType BASIC)"));
    }
    if p.diagonal_recurrent {
        return Err(op.unsupported("diagonal recurrent weights"));
    }
    if p.intermediates.count != 5 {
        return Err(op.unsupported(format!(
            "an integer LSTM with {} intermediate tensors (the 8x8->16 kernel takes 5; LiteRT's 8x8->8 form is not implemented)",
            p.intermediates.count
        )));
    }
    let x = op.input(0)?;
    let shape = x.shape.clone();
    let sequence = code == B::UNIDIRECTIONAL_SEQUENCE_LSTM;
    let (time, batch, n_input, time_major) = match (sequence, &shape[..]) {
        (true, &[a, b, i]) if p.time_major => (a, b, i, true),
        (true, &[b, t, i]) => (t, b, i, false),
        (false, &[b, i]) => (1, b, i, true),
        _ => return Err(op.bad(format!("input shape {shape:?} has the wrong rank"))),
    };
    let dims2 = |k: usize| -> Result<(usize, usize)> {
        match op.input(k)?.shape[..] {
            [a, b] => Ok((a, b)),
            ref s => Err(op.bad(format!("input {k} must be 2-D, got {s:?}"))),
        }
    };
    let (n_cell, _) = dims2(4)?;
    let (_, n_output) = dims2(8)?;
    let cifg = op.opt_input(1).is_none();
    let use_ln = op.opt_input(21).is_some();
    let mut s = kq::QLstmScales {
        input: scale_of(op, 0, DType::I8)?,
        output_state: scale_of(op, 18, DType::I8)?,
        cell_state: scale_of(op, 19, DType::I16)?.0,
        ..Default::default()
    };
    let out = op.outputs.first().ok_or_else(|| op.bad("no output"))?;
    if out.dtype != DType::I8 {
        return Err(op.unsupported(format!("{} output of an integer LSTM", out.dtype.name())));
    }
    s.output = out.quant.as_ref().and_then(|q| q.scale.first().copied()).ok_or_else(|| op.bad("the output has no quantization"))?;
    s.cell_clip = p.cell_clip.max(0.0);
    s.proj_clip = p.proj_clip.max(0.0);
    for (k, slot) in s.intermediates.iter_mut().enumerate() {
        // The gates' intermediates are read with layer norm only; the hidden one always.
        if k == 4 || use_ln {
            let (sc, zp) = p.intermediates.quant[k].ok_or_else(|| op.bad(format!("intermediate tensor {k} has no quantization")))?;
            *slot = (sc, i32::try_from(zp).map_err(|_| op.bad("zero point out of range"))?);
        }
    }
    let i8s = |k: usize, n: usize| const_values(op, k, n, |b: [u8; 1]| b[0] as i8);
    let i16s = |k: usize, n: usize| const_values(op, k, n, i16::from_le_bytes);
    let i32s = |k: usize, n: usize| const_values(op, k, n, i32::from_le_bytes);
    let check = |k: usize, dims: &[usize]| -> Result<()> {
        let d = op.input(k)?;
        if d.shape != dims {
            return Err(op.bad(format!("input {k} has shape {:?}, expected {dims:?}", d.shape)));
        }
        Ok(())
    };
    let mut wx: [Vec<i8>; 4] = Default::default();
    let mut wh: [Vec<i8>; 4] = Default::default();
    let mut bias: [Vec<i32>; 4] = Default::default();
    let mut ln: [Vec<i16>; 4] = Default::default();
    let mut pw: [Vec<i16>; 3] = Default::default();
    for g in (0..4).filter(|&g| !(cifg && g == 0)) {
        check(1 + g, &[n_cell, n_input])?;
        check(5 + g, &[n_cell, n_output])?;
        check(12 + g, &[n_cell])?;
        s.input_w[g] = scale_of(op, 1 + g, DType::I8)?.0;
        s.recurrent_w[g] = scale_of(op, 5 + g, DType::I8)?.0;
        wx[g] = i8s(1 + g, n_cell * n_input)?;
        wh[g] = i8s(5 + g, n_cell * n_output)?;
        if op.input(12 + g)?.dtype != DType::I32 {
            return Err(op.unsupported("gate biases of an integer LSTM must be int32"));
        }
        bias[g] = i32s(12 + g, n_cell)?;
        if use_ln {
            check(20 + g, &[n_cell])?;
            s.layer_norm[g] = scale_of(op, 20 + g, DType::I16)?.0;
            ln[g] = i16s(20 + g, n_cell)?;
        }
    }
    if cifg && (op.opt_input(5).is_some() || op.opt_input(12).is_some() || op.opt_input(20).is_some()) {
        return Err(op.bad("a CIFG LSTM has input-gate tensors"));
    }
    let peephole = op.opt_input(11).is_some();
    for (j, slot) in pw.iter_mut().enumerate() {
        let present = op.opt_input(9 + j).is_some();
        if present != (peephole && !(cifg && j == 0)) {
            return Err(op.bad("peephole weights are given for some gates only"));
        }
        if present {
            check(9 + j, &[n_cell])?;
            s.peephole[j] = scale_of(op, 9 + j, DType::I16)?.0;
            *slot = i16s(9 + j, n_cell)?;
        }
    }
    if peephole && n_output > n_cell {
        // LiteRT's integer peephole reads `n_output` values of each `n_cell` row.
        return Err(op.unsupported("integer peepholes with more outputs than cells (LiteRT reads past the cell state)"));
    }
    let (mut proj, mut proj_bias) = (None, None);
    if op.opt_input(16).is_some() {
        check(16, &[n_output, n_cell])?;
        s.projection = scale_of(op, 16, DType::I8)?.0;
        proj = Some(i8s(16, n_output * n_cell)?);
        if op.opt_input(17).is_some() {
            check(17, &[n_output])?;
            proj_bias = Some(i32s(17, n_output)?);
        }
    } else if n_output != n_cell {
        return Err(op.bad(format!("without a projection the output size {n_output} must equal the cell size {n_cell}")));
    } else if op.opt_input(17).is_some() {
        return Err(op.bad("a projection bias without projection weights"));
    }
    for (k, n) in [(18, batch * n_output), (19, batch * n_cell)] {
        if op.input(k)?.shape.iter().product::<usize>() != n {
            return Err(op.bad(format!("state input {k} has shape {:?}, expected {n} elements", op.input(k)?.shape)));
        }
    }
    fn present(v: &[i8]) -> Option<&[i8]> {
        (!v.is_empty()).then_some(v)
    }
    let t = kq::QLstmTensors {
        input_w: std::array::from_fn(|g| present(&wx[g]).filter(|_| !(cifg && g == 0))),
        recurrent_w: std::array::from_fn(|g| present(&wh[g]).filter(|_| !(cifg && g == 0))),
        peephole: std::array::from_fn(|j| (!pw[j].is_empty()).then_some(&pw[j][..])),
        bias: std::array::from_fn(|g| (!(cifg && g == 0)).then_some(&bias[g][..])),
        layer_norm: std::array::from_fn(|g| (use_ln && !(cifg && g == 0)).then_some(&ln[g][..])),
        projection: proj.as_deref(),
        projection_bias: proj_bias.as_deref(),
    };
    // n_cell = 0 would leave the per-row loops without rows; LiteRT divides by it.
    if n_cell == 0 || n_input == 0 || n_output == 0 {
        return Err(op.bad("an LSTM needs at least one input, cell and output unit"));
    }
    let shift = kq::checked_log2(s.cell_state).ok_or_else(|| op.unsupported("a cell state whose scale is not a power of two"))?;
    // The cell's tanh is the 16-bit fixed-point one with 15 + shift integer bits;
    // below 2^-15 LiteRT computes none and reuses the input gate's buffer, which a
    // CIFG cell does not have.
    if shift > -11 || (shift < -15 && cifg) {
        return Err(op.unsupported(format!("cell state scale 2^{shift} (the integer kernel takes 2^-15 to 2^-11, or below with an input gate)")));
    }
    let cell = kq::QLstm::new(n_input, n_cell, n_output, &s, &t).ok_or_else(|| op.unsupported("a cell state whose scale is not a power of two"))?;
    let mut output_shape = shape;
    if let Some(l) = output_shape.last_mut() {
        *l = n_output;
    }
    op.checked_elements(&output_shape, 1)?;
    Ok(IntegerLstm { cell, time, batch, time_major, output_shape })
}

/// The integer LSTM's kernel: output, then the output state (int8) and cell state
/// (int16) variables.
pub(crate) fn integer_lstm_kernel(l: IntegerLstm) -> crate::backend::KernelFn {
    let mut scratch = kq::QLstmScratch::default();
    Box::new(move |ins, outs| {
        let x: &[i8] = bytemuck::cast_slice(crate::backend::arg(ins, 0)?);
        let (ni, nc, no) = (l.cell.n_input, l.cell.n_cell, l.cell.n_output);
        if x.len() != l.time * l.batch * ni {
            return Err(Error::Runtime(format!("input holds {} values, expected {}", x.len(), l.time * l.batch * ni).into()));
        }
        let [out, h, c] = outs else {
            return Err(Error::Runtime("the state inputs of a recurrent op must be variable tensors".into()));
        };
        let c = typed_mut::<i16>(c)?;
        let (out, h): (&mut [i8], &mut [i8]) = (bytemuck::cast_slice_mut(out), bytemuck::cast_slice_mut(h));
        if out.len() != l.time * l.batch * no || h.len() != l.batch * no || c.len() != l.batch * nc {
            return Err(Error::Runtime("integer LSTM buffers of the wrong size".into()));
        }
        kq::qlstm_sequence(&l.cell, l.time, l.batch, l.time_major, x, out, h, c, &mut scratch);
        Ok(())
    })
}

/// True for the integer SVDF (int8 input).
pub(crate) fn is_integer_svdf(code: B, op: &OpContext<'_>) -> bool {
    code == B::SVDF && op.opt_input(0).is_some_and(|x| x.dtype == DType::I8)
}

/// Validates an integer SVDF as LiteRT does (int8 feature weights, int16 time
/// weights and memory, int32 bias, int8 output, RELU) and derives its multipliers;
/// returns it with the batch size.
pub(crate) fn integer_svdf(op: &OpContext<'_>) -> Result<(kq::QSvdf, usize)> {
    let OpParams::Svdf { rank, activation, .. } = op.op.params else { return Err(op.bad("missing SVDF options")) };
    if activation != Activation::Relu {
        return Err(op.unsupported("an integer SVDF without RELU (LiteRT's integer kernel requires it)"));
    }
    let (batch, n_input) = match op.input(0)?.shape[..] {
        [b, i] => (b, i),
        ref s => Err(op.bad(format!("input shape {s:?} must be 2-D")))?,
    };
    let dims2 = |k: usize| -> Result<(usize, usize)> {
        match op.input(k)?.shape[..] {
            [a, b] => Ok((a, b)),
            ref s => Err(op.bad(format!("input {k} must be 2-D, got {s:?}"))),
        }
    };
    let (filters, fi) = dims2(1)?;
    let (tf, memory) = dims2(2)?;
    if fi != n_input || tf != filters || memory == 0 || n_input == 0 {
        return Err(op.bad(format!("SVDF weights [{filters}, {fi}] and [{tf}, {memory}] do not fit {n_input} inputs")));
    }
    let rank =
        usize::try_from(rank).ok().filter(|&r| r > 0 && filters % r == 0).ok_or_else(|| op.bad(format!("rank {rank} does not divide {filters} filters")))?;
    let units = filters / rank;
    let (in_scale, input_zp) = scale_of(op, 0, DType::I8)?;
    let (wf_scale, _) = scale_of(op, 1, DType::I8)?;
    let (wt_scale, _) = scale_of(op, 2, DType::I16)?;
    let (state_scale, _) = scale_of(op, 4, DType::I16)?;
    if op.input(4)?.shape.iter().product::<usize>() != batch * filters * memory {
        return Err(op.bad("the SVDF memory has the wrong size"));
    }
    let out = op.outputs.first().ok_or_else(|| op.bad("no output"))?;
    let oq = out.quant.as_ref().filter(|_| out.dtype == DType::I8).ok_or_else(|| op.unsupported("an integer SVDF's output must be quantized int8"))?;
    let (out_scale, output_zp) = match (oq.scale.first(), oq.zero_point.first()) {
        (Some(&s), Some(&z)) if s > 0.0 => (s, i32::try_from(z).map_err(|_| op.bad("zero point out of range"))?),
        _ => return Err(op.bad("the output has no usable scale")),
    };
    let bias = match op.opt_input(3) {
        Some(d) if d.dtype == DType::I32 && d.shape == [units] => Some(const_values(op, 3, units, i32::from_le_bytes)?),
        Some(_) => return Err(op.unsupported(format!("an integer SVDF's bias must be int32 [{units}]"))),
        None => None,
    };
    let p = kq::QSvdf {
        n_input,
        filters,
        memory,
        rank,
        features: const_values(op, 1, filters * n_input, |b: [u8; 1]| b[0] as i8)?,
        time: const_values(op, 2, filters * memory, i16::from_le_bytes)?,
        bias,
        // Products and quotients of the scales in double, as LiteRT's prepare.
        scale_1: ferrite_kernels::quant::quantize_multiplier(f64::from(in_scale) * f64::from(wf_scale) / f64::from(state_scale)),
        scale_2: ferrite_kernels::quant::quantize_multiplier(f64::from(state_scale) * f64::from(wt_scale) / f64::from(out_scale)),
        input_zp,
        output_zp,
    };
    Ok((p, batch))
}

/// The integer SVDF's kernel: output, then the memory variable (int16).
pub(crate) fn integer_svdf_kernel(p: kq::QSvdf, batch: usize) -> crate::backend::KernelFn {
    Box::new(move |ins, outs| {
        let x: &[i8] = bytemuck::cast_slice(crate::backend::arg(ins, 0)?);
        let [out, state] = outs else {
            return Err(Error::Runtime("the state input of SVDF must be a variable tensor".into()));
        };
        let state = typed_mut::<i16>(state)?;
        let out: &mut [i8] = bytemuck::cast_slice_mut(out);
        if x.len() != batch * p.n_input || state.len() != batch * p.filters * p.memory || out.len() != batch * (p.filters / p.rank) {
            return Err(Error::Runtime("integer SVDF buffers of the wrong size".into()));
        }
        kq::qsvdf_step(&p, batch, x, state, out);
        Ok(())
    })
}
