// The job's progress bar. Rank 0 reports its progress as records on its stderr, the pipe its
// launcher reads (EncodeProgress); the launcher takes them out of the stream of log lines
// (DecodeProgress) and draws one bar for the job on its own terminal (ProgressBar), above which
// the log lines keep scrolling. Without a terminal, or with --no-progress, nothing is drawn and
// the log lines are all there is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dpl::observability {

struct ProgressRecord {
  int64_t step = 0;        // optimizer steps done in all (a resumed run counts its earlier ones)
  int64_t total = 0;       // the steps the run will have done at its end (--max-steps included)
  int64_t start_step = 0;  // the step this run started at (0 unless resumed)
  int64_t epoch = 0;       // the epoch under way, from 0
  int64_t epochs = 0;
  double samples_per_s = 0.0;  // global samples per second, this run
  double seconds = 0.0;        // of training, this run
  double loss = 0.0;           // the last batch's
  bool done = false;           // the run's last record
};

// One line (no newline) that cannot be mistaken for a log line: it starts with the ASCII record
// separator, which no log line holds.
std::string EncodeProgress(const ProgressRecord& record);
// Whether `line` is a progress record, well-formed or not (a worker's log never starts so).
bool IsProgressRecord(const std::string& line);
// The record of a line from EncodeProgress; nullopt for any other line, or a malformed record.
std::optional<ProgressRecord> DecodeProgress(const std::string& line);

// "[=========>          ] 12/30 steps 40% 1432 samples/s ETA 0:13 loss 0.7641" in at most
// `width` characters (the bar shrinks first, then the fields at the end are left out). The ETA is
// the steps left at this run's pace so far; "ETA -" before the first step.
std::string RenderProgressBar(const ProgressRecord& record, size_t width);

// The bar on the launcher's terminal (log::ShowStatus), redrawn at each record.
class ProgressBar {
 public:
  // Draws only when `enabled` (--no-progress not given) and stderr is a terminal.
  explicit ProgressBar(bool enabled);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool drawing() const { return drawing_; }
  void Update(const ProgressRecord& record);
  // Leaves the last bar on the screen as a line of its own.
  void Finish();

 private:
  bool drawing_ = false;
  bool shown_ = false;
};

// The columns of the terminal on stderr (80 when unknown).
size_t TerminalWidth();

}  // namespace dpl::observability
