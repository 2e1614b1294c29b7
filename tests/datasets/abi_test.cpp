// What every dataset plugin shares through dataset ABI v2: its table, the checks of the config
// and of every fill's tensors and indices, what it describes, and its one exported symbol.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "dataset_loader.hpp"
#include "support/idx_writer.hpp"

namespace dpl::datasets::testing {
using ::dpl::testing::IdxImages;
using ::dpl::testing::IdxLabels;
using ::dpl::testing::WriteGz;
namespace {

std::vector<std::string> PluginNames() {
  std::vector<std::string> names = {"idx", "npy", "cifar10", "tokens", "text"};
  for (const char* optional : {"imagefolder", "webdataset"}) {  // built with libpng, libjpeg
    if (std::filesystem::exists(std::string(DPL_TEST_PLUGIN_DIR) + "/libdpl_dataset_" + optional +
                                ".so")) {
      names.push_back(optional);
    }
  }
  return names;
}

TEST(DatasetTables, EveryPluginHasAFullVersion2TableAndExportsOnlyIt) {
  for (const std::string& name : PluginNames()) {
    SCOPED_TRACE(name);
    const dpl_dataset_plugin_v2& table = Plugin(name);
    EXPECT_EQ(table.header.struct_size, sizeof(dpl_dataset_plugin_v2));
    EXPECT_EQ(table.header.magic, DPL_PLUGIN_MAGIC);
    EXPECT_EQ(table.header.kind, uint32_t(DPL_PLUGIN_KIND_DATASET));
    EXPECT_EQ(table.header.abi_version, DPL_DATASET_ABI_VERSION_2);
    EXPECT_EQ(table.header.name, name);
    EXPECT_STREQ(table.header.version, "1.0.0");
    EXPECT_NE(table.header.description, nullptr);
    EXPECT_TRUE(table.create && table.destroy && table.describe && table.fill && table.last_error);
    table.destroy(nullptr);  // ignored
    const std::string command = "nm -D --defined-only " + std::string(DPL_TEST_PLUGIN_DIR) +
                                "/libdpl_dataset_" + name + ".so 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string symbols;
    char line[512];
    while (std::fgets(line, sizeof line, pipe)) symbols += std::strrchr(line, ' ') + 1;
    ::pclose(pipe);
    EXPECT_EQ(symbols, "dpl_dataset_plugin_v2\n");
  }
}

class DatasetAbiTest : public ScratchTest {
 protected:
  void SetUp() override {
    ScratchTest::SetUp();
    WriteBytes(Path("train-images-idx3-ubyte"), IdxImages(6, 2, 3));
    WriteBytes(Path("train-labels-idx1-ubyte"), IdxLabels(6));
  }
  std::string CreateError(const dpl_dataset_config_v2* config) {
    const dpl_dataset_plugin_v2& idx = Plugin("idx");
    dpl_dataset* dataset = reinterpret_cast<dpl_dataset*>(this);
    EXPECT_EQ(idx.create(config, &dataset), DPL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(dataset, nullptr);
    return idx.last_error();
  }
};

TEST_F(DatasetAbiTest, ConfigChecks) {
  const Settings settings = At();
  dpl_dataset_config_v2 config = ConfigOf(settings);
  EXPECT_EQ(CreateError(nullptr), "dataset \"idx\": config is NULL");
  config.struct_size = 8;
  EXPECT_EQ(CreateError(&config),
            "dataset \"idx\": config struct_size 8 is smaller than "
            "dpl_dataset_config_v2 (" +
                std::to_string(sizeof(dpl_dataset_config_v2)) + ")");
  config = ConfigOf(settings);
  config.version = 1;
  EXPECT_EQ(CreateError(&config), "dataset \"idx\": config version 1 is not dataset ABI version 2");
  config = ConfigOf(settings);
  config.path = "";
  EXPECT_EQ(CreateError(&config),
            "dataset \"idx\": no data path; pass --data-dir with the folder holding the data");
  config = ConfigOf(settings);
  config.split = 3;
  EXPECT_EQ(CreateError(&config),
            "dataset \"idx\": config split 3 is not train (0), test (1) or validation (2)");
  config = ConfigOf(settings);
  config.num_threads = 0;
  EXPECT_EQ(CreateError(&config), "dataset \"idx\": config num_threads must be at least 1, got 0");
  config = ConfigOf(settings);
  config.options = "crop";
  EXPECT_EQ(CreateError(&config),
            "dataset \"idx\": --data-options entry \"crop\" is not key=value");
  EXPECT_EQ(Plugin("idx").create(&config, nullptr), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(Plugin("idx").last_error(), "dataset \"idx\": out is NULL");
  config = ConfigOf(settings);
  dpl_dataset* dataset = nullptr;
  ASSERT_EQ(Plugin("idx").create(&config, &dataset), DPL_OK);
  EXPECT_STREQ(Plugin("idx").last_error(), "");
  Plugin("idx").destroy(dataset);
}

TEST_F(DatasetAbiTest, DescribeChecksTheInfoSize) {
  Dataset dataset("idx", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  dpl_dataset_info_v2 info{};
  info.struct_size = 4;
  EXPECT_EQ(dataset.plugin().describe(dataset.get(), &info), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(dataset.plugin().last_error()),
            "dataset \"idx\": info struct_size 4 is smaller than dpl_dataset_info_v2 (" +
                std::to_string(sizeof(dpl_dataset_info_v2)) + ")");
  info = dataset.Info();
  EXPECT_EQ(info.input.ndim, 3u);
  EXPECT_EQ(info.input.shape[3], 0);
}

// The image plugins type their samples as classification: float32 input, one int64 label.
TEST_F(DatasetAbiTest, DescribeTypesAnImageAndItsLabel) {
  Dataset dataset("idx", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const dpl_dataset_info_v2 info = dataset.Info();
  EXPECT_EQ(info.reserved, 0u);
  EXPECT_EQ(info.input.dtype.code, kDLFloat);
  EXPECT_EQ(info.input.dtype.bits, 32);
  EXPECT_EQ(info.input.dtype.lanes, 1);
  EXPECT_EQ(ShapeOf(info.input), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(info.target.dtype.code, kDLInt);
  EXPECT_EQ(info.target.dtype.bits, 64);
  EXPECT_EQ(info.target.dtype.lanes, 1);
  EXPECT_EQ(info.target.ndim, 0u);
  EXPECT_EQ(info.target.shape[0], 0);
  EXPECT_EQ(info.count, 6);
  EXPECT_EQ(info.num_classes, 6);
}

// Data without a validation part of its own serves its test part for the validation split.
TEST_F(DatasetAbiTest, TheTestPartServesValidation) {
  WriteBytes(Path("t10k-images-idx3-ubyte"), IdxImages(4, 2, 3));
  WriteBytes(Path("t10k-labels-idx1-ubyte"), IdxLabels(4));
  Settings settings = At();
  settings.split = DPL_DATASET_SPLIT_TEST;
  Dataset test("idx", settings);
  settings.split = DPL_DATASET_SPLIT_VALIDATION;
  Dataset validation("idx", settings);
  ASSERT_TRUE(test.ok()) << test.error();
  ASSERT_TRUE(validation.ok()) << validation.error();
  EXPECT_EQ(validation.Info().count, 4);
  const Batch expected = test.FillAll(), got = validation.FillAll();
  EXPECT_EQ(got.input, expected.input);
  EXPECT_EQ(got.labels, expected.labels);
}

TEST_F(DatasetAbiTest, FillChecksTensorsAndIndices) {
  Dataset dataset("idx", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  std::vector<float> input(2 * 6);
  std::vector<int64_t> labels(2);
  int64_t input_shape[] = {2, 1, 2, 3};
  int64_t label_shape[] = {2};
  const std::vector<int64_t> indices = {5, 0};
  auto fill_error = [&](auto&& edit, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    DLTensor in{input.data(), {kDLCPU, 0}, 4, {kDLFloat, 32, 1}, input_shape, nullptr, 0};
    DLTensor out{labels.data(), {kDLCPU, 0}, 1, {kDLInt, 64, 1}, label_shape, nullptr, 0};
    std::vector<int64_t> positions = indices;
    edit(in, out, positions);
    const dpl_status status = dataset.plugin().fill(dataset.get(), positions.data(), 0, &in, &out);
    EXPECT_EQ(status, expected);
    return std::string(dataset.plugin().last_error());
  };
  EXPECT_EQ(fill_error([](DLTensor&, DLTensor&, std::vector<int64_t>&) {}, DPL_OK), "");
  EXPECT_EQ(labels, (std::vector<int64_t>{5, 0}));
  EXPECT_EQ(fill_error([](DLTensor& in, DLTensor&, auto&) {
              in.dtype = {kDLFloat, 64, 1};
            }),
            "dataset \"idx\": input has dtype float64; fill writes float32");
  EXPECT_EQ(fill_error([](DLTensor&, DLTensor& out, auto&) {
              out.dtype = {kDLInt, 32, 1};
            }),
            "dataset \"idx\": target has dtype int32; fill writes int64");
  EXPECT_EQ(fill_error([](DLTensor& in, DLTensor&, auto&) {
              in.device = {kDLCUDA, 0};
            }),
            "dataset \"idx\": input is on device type 2; fill writes host memory (kDLCPU or "
            "kDLCUDAHost)");
  EXPECT_EQ(fill_error([](DLTensor& in, DLTensor&, auto&) { in.ndim = 3; }),
            "dataset \"idx\": input has shape (2, 1, 2) but a batch of this dataset has shape (n, "
            "1, 2, 3)");
  int64_t strides[] = {1, 6, 3, 1};
  EXPECT_EQ(fill_error([&](DLTensor& in, DLTensor&, auto&) { in.strides = strides; }),
            "dataset \"idx\": input is not contiguous; pass a dense row-major tensor (call "
            ".contiguous() first)");
  int64_t three[] = {3};
  EXPECT_EQ(fill_error([&](DLTensor&, DLTensor& out, auto&) { out.shape = three; }),
            "dataset \"idx\": target has shape (3) but input holds 2 samples");
  int64_t two_by_one[] = {2, 1};
  EXPECT_EQ(fill_error([&](DLTensor&, DLTensor& out, auto&) {
              out.ndim = 2;
              out.shape = two_by_one;
            }),
            "dataset \"idx\": target has shape (2, 1) but a batch of this dataset has shape (n)");
  EXPECT_EQ(fill_error([](DLTensor&, DLTensor&, std::vector<int64_t>& at) { at[1] = 6; }),
            "dataset \"idx\": index 6 at position 1 is outside the 6 samples of the data");
  EXPECT_EQ(fill_error([](DLTensor&, DLTensor&, std::vector<int64_t>& at) { at[0] = -1; }),
            "dataset \"idx\": index -1 at position 0 is outside the 6 samples of the data");
  EXPECT_EQ(dataset.plugin().fill(dataset.get(), nullptr, 0, nullptr, nullptr),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(dataset.plugin().last_error(), "dataset \"idx\": input or target is NULL");
}

TEST_F(DatasetAbiTest, AnEmptyBatchNeedsNoIndices) {
  Dataset dataset("idx", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  std::vector<float> input(6);
  std::vector<int64_t> labels(1);
  int64_t empty_input[] = {0, 1, 2, 3};
  int64_t empty_labels[] = {0};
  DLTensor in{input.data(), {kDLCUDAHost, 0}, 4, {kDLFloat, 32, 1}, empty_input, nullptr, 0};
  DLTensor out{labels.data(), {kDLCPU, 0}, 1, {kDLInt, 64, 1}, empty_labels, nullptr, 0};
  EXPECT_EQ(dataset.plugin().fill(dataset.get(), nullptr, 0, &in, &out), DPL_OK);
}

}  // namespace
}  // namespace dpl::datasets::testing
