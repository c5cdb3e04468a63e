#!/usr/bin/env python3
"""Per-model float throughput: multiply-adds per run of a model's float CONV_2D,
DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV and BATCH_MATMUL ops (counted
from the shapes `ferrite inspect --json` reports), divided by ferrite's median (or
fastest) latency (`ferrite bench --json`), against the single-core FMA peak that
`cargo bench -p ferrite-kernels` measures (or `--peak`).

  gflops.py --ferrite target/release/ferrite MODEL... [--threads N] [--runs R] [--stat median|min]
            [--peak GFLOPS] [--paths] [--markdown FILE --title TITLE]

One flop is a multiply or an add: a multiply-add counts 2, as the kernel
benchmarks count them. Only ops whose output is float32 count (a quantized op
is not float work); the remaining ops (activations, pooling, element-wise) are
not counted, so the figure is the useful GEMM-like work per second of the whole
run, a lower bound on the convolutions' own rate.
"""
import argparse
import json
import math
import pathlib
import re
import subprocess
import sys


def prod(xs):
    return math.prod(int(x) for x in xs)


def op_macs(op):
    """Multiply-adds of one op per run, or 0 where the op is not counted."""
    ins, outs = op.get("inputs", []), op.get("outputs", [])
    if not outs or outs[0].get("dtype") != "float32":
        return 0
    name, out = op.get("op"), outs[0]["shape"]
    shape = lambda i: ins[i]["shape"] if i < len(ins) and ins[i] else None
    if name == "CONV_2D" and shape(1) and len(shape(1)) == 4:
        # out [b, oh, ow, oc] x filter [oc, kh, kw, ic]
        _, kh, kw, ic = shape(1)
        return prod(out) * kh * kw * ic
    if name == "DEPTHWISE_CONV_2D" and shape(1) and len(shape(1)) == 4:
        # out [b, oh, ow, ic * mult] x filter [1, kh, kw, ic * mult]: one tap window per output
        _, kh, kw, _ = shape(1)
        return prod(out) * kh * kw
    if name == "FULLY_CONNECTED" and shape(1) and len(shape(1)) == 2:
        # weights [n, k]: every output sums k products
        return prod(out) * shape(1)[1]
    if name == "TRANSPOSE_CONV" and shape(1) and shape(2) and len(shape(1)) == 4:
        # inputs: output shape, filter [oc, kh, kw, ic], input [b, h, w, ic]: every
        # input pixel scatters kh * kw * oc * ic products
        oc, kh, kw, ic = shape(1)
        b, h, w, _ = shape(2)
        return b * h * w * kh * kw * oc * ic
    if name == "BATCH_MATMUL" and shape(0) and len(shape(0)) >= 2:
        adj_x = "adj_x: true" in str(op.get("params", ""))
        k = shape(0)[-2] if adj_x else shape(0)[-1]
        return prod(out) * k
    return 0


def inspect(binary, path):
    r = subprocess.run([binary, "inspect", "--json", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        # ferrite's own message (a missing or invalid file) says what went wrong.
        sys.exit(f"gflops.py: {path}: {r.stderr.strip() or f'ferrite inspect exited with {r.returncode}'}")
    return json.loads(r.stdout)


def model_macs(binary, path):
    per_op = {}
    for sg in inspect(binary, path)["subgraphs"]:
        for op in sg["ops"]:
            m = op_macs(op)
            if m:
                per_op[op["op"]] = per_op.get(op["op"], 0) + m
    return per_op


def path_rates(binary, path, threads, runs, stat):
    """Per op type: (multiply-adds, ms per run, ops) of the main subgraph, from the
    per-op profile of `ferrite bench --profile` (each op timed on its own: a path's
    rate without the other ops' time). With stat "min" each op's fastest profiled
    run counts (their sum is at most the fastest whole run: a path's best rate, as
    the whole-run figure is the run's), else its mean over the profiled runs."""
    ops = inspect(binary, path)["subgraphs"][0]["ops"]
    cmd = [binary, "bench", str(path), "--threads", str(threads), "--warmup", "3", "--runs", str(runs), "--json", "--profile"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    prof = json.loads(out)["profile"]["ops"]
    paths = {}
    for rec in prof:
        macs = op_macs(ops[rec["op"]]) if rec["op"] < len(ops) else 0
        e = paths.setdefault(rec["type"], [0, 0.0, 0])
        e[0] += macs
        e[1] += rec["min_ms"] if stat == "min" else rec["ms_per_run"]
        e[2] += 1
    return paths


def latency_ms(binary, path, threads, runs, stat):
    cmd = [binary, "bench", str(path), "--threads", str(threads), "--warmup", "3", "--runs", str(runs), "--json"]
    d = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return d["execute_ms"][stat]


PEAK_LINE = re.compile(r"FMA peak per core: ([0-9.]+) GFLOP/s measured.*?([0-9.]+) GFLOP/s nominal")


GEMM_LINE = re.compile(r"^conv \S+: .*?([0-9.]+) GFLOP/s")


def measure_peak():
    """The single-core peak, measured: the kernel benchmark's FMA-chain loop, its
    nominal figure (2 ports x lanes x 2 x the clock /proc/cpuinfo reports) and the
    GEMM rates of its first convolution cases (printed right after), whichever is
    highest. On this project's AMD EPYC the chain loop reaches about 180 GFLOP/s
    and the 1x1/3x3 convolutions 255-268: a rate some code reaches is a floor of
    the peak. The benchmarks after those lines are not waited for."""
    p = subprocess.Popen(["cargo", "bench", "-p", "ferrite-kernels", "--bench", "kernels"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak, note, gemm = None, None, []
    try:
        for line in p.stdout:
            m = PEAK_LINE.search(line)
            if m:
                peak, note = max(float(m.group(1)), float(m.group(2))), line.strip()
                continue
            g = GEMM_LINE.search(line)
            if peak is not None and g:
                gemm.append(float(g.group(1)))
                if len(gemm) == 3:
                    break
    finally:
        p.kill()
        p.wait()
    if peak is None:
        sys.exit("gflops.py: cargo bench printed no FMA peak line")
    if gemm and max(gemm) > peak:
        peak = max(gemm)
        note += f"; the GEMM cases ran at up to {peak:.1f} GFLOP/s, used as the peak"
    return peak, note


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrite", required=True)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument(
        "--stat",
        choices=["median", "min"],
        default="median",
        help="latency statistic: the median run (default), or the fastest, which a machine shared with other work disturbs least",
    )
    ap.add_argument("--peak", type=float, help="single-core FMA peak in GFLOP/s (default: measure it)")
    ap.add_argument(
        "--paths",
        action="store_true",
        help="also the rate of each counted op type on its own (its multiply-adds over its own time in the per-op profile)",
    )
    ap.add_argument("--markdown", help="append the table to this file")
    ap.add_argument("--title", default="GFLOP/s per model")
    a = ap.parse_args()
    if a.peak:
        peak, note = a.peak, f"peak {a.peak:.1f} GFLOP/s per core (given)"
    else:
        peak, note = measure_peak()
    print(note)
    rows = []
    for m in a.models:
        path = pathlib.Path(m).expanduser()
        per_op = model_macs(a.ferrite, path)
        macs = sum(per_op.values())
        if not macs:
            # Every model this tool is pointed at has float GEMM-like ops: none
            # counted means the shapes were not read (a changed inspect format).
            sys.exit(f"gflops.py: no float multiply-adds counted in {path.name}")
        ms = latency_ms(a.ferrite, path, a.threads, a.runs, a.stat)
        gf = 2 * macs / (ms * 1e6) if ms > 0 else 0.0
        pct = 100 * gf / (peak * a.threads) if peak else 0.0
        rows.append((path.name, 2 * macs / 1e9, ms, gf, pct, per_op, None))
        print(f"{path.name:44} {2 * macs / 1e9:8.3f} GFLOP {ms:9.3f} ms {gf:7.1f} GFLOP/s {pct:5.1f}% of {a.threads} x peak", flush=True)
        if a.paths:
            paths = path_rates(a.ferrite, path, a.threads, a.runs, a.stat)
            total_ms = sum(e[1] for e in paths.values()) or 1.0
            for name, (pm, pms, n) in sorted(paths.items(), key=lambda kv: -kv[1][1]):
                if pm:
                    pgf = 2 * pm / (pms * 1e6) if pms > 0 else 0.0
                    ppct = 100 * pgf / (peak * a.threads) if peak else 0.0
                    print(f"    {name:24} {n:4} ops {pms:8.3f} ms ({100 * pms / total_ms:4.1f}% of the profiled time) {pgf:7.1f} GFLOP/s {ppct:5.1f}%")
                else:
                    print(f"    {name:24} {n:4} ops {pms:8.3f} ms ({100 * pms / total_ms:4.1f}% of the profiled time), not counted")
            rows[-1] = rows[-1][:5] + (per_op, paths)
    if a.markdown:
        # With --paths: the two convolution paths' own rates beside the whole run's.
        cols = ["CONV_2D", "DEPTHWISE_CONV_2D"] if a.paths else []
        with open(a.markdown, "a") as f:
            f.write(f"\n### {a.title}\n\n{note}; {a.threads} thread(s), {a.stat} of {a.runs} runs.\n\n")
            extra = "".join(f" {c} alone (GFLOP/s, % of peak, share of time) |" for c in cols)
            f.write(f"| model | GFLOP per run | ferrite {a.stat} (ms) | GFLOP/s | % of peak | largest share |{extra}\n")
            f.write("|---|---|---|---|---|---|" + "---|" * len(cols) + "\n")
            for name, gflop, ms, gf, pct, per_op, paths in rows:
                top = max(per_op, key=per_op.get) if per_op else "-"
                share = f"{top} {100 * per_op[top] / sum(per_op.values()):.0f}%" if per_op else "-"
                cells = ""
                for c in cols:
                    pm, pms, _ = paths.get(c, (0, 0.0, 0))
                    total_ms = sum(e[1] for e in paths.values()) or 1.0
                    pgf = 2 * pm / (pms * 1e6) if pms > 0 else 0.0
                    cells += f" {pgf:.1f}, {100 * pgf / (peak * a.threads):.0f}%, {100 * pms / total_ms:.0f}% |" if pm else " - |"
                f.write(f"| {name} | {gflop:.3f} | {ms:.3f} | {gf:.1f} | {pct:.0f}% | {share} |{cells}\n")

if __name__ == "__main__":
    main()
