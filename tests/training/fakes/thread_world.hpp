// A backend whose ranks are threads of this process: the collectives of dpl/backend.h on host
// memory, each summed in rank order (so every rank gets the same bits), through one meeting point.
// For unit tests of the front's backend path and of the step's parts without a launcher.
#pragma once

#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dpl/support/half.hpp"
#include "training/collectives/backend.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training::fakes {

class ThreadWorld {
 public:
  explicit ThreadWorld(int size) : size_(size), deposits_(size_t(size)) {}

  int size() const { return size_; }
  // Rank `rank`'s connected backend. It moves host memory whatever `device_type` says: a backend
  // created for kDLCUDA stands for one of device memory only, for the front's choice of paths.
  std::unique_ptr<Backend> BackendOf(int rank, int32_t device_type = kDLCPU);
  // Backends made from now on have send_receive (backend ABI v5), as gloo's and nccl's do.
  void OfferSendReceive() { send_receive_ = true; }
  // Runs `body(rank)` on a thread per rank and joins them.
  void RunRanks(const std::function<void(int rank)>& body) {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < size_; ++rank) threads.emplace_back(body, rank);
    for (std::thread& thread : threads) thread.join();
  }
  // Collectives issued so far by rank 0, by name ("allreduce", ...).
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

  // Every rank deposits `mine`; once all have, `combine` (run once, by the last to arrive) turns
  // the deposits, in rank order, into what each rank gets (`out` for rank r: results[r]).
  std::vector<uint8_t> Meet(int rank, const char* name, std::vector<uint8_t> mine,
                            const std::function<std::vector<std::vector<uint8_t>>(
                                const std::vector<std::vector<uint8_t>>&)>& combine);

 private:
  int size_;
  bool send_receive_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::vector<uint8_t>> deposits_, results_;
  int arrived_ = 0, left_ = 0;
  uint64_t round_ = 0;
  std::vector<std::string> calls_;
};

inline std::vector<uint8_t> ThreadWorld::Meet(
    int rank, const char* name, std::vector<uint8_t> mine,
    const std::function<
        std::vector<std::vector<uint8_t>>(const std::vector<std::vector<uint8_t>>&)>& combine) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return left_ == 0; });  // the round before is over for everyone
  const uint64_t round = round_;
  if (rank == 0) calls_.push_back(name);
  deposits_[size_t(rank)] = std::move(mine);
  if (++arrived_ == size_) {
    results_ = combine(deposits_);
    arrived_ = 0;
    left_ = size_;
    ++round_;
    changed_.notify_all();
  } else {
    changed_.wait(lock, [&] { return round_ != round; });
  }
  std::vector<uint8_t> out = results_[size_t(rank)];
  if (--left_ == 0) changed_.notify_all();
  return out;
}

namespace detail {

struct Rank {
  ThreadWorld* world;
  int rank;
};

inline Rank& RankOf(dpl_backend* backend) {
  return *reinterpret_cast<Rank*>(backend);
}

inline std::vector<uint8_t> BytesOf(const DLTensor& tensor) {
  const size_t bytes = ElementCount(tensor) * ((tensor.dtype.bits + 7) / 8);
  const auto* data = HostData<const uint8_t>(tensor);
  return std::vector<uint8_t>(data, data + bytes);
}

inline void WriteBytes(const std::vector<uint8_t>& bytes, DLTensor* tensor) {
  std::memcpy(HostData<uint8_t>(*tensor), bytes.data(), bytes.size());
}

// The element-wise sum of `deposits` in rank order, in the tensors' dtype.
inline std::vector<uint8_t> Sum(const std::vector<std::vector<uint8_t>>& deposits,
                                const DLDataType& dtype) {
  std::vector<uint8_t> total = deposits[0];
  for (size_t r = 1; r < deposits.size(); ++r) {
    const uint8_t* in = deposits[r].data();
    if (dtype.code == kDLFloat && dtype.bits == 32) {
      auto* out = reinterpret_cast<float*>(total.data());
      for (size_t i = 0; i < total.size() / 4; ++i) out[i] += reinterpret_cast<const float*>(in)[i];
    } else if (dtype.code == kDLFloat && dtype.bits == 64) {
      auto* out = reinterpret_cast<double*>(total.data());
      for (size_t i = 0; i < total.size() / 8; ++i) {
        out[i] += reinterpret_cast<const double*>(in)[i];
      }
    } else if (dtype.bits == 16) {  // fp16 and bf16, each sum in float32 rounded back
      const bool half = dtype.code == kDLFloat;
      auto* out = reinterpret_cast<uint16_t*>(total.data());
      const auto* add = reinterpret_cast<const uint16_t*>(in);
      for (size_t i = 0; i < total.size() / 2; ++i) {
        out[i] =
            half ? support::FloatToHalf(support::HalfToFloat(out[i]) + support::HalfToFloat(add[i]))
                 : support::FloatToBfloat16(support::Bfloat16ToFloat(out[i]) +
                                            support::Bfloat16ToFloat(add[i]));
      }
    }
  }
  return total;
}

inline std::vector<std::vector<uint8_t>> Everyone(const std::vector<uint8_t>& bytes, size_t n) {
  return std::vector<std::vector<uint8_t>>(n, bytes);
}

}  // namespace detail

namespace detail {

inline dpl_status Allreduce(dpl_backend* b, DLTensor* tensor, dpl_reduce_op, void*) {
  const Rank& r = RankOf(b);
  const DLDataType dtype = tensor->dtype;
  WriteBytes(r.world->Meet(r.rank, "allreduce", BytesOf(*tensor),
                           [&](const auto& all) { return Everyone(Sum(all, dtype), all.size()); }),
             tensor);
  return DPL_OK;
}

inline dpl_status Broadcast(dpl_backend* b, DLTensor* tensor, int32_t root, void*) {
  const Rank& r = RankOf(b);
  WriteBytes(
      r.world->Meet(r.rank, "broadcast", BytesOf(*tensor),
                    [&](const auto& all) { return Everyone(all[size_t(root)], all.size()); }),
      tensor);
  return DPL_OK;
}

inline dpl_status Allgather(dpl_backend* b, const DLTensor* input, DLTensor* output, void*) {
  const Rank& r = RankOf(b);
  WriteBytes(r.world->Meet(r.rank, "allgather", BytesOf(*input),
                           [](const auto& all) {
                             std::vector<uint8_t> joined;
                             for (const auto& part : all) {
                               joined.insert(joined.end(), part.begin(), part.end());
                             }
                             return Everyone(joined, all.size());
                           }),
             output);
  return DPL_OK;
}

inline dpl_status ReduceScatter(dpl_backend* b, DLTensor* input, DLTensor* output, dpl_reduce_op,
                                void*) {
  const Rank& r = RankOf(b);
  const DLDataType dtype = input->dtype;
  WriteBytes(r.world->Meet(r.rank, "reduce_scatter", BytesOf(*input),
                           [&](const auto& all) {
                             const std::vector<uint8_t> sum = Sum(all, dtype);
                             const size_t slice = sum.size() / all.size();
                             std::vector<std::vector<uint8_t>> slices;
                             for (size_t k = 0; k < all.size(); ++k) {
                               slices.emplace_back(sum.begin() + long(k * slice),
                                                   sum.begin() + long((k + 1) * slice));
                             }
                             return slices;
                           }),
             output);
  return DPL_OK;
}

// Each rank deposits its `to` and bytes; each gets the sender's rank and the bytes sent to it.
inline dpl_status SendReceive(dpl_backend* b, const DLTensor* send, int32_t to, DLTensor* receive,
                              int32_t from, void*) {
  const Rank& r = RankOf(b);
  std::vector<uint8_t> mine(sizeof(int32_t));
  std::memcpy(mine.data(), &to, sizeof to);
  if (send != nullptr) {
    const std::vector<uint8_t> bytes = BytesOf(*send);
    mine.insert(mine.end(), bytes.begin(), bytes.end());
  }
  const std::vector<uint8_t> got =
      r.world->Meet(r.rank, "send_receive", std::move(mine), [](const auto& all) {
        std::vector<std::vector<uint8_t>> out(all.size());
        for (size_t k = 0; k < all.size(); ++k) {
          int32_t target = -1;
          std::memcpy(&target, all[k].data(), sizeof target);
          if (target < 0) continue;
          const int32_t sender = int32_t(k);
          out[size_t(target)].resize(sizeof sender);
          std::memcpy(out[size_t(target)].data(), &sender, sizeof sender);
          out[size_t(target)].insert(out[size_t(target)].end(), all[k].begin() + 4, all[k].end());
        }
        return out;
      });
  if (receive == nullptr) return got.empty() ? DPL_OK : DPL_ERR_INVALID_ARGUMENT;
  int32_t sender = -1;
  if (got.size() >= sizeof sender) std::memcpy(&sender, got.data(), sizeof sender);
  if (sender != from || got.size() - sizeof sender != BytesOf(*receive).size()) {
    return DPL_ERR_INVALID_ARGUMENT;
  }
  WriteBytes(std::vector<uint8_t>(got.begin() + 4, got.end()), receive);
  return DPL_OK;
}

inline dpl_status Barrier(dpl_backend* b) {
  const Rank& r = RankOf(b);
  r.world->Meet(r.rank, "barrier", {}, [](const auto& all) { return all; });
  return DPL_OK;
}

}  // namespace detail

inline std::unique_ptr<Backend> ThreadWorld::BackendOf(int rank, int32_t device_type) {
  auto table = std::make_shared<plugin_host::BackendInterface>();
  table->destroy = [](dpl_backend* backend) { delete &detail::RankOf(backend); };
  table->allreduce = detail::Allreduce;
  table->broadcast = detail::Broadcast;
  table->allgather = detail::Allgather;
  table->reduce_scatter = detail::ReduceScatter;
  table->barrier = detail::Barrier;
  table->synchronize = [](dpl_backend*, void*) { return DPL_OK; };
  table->last_error = [] { return ""; };
  if (send_receive_) {
    table->capabilities = table->capabilities.With({plugin_host::BackendCapability::kSendReceive});
    table->send_receive = detail::SendReceive;
  }
  auto* instance = reinterpret_cast<dpl_backend*>(new detail::Rank{this, rank});
  return std::make_unique<Backend>(table, instance, PluginLabel{"backend", "threads", ""},
                                   device_type);
}

}  // namespace dpl::training::fakes
