#include "worker/selftest.hpp"

#include <cstdlib>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/join.hpp"
#include "training/collectives/backend_collectives.hpp"

namespace dpl::worker {
namespace {

// Every rank's rank as it reached the store; "" and an error when one is missing or twice.
Result<std::string> RanksThroughTheStore(rendezvous::StoreClient& store, const std::string& prefix,
                                         int rank, int world_size,
                                         std::chrono::milliseconds timeout) {
  const std::string rank_key = prefix + "selftest/rank/";
  DPL_RETURN_IF_ERROR(
      store.Set(rank_key + std::to_string(rank), rendezvous::ToBytes(std::to_string(rank))));
  DPL_RETURN_IF_ERROR(rendezvous::Barrier(store, prefix, "selftest", world_size, timeout));
  std::string ranks;
  std::vector<bool> seen(static_cast<size_t>(world_size), false);
  for (int r = 0; r < world_size; ++r) {
    DPL_ASSIGN_OR_RETURN(auto value, store.Get(rank_key + std::to_string(r), timeout));
    const int gathered = std::atoi(rendezvous::FromBytes(value).c_str());
    if (gathered < 0 || gathered >= world_size || seen[static_cast<size_t>(gathered)]) {
      return Status::Error("selftest: rank " + std::to_string(gathered) +
                           " is out of range or appears twice");
    }
    seen[static_cast<size_t>(gathered)] = true;
    ranks += (r == 0 ? "" : ",") + std::to_string(gathered);
  }
  // Nobody leaves before everyone has read, so no rank loses the keys it still needs.
  DPL_RETURN_IF_ERROR(rendezvous::Barrier(store, prefix, "selftest-done", world_size, timeout));
  return ranks;
}

// A barrier, then every rank's rank gathered through the backend: rank r's slot must hold r.
Status RanksThroughTheBackend(training::Backend& backend, int rank, int world_size) {
  training::CommunicationThread thread;
  training::BackendCollectives collectives(backend, thread, rank, world_size);
  DPL_RETURN_IF_ERROR(collectives.Barrier("selftest"));
  DPL_ASSIGN_OR_RETURN(const std::vector<uint64_t> all,
                       collectives.GatherWords({uint64_t(rank)}, "selftest"));
  for (int r = 0; r < world_size; ++r) {
    if (all[static_cast<size_t>(r)] != uint64_t(r)) {
      return Status::Error("selftest: the allgather through backend '" + backend.name() + "' put " +
                           std::to_string(all[static_cast<size_t>(r)]) + " where rank " +
                           std::to_string(r) + " belongs");
    }
  }
  return collectives.Barrier("selftest-done");
}

}  // namespace

Status RunSelftest(const LinkTestSetup& setup, training::Backend& backend) {
  const training::WorkerIdentity& identity = setup.identity;
  Result<std::string> ranks = RanksThroughTheStore(*setup.store, setup.prefix, identity.rank,
                                                   identity.world_size, setup.timeout);
  if (!ranks.ok()) return ranks.status().WithContext("selftest");
  DPL_RETURN_IF_ERROR(
      RanksThroughTheBackend(backend, identity.rank, identity.world_size).WithContext("selftest"));
  if (identity.rank == 0) {
    log::Info("selftest ok: world size " + std::to_string(identity.world_size) + ", ranks " +
              *ranks + "; barrier and allgather through backend " + backend.name());
  }
  Result<LinkReport> links = RunLinkTest(setup);
  if (!links.ok()) return links.status().WithContext("selftest");
  if (identity.rank != 0) return Status::Ok();
  for (const std::string& line : LinkTable(*links, LinkRows::kAll)) log::Info(line);
  for (const std::string& warning : SlowLinkWarnings(*links)) log::Warning(warning);
  return Status::Ok();
}

Status RunPreflight(const LinkTestSetup& setup) {
  Result<LinkReport> links = RunLinkTest(setup);
  if (!links.ok()) return links.status().WithContext("--preflight");
  if (setup.identity.rank != 0) return Status::Ok();
  for (const std::string& line : LinkTable(*links, LinkRows::kNone)) log::Info(line);
  for (const std::string& warning : SlowLinkWarnings(*links)) log::Warning(warning);
  return Status::Ok();
}

}  // namespace dpl::worker
