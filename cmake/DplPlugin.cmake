# dpl_add_plugin(<target> SOURCES ... [LIBRARIES ...] [ENTRY_SYMBOL <symbol>])
# Builds a plugin shared library into the build tree's plugin folder and installs it into the
# install's plugin folder. Used by every in-tree backend, model and dataset. With ENTRY_SYMBOL, a
# version script hides every dynamic symbol but that one, even the weak std:: template instances
# libstdc++ declares with default visibility (torch models get theirs from
# dpl_torch_model_plugin).
function(dpl_add_plugin target)
  cmake_parse_arguments(ARG "" "ENTRY_SYMBOL" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE dpl::sdk ${ARG_LIBRARIES})
  target_compile_options(${target} PRIVATE ${DPL_WARNING_FLAGS})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY "${DPL_BUILD_PLUGIN_DIR}"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  # A plugin must not leave undefined symbols for the host to satisfy.
  target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  if(ARG_ENTRY_SYMBOL)
    set(map "${CMAKE_CURRENT_BINARY_DIR}/${target}_exports.map")
    file(WRITE "${map}" "{ global: ${ARG_ENTRY_SYMBOL}; local: *; };\n")
    target_link_options(${target} PRIVATE "LINKER:--version-script=${map}")
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${map}")
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION "${DPL_INSTALL_PLUGIN_DIR}")
endfunction()
