#!/usr/bin/env python3
"""List the builtin operators LiteRT's default op resolver registers, by probing it.

For every value of the schema's BuiltinOperator enum this builds a model holding one
op of that code (versions 1 to 12 in turn, one float32 input and output) and constructs a LiteRT
Interpreter on it. The interpreter resolves every operator code while it is built,
before any op is prepared, and fails with "Didn't find op for builtin opcode" when
the resolver has no registration: that message (and nothing else) marks an op as
not registered. An op that is registered but refuses the probe's tensors later
(at allocate_tensors) still counts as registered.

  litert_builtins.py [--out FILE]     one name a line: registered builtins, sorted

Run with the oracle venv (ai-edge-litert). The result is checked in as
crates/ferrite-format/coverage/litert_builtins.txt, which ferrite-format's coverage report
(`ferrite ops`, docs/ops.md) and its test read.
"""
import argparse
import pathlib
import sys

import flatbuffers
from ai_edge_litert import interpreter as litert
from ai_edge_litert import schema_py_generated as schema

# Codes past 127 are stored in `builtin_code`, with the old byte-sized field set to
# this placeholder (the schema's rule for extended codes).
PLACEHOLDER = 127
# Op versions probed: no builtin of LiteRT 2.3.0 starts past this one.
MAX_VERSION = 12


def single_op_model(code, version=1):
    """A model with one op of builtin `code`: float32 [1] in, float32 [1] out."""
    m = schema.ModelT()
    m.version = 3
    oc = schema.OperatorCodeT()
    oc.builtinCode = code
    oc.deprecatedBuiltinCode = min(code, PLACEHOLDER)
    oc.version = version
    m.operatorCodes = [oc]
    empty = schema.BufferT()
    m.buffers = [empty]
    tensors = []
    for name in ("x", "y"):
        t = schema.TensorT()
        t.shape = [1]
        t.type = schema.TensorType.FLOAT32
        t.buffer = 0
        t.name = name
        tensors.append(t)
    op = schema.OperatorT()
    op.opcodeIndex = 0
    op.inputs = [0]
    op.outputs = [1]
    g = schema.SubGraphT()
    g.tensors = tensors
    g.inputs = [0]
    g.outputs = [1]
    g.operators = [op]
    m.subgraphs = [g]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def registered(code):
    """True when some version of the op resolves (BROADCAST_TO starts at version 2)."""
    for version in range(1, MAX_VERSION + 1):
        try:
            litert.Interpreter(model_content=single_op_model(code, version))
        except (ValueError, RuntimeError) as e:
            if "Didn't find op for builtin opcode" in str(e):
                continue
        return True
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path)
    args = ap.parse_args()
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}
    found = sorted(names[c] for c in names if names[c] != "CUSTOM" and registered(c))
    text = "".join(f"{n}\n" for n in found)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    print(f"litert_builtins: {len(found)} of {len(names)} builtin codes registered", file=sys.stderr)


if __name__ == "__main__":
    main()
