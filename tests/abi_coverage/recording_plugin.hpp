// What the recording plugins (recording_backend.cpp, recording_model.cpp, recording_dataset.cpp)
// share: each is a plugin of one kind that loads a real plugin of that kind, forwards every call
// to it and appends the name of each function the host called to a file of the calling process.
//
// The real plugin comes from the `wrap=PATH` key of the plugin's options (--backend-options,
// --model-options, --data-options); the other keys go on to it unchanged. The calls go to
// $DPL_RECORDING_DIR/<kind>-<pid>.calls, one function name a line, appended (each process its
// own file: the worker loader opens the data, the forked workers train); nothing is recorded
// when the variable is unset. No exception leaves an entry (dpl::support::Guarded).
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>

#include "dpl/common.h"
#include "dpl/support/error.hpp"

namespace dpl::abi_coverage {

inline constexpr const char* kRecordingDirVariable = "DPL_RECORDING_DIR";
inline constexpr const char* kWrapKey = "wrap";

// Appends "function\n" to $DPL_RECORDING_DIR/<kind>-<pid>.calls. Never throws and allocates
// nothing, so it is safe in any entry, on any thread.
inline void RecordCall(const char* kind, const char* function) noexcept {
  const char* dir = std::getenv(kRecordingDirVariable);
  if (dir == nullptr || dir[0] == '\0') return;
  char path[4096];
  const int path_length =
      std::snprintf(path, sizeof path, "%s/%s-%ld.calls", dir, kind, static_cast<long>(getpid()));
  if (path_length <= 0 || static_cast<size_t>(path_length) >= sizeof path) return;
  char line[128];
  const int line_length = std::snprintf(line, sizeof line, "%s\n", function);
  if (line_length <= 0 || static_cast<size_t>(line_length) >= sizeof line) return;
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // One write of a short line with O_APPEND: lines of concurrent threads do not interleave.
  const ssize_t written = ::write(fd, line, static_cast<size_t>(line_length));
  (void)written;
  ::close(fd);
}

// A plugin's options text split into the wrapped plugin's path and the options it gets.
struct WrapOptions {
  std::string path;
  std::string forwarded;  // every other entry, in order
};

// Takes `wrap=PATH` out of `options` (of flag `flag`, e.g. "--backend-options"); throws a
// PluginError naming the flag when it is missing.
inline WrapOptions SplitWrapOption(const char* options, const std::string& flag) {
  WrapOptions split;
  std::stringstream stream(options == nullptr ? "" : options);
  const std::string prefix = std::string(kWrapKey) + "=";
  for (std::string entry; std::getline(stream, entry, ',');) {
    const auto first = entry.find_first_not_of(' ');
    if (first != std::string::npos && entry.compare(first, prefix.size(), prefix) == 0) {
      split.path = entry.substr(first + prefix.size());
    } else if (first != std::string::npos) {
      split.forwarded += (split.forwarded.empty() ? "" : ",") + entry;
    }
  }
  support::Require(!split.path.empty(),
                   flag + " needs " + prefix + "PATH, the plugin whose calls are recorded");
  return split;
}

// The wrapped plugin's table of type Inner (entry symbol `symbol`, plugin kind `kind`, ABI
// version `abi_version`), one per process: loaded at the first create, kept to the process's
// end. A second create naming another file is refused.
template <typename Inner>
class WrappedPlugin {
 public:
  // `least_size`: the smallest table of the version (a slot added later is not forwarded).
  WrappedPlugin(const char* symbol, uint32_t kind, uint32_t abi_version,
                size_t least_size = sizeof(Inner))
      : symbol_(symbol), kind_(kind), abi_version_(abi_version), least_size_(least_size) {}

  const Inner* table() const noexcept { return table_.load(std::memory_order_acquire); }

  // Throws a PluginError saying why `path` cannot be wrapped.
  const Inner& Load(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const Inner* loaded = table()) {
      support::Require(path == path_, "wrap=" + path + " differs from wrap=" + path_ +
                                          " of an earlier create in this process");
      return *loaded;
    }
    void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* reason = ::dlerror();
      throw support::PluginError(DPL_ERR_NOT_FOUND, "wrap=" + path + " cannot be loaded: " +
                                                        (reason ? reason : "unknown reason"));
    }
    const auto* inner = static_cast<const Inner*>(::dlsym(library, symbol_));
    support::Require(inner != nullptr, "wrap=" + path + " has no symbol " + symbol_);
    const dpl_plugin_header& header = inner->header;
    support::Require(header.magic == DPL_PLUGIN_MAGIC && header.kind == kind_ &&
                         header.abi_version == abi_version_ && header.struct_size >= least_size_,
                     "wrap=" + path + ": " + symbol_ + " is not a table of kind " +
                         std::to_string(kind_) + ", ABI v" + std::to_string(abi_version_));
    path_ = path;
    table_.store(inner, std::memory_order_release);
    return *inner;
  }

 private:
  const char* symbol_;
  uint32_t kind_;
  uint32_t abi_version_;
  size_t least_size_;
  std::mutex mutex_;
  std::string path_;
  std::atomic<const Inner*> table_{nullptr};
};

// The entry that records its name and calls the wrapped table's entry `InnerSlot` (a member of
// Kind::Inner) with the same arguments. Kind gives kWord (the kind's name in file names) and
// Wrapped() (its WrappedPlugin). Called before any create (no wrapped plugin yet), an entry that
// returns a status fails with DPL_ERR_INVALID_ARGUMENT, the others do nothing.
template <typename Kind, const char* Name, auto InnerSlot>
struct Forward;

template <typename Kind, const char* Name, typename Inner, typename R, typename... Args,
          R (*Inner::*InnerSlot)(Args...)>
struct Forward<Kind, Name, InnerSlot> {
  static R Call(Args... args) noexcept {
    RecordCall(Kind::kWord, Name);
    support::LastErrorText().clear();
    const Inner* inner = Kind::Wrapped().table();
    if constexpr (std::is_same_v<R, dpl_status>) {
      if (inner == nullptr) {
        return support::Guarded(Kind::kPrefix, [] {
          return support::Fail(DPL_ERR_INVALID_ARGUMENT,
                               std::string(Name) + " was called before create");
        });
      }
      return (inner->*InnerSlot)(args...);
    } else {
      static_assert(std::is_void_v<R>, "a slot returning neither void nor dpl_status");
      if (inner != nullptr) (inner->*InnerSlot)(args...);
    }
  }
};

// The wrapper's own last error on this thread when its last entry failed by itself, else the
// wrapped plugin's.
template <typename Kind>
const char* LastError() noexcept {
  RecordCall(Kind::kWord, "last_error");
  const char* own = support::LastError();
  const auto* inner = Kind::Wrapped().table();
  if (own[0] != '\0' || inner == nullptr) return own;
  return inner->last_error();
}

// The names of a table's non-NULL slots, one a line (what dpl_recording_exposed_functions of a
// recording plugin returns to the test). A fixed buffer: nothing to allocate, nothing to throw.
class ExposedNames {
 public:
  void Add(bool present, const char* name) noexcept {
    if (!present) return;
    const int length = std::snprintf(text_ + used_, sizeof text_ - used_, "%s\n", name);
    if (length > 0 && used_ + static_cast<size_t>(length) < sizeof text_) {
      used_ += static_cast<size_t>(length);
    }
  }
  const char* text() const noexcept { return text_; }

 private:
  char text_[1024] = "";
  size_t used_ = 0;
};

}  // namespace dpl::abi_coverage

// Declares `constexpr char kSlotName_<slot>[] = "<slot>";` for a slot list's X(slot).
#define DPL_RECORDING_SLOT_NAME(slot) constexpr char kSlotName_##slot[] = #slot;
// Counts a slot list: `0 LIST(DPL_RECORDING_COUNT_SLOT)`.
#define DPL_RECORDING_COUNT_SLOT(slot) +1
// Sets table.slot to the recording forwarder of Kind's wrapped slot of the same name.
#define DPL_RECORDING_FORWARD_SLOT(Kind, InnerTable, table, slot) \
  (table).slot = &::dpl::abi_coverage::Forward<Kind, kSlotName_##slot, &InnerTable::slot>::Call;
// Defines the test's view of the exported table `table` with its slot list SLOTS (an X-macro):
// extern "C" const char* dpl_recording_exposed_functions(void), the non-NULL slots by name.
#define DPL_RECORDING_ADD_EXPOSED(slot) names.Add(table.slot != nullptr, #slot);
#define DPL_RECORDING_EXPOSED_FUNCTIONS(exported_table, SLOTS)                     \
  extern "C" DPL_PLUGIN_EXPORT const char* dpl_recording_exposed_functions(void) { \
    static const ::dpl::abi_coverage::ExposedNames exposed = [] {                  \
      ::dpl::abi_coverage::ExposedNames names;                                     \
      const auto& table = exported_table;                                          \
      SLOTS(DPL_RECORDING_ADD_EXPOSED)                                             \
      return names;                                                                \
    }();                                                                           \
    return exposed.text();                                                         \
  }
