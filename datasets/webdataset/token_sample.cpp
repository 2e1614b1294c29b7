#include "token_sample.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "common/npy_format.hpp"
#include "common/parallel.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {
namespace {

using support::PluginError;
using support::Require;

// The integer types ids are read in; the index keeps a type's position here as the format.
struct IdType {
  const char* name;
  const char* descr;  // as numpy writes it
  size_t bytes;
  bool is_signed;
};
const IdType kIdTypes[] = {
    {"uint8", "|u1", 1, false}, {"int8", "|i1", 1, true},    {"uint16", "<u2", 2, false},
    {"int16", "<i2", 2, true},  {"uint32", "<u4", 4, false}, {"int32", "<i4", 4, true},
    {"int64", "<i8", 8, true},
};

uint16_t FormatOf(const IdType& type) {
  return uint16_t(&type - kIdTypes);
}

int64_t IdAt(const uint8_t* data, int64_t position, const IdType& type) {
  const uint8_t* p = data + size_t(position) * type.bytes;
  uint64_t raw = 0;
  std::memcpy(&raw, p, type.bytes);  // little-endian
  if (type.is_signed && type.bytes < 8 && (raw >> (8 * type.bytes - 1)) != 0) {
    raw |= ~uint64_t(0) << (8 * type.bytes);
  }
  return int64_t(raw);
}

const IdType& IdTypeOfNpy(const std::string& what, const uint8_t* bytes, size_t size,
                          npy::NpyLayout* layout) {
  std::vector<npy::AcceptedDtype> accepted;
  for (const IdType& type : kIdTypes) accepted.push_back({type.descr, type.name, type.bytes});
  *layout =
      npy::ReadNpyLayout(what, bytes, size, size, accepted, "token ids", "ids.astype(numpy.int64)");
  Require(layout->shape.size() == 1, what + ": the token ids' array has shape " +
                                         ShapeText(layout->shape) + "; it must be 1-D");
  for (const IdType& type : kIdTypes) {
    if (std::strcmp(type.descr + 1, layout->descr.c_str() + 1) == 0) return type;
  }
  throw PluginError(DPL_ERR_INVALID_ARGUMENT, what + ": dtype '" + layout->descr + "' is not read");
}

// Token samples: int64 (block) input and int64 (block) target.
class TokenShardDataset : public Dataset {
 public:
  TokenShardDataset(std::unique_ptr<ShardSet> shards, int64_t block, int64_t vocab, int threads)
      : Dataset(SampleTensor::Int64({block}), SampleTensor::Int64({block}), shards->count(), vocab),
        shards_(std::move(shards)),
        block_(block),
        threads_(threads) {}

  void Fill(const int64_t* indices, int64_t n, int64_t, void* input, void* target) override {
    auto* inputs = static_cast<int64_t*>(input);
    auto* targets = static_cast<int64_t*>(target);
    ParallelFor(threads_, n, [&](int64_t i) {
      const ShardSet::Sample sample = shards_->Locate(indices[i]);
      thread_local std::vector<uint8_t> bytes;
      ShardSet::ReadInput(sample, &bytes);
      const IdType& type = kIdTypes[sample.record->format];
      for (int64_t t = 0; t < block_; ++t) {
        inputs[i * block_ + t] = IdAt(bytes.data(), t, type);
        targets[i * block_ + t] = IdAt(bytes.data(), t + 1, type);
      }
    });
  }

 private:
  std::unique_ptr<ShardSet> shards_;
  int64_t block_;
  int threads_;
};

}  // namespace

InputInspector TokenInspector(const std::string& bin_dtype) {
  const IdType* bin_type = nullptr;
  for (const IdType& type : kIdTypes) {
    if (bin_dtype == type.name) bin_type = &type;
  }
  Require(bin_type != nullptr, "dtype " + bin_dtype + " is not a token id type");
  return [bin_type](const ShardFile& shard, const TarMember& member, const std::string&) {
    const std::string what = shard.path() + ": member " + member.name;
    std::vector<uint8_t> bytes(size_t(member.size));
    shard.ReadSome(member.data_offset, bytes.size(), bytes.data());
    npy::NpyLayout layout;
    const bool is_npy = bytes.size() >= 6 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0;
    const IdType& type =
        is_npy ? IdTypeOfNpy(what, bytes.data(), bytes.size(), &layout) : *bin_type;
    const size_t offset = is_npy ? layout.data_offset : 0;
    Require((bytes.size() - offset) % type.bytes == 0,
            what + ": " + std::to_string(bytes.size()) + " bytes are not whole " + type.name +
                " ids (dtype= says the type of raw members)");
    const int64_t count = int64_t((bytes.size() - offset) / type.bytes);
    int64_t largest = 0;
    for (int64_t t = 0; t < count; ++t) {
      const int64_t id = IdAt(bytes.data() + offset, t, type);
      Require(id >= 0, what + ": id " + std::to_string(id) + " at position " + std::to_string(t) +
                           " is negative");
      largest = std::max(largest, id);
    }
    InputInfo info;
    info.data_offset = member.data_offset + offset;
    info.data_size = uint64_t(count) * type.bytes;
    info.format = FormatOf(type);
    info.label = largest;
    return info;
  };
}

std::unique_ptr<Dataset> OpenTokenSamples(const WebDatasetOptions& options,
                                          std::unique_ptr<ShardSet> shards, int threads) {
  int64_t largest = 0;
  for (int64_t i = 0; i < shards->count(); ++i) {
    const ShardSet::Sample sample = shards->Locate(i);
    const IdType& type = kIdTypes[sample.record->format];
    const int64_t ids = int64_t(sample.record->data_size / type.bytes);
    Require(ids > options.block, ShardSet::Describe(sample) + ": " + std::to_string(ids) +
                                     " ids; a sample of block=" + std::to_string(options.block) +
                                     " needs " + std::to_string(options.block + 1) +
                                     " (its input, and the next id after each as the target)");
    Require(options.vocab == 0 || sample.record->label < options.vocab,
            ShardSet::Describe(sample) + ": id " + std::to_string(sample.record->label) +
                " is not below vocab=" + std::to_string(options.vocab));
    largest = std::max(largest, sample.record->label);
  }
  const int64_t vocab = options.vocab > 0 ? options.vocab : largest + 1;
  return std::make_unique<TokenShardDataset>(std::move(shards), options.block, vocab, threads);
}

}  // namespace dpl::datasets::webdataset
