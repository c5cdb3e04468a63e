#!/usr/bin/env python3
"""The unseen-model suite: small networks in the families microcontroller and phone
applications ship, generated with the TensorFlow Lite converter so the runtime's
speed can be measured on shapes its kernels were not tuned on (issue 13).

Families, each in several input sizes and widths: keyword spotters (DS-CNN on MFCC
maps, TENet-like temporal convolutions over [1,T,1,C], TC-ResNet-like 1xN convolutions
over [1,1,T,C]), visual wake words (MobileNet-v1/v2 at width 0.25-0.35, one with a
depth-multiplier-8 depthwise first layer on RGB), CIFAR-like ResNets, fully-connected
anomaly-detection autoencoders, IMU gesture classifiers (1-D convolutions) and
depthwise-first feature extractors (large depthwise filters with depth multipliers
4-16 on 1-4 channel inputs).

Every variant is converted as float32 and full int8 with int8 I/O; alternating
variants add full int8 with float I/O or a whole-uint8 model. The converter's
post-training quantization emits int8 only, so the uint8 models come from its legacy
path: the same network built as a TF1 graph with fake-quantization nodes whose ranges
were measured on the calibration data, converted with inference_type uint8.

The variants are split into two halves, recorded in the directory (tune/, aside/) and
in manifest.json: kernels are tuned on "tune"; "aside" is not looked at while tuning
and reports how far the tuning generalizes. Weights and calibration data are seeded
per variant, so the same TF version writes the same files.

  unseen_models.py --out DIR     (skips the work when DIR/.complete names this
                                  generator's hash and the TF version)
"""
import argparse
import hashlib
import json
import math
import os
import pathlib
import time
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

CALIBRATION_SAMPLES = 32


class Net:
    """Builds one network from seeded weights as plain TF ops, in one of three modes:
    "float" (just the ops), "record" (eager, on a calibration batch: notes each
    quantized activation's range) and "fake" (inserts fake-quantization nodes with the
    recorded ranges, for the converter's legacy uint8 path). The weights are drawn again
    from the same seed on every build, so all modes see the same network."""

    def __init__(self, seed):
        self.seed = seed
        self.mode = "float"
        self.ranges = {}

    def build(self, fn, x):
        self.rng = np.random.default_rng(self.seed)
        self.k = 0
        return fn(self, self.act(x))

    def act(self, t, fixed=None):
        """Marks `t` as a quantized activation (its own scale and zero point)."""
        k = self.k
        self.k += 1
        if self.mode == "record":
            v = t.numpy()
            lo, hi = self.ranges.get(k, (math.inf, -math.inf))
            self.ranges[k] = (min(lo, float(v.min())), max(hi, float(v.max())))
        elif self.mode == "fake":
            lo, hi = fixed or self.ranges[k]
            lo, hi = min(lo, 0.0), max(hi, 0.0)
            hi = max(hi, lo + 1e-3)
            t = tf.quantization.fake_quant_with_min_max_args(t, min=lo, max=hi)
        return t

    def weight(self, shape, fan_in):
        # Variance-preserving for ReLU layers, so activations neither vanish nor blow up
        # through a few dozen random layers and calibration sees realistic ranges.
        w = self.rng.normal(0.0, math.sqrt(2.0 / fan_in), shape).astype(np.float32)
        t = tf.constant(w)
        if self.mode == "fake":
            t = tf.quantization.fake_quant_with_min_max_args(t, min=min(float(w.min()), 0.0), max=max(float(w.max()), 0.0))
        return t

    def bias(self, n):
        return tf.constant(self.rng.normal(0.0, 0.05, [n]).astype(np.float32))

    @staticmethod
    def activation(x, act):
        if act == "relu":
            return tf.nn.relu(x)
        if act == "relu6":
            return tf.nn.relu6(x)
        return x

    def conv(self, x, cout, k=1, stride=1, act="relu", dilation=1):
        kh, kw = (k, k) if isinstance(k, int) else k
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        cin = x.shape[-1]
        w = self.weight([kh, kw, cin, cout], kh * kw * cin)
        y = tf.nn.conv2d(x, w, [1, sh, sw, 1], "SAME", dilations=dilation) + self.bias(cout)
        return self.act(self.activation(y, act))

    def depthwise(self, x, k=3, mult=1, stride=1, act="relu"):
        kh, kw = (k, k) if isinstance(k, int) else k
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        cin = x.shape[-1]
        w = self.weight([kh, kw, cin, mult], kh * kw)
        y = tf.nn.depthwise_conv2d(x, w, [1, sh, sw, 1], "SAME") + self.bias(cin * mult)
        return self.act(self.activation(y, act))

    def conv1d(self, x, cout, k, stride=1, act="relu", dilation=1):
        cin = x.shape[-1]
        w = self.weight([k, cin, cout], k * cin)
        y = tf.nn.conv1d(x, w, stride, "SAME", dilations=dilation) + self.bias(cout)
        return self.act(self.activation(y, act))

    def dense(self, x, n, act="relu"):
        cin = x.shape[-1]
        y = tf.matmul(x, self.weight([cin, n], cin)) + self.bias(n)
        return self.act(self.activation(y, act))

    def add(self, a, b, act="relu"):
        return self.act(self.activation(a + b, act))

    def mean(self, x, axes):
        return self.act(tf.reduce_mean(x, axes))

    @staticmethod
    def flatten(x):
        return tf.reshape(x, [-1, int(np.prod(x.shape[1:]))])

    def softmax(self, logits):
        # LiteRT's quantized softmax wants its output at scale 1/256 from zero.
        return self.act(tf.nn.softmax(logits), fixed=(0.0, 255.0 / 256.0))


def divisible(v, d=8):
    return max(d, int(v + d / 2) // d * d)


# ---- the families ----------------------------------------------------------------


def dscnn(width, blocks, classes=12):
    """DS-CNN keyword spotter: a 10x4 strided convolution over the MFCC map, depthwise-
    separable blocks, average pooling over the whole map, a classifier."""

    def f(n, x):
        x = n.conv(x, width, (10, 4), 2)
        for _ in range(blocks):
            x = n.depthwise(x, 3)
            x = n.conv(x, width, 1)
        x = tf.nn.avg_pool2d(x, x.shape[1:3], 1, "VALID")
        return n.softmax(n.dense(n.flatten(x), classes, None))

    return f


def tenet(width, strides, k=9, classes=12):
    """TENet-like: MFCC as [1,T,1,C]; inverted bottlenecks with Kx1 temporal depthwise
    filters, 1x1 strided shortcuts where the time axis halves."""

    def f(n, x):
        x = n.conv(x, width, (3, 1))
        for s in strides:
            h = n.conv(x, width * 3, 1)
            # TF's depthwise kernel takes only equal strides; over a width of 1 a stride
            # of (s, s) is the same as (s, 1).
            h = n.depthwise(h, (k, 1), 1, s)
            h = n.conv(h, width, 1, act=None)
            short = x if s == 1 else n.conv(x, width, 1, (s, 1), act=None)
            x = n.add(short, h)
        return n.softmax(n.dense(n.mean(x, [1, 2]), classes, None))

    return f


def tcresnet(widths, k=9, classes=12):
    """TC-ResNet-like: MFCC as [1,1,T,C]; full 1xK convolutions over time, strided
    residual blocks with 1x1 projection shortcuts."""

    def f(n, x):
        x = n.conv(x, widths[0], (1, 3))
        for w in widths[1:]:
            h = n.conv(x, w, (1, k), (1, 2))
            h = n.conv(h, w, (1, k), act=None)
            x = n.add(n.conv(x, w, 1, (1, 2)), h)
        return n.softmax(n.dense(n.mean(x, [1, 2]), classes, None))

    return f


def mobilenet_v1(alpha, classes=2):
    """MobileNet-v1 visual wake words: 3x3 strided stem, 13 depthwise-separable layers."""
    layers = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]

    def f(n, x):
        x = n.conv(x, divisible(32 * alpha), 3, 2, "relu6")
        for c, s in layers:
            x = n.depthwise(x, 3, 1, s, "relu6")
            x = n.conv(x, divisible(c * alpha), 1, act="relu6")
        return n.softmax(n.dense(n.mean(x, [1, 2]), classes, None))

    return f


def mobilenet_v2(alpha, stem_multiplier=0, classes=2):
    """MobileNet-v2 visual wake words. With stem_multiplier > 0 the stem is a separable
    convolution whose 3x3 depthwise part multiplies the 3 RGB channels by it."""
    blocks = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def f(n, x):
        c0 = divisible(32 * alpha)
        if stem_multiplier:
            x = n.depthwise(x, 3, stem_multiplier, 2, "relu6")
            x = n.conv(x, c0, 1, act="relu6")
        else:
            x = n.conv(x, c0, 3, 2, "relu6")
        for t, c, reps, s in blocks:
            cout = divisible(c * alpha)
            for r in range(reps):
                h = x if t == 1 else n.conv(x, x.shape[-1] * t, 1, act="relu6")
                h = n.depthwise(h, 3, 1, s if r == 0 else 1, "relu6")
                h = n.conv(h, cout, 1, act=None)
                x = n.add(x, h, None) if (r > 0 or s == 1) and x.shape[-1] == cout else h
        x = n.conv(x, 1280, 1, act="relu6")
        return n.softmax(n.dense(n.mean(x, [1, 2]), classes, None))

    return f


def resnet(width, blocks, classes=10):
    """CIFAR-style ResNet: three stages (width, 2x, 4x) of basic blocks, the last two
    strided with 1x1 projection shortcuts; average pooling over the final map."""

    def f(n, x):
        x = n.conv(x, width, 3)
        for stage, w in enumerate([width, 2 * width, 4 * width]):
            for b in range(blocks):
                s = 2 if stage > 0 and b == 0 else 1
                h = n.conv(x, w, 3, s)
                h = n.conv(h, w, 3, act=None)
                short = x if s == 1 and x.shape[-1] == w else n.conv(x, w, 1, s, act=None)
                x = n.add(short, h)
        x = tf.nn.avg_pool2d(x, x.shape[1:3], 1, "VALID")
        return n.softmax(n.dense(n.flatten(x), classes, None))

    return f


def autoencoder(hidden, code, depth):
    """Fully-connected autoencoder of stacked log-mel frames (anomaly detection)."""

    def f(n, x):
        size = x.shape[-1]
        for _ in range(depth):
            x = n.dense(x, hidden)
        x = n.dense(x, code)
        for _ in range(depth):
            x = n.dense(x, hidden)
        return n.dense(x, size, None)

    return f


def imu(widths, k, dilation=1, flatten_head=False, classes=8):
    """IMU gesture classifier: 1-D convolutions and max pooling over [1,T,axes]."""

    def f(n, x):
        for i, w in enumerate(widths):
            x = n.conv1d(x, w, k, dilation=dilation)
            if i < len(widths) - 1:
                x = tf.nn.max_pool1d(x, 2, 2, "VALID")
        x = n.flatten(x) if flatten_head else n.mean(x, [1])
        x = n.dense(x, 64)
        return n.softmax(n.dense(x, classes, None))

    return f


def depthwise_first(k, mult, stride, widths, k_next=3, stride_next=2, classes=4):
    """Feature extractor whose first layer is a large depthwise filter with a depth
    multiplier on a few-channel input, then depthwise-separable downsampling layers."""

    def f(n, x):
        x = n.depthwise(x, k, mult, stride)
        x = n.conv(x, widths[0], 1)
        for w in widths[1:]:
            x = n.depthwise(x, k_next, 1, stride_next)
            x = n.conv(x, w, 1)
        return n.softmax(n.dense(n.mean(x, [1, 2]), classes, None))

    return f


# (half, name, input shape without the batch, network)
VARIANTS = [
    ("tune", "kws_dscnn_49x10_w64", (49, 10, 1), dscnn(64, 4)),
    ("tune", "kws_tenet_101x40_w32", (101, 1, 40), tenet(32, [2, 1, 2, 1, 2, 1])),
    ("tune", "vww_mbv1_96_a025", (96, 96, 3), mobilenet_v1(0.25)),
    ("tune", "ic_resnet8_32_w16", (32, 32, 3), resnet(16, 1)),
    ("tune", "ad_autoencoder_640_h128", (640,), autoencoder(128, 8, 4)),
    ("tune", "imu_conv1d_128x6", (128, 6), imu([16, 32, 64], 5)),
    ("tune", "dwfirst_gray96_k5_dm8", (96, 96, 1), depthwise_first(5, 8, 2, [16, 32, 64])),
    ("tune", "dwfirst_spec49x40_k3_dm16", (49, 40, 1), depthwise_first(3, 16, 1, [24, 48])),
    ("aside", "kws_dscnn_98x40_w96", (98, 40, 1), dscnn(96, 5)),
    ("aside", "kws_tcresnet_98x40_w16", (1, 98, 40), tcresnet([16, 24, 32, 48])),
    ("aside", "vww_mbv2_128_a035_dm8", (128, 128, 3), mobilenet_v2(0.35, stem_multiplier=8)),
    ("aside", "ic_resnet14_48_w12", (48, 48, 3), resnet(12, 2)),
    ("aside", "ad_autoencoder_320_h64", (320,), autoencoder(64, 6, 3)),
    ("aside", "imu_conv1d_200x3_dil2", (200, 3), imu([12, 24, 48], 7, dilation=2, flatten_head=True)),
    ("aside", "dwfirst_rgb64_k7_dm4", (64, 64, 3), depthwise_first(7, 4, 2, [24, 48, 96])),
    ("aside", "dwfirst_sensor1x256x4_k9_dm8", (1, 256, 4), depthwise_first((1, 9), 8, 2, [32, 64], (1, 5))),
]


def kinds_of(index_in_half):
    """float32 and int8 I/O for every variant; int8 with float I/O for the even ones of
    each half, whole uint8 for the odd ones."""
    return ["float", "int8io", "int8" if index_in_half % 2 == 0 else "uint8"]


def calibration(name, shape):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return rng.uniform(-1.0, 1.0, (CALIBRATION_SAMPLES, 1) + shape).astype(np.float32)


def convert_float_or_int8(name, fn, shape, kind, data):
    net = Net(zlib.crc32(name.encode()))
    module = tf.Module()
    module.f = tf.function(lambda x: net.build(fn, x), input_signature=[tf.TensorSpec((1,) + shape, tf.float32)])
    conv = tf.lite.TFLiteConverter.from_concrete_functions([module.f.get_concrete_function()], module)
    if kind != "float":

        def representative():
            for x in data:
                yield [x]

        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = representative
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if kind == "int8io":
            conv.inference_input_type = tf.int8
            conv.inference_output_type = tf.int8
    return conv.convert()


def convert_uint8(name, fn, shape, data):
    net = Net(zlib.crc32(name.encode()))
    net.mode = "record"
    net.build(fn, tf.constant(data.reshape((-1,) + shape)))
    net.mode = "fake"
    lo, hi = net.ranges[0]
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    # The input's quantization as the fake-quant node nudges it: zero point on the grid.
    scale = (hi - lo) / 255.0
    zero = round(-lo / scale)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1,) + shape, name="input")
        y = tf.identity(net.build(fn, x), name="output")
        with tf.compat.v1.Session(graph=g) as s:
            conv = tf.compat.v1.lite.TFLiteConverter.from_session(s, [x], [y])
            conv.inference_type = tf.uint8
            conv.quantized_input_stats = {"input": (float(zero), 1.0 / scale)}
            return conv.convert()


def generator_hash():
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    args = ap.parse_args()
    stamp = f"{generator_hash()} tf {tf.__version__}\n"
    marker = args.out / ".complete"
    if marker.exists() and marker.read_text() == stamp:
        print(f"unseen_models: cached in {args.out}")
        return
    # A stale suite (another generator version) is replaced whole, never mixed.
    for old in list(args.out.rglob("*.tflite")) + [args.out / "manifest.json", marker]:
        old.unlink(missing_ok=True)
    t0 = time.time()
    manifest = []
    index = {"tune": 0, "aside": 0}
    for half, name, shape, fn in VARIANTS:
        kinds = kinds_of(index[half])
        index[half] += 1
        data = calibration(name, shape)
        (args.out / half).mkdir(parents=True, exist_ok=True)
        for kind in kinds:
            blob = convert_uint8(name, fn, shape, data) if kind == "uint8" else convert_float_or_int8(name, fn, shape, kind, data)
            file = f"{half}/{name}_{kind}.tflite"
            (args.out / file).write_bytes(blob)
            manifest.append({"file": file, "half": half, "family": name.split("_")[0], "variant": name, "kind": kind, "input_shape": [1, *shape]})
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    marker.write_text(stamp)
    print(f"unseen_models: {len(manifest)} models in {args.out} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
