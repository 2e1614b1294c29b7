// Store protocols for what the workers tell their launchers besides the join (after join.hpp):
// stall posts (Note [Stall reports] in observability/stall_report.hpp), large values in chunks
// (a rank's trace), and the alignment of the machines' clocks for one timeline.
//
// Keys, under the attempt's prefix: "stall/version" (a counter, bumped by every post),
// "stall/rank/<r>" (the rank's post, "" when withdrawn), "<key>/chunks" and "<key>/<i>" for a
// chunked value, "clock/<round>/<machine>" and "clock/offset/<machine>" for the clocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

// A stall post of `rank` ("" withdraws it); bumps the board's version.
Status PostStall(StoreClient& client, const std::string& attempt_prefix, int rank,
                 const std::string& text);
// The number of posts so far: a launcher reads the board only when it changed.
Result<int64_t> StallBoardVersion(StoreClient& client, const std::string& attempt_prefix);
// Every rank's post, "" for a rank that posted nothing or withdrew; without waiting.
Result<std::vector<std::string>> ReadStallBoard(StoreClient& client,
                                                const std::string& attempt_prefix, int world_size);

// Values larger than a store frame may carry, in chunks of at most `chunk_bytes`.
inline constexpr size_t kDefaultChunkBytes = size_t(8) << 20;
Status PutChunked(StoreClient& client, const std::string& key, const std::string& value,
                  size_t chunk_bytes = kDefaultChunkBytes);
// Waits up to `timeout` for the value to be complete, then reads and deletes it.
Result<std::string> TakeChunked(StoreClient& client, const std::string& key,
                                std::chrono::milliseconds timeout);

// Note [Aligning clocks through the store]: the workers of one machine share its monotonic clock
// (CLOCK_MONOTONIC, steady_clock), so a timeline of one machine needs no alignment. Machines'
// clocks differ by their boot times. All ranks pass kClockRounds barriers of the store; the store
// releases every waiter of a barrier at the same moment, so the local times at which the first
// worker of each machine leaves it name one instant in each clock. The offset of a machine to
// machine 0 is the median over the rounds of (its time - machine 0's time), off by the
// difference of the release's delivery to the two machines (a fraction of a network round trip:
// tens of microseconds on one switch).
inline constexpr int kClockRounds = 5;

struct ClockAlignment {
  // This process's steady clock minus the job's reference clock (machine 0's), in nanoseconds.
  int64_t offset_ns = 0;
  // The reference clock's reading at the first barrier's release: the timeline's zero.
  int64_t origin_ns = 0;
};

// Run by every rank at the same point (after the join); `machine` and `local_rank` as the job
// shape assigns them (rank 0 is local rank 0 of machine 0).
Result<ClockAlignment> AlignClocks(StoreClient& client, const std::string& attempt_prefix,
                                   int world_size, int machine, int local_rank,
                                   std::chrono::milliseconds timeout);

}  // namespace dpl::rendezvous
