#!/usr/bin/env bash
# The two-node test SLURM (see slurm.sh): tests/cluster/slurm2.sh start|stop|status|env|kill-node
# Its own directory (/tmp/dpsuite-slurm2) and ports (6827..6830), so it can run beside the
# single-node cluster.
DPSUITE_SLURM_NODES=2 DPSUITE_SLURM_DIR=${DPSUITE_SLURM2_DIR:-/tmp/dpsuite-slurm2} \
    DPSUITE_SLURM_PORT_BASE=${DPSUITE_SLURM2_PORT_BASE:-6827} \
    exec bash "$(dirname "$0")/slurm.sh" "$@"
