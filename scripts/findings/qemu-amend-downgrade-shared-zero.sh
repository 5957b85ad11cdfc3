#!/usr/bin/env bash
# Finding qemu-amend-downgrade-shared-zero (docs/findings.md): a downgrade
# to compat=0.10 writes zeroes into a host cluster that a snapshot shares,
# and marks the entry COPIED with refcount 2.
#
# Usage: scripts/findings/qemu-amend-downgrade-shared-zero.sh [--tools qemu|qcsim]
#
# Runs the finding's command sequence in a temporary directory with
# `qemu-img` and `qemu-io` from PATH (--tools qemu, the default) or with
# qcsim's drop-in tools (--tools qcsim: target/release/qcsim, or $QCSIM),
# printing each command and what it printed, then one verdict line.
# Exit status: 10 the defect is still present, 11 it is gone, anything
# else the script could not run (a missing tool, a step that failed).
# `qcsim findings` runs it and reads that status; the statuses are not 0
# and 1 so that a step failing under `set -e` is never read as a verdict.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
tools=qemu
while [ $# -gt 0 ]; do
    case "$1" in
        --tools) tools=${2:?--tools needs qemu or qcsim}; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "qemu-amend-downgrade-shared-zero.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
case "$tools" in
    qemu)
        for tool in qemu-img qemu-io; do
            command -v "$tool" >/dev/null || { echo "$tool not found (run .ci/setup)" >&2; exit 2; }
        done
        img=qemu-img io=qemu-io
        "$img" --version | head -1
        ;;
    qcsim)
        # The drop-in tools are qcsim run under those names (a symlink).
        qcsim=${QCSIM:-$repo/target/release/qcsim}
        [ -x "$qcsim" ] || { echo "$qcsim not found (cargo build --release --bin qcsim)" >&2; exit 2; }
        mkdir "$dir/bin"
        ln -s "$qcsim" "$dir/bin/qemu-img"
        ln -s "$qcsim" "$dir/bin/qemu-io"
        img=$dir/bin/qemu-img io=$dir/bin/qemu-io
        echo "qcsim's drop-in tools ($qcsim)"
        ;;
    *) echo "--tools must be qemu or qcsim" >&2; exit 2 ;;
esac
cd "$dir"

# Each step echoed as a user would type it, its output (both streams) after.
step() {
    local line='$' a
    for a in "$@"; do
        case "$a" in *' '*) line+=" '$a'" ;; *) line+=" $a" ;; esac
    done
    echo "$line"
    local name=$1
    shift
    case "$name" in
        qemu-img) "$img" "$@" 2>&1 ;;
        qemu-io) "$io" "$@" 2>&1 ;;
    esac
}

step qemu-img create -f qcow2 t.qcow2 32M
step qemu-io -c 'write -P 0x11 0 1M' t.qcow2
step qemu-img snapshot -c s1 t.qcow2
step qemu-io -c 'write -z 0 64k' t.qcow2
step qemu-img amend -o compat=0.10 t.qcow2
# check exits 2 when it finds corruption: that is an observation here,
# not a failed step.
set +e
check_out=$(step qemu-img check t.qcow2)
check=$?
set -e
echo "$check_out"
echo "(qemu-img check exit status $check)"
first_error=$(echo "$check_out" | grep -m1 '^ERROR' || true)
step qemu-img convert -l snapshot.name=s1 -O raw t.qcow2 s1.raw

# The snapshot was taken over 1 MiB of 0x11 bytes: its first 64 KiB must
# still read so after the downgrade.
expected=$(head -c 65536 /dev/zero | tr '\0' '\021' | od -An -tx1 | md5sum)
got=$(head -c 65536 s1.raw | od -An -tx1 | md5sum)
if [ "$got" = "$expected" ]; then kept=yes; else kept=no; fi
echo "snapshot s1's first 64 KiB still read 0x11: $kept"

if [ "$check" -ne 0 ] || [ "$kept" = no ]; then
    echo "verdict: still present: qemu-img check exit status $check${first_error:+ ($first_error)}; snapshot s1's first 64 KiB still 0x11: $kept"
    exit 10
fi
echo "verdict: gone: qemu-img check clean; snapshot s1's first 64 KiB still 0x11: yes"
exit 11
