#include "supervision/output_tail.hpp"

#include <utility>

namespace dpl::supervision {
namespace {

constexpr const char* kTracebackHeader = "Traceback (most recent call last):";
// The lines between the tracebacks of chained exceptions, which belong to one traceback.
constexpr const char* kChainLines[] = {
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:"};

// `line` without a rank prefix ("[rank 3] ") and a trailing carriage return.
std::string TextOf(const std::string& line) {
  size_t start = 0;
  if (line.rfind("[rank ", 0) == 0) {
    const size_t end = line.find("] ");
    if (end != std::string::npos) start = end + 2;
  }
  size_t end = line.size();
  if (end > start && line[end - 1] == '\r') --end;
  return line.substr(start, end - start);
}

}  // namespace

void OutputTail::Add(std::string line) {
  const std::string text = TextOf(line);
  // Keeps the chain's first traceback when a chained one starts.
  if (text == kTracebackHeader && !(chained_ && has_traceback_)) {
    traceback_start_ = added_;
    has_traceback_ = true;
  }
  if (text.find_first_not_of(" \t") != std::string::npos) {  // not a blank line
    chained_ = false;
    for (const char* chain : kChainLines) chained_ = chained_ || text == chain;
  }
  lines_.push_back(std::move(line));
  ++added_;
  if (lines_.size() > kTracebackLines) lines_.pop_front();
}

std::deque<std::string> OutputTail::Lines() const {
  const size_t first_kept = added_ - lines_.size();
  size_t from = lines_.size() > kRootCauseLines ? lines_.size() - kRootCauseLines : 0;
  // A traceback longer than the lines kept shows its last kRootCauseLines, as any output does.
  if (has_traceback_ && traceback_start_ >= first_kept) from = traceback_start_ - first_kept;
  return std::deque<std::string>(lines_.begin() + static_cast<std::ptrdiff_t>(from), lines_.end());
}

}  // namespace dpl::supervision
