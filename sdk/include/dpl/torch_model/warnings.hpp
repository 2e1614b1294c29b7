// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): libtorch's warnings in
// the host's log.
//
// Note [libtorch warnings]: libtorch reports warnings (TORCH_WARN in its C++, warnings.warn in
// TorchScript code) through a handler of the calling thread whose default prints every one to
// stderr, every time: the recipe's scripted Dropout2d, given the 2-D input after flatten, printed
// a deprecation warning on every step. Every entry point installs the instance's WarningLog for
// its duration (WarningHandlerScope; the handler is per thread since libtorch 1.13),
// which sends each distinct message once per instance to the host's log as a warning (to stderr
// when the host gave no log).
#ifndef DPL_TORCH_MODEL_WARNINGS_HPP
#define DPL_TORCH_MODEL_WARNINGS_HPP

#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "dpl/common.h"
#include "dpl/torch_model/libtorch_versions.hpp"

namespace dpl {
namespace torch_model {
namespace {

class WarningLog : public MessageWarningHandler {
 public:
  WarningLog(std::string model_name, dpl_log_fn log, void* log_context)
      : model_name_(std::move(model_name)), log_(log), log_context_(log_context) {}

  void Record(const std::string& message) override {
    try {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!seen_.insert(message).second) return;
      }
      const std::string line = "libtorch warns: " + message;
      if (log_ != nullptr) {
        log_(log_context_, DPL_LOG_WARNING, line.c_str());
      } else {
        std::fprintf(stderr, "model \"%s\": %s\n", model_name_.c_str(), line.c_str());
      }
    } catch (...) {
      // A warning that cannot be recorded is dropped; it must not become an error.
    }
  }

 private:
  std::string model_name_;
  dpl_log_fn log_;
  void* log_context_;
  std::mutex mutex_;
  std::set<std::string> seen_;
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_WARNINGS_HPP
