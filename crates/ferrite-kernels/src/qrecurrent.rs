//! The fully integer LSTM: int8 input, weights and output state, int16 cell state
//! and gates ("8x8 -> 16"), with LiteRT's integer arithmetic step for step so the
//! results are bit-exact with its kernels.
//!
//! Each gate is an int16 value in Q3.12 (or, with layer norm, in its intermediate
//! tensor's scale until the normalization brings it to Q3.12): the two matrix
//! products are each rescaled to the gate's scale and added with saturation, the
//! peephole term likewise; layer norm works in integers on each row; the sigmoid
//! and tanh are the 16-bit fixed-point ones. The cell state has a power-of-two
//! scale `2^cell_shift`, so its updates are products rounded by a shift.
//!
//! The parameters a caller derives once from the tensors' scales (effective
//! multipliers, biases with the zero points folded in) are in [`QLstm`]; the
//! derivation itself is in [`QLstm::new`].

use crate::fixed16::{exp_on_negative_values, logistic_q3};
use crate::qactivation::inv_sqrt_multiplier;
use crate::quant::{multiply_by_quantized_multiplier as mbqm, quantize_multiplier, rounding_divide_by_pot};

/// A fixed-point multiplier and shift (see [`quantize_multiplier`]).
pub type Multiplier = (i32, i32);

/// Layer normalization of one gate: int16 coefficients, the gate's bias (added
/// after normalizing), the coefficients' scale and the variance used when a row
/// has none.
#[derive(Debug, Clone)]
pub struct QLayerNorm {
    /// Coefficients, `[n_cell]`.
    pub coef: Vec<i16>,
    /// The gate's bias, `[n_cell]`.
    pub bias: Vec<i32>,
    /// The coefficients' scale.
    pub scale: Multiplier,
    /// The variance a constant row gets instead of zero.
    pub variance_guard: i32,
}

/// One gate: its input and recurrent products (weights, biases with the zero
/// points folded in, multipliers to the gate's scale), peephole and layer norm.
#[derive(Debug, Clone)]
pub struct QGate {
    /// Input weights `[n_cell, n_input]`.
    pub input_w: Vec<i8>,
    /// Added to the input product before rescaling.
    pub input_bias: Vec<i32>,
    /// Input product to the gate's scale.
    pub input_scale: Multiplier,
    /// Recurrent weights `[n_cell, n_output]`.
    pub recurrent_w: Vec<i8>,
    /// Added to the recurrent product before rescaling.
    pub recurrent_bias: Vec<i32>,
    /// Recurrent product to the gate's scale.
    pub recurrent_scale: Multiplier,
    /// Peephole weights (int16, `[n_cell]`) and their multiplier.
    pub peephole: Option<(Vec<i16>, Multiplier)>,
    /// Layer normalization.
    pub layer_norm: Option<QLayerNorm>,
}

/// The projection of the hidden state to the output state.
#[derive(Debug, Clone)]
pub struct QProjection {
    /// Weights `[n_output, n_cell]`.
    pub w: Vec<i8>,
    /// Bias with the hidden zero point folded in.
    pub bias: Vec<i32>,
    /// Product to the output state's scale.
    pub scale: Multiplier,
}

/// A fully integer LSTM direction, ready to run.
#[derive(Debug, Clone)]
pub struct QLstm {
    /// Input features.
    pub n_input: usize,
    /// Cell units.
    pub n_cell: usize,
    /// Output units.
    pub n_output: usize,
    /// Gates input, forget, cell, output; the input gate is `None` for CIFG.
    pub gates: [Option<QGate>; 4],
    /// Projection.
    pub projection: Option<QProjection>,
    /// The cell state's scale is `2^cell_shift`.
    pub cell_shift: i32,
    /// Cell state clip in cell-state units (none when 0).
    pub cell_clip: i16,
    /// Output clip in output units (none when 0).
    pub proj_clip: i8,
    /// Product of the output gate and the cell's tanh to the hidden scale.
    pub hidden_scale: Multiplier,
    /// The hidden state's zero point.
    pub hidden_zp: i32,
    /// The output state's zero point.
    pub output_zp: i32,
}

/// The real-valued scales of an integer LSTM's tensors, from which [`QLstm::new`]
/// derives its multipliers as LiteRT's prepare does (the arithmetic, float or
/// double, and its order are part of the result).
#[derive(Debug, Clone, Default)]
pub struct QLstmScales {
    /// Input scale and zero point.
    pub input: (f32, i32),
    /// Output state scale and zero point.
    pub output_state: (f32, i32),
    /// Cell state scale (a power of two).
    pub cell_state: f32,
    /// Scale of the output tensor (for the projection clip).
    pub output: f32,
    /// Input weight scales per gate (unused for an absent gate).
    pub input_w: [f32; 4],
    /// Recurrent weight scales per gate.
    pub recurrent_w: [f32; 4],
    /// Peephole weight scales (input, forget, output gates).
    pub peephole: [f32; 3],
    /// Layer-norm coefficient scales per gate.
    pub layer_norm: [f32; 4],
    /// Projection weight scale.
    pub projection: f32,
    /// The intermediate tensors' (scale, zero point): gates 0..4 (read with layer
    /// norm only), then the hidden state.
    pub intermediates: [(f32, i32); 5],
    /// Cell and projection clips as the options give them.
    pub cell_clip: f32,
    /// Projection clip.
    pub proj_clip: f32,
}

/// The integer weights and biases of an integer LSTM, as stored.
#[derive(Debug, Clone, Default)]
pub struct QLstmTensors<'a> {
    /// Input weights per gate.
    pub input_w: [Option<&'a [i8]>; 4],
    /// Recurrent weights per gate.
    pub recurrent_w: [Option<&'a [i8]>; 4],
    /// Peephole weights (input, forget, output gates).
    pub peephole: [Option<&'a [i16]>; 3],
    /// Gate biases.
    pub bias: [Option<&'a [i32]>; 4],
    /// Layer-norm coefficients.
    pub layer_norm: [Option<&'a [i16]>; 4],
    /// Projection weights.
    pub projection: Option<&'a [i8]>,
    /// Projection bias.
    pub projection_bias: Option<&'a [i32]>,
}

/// `log2(x)` when `x` is a power of two (within LiteRT's tolerance of 1e-3 in the
/// exponent), computed in single precision as LiteRT's `CheckedLog2`.
pub fn checked_log2(x: f32) -> Option<i32> {
    let l = x.ln() * (1.0f32 / 2.0f32.ln());
    let r = l.round();
    ((l - r).abs() < 1e-3 && r.is_finite()).then_some(r as i32)
}

/// `bias[r] + zp * sum(w[r, ..])` per row, in wrapping 32-bit arithmetic.
fn fold_zero_point(w: &[i8], cols: usize, zp: i32, bias: Option<&[i32]>) -> Vec<i32> {
    let rows = w.len().checked_div(cols).unwrap_or_else(|| bias.map_or(0, <[i32]>::len));
    (0..rows)
        .map(|r| {
            let b = bias.map_or(0, |b| b[r]);
            if zp == 0 || cols == 0 {
                return b;
            }
            let sum = w[r * cols..][..cols].iter().fold(0i32, |s, &v| s.wrapping_add(i32::from(v)));
            b.wrapping_add(sum.wrapping_mul(zp))
        })
        .collect()
}

fn qm(real: f32) -> Multiplier {
    quantize_multiplier(f64::from(real))
}

impl QLstm {
    /// Derives the kernel's parameters. `t` must hold the forget, cell and output
    /// gates' weights and biases (the input gate's too unless CIFG); sizes were
    /// checked by the caller. Returns `None` when the cell state's scale is not a
    /// power of two.
    pub fn new(n_input: usize, n_cell: usize, n_output: usize, s: &QLstmScales, t: &QLstmTensors<'_>) -> Option<QLstm> {
        let use_ln = t.layer_norm[1].is_some();
        let cell_shift = checked_log2(s.cell_state)?;
        let gate_scale: [f32; 4] = std::array::from_fn(|g| if use_ln { s.intermediates[g].0 } else { 1.0 / 4096.0 });
        let hidden = s.intermediates[4];
        let peephole_of = |g: usize| match g {
            0 => Some(0),
            1 => Some(1),
            3 => Some(2),
            _ => None,
        };
        let mut gates: [Option<QGate>; 4] = Default::default();
        for (g, slot) in gates.iter_mut().enumerate() {
            let (Some(wx), Some(wh)) = (t.input_w[g], t.recurrent_w[g]) else { continue };
            // Without layer norm the gate's bias joins the input product; with it, it
            // is added after the normalization.
            let bias = if use_ln { None } else { t.bias[g] };
            let peephole = peephole_of(g).and_then(|p| {
                let w = t.peephole[p]?;
                let eff = (2f64.powi(cell_shift) * f64::from(s.peephole[p]) / f64::from(gate_scale[g])) as f32;
                Some((w.to_vec(), qm(eff)))
            });
            let layer_norm = t.layer_norm[g].map(|coef| QLayerNorm {
                coef: coef.to_vec(),
                bias: t.bias[g].map_or_else(|| vec![0; n_cell], <[i32]>::to_vec),
                scale: qm(s.layer_norm[g]),
                variance_guard: ((10000.0f32 * s.layer_norm[g]) as i32).max(1),
            });
            *slot = Some(QGate {
                input_w: wx.to_vec(),
                input_bias: fold_zero_point(wx, n_input, -s.input.1, bias),
                input_scale: qm(s.input_w[g] * s.input.0 / gate_scale[g]),
                recurrent_w: wh.to_vec(),
                recurrent_bias: fold_zero_point(wh, n_output, -s.output_state.1, None),
                recurrent_scale: qm(s.recurrent_w[g] * s.output_state.0 / gate_scale[g]),
                peephole,
                layer_norm,
            });
        }
        let projection = t.projection.map(|w| QProjection {
            w: w.to_vec(),
            bias: fold_zero_point(w, n_cell, hidden.1, t.projection_bias),
            scale: qm(s.projection * hidden.0 / s.output_state.0),
        });
        let hidden_scale = qm((2f64.powi(-15) / f64::from(hidden.0) * 2f64.powi(-15)) as f32);
        let cell_clip = if s.cell_clip > 0.0 { (s.cell_clip / s.cell_state).clamp(-32768.0, 32767.0) as i16 } else { 0 };
        let proj_clip = if s.proj_clip > 0.0 { (s.proj_clip / s.output).clamp(-128.0, 127.0) as i8 } else { 0 };
        Some(QLstm {
            n_input,
            n_cell,
            n_output,
            gates,
            projection,
            cell_shift,
            cell_clip,
            proj_clip,
            hidden_scale,
            hidden_zp: hidden.1,
            output_zp: s.output_state.1,
        })
    }
}

/// `out[b, r] = sat16(out[b, r] + zp + scale(bias[r] + sum_c w[r, c] x[b, c]))`,
/// generic over the output width (int16 gates, int8 projection).
#[allow(clippy::too_many_arguments)]
fn matmul_acc<T: Copy + Into<i32> + TryFrom<i32>>(
    x: &[i8],
    w: &[i8],
    bias: &[i32],
    m: Multiplier,
    batch: usize,
    cols: usize,
    rows: usize,
    zp: i32,
    (lo, hi): (i32, i32),
    out: &mut [T],
) {
    for b in 0..batch {
        let xb = &x[b * cols..][..cols];
        for r in 0..rows {
            let wr = &w[r * cols..][..cols];
            let acc = xb.iter().zip(wr).fold(bias[r], |a, (&p, &q)| a.wrapping_add(i32::from(p) * i32::from(q)));
            let o = &mut out[b * rows + r];
            let v = (mbqm(acc, m.0, m.1).wrapping_add(zp).wrapping_add((*o).into())).clamp(lo, hi);
            // In range after the clamp.
            if let Ok(v) = T::try_from(v) {
                *o = v;
            }
        }
    }
}

/// LiteRT's integer layer normalization of `batch` rows of `n` int16 values: mean
/// and variance with 10 extra fractional bits, the inverse square root as a
/// fixed-point multiplier, the coefficients and bias, and the coefficients' scale
/// back to Q3.12.
fn layer_norm(v: &mut [i16], ln: &QLayerNorm, batch: usize, n: usize) {
    const TWO_POW_20: i64 = 1 << 20;
    for row in v.chunks_exact_mut(n).take(batch) {
        let (mut sum, mut sum_sq) = (0i64, 0i64);
        for &x in row.iter() {
            let x = i64::from(x);
            sum += x;
            sum_sq += x * x;
        }
        let mean = (sum * 1024 / n as i64) as i32;
        // (LiteRT's own note: exact only for power-of-two row lengths.)
        let temp = TWO_POW_20 / n as i64;
        let variance = sum_sq * temp - i64::from(mean) * i64::from(mean);
        let mut variance2 = (variance / TWO_POW_20) as i32;
        if variance2 < 1 {
            variance2 = ln.variance_guard;
        }
        let (inv_a, inv_b) = inv_sqrt_multiplier(variance2);
        for (j, x) in row.iter_mut().enumerate() {
            let shifted = 1024i32.wrapping_mul(i32::from(*x)).wrapping_sub(mean);
            let rescaled = mbqm(shifted, inv_a, inv_b);
            // The product and the bias in 32 bits, as the kernel matched does.
            let v3 = i64::from(rescaled.wrapping_mul(i32::from(ln.coef[j])).wrapping_add(ln.bias[j]));
            let v4 = (if v3 > 0 { v3 + 512 } else { v3 - 512 } / 1024) as i32;
            let v5 = mbqm(v4, ln.scale.0, ln.scale.1 + 12);
            *x = v5.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16;
        }
    }
}

/// gemmlowp's 16-bit fixed-point tanh of a value with `int_bits` integer bits
/// (at most 4), Q0.15 out.
pub fn tanh_fixed(a: i16, int_bits: i32) -> i16 {
    if a == 0 {
        return 0;
    }
    let negative = if a < 0 { a } else { a.wrapping_neg() };
    // tanh(x) = (1 - e^-2x) / (1 + e^-2x): the doubling is one more integer bit.
    let e = exp_on_negative_values(negative, int_bits + 1);
    let t = one_minus_over_one_plus(e);
    if a < 0 {
        t.wrapping_neg()
    } else {
        t
    }
}

/// `(1 - a) / (1 + a)` for `a` in [0, 1] in Q0.15 (gemmlowp's Newton-Raphson form).
fn one_minus_over_one_plus(a: i16) -> i16 {
    crate::fixed16::one_minus_x_over_one_plus_x(a)
}

/// Scratch of [`qlstm_step`].
#[derive(Debug, Default, Clone)]
pub struct QLstmScratch {
    gates: [Vec<i16>; 4],
    tanh_c: Vec<i16>,
    hidden: Vec<i8>,
}

/// One step over `batch` rows: reads `x` (`[batch, n_input]`), updates the output
/// state `h` (`[batch, n_output]`) and the cell state `c` (`[batch, n_cell]`).
pub fn qlstm_step(l: &QLstm, batch: usize, x: &[i8], h: &mut [i8], c: &mut [i16], s: &mut QLstmScratch) {
    let (ni, nc, no) = (l.n_input, l.n_cell, l.n_output);
    let n = batch * nc;
    let i16_range = (i32::from(i16::MIN), i32::from(i16::MAX));
    let gate = |g: usize, c: &[i16], out: &mut Vec<i16>| {
        let Some(q) = &l.gates[g] else { return };
        out.clear();
        out.resize(n, 0);
        matmul_acc(x, &q.input_w, &q.input_bias, q.input_scale, batch, ni, nc, 0, i16_range, out);
        matmul_acc(h, &q.recurrent_w, &q.recurrent_bias, q.recurrent_scale, batch, no, nc, 0, i16_range, out);
        if let Some((w, m)) = &q.peephole {
            // LiteRT walks the peephole over `n_output` values per row (not `n_cell`),
            // and the state and gate with that stride: kept as it does it.
            for b in 0..batch {
                for (v, &wv) in w.iter().enumerate().take(no) {
                    let k = b * no + v;
                    let p = mbqm(i32::from(wv) * i32::from(c[k]), m.0, m.1);
                    out[k] = (p + i32::from(out[k])).clamp(i16_range.0, i16_range.1) as i16;
                }
            }
        }
        if let Some(ln) = &q.layer_norm {
            layer_norm(out, ln, batch, nc);
        }
        for v in out.iter_mut() {
            *v = if g == 2 { tanh_fixed(*v, 3) } else { logistic_q3(*v) };
        }
    };
    let [g0, g1, g2, g3] = &mut s.gates;
    gate(0, c, g0);
    gate(1, c, g1);
    gate(2, c, g2);
    // c = f * c + i * g, each product rounded by a shift; i = 1 - f with CIFG.
    let cifg = l.gates[0].is_none();
    let shift = 30 + l.cell_shift;
    for k in 0..n {
        let fc = rounding_divide_by_pot(i32::from(g1[k]) * i32::from(c[k]), 15) as i16;
        let i = if cifg { i16::MAX.wrapping_sub(g1[k]) } else { g0[k] };
        let ig = rounding_divide_by_pot(i32::from(i) * i32::from(g2[k]), shift) as i16;
        let mut v = (i32::from(fc) + i32::from(ig)).clamp(i16_range.0, i16_range.1) as i16;
        if l.cell_clip > 0 {
            v = v.clamp(-l.cell_clip, l.cell_clip);
        }
        c[k] = v;
    }
    gate(3, c, g3);
    // hidden = o * tanh(c), to the hidden scale; the output state is its projection
    // or itself.
    s.tanh_c.clear();
    let int_bits = 15 + l.cell_shift;
    if int_bits >= 0 {
        s.tanh_c.extend(c[..n].iter().map(|&v| tanh_fixed(v, int_bits)));
    } else {
        // LiteRT's 16-bit tanh has forms for 0 to 6 integer bits and writes nothing
        // for others: its buffer keeps what it last held, this step's input gate
        // (a cell scale below 2^-15, which calibration gives small cell states).
        s.tanh_c.extend_from_slice(&g0[..n]);
    }
    let hidden = |zp: i32, o: &mut [i8]| {
        for k in 0..n {
            let v = mbqm(i32::from(g3[k]) * i32::from(s.tanh_c[k]), l.hidden_scale.0, l.hidden_scale.1);
            o[k] = v.wrapping_add(zp).clamp(-128, 127) as i8;
        }
    };
    match &l.projection {
        Some(p) => {
            s.hidden.clear();
            s.hidden.resize(n, 0);
            // The projection's bias holds `hidden_zp * row sums`, so the hidden values
            // enter it with the opposite zero point.
            hidden(-l.hidden_zp, &mut s.hidden);
            let out = &mut h[..batch * no];
            out.fill(0);
            matmul_acc(&s.hidden, &p.w, &p.bias, p.scale, batch, nc, no, l.output_zp, (-128, 127), out);
            if l.proj_clip > 0 {
                out.iter_mut().for_each(|v| *v = (*v).clamp(-l.proj_clip, l.proj_clip));
            }
        }
        None => hidden(l.hidden_zp, &mut h[..n]),
    }
}

/// An integer LSTM over a sequence, walked as LiteRT walks it: time-major input
/// one step of all `batch` rows at a time; batch-major one row at a time, each
/// over all its steps. `x` holds `time x batch` rows of `n_input`, `out` gets each
/// step's output state; `h` and `c` carry the state.
#[allow(clippy::too_many_arguments)]
pub fn qlstm_sequence(l: &QLstm, time: usize, batch: usize, time_major: bool, x: &[i8], out: &mut [i8], h: &mut [i8], c: &mut [i16], s: &mut QLstmScratch) {
    let (ni, nc, no) = (l.n_input, l.n_cell, l.n_output);
    if time_major {
        for t in 0..time {
            qlstm_step(l, batch, &x[t * batch * ni..][..batch * ni], h, c, s);
            out[t * batch * no..][..batch * no].copy_from_slice(&h[..batch * no]);
        }
    } else {
        for b in 0..batch {
            for t in 0..time {
                let row = b * time + t;
                let (hb, cb) = (&mut h[b * no..][..no], &mut c[b * nc..][..nc]);
                qlstm_step(l, 1, &x[row * ni..][..ni], hb, cb, s);
                out[row * no..][..no].copy_from_slice(hb);
            }
        }
    }
}

/// An integer SVDF (int8 input and output, int8 feature weights, int16 time
/// weights and memory, int32 bias), as LiteRT's integer kernel computes it.
#[derive(Debug, Clone)]
pub struct QSvdf {
    /// Input features.
    pub n_input: usize,
    /// Filters (rank x units).
    pub filters: usize,
    /// Steps each filter remembers.
    pub memory: usize,
    /// Filters summed into each unit.
    pub rank: usize,
    /// Feature weights `[filters, n_input]`.
    pub features: Vec<i8>,
    /// Time weights `[filters, memory]`.
    pub time: Vec<i16>,
    /// Bias per unit.
    pub bias: Option<Vec<i32>>,
    /// Input times feature weights to the memory's scale.
    pub scale_1: Multiplier,
    /// Memory times time weights to the output's scale.
    pub scale_2: Multiplier,
    /// Input zero point.
    pub input_zp: i32,
    /// Output zero point.
    pub output_zp: i32,
}

/// One integer SVDF step over `batch` rows: the memory (`[batch, filters,
/// memory]`) shifts left by one value, each filter's feature product enters at
/// its right end (saturated to int16), and each unit's output is the sum over its
/// filters of memory times time weights, plus bias, rescaled to int8. (LiteRT
/// requires RELU for this kernel and then applies no activation.)
pub fn qsvdf_step(p: &QSvdf, batch: usize, x: &[i8], state: &mut [i16], out: &mut [i8]) {
    let (nf, mem, ni) = (p.filters, p.memory, p.n_input);
    let units = nf / p.rank.max(1);
    let len = batch * nf * mem;
    if len > 0 {
        state.copy_within(1..len, 0);
    }
    for b in 0..batch {
        let xb = &x[b * ni..][..ni];
        for f in 0..nf {
            let w = &p.features[f * ni..][..ni];
            let acc = xb.iter().zip(w).fold(0i32, |a, (&v, &q)| a.wrapping_add(i32::from(q) * (i32::from(v) - p.input_zp)));
            let v = mbqm(acc, p.scale_1.0, p.scale_1.1).clamp(i32::from(i16::MIN), i32::from(i16::MAX));
            state[(b * nf + f) * mem + mem - 1] = v as i16;
        }
        for u in 0..units {
            let mut acc = 0i32;
            for f in u * p.rank..(u + 1) * p.rank {
                let dot = p.time[f * mem..][..mem]
                    .iter()
                    .zip(&state[(b * nf + f) * mem..][..mem])
                    .fold(0i32, |a, (&w, &s)| a.wrapping_add(i32::from(w) * i32::from(s)));
                acc = acc.wrapping_add(dot);
            }
            if let Some(bias) = &p.bias {
                acc = acc.wrapping_add(bias[u]);
            }
            let v = mbqm(acc, p.scale_2.0, p.scale_2.1).wrapping_add(p.output_zp);
            out[b * units + u] = v.clamp(-128, 127) as i8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn tanh_fixed_tracks_tanh_and_agrees_with_the_q3_form() {
        for int_bits in 0..=4 {
            for raw in (-32768i32..32768).step_by(97) {
                let raw = raw as i16;
                let x = f64::from(raw) / f64::from(1 << (15 - int_bits));
                let got = f64::from(tanh_fixed(raw, int_bits)) / 32768.0;
                assert!((got - x.tanh()).abs() < 5e-4, "int bits {int_bits}: tanh({x}) = {got}");
            }
        }
        for raw in (-32768i32..32768).step_by(31) {
            assert_eq!(tanh_fixed(raw as i16, 3), crate::fixed16::tanh_q3(raw as i16));
        }
    }

    #[test]
    fn checked_log2_takes_powers_of_two_only() {
        assert_eq!(checked_log2(1.0 / 32768.0), Some(-15));
        assert_eq!(checked_log2(2f32.powi(-11)), Some(-11));
        assert_eq!(checked_log2(0.0003), None);
    }

    /// A float LSTM (no projection, no layer norm) on the dequantized weights, and
    /// the integer step on their quantized form, agree within a few output steps:
    /// the integer arithmetic computes the same function.
    #[test]
    fn integer_step_tracks_the_float_lstm() {
        let mut r = Rng::new(9);
        let (ni, nc, batch) = (6, 4, 2);
        let (ws, xs, hs) = (0.02f32, 1.0 / 64.0, 1.0 / 128.0);
        let mut wq = |n: usize| -> Vec<i8> { (0..n).map(|_| r.size(0, 100) as i8 - 50).collect() };
        let wx: Vec<Vec<i8>> = (0..4).map(|_| wq(nc * ni)).collect();
        let wh: Vec<Vec<i8>> = (0..4).map(|_| wq(nc * nc)).collect();
        let bias: Vec<Vec<i32>> = (0..4).map(|g| vec![if g == 1 { 1000 } else { 0 }; nc]).collect();
        let t = QLstmTensors {
            input_w: std::array::from_fn(|g| Some(&wx[g][..])),
            recurrent_w: std::array::from_fn(|g| Some(&wh[g][..])),
            bias: std::array::from_fn(|g| Some(&bias[g][..])),
            ..Default::default()
        };
        let s = QLstmScales {
            input: (xs, 0),
            output_state: (hs, 0),
            cell_state: 2f32.powi(-11),
            output: hs,
            input_w: [ws; 4],
            recurrent_w: [ws; 4],
            intermediates: [(0.0, 0), (0.0, 0), (0.0, 0), (0.0, 0), (hs, 0)],
            ..Default::default()
        };
        let l = QLstm::new(ni, nc, nc, &s, &t).unwrap();
        let (mut h, mut c) = (vec![0i8; batch * nc], vec![0i16; batch * nc]);
        let (mut hf, mut cf) = (vec![0f64; batch * nc], vec![0f64; batch * nc]);
        let mut scratch = QLstmScratch::default();
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        for _ in 0..5 {
            let x: Vec<i8> = (0..batch * ni).map(|_| r.size(0, 120) as i8 - 60).collect();
            qlstm_step(&l, batch, &x, &mut h, &mut c, &mut scratch);
            for b in 0..batch {
                let pre = |g: usize| -> Vec<f64> {
                    (0..nc)
                        .map(|k| {
                            let a: f64 = (0..ni).map(|i| f64::from(wx[g][k * ni + i]) * f64::from(ws) * f64::from(x[b * ni + i]) * f64::from(xs)).sum();
                            let r: f64 = (0..nc).map(|j| f64::from(wh[g][k * nc + j]) * f64::from(ws) * hf[b * nc + j]).sum();
                            a + r + f64::from(bias[g][k]) * f64::from(ws) * f64::from(xs)
                        })
                        .collect()
                };
                let (i, f, g, o) = (pre(0), pre(1), pre(2), pre(3));
                for k in 0..nc {
                    let cn = sig(f[k]) * cf[b * nc + k] + sig(i[k]) * g[k].tanh();
                    cf[b * nc + k] = cn;
                    // The float reference reads the integer output state, as the next step would.
                    let _ = sig(o[k]) * cn.tanh();
                }
                for k in 0..nc {
                    let want = sig(o[k]) * cf[b * nc + k].tanh();
                    let got = f64::from(h[b * nc + k]) * f64::from(hs);
                    assert!((got - want).abs() < 0.03, "h {got} vs {want}");
                    let gotc = f64::from(c[b * nc + k]) * f64::from(2f32.powi(-11));
                    assert!((gotc - cf[b * nc + k]).abs() < 0.03, "c {gotc} vs {}", cf[b * nc + k]);
                    hf[b * nc + k] = got;
                    cf[b * nc + k] = gotc;
                }
            }
        }
    }
}
