#!/usr/bin/env bash
# A lent GPU's checks and measurements, most valuable first, each step under its own time
# limit so that one hang costs only its step. Run from the repository root on the GPU
# machine; what it finds lands in $OUT: log.txt (all output), gpu.json, matmul.json,
# check_models.json, matmul_mma_sync.json, models.json, tune.json, records.jsonl, split_k.json, pdl.json, dynamic.json
# (bench/gpu_session.py). A .gpucache folder made by bench/gpu_prepare.py is
# used as taskloom's build cache when present. STEPS names the steps to run (default all:
# hopper check_models cuda_tests matmul mma_sync models fp32 memcheck tune ncu split_k pdl dynamic), MODELS and
# SYSTEMS narrow the models step (bench/gpu_session.py --models, --systems).
set -u
STEPS=" ${STEPS:-hopper check_models cuda_tests matmul mma_sync models fp32 memcheck tune ncu split_k pdl dynamic} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
MODEL_ARGS=()
[ -n "${MODELS:-}" ] && MODEL_ARGS+=(--models "$MODELS")
[ -n "${SYSTEMS:-}" ] && MODEL_ARGS+=(--systems "$SYSTEMS")
OUT=${OUT:-/tmp/taskloom-gpu}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
[ -d .gpucache ] && export TASKLOOM_CACHE_DIR=$PWD/.gpucache
START=$(date +%s)
# the seconds left before the whole session's end (TOTAL_S), less what later steps keep
left() { local s=$(( ${TOTAL_S:-585} - ($(date +%s) - START) - $1 )); echo $(( s > 5 ? s : 5 )); }
step() {
    local limit=$1; shift
    echo "== $* (limit ${limit} s) $(date +%T)"
    timeout -k 5 "$limit" "$@"
    local rc=$?
    echo "== exit $rc $(date +%T)"
    return $rc
}
facts() {
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
    nvcc --version | tail -2
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
    python3 -c "from taskloom.target.cuda import _read_device; print(_read_device(0))"
}
export -f facts
{
    # installed, so that torch.compile finds backend="taskloom" by its entry point; wheels
    # carried in .whl (nvidia-cuda-crt, for NVRTC builds, matching the machine's CUDA runtime)
    step 60 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e .
    [ -d .whl ] && step 60 python3 -m pip install -q --no-deps --no-index .whl/*.whl
    step 20 bash -c facts
    # Hopper's instructions one at a time first (a wrong mbarrier protocol hangs, and would
    # take the whole next step with it): where they fail, nothing after uses wgmma or TMA
    skip=()
    if want hopper && ! step 60 python3 -m pytest -q -p no:cacheprovider -m cuda --timeout 30 --tb=short -rfE -v \
            tests/gpu/test_hopper_on_gpu.py; then
        export TASKLOOM_WGMMA=0
        skip=(-k "not wgmma and not hopper")
        echo "== Hopper's instructions failed: TASKLOOM_WGMMA=0 for the rest of the session"
    fi
    # BERT computed wrong on the H100 (2026-11-28): which kernel, before anything else
    want check_models && step 240 python3 bench/gpu_session.py --out "$OUT" --stages check_models
    want cuda_tests && step 120 python3 -m pytest -q -p no:cacheprovider -m cuda -n 16 --timeout 100 --tb=short -rfE ${skip[@]+"${skip[@]}"} \
        tests/gpu tests/runtime/test_device.py tests/frontend/test_torch_cuda.py tests/compiler/test_cuda_graph.py tests/compiler/test_cuda_dynamic.py \
        tests/bench/test_gpu.py tests/tune/test_cuda_tuner.py tests/backend/test_nvrtc.py tests/runtime/test_cuda_check.py
    # the Hopper template's first check as a model compiles it: where it fails, the rest runs without it
    if [ "${TASKLOOM_WGMMA:-1}" != 0 ] && ! step 45 python3 bench/gpu_session.py --out "$OUT" --stages wgmma_smoke; then
        export TASKLOOM_WGMMA=0
        echo "== wgmma failed its check: TASKLOOM_WGMMA=0 for the rest of the session"
    fi
    want matmul && step 90 python3 bench/gpu_session.py --out "$OUT" --stages matmul
    want mma_sync && [ "${TASKLOOM_WGMMA:-1}" != 0 ] && step 45 python3 bench/gpu_session.py --out "$OUT" --stages mma_sync
    keep=0  # what the steps after the models keep for themselves
    for later in fp32:120 memcheck:150 tune:180 ncu:60 split_k:150 pdl:150 stores:150 dynamic:60; do want "${later%:*}" && keep=$((keep + ${later#*:})); done
    want models && step "$(left $keep)" python3 bench/gpu_session.py --out "$OUT" --stages models ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"}
    # the five models in float32 against eager torch (correctness first: few timings)
    want fp32 && step 120 python3 bench/gpu_session.py --out "$OUT" --stages models --dtype float32 \
        --systems taskloom,torch --repeats 5 --rounds 1 ${MODELS:+--models "$MODELS"}
    want memcheck && step 150 compute-sanitizer --tool memcheck --error-exitcode 1 python3 bench/gpu_memcheck.py
    want tune && step 180 python3 bench/gpu_session.py --out "$OUT" --stages tune
    want ncu && step 60 ncu --kernel-name 'regex:^k[0-9]+_' --clock-control none --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section SourceCounters python3 bench/gpu_ncu_matmul.py
    want split_k && step 150 python3 bench/gpu_session.py --out "$OUT" --stages split_k
    want pdl && step 150 python3 bench/gpu_session.py --out "$OUT" --stages pdl
    want stores && step 150 python3 bench/gpu_session.py --out "$OUT" --stages stores
    want dynamic && step "$(left 0)" python3 bench/gpu_session.py --out "$OUT" --stages dynamic
} 2>&1 | tee "$OUT/log.txt"
