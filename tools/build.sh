#!/usr/bin/env bash
# Configures and builds dpl into build/ (Release, ccache when installed) against the pinned
# PyTorch 2 of dpl's Python environment (tools/setup.sh makes it). With CI=true, compiler
# warnings are errors. Extra arguments go to the configure step, e.g. -DDPL_WITH_NCCL=OFF.
#   tools/build.sh --system-torch [ARGS]   against Debian's libtorch 1.13 instead, into
#                                          build-system-torch/ (tools/check_system_torch.sh)
# DPL_BUILD_TARGETS="a b" builds those targets only (and what they need), not everything.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
torch=()
if [[ ${1:-} == --system-torch ]]; then
  shift
  build=$root/build-system-torch
  torch=(-DDPL_TORCH=system)
fi
warnings_as_errors=OFF
[[ ${CI:-} == true ]] && warnings_as_errors=ON
# Paths below the checkout enter ccache's keys relative to it, so that a second build folder
# (build-system-torch/, another clone) reuses what the first compiled alike.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
targets=()
for target in ${DPL_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDPL_WARNINGS_AS_ERRORS="$warnings_as_errors" "${torch[@]}" "$@"
cmake --build "$build" -j "${DPL_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
