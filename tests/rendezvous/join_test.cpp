// The launchers' join: settings that must match, machine ids given or taken in join order, and
// the members of an elastic job's attempts, with launchers as threads over one loopback store.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "loopback_store.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {
namespace {

using namespace std::chrono_literals;

LauncherJoin Join(std::optional<int> id, int machines, const std::string& name,
                  std::vector<JobSetting> settings = {
                      {"--num-machines", "2"}, {"--num-processes", "4"}, {"--lr", "0.5"}}) {
  LauncherJoin join;
  join.machine_id = id;
  join.num_machines = machines;
  join.machine_name = name;
  join.settings = std::move(settings);
  return join;
}

std::string ErrorOf(const Result<int>& joined) {
  EXPECT_FALSE(joined.ok()) << "joined as machine " << (joined.ok() ? joined.value() : -1);
  return joined.status().message();
}

using LauncherJoinTest = testing::LoopbackStoreTest;

TEST_F(LauncherJoinTest, ASettingThatDiffersIsRefusedNamingItAndBothValues) {
  auto machine0 = Connect(), machine1 = Connect();
  ASSERT_EQ(*JoinAsLauncher(*machine0, Join(0, 2, "a"), 1s), 0);
  EXPECT_EQ(
      ErrorOf(JoinAsLauncher(
          *machine1,
          Join(1, 2, "b", {{"--num-machines", "2"}, {"--num-processes", "3"}, {"--lr", "0.5"}}),
          1s)),
      "--num-processes differs between machines: this machine (--machine-id 1) has 3, "
      "machine 0 has 4; pass the same value to every launcher");
  EXPECT_EQ(ErrorOf(JoinAsLauncher(
                *machine1,
                Join(std::nullopt, 2, "b 10.0.0.2 pid 7",
                     {{"--num-machines", "2"}, {"--num-processes", "4"}, {"--lr", "0.1"}}),
                1s)),
            "--lr differs between machines: this machine (b 10.0.0.2 pid 7) has 0.1, machine 0 "
            "has 0.5; pass the same value to every launcher");
  EXPECT_EQ(
      ErrorOf(JoinAsLauncher(
          *machine1, Join(1, 2, "b", {{"--num-machines", "2"}, {"--num-processes", "4"}}), 1s)),
      "machine 0 checks other settings at the join than this machine (--machine-id 1): run "
      "the same dpl version on every machine");
  EXPECT_EQ(ErrorOf(JoinAsLauncher(*machine1,
                                   Join(1, 2, "b",
                                        {{"--num-machines", "2"},
                                         {"--num-processes", "4"},
                                         {"--lr", "0.5"},
                                         {"--seed", "1"}}),
                                   1s)),
            "machine 0 does not check --seed at the join: run the same dpl version on every "
            "machine");
  EXPECT_EQ(ErrorOf(JoinAsLauncher(*machine1, Join(2, 2, "b"), 1s)),
            "--machine-id 2 is out of range: with --num-machines 2 it must be in [0, 2)");
  // None of the refused launchers took an id.
  EXPECT_EQ(*JoinAsLauncher(*machine1, Join(1, 2, "b"), 1s), 1);
}

TEST_F(LauncherJoinTest, NoSettingsFromMachine0WithinTheTimeoutSaysWhatItWaitedFor) {
  auto machine1 = Connect();
  const std::string message = ErrorOf(JoinAsLauncher(*machine1, Join(1, 2, "b"), 50ms));
  EXPECT_EQ(message.rfind("waiting for machine 0 to publish the job's settings: timed out", 0), 0u)
      << message;
}

TEST_F(LauncherJoinTest, MachinesWithoutIdsAreNumberedInJoinOrderAndAnExtraOneIsRefused) {
  auto machine0 = Connect(), b = Connect(), c = Connect(), d = Connect();
  ASSERT_EQ(*JoinAsLauncher(*machine0, Join(0, 3, "a"), 1s), 0);
  EXPECT_EQ(*JoinAsLauncher(*b, Join(std::nullopt, 3, "b"), 1s), 1);
  EXPECT_EQ(*JoinAsLauncher(*c, Join(std::nullopt, 3, "c"), 1s), 2);
  EXPECT_EQ(MachineName(*d, 2), "c");
  EXPECT_EQ(ErrorOf(JoinAsLauncher(*d, Join(std::nullopt, 3, "d"), 1s)),
            "this machine (d) is one machine too many: the 3 ids of --num-machines 3 are taken (0 "
            "a, 1 b, 2 c); start no more launchers than that, or give another job another "
            "--master-port");
}

TEST_F(LauncherJoinTest, AnIdClaimedTwiceIsRefusedNamingBothMachines) {
  auto machine0 = Connect(), first = Connect(), second = Connect(), third = Connect();
  ASSERT_EQ(*JoinAsLauncher(*machine0, Join(0, 3, "a"), 1s), 0);
  ASSERT_EQ(*JoinAsLauncher(*first, Join(1, 3, "hostb 10.0.0.2 pid 11"), 1s), 1);
  EXPECT_EQ(ErrorOf(JoinAsLauncher(*second, Join(1, 3, "hostc 10.0.0.3 pid 12"), 1s)),
            "--machine-id 1 is claimed by two machines: hostb 10.0.0.2 pid 11 and hostc 10.0.0.3 "
            "pid 12 (this one); give every machine a distinct id in [0, 3), or leave --machine-id "
            "out to number the machines in the order they join");
  // A launcher without an id skips the one given to another.
  EXPECT_EQ(*JoinAsLauncher(*third, Join(std::nullopt, 3, "d"), 1s), 2);
}

TEST_F(LauncherJoinTest, ElasticIdsHaveNoBound) {
  auto machine0 = Connect(), b = Connect(), c = Connect();
  LauncherJoin join = Join(0, 2, "a");
  join.elastic = true;
  ASSERT_EQ(*JoinAsLauncher(*machine0, join, 1s), 0);
  join.machine_id.reset();
  EXPECT_EQ(*JoinAsLauncher(*b, join, 1s), 1);
  EXPECT_EQ(*JoinAsLauncher(*c, join, 1s), 2);  // a machine may come after another left
}

// Note [A vanished launcher's id]: in an elastic job a launcher given the id of one that stopped
// beating joins under the next free id; one given the id of a launcher that beats is refused,
// naming both.
TEST_F(LauncherJoinTest, AnElasticJobTakesInTheMachineThatComesInAVanishedLaunchersPlace) {
  auto machine0 = Connect(), lost = Connect(), back = Connect(), twin = Connect();
  LauncherJoin join = Join(0, 3, "a");
  join.elastic = true;
  ASSERT_EQ(*JoinAsLauncher(*machine0, join, 1s), 0);
  join.machine_id = 1;
  join.machine_name = "hostb pid 11";
  ASSERT_EQ(*JoinAsLauncher(*lost, join, 1s), 1);
  {
    auto beat = Heartbeat::Start(ClientOptions(), 1);  // hostb's launcher beats, then vanishes
    ASSERT_TRUE(beat.ok());
    std::this_thread::sleep_for(500ms);
    join.machine_name = "hostc pid 12";
    EXPECT_EQ(ErrorOf(JoinAsLauncher(*twin, join, 1s)),
              "--machine-id 1 is claimed by two machines: hostb pid 11 and hostc pid 12 (this "
              "one); give every machine a distinct id in [0, 3), or leave --machine-id out to "
              "number the machines in the order they join");
  }
  const auto started = std::chrono::steady_clock::now();
  join.machine_name = "hostb pid 13";
  EXPECT_EQ(*JoinAsLauncher(*back, join, 1s), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2 * kMemberLease);
  EXPECT_EQ(MachineName(*machine0, 2), "hostb pid 13");
  // Another that comes later in the same place (the first newcomer left too) gets an id as well.
  join.machine_name = "hostb pid 14";
  EXPECT_EQ(*JoinAsLauncher(*twin, join, 1s), 3);
}

TEST(FieldsTest, AnyTextSurvivesEncoding) {
  const std::vector<std::string> fields = {"", "a:b", "12:x", std::string("\0\n", 2), "--lr"};
  auto decoded = DecodeFields(EncodeFields(fields));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(*decoded, fields);
  EXPECT_FALSE(DecodeFields("5:ab").ok());
  EXPECT_FALSE(DecodeFields("x:ab").ok());
}

using MembershipTest = testing::LoopbackStoreTest;

ElasticOptions Elastic(int min, int max, std::chrono::milliseconds grace = 300ms) {
  ElasticOptions options;
  options.min_machines = min;
  options.max_machines = max;
  options.join_grace = grace;
  options.timeout = 10s;
  return options;
}

std::vector<int> Ids(const std::vector<Member>& members) {
  std::vector<int> ids;
  for (const Member& member : members) ids.push_back(member.machine_id);
  return ids;
}

TEST_F(MembershipTest, AnAttemptStartsWithMaxMachinesAndLeavesTheRestForTheNext) {
  auto a = Connect(), b = Connect(), c = Connect(), d = Connect();
  auto join_b = std::async(std::launch::async, [&] {
    return JoinAttempt(*b, 0, {1, "b"}, {}, Elastic(2, 3, 10s));
  });
  auto join_c = std::async(std::launch::async, [&] {
    return JoinAttempt(*c, 0, {2, "c"}, {}, Elastic(2, 3, 10s));
  });
  // Three of at most three: machine 0 does not wait out the 10 s grace.
  const auto start = std::chrono::steady_clock::now();
  while (*a->Add("attempt/0/members/count", 0) < 2) std::this_thread::sleep_for(5ms);
  auto coordinated = JoinAttempt(*a, 0, {0, "a"}, {}, Elastic(2, 3, 10s));
  ASSERT_TRUE(coordinated.ok()) << coordinated.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(coordinated->members.front().machine_id, 0);
  EXPECT_EQ(coordinated->members.size(), 3u);
  Result<Attempt> b_attempt = join_b.get(), c_attempt = join_c.get();
  ASSERT_TRUE(b_attempt.ok() && c_attempt.ok());
  EXPECT_EQ(Ids(b_attempt->members), Ids(coordinated->members));
  EXPECT_EQ(b_attempt->members[static_cast<size_t>(b_attempt->index)].machine_id, 1);
  EXPECT_EQ(c_attempt->members[static_cast<size_t>(c_attempt->index)].machine_id, 2);
  // A launcher that comes once the list is written is left for the next attempt.
  auto late = JoinAttempt(*d, 0, {3, "d"}, {}, Elastic(2, 3));
  ASSERT_TRUE(late.ok()) << late.status().message();
  EXPECT_EQ(late->outcome, Attempt::Outcome::kLeftOut);
  EXPECT_EQ(late->members.size(), 3u);
}

TEST_F(MembershipTest, MachineZeroWaitsForBeatingMembersButNotForOneThatLeft) {
  auto a = Connect(), b = Connect(), c = Connect();
  const std::vector<Member> previous = {{0, "a"}, {1, "b"}, {2, "c"}};
  auto beat_b = Heartbeat::Start(ClientOptions(), 1);  // b's launcher lives; c's is gone
  ASSERT_TRUE(beat_b.ok());
  std::promise<void> b_may_join;
  auto join_b = std::async(std::launch::async, [&] {
    b_may_join.get_future().wait();
    return JoinAttempt(*b, 1, {1, "b"}, previous, Elastic(2, 3, 100ms));
  });
  auto coordinate = std::async(std::launch::async, [&] {
    return JoinAttempt(*a, 1, {0, "a"}, previous, Elastic(1, 3, 100ms));
  });
  // MIN (1) is there and no one came for the grace; c never beat and is given up after
  // kMemberLease, but b still beats: machine 0 waits for it.
  EXPECT_EQ(coordinate.wait_for(kMemberLease + 500ms), std::future_status::timeout);
  b_may_join.set_value();
  const auto start = std::chrono::steady_clock::now();
  Result<Attempt> attempt = coordinate.get();
  ASSERT_TRUE(attempt.ok()) << attempt.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_EQ(Ids(attempt->members), (std::vector<int>{0, 1}));
  EXPECT_EQ(DescribeMembershipChange(previous, attempt->members), "machine 2 (c) left");
  ASSERT_TRUE(join_b.get().ok());
  (void)c;
}

TEST_F(MembershipTest, TooFewMachinesFailTheAttemptAndTheJobsEndReleasesWaiters) {
  auto a = Connect(), b = Connect();
  ElasticOptions options = Elastic(2, 3, 10ms);
  options.timeout = 300ms;
  auto alone = JoinAttempt(*a, 0, {0, "a"}, {}, options);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().message(),
            "only 1 of the at least 2 machines (--num-machines 2:3) joined attempt 0 within 0.3 s "
            "(--rendezvous-timeout)");
  auto waiting = std::async(std::launch::async, [&] {
    return JoinAttempt(*b, 1, {1, "b"}, {}, options);
  });
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  ASSERT_TRUE(EndElasticJob(*a, "rank 3 failed", 1).ok());
  Result<Attempt> ended = waiting.get();
  ASSERT_TRUE(ended.ok()) << ended.status().message();
  EXPECT_EQ(ended->outcome, Attempt::Outcome::kJobEnded);
  EXPECT_EQ(ended->job_end, "rank 3 failed");
}

// Note [Attempt coordinator]: machine 0 is known gone (the attempt before found its beat stopped):
// machine 1 claims the attempt at once, comes first in the list, and machine 2 runs with it.
TEST_F(MembershipTest, TheLowestLiveLauncherCoordinatesWhenMachineZeroIsGone) {
  auto b = Connect(), c = Connect();
  auto beat_b = Heartbeat::Start(ClientOptions(), 1), beat_c = Heartbeat::Start(ClientOptions(), 2);
  ASSERT_TRUE(beat_b.ok() && beat_c.ok());
  AttemptJoin join;
  join.attempt = 1;
  join.previous = {{0, "a"}, {1, "b"}, {2, "c"}};
  join.gone = {0};
  auto join_c = std::async(std::launch::async, [&] {
    AttemptJoin mine = join;
    mine.self = {2, "c"};
    bool coordinating = true;
    auto attempt = JoinAttempt(*c, mine, Elastic(2, 3, 100ms), &coordinating);
    EXPECT_FALSE(coordinating);
    return attempt;
  });
  const auto start = std::chrono::steady_clock::now();
  join.self = {1, "b"};
  bool coordinating = false;
  auto coordinated = JoinAttempt(*b, join, Elastic(2, 3, 100ms), &coordinating);
  ASSERT_TRUE(coordinated.ok()) << coordinated.status().message();
  EXPECT_TRUE(coordinating);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // no lease waited out for machine 0
  EXPECT_EQ(Ids(coordinated->members), (std::vector<int>{1, 2}));
  EXPECT_EQ(coordinated->index, 0);
  Result<Attempt> attempt_c = join_c.get();
  ASSERT_TRUE(attempt_c.ok()) << attempt_c.status().message();
  EXPECT_EQ(Ids(attempt_c->members), (std::vector<int>{1, 2}));
  EXPECT_EQ(attempt_c->index, 1);
}

// Nothing says machine 0 is gone, but its beat never moves: machine 1 takes over after
// kMemberLease, not before.
TEST_F(MembershipTest, ALauncherTakesOverOnceTheLowerOnesBeatStoppedForALease) {
  auto b = Connect();
  auto beat_b = Heartbeat::Start(ClientOptions(), 1);
  ASSERT_TRUE(beat_b.ok());
  const auto start = std::chrono::steady_clock::now();
  auto attempt = JoinAttempt(*b, 0, {1, "b"}, {{0, "a"}, {1, "b"}}, Elastic(1, 2, 10ms));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(attempt.ok()) << attempt.status().message();
  EXPECT_EQ(Ids(attempt->members), (std::vector<int>{1}));
  EXPECT_GE(took, kMemberLease);
  EXPECT_LT(took, kMemberLease + 2s);
}

// A launcher claimed the attempt and vanished before it wrote the list: the others give the
// attempt up after a lease instead of waiting for the list for ever.
TEST_F(MembershipTest, AnAttemptWhoseCoordinatorVanishedIsAbandoned) {
  auto a = Connect(), b = Connect();
  ASSERT_EQ(*a->Add("attempt/3/members/coordinator/claims", 1), 1);
  ASSERT_TRUE(a->Set("attempt/3/members/coordinator/id", ToBytes("0")).ok());
  auto beat_b = Heartbeat::Start(ClientOptions(), 1);
  ASSERT_TRUE(beat_b.ok());
  const auto start = std::chrono::steady_clock::now();
  auto attempt = JoinAttempt(*b, 3, {1, "b"}, {{0, "a"}, {1, "b"}}, Elastic(1, 2, 10ms));
  ASSERT_TRUE(attempt.ok()) << attempt.status().message();
  EXPECT_EQ(attempt->outcome, Attempt::Outcome::kAbandoned);
  EXPECT_LT(std::chrono::steady_clock::now() - start, kMemberLease + 2s);
}

TEST(MembershipChangeTest, SaysWhoLeftAndWhoCame) {
  EXPECT_EQ(DescribeMembershipChange({{0, "a"}, {1, "b"}}, {{0, "a"}, {2, "c"}}),
            "machine 1 (b) left; machine 2 (c) joined");
  EXPECT_EQ(DescribeMembershipChange({{0, "a"}}, {{0, "a"}}), "");
}

}  // namespace
}  // namespace dpl::rendezvous
