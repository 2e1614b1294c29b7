#include "supervision/stall_watch.hpp"

#include <chrono>
#include <utility>

#include "common/log.hpp"
#include "rendezvous/job_reports.hpp"

namespace dpl::supervision {
namespace {

int64_t UnixMilliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StallWatch::StallWatch(rendezvous::StoreClient& client, std::string attempt_prefix, int world_size)
    : client_(client), prefix_(std::move(attempt_prefix)), world_size_(world_size) {}

void StallWatch::Restart(std::string attempt_prefix, int world_size) {
  prefix_ = std::move(attempt_prefix);
  world_size_ = world_size;
  version_ = 0;
  gone_.clear();
  picture_.clear();
}

void StallWatch::Poll() {
  auto version = rendezvous::StallBoardVersion(client_, prefix_);
  if (!version.ok() || *version == version_) return;
  version_ = *version;
  auto board = rendezvous::ReadStallBoard(client_, prefix_, world_size_);
  if (!board.ok()) return;
  const std::string picture = observability::DescribeStalls(*board, UnixMilliseconds(), gone_);
  if (!picture.empty()) {
    log::Warning("stalled: " + picture);
  } else if (!picture_.empty()) {
    log::Info("the stalled backend calls completed; training goes on");
  }
  picture_ = picture;
}

void StallWatch::MarkGone(int machine, std::vector<int> ranks) {
  gone_.push_back({machine, std::move(ranks)});
}

std::string StallWatch::Addendum() {
  auto board = rendezvous::ReadStallBoard(client_, prefix_, world_size_);
  if (board.ok()) {
    const std::string picture = observability::DescribeStalls(*board, UnixMilliseconds(), gone_);
    if (!picture.empty()) picture_ = picture;
  }
  return picture_.empty() ? "" : "\n  stalled before it ended: " + picture_;
}

}  // namespace dpl::supervision
