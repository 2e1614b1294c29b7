// The parts of a training step (training/step_parts.hpp) without a launcher: the placements, the
// reducers and the optimizer runners over a model of this process (fakes/fake_model.hpp) and ranks
// as threads (fakes/thread_world.hpp).
#include "training/step_parts.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "fakes/fake_model.hpp"
#include "fakes/summed_part.hpp"
#include "fakes/thread_world.hpp"
#include "training/collectives/backend_collectives.hpp"

namespace dpl::training {
namespace {

using fakes::FakeModel;
using fakes::FakeModelOptions;
using fakes::FakeModelPlugin;

// A batch of one sample whose value is `value`.
struct Batch {
  float value;
  int64_t shape[1] = {1};
  DLTensor tensor() { return HostTensor(&value, DLDataType{kDLFloat, 32, 1}, 1, shape); }
};

float TrainOn(Model& model, float value) {
  Batch batch{value};
  float loss = 0.0f;
  EXPECT_TRUE(model.TrainStep(batch.tensor(), batch.tensor(), &loss).ok());
  return loss;
}

std::vector<float> ValuesOf(const std::vector<HostParameter>& parameters) {
  std::vector<float> values;
  for (const HostParameter& p : parameters)
    values.insert(values.end(), p.value, p.value + p.elements);
  return values;
}

TEST(Placements, InPlaceScalesTheModelsOwnGradients) {
  FakeModel fake = FakeModelPlugin(FakeModelOptions{{3, 2}, false, false});
  std::unique_ptr<Model> model = fakes::CreateFakeModel(fake.plugin);
  Result<std::unique_ptr<InPlacePlacement>> placement = InPlacePlacement::Create(*model);
  ASSERT_TRUE(placement.ok()) << placement.status().message();
  fakes::FakeModelState& state = *fake.instances->front();
  EXPECT_EQ((*placement)->parameters()[1].value, state.values[1].data());
  TrainOn(*model, 2.0f);
  const std::vector<float> before = state.gradients[0];
  Result<float> left = (*placement)->TakeGradients(0.5f, nullptr);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 1.0f);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(state.gradients[0][i], before[i] * 0.5f);
}

TEST(Placements, AHostCopyReadsTheGradientsAndWritesTheValuesBack) {
  FakeModel fake = FakeModelPlugin(FakeModelOptions{{3, 2}, true, false});
  std::unique_ptr<Model> model = fakes::CreateFakeModel(fake.plugin);
  Result<std::unique_ptr<HostCopyPlacement>> placement = HostCopyPlacement::Create(*model, 1);
  ASSERT_TRUE(placement.ok()) << placement.status().message();
  Result<std::unique_ptr<Collectives>> one = OpenCollectives(Membership{});
  ASSERT_TRUE((*placement)->BroadcastValues(**one).ok());
  fakes::FakeModelState& state = *fake.instances->front();
  const std::vector<HostParameter>& parameters = (*placement)->parameters();
  EXPECT_NE(parameters[0].value, state.values[0].data()) << "a copy";
  EXPECT_EQ(parameters[0].value[2], state.values[0][2]);
  TrainOn(*model, 1.0f);
  StepProfile profile;
  Result<float> left = (*placement)->TakeGradients(0.25f, &profile);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 1.0f);
  EXPECT_EQ(parameters[1].gradient[1], state.gradients[1][1] * 0.25f);
  parameters[1].value[0] = 42.0f;
  ASSERT_TRUE((*placement)->Publish(&profile).ok());
  EXPECT_EQ(state.values[1][0], 42.0f);
}

TEST(Placements, ValuesOnTheDeviceAreReadOnlyWhenAskedAndTheFactorIsLeftToTheModel) {
  FakeModel fake = FakeModelPlugin(FakeModelOptions{{4}, true, true});
  std::unique_ptr<Model> model = fakes::CreateFakeModel(fake.plugin);
  ASSERT_TRUE(model->Has(ModelCapability::kDeviceOptimizer));
  Result<std::unique_ptr<DeviceValuesPlacement>> placement = DeviceValuesPlacement::Create(*model);
  ASSERT_TRUE(placement.ok());
  fakes::FakeModelState& state = *fake.instances->front();
  Result<float> left = (*placement)->TakeGradients(0.5f, nullptr);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 0.5f);
  EXPECT_EQ((*placement)->parameters()[0].value[3], 0.0f) << "not read yet";
  ASSERT_TRUE((*placement)->RefreshHostValues().ok());
  EXPECT_EQ((*placement)->parameters()[0].value[3], state.values[0][3]);
}

// A device model whose memory the backend cannot reach: rank 0's values reach rank 1's model
// through the host copy.
TEST(Placements, HostSumsBroadcastThroughHostMemory) {
  FakeModel fake = FakeModelPlugin(FakeModelOptions{{6}, true, false});
  fakes::ThreadWorld world(2);
  std::vector<float> values(2);
  world.RunRanks([&](int rank) {
    std::unique_ptr<Model> model = fakes::CreateFakeModel(fake.plugin);
    std::unique_ptr<Backend> backend = world.BackendOf(rank);
    CommunicationThread thread;
    BackendCollectives collectives(*backend, thread, rank, 2);
    Result<std::unique_ptr<HostSumsPlacement>> placement = HostSumsPlacement::Create(*model, 1);
    ASSERT_TRUE(placement.ok());
    dpl_parameter first{};
    ASSERT_TRUE(model->Parameter(0, &first).ok());
    HostData<float>(first.value)[5] = 10.0f + float(rank);
    ASSERT_TRUE((*placement)->BroadcastValues(collectives).ok());
    values[size_t(rank)] = HostData<float>(first.value)[5];
  });
  EXPECT_EQ(values, (std::vector<float>{10.0f, 10.0f}));
}

// What one rank of `size` ends with after `steps` steps of `config` on batches of rank + 1.
struct RankRun {
  std::vector<float> values;
  std::vector<float> first_gradients;  // after the first step's reduction
  int zeroed = 0;
};

void TrainRank(fakes::ThreadWorld& world, const FakeModel& fake, const TrainingConfig& config,
               const PlacementSettings& settings, int rank, int steps, RankRun* run) {
  std::unique_ptr<Model> model = fakes::CreateFakeModel(fake.plugin);
  std::unique_ptr<Backend> backend = world.BackendOf(rank);
  CommunicationThread thread;
  BackendCollectives collectives(*backend, thread, rank, world.size());
  PlacementSettings mine = settings;
  mine.rank = rank;
  Result<StepParts> parts = PlaceParameters(*model, collectives, mine);
  ASSERT_TRUE(parts.ok()) << parts.status().message();
  ASSERT_TRUE(AddOptimizer(config, StepPlan(config, steps), *model, rank, 1, &*parts).ok());
  StepProfile profile;
  const float scale = 1.0f / float(world.size());
  for (int step = 0; step < steps; ++step) {
    parts->reducer->BeginStep(scale);
    Batch batch{float(rank + 1)};
    float loss = 0.0f;
    const Status forward = model->TrainStep(batch.tensor(), batch.tensor(), &loss);
    Result<float> factor = parts->reducer->Finish(forward, scale, &profile);
    ASSERT_TRUE(factor.ok()) << factor.status().message();
    if (step == 0) {
      for (const HostRun& r : parts->reducer->share().updated()) {
        if (r.gradient == nullptr) continue;  // on the model's device
        run->first_gradients.insert(run->first_gradients.end(), r.gradient,
                                    r.gradient + r.run.elements);
      }
    }
    ASSERT_TRUE(parts->optimizer->Step(step, *factor).ok());
    ASSERT_TRUE(parts->reducer->PublishParts(&profile).ok());
    ASSERT_TRUE(parts->placement->Publish(&profile).ok());
    ASSERT_TRUE(parts->reducer->ResetGradients(&profile).ok());
  }
  ASSERT_TRUE(parts->reducer->Detach().ok());
  run->values = ValuesOf(parts->placement->parameters());
}

std::vector<RankRun> TrainTwoRanks(const TrainingConfig& config, bool sharded) {
  FakeModel fake = FakeModelPlugin(FakeModelOptions{{4099, 7, 5000}, false, false});
  fakes::ThreadWorld world(2);
  PlacementSettings settings;
  settings.world_size = 2;
  settings.shard_optimizer = sharded;
  settings.local_reduce = LocalReduce::kBackend;
  std::vector<RankRun> runs(2);
  world.RunRanks([&](int rank) { TrainRank(world, fake, config, settings, rank, 3, &runs[rank]); });
  return runs;
}

TrainingConfig AdamClipped() {
  TrainingConfig config;
  config.optimizer.kind = OptimizerKind::kAdam;
  config.optimizer.learning_rate = 0.01;
  config.clip_grad_norm = 0.5;
  config.evaluate = false;
  return config;
}

// The reducer leaves every rank the average of the ranks' gradients; both update alike.
TEST(Step, TwoRanksAverageTheirGradientsAndStayIdentical) {
  const std::vector<RankRun> runs = TrainTwoRanks(AdamClipped(), false);
  ASSERT_EQ(runs[0].values.size(), 4099u + 7 + 5000);
  EXPECT_EQ(runs[0].values, runs[1].values);
  EXPECT_EQ(runs[0].first_gradients, runs[1].first_gradients);
  // Parameter 0, element 3: (1 + 2) / 2 times (0 + 1), plus half the initial value and 0.003.
  const float value = std::sin(3.0f);
  const float expected =
      (1.0f * 1.0f + 0.5f * value + 0.003f + 2.0f * 1.0f + 0.5f * value + 0.003f);
  EXPECT_FLOAT_EQ(runs[0].first_gradients[3], expected * 0.5f);
}

// Note [Sharded optimizer]: each rank updates its part only, through the backend's
// reduce-scatter and gather, and ends with the bits of the unsharded run.
TEST(Step, TheShardedOptimizerGivesTheBitsOfTheUnshardedOne) {
  const std::vector<RankRun> whole = TrainTwoRanks(AdamClipped(), false);
  const std::vector<RankRun> sharded = TrainTwoRanks(AdamClipped(), true);
  EXPECT_EQ(sharded[0].values, sharded[1].values);
  ASSERT_EQ(sharded[0].values.size(), whole[0].values.size());
  EXPECT_EQ(std::memcmp(sharded[0].values.data(), whole[0].values.data(),
                        whole[0].values.size() * sizeof(float)),
            0);
}

// Where the model runs its optimizer, the reducer leaves it the average's factor and the runner
// hands it over; the host copies nothing.
TEST(Step, TheModelsOwnOptimizerGetsTheAveragesFactor) {
  FakeModel fake = FakeModelPlugin(FakeModelOptions{{3}, true, true});
  fakes::ThreadWorld world(2);
  TrainingConfig config;
  config.optimizer.kind = OptimizerKind::kSgd;
  config.optimizer.learning_rate = 0.1;
  PlacementSettings settings;
  settings.world_size = 2;
  settings.mirror_parameters = true;  // the host copy's path: a model the host cannot update
  std::vector<RankRun> runs(2);
  world.RunRanks([&](int rank) { TrainRank(world, fake, config, settings, rank, 2, &runs[rank]); });
  for (const std::unique_ptr<fakes::FakeModelState>& state : *fake.instances) {
    EXPECT_EQ(state->applied, 2);
    EXPECT_EQ(state->factor, 0.5);
    EXPECT_EQ(state->zeroed, 2);
  }
  EXPECT_EQ((*fake.instances)[0]->values, (*fake.instances)[1]->values);
}

// An exchange of two ranks' parts whose other rank is played by the test: this rank holds part 1
// of one bucket, the other rank's overflow flag and piece sums are added to this one's.
class FakeExchange final : public fakes::SummedPart {
 public:
  FakeExchange(const std::vector<size_t>& sizes, std::vector<float>* gradients)
      : SummedPart(ShardLayout(sizes, AssignBuckets(sizes, 1 << 30), 2), 1, gradients) {}
  std::string Describe() const override { return "a fake exchange"; }
  Status ShareEntries(std::vector<double>* values) override {
    (*values)[0] += other_overflowed ? 1.0 : 0.0;
    (*values)[2] += other_piece_sum;  // the other part's one piece
    ++shared;
    return Status::Ok();
  }
  Status GatherParts(const std::function<const float*(const ParameterRun&)>&,
                     const std::function<float*(const ParameterRun&)>&, bool) override {
    ++gathered;
    return Status::Ok();
  }

  bool other_overflowed = false;
  double other_piece_sum = 0.0;
  int shared = 0, gathered = 0;
};

// Two parameters of one piece each: part 0 is parameter 0, part 1 (this rank's) parameter 1.
struct ShardedRank {
  std::vector<size_t> sizes = {4096, 4};
  std::vector<float> values = std::vector<float>(4100, 1.0f);
  std::vector<float> gradients = {3.0f, 0.0f, 0.0f, 4.0f};  // this rank's part, averaged
  std::vector<int64_t> shapes = {4096, 4};
  std::vector<HostParameter> parameters;
  FakeExchange exchange{sizes, &gradients};
  ShardedRank() {
    for (size_t p = 0; p < sizes.size(); ++p) {
      HostParameter parameter;
      parameter.name = "p" + std::to_string(p);
      parameter.elements = sizes[p];
      parameter.value = values.data() + (p == 0 ? 0 : 4096);
      parameter.model_value =
          HostTensor(parameter.value, DLDataType{kDLFloat, 32, 1}, 1, &shapes[p]);
      parameters.push_back(parameter);
    }
  }
};

Result<std::unique_ptr<OptimizerRunner>> SgdOn(ShardedRank& rank, const TrainingConfig& config,
                                               std::unique_ptr<UpdateShare>* share) {
  *share = ShareOf(rank.parameters, rank.exchange);
  return HostOptimizerRunner(config, rank.parameters, **share, StepPlan(config, 4), 1, nullptr);
}

// Note [Same skip decision on every rank]: an overflow in another rank's part skips this rank's
// step too.
TEST(ShardedUpdate, AnOverflowInAnotherRanksPartSkipsTheStepEverywhere) {
  ShardedRank rank;
  rank.exchange.other_overflowed = true;
  TrainingConfig config;
  config.optimizer.kind = OptimizerKind::kSgd;
  config.optimizer.learning_rate = 0.5;
  config.precision = Precision::kFp16;
  config.loss_scaling.init_scale = 1.0;
  std::unique_ptr<UpdateShare> share;
  Result<std::unique_ptr<OptimizerRunner>> runner = SgdOn(rank, config, &share);
  ASSERT_TRUE(runner.ok()) << runner.status().message();
  EXPECT_TRUE(share->sharded());
  ASSERT_EQ(share->updated().size(), 1u);
  EXPECT_EQ(share->updated()[0].run.parameter, 1u);
  Result<StepDecision> decision = (*runner)->Step(0, 1.0f);
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(*decision, StepDecision::kSkip);
  EXPECT_EQ(rank.exchange.shared, 1);
  EXPECT_EQ(rank.values[4096 + 3], 1.0f) << "not updated";
}

// --clip-grad-norm clips by the norm of every rank's parts: this one's 3-4 (25) and the other's
// 75 make 10, so a maximum of 5 halves the gradients.
TEST(ShardedUpdate, ClippingUsesTheNormOfEveryRanksParts) {
  ShardedRank rank;
  rank.exchange.other_piece_sum = 75.0;
  TrainingConfig config;
  config.optimizer.kind = OptimizerKind::kSgd;
  config.optimizer.learning_rate = 1.0;
  config.clip_grad_norm = 5.0;
  std::unique_ptr<UpdateShare> share;
  Result<std::unique_ptr<OptimizerRunner>> runner = SgdOn(rank, config, &share);
  ASSERT_TRUE(runner.ok()) << runner.status().message();
  ASSERT_TRUE((*runner)->Step(0, 1.0f).ok());
  EXPECT_FLOAT_EQ(rank.gradients[0], 1.5f);
  EXPECT_FLOAT_EQ(rank.gradients[3], 2.0f);
  EXPECT_FLOAT_EQ(rank.values[4096], 1.0f - 1.5f);
  EXPECT_EQ(rank.values[0], 1.0f) << "the other rank's part is the other rank's to update";
  OptimizerState state;
  ASSERT_TRUE((*runner)->WholeState({4096, 4}, true, &state).ok());
  EXPECT_EQ(rank.exchange.gathered, 1) << "sgd's one state gathered from the other rank";
}

}  // namespace
}  // namespace dpl::training
