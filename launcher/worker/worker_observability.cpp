#include "worker/worker_observability.hpp"

#include <unistd.h>

#include "common/log.hpp"
#include "observability/stall_monitor.hpp"
#include "observability/trace_file.hpp"
#include "observability/tracer.hpp"
#include "worker/store_client_options.hpp"

namespace dpl::worker {
namespace {

Result<std::unique_ptr<rendezvous::StoreClient>> ConnectAgain(const cli::Options& options) {
  DPL_ASSIGN_OR_RETURN(auto client_options, WorkerStoreClientOptions(options));
  return rendezvous::StoreClient::Connect(client_options);
}

}  // namespace

WorkerObservability::WorkerObservability(const cli::Options& options,
                                         const training::WorkerIdentity& identity,
                                         rendezvous::StoreClient& store, std::string attempt_prefix)
    : options_(options), identity_(identity), store_(store), prefix_(std::move(attempt_prefix)) {}

WorkerObservability::~WorkerObservability() {
  observability::StallMonitor::Global().Stop();
  observability::Tracer::Global().Disable();
}

Result<std::unique_ptr<WorkerObservability>> WorkerObservability::Start(
    const cli::Options& options, const training::WorkerIdentity& identity,
    rendezvous::StoreClient& store, const std::string& attempt_prefix) {
  std::unique_ptr<WorkerObservability> self(
      new WorkerObservability(options, identity, store, attempt_prefix));
  DPL_RETURN_IF_ERROR(self->WatchForStalls());
  DPL_RETURN_IF_ERROR(self->AlignTraceClock());
  if (self->tracing_ && identity.rank == 0) {
    log::Info("--trace: every rank records its timeline; the launcher writes " +
              options.training.trace_file + " at the end");
  }
  return self;
}

Status WorkerObservability::Regroup(const training::WorkerIdentity& identity,
                                    const std::string& attempt_prefix) {
  observability::StallMonitor::Global().Stop();
  identity_ = identity;
  prefix_ = attempt_prefix;
  DPL_RETURN_IF_ERROR(WatchForStalls());
  return AlignTraceClock();
}

Status WorkerObservability::WatchForStalls() {
  if (options_.stall_warning.count() <= 0 || identity_.world_size <= 1) return Status::Ok();
  if (!stall_store_) {
    auto client = ConnectAgain(options_);
    if (!client.ok()) return client.status().WithContext("connecting the stall watchdog");
    stall_store_ = std::move(*client);
  }
  rendezvous::StoreClient* stall_store = stall_store_.get();
  const std::string prefix = prefix_;
  const int rank = identity_.rank;
  observability::StallMonitor::Global().Start(
      options_.stall_warning, [stall_store, prefix, rank](const std::string& text) {
        return rendezvous::PostStall(*stall_store, prefix, rank, text);
      });
  return Status::Ok();
}

Status WorkerObservability::AlignTraceClock() {
  if (options_.training.trace_file.empty()) return Status::Ok();
  const int machine = identity_.rank / std::max(1, identity_.local_world_size);
  auto clock = rendezvous::AlignClocks(store_, prefix_, identity_.world_size, machine,
                                       identity_.local_rank, options_.rendezvous_timeout);
  if (!clock.ok()) return clock.status().WithContext("--trace");
  clock_ = *clock;
  tracing_ = true;
  if (machine != 0 && identity_.local_rank == 0) {
    log::Info("--trace: this machine's clock is " + std::to_string(double(clock->offset_ns) / 1e6) +
              " ms ahead of machine 0's");
  }
  observability::Tracer::Global().Enable();
  return Status::Ok();
}

void WorkerObservability::Finish() {
  observability::StallMonitor::Global().Stop();
  if (!tracing_) return;
  observability::Tracer::Global().Disable();
  observability::TraceRank who;
  who.rank = identity_.rank;
  who.machine = identity_.rank / std::max(1, identity_.local_world_size);
  who.local_rank = identity_.local_rank;
  who.pid = int(::getpid());
  const Status sent = observability::PublishTrace(store_, prefix_, who, clock_);
  if (!sent.ok()) log::Warning(sent.message());
}

}  // namespace dpl::worker
