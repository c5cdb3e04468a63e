//! Chains of float element-wise ops run as one step (`compile/chains.rs`) give
//! bit-identical results to the same ops run one step each, over random chains:
//! unary ops and activations, binary ops with a second input, a scalar constant, a
//! per-channel row or another value of the chain, fused activations, values read
//! after the chain (graph outputs) and ops that break it (a SOFTMAX), on one and two
//! threads, and observed op by op.

use std::sync::Arc;

use ferrite::{Flow, Session, SessionOptions, TensorState};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

/// Xorshift: small, seeded, reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn value(&mut self) -> f32 {
        (self.below(4001) as f32 - 2000.0) / 500.0
    }
}

/// A random element-wise model over `shape`: inputs x and y of that shape; returns
/// the model's bytes.
fn random_model(r: &mut Rng, shape: &[i32]) -> Vec<u8> {
    let c = *shape.last().unwrap();
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, shape));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, shape));
    let scalar = m.add_tensor(TensorSpec::const_f32("scalar", &[], &[r.value()]));
    let row_values: Vec<f32> = (0..c).map(|_| r.value()).collect();
    let row = m.add_tensor(TensorSpec::const_f32("row", &[1, c], &row_values));
    let mut values = vec![x];
    let mut outputs = Vec::new();
    let unary = [B::RELU6, B::HARD_SWISH, B::LOGISTIC, B::TANH, B::ABS, B::NEG, B::SQUARE, B::RELU, B::EXP];
    let binary = [B::ADD, B::SUB, B::MUL, B::DIV, B::MAXIMUM, B::MINIMUM, B::SQUARED_DIFFERENCE];
    let acts = [Activation::NONE, Activation::RELU, Activation::RELU6, Activation::RELU_N1_TO_1];
    for k in 0..2 + r.below(8) {
        let out = m.add_tensor(TensorSpec::activation(&format!("v{k}"), TensorType::FLOAT32, shape));
        // Mostly the latest value, so chains form; sometimes an older one.
        let a = if r.below(4) == 0 { values[r.below(values.len())] } else { *values.last().unwrap() };
        match r.below(10) {
            0 => m.add_op(OpCode::Builtin(B::SOFTMAX), &[a], &[out], Options::Softmax { beta: 1.0 }),
            1..=4 => m.add_op(OpCode::Builtin(unary[r.below(unary.len())]), &[a], &[out], Options::None),
            _ => {
                let b = [y, scalar, row, values[r.below(values.len())]][r.below(4)];
                let (a, b) = if r.below(2) == 0 { (a, b) } else { (b, a) };
                let code = binary[r.below(binary.len())];
                let options = match code {
                    B::ADD | B::SUB | B::MUL | B::DIV => Options::Binary { activation: acts[r.below(acts.len())] },
                    _ => Options::None,
                };
                m.add_op(OpCode::Builtin(code), &[a, b], &[out], options);
            }
        }
        if r.below(5) == 0 {
            outputs.push(out);
        }
        values.push(out);
    }
    outputs.push(*values.last().unwrap());
    m.inputs = vec![x, y];
    m.outputs = outputs;
    m.to_bytes().unwrap()
}

/// What [`run`] returns.
type Ran = (Vec<Vec<u32>>, Vec<Option<Vec<u8>>>, usize);

/// The outputs of one run (their bits), the value each op's `after` callback saw
/// (None when not run with callbacks), and how many ops ran in chains.
fn run(bytes: &[u8], inputs: &[Vec<f32>], threads: usize, fuse: bool, observe: bool) -> Ran {
    let m = Arc::new(ferrite::Model::from_bytes(Arc::new(bytes.to_vec())).unwrap());
    let ops = m.subgraphs()[0].ops.len();
    let mut s = Session::with_options(m, SessionOptions { threads, ..Default::default() }).unwrap();
    s.set_fuse_chains(fuse).unwrap();
    s.prepare().unwrap();
    for (k, x) in inputs.iter().enumerate() {
        s.set_input_f32(k, x).unwrap();
    }
    let mut seen = vec![None; ops];
    if observe {
        s.run_with_callbacks(
            |_| Flow::Continue,
            |ev| {
                if let Some(o) = ev.outputs.first().filter(|o| o.state == TensorState::Ready) {
                    seen[ev.index] = o.data.map(<[u8]>::to_vec);
                }
                Flow::Continue
            },
        )
        .unwrap();
    } else {
        s.run().unwrap();
    }
    let outs = (0..s.outputs().len()).map(|k| s.output(k).unwrap().to_f32().unwrap().iter().map(|v| v.to_bits()).collect()).collect();
    (outs, seen, s.chained_op_count().unwrap())
}

#[test]
fn random_chains_match_their_ops_run_one_by_one() {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    let mut chained = 0;
    for case in 0..48 {
        // Odd channel counts, a short last block, tensors too small to chain, and
        // (every eighth case) one large enough for a chain to split over two threads.
        let c = 1 + 2 * r.below(5) as i32;
        let side = |r: &mut Rng| if case % 6 == 5 { 1 + r.below(20) as i32 } else { 46 + r.below(30) as i32 };
        let shape: Vec<i32> = if case % 8 == 7 { vec![1, 96, 96, c] } else { vec![1, side(&mut r), side(&mut r), c] };
        let bytes = random_model(&mut r, &shape);
        let n: usize = shape.iter().map(|&d| d as usize).product();
        let inputs: Vec<Vec<f32>> = (0..2).map(|_| (0..n).map(|_| r.value()).collect()).collect();
        for threads in [1, 2] {
            let (want, _, none) = run(&bytes, &inputs, threads, false, false);
            assert_eq!(none, 0);
            let (got, _, k) = run(&bytes, &inputs, threads, true, false);
            assert_eq!(got, want, "case {case} threads {threads}");
            chained += k;
        }
        // Observed, each op of a chain is reported with the value it computed.
        let (_, want, _) = run(&bytes, &inputs, 1, false, true);
        let (_, got, _) = run(&bytes, &inputs, 1, true, true);
        assert_eq!(got, want, "case {case} observed");
    }
    assert!(chained > 100, "only {chained} ops ran in chains");
}
