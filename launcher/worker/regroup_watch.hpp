// A worker's watch for its launcher's regroup order (rendezvous/regroup.hpp; Note [Shrink in
// place] in training/live_state.hpp): a thread of its own, on a store connection of its own,
// looks for the order of this rank while it trains and, when it comes, ends the training's
// collectives through `on_order` (the front's abort): a collective blocked on a machine that
// hangs (SIGSTOP) returns only so.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "rendezvous/regroup.hpp"
#include "rendezvous/store.hpp"

namespace dpl::worker {

class RegroupWatch {
 public:
  using OnOrder = std::function<void(const rendezvous::RegroupOrder& order)>;
  static Result<std::unique_ptr<RegroupWatch>> Start(const cli::Options& options,
                                                     const std::string& attempt_prefix, int rank,
                                                     OnOrder on_order);
  ~RegroupWatch();
  RegroupWatch(const RegroupWatch&) = delete;
  RegroupWatch& operator=(const RegroupWatch&) = delete;

 private:
  RegroupWatch(std::unique_ptr<rendezvous::StoreClient> store, std::string attempt_prefix, int rank,
               OnOrder on_order);
  void Loop();

  std::unique_ptr<rendezvous::StoreClient> store_;
  std::string prefix_;
  int rank_;
  OnOrder on_order_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dpl::worker
