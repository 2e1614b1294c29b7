// The launcher's side of Note [Stall reports] (observability/stall_report.hpp): it looks at the
// ranks' stall posts in the store with its other polls, prints the picture when it changed, and
// keeps the last one for the job's error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "observability/stall_report.hpp"
#include "rendezvous/store.hpp"

namespace dpl::supervision {

class StallWatch {
 public:
  StallWatch(rendezvous::StoreClient& client, std::string attempt_prefix, int world_size);

  // Prints the stall picture when the posts changed: a warning while a call is blocked, a line
  // when the blocked calls completed. A store error is left to the caller's own store calls.
  void Poll();
  // The stall picture for the job's error: "" or a line to append.
  std::string Addendum();
  // Watches the posts of another attempt (its workers regrouped in place) from now on.
  void Restart(std::string attempt_prefix, int world_size);
  // From now on the ranks of `machine` are named as gone with it.
  void MarkGone(int machine, std::vector<int> ranks);

 private:
  rendezvous::StoreClient& client_;
  std::string prefix_;
  int world_size_;
  int64_t version_ = 0;
  std::vector<observability::GoneMachine> gone_;
  std::string picture_;  // the last stall summary printed, "" when none stands
};

}  // namespace dpl::supervision
