#!/usr/bin/env bash
# Sets up what dpl needs, doing nothing that is already done (safe to run again):
#   1. the Debian packages (root or sudo only when something is missing; Debian 12, bookworm);
#   2. dpl's Python environment: the pinned PyTorch 2 of tools/requirements.txt that the model
#      plugins build against and every Python tool, test and peer runs with, made outside the
#      checkout (tools/python_env.sh says where) so that clones and CI reuse it.
# Usage:
#   tools/setup.sh                  both
#   tools/setup.sh --bench          also the peers the benchmarks compare with
#                                   (tools/requirements-bench.txt: DeepSpeed, torchft, ...)
#   tools/setup.sh --system-torch   Debian's packages only, with Debian's python3-torch (PyTorch
#                                   1.13) as the Python; build with tools/build.sh --system-torch
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
system_torch=0
bench=0
for argument in "$@"; do
  case $argument in
    --system-torch) system_torch=1 ;;
    --bench) bench=1 ;;
    *)
      echo "setup: unknown argument $argument (known: --bench, --system-torch)" >&2
      exit 2
      ;;
  esac
done

# Needed to build, test and train.
required=(
  build-essential cmake ninja-build ccache clang-format
  # Debian's libtorch (PyTorch 1.13) stays a tested fallback for plugin authors
  # (tools/check_system_torch.sh, which writes its TorchScript module with Debian's
  # python3-torch); the default build uses the pinned PyTorch 2.
  libtorch-dev python3-torch libopenblas0-openmp libgloo-dev libdlpack-dev
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libgtest-dev googletest
  dataset-fashion-mnist
  # The interpreter dpl's Python environment is made from.
  python3 python3-venv
  protobuf-compiler libprotobuf-dev
  libpng-dev libjpeg-dev
  # WebP images in WebDataset shards (datasets/webdataset).
  libwebp-dev
  iproute2
  # The cluster tests: a one-node Slurm the test starts (srun, sbatch) and ssh between two
  # network namespaces (--hostfile).
  slurm-wlm munge openssh-server openssh-client
  # The etcd store's tests (--store etcd://): real etcd clusters the tests start on loopback.
  etcd-server
  # English text for the language-model tests and the README's first GPT
  # (/usr/share/games/fortunes).
  fortunes
)
# Only for plotting benchmark results; a missing one is a warning, not a failure.
optional=()
# With --system-torch, Debian's Python packages are the tests' and tools' Python.
if ((system_torch)); then
  required+=(python3-numpy python3-protobuf python3-pil)
  optional+=(python3-matplotlib)
fi

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing_of() {
  local package
  for package in "$@"; do
    is_installed "$package" || echo "$package"
  done
}

install_packages() {
  as_root=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || {
      echo "setup: missing packages ${missing_required[*]} ${missing_optional[*]}; run as root" >&2
      exit 1
    }
    as_root=(sudo)
  fi
  apt_get() { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }

  echo "setup: installing ${missing_required[*]} ${missing_optional[*]}"
  apt_get update -q || echo "setup: apt-get update failed; trying the package lists there are" >&2
  if ((${#missing_required[@]} > 0)); then
    apt_get install -y -q --no-install-recommends "${missing_required[@]}" || {
      echo "setup: could not install ${missing_required[*]}; dpl needs them to build" >&2
      exit 1
    }
  fi
  if ((${#missing_optional[@]} > 0)); then
    apt_get install -y -q --no-install-recommends "${missing_optional[@]}" ||
      echo "setup: warning: could not install ${missing_optional[*]} (only plots need it)" >&2
  fi
}

mapfile -t missing_required < <(missing_of "${required[@]}")
mapfile -t missing_optional < <(missing_of "${optional[@]+"${optional[@]}"}")
if ((${#missing_required[@]} == 0 && ${#missing_optional[@]} == 0)); then
  echo "setup: every package is installed"
else
  install_packages
fi
if ((system_torch)); then
  echo "setup: done (Debian's PyTorch; build with tools/build.sh --system-torch)"
  exit 0
fi
bash "$root/tools/setup_python.sh" "$bench"
echo "setup: done"
