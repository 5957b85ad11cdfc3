#!/usr/bin/env bash
# A campaign as a Slurm job array: one array task per shard, the task id
# is the shard. Reports go to a directory every node sees (OUT, on the
# shared filesystem); a job that depends on the array merges them.
#
#   OUT=/shared/qcsim/run1 sbatch --array=0-15 deploy/slurm-array.sh 0..40000
#   sbatch --dependency=afterok:JOBID --wrap \
#       "qcsim report merge /shared/qcsim/run1/shard-*-of-16 -o /shared/qcsim/run1/merged"
#
# (run-shard.sh exits 0 when its shard found failing cases and wrote its
# report.) Submit from the checkout's top directory: Slurm runs a copy of
# this script, so deploy/run-shard.sh is found from SLURM_SUBMIT_DIR. The
# shard count is the array's size, SLURM_ARRAY_TASK_COUNT.
#SBATCH --job-name=qcsim-campaign
#SBATCH --cpus-per-task=2
#SBATCH --mem=2G
#SBATCH --time=24:00:00
#SBATCH --output=qcsim-%A_%a.out
set -euo pipefail
seeds="${1:?usage: sbatch --array=0-N deploy/slurm-array.sh SEEDS}"
out="${OUT:?set OUT to a directory on the shared filesystem}"
here="${SLURM_SUBMIT_DIR:-$(pwd)}/deploy"
exec "$here/run-shard.sh" --seeds "$seeds" \
  --shard-index "${SLURM_ARRAY_TASK_ID:?run as a job array}" \
  --shard-count "${SLURM_ARRAY_TASK_COUNT:?run as a job array}" \
  --out "$out"
