//! The C API as C programs use it: `tests/c/tflite_c_test.c`, compiled against the
//! headers in `include/` and linked to `libtensorflowlite_c.so`, run under
//! AddressSanitizer + UndefinedBehaviorSanitizer (leak checking included; the Rust
//! library itself is not instrumented).
//!
//! - always: the API contract and error paths on the demo model and on models written
//!   here (a signature with a resizable dim; a resource-variable accumulator; an op no
//!   runtime has);
//! - with `FERRITE_CORPUS`: a float, an int8 and a streaming int8 corpus model, whose
//!   outputs through the C API must equal ferrite's Rust API on the same inputs, bit
//!   for bit;
//! - with `FERRITE_TFLITE_C_REFERENCE` (LiteRT's own libtensorflowlite_c.so): the same
//!   program on LiteRT's library (its checks pass there too, and the corpus outputs
//!   agree within tolerance), and a program linked against LiteRT's library that runs
//!   on ferrite's by `LD_LIBRARY_PATH` alone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use ferrite::{DType, Model, Session, SessionOptions};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

/// The library built with this test: `cargo test` leaves the fresh cdylib next to the
/// test binary in `target/<profile>/deps` (only `cargo build` copies it up a level).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let lib = exe.parent().expect("test binary directory").join("libtensorflowlite_c.so");
    assert!(lib.exists(), "{} missing: cargo builds it with the tests", lib.display());
    lib
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn reference_library() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("FERRITE_TFLITE_C_REFERENCE")?);
    assert!(p.exists(), "FERRITE_TFLITE_C_REFERENCE={} does not exist", p.display());
    Some(p)
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrite-tflite-c-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles the test program; `link_dir` holds the libtensorflowlite_c.so it links to.
fn compile(out: &Path, link_dir: &Path, sanitize: bool) {
    let src = crate_dir().join("tests/c/tflite_c_test.c");
    let mut cmd = Command::new("cc");
    cmd.args(["-std=c11", "-D_POSIX_C_SOURCE=199309L", "-Wall", "-Wextra", "-Werror", "-g", "-O1"]);
    if sanitize {
        cmd.args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]);
    }
    let status = cmd
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(&src)
        .arg(format!("-L{}", link_dir.display()))
        .args(["-ltensorflowlite_c", "-lm", "-o"])
        .arg(out)
        .status()
        .expect("the system C compiler (cc) runs");
    assert!(status.success(), "compiling {} failed", src.display());
}

/// Runs the program with `lib_dir` first on the library path; returns its stdout.
fn run(exe: &Path, lib_dir: &Path, args: &[&str], leaks: bool) -> String {
    let asan = format!("detect_leaks={}:abort_on_error=0:exitcode=23", u8::from(leaks));
    let out = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir)
        .env("ASAN_OPTIONS", asan)
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        .output()
        .expect("run the C test program");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr));
    println!("{} {args:?} on {}:\n{stdout}{stderr}", exe.display(), lib_dir.display());
    assert!(out.status.success() && stdout.contains("tflite c test: ok"), "C test failed ({args:?} on {}):\n{stdout}\n{stderr}", lib_dir.display());
    stdout
}

/// y = relu(x * w + b) over x [1, 3] whose first dim may change (-1), signature "serve".
fn signature_model() -> Vec<u8> {
    let mut m = ModelSpec { signature_key: Some("serve".into()), ..Default::default() };
    let mut xs = TensorSpec::activation("x", TensorType::FLOAT32, &[1, 3]);
    xs.shape_signature = Some(vec![-1, 3]);
    let x = m.add_tensor(xs);
    let w = m.add_tensor(TensorSpec::const_f32("w", &[3], &[1.0, -2.0, 0.5]));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[3], &[0.25, 0.25, 0.25]));
    let xw = m.add_tensor(TensorSpec::activation("xw", TensorType::FLOAT32, &[1, 3]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 3]));
    m.add_op(OpCode::Builtin(B::MUL), &[x, w], &[xw], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(B::ADD), &[xw, b], &[y], Options::Binary { activation: Activation::RELU });
    m.inputs = vec![x];
    m.outputs = vec![y];
    m.to_bytes().unwrap()
}

/// state := state + x, the state a resource variable set to z = [1, -2, 0.5] by
/// CALL_ONCE; the output is the new state.
fn accumulator_model() -> Vec<u8> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[3]));
    let h = m.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
    let st = m.add_tensor(TensorSpec::activation("state", TensorType::FLOAT32, &[3]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[3]));
    m.add_op(OpCode::Builtin(B::CALL_ONCE), &[], &[], Options::CallOnce { init_subgraph: 1 });
    m.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[h], Options::VarHandle { container: String::new(), shared_name: "acc".into() });
    m.add_op(OpCode::Builtin(B::READ_VARIABLE), &[h], &[st], Options::None);
    m.add_op(OpCode::Builtin(B::ADD), &[st, x], &[y], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[h, y], &[], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![y];
    let mut init = ModelSpec::default();
    let ih = init.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
    let iz = init.add_tensor(TensorSpec::const_f32("z", &[3], &[1.0, -2.0, 0.5]));
    init.add_op(OpCode::Builtin(B::VAR_HANDLE), &[], &[ih], Options::VarHandle { container: String::new(), shared_name: "acc".into() });
    init.add_op(OpCode::Builtin(B::ASSIGN_VARIABLE), &[ih, iz], &[], Options::None);
    m.subgraphs.push(init);
    m.to_bytes().unwrap()
}

/// A custom op no runtime knows: interpreter creation must fail.
fn unknown_op_model() -> Vec<u8> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[4]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[4]));
    m.add_op(OpCode::Custom("NoSuchOp".into()), &[x], &[y], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![y];
    m.to_bytes().unwrap()
}

/// The models of the contract checks: the demo model and those written here.
struct ContractModels {
    demo: PathBuf,
    signature: PathBuf,
    accumulator: PathBuf,
    unknown_op: PathBuf,
}

fn contract_models(dir: &Path) -> ContractModels {
    let m = ContractModels {
        demo: crate_dir().join("../../models/demo.tflite"),
        signature: dir.join("signature.tflite"),
        accumulator: dir.join("accumulator.tflite"),
        unknown_op: dir.join("unknown_op.tflite"),
    };
    std::fs::write(&m.signature, signature_model()).unwrap();
    std::fs::write(&m.accumulator, accumulator_model()).unwrap();
    std::fs::write(&m.unknown_op, unknown_op_model()).unwrap();
    m
}

fn contract(exe: &Path, lib_dir: &Path, models: &ContractModels, leaks: bool) -> String {
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let mut out = run(exe, lib_dir, &["errors", &s(&models.demo), &s(&models.signature), &s(&models.unknown_op)], leaks);
    out += &run(exe, lib_dir, &["reset", &s(&models.accumulator)], leaks);
    out
}

#[test]
fn contract_and_error_paths_under_address_sanitizer() {
    let lib_dir = library().parent().unwrap().to_path_buf();
    let tmp = temp_dir("contract");
    let exe = tmp.join("tflite_c_test_asan");
    compile(&exe, &lib_dir, true);
    let models = contract_models(&tmp);
    let out = contract(&exe, &lib_dir, &models, true);
    assert!(out.contains("+ferrite."), "ran on ferrite's library");
    if let Some(reference) = reference_library() {
        // The same binary on LiteRT's library: the checks that hold for both pass there.
        // (LiteRT keeps process-lifetime allocations, so no leak check on it.)
        let out = contract(&exe, reference.parent().unwrap(), &models, false);
        assert!(!out.contains("ferrite"), "ran on LiteRT's library");
    }
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn a_program_linked_against_litert_runs_on_ferrite_by_library_path() {
    let Some(reference) = reference_library() else { return };
    let tmp = temp_dir("swap");
    let exe = tmp.join("tflite_c_test_litert");
    // Linked to LiteRT's library (its symbols carry LiteRT's version tags) ...
    compile(&exe, reference.parent().unwrap(), false);
    let models = contract_models(&tmp);
    // ... and run on ferrite's, found first on the library path.
    let out = contract(&exe, library().parent().unwrap(), &models, false);
    assert!(out.contains("+ferrite."), "the swapped-in library answered");
    std::fs::remove_dir_all(&tmp).ok();
}

/// One tensor of a dump: type code, dims, bytes.
#[derive(Debug, Clone, PartialEq)]
struct Dumped {
    type_code: i32,
    dims: Vec<i32>,
    bytes: Vec<u8>,
}

/// Reads the dump the C program writes: per invoke, each input then each output.
fn read_dump(path: &Path, n_in: usize, n_out: usize) -> Vec<(Vec<Dumped>, Vec<Dumped>)> {
    struct Cursor(Vec<u8>, usize);
    impl Cursor {
        fn take(&mut self, n: usize) -> &[u8] {
            self.1 += n;
            &self.0[self.1 - n..self.1]
        }
        fn i32(&mut self) -> i32 {
            i32::from_le_bytes(self.take(4).try_into().unwrap())
        }
        fn tensor(&mut self) -> Dumped {
            let type_code = self.i32();
            let rank = self.i32();
            let dims = (0..rank).map(|_| self.i32()).collect();
            let n = u64::from_le_bytes(self.take(8).try_into().unwrap()) as usize;
            Dumped { type_code, dims, bytes: self.take(n).to_vec() }
        }
    }
    let mut c = Cursor(std::fs::read(path).unwrap(), 0);
    let mut invokes = Vec::new();
    while c.1 < c.0.len() {
        let ins = (0..n_in).map(|_| c.tensor()).collect();
        let outs = (0..n_out).map(|_| c.tensor()).collect();
        invokes.push((ins, outs));
    }
    invokes
}

/// Worst difference between two outputs: in units of the element for integers, in
/// `|a - b| / (1 + |b|)` for floats.
fn worst_difference(a: &Dumped, b: &Dumped) -> f64 {
    assert_eq!((a.type_code, &a.dims, a.bytes.len()), (b.type_code, &b.dims, b.bytes.len()), "outputs differ in type or shape");
    match a.type_code {
        1 => {
            let f = |x: &[u8]| x.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect::<Vec<_>>();
            f(&a.bytes).iter().zip(f(&b.bytes)).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f64::max)
        }
        9 => a.bytes.iter().zip(&b.bytes).map(|(&x, &y)| (x as i8 as f64 - y as i8 as f64).abs()).fold(0.0, f64::max),
        3 => a.bytes.iter().zip(&b.bytes).map(|(&x, &y)| (x as f64 - y as f64).abs()).fold(0.0, f64::max),
        _ => f64::from(u8::from(a.bytes != b.bytes)),
    }
}

#[test]
fn corpus_models_agree_with_ferrite_and_litert() {
    let Ok(corpus) = std::env::var("FERRITE_CORPUS") else { return };
    let corpus = PathBuf::from(corpus);
    let lib_dir = library().parent().unwrap().to_path_buf();
    let tmp = temp_dir("corpus");
    let exe = tmp.join("tflite_c_test_asan");
    compile(&exe, &lib_dir, true);
    let reference = reference_library();
    // (model, LiteRT tolerance: relative for float outputs, units for integer ones)
    let models = [
        ("mediapipe-0.10.14/mediapipe/modules/face_detection/face_detection_short_range.tflite", 1e-4),
        ("tf-generated-2.19.1/tf_cnn_int8io.tflite", 1.0),
        ("pymicro-wakeword-2.5.0/pymicro_wakeword/models/alexa.tflite", 1.0),
    ];
    for (rel, tolerance) in models {
        let path = corpus.join(rel);
        assert!(path.exists(), "corpus model {} is missing", path.display());
        let dump = tmp.join("ferrite.dump");
        let p = path.to_str().unwrap();
        run(&exe, &lib_dir, &["run", p, dump.to_str().unwrap(), "3"], true);

        // ferrite's Rust API on the same inputs gives the same bytes.
        let model = Arc::new(Model::from_file(&path).unwrap());
        let mut s = Session::with_options(model, SessionOptions { threads: 2, ..SessionOptions::default() }).unwrap();
        s.prepare().unwrap();
        let (n_in, n_out) = (s.inputs().len(), s.outputs().len());
        let invokes = read_dump(&dump, n_in, n_out);
        assert_eq!(invokes.len(), 3);
        for (ins, outs) in &invokes {
            for (i, t) in ins.iter().enumerate() {
                s.set_input(i, &t.bytes).unwrap();
            }
            s.run().unwrap();
            for (o, t) in outs.iter().enumerate() {
                let got = s.output(o).unwrap();
                assert_eq!(got.bytes, &t.bytes[..], "{rel} output {o}: the C API and the Rust API differ");
                let dims: Vec<i32> = got.shape.iter().map(|&d| d as i32).collect();
                assert_eq!(dims, t.dims, "{rel} output {o} shape");
                assert_eq!(got.dtype.size().map(|_| ()), Some(()), "{rel} output {o} has a fixed-size type");
                assert!(matches!(got.dtype, DType::F32 | DType::I8 | DType::U8), "{rel}: output types as expected");
            }
        }

        // LiteRT's library on the same program and inputs.
        if let Some(reference) = &reference {
            let ref_dump = tmp.join("litert.dump");
            run(&exe, reference.parent().unwrap(), &["run", p, ref_dump.to_str().unwrap(), "3"], false);
            let theirs = read_dump(&ref_dump, n_in, n_out);
            let mut worst: f64 = 0.0;
            for ((ins_a, outs_a), (ins_b, outs_b)) in invokes.iter().zip(&theirs) {
                assert_eq!(ins_a, ins_b, "{rel}: both libraries got the same seeded inputs");
                for (a, b) in outs_a.iter().zip(outs_b) {
                    worst = worst.max(worst_difference(a, b));
                }
            }
            println!("{rel}: worst difference from LiteRT's C library {worst:e} (tolerance {tolerance:e})");
            assert!(worst <= tolerance, "{rel}: ferrite and LiteRT differ by {worst} > {tolerance}");
        }
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// The `TfLite*` functions the headers declare.
fn declared() -> BTreeSet<String> {
    let dir = crate_dir().join("include/tensorflow/lite/c");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        // Declarations are the statements starting with TFL_CAPI_EXPORT; the name is the
        // identifier before the first '(' (function pointer parameters come later).
        for decl in text.split("TFL_CAPI_EXPORT").skip(1) {
            let head = &decl[..decl.find('(').unwrap_or(0)];
            if let Some(name) = head.split(|c: char| !(c.is_alphanumeric() || c == '_')).rev().find(|w| !w.is_empty()) {
                if name.starts_with("TfLite") {
                    names.insert(name.to_string());
                }
            }
        }
    }
    names
}

#[test]
fn the_headers_declare_exactly_what_the_library_exports() {
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(library()).output().expect("nm runs");
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T" && name.starts_with("TfLite")).then(|| name.to_string())
        })
        .collect();
    let declared = declared();
    assert!(declared.len() > 40, "header parse found {} declarations", declared.len());
    assert_eq!(declared, exported, "declared in include/ vs exported by {}", library().display());
}
