# Part of tools/gpu_check.sh, sourced in its shell: whole jobs. An elastic job on nccl, the
# benchmarks against the PyTorch DDP peer, and the compiled step.

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
    record_training "the compiled step on CUDA" $? "$log" \
      "a package of tools/compile_model.py --device cuda trained"
  fi
fi
# ---- end of the compiled step ---------------------------------------------------------------
