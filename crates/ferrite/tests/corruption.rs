//! Hostile-input test: thousands of seeded mutations of real models (bit flips,
//! truncations, splices, index overwrites) go through load -> prepare -> run.
//! Any outcome but a panic is acceptable; a panic fails the test with its seed.
//!
//! Seeds: the demo model the repository ships, plus corpus models when
//! FERRITE_CORPUS points at the fetched corpus (scripts/test.sh sets it).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;

use ferrite::{Model, Session, SessionOptions};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = seed.to_vec();
    match rng.below(4) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => b.truncate(rng.below(b.len())),
        2 => {
            let (from, to) = (rng.below(b.len()), rng.below(b.len()));
            let n = rng.below(64).min(b.len() - from).min(b.len() - to);
            let chunk = b[from..from + n].to_vec();
            b[to..to + n].copy_from_slice(&chunk);
        }
        _ => {
            // Overwrite an aligned word with a value likely to be an index or size.
            let i = rng.below(b.len() / 4) * 4;
            let v: u32 = match rng.below(5) {
                0 => rng.below(16) as u32,
                1 => u32::MAX,
                2 => 0x7fff_ffff,
                3 => rng.below(1 << 20) as u32,
                _ => rng.next() as u32,
            };
            if i + 4 <= b.len() {
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    b
}

/// Loads, prepares and (for small graphs) runs one mutated model. Errors are fine.
fn exercise(bytes: Vec<u8>, run: bool) {
    let Ok(model) = Model::from_bytes(Arc::new(bytes)) else { return };
    let opts = SessionOptions { max_arena_bytes: 32 << 20, ..Default::default() };
    let Ok(mut s) = Session::with_options(Arc::new(model), opts) else { return };
    if s.prepare().is_err() || !run {
        return;
    }
    for (k, d) in s.inputs().iter().enumerate() {
        let n: usize = d.shape.iter().product::<usize>() * d.dtype.size().unwrap_or(1);
        let _ = s.set_input(k, &vec![0x3f; n]);
    }
    let _ = s.run();
    for k in 0..s.outputs().len() {
        let _ = s.output(k);
    }
}

fn seeds() -> Vec<(String, Vec<u8>, usize, bool)> {
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/demo.tflite");
    let mut v = vec![("demo.tflite".to_string(), std::fs::read(&demo).expect("models/demo.tflite is in the repository"), 3000, true)];
    if let Ok(dir) = std::env::var("FERRITE_CORPUS") {
        // Small corpus models, chosen to cover fp16 DEQUANTIZE, sparse DENSIFY, PRELU, FC stacks and resizes.
        for (name, count, run) in [
            ("alexa_v0.1.tflite", 1500, true),
            ("hey_mycroft_v0.1.tflite", 1500, true),
            ("melspectrogram.tflite", 600, false),
            ("hand_recrop.tflite", 400, false),
            ("face_detection_short_range.tflite", 400, false),
            ("face_detection_full_range_sparse.tflite", 300, false),
            ("selfie_segmentation.tflite", 300, false),
        ] {
            let found = walk(PathBuf::from(&dir)).into_iter().find(|p| p.file_name().is_some_and(|f| f == name));
            match found {
                Some(p) => v.push((name.to_string(), std::fs::read(p).expect("readable corpus model"), count, run)),
                None => panic!("FERRITE_CORPUS is set but {name} is missing under {dir}"),
            }
        }
    } else {
        eprintln!("FERRITE_CORPUS not set: mutating only the shipped demo model");
    }
    v
}

fn walk(dir: PathBuf) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn mutated_models_never_panic() {
    let mut total = 0;
    let mut loaded = 0;
    for (name, seed, count, run) in seeds() {
        let mut panics = vec![];
        for i in 0..count {
            let mut rng = Rng(0xfe77_17e0 ^ (i as u64) ^ ((name.len() as u64) << 40));
            let bytes = mutate(&seed, &mut rng);
            if Model::from_bytes(Arc::new(bytes.clone())).is_ok() {
                loaded += 1;
            }
            if catch_unwind(AssertUnwindSafe(|| exercise(bytes, run))).is_err() {
                panics.push(i);
            }
        }
        total += count;
        assert!(panics.is_empty(), "{name}: mutations {panics:?} panicked");
    }
    println!("corruption: {total} mutated models, {loaded} still loadable, 0 panics");
}

#[test]
fn truncations_of_demo_give_errors_naming_the_problem() {
    let demo = std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/demo.tflite")).unwrap();
    for cut in [0, 4, 7, 16, demo.len() / 2, demo.len() - 1] {
        let e = Model::from_bytes(Arc::new(demo[..cut].to_vec())).err().unwrap_or_else(|| panic!("truncation at {cut} loaded"));
        let msg = e.to_string();
        assert!(msg.contains("byte") || msg.contains("too small") || msg.contains("subgraph"), "unhelpful error: {msg}");
    }
}

/// Output sizes read from constants (a resize target, a transposed convolution's
/// output_shape) are bounded before prepare allocates anything for them: a valid
/// but absurd file gets a resource-limit error, not an abort.
#[test]
fn absurd_constant_output_sizes_are_refused() {
    use ferrite_format::schema::TensorType;
    use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};
    let huge = 1 << 30;
    let resize = {
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 2, 2, 1]));
        let size = m.add_tensor(TensorSpec::const_i32("size", &[2], &[huge, huge]));
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[]));
        m.add_op(OpCode::Builtin(B::RESIZE_BILINEAR), &[x, size], &[y], Options::Resize { align_corners: false, half_pixel_centers: false });
        m.inputs = vec![x];
        m.outputs = vec![y];
        m.to_bytes().unwrap()
    };
    let transpose_conv = {
        let mut m = ModelSpec::default();
        let q = |s: f32| Some((vec![s], vec![0i64], 0));
        let os = m.add_tensor(TensorSpec::const_i32("output_shape", &[4], &[1, huge, huge, 1]));
        let w = m.add_tensor(TensorSpec { data: Some(vec![1]), quant: q(0.01), ..TensorSpec::activation("w", TensorType::INT8, &[1, 1, 1, 1]) });
        let x = m.add_tensor(TensorSpec { quant: q(0.1), ..TensorSpec::activation("x", TensorType::INT8, &[1, 2, 2, 1]) });
        let y = m.add_tensor(TensorSpec { quant: q(0.1), ..TensorSpec::activation("y", TensorType::INT8, &[]) });
        let opts = Options::TransposeConv { padding: Padding::SAME, stride: (1, 1), activation: Activation::NONE };
        m.add_op(OpCode::Builtin(B::TRANSPOSE_CONV), &[os, w, x], &[y], opts);
        m.inputs = vec![x];
        m.outputs = vec![y];
        m.to_bytes().unwrap()
    };
    for (what, bytes) in [("RESIZE_BILINEAR", resize), ("TRANSPOSE_CONV", transpose_conv)] {
        let mut s = Session::from_bytes(Arc::new(bytes)).expect(what);
        let e = s.prepare().expect_err(what).to_string();
        assert!(e.contains(what) && e.contains("bytes"), "{what}: {e}");
        println!("{what}: {e}");
    }
}

/// A zero point outside its element type's range is refused at load, naming the tensor.
#[test]
fn out_of_range_zero_points_are_refused() {
    use ferrite_format::schema::TensorType;
    use ferrite_format::writer::{BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};
    for (ty, zp) in [(TensorType::INT8, 1000i64), (TensorType::UINT8, -1), (TensorType::INT16, 1 << 20)] {
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec { quant: Some((vec![0.1], vec![zp], 0)), ..TensorSpec::activation("x", ty, &[4]) });
        let y = m.add_tensor(TensorSpec { quant: Some((vec![0.1], vec![0], 0)), ..TensorSpec::activation("y", ty, &[4]) });
        m.add_op(OpCode::Builtin(B::RELU), &[x], &[y], Options::None);
        m.inputs = vec![x];
        m.outputs = vec![y];
        let e = Session::from_bytes(Arc::new(m.to_bytes().unwrap())).expect_err("zero point out of range").to_string();
        assert!(e.contains("zero point") && e.contains("'x'"), "{e}");
    }
}
