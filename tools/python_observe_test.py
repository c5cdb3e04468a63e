#!/usr/bin/env python3
"""Checks the Python package's windows into a run: ``invoke_with_callbacks`` and traces.

On the demo model and every corpus model ferrite prepares: callbacks see every op of
the interpreter's subgraph once (before, then after), outputs as "pending" before their
op; each tensor a callback gets as "ready" holds the value an interpreter with
``experimental_preserve_all_tensors=True`` (every tensor kept, nothing fused) reads with
``get_tensor``, and the last op's outputs are the model's. Then the flow answers (skip,
stop, exceptions, re-entry refused) and a trace written by ``write_trace``.

  python_observe_test.py [--corpus DIR]
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from ferrite.interpreter import Interpreter

DEMO = Path(__file__).resolve().parent.parent / "models" / "demo.tflite"


def feed(it):
    it.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in it.get_input_details():
        if d["dtype"] == np.float32:
            x = rng.uniform(-1, 1, d["shape"]).astype(np.float32)
        else:
            x = np.zeros(d["shape"], d["dtype"])
        it.set_tensor(d["index"], x)


def same(a, b):
    if a.dtype == np.float32:
        return a.shape == b.shape and bool(np.all((a == b) | (np.abs(a - b) <= 1e-4 * (1 + np.abs(b))) | (np.isnan(a) & np.isnan(b))))
    return np.array_equal(a, b)


def check_views(path):
    """Every op once; ready views equal the unfused values. Returns (ops, ready views)."""
    it, truth = Interpreter(model_path=str(path)), Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
    feed(it)
    feed(truth)
    truth.invoke()
    seen, ready, order = {}, 0, []

    # The unfused run keeps the interpreter's subgraph's tensors; ops inside control-flow
    # bodies (reported too, op.calls naming their IF/WHILE) are checked by the Rust tests.
    def before(op):
        if op.calls:
            assert op.calls[0][0] == it._g.sg and op.subgraph != it._g.sg, op
            return
        order.append(op.index)
        assert all(t.state == "pending" and t.data is None for t in op.outputs), op

    def after(op):
        nonlocal ready
        if op.calls:
            return
        seen[op.index] = seen.get(op.index, 0) + 1
        for t in op.inputs + op.outputs:
            if t.state != "ready":
                assert t.data is None, t
                continue
            assert not t.data.flags.writeable
            want = truth.get_tensor(t.index)
            assert same(t.data, np.asarray(want).reshape(t.data.shape)), f"{path.name}: op {op.index} ({op.op_name}) tensor {t.index} {t.name!r}"
            ready += 1

    assert it.invoke_with_callbacks(before, after) is True
    n_ops = len(it._get_ops_details())
    assert sorted(order) == list(range(n_ops)) and all(v == 1 for v in seen.values()), (path.name, order)
    for d in it.get_output_details():
        want = it.get_tensor(d["index"])
        assert same(np.asarray(want), np.asarray(truth.get_tensor(d["index"]))), path.name
    return n_ops, ready


def check_flow_and_trace():
    it = Interpreter(model_path=str(DEMO), num_threads=2)
    it.start_trace()
    feed(it)
    it.invoke()
    full = it.get_tensor(it.get_output_details()[0]["index"])
    # MNN's answers: False from `before` skips the op, False from `after` stops.
    ran = []
    assert it.invoke_with_callbacks(before=lambda op: op.index != 4, after=lambda op: ran.append(op.index)) is True
    assert ran == [0, 1, 2, 3], ran
    assert it.invoke_with_callbacks(after=lambda op: "stop" if op.index == 1 else None) is False
    assert it.invoke_with_callbacks(before=lambda op: "skip" if op.index == 0 else "continue") is True

    class Boom(Exception):
        pass

    def boom(op):
        raise Boom(op.index)

    try:
        it.invoke_with_callbacks(boom)
        raise AssertionError("the callback's exception was lost")
    except Boom:
        pass
    try:
        it.invoke_with_callbacks(lambda op: it.get_tensor(0))
        raise AssertionError("a callback called the interpreter")
    except RuntimeError as e:
        assert "op callbacks" in str(e), e
    try:
        it.invoke_with_callbacks(lambda op: 3)
        raise AssertionError("a bad answer was accepted")
    except ValueError:
        pass
    view = it.tensor(it.get_input_details()[0]["index"])()
    try:
        it.invoke_with_callbacks()
        raise AssertionError("ran while a view was alive")
    except RuntimeError:
        pass
    del view
    it.invoke()
    assert np.array_equal(it.get_tensor(it.get_output_details()[0]["index"]), full)
    it.stop_trace()
    it.invoke()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.json"
        it.write_trace(p)
        t = json.loads(p.read_text())
    events = t["traceEvents"]
    names = {e["name"] for e in events if e.get("cat") == "prepare"}
    assert {"parse", "prepare", "plan memory", "build kernel"} <= names, names
    runs = [e for e in events if e.get("cat") == "run"]
    # invoke, skip, stop, skip, exception, re-entry, bad answer, invoke (the run with a
    # live view was refused before it started; the last invoke came after stop_trace).
    assert [r["args"]["completed"] for r in runs] == [True, True, False, True, False, False, False, True], runs
    first = sorted((e for e in events if e.get("cat") == "op" and e["args"]["run"] == 0), key=lambda e: e["ts"])
    assert [e["args"]["op_index"] for e in first] == [0, 1, 2, 3, 4]
    assert first[0]["args"]["flops"] > 0 and first[0]["args"]["backend"] == "cpu"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path)
    args = ap.parse_args()
    check_flow_and_trace()
    models = [DEMO] + (sorted(args.corpus.rglob("*.tflite")) if args.corpus else [])
    checked = 0
    for m in models:
        try:
            Interpreter(model_path=str(m)).allocate_tensors()
        except (ValueError, RuntimeError) as e:
            print(f"{m.name:<45} not prepared: {str(e)[:60]}")
            continue
        n, ready = check_views(m)
        print(f"{m.name:<45} {n} ops, {ready} ready views match the unfused run")
        checked += 1
    print(f"python observe: flow and trace ok, {checked} models checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
