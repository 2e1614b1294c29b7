#include "rendezvous/job_reports.hpp"

#include <algorithm>
#include <cstring>

#include "rendezvous/join.hpp"

namespace dpl::rendezvous {
namespace {

constexpr std::chrono::milliseconds kNoWait{0};

std::string StallKey(const std::string& prefix, int rank) {
  return prefix + "stall/rank/" + std::to_string(rank);
}

std::vector<uint8_t> Int64Bytes(int64_t value) {
  std::vector<uint8_t> bytes(sizeof value);
  std::memcpy(bytes.data(), &value, sizeof value);
  return bytes;
}

Result<int64_t> GetInt64(StoreClient& client, const std::string& key,
                         std::chrono::milliseconds timeout) {
  DPL_ASSIGN_OR_RETURN(auto bytes, client.Get(key, timeout));
  int64_t value = 0;
  if (bytes.size() != sizeof value) {
    return Status::Error("store key '" + key + "' holds " + std::to_string(bytes.size()) +
                         " bytes, not a 64-bit number; run the same dpl version everywhere");
  }
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

int64_t SteadyNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status PostStall(StoreClient& client, const std::string& attempt_prefix, int rank,
                 const std::string& text) {
  DPL_RETURN_IF_ERROR(client.Set(StallKey(attempt_prefix, rank), ToBytes(text)));
  return client.Add(attempt_prefix + "stall/version", 1).status();
}

Result<int64_t> StallBoardVersion(StoreClient& client, const std::string& attempt_prefix) {
  return client.Add(attempt_prefix + "stall/version", 0);
}

Result<std::vector<std::string>> ReadStallBoard(StoreClient& client,
                                                const std::string& attempt_prefix, int world_size) {
  std::vector<std::string> board(static_cast<size_t>(std::max(world_size, 0)));
  for (int rank = 0; rank < world_size; ++rank) {
    auto post = client.Get(StallKey(attempt_prefix, rank), kNoWait);
    if (post.ok()) {
      board[static_cast<size_t>(rank)] = FromBytes(*post);
    } else if (!post.status().IsTimeout()) {
      return post.status().WithContext("reading the stall reports");
    }
  }
  return board;
}

Status PutChunked(StoreClient& client, const std::string& key, const std::string& value,
                  size_t chunk_bytes) {
  chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  int64_t chunks = 0;
  for (size_t offset = 0; offset < value.size(); offset += chunk_bytes, ++chunks) {
    const size_t size = std::min(chunk_bytes, value.size() - offset);
    const auto* data = reinterpret_cast<const uint8_t*>(value.data() + offset);
    DPL_RETURN_IF_ERROR(
        client.Set(key + "/" + std::to_string(chunks), std::vector<uint8_t>(data, data + size)));
  }
  // Last: a reader that sees the count finds every chunk.
  return client.Set(key + "/chunks", Int64Bytes(chunks));
}

Result<std::string> TakeChunked(StoreClient& client, const std::string& key,
                                std::chrono::milliseconds timeout) {
  DPL_ASSIGN_OR_RETURN(auto chunks, GetInt64(client, key + "/chunks", timeout));
  std::string value;
  for (int64_t i = 0; i < chunks; ++i) {
    const std::string chunk_key = key + "/" + std::to_string(i);
    auto chunk = client.Get(chunk_key, kNoWait);
    if (!chunk.ok()) return chunk.status().WithContext("reading chunk " + std::to_string(i));
    value.append(chunk->begin(), chunk->end());
    DPL_RETURN_IF_ERROR(client.Delete(chunk_key));
  }
  DPL_RETURN_IF_ERROR(client.Delete(key + "/chunks"));
  return value;
}

Result<ClockAlignment> AlignClocks(StoreClient& client, const std::string& attempt_prefix,
                                   int world_size, int machine, int local_rank,
                                   std::chrono::milliseconds timeout) {
  const std::string prefix = attempt_prefix + "clock/";
  std::vector<int64_t> released(kClockRounds);
  for (int round = 0; round < kClockRounds; ++round) {
    DPL_RETURN_IF_ERROR(
        Barrier(client, attempt_prefix, "clock-" + std::to_string(round), world_size, timeout));
    released[size_t(round)] = SteadyNanoseconds();
    if (local_rank == 0) {
      DPL_RETURN_IF_ERROR(client.Set(prefix + std::to_string(round) + "/" + std::to_string(machine),
                                     Int64Bytes(released[size_t(round)])));
    }
  }
  ClockAlignment alignment;
  const std::string offset_key = prefix + "offset/" + std::to_string(machine);
  if (machine == 0) {
    alignment.offset_ns = 0;  // machine 0's clock is the reference
  } else if (local_rank == 0) {
    std::vector<int64_t> differences;
    for (int round = 0; round < kClockRounds; ++round) {
      auto reference = GetInt64(client, prefix + std::to_string(round) + "/0", timeout);
      if (!reference.ok()) return reference.status().WithContext("aligning clocks");
      differences.push_back(released[size_t(round)] - *reference);
    }
    std::nth_element(differences.begin(), differences.begin() + kClockRounds / 2,
                     differences.end());
    alignment.offset_ns = differences[kClockRounds / 2];
    DPL_RETURN_IF_ERROR(client.Set(offset_key, Int64Bytes(alignment.offset_ns)));
  } else {
    auto offset = GetInt64(client, offset_key, timeout);
    if (!offset.ok()) return offset.status().WithContext("aligning clocks");
    alignment.offset_ns = *offset;
  }
  auto origin = GetInt64(client, prefix + "0/0", timeout);
  if (!origin.ok()) return origin.status().WithContext("aligning clocks");
  alignment.origin_ns = *origin;
  return alignment;
}

}  // namespace dpl::rendezvous
