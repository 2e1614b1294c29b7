// The launcher's runs through the machines' shared memory (--local-reduce shm, the default on the
// CPU) and with the sharded optimizer (--shard-optimizer): replicas bit-identical at 2 and 3
// workers and on 2 machines of 2 workers; the sharded optimizer bit-identical to the unsharded
// one for every optimizer; its checkpoints resumed unsharded and at another world size; a worker
// killed mid-run ends the job at once, named.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "launcher_runs.hpp"
#include "supervision/launcher_processes.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

class LocalReduceJobsTest : public LauncherRunTest {
 protected:
  void SetUp() override { WriteData(480); }

  // The MLP (or `model`) on the test's data, one thread a worker, parameters dumped into folder
  // `name`.
  std::string Job(int processes, const std::string& name, const std::string& extra,
                  const std::string& model = "--model mlp") {
    return Data() + model + " --backend gloo --no-eval --batch-size 48 --num-processes " +
           std::to_string(processes) + " --dump-parameters " + Folder(name) + " " + extra;
  }
  std::vector<float> Params(const std::string& name, int rank) const {
    return ReadFloats(dir_ + "/" + name + "/rank-" + std::to_string(rank) + ".bin");
  }
  void ExpectRun(const std::string& arguments) {
    const RunResult r = RunLauncher(arguments);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // Two machines of two workers on loopback, parameters dumped into folder `name`; machine 0's
  // output, or "" after a failure (reported).
  std::string RunTwoMachines(const std::string& name, const std::string& extra) {
    const std::string port = std::to_string(FreePort());
    auto machine = [&](int id) {
      return Split(std::string("--plugin-dir ") + DPL_TEST_PLUGIN_DIR +
                   " --no-progress --threads-per-worker 1 --num-machines 2 --machine-id " +
                   std::to_string(id) + " --master-addr 127.0.0.1 --master-port " + port + " " +
                   Job(2, name, "--max-steps 6 " + extra));
    };
    LauncherProcess zero(machine(0), dir_ + "/machine0.log");
    LauncherProcess one(machine(1), dir_ + "/machine1.log");
    const auto status0 = zero.Wait(120s), status1 = one.Wait(120s);
    EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << zero.Output();
    EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << one.Output();
    return ExitedWith(status0, 0) && ExitedWith(status1, 0) ? zero.Output() : "";
  }
};

TEST_F(LocalReduceJobsTest, TwoAndThreeWorkersStayBitIdentical) {
  for (const int processes : {2, 3}) {
    const std::string name = "shm" + std::to_string(processes);
    const RunResult r = RunLauncher(Job(processes, name, "--max-steps 6 --check-replicas 3"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(Contains(r.output, "summed in the shared memory of each machine's " +
                                       std::to_string(processes) + " workers"))
        << r.output;
    // Note [Gradients in shared memory]: an SDK model keeps its gradients there.
    EXPECT_TRUE(Contains(r.output, "the models keep their gradients there")) << r.output;
    // Note [Sharding by default]: one machine summing in shared memory shards unless told not to,
    // and its workers then compute with one copy of the parameters.
    EXPECT_TRUE(Contains(r.output, "--check-replicas compares the machines' copies")) << r.output;
    EXPECT_TRUE(Contains(r.output,
                         "keeps the optimizer state of its part of the parameters "
                         "(--shard-optimizer auto"))
        << r.output;
    const std::vector<float> rank0 = Params(name, 0);
    ASSERT_GT(rank0.size(), 1000u);
    for (int rank = 1; rank < processes; ++rank) {
      EXPECT_TRUE(Params(name, rank) == rank0) << processes << " workers: rank " << rank;
    }
  }
  // Two terms add alike in any order: at 2 workers the backend's sums are the same bits, and the
  // sharded optimizer's updates those of the whole one. Through the backend auto does not shard.
  const RunResult backend = RunLauncher(Job(2, "backend2", "--max-steps 6 --local-reduce backend"));
  ASSERT_EQ(backend.exit_code, 0) << backend.output;
  EXPECT_FALSE(Contains(backend.output, "updates its part")) << backend.output;
  EXPECT_TRUE(Params("backend2", 0) == Params("shm2", 0));
}

// Workers started fresh from the executable (a plugin started a thread, so the loader does not
// fork copies of itself) find the machine's shared memory all the same.
TEST_F(LocalReduceJobsTest, WorkersStartedFreshShareTheMemoryToo) {
  const RunResult r = RunLauncher(
      Job(2, "fresh", "--max-steps 3 --plugin-dir " + std::string(DPL_TEST_THREAD_AT_LOAD_DIR)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "each worker loads the plugins itself")) << r.output;
  EXPECT_TRUE(Contains(r.output, "summed in the shared memory of each machine's 2 workers"))
      << r.output;
  EXPECT_TRUE(Params("fresh", 1) == Params("fresh", 0));
}

// Note [Shared parameters]: a model without share_parameters (the test model "scaled", a v4 table
// of the first size) keeps its own copy; the updated parts are gathered into it, same bits.
TEST_F(LocalReduceJobsTest, AModelWithoutTheSharingEntriesGetsItsGradientsAndPartsCopied) {
  const std::string scaled = "--plugin-dir " DPL_TEST_SCALED_MODEL_DIR " --model scaled";
  const std::string flags = "--max-steps 5 --optimizer adam --lr 0.01 --bucket-cap-mb 0.01";
  ExpectRun(Job(2, "scaled_whole", flags + " --shard-optimizer off", scaled));
  const RunResult sharded =
      RunLauncher(Job(2, "scaled_sharded", flags + " --shard-optimizer", scaled));
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_TRUE(Contains(sharded.output, "each worker of a machine updates its part"))
      << sharded.output;
  EXPECT_FALSE(Contains(sharded.output, "workers share (one copy a machine)")) << sharded.output;
  EXPECT_FALSE(Contains(sharded.output, "keep their gradients there")) << sharded.output;
  const std::vector<float> whole = Params("scaled_whole", 0);
  ASSERT_GT(whole.size(), 100u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(Params("scaled_sharded", rank) == whole) << "rank " << rank;
  }
}

struct ShardCase {
  const char* optimizer;
  int processes;
};
void PrintTo(const ShardCase& c, std::ostream* out) {
  *out << c.optimizer << "_x" << c.processes;
}

class ShardedOptimizerTest : public LocalReduceJobsTest,
                             public ::testing::WithParamInterface<ShardCase> {};

// Note [Sharded optimizer]: the same bits as the unsharded run, with weight decay, clipping (the
// norm's pieces shared) and a schedule.
TEST_P(ShardedOptimizerTest, IsBitIdenticalToTheUnshardedRun) {
  const ShardCase c = GetParam();
  const std::string flags = std::string("--max-steps 5 --optimizer ") + c.optimizer +
                            " --lr 0.05 --momentum 0.9 --weight-decay 0.01 --clip-grad-norm 0.5 " +
                            "--lr-schedule cosine --bucket-cap-mb 0.05";
  const RunResult whole = RunLauncher(Job(c.processes, "whole", flags + " --shard-optimizer off"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_FALSE(Contains(whole.output, "each worker of a machine updates its part")) << whole.output;
  const RunResult sharded = RunLauncher(Job(c.processes, "sharded", flags + " --shard-optimizer"));
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_TRUE(Contains(sharded.output, "each worker of a machine updates its part"))
      << sharded.output;
  // Note [Shared parameters]: the machine's one copy, updated in place part by part.
  EXPECT_TRUE(Contains(sharded.output, "which the machine's workers share (one copy a machine)"))
      << sharded.output;
  for (int rank = 0; rank < c.processes; ++rank) {
    EXPECT_TRUE(Params("sharded", rank) == Params("whole", 0)) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ShardedOptimizerTest,
                         ::testing::Values(ShardCase{"sgd", 2}, ShardCase{"sgd", 3},
                                           ShardCase{"adadelta", 2}, ShardCase{"adadelta", 3},
                                           ShardCase{"adam", 2}, ShardCase{"adam", 3},
                                           ShardCase{"adamw", 2}, ShardCase{"adamw", 3}));

// Through the backend (reduce_scatter and allgather in place): the same bits at 2 ranks, where the
// sums of two terms cannot differ.
TEST_F(LocalReduceJobsTest, ShardedThroughTheBackendIsBitIdenticalAtTwoRanks) {
  const std::string flags = "--max-steps 4 --optimizer adam --lr 0.01 --local-reduce backend ";
  ExpectRun(Job(2, "whole", flags));
  const RunResult sharded = RunLauncher(Job(2, "sharded", flags + "--shard-optimizer"));
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_TRUE(Contains(sharded.output, "reduce-scattered through backend 'gloo'"))
      << sharded.output;
  EXPECT_TRUE(Params("sharded", 0) == Params("whole", 0));
  EXPECT_TRUE(Params("sharded", 1) == Params("whole", 0));
}

// Checkpoints hold the optimizer state whole: a sharded run resumes unsharded and at another
// world size, an unsharded one resumes sharded, and every path ends where the straight run does.
TEST_F(LocalReduceJobsTest, ShardedCheckpointsResumeUnshardedAndAtAnotherWorldSize) {
  const std::string flags = "--optimizer adam --lr 0.01 ";
  auto job = [&](int processes, const std::string& name, const std::string& extra) {
    return Job(processes, name, flags + extra);
  };
  ExpectRun(job(2, "straight", "--max-steps 8 --shard-optimizer off"));
  const std::string first = Folder("first"), second = Folder("second");
  ExpectRun(job(2, "half", "--max-steps 4 --shard-optimizer on --checkpoint-dir " + first));
  ExpectRun(
      job(2, "resumed", "--max-steps 8 --shard-optimizer off --resume --checkpoint-dir " + first));
  EXPECT_TRUE(Params("resumed", 0) == Params("straight", 0)) << "sharded, resumed unsharded";
  // At 3 ranks the sums differ from 2 ranks' in their last bits: the run must resume and train.
  ExpectRun(job(3, "half3", "--max-steps 4 --shard-optimizer off --checkpoint-dir " + second));
  const RunResult three = RunLauncher(
      job(2, "resumed3", "--max-steps 8 --shard-optimizer --resume --checkpoint-dir " + second));
  ASSERT_EQ(three.exit_code, 0) << three.output;
  EXPECT_TRUE(Contains(three.output, "resumed from ")) << three.output;
  EXPECT_TRUE(Contains(three.output, "(step 4)")) << three.output;
}

// Two machines of two workers on loopback: each machine sums in its shared memory, each worker's
// part crosses machines through its own backend instance; all four replicas end alike.
TEST_F(LocalReduceJobsTest, TwoMachinesOfTwoWorkersStayBitIdentical) {
  for (const bool sharded : {false, true}) {
    const std::string name = sharded ? "sharded" : "machines";
    const std::string output = RunTwoMachines(name, sharded ? "--shard-optimizer" : "");
    ASSERT_FALSE(output.empty());
    EXPECT_TRUE(Contains(output, "their parts then across the 2 machines")) << output;
    // Each machine's one copy of the values, and the gradients kept in its shared memory.
    EXPECT_TRUE(Contains(output, "the models keep their gradients there")) << output;
    EXPECT_EQ(Contains(output, "share (one copy a machine)"), sharded) << output;
    const std::vector<float> rank0 = Params(name, 0);
    ASSERT_GT(rank0.size(), 1000u);
    for (int rank = 1; rank < 4; ++rank) {
      EXPECT_TRUE(Params(name, rank) == rank0) << "rank " << rank;
    }
  }
  EXPECT_TRUE(Params("sharded", 0) == Params("machines", 0)) << "sharded across 2 machines";
}

// Note [16-bit gradients between machines only]: with a bf16 wire each machine still sums its
// workers' float32 gradients in place; only the parts crossing machines are bf16. All four
// replicas end alike, and not as the float32 run's.
TEST_F(LocalReduceJobsTest, TwoMachinesSendBf16PartsAndStayBitIdentical) {
  for (const std::string wire : {"bf16", "none"}) {
    const std::string output = RunTwoMachines(wire, "--grad-compression " + wire);
    ASSERT_FALSE(output.empty());
    EXPECT_TRUE(Contains(output, "the models keep their gradients there")) << output;
    EXPECT_EQ(Contains(output, "their parts then across the 2 machines, sent as bf16"),
              wire == "bf16")
        << output;
  }
  const std::vector<float> rank0 = Params("bf16", 0);
  ASSERT_GT(rank0.size(), 1000u);
  for (int rank = 1; rank < 4; ++rank) {
    EXPECT_TRUE(Params("bf16", rank) == rank0) << "rank " << rank;
  }
  EXPECT_FALSE(Params("none", 0) == rank0) << "the bf16 parts must reach the model";
}

// Note [Waiting on a peer]: a worker killed while the others reduce with it ends the job within
// seconds, the killed worker named as the cause.
TEST_F(LocalReduceJobsTest, AWorkerKilledMidReductionEndsTheJobNamingIt) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // the job's workers become this test's to find
  LauncherProcess job(Split(std::string("--plugin-dir ") + DPL_TEST_PLUGIN_DIR +
                            " --no-progress --threads-per-worker 1 --master-port 0 " +
                            Job(3, "killed", "--epochs 1000 --log-interval 1")),
                      dir_ + "/killed.log");
  ASSERT_TRUE(WaitForWorkers(job.pid(), 3, 20s)) << job.Output();
  const auto training = std::chrono::steady_clock::now() + 30s;
  const std::string third = "epoch: 0 [3/10] training loss";  // mid-run, every step reducing
  while (!Contains(job.Output(), third) && std::chrono::steady_clock::now() < training) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(Contains(job.Output(), third)) << job.Output();
  const pid_t victim = WorkerWithRank(job.pid(), 1);
  ASSERT_GT(victim, 0);
  const std::vector<pid_t> workers = WorkersOf(job.pid());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto start = std::chrono::steady_clock::now();
  const auto status = job.Wait(10s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  ASSERT_TRUE(status && !ExitedWith(status, 0)) << Describe(status) << job.Output();
  EXPECT_TRUE(Contains(job.Output(), "rank 1 (machine 0, local rank 1, pid " +
                                         std::to_string(victim) +
                                         ") failed first: killed by signal 9 (SIGKILL)"))
      << job.Output();
  EXPECT_TRUE(WaitUntilGone(workers, 2s)) << "a worker outlived the job";
}

}  // namespace
}  // namespace dpl::test
