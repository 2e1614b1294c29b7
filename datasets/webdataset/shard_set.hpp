// The shards of one split, each opened and indexed (Note [Shard index]), and where each of the
// split's samples lies: sample i is the (i - start)th of the shard whose range holds it, the
// shards taken in the split's order. The sampler's order covers these samples, not the shards, so
// shards of any sizes give every rank the same number of samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/plugin.hpp"
#include "shard_file.hpp"
#include "shard_index.hpp"

namespace dpl::datasets::webdataset {

class ShardSet {
 public:
  // Opens and indexes `paths` on up to `threads` threads (with the data cache `cache_dir`, "" for
  // none). Throws the first failing shard's PluginError, in the paths' order.
  ShardSet(const std::vector<std::string>& paths, const SampleLayout& layout,
           const InputInspector& inspect, const std::string& cache_dir, const Logger& log,
           int threads);

  int64_t count() const { return starts_.back(); }
  size_t shard_count() const { return shards_.size(); }

  struct Sample {
    const ShardFile* file;
    const ShardIndex* index;
    const IndexRecord* record;
  };
  // Sample `sample` (0 <= sample < count()).
  Sample Locate(int64_t sample) const;
  // "<shard>: sample "KEY" (member NAME)", for messages.
  static std::string Describe(const Sample& sample);
  // Reads the input's data into *bytes (resized to it). Throws PluginError(DPL_ERR_IO) naming the
  // shard and the sample when the shard changed under the run or ends before the data.
  static void ReadInput(const Sample& sample, std::vector<uint8_t>* bytes);

 private:
  struct Shard {
    std::unique_ptr<ShardFile> file;
    std::unique_ptr<ShardIndex> index;
  };
  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;  // shard s holds samples [starts_[s], starts_[s + 1])
};

}  // namespace dpl::datasets::webdataset
