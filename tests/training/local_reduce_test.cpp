// The reduction through a machine's shared memory (training/collectives/local_reduce.hpp), with its
// workers as forked processes around one memory file: every worker ends with the same bits, the
// sums within 1e-6 of a sequential float64 reference (relative to the terms' magnitude); a worker
// that dies is named at once; the sharded exchanges move every part.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "training/collectives/local_reduce.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

// Parameter sizes: small, odd, one past a piece, a large one.
const std::vector<size_t> kSizes = {7, 4097, 1, 30000, 123457};

// What a worker process reports.
struct Report {
  int32_t code = -1;
  double seconds = 0;
  uint64_t hash = 0;
  double worst_relative_error = 0;
  uint64_t nonzero_left = 0;  // gradient elements the reduction left non-zero
  uint64_t changed = 0;       // with KeepGradients: gradient elements the reduction changed
  char message[400] = {};
};

// A value in [-5, 5) of 24 random bits, different per worker, parameter and element.
float Gradient(int worker, uint32_t parameter, size_t i) {
  uint64_t x = uint64_t(worker) * 0x9E3779B97F4A7C15ull ^ uint64_t(parameter) << 40 ^ i;
  x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (float(x >> 40) / float(1 << 24) * 2.0f - 1.0f) * float(1 + i % 5);
}

void Hash(uint64_t* hash, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) *hash = (*hash ^ p[i]) * 1099511628211ull;
}

// Runs `body` as worker k of `workers` processes that share one memory file; returns the reports.
std::vector<Report> RunWorkers(int workers,
                               const std::function<void(const LocalGroup&, Report*)>& body) {
  const int fd = ::memfd_create("dpl-local-reduce-test", 0);
  EXPECT_GE(fd, 0);
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int k = 0; k < workers; ++k) {
    int ends[2];
    EXPECT_EQ(::pipe(ends), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ends[0]);
      LocalGroup group;
      group.memory_fd = fd;
      group.local_rank = k;
      group.local_world_size = workers;
      group.timeout = std::chrono::milliseconds(20000);
      Report report;
      const auto start = std::chrono::steady_clock::now();
      body(group, &report);
      report.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const bool written = ::write(ends[1], &report, sizeof report) == ssize_t(sizeof report);
      ::_exit(written ? 0 : 3);
    }
    ::close(ends[1]);
    pids.push_back(pid);
    pipes.push_back(ends[0]);
  }
  std::vector<Report> reports(static_cast<size_t>(workers));
  for (int k = 0; k < workers; ++k) {
    if (::read(pipes[size_t(k)], &reports[size_t(k)], sizeof(Report)) != ssize_t(sizeof(Report))) {
      std::snprintf(reports[size_t(k)].message, sizeof reports[0].message, "no report");
    }
    ::close(pipes[size_t(k)]);
    ::waitpid(pids[size_t(k)], nullptr, 0);
  }
  ::close(fd);
  return reports;
}

// A worker's gradients, back to back in parameter order: in memory of their own, or in `area`
// (the worker's area of the shared memory, Note [Gradients in shared memory]).
struct Gradients {
  std::vector<float> own;
  std::vector<int64_t> shapes;
  std::vector<DLTensor> tensors;
  explicit Gradients(int worker, float* area = nullptr) : shapes(kSizes.begin(), kSizes.end()) {
    size_t total = 0;
    for (size_t elements : kSizes) total += elements;
    if (area == nullptr) {
      own.resize(total);
      area = own.data();
    }
    for (uint32_t p = 0; p < kSizes.size(); ++p) {
      tensors.push_back(HostTensor(area, DLDataType{kDLFloat, 32, 1}, 1, &shapes[p]));
      area += kSizes[p];
    }
    Fill(worker);
  }
  Gradients(const Gradients&) = delete;  // the tensors point into own
  float* of(uint32_t p) const { return static_cast<float*>(tensors[p].data); }
  void Fill(int worker) {
    for (uint32_t p = 0; p < kSizes.size(); ++p) {
      for (size_t i = 0; i < kSizes[p]; ++i) of(p)[i] = Gradient(worker, p, i);
    }
  }
};

// How a worker's gradients reach the reduction.
enum class Input { kCopiedAndZeroed, kCopiedAndKept, kInSharedMemory };

void Fail(Report* report, const Status& status) {
  report->code = status.code();
  std::snprintf(report->message, sizeof report->message, "%s", status.message().c_str());
}

// One step of the unsharded reduction; checks the sums against float64 and hashes them.
// kCopiedAndKept: the model replaces its gradients itself (LocalReducer::KeepGradients).
void ReduceOnce(const LocalGroup& group, WireFormat wire, Report* report,
                Input input = Input::kCopiedAndZeroed) {
  const std::vector<Bucket> buckets = AssignBuckets(kSizes, 100000);
  auto reducer = LocalReducer::Create(group, ShardLayout(kSizes, buckets, group.local_world_size),
                                      wire, false, 0);
  if (!reducer.ok()) return Fail(report, reducer.status());
  if (input == Input::kCopiedAndKept) (*reducer)->KeepGradients();
  if (input == Input::kInSharedMemory && !(*reducer)->UseModelGradients()) {
    return Fail(report, Status::Error("UseModelGradients refused"));
  }
  Gradients mine(group.local_rank, input == Input::kInSharedMemory
                                       ? (*reducer)->ModelGradients(group.local_rank)
                                       : nullptr);
  const float scale = 1.0f / float(group.local_world_size);
  for (int step = 0; step < 2; ++step) {        // the second reuses every flag and area
    if (step > 0) mine.Fill(group.local_rank);  // the next backward's
    (*reducer)->BeginStep();
    for (size_t b = 0; b < buckets.size(); ++b) {
      const Status reduced = (*reducer)->ReduceBucket(b, mine.tensors, scale);
      if (!reduced.ok()) return Fail(report, reduced);
    }
    const Status summed = (*reducer)->AwaitSums();
    if (!summed.ok()) return Fail(report, summed);
    // Copied in and zeroed behind (step 1 of Note [Reduction through shared memory]), or left.
    for (uint32_t p = 0; p < kSizes.size(); ++p) {
      for (size_t i = 0; i < kSizes[p]; ++i) {
        const float g = mine.of(p)[i];
        report->nonzero_left += g != 0.0f ? 1 : 0;
        report->changed += g != Gradient(group.local_rank, p, i) ? 1 : 0;
      }
    }
  }
  const ShardLayout& layout = (*reducer)->layout();
  for (size_t b = 0; b < layout.buckets(); ++b) {
    const BucketLayout& bucket = layout.bucket(b);
    const float* sums = (*reducer)->sums(b);
    Hash(&report->hash, sums, bucket.elements * sizeof(float));
    for (size_t k = 0; k < bucket.parameters.size(); ++k) {
      const uint32_t p = bucket.parameters[k];
      for (size_t i = 0; i < kSizes[p]; ++i) {
        double reference = 0.0, magnitude = 0.0;  // sequential, in float64
        for (int w = 0; w < group.local_world_size; ++w) {
          reference += double(Gradient(w, p, i));
          magnitude += std::fabs(double(Gradient(w, p, i)));
        }
        reference *= double(scale);
        // Relative to the terms' magnitude: a sum that cancels has no relative precision left.
        const double error =
            std::fabs(double(sums[bucket.starts[k] + i]) - reference) / (magnitude * double(scale));
        report->worst_relative_error = std::max(report->worst_relative_error, error);
      }
    }
  }
  report->code = DPL_OK;
}

class LocalReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(LocalReduceTest, EveryWorkerGetsTheSameSumsWithinFloat64sTolerance) {
  const std::vector<Report> reports = RunWorkers(
      GetParam(),
      [](const LocalGroup& group, Report* r) { ReduceOnce(group, WireFormat::kNone, r); });
  for (size_t k = 0; k < reports.size(); ++k) {
    ASSERT_EQ(reports[k].code, DPL_OK) << "worker " << k << ": " << reports[k].message;
    EXPECT_EQ(reports[k].hash, reports[0].hash) << "worker " << k << " holds other bits";
    EXPECT_LT(reports[k].worst_relative_error, 1e-6) << "worker " << k;
    EXPECT_EQ(reports[k].nonzero_left, 0u) << "worker " << k << "'s gradients were not zeroed";
  }
}

// Note [16-bit gradients between machines only]: within a machine the sums are float32 whatever
// the wire, and the models' gradients can stay in the shared memory: a 16-bit format gives
// kNone's bits on one machine.
TEST_P(LocalReduceTest, ASixteenBitWireLeavesAMachinesSumsInFloat32) {
  const std::vector<Report> float32 = RunWorkers(
      GetParam(),
      [](const LocalGroup& group, Report* r) { ReduceOnce(group, WireFormat::kNone, r); });
  const std::vector<Report> reports =
      RunWorkers(GetParam(), [](const LocalGroup& group, Report* r) {
        ReduceOnce(group, WireFormat::kBf16, r, Input::kInSharedMemory);
      });
  for (size_t k = 0; k < reports.size(); ++k) {
    ASSERT_EQ(reports[k].code, DPL_OK) << "worker " << k << ": " << reports[k].message;
    EXPECT_EQ(reports[k].hash, float32[k].hash) << "worker " << k << " holds other bits";
    EXPECT_LT(reports[k].worst_relative_error, 1e-6) << "worker " << k;
  }
}

// A model that replaces its gradients at the next backward keeps them through the reduction, and
// the sums are the same bits; so when its gradients are the worker's area of the shared memory
// (Note [Gradients in shared memory]), which step 1 then does not copy.
TEST_P(LocalReduceTest, KeptGradientsAreLeftAsTheyWereAndSumToTheSameBits) {
  const std::vector<Report> zeroed = RunWorkers(GetParam(), [](const LocalGroup& group, Report* r) {
    ReduceOnce(group, WireFormat::kNone, r);
  });
  for (const Input input : {Input::kCopiedAndKept, Input::kInSharedMemory}) {
    const std::vector<Report> kept =
        RunWorkers(GetParam(), [&](const LocalGroup& group, Report* r) {
          ReduceOnce(group, WireFormat::kNone, r, input);
        });
    const char* how = input == Input::kCopiedAndKept ? "copied: " : "in shared memory: ";
    for (size_t k = 0; k < kept.size(); ++k) {
      ASSERT_EQ(kept[k].code, DPL_OK) << how << "worker " << k << ": " << kept[k].message;
      EXPECT_EQ(kept[k].hash, zeroed[k].hash) << how << "worker " << k << " holds other bits";
      EXPECT_EQ(kept[k].changed, 0u) << how << "worker " << k << "'s gradients were changed";
      EXPECT_GT(kept[k].nonzero_left, 0u) << how << "worker " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, LocalReduceTest, ::testing::Values(2, 3, 4));

// Note [Waiting on a peer]: a worker killed before it copies its gradients in is named within a
// second by the one waiting for it, not after the timeout.
TEST(LocalReduce, AWorkerKilledMidReductionIsNamedAtOnce) {
  const std::vector<Report> reports = RunWorkers(3, [](const LocalGroup& group, Report* report) {
    const std::vector<Bucket> buckets = AssignBuckets(kSizes, 100000);
    auto reducer = LocalReducer::Create(group, ShardLayout(kSizes, buckets, group.local_world_size),
                                        WireFormat::kNone, false, 0);
    if (!reducer.ok()) return Fail(report, reducer.status());
    Gradients mine(group.local_rank);
    (*reducer)->BeginStep();
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (group.local_rank == 2 && b == 1) ::kill(::getpid(), SIGKILL);  // mid-reduction
      const Status reduced = (*reducer)->ReduceBucket(b, mine.tensors, 1.0f);
      if (!reduced.ok()) return Fail(report, reduced);
    }
    report->code = DPL_OK;
  });
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(reports[size_t(k)].code, DPL_ERR_COMMUNICATION) << reports[size_t(k)].message;
    EXPECT_NE(std::string(reports[size_t(k)].message).find("rank 2 (pid "), std::string::npos)
        << reports[size_t(k)].message;
    EXPECT_NE(std::string(reports[size_t(k)].message)
                  .find(") exited while this rank waited for it in shared memory: gradient "
                        "bucket 1 of step 1"),
              std::string::npos)
        << reports[size_t(k)].message;
    EXPECT_LT(reports[size_t(k)].seconds, 3.0) << "worker " << k;
  }
}

// Note [A machine's shared memory over a regroup]: the workers of the next attempt attach to the
// memory file again; each waits for the others of that attempt, however late, and sums only their
// new gradients, whatever flags and gradients the attempt before left there.
TEST(LocalReduce, TheNextAttemptWaitsForItsWorkersAndSumsOnlyTheirNewGradients) {
  // The workers that left the first attempt, in memory of its own: as the store's meeting of the
  // next attempt's ranks, nobody attaches again before every worker left the attempt before.
  void* memory = ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  auto* left = new (memory) std::atomic<int>(0);
  const std::vector<Report> reports =
      RunWorkers(2, [left](const LocalGroup& first, Report* report) {
        {
          const std::vector<Bucket> buckets = AssignBuckets(kSizes, 100000);
          auto reducer = LocalReducer::Create(first, ShardLayout(kSizes, buckets, 2),
                                              WireFormat::kNone, false, 0);
          if (!reducer.ok()) return Fail(report, reducer.status());
          Gradients before(first.local_rank + 10);
          for (int step = 0; step < 3; ++step) {  // flags at generation 3, areas not zero
            (*reducer)->KeepGradients();
            (*reducer)->BeginStep();
            for (size_t b = 0; b < buckets.size(); ++b) {
              const Status reduced = (*reducer)->ReduceBucket(b, before.tensors, 1.0f);
              if (!reduced.ok()) return Fail(report, reduced);
            }
            const Status summed = (*reducer)->AwaitSums();
            if (!summed.ok()) return Fail(report, summed);
          }
        }
        left->fetch_add(1);
        while (left->load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        LocalGroup next = first;
        next.attempt = 1;
        // The late worker's flags and area of the attempt before are what the other would misread.
        if (next.local_rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ReduceOnce(next, WireFormat::kNone, report);
      });
  for (size_t k = 0; k < reports.size(); ++k) {
    ASSERT_EQ(reports[k].code, DPL_OK) << "worker " << k << ": " << reports[k].message;
    EXPECT_EQ(reports[k].hash, reports[0].hash) << "worker " << k << " holds other bits";
    EXPECT_LT(reports[k].worst_relative_error, 1e-6) << "worker " << k << " summed stale values";
  }
  ::munmap(memory, sizeof(std::atomic<int>));
}

// The sharded optimizer's exchanges: each worker's part reaches every other worker, and entries
// each worker fills alone add up to every worker's.
TEST(LocalReduce, ShardedExchangesMoveEveryPart) {
  const std::vector<Report> reports = RunWorkers(3, [](const LocalGroup& group, Report* report) {
    const std::vector<Bucket> buckets = AssignBuckets(kSizes, 100000);
    auto reducer = LocalReducer::Create(group, ShardLayout(kSizes, buckets, group.local_world_size),
                                        WireFormat::kNone, true, 8);
    if (!reducer.ok()) return Fail(report, reducer.status());
    std::vector<std::vector<float>> values;
    for (uint32_t p = 0; p < kSizes.size(); ++p) values.emplace_back(kSizes[p], -1.0f);
    for (const ParameterRun& s : (*reducer)->layout().PartOfEveryBucket(group.local_rank)) {
      for (size_t i = 0; i < s.elements; ++i)
        values[s.parameter][s.offset + i] = Gradient(0, s.parameter, s.offset + i);
    }
    auto place = [&](const ParameterRun& s) { return values[s.parameter].data() + s.offset; };
    for (int round = 0; round < 2; ++round) {
      const Status gathered = (*reducer)->GatherParts(place, place, /*again=*/true);
      if (!gathered.ok()) return Fail(report, gathered);
    }
    for (uint32_t p = 0; p < kSizes.size(); ++p) {
      for (size_t i = 0; i < kSizes[p]; ++i) {
        if (values[p][i] != Gradient(0, p, i)) {
          return Fail(report, Status::Error("parameter " + std::to_string(p) + " element " +
                                            std::to_string(i) + " was not gathered"));
        }
      }
    }
    std::vector<double> entries(3, 0.0);
    entries[size_t(group.local_rank)] = 10.0 + group.local_rank;
    const Status shared = (*reducer)->ShareEntries(&entries);
    if (!shared.ok()) return Fail(report, shared);
    if (entries != std::vector<double>{10.0, 11.0, 12.0}) {
      return Fail(report, Status::Error("entries were not shared"));
    }
    report->code = DPL_OK;
  });
  for (size_t k = 0; k < reports.size(); ++k) {
    EXPECT_EQ(reports[k].code, DPL_OK) << "worker " << k << ": " << reports[k].message;
  }
}

}  // namespace
}  // namespace dpl::training
