#!/usr/bin/env bash
# One shard of a campaign: the unit every scheduler recipe in deploy/
# starts once per process. Seeds with seed % COUNT == INDEX run here; the
# report goes to OUT/shard-INDEX-of-COUNT/ and failing cases to
# OUT/corpus-INDEX-of-COUNT/, so shards never write each other's files.
#
#   run-shard.sh --seeds A..B --shard-index I --shard-count N [--out DIR]
#                [-- EXTRA CAMPAIGN ARGS...]
#
# The index may also come from the scheduler's environment:
# JOB_COMPLETION_INDEX (Kubernetes indexed Job) or SLURM_ARRAY_TASK_ID.
#
# Exit status: 0 when the shard ran and wrote its report, failing cases
# or not (they are the report's business, and a scheduler that retried the
# shard would only find them again: a case is deterministic); non-zero
# when the campaign could not run or write its report.
set -euo pipefail

seeds=""
index="${JOB_COMPLETION_INDEX:-${SLURM_ARRAY_TASK_ID:-}}"
count=""
out="${QCSIM_OUT:-/out}"
qcsim="${QCSIM:-qcsim}"
while [ "$#" -gt 0 ]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --shard-index) index="$2"; shift 2 ;;
    --shard-count) count="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "run-shard: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$seeds" ] || [ -z "$index" ] || [ -z "$count" ]; then
  echo "run-shard: need --seeds A..B, --shard-index I (or JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID) and --shard-count N" >&2
  exit 2
fi
name="shard-${index}-of-${count}"
mkdir -p "$out"
# Written before the campaign starts: a summary.json newer than it was
# written by this run.
marker="$out/.${name}.started"
touch "$marker"
# The corpus directory exists even when no case fails, so that a recipe
# bringing it back from another host (parallel's --return) finds it.
mkdir -p "$out/corpus-${index}-of-${count}"
# --jobs: the CPUs this process was given (nproc honours cgroup quotas
# and affinity), not the machine's.
status=0
"$qcsim" campaign --seeds "$seeds" --shard "${index}/${count}" \
  --jobs "$(nproc)" --quiet \
  --report "$out/$name" --corpus "$out/corpus-${index}-of-${count}" "$@" || status=$?
if [ "$status" -eq 1 ] && [ "$out/$name/summary.json" -nt "$marker" ]; then
  echo "run-shard: shard $index of $count found failing cases; see $out/$name/report.md" >&2
  status=0
fi
rm -f "$marker"
exit "$status"
