#!/usr/bin/env python3
"""Which element types LiteRT runs each op of ferrite's op table with, by probing it.

`ferrite-opgen probe DIR` writes one single-op model per op and element-type column of
the coverage report (float32, int8, uint8, int16x8, hybrid, int); this script builds a
LiteRT interpreter on each (its builtin kernels, the default resolver without the
XNNPACK delegate), allocates it, sets inputs from the probe's value ranges and invokes
it once. A model that gets through is `runs`; one that LiteRT stops is `refuses`, with
the first line of LiteRT's error; a column that has no meaning for the op (a hybrid
model of an op without weights) is `n/a`.

  litert_types.py --opgen BIN [--out FILE] [--check FILE]

--check compares the probe with a checked-in file and fails on any difference (CI).
The result is checked in as crates/ferrite-format/coverage/litert_types.txt, which the
coverage report (`ferrite ops`, docs/ops.md) reads. Each probe runs in a worker process,
so a probe that crashes LiteRT is recorded (and checked by hand) instead of ending the run.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

HEADER = """\
# LiteRT 2.3.0's builtin kernels, per op of ferrite's op table and element type:
# does it allocate and invoke a single-op model? Written by tools/litert_types.py from
# the models of `ferrite-opgen probe`; read by ferrite-format's coverage report.
# OP | TYPE | runs/refuses/n/a/unprobed | LiteRT's first error line (or why the type does not apply / was not probed)
"""


def first_line(err):
    """LiteRT's first error line, without the source path's directories."""
    for line in str(err).splitlines():
        line = line.strip()
        if line:
            return re.sub(r"\S*/(\w+\.cc:\d+)", r"\1", line).replace("|", "/")
    return type(err).__name__


def make_inputs(it, entry, rng):
    import numpy as np

    xs = []
    for d, src in zip(it.get_input_details(), entry["inputs"]):
        shape = list(d["shape"])
        dt = np.dtype(d["dtype"])
        if src.get("fixed") is not None:
            x = np.array(src["fixed"], dtype=np.int64).astype(dt)
            xs.append(x.reshape(shape) if x.size == int(np.prod(shape)) else x)
            continue
        lo, hi = src["range"] if src.get("range") else (-2.0, 2.0)
        if dt.kind == "c":
            xs.append((rng.uniform(lo, hi, size=shape) + 1j * rng.uniform(lo, hi, size=shape)).astype(dt))
            continue
        if dt.kind == "b":
            xs.append(rng.integers(0, 2, size=shape).astype(np.bool_))
            continue
        real = rng.uniform(lo, hi, size=shape)
        if dt.kind == "f":
            xs.append(real.astype(dt))
            continue
        scale, zp = d["quantization"]
        info = np.iinfo(dt)
        if scale:
            q = np.round(real / scale) + zp if src.get("range") else rng.integers(info.min, info.max, size=shape, endpoint=True)
        else:
            # Plain integers: non-negative, so no op refuses a value (POW's exponent).
            q = np.abs(np.round(real))
        xs.append(np.clip(q, info.min, info.max).astype(dt))
    return xs


def with_version(data, version):
    """The model with its operator code at `version` (ferrite's writer writes 1)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(data, 0)
    for oc in m.operatorCodes:
        oc.version = version
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def interpreter(model):
    """An interpreter on LiteRT's builtin kernels. A builtin registered only from a later
    version (BROADCAST_TO starts at 2) is tried at the versions the resolver has."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    data = model.read_bytes()
    kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    try:
        return Interpreter(model_content=data, **kw)
    except ValueError as e:
        if "Didn't find op for builtin opcode" not in str(e):
            raise
        for version in range(2, 13):
            try:
                return Interpreter(model_content=with_version(data, version), **kw)
            except ValueError as e2:
                if "Didn't find op for builtin opcode" not in str(e2):
                    raise
        raise


def probe_one(model, entry):
    import numpy as np

    rng = np.random.default_rng(sum(entry["file"].encode()))
    try:
        it = interpreter(model)
        it.allocate_tensors()
        for d, x in zip(it.get_input_details(), make_inputs(it, entry, rng)):
            it.set_tensor(d["index"], x)
        it.invoke()
    except Exception as e:  # LiteRT raises ValueError or RuntimeError; both are refusals
        return "refuses", first_line(e)
    return "runs", ""


def worker(args):
    """Probes entries from --start on, one JSON line each, until done or crashed."""
    manifest = json.loads((args.dir / "manifest.json").read_text())
    for i in range(args.start, len(manifest)):
        e = manifest[i]
        if "na" in e:
            status, why = "n/a", e["na"]
        elif "unprobed" in e:
            status, why = "unprobed", e["unprobed"]
        else:
            status, why = probe_one(args.dir / e["file"], e)
        print(json.dumps([i, status, why]), flush=True)


def probe_all(directory):
    manifest = json.loads((directory / "manifest.json").read_text())
    results = {}
    start = 0
    while start < len(manifest):
        p = subprocess.run([sys.executable, __file__, "--worker", "--dir", str(directory), "--start", str(start)], capture_output=True, text=True)
        for line in p.stdout.splitlines():
            i, status, why = json.loads(line)
            results[i] = (status, why)
        done = max(results, default=-1) + 1
        if done < len(manifest) and p.returncode != 0:
            # The worker died on entry `done`: LiteRT crashed on it.
            results[done] = ("refuses", f"LiteRT crashed (exit status {p.returncode})")
            done += 1
        start = done
    lines = []
    for i, e in enumerate(manifest):
        status, why = results[i]
        lines.append(f"{e['op']} | {e['type']} | {status}" + (f" | {why}" if why else ""))
    return HEADER + "".join(line + "\n" for line in lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--opgen", help="ferrite-opgen binary")
    ap.add_argument("--out", type=pathlib.Path)
    ap.add_argument("--check", type=pathlib.Path)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=pathlib.Path, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    with tempfile.TemporaryDirectory() as td:
        d = pathlib.Path(td) / "probe"
        subprocess.run([args.opgen, "probe", str(d)], check=True)
        text = probe_all(d)
    if args.out:
        args.out.write_text(text)
    if args.check:
        old = args.check.read_text()
        if old != text:
            import difflib

            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(args.check), "probed"))
            sys.exit(f"litert_types: the probe differs from {args.check}; regenerate it with --out")
    if not args.out and not args.check:
        sys.stdout.write(text)
    counts = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            s = line.split(" | ")[2]
            counts[s] = counts.get(s, 0) + 1
    print(f"litert_types: {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()
