#!/usr/bin/env bash
# Install what re-recording the trace fixtures and the recorded workloads
# needs (scripts/record-trace-fixtures.sh, scripts/record-workloads.sh):
# strace, mke2fs, sqlite3 and zstd. No test needs them (the recordings are
# in the repository), so `.ci/setup` does not install them.
set -euo pipefail
if ! command -v strace >/dev/null 2>&1 || ! command -v mke2fs >/dev/null 2>&1 \
  || ! command -v sqlite3 >/dev/null 2>&1 || ! command -v zstd >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq strace e2fsprogs sqlite3 zstd
fi
