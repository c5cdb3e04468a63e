"""The Python package's GPU switches: `backends=` and `gpu_precision=` on the Interpreter.

Runs one float model (the chain of convolutions in models/demo.tflite unless given) on the CPU,
on the GPU in fp32 and in fp16, and checks:
  - fp32 on the GPU is within 1e-4 of the CPU (relative to the output's scale);
  - fp16 is within 2e-2 of the CPU and differs from fp32 (the keyword reached the session: float16
    storage rounds every stored value), when the adapter offers SHADER_F16;
  - the keyword overrides FERRITE_GPU_PRECISION, and a bad value is a ValueError.
Needs a GPU adapter (scripts/test.sh pins lavapipe); exits with an error without one under CI=true.

Usage: python tools/python_gpu_test.py [MODEL]
"""

import os
import sys

import numpy as np

import ferrite


def outputs(path, **kw):
    it = ferrite.Interpreter(model_path=path, **kw)
    it.allocate_tensors()
    for d in it.get_input_details():
        n = int(np.prod(d["shape"]))
        x = ((np.arange(n) * 37 % 101) / 50.0 - 1.0).astype(np.float32).reshape(d["shape"])
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]).astype(np.float64) for d in it.get_output_details()]


def err(a, b):
    return max(float(np.max(np.abs(x - y)) / max(1.0, float(np.max(np.abs(y))))) for x, y in zip(a, b))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "models/demo.tflite"
    cpu = outputs(path, backends=["cpu"])
    # A run with the GPU backend first; without an adapter ferrite warns and the CPU runs it,
    # so the fp16 run below is what tells the GPU ran: it must differ from fp32.
    fp32 = outputs(path, backends=["gpu", "cpu"], gpu_precision="fp32")
    fp16 = outputs(path, backends=["gpu", "cpu"], gpu_precision="fp16")
    e32, e16 = err(fp32, cpu), err(fp16, cpu)
    print(f"{os.path.basename(path)}: gpu fp32 vs cpu {e32:.2e}, gpu fp16 vs cpu {e16:.2e}")
    assert e32 <= 1e-4, e32
    if all(np.array_equal(a, b) for a, b in zip(fp16, fp32)):
        msg = "gpu_precision='fp16' gave the fp32 results: no GPU adapter with SHADER_F16, or the keyword was lost"
        if os.environ.get("CI") == "true":
            raise SystemExit(msg)
        print(f"skipped: {msg}")
        return
    assert e16 <= 2e-2, e16

    # The keyword wins over the environment, which the session options read first.
    os.environ["FERRITE_GPU_PRECISION"] = "fp16"
    try:
        again = outputs(path, backends=["gpu", "cpu"], gpu_precision="fp32")
        from_env = outputs(path, backends=["gpu", "cpu"])
    finally:
        del os.environ["FERRITE_GPU_PRECISION"]
    assert all(np.array_equal(a, b) for a, b in zip(again, fp32)), "gpu_precision='fp32' did not override FERRITE_GPU_PRECISION"
    assert all(np.array_equal(a, b) for a, b in zip(from_env, fp16)), "FERRITE_GPU_PRECISION=fp16 alone no longer applies"

    for bad in ("fp64", "FP16 ", 16):
        try:
            ferrite.Interpreter(model_path=path, backends=["gpu", "cpu"], gpu_precision=bad)
        except ValueError:
            continue
        raise SystemExit(f"gpu_precision={bad!r} was accepted")
    print("gpu_precision: fp32/fp16 keyword, override of the environment, bad values refused")


if __name__ == "__main__":
    main()
