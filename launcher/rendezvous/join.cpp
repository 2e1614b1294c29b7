#include "rendezvous/join.hpp"

#include <cstring>
#include <thread>

namespace dpl::rendezvous {
namespace {

constexpr const char* kShapeKey = "job/shape";

std::string ShapeText(const JobShape& shape) {
  return std::to_string(shape.num_machines) + "x" + std::to_string(shape.num_processes);
}

}  // namespace

std::vector<uint8_t> ToBytes(const std::string& text) {
  return {text.begin(), text.end()};
}
std::string FromBytes(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

Status ValidateShape(const JobShape& shape) {
  if (shape.num_machines < 1 || shape.num_processes < 1) {
    return Status::Error("--num-machines (" + std::to_string(shape.num_machines) +
                         ") and --num-processes (" + std::to_string(shape.num_processes) +
                         ") must both be at least 1");
  }
  if (shape.machine_id < 0 || shape.machine_id >= shape.num_machines) {
    return Status::Error("--machine-id " + std::to_string(shape.machine_id) +
                         " is out of range: with --num-machines " +
                         std::to_string(shape.num_machines) + " it must be in [0, " +
                         std::to_string(shape.num_machines) + ")");
  }
  return Status::Ok();
}

Status JoinAsLauncher(StoreClient& client, const JobShape& shape,
                      std::chrono::milliseconds timeout) {
  DPL_RETURN_IF_ERROR(ValidateShape(shape));
  if (shape.machine_id == 0) {
    DPL_RETURN_IF_ERROR(client.Set(kShapeKey, ToBytes(ShapeText(shape))));
  } else {
    auto published = client.Get(kShapeKey, timeout);
    if (!published.ok()) {
      return published.status().WithContext("waiting for machine 0 to publish the job's shape");
    }
    int machines = 0, processes = 0;
    if (std::sscanf(FromBytes(*published).c_str(), "%dx%d", &machines, &processes) != 2) {
      return Status::Error("machine 0 published a malformed job shape '" + FromBytes(*published) +
                           "'; run the same dpl version on every machine");
    }
    const std::string here = "this machine (--machine-id " + std::to_string(shape.machine_id) + ")";
    if (machines != shape.num_machines) {
      return Status::Error("--num-machines differs between machines: " + here + " has " +
                           std::to_string(shape.num_machines) + ", machine 0 has " +
                           std::to_string(machines) + "; pass the same value to every launcher");
    }
    if (processes != shape.num_processes) {
      return Status::Error("--num-processes differs between machines: " + here + " has " +
                           std::to_string(shape.num_processes) + ", machine 0 has " +
                           std::to_string(processes) + "; pass the same value to every launcher");
    }
  }
  auto claims = client.Add("job/machine/" + std::to_string(shape.machine_id), 1);
  if (!claims.ok()) return claims.status();
  if (*claims > 1) {
    return Status::Error("--machine-id " + std::to_string(shape.machine_id) +
                         " is used by another launcher of this job as well; give every machine a "
                         "distinct id in [0, " +
                         std::to_string(shape.num_machines) + ")");
  }
  return Status::Ok();
}

std::string AttemptPrefix(int attempt) {
  return "attempt/" + std::to_string(attempt) + "/";
}

Status Barrier(StoreClient& client, const std::string& attempt_prefix, const std::string& name,
               int world_size, std::chrono::milliseconds timeout) {
  const std::string key = attempt_prefix + "barrier/" + name;
  auto arrived = client.Add(key + "/count", 1);
  if (!arrived.ok()) return arrived.status();
  if (*arrived == world_size) DPL_RETURN_IF_ERROR(client.Set(key + "/done", {}));
  Status status = client.Wait({key + "/done"}, timeout);
  if (!status.ok()) {
    auto count = client.Add(key + "/count", 0);
    return status.WithContext("barrier '" + name +
                              "': " + (count.ok() ? std::to_string(*count) : std::string("?")) +
                              " of " + std::to_string(world_size) + " ranks arrived");
  }
  return Status::Ok();
}

Status SumAcrossRanks(StoreClient& client, const std::string& attempt_prefix,
                      const std::string& name, int rank, int world_size,
                      std::vector<double>* values, std::chrono::milliseconds timeout) {
  const std::string key = attempt_prefix + "sum/" + name + "/";
  const size_t bytes = values->size() * sizeof(double);
  std::vector<uint8_t> mine(bytes);
  std::memcpy(mine.data(), values->data(), bytes);
  DPL_RETURN_IF_ERROR(client.Set(key + std::to_string(rank), mine));
  std::vector<double> sums(values->size(), 0.0), theirs(values->size());
  for (int r = 0; r < world_size; ++r) {
    auto value = client.Get(key + std::to_string(r), timeout);
    if (!value.ok()) {
      return value.status().WithContext("summing '" + name + "' over ranks: rank " +
                                        std::to_string(r) + " did not report");
    }
    if (value->size() != bytes) {
      return Status::Error("summing '" + name + "' over ranks: rank " + std::to_string(r) +
                           " reported " + std::to_string(value->size() / sizeof(double)) +
                           " values, this rank " + std::to_string(values->size()));
    }
    std::memcpy(theirs.data(), value->data(), bytes);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += theirs[i];
  }
  *values = std::move(sums);
  return Status::Ok();
}

Status PublishFailure(StoreClient& client, const std::string& attempt_prefix,
                      const std::string& message) {
  auto order = client.Add(attempt_prefix + "failure/count", 1);
  if (!order.ok()) return order.status();
  if (*order == 1)
    DPL_RETURN_IF_ERROR(client.Set(attempt_prefix + "failure/message", ToBytes(message)));
  return Status::Ok();
}

Result<std::optional<std::string>> CheckFailure(StoreClient& client,
                                                const std::string& attempt_prefix) {
  auto count = client.Add(attempt_prefix + "failure/count", 0);
  if (!count.ok()) return count.status();
  if (*count == 0) return std::optional<std::string>();
  // The first publisher sets the message right after its count; wait a little for it.
  auto message = client.Get(attempt_prefix + "failure/message", std::chrono::seconds(2));
  if (!message.ok()) return std::optional<std::string>("another launcher reported a failure");
  return std::optional<std::string>(FromBytes(*message));
}

}  // namespace dpl::rendezvous
