// dpl SDK, C++ support: the Status value of the host and of the SDK's torch_files library, a code
// and a message that says what is wrong and how to fix it (after Horovod's Status). Functions that
// can fail return Status or Result<T>; exceptions are caught at the edges (main, worker entry,
// every plugin entry) and turned into a Status.
//
// The code is the SDK's dpl_status (dpl/common.h): a plugin's failure keeps the code it returned,
// and a caller that must tell failures apart (a timeout from a lost peer, say) asks code(), never
// the message. A Status never crosses a plugin edge: a plugin returns its code and message
// through the C ABI (dpl/support/error.hpp).
#ifndef DPL_SUPPORT_STATUS_HPP
#define DPL_SUPPORT_STATUS_HPP

#include <optional>
#include <string>
#include <utility>

#include "dpl/common.h"

namespace dpl {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  // A failure the caller has no more specific code for (DPL_ERR_INTERNAL: "the message says what").
  static Status Error(std::string message) { return Status(DPL_ERR_INTERNAL, std::move(message)); }
  // A failure with a specific code; `code` must not be DPL_OK.
  static Status Error(dpl_status code, std::string message) {
    return Status(code == DPL_OK ? DPL_ERR_INTERNAL : code, std::move(message));
  }
  static Status Timeout(std::string message) { return Error(DPL_ERR_TIMEOUT, std::move(message)); }
  static Status Communication(std::string message) {
    return Error(DPL_ERR_COMMUNICATION, std::move(message));
  }
  static Status InvalidArgument(std::string message) {
    return Error(DPL_ERR_INVALID_ARGUMENT, std::move(message));
  }
  static Status Io(std::string message) { return Error(DPL_ERR_IO, std::move(message)); }

  bool ok() const { return code_ == DPL_OK; }
  dpl_status code() const { return code_; }
  bool IsTimeout() const { return code_ == DPL_ERR_TIMEOUT; }
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Prepends context, keeping the code: Status::Error("x").WithContext("loading a") -> "loading a:
  // x".
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + *message_);
  }

 private:
  Status(dpl_status code, std::string message) : code_(code), message_(std::move(message)) {}
  dpl_status code_ = DPL_OK;
  std::optional<std::string> message_;
};

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace dpl

#define DPL_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::dpl::Status dpl_status_ = (expr);        \
    if (!dpl_status_.ok()) return dpl_status_; \
  } while (0)

#endif  // DPL_SUPPORT_STATUS_HPP
