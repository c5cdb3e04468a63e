#!/usr/bin/env python3
"""Probes LiteRT's Python Interpreter surface on LiteRT and on ferrite, and prints the differences.

Every public method of ``ai_edge_litert.interpreter``'s Interpreter and SignatureRunner
(enumerated from the installed package) must exist on ferrite's with the same parameters.
Then each case below runs on both runtimes, on a few corpus models (float, int8, dynamic
shapes with a signature, resource variables, control flow), and the outcomes are compared:
the exception type when one is raised, otherwise the values returned (arrays within a
tolerance, everything else exactly). A difference must be listed in the "Differences from
LiteRT" table of docs/python.md (by case id); the probe exits non-zero on any other.

LiteRT runs without its default delegate (XNNPACK) unless a case says otherwise, so that
op lists and intermediate tensors are those of the model (ferrite has no delegates), and
integer models run on its reference kernels, which ferrite matches bit for bit.

  interpreter_probe.py --corpus DIR [--timings] [--verbose]
"""

import argparse
import concurrent.futures
import gc
import inspect
import multiprocessing
import os
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from ai_edge_litert import interpreter as litert

import ferrite
import ferrite.interpreter as fer

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "python.md"
BUILTIN = litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES

# role -> path suffix inside the corpus
MODELS = {
    "float": "tf-generated-2.19.1/tf_cnn_float.tflite",
    "mlp": "tf-generated-2.19.1/tf_mlp_float.tflite",
    "int8": "tf-generated-2.19.1/tf_cnn_int8io.tflite",
    "int16x8": "tf-generated-2.19.1/tf_mlp_int16x8.tflite",
    "dynamic": "openwakeword/resources/models/melspectrogram.tflite",
    "variables": "pymicro_wakeword/models/alexa.tflite",
    "while": "tf-generated-2.19.1/tf_while_float.tflite",
}


# Models with integer internals (file names).
QUANTIZED = {Path(MODELS[r]).name for r in ("int8", "int16x8", "variables")}


class Runtime:
    """One side of the comparison: its module and how it makes interpreters."""

    def __init__(self, name, module):
        self.name = name
        self.mod = module

    def make(self, path, **kw):
        if self.mod is litert and "experimental_op_resolver_type" not in kw:
            # Integer models against LiteRT's reference kernels, as the conformance suite
            # compares them: its optimized int8 kernels round differently in places (a
            # DEPTHWISE_CONV_2D of the streaming model is off by one in an intermediate).
            kw["experimental_op_resolver_type"] = litert.OpResolverType.BUILTIN_REF if path.name in QUANTIZED else BUILTIN
        elif self.mod is fer and isinstance(kw.get("experimental_op_resolver_type"), litert.OpResolverType):
            kw["experimental_op_resolver_type"] = fer.OpResolverType[kw["experimental_op_resolver_type"].name]
        return self.mod.Interpreter(model_path=str(path), **kw)


LITERT, FERRITE = Runtime("LiteRT", litert), Runtime("ferrite", fer)


# ---------------------------------------------------------------- comparison


class Values:
    """Marks a result compared by value with a tolerance (floats), as opposed to exactly."""

    def __init__(self, v):
        self.v = v


def norm(v):
    """A comparable form: arrays become (dtype, shape, writable, values)."""
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, tuple(v.shape), bool(v.flags.writeable), v)
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if isinstance(v, type):
        return v.__name__
    if isinstance(v, np.generic):
        return v.item()
    return v


def same(a, b, path="result"):
    """None when equal (arrays within tolerance), else what differs."""
    if isinstance(a, tuple) and a and a[0] == "array":
        if not (isinstance(b, tuple) and b and b[0] == "array"):
            return f"{path}: array vs {type(b).__name__}"
        for k, what in ((1, "dtype"), (2, "shape"), (3, "writable")):
            if a[k] != b[k]:
                return f"{path} {what}: {a[k]} vs {b[k]}"
        x, y = a[4], b[4]
        if x.dtype.kind == "f":
            x, y = x.astype(np.float64), y.astype(np.float64)
            # Equal values (infinities included) and NaN against NaN match exactly.
            exact = (x == y) | (np.isnan(x) & np.isnan(y))
            finite = np.abs(x[np.isfinite(x)])
            scale = max(1.0, float(np.max(finite, initial=0)))
            with np.errstate(invalid="ignore"):  # inf - inf where `exact` already decides
                err = float(np.max(np.where(exact, 0, np.abs(x - y)), initial=0)) / scale
            return None if err <= 1e-4 else f"{path} values differ by {err:.2e} (relative)"
        if x.dtype.kind == "O":
            return None if x.tolist() == y.tolist() else f"{path} values differ"
        return None if np.array_equal(x, y) else f"{path} values differ"
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            return f"{path} keys: {list(a) if isinstance(a, dict) else a} vs {list(b) if isinstance(b, dict) else b}"
        for k in a:
            d = same(a[k], b[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b) if isinstance(b, list) else b}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = same(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        return same(norm(np.array(a)), norm(np.array(b)), path)
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def outcome(fn, rt, model):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ("ok", norm(fn(rt, model)))
    except Exception as e:  # noqa: BLE001 - the exception type is the result
        return ("raises", type(e).__name__, str(e).splitlines()[0][:100] if str(e) else "")


# ---------------------------------------------------------------- helpers used by cases


def feed(it, seed=0):
    """Seeded inputs for every input of an allocated interpreter, set with set_tensor."""
    rng = np.random.default_rng(seed)
    xs = []
    for d in it.get_input_details():
        shape = [int(v) for v in d["shape"]]
        if np.dtype(d["dtype"]).kind in "iu":
            info = np.iinfo(d["dtype"])
            x = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(d["dtype"])
        else:
            x = rng.uniform(-1, 1, size=shape).astype(d["dtype"])
        it.set_tensor(d["index"], x)
        xs.append(x)
    return xs


def ready(rt, m, **kw):
    """An allocated interpreter; the dynamic model gets openWakeWord's input size first."""
    it = rt.make(m.path, **kw)
    if m.role == "dynamic":
        it.resize_tensor_input(0, [1, 1760], strict=True)
    it.allocate_tensors()
    return it


def outputs(it):
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def first_constant(it):
    for d in it.get_tensor_details():
        try:
            v = it.get_tensor(d["index"])
        except ValueError:
            continue
        if v.size and d["index"] not in [x["index"] for x in it.get_input_details()]:
            return d["index"]
    return None


def structure(a):
    """What an array is, not what it holds (memory LiteRT leaves uninitialized)."""
    return {"dtype": a.dtype.str, "shape": a.shape, "writable": bool(a.flags.writeable)}


def strip_temporaries(details, m):
    """LiteRT appends op temporaries (int16 kernels' scratch tensors) after allocation;
    the model's own tensors come first."""
    return details[: m.tensors]


# ---------------------------------------------------------------- the cases


CASES = []


def case(name, roles=None):
    """Registers a case run on each model whose role is in `roles` (all when None)."""

    def register(fn):
        CASES.append((name, roles, fn))
        return fn

    return register


def construction(name, **kw):
    case(name, roles=("mlp",))(lambda rt, m: type(rt.make(m.path, **kw)).__name__ and "constructed")


construction("init-threads-0", num_threads=0)
construction("init-threads-minus2", num_threads=-2)
construction("init-threads-minus1", num_threads=-1)
construction("init-threads-float", num_threads=2.0)
construction("init-threads-2", num_threads=2)
construction("init-bad-resolver", experimental_op_resolver_type="fast")
construction("init-preserve-all", experimental_preserve_all_tensors=True)


@case("init-missing-file", roles=("mlp",))
def _(rt, m):
    return rt.mod.Interpreter(model_path="/nonexistent/model.tflite") and "constructed"


@case("init-garbage-content", roles=("mlp",))
def _(rt, m):
    return rt.mod.Interpreter(model_content=b"not a model" * 8) and "constructed"


@case("init-neither", roles=("mlp",))
def _(rt, m):
    return rt.mod.Interpreter() and "constructed"


@case("init-both", roles=("mlp",))
def _(rt, m):
    return rt.mod.Interpreter(model_path=str(m.path), model_content=m.path.read_bytes()) and "constructed"


@case("init-content-bytes", roles=("mlp",))
def _(rt, m):
    it = rt.mod.Interpreter(model_content=m.path.read_bytes())
    it.allocate_tensors()
    feed(it)
    it.invoke()
    return outputs(it)


@case("init-content-bytearray", roles=("mlp",))
def _(rt, m):
    return rt.mod.Interpreter(model_content=bytearray(m.path.read_bytes())) and "constructed"


@case("init-pathlike", roles=("mlp",))
def _(rt, m):
    return rt.mod.Interpreter(model_path=m.path) and "constructed"


@case("load-delegate-missing", roles=("mlp",))
def _(rt, m):
    return rt.mod.load_delegate("/nonexistent/libdelegate.so") and "loaded"


@case("custom-op-registerers", roles=("mlp",))
def _(rt, m):
    return rt.mod.InterpreterWithCustomOps(custom_op_registerers=["NoSuchRegisterer"], model_path=str(m.path)) and "constructed"


@case("native-handle", roles=("mlp",))
def _(rt, m):
    return isinstance(rt.make(m.path)._native_handle(), int)


@case("compress-zero-points-property", roles=("mlp",))
def _(rt, m):
    return rt.make(m.path, experimental_compress_quantization_zero_points=True).experimental_compress_quantization_zero_points


@case("details-input-before-allocate")
def _(rt, m):
    return rt.make(m.path).get_input_details()


@case("details-output-after-allocate")
def _(rt, m):
    return ready(rt, m).get_output_details()


@case("details-output-after-invoke")
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    it.invoke()
    return it.get_output_details()


@case("details-are-fresh-copies")
def _(rt, m):
    it = rt.make(m.path)
    d = it.get_input_details()[0]
    d["shape"][0] = 99
    d["name"] = "edited"
    return it.get_input_details()[0]


@case("tensor-details-before-allocate")
def _(rt, m):
    return rt.make(m.path).get_tensor_details()


@case("tensor-details-after-allocate")
def _(rt, m):
    it = ready(rt, m)
    return strip_temporaries(it.get_tensor_details(), m)


@case("tensor-details-temporaries")
def _(rt, m):
    it = ready(rt, m)
    return len(it.get_tensor_details())


@case("tensor-details-other-subgraphs")
def _(rt, m):
    it = rt.make(m.path)
    return [it.get_tensor_details(sg) for sg in range(1, it.num_subgraphs())]


@case("tensor-details-bad-subgraph")
def _(rt, m):
    it = rt.make(m.path)
    return it.get_tensor_details(it.num_subgraphs())


@case("tensor-details-private")
def _(rt, m):
    it = rt.make(m.path)
    return it._get_tensor_details(0, 0)


@case("tensor-details-private-bad-index")
def _(rt, m):
    it = rt.make(m.path)
    return it._get_tensor_details(len(it.get_tensor_details()), 0)


@case("num-subgraphs")
def _(rt, m):
    return rt.make(m.path).num_subgraphs()


@case("op-details")
def _(rt, m):
    return ready(rt, m)._get_ops_details()


@case("op-details-bad-index")
def _(rt, m):
    it = rt.make(m.path)
    return it._get_op_details(len(it._get_ops_details()))


@case("op-details-negative")
def _(rt, m):
    return rt.make(m.path)._get_op_details(-1)


@case("signature-list")
def _(rt, m):
    return rt.make(m.path).get_signature_list()


@case("signature-list-full")
def _(rt, m):
    return rt.make(m.path)._get_full_signature_list()


@case("invoke-before-allocate")
def _(rt, m):
    return rt.make(m.path).invoke()


@case("get-input-before-allocate")
def _(rt, m):
    it = rt.make(m.path)
    return it.get_tensor(it.get_input_details()[0]["index"])


@case("set-input-before-allocate")
def _(rt, m):
    it = rt.make(m.path)
    d = it.get_input_details()[0]
    return it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))


@case("view-before-allocate")
def _(rt, m):
    it = rt.make(m.path)
    return structure(it.tensor(it.get_input_details()[0]["index"])())


@case("get-constant-before-allocate")
def _(rt, m):
    it = ready(rt, m)
    t = first_constant(it)
    return rt.make(m.path).get_tensor(t) if t is not None else "no constant"


@case("get-input-after-allocate")
def _(rt, m):
    it = ready(rt, m)
    return structure(it.get_tensor(it.get_input_details()[0]["index"]))


@case("get-output-after-allocate")
def _(rt, m):
    it = ready(rt, m)
    return [structure(a) for a in outputs(it)]


@case("invoke")
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    it.invoke()
    first = outputs(it)
    feed(it, seed=1)
    it.invoke()
    return first + outputs(it)


@case("invoke-again-without-set")
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    it.invoke()
    it.invoke()
    return outputs(it)


@case("get-tensor-is-writable-copy")
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    it.invoke()
    t = it.get_output_details()[0]["index"]
    a = it.get_tensor(t)
    before = a.copy()
    a[...] = 0
    return [structure(a), before, it.get_tensor(t)]


@case("get-input-after-set")
def _(rt, m):
    it = ready(rt, m)
    xs = feed(it)
    return [it.get_tensor(d["index"]) for d in it.get_input_details()] + xs


@case("set-wrong-dtype")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    wrong = np.float64 if np.dtype(d["dtype"]) != np.float64 else np.float32
    return it.set_tensor(d["index"], np.zeros(d["shape"], wrong))


@case("set-wrong-shape")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    shape = [int(v) for v in d["shape"]]
    shape[-1] += 1
    return it.set_tensor(d["index"], np.zeros(shape, d["dtype"]))


@case("set-wrong-rank")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    return it.set_tensor(d["index"], np.zeros([int(np.prod(d["shape"]))], d["dtype"]))


@case("set-python-list")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    return it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]).tolist())


@case("set-scalar")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    return it.set_tensor(d["index"], np.zeros((), d["dtype"]))


@case("set-noncontiguous")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    shape = [int(v) for v in d["shape"]]
    x = np.asfortranarray(np.random.default_rng(3).uniform(-1, 1, size=shape).astype(d["dtype"]))
    it.set_tensor(d["index"], x)
    return it.get_tensor(d["index"])


@case("set-bad-index")
def _(rt, m):
    it = ready(rt, m)
    return it.set_tensor(len(it.get_tensor_details()) + 5, np.zeros([1], np.float32))


@case("set-negative-index")
def _(rt, m):
    return ready(rt, m).set_tensor(-1, np.zeros([1], np.float32))


@case("set-index-as-string")
def _(rt, m):
    return ready(rt, m).set_tensor("0", np.zeros([1], np.float32))


@case("set-numpy-integer-index")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    it.set_tensor(np.int64(d["index"]), np.zeros(d["shape"], d["dtype"]))
    return it.get_tensor(np.int64(d["index"]))


@case("get-bad-index")
def _(rt, m):
    it = ready(rt, m)
    return it.get_tensor(len(it.get_tensor_details()) + 5)


@case("get-negative-index")
def _(rt, m):
    return ready(rt, m).get_tensor(-1)


@case("get-float-index")
def _(rt, m):
    return ready(rt, m).get_tensor(0.0)


@case("get-bad-subgraph")
def _(rt, m):
    it = ready(rt, m)
    return it.get_tensor(0, it.num_subgraphs())


@case("view-fill-input")
def _(rt, m):
    it = ready(rt, m)
    rng = np.random.default_rng(5)
    for d in it.get_input_details():
        view = it.tensor(d["index"])()
        if np.dtype(d["dtype"]).kind in "iu":
            view[...] = rng.integers(-100, 100, size=view.shape).astype(d["dtype"])
        else:
            view[...] = rng.uniform(-1, 1, size=view.shape)
        del view
    it.invoke()
    return outputs(it)


@case("view-fill-first-row")
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    d = it.get_input_details()[0]
    it.tensor(d["index"])()[0] = np.ones(d["shape"][1:], d["dtype"])
    it.invoke()
    return outputs(it)


@case("view-read-output")
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    it.invoke()
    t = it.get_output_details()[0]["index"]
    view = it.tensor(t)()
    got = [structure(view), view.copy()]
    view.flat[0] = 7
    del view
    return got + [it.get_tensor(t)]


@case("view-of-constant")
def _(rt, m):
    it = ready(rt, m)
    t = first_constant(it)
    return structure(it.tensor(t)()) if t is not None else "no constant"


@case("view-outlives-interpreter")
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    it.invoke()
    t = it.get_output_details()[0]["index"]
    want = it.get_tensor(t)
    view = it.tensor(t)()
    del it
    gc.collect()
    # The view keeps the runtime's memory alive (and in place) after the interpreter is gone.
    return [view.copy(), want]


@case("get-constant-other-subgraph", roles=("while",))
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    it.invoke()
    got = []
    for sg in range(1, it.num_subgraphs()):
        for d in it.get_tensor_details(sg):
            if d["name"].endswith("/y"):  # the loop bound, a constant of the condition
                got.append(it.get_tensor(d["index"], sg))
    return got


@case("view-bad-index")
def _(rt, m):
    it = ready(rt, m)
    return it.tensor(len(it.get_tensor_details()) + 5)()


def with_view_held(call):
    def run(rt, m):
        it = ready(rt, m)
        feed(it)
        held = it.tensor(it.get_input_details()[0]["index"])()
        try:
            return call(it)
        finally:
            del held

    return run


case("view-held-allocate")(with_view_held(lambda it: it.allocate_tensors()))
case("view-held-invoke")(with_view_held(lambda it: it.invoke()))
case("view-held-resize")(with_view_held(lambda it: it.resize_tensor_input(it.get_input_details()[0]["index"], it.get_input_details()[0]["shape"])))
case("view-held-set")(with_view_held(lambda it: feed(it) and "set"))
case("view-held-get")(with_view_held(lambda it: structure(it.get_tensor(it.get_input_details()[0]["index"]))))
case("view-held-reset-variables")(with_view_held(lambda it: it.reset_all_variables()))
case("view-held-safe-to-run")(with_view_held(lambda it: it._safe_to_run()))


@case("view-dropped-invoke")
def _(rt, m):
    it = ready(rt, m)
    feed(it)
    it.tensor(it.get_input_details()[0]["index"])()
    it.invoke()
    return it._safe_to_run()


@case("resize-same-shape-invoke")
def _(rt, m):
    it = ready(rt, m)
    xs = feed(it)
    for d in it.get_input_details():
        it.resize_tensor_input(d["index"], d["shape"])
    it.invoke()
    return outputs(it) + xs


def batch_shape(d):
    shape = [int(v) for v in d["shape"]]
    return [2 * shape[0]] + shape[1:] if shape else shape


@case("resize-new-shape-invoke-without-allocate")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    it.resize_tensor_input(d["index"], batch_shape(d))
    return it.invoke()


@case("resize-new-shape-get-without-allocate")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    it.resize_tensor_input(d["index"], batch_shape(d))
    return it.get_tensor(d["index"])


@case("resize-batch")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    it.resize_tensor_input(d["index"], batch_shape(d))
    it.allocate_tensors()
    feed(it)
    it.invoke()
    return [it.get_input_details(), it.get_output_details(), outputs(it)]


@case("resize-and-back")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    before = [int(v) for v in d["shape"]]
    for shape in (batch_shape(d), before):
        it.resize_tensor_input(d["index"], shape)
        it.allocate_tensors()
    feed(it)
    it.invoke()
    return [it.get_output_details(), outputs(it)]


@case("resize-strict-fixed-dim")
def _(rt, m):
    it = rt.make(m.path)
    d = it.get_input_details()[0]
    sig = [int(v) for v in d["shape_signature"]]
    fixed = [i for i, v in enumerate(sig) if v != -1]
    if not fixed:
        return "no fixed dimension"
    shape = [int(v) for v in d["shape"]]
    shape[fixed[0]] += 1
    return it.resize_tensor_input(d["index"], shape, strict=True)


@case("resize-strict-unknown-dim")
def _(rt, m):
    it = rt.make(m.path)
    d = it.get_input_details()[0]
    sig = [int(v) for v in d["shape_signature"]]
    if -1 not in sig:
        return "no unknown dimension"
    shape = [1600 if v == -1 and i else (1 if v == -1 else v) for i, v in enumerate(sig)]
    it.resize_tensor_input(d["index"], shape, strict=True)
    it.allocate_tensors()
    feed(it)
    it.invoke()
    return [it.get_output_details(), outputs(it)]


@case("resize-strict-rank")
def _(rt, m):
    it = rt.make(m.path)
    d = it.get_input_details()[0]
    return it.resize_tensor_input(d["index"], [int(v) for v in d["shape"]] + [1], strict=True)


@case("resize-rank-change")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    it.resize_tensor_input(d["index"], [int(np.prod(d["shape"]))])
    it.allocate_tensors()
    feed(it)
    it.invoke()
    return [it.get_output_details(), outputs(it)]


@case("resize-non-input")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_output_details()[0]
    return it.resize_tensor_input(d["index"], d["shape"])


@case("resize-bad-index")
def _(rt, m):
    it = ready(rt, m)
    return it.resize_tensor_input(len(it.get_tensor_details()) + 5, [1])


@case("resize-negative-dim")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    return it.resize_tensor_input(d["index"], [-1] + [int(v) for v in d["shape"][1:]])


@case("resize-float-dims")
def _(rt, m):
    it = ready(rt, m)
    d = it.get_input_details()[0]
    it.resize_tensor_input(d["index"], [float(v) for v in d["shape"]])
    it.invoke()
    return it.get_input_details()


@case("allocate-twice-keeps-inputs")
def _(rt, m):
    it = ready(rt, m)
    xs = feed(it)
    it.allocate_tensors()
    return [it.get_tensor(d["index"]) for d in it.get_input_details()] + xs


@case("preserve-all-tensors")
def _(rt, m):
    it = ready(rt, m, experimental_preserve_all_tensors=True)
    for seed in range(2):
        feed(it, seed)
        it.invoke()
    got = []
    for d in strip_temporaries(it.get_tensor_details(), m):
        if d["dtype"] is np.object_:
            continue  # resource handles hold no values (and reading some crashes LiteRT)
        try:
            got.append(it.get_tensor(d["index"]))
        except ValueError as e:
            got.append(f"ValueError {e}"[:20])
    return got


@case("intermediates-without-preserve")
def _(rt, m):
    # LiteRT's default op resolver (its delegate frees what it computes internally).
    kw = {"experimental_op_resolver_type": litert.OpResolverType.AUTO}
    it = ready(rt, m, **kw)
    feed(it)
    it.invoke()
    graph = [d["index"] for d in it.get_output_details()]
    first = it._get_op_details(0)["outputs"]
    inner = [t for t in first if t not in graph]
    # Only whether a value comes back: what it holds (and whether LiteRT hands out a
    # copy) is undefined without the option.
    return "value" if inner and it.get_tensor(inner[0]) is not None else "no intermediate"


@case("reset-all-variables")
def _(rt, m):
    it = ready(rt, m, experimental_preserve_all_tensors=True)
    got = []
    for step in range(6):
        if step == 3:
            it.reset_all_variables()
        feed(it, step)
        it.invoke()
        got.append(outputs(it))
        # The state itself: what the first variable read returns.
        reads = [op["outputs"][0] for op in it._get_ops_details() if op["op_name"] == "READ_VARIABLE"]
        if reads:
            got.append(it.get_tensor(reads[0]))
    return got


@case("reference-kernels")
def _(rt, m):
    it = ready(rt, m, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    feed(it)
    it.invoke()
    return outputs(it)


@case("app-script")
def _(rt, m):
    """An application written against LiteRT's API: holds tensor() functions, fills the
    input through one, edits outputs in place (its copy, and the runtime's through a view),
    reads intermediates, resets variables, and runs on."""
    it = ready(rt, m, experimental_preserve_all_tensors=True)
    d, o = it.get_input_details()[0], it.get_output_details()[0]
    fill, result = it.tensor(d["index"]), it.tensor(o["index"])
    inner = [int(t) for op in it._get_ops_details() for t in op["outputs"] if t not in (d["index"], o["index"])]
    inner = [t for t in inner if it._get_tensor_details(t, 0)["dtype"] is not np.object_][:8]
    rng = np.random.default_rng(11)
    got = []
    for step in range(4):
        if step == 2:
            it.reset_all_variables()
        kind = np.dtype(d["dtype"]).kind
        x = rng.integers(-100, 100, size=fill().shape) if kind in "iu" else rng.uniform(-1, 1, size=fill().shape)
        fill()[...] = x
        it.invoke()
        y = it.get_tensor(o["index"])
        y[...] = y + 1  # the application's own copy
        result().flat[0] = 0  # the runtime's output, edited where it lies
        got += [y, it.get_tensor(o["index"])] + [it.get_tensor(t) for t in inner]
    return got


def runner_feed(runner, seed=0, batch=None):
    rng = np.random.default_rng(seed)
    out = {}
    for name, d in runner.get_input_details().items():
        shape = [int(v) for v in d["shape"]]
        if batch:
            shape[0] = batch
        if np.dtype(d["dtype"]).kind in "iu":
            out[name] = rng.integers(-100, 100, size=shape).astype(d["dtype"])
        else:
            out[name] = rng.uniform(-1, 1, size=shape).astype(d["dtype"])
    return out


def runner_of(rt, m):
    it = ready(rt, m)
    return it, it.get_signature_runner()


@case("runner-details")
def _(rt, m):
    _, r = runner_of(rt, m)
    return [r.get_input_details(), r.get_output_details()]


@case("runner-call")
def _(rt, m):
    _, r = runner_of(rt, m)
    got = r(**runner_feed(r))
    return [got, {k: structure(v) for k, v in got.items()}]


@case("runner-outputs-writable")
def _(rt, m):
    _, r = runner_of(rt, m)
    got = r(**runner_feed(r))
    for v in got.values():
        v[...] = 0
    return got


@case("runner-shares-interpreter-state")
def _(rt, m):
    it, r = runner_of(rt, m)
    r(**runner_feed(r, batch=2))
    shapes = [list(d["shape"]) for d in it.get_input_details()]
    del r
    it.allocate_tensors()
    feed(it)
    it.invoke()
    return [shapes, outputs(it)]


@case("runner-held-invoke")
def _(rt, m):
    it, r = runner_of(rt, m)
    feed(it)
    return it.invoke()


@case("runner-bad-key")
def _(rt, m):
    return rt.make(m.path).get_signature_runner("no such signature")


@case("runner-empty-key")
def _(rt, m):
    return rt.make(m.path).get_signature_runner("")


@case("runner-direct-no-interpreter")
def _(rt, m):
    return rt.mod.SignatureRunner(interpreter=None, signature_key="serving_default")


@case("runner-wrong-count")
def _(rt, m):
    _, r = runner_of(rt, m)
    return r()


@case("runner-bad-name")
def _(rt, m):
    _, r = runner_of(rt, m)
    feed_ = runner_feed(r)
    return r(**{k + "_x": v for k, v in feed_.items()})


@case("runner-wrong-dtype")
def _(rt, m):
    _, r = runner_of(rt, m)
    return r(**{k: v.astype(np.float64 if v.dtype != np.float64 else np.float32) for k, v in runner_feed(r).items()})


@case("runner-python-list")
def _(rt, m):
    _, r = runner_of(rt, m)
    return r(**{k: v.tolist() for k, v in runner_feed(r).items()})


# ---------------------------------------------------------------- the surface


def surface():
    """Public methods (and the protected ones applications use) with their parameters."""
    diffs = []
    pairs = [(litert.Interpreter, fer.Interpreter), (litert.SignatureRunner, fer.SignatureRunner), (litert.InterpreterWithCustomOps, fer.InterpreterWithCustomOps)]
    for a, b in pairs:
        for name, member in inspect.getmembers(a):
            if name.startswith("__") and name not in ("__init__", "__call__"):
                continue
            where = f"surface:{a.__name__}.{name}"
            if not hasattr(b, name):
                diffs.append((where, "present", "missing"))
                continue
            if callable(member):
                pa = list(inspect.signature(member).parameters)
                pb = list(inspect.signature(getattr(b, name)).parameters)
                if pa != pb:
                    diffs.append((where, str(pa), str(pb)))
            elif isinstance(member, property) != isinstance(getattr(b, name), property):
                diffs.append((where, "property", "not a property"))
    for name in dir(litert):
        if not name.startswith("_") and isinstance(getattr(litert, name), type) or name == "load_delegate":
            if not hasattr(fer, name):
                diffs.append((f"surface:module.{name}", "present", "missing"))
    for member in litert.OpResolverType:
        if getattr(fer.OpResolverType, member.name, None) is None or fer.OpResolverType[member.name].value != member.value:
            diffs.append((f"surface:OpResolverType.{member.name}", str(member.value), "missing"))
    return diffs


# ---------------------------------------------------------------- timings


def timings(path):
    """Per-call cost of the calls applications make per frame, on a tiny model (µs)."""
    rows = []
    for rt in (LITERT, FERRITE):
        it = rt.make(path, experimental_op_resolver_type=litert.OpResolverType.AUTO, num_threads=1)
        it.allocate_tensors()
        d, o = it.get_input_details()[0], it.get_output_details()[0]
        x = np.zeros(d["shape"], d["dtype"])
        shape = [int(v) for v in d["shape"]]
        other = [2 * shape[0]] + shape[1:]
        calls = {
            "allocate_tensors (nothing changed)": lambda: it.allocate_tensors(),
            "resize to same shape + allocate": lambda: (it.resize_tensor_input(d["index"], shape), it.allocate_tensors()),
            "set_tensor": lambda: it.set_tensor(d["index"], x),
            "invoke": lambda: it.invoke(),
            "get_tensor": lambda: it.get_tensor(o["index"]),
            "get_input_details": lambda: it.get_input_details(),
            "resize alternating 2 shapes + allocate": lambda: (
                it.resize_tensor_input(d["index"], other),
                it.allocate_tensors(),
                it.resize_tensor_input(d["index"], shape),
                it.allocate_tensors(),
            ),
        }
        for name, fn in calls.items():
            fn()
            n = 2000
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                best = min(best, (time.perf_counter() - t0) / n)
            if name.startswith("resize alternating"):
                best /= 2
            rows.append((name, rt.name, best * 1e6))
    names = list(dict.fromkeys(r[0] for r in rows))
    print(f"\nper-call cost on {path.name} (best of 5 x 2000 calls, microseconds)")
    print(f"  {'call':42} {'LiteRT':>9} {'ferrite':>9}")
    for name in names:
        a = next(r[2] for r in rows if r[0] == name and r[1] == "LiteRT")
        b = next(r[2] for r in rows if r[0] == name and r[1] == "ferrite")
        print(f"  {name:42} {a:9.2f} {b:9.2f}")


# ---------------------------------------------------------------- main


def documented():
    """Case ids in the 'Differences from LiteRT' table of docs/python.md."""
    text = DOC.read_text()
    section = text.split("## Differences from LiteRT", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\|\s*`([^`]+)`", section, flags=re.M))


class Model:
    def __init__(self, role, path):
        self.role, self.path = role, path
        # The model's own tensors (LiteRT may add temporaries when allocating).
        self.tensors = len(litert.Interpreter(model_path=str(path)).get_tensor_details())


def worker(conn, rt_name, models, tasks):
    """Runs `tasks` (case, model) in a child process: LiteRT crashes on some bad input."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # LiteRT's log lines; results go through the pipe
    sys.unraisablehook = lambda *_: None  # LiteRT's Delegate.__del__ after a failed load
    rt = LITERT if rt_name == LITERT.name else FERRITE
    for ci, mi in tasks:
        conn.send((ci, mi, outcome(CASES[ci][2], rt, models[mi])))
    conn.send(None)


def run_cases(rt, models, tasks):
    """{(case, model): outcome}, a crash of the runtime being the outcome of its case."""
    ctx = multiprocessing.get_context("fork")
    results, pending = {}, list(tasks)
    while pending:
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=worker, args=(send, rt.name, models, pending))
        p.start()
        send.close()
        while True:
            try:
                msg = recv.recv()
            except EOFError:
                p.join()
                results[pending.pop(0)] = ("raises", "crash", f"the process died (exit status {p.exitcode})")
                break
            if msg is None:
                pending = []
                break
            ci, mi, out = msg
            results[(ci, mi)] = out
            pending.remove((ci, mi))
        p.join()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--timings", action="store_true", help="also print per-call costs")
    ap.add_argument("--verbose", action="store_true", help="print every case")
    args = ap.parse_args()
    corpus = Path(args.corpus)
    models = []
    for role, suffix in MODELS.items():
        found = sorted(p for p in corpus.rglob("*.tflite") if p.as_posix().endswith(suffix))
        if not found:
            sys.exit(f"interpreter_probe: no model {suffix} under {corpus}")
        models.append(Model(role, found[0]))
    known = documented()
    diffs = surface()
    tasks = [(ci, mi) for ci, (_, roles, _) in enumerate(CASES) for mi, m in enumerate(models) if roles is None or m.role in roles]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        want, got = pool.map(lambda rt: run_cases(rt, models, tasks), (LITERT, FERRITE))
    runs = len(tasks)
    for ci, mi in tasks:
        name, m = CASES[ci][0], models[mi]
        a, b = want[(ci, mi)], got[(ci, mi)]
        if a[0] == "raises" or b[0] == "raises":
            d = None if a[:2] == b[:2] else f"{a[0]} {a[1] if a[0] == 'raises' else ''} vs {b[0]} {b[1] if b[0] == 'raises' else ''}"
        else:
            d = same(a[1], b[1])
        if args.verbose or d:
            print(f"{'same' if not d else 'DIFF'} {name} [{m.role}]: {d or (a[1] if a[0] == 'raises' else 'ok')}")
            if d and args.verbose:
                print(f"     LiteRT : {a if a[0] == 'raises' else 'ok'}\n     ferrite: {b if b[0] == 'raises' else 'ok'}")
        if d:
            diffs.append((f"{name}", f"[{m.role}] " + (f"{a[1]}: {a[2]}" if a[0] == "raises" else "ok"), (f"{b[1]}: {b[2]}" if b[0] == "raises" else "ok") + f" ({d})"))
    print(f"\n{runs} case runs over {len(models)} models ({', '.join(m.path.name for m in models)}), {len(diffs)} differences")
    undocumented = []
    if diffs:
        print(f"\n{'case':40} {'LiteRT':50} ferrite")
        for case_id, x, y in diffs:
            ok = case_id in known
            undocumented += [] if ok else [case_id]
            print(f"{case_id:40} {x[:50]:50} {y[:110]}{'' if ok else '   <-- NOT DOCUMENTED'}")
    seen = {d[0] for d in diffs}
    for case_id in sorted(known - seen):
        print(f"note: documented difference `{case_id}` was not observed")
    if args.timings:
        timings(next(m.path for m in models if m.role == "mlp"))
    if undocumented:
        print(f"\ninterpreter probe: {len(set(undocumented))} undocumented difference(s): {sorted(set(undocumented))} (document them in {DOC.relative_to(ROOT)})")
        sys.exit(1)
    print("interpreter probe: every difference is documented")


if __name__ == "__main__":
    main()
