#include "text_tokens.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/data_cache.hpp"
#include "common/files.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::tokens {
namespace {

using support::PluginError;

constexpr TokenType kByte{1, false};
constexpr char kCacheMagic[8] = {'D', 'P', 'L', 'T', 'E', 'X', 'T', '1'};

PluginError Invalid(const std::string& message) {
  return PluginError(DPL_ERR_INVALID_ARGUMENT, message);
}

// The text a split reads: a whole file, or the train or validation part of one file.
struct TextPart {
  std::string source;
  bool whole = true;
  bool train = true;  // which part of a file that is split
};

std::vector<std::string> TextFilesIn(const std::string& folder) {
  std::vector<std::string> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    if (entry.path().extension() == ".txt" && IsRegularFile(entry.path().string())) {
      found.push_back(entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

TextPart LocateText(const OpenRequest& request, bool fraction_given) {
  const std::string& path = request.path;
  if (IsRegularFile(path)) return {path, false, request.train()};
  const std::string train = path + "/train.txt", val = path + "/val.txt";
  if (IsRegularFile(train) && IsRegularFile(val)) {
    if (fraction_given) {
      throw Invalid("option \"val_fraction\" splits one text file, but " + path +
                    " holds train.txt and val.txt; drop val_fraction=");
    }
    return {request.train() ? train : val, true, request.train()};
  }
  const std::vector<std::string> texts =
      IsDirectory(path) ? TextFilesIn(path) : std::vector<std::string>{};
  if (texts.size() == 1) return {texts[0], false, request.train()};
  std::string found;
  for (const std::string& text : texts) found += (found.empty() ? "" : ", ") + BaseName(text);
  throw PluginError(DPL_ERR_NOT_FOUND,
                    "no text to read at " + path + ": looked for " + train + " and " + val +
                        ", or one .txt file to split by val_fraction" +
                        (texts.empty() ? ""
                                       : " (found " + std::to_string(texts.size()) +
                                             " .txt files: " + found + ")") +
                        "; pass --data-dir with a text file or the folder holding train.txt and "
                        "val.txt");
}

// The shortest text that reads back as `fraction`: 0.9999999 stays 0.9999999 (not "%g"'s 1).
std::string FractionText(double fraction) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, fraction).ptr;
  return std::string(text, end);
}

// "/data/input.txt (its validation part, val_fraction=0.1)" for messages.
std::string PartName(const TextPart& part, double val_fraction) {
  if (part.whole) return part.source;
  return part.source + " (its " + (part.train ? "train" : "validation") +
         " part, val_fraction=" + FractionText(val_fraction) + ")";
}

std::string CacheKey(const TextPart& part, double val_fraction) {
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%.17g", val_fraction);
  return "text tokens v1|" + SourceKey(part.source) +
         (part.whole ? "|whole"
                     : std::string(part.train ? "|train" : "|validation") +
                           " of val_fraction=" + fraction);
}

struct CacheHeader {
  char magic[8];
  uint64_t key_hash;
  uint64_t tokens;
};

// The tokens of the cache entry at `entry` when it is the entry of `key`, else an empty array (a
// bad entry is reported and rebuilt).
TokenArray ReadCacheEntry(const std::string& entry, const std::string& key, const std::string& name,
                          const OpenRequest& request) {
  if (!IsRegularFile(entry)) return {};
  try {
    auto file = MappedFile::Open(entry, MappedFile::Access::kRandom);
    CacheHeader header{};
    if (file->size() >= sizeof header) std::memcpy(&header, file->data(), sizeof header);
    if (file->size() < sizeof header || std::memcmp(header.magic, kCacheMagic, 8) != 0 ||
        header.key_hash != StableHash(key) || header.tokens < 1 ||
        file->size() - sizeof header != header.tokens) {
      throw Invalid("not the entry of this text");
    }
    const uint8_t* data = file->data() + sizeof header;
    return TokenArray(std::move(file), data, int64_t(header.tokens), kByte, name);
  } catch (const PluginError& error) {
    request.log.Warning("ignoring the data cache entry " + entry + " (" + error.what() +
                        "); reading the text again");
    return {};
  }
}

// The part's tokens, read from its source and checked (Note [Text as byte tokens]).
TokenArray ReadText(const TextPart& part, double val_fraction, const std::string& name) {
  auto file = MappedFile::Open(part.source, MappedFile::Access::kPopulate);
  const uint8_t* bytes = file->data();
  const size_t size = file->size();
  if (size == 0) throw Invalid(part.source + ": the file is empty (no text)");
  if (const size_t bad = FirstInvalidUtf8(bytes, size); bad != size) {
    const int64_t line = 1 + std::count(bytes, bytes + bad, uint8_t('\n'));
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", bytes[bad]);
    throw Invalid(part.source + ": not UTF-8 text: byte " + byte + " at offset " +
                  std::to_string(bad) + " (line " + std::to_string(line) +
                  ") is not valid UTF-8; --data text reads text, --data tokens reads token ids");
  }
  size_t begin = 0, end = size;
  if (!part.whole) {
    size_t cut = size_t(double(size) * (1.0 - val_fraction));
    while (cut > 0 && cut < size && (bytes[cut] & 0xC0) == 0x80) --cut;  // a character's start
    (part.train ? end : begin) = cut;
  }
  return TokenArray(std::move(file), bytes + begin, int64_t(end - begin), kByte, name);
}

}  // namespace

size_t FirstInvalidUtf8(const uint8_t* bytes, size_t size) {
  size_t i = 0;
  while (i < size) {
    const uint8_t lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The length of the character and the range of its second byte (no overlong forms, no
    // surrogates, nothing above U+10FFFF).
    size_t length = 0;
    uint8_t low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    for (size_t k = 1; k < length; ++k) {
      if (i + k >= size) return i;  // the file ends inside the character
      const uint8_t next = bytes[i + k];
      if (next < (k == 1 ? low : 0x80) || next > (k == 1 ? high : 0xBF)) return i + k;
    }
    i += length;
  }
  return size;
}

TokenArray OpenTextTokens(const OpenRequest& request, double val_fraction, bool fraction_given) {
  const TextPart part = LocateText(request, fraction_given);
  const std::string name = PartName(part, val_fraction);
  const std::string key = CacheKey(part, val_fraction);
  const std::string entry =
      request.cache_dir.empty()
          ? ""
          : CacheEntryPath(request.cache_dir, key,
                           std::string("text-") + (part.train ? "train" : "val") + ".tokens");
  if (!entry.empty()) {
    TokenArray cached = ReadCacheEntry(entry, key, name, request);
    if (cached.count() > 0) return cached;
  }
  TokenArray tokens = ReadText(part, val_fraction, name);
  if (entry.empty() || tokens.count() == 0) return tokens;
  CacheHeader header{};
  std::memcpy(header.magic, kCacheMagic, sizeof header.magic);
  header.key_hash = StableHash(key);
  header.tokens = uint64_t(tokens.count());
  try {
    WriteFileAtomically(entry, &header, sizeof header, tokens.file().data() + tokens.offset(),
                        size_t(tokens.count()));
    request.log.Info("wrote the " + std::to_string(tokens.count()) + " byte tokens of " + name +
                     " to the data cache: " + entry);
  } catch (const PluginError& error) {
    request.log.Warning(std::string("data cache: ") + error.what() +
                        "; training goes on, the next run reads the text again "
                        "(--data-cache none turns the cache off)");
  }
  return tokens;
}

}  // namespace dpl::datasets::tokens
