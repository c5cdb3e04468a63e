#!/usr/bin/env python3
"""Interpreters sharing one model's weights (ferrite's Python package).

For the demo model and, with --corpus, a float, an fp16 and an int8 corpus model:
- an Interpreter built with ``share_weights_with=other`` and ones loaded with
  ``share_weights=True`` from the same path give the bits of a separately loaded one;
- four of them run at the same time on four Python threads, bit-identical;
- they are deleted in any order (the first, which loaded the model, first), and the
  shared weights go with the last one;
- two of them also share an arena (``share_arena=True``), on the threads too; after a
  run, an intermediate tensor of those is a ValueError and every other tensor reads as
  a separate interpreter's.

  python_shared_test.py [--corpus DIR]
"""
import argparse
import gc
import pathlib
import sys
import threading

import numpy as np
from ferrite.interpreter import Interpreter

CORPUS_MODELS = [
    "mediapipe-0.10.14/mediapipe/modules/face_detection/face_detection_short_range.tflite",
    "mediapipe-0.10.14/mediapipe/modules/pose_landmark/pose_landmark_full.tflite",
    "pymicro-wakeword-2.5.0/pymicro_wakeword/models/alexa.tflite",
]


def feed(it, seed):
    rng = np.random.default_rng(seed)
    for d in it.get_input_details():
        if np.issubdtype(d["dtype"], np.floating):
            x = rng.uniform(-1, 1, d["shape"]).astype(d["dtype"])
        else:
            info = np.iinfo(d["dtype"])
            x = rng.integers(info.min, info.max, d["shape"], endpoint=True).astype(d["dtype"])
        it.set_tensor(d["index"], x)


def outputs(it, seed):
    feed(it, seed)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def same(a, b):
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


def check(path):
    separate = Interpreter(model_path=str(path))
    separate.allocate_tensors()
    want = [outputs(separate, seed) for seed in range(3)]

    first = Interpreter(model_path=str(path), share_weights=True)
    assert first.shared_weight_count() == 0, "nothing is prepared before allocate_tensors"
    first.allocate_tensors()
    n = first.shared_weight_count()
    by_model = Interpreter(share_weights_with=first, num_threads=2, share_arena=True)
    by_path = Interpreter(model_path=str(path), share_weights=True)
    fourth = Interpreter(share_weights_with=by_path, share_arena=True)
    team = [first, by_model, by_path, fourth]
    for k in range(1, 4):
        team[k].allocate_tensors()
        assert team[k].shared_weight_count() == n, (path, k, team[k].shared_weight_count(), n)
    assert separate.shared_weight_count() == n, "a separate load has its own cache of the same size"
    for seed, w in enumerate(want):
        for k in range(4):
            assert same(outputs(team[k], seed), w), (path, k, seed)

    failures = []

    def work(it, k):
        try:
            for r in range(4):
                for seed, w in enumerate(want):
                    if not same(outputs(it, seed), w):
                        failures.append((k, r, seed))
        except Exception as e:  # reported below, with the thread's number
            failures.append((k, repr(e)))

    threads = [threading.Thread(target=work, args=(team[k], k)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, (path, failures)

    # What an interpreter sharing an arena gives up: intermediates after a run.
    outputs(separate, 2)
    assert same(outputs(fourth, 2), want[2])
    lent = 0
    for d in fourth.get_tensor_details():
        try:
            v = fourth.get_tensor(d["index"])
        except ValueError as e:
            if "shared arena" in str(e):
                lent += 1
                continue
            # A tensor without data (unused, folded away) has none in either.
            try:
                separate.get_tensor(d["index"])
            except ValueError:
                continue
            raise
        assert v.tobytes() == separate.get_tensor(d["index"]).tobytes(), (path, d["index"])
    assert lent > 0, (path, "no intermediate refused")

    # The first (which loaded the model) goes first; the others run on.
    del first, team
    gc.collect()
    assert same(outputs(fourth, 1), want[1])
    del by_path
    gc.collect()
    assert same(outputs(by_model, 2), want[2])
    assert by_model.shared_weight_count() == n
    del by_model
    gc.collect()
    assert fourth.shared_weight_count() == n, "the last interpreter keeps them"
    del fourth, threads
    gc.collect()
    # A fresh load by path after the last sharer went loads the file again.
    again = Interpreter(model_path=str(path), share_weights=True)
    assert again.shared_weight_count() == 0, "the shared weights went with the last interpreter"
    again.allocate_tensors()
    assert same(outputs(again, 0), want[0])
    print(
        f"{path.name}: 4 interpreters sharing {n} prepared constants (2 an arena too), bit-identical alone and on 4 threads; "
        f"{lent} intermediates refused after a run; any drop order"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus")
    args = ap.parse_args()
    models = [pathlib.Path(__file__).resolve().parent.parent / "models" / "demo.tflite"]
    if args.corpus:
        models += [pathlib.Path(args.corpus) / m for m in CORPUS_MODELS]
    for m in models:
        check(m)
    try:
        Interpreter(model_path=str(models[0]), share_weights_with=Interpreter(model_path=str(models[0])))
    except ValueError as e:
        print(f"refused as expected: {e}")
    else:
        sys.exit("share_weights_with together with model_path was accepted")


if __name__ == "__main__":
    main()
