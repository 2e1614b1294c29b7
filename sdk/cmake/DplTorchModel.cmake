# dpl_torch_model_plugin(<target> [ABI_VERSION 1|2|3|4])
# Makes the MODULE library <target>, whose one .cpp uses DPL_EXPORT_TORCH_MODEL from
# dpl/torch_model.hpp, a dpl model plugin: links dpl::sdk, dpl::torch_files (the state files are
# torch.save archives, read and written by the SDK's library) and libtorch, exports nothing but the
# entry table of model ABI <ABI_VERSION> (default 4, the newest), and refuses undefined symbols
# at link time. Used by the in-tree models and, through find_package(dpl), by outside ones, which
# build against the libtorch dpl was built against unless given -DTorch_DIR=.
function(dpl_torch_model_plugin target)
  cmake_parse_arguments(ARG "" "ABI_VERSION" "" ${ARGN})
  if(NOT ARG_ABI_VERSION)
    set(ARG_ABI_VERSION 4)
  endif()
  if(NOT TARGET dpl::torch_files)
    message(FATAL_ERROR "dpl_torch_model_plugin(${target}) needs dpl::torch_files, which "
                        "find_package(dpl) defines only where zlib is found: install zlib1g-dev")
  endif()
  # The libtorch dpl was built against (DPL_TORCH_DIR: dpl's pinned PyTorch 2, see
  # cmake/DplTorch.cmake; else Debian's), or the one a given Torch_DIR names: every plugin of a
  # launcher loads into one process, which holds one libtorch. Its libraries are found in its own
  # lib/ before the system's folders (where Debian's libc10.so may be).
  # Its share/cmake goes first on the prefix path (TorchConfig.cmake finds Caffe2Config.cmake on
  # the default paths before its own folder).
  if(NOT Torch_DIR AND DPL_TORCH_DIR)
    get_filename_component(torch_configs "${DPL_TORCH_DIR}/.." ABSOLUTE)
    list(PREPEND CMAKE_PREFIX_PATH "${torch_configs}")
    set(Torch_DIR "${DPL_TORCH_DIR}")
  endif()
  if(Torch_DIR AND EXISTS "${Torch_DIR}/../../../lib")
    get_filename_component(torch_libraries "${Torch_DIR}/../../../lib" ABSOLUTE)
    list(PREPEND CMAKE_LIBRARY_PATH "${torch_libraries}")
  endif()
  find_package(Torch REQUIRED)
  target_link_libraries(${target} PRIVATE dpl::sdk dpl::torch_files ${TORCH_LIBRARIES})
  # torch 2.13 and later need C++20 in every file that includes their headers ("#error C++20 or
  # later compatible compiler is required to use ATen"; their CMake target says so too); older
  # ones do not, and Debian's 1.13 builds as C++17. The header decides, whatever the version
  # says (tools/gpu_check.sh reads it the same way).
  set(needs_cxx20 "")
  foreach(folder IN LISTS TORCH_INCLUDE_DIRS)
    if(NOT needs_cxx20 AND EXISTS "${folder}/ATen/ATen.h")
      file(STRINGS "${folder}/ATen/ATen.h" needs_cxx20 REGEX "C\\+\\+20 or later")
    endif()
  endforeach()
  if(needs_cxx20 OR Torch_VERSION VERSION_GREATER_EQUAL 2.13)
    target_compile_features(${target} PRIVATE cxx_std_20)
  endif()
  target_compile_definitions(${target} PRIVATE DPL_TORCH_MODEL_ABI_VERSION=${ARG_ABI_VERSION})
  # at::parallel_for is a header template: compiled without OpenMP it runs every loop of the
  # plugin's own kernels on one thread (Note [Loops of the thread team] in
  # dpl/torch_model/parallel.hpp). Debian's libtorch uses OpenMP (libgomp), so the plugin's loops
  # join the same thread pool; a library the plugin links that runs loops needs it too.
  find_package(OpenMP COMPONENTS CXX)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
  endif()
  # An installed plugin keeps the folders of the libtorch it linked in its run path: a pip torch
  # lives in a Python environment, not in a folder the loader searches.
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden
                                             VISIBILITY_INLINES_HIDDEN ON
                                             INSTALL_RPATH_USE_LINK_PATH ON)
  # libtorch's headers mark many classes visibility("default"), so template code instantiated in
  # the plugin would be exported despite hidden visibility; the version script keeps the entry.
  set(map "${CMAKE_CURRENT_BINARY_DIR}/${target}_exports.map")
  file(WRITE "${map}" "{ global: dpl_model_plugin_v${ARG_ABI_VERSION}; local: *; };\n")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${map}" "LINKER:--no-undefined")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${map}")
  # A libtorch with CUDA registers its GPU support from libtorch_cuda when that library loads. The
  # plugin calls nothing in it directly, so a linker that drops unused libraries (--as-needed, the
  # default on some distributions) would leave CUDA unregistered: keep every library.
  if(TORCH_CUDA_LIBRARIES OR TARGET torch_cuda)
    target_link_options(${target} PRIVATE "LINKER:--no-as-needed")
  endif()
endfunction()
