// A package of tools/compile_model.py read: its description (what it was made for, its
// parameters and buffers), their initial values, and the checks that refuse a package that
// cannot run here, each naming the file and the problem. The package's layout is
// tools/compiled_package.py's docstring.
#pragma once

#include <ATen/cpu/Utils.h>
#include <torch/headeronly/version.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dpl/torch_files/zip_archive.hpp"
#include "dpl/torch_model.hpp"

namespace dpl::compiled {
namespace {

using torch_model::InvalidArgument;
using torch_model::PluginError;
using torch_model::ShapeText;

constexpr int kPackageFormat = 1;
constexpr const char* kDescriptionRecord = "/dpl/description";
constexpr const char* kValuesRecord = "/dpl/initial_values";

// A parameter or buffer as the description lists it.
struct PackageTensor {
  std::string name;
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> shape;
  std::vector<std::string> aliases;  // a parameter's other names (a tied weight's)
  bool updated = false;              // a buffer the training step writes
};

struct PackageDescription {
  std::string file;
  std::map<std::string, std::vector<std::string>> facts;  // "key value..." lines
  std::vector<PackageTensor> parameters;
  std::vector<PackageTensor> buffers;

  // The first word of fact `key`, refusing a description without it.
  const std::string& Fact(const std::string& key) const {
    const auto found = facts.find(key);
    if (found == facts.end() || found->second.empty()) {
      throw InvalidArgument("package " + file + " says nothing of \"" + key +
                            "\"; make it again with tools/compile_model.py");
    }
    return found->second.front();
  }
};

inline c10::ScalarType DtypeNamed(const std::string& name, const std::string& file) {
  static const std::map<std::string, c10::ScalarType> kDtypes = {
      {"float32", c10::kFloat},  {"bfloat16", c10::kBFloat16}, {"float16", c10::kHalf},
      {"float64", c10::kDouble}, {"int64", c10::kLong},        {"int32", c10::kInt},
      {"uint8", c10::kByte},     {"bool", c10::kBool}};
  const auto found = kDtypes.find(name);
  if (found == kDtypes.end()) {
    throw InvalidArgument("package " + file + " lists a tensor of dtype \"" + name +
                          "\", which this plugin does not know");
  }
  return found->second;
}

// "[2,3]" -> {2, 3}; "[]" -> {}.
inline std::vector<int64_t> ShapeNamed(const std::string& text, const std::string& file) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') {
    throw InvalidArgument("package " + file + ": \"" + text + "\" is not a shape like [2,3]");
  }
  std::vector<int64_t> shape;
  std::stringstream extents(text.substr(1, text.size() - 2));
  std::string extent;
  while (std::getline(extents, extent, ',')) shape.push_back(std::stoll(extent));
  return shape;
}

// The record of the archive whose name ends with `suffix` (the archive's folder comes first).
inline const torch_files::ZipRecord& RecordEndingWith(const torch_files::ZipReader& zip,
                                                      const std::string& suffix) {
  for (const auto& record : zip.records()) {
    if (record.name.size() > suffix.size() &&
        record.name.compare(record.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return record;
    }
  }
  throw InvalidArgument("package " + zip.path() + " has no record " + suffix.substr(1) +
                        ": not a package of tools/compile_model.py (an AOTInductor package "
                        "of its own lacks dpl's description)");
}

inline std::vector<uint8_t> ReadRecord(const torch_files::ZipReader& zip,
                                       const std::string& suffix) {
  Result<std::vector<uint8_t>> bytes = zip.Read(RecordEndingWith(zip, suffix));
  if (!bytes.ok()) throw PluginError(bytes.status().code(), bytes.status().message());
  return std::move(bytes).value();
}

// Opens the package and reads each stored record once against its CRC-32: a damaged byte of a
// compiled program (its shared library) would otherwise load and train wrong, or crash the
// worker with no word of the file. A package is a few megabytes; reading it costs milliseconds.
inline std::unique_ptr<torch_files::ZipReader> OpenPackage(const std::string& file) {
  Result<std::unique_ptr<torch_files::ZipReader>> zip = torch_files::ZipReader::Open(file);
  if (!zip.ok()) {
    throw PluginError(zip.status().code(), "package " + zip.status().message());
  }
  for (const torch_files::ZipRecord& record : (*zip)->records()) {
    if (record.method != 0) continue;  // a compressed record is the loader's to check
    const Result<std::vector<uint8_t>> bytes = (*zip)->Read(record);
    if (!bytes.ok()) {
      throw PluginError(bytes.status().code(),
                        "package " + bytes.status().message() +
                            " (make it again with tools/compile_model.py --no-cache)");
    }
  }
  return std::move(zip).value();
}

// One "parameter NAME DTYPE SHAPE ALIASES..." or "buffer NAME DTYPE SHAPE updated|kept" line.
inline PackageTensor TensorLine(const std::vector<std::string>& words, const std::string& file) {
  if (words.size() < 4) {
    throw InvalidArgument("package " + file + ": a " + words[0] + " line needs a name, a dtype " +
                          "and a shape");
  }
  PackageTensor tensor;
  tensor.name = words[1];
  tensor.dtype = DtypeNamed(words[2], file);
  tensor.shape = ShapeNamed(words[3], file);
  if (words[0] == "parameter") {
    tensor.aliases.assign(words.begin() + 4, words.end());
  } else {
    tensor.updated = words.size() > 4 && words[4] == "updated";
  }
  return tensor;
}

inline PackageDescription ReadDescription(const torch_files::ZipReader& zip) {
  PackageDescription description;
  description.file = zip.path();
  const std::vector<uint8_t> bytes = ReadRecord(zip, kDescriptionRecord);
  std::stringstream text(std::string(bytes.begin(), bytes.end()));
  std::string line;
  while (std::getline(text, line)) {
    std::stringstream split(line);
    std::vector<std::string> words;
    for (std::string word; split >> word;) words.push_back(word);
    if (words.empty()) continue;
    if (words[0] == "parameter") {
      description.parameters.push_back(TensorLine(words, description.file));
    } else if (words[0] == "buffer") {
      description.buffers.push_back(TensorLine(words, description.file));
    } else {
      description.facts[words[0]].assign(words.begin() + 1, words.end());
    }
  }
  if (description.Fact("format") != std::to_string(kPackageFormat)) {
    throw InvalidArgument("package " + description.file + " is of format " +
                          description.Fact("format") + "; this plugin reads format " +
                          std::to_string(kPackageFormat) + ": make it again with this dpl's " +
                          "tools/compile_model.py");
  }
  return description;
}

// The initial values, one tensor per parameter then per buffer, on `device`.
inline std::vector<torch::Tensor> ReadInitialValues(const torch_files::ZipReader& zip,
                                                    const PackageDescription& description,
                                                    c10::Device device) {
  const std::vector<uint8_t> bytes = ReadRecord(zip, kValuesRecord);
  std::vector<torch::Tensor> values;
  size_t offset = 0;
  auto take = [&](const PackageTensor& tensor) {
    torch::Tensor value = torch::empty(tensor.shape, torch::TensorOptions().dtype(tensor.dtype));
    if (offset + value.nbytes() > bytes.size()) {
      throw InvalidArgument("package " + description.file + ": its initial values end before " +
                            tensor.name + "'s");
    }
    std::memcpy(value.data_ptr(), bytes.data() + offset, value.nbytes());
    offset += value.nbytes();
    values.push_back(value.to(device));
  };
  for (const auto& parameter : description.parameters) take(parameter);
  for (const auto& buffer : description.buffers) take(buffer);
  if (offset != bytes.size()) {
    throw InvalidArgument("package " + description.file + " holds " +
                          std::to_string(bytes.size() - offset) + " bytes of initial values " +
                          "beyond its tensors'");
  }
  return values;
}

// The libtorch this plugin runs, against the torch that made the package (the part before a
// local tag such as "+cu132", which C++'s TORCH_VERSION does not carry).
inline void CheckTorch(const PackageDescription& description) {
  const std::string made_with = description.Fact("torch");
  const std::string release = made_with.substr(0, made_with.find('+'));
  if (release != TORCH_VERSION) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      "package " + description.file + " was made with torch " + made_with +
                          "; this plugin runs libtorch " + TORCH_VERSION +
                          ", whose AOTInductor runtime cannot be trusted with another torch's "
                          "programs: make it again with this dpl's tools/compile_model.py");
  }
}

inline void CheckDevice(const PackageDescription& description, c10::Device device) {
  const std::string& made_for = description.Fact("device");
  if (made_for != c10::DeviceTypeName(device.type(), /*lower_case=*/true)) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      "package " + description.file + " was made for " + made_for +
                          "; this job runs on " + device.str() +
                          ": make one with tools/compile_model.py --device " +
                          c10::DeviceTypeName(device.type(), /*lower_case=*/true));
  }
}

// Every CPU capability the package's kernels need (libtorch's names, as
// torch.cpu.get_capabilities() lists them) this CPU has.
inline void CheckCpuInstructions(const PackageDescription& description) {
  const auto found = description.facts.find("cpu_needs");
  if (found == description.facts.end()) return;
  const auto capabilities = at::cpu::get_cpu_capabilities();
  std::string lacking;
  for (const std::string& need : found->second) {
    if (need == "-") continue;
    const auto has = capabilities.find(need);
    if (has == capabilities.end() || !has->second.isBool() || !has->second.toBool()) {
      lacking += (lacking.empty() ? "" : ", ") + need;
    }
  }
  if (!lacking.empty()) {
    const auto isa = description.facts.find("cpu_isa");
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      "package " + description.file + " was compiled for the CPU instructions " +
                          (isa == description.facts.end() ? std::string("?") : isa->second[0]) +
                          ", and this CPU lacks " + lacking +
                          ": make it on this machine, or with a lower tools/compile_model.py "
                          "--cpu-isa (avx2, none)");
  }
}

inline void CheckPrecision(const PackageDescription& description, dpl_precision precision) {
  const std::string& made_for = description.Fact("precision");
  const std::string job = torch_model::PrecisionName(precision);
  if (made_for != job) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      "package " + description.file + " computes in " + made_for +
                          "; this job runs --precision " + job + ": run it with --precision " +
                          made_for +
                          ", or make a package with tools/compile_model.py --precision " + job);
  }
}

// The data against the samples the package was made for: the input's kind (integer ids or
// float32 values) and shape, the target's shape and the classes (when the data says them).
inline void CheckData(const PackageDescription& description, const torch_model::DataShape& data) {
  const auto& input = description.facts.at("input");
  const auto& target = description.facts.at("target");
  const bool ids = input.at(0) == "int64";
  const std::vector<int64_t> input_shape = ShapeNamed(input.at(1), description.file);
  const std::vector<int64_t> target_shape = ShapeNamed(target.at(1), description.file);
  const int64_t classes = std::stoll(description.Fact("classes"));
  const bool kind_fits =
      ids ? torch_model::IsIntegerType(data.input_dtype) : torch_model::IsFloat32(data.input_dtype);
  if (!kind_fits || data.input_shape != input_shape || data.target_shape != target_shape ||
      (data.num_classes != 0 && data.num_classes != classes)) {
    throw InvalidArgument(
        "the data has " + torch_model::SamplesText(data) +
        (data.num_classes != 0 ? " of " + std::to_string(data.num_classes) + " classes" : "") +
        "; package " + description.file + " was made for " + (ids ? "integer" : "float32") + " " +
        ShapeText(input_shape) + " samples with " + ShapeText(target_shape) + " targets of " +
        std::to_string(classes) +
        " classes: make one for this data (tools/compile_model.py "
        "--input-shape, --token-ids)");
  }
}

}  // namespace
}  // namespace dpl::compiled
