#include "rendezvous/regroup.hpp"

#include <cstdlib>
#include <vector>

#include "rendezvous/join.hpp"

namespace dpl::rendezvous {

std::string RegroupKey(const std::string& attempt_prefix, int rank) {
  return attempt_prefix + "regroup/rank-" + std::to_string(rank);
}

std::string PeerFailureKey(const std::string& attempt_prefix) {
  return attempt_prefix + "regroup/peer-failures";
}

std::string RegroupCallKey(const std::string& attempt_prefix) {
  return attempt_prefix + "regroup/called";
}

Status SendRegroupOrder(StoreClient& client, const std::string& attempt_prefix, int rank,
                        const RegroupOrder& order) {
  const std::string text =
      EncodeFields({order.stop ? "stop" : "continue", order.why, std::to_string(order.attempt),
                    std::to_string(order.place), std::to_string(order.machines)});
  return client.Set(RegroupKey(attempt_prefix, rank), ToBytes(text));
}

Result<RegroupOrder> AwaitRegroupOrder(StoreClient& client, const std::string& attempt_prefix,
                                       int rank, std::chrono::milliseconds timeout) {
  DPL_ASSIGN_OR_RETURN(std::vector<uint8_t> value,
                       client.Get(RegroupKey(attempt_prefix, rank), timeout));
  auto fields = DecodeFields(FromBytes(value));
  if (!fields.ok() || fields->size() != 5) {
    return Status::Error("malformed regroup order for rank " + std::to_string(rank) +
                         " in the store");
  }
  RegroupOrder order;
  order.stop = (*fields)[0] == "stop";
  order.why = (*fields)[1];
  order.attempt = std::atoi((*fields)[2].c_str());
  order.place = std::atoi((*fields)[3].c_str());
  order.machines = std::atoi((*fields)[4].c_str());
  return order;
}

}  // namespace dpl::rendezvous
