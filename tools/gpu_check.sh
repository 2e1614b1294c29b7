#!/usr/bin/env bash
# GPU check for the nccl backend, for a machine with a GPU and a pip-installed Python torch with
# CUDA (no Debian dev packages there: no Boost, maybe no system CUDA toolkit, gtest or dlpack).
#
# It builds ONLY what the check needs -- the SDK, plugins/common, the nccl and tcp plugins, the
# backend conformance test and the allreduce bench -- through a small generated CMake super-project, so
# the top-level CMakeLists (which requires Boost and the launcher) is not configured at all.
# Then it runs the NCCL conformance tests (world size 1 on real CUDA tensors, and the plugin
# symbol/table check), then tools/allreduce_perf over the tcp backend (the bench moves CPU
# tensors only; it has no CUDA path). Then one short CUDA training run: the convnet plugin built
# against pip torch (CUDA), trained with --device cuda --backend nccl at world size 1 by a launcher
# binary prepared on the dev machine (tools/gpu_prepare.sh; carry build-gpu-deps), and the same
# steps on the CPU for comparison. Everything it prints also goes to $OUT if set.
# Budget: under 8 minutes (the build is ~1 minute on 16 cores).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$(mktemp -d /tmp/dpl_gpu_check_out.XXXXXX)}"
mkdir -p "$out"
log="$out/gpu_check.log"
exec > >(tee "$log") 2>&1
work="$(mktemp -d /tmp/dpl_gpu_check.XXXXXX)"
jobs="$(nproc)"
echo "== dpl gpu_check: repo $repo, work $work, output $out"
date -u

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || echo "nvidia-smi missing"

echo "== torch (for its bundled CUDA runtime, NCCL and headers)"
python3 - > "$work/torch_paths.sh" <<'PY'
import os, glob, sys
try:
    import torch
except ImportError:
    print('echo "torch not importable; using system CUDA/NCCL/dlpack only"')
    print('TORCH_CMAKE_PREFIX=""; TORCH_DIR=""; PIP_CUDART_ROOT=""; PIP_NCCL_ROOT=""')
    sys.exit(0)
print(f'echo "torch {torch.__version__}, cuda {torch.version.cuda}, available {torch.cuda.is_available()}, devices {torch.cuda.device_count()}"')
print(f'TORCH_CMAKE_PREFIX="{torch.utils.cmake_prefix_path}"')
torch_dir = os.path.dirname(torch.__file__)
print(f'TORCH_DIR="{torch_dir}"')
# pip wheels put the CUDA runtime and NCCL under site-packages/nvidia/<lib>/{include,lib}.
site = os.path.dirname(torch_dir)
def first(pattern):
    hits = sorted(glob.glob(os.path.join(site, pattern)))
    return os.path.dirname(os.path.dirname(hits[0])) if hits else ""
print(f'PIP_CUDART_ROOT="{first("nvidia/cuda_runtime/include/cuda_runtime_api.h")}"')
print(f'PIP_NCCL_ROOT="{first("nvidia/nccl/include/nccl.h")}"')
PY
# shellcheck disable=SC1091
source "$work/torch_paths.sh"

# CUDA runtime and NCCL: a system toolkit if there is one, else the pip wheels torch uses.
cuda_args=()
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cuda_args+=("-DCUDAToolkit_ROOT=/usr/local/cuda")
elif [[ -n "$PIP_CUDART_ROOT" ]]; then
  cuda_args+=("-DDPL_CUDA_RUNTIME_ROOT=$PIP_CUDART_ROOT")
fi
if [[ -f /usr/local/cuda/include/nccl.h ]]; then
  cuda_args+=("-DNCCL_ROOT=/usr/local/cuda")
elif [[ -n "$PIP_NCCL_ROOT" ]]; then
  cuda_args+=("-DNCCL_ROOT=$PIP_NCCL_ROOT")
fi
echo "CUDA/NCCL: ${cuda_args[*]:-none found}"

# DLPack header: the system one, else the copy torch bundles (ATen/dlpack.h).
dlpack_dir="$work/dlpack_include"
if [[ -f /usr/include/dlpack/dlpack.h ]]; then
  dlpack_dir=/usr/include
else
  mkdir -p "$dlpack_dir/dlpack"
  cp "$TORCH_DIR/include/ATen/dlpack.h" "$dlpack_dir/dlpack/dlpack.h" ||
    { echo "FAIL: no dlpack/dlpack.h and no torch ATen/dlpack.h"; exit 1; }
fi

# GoogleTest: built from a source tree -- GTEST_SOURCE_DIR, else /usr/src/googletest, else
# build-gpu-deps/googletest in the checkout (an ignored folder: copy /usr/src/googletest there on
# a dev machine and carry it to the GPU machine) -- else an installed package if CMake finds one.
gtest_args=()
for candidate in "${GTEST_SOURCE_DIR:-}" /usr/src/googletest "$repo/build-gpu-deps/googletest"; do
  if [[ -n "$candidate" && -f "$candidate/CMakeLists.txt" ]]; then
    gtest_args+=("-DDPL_GTEST_SOURCE_DIR=$candidate")
    break
  fi
done

# The head of both generated CMake projects (named $1): what the top-level CMakeLists sets up
# for the plugin folders, without Boost or the launcher.
project_head() {
  cat <<CMAKE
cmake_minimum_required(VERSION 3.18)
project($1 VERSION 0.1.0 LANGUAGES C CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_CXX_VISIBILITY_PRESET hidden)
set(CMAKE_VISIBILITY_INLINES_HIDDEN ON)
set(PROJECT_SOURCE_DIR "$repo")
set(DPL_WARNING_FLAGS -Wall -Wextra)
include(GNUInstallDirs)
set(DPL_INSTALL_PLUGIN_DIR "\${CMAKE_INSTALL_LIBDIR}/dpl/plugins")
set(DPL_BUILD_PLUGIN_DIR "\${CMAKE_BINARY_DIR}/plugins_out")
file(MAKE_DIRECTORY "\${DPL_BUILD_PLUGIN_DIR}")
include("$repo/cmake/DplPlugin.cmake")
add_subdirectory("$repo/sdk" sdk)
CMAKE
}

super="$work/super"
mkdir -p "$super"
project_head dpl_gpu_check > "$super/CMakeLists.txt"
cat >> "$super/CMakeLists.txt" <<CMAKE
set(DPL_WITH_NCCL ON)
find_package(Threads REQUIRED)
add_subdirectory("$repo/plugins/common" plugins/common)
add_subdirectory("$repo/plugins/nccl" plugins/nccl)
add_subdirectory("$repo/plugins/tcp" plugins/tcp)
add_subdirectory("$repo/tools/allreduce_perf" tools/allreduce_perf)
if(DPL_GTEST_SOURCE_DIR)
  add_subdirectory("\${DPL_GTEST_SOURCE_DIR}" gtest EXCLUDE_FROM_ALL)
  if(NOT TARGET GTest::gtest)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
  set(GTest_FOUND TRUE)
else()
  find_package(GTest QUIET)
endif()
if(GTest_FOUND)
  include(GoogleTest)
  enable_testing()
  # Same contract as tests/CMakeLists.txt's dpl_add_test, without the launcher.
  function(dpl_add_test name)
    cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBRARIES" \${ARGN})
    add_executable(\${name} \${ARG_SOURCES})
    target_link_libraries(\${name} PRIVATE GTest::gtest GTest::gtest_main dpl::sdk \${ARG_LIBRARIES})
    target_include_directories(\${name} PRIVATE \${CMAKE_CURRENT_SOURCE_DIR} "$repo/tests")
    target_compile_definitions(\${name} PRIVATE
      DPL_TEST_PLUGIN_DIR="\${DPL_BUILD_PLUGIN_DIR}" DPL_TEST_LAUNCHER="none"
      DPL_TEST_BINARY_DIR="\${CMAKE_CURRENT_BINARY_DIR}" DPL_TEST_SOURCE_DIR="$repo")
  endfunction()
  add_subdirectory("$repo/tests/backends" tests/backends)
else()
  message(STATUS "gpu_check: GoogleTest not found; set GTEST_SOURCE_DIR to build the conformance test")
endif()
CMAKE

echo "== configure"
cmake_bin="$(command -v cmake || true)"
if [[ -z "$cmake_bin" ]]; then
  python3 -m pip install --quiet cmake ninja 2>/dev/null || true
  cmake_bin="$(command -v cmake)"
fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
"$cmake_bin" -S "$super" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_CMAKE_PREFIX" -DDLPACK_INCLUDE_DIR="$dlpack_dir" \
  "${cuda_args[@]}" "${gtest_args[@]}" | tee "$out/configure.log"
grep -q "dpl: nccl backend:" "$out/configure.log" || { echo "FAIL: nccl plugin not configured"; exit 1; }

echo "== build"
targets=(dpl_backend_nccl dpl_backend_tcp allreduce_perf)
"$cmake_bin" --build "$work/build" --target help | grep -q backend_conformance_test &&
  targets+=(backend_conformance_test)
timeout 300 "$cmake_bin" --build "$work/build" --target "${targets[@]}" -j "$jobs"
nm -D --defined-only "$work/build/plugins_out/libdpl_backend_nccl.so" | tee "$out/nccl_symbols.txt"

# The pip CUDA/NCCL libraries are not on the loader path by default.
export LD_LIBRARY_PATH="${PIP_NCCL_ROOT:+$PIP_NCCL_ROOT/lib:}${PIP_CUDART_ROOT:+$PIP_CUDART_ROOT/lib:}${TORCH_DIR:+$TORCH_DIR/lib:}${LD_LIBRARY_PATH:-}"

status=0
if [[ ! -x "$work/build/tests/backends/backend_conformance_test" ]]; then
  echo "FAIL: no GoogleTest sources or package here, so the conformance test was not built;"
  echo "      set GTEST_SOURCE_DIR or copy /usr/src/googletest to build-gpu-deps/googletest"
  status=2
else
  echo "== NCCL conformance (world size 1, CUDA tensors)"
  timeout 180 "$work/build/tests/backends/backend_conformance_test" \
    --gtest_filter='NcclBackend.*:BackendPlugins.*' \
    --gtest_output="xml:$out/nccl_conformance.xml" || status=1
fi
echo "== bandwidth bench (CPU tensors: the bench drives tcp; 2 ranks on loopback)"
timeout 180 "$work/build/tools/allreduce_perf/allreduce_perf" --backend tcp --world-size 2 \
  --min-bytes 8 --max-bytes 256M --iters 5 --check \
  --plugin-dir "$work/build/plugins_out" | tee "$out/allreduce_perf_tcp.txt" || status=1

echo "== CUDA training run (convnet plugin on pip torch, --device cuda, nccl, world size 1)"
deps="$repo/build-gpu-deps"
launcher="$deps/bin/launcher"
if [[ ! -x "$launcher" || ! -d "$deps/fashion-mnist" ]]; then
  echo "FAIL: no $launcher or $deps/fashion-mnist: run tools/gpu_prepare.sh on the dev machine"
  echo "      and carry build-gpu-deps (the launcher needs Boost, which this machine lacks)"
  status=1
else
  # A project of its own: if pip torch's CMake files do not configure here, the NCCL checks above
  # still stand.
  models="$work/models"
  mkdir -p "$models"
  project_head dpl_gpu_models > "$models/CMakeLists.txt"
  cat >> "$models/CMakeLists.txt" <<CMAKE
include("$repo/sdk/cmake/DplTorchModel.cmake")
add_subdirectory("$repo/models/convnet" models/convnet)
CMAKE
  if "$cmake_bin" -S "$models" -B "$work/models-build" "${generator[@]}" \
       -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_CMAKE_PREFIX" \
       -DDLPACK_INCLUDE_DIR="$dlpack_dir" ${cuda_args[@]+"${cuda_args[@]}"} \
       >"$out/models_configure.log" 2>&1 &&
     timeout 300 "$cmake_bin" --build "$work/models-build" --target dpl_model_convnet -j "$jobs" \
       >"$out/models_build.log" 2>&1; then
    plugins="$work/models-build/plugins_out"
    cp "$work/build/plugins_out/"libdpl_backend_*.so "$plugins/"
    train=(--model convnet --num-processes 1 --max-steps 300 --log-interval 100 --no-progress
           --master-port 0 --data-dir "$deps/fashion-mnist" --plugin-dir "$plugins")
    timeout 240 "$launcher" "${train[@]}" --device cuda --backend nccl 2>&1 |
      tee "$out/train_cuda_nccl.log" || status=1
    grep -q "training done: 300 steps" "$out/train_cuda_nccl.log" ||
      { echo "FAIL: the CUDA training run did not finish its 300 steps"; status=1; }
    grep -q "test set: average loss" "$out/train_cuda_nccl.log" ||
      { echo "FAIL: the CUDA training run printed no test-set accuracy"; status=1; }
    echo "== the same 300 steps on the CPU (tcp backend), for comparison"
    timeout 240 "$launcher" "${train[@]}" --device cpu --backend tcp 2>&1 |
      tee "$out/train_cpu_tcp.log" || status=1
    grep -h "training done\|test set" "$out/train_cuda_nccl.log" "$out/train_cpu_tcp.log"
  else
    echo "FAIL: could not build the convnet plugin against pip torch; see below"
    tail -n 40 "$out/models_configure.log" "$out/models_build.log" 2>/dev/null
    status=1
  fi
fi
echo "== done (status $status); logs in $out"
date -u
exit "$status"
