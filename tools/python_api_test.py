#!/usr/bin/env python3
"""Runs one script against LiteRT's Interpreter and ferrite's Python Interpreter.

For every corpus model the same function loads the model, checks the input and
output details, feeds seeded inputs, invokes (three times for streaming models)
and collects outputs; the two runs are then compared: details key by key, float
outputs within the conformance tolerance, integer outputs exactly (LiteRT's
builtin kernels without XNNPACK for integer models, as in the conformance suite).

  python_api_test.py --corpus DIR
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

import ferrite

TOL = 1e-3
# The models the conformance suite skips, for the same reasons (one list).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from conformance import PLAUSIBILITY, SKIP  # noqa: E402


def exercise(make, path, seed):
    """The script run against both interpreters."""
    it = make(path)
    # Dynamic dimensions get a concrete size through the resize API: batch 1, other
    # dims (an audio length) 16000.
    for d in it.get_input_details():
        sig = [int(v) for v in d["shape_signature"]]
        if -1 in sig:
            it.resize_tensor_input(d["index"], [(1 if i == 0 else 16000) if v == -1 else v for i, v in enumerate(sig)])
    it.allocate_tensors()
    ins, outs = it.get_input_details(), it.get_output_details()
    rng = np.random.default_rng(seed)
    results = []
    for _step in range(3):
        for d in ins:
            shape = [int(v) for v in d["shape"]]
            if np.dtype(d["dtype"]).kind in "iu":
                info = np.iinfo(d["dtype"])
                x = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(d["dtype"])
            elif d["dtype"] == np.bool_:
                x = rng.integers(0, 2, size=shape).astype(np.bool_)
            else:
                x = rng.uniform(-1, 1, size=shape).astype(d["dtype"])
            it.set_tensor(d["index"], x)
        it.invoke()
        results.append([np.array(it.get_tensor(d["index"])) for d in it.get_output_details()])
    sigs = it.get_signature_list()
    dynamic = any(-1 in list(d["shape_signature"]) for d in ins)
    if len(sigs) == 1 and not dynamic:
        # A fresh interpreter: a runner shares state (variables, resized shapes) with the
        # interpreter it came from, in both runtimes; this one starts from the model's own.
        runner = make(path).get_signature_runner()
        feed = {}
        for name, d in sorted(runner.get_input_details().items()):
            feed[name] = rng.uniform(-1, 1, size=[int(v) for v in d["shape"]]).astype(d["dtype"]) if np.dtype(d["dtype"]).kind == "f" else np.zeros(d["shape"], d["dtype"])
        res = runner(**feed)
        results.append([np.array(res[k]) for k in sorted(res)])
    return ins, outs, results, sigs


def compare_details(a, b, what):
    for x, y in zip(a, b, strict=True):
        for key in ("name", "index", "dtype", "quantization"):
            if x[key] != y[key]:
                raise AssertionError(f"{what} {key}: LiteRT {x[key]!r}, ferrite {y[key]!r}")
        if list(x["shape"]) != list(y["shape"]):
            raise AssertionError(f"{what} shape: LiteRT {list(x['shape'])}, ferrite {list(y['shape'])}")
        qa, qb = x["quantization_parameters"], y["quantization_parameters"]
        if not (np.array_equal(qa["scales"], qb["scales"]) and np.array_equal(qa["zero_points"], qb["zero_points"])):
            raise AssertionError(f"{what} quantization_parameters differ")
        if set(x) - set(y):
            raise AssertionError(f"{what}: ferrite lacks keys {sorted(set(x) - set(y))}")


def check_error_location():
    """An op that cannot run on the resized input raises a RuntimeError (an Exception)
    that says which op: attributes subgraph, op_index, op_name."""
    demo = Path(__file__).resolve().parent.parent / "models" / "demo.tflite"
    it = ferrite.Interpreter(model_path=str(demo))
    d = it.get_input_details()[0]
    # One channel more than the first convolution's weights take.
    it.resize_tensor_input(d["index"], [1, 32, 32, int(d["shape"][-1]) + 1])
    try:
        it.allocate_tensors()
    except Exception as e:  # noqa: BLE001 - the point: a plain Exception
        where = (getattr(e, "subgraph", None), getattr(e, "op_index", None), getattr(e, "op_name", None))
        ok = isinstance(e, RuntimeError) and where == (0, 0, "CONV_2D")
        print(f"{'ok  ' if ok else 'FAIL'} error location: {type(e).__name__} at {where}: {e}")
        return ok
    print("FAIL error location: giving the demo input an extra channel did not fail")
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    args = ap.parse_args()
    models = sorted(p for p in Path(args.corpus).rglob("*.tflite"))
    failed = passed = 0
    for k, path in enumerate(models):
        if path.name in SKIP:
            print(f"SKIP {path.name}: {SKIP[path.name]}")
            continue
        if path.name in PLAUSIBILITY:
            # Compared with LiteRT, which cannot run it; conformance.py checks it.
            print(f"SKIP {path.name}: LiteRT cannot run it ({PLAUSIBILITY[path.name]} checks it)")
            continue
        probe = LiteRT(model_path=str(path))
        integer = any(np.dtype(d["dtype"]).kind in "iu" for d in probe.get_input_details() + probe.get_output_details())
        # Quantized internals are compared with LiteRT's builtin integer kernels (XNNPACK's
        # differ by a quantization step), float models with its default resolver.
        quantized = any(np.dtype(d["dtype"]).kind in "iu" and len(d["quantization_parameters"]["scales"]) for d in probe.get_tensor_details())
        resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if quantized else OpResolverType.AUTO
        try:
            want = exercise(lambda p: LiteRT(model_path=str(p), experimental_op_resolver_type=resolver), path, k)
            # Where LiteRT's builtin integer kernels and its reference kernels disagree (their
            # int8 depthwise rounds an intermediate differently), ferrite may follow either:
            # each output value is compared with the nearer of the two, as in conformance.py.
            ref = exercise(lambda p: LiteRT(model_path=str(p), experimental_op_resolver_type=OpResolverType.BUILTIN_REF), path, k) if quantized else None
            # Half the models load from bytes, half from the path.
            if k % 2:
                got = exercise(lambda p: ferrite.Interpreter(model_content=p.read_bytes()), path, k)
            else:
                got = exercise(lambda p: ferrite.Interpreter(model_path=str(p)), path, k)
            compare_details(want[0], got[0], "input")
            compare_details(want[1], got[1], "output")
            if want[3] != got[3]:
                raise AssertionError(f"signature lists differ: LiteRT {want[3]}, ferrite {got[3]}")
            worst = 0.0
            for s, (step_w, step_g) in enumerate(zip(want[2], got[2], strict=True)):
                for j, (w, g) in enumerate(zip(step_w, step_g, strict=True)):
                    if w.shape != g.shape or w.dtype != g.dtype:
                        raise AssertionError(f"output {w.dtype}{list(w.shape)} vs {g.dtype}{list(g.shape)}")
                    if ref is not None:
                        r, g64 = ref[2][s][j], g.astype(np.float64)
                        w = np.where(np.abs(g64 - r) < np.abs(g64 - w), r, w)
                    if w.dtype.kind in "iub":
                        worst = max(worst, float(np.max(np.abs(w.astype(np.int64) - g.astype(np.int64)), initial=0)))
                    else:
                        scale = max(1.0, float(np.max(np.abs(w), initial=0)))
                        worst = max(worst, float(np.max(np.abs(w - g), initial=0)) / scale)
            ok = worst == 0 if integer else worst <= TOL
            print(f"{'ok  ' if ok else 'FAIL'} {path.name}: worst error {worst:.3e} over 3 invocations ({'integer, exact' if integer else f'tolerance {TOL}'})")
            passed += ok
            failed += not ok
        except Exception as e:  # noqa: BLE001
            print(f"FAIL {path.name}: {e}")
            failed += 1
    ok = check_error_location()
    passed += ok
    failed += not ok
    print(f"python api: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
