#!/usr/bin/env python3
"""Generate one small model per family of issue 14's Verify list that the other
generators (rnn_models.py, ssd_model.py, int8_models.py, unseen_models.py,
tf_models.py) do not make, each converted by the TensorFlow Lite converter in float,
dynamic-range (hybrid) and full int8 with float I/O, where the converter can:

- `text_conv`: a text classifier, int32 token ids through an Embedding, a Conv1D,
  global max and average pooling, and Dense layers;
- `text_lstm`: an Embedding into a Keras LSTM (a WHILE loop) and a Dense head;
- `audio_frontend`: a waveform through tf.signal.stft (a Hann window and RFFT2D),
  the complex magnitude, a mel weight matrix and a log: features out;
- `superres`: an ESPCN-like super-resolution net whose convolutions pad their input
  by mirroring (tf.pad REFLECT and SYMMETRIC), ending in depth-to-space;
- `video3d`: a 3-D conv video block (Conv3D, batch norm, ReLU, 3-D max and average
  pooling written as reshaped 2-D pooling, Conv3DTranspose, a global 3-D average);
- `encoder`: a transformer encoder block (multi-head attention, layer norm, a ReLU
  feed-forward) in float and dynamic range; its int8 form is int8_models.py's
  encoder_block.

Weights, batch-norm statistics and calibration data are seeded, so each TF version
gives the same models. All conversions run in one child process (a TensorFlow import
costs seconds); a conversion the converter refuses is reported and skipped, one that
crashes it is skipped and the child restarted after it.

  family_models.py --out DIR     (skips the work when DIR/.complete exists;
                                  int8 models go to DIR/int8)
"""
import argparse
import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

VOCAB, TOKENS = 200, 24
SAMPLES, FRAME, HOP, MELS = 1024, 256, 128, 20


def text_conv():
    i = tf.keras.Input((TOKENS,), batch_size=1, dtype="int32")
    e = tf.keras.layers.Embedding(VOCAB, 32)(i)
    c = tf.keras.layers.Conv1D(32, 3, padding="same", activation="relu")(e)
    x = tf.keras.layers.Concatenate()([tf.keras.layers.GlobalMaxPooling1D()(c), tf.keras.layers.GlobalAveragePooling1D()(e)])
    x = tf.keras.layers.Dense(32, activation="relu")(x)
    return tf.keras.Model(i, tf.keras.layers.Dense(5, activation="softmax")(x))


def text_lstm():
    i = tf.keras.Input((TOKENS,), batch_size=1, dtype="int32")
    e = tf.keras.layers.Embedding(VOCAB, 32)(i)
    x = tf.keras.layers.LSTM(32)(e)
    return tf.keras.Model(i, tf.keras.layers.Dense(3, activation="softmax")(x))


class AudioFrontend(tf.Module):
    """Log-mel features of a waveform: the usual keyword-spotting front end."""

    def __init__(self):
        super().__init__()
        bins = FRAME // 2 + 1
        self.mel = tf.signal.linear_to_mel_weight_matrix(MELS, bins, 16000, 20.0, 7600.0)
        rng = np.random.default_rng(3)
        # A learned projection after the features: a weight for dynamic-range quantization.
        self.proj = tf.constant(rng.uniform(-0.3, 0.3, (MELS, 64)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, SAMPLES], tf.float32)])
    def __call__(self, wave):
        spec = tf.signal.stft(wave, FRAME, HOP, fft_length=FRAME, window_fn=tf.signal.hann_window)
        mag = tf.abs(spec)
        mel = tf.tensordot(mag, self.mel, 1)
        logmel = tf.math.log(mel + 1e-6)
        return logmel, tf.matmul(logmel[0], self.proj)


def mirror_conv(x, filters, mode, activation="relu"):
    x = tf.keras.layers.Lambda(lambda t: tf.pad(t, [[0, 0], [1, 1], [1, 1], [0, 0]], mode=mode))(x)
    return tf.keras.layers.Conv2D(filters, 3, padding="valid", activation=activation)(x)


def superres():
    scale = 3
    i = tf.keras.Input((12, 12, 1), batch_size=1)
    x = tf.keras.layers.Lambda(lambda t: tf.pad(t, [[0, 0], [2, 2], [2, 2], [0, 0]], mode="REFLECT"))(i)
    x = tf.keras.layers.Conv2D(32, 5, padding="valid", activation="tanh")(x)
    x = mirror_conv(x, 32, "SYMMETRIC", "tanh")
    x = mirror_conv(x, scale * scale, "REFLECT", None)
    return tf.keras.Model(i, tf.keras.layers.Lambda(lambda t: tf.nn.depth_to_space(t, scale))(x))


def pool_frames(x, pool, size):
    """3-D pooling over (1, k, k) or (k, 1, 1) windows as 2-D pooling of a reshaped
    tensor: the converter has no builtin for tf.MaxPool3D / tf.AvgPool3D (it needs
    TensorFlow's flex delegate) and LiteRT's default resolver runs no 3-D pool."""
    _, d, h, w, c = x.shape
    if size[0] == 1:
        y = tf.keras.layers.Lambda(lambda t: tf.reshape(t, (-1, h, w, c)))(x)
        y = pool(size[1:])(y)
        return tf.keras.layers.Lambda(lambda t: tf.reshape(t, (-1, d, h // size[1], w // size[2], c)))(y)
    y = tf.keras.layers.Reshape((d, h * w, c))(x)
    y = pool((size[0], 1))(y)
    return tf.keras.layers.Reshape((d // size[0], h, w, c))(y)


def video3d():
    i = tf.keras.Input((6, 10, 10, 3), batch_size=1)
    x = tf.keras.layers.Conv3D(16, 3, padding="same")(i)
    x = tf.keras.layers.BatchNormalization()(x)
    x = tf.keras.layers.ReLU()(x)
    x = pool_frames(x, tf.keras.layers.MaxPool2D, (1, 2, 2))
    x = tf.keras.layers.Conv3D(16, (3, 3, 3), padding="valid", activation="relu")(x)
    x = pool_frames(x, tf.keras.layers.AveragePooling2D, (2, 1, 1))
    x = tf.keras.layers.Conv3DTranspose(8, 3, strides=2, padding="same")(x)
    x = tf.keras.layers.BatchNormalization()(x)
    x = tf.keras.layers.ReLU()(x)
    g = tf.keras.layers.GlobalAveragePooling3D()(x)
    return tf.keras.Model(i, [x, tf.keras.layers.Dense(4)(g)])


def encoder():
    i = tf.keras.Input((10, 32), batch_size=1)
    h = tf.keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)(i, i)
    x = tf.keras.layers.LayerNormalization(epsilon=1e-6)(tf.keras.layers.Add()([i, h]))
    h = tf.keras.layers.Dense(64, activation="relu")(x)
    h = tf.keras.layers.Dense(32)(h)
    return tf.keras.Model(i, tf.keras.layers.LayerNormalization(epsilon=1e-6)(tf.keras.layers.Add()([x, h])))


def randomize_batch_norm(model, rng):
    """Seeded moving statistics and affine parameters: the defaults (mean 0, var 1,
    gamma 1, beta 0) would make every batch norm the identity, testing nothing."""
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            gamma, beta, mean, var = layer.get_weights()
            layer.set_weights([rng.uniform(0.5, 1.5, gamma.shape), rng.uniform(-0.3, 0.3, beta.shape), rng.uniform(-0.3, 0.3, mean.shape), rng.uniform(0.5, 2.0, var.shape)])


def tokens(rng):
    return rng.integers(0, VOCAB, (1, TOKENS)).astype(np.int32)


def uniform(shape):
    return lambda rng: rng.uniform(-1, 1, shape).astype(np.float32)


ALL_KINDS = ("float", "dynamic", "int8")
# name -> (builder, calibration input sampler, kinds)
MODELS = {
    "text_conv": (text_conv, tokens, ALL_KINDS),
    "text_lstm": (text_lstm, tokens, ALL_KINDS),
    "audio_frontend": (AudioFrontend, uniform((1, SAMPLES)), ALL_KINDS),
    "superres": (superres, uniform((1, 12, 12, 1)), ALL_KINDS),
    "video3d": (video3d, uniform((1, 6, 10, 10, 3)), ALL_KINDS),
    # int8: int8_models.py's encoder_block (LiteRT reference kernels, value for value).
    "encoder": (encoder, uniform((1, 10, 32)), ("float", "dynamic")),
}


def convert(model, sample, kind):
    if isinstance(model, tf.keras.Model):
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
    else:
        conv = tf.lite.TFLiteConverter.from_concrete_functions([model.__call__.get_concrete_function()], model)
    rng = np.random.default_rng(1)

    def data():
        for _ in range(32):
            yield [sample(rng)]

    if kind != "float":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if kind == "int8":
        conv.representative_dataset = data
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return conv.convert()


def model_path(out, name, kind, suffix=".tflite"):
    """int8 models in their own folder: the suite compares those value for value with
    LiteRT's reference kernels (conformance.py models --exact-reference)."""
    return (out / "int8" if kind == "int8" else out) / f"{name}_{kind}{suffix}"


def make_all(out):
    """Converts every model and kind not yet made nor marked as crashing the converter,
    naming the conversion under way in out/.current first (read back by the parent
    when this process dies)."""
    crashed = set((out / ".crashed").read_text().split()) if (out / ".crashed").exists() else set()
    for name, (build, sample, kinds) in MODELS.items():
        todo = [k for k in kinds if f"{name}_{k}" not in crashed and not model_path(out, name, k).exists() and not model_path(out, name, k, ".refused").exists()]
        if not todo:
            continue
        (out / ".current").write_text(f"{name}_build\n")
        # The same seed before each build: every kind of a model has the same weights.
        tf.keras.utils.set_random_seed(0)
        model = build()
        if isinstance(model, tf.keras.Model):
            randomize_batch_norm(model, np.random.default_rng(4))
        for kind in todo:
            (out / ".current").write_text(f"{name}_{kind}\n")
            try:
                flat = convert(model, sample, kind)
            except Exception as e:  # noqa: BLE001 - the converter refuses some kinds; report them
                last = (str(e).strip().splitlines() or [type(e).__name__])[-1]
                model_path(out, name, kind, ".refused").write_text(last[:200] + "\n")
                continue
            # Written whole under another name first: a crash never leaves half a model.
            model_path(out, name, kind, ".part").write_bytes(flat)
            model_path(out, name, kind, ".part").rename(model_path(out, name, kind))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--child", action="store_true", help="convert (run by the parent, which restarts it after a converter crash)")
    args = ap.parse_args()
    if args.child:
        make_all(args.out)
        return
    if (args.out / ".complete").exists():
        print(f"family_models: cached in {args.out}")
        return
    (args.out / "int8").mkdir(parents=True, exist_ok=True)
    while True:
        r = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--child"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode == 0:
            break
        # The converter crashed the process (TF 2.19.1's int8 calibration of some
        # recurrent models does): skip that conversion and go on with the rest.
        current = (args.out / ".current").read_text().strip() if (args.out / ".current").exists() else ""
        crashed = (args.out / ".crashed").read_text().split() if (args.out / ".crashed").exists() else []
        if not current or current in crashed:
            last = (r.stderr.strip().splitlines() or [""])[-1]
            sys.exit(f"family_models: generation failed at {current or 'the start'} (exit status {r.returncode}: {last[:200]})")
        (args.out / ".crashed").write_text("\n".join(crashed + [current]) + "\n")
        print(f"family_models: the converter crashed on {current} (exit status {r.returncode}); skipped")
    for f in sorted(args.out.rglob("*.refused")):
        print(f"family_models: the converter refused {f.stem}: {f.read_text().strip()}")
    (args.out / ".complete").write_text(tf.__version__ + "\n")
    print(f"family_models: {len(list(args.out.rglob('*.tflite')))} models in {args.out}")


if __name__ == "__main__":
    main()
