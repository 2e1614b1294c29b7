// Note [Stall reports]: when a collective hangs, every rank that waits in it knows what it waits
// in, and the rank that never came says nothing. So each worker watches its communication thread
// (StallMonitor, stall_monitor.hpp): a backend call that blocks longer than --stall-warning is
// posted to the store under the rank's key, and withdrawn when it completes. Each launcher looks
// at the posts with its other polls, groups the ranks by what they wait in, names the ranks that
// posted nothing (they never arrived: stopped, still computing, or elsewhere) and prints that
// (DescribeStalls); it repeats the last picture in the job's error when the backend's timeout
// ends the job. A call that failed keeps its post: it is the account of that failure.
//
// This file holds the post's text format and the launcher's summary; both sides use it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpl::observability {

struct StallPost {
  int64_t since_unix_ms = 0;  // when the call began, wall clock
  int64_t step = 0;           // the optimizer step under way
  std::string what;           // DescribeActivity()
};

// "since=<unix ms> step=<n> what=<text>".
std::string EncodeStallPost(const StallPost& post);
// nullopt for "" (no post) and for anything malformed.
std::optional<StallPost> DecodeStallPost(const std::string& text);

// "0-3, 5, 7": ranks in increasing order, runs joined; at most `limit` numbers or runs shown,
// then "... (N ranks)".
std::string RankList(std::vector<int> ranks, size_t limit = 16);

// The launcher's summary of a stall board (one entry per rank, "" where the rank posted nothing),
// or "" when no rank posted. E.g. "rank 0 waits in step 5, allreduce of bucket 1 of 2 (1.15 MiB),
// for 2.1 s; rank 1 never arrived (no blocked call reported: stopped, still computing, or
// elsewhere)".
//
// `gone` names the ranks of machines the launcher knows have vanished: those are said to be gone
// with their machine instead of "never arrived" ("ranks 4-5 are gone with machine 2 (its launcher
// vanished)").
struct GoneMachine {
  int machine = 0;
  std::vector<int> ranks;
};
std::string DescribeStalls(const std::vector<std::string>& board, int64_t now_unix_ms,
                           const std::vector<GoneMachine>& gone = {});

}  // namespace dpl::observability
