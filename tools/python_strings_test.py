#!/usr/bin/env python3
"""String tensors through LiteRT's Interpreter and ferrite's, with the same inputs.

Generates the single-op models (``ferrite-opgen ops``) into a temporary folder, takes
the SKIP_GRAM and HASHTABLE_FIND_* cases, and runs each through both interpreters:
string inputs set as 'S', 'U' and object arrays in turn (empty strings and multi-byte
UTF-8 included), several invocations per interpreter (a hash table keeps what earlier
runs imported), and every output compared exactly: values, dtype and shape. Then the
error cases of ``set_tensor`` on a string input (wrong type, wrong shape, an item that
is neither bytes nor str) must raise ValueError with LiteRT's message.

  python_strings_test.py --opgen target/release/ferrite-opgen
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter as LiteRT

import ferrite.interpreter

# Words with spaces between them (SKIP_GRAM splits on spaces), the empty string, and
# multi-byte UTF-8 (2, 3 and 4 bytes per character).
WORDS = ["", "a", "b", "ab", "héllo", "wörld", "日本", "語", "🙂", "x y", "a b c d", " lead", "trail "]
RUNS = 4


def strings(rng, shape, form, pool):
    """Random strings of `shape` as the numpy form `form`: 'S' (UTF-8 bytes), 'U' or
    object; every other one drawn from `pool` when it is not empty (queries that hit)."""
    items = [" ".join(rng.choice(WORDS, size=rng.integers(0, 4))) for _ in range(int(np.prod(shape)))]
    if pool:
        items[::2] = [pool[i] for i in rng.integers(0, len(pool), size=len(items[::2]))]
    if form == "U":
        return np.array(items, dtype=str).reshape(shape)
    if form == "S":
        return np.array([s.encode() for s in items], dtype=object).astype(np.bytes_).reshape(shape)
    # Object arrays hold bytes and str mixed, as an application may pass them.
    arr = np.empty(len(items), dtype=object)
    for i, s in enumerate(items):
        arr[i] = s.encode() if i % 2 else s
    return arr.reshape(shape)


def inputs_for(details, seed):
    """The same inputs for both runtimes: per run, one array per input."""
    rng = np.random.default_rng(seed)
    runs = []
    # The first run's first strings (a hash table's keys): later string inputs (the
    # queries) draw half their items from them.
    pool = []
    for r in range(RUNS):
        xs = []
        for d in details:
            shape = [int(v) for v in d["shape"]]
            if d["dtype"] is np.bytes_:
                x = strings(rng, shape, "SUO"[r % 3], pool if any(v.dtype.kind in "SUO" for v in xs) else [])
                if not pool:
                    pool = [v.decode() if isinstance(v, bytes) else v for v in x.ravel().tolist()]
                xs.append(x)
            else:
                # Small keys, so queries hit the table as often as they miss.
                xs.append(rng.integers(-2, 6, size=shape).astype(d["dtype"]))
        runs.append(xs)
    return runs


def exercise(make, path, runs):
    """Details and per-run outputs, as plain data."""
    it = make(str(path))
    it.allocate_tensors()
    ins, outs = it.get_input_details(), it.get_output_details()
    result = {"in": [(d["name"], d["dtype"], d["shape"].tolist()) for d in ins], "runs": []}
    for xs in runs:
        for d, x in zip(ins, xs):
            it.set_tensor(d["index"], x)
        it.invoke()
        result["runs"].append([it.get_tensor(d["index"]) for d in outs])
    result["out"] = [(d["name"], d["dtype"], d["shape"].tolist()) for d in it.get_output_details()]
    return result


def same(a, b):
    """Exactly equal arrays: type, dtype, shape and every value."""
    if type(a) is not type(b):
        return False
    if not isinstance(a, np.ndarray):
        return a == b
    return a.dtype == b.dtype and a.shape == b.shape and all(x == y and type(x) is type(y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))


def errors(make, path):
    """set_tensor's refusals on the first string input, as (exception type, message)."""
    it = make(str(path))
    it.allocate_tensors()
    d = next(d for d in it.get_input_details() if d["dtype"] is np.bytes_)
    shape = [int(v) for v in d["shape"]]
    bad = [
        np.zeros(shape, np.int32),
        np.array([b"x"] * (int(np.prod(shape)) + 1)),
        np.array(b"x"),
        np.full(shape, 7, dtype=object),
    ]
    out = []
    for x in bad:
        try:
            it.set_tensor(d["index"], x)
            out.append(None)
        except Exception as e:  # noqa: BLE001 - the exception type is what is compared
            out.append((type(e).__name__, str(e)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opgen", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.opgen, "ops", tmp], check=True, stdout=subprocess.DEVNULL)
        models = sorted(p for p in Path(tmp).glob("*.tflite") if p.name.startswith(("skip_gram_", "hashtable_find_")))
        if len(models) < 8:
            sys.exit(f"expected the SKIP_GRAM and HASHTABLE_FIND_* cases, found {[p.name for p in models]}")
        failed = 0
        outputs = 0
        skip_grams_with_strings = 0
        for seed, path in enumerate(models):
            ins = LiteRT(model_path=str(path)).get_input_details()
            runs = inputs_for(ins, seed)
            want = exercise(LiteRT, path, runs)
            got = exercise(ferrite.interpreter.Interpreter, path, runs)
            problems = []
            if got["in"] != want["in"] or got["out"] != want["out"]:
                problems.append(f"details {got['in']} {got['out']} != {want['in']} {want['out']}")
            for r, (g, w) in enumerate(zip(got["runs"], want["runs"])):
                for k, (a, b) in enumerate(zip(g, w)):
                    outputs += 1
                    if not same(a, b):
                        problems.append(f"run {r} output {k}: {a!r} != {b!r}")
            # A SKIP_GRAM case whose options make no n-gram (more words asked for than
            # there are) is still compared (both give none); the suite fails below
            # only if no SKIP_GRAM case returned any string, testing nothing.
            if path.name.startswith("skip_gram") and any(w.dtype == object and w.size for run in want["runs"] for w in run):
                skip_grams_with_strings += 1
            e_got, e_want = errors(ferrite.interpreter.Interpreter, path), errors(LiteRT, path)
            if e_got != e_want:
                problems.append(f"set_tensor errors {e_got} != {e_want}")
            if None in e_want:
                problems.append(f"a bad input was accepted by LiteRT: {e_want}")
            failed += bool(problems)
            print(f"{path.name}: {'ok' if not problems else 'FAIL'}")
            for p in problems:
                print("  " + p)
    if skip_grams_with_strings == 0:
        print("FAIL: LiteRT returned no strings for any SKIP_GRAM case: they test nothing")
        failed += 1
    print(f"{len(models)} string models ({skip_grams_with_strings} SKIP_GRAM cases with n-grams), {outputs} outputs compared over {RUNS} runs each, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
