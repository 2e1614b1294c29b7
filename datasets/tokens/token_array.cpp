#include "token_array.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include "common/data_cache.hpp"
#include "common/npy_format.hpp"
#include "common/parallel.hpp"
#include "common/sample_transform.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::tokens {
namespace {

using support::PluginError;

PluginError Invalid(const std::string& message) {
  return PluginError(DPL_ERR_INVALID_ARGUMENT, message);
}

// Id `i` of `data` as int64.
template <typename T>
int64_t IdAt(const uint8_t* data, int64_t i) {
  T value;
  std::memcpy(&value, data + size_t(i) * sizeof(T), sizeof(T));
  if constexpr (std::is_same_v<T, uint64_t>) {
    return int64_t(std::min<uint64_t>(value, uint64_t(std::numeric_limits<int64_t>::max())));
  } else {
    return int64_t(value);
  }
}

// Calls body(T{}) with T the C++ type of `type`.
template <typename Body>
void WithIdType(const TokenType& type, Body&& body) {
  switch (type.bytes * 2 + (type.is_signed ? 1 : 0)) {
    case 2:
      return body(uint8_t{});
    case 3:
      return body(int8_t{});
    case 4:
      return body(uint16_t{});
    case 5:
      return body(int16_t{});
    case 8:
      return body(uint32_t{});
    case 9:
      return body(int32_t{});
    case 16:
      return body(uint64_t{});
    default:
      return body(int64_t{});
  }
}

// The largest id of every file checked in this process, by file version and region: the worker
// loader opens the train split, then the test and validation splits, and each inferring the
// vocabulary checks both files; a file is scanned once.
std::mutex& LargestIdMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, int64_t>& LargestIds() {
  static std::map<std::string, int64_t> largest;
  return largest;
}

std::string RegionKey(const TokenArray& tokens) {
  return SourceKey(tokens.file().path()) + "|" + std::to_string(tokens.offset()) + "|" +
         std::to_string(tokens.count()) + "|" + tokens.type().name();
}

}  // namespace

std::string TokenType::name() const {
  return (is_signed ? "int" : "uint") + std::to_string(bytes * 8);
}

void TokenArray::Read(int64_t first, int64_t n, int64_t* out) const {
  WithIdType(type_, [&](auto tag) {
    for (int64_t i = 0; i < n; ++i) out[i] = IdAt<decltype(tag)>(data_, first + i);
  });
}

TokenArray OpenRawTokens(const std::string& path, TokenType type) {
  auto file = MappedFile::Open(path, MappedFile::Access::kRandom);
  if (file->size() == 0) throw Invalid(path + ": the file is empty (no tokens)");
  if (file->size() % type.bytes != 0) {
    throw Invalid(path + ": " + std::to_string(file->size()) + " bytes, not a whole number of " +
                  type.name() + " tokens (" + std::to_string(type.bytes) +
                  " bytes each); a truncated file, or not " + type.name() +
                  (type.bytes == 2 ? " (dtype=uint32 reads 4-byte ids)" : ""));
  }
  const int64_t count = int64_t(file->size() / type.bytes);
  const uint8_t* data = file->data();
  return TokenArray(std::move(file), data, count, type);
}

TokenArray OpenNpyTokens(const std::string& path) {
  static const std::vector<npy::AcceptedDtype> kIdDtypes = {
      {"|u1", "uint8", 1},  {"|i1", "int8", 1},  {"<u2", "uint16", 2}, {"<i2", "int16", 2},
      {"<u4", "uint32", 4}, {"<i4", "int32", 4}, {"<u8", "uint64", 8}, {"<i8", "int64", 8}};
  npy::NpyArray array = npy::OpenNpy(path, kIdDtypes, "token ids", "ids.astype(numpy.uint16)");
  if (array.shape.size() != 1) {
    throw Invalid(path + ": shape " + ShapeText(array.shape) +
                  " is not 1-D; save the tokens as one flat array "
                  "(numpy.save(path, ids.reshape(-1)))");
  }
  if (array.shape[0] == 0) throw Invalid(path + ": holds no tokens (shape (0,))");
  TokenType type;
  type.bytes = array.item_size;
  type.is_signed = array.descr[1] == 'i';
  const uint8_t* data = array.data();
  return TokenArray(array.file, data, array.shape[0], type);
}

int64_t CheckIds(const TokenArray& tokens, int64_t vocab, int threads) {
  const std::string key = RegionKey(tokens);
  {
    std::lock_guard<std::mutex> lock(LargestIdMutex());
    auto found = LargestIds().find(key);
    if (found != LargestIds().end() && (vocab == 0 || found->second < vocab)) return found->second;
  }
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t chunks = (tokens.count() + kChunk - 1) / kChunk;
  std::vector<int64_t> largest(size_t(chunks), 0);
  ParallelFor(threads, chunks, [&](int64_t chunk) {
    const int64_t first = chunk * kChunk, n = std::min(kChunk, tokens.count() - first);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    tokens.Read(first, n, ids.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[size_t(i)];
      if (id >= 0 && (vocab == 0 || id < vocab)) continue;
      const std::string where = tokens.name() + ": token " + std::to_string(id) + " at position " +
                                std::to_string(first + i);
      if (id < 0) throw Invalid(where + " is negative");
      throw Invalid(where + " is not below vocab=" + std::to_string(vocab));
    }
    largest[size_t(chunk)] = *std::max_element(ids.begin(), ids.end());
  });
  const int64_t result = *std::max_element(largest.begin(), largest.end());
  std::lock_guard<std::mutex> lock(LargestIdMutex());
  LargestIds()[key] = result;
  return result;
}

}  // namespace dpl::datasets::tokens
