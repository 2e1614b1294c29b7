// The adapters this host ships, one file each (Note [Adding an ABI version]).
#pragma once

#include <vector>

#include "plugin_host/adapter_registry.hpp"

namespace dpl::plugin_host::adapters {

Adapter BackendV1Adapter();  // backend_v1.cpp
Adapter BackendV2Adapter();  // backend_v2.cpp
Adapter BackendV3Adapter();  // backend_v3.cpp
Adapter BackendV4Adapter();  // backend_v4.cpp
Adapter BackendV5Adapter();  // backend_v5.cpp
Adapter ModelV1Adapter();    // model_v1.cpp
Adapter ModelV2Adapter();    // model_v2.cpp
Adapter ModelV3Adapter();    // model_v3.cpp
Adapter ModelV4Adapter();    // model_v4.cpp
Adapter DatasetV1Adapter();  // dataset_v1.cpp
Adapter DatasetV2Adapter();  // dataset_v2.cpp

// All of the above.
std::vector<Adapter> BuiltinAdapters();

}  // namespace dpl::plugin_host::adapters
