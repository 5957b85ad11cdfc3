#!/usr/bin/env bash
# A campaign as a Slurm job array: one array task per shard, the task id
# is the shard. Reports go to a directory every node sees (OUT, on the
# shared filesystem); a job that depends on the array merges them.
#
#   OUT=/shared/qcsim/run1 sbatch --parsable --array=0-15 deploy/slurm-array.sh 0..40000
#   sbatch --dependency=afterany:JOBID --wrap \
#       "qcsim report merge --complete /shared/qcsim/run1/shard-*-of-16 -o /shared/qcsim/run1/merged"
#
# afterany, not afterok: the merge runs even when a task failed, and then
# fails itself naming the missing shard (--complete), where afterok would
# leave it pending for ever. To run only shard I again (it failed, or was
# cancelled), give the shard count, as the array now holds one task:
#
#   OUT=/shared/qcsim/run1 QCSIM_SHARDS=16 sbatch --array=I deploy/slurm-array.sh 0..40000
#
# and merge again. (run-shard.sh exits 0 when its shard found failing cases
# and wrote its report: a case is deterministic, a retry finds them again.)
# Submit from the checkout's top directory: Slurm runs a copy of this
# script, so deploy/run-shard.sh is found from SLURM_SUBMIT_DIR. QCSIM, the
# qcsim command, reaches the tasks in the submitting environment (sbatch's
# default --export=ALL). deploy/slurm-local.sh runs all of this on one
# machine.
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
  --shard-count "${QCSIM_SHARDS:-${SLURM_ARRAY_TASK_COUNT:?run as a job array}}" \
  --out "$out"
