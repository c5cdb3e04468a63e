#!/usr/bin/env python3
"""Generate a tiny SSD-style detector with the TensorFlow Lite converter: a small
conv backbone, box and class heads over a 4x4 and a 2x2 feature map (3 anchors per
cell), and LiteRT's built-in custom op TFLite_Detection_PostProcess, which the
converter emits from a tf.function declaring that it implements the op (as the
TensorFlow object detection API's export does),
with fast and with regular NMS. Float only: the uint8 inputs of the op are covered
by the generated single-op cases (tools/opgen).

Weights are seeded, so the models are the same on every run of the same TF version.

  ssd_model.py --out DIR     (skips the work when DIR/.complete exists)
"""
import argparse
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

NUM_CLASSES = 3
ANCHORS_PER_CELL = 3


def anchors():
    """Center-size anchors (y, x, h, w) for a 4x4 and a 2x2 grid, 3 aspect ratios each."""
    out = []
    for grid, size in ((4, 0.3), (2, 0.6)):
        for i in range(grid):
            for j in range(grid):
                for ratio in (0.5, 1.0, 2.0):
                    out.append([(i + 0.5) / grid, (j + 0.5) / grid, size / np.sqrt(ratio), size * np.sqrt(ratio)])
    return np.array(out, dtype=np.float32)


def implements(regular):
    attrs = {
        "max_detections": ("i", 10),
        "max_classes_per_detection": ("i", 1),
        "detections_per_class": ("i", 5),
        "use_regular_nms": ("b", "true" if regular else "false"),
        "nms_score_threshold": ("f", 0.3),
        "nms_iou_threshold": ("f", 0.5),
        "num_classes": ("i", NUM_CLASSES),
        "y_scale": ("f", 10.0),
        "x_scale": ("f", 10.0),
        "h_scale": ("f", 5.0),
        "w_scale": ("f", 5.0),
    }
    parts = ['name: "TFLite_Detection_PostProcess"']
    parts += [f'attr {{ key: "{k}" value {{ {t}: {v} }} }}' for k, (t, v) in attrs.items()]
    return " ".join(parts)


class Detector(tf.Module):
    """The network with constant (seeded random) weights, so the converter sees
    constants rather than variables to freeze."""

    def __init__(self, regular):
        super().__init__()
        rng = np.random.default_rng(14)

        def conv(cin, cout):
            w = rng.normal(0.0, np.sqrt(2.0 / (9 * cin)), size=(3, 3, cin, cout)).astype(np.float32)
            b = rng.normal(0.0, 0.05, size=(cout,)).astype(np.float32)
            return tf.constant(w), tf.constant(b)

        self.backbone = [conv(3, 8), conv(8, 16), conv(16, 16), conv(16, 16)]
        self.heads = [(conv(16, ANCHORS_PER_CELL * 4), conv(16, ANCHORS_PER_CELL * (NUM_CLASSES + 1))) for _ in range(2)]
        self.anchors = tf.constant(anchors())

        @tf.function(experimental_implements=implements(regular))
        def post_process(box_encodings, class_predictions, anchors):
            # The converter replaces this function with the custom op; the body only
            # has to give outputs of the right types.
            boxes = tf.constant(0.0, dtype=tf.float32, name="boxes")
            classes = tf.constant(0.0, dtype=tf.float32, name="classes")
            scores = tf.constant(0.0, dtype=tf.float32, name="scores")
            num = tf.constant(0.0, dtype=tf.float32, name="num_detections")
            return boxes, classes, scores, num

        self.post_process = post_process

    @tf.function(input_signature=[tf.TensorSpec([1, 32, 32, 3], tf.float32)])
    def __call__(self, image):
        x = image
        feats = []
        for k, (w, b) in enumerate(self.backbone):
            x = tf.nn.relu(tf.nn.conv2d(x, w, 2, "SAME") + b)
            if k >= 2:
                feats.append(x)  # 4x4, then 2x2
        boxes, scores = [], []
        for f, ((bw, bb), (cw, cb)) in zip(feats, self.heads):
            boxes.append(tf.reshape(tf.nn.conv2d(f, bw, 1, "SAME") + bb, [1, -1, 4]))
            scores.append(tf.reshape(tf.nn.conv2d(f, cw, 1, "SAME") + cb, [1, -1, NUM_CLASSES + 1]))
        box_enc = tf.concat(boxes, axis=1)
        cls = tf.sigmoid(tf.concat(scores, axis=1))
        return self.post_process(box_enc, cls, self.anchors)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    args = ap.parse_args()
    if (args.out / ".complete").exists():
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for regular in (False, True):
        m = Detector(regular)
        converter = tf.lite.TFLiteConverter.from_concrete_functions([m.__call__.get_concrete_function()], m)
        converter.allow_custom_ops = True
        name = f"ssd_tiny_{'regular' if regular else 'fast'}_nms.tflite"
        (args.out / name).write_bytes(converter.convert())
        print("wrote", args.out / name)
    (args.out / ".complete").write_text("ok\n")


if __name__ == "__main__":
    main()
