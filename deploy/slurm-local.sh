#!/usr/bin/env bash
# deploy/slurm-array.sh run for real, on a one-node Slurm cluster on this
# machine: the same `sbatch --array` path a real cluster takes.
#
#   deploy/slurm-local.sh [--kill-shard I]
#
# Installs slurm-wlm and munge when missing; writes a slurm.conf for this
# machine into a temporary directory and starts munged, slurmctld and
# slurmd from it (their own key, socket, ports, state and logs: nothing
# system-wide is configured or started); submits the recipe for
# --seeds 0..400 as an array of 4 shards, merges the shards' reports in a
# job that depends on the array, and compares the merged totals and trace
# hash with one `qcsim campaign --seeds 0..400` run here. Everything is
# stopped and removed at exit, failed or not.
#
# --kill-shard I: cancel array task I (scancel) while it runs; the merge
# must fail naming shard-I-of-4, and then the recipe's rerun of that shard
# alone must complete the campaign.
#
# Exit status: 0 when the merged report equals the single run; non-zero
# when they differ, a shard failed (other than the one killed on purpose,
# and that one after its rerun), or the cluster did not start.
#
# Environment: QCSIM (default: this checkout's release build),
# QCSIM_SLURM_PORT (slurmctld's port, slurmd takes the next; default
# 16817, away from a system Slurm's 6817). Run as root: slurmd starts
# jobs as their user.
set -euo pipefail
# shellcheck source=deploy/local-common.sh
. "$(dirname "$0")/local-common.sh"

seeds=0..400 shards=4 kill=""
case "${1:-}" in
  "") ;;
  --kill-shard) kill="${2:?--kill-shard I}" ;;
  *) echo "usage: $0 [--kill-shard I]" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "$0: run as root (slurmd starts jobs as their user)" >&2
  exit 2
fi
install_missing slurmctld:slurm-wlm munged:munge jq:jq
locate_qcsim

work="$(mktemp -d "${TMPDIR:-/tmp}/qcsim-slurm.XXXXXX")"
# munged refuses a socket in a directory not everyone can search (clients
# of any user must reach it), and mktemp -d is 0700.
chmod 755 "$work"
mkdir -m 700 "$work/munge"
mkdir -m 755 "$work/run"
mkdir "$work/state" "$work/spool" "$work/log" "$work/out"
export SLURM_CONF="$work/slurm.conf"

cleanup() {
  local status=$? pids=() pid
  # Jobs first (a failure may leave some queued or running), then the
  # daemons, each by the pid it wrote, waited for (they write their state
  # and logs as they stop) before their directory goes.
  for pid in slurmd slurmctld munged; do
    if [ -f "$work/run/$pid.pid" ]; then pids+=("$(cat "$work/run/$pid.pid")"); fi
  done
  if [ -f "$work/run/slurmctld.pid" ]; then
    scancel --quiet --partition=local 2>/dev/null || true
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  if [ "$status" -ne 0 ] && [ -d "$work/log" ]; then
    echo "--- Slurm's logs (the run failed)" >&2
    tail -n 20 "$work"/log/*.log >&2 || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A key of our own for munged, and its socket in our directory; Slurm is
# told where with AuthInfo=socket=... (auth/munge and cred/munge both use
# it).
mungekey --create --keyfile="$work/munge/munge.key" >/dev/null
munged --socket="$work/run/munge.socket" --key-file="$work/munge/munge.key" \
  --log-file="$work/log/munged.log" --pid-file="$work/run/munged.pid" \
  --seed-file="$work/munge/munged.seed"

# The node's line from slurmd -C (CPUs, sockets, cores, threads,
# RealMemory), under a name of our own: slurmd -N picks it, whatever the
# hostname. slurm-array.sh asks for 2 CPUs and 2G: a machine with fewer
# than 2 CPUs cannot run it unchanged, and says so at sbatch.
hardware="$(slurmd -C | head -n 1)"
hardware="${hardware#NodeName=* }"
port="${QCSIM_SLURM_PORT:-16817}"
cat >"$SLURM_CONF" <<EOF
ClusterName=qcsimlocal
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/run/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
# No cgroups: a container (this one) may not let us create them.
# linuxproc finds a job's processes by parent pid, task/none binds nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd: finished jobs stay visible to squeue for MinJobAge.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
# Cores and memory are what tasks are given, as on a real cluster, so
# --cpus-per-task=2 --mem=2G mean what they say: on a 2-CPU node the
# shards run one at a time.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=600
MailProg=/bin/true
NodeName=qcsimnode NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=local Nodes=qcsimnode Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld
slurmd -N qcsimnode
# Up when the node is idle (slurmd registered with slurmctld).
for _ in $(seq 60); do
  if [ "$(sinfo -h -n qcsimnode -o %t 2>/dev/null)" = idle ]; then break; fi
  sleep 1
done
if [ "$(sinfo -h -n qcsimnode -o %t 2>/dev/null)" != idle ]; then
  echo "$0: the node did not come up: $(sinfo -h -N -o '%N %t %E' 2>&1)" >&2
  exit 1
fi
echo "slurm: $(sinfo -V), node: $(sinfo -h -N -o '%N %c CPUs %m MB %t')"

single_campaign "$seeds" "$work/single"
SECONDS=0

# The recipe as its header says, from the checkout's top directory; the
# tasks' output files go to the temporary directory, not the checkout.
out="$work/out"
logs="$work/log/qcsim-%A_%a.out"
cd "$repo"
job="$(OUT="$out" sbatch --parsable --array="0-$((shards - 1))" --output="$logs" \
  deploy/slurm-array.sh "$seeds")"
echo "submitted array job $job: sbatch --array=0-$((shards - 1)) deploy/slurm-array.sh $seeds"

if [ -n "$kill" ]; then
  # A shard of 100 seeds runs for a second or two: poll for it running,
  # then cancel it mid-campaign as a lost node or an operator would.
  for _ in $(seq 1200); do
    state="$(squeue -h -j "${job}_$kill" -t all -o %T 2>/dev/null || true)"
    [ "$state" = PENDING ] || break
    sleep 0.1
  done
  if [ "$state" != RUNNING ]; then
    echo "$0: task $kill was $state, not running, when it was to be killed" >&2
    exit 1
  fi
  sleep 0.3
  scancel "${job}_$kill"
  echo "killed: scancel ${job}_$kill (shard $kill of $shards, running)"
fi

# merge JOBID: the recipe's merging job, run once that job (every task
# of the array) ended, whatever its tasks' exit; its output printed.
merge() {
  local status=0
  sbatch --parsable --wait --job-name=qcsim-merge --dependency="afterany:$1" \
    --output="$work/log/merge-%j.out" \
    --wrap "$QCSIM report merge --complete $out/shard-*-of-$shards -o $out/merged" \
    >"$work/merge.id" || status=$?
  echo "merge job $(cat "$work/merge.id"), exit $status:"
  sed 's/^/  /' "$work/log/merge-$(cat "$work/merge.id").out"
  return "$status"
}
shard_list() {
  echo "shards (array job $1; ${SECONDS}s since the first submission):"
  squeue -h -r -j "$1" -t all -o '  %i %T' | sort
  shard_reports "$out" "$shards"
}

if merge "$job"; then
  merged=ok
else
  merged=failed
fi
shard_list "$job"
if [ -n "$kill" ]; then
  if [ "$merged" = ok ]; then
    echo "$0: the merge succeeded with shard $kill killed" >&2
    exit 1
  fi
  if ! grep -q "missing shard-$kill-of-$shards " "$work"/log/merge-*.out; then
    echo "$0: the merge did not name shard-$kill-of-$shards" >&2
    exit 1
  fi
  echo "task ${job}_$kill's output:"
  sed 's/^/  /' "$work/log/qcsim-${job}_$kill.out"
  echo "rerun: QCSIM_SHARDS=$shards sbatch --array=$kill deploy/slurm-array.sh $seeds"
  rerun="$(OUT="$out" QCSIM_SHARDS="$shards" sbatch --parsable --array="$kill" \
    --output="$logs" deploy/slurm-array.sh "$seeds")"
  merge "$rerun"
  job="$rerun"
  shard_list "$rerun"
elif [ "$merged" != ok ]; then
  echo "$0: the merge failed: a shard failed (the tasks' output follows)" >&2
  tail -n 5 "$work"/log/qcsim-*.out >&2
  exit 1
fi
same_campaign "$out/merged" "$work/single"
