#!/usr/bin/env bash
# Prepares, on a Debian dev machine, what tools/gpu_check.sh needs on the GPU machine but cannot
# get there (no Debian packages, no network): a launcher binary with Boost and the C++ runtime
# linked in (-DDPL_PORTABLE_LAUNCHER=ON), the Fashion-MNIST files and GoogleTest's sources. They
# go to build-gpu-deps/ (an ignored folder), which the device run must carry:
#   tools/gpu_prepare.sh
#   run(command="bash tools/gpu_check.sh", carry=["build-gpu-deps"])
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=$root/build-gpu-deps
data=${DPL_GPU_DATA_DIR:-/usr/share/datasets/fashion-mnist}

cmake -S "$root" -B "$root/build-gpu-launcher" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDPL_PORTABLE_LAUNCHER=ON -DDPL_BUILD_TESTS=OFF -DDPL_WITH_NCCL=OFF >/dev/null
cmake --build "$root/build-gpu-launcher" --target launcher
rm -rf "$deps"
mkdir -p "$deps/bin" "$deps/fashion-mnist"
cp "$root/build-gpu-launcher/launcher/launcher" "$deps/bin/launcher"
strip "$deps/bin/launcher"
if ldd "$deps/bin/launcher" | grep -q -E "boost|libstdc\+\+"; then
  echo "gpu_prepare: the launcher still needs Boost or libstdc++ at run time:" >&2
  ldd "$deps/bin/launcher" >&2
  exit 1
fi
cp "$data"/*-ubyte.gz "$deps/fashion-mnist/" ||
  { echo "gpu_prepare: no IDX .gz files in $data (install dataset-fashion-mnist)" >&2; exit 1; }
if [[ -f /usr/src/googletest/CMakeLists.txt ]]; then
  cp -r /usr/src/googletest "$deps/googletest"
fi
du -sh "$deps"
echo "gpu_prepare: done; carry build-gpu-deps to the GPU machine"
