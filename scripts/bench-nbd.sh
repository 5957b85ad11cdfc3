#!/usr/bin/env bash
# qemu-img bench through `qcsim serve` against qemu-img bench on the image
# itself: the same job (-w -t none, 4 KiB writes, depth 1 and 16) on fresh
# copies of the same 1 GiB image with 64 KiB clusters, QEMU's qcow2 driver
# on the file against QEMU's NBD client to the engine behind a Unix socket
# (the server with --nocache, so both bypass the page cache; -t none on an
# NBD client only sets the client's own cache mode).
# Prints the wall time of each run; nothing is asserted.
#
# Usage: scripts/bench-nbd.sh QCSIM_BINARY WORK_DIR [COUNT] [REPEATS]
# WORK_DIR must be on the file system to measure (not tmpfs for -t none).
set -euo pipefail

qcsim=${1:?qcsim binary}
dir=${2:?work directory}
count=${3:-20000}
repeats=${4:-3}
mkdir -p "$dir"
img="$dir/bench-nbd.qcow2"
sock="$dir/bench-nbd.sock"

echo "# qemu-img bench: direct vs over qcsim serve, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(qemu-img --version | head -1); $("$qcsim" --version)"
echo "# file system of $dir: $(df -T "$dir" | awk 'NR==2 {print $2 " on " $1}')"
echo "# $(nproc) cores; kernel $(uname -r)"

fresh() {
    rm -f "$img"
    qemu-img create -q -f qcow2 -o cluster_size=64k "$img" 1G
}

seconds() {
    # The "Run completed in N seconds." line of qemu-img bench.
    sed -n 's/^Run completed in \([0-9.]*\) seconds\.$/\1/p'
}

for depth in 1 16; do
    for rep in $(seq 1 "$repeats"); do
        fresh
        direct=$(qemu-img bench -f qcow2 -w -t none -c "$count" -s 4k -d "$depth" "$img" | seconds)
        fresh
        "$qcsim" serve --nocache --socket "$sock" "$img" 2>"$dir/serve.log" &
        server=$!
        for _ in $(seq 1 500); do [ -S "$sock" ] && break; sleep 0.02; done
        served=$(qemu-img bench -f raw -w -t none -c "$count" -s 4k -d "$depth" \
            "nbd+unix:///?socket=$sock" | seconds)
        kill -TERM "$server"
        wait "$server"
        qemu-img check -q "$img"
        echo "depth $depth run $rep: direct ${direct} s, over qcsim serve ${served} s" \
            "(load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    done
done
