#include "tar_members.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {
namespace {

using support::PluginError;

// The fields of a tar header block that are read here (byte offset, length).
constexpr size_t kNameField = 0, kNameLength = 100;
constexpr size_t kSizeField = 124, kSizeLength = 12;
constexpr size_t kChecksumField = 148, kChecksumLength = 8;
constexpr size_t kTypeField = 156;
constexpr size_t kMagicField = 257;
constexpr size_t kPrefixField = 345, kPrefixLength = 155;
// Read-ahead of the header walk: the members of a sample (an image and its label) usually share
// one read.
constexpr size_t kWindowBytes = 64 * 1024;

uint64_t RoundUpToBlock(uint64_t size) {
  return (size + kTarBlock - 1) / kTarBlock * kTarBlock;
}

std::string At(uint64_t offset) {
  return "byte " + std::to_string(offset);
}

// A compressed shard is refused by its first bytes: its members have no fixed offsets.
void RefuseCompressed(const ShardFile& shard, const uint8_t* start, size_t size) {
  struct Compression {
    std::vector<uint8_t> magic;
    const char* name;
    const char* undo;
  };
  static const Compression kCompressions[] = {
      {{0x1F, 0x8B}, "gzip", "gunzip"},
      {{'B', 'Z', 'h'}, "bzip2", "bunzip2"},
      {{0xFD, '7', 'z', 'X', 'Z', 0x00}, "xz", "unxz"},
      {{0x28, 0xB5, 0x2F, 0xFD}, "zstd", "unzstd"},
      {{0x04, 0x22, 0x4D, 0x18}, "lz4", "unlz4"},
  };
  for (const Compression& compression : kCompressions) {
    if (size >= compression.magic.size() &&
        std::memcmp(start, compression.magic.data(), compression.magic.size()) == 0) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        shard.path() + ": a " + compression.name +
                            "-compressed shard; a compressed tar cannot be read by offset, so "
                            "store the shards uncompressed (" +
                            compression.undo +
                            " it to a .tar file, or write it with webdataset's ShardWriter to "
                            "a name ending in .tar)");
    }
  }
}

bool IsZeroBlock(const uint8_t* block) {
  return std::all_of(block, block + kTarBlock, [](uint8_t byte) { return byte == 0; });
}

// A numeric header field: octal digits (leading spaces or NULs, ended by a space or NUL), or
// GNU's base-256 form (first byte 0x80) for sizes of 8 GiB and more. False when malformed or
// negative.
bool ParseNumber(const uint8_t* field, size_t length, uint64_t* value) {
  *value = 0;
  if (field[0] & 0x80) {
    if (field[0] == 0xFF) return false;
    uint64_t result = field[0] & 0x7F;
    for (size_t i = 1; i < length; ++i) {
      if (result > (UINT64_MAX >> 8)) return false;
      result = (result << 8) | field[i];
    }
    *value = result;
    return true;
  }
  size_t i = 0;
  while (i < length && (field[i] == ' ' || field[i] == 0)) ++i;
  for (; i < length && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (*value > (UINT64_MAX >> 3)) return false;
    *value = (*value << 3) | uint64_t(field[i] - '0');
  }
  return i == length || field[i] == ' ' || field[i] == 0;
}

// The header's checksum: the sum of its bytes with the checksum field counted as spaces, as
// unsigned bytes (POSIX) or, as some old writers did, signed ones.
bool ChecksumMatches(const uint8_t* block) {
  uint64_t stored = 0;
  if (!ParseNumber(block + kChecksumField, kChecksumLength, &stored)) return false;
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) {
    const bool in_field = i >= kChecksumField && i < kChecksumField + kChecksumLength;
    const uint8_t byte = in_field ? uint8_t(' ') : block[i];
    unsigned_sum += byte;
    signed_sum += int8_t(byte);
  }
  return int64_t(stored) == unsigned_sum || int64_t(stored) == signed_sum;
}

std::string FieldText(const uint8_t* field, size_t length) {
  const auto* text = reinterpret_cast<const char*>(field);
  return std::string(text, strnlen(text, length));
}

// The name in the header block itself: ustar's prefix "/" name, or the name alone (GNU's format
// keeps other data where ustar has the prefix).
std::string HeaderName(const uint8_t* block) {
  const std::string name = FieldText(block + kNameField, kNameLength);
  const bool ustar = std::memcmp(block + kMagicField, "ustar\0", 6) == 0;
  if (!ustar) return name;
  const std::string prefix = FieldText(block + kPrefixField, kPrefixLength);
  return prefix.empty() ? name : prefix + "/" + name;
}

std::string WithoutDotSlash(std::string name) {
  size_t start = 0;
  while (name.compare(start, 2, "./") == 0) start += 2;
  return name.substr(start);
}

// What a pax extended header ('x') says about the member after it.
struct PaxOverrides {
  bool has_path = false;
  std::string path;
  bool has_size = false;
  uint64_t size = 0;
};

// Reads pax records "LENGTH key=value\n" (LENGTH counts the whole record).
PaxOverrides ParsePax(const std::string& records, const std::string& where) {
  PaxOverrides overrides;
  size_t at = 0;
  while (at < records.size()) {
    if (records[at] == 0) break;  // padding some writers leave
    const size_t space = records.find(' ', at);
    const std::string invalid =
        where + ": a malformed pax record at offset " + std::to_string(at) + " of its header";
    if (space == std::string::npos || space == at || space - at > 18) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, invalid);
    }
    uint64_t length = 0;
    for (size_t i = at; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9')
        throw PluginError(DPL_ERR_INVALID_ARGUMENT, invalid);
      length = length * 10 + uint64_t(records[i] - '0');
    }
    if (length <= space - at + 1 || at + length > records.size() ||
        records[at + length - 1] != '\n') {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, invalid);
    }
    const std::string record = records.substr(space + 1, at + length - 1 - (space + 1));
    const size_t equals = record.find('=');
    if (equals == std::string::npos) throw PluginError(DPL_ERR_INVALID_ARGUMENT, invalid);
    const std::string key = record.substr(0, equals), value = record.substr(equals + 1);
    if (key == "path") {
      overrides.has_path = true;
      overrides.path = value;
    } else if (key == "size") {
      overrides.has_size = !value.empty() && value.size() <= 19 &&
                           value.find_first_not_of("0123456789") == std::string::npos;
      if (!overrides.has_size) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          where + ": the pax size \"" + value + "\" is not a byte count");
      }
      overrides.size = std::stoull(value);
    } else if (key.rfind("GNU.sparse.", 0) == 0) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        where + ": a sparse member; write the shard without --sparse");
    }
    at += length;
  }
  return overrides;
}

// The tar walk of one shard: headers through a read-ahead window, pax and long-name data read
// whole.
class TarWalk {
 public:
  explicit TarWalk(const ShardFile& shard)
      : shard_(shard), window_(kWindowBytes + kTarBlock + kMemberHeadBytes) {}

  void Run(const std::function<void(const TarMember&)>& visit) {
    uint64_t offset = 0;
    for (;;) {
      size_t available = 0;
      const uint8_t* block = Read(offset, kTarBlock + kMemberHeadBytes, &available);
      if (offset == 0) CheckStart(block, available);
      if (available < kTarBlock) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          shard_.path() + ": truncated: the shard ends at " + At(shard_.size()) +
                              " without the tar end-of-archive blocks" + AfterLast() +
                              "; copy or write it again");
      }
      if (IsZeroBlock(block)) return;  // the end-of-archive marker; record padding may follow
      if (!ChecksumMatches(block)) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          shard_.path() + ": the tar header at " + At(offset) + AfterLast() +
                              " is damaged (its checksum does not match); copy or write the "
                              "shard again");
      }
      offset = Step(offset, block, available, visit);
    }
  }

 private:
  // The bytes [offset, offset + size) as far as the file has them (*available of them).
  const uint8_t* Read(uint64_t offset, size_t size, size_t* available) {
    if (offset < window_start_ || offset + size > window_start_ + window_filled_) {
      window_start_ = offset;
      window_filled_ = shard_.ReadSome(offset, window_.size(), window_.data());
    }
    const uint64_t end = window_start_ + window_filled_;
    *available = offset >= end ? 0 : size_t(std::min<uint64_t>(size, end - offset));
    return window_.data() + (offset - window_start_);
  }

  void CheckStart(const uint8_t* block, size_t available) {
    if (available == 0) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        shard_.path() + ": the shard is empty; write it again");
    }
    RefuseCompressed(shard_, block, available);
    if (available >= kTarBlock && !IsZeroBlock(block) && !ChecksumMatches(block)) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        shard_.path() +
                            ": not a tar file (its first 512-byte header's checksum does not "
                            "match); shards are uncompressed tar files");
    }
  }

  std::string AfterLast() const {
    return last_member_.empty() ? "" : " (after member " + last_member_ + ")";
  }

  // The data of a pax or long-name header, whole.
  std::string ReadData(uint64_t offset, uint64_t size) {
    std::string data(size_t(size), '\0');
    shard_.ReadSome(offset, data.size(), reinterpret_cast<uint8_t*>(data.data()));
    return data;
  }

  // The size of the data after the header at `offset`: its size field, or a pax header's size
  // for the entry after it.
  uint64_t DataSize(uint64_t offset, const uint8_t* block, char type) const {
    uint64_t size = 0;
    if (!ParseNumber(block + kSizeField, kSizeLength, &size)) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, shard_.path() + ": the tar header at " +
                                                      At(offset) + AfterLast() +
                                                      " has a malformed size field");
    }
    const bool extension = type == 'x' || type == 'g' || type == 'L' || type == 'K';
    return pending_.has_size && !extension ? pending_.size : size;
  }

  // Handles the header at `offset` and returns where the next one starts.
  uint64_t Step(uint64_t offset, const uint8_t* block, size_t available,
                const std::function<void(const TarMember&)>& visit) {
    const char type = char(block[kTypeField]);
    const uint64_t size = DataSize(offset, block, type);
    const uint64_t data_offset = offset + kTarBlock;
    std::string name = WithoutDotSlash(pending_.has_path ? pending_.path
                                       : has_long_name_  ? long_name_
                                                         : HeaderName(block));
    if (data_offset + size > shard_.size() || data_offset + size < data_offset) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        shard_.path() + ": truncated: member " + name + " at " + At(offset) +
                            " declares " + std::to_string(size) +
                            " bytes of data but the shard ends at " + At(shard_.size()) +
                            "; copy or write it again");
    }
    const std::string where = shard_.path() + ": member " + name + " at " + At(offset);
    switch (type) {
      case 'x':
        pending_ = ParsePax(ReadData(data_offset, size), where);
        break;
      case 'L': {
        long_name_ = ReadData(data_offset, size);
        long_name_.resize(strnlen(long_name_.c_str(), long_name_.size()));
        has_long_name_ = true;
        break;
      }
      case 'g':  // pax global header: nothing in it names or sizes a member
      case 'K':  // GNU long link name
        break;
      case 'S':
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          where + ": a sparse member; write the shard without --sparse");
      case 'M':
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          where + ": a multi-volume continuation; write the shard as one tar");
      case '0':
      case '\0':
      case '7':
        if (!name.empty() && name.back() != '/') {
          TarMember member;
          member.name = std::move(name);
          member.data_offset = data_offset;
          member.size = size;
          member.head = block + kTarBlock;
          member.head_size = size_t(std::min<uint64_t>(size, available - kTarBlock));
          visit(member);
          last_member_ = member.name;
        }
        Reset();
        break;
      default:  // folders, links, devices: not members
        Reset();
        break;
    }
    return data_offset + RoundUpToBlock(size);
  }

  void Reset() {
    pending_ = PaxOverrides{};
    has_long_name_ = false;
    long_name_.clear();
  }

  const ShardFile& shard_;
  std::vector<uint8_t> window_;
  uint64_t window_start_ = 0;
  size_t window_filled_ = 0;
  PaxOverrides pending_;  // from a pax header, for the next member
  bool has_long_name_ = false;
  std::string long_name_;  // from a GNU long-name header, for the next member
  std::string last_member_;
};

}  // namespace

void ForEachTarMember(const ShardFile& shard, const std::function<void(const TarMember&)>& visit) {
  TarWalk(shard).Run(visit);
}

}  // namespace dpl::datasets::webdataset
