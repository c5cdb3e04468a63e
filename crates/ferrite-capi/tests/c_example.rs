//! Builds `examples/run_model.c` with the system C compiler against the static
//! library under AddressSanitizer + UndefinedBehaviorSanitizer (leak checking
//! included) and against the shared library, and runs both on the demo model and,
//! when the corpus is present, on a float and an int8 corpus model (and with
//! `FERRITE_RNN_MODELS`, on recurrent models with data-dependent shapes); and trains the
//! demo model through the `ferrite_session_train_*` calls under the sanitizers.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: the test binary lives in `target/<profile>/deps`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps layout").to_path_buf()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn models() -> Vec<PathBuf> {
    let mut m = vec![repo_root().join("models/demo.tflite")];
    if let Ok(corpus) = std::env::var("FERRITE_CORPUS") {
        let corpus = PathBuf::from(corpus);
        for rel in [
            "mediapipe-0.10.14/mediapipe/modules/face_detection/face_detection_short_range.tflite",
            "pymicro-wakeword-2.5.0/pymicro_wakeword/models/alexa.tflite",
        ] {
            let p = corpus.join(rel);
            assert!(p.exists(), "corpus model {} is missing", p.display());
            m.push(p);
        }
    }
    // Keras recurrent layers converted as WHILE loops whose bodies compute shapes
    // from values (tools/rnn_models.py): the C API runs them through the same calls.
    if let Ok(dir) = std::env::var("FERRITE_RNN_MODELS") {
        for name in ["kws_simple_rnn_float.tflite", "kws_bilstm_dynamic.tflite"] {
            let p = PathBuf::from(&dir).join(name);
            assert!(p.exists(), "recurrent model {} is missing", p.display());
            m.push(p);
        }
    }
    m
}

fn compile(out: &Path, extra: &[&str], link: &[&str]) {
    let dir = profile_dir();
    let include = dir.join("include");
    assert!(include.join("ferrite.h").exists(), "{} missing: build ferrite-capi first (cargo build --release)", include.join("ferrite.h").display());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/run_model.c");
    let status = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(extra)
        .arg("-I")
        .arg(&include)
        .arg(&src)
        .args(link)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(out)
        .status()
        .expect("the system C compiler (cc) runs");
    assert!(status.success(), "compiling {} failed", src.display());
}

fn run(exe: &Path, model: &Path, args: &[&str], env: &[(&str, String)]) {
    let out = Command::new(exe).arg(model).args(args).envs(env.iter().cloned()).output().expect("run the C example");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{} on {}:\n{stdout}{stderr}", exe.display(), model.display());
    assert!(out.status.success() && stdout.contains("c api example: ok"), "C example failed on {}:\n{stdout}\n{stderr}", model.display());
}

#[test]
fn c_example_runs_clean_under_address_sanitizer() {
    let dir = profile_dir();
    let lib = dir.join("libferrite_c.a");
    assert!(lib.exists(), "{} missing: build ferrite-capi first (cargo build --release)", lib.display());
    let tmp = std::env::temp_dir().join(format!("ferrite-capi-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let exe = tmp.join("run_model_asan");
    compile(&exe, &["-fsanitize=address,undefined", "-fno-sanitize-recover=all"], &[lib.to_str().unwrap()]);
    let asan = [("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23".to_string())];
    for m in models() {
        run(&exe, &m, &[], &asan);
    }
    // Training through the C API (the demo model is a float CNN classifier).
    run(&exe, &repo_root().join("models/demo.tflite"), &["--train"], &asan);
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn c_example_links_the_shared_library() {
    let dir = profile_dir();
    assert!(dir.join("libferrite_c.so").exists(), "libferrite_c.so missing: build ferrite-capi first (cargo build --release)");
    let tmp = std::env::temp_dir().join(format!("ferrite-capi-so-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let exe = tmp.join("run_model_shared");
    let libdir = format!("-L{}", dir.display());
    compile(&exe, &[], &[&libdir, "-lferrite_c"]);
    run(&exe, &repo_root().join("models/demo.tflite"), &[], &[("LD_LIBRARY_PATH", dir.display().to_string())]);
    std::fs::remove_dir_all(&tmp).ok();
}

/// The C example with `ferrite_session_set_backends(s, "gpu,cpu")`, when the library
/// has the GPU backend: built with the `gpu` feature, or in a workspace build (the
/// CLI turns ferrite's `gpu` on for every package, so scripts/test.sh's workspace
/// test runs this on lavapipe at no extra build). Whether it has it is asked of
/// the same ferrite this test links: a session with backends `gpu,cpu` fails to
/// build where `gpu` is an unknown name. Under CI=true the library must find an
/// adapter (it warns "has no adapter" and runs on the CPU otherwise).
#[test]
fn c_example_runs_on_the_gpu_backend() {
    let demo = repo_root().join("models/demo.tflite");
    let model = std::sync::Arc::new(ferrite::model::Model::from_file(&demo).expect("demo model"));
    let options = ferrite::SessionOptions { backends: vec!["gpu".into(), "cpu".into()], ..Default::default() };
    if let Err(e) = ferrite::Session::with_options(model, options).and_then(|mut s| s.prepare()) {
        eprintln!("this build of the C library has no gpu backend ({e}): skipped");
        return;
    }
    let dir = profile_dir();
    assert!(dir.join("libferrite_c.so").exists(), "libferrite_c.so missing: build ferrite-capi first (cargo build --release)");
    let tmp = std::env::temp_dir().join(format!("ferrite-capi-gpu-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let exe = tmp.join("run_model_gpu");
    let libdir = format!("-L{}", dir.display());
    compile(&exe, &[], &[&libdir, "-lferrite_c"]);
    // The demo model and the float corpus model (the int8 one would only fall back).
    for m in models().into_iter().filter(|m| !m.to_string_lossy().contains("wakeword")).take(2) {
        let out = Command::new(&exe)
            .arg(&m)
            .env("LD_LIBRARY_PATH", dir.display().to_string())
            .env("FERRITE_EXAMPLE_BACKENDS", "gpu,cpu")
            .output()
            .expect("run the C example");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        println!("{} on {} with gpu,cpu:\n{stdout}{stderr}", exe.display(), m.display());
        assert!(out.status.success() && stdout.contains("c api example: ok"), "C example failed on {} with gpu,cpu:\n{stdout}\n{stderr}", m.display());
        if std::env::var("CI").as_deref() == Ok("true") {
            assert!(!stderr.contains("has no adapter"), "CI=true but the C library found no GPU adapter:\n{stderr}");
        }
    }
    std::fs::remove_dir_all(&tmp).ok();
}
