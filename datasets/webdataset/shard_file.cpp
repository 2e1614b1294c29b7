#include "shard_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {
namespace {

using support::PluginError;

FileStamp StampOfDescriptor(int fd, const std::string& path) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    throw PluginError(DPL_ERR_IO, path + ": cannot read its size: " + std::strerror(errno));
  }
  FileStamp stamp;
  stamp.size = uint64_t(info.st_size);
  stamp.mtime_seconds = info.st_mtim.tv_sec;
  stamp.mtime_nanoseconds = info.st_mtim.tv_nsec;
  return stamp;
}

}  // namespace

ShardFile::ShardFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int error = errno;
    const std::string advice = error == EMFILE ? " (every shard stays open while the data is "
                                                 "read: raise the limit, ulimit -n, or write "
                                                 "fewer, larger shards)"
                                               : "";
    throw PluginError(
        error == ENOENT ? DPL_ERR_NOT_FOUND : DPL_ERR_IO,
        path_ + ": cannot open the shard for reading: " + std::strerror(error) + advice);
  }
  try {
    stamp_ = StampOfDescriptor(fd_, path_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

ShardFile::~ShardFile() {
  if (fd_ >= 0) ::close(fd_);
}

size_t ShardFile::ReadSome(uint64_t offset, size_t size, uint8_t* out) const {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd_, out + done, size - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw PluginError(DPL_ERR_IO, path_ + ": read of " + std::to_string(size) +
                                        " bytes at byte " + std::to_string(offset) +
                                        " failed: " + std::strerror(errno));
    }
    if (n == 0) break;
    done += size_t(n);
  }
  return done;
}

void ShardFile::CheckUnchanged() const {
  const FileStamp now = StampOfDescriptor(fd_, path_);
  if (now != stamp_) {
    throw PluginError(DPL_ERR_IO, path_ + ": the shard changed while it was being read (" +
                                      std::to_string(stamp_.size) + " bytes when indexed, " +
                                      std::to_string(now.size) +
                                      " now); restart the job on shards that stay put");
  }
}

}  // namespace dpl::datasets::webdataset
