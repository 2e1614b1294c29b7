// The front of a worker's collectives (training/collectives/collectives.hpp) without a launcher:
// ranks as threads of this process over a backend of their own (fakes/thread_world.hpp) and an
// in-process store; what each path carries, what the front routes where, and Abort.
#include "training/collectives/collectives.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "fakes/thread_world.hpp"
#include "rendezvous/store.hpp"
#include "training/collectives/backend_collectives.hpp"
#include "training/collectives/communication_thread.hpp"
#include "training/collectives/shared_memory_collectives.hpp"

namespace dpl::training {
namespace {

using namespace std::chrono_literals;

TEST(OneRank, SumsVotesAndGathersAreItsOwn) {
  Result<std::unique_ptr<Collectives>> front = OpenCollectives(Membership{});
  ASSERT_TRUE(front.ok()) << front.status().message();
  Collectives& one = **front;
  EXPECT_EQ(one.rank(), 0);
  EXPECT_EQ(one.size(), 1);
  std::vector<double> values = {1.5, -2.0};
  ASSERT_TRUE(one.SumScalars("epoch-loss-0", &values).ok());
  EXPECT_EQ(values, (std::vector<double>{1.5, -2.0}));
  Result<std::vector<uint64_t>> words = one.GatherWords({7, 9}, "replica-check-1");
  ASSERT_TRUE(words.ok());
  EXPECT_EQ(*words, (std::vector<uint64_t>{7, 9}));
  EXPECT_TRUE(*one.AnyRankSays("preempt", 3, true));
  EXPECT_FALSE(*one.AnyRankSays("preempt", 4, false));
  EXPECT_TRUE(one.Barrier("anything").ok());
  EXPECT_TRUE(one.Reaches(DLDevice{kDLCUDA, 0}));
  Result<std::unique_ptr<GradientReduction>> reduction = one.ReduceGradients(ReductionPlan{});
  ASSERT_FALSE(reduction.ok());
  EXPECT_EQ(reduction.status().message(), "a world of one rank has no gradients to sum");
}

TEST(OpenCollectives, RefusesAWorldWithoutItsBackendOrStore) {
  Membership membership;
  membership.world_size = 2;
  Result<std::unique_ptr<Collectives>> front = OpenCollectives(membership);
  ASSERT_FALSE(front.ok());
  EXPECT_EQ(front.status().code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(front.status().message(), "a world of 2 ranks needs its backend and its store");
}

TEST(BackendPath, CarriesTheScalarsVotesAndBroadcastsOfEveryRank) {
  fakes::ThreadWorld world(3);
  world.RunRanks([&](int rank) {
    std::unique_ptr<Backend> backend = world.BackendOf(rank);
    CommunicationThread thread;
    BackendCollectives collectives(*backend, thread, rank, 3);
    std::vector<double> values = {double(rank + 1), 2.0};
    ASSERT_TRUE(collectives.SumScalars("sum", &values).ok());
    EXPECT_EQ(values, (std::vector<double>{6.0, 6.0}));
    Result<std::vector<uint64_t>> words = collectives.GatherWords({uint64_t(rank) * 10}, "w");
    ASSERT_TRUE(words.ok());
    EXPECT_EQ(*words, (std::vector<uint64_t>{0, 10, 20}));
    EXPECT_TRUE(*collectives.AnyRankSays("vote", 1, rank == 2));
    EXPECT_FALSE(*collectives.AnyRankSays("vote", 2, false));
    std::vector<float> data = {float(rank), float(rank) * 2};
    int64_t shape = 2;
    const DLTensor tensor = HostTensor(data.data(), DLDataType{kDLFloat, 32, 1}, 1, &shape);
    ASSERT_TRUE(collectives.BroadcastTensors({tensor}, 1, nullptr, {"broadcast", -1, 0, 8}).ok());
    EXPECT_EQ(data, (std::vector<float>{1.0f, 2.0f}));
    EXPECT_TRUE(collectives.Barrier("end").ok());
  });
  EXPECT_EQ(world.calls(), (std::vector<std::string>{"allreduce", "allgather", "allreduce",
                                                     "allreduce", "broadcast", "barrier"}));
}

// The sharded optimizer's reduction through the backend: each rank holds the average of its own
// part only, the entries add up, and the gather puts every part into every rank's place.
TEST(BackendPath, ReduceScatterLeavesEachRankItsPartAndGathersTheOthers) {
  const std::vector<size_t> sizes = {4096 + 3, 5};
  fakes::ThreadWorld world(2);
  world.RunRanks([&](int rank) {
    std::unique_ptr<Backend> backend = world.BackendOf(rank);
    CommunicationThread thread;
    std::vector<std::vector<float>> gradients;
    std::vector<int64_t> shapes(sizes.begin(), sizes.end());
    ReductionPlan plan;
    for (size_t p = 0; p < sizes.size(); ++p) {
      gradients.emplace_back(sizes[p], float(rank + 1) * float(p + 1));
      plan.gradients.push_back(
          HostTensor(gradients[p].data(), DLDataType{kDLFloat, 32, 1}, 1, &shapes[p]));
    }
    plan.buckets = AssignBuckets(sizes, 1 << 20);
    plan.sharded = true;
    auto reduction = ReduceScatterBuckets(*backend, thread, rank, 2, plan);
    ASSERT_EQ(reduction->sums_left(), SumsLeft::kOwnPartOnly);
    for (size_t b = 0; b < plan.buckets.size(); ++b)
      ASSERT_TRUE(reduction->Launch(b, 0.5f).get().ok());
    ASSERT_TRUE(reduction->Finish().ok());
    const ShardLayout& layout = reduction->layout();
    size_t mine = 0;
    for (size_t b = 0; b < layout.buckets(); ++b) {
      for (const ParameterRun& run : layout.RunsOf(b, rank)) {
        const float* sums = reduction->GradientOf(b, run);
        for (size_t i = 0; i < run.elements; ++i) {
          EXPECT_EQ(sums[i], 1.5f * float(run.parameter + 1)) << "rank " << rank;
        }
        mine += run.elements;
      }
    }
    EXPECT_GT(mine, 0u);
    std::vector<double> entries = {rank == 0 ? 1.0 : 0.0, rank == 1 ? 4.0 : 0.0};
    ASSERT_TRUE(reduction->ShareEntries(&entries).ok());
    EXPECT_EQ(entries, (std::vector<double>{1.0, 4.0}));
    // Each rank's values hold its rank in its own part; after the gather every part is there.
    std::vector<std::vector<float>> values = {std::vector<float>(sizes[0], -1.0f),
                                              std::vector<float>(sizes[1], -1.0f)};
    for (size_t b = 0; b < layout.buckets(); ++b) {
      for (const ParameterRun& run : layout.RunsOf(b, rank)) {
        std::fill_n(values[run.parameter].begin() + long(run.offset), run.elements, float(rank));
      }
    }
    auto place = [&](const ParameterRun& run) { return values[run.parameter].data() + run.offset; };
    ASSERT_TRUE(reduction->GatherParts(place, place, false).ok());
    for (size_t b = 0; b < layout.buckets(); ++b) {
      for (int part = 0; part < 2; ++part) {
        for (const ParameterRun& run : layout.RunsOf(b, part)) {
          EXPECT_EQ(values[run.parameter][run.offset], float(part)) << "rank " << rank;
        }
      }
    }
  });
}

// The copy of each part gets one other rank's part (Note [A copy of each part]): rank r's to
// r - 1 and r + 1's to it, at 3 ranks. With backend ABI v5's send_receive only those bytes move;
// without it an allgather moves every part and the destination takes the one it wants.
void ExpectOnlyTheNextRanksPartArrives(bool send_receive) {
  const std::vector<size_t> sizes = {3000 + 7, 11, 900};
  constexpr int kRanks = 3;
  fakes::ThreadWorld world(kRanks);
  if (send_receive) world.OfferSendReceive();
  world.RunRanks([&](int rank) {
    std::unique_ptr<Backend> backend = world.BackendOf(rank);
    EXPECT_EQ(backend->CanSendReceive(), send_receive);
    CommunicationThread thread;
    std::vector<std::vector<float>> gradients, mine, received;
    std::vector<int64_t> shapes(sizes.begin(), sizes.end());
    ReductionPlan plan;
    for (size_t p = 0; p < sizes.size(); ++p) {
      gradients.emplace_back(sizes[p], 0.0f);
      mine.emplace_back(sizes[p], float(rank) + 0.25f * float(p));
      received.emplace_back(sizes[p], -1.0f);
      plan.gradients.push_back(
          HostTensor(gradients[p].data(), DLDataType{kDLFloat, 32, 1}, 1, &shapes[p]));
    }
    plan.buckets = AssignBuckets(sizes, 8192);
    plan.sharded = true;
    auto reduction = ReduceScatterBuckets(*backend, thread, rank, kRanks, plan);
    const int from = (rank + 1) % kRanks, to = (rank + kRanks - 1) % kRanks;
    auto source = [&](const ParameterRun& run) { return mine[run.parameter].data() + run.offset; };
    auto destination = [&](const ParameterRun& run) -> float* {
      const ShardLayout& layout = reduction->layout();
      for (size_t b = 0; b < layout.buckets(); ++b) {
        for (const ParameterRun& wanted : layout.RunsOf(b, from)) {
          if (wanted.parameter == run.parameter && wanted.offset == run.offset) {
            return received[run.parameter].data() + run.offset;
          }
        }
      }
      return nullptr;
    };
    ASSERT_TRUE(reduction->ExchangeParts(to, from, source, destination).ok());
    const ShardLayout& layout = reduction->layout();
    for (size_t b = 0; b < layout.buckets(); ++b) {
      for (int part = 0; part < kRanks; ++part) {
        for (const ParameterRun& run : layout.RunsOf(b, part)) {
          const float expected = part == from ? float(from) + 0.25f * float(run.parameter) : -1.0f;
          EXPECT_EQ(received[run.parameter][run.offset], expected) << "rank " << rank;
          EXPECT_EQ(received[run.parameter][run.offset + run.elements - 1], expected);
        }
      }
    }
  });
  const std::vector<std::string> calls = world.calls();
  ASSERT_FALSE(calls.empty());
  for (const std::string& call : calls)
    EXPECT_EQ(call, send_receive ? "send_receive" : "allgather");
}

TEST(BackendPath, ExchangeOfPartsSendsEachPartToItsOneHolder) {
  ExpectOnlyTheNextRanksPartArrives(/*send_receive=*/true);
}

TEST(BackendPath, ExchangeOfPartsGathersEveryPartWithoutSendReceive) {
  ExpectOnlyTheNextRanksPartArrives(/*send_receive=*/false);
}

// A store of this process for the fronts of a test's ranks.
struct TestStore {
  TestStore() {
    rendezvous::StoreServerOptions server_options;
    server_options.bind_addr = "127.0.0.1";
    auto started = rendezvous::StoreServer::Start(server_options);
    EXPECT_TRUE(started.ok()) << started.status().message();
    if (started.ok()) server = std::move(*started);
  }
  std::unique_ptr<rendezvous::StoreClient> Connect() const {
    rendezvous::StoreClientOptions client_options;
    client_options.host = "127.0.0.1";
    client_options.port = server ? server->port() : 0;
    auto client = rendezvous::StoreClient::Connect(client_options);
    EXPECT_TRUE(client.ok()) << client.status().message();
    return client.ok() ? std::move(*client) : nullptr;
  }
  std::unique_ptr<rendezvous::StoreServer> server;
};

// Rank `rank`'s membership of a world of two over `backend`, the store and a host path (or NULL).
Membership TwoRanks(int rank, Backend* backend, Backend* host_path,
                    rendezvous::StoreClient* store) {
  Membership membership;
  membership.rank = rank;
  membership.world_size = 2;
  membership.backend = backend;
  membership.host_path = host_path;
  membership.store = store;
  membership.store_prefix = "attempt/0/";
  membership.timeout = 10s;
  return membership;
}

// Runs `body(front, rank)` on both ranks, each with its front over `world`'s backend (created
// for `device_type`), the store and, where given, `host_world`'s backend as the host path.
void RunFronts(fakes::ThreadWorld& world, int32_t device_type, fakes::ThreadWorld* host_world,
               const std::function<void(Collectives& front, int rank)>& body) {
  TestStore store;
  world.RunRanks([&](int rank) {
    std::unique_ptr<rendezvous::StoreClient> client = store.Connect();
    ASSERT_NE(client, nullptr);
    std::unique_ptr<Backend> backend = world.BackendOf(rank, device_type);
    std::unique_ptr<Backend> host = host_world ? host_world->BackendOf(rank) : nullptr;
    auto front = OpenCollectives(TwoRanks(rank, backend.get(), host.get(), client.get()));
    ASSERT_TRUE(front.ok()) << front.status().message();
    body(**front, rank);
  });
}

// Note [One front for collectives]: the epoch loss goes through the store, the hashes and the
// vote through a backend of host memory; the front makes no backend call for the sums.
TEST(Front, RoutesTheSumsThroughTheStoreAndTheRestThroughTheBackend) {
  fakes::ThreadWorld world(2);
  RunFronts(world, kDLCPU, nullptr, [](Collectives& front, int rank) {
    std::vector<double> losses = {double(rank) + 0.25, 1.0};
    ASSERT_TRUE(front.SumScalars("epoch-loss-0", &losses).ok());
    EXPECT_EQ(losses, (std::vector<double>{1.5, 2.0}));
    Result<std::vector<uint64_t>> hashes = front.GatherWords({uint64_t(rank) + 5}, "hash");
    ASSERT_TRUE(hashes.ok());
    EXPECT_EQ(*hashes, (std::vector<uint64_t>{5, 6}));
    EXPECT_TRUE(*front.AnyRankSays("preempt", 1, rank == 0));
    EXPECT_TRUE(front.Barrier("end").ok());
  });
  EXPECT_EQ(world.calls(), (std::vector<std::string>{"allgather", "allreduce", "barrier"}));
}

// Broadcasts rank 1's {rank, 2 x rank} in memory of `device_type` (host memory, whatever the
// device says: the fake backends move host memory) and checks every rank has it.
void BroadcastRankOne(Collectives& front, int rank, int32_t device_type) {
  std::vector<float> data = {float(rank), float(rank) * 2};
  int64_t shape = 2;
  DLTensor tensor = HostTensor(data.data(), DLDataType{kDLFloat, 32, 1}, 1, &shape);
  tensor.device = DLDevice{static_cast<DLDeviceType>(device_type), 0};
  ASSERT_TRUE(front.BroadcastTensors({tensor}, 1, nullptr, {"broadcast", -1, 0, 8}).ok());
  EXPECT_EQ(data, (std::vector<float>{1.0f, 2.0f}));
}

// Note [A host path beside a device backend]: beside a backend of device memory only, host
// tensors and words go through the host path, the device's tensors and barriers through the
// job's backend, the sums through the store.
TEST(Front, SendsHostTensorsAndWordsThroughTheHostPathBesideADeviceBackend) {
  fakes::ThreadWorld device_world(2), host_world(2);
  RunFronts(device_world, kDLCUDA, &host_world, [](Collectives& front, int rank) {
    EXPECT_FALSE(front.Reaches(DLDevice{kDLCPU, 0})) << "gradients stay on the device";
    Result<std::vector<uint64_t>> words = front.GatherWords({uint64_t(rank) + 5}, "hash");
    ASSERT_TRUE(words.ok()) << words.status().message();
    EXPECT_EQ(*words, (std::vector<uint64_t>{5, 6}));
    EXPECT_TRUE(*front.AnyRankSays("preempt", 1, rank == 1));
    BroadcastRankOne(front, rank, kDLCPU);
    BroadcastRankOne(front, rank, kDLCUDA);
    std::vector<double> losses = {double(rank) + 0.25};
    ASSERT_TRUE(front.SumScalars("epoch-loss-0", &losses).ok());
    EXPECT_EQ(losses, (std::vector<double>{1.5}));
    EXPECT_TRUE(front.Barrier("end").ok());
  });
  EXPECT_EQ(host_world.calls(), (std::vector<std::string>{"allgather", "allreduce", "broadcast"}));
  EXPECT_EQ(device_world.calls(), (std::vector<std::string>{"broadcast", "barrier"}));
}

// A backend that moves host memory itself carries all of it: a host path beside it is not used.
TEST(Front, UsesNoHostPathBesideABackendOfHostMemory) {
  fakes::ThreadWorld world(2), host_world(2);
  RunFronts(world, kDLCPU, &host_world, [](Collectives& front, int rank) {
    ASSERT_TRUE(front.GatherWords({uint64_t(rank)}, "hash").ok());
    BroadcastRankOne(front, rank, kDLCPU);
  });
  EXPECT_TRUE(host_world.calls().empty());
  EXPECT_EQ(world.calls(), (std::vector<std::string>{"allgather", "broadcast"}));
}

// Note [Aborting collectives]: what is queued ends without running, and so does every later call.
TEST(Abort, EndsWhatIsQueuedAndEveryLaterCall) {
  CommunicationThread thread;
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  std::future<Status> running = thread.Submit([&started, released] {
    started.set_value();
    released.wait();
    return Status::Ok();
  });
  started.get_future().wait();
  bool queued_ran = false;
  std::future<Status> queued = thread.Submit([&] {
    queued_ran = true;
    return Status::Ok();
  });
  thread.Abort(Status::Communication("machine 2 left the job"));
  release.set_value();
  EXPECT_TRUE(running.get().ok()) << "a call under way ends as it ends";
  const Status ended = queued.get();
  EXPECT_FALSE(queued_ran);
  EXPECT_EQ(ended.code(), DPL_ERR_COMMUNICATION);
  EXPECT_EQ(ended.message(), "machine 2 left the job");
  EXPECT_EQ(thread.Run([] { return Status::Ok(); }).message(), "machine 2 left the job");
}

// A worker waiting in the machine's shared memory for one that never comes stops within a
// fraction of a second of the abort, not at --backend-timeout.
TEST(Abort, EndsAWaitInSharedMemoryAtOnce) {
  const int fd = ::memfd_create("dpl-abort-test", 0);
  ASSERT_GE(fd, 0);
  auto abort = std::make_shared<AbortSignal>();
  LocalGroup group;
  group.memory_fd = fd;
  group.local_world_size = 2;  // the other worker never comes
  group.timeout = 60s;
  group.abort = abort;
  std::thread aborter([abort] {
    std::this_thread::sleep_for(100ms);
    abort->Raise(Status::Communication("the attempt ended"));
  });
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<LocalReducer>> reducer = LocalReducer::Create(
      group, ShardLayout({8}, AssignBuckets({8}, 1024), 2), WireFormat::kNone, false, 0);
  const auto waited = std::chrono::steady_clock::now() - start;
  aborter.join();
  ::close(fd);
  ASSERT_FALSE(reducer.ok());
  EXPECT_EQ(reducer.status().message(), "the attempt ended");
  EXPECT_LT(waited, 5s);
}

// A rank of a backend with abort (BackendCapability::kAbort) whose barrier waits for a peer that
// never comes: until the instance is aborted, or 30 s.
struct AbortableRank {
  std::mutex mutex;
  std::condition_variable changed;
  int aborts = 0;
};

std::unique_ptr<Backend> AbortableBackend(AbortableRank* rank) {
  auto table = std::make_shared<plugin_host::BackendInterface>();
  table->capabilities = {plugin_host::BackendCapability::kAbort};
  table->destroy = [](dpl_backend*) {};
  table->barrier = [](dpl_backend* instance) {
    auto& self = *reinterpret_cast<AbortableRank*>(instance);
    std::unique_lock<std::mutex> lock(self.mutex);
    return self.changed.wait_for(lock, 30s, [&] { return self.aborts > 0; }) ? DPL_ERR_COMMUNICATION
                                                                             : DPL_ERR_TIMEOUT;
  };
  table->abort = [](dpl_backend* instance) {
    auto& self = *reinterpret_cast<AbortableRank*>(instance);
    std::lock_guard<std::mutex> lock(self.mutex);
    ++self.aborts;
    self.changed.notify_all();
    return DPL_OK;
  };
  table->last_error = [] { return "this instance was aborted"; };
  return std::make_unique<Backend>(table, reinterpret_cast<dpl_backend*>(rank),
                                   PluginLabel{"backend", "abortable", ""}, kDLCPU);
}

// A call blocked inside the backend plugin returns once the front is aborted, where the plugin
// has abort (backend ABI v4): the front aborts its backend instance, not only its thread.
TEST(Abort, EndsACallBlockedInsideTheBackendPlugin) {
  TestStore store;
  std::unique_ptr<rendezvous::StoreClient> client = store.Connect();
  ASSERT_NE(client, nullptr);
  AbortableRank rank;
  std::unique_ptr<Backend> backend = AbortableBackend(&rank);
  // Rank 1 never comes.
  auto front = OpenCollectives(TwoRanks(0, backend.get(), nullptr, client.get()));
  ASSERT_TRUE(front.ok()) << front.status().message();
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);
    (*front)->Abort(Status::Communication("machine 1 left the job"));
  });
  const auto start = std::chrono::steady_clock::now();
  const Status blocked = (*front)->Barrier("end of epoch");
  const auto waited = std::chrono::steady_clock::now() - start;
  aborter.join();
  EXPECT_EQ(blocked.code(), DPL_ERR_COMMUNICATION) << blocked.message();
  EXPECT_NE(blocked.message().find("this instance was aborted"), std::string::npos)
      << blocked.message();
  EXPECT_LT(waited, 5s) << "the barrier waited for its timeout, not for the abort";
  EXPECT_GE(rank.aborts, 1);
  EXPECT_EQ((*front)->Barrier("again").message(), "machine 1 left the job");
}

// Abort ends the host path's instance too: a handover blocked in it returns.
TEST(Abort, EndsTheHostPathBesideADeviceBackend) {
  TestStore store;
  std::unique_ptr<rendezvous::StoreClient> client = store.Connect();
  ASSERT_NE(client, nullptr);
  fakes::ThreadWorld device_world(2);
  std::unique_ptr<Backend> device = device_world.BackendOf(0, kDLCUDA);
  AbortableRank host_rank;
  std::unique_ptr<Backend> host = AbortableBackend(&host_rank);
  auto front = OpenCollectives(TwoRanks(0, device.get(), host.get(), client.get()));
  ASSERT_TRUE(front.ok()) << front.status().message();
  (*front)->Abort(Status::Communication("machine 1 left the job"));
  EXPECT_EQ(host_rank.aborts, 1);
  EXPECT_EQ((*front)->GatherWords({1}, "hash").status().message(), "machine 1 left the job");
}

// The shared-memory path aborts the instance of this local rank's workers across machines.
TEST(Abort, TheSharedMemoryPathAbortsTheInstanceAcrossMachines) {
  AbortableRank across;
  std::unique_ptr<Backend> backend = AbortableBackend(&across);
  LocalGroup group;
  group.local_world_size = 2;
  group.machines = 2;
  group.across_machines = backend.get();
  CommunicationThread thread;
  SharedMemoryCollectives path(group, thread);
  path.Abort(Status::Communication("machine 1 left the job"));
  EXPECT_EQ(across.aborts, 1);
  EXPECT_EQ(thread.Run([] { return Status::Ok(); }).message(), "machine 1 left the job");
}

}  // namespace
}  // namespace dpl::training
