// Files as the dataset plugins read them: whole files into memory, read-only mappings that notice
// when their file changes under the run, and atomic writes for the data cache. Failures throw
// PluginError (dpl/support/error.hpp) naming the file: DPL_ERR_NOT_FOUND for a missing one,
// DPL_ERR_IO for one that cannot be read or written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dpl::datasets {

// Read-only bytes with a shared owner; copies share them.
class SharedBytes {
 public:
  SharedBytes() = default;
  SharedBytes(std::shared_ptr<const void> owner, const uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// What identifies a version of a file: its size and modification time.
struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_seconds = 0;
  int64_t mtime_nanoseconds = 0;
  bool operator==(const FileStamp& other) const {
    return size == other.size && mtime_seconds == other.mtime_seconds &&
           mtime_nanoseconds == other.mtime_nanoseconds;
  }
  bool operator!=(const FileStamp& other) const { return !(*this == other); }
};

bool IsRegularFile(const std::string& path);
bool IsDirectory(const std::string& path);
// The stamp of `path` (following symbolic links); throws DPL_ERR_IO when it cannot be read.
FileStamp StampOf(const std::string& path);
// The canonical absolute path, or `path` itself when it cannot be resolved.
std::string RealPath(const std::string& path);
std::string BaseName(const std::string& path);

// The whole file in memory, in transparent huge pages where it is large enough to use them.
SharedBytes ReadWholeFile(const std::string& path);

// A file mapped read-only and shared with every process that maps it (no copy). Reading a mapping
// whose file was truncated kills the process with SIGBUS, so readers call CheckUnchanged before
// each batch: a file rewritten in place under the run is then an error, not a crash (one replaced
// by a new file, as most tools do, keeps serving the old contents it mapped).
class MappedFile {
 public:
  enum class Access { kRandom, kPopulate };  // kPopulate maps every page now (files read whole)
  static std::shared_ptr<const MappedFile> Open(const std::string& path, Access access);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(address_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Throws DPL_ERR_IO naming the file when its size or modification time differs from when it
  // was mapped.
  void CheckUnchanged() const;

 private:
  MappedFile(std::string path, int fd, void* address, size_t size, FileStamp stamp)
      : path_(std::move(path)), fd_(fd), address_(address), size_(size), stamp_(stamp) {}
  std::string path_;
  int fd_;
  void* address_;
  size_t size_;
  FileStamp stamp_;
};

// Creates `path` and every missing folder above it; throws DPL_ERR_IO.
void MakeDirectories(const std::string& path);

// Writes `header` then `payload` to `path` atomically (a temporary file, fsync, rename): a
// complete file appears under the name or nothing does. Creates the folder. Throws DPL_ERR_IO.
void WriteFileAtomically(const std::string& path, const void* header, size_t header_size,
                         const void* payload, size_t payload_size);

}  // namespace dpl::datasets
