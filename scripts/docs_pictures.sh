#!/usr/bin/env bash
# Draws one picture of each kind from corpus models, for the README:
#   graph.svg        inspect --svg       (a float ResNet: residual ADDs fused into their convolutions)
#   graph_while.svg  inspect --svg       (a WHILE loop: its cond and body subgraphs as clusters)
#   profile.svg      bench --profile --svg
#   memory.svg       inspect --mem-svg   (the arena plan)
# and, where rsvg-convert is installed (Debian: librsvg2-bin), a PNG of each beside it,
# which also checks that each SVG renders.
# Usage: scripts/docs_pictures.sh [OUT_DIR]   (default docs/pictures)
# Needs the corpus (scripts/test.sh fetches and generates it) and, for the graph
# layout used in docs, Graphviz's dot.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-docs/pictures}"
MODELS="${FERRITE_CACHE:-$HOME/.cache/ferrite}/models"
RESNET="$MODELS/unseen-2.19.1/tune/ic_resnet8_32_w16_float.tflite"
WHILE="$MODELS/tf-generated-2.19.1/tf_while_float.tflite"
for m in "$RESNET" "$WHILE"; do
  [ -f "$m" ] || { echo "missing corpus model $m: run scripts/test.sh (or tools/unseen_models.py, tools/tf_models.py) first" >&2; exit 1; }
done
command -v dot >/dev/null || { echo "Graphviz's dot is needed for the docs pictures (apt-get install graphviz)" >&2; exit 1; }
cargo build --release -q -p ferrite-cli
F=target/release/ferrite
mkdir -p "$OUT"
"$F" inspect "$RESNET" --svg "$OUT/graph.svg" --layout dot --mem-svg "$OUT/memory.svg"
"$F" inspect "$WHILE" --svg "$OUT/graph_while.svg" --layout dot
"$F" bench "$RESNET" --runs 200 --warmup 20 --profile --svg "$OUT/profile.svg" >/dev/null
for f in graph graph_while profile memory; do
  size=$(stat -c %s "$OUT/$f.svg")
  [ "$size" -lt 307200 ] || { echo "$OUT/$f.svg is $size bytes, over 300 KB" >&2; exit 1; }
  if command -v rsvg-convert >/dev/null; then
    rsvg-convert "$OUT/$f.svg" -o "$OUT/$f.png"
  fi
  echo "$OUT/$f.svg: $size bytes"
done
