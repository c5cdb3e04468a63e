import os
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

ArrayLike = Union[np.ndarray, Sequence[np.ndarray]]

__all__ = ["Trainer"]

class Trainer:
    batch_size: int
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
    ) -> None: ...
    @property
    def input_shapes(self) -> list[tuple[int, ...]]: ...
    @property
    def expected_shape(self) -> tuple[int, ...]: ...
    @property
    def step_count(self) -> int: ...
    @property
    def memory(self) -> dict[str, int]: ...
    def train_step(self, x: ArrayLike, y: np.ndarray) -> dict[str, float]: ...
    def evaluate(self, x: ArrayLike, y: np.ndarray) -> dict[str, float]: ...
    def fit(
        self,
        x: ArrayLike,
        y: np.ndarray,
        epochs: int = 1,
        batch_size: int | None = None,
        validation_split: float = 0.0,
        verbose: int = 0,
    ) -> dict[str, list[float]]: ...
    def predict_batch(self) -> np.ndarray: ...
    def trainable_tensors(self) -> list[dict[str, Any]]: ...
    def get_weights(self) -> list[np.ndarray]: ...
    def export(self, path: str | os.PathLike[str]) -> None: ...
    def export_bytes(self, circle: bool = False) -> bytes: ...
    def save_checkpoint(self, path: str | os.PathLike[str]) -> None: ...
    def load_checkpoint(self, path: str | os.PathLike[str]) -> None: ...
