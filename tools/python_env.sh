#!/usr/bin/env bash
# Where dpl's Python environment is, the one place that says so (tools/setup.sh makes it, CMake and
# tools/python use it). It lives outside the checkout, so clones and CI reuse it: under
# $DPL_PYTHON_ENV_HOME, else $XDG_CACHE_HOME/dpl (or ~/.cache/dpl where one was made there), else
# ~/.cache/dpl, in a folder named by the hash of tools/requirements.txt, so a changed pin makes a new one instead of changing an old one.
# Usage:
#   tools/python_env.sh dir       the environment's folder (whether or not it exists)
#   tools/python_env.sh python    its interpreter; exits 1 saying the command to run when the
#                                 environment is missing or was not finished
#   tools/python_env.sh home      the folder all environments and the download cache live in
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements=$root/tools/requirements.txt
home=${DPL_PYTHON_ENV_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/dpl}
key=$(sha256sum "$requirements" | cut -c1-12)
dir=$home/python-$key
# Written last by tools/setup.sh: an environment without it was interrupted.
stamp=$dir/.dpl-complete
# An environment made before $XDG_CACHE_HOME was set (to move dpl's data cache, say) is still
# found in ~/.cache/dpl instead of being downloaded again.
if [[ ! -f $stamp && -z ${DPL_PYTHON_ENV_HOME:-} && -n ${XDG_CACHE_HOME:-} &&
  -f $HOME/.cache/dpl/python-$key/.dpl-complete ]]; then
  dir=$HOME/.cache/dpl/python-$key
  stamp=$dir/.dpl-complete
fi

case ${1:-} in
  dir) echo "$dir" ;;
  home) echo "$home" ;;
  stamp) echo "$stamp" ;;
  python)
    if [[ ! -f $stamp ]]; then
      echo "dpl: no Python environment for tools/requirements.txt (pins $key) at $dir;" \
        "run tools/setup.sh to make it (the first time downloads about 3 GB)" >&2
      exit 1
    fi
    echo "$dir/bin/python"
    ;;
  *)
    echo "usage: tools/python_env.sh dir|python|home|stamp" >&2
    exit 2
    ;;
esac
