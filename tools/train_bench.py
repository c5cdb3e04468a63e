#!/usr/bin/env python3
"""ms per training step: `ferrite train --json` against TensorFlow's
`model.train_on_batch`, same model, batch, optimizer and thread count, side by side.

  tfvenv/bin/python tools/train_bench.py --ferrite target/release/ferrite [--threads 1] [--models mlp,cnn] [--runs 5]

Each model runs `--runs` rounds, each round one ferrite run and one TensorFlow
timing back to back (interleaved, so that both see the same load on a shared
machine); the table gives the medians over the rounds and the per-round ratios.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

BATCH = 32


def build(name, keras):
    L = keras.layers
    if name == "mlp":
        return keras.Sequential([L.Input((784,)), L.Dense(128, activation="relu"), L.Dense(64, activation="relu"), L.Dense(10, activation="softmax")])
    if name == "cnn":
        # Random biases, one seed each: zero biases of one size would be merged into
        # one constant by the converter, which training refuses.
        b = lambda s: keras.initializers.RandomUniform(-0.1, 0.1, seed=s)
        return keras.Sequential([
            L.Input((28, 28, 1)), L.Conv2D(16, 3, activation="relu", bias_initializer=b(1)),
            L.DepthwiseConv2D(3, activation="relu", bias_initializer=b(2)), L.MaxPooling2D(2),
            L.Conv2D(32, 3, activation="relu", bias_initializer=b(3)), L.MaxPooling2D(2), L.Flatten(),
            L.Dense(10, activation="softmax", bias_initializer=b(4)),
        ])
    raise ValueError(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrite", default="target/release/ferrite")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="mlp")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--runs", type=int, default=1, help="interleaved rounds per model; medians reported")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import keras
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ferrite-train-bench-") as work:
        for name in args.models.split(","):
            model = build(name, keras)
            path = os.path.join(work, name + ".tflite")
            # Converted at batch 1 (the same layers): Flatten's RESHAPE then has a
            # constant shape, as training needs.
            inp = keras.Input(tuple(model.input_shape[1:]), batch_size=1)
            out = inp
            for layer in model.layers:
                out = layer(out)
            with open(path, "wb") as f:
                f.write(tf.lite.TFLiteConverter.from_keras_model(keras.Model(inp, out)).convert())
            rng = np.random.default_rng(0)
            n = BATCH * args.steps
            x = rng.uniform(-1, 1, (n,) + tuple(model.input_shape[1:])).astype(np.float32)
            y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, n)]
            xp, yp = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
            np.save(xp, x)
            np.save(yp, y)
            model.compile(optimizer=keras.optimizers.Adam(0.001), loss="categorical_crossentropy")
            for i in range(20):
                model.train_on_batch(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH])
            fers, tfs = [], []
            for _ in range(max(1, args.runs)):
                r = subprocess.run([args.ferrite, "train", path, "--epoch", "2", "--batch_size", str(BATCH), "--loss", "cce", "--optimizer", "adam",
                                    "--learning_rate", "0.001", "--load_input", xp, "--load_expected", yp, "--threads", str(args.threads), "--json"],
                                   capture_output=True, text=True, check=True)
                lines = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
                # The second epoch: warm caches, as the TensorFlow timing below.
                fers.append(lines[-2]["ms_per_step"])
                t0 = time.perf_counter()
                for i in range(args.steps):
                    model.train_on_batch(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH])
                tfs.append((time.perf_counter() - t0) * 1e3 / args.steps)
            fer, tfms = float(np.median(fers)), float(np.median(tfs))
            per_run = ", ".join(f"{a / b:.2f}" for a, b in zip(fers, tfs))
            rows.append((name, fer, tfms, lines[-1]["arena_bytes"], lines[-1]["arena_lower_bound_bytes"], lines[-1]["heap_allocs_per_step"], per_run))
    print(f"| model | batch | threads | ferrite ms/step | TensorFlow train_on_batch ms/step | ratio | per-round ratios | arena (lower bound) | heap allocs/step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, fer, tfms, arena, lb, allocs, per_run in rows:
        print(f"| {name} | {BATCH} | {args.threads} | {fer:.3f} | {tfms:.3f} | {fer / tfms:.3f} | {per_run} | {arena} ({lb}) | {allocs:g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
