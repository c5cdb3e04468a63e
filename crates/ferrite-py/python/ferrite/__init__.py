"""ferrite: run .tflite and .circle models with LiteRT's Interpreter interface.

    import numpy as np
    import ferrite

    it = ferrite.Interpreter(model_path="model.tflite", num_threads=2)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    it.set_tensor(inp["index"], np.zeros(inp["shape"], inp["dtype"]))
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"])
"""

import numpy as np

from ._ferrite import NativeSession

__all__ = ["Interpreter", "SignatureRunner"]

_DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
}


def _detail(d):
    name, index, dtype, shape, signature, scales, zero_points, axis = d
    scales = np.array(scales, dtype=np.float32)
    zero_points = np.array(zero_points, dtype=np.int32)
    # LiteRT's per-tensor summary: the single (scale, zero point), or zeros.
    quant = (float(scales[0]), int(zero_points[0])) if len(scales) == 1 else (0.0, 0)
    return {
        "name": name,
        "index": index,
        "shape": np.array(shape, dtype=np.int32),
        "shape_signature": np.array(signature, dtype=np.int32),
        "dtype": _DTYPES.get(dtype, np.uint8),
        "quantization": quant,
        "quantization_parameters": {"scales": scales, "zero_points": zero_points, "quantized_dimension": axis},
        "sparsity_parameters": {},
    }


class Interpreter:
    """A ferrite session behind the LiteRT / TFLite ``Interpreter`` methods.

    Tensors are addressed by the ``index`` of their details, as in LiteRT. Errors
    from the runtime are raised as ``ValueError`` (bad arguments) or
    ``RuntimeError`` with ferrite's message; errors about part of the model also
    carry ``subgraph``, ``op_index``, ``op_name`` and ``tensor_index`` attributes.
    """

    def __init__(self, model_path=None, model_content=None, num_threads=None, **_ignored):
        if (model_path is None) == (model_content is None):
            raise ValueError("give exactly one of model_path and model_content")
        self._path = None if model_path is None else str(model_path)
        self._content = None if model_content is None else bytes(model_content)
        self._threads = int(num_threads or 1)
        self._s = self._new_session()
        self._prepared = False
        self._refresh()

    def _new_session(self):
        return NativeSession(path=self._path, content=self._content, threads=self._threads)

    def _refresh(self):
        self._inputs = [_detail(d) for d in self._s.inputs()]
        self._in_pos = {d["index"]: i for i, d in enumerate(self._inputs)}
        # Output tensor indices never change; positions looked up once.
        self._out_pos = {d[1]: i for i, d in enumerate(self._s.outputs())}

    def _outputs(self):
        return [_detail(d) for d in self._s.outputs()]

    def allocate_tensors(self):
        """Prepares the session (shapes, kernels, memory plan)."""
        self._s.prepare()
        self._prepared = True
        self._refresh()

    def get_input_details(self):
        return [dict(d) for d in self._inputs]

    def get_output_details(self):
        return self._outputs()

    def resize_tensor_input(self, input_index, tensor_size, strict=False):
        """Gives an input a new shape; call allocate_tensors() (or just invoke()) after."""
        if input_index not in self._in_pos:
            raise ValueError(f"tensor {input_index} is not an input")
        self._s.resize_input(self._in_pos[input_index], [int(v) for v in tensor_size])
        self._refresh()

    def set_tensor(self, tensor_index, value):
        if tensor_index not in self._in_pos:
            raise ValueError(f"tensor {tensor_index} is not an input")
        d = self._inputs[self._in_pos[tensor_index]]
        arr = np.ascontiguousarray(value, dtype=d["dtype"])
        if tuple(arr.shape) != tuple(d["shape"]):
            want = [int(v) for v in d["shape"]]
            raise ValueError(f"cannot set tensor: got shape {list(arr.shape)} for input {d['name']!r} of shape {want}")
        # Handed over as raw bytes (a view, not a copy); the session copies them once.
        self._s.set_input(self._in_pos[tensor_index], arr.reshape(-1).view(np.uint8))

    def invoke(self):
        if not self._prepared:
            self.allocate_tensors()
        self._s.run()

    def get_tensor(self, tensor_index):
        """An output of the last run, as a numpy array over its bytes."""
        if tensor_index not in self._out_pos:
            raise ValueError(f"tensor {tensor_index} is not an output of this interpreter")
        dtype, shape, data = self._s.output(self._out_pos[tensor_index])
        return np.frombuffer(data, dtype=_DTYPES.get(dtype, np.uint8)).reshape(shape)

    def tensor(self, tensor_index):
        """A callable returning the tensor's current value, as in LiteRT."""
        return lambda: self.get_tensor(tensor_index)

    def get_signature_list(self):
        out = {}
        for key in self._s.signatures():
            s = self._new_session()
            s.select_signature(key)
            out[key] = {"inputs": [d[0] for d in s.inputs()], "outputs": [d[0] for d in s.outputs()]}
        return out

    def get_signature_runner(self, signature_key=None):
        keys = self._s.signatures()
        if signature_key is None:
            if len(keys) != 1:
                raise ValueError(f"the model has {len(keys)} signatures; name one of {keys}")
            signature_key = keys[0]
        return SignatureRunner(self, signature_key)


class SignatureRunner:
    """Runs one signature: ``runner(x=array, ...)`` returns ``{output_name: array}``."""

    def __init__(self, interpreter, key):
        self._s = interpreter._new_session()
        self._s.select_signature(key)
        self._inputs = [_detail(d) for d in self._s.inputs()]
        self._prepared = False

    def get_input_details(self):
        return {d["name"]: d for d in self._inputs}

    def get_output_details(self):
        return {d["name"]: d for d in (_detail(x) for x in self._s.outputs())}

    def __call__(self, **inputs):
        names = [d["name"] for d in self._inputs]
        if sorted(inputs) != sorted(names):
            raise ValueError(f"signature inputs are {names}, got {sorted(inputs)}")
        for pos, d in enumerate(self._inputs):
            arr = np.ascontiguousarray(inputs[d["name"]], dtype=d["dtype"])
            if tuple(arr.shape) != tuple(d["shape"]):
                self._s.resize_input(pos, list(arr.shape))
                self._prepared = False
                self._inputs = [_detail(x) for x in self._s.inputs()]
        if not self._prepared:
            self._s.prepare()
            self._prepared = True
        for pos, d in enumerate(self._inputs):
            arr = np.ascontiguousarray(inputs[d["name"]], dtype=d["dtype"])
            self._s.set_input(pos, arr.reshape(-1).view(np.uint8))
        self._s.run()
        out = {}
        for pos, d in enumerate(self._s.outputs()):
            dtype, shape, data = self._s.output(pos)
            out[d[0]] = np.frombuffer(data, dtype=_DTYPES.get(dtype, np.uint8)).reshape(shape)
        return out
