# Part of tools/gpu_check.sh, sourced in its shell: the builds. The convnet and gpt plugins against
# pip torch (in the background), the nccl and tcp plugins and the nccl tests against the CUDA
# runtime and the NCCL that pip torch loads.

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
