// The host's view of the data (training/data.hpp) on real dataset plugins: the typed input and
// target of a split, typed fills, the validation split opened when the run evaluates while
// training, and the refusal of data a model of model ABI v1..v3 cannot take.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "plugin_host/plugin_host.hpp"
#include "support/idx_writer.hpp"
#include "training/data.hpp"

namespace dpl::training {
namespace {

namespace fs = std::filesystem;

const std::string kPluginDir = DPL_TEST_PLUGIN_DIR;

class DataSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl-data-split-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The plugin libdpl_dataset_<name>.so of the build, kept loaded for the test.
  DatasetPlugin Plugin(const std::string& name) {
    auto loaded = plugin_host::LoadPluginFile(kPluginDir + "/libdpl_dataset_" + name + ".so");
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    loaded_.push_back(*loaded);
    return {loaded_.back().dataset, plugin_host::LabelOf(loaded_.back())};
  }
  TrainingConfig Config(const std::string& format, const std::string& options) const {
    TrainingConfig config;
    config.data_format = format;
    config.data_dir = dir_.string();
    config.data_options = options;
    return config;
  }
  void WriteIds(const std::string& name, int count, int first) const {
    std::vector<uint16_t> ids(size_t(count), 0);
    for (int i = 0; i < count; ++i) ids[size_t(i)] = uint16_t(first + i);
    std::ofstream(dir_ / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(2 * ids.size()));
  }

  fs::path dir_;
  std::vector<plugin_host::LoadedPlugin> loaded_;
};

DLTensor HostTensor(void* data, DLDataType dtype, std::vector<int64_t>& shape) {
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = {kDLCPU, 0};
  tensor.ndim = int32_t(shape.size());
  tensor.dtype = dtype;
  tensor.shape = shape.data();
  return tensor;
}

TEST_F(DataSplitTest, TokenWindowsAreTypedAndFilled) {
  WriteIds("train.bin", 41, 0);
  WriteIds("val.bin", 21, 100);
  TrainingConfig config = Config("tokens", "block=4");
  auto data = OpenTrainingData(Plugin("tokens"), config, 2);
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ(data->validation, nullptr) << "opened without eval_every";
  ASSERT_NE(data->test, nullptr);
  const DataSplit& train = *data->train;
  EXPECT_EQ(TensorText(train.input()), "int64 (4)");
  EXPECT_EQ(TensorText(train.target()), "int64 (4)");
  EXPECT_EQ(train.sample_shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(train.SampleElements(), 4);
  EXPECT_EQ(ElementsOf(train.target()), 4);
  EXPECT_EQ(train.count(), 9);          // (41 - 1) / 4 - 1
  EXPECT_EQ(train.num_classes(), 121);  // val.bin's largest id + 1
  EXPECT_FALSE(train.IsClassification());
  config.eval_every = 10;
  data = OpenTrainingData(Plugin("tokens"), config, 2);
  ASSERT_TRUE(data.ok()) << data.status().message();
  ASSERT_NE(data->validation, nullptr);
  DataSplit& validation = *data->validation;
  EXPECT_EQ(validation.count(), 5);  // (21 - 1) / 4
  std::vector<int64_t> input(8), target(8), shape{2, 4};
  const int64_t indices[] = {4, 1};
  ASSERT_TRUE(validation
                  .Fill(indices, 3, HostTensor(input.data(), {kDLInt, 64, 1}, shape),
                        HostTensor(target.data(), {kDLInt, 64, 1}, shape))
                  .ok());
  EXPECT_EQ(input, (std::vector<int64_t>{116, 117, 118, 119, 104, 105, 106, 107}));
  EXPECT_EQ(target, (std::vector<int64_t>{117, 118, 119, 120, 105, 106, 107, 108}));
}

TEST_F(DataSplitTest, AModelOfImagesAndLabelsRefusesTokenData) {
  WriteIds("train.bin", 41, 0);
  WriteIds("val.bin", 21, 0);
  TrainingConfig config = Config("tokens", "block=4");
  config.eval_every = 1;  // opens the validation split too
  auto data = OpenTrainingData(Plugin("tokens"), config, 1);
  ASSERT_TRUE(data.ok()) << data.status().message();
  ASSERT_NE(data->validation, nullptr);
  const int64_t shape[] = {4};
  const Status refused = CheckDataFitsModel(*data->train, "mlp", 1, shape, 64);
  EXPECT_EQ(refused.code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(refused.message(),
            "wrong sample type: the model 'mlp' takes float32 samples with one int64 label each, "
            "but the tokens data at " +
                dir_.string() +
                " has samples of int64 (4) with targets of int64 (4); use data that fits the "
                "model or another --model");
  // Other splits are named: a plugin may decide their shape apart from the training split's.
  EXPECT_EQ(CheckDataFitsModel(*data->validation, "mlp", 1, shape, 64).message(),
            "wrong sample type: the model 'mlp' takes float32 samples with one int64 label each, "
            "but the tokens data at " +
                dir_.string() +
                " (its validation split) has samples of int64 (4) with targets of int64 (4); use "
                "data that fits the model or another --model");
}

TEST_F(DataSplitTest, ImagesAreFloat32WithOneLabelAndTheirTestPartValidates) {
  using ::dpl::testing::IdxImages;
  using ::dpl::testing::IdxLabels;
  ::dpl::testing::WriteRaw((dir_ / "train-images-idx3-ubyte").string(), IdxImages(8, 28, 28));
  ::dpl::testing::WriteRaw((dir_ / "train-labels-idx1-ubyte").string(), IdxLabels(8));
  ::dpl::testing::WriteRaw((dir_ / "t10k-images-idx3-ubyte").string(), IdxImages(3, 28, 28));
  ::dpl::testing::WriteRaw((dir_ / "t10k-labels-idx1-ubyte").string(), IdxLabels(3));
  TrainingConfig config = Config("idx", "");
  config.eval_every = 1;
  auto data = OpenTrainingData(Plugin("idx"), config, 1);
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ(TensorText(data->train->input()), "float32 (1, 28, 28)");
  EXPECT_EQ(TensorText(data->train->target()), "int64 ()");
  EXPECT_TRUE(data->train->IsClassification());
  ASSERT_NE(data->validation, nullptr);
  EXPECT_EQ(data->validation->count(), 3);
  const int64_t shape[] = {1, 28, 28};
  EXPECT_TRUE(CheckDataFitsModel(*data->validation, "convnet", 3, shape, 10).ok());
}

}  // namespace
}  // namespace dpl::training
