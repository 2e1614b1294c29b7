// The launcher's one error style: a Status value carrying a message that says what is wrong and
// how to fix it (after Horovod's Status). Functions that can fail return Status or Result<T>;
// exceptions are caught at the edges (main, worker entry) and turned into a Status.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace dpl {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Prepends context: Status::Error("x").WithContext("loading a") -> "loading a: x".
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
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
