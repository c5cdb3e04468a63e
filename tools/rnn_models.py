#!/usr/bin/env python3
"""Generate recurrent test models with the TensorFlow Lite converter: keyword-spotter
shaped models (MFCC-like frames in, class scores out), each in float, dynamic-range
and full int8 (float I/O), where the converter makes them:

- `fused_lstm`, `fused_bilstm`: LSTMs written as the functions the converter fuses
  into UNIDIRECTIONAL_SEQUENCE_LSTM (a tf.function marked `api_implements: lstm_*`,
  the form Keras 2's LSTM layer had); the bidirectional one runs a second LSTM on
  reversed time and concatenates, then a stacked LSTM;
- `lstm`, `gru`: Keras 3 LSTM and GRU layers, which TF 2.19's converter turns into
  WHILE loops of ordinary ops;
- `bilstm`, `simple_rnn`: a Keras 3 bidirectional LSTM and two stacked SimpleRNNs,
  WHILE loops too, whose bodies slice the sequence at the loop counter: shapes that
  come from values at run time.

Weights and calibration data are seeded.

  rnn_models.py --out DIR     (skips the work when DIR/.complete exists)

Each conversion runs in its own process: the converter crashes on some of them
(TF 2.19.1's int8 calibration of a fused LSTM), which is reported and skipped.
"""
import argparse
import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# 40 features and 32 units: weight matrices of at least 1024 values, which the
# converter's dynamic-range quantization turns into int8 (smaller ones stay float).
FRAMES, FEATURES, CLASSES = 25, 40, 4


class FusedLstm(tf.Module):
    """LSTM layers as tf.functions the converter recognizes and fuses (Keras 2's
    `api_implements` contract: inputs, initial h and c, kernel, recurrent kernel,
    bias; outputs last output, sequence, h, c, runtime)."""

    def __init__(self, bidirectional):
        super().__init__()
        rng = np.random.default_rng(2)
        self.bidirectional = bidirectional

        def weights(n_in, units):
            k = tf.constant(rng.uniform(-0.2, 0.2, (n_in, 4 * units)).astype(np.float32))
            r = tf.constant(rng.uniform(-0.2, 0.2, (units, 4 * units)).astype(np.float32))
            b = tf.constant(rng.uniform(-0.2, 0.2, (4 * units,)).astype(np.float32))
            return k, r, b

        if bidirectional:
            self.fw, self.bw, self.top = weights(FEATURES, 32), weights(FEATURES, 32), weights(64, 32)
        else:
            self.fw = weights(FEATURES, 32)
        self.dense = tf.constant(rng.uniform(-0.5, 0.5, (32, CLASSES)).astype(np.float32))

    @staticmethod
    def layer(go_backwards, index):
        def standard_lstm(inputs, init_h, init_c, kernel, recurrent_kernel, bias):
            h, c = init_h, init_c
            outs = []
            steps = tf.unstack(inputs, axis=1)
            for x in reversed(steps) if go_backwards else steps:
                z = tf.matmul(x, kernel) + tf.matmul(h, recurrent_kernel) + bias
                i, f, g, o = tf.split(z, 4, axis=1)
                c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
                h = tf.sigmoid(o) * tf.tanh(c)
                outs.append(h)
            return h, tf.stack(outs, axis=1), h, c, tf.constant(1.0)

        attributes = {"api_implements": f"lstm_{index:08d}-0000-0000-0000-000000000000", "api_preferred_device": "CPU", "time_major": False, "go_backwards": go_backwards}
        return tf.function(standard_lstm, experimental_attributes=attributes, autograph=False)

    def run(self, x, w, go_backwards, index):
        units = w[1].shape[0]
        z = tf.zeros([1, units])
        return self.layer(go_backwards, index)(x, z, z, *w)

    @tf.function(input_signature=[tf.TensorSpec([1, FRAMES, FEATURES], tf.float32)])
    def __call__(self, x):
        if self.bidirectional:
            _, fw, _, _, _ = self.run(x, self.fw, False, 1)
            _, bw, _, _, _ = self.run(x, self.bw, True, 2)
            seq = tf.concat([fw, tf.reverse(bw, [1])], axis=2)
            last, _, _, _, _ = self.run(seq, self.top, False, 3)
        else:
            last, _, _, _, _ = self.run(x, self.fw, False, 1)
        return tf.nn.softmax(tf.matmul(last, self.dense))


def lstm():
    i = tf.keras.Input((FRAMES, FEATURES), batch_size=1)
    x = tf.keras.layers.LSTM(32)(i)
    return tf.keras.Model(i, tf.keras.layers.Dense(CLASSES, activation="softmax")(x))


def gru():
    i = tf.keras.Input((FRAMES, FEATURES), batch_size=1)
    x = tf.keras.layers.GRU(32)(i)
    return tf.keras.Model(i, tf.keras.layers.Dense(CLASSES, activation="softmax")(x))


def convert(model, kind):
    if isinstance(model, tf.keras.Model):
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
    else:
        conv = tf.lite.TFLiteConverter.from_concrete_functions([model.__call__.get_concrete_function()], model)
    rng = np.random.default_rng(1)

    def data():
        for _ in range(32):
            yield [rng.uniform(-1, 1, (1, FRAMES, FEATURES)).astype(np.float32)]

    if kind == "dynamic":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
    elif kind == "int8":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = data
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return conv.convert()


def bilstm():
    i = tf.keras.Input((FRAMES, FEATURES), batch_size=1)
    x = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(16))(i)
    return tf.keras.Model(i, tf.keras.layers.Dense(CLASSES, activation="softmax")(x))


def simple_rnn():
    i = tf.keras.Input((FRAMES, FEATURES), batch_size=1)
    x = tf.keras.layers.SimpleRNN(32, return_sequences=True)(i)
    x = tf.keras.layers.SimpleRNN(32)(x)
    return tf.keras.Model(i, tf.keras.layers.Dense(CLASSES, activation="softmax")(x))


# Keras 3's bidirectional LSTM and SimpleRNN convert to WHILE loops whose tensor
# shapes are computed from values inside the loop (a data-dependent tail).
MODELS = {"fused_lstm": lambda: FusedLstm(False), "fused_bilstm": lambda: FusedLstm(True), "lstm": lstm, "gru": gru, "bilstm": bilstm, "simple_rnn": simple_rnn}
KINDS = ("float", "dynamic", "int8")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "KIND"), help="convert one model (run by the parent per conversion)")
    args = ap.parse_args()
    if args.one:
        name, kind = args.one
        # The same seed before each build: every kind of a model has the same weights.
        tf.keras.utils.set_random_seed(0)
        (args.out / f"kws_{name}_{kind}.tflite").write_bytes(convert(MODELS[name](), kind))
        return
    if (args.out / ".complete").exists():
        print(f"rnn_models: cached in {args.out}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    made, failed = 0, []
    for name in MODELS:
        for kind in KINDS:
            r = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--one", name, kind], capture_output=True, text=True)
            if r.returncode == 0:
                made += 1
            else:
                last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
                failed.append(f"{name}_{kind} (exit status {r.returncode}: {last[:100]})")
    for f in failed:
        print(f"rnn_models: the converter made no {f}")
    (args.out / ".complete").write_text(tf.__version__ + "\n")
    print(f"rnn_models: {made} models in {args.out}")


if __name__ == "__main__":
    main()
