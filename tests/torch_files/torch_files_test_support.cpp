#include "torch_files_test_support.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "dpl/torch_files/zip_archive.hpp"

namespace dpl::torch_files::testing {

std::string operator""_b(const char* text, size_t size) {
  return std::string(text, size);
}

std::string Le32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out += char(v >> (8 * i));
  return out;
}

void WriteRawArchive(const std::string& path, const std::string& name, const std::string& pickle,
                     const std::vector<std::string>& storages, const std::string& version) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ZipWriter zip(fd, path);
  ASSERT_TRUE(zip.Add(name + "/data.pkl", pickle.data(), pickle.size()).ok());
  for (size_t i = 0; i < storages.size(); ++i) {
    ASSERT_TRUE(
        zip.Add(name + "/data/" + std::to_string(i), storages[i].data(), storages[i].size()).ok());
  }
  if (!version.empty()) {
    ASSERT_TRUE(zip.Add(name + "/version", version.data(), version.size()).ok());
  }
  ASSERT_TRUE(zip.Finish().ok());
  ::close(fd);
}

TorchTensor F32(std::vector<int64_t> shape, std::vector<float> values) {
  return TorchTensor::Of<float>(std::move(shape), values);
}
TorchTensor Raw(TorchDtype dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  return TorchTensor{dtype, std::move(shape), std::move(bytes)};
}
TorchValue Str(const char* text) {
  return TorchValue::String(text);
}

TorchValue ModelStateDict() {
  return TorchValue::OrderedDict({
      {"0.weight", TorchValue::Tensor(F32({2, 3}, {0.5f, -1.25f, 2, 3, -4, 1e-3f}))},
      {"0.bias", TorchValue::Tensor(F32({2}, {0.25f, -0.75f}))},
      {"1.weight", TorchValue::Tensor(F32({2}, {1, 1.5f}))},
      {"1.bias", TorchValue::Tensor(F32({2}, {0, -0.5f}))},
      {"1.running_mean", TorchValue::Tensor(F32({2}, {0.1f, 0.2f}))},
      {"1.running_var", TorchValue::Tensor(F32({2}, {0.9f, 1.1f}))},
      {"1.num_batches_tracked", TorchValue::Tensor(TorchTensor::Of<int64_t>({}, {7}))},
  });
}

TorchValue CppCheckpoint() {
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  TorchValue::Entries ints;
  for (int64_t v : {int64_t(0), int64_t(255), int64_t(256), int64_t(65535), int64_t(65536),
                    int64_t(-1), int64_t(-129), int64_t(INT32_MIN), int64_t(INT32_MAX),
                    int64_t(INT32_MAX) + 1, int64_t(INT32_MIN) - 1, int64_t(1) << 40, kMin, kMax}) {
    ints.emplace_back("i" + std::to_string(ints.size()), TorchValue::Int(v));
  }
  return TorchValue::Dict({
      {"model", ModelStateDict()},
      {"dtypes",
       TorchValue::Dict({
           {"float64", TorchValue::Tensor(TorchTensor::Of<double>({2, 2}, {1, -2.5, 1e300, 0}))},
           {"float16", TorchValue::Tensor(
                           Raw(TorchDtype::kFloat16, {3}, {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b}))},
           {"bfloat16",
            TorchValue::Tensor(Raw(TorchDtype::kBFloat16, {2}, {0x80, 0x3f, 0x40, 0xc0}))},
           {"int64", TorchValue::Tensor(TorchTensor::Of<int64_t>({2}, {kMin, kMax}))},
           {"int32", TorchValue::Tensor(TorchTensor::Of<int32_t>({3}, {-5, 6, INT32_MAX}))},
           {"int16", TorchValue::Tensor(TorchTensor::Of<int16_t>({2}, {-300, 300}))},
           {"int8", TorchValue::Tensor(TorchTensor::Of<int8_t>({2}, {-128, 127}))},
           {"uint8", TorchValue::Tensor(TorchTensor::Of<uint8_t>({2}, {0, 255}))},
           {"bool", TorchValue::Tensor(TorchTensor::Of<bool>({3}, {true, false, true}))},
       })},
      {"shapes", TorchValue::Dict({
                     {"scalar", TorchValue::Tensor(F32({}, {3.5f}))},
                     {"empty", TorchValue::Tensor(F32({0}, {}))},
                     {"empty_3d", TorchValue::Tensor(F32({2, 0, 3}, {}))},
                     {"four_d", TorchValue::Tensor(F32({2, 1, 2, 3}, std::vector<float>(12, 2)))},
                 })},
      {"ints", TorchValue::Dict(std::move(ints))},
      {"floats",
       TorchValue::List({TorchValue::Float(0.5), TorchValue::Float(1e-300), TorchValue::Float(-0.0),
                         TorchValue::Float(INFINITY), TorchValue::Float(std::nan(""))})},
      {"name", Str("caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80")},
      {"empty_string", Str("")},
      {"flags", TorchValue::List({TorchValue::Bool(true), TorchValue::Bool(false), {}})},
      {"betas", TorchValue::Tuple({TorchValue::Float(0.9), TorchValue::Float(0.999)})},
      {"tuples", TorchValue::List({TorchValue::Tuple(), TorchValue::Tuple({TorchValue::Int(1)}),
                                   TorchValue::Tuple({TorchValue::Int(1), TorchValue::Int(2),
                                                      TorchValue::Int(3), TorchValue::Int(4)})})},
      {"empty_list", TorchValue::List()},
      {"nested",
       TorchValue::Dict({
           {"level", TorchValue::Int(1)},
           {"deeper", TorchValue::OrderedDict(
                          {{"level", TorchValue::Int(2)},
                           {"tensors", TorchValue::List({TorchValue::Tensor(F32({1}, {9})),
                                                         TorchValue::Tensor(F32({2}, {8, 7}))})}})},
           {int64_t(7), Str("int key")},
           {int64_t(-3), Str("negative int key")},
           {"empty_dict", TorchValue::Dict()},
           {"empty_ordered", TorchValue::OrderedDict()},
       })},
  });
}

}  // namespace dpl::torch_files::testing
