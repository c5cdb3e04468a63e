#!/usr/bin/env python3
"""MediaPipe's landmark custom ops in ferrite, checked three ways on a model that
uses them (face_landmark_with_attention.tflite, which LiteRT cannot run):

  mediapipe_ops_check.py --ferrite BIN --model MODEL [--work DIR]

1. Op by op: the model runs in ferrite with `--dump`; every instance of
   Landmarks2TransformMatrix, TransformTensorBilinear and TransformLandmarks is
   recomputed here with numpy (float64) from its dumped inputs and its custom
   options, written from the ops' definitions independently of the Rust code
   (explicit 4x4 matrix products, vectorized sampling). Runs on a face crop and on
   seeded noise and on the face moved half out of view; then the same op
   instances alone (a model of just them) on the face's landmarks moved by +-20
   pixels, so that crops reach past the feature map's border and the
   out-of-range sampling is exercised, with random feature maps and points. Error: max|ferrite - numpy| / max(1, max|numpy|),
   must be <= 1e-5.
2. The rest of the model against LiteRT: a copy of the model without the custom
   ops, their outputs made model inputs (fed with ferrite's values) and their
   inputs made model outputs, runs in LiteRT (default resolver) and in ferrite;
   every output must agree within the model tolerance 1e-3 (docs/conformance.md).
3. Plausibility on the face crop: no NaN anywhere, every mesh, lip, eye and iris
   landmark inside the 192x192 crop.

The face crop is drawn here, deterministically (a skin-toned oval with eyes,
brows, nose and lips on a plain background); no image file is needed.
Prints one line per check and exits non-zero on any failure.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter
from flatbuffers import flexbuffers

OP_TOL = 1e-5
MODEL_TOL = 1e-3
CUSTOM = ("Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks")


def face_crop(size=192):
    """A frontal cartoon face filling most of the crop, values in [0, 1] (the model's input range)."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    img = np.empty((size, size, 3), np.float32)
    img[:] = (0.35, 0.45, 0.55)  # background

    def ellipse(cx, cy, rx, ry):
        return ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 <= 1.0

    def paint(mask, rgb):
        img[mask] = rgb

    paint(ellipse(0.5, 0.52, 0.33, 0.42), (0.87, 0.68, 0.55))  # face
    paint(ellipse(0.5, 0.15, 0.32, 0.12) & (y < 0.2), (0.25, 0.17, 0.1))  # hair
    for cx in (0.36, 0.64):
        paint(ellipse(cx, 0.33, 0.08, 0.018), (0.3, 0.2, 0.12))  # brows
        paint(ellipse(cx, 0.42, 0.07, 0.035), (0.95, 0.95, 0.95))  # eye whites
        paint(ellipse(cx, 0.42, 0.028, 0.03), (0.25, 0.18, 0.12))  # irises
        paint(ellipse(cx, 0.42, 0.012, 0.012), (0.02, 0.02, 0.02))  # pupils
    paint(ellipse(0.5, 0.58, 0.045, 0.08), (0.8, 0.6, 0.48))  # nose
    paint(ellipse(0.5, 0.76, 0.12, 0.035), (0.7, 0.3, 0.3))  # lips
    paint(ellipse(0.5, 0.76, 0.1, 0.006), (0.35, 0.12, 0.12))  # mouth line
    # Soft shading so the image is not piecewise flat.
    img *= (1.0 - 0.25 * ((x - 0.5) ** 2 + (y - 0.5) ** 2))[..., None]
    return img[None]


# --- the ops' definitions, in numpy ------------------------------------------------

def rot4(a):
    c, s = np.cos(a), np.sin(a)
    m = np.eye(4)
    m[:2, :2] = [[c, -s], [s, c]]
    return m


def shift4(tx, ty):
    m = np.eye(4)
    m[0, 3], m[1, 3] = tx, ty
    return m


def scale4(sx, sy):
    return np.diag([sx, sy, 1.0, 1.0])


def landmarks_to_transform_matrix(landmarks, o):
    """Version 2: the matrix from crop pixels to landmark coordinates."""
    lm = landmarks.reshape(-1, 3).astype(np.float64)
    idx = list(o["subset_idxs"])
    if len(idx) % 2:
        idx.append(idx[-1])
    left, right = lm[o["left_rotation_idx"], :2], lm[o["right_rotation_idx"], :2]
    rotation = o["target_rotation_radians"] - np.arctan2(right[1] - left[1], right[0] - left[0])
    pts = np.c_[lm[idx, :2], np.zeros(len(idx)), np.ones(len(idx))]
    turned = (rot4(rotation) @ pts.T).T
    lo, hi = turned[:, :2].min(0), turned[:, :2].max(0)
    centre = rot4(-rotation) @ np.r_[(lo + hi) / 2, 0.0, 1.0]
    ow, oh = o["output_width"], o["output_height"]
    size = hi - lo
    m = shift4(centre[0], centre[1]) @ rot4(-rotation) @ scale4(o["scale_x"] * size[0] / ow, o["scale_y"] * size[1] / oh) @ shift4(-ow / 2, -oh / 2)
    return m[None]


def transform_tensor_bilinear(fm, matrix, o):
    """Version 2: bilinear samples at M (p + 0.5) - 0.5; zero outside [0, W-1] x [0, H-1].
    Returns the output and how many output pixels fell outside."""
    _, h, w, c = fm.shape
    m = shift4(-0.5, -0.5) @ matrix.reshape(4, 4).astype(np.float64) @ shift4(0.5, 0.5)
    oh, ow = o["output_height"], o["output_width"]
    py, px = np.mgrid[0:oh, 0:ow]
    p = np.stack([px.ravel(), py.ravel(), np.zeros(px.size), np.ones(px.size)])
    tx, ty = (m @ p)[:2]
    inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
    x0, y0 = np.floor(np.where(inside, tx, 0)).astype(int), np.floor(np.where(inside, ty, 0)).astype(int)
    fx, fy = (tx - x0)[:, None], (ty - y0)[:, None]
    padded = np.zeros((h + 1, w + 1, c))
    padded[:h, :w] = fm[0]
    top = (1 - fx) * padded[y0, x0] + fx * padded[y0, x0 + 1]
    bottom = (1 - fx) * padded[y0 + 1, x0] + fx * padded[y0 + 1, x0 + 1]
    out = np.where(inside[:, None], (1 - fy) * top + fy * bottom, 0.0)
    return out.reshape(1, oh, ow, c), int((~inside).sum())


def transform_landmarks(landmarks, matrix):
    """Version 2: (x, y, 0, 1) through the matrix; z (when present) kept."""
    m = matrix.reshape(4, 4).astype(np.float64)
    pts = landmarks[0].astype(np.float64)
    hom = np.c_[pts[:, :2], np.zeros(len(pts)), np.ones(len(pts))]
    out = pts.copy()
    out[:, :2] = (m @ hom.T).T[:, :2]
    return out[None]


# --- the model ---------------------------------------------------------------------

def custom_ops(model_bytes):
    """[(op index, name, version, options dict, input tensors, output tensors)] of subgraph 0."""
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model_bytes, 0))
    ops = []
    for k, op in enumerate(m.subgraphs[0].operators):
        code = m.operatorCodes[op.opcodeIndex]
        name = code.customCode.decode() if code.customCode else None
        if name in CUSTOM:
            opts = bytes(op.customOptions) if op.customOptions is not None and len(op.customOptions) else b""
            ops.append((k, name, code.version, flexbuffers.Loads(opts) if opts else {}, list(op.inputs), list(op.outputs)))
    return m, ops


def cut_model(m, ops, path):
    """The model without `ops`: their outputs become inputs, their inputs outputs."""
    sg = m.subgraphs[0]
    drop = {k for k, *_ in ops}
    sg.operators = [op for k, op in enumerate(sg.operators) if k not in drop]
    new_in = [t for *_, outs in ops for t in outs]
    new_out = [t for *_, ins, _ in ops for t in ins if t not in sg.outputs]
    sg.inputs = list(sg.inputs) + new_in
    sg.outputs = list(sg.outputs) + list(dict.fromkeys(new_out))
    m.signatureDefs = []
    b = flatbuffers.Builder(1 << 20)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))
    return new_in


def ops_only_model(m, ops, path):
    """The custom ops alone: their inputs not made by one of them become the
    model's inputs, all their outputs its outputs. Returns the input tensors."""
    sg = m.subgraphs[0]
    made = {t for *_, outs in ops for t in outs}
    keep = {k for k, *_ in ops}
    sg.operators = [op for k, op in enumerate(sg.operators) if k in keep]
    sg.inputs = list(dict.fromkeys(t for *_, ins, _ in ops for t in ins if t not in made))
    sg.outputs = [t for *_, outs in ops for t in outs]
    m.signatureDefs = []
    b = flatbuffers.Builder(1 << 20)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))
    return list(sg.inputs), list(sg.outputs)


def ferrite_run(binary, model, inputs, work, dump=None, extra=()):
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [binary, "run", str(model), "-o", str(out)] + list(extra)
    for k, x in enumerate(inputs):
        p = work / f"in_{k}.npy"
        np.save(p, x)
        cmd += ["-i", str(p)]
    if dump:
        shutil.rmtree(work / "dump", ignore_errors=True)
        cmd += ["--dump", str(work / "dump"), "--dump-ops", ",".join(map(str, dump))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ferrite run {model.name}: {r.stderr.strip()}")
    outs, k = [], 0
    while (out / f"output_{k}.npy").exists():
        outs.append(np.load(out / f"output_{k}.npy"))
        k += 1
    return outs


def dumped_tensors(work):
    """{tensor index: array} of every dumped op output."""
    index = json.loads((work / "dump" / "index.json").read_text())
    found = {}
    for entry in index["ops"] if isinstance(index, dict) else index:
        for t in entry.get("outputs", []):
            if t.get("file"):
                found[t["tensor"]] = np.load(work / "dump" / t["file"])
    return found


def rel_err(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0)) / max(1.0, float(np.max(np.abs(want), initial=0.0)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ferrite", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--work", help="keep intermediate files here (default: a temporary directory)")
    p.add_argument("--run-arg", action="append", default=[], help="an argument for `ferrite run` of the whole model (backend choice: --run-arg=--backends --run-arg=reference)")
    a = p.parse_args()
    model = pathlib.Path(a.model)
    work = pathlib.Path(a.work) if a.work else pathlib.Path(tempfile.mkdtemp(prefix="mpops-"))
    work.mkdir(parents=True, exist_ok=True)
    failures = []
    m, ops = custom_ops(model.read_bytes())
    if not ops:
        sys.exit(f"{model.name}: no MediaPipe landmark ops")
    face = face_crop()
    noise = np.random.default_rng(7).random(face.shape, dtype=np.float32)
    # The face half out of view at the bottom right: crops near the feature map's border.
    edge = np.roll(face, (88, 88), axis=(1, 2))

    # 1. op by op, on both inputs.
    worst = {n: 0.0 for n in CUSTOM}
    outside = 0
    # Dump the custom ops and the ops producing their inputs.
    producer = {t: k for k, op in enumerate(m.subgraphs[0].operators) for t in op.outputs}
    dump_ops = sorted({k for k, *_ in ops} | {producer[t] for *_, ins, _ in ops for t in ins if t in producer})
    for label, x in (("face", face), ("noise", noise), ("edge", edge)):
        outs = ferrite_run(a.ferrite, model, [x], work, dump=dump_ops, extra=a.run_arg)
        got = dumped_tensors(work)
        for k, name, version, o, ins, outs_t in ops:
            if version != 2:
                failures.append(f"op {k} {name}: version {version}, only 2 is checked")
                continue
            missing = [t for t in ins + outs_t if t not in got]
            if missing:
                # A backend that fuses the producing op away leaves its output unwritten.
                failures.append(f"{label}: op {k} {name}: tensors {missing} were not dumped under {' '.join(a.run_arg) or 'the default backends'}")
                continue
            if name == "Landmarks2TransformMatrix":
                want = landmarks_to_transform_matrix(got[ins[0]], o)
            elif name == "TransformTensorBilinear":
                want, n_out = transform_tensor_bilinear(got[ins[0]], got[ins[1]], o)
                outside += n_out
            else:
                want = transform_landmarks(got[ins[0]], got[ins[1]])
            have = got[outs_t[0]]
            if have.shape != want.shape or np.isnan(have).any():
                failures.append(f"{label}: op {k} {name}: shape {have.shape} vs {want.shape}, or NaN")
                continue
            worst[name] = max(worst[name], rel_err(have, want))
        if label == "face":
            face_outs, face_dump = outs, got
    # The same op instances alone, on inputs chosen to reach the feature map's
    # border: the face's landmarks moved by +-20 pixels of the 48x48 map, random
    # feature maps and points.
    _, again = custom_ops(model.read_bytes())
    ins_t, outs_t = ops_only_model(custom_ops(model.read_bytes())[0], again, work / "ops_only.tflite")
    rng = np.random.default_rng(11)
    makers = {op[4][0]: op[1] for op in ops}
    for shift in (20.0, -20.0):
        feed = []
        for t in ins_t:
            if makers.get(t) == "Landmarks2TransformMatrix":
                x = face_dump[t] + np.array([shift, shift / 2, 0.0], np.float32)
            else:
                x = rng.standard_normal(tuple(m.subgraphs[0].tensors[t].shape)).astype(np.float32) * 3
            feed.append(x)
        res = dict(zip(outs_t, ferrite_run(a.ferrite, work / "ops_only.tflite", feed, work)))
        vals = dict(zip(ins_t, feed)) | res
        for k, name, version, o, ins, outs_k in ops:
            if name == "Landmarks2TransformMatrix":
                want = landmarks_to_transform_matrix(vals[ins[0]], o)
            elif name == "TransformTensorBilinear":
                want, n_out = transform_tensor_bilinear(vals[ins[0]], vals[ins[1]], o)
                outside += n_out
            else:
                want = transform_landmarks(vals[ins[0]], vals[ins[1]])
            worst[name] = max(worst[name], rel_err(vals[outs_k[0]], want))
    for name, e in worst.items():
        n = sum(1 for op in ops if op[1] == name)
        extra = f"; {outside} output pixels sampled outside the feature map" if name == "TransformTensorBilinear" else ""
        print(f"  {name}: {n} instances x 5 inputs, worst error vs numpy {e:.2e}{extra}")
        if e > OP_TOL:
            failures.append(f"{name}: error {e:.2e} > {OP_TOL}")

    # 2. every other op against LiteRT.
    cut = work / "cut.tflite"
    new_in = cut_model(m, ops, cut)
    inputs = [face] + [face_dump[t] for t in new_in]
    it = Interpreter(model_path=str(cut))
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    want = [it.get_tensor(d["index"]) for d in it.get_output_details()]
    got = ferrite_run(a.ferrite, cut, inputs, work)
    e = max(rel_err(g, w) for g, w in zip(got, want)) if len(got) == len(want) else float("inf")
    print(f"  the model's other {len(m.subgraphs[0].operators)} ops vs LiteRT (custom ops cut out, {len(want)} outputs): worst error {e:.2e}")
    if not e <= MODEL_TOL:
        failures.append(f"other ops vs LiteRT: error {e} > {MODEL_TOL}")

    # 3. plausibility on the face crop.
    names = ["mesh", "lips", "left eye", "right eye", "left iris", "right iris"]
    size = face.shape[1]
    for name, o in zip(names, face_outs):
        pts = o.reshape(-1, 3 if name == "mesh" else 2)[:, :2]
        if np.isnan(pts).any() or pts.min() < 0 or pts.max() > size:
            failures.append(f"{name} landmarks outside the {size}x{size} crop: x, y in [{pts.min():.1f}, {pts.max():.1f}]")
    mesh = face_outs[0].reshape(-1, 3)
    flag = float(face_outs[6].ravel()[0])
    print(f"  face crop: {len(mesh)} mesh landmarks in x [{mesh[:, 0].min():.1f}, {mesh[:, 0].max():.1f}], "
          f"y [{mesh[:, 1].min():.1f}, {mesh[:, 1].max():.1f}] of {size}; face flag logit {flag:.2f}; "
          f"NaN anywhere: {any(np.isnan(o).any() for o in face_outs)}")
    if any(np.isnan(o).any() for o in face_outs):
        failures.append("NaN in the outputs")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print(f"{model.name}: {'FAIL' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
