//! What a trainer writes: the exported model (the original file with only the
//! trained weight buffers rewritten in place) and checkpoints (weights, optimizer
//! state, step count), each written through a temporary file renamed into place
//! so that a failure never leaves half a file.

use std::io::Write;
use std::path::Path;

use super::Trainer;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"FRTCKPT1";

/// The model bytes with the trained weights. Every trained tensor has a buffer of
/// its own (shared ones are refused when training starts), so rewriting the
/// buffer bytes in place changes exactly the trained weights and nothing else.
pub(super) fn export(t: &Trainer, circle: bool) -> Result<Vec<u8>> {
    let mut out = t.model.bytes().to_vec();
    let g = &t.model.subgraphs()[t.subgraph];
    for (i, p) in t.graph.params.iter().enumerate() {
        let w = t.weights(i)?;
        let range = g.tensors[p.stored].data.clone().ok_or_else(|| Error::InvalidModel(format!("tensor {} has no buffer", p.stored).into()))?;
        let dst = out.get_mut(range).ok_or_else(|| Error::InvalidModel(format!("tensor {} buffer lies outside the file", p.stored).into()))?;
        if p.fp16 {
            // float16 weights stay float16: the trained values rounded to it.
            if dst.len() != w.len() * 2 {
                return Err(Error::InvalidModel(format!("tensor {} buffer size differs from its shape", p.stored).into()));
            }
            for (d, v) in dst.chunks_exact_mut(2).zip(w) {
                d.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes());
            }
        } else {
            if dst.len() != w.len() * 4 {
                return Err(Error::InvalidModel(format!("tensor {} buffer size differs from its shape", p.stored).into()));
            }
            dst.copy_from_slice(bytemuck::cast_slice(w));
        }
    }
    if out.len() >= 8 && (&out[4..8] == b"TFL3" || &out[4..8] == b"CIR0") {
        out[4..8].copy_from_slice(if circle { b"CIR0" } else { b"TFL3" });
    } else if circle {
        return Err(Error::Unsupported("the model file has no file identifier to mark as circle".into()));
    }
    Ok(out)
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io { path: path.display().to_string(), source };
    let name = path.file_name().ok_or_else(|| Error::InvalidArgument(format!("{} is not a file path", path.display()).into()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(io)
}

/// Identifies the training state's layout: the sizes of every state slot and the
/// optimizer, so a checkpoint of another model or setup is refused.
fn fingerprint(t: &Trainer) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |v: u64| {
        for b in v.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    };
    for s in t.graph.state_slots() {
        mix(t.graph.slots[s].bytes as u64);
    }
    for p in &t.graph.params {
        mix(p.tensor as u64);
    }
    mix(match t.config.optimizer {
        super::Optimizer::Sgd { momentum: 0.0, .. } => 1,
        super::Optimizer::Sgd { .. } => 2,
        super::Optimizer::Adam { .. } => 3,
    });
    h
}

/// Checkpoint bytes: magic, step count, fingerprint, then each state slot as its
/// length and bytes (little-endian).
pub(super) fn checkpoint(t: &Trainer) -> Vec<u8> {
    let arena = t.arena_bytes();
    let slots = t.graph.state_slots();
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&t.steps_done.to_le_bytes());
    out.extend_from_slice(&fingerprint(t).to_le_bytes());
    out.extend_from_slice(&(slots.len() as u64).to_le_bytes());
    for s in slots {
        let b = t.graph.slot_bytes(arena, s);
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    }
    out
}

/// Restores a checkpoint; checks everything before changing anything.
pub(super) fn restore(t: &mut Trainer, bytes: &[u8]) -> Result<()> {
    let bad = |m: &str| Error::InvalidArgument(m.to_string().into());
    let mut pos = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = bytes.get(pos..pos.checked_add(n).ok_or_else(|| bad("truncated"))?).ok_or_else(|| bad("truncated"))?;
        pos += n;
        Ok(s)
    };
    let u64_at = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
    if take(8)? != MAGIC {
        return Err(bad("not a ferrite checkpoint"));
    }
    let steps = u64_at(take(8)?);
    if u64_at(take(8)?) != fingerprint(t) {
        return Err(bad("saved for another model, trainable part or optimizer"));
    }
    let slots = t.graph.state_slots();
    if u64_at(take(8)?) != slots.len() as u64 {
        return Err(bad("saved for another model, trainable part or optimizer"));
    }
    let mut pieces = Vec::with_capacity(slots.len());
    for &s in &slots {
        let n = u64_at(take(8)?);
        if n != t.graph.slots[s].bytes as u64 {
            return Err(bad("a saved tensor's size differs"));
        }
        pieces.push(take(n as usize)?);
    }
    if pos != bytes.len() {
        return Err(bad("trailing bytes"));
    }
    let arena: &mut [u8] = bytemuck::cast_slice_mut(&mut t.arena);
    for (&s, p) in slots.iter().zip(pieces) {
        t.graph.slot_bytes_mut(arena, s).copy_from_slice(p);
    }
    t.steps_done = steps;
    Ok(())
}
