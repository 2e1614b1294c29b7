#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {

std::vector<Adapter> BuiltinAdapters() {
  return {BackendV1Adapter(), BackendV2Adapter(), BackendV3Adapter(), BackendV4Adapter(),
          BackendV5Adapter(), ModelV1Adapter(),   ModelV2Adapter(),   ModelV3Adapter(),
          ModelV4Adapter(),   DatasetV1Adapter(), DatasetV2Adapter()};
}

}  // namespace dpl::plugin_host::adapters
