#!/usr/bin/env bash
# Configures and builds dpl into build/ (Release, ccache when installed). With CI=true, compiler
# warnings are errors. Extra arguments go to the configure step, e.g. -DDPL_WITH_NCCL=OFF.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
warnings_as_errors=OFF
[[ ${CI:-} == true ]] && warnings_as_errors=ON
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDPL_WARNINGS_AS_ERRORS="$warnings_as_errors" "$@"
cmake --build "$root/build" -j "${DPL_BUILD_JOBS:-$(nproc)}"
