// Model ABI v4 (dpl/model_v4.h) as the newest model interface: typed samples, the evaluation
// result per target element, the optimizer on the model's device where the plugin has it, and
// the entries v4 gained after its release (share_parameters, share_gradients).
//
// Note [Frozen ABI versions]: model_v4.h as it is now is the released v4 and frozen: a new entry
// or flag is a new version (model_v5.h) with an adapter of its own. The entries v4 gained late
// are read only where a table's struct_size reaches them, and the flags of its info are turned
// into capabilities here (Note [Capabilities of an instance]); nothing outside this file asks a
// v4 table's size, its flags or whether an entry is empty.
#include "dpl/model_v4.h"
#include "plugin_host/adapters/builtin_adapters.hpp"
#include "plugin_host/adapters/model_v3.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_model_plugin_v4;

// What v4 can have beyond v3, and of those what a table or an instance may lack.
constexpr CapabilitySet<ModelCapability> kPerInstance = kModelV3PerInstance.With(
    {ModelCapability::kDeviceOptimizer, ModelCapability::kReplacedGradients,
     ModelCapability::kShareParameters, ModelCapability::kShareGradients});
constexpr CapabilitySet<ModelCapability> kCapabilities =
    kModelV3Capabilities.With({ModelCapability::kTypedSamples})
        .With({ModelCapability::kDeviceOptimizer, ModelCapability::kReplacedGradients,
               ModelCapability::kShareParameters, ModelCapability::kShareGradients});

// set_optimizer, gradient_statistics and apply_update are optional: NULL unless the plugin says
// DPL_MODEL_DEVICE_OPTIMIZER; share_parameters and share_gradients are optional and may be beyond
// the table's end.
RequiredEntries Required(const void* table) {
  return RequiredModelV3Entries(static_cast<const Table*>(table));
}

// What the table itself has of the per-instance capabilities.
struct TableFacts {
  bool device_optimizer = false;  // all three entries
  bool share_parameters = false;
  bool share_gradients = false;
};

// v3's, and v4's flags against what the table has.
Result<CapabilitySet<ModelCapability>> Described(const TableFacts& table,
                                                 const dpl_model_info& info) {
  CapabilitySet<ModelCapability> has = ModelV3Described(info);
  if ((info.flags & DPL_MODEL_DEVICE_OPTIMIZER) != 0) {
    if (!table.device_optimizer) {
      return Status::Error(DPL_ERR_INTERNAL,
                           "says DPL_MODEL_DEVICE_OPTIMIZER but lacks set_optimizer, "
                           "gradient_statistics or apply_update; fix the plugin");
    }
    has = has.With({ModelCapability::kDeviceOptimizer});
  }
  if ((info.flags & DPL_MODEL_REPLACED_GRADIENTS) != 0) {
    has = has.With({ModelCapability::kReplacedGradients});
  }
  if (table.share_parameters) has = has.With({ModelCapability::kShareParameters});
  if (table.share_gradients) has = has.With({ModelCapability::kShareGradients});
  return has;
}

ModelInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  ModelInterface model;
  model.create = CreateWithPrefix<dpl_model_config_v4>(t.create, DPL_MODEL_ABI_VERSION_4);
  model.describe = t.describe;
  TakeModelV1Entries(t, &model);
  model.eval_step = t.eval_step;
  TakeHostCopyEntries(t, &model);
  TakeModelV3Entries(t, &model);
  TableFacts facts;
  facts.device_optimizer =
      t.set_optimizer != nullptr && t.gradient_statistics != nullptr && t.apply_update != nullptr;
  if (facts.device_optimizer) {
    model.set_optimizer = t.set_optimizer;
    model.gradient_statistics = t.gradient_statistics;
    model.apply_update = t.apply_update;
  }
  // A table from before share_parameters ends where it begins.
  const bool reaches_shares = t.header.struct_size >= sizeof(Table);
  facts.share_parameters = reaches_shares && t.share_parameters != nullptr;
  facts.share_gradients = reaches_shares && t.share_gradients != nullptr;
  if (facts.share_parameters) model.share_parameters = t.share_parameters;
  if (facts.share_gradients) model.share_gradients = t.share_gradients;
  model.per_instance = kPerInstance;
  model.described_capabilities = [facts](const dpl_model_info& info) {
    return Described(facts, info);
  };
  return model;
}

}  // namespace

Adapter ModelV4Adapter() {
  return MakeAdapter(DPL_MODEL_ABI_VERSION_4, DPL_MODEL_PLUGIN_V4_FIRST_SIZE, kCapabilities,
                     &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
