// The job's progress bar. Rank 0 reports its progress as records on its stderr, the pipe its
// launcher reads (protocol/progress_record.hpp); the launcher takes them out of the stream of log
// lines and draws one bar for the job on its own terminal (ProgressBar), above which the log lines
// keep scrolling. Without a terminal, or with --no-progress, nothing is drawn and the log lines
// are all there is.
#pragma once

#include <cstddef>
#include <string>

#include "protocol/progress_record.hpp"

namespace dpl::observability {

// "[=========>          ] 12/30 steps 40% 1432 samples/s ETA 0:13 loss 0.7641" in at most
// `width` characters (the bar shrinks first, then the fields at the end are left out). The ETA is
// the steps left at this run's pace so far; "ETA -" before the first step.
std::string RenderProgressBar(const protocol::ProgressRecord& record, size_t width);

// The bar on the launcher's terminal (log::ShowStatus), redrawn at each record.
class ProgressBar {
 public:
  // Draws only when `enabled` (--no-progress not given) and stderr is a terminal.
  explicit ProgressBar(bool enabled);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool drawing() const { return drawing_; }
  void Update(const protocol::ProgressRecord& record);
  // Leaves the last bar on the screen as a line of its own.
  void Finish();

 private:
  bool drawing_ = false;
  bool shown_ = false;
};

// The columns of the terminal on stderr (80 when unknown).
size_t TerminalWidth();

}  // namespace dpl::observability
