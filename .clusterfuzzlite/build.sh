#!/usr/bin/env bash
# Builds the cargo fuzz targets (fuzz/fuzz_targets/) into $OUT, with each
# target's seed corpus from corpus/fuzz/<target>/ beside it as
# <target>_seed_corpus.zip.
#
# ClusterFuzzLite and OSS-Fuzz run this inside the image .clusterfuzzlite/
# Dockerfile builds, with the checkout in $SRC/qcsim, $OUT set, and the
# sanitizer flags in RUSTFLAGS (cargo fuzz appends its own to them). Run by
# hand, from anywhere, it builds from the checkout it lives in into
# fuzz/out/ (git-ignored), or into $OUT if that is set:
#
#   .clusterfuzzlite/build.sh
#   fuzz/out/image_open -runs=200
#
# A failed build leaves $OUT as it was: nothing is copied there until every
# target and corpus is ready.
set -euo pipefail

die() {
    echo "build.sh: $*" >&2
    exit 1
}

if [[ -n "${SRC:-}" ]]; then
    repo="$SRC/qcsim"
else
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fi
[[ -f "$repo/fuzz/Cargo.toml" ]] || die "no fuzz/Cargo.toml under $repo (is \$SRC right?)"
cd "$repo"

out="${OUT:-$repo/fuzz/out}"
mkdir -p "$out" || die "cannot create the output directory $out"
out="$(cd "$out" && pwd)"

# Check the tools first: the build takes minutes and should not fail at the
# end for want of zip. `command -v cargo-fuzz` rather than `cargo fuzz
# --version`: in a coverage build OSS-Fuzz's cargo wrapper turns every
# `cargo fuzz ...` into a build.
command -v cargo >/dev/null || die "cargo not found; install a Rust toolchain (rustup)"
command -v cargo-fuzz >/dev/null || die "cargo-fuzz not found; run: cargo install cargo-fuzz"
command -v zip >/dev/null || die "zip not found; install it (apt-get install zip)"

# cargo fuzz needs nightly (-Zsanitizer). The OSS-Fuzz image pins one in
# RUSTUP_TOOLCHAIN; by hand, use the default toolchain if it is a nightly,
# else rustup's nightly. The toolchain goes in the environment rather than
# as `cargo +nightly`, so that OSS-Fuzz's wrapper still sees `fuzz` as its
# first argument.
# (Outputs are captured before matching: `cmd | grep -q` under pipefail
# can fail when grep exits before cmd has written everything.)
default_rustc="$(rustc --version 2>/dev/null || true)"
if [[ -z "${RUSTUP_TOOLCHAIN:-}" && "$default_rustc" != *nightly* ]]; then
    toolchains="$(rustup toolchain list 2>/dev/null || true)"
    if grep -q '^nightly' <<<"$toolchains"; then
        export RUSTUP_TOOLCHAIN=nightly
    else
        die "cargo fuzz needs a nightly toolchain: rustup toolchain install nightly"
    fi
fi
rustc_version="$(rustc --version)" || die "rustc does not run (toolchain ${RUSTUP_TOOLCHAIN:-default})"
host="$(rustc -vV | sed -n 's/^host: //p')"
[[ -n "$host" ]] || die "cannot tell the host triple from rustc -vV"

# The targets are the [[bin]] sections of fuzz/Cargo.toml (not `cargo fuzz
# list`, which OSS-Fuzz's wrapper would also turn into a build).
mapfile -t targets < <(awk '
    /^\[\[bin\]\]/ { inbin = 1; next }
    /^\[/ { inbin = 0 }
    inbin && /^name *=/ { gsub(/^name *= *"|".*$/, ""); print }
' fuzz/Cargo.toml)
(( ${#targets[@]} > 0 )) || die "no [[bin]] targets in fuzz/Cargo.toml"

echo "build.sh: ${targets[*]} from $repo with $rustc_version into $out"

# -O (release, as OSS-Fuzz builds) plus -a: the debug assertions and
# overflow checks that a plain `cargo fuzz build`/`run` (fuzz/README.md)
# has, so that CI fuzzes the same checks the engine's debug_assert!s make.
# The sanitizer is cargo fuzz's default, AddressSanitizer, the only one
# ClusterFuzzLite supports for Rust; its build check rejects a binary
# without it, so `case` cannot be built with `-s none` here.
cargo fuzz build -O --debug-assertions || die "cargo fuzz build failed; $out is unchanged"

bin_dir="${CARGO_TARGET_DIR:-$repo/fuzz/target}/$host/release"

# Everything goes to a staging directory inside $out first, then is moved
# into place, so that a failure part way leaves $out's old files whole.
stage="$(mktemp -d "$out/.build-sh.XXXXXX")"
trap 'rm -rf "$stage"' EXIT

for t in "${targets[@]}"; do
    [[ -x "$bin_dir/$t" ]] || die "cargo fuzz build made no $bin_dir/$t"
    cp "$bin_dir/$t" "$stage/$t"
    seeds="$repo/corpus/fuzz/$t"
    if [[ -d "$seeds" ]] && [[ -n "$(ls -A "$seeds")" ]]; then
        # -j: libFuzzer reads the files, not their paths.
        (cd "$seeds" && zip -q -j -r "$stage/${t}_seed_corpus.zip" .)
    fi
done

for f in "$stage"/*; do
    mv -f "$f" "$out/"
done

for t in "${targets[@]}"; do
    if [[ -f "$out/${t}_seed_corpus.zip" ]]; then
        echo "build.sh: $out/$t, seeds $out/${t}_seed_corpus.zip"
    else
        echo "build.sh: $out/$t (no seeds)"
    fi
done
