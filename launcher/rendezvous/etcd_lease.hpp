// The etcd lease that the keys of an etcd store client carry (Note [Leases of the etcd store] in
// etcd_store.cpp), renewed from a thread of its own for as long as the object lives.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.hpp"
#include "rendezvous/etcd_gateway.hpp"

namespace dpl::rendezvous::etcd {

class EtcdLease {
 public:
  // With a `shared_key`, the lease whose id that key holds (the job's: every client of the job
  // renews the same one), created and recorded there by the first client; without, a lease of
  // this client's own. `ttl` in whole seconds (at least 1); reaching etcd before `deadline`.
  static Result<std::unique_ptr<EtcdLease>> Obtain(const std::vector<std::string>& endpoints,
                                                   const std::string& shared_key,
                                                   std::chrono::milliseconds ttl,
                                                   Clock::time_point deadline);
  // Stops renewing. A lease of this client's own is revoked, so its keys vanish at once; the
  // job's expires a TTL after the last client that renews it is gone.
  ~EtcdLease();
  EtcdLease(const EtcdLease&) = delete;
  EtcdLease& operator=(const EtcdLease&) = delete;

  int64_t id() const { return id_; }
  // "" while the lease lives; else why it is gone (its keys are gone with it).
  std::string Lost() const;

 private:
  EtcdLease(std::vector<std::string> endpoints, bool shared, std::chrono::seconds ttl)
      : gateway_(std::move(endpoints)), shared_(shared), ttl_(ttl) {}
  Result<int64_t> Grant(Clock::time_point deadline);
  // The lease's remaining seconds after renewing it; 0 when it no longer exists.
  Result<int64_t> Renew(int64_t id, Clock::time_point deadline);
  Status AdoptOrCreate(const std::string& shared_key, Clock::time_point deadline);
  void RenewLoop();

  EtcdGateway gateway_;  // the thread's once it runs
  const bool shared_;
  const std::chrono::seconds ttl_;
  int64_t id_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::string lost_;       // guarded by mutex_
  std::thread thread_;
};

}  // namespace dpl::rendezvous::etcd
