"""LiteRT's ``Interpreter`` on ferrite, at the path ``tflite_runtime.interpreter`` has.

``import ferrite.interpreter as tflite`` replaces ``import tflite_runtime.interpreter as
tflite`` (or ``ai_edge_litert.interpreter``) in an application; the classes, methods,
argument names and exception types are LiteRT's. Differences left are listed in
docs/python.md (tools/interpreter_probe.py checks that list against LiteRT).

Tensors are addressed by index in the interpreter's subgraph, as in LiteRT. The native
session (``ferrite._ferrite.NativeSession``) holds the memory; views from ``tensor()``
are counted there, and ``allocate_tensors``, ``resize_tensor_input`` and ``invoke``
raise ``RuntimeError`` while one is alive (as LiteRT does), so a view never outlives
the memory it shows.
"""

import enum
import operator
import os

import numpy as np

from ._ferrite import NativeSession

__all__ = [
    "Delegate",
    "Interpreter",
    "InterpreterWithCustomOps",
    "OpInfo",
    "OpResolverType",
    "OpTensor",
    "SignatureRunner",
    "load_delegate",
]

# ferrite's dtype names -> the numpy types LiteRT reports in details.
_NP_TYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "float64": np.float64,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
    "int64": np.int64,
    "uint64": np.uint64,
    "bool": np.bool_,
    "complex64": np.complex64,
    "complex128": np.complex128,
    "string": np.bytes_,
    # Handles LiteRT cannot show either: details say object, values are None.
    "resource": np.object_,
    "variant": np.object_,
    "int4": np.int8,
    "uint4": np.uint8,
    "ggml": np.uint8,
}

_SAFETY = """There is at least 1 reference to internal data
      in the interpreter in the form of a numpy array or slice. Be sure to
      only hold the function returned from tensor() if you are using raw
      data access."""


def _type_name(dtype):
    """LiteRT's spelling of a type in messages (FLOAT32, INT8, STRING, ...)."""
    dtype = np.dtype(dtype)
    return {"S": "STRING", "O": "OBJECT"}.get(dtype.kind, dtype.name.upper())


class OpResolverType(enum.Enum):
    """Which kernels run the model, as LiteRT names the choice.

    ``AUTO``, ``BUILTIN`` and ``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` run ferrite's
    optimized CPU kernels (there are no delegates to leave out); ``BUILTIN_REF`` runs
    ferrite's reference backend, naive kernels written from each op's definition, as
    LiteRT's reference kernels are.
    """

    AUTO = 0
    BUILTIN = 1
    BUILTIN_REF = 2
    BUILTIN_WITHOUT_DEFAULT_DELEGATES = 3


class Delegate:
    """LiteRT's external delegate wrapper. ferrite runs models on its own backends and
    cannot load TFLite delegates: constructing one raises ``ValueError``, which is what
    applications already handle when a delegate library is missing."""

    def __init__(self, library, options=None):
        del options
        raise ValueError(f"Failed to load delegate from {library}\nferrite cannot load TensorFlow Lite delegates")


def load_delegate(library, options=None):
    """Raises ``ValueError`` (see :class:`Delegate`), so callers fall back to the CPU."""
    return Delegate(library, options)


def _detail(raw, index):
    name, dtype, shape, signature, scales, zero_points, axis, sparsity = raw
    scales = np.array(scales, dtype=np.float32)
    zero_points = np.array(zero_points, dtype=np.int32)
    # LiteRT's per-tensor summary: the single (scale, zero point), or zeros.
    quant = (float(scales[0]), int(zero_points[0])) if len(scales) == 1 else (0.0, 0)
    # A signature without unknown dimensions is the shape (LiteRT reports the current
    # dims where the file stores no signature, which it does for static tensors).
    if -1 not in signature:
        signature = shape
    sparse = {}
    if sparsity is not None:
        order, block_map, dims = sparsity
        sparse["traversal_order"] = np.array(order, dtype=np.int32)
        if block_map:
            sparse["block_map"] = np.array(block_map, dtype=np.int32)
        sparse["dim_metadata"] = [
            {"format": 0, "dense_size": size}
            if fmt == 0
            else {"format": 1, "array_segments": np.array(seg, dtype=np.int32), "array_indices": np.array(idx, dtype=np.int32)}
            for fmt, size, seg, idx in dims
        ]
    return {
        "name": name,
        "index": index,
        "shape": np.array(shape, dtype=np.int32),
        "shape_signature": np.array(signature, dtype=np.int32),
        "dtype": _NP_TYPES.get(dtype, np.uint8),
        "quantization": quant,
        "quantization_parameters": {"scales": scales, "zero_points": zero_points, "quantized_dimension": axis, "block_size": 0},
        "sparsity_parameters": sparse,
    }


def _copy_detail(d):
    """A fresh detail dict (callers may edit what they get), cheaper than deepcopy."""
    q = d["quantization_parameters"]
    out = dict(d)
    out["shape"] = d["shape"].copy()
    out["shape_signature"] = d["shape_signature"].copy()
    out["quantization_parameters"] = {
        "scales": q["scales"].copy(),
        "zero_points": q["zero_points"].copy(),
        "quantized_dimension": q["quantized_dimension"],
        "block_size": q["block_size"],
    }
    if d["sparsity_parameters"]:
        out["sparsity_parameters"] = dict(d["sparsity_parameters"])
    else:
        out["sparsity_parameters"] = {}
    return out


def _strings(data, shape):
    """A TFLite string tensor's bytes (count, offsets, characters) as LiteRT returns
    them: an object array of ``bytes`` (a fixed-width 'S' array would drop trailing NULs)."""
    raw = bytes(data)
    n = int.from_bytes(raw[:4], "little", signed=True) if len(raw) >= 4 else 0
    offsets = np.frombuffer(raw, "<i4", count=n + 1, offset=4).tolist() if n > 0 else []
    out = np.empty(n, dtype=object)
    for i in range(n):
        out[i] = raw[offsets[i] : offsets[i + 1]]
    return out.reshape(shape)


def _string_buffer(arr):
    """An 'S', 'U' or object array as a TFLite string buffer (int32 count, int32 offsets,
    bytes), row-major; ``str`` items are encoded UTF-8, as LiteRT does. The native
    session validates the buffer again."""
    items = [x.encode() if isinstance(x, str) else x for x in arr.ravel().tolist()]
    if not all(isinstance(x, bytes) for x in items):
        # LiteRT's message for an item that is neither bytes nor str.
        raise ValueError("PyBytes_AsStringAndSize() failed.")
    head = 4 * (len(items) + 2)
    offsets = np.cumsum([head] + [len(x) for x in items], dtype=np.int64)
    if offsets[-1] >= 2**31:
        raise ValueError("Cannot set tensor: strings exceed 2 GiB")
    return np.array([len(items)], "<i4").tobytes() + offsets.astype("<i4").tobytes() + b"".join(items)


def _from_bytes(data, dtype, shape):
    """A tensor's bytes as LiteRT returns a tensor: an array, a numpy scalar for a scalar."""
    if dtype.kind == "S":
        return _strings(data, shape)
    if dtype.kind == "O":
        return np.full(shape, None, dtype=object)
    out = np.frombuffer(data, dtype).reshape(shape).copy()
    return out if shape else out[()]


class _Graph:
    """One native session and what the Python side caches about it: tensor details
    (rebuilt only when shapes may have changed) and the LiteRT-visible state."""

    __slots__ = ("s", "sg", "n", "inputs", "outputs", "in_pos", "shapes", "ready", "dynamic", "_details", "_meta", "_saved")

    def __init__(self, native):
        self.s = native
        self.sg = native.subgraph()
        self.n = native.num_tensors(self.sg)
        self.inputs, self.outputs = native.io()
        self.in_pos = {t: k for k, t in enumerate(self.inputs)}
        # The inputs' shapes, as the last resize left them.
        self.shapes = [tuple(native.describe(self.sg, t)[2]) for t in self.inputs]
        # allocate_tensors ran and no resize changed a shape since (LiteRT's invokable).
        self.ready = False
        self.dynamic = False
        # tensor -> detail dict, and tensor -> `meta` (dtype, shape, ...) for the checks of
        # set_tensor and get_tensor, filled as tensors are asked for.
        self._details = {}
        self._meta = {}
        # Input shapes -> those two dicts, for a model whose shapes all follow from its
        # input shapes: switching back to shapes seen before rebuilds nothing.
        self._saved = {}

    def changed(self):
        """Shapes may have changed: take the details of the current input shapes."""
        if self.ready and not self.dynamic:
            key = tuple(self.shapes)
            saved = self._saved.get(key)
            if saved is None:
                if len(self._saved) >= 8:
                    self._saved.clear()
                saved = self._saved[key] = ({}, {})
            self._details, self._meta = saved
        else:
            self._details, self._meta = {}, {}

    def index(self, tensor_index):
        t = operator.index(tensor_index)
        if not 0 <= t < self.n:
            raise ValueError(f"Invalid tensor index {t} exceeds max tensor index {self.n}")
        return t

    def detail(self, t):
        d = self._details.get(t)
        if d is None:
            d = self._details[t] = _detail(self.s.describe(self.sg, t), t)
        return d

    def meta(self, t):
        """(numpy dtype, shape, name, whether values are plain numbers) of tensor t."""
        m = self._meta.get(t)
        if m is None:
            d = self.detail(t)
            dtype = np.dtype(d["dtype"])
            m = self._meta[t] = (dtype, tuple(int(v) for v in d["shape"]), d["name"], dtype.kind not in "SO")
        return m

    def allocate(self):
        if self.ready:
            return
        self.s.allocate()
        self.ready = True
        self.dynamic = self.s.dynamic_shapes()
        self.changed()

    def resize(self, t, dims, strict):
        k = self.in_pos.get(t)
        if k is None:
            if not 0 <= t < self.n:
                raise RuntimeError(f"tensor_index < context_.tensors_size && tensor_index >= 0 was not true (tensor {t}, {self.n} tensors)")
            raise ValueError(f"tensor {t} is not an input: ferrite resizes inputs only (other shapes follow from them)")
        # The per-frame pattern (resize to the current shape, then allocate) stays in
        # Python: a same-shape resize passes any strict check and changes nothing.
        dims = tuple(dims)
        if dims == self.shapes[k]:
            return
        changed = self.s.resize(t, list(dims), strict)
        self.shapes[k] = dims
        if changed:
            self.ready = False
            self.changed()

    def set(self, t, value):
        dtype, shape, name, _ = self.meta(t)
        arr = value if type(value) is np.ndarray else np.asarray(value)
        # A STRING tensor takes bytes ('S', any width), text ('U') and object arrays.
        if arr.dtype != dtype and not (dtype.kind == "S" and arr.dtype.kind in "SUO"):
            raise ValueError(
                f"Cannot set tensor: Got value of type {_type_name(arr.dtype)} but expected type {_type_name(dtype)} for input {t}, name: {name} "
            )
        if arr.shape != shape:
            if arr.ndim != len(shape):
                raise ValueError(f"Cannot set tensor: Dimension mismatch. Got {arr.ndim} but expected {len(shape)} for input {t}.")
            i = next(i for i, (a, b) in enumerate(zip(arr.shape, shape)) if a != b)
            raise ValueError(f"Cannot set tensor: Dimension mismatch. Got {arr.shape[i]} but expected {shape[i]} for dimension {i} of input {t}.")
        if dtype.kind == "S" and t in self.in_pos:
            self.s.set_strings(self.in_pos[t], _string_buffer(arr))
            return
        if dtype.kind in "SO":
            raise ValueError(f"Cannot set tensor: ferrite does not set {_type_name(dtype)} tensors other than inputs")
        try:
            self.s.set(t, arr)
        except (BufferError, ValueError):
            # numpy exports only one contiguous block; a transposed or sliced array is
            # copied into one (checked here, after the fact, to keep the common call short).
            if arr.flags.c_contiguous:
                raise
            self.s.set(t, np.ascontiguousarray(arr))

    def get(self, t):
        dtype, shape, _, _ = self.meta(t)
        if dtype.kind == "O":
            return np.full(shape, None, dtype=object)
        if dtype.kind != "S":
            out = np.empty(shape, dtype)
            if self.s.read_into(t, out):
                # A scalar comes back as a numpy scalar, as LiteRT returns it.
                return out if shape else out[()]
        # Strings, and a sparse constant (its stored values, in one flat dimension).
        shape, data = self.s.get(t)
        return _from_bytes(data, dtype, shape)

    def view(self, t):
        dtype = self.meta(t)[0]
        if dtype.kind in "SO":
            raise ValueError(f"tensor {t}: ferrite gives no view of {_type_name(dtype)} tensors")
        shape, buf = self.s.view(t)
        return np.frombuffer(buf, dtype).reshape(shape)

    def run(self):
        if not self.ready:
            raise RuntimeError("Invoke called on model that is not ready.")
        self.s.run()
        if self.dynamic:
            # Shapes computed at run time: details follow the last run.
            self.changed()

    def run_with_callbacks(self, before, after):
        if not self.ready:
            raise RuntimeError("Invoke called on model that is not ready.")
        completed = self.s.run_with_callbacks(before, after)
        if self.dynamic:
            self.changed()
        return completed


class OpTensor:
    """One input or output of an op, as an ``invoke_with_callbacks`` callback sees it.

    ``data`` is a read-only numpy copy of the tensor's value (for a sparse constant, its
    stored values in one flat dimension), or None when ``state`` says
    there is none: ``"pending"`` (an output before its op ran), ``"fused"`` (never
    materialised: computed inside a fused neighbouring kernel), ``"absent"`` (no storage
    at this point). ``"ready"`` means ``data`` holds the value.
    """

    __slots__ = ("index", "name", "dtype", "shape", "quantization_parameters", "state", "data")

    def __init__(self, raw):
        index, name, dtype, shape, scales, zero_points, axis, state, data = raw
        self.index = index
        self.name = name
        self.dtype = np.dtype(_NP_TYPES.get(dtype, np.uint8))
        self.shape = tuple(shape)
        self.quantization_parameters = {
            "scales": np.array(scales, dtype=np.float32),
            "zero_points": np.array(zero_points, dtype=np.int32),
            "quantized_dimension": axis,
        }
        self.state = state
        if data is None:
            self.data = None
        elif self.dtype.kind in "SO":
            self.data = _from_bytes(data, self.dtype, self.shape)
        else:
            self.data = np.frombuffer(data, self.dtype)
            # A sparse constant's stored values stay flat, as ``get_tensor`` returns them.
            if self.data.size == int(np.prod(self.shape)):
                self.data = self.data.reshape(self.shape)
        if self.data is not None:
            self.data.setflags(write=False)

    def __repr__(self):
        return f"OpTensor(index={self.index}, name={self.name!r}, dtype={self.dtype}, shape={self.shape}, state={self.state!r})"


class OpInfo:
    """One op of the interpreter's subgraph, as an ``invoke_with_callbacks`` callback sees
    it: ``index``, ``op_name`` (``"CONV_2D"``), ``runs_on`` (a backend's name, ``"cpu"``,
    or how it runs: ``"fused"``, ``"folded"``, ``"alias"``, ``"executor"``, ...),
    ``fused_into`` (the op whose kernel computes it, or None), ``inputs`` and ``outputs``
    (lists of :class:`OpTensor`; omitted optional inputs are left out). Ops inside
    IF/WHILE/CALL_ONCE bodies are reported at each execution: ``subgraph`` is then the
    body's, and ``calls`` lists the control-flow ops running it, outermost first, as
    ``(subgraph, op index, callee subgraph, WHILE pass or None)``; empty for the
    interpreter's own ops."""

    __slots__ = ("subgraph", "index", "op_name", "runs_on", "fused_into", "inputs", "outputs", "calls")

    def __init__(self, raw):
        self.subgraph, self.index, self.op_name, self.runs_on, fused_into, inputs, outputs, calls = raw
        self.calls = [tuple(c) for c in calls]
        self.fused_into = None if fused_into < 0 else fused_into
        self.inputs = [OpTensor(t) for t in inputs]
        self.outputs = [OpTensor(t) for t in outputs]

    def __repr__(self):
        return f"OpInfo(index={self.index}, op_name={self.op_name!r}, runs_on={self.runs_on!r}, fused_into={self.fused_into})"


def _flow(result, before):
    """A callback's answer as the native session's number: 0 go on, 1 skip, 2 stop."""
    if result is None or result is True or result == "continue":
        return 0
    if result == "skip" or (result is False and before):
        return 1
    if result == "stop" or result is False:
        return 2
    raise ValueError(f"an op callback returns None, True, False, 'continue', 'skip' or 'stop', not {result!r}")


class Interpreter:
    """Runs a .tflite (or .circle) model with LiteRT's ``Interpreter`` interface.

    ``num_threads`` defaults to 1; -1 uses every core. ``experimental_preserve_all_tensors``
    gives every intermediate tensor its own memory, readable with ``get_tensor`` after
    ``invoke``. ``experimental_op_resolver_type=OpResolverType.BUILTIN_REF`` runs ferrite's
    reference kernels. ``backends=["gpu", "cpu"]`` (ferrite's own) orders the backends ops
    try, as ``FERRITE_BACKENDS`` does; ``gpu_precision="fp16"`` stores the GPU backend's
    tensors and weights as float16 (adapters with ``SHADER_F16``; default ``"fp32"``), as
    ``FERRITE_GPU_PRECISION`` does. The other ``experimental_*`` switches concern LiteRT's delegates
    and are accepted and ignored. Runtime errors raise ``ValueError`` / ``RuntimeError``
    as LiteRT does, with ferrite's message; errors about part of the model also carry
    ``subgraph``, ``op_index``, ``op_name`` and ``tensor_index`` attributes.

    Sharing weights (ferrite only): ``Interpreter(share_weights_with=other)`` is a new,
    independent interpreter of ``other``'s model (its own inputs, outputs, threads and
    memory plan) whose prepared weights are shared with ``other``; with
    ``share_weights=True`` and a ``model_path``, interpreters of the same file in this
    process share the load and the weights the same way. Shared weights are freed with
    the last interpreter using them. Interpreters may run at the same time on
    different threads.

    Sharing an arena (ferrite only): with ``share_arena=True`` the interpreter borrows the
    memory of its intermediate tensors, for each ``invoke``, from a pool shared by the
    interpreters of its model that set it too (combine it with ``share_weights_with`` or
    ``share_weights``): interpreters that run one after another use one arena, and
    interpreters running at the same time each get one. Inputs, outputs and state stay
    the interpreter's; ``get_tensor`` of an intermediate after ``invoke`` raises
    ``ValueError`` unless ``experimental_preserve_all_tensors`` is set.
    """

    def __init__(
        self,
        model_path=None,
        model_content=None,
        experimental_delegates=None,
        num_threads=None,
        experimental_op_resolver_type=OpResolverType.AUTO,
        experimental_preserve_all_tensors=False,
        experimental_disable_delegate_clustering=False,
        experimental_default_delegate_latest_features=False,
        experimental_compress_quantization_zero_points=False,
        experimental_disable_delegate_node_fusion=False,
        experimental_force_delegate_node_profiling=False,
        share_weights_with=None,
        share_weights=False,
        backends=None,
        share_arena=False,
        gpu_precision=None,
    ):
        del experimental_disable_delegate_clustering, experimental_default_delegate_latest_features
        del experimental_disable_delegate_node_fusion, experimental_force_delegate_node_profiling
        self._experimental_compress_quantization_zero_points = experimental_compress_quantization_zero_points
        # LiteRT's enum or ferrite's: matched by member name.
        resolver = getattr(experimental_op_resolver_type, "name", None)
        if resolver not in OpResolverType.__members__:
            raise ValueError(f"Unrecognized passed in op resolver type: {experimental_op_resolver_type}")
        if num_threads is not None:
            if not isinstance(num_threads, int):
                raise ValueError("type of num_threads should be int")
            if num_threads < 1 and num_threads != -1:
                raise ValueError("num_threads should >= 1 (or -1 for all cores)")
        if experimental_delegates:
            raise ValueError("ferrite cannot apply TensorFlow Lite delegates; leave experimental_delegates empty")
        options = {
            "threads": int(num_threads or 1),
            "preserve_all": bool(experimental_preserve_all_tensors),
            "reference": resolver == "BUILTIN_REF",
            "share_arena": bool(share_arena),
        }
        if backends is not None:
            if isinstance(backends, str) or not all(isinstance(b, str) for b in backends):
                raise ValueError("backends is a list of backend names, e.g. ['gpu', 'cpu']")
            options["backends"] = list(backends)
        if gpu_precision is not None:
            if gpu_precision not in ("fp32", "fp16"):
                raise ValueError(f"gpu_precision is 'fp32' or 'fp16', not {gpu_precision!r}")
            options["gpu_precision"] = gpu_precision
        if share_weights_with is not None:
            if model_path or model_content:
                raise ValueError("give `share_weights_with` alone, without `model_path` or `model_content`")
            if not isinstance(share_weights_with, Interpreter):
                raise ValueError("`share_weights_with` must be an Interpreter")
            native = share_weights_with._g.s.shared(**options)
        elif model_path and not model_content:
            native = NativeSession(path=os.fsdecode(model_path), share=bool(share_weights), **options)
        elif model_content and not model_path:
            native = NativeSession(content=model_content, **options)
        elif not model_content and not model_path:
            raise ValueError("`model_path` or `model_content` must be specified.")
        else:
            raise ValueError("Can't both provide `model_path` and `model_content`")
        self._g = _Graph(native)
        # Sessions of signatures that run another subgraph, one per key (shared by runners).
        self._signature_graphs = {}
        self._signature_defs = {
            key: {"inputs": dict(sorted(ins)), "outputs": dict(sorted(outs)), "subgraph": sg} for key, sg, ins, outs in native.signatures()
        }

    @property
    def experimental_compress_quantization_zero_points(self):
        return self._experimental_compress_quantization_zero_points

    def shared_weight_count(self):
        """Prepared weights and constants this interpreter's model shares with other
        interpreters of it now (ferrite only; 0 before ``allocate_tensors``)."""
        return self._g.s.shared_constants()

    def _safe_to_run(self):
        """Whether no numpy view from ``tensor()`` is alive."""
        return self._g.s.views() == 0

    def _ensure_safe(self):
        if self._g.s.views():
            raise RuntimeError(_SAFETY)

    def allocate_tensors(self):
        """Plans memory for the current input shapes. Costs nothing when nothing changed;
        after a resize it switches to a cached plan for shapes seen before."""
        self._ensure_safe()
        self._g.allocate()

    def _get_tensor_details(self, tensor_index, subgraph_index):
        t, sg = int(tensor_index), int(subgraph_index)
        g = self._g
        if sg == g.sg:
            return _copy_detail(g.detail(g.index(t)))
        if not 0 <= sg < g.s.num_subgraphs():
            raise ValueError(f"Invalid subgraph index {sg} exceeds max subgraph index {g.s.num_subgraphs()}")
        n = g.s.num_tensors(sg)
        if not 0 <= t < n:
            raise ValueError(f"Invalid tensor index {t} exceeds max tensor index {n}")
        return _detail(g.s.describe(sg, t), t)

    def get_tensor_details(self, subgraph_index=0):
        """Details of every tensor of a subgraph."""
        count = self._g.s.num_subgraphs()
        if subgraph_index < 0 or subgraph_index >= count:
            raise ValueError(f"subgraph_index is out of range: {subgraph_index} for the model, which has {count} subgraphs.")
        return [self._get_tensor_details(t, subgraph_index) for t in range(self._g.s.num_tensors(subgraph_index))]

    def get_input_details(self):
        g = self._g
        return [_copy_detail(g.detail(t)) for t in g.inputs]

    def get_output_details(self):
        g = self._g
        return [_copy_detail(g.detail(t)) for t in g.outputs]

    def set_tensor(self, tensor_index, value):
        """Copies ``value`` (its dtype and shape must be the tensor's) into the tensor."""
        g = self._g
        # The per-frame call, kept short: a tensor seen before and an array that fits.
        m = g._meta.get(tensor_index)
        if m is not None and m[3] and type(value) is np.ndarray and value.dtype == m[0] and value.shape == m[1]:
            try:
                return g.s.set(tensor_index, value)
            except (BufferError, ValueError):
                pass  # not one contiguous block, or not settable: the full path copies or says why
        g.set(g.index(tensor_index), value)

    def resize_tensor_input(self, input_index, tensor_size, strict=False):
        """Gives an input a new shape; call ``allocate_tensors()`` before ``invoke()``.
        With ``strict``, only dimensions that are -1 in ``shape_signature`` may change.
        Resizing to the current shape changes nothing."""
        self._ensure_safe()
        try:
            dims = [operator.index(v) for v in tensor_size]
        except TypeError:
            # Floats and the like convert as LiteRT converts them (to int32, truncating).
            dims = [int(v) for v in np.asarray(tensor_size, dtype=np.int32).reshape(-1)]
        self._g.resize(operator.index(input_index), dims, strict)

    def invoke(self):
        """Runs the model (releasing the GIL while it runs). Raises RuntimeError while a
        view from ``tensor()`` is alive (the native session checks, under its lock)."""
        self._g.run()

    def invoke_with_callbacks(self, before=None, after=None):
        """Runs the model, calling ``before(op)`` and ``after(op)`` around every op of the
        interpreter's subgraph, in execution order, with an :class:`OpInfo` holding the
        op's index, type, backend and its tensors (read-only copies). As MNN's
        ``runWithCallBack``: ``before`` returning ``False`` (or ``"skip"``) skips the op,
        ``after`` returning ``False`` (or ``"stop"``, from either) ends the run; None or
        True goes on. Ops fused into a neighbouring kernel are reported too (``runs_on``
        ``"fused"``), and a tensor that never held its own value has state ``"fused"``
        and no data. Returns whether every op ran (outputs are valid only then). The
        callbacks must not call the interpreter; an exception in one ends the run and
        is raised here. Holds the GIL while it runs."""
        self._ensure_safe()

        def wrap(f, is_before):
            if f is None:
                return None
            return lambda raw: _flow(f(OpInfo(raw)), is_before)

        return self._g.run_with_callbacks(wrap(before, True), wrap(after, False))

    def start_trace(self):
        """Starts recording a Chrome trace (Perfetto, chrome://tracing): before
        ``allocate_tensors``, the model's parse and prepare phases too; then one slice per
        executed op of every ``invoke``, with shapes, bytes and FLOPs, and the slices of
        worker threads. ``write_trace`` writes it."""
        self._g.s.set_tracing(True)

    def stop_trace(self):
        """Stops recording; what was recorded stays for ``write_trace``."""
        self._g.s.set_tracing(False)

    def write_trace(self, path):
        """Writes the trace recorded so far as Chrome trace-event JSON to ``path``."""
        self._g.s.write_trace(os.fspath(path))

    def get_tensor(self, tensor_index, subgraph_index=0):
        """A writable copy of any tensor: inputs, outputs, constants, and intermediates
        (their values after ``invoke`` with ``experimental_preserve_all_tensors=True``)."""
        g = self._g
        m = g._meta.get(tensor_index)
        if m is not None and m[3] and subgraph_index == g.sg:
            # The per-frame call, kept short: a copy straight into a fresh array.
            out = np.empty(m[1], m[0])
            if g.s.read_into(tensor_index, out):
                return out if m[1] else out[()]
        if subgraph_index != g.sg:
            count = g.s.num_subgraphs()
            if not 0 <= subgraph_index < count:
                raise ValueError(f"Invalid subgraph index {subgraph_index} exceeds max subgraph index {count}")
            t = operator.index(tensor_index)
            d = self._get_tensor_details(t, subgraph_index)
            shape, data = g.s.get_constant(subgraph_index, t)
            return _from_bytes(data, np.dtype(d["dtype"]), shape)
        return g.get(g.index(tensor_index))

    def tensor(self, tensor_index):
        """A function returning a numpy view of the tensor's memory, without a copy: fill
        an input in place (``interpreter.tensor(i)()[0] = image``), read outputs after
        ``invoke``. Hold the function, not the array: while an array from it is alive,
        ``allocate_tensors``, ``resize_tensor_input`` and ``invoke`` raise RuntimeError."""
        g = self._g
        return lambda: g.view(g.index(tensor_index))

    def reset_all_variables(self):
        """Zeroes the model's variable tensors, as LiteRT's does (resource variables of
        streaming models keep their values in LiteRT too)."""
        self._g.s.reset_variable_tensors()

    def num_subgraphs(self):
        return self._g.s.num_subgraphs()

    def _get_op_details(self, op_index):
        """Index, name, input and output tensors (-1 for an omitted input) and their types
        of one op of the interpreter's subgraph."""
        g = self._g
        i = int(op_index)
        if not 0 <= i < g.s.num_ops():
            raise ValueError("Invalid node index")
        name, ins, outs = g.s.op(i)
        return {
            "index": i,
            "op_name": name,
            "inputs": np.array(ins, dtype=np.int32),
            "outputs": np.array(outs, dtype=np.int32),
            "operand_types": [g.detail(t)["dtype"] for t in ins if t != -1],
            "result_types": [g.detail(t)["dtype"] for t in outs if t != -1],
        }

    def _get_ops_details(self):
        return [self._get_op_details(i) for i in range(self._g.s.num_ops())]

    def get_signature_list(self):
        """``{key: {"inputs": [names], "outputs": [names]}}``, names sorted as LiteRT sorts them."""
        return {k: {"inputs": list(v["inputs"]), "outputs": list(v["outputs"])} for k, v in self._signature_defs.items()}

    def _get_full_signature_list(self):
        """``{key: {"inputs": {name: tensor index}, "outputs": {name: tensor index}}}``."""
        return {k: {"inputs": dict(v["inputs"]), "outputs": dict(v["outputs"])} for k, v in self._signature_defs.items()}

    def get_signature_runner(self, signature_key=None):
        """A callable running one signature: ``runner(x=array, ...)`` returns
        ``{output_name: array}``. None selects the model's only signature."""
        if signature_key is None:
            if len(self._signature_defs) != 1:
                raise ValueError(
                    "SignatureDef signature_key is None and model has {0} Signatures. "
                    "None is only allowed when the model has 1 SignatureDef".format(len(self._signature_defs))
                )
            signature_key = next(iter(self._signature_defs))
        return SignatureRunner(interpreter=self, signature_key=signature_key)

    def _graph_of_signature(self, key):
        """The interpreter's own session when the signature runs its subgraph (state is
        shared, as in LiteRT); otherwise one session per signature."""
        if self._signature_defs[key]["subgraph"] == self._g.sg:
            return self._g
        g = self._signature_graphs.get(key)
        if g is None:
            g = self._signature_graphs[key] = _Graph(self._g.s.for_signature(key))
        return g

    def _native_handle(self):
        raise NotImplementedError("ferrite has no tflite::Interpreter to hand to C++ extensions")


class SignatureRunner:
    """Runs one SignatureDef of an interpreter: ``runner(**inputs)`` resizes the inputs to
    the arrays given, allocates, runs and returns a dict of writable output copies."""

    def __init__(self, interpreter=None, signature_key=None):
        if not interpreter:
            raise ValueError("None interpreter provided.")
        if not signature_key:
            raise ValueError("None signature_key provided.")
        defs = interpreter._signature_defs
        if signature_key not in defs:
            raise ValueError(f'Invalid signature_key provided: "{signature_key}".')
        self._interpreter = interpreter
        self._signature_key = signature_key
        self._inputs = defs[signature_key]["inputs"]
        self._outputs = defs[signature_key]["outputs"].items()
        self._g = interpreter._graph_of_signature(signature_key)

    def __call__(self, **kwargs):
        if len(kwargs) != len(self._inputs):
            raise ValueError(
                "Invalid number of inputs provided for running a SignatureDef, expected %s vs provided %s" % (len(self._inputs), len(kwargs))
            )
        g = self._g
        for name, value in kwargs.items():
            if name not in self._inputs:
                raise ValueError("Invalid Input name (%s) for SignatureDef" % name)
            g.resize(self._inputs[name], [int(v) for v in value.shape], False)
        g.allocate()
        for name, value in kwargs.items():
            g.set(self._inputs[name], value)
        g.run()
        return {name: g.get(t) for name, t in self._outputs}

    def get_input_details(self):
        g = self._g
        return {name: _copy_detail(g.detail(t)) for name, t in self._inputs.items()}

    def get_output_details(self):
        g = self._g
        return {name: _copy_detail(g.detail(t)) for name, t in self._outputs}


class InterpreterWithCustomOps(Interpreter):
    """LiteRT's interpreter taking C++ custom-op registerers. ferrite cannot call those;
    its own custom ops (MediaPipe's) are built in. With no registerers it is an
    ``Interpreter``; with any it raises ``ValueError``."""

    def __init__(self, custom_op_registerers=None, **kwargs):
        if custom_op_registerers:
            raise ValueError("ferrite cannot load TensorFlow Lite custom op registerers")
        super().__init__(**kwargs)
