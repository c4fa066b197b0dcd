#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up and runs every test: installs packages, builds with warnings as
# errors, runs the default suites, then again under ASan+UBSan, then the unit
# tests under valgrind, and last the long end-to-end tests on real Debian
# packages (suite e2e; STRATA_SKIP_E2E=1 leaves them out). Exit status is
# non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

section() { printf '\n==== %s ====\n' "$*"; }

section "build (werror)"
[ -f build-ci/build.ninja ] || meson setup build-ci --werror >/dev/null
ninja -C build-ci

section "tests"
meson test -C build-ci --print-errorlogs --num-processes 2 --no-suite e2e

section "build (ASan+UBSan)"
[ -f build-asan/build.ninja ] || meson setup build-asan --werror -Db_sanitize=address,undefined \
  -Db_lundef=false >/dev/null
ninja -C build-asan

section "tests under ASan+UBSan"
meson test -C build-asan --setup=asan --print-errorlogs --num-processes 2 --no-suite e2e

section "unit tests under valgrind"
meson test -C build-ci --setup=valgrind --suite common --suite cache --suite oci --suite fuzz \
  --print-errorlogs --num-processes 2

if [ "${STRATA_SKIP_E2E:-0}" != 1 ]; then
  section "long end-to-end tests on real Debian packages (suite e2e)"
  meson test -C build-ci --suite e2e --print-errorlogs --num-processes 1
fi

section "all tests passed"
