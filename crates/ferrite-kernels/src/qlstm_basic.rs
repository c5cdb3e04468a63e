//! LiteRT's legacy 8-bit basic LSTM cell: the LSTM op with `kernel_type` BASIC
//! on uint8 activations. Its five inputs are the input, the previous activation,
//! one weight matrix over the concatenation `[input, previous activation]` for all
//! four gates (rows: input gate, input modulation, forget gate, output gate), int32
//! biases and the int16 previous state; its four outputs the new activation, the
//! new state, and the two scratch tensors (the concatenation, the gates' inputs).
//!
//! The scales are fixed by the kernel rather than read: activations are uint8 with
//! zero point 128 and scale 1/128 (the kernel subtracts 128 and divides by 2^8 at
//! the end), the gates' inputs are Q3.12, the state is Q4.11 (LiteRT accepts a state
//! scale of 2^-11 only). The one scale it derives is the multiplier from the
//! accumulator to Q3.12, `4096 * bias_scale`. Every step below follows its 16-bit
//! fixed-point arithmetic so the results are bit-exact.

use crate::fixed16::{logistic_q3, rdpot, srdhm, tanh_q3};
use crate::qrecurrent::{tanh_fixed, Multiplier};
use crate::quant::saturating_rounding_doubling_high_mul as srdhm32;

/// The integer bits of the state LiteRT's kernel takes (scale `2^(4 - 15)`).
pub const STATE_INTEGER_BITS: i32 = 4;

/// A basic uint8 LSTM cell's shape and parameters (the weights and biases are
/// read at each step, as LiteRT reads them, so they need not be constants).
#[derive(Debug, Clone)]
pub struct BasicLstm {
    /// Rows per invocation.
    pub batch: usize,
    /// Input features.
    pub n_input: usize,
    /// Output (and state) units.
    pub n_output: usize,
    /// The weights' zero point.
    pub weights_zp: i32,
    /// Accumulator to the gates' Q3.12.
    pub accum: Multiplier,
}

/// What one step reads: the input `[batch, n_input]`, the previous activation and
/// state `[batch, n_output]`, the weights `[4 * n_output, n_input + n_output]` and
/// biases `[4 * n_output]`.
#[derive(Debug, Clone, Copy)]
pub struct BasicLstmIn<'a> {
    /// Input.
    pub x: &'a [u8],
    /// Previous activation.
    pub activation: &'a [u8],
    /// Previous state (Q4.11).
    pub state: &'a [i16],
    /// Weights over `[input, previous activation]`.
    pub weights: &'a [u8],
    /// Biases.
    pub bias: &'a [i32],
}

/// The buffers one step writes: the new activation and state, and the two scratch
/// outputs LiteRT exposes (`[batch, n_input + n_output]` uint8, `[batch, 4 *
/// n_output]` int16).
#[derive(Debug)]
pub struct BasicLstmOut<'a> {
    /// New activation, `[batch, n_output]`.
    pub activation: &'a mut [u8],
    /// New state, `[batch, n_output]`.
    pub state: &'a mut [i16],
    /// The concatenated input and previous activation.
    pub concat: &'a mut [u8],
    /// The gates' inputs in Q3.12.
    pub gates: &'a mut [i16],
}

/// The accumulator to Q3.12 as LiteRT's kernel does it through its GEMM library:
/// the doubling high multiply (rounded, ties away from zero) and then a rounding
/// right shift with ties rounded up, not away from zero (measured: negative ties
/// land one above the TFLite reference rounding).
fn gemm_rescale(acc: i32, (m, shift): Multiplier) -> i32 {
    let (left, right) = if shift > 0 { (shift, 0) } else { (0, -shift) };
    let v = srdhm32(acc.wrapping_mul(1 << left), m);
    if right == 0 {
        return v;
    }
    ((i64::from(v) + (1i64 << (right - 1))) >> right) as i32
}

/// One step over `batch` rows; slices must have the sizes given above.
pub fn basic_lstm_step(p: &BasicLstm, i: BasicLstmIn<'_>, o: BasicLstmOut<'_>) {
    let BasicLstmIn { x, activation: prev_a, state: prev_s, weights, bias } = i;
    let (ni, no) = (p.n_input, p.n_output);
    let depth = ni + no;
    let rows = 4 * no;
    for b in 0..p.batch {
        let concat = &mut o.concat[b * depth..][..depth];
        concat[..ni].copy_from_slice(&x[b * ni..][..ni]);
        concat[ni..].copy_from_slice(&prev_a[b * no..][..no]);
        // The fully connected part: activations offset by 128, weights by their
        // zero point, the bias added before the rescale to Q3.12.
        for r in 0..rows {
            let w = &weights[r * depth..][..depth];
            let acc = concat.iter().zip(w).fold(bias[r], |a, (&v, &q)| a.wrapping_add((i32::from(v) - 128) * (i32::from(q) - p.weights_zp)));
            o.gates[b * rows + r] = gemm_rescale(acc, p.accum).clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16;
        }
        let g = &o.gates[b * rows..][..rows];
        for c in 0..no {
            let input_gate = logistic_q3(g[c]);
            let modulation = tanh_q3(g[no + c]);
            let forget = logistic_q3(g[2 * no + c]);
            let output_gate = logistic_q3(g[3 * no + c]);
            // input * modulation is Q0.15; brought to the state's Q4.11 by a rounded
            // shift, added to forget * state with saturation.
            let im = rdpot(srdhm(input_gate, modulation), STATE_INTEGER_BITS);
            let fs = srdhm(forget, prev_s[b * no + c]);
            let state = (i32::from(im) + i32::from(fs)).clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16;
            let h = srdhm(output_gate, tanh_fixed(state, STATE_INTEGER_BITS));
            o.state[b * no + c] = state;
            // Q0.15 to the uint8 activation (scale 1/128, zero point 128).
            o.activation[b * no + c] = (128 + i32::from(rdpot(h, 8)).clamp(-128, 127)) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::quantize_multiplier;

    #[test]
    fn rescale_rounds_ties_up() {
        // Multiplier 0.5 (2^30 with shift 0) then a shift of 2: x / 8.
        let m = (1 << 30, -2);
        assert_eq!(gemm_rescale(-4, m), 0); // -0.5 -> 0
        assert_eq!(gemm_rescale(4, m), 1); // 0.5 -> 1
        assert_eq!(gemm_rescale(-12, m), -1); // -1.5 -> -1
        assert_eq!(gemm_rescale(-14, m), -2); // -7 / 4 = -1.75
    }
    use crate::testutil::Rng;

    /// The integer cell tracks the float LSTM cell it quantizes: activations in
    /// 1/128 steps, the state in Q4.11, over several steps with the state carried.
    #[test]
    fn basic_cell_tracks_the_float_cell() {
        let mut r = Rng::new(5);
        let (batch, ni, no) = (2, 3, 4);
        let depth = ni + no;
        let w_scale = 0.01f64;
        let weights: Vec<u8> = (0..4 * no * depth).map(|_| r.size(0, 200) as u8 + 28).collect();
        let bias: Vec<i32> = (0..4 * no).map(|_| r.size(0, 4000) as i32 - 2000).collect();
        let bias_scale = w_scale / 128.0;
        let p = BasicLstm { batch, n_input: ni, n_output: no, weights_zp: 128, accum: quantize_multiplier(4096.0 * bias_scale) };
        let (mut a, mut s) = (vec![128u8; batch * no], vec![0i16; batch * no]);
        let (mut af, mut sf) = (vec![0f64; batch * no], vec![0f64; batch * no]);
        let (mut concat, mut gates) = (vec![0u8; batch * depth], vec![0i16; batch * 4 * no]);
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        for _ in 0..6 {
            let x: Vec<u8> = (0..batch * ni).map(|_| r.size(0, 255) as u8).collect();
            let (mut na, mut ns) = (vec![0u8; batch * no], vec![0i16; batch * no]);
            let i = BasicLstmIn { x: &x, activation: &a, state: &s, weights: &weights, bias: &bias };
            basic_lstm_step(&p, i, BasicLstmOut { activation: &mut na, state: &mut ns, concat: &mut concat, gates: &mut gates });
            for b in 0..batch {
                let inp: Vec<f64> = (0..ni).map(|i| (f64::from(x[b * ni + i]) - 128.0) / 128.0).chain((0..no).map(|c| af[b * no + c])).collect();
                let pre = |row: usize| -> f64 {
                    let dot: f64 = (0..depth).map(|d| inp[d] * (f64::from(weights[row * depth + d]) - 128.0) * w_scale).sum();
                    dot + f64::from(bias[row]) * bias_scale
                };
                for c in 0..no {
                    let (i, m, f, o) = (sig(pre(c)), pre(no + c).tanh(), sig(pre(2 * no + c)), sig(pre(3 * no + c)));
                    let st = f * sf[b * no + c] + i * m;
                    let want = o * st.tanh();
                    let got = (f64::from(na[b * no + c]) - 128.0) / 128.0;
                    assert!((got - want).abs() < 0.02, "activation {got} vs {want}");
                    let got_s = f64::from(ns[b * no + c]) / 2048.0;
                    assert!((got_s - st).abs() < 0.01, "state {got_s} vs {st}");
                    // Continue from the integer values, as the next step does.
                    af[b * no + c] = got;
                    sf[b * no + c] = got_s;
                }
            }
            // The scratch output holds this step's input and previous activation.
            assert_eq!(concat[..ni], x[..ni]);
            assert_eq!(concat[ni..depth], a[..no]);
            a = na;
            s = ns;
        }
    }
}
