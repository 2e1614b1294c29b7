// The tcp backend: ring collectives over non-blocking POSIX sockets (the ring itself, and Note
// [Ring without deadlock], are in ring_link.hpp); abort shuts the ring's sockets down.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpl/support/backend.hpp"
#include "dpl/support/backend_table.hpp"
#include "dpl/support/options.hpp"
#include "dpl/support/reduce.hpp"
#include "ring_link.hpp"

namespace {

using dpl::support::ElementType;
using dpl::support::PluginError;
using dpl::tcp_backend::Clock;
using dpl::tcp_backend::RingLink;
using dpl::tcp_backend::StepTransfer;

constexpr const char* kBackendName = "tcp";
// Bytes reduced at a time while a segment is still arriving (keeps the scratch data in cache).
constexpr size_t kReduceChunkBytes = 256 * 1024;

// The address this rank listens on: --backend-options address=, else the one the host found
// routes to machine 0 (dpl/backend_v2.h), else loopback.
std::string ListenAddress(const dpl_backend_config_v3& config) {
  if (config.device_type != kDLCPU) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      "the tcp backend moves CPU tensors only; use --backend nccl for CUDA");
  }
  const dpl::support::KeyValueOptions options(config.options, "--backend-options");
  const std::string local = config.local_address != nullptr ? config.local_address : "";
  const std::string address = options.GetString("address", local.empty() ? "127.0.0.1" : local);
  options.CheckAllKnown();
  return address;
}

class TcpBackend : public dpl::support::BackendDefaults<TcpBackend> {
 public:
  static constexpr const char* kName = kBackendName;

  explicit TcpBackend(const dpl_backend_config_v3& config)
      : config_(config), timeout_(std::chrono::milliseconds(config.timeout_ms)) {
    const std::string address = ListenAddress(config);
    if (config_.world_size > 1) link_.emplace(config, address);
  }

  // The collectives of dpl/backend.h, on host memory (no stream).
  dpl_status Allreduce(DLTensor* tensor, dpl_reduce_op op, void* stream) {
    dpl::support::CheckNoStream(stream);
    dpl::support::CheckContiguous(*tensor, "allreduce tensor");
    dpl::support::CheckHostTensor(*tensor, kBackendName, "allreduce tensor");
    const ElementType type = CheckReducible(*tensor, op, "allreduce");
    const size_t count = static_cast<size_t>(dpl::support::ElementCount(*tensor));
    if (count == 0 || config_.world_size == 1) return DPL_OK;
    RingReduceScatter(static_cast<char*>(dpl::support::DataPointer(*tensor)), count,
                      dpl::support::ElementSize(tensor->dtype), type, op, kAllreduceOwner);
    RingGatherSegments(static_cast<char*>(dpl::support::DataPointer(*tensor)), count,
                       dpl::support::ElementSize(tensor->dtype));
    if (op == DPL_REDUCE_AVG) {
      dpl::support::DivideInPlace(type, dpl::support::DataPointer(*tensor), count,
                                  config_.world_size);
    }
    return DPL_OK;
  }

  // The ring's reduce-scatter phase with the segments shifted so that rank r ends owning
  // segment r, which is slice r of the input (dpl/backend_v3.h).
  dpl_status ReduceScatter(DLTensor* input, DLTensor* output, dpl_reduce_op op, void* stream) {
    dpl::support::CheckNoStream(stream);
    dpl::support::CheckHostTensor(*input, kBackendName, "reduce_scatter input");
    dpl::support::CheckHostTensor(*output, kBackendName, "reduce_scatter output");
    const bool in_place =
        dpl::support::CheckReduceScatter(*input, *output, config_.world_size, config_.rank);
    const ElementType type = CheckReducible(*input, op, "reduce_scatter");
    const size_t count = static_cast<size_t>(dpl::support::ElementCount(*input));
    if (count == 0) return DPL_OK;
    char* data = static_cast<char*>(dpl::support::DataPointer(*input));
    if (config_.world_size > 1) {
      RingReduceScatter(data, count, dpl::support::ElementSize(input->dtype), type, op,
                        kReduceScatterOwner);
    }
    const size_t slice_bytes = dpl::support::ByteCount(*output);
    void* slice = dpl::support::DataPointer(*output);
    if (!in_place) {
      std::memcpy(slice, data + static_cast<size_t>(config_.rank) * slice_bytes, slice_bytes);
    }
    if (op == DPL_REDUCE_AVG) {
      dpl::support::DivideInPlace(type, slice, count / static_cast<size_t>(config_.world_size),
                                  config_.world_size);
    }
    return DPL_OK;
  }

  dpl_status Broadcast(DLTensor* tensor, int32_t root, void* stream) {
    dpl::support::CheckNoStream(stream);
    const size_t bytes =
        dpl::support::CheckHostBroadcast(*tensor, root, config_.world_size, kBackendName);
    if (bytes == 0 || config_.world_size == 1) return DPL_OK;
    char* data = static_cast<char*>(dpl::support::DataPointer(*tensor));
    const int next = link_->NextRank();
    const auto deadline = Clock::now() + timeout_;
    StepTransfer transfer;
    if (config_.rank == root) {
      transfer.send_data = data;
      transfer.send_bytes = bytes;
    } else {
      transfer.recv_data = data;
      transfer.recv_bytes = bytes;
      if (next != root) {
        transfer.send_data = data;
        transfer.send_bytes = bytes;
        transfer.send_only_received = true;
      }
    }
    link_->RunStep(transfer, deadline, nullptr);
    return DPL_OK;
  }

  dpl_status Allgather(const DLTensor* input, DLTensor* output, void* stream) {
    dpl::support::CheckNoStream(stream);
    dpl::support::CheckHostTensor(*input, kBackendName, "allgather input");
    dpl::support::CheckHostTensor(*output, kBackendName, "allgather output");
    dpl::support::CheckAllgatherPlacement(*input, *output, config_.world_size, config_.rank);
    const size_t block = dpl::support::ByteCount(*input);
    if (block == 0) return DPL_OK;
    RingAllgather(static_cast<const char*>(dpl::support::DataPointer(*input)),
                  static_cast<char*>(dpl::support::DataPointer(*output)), block);
    return DPL_OK;
  }

  dpl_status Barrier() {
    if (config_.world_size == 1) return DPL_OK;
    const char token = 1;
    std::vector<char> tokens(static_cast<size_t>(config_.world_size));
    RingAllgather(&token, tokens.data(), 1);
    return DPL_OK;
  }

  // From another thread (Note [Aborted instances] in dpl/support/backend_table.hpp): the ring's
  // sockets shut down end the step under way, whose error the table then reports as the abort.
  // link_ is set once in the constructor, so reading it here races with nothing.
  void Abort() {
    BackendDefaults::Abort();
    if (link_) link_->ShutDown();
  }

 private:
  // Segment s of `count` elements split evenly over the ranks: [begin, end).
  std::pair<size_t, size_t> Segment(size_t count, int s) const {
    const size_t world = static_cast<size_t>(config_.world_size);
    const size_t index = static_cast<size_t>(s);
    return {count * index / world, count * (index + 1) / world};
  }

  // The op and element type a reduction can take; refuses the others naming `what`.
  static ElementType CheckReducible(const DLTensor& tensor, dpl_reduce_op op, const char* what) {
    const ElementType type = dpl::support::ReducibleElementType(tensor.dtype, what);
    dpl::support::CheckReduceOp(op, what);
    return type;
  }

  // Which segment a rank owns after the reduce-scatter phase: rank + shift. The allreduce's ring
  // has always ended at rank + 1 (its sums, and so its bits, stay as they were); reduce_scatter
  // ends at the rank's own slice.
  static constexpr int kAllreduceOwner = 1;
  static constexpr int kReduceScatterOwner = 0;

  // After world-1 steps, rank r owns the full reduction of segment (r + owner_shift) % world.
  void RingReduceScatter(char* data, size_t count, size_t element_bytes, ElementType type,
                         dpl_reduce_op op, int owner_shift) {
    const int world = config_.world_size;
    const int rank = config_.rank;
    const size_t largest = (count + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
    scratch_.resize(largest * element_bytes);
    const auto deadline = Clock::now() + timeout_;
    for (int step = 0; step < world - 1; ++step) {
      const int send_segment = ((rank + owner_shift - 1 - step) % world + world) % world;
      const int recv_segment = ((rank + owner_shift - 2 - step) % world + world) % world;
      const auto [send_begin, send_end] = Segment(count, send_segment);
      const auto [recv_begin, recv_end] = Segment(count, recv_segment);
      StepTransfer transfer;
      transfer.send_data = data + send_begin * element_bytes;
      transfer.send_bytes = (send_end - send_begin) * element_bytes;
      transfer.recv_data = scratch_.data();
      transfer.recv_bytes = (recv_end - recv_begin) * element_bytes;
      char* target = data + recv_begin * element_bytes;
      size_t reduced = 0;  // bytes of scratch already folded into target
      auto reduce_arrived = [&](size_t, size_t arrived) {
        // Fold whole chunks as they complete, the tail once everything is in.
        size_t ready = arrived == transfer.recv_bytes
                           ? arrived
                           : (arrived / kReduceChunkBytes) * kReduceChunkBytes;
        ready -= ready % element_bytes;
        if (ready > reduced) {
          dpl::support::ReduceInto(type, op, target + reduced, scratch_.data() + reduced,
                                   (ready - reduced) / element_bytes);
          reduced = ready;
        }
      };
      link_->RunStep(transfer, deadline, &reduce_arrived);
    }
  }

  // The allreduce's allgather of the segments reduced by RingReduceScatter(kAllreduceOwner),
  // received straight into place.
  void RingGatherSegments(char* data, size_t count, size_t element_bytes) {
    const int world = config_.world_size;
    const int rank = config_.rank;
    const auto deadline = Clock::now() + timeout_;
    for (int step = 0; step < world - 1; ++step) {
      const auto [send_begin, send_end] = Segment(count, (rank + 1 - step + world) % world);
      const auto [recv_begin, recv_end] = Segment(count, (rank - step + world) % world);
      StepTransfer transfer;
      transfer.send_data = data + send_begin * element_bytes;
      transfer.send_bytes = (send_end - send_begin) * element_bytes;
      transfer.recv_data = data + recv_begin * element_bytes;
      transfer.recv_bytes = (recv_end - recv_begin) * element_bytes;
      link_->RunStep(transfer, deadline, nullptr);
    }
  }

  void RingAllgather(const char* input, char* output, size_t block) {
    const int world = config_.world_size;
    const int rank = config_.rank;
    char* own = output + static_cast<size_t>(rank) * block;
    if (own != input) std::memcpy(own, input, block);  // in place: already there
    const auto deadline = Clock::now() + timeout_;
    for (int step = 0; step < world - 1; ++step) {
      const size_t send_block = static_cast<size_t>((rank - step + world) % world);
      const size_t recv_block = static_cast<size_t>((rank - step - 1 + 2 * world) % world);
      StepTransfer transfer;
      transfer.send_data = output + send_block * block;
      transfer.send_bytes = block;
      transfer.recv_data = output + recv_block * block;
      transfer.recv_bytes = block;
      link_->RunStep(transfer, deadline, nullptr);
    }
  }

  dpl_backend_config_v3 config_;
  std::chrono::milliseconds timeout_;
  std::optional<RingLink> link_;  // none at world size 1
  std::vector<char> scratch_;
};

}  // namespace

DPL_EXPORT_BACKEND(TcpBackend, dpl_tcp_backend_table, "1.1.0",
                   "ring collectives over plain TCP sockets (CPU tensors)");
