// What a launcher reads of a worker: the kind and severity of each line, and its exit status.
#include "protocol/worker_output.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "common/log.hpp"
#include "support/child_status.hpp"

namespace dpl::protocol {
namespace {

TEST(WorkerLines, TheSeverityIsTheTagAfterThePrefix) {
  EXPECT_EQ(ReadWorkerLine("[rank 1] error: the model failed").severity, DPL_LOG_ERROR);
  EXPECT_EQ(ReadWorkerLine("[rank 1] warning: slow").severity, DPL_LOG_WARNING);
  EXPECT_EQ(ReadWorkerLine("[rank 1] debug: detail").severity, DPL_LOG_DEBUG);
  EXPECT_EQ(ReadWorkerLine("[rank 1] epoch: 0 [10/30] training loss: 1.7").severity, DPL_LOG_INFO);
  // Before the worker knows its rank it speaks with the loader's prefix, or none.
  EXPECT_EQ(ReadWorkerLine("[launcher 0] error: cannot join").severity, DPL_LOG_ERROR);
  EXPECT_EQ(ReadWorkerLine("warning: early").severity, DPL_LOG_WARNING);
  EXPECT_EQ(ReadWorkerLine("").severity, DPL_LOG_INFO);
  EXPECT_EQ(ReadWorkerLine("[rank 1]").severity, DPL_LOG_INFO);
}

TEST(WorkerLines, WordsInsideAMessageAreNoSeverity) {
  EXPECT_EQ(ReadWorkerLine("[rank 2] step 5: relative error: 0.01").severity, DPL_LOG_INFO);
  EXPECT_EQ(ReadWorkerLine("[rank 2] info: no warning: here").severity, DPL_LOG_INFO);
  EXPECT_EQ(ReadWorkerLine("Traceback: RuntimeError: error: x").severity, DPL_LOG_INFO);
  EXPECT_EQ(ReadWorkerLine("[W socket.cpp:464] Warning: unreachable").severity, DPL_LOG_INFO);
}

TEST(WorkerLines, ReadWhatTheLogWrites) {
  for (dpl_log_level level : {DPL_LOG_DEBUG, DPL_LOG_INFO, DPL_LOG_WARNING, DPL_LOG_ERROR}) {
    const std::string line = std::string("[rank 3] ") + log::LevelTag(level) + "a message";
    const WorkerLine read = ReadWorkerLine(line);
    EXPECT_EQ(read.kind, WorkerLine::Kind::kLog);
    EXPECT_EQ(read.severity, level) << line;
  }
}

TEST(WorkerLines, ProgressRecordsAreNotLogLines) {
  ProgressRecord record;
  record.step = 3;
  record.total = 10;
  const WorkerLine read = ReadWorkerLine(EncodeProgress(record));
  EXPECT_EQ(read.kind, WorkerLine::Kind::kProgress);
  ASSERT_TRUE(read.progress.has_value());
  EXPECT_EQ(read.progress->step, 3);
  const WorkerLine broken = ReadWorkerLine(EncodeProgress(record).substr(0, 20));
  EXPECT_EQ(broken.kind, WorkerLine::Kind::kProgress);  // never shown as a log line
  EXPECT_FALSE(broken.progress.has_value());
}

using testing::StatusOfChild;

TEST(WorkerExit, APeerFailureHasItsOwnExitCode) {
  EXPECT_TRUE(IsPeerFailure(StatusOfChild(kPeerFailureExitCode, 0)));
  EXPECT_FALSE(IsPeerFailure(StatusOfChild(1, 0)));
  EXPECT_FALSE(IsPeerFailure(StatusOfChild(0, 0)));
  EXPECT_FALSE(IsPeerFailure(StatusOfChild(0, SIGKILL)));
}

}  // namespace
}  // namespace dpl::protocol
