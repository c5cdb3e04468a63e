"""On-device training with numpy arrays and a Keras-like ``fit``.

    import numpy as np
    import ferrite

    t = ferrite.Trainer("model.tflite", batch_size=32, loss="cce", optimizer="adam",
                        learning_rate=1e-3, metrics=["accuracy"])
    history = t.fit(x, y, epochs=3, validation_split=0.2)
    print(history["loss"], history["val_accuracy"])
    t.export("trained.tflite")

Semantics follow Keras ``fit(shuffle=False)`` and onert_train: batches in sample
order, the last partial batch dropped; an epoch's ``loss`` is the mean of its steps'
losses (each from the step's forward pass, before its update); with
``validation_split=F`` the first ``floor(N * (1 - F))`` samples train and the full
batches of the rest validate after each epoch, changing nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from ._ferrite import NativeTrainer

ArrayLike = Union[np.ndarray, Sequence[np.ndarray]]

__all__ = ["Trainer"]


class Trainer:
    """Trains a float32 model (``.tflite`` or ``.circle``) on the device.

    ``loss``: ``"mse"`` (mean squared error) or ``"cce"`` (categorical cross-entropy on
    the model's final SOFTMAX). ``loss_reduction``: ``"sum_over_batch_size"`` or
    ``"sum"``. ``optimizer``: ``"sgd"`` (with ``momentum``, ``nesterov``) or ``"adam"``.
    ``num_trainable_ops``: train the last N ops in execution order (-1: all, 0: none).
    ``metrics``: ``["accuracy"]`` adds categorical accuracy to the history.
    The batch size is fixed when the trainer is made: the training step is planned
    for it.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        model_content: bytes | None = None,
        *,
        batch_size: int = 32,
        loss: str = "mse",
        loss_reduction: str = "sum_over_batch_size",
        optimizer: str = "sgd",
        learning_rate: float = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        num_trainable_ops: int = -1,
        metrics: Sequence[str] = (),
        num_threads: int = 1,
    ) -> None:
        for m in metrics:
            if m != "accuracy":
                raise ValueError(f"metric {m!r}: only 'accuracy' is supported")
        self._accuracy = "accuracy" in metrics
        if int(num_trainable_ops) < -1:
            raise ValueError(f"num_trainable_ops {num_trainable_ops}: -1 (all) or a count")
        path = None if model_path is None else os.fspath(model_path)
        self._native = NativeTrainer(
            path,
            model_content,
            int(batch_size),
            loss,
            loss_reduction,
            optimizer,
            float(learning_rate),
            float(momentum),
            bool(nesterov),
            None if int(num_trainable_ops) == -1 else int(num_trainable_ops),
            int(num_threads),
        )
        self.batch_size = int(batch_size)
        self._input_shapes = [tuple(s) for s in self._native.input_shapes()]
        self._expected_shape = tuple(self._native.expected_shape())

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the model inputs for one batch (batch first)."""
        return list(self._input_shapes)

    @property
    def expected_shape(self) -> tuple[int, ...]:
        """Shape of the expected output (labels) of one batch."""
        return self._expected_shape

    @property
    def step_count(self) -> int:
        """Training steps taken (restored from checkpoints)."""
        return int(self._native.step_count())

    @property
    def memory(self) -> dict[str, int]:
        """The training step's memory plan: ``arena_bytes`` and ``arena_lower_bound_bytes``."""
        arena, bound = self._native.memory()
        return {"arena_bytes": int(arena), "arena_lower_bound_bytes": int(bound)}

    def _samples(self, x: ArrayLike, y: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """The inputs and labels as float32 arrays of samples, shapes checked."""
        xs = [x] if isinstance(x, np.ndarray) else list(x)
        if len(xs) != len(self._input_shapes):
            raise ValueError(f"the model has {len(self._input_shapes)} inputs, {len(xs)} arrays given")
        arrays = []
        for i, (a, shape) in enumerate(zip(xs, self._input_shapes)):
            a = np.asarray(a)
            if a.dtype != np.float32:
                raise ValueError(f"input {i} has dtype {a.dtype}, the model takes float32")
            if a.shape[1:] != shape[1:]:
                raise ValueError(f"input {i} has samples of shape {a.shape[1:]}, the model takes {shape[1:]}")
            arrays.append(np.ascontiguousarray(a))
        y = np.asarray(y)
        if y.dtype != np.float32:
            raise ValueError(f"the expected output has dtype {y.dtype}, the model gives float32")
        if y.shape[1:] != self._expected_shape[1:]:
            raise ValueError(f"the expected output has samples of shape {y.shape[1:]}, the model gives {self._expected_shape[1:]}")
        counts = {len(a) for a in arrays} | {len(y)}
        if len(counts) != 1:
            raise ValueError(f"inputs and expected output hold different numbers of samples: {sorted(counts)}")
        return arrays, np.ascontiguousarray(y)

    def _metrics(self, loss: float, acc: float) -> dict[str, float]:
        m = {"loss": float(loss)}
        if self._accuracy:
            m["accuracy"] = float(acc)
        return m

    def train_step(self, x: ArrayLike, y: np.ndarray) -> dict[str, float]:
        """One step on exactly one batch; its loss (and accuracy) before the update."""
        xs, y = self._samples(x, y)
        if len(y) != self.batch_size:
            raise ValueError(f"a step takes one batch of {self.batch_size} samples, {len(y)} given")
        return self._metrics(*self._native.step(xs, y))

    def _batches(self, xs: list[np.ndarray], y: np.ndarray, start: int, stop: int) -> list[tuple[list[np.ndarray], np.ndarray]]:
        b = self.batch_size
        return [([a[i : i + b] for a in xs], y[i : i + b]) for i in range(start, stop - b + 1, b)]

    def evaluate(self, x: ArrayLike, y: np.ndarray) -> dict[str, float]:
        """Mean loss (and accuracy) over the full batches of ``x``, changing nothing."""
        xs, y = self._samples(x, y)
        batches = self._batches(xs, y, 0, len(y))
        if not batches:
            raise ValueError(f"{len(y)} samples make no batch of {self.batch_size}")
        results = [self._native.evaluate(bx, by) for bx, by in batches]
        return self._metrics(float(np.mean([r[0] for r in results])), float(np.mean([r[1] for r in results])))

    def fit(
        self,
        x: ArrayLike,
        y: np.ndarray,
        epochs: int = 1,
        batch_size: int | None = None,
        validation_split: float = 0.0,
        verbose: int = 0,
    ) -> dict[str, list[float]]:
        """Trains for ``epochs`` over ``x``/``y`` (arrays of samples, first axis the
        sample), as Keras' ``fit(shuffle=False)``; returns the history: per epoch
        ``loss`` (and ``accuracy``), and ``val_loss`` (``val_accuracy``) with a
        validation split."""
        if batch_size is not None and int(batch_size) != self.batch_size:
            raise ValueError(f"this trainer was made for batch size {self.batch_size}, not {batch_size}")
        if not 0.0 <= validation_split < 1.0:
            raise ValueError(f"validation_split {validation_split} must be in [0, 1)")
        if epochs < 0:
            raise ValueError(f"epochs {epochs} must not be negative")
        xs, y = self._samples(x, y)
        n = len(y)
        n_train = int(np.floor(n * (1.0 - validation_split)))
        train = self._batches(xs, y, 0, n_train)
        if not train:
            raise ValueError(f"{n_train} training samples make no batch of {self.batch_size}")
        val = self._batches(xs, y, n_train, n) if validation_split > 0 else []
        if validation_split > 0 and not val:
            raise ValueError(f"{n - n_train} validation samples make no batch of {self.batch_size}")
        history: dict[str, list[float]] = {"loss": []}
        if self._accuracy:
            history["accuracy"] = []
        if val:
            history["val_loss"] = []
            if self._accuracy:
                history["val_accuracy"] = []
        for epoch in range(epochs):
            steps = [self._native.step(bx, by) for bx, by in train]
            history["loss"].append(float(np.mean([s[0] for s in steps])))
            if self._accuracy:
                history["accuracy"].append(float(np.mean([s[1] for s in steps])))
            if val:
                checks = [self._native.evaluate(bx, by) for bx, by in val]
                history["val_loss"].append(float(np.mean([c[0] for c in checks])))
                if self._accuracy:
                    history["val_accuracy"].append(float(np.mean([c[1] for c in checks])))
            if verbose:
                shown = ", ".join(f"{k} {v[-1]:.6f}" for k, v in history.items())
                print(f"epoch {epoch + 1}/{epochs}: {shown}")
        return history

    def predict_batch(self) -> np.ndarray:
        """The model's output for the batch of the last step or evaluation."""
        out = np.frombuffer(bytes(self._native.output()), dtype=np.float32)
        return out.reshape(self._expected_shape)

    def trainable_tensors(self) -> list[dict[str, Any]]:
        """The trainable tensors: ``index`` (in the model), ``name`` and ``shape``."""
        return [{"index": i, "name": name, "shape": tuple(shape)} for i, name, shape in self._native.trainable()]

    def get_weights(self) -> list[np.ndarray]:
        """The current values of the trainable tensors, in ``trainable_tensors`` order."""
        out = []
        for i, t in enumerate(self.trainable_tensors()):
            w = np.frombuffer(bytes(self._native.weights(i)), dtype=np.float32)
            out.append(w.reshape(t["shape"]))
        return out

    def export(self, path: str | os.PathLike[str]) -> None:
        """Writes the model with the trained weights (circle when ``path`` ends in ``.circle``)."""
        self._native.export(os.fspath(path))

    def export_bytes(self, circle: bool = False) -> bytes:
        """The model file with the trained weights, as bytes."""
        return bytes(self._native.export_bytes(circle))

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Saves weights, optimizer state and step count."""
        self._native.save_checkpoint(os.fspath(path))

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restores a checkpoint of the same model and configuration: training goes on
        bit-identically."""
        self._native.load_checkpoint(os.fspath(path))
