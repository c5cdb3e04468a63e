#!/usr/bin/env python3
"""Differential tests: ferrite (through its CLI) against LiteRT on the same inputs.

  conformance.py models --ferrite BIN --corpus DIR   real models, LiteRT default resolver (XNNPACK)
  conformance.py ops --ferrite BIN --opgen BIN       generated single-op models, LiteRT BUILTIN_REF
  conformance.py models --exact-reference ...        fully integer models with float I/O: outputs
                                                     equal to LiteRT BUILTIN_REF's, value for value

Both take --backends LIST and --op-backend OP=BACKEND (passed to `ferrite run`), and
--alternate A,B, which pins the even-numbered ops of the model's main subgraph to
backend A and the odd ones to B: every tensor then crosses between backends. With
any of them each case also reports how many ops ran on each backend.

Tolerances (documented in docs/conformance.md): float outputs are compared by
  err = max|ferrite - litert| / max(1, max|litert|)
which must be <= 1e-3 for whole models and <= 1e-5 for single ops. Integer and
bool outputs must match exactly. Every case prints its worst error.
"""
import argparse
import functools
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

MODEL_TOL = 1e-3
OP_TOL = 1e-5
# Hybrid (dynamic-range) ops quantize activations at run time; the integer part is
# exact, the float rescale may round differently from LiteRT's.
HYBRID_TOL = 1e-4
# Hybrid recurrent ops quantize their state again at every step: a last-bit float
# difference (an activation, a normalization) can move one value across a rounding
# boundary, one quantization step that the following steps carry on.
RECURRENT_HYBRID_TOL = 1e-3


def op_tolerance(case):
    # Random streams (LiteRT's Philox words through the same float steps) match exactly.
    if case.get("exact"):
        return 0.0
    if "_HYBRID" not in case["op"]:
        return OP_TOL
    return RECURRENT_HYBRID_TOL if case.get("steps", 1) > 1 else HYBRID_TOL

# Models that need more than their default input shape, or that ferrite does not run yet.
DYNAMIC_SIZES = {"melspectrogram.tflite": [1, 16000]}
# (Every corpus and generated model runs now; the MediaPipe model LiteRT cannot run is
# checked by tools/mediapipe_ops_check.py instead.)
SKIP: dict[str, str] = {}

# Models LiteRT cannot run, checked by a tool of their own instead: their custom ops
# op by op against numpy, the rest of the model against LiteRT, the outputs for
# plausibility. Listed with the tool; they take the same backend flags.
PLAUSIBILITY = {
    # MediaPipe's Landmarks2TransformMatrix, TransformTensorBilinear, TransformLandmarks.
    "face_landmark_with_attention.tflite": "tools/mediapipe_ops_check.py",
}


# Backend flags for `ferrite run`, from --backends / --op-backend / --alternate.
BACKEND_ARGS = {"backends": None, "op_backends": [], "alternate": None}


@functools.lru_cache(maxsize=None)
def main_op_count(binary, model):
    """Ops in the model's main subgraph (asked once per model: runs and reports share it)."""
    r = subprocess.run([binary, "inspect", "--json", model], capture_output=True, text=True, check=True)
    return len(json.loads(r.stdout)["subgraphs"][0]["ops"])


def backend_flags(binary, model):
    """The `ferrite run` flags choosing backends for `model` (empty when none were asked for)."""
    flags = []
    if BACKEND_ARGS["backends"]:
        flags += ["--backends", BACKEND_ARGS["backends"]]
    for ob in BACKEND_ARGS["op_backends"]:
        flags += ["--op-backend", ob]
    if BACKEND_ARGS["alternate"]:
        a, b = BACKEND_ARGS["alternate"].split(",")
        n = main_op_count(binary, str(model))
        flags += ["--backends", f"{a},{b}"]
        for i in range(n):
            flags += ["--op-backend", f"{i}={a if i % 2 == 0 else b}"]
    return flags


def backend_counts(binary, model):
    """({backend or how an op runs: count}, crossings) under the chosen backends, or None when none were asked for."""
    flags = backend_flags(binary, model)
    if not flags:
        return None
    if model.name in DYNAMIC_SIZES:
        flags += ["--shape", ",".join(map(str, DYNAMIC_SIZES[model.name]))]
    r = subprocess.run([binary, "inspect", "--json", str(model)] + flags, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("ferrite inspect --backends failed: " + r.stderr.strip())
    doc = json.loads(r.stdout)
    return doc["ops_per_backend"], len(doc["crossings"])


def backend_summary(binary, model):
    """'ops per backend reference: 12, cpu: 3; 4 crossings', or '' when no backends were asked for."""
    counts = backend_counts(binary, model)
    if counts is None:
        return ""
    per = ", ".join(f"{k}: {v}" for k, v in counts[0].items())
    return f"ops per backend {per}; {counts[1]} crossings"


def run_ferrite(binary, model, inputs, workdir, steps=None):
    paths = []
    for k, x in enumerate(inputs):
        p = workdir / f"in_{k}.npy"
        # String arrays go to ferrite as bytes arrays ('S'; .npy keeps objects only pickled).
        np.save(p, x.astype(np.bytes_) if x.dtype == object else x)
        paths.append(p)
    out = workdir / "out"
    # Start from an empty directory so no earlier case's outputs are read back.
    shutil.rmtree(out, ignore_errors=True)
    cmd = [binary, "run", str(model), "-o", str(out)] + backend_flags(binary, model)
    if steps:
        cmd += ["--steps", str(steps)]
    for p in paths:
        cmd += ["-i", str(p)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    outs = []
    k = 0
    while (out / f"output_{k}.npy").exists():
        outs.append(np.load(out / f"output_{k}.npy"))
        k += 1
    return outs


STREAM_STEPS = 50


def run_litert_stream(model, steps_inputs, resolver=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, steps=None):
    """Integer models: LiteRT's builtin kernels (no XNNPACK), one interpreter over all steps
    (`steps` of them: a model without inputs, such as a random op's, has no inputs to count)."""
    try:
        it = Interpreter(model_path=str(model), experimental_op_resolver_type=resolver)
    except ValueError as e:
        # The reference resolver lacks a few builtins (the HASHTABLE family): its builtin kernels then.
        if resolver != OpResolverType.BUILTIN_REF or "Didn't find op" not in str(e):
            raise
        it = Interpreter(model_path=str(model), experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    outs = []
    for step in range(steps if steps is not None else len(steps_inputs[0])):
        for d, x in zip(it.get_input_details(), steps_inputs):
            it.set_tensor(d["index"], x[step])
        it.invoke()
        outs.append([it.get_tensor(d["index"]).copy() for d in it.get_output_details()])
    return [np.stack([o[k] for o in outs]) for k in range(len(outs[0]))]


# Ops whose later versions only add element types that LiteRT's reference kernel
# already handles, while its reference resolver registers version 1 alone
# (DEPTH_TO_SPACE: version 2 is int8). Their models run on the reference kernels
# with the version lowered, instead of falling back to the builtin kernels, whose
# optimized requantization rounds ties differently.
REF_VERSION_ONE = ("DEPTH_TO_SPACE",)


def with_ref_versions(model):
    """The model's bytes with the ops of REF_VERSION_ONE at version 1."""
    from ai_edge_litert import schema_py_generated as schema
    import flatbuffers

    m = schema.ModelT.InitFromPackedBuf(pathlib.Path(model).read_bytes(), 0)
    codes = {getattr(schema.BuiltinOperator, name) for name in REF_VERSION_ONE}
    for oc in m.operatorCodes:
        if max(oc.builtinCode, oc.deprecatedBuiltinCode) in codes:
            oc.version = 1
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def run_litert(model, inputs, reference, delegates=True):
    if reference:
        kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_REF}
    elif not delegates:
        kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    else:
        kw = {}
    try:
        it = Interpreter(model_path=str(model), **kw)
    except ValueError as e:
        # A few builtins (SEGMENT_SUM) are missing from LiteRT's reference resolver:
        # those are compared with its builtin kernels.
        if not reference or "Didn't find op" not in str(e):
            raise
        try:
            it = Interpreter(model_content=with_ref_versions(model), **kw)
        except ValueError:
            it = Interpreter(model_path=str(model), experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    for d, x in zip(it.get_input_details(), inputs):
        if list(d["shape"]) != list(x.shape):
            it.resize_tensor_input(d["index"], list(x.shape))
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def compare(got, want):
    """Worst error over all outputs, or raises on a shape/type mismatch."""
    if len(got) != len(want):
        raise RuntimeError(f"{len(got)} outputs, expected {len(want)}")
    worst = 0.0
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            raise RuntimeError(f"output {k}: shape {g.shape}, expected {w.shape}")
        if w.dtype.kind in "OSU":
            # String outputs: equal item by item (as bytes), or the case fails.
            as_bytes = lambda a: [v if isinstance(v, bytes) else str(v).encode() for v in a.ravel().tolist()]
            if as_bytes(g) != as_bytes(w):
                raise RuntimeError(f"output {k}: strings {as_bytes(g)[:6]}..., expected {as_bytes(w)[:6]}...")
            continue
        if w.dtype.kind == "f":
            if not np.array_equal(np.isnan(g), np.isnan(w)):
                raise RuntimeError(f"output {k}: NaN positions differ")
            m = ~np.isnan(w)
            if m.any():
                scale = max(1.0, float(np.max(np.abs(w[m]))))
                worst = max(worst, float(np.max(np.abs(g[m].astype(np.float64) - w[m].astype(np.float64)))) / scale)
        else:
            if g.dtype != w.dtype:
                raise RuntimeError(f"output {k}: dtype {g.dtype}, expected {w.dtype}")
            worst = max(worst, float(np.max(np.abs(g.astype(np.int64) - w.astype(np.int64)), initial=0)))
    return worst


def model_inputs(model, rng):
    it = Interpreter(model_path=str(model))
    xs = []
    for d in it.get_input_details():
        shape = DYNAMIC_SIZES.get(model.name) or [int(v) if v > 0 else 1 for v in d["shape_signature"]]
        if d["dtype"] == np.float32:
            xs.append(rng.uniform(-1.0, 1.0, size=shape).astype(np.float32))
        else:
            xs.append(rng.integers(0, 10, size=shape).astype(d["dtype"]))
    return xs


def takes_token_ids(model):
    """int32/int64 inputs and float outputs only: a text model's token ids."""
    it = Interpreter(model_path=str(model))
    ins = [d["dtype"] for d in it.get_input_details()]
    outs = [d["dtype"] for d in it.get_output_details()]
    return all(t in (np.int32, np.int64) for t in ins) and all(t == np.float32 for t in outs)


def converter_made(model):
    """Models the test setup converts with TensorFlow (tools/tf_models.py, tools/unseen_models.py,
    tools/family_models.py)."""
    return any(p.startswith(("tf-generated-", "unseen-", "families-")) for p in model.parts)


EXACT_RUNS = 8


def cmd_models_exact(args, models):
    """Integer models with float I/O against LiteRT's reference kernels: the float
    outputs are dequantized integers, so any difference is a whole quantization step."""
    passed = failed = 0
    for m in models:
        rng = np.random.default_rng(sum(m.name.encode()))
        worst = 0.0
        diffs = total = 0
        try:
            for run in range(EXACT_RUNS):
                # Inputs over several magnitudes: small ones exercise the rounding
                # near zero, large ones the saturation.
                # (Token ids stay as they are: indices, not magnitudes.)
                xs = [x * np.float32(10.0 ** rng.uniform(-1, 0.5)) if x.dtype.kind == "f" else x for x in model_inputs(m, rng)]
                with tempfile.TemporaryDirectory() as td:
                    got = run_ferrite(args.ferrite, m, xs, pathlib.Path(td))
                want = run_litert(m, xs, reference=True)
                worst = max(worst, compare(got, want))
                diffs += sum(int(np.sum(g != w)) for g, w in zip(got, want))
                total += sum(w.size for w in want)
        except Exception as e:  # noqa: BLE001 - report and count every failure
            print(f"FAIL {m.name}: {e}")
            failed += 1
            continue
        ok = diffs == 0
        print(f"{'ok  ' if ok else 'FAIL'} {m.name}: {diffs} of {total} output values differ from LiteRT's reference kernels over {EXACT_RUNS} inputs (worst error {worst:.3e})")
        passed += ok
        failed += not ok
    print(f"models (exact vs reference kernels): {passed} passed, {failed} failed")
    return failed == 0


def cmd_models(args):
    models = sorted(pathlib.Path(args.corpus).rglob("*.tflite"))
    if not models:
        sys.exit(f"no models under {args.corpus}; run tools/fetch_models.py")
    if args.exact_reference:
        return cmd_models_exact(args, models)
    passed = failed = skipped = 0
    rows = []
    for m in models:
        if m.name in SKIP:
            print(f"SKIP {m.name}: {SKIP[m.name]}")
            skipped += 1
            continue
        if m.name in PLAUSIBILITY:
            tool = pathlib.Path(__file__).parent / pathlib.Path(PLAUSIBILITY[m.name]).name
            cmd = [sys.executable, str(tool), "--ferrite", args.ferrite, "--model", str(m)]
            cmd += [f"--run-arg={f}" for f in backend_flags(args.ferrite, m)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            for line in r.stdout.splitlines():
                print(f"     {line.strip()}")
            ok = r.returncode == 0
            print(f"{'ok  ' if ok else 'FAIL'} {m.name}: checked by {PLAUSIBILITY[m.name]} (LiteRT cannot run it){'' if ok else ': ' + r.stderr.strip()[-2000:]}")
            passed += ok
            failed += not ok
            continue
        rng = np.random.default_rng(sum(m.name.encode()))
        xs = model_inputs(m, rng)
        # Integer models run as a stream of steps in one session and must match exactly.
        # Token ids into float outputs (an embedding lookup) are indices, not quantized
        # data: those models take the float path with small ids.
        integer = any(x.dtype.kind in "iu" for x in xs) and not takes_token_ids(m)
        tol = 0 if integer else MODEL_TOL
        with tempfile.TemporaryDirectory() as td:
            try:
                if integer:
                    seq = [np.stack([rng.integers(np.iinfo(x.dtype).min, np.iinfo(x.dtype).max, size=x.shape, endpoint=True).astype(x.dtype) for _ in range(STREAM_STEPS)]) for x in xs]
                    got = run_ferrite(args.ferrite, m, seq, pathlib.Path(td), steps=STREAM_STEPS)
                    # Bit-exact with LiteRT's optimized builtin kernels, or where those and
                    # its reference kernels disagree, with one of the two.
                    opt = run_litert_stream(m, seq)
                    ref = run_litert_stream(m, seq, OpResolverType.BUILTIN_REF)
                    want = [np.where(g == r, r, o) for g, o, r in zip(got, opt, ref)]
                    notes = []
                    for name, w in (("optimized", opt), ("reference", ref)):
                        if all(np.array_equal(g, x) for g, x in zip(got, w)):
                            notes.append(name)
                    kernels = " and ".join(notes) if notes else "neither kernel set alone"
                    print(f"     {m.name}: bit-exact with LiteRT's {kernels} kernels over {STREAM_STEPS} steps")
                elif converter_made(m):
                    # Converter-made quantized models: LiteRT's builtin kernels (no XNNPACK)
                    # and reference kernels; each value is compared with the nearer one.
                    got = run_ferrite(args.ferrite, m, xs, pathlib.Path(td))
                    opt = run_litert(m, xs, reference=False, delegates=False)
                    ref = run_litert(m, xs, reference=True)
                    want = [np.where(np.abs(g.astype(np.float64) - o) <= np.abs(g.astype(np.float64) - r), o, r) if g.shape == o.shape == r.shape else o for g, o, r in zip(got, opt, ref)]
                else:
                    got = run_ferrite(args.ferrite, m, xs, pathlib.Path(td))
                    want = run_litert(m, xs, reference=False)
                err = compare(got, want)
                ok = err <= tol
            except Exception as e:  # noqa: BLE001 - report and count every failure
                print(f"FAIL {m.name}: {e}")
                failed += 1
                continue
        unit = " LSB over " + str(STREAM_STEPS) + " steps" if integer else ""
        print(f"{'ok  ' if ok else 'FAIL'} {m.name}: worst error {err:.3e}{unit} (tolerance {tol:g})")
        try:
            summary = backend_summary(args.ferrite, m)
        except Exception as e:  # noqa: BLE001 - an inspect failure fails the case
            print(f"FAIL {m.name}: {e}")
            ok = False
            summary = ""
        if summary:
            print(f"     {m.name}: {summary}")
        row = {"model": m.name, "package": m.relative_to(args.corpus).parts[0], "worst_error": err, "ok": ok, "integer": integer}
        if args.markdown:
            cmd = [args.ferrite, "bench", str(m), "--threads", "1", "--warmup", "3", "--runs", "15", "--json"]
            if m.name in DYNAMIC_SIZES:
                cmd += ["--shape", ",".join(map(str, DYNAMIC_SIZES[m.name]))]
            r = subprocess.run(cmd, capture_output=True, text=True, check=True)
            row["median_ms"] = json.loads(r.stdout)["execute_ms"]["median"]
        rows.append(row)
        passed += ok
        failed += not ok
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.markdown:
        lines = ["| package | model | worst error | ferrite bench median, 1 thread (ms) |", "|---|---|---|---|"]
        lines += [f"| {r['package']} | {r['model']} | {r['worst_error']:.2e}{' LSB (int8, ' + str(STREAM_STEPS) + ' steps)' if r['integer'] else ''} | {r['median_ms']:.2f} |" for r in rows]
        lines += [f"| — | {name} | skipped: {why} | — |" for name, why in SKIP.items()]
        lines += [f"| — | {name} | LiteRT cannot run it: checked by {tool} | — |" for name, tool in PLAUSIBILITY.items()]
        pathlib.Path(args.markdown).write_text("\n".join(lines) + "\n")
    print(f"models: {passed} passed, {failed} failed, {skipped} skipped")
    return failed == 0


def refused_by_both(ferrite, model):
    """True when LiteRT fails to prepare or run `model` and `ferrite run` exits with an error."""
    try:
        it = Interpreter(model_path=str(model))
        it.allocate_tensors()
        it.invoke()
        return False
    except Exception:  # noqa: BLE001
        pass
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([ferrite, "run", str(model), "--output-dir", out], capture_output=True, text=True)
    return r.returncode != 0 and "unsupported" in (r.stderr + r.stdout).lower()


def detection_defined_rows(rows, got, want):
    """TFLite_Detection_PostProcess: zero, on both sides, the output rows LiteRT
    leaves unwritten (what its arena held; ferrite writes zeros there): fast NMS
    fills min(max_classes_per_detection, num_classes) rows per detection in blocks
    of max_classes_per_detection, regular NMS the first max_detections rows."""
    per_block = rows["max_classes_per_detection"]
    n = rows["max_detections"] * per_block
    defined = np.zeros(n, dtype=bool)
    if rows["regular"]:
        defined[: rows["max_detections"]] = True
    else:
        count = int(want[3].ravel()[0]) if want[3].size else 0
        for k in range(min(count, rows["max_detections"])):
            defined[k * per_block : k * per_block + min(per_block, rows["num_classes"])] = True
    out = []
    for side in (got, want):
        side = [np.array(x, copy=True) for x in side]
        for k in range(3):
            if side[k].size == n * (4 if k == 0 else 1):
                side[k].reshape(n, -1)[~defined] = 0
        out.append(side)
    return out[0], out[1]


def cmd_ops(args):
    with tempfile.TemporaryDirectory() as td:
        td = pathlib.Path(td)
        subprocess.run([args.opgen, "ops", str(td / "ops"), "--seed", str(args.seed), "--per-op", str(args.per_op)], check=True)
        manifest = json.loads((td / "ops" / "manifest.json").read_text())
        passed = failed = 0
        worst_by_op = {}
        ran_on = {}
        for case in manifest:
            if args.only and not re.search(args.only, case["op"]):
                continue
            model = td / "ops" / case["file"]
            if case.get("refused"):
                # LiteRT has no kernel for this type combination: both must say so.
                ok = refused_by_both(args.ferrite, model)
                if not ok:
                    print(f"FAIL {case['file']}: expected LiteRT and ferrite to refuse it")
                worst_by_op.setdefault(case["op"] + " (refused)", 0.0)
                passed += ok
                failed += not ok
                continue
            rng = np.random.default_rng(sum(case["file"].encode()) + args.seed)
            try:
                it = Interpreter(model_path=str(model))
                xs = []
                ranges = iter(case["ranges"])
                for k, d in enumerate(it.get_input_details()):
                    if str(k) in case.get("strings", {}):
                        # String inputs: the generator's strings, as LiteRT takes them (bytes objects).
                        items = [v.encode() for v in case["strings"][str(k)]]
                        xs.append(np.array(items, dtype=object).reshape(list(d["shape"])))
                        continue
                    if str(k) in case.get("fixed", {}):
                        # Fixed values take the input's declared element type (int64,
                        # bool, uint8, ...; the generator lists them as integers).
                        x = np.array(case["fixed"][str(k)], dtype=np.int64).astype(d["dtype"])
                        # Values listed flat take the input's declared shape (scalars too).
                        xs.append(x.reshape(list(d["shape"])) if x.size == int(np.prod(d["shape"])) else x)
                        continue
                    if np.dtype(d["dtype"]).kind == "b":
                        xs.append(rng.integers(0, 2, size=list(d["shape"])).astype(np.bool_))
                        continue
                    if np.dtype(d["dtype"]).kind in "iu":
                        info = np.iinfo(d["dtype"])
                        # uint64's top exceeds numpy's default int64 draw: draw in the type itself.
                        wide = {"dtype": np.uint64} if np.dtype(d["dtype"]) == np.uint64 else {}
                        xs.append(rng.integers(info.min, info.max, size=list(d["shape"]), endpoint=True, **wide).astype(d["dtype"]))
                        continue
                    lo, hi = next(ranges)
                    # float32 values, in the input's own float type (float64 for some).
                    x = rng.uniform(lo, hi, size=list(d["shape"])).astype(np.float32).astype(d["dtype"])
                    xs.append(np.round(x) if case["integral"] else x)
                steps = case.get("steps", 1)
                if steps > 1:
                    # Stateful ops (variable tensors): one session over a stream of
                    # inputs on each side, so the state carries from run to run.
                    def more(k, x):
                        # Fixed inputs (a random op's shape) stay; integer inputs take
                        # the type's whole range, float ones the case's.
                        if str(k) in case.get("fixed", {}):
                            return x
                        if str(k) in case.get("strings", {}):
                            # String inputs: the case's strings, reshuffled.
                            return rng.permutation(x)
                        if x.dtype.kind in "iu":
                            info = np.iinfo(x.dtype)
                            wide = {"dtype": np.uint64} if x.dtype == np.uint64 else {}
                            return rng.integers(info.min, info.max, size=x.shape, endpoint=True, **wide).astype(x.dtype)
                        return rng.uniform(*case["ranges"][min(k, len(case["ranges"]) - 1)], size=x.shape).astype(x.dtype)

                    seq = [np.stack([x] + [more(k, x) for _ in range(steps - 1)]) for k, x in enumerate(xs)]
                    want = run_litert_stream(model, seq, OpResolverType.BUILTIN_REF, steps=steps)
                    got = run_ferrite(args.ferrite, model, seq, td, steps=steps)
                else:
                    # A few ops are compared with LiteRT's builtin kernels where its
                    # reference kernel departs from TensorFlow's definition (see opgen).
                    want = run_litert(model, xs, reference=not case.get("builtin_oracle"), delegates=False)
                    got = run_ferrite(args.ferrite, model, xs, td)
                if steps == 1 and any(w.dtype.kind in "iu" for w in want):
                    # Integer outputs: equal to the reference kernels, or where LiteRT's
                    # optimized kernels disagree with them, to those.
                    opt = run_litert(model, xs, reference=False, delegates=False)
                    want = [np.where(g == w, w, o) if g.shape == w.shape else w for g, w, o in zip(got, want, opt)]
                if case.get("detection_rows"):
                    got, want = detection_defined_rows(case["detection_rows"], got, want)
                err = compare(got, want)
                ok = err <= op_tolerance(case)
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {case['file']}: {e}")
                failed += 1
                continue
            worst_by_op[case["op"]] = max(worst_by_op.get(case["op"], 0.0), err)
            try:
                counts = backend_counts(args.ferrite, model)
            except Exception as e:  # noqa: BLE001 - an inspect failure fails the case
                print(f"FAIL {case['file']}: {e}")
                ok, counts = False, None
            if counts is not None:
                # Which backend ran the case's ops (a case runs on the first backend that has the kernel).
                tally = ran_on.setdefault(case["op"], {})
                for b, n in counts[0].items():
                    tally[b] = tally.get(b, 0) + n
            if not ok:
                tol = op_tolerance(case)
                print(f"FAIL {case['file']}: worst error {err:.3e} (tolerance {tol:.0e})")
            passed += ok
            failed += not ok
        for op, e in sorted(worst_by_op.items()):
            where = ", ".join(f"{b}: {n}" for b, n in sorted(ran_on.get(op, {}).items()))
            print(f"  {op:<30} worst error {e:.3e}" + (f"   ops run by {where}" if where else ""))
        if ran_on:
            total = {}
            for t in ran_on.values():
                for b, n in t.items():
                    total[b] = total.get(b, 0) + n
            print("ops run by backend over all cases: " + ", ".join(f"{b}: {n}" for b, n in sorted(total.items())))
    print(f"single-op: {passed} passed, {failed} failed")
    return failed == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("models")
    m.add_argument("--ferrite", required=True)
    m.add_argument("--corpus", required=True)
    m.add_argument("--json")
    m.add_argument("--markdown", help="write a table of errors and bench medians")
    m.add_argument("--exact-reference", action="store_true", help="float-I/O integer models: every output value equal to LiteRT's reference kernels' (several random inputs each)")
    o = sub.add_parser("ops")
    o.add_argument("--ferrite", required=True)
    o.add_argument("--opgen", required=True)
    o.add_argument("--seed", type=int, default=1)
    o.add_argument("--per-op", type=int, default=4)
    o.add_argument("--only", help="regular expression: run only the ops it matches")
    for p in (m, o):
        p.add_argument("--backends", help="backends for ferrite, e.g. reference,cpu")
        p.add_argument("--op-backend", action="append", default=[], help="OP=BACKEND override for ferrite (repeatable)")
        p.add_argument("--alternate", help="A,B: even ops of the main subgraph on backend A, odd ones on B")
    args = ap.parse_args()
    BACKEND_ARGS.update(backends=args.backends, op_backends=args.op_backend, alternate=args.alternate)
    ok = cmd_models(args) if args.cmd == "models" else cmd_ops(args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
