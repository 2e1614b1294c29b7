// The connected communication backend a worker trains with: the plugin's table in the newest
// layout (an older plugin's adapted by the plugin host), one instance, and its calls as Status
// values that name the plugin. Owns the instance: the destructor destroys it.
#pragma once

#include <dlpack/dlpack.h>

#include <memory>
#include <string>
#include <type_traits>

#include "common/plugin_status.hpp"
#include "common/status.hpp"
#include "dpl/backend.h"

namespace dpl::training {

// The entries every supported backend ABI shares (their types are the same in v1 and v2), and
// v2's synchronize (NULL for a v1 plugin).
struct BackendFunctions {
  void (*destroy)(dpl_backend*) = nullptr;
  dpl_status (*allreduce)(dpl_backend*, DLTensor*, dpl_reduce_op, void*) = nullptr;
  dpl_status (*broadcast)(dpl_backend*, DLTensor*, int32_t, void*) = nullptr;
  dpl_status (*allgather)(dpl_backend*, const DLTensor*, DLTensor*, void*) = nullptr;
  dpl_status (*barrier)(dpl_backend*) = nullptr;
  const char* (*last_error)(void) = nullptr;
  dpl_status (*synchronize)(dpl_backend*, void*) = nullptr;

  template <typename Table>
  static BackendFunctions Of(const Table& table) {
    BackendFunctions functions;
    functions.destroy = table.destroy;
    functions.allreduce = table.allreduce;
    functions.broadcast = table.broadcast;
    functions.allgather = table.allgather;
    functions.barrier = table.barrier;
    functions.last_error = table.last_error;
    if constexpr (std::is_same_v<Table, dpl_backend_plugin_v2>) {
      functions.synchronize = table.synchronize;
    }
    return functions;
  }
};

class Backend {
 public:
  // The functions stay valid while this object lives (the plugin host keeps the library
  // loaded); `instance` (may be NULL for functions used without one, as in tests) is owned from
  // now on. `device_type` is the memory the instance was created for: kDLCPU, or kDLCUDA.
  Backend(BackendFunctions functions, dpl_backend* instance, PluginLabel label,
          int32_t device_type);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const { return label_.name; }
  int32_t device_type() const { return device_type_; }

  // The collectives of dpl/backend_v2.h; `stream` is the producing stream of device tensors
  // (NULL for host tensors and the legacy default stream).
  Status Allreduce(DLTensor* tensor, dpl_reduce_op op, void* stream);
  Status Broadcast(DLTensor* tensor, int32_t root, void* stream);
  Status Allgather(const DLTensor* input, DLTensor* output, void* stream);
  Status Barrier();
  // Waits for every collective issued and orders `stream` after them; at once for a plugin of
  // backend ABI v1 (its collectives are complete in stream order when they return).
  Status Synchronize(void* stream);

 private:
  Status Call(const char* function, dpl_status status) const;

  BackendFunctions table_;
  dpl_backend* instance_;
  PluginLabel label_;
  int32_t device_type_;
};

}  // namespace dpl::training
