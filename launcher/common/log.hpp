// Rank-prefixed logging shared by the launcher and its workers. Lines go to stderr (and, when
// set, a per-rank log file). Plugins log through the SDK's dpl_log_fn, which lands here.
#pragma once

#include <string>

#include "dpl/common.h"

namespace dpl::log {

// Sets the prefix for every later line of this process, e.g. "[rank 3]" or "[launcher 0]".
void SetPrefix(const std::string& prefix);
// Lines below this level are dropped. Default: DPL_LOG_INFO (DPL_LOG_LEVEL=debug lowers it).
void SetMinimumLevel(dpl_log_level level);

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

// The callback handed to plugins (dpl_log_fn); log_context is ignored (may be NULL).
extern "C" void PluginLogCallback(void* log_context, dpl_log_level level, const char* message);

}  // namespace dpl::log
