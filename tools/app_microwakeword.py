#!/usr/bin/env python3
"""A real application on ferrite's libtensorflowlite_c.so: pymicro-wakeword.

pymicro-wakeword (2.5.0) detects wake words by calling the TensorFlow Lite C API
through ctypes on the libtensorflowlite_c.so it bundles (LiteRT 2.17). Its loader
takes a library path (`libtensorflowlite_c_path=`), so ferrite's library goes in
without editing the package. The test:

1. synthesizes speech of the four wake words ("alexa", "hey jarvis", "okay nabu",
   "hey mycroft") and of a sentence without one, in several voices, with espeak-ng;
   sox resamples it to 16 kHz 16-bit mono without dither (reproducible audio);
2. runs the detector, every clip through every built-in model, once on the bundled
   library and once on ferrite's, recording each invoke's input and raw output (a
   wrapper around the library object; the package itself is untouched);
3. checks:
   - ferrite's raw outputs equal LiteRT's reference kernels (BUILTIN_REF, run here on
     the recorded inputs) on every invoke, so its probabilities and detections are
     exactly those of the reference kernels;
   - against the bundled library (LiteRT's optimized kernels, which round
     differently): the same wake words detected in the same clips, probabilities
     within PROB_TOL (the largest difference is reported);
   - the application works: each model detects its own word in at least one clip and
     never fires on another word's clip or on the sentence.

  app_microwakeword.py --cache DIR --lib target/release/libtensorflowlite_c.so

Run with the oracle venv's Python (numpy, ai_edge_litert); the package is installed
into DIR/microwakeword-venv from the wheel cached by fetch_models.py. Needs espeak-ng
and sox on PATH (scripts/test.sh installs them).
"""

import argparse
import base64
import ctypes
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "pymicro-wakeword==2.5.0"
VOICES = ["en", "en-us", "en+m3", "en-us+f3"]
PHRASES = {"alexa": "alexa", "hey_jarvis": "hey jarvis", "okay_nabu": "okay nabu", "hey_mycroft": "hey mycroft", "none": "the weather is nice today"}
# Mean probabilities (5-frame windows of uint8 outputs) of LiteRT's optimized kernels
# and of the reference kernels (= ferrite's) differ by up to 0.022 on these clips; single
# outputs by up to 14/256.
PROB_TOL = 0.05
CHUNK = 320  # bytes: 10 ms of 16-bit audio, the chunk size the package documents


def synthesize(out_dir):
    """One raw 16 kHz clip per (voice, phrase); returns {clip name: path}."""
    clips = {}
    for voice in VOICES:
        for word, text in PHRASES.items():
            name = f"{voice.replace('+', '_')}-{word}"
            wav, raw = out_dir / f"{name}.wav", out_dir / f"{name}.raw"
            subprocess.run(["espeak-ng", "-v", voice, "-s", "140", "-w", str(wav), text], check=True)
            # -D: no dither, so the samples are the same on every run.
            subprocess.run(["sox", "-D", str(wav), "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", str(raw), "pad", "0.5", "0.5"], check=True)
            clips[name] = raw
    return clips


class Recorder:
    """Forwards to the ctypes library, keeping each invoke's input and raw output."""

    def __init__(self, lib, log):
        self._lib, self._log = lib, log

    def __getattr__(self, name):
        f = getattr(self._lib, name)
        if name == "TfLiteTensorCopyFromBuffer":

            def copy_in(tensor, data, size):
                self._log["inputs"].append(base64.b64encode(ctypes.string_at(data, size)).decode())
                return f(tensor, data, size)

            return copy_in
        if name == "TfLiteTensorCopyToBuffer":

            def copy_out(tensor, data, size):
                status = f(tensor, data, size)
                self._log["outputs"].append(base64.b64encode(ctypes.string_at(data, size)).decode())
                return status

            return copy_out
        return f


def detect(lib, clips_dir, out):
    """Runs in the package's venv: every clip through every built-in model."""
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model

    results = {"clips": {}}
    for raw in sorted(Path(clips_dir).glob("*.raw")):
        audio = raw.read_bytes()
        for model in Model:
            ww = MicroWakeWord.from_builtin(model, libtensorflowlite_c_path=lib)
            ww.lib.TfLiteVersion.restype = ctypes.c_char_p
            results["library"] = ww.lib.TfLiteVersion().decode()
            results.setdefault("cutoffs", {})[model.value] = ww.probability_cutoff
            log = {"inputs": [], "outputs": [], "probabilities": []}
            ww.lib = Recorder(ww.lib, log)
            features = MicroWakeWordFeatures()
            for i in range(0, len(audio), CHUNK):
                for f in features.process_streaming(audio[i : i + CHUNK]):
                    log["probabilities"].append(ww.process_streaming_prob(f))
            ww.close()
            results["clips"][f"{raw.stem}/{model.value}"] = log
    Path(out).write_text(json.dumps(results))


def venv_python(cache):
    venv = cache / "microwakeword-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The wheel fetch_models.py cached; its dependencies (pymicro-features, numpy) from the index.
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--find-links", str(cache / "wheels"), PACKAGE], check=True)
    return py


def run_detector(py, lib, clips_dir, out):
    cmd = [str(py), __file__, "detect", "--clips", str(clips_dir), "--out", str(out)]
    if lib:
        cmd += ["--lib", str(lib)]
    subprocess.run(cmd, check=True)
    return json.loads(Path(out).read_text())


def reference_outputs(model_path, inputs):
    """LiteRT's reference kernels on the recorded inputs, from a fresh interpreter."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(model_path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    outs = []
    for x in inputs:
        it.set_tensor(i["index"], np.frombuffer(base64.b64decode(x), i["dtype"]).reshape(i["shape"]))
        it.invoke()
        outs.append(base64.b64encode(it.get_tensor(o["index"]).tobytes()).decode())
    return outs


def detected(probabilities, cutoff):
    return [k for k, p in enumerate(probabilities) if p is not None and p > cutoff]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="test", choices=["test", "detect"])
    ap.add_argument("--cache", type=Path)
    ap.add_argument("--lib", type=Path, help="ferrite's libtensorflowlite_c.so")
    ap.add_argument("--clips", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.mode == "detect":
        detect(str(args.lib.resolve()) if args.lib else None, args.clips, args.out)
        return

    for tool in ("espeak-ng", "sox"):
        if not shutil.which(tool):
            sys.exit(f"app_microwakeword: {tool} is not installed (Debian: apt-get install espeak-ng sox)")
    lib = args.lib.resolve()
    models_dir = args.cache / "models" / "pymicro-wakeword-2.5.0" / "pymicro_wakeword" / "models"
    py = venv_python(args.cache)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        clips = synthesize(tmp)
        bundled = run_detector(py, None, tmp, tmp / "bundled.json")
        ours = run_detector(py, lib, tmp, tmp / "ferrite.json")
    print(f"app_microwakeword: {len(clips)} clips x {len(bundled['cutoffs'])} models; bundled library {bundled['library']}, ferrite's {ours['library']}")
    if "ferrite" not in ours["library"] or "ferrite" in bundled["library"]:
        failures.append(f"libraries not as intended: bundled {bundled['library']}, ferrite {ours['library']}")

    worst_prob, frame_diffs, invokes = 0.0, [], 0
    fired = {}
    for key, run in ours["clips"].items():
        clip, model = key.split("/")
        cutoff = ours["cutoffs"][model]
        theirs = bundled["clips"][key]
        invokes += len(run["outputs"])
        # 1. Bit-exact with LiteRT's reference kernels, invoke by invoke.
        ref = reference_outputs(models_dir / f"{model}.tflite", run["inputs"])
        mismatched = [k for k, (a, b) in enumerate(zip(run["outputs"], ref)) if a != b]
        if len(ref) != len(run["outputs"]) or mismatched:
            failures.append(f"{key}: raw outputs differ from LiteRT's reference kernels at invokes {mismatched[:10]}")
        # 2. Against the bundled (optimized) library: same inputs, same verdict, close probabilities.
        if theirs["inputs"] != run["inputs"]:
            failures.append(f"{key}: the two runs fed different inputs")
        diffs = [abs(a - b) for a, b in zip(run["probabilities"], theirs["probabilities"]) if a is not None and b is not None]
        worst_prob = max([worst_prob] + diffs)
        ours_frames, their_frames = detected(run["probabilities"], cutoff), detected(theirs["probabilities"], cutoff)
        if bool(ours_frames) != bool(their_frames):
            failures.append(f"{key}: detected on ferrite {bool(ours_frames)}, on the bundled library {bool(their_frames)}")
        if ours_frames != their_frames:
            frame_diffs.append(f"{key} ({len(set(ours_frames) ^ set(their_frames))} frames)")
        if ours_frames:
            fired.setdefault(model, []).append(clip)
    if worst_prob > PROB_TOL:
        failures.append(f"probabilities differ from the bundled library by {worst_prob:.4f} > {PROB_TOL}")
    # 3. The application does its job on ferrite.
    for model in ours["cutoffs"]:
        own = [c for c in fired.get(model, []) if c.endswith("-" + model)]
        other = [c for c in fired.get(model, []) if not c.endswith("-" + model)]
        print(f"  {model}: detected in {len(own)}/{len(VOICES)} of its clips {sorted(own)}; false detections {other}")
        if not own:
            failures.append(f"{model} detected its word in none of its clips")
        if other:
            failures.append(f"{model} fired on {other}")
    differing = sum("reference kernels" in f for f in failures)
    print(f"  {invokes} invokes; raw outputs differ from LiteRT's reference kernels in {differing} of {len(ours['clips'])} runs")
    print(f"  vs the bundled library: max probability difference {worst_prob:.4f} (tolerance {PROB_TOL}); detection frames differ in {len(frame_diffs)} runs {frame_diffs}")
    if failures:
        for f in failures:
            print("FAIL", f)
        sys.exit(1)
    print("app_microwakeword: ok")


if __name__ == "__main__":
    main()
