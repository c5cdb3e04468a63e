//! Sparse fp16 weights (DENSIFY then DEQUANTIZE, folded at prepare) exist once.
//!
//! On the corpus's sparse MediaPipe models (`FERRITE_CORPUS`; skipped without it):
//! - loading keeps the sparse index arrays in the file: the model's heap is far
//!   below the 8 bytes an entry they took when widened to `usize`;
//! - after prepare the heap holds the weights once, in the form the kernels take
//!   (float32, packed where a kernel packs them), beside the arena;
//! - the mapped file's pages of the sparse constants (values and index arrays)
//!   are given back once densified, so the file is not resident a second time.

use std::path::PathBuf;
use std::sync::Arc;

use ferrite::model::SparseDim;
use ferrite::{DType, Model, Session};

#[path = "support/live_heap.rs"]
mod live_heap;
use live_heap::{live, SERIAL};

/// The corpus's sparse models, when the corpus is there.
fn sparse_models() -> Vec<PathBuf> {
    let Ok(dir) = std::env::var("FERRITE_CORPUS") else { return Vec::new() };
    let base = PathBuf::from(dir).join("mediapipe-0.10.14/mediapipe/modules");
    ["pose_detection/pose_detection.tflite", "face_detection/face_detection_full_range_sparse.tflite"]
        .iter()
        .map(|m| base.join(m))
        .filter(|p| p.exists())
        .collect()
}

/// Resident kB of the mappings of `path` (`/proc/self/smaps`).
fn resident_kb(path: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let name = path.to_string_lossy();
    let mut inside = false;
    let mut kb = 0;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            inside = line.ends_with(name.as_ref());
        } else if inside && first == "Rss:" {
            kb += line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    kb
}

#[test]
fn sparse_fp16_weights_are_held_once_after_prepare() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let models = sparse_models();
    if models.is_empty() {
        eprintln!("FERRITE_CORPUS unset or without the sparse MediaPipe models: skipped");
        return;
    }
    for path in models {
        let before = live();
        let model = Arc::new(Model::from_file(&path).unwrap());
        let loaded = live() - before;
        // Index entries of the sparse constants, and the weights as the float kernels
        // take them: every fp16 constant (sparse ones densified) at 4 bytes an element.
        let tensors = || model.subgraphs().iter().flat_map(|g| g.tensors.iter());
        let entries: usize = tensors()
            .filter_map(|t| t.sparsity.as_ref())
            .flat_map(|s| s.dims.iter())
            .map(|d| match d {
                SparseDim::Csr { segments, indices } => segments.len() + indices.len(),
                SparseDim::Dense(_) => 0,
            })
            .sum();
        assert!(entries > 100_000, "{}: {entries} sparse index entries", path.display());
        // Widened, the arrays alone took entries x 8 B; the rest of the IR (names,
        // shapes, ops) is far less than half that on these models.
        assert!(
            (loaded as usize) < entries * 4,
            "{}: loading took {loaded} B of heap for {entries} sparse index entries (8 B each when widened)",
            path.display()
        );
        let weights_f32: usize =
            tensors().filter(|t| t.data.is_some()).map(|t| if t.dtype == DType::F16 { t.numel() * 4 } else { t.data.as_ref().map_or(0, |r| r.len()) }).sum();
        let mut s = Session::with_options(model.clone(), Default::default()).unwrap();
        s.prepare().unwrap();
        let grown = (live() - before) as usize;
        let arena = s.arena_capacity_bytes();
        // One copy of the weights (panels add some padding), the arena, and the IR
        // and kernels' own state; a second copy of the converted weights, or the
        // widened index arrays, is over.
        let bound = weights_f32 * 11 / 10 + arena + (1 << 20);
        assert!(grown <= bound, "{}: heap grew by {grown} B at load and prepare; weights as float32 {weights_f32} B, arena {arena} B", path.display());
        // The sparse constants' file pages went once densified.
        if cfg!(target_os = "linux") {
            let file_kb = std::fs::metadata(&path).unwrap().len() / 1024;
            let resident = resident_kb(&path);
            if file_kb > 2048 {
                assert!(resident * 3 < file_kb, "{}: {resident} kB of the {file_kb} kB file resident after prepare", path.display());
            }
        }
        // Still right: the densified weights give the same outputs as a second
        // session's (which finds them shared).
        let mut other = Session::with_options(model.clone(), Default::default()).unwrap();
        other.prepare().unwrap();
        for sess in [&mut s, &mut other] {
            for (k, d) in sess.inputs().iter().enumerate() {
                let n: usize = d.shape.iter().product();
                let x: Vec<u8> = (0..n).flat_map(|i| ((i % 13) as f32 / 13.0).to_le_bytes()).collect();
                sess.set_input(k, &x).unwrap();
            }
            sess.run().unwrap();
        }
        for k in 0..s.outputs().len() {
            assert_eq!(s.output(k).unwrap().bytes, other.output(k).unwrap().bytes);
        }
    }
}
