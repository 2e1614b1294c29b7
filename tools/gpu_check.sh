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
#     trains a machine in again from it;
# 11. makes a CUDA package of the recipe's ConvNet with tools/compile_model.py and trains it with
#     --model compiled: finite, falling losses.
# The steps live in tools/gpu_check/ (discover, build, backend_steps, training_steps, job_steps),
# sourced in this order into this shell. Without a GPU (a dry run) it builds and runs what it can
# and says what it skipped. It writes at most 8 files to $OUT (gpu_check.log holds everything it
# prints). It plans for DPL_GPU_CHECK_BUDGET seconds (default 540): a step that would not fit in
# what is left is skipped and said, so the summary is always written. DPL_GPU_CHECK_PYTHON names
# the Python with torch (default python3); with a CPU-only torch the dry run also builds the
# convnet plugin against it. DPL_GPU_CHECK_KEEP_WORK=1 keeps the work folder (the built plugins)
# for runs of one's own.
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
logged_losses() { grep -oE "training loss: [-0-9.eE+naif]+" "$1" | awk '{print $3}' | paste -sd ' '; }
finite_and_falling() {  # finite_and_falling LOSS...: two or more, all finite, the last below the first
  "$python" -c 'import math, sys; v = [float(x) for x in sys.argv[1:]]
sys.exit(0 if len(v) >= 2 and all(map(math.isfinite, v)) and v[-1] < v[0] else 1)' "$@"
}
record_training() {  # record_training "what" RC LOG ["how"]: PASS when it ran and its losses fall
  local losses
  losses=$(logged_losses "$3")
  if (($2 != 0)); then
    tail -n 10 "$3"
    record FAIL "$1: exit $2 ($3)"
  elif finite_and_falling $losses; then  # unquoted: one argument a loss
    record PASS "$1: ${4:+$4, }finite, falling losses ($losses)"
  else
    record FAIL "$1: losses not finite or not falling ($losses)"
  fi
}
fits() {  # fits SECONDS "what": true when SECONDS more stay within the budget, else SKIP "what"
  (($(seconds_left) >= $1)) && return 0
  record SKIP "$2: $(seconds_left) s of the ${budget} s budget left, it needs $1"
  return 1
}

echo "== dpl gpu_check: repo $repo, work $work, output $out, $jobs cores"
date -u

# The steps, in order, each part in the same shell (their variables carry from one to the next).
for part in discover build backend_steps training_steps job_steps; do
  # shellcheck disable=SC1090
  source "$repo/tools/gpu_check/$part.sh"
done

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
