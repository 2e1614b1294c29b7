#include "shard_set.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {

using support::PluginError;

namespace {

// One warning for every shard whose index could not be cached: an unwritable --data-cache fails
// alike for each of 1,500 shards.
void WarnOfCacheFailures(const std::vector<std::string>& failures, const Logger& log) {
  const auto first = std::find_if(failures.begin(), failures.end(),
                                  [](const std::string& failure) { return !failure.empty(); });
  if (first == failures.end()) return;
  const auto count = std::count_if(failures.begin(), failures.end(),
                                   [](const std::string& failure) { return !failure.empty(); });
  log.Warning(
      "data cache: " + *first +
      (count > 1 ? " (and likewise for " + std::to_string(count - 1) + " more shards)"
                 : std::string()) +
      "; the indexes stay in memory and the next run indexes the shards again (--data-cache "
      "none turns the cache off)");
}

}  // namespace

ShardSet::ShardSet(const std::vector<std::string>& paths, const SampleLayout& layout,
                   const InputInspector& inspect, const std::string& cache_dir, const Logger& log,
                   int threads) {
  shards_.resize(paths.size());
  std::vector<std::string> cache_failures(paths.size());
  ParallelFor(threads, int64_t(paths.size()), [&](int64_t s) {
    Shard& shard = shards_[size_t(s)];
    shard.file = std::make_unique<ShardFile>(paths[size_t(s)]);
    shard.index = std::make_unique<ShardIndex>(
        ShardIndex::Load(*shard.file, layout, inspect, cache_dir, log, &cache_failures[size_t(s)]));
  });
  WarnOfCacheFailures(cache_failures, log);
  starts_.assign(1, 0);
  for (const Shard& shard : shards_) starts_.push_back(starts_.back() + shard.index->count());
}

ShardSet::Sample ShardSet::Locate(int64_t sample) const {
  // The last shard starting at or before `sample` (empty shards start where the next one does).
  const size_t s =
      size_t(std::upper_bound(starts_.begin(), starts_.end(), sample) - starts_.begin() - 1);
  const Shard& shard = shards_[s];
  return {shard.file.get(), shard.index.get(), &shard.index->record(sample - starts_[s])};
}

std::string ShardSet::Describe(const Sample& sample) {
  return sample.file->path() + ": sample \"" + std::string(sample.index->Key(*sample.record)) +
         "\" (member " + std::string(sample.index->MemberName(*sample.record)) + ")";
}

void ShardSet::ReadInput(const Sample& sample, std::vector<uint8_t>* bytes) {
  sample.file->CheckUnchanged();
  bytes->resize(size_t(sample.record->data_size));
  const size_t read =
      sample.file->ReadSome(sample.record->data_offset, bytes->size(), bytes->data());
  if (read != bytes->size()) {
    throw PluginError(DPL_ERR_IO, Describe(sample) + ": the shard ends before the member's " +
                                      std::to_string(bytes->size()) + " bytes");
  }
}

}  // namespace dpl::datasets::webdataset
