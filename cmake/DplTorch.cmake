# Which PyTorch the model plugins build against, and which Python every Python test runs with.
#   DPL_TORCH=pip (the default): dpl's pinned PyTorch 2 from tools/requirements.txt, in the Python
#     environment tools/setup.sh makes outside the checkout (tools/python_env.sh says where);
#     libtorch is that torch's own (its share/cmake/Torch), and DPL_PYTHON_EXECUTABLE its
#     interpreter.
#   DPL_TORCH=system: Debian's libtorch-dev (PyTorch 1.13) and /usr/bin/python3 with Debian's
#     python3-torch: the fallback for plugin authors on Debian (tools/check_system_torch.sh).
# DPL_PYTHON given on the command line wins over both (any interpreter whose torch to use).
# The launcher never links libtorch; only the SDK's torch helper, the model plugins and their
# tests do, and they take the C++ standard the torch asks for (C++20 from torch 2.13 on, which
# torch's own CMake target carries) through dpl_torch_model_plugin().
set(DPL_TORCH "pip" CACHE STRING "PyTorch to build the model plugins against: pip or system")
set_property(CACHE DPL_TORCH PROPERTY STRINGS pip system)

set(DPL_PYTHON "" CACHE FILEPATH "The Python whose torch to build against (default: DPL_TORCH's)")
if(DPL_PYTHON)
  set(DPL_PYTHON_EXECUTABLE "${DPL_PYTHON}")
elseif(DPL_TORCH STREQUAL "system")
  set(DPL_PYTHON_EXECUTABLE /usr/bin/python3)
elseif(DPL_TORCH STREQUAL "pip")
  # Asked at every configure, and the configure runs again when the pins change: a build never
  # goes on with the environment of older pins.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                                         "${PROJECT_SOURCE_DIR}/tools/requirements.txt")
  execute_process(COMMAND "${PROJECT_SOURCE_DIR}/tools/python_env.sh" python
                  OUTPUT_VARIABLE DPL_PYTHON_EXECUTABLE ERROR_VARIABLE dpl_python_error
                  RESULT_VARIABLE dpl_python_result OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT dpl_python_result EQUAL 0)
    message(FATAL_ERROR "${dpl_python_error}(or configure with -DDPL_TORCH=system for Debian's "
                        "PyTorch 1.13, or -DDPL_PYTHON=/path/to/python for another one)")
  endif()
else()
  message(FATAL_ERROR "DPL_TORCH must be pip or system (got ${DPL_TORCH})")
endif()
message(STATUS "dpl: Python ${DPL_PYTHON_EXECUTABLE} (DPL_TORCH=${DPL_TORCH})")

# Whether the torch has its CUDA part (pip's torch does; Debian's is CPU-only): what a model
# plugin says when asked for --device cuda on a machine without a GPU depends on it.
set(DPL_TORCH_HAS_CUDA 0)
set(DPL_TORCH_DIR "")  # where TorchConfig.cmake is when not found on the default paths
if(NOT DPL_TORCH STREQUAL "system")
  # The torch package's folder (its lib/ holds libtorch) and, for a CUDA build, the folders of the
  # NVIDIA wheels it loads its CUDA runtime and NCCL from (site-packages/nvidia/...).
  execute_process(COMMAND "${DPL_PYTHON_EXECUTABLE}" -c [=[
import glob, os, torch
root = os.path.dirname(torch.__file__)
nvidia = os.path.normpath(os.path.join(root, "..", "nvidia"))
runtime = [d for d in sorted(glob.glob(os.path.join(nvidia, "*")))
           if glob.glob(os.path.join(d, "lib", "libcudart.so*"))]
print(root, int(torch.backends.cuda.is_built()),
      os.path.join(nvidia, "nccl") if os.path.isdir(os.path.join(nvidia, "nccl")) else "",
      runtime[0] if runtime else "", *sorted(glob.glob(os.path.join(nvidia, "*", "lib"))),
      sep=";", end="")
]=]
                  OUTPUT_VARIABLE dpl_torch_folders ERROR_VARIABLE dpl_torch_error
                  RESULT_VARIABLE dpl_torch_result)
  if(NOT dpl_torch_result EQUAL 0)
    message(FATAL_ERROR "${DPL_PYTHON_EXECUTABLE} cannot import torch: ${dpl_torch_error}"
                        "Run tools/setup.sh, which makes dpl's Python environment")
  endif()
  list(POP_FRONT dpl_torch_folders dpl_torch_root DPL_TORCH_HAS_CUDA DPL_TORCH_NCCL_ROOT
       DPL_TORCH_CUDA_RUNTIME_ROOT)
  # A configure for another environment (changed pins) forgets what the cache found in the old
  # one: TorchConfig's libraries, the NCCL and CUDA runtime of its wheels.
  if(DPL_TORCH_ROOT_FOUND AND NOT DPL_TORCH_ROOT_FOUND STREQUAL dpl_torch_root)
    get_filename_component(dpl_old_site "${DPL_TORCH_ROOT_FOUND}" DIRECTORY)  # site-packages
    get_cmake_property(dpl_cached CACHE_VARIABLES)
    foreach(variable IN LISTS dpl_cached)
      string(FIND "${${variable}}" "${dpl_old_site}/" dpl_old_site_at)
      if(NOT dpl_old_site_at EQUAL -1)
        unset(${variable} CACHE)
      endif()
    endforeach()
  endif()
  set(DPL_TORCH_ROOT_FOUND "${dpl_torch_root}" CACHE INTERNAL "The torch the cache was found for")
  # The torch's own TorchConfig.cmake first, and its libraries (libc10, ...) before any other
  # libtorch on the machine (Debian's in /usr/lib): find_library searches CMAKE_LIBRARY_PATH before
  # the system's folders, and TorchConfig's own hints only after them.
  list(PREPEND CMAKE_PREFIX_PATH "${dpl_torch_root}/share/cmake")
  list(PREPEND CMAKE_LIBRARY_PATH "${dpl_torch_root}/lib")
  # Recorded in the installed dplConfig.cmake: outside model plugins build against this torch too.
  set(DPL_TORCH_DIR "${dpl_torch_root}/share/cmake/Torch")
  # A CUDA build's libtorch_cuda needs the NCCL, cuBLAS, ... of its wheels, found through its own
  # RUNPATH at run time; at link time the linker would take any older copy on its search path
  # first (/usr/local/cuda's NCCL, say) and miss newer symbols.
  foreach(folder IN LISTS dpl_torch_folders)
    add_link_options("LINKER:-rpath-link,${folder}")
  endforeach()
  # One process loads one libnccl.so.2 and one libcudart.so: the nccl backend plugin takes the
  # torch's (plugins/nccl/CMakeLists.txt), or loading a model plugin after it would fail on
  # symbols only the torch's newer NCCL has.
endif()
