#!/usr/bin/env python3
"""Before/after: two ferrite binaries on the same models, interleaved, so machine
noise hits both alike (a change's speed effect without LiteRT in the loop).

  bench_ab.py --before OLD/ferrite --after NEW/ferrite --corpus DIR [--rounds 3] [--runs 20] [--filter RE]

Prints per-model median latencies and after/before ratios, then their geometric mean.
"""
import argparse
import json
import math
import pathlib
import re
import statistics
import subprocess

SHAPES = {"melspectrogram.tflite": "1,16000"}
SKIP = {"face_landmark_with_attention.tflite"}


def median_ms(binary, model, runs):
    cmd = [binary, "bench", str(model), "--runs", str(runs), "--warmup", "3", "--json"]
    if model.name in SHAPES:
        cmd += ["--shape", SHAPES[model.name]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return json.loads(r.stdout)["execute_ms"]["median"] if r.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    ratios = []
    for m in sorted(pathlib.Path(args.corpus).rglob("*.tflite")):
        if m.name in SKIP or not re.search(args.filter, m.name):
            continue
        before, after = [], []
        for _ in range(args.rounds):
            before.append(median_ms(args.before, m, args.runs))
            after.append(median_ms(args.after, m, args.runs))
        if None in before or None in after:
            print(f"{m.name:45s} failed to run")
            continue
        b, a = statistics.median(before), statistics.median(after)
        ratios.append(a / b)
        print(f"{m.name:45s} before {b:8.3f} ms  after {a:8.3f} ms  after/before {a / b:.3f}", flush=True)
    if ratios:
        print(f"geomean after/before {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} over {len(ratios)} models")


if __name__ == "__main__":
    main()
