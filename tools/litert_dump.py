#!/usr/bin/env python3
"""LiteRT side of `ferrite compare`: runs a model once in LiteRT with every tensor
preserved and writes each op's outputs as .npy files, plus index.json.

    litert_dump.py MODEL --out DIR [-i in0.npy -i in1.npy ...] [--resolver builtin|ref]

The interpreter runs without its default delegate (XNNPACK would replace groups of
ops with one node whose intermediates never exist), so node k is op k of subgraph 0
and each op's outputs are the model's own tensors, named t<index>.npy.
The `ferrite` binary carries a copy of this file and runs it with the venv's python.
"""

import argparse
import json
import pathlib
import sys

import numpy as np


def interpreter_class():
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        try:
            from tensorflow.lite.python.interpreter import Interpreter, OpResolverType
        except ImportError:
            sys.exit("LiteRT is not installed for this python: pip install ai-edge-litert (or give --python / FERRITE_PYTHON)")
    return Interpreter, OpResolverType


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--out", required=True)
    p.add_argument("-i", "--input", action="append", default=[])
    p.add_argument("--resolver", choices=["builtin", "ref"], default="builtin")
    a = p.parse_args()
    Interpreter, R = interpreter_class()
    resolver = R.BUILTIN_REF if a.resolver == "ref" else R.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = Interpreter(model_path=a.model, experimental_op_resolver_type=resolver, experimental_preserve_all_tensors=True)
    details = it.get_input_details()
    if len(a.input) != len(details):
        sys.exit(f"the model has {len(details)} inputs, {len(a.input)} .npy files were given")
    arrays = [np.load(f) for f in a.input]
    for d, x in zip(details, arrays):
        if tuple(d["shape"]) != x.shape:
            it.resize_tensor_input(d["index"], list(x.shape))
    it.allocate_tensors()
    for d, x in zip(details, arrays):
        it.set_tensor(d["index"], x.astype(d["dtype"], copy=False))
    it.invoke()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # Resource and string tensors are left out: reading a resource handle crashes LiteRT.
    numeric = {d["index"] for d in it.get_tensor_details() if np.dtype(d["dtype"]).kind in "biuf"}
    ops, tensors = [], {}
    for op in it._get_ops_details():
        written = []
        for t in op["outputs"]:
            t = int(t)
            if t < 0 or t in tensors or t not in numeric:
                continue
            try:
                v = it.get_tensor(t)
            except ValueError:
                # No data: a tensor LiteRT never allocated.
                continue
            name = f"t{t}.npy"
            np.save(out / name, np.ascontiguousarray(v))
            tensors[t] = name
            written.append(t)
        ops.append({"index": int(op["index"]), "op": op["op_name"], "outputs": written})
    index = {"model": a.model, "resolver": a.resolver, "ops": ops, "tensors": {str(k): v for k, v in tensors.items()}}
    (out / "index.json").write_text(json.dumps(index))


if __name__ == "__main__":
    main()
