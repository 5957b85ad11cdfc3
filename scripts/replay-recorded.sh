#!/usr/bin/env bash
# Replay the recorded real workloads (sim/tests/sim/traces/*.trace.zst,
# recorded by scripts/record-workloads.sh) whole, each with 8 crashes
# (default; CRASHES=N to change, SEED=N for the seed), through a release
# qcsim, printing what each checked and its wall time and peak memory
# (qcsim's own line, and /usr/bin/time -v's when it is installed).
# Usage: scripts/replay-recorded.sh (builds `cargo build --release -p
# qcsim` first unless QCSIM names a binary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
traces=$here/../sim/tests/sim/traces
crashes=${CRASHES:-8}
seed=${SEED:-0}
if [ -z "${QCSIM:-}" ]; then
  (cd "$here/.." && cargo build --release -q -p qcsim)
  QCSIM=$here/../target/release/qcsim
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
status=0
# name size
for spec in "mke2fs-d 256M" "sqlite 64M"; do
  set -- $spec
  t=$traces/$1.trace.zst
  echo "== $1.trace.zst ($(stat -c %s "$t") bytes), --size $2 --crashes $crashes --seed $seed"
  cmd=("$QCSIM" trace run "$t" --size "$2" --crashes "$crashes" --seed "$seed")
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v "${cmd[@]}" 2> "$tmp" || status=1
    grep -E "Elapsed \(wall clock\)|Maximum resident set size" "$tmp" | sed 's/^\s*/  /'
  else
    "${cmd[@]}" || status=1
  fi
done
exit $status
