#include "supervision/output_tail.hpp"

#include <cctype>
#include <cstring>
#include <utility>

namespace dpl::supervision {
namespace {

constexpr const char* kTracebackHeader = "Traceback (most recent call last):";
// The lines between the tracebacks of chained exceptions, which belong to one traceback.
constexpr const char* kChainLines[] = {
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:"};

// The length of a rank prefix at `at` in `line`: dpl's own ("[rank 3] ") or the one torch 2
// writes before every line of an uncaught exception in a process group ("[rank3]: "); 0 if none.
size_t RankPrefixLength(const std::string& line, size_t at) {
  struct Form {
    const char* opening;
    const char* closing;
  };
  for (const Form form : {Form{"[rank ", "] "}, Form{"[rank", "]: "}}) {
    const size_t first_digit = at + std::strlen(form.opening);
    if (line.compare(at, std::strlen(form.opening), form.opening) != 0) continue;
    size_t end = first_digit;
    while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
    if (end == first_digit) continue;
    if (line.compare(end, std::strlen(form.closing), form.closing) == 0) {
      return end + std::strlen(form.closing) - at;
    }
  }
  return 0;
}

// `line` without its rank prefixes and a trailing carriage return.
std::string TextOf(const std::string& line) {
  size_t start = 0;
  for (size_t prefix = 0; (prefix = RankPrefixLength(line, start)) != 0;) start += prefix;
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
