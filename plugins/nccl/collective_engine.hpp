// The nccl backend's ordering and watchdog logic, without CUDA or NCCL: collectives are issued on
// a device queue of the backend's own (ordered after the caller's stream), tracked until they
// finish, and every wait for them is bounded by the backend timeout, after which the communicator
// is aborted. The CUDA and NCCL implementations of the two interfaces below live in
// cuda_device_queue.cpp and nccl_communicator.cpp; tests drive the engine with fakes.
//
// Note [Collectives on a stream of their own]: the host passes the stream that produced a tensor
// (the model's compute stream). Enqueued there, a bucket's allreduce would wait for the whole
// backward pass issued before it and hold back the rest, as it did when every NCCL call took the
// legacy default stream. As PyTorch's DistributedDataParallel does, each collective instead
// records an event on the caller's stream, the backend's own non-blocking stream waits for that
// event, and NCCL runs there: backward goes on while the bucket is summed. synchronize then
// waits for the collectives (bounded) and makes the caller's stream wait for the backend's one,
// so the optimizer step that follows sees the sums.
//
// Note [Watchdog without a thread]: PyTorch's ProcessGroupNCCL watches its work from a watchdog
// thread: it polls each work item's end event and ncclCommGetAsyncError, and on a timeout or an
// asynchronous error aborts the communicator (ncclCommAbort) so that the kernels waiting for a
// dead peer return. Here the host blocks only in synchronize, barrier and destroy, so the engine
// polls in those calls: the same checks, with no thread to start or to stop. The communicator is
// non-blocking (ncclCommInitRankConfig with blocking = 0), so setup and every call that answers
// "in progress" are polled too, under the same bound. Once aborted, the instance refuses every
// later call at once: the ranks no longer agree on the sequence of collectives.
//
// Note [Abort from another thread]: backend ABI v4's abort comes from another thread while the
// host's thread polls here (in synchronize, barrier, or an enqueue answered "in progress"). NCCL
// allows no concurrent calls on one communicator, and ncclCommAbort frees it, so that thread
// cannot call ncclCommAbort while this one still polls ncclCommGetAsyncError. RequestAbort only
// sets a flag; the polling thread sees it within one pause (SteadyWaiter: at most a millisecond),
// aborts the communicator itself (ncclCommAbort stops the kernels that wait for a lost peer) and
// fails the call. With no call under way the next call does that, or destroy, which then aborts
// instead of finalizing (finalizing waits for the peers).
#ifndef DPL_PLUGINS_NCCL_COLLECTIVE_ENGINE_HPP
#define DPL_PLUGINS_NCCL_COLLECTIVE_ENGINE_HPP

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "dpl/common.h"

namespace dpl::nccl {

// How far a piece of device or communicator work has got, from one non-blocking look.
struct Progress {
  enum class State { kDone, kPending, kFailed };
  State state = State::kDone;
  dpl_status status = DPL_OK;  // kFailed: DPL_ERR_COMMUNICATION for a peer or network failure
  std::string error;           // kFailed: what CUDA or NCCL said

  static Progress Done() { return {}; }
  static Progress Pending() { return {State::kPending, DPL_OK, ""}; }
  static Progress Failed(dpl_status status, std::string error) {
    return {State::kFailed, status, std::move(error)};
  }
  bool done() const { return state == State::kDone; }
  bool pending() const { return state == State::kPending; }
  bool failed() const { return state == State::kFailed; }
};

// The backend's own device stream and the events that order it against other streams. Streams
// are opaque (a cudaStream_t; NULL is the legacy default stream). Errors throw PluginError.
class DeviceQueue {
 public:
  using Marker = uint64_t;
  virtual ~DeviceQueue() = default;
  // The stream collectives are launched on.
  virtual void* Stream() = 0;
  // Later work on Stream() waits for the work issued on `caller_stream` so far.
  virtual void WaitFor(void* caller_stream) = 0;
  // A marker after the work issued on Stream() so far; Query tells when it is reached.
  virtual Marker Mark() = 0;
  virtual Progress Query(Marker marker) = 0;
  // Gives back a marker that is reached, or no longer watched.
  virtual void Release(Marker marker) = 0;
  // Later work on `caller_stream` waits for the work issued on Stream() so far.
  virtual void OrderCallerAfter(void* caller_stream) = 0;
};

// A communicator whose calls never block: setup, finalize and collectives may answer "pending"
// and are then polled through State().
class Communicator {
 public:
  virtual ~Communicator() = default;
  // ncclCommGetAsyncError: kPending while setup or a finalize is under way, kFailed after an
  // asynchronous error (a peer went away).
  virtual Progress State() = 0;
  // ncclCommAbort: stops the device work waiting on peers and frees the communicator.
  virtual void Abort() = 0;
  // ncclCommFinalize: flushes issued work; State() is kPending until the peers are quiescent.
  virtual Progress Finalize() = 0;
  // ncclCommDestroy, once Finalize has completed.
  virtual void Destroy() = 0;
};

// Time and the pauses between two polls; the fake in the tests moves a virtual clock.
class Waiter {
 public:
  virtual ~Waiter() = default;
  virtual std::chrono::steady_clock::time_point Now() = 0;
  // Pauses before poll number `round` + 1 of one wait (short at first, longer later).
  virtual void Pause(int round) = 0;
};

// The real clock: yields for the first polls (a step's synchronize is usually done within
// microseconds), then sleeps up to kLongestPause between polls.
class SteadyWaiter final : public Waiter {
 public:
  static constexpr int kYieldingRounds = 64;
  static constexpr std::chrono::microseconds kLongestPause{1000};
  std::chrono::steady_clock::time_point Now() override;
  void Pause(int round) override;
};

// Who this instance is, for messages, and its bound on every wait.
struct EngineIdentity {
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{300000};
};

using LogFunction = std::function<void(dpl_log_level, const std::string&)>;

// Drives one communicator and its device queue; used from one thread at a time (the host
// serialises backend calls). Failures throw dpl::support::PluginError.
class CollectiveEngine {
 public:
  // At most this many collectives are tracked at once; one more waits (bounded) for the oldest.
  static constexpr size_t kMaxInFlight = 4096;

  CollectiveEngine(Communicator* communicator, DeviceQueue* queue, Waiter* waiter,
                   EngineIdentity identity, LogFunction log = nullptr);
  CollectiveEngine(const CollectiveEngine&) = delete;
  CollectiveEngine& operator=(const CollectiveEngine&) = delete;

  // Waits for the communicator's setup, which answered `started`, within the timeout.
  void AwaitReady(const Progress& started);

  // Issues one collective: `launch` enqueues it on the stream it is given (the queue's) and
  // answers as the NCCL call did. With a caller stream, it runs after the work issued there so
  // far. Messages name it by `kind`, its number and `detail`: "allreduce #3 (sum of 4 float32)".
  void Issue(const std::string& kind, const std::string& detail, std::optional<void*> caller_stream,
             const std::function<Progress(void* stream)>& launch);

  // Waits for every issued collective, then orders later work on `caller_stream` after them.
  void Synchronize(void* caller_stream);

  // Waits for every issued collective; `during` names the call for messages ("barrier").
  void AwaitAll(const std::string& during);

  // Refuses at once when the communicator was aborted.
  void CheckUsable() const;

  // Note [Abort from another thread]: from any thread, never blocks.
  void RequestAbort() { abort_requested_.store(true, std::memory_order_release); }

  // Finalizes and destroys the communicator, or aborts it when it failed, when finalizing fails,
  // or when it does not finish within the timeout. Never throws; logs what went wrong.
  void Shutdown();

  bool aborted() const { return aborted_; }
  uint64_t issued() const { return issued_; }
  size_t in_flight() const { return in_flight_.size(); }

 private:
  struct InFlight {
    std::string what;  // "allreduce #3 (sum of 1024 float32)"
    DeviceQueue::Marker marker;
  };

  std::string Rank() const;
  // Pops the collectives that finished, oldest first; aborts on a device error.
  void ReapFinished();
  // Polls State() until it is done (a call answered "in progress"), within the timeout.
  void AwaitCommunicator(const std::string& what);
  // Polls until fewer than `limit` collectives are in flight, within the timeout.
  void AwaitInFlightBelow(size_t limit, const std::string& during);
  // Aborts the communicator, remembers `what` went wrong and throws PluginError(status, ...).
  [[noreturn]] void AbortWith(dpl_status status, const std::string& what);
  // Aborts as AbortWith does once RequestAbort was called; `during` names the wait.
  void HonourAbortRequest(const std::string& during);
  void AbortQuietly();
  void ReleaseAll();
  void Log(dpl_log_level level, const std::string& message) const;

  Communicator* communicator_;
  DeviceQueue* queue_;
  Waiter* waiter_;
  EngineIdentity identity_;
  LogFunction log_;
  std::deque<InFlight> in_flight_;
  uint64_t issued_ = 0;
  bool aborted_ = false;
  bool shut_down_ = false;
  std::string abort_reason_;
  std::atomic<bool> abort_requested_{false};  // the one member another thread writes
};

}  // namespace dpl::nccl

#endif  // DPL_PLUGINS_NCCL_COLLECTIVE_ENGINE_HPP
