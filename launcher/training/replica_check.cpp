#include "training/replica_check.hpp"

#include <algorithm>
#include <cstring>

#include "observability/tracer.hpp"

namespace dpl::training {
namespace {

constexpr const char* kMismatchText = "the replicas differ at step ";
constexpr size_t kNamedTensors = 2;  // per rank, in the message
constexpr size_t kNamedRanks = 8;

// The xxHash specification's XXH64 primes.
constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ull;

uint64_t RotateLeft(uint64_t x, int bits) {
  return (x << bits) | (x >> (64 - bits));
}
uint64_t Read64(const unsigned char* p) {
  uint64_t value;
  std::memcpy(&value, p, sizeof value);  // little-endian hosts only, as the rest of dpl
  return value;
}
uint32_t Read32(const unsigned char* p) {
  uint32_t value;
  std::memcpy(&value, p, sizeof value);
  return value;
}
uint64_t Round(uint64_t accumulator, uint64_t input) {
  return RotateLeft(accumulator + input * kPrime2, 31) * kPrime1;
}
uint64_t MergeRound(uint64_t accumulator, uint64_t value) {
  return (accumulator ^ Round(0, value)) * kPrime1 + kPrime4;
}

// "rank 1", "ranks 1, 2 and 5", at most kNamedRanks of them.
std::string RankList(const std::vector<std::string>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  const size_t shown = std::min(ranks.size(), kNamedRanks);
  for (size_t i = 0; i < shown; ++i) {
    text += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + ranks[i];
  }
  if (shown < ranks.size()) text += " and " + std::to_string(ranks.size() - shown) + " more";
  return text;
}

// The names of the tensors of `theirs` whose hash is not rank 0's: "bias", "a.weight, b and 3
// more".
std::string DifferingTensors(const std::vector<HostParameter>& parameters,
                             const std::vector<uint64_t>& rank0, const uint64_t* theirs) {
  std::vector<std::string> names;
  for (size_t t = 0; t < parameters.size(); ++t) {
    if (theirs[t] != rank0[t]) names.push_back(parameters[t].name);
  }
  std::string text;
  for (size_t i = 0; i < names.size() && i < kNamedTensors; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > kNamedTensors) {
    text += " and " + std::to_string(names.size() - kNamedTensors) + " more";
  }
  return text;
}

}  // namespace

uint64_t Xxh64(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + bytes;
  uint64_t hash;
  if (bytes >= 32) {
    uint64_t v1 = seed + kPrime1 + kPrime2, v2 = seed + kPrime2, v3 = seed, v4 = seed - kPrime1;
    for (; p + 32 <= end; p += 32) {
      v1 = Round(v1, Read64(p));
      v2 = Round(v2, Read64(p + 8));
      v3 = Round(v3, Read64(p + 16));
      v4 = Round(v4, Read64(p + 24));
    }
    hash = RotateLeft(v1, 1) + RotateLeft(v2, 7) + RotateLeft(v3, 12) + RotateLeft(v4, 18);
    for (uint64_t v : {v1, v2, v3, v4}) hash = MergeRound(hash, v);
  } else {
    hash = seed + kPrime5;
  }
  hash += bytes;
  for (; p + 8 <= end; p += 8)
    hash = RotateLeft(hash ^ Round(0, Read64(p)), 27) * kPrime1 + kPrime4;
  if (p + 4 <= end) {
    hash = RotateLeft(hash ^ (uint64_t(Read32(p)) * kPrime1), 23) * kPrime2 + kPrime3;
    p += 4;
  }
  for (; p < end; ++p) hash = RotateLeft(hash ^ (*p * kPrime5), 11) * kPrime1;
  hash ^= hash >> 33;
  hash *= kPrime2;
  hash ^= hash >> 29;
  hash *= kPrime3;
  return hash ^ (hash >> 32);
}

std::vector<uint64_t> TensorHashes(const std::vector<HostParameter>& parameters) {
  std::vector<uint64_t> hashes;
  hashes.reserve(parameters.size());
  for (size_t t = 0; t < parameters.size(); ++t) {
    hashes.push_back(Xxh64(parameters[t].value, parameters[t].elements * sizeof(float), t));
  }
  return hashes;
}

uint64_t CombinedHash(const std::vector<uint64_t>& tensor_hashes) {
  return Xxh64(tensor_hashes.data(), tensor_hashes.size() * sizeof(uint64_t), 0);
}

ReplicaCheck::ReplicaCheck(int64_t every, int world_size, GatherWords gather)
    : every_(every), world_size_(world_size), gather_(std::move(gather)) {}

Status ReplicaCheck::AfterStep(int64_t global_step, const std::vector<HostParameter>& parameters) {
  if (!DueAfter(global_step)) return Status::Ok();
  const observability::TraceScope span("check", "replica check");
  const std::vector<uint64_t> tensors = TensorHashes(parameters);
  const std::string name = "replica-check-" + std::to_string(global_step);
  Result<std::vector<uint64_t>> hashes = gather_({CombinedHash(tensors)}, name);
  if (!hashes.ok()) return hashes.status().WithContext("--check-replicas");
  bool agree = true;
  for (uint64_t hash : *hashes) agree = agree && hash == hashes->front();
  if (agree) {
    last_agreed_ = global_step;
    return Status::Ok();
  }
  // Every rank saw the difference: all gather the tensors' hashes to name what differs.
  Result<std::vector<uint64_t>> all = gather_(tensors, name + "-tensors");
  if (!all.ok()) return all.status().WithContext("--check-replicas");
  const std::vector<uint64_t> rank0(all->begin(), all->begin() + long(tensors.size()));
  std::vector<std::string> differing(static_cast<size_t>(world_size_));
  for (size_t r = 1; r < differing.size(); ++r) {
    differing[r] = DifferingTensors(parameters, rank0, all->data() + r * tensors.size());
  }
  return ReplicaMismatch(global_step, every_, *hashes, differing, last_agreed_);
}

Status ReplicaMismatch(int64_t step, int64_t every, const std::vector<uint64_t>& hashes,
                       const std::vector<std::string>& differing_tensors, int64_t last_agreed) {
  std::vector<std::string> agree, differ;
  bool differ_alike = true;  // the differing ranks all have one hash
  const uint64_t* first_differing = nullptr;
  for (size_t r = 1; r < hashes.size(); ++r) {
    if (hashes[r] == hashes[0]) {
      agree.push_back(std::to_string(r));
      continue;
    }
    if (first_differing == nullptr) first_differing = &hashes[r];
    differ_alike = differ_alike && hashes[r] == *first_differing;
    const bool named = r < differing_tensors.size() && !differing_tensors[r].empty();
    differ.push_back(std::to_string(r) + (named ? " (" + differing_tensors[r] + ")" : ""));
  }
  const bool many = differ.size() > 1;
  std::string text = std::string(kMismatchText) + std::to_string(step) + " (--check-replicas " +
                     std::to_string(every) + "): " + RankList(differ) +
                     (many ? " differ" : " differs") + " from rank 0" +
                     (many && differ_alike ? " (and agree with each other)" : "");
  text += agree.empty()
              ? "; no other rank agrees with rank 0"
              : "; " + RankList(agree) + (agree.size() > 1 ? " agree" : " agrees") + " with rank 0";
  text += last_agreed >= 0 ? "; all agreed at step " + std::to_string(last_agreed)
                           : "; no check had passed before in this run";
  return Status::Error(
      text +
      ". Every rank applies the same update to the same averaged gradients, so the replicas "
      "must be bit-identical: look for a model plugin that changes its parameters outside the "
      "optimizer step or differently on some rank, a backend that gives the ranks different "
      "sums, or faulty memory. A restart would not cure it, so the job is not restarted");
}

bool IsReplicaMismatch(const Status& status) {
  return !status.ok() && status.message().find(kMismatchText) != std::string::npos;
}

}  // namespace dpl::training
