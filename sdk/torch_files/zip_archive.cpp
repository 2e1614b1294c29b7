#include "dpl/torch_files/zip_archive.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dpl::torch_files {
namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kZip64LocatorSize = 20;
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01: fixed, so output is stable

void Put16(std::string* out, uint16_t v) {
  out->push_back(char(v & 0xff));
  out->push_back(char(v >> 8));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, uint16_t(v & 0xffff));
  Put16(out, uint16_t(v >> 16));
}
void Put64(std::string* out, uint64_t v) {
  Put32(out, uint32_t(v & 0xffffffffu));
  Put32(out, uint32_t(v >> 32));
}
uint16_t Get16(const uint8_t* p) {
  return uint16_t(p[0] | (p[1] << 8));
}
uint32_t Get32(const uint8_t* p) {
  return uint32_t(Get16(p)) | (uint32_t(Get16(p + 2)) << 16);
}
uint64_t Get64(const uint8_t* p) {
  return uint64_t(Get32(p)) | (uint64_t(Get32(p + 4)) << 32);
}

uint32_t Crc32(const void* data, uint64_t size) {
  const auto* bytes = static_cast<const Bytef*>(data);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {  // zlib takes 32-bit lengths
    const uInt chunk = uInt(std::min<uint64_t>(size, 1u << 30));
    crc = crc32(crc, bytes, chunk);
    bytes += chunk;
    size -= chunk;
  }
  return uint32_t(crc);
}

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + " failed: " + std::strerror(errno);
}

const char* kRewrite = "; write it again or use a good copy";

// What follows the central directory: the ZIP64 end record, its locator and the end record, all
// three whatever the sizes, as torch writes them.
std::string EndRecords(uint64_t directory_offset, uint64_t directory_size, uint64_t count) {
  const uint64_t zip64_end_offset = directory_offset + directory_size;
  std::string end;
  Put32(&end, kZip64EndSignature);
  Put64(&end, kZip64EndSize - 12);  // the record's size after this field
  Put16(&end, 45);
  Put16(&end, 45);
  Put32(&end, 0);
  Put32(&end, 0);
  Put64(&end, count);
  Put64(&end, count);
  Put64(&end, directory_size);
  Put64(&end, directory_offset);
  Put32(&end, kZip64LocatorSignature);
  Put32(&end, 0);
  Put64(&end, zip64_end_offset);
  Put32(&end, 1);
  Put32(&end, kEndSignature);
  Put16(&end, 0);
  Put16(&end, 0);
  Put16(&end, uint16_t(std::min<uint64_t>(count, 0xFFFF)));
  Put16(&end, uint16_t(std::min<uint64_t>(count, 0xFFFF)));
  Put32(&end, uint32_t(std::min<uint64_t>(directory_size, kZip32Limit)));
  Put32(&end, uint32_t(std::min<uint64_t>(directory_offset, kZip32Limit)));
  Put16(&end, 0);  // comment
  return end;
}

}  // namespace

ZipWriter::ZipWriter(int fd, std::string path, ZipWriterOptions options)
    : fd_(fd), path_(std::move(path)), options_(options) {}

Status ZipWriter::WriteAll(const void* data, uint64_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size_t(std::min<uint64_t>(size, 1u << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Io(Errno("writing", path_));
    bytes += n;
    size -= uint64_t(n);
    offset_ += uint64_t(n);
  }
  return Status::Ok();
}

Status ZipWriter::Add(const std::string& name, const void* data, uint64_t size) {
  if (name.empty() || name.size() > 0xFFFF) {
    return Status::InvalidArgument("zip record name of " + std::to_string(name.size()) +
                                   " bytes for " + path_ + " (must be 1 to 65535 bytes)");
  }
  const bool zip64_size = size >= options_.zip64_threshold;
  const uint32_t crc = Crc32(data, size);
  std::string extra;
  if (zip64_size) {
    Put16(&extra, kZip64ExtraId);
    Put16(&extra, 16);
    Put64(&extra, size);
    Put64(&extra, size);
  }
  // The padding is an extra block of its own ("FB", as torch writes it): id, length, 'Z's.
  const uint64_t unpadded = offset_ + kLocalHeaderSize + name.size() + extra.size() + 4;
  const uint64_t alignment = std::max<uint32_t>(options_.alignment, 1);
  const uint64_t padding = (alignment - unpadded % alignment) % alignment;
  extra += "FB";
  Put16(&extra, uint16_t(padding));
  extra.append(size_t(padding), 'Z');

  std::string header;
  Put32(&header, kLocalHeaderSignature);
  Put16(&header, zip64_size ? 45 : 20);  // version needed to extract
  Put16(&header, 0);                     // flags
  Put16(&header, 0);                     // stored
  Put16(&header, 0);                     // time
  Put16(&header, kDosDate);
  Put32(&header, crc);
  Put32(&header, zip64_size ? uint32_t(kZip32Limit) : uint32_t(size));
  Put32(&header, zip64_size ? uint32_t(kZip32Limit) : uint32_t(size));
  Put16(&header, uint16_t(name.size()));
  Put16(&header, uint16_t(extra.size()));
  header += name;
  header += extra;
  entries_.push_back(Entry{name, crc, size, offset_});
  DPL_RETURN_IF_ERROR(WriteAll(header.data(), header.size()));
  return WriteAll(data, size);
}

Status ZipWriter::Finish() {
  const uint64_t directory_offset = offset_;
  std::string directory;
  for (const Entry& entry : entries_) directory += CentralHeader(entry);
  const std::string end = EndRecords(directory_offset, directory.size(), entries_.size());
  DPL_RETURN_IF_ERROR(WriteAll(directory.data(), directory.size()));
  return WriteAll(end.data(), end.size());
}

// The central directory's header of `entry`, with a ZIP64 extra field for what does not fit.
std::string ZipWriter::CentralHeader(const Entry& entry) const {
  const bool zip64_size = entry.size >= options_.zip64_threshold;
  const bool zip64_offset = entry.offset >= options_.zip64_threshold;
  std::string extra;
  if (zip64_size || zip64_offset) {
    Put16(&extra, kZip64ExtraId);
    Put16(&extra, uint16_t((zip64_size ? 16 : 0) + (zip64_offset ? 8 : 0)));
    if (zip64_size) {
      Put64(&extra, entry.size);
      Put64(&extra, entry.size);
    }
    if (zip64_offset) Put64(&extra, entry.offset);
  }
  const uint16_t version = extra.empty() ? 20 : 45;
  std::string header;
  Put32(&header, kCentralHeaderSignature);
  Put16(&header, version);  // made by (MS-DOS attributes, as torch)
  Put16(&header, version);  // needed to extract
  Put16(&header, 0);
  Put16(&header, 0);
  Put16(&header, 0);
  Put16(&header, kDosDate);
  Put32(&header, entry.crc32);
  Put32(&header, zip64_size ? uint32_t(kZip32Limit) : uint32_t(entry.size));
  Put32(&header, zip64_size ? uint32_t(kZip32Limit) : uint32_t(entry.size));
  Put16(&header, uint16_t(entry.name.size()));
  Put16(&header, uint16_t(extra.size()));
  Put16(&header, 0);  // comment
  Put16(&header, 0);  // disk
  Put16(&header, 0);  // internal attributes
  Put32(&header, 0);  // external attributes
  Put32(&header, zip64_offset ? uint32_t(kZip32Limit) : uint32_t(entry.offset));
  header += entry.name;
  header += extra;
  return header;
}

ZipReader::ZipReader(int fd, std::string path, uint64_t file_size)
    : fd_(fd), path_(std::move(path)), file_size_(file_size) {}

ZipReader::~ZipReader() {
  ::close(fd_);
}

Result<std::unique_ptr<ZipReader>> ZipReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Io(Errno("opening", path));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    Status error = Status::Io(Errno("fstat of", path));
    ::close(fd);
    return error;
  }
  std::unique_ptr<ZipReader> reader(new ZipReader(fd, path, uint64_t(info.st_size)));
  DPL_RETURN_IF_ERROR(reader->ReadCentralDirectory());
  return reader;
}

Status ZipReader::ReadAt(uint64_t offset, void* out, uint64_t size) const {
  if (offset > file_size_ || size > file_size_ - offset) {
    return Corrupt("a read of " + std::to_string(size) + " bytes at byte " +
                   std::to_string(offset) + " goes past the end of the file");
  }
  auto* bytes = static_cast<uint8_t*>(out);
  while (size > 0) {
    const ssize_t n =
        ::pread(fd_, bytes, size_t(std::min<uint64_t>(size, 1u << 30)), off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Io(Errno("reading", path_));
    if (n == 0) return Corrupt("the file ended while it was read (did it shrink?)");
    bytes += n;
    offset += uint64_t(n);
    size -= uint64_t(n);
  }
  return Status::Ok();
}

Status ZipReader::Corrupt(const std::string& what) const {
  return Status::InvalidArgument(path_ + " is corrupt or truncated: " + what + kRewrite);
}

// Where the end records say the central directory lies.
struct ZipReader::DirectoryLocation {
  uint64_t end_offset = 0;  // of the (32-bit) end record
  uint64_t count = 0;       // records
  uint64_t size = 0;
  uint64_t offset = 0;
  uint64_t limit = 0;  // where the central directory must end: at the first end record
};

Status ZipReader::ReadCentralDirectory() {
  DPL_RETURN_IF_ERROR(CheckStartsLikeZip());
  DirectoryLocation location;
  DPL_RETURN_IF_ERROR(FindEndRecord(&location));
  DPL_RETURN_IF_ERROR(ReadZip64EndRecord(&location));
  if (location.offset > location.limit || location.size > location.limit - location.offset) {
    return Corrupt("its central directory (" + std::to_string(location.size) + " bytes at byte " +
                   std::to_string(location.offset) + ") lies outside the file's " +
                   std::to_string(file_size_) + " bytes");
  }
  if (location.count > location.size / kCentralHeaderSize) {
    return Corrupt("its central directory is too small for " + std::to_string(location.count) +
                   " records");
  }
  central_directory_offset_ = location.offset;
  std::vector<uint8_t> directory(location.size);
  DPL_RETURN_IF_ERROR(ReadAt(location.offset, directory.data(), location.size));
  records_.reserve(location.count);
  size_t at = 0;
  for (uint64_t i = 0; i < location.count; ++i) {
    ZipRecord record;
    DPL_RETURN_IF_ERROR(ParseCentralHeader(directory, i, &at, &record));
    records_.push_back(std::move(record));
  }
  return IndexRecords();
}

Status ZipReader::CheckStartsLikeZip() const {
  uint8_t signature[4] = {0, 0, 0, 0};
  if (file_size_ >= 4) DPL_RETURN_IF_ERROR(ReadAt(0, signature, 4));
  if (file_size_ < 4 ||
      (Get32(signature) != kLocalHeaderSignature && Get32(signature) != kEndSignature)) {
    return Status::InvalidArgument(path_ + " is not a zip archive (it does not start with a zip " +
                                   "record)");
  }
  return Status::Ok();
}

// The end record sits at the very end, after a comment of up to 64 KiB.
Status ZipReader::FindEndRecord(DirectoryLocation* location) const {
  const uint64_t tail_size = std::min<uint64_t>(file_size_, kEndSize + 0xFFFF);
  std::vector<uint8_t> tail(tail_size);
  DPL_RETURN_IF_ERROR(ReadAt(file_size_ - tail_size, tail.data(), tail_size));
  int64_t end_at = -1;  // in `tail`
  for (int64_t i = int64_t(tail_size) - int64_t(kEndSize); i >= 0; --i) {
    const uint8_t* p = tail.data() + i;
    if (Get32(p) == kEndSignature && uint64_t(i) + kEndSize + Get16(p + 20) == tail_size) {
      end_at = i;
      break;
    }
  }
  if (end_at < 0) {
    return Status::InvalidArgument(
        path_ + " is truncated: it has no zip end record (an interrupted write or an incomplete " +
        "copy)" + kRewrite);
  }
  const uint8_t* end = tail.data() + end_at;
  location->end_offset = file_size_ - tail_size + uint64_t(end_at);
  if (Get16(end + 4) != 0 || Get16(end + 6) != 0) {
    return Status::InvalidArgument(path_ + " is a zip archive split over several disks, which " +
                                   "is not supported");
  }
  location->count = Get16(end + 10);
  location->size = Get32(end + 12);
  location->offset = Get32(end + 16);
  location->limit = location->end_offset;
  return Status::Ok();
}

// A ZIP64 locator right before the end record points to the ZIP64 end record, whose fields
// replace the end record's.
Status ZipReader::ReadZip64EndRecord(DirectoryLocation* location) const {
  const uint64_t end_offset = location->end_offset;
  if (end_offset < kZip64LocatorSize) return Status::Ok();
  uint8_t locator[kZip64LocatorSize];
  DPL_RETURN_IF_ERROR(ReadAt(end_offset - kZip64LocatorSize, locator, kZip64LocatorSize));
  if (Get32(locator) != kZip64LocatorSignature) return Status::Ok();
  const uint64_t zip64_end_offset = Get64(locator + 8);
  if (zip64_end_offset > end_offset - kZip64LocatorSize ||
      end_offset - kZip64LocatorSize - zip64_end_offset < kZip64EndSize) {
    return Corrupt("the ZIP64 end record lies outside the file");
  }
  uint8_t zip64_end[kZip64EndSize];
  DPL_RETURN_IF_ERROR(ReadAt(zip64_end_offset, zip64_end, kZip64EndSize));
  if (Get32(zip64_end) != kZip64EndSignature) return Corrupt("the ZIP64 end record is bad");
  location->count = Get64(zip64_end + 32);
  location->size = Get64(zip64_end + 40);
  location->offset = Get64(zip64_end + 48);
  location->limit = zip64_end_offset;
  return Status::Ok();
}

// The central directory's entry `index`, at `*at` of `directory`; moves `*at` past it.
Status ZipReader::ParseCentralHeader(const std::vector<uint8_t>& directory, uint64_t index,
                                     size_t* at, ZipRecord* record) const {
  const std::string entry = "central directory entry " + std::to_string(index);
  if (directory.size() - *at < kCentralHeaderSize) return Corrupt(entry + " is cut short");
  const uint8_t* p = directory.data() + *at;
  if (Get32(p) != kCentralHeaderSignature) return Corrupt(entry + " has a bad signature");
  const size_t name_size = Get16(p + 28), extra_size = Get16(p + 30), comment = Get16(p + 32);
  if (directory.size() - *at - kCentralHeaderSize < name_size + extra_size + comment) {
    return Corrupt(entry + " is cut short");
  }
  record->flags = Get16(p + 8);
  record->method = Get16(p + 10);
  record->crc32 = Get32(p + 16);
  record->compressed_size = Get32(p + 20);
  record->size = Get32(p + 24);
  record->local_header_offset = Get32(p + 42);
  record->name.assign(reinterpret_cast<const char*>(p + kCentralHeaderSize), name_size);
  DPL_RETURN_IF_ERROR(
      ReadZip64Extra(p + kCentralHeaderSize + name_size, extra_size, entry, record));
  *at += kCentralHeaderSize + name_size + extra_size + comment;
  return Status::Ok();
}

// ZIP64 fields replace, in this order, exactly those 32-bit fields that are saturated.
Status ZipReader::ReadZip64Extra(const uint8_t* extra, size_t extra_size, const std::string& entry,
                                 ZipRecord* record) const {
  for (size_t e = 0; e + 4 <= extra_size;) {
    const uint16_t id = Get16(extra + e), size = Get16(extra + e + 2);
    if (extra_size - e - 4 < size) return Corrupt(entry + " has a bad extra field");
    if (id == kZip64ExtraId) {
      const uint8_t* field = extra + e + 4;
      size_t left = size;
      for (uint64_t* value :
           {&record->size, &record->compressed_size, &record->local_header_offset}) {
        if (*value != kZip32Limit) continue;
        if (left < 8) return Corrupt(entry + " has a short ZIP64 field");
        *value = Get64(field);
        field += 8;
        left -= 8;
      }
    }
    e += 4 + size_t(size);
  }
  return Status::Ok();
}

Status ZipReader::IndexRecords() {
  for (size_t i = 0; i < records_.size(); ++i) {
    const ZipRecord& record = records_[i];
    if (!index_.emplace(record.name, i).second) {
      return Status::InvalidArgument(path_ + " has two records named '" + record.name +
                                     "'; it was not written by torch.save");
    }
  }
  return Status::Ok();
}

const ZipRecord* ZipReader::Find(std::string_view name) const {
  const auto found = index_.find(std::string(name));
  return found == index_.end() ? nullptr : &records_[found->second];
}

Result<std::vector<uint8_t>> ZipReader::Read(const ZipRecord& record) const {
  const std::string which = "record '" + record.name + "'";
  if (record.flags & 1) {
    return Status::InvalidArgument(path_ + ": " + which + " is encrypted, which is not supported");
  }
  if (record.method != 0 || record.compressed_size != record.size) {
    return Status::InvalidArgument(
        path_ + ": " + which + " is compressed (zip method " + std::to_string(record.method) +
        "); torch.save stores records uncompressed, write the file " + "with torch.save");
  }
  uint8_t header[kLocalHeaderSize];
  if (record.local_header_offset > central_directory_offset_ ||
      central_directory_offset_ - record.local_header_offset < kLocalHeaderSize) {
    return Corrupt(which + " starts outside the file's records");
  }
  DPL_RETURN_IF_ERROR(ReadAt(record.local_header_offset, header, kLocalHeaderSize));
  if (Get32(header) != kLocalHeaderSignature) return Corrupt(which + " has a bad local header");
  const uint64_t data_offset =
      record.local_header_offset + kLocalHeaderSize + Get16(header + 26) + Get16(header + 28);
  if (data_offset > central_directory_offset_ ||
      record.size > central_directory_offset_ - data_offset) {
    return Corrupt(which + " (" + std::to_string(record.size) +
                   " bytes) runs past the file's records");
  }
  std::vector<uint8_t> data(record.size);
  DPL_RETURN_IF_ERROR(ReadAt(data_offset, data.data(), data.size()));
  if (Crc32(data.data(), data.size()) != record.crc32) {
    return Status::InvalidArgument(path_ + ": " + which +
                                   " fails its CRC-32 check: the file is corrupt" + kRewrite);
  }
  return data;
}

}  // namespace dpl::torch_files
