#!/usr/bin/env bash
# The operator bars of the CPU templates: matmul (square, a prime size, BERT/GPT-2 shapes),
# ResNet-50's distinct 1x1 and 3x3 convolutions at batch 1, MobileNet-V2's depthwise ones.
# Every system in one run per command (taskloom, numpy, torch, ONNX Runtime), medians of 30.
#   bash bench/templates_cpu.sh [OUT_DIR] [TUNE] [LAYOUT]
# LAYOUT (NCHW, default, or NHWC) is the layout taskloom's convolutions take (bench op --layout).
set -euo pipefail
out=${1:-bench/results/templates-cpu}
tune=${2:-0}
layout=${3:-NCHW}
tl=${TASKLOOM:-.venv/bin/taskloom}
mkdir -p "$out"
$tl bench op matmul --tune "$tune" --json "$out/matmul.json" \
  --shape 512,512,512 --shape 1024,1024,1024 --shape 2048,2048,2048 --shape 2039,2039,2039 --shape 4096,4096,4096 \
  --shape 128,768,768 --shape 128,768,3072 --shape 128,3072,768 --shape 128,768,2304
# ResNet-50 (torchvision), batch 1: N,C,H,W,OC,KH,KW grouped by stride and padding
$tl bench op conv2d --layout "$layout" --tune "$tune" --json "$out/resnet50_1x1.json" --stride 1 --pad 0 \
  --shape 1,64,56,56,64,1,1 --shape 1,64,56,56,256,1,1 --shape 1,256,56,56,64,1,1 --shape 1,256,56,56,128,1,1 \
  --shape 1,128,28,28,512,1,1 --shape 1,512,28,28,128,1,1 --shape 1,512,28,28,256,1,1 \
  --shape 1,256,14,14,1024,1,1 --shape 1,1024,14,14,256,1,1 --shape 1,1024,14,14,512,1,1 \
  --shape 1,512,7,7,2048,1,1 --shape 1,2048,7,7,512,1,1
$tl bench op conv2d --layout "$layout" --tune "$tune" --json "$out/resnet50_1x1_s2.json" --stride 2 --pad 0 \
  --shape 1,256,56,56,512,1,1 --shape 1,512,28,28,1024,1,1 --shape 1,1024,14,14,2048,1,1
$tl bench op conv2d --layout "$layout" --tune "$tune" --json "$out/resnet50_3x3.json" --stride 1 --pad 1 \
  --shape 1,64,56,56,64,3,3 --shape 1,128,28,28,128,3,3 --shape 1,256,14,14,256,3,3 --shape 1,512,7,7,512,3,3
$tl bench op conv2d --layout "$layout" --tune "$tune" --json "$out/resnet50_3x3_s2.json" --stride 2 --pad 1 \
  --shape 1,128,56,56,128,3,3 --shape 1,256,28,28,256,3,3 --shape 1,512,14,14,512,3,3
# MobileNet-V2 depthwise 3x3, batch 1
$tl bench op conv2d --layout "$layout" --tune "$tune" --json "$out/mobilenetv2_dw.json" --stride 1 --pad 1 --groups 0 \
  --shape 1,32,112,112,32,3,3 --shape 1,144,56,56,144,3,3 --shape 1,192,28,28,192,3,3 \
  --shape 1,384,14,14,384,3,3 --shape 1,576,14,14,576,3,3 --shape 1,960,7,7,960,3,3
$tl bench op conv2d --layout "$layout" --tune "$tune" --json "$out/mobilenetv2_dw_s2.json" --stride 2 --pad 1 --groups 0 \
  --shape 1,96,112,112,96,3,3 --shape 1,144,56,56,144,3,3 --shape 1,192,28,28,192,3,3 --shape 1,576,14,14,576,3,3
