#!/usr/bin/env bash
# deploy/parallel-ssh.sh run for real against ":" (this machine, GNU
# parallel's local sshlogin):
#
#   deploy/parallel-local.sh [--kill-shard I] [--ssh-shim]
#
# Installs parallel when missing; runs the recipe for --seeds 0..400 as 4
# shards and compares the merged totals and trace hash with one
# `qcsim campaign --seeds 0..400` run here. Everything it writes is under
# a temporary directory, removed at exit.
#
# --kill-shard I: shard I's campaign is killed (SIGKILL, 0.3 s in, by a
# QCSIM wrapper); the recipe's merge must fail naming shard-I-of-4, and
# running the recipe again (as its header says) must rerun only that
# shard and complete the campaign.
#
# --ssh-shim: the sshlogin is not ":" but a host reached through a
# stand-in for ssh (an sshlogin may name its ssh command) that runs the
# command here, in a directory of its own as the remote login directory:
# parallel's remote path (the environment sent with the command, --return
# by rsync) without an ssh server.
#
# Exit status: 0 when the merged report equals the single run; non-zero
# otherwise. Environment: QCSIM (default: this checkout's release build).
set -euo pipefail
# shellcheck source=deploy/local-common.sh
. "$(dirname "$0")/local-common.sh"

seeds=0..400 shards=4 kill="" shim=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --kill-shard) kill="${2:?--kill-shard I}"; shift 2 ;;
    --ssh-shim) shim=1; shift ;;
    *) echo "usage: $0 [--kill-shard I] [--ssh-shim]" >&2; exit 2 ;;
  esac
done
install_missing parallel:parallel jq:jq
[ -z "$shim" ] || install_missing rsync:rsync
locate_qcsim

work="$(mktemp -d "${TMPDIR:-/tmp}/qcsim-parallel.XXXXXX")"
trap 'rm -rf "$work"' EXIT
sshlogin=":"
if [ -n "$shim" ]; then
  mkdir "$work/remote"
  # ssh's command line as parallel and rsync give it: options, the host,
  # then the command, run in the "remote" login directory.
  cat >"$work/ssh-shim" <<SHIM
#!/usr/bin/env bash
while [ "\$#" -gt 0 ] && [ "\$1" != shimhost ]; do shift; done
shift
[ "\${1:-}" != -- ] || shift
cd "$work/remote" && HOME="$work/remote" exec bash -c "\$*"
SHIM
  chmod +x "$work/ssh-shim"
  sshlogin="$work/ssh-shim shimhost"
fi
# One shard at a time: each runs on all the CPUs (run-shard.sh's nproc).
echo "1/$sshlogin" >"$work/hosts"
# parallel keeps its own files under ~/.parallel, even for ":"; a
# temporary home keeps the real one as it was.
recipe() {
  HOME="$work/home" "$repo/deploy/parallel-ssh.sh" "$work/hosts" "$seeds" "$shards" "$work/out"
}
# The recipe's output without the shards' campaign summaries (each
# prints a page of counters): the lines that say what ran and how it
# ended.
brief() {
  grep -E '^(campaign:|trace hash:|merged |qcsim:|parallel:)|parallel-ssh.sh:|Killed' "$1" | sed 's/^/  /'
}
shard_list() {
  echo "joblog (Seq Host Exitval Signal; ${SECONDS}s since the first run):"
  awk -F'\t' 'NR > 1 { print "  " $1, $2, $7, $8 }' "$work/out/joblog.txt" | sed "s|$work|TMP|g"
  shard_reports "$work/out" "$shards"
}

echo "parallel $(parallel --version | head -n 1 | cut -d' ' -f3), sshlogin 1/${sshlogin/#$work/TMP}"
single_campaign "$seeds" "$work/single"
SECONDS=0

echo "run: deploy/parallel-ssh.sh hosts $seeds $shards out"
if [ -n "$kill" ]; then
  real="$QCSIM"
  cat >"$work/killing-qcsim" <<EOF
#!/usr/bin/env bash
# qcsim, except that shard $kill's campaign is killed 0.3 s in.
case " \$* " in
  *" --shard $kill/$shards "*)
    "$real" "\$@" &
    pid=\$!
    sleep 0.3
    kill -KILL "\$pid"
    wait "\$pid" ;;
  *) exec "$real" "\$@" ;;
esac
EOF
  chmod +x "$work/killing-qcsim"
  status=0
  QCSIM="$work/killing-qcsim" recipe >"$work/killed.txt" 2>&1 || status=$?
  brief "$work/killed.txt"
  echo "  (exit $status)"
  shard_list
  if [ "$status" -eq 0 ]; then
    echo "$0: the recipe succeeded with shard $kill killed" >&2
    exit 1
  fi
  if ! grep -q "missing shard-$kill-of-$shards " "$work/killed.txt"; then
    echo "$0: the merge did not name shard-$kill-of-$shards" >&2
    exit 1
  fi
  echo "rerun: deploy/parallel-ssh.sh hosts $seeds $shards out (the same command)"
fi
recipe >"$work/run.txt" 2>&1 || { brief "$work/run.txt"; exit 1; }
brief "$work/run.txt"
shard_list
if [ -n "$shim" ]; then
  echo "left in the remote login directory: $(cd "$work/remote" && echo shard-* corpus-*)"
fi
same_campaign "$work/out/merged" "$work/single"
