#!/usr/bin/env bash
# Checks that dpl still builds and trains against Debian's libtorch-dev (PyTorch 1.13), the torch
# a plugin author on Debian has: builds into build-system-torch/ the convnet, gpt and torchscript
# model plugins (with the SDK's torch helper and torch_files) and what they need to train (the
# launcher, the idx and text data sets, the tcp backend) against it, checks that the plugins load
# Debian's libtorch and no other, and trains each model for 20 steps with 2 workers; the
# TorchScript module is written by Debian's python3-torch (tools/export_model.py under
# DPL_PYTHON=/usr/bin/python3). tools/test.sh runs it after the tests, so CI does.
# Exits non-zero naming what failed; tools/setup.sh installs what it needs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-system-torch
started=$SECONDS
debian_python=/usr/bin/python3
fashion_mnist=/usr/share/datasets/fashion-mnist
text=/usr/share/games/fortunes/songs-poems

fail() {
  echo "check_system_torch: $*" >&2
  exit 1
}

"$debian_python" -c "import torch" 2>/dev/null ||
  fail "$debian_python cannot import torch: install Debian's python3-torch (tools/setup.sh does)"
[[ -d $fashion_mnist && -f $text ]] ||
  fail "no $fashion_mnist or $text: install dataset-fashion-mnist and fortunes (tools/setup.sh)"

models=(convnet gpt torchscript)
DPL_BUILD_TARGETS="launcher dpl_backend_tcp dpl_dataset_idx dpl_dataset_text ${models[*]/#/dpl_model_}" \
  bash "$root/tools/build.sh" --system-torch -DDPL_BUILD_TESTS=OFF

for model in "${models[@]}"; do
  plugin=$build/plugins_out/libdpl_model_$model.so
  # Debian's libraries are found under /lib or /usr/lib (the same folder on a merged /usr); a
  # Python environment's libtorch lives elsewhere.
  loaded=$(ldd "$plugin" | awk '/libtorch|libc10/ {print $3}')
  grep -qE "^(/usr)?/lib/" <<<"$loaded" || fail "$plugin does not load Debian's libtorch: $loaded"
  if grep -vE "^(/usr)?/lib/" <<<"$loaded"; then
    fail "$plugin loads a libtorch besides Debian's (above)"
  fi
done
echo "check_system_torch: the plugins load Debian's libtorch" \
  "($("$debian_python" -c 'import torch; print(torch.__version__)'))"

work=$(mktemp -d /tmp/dpl-system-torch.XXXXXX)
trap 'rm -rf "$work"' EXIT
DPL_PYTHON=$debian_python "$root/tools/export_model.py" "$work/convnet.pt" >"$work/export.log" 2>&1 ||
  { cat "$work/export.log" >&2; fail "Debian's torch could not write the TorchScript ConvNet"; }

train() {  # train NAME LAUNCHER-FLAGS...: 20 steps with 2 workers; fails unless all 20 ran
  local log=$work/$1.log
  shift
  if ! "$build/launcher/launcher" --backend tcp --num-processes 2 --threads-per-worker 1 \
    --max-steps 20 --log-interval 10 --no-progress --no-eval --master-port 0 --data-cache none \
    "$@" >"$log" 2>&1 || ! grep -q "training done: 20 steps" "$log"; then
    tail -n 20 "$log" >&2
    fail "training $* against Debian's libtorch failed (above)"
  fi
  grep "training done" "$log"
}
train convnet --model convnet --data-dir "$fashion_mnist"
train torchscript --model torchscript --model-options "file=$work/convnet.pt" \
  --data-dir "$fashion_mnist"
train gpt --model gpt --model-options layers=2,heads=2,dim=32,block=32 --data text \
  --data-dir "$text" --data-options block=32 --batch-size 8
echo "check_system_torch: ${models[*]} built and trained 20 steps against Debian's libtorch" \
  "in $((SECONDS - started)) s"
