// The connected communication backend a worker trains with: the plugin's interface (the plugin
// host's adapter made it, whatever the plugin's ABI version), one instance, and its calls as
// Status values that name the plugin. Owns the instance: the destructor destroys it. Its
// collectives are called by the front's backend path only (Note [One front for collectives] in
// collectives.hpp; the test style.collectives_only_in_the_front finds any other call).
#pragma once

#include <dlpack/dlpack.h>

#include <memory>
#include <string>

#include "common/plugin_status.hpp"
#include "common/status.hpp"
#include "plugin_host/backend_interface.hpp"

namespace dpl::training {

class Backend {
 public:
  // `instance` (may be NULL for an interface used without one, as in tests) is owned from now
  // on. `device_type` is the memory the instance was created for: kDLCPU, or kDLCUDA.
  Backend(std::shared_ptr<const plugin_host::BackendInterface> table, dpl_backend* instance,
          PluginLabel label, int32_t device_type);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const { return label_.name; }
  int32_t device_type() const { return device_type_; }

  // The collectives of dpl/backend.h; `stream` is the producing stream of device tensors (NULL
  // for host tensors and the legacy default stream).
  Status Allreduce(DLTensor* tensor, dpl_reduce_op op, void* stream);
  Status Broadcast(DLTensor* tensor, int32_t root, void* stream);
  // In place when `input` is slice rank of `output` (dpl/backend.h).
  Status Allgather(const DLTensor* input, DLTensor* output, void* stream);
  // `input` holds world-size slices of `output`'s size; `output` gets the reduction of this
  // rank's slice; in place when it is that slice (dpl/backend.h).
  Status ReduceScatter(DLTensor* input, DLTensor* output, dpl_reduce_op op, void* stream);
  Status Barrier();
  // `send` to rank `to` and `receive` from rank `from` at once, ordered as a collective
  // (dpl/backend_v5.h; NULL and -1 for a side left out). Only where CanSendReceive.
  Status SendReceive(const DLTensor* send, int32_t to, DLTensor* receive, int32_t from,
                     void* stream);
  // Whether the plugin has send_receive (BackendCapability::kSendReceive).
  bool CanSendReceive() const;
  // Waits for every collective issued and orders `stream` after them; at once for a plugin
  // without BackendCapability::kSynchronize (its collectives are complete in stream order when
  // they return).
  Status Synchronize(void* stream);

  // Whether Abort ends a call blocked in the plugin (BackendCapability::kAbort).
  bool CanAbort() const;
  // The one call from any thread, while another thread's call runs (dpl/backend_v4.h): that
  // call and every later one fail at once with DPL_ERR_COMMUNICATION. A no-op without
  // BackendCapability::kAbort (an older plugin's call then ends at its --backend-timeout).
  void Abort();

 private:
  Status Call(const char* function, dpl_status status) const;

  std::shared_ptr<const plugin_host::BackendInterface> table_;
  dpl_backend* instance_;
  PluginLabel label_;
  int32_t device_type_;
};

}  // namespace dpl::training
