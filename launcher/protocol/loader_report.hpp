// What the machine's worker loader tells its launcher on the report pipe (the loader's stdout,
// read until it closes): the pids of the workers it forked, in local-rank order, or that it
// refused the job before starting any, and why (Note [Refused before the workers start] in
// worker/model_probe.cpp). And the outcome of that model check, which a throw-away child of the
// loader writes on a pipe of its own.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::protocol {

// "123 124 \n": the workers' pids, in local-rank order. A loader of one worker names itself.
std::string EncodeWorkerPids(const std::vector<pid_t>& pids);
// "refused\n" and the reason: no worker was started.
std::string EncodeJobRefusal(const std::string& reason);

struct LoaderReport {
  bool refused = false;
  std::string reason;       // when refused: why, as the loader said it
  std::vector<pid_t> pids;  // otherwise the pids named (fewer than expected: the loader failed)
};
LoaderReport DecodeLoaderReport(const std::string& text);

// The model check's outcome: the dpl_status code of the model's create (0 when it took the data),
// a newline, then the error message.
std::string EncodeModelCheck(const Status& outcome);
// The outcome written by EncodeModelCheck; nullopt when `text` holds none (the child died first).
std::optional<Status> DecodeModelCheck(const std::string& text);

}  // namespace dpl::protocol
