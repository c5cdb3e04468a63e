#!/usr/bin/env python3
"""ferrite.Trainer from Python: fit's history against the same steps taken one by
one, validation_split's semantics, checkpoints, export (run in LiteRT and in
ferrite), and the error cases. On the demo model (a float CNN classifier:
CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D, FULLY_CONNECTED, SOFTMAX).

  python_train_test.py MODEL.tflite
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter as LiteRT

import ferrite


def data(n, shape, classes, seed):
    """Generated samples whose class is learnable: the class sets the mean of the image."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    x = rng.normal(0.0, 0.3, (n, *shape)).astype(np.float32)
    x += (labels.astype(np.float32) / classes - 0.5).reshape(n, *([1] * len(shape)))
    y = np.eye(classes, dtype=np.float32)[labels]
    return x, y


def expect_error(what, f):
    try:
        f()
    except ValueError as e:
        print(f"  {what}: ValueError: {e}")
        return
    raise AssertionError(f"{what}: no error")


def main():
    model = Path(sys.argv[1])
    kw = dict(batch_size=8, loss="cce", optimizer="sgd", learning_rate=0.1, metrics=["accuracy"])
    t = ferrite.Trainer(model, **kw)
    sample = t.input_shapes[0][1:]
    classes = t.expected_shape[1]
    x, y = data(80, sample, classes, 1)
    print(f"trainer: batch {t.batch_size}, inputs {t.input_shapes}, expected {t.expected_shape}, memory {t.memory}")
    assert t.input_shapes[0][0] == 8 and len(t.trainable_tensors()) == 6, t.trainable_tensors()

    # fit: 80 samples, validation_split 0.25 -> 60 train (7 full batches of 8, 4
    # dropped), 20 validate (2 full batches, 4 dropped).
    h = t.fit(x, y, epochs=4, batch_size=8, validation_split=0.25)
    print("history:", {k: [round(v, 5) for v in vs] for k, vs in h.items()})
    assert set(h) == {"loss", "accuracy", "val_loss", "val_accuracy"} and all(len(v) == 4 for v in h.values())
    assert h["loss"][-1] < h["loss"][0], "the loss falls"
    assert t.step_count == 28

    # The same by hand: the steps in file order, the epoch loss their mean, the
    # validation the mean over the validation batches (bit for bit).
    u = ferrite.Trainer(model, **kw)
    for epoch in range(4):
        losses = [u.train_step(x[i : i + 8], y[i : i + 8])["loss"] for i in range(0, 56, 8)]
        assert np.float64(np.mean(losses)) == h["loss"][epoch], (epoch, np.mean(losses), h["loss"][epoch])
        v = u.evaluate(x[60:76], y[60:76])
        assert v["loss"] == h["val_loss"][epoch] and v["accuracy"] == h["val_accuracy"][epoch]
    for a, b in zip(t.get_weights(), u.get_weights()):
        assert np.array_equal(a, b)
    assert u.evaluate(x[60:76], y[60:76]) == t.evaluate(x[60:76], y[60:76]), "evaluate changes nothing"
    print("fit = the same steps by hand, bit for bit")

    with tempfile.TemporaryDirectory() as d:
        # Checkpoint and resume: the same losses as not stopping.
        ck = Path(d) / "ckpt.bin"
        t.save_checkpoint(ck)
        go_on = t.fit(x, y, epochs=2, validation_split=0.25)
        r = ferrite.Trainer(model, **kw)
        r.load_checkpoint(ck)
        assert r.step_count == 28
        resumed = r.fit(x, y, epochs=2, validation_split=0.25)
        assert go_on == resumed, (go_on, resumed)
        print("checkpoint: resumed training is bit-identical")

        # Export: LiteRT and ferrite's Interpreter run the exported model and agree
        # with the trainer's own forward pass.
        out = Path(d) / "trained.tflite"
        t.export(out)
        assert out.read_bytes() == t.export_bytes()
        t.evaluate(x[:8], y[:8])
        mine = t.predict_batch()
        for name, make in [("LiteRT", lambda: LiteRT(model_path=str(out))), ("ferrite", lambda: ferrite.Interpreter(model_path=str(out)))]:
            it = make()
            it.allocate_tensors()
            inp, outp = it.get_input_details()[0], it.get_output_details()[0]
            for i in range(8):
                it.set_tensor(inp["index"], x[i : i + 1])
                it.invoke()
                got = it.get_tensor(outp["index"])[0]
                assert np.allclose(got, mine[i], atol=1e-5), (name, i, got, mine[i])
            print(f"export: {name} runs the trained model, outputs within 1e-5 of the trainer's")
        circ = Path(d) / "trained.circle"
        t.export(circ)
        it = ferrite.Interpreter(model_path=str(circ))
        it.allocate_tensors()
        print("export: the .circle file loads back into ferrite")

    # num_trainable_ops=2: only the FULLY_CONNECTED head (and the SOFTMAX) train;
    # the other weights come back bit-identical in the export.
    h2 = ferrite.Trainer(model, num_trainable_ops=2, **kw)
    assert [len(t["shape"]) for t in h2.trainable_tensors()] == [2, 1], h2.trainable_tensors()
    before = ferrite.Interpreter(model_path=str(model))
    h2.fit(x, y, epochs=1)
    after = ferrite.Interpreter(model_content=h2.export_bytes())
    before.allocate_tensors()
    after.allocate_tensors()
    for d in before.get_tensor_details():
        if d["name"].startswith(("conv1/", "dw/")):
            assert np.array_equal(before.get_tensor(d["index"]), after.get_tensor(d["index"])), d["name"]
        if d["name"] == "fc/w":
            assert not np.array_equal(before.get_tensor(d["index"]), after.get_tensor(d["index"]))
    print("num_trainable_ops=2: the frozen weights are exported unchanged, the head trained")

    # Errors: clear ValueErrors, nothing trained.
    steps = t.step_count
    expect_error("mismatched sample counts", lambda: t.fit(x, y[:-1]))
    expect_error("float64 inputs", lambda: t.fit(x.astype(np.float64), y))
    expect_error("wrong sample shape", lambda: t.fit(x[:, :-1], y))
    expect_error("batch larger than the data", lambda: t.fit(x[:5], y[:5]))
    expect_error("another batch size", lambda: t.fit(x, y, batch_size=4))
    expect_error("no validation batch", lambda: t.fit(x[:20], y[:20], validation_split=0.1))
    expect_error("unknown loss", lambda: ferrite.Trainer(model, loss="hinge"))
    expect_error("unknown metric", lambda: ferrite.Trainer(model, metrics=["auc"]))
    expect_error("num_trainable_ops below -1", lambda: ferrite.Trainer(model, num_trainable_ops=-2))
    assert t.step_count == steps
    print("python trainer: ok")


if __name__ == "__main__":
    main()
