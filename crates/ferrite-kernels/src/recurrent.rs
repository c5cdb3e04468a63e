//! Recurrent cells, one time step at a time: LSTM (CIFG, peephole, layer norm,
//! projection, clipping), the fully-connected RNN cell and SVDF, in float32 and in
//! hybrid form (int8 weight matrices, float activations quantized row by row at
//! run time, as LiteRT's hybrid kernels do).
//!
//! A step works on `batch` independent rows; the callers walk the time axis and
//! keep the state (LSTM: output and cell state; RNN: hidden state; SVDF: the
//! activation memory) in the op's variable tensors.

use crate::gemm::dot;
use crate::hybrid::{fully_connected_acc, quantize_rows};

/// An activation a recurrent cell applies to a whole vector (LiteRT's
/// `ApplyActivationToVector`: the fused activations plus the sigmoid of the gates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellActivation {
    /// Identity.
    None,
    /// max(x, 0).
    Relu,
    /// clamp(x, -1, 1).
    ReluN1To1,
    /// clamp(x, 0, 6).
    Relu6,
    /// tanh.
    Tanh,
    /// 1 / (1 + e^-x).
    Sigmoid,
}

impl CellActivation {
    /// The activation of one value.
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            CellActivation::None => x,
            CellActivation::Relu => x.max(0.0),
            CellActivation::ReluN1To1 => x.clamp(-1.0, 1.0),
            CellActivation::Relu6 => x.clamp(0.0, 6.0),
            // The C library's functions, as LiteRT computes them: hybrid cells quantize
            // their state every step, and a last-bit difference here can move a value
            // across a rounding boundary, then through the recurrence.
            CellActivation::Tanh => x.tanh(),
            CellActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        }
    }

    fn apply_all(self, v: &mut [f32]) {
        if self != CellActivation::None {
            v.iter_mut().for_each(|x| *x = self.apply(*x));
        }
    }
}

/// A weight matrix of `rows x cols`, row-major: float, or int8 with one scale
/// (hybrid), with its row sums when inputs are quantized asymmetrically.
#[derive(Debug, Clone, Copy)]
pub enum Mat<'a> {
    /// float32 weights.
    F32(&'a [f32]),
    /// int8 weights, `value = w * scale`; `row_sums` empty unless inputs are asymmetric.
    I8 {
        /// The weights.
        w: &'a [i8],
        /// Their scale.
        scale: f32,
        /// Sum of each row (asymmetric input quantization only).
        row_sums: &'a [i32],
    },
}

/// Scratch for multiplying quantized rows: the int8 rows, their scales and zero
/// points, and the integer sums.
#[derive(Debug, Default, Clone)]
pub struct QuantRows {
    q: Vec<i8>,
    scale: Vec<f32>,
    zp: Vec<i32>,
    acc: Vec<i32>,
}

impl QuantRows {
    /// Quantizes `batch` rows of `n` floats (symmetric, or asymmetric per row).
    fn quantize(&mut self, x: &[f32], batch: usize, n: usize, asymmetric: bool) {
        self.q.resize(batch * n, 0);
        self.scale.resize(batch, 0.0);
        self.zp.clear();
        self.zp.resize(batch, 0);
        quantize_rows(&x[..batch * n], n, asymmetric, &mut self.q, &mut self.scale, &mut self.zp);
    }
}

/// `out[b, r] += sum_c m[r, c] * x[b, c]` for `batch` rows of `cols` inputs into
/// rows of `rows` outputs. A hybrid matrix reads `xq`, the rows already quantized.
fn mat_acc(m: &Mat<'_>, x: &[f32], xq: &mut QuantRows, batch: usize, cols: usize, rows: usize, out: &mut [f32]) {
    match *m {
        Mat::F32(w) => {
            for b in 0..batch {
                let xb = &x[b * cols..][..cols];
                for (r, o) in out[b * rows..][..rows].iter_mut().enumerate() {
                    *o += dot(xb, &w[r * cols..][..cols]);
                }
            }
        }
        Mat::I8 { w, scale, row_sums } => {
            xq.acc.resize(batch * rows, 0);
            fully_connected_acc(&xq.q, w, batch, cols, rows, row_sums, &xq.zp, &mut xq.acc);
            for b in 0..batch {
                let s = xq.scale[b] * scale;
                for (o, &a) in out[b * rows..][..rows].iter_mut().zip(&xq.acc[b * rows..][..rows]) {
                    *o += a as f32 * s;
                }
            }
        }
    }
}

fn is_hybrid(m: Option<&Mat<'_>>) -> bool {
    matches!(m, Some(Mat::I8 { .. }))
}

/// Normalizes each row of `n` values to zero mean and unit variance, with 1e-8
/// added to the variance (mean first, then the mean squared deviation), as LiteRT's
/// layer-norm LSTM does before its coefficients.
fn mean_stddev_normalize(v: &mut [f32], n: usize) {
    for row in v.chunks_exact_mut(n.max(1)) {
        let mean = row.iter().sum::<f32>() / n as f32;
        let variance = row.iter().map(|&x| (x - mean) * (x - mean)).sum::<f32>() / n as f32;
        let inv = 1.0 / (variance + 1e-8).sqrt();
        row.iter_mut().for_each(|x| *x = (*x - mean) * inv);
    }
}

/// One LSTM direction: its weights and options. Gates are indexed input, forget,
/// cell, output; the input gate's tensors are absent for CIFG (coupled input and
/// forget gates: `i = 1 - f`).
#[derive(Debug, Clone)]
pub struct Lstm<'a> {
    /// Input features.
    pub n_input: usize,
    /// Cell units.
    pub n_cell: usize,
    /// Output units (the projection's size, else `n_cell`).
    pub n_output: usize,
    /// Input-to-gate weights, `[n_cell, n_input]`.
    pub input_w: [Option<Mat<'a>>; 4],
    /// Recurrent (output-state-to-gate) weights, `[n_cell, n_output]`.
    pub recurrent_w: [Option<Mat<'a>>; 4],
    /// Peephole (cell-to-gate) weights of the input, forget and output gates, `[n_cell]`.
    pub peephole: [Option<&'a [f32]>; 3],
    /// Gate biases, `[n_cell]`.
    pub bias: [Option<&'a [f32]>; 4],
    /// Layer-norm coefficients per gate, `[n_cell]`.
    pub layer_norm: [Option<&'a [f32]>; 4],
    /// Projection weights `[n_output, n_cell]`.
    pub projection: Option<Mat<'a>>,
    /// Projection bias `[n_output]`.
    pub projection_bias: Option<&'a [f32]>,
    /// Activation of the cell gate and of the cell state on its way out.
    pub activation: CellActivation,
    /// Cell state clip (none when 0).
    pub cell_clip: f32,
    /// Projected output clip (none when 0).
    pub proj_clip: f32,
    /// Hybrid matrices quantize their inputs with a zero point per row.
    pub asymmetric: bool,
}

/// Scratch of [`lstm_step`], sized on first use.
#[derive(Debug, Default, Clone)]
pub struct LstmScratch {
    gates: [Vec<f32>; 4],
    hidden: Vec<f32>,
    xq: QuantRows,
    hq: QuantRows,
    pq: QuantRows,
    rows: (Vec<f32>, Vec<f32>),
}

/// One LSTM step over `batch` rows: reads `x` (`[batch, n_input]`), updates the
/// output state `h` (`[batch, n_output]`) and the cell state `c` (`[batch, n_cell]`).
pub fn lstm_step(l: &Lstm<'_>, batch: usize, x: &[f32], h: &mut [f32], c: &mut [f32], s: &mut LstmScratch) {
    let (ni, nc, no) = (l.n_input, l.n_cell, l.n_output);
    let n = batch * nc;
    let cifg = l.input_w[0].is_none();
    // Hybrid matrices read the input and the previous output state quantized,
    // each once per step for all gates.
    if l.input_w.iter().any(|m| is_hybrid(m.as_ref())) {
        s.xq.quantize(x, batch, ni, l.asymmetric);
    }
    if l.recurrent_w.iter().any(|m| is_hybrid(m.as_ref())) {
        s.hq.quantize(h, batch, no, l.asymmetric);
    }
    for g in 0..4 {
        if g == 0 && cifg {
            continue;
        }
        let gate = &mut s.gates[g];
        gate.clear();
        // Layer norm adds the bias after normalizing.
        match (l.layer_norm[g], l.bias[g]) {
            (None, Some(b)) => (0..batch).for_each(|_| gate.extend_from_slice(&b[..nc])),
            _ => gate.resize(n, 0.0),
        }
        if let Some(m) = &l.input_w[g] {
            mat_acc(m, x, &mut s.xq, batch, ni, nc, gate);
        }
        if let Some(m) = &l.recurrent_w[g] {
            mat_acc(m, h, &mut s.hq, batch, no, nc, gate);
        }
        // The input and forget gates look at the previous cell state; the output
        // gate (computed below) at the updated one.
        let peep = match g {
            0 => l.peephole[0],
            1 => l.peephole[1],
            _ => None,
        };
        if let Some(p) = peep {
            for (gv, (cv, pv)) in gate.iter_mut().zip(c.iter().zip(p.iter().cycle())) {
                *gv += pv * cv;
            }
        }
        if g == 3 {
            continue;
        }
        finish_gate(gate, l.layer_norm[g], l.bias[g], nc, if g == 2 { l.activation } else { CellActivation::Sigmoid });
    }
    // c = f * c + i * g (i = 1 - f with CIFG), clipped.
    {
        let [gi, gf, gc, _] = &s.gates;
        for k in 0..n {
            let i = if cifg { 1.0 - gf[k] } else { gi[k] };
            let mut v = gf[k] * c[k] + i * gc[k];
            if l.cell_clip > 0.0 {
                v = v.clamp(-l.cell_clip, l.cell_clip);
            }
            c[k] = v;
        }
    }
    // The output gate's peephole reads the new cell state.
    {
        let gate = &mut s.gates[3];
        if let Some(p) = l.peephole[2] {
            for (gv, (cv, pv)) in gate.iter_mut().zip(c.iter().zip(p.iter().cycle())) {
                *gv += pv * cv;
            }
        }
        finish_gate(gate, l.layer_norm[3], l.bias[3], nc, CellActivation::Sigmoid);
    }
    // hidden = o * act(c); the output state is its projection, or itself.
    s.hidden.clear();
    s.hidden.extend_from_slice(&c[..n]);
    l.activation.apply_all(&mut s.hidden);
    for (hv, &o) in s.hidden.iter_mut().zip(&s.gates[3]) {
        *hv *= o;
    }
    match &l.projection {
        Some(p) => {
            let out = &mut h[..batch * no];
            match l.projection_bias {
                Some(b) => out.chunks_exact_mut(no.max(1)).for_each(|r| r.copy_from_slice(&b[..no])),
                None => out.fill(0.0),
            }
            if is_hybrid(Some(p)) {
                s.pq.quantize(&s.hidden, batch, nc, l.asymmetric);
            }
            mat_acc(p, &s.hidden, &mut s.pq, batch, nc, no, out);
            if l.proj_clip > 0.0 {
                out.iter_mut().for_each(|v| *v = v.clamp(-l.proj_clip, l.proj_clip));
            }
        }
        None => h[..n].copy_from_slice(&s.hidden),
    }
}

/// Layer norm (when the gate has coefficients: normalize, scale, add the bias)
/// and the gate's activation.
fn finish_gate(gate: &mut [f32], ln: Option<&[f32]>, bias: Option<&[f32]>, nc: usize, act: CellActivation) {
    if let Some(coef) = ln {
        mean_stddev_normalize(gate, nc);
        for row in gate.chunks_exact_mut(nc.max(1)) {
            for (k, v) in row.iter_mut().enumerate() {
                *v = *v * coef[k] + bias.map_or(0.0, |b| b[k]);
            }
        }
    }
    act.apply_all(gate);
}

/// One fully-connected RNN step: `h = act(bias + W x + R h)` over `batch` rows;
/// `x` is `[batch, n_input]`, `h` `[batch, units]`, `w` `[units, n_input]`, `r`
/// `[units, units]`.
#[allow(clippy::too_many_arguments)]
pub fn rnn_step(
    w: &Mat<'_>,
    r: &Mat<'_>,
    bias: &[f32],
    act: CellActivation,
    asymmetric: bool,
    batch: usize,
    n_input: usize,
    units: usize,
    x: &[f32],
    h: &mut [f32],
    s: &mut RnnScratch,
) {
    s.out.clear();
    (0..batch).for_each(|_| s.out.extend_from_slice(&bias[..units]));
    if is_hybrid(Some(w)) {
        s.xq.quantize(x, batch, n_input, asymmetric);
    }
    mat_acc(w, x, &mut s.xq, batch, n_input, units, &mut s.out);
    if is_hybrid(Some(r)) {
        s.hq.quantize(h, batch, units, asymmetric);
    }
    mat_acc(r, h, &mut s.hq, batch, units, units, &mut s.out);
    act.apply_all(&mut s.out);
    h[..batch * units].copy_from_slice(&s.out);
}

/// Scratch of [`rnn_step`].
#[derive(Debug, Default, Clone)]
pub struct RnnScratch {
    out: Vec<f32>,
    rows: (Vec<f32>, Vec<f32>),
    xq: QuantRows,
    hq: QuantRows,
}

/// SVDF sizes and weights: `features` `[filters, n_input]`, `time` `[filters,
/// memory]` (float: a hybrid op's int8 time weights are dequantized once), bias
/// `[filters / rank]`.
#[derive(Debug, Clone)]
pub struct Svdf<'a> {
    /// Input features.
    pub n_input: usize,
    /// Filters (rank x units).
    pub filters: usize,
    /// Time steps each filter remembers.
    pub memory: usize,
    /// Filters summed into each output unit.
    pub rank: usize,
    /// Feature weights.
    pub features: Mat<'a>,
    /// Time weights.
    pub time: &'a [f32],
    /// Bias per unit.
    pub bias: Option<&'a [f32]>,
    /// Output activation.
    pub activation: CellActivation,
    /// Hybrid features quantize their inputs with a zero point per row.
    pub asymmetric: bool,
}

/// One SVDF step: the memory `state` (`[batch, filters, memory]`) shifts one step
/// to the left (its oldest entry drops out), each filter's feature projection of
/// `x` (`[batch, n_input]`) enters at the right, and each unit's output is the sum
/// over its `rank` filters of the memory weighted by the time weights, plus bias.
pub fn svdf_step(p: &Svdf<'_>, batch: usize, x: &[f32], state: &mut [f32], out: &mut [f32], s: &mut SvdfScratch) {
    let (nf, mem) = (p.filters, p.memory);
    let units = nf / p.rank.max(1);
    let len = batch * nf * mem;
    if len > 0 {
        state.copy_within(1..len, 0);
    }
    s.proj.clear();
    s.proj.resize(batch * nf, 0.0);
    if is_hybrid(Some(&p.features)) {
        s.xq.quantize(x, batch, p.n_input, p.asymmetric);
    }
    mat_acc(&p.features, x, &mut s.xq, batch, p.n_input, nf, &mut s.proj);
    for b in 0..batch {
        for f in 0..nf {
            let row = &mut state[(b * nf + f) * mem..][..mem];
            row[mem - 1] = s.proj[b * nf + f];
            s.proj[b * nf + f] = dot(row, &p.time[f * mem..][..mem]);
        }
        let o = &mut out[b * units..][..units];
        for (u, ov) in o.iter_mut().enumerate() {
            let sum: f32 = s.proj[b * nf + u * p.rank..][..p.rank].iter().sum();
            *ov = p.bias.map_or(0.0, |bv| bv[u]) + sum;
        }
        p.activation.apply_all(o);
    }
}

/// Scratch of [`svdf_step`].
#[derive(Debug, Default, Clone)]
pub struct SvdfScratch {
    proj: Vec<f32>,
    xq: QuantRows,
}

/// How a sequence op's `[time, batch, features]` (time-major) or `[batch, time,
/// features]` input and output are laid out, and which way it walks time.
#[derive(Debug, Clone, Copy)]
pub struct Sequence {
    /// Time steps.
    pub time: usize,
    /// Independent sequences.
    pub batch: usize,
    /// Time is the outer axis.
    pub time_major: bool,
    /// Walk from the last step to the first (the backward half of a bidirectional op).
    pub reverse: bool,
    /// Floats per output row (a merged bidirectional output holds both directions).
    pub out_row: usize,
    /// Where this direction's values start in each output row.
    pub out_offset: usize,
}

/// Runs `step` over the sequence: at each time step it gets the `[batch, n_in]`
/// input rows (gathered into `rows` when batch-major) and returns the `[batch,
/// n_out]` state it wrote, which goes to the output rows of that step.
fn walk(seq: &Sequence, n_in: usize, n_out: usize, x: &[f32], out: &mut [f32], bufs: &mut (Vec<f32>, Vec<f32>), mut step: impl FnMut(&[f32], &mut Vec<f32>)) {
    let (t_n, b_n) = (seq.time, seq.batch);
    let (rows, h) = bufs;
    for k in 0..t_n {
        let t = if seq.reverse { t_n - 1 - k } else { k };
        // Row of (t, b) in the input / output.
        let at = |b: usize| if seq.time_major { t * b_n + b } else { b * t_n + t };
        if seq.time_major {
            step(&x[t * b_n * n_in..][..b_n * n_in], h);
        } else {
            rows.clear();
            (0..b_n).for_each(|b| rows.extend_from_slice(&x[at(b) * n_in..][..n_in]));
            step(rows, h);
        }
        for b in 0..b_n {
            out[at(b) * seq.out_row + seq.out_offset..][..n_out].copy_from_slice(&h[b * n_out..][..n_out]);
        }
    }
}

/// An LSTM over a whole sequence: `x` holds `time x batch` rows of `n_input`, the
/// output rows get each step's output state; `h` and `c` carry the state in and out.
pub fn lstm_sequence(l: &Lstm<'_>, seq: &Sequence, x: &[f32], out: &mut [f32], h: &mut [f32], c: &mut [f32], s: &mut LstmScratch) {
    let mut bufs = std::mem::take(&mut s.rows);
    let n = seq.batch * l.n_output;
    walk(seq, l.n_input, l.n_output, x, out, &mut bufs, |xt, last| {
        lstm_step(l, seq.batch, xt, h, c, s);
        last.clear();
        last.extend_from_slice(&h[..n]);
    });
    s.rows = bufs;
}

/// A fully-connected RNN over a whole sequence (see [`lstm_sequence`]).
#[allow(clippy::too_many_arguments)]
pub fn rnn_sequence(
    w: &Mat<'_>,
    r: &Mat<'_>,
    bias: &[f32],
    act: CellActivation,
    asymmetric: bool,
    n_input: usize,
    units: usize,
    seq: &Sequence,
    x: &[f32],
    out: &mut [f32],
    h: &mut [f32],
    s: &mut RnnScratch,
) {
    let mut bufs = std::mem::take(&mut s.rows);
    let n = seq.batch * units;
    walk(seq, n_input, units, x, out, &mut bufs, |xt, last| {
        rnn_step(w, r, bias, act, asymmetric, seq.batch, n_input, units, xt, h, s);
        last.clear();
        last.extend_from_slice(&h[..n]);
    });
    s.rows = bufs;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    fn uni(r: &mut Rng, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * r.unit() as f32
    }

    fn sig(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// A float LSTM step written from the equations, in f64.
    #[allow(clippy::too_many_arguments)]
    fn naive_lstm(
        ni: usize,
        nc: usize,
        no: usize,
        wx: &[Option<Vec<f32>>],
        wh: &[Option<Vec<f32>>],
        peep: &[Option<Vec<f32>>],
        bias: &[Option<Vec<f32>>],
        ln: &[Option<Vec<f32>>],
        proj: &Option<Vec<f32>>,
        clip: (f32, f32),
        batch: usize,
        x: &[f32],
        h: &mut [f32],
        c: &mut [f32],
    ) {
        for b in 0..batch {
            let xb: Vec<f64> = x[b * ni..][..ni].iter().map(|&v| v as f64).collect();
            let hb: Vec<f64> = h[b * no..][..no].iter().map(|&v| v as f64).collect();
            let cb: Vec<f64> = c[b * nc..][..nc].iter().map(|&v| v as f64).collect();
            let pre = |g: usize, cell: &[f64]| -> Vec<f64> {
                let mut v: Vec<f64> = (0..nc)
                    .map(|k| {
                        let mut s = 0.0;
                        if let Some(w) = &wx[g] {
                            s += (0..ni).map(|i| w[k * ni + i] as f64 * xb[i]).sum::<f64>();
                        }
                        if let Some(w) = &wh[g] {
                            s += (0..no).map(|i| w[k * no + i] as f64 * hb[i]).sum::<f64>();
                        }
                        let pi = [Some(0), Some(1), None, Some(2)][g];
                        if let Some(p) = pi.and_then(|pi| peep[pi].as_ref()) {
                            s += p[k] as f64 * cell[k];
                        }
                        s
                    })
                    .collect();
                if let Some(coef) = &ln[g] {
                    let mean = v.iter().sum::<f64>() / nc as f64;
                    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / nc as f64;
                    let inv = 1.0 / (var + 1e-8).sqrt();
                    v.iter_mut().enumerate().for_each(|(k, x)| *x = (*x - mean) * inv * coef[k] as f64);
                }
                if let Some(bv) = &bias[g] {
                    v.iter_mut().enumerate().for_each(|(k, x)| *x += bv[k] as f64);
                }
                v
            };
            let f: Vec<f64> = pre(1, &cb).into_iter().map(sig).collect();
            let i: Vec<f64> = if wx[0].is_some() { pre(0, &cb).into_iter().map(sig).collect() } else { f.iter().map(|f| 1.0 - f).collect() };
            let g: Vec<f64> = pre(2, &cb).into_iter().map(f64::tanh).collect();
            let cn: Vec<f64> = (0..nc).map(|k| (f[k] * cb[k] + i[k] * g[k]).clamp(-clip.0 as f64, clip.0 as f64)).collect();
            let o: Vec<f64> = pre(3, &cn).into_iter().map(sig).collect();
            let hid: Vec<f64> = (0..nc).map(|k| o[k] * cn[k].tanh()).collect();
            for k in 0..nc {
                c[b * nc + k] = cn[k] as f32;
            }
            for k in 0..no {
                h[b * no + k] = match proj {
                    Some(p) => ((0..nc).map(|j| p[k * nc + j] as f64 * hid[j]).sum::<f64>()).clamp(-clip.1 as f64, clip.1 as f64) as f32,
                    None => hid[k] as f32,
                };
            }
        }
    }

    #[test]
    fn lstm_matches_the_equations_in_every_variant() {
        let mut r = Rng::new(11);
        for case in 0..48 {
            let (cifg, peephole, ln, projection) = (case & 1 != 0, case & 2 != 0, case & 4 != 0, case & 8 != 0);
            let (ni, nc, batch) = (r.size(1, 9), r.size(1, 9), r.size(1, 3));
            let no = if projection { r.size(1, 7) } else { nc };
            let mut v = |n: usize| -> Vec<f32> { (0..n).map(|_| uni(&mut r, -0.8, 0.8)).collect() };
            let wx: Vec<Option<Vec<f32>>> = (0..4).map(|g| (!(cifg && g == 0)).then(|| v(nc * ni))).collect();
            let wh: Vec<Option<Vec<f32>>> = (0..4).map(|g| (!(cifg && g == 0)).then(|| v(nc * no))).collect();
            let peep: Vec<Option<Vec<f32>>> = (0..3).map(|g| (peephole && !(cifg && g == 0)).then(|| v(nc))).collect();
            let bias: Vec<Option<Vec<f32>>> = (0..4).map(|g| (!(cifg && g == 0)).then(|| v(nc))).collect();
            let lnv: Vec<Option<Vec<f32>>> = (0..4).map(|g| (ln && !(cifg && g == 0)).then(|| v(nc))).collect();
            let proj = projection.then(|| v(no * nc));
            let clip = if case >= 16 { (0.7, 0.3) } else { (1e9, 1e9) };
            let cell = Lstm {
                n_input: ni,
                n_cell: nc,
                n_output: no,
                input_w: std::array::from_fn(|g| wx[g].as_deref().map(Mat::F32)),
                recurrent_w: std::array::from_fn(|g| wh[g].as_deref().map(Mat::F32)),
                peephole: std::array::from_fn(|g| peep[g].as_deref()),
                bias: std::array::from_fn(|g| bias[g].as_deref()),
                layer_norm: std::array::from_fn(|g| lnv[g].as_deref()),
                projection: proj.as_deref().map(Mat::F32),
                projection_bias: None,
                activation: CellActivation::Tanh,
                cell_clip: if case >= 16 { clip.0 } else { 0.0 },
                proj_clip: if case >= 16 { clip.1 } else { 0.0 },
                asymmetric: false,
            };
            let (mut h, mut c) = (v(batch * no), v(batch * nc));
            let (mut h2, mut c2) = (h.clone(), c.clone());
            let mut s = LstmScratch::default();
            for _ in 0..3 {
                let x = v(batch * ni);
                lstm_step(&cell, batch, &x, &mut h, &mut c, &mut s);
                naive_lstm(ni, nc, no, &wx, &wh, &peep, &bias, &lnv, &proj, clip, batch, &x, &mut h2, &mut c2);
            }
            for (a, b) in h.iter().zip(&h2).chain(c.iter().zip(&c2)) {
                assert!((a - b).abs() < 1e-4, "case {case}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn hybrid_matrices_match_their_float_values_within_quantization() {
        let mut r = Rng::new(5);
        let (rows, cols, batch) = (7, 13, 3);
        let wq: Vec<i8> = (0..rows * cols).map(|_| r.size(0, 254) as i8).collect();
        let scale = 0.01;
        let wf: Vec<f32> = wq.iter().map(|&q| q as f32 * scale).collect();
        let x: Vec<f32> = (0..batch * cols).map(|_| uni(&mut r, -1.0, 1.0)).collect();
        for asym in [false, true] {
            let sums = crate::hybrid::row_sums(&wq, cols);
            let m = Mat::I8 { w: &wq, scale, row_sums: if asym { &sums } else { &[] } };
            let mut xq = QuantRows::default();
            xq.quantize(&x, batch, cols, asym);
            let (mut a, mut b) = (vec![0.5; batch * rows], vec![0.5; batch * rows]);
            mat_acc(&m, &x, &mut xq, batch, cols, rows, &mut a);
            mat_acc(&Mat::F32(&wf), &x, &mut xq, batch, cols, rows, &mut b);
            for (p, q) in a.iter().zip(&b) {
                assert!((p - q).abs() < 0.03, "{p} vs {q}");
            }
        }
    }

    #[test]
    fn rnn_and_svdf_match_their_definitions() {
        let mut r = Rng::new(3);
        let (ni, units, batch) = (5, 4, 2);
        let w: Vec<f32> = (0..units * ni).map(|_| uni(&mut r, -1.0, 1.0)).collect();
        let rw: Vec<f32> = (0..units * units).map(|_| uni(&mut r, -1.0, 1.0)).collect();
        let bias: Vec<f32> = (0..units).map(|_| uni(&mut r, -1.0, 1.0)).collect();
        let mut h = vec![0.0f32; batch * units];
        let mut want = h.clone();
        let mut s = RnnScratch::default();
        for _ in 0..3 {
            let x: Vec<f32> = (0..batch * ni).map(|_| uni(&mut r, -1.0, 1.0)).collect();
            rnn_step(&Mat::F32(&w), &Mat::F32(&rw), &bias, CellActivation::Tanh, false, batch, ni, units, &x, &mut h, &mut s);
            let prev = want.clone();
            for b in 0..batch {
                for u in 0..units {
                    let mut acc = bias[u] as f64;
                    acc += (0..ni).map(|i| w[u * ni + i] as f64 * x[b * ni + i] as f64).sum::<f64>();
                    acc += (0..units).map(|j| rw[u * units + j] as f64 * prev[b * units + j] as f64).sum::<f64>();
                    want[b * units + u] = acc.tanh() as f32;
                }
            }
            for (a, b) in h.iter().zip(&want) {
                assert!((a - b).abs() < 1e-5);
            }
        }
        // SVDF: rank 2, 3 units, memory 4.
        let (rank, nf, mem) = (2, 6, 4);
        let feat: Vec<f32> = (0..nf * ni).map(|_| uni(&mut r, -1.0, 1.0)).collect();
        let time: Vec<f32> = (0..nf * mem).map(|_| uni(&mut r, -1.0, 1.0)).collect();
        let p = Svdf {
            n_input: ni,
            filters: nf,
            memory: mem,
            rank,
            features: Mat::F32(&feat),
            time: &time,
            bias: None,
            activation: CellActivation::None,
            asymmetric: false,
        };
        let mut state = vec![0.0f32; batch * nf * mem];
        let mut history: Vec<Vec<f32>> = vec![];
        let mut s = SvdfScratch::default();
        for _ in 0..6 {
            let x: Vec<f32> = (0..batch * ni).map(|_| uni(&mut r, -1.0, 1.0)).collect();
            let mut out = vec![0.0f32; batch * nf / rank];
            svdf_step(&p, batch, &x, &mut state, &mut out, &mut s);
            history.push(x);
            for b in 0..batch {
                for u in 0..nf / rank {
                    let mut acc = 0.0f64;
                    for f in u * rank..(u + 1) * rank {
                        // Memory slot m holds the input of `mem - 1 - m` steps ago.
                        for m in 0..mem {
                            let Some(xs) = (history.len() + m).checked_sub(mem).and_then(|k| history.get(k)) else { continue };
                            let a: f64 = (0..ni).map(|i| feat[f * ni + i] as f64 * xs[b * ni + i] as f64).sum();
                            acc += a * time[f * mem + m] as f64;
                        }
                    }
                    assert!((out[b * nf / rank + u] as f64 - acc).abs() < 1e-4);
                }
            }
        }
    }
}
