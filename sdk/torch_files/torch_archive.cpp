#include "dpl/torch_files/torch_archive.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dpl/torch_files/torch_pickle.hpp"
#include "dpl/torch_files/zip_archive.hpp"

namespace dpl::torch_files {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "tensor data is kept in the host's byte order, and torch archives are little-endian");

// torch.save's version record, and the versions torch 1.13 reads (kMinSupportedFileFormatVersion
// to kMaxSupportedFileFormatVersion).
constexpr char kVersionRecord[] = "3\n";
constexpr int64_t kMinVersion = 1;
constexpr int64_t kMaxVersion = 10;

// What the legacy format (torch < 1.6) starts with: PROTO n, then LONG1 of torch's magic number
// 0x1950a86a20f9469cfc6c.
constexpr uint8_t kLegacyMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                    0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + " failed: " + std::strerror(errno);
}

bool IsArchiveName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A file written next to its final path and renamed over it only when complete.
class AtomicFile {
 public:
  // One temporary name per process and path, as for checkpoints: a leftover of a crashed
  // writer with the same pid is overwritten, never mistaken for the archive.
  explicit AtomicFile(std::string path)
      : path_(std::move(path)), temp_path_(path_ + ".tmp." + std::to_string(::getpid())) {}
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_path_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  Status Open() {
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    return fd_ >= 0 ? Status::Ok() : Status::Io(Errno("creating", temp_path_));
  }
  int fd() const { return fd_; }
  const std::string& temp_path() const { return temp_path_; }

  Status Commit() {
    if (::fsync(fd_) != 0) return Status::Io(Errno("fsync of", temp_path_));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Status::Io(Errno("closing", temp_path_));
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      return Status::Io(Errno("renaming " + temp_path_ + " to", path_));
    }
    committed_ = true;
    // The rename itself is durable only once the folder is synced.
    const std::string folder = FolderOf(path_);
    const int folder_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (folder_fd < 0) return Status::Io(Errno("opening folder", folder));
    const bool synced = ::fsync(folder_fd) == 0;
    Status status = synced ? Status::Ok() : Status::Io(Errno("fsync of folder", folder));
    ::close(folder_fd);
    return status;
  }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Tells a legacy torch file and files that are no zip archive at all from zip archives, by their
// first bytes.
Status CheckStartsLikeZip(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Io(Errno("opening", path));
  uint8_t head[16] = {};
  size_t size = 0;
  while (size < sizeof head) {
    const ssize_t n = ::read(fd, head + size, sizeof head - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status error = Status::Io(Errno("reading", path));
      ::close(fd);
      return error;
    }
    if (n == 0) break;
    size += size_t(n);
  }
  ::close(fd);
  if (size == 0) return Status::InvalidArgument(path + " is empty, not a torch.save archive");
  if (size >= 4 && head[0] == 'P' && head[1] == 'K' &&
      ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6))) {
    return Status::Ok();
  }
  if (size >= 2 + sizeof kLegacyMagic && head[0] == 0x80 &&
      std::memcmp(head + 2, kLegacyMagic, sizeof kLegacyMagic) == 0) {
    return Status::InvalidArgument(
        path + " is a legacy torch.save file (the format of torch before 1.6), which this " +
        "reader does not read; in Python, save it again in the zip format: " +
        "torch.save(torch.load(path), new_path)");
  }
  return Status::InvalidArgument(path + " is not a torch.save archive (it is not a zip file); " +
                                 "pass a file written by torch.save(obj, path)");
}

// The record folder of a torch.save archive, after refusing zip archives that are something else.
Result<std::string> ArchiveName(const ZipReader& zip) {
  const std::string& path = zip.path();
  if (zip.records().empty()) {
    return Status::InvalidArgument(path + " is an empty zip archive, not a torch.save archive");
  }
  const std::string& first = zip.records().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0) {
    return Status::InvalidArgument(path + " is a zip archive but not a torch.save archive: its " +
                                   "first record '" + first + "' is not inside a folder");
  }
  const std::string name = first.substr(0, slash);
  bool has_code = false;
  for (const ZipRecord& record : zip.records()) {
    has_code = has_code || record.name.rfind(name + "/code/", 0) == 0;
  }
  if (has_code || zip.Find(name + "/constants.pkl") || zip.Find(name + "/bytecode.pkl")) {
    return Status::InvalidArgument(
        path + " is a TorchScript archive (written by torch.jit.save), not a state dict; in " +
        "Python, save its weights with torch.save(torch.jit.load(path).state_dict(), new_path) " +
        "and pass that file");
  }
  if (!zip.Find(name + "/data.pkl")) {
    return Status::InvalidArgument(path + " is a zip archive but not a torch.save archive: it " +
                                   "has no record '" + name + "/data.pkl'");
  }
  return name;
}

Status CheckVersion(const ZipReader& zip, const std::string& name) {
  const ZipRecord* record = zip.Find(name + "/version");
  if (!record) record = zip.Find(name + "/.data/version");
  if (!record) {
    return Status::InvalidArgument(zip.path() + " has no version record ('" + name +
                                   "/version'); write it again with torch.save");
  }
  Result<std::vector<uint8_t>> text = zip.Read(*record);
  if (!text.ok()) return text.status();
  int64_t version = 0;
  size_t digits = 0;
  for (uint8_t c : *text) {
    if (c >= '0' && c <= '9' && digits < 6) {
      version = version * 10 + (c - '0');
      ++digits;
    } else if (c != '\n' && c != '\r' && c != ' ') {
      digits = 0;
      break;
    }
  }
  if (digits == 0 || version < kMinVersion || version > kMaxVersion) {
    return Status::InvalidArgument(
        zip.path() + " has an archive format version '" +
        std::string(text->begin(), text->begin() + long(std::min<size_t>(text->size(), 20))) +
        "' that this reader does not know (it reads versions " + std::to_string(kMinVersion) +
        " to " + std::to_string(kMaxVersion) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status WriteTorchArchive(const std::string& path, const TorchValue& root,
                         const std::string& archive_name) {
  if (!IsArchiveName(archive_name)) {
    return Status::InvalidArgument("torch archive name '" + archive_name + "' for " + path +
                                   " must be 1 to 255 letters, digits, '_', '-' or '.'");
  }
  Result<TorchPickle> pickled = PickleTorchValue(root);
  if (!pickled.ok()) return pickled.status().WithContext("writing " + path);
  AtomicFile file(path);
  DPL_RETURN_IF_ERROR(file.Open());
  ZipWriter zip(file.fd(), file.temp_path());
  DPL_RETURN_IF_ERROR(
      zip.Add(archive_name + "/data.pkl", pickled->bytes.data(), pickled->bytes.size()));
  for (size_t i = 0; i < pickled->storages.size(); ++i) {
    const std::vector<uint8_t>& data = pickled->storages[i]->data;
    DPL_RETURN_IF_ERROR(
        zip.Add(archive_name + "/data/" + std::to_string(i), data.data(), data.size()));
  }
  DPL_RETURN_IF_ERROR(
      zip.Add(archive_name + "/version", kVersionRecord, sizeof kVersionRecord - 1));
  DPL_RETURN_IF_ERROR(zip.Finish());
  return file.Commit();
}

Result<TorchValue> ReadTorchArchive(const std::string& path) {
  DPL_RETURN_IF_ERROR(CheckStartsLikeZip(path));
  Result<std::unique_ptr<ZipReader>> opened = ZipReader::Open(path);
  if (!opened.ok()) return opened.status();
  const ZipReader& zip = **opened;
  Result<std::string> name = ArchiveName(zip);
  if (!name.ok()) return name.status();
  DPL_RETURN_IF_ERROR(CheckVersion(zip, *name));
  const std::string pickle_record = *name + "/data.pkl";
  Result<std::vector<uint8_t>> pickle = zip.Read(*zip.Find(pickle_record));
  if (!pickle.ok()) return pickle.status();
  const TorchStorageLoader load_storage =
      [&](const std::string& key) -> Result<std::vector<uint8_t>> {
    const std::string record = *name + "/data/" + key;
    const ZipRecord* found = zip.Find(record);
    if (!found) {
      return Status::InvalidArgument(path + ": " + pickle_record + " refers to storage '" + key +
                                     "', but the archive has no record '" + record +
                                     "'; write the file again with torch.save");
    }
    return zip.Read(*found);
  };
  // Note [Bounded expansion]: memo references let a few bytes of pickle name one tensor many
  // times, or a view far larger than its storage (stride 0); each copy is real memory here.
  // Tied weights and broadcast buffers stay far below 8x the file.
  UnpickleLimits limits;
  limits.max_tensor_bytes = 8 * zip.file_size() + (uint64_t(256) << 20);
  return UnpickleTorchValue(pickle->data(), pickle->size(), path + ": " + pickle_record,
                            load_storage, limits);
}

}  // namespace dpl::torch_files
