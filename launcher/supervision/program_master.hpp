// Where a program's rank 0 serves its torch TCPStore, and the job's run id (Note [A program's
// workers] in protocol/program_environment.hpp).
//
// Note [A program's master port]: torchrun's workers meet at MASTER_ADDR:MASTER_PORT, a TCPStore
// that rank 0 itself serves. Machine 0 of every attempt picks a port that is free on it then (so a
// restart never meets "Address already in use" from a rank of the attempt before, whose socket may
// linger) and publishes it, with its address and the job's run id, in dpl's store under the
// attempt's keys; the attempt's other machines read them there before they start their ranks. The
// run id (TORCHELASTIC_RUN_ID) is made once for the job by the first launcher that asks, and is
// never the job's token.
#pragma once

#include <chrono>
#include <string>

#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::supervision {

struct ProgramMaster {
  std::string addr;  // MASTER_ADDR
  int port = 0;      // MASTER_PORT
  std::string run_id;
};

// A TCP port that nothing listens on here now: bound on every address, then released.
Result<int> PickFreePort();

// Machine 0 of an attempt: picks the port, names this machine as the others reach it
// (`master_addr`, the job's --master-addr, when it is this machine's), and publishes both with the
// job's run id.
Result<ProgramMaster> PublishProgramMaster(rendezvous::StoreClient& client,
                                           const std::string& attempt_prefix,
                                           const std::string& master_addr);

// The attempt's other machines: what machine 0 published, waited for up to `timeout`; a stop
// signal or the attempt's failure ends the wait early with an error.
Result<ProgramMaster> ReadProgramMaster(rendezvous::StoreClient& client,
                                        const std::string& attempt_prefix,
                                        std::chrono::milliseconds timeout);

}  // namespace dpl::supervision
