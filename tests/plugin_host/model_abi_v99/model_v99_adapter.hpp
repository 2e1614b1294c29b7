// The adapter of the tests' model ABI v99 (model_v99.h), built as the shipped adapters are
// (launcher/plugin_host/adapters/model_vN.cpp), for a test to register (RegisterAdapter).
#pragma once

#include "plugin_host/adapter_registry.hpp"

namespace dpl::plugin_host::testing {

Adapter ModelV99Adapter();

}  // namespace dpl::plugin_host::testing
