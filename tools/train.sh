#!/usr/bin/env bash
# Sets up, builds and runs the main job: ConvNet on Fashion-MNIST, 2 workers, gloo backend.
# Extra arguments go to the launcher, e.g. tools/train.sh --epochs 2.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/tools/setup.sh"
bash "$root/tools/build.sh" || {
  echo "train: the build failed (see above), so there is nothing to train with yet" >&2
  exit 1
}
launcher=$root/build/launcher/launcher
listing=$("$launcher" plugins 2>&1) || true
for wanted in "backend +gloo" "model +convnet"; do
  if ! grep -Eq "^$wanted " <<<"$listing"; then
    echo "$listing" >&2
    echo "train: training is not there yet: no '${wanted##* }' ${wanted%% *} plugin was built" >&2
    exit 1
  fi
done
exec "$launcher" --backend gloo --model convnet --num-processes 2 "$@"
