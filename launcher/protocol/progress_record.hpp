// Rank 0's progress records: the training loop writes one as a line of its own on its output
// (EncodeProgress, training/reporter.cpp); its launcher takes them out of the stream of log lines
// (ReadWorkerLine in worker_output.hpp) and draws the job's progress bar from them
// (observability/progress.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dpl::protocol {

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

}  // namespace dpl::protocol
