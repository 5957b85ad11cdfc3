# What deploy/slurm-local.sh and deploy/parallel-local.sh share, sourced
# by both (not run on its own): the qcsim to run, the packages to install,
# the single campaign a sharded one must equal, and the comparison.
# shellcheck shell=bash

# The checkout's top directory.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# QCSIM, the qcsim binary: as given, or this checkout's release build,
# built (or brought up to date: cargo does nothing when it is) so that a
# fresh clone runs and the reports carry this checkout's revision.
locate_qcsim() {
  if [ -z "${QCSIM:-}" ]; then
    local target="${CARGO_TARGET_DIR:-$repo/target}"
    if command -v cargo >/dev/null 2>&1; then
      (cd "$repo" && cargo build --release --quiet --bin qcsim)
    fi
    QCSIM="$target/release/qcsim"
  fi
  if [ ! -x "$QCSIM" ]; then
    echo "$0: no qcsim at $QCSIM (set QCSIM, or install cargo to build it)" >&2
    exit 1
  fi
  # Absolute: the shards run in other directories.
  QCSIM="$(cd "$(dirname "$QCSIM")" && pwd)/$(basename "$QCSIM")"
  export QCSIM
}

# install_missing COMMAND:PACKAGE...: apt-get install the packages whose
# command is missing, as .ci/setup installs QEMU's tools.
install_missing() {
  local sudo="" missing=() pair
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
}

# single_campaign SEEDS DIR: the campaign in one process, the reference
# the merged shards must equal. Exit status 1 (failing cases, report
# written) is a result like any other: the shards must find the same.
single_campaign() {
  local status=0 start=$SECONDS
  echo "single run: qcsim campaign --seeds $1 --jobs $(nproc)"
  "$QCSIM" campaign --seeds "$1" --jobs "$(nproc)" --quiet \
    --report "$2" --corpus "$2-corpus" >/dev/null || status=$?
  echo "  exit $status, $((SECONDS - start))s"
  if [ ! -f "$2/summary.json" ]; then
    echo "$0: the single campaign wrote no report (status $status)" >&2
    exit 1
  fi
}

# shard_reports OUT SHARDS: each shard's cases, time and trace hash from
# its report in OUT, or that it wrote none.
shard_reports() {
  local i report
  for i in $(seq 0 $(($2 - 1))); do
    report="$1/shard-$i-of-$2/summary.json"
    if [ -f "$report" ]; then
      echo "  shard-$i-of-$2: $(jq -r '"\(.result.cases) cases, \(.timing.runs[0].wall_seconds)s, trace hash \(.result.trace_hash)"' "$report")"
    else
      echo "  shard-$i-of-$2: no report"
    fi
  done
}

# same_campaign MERGED SINGLE: print both trace hashes; succeed when the
# merged report's result (totals, per-profile and per-switch counts, every
# case's hash, failing seeds, trace hash) is the single run's.
same_campaign() {
  local fields='.result | {cases, passed, failed, trace_hash, totals,
    per_profile, per_switches, case_hashes, failing_seeds}'
  echo "merged trace hash: $(jq -r .result.trace_hash "$1/summary.json")" \
    "($(jq -r .result.cases "$1/summary.json") cases," \
    "complete: $(jq -r .campaign.complete "$1/summary.json"))"
  echo "single trace hash: $(jq -r .result.trace_hash "$2/summary.json")" \
    "($(jq -r .result.cases "$2/summary.json") cases)"
  if cmp -s <(jq -S "$fields" "$1/summary.json") <(jq -S "$fields" "$2/summary.json"); then
    echo "same campaign: totals and trace hash equal"
  else
    echo "DIFFERENT: the merged shards are not the single campaign" >&2
    diff <(jq -S "$fields" "$1/summary.json") <(jq -S "$fields" "$2/summary.json") | head -20 >&2
    return 1
  fi
}
