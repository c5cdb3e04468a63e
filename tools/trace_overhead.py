#!/usr/bin/env python3
"""What watching a run costs: `ferrite bench` medians of one build before a change
and one after, tracing off, and the after build with `--trace`, interleaved round by
round so machine noise hits all three alike.

  trace_overhead.py --before OLD/ferrite --after NEW/ferrite MODEL... [--rounds 5] [--runs 30] [--threads 1]

Prints per model the median of the per-round medians (ms) and the ratios
off/before and on/off.
"""
import argparse
import json
import statistics
import subprocess
import tempfile


def median_ms(binary, model, runs, threads, trace=None):
    cmd = [binary, "bench", model, "--runs", str(runs), "--warmup", "3", "--threads", str(threads), "--json"]
    if trace:
        cmd += ["--trace", trace]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["execute_ms"]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            t = {"before": [], "off": [], "on": []}
            for _ in range(args.rounds):
                t["before"].append(median_ms(args.before, model, args.runs, args.threads))
                t["off"].append(median_ms(args.after, model, args.runs, args.threads))
                t["on"].append(median_ms(args.after, model, args.runs, args.threads, trace=f"{tmp}/trace.json"))
            m = {k: statistics.median(v) for k, v in t.items()}
            name = model.rsplit("/", 1)[-1]
            print(f"{name:<40} before {m['before']:.4f} ms  off {m['off']:.4f} ms  on {m['on']:.4f} ms  "
                  f"off/before {m['off'] / m['before']:.3f}  on/off {m['on'] / m['off']:.3f}  "
                  f"(rounds: before {min(t['before']):.4f}-{max(t['before']):.4f}, off {min(t['off']):.4f}-{max(t['off']):.4f})", flush=True)


if __name__ == "__main__":
    main()
