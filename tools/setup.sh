#!/usr/bin/env bash
# Installs every Debian package dpl needs, and nothing when all are there (safe to run again).
# Needs root or sudo only when something is missing. Tested on Debian 12 (bookworm).
set -euo pipefail

# Needed to build, test and train.
required=(
  build-essential cmake ninja-build ccache clang-format
  libtorch-dev libopenblas0-openmp libgloo-dev libdlpack-dev
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libgtest-dev googletest
  dataset-fashion-mnist
  python3-torch python3-numpy
  protobuf-compiler libprotobuf-dev python3-protobuf
  libpng-dev libjpeg-dev python3-pil
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
optional=(python3-matplotlib)

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing_of() {
  local package
  for package in "$@"; do
    is_installed "$package" || echo "$package"
  done
}

mapfile -t missing_required < <(missing_of "${required[@]}")
mapfile -t missing_optional < <(missing_of "${optional[@]}")
if ((${#missing_required[@]} == 0 && ${#missing_optional[@]} == 0)); then
  echo "setup: every package is installed"
  exit 0
fi

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
echo "setup: done"
