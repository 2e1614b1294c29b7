# Part of tools/gpu_check.sh, sourced in its shell: training. The refusals, the recorded
# Fashion-MNIST losses on this CPU, 2 ranks sharing the GPU, mixed precision, and the optimizer on
# the GPU in training.

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
    record_training "--precision $precision on CUDA" "$rc" "$log"
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
