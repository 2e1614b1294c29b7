// Model ABI v1 (dpl/model_v1.h) as the newest model interface.
//
// Note [Adapting model ABI v1]: later versions kept every v1 entry, in order and with its
// contract; v1 has none of the capabilities. The host then keeps batches in its own memory and
// trains only on the CPU, where it can update the parameters in place.
#include "plugin_host/adapters/model_v1.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_model_plugin_v1;

RequiredEntries Required(const void* table) {
  return RequiredModelV1Entries(static_cast<const Table*>(table));
}

ModelInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  ModelInterface model;
  TakeModelV1ConfigAndInfo(t, DPL_MODEL_ABI_VERSION_1, &model);
  TakeModelV1Entries(t, &model);
  return model;
}

}  // namespace

Adapter ModelV1Adapter() {
  return MakeAdapter(DPL_MODEL_ABI_VERSION_1, sizeof(Table), {}, &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
