#!/usr/bin/env python3
"""Generate fully integer (int8, float I/O) models with the TensorFlow Lite converter
for the integer variants of issue 14: a chain of FULLY_CONNECTED layers, a layer
normalization (MEAN, SQUARED_DIFFERENCE, RSQRT, SUB, MUL, ADD), and a transformer
encoder block (layer norm, multi-head attention, GELU feed-forward, ABS). Weights and
calibration data are seeded, so each TF version gives the same models.

  int8_models.py --out DIR     (skips the work when DIR/.complete exists)

tools/conformance.py models --exact-reference compares them with LiteRT's reference
kernels value for value.
"""
import argparse
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def fc_chain():
    b = {"bias_initializer": tf.keras.initializers.RandomNormal(stddev=0.3)}
    i = tf.keras.Input((24,), batch_size=2)
    x = tf.keras.layers.Dense(40, activation="relu", **b)(i)
    x = tf.keras.layers.Dense(33, **b)(x)
    x = tf.keras.layers.Dense(17, activation="relu", **b)(x)
    return tf.keras.Model(i, tf.keras.layers.Dense(6, **b)(x))


def fc_chain_3d():
    # Rank-3 activations: FULLY_CONNECTED with keep_num_dims; a long dot product.
    b = {"bias_initializer": tf.keras.initializers.RandomNormal(stddev=0.3)}
    i = tf.keras.Input((5, 24), batch_size=1)
    x = tf.keras.layers.Dense(300, activation="relu", **b)(i)
    x = tf.keras.layers.Dense(48, activation="tanh", **b)(x)
    return tf.keras.Model(i, tf.keras.layers.Dense(7, **b)(x))


def layer_norm():
    i = tf.keras.Input((6, 16), batch_size=1)
    x = tf.keras.layers.LayerNormalization(epsilon=1e-3)(i)
    return tf.keras.Model(i, x)


def elementwise():
    # The unary/binary integer variants on their own: |x|, (x - y)^2, 1/sqrt(.), GELU.
    i = tf.keras.Input((5, 12), batch_size=1)
    a = tf.keras.layers.Dense(12)(i)
    d = tf.keras.layers.Lambda(lambda t: tf.math.squared_difference(t[0], t[1]))([a, i])
    r = tf.keras.layers.Lambda(lambda t: tf.math.rsqrt(t + 0.5))(d)
    g = tf.keras.layers.Lambda(lambda t: tf.nn.gelu(t, approximate=False))(a)
    h = tf.keras.layers.Lambda(lambda t: tf.nn.gelu(t, approximate=True))(i)
    b = tf.keras.layers.Lambda(tf.abs)(a)
    return tf.keras.Model(i, tf.keras.layers.Concatenate()([r, g, h, b]))


def encoder_block():
    i = tf.keras.Input((8, 32), batch_size=1)
    h = tf.keras.layers.LayerNormalization(epsilon=1e-5)(i)
    h = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=16)(h, h)
    x = tf.keras.layers.Add()([i, h])
    h = tf.keras.layers.LayerNormalization(epsilon=1e-5)(x)
    h = tf.keras.layers.Dense(64, activation=lambda t: tf.nn.gelu(t, approximate=True))(h)
    h = tf.keras.layers.Dense(32)(h)
    return tf.keras.Model(i, tf.keras.layers.Add()([x, h]))


def convert(model, input_shape, per_tensor=False):
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    # One weight scale per layer instead of one per output row: LiteRT rounds the
    # two kinds of fully-connected layers differently.
    conv._experimental_disable_per_channel_quantization_for_dense_layers = per_tensor
    rng = np.random.default_rng(1)

    def data():
        for _ in range(32):
            yield [rng.uniform(-1, 1, input_shape).astype(np.float32)]

    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = data
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return conv.convert()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    args = ap.parse_args()
    if (args.out / ".complete").exists():
        print(f"int8_models: cached in {args.out}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    tf.random.set_seed(0)
    tf.keras.utils.set_random_seed(0)
    models = [("fc_chain", fc_chain, (2, 24)), ("fc_chain_3d", fc_chain_3d, (1, 5, 24)), ("layer_norm", layer_norm, (1, 6, 16)), ("elementwise", elementwise, (1, 5, 12)), ("encoder_block", encoder_block, (1, 8, 32))]
    for name, make, shape in models:
        (args.out / f"{name}_int8.tflite").write_bytes(convert(make(), shape))
        print(f"int8_models: {name}_int8.tflite")
    for name, make, shape in models[:2]:
        (args.out / f"{name}_per_tensor_int8.tflite").write_bytes(convert(make(), shape, per_tensor=True))
        print(f"int8_models: {name}_per_tensor_int8.tflite")
    (args.out / ".complete").touch()


if __name__ == "__main__":
    main()
