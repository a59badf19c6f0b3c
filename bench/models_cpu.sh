#!/usr/bin/env bash
# The model table: the five models at batch 1 and the three CNNs at batch 8, taskloom against
# PyTorch eager, torch.compile (inductor), ONNX Runtime and Apache TVM, one run per model.
#   [BUDGET=120] bash bench/models_cpu.sh [OUT_DIR] [TUNE] [TVM_TRIALS]
# then: python bench/summarize_models.py OUT_DIR/*.json > OUT_DIR.md
set -euo pipefail
out=${1:-bench/results/models-cpu}
tune=${2:-0}
trials=${3:-0}
budget=${BUDGET:-120}  # seconds of timing per system: untuned TVM takes up to a minute per inference
tl=${TASKLOOM:-.venv/bin/taskloom}
compare=${COMPARE:-torch,inductor,ort,tvm}
mkdir -p "$out"
run() {  # NAME BATCH
  $tl bench model "$1" --batch "$2" --compare "$compare" --tune "$tune" --tvm-trials "$trials" --budget "$budget" --profile \
    --json "$out/$1-b$2.json" --plot "$out/$1-b$2.png" | tee "$out/$1-b$2.txt"
}
for m in resnet50 inception_v3 mobilenet_v2 bert gpt2; do run "$m" 1; done
for m in resnet50 inception_v3 mobilenet_v2; do run "$m" 8; done
