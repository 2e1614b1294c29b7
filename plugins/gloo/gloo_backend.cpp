// The gloo backend: one gloo context (full mesh over gloo's TCP transport) per instance; abort
// shuts the pairs' sockets down (Note [Aborting a gloo collective] in pair_sockets.hpp).
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "dpl/support/backend.hpp"
#include "dpl/support/backend_table.hpp"
#include "dpl/support/options.hpp"
#include "dpl/support/reduce.hpp"
#include "host_rendezvous.hpp"
#include "pair_sockets.hpp"
#include "pairwise_allreduce.hpp"

namespace {

using dpl::gloo_backend::ConnectFullMesh;
using dpl::gloo_backend::HostStore;
using dpl::gloo_backend::PairwiseAllreduce;
using dpl::support::ElementType;
using dpl::support::PluginError;

constexpr const char* kBackendName = "gloo";

// A bfloat16 element. gloo has no such type, so only PairwiseAllreduce sums it (in float32,
// through dpl/support/reduce.hpp, as tcp does); gloo's own algorithms refuse it.
struct Bfloat16Bits {
  uint16_t bits;
};

// gloo reports both dead peers and expired timeouts as IoException. A call that failed after
// running for its whole timeout timed out; one that failed sooner lost a peer.
template <typename Body>
dpl_status GuardedGloo(std::chrono::milliseconds timeout, Body&& body) noexcept {
  const auto start = std::chrono::steady_clock::now();
  return dpl::support::Guarded(kBackendName, [&]() -> dpl_status {
    try {
      if constexpr (std::is_void_v<decltype(body())>) {
        body();
        return DPL_OK;
      } else {
        return body();
      }
    } catch (const gloo::IoException& error) {
      const bool timed_out = std::chrono::steady_clock::now() - start >= timeout;
      throw PluginError(timed_out ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION, error.what());
    } catch (const gloo::Exception& error) {
      throw PluginError(DPL_ERR_COMMUNICATION, error.what());
    }
  });
}

class GlooBackend : public dpl::support::BackendDefaults<GlooBackend> {
 public:
  static constexpr const char* kName = kBackendName;

  // gloo's exceptions as statuses; a failed collective is remembered for teardown.
  template <typename Body>
  static dpl_status Guard(GlooBackend* backend, const dpl_backend_config_v3* config,
                          Body&& body) noexcept {
    std::chrono::milliseconds timeout = std::chrono::milliseconds::max();
    if (backend != nullptr) timeout = backend->timeout();
    if (backend == nullptr && config != nullptr)
      timeout = std::chrono::milliseconds(config->timeout_ms);
    const dpl_status status = GuardedGloo(timeout, std::forward<Body>(body));
    if (backend != nullptr && (status == DPL_ERR_COMMUNICATION || status == DPL_ERR_TIMEOUT)) {
      backend->MarkBroken();
    }
    return status;
  }
  static void Destroy(GlooBackend* backend) {
    backend->QuietTeardown();
    delete backend;
  }

  explicit GlooBackend(const dpl_backend_config_v3& config) : config_(config) {
    if (config.device_type != kDLCPU) {
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        "the gloo backend moves CPU tensors only; use --backend nccl for CUDA");
    }
    const dpl::support::KeyValueOptions options(config.options, "--backend-options");
    write_ahead_ = options.GetChoice("write_ahead", "auto", {"auto", "off"}) == "auto";
    const std::string algorithm = options.GetChoice(
        "algorithm", "auto", {"auto", "pairwise", "ring", "ring_chunked", "halving_doubling"});
    if (algorithm == "pairwise") algorithm_ = Algorithm::kPairwise;
    if (algorithm == "ring") algorithm_ = Algorithm::kRing;
    if (algorithm == "ring_chunked") algorithm_ = Algorithm::kRingChunked;
    if (algorithm == "halving_doubling") algorithm_ = Algorithm::kHalvingDoubling;
    gloo::transport::tcp::attr attr;
    attr.iface = options.GetString("interface", "");
    attr.hostname = options.GetString("address", "");
    options.CheckAllKnown();
    // By default the address the host found routes to machine 0 (dpl/backend_v2.h).
    if (attr.iface.empty() && attr.hostname.empty()) {
      const bool known = config.local_address != nullptr && config.local_address[0] != '\0';
      attr.hostname = known ? config.local_address : "127.0.0.1";
    }
    const std::chrono::milliseconds timeout(config.timeout_ms);
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(config.rank, config.world_size);
    context->setTimeout(timeout);
    HostStore store(config.store, timeout, "gloo/");
    ConnectFullMesh(*context, store, device_);
    KeepSockets(*context);
    context_ = context;
    // Note [Synchronous pairs]: allreduce gets a second mesh whose pairs are synchronous.
    const bool pairwise = algorithm_ == Algorithm::kAuto || algorithm_ == Algorithm::kPairwise;
    if (pairwise && config.world_size > 1) {
      auto exchange = std::make_shared<gloo::rendezvous::Context>(config.rank, config.world_size);
      exchange->setTimeout(timeout);
      HostStore exchange_store(config.store, timeout, "gloo-sync/");
      ConnectFullMesh(*exchange, exchange_store, device_);
      KeepSockets(*exchange);
      const size_t budget = PairwiseAllreduce::PrepareMesh(*exchange);
      write_ahead_bytes_ = write_ahead_ ? budget : 0;
      exchange_context_ = exchange;
    }
  }

  dpl_status Allreduce(DLTensor* tensor, dpl_reduce_op op, void* stream) {
    dpl::support::CheckNoStream(stream);
    dpl::support::CheckContiguous(*tensor, "allreduce tensor");
    dpl::support::CheckHostTensor(*tensor, kBackendName, "allreduce tensor");
    const ElementType type = CheckReducible(*tensor, op, "allreduce");
    const int64_t count = dpl::support::ElementCount(*tensor);
    if (count == 0) return DPL_OK;
    void* data = dpl::support::DataPointer(*tensor);
    WithElementType(
        type, [&](auto element) { RunAllreduce<decltype(element)>(data, count, tensor, op); });
    if (op == DPL_REDUCE_AVG) {
      dpl::support::DivideInPlace(type, data, static_cast<size_t>(count), config_.world_size);
    }
    return DPL_OK;
  }

  // Note [gloo's reduce-scatter]: the pairwise exchange's halving steps are a reduce-scatter
  // whose slices are the ranks' own when the world is a power of two (Halve in
  // pairwise_allreduce.cpp); each element is summed in the same tree as by the allreduce, so the
  // slices hold exactly what an allreduce of the same input would. At other world sizes, and
  // with a forced gloo algorithm, the allreduce itself runs and the slice is copied out.
  dpl_status ReduceScatter(DLTensor* input, DLTensor* output, dpl_reduce_op op, void* stream) {
    dpl::support::CheckNoStream(stream);
    dpl::support::CheckHostTensor(*input, kBackendName, "reduce_scatter input");
    dpl::support::CheckHostTensor(*output, kBackendName, "reduce_scatter output");
    const bool in_place =
        dpl::support::CheckReduceScatter(*input, *output, config_.world_size, config_.rank);
    const ElementType type = CheckReducible(*input, op, "reduce_scatter");
    const int64_t count = dpl::support::ElementCount(*input);
    const size_t slice_bytes = dpl::support::ByteCount(*output);
    if (count == 0) return DPL_OK;
    char* data = static_cast<char*>(dpl::support::DataPointer(*input));
    if (config_.world_size > 1) {
      WithElementType(type, [&](auto element) {
        CachedAllreduce& entry = Cached<decltype(element)>(count, input, op);
        if (entry.pairwise && entry.pairwise->ScattersEvenly()) {
          entry.pairwise->ReduceScatter(data);
        } else {
          RunCached(entry, data,
                    static_cast<size_t>(count) * dpl::support::ElementSize(input->dtype));
        }
      });
    }
    void* mine = data + static_cast<size_t>(config_.rank) * slice_bytes;
    if (!in_place) std::memcpy(dpl::support::DataPointer(*output), mine, slice_bytes);
    if (op == DPL_REDUCE_AVG) {
      dpl::support::DivideInPlace(type, dpl::support::DataPointer(*output),
                                  static_cast<size_t>(dpl::support::ElementCount(*output)),
                                  config_.world_size);
    }
    return DPL_OK;
  }

  dpl_status Broadcast(DLTensor* tensor, int32_t root, void* stream) {
    dpl::support::CheckNoStream(stream);
    const size_t bytes =
        dpl::support::CheckHostBroadcast(*tensor, root, config_.world_size, kBackendName);
    if (bytes == 0 || config_.world_size == 1) return DPL_OK;
    std::vector<char*> pointers{static_cast<char*>(dpl::support::DataPointer(*tensor))};
    gloo::BroadcastOneToAll<char> algorithm(context_, pointers, bytes, root);
    algorithm.run();
    return DPL_OK;
  }

  dpl_status Allgather(const DLTensor* input, DLTensor* output, void* stream) {
    dpl::support::CheckNoStream(stream);
    dpl::support::CheckHostTensor(*input, kBackendName, "allgather input");
    dpl::support::CheckHostTensor(*output, kBackendName, "allgather output");
    const bool in_place =
        dpl::support::CheckAllgatherPlacement(*input, *output, config_.world_size, config_.rank);
    const size_t block = dpl::support::ByteCount(*input);
    if (block == 0 || (in_place && config_.world_size == 1)) return DPL_OK;
    char* out = static_cast<char*>(dpl::support::DataPointer(*output));
    if (config_.world_size == 1) {  // gloo's ring needs a peer pair
      std::memcpy(out, dpl::support::DataPointer(*input), block);
      return DPL_OK;
    }
    // In place, this rank's slice goes in from a copy: gloo's unbound-buffer allgather, which
    // gathers in place, took 1.2 s for 2.7 MB at 3 ranks on loopback where the ring takes
    // milliseconds (docs/performance.md).
    std::vector<char> own;
    const char* from = static_cast<const char*>(dpl::support::DataPointer(*input));
    if (in_place) {
      own.assign(from, from + block);
      from = own.data();
    }
    std::vector<const char*> inputs{from};
    gloo::AllgatherRing<char> algorithm(context_, inputs, out, static_cast<int>(block));
    algorithm.run();
    return DPL_OK;
  }

  // Note [Point to point in gloo]: bound buffers on the asynchronous pairs, as gloo's ring
  // algorithms use them (its unbound buffers were slow here: docs/performance.md); both are under
  // way before either is waited for, so a cycle of sends cannot deadlock. Every rank takes the
  // call's slot, moving bytes or not (dpl/backend_v5.h's order), so the slots stay in step.
  dpl_status SendReceive(const DLTensor* send, int32_t to, DLTensor* receive, int32_t from,
                         void* stream) {
    dpl::support::CheckNoStream(stream);
    dpl::support::CheckSendReceive(send, to, receive, from, config_.world_size, config_.rank);
    if (send != nullptr) dpl::support::CheckHostTensor(*send, kBackendName, "send tensor");
    if (receive != nullptr) dpl::support::CheckHostTensor(*receive, kBackendName, "receive tensor");
    if (config_.world_size == 1) return DPL_OK;
    const int slot = context_->nextSlot();
    std::unique_ptr<gloo::transport::Buffer> incoming, outgoing;
    if (receive != nullptr && dpl::support::ByteCount(*receive) > 0) {
      incoming = context_->getPair(from)->createRecvBuffer(
          slot, dpl::support::DataPointer(*receive), dpl::support::ByteCount(*receive));
    }
    if (send != nullptr && dpl::support::ByteCount(*send) > 0) {
      outgoing = context_->getPair(to)->createSendBuffer(slot, dpl::support::DataPointer(*send),
                                                         dpl::support::ByteCount(*send));
      outgoing->send();
    }
    if (incoming) incoming->waitRecv();
    if (outgoing) outgoing->waitSend();
    return DPL_OK;
  }

  // Note [Quiet teardown]: gloo's one-to-all broadcast returns on the root once its sends are
  // queued; a root that then closes its pairs can make a slower peer see "connection closed"
  // before it has read everything. destroy() therefore runs a last barrier -- unless a call
  // already failed (a dead peer would make it wait the whole timeout) or the instance was
  // aborted (its sockets are shut down, and destroy must not wait on peers).
  void MarkBroken() { broken_ = true; }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(config_.timeout_ms);
  }
  void QuietTeardown() {
    if (broken_ || aborted() || config_.world_size == 1) return;
    try {
      Barrier();
    } catch (...) {  // teardown never fails
    }
  }

  dpl_status Barrier() {
    if (config_.world_size == 1) return DPL_OK;
    gloo::BarrierAllToAll algorithm(context_);
    algorithm.run();
    return DPL_OK;
  }

  // From another thread (Note [Aborting a gloo collective]); the table reports the call under
  // way, whatever gloo says of the closed pair, as aborted (Note [Aborted instances]).
  void Abort() {
    BackendDefaults::Abort();
    sockets_.ShutDown();
  }

 private:
  template <typename T>
  static const gloo::ReductionFunction<T>* Reduction(dpl_reduce_op op) {
    switch (op) {
      case DPL_REDUCE_MIN:
        return gloo::ReductionFunction<T>::min;
      case DPL_REDUCE_MAX:
        return gloo::ReductionFunction<T>::max;
      default:
        return gloo::ReductionFunction<T>::sum;
    }
  }

  // Note [Aborting a gloo collective]: without a pair's socket, abort cannot end a call that
  // waits on that pair before the timeout; said at create.
  void KeepSockets(gloo::Context& context) {
    const std::vector<int> missing = sockets_.Add(context);
    if (missing.empty()) return;
    dpl::support::Log(config_, DPL_LOG_WARNING,
                      "gloo: the socket to rank " + std::to_string(missing.front()) + " (and " +
                          std::to_string(missing.size() - 1) +
                          " more) was not found; abort ends a call waiting on it only at the "
                          "timeout (Note [Finding gloo's sockets])");
  }

  // The op and element type a reduction can take; refuses the others naming `what`.
  ElementType CheckReducible(const DLTensor& tensor, dpl_reduce_op op, const char* what) const {
    dpl::support::CheckReduceOp(op, what);
    const ElementType type = dpl::support::ReducibleElementType(tensor.dtype, what);
    if (type == ElementType::kBFloat16 && config_.world_size > 1 && !exchange_context_) {
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        std::string(what) +
                            " of bfloat16 needs the pairwise exchange (option algorithm=auto, the "
                            "default, or algorithm=pairwise): gloo's own algorithms have no "
                            "bfloat16");
    }
    if (dpl::support::ElementCount(tensor) > INT_MAX) {
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        std::string(what) + " of more than 2^31-1 elements; split the tensor");
    }
    return type;
  }

  // Calls `body` with a value of the C++ element type of `type` (a known one).
  template <typename Body>
  static void WithElementType(ElementType type, Body&& body) {
    switch (type) {
      case ElementType::kFloat16:
        return body(gloo::float16{});
      case ElementType::kBFloat16:
        return body(Bfloat16Bits{});
      case ElementType::kFloat32:
        return body(float{});
      case ElementType::kFloat64:
        return body(double{});
      case ElementType::kInt8:
        return body(int8_t{});
      case ElementType::kUInt8:
        return body(uint8_t{});
      case ElementType::kInt32:
        return body(int32_t{});
      case ElementType::kInt64:
        return body(int64_t{});
      default:
        return;
    }
  }

  // Note [Reusing gloo algorithms]: building a gloo algorithm allocates its scratch memory and
  // registers buffers with every pair, and a training step runs the same few allreduces (its
  // gradient buckets) every time. So each algorithm is built once per (element count, type,
  // operator) around a staging buffer of its own and run again on later calls, the caller's data
  // copied in and out. The key holds only what every rank passes alike (the collective contract),
  // never an address, so all ranks hit and miss the cache together and gloo's slot numbers, taken
  // when an algorithm is built, stay in step. Past kMaxStagingBytes the cache starts over.
  template <typename T>
  void RunAllreduce(void* data, int64_t count, const DLTensor* tensor, dpl_reduce_op op) {
    if (config_.world_size == 1) return;
    const size_t bytes = static_cast<size_t>(count) * dpl::support::ElementSize(tensor->dtype);
    RunCached(Cached<T>(count, tensor, op), data, bytes);
  }

  struct CachedAllreduce {
    std::unique_ptr<PairwiseAllreduce> pairwise;  // or a gloo algorithm on staging memory:
    std::shared_ptr<std::vector<char>> staging;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };
  template <typename T>
  CachedAllreduce& Cached(int64_t count, const DLTensor* tensor, dpl_reduce_op op) {
    const size_t bytes = static_cast<size_t>(count) * dpl::support::ElementSize(tensor->dtype);
    const auto key =
        std::make_tuple(count, int(dpl::support::ElementTypeOf(tensor->dtype)), int(op));
    auto found = cached_.find(key);
    if (found != cached_.end()) return found->second;
    if (cached_bytes_ + bytes > kMaxStagingBytes) {
      cached_.clear();
      cached_bytes_ = 0;
    }
    CachedAllreduce entry;
    if (exchange_context_) {
      entry.pairwise = std::make_unique<PairwiseAllreduce>(
          exchange_context_, write_ahead_bytes_, static_cast<size_t>(count),
          dpl::support::ElementTypeOf(tensor->dtype), dpl::support::ElementSize(tensor->dtype), op);
      cached_bytes_ += entry.pairwise->scratch_bytes();
    } else if constexpr (!std::is_same_v<T, Bfloat16Bits>) {  // bfloat16 is refused before
      entry.staging = std::make_shared<std::vector<char>>(bytes);
      entry.algorithm = MakeAllreduce<T>(reinterpret_cast<T*>(entry.staging->data()), count, op);
      cached_bytes_ += bytes;
    }
    return cached_.emplace(key, std::move(entry)).first->second;
  }

  // Runs a cached allreduce on `data` (`bytes` long).
  static void RunCached(CachedAllreduce& entry, void* data, size_t bytes) {
    if (entry.pairwise) {  // binds to the caller's memory: no staging copy
      entry.pairwise->Run(static_cast<char*>(data));
      return;
    }
    std::vector<char>& staging = *entry.staging;
    std::memcpy(staging.data(), data, bytes);
    entry.algorithm->run();
    std::memcpy(data, staging.data(), bytes);
  }

  template <typename T>
  std::unique_ptr<gloo::Algorithm> MakeAllreduce(T* data, int64_t count, dpl_reduce_op op) {
    std::vector<T*> pointers{data};
    const int n = static_cast<int>(count);
    const bool power_of_two = (config_.world_size & (config_.world_size - 1)) == 0;
    if (algorithm_ == Algorithm::kRing) {
      return std::make_unique<gloo::AllreduceRing<T>>(context_, pointers, n, Reduction<T>(op));
    } else if (algorithm_ == Algorithm::kHalvingDoubling && power_of_two) {
      return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context_, pointers, n,
                                                                 Reduction<T>(op));
    }
    // Forced (auto takes PairwiseAllreduce). Ring-chunked reduces each chunk once, so every
    // rank gets the same bits; gloo's plain ring sums in each rank's own order, and at three or
    // more ranks the float rounding would differ per rank and replicas drift apart.
    return std::make_unique<gloo::AllreduceRingChunked<T>>(context_, pointers, n, Reduction<T>(op));
  }

  // The first member, so destroyed after every gloo object that uses the sockets it keeps.
  dpl::gloo_backend::PairSockets sockets_;

  static constexpr size_t kMaxStagingBytes = size_t{256} << 20;
  std::map<std::tuple<int64_t, int, int>, CachedAllreduce> cached_;
  size_t cached_bytes_ = 0;

  // kAuto and kPairwise: PairwiseAllreduce (Note [Synchronous pairs]). The others force one of
  // gloo's own algorithms (option algorithm=..., for benchmarks; halving_doubling falls back to
  // ring-chunked where the world size is not a power of two).
  enum class Algorithm { kAuto, kPairwise, kRing, kRingChunked, kHalvingDoubling };

  dpl_backend_config_v3 config_;
  Algorithm algorithm_ = Algorithm::kAuto;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<gloo::Context> exchange_context_;  // synchronous pairs, or null
  bool write_ahead_ = true;                          // option write_ahead=auto|off
  size_t write_ahead_bytes_ = 0;                     // Note [Writing ahead]
  bool broken_ = false;
};

}  // namespace

DPL_EXPORT_BACKEND_V5(GlooBackend, dpl_gloo_backend_table, "1.2.0",
                      "gloo collectives over TCP (CPU tensors)");
