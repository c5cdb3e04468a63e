from . import interpreter as interpreter
from . import trainer as trainer
from .interpreter import Delegate as Delegate
from .interpreter import Interpreter as Interpreter
from .interpreter import InterpreterWithCustomOps as InterpreterWithCustomOps
from .interpreter import OpResolverType as OpResolverType
from .interpreter import SignatureRunner as SignatureRunner
from .interpreter import load_delegate as load_delegate
from .trainer import Trainer as Trainer

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

__version__: str

def install_as(package: str = "tflite_runtime") -> None: ...
