#include "worker/regroup_watch.hpp"

#include <chrono>

#include "worker/store_client_options.hpp"

namespace dpl::worker {
namespace {

// One look at the store lasts this long, so that the watch ends soon after the training.
constexpr std::chrono::milliseconds kLookSlice{200};

}  // namespace

Result<std::unique_ptr<RegroupWatch>> RegroupWatch::Start(const cli::Options& options,
                                                          const std::string& attempt_prefix,
                                                          int rank, OnOrder on_order) {
  auto client = ConnectWorkerStore(options, kStoreCallBound);
  if (!client.ok()) return client.status().WithContext("connecting the regroup watch");
  std::unique_ptr<RegroupWatch> watch(
      new RegroupWatch(std::move(*client), attempt_prefix, rank, std::move(on_order)));
  watch->thread_ = std::thread([self = watch.get()] { self->Loop(); });
  return watch;
}

RegroupWatch::RegroupWatch(std::unique_ptr<rendezvous::StoreClient> store,
                           std::string attempt_prefix, int rank, OnOrder on_order)
    : store_(std::move(store)),
      prefix_(std::move(attempt_prefix)),
      rank_(rank),
      on_order_(std::move(on_order)) {}

RegroupWatch::~RegroupWatch() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void RegroupWatch::Loop() {
  while (!stop_) {
    Result<rendezvous::RegroupOrder> order =
        rendezvous::AwaitRegroupOrder(*store_, prefix_, rank_, kLookSlice);
    if (order.ok()) {
      on_order_(*order);
      return;
    }
    // Only a look that found nothing goes on; a lost store is the launcher's to report.
    if (order.status().code() != DPL_ERR_TIMEOUT) return;
  }
}

}  // namespace dpl::worker
