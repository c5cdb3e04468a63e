//! `FERRITE_CPU_MAX_ISA` caps the kernels' instruction set for the process: `ferrite
//! devices` reports the capped kernels, and a model run under each cap gives the same
//! results (integer kernels bit for bit; float ones within summation-order rounding).

use std::path::{Path, PathBuf};
use std::process::Command;

fn ferrite(cap: Option<&str>) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    c.env_remove("FERRITE_CPU_MAX_ISA");
    if let Some(cap) = cap {
        c.env("FERRITE_CPU_MAX_ISA", cap);
    }
    c
}

fn stdout(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the ferrite binary runs");
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kernels_line(cap: Option<&str>) -> String {
    let out = stdout(ferrite(cap).arg("devices"));
    out.lines().find(|l| l.starts_with("cpu kernels:")).unwrap_or_else(|| panic!("no cpu kernels line in:\n{out}")).to_string()
}

#[test]
fn devices_reports_the_capped_kernels() {
    let baseline = kernels_line(Some("baseline"));
    assert!(baseline.starts_with("cpu kernels: float portable, int8 portable") || cfg!(target_arch = "aarch64"), "{baseline}");
    if cfg!(target_arch = "x86_64") {
        let avx2 = kernels_line(Some("avx2"));
        assert!(!avx2.contains("avx512"), "{avx2}");
        if std::arch::is_x86_feature_detected!("avx512f") {
            assert!(kernels_line(None).contains("float avx512"), "{}", kernels_line(None));
        }
    }
}

/// Reads a little-endian float32 .npy as written by `ferrite run`.
fn npy_f32(p: &Path) -> Vec<f32> {
    let b = std::fs::read(p).unwrap();
    let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = String::from_utf8_lossy(&b[10..10 + header_len]);
    assert!(header.contains("'<f4'"), "{header}");
    b[10 + header_len..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn a_model_gives_the_same_results_under_every_cap() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/demo.tflite");
    let dir = std::env::temp_dir().join(format!("ferrite-cli-isa-cap-{}", std::process::id()));
    let run = |cap: Option<&str>| -> Vec<f32> {
        let out: PathBuf = dir.join(cap.unwrap_or("native"));
        stdout(ferrite(cap).arg("run").arg(&demo).arg("-o").arg(&out).args(["--seed", "3"]));
        npy_f32(&out.join("output_0.npy"))
    };
    let native = run(None);
    assert!(!native.is_empty());
    for cap in ["avx2", "baseline"] {
        let capped = run(Some(cap));
        assert_eq!(capped.len(), native.len());
        let worst = native.iter().zip(&capped).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        eprintln!("FERRITE_CPU_MAX_ISA={cap}: worst difference from the uncapped run {worst:e}");
        assert!(worst <= 1e-5, "cap {cap}: worst difference {worst}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
