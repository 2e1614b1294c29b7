#include "shard_index.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "common/data_cache.hpp"
#include "dpl/support/error.hpp"
#include "json_field.hpp"

namespace dpl::datasets::webdataset {
namespace {

using support::PluginError;

constexpr char kIndexMagic[8] = {'D', 'P', 'L', 'W', 'D', 'S', '0', '1'};
constexpr size_t kMaxNameBytes = 0xFFFF;
// The largest label member read (a .cls is a few bytes, a .json a few hundred).
constexpr uint64_t kMaxLabelBytes = uint64_t{1} << 20;

// The head of an index file, followed by `count` IndexRecords and `names_bytes` of names.
struct IndexFileHeader {
  char magic[8];
  uint64_t key_hash;    // StableHash of the entry's key
  uint64_t shard_size;  // every record's data lies below it
  int64_t count;
  uint64_t names_bytes;
  uint64_t record_bytes;  // sizeof(IndexRecord)
  uint64_t content_hash;  // BytesHash of the records and names: damage is found, not served
  uint64_t reserved;
};
static_assert(sizeof(IndexFileHeader) == 64, "the index file's header layout is fixed");

std::string Lower(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// FNV-1a over bytes, as StableHash over text.
uint64_t BytesHash(const uint8_t* bytes, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

std::string Quoted(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

// Which part of a sample a member is, by its extension (Note [Shard index]).
struct MemberRole {
  enum Kind { kNone, kInput, kLabel } kind = kNone;
  std::string key;
  std::string extension;  // the layout's, lower case
};

class MemberMatcher {
 public:
  explicit MemberMatcher(const SampleLayout& layout) {
    for (const std::string& extension : layout.input_extensions) {
      extensions_.push_back({extension, MemberRole::kInput});
    }
    if (!layout.label_extension.empty()) {
      extensions_.push_back({layout.label_extension, MemberRole::kLabel});
    }
  }

  // WebDataset's split of a name (the webdataset package's base_plus_ext): the key is the name up
  // to the first dot of its last component, the extension all after that dot, in lower case.
  MemberRole RoleOf(const std::string& name) const {
    const size_t base = name.rfind('/') + 1;  // 0 when there is no folder
    const size_t dot = name.find('.', base);
    if (dot == std::string::npos || dot == base) return {};
    const std::string extension = Lower(name.substr(dot + 1));
    for (const auto& [known, kind] : extensions_) {
      if (extension == known) return {kind, name.substr(0, dot), known};
    }
    return {};
  }

 private:
  std::vector<std::pair<std::string, MemberRole::Kind>> extensions_;
};

// A label member's text: the integer of a .cls (surrounding white space allowed), or the layout's
// field of a .json.
int64_t ParseLabel(const std::string& text, const SampleLayout& layout, const std::string& where) {
  int64_t label = 0;
  if (layout.label_extension == "json") {
    const std::string problem = ReadJsonIntegerField(text, layout.json_field, &label);
    if (!problem.empty()) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, where + ": " + problem +
                                                      " (label=json:" + layout.json_field +
                                                      " reads the label from that field)");
    }
  } else {
    const size_t first = text.find_first_not_of(" \t\r\n");
    const size_t last = text.find_last_not_of(" \t\r\n");
    const std::string trimmed =
        first == std::string::npos ? "" : text.substr(first, last - first + 1);
    const size_t digits = !trimmed.empty() && (trimmed[0] == '-' || trimmed[0] == '+') ? 1 : 0;
    if (trimmed.size() <= digits || trimmed.size() - digits > 18 ||
        trimmed.find_first_not_of("0123456789", digits) != std::string::npos) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, where + ": " + Quoted(trimmed.substr(0, 40)) +
                                                      " is not an integer label (a ." +
                                                      layout.label_extension +
                                                      " member holds the class as decimal text)");
    }
    label = std::stoll(trimmed);
  }
  if (label < 0) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, where + ": label " + std::to_string(label) +
                                                    " is negative; labels are classes 0..N-1");
  }
  return label;
}

std::string ReadLabelText(const ShardFile& shard, const TarMember& member,
                          const std::string& where) {
  if (member.size > kMaxLabelBytes) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, where + ": " + std::to_string(member.size) +
                                                    " bytes is too large for a label member");
  }
  if (member.head_size == member.size) {
    return std::string(reinterpret_cast<const char*>(member.head), member.head_size);
  }
  std::string text(size_t(member.size), '\0');
  shard.ReadSome(member.data_offset, text.size(), reinterpret_cast<uint8_t*>(text.data()));
  return text;
}

// A sample while its shard is walked.
struct PendingSample {
  std::string key;
  std::string input_name;  // "" until its input member is seen
  uint64_t input_at = 0;   // byte of the input member's data, for messages
  InputInfo input;
  std::string label_name;  // "" until its label member is seen
  uint64_t label_at = 0;
  int64_t label = 0;
};

std::string Twice(const ShardFile& shard, const std::string& key, const std::string& first,
                  uint64_t first_at, const std::string& second, uint64_t second_at,
                  const char* part) {
  const std::string both = shard.path() + ": sample " + Quoted(key) + " has two " + part +
                           " members, " + first + " (byte " + std::to_string(first_at) + ") and " +
                           second + " (byte " + std::to_string(second_at) + ")";
  const std::string first_extension = first.substr(key.size() + 1);
  const std::string second_extension = second.substr(key.size() + 1);
  if (Lower(first_extension) == Lower(second_extension)) {
    return both + "; keys must be unique within a shard";
  }
  return both + "; name the one to read, e.g. " +
         (std::string(part) == "input" ? "input=" : "label=") + Lower(first_extension);
}

// Walks the shard and returns its samples in the order their keys first appear.
std::vector<PendingSample> CollectSamples(const ShardFile& shard, const SampleLayout& layout,
                                          const InputInspector& inspect) {
  const MemberMatcher matcher(layout);
  std::vector<PendingSample> samples;
  std::unordered_map<std::string, size_t> by_key;
  ForEachTarMember(shard, [&](const TarMember& member) {
    const MemberRole role = matcher.RoleOf(member.name);
    if (role.kind == MemberRole::kNone) return;
    const auto [slot, added] = by_key.emplace(role.key, samples.size());
    if (added) {
      samples.emplace_back();
      samples.back().key = role.key;
    }
    PendingSample& sample = samples[slot->second];
    const std::string where = shard.path() + ": member " + member.name;
    if (role.kind == MemberRole::kInput) {
      if (!sample.input_name.empty()) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          Twice(shard, role.key, sample.input_name, sample.input_at, member.name,
                                member.data_offset, "input"));
      }
      sample.input = inspect(shard, member, role.extension);
      sample.input_name = member.name;
      sample.input_at = member.data_offset;
    } else {
      if (!sample.label_name.empty()) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          Twice(shard, role.key, sample.label_name, sample.label_at, member.name,
                                member.data_offset, "label"));
      }
      sample.label = ParseLabel(ReadLabelText(shard, member, where), layout, where);
      sample.label_name = member.name;
      sample.label_at = member.data_offset;
    }
  });
  for (const PendingSample& sample : samples) {
    if (sample.input_name.empty()) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        shard.path() + ": sample " + Quoted(sample.key) + " has no input: the " +
                            "shard holds " + sample.label_name + " but no member " + sample.key +
                            "." + layout.input_extensions.front() + " (every sample needs " +
                            layout.Text() + ")");
    }
    if (!layout.label_extension.empty() && sample.label_name.empty()) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        shard.path() + ": sample " + Quoted(sample.key) +
                            " has no label: the shard holds " + sample.input_name +
                            " but no member " + sample.key + "." + layout.label_extension +
                            " (every sample needs " + layout.Text() + ")");
    }
    if (sample.input_name.size() > kMaxNameBytes) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        shard.path() + ": member " + sample.input_name.substr(0, 80) +
                            "... has a name over " + std::to_string(kMaxNameBytes) + " bytes");
    }
  }
  return samples;
}

// The index file's bytes for `samples`.
std::vector<uint8_t> IndexBytes(const std::vector<PendingSample>& samples, uint64_t key_hash,
                                uint64_t shard_size) {
  std::string names;
  std::vector<IndexRecord> records;
  records.reserve(samples.size());
  for (const PendingSample& sample : samples) {
    IndexRecord record{};
    record.data_offset = sample.input.data_offset;
    record.data_size = sample.input.data_size;
    record.label = sample.label_name.empty() ? sample.input.label : sample.label;
    record.name_offset = uint32_t(names.size());
    record.name_length = uint16_t(sample.input_name.size());
    record.key_length = uint16_t(sample.key.size());
    record.format = sample.input.format;
    record.channels = sample.input.channels;
    record.height = sample.input.height;
    record.width = sample.input.width;
    records.push_back(record);
    names += sample.input_name;
  }
  IndexFileHeader header{};
  std::memcpy(header.magic, kIndexMagic, sizeof header.magic);
  header.key_hash = key_hash;
  header.shard_size = shard_size;
  header.count = int64_t(records.size());
  header.names_bytes = names.size();
  header.record_bytes = sizeof(IndexRecord);
  std::vector<uint8_t> bytes(sizeof header + records.size() * sizeof(IndexRecord) + names.size());
  std::memcpy(bytes.data(), &header, sizeof header);
  if (!records.empty()) {
    std::memcpy(bytes.data() + sizeof header, records.data(), records.size() * sizeof(IndexRecord));
  }
  std::memcpy(bytes.data() + sizeof header + records.size() * sizeof(IndexRecord), names.data(),
              names.size());
  header.content_hash = BytesHash(bytes.data() + sizeof header, bytes.size() - sizeof header);
  std::memcpy(bytes.data(), &header, sizeof header);
  return bytes;
}

// Why the index file `bytes` is not the index of this shard with this key ("" when it is).
std::string IndexProblem(const uint8_t* bytes, size_t size, uint64_t key_hash,
                         uint64_t shard_size) {
  IndexFileHeader header{};
  if (size < sizeof header) return "shorter than its header";
  std::memcpy(&header, bytes, sizeof header);
  if (std::memcmp(header.magic, kIndexMagic, sizeof header.magic) != 0) return "not an index file";
  if (header.key_hash != key_hash || header.shard_size != shard_size ||
      header.record_bytes != sizeof(IndexRecord)) {
    return "the index of another shard or layout";
  }
  if (header.count < 0 || header.names_bytes > size ||
      uint64_t(header.count) > (size - sizeof header) / sizeof(IndexRecord) ||
      sizeof header + uint64_t(header.count) * sizeof(IndexRecord) + header.names_bytes != size) {
    return "its size does not match its header";
  }
  if (BytesHash(bytes + sizeof header, size - sizeof header) != header.content_hash) {
    return "its records do not match their hash";
  }
  const auto* records = reinterpret_cast<const IndexRecord*>(bytes + sizeof header);
  for (int64_t i = 0; i < header.count; ++i) {
    const IndexRecord& r = records[i];
    if (r.data_offset > shard_size || r.data_size > shard_size - r.data_offset ||
        uint64_t(r.name_offset) + r.name_length > header.names_bytes ||
        r.key_length >= r.name_length || r.label < 0) {
      return "record " + std::to_string(i) + " is damaged";
    }
  }
  return "";
}

}  // namespace

std::string SampleLayout::Text() const {
  std::string text;
  for (size_t i = 0; i < input_extensions.size(); ++i) {
    text += (i == 0                             ? "."
             : i + 1 == input_extensions.size() ? " or ."
                                                : ", .") +
            input_extensions[i];
  }
  if (!label_extension.empty()) {
    text += " and ." + label_extension;
    if (!json_field.empty()) text += " (field \"" + json_field + "\")";
  }
  return text;
}

ShardIndex::ShardIndex(SharedBytes bytes) : bytes_(std::move(bytes)) {
  IndexFileHeader header{};
  std::memcpy(&header, bytes_.data(), sizeof header);
  count_ = header.count;
  records_ = reinterpret_cast<const IndexRecord*>(bytes_.data() + sizeof header);
  names_ = reinterpret_cast<const char*>(records_ + count_);
}

ShardIndex ShardIndex::Load(const ShardFile& shard, const SampleLayout& layout,
                            const InputInspector& inspect, const std::string& cache_dir,
                            const Logger& log, std::string* cache_failure) {
  const std::string key = "webdataset index v3|" + SourceKey(shard.path()) + "|" + layout.Text() +
                          "|" + layout.input_reading;
  const uint64_t key_hash = StableHash(key);
  const std::string entry =
      cache_dir.empty()
          ? ""
          : CacheEntryPath(cache_dir, key, "webdataset-" + BaseName(shard.path()) + ".index");
  if (!entry.empty() && IsRegularFile(entry)) {
    try {
      std::shared_ptr<const MappedFile> mapped =
          MappedFile::Open(entry, MappedFile::Access::kRandom);
      const std::string problem =
          IndexProblem(mapped->data(), mapped->size(), key_hash, shard.size());
      if (problem.empty()) {
        const uint8_t* data = mapped->data();
        const size_t size = mapped->size();
        return ShardIndex(SharedBytes(std::move(mapped), data, size));
      }
      log.Warning("the data cache's index " + entry + " is damaged (" + problem + "); indexing " +
                  shard.path() + " again");
    } catch (const PluginError& error) {
      log.Warning("cannot read the data cache's index " + entry + " (" + error.what() +
                  "); indexing " + shard.path() + " again");
    }
  }
  auto bytes = std::make_shared<std::vector<uint8_t>>(
      IndexBytes(CollectSamples(shard, layout, inspect), key_hash, shard.size()));
  if (!entry.empty()) {
    try {
      WriteFileAtomically(entry, bytes->data(), bytes->size(), nullptr, 0);
      std::shared_ptr<const MappedFile> mapped =
          MappedFile::Open(entry, MappedFile::Access::kRandom);
      if (IndexProblem(mapped->data(), mapped->size(), key_hash, shard.size()).empty()) {
        const uint8_t* data = mapped->data();
        const size_t size = mapped->size();
        return ShardIndex(SharedBytes(std::move(mapped), data, size));
      }
    } catch (const PluginError& error) {
      *cache_failure = error.what();
    }
  }
  const uint8_t* data = bytes->data();
  const size_t size = bytes->size();
  return ShardIndex(SharedBytes(std::move(bytes), data, size));
}

}  // namespace dpl::datasets::webdataset
