// One shard opened for reading by offset: the index walks its tar headers and every fill reads a
// sample's member with one pread, so nothing is unpacked and nothing of the shard stays in this
// process's memory but the page cache's pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/files.hpp"

namespace dpl::datasets::webdataset {

class ShardFile {
 public:
  // Opens `path` for reading; throws PluginError naming it (DPL_ERR_NOT_FOUND when missing).
  explicit ShardFile(std::string path);
  ~ShardFile();
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  const std::string& path() const { return path_; }
  // Its size and modification time when it was opened.
  const FileStamp& stamp() const { return stamp_; }
  uint64_t size() const { return stamp_.size; }

  // Reads up to `size` bytes at `offset` into `out` and returns how many there were (fewer only
  // at the end of the file). Throws DPL_ERR_IO naming the shard when the read fails.
  size_t ReadSome(uint64_t offset, size_t size, uint8_t* out) const;
  // Throws DPL_ERR_IO naming the shard when its size or modification time changed since it was
  // opened (a shard rewritten under the run would give other bytes at the indexed offsets).
  void CheckUnchanged() const;

 private:
  std::string path_;
  int fd_ = -1;
  FileStamp stamp_;
};

}  // namespace dpl::datasets::webdataset
