// gloo's rendezvous through the host: a gloo::rendezvous::Store on the host's dpl_store_v1, and
// gloo's full-mesh connection with a refusal on a loopback address explained (Note [Loopback
// refusals]).
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dpl/store.h"

namespace dpl::gloo_backend {

// gloo::rendezvous::Store on top of the host's dpl_store_v1, every key under `prefix`. gloo's
// get() must block until the key exists, so every get waits up to the job timeout.
class HostStore : public gloo::rendezvous::Store {
 public:
  HostStore(const dpl_store_v1* store, std::chrono::milliseconds timeout, std::string prefix)
      : store_(store), timeout_(timeout), prefix_(std::move(prefix)) {}

  // gloo's interface.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::string Prefixed(const std::string& key) const { return prefix_ + key; }
  void Check(dpl_status status, const std::string& key);

  const dpl_store_v1* store_;
  std::chrono::milliseconds timeout_;
  std::string prefix_;
};

// gloo's connectFullMesh; a refusal on a loopback address (Note [Loopback refusals]) becomes a
// message that says which option to pass.
void ConnectFullMesh(gloo::rendezvous::Context& context, gloo::rendezvous::Store& store,
                     std::shared_ptr<gloo::transport::Device>& device);

}  // namespace dpl::gloo_backend
