// Rank-prefixed logging shared by the launcher and its workers. Lines go to stderr. Plugins log
// through the SDK's dpl_log_fn, which lands here.
//
// Note [Who stamps a line]: a worker's stderr is a pipe to its launcher, which relays each line
// to the console and to the rank's --log-dir file. The launcher puts the time on every line it
// writes, its own and the relayed ones (WriteLine), so that one clock and one format (--log-time)
// serve the whole machine; workers write their lines without a time (TimeFormat::kNone). The
// console's last line may be a status line (the launcher's progress bar, ShowStatus): every line
// written while it is shown goes above it, and the status is drawn again below.
#pragma once

#include <cstdint>
#include <string>

#include "dpl/common.h"

namespace dpl::log {

enum class TimeFormat {
  kIso,      // local time, ISO 8601 with milliseconds and the UTC offset
  kElapsed,  // seconds since the launcher started (Note [Elapsed time origin] in log.cpp)
  kNone,
};

// Sets the prefix for every later line of this process, e.g. "[rank 3]" or "[launcher 0]".
void SetPrefix(const std::string& prefix);
// Lines below this level are dropped. Default: DPL_LOG_INFO (DPL_LOG_LEVEL=debug lowers it).
void SetMinimumLevel(dpl_log_level level);
// How lines written from now on are stamped. Default: kNone.
void SetTimeFormat(TimeFormat format);
// Makes "now" the origin of kElapsed for this process and every process it starts later (through
// the environment). Call once, early, before other threads exist (it calls setenv).
void StartElapsedClock();

// The stamp of a line written now, with its trailing space: "2025-06-01T14:03:07.123+02:00 ",
// "    12.345s ", or "" for kNone.
std::string TimePrefix();

// The tag a line of `level` carries after the prefix: "error: ", "warning: ", "debug: ", and ""
// for info (the launcher reads a worker's back: protocol/worker_output.hpp).
const char* LevelTag(dpl_log_level level);

void Write(dpl_log_level level, const std::string& message);
inline void Debug(const std::string& m) {
  Write(DPL_LOG_DEBUG, m);
}
inline void Info(const std::string& m) {
  Write(DPL_LOG_INFO, m);
}
inline void Warning(const std::string& m) {
  Write(DPL_LOG_WARNING, m);
}
inline void Error(const std::string& m) {
  Write(DPL_LOG_ERROR, m);
}

// A whole line that already carries its prefix (a worker's, relayed by the launcher): stamped,
// written above the status line.
void WriteLine(const std::string& line);
// A line of a program's standard output (a worker's, relayed by the launcher): written to the
// launcher's standard output as it is, with no time, so that it can be redirected apart from the
// log. Flushed at once, as the log's lines are, so the two keep their order on one terminal.
// A failure to write it (a full disk; not a closed pipe, as `| head` leaves) is said once in the
// log and kept for StandardOutputError: what the programs printed is lost.
void WriteOutputLine(const std::string& line);
// The errno of the first failed write of WriteOutputLine, 0 when none failed.
int StandardOutputError();
// A machine-readable record for the launcher (a progress report): written as it is, on a line of
// its own, never interleaved with a log line.
void WriteRecord(const std::string& record);

// Shows `text` as the console's last line, replacing the previous status (on a terminal only: the
// caller decides). Control characters in `text` are not allowed.
void ShowStatus(const std::string& text);
// Leaves the status shown as an ordinary line; later lines go below it.
void EndStatus();

// Human units: 26214400 -> "25 MiB", 1536 -> "1.5 KiB", 12 -> "12 B" (binary prefixes, three
// significant digits).
std::string Bytes(uint64_t bytes);
// 0.0123 -> "12.3 ms", 4.5 -> "4.5 s", 754 -> "12 min 34 s", 7384 -> "2 h 03 min".
std::string Duration(double seconds);

// The callback handed to plugins (dpl_log_fn); log_context is ignored (may be NULL).
extern "C" void PluginLogCallback(void* log_context, dpl_log_level level, const char* message);

}  // namespace dpl::log
