#!/usr/bin/env python3
"""Generate test models with the TensorFlow Lite converter, in every quantization
kind it makes: float, fp16 weights, dynamic-range, full int8 (float I/O), full int8
(int8 I/O) and int16x8. Architectures: a small CNN, an MLP, a depthwise-separable
net, and a model with a WHILE loop (float kinds only). Weights and calibration data
are seeded, so the models are the same on every run of the same TF version.

  tf_models.py --out DIR     (skips the work when DIR/.complete exists)
"""
import argparse
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def cnn():
    i = tf.keras.Input((32, 32, 3), batch_size=1)
    x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu")(i)
    x = tf.keras.layers.MaxPooling2D()(x)
    x = tf.keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = tf.keras.layers.AveragePooling2D(8)(x)
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(10)(x)
    return tf.keras.Model(i, tf.keras.layers.Softmax()(x))


def mlp():
    i = tf.keras.Input((20,), batch_size=1)
    x = tf.keras.layers.Dense(32, activation="relu")(i)
    x = tf.keras.layers.Dense(16, activation="relu")(x)
    return tf.keras.Model(i, tf.keras.layers.Dense(4)(x))


def separable():
    i = tf.keras.Input((24, 24, 8), batch_size=1)
    x = tf.keras.layers.DepthwiseConv2D(3, padding="same", activation="relu6")(i)
    x = tf.keras.layers.Conv2D(8, 1)(x)
    x = tf.keras.layers.Add()([x, i])
    x = tf.keras.layers.DepthwiseConv2D(3, strides=2, padding="same", activation="relu")(x)
    x = tf.keras.layers.Conv2D(8, 1, activation="relu")(x)
    x = tf.keras.layers.AveragePooling2D(12)(x)
    x = tf.keras.layers.Flatten()(x)
    return tf.keras.Model(i, tf.keras.layers.Dense(5)(x))


class Loop(tf.Module):
    """x <- x * 0.5 + 1, three times, in a tf.while_loop (becomes WHILE)."""

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def __call__(self, x):
        i = tf.constant(0)
        _, x = tf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 0.5 + 1.0), [i, x])
        return x


def convert(model, kind, input_shape):
    if isinstance(model, tf.keras.Model):
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
    else:
        conv = tf.lite.TFLiteConverter.from_concrete_functions([model.__call__.get_concrete_function()], model)
    rng = np.random.default_rng(1)

    def data():
        for _ in range(32):
            yield [rng.uniform(-1, 1, input_shape).astype(np.float32)]

    if kind == "fp16":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.target_spec.supported_types = [tf.float16]
    elif kind == "dynamic":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
    elif kind in ("int8", "int8io"):
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = data
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if kind == "int8io":
            conv.inference_input_type = tf.int8
            conv.inference_output_type = tf.int8
    elif kind == "int16x8":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = data
        conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    return conv.convert()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    args = ap.parse_args()
    if (args.out / ".complete").exists():
        print(f"tf_models: cached in {args.out}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    tf.random.set_seed(0)
    tf.keras.utils.set_random_seed(0)
    kinds = ["float", "fp16", "dynamic", "int8", "int8io", "int16x8"]
    models = [("cnn", cnn(), (1, 32, 32, 3), kinds), ("mlp", mlp(), (1, 20), kinds), ("separable", separable(), (1, 24, 24, 8), kinds), ("while", Loop(), (1, 4), ["float", "fp16", "dynamic"])]
    for name, model, shape, ks in models:
        for kind in ks:
            path = args.out / f"tf_{name}_{kind}.tflite"
            path.write_bytes(convert(model, kind, shape))
    (args.out / ".complete").write_text(tf.__version__ + "\n")
    print(f"tf_models: {len(list(args.out.glob('*.tflite')))} models in {args.out}")


if __name__ == "__main__":
    main()
