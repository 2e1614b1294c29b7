#include "common/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dpl::log {
namespace {

std::mutex g_mutex;
std::string g_prefix;  // guarded by g_mutex

dpl_log_level InitialLevel() {
  const char* env = std::getenv("DPL_LOG_LEVEL");
  if (env != nullptr && std::strcmp(env, "debug") == 0) return DPL_LOG_DEBUG;
  return DPL_LOG_INFO;
}
dpl_log_level g_min_level = InitialLevel();

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

}  // namespace

void SetPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = prefix;
}

void SetMinimumLevel(dpl_log_level level) {
  g_min_level = level;
}

void Write(dpl_log_level level, const std::string& message) {
  if (level < g_min_level) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s%s%s%s\n", g_prefix.c_str(), g_prefix.empty() ? "" : " ", LevelTag(level),
               message.c_str());
  std::fflush(stderr);
}

extern "C" void PluginLogCallback(void* /*log_context*/, dpl_log_level level, const char* message) {
  Write(level, message == nullptr ? "" : message);
}

}  // namespace dpl::log
