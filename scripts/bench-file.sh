#!/usr/bin/env bash
# The seeds' benchmarks on a real file: qcsim bench against qemu-img bench,
# the same flags, alternating within each repetition (qcsim first on odd
# repetitions, qemu-img first on even ones, so that drift in the machine's
# load falls on both), each run on a fresh image. Prints one table: per
# job, the median over the repetitions of each tool's time and the ratio
# qcsim/qemu-img (below 1: qcsim faster; the goal is 0.8 or less), and
# qcsim's peak memory.
#
# Two times per run: "run" is the time both tools print ("Run completed
# in"), from the first request to the last completion; "whole" is the
# process's wall time (open, run and close: metadata writeback, and for
# qcsim the COW its delayed_cow put off, which the close performs).
#
# The jobs (COUNT requests each, 64 KiB-cluster qcow2 images of 2 GiB):
#   seq4k-d64      4 KiB sequential writes, O_DIRECT (-t none), depth 64
#   seq4k-d1       the same at depth 1
#   step64k        4 KiB writes 64 KiB apart (-S 64k): a new cluster each
#                  (seed 001's COW of zeroes), -t none, depth 64
#   overlay        4 KiB sequential writes, -t none, depth 64, into a fresh
#                  overlay over a full raw backing file (COW from it)
#   writeback      4 KiB sequential writes, -t writeback, depth 64
#   dd-1m          1 MiB sequential writes at depth 1, -t none (COUNT/40
#                  of them, at least 64)
#   dd-1m-raw      the dd job on a raw file: qemu-img bench on it; the
#                  ratio printed for it is qcsim on qcow2 (dd-1m) against
#                  qemu-img on raw
#
# Usage: scripts/bench-file.sh QCSIM_BINARY WORK_DIR [REPEATS] [COUNT]
# (defaults 5 and 20000). WORK_DIR must be on the file system to measure
# (not tmpfs: -t none needs O_DIRECT). Needs qemu-img, qemu-io and GNU
# time (/usr/bin/time). Nothing it writes is kept but what it prints.
set -euo pipefail

qcsim=${1:?qcsim binary}
dir=${2:?work directory}
repeats=${3:-5}
count=${4:-20000}
dd_count=$((count / 40 > 64 ? count / 40 : 64))
mkdir -p "$dir"
img="$dir/bench.img"
backing="$dir/backing.raw"
log="$dir/runs.log"
: >"$log"
[ -x /usr/bin/time ] || { echo "bench-file.sh: needs GNU time (/usr/bin/time; Debian package time)" >&2; exit 1; }

echo "# qcsim bench vs qemu-img bench, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# qcsim: $qcsim ($(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo 'revision unknown'))"
echo "# $(qemu-img --version | head -1)"
echo "# file system of $dir: $(df -T "$dir" | awk 'NR==2 {print $2 " on " $1}')"
echo "# $(nproc) cores; kernel $(uname -r); $repeats repetitions; $count requests of 4 KiB, $dd_count of 1 MiB"
echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"

# The overlay job's backing file: 2 GiB, every byte written once.
qemu-img create -q -f raw "$backing" 2G
# (qemu-io writes at most 2 GiB - 512 at once).
if ! out=$(qemu-io -f raw -c "write -P 0x11 0 1G" -c "write -P 0x11 1G 1G" "$backing"); then
    echo "bench-file.sh: writing the backing file failed: $out" >&2
    exit 1
fi

# fresh JOB: the job's image, new.
fresh() {
    rm -f "$img"
    case $1 in
        overlay) qemu-img create -q -f qcow2 -o cluster_size=64k -b "$backing" -F raw "$img" ;;
        dd-1m-raw) qemu-img create -q -f raw "$img" 2G ;;
        *) qemu-img create -q -f qcow2 -o cluster_size=64k "$img" 2G ;;
    esac
}

# flags JOB: the bench flags both tools get.
flags() {
    case $1 in
        seq4k-d64) echo "-w -t none -d 64 -s 4k -c $count" ;;
        seq4k-d1) echo "-w -t none -d 1 -s 4k -c $count" ;;
        step64k) echo "-w -t none -d 64 -s 4k -S 64k -c $count" ;;
        overlay) echo "-w -t none -d 64 -s 4k -c $count" ;;
        writeback) echo "-w -t writeback -d 64 -s 4k -c $count" ;;
        dd-1m | dd-1m-raw) echo "-w -t none -d 1 -s 1M -c $dd_count" ;;
    esac
}

# once TOOL JOB REP: one run on a fresh image; appends "JOB TOOL RUN WHOLE
# PEAK_KIB" to the log.
once() {
    local tool=$1 job=$2 out
    fresh "$job"
    # The image's pages are written back before the clock starts.
    sync
    # shellcheck disable=SC2046
    if [ "$tool" = qcsim ]; then
        out=$(/usr/bin/time -f 'time %e %M' "$qcsim" bench --pattern 0x5a $(flags "$job") "$img" 2>&1)
    else
        out=$(/usr/bin/time -f 'time %e %M' qemu-img bench --pattern=0x5a $(flags "$job") "$img" 2>&1)
    fi
    local run whole peak
    run=$(sed -n 's/^Run completed in \([0-9.]*\) seconds\./\1/p' <<<"$out")
    read -r whole peak < <(sed -n 's/^time \([0-9.]*\) \([0-9]*\)$/\1 \2/p' <<<"$out")
    if [ -z "$run" ] || [ -z "$whole" ]; then
        echo "bench-file.sh: $tool on $job printed no time:" >&2
        echo "$out" >&2
        exit 1
    fi
    echo "$job $tool $run $whole $peak" >>"$log"
}

jobs="seq4k-d64 seq4k-d1 step64k overlay writeback dd-1m dd-1m-raw"
for rep in $(seq 1 "$repeats"); do
    echo "# repetition $rep, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    for job in $jobs; do
        if [ "$job" = dd-1m-raw ]; then
            once qemu-img "$job"
        elif [ $((rep % 2)) = 1 ]; then
            once qcsim "$job"
            once qemu-img "$job"
        else
            once qemu-img "$job"
            once qcsim "$job"
        fi
    done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# median JOB TOOL FIELD (3: run, 4: whole, 5: peak KiB)
median() {
    awk -v j="$1" -v t="$2" -v f="$3" '$1 == j && $2 == t { print $f }' "$log" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# spread JOB TOOL FIELD: min-max
spread() {
    awk -v j="$1" -v t="$2" -v f="$3" '$1 == j && $2 == t { print $f }' "$log" | sort -g |
        awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%s-%s", lo, hi; else print "-" }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "-") printf "%.2f", a / b; else print "-" }'; }

printf '%-10s %9s %9s %6s   %9s %9s %6s   %9s  %s\n' job "qcsim s" "qemu s" ratio "qcsim s" "qemu s" ratio "qcsim MiB" "spread of run times (qcsim; qemu-img)"
printf '%-10s %9s %9s %6s   %9s %9s %6s\n' "" run run run whole whole whole
for job in $jobs; do
    if [ "$job" = dd-1m-raw ]; then
        # qcsim on qcow2 (dd-1m) against qemu-img on raw.
        q=$(median dd-1m qcsim 3) e=$(median dd-1m-raw qemu-img 3)
        qw=$(median dd-1m qcsim 4) ew=$(median dd-1m-raw qemu-img 4)
        printf '%-10s %9s %9s %6s   %9s %9s %6s   %9s  %s\n' "$job" "$q" "$e" "$(ratio "$q" "$e")" \
            "$qw" "$ew" "$(ratio "$qw" "$ew")" "-" "(qcsim: dd-1m on qcow2; -; $(spread dd-1m-raw qemu-img 3))"
        continue
    fi
    q=$(median "$job" qcsim 3) e=$(median "$job" qemu-img 3)
    qw=$(median "$job" qcsim 4) ew=$(median "$job" qemu-img 4)
    mem=$(awk -v k="$(median "$job" qcsim 5)" 'BEGIN { printf "%.0f", k / 1024 }')
    printf '%-10s %9s %9s %6s   %9s %9s %6s   %9s  %s\n' "$job" "$q" "$e" "$(ratio "$q" "$e")" \
        "$qw" "$ew" "$(ratio "$qw" "$ew")" "$mem" "($(spread "$job" qcsim 3); $(spread "$job" qemu-img 3))"
done
echo
echo "ratio: qcsim's median time over qemu-img's (below 1: qcsim faster; goal 0.8); dd-1m-raw: qcsim on qcow2 over qemu-img on raw (goal 1.1 at most)."
echo "qcsim MiB: median peak resident memory of the qcsim process (GNU time's maximum RSS)."
rm -f "$img" "$backing"
