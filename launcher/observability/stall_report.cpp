#include "observability/stall_report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "common/log.hpp"

namespace dpl::observability {

std::string EncodeStallPost(const StallPost& post) {
  return "since=" + std::to_string(post.since_unix_ms) + " step=" + std::to_string(post.step) +
         " what=" + post.what;
}

std::optional<StallPost> DecodeStallPost(const std::string& text) {
  long long since = 0, step = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "since=%lld step=%lld what=%n", &since, &step, &used) != 2 ||
      used == 0 || size_t(used) > text.size()) {
    return std::nullopt;
  }
  StallPost post;
  post.since_unix_ms = since;
  post.step = step;
  post.what = text.substr(size_t(used));
  if (post.what.empty()) return std::nullopt;
  return post;
}

std::string RankList(std::vector<int> ranks, size_t limit) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string text;
  size_t shown = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (shown == limit) {
      text += ", ... (" + std::to_string(ranks.size()) + " ranks)";
      break;
    }
    text += (text.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) text += "-" + std::to_string(ranks[j]);
    ++shown;
    i = j + 1;
  }
  return text;
}

namespace {

std::string Ranks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + RankList(ranks);
}

// The silent ranks of machines in `gone`, named as gone and taken out of `silent`.
std::string GoneRanks(const std::vector<GoneMachine>& gone, std::vector<int>* silent) {
  std::string text;
  for (const GoneMachine& machine : gone) {
    std::vector<int> ranks;
    for (int rank : machine.ranks) {
      auto found = std::find(silent->begin(), silent->end(), rank);
      if (found == silent->end()) continue;
      ranks.push_back(rank);
      silent->erase(found);
    }
    if (ranks.empty()) continue;
    text += "; " + Ranks(ranks) + (ranks.size() == 1 ? " is" : " are") + " gone with machine " +
            std::to_string(machine.machine) + " (its launcher vanished)";
  }
  return text;
}

}  // namespace

std::string DescribeStalls(const std::vector<std::string>& board, int64_t now_unix_ms,
                           const std::vector<GoneMachine>& gone) {
  // Ranks grouped by (step, what), groups in the order of their lowest rank.
  std::map<std::pair<int64_t, std::string>, std::vector<int>> groups;
  std::map<std::pair<int64_t, std::string>, int64_t> earliest;
  std::vector<int> silent;
  for (size_t rank = 0; rank < board.size(); ++rank) {
    const std::optional<StallPost> post = DecodeStallPost(board[rank]);
    if (!post) {
      silent.push_back(int(rank));
      continue;
    }
    const auto key = std::make_pair(post->step, post->what);
    groups[key].push_back(int(rank));
    auto found = earliest.find(key);
    if (found == earliest.end() || post->since_unix_ms < found->second) {
      earliest[key] = post->since_unix_ms;
    }
  }
  if (groups.empty()) return "";
  std::vector<std::pair<int, std::string>> parts;
  for (const auto& [key, ranks] : groups) {
    const double waited = double(std::max<int64_t>(0, now_unix_ms - earliest[key])) / 1000.0;
    parts.emplace_back(ranks.front(), Ranks(ranks) + (ranks.size() == 1 ? " waits" : " wait") +
                                          " in step " + std::to_string(key.first) + ", " +
                                          key.second + ", for " + log::Duration(waited));
  }
  std::sort(parts.begin(), parts.end());
  std::string text;
  for (const auto& part : parts) text += (text.empty() ? "" : "; ") + part.second;
  const std::string gone_ranks = GoneRanks(gone, &silent);
  text += gone_ranks;
  if (silent.empty() && !gone_ranks.empty()) return text;
  if (silent.empty()) {
    text += "; every rank is blocked in a call, none is missing";
  } else {
    text += "; " + Ranks(silent) + " never arrived (no blocked call reported: stopped, " +
            "still computing, or elsewhere)";
  }
  return text;
}

}  // namespace dpl::observability
