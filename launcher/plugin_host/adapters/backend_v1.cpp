// Backend ABI v1 (dpl/backend_v1.h) as the newest backend interface.
//
// Note [Adapting backend ABI v1]: later versions kept every v1 entry with its type; v2 appended
// synchronize and the config's local_address, v3 reduce_scatter (Note [Collectives older backends
// lack]), v4 abort (left empty: nothing can end a call blocked in a plugin from outside). A v1
// plugin gets the v1 prefix of the config. Its collectives are complete in stream order when they
// return, so its synchronize returns at once.
#include "plugin_host/adapters/backend_v1.hpp"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dpl/backend_v1.h"
#include "dpl/support/backend.hpp"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_backend_plugin_v1;

RequiredEntries Required(const void* table) {
  return RequiredBackendV1Entries(static_cast<const Table*>(table));
}

BackendInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  BackendInterface backend;
  backend.create = CreateWithPrefix<dpl_backend_config_v1>(t.create, DPL_BACKEND_ABI_VERSION_1);
  TakeBackendV1Entries(t, &backend);
  backend.synchronize = [](dpl_backend*, void*) { return DPL_OK; };
  AddCollectivesOfV3(&backend);
  return backend;
}

// Where an instance sits in its world, from its config at create.
struct Place {
  int32_t rank = 0;
  int32_t world_size = 1;
};

class Instances {
 public:
  void Add(dpl_backend* instance, Place place) {
    std::lock_guard<std::mutex> lock(mutex_);
    places_[instance] = place;
  }
  void Remove(dpl_backend* instance) {
    std::lock_guard<std::mutex> lock(mutex_);
    places_.erase(instance);
  }
  bool Find(dpl_backend* instance, Place* place) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = places_.find(instance);
    if (found == places_.end()) return false;
    *place = found->second;
    return true;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<dpl_backend*, Place> places_;
};

// The message of this thread's last call when the adapter itself refused it, else "".
std::string& AdapterError() {
  static thread_local std::string text;
  return text;
}

dpl_status Refuse(dpl_status status, const std::string& message) {
  AdapterError() = "backend adapter: " + message;
  return status;
}

// `entry` with the adapter's last refusal forgotten first: the plugin answers for this call.
template <typename Entry>
Entry ForgettingRefusals(Entry entry) {
  return [entry](auto... arguments) {
    AdapterError().clear();
    return entry(arguments...);
  };
}

// Runs one of the SDK's checks, which throw, as a status.
template <typename Check>
dpl_status Checked(Check&& check) {
  try {
    check();
    return DPL_OK;
  } catch (const support::PluginError& error) {
    return Refuse(error.status(), error.what());
  }
}

dpl_status ReduceScatter(const BackendInterface& plugin, const Instances& instances,
                         dpl_backend* instance, DLTensor* input, DLTensor* output, dpl_reduce_op op,
                         void* stream) {
  AdapterError().clear();
  Place place;
  if (input == nullptr || output == nullptr) {
    return Refuse(DPL_ERR_INVALID_ARGUMENT, "reduce_scatter input or output is NULL");
  }
  if (!instances.Find(instance, &place)) {
    return Refuse(DPL_ERR_INVALID_ARGUMENT, "reduce_scatter on an instance not created here");
  }
  bool in_place = false;
  const dpl_status checked = Checked([&] {
    in_place = support::CheckReduceScatter(*input, *output, place.world_size, place.rank);
  });
  if (checked != DPL_OK) return checked;
  if (!in_place &&
      !(support::InHostMemory(input->device) && support::InHostMemory(output->device))) {
    return Refuse(DPL_ERR_UNSUPPORTED,
                  "this backend's ABI has no reduce_scatter; out of place it is made of an "
                  "allreduce and a host copy, so device tensors must use the in-place form");
  }
  const dpl_status reduced = plugin.allreduce(instance, input, op, stream);
  if (reduced != DPL_OK || in_place) return reduced;
  const size_t bytes = support::ByteCount(*output);
  std::memcpy(support::DataPointer(*output),
              static_cast<const char*>(support::DataPointer(*input)) + size_t(place.rank) * bytes,
              bytes);
  return DPL_OK;
}

dpl_status Allgather(const BackendInterface& plugin, const Instances& instances,
                     dpl_backend* instance, const DLTensor* input, DLTensor* output, void* stream) {
  AdapterError().clear();
  Place place;
  if (input == nullptr || output == nullptr || !instances.Find(instance, &place)) {
    return plugin.allgather(instance, input, output, stream);  // the plugin's own refusal
  }
  bool in_place = false;
  const dpl_status checked = Checked([&] {
    in_place = support::CheckAllgatherPlacement(*input, *output, place.world_size, place.rank);
  });
  if (checked != DPL_OK) return checked;
  if (!in_place) return plugin.allgather(instance, input, output, stream);
  if (!support::InHostMemory(input->device)) {
    return Refuse(DPL_ERR_UNSUPPORTED,
                  "this backend's ABI has no in-place allgather; it is made of a host copy, so "
                  "device tensors must be gathered out of place");
  }
  const size_t bytes = support::ByteCount(*input);
  std::vector<char> scratch(bytes);
  std::memcpy(scratch.data(), support::DataPointer(*input), bytes);
  DLTensor copy = *input;
  copy.data = scratch.data();
  copy.byte_offset = 0;
  return plugin.allgather(instance, &copy, output, stream);
}

}  // namespace

void AddCollectivesOfV3(BackendInterface* backend) {
  auto instances = std::make_shared<Instances>();
  auto create = backend->create;
  backend->create = [create, instances](const dpl_backend_config* config, dpl_backend** out) {
    AdapterError().clear();
    const dpl_status status = create(config, out);
    if (status == DPL_OK && config != nullptr && out != nullptr && *out != nullptr) {
      instances->Add(*out, {config->rank, config->world_size});
    }
    return status;
  };
  auto destroy = backend->destroy;
  backend->destroy = [destroy, instances](dpl_backend* instance) {
    instances->Remove(instance);
    destroy(instance);
  };
  backend->allreduce = ForgettingRefusals(backend->allreduce);
  backend->broadcast = ForgettingRefusals(backend->broadcast);
  backend->barrier = ForgettingRefusals(backend->barrier);
  backend->synchronize = ForgettingRefusals(backend->synchronize);
  const BackendInterface plugin = *backend;
  backend->reduce_scatter = [plugin, instances](dpl_backend* instance, DLTensor* input,
                                                DLTensor* output, dpl_reduce_op op, void* stream) {
    return ReduceScatter(plugin, *instances, instance, input, output, op, stream);
  };
  backend->allgather = [plugin, instances](dpl_backend* instance, const DLTensor* input,
                                           DLTensor* output, void* stream) {
    return Allgather(plugin, *instances, instance, input, output, stream);
  };
  auto last_error = backend->last_error;
  backend->last_error = [last_error]() -> const char* {
    return AdapterError().empty() ? last_error() : AdapterError().c_str();
  };
}

Adapter BackendV1Adapter() {
  return MakeAdapter(DPL_BACKEND_ABI_VERSION_1, sizeof(Table), {}, &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
