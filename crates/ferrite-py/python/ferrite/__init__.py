"""ferrite: run .tflite and .circle models with LiteRT's Interpreter interface.

    import numpy as np
    import ferrite

    it = ferrite.Interpreter(model_path="model.tflite", num_threads=2)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    it.set_tensor(inp["index"], np.zeros(inp["shape"], inp["dtype"]))
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"])

``ferrite.interpreter`` has the shape of ``tflite_runtime.interpreter`` and
``ai_edge_litert.interpreter``: ``import ferrite.interpreter as tflite`` (or
``import ferrite as tflite``) replaces those imports. For an application that cannot be
edited, ``ferrite.install_as("tflite_runtime")`` makes its ``import tflite_runtime...``
find ferrite.

``ferrite.Trainer`` trains a float32 model on the device with numpy arrays and a
Keras-like ``fit`` (see ``ferrite.trainer``).
"""

import sys

from . import interpreter, trainer
from ._ferrite import __version__
from .interpreter import Delegate, Interpreter, InterpreterWithCustomOps, OpResolverType, SignatureRunner, load_delegate
from .trainer import Trainer

__all__ = [
    "Delegate",
    "Interpreter",
    "InterpreterWithCustomOps",
    "OpResolverType",
    "SignatureRunner",
    "Trainer",
    "__version__",
    "install_as",
    "interpreter",
    "load_delegate",
    "trainer",
]


def install_as(package="tflite_runtime"):
    """Registers ferrite under another package name, so that code importing
    ``<package>.interpreter`` (``tflite_runtime``, ``ai_edge_litert``) gets ferrite's
    ``Interpreter`` without being edited. Call it before that code imports; it replaces
    whatever was imported under that name in this process."""
    if not package.isidentifier():
        raise ValueError(f"not a package name: {package!r}")
    sys.modules[package] = sys.modules[__name__]
    sys.modules[package + ".interpreter"] = interpreter
