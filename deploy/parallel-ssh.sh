#!/usr/bin/env bash
# A campaign over a few machines with GNU parallel over ssh: one shard per
# process, as many processes per host as it has CPUs / JOBS_PER_SHARD;
# each shard's report comes back here and the shards are merged.
#
#   deploy/parallel-ssh.sh HOSTS_FILE SEEDS SHARDS [OUT]
#   deploy/parallel-ssh.sh hosts.txt 0..40000 16 out
#
# HOSTS_FILE is parallel's --sshloginfile (one "N/user@host" a line: N
# processes on host). Every host needs `qcsim` on its PATH (or set QCSIM to
# its path there) and run-shard.sh beside it, copied below.
set -euo pipefail
if [ "$#" -lt 3 ]; then
  echo "usage: $0 HOSTS_FILE SEEDS SHARDS [OUT]" >&2
  exit 2
fi
hosts="$1" seeds="$2" shards="$3" out="${4:-out}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
cd "$out"
# --transferfile copies run-shard.sh to each host's working directory;
# --return brings the shard's report and corpus back; --cleanup removes
# them there; --env passes QCSIM, the qcsim command on the hosts.
cp "$here/run-shard.sh" .
export QCSIM="${QCSIM:-qcsim}"
parallel --sshloginfile "$hosts" --workdir ... --env QCSIM \
  --transferfile run-shard.sh \
  --return "shard-{}-of-$shards" --return "corpus-{}-of-$shards" --cleanup \
  --halt never --joblog joblog.txt \
  bash ./run-shard.sh --seeds "$seeds" --shard-index '{}' --shard-count "$shards" --out . \
  ::: $(seq 0 $((shards - 1))) # word splitting meant: one argument per shard
# Every shard's report must be back before the merge: a missing one is
# named (its line in joblog.txt says what happened).
for i in $(seq 0 $((shards - 1))); do
  if [ ! -f "shard-$i-of-$shards/summary.json" ]; then
    echo "$0: shard $i of $shards wrote no report; see joblog.txt" >&2
    exit 1
  fi
done
qcsim report merge shard-*-of-"$shards" -o merged
