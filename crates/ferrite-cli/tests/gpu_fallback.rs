//! `--backends gpu,cpu` on a machine without a GPU adapter: the model runs on the
//! CPU with one warning, and an op pinned to the GPU fails saying why. The Vulkan
//! loader is pointed at an ICD file that does not exist, so no adapter answers
//! (on Linux, where the GPU backend uses Vulkan).

#![cfg(all(feature = "gpu", target_os = "linux"))]

use std::path::Path;
use std::process::Command;

fn ferrite_without_gpu() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    c.env("VK_ICD_FILENAMES", "/nonexistent/icd.json").env("VK_DRIVER_FILES", "/nonexistent/icd.json");
    c
}

#[test]
fn without_an_adapter_gpu_cpu_runs_on_the_cpu_with_a_warning() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/demo.tflite");
    let out = std::env::temp_dir().join(format!("ferrite-gpu-fallback-{}", std::process::id()));
    let r = ferrite_without_gpu().args(["run"]).arg(&demo).arg("-o").arg(&out).args(["--backends", "gpu,cpu"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert_eq!(stderr.matches("warning: the gpu backend has no adapter").count(), 1, "{stderr}");
    assert!(out.join("output_0.npy").exists());
    let _ = std::fs::remove_dir_all(&out);

    let r = ferrite_without_gpu().args(["inspect", "--json", "--backends", "gpu,cpu"]).arg(&demo).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(doc["ops_per_backend"].get("gpu").is_none(), "{doc}");
    let refused = doc["ops"].as_array().unwrap().iter().filter(|o| o["fell_back"].to_string().contains("apt-get install mesa-vulkan-drivers")).count();
    assert!(refused > 0, "{doc}");

    let r = ferrite_without_gpu().args(["inspect", "--backends", "gpu,cpu", "--op-backend", "SOFTMAX=gpu"]).arg(&demo).output().unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && stderr.contains("no Vulkan, Metal or DX12 adapter") && stderr.contains("pinned to the gpu backend"), "{stderr}");
}
