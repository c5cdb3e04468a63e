#!/usr/bin/env python3
"""The runtime's fixed cost per op and per run, against LiteRT's (issue 13, item 2).

Models: chains of N element-wise ops (ADD/MUL of a constant on a [1, 8] tensor,
written by `ferrite-opgen chain`), where a kernel's own work is a few
instructions and the rest is what the runtime spends per op: dispatch, argument
binding, bounds checks. The per-op cost is the slope between the short and the
long chain, (t(N) - t(1)) / (N - 1); the per-run cost is t(1), one op's work
included.

Both runtimes are timed from Python in one process, interleaved round by round
(the machine's noise hits both alike): LiteRT's `Interpreter.invoke()` with its
default resolver (XNNPACK) and ferrite's Python `Interpreter.invoke()`, each the
median of --runs calls per round, medians over rounds. The Python call itself is
in both per-run figures and in neither per-op figure.

    tools/op_overhead.py [--opgen target/release/ferrite-opgen] [--n 101] [--rounds 5] [--runs 2000]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from ai_edge_litert.interpreter import Interpreter as LiteRT

import ferrite


def timed(invoke, runs):
    """Median seconds of one call of `invoke`, over `runs` calls after a warm-up."""
    for _ in range(max(10, runs // 20)):
        invoke()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        invoke()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def runners(path):
    x = np.ones((1, 8), np.float32)
    lite = LiteRT(model_path=path)
    lite.allocate_tensors()
    lite.set_tensor(lite.get_input_details()[0]["index"], x)
    fer = ferrite.Interpreter(model_path=path)
    fer.allocate_tensors()
    fer.set_tensor(fer.get_input_details()[0]["index"], x)
    # The same results first: a chain that computed something else would not be
    # a measure of the same work.
    lite.invoke()
    fer.invoke()
    a = lite.get_tensor(lite.get_output_details()[0]["index"])
    b = fer.get_tensor(fer.get_output_details()[0]["index"])
    assert np.allclose(a, b, rtol=1e-5), (a, b)
    return {"LiteRT": lite.invoke, "ferrite": fer.invoke}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--opgen", default="target/release/ferrite-opgen")
    ap.add_argument("--n", type=int, default=101, help="ops in the long chain")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        paths = {}
        for n in (1, args.n):
            paths[n] = os.path.join(d, f"chain{n}.tflite")
            subprocess.run([args.opgen, "chain", paths[n], str(n)], check=True)
        run = {n: runners(p) for n, p in paths.items()}
        got = {(rt, n): [] for rt in ("LiteRT", "ferrite") for n in paths}
        for _ in range(args.rounds):
            for n in paths:
                for rt in ("LiteRT", "ferrite"):
                    got[(rt, n)].append(timed(run[n][rt], args.runs))
    med = {k: statistics.median(v) * 1e6 for k, v in got.items()}
    n = args.n
    print(f"| runtime | run of 1 op (µs) | run of {n} ops (µs) | fixed cost per op (µs) |")
    print("|---|---|---|---|")
    for rt in ("LiteRT", "ferrite"):
        per_op = (med[(rt, n)] - med[(rt, 1)]) / (n - 1)
        print(f"| {rt} | {med[(rt, 1)]:.2f} | {med[(rt, n)]:.2f} | {per_op:.3f} |")
    lo = os.getloadavg()[0]
    print(f"\nMedians of {args.rounds} interleaved rounds of {args.runs} calls each; load average {lo:.1f}.", file=sys.stderr)


if __name__ == "__main__":
    main()
