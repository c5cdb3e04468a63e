//! Generates single-op `.tflite` models with randomized shapes and parameters,
//! written by ferrite's own model writer, for differential tests against
//! LiteRT's reference kernels. Also builds the small demo model the repository ships.
//!
//! Usage:
//!   ferrite-opgen ops OUTDIR [--seed S] [--per-op K]   (writes OUTDIR/manifest.json)
//!   ferrite-opgen demo OUT.tflite
//!   ferrite-opgen probe OUTDIR [--seed S]              (per-type LiteRT probe models, see probe.rs)

mod hlo;
mod hlo_index;
mod probe;
mod qelem;
mod qnorm;
mod qred;
mod rand;
mod rngbits;
mod strings;
mod tconv;
mod text;

use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};
use serde_json::{json, Value};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform integer in lo..=hi.
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }
    fn u(&mut self, lo: usize, hi: usize) -> usize {
        self.int(lo as i64, hi as i64) as usize
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    fn f(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.u(0, v.len() - 1)]
    }
    fn floats(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f(lo, hi)).collect()
    }
    fn shape(&mut self, rank: usize, lo: usize, hi: usize) -> Vec<i32> {
        (0..rank).map(|_| self.u(lo, hi) as i32).collect()
    }
}

/// One generated case: the model plus how to make its inputs.
struct Case {
    spec: ModelSpec,
    /// (low, high) of uniform random values per float input.
    ranges: Vec<(f32, f32)>,
    /// Fixed int32 values for non-float inputs, by input index.
    fixed: Vec<(usize, Vec<i32>)>,
}

fn act(r: &mut Rng) -> Activation {
    r.pick(&[Activation::NONE, Activation::RELU, Activation::RELU6, Activation::RELU_N1_TO_1])
}

fn f32in(m: &mut ModelSpec, name: &str, shape: &[i32]) -> i32 {
    let t = m.add_tensor(TensorSpec::activation(name, TensorType::FLOAT32, shape));
    m.inputs.push(t);
    t
}

fn out(m: &mut ModelSpec, dtype: TensorType, shape: &[i32]) -> i32 {
    // Output shapes are informative only; the runtimes infer them.
    let t = m.add_tensor(TensorSpec::activation("out", dtype, shape));
    m.outputs.push(t);
    t
}

fn single(code: B, ins: &[i32], o: i32, opts: Options, m: &mut ModelSpec) {
    m.add_op(OpCode::Builtin(code), ins, &[o], opts);
}

/// A constant int32 tensor, or int64 (`wide`) with the same values.
fn const_index(name: &str, shape: &[i32], values: &[i32], wide: bool) -> TensorSpec {
    let t = TensorSpec::const_i32(name, shape, values);
    if !wide {
        return t;
    }
    let data = values.iter().flat_map(|&v| i64::from(v).to_le_bytes()).collect();
    TensorSpec { dtype: TensorType::INT64, data: Some(data), ..t }
}

fn n_of(s: &[i32]) -> usize {
    s.iter().map(|&d| d as usize).product()
}

/// Randomized options of the quantized pooling cases (windows up to 3x3).
fn quantized_pool_options(r: &mut Rng) -> Options {
    Options::Pool2D {
        padding: same_or_valid(r),
        stride: (r.u(1, 2) as i32, r.u(1, 2) as i32),
        filter: (r.u(1, 3) as i32, r.u(1, 3) as i32),
        activation: act(r),
    }
}

fn same_or_valid(r: &mut Rng) -> Padding {
    if r.coin() {
        Padding::SAME
    } else {
        Padding::VALID
    }
}

fn gen(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let mut ranges = vec![];
    let mut fixed = vec![];
    let fr = (-2.0f32, 2.0f32);
    match op {
        op if RECURRENT.contains(&op) => return gen_recurrent(op, r),
        op if text::TEXT_OPS.contains(&op) => return text::gen(op, r),
        op if strings::OPS.contains(&op) => return strings::gen(op, r),
        op if strings::TABLE_OPS.contains(&op) => return strings::gen_table(op, r),
        op if qred::OPS.contains(&op) => return qred::gen(op, r),
        op if qelem::OPS.contains(&op) => return qelem::gen_case(op, r),
        op if qnorm::OPS.contains(&op) => return qnorm::gen_case(op, r),
        op if hlo::handles(op) => return hlo::gen(op, r),
        op if hlo_index::handles(op) => return hlo_index::gen(op, r),
        op if rand::OPS.contains(&op) || rand::REFUSED.contains(&op) => return rand::gen(op, r),
        op if rngbits::handles(op) => return rngbits::gen(op, r),
        op if tconv::OPS.contains(&op) => return tconv::gen(op, r),
        "CONV_2D" | "DEPTHWISE_CONV_2D" => {
            let dw = op == "DEPTHWISE_CONV_2D";
            let (n, h, w, c) = (r.u(1, 2), r.u(4, 11), r.u(4, 11), r.u(1, 6));
            let (kh, kw) = (r.u(1, 3), r.u(1, 3));
            let stride = (r.u(1, 2) as i32, r.u(1, 2) as i32);
            let dil = if stride == (1, 1) { (r.u(1, 2) as i32, r.u(1, 2) as i32) } else { (1, 1) };
            let mult = if dw { r.u(1, 2) } else { 1 };
            let oc = if dw { c * mult } else { r.u(1, 7) };
            let x = f32in(&mut m, "x", &[n as i32, h as i32, w as i32, c as i32]);
            let wshape = if dw { vec![1, kh as i32, kw as i32, oc as i32] } else { vec![oc as i32, kh as i32, kw as i32, c as i32] };
            let wv = r.floats(n_of(&wshape), -1.0, 1.0);
            let wt = m.add_tensor(TensorSpec::const_f32("w", &wshape, &wv));
            let bv = r.floats(oc, -1.0, 1.0);
            let b = m.add_tensor(TensorSpec::const_f32("b", &[oc as i32], &bv));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let (padding, activation) = (same_or_valid(r), act(r));
            let opts = if dw {
                Options::DepthwiseConv2D { padding, stride, dilation: dil, depth_multiplier: mult as i32, activation }
            } else {
                Options::Conv2D { padding, stride, dilation: dil, activation }
            };
            single(if dw { B::DEPTHWISE_CONV_2D } else { B::CONV_2D }, &[x, wt, b], o, opts, &mut m);
            ranges.push(fr);
        }
        "AVERAGE_POOL_2D" | "MAX_POOL_2D" => {
            // Up to 40 channels: whole 16-channel vector blocks and a remainder.
            let s = [r.u(1, 2) as i32, r.u(3, 10) as i32, r.u(3, 10) as i32, r.u(1, 40) as i32];
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let filter = (r.u(1, 3) as i32, r.u(1, 3) as i32);
            let stride = (r.u(1, 2) as i32, r.u(1, 2) as i32);
            let opts = Options::Pool2D { padding: same_or_valid(r), stride, filter, activation: act(r) };
            single(if op == "MAX_POOL_2D" { B::MAX_POOL_2D } else { B::AVERAGE_POOL_2D }, &[x], o, opts, &mut m);
            ranges.push(fr);
        }
        "FULLY_CONNECTED" => {
            let (b, i, on) = (r.u(1, 4), r.u(1, 40), r.u(1, 20));
            let keep = r.coin();
            let xs = if keep { vec![b as i32, r.u(1, 3) as i32, i as i32] } else { vec![b as i32, i as i32] };
            let x = f32in(&mut m, "x", &xs);
            let wv = r.floats(on * i, -1.0, 1.0);
            let w = m.add_tensor(TensorSpec::const_f32("w", &[on as i32, i as i32], &wv));
            let bv = r.floats(on, -1.0, 1.0);
            let bt = m.add_tensor(TensorSpec::const_f32("b", &[on as i32], &bv));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(
                B::FULLY_CONNECTED,
                &[x, w, bt],
                o,
                Options::FullyConnected { activation: act(r), keep_num_dims: keep, asymmetric_quantize_inputs: false },
                &mut m,
            );
            ranges.push(fr);
        }
        "TRANSPOSE_CONV" => {
            let (n, h, w, c, oc) = (1, r.u(2, 6), r.u(2, 6), r.u(1, 4), r.u(1, 4));
            let (k, s) = (r.u(1, 3), r.u(1, 2));
            let padding = same_or_valid(r);
            let o_sz = |i: usize| if padding == Padding::SAME { i * s } else { (i - 1) * s + k };
            let os = m.add_tensor(TensorSpec::const_i32("output_shape", &[4], &[n, o_sz(h) as i32, o_sz(w) as i32, oc as i32]));
            let wv = r.floats(oc * k * k * c, -1.0, 1.0);
            let wt = m.add_tensor(TensorSpec::const_f32("w", &[oc as i32, k as i32, k as i32, c as i32], &wv));
            let x = f32in(&mut m, "x", &[n, h as i32, w as i32, c as i32]);
            let bv = r.floats(oc, -1.0, 1.0);
            let b = m.add_tensor(TensorSpec::const_f32("b", &[oc as i32], &bv));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(
                B::TRANSPOSE_CONV,
                &[os, wt, x, b],
                o,
                Options::TransposeConv { padding, stride: (s as i32, s as i32), activation: Activation::NONE },
                &mut m,
            );
            ranges.push(fr);
        }
        "CONV_3D" | "CONV_3D_TRANSPOSE" => {
            // Small volumes (a few frames of a few pixels); strides or dilations per axis,
            // both paddings, every fused activation, the bias sometimes left out.
            let transpose = op == "CONV_3D_TRANSPOSE";
            let n = r.u(1, 2);
            let dims = [r.u(1, 5), r.u(2, 6), r.u(2, 6)];
            let (c, oc) = (r.u(1, 4), r.u(1, 4));
            let k = [r.u(1, 3), r.u(1, 3), r.u(1, 3)];
            let stride = [r.u(1, 2), r.u(1, 2), r.u(1, 2)];
            let dil: Vec<usize> = stride.iter().map(|&s| if s == 1 { r.u(1, 2) } else { 1 }).collect();
            let mut padding = same_or_valid(r);
            // VALID needs the dilated window inside the input on every axis.
            if (0..3).any(|a| (k[a] - 1) * dil[a] + 1 > dims[a]) {
                padding = Padding::SAME;
            }
            let i32s = |v: &[usize]| v.iter().map(|&d| d as i32).collect::<Vec<_>>();
            let activation = act(r);
            let opts = Options::Conv3D {
                padding,
                stride: (stride[0] as i32, stride[1] as i32, stride[2] as i32),
                dilation: (dil[0] as i32, dil[1] as i32, dil[2] as i32),
                activation,
            };
            let with_bias = r.u(0, 3) > 0;
            let bv = r.floats(oc, -1.0, 1.0);
            if transpose {
                // The transpose's output size: what the forward convolution of that size
                // would map onto the input (SAME: input * stride; VALID: the full span).
                let o_sz = |a: usize| if padding == Padding::SAME { dims[a] * stride[a] } else { (dims[a] - 1) * stride[a] + (k[a] - 1) * dil[a] + 1 };
                let shape = [n as i32, o_sz(0) as i32, o_sz(1) as i32, o_sz(2) as i32, oc as i32];
                let os = m.add_tensor(TensorSpec::const_i32("output_shape", &[5], &shape));
                let wshape = i32s(&[k[0], k[1], k[2], oc, c]);
                let wv = r.floats(n_of(&wshape), -1.0, 1.0);
                let wt = m.add_tensor(TensorSpec::const_f32("w", &wshape, &wv));
                let x = f32in(&mut m, "x", &i32s(&[n, dims[0], dims[1], dims[2], c]));
                let o = out(&mut m, TensorType::FLOAT32, &[]);
                let mut ins = vec![os, wt, x];
                if with_bias {
                    ins.push(m.add_tensor(TensorSpec::const_f32("b", &[oc as i32], &bv)));
                }
                single(B::CONV_3D_TRANSPOSE, &ins, o, opts, &mut m);
            } else {
                let x = f32in(&mut m, "x", &i32s(&[n, dims[0], dims[1], dims[2], c]));
                let wshape = i32s(&[k[0], k[1], k[2], c, oc]);
                let wv = r.floats(n_of(&wshape), -1.0, 1.0);
                let wt = m.add_tensor(TensorSpec::const_f32("w", &wshape, &wv));
                let o = out(&mut m, TensorType::FLOAT32, &[]);
                let mut ins = vec![x, wt];
                if with_bias {
                    ins.push(m.add_tensor(TensorSpec::const_f32("b", &[oc as i32], &bv)));
                }
                single(B::CONV_3D, &ins, o, opts, &mut m);
            }
            ranges.push(fr);
        }
        "BATCH_MATMUL" => {
            let (bt, mm, k, n) = (r.u(1, 3) as i32, r.u(1, 6) as i32, r.u(1, 6) as i32, r.u(1, 6) as i32);
            let (adj_x, adj_y) = (r.coin(), r.coin());
            let a = f32in(&mut m, "a", &if adj_x { [bt, k, mm] } else { [bt, mm, k] });
            let bb = f32in(&mut m, "b", &if adj_y { [1, n, k] } else { [1, k, n] });
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::BATCH_MATMUL, &[a, bb], o, Options::BatchMatMul { adj_x, adj_y, asymmetric_quantize_inputs: false }, &mut m);
            ranges.extend([fr, fr]);
        }
        "ADD" | "SUB" | "MUL" | "DIV" | "MAXIMUM" | "MINIMUM" | "SQUARED_DIFFERENCE" | "POW" | "LESS" | "GREATER_EQUAL" | "EQUAL" | "NOT_EQUAL"
        | "LESS_EQUAL" | "GREATER" => {
            let rank = r.u(1, 4);
            let full = r.shape(rank, 1, 5);
            let skip = r.u(0, rank - 1);
            let other: Vec<i32> = full.iter().map(|&d| if r.coin() { 1 } else { d }).skip(skip).collect();
            let (sa, sb) = if r.coin() { (full.clone(), other) } else { (other, full.clone()) };
            let a = f32in(&mut m, "a", &sa);
            let b = f32in(&mut m, "b", &sb);
            let cmp = matches!(op, "LESS" | "GREATER_EQUAL" | "EQUAL" | "NOT_EQUAL" | "LESS_EQUAL" | "GREATER");
            let o = out(&mut m, if cmp { TensorType::BOOL } else { TensorType::FLOAT32 }, &[]);
            let code = B::ENUM_VALUES.iter().copied().find(|c| c.variant_name() == Some(op)).unwrap_or(B::ADD);
            let opts = if matches!(op, "ADD" | "SUB" | "MUL" | "DIV") { Options::Binary { activation: act(r) } } else { Options::None };
            single(code, &[a, b], o, opts, &mut m);
            match op {
                "POW" => ranges.extend([(0.1, 3.0), (-2.0, 2.0)]),
                "DIV" => ranges.extend([fr, (0.5, 3.0)]),
                // Integral values make equality comparisons meaningful.
                "EQUAL" | "NOT_EQUAL" => ranges.extend([(-2.0, 2.0), (-2.0, 2.0)]),
                _ => ranges.extend([fr, fr]),
            }
        }
        "PRELU" => {
            let s = [1, r.u(1, 5) as i32, r.u(1, 5) as i32, r.u(1, 6) as i32];
            let x = f32in(&mut m, "x", &s);
            let av = r.floats(s[3] as usize, 0.0, 0.5);
            let a = m.add_tensor(TensorSpec::const_f32("alpha", &[1, 1, s[3]], &av));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::PRELU, &[x, a], o, Options::None, &mut m);
            ranges.push(fr);
        }
        "ABS" | "NEG" | "EXP" | "LOG" | "SQRT" | "RSQRT" | "SQUARE" | "TANH" | "LOGISTIC" | "RELU" | "RELU6" | "RELU_N1_TO_1" | "HARD_SWISH" | "LEAKY_RELU"
        | "ELU" | "FLOOR" | "CEIL" | "SIN" | "COS" | "SOFTMAX" | "LOG_SOFTMAX" => {
            let s = {
                let rk = r.u(1, 4);
                r.shape(rk, 1, 6)
            };
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let code = B::ENUM_VALUES.iter().copied().find(|c| c.variant_name() == Some(op)).unwrap_or(B::ABS);
            let opts = match op {
                "LEAKY_RELU" => Options::LeakyRelu { alpha: r.f(0.0, 0.5) },
                "SOFTMAX" => Options::Softmax { beta: r.f(0.5, 2.0) },
                _ => Options::None,
            };
            single(code, &[x], o, opts, &mut m);
            ranges.push(match op {
                "LOG" | "SQRT" | "RSQRT" => (0.05, 4.0),
                "HARD_SWISH" | "RELU6" => (-8.0, 8.0),
                _ => fr,
            });
        }
        "RESHAPE" | "SQUEEZE" | "EXPAND_DIMS" => {
            let s = [r.u(1, 3) as i32, 1, r.u(1, 4) as i32, r.u(1, 4) as i32];
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            match op {
                "RESHAPE" => {
                    let t = m.add_tensor(TensorSpec::const_i32("shape", &[2], &[s[0], -1]));
                    single(B::RESHAPE, &[x, t], o, Options::Reshape { new_shape: vec![s[0], -1] }, &mut m);
                }
                "SQUEEZE" => single(B::SQUEEZE, &[x], o, Options::Squeeze { dims: vec![1] }, &mut m),
                _ => {
                    let a = m.add_tensor(TensorSpec::const_i32("axis", &[1], &[r.int(-5, 4) as i32]));
                    single(B::EXPAND_DIMS, &[x, a], o, Options::None, &mut m);
                }
            }
            ranges.push(fr);
        }
        "CONCATENATION" | "PACK" => {
            let rank = r.u(1, 4);
            let base = r.shape(rank, 1, 4);
            let axis = r.u(0, rank - 1);
            let k = r.u(2, 3);
            let mut ins = vec![];
            for i in 0..k {
                let mut s = base.clone();
                if op == "CONCATENATION" {
                    s[axis] = r.u(1, 4) as i32;
                }
                ins.push(f32in(&mut m, &format!("x{i}"), &s));
                ranges.push(fr);
            }
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            if op == "PACK" {
                single(B::PACK, &ins, o, Options::Pack { values_count: k as i32, axis: r.u(0, rank) as i32 }, &mut m);
            } else {
                single(
                    B::CONCATENATION,
                    &ins,
                    o,
                    Options::Concatenation { axis: axis as i32 - if r.coin() { rank as i32 } else { 0 }, activation: Activation::NONE },
                    &mut m,
                );
            }
        }
        "SPLIT" | "SPLIT_V" | "UNPACK" => {
            let rank = r.u(1, 4);
            let mut s = r.shape(rank, 1, 4);
            let axis = r.u(0, rank - 1);
            let k = r.u(1, 3);
            if op == "SPLIT" {
                s[axis] = (k * r.u(1, 2)) as i32;
            }
            let x = f32in(&mut m, "x", &s);
            ranges.push(fr);
            let nout = if op == "UNPACK" { s[axis] as usize } else { k };
            let outs: Vec<i32> = (0..nout).map(|_| out(&mut m, TensorType::FLOAT32, &[])).collect();
            match op {
                "SPLIT" => {
                    let a = m.add_tensor(TensorSpec::const_i32("axis", &[], &[axis as i32]));
                    m.add_op(OpCode::Builtin(B::SPLIT), &[a, x], &outs, Options::Split { num_splits: k as i32 });
                }
                "SPLIT_V" => {
                    let total = s[axis];
                    let mut sizes = vec![0i32; k];
                    for _ in 0..total {
                        let i = r.u(0, k - 1);
                        sizes[i] += 1;
                    }
                    let a = m.add_tensor(TensorSpec::const_i32("axis", &[], &[axis as i32]));
                    let sz = m.add_tensor(TensorSpec::const_i32("sizes", &[k as i32], &sizes));
                    m.add_op(OpCode::Builtin(B::SPLIT_V), &[x, sz, a], &outs, Options::Split { num_splits: k as i32 });
                }
                _ => m.add_op(OpCode::Builtin(B::UNPACK), &[x], &outs, Options::Unpack { num: nout as i32, axis: axis as i32 }),
            }
        }
        "SLICE" | "STRIDED_SLICE" => {
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 6);
            let x = f32in(&mut m, "x", &s);
            ranges.push(fr);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            if op == "SLICE" {
                let begin: Vec<i32> = s.iter().map(|&d| r.int(0, i64::from(d) - 1) as i32).collect();
                let size: Vec<i32> = s.iter().zip(&begin).map(|(&d, &b)| if r.coin() { -1 } else { r.int(1, i64::from(d - b)) as i32 }).collect();
                let bt = m.add_tensor(TensorSpec::const_i32("begin", &[rank as i32], &begin));
                let st = m.add_tensor(TensorSpec::const_i32("size", &[rank as i32], &size));
                single(B::SLICE, &[x, bt, st], o, Options::None, &mut m);
            } else {
                let begin: Vec<i32> = s.iter().map(|&d| r.int(-i64::from(d), i64::from(d) - 1) as i32).collect();
                let end: Vec<i32> = s.iter().map(|&d| r.int(-i64::from(d), i64::from(d)) as i32).collect();
                let strides: Vec<i32> = (0..rank).map(|_| r.pick(&[1, 1, 2, -1, 3, -2])).collect();
                let mask = |r: &mut Rng| r.int(0, (1 << rank) - 1) as i32;
                let (bm, em) = (mask(r), mask(r));
                // Shrink only dims whose slice is one element from a valid begin.
                let sm = if r.coin() { 1 << r.u(0, rank - 1) } else { 0 };
                let nm = if r.coin() && sm == 0 { 1 << r.u(0, rank - 1) } else { 0 };
                let strides: Vec<i32> = strides.iter().enumerate().map(|(d, &v)| if sm >> d & 1 == 1 { 1 } else { v }).collect();
                let bt = m.add_tensor(TensorSpec::const_i32("begin", &[rank as i32], &begin));
                let et = m.add_tensor(TensorSpec::const_i32("end", &[rank as i32], &end));
                let st = m.add_tensor(TensorSpec::const_i32("strides", &[rank as i32], &strides));
                let bm = bm & !sm;
                single(
                    B::STRIDED_SLICE,
                    &[x, bt, et, st],
                    o,
                    Options::StridedSlice { begin_mask: bm, end_mask: em, ellipsis_mask: 0, new_axis_mask: nm, shrink_axis_mask: sm, offset: false },
                    &mut m,
                );
            }
        }
        "TRANSPOSE" => {
            let rank = r.u(1, 5);
            let s = r.shape(rank, 1, 4);
            let mut perm: Vec<i32> = (0..rank as i32).collect();
            for i in (1..rank).rev() {
                perm.swap(i, r.u(0, i));
            }
            let x = f32in(&mut m, "x", &s);
            let p = m.add_tensor(TensorSpec::const_i32("perm", &[rank as i32], &perm));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::TRANSPOSE, &[x, p], o, Options::None, &mut m);
            ranges.push(fr);
        }
        "REVERSE_V2" => {
            // One axis or a run of adjacent ones (LiteRT takes no other sets), some
            // written negative.
            let rank = r.u(1, 5);
            let s = r.shape(rank, 1, 4);
            let first = r.u(0, rank - 1);
            let last = r.u(first, rank - 1);
            let axes: Vec<i32> = (first as i32..=last as i32).collect();
            let axes: Vec<i32> = axes.into_iter().map(|a| if r.u(0, 1) == 1 { a - rank as i32 } else { a }).collect();
            let x = f32in(&mut m, "x", &s);
            let a = m.add_tensor(TensorSpec::const_i32("axes", &[axes.len() as i32], &axes));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::REVERSE_V2, &[x, a], o, Options::None, &mut m);
            ranges.push(fr);
        }
        "PAD" | "PADV2" => {
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 4);
            let x = f32in(&mut m, "x", &s);
            let pads: Vec<i32> = (0..2 * rank).map(|_| r.int(0, 2) as i32).collect();
            let p = m.add_tensor(TensorSpec::const_i32("pads", &[rank as i32, 2], &pads));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            if op == "PADV2" {
                let v = m.add_tensor(TensorSpec::const_f32("value", &[], &[r.f(-1.0, 1.0)]));
                single(B::PADV2, &[x, p, v], o, Options::None, &mut m);
            } else {
                single(B::PAD, &[x, p], o, Options::None, &mut m);
            }
            ranges.push(fr);
        }
        "GATHER" => {
            let rank = r.u(1, 3);
            let s = r.shape(rank, 1, 5);
            let axis = r.u(0, rank - 1);
            let ni = r.u(1, 4);
            let idx: Vec<i32> = (0..ni).map(|_| r.int(0, i64::from(s[axis]) - 1) as i32).collect();
            let x = f32in(&mut m, "x", &s);
            let it = m.add_tensor(TensorSpec::const_i32("idx", &[ni as i32], &idx));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::GATHER, &[x, it], o, Options::Gather { axis: axis as i32, batch_dims: 0 }, &mut m);
            ranges.push(fr);
        }
        "GATHER_ND" | "GATHER_ND_I64" => {
            // Index tuples of 1 to rank coordinates, in range, int32 or int64 constants.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 4);
            let nd = r.u(1, rank);
            let lead: Vec<i32> = (0..r.u(1, 2)).map(|_| r.u(1, 3) as i32).collect();
            let n: usize = n_of(&lead);
            let idx: Vec<i32> = (0..n).flat_map(|_| s[..nd].to_vec()).map(|d| r.int(0, i64::from(d) - 1) as i32).collect();
            let x = f32in(&mut m, "params", &s);
            let mut ishape = lead.clone();
            ishape.push(nd as i32);
            let it = if op == "GATHER_ND_I64" {
                let data = idx.iter().flat_map(|&v| i64::from(v).to_le_bytes()).collect();
                m.add_tensor(TensorSpec { data: Some(data), ..TensorSpec::activation("indices", TensorType::INT64, &ishape) })
            } else {
                m.add_tensor(TensorSpec::const_i32("indices", &ishape, &idx))
            };
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::GATHER_ND, &[x, it], o, Options::None, &mut m);
            ranges.push(fr);
        }
        "SCATTER_ND" => {
            // Random tuples (duplicates among them add up) into a constant shape.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 4);
            let nd = r.u(1, rank);
            let n = r.u(1, 6);
            let idx: Vec<i32> = (0..n).flat_map(|_| s[..nd].to_vec()).map(|d| r.int(0, i64::from(d) - 1) as i32).collect();
            let it = m.add_tensor(TensorSpec::const_i32("indices", &[n as i32, nd as i32], &idx));
            let mut ushape = vec![n as i32];
            ushape.extend_from_slice(&s[nd..]);
            let u = f32in(&mut m, "updates", &ushape);
            let st = m.add_tensor(TensorSpec::const_i32("shape", &[rank as i32], &s));
            let o = out(&mut m, TensorType::FLOAT32, &s);
            single(B::SCATTER_ND, &[it, u, st], o, Options::None, &mut m);
            ranges.push(fr);
        }
        "DYNAMIC_UPDATE_SLICE" => {
            // The start position is a model input (a KV cache's write index), some
            // starts outside the operand (clamped so the update fits).
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 5);
            let us: Vec<i32> = s.iter().map(|&d| r.int(1, i64::from(d)) as i32).collect();
            let x = f32in(&mut m, "operand", &s);
            let u = f32in(&mut m, "update", &us);
            let st = m.add_tensor(TensorSpec::activation("start", TensorType::INT32, &[rank as i32]));
            m.inputs.push(st);
            let o = out(&mut m, TensorType::FLOAT32, &s);
            single(B::DYNAMIC_UPDATE_SLICE, &[x, u, st], o, Options::None, &mut m);
            ranges.extend([fr, fr]);
            fixed.push((2, s.iter().map(|&d| r.int(-2, i64::from(d) + 1) as i32).collect()));
        }
        "EMBEDDING_LOOKUP" => {
            let rows = r.u(1, 8) as i32;
            let rank = r.u(1, 2);
            let dims = r.shape(rank, 1, 5);
            let n = r.u(1, 6);
            let ids = m.add_tensor(TensorSpec::activation("ids", TensorType::INT32, &[n as i32]));
            m.inputs.push(ids);
            let mut ts = vec![rows];
            ts.extend_from_slice(&dims);
            let t = f32in(&mut m, "table", &ts);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::EMBEDDING_LOOKUP, &[ids, t], o, Options::None, &mut m);
            ranges.push(fr);
            fixed.push((0, (0..n).map(|_| r.int(0, i64::from(rows) - 1) as i32).collect()));
        }
        "EMBEDDING_LOOKUP_HYBRID" | "EMBEDDING_LOOKUP_HYBRID_PER_ROW" => {
            // A constant int8 table with float32 output (dynamic-range models), one
            // scale or one per row.
            let (rows, dim) = (r.u(1, 8), r.u(1, 6));
            let n = r.u(1, 6);
            let ids = m.add_tensor(TensorSpec::activation("ids", TensorType::INT32, &[n as i32]));
            m.inputs.push(ids);
            let data: Vec<u8> = (0..rows * dim).map(|_| r.int(-127, 127) as i8 as u8).collect();
            let scales: Vec<f32> = if op.ends_with("PER_ROW") { (0..rows).map(|_| r.f(0.001, 0.1)).collect() } else { vec![r.f(0.001, 0.1)] };
            let zps = vec![0; scales.len()];
            let t = m.add_tensor(TensorSpec {
                data: Some(data),
                quant: Some((scales, zps, 0)),
                ..TensorSpec::activation("table", TensorType::INT8, &[rows as i32, dim as i32])
            });
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::EMBEDDING_LOOKUP, &[ids, t], o, Options::None, &mut m);
            fixed.push((0, (0..n).map(|_| r.int(0, rows as i64 - 1) as i32).collect()));
        }
        "TOPK_V2" | "TOPK_V2_TIES" | "TOPK_V2_DYNAMIC" => {
            // TIES: integral inputs, so equal values (ordered by index) are common.
            // DYNAMIC: k is a model input, so the output shape is known at run time only.
            let rank = r.u(1, 3);
            let s = r.shape(rank, 1, 9);
            let n = s[rank - 1];
            // LiteRT cannot allocate an empty dynamic output: k >= 1 when k is an input.
            let kv = r.int(i64::from(op == "TOPK_V2_DYNAMIC"), i64::from(n)) as i32;
            let x = f32in(&mut m, "x", &s);
            let kt = if op == "TOPK_V2_DYNAMIC" {
                let t = m.add_tensor(TensorSpec::activation("k", TensorType::INT32, &[]));
                m.inputs.push(t);
                fixed.push((1, vec![kv]));
                t
            } else {
                m.add_tensor(TensorSpec::const_i32("k", &[], &[kv]))
            };
            let v = m.add_tensor(TensorSpec::activation("values", TensorType::FLOAT32, &[]));
            let i = m.add_tensor(TensorSpec::activation("indices", TensorType::INT32, &[]));
            m.outputs.extend([v, i]);
            m.add_op(OpCode::Builtin(B::TOPK_V2), &[x, kt], &[v, i], Options::None);
            ranges.push(if op == "TOPK_V2_TIES" { (-3.0, 3.0) } else { fr });
        }
        "ONE_HOT" | "ONE_HOT_DYNAMIC" => {
            // Indices from -1 to depth (both outside: a row of off values); the axis
            // anywhere, -1 included. DYNAMIC: the depth is a model input.
            let rank = r.u(0, 3);
            let s = r.shape(rank, 1, 4);
            let depth = r.u(1, 5) as i32;
            let axis = r.int(-1, rank as i64) as i32;
            let it = m.add_tensor(TensorSpec::activation("indices", TensorType::INT32, &s));
            m.inputs.push(it);
            fixed.push((0, (0..n_of(&s)).map(|_| r.int(-1, i64::from(depth)) as i32).collect()));
            let dt = if op == "ONE_HOT_DYNAMIC" {
                let t = m.add_tensor(TensorSpec::activation("depth", TensorType::INT32, &[]));
                m.inputs.push(t);
                fixed.push((1, vec![depth]));
                t
            } else {
                m.add_tensor(TensorSpec::const_i32("depth", &[], &[depth]))
            };
            let on = m.add_tensor(TensorSpec::const_f32("on", &[], &[r.f(0.5, 2.0)]));
            let off = m.add_tensor(TensorSpec::const_f32("off", &[], &[r.f(-1.0, 0.0)]));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::ONE_HOT, &[it, dt, on, off], o, Options::OneHot { axis }, &mut m);
        }
        "RANGE" | "RANGE_FLOAT" => {
            // Bounds are model inputs: the output's length is known at run time only.
            if op == "RANGE" {
                let (start, delta) = (r.int(-10, 10) as i32, r.pick(&[-3, -2, -1, 1, 2, 5]));
                // At least one element: LiteRT cannot allocate an empty dynamic output.
                let limit = start + delta * r.int(2, 8) as i32 - if r.coin() { delta.signum() } else { 0 };
                for (k, (name, v)) in [("start", start), ("limit", limit), ("delta", delta)].into_iter().enumerate() {
                    let t = m.add_tensor(TensorSpec::activation(name, TensorType::INT32, &[]));
                    m.inputs.push(t);
                    fixed.push((k, vec![v]));
                }
                let ins = m.inputs.clone();
                let o = out(&mut m, TensorType::INT32, &[]);
                single(B::RANGE, &ins, o, Options::None, &mut m);
            } else {
                let ins: Vec<i32> = ["start", "limit", "delta"].iter().map(|n| f32in(&mut m, n, &[])).collect();
                let o = out(&mut m, TensorType::FLOAT32, &[]);
                single(B::RANGE, &ins, o, Options::None, &mut m);
                ranges.extend([(-4.0, -1.0), (1.0, 4.0), (0.2, 1.5)]);
            }
        }
        "CUMSUM" => {
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 6);
            let axis = r.int(-(rank as i64), rank as i64 - 1) as i32;
            let x = f32in(&mut m, "x", &s);
            let a = m.add_tensor(TensorSpec::const_i32("axis", &[], &[axis]));
            let o = out(&mut m, TensorType::FLOAT32, &s);
            single(B::CUMSUM, &[x, a], o, Options::Cumsum { exclusive: r.coin(), reverse: r.coin() }, &mut m);
            ranges.push(fr);
        }
        "ADD_N" | "ADD_N_INT32" | "ADD_N_INT64" => {
            // Two to five inputs (LiteRT requires two) of one shape (ranks 0 to 4,
            // sizes 1 to 5). INT64: refused by LiteRT and ferrite alike.
            let int = op.ends_with("INT32") || op.ends_with("INT64");
            let rank = r.u(0, 4);
            let s = r.shape(rank, 1, 5);
            let ty = match op {
                "ADD_N_INT32" => TensorType::INT32,
                "ADD_N_INT64" => TensorType::INT64,
                _ => TensorType::FLOAT32,
            };
            let ins: Vec<i32> = (0..r.u(2, 5))
                .map(|k| {
                    let t = m.add_tensor(TensorSpec::activation(&format!("x{k}"), ty, &s));
                    m.inputs.push(t);
                    if int {
                        fixed.push((k, (0..n_of(&s)).map(|_| r.int(-1000, 1000) as i32).collect()));
                    } else {
                        ranges.push(fr);
                    }
                    t
                })
                .collect();
            let o = out(&mut m, ty, &s);
            single(B::ADD_N, &ins, o, Options::None, &mut m);
        }
        "RANK" | "RANK_INT8" | "RANK_BOOL" => {
            // Ranks 0 to 5; the value is never read.
            let rank = r.u(0, 5);
            let s = r.shape(rank, 1, 3);
            let ty = match op {
                "RANK_INT8" => TensorType::INT8,
                "RANK_BOOL" => TensorType::BOOL,
                _ => TensorType::FLOAT32,
            };
            let x = m.add_tensor(TensorSpec::activation("x", ty, &s));
            m.inputs.push(x);
            if ty == TensorType::FLOAT32 {
                ranges.push(fr);
            }
            let o = out(&mut m, TensorType::INT32, &[]);
            single(B::RANK, &[x], o, Options::None, &mut m);
        }
        "REDUCE_ALL" | "REDUCE_ANY" => {
            // A bool input (the harness draws it at random), one to three constant
            // axes (some negative, some repeated), keep_dims either way.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 4);
            let axes: Vec<i32> = (0..r.u(1, 3)).map(|_| r.int(-(rank as i64), rank as i64 - 1) as i32).collect();
            let x = m.add_tensor(TensorSpec::activation("x", TensorType::BOOL, &s));
            m.inputs.push(x);
            let a = m.add_tensor(TensorSpec::const_i32("axes", &[axes.len() as i32], &axes));
            let o = out(&mut m, TensorType::BOOL, &[]);
            let code = if op == "REDUCE_ALL" { B::REDUCE_ALL } else { B::REDUCE_ANY };
            single(code, &[x, a], o, Options::Reducer { keep_dims: r.coin() }, &mut m);
        }
        "REVERSE_SEQUENCE"
        | "REVERSE_SEQUENCE_I64"
        | "REVERSE_SEQUENCE_UINT8"
        | "REVERSE_SEQUENCE_INT16"
        | "REVERSE_SEQUENCE_INT32"
        | "REVERSE_SEQUENCE_INT64"
        | "REVERSE_SEQUENCE_INT8" => {
            // Ranks 2 to 4, any two distinct dims, lengths 0 to the full dimension
            // (a model input); I64: int64 lengths. INT8: refused by LiteRT and ferrite.
            let rank = r.u(2, 4);
            let s = r.shape(rank, 1, 5);
            let seq_dim = r.u(0, rank - 1);
            let batch_dim = (seq_dim + r.u(1, rank - 1)) % rank;
            let ty = match op {
                "REVERSE_SEQUENCE_UINT8" => TensorType::UINT8,
                "REVERSE_SEQUENCE_INT16" => TensorType::INT16,
                "REVERSE_SEQUENCE_INT32" => TensorType::INT32,
                "REVERSE_SEQUENCE_INT64" => TensorType::INT64,
                "REVERSE_SEQUENCE_INT8" => TensorType::INT8,
                _ => TensorType::FLOAT32,
            };
            let x = m.add_tensor(TensorSpec::activation("x", ty, &s));
            m.inputs.push(x);
            if ty == TensorType::FLOAT32 {
                ranges.push(fr);
            }
            let lt = if op.ends_with("I64") { TensorType::INT64 } else { TensorType::INT32 };
            let l = m.add_tensor(TensorSpec::activation("seq_lengths", lt, &[s[batch_dim]]));
            m.inputs.push(l);
            fixed.push((1, (0..s[batch_dim]).map(|_| r.int(0, i64::from(s[seq_dim])) as i32).collect()));
            let o = out(&mut m, ty, &s);
            single(B::REVERSE_SEQUENCE, &[x, l], o, Options::ReverseSequence { seq_dim: seq_dim as i32, batch_dim: batch_dim as i32 }, &mut m);
        }
        "SPARSE_TO_DENSE"
        | "SPARSE_TO_DENSE_I64"
        | "SPARSE_TO_DENSE_INT8"
        | "SPARSE_TO_DENSE_UINT8"
        | "SPARSE_TO_DENSE_INT32"
        | "SPARSE_TO_DENSE_INT64"
        | "SPARSE_TO_DENSE_DYNAMIC" => {
            // Constant indices (a scalar or vector for a rank-1 output, or [n, rank]
            // tuples for ranks 1 to 4; repeated positions now and then), values
            // and default as model inputs (one value for all, sometimes); I64:
            // int64 indices and shape; DYNAMIC: the shape a model input, so the
            // output is sized at run time.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 5);
            let total = n_of(&s);
            let form = if rank == 1 { r.u(0, 2) } else { 2 };
            let n = if form == 0 { 1 } else { r.u(1, 6) };
            let mut idx = vec![];
            for _ in 0..n {
                let mut f = r.u(0, total - 1);
                let mut c = vec![0i32; rank];
                for d in (0..rank).rev() {
                    c[d] = (f % s[d] as usize) as i32;
                    f /= s[d] as usize;
                }
                idx.extend(c);
            }
            let ishape: Vec<i32> = match form {
                0 => vec![],
                1 => vec![n as i32],
                _ => vec![n as i32, rank as i32],
            };
            let wide = op.ends_with("I64");
            let it = m.add_tensor(const_index("indices", &ishape, &idx, wide));
            let st = if op.ends_with("DYNAMIC") {
                let t = m.add_tensor(TensorSpec::activation("output_shape", TensorType::INT32, &[rank as i32]));
                m.inputs.push(t);
                fixed.push((m.inputs.len() - 1, s.clone()));
                t
            } else {
                m.add_tensor(const_index("output_shape", &[rank as i32], &s, wide))
            };
            let ty = match op {
                "SPARSE_TO_DENSE_INT8" => TensorType::INT8,
                "SPARSE_TO_DENSE_UINT8" => TensorType::UINT8,
                "SPARSE_TO_DENSE_INT32" => TensorType::INT32,
                "SPARSE_TO_DENSE_INT64" => TensorType::INT64,
                _ => TensorType::FLOAT32,
            };
            let vshape: Vec<i32> = if form == 0 || r.u(0, 3) == 0 { vec![] } else { vec![n as i32] };
            let v = m.add_tensor(TensorSpec::activation("values", ty, &vshape));
            m.inputs.push(v);
            let d = m.add_tensor(TensorSpec::activation("default", ty, &[]));
            m.inputs.push(d);
            if ty == TensorType::FLOAT32 {
                ranges.extend([fr, fr]);
            }
            let o = out(&mut m, ty, &s);
            single(B::SPARSE_TO_DENSE, &[it, st, v, d], o, Options::SparseToDense { validate_indices: r.coin() }, &mut m);
        }
        "L2_POOL_2D" => {
            let s = [r.u(1, 2) as i32, r.u(1, 9) as i32, r.u(1, 9) as i32, r.u(1, 20) as i32];
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let filter = (r.u(1, 3) as i32, r.u(1, 3) as i32);
            let stride = (r.u(1, 2) as i32, r.u(1, 2) as i32);
            // VALID needs the window inside the input.
            let padding = if filter.0 > s[1] || filter.1 > s[2] { Padding::SAME } else { same_or_valid(r) };
            single(B::L2_POOL_2D, &[x], o, Options::Pool2D { padding, stride, filter, activation: act(r) }, &mut m);
            ranges.push(fr);
        }
        "WHERE" | "WHERE_BOOL" | "WHERE_INT8" | "WHERE_INT32" | "WHERE_INT64" | "WHERE_UINT8" | "WHERE_CONST" => {
            // The condition is a model input (its count of true elements sizes the
            // output at run time), ranks 1 to 4, zeros common; CONST: a constant
            // float condition, so the output's shape is known at prepare.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 4);
            let n = n_of(&s);
            let ty = match op {
                "WHERE_BOOL" => TensorType::BOOL,
                "WHERE_INT8" => TensorType::INT8,
                "WHERE_UINT8" => TensorType::UINT8,
                "WHERE_INT32" => TensorType::INT32,
                "WHERE_INT64" => TensorType::INT64,
                _ => TensorType::FLOAT32,
            };
            // At least one true element: LiteRT cannot allocate an empty dynamic output.
            let mut vals: Vec<i32> = (0..n).map(|_| if r.u(0, 2) == 0 { r.int(-3, 3) as i32 } else { 0 }).collect();
            vals[r.u(0, n - 1)] = 1;
            let c = if op == "WHERE_CONST" {
                let f: Vec<f32> = vals.iter().map(|&v| v as f32 * 0.5).collect();
                m.add_tensor(TensorSpec::const_f32("cond", &s, &f))
            } else {
                let t = m.add_tensor(TensorSpec::activation("cond", ty, &s));
                m.inputs.push(t);
                let vals = if ty == TensorType::BOOL || ty == TensorType::UINT8 { vals.iter().map(|v| v.abs()).collect() } else { vals };
                fixed.push((0, vals));
                t
            };
            if op == "WHERE_CONST" {
                // LiteRT needs a model input: an unused one.
                f32in(&mut m, "unused", &[1]);
                ranges.push(fr);
            }
            let o = out(&mut m, TensorType::INT64, &[]);
            single(B::WHERE, &[c], o, Options::None, &mut m);
        }
        "UNIQUE" | "UNIQUE_I64" | "UNIQUE_INT8" | "UNIQUE_INT32" | "UNIQUE_INT64" | "UNIQUE_INT16" | "UNIQUE_UINT8" => {
            // A 1-D input with repeated values; the index output int32, or int64 (I64).
            let n = r.u(1, 12);
            let ty = match op {
                "UNIQUE_INT8" => TensorType::INT8,
                "UNIQUE_INT16" => TensorType::INT16,
                "UNIQUE_UINT8" => TensorType::UINT8,
                "UNIQUE_INT32" => TensorType::INT32,
                "UNIQUE_INT64" => TensorType::INT64,
                _ => TensorType::FLOAT32,
            };
            let x = m.add_tensor(TensorSpec::activation("x", ty, &[n as i32]));
            m.inputs.push(x);
            if ty == TensorType::FLOAT32 {
                ranges.push((-3.0, 3.0));
            } else {
                fixed.push((0, (0..n).map(|_| r.int(0, 5) as i32 * 7 - if ty == TensorType::UINT8 { 0 } else { 14 }).collect()));
            }
            let it = if op == "UNIQUE_I64" { TensorType::INT64 } else { TensorType::INT32 };
            let y = m.add_tensor(TensorSpec::activation("y", ty, &[]));
            let i = m.add_tensor(TensorSpec::activation("idx", it, &[n as i32]));
            m.outputs.extend([y, i]);
            m.add_op(OpCode::Builtin(B::UNIQUE), &[x], &[y, i], Options::Unique { idx_out_type: it });
        }
        "SEGMENT_SUM" | "SEGMENT_SUM_INT32" => {
            // Sorted ids as a model input (the last sizes the output).
            let rank = r.u(1, 3);
            let s = r.shape(rank, 1, 4);
            let rows = s[0] as usize;
            // LiteRT's ids: from 0, each the previous or one more.
            let mut ids = vec![0i32];
            for _ in 1..rows {
                let last = ids[ids.len() - 1];
                ids.push(last + r.int(0, 1) as i32);
            }
            let int = op.ends_with("INT32");
            let x = m.add_tensor(TensorSpec::activation("data", if int { TensorType::INT32 } else { TensorType::FLOAT32 }, &s));
            m.inputs.push(x);
            let it = m.add_tensor(TensorSpec::activation("ids", TensorType::INT32, &[rows as i32]));
            m.inputs.push(it);
            if int {
                fixed.push((0, (0..n_of(&s)).map(|_| r.int(-50, 50) as i32).collect()));
            } else {
                ranges.push(fr);
            }
            fixed.push((1, ids));
            let o = out(&mut m, if int { TensorType::INT32 } else { TensorType::FLOAT32 }, &[]);
            single(B::SEGMENT_SUM, &[x, it], o, Options::None, &mut m);
        }
        "UNSORTED_SEGMENT_SUM"
        | "UNSORTED_SEGMENT_PROD"
        | "UNSORTED_SEGMENT_MAX"
        | "UNSORTED_SEGMENT_MIN"
        | "UNSORTED_SEGMENT_SUM_INT32"
        | "UNSORTED_SEGMENT_PROD_INT32"
        | "UNSORTED_SEGMENT_MAX_INT32"
        | "UNSORTED_SEGMENT_MIN_INT32" => {
            // Ids of a shape that is a prefix of the data's, in any order, some
            // segments empty, some ids -1; a constant segment count.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 4);
            let ir = r.u(1, rank);
            let segs = r.int(1, 5) as i32;
            // Negative ids name no segment (LiteRT drops those rows).
            let ids: Vec<i32> = (0..n_of(&s[..ir])).map(|_| r.int(-1, i64::from(segs) - 1) as i32).collect();
            let int = op.ends_with("INT32");
            let code = ["SUM", "PROD", "MAX", "MIN"]
                .iter()
                .zip([B::UNSORTED_SEGMENT_SUM, B::UNSORTED_SEGMENT_PROD, B::UNSORTED_SEGMENT_MAX, B::UNSORTED_SEGMENT_MIN])
                .find(|(k, _)| op.trim_end_matches("_INT32").ends_with(*k))
                .map_or(B::UNSORTED_SEGMENT_SUM, |(_, c)| c);
            let dt = if int { TensorType::INT32 } else { TensorType::FLOAT32 };
            let x = m.add_tensor(TensorSpec::activation("data", dt, &s));
            m.inputs.push(x);
            let it = m.add_tensor(TensorSpec::activation("ids", TensorType::INT32, &s[..ir]));
            m.inputs.push(it);
            if int {
                fixed.push((0, (0..n_of(&s)).map(|_| r.int(-9, 9) as i32).collect()));
            } else {
                ranges.push(fr);
            }
            fixed.push((1, ids));
            let ns = m.add_tensor(TensorSpec::const_i32("num_segments", &[], &[segs]));
            let o = out(&mut m, dt, &[]);
            single(code, &[x, it, ns], o, Options::None, &mut m);
        }
        "MATRIX_DIAG" | "MATRIX_SET_DIAG" => {
            let rank = r.u(1, 3);
            let s = r.shape(rank, 1, 5);
            if op == "MATRIX_DIAG" {
                let x = f32in(&mut m, "diagonal", &s);
                let o = out(&mut m, TensorType::FLOAT32, &[]);
                single(B::MATRIX_DIAG, &[x], o, Options::None, &mut m);
                ranges.push(fr);
            } else {
                let (rows, cols) = (r.u(1, 5) as i32, r.u(1, 5) as i32);
                let mut xs = s[..rank - 1].to_vec();
                let mut ds = xs.clone();
                xs.extend([rows, cols]);
                ds.push(rows.min(cols));
                let x = f32in(&mut m, "x", &xs);
                let d = f32in(&mut m, "diagonal", &ds);
                let o = out(&mut m, TensorType::FLOAT32, &xs);
                single(B::MATRIX_SET_DIAG, &[x, d], o, Options::None, &mut m);
                ranges.extend([fr, fr]);
            }
        }
        "BROADCAST_ARGS" | "BROADCAST_ARGS_I64" => {
            // Two shapes as model inputs, of ranks 0 to 4, that broadcast.
            let ty = if op.ends_with("I64") { TensorType::INT64 } else { TensorType::INT32 };
            let rk = r.u(1, 4);
            let full = r.shape(rk, 1, 5);
            let skip = r.u(0, rk);
            let other: Vec<i32> = full.iter().map(|&d| if r.coin() { 1 } else { d }).skip(skip).collect();
            let (sa, sb) = if r.coin() { (full.clone(), other) } else { (other, full.clone()) };
            for (k, v) in [sa, sb].into_iter().enumerate() {
                let t = m.add_tensor(TensorSpec::activation(if k == 0 { "a" } else { "b" }, ty, &[v.len() as i32]));
                m.inputs.push(t);
                fixed.push((k, v));
            }
            let ins = m.inputs.clone();
            let o = out(&mut m, ty, &[rk as i32]);
            single(B::BROADCAST_ARGS, &ins, o, Options::None, &mut m);
        }
        "BITCAST" | "BITCAST_NARROW" | "BITCAST_WIDEN" | "BITCAST_INT16" => {
            // float32 -> int32 (same size), float32 -> uint8 (a new last dimension
            // of 4), int8 [.., 4] -> int32 (the last dimension goes), int16 -> uint16.
            let rank = r.u(0, 3);
            let mut s = r.shape(rank, 1, 4);
            let (from, to) = match op {
                "BITCAST" => (TensorType::FLOAT32, TensorType::INT32),
                "BITCAST_NARROW" => (TensorType::FLOAT32, TensorType::UINT8),
                "BITCAST_WIDEN" => (TensorType::INT8, TensorType::INT32),
                _ => (TensorType::INT16, TensorType::UINT16),
            };
            if op == "BITCAST_WIDEN" {
                s.push(4);
            }
            let x = m.add_tensor(TensorSpec::activation("x", from, &s));
            m.inputs.push(x);
            if from == TensorType::FLOAT32 {
                ranges.push((-1e3, 1e3));
            }
            let o = out(&mut m, to, &[]);
            single(B::BITCAST, &[x], o, Options::None, &mut m);
        }
        _ if op.starts_with("RIGHT_SHIFT") || op.starts_with("BITWISE_XOR") => {
            // Both operands model inputs of one integer type, with broadcasting; the
            // shift amounts run from -3 (signed types) to the type's width + 3.
            let name = op.strip_prefix("RIGHT_SHIFT_").or_else(|| op.strip_prefix("BITWISE_XOR_")).unwrap_or("INT32");
            let (ty, bits, signed) = match name {
                "INT8" => (TensorType::INT8, 8, true),
                "UINT8" => (TensorType::UINT8, 8, false),
                "INT16" => (TensorType::INT16, 16, true),
                "UINT16" => (TensorType::UINT16, 16, false),
                "UINT32" => (TensorType::UINT32, 32, false),
                _ => (TensorType::INT32, 32, true),
            };
            let rank = r.u(1, 4);
            let full = r.shape(rank, 1, 5);
            let skip = r.u(0, rank - 1);
            let other: Vec<i32> = full.iter().map(|&d| if r.coin() { 1 } else { d }).skip(skip).collect();
            let (sa, sb) = if r.coin() { (full.clone(), other) } else { (other, full.clone()) };
            let a = m.add_tensor(TensorSpec::activation("x", ty, &sa));
            let b = m.add_tensor(TensorSpec::activation("y", ty, &sb));
            m.inputs.extend([a, b]);
            let shift = op.starts_with("RIGHT_SHIFT");
            if shift {
                fixed.push((1, (0..n_of(&sb)).map(|_| r.int(if signed { -3 } else { 0 }, bits + 3) as i32).collect()));
            }
            let o = out(&mut m, ty, &[]);
            single(if shift { B::RIGHT_SHIFT } else { B::BITWISE_XOR }, &[a, b], o, Options::None, &mut m);
        }
        "MIRROR_PAD" | "MIRROR_PAD_SYMMETRIC" => {
            // Paddings up to the most one reflection reaches: dim - 1 (REFLECT), dim (SYMMETRIC).
            let symmetric = op == "MIRROR_PAD_SYMMETRIC";
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 4);
            let x = f32in(&mut m, "x", &s);
            let pads: Vec<i32> = s.iter().flat_map(|&d| [0, 1].map(|_| r.int(0, i64::from(d) - i64::from(!symmetric)) as i32)).collect();
            let p = m.add_tensor(TensorSpec::const_i32("paddings", &[rank as i32, 2], &pads));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::MIRROR_PAD, &[x, p], o, Options::MirrorPad { symmetric }, &mut m);
            ranges.push(fr);
        }
        "SPACE_TO_BATCH_ND" | "BATCH_TO_SPACE_ND" => {
            // [b, h, w, c] with a 2-D block or [b, w, c] with a 1-D one; paddings that
            // make the padded sizes multiples of the block, crops up to a block.
            let sp = r.u(1, 2);
            let block: Vec<i32> = (0..sp).map(|_| r.int(1, 3) as i32).collect();
            let (b, c) = (r.int(1, 2) as i32, r.int(1, 3) as i32);
            let mut s = vec![b];
            let mut pc = vec![];
            for &k in &block {
                let d = r.int(1, 5) as i32;
                if op == "SPACE_TO_BATCH_ND" {
                    let before = r.int(0, i64::from(k)) as i32;
                    let after = (k - (d + before) % k) % k;
                    pc.extend([before, after]);
                    s.push(d);
                } else {
                    s.push(d);
                    let crop = r.int(0, i64::from(d * k - 1).min(2)) as i32;
                    let before = r.int(0, i64::from(crop)) as i32;
                    pc.extend([before, crop - before]);
                }
            }
            s.push(c);
            if op == "BATCH_TO_SPACE_ND" {
                s[0] *= block.iter().product::<i32>();
            }
            let x = f32in(&mut m, "x", &s);
            let bt = m.add_tensor(TensorSpec::const_i32("block_shape", &[sp as i32], &block));
            let pt = m.add_tensor(TensorSpec::const_i32(if op == "SPACE_TO_BATCH_ND" { "paddings" } else { "crops" }, &[sp as i32, 2], &pc));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(if op == "SPACE_TO_BATCH_ND" { B::SPACE_TO_BATCH_ND } else { B::BATCH_TO_SPACE_ND }, &[x, bt, pt], o, Options::None, &mut m);
            ranges.push(fr);
        }
        "L2_NORMALIZATION" | "LOCAL_RESPONSE_NORMALIZATION" => {
            // LiteRT takes 4-D input for LRN; L2 any rank (a row of zeros now and then
            // hits the epsilon).
            let s = if op == "LOCAL_RESPONSE_NORMALIZATION" {
                vec![1, r.u(1, 3) as i32, r.u(1, 3) as i32, r.u(1, 9) as i32]
            } else {
                let rk = r.u(1, 4);
                r.shape(rk, 1, 6)
            };
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &s);
            let opts = if op == "L2_NORMALIZATION" {
                Options::L2Norm { activation: Activation::NONE }
            } else {
                Options::LocalResponseNormalization { radius: r.int(0, 3) as i32, bias: r.f(0.5, 2.0), alpha: r.f(0.05, 1.0), beta: r.f(0.25, 1.0) }
            };
            let code = if op == "L2_NORMALIZATION" { B::L2_NORMALIZATION } else { B::LOCAL_RESPONSE_NORMALIZATION };
            single(code, &[x], o, opts, &mut m);
            ranges.push(fr);
        }
        "ATAN2" => {
            // y and x of one shape, every quadrant.
            let rk = r.u(1, 4);
            let s = r.shape(rk, 1, 5);
            let y = f32in(&mut m, "y", &s);
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &s);
            single(B::ATAN2, &[y, x], o, Options::None, &mut m);
            ranges.extend([(-3.0, 3.0), (-3.0, 3.0)]);
        }
        "RFFT2D" | "COMPLEX_ABS" | "REAL" | "IMAG" => {
            // RFFT2D of [.., rows, cols] with fft lengths (powers of two) that crop or
            // pad, its complex64 output taken apart by COMPLEX_ABS (RFFT2D's case
            // too), REAL or IMAG: complex values are not model outputs here.
            let rk = r.u(2, 3);
            let s = r.shape(rk, 1, 9);
            // Lengths of 2 or more: LiteRT's kernel (a real-input FFT of half length)
            // returns other values than the transform for a length of 1.
            let len = [r.pick(&[2, 4, 8]), r.pick(&[2, 4, 8, 16])];
            let x = f32in(&mut m, "x", &s);
            let l = m.add_tensor(TensorSpec::const_i32("fft_length", &[2], &len));
            let mut zs = s[..rk - 2].to_vec();
            zs.extend([len[0], len[1] / 2 + 1]);
            let z = m.add_tensor(TensorSpec::activation("spectrum", TensorType::COMPLEX64, &zs));
            single(B::RFFT2D, &[x, l], z, Options::None, &mut m);
            let code = match op {
                "REAL" => B::REAL,
                "IMAG" => B::IMAG,
                _ => B::COMPLEX_ABS,
            };
            let o = out(&mut m, TensorType::FLOAT32, &zs);
            single(code, &[z], o, Options::None, &mut m);
            ranges.push(fr);
        }
        op if op.starts_with("DETECTION_POSTPROCESS") => return gen_detection_postprocess(op, r),
        "NON_MAX_SUPPRESSION_V4" | "NON_MAX_SUPPRESSION_V4_DYNAMIC" | "NON_MAX_SUPPRESSION_V5" | "NON_MAX_SUPPRESSION_V5_SOFT" => {
            // Boxes around a few centres (so they overlap), corners sometimes given in
            // reverse order; scores as a model input; constant thresholds. DYNAMIC:
            // max_output_size is a model input, sizing the outputs at run time.
            let n = r.u(1, 12);
            let centres: Vec<(f32, f32)> = (0..r.u(1, 3)).map(|_| (r.f(0.0, 4.0), r.f(0.0, 4.0))).collect();
            let mut bv = vec![];
            for _ in 0..n {
                let (cy, cx) = r.pick(&centres);
                let (y, x, h, w) = (cy + r.f(-0.3, 0.3), cx + r.f(-0.3, 0.3), r.f(0.5, 1.5), r.f(0.5, 1.5));
                let (mut b0, mut b1) = ([y - h / 2.0, x - w / 2.0], [y + h / 2.0, x + w / 2.0]);
                if r.u(0, 4) == 0 {
                    std::mem::swap(&mut b0, &mut b1);
                }
                bv.extend([b0[0], b0[1], b1[0], b1[1]]);
            }
            let boxes = m.add_tensor(TensorSpec::const_f32("boxes", &[n as i32, 4], &bv));
            let scores = f32in(&mut m, "scores", &[n as i32]);
            ranges.push((0.0, 1.0));
            let max_out = r.int(1, n as i64 + 2) as i32;
            let mo = if op == "NON_MAX_SUPPRESSION_V4_DYNAMIC" {
                let t = m.add_tensor(TensorSpec::activation("max_output_size", TensorType::INT32, &[]));
                m.inputs.push(t);
                fixed.push((1, vec![max_out]));
                t
            } else {
                m.add_tensor(TensorSpec::const_i32("max_output_size", &[], &[max_out]))
            };
            let iou = m.add_tensor(TensorSpec::const_f32("iou_threshold", &[], &[r.f(0.2, 0.8)]));
            let thr = m.add_tensor(TensorSpec::const_f32("score_threshold", &[], &[r.pick(&[f32::MIN, 0.0, 0.3])]));
            let mut ins = vec![boxes, scores, mo, iou, thr];
            let idx = m.add_tensor(TensorSpec::activation("selected_indices", TensorType::INT32, &[]));
            let mut outs = vec![idx];
            if op.starts_with("NON_MAX_SUPPRESSION_V5") {
                let sigma = if op.ends_with("SOFT") { r.f(0.2, 1.0) } else { 0.0 };
                ins.push(m.add_tensor(TensorSpec::const_f32("soft_nms_sigma", &[], &[sigma])));
                outs.push(m.add_tensor(TensorSpec::activation("selected_scores", TensorType::FLOAT32, &[])));
            }
            outs.push(m.add_tensor(TensorSpec::activation("valid_outputs", TensorType::INT32, &[])));
            m.outputs.extend(&outs);
            let code = if op.starts_with("NON_MAX_SUPPRESSION_V5") { B::NON_MAX_SUPPRESSION_V5 } else { B::NON_MAX_SUPPRESSION_V4 };
            m.add_op(OpCode::Builtin(code), &ins, &outs, Options::None);
        }
        "TILE" => {
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 3);
            let mult: Vec<i32> = (0..rank).map(|_| r.int(1, 3) as i32).collect();
            let x = f32in(&mut m, "x", &s);
            let mt = m.add_tensor(TensorSpec::const_i32("multiples", &[rank as i32], &mult));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::TILE, &[x, mt], o, Options::None, &mut m);
            ranges.push(fr);
        }
        "DEPTH_TO_SPACE" | "SPACE_TO_DEPTH" => {
            let b = r.u(2, 3) as i32;
            let s = if op == "DEPTH_TO_SPACE" {
                [1, r.u(1, 4) as i32, r.u(1, 4) as i32, b * b * r.u(1, 3) as i32]
            } else {
                [1, b * r.u(1, 3) as i32, b * r.u(1, 3) as i32, r.u(1, 3) as i32]
            };
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let code = if op == "DEPTH_TO_SPACE" { B::DEPTH_TO_SPACE } else { B::SPACE_TO_DEPTH };
            single(code, &[x], o, Options::BlockSize(b), &mut m);
            ranges.push(fr);
        }
        "RESIZE_BILINEAR" | "RESIZE_NEAREST_NEIGHBOR" => {
            let s = [r.u(1, 2) as i32, r.u(1, 6) as i32, r.u(1, 6) as i32, r.u(1, 3) as i32];
            let x = f32in(&mut m, "x", &s);
            let size = m.add_tensor(TensorSpec::const_i32("size", &[2], &[r.u(1, 12) as i32, r.u(1, 12) as i32]));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            // LiteRT rejects align_corners together with half_pixel_centers.
            let (align_corners, half_pixel_centers) = r.pick(&[(false, false), (true, false), (false, true)]);
            if op == "RESIZE_BILINEAR" {
                single(B::RESIZE_BILINEAR, &[x, size], o, Options::Resize { align_corners, half_pixel_centers }, &mut m);
            } else {
                single(B::RESIZE_NEAREST_NEIGHBOR, &[x, size], o, Options::ResizeNearest { align_corners, half_pixel_centers }, &mut m);
            }
            ranges.push(fr);
        }
        "MEAN" | "SUM" | "REDUCE_MAX" | "REDUCE_MIN" | "REDUCE_PROD" => {
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 5);
            let mut axes: Vec<i32> = (0..rank as i32).filter(|_| r.coin()).collect();
            if axes.is_empty() {
                axes.push(0);
            }
            let x = f32in(&mut m, "x", &s);
            let a = m.add_tensor(TensorSpec::const_i32("axes", &[axes.len() as i32], &axes));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let code = B::ENUM_VALUES.iter().copied().find(|c| c.variant_name() == Some(op)).unwrap_or(B::MEAN);
            single(code, &[x, a], o, Options::Reducer { keep_dims: r.coin() }, &mut m);
            ranges.push(if op == "REDUCE_PROD" { (0.5, 1.5) } else { fr });
        }
        "ARG_MAX" | "ARG_MIN" => {
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 6);
            let x = f32in(&mut m, "x", &s);
            let a = m.add_tensor(TensorSpec::const_i32("axis", &[1], &[r.u(0, rank - 1) as i32]));
            let ot = if r.coin() { TensorType::INT32 } else { TensorType::INT64 };
            let o = out(&mut m, ot, &[]);
            single(if op == "ARG_MAX" { B::ARG_MAX } else { B::ARG_MIN }, &[x, a], o, Options::ArgMinMax { output_type: ot }, &mut m);
            ranges.push(fr);
        }
        "DEQUANTIZE_FP16" => {
            // fp16 weights dequantized once at prepare, then used by an ADD.
            let s = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 5)
            };
            let vals: Vec<u8> = r.floats(n_of(&s), -4.0, 4.0).iter().flat_map(|&v| f32_to_f16_bits(v).to_le_bytes()).collect();
            let wt = m.add_tensor(TensorSpec { data: Some(vals), ..TensorSpec::activation("w16", TensorType::FLOAT16, &s) });
            let wf = m.add_tensor(TensorSpec::activation("w", TensorType::FLOAT32, &s));
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(B::DEQUANTIZE, &[wt], wf, Options::None, &mut m);
            single(B::ADD, &[x, wf], o, Options::Binary { activation: Activation::NONE }, &mut m);
            ranges.push(fr);
        }
        "SELECT_V2" => {
            let s = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 4)
            };
            let a = f32in(&mut m, "a", &s);
            let b = f32in(&mut m, "b", &s);
            let c = m.add_tensor(TensorSpec::activation("c", TensorType::BOOL, &s));
            // LiteRT keeps the declared output shape when no broadcast is needed, so declare it.
            let o = out(&mut m, TensorType::FLOAT32, &s);
            single(B::LESS, &[a, b], c, Options::None, &mut m);
            single(B::SELECT_V2, &[c, a, b], o, Options::None, &mut m);
            ranges.extend([fr, fr]);
        }
        "FUSED_TANH_ADD" | "FUSED_SIGN_BIT_ADD" | "FUSED_TANH_CONV_2D" => {
            let activation = if op == "FUSED_SIGN_BIT_ADD" { Activation::SIGN_BIT } else { Activation::TANH };
            let s = [1, r.u(1, 5) as i32, r.u(1, 5) as i32, r.u(1, 4) as i32];
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            if op == "FUSED_TANH_CONV_2D" {
                let oc = r.u(1, 4) as i32;
                let wv = r.floats((oc * s[3]) as usize, -1.0, 1.0);
                let w = m.add_tensor(TensorSpec::const_f32("w", &[oc, 1, 1, s[3]], &wv));
                let b = m.add_tensor(TensorSpec::const_f32("b", &[oc], &vec![0.1; oc as usize]));
                single(B::CONV_2D, &[x, w, b], o, Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation }, &mut m);
                ranges.push(fr);
            } else {
                let y = f32in(&mut m, "y", &s);
                single(B::ADD, &[x, y], o, Options::Binary { activation }, &mut m);
                ranges.extend([fr, fr]);
            }
        }
        "PAD_CONV" => {
            // PAD (height and width, possibly uneven) then a VALID conv or depthwise,
            // which ferrite runs as one padded convolution.
            let (h, w, c) = (r.u(1, 9) as i32, r.u(1, 9) as i32, r.u(1, 12) as i32);
            let x = f32in(&mut m, "x", &[1, h, w, c]);
            ranges.push(fr);
            let p: Vec<i32> = (0..4).map(|_| r.u(0, 2) as i32).collect();
            let pads = m.add_tensor(TensorSpec::const_i32("pads", &[4, 2], &[0, 0, p[0], p[1], p[2], p[3], 0, 0]));
            let ps = [1, h + p[0] + p[1], w + p[2] + p[3], c];
            let padded = m.add_tensor(TensorSpec::activation("padded", TensorType::FLOAT32, &ps));
            m.add_op(OpCode::Builtin(B::PAD), &[x, pads], &[padded], Options::None);
            let k = r.u(1, 3).min(ps[1].min(ps[2]) as usize) as i32;
            let stride = r.u(1, 2) as i32;
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let bv = r.floats(c as usize, -0.5, 0.5);
            let b = m.add_tensor(TensorSpec::const_f32("b", &[c], &bv));
            if r.coin() {
                let wv = r.floats((k * k * c) as usize, -1.0, 1.0);
                let wt = m.add_tensor(TensorSpec::const_f32("w", &[1, k, k, c], &wv));
                let opts =
                    Options::DepthwiseConv2D { padding: Padding::VALID, stride: (stride, stride), dilation: (1, 1), depth_multiplier: 1, activation: act(r) };
                m.add_op(OpCode::Builtin(B::DEPTHWISE_CONV_2D), &[padded, wt, b], &[o], opts);
            } else {
                let wv = r.floats((k * k * c * c) as usize, -1.0, 1.0);
                let wt = m.add_tensor(TensorSpec::const_f32("w", &[c, k, k, c], &wv));
                let opts = Options::Conv2D { padding: Padding::VALID, stride: (stride, stride), dilation: (1, 1), activation: act(r) };
                m.add_op(OpCode::Builtin(B::CONV_2D), &[padded, wt, b], &[o], opts);
            }
        }
        "CONV_RESIDUAL_PRELU" => {
            // conv -> ADD(residual) -> PRELU, which ferrite folds into the conv's
            // kernel; variants where it must not: the residual computed after the
            // conv, the conv output read twice, a depthwise producer, a fused ADD
            // activation, a scalar alpha.
            let (h, w, c) = (r.u(2, 9) as i32, r.u(2, 9) as i32, r.u(1, 20) as i32);
            let s = [1, h, w, c];
            let x = f32in(&mut m, "x", &s);
            ranges.push(fr);
            let variant = r.u(0, 4);
            let conv = |m: &mut ModelSpec, r: &mut Rng, from: i32, name: &str| {
                let t = m.add_tensor(TensorSpec::activation(name, TensorType::FLOAT32, &s));
                let bv = r.floats(c as usize, -0.5, 0.5);
                let b = m.add_tensor(TensorSpec::const_f32(&format!("{name}/b"), &[c], &bv));
                if variant == 2 {
                    let wv = r.floats((9 * c) as usize, -0.5, 0.5);
                    let wt = m.add_tensor(TensorSpec::const_f32(&format!("{name}/w"), &[1, 3, 3, c], &wv));
                    let opts = Options::DepthwiseConv2D {
                        padding: Padding::SAME,
                        stride: (1, 1),
                        dilation: (1, 1),
                        depth_multiplier: 1,
                        activation: Activation::NONE,
                    };
                    m.add_op(OpCode::Builtin(B::DEPTHWISE_CONV_2D), &[from, wt, b], &[t], opts);
                } else {
                    let wv = r.floats((9 * c * c) as usize, -0.3, 0.3);
                    let wt = m.add_tensor(TensorSpec::const_f32(&format!("{name}/w"), &[c, 3, 3, c], &wv));
                    let opts = Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE };
                    m.add_op(OpCode::Builtin(B::CONV_2D), &[from, wt, b], &[t], opts);
                }
                t
            };
            let y = conv(&mut m, r, x, "conv1");
            // The residual: the input, or (variant 1) a second conv run after the first.
            let residual = if variant == 1 { conv(&mut m, r, x, "conv2") } else { x };
            let sum = m.add_tensor(TensorSpec::activation("sum", TensorType::FLOAT32, &s));
            let add_act = if variant == 4 { Activation::RELU6 } else { Activation::NONE };
            m.add_op(OpCode::Builtin(B::ADD), &[y, residual], &[sum], Options::Binary { activation: add_act });
            let alpha_v = if variant == 4 { vec![0.25] } else { r.floats(c as usize, 0.0, 0.5) };
            let alpha_shape: Vec<i32> = if variant == 4 { vec![1] } else { vec![1, 1, c] };
            let alpha = m.add_tensor(TensorSpec::const_f32("alpha", &alpha_shape, &alpha_v));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            m.add_op(OpCode::Builtin(B::PRELU), &[sum, alpha], &[o], Options::None);
            if variant == 3 {
                // The conv output also leaves the graph: it has two readers.
                m.outputs.push(y);
            }
        }
        "CONV_ACTIVATIONS" => {
            // conv or depthwise -> one or two activations, which ferrite folds into
            // the conv's kernel; the variant with the conv output also leaving the
            // graph must not fold.
            let (h, w, c) = (r.u(2, 9) as i32, r.u(2, 9) as i32, r.u(1, 40) as i32);
            let s = [1, h, w, c];
            let x = f32in(&mut m, "x", &s);
            ranges.push(fr);
            let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &s));
            let bv = r.floats(c as usize, -0.5, 0.5);
            let b = m.add_tensor(TensorSpec::const_f32("b", &[c], &bv));
            let k = if r.u(0, 1) == 0 { 3 } else { 5 };
            if r.u(0, 1) == 0 {
                let wv = r.floats((k * k * c) as usize, -0.8, 0.8);
                let wt = m.add_tensor(TensorSpec::const_f32("w", &[1, k, k, c], &wv));
                let opts =
                    Options::DepthwiseConv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), depth_multiplier: 1, activation: Activation::NONE };
                m.add_op(OpCode::Builtin(B::DEPTHWISE_CONV_2D), &[x, wt, b], &[y], opts);
            } else {
                let wv = r.floats((k * k * c * c) as usize, -0.3, 0.3);
                let wt = m.add_tensor(TensorSpec::const_f32("w", &[c, k, k, c], &wv));
                let opts = Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE };
                m.add_op(OpCode::Builtin(B::CONV_2D), &[x, wt, b], &[y], opts);
            }
            let acts = [B::RELU, B::RELU6, B::RELU_N1_TO_1, B::HARD_SWISH, B::LEAKY_RELU];
            let mut t = y;
            for i in 0..r.u(1, 2) {
                let a = acts[r.u(0, acts.len() - 1)];
                let o = m.add_tensor(TensorSpec::activation(&format!("act{i}"), TensorType::FLOAT32, &s));
                let opts = if a == B::LEAKY_RELU { Options::LeakyRelu { alpha: r.f(0.05, 0.5) } } else { Options::None };
                m.add_op(OpCode::Builtin(a), &[t], &[o], opts);
                t = o;
            }
            m.outputs = vec![t];
            if r.u(0, 3) == 0 {
                // The conv output also leaves the graph: it has two readers.
                m.outputs.push(y);
            }
        }
        "FLOOR_DIV" | "FLOOR_MOD" => {
            let s = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 5)
            };
            let a = f32in(&mut m, "a", &s);
            let b = f32in(&mut m, "b", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            single(if op == "FLOOR_DIV" { B::FLOOR_DIV } else { B::FLOOR_MOD }, &[a, b], o, Options::None, &mut m);
            ranges.extend([(-5.0, 5.0), (0.5, 3.0)]);
        }
        "ROUND" | "GELU" | "SIGN" | "RELU_0_TO_1" => {
            let s = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 6)
            };
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let code = B::ENUM_VALUES.iter().copied().find(|c| c.variant_name() == Some(op)).unwrap_or(B::ROUND);
            let opts = if op == "GELU" { Options::Gelu { approximate: r.coin() } } else { Options::None };
            single(code, &[x], o, opts, &mut m);
            ranges.push((-3.0, 3.0));
        }
        "CAST" => {
            let s = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 6)
            };
            let x = f32in(&mut m, "x", &s);
            let o = out(&mut m, TensorType::INT32, &s);
            single(B::CAST, &[x], o, Options::None, &mut m);
            ranges.push((-20.0, 20.0));
        }
        "SHAPE" | "ZEROS_LIKE" => {
            let s = {
                let rk = r.u(1, 4);
                r.shape(rk, 1, 5)
            };
            let x = f32in(&mut m, "x", &s);
            if op == "SHAPE" {
                let o = out(&mut m, TensorType::INT32, &[s.len() as i32]);
                single(B::SHAPE, &[x], o, Options::Shape { out_type: TensorType::INT32 }, &mut m);
            } else {
                let o = out(&mut m, TensorType::FLOAT32, &s);
                single(B::ZEROS_LIKE, &[x], o, Options::None, &mut m);
            }
            ranges.push(fr);
        }
        "FILL" | "BROADCAST_TO" => {
            let rk = r.u(1, 4);
            let dims = r.shape(rk, 1, 4);
            let d = m.add_tensor(TensorSpec::const_i32("dims", &[rk as i32], &dims));
            let o = out(&mut m, TensorType::FLOAT32, &dims);
            if op == "FILL" {
                let v = f32in(&mut m, "value", &[]);
                single(B::FILL, &[d, v], o, Options::None, &mut m);
            } else {
                let skip = r.u(0, rk - 1);
                let src: Vec<i32> = dims.iter().map(|&v| if r.coin() { 1 } else { v }).skip(skip).collect();
                let x = f32in(&mut m, "x", &src);
                single(B::BROADCAST_TO, &[x, d], o, Options::None, &mut m);
            }
            ranges.push(fr);
        }
        "SELECT" | "LOGICAL_AND" | "LOGICAL_OR" | "LOGICAL_NOT" => {
            // Bool operands come from comparisons of float inputs.
            let s = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 5)
            };
            let a = f32in(&mut m, "a", &s);
            let b = f32in(&mut m, "b", &s);
            let c1 = m.add_tensor(TensorSpec::activation("c1", TensorType::BOOL, &s));
            single(B::LESS, &[a, b], c1, Options::None, &mut m);
            ranges.extend([fr, fr]);
            if op == "SELECT" {
                let o = out(&mut m, TensorType::FLOAT32, &s);
                single(B::SELECT, &[c1, a, b], o, Options::None, &mut m);
            } else if op == "LOGICAL_NOT" {
                let o = out(&mut m, TensorType::BOOL, &s);
                single(B::LOGICAL_NOT, &[c1], o, Options::None, &mut m);
            } else {
                let zero = m.add_tensor(TensorSpec::const_f32("zero", &[], &[0.0]));
                let c2 = m.add_tensor(TensorSpec::activation("c2", TensorType::BOOL, &s));
                single(B::GREATER, &[a, zero], c2, Options::None, &mut m);
                let o = out(&mut m, TensorType::BOOL, &s);
                single(if op == "LOGICAL_AND" { B::LOGICAL_AND } else { B::LOGICAL_OR }, &[c1, c2], o, Options::None, &mut m);
            }
        }
        "STRIDED_SLICE_ELLIPSIS" => {
            // An ellipsis in the middle of the spec. (LiteRT's reference kernel crashes on
            // ellipsis combined with `offset`, so offsets are tested on their own below.)
            let rank = r.u(3, 5);
            let s = r.shape(rank, 1, 5);
            let x = f32in(&mut m, "x", &s);
            ranges.push(fr);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let begin = [r.int(0, i64::from(s[0]) - 1) as i32, 0, 0];
            let end = [s[0], 0, s[rank - 1]];
            let bt = m.add_tensor(TensorSpec::const_i32("begin", &[3], &begin));
            let et = m.add_tensor(TensorSpec::const_i32("end", &[3], &end));
            let st = m.add_tensor(TensorSpec::const_i32("strides", &[3], &[1, 1, 1]));
            single(
                B::STRIDED_SLICE,
                &[x, bt, et, st],
                o,
                Options::StridedSlice { begin_mask: 0, end_mask: 0, ellipsis_mask: 2, new_axis_mask: 0, shrink_axis_mask: 0, offset: false },
                &mut m,
            );
        }
        "STRIDED_SLICE_OFFSET" => {
            // `offset`: each end is a length added to its begin.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 6);
            let x = f32in(&mut m, "x", &s);
            ranges.push(fr);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let begin: Vec<i32> = s.iter().map(|&d| r.int(0, i64::from(d) - 1) as i32).collect();
            let len: Vec<i32> = s.iter().zip(&begin).map(|(&d, &b)| r.int(1, i64::from(d - b)) as i32).collect();
            let bt = m.add_tensor(TensorSpec::const_i32("begin", &[rank as i32], &begin));
            let et = m.add_tensor(TensorSpec::const_i32("end", &[rank as i32], &len));
            let st = m.add_tensor(TensorSpec::const_i32("strides", &[rank as i32], &vec![1; rank]));
            single(
                B::STRIDED_SLICE,
                &[x, bt, et, st],
                o,
                Options::StridedSlice { begin_mask: 0, end_mask: 0, ellipsis_mask: 0, new_axis_mask: 0, shrink_axis_mask: 0, offset: true },
                &mut m,
            );
        }
        "RESHAPE_DYNAMIC" => {
            // The target shape is a model input: the output shape is known only at run time.
            let (a, b) = (r.u(1, 4) as i32, r.u(1, 4) as i32);
            let x = f32in(&mut m, "x", &[a, b]);
            let st = m.add_tensor(TensorSpec::activation("shape", TensorType::INT32, &[2]));
            m.inputs.push(st);
            let o = out(&mut m, TensorType::FLOAT32, &[a, b]);
            single(B::RESHAPE, &[x, st], o, Options::None, &mut m);
            ranges.push(fr);
            fixed.push((1, if r.coin() { vec![b, a] } else { vec![a * b, 1] }));
        }
        "IF" => {
            // y = s > 0 ? x * 2 : x - 1, with the branch picked by the sign of input s.
            let shape = [2, r.u(1, 4) as i32];
            let sc = f32in(&mut m, "s", &[]);
            let x = f32in(&mut m, "x", &shape);
            let zero = m.add_tensor(TensorSpec::const_f32("zero", &[], &[0.0]));
            let c = m.add_tensor(TensorSpec::activation("c", TensorType::BOOL, &[]));
            let o = out(&mut m, TensorType::FLOAT32, &shape);
            single(B::GREATER, &[sc, zero], c, Options::None, &mut m);
            m.add_op(OpCode::Builtin(B::IF), &[c, x], &[o], Options::If { then_subgraph: 1, else_subgraph: 2 });
            for (k, code) in [(2.0f32, B::MUL), (1.0, B::SUB)] {
                let mut g = ModelSpec::default();
                let gx = g.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &shape));
                let gk = g.add_tensor(TensorSpec::const_f32("k", &[], &[k]));
                let gy = g.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &shape));
                g.add_op(OpCode::Builtin(code), &[gx, gk], &[gy], Options::Binary { activation: Activation::NONE });
                g.inputs = vec![gx];
                g.outputs = vec![gy];
                m.subgraphs.push(g);
            }
            ranges.extend([(-1.0, 1.0), fr]);
        }
        "WHILE" => {
            // (i, acc) = (0, x); while i < n: (i + 1, acc * 1.5)
            let n = r.u(1, 5) as f32;
            let shape = [r.u(1, 6) as i32];
            let i0 = m.add_tensor(TensorSpec::const_f32("i0", &[1], &[0.0]));
            let x = f32in(&mut m, "x", &shape);
            let iout = m.add_tensor(TensorSpec::activation("i", TensorType::FLOAT32, &[1]));
            let o = m.add_tensor(TensorSpec::activation("acc", TensorType::FLOAT32, &shape));
            m.outputs.push(o);
            m.add_op(OpCode::Builtin(B::WHILE), &[i0, x], &[iout, o], Options::While { cond_subgraph: 1, body_subgraph: 2 });
            let mut cond = ModelSpec::default();
            let (ci, ca) = (
                cond.add_tensor(TensorSpec::activation("i", TensorType::FLOAT32, &[1])),
                cond.add_tensor(TensorSpec::activation("acc", TensorType::FLOAT32, &shape)),
            );
            let cn = cond.add_tensor(TensorSpec::const_f32("n", &[1], &[n]));
            let cb = cond.add_tensor(TensorSpec::activation("more", TensorType::BOOL, &[1]));
            cond.add_op(OpCode::Builtin(B::LESS), &[ci, cn], &[cb], Options::None);
            cond.inputs = vec![ci, ca];
            cond.outputs = vec![cb];
            let mut body = ModelSpec::default();
            let (bi, ba) = (
                body.add_tensor(TensorSpec::activation("i", TensorType::FLOAT32, &[1])),
                body.add_tensor(TensorSpec::activation("acc", TensorType::FLOAT32, &shape)),
            );
            let (one, k) = (body.add_tensor(TensorSpec::const_f32("one", &[1], &[1.0])), body.add_tensor(TensorSpec::const_f32("k", &[], &[1.5])));
            let (bi2, ba2) = (
                body.add_tensor(TensorSpec::activation("i2", TensorType::FLOAT32, &[1])),
                body.add_tensor(TensorSpec::activation("acc2", TensorType::FLOAT32, &shape)),
            );
            body.add_op(OpCode::Builtin(B::ADD), &[bi, one], &[bi2], Options::Binary { activation: Activation::NONE });
            body.add_op(OpCode::Builtin(B::MUL), &[ba, k], &[ba2], Options::Binary { activation: Activation::NONE });
            body.inputs = vec![bi, ba];
            body.outputs = vec![bi2, ba2];
            m.subgraphs.push(cond);
            m.subgraphs.push(body);
            ranges.push(fr);
        }
        "VARIABLES" => {
            // CALL_ONCE initializes a variable to z; each run adds x to it and returns it.
            let shape = [r.u(1, 6) as i32];
            let zv = r.floats(shape[0] as usize, -1.0, 1.0);
            let x = f32in(&mut m, "x", &shape);
            let h = m.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
            let st = m.add_tensor(TensorSpec::activation("state", TensorType::FLOAT32, &shape));
            let o = out(&mut m, TensorType::FLOAT32, &shape);
            m.add_op(OpCode::Builtin(B::CALL_ONCE), &[], &[], Options::CallOnce { init_subgraph: 1 });
            m.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[h], Options::VarHandle { container: String::new(), shared_name: "state".into() });
            m.add_op(OpCode::Builtin(B::READ_VARIABLE), &[h], &[st], Options::None);
            m.add_op(OpCode::Builtin(B::ADD), &[st, x], &[o], Options::Binary { activation: Activation::NONE });
            m.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[h, o], &[], Options::None);
            let mut init = ModelSpec::default();
            let ih = init.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
            let iz = init.add_tensor(TensorSpec::const_f32("z", &shape, &zv));
            init.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[ih], Options::VarHandle { container: String::new(), shared_name: "state".into() });
            init.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[ih, iz], &[], Options::None);
            m.subgraphs.push(init);
            ranges.push(fr);
        }
        "CONV_2D_INT8"
        | "DEPTHWISE_CONV_2D_INT8"
        | "FULLY_CONNECTED_INT8"
        | "CONV_2D_UINT8"
        | "DEPTHWISE_CONV_2D_UINT8"
        | "FULLY_CONNECTED_UINT8"
        | "CONV_2D_INT16X8"
        | "DEPTHWISE_CONV_2D_INT16X8"
        | "FULLY_CONNECTED_INT16X8" => {
            // uint8 models (older converters) use asymmetric weights: a nonzero zero point.
            // int16x8: int16 activations, int8 weights, int64 bias, every zero point 0.
            let unsigned = op.ends_with("_UINT8");
            let wide = op.ends_with("_INT16X8");
            let kind = op.trim_end_matches("_INT8").trim_end_matches("_UINT8").trim_end_matches("_INT16X8");
            let (ty, off) = if unsigned { (TensorType::UINT8, 128) } else { (TensorType::INT8, 0) };
            let (s_in, zp_in) = if wide { (r.f(1e-4, 1e-3), 0) } else { (r.f(0.01, 0.1), r.int(-20, 20)) };
            let (s_out, zp_out) = if wide { (r.f(2e-4, 5e-3), 0) } else { (r.f(0.02, 0.5), r.int(-20, 20)) };
            let aty = if wide { TensorType::INT16 } else { ty };
            let q = |s: f32, z: i64| Some((vec![s], vec![z], 0));
            let ints = |r: &mut Rng, n: usize, lo: i64, hi: i64| -> Vec<u8> { (0..n).map(|_| r.int(lo, hi) as i8 as u8).collect() };
            let (xs, ws, oc, axis): (Vec<i32>, Vec<i32>, usize, i32) = match kind {
                "FULLY_CONNECTED" => {
                    let (b, i, o) = (r.u(1, 3) as i32, r.u(1, 40) as i32, r.u(1, 16));
                    (vec![b, i], vec![o as i32, i], o, 0)
                }
                _ => {
                    let (h, w, c, k) = (r.u(3, 8) as i32, r.u(3, 8) as i32, r.u(1, 6) as i32, r.u(1, 3) as i32);
                    if kind == "DEPTHWISE_CONV_2D" {
                        let mult = r.u(1, 2) as i32;
                        (vec![1, h, w, c], vec![1, k, k, c * mult], (c * mult) as usize, 3)
                    } else {
                        let o = r.u(1, 8);
                        (vec![1, h, w, c], vec![o as i32, k, k, c], o, 0)
                    }
                }
            };
            let x = m.add_tensor(TensorSpec { quant: q(s_in, zp_in + off), ..TensorSpec::activation("x", aty, &xs) });
            m.inputs.push(x);
            // Per-channel weight scales (per tensor for fully-connected, either for
            // int16x8 FC since LiteRT rounds the two differently), symmetric.
            let per_channel = if kind == "FULLY_CONNECTED" { wide && r.coin() } else { !unsigned };
            let wscales: Vec<f32> = if per_channel { (0..oc).map(|_| r.f(0.002, 0.02)).collect() } else { vec![r.f(0.002, 0.02)] };
            let n_w: usize = ws.iter().map(|&d| d as usize).product();
            let (wzp, wdata) = if unsigned { (r.int(100, 156), ints(r, n_w, 0, 255)) } else { (0, ints(r, n_w, -127, 127)) };
            let wt = m.add_tensor(TensorSpec {
                data: Some(wdata),
                quant: Some((wscales.clone(), vec![wzp; wscales.len()], axis)),
                ..TensorSpec::activation("w", ty, &ws)
            });
            // The bias scale must be input scale x weight scale, per channel.
            // One bias scale per weight scale: LiteRT reads a per-tensor scale from a
            // single-entry list only, and checks it against input x weight scale.
            let bscales: Vec<f32> = wscales.iter().map(|&w| s_in * w).collect();
            let boc = bscales.len();
            let (bdata, bty): (Vec<u8>, _) = if wide {
                ((0..oc).flat_map(|_| r.int(-200_000, 200_000).to_le_bytes()).collect(), TensorType::INT64)
            } else {
                ((0..oc).flat_map(|_| (r.int(-2000, 2000) as i32).to_le_bytes()).collect(), TensorType::INT32)
            };
            let bt = m.add_tensor(TensorSpec { data: Some(bdata), quant: Some((bscales, vec![0; boc], 0)), ..TensorSpec::activation("b", bty, &[oc as i32]) });
            let o = m.add_tensor(TensorSpec { quant: q(s_out, zp_out + off), ..TensorSpec::activation("y", aty, &[]) });
            m.outputs.push(o);
            let activation = act(r);
            let (padding, stride) = (same_or_valid(r), (r.u(1, 2) as i32, r.u(1, 2) as i32));
            let (code, opts) = match kind {
                "FULLY_CONNECTED" => (B::FULLY_CONNECTED, Options::FullyConnected { activation, keep_num_dims: false, asymmetric_quantize_inputs: false }),
                "DEPTHWISE_CONV_2D" => {
                    (B::DEPTHWISE_CONV_2D, Options::DepthwiseConv2D { padding, stride, dilation: (1, 1), depth_multiplier: (oc as i32) / xs[3], activation })
                }
                _ => {
                    // Dilation along either axis with stride 1 and SAME padding (so
                    // the dilated filter never outgrows the small maps).
                    let dilation = if stride == (1, 1) && padding == Padding::SAME { (r.u(1, 3) as i32, r.u(1, 3) as i32) } else { (1, 1) };
                    (B::CONV_2D, Options::Conv2D { padding, stride, dilation, activation })
                }
            };
            single(code, &[x, wt, bt], o, opts, &mut m);
        }
        "LOGISTIC_INT8" | "TANH_INT8" => {
            let shape = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 8)
            };
            let x = m.add_tensor(TensorSpec {
                quant: Some((vec![r.f(0.01, 0.2)], vec![r.int(-30, 30)], 0)),
                ..TensorSpec::activation("x", TensorType::INT8, &shape)
            });
            m.inputs.push(x);
            // LiteRT fixes these output scales for int8.
            let oq = if op == "LOGISTIC_INT8" { (vec![1.0 / 256.0], vec![-128], 0) } else { (vec![1.0 / 128.0], vec![0], 0) };
            let o = m.add_tensor(TensorSpec { quant: Some(oq), ..TensorSpec::activation("y", TensorType::INT8, &shape) });
            m.outputs.push(o);
            single(if op == "LOGISTIC_INT8" { B::LOGISTIC } else { B::TANH }, &[x], o, Options::None, &mut m);
        }
        "LOGISTIC_INT16" | "TANH_INT16" | "LOGISTIC_INT16_POT" | "TANH_INT16_POT" => {
            // Zero points 0 and an output of 2^-15, as LiteRT requires. A 2^-12 input
            // (2^-11 too for TANH) takes its fixed-point path, any other the table.
            let tanh = op.starts_with("TANH");
            let scale = if op.ends_with("_POT") {
                if tanh && r.u(0, 1) == 1 {
                    1.0 / 2048.0
                } else {
                    1.0 / 4096.0
                }
            } else {
                r.f(3e-5, 1.2e-3)
            };
            let shape = [r.u(1, 4) as i32, r.u(16, 96) as i32];
            let x = m.add_tensor(TensorSpec { quant: Some((vec![scale], vec![0], 0)), ..TensorSpec::activation("x", TensorType::INT16, &shape) });
            m.inputs.push(x);
            let o = m.add_tensor(TensorSpec { quant: Some((vec![1.0 / 32768.0], vec![0], 0)), ..TensorSpec::activation("y", TensorType::INT16, &shape) });
            m.outputs.push(o);
            single(if tanh { B::TANH } else { B::LOGISTIC }, &[x], o, Options::None, &mut m);
        }
        "QUANTIZE_FLOAT" | "QUANTIZE_REQUANT" => {
            let shape = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 8)
            };
            let x = if op == "QUANTIZE_FLOAT" {
                ranges.push((-3.0, 3.0));
                f32in(&mut m, "x", &shape)
            } else {
                let t = m.add_tensor(TensorSpec {
                    quant: Some((vec![r.f(0.01, 0.1)], vec![r.int(-50, 50)], 0)),
                    ..TensorSpec::activation("x", TensorType::INT8, &shape)
                });
                m.inputs.push(t);
                t
            };
            let (dtype, zp) = if r.coin() { (TensorType::INT8, r.int(-20, 20)) } else { (TensorType::UINT8, r.int(100, 150)) };
            let o = m.add_tensor(TensorSpec { quant: Some((vec![r.f(0.01, 0.1)], vec![zp], 0)), ..TensorSpec::activation("y", dtype, &shape) });
            m.outputs.push(o);
            single(B::QUANTIZE, &[x], o, Options::None, &mut m);
        }
        "ADD_INT16" | "SUB_INT16" | "MUL_INT16" | "AVERAGE_POOL_2D_INT16" | "MAX_POOL_2D_INT16" | "SOFTMAX_INT16" => {
            // int16 activations with zero points 0, as the converter's 16x8 mode makes them.
            let kind = op.trim_end_matches("_INT16");
            let qi = |r: &mut Rng| Some((vec![r.f(1e-4, 1e-3)], vec![0], 0));
            // At least 3x3 so that a VALID pooling window always fits.
            let shape = [1, r.u(3, 7) as i32, r.u(3, 7) as i32, r.u(1, 6) as i32];
            let xq = qi(r);
            let x = m.add_tensor(TensorSpec { quant: xq.clone(), ..TensorSpec::activation("x", TensorType::INT16, &shape) });
            m.inputs.push(x);
            match kind {
                "AVERAGE_POOL_2D" | "MAX_POOL_2D" => {
                    let oq = xq;
                    let o = m.add_tensor(TensorSpec { quant: oq, ..TensorSpec::activation("y", TensorType::INT16, &[]) });
                    m.outputs.push(o);
                    let opts = quantized_pool_options(r);
                    single(if kind == "MAX_POOL_2D" { B::MAX_POOL_2D } else { B::AVERAGE_POOL_2D }, &[x], o, opts, &mut m);
                }
                "SOFTMAX" => {
                    // LiteRT requires output scale 1/32768 and zero point 0 for int16 softmax.
                    let o =
                        m.add_tensor(TensorSpec { quant: Some((vec![1.0 / 32768.0], vec![0], 0)), ..TensorSpec::activation("y", TensorType::INT16, &shape) });
                    m.outputs.push(o);
                    single(B::SOFTMAX, &[x], o, Options::Softmax { beta: r.f(0.5, 2.0) }, &mut m);
                }
                _ => {
                    let other: Vec<i32> = shape.iter().map(|&d| if r.coin() { 1 } else { d }).collect();
                    let b = m.add_tensor(TensorSpec { quant: qi(r), ..TensorSpec::activation("b", TensorType::INT16, &other) });
                    m.inputs.push(b);
                    let o = m.add_tensor(TensorSpec { quant: qi(r), ..TensorSpec::activation("y", TensorType::INT16, &[]) });
                    m.outputs.push(o);
                    let code = match kind {
                        "ADD" => B::ADD,
                        "SUB" => B::SUB,
                        _ => B::MUL,
                    };
                    single(code, &[x, b], o, Options::Binary { activation: act(r) }, &mut m);
                }
            }
        }
        "ADD_INT8" | "SUB_INT8" | "MUL_INT8" => {
            let rank = r.u(1, 4);
            let full = r.shape(rank, 1, 5);
            let skip = r.u(0, rank - 1);
            let other: Vec<i32> = full.iter().map(|&d| if r.coin() { 1 } else { d }).skip(skip).collect();
            let (sa, sb) = if r.coin() { (full.clone(), other) } else { (other, full.clone()) };
            let qi = |r: &mut Rng| Some((vec![r.f(0.01, 0.2)], vec![r.int(-30, 30)], 0));
            let a = m.add_tensor(TensorSpec { quant: qi(r), ..TensorSpec::activation("a", TensorType::INT8, &sa) });
            let b = m.add_tensor(TensorSpec { quant: qi(r), ..TensorSpec::activation("b", TensorType::INT8, &sb) });
            m.inputs.extend([a, b]);
            let o = m.add_tensor(TensorSpec { quant: qi(r), ..TensorSpec::activation("y", TensorType::INT8, &[]) });
            m.outputs.push(o);
            let code = match op {
                "ADD_INT8" => B::ADD,
                "SUB_INT8" => B::SUB,
                _ => B::MUL,
            };
            single(code, &[a, b], o, Options::Binary { activation: act(r) }, &mut m);
        }
        "AVERAGE_POOL_2D_INT8" | "MAX_POOL_2D_INT8" => {
            let s = [r.u(1, 2) as i32, r.u(3, 9) as i32, r.u(3, 9) as i32, r.u(1, 5) as i32];
            let q = Some((vec![r.f(0.01, 0.2)], vec![r.int(-30, 30)], 0));
            let x = m.add_tensor(TensorSpec { quant: q.clone(), ..TensorSpec::activation("x", TensorType::INT8, &s) });
            m.inputs.push(x);
            let o = m.add_tensor(TensorSpec { quant: q, ..TensorSpec::activation("y", TensorType::INT8, &[]) });
            m.outputs.push(o);
            let opts = quantized_pool_options(r);
            single(if op == "MAX_POOL_2D_INT8" { B::MAX_POOL_2D } else { B::AVERAGE_POOL_2D }, &[x], o, opts, &mut m);
        }
        "SOFTMAX_INT8" => {
            let shape = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 10)
            };
            let x = m.add_tensor(TensorSpec {
                quant: Some((vec![r.f(0.01, 0.3)], vec![r.int(-30, 30)], 0)),
                ..TensorSpec::activation("x", TensorType::INT8, &shape)
            });
            m.inputs.push(x);
            // LiteRT requires this output scale for int8 softmax.
            let o = m.add_tensor(TensorSpec { quant: Some((vec![1.0 / 256.0], vec![-128], 0)), ..TensorSpec::activation("y", TensorType::INT8, &shape) });
            m.outputs.push(o);
            single(B::SOFTMAX, &[x], o, Options::Softmax { beta: r.f(0.5, 2.0) }, &mut m);
        }
        "RELU_INT8" | "RELU6_INT8" | "RELU_N1_TO_1_INT8" | "LEAKY_RELU_INT8" => {
            let shape = {
                let rk = r.u(1, 3);
                r.shape(rk, 1, 10)
            };
            let x = m.add_tensor(TensorSpec {
                quant: Some((vec![r.f(0.01, 0.1)], vec![r.int(-30, 30)], 0)),
                ..TensorSpec::activation("x", TensorType::INT8, &shape)
            });
            m.inputs.push(x);
            let o = m.add_tensor(TensorSpec {
                quant: Some((vec![r.f(0.01, 0.1)], vec![r.int(-30, 30)], 0)),
                ..TensorSpec::activation("y", TensorType::INT8, &shape)
            });
            m.outputs.push(o);
            let (code, opts) = match op {
                "RELU_INT8" => (B::RELU, Options::None),
                "RELU6_INT8" => (B::RELU6, Options::None),
                "RELU_N1_TO_1_INT8" => (B::RELU_N1_TO_1, Options::None),
                _ => (B::LEAKY_RELU, Options::LeakyRelu { alpha: r.f(0.01, 0.5) }),
            };
            single(code, &[x], o, opts, &mut m);
        }
        "BATCH_MATMUL_HYBRID" | "BATCH_MATMUL_HYBRID_ASYM" => {
            // Float left operand, constant int8 right operand (per-tensor or per-column
            // scales); the _ASYM form quantizes each left row with its own zero point.
            let (bt, mm, k, n) = (r.u(1, 3) as i32, r.u(1, 6) as i32, r.u(2, 24) as i32, r.u(1, 8));
            let (adj_x, adj_y) = (r.coin(), r.coin());
            let a = f32in(&mut m, "a", &if adj_x { [bt, k, mm] } else { [bt, mm, k] });
            ranges.push(fr);
            let per_column = !adj_y && r.coin();
            let scales: Vec<f32> = (0..if per_column { n } else { 1 }).map(|_| r.f(0.002, 0.02)).collect();
            let zps = vec![0; scales.len()];
            let ws = if adj_y { [n as i32, k] } else { [k, n as i32] };
            let wdata: Vec<u8> = (0..k as usize * n).map(|_| r.int(-127, 127) as i8 as u8).collect();
            let wt = m.add_tensor(TensorSpec { data: Some(wdata), quant: Some((scales, zps, 1)), ..TensorSpec::activation("w", TensorType::INT8, &ws) });
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let asymmetric_quantize_inputs = op.ends_with("_ASYM");
            single(B::BATCH_MATMUL, &[a, wt], o, Options::BatchMatMul { adj_x, adj_y, asymmetric_quantize_inputs }, &mut m);
        }
        "FULLY_CONNECTED_HYBRID" | "FULLY_CONNECTED_HYBRID_ASYM" | "CONV_2D_HYBRID" | "DEPTHWISE_CONV_2D_HYBRID" => {
            // Float activations, int8 weights with per-channel scales, float bias.
            let asymmetric_quantize_inputs = op.ends_with("_ASYM");
            let kind = op.trim_end_matches("_ASYM").trim_end_matches("_HYBRID");
            let (xs, ws, oc, axis): (Vec<i32>, Vec<i32>, usize, i32) = match kind {
                "FULLY_CONNECTED" => {
                    let (b, i, o) = (r.u(1, 3) as i32, r.u(2, 40) as i32, r.u(1, 16));
                    (vec![b, i], vec![o as i32, i], o, 0)
                }
                _ => {
                    let (h, w, c, k) = (r.u(3, 8) as i32, r.u(3, 8) as i32, r.u(1, 6) as i32, r.u(1, 3) as i32);
                    if kind == "DEPTHWISE_CONV_2D" {
                        (vec![1, h, w, c], vec![1, k, k, c], c as usize, 3)
                    } else {
                        let o = r.u(1, 8);
                        (vec![1, h, w, c], vec![o as i32, k, k, c], o, 0)
                    }
                }
            };
            let x = f32in(&mut m, "x", &xs);
            ranges.push(fr);
            let wscales: Vec<f32> = (0..oc).map(|_| r.f(0.002, 0.02)).collect();
            let wdata: Vec<u8> = (0..ws.iter().map(|&d| d as usize).product::<usize>()).map(|_| r.int(-127, 127) as i8 as u8).collect();
            let wt =
                m.add_tensor(TensorSpec { data: Some(wdata), quant: Some((wscales, vec![0; oc], axis)), ..TensorSpec::activation("w", TensorType::INT8, &ws) });
            let bv = r.floats(oc, -1.0, 1.0);
            let bt = m.add_tensor(TensorSpec::const_f32("b", &[oc as i32], &bv));
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let activation = act(r);
            let (code, opts) = match kind {
                "FULLY_CONNECTED" => (B::FULLY_CONNECTED, Options::FullyConnected { activation, keep_num_dims: false, asymmetric_quantize_inputs }),
                "DEPTHWISE_CONV_2D" => (
                    B::DEPTHWISE_CONV_2D,
                    Options::DepthwiseConv2D { padding: same_or_valid(r), stride: (1, 1), dilation: (1, 1), depth_multiplier: 1, activation },
                ),
                _ => (B::CONV_2D, Options::Conv2D { padding: same_or_valid(r), stride: (r.u(1, 2) as i32, r.u(1, 2) as i32), dilation: (1, 1), activation }),
            };
            single(code, &[x, wt, bt], o, opts, &mut m);
        }
        "ABS_INT8" | "ABS_INT16" => {
            // The output's scale equal to the input's half the time (LiteRT then adds
            // the zero point only), else its own; |x| is never negative, so an int8
            // output's zero point sits near the bottom of the range.
            let wide = op == "ABS_INT16";
            let ty = if wide { TensorType::INT16 } else { TensorType::INT8 };
            let shape = {
                let rk = r.u(1, 4);
                r.shape(rk, 1, 7)
            };
            let (s_in, zp) = if wide { (r.f(1e-4, 1e-3), 0) } else { (r.f(0.01, 0.2), r.int(-40, 40)) };
            let x = m.add_tensor(TensorSpec { quant: Some((vec![s_in], vec![zp], 0)), ..TensorSpec::activation("x", ty, &shape) });
            m.inputs.push(x);
            let s_out = if r.coin() { s_in } else { s_in * r.f(0.3, 2.0) };
            let out_zp = if wide { 0 } else { r.int(-128, -100) };
            let o = m.add_tensor(TensorSpec { quant: Some((vec![s_out], vec![out_zp], 0)), ..TensorSpec::activation("y", ty, &shape) });
            m.outputs.push(o);
            single(B::ABS, &[x], o, Options::None, &mut m);
        }
        "RSQRT_INT8" => {
            // Input zero point at the bottom of the range: every int8 value is a
            // non-negative real (LiteRT refuses negative ones), 0 included.
            let shape = {
                let rk = r.u(1, 4);
                r.shape(rk, 1, 7)
            };
            let s_in = r.f(0.002, 0.1);
            let x = m.add_tensor(TensorSpec { quant: Some((vec![s_in], vec![-128], 0)), ..TensorSpec::activation("x", TensorType::INT8, &shape) });
            m.inputs.push(x);
            // Outputs from 1 / sqrt(255 s) up to a range that saturates the smallest inputs.
            let top = 1.0 / (s_in * r.f(1.0, 40.0)).sqrt();
            let o = m.add_tensor(TensorSpec {
                quant: Some((vec![top / 255.0], vec![r.int(-128, -110)], 0)),
                ..TensorSpec::activation("y", TensorType::INT8, &shape)
            });
            m.outputs.push(o);
            single(B::RSQRT, &[x], o, Options::None, &mut m);
        }
        "GELU_INT8" | "GELU_UINT8" => {
            // GELU's own output range, roughly [-0.17, max input].
            let ty = if op == "GELU_INT8" { TensorType::INT8 } else { TensorType::UINT8 };
            let mut case = quantized_variant(gen("GELU", r), ty, r);
            let o = case.spec.outputs[0] as usize;
            let zp = if ty == TensorType::INT8 { r.int(-128, -100) } else { r.int(0, 28) };
            case.spec.tensors[o].quant = Some((vec![r.f(0.005, 0.1)], vec![zp], 0));
            return case;
        }
        "SQUARED_DIFFERENCE_INT8" => {
            // Broadcast shapes as ADD_INT8's; an output scale for squares of the
            // inputs' differences, zero point near the bottom (never negative).
            let rank = r.u(1, 4);
            let full = r.shape(rank, 1, 5);
            let skip = r.u(0, rank - 1);
            let other: Vec<i32> = full.iter().map(|&d| if r.coin() { 1 } else { d }).skip(skip).collect();
            let (sa, sb) = if r.coin() { (full.clone(), other) } else { (other, full.clone()) };
            let (s1, s2) = (r.f(0.01, 0.2), r.f(0.01, 0.2));
            let a = m.add_tensor(TensorSpec { quant: Some((vec![s1], vec![r.int(-30, 30)], 0)), ..TensorSpec::activation("a", TensorType::INT8, &sa) });
            let b = m.add_tensor(TensorSpec { quant: Some((vec![s2], vec![r.int(-30, 30)], 0)), ..TensorSpec::activation("b", TensorType::INT8, &sb) });
            m.inputs.extend([a, b]);
            let s_out = s1.max(s2) * s1.max(s2) * r.f(10.0, 300.0);
            let o = m.add_tensor(TensorSpec { quant: Some((vec![s_out], vec![r.int(-128, -100)], 0)), ..TensorSpec::activation("y", TensorType::INT8, &[]) });
            m.outputs.push(o);
            single(B::SQUARED_DIFFERENCE, &[a, b], o, Options::None, &mut m);
        }
        "HARD_SWISH_INT8" | "HARD_SWISH_UINT8" => {
            // Converters give HARD_SWISH its own output range: roughly [-0.375, max].
            let ty = if op == "HARD_SWISH_INT8" { TensorType::INT8 } else { TensorType::UINT8 };
            let mut case = quantized_variant(gen("HARD_SWISH", r), ty, r);
            let o = case.spec.outputs[0] as usize;
            let zp = if ty == TensorType::INT8 { r.int(-128, -90) } else { r.int(0, 30) };
            case.spec.tensors[o].quant = Some((vec![r.f(0.005, 0.1)], vec![zp], 0));
            return case;
        }
        "PRELU_INT16" => {
            // int16x8: the int8 case's input and output widened to int16 with zero
            // points 0, alpha kept int8 (LiteRT reads an int16 PRELU's alpha as int8).
            let mut case = gen("PRELU_INT8", r);
            for t in case.spec.tensors.iter_mut().filter(|t| t.dtype == TensorType::INT8 && t.data.is_none()) {
                t.dtype = TensorType::INT16;
                t.quant = t.quant.take().map(|(s, z, a)| (s.iter().map(|&v| v / 64.0).collect(), vec![0; z.len()], a));
            }
            return case;
        }
        "PRELU_INT8" | "PRELU_UINT8" => {
            // Quantized alpha (its own scale and zero point), broadcast over the channels.
            let (ty, off) = if op == "PRELU_INT8" { (TensorType::INT8, 0) } else { (TensorType::UINT8, 128) };
            let s = [1, r.u(1, 5) as i32, r.u(1, 5) as i32, r.u(1, 6) as i32];
            let x = m.add_tensor(TensorSpec { quant: Some((vec![r.f(0.01, 0.1)], vec![r.int(-30, 30) + off], 0)), ..TensorSpec::activation("x", ty, &s) });
            m.inputs.push(x);
            let alpha: Vec<u8> = (0..s[3]).map(|_| (r.int(-128, 127) + off) as u8).collect();
            let a = m.add_tensor(TensorSpec {
                data: Some(alpha),
                quant: Some((vec![r.f(0.001, 0.01)], vec![r.int(-100, 0) + off], 0)),
                ..TensorSpec::activation("alpha", ty, &[1, 1, s[3]])
            });
            let o = m.add_tensor(TensorSpec { quant: Some((vec![r.f(0.01, 0.1)], vec![r.int(-30, 30) + off], 0)), ..TensorSpec::activation("y", ty, &[]) });
            m.outputs.push(o);
            single(B::PRELU, &[x, a], o, Options::None, &mut m);
        }
        "TRANSPOSE_CONV_INT8" | "TRANSPOSE_CONV_INT16X8" => {
            // int16x8: int16 activations with zero points 0, int64 bias.
            let wide = op == "TRANSPOSE_CONV_INT16X8";
            let aty = if wide { TensorType::INT16 } else { TensorType::INT8 };
            let (h, w, c, oc) = (r.u(2, 6), r.u(2, 6), r.u(1, 4), r.u(1, 4));
            let (k, s) = (r.u(1, 3), r.u(1, 2));
            let padding = same_or_valid(r);
            let o_sz = |i: usize| if padding == Padding::SAME { i * s } else { (i - 1) * s + k };
            let os = m.add_tensor(TensorSpec::const_i32("output_shape", &[4], &[1, o_sz(h) as i32, o_sz(w) as i32, oc as i32]));
            let s_in = if wide { r.f(1e-4, 1e-3) } else { r.f(0.01, 0.1) };
            let wscales: Vec<f32> = (0..oc).map(|_| r.f(0.002, 0.02)).collect();
            let wdata: Vec<u8> = (0..oc * k * k * c).map(|_| r.int(-127, 127) as i8 as u8).collect();
            let wt = m.add_tensor(TensorSpec {
                data: Some(wdata),
                quant: Some((wscales.clone(), vec![0; oc], 0)),
                ..TensorSpec::activation("w", TensorType::INT8, &[oc as i32, k as i32, k as i32, c as i32])
            });
            let x_zp = if wide { 0 } else { r.int(-20, 20) };
            let x =
                m.add_tensor(TensorSpec { quant: Some((vec![s_in], vec![x_zp], 0)), ..TensorSpec::activation("x", aty, &[1, h as i32, w as i32, c as i32]) });
            m.inputs.push(x);
            let (bdata, bty): (Vec<u8>, _) = if wide {
                ((0..oc).flat_map(|_| r.int(-200_000, 200_000).to_le_bytes()).collect(), TensorType::INT64)
            } else {
                ((0..oc).flat_map(|_| (r.int(-2000, 2000) as i32).to_le_bytes()).collect(), TensorType::INT32)
            };
            let bt = m.add_tensor(TensorSpec {
                data: Some(bdata),
                quant: Some((wscales.iter().map(|&w| s_in * w).collect(), vec![0; oc], 0)),
                ..TensorSpec::activation("b", bty, &[oc as i32])
            });
            let (s_out, o_zp) = if wide { (r.f(2e-4, 5e-3), 0) } else { (r.f(0.02, 0.5), r.int(-20, 20)) };
            let o = m.add_tensor(TensorSpec { quant: Some((vec![s_out], vec![o_zp], 0)), ..TensorSpec::activation("y", aty, &[]) });
            m.outputs.push(o);
            single(B::TRANSPOSE_CONV, &[os, wt, x, bt], o, Options::TransposeConv { padding, stride: (s as i32, s as i32), activation: act(r) }, &mut m);
        }
        "CONCATENATION_UINT8_RESCALED" | "CONCATENATION_INT16_SCALES" => {
            // Each input quantized its own way: LiteRT requantizes uint8 inputs onto
            // the output and copies int16 ones whatever their scales.
            let wide = op == "CONCATENATION_INT16_SCALES";
            let mut case = quantized_variant(gen("CONCATENATION", r), if wide { TensorType::INT16 } else { TensorType::UINT8 }, r);
            for i in case.spec.inputs.clone() {
                let zp = if wide { 0 } else { r.int(90, 170) };
                case.spec.tensors[i as usize].quant = Some((vec![r.f(0.005, 0.1)], vec![zp], 0));
            }
            return case;
        }
        "ADD_INT16_POT" | "SUB_INT16_POT" | "ADD_INT16_POT_GENERAL" => {
            // Power-of-two scales, one input at the output's scale and the other finer:
            // LiteRT's shift-only path, unless the op's pot_scale_int16 is false. The
            // shapes match: LiteRT aborts on a broadcasting ADD in this mode.
            let rank = r.u(1, 4);
            let shape = r.shape(rank, 1, 5);
            let out_exp = r.int(-12, -8) as i32;
            let fine = out_exp - r.int(1, 3) as i32;
            let which = r.u(0, 1);
            let q = |e: i32| Some((vec![2f32.powi(e)], vec![0], 0));
            let mut ins = [0; 2];
            for (k, slot) in ins.iter_mut().enumerate() {
                let e = if k == which { fine } else { out_exp };
                *slot = m.add_tensor(TensorSpec { quant: q(e), ..TensorSpec::activation(["a", "b"][k], TensorType::INT16, &shape) });
                m.inputs.push(*slot);
            }
            let o = m.add_tensor(TensorSpec { quant: q(out_exp), ..TensorSpec::activation("out", TensorType::INT16, &shape) });
            m.outputs.push(o);
            let code = if op.starts_with("ADD") { B::ADD } else { B::SUB };
            single(code, &ins, o, Options::AddSub { activation: act(r), pot_scale_int16: op != "ADD_INT16_POT_GENERAL" }, &mut m);
        }
        "TRANSPOSE_CONV_UINT8" => {
            // The int8 case shifted to uint8, with one weight scale and a weight zero
            // point away from 128 as older uint8 models have.
            let mut case = to_uint8(gen("TRANSPOSE_CONV_INT8", r));
            let find = |spec: &ModelSpec, name: &str| spec.tensors.iter().position(|t| t.name == name).expect("tensor");
            let (w, b, x) = (find(&case.spec, "w"), find(&case.spec, "b"), find(&case.spec, "x"));
            let (w_scale, w_zp) = (r.f(0.002, 0.02), r.int(100, 156));
            case.spec.tensors[w].quant = Some((vec![w_scale], vec![w_zp], 0));
            let s_in = case.spec.tensors[x].quant.as_ref().map_or(0.05, |q| q.0[0]);
            case.spec.tensors[b].quant = Some((vec![s_in * w_scale], vec![0], 0));
            let y = find(&case.spec, "y");
            case.spec.tensors[y].quant = Some((vec![r.f(0.01, 0.1)], vec![r.int(108, 148)], 0));
            return case;
        }
        "BATCH_MATMUL_INT8" | "BATCH_MATMUL_INT16" => {
            // Both operands share a scale; the output's is wide enough for the sums.
            let wide = op == "BATCH_MATMUL_INT16";
            let mut case = quantized_variant(gen("BATCH_MATMUL", r), if wide { TensorType::INT16 } else { TensorType::INT8 }, r);
            let s_in = case.spec.tensors[case.spec.inputs[0] as usize].quant.as_ref().map_or(0.05, |q| q.0[0]);
            let o = case.spec.outputs[0] as usize;
            let (range, zp) = if wide { (r.f(20.0, 400.0) * 256.0, 0) } else { (r.f(20.0, 400.0), r.int(-30, 30)) };
            case.spec.tensors[o].quant = Some((vec![s_in * s_in * range], vec![zp], 0));
            return case;
        }
        "ADD_UINT8"
        | "SUB_UINT8"
        | "MUL_UINT8"
        | "AVERAGE_POOL_2D_UINT8"
        | "MAX_POOL_2D_UINT8"
        | "SOFTMAX_UINT8"
        | "LOGISTIC_UINT8"
        | "TANH_UINT8"
        | "RELU_UINT8"
        | "RELU6_UINT8"
        | "LEAKY_RELU_UINT8" => {
            let base = op.trim_end_matches("_UINT8");
            return to_uint8(gen(&format!("{base}_INT8"), r));
        }
        "MEAN_RESCALED_INT8" => {
            // Output quantized differently from the input: LiteRT's rescaling path.
            let mut case = quantized_variant(gen("MEAN", r), TensorType::INT8, r);
            let o = case.spec.outputs[0] as usize;
            case.spec.tensors[o].quant = Some((vec![r.f(0.005, 0.1)], vec![r.int(-40, 40)], 0));
            return case;
        }
        "SUM_INT32" | "REDUCE_MAX_INT32" | "REDUCE_MIN_INT32" | "REDUCE_PROD_INT32" | "SUM_INT64" | "REDUCE_MAX_INT64" => {
            // Plain integers over random axes; products of small values (up to 4 of
            // magnitude 3 per output at most here), sums over the type's whole range
            // now and then so wrapping is exercised.
            let rank = r.u(1, 4);
            let s = r.shape(rank, 1, 5);
            let mut axes: Vec<i32> = (0..rank as i32).filter(|_| r.coin()).collect();
            if axes.is_empty() {
                axes.push(if r.coin() { 0 } else { -1 });
            }
            let wide = op.ends_with("INT64");
            let ty = if wide { TensorType::INT64 } else { TensorType::INT32 };
            let x = m.add_tensor(TensorSpec::activation("x", ty, &s));
            m.inputs.push(x);
            let big = !op.starts_with("REDUCE_PROD") && r.coin();
            let vals: Vec<i32> = (0..n_of(&s))
                .map(|_| {
                    if op.starts_with("REDUCE_PROD") {
                        r.int(-3, 3) as i32
                    } else if big {
                        r.int(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
                    } else {
                        r.int(-1000, 1000) as i32
                    }
                })
                .collect();
            fixed.push((0, vals));
            let a = m.add_tensor(TensorSpec::const_i32("axes", &[axes.len() as i32], &axes));
            let o = out(&mut m, ty, &[]);
            let code = match op.trim_end_matches("_INT32").trim_end_matches("_INT64") {
                "SUM" => B::SUM,
                "REDUCE_MAX" => B::REDUCE_MAX,
                "REDUCE_MIN" => B::REDUCE_MIN,
                _ => B::REDUCE_PROD,
            };
            single(code, &[x, a], o, Options::Reducer { keep_dims: r.coin() }, &mut m);
        }
        "ABS_INT32" | "NEG_INT32" | "SIGN_INT32" => {
            // Plain int32 values around zero (zero itself frequent), fixed by the case.
            let s = {
                let rk = r.u(1, 4);
                r.shape(rk, 1, 6)
            };
            let x = m.add_tensor(TensorSpec::activation("x", TensorType::INT32, &s));
            m.inputs.push(x);
            fixed.push((0, (0..n_of(&s)).map(|_| if r.u(0, 4) == 0 { 0 } else { r.int(-100_000, 100_000) as i32 }).collect()));
            let o = out(&mut m, TensorType::INT32, &s);
            let code = match op {
                "ABS_INT32" => B::ABS,
                "NEG_INT32" => B::NEG,
                _ => B::SIGN,
            };
            single(code, &[x], o, Options::None, &mut m);
        }
        _ if QUANTIZED_COMPARISONS.iter().any(|c| op.strip_prefix(c).is_some_and(|t| ["_INT8", "_UINT8", "_INT16"].contains(&t))) => {
            // Each input its own scale (below 1, as LiteRT's rescale needs) and zero
            // point, or both one quantization (the converter's usual case, where the
            // rescale's rounding can still merge neighbouring values); small scales
            // make such ties frequent. int16 (zero points 0) compares as stored.
            let (base, ty) = if let Some(b) = op.strip_suffix("_UINT8") {
                (b, TensorType::UINT8)
            } else if let Some(b) = op.strip_suffix("_INT16") {
                (b, TensorType::INT16)
            } else {
                (op.trim_end_matches("_INT8"), TensorType::INT8)
            };
            let mut case = quantized_variant(gen(base, r), ty, r);
            let shared = r.coin();
            let q = |r: &mut Rng| {
                let s = if r.coin() { r.f(0.0005, 0.01) } else { r.f(0.01, 0.9) };
                let zp = match ty {
                    TensorType::INT8 => r.int(-60, 60),
                    TensorType::UINT8 => r.int(60, 190),
                    _ => 0,
                };
                (vec![s], vec![zp], 0)
            };
            let first = q(r);
            for (k, &t) in case.spec.inputs.clone().iter().enumerate() {
                let qk = if shared || k == 0 { first.clone() } else { q(r) };
                case.spec.tensors[t as usize].quant = Some(qk);
            }
            return case;
        }
        _ => {
            if let Some((base, ty)) = [("_INT8", TensorType::INT8), ("_UINT8", TensorType::UINT8), ("_INT16", TensorType::INT16)]
                .iter()
                .find_map(|(suffix, ty)| op.strip_suffix(suffix).map(|b| (b, *ty)))
            {
                return quantized_variant(gen(base, r), ty, r);
            }
            panic!("no generator for {op}")
        }
    }
    Case { spec: m, ranges, fixed }
}

/// Comparisons with quantized (int8, uint8, int16) cases: `LESS_INT8`, ...
const QUANTIZED_COMPARISONS: &[&str] = &["LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"];

/// The recurrent cases: every variant of each op (float and hybrid), each run as a
/// stream of steps so the state in its variable tensors carries from run to run.
const RECURRENT: &[&str] = &[
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_HYBRID",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_INT8",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_INT16",
    "LSTM",
    "LSTM_HYBRID",
    "LSTM_INT8",
    "LSTM_INT16",
    "LSTM_UINT8",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_UINT8",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_LSTM_HYBRID",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "UNIDIRECTIONAL_SEQUENCE_RNN_HYBRID",
    "RNN",
    "RNN_HYBRID",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "BIDIRECTIONAL_SEQUENCE_RNN_HYBRID",
    "SVDF",
    "SVDF_HYBRID",
    "SVDF_INT8",
];

/// Invocations of one case in one session: recurrent ops carry state between them.
fn stream_steps(op: &str) -> usize {
    if RECURRENT.contains(&op) {
        4
    } else if rand::is_stream(op) {
        rand::STEPS
    } else if strings::TABLE_OPS.contains(&op) {
        strings::TABLE_STEPS
    } else {
        1
    }
}

/// A weight matrix: float, or int8 with one random scale (hybrid).
fn weights(m: &mut ModelSpec, r: &mut Rng, name: &str, shape: &[i32], hybrid: bool) -> i32 {
    let n = n_of(shape);
    if hybrid {
        let data: Vec<u8> = (0..n).map(|_| r.int(-127, 127) as i8 as u8).collect();
        // Scales keep each product of order one (inputs and states are within [-2, 2]).
        let scale = r.f(0.3, 1.0) / 127.0 / (shape.last().copied().unwrap_or(1).max(1) as f32).sqrt();
        m.add_tensor(TensorSpec { data: Some(data), quant: Some((vec![scale], vec![0], 0)), ..TensorSpec::activation(name, TensorType::INT8, shape) })
    } else {
        let scale = 1.0 / (shape.last().copied().unwrap_or(1).max(1) as f32).sqrt();
        let v = r.floats(n, -scale, scale);
        m.add_tensor(TensorSpec::const_f32(name, shape, &v))
    }
}

/// A state tensor of the op: variable, zero at the start.
fn state(m: &mut ModelSpec, name: &str, shape: &[i32]) -> i32 {
    m.add_tensor(TensorSpec { is_variable: true, ..TensorSpec::activation(name, TensorType::FLOAT32, shape) })
}

/// One LSTM direction's 17 weight inputs (input, recurrent, peephole, bias,
/// projection), -1 where a variant leaves one out; and its output size.
#[allow(clippy::too_many_arguments)]
fn lstm_weights(
    m: &mut ModelSpec,
    r: &mut Rng,
    tag: &str,
    ni: usize,
    nc: usize,
    hybrid: bool,
    cifg: bool,
    peephole: bool,
    no: Option<usize>,
) -> (Vec<i32>, usize) {
    let projection = no.is_some();
    let no = no.unwrap_or(nc);
    let (ni, nc_i, no_i) = (ni as i32, nc as i32, no as i32);
    let mut v = vec![];
    for g in 0..4 {
        v.push(if cifg && g == 0 { -1 } else { weights(m, r, &format!("{tag}x{g}"), &[nc_i, ni], hybrid) });
    }
    for g in 0..4 {
        v.push(if cifg && g == 0 { -1 } else { weights(m, r, &format!("{tag}h{g}"), &[nc_i, no_i], hybrid) });
    }
    for g in 0..3 {
        // Peepholes of a hybrid op are int8 too (LiteRT reads them with their scale).
        v.push(if !peephole || (cifg && g == 0) { -1 } else { weights(m, r, &format!("{tag}p{g}"), &[nc_i], hybrid) });
    }
    for g in 0..4 {
        // A forget bias near 1, as trained LSTMs have.
        let bv: Vec<f32> = (0..nc).map(|_| r.f(-0.5, 0.5) + if g == 1 { 1.0 } else { 0.0 }).collect();
        v.push(if cifg && g == 0 { -1 } else { m.add_tensor(TensorSpec::const_f32(&format!("{tag}b{g}"), &[nc_i], &bv)) });
    }
    if projection {
        v.push(weights(m, r, &format!("{tag}proj"), &[no_i, nc_i], hybrid));
        let pb = r.floats(no, -0.3, 0.3);
        v.push(if r.coin() { m.add_tensor(TensorSpec::const_f32(&format!("{tag}proj_b"), &[no_i], &pb)) } else { -1 });
    } else {
        v.extend([-1, -1]);
    }
    (v, no)
}

/// A constant int8 / int16 / int32 tensor with one scale and zero point 0.
fn qconst(m: &mut ModelSpec, name: &str, ty: TensorType, shape: &[i32], values: &[i64], scale: f32) -> i32 {
    let data: Vec<u8> = match ty {
        TensorType::INT8 => values.iter().map(|&v| v as i8 as u8).collect(),
        TensorType::INT16 => values.iter().flat_map(|&v| (v as i16).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
    };
    m.add_tensor(TensorSpec { data: Some(data), quant: Some((vec![scale], vec![0], 0)), ..TensorSpec::activation(name, ty, shape) })
}

/// The fully integer LSTM (LSTM_INT8, UNIDIRECTIONAL_SEQUENCE_LSTM_INT8): int8
/// input, weights and output state (int16 input and output state with zero points 0
/// for the 16x8 form, LSTM_INT16 and UNIDIRECTIONAL_SEQUENCE_LSTM_INT16), int16 cell state (a power-of-two scale),
/// int32 biases, int16 peepholes and layer-norm coefficients, and the five
/// intermediate tensors whose scales LiteRT's kernel reads (the gates' with layer
/// norm, the hidden state's always). Every scale and zero point is random, and so
/// is the variant: CIFG, peephole, layer norm, projection (with or without bias),
/// clips, time- or batch-major.
fn gen_lstm_int8(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let seq = op.starts_with("UNIDIRECTIONAL");
    // The 16x8 form: int16 activations (zero points 0), int8 weights.
    // The uint8 form (UNIDIRECTIONAL_SEQUENCE_LSTM_UINT8, which LiteRT refuses) has
    // uint8 activations around zero point 128.
    let act = if op.ends_with("_INT16") {
        TensorType::INT16
    } else if op.ends_with("_UINT8") {
        TensorType::UINT8
    } else {
        TensorType::INT8
    };
    let zp = |v: i64| match act {
        TensorType::INT16 => 0,
        TensorType::UINT8 => v + 128,
        _ => v,
    };
    let (t, b, ni, nc) = (r.u(1, 5) as i32, r.u(1, 3) as i32, r.u(1, 8) as i32, r.u(1, 8) as i32);
    let (cifg, peephole, layer_norm, projection) = (r.coin(), r.coin(), r.coin(), r.int(0, 2) == 0);
    let time_major = seq && r.coin();
    // LiteRT's integer peephole reads n_output values per cell row: keep n_output <= n_cell.
    let no = if projection { r.u(1, nc as usize) as i32 } else { nc };
    let shape = if !seq {
        vec![b, ni]
    } else if time_major {
        vec![t, b, ni]
    } else {
        vec![b, t, ni]
    };
    let (in_scale, in_zp) = (r.f(0.005, 0.02), zp(r.int(-20, 20)));
    let x = m.add_tensor(TensorSpec { quant: Some((vec![in_scale], vec![in_zp], 0)), ..TensorSpec::activation("x", act, &shape) });
    m.inputs.push(x);
    let (h_scale, h_zp) = (r.f(0.005, 0.01), zp(r.int(-10, 10)));
    // Cell scales 2^-15 .. 2^-11, and 2^-16 (where LiteRT skips the cell's tanh) with an input gate.
    let cell_shift = if !cifg && r.int(0, 4) == 0 { -16 } else { -(r.int(11, 15) as i32) };
    let gate = |g: usize| !(cifg && g == 0);
    let mut ins = vec![x];
    let wmat = |m: &mut ModelSpec, r: &mut Rng, name: &str, rows: i32, cols: i32| {
        let v: Vec<i64> = (0..rows * cols).map(|_| r.int(-127, 127)).collect();
        let scale = r.f(0.3, 1.0) / 127.0 / (cols as f32).sqrt();
        qconst(m, name, TensorType::INT8, &[rows, cols], &v, scale)
    };
    for g in 0..4 {
        ins.push(if gate(g) { wmat(&mut m, r, &format!("x{g}"), nc, ni) } else { -1 });
    }
    for g in 0..4 {
        ins.push(if gate(g) { wmat(&mut m, r, &format!("h{g}"), nc, no) } else { -1 });
    }
    for g in 0..3 {
        ins.push(if peephole && !(cifg && g == 0) {
            let v: Vec<i64> = (0..nc).map(|_| r.int(-20000, 20000)).collect();
            qconst(&mut m, &format!("p{g}"), TensorType::INT16, &[nc], &v, r.f(0.2, 1.0) / 32768.0)
        } else {
            -1
        });
    }
    for g in 0..4 {
        // Biases in the input product's units (or, with layer norm, the normalized gate's).
        let lim = if layer_norm { 1 << 14 } else { 3000 };
        let v: Vec<i64> = (0..nc).map(|_| r.int(-lim, lim)).collect();
        ins.push(if gate(g) { qconst(&mut m, &format!("b{g}"), TensorType::INT32, &[nc], &v, 1.0) } else { -1 });
    }
    if projection {
        ins.push(wmat(&mut m, r, "proj", no, nc));
        let v: Vec<i64> = (0..no).map(|_| r.int(-1000, 1000)).collect();
        ins.push(if r.coin() { qconst(&mut m, "proj_b", TensorType::INT32, &[no], &v, 1.0) } else { -1 });
    } else {
        ins.extend([-1, -1]);
    }
    let hq = Some((vec![h_scale], vec![h_zp], 0));
    ins.push(m.add_tensor(TensorSpec { is_variable: true, quant: hq.clone(), ..TensorSpec::activation("h", act, &[b, no]) }));
    let cq = Some((vec![2f32.powi(cell_shift)], vec![0], 0));
    ins.push(m.add_tensor(TensorSpec { is_variable: true, quant: cq, ..TensorSpec::activation("c", TensorType::INT16, &[b, nc]) }));
    for g in 0..4 {
        ins.push(if layer_norm && gate(g) {
            let v: Vec<i64> = (0..nc).map(|_| r.int(8000, 24000)).collect();
            qconst(&mut m, &format!("ln{g}"), TensorType::INT16, &[nc], &v, r.f(0.5, 1.5) / 16384.0)
        } else {
            -1
        });
    }
    // Intermediates: the gates' pre-normalization scales, then the hidden state's
    // (the output state's own without a projection, as the converter writes it).
    let mut inter = vec![];
    for g in 0..4 {
        let q = Some((vec![r.f(0.5, 2.0) / 4096.0], vec![0], 0));
        inter.push(m.add_tensor(TensorSpec { quant: q, ..TensorSpec::activation(&format!("gate{g}"), TensorType::INT16, &[b, nc]) }));
    }
    let hidden = if projection { Some((vec![r.f(0.005, 0.01)], vec![zp(r.int(-5, 5))], 0)) } else { hq.clone() };
    inter.push(m.add_tensor(TensorSpec { quant: hidden, ..TensorSpec::activation("hidden", act, &[b, nc]) }));
    let o = m.add_tensor(TensorSpec { quant: hq, ..TensorSpec::activation("out", act, &[]) });
    m.outputs.push(o);
    let cell_clip = if r.coin() { r.f(0.5, 3.0) } else { 0.0 };
    let proj_clip = if projection && r.coin() { r.f(0.3, 1.0) } else { 0.0 };
    let code = if seq { B::UNIDIRECTIONAL_SEQUENCE_LSTM } else { B::LSTM };
    let opts = Options::Recurrent { activation: Activation::TANH, cell_clip, proj_clip, time_major, merge_outputs: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(code), &ins, &[o], opts);
    if let Some(op) = m.ops.last_mut() {
        op.intermediates = inter;
    }
    Case { spec: m, ranges: vec![], fixed: vec![] }
}

/// LiteRT's legacy 8-bit basic LSTM cell (LSTM_UINT8): the LSTM op with
/// `kernel_type` BASIC and its five inputs (input, previous activation, weights
/// over `[input, activation]` for the four gates, int32 biases, int16 previous
/// state) and four outputs (activation, state, and the concatenation and gate
/// inputs the kernel exposes, all compared). The activations have the scale and
/// zero point the kernel assumes (1/128, 128), the state 2^-11; the weights' scale
/// and zero point are random, the bias's scale is theirs times 1/128. The two state
/// inputs are variables, so the state carries from step to step.
fn gen_lstm_basic_uint8(r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: "ferrite single-op test: LSTM_UINT8".into(), ..Default::default() };
    let (b, ni, no) = (r.u(1, 3) as i32, r.u(1, 8) as i32, r.u(1, 8) as i32);
    let depth = ni + no;
    let act_q = || Some((vec![1.0f32 / 128.0], vec![128], 0));
    let state_q = || Some((vec![2f32.powi(-11)], vec![0], 0));
    let x = m.add_tensor(TensorSpec { quant: act_q(), ..TensorSpec::activation("x", TensorType::UINT8, &[b, ni]) });
    m.inputs.push(x);
    let prev_a = m.add_tensor(TensorSpec { is_variable: true, quant: act_q(), ..TensorSpec::activation("prev_activation", TensorType::UINT8, &[b, no]) });
    let w_scale = r.f(0.5, 2.0) / 128.0 / (depth as f32).sqrt();
    let w_zp = r.int(100, 156);
    let wv: Vec<u8> = (0..4 * no * depth).map(|_| r.int(0, 255) as u8).collect();
    let w = m.add_tensor(TensorSpec {
        data: Some(wv),
        quant: Some((vec![w_scale], vec![w_zp], 0)),
        ..TensorSpec::activation("weights", TensorType::UINT8, &[4 * no, depth])
    });
    // Biases of up to about 1 in real terms (their scale is the weights' / 128).
    let lim = (128.0 / w_scale) as i64;
    let bv: Vec<i64> = (0..4 * no).map(|_| r.int(-lim, lim)).collect();
    let bias = qconst(&mut m, "bias", TensorType::INT32, &[4 * no], &bv, w_scale / 128.0);
    let prev_s = m.add_tensor(TensorSpec { is_variable: true, quant: state_q(), ..TensorSpec::activation("prev_state", TensorType::INT16, &[b, no]) });
    let outs = [
        m.add_tensor(TensorSpec { quant: act_q(), ..TensorSpec::activation("activation", TensorType::UINT8, &[b, no]) }),
        m.add_tensor(TensorSpec { quant: state_q(), ..TensorSpec::activation("state", TensorType::INT16, &[b, no]) }),
        m.add_tensor(TensorSpec { quant: act_q(), ..TensorSpec::activation("concat", TensorType::UINT8, &[b, depth]) }),
        m.add_tensor(TensorSpec { quant: Some((vec![1.0 / 4096.0], vec![0], 0)), ..TensorSpec::activation("gates", TensorType::INT16, &[b, 4 * no]) }),
    ];
    m.outputs.extend(outs);
    m.add_op(
        OpCode::Builtin(B::LSTM),
        &[x, prev_a, w, bias, prev_s],
        &outs,
        Options::LstmBasic { activation: Activation::TANH, cell_clip: 0.0, proj_clip: 0.0 },
    );
    Case { spec: m, ranges: vec![], fixed: vec![] }
}

/// The integer SVDF: int8 input, feature weights and output, int16 time weights
/// and memory, int32 bias (present or not), random scales and zero points; RELU,
/// the one activation LiteRT's integer kernel takes.
fn gen_svdf_int8(r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: "ferrite single-op test: SVDF_INT8".into(), ..Default::default() };
    let (b, ni) = (r.u(1, 3) as i32, r.u(1, 8) as i32);
    let (rank, units, memory) = (r.u(1, 2) as i32, r.u(1, 5) as i32, r.u(1, 5) as i32);
    let nf = rank * units;
    let x =
        m.add_tensor(TensorSpec { quant: Some((vec![r.f(0.005, 0.02)], vec![r.int(-20, 20)], 0)), ..TensorSpec::activation("x", TensorType::INT8, &[b, ni]) });
    m.inputs.push(x);
    let wfv: Vec<i64> = (0..nf * ni).map(|_| r.int(-127, 127)).collect();
    let wf = qconst(&mut m, "features", TensorType::INT8, &[nf, ni], &wfv, r.f(0.3, 1.0) / 127.0 / (ni as f32).sqrt());
    let wtv: Vec<i64> = (0..nf * memory).map(|_| r.int(-32767, 32767)).collect();
    let wt = qconst(&mut m, "time", TensorType::INT16, &[nf, memory], &wtv, r.f(0.3, 1.0) / 32767.0);
    let bv: Vec<i64> = (0..units).map(|_| r.int(-50000, 50000)).collect();
    let bias = if r.coin() { qconst(&mut m, "bias", TensorType::INT32, &[units], &bv, 1.0) } else { -1 };
    let sq = Some((vec![r.f(0.5, 2.0) / 8192.0], vec![0], 0));
    let st = m.add_tensor(TensorSpec { is_variable: true, quant: sq, ..TensorSpec::activation("memory", TensorType::INT16, &[b, nf * memory]) });
    let o = m.add_tensor(TensorSpec { quant: Some((vec![r.f(0.005, 0.03)], vec![r.int(-20, 20)], 0)), ..TensorSpec::activation("out", TensorType::INT8, &[]) });
    m.outputs.push(o);
    m.add_op(OpCode::Builtin(B::SVDF), &[x, wf, wt, bias, st], &[o], Options::Svdf { rank, activation: Activation::RELU, asymmetric_quantize_inputs: false });
    Case { spec: m, ranges: vec![], fixed: vec![] }
}

fn gen_recurrent(op: &str, r: &mut Rng) -> Case {
    if op == "SVDF_INT8" {
        return gen_svdf_int8(r);
    }
    if op == "LSTM_UINT8" {
        return gen_lstm_basic_uint8(r);
    }
    if op.ends_with("_INT8") || op.ends_with("LSTM_INT16") || op.ends_with("LSTM_UINT8") {
        return gen_lstm_int8(op, r);
    }
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let hybrid = op.ends_with("_HYBRID");
    let base = op.trim_end_matches("_HYBRID");
    let asymmetric_quantize_inputs = hybrid && r.coin();
    // LiteRT leaves the cell output unactivated with NONE reading stale scratch; the
    // converter writes TANH. RELU-family activations are exercised too.
    let activation = if r.int(0, 3) == 0 { r.pick(&[Activation::RELU, Activation::RELU6, Activation::RELU_N1_TO_1]) } else { Activation::TANH };
    let (t, b, ni) = (r.u(1, 5), r.u(1, 3), r.u(1, 8));
    // LiteRT's hybrid time-major BIDIRECTIONAL_SEQUENCE_RNN walks the whole sequence
    // once per time step (its state advances `time` times per run): compare it
    // batch-major only.
    // LiteRT's hybrid BIDIRECTIONAL_SEQUENCE_LSTM reads every input as time-major.
    let time_major = (r.coin() && op != "BIDIRECTIONAL_SEQUENCE_RNN_HYBRID") || op == "BIDIRECTIONAL_SEQUENCE_LSTM_HYBRID";
    let seq_shape = |f: usize| if time_major { vec![t as i32, b as i32, f as i32] } else { vec![b as i32, t as i32, f as i32] };
    let bi = b as i32;
    match base {
        "LSTM" | "UNIDIRECTIONAL_SEQUENCE_LSTM" | "BIDIRECTIONAL_SEQUENCE_LSTM" => {
            let bidi = base.starts_with("BIDI");
            let seq = base != "LSTM";
            let x = f32in(&mut m, "x", &if seq { seq_shape(ni) } else { vec![bi, ni as i32] });
            let nc = r.u(1, 8);
            let (cifg, peephole, projection) = (r.coin(), r.coin(), r.int(0, 2) == 0);
            // Layer norm: LiteRT's bidirectional op has none.
            let layer_norm = !bidi && r.coin();
            let clip = |r: &mut Rng| if r.coin() { r.f(0.5, 3.0) } else { 0.0 };
            let (cell_clip, proj_clip) = (clip(r), if projection { clip(r) } else { 0.0 });
            // LiteRT's bidirectional op wants both directions of one output size.
            let proj_size = projection.then(|| r.u(1, 6));
            let (fw, no) = lstm_weights(&mut m, r, "fw_", ni, nc, hybrid, cifg, peephole, proj_size);
            let mut ins = vec![x];
            ins.extend(&fw);
            // LiteRT's batch-major merged output disagrees with its own two-output form
            // (and with its UNIDIRECTIONAL_SEQUENCE_LSTM) once there are several
            // sequences and steps: merged outputs are compared time-major.
            let merge_outputs = bidi && r.coin() && time_major;
            if bidi {
                let (bw, bno) = lstm_weights(&mut m, r, "bw_", ni, nc, hybrid, cifg, peephole, proj_size);
                ins.extend(&bw);
                ins.push(state(&mut m, "fw_h", &[bi, no as i32]));
                ins.push(state(&mut m, "fw_c", &[bi, nc as i32]));
                ins.push(state(&mut m, "bw_h", &[bi, bno as i32]));
                ins.push(state(&mut m, "bw_c", &[bi, nc as i32]));
                ins.extend([-1; 9]);
            } else {
                ins.push(state(&mut m, "h", &[bi, no as i32]));
                ins.push(state(&mut m, "c", &[bi, nc as i32]));
                for g in 0..4 {
                    let lv = r.floats(nc, 0.5, 1.5);
                    ins.push(if layer_norm && !(cifg && g == 0) { m.add_tensor(TensorSpec::const_f32(&format!("ln{g}"), &[nc as i32], &lv)) } else { -1 });
                }
            }
            let n_out = if bidi && !merge_outputs { 2 } else { 1 };
            let outs: Vec<i32> = (0..n_out).map(|_| out(&mut m, TensorType::FLOAT32, &[])).collect();
            let code = match base {
                "LSTM" => B::LSTM,
                "UNIDIRECTIONAL_SEQUENCE_LSTM" => B::UNIDIRECTIONAL_SEQUENCE_LSTM,
                _ => B::BIDIRECTIONAL_SEQUENCE_LSTM,
            };
            let opts = Options::Recurrent { activation, cell_clip, proj_clip, time_major, merge_outputs, asymmetric_quantize_inputs };
            m.add_op(OpCode::Builtin(code), &ins, &outs, opts);
        }
        "RNN" | "UNIDIRECTIONAL_SEQUENCE_RNN" | "BIDIRECTIONAL_SEQUENCE_RNN" => {
            let bidi = base.starts_with("BIDI");
            let seq = base != "RNN";
            let x = f32in(&mut m, "x", &if seq { seq_shape(ni) } else { vec![bi, ni as i32] });
            let mut ins = vec![x];
            for tag in ["fw_", "bw_"].iter().take(if bidi { 2 } else { 1 }) {
                let u = r.u(1, 8);
                ins.push(weights(&mut m, r, &format!("{tag}w"), &[u as i32, ni as i32], hybrid));
                ins.push(weights(&mut m, r, &format!("{tag}r"), &[u as i32, u as i32], hybrid));
                let bv = r.floats(u, -0.5, 0.5);
                ins.push(m.add_tensor(TensorSpec::const_f32(&format!("{tag}b"), &[u as i32], &bv)));
                ins.push(state(&mut m, &format!("{tag}h"), &[bi, u as i32]));
            }
            if bidi {
                // LiteRT wants the three auxiliary-input slots listed, even when empty.
                ins.extend([-1; 3]);
            }
            let merge_outputs = bidi && r.coin();
            let n_out = if bidi && !merge_outputs { 2 } else { 1 };
            let outs: Vec<i32> = (0..n_out).map(|_| out(&mut m, TensorType::FLOAT32, &[])).collect();
            let code = match base {
                "RNN" => B::RNN,
                "UNIDIRECTIONAL_SEQUENCE_RNN" => B::UNIDIRECTIONAL_SEQUENCE_RNN,
                _ => B::BIDIRECTIONAL_SEQUENCE_RNN,
            };
            let opts = Options::Recurrent { activation, cell_clip: 0.0, proj_clip: 0.0, time_major, merge_outputs, asymmetric_quantize_inputs };
            m.add_op(OpCode::Builtin(code), &ins, &outs, opts);
        }
        _ => {
            // SVDF: filters = rank x units, a memory of a few steps.
            let (rank, units, memory) = (r.u(1, 2), r.u(1, 5), r.u(1, 5));
            let nf = rank * units;
            let x = f32in(&mut m, "x", &[bi, ni as i32]);
            let wf = weights(&mut m, r, "features", &[nf as i32, ni as i32], hybrid);
            let wt = weights(&mut m, r, "time", &[nf as i32, memory as i32], hybrid);
            let bv = r.floats(units, -0.5, 0.5);
            let bias = if r.coin() { m.add_tensor(TensorSpec::const_f32("bias", &[units as i32], &bv)) } else { -1 };
            let st = state(&mut m, "memory", &[bi, (nf * memory) as i32]);
            let o = out(&mut m, TensorType::FLOAT32, &[]);
            let activation = r.pick(&[Activation::NONE, Activation::RELU, Activation::RELU6, Activation::TANH]);
            m.add_op(OpCode::Builtin(B::SVDF), &[x, wf, wt, bias, st], &[o], Options::Svdf { rank: rank as i32, activation, asymmetric_quantize_inputs });
        }
    }
    Case { spec: m, ranges: vec![(-2.0, 2.0)], fixed: vec![] }
}

/// The int8 case as uint8: every int8 tensor (constants too) shifted by 128 in
/// both its values and its zero points, which represents the same real numbers.
fn to_uint8(mut case: Case) -> Case {
    let shift = |spec: &mut ModelSpec| {
        for t in spec.tensors.iter_mut().filter(|t| t.dtype == TensorType::INT8) {
            t.dtype = TensorType::UINT8;
            if let Some(q) = t.quant.as_mut() {
                q.1.iter_mut().for_each(|z| *z += 128);
            }
            if let Some(d) = t.data.as_mut() {
                d.iter_mut().for_each(|b| *b ^= 0x80);
            }
        }
    };
    shift(&mut case.spec);
    case.spec.subgraphs.iter_mut().for_each(shift);
    case
}

/// `TFLite_Detection_PostProcess` (LiteRT's built-in custom op): box encodings and
/// class scores as model inputs, constant anchors clustered in the unit square (so
/// boxes overlap), randomized options (some left out, as LiteRT defaults them),
/// fast NMS with 1 to 3 classes per box or regular NMS, with or without the
/// background column. `_UINT8` / `_INT8`: every input quantized (anchors too,
/// as LiteRT reads them with the box encodings' type); whole-range integer inputs
/// give many equal scores, which checks the tie order.
fn gen_detection_postprocess(op: &str, r: &mut Rng) -> Case {
    use ferrite_format::flexbuffers::{encode_map, FlexValue};
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let regular = op.contains("REGULAR");
    let qtype = if op.ends_with("_UINT8") {
        Some(TensorType::UINT8)
    } else if op.ends_with("_INT8") {
        Some(TensorType::INT8)
    } else {
        None
    };
    let boxes = r.u(1, 40);
    let stride = r.pick(&[4, 4, 6]);
    let num_classes = r.u(1, 6);
    let with_bg = r.coin();
    let cols = num_classes + with_bg as usize;
    let anchors: Vec<f32> = (0..boxes).flat_map(|_| [r.f(0.2, 0.8), r.f(0.2, 0.8), r.f(0.1, 0.5), r.f(0.1, 0.5)]).collect();
    let (enc_t, cls_t, anc_t) = match qtype {
        None => {
            let e = f32in(&mut m, "box_encodings", &[1, boxes as i32, stride]);
            let c = f32in(&mut m, "class_predictions", &[1, boxes as i32, cols as i32]);
            let a = m.add_tensor(TensorSpec::const_f32("anchors", &[boxes as i32, 4], &anchors));
            (e, c, a)
        }
        Some(ty) => {
            let (lo, hi) = if ty == TensorType::UINT8 { (0i64, 255i64) } else { (-128, 127) };
            let qin = |m: &mut ModelSpec, name: &str, shape: &[i32], scale: f32, zp: i64| {
                let t = m.add_tensor(TensorSpec { quant: Some((vec![scale], vec![zp], 0)), ..TensorSpec::activation(name, ty, shape) });
                m.inputs.push(t);
                t
            };
            let e = qin(&mut m, "box_encodings", &[1, boxes as i32, stride], r.f(0.01, 0.04), r.int(lo + 100, hi - 100));
            let c = qin(&mut m, "class_predictions", &[1, boxes as i32, cols as i32], 1.0 / 256.0, lo);
            // Anchors quantized with a step of 1/256 from zero (all values are positive).
            let (scale, zp) = (1.0f32 / 256.0, lo);
            let data: Vec<u8> = anchors.iter().map(|&v| ((v / scale).round() as i64 + zp).clamp(lo, hi) as i8 as u8).collect();
            let a = m.add_tensor(TensorSpec {
                data: Some(data),
                quant: Some((vec![scale], vec![zp], 0)),
                ..TensorSpec::activation("anchors", ty, &[boxes as i32, 4])
            });
            (e, c, a)
        }
    };
    let outs: Vec<i32> = ["detection_boxes", "detection_classes", "detection_scores", "num_detections"]
        .iter()
        .map(|n| {
            let t = m.add_tensor(TensorSpec::activation(n, TensorType::FLOAT32, &[]));
            m.outputs.push(t);
            t
        })
        .collect();
    let mut opts = vec![
        ("max_detections", FlexValue::Int(r.int(1, 12))),
        ("max_classes_per_detection", FlexValue::Int(r.int(1, 3))),
        ("nms_score_threshold", FlexValue::Float(if qtype.is_some() { r.f(0.0, 0.6) } else { r.f(-0.5, 0.6) } as f64)),
        ("nms_iou_threshold", FlexValue::Float(r.f(0.05, 1.0) as f64)),
        ("num_classes", FlexValue::Int(num_classes as i64)),
        ("y_scale", FlexValue::Float(r.f(1.0, 10.0) as f64)),
        ("x_scale", FlexValue::Float(r.f(1.0, 10.0) as f64)),
        ("h_scale", FlexValue::Float(r.f(1.0, 5.0) as f64)),
        ("w_scale", FlexValue::Float(r.f(1.0, 5.0) as f64)),
    ];
    if r.coin() {
        opts.push(("detections_per_class", FlexValue::Int(r.int(1, 8))));
    }
    if regular || r.coin() {
        opts.push(("use_regular_nms", FlexValue::Bool(regular)));
    }
    m.add_op(OpCode::Custom("TFLite_Detection_PostProcess".into()), &[enc_t, cls_t, anc_t], &outs, Options::None);
    if let Some(o) = m.ops.last_mut() {
        o.custom_options = Some(encode_map(&opts));
    }
    // Float inputs: encodings around zero, scores in [0, 1).
    let ranges = if qtype.is_some() { vec![] } else { vec![(-1.5, 1.5), (0.0, 1.0)] };
    Case { spec: m, ranges, fixed: vec![] }
}

/// The float case with every float activation turned into `ty`, all sharing one
/// randomized (scale, zero point): the form converters give ops that only move or
/// select values, which LiteRT runs without requantizing. int16 keeps zero point 0.
fn quantized_variant(mut case: Case, ty: TensorType, r: &mut Rng) -> Case {
    let zp = match ty {
        TensorType::INT8 => r.int(-40, 40),
        TensorType::UINT8 => r.int(90, 170),
        _ => 0,
    };
    let scale = r.f(0.005, 0.1);
    let quantize = |spec: &mut ModelSpec| {
        for t in spec.tensors.iter_mut().filter(|t| t.dtype == TensorType::FLOAT32 && t.data.is_none()) {
            t.dtype = ty;
            t.quant = Some((vec![scale], vec![zp], 0));
        }
    };
    quantize(&mut case.spec);
    case.spec.subgraphs.iter_mut().for_each(quantize);
    // Integer inputs are drawn from the type's whole range by the harness.
    case.ranges.clear();
    case
}

/// float32 -> IEEE half bits, round to nearest even (finite, in-range inputs).
fn f32_to_f16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let man = b & 0x7f_ffff;
    if exp <= 0 {
        return sign;
    }
    let mut h = (sign as u32) | ((exp as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
        h += 1;
    }
    h as u16
}

/// Every op the generator covers. (float ELU, CEIL, ROUND and BROADCAST_TO have no kernel in
/// LiteRT's reference resolver, so they cannot be compared there.)
const OPS: &[&str] = &[
    // int8 / uint8 LOG_SOFTMAX and L2_NORMALIZATION (the `qnorm` module's cases).
    "LOG_SOFTMAX_INT8",
    "LOG_SOFTMAX_UINT8",
    "L2_NORMALIZATION_INT8",
    "L2_NORMALIZATION_UINT8",
    // Quantized element-wise variants (the `qelem` module's cases).
    "DIV_INT8",
    "DIV_UINT8",
    "DIV_INT16",
    "NEG_INT8",
    "NEG_INT16",
    "EXP_INT8",
    "EXP_INT16",
    "LOG_INT8",
    "LOG_INT16",
    "SQRT_INT8",
    "SQRT_INT16",
    "RSQRT_INT16",
    "ELU_INT8",
    "RELU_0_TO_1_INT8",
    "RELU_0_TO_1_UINT8",
    "FLOOR_DIV_INT8",
    "FLOOR_DIV_INT16",
    "FLOOR_MOD_INT8",
    "FLOOR_MOD_INT16",
    "TOPK_V2_INT16",
    "GELU_INT16",
    // The StableHLO legalization's ops (hlo.rs), per element type; the _FLOAT32,
    // _UNSUPPORTED, _INT32_WINDOW and _SUB cases are refused by LiteRT and ferrite.
    "STABLEHLO_ADD",
    "STABLEHLO_ADD_INT8",
    "STABLEHLO_ADD_UINT8",
    "STABLEHLO_ADD_INT16",
    "STABLEHLO_ADD_INT32",
    "STABLEHLO_ADD_INT64",
    "STABLEHLO_ADD_BOOL",
    "STABLEHLO_MULTIPLY",
    "STABLEHLO_MULTIPLY_INT8",
    "STABLEHLO_MULTIPLY_INT16",
    "STABLEHLO_MULTIPLY_INT32",
    "STABLEHLO_MULTIPLY_INT64",
    "STABLEHLO_MULTIPLY_BOOL",
    "STABLEHLO_MAXIMUM",
    "STABLEHLO_MAXIMUM_INT8",
    "STABLEHLO_MAXIMUM_UINT8",
    "STABLEHLO_MAXIMUM_INT32",
    "STABLEHLO_MAXIMUM_BOOL",
    "STABLEHLO_MINIMUM",
    "STABLEHLO_MINIMUM_INT16",
    "STABLEHLO_MINIMUM_INT64",
    "STABLEHLO_MINIMUM_BOOL",
    "STABLEHLO_AND_INT32",
    "STABLEHLO_AND_INT8",
    "STABLEHLO_AND_UINT8",
    "STABLEHLO_AND_INT16",
    "STABLEHLO_AND_INT64",
    "STABLEHLO_AND_BOOL",
    "STABLEHLO_AND_FLOAT32",
    "STABLEHLO_PAD",
    "STABLEHLO_PAD_INT8",
    "STABLEHLO_PAD_INT64",
    "STABLEHLO_PAD_BOOL",
    "DILATE",
    "DILATE_INT8",
    "DILATE_INT32",
    "DILATE_BOOL",
    "REDUCE_WINDOW",
    "REDUCE_WINDOW_INT8",
    "REDUCE_WINDOW_UINT8",
    "REDUCE_WINDOW_INT16",
    "REDUCE_WINDOW_INT32",
    "REDUCE_WINDOW_INT64",
    "REDUCE_WINDOW_BOOL",
    "REDUCE_WINDOW_UNSUPPORTED",
    "REDUCE_WINDOW_INT32_WINDOW",
    "STABLEHLO_REDUCE_WINDOW",
    "STABLEHLO_REDUCE_WINDOW_INT8",
    "STABLEHLO_REDUCE_WINDOW_INT16",
    "STABLEHLO_REDUCE_WINDOW_INT32",
    "STABLEHLO_REDUCE_WINDOW_INT64",
    "STABLEHLO_REDUCE_WINDOW_BOOL",
    "STABLEHLO_REDUCE_WINDOW_SUB",
    // Quantized MAXIMUM / MINIMUM (stored integers) and comparisons (rescaled).
    "MAXIMUM_INT8",
    "MAXIMUM_UINT8",
    "MAXIMUM_INT16",
    "MINIMUM_INT8",
    "MINIMUM_UINT8",
    "MINIMUM_INT16",
    "LESS_INT8",
    "LESS_UINT8",
    "LESS_INT16",
    "LESS_EQUAL_INT8",
    "LESS_EQUAL_UINT8",
    "LESS_EQUAL_INT16",
    "GREATER_INT8",
    "GREATER_UINT8",
    "GREATER_INT16",
    "GREATER_EQUAL_INT8",
    "GREATER_EQUAL_UINT8",
    "GREATER_EQUAL_INT16",
    "EQUAL_INT8",
    "EQUAL_UINT8",
    "EQUAL_INT16",
    "NOT_EQUAL_INT8",
    "NOT_EQUAL_UINT8",
    "NOT_EQUAL_INT16",
    "ABS_INT32",
    "NEG_INT32",
    "SUM_INT32",
    "SUM_INT64",
    "REDUCE_MAX_INT32",
    "REDUCE_MAX_INT64",
    "REDUCE_MIN_INT32",
    "REDUCE_PROD_INT32",
    "REDUCE_MAX_INT8",
    "REDUCE_MAX_UINT8",
    "REDUCE_MAX_INT16",
    "REDUCE_MIN_INT8",
    "REDUCE_MIN_UINT8",
    "REDUCE_MIN_INT16",
    "SIGN_INT32",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "AVERAGE_POOL_2D",
    "MAX_POOL_2D",
    "FULLY_CONNECTED",
    "TRANSPOSE_CONV",
    "CONV_3D",
    "CONV_3D_TRANSPOSE",
    "BATCH_MATMUL",
    "ADD",
    "SUB",
    "MUL",
    "DIV",
    "MAXIMUM",
    "MINIMUM",
    "SQUARED_DIFFERENCE",
    "POW",
    "LESS",
    "LESS_EQUAL",
    "GREATER",
    "GREATER_EQUAL",
    "EQUAL",
    "NOT_EQUAL",
    "PRELU",
    "ABS",
    "NEG",
    "EXP",
    "LOG",
    "SQRT",
    "RSQRT",
    "SQUARE",
    "TANH",
    "LOGISTIC",
    "RELU",
    "RELU6",
    "RELU_N1_TO_1",
    "HARD_SWISH",
    "LEAKY_RELU",
    "FLOOR",
    "SIN",
    "COS",
    "SOFTMAX",
    "LOG_SOFTMAX",
    "RESHAPE",
    "SQUEEZE",
    "EXPAND_DIMS",
    "CONCATENATION",
    "PACK",
    "SPLIT",
    "SPLIT_V",
    "UNPACK",
    "SLICE",
    "STRIDED_SLICE",
    "TRANSPOSE",
    "REVERSE_V2",
    "PAD",
    "PADV2",
    "GATHER",
    "TILE",
    "DEPTH_TO_SPACE",
    "SPACE_TO_DEPTH",
    "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR",
    "MEAN",
    "SUM",
    "REDUCE_MAX",
    "REDUCE_MIN",
    "REDUCE_PROD",
    "ARG_MAX",
    "ARG_MIN",
    "DEQUANTIZE_FP16",
    "SELECT_V2",
    "FUSED_TANH_ADD",
    "FUSED_SIGN_BIT_ADD",
    "FUSED_TANH_CONV_2D",
    "CONV_RESIDUAL_PRELU",
    "CONV_ACTIVATIONS",
    "PAD_CONV",
    "FLOOR_DIV",
    "FLOOR_MOD",
    "GELU",
    "SIGN",
    "RELU_0_TO_1",
    "CAST",
    "SHAPE",
    "ZEROS_LIKE",
    "FILL",
    "SELECT",
    "LOGICAL_AND",
    "LOGICAL_OR",
    "LOGICAL_NOT",
    "STRIDED_SLICE_ELLIPSIS",
    "STRIDED_SLICE_OFFSET",
    "RESHAPE_DYNAMIC",
    "IF",
    "WHILE",
    "VARIABLES",
    "CONV_2D_INT8",
    "DEPTHWISE_CONV_2D_INT8",
    "FULLY_CONNECTED_INT8",
    "CONV_2D_UINT8",
    "DEPTHWISE_CONV_2D_UINT8",
    "FULLY_CONNECTED_UINT8",
    "RESHAPE_INT8",
    "CONCATENATION_INT8",
    "PACK_INT8",
    "SPLIT_INT8",
    "SPLIT_V_INT8",
    "STRIDED_SLICE_INT8",
    "TRANSPOSE_INT8",
    "PAD_INT8",
    "GATHER_INT8",
    "RESIZE_NEAREST_NEIGHBOR_INT8",
    "RESIZE_BILINEAR_INT8",
    "RESIZE_BILINEAR_INT16",
    "RESIZE_BILINEAR_UINT8",
    "RELU_INT16",
    "RELU6_INT16",
    "LEAKY_RELU_INT16",
    "MEAN_INT8",
    "MEAN_UINT8",
    "MEAN_INT16",
    "MEAN_RESCALED_INT8",
    // Quantized reductions (issue 14 item 5): same-quantization sums, then qred.rs.
    "SUM_INT8",
    "SUM_UINT8",
    "SUM_INT16",
    "SUM_RESCALED_INT8",
    "SUM_RESCALED_UINT8",
    "SUM_RESCALED_INT16",
    "REDUCE_PROD_INT8",
    "REDUCE_PROD_INT16",
    "MEAN_INT32",
    "MEAN_INT64",
    "HARD_SWISH_INT8",
    "HARD_SWISH_UINT8",
    "ABS_INT8",
    "ABS_INT16",
    "RSQRT_INT8",
    "GELU_INT8",
    "GELU_UINT8",
    "SQUARED_DIFFERENCE_INT8",
    "PRELU_INT8",
    "PRELU_UINT8",
    "TRANSPOSE_CONV_INT8",
    "TRANSPOSE_CONV_INT16X8",
    "TRANSPOSE_CONV_UINT8",
    // Hybrid TRANSPOSE_CONV (tconv.rs; keep in step with tconv::OPS).
    "TRANSPOSE_CONV_HYBRID",
    "TRANSPOSE_CONV_HYBRID_PER_TENSOR",
    "STRIDED_SLICE_UINT8",
    "SPLIT_UINT8",
    "SPLIT_V_UINT8",
    "PACK_UINT8",
    "GATHER_UINT8",
    "SPLIT_INT16",
    "SPLIT_V_INT16",
    "PACK_INT16",
    "RESIZE_NEAREST_NEIGHBOR_INT16",
    "ADD_INT16_POT",
    "SUB_INT16_POT",
    "ADD_INT16_POT_GENERAL",
    "CONCATENATION_UINT8_RESCALED",
    "CONCATENATION_INT16_SCALES",
    "BATCH_MATMUL_INT8",
    "BATCH_MATMUL_INT16",
    "RESHAPE_UINT8",
    "CONCATENATION_UINT8",
    "PAD_UINT8",
    "TRANSPOSE_UINT8",
    "RESIZE_NEAREST_NEIGHBOR_UINT8",
    "RESHAPE_INT16",
    "CONCATENATION_INT16",
    "PAD_INT16",
    "TRANSPOSE_INT16",
    "STRIDED_SLICE_INT16",
    "GATHER_INT16",
    "CONV_2D_INT16X8",
    "DEPTHWISE_CONV_2D_INT16X8",
    "FULLY_CONNECTED_INT16X8",
    "ADD_INT16",
    "SUB_INT16",
    "MUL_INT16",
    "AVERAGE_POOL_2D_INT16",
    "MAX_POOL_2D_INT16",
    "SOFTMAX_INT16",
    "LOGISTIC_INT8",
    "TANH_INT8",
    "LOGISTIC_INT16",
    "TANH_INT16",
    "LOGISTIC_INT16_POT",
    "TANH_INT16_POT",
    "QUANTIZE_FLOAT",
    "QUANTIZE_REQUANT",
    "ADD_INT8",
    "SUB_INT8",
    "MUL_INT8",
    "AVERAGE_POOL_2D_INT8",
    "MAX_POOL_2D_INT8",
    "SOFTMAX_INT8",
    "RELU_INT8",
    "RELU6_INT8",
    "RELU_N1_TO_1_INT8",
    "LEAKY_RELU_INT8",
    "ADD_UINT8",
    "SUB_UINT8",
    "MUL_UINT8",
    "AVERAGE_POOL_2D_UINT8",
    "MAX_POOL_2D_UINT8",
    "SOFTMAX_UINT8",
    "LOGISTIC_UINT8",
    "TANH_UINT8",
    "RELU_UINT8",
    "RELU6_UINT8",
    "LEAKY_RELU_UINT8",
    "FULLY_CONNECTED_HYBRID",
    "FULLY_CONNECTED_HYBRID_ASYM",
    "CONV_2D_HYBRID",
    "DEPTHWISE_CONV_2D_HYBRID",
    "BATCH_MATMUL_HYBRID",
    "BATCH_MATMUL_HYBRID_ASYM",
    "PRELU_INT16",
    "GATHER_ND",
    "GATHER_ND_I64",
    "GATHER_ND_INT8",
    "SCATTER_ND",
    "DYNAMIC_UPDATE_SLICE",
    "DYNAMIC_UPDATE_SLICE_INT8",
    "EMBEDDING_LOOKUP",
    "EMBEDDING_LOOKUP_INT8",
    "EMBEDDING_LOOKUP_HYBRID",
    "EMBEDDING_LOOKUP_HYBRID_PER_ROW",
    // Legacy text-model ops (text.rs's TEXT_OPS).
    // HASHTABLE -> HASHTABLE_IMPORT -> HASHTABLE_FIND and HASHTABLE_SIZE in one
    // subgraph (the `strings` module; before HASHTABLE_LOOKUP, so that the type
    // probe's HASHTABLE finds them).
    "HASHTABLE_FIND_STRING_INT64",
    "HASHTABLE_FIND_INT64_STRING",
    "HASHTABLE_LOOKUP",
    "HASHTABLE_LOOKUP_INT32",
    "HASHTABLE_LOOKUP_INT8",
    "HASHTABLE_LOOKUP_UINT8",
    "LSH_PROJECTION",
    "LSH_PROJECTION_INT32",
    // Ops on run-time string tensors (the `strings` module's cases).
    "SKIP_GRAM",
    "TOPK_V2",
    "TOPK_V2_TIES",
    "TOPK_V2_DYNAMIC",
    "TOPK_V2_INT8",
    "ONE_HOT",
    "ONE_HOT_DYNAMIC",
    "RANGE",
    "RANGE_FLOAT",
    "CUMSUM",
    "ADD_N",
    "ADD_N_INT32",
    "RANK",
    "RANK_INT8",
    "RANK_BOOL",
    "REDUCE_ALL",
    "REDUCE_ANY",
    "REVERSE_SEQUENCE",
    "REVERSE_SEQUENCE_I64",
    "REVERSE_SEQUENCE_UINT8",
    "REVERSE_SEQUENCE_INT16",
    "REVERSE_SEQUENCE_INT32",
    "REVERSE_SEQUENCE_INT64",
    "SPARSE_TO_DENSE",
    "SPARSE_TO_DENSE_I64",
    "SPARSE_TO_DENSE_INT8",
    "SPARSE_TO_DENSE_UINT8",
    "SPARSE_TO_DENSE_INT32",
    "SPARSE_TO_DENSE_INT64",
    "SPARSE_TO_DENSE_DYNAMIC",
    "L2_POOL_2D",
    "WHERE",
    "WHERE_BOOL",
    "WHERE_INT8",
    "WHERE_UINT8",
    "WHERE_INT32",
    "WHERE_INT64",
    "WHERE_CONST",
    "UNIQUE",
    "UNIQUE_I64",
    "UNIQUE_INT8",
    "UNIQUE_UINT8",
    "UNIQUE_INT16",
    "UNIQUE_INT32",
    "UNIQUE_INT64",
    "SEGMENT_SUM",
    "SEGMENT_SUM_INT32",
    "UNSORTED_SEGMENT_SUM",
    "UNSORTED_SEGMENT_PROD",
    "UNSORTED_SEGMENT_MAX",
    "UNSORTED_SEGMENT_MIN",
    "UNSORTED_SEGMENT_SUM_INT32",
    "UNSORTED_SEGMENT_PROD_INT32",
    "UNSORTED_SEGMENT_MAX_INT32",
    "UNSORTED_SEGMENT_MIN_INT32",
    "MATRIX_DIAG",
    "MATRIX_DIAG_INT8",
    "MATRIX_SET_DIAG",
    "MATRIX_SET_DIAG_INT8",
    "BROADCAST_ARGS",
    "BROADCAST_ARGS_I64",
    "BITCAST",
    "BITCAST_NARROW",
    "BITCAST_WIDEN",
    "BITCAST_INT16",
    "RIGHT_SHIFT_INT8",
    "RIGHT_SHIFT_UINT8",
    "RIGHT_SHIFT_INT16",
    "RIGHT_SHIFT_UINT16",
    "RIGHT_SHIFT_INT32",
    "RIGHT_SHIFT_UINT32",
    "BITWISE_XOR_INT8",
    "BITWISE_XOR_UINT8",
    "BITWISE_XOR_INT16",
    "BITWISE_XOR_UINT16",
    "BITWISE_XOR_INT32",
    "BITWISE_XOR_UINT32",
    "MIRROR_PAD",
    "MIRROR_PAD_SYMMETRIC",
    "MIRROR_PAD_INT8",
    "SPACE_TO_BATCH_ND",
    "SPACE_TO_BATCH_ND_INT8",
    "BATCH_TO_SPACE_ND",
    "BATCH_TO_SPACE_ND_INT8",
    "L2_NORMALIZATION",
    "LOCAL_RESPONSE_NORMALIZATION",
    "ATAN2",
    "RFFT2D",
    "NON_MAX_SUPPRESSION_V4",
    "NON_MAX_SUPPRESSION_V4_DYNAMIC",
    "DETECTION_POSTPROCESS",
    "DETECTION_POSTPROCESS_REGULAR",
    "DETECTION_POSTPROCESS_UINT8",
    "DETECTION_POSTPROCESS_REGULAR_UINT8",
    "NON_MAX_SUPPRESSION_V5",
    "NON_MAX_SUPPRESSION_V5_SOFT",
    "COMPLEX_ABS",
    "REAL",
    "IMAG",
    // Recurrent ops (see RECURRENT).
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_HYBRID",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_INT8",
    "LSTM",
    "LSTM_HYBRID",
    "LSTM_INT8",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_LSTM_HYBRID",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "UNIDIRECTIONAL_SEQUENCE_RNN_HYBRID",
    "RNN",
    "RNN_HYBRID",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "BIDIRECTIONAL_SEQUENCE_RNN_HYBRID",
    "SVDF",
    "SVDF_HYBRID",
    "SVDF_INT8",
    // LiteRT has no kernel for these: both runtimes must refuse them.
    "HARD_SWISH_INT16",
    "BATCH_MATMUL_UINT8",
    "DETECTION_POSTPROCESS_INT8",
    "ADD_N_INT64",
    "REVERSE_SEQUENCE_INT8",
    // Random and feature ops (rand.rs; keep in step with rand::OPS and rand::REFUSED).
    "RANDOM_UNIFORM",
    "RANDOM_UNIFORM_DYNAMIC",
    "RANDOM_STANDARD_NORMAL",
    "RANDOM_STANDARD_NORMAL_DYNAMIC",
    "MULTINOMIAL",
    "MULTINOMIAL_INT32",
    "MULTINOMIAL_DYNAMIC",
    "BUCKETIZE",
    "BUCKETIZE_FLOAT64",
    "BUCKETIZE_INT32",
    "BUCKETIZE_INT64",
    "FAKE_QUANT",
    "FAKE_QUANT_INT32",
    "FAKE_QUANT_NARROW",
    "EMBEDDING_LOOKUP_SPARSE",
    "EMBEDDING_LOOKUP_SPARSE_DYNAMIC",
    // STABLEHLO_RNG_BIT_GENERATOR (rngbits.rs; keep in step with rngbits::OPS).
    "STABLEHLO_RNG_BIT_GENERATOR_DEFAULT_UINT32",
    "STABLEHLO_RNG_BIT_GENERATOR_DEFAULT_INT64",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_UINT32",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_UINT64",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_INT32",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_INT64",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY_UINT32",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY_UINT64",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY_INT32",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY_INT64",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_FLOAT32",
    "STABLEHLO_RNG_BIT_GENERATOR_PHILOX_INT16",
    "STABLEHLO_RNG_BIT_GENERATOR_THREEFRY3_UINT32",
    "STABLEHLO_RNG_BIT_GENERATOR_UNKNOWN_UINT32",
    // STABLEHLO_GATHER and STABLEHLO_SCATTER (hlo_index.rs; keep in step with its OPS and REFUSED).
    "STABLEHLO_GATHER",
    "STABLEHLO_GATHER_INT8",
    "STABLEHLO_GATHER_UINT8",
    "STABLEHLO_GATHER_INT16",
    "STABLEHLO_GATHER_INT32",
    "STABLEHLO_GATHER_INT64",
    "STABLEHLO_GATHER_TAKE",
    "STABLEHLO_GATHER_TAKE_INT32",
    "STABLEHLO_GATHER_ND",
    "STABLEHLO_GATHER_ND_INT8",
    "STABLEHLO_SCATTER",
    "STABLEHLO_SCATTER_INT8",
    "STABLEHLO_SCATTER_UINT8",
    "STABLEHLO_SCATTER_INT16",
    "STABLEHLO_SCATTER_INT32",
    "STABLEHLO_SCATTER_INT64",
    "STABLEHLO_SCATTER_UPDATE",
    "STABLEHLO_SCATTER_UPDATE_INT32",
    "STABLEHLO_SCATTER_ADD",
    "STABLEHLO_SCATTER_ADD_INT64",
    "STABLEHLO_SCATTER_BUILTIN",
    "STABLEHLO_GATHER_BOOL",
    "STABLEHLO_SCATTER_BOOL",
    "STABLEHLO_GATHER_NARROW_INDICES",
    "STABLEHLO_SCATTER_SUB",
    "STABLEHLO_SCATTER_TWO_OPS",
    // The 16x8 integer LSTM (int16 activations, int8 weights), which LiteRT refuses
    // (see REFUSED).
    "LSTM_INT16",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_INT16",
    // LiteRT's legacy 8-bit basic LSTM cell (the LSTM op with kernel_type BASIC), and
    // the uint8 sequence LSTM LiteRT refuses (see REFUSED).
    "LSTM_UINT8",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_UINT8",
];

/// Ops compared with LiteRT's builtin (optimized) kernels rather than its reference
/// kernels: LiteRT's reference LOCAL_RESPONSE_NORMALIZATION sums the squares of
/// `c - radius .. c + radius - 1` (one short of TensorFlow's window, which its
/// optimized kernel and ferrite sum).
///
/// Quantized SUM likewise: LiteRT 2.3.0's reference SUM reads int8 inputs as
/// uint8 bytes, rounds `x + 0.5` and wraps the result instead of clamping, and
/// returns unwritten memory for int16 (measured), while its builtin kernel, the
/// one models run on, computes the integer rescale of the sums that ferrite does.
const BUILTIN_ORACLE: &[&str] =
    &["LOCAL_RESPONSE_NORMALIZATION", "SUM_INT8", "SUM_UINT8", "SUM_INT16", "SUM_RESCALED_INT8", "SUM_RESCALED_UINT8", "SUM_RESCALED_INT16"];

/// Type combinations LiteRT has no kernel for; the suite checks that ferrite, like
/// it, refuses them with an error rather than computing something.
///
/// The 16x8 LSTM: LiteRT 2.3.0's LSTM and UNIDIRECTIONAL_SEQUENCE_LSTM take the
/// integer path only for int8 input; int16 input is checked as a float LSTM, so its
/// int32 biases and int16 peepholes fail prepare (and with float biases the eval
/// still dispatches on the int8 weights to the 8x8->16 kernel, whose temporaries
/// prepare never made: "Invalid tensor index" at invoke; measured).
const REFUSED: &[&str] = &[
    "HARD_SWISH_INT16",
    "BATCH_MATMUL_UINT8",
    "DETECTION_POSTPROCESS_INT8",
    "ADD_N_INT64",
    "REVERSE_SEQUENCE_INT8",
    "FAKE_QUANT_NARROW",
    "LSTM_INT16",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_INT16",
    "UNIDIRECTIONAL_SEQUENCE_LSTM_UINT8",
];

/// Which output rows of a `TFLite_Detection_PostProcess` case LiteRT defines:
/// fast NMS writes `min(max_classes_per_detection, num_classes)` rows per kept
/// box in blocks of `max_classes_per_detection`; regular NMS the first
/// `max_detections` rows (zero past the detections). LiteRT leaves the other
/// rows as it found them (ferrite zeroes them), so the harness compares these
/// only. `null` for other ops.
fn detection_rows(case: &Case) -> Value {
    use ferrite_format::flexbuffers::FlexMap;
    let Some(bytes) = case.spec.ops.iter().find(|o| o.code == OpCode::Custom("TFLite_Detection_PostProcess".into())).and_then(|o| o.custom_options.as_ref())
    else {
        return Value::Null;
    };
    let Ok(m) = FlexMap::root(bytes) else { return Value::Null };
    let int = |k: &str| m.get(k).map(|v| v.as_i64()).unwrap_or(0);
    json!({
        "regular": m.get("use_regular_nms").map(|v| v.as_bool()).unwrap_or(false),
        "max_detections": int("max_detections"),
        "max_classes_per_detection": int("max_classes_per_detection"),
        "num_classes": int("num_classes"),
    })
}

/// A small float CNN, built with the writer: conv -> depthwise -> pool -> FC -> softmax.
fn demo() -> Result<Vec<u8>, String> {
    let mut r = Rng(7);
    let mut m = ModelSpec { description: "ferrite demo: tiny image classifier".into(), ..Default::default() };
    let x = f32in(&mut m, "image", &[1, 32, 32, 3]);
    let w1v = r.floats(8 * 3 * 3 * 3, -0.5, 0.5);
    let w1 = m.add_tensor(TensorSpec::const_f32("conv1/w", &[8, 3, 3, 3], &w1v));
    let b1 = m.add_tensor(TensorSpec::const_f32("conv1/b", &[8], &[0.1; 8]));
    let c1 = m.add_tensor(TensorSpec::activation("conv1", TensorType::FLOAT32, &[1, 16, 16, 8]));
    m.add_op(
        OpCode::Builtin(B::CONV_2D),
        &[x, w1, b1],
        &[c1],
        Options::Conv2D { padding: Padding::SAME, stride: (2, 2), dilation: (1, 1), activation: Activation::RELU6 },
    );
    let w2v = r.floats(9 * 8, -0.5, 0.5);
    let w2 = m.add_tensor(TensorSpec::const_f32("dw/w", &[1, 3, 3, 8], &w2v));
    let b2 = m.add_tensor(TensorSpec::const_f32("dw/b", &[8], &[0.0; 8]));
    let c2 = m.add_tensor(TensorSpec::activation("dw", TensorType::FLOAT32, &[1, 16, 16, 8]));
    m.add_op(
        OpCode::Builtin(B::DEPTHWISE_CONV_2D),
        &[c1, w2, b2],
        &[c2],
        Options::DepthwiseConv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), depth_multiplier: 1, activation: Activation::RELU },
    );
    let p = m.add_tensor(TensorSpec::activation("pool", TensorType::FLOAT32, &[1, 1, 1, 8]));
    m.add_op(
        OpCode::Builtin(B::AVERAGE_POOL_2D),
        &[c2],
        &[p],
        Options::Pool2D { padding: Padding::VALID, stride: (16, 16), filter: (16, 16), activation: Activation::NONE },
    );
    let w3v = r.floats(10 * 8, -1.0, 1.0);
    let w3 = m.add_tensor(TensorSpec::const_f32("fc/w", &[10, 8], &w3v));
    let b3 = m.add_tensor(TensorSpec::const_f32("fc/b", &[10], &[0.0; 10]));
    let f = m.add_tensor(TensorSpec::activation("logits", TensorType::FLOAT32, &[1, 10]));
    m.add_op(
        OpCode::Builtin(B::FULLY_CONNECTED),
        &[p, w3, b3],
        &[f],
        Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false },
    );
    let s = m.add_tensor(TensorSpec::activation("probabilities", TensorType::FLOAT32, &[1, 10]));
    m.add_op(OpCode::Builtin(B::SOFTMAX), &[f], &[s], Options::Softmax { beta: 1.0 });
    m.outputs.push(s);
    m.to_bytes().map_err(|e| e.to_string())
}

/// One FULLY_CONNECTED layer, `[m, k]` input by constant `[n, k]` weights: the GEMM
/// of the GPU speed benchmark (tools/gpu_bench.py), its FLOP count 2·m·k·n exact.
/// Written here rather than shipped: a 4096³ layer is 64 MB of weights.
fn gemm(m_rows: i32, k: i32, n: i32) -> Result<Vec<u8>, String> {
    let mut r = Rng(11);
    let mut m = ModelSpec { description: format!("ferrite GEMM benchmark: [{m_rows}, {k}] x [{k}, {n}]"), ..Default::default() };
    let x = f32in(&mut m, "x", &[m_rows, k]);
    let w = m.add_tensor(TensorSpec::const_f32("w", &[n, k], &r.floats(n as usize * k as usize, -0.05, 0.05)));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[n], &r.floats(n as usize, -0.1, 0.1)));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[m_rows, n]));
    let fc = Options::FullyConnected { activation: Activation::NONE, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(B::FULLY_CONNECTED), &[x, w, b], &[y], fc);
    m.outputs.push(y);
    m.to_bytes().map_err(|e| e.to_string())
}

/// One quantized CONV_2D over `[1, h, w, c]` to `oc` channels, a `kh x kw`
/// filter with SAME padding, `stride` and dilation `dil` (rows, columns):
/// int8 with per-channel weight scales, or uint8 with a per-tensor weight zero
/// point away from 128 (older converters' models). The kernel benchmarks'
/// single-op models (timed against LiteRT with tools/bench_compare.py).
#[allow(clippy::too_many_arguments)]
fn qconv(dims: [i32; 4], kh: i32, kw: i32, stride: i32, dil: (i32, i32), unsigned: bool) -> Result<Vec<u8>, String> {
    let [h, w, c, oc] = dims;
    let mut r = Rng(17);
    let kind = if unsigned { "uint8" } else { "int8" };
    let mut m =
        ModelSpec { description: format!("ferrite {kind} CONV_2D benchmark: {h}x{w}x{c} -> {oc}, {kh}x{kw}/{stride} dilation {dil:?}"), ..Default::default() };
    let (ty, off) = if unsigned { (TensorType::UINT8, 128) } else { (TensorType::INT8, 0) };
    let s_in = 0.05;
    let x = m.add_tensor(TensorSpec { quant: Some((vec![s_in], vec![off - 3], 0)), ..TensorSpec::activation("x", ty, &[1, h, w, c]) });
    m.inputs.push(x);
    let n_w = (oc * kh * kw * c) as usize;
    let wscales: Vec<f32> = if unsigned { vec![0.01] } else { (0..oc).map(|_| r.f(0.002, 0.02)).collect() };
    let (wzp, wdata): (i64, Vec<u8>) =
        if unsigned { (113, (0..n_w).map(|_| r.int(0, 255) as u8).collect()) } else { (0, (0..n_w).map(|_| r.int(-127, 127) as i8 as u8).collect()) };
    let wt = m.add_tensor(TensorSpec {
        data: Some(wdata),
        quant: Some((wscales.clone(), vec![wzp; wscales.len()], 0)),
        ..TensorSpec::activation("w", ty, &[oc, kh, kw, c])
    });
    let bscales: Vec<f32> = wscales.iter().map(|&w| s_in * w).collect();
    let boc = bscales.len();
    let bdata: Vec<u8> = (0..oc).flat_map(|_| (r.int(-2000, 2000) as i32).to_le_bytes()).collect();
    let bt = m.add_tensor(TensorSpec { data: Some(bdata), quant: Some((bscales, vec![0; boc], 0)), ..TensorSpec::activation("b", TensorType::INT32, &[oc]) });
    // The output's shape written out (SAME): LiteRT's XNNPACK delegate takes
    // only static shapes, and the comparison is against it.
    let y = m.add_tensor(TensorSpec {
        quant: Some((vec![0.2], vec![off + 5], 0)),
        ..TensorSpec::activation("y", ty, &[1, (h + stride - 1) / stride, (w + stride - 1) / stride, oc])
    });
    m.outputs.push(y);
    let opts = Options::Conv2D { padding: Padding::SAME, stride: (stride, stride), dilation: dil, activation: Activation::RELU };
    m.add_op(OpCode::Builtin(B::CONV_2D), &[x, wt, bt], &[y], opts);
    m.to_bytes().map_err(|e| e.to_string())
}

/// `n` element-wise ops in a chain on a `[1, 8]` tensor (ADD and MUL of constants,
/// alternating so that no converter-style folding could merge them): the model of
/// the per-op overhead measurement (tools/op_overhead.py), where the kernels' work
/// is a few instructions and the rest is the runtime's fixed cost per op.
fn chain(n: usize) -> Result<Vec<u8>, String> {
    let mut r = Rng(13);
    let mut m = ModelSpec { description: format!("ferrite per-op overhead: {n} element-wise ops on [1, 8]"), ..Default::default() };
    let mut x = f32in(&mut m, "x", &[1, 8]);
    for i in 0..n {
        let c = m.add_tensor(TensorSpec::const_f32(&format!("c{i}"), &[1, 8], &r.floats(8, 0.9, 1.1)));
        let y = m.add_tensor(TensorSpec::activation(&format!("y{i}"), TensorType::FLOAT32, &[1, 8]));
        let op = if i % 2 == 0 { B::ADD } else { B::MUL };
        m.add_op(OpCode::Builtin(op), &[x, c], &[y], Options::Binary { activation: Activation::NONE });
        x = y;
    }
    m.outputs.push(x);
    m.to_bytes().map_err(|e| e.to_string())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("demo") => {
            let path = args.get(2).ok_or("usage: ferrite-opgen demo OUT.tflite")?;
            std::fs::write(path, demo()?).map_err(|e| e.to_string())
        }
        Some("probe") => {
            let dir = std::path::PathBuf::from(args.get(2).ok_or("usage: ferrite-opgen probe OUTDIR [--seed S]")?);
            let seed = args.iter().position(|a| a == "--seed").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(1);
            probe::write(&dir, seed)
        }
        Some("ops") => {
            let dir = std::path::PathBuf::from(args.get(2).ok_or("usage: ferrite-opgen ops OUTDIR [--seed S] [--per-op K]")?);
            let flag = |name: &str, d: u64| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(d);
            let (seed, per_op) = (flag("--seed", 1), flag("--per-op", 4));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let mut entries: Vec<Value> = vec![];
            for (oi, op) in OPS.iter().enumerate() {
                for k in 0..per_op {
                    let mut r = Rng(seed.wrapping_mul(1_000_003).wrapping_add((oi as u64) << 20 | k));
                    let case = gen(op, &mut r);
                    let file = format!("{}_{k}.tflite", op.to_lowercase());
                    let bytes = case.spec.to_bytes().map_err(|e| format!("{file}: {e}"))?;
                    std::fs::write(dir.join(&file), bytes).map_err(|e| e.to_string())?;
                    let fixed: serde_json::Map<String, Value> = case.fixed.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
                    entries.push(json!({
                        "file": file,
                        "op": op,
                        "ranges": case.ranges,
                        "fixed": fixed,
                        "integral": matches!(*op, "EQUAL" | "NOT_EQUAL" | "TOPK_V2_TIES" | "UNIQUE"),
                        "refused": REFUSED.contains(op) || hlo::REFUSED.contains(op) || rngbits::REFUSED.contains(op) || hlo_index::REFUSED.contains(op),
                        "builtin_oracle": BUILTIN_ORACLE.contains(op) || qelem::BUILTIN_ORACLE.contains(op),
                        "steps": stream_steps(op),
                        "exact": rand::is_stream(op) || rngbits::handles(op) || tconv::OPS.contains(op),
                        "detection_rows": detection_rows(&case),
                        "strings": strings::take_inputs(),
                    }));
                }
            }
            std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&entries).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
        }
        Some("gemm") => {
            let usage = "usage: ferrite-opgen gemm OUT.tflite M K N";
            let path = args.get(2).ok_or(usage)?;
            let dim = |i: usize| args.get(i).and_then(|v| v.parse::<i32>().ok()).filter(|&d| (1..=1 << 16).contains(&d)).ok_or(usage);
            let (m, k, n) = (dim(3)?, dim(4)?, dim(5)?);
            std::fs::write(path, gemm(m, k, n)?).map_err(|e| e.to_string())
        }
        Some("qconv") => {
            let usage = "usage: ferrite-opgen qconv OUT.tflite H W C OC KH KW STRIDE DIL_H DIL_W int8|uint8";
            let path = args.get(2).ok_or(usage)?;
            let dim = |i: usize| args.get(i).and_then(|v| v.parse::<i32>().ok()).filter(|&d| (1..=1 << 12).contains(&d)).ok_or(usage);
            let unsigned = match args.get(12).map(String::as_str) {
                Some("int8") => false,
                Some("uint8") => true,
                _ => return Err(usage.into()),
            };
            let bytes = qconv([dim(3)?, dim(4)?, dim(5)?, dim(6)?], dim(7)?, dim(8)?, dim(9)?, (dim(10)?, dim(11)?), unsigned)?;
            std::fs::write(path, bytes).map_err(|e| e.to_string())
        }
        Some("chain") => {
            let usage = "usage: ferrite-opgen chain OUT.tflite N";
            let path = args.get(2).ok_or(usage)?;
            let n = args.get(3).and_then(|v| v.parse::<usize>().ok()).filter(|&n| (1..=10_000).contains(&n)).ok_or(usage)?;
            std::fs::write(path, chain(n)?).map_err(|e| e.to_string())
        }
        _ => Err(
            "usage: ferrite-opgen ops OUTDIR [--seed S] [--per-op K] | probe OUTDIR [--seed S] | demo OUT.tflite | gemm OUT.tflite M K N | qconv OUT.tflite H W C OC KH KW STRIDE DIL_H DIL_W int8|uint8 | chain OUT.tflite N"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use ferrite_format::ops::{BuiltinOp, Types};

    /// Ops of the op table without a generated case here, and why.
    const NOT_GENERATED: &[(&str, &str)] = &[
        ("CEIL", "LiteRT's reference resolver has no kernel to compare with"),
        ("ROUND", "LiteRT's reference resolver has no kernel to compare with"),
        ("BROADCAST_TO", "LiteRT's reference resolver has no kernel to compare with"),
        ("DENSIFY", "sparse constants come from the converter; checked on the corpus's sparse fp16 models"),
        ("HASHTABLE_IMPORT", "only meaningful with a table: every HASHTABLE_FIND_* case imports, finds and sizes"),
        ("HASHTABLE_SIZE", "only meaningful with a table: every HASHTABLE_FIND_* case imports, finds and sizes"),
    ];

    /// The generator covers every op of the op table (cases are named by the op,
    /// or by the op and a variant: `CONV_2D_INT8`), except the ones listed above;
    /// the executor's ops are covered by the IF, WHILE and VARIABLES cases.
    #[test]
    fn every_table_op_has_a_generated_case() {
        let covered = |name: &str| super::OPS.iter().any(|c| *c == name || c.starts_with(&format!("{name}_")));
        let missing: Vec<&str> = BuiltinOp::ALL
            .iter()
            .filter(|op| !op.types().contains(Types::EXECUTOR))
            .map(|op| op.name())
            .filter(|n| !covered(n) && !NOT_GENERATED.iter().any(|(m, _)| m == n))
            .collect();
        assert!(missing.is_empty(), "ops of the table with no generated case: {missing:?}");
        for (n, _) in NOT_GENERATED {
            assert!(BuiltinOp::from_name(n).is_some(), "{n} is not in the op table");
            assert!(!covered(n), "{n} has a generated case now: drop it from NOT_GENERATED");
        }
        for case in super::rand::OPS.iter().chain(super::rand::REFUSED) {
            assert!(super::OPS.contains(case), "{case} of rand.rs is not listed in OPS");
        }
        for case in super::rngbits::OPS.iter().chain(super::rngbits::REFUSED) {
            assert!(super::OPS.contains(case), "{case} of rngbits.rs is not listed in OPS");
        }
        for case in super::hlo_index::OPS.iter().chain(super::hlo_index::REFUSED) {
            assert!(super::OPS.contains(case), "{case} of hlo_index.rs is not listed in OPS");
        }
        for case in ["IF", "WHILE", "VARIABLES"] {
            assert!(super::OPS.contains(&case));
        }
        for case in super::qelem::OPS {
            assert!(super::OPS.contains(case), "{case} is not listed in OPS");
        }
        for case in super::qnorm::OPS {
            assert!(super::OPS.contains(case), "{case} is not listed in OPS");
        }
        for case in super::tconv::OPS {
            assert!(super::OPS.contains(case), "{case} of tconv.rs is not listed in OPS");
        }
    }
    /// Every case (two seeds each) and the demo model write: their options fit
    /// each op's options table, which the writer checks.
    #[test]
    fn every_case_writes() {
        for (oi, op) in super::OPS.iter().enumerate() {
            for seed in [1u64, 2] {
                let case = super::gen(op, &mut super::Rng(seed.wrapping_mul(1_000_003).wrapping_add((oi as u64) << 20)));
                if let Err(e) = case.spec.to_bytes() {
                    panic!("{op}: {e}");
                }
            }
        }
        assert!(super::demo().is_ok());
    }
}
