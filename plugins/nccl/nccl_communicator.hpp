// The Communicator of the nccl backend: one NCCL communicator, non-blocking where the NCCL
// version has it (2.14: ncclCommInitRankConfig with blocking = 0, ncclCommFinalize).
#ifndef DPL_PLUGINS_NCCL_NCCL_COMMUNICATOR_HPP
#define DPL_PLUGINS_NCCL_NCCL_COMMUNICATOR_HPP

#include <nccl.h>

#include <chrono>
#include <string>

#include "collective_engine.hpp"

// NCCL_VERSION_CODE changed its encoding at 2.9 (MAJOR*1000 before, MAJOR*10000 since), so
// versions are compared through major and minor.
#define DPL_NCCL_AT_LEAST(major, minor) \
  (NCCL_MAJOR > (major) || (NCCL_MAJOR == (major) && NCCL_MINOR >= (minor)))

#if DPL_NCCL_AT_LEAST(2, 14)
#define DPL_NCCL_HAS_NONBLOCKING 1
#endif
#if DPL_NCCL_AT_LEAST(2, 10)
#define DPL_NCCL_HAS_AVG 1
#define DPL_NCCL_HAS_BFLOAT16 1
#endif
#if DPL_NCCL_AT_LEAST(2, 13)
#define DPL_NCCL_HAS_LAST_ERROR 1
#endif

namespace dpl::nccl {

// "2.28.9" from an NCCL version code of either encoding.
std::string NcclVersionText(int code);

class NcclCommunicator final : public Communicator {
 public:
  // Starts joining the communicator of `world_size` ranks on the current device; *started gets
  // the call's answer (pending while the peers join). `abort_limit` bounds ncclCommAbort
  // (Note [Bounded abort]).
  NcclCommunicator(const ncclUniqueId& id, int rank, int world_size, int device_id,
                   std::chrono::milliseconds abort_limit, LogFunction log, Progress* started);
  // Aborts a communicator that was neither destroyed nor aborted.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  ncclComm_t handle() const { return comm_; }
  // An NCCL call's result as Progress, with NCCL's last error text when it failed.
  Progress Answer(ncclResult_t result) const;

  Progress State() override;
  void Abort() override;
  Progress Finalize() override;
  void Destroy() override;

 private:
  ncclComm_t comm_ = nullptr;
  int device_id_;
  std::chrono::milliseconds abort_limit_;
  LogFunction log_;
};

}  // namespace dpl::nccl

#endif  // DPL_PLUGINS_NCCL_NCCL_COMMUNICATOR_HPP
