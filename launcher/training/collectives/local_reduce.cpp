#include "training/collectives/local_reduce.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "training/collectives/backend_collectives.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

constexpr int kMaxLocalWorkers = 1024;
constexpr size_t kLine = 64;           // one flag per cache line: no false sharing
constexpr size_t kAlignElements = 16;  // buckets start on a cache line
constexpr size_t kChunk = 4096;        // elements summed at a time, in cache

// Note [A machine's shared memory over a regroup]: the workers of a machine that regroup in place
// (Note [Shrink in place] in training/live_state.hpp) attach to the same memory file again, for
// the next attempt, with a new reducer whose generations begin again at 0. Their flags of the
// attempt before still hold that attempt's generations, and their areas its gradients (the
// aborted step's, half copied or half summed), so each worker clears its own flags and its own
// area before it says it is there, and says so with the attempt's number, not a count of arrivals
// (a worker aborted before it attached in one attempt would make a count wrong for good). Nobody
// reads them meanwhile: every worker of the machine has left the attempt before (met the others
// in the store for the next one, its threads joined) before any of them attaches again. Never
// attached: fresh pages of zeroes, which the clearing leaves alone, not touched twice.

// The start of the shared memory: who attached, with which layout, in which attempt.
struct Header {
  uint32_t unused[16];
  struct Slot {
    std::atomic<int32_t> pid;
    std::atomic<uint32_t> attempt;  // + 1, written last; 0: never attached
    std::atomic<uint64_t> fingerprint;
  } slots[kMaxLocalWorkers];
};

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// sums[i] = (((in[0][i] + in[1][i]) + ...) + in[L-1][i]) * scale, chunk by chunk.
void SumFloats(const std::vector<const float*>& inputs, float* sums, size_t count, float scale,
               bool scaled) {
  for (size_t first = 0; first < count; first += kChunk) {
    const size_t n = std::min(kChunk, count - first);
    float* __restrict out = sums + first;
    const float* __restrict in0 = inputs[0] + first;
    for (size_t i = 0; i < n; ++i) out[i] = in0[i];
    for (size_t k = 1; k < inputs.size(); ++k) {
      const float* __restrict in = inputs[k] + first;
      const bool last = k + 1 == inputs.size() && scaled;
      if (last) {
        for (size_t i = 0; i < n; ++i) out[i] = (out[i] + in[i]) * scale;
      } else {
        for (size_t i = 0; i < n; ++i) out[i] = out[i] + in[i];
      }
    }
  }
}

}  // namespace

LocalReducer::LocalReducer(const LocalGroup& group, ShardLayout layout, WireFormat wire)
    : group_(group), layout_(std::move(layout)), wire_(wire) {}

LocalReducer::~LocalReducer() = default;

Result<std::unique_ptr<LocalReducer>> LocalReducer::Create(const LocalGroup& group,
                                                           ShardLayout layout, WireFormat wire,
                                                           bool sharded, size_t entries,
                                                           bool parameters) {
  if (group.local_world_size > kMaxLocalWorkers) {
    return Status::InvalidArgument("--local-reduce shm takes at most " +
                                   std::to_string(kMaxLocalWorkers) +
                                   " workers a machine; use --local-reduce backend");
  }
  std::unique_ptr<LocalReducer> reducer(new LocalReducer(group, std::move(layout), wire));
  LocalReducer& r = *reducer;
  const size_t workers = size_t(group.local_world_size);
  for (size_t b = 0; b < r.layout_.buckets(); ++b) {
    r.areas_.bucket_offsets.push_back(r.areas_.padded_elements);
    r.areas_.padded_elements += RoundUp(r.layout_.bucket(b).elements, kAlignElements);
  }
  r.areas_.entries = entries;
  r.areas_.flags_per_worker = 2 * r.layout_.buckets() + 1;
  r.areas_.flags = RoundUp(sizeof(Header), kLine);
  r.areas_.inputs = r.areas_.flags + workers * r.areas_.flags_per_worker * kLine;
  r.areas_.sums =
      r.areas_.inputs + RoundUp(workers * r.areas_.padded_elements * sizeof(float), kLine);
  r.areas_.copy = r.areas_.sums + r.areas_.padded_elements * sizeof(float);
  r.areas_.entries_at = r.areas_.copy + (sharded ? r.areas_.padded_elements * sizeof(float) : 0);
  const size_t values_at =
      RoundUp(r.areas_.entries_at + workers * r.areas_.entries * sizeof(double), kLine);
  r.areas_.values = parameters ? values_at : 0;  // 0: no room (values() is NULL)
  const size_t bytes = values_at + (parameters ? r.layout_.elements() * sizeof(float) : 0);
  DPL_ASSIGN_OR_RETURN(r.mapping_, SharedMapping::Map(group.memory_fd, bytes));
  const uint64_t fingerprint = r.layout_.Fingerprint() ^ (uint64_t(bytes) << 1) ^ uint64_t(wire);
  DPL_RETURN_IF_ERROR(r.Attach(fingerprint));
  return reducer;
}

// Each worker names itself and its layout, then waits for the others of the same attempt (Note
// [A machine's shared memory over a regroup]).
Status LocalReducer::Attach(uint64_t fingerprint) {
  Header& header = *reinterpret_cast<Header*>(mapping_->data());
  Header::Slot& own = header.slots[group_.local_rank];
  if (own.attempt.load(std::memory_order_acquire) != 0) ClearOwnAreas();
  own.fingerprint.store(fingerprint, std::memory_order_relaxed);
  own.pid.store(int32_t(::getpid()), std::memory_order_relaxed);
  const uint32_t here = group_.attempt + 1;
  own.attempt.store(here, std::memory_order_release);
  auto missing = [&] {
    std::string ranks;
    for (int k = 0; k < group_.local_world_size; ++k) {
      if (header.slots[k].attempt.load(std::memory_order_acquire) == here) continue;
      ranks += (ranks.empty() ? "" : ", ") +
               std::to_string(group_.machine * group_.local_world_size + k);
    }
    return ranks;
  };
  const auto deadline = std::chrono::steady_clock::now() + group_.timeout;
  while (!missing().empty()) {
    if (group_.abort->raised()) return group_.abort->why();  // Note [Aborting collectives]
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Timeout("rank(s) " + missing() + " of this machine did not reach its shared " +
                             "memory within " + std::to_string(group_.timeout.count()) +
                             " ms (--backend-timeout)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int k = 0; k < group_.local_world_size; ++k) {
    pids_.push_back(pid_t(header.slots[k].pid.load(std::memory_order_acquire)));
    if (header.slots[k].fingerprint.load() != fingerprint) {
      return Status::Error("rank " + std::to_string(group_.machine * group_.local_world_size + k) +
                           " lays its gradients out otherwise in the machine's shared memory: "
                           "the workers of a machine must train the same model with the same "
                           "--bucket-cap-mb, --grad-compression and --shard-optimizer");
    }
  }
  return Status::Ok();
}

void LocalReducer::ClearOwnAreas() {
  for (size_t index = 0; index < areas_.flags_per_worker; ++index) {
    Flag(group_.local_rank, index).store(0, std::memory_order_relaxed);
  }
  std::memset(ModelGradients(group_.local_rank), 0, areas_.padded_elements * sizeof(float));
}

std::atomic<uint32_t>& LocalReducer::Flag(int worker, size_t index) const {
  char* line =
      mapping_->data() + areas_.flags + (size_t(worker) * areas_.flags_per_worker + index) * kLine;
  return *reinterpret_cast<std::atomic<uint32_t>*>(line);
}

float* LocalReducer::Input(int worker, size_t bucket) const {
  // Note [Gradients in shared memory]: the area in parameter order, else in the buckets' order.
  return ModelGradients(worker) +
         (reads_model_gradients() ? direct_offsets_[bucket] : areas_.bucket_offsets[bucket]);
}

float* LocalReducer::ModelGradients(int worker) const {
  return reinterpret_cast<float*>(mapping_->data() + areas_.inputs) +
         size_t(worker) * areas_.padded_elements;
}

bool LocalReducer::UseModelGradients() {
  // Each bucket's first element in parameter order: the buckets are consecutive runs of it.
  std::vector<size_t> order(layout_.buckets());
  for (size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return layout_.bucket(a).parameters.front() < layout_.bucket(b).parameters.front();
  });
  direct_offsets_.assign(layout_.buckets(), 0);
  size_t offset = 0;
  uint32_t next = 0;  // the parameter the next bucket must begin with
  for (size_t b : order) {
    for (uint32_t p : layout_.bucket(b).parameters) {
      if (p != next++) {  // not one run of the parameter order
        direct_offsets_.clear();
        return false;
      }
    }
    direct_offsets_[b] = offset;
    offset += layout_.bucket(b).elements;
  }
  return true;
}

float* LocalReducer::values() const {
  return areas_.values == 0 ? nullptr : reinterpret_cast<float*>(mapping_->data() + areas_.values);
}

float* LocalReducer::sums(size_t b) const {
  return reinterpret_cast<float*>(mapping_->data() + areas_.sums) + areas_.bucket_offsets[b];
}

PeerProcess LocalReducer::Peer(int worker) const {
  return PeerProcess{group_.machine * group_.local_world_size + worker, pids_[size_t(worker)]};
}

Status LocalReducer::WaitForAll(size_t flag, uint32_t target,
                                const std::function<std::string()>& what) {
  for (int k = 0; k < group_.local_world_size; ++k) {
    if (k == group_.local_rank) continue;
    DPL_RETURN_IF_ERROR(
        WaitFor(Flag(k, flag), target, Peer(k), group_.timeout, *group_.abort, what));
  }
  return Status::Ok();
}

// Step 1: copied and zeroed a chunk at a time, so the zeroes land on lines still in cache.
void LocalReducer::CopyIn(size_t bucket, const std::vector<DLTensor>& gradients) {
  if (reads_model_gradients()) return;  // Note [Gradients in shared memory]
  constexpr size_t kChunk = 4096;       // elements: 16 KiB of float32, within L1
  const BucketLayout& layout = layout_.bucket(bucket);
  float* input = Input(group_.local_rank, bucket);
  for (size_t k = 0; k < layout.parameters.size(); ++k) {
    const DLTensor& gradient = gradients[layout.parameters[k]];
    float* from = HostData<float>(gradient);
    const size_t n = ElementCount(gradient);
    for (size_t at = 0; at < n; at += kChunk) {
      const size_t count = std::min(kChunk, n - at);
      std::memcpy(input + layout.starts[k] + at, from + at, count * sizeof(float));
      if (zero_behind_) std::memset(from + at, 0, count * sizeof(float));
    }
  }
}

Status LocalReducer::ReduceBucket(size_t bucket, const std::vector<DLTensor>& gradients,
                                  float scale) {
  CopyIn(bucket, gradients);
  Publish(&Flag(group_.local_rank, bucket), generation_.step);
  auto what = [&] {
    return "gradient bucket " + std::to_string(bucket) + " of step " +
           std::to_string(generation_.step);
  };
  DPL_RETURN_IF_ERROR(WaitForAll(bucket, generation_.step, what));
  DPL_RETURN_IF_ERROR(SumPart(bucket, scale));
  Publish(&Flag(group_.local_rank, layout_.buckets() + bucket), generation_.step);
  return Status::Ok();
}

// Step 3 and 4 of Note [Reduction through shared memory] for this worker's part of `bucket`.
Status LocalReducer::SumPart(size_t bucket, float scale) {
  const BucketLayout& layout = layout_.bucket(bucket);
  const size_t first = layout.bounds[size_t(group_.local_rank)];
  const size_t count = layout.bounds[size_t(group_.local_rank) + 1] - first;
  if (count == 0) return Status::Ok();
  float* out = sums(bucket) + first;
  std::vector<const float*> inputs;
  for (int k = 0; k < group_.local_world_size; ++k) inputs.push_back(Input(k, bucket) + first);
  const bool across = group_.machines > 1;
  SumFloats(inputs, out, count, scale, /*scaled=*/!across);
  if (!across) return Status::Ok();
  // Step 4: the machine's part across machines, scaled once, rounded once to a 16-bit wire after
  // the scale, as the backend's path does.
  return SumHostFloats(*group_.across_machines, wire_, out, count, scale, &wire_part_);
}

Status LocalReducer::AwaitSums() {
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    auto what = [&] {
      return "the sums of gradient bucket " + std::to_string(b) + " of step " +
             std::to_string(generation_.step);
    };
    DPL_RETURN_IF_ERROR(WaitForAll(layout_.buckets() + b, generation_.step, what));
  }
  return Status::Ok();
}

Status LocalReducer::Barrier(const char* what) {
  ++generation_.barrier;
  const size_t flag = 2 * layout_.buckets();
  Publish(&Flag(group_.local_rank, flag), generation_.barrier);
  return WaitForAll(flag, generation_.barrier, [&] { return std::string(what); });
}

Status LocalReducer::ShareEntries(std::vector<double>* values) {
  if (values->size() > areas_.entries) {
    return Status::Error("the sharded optimizer shares " + std::to_string(values->size()) +
                         " numbers a step, more than the " + std::to_string(areas_.entries) +
                         " its shared memory holds");
  }
  double* rows = reinterpret_cast<double*>(mapping_->data() + areas_.entries_at);
  const size_t n = values->size();
  std::memcpy(rows + size_t(group_.local_rank) * areas_.entries, values->data(),
              n * sizeof(double));
  DPL_RETURN_IF_ERROR(Barrier("the step's partial sums of the sharded optimizer"));
  for (size_t i = 0; i < n; ++i) {
    double total = rows[i];
    for (int k = 1; k < group_.local_world_size; ++k) total += rows[size_t(k) * areas_.entries + i];
    (*values)[i] = total;
  }
  return Status::Ok();
}

Status LocalReducer::GatherParts(const std::function<const float*(const ParameterRun&)>& source,
                                 const std::function<float*(const ParameterRun&)>& destination,
                                 bool again) {
  float* copy = reinterpret_cast<float*>(mapping_->data() + areas_.copy);
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    for (const ParameterRun& run : layout_.RunsOf(b, group_.local_rank)) {
      std::memcpy(copy + areas_.bucket_offsets[b] + run.flat, source(run),
                  run.elements * sizeof(float));
    }
  }
  DPL_RETURN_IF_ERROR(Barrier("the parts of the sharded optimizer"));
  for (size_t b = 0; b < layout_.buckets(); ++b) {
    for (int k = 0; k < group_.local_world_size; ++k) {
      if (k == group_.local_rank) continue;
      for (const ParameterRun& run : layout_.RunsOf(b, k)) {
        float* to = destination(run);
        if (to != nullptr) {
          std::memcpy(to, copy + areas_.bucket_offsets[b] + run.flat, run.elements * sizeof(float));
        }
      }
    }
  }
  return again ? Barrier("the copies of the sharded optimizer's parts") : Status::Ok();
}

}  // namespace dpl::training
