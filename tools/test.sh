#!/usr/bin/env bash
# Sets up, builds and runs every test (what CI runs: .ci/run), then checks that the model plugins
# still build and train against Debian's libtorch 1.13 (tools/check_system_torch.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/tools/setup.sh"
bash "$root/tools/build.sh"
ctest --test-dir "$root/build" --output-on-failure -j "${DPL_TEST_JOBS:-2}"
bash "$root/tools/check_system_torch.sh"
