// Stored (uncompressed) zip archives, the container of torch.save files. Only what PyTorch's
// files need: writing stored records whose data is aligned (torch aligns to 64 bytes, padding the
// local header's extra field, so that a reader may map tensors in place), reading stored records
// with their CRC-32 checked, and ZIP64 fields for records or offsets beyond 4 GiB. Every read is
// bounds-checked against the file's size: a truncated or corrupt file is refused, never trusted.
#ifndef DPL_TORCH_FILES_ZIP_ARCHIVE_HPP
#define DPL_TORCH_FILES_ZIP_ARCHIVE_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dpl/support/status.hpp"

namespace dpl::torch_files {

inline constexpr uint64_t kZip32Limit = 0xFFFFFFFFu;

struct ZipWriterOptions {
  // Records at least this large, or starting at least this far into the file, are written with
  // ZIP64 fields. The zip format's 32-bit limit; a lower value only serves to test ZIP64 archives.
  uint64_t zip64_threshold = kZip32Limit;
  // The data of every record starts at a multiple of this many bytes (torch's kFieldAlignment).
  uint32_t alignment = 64;
};

// Writes a zip archive record by record to an open file descriptor, from offset 0 on.
class ZipWriter {
 public:
  // `fd` stays owned by the caller; `path` names it in messages.
  ZipWriter(int fd, std::string path, ZipWriterOptions options = {});

  // Appends one stored record `name` holding `size` bytes at `data`.
  Status Add(const std::string& name, const void* data, uint64_t size);
  // Writes the central directory and the end records (ZIP64 ones too, as torch does); the archive
  // is complete after this. Errors name the path and the failed call.
  Status Finish();

 private:
  struct Entry {
    std::string name;
    uint32_t crc32;
    uint64_t size;
    uint64_t offset;
  };
  Status WriteAll(const void* data, uint64_t size);
  std::string CentralHeader(const Entry& entry) const;

  int fd_;
  std::string path_;
  ZipWriterOptions options_;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;
};

// A record of an archive, as its central directory describes it.
struct ZipRecord {
  std::string name;
  uint64_t size = 0;             // uncompressed
  uint64_t compressed_size = 0;  // equal to size for a stored record
  uint32_t crc32 = 0;
  uint16_t method = 0;  // 0: stored
  uint16_t flags = 0;
  uint64_t local_header_offset = 0;
};

// Reads a zip archive: its central directory at Open(), records on demand.
class ZipReader {
 public:
  // Opens `path` and reads its central directory. Refuses, naming the path: a file that does not
  // start like a zip archive; one without end records (truncated); a central directory that lies
  // outside the file or is malformed; two records of one name; an archive on several disks.
  static Result<std::unique_ptr<ZipReader>> Open(const std::string& path);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  // The records in central-directory order.
  const std::vector<ZipRecord>& records() const { return records_; }
  // The record called `name`, or nullptr.
  const ZipRecord* Find(std::string_view name) const;
  // The bytes of `record`, checked against its CRC-32. Refuses compressed or encrypted records
  // and records that lie outside the file.
  Result<std::vector<uint8_t>> Read(const ZipRecord& record) const;

 private:
  ZipReader(int fd, std::string path, uint64_t file_size);
  Status ReadAt(uint64_t offset, void* out, uint64_t size) const;
  // Open()'s reading of the central directory, in its steps.
  struct DirectoryLocation;
  Status ReadCentralDirectory();
  Status CheckStartsLikeZip() const;
  Status FindEndRecord(DirectoryLocation* location) const;
  Status ReadZip64EndRecord(DirectoryLocation* location) const;
  Status ParseCentralHeader(const std::vector<uint8_t>& directory, uint64_t index, size_t* at,
                            ZipRecord* record) const;
  Status ReadZip64Extra(const uint8_t* extra, size_t extra_size, const std::string& entry,
                        ZipRecord* record) const;
  Status IndexRecords();
  Status Corrupt(const std::string& what) const;

  int fd_;
  std::string path_;
  uint64_t file_size_;
  uint64_t central_directory_offset_ = 0;
  std::vector<ZipRecord> records_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in records_
};

}  // namespace dpl::torch_files

#endif  // DPL_TORCH_FILES_ZIP_ARCHIVE_HPP
