#!/usr/bin/env bash
# Record the real workloads replayed by sim/tests/sim/trace_recorded.rs and
# scripts/replay-recorded.sh (sim/tests/sim/traces/*.trace.zst), on this
# machine, without root: each program writes a plain file standing for a
# raw disk image, under `strace -f -e trace=pwrite64,pwritev,pwritev2,
# fsync,fdatasync,fallocate`, and `qcsim trace import strace` turns the
# recording into a trace, compressed with `zstd -19`.
#
# - mke2fs-d.trace.zst (large, about 10^5 requests): `mke2fs -q -F -t ext4
#   -E discard -d DIR fs.raw` on a 256 MiB file, populating the file system
#   from DIR: 10000 files in 100 directories, sizes drawn from {200, 1500,
#   3000, 6000, 12000, 30000} bytes and contents from Python's
#   random.Random(12), so DIR is the same on every machine. Replay with
#   --size 256M.
# - sqlite.trace.zst (smaller, about 10^4 requests): `sqlite3 db.sqlite`
#   running a generated script (random.Random(7)): page_size 4096,
#   journal_mode DELETE, synchronous FULL, a table with an index, 300
#   transactions of 20 inserts with blobs of 50 to 5000 bytes, an update
#   every third and a delete every tenth, then VACUUM. Only the database
#   file's writes and fsyncs are kept (--fd 3: sqlite3 opens it first; the
#   rollback journal and the directory are other descriptors). Replay with
#   --size 64M.
#
# What does not reproduce exactly: mke2fs visits DIR in readdir order (that
# of the file system DIR is made on) and sqlite's page choices follow its
# version; the request counts the tests assert are those of the files in
# the repository, not of a new recording. Rerun: scripts/record-workloads.sh
# [OUT_DIR] (needs strace, mke2fs, sqlite3, python3, zstd and a built qcsim:
# `cargo build --release -p qcsim`; `scripts/setup-recording.sh` installs the packages), then
# update the counts in trace_recorded.rs and docs/measured.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(cd "${1:-$here/../sim/tests/sim/traces}" && pwd)
qcsim=${QCSIM:-$here/../target/release/qcsim}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
calls=pwrite64,pwritev,pwritev2,fsync,fdatasync,fallocate
py=$(python3 -c 'import sys; print(sys.executable)')
cd "$work"

# The directory mke2fs copies in.
"$py" - <<'PY'
import os, random
r = random.Random(12)
for i in range(10000):
    sub = f"dir/{i % 100:02d}"
    os.makedirs(sub, exist_ok=True)
    n = r.choice([200, 1500, 3000, 6000, 12000, 30000])
    with open(f"{sub}/f{i:05d}", "wb") as f:
        f.write(r.randbytes(n))
PY
truncate -s 256M fs.raw
strace -f -e trace=$calls -o mke2fs-d.strace \
  mke2fs -q -F -t ext4 -E discard -d dir fs.raw
"$qcsim" trace import strace mke2fs-d.strace -o mke2fs-d.trace

# The SQL sqlite3 runs.
"$py" - > load.sql <<'PY'
import random
r = random.Random(7)
print("PRAGMA page_size=4096;")
print("PRAGMA journal_mode=DELETE;")
print("PRAGMA synchronous=FULL;")
print("CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);")
print("CREATE INDEX tk ON t(k);")
n = 0
for tx in range(300):
    print("BEGIN;")
    for _ in range(20):
        n += 1
        size = r.choice([50, 400, 1500, 5000])
        print(f"INSERT INTO t VALUES({n}, 'k{r.randrange(10**6):06d}', randomblob({size}));")
    if tx % 3 == 2:
        print(f"UPDATE t SET v = randomblob(800) WHERE id % 97 = {tx % 97};")
    if tx % 10 == 9:
        print(f"DELETE FROM t WHERE id % 13 = {tx % 13};")
    print("COMMIT;")
print("VACUUM;")
PY
strace -f -e trace=$calls -o sqlite.strace sqlite3 db.sqlite < load.sql > /dev/null
"$qcsim" trace import strace --fd 3 sqlite.strace -o sqlite.trace

for t in mke2fs-d sqlite; do
  zstd -19 -q -f "$t.trace" -o "$out/$t.trace.zst"
done
ls -l "$out"/*.trace.zst
