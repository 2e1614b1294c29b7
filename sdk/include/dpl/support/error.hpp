// dpl SDK, C++ plugin support: the error style every plugin shares across the C ABI.
//
// A plugin function returns a dpl_status and leaves its message for `last_error` (dpl/common.h).
// Inside, code throws PluginError (a status and a message) or lets other exceptions fly, and each
// exported function wraps its body in Guarded, which turns every exception into the status and
// this thread's last-error text, so none crosses the library edge. Header-only: each plugin gets
// its own copy (hidden visibility), so last-error texts of two plugins never mix.
#ifndef DPL_SUPPORT_ERROR_HPP
#define DPL_SUPPORT_ERROR_HPP

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "dpl/common.h"

namespace dpl::support {

// Leaves a call with `status`; Guarded turns it into the return value and the last-error text.
class PluginError : public std::runtime_error {
 public:
  PluginError(dpl_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  dpl_status status() const noexcept { return status_; }

 private:
  dpl_status status_;
};

// This thread's last-error text of this plugin.
inline std::string& LastErrorText() {
  static thread_local std::string text;
  return text;
}

// What a plugin's `last_error` entry returns: "" when the thread's last call succeeded.
inline const char* LastError() {
  return LastErrorText().c_str();
}

// Records `message` as this thread's last error and returns `status` (for `return Fail(...)`).
inline dpl_status Fail(dpl_status status, const std::string& message) {
  LastErrorText() = message;
  return status;
}

// Runs `body` (returning dpl_status, or void for DPL_OK) so that no exception leaves it: a
// PluginError becomes its status, anything else DPL_ERR_INTERNAL (std::bad_alloc: "out of
// memory"). Every message recorded, the body's own `Fail`s included, starts with `prefix` and ": "
// (e.g. "tcp" or "model \"convnet\""), which names the plugin in the host's log.
template <typename Body>
dpl_status Guarded(const std::string& prefix, Body&& body) noexcept {
  try {
    try {
      LastErrorText().clear();
      dpl_status status = DPL_OK;
      if constexpr (std::is_void_v<decltype(body())>) {
        body();
      } else {
        status = body();
      }
      if (status != DPL_OK && !LastErrorText().empty()) {
        LastErrorText() = prefix + ": " + LastErrorText();
      }
      return status;
    } catch (const PluginError& error) {
      return Fail(error.status(), prefix + ": " + error.what());
    } catch (const std::bad_alloc&) {
      return Fail(DPL_ERR_INTERNAL, prefix + ": out of memory");
    } catch (const std::exception& error) {
      return Fail(DPL_ERR_INTERNAL, prefix + ": " + error.what());
    } catch (...) {
      return Fail(DPL_ERR_INTERNAL, prefix + ": unknown exception");
    }
  } catch (...) {  // building a message ran out of memory: keep the status at least
    return DPL_ERR_INTERNAL;
  }
}

// Throws PluginError(DPL_ERR_INVALID_ARGUMENT, message) unless `condition` holds.
inline void Require(bool condition, const std::string& message) {
  if (!condition) throw PluginError(DPL_ERR_INVALID_ARGUMENT, message);
}

}  // namespace dpl::support

#endif  // DPL_SUPPORT_ERROR_HPP
