#!/usr/bin/env bash
# The CUDA/NCCL path on one GPU, and GPU reference numbers, in one short run (about 3 minutes
# on an H200):
#   bash tests/bench/gpu_reference.sh [TAG] [PEAK_TFLOPS]     (defaults: h200, 989 = bf16 dense)
# 1. world size 1 on NCCL/CUDA (torchrun, one rank: the process-group path a cluster job takes);
# 2. comm-bench on NCCL (one rank: checks the collective and its correctness check; bandwidth
#    needs 2+ GPUs);
# 3. cifar_resnet and a GPT-2-small-sized tiny_gpt in bf16: throughput, model FLOPs and MFU;
# 4. the scaling_models preset on this one GPU (workers=1): torchvision ResNet-50 at 224 px and
#    GPT-2 124M, bf16, random inputs (ResNet-50 needs torchvision: pip install 'dpsuite[vision]'
#    with the torchvision build matching torch; without it only GPT-2 runs).
# A stage that fails is reported and the next one still runs (what was measured is kept); the
# script exits 1 if any stage failed. Results go to results/reference/TAG/ (run.json and CSVs);
# reports/reference/ is rebuilt.
set -uo pipefail
TAG="${1:-h200}"
PEAK="${2:-989}"
OUT="results/reference/$TAG"
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this script needs a GPU')" || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
COMMON=(device=cuda "hardware.tag=$TAG" "hardware.peak_tflops=$PEAK" "results_dir=$OUT/runs")
FAILED=()

stage() {  # stage NAME TIMEOUT_S COMMAND...: run one stage, note its wall time and outcome
    local name="$1" limit="$2" start=$SECONDS
    shift 2
    echo "== $name"
    if timeout "$limit" "$@"; then
        echo "-- $name: ok in $((SECONDS - start)) s"
    else
        echo "-- $name: FAILED (exit $?) after $((SECONDS - start)) s"
        FAILED+=("$name")
    fi
}

stage "1. world size 1 on NCCL/CUDA" 180 \
    torchrun --standalone --nproc_per_node=1 -m dpsuite run workload=mnist1d_mlp backend=nccl \
    train.epochs=2 "${COMMON[@]}"

stage "2. comm-bench on NCCL" 120 \
    python3 -m dpsuite comm-bench --workers 1 --backend nccl --sizes 1K:256M --iters 20 \
    --dtype bf16 --tag "$TAG" --results-dir "$OUT"

stage "3a. cifar_resnet bf16 throughput and MFU" 180 \
    python3 -m dpsuite run workload=cifar_resnet precision=bf16 batch.per_worker=256 \
    workload.num_samples=20000 train.epochs=1 train.max_steps=60 train.eval_at_start=false \
    timing.warmup_steps=10 "${COMMON[@]}"
stage "3b. tiny_gpt (GPT-2 small sized) bf16 throughput and MFU" 180 \
    python3 -m dpsuite run workload=tiny_gpt precision=bf16 batch.per_worker=32 \
    workload.depth=12 workload.width=768 workload.heads=12 workload.context=512 \
    workload.num_samples=8000 train.epochs=1 train.max_steps=60 train.eval_at_start=false \
    timing.warmup_steps=10 "${COMMON[@]}"

MODELS=(workers=1 "hardware.tag=$TAG" "hardware.peak_tflops=$PEAK")
if python3 -c "import torchvision" 2>/dev/null; then
    stage "4. scaling_models on one GPU" 300 \
        python3 -m dpsuite sweep scaling_models "${MODELS[@]}" "results_dir=$OUT/scaling_models"
else
    echo "torchvision is not importable: GPT-2 124M only"
    stage "4. scaling_models (GPT-2 124M) on one GPU" 300 \
        python3 -m dpsuite sweep scaling_models_gpt2 "${MODELS[@]}" \
        "results_dir=$OUT/scaling_models/gpt2"
fi

python3 - "$OUT" <<'PY'
import sys
from dpsuite import results
runs = results.load(sys.argv[1])
cols = ["workload", "precision", "backend", "device", "global_batch", "samples_per_s",
        "tokens_per_s", "step_time_s", "flops_per_sample", "model_tflops_per_device", "mfu",
        "peak_cuda_allocated_mib", "status"]
print(runs[[c for c in cols if c in runs]].to_string(index=False))
PY
stage "report" 120 python3 -m dpsuite report results/reference --out reports/reference
if ((${#FAILED[@]})); then
    printf 'failed: %s\n' "${FAILED[@]}"
    exit 1
fi
