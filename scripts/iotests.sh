#!/usr/bin/env bash
# Runs QEMU's qemu-iotests (qcow2 on the file protocol) against either QEMU's
# own tools (the baseline) or qcsim invoked as qemu-img and qemu-io, and
# prints each test's result and a tally per tier.
#
# Usage: scripts/iotests.sh [--tools qemu|qcsim] [--tier N] [--keep] [TEST...]
#
# With no TEST, runs every test of scripts/iotests/candidates.json (or the
# tier given). QEMU's test suite is GPL and is never part of this repository:
# the script fetches the Debian source package of the installed qemu-utils at
# run time (apt, using the machine's own apt sources as deb-src) and unpacks
# its tests into the cache directory, $QCSIM_IOTESTS_CACHE or target/iotests.
# Each run's log (including diffs of failing tests) goes to
# CACHE/run-TOOLS/check.log; failing outputs stay as CACHE/run-TOOLS/NNN.out.bad.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
tools=qcsim
tier=""
tests=()
while [ $# -gt 0 ]; do
    case "$1" in
        --tools) tools=${2:?--tools needs qemu or qcsim}; shift 2 ;;
        --tier) tier=${2:?--tier needs a number}; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "iotests.sh: unknown option $1" >&2; exit 2 ;;
        *) tests+=("$1"); shift ;;
    esac
done
case "$tools" in qemu|qcsim) ;; *) echo "iotests.sh: --tools must be qemu or qcsim" >&2; exit 2 ;; esac

candidates="$repo/scripts/iotests/candidates.json"
cache=${QCSIM_IOTESTS_CACHE:-$repo/target/iotests}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

for tool in qemu-img qemu-io qemu-nbd python3 apt-get dpkg-query; do
    command -v "$tool" >/dev/null || { echo "iotests.sh: $tool not found (run .ci/setup)" >&2; exit 2; }
done

# --- QEMU's source, same version as the installed qemu-utils -------------
version=$(dpkg-query -W -f='${Version}' qemu-utils)
upstream=${version#*:}          # drop the epoch
upstream=${upstream%-*}         # drop the Debian revision
src="$cache/qemu-$upstream"
if [ ! -x "$src/tests/qemu-iotests/check" ]; then
    aptdir="$cache/apt"
    rm -rf "$aptdir"
    mkdir -p "$aptdir/lists/partial" "$aptdir/download"
    # deb-src lines derived from the machine's own binary sources: every URI
    # and suite they name, plus the codename's backports suite on the same
    # archive (qemu-utils often comes from there).
    python3 - "$aptdir/sources.list" <<'PY'
import glob, re, sys
lines = set()
codename = ""
for l in open("/etc/os-release"):
    if l.startswith("VERSION_CODENAME="):
        codename = l.split("=", 1)[1].strip().strip('"')
def add(uri, suites, comps, signed):
    opt = f"[signed-by={signed}] " if signed else ""
    for s in suites:
        lines.add(f"deb-src {opt}{uri} {s} {' '.join(comps)}")
        if s == codename:
            lines.add(f"deb-src {opt}{uri} {s}-backports {' '.join(comps)}")
for f in glob.glob("/etc/apt/sources.list.d/*.sources"):
    for stanza in re.split(r"\n\s*\n", open(f).read()):
        fields = {}
        for l in stanza.splitlines():
            if l.startswith("#") or ":" not in l:
                continue
            k, v = l.split(":", 1)
            fields[k.strip()] = v.strip()
        if "deb" not in fields.get("Types", "").split():
            continue
        for uri in fields.get("URIs", "").split():
            add(uri, fields.get("Suites", "").split(), fields.get("Components", "").split(),
                fields.get("Signed-By", ""))
for f in ["/etc/apt/sources.list"] + glob.glob("/etc/apt/sources.list.d/*.list"):
    try:
        for l in open(f):
            w = l.split("#", 1)[0].split()
            if w and w[0] == "deb":
                w = w[1:]
                signed = ""
                if w and w[0].startswith("["):
                    opts = [w.pop(0)]
                    while w and not opts[-1].endswith("]"):
                        opts.append(w.pop(0))
                    m = re.search(r"signed-by=([^\] ]+)", " ".join(opts))
                    signed = m.group(1) if m else ""
                if len(w) >= 2:
                    add(w[0], [w[1]], w[2:], signed)
    except FileNotFoundError:
        pass
open(sys.argv[1], "w").write("\n".join(sorted(lines)) + "\n")
PY
    aptopts=(-o "Dir::Etc::sourcelist=$aptdir/sources.list" -o "Dir::Etc::sourceparts=$aptdir/none"
             -o "Dir::State::Lists=$aptdir/lists" -o "Dir::Cache=$aptdir/cache")
    echo "iotests.sh: fetching the qemu $version source package" >&2
    apt-get "${aptopts[@]}" -qq update
    (cd "$aptdir/download" && apt-get "${aptopts[@]}" -qq source --download-only "qemu=$version") \
        || echo "iotests.sh: apt-get source reported errors; using the upstream tarball if it arrived" >&2
    orig=$(ls "$aptdir/download"/qemu_"$upstream".orig.tar.* 2>/dev/null | head -1)
    [ -n "$orig" ] || { echo "iotests.sh: no qemu_$upstream.orig tarball fetched" >&2; exit 1; }
    rm -rf "$src.tmp"
    mkdir -p "$src.tmp"
    tar -xf "$orig" -C "$src.tmp" --strip-components=1 --wildcards '*/tests/qemu-iotests/*' '*/python/*'
    rm -rf "$src"
    mv "$src.tmp" "$src"
    rm -rf "$aptdir/download"
fi

# --- the tools -------------------------------------------------------------
run="$cache/run-$tools"
bin="$run/bin"
rm -rf "$run"
mkdir -p "$bin" "$run/build/tests/qemu-iotests" "$run/scratch" "$run/sock"
if [ "$tools" = qcsim ]; then
    qcsim="$repo/target/release/qcsim"
    [ -x "$qcsim" ] || { echo "iotests.sh: $qcsim missing (cargo build --release -p qcsim)" >&2; exit 2; }
    ln -s "$qcsim" "$bin/qemu-img"
    ln -s "$qcsim" "$bin/qemu-io"
else
    ln -s "$(command -v qemu-img)" "$bin/qemu-img"
    ln -s "$(command -v qemu-io)" "$bin/qemu-io"
fi
ln -s "$(command -v qemu-nbd)" "$bin/qemu-nbd"
qsd=$(command -v qemu-storage-daemon || true)
[ -n "$qsd" ] || qsd=/bin/false
ln -s "$qsd" "$bin/qemu-storage-daemon"
# The system emulator is never started by the candidates; check only asks it
# for its machine and device lists.
cat > "$bin/qemu-system-stub" <<'STUB'
#!/bin/sh
case "$*" in
    "-machine help") echo "Supported machines are:"; echo "pc                   Standard PC (default)" ;;
    "-device help") echo "Storage devices:"; echo "name \"virtio-blk-pci\", bus PCI" ;;
    *) echo "qemu-system stand-in: only -machine help and -device help" >&2; exit 1 ;;
esac
STUB
chmod +x "$bin/qemu-system-stub"

# --- the list --------------------------------------------------------------
if [ ${#tests[@]} -eq 0 ]; then
    mapfile -t tests < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for name, v in sorted(d.items()):
    if not sys.argv[2] or str(v["tier"]) == sys.argv[2]:
        print(name)' "$candidates" "$tier")
fi

# --- run -------------------------------------------------------------------
iot="$src/tests/qemu-iotests"
set +e
(cd "$iot" && env QEMU_PROG="$bin/qemu-system-stub" QEMU_IMG_PROG="$bin/qemu-img" \
    QEMU_IO_PROG="$bin/qemu-io" QEMU_NBD_PROG="$bin/qemu-nbd" QSD_PROG="$bin/qemu-storage-daemon" \
    TEST_DIR="$run/scratch" SOCK_DIR="$run/sock" \
    python3 ./check -tap -qcow2 --source-dir "$iot" --build-dir "$run/build/tests/qemu-iotests" \
    "${tests[@]#tests/}") > "$run/tap.log" 2> "$run/check.log"
set -e
cp -f "$run"/scratch/*.out.bad "$run"/ 2>/dev/null || true
find "$run/scratch" -name '*.out.bad' -exec cp -f {} "$run/" \; 2>/dev/null || true

python3 - "$candidates" "$run/tap.log" "$tools" <<'PY'
import json, re, sys
cands = json.load(open(sys.argv[1]))
results = {}
for line in open(sys.argv[2]):
    m = re.match(r"(not ok|ok) \S+ (\S+)( # SKIP)?", line)
    if m:
        name = m.group(2)
        if name not in cands and "tests/" + name in cands:
            name = "tests/" + name
        results[name] = "notrun" if m.group(3) else ("pass" if m.group(1) == "ok" else "fail")
tally = {}
for name in sorted(results):
    tier = cands.get(name, {}).get("tier", "-")
    print(f"{name:40} tier {tier}  {results[name]}")
    t = tally.setdefault(tier, {"pass": 0, "fail": 0, "notrun": 0})
    t[results[name]] += 1
print(f"# tools: {sys.argv[3]}")
total = {"pass": 0, "fail": 0, "notrun": 0}
for tier in sorted(tally, key=str):
    t = tally[tier]
    for k in total:
        total[k] += t[k]
    print(f"tier {tier}: pass {t['pass']}  fail {t['fail']}  notrun {t['notrun']}")
print(f"all:    pass {total['pass']}  fail {total['fail']}  notrun {total['notrun']}")
PY
echo "# log: $run/check.log (failing outputs: $run/*.out.bad)" >&2
