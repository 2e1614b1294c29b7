// Token ids as the tokens and text plugins read them: a flat array of little-endian integers in a
// read-only mapping of a file (nanoGPT's train.bin, a 1-D .npy, a data cache entry of text), never
// copied, so every process that maps the file shares its pages. Failures throw PluginError naming
// the file: DPL_ERR_NOT_FOUND for a missing one, DPL_ERR_INVALID_ARGUMENT for bad content.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/files.hpp"

namespace dpl::datasets::tokens {

// The element type of the ids in a file.
struct TokenType {
  size_t bytes = 2;  // 1, 2, 4 or 8
  bool is_signed = false;
  std::string name() const;  // "uint16"
};

class TokenArray {
 public:
  TokenArray() = default;
  // `count` ids of `type` at `data`, inside `file`'s mapping; `name` says what they are in
  // messages (the file's path when empty).
  TokenArray(std::shared_ptr<const MappedFile> file, const uint8_t* data, int64_t count,
             TokenType type, std::string name = "")
      : file_(std::move(file)),
        data_(data),
        count_(count),
        type_(type),
        name_(name.empty() ? file_->path() : std::move(name)) {}

  int64_t count() const { return count_; }
  const TokenType& type() const { return type_; }
  // What the ids are, for messages: "/data/train.bin", "/data/input.txt (its validation part)".
  const std::string& name() const { return name_; }
  const MappedFile& file() const { return *file_; }
  // Where the first id sits in the file, in bytes.
  size_t offset() const { return size_t(data_ - file_->data()); }

  // Ids [first, first + n) as int64 (uint64 ids above INT64_MAX read as INT64_MAX).
  void Read(int64_t first, int64_t n, int64_t* out) const;

 private:
  std::shared_ptr<const MappedFile> file_;
  const uint8_t* data_ = nullptr;
  int64_t count_ = 0;
  TokenType type_;
  std::string name_;
};

// A raw file of `type` ids (nanoGPT's train.bin: uint16). Refuses an empty file and one whose
// size is not a whole number of ids.
TokenArray OpenRawTokens(const std::string& path, TokenType type);

// A 1-D .npy array of any integer dtype numpy writes (int8 .. uint64). Refuses other dtypes,
// other shapes and an empty array.
TokenArray OpenNpyTokens(const std::string& path);

// Checks every id of `tokens` on up to `threads` threads: none negative, and each below `vocab`
// when vocab > 0; the first offending id is named with its position. Returns the largest id.
int64_t CheckIds(const TokenArray& tokens, int64_t vocab, int threads);

}  // namespace dpl::datasets::tokens
