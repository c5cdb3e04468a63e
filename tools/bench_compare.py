#!/usr/bin/env python3
"""Side-by-side latency: `ferrite bench` against LiteRT (default resolver, XNNPACK),
same models, same thread count, interleaved so machine noise hits both alike.

  bench_compare.py --ferrite target/release/ferrite --corpus DIR [--threads N] [--rounds R] [--filter RE] [--exclude RE]
                   [--markdown BENCHMARKS.md]

Prints per-model median latencies (ms), the ferrite/LiteRT ratio (below 1 means
ferrite is faster) and the geometric mean of the ratios.
"""
import argparse
import json
import math
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

import numpy as np
from ai_edge_litert.interpreter import Interpreter

SHAPES = {"melspectrogram.tflite": [1, 16000]}
SKIP = {"face_landmark_with_attention.tflite": "custom ops LiteRT cannot run"}


def litert_times(path, threads, runs, shape):
    it = Interpreter(model_path=str(path), num_threads=threads)
    if shape:
        it.resize_tensor_input(it.get_input_details()[0]["index"], shape)
    it.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in it.get_input_details():
        it.set_tensor(d["index"], rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]))
    for _ in range(3):
        it.invoke()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        it.invoke()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


def ferrite_times(binary, path, threads, runs, shape, stat="median"):
    cmd = [binary, "bench", str(path), "--threads", str(threads), "--warmup", "3", "--runs", str(runs), "--json"]
    if shape:
        cmd += ["--shape", ",".join(map(str, shape))]
    d = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return d["execute_ms"][stat]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrite", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per model")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per round")
    ap.add_argument("--filter", default="", help="regular expression on model file names")
    ap.add_argument("--exclude", help="regular expression on paths relative to the corpus: leave those models out (e.g. '^unseen-')")
    ap.add_argument(
        "--stat",
        choices=["median", "min"],
        default="median",
        help="per-model statistic: the median of per-round medians (default), or the fastest run of all rounds, "
        "which a machine shared with other work disturbs least (preemption only ever adds time)",
    )
    ap.add_argument("--speedup", action="store_true", help="also time ferrite at 1 thread and report the N-thread speed-up")
    ap.add_argument("--markdown")
    ap.add_argument("--title", help="markdown section title (default: the thread count)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    rows = []
    for m in sorted(pathlib.Path(args.corpus).rglob("*.tflite")):
        if m.name in SKIP or not re.search(args.filter, m.name):
            continue
        if args.exclude and re.search(args.exclude, m.relative_to(args.corpus).as_posix()):
            continue
        shape = SHAPES.get(m.name)
        pick = statistics.median if args.stat == "median" else min
        f_meds, l_all = [], []
        for _ in range(args.rounds):
            f_meds.append(ferrite_times(args.ferrite, m, args.threads, args.runs, shape, args.stat))
            l_all.append(pick(litert_times(m, args.threads, args.runs, shape)))
        f, l = pick(f_meds), pick(l_all)
        one = pick([ferrite_times(args.ferrite, m, 1, args.runs, shape, args.stat) for _ in range(args.rounds)]) if args.speedup else None
        rows.append((m.name, f, l, f / l, one))
        extra = f"   speed-up vs 1 thread {one / f:5.2f}x" if one else ""
        print(f"{m.name:<42} ferrite {f:9.3f} ms   litert {l:9.3f} ms   ratio {f / l:6.3f}{extra}", flush=True)
    geo = math.exp(sum(math.log(r[3]) for r in rows) / len(rows))
    worst = max(rows, key=lambda r: r[3])
    print(f"geomean ratio (ferrite/litert): {geo:.3f} over {len(rows)} models, {args.threads} thread(s); worst {worst[0]} {worst[3]:.3f}")
    if args.markdown:
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
        lines = [
            f"## {args.title or f'{args.threads} thread(s)'}",
            "",
            f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, load average {load:.1f} at the start. LiteRT `ai-edge-litert` default resolver (XNNPACK).",
            "",
            f"| model | ferrite {args.stat} (ms) | LiteRT {args.stat} (ms) | ratio |" + (" ferrite speed-up vs 1 thread |" if args.speedup else ""),
            "|---|---|---|---|" + ("---|" if args.speedup else ""),
        ]
        lines += [f"| {n} | {f:.3f} | {l:.3f} | {r:.3f} |" + (f" {one / f:.2f}x |" if one else "") for n, f, l, r, one in rows]
        lines += ["", f"Geometric mean of ratios: **{geo:.3f}** ({len(rows)} models); worst {worst[0]} ({worst[3]:.3f}).", ""]
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
