#include "common/log.hpp"

#include <time.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dpl::log {
namespace {

// Note [Elapsed time origin]: kElapsed counts from the launcher's start. The launcher calls
// StartElapsedClock(), which exports the wall-clock time of that moment in kStartVariable, so the
// processes it starts (its worker loader, which writes to the console directly) count from the
// same moment; a process without the variable counts from its own first line.
constexpr const char* kStartVariable = "DPL_LOG_START_NS";
constexpr const char* kClearLine = "\r\033[K";

int64_t WallNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t InitialOrigin() {
  const char* exported = std::getenv(kStartVariable);
  if (exported != nullptr && *exported != '\0') return std::strtoll(exported, nullptr, 10);
  return WallNanoseconds();
}

dpl_log_level InitialLevel() {
  const char* env = std::getenv("DPL_LOG_LEVEL");
  if (env != nullptr && std::strcmp(env, "debug") == 0) return DPL_LOG_DEBUG;
  return DPL_LOG_INFO;
}

std::mutex g_mutex;
std::string g_prefix;    // guarded by g_mutex
std::string g_status;    // guarded by g_mutex; the status line shown, "" for none
int g_output_error = 0;  // guarded by g_mutex; errno of the first failed WriteOutputLine
int64_t g_origin_ns = InitialOrigin();
dpl_log_level g_min_level = InitialLevel();
TimeFormat g_time_format = TimeFormat::kNone;

std::string IsoTime(int64_t now_ns) {
  const time_t seconds = static_cast<time_t>(now_ns / 1000000000);
  const int milliseconds = static_cast<int>((now_ns / 1000000) % 1000);
  tm local{};
  localtime_r(&seconds, &local);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &local);
  const long offset_minutes = local.tm_gmtoff / 60;
  const long magnitude = offset_minutes < 0 ? -offset_minutes : offset_minutes;
  char text[64];
  std::snprintf(text, sizeof text, "%s.%03d%c%02ld:%02ld ", date, milliseconds,
                offset_minutes < 0 ? '-' : '+', magnitude / 60, magnitude % 60);
  return text;
}

// Writes `line` and a newline to stderr, above the status line. Called with g_mutex held.
void EmitLocked(const std::string& line) {
  if (g_status.empty()) {
    std::fprintf(stderr, "%s\n", line.c_str());
  } else {
    std::fprintf(stderr, "%s%s\n%s", kClearLine, line.c_str(), g_status.c_str());
  }
  std::fflush(stderr);
}

}  // namespace

const char* LevelTag(dpl_log_level level) {
  switch (level) {
    case DPL_LOG_DEBUG:
      return "debug: ";
    case DPL_LOG_INFO:
      return "";
    case DPL_LOG_WARNING:
      return "warning: ";
    case DPL_LOG_ERROR:
      return "error: ";
  }
  return "";
}

void SetPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = prefix;
}

void SetMinimumLevel(dpl_log_level level) {
  g_min_level = level;
}

void SetTimeFormat(TimeFormat format) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_time_format = format;
}

void StartElapsedClock() {
  g_origin_ns = WallNanoseconds();
  ::setenv(kStartVariable, std::to_string(g_origin_ns).c_str(), 1);
}

std::string TimePrefix() {
  const int64_t now = WallNanoseconds();
  switch (g_time_format) {
    case TimeFormat::kIso:
      return IsoTime(now);
    case TimeFormat::kElapsed: {
      char text[32];
      std::snprintf(text, sizeof text, "%10.3fs ", double(now - g_origin_ns) / 1e9);
      return text;
    }
    case TimeFormat::kNone:
      break;
  }
  return "";
}

namespace {

// One log line of this process, stamped and prefixed; g_mutex held.
void WriteLocked(dpl_log_level level, const std::string& message) {
  EmitLocked(TimePrefix() + g_prefix + (g_prefix.empty() ? "" : " ") + LevelTag(level) + message);
}

}  // namespace

void Write(dpl_log_level level, const std::string& message) {
  if (level < g_min_level) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  WriteLocked(level, message);
}

void WriteLine(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  EmitLocked(TimePrefix() + line);
}

void WriteOutputLine(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (std::fprintf(stdout, "%s\n", line.c_str()) >= 0 && std::fflush(stdout) == 0) return;
  const int error = errno;
  std::clearerr(stdout);
  if (error == EPIPE || g_output_error != 0) return;
  g_output_error = error;
  WriteLocked(DPL_LOG_ERROR, std::string("cannot write to standard output (") +
                                 std::strerror(error) +
                                 "): what the programs print from here on is lost");
}

int StandardOutputError() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_output_error;
}

void WriteRecord(const std::string& record) {
  std::lock_guard<std::mutex> lock(g_mutex);
  EmitLocked(record);
}

void ShowStatus(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_status = text;
  std::fprintf(stderr, "%s%s", kClearLine, g_status.c_str());
  std::fflush(stderr);
}

void EndStatus() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_status.empty()) return;
  g_status.clear();
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

std::string Bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = double(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof kUnits / sizeof kUnits[0]) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0 || value >= 100.0 || value == std::floor(value)) {
    std::snprintf(text, sizeof text, "%.0f %s", value, kUnits[unit]);
  } else if (value >= 10.0) {
    std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  }
  // "1.50 KiB" -> "1.5 KiB": no trailing zero after the point.
  std::string result = text;
  const auto point = result.find('.');
  if (point != std::string::npos) {
    auto space = result.find(' ');
    while (space > point + 1 && result[space - 1] == '0') result.erase(--space, 1);
    if (space == point + 1) result.erase(point, 1);
  }
  return result;
}

std::string Duration(double seconds) {
  char text[48];
  if (!(seconds >= 0.0)) return "0 s";
  if (seconds < 1.0) {
    std::snprintf(text, sizeof text, "%.3g ms", seconds * 1000.0);
  } else if (seconds < 60.0) {
    std::snprintf(text, sizeof text, "%.3g s", seconds);
  } else if (seconds < 3600.0) {
    const long whole = std::lround(seconds);
    std::snprintf(text, sizeof text, "%ld min %02ld s", whole / 60, whole % 60);
  } else {
    const long minutes = std::lround(seconds / 60.0);
    std::snprintf(text, sizeof text, "%ld h %02ld min", minutes / 60, minutes % 60);
  }
  return text;
}

extern "C" void PluginLogCallback(void* /*log_context*/, dpl_log_level level, const char* message) {
  Write(level, message == nullptr ? "" : message);
}

}  // namespace dpl::log
