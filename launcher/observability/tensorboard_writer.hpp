// Writes scalars (loss, accuracy, throughput...) as a TensorBoard events file, so that
// `tensorboard --logdir DIR` plots a run while it trains and after.
//
// The file is `DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid><suffix>`: TFRecord
// framing (Note [TFRecord framing] in tensorboard_writer.cpp) around serialised Event messages
// of tensorboard_event.proto, the first one the file_version event "brain.Event:2", every later
// one a summary with one scalar. TensorBoard reads a file while it grows, and reads every file of
// a folder as one run, so a resumed run can write a new file into the same folder.
//
// Usage (one writer per process that logs, usually rank 0):
//   Result<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(dir, "");
//   if (!writer.ok()) return writer.status();
//   DPL_RETURN_IF_ERROR((*writer)->AddScalar("train/loss", step, loss, WallTimeNow()));
//   DPL_RETURN_IF_ERROR((*writer)->Flush());  // e.g. at every log line or epoch end
//
// Not thread-safe: one thread uses a writer at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/status.hpp"

namespace dpl::observability {

class TensorBoardWriter {
 public:
  // Creates `directory` (and its missing parents) when needed, creates a new events file in it
  // named as above with `file_suffix` appended (may be empty; no '/'), writes the file_version
  // event and flushes it. Fails with Status::Io naming the folder or file and the system's reason
  // (a parent that is a regular file, no permission, a file of that name already there), or with
  // Status::InvalidArgument for an empty directory or a suffix with a '/'.
  static Result<std::unique_ptr<TensorBoardWriter>> Open(const std::string& directory,
                                                         const std::string& file_suffix);

  // Flushes what is buffered. A destructor cannot report an error, so call Flush() last and check
  // its Status.
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one scalar: `tag` names the series ("train/loss"; not empty), `step` is the x value,
  // `value` is stored as a float (TensorBoard's simple_value) and `wall_time_seconds` is seconds
  // since the Unix epoch (WallTimeNow()). The record is buffered: it reaches the file, and so
  // TensorBoard, at the latest at the next Flush(). Fails with Status::InvalidArgument for an
  // empty tag and with Status::Io naming the file when writing fails (a full disk, say); after
  // such a failure the writer writes nothing more and every call returns that same Status.
  Status AddScalar(const std::string& tag, int64_t step, double value, double wall_time_seconds);

  // Hands every buffered record to the operating system, where readers see it (not an fsync: a
  // crash of the machine may still lose it). Fails with Status::Io naming the file.
  Status Flush();

  // The events file this writer appends to.
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file);
  Status WriteRecord(const std::string& data);
  Status WriteFailure();

  std::string path_;
  std::FILE* file_;
  Status failure_;  // the first write error; once set, nothing more is written
};

// Seconds since the Unix epoch, with fractions: the wall time TensorBoard expects.
double WallTimeNow();

}  // namespace dpl::observability
