// Note [Sharding by default] (training/placement.cpp): --shard-optimizer auto shards exactly a
// CPU model updated in place on one machine whose several workers sum in its shared memory; on
// and off are obeyed as given.
#include <gtest/gtest.h>

#include "training/placement.hpp"

namespace dpl::training {
namespace {

// Two workers of one machine training a CPU model in place, summing in shared memory.
PlacementSettings OneMachineOfTwo() {
  PlacementSettings settings;
  settings.world_size = 2;
  settings.local.local_world_size = 2;
  settings.local.machines = 1;
  return settings;
}

bool Auto(const PlacementSettings& settings) {
  return ParameterPlacement::ShardsOptimizer(OptimizerSharding::kAuto, settings);
}

TEST(ShardingRule, AutoShardsOneMachineOfSeveralWorkersSummingInSharedMemory) {
  EXPECT_TRUE(Auto(OneMachineOfTwo()));
  PlacementSettings three = OneMachineOfTwo();
  three.world_size = three.local.local_world_size = 3;
  EXPECT_TRUE(Auto(three));
}

TEST(ShardingRule, AutoKeepsTheWholeOptimizerElsewhere) {
  PlacementSettings settings = OneMachineOfTwo();
  settings.local.machines = 2;
  settings.world_size = 4;
  EXPECT_FALSE(Auto(settings)) << "across machines";
  settings = OneMachineOfTwo();
  settings.local_reduce = LocalReduce::kBackend;
  EXPECT_FALSE(Auto(settings)) << "--local-reduce backend";
  settings = OneMachineOfTwo();
  settings.device = Device::kCuda;
  EXPECT_FALSE(Auto(settings)) << "--device cuda";
  settings = OneMachineOfTwo();
  settings.mirror_parameters = true;
  EXPECT_FALSE(Auto(settings)) << "--mirror-parameters";
  settings = OneMachineOfTwo();
  settings.local.local_world_size = 1;
  settings.local.machines = 2;
  EXPECT_FALSE(Auto(settings)) << "one worker a machine";
  settings = PlacementSettings();
  EXPECT_FALSE(Auto(settings)) << "one worker";
}

TEST(ShardingRule, OnAndOffAreObeyed) {
  PlacementSettings across = OneMachineOfTwo();
  across.local.machines = 2;
  EXPECT_TRUE(ParameterPlacement::ShardsOptimizer(OptimizerSharding::kOn, across));
  EXPECT_FALSE(ParameterPlacement::ShardsOptimizer(OptimizerSharding::kOff, OneMachineOfTwo()));
}

}  // namespace
}  // namespace dpl::training
