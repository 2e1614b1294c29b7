// The memory a machine's workers share, and how one waits on another there.
//
// Note [Shared memory of a machine]: the worker loader creates one memory file (memfd) before it
// starts the machine's workers, which inherit it, forked or started fresh from the executable
// (its descriptor survives exec, and its number travels in the environment). Each worker maps
// it; the first to need more memory grows the file, and all see the same pages.
//
// Note [Waiting on a peer]: a worker waits for a word another worker writes (a generation number
// that only grows) by spinning briefly, then sleeping on it with futex(2) in short slices; between
// slices it checks that the writer's process still lives. A writer that died (kill -9, a crash)
// is named within a fraction of a second, and every wait ends after the backend timeout at the
// latest, naming the rank and what it waited for. Nobody waits on a dead peer's word.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.hpp"
#include "training/collectives/abort_signal.hpp"

namespace dpl::training {

// One mapping of the machine's memory file, at least `bytes` long.
class SharedMapping {
 public:
  // Grows the file `fd` to `bytes` when it is shorter, and maps it.
  static Result<std::unique_ptr<SharedMapping>> Map(int fd, size_t bytes);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  SharedMapping(char* data, size_t size) : data_(data), size_(size) {}
  char* data_;
  size_t size_;
};

// A worker another one may wait for.
struct PeerProcess {
  int rank = 0;
  pid_t pid = 0;
};

// Whether process `pid` is running (not gone, not a zombie).
bool ProcessAlive(pid_t pid);

// Whether generation `value` has reached `target` (generations wrap around).
inline bool Reached(uint32_t value, uint32_t target) {
  return int32_t(value - target) >= 0;
}

// Stores `value` into `word` and wakes whoever sleeps on it.
void Publish(std::atomic<uint32_t>* word, uint32_t value);

// Waits until `word` reaches `target` (Note [Waiting on a peer]). `peer` writes it; `what` says
// what the wait is for ("bucket 3 of step 12"), for the message of a failed wait: a dead peer is
// DPL_ERR_COMMUNICATION, running out of `timeout` DPL_ERR_TIMEOUT, `abort` raised its reason.
Status WaitFor(const std::atomic<uint32_t>& word, uint32_t target, const PeerProcess& peer,
               std::chrono::milliseconds timeout, const AbortSignal& abort,
               const std::function<std::string()>& what);

}  // namespace dpl::training
