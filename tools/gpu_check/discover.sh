# Part of tools/gpu_check.sh, sourced in its shell (its helpers record, step, fits and limit and
# its variables carry over): what this machine has (the GPUs; pip torch, its CUDA runtime, NCCL
# and C++ standard; the CUDA toolkit, DLPack and GoogleTest) and the plan of the run.

step "GPU and pip torch"
smi_gpus=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  smi_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
else
  echo "no nvidia-smi"
fi
# Where pip torch's CUDA runtime and NCCL are: the files its process maps after `import torch`
# (what the model plugin's libtorch will load), else the wheels' folders: nvidia/cu13/{include,lib}
# for CUDA 13, nvidia/cuda_runtime and nvidia/nccl for CUDA 12 (NCCL keeps nvidia/nccl in both).
"$python" - >"$work/torch.sh" <<'PY'
import glob, os, shlex, sys
def put(name, value):
    print(f"{name}={shlex.quote(str(value))}")
try:
    import torch
except Exception as error:  # no torch, or a broken one
    put("TORCH_OK", 0)
    put("TORCH_WHY", f"{sys.executable} cannot import torch ({error.__class__.__name__}: {error})")
    sys.exit(0)
torch_dir = os.path.dirname(torch.__file__)
site = os.path.dirname(torch_dir)
def mapped(stem):
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if len(line.split()) >= 6}
    return sorted(os.path.realpath(p) for p in paths if os.path.basename(p).startswith(stem))
def first(*patterns):
    for pattern in patterns:
        hits = sorted(glob.glob(os.path.join(site, pattern)))
        if hits:
            return os.path.realpath(hits[0])
    return ""
nccl = (mapped("libnccl.so") or [""])[0] or first("nvidia/nccl/lib/libnccl.so.2",
                                                  "nvidia/cu13/lib/libnccl.so.2",
                                                  "nvidia/*/lib/libnccl.so.2")
cudart = (mapped("libcudart.so") or [""])[0] or first("nvidia/cu13/lib/libcudart.so.*",
                                                      "nvidia/cuda_runtime/lib/libcudart.so.*")
def include_beside(library, header):
    root = os.path.dirname(os.path.dirname(library)) if library else ""
    return root if root and os.path.exists(os.path.join(root, "include", header)) else ""
put("TORCH_OK", 1)
put("TORCH_VERSION", torch.__version__)
# The standard the plugins build in, by the rule of sdk/cmake/DplTorchModel.cmake: C++20 where
# the torch's headers refuse anything older (2.13 and later), else C++17.
aten = os.path.join(torch_dir, "include", "ATen", "ATen.h")
needs_cxx20 = os.path.exists(aten) and "C++20 or later" in open(aten).read()
put("TORCH_CXX_STANDARD", 20 if needs_cxx20 else 17)
put("TORCH_CUDA", torch.version.cuda or "none")
put("TORCH_GPUS", torch.cuda.device_count() if torch.version.cuda else 0)
put("TORCH_NCCL_VERSION", ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else "none")
put("TORCH_NCCL_MAPPED", 1 if mapped("libnccl.so") else 0)
put("TORCH_CMAKE_PREFIX", torch.utils.cmake_prefix_path)
put("TORCH_DIR", torch_dir)
put("TORCH_NCCL_LIB", nccl)
put("TORCH_NCCL_ROOT", include_beside(nccl, "nccl.h"))
put("TORCH_CUDART_LIB", cudart)
put("TORCH_CUDART_ROOT", include_beside(cudart, "cuda_runtime_api.h"))
PY
TORCH_OK=0 TORCH_WHY="$python failed" TORCH_GPUS=0 TORCH_CXX_STANDARD=17
# shellcheck disable=SC1091
source "$work/torch.sh"
gpus=$smi_gpus
if [[ $TORCH_OK == 1 ]]; then
  echo "torch $TORCH_VERSION, CUDA $TORCH_CUDA, NCCL $TORCH_NCCL_VERSION, GPUs $TORCH_GPUS"
  echo "torch's libnccl: ${TORCH_NCCL_LIB:-none} (mapped by import torch: $TORCH_NCCL_MAPPED);" \
    "its libcudart: ${TORCH_CUDART_LIB:-none}"
  gpus=$TORCH_GPUS
else
  echo "$TORCH_WHY"
fi
if ((gpus > 0)); then
  echo "GPUs: $gpus: a real run"
else
  echo "no GPU: a dry run (builds and runs what needs no GPU, says what it skips)"
fi

step "CUDA runtime, NCCL and DLPack for the plugin"
cuda_args=()
if [[ -f /usr/local/cuda/include/cuda_runtime_api.h ]]; then
  cuda_args+=("-DCUDAToolkit_ROOT=/usr/local/cuda")
elif [[ -n ${TORCH_CUDART_ROOT:-} ]]; then
  cuda_args+=("-DDPL_CUDA_RUNTIME_ROOT=$TORCH_CUDART_ROOT")
fi
nccl_args=()
if [[ -n ${TORCH_NCCL_LIB:-} && -n ${TORCH_NCCL_ROOT:-} ]]; then
  nccl_args+=("-DDPL_NCCL_LIBRARY=$TORCH_NCCL_LIB" "-DDPL_NCCL_INCLUDE_DIR=$TORCH_NCCL_ROOT/include")
elif [[ -n ${TORCH_NCCL_LIB:-} && -f /usr/local/cuda/include/nccl.h ]]; then
  # A wheel without its header: the toolkit's nccl.h, torch's library; a symbol the library lacks
  # fails the link (--no-undefined), not the run.
  nccl_args+=("-DDPL_NCCL_LIBRARY=$TORCH_NCCL_LIB" "-DDPL_NCCL_INCLUDE_DIR=/usr/local/cuda/include")
elif [[ -f /usr/local/cuda/include/nccl.h ]]; then
  nccl_args+=("-DNCCL_ROOT=/usr/local/cuda")
fi
echo "CUDA: ${cuda_args[*]:-none found}; NCCL: ${nccl_args[*]:-none found}"
dlpack_dir=""
for candidate in "$deps/include" /usr/include; do
  [[ -f $candidate/dlpack/dlpack.h ]] && { dlpack_dir=$candidate; break; }
done
if [[ -z $dlpack_dir && -n ${TORCH_DIR:-} && -f $TORCH_DIR/include/ATen/dlpack.h ]]; then
  dlpack_dir="$work/dlpack_include"
  mkdir -p "$dlpack_dir/dlpack" && cp "$TORCH_DIR/include/ATen/dlpack.h" "$dlpack_dir/dlpack/"
fi
gtest_dir=""
for candidate in "${GTEST_SOURCE_DIR:-}" "$deps/googletest" /usr/src/googletest; do
  [[ -n $candidate && -f $candidate/CMakeLists.txt ]] && { gtest_dir=$candidate; break; }
done
echo "DLPack: ${dlpack_dir:-none}; GoogleTest sources: ${gtest_dir:-none}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

step "plan"
# What this run builds against what, and what it runs; a dry run says what it leaves out.
if [[ $TORCH_OK == 1 ]]; then
  echo "would build the convnet and gpt plugins against torch $TORCH_VERSION (CUDA $TORCH_CUDA)" \
    "in C++$TORCH_CXX_STANDARD, the standard its headers ask for, from $TORCH_CMAKE_PREFIX"
else
  echo "would build no model plugin: $TORCH_WHY"
fi
echo "would build the nccl and tcp plugins${gtest_dir:+ and the nccl tests} against CUDA" \
  "${cuda_args[*]:-(none found)} and NCCL ${nccl_args[*]:-(none found)}"
if [[ -x $deps/bin/launcher ]]; then
  echo "would train with build-gpu-deps' launcher and plugins: $(cd "$deps/plugins" && echo *.so)"
else
  echo "would train nothing: no build-gpu-deps/bin/launcher (run tools/gpu_prepare.sh elsewhere)"
fi
if ((gpus > 0)); then
  echo "would run on $gpus GPU(s): the nccl tests, NCCL allreduce, the GPU optimizer test," \
    "the refusals, CUDA training (2 ranks through gloo and tcp, bf16, fp16, the optimizer on" \
    "the GPU) and the benchmarks against the DDP peer (bench_gpu.py, bench_lm.py --device cuda)"
else
  echo "a dry run: builds and runs the above where no GPU is needed (the nccl tests' refusals," \
    "the Fashion-MNIST losses on this CPU) and skips, saying so, every step that needs a GPU"
fi
