import enum
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt

__all__ = ["Delegate", "Interpreter", "InterpreterWithCustomOps", "OpInfo", "OpResolverType", "OpTensor", "SignatureRunner", "load_delegate"]

class OpResolverType(enum.Enum):
    AUTO = 0
    BUILTIN = 1
    BUILTIN_REF = 2
    BUILTIN_WITHOUT_DEFAULT_DELEGATES = 3

class Delegate:
    def __init__(self, library: str, options: Mapping[str, Any] | None = None) -> None: ...

def load_delegate(library: str, options: Mapping[str, Any] | None = None) -> Delegate: ...

class _QuantizationParameters(TypedDict):
    scales: npt.NDArray[np.float32]
    zero_points: npt.NDArray[np.int32]
    quantized_dimension: int
    block_size: int

class _TensorDetails(TypedDict):
    name: str
    index: int
    shape: npt.NDArray[np.int32]
    shape_signature: npt.NDArray[np.int32]
    dtype: type[np.generic]
    quantization: tuple[float, int]
    quantization_parameters: _QuantizationParameters
    sparsity_parameters: dict[str, Any]

class _OpDetails(TypedDict):
    index: int
    op_name: str
    inputs: npt.NDArray[np.int32]
    outputs: npt.NDArray[np.int32]
    operand_types: list[type[np.generic]]
    result_types: list[type[np.generic]]

class _SignatureDef(TypedDict):
    inputs: list[str]
    outputs: list[str]

class _FullSignatureDef(TypedDict):
    inputs: dict[str, int]
    outputs: dict[str, int]

class _OpQuantization(TypedDict):
    scales: npt.NDArray[np.float32]
    zero_points: npt.NDArray[np.int32]
    quantized_dimension: int

class OpTensor:
    index: int
    name: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    quantization_parameters: _OpQuantization
    state: Literal["ready", "pending", "fused", "absent"]
    data: npt.NDArray[Any] | None
    def __init__(self, raw: tuple[Any, ...]) -> None: ...

class OpInfo:
    subgraph: int
    index: int
    op_name: str
    runs_on: str
    fused_into: int | None
    calls: list[tuple[int, int, int, int | None]]
    inputs: list[OpTensor]
    outputs: list[OpTensor]
    def __init__(self, raw: tuple[Any, ...]) -> None: ...

_OpCallback = Callable[[OpInfo], bool | Literal["continue", "skip", "stop"] | None]

class Interpreter:
    def __init__(
        self,
        model_path: str | PathLike[str] | None = None,
        model_content: bytes | bytearray | memoryview | None = None,
        experimental_delegates: Sequence[Delegate] | None = None,
        num_threads: int | None = None,
        experimental_op_resolver_type: OpResolverType = ...,
        experimental_preserve_all_tensors: bool = False,
        experimental_disable_delegate_clustering: bool = False,
        experimental_default_delegate_latest_features: bool = False,
        experimental_compress_quantization_zero_points: bool = False,
        experimental_disable_delegate_node_fusion: bool = False,
        experimental_force_delegate_node_profiling: bool = False,
        share_weights_with: Interpreter | None = None,
        share_weights: bool = False,
        backends: Sequence[str] | None = None,
        share_arena: bool = False,
        gpu_precision: str | None = None,
    ) -> None: ...
    @property
    def experimental_compress_quantization_zero_points(self) -> bool: ...
    def shared_weight_count(self) -> int: ...
    def allocate_tensors(self) -> None: ...
    def get_tensor_details(self, subgraph_index: int = 0) -> list[_TensorDetails]: ...
    def get_input_details(self) -> list[_TensorDetails]: ...
    def get_output_details(self) -> list[_TensorDetails]: ...
    def set_tensor(self, tensor_index: int, value: npt.ArrayLike) -> None: ...
    def resize_tensor_input(self, input_index: int, tensor_size: Sequence[int] | npt.NDArray[np.integer[Any]], strict: bool = False) -> None: ...
    def invoke(self) -> None: ...
    def invoke_with_callbacks(self, before: _OpCallback | None = None, after: _OpCallback | None = None) -> bool: ...
    def start_trace(self) -> None: ...
    def stop_trace(self) -> None: ...
    def write_trace(self, path: str | PathLike[str]) -> None: ...
    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> npt.NDArray[Any]: ...
    def tensor(self, tensor_index: int) -> Callable[[], npt.NDArray[Any]]: ...
    def reset_all_variables(self) -> None: ...
    def num_subgraphs(self) -> int: ...
    def get_signature_list(self) -> dict[str, _SignatureDef]: ...
    def get_signature_runner(self, signature_key: str | None = None) -> SignatureRunner: ...
    def _get_full_signature_list(self) -> dict[str, _FullSignatureDef]: ...
    def _get_tensor_details(self, tensor_index: int, subgraph_index: int) -> _TensorDetails: ...
    def _get_op_details(self, op_index: int) -> _OpDetails: ...
    def _get_ops_details(self) -> list[_OpDetails]: ...
    def _safe_to_run(self) -> bool: ...
    def _ensure_safe(self) -> None: ...
    def _native_handle(self) -> int: ...

class SignatureRunner:
    def __init__(self, interpreter: Interpreter | None = None, signature_key: str | None = None) -> None: ...
    def __call__(self, **kwargs: npt.NDArray[Any]) -> dict[str, npt.NDArray[Any]]: ...
    def get_input_details(self) -> dict[str, _TensorDetails]: ...
    def get_output_details(self) -> dict[str, _TensorDetails]: ...

class InterpreterWithCustomOps(Interpreter):
    def __init__(self, custom_op_registerers: Sequence[Any] | None = None, **kwargs: Any) -> None: ...
