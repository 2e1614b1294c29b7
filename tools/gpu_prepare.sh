#!/usr/bin/env bash
# Prepares, on a Debian dev machine, what tools/gpu_check.sh needs on the GPU machine but cannot
# build or get there (no Debian packages, no network), in build-gpu-deps/ (an ignored folder):
#   bin/launcher          the launcher with Boost and the C++ runtime linked in
#                         (-DDPL_PORTABLE_LAUNCHER=ON): the GPU machine has no Boost
#   plugins/              the idx data set plugin (the launcher reads Fashion-MNIST through it),
#                         the cifar10 and tokens ones (tokens: the language-model benchmark),
#                         and the gloo backend plugin, built against Debian's libgloo
#   lib/                  the libraries the launcher and these plugins need beyond glibc and
#                         the C++ runtime (the launcher: libgomp)
#   include/dlpack/       the DLPack header the SDK compiles against
#   fashion-mnist/        the data set's IDX .gz files
#   googletest/           GoogleTest's sources, for the nccl tests
# Usage:
#   tools/gpu_prepare.sh
#   then copy build-gpu-deps to the GPU machine, into the checkout's root, and run
#   tools/gpu_check.sh there (docs/gpu.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=$root/build-gpu-deps
data=${DPL_GPU_DATA_DIR:-/usr/share/datasets/fashion-mnist}
jobs=${DPL_GPU_PREPARE_JOBS:-2}

# No model plugin travels (tools/gpu_check.sh builds them there, against that machine's torch):
# Debian's libtorch only lets the configure step find a torch, so this needs no Python
# environment of dpl's.
configured=$(cmake -S "$root" -B "$root/build-gpu-launcher" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDPL_PORTABLE_LAUNCHER=ON -DDPL_BUILD_TESTS=OFF -DDPL_WITH_NCCL=OFF -DDPL_TORCH=system)
targets=(launcher dpl_dataset_idx dpl_dataset_cifar10 dpl_dataset_tokens)
if ! grep -q "gloo backend skipped" <<<"$configured"; then
  targets+=(dpl_backend_gloo)
else
  echo "gpu_prepare: no gloo plugin (install libgloo-dev): the GPU check will skip its gloo run" >&2
fi
cmake --build "$root/build-gpu-launcher" -j "$jobs" --target "${targets[@]}"

rm -rf "$deps"
mkdir -p "$deps/bin" "$deps/plugins" "$deps/lib" "$deps/include/dlpack" "$deps/fashion-mnist"
cp "$root/build-gpu-launcher/launcher/launcher" "$deps/bin/launcher"
strip "$deps/bin/launcher"
if ldd "$deps/bin/launcher" | grep -q -E "boost|libstdc\+\+"; then
  echo "gpu_prepare: the launcher still needs Boost or libstdc++ at run time:" >&2
  ldd "$deps/bin/launcher" >&2
  exit 1
fi

# Everything `built` loads but the C runtime and the C++ runtime, which every machine with a pip
# torch has, into lib/: the launcher's OpenMP runtime (libgomp), zlib for idx, libgloo and what
# libgloo needs (hiredis, ibverbs, netlink).
copy_libraries() {
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r library; do
    case $(basename "$library") in
      libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.* | \
        libstdc++.so.* | libgcc_s.so.*) ;;
      *) cp -L "$library" "$deps/lib/" ;;
    esac
  done
}
copy_libraries "$deps/bin/launcher"
for plugin in dpl_dataset_idx dpl_dataset_cifar10 dpl_dataset_tokens dpl_backend_gloo; do
  built=$root/build-gpu-launcher/plugins_out/lib$plugin.so
  [[ -f $built ]] || continue
  cp "$built" "$deps/plugins/"
  strip "$deps/plugins/lib$plugin.so"
  copy_libraries "$built"
done

cp /usr/include/dlpack/dlpack.h "$deps/include/dlpack/" ||
  { echo "gpu_prepare: no /usr/include/dlpack/dlpack.h (install libdlpack-dev)" >&2; exit 1; }
cp "$data"/*-ubyte.gz "$deps/fashion-mnist/" ||
  { echo "gpu_prepare: no IDX .gz files in $data (install dataset-fashion-mnist)" >&2; exit 1; }
if [[ -f /usr/src/googletest/CMakeLists.txt ]]; then
  cp -r /usr/src/googletest "$deps/googletest"
else
  echo "gpu_prepare: no /usr/src/googletest (install googletest): the GPU check will skip" \
    "the nccl tests" >&2
fi
du -sh "$deps"
echo "gpu_prepare: done; copy build-gpu-deps to the GPU machine"
