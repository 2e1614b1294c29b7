// The environment of a program's workers (Note [A program's workers]): torchrun's variables for
// the worker's place, --env over inherited values, the launcher's own variables and every
// inherited TORCHELASTIC_* left out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol/program_environment.hpp"

namespace dpl::protocol {
namespace {

ProgramWorkerPlace Place() {
  ProgramWorkerPlace place;
  place.rank = 5;
  place.local_rank = 1;
  place.machine = 2;
  place.num_machines = 3;
  place.processes_per_machine = 2;
  place.master_addr = "10.0.0.1";
  place.master_port = 41234;
  place.restart_count = 1;
  place.max_restarts = 4;
  place.run_id = "dpl-0123456789abcdef";
  place.threads = 3;
  return place;
}

TEST(ProgramEnvironment, IsTorchrunsForThePlaceWithTheGivenVariables) {
  const std::vector<std::string> inherited = {
      "PATH=/usr/bin",      "RANK=9",    "MASTER_PORT=29500", "TORCHELASTIC_ERROR_FILE=/e",
      "OMP_NUM_THREADS=64", "GIVEN=old", "NCCL_DEBUG=INFO"};
  const std::vector<std::string> environment =
      ProgramEnvironment(inherited, {"GIVEN=new value"}, Place());
  EXPECT_EQ(environment, (std::vector<std::string>{"PATH=/usr/bin",
                                                   "NCCL_DEBUG=INFO",
                                                   "GIVEN=new value",
                                                   "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
                                                   "NCCL_ASYNC_ERROR_HANDLING=1",
                                                   "LOCAL_RANK=1",
                                                   "RANK=5",
                                                   "GROUP_RANK=2",
                                                   "ROLE_RANK=5",
                                                   "ROLE_NAME=default",
                                                   "LOCAL_WORLD_SIZE=2",
                                                   "WORLD_SIZE=6",
                                                   "GROUP_WORLD_SIZE=3",
                                                   "ROLE_WORLD_SIZE=6",
                                                   "MASTER_ADDR=10.0.0.1",
                                                   "MASTER_PORT=41234",
                                                   "TORCHELASTIC_RESTART_COUNT=1",
                                                   "TORCHELASTIC_MAX_RESTARTS=4",
                                                   "TORCHELASTIC_RUN_ID=dpl-0123456789abcdef",
                                                   "TORCHELASTIC_USE_AGENT_STORE=False",
                                                   "OMP_NUM_THREADS=3"}));
}

TEST(ProgramEnvironment, KeepsTheUsersNcclErrorHandlingUnderBothNames) {
  const auto environment = ProgramEnvironment({"NCCL_ASYNC_ERROR_HANDLING=0"}, {}, Place());
  EXPECT_STREQ(FindVariable(environment, "NCCL_ASYNC_ERROR_HANDLING"), "0");
  EXPECT_STREQ(FindVariable(environment, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "0");
  const auto given = ProgramEnvironment({"NCCL_ASYNC_ERROR_HANDLING=2"},
                                        {"TORCH_NCCL_ASYNC_ERROR_HANDLING=3"}, Place());
  EXPECT_STREQ(FindVariable(given, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
  EXPECT_STREQ(FindVariable(given, "NCCL_ASYNC_ERROR_HANDLING"), "2");
  const auto new_name_only = ProgramEnvironment({}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING=0"}, Place());
  EXPECT_STREQ(FindVariable(new_name_only, "NCCL_ASYNC_ERROR_HANDLING"), "0");
  EXPECT_STREQ(FindVariable(environment, "WORLD_SIZE"), "6");
  EXPECT_EQ(FindVariable(environment, "WORLD"), nullptr);
  EXPECT_EQ(FindVariable(environment, "DPL_JOB_TOKEN"), nullptr);
}

TEST(ProgramEnvironment, NamesTorchrunsWorkerVariables) {
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                           "TORCHELASTIC_RESTART_COUNT"}) {
    EXPECT_TRUE(IsTorchrunWorkerVariable(name)) << name;
  }
  EXPECT_FALSE(IsTorchrunWorkerVariable("NODE_RANK"));
  EXPECT_FALSE(IsTorchrunWorkerVariable("RANKS"));
}

}  // namespace
}  // namespace dpl::protocol
