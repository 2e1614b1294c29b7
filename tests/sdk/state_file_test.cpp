// The state files of the SDK's libtorch helper (dpl/torch_model/state_file.hpp), which go through
// the SDK's torch_files library: what save_state writes is what that library (and so the
// launcher) reads, what load_state reads includes what only the launcher's reader used to read
// (LONG4), and each refusal keeps the helper's message. Python's side is tests/models.
#include "dpl/torch_model/state_file.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using dpl::torch_files::TorchTensor;
using dpl::torch_files::TorchValue;
using dpl::torch_model::NamedTensors;
using dpl::torch_model::PluginError;

class StateFileTest : public ::testing::Test {
 protected:
  StateFileTest() {
    std::string pattern = std::filesystem::temp_directory_path().string() + "/dpl-state-XXXXXX";
    dir_ = ::mkdtemp(pattern.data());
  }
  ~StateFileTest() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // What ReadStateFile throws for `path`, as a plugin entry would report it.
  std::string Refusal(const std::string& path, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    try {
      dpl::torch_model::ReadStateFile(path, "state file " + path);
    } catch (const PluginError& error) {
      EXPECT_EQ(error.status(), expected) << error.what();
      return error.what();
    }
    ADD_FAILURE() << path << " was read";
    return "";
  }

  std::string dir_;
};

// A zip archive in torch.save's layout holding `pickle` and `storages` as records of "archive".
void WriteArchive(const std::string& path, const std::string& pickle,
                  const std::vector<std::string>& storages) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  dpl::torch_files::ZipWriter zip(fd, path);
  ASSERT_TRUE(zip.Add("archive/data.pkl", pickle.data(), pickle.size()).ok());
  for (size_t i = 0; i < storages.size(); ++i) {
    const std::string name = "archive/data/" + std::to_string(i);
    ASSERT_TRUE(zip.Add(name, storages[i].data(), storages[i].size()).ok());
  }
  ASSERT_TRUE(zip.Add("archive/version", "3\n", 2).ok());
  ASSERT_TRUE(zip.Finish().ok());
  ::close(fd);
}

TEST_F(StateFileTest, WhatSaveStateWritesTheLibraryReadsBackExactly) {
  const NamedTensors tensors = {
      {"fc.weight", torch::arange(6, torch::kFloat32).reshape({2, 3}).t()},  // not contiguous
      {"bn.num_batches_tracked", torch::tensor(int64_t(7))},
      {"half", torch::tensor({1.5, -2.0}, torch::kBFloat16)},
      {"mask", torch::tensor({true, false, true})},
      {"empty", torch::empty({0, 4}, torch::kFloat64)}};
  const std::string path = Path("state.pt");
  dpl::torch_model::WriteStateDict(path, tensors);

  dpl::Result<TorchValue> raw = dpl::torch_files::ReadTorchArchive(path);
  ASSERT_TRUE(raw.ok()) << raw.status().message();
  ASSERT_NE(raw->AsDict(), nullptr);
  EXPECT_EQ(raw->AsDict()->python_type(), dpl::torch_files::TorchDict::PythonType::kDict);
  const TorchTensor* weight = raw->Find("fc.weight")->AsTensor();
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(weight->Values<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));

  const dpl::torch_model::StateFile read = dpl::torch_model::ReadStateFile(path, "state file");
  EXPECT_FALSE(read.writer.has_value());
  ASSERT_EQ(read.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(read.tensors[i].first, tensors[i].first);
    EXPECT_EQ(read.tensors[i].second.scalar_type(), tensors[i].second.scalar_type());
    EXPECT_TRUE(torch::equal(read.tensors[i].second, tensors[i].second)) << tensors[i].first;
  }
}

std::string Le32(uint32_t value) {
  std::string out;
  for (int i = 0; i < 4; ++i) out += char(value >> (8 * i));
  return out;
}
std::string Text(const std::string& text) {
  return "X" + Le32(uint32_t(text.size())) + text;
}
std::string Global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
std::string Long4(uint8_t value) {  // LONG4 of one byte
  return "\x8b" + Le32(1) + char(value);
}

TEST_F(StateFileTest, ReadsWhatOnlyTheLaunchersReaderReadBefore) {
  // {'w': tensor of size (2,)}: the root made by NEWOBJ, numel, offset, size and stride in LONG4.
  const std::string pickle = "\x80\x02" + Global("collections", "OrderedDict") + ")\x81(" +
                             Text("w") + Global("torch._utils", "_rebuild_tensor_v2") + "((" +
                             Text("storage") + Global("torch", "FloatStorage") + Text("0") +
                             Text("cpu") + Long4(2) + "tQ" + Long4(0) + "(" + Long4(2) + "t(" +
                             Long4(1) + "t\x89" + Global("collections", "OrderedDict") + ")RtRu.";
  const float values[] = {1.5f, -2.5f};
  const std::string path = Path("long4.pt");
  WriteArchive(path, pickle, {std::string(reinterpret_cast<const char*>(values), 8)});
  const dpl::torch_model::StateFile read = dpl::torch_model::ReadStateFile(path, "state file");
  ASSERT_EQ(read.tensors.size(), 1u);
  EXPECT_EQ(read.tensors[0].first, "w");
  EXPECT_TRUE(torch::equal(read.tensors[0].second, torch::tensor({1.5f, -2.5f})));
}

TEST_F(StateFileTest, RefusesWhatIsNoStateDictWithTheHelpersMessages) {
  const std::string list = Path("list.pt");
  ASSERT_TRUE(dpl::torch_files::WriteTorchArchive(list, TorchValue::List({})).ok());
  EXPECT_EQ(Refusal(list), "state file " + list + " holds a list, not a state dict {name: tensor}");
  const std::string ints = Path("int_keys.pt");
  ASSERT_TRUE(
      dpl::torch_files::WriteTorchArchive(
          ints,
          TorchValue::Dict({{int64_t(3), TorchValue::Tensor(TorchTensor::Of<float>({1}, {1.0f}))}}))
          .ok());
  EXPECT_EQ(Refusal(ints),
            "state file " + ints + " holds a dict with a int key; a state dict's keys are names");
  const std::string epoch = Path("epoch.pt");
  ASSERT_TRUE(
      dpl::torch_files::WriteTorchArchive(epoch, TorchValue::Dict({{"epoch", TorchValue::Int(3)}}))
          .ok());
  EXPECT_EQ(Refusal(epoch), "state file " + epoch +
                                " holds a dict whose entry \"epoch\" is a int, not a tensor; save "
                                "module.state_dict() itself");
  // The library's refusals, named as the helper names the file.
  const std::string global = Path("global.pt");
  WriteArchive(global, "\x80\x02" + Global("os", "system") + ".", {});
  EXPECT_EQ(Refusal(global),
            "state file " + global +
                ": archive/data.pkl calls the Python global 'os.system' (at byte 2), which is "
                "not part of a state dict; this reader runs no Python code and rebuilds only "
                "tensors, None, bools, ints, floats, strings, lists, tuples and dicts: save plain "
                "data, such as model.state_dict()");
  const std::string plain_zip = Path("plain.zip");
  {
    const int fd = ::open(plain_zip.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dpl::torch_files::ZipWriter zip(fd, plain_zip);
    ASSERT_TRUE(zip.Add("notes/readme.txt", "hi", 2).ok());
    ASSERT_TRUE(zip.Finish().ok());
    ::close(fd);
  }
  EXPECT_EQ(Refusal(plain_zip), "state file " + plain_zip +
                                    " is a zip archive with neither a torch.save pickle "
                                    "(data.pkl) nor a TorchScript module (constants.pkl)");
}

TEST_F(StateFileTest, RefusesToWriteATensorNoStateDictHolds) {
  const std::string path = Path("complex.pt");
  try {
    dpl::torch_model::WriteStateDict(path, {{"z", torch::zeros({2}, torch::kComplexFloat)}});
    ADD_FAILURE() << "a complex tensor was written";
  } catch (const PluginError& error) {
    EXPECT_EQ(error.status(), DPL_ERR_UNSUPPORTED);
    EXPECT_STREQ(error.what(), "a state dict cannot hold a tensor of ComplexFloat");
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  const std::string missing = Path("no/such/folder/state.pt");
  try {
    dpl::torch_model::WriteStateDict(missing, {{"w", torch::ones({1})}});
    ADD_FAILURE() << "a file was written into a missing folder";
  } catch (const PluginError& error) {
    EXPECT_EQ(error.status(), DPL_ERR_IO);
    EXPECT_EQ(std::string(error.what()), "cannot write state file " + missing + ": creating " +
                                             missing + ".tmp." + std::to_string(::getpid()) +
                                             " failed: No such file or directory");
  }
}

}  // namespace
