#include "training/collectives/backend.hpp"

#include <utility>

#include "common/log.hpp"

namespace dpl::training {

Backend::Backend(std::shared_ptr<const plugin_host::BackendInterface> table, dpl_backend* instance,
                 PluginLabel label, int32_t device_type)
    : table_(std::move(table)),
      instance_(instance),
      label_(std::move(label)),
      device_type_(device_type) {}

Backend::~Backend() {
  if (instance_ != nullptr) table_->destroy(instance_);
}

Status Backend::Call(const char* function, dpl_status status) const {
  if (status == DPL_OK) return Status::Ok();
  return PluginCallFailure(label_, function, status, table_->last_error());
}

Status Backend::Allreduce(DLTensor* tensor, dpl_reduce_op op, void* stream) {
  return Call("allreduce", table_->allreduce(instance_, tensor, op, stream));
}

Status Backend::Broadcast(DLTensor* tensor, int32_t root, void* stream) {
  return Call("broadcast", table_->broadcast(instance_, tensor, root, stream));
}

Status Backend::Allgather(const DLTensor* input, DLTensor* output, void* stream) {
  return Call("allgather", table_->allgather(instance_, input, output, stream));
}

Status Backend::ReduceScatter(DLTensor* input, DLTensor* output, dpl_reduce_op op, void* stream) {
  return Call("reduce_scatter", table_->reduce_scatter(instance_, input, output, op, stream));
}

Status Backend::Barrier() {
  return Call("barrier", table_->barrier(instance_));
}

Status Backend::Synchronize(void* stream) {
  return Call("synchronize", table_->synchronize(instance_, stream));
}

Status Backend::SendReceive(const DLTensor* send, int32_t to, DLTensor* receive, int32_t from,
                            void* stream) {
  if (!CanSendReceive()) {
    return Status::Error(DPL_ERR_UNSUPPORTED, "backend '" + name() + "' (" + table_->abi +
                                                  ") has no send_receive (backend ABI v5)");
  }
  return Call("send_receive", table_->send_receive(instance_, send, to, receive, from, stream));
}

bool Backend::CanSendReceive() const {
  return table_->Has(plugin_host::BackendCapability::kSendReceive) &&
         table_->send_receive != nullptr;
}

bool Backend::CanAbort() const {
  return table_->Has(plugin_host::BackendCapability::kAbort) && table_->abort != nullptr;
}

// Reads nothing that changes after construction, so it needs no lock against the call it ends.
void Backend::Abort() {
  if (instance_ == nullptr || !CanAbort()) return;
  const Status aborted = Call("abort", table_->abort(instance_));
  if (!aborted.ok()) log::Warning(aborted.message());
}

}  // namespace dpl::training
