//! A steady-state training step allocates nothing on the heap: every buffer of
//! the step is planned in the trainer's arena when it is built.
//!
//! Built without the test harness (`harness = false`): the count is process-wide
//! so that the trainer's pool threads are counted too, and the harness's own thread
//! allocates (its bookkeeping of the running test) at moments that race with the
//! measured steps, which made the count flaky on a loaded machine.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ferrite::{Loss, Model, Optimizer, TrainConfig, Trainer};
use ferrite_format::writer::{Activation, BuiltinOperator as BO, ModelSpec, OpCode, Options, TensorSpec, TensorType};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    a_training_step_allocates_nothing();
    println!("test a_training_step_allocates_nothing ... ok");
}

fn a_training_step_allocates_nothing() {
    // x[1, 32] -> FC(RELU) 64 -> ADD(bias-like const) -> FC 10 -> SOFTMAX.
    let mut m = ModelSpec::default();
    let v = |n: usize, s: f32| (0..n).map(|i| ((i * 7919) % 97) as f32 / 97.0 * s - s / 2.0).collect::<Vec<f32>>();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 32]));
    let w1 = m.add_tensor(TensorSpec::const_f32("w1", &[64, 32], &v(64 * 32, 0.5)));
    let b1 = m.add_tensor(TensorSpec::const_f32("b1", &[64], &v(64, 0.1)));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::FLOAT32, &[1, 64]));
    let c = m.add_tensor(TensorSpec::const_f32("c", &[64], &v(64, 0.2)));
    let h2 = m.add_tensor(TensorSpec::activation("h2", TensorType::FLOAT32, &[1, 64]));
    let w2 = m.add_tensor(TensorSpec::const_f32("w2", &[10, 64], &v(640, 0.5)));
    let b2 = m.add_tensor(TensorSpec::const_f32("b2", &[10], &v(10, 0.1)));
    let z = m.add_tensor(TensorSpec::activation("z", TensorType::FLOAT32, &[1, 10]));
    let p = m.add_tensor(TensorSpec::activation("p", TensorType::FLOAT32, &[1, 10]));
    let fc = |a| Options::FullyConnected { activation: a, keep_num_dims: false, asymmetric_quantize_inputs: false };
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[x, w1, b1], &[h], fc(Activation::RELU));
    m.add_op(OpCode::Builtin(BO::ADD), &[h, c], &[h2], Options::Binary { activation: Activation::RELU6 });
    m.add_op(OpCode::Builtin(BO::FULLY_CONNECTED), &[h2, w2, b2], &[z], fc(Activation::NONE));
    m.add_op(OpCode::Builtin(BO::SOFTMAX), &[z], &[p], Options::Softmax { beta: 1.0 });
    m.inputs = vec![x];
    m.outputs = vec![p];
    let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
    for threads in [1, 2] {
        let cfg = TrainConfig { batch_size: 32, loss: Loss::CategoricalCrossEntropy, optimizer: Optimizer::adam(0.001), threads, ..Default::default() };
        let mut t = Trainer::new(model.clone(), cfg).unwrap();
        let xs = v(32 * 32, 2.0);
        let ys: Vec<f32> = (0..320).map(|i| if i % 10 == (i / 10) % 10 { 1.0 } else { 0.0 }).collect();
        // Warm up: the first step may touch lazily initialised state (the pool's threads).
        t.step(&[&xs], &ys).unwrap();
        let before = ALLOCS.load(Ordering::Relaxed);
        for _ in 0..5 {
            t.step(&[&xs], &ys).unwrap();
            t.evaluate(&[&xs], &ys).unwrap();
        }
        let n = ALLOCS.load(Ordering::Relaxed) - before;
        assert_eq!(n, 0, "{n} heap allocations in 5 steady-state steps on {threads} threads");
    }
}
