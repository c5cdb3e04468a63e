#!/usr/bin/env python3
"""GPU speed figures for BENCHMARKS.md: the gpu backend against ferrite's own
1-thread CPU backend, per model at batch 1 and batch 16, and a GEMM in GFLOP/s.

Run it on the machine with the GPU (lavapipe numbers are never performance):

    python3 tools/gpu_bench.py --corpus ~/.cache/ferrite/models --fp32-peak-tflops 67

It needs only the Python standard library and two binaries built with the
default features (`cargo build --release -p ferrite-cli -p ferrite-opgen`), so a
release build copied to a machine without a toolchain or network is enough.

What it measures, per model: the median of --runs timed runs after --warmup
runs (`ferrite bench --json`), CPU with --threads 1 and GPU with --backends
gpu,cpu; for the GPU the per-run split into upload, GPU and readback (GPU time
from timestamp queries where the adapter has them, else the host's clock from
submission until the GPU is done: the JSON says which). Batch 16 resizes every
input's first dimension. The GEMM is one FULLY_CONNECTED layer of
[M, K] x [K, N] written by `ferrite-opgen gemm` (weights uploaded once, at
prepare); its GFLOP/s is 2·M·K·N over the GPU time, and over the end-to-end time.

First it prints the adapters (`vulkaninfo --summary` where installed, and
`ferrite devices`): if only llvmpipe answers, the container lacks the vendor's
Vulkan driver and the figures are the software rasterizer's, which the table
says.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

MODELS = [
    "mediapipe-0.10.14/mediapipe/modules/face_detection/face_detection_short_range.tflite",
    "mediapipe-0.10.14/mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
    "mediapipe-0.10.14/mediapipe/modules/palm_detection/palm_detection_lite.tflite",
    "mediapipe-0.10.14/mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
    # Also the corpus's largest float model.
    "mediapipe-0.10.14/mediapipe/modules/pose_landmark/pose_landmark_full.tflite",
]


def sh(cmd):
    """Runs `cmd`; returns its stdout, or raises with its stderr."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def adapters(ferrite):
    """The adapters as the Vulkan loader and ferrite see them, and whether only a
    software rasterizer answered."""
    lines = []
    if shutil.which("vulkaninfo"):
        p = subprocess.run(["vulkaninfo", "--summary"], capture_output=True, text=True)
        lines += [l.strip() for l in p.stdout.splitlines() if "deviceName" in l or "driverName" in l or "deviceType" in l]
    p = subprocess.run([ferrite, "devices"], capture_output=True, text=True)
    lines += [l.rstrip() for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    text = "\n".join(lines)
    software = "llvmpipe" in text.lower() and not any(v in text.lower() for v in ("nvidia", "amd", "radeon", "intel", "apple", "mali", "adreno"))
    return text, software


def input_shapes(ferrite, model, batch):
    """Each input's shape with its first dimension set to `batch`."""
    doc = json.loads(sh([ferrite, "inspect", model, "--json"]))
    shapes = []
    for t in doc["subgraphs"][0]["inputs"]:
        s = list(t["shape"])
        if s:
            s[0] = batch
        shapes.append(s)
    return shapes


def bench(ferrite, model, args, backends, threads, shapes):
    cmd = [ferrite, "bench", model, "--json", "--runs", str(args.runs), "--warmup", str(args.warmup), "--threads", str(threads)]
    if backends:
        cmd += ["--backends", backends]
    for s in shapes or []:
        cmd += ["--shape", ",".join(map(str, s))]
    return json.loads(sh(cmd).strip().splitlines()[-1])


def fmt(ms):
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrite", default="target/release/ferrite")
    ap.add_argument("--opgen", default="target/release/ferrite-opgen")
    ap.add_argument("--corpus", default=os.path.expanduser("~/.cache/ferrite/models"))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batches", default="1,16", help="comma-separated batch sizes")
    ap.add_argument("--gemm", type=int, default=4096, help="M = K = N of the GEMM (0: skip it)")
    ap.add_argument("--fp32-peak-tflops", type=float, default=0.0, help="the GPU's FP32 peak, for the GEMM's share of it")
    ap.add_argument("--models", nargs="*", help="model paths (default: the GPU issue's five corpus models)")
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args()

    text, software = adapters(args.ferrite)
    out = ["### GPU backend speed", "", "Adapters:", "", "```", text or "(none listed)", "```", ""]
    if software:
        out += ["Only a software rasterizer (llvmpipe/lavapipe) answered: these are not GPU figures.", ""]
    out += [
        f"Median of {args.runs} runs after {args.warmup} warm-up runs; CPU = ferrite's cpu backend, 1 thread; GPU = `--backends gpu,cpu`,",
        "with the GPU run split into upload / GPU / readback per run.",
        "",
        "| model | batch | CPU 1 thread (ms) | GPU end to end (ms) | speed-up | upload | GPU | readback | ops on GPU | GPU time from |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    models = args.models or [os.path.join(args.corpus, m) for m in MODELS]
    for model in models:
        name = os.path.basename(model)
        if not os.path.exists(model):
            out.append(f"| {name} | - | missing: {model} | | | | | | | |")
            continue
        for batch in [int(b) for b in args.batches.split(",")]:
            shapes = input_shapes(args.ferrite, model, batch)
            try:
                cpu = bench(args.ferrite, model, args, None, 1, shapes)
                gpu = bench(args.ferrite, model, args, "gpu,cpu", 1, shapes)
            except RuntimeError as e:
                out.append(f"| {name} | {batch} | error: {str(e)[:200]} | | | | | | | |")
                continue
            c, g = cpu["execute_ms"]["median"], gpu["execute_ms"]["median"]
            split = gpu.get("gpu", {})
            out.append(
                f"| {name} | {batch} | {fmt(c)} | {fmt(g)} | {c / g:.2f}× | {fmt(split.get('upload_ms', 0))} | {fmt(split.get('gpu_ms', 0))} | "
                f"{fmt(split.get('readback_ms', 0))} | {split.get('ops', 0)} | {split.get('gpu_ms_from', 'no GPU segment')} |"
            )
            print(out[-1], file=sys.stderr, flush=True)
    if args.gemm:
        n = args.gemm
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "gemm.tflite")
            sh([args.opgen, "gemm", path, str(n), str(n), str(n)])
            gpu = bench(args.ferrite, path, argparse.Namespace(runs=max(5, args.runs // 5), warmup=2), "gpu,cpu", 1, None)
        flops = 2.0 * n * n * n
        e2e = gpu["execute_ms"]["median"]
        gms = gpu.get("gpu", {}).get("gpu_ms", 0.0)
        rate = flops / (gms * 1e-3) / 1e9 if gms > 0 else 0.0
        out += ["", f"GEMM [{n}, {n}] x [{n}, {n}] (FULLY_CONNECTED, weights resident): GPU time {fmt(gms)} ms = **{rate:.0f} GFLOP/s**"
                f" ({gpu.get('gpu', {}).get('gpu_ms_from', '')}); end to end with upload and readback {fmt(e2e)} ms = {flops / (e2e * 1e-3) / 1e9:.0f} GFLOP/s."]
        if args.fp32_peak_tflops > 0:
            out[-1] += f" {100 * rate / (args.fp32_peak_tflops * 1e3):.1f}% of the {args.fp32_peak_tflops:g} TFLOP/s FP32 peak."
    md = "\n".join(out) + "\n"
    print(md)
    if args.out:
        with open(args.out, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
