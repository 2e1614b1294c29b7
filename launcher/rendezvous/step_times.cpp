#include "rendezvous/step_times.hpp"

#include <chrono>

#include "rendezvous/join.hpp"

namespace dpl::rendezvous {
namespace {

std::string StepTimesKey(const std::string& prefix, int rank) {
  return prefix + "step_times/rank/" + std::to_string(rank);
}

}  // namespace

Status PostStepTimes(StoreClient& client, const std::string& attempt_prefix, int rank,
                     const std::string& text) {
  return client.Set(StepTimesKey(attempt_prefix, rank), ToBytes(text));
}

Result<std::vector<std::string>> ReadStepTimes(StoreClient& client,
                                               const std::string& attempt_prefix, int world_size) {
  std::vector<std::string> posts(size_t(world_size > 0 ? world_size : 0));
  for (int rank = 0; rank < world_size; ++rank) {
    auto post = client.Get(StepTimesKey(attempt_prefix, rank), std::chrono::milliseconds(0));
    if (post.ok()) {
      posts[size_t(rank)] = FromBytes(*post);
    } else if (!post.status().IsTimeout()) {
      return post.status();
    }
  }
  return posts;
}

}  // namespace dpl::rendezvous
