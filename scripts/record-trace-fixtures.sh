#!/usr/bin/env bash
# Record the strace fixtures of the trace importer's tests
# (sim/tests/sim/traces/) on this machine:
# - mke2fs.strace: `mke2fs -t ext4 -E discard` making a file system in a
#   16 MiB raw file (pwrite64, fallocate punching holes and zeroing ranges,
#   fsync), strace -f -tt -o FILE: every line starts with a process id;
# - writer.strace: scripts/trace-writer.py (pwrite64, pwritev, pwritev2 with
#   RWF_DSYNC, a plain fallocate, punched and zeroed ranges, fdatasync and
#   fsync, a write to a second file, a failed write, two threads writing at
#   once), strace -f -tt on standard error: `[pid N]` prefixes, calls split
#   into `<unfinished ...>` and `<... resumed>`, and strace's own messages
#   cutting lines;
# - dsync-writer.strace: scripts/dsync-writer.py (writes through one
#   descriptor opened O_DSYNC, then plain with a pwritev2 RWF_DSYNC, then
#   O_SYNC by dup2; the script says how many of each), strace -f -tt with
#   the descriptor calls too (open, dup, close...: which writes are FUA)
#   and -P disk.raw, which keeps only the image file's calls (not the
#   interpreter's own opens and closes at start-up), so it stays small.
# Usage: scripts/record-trace-fixtures.sh [OUT_DIR] (needs strace, mke2fs,
# python3; `scripts/setup-recording.sh` installs strace).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../sim/tests/sim/traces}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
calls=pwrite64,pwritev,pwritev2,fsync,fdatasync,fallocate
cd "$work"
truncate -s 16M fs.raw
strace -f -tt -e trace=$calls -o "$out/mke2fs.strace" mke2fs -q -F -t ext4 -E discard fs.raw
# The interpreter itself, not a wrapper that starts it (pyenv's shims
# would add their own processes).
py=$(python3 -c 'import sys; print(sys.executable)')
strace -f -tt -e trace=$calls "$py" "$here/trace-writer.py" 2> "$out/writer.strace"
# The calls that tell which descriptors are O_DSYNC/O_SYNC. The image
# exists before strace starts, so that -P resolves its path.
fdcalls=open,openat,openat2,creat,dup,dup2,dup3,fcntl,close,close_range
rm -f disk.raw
: > disk.raw
strace -f -tt -P disk.raw -e trace=$calls,$fdcalls -o "$out/dsync-writer.strace" \
    "$py" "$here/dsync-writer.py"
wc -l "$out/mke2fs.strace" "$out/writer.strace" "$out/dsync-writer.strace"
