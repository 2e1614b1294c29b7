#!/usr/bin/env bash
# Makes dpl's Python environment from tools/requirements.txt where tools/python_env.sh says, or
# does nothing when it is there and complete. Called by tools/setup.sh; an argument of 1 also
# installs the benchmarks' peers (tools/requirements-bench.txt), with the environment's own pins
# as constraints so that no peer moves the pinned torch.
# The first time downloads about 3 GB (PyTorch's CUDA build: it runs on the CPU where there is
# no GPU) and takes a few minutes; downloads are kept in the home's pip cache, so an environment
# for changed pins reuses the wheels that did not change.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=${1:-0}
env_script=$root/tools/python_env.sh
home=$("$env_script" home)
dir=$("$env_script" dir)
stamp=$("$env_script" stamp)
base_python=${DPL_BASE_PYTHON:-/usr/bin/python3}

mkdir -p "$home"
# Two setups at once (two clones, CI and a shell) take turns instead of writing one folder twice.
exec 9>"$home/setup.lock"
flock 9

pip_install() {
  "$dir/bin/python" -m pip install --disable-pip-version-check --cache-dir "$home/pip-cache" \
    --progress-bar off -q "$@"
}

if [[ -f $stamp ]]; then
  echo "setup: Python environment $dir is there"
else
  [[ -x $base_python ]] || {
    echo "setup: $base_python is missing: install Debian's python3 and python3-venv" >&2
    exit 1
  }
  echo "setup: making the Python environment $dir from tools/requirements.txt"
  echo "setup: the first time this downloads about 3 GB (PyTorch with CUDA) and takes minutes"
  rm -rf "$dir"
  started=$SECONDS
  "$base_python" -m venv "$dir" || {
    echo "setup: $base_python -m venv failed: install Debian's python3-venv" >&2
    exit 1
  }
  pip_install -r "$root/tools/requirements.txt" || {
    echo "setup: pip could not install tools/requirements.txt into $dir; is PyPI reachable?" \
      "Run tools/setup.sh again once it is" >&2
    exit 1
  }
  "$dir/bin/python" -c "import torch, torchvision, numpy" || {
    echo "setup: the new environment $dir cannot import torch; remove it and run tools/setup.sh" >&2
    exit 1
  }
  cp "$root/tools/requirements.txt" "$stamp"
  echo "setup: Python environment made in $((SECONDS - started)) s ($(du -sh "$dir" | cut -f1))"
fi

if ((bench)); then
  echo "setup: installing the benchmarks' peers (tools/requirements-bench.txt)"
  # DeepSpeed builds its extensions at run time; without a GPU it needs no CUDA at install.
  DS_BUILD_OPS=0 pip_install -r "$root/tools/requirements-bench.txt" \
    -c "$root/tools/requirements.txt" || {
    echo "setup: could not install tools/requirements-bench.txt (the benchmarks' peers)" >&2
    exit 1
  }
fi
