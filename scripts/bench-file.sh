#!/usr/bin/env bash
# The real-file benchmark matrix of the bench log it prints: qcsim
# bench against qemu-img bench (--compare-qemu, same flags, a fresh copy of
# the same image), writes and reads, cache none and writeback, depth 1 and
# 64, 20000 requests of 4 KiB, on 1 GiB images with 64 KiB clusters.
#
# Usage: scripts/bench-file.sh QCSIM_BINARY WORK_DIR [REPEATS]
# WORK_DIR must be on the file system to measure (not tmpfs for -t none).
# Writes go to a fresh image each run; reads to an image whose first 80 MiB
# (all that 20000 requests of 4 KiB touch) qemu-io wrote beforehand, so that
# reads meet data, not holes.
set -euo pipefail

qcsim=${1:?qcsim binary}
dir=${2:?work directory}
repeats=${3:-3}
mkdir -p "$dir"
img="$dir/bench.qcow2"

echo "# qcsim bench vs qemu-img bench, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(qemu-img --version | head -1)"
echo "# file system of $dir: $(df -T "$dir" | awk 'NR==2 {print $2 " on " $1}')"
echo "# $(nproc) cores; kernel $(uname -r)"
echo

fresh() {
    rm -f "$img"
    qemu-img create -q -f qcow2 -o cluster_size=64k "$img" 1G
}

for mode in write read; do
    for cache in none writeback; do
        for depth in 1 64; do
            for rep in $(seq 1 "$repeats"); do
                fresh
                if [ "$mode" = read ]; then
                    qemu-io -c "write -P 0x5a 0 80M" "$img" >/dev/null
                    flags=(--pattern 0x5a)
                else
                    flags=(-w --pattern 0x5a)
                fi
                echo "## $mode, -t $cache, -d $depth, run $rep (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
                "$qcsim" bench -c 20000 -s 4k -d "$depth" -t "$cache" "${flags[@]}" \
                    --compare-qemu "$img"
                echo
            done
        done
    done
done
# What delayed_cow costs or saves on a real file: qcsim alone, all switches
# on against delayed_cow off, fresh image each run.
for depth in 1 64; do
    for rep in $(seq 1 "$repeats"); do
        for off in "" "--off delayed_cow"; do
            fresh
            echo "## extra: write, -t none, -d $depth, ${off:-all switches on}, run $rep (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
            # shellcheck disable=SC2086
            "$qcsim" bench -c 20000 -s 4k -d "$depth" -t none -w $off "$img" |
                grep -E '^Run completed|^Engine'
            echo
        done
    done
done
rm -f "$img"
