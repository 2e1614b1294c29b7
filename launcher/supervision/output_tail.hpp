// The end of a worker's output, as its failure shows it: the last kRootCauseLines lines, or, when
// it wrote a Python traceback, the whole traceback from its "Traceback (most recent call last):"
// line on (chained exceptions included) and what followed it, if that is at most kTracebackLines
// lines.
#pragma once

#include <cstddef>
#include <deque>
#include <string>

namespace dpl::supervision {

// The lines of a worker's output kept to show with its failure when it wrote no traceback.
inline constexpr size_t kRootCauseLines = 20;
// The most lines a traceback (and what followed it) keeps; a longer one shows its last ones.
inline constexpr size_t kTracebackLines = 200;

class OutputTail {
 public:
  // One line of output, without its newline; a "[rank N] " prefix before a traceback's first line
  // is allowed.
  void Add(std::string line);
  // The lines to show: the last traceback and what followed it, else the last kRootCauseLines.
  std::deque<std::string> Lines() const;

 private:
  std::deque<std::string> lines_;  // the last kTracebackLines lines
  size_t added_ = 0;               // lines added in all
  // The line number (in added_) of the last traceback's first line, once there was one.
  size_t traceback_start_ = 0;
  bool has_traceback_ = false;
  bool chained_ = false;  // the last line said that another exception follows
};

}  // namespace dpl::supervision
