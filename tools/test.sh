#!/usr/bin/env bash
# Sets up, builds and runs every test (what CI runs: .ci/run).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/tools/setup.sh"
bash "$root/tools/build.sh"
ctest --test-dir "$root/build" --output-on-failure -j "${DPL_TEST_JOBS:-2}"
