// The gloo backend: one gloo context (full mesh over gloo's TCP transport) per instance.
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "plugin_support.hpp"
#include "reduce.hpp"

namespace {

using dpl::plugin::ElementType;
using dpl::plugin::PluginError;

constexpr const char* kBackendName = "gloo";

// gloo::rendezvous::Store on top of the host's dpl_store_v1. gloo's get() must block until the
// key exists, so every get waits up to the job timeout.
class HostStore : public gloo::rendezvous::Store {
 public:
  HostStore(const dpl_store_v1* store, std::chrono::milliseconds timeout, std::string prefix)
      : store_(store), timeout_(timeout), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    check(store_->set(store_->context, prefixed(key).c_str(), data.data(), data.size()), key);
  }

  std::vector<char> get(const std::string& key) override {
    std::vector<char> value(256);
    uint64_t size = 0;
    dpl_status status = store_->get(store_->context, prefixed(key).c_str(), value.data(),
                                    value.size(), &size, timeout_.count());
    if (status == DPL_ERR_BUFFER_TOO_SMALL) {
      value.resize(static_cast<size_t>(size));
      status = store_->get(store_->context, prefixed(key).c_str(), value.data(), value.size(),
                           &size, timeout_.count());
    }
    check(status, key);
    value.resize(static_cast<size_t>(size));
    return value;
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> names;
    std::vector<const char*> pointers;
    for (const auto& key : keys) names.push_back(prefixed(key));
    for (const auto& name : names) pointers.push_back(name.c_str());
    check(store_->wait(store_->context, pointers.data(), static_cast<uint32_t>(pointers.size()),
                       timeout.count()),
          keys.empty() ? "" : keys.front());
  }

 private:
  std::string prefixed(const std::string& key) const { return prefix_ + key; }
  void check(dpl_status status, const std::string& key) {
    if (status == DPL_OK) return;
    const char* message = store_->last_error(store_->context);
    throw PluginError(status == DPL_ERR_TIMEOUT ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION,
                      "store key '" + key + "': " + (message ? message : ""));
  }
  const dpl_store_v1* store_;
  std::chrono::milliseconds timeout_;
  std::string prefix_;
};

// Note [Synchronous pairs]: gloo's TCP pairs normally run asynchronously: the calling thread
// writes, gloo's event-loop thread reads and wakes the caller through a condition variable. On a
// machine where a context switch is dear (the 2-core VM of docs/performance.md), those hand-offs
// made an allreduce cost 3x the CPU of dpl's tcp backend, taken from the backward pass it
// overlaps. gloo's synchronous mode (Pair::setSync) reads and writes on the calling thread with
// blocking sockets instead, but its own algorithms then deadlock: both ends of a pair write a
// large message at once and neither reads. So allreduce runs this schedule over a second,
// synchronous context (other world sizes fold to a power of two first: Note [Folding to a power
// of two]): recursive halving (reduce-scatter) then doubling (allgather), where each step is an
// exchange between two partners in which the LOWER rank writes first and then reads, the higher
// one reads first and then writes. A write can then only
// wait on a reader that is already reading, or on one still finishing an earlier step (whose
// exchanges complete first, by induction over steps), whatever the socket buffer sizes. (Where
// the kernel is sure to buffer a whole chunk, the higher rank writes first too: Note [Writing
// ahead].) Every block is reduced once, by its owner, so all ranks get the same bits. Timeouts and
// dead peers surface as before: the sockets carry the job timeout, and a closed peer ends a read or
// write with an error.
class PairwiseAllreduce {
 public:
  PairwiseAllreduce(std::shared_ptr<gloo::Context> context, size_t write_ahead_bytes, size_t count,
                    ElementType type, size_t element_size, dpl_reduce_op op)
      : context_(std::move(context)),
        write_ahead_bytes_(write_ahead_bytes),
        count_(count),
        type_(type),
        element_size_(element_size),
        op_(op),
        scratch_((count + 1) / 2 * element_size),
        // Taken once, in the same order on every rank (Note [Reusing gloo algorithms]), so
        // re-binding buffers to new memory later never moves a slot.
        reduce_slot_(context_->nextSlot()),
        gather_slot_(context_->nextSlot()),
        schedule_(ScheduleOf(context_->rank, context_->size)) {
    for (int partner : schedule_.partners) {
      partners_.emplace_back();
      partners_.back().rank = partner;
    }
    // A rank that folds its data into a partner's owns no range and needs no scratch; the
    // partner it folds into takes the whole tensor before halving.
    if (schedule_.folded) scratch_.clear();
    if (schedule_.fold_partner >= 0 && !schedule_.folded)
      fold_scratch_.resize(count_ * element_size);
  }

  // Memory this instance holds besides the caller's tensor.
  size_t scratch_bytes() const { return scratch_.size() + fold_scratch_.size(); }

  // Note [Folding to a power of two]: halving and doubling need a power-of-two number of ranks.
  // With n = p + e ranks (p the largest power of two <= n), the first 2e ranks pair up: each odd
  // one writes its whole tensor to the even one below it (a fold, one direction only), sits out
  // the halving and doubling among the p remaining ranks, and then reads the result back (an
  // unfold). The remaining ranks take virtual ranks 0..p-1 in order. Folds and unfolds write in
  // one direction only, and their pairs are disjoint, so the induction of Note [Synchronous
  // pairs] still holds step by step.
  struct Schedule {
    int fold_partner = -1;      // the other rank of this rank's fold, or -1
    bool folded = false;        // this rank hands its data to fold_partner and waits
    int virtual_rank = 0;       // among the power-of-two ranks (unless folded)
    int virtual_size = 1;       // that power of two
    std::vector<int> partners;  // real ranks of the halving steps, in order (empty if folded)
  };
  static Schedule ScheduleOf(int rank, int size) {
    Schedule schedule;
    while (schedule.virtual_size * 2 <= size) schedule.virtual_size *= 2;
    const int extra = size - schedule.virtual_size;
    if (rank < 2 * extra) {
      schedule.fold_partner = rank ^ 1;
      schedule.folded = rank % 2 == 1;
      schedule.virtual_rank = rank / 2;
    } else {
      schedule.virtual_rank = rank - extra;
    }
    if (schedule.folded) return schedule;
    auto real_rank = [&](int virtual_rank) {
      return virtual_rank < extra ? 2 * virtual_rank : virtual_rank + extra;
    };
    for (int mask = schedule.virtual_size / 2; mask >= 1; mask /= 2) {
      schedule.partners.push_back(real_rank(schedule.virtual_rank ^ mask));
    }
    return schedule;
  }

  // Makes the pairs of a freshly connected mesh synchronous and primes their send buffers.
  //
  // Note [Priming send buffers]: gloo sizes a socket's send buffer from the first message that
  // outgrows it (SO_SNDBUF = message bytes, which the kernel doubles) and never again while later
  // messages fit that doubled size. On loopback, whose segments are 64 KiB, a buffer of about one
  // segment stalls a synchronous exchange: the writer waits for an acknowledgement to free room
  // for its last bytes, and the reader, having received less than two segments, delays that
  // acknowledgement for up to 200 ms. A 128 KiB allreduce after a 64 KiB one took 176 ms per call.
  // So each partner's first message is kPrimingBytes, which leaves every send buffer at several
  // segments (2 MiB, or twice net.core.wmem_max where that is lower); with that much unacknowledged
  // data in flight the reader acknowledges at once.
  // Returns how many bytes a write may run ahead of the peer's reads (Note [Writing ahead]).
  static size_t PrepareMesh(gloo::Context& context) {
    for (int peer = 0; peer < context.size; ++peer) {
      if (peer != context.rank) context.getPair(peer)->setSync(true, /*busyPoll=*/false);
    }
    constexpr size_t kPrimingBytes = size_t{1} << 20;
    std::vector<char> outgoing(kPrimingBytes), incoming(kPrimingBytes);
    const int slot = context.nextSlot();
    const Schedule schedule = ScheduleOf(context.rank, context.size);
    std::vector<int> peers = schedule.partners;  // in schedule order: the fold comes first
    if (schedule.fold_partner >= 0) peers.insert(peers.begin(), schedule.fold_partner);
    for (const int peer : peers) {
      auto& pair = context.getPair(peer);
      auto out = pair->createSendBuffer(slot, outgoing.data(), outgoing.size());
      auto in = pair->createRecvBuffer(slot, incoming.data(), incoming.size());
      auto send = [&] {
        out->send(0, kPrimingBytes, 0);
        out->waitSend();
      };
      if (context.rank < peer) {  // the same order as every exchange (Note [Synchronous pairs])
        send();
        in->waitRecv();
      } else {
        in->waitRecv();
        send();
      }
    }
    return WriteAheadBytes(kPrimingBytes + kPreambleBytes);
  }

  // Reduces `data` (count_ elements) in place on every rank.
  void run(char* data) {
    if (data != bound_) bind(data);
    const Range all{0, count_};
    const Range none{0, 0};
    if (schedule_.folded) {  // Note [Folding to a power of two]
      exchange(schedule_.fold_partner, fold_.out.get(), all, 0, nullptr, 0);
      exchange(schedule_.fold_partner, nullptr, none, 0, fold_.in.get(), count_);
      return;
    }
    if (schedule_.fold_partner >= 0) {
      exchange(schedule_.fold_partner, nullptr, none, 0, fold_.in.get(), count_);
      dpl::plugin::reduce_into(type_, op_, data, fold_scratch_.data(), count_);
    }
    // Reduce-scatter: halve the range each step, keeping the half this rank's bit selects.
    std::vector<Range> ranges{all};
    for (size_t step = 0; step < partners_.size(); ++step) {
      const Range range = ranges.back();
      const Range lower{range.begin, range.size / 2};
      const Range upper{range.begin + lower.size, range.size - lower.size};
      const bool keep_upper = (schedule_.virtual_rank & (schedule_.virtual_size / 2 >> step)) != 0;
      const Range keep = keep_upper ? upper : lower;
      const Range give = keep_upper ? lower : upper;
      Partner& partner = partners_[step];
      exchange(partner.rank, partner.reduce_out.get(), give, 0, partner.scratch_in.get(),
               keep.size);
      if (keep.size > 0) {
        dpl::plugin::reduce_into(type_, op_, data + keep.begin * element_size_, scratch_.data(),
                                 keep.size);
      }
      ranges.push_back(keep);
    }
    // Allgather: the same partners in reverse; each sends its reduced range into the other's
    // data at the same offset, so both end with the parent range.
    for (size_t step = partners_.size(); step-- > 0;) {
      const Range mine = ranges[step + 1];
      const size_t theirs = ranges[step].size - mine.size;  // the other half of the parent
      Partner& partner = partners_[step];
      exchange(partner.rank, partner.gather_out.get(), mine, mine.begin * element_size_,
               partner.gather_in.get(), theirs);
    }
    if (schedule_.fold_partner >= 0) {
      exchange(schedule_.fold_partner, fold_.out.get(), all, 0, nullptr, 0);
    }
  }

 private:
  struct Range {
    size_t begin;  // in elements
    size_t size;
  };
  struct Partner {
    int rank = 0;
    std::unique_ptr<gloo::transport::Buffer> scratch_in;  // reduce-scatter: the partner's half
    std::unique_ptr<gloo::transport::Buffer> reduce_out;  // -> the partner's scratch_in
    std::unique_ptr<gloo::transport::Buffer> gather_out;  // -> the partner's gather_in
    std::unique_ptr<gloo::transport::Buffer> gather_in;   // allgather: into our data
  };

  // gloo buffers name their memory when created; the caller's tensor may move between calls.
  // Every buffer is dropped before any is made: a gloo buffer, send or receive, unregisters its
  // SLOT from the pair when destroyed, which would take a new receive buffer of that slot with it.
  void bind(char* data) {
    const size_t bytes = count_ * element_size_;
    for (Partner& partner : partners_) {
      partner.reduce_out.reset();
      partner.gather_out.reset();
      partner.scratch_in.reset();
      partner.gather_in.reset();
    }
    fold_.out.reset();
    fold_.in.reset();
    for (Partner& partner : partners_) {
      auto& pair = context_->getPair(partner.rank);
      partner.reduce_out = pair->createSendBuffer(reduce_slot_, data, bytes);
      partner.gather_out = pair->createSendBuffer(gather_slot_, data, bytes);
      partner.scratch_in = pair->createRecvBuffer(reduce_slot_, scratch_.data(), scratch_.size());
      partner.gather_in = pair->createRecvBuffer(gather_slot_, data, bytes);
    }
    if (schedule_.fold_partner >= 0) {
      // The folded rank writes its data into the partner's fold scratch and reads the result
      // straight into its data; the partner reads into the scratch and writes from its data.
      auto& pair = context_->getPair(schedule_.fold_partner);
      fold_.out = pair->createSendBuffer(fold_slot_, data, bytes);
      if (schedule_.folded) {
        fold_.in = pair->createRecvBuffer(fold_slot_, data, bytes);
      } else {
        fold_.in = pair->createRecvBuffer(fold_slot_, fold_scratch_.data(), bytes);
      }
    }
    bound_ = data;
  }

  // Note [Writing ahead]: taking turns (Note [Synchronous pairs]) leaves one direction of a pair
  // idle while the other carries a message. Both ends may write at once when the kernel is sure
  // to take the whole write without the peer reading: a blocking write returns once its bytes
  // are queued in the socket's send buffer, acknowledged or not. So messages go in chunks of
  // kChunkBytes, chunk i of each direction in step, and a rank writes its chunk before reading the
  // peer's when kChunkBytes fits its write-ahead budget: a quarter of the send buffer that
  // priming left (Note [Priming send buffers]; twice min(priming message, net.core.wmem_max)).
  // Before a rank writes a chunk it has read the peer's previous one, which the peer wrote after
  // reading our chunk before that, so at most our last two or three chunks (with their kernel
  // overhead) wait in the buffer. The lower rank always writes first; a higher rank without the
  // budget reads first, which keeps the order of Note [Synchronous pairs]. Both sides split by
  // the same constant, so they agree on the chunks; the budget only decides the order.
  static constexpr size_t kChunkBytes = size_t{128} << 10;
  static constexpr size_t kPreambleBytes = 48;  // gloo's tcp::Op preamble before each message

  static size_t WriteAheadBytes(size_t priming_bytes) {
    std::ifstream file("/proc/sys/net/core/wmem_max");
    size_t wmem_max = 0;
    if (!(file >> wmem_max)) return 0;  // unknown: always take turns
    return 2 * std::min(priming_bytes, wmem_max) / 4;
  }

  static size_t ChunkCount(size_t bytes) { return (bytes + kChunkBytes - 1) / kChunkBytes; }

  // One step with one partner: send `out_range` of our data (to `remote_offset` bytes into the
  // partner's buffer), receive `in_elements` into `in`, chunk by chunk (Note [Writing ahead]).
  void exchange(int partner, gloo::transport::Buffer* out, Range out_range, size_t remote_offset,
                gloo::transport::Buffer* in, size_t in_elements) {
    const size_t out_bytes = out_range.size * element_size_;
    const size_t out_chunks = ChunkCount(out_bytes);
    const size_t in_chunks = ChunkCount(in_elements * element_size_);
    const bool write_first = context_->rank < partner || kChunkBytes <= write_ahead_bytes_;
    for (size_t chunk = 0; chunk < std::max(out_chunks, in_chunks); ++chunk) {
      auto send = [&] {
        if (chunk >= out_chunks) return;
        const size_t offset = chunk * kChunkBytes;
        out->send(out_range.begin * element_size_ + offset,
                  std::min(kChunkBytes, out_bytes - offset), remote_offset + offset);
        out->waitSend();
      };
      auto receive = [&] {
        if (chunk < in_chunks) in->waitRecv();
      };
      if (write_first) {
        send();
        receive();
      } else {
        receive();
        send();
      }
    }
  }

  std::shared_ptr<gloo::Context> context_;  // shared: its pairs must outlive our buffers
  const size_t write_ahead_bytes_;
  const size_t count_;
  const ElementType type_;
  const size_t element_size_;
  const dpl_reduce_op op_;
  std::vector<char> scratch_;
  const int reduce_slot_;
  const int gather_slot_;
  const int fold_slot_ = context_->nextSlot();  // after the others: the same order on every rank
  const Schedule schedule_;
  struct {
    std::unique_ptr<gloo::transport::Buffer> out;  // folded: our data; partner: the result
    std::unique_ptr<gloo::transport::Buffer> in;   // folded: the result; partner: fold_scratch_
  } fold_;
  std::vector<char> fold_scratch_;
  std::vector<Partner> partners_;
  char* bound_ = nullptr;
};

class GlooBackend {
 public:
  explicit GlooBackend(const dpl_backend_config_v1& config) : config_(config) {
    const auto options = dpl::plugin::parse_options(
        config.options, {"interface", "address", "algorithm", "write_ahead"});
    if (options.count("write_ahead")) {
      const std::string& value = options.at("write_ahead");
      if (value != "auto" && value != "off") {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          "write_ahead '" + value + "' is unknown; use auto or off");
      }
      write_ahead_ = value == "auto";
    }
    if (options.count("algorithm")) {
      const std::string& name = options.at("algorithm");
      if (name == "ring")
        algorithm_ = Algorithm::kRing;
      else if (name == "ring_chunked")
        algorithm_ = Algorithm::kRingChunked;
      else if (name == "halving_doubling")
        algorithm_ = Algorithm::kHalvingDoubling;
      else if (name == "pairwise")
        algorithm_ = Algorithm::kPairwise;
      else if (name != "auto") {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT, "algorithm '" + name +
                                                        "' is unknown; use auto, pairwise, ring, "
                                                        "ring_chunked or halving_doubling");
      }
    }
    gloo::transport::tcp::attr attr;
    if (options.count("interface")) attr.iface = options.at("interface");
    if (options.count("address")) attr.hostname = options.at("address");
    if (attr.iface.empty() && attr.hostname.empty()) attr.hostname = "127.0.0.1";
    const std::chrono::milliseconds timeout(config.timeout_ms);
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(config.rank, config.world_size);
    context->setTimeout(timeout);
    HostStore store(config.store, timeout, "gloo/");
    context->connectFullMesh(store, device_);
    context_ = context;
    // Note [Synchronous pairs]: allreduce gets a second mesh whose pairs are synchronous.
    const bool pairwise = algorithm_ == Algorithm::kAuto || algorithm_ == Algorithm::kPairwise;
    if (pairwise && config.world_size > 1) {
      auto exchange = std::make_shared<gloo::rendezvous::Context>(config.rank, config.world_size);
      exchange->setTimeout(timeout);
      HostStore exchange_store(config.store, timeout, "gloo-sync/");
      exchange->connectFullMesh(exchange_store, device_);
      const size_t budget = PairwiseAllreduce::PrepareMesh(*exchange);
      write_ahead_bytes_ = write_ahead_ ? budget : 0;
      exchange_context_ = exchange;
    }
  }

  dpl_status allreduce(DLTensor* tensor, dpl_reduce_op op) {
    dpl::plugin::check_contiguous(*tensor, "allreduce tensor");
    dpl::plugin::check_cpu(*tensor, kBackendName, "allreduce tensor");
    if (op < DPL_REDUCE_SUM || op > DPL_REDUCE_MAX) {
      return dpl::plugin::fail(DPL_ERR_UNSUPPORTED, "gloo: allreduce does not support op " +
                                                        std::to_string(op) +
                                                        "; use sum, avg, min or max");
    }
    const ElementType type = dpl::plugin::element_type(tensor->dtype);
    const int64_t count = dpl::plugin::numel(*tensor);
    if (type == ElementType::kUnknown || type == ElementType::kBFloat16) {
      return dpl::plugin::fail(DPL_ERR_UNSUPPORTED,
                               "gloo: allreduce does not support dtype " +
                                   dpl::plugin::dtype_name(tensor->dtype) +
                                   "; use float16, float32, float64, int8, uint8, int32 or int64 "
                                   "(or --backend tcp for bfloat16)");
    }
    if (count > INT_MAX) {
      return dpl::plugin::fail(DPL_ERR_UNSUPPORTED,
                               "gloo: allreduce of more than 2^31-1 elements; split the tensor");
    }
    if (count == 0) return DPL_OK;
    void* data = dpl::plugin::data_pointer(*tensor);
    switch (type) {
      case ElementType::kFloat16:
        run_allreduce<gloo::float16>(data, count, tensor, op);
        break;
      case ElementType::kFloat32:
        run_allreduce<float>(data, count, tensor, op);
        break;
      case ElementType::kFloat64:
        run_allreduce<double>(data, count, tensor, op);
        break;
      case ElementType::kInt8:
        run_allreduce<int8_t>(data, count, tensor, op);
        break;
      case ElementType::kUInt8:
        run_allreduce<uint8_t>(data, count, tensor, op);
        break;
      case ElementType::kInt32:
        run_allreduce<int32_t>(data, count, tensor, op);
        break;
      case ElementType::kInt64:
        run_allreduce<int64_t>(data, count, tensor, op);
        break;
      default:
        break;
    }
    if (op == DPL_REDUCE_AVG) {
      dpl::plugin::divide_in_place(type, data, static_cast<size_t>(count), config_.world_size);
    }
    return DPL_OK;
  }

  dpl_status broadcast(DLTensor* tensor, int32_t root) {
    const size_t bytes =
        dpl::plugin::check_cpu_broadcast(*tensor, root, config_.world_size, kBackendName);
    if (bytes == 0 || config_.world_size == 1) return DPL_OK;
    std::vector<char*> pointers{static_cast<char*>(dpl::plugin::data_pointer(*tensor))};
    gloo::BroadcastOneToAll<char> algorithm(context_, pointers, bytes, root);
    algorithm.run();
    return DPL_OK;
  }

  dpl_status allgather(const DLTensor* input, DLTensor* output) {
    const size_t block =
        dpl::plugin::check_cpu_allgather(*input, *output, config_.world_size, kBackendName);
    if (block == 0) return DPL_OK;
    if (config_.world_size == 1) {  // gloo's ring needs a peer pair
      std::memcpy(dpl::plugin::data_pointer(*output), dpl::plugin::data_pointer(*input), block);
      return DPL_OK;
    }
    std::vector<const char*> inputs{static_cast<const char*>(dpl::plugin::data_pointer(*input))};
    gloo::AllgatherRing<char> algorithm(context_, inputs,
                                        static_cast<char*>(dpl::plugin::data_pointer(*output)),
                                        static_cast<int>(block));
    algorithm.run();
    return DPL_OK;
  }

  // Note [Quiet teardown]: gloo's one-to-all broadcast returns on the root once its sends are
  // queued; a root that then closes its pairs can make a slower peer see "connection closed"
  // before it has read everything. destroy() therefore runs a last barrier -- unless a call
  // already failed (a dead peer would make it wait the whole timeout).
  void mark_broken() { broken_ = true; }
  void quiet_teardown() {
    if (broken_ || config_.world_size == 1) return;
    try {
      barrier();
    } catch (...) {  // teardown never fails
    }
  }

  dpl_status barrier() {
    if (config_.world_size == 1) return DPL_OK;
    gloo::BarrierAllToAll algorithm(context_);
    algorithm.run();
    return DPL_OK;
  }

 private:
  template <typename T>
  static const gloo::ReductionFunction<T>* reduction(dpl_reduce_op op) {
    switch (op) {
      case DPL_REDUCE_MIN:
        return gloo::ReductionFunction<T>::min;
      case DPL_REDUCE_MAX:
        return gloo::ReductionFunction<T>::max;
      default:
        return gloo::ReductionFunction<T>::sum;
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
  void run_allreduce(void* data, int64_t count, const DLTensor* tensor, dpl_reduce_op op) {
    if (config_.world_size == 1) return;
    const size_t bytes = static_cast<size_t>(count) * dpl::plugin::element_size(tensor->dtype);
    const auto key = std::make_tuple(count, int(dpl::plugin::element_type(tensor->dtype)), int(op));
    auto found = cached_.find(key);
    if (found == cached_.end()) {
      if (cached_bytes_ + bytes > kMaxStagingBytes) {
        cached_.clear();
        cached_bytes_ = 0;
      }
      CachedAllreduce entry;
      if (exchange_context_) {
        entry.pairwise = std::make_unique<PairwiseAllreduce>(
            exchange_context_, write_ahead_bytes_, static_cast<size_t>(count),
            dpl::plugin::element_type(tensor->dtype), dpl::plugin::element_size(tensor->dtype), op);
        cached_bytes_ += entry.pairwise->scratch_bytes();
      } else {
        entry.staging = std::make_shared<std::vector<char>>(bytes);
        entry.algorithm = make_allreduce<T>(reinterpret_cast<T*>(entry.staging->data()), count, op);
        cached_bytes_ += bytes;
      }
      found = cached_.emplace(key, std::move(entry)).first;
    }
    if (found->second.pairwise) {  // binds to the caller's memory: no staging copy
      found->second.pairwise->run(static_cast<char*>(data));
      return;
    }
    std::vector<char>& staging = *found->second.staging;
    std::memcpy(staging.data(), data, bytes);
    found->second.algorithm->run();
    std::memcpy(data, staging.data(), bytes);
  }

  template <typename T>
  std::unique_ptr<gloo::Algorithm> make_allreduce(T* data, int64_t count, dpl_reduce_op op) {
    std::vector<T*> pointers{data};
    const int n = static_cast<int>(count);
    const bool power_of_two = (config_.world_size & (config_.world_size - 1)) == 0;
    if (algorithm_ == Algorithm::kRing) {
      return std::make_unique<gloo::AllreduceRing<T>>(context_, pointers, n, reduction<T>(op));
    } else if (algorithm_ == Algorithm::kHalvingDoubling && power_of_two) {
      return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context_, pointers, n,
                                                                 reduction<T>(op));
    }
    // Forced (auto takes PairwiseAllreduce). Ring-chunked reduces each chunk once, so every
    // rank gets the same bits; gloo's plain ring sums in each rank's own order, and at three or
    // more ranks the float rounding would differ per rank and replicas drift apart.
    return std::make_unique<gloo::AllreduceRingChunked<T>>(context_, pointers, n, reduction<T>(op));
  }

  struct CachedAllreduce {
    std::unique_ptr<PairwiseAllreduce> pairwise;  // or a gloo algorithm on staging memory:
    std::shared_ptr<std::vector<char>> staging;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };
  static constexpr size_t kMaxStagingBytes = size_t{256} << 20;
  std::map<std::tuple<int64_t, int, int>, CachedAllreduce> cached_;
  size_t cached_bytes_ = 0;

  // kAuto and kPairwise: PairwiseAllreduce (Note [Synchronous pairs]). The others force one of
  // gloo's own algorithms (option algorithm=..., for benchmarks; halving_doubling falls back to
  // ring-chunked where the world size is not a power of two).
  enum class Algorithm { kAuto, kPairwise, kRing, kRingChunked, kHalvingDoubling };

  dpl_backend_config_v1 config_;
  Algorithm algorithm_ = Algorithm::kAuto;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<gloo::Context> exchange_context_;  // synchronous pairs, or null
  bool write_ahead_ = true;                          // option write_ahead=auto|off
  size_t write_ahead_bytes_ = 0;                     // Note [Writing ahead]
  bool broken_ = false;
};

GlooBackend* as_gloo(dpl_backend* backend) {
  return reinterpret_cast<GlooBackend*>(backend);
}

// gloo reports both dead peers and expired timeouts as IoException; tell them apart by text.
template <typename Body>
dpl_status guarded_gloo(Body&& body) noexcept;

// Runs a collective and remembers a communication failure for teardown.
template <typename Body>
dpl_status collective(dpl_backend* backend, Body&& body) noexcept {
  const dpl_status status = guarded_gloo(body);
  if ((status == DPL_ERR_COMMUNICATION || status == DPL_ERR_TIMEOUT) && backend != nullptr) {
    as_gloo(backend)->mark_broken();
  }
  return status;
}

template <typename Body>
dpl_status guarded_gloo(Body&& body) noexcept {
  return dpl::plugin::guarded(kBackendName, [&]() -> dpl_status {
    try {
      return body();
    } catch (const gloo::IoException& error) {
      const std::string text = error.what();
      const bool timed_out =
          text.find("imed out") != std::string::npos || text.find("imeout") != std::string::npos;
      throw PluginError(timed_out ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION, text);
    } catch (const gloo::Exception& error) {
      throw PluginError(DPL_ERR_COMMUNICATION, error.what());
    }
  });
}

void require(bool condition, const char* message) {
  if (!condition) throw PluginError(DPL_ERR_INVALID_ARGUMENT, message);
}

dpl_status gloo_create(const dpl_backend_config_v1* config, dpl_backend** out) {
  return guarded_gloo([&] {
    require(out != nullptr, "out is NULL");
    *out = nullptr;
    dpl::plugin::check_config(config);
    if (config->device_type != kDLCPU) {
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        "the gloo backend moves CPU tensors only; use --backend nccl for CUDA");
    }
    *out = reinterpret_cast<dpl_backend*>(new GlooBackend(*config));
    return DPL_OK;
  });
}

void gloo_destroy(dpl_backend* backend) {
  guarded_gloo([&] {
    if (backend != nullptr) as_gloo(backend)->quiet_teardown();
    delete as_gloo(backend);
    return DPL_OK;
  });
}

dpl_status gloo_allreduce(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op, void* stream) {
  return collective(backend, [&] {
    require(backend != nullptr && tensor != nullptr, "backend or tensor is NULL");
    require(stream == nullptr, "stream must be NULL for CPU tensors");
    return as_gloo(backend)->allreduce(tensor, op);
  });
}

dpl_status gloo_broadcast(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream) {
  return collective(backend, [&] {
    require(backend != nullptr && tensor != nullptr, "backend or tensor is NULL");
    require(stream == nullptr, "stream must be NULL for CPU tensors");
    return as_gloo(backend)->broadcast(tensor, root);
  });
}

dpl_status gloo_allgather(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                          void* stream) {
  return collective(backend, [&] {
    require(backend != nullptr && input != nullptr && output != nullptr,
            "backend, input or output is NULL");
    require(stream == nullptr, "stream must be NULL for CPU tensors");
    return as_gloo(backend)->allgather(input, output);
  });
}

dpl_status gloo_barrier(dpl_backend* backend) {
  return collective(backend, [&] {
    require(backend != nullptr, "backend is NULL");
    return as_gloo(backend)->barrier();
  });
}

const char* gloo_last_error() {
  return dpl::plugin::last_error();
}

}  // namespace

extern "C" DPL_PLUGIN_EXPORT const dpl_backend_plugin_v1 dpl_gloo_backend_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v1);
extern "C" const dpl_backend_plugin_v1 dpl_gloo_backend_table = {
    {sizeof(dpl_backend_plugin_v1), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND,
     DPL_BACKEND_ABI_VERSION_1, "gloo", "1.0.0", "gloo collectives over TCP (CPU tensors)"},
    gloo_create,
    gloo_destroy,
    gloo_allreduce,
    gloo_broadcast,
    gloo_allgather,
    gloo_barrier,
    gloo_last_error,
};
