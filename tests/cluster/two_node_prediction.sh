#!/usr/bin/env bash
# Predicted vs measured 2-node step time on the two-node test cluster (slurm2.sh, root):
# tests/cluster/two_node_prediction.sh [RESULTS_DIR]
#
# The scaling model fits its intra-node link to a one-node comm-bench, its inter-node link to a
# comm-bench across dn1 and dn2 (the tbf-shaped link), compute to workers=1 runs, then
# `dpsuite predict` validates against the 2-node (one rank a node) runs of the same workloads.
# Everything carries hardware.tag=twonode so that predict takes it as one machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/dpsuite-two-node-prediction}
PY=${PYTHON:-python3}
TAG=twonode
STEPS=(train.max_steps=40 threads_per_worker=1 "hardware.tag=$TAG")
WORKLOADS=workload=tiny_gpt,mnist1d_mlp

bash tests/cluster/slurm2.sh start
eval "$(bash tests/cluster/slurm2.sh env)"
"$PY" -m dpsuite comm-bench --workers 2 --sizes 64K:16M -f 4 --tag "$TAG" --results-dir "$OUT"
srun -N2 -n2 --kill-on-bad-exit=1 "$PY" -m dpsuite comm-bench --sizes 64K:16M -f 4 --tag "$TAG" \
    --results-dir "$OUT"
"$PY" -m dpsuite run -m "$WORKLOADS" workers=1 "${STEPS[@]}" "results_dir=$OUT"
"$PY" -m dpsuite run -m hydra/launcher=slurm hydra.launcher.nodes=2 hydra.launcher.poll_s=1 \
    "$WORKLOADS" workers=2 "${STEPS[@]}" "results_dir=$OUT"
"$PY" -m dpsuite predict "$OUT" --out "$OUT/prediction"
