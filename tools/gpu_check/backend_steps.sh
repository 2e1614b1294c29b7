# Part of tools/gpu_check.sh, sourced in its shell: the nccl plugin's tests, NCCL's bandwidth
# through it, the model plugins' builds, and the optimizer on the GPU against the CPU's.

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
