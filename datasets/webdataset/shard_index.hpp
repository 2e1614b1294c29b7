// Note [Shard index]: a WebDataset shard is a tar of samples, the files of one sample stored
// under one key (`000123.jpg`, `000123.cls`). The index of a shard lists its samples in the order
// their keys first appear, each with where its input member's data lies in the shard (so a fill
// reads it with one pread), its label (read once, here) and what the plugin read of its input's
// header (an image's size, a token array's layout). It is one small file per shard in the data
// cache (Note [Data cache]), keyed by the shard's canonical path, size, modification and change
// times and by the sample layout and how inputs are read, written atomically (several launchers may
// build it at once: the last rename wins, and every one is complete), and memory-mapped where it is
// read: its pages are the page cache's, so a process's own memory does not grow with the data set.
// Without a cache folder the index is built in memory at every start.
//
// Names split as WebDataset splits them (the webdataset package's base_plus_ext): the key is the
// name up to the first dot of its file name, the extension all after that dot, compared in lower
// case; so folders may hold dots and file names not ("train.v2/n0144.seg.png" is key
// "train.v2/n0144", extension "seg.png"). A member belongs to a sample when its extension is one
// of the layout's; members of other extensions are not read.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/files.hpp"
#include "common/plugin.hpp"
#include "shard_file.hpp"
#include "tar_members.hpp"

namespace dpl::datasets::webdataset {

// Which members make a sample.
struct SampleLayout {
  std::vector<std::string> input_extensions;  // lower case, e.g. jpg jpeg png webp
  std::string label_extension;                // "cls", "json", ...; "" for samples without one
  std::string json_field;  // with label_extension "json": the integer field that is the label
  // How the InputInspector reads an input ("dtype=uint32" for token samples, "" for images): the
  // index holds what it read (sizes, the largest id), so this is part of the cache key.
  std::string input_reading;

  // The layout in a line: part of the cache key, and the message of a sample without a part.
  std::string Text() const;
};

// What the plugin reads of an input member when its shard is indexed (InputInspector).
struct InputInfo {
  uint64_t data_offset = 0;  // where the input's data starts (a .npy member: after its header)
  uint64_t data_size = 0;
  uint16_t format = 0;  // the plugin's code for the member's format
  uint16_t channels = 0;
  uint32_t height = 0;
  uint32_t width = 0;
  // For samples without a label member: a value of the input the index keeps in the record's
  // label (token samples: the largest id, which the vocabulary must exceed).
  int64_t label = 0;
};

// Reads the header of an input member (`extension` is the layout's extension it has); throws
// PluginError naming the member when it is not what the layout says.
using InputInspector =
    std::function<InputInfo(const ShardFile&, const TarMember&, const std::string& extension)>;

// One sample of a shard, as the index file stores it (48 bytes, little-endian x86-64 layout).
struct IndexRecord {
  uint64_t data_offset;  // InputInfo
  uint64_t data_size;
  int64_t label;         // the label; for samples without one, InputInfo::label
  uint32_t name_offset;  // the input member's name, in the index's name block
  uint16_t name_length;
  uint16_t key_length;  // the key is the name's first key_length bytes
  uint16_t format;
  uint16_t channels;
  uint32_t height;
  uint32_t width;
  uint32_t reserved;
};
static_assert(sizeof(IndexRecord) == 48, "the index file's record layout is fixed");

class ShardIndex {
 public:
  // The index of `shard` for `layout` (Note [Shard index]): read from the cache folder when it
  // has this shard's entry, else built (each input member through `inspect`, each label read)
  // and written there; an entry that is damaged is rebuilt with a warning to `log`. An entry
  // that cannot be written leaves the index in memory and says why in `*cache_failure` (the
  // caller warns once for all shards). Throws
  // PluginError(DPL_ERR_INVALID_ARGUMENT) naming the shard, the key and the member for a sample
  // without its input or its label, a key whose input or label appears twice, or a label that is
  // not an integer or is negative.
  static ShardIndex Load(const ShardFile& shard, const SampleLayout& layout,
                         const InputInspector& inspect, const std::string& cache_dir,
                         const Logger& log, std::string* cache_failure);

  int64_t count() const { return count_; }
  const IndexRecord& record(int64_t sample) const { return records_[sample]; }
  // The input member's name and the sample's key.
  std::string_view MemberName(const IndexRecord& record) const {
    return std::string_view(names_ + record.name_offset, record.name_length);
  }
  std::string_view Key(const IndexRecord& record) const {
    return MemberName(record).substr(0, record.key_length);
  }

 private:
  explicit ShardIndex(SharedBytes bytes);

  SharedBytes bytes_;  // the whole index file: header, records, names
  int64_t count_ = 0;
  const IndexRecord* records_ = nullptr;
  const char* names_ = nullptr;
};

}  // namespace dpl::datasets::webdataset
