#!/usr/bin/env bash
# A campaign over a few machines with GNU parallel over ssh: one shard per
# job; each shard's report comes back here and the shards are merged.
#
#   deploy/parallel-ssh.sh HOSTS_FILE SEEDS SHARDS [OUT]
#   deploy/parallel-ssh.sh hosts.txt 0..40000 16 out
#
# HOSTS_FILE is parallel's --sshloginfile: one "N/user@host" a line, N
# shards at once on that host (a shard runs on all the CPUs it sees, so N
# is 1 unless a host has many); ":" is this machine, no ssh. Every host
# needs `qcsim` on its PATH, or QCSIM set to its path there (the merge,
# here, runs QCSIM too), and rsync (--return's); run-shard.sh travels in
# the jobs' environment.
#
# A shard whose job failed (killed, its host lost) is named by the merge.
# Run the same command again: --resume-failed reruns only the jobs that
# OUT/joblog.txt records as failed, then the merge runs again. A new
# campaign needs a new OUT (the joblog is matched by job number).
set -euo pipefail
if [ "$#" -lt 3 ]; then
  echo "usage: $0 HOSTS_FILE SEEDS SHARDS [OUT]" >&2
  exit 2
fi
hosts="$(realpath "$1")" seeds="$2" shards="$3" out="${4:-out}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
cd "$out"
export QCSIM="${QCSIM:-qcsim}"
# The script goes in an environment variable (--env passes it over ssh),
# not as a file: --transferfile and --return are ignored for ":", and
# --workdir ... would then run a local job in a directory under
# ~/.parallel/tmp, its report left there (or removed by --cleanup). With
# neither,
# a job runs in this directory on this machine and in the login directory
# on the others, and --return brings each shard's report and corpus here
# (shards never write each other's files). They stay in the login
# directory there: --cleanup removes returned files with `rm -f`, which
# leaves directories, so it is not given.
RUN_SHARD="$(cat "$here/run-shard.sh")"
export RUN_SHARD
status=0
# One command string: parallel puts the shard index for {}, and the job's
# shell expands $RUN_SHARD.
parallel --sshloginfile "$hosts" --env QCSIM --env RUN_SHARD \
  --return "shard-{}-of-$shards" --return "corpus-{}-of-$shards" \
  --halt never --joblog joblog.txt --resume-failed \
  "bash -c \"\$RUN_SHARD\" run-shard --seeds $seeds --shard-index {} --shard-count $shards --out ." \
  ::: $(seq 0 $((shards - 1))) || status=$? # word splitting meant: one argument per shard
if [ "$status" -ne 0 ]; then
  echo "$0: $status shard job(s) failed; joblog.txt says how" >&2
fi
# --complete: a shard that wrote no report fails the merge, named.
if ! "$QCSIM" report merge --complete shard-*-of-"$shards" -o merged; then
  echo "$0: run the same command again to rerun only the failed shards" >&2
  exit 1
fi
