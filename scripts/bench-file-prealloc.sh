#!/usr/bin/env bash
# Real-file bench of several qcsim binaries (LABEL=BINARY), qemu-img bench beside them.
# Usage: scripts/bench-file-prealloc.sh WORK_DIR REPEATS LABEL=BINARY...
# Interleaves the binaries within each repeat so they share the machine's noise.
set -euo pipefail
dir=$1; repeats=$2; shift 2; BINS=("$@")
mkdir -p "$dir"; img="$dir/bench.qcow2"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(qemu-img --version | head -1); file system of $dir: $(df -T "$dir" | awk 'NR==2 {print $2 " on " $1}'); $(nproc) cores"
for rep in $(seq 1 "$repeats"); do
  for cfg in "none 64" "none 1" "writeback 64"; do
    set -- $cfg; cache=$1; depth=$2
    for lb in "${BINS[@]}"; do
      label=${lb%%=*}; bin=${lb#*=}
      rm -f "$img"; qemu-img create -q -f qcow2 -o cluster_size=64k "$img" 1G
      echo "## $label: write, -t $cache, -d $depth, run $rep (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
      "$bin" bench -c 20000 -s 4k -d "$depth" -t "$cache" -w --pattern 0x5a --compare-qemu "$img" | grep -E '^(qcsim|qemu-img|speed ratio) '
    done
  done
done
rm -f "$img"
