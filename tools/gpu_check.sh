#!/usr/bin/env bash
# The GPU check of dpl (docs/gpu.md), for a machine with one GPU, CUDA (nvcc), CMake, ninja and a
# pip torch with CUDA, but no Debian packages and no network: tools/gpu_prepare.sh makes on a dev
# machine what it needs besides (build-gpu-deps: the launcher, the idx and gloo plugins, data,
# GoogleTest).
#
#  1. builds the nccl and tcp plugins and the nccl tests against the CUDA runtime and the very
#     libnccl.so.2 that pip torch loads (one process holds one libnccl.so.2: the model plugin's
#     libtorch and the nccl plugin must agree on it), and the convnet and gpt plugins against pip
#     torch;
#  2. runs the nccl tests: the engine with fakes, and the plugin at world size 1 on real CUDA
#     tensors (NCCL refuses two ranks on one GPU, "Duplicate GPU detected"), then, as a step of
#     its own, backend ABI v3's reduce_scatter and in-place allgather;
#  3. measures NCCL allreduce through the plugin at world size 1 (tools/bench/nccl_bus_bandwidth.py);
#  4. checks that --num-processes 2 --backend nccl on one GPU is refused at once, saying why, and
#     that CIFAR data for the ConvNet on CUDA is refused before any worker starts; trains the
#     bit-exact test model on Fashion-MNIST on this machine's CPU against the losses recorded on
#     another (tests/data_jobs/fashion_mnist_golden.txt);
#  5. trains 2 ranks sharing the GPU through gloo and through tcp: the ranks' parameters must be
#     bit-identical, the losses those of the same run on the CPU within float tolerance;
#  6. trains one rank in bf16 and in fp16 (dynamic loss scaling) on nccl: finite, falling losses;
#     and 20 AdamW steps with the optimizer on the GPU against --offload-optimizer's host copy;
#  7. measures samples/s on one GPU against the PyTorch DDP peer (tools/bench/bench_gpu.py);
#  8. measures tokens/s of GPT-2 small's shape (12 layers, 768 dims, block 1024) in bf16 on one
#     GPU against the PyTorch DDP peer (tools/bench/bench_lm.py --device cuda), the optimizer
#     running on the GPU (its phase of the step in the table);
#  9. (after 3, once the gpt plugin is built) runs the optimizer on the GPU against the same
#     optimizer on the CPU through the gpt plugin: 20 AdamW steps of the same gradients within
#     1e-6 relative, and a backward after zero_gradients replacing the gradients on the GPU
#     (tests/models/device_optimizer_cuda_test.cpp);
# 10. (after 6) starts an elastic job on nccl, whose host path carries a regroup's state; with two
#     GPUs, kills one of its two machines, checks the other's worker goes on from memory, and
#     trains a machine in again from it.
# Without a GPU (a dry run) it builds and runs what it can and says what it skipped. It writes at
# most 8 files to $OUT (gpu_check.log holds everything it prints). It plans for
# DPL_GPU_CHECK_BUDGET seconds (default 540): a step that would not fit in what is left is skipped
# and said, so the summary is always written. DPL_GPU_CHECK_PYTHON names the Python with torch
# (default python3); with a CPU-only torch the dry run also builds the convnet plugin against it.
# DPL_GPU_CHECK_KEEP_WORK=1 keeps the work folder (the built plugins) for runs of one's own.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$(mktemp -d /tmp/dpl_gpu_check_out.XXXXXX)}"
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
tee_pid=$!
work="$(mktemp -d /tmp/dpl_gpu_check.XXXXXX)"
deps="$repo/build-gpu-deps"
jobs="$(nproc)"
started=$SECONDS
budget=${DPL_GPU_CHECK_BUDGET:-540}
python=${DPL_GPU_CHECK_PYTHON:-python3}
# dpl's Python tools run under it (tools/dpl_python.py): this machine has its own pip torch, not
# dpl's Python environment.
export DPL_PYTHON=$python
results=()
record() {  # record PASS|FAIL|SKIP "what"
  results+=("$1 $2")
  echo "$1 $2"
}
step() { echo; echo "== [$((SECONDS - started)) s] $*"; }
seconds_left() { echo $((budget - (SECONDS - started))); }
limit() { local left=$(($(seconds_left) - 10)); echo $((left < $1 ? left : $1)); }  # limit MAX
fits() {  # fits SECONDS "what": true when SECONDS more stay within the budget, else SKIP "what"
  (($(seconds_left) >= $1)) && return 0
  record SKIP "$2: $(seconds_left) s of the ${budget} s budget left, it needs $1"
  return 1
}

echo "== dpl gpu_check: repo $repo, work $work, output $out, $jobs cores"
date -u

step "GPU and pip torch"
smi_gpus=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  smi_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
else
  echo "no nvidia-smi"
fi
# Where pip torch's CUDA runtime and NCCL are: the files its process maps after `import torch`
# (what the model plugin's libtorch will load), else the wheels' folders: nvidia/cu13/{include,lib}
# for CUDA 13, nvidia/cuda_runtime and nvidia/nccl for CUDA 12 (NCCL keeps nvidia/nccl in both).
"$python" - >"$work/torch.sh" <<'PY'
import glob, os, shlex, sys
def put(name, value):
    print(f"{name}={shlex.quote(str(value))}")
try:
    import torch
except Exception as error:  # no torch, or a broken one
    put("TORCH_OK", 0)
    put("TORCH_WHY", f"{sys.executable} cannot import torch ({error.__class__.__name__}: {error})")
    sys.exit(0)
torch_dir = os.path.dirname(torch.__file__)
site = os.path.dirname(torch_dir)
def mapped(stem):
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if len(line.split()) >= 6}
    return sorted(os.path.realpath(p) for p in paths if os.path.basename(p).startswith(stem))
def first(*patterns):
    for pattern in patterns:
        hits = sorted(glob.glob(os.path.join(site, pattern)))
        if hits:
            return os.path.realpath(hits[0])
    return ""
nccl = (mapped("libnccl.so") or [""])[0] or first("nvidia/nccl/lib/libnccl.so.2",
                                                  "nvidia/cu13/lib/libnccl.so.2",
                                                  "nvidia/*/lib/libnccl.so.2")
cudart = (mapped("libcudart.so") or [""])[0] or first("nvidia/cu13/lib/libcudart.so.*",
                                                      "nvidia/cuda_runtime/lib/libcudart.so.*")
def include_beside(library, header):
    root = os.path.dirname(os.path.dirname(library)) if library else ""
    return root if root and os.path.exists(os.path.join(root, "include", header)) else ""
put("TORCH_OK", 1)
put("TORCH_VERSION", torch.__version__)
# The standard the plugins build in, by the rule of sdk/cmake/DplTorchModel.cmake: C++20 where
# the torch's headers refuse anything older (2.13 and later), else C++17.
aten = os.path.join(torch_dir, "include", "ATen", "ATen.h")
needs_cxx20 = os.path.exists(aten) and "C++20 or later" in open(aten).read()
put("TORCH_CXX_STANDARD", 20 if needs_cxx20 else 17)
put("TORCH_CUDA", torch.version.cuda or "none")
put("TORCH_GPUS", torch.cuda.device_count() if torch.version.cuda else 0)
put("TORCH_NCCL_VERSION", ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else "none")
put("TORCH_NCCL_MAPPED", 1 if mapped("libnccl.so") else 0)
put("TORCH_CMAKE_PREFIX", torch.utils.cmake_prefix_path)
put("TORCH_DIR", torch_dir)
put("TORCH_NCCL_LIB", nccl)
put("TORCH_NCCL_ROOT", include_beside(nccl, "nccl.h"))
put("TORCH_CUDART_LIB", cudart)
put("TORCH_CUDART_ROOT", include_beside(cudart, "cuda_runtime_api.h"))
PY
TORCH_OK=0 TORCH_WHY="$python failed" TORCH_GPUS=0 TORCH_CXX_STANDARD=17
# shellcheck disable=SC1091
source "$work/torch.sh"
gpus=$smi_gpus
if [[ $TORCH_OK == 1 ]]; then
  echo "torch $TORCH_VERSION, CUDA $TORCH_CUDA, NCCL $TORCH_NCCL_VERSION, GPUs $TORCH_GPUS"
  echo "torch's libnccl: ${TORCH_NCCL_LIB:-none} (mapped by import torch: $TORCH_NCCL_MAPPED);" \
    "its libcudart: ${TORCH_CUDART_LIB:-none}"
  gpus=$TORCH_GPUS
else
  echo "$TORCH_WHY"
fi
if ((gpus > 0)); then
  echo "GPUs: $gpus: a real run"
else
  echo "no GPU: a dry run (builds and runs what needs no GPU, says what it skips)"
fi

step "CUDA runtime, NCCL and DLPack for the plugin"
cuda_args=()
if [[ -f /usr/local/cuda/include/cuda_runtime_api.h ]]; then
  cuda_args+=("-DCUDAToolkit_ROOT=/usr/local/cuda")
elif [[ -n ${TORCH_CUDART_ROOT:-} ]]; then
  cuda_args+=("-DDPL_CUDA_RUNTIME_ROOT=$TORCH_CUDART_ROOT")
fi
nccl_args=()
if [[ -n ${TORCH_NCCL_LIB:-} && -n ${TORCH_NCCL_ROOT:-} ]]; then
  nccl_args+=("-DDPL_NCCL_LIBRARY=$TORCH_NCCL_LIB" "-DDPL_NCCL_INCLUDE_DIR=$TORCH_NCCL_ROOT/include")
elif [[ -n ${TORCH_NCCL_LIB:-} && -f /usr/local/cuda/include/nccl.h ]]; then
  # A wheel without its header: the toolkit's nccl.h, torch's library; a symbol the library lacks
  # fails the link (--no-undefined), not the run.
  nccl_args+=("-DDPL_NCCL_LIBRARY=$TORCH_NCCL_LIB" "-DDPL_NCCL_INCLUDE_DIR=/usr/local/cuda/include")
elif [[ -f /usr/local/cuda/include/nccl.h ]]; then
  nccl_args+=("-DNCCL_ROOT=/usr/local/cuda")
fi
echo "CUDA: ${cuda_args[*]:-none found}; NCCL: ${nccl_args[*]:-none found}"
dlpack_dir=""
for candidate in "$deps/include" /usr/include; do
  [[ -f $candidate/dlpack/dlpack.h ]] && { dlpack_dir=$candidate; break; }
done
if [[ -z $dlpack_dir && -n ${TORCH_DIR:-} && -f $TORCH_DIR/include/ATen/dlpack.h ]]; then
  dlpack_dir="$work/dlpack_include"
  mkdir -p "$dlpack_dir/dlpack" && cp "$TORCH_DIR/include/ATen/dlpack.h" "$dlpack_dir/dlpack/"
fi
gtest_dir=""
for candidate in "${GTEST_SOURCE_DIR:-}" "$deps/googletest" /usr/src/googletest; do
  [[ -n $candidate && -f $candidate/CMakeLists.txt ]] && { gtest_dir=$candidate; break; }
done
echo "DLPack: ${dlpack_dir:-none}; GoogleTest sources: ${gtest_dir:-none}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

step "plan"
# What this run builds against what, and what it runs; a dry run says what it leaves out.
if [[ $TORCH_OK == 1 ]]; then
  echo "would build the convnet and gpt plugins against torch $TORCH_VERSION (CUDA $TORCH_CUDA)" \
    "in C++$TORCH_CXX_STANDARD, the standard its headers ask for, from $TORCH_CMAKE_PREFIX"
else
  echo "would build no model plugin: $TORCH_WHY"
fi
echo "would build the nccl and tcp plugins${gtest_dir:+ and the nccl tests} against CUDA" \
  "${cuda_args[*]:-(none found)} and NCCL ${nccl_args[*]:-(none found)}"
if [[ -x $deps/bin/launcher ]]; then
  echo "would train with build-gpu-deps' launcher and plugins: $(cd "$deps/plugins" && echo *.so)"
else
  echo "would train nothing: no build-gpu-deps/bin/launcher (run tools/gpu_prepare.sh elsewhere)"
fi
if ((gpus > 0)); then
  echo "would run on $gpus GPU(s): the nccl tests, NCCL allreduce, the GPU optimizer test," \
    "the refusals, CUDA training (2 ranks through gloo and tcp, bf16, fp16, the optimizer on" \
    "the GPU) and the benchmarks against the DDP peer (bench_gpu.py, bench_lm.py --device cuda)"
else
  echo "a dry run: builds and runs the above where no GPU is needed (the nccl tests' refusals," \
    "the Fashion-MNIST losses on this CPU) and skips, saying so, every step that needs a GPU"
fi

# The head of the generated CMake projects (named $1): what the top-level CMakeLists sets up for
# the plugin folders, without Boost or the launcher. C++17 project-wide, as there: a plugin that
# includes torch's headers gets C++20 from sdk/cmake/DplTorchModel.cmake's rule where they ask for
# it. A project-wide C++20 would also ask for CUDA20 in torch's CUDA checks (its CMake config
# compiles a CUDA probe), which a CMake that does not know that dialect for this nvcc refuses.
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
find_package(Threads REQUIRED)
add_subdirectory("$repo/sdk" sdk)
CMAKE
}

# The convnet and gpt plugins against pip torch, in the background while the rest builds and runs
# (against a CPU-only torch too: the training steps then skip, but the builds are checked); each
# target's exit status goes to models.rc, so a gpt that fails to build leaves the convnet's steps.
model_status=skipped
if [[ $TORCH_OK == 1 && -n $dlpack_dir ]]; then
  mkdir -p "$work/models"
  project_head dpl_gpu_models >"$work/models/CMakeLists.txt"
  cat >>"$work/models/CMakeLists.txt" <<CMAKE
include("$repo/sdk/cmake/DplTorchModel.cmake")
add_subdirectory("$repo/models/convnet" models/convnet)
add_subdirectory("$repo/models/gpt" models/gpt)
CMAKE
  (if cmake -S "$work/models" -B "$work/models-build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$TORCH_CMAKE_PREFIX" -DDLPACK_INCLUDE_DIR="$dlpack_dir" \
    ${cuda_args[@]+"${cuda_args[@]}"}; then
    timeout 420 cmake --build "$work/models-build" --target dpl_model_convnet -j "$jobs"
    convnet_rc=$?
    timeout 420 cmake --build "$work/models-build" --target dpl_model_gpt -j "$jobs"
    echo "$convnet_rc $?" >"$work/models.rc"
  else
    echo "1 1" >"$work/models.rc"
  fi) >"$work/models_build.log" 2>&1 &
  model_pid=$!
  model_status=building
fi

step "build: nccl and tcp plugins, nccl tests"
mkdir -p "$work/super"
# tests/support/shell_capture.hpp (through tests/models/plugin_driver.hpp) asks, as in the main
# build, which Python runs the tools and whether the plugins' torch has CUDA.
torch_has_cuda=0
[[ ${TORCH_CUDA:-none} != none ]] && torch_has_cuda=1
project_head dpl_gpu_check >"$work/super/CMakeLists.txt"
cat >>"$work/super/CMakeLists.txt" <<CMAKE
set(DPL_WITH_NCCL ON)
add_subdirectory("$repo/plugins/nccl" plugins/nccl)
add_subdirectory("$repo/plugins/tcp" plugins/tcp)
if(DPL_GTEST_SOURCE_DIR)
  add_subdirectory("\${DPL_GTEST_SOURCE_DIR}" gtest EXCLUDE_FROM_ALL)
  if(NOT TARGET GTest::gtest)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
  # tests/CMakeLists.txt's dpl_add_test, without the launcher and ctest.
  function(dpl_add_test name)
    cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBRARIES" \${ARGN})
    add_executable(\${name} \${ARG_SOURCES})
    target_link_libraries(\${name} PRIVATE GTest::gtest GTest::gtest_main dpl::sdk \${ARG_LIBRARIES})
    target_include_directories(\${name} PRIVATE \${CMAKE_CURRENT_SOURCE_DIR} "$repo/tests")
    target_compile_definitions(\${name} PRIVATE
      DPL_TEST_PLUGIN_DIR="\${DPL_BUILD_PLUGIN_DIR}" DPL_TEST_LAUNCHER="none"
      DPL_TEST_BINARY_DIR="\${CMAKE_CURRENT_BINARY_DIR}" DPL_TEST_SOURCE_DIR="$repo"
      DPL_TEST_PYTHON="$python" DPL_TEST_TORCH_HAS_CUDA=$torch_has_cuda)
  endfunction()
  add_subdirectory("$repo/tests/support" tests/support)
  add_subdirectory("$repo/tests/backends" tests/backends)
  # The optimizer on the GPU against the CPU's, through the gpt plugin built against pip torch.
  dpl_add_test(device_optimizer_cuda_test
    SOURCES "$repo/tests/models/device_optimizer_cuda_test.cpp" LIBRARIES \${CMAKE_DL_LIBS})
  target_include_directories(device_optimizer_cuda_test PRIVATE "$repo/tests/models")
  target_compile_definitions(device_optimizer_cuda_test PRIVATE DPL_TEST_MODEL_DIR="none"
    DPL_TEST_PYTHON_FIXTURES="none")
endif()
CMAKE
build_log="$out/build.log"
plugins_ok=0
if [[ -z $dlpack_dir ]]; then
  record FAIL "build: no dlpack/dlpack.h (run tools/gpu_prepare.sh and copy build-gpu-deps here)"
elif ! cmake -S "$work/super" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DDLPACK_INCLUDE_DIR="$dlpack_dir" ${gtest_dir:+"-DDPL_GTEST_SOURCE_DIR=$gtest_dir"} \
  ${cuda_args[@]+"${cuda_args[@]}"} ${nccl_args[@]+"${nccl_args[@]}"} >"$build_log" 2>&1; then
  tail -n 30 "$build_log"
  record FAIL "build: configuring the plugins failed (build.log)"
elif ! grep "dpl: nccl backend:" "$build_log"; then
  grep "dpl: nccl backend skipped" "$build_log"
  record FAIL "build: the nccl plugin was not configured (no CUDA runtime or NCCL found)"
else
  targets=(dpl_backend_nccl dpl_backend_tcp)
  [[ -n $gtest_dir ]] && targets+=(nccl_engine_test nccl_backend_test device_optimizer_cuda_test)
  if timeout 300 cmake --build "$work/build" -j "$jobs" --target "${targets[@]}" >>"$build_log" 2>&1; then
    plugins_ok=1
    record PASS "build: ${targets[*]}"
  else
    grep -E "error|Error" "$build_log" | head -n 20
    record FAIL "build: ${targets[*]} (build.log)"
  fi
fi
nccl_plugin="$work/build/plugins_out/libdpl_backend_nccl.so"
if ((plugins_ok)); then
  symbols=$(nm -D --defined-only "$nccl_plugin" | awk '{print $3}')
  if [[ $symbols == dpl_backend_plugin_v5 ]]; then
    record PASS "the nccl plugin exports exactly dpl_backend_plugin_v5"
  else
    record FAIL "the nccl plugin exports: $symbols"
  fi
  echo "the nccl plugin loads: $(ldd "$nccl_plugin" | awk '/nccl|cudart/ {print $3}' | paste -sd ' ')"
fi

# The prepared libraries (zlib, gloo's), pip torch's and its CUDA libraries on the loader path.
nvidia_dirs=""
if [[ -n ${TORCH_DIR:-} ]]; then
  for dir in "$(dirname "$TORCH_DIR")"/nvidia/*/lib; do [[ -d $dir ]] && nvidia_dirs+="$dir:"; done
fi
export LD_LIBRARY_PATH="$deps/lib:${TORCH_DIR:+$TORCH_DIR/lib:}$nvidia_dirs${LD_LIBRARY_PATH:-}"

step "nccl tests"
tests_log="$out/nccl_tests.log"
if ((plugins_ok)) && [[ -n $gtest_dir ]]; then
  if timeout 60 "$work/build/tests/backends/nccl_engine_test" >"$tests_log" 2>&1; then
    record PASS "nccl_engine_test (ordering, watchdog, abort, setup checks; fakes)"
  else
    record FAIL "nccl_engine_test (nccl_tests.log)"
  fi
  timeout 240 "$work/build/tests/backends/nccl_backend_test" \
    --gtest_filter=-NcclBackend.OnGpuReduceScatterAndInPlaceAllgather >>"$tests_log" 2>&1
  backend_rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\] NcclBackend\.[A-Za-z]+ \(" "$tests_log"
  skipped=$(grep -cE "^\[  SKIPPED \] NcclBackend\.OnGpu[A-Za-z]+ \(" "$tests_log" || true)
  if ((backend_rc != 0)); then
    record FAIL "nccl_backend_test (exit $backend_rc; nccl_tests.log)"
  elif ((gpus > 0 && skipped > 0)); then
    record FAIL "nccl_backend_test: $skipped GPU tests skipped on a machine with a GPU"
  elif ((gpus > 0)); then
    record PASS "nccl_backend_test on the GPU (every dtype and op, broadcast, allgather, barrier, synchronize, stream order, setup timeout)"
  else
    record PASS "nccl_backend_test without a GPU (refusal); its GPU tests skipped"
  fi
else
  why="the plugins did not build"
  [[ -n $gtest_dir ]] || why="no GoogleTest sources"
  record SKIP "nccl tests: $why"
fi

step "nccl reduce_scatter and in-place allgather (backend ABI v3)"
if ((plugins_ok)) && [[ -n $gtest_dir ]] && ((gpus > 0)); then
  rs_log="$out/nccl_tests.log"
  timeout 120 "$work/build/tests/backends/nccl_backend_test" \
    --gtest_filter=NcclBackend.OnGpuReduceScatterAndInPlaceAllgather >>"$rs_log" 2>&1
  rs_rc=$?
  if ((rs_rc == 0)) && grep -qE "^\[ +OK +\] NcclBackend\.OnGpuReduceScatterAndInPlaceAllgather" "$rs_log"; then
    record PASS "nccl reduce_scatter (every dtype and op, in place and apart) and in-place allgather on the GPU"
  else
    record FAIL "nccl reduce_scatter and in-place allgather (exit $rs_rc; nccl_tests.log)"
  fi
else
  record SKIP "nccl reduce_scatter and in-place allgather: needs a GPU, the built plugin and GoogleTest"
fi

step "NCCL allreduce through the plugin at world size 1"
if ((gpus == 0 || !plugins_ok)) || [[ $TORCH_OK != 1 ]]; then
  record SKIP "nccl_bus_bandwidth: needs a GPU, pip torch and the built plugin"
elif fits 40 "nccl_bus_bandwidth"; then
  if timeout "$(limit 120)" "$python" "$repo/tools/bench/nccl_bus_bandwidth.py" --plugin "$nccl_plugin" \
    >"$out/nccl_bandwidth.txt" 2>&1; then
    record PASS "nccl_bus_bandwidth (one libnccl.so.2 in the process, sums right)"
  else
    record FAIL "nccl_bus_bandwidth (nccl_bandwidth.txt)"
  fi
  cat "$out/nccl_bandwidth.txt"
fi

step "the convnet and gpt plugins against pip torch"
gpt_status=skipped
if [[ $model_status == building ]]; then
  wait "$model_pid"
  read -r convnet_rc gpt_rc 2>/dev/null <"$work/models.rc" || { convnet_rc=1 gpt_rc=1; }
  torch_build="torch $TORCH_VERSION (CUDA $TORCH_CUDA, C++$TORCH_CXX_STANDARD)"
  ((convnet_rc == 0 && gpt_rc == 0)) || tail -n 30 "$work/models_build.log"
  plugin_built() {  # plugin_built NAME RC: records whether model plugin NAME built; true if so
    (($2 == 0)) && { record PASS "$1 plugin built against $torch_build"; return 0; }
    record FAIL "the $1 plugin did not build against pip torch (build.log)"
    return 1
  }
  if plugin_built convnet "$convnet_rc"; then model_status=built; else model_status=failed; fi
  if plugin_built gpt "$gpt_rc"; then gpt_status=built; else gpt_status=failed; fi
  cat "$work/models_build.log" >>"$build_log"
else
  if [[ $TORCH_OK != 1 ]]; then
    record SKIP "convnet and gpt plugins: need a Python with torch ($TORCH_WHY)"
  else
    record SKIP "convnet and gpt plugins: need DLPack's header"
  fi
fi

step "the optimizer on the GPU against the CPU's (model ABI v4's apply_update, 20 AdamW steps), replaced gradients"
optimizer_test="$work/build/device_optimizer_cuda_test"
if [[ $gpt_status == built && -x $optimizer_test ]] && ((gpus > 0)); then
  cp "$work/models-build/plugins_out/libdpl_model_gpt.so" "$work/build/plugins_out/"
  optimizer_log="$work/device_optimizer.log"
  timeout "$(limit 120)" "$optimizer_test" >"$optimizer_log" 2>&1
  optimizer_rc=$?
  grep -E "relative difference|SKIPPED|FAILED|Failure" "$optimizer_log"
  if ((optimizer_rc == 0)) && ! grep -q "SKIPPED" "$optimizer_log"; then
    record PASS "the GPU optimizer's parameters after 20 AdamW steps within 1e-6 relative of the CPU's; gradients replaced after zero_gradients"
  else
    tail -n 20 "$optimizer_log"
    record FAIL "the GPU optimizer against the CPU's (exit $optimizer_rc; skipped on a GPU counts)"
  fi
else
  record SKIP "the GPU optimizer against the CPU's: needs a GPU, the CUDA gpt plugin and GoogleTest"
fi

launcher="$deps/bin/launcher"
plugins="$work/models-build/plugins_out"
train_ok=0
if [[ $model_status == built && $TORCH_CUDA != none && -x $launcher && -d $deps/fashion-mnist ]] &&
  ((plugins_ok && gpus > 0)); then
  cp "$work/build/plugins_out/"libdpl_backend_*.so "$plugins/"
  cp "$deps/plugins/"*.so "$plugins/"  # the idx data set and the gloo backend
  echo "plugins: $(cd "$plugins" && echo *.so)"
  train_ok=1
elif [[ ! -x $launcher || ! -f $deps/plugins/libdpl_dataset_idx.so ]]; then
  echo "no $launcher or no idx data set plugin: run tools/gpu_prepare.sh on a dev machine and" \
    "copy build-gpu-deps here"
fi
common=(--model convnet --no-progress --master-port 0 --backend-timeout 120
        --data-dir "$deps/fashion-mnist" --data-cache "$work/data-cache" --plugin-dir "$plugins")

step "--num-processes 2 --backend nccl on one GPU must be refused at once"
if ((train_ok && gpus == 1)); then
  refusal_start=$SECONDS
  refusal=$(timeout 60 "$launcher" "${common[@]}" --device cuda --num-processes 2 --backend nccl \
    --max-steps 5 2>&1)
  refusal_rc=$?
  echo "$refusal" | tail -n 8
  if ((refusal_rc == 124)); then
    record FAIL "2 ranks on nccl on one GPU: no answer within 60 s (it hangs)"
  elif ((refusal_rc == 0)); then
    record FAIL "2 ranks on nccl on one GPU were not refused"
  elif grep -qi "nccl" <<<"$refusal" && grep -qiE "gloo|tcp" <<<"$refusal" &&
    grep -qiE "gpu|device" <<<"$refusal" && ! grep -q "unknown --backend" <<<"$refusal"; then
    record PASS "2 ranks on nccl on one GPU refused in $((SECONDS - refusal_start)) s, saying why and what to use"
  else
    record FAIL "2 ranks on nccl on one GPU failed without saying why and what to use"
  fi
elif ((train_ok)); then
  record SKIP "the nccl refusal: this machine has $gpus GPUs, not 1"
else
  record SKIP "the nccl refusal: needs a GPU, the launcher and the CUDA convnet plugin"
fi

step "a CUDA job whose model cannot take the data is refused before any worker starts"
if ((train_ok)) && [[ -f $deps/plugins/libdpl_dataset_cifar10.so ]]; then
  mkdir -p "$work/cifar"
  "$python" - "$work/cifar" <<'PY'
import os, random, sys
rng = random.Random(0)  # 20 records per file: a label byte, then 3x32x32 pixel bytes
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    with open(os.path.join(sys.argv[1], name), "wb") as out:
        for _ in range(20):
            out.write(bytes([rng.randrange(10)]) + bytes(rng.randrange(256) for _ in range(3072)))
PY
  misfit=$(timeout 60 "$launcher" --model convnet --no-progress --master-port 0 \
    --plugin-dir "$plugins" --device cuda --num-processes 2 --backend gloo --data cifar10 \
    --data-dir "$work/cifar" --data-cache none 2>&1)
  echo "$misfit" | tail -n 3
  if grep -q "the data has samples of shape (3, 32, 32)" <<<"$misfit" &&
    ! grep -q "\[rank " <<<"$misfit"; then
    record PASS "CIFAR data for the ConvNet on CUDA refused before any worker started"
  else
    record FAIL "CIFAR data for the ConvNet on CUDA: not refused by the launcher before the workers"
  fi
else
  record SKIP "the misfit refusal on CUDA: needs a GPU, the launcher, the CUDA convnet plugin and the cifar10 plugin (tools/gpu_prepare.sh)"
fi

step "Fashion-MNIST through idx on this machine's CPU: the recorded losses, bit for bit"
# tests/data_jobs/fashion_mnist_golden.txt was recorded on another CPU; its model computes the
# same bits on every x86-64 CPU (tests/data_jobs/bitexact_logreg.c), which this checks.
golden="$repo/tests/data_jobs/fashion_mnist_golden.txt"
if [[ -x $launcher && -f $deps/plugins/libdpl_dataset_idx.so && -d $deps/fashion-mnist ]] &&
  fits 30 "the recorded Fashion-MNIST losses"; then
  mkdir -p "$work/bitexact" "$work/bitexact-dump"
  cc -O2 -std=c11 -fPIC -shared -fvisibility=hidden -ffp-contract=off -I"$repo/sdk/include" \
    -I"$deps/include" "$repo/tests/data_jobs/bitexact_logreg.c" -o "$work/bitexact/libbitexact.so" -lm
  timeout "$(limit 120)" "$launcher" --model bitexact_logreg \
    --no-progress --master-port 0 --plugin-dir "$work/bitexact" --plugin-dir "$deps/plugins" \
    --data-dir "$deps/fashion-mnist" --data-cache none --num-processes 2 --threads-per-worker 1 \
    --seed 7 --epochs 2 --max-steps 600 --log-interval 1 --metrics "$work/bitexact.jsonl" \
    --dump-parameters "$work/bitexact-dump" >"$work/bitexact.log" 2>&1
  if "$python" - "$golden" "$work/bitexact.jsonl" "$work/bitexact.log" \
    "$work/bitexact-dump/rank-0.bin" <<'PY'; then
import json, sys
golden, metrics, log, dump = sys.argv[1:]
losses, test, parameters = [], None, None
for line in open(golden):
    fields = line.split()
    if fields and fields[0] == "loss": losses.append(float(fields[2]))
    if fields and fields[0] == "test": test = f"average loss: {fields[1]}, accuracy: {fields[2]}/"
    if fields and fields[0] == "parameters": parameters = f"{fields[1]} {fields[2]}"
ran = [json.loads(l)["loss"] for l in open(metrics) if '"kind": "step"' in l]
data, hashed = open(dump, "rb").read(), 0xcbf29ce484222325
for byte in data:
    hashed = ((hashed ^ byte) * 0x100000001b3) % (1 << 64)
same = [ran == losses, test in open(log).read(), f"{len(data)} {hashed:016x}" == parameters]
print(f"{len(ran)} losses, the test line, the parameters: {same}")
sys.exit(0 if all(same) else 1)
PY
    record PASS "Fashion-MNIST through idx gave the recorded losses on this CPU ($(lscpu | sed -n 's/^Model name: *//p' | head -n 1))"
  else
    tail -n 5 "$work/bitexact.log"
    record FAIL "Fashion-MNIST through idx on this CPU: not the recorded losses"
  fi
elif [[ ! -x $launcher ]]; then
  record SKIP "the recorded Fashion-MNIST losses: no launcher (tools/gpu_prepare.sh)"
fi

step "2 ranks sharing the GPU through gloo and tcp, against the same run on the CPU"
# Every step's loss of the first 20 SGD steps: float32 rounding differs between cuDNN's and the
# CPU's convolutions, and training amplifies a difference step by step. Measured on the H200
# (docs/gpu.md): at most 2e-6 through step 20, 4e-6 at 30, then growing about tenfold every five
# steps to 2e-2 at step 60 (the recipe's Adadelta at lr 0.5: 2.4 % at step 80), the same in two
# CUDA runs and with CUDA_LAUNCH_BLOCKING=1, so it is arithmetic, not a race. Comparing the first
# 20 steps asks for float tolerance with a wide margin.
train=("${common[@]}" --num-processes 2 --max-steps 20 --log-interval 1 --seed 0
       --model-options dropout=0 --optimizer sgd --lr 0.05)
compare_losses() {  # compare_losses CUDA_LOG CPU_LOG: the logged losses agree within tolerance
  "$python" - "$1" "$2" <<'PY'
import math, re, sys
def losses(path):
    with open(path, errors="replace") as f:
        return [float(m.group(1)) for m in re.finditer(r"training loss: ([-0-9.eE+naif]+)", f.read())]
cuda, cpu = losses(sys.argv[1]), losses(sys.argv[2])
if not cuda or len(cuda) != len(cpu):
    sys.exit(f"{len(cuda)} losses logged on the GPU, {len(cpu)} on the CPU")
if any(math.isnan(v) or math.isinf(v) for v in cuda + cpu):
    sys.exit("a loss is not finite")
worst = max(abs(a - b) / (1e-4 + 1e-4 * abs(b)) for a, b in zip(cuda, cpu))
print(f"{len(cuda)} losses, first {cuda[0]:.6f} vs {cpu[0]:.6f}, last {cuda[-1]:.6f} vs "
      f"{cpu[-1]:.6f}; largest difference {worst:.2f} of the tolerance (1e-4 + 0.01%)")
sys.exit(0 if worst <= 1.0 else 1)
PY
}
if ((!train_ok)); then
  record SKIP "CUDA training with 2 ranks: needs a GPU, the launcher and the CUDA convnet plugin"
elif fits 40 "CUDA training with 2 ranks"; then
  timeout "$(limit 150)" "$launcher" "${train[@]}" --device cpu --backend tcp \
    >"$out/train_cpu_tcp.log" 2>&1
  cpu_rc=$?
  grep -E "training done|test set" "$out/train_cpu_tcp.log"
  ((cpu_rc == 0)) || record FAIL "the CPU reference run (exit $cpu_rc; train_cpu_tcp.log)"
  for backend in gloo tcp; do
    log="$out/train_cuda_$backend.log"
    if [[ $backend == gloo && ! -f $plugins/libdpl_backend_gloo.so ]]; then
      record SKIP "CUDA, 2 ranks, gloo: no gloo plugin in build-gpu-deps/plugins"
      continue
    fi
    rm -rf "$work/params_$backend" && mkdir -p "$work/params_$backend"
    # NVIDIA_TF32_OVERRIDE=0: cuDNN and cuBLAS in float32, as the CPU computes.
    fits 30 "CUDA, 2 ranks, $backend" || continue
    NVIDIA_TF32_OVERRIDE=0 timeout "$(limit 150)" "$launcher" "${train[@]}" --device cuda --backend "$backend" \
      --dump-parameters "$work/params_$backend" >"$log" 2>&1
    rc=$?
    grep -iE "device 0|share|training done|test set" "$log" | head -n 6
    if ((rc != 0)); then
      tail -n 15 "$log"
      record FAIL "CUDA, 2 ranks, $backend: exit $rc (train_cuda_$backend.log)"
      continue
    fi
    if cmp -s "$work/params_$backend/rank-0.bin" "$work/params_$backend/rank-1.bin"; then
      record PASS "CUDA, 2 ranks, $backend: both ranks' parameters bit-identical ($(stat -c %s "$work/params_$backend/rank-0.bin") bytes)"
    else
      record FAIL "CUDA, 2 ranks, $backend: the ranks' parameters differ (or were not written)"
    fi
    if ((cpu_rc == 0)) && compare_losses "$log" "$out/train_cpu_tcp.log"; then
      record PASS "CUDA, 2 ranks, $backend: losses as on the CPU"
    elif ((cpu_rc == 0)); then
      record FAIL "CUDA, 2 ranks, $backend: losses differ from the CPU run's"
    fi
  done
  if [[ -f $work/params_gloo/rank-0.bin && -f $work/params_tcp/rank-0.bin ]]; then
    cmp -s "$work/params_gloo/rank-0.bin" "$work/params_tcp/rank-0.bin" &&
      echo "gloo and tcp runs ended with the same parameters" ||
      echo "gloo and tcp runs ended with different parameters (cuDNN picks algorithms per run)"
  fi
fi

step "mixed precision on the GPU: bf16 and fp16 (dynamic loss scaling), one rank on nccl"
if ((train_ok)); then
  for precision in bf16 fp16; do
    fits 30 "--precision $precision on CUDA" || continue
    log="$work/precision_$precision.log"
    timeout "$(limit 90)" "$launcher" "${common[@]}" --device cuda --backend nccl \
      --num-processes 1 --precision "$precision" --max-steps 200 --log-interval 50 >"$log" 2>&1
    rc=$?
    grep -E "precision|scale|training loss|training done|test set" "$log" | head -n 10
    losses=$(grep -oE "training loss: [-0-9.eE+naif]+" "$log" | awk '{print $3}' | paste -sd ' ')
    if ((rc != 0)); then
      tail -n 10 "$log"
      record FAIL "--precision $precision on CUDA: exit $rc"
    elif "$python" -c 'import math, sys; v = [float(x) for x in sys.argv[1:]]
sys.exit(0 if len(v) >= 2 and all(map(math.isfinite, v)) and v[-1] < v[0] else 1)' $losses; then
      record PASS "--precision $precision on CUDA: finite, falling losses ($losses)"
    else
      record FAIL "--precision $precision on CUDA: losses not finite or not falling ($losses)"
    fi
  done
else
  record SKIP "mixed precision on CUDA: needs a GPU, the launcher and the CUDA convnet plugin"
fi

step "the optimizer on the GPU against --offload-optimizer's, one rank on nccl"
# The same 20 AdamW steps with the update on the GPU (the default) and on the host copy: the
# losses must agree within compare_losses' tolerance, and the default must say where it runs.
if ((!train_ok)); then
  record SKIP "the GPU optimizer in training: needs a GPU, the launcher and the CUDA convnet plugin"
elif fits 40 "the GPU optimizer in training"; then
  placement_rc=0
  for placement in device offload; do
    flags=()
    [[ $placement == offload ]] && flags=(--offload-optimizer)
    NVIDIA_TF32_OVERRIDE=0 timeout "$(limit 90)" "$launcher" "${common[@]}" --device cuda \
      --backend nccl --num-processes 1 --max-steps 20 --log-interval 1 --seed 0 \
      --model-options dropout=0 --optimizer adamw --lr 0.001 ${flags[@]+"${flags[@]}"} \
      >"$work/optimizer_$placement.log" 2>&1 || placement_rc=$?
  done
  grep -h "the optimizer runs\|host copy" "$work/optimizer_device.log" "$work/optimizer_offload.log"
  if ((placement_rc != 0)); then
    tail -n 15 "$work/optimizer_device.log" "$work/optimizer_offload.log"
    record FAIL "the GPU optimizer in training: a run failed (exit $placement_rc)"
  elif ! grep -q "the optimizer runs in the model" "$work/optimizer_device.log"; then
    record FAIL "the GPU optimizer in training: the default run did not put the optimizer on the GPU"
  elif compare_losses "$work/optimizer_device.log" "$work/optimizer_offload.log"; then
    record PASS "the GPU optimizer in training: 20 AdamW steps' losses as --offload-optimizer's"
  else
    record FAIL "the GPU optimizer in training: losses differ from --offload-optimizer's"
  fi
fi

step "an elastic job on nccl: its host path (one GPU); a lost machine keeps the survivor's worker (two)"
# Note [A host path beside a device backend] (launcher/training/collectives/collectives.cpp): an
# elastic job on nccl connects a backend of host memory beside it, which carries the state a
# regroup in place hands over. One GPU: a lone machine of --num-machines 1:2 starts it and trains.
# Two GPUs: two machines on loopback, one GPU each; the other machine is killed at about step 60,
# machine 0's worker must go on in its own process from the state in memory, and a machine
# started again on the freed GPU must be trained in from it (through the host path), the two
# replicas the same bits at the end.
elastic_port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
elastic=(--model convnet --no-progress --backend-timeout 60 --data-dir "$deps/fashion-mnist"
         --data-cache "$work/data-cache" --plugin-dir "$plugins" --device cuda --backend nccl
         --num-processes 1 --num-machines 1:2 --master-port "$elastic_port" --join-grace 1
         --checkpoint-dir "$work/elastic-checkpoints" --checkpoint-every 100 --log-interval 10)
if ((!train_ok)); then
  record SKIP "the elastic job on nccl: needs a GPU, the launcher and the CUDA convnet plugin; it would run launcher ${elastic[*]} --max-steps 30 (and with two GPUs two machines, one killed)"
elif ((gpus == 1)) && fits 60 "the elastic job on nccl"; then
  timeout "$(limit 60)" "$launcher" "${elastic[@]}" --max-steps 30 >"$work/elastic.log" 2>&1
  rc=$?
  grep "carries the state\|training done" "$work/elastic.log"
  if ((rc == 0)) && grep -q "carries the state a regroup in place hands over" "$work/elastic.log"; then
    record PASS "the elastic job on nccl: its host path started and it trained (the two-machine part needs two GPUs)"
  else
    tail -n 15 "$work/elastic.log"
    record FAIL "the elastic job on nccl: exit $rc, or no host path said ($work/elastic.log)"
  fi
elif ((gpus >= 2)) && fits 180 "the elastic job on nccl, two machines"; then
  elastic_machine() {  # elastic_machine GPU LOG: one more machine of the job, in its own group
    CUDA_VISIBLE_DEVICES=$1 setsid "$launcher" "${elastic[@]}" --max-steps 400 \
      --dump-parameters "$work/elastic-dumps" >"$2" 2>&1 &
  }
  elastic_machine 0 "$work/elastic_0.log"
  elastic_pids=($!)
  elastic_machine 1 "$work/elastic_1.log"
  elastic_pids+=($!)
  for _ in $(seq 600); do grep -q "\[60/" "$work"/elastic_*.log && break; sleep 0.2; done
  first=$(grep -l "this is machine 0 (" "$work"/elastic_*.log | head -n 1)
  victim=1; [[ $first == "$work/elastic_1.log" ]] && victim=0
  worker_before=$(pgrep -x dpl-rank-0)
  kill -9 -- "-${elastic_pids[victim]}"
  for _ in $(seq 300); do grep -q "continuing from" "$first" && break; sleep 0.2; done
  worker_after=$(pgrep -x dpl-rank-0)
  # The freed GPU's machine comes back: trained in from rank 0's state through the host path.
  elastic_machine "$victim" "$work/elastic_2.log"
  joined_pid=$!
  wait "${elastic_pids[1 - victim]}"
  rc=$?
  wait "$joined_pid" || rc=$((rc == 0 ? 1 : rc))
  grep "regroups\|continuing from\|training done" "$first"
  if ((rc == 0)) && [[ -n $worker_before && $worker_before == "$worker_after" ]] &&
    (($(grep -c "nothing read from disk" "$first") >= 2)) && ! grep -q "resumed from" "$first" &&
    cmp -s "$work/elastic-dumps/rank-0.bin" "$work/elastic-dumps/rank-1.bin"; then
    record PASS "the elastic job on nccl: machine $victim killed and back, machine 0's worker (pid $worker_before) went on from memory, replicas the same bits"
  else
    tail -n 20 "$first" "$work/elastic_2.log"
    record FAIL "the elastic job on nccl, two machines: exit $rc, worker $worker_before then $worker_after, the state not from memory twice, or the replicas apart ($first)"
  fi
fi

step "samples/s on one GPU: dpl against the PyTorch DDP peer"
if ((!train_ok)); then
  record SKIP "bench_gpu: needs a GPU, the launcher and the CUDA convnet plugin"
elif fits 70 "bench_gpu"; then
  if timeout "$(limit 240)" "$python" "$repo/tools/bench/bench_gpu.py" --launcher "$launcher" \
    --plugin-dir "$plugins" --data "$deps/fashion-mnist" >"$out/bench_gpu.txt" 2>&1; then
    record PASS "bench_gpu (dpl --device cuda against DDP --device cuda)"
  else
    record FAIL "bench_gpu (bench_gpu.txt)"
  fi
  cat "$out/bench_gpu.txt"
fi

step "tokens/s of GPT-2 small's shape on one GPU in bf16: dpl against the PyTorch DDP peer"
# Its output goes to the log only: $OUT keeps to its 8 files.
if ((!train_ok)) || [[ $gpt_status != built || ! -f $plugins/libdpl_dataset_tokens.so ]]; then
  record SKIP "bench_lm: needs a GPU, the launcher, the CUDA gpt plugin and the tokens data set plugin (tools/gpu_prepare.sh)"
elif fits 120 "bench_lm"; then
  if timeout "$(limit 240)" "$python" "$repo/tools/bench/bench_lm.py" --device cuda \
    --launcher "$launcher" --plugin-dir "$plugins" --repeats 1 >"$work/bench_lm.txt" 2>&1; then
    record PASS "bench_lm (dpl's gpt --device cuda against DDP, GPT-2 small's shape, bf16)"
  else
    record FAIL "bench_lm (its output above)"
  fi
  cat "$work/bench_lm.txt"
fi

# ---- The compiled step (docs/compiled.md): a CUDA package made and trained. ----------------------
# tools/compile_model.py --device cuda compiles the recipe's ConvNet's training step for this GPU;
# models/compiled, built against pip torch, trains it for 50 steps on one rank (nccl). Without a
# GPU this says what it would run.
step "the compiled step: a CUDA package made by tools/compile_model.py, trained by --model compiled"
compiled_pt2="$work/convnet_cuda.pt2"
compile_command=("$python" "$repo/tools/compile_model.py" "$compiled_pt2" --device cuda
                 --cache "$work/compile_cache")
compiled_train=(--model compiled --model-options "file=$compiled_pt2" --device cuda --backend nccl
                --num-processes 1 --max-steps 50 --log-interval 10)
if ((!train_ok)); then
  record SKIP "the compiled step on CUDA: needs a GPU, the launcher and pip torch with CUDA; it would run ${compile_command[*]}, build models/compiled against pip torch, and train it: launcher ${compiled_train[*]} (finite, falling losses)"
elif fits 300 "the compiled step on CUDA"; then
  mkdir -p "$work/compiled"
  project_head dpl_gpu_compiled >"$work/compiled/CMakeLists.txt"
  cat >>"$work/compiled/CMakeLists.txt" <<CMAKE
include("$repo/sdk/cmake/DplTorchModel.cmake")
add_subdirectory("$repo/models/compiled" models/compiled)
CMAKE
  compiled_log="$work/compiled.log"
  if ! { cmake -S "$work/compiled" -B "$work/compiled-build" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_CMAKE_PREFIX" \
      -DDLPACK_INCLUDE_DIR="$dlpack_dir" ${cuda_args[@]+"${cuda_args[@]}"} &&
    timeout "$(limit 180)" cmake --build "$work/compiled-build" --target dpl_model_compiled \
      -j "$jobs"; } >"$compiled_log" 2>&1; then
    tail -n 20 "$compiled_log"
    record FAIL "the compiled plugin did not build against pip torch ($compiled_log)"
  elif ! timeout "$(limit 240)" "${compile_command[@]}" >>"$compiled_log" 2>&1; then
    tail -n 20 "$compiled_log"
    record FAIL "tools/compile_model.py --device cuda failed"
  else
    grep "^wrote " "$compiled_log"
    cp "$work/compiled-build/plugins_out/libdpl_model_compiled.so" "$plugins/"
    log="$work/compiled_train.log"
    timeout "$(limit 90)" "$launcher" --no-progress --master-port 0 --backend-timeout 120 \
      --data-dir "$deps/fashion-mnist" --data-cache "$work/data-cache" --plugin-dir "$plugins" \
      "${compiled_train[@]}" >"$log" 2>&1
    rc=$?
    losses=$(grep -oE "training loss: [-0-9.eE+naif]+" "$log" | awk '{print $3}' | paste -sd ' ')
    if ((rc != 0)); then
      tail -n 10 "$log"
      record FAIL "the compiled step on CUDA: exit $rc ($log)"
    elif "$python" -c 'import math, sys; v = [float(x) for x in sys.argv[1:]]
sys.exit(0 if len(v) >= 2 and all(map(math.isfinite, v)) and v[-1] < v[0] else 1)' $losses; then
      record PASS "the compiled step on CUDA: a package of tools/compile_model.py --device cuda trained, finite, falling losses ($losses)"
    else
      record FAIL "the compiled step on CUDA: losses not finite or not falling ($losses)"
    fi
  fi
fi
# ---- end of the compiled step ---------------------------------------------------------------

step "summary"
passed=0 failed=0 skipped=0
for line in "${results[@]}"; do
  echo "$line"
  case $line in PASS*) ((passed++)) ;; FAIL*) ((failed++)) ;; SKIP*) ((skipped++)) ;; esac
done
grep -h "samples/s on one GPU" "$out/bench_gpu.txt" 2>/dev/null
grep -h "tokens/s on one GPU" "$work/bench_lm.txt" 2>/dev/null
grep -h "^| 268435456 \|^| 8 " "$out/nccl_bandwidth.txt" 2>/dev/null
((gpus > 0)) || echo "dry run: no GPU here; the SKIP lines above need one"
echo "gpu_check: $passed passed, $failed failed, $skipped skipped in $((SECONDS - started)) s; files in $out"
if [[ ${DPL_GPU_CHECK_KEEP_WORK:-0} == 1 ]]; then
  echo "kept $work (DPL_GPU_CHECK_KEEP_WORK=1)"
else
  rm -rf "$work"
fi
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
((failed == 0))
