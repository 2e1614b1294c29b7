// A model ABI version that only the tests know (model_v99.h: config, info and entries rearranged,
// one `step` for both modes, per-sample losses) is loaded and trained once its adapter
// (model_v99_adapter.cpp) is registered.
//
// How this shows that a new ABI version needs nothing outside plugin_host/: the test links the
// launcher's libraries as they are (dpl_plugin_host, dpl_training, dpl_worker), which know
// nothing of version 99; what is new lives in this folder: the ABI's header, a plugin of it and
// its adapter, added with RegisterAdapter at run time. The plugin is then found the way a worker
// finds its model (DiscoverPlugins, FindPlugin, worker::ModelPluginOf) and trained by the
// worker's own training loop (training::RunTraining) on real IDX files read by the idx plugin:
// the steps, the evaluation, a checkpoint holding the plugin's random state (a capability the
// adapter converts), the host's state dict for --export. What the plugin lacks is refused by
// capability, in the messages every older plugin gets.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "dpl/torch_files/torch_archive.hpp"
#include "model_abi_v99/model_v99_adapter.hpp"
#include "plugin_host/plugin_host.hpp"
#include "support/idx_writer.hpp"
#include "training/checkpoint.hpp"
#include "training/trainer.hpp"
#include "worker/worker_session.hpp"

namespace dpl::plugin_host {
namespace {

namespace fs = std::filesystem;

const std::string kV99Dir = DPL_TEST_V99_MODEL_DIR;
const std::string kV99Plugin = kV99Dir + "/libdpl_test_model_v99.so";
const std::string kIdx = std::string(DPL_TEST_PLUGIN_DIR) + "/libdpl_dataset_idx.so";

class ModelAbiV99Test : public ::testing::Test {
 protected:
  // Each test process: what the stock host says of the plugin, then the adapter added, and the
  // plugin kept loaded so that its counts (PluginCounts) last.
  static void SetUpTestSuite() {
    auto before = LoadPluginFile(kV99Plugin);
    refusal_ = before.ok() ? "loaded" : before.status().message();
    const Status registered = RegisterAdapter(testing::ModelV99Adapter());
    ASSERT_TRUE(registered.ok()) << registered.message();
    auto kept = LoadPluginFile(kV99Plugin);
    ASSERT_TRUE(kept.ok()) << kept.status().message();
    kept_ = new LoadedPlugin(std::move(*kept));
  }
  static void TearDownTestSuite() {
    delete kept_;
    kept_ = nullptr;
  }

  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dpl_model_v99_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    Write("train-images-idx3-ubyte", dpl::testing::IdxImages(64, 28, 28));
    Write("train-labels-idx1-ubyte", dpl::testing::IdxLabels(64));
    Write("t10k-images-idx3-ubyte", dpl::testing::IdxImages(16, 28, 28));
    Write("t10k-labels-idx1-ubyte", dpl::testing::IdxLabels(16));
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::ofstream(dir_ / "data" / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }

  training::TrainingConfig Config() const {
    training::TrainingConfig config;
    config.model = "v99";
    config.data_dir = (dir_ / "data").string();
    config.batch_size = 16;
    config.progress = false;
    config.log_interval = 1000;
    config.checkpoint_dir = (dir_ / "checkpoints").string();
    config.export_file = (dir_ / "exported.pt").string();
    return config;
  }

  // Trains `config` as a worker of a one-rank job does, with the v99 plugin as its model.
  Status Train(const training::TrainingConfig& config) const {
    auto discovery = DiscoverPlugins({kV99Dir});
    if (!discovery.ok()) return discovery.status();
    auto model = FindPlugin(*discovery, DPL_PLUGIN_KIND_MODEL, config.model);
    if (!model.ok()) return model.status();
    auto idx = LoadPluginFile(kIdx);
    if (!idx.ok()) return idx.status();
    auto data = training::OpenTrainingData({idx->dataset, LabelOf(*idx)}, config, 1);
    if (!data.ok()) return data.status();
    auto one_rank = training::OpenCollectives(training::Membership{});
    if (!one_rank.ok()) return one_rank.status();
    return training::RunTraining(config, training::WorkerIdentity{}, worker::ModelPluginOf(*model),
                                 *data, **one_rank);
  }

  static std::string refusal_;
  static LoadedPlugin* kept_;
  fs::path dir_;
};

std::string ModelAbiV99Test::refusal_;
LoadedPlugin* ModelAbiV99Test::kept_ = nullptr;

// What the plugin reports it was asked to do in this process (its dpl_model_v99_counts).
struct Counts {
  int64_t train_steps = -1;
  int64_t eval_samples = -1;
};
Counts PluginCounts() {
  Counts counts;
  void* library = ::dlopen(kV99Plugin.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return counts;
  using CountsFn = void (*)(int64_t*, int64_t*);
  if (auto read = reinterpret_cast<CountsFn>(::dlsym(library, "dpl_model_v99_counts"))) {
    read(&counts.train_steps, &counts.eval_samples);
  }
  ::dlclose(library);
  return counts;
}

TEST_F(ModelAbiV99Test, RefusedUntilItsAdapterIsRegistered) {
  EXPECT_EQ(refusal_, kV99Plugin +
                          ": model plugin ABI v99 is newer than this launcher supports (v1..v4); "
                          "upgrade the launcher or rebuild the plugin against SDK v4");
  auto plugin = LoadPluginFile(kV99Plugin);
  ASSERT_TRUE(plugin.ok()) << plugin.status().message();
  EXPECT_EQ(plugin->abi_version, 99u);
  EXPECT_EQ(plugin->name, "v99");
  ASSERT_NE(plugin->model, nullptr);
  EXPECT_EQ(plugin->model->abi, "model ABI v99");
  EXPECT_TRUE(plugin->model->Has(ModelCapability::kRngState));
  EXPECT_FALSE(plugin->model->Has(ModelCapability::kHostCopy));
  EXPECT_EQ(SupportedAbiText(),
            "backend ABI v1..v5, model ABI v1..v4, v99..v99, dataset ABI v1..v2");
  EXPECT_EQ(RegisterAdapter(testing::ModelV99Adapter()).message(),
            "an adapter for model ABI v99 is registered already");
}

TEST_F(ModelAbiV99Test, TrainsThroughTheWorkersTrainingLoop) {
  const Counts before = PluginCounts();
  const Status trained = Train(Config());
  ASSERT_TRUE(trained.ok()) << trained.message();
  const Counts after = PluginCounts();
  EXPECT_EQ(after.train_steps - before.train_steps, 4);  // 64 samples in batches of 16
  EXPECT_EQ(after.eval_samples - before.eval_samples, 16);
  auto newest = training::NewestCheckpoint(Config().checkpoint_dir);
  ASSERT_TRUE(newest.ok()) << newest.status().message();
  auto checkpoint = training::ReadCheckpoint(*newest);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
  EXPECT_EQ(checkpoint->global_step, 4);
  // The random state is the plugin's step count, as bytes through the adapter.
  uint64_t random_state = 0;
  ASSERT_EQ(checkpoint->rng_state.size(), sizeof random_state);
  std::memcpy(&random_state, checkpoint->rng_state.data(), sizeof random_state);
  EXPECT_EQ(random_state, 4u);
  ASSERT_EQ(checkpoint->model.size(), 2u);
  EXPECT_EQ(checkpoint->model[0].name, "fc.weight");
  EXPECT_EQ(checkpoint->model[1].name, "fc.bias");
  EXPECT_TRUE(fs::is_regular_file(Config().export_file));
}

// --init-from through the host's state dict (the plugin has no state files of its own): what the
// file holds beyond the model's parameters is named, not silently dropped.
TEST_F(ModelAbiV99Test, InitFromNamesTheEntriesItDoesNotRead) {
  ASSERT_TRUE(Train(Config()).ok());
  auto exported = torch_files::ReadTorchArchive(Config().export_file);
  ASSERT_TRUE(exported.ok()) << exported.status().message();
  torch_files::TorchValue::Entries entries;
  for (const auto& entry : exported->AsDict()->entries())
    entries.emplace_back(entry.key, entry.value);
  entries.emplace_back(
      std::string("bn.running_mean"),
      torch_files::TorchValue::Tensor(torch_files::TorchTensor::Of<float>({1}, {0.f})));
  const std::string file = (dir_ / "with-a-buffer.pt").string();
  ASSERT_TRUE(
      torch_files::WriteTorchArchive(file, torch_files::TorchValue::OrderedDict(std::move(entries)))
          .ok());
  training::TrainingConfig config = Config();
  config.init_from = file;
  config.checkpoint_dir = (dir_ / "fine-tuned").string();
  ::testing::internal::CaptureStderr();
  const Status trained = Train(config);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(trained.ok()) << trained.message();
  EXPECT_NE(log.find(file + " holds 1 entry that is not the model's parameters, not read: "
                            "'bn.running_mean' (--init-from reads"),
            std::string::npos)
      << log;
}

TEST_F(ModelAbiV99Test, WhatItLacksIsRefusedByCapability) {
  const Counts before = PluginCounts();
  training::TrainingConfig mirrored = Config();
  mirrored.mirror_parameters = true;
  EXPECT_EQ(Train(mirrored).message(),
            "model 'v99' is a model ABI v99 plugin, which trains on the CPU with its parameters "
            "updated in place; rebuild it against the dpl SDK (model ABI v2) for "
            "--mirror-parameters");
  training::TrainingConfig bf16 = Config();
  bf16.precision = training::Precision::kBf16;
  EXPECT_EQ(Train(bf16).message(),
            "model 'v99' is a model ABI v99 plugin, which computes in float32 only; --precision "
            "bf16 needs a plugin built against the dpl SDK's model ABI v3 (or use --precision "
            "fp32)");
  EXPECT_EQ(PluginCounts().train_steps, before.train_steps);  // refused before any step
}

}  // namespace
}  // namespace dpl::plugin_host
