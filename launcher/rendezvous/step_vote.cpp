#include "rendezvous/step_vote.hpp"

#include "rendezvous/join.hpp"

namespace dpl::rendezvous {
namespace {

std::string StepKey(const std::string& attempt_prefix, const std::string& name, int64_t step) {
  return attempt_prefix + name + "/" + std::to_string(step) + "/";
}

}  // namespace

Result<bool> AnyRankVoted(StoreClient& client, const std::string& attempt_prefix,
                          const std::string& name, int64_t step, int world_size, bool yes,
                          std::chrono::milliseconds timeout) {
  const std::string key = StepKey(attempt_prefix, name, step);
  if (yes) DPL_RETURN_IF_ERROR(client.Add(key + "yes", 1).status());
  DPL_ASSIGN_OR_RETURN(auto arrived, client.Add(key + "arrived", 1));
  if (arrived == world_size) {
    DPL_RETURN_IF_ERROR(client.Set(key + "done", ToBytes("1")));
    const std::string before = StepKey(attempt_prefix, name, step - 1);
    for (const char* part : {"yes", "arrived", "done"}) (void)client.Delete(before + part);
  } else {
    auto done = client.Get(key + "done", timeout);
    if (!done.ok()) {
      return done.status().WithContext("the ranks' vote at step " + std::to_string(step) +
                                       ": not every rank came");
    }
  }
  DPL_ASSIGN_OR_RETURN(auto votes, client.Add(key + "yes", 0));
  return votes > 0;
}

}  // namespace dpl::rendezvous
