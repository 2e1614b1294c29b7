#include "observability/tensorboard_writer.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "observability/crc32c.hpp"
#include "observability/tensorboard_event.pb.h"

namespace dpl::observability {
namespace {

constexpr const char* kFileVersion = "brain.Event:2";

// Note [TFRecord framing]
// Every Event is one record, as TensorFlow's io/record_writer.cc writes them:
//   uint64 length (little-endian)  uint32 masked CRC-32C of those 8 bytes
//   length bytes of data           uint32 masked CRC-32C of the data
// with the CRCs little-endian too. The length's own CRC lets a reader tell a torn length from a
// huge record before it reads on; TensorBoard stops at the first record whose CRC is wrong.
void PutLittleEndian(uint64_t value, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = char((value >> (8 * i)) & 0xFFu);
}

// mkdir -p, refusing a path of which some part exists and is not a folder.
Status CreateFolders(const std::string& directory) {
  const std::string context = "cannot create TensorBoard folder " + directory;
  size_t end = 0;
  while (end != std::string::npos) {
    end = directory.find('/', end + 1);
    const std::string prefix = directory.substr(0, end);
    if (::mkdir(prefix.c_str(), 0755) == 0) continue;
    const int error = errno;
    struct stat info {};
    if (error == EEXIST && ::stat(prefix.c_str(), &info) == 0) {
      if (S_ISDIR(info.st_mode)) continue;
      return Status::Io(context + ": " + prefix + " is not a folder (" + std::strerror(ENOTDIR) +
                        "); choose a folder path that does not run through a file");
    }
    return Status::Io(context + (prefix == directory ? "" : ": creating " + prefix + " failed") +
                      ": " + std::strerror(error));
  }
  return Status::Ok();
}

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

double WallTimeNow() {
  using std::chrono::duration;
  using std::chrono::system_clock;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

Result<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& directory,
                                                                   const std::string& file_suffix) {
  if (directory.empty()) {
    return Status::InvalidArgument("the TensorBoard folder is empty; give a folder path");
  }
  if (file_suffix.find('/') != std::string::npos) {
    return Status::InvalidArgument("the TensorBoard file suffix '" + file_suffix +
                                   "' contains a '/'; a suffix is part of a file name");
  }
  DPL_RETURN_IF_ERROR(CreateFolders(directory));
  const std::string path = directory + "/events.out.tfevents." +
                           std::to_string(static_cast<long long>(std::time(nullptr))) + "." +
                           HostName() + "." + std::to_string(::getpid()) + file_suffix;
  // O_EXCL: a second writer of this process within the same second gets an error instead of
  // silently truncating the first one's file.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::Io("cannot create TensorBoard events file " + path + ": " +
                      std::strerror(errno));
  }
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    const int error = errno;
    ::close(fd);
    return Status::Io("cannot open TensorBoard events file " + path + ": " + std::strerror(error));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));

  tensorboard::Event event;
  event.set_wall_time(WallTimeNow());
  event.set_file_version(kFileVersion);
  DPL_RETURN_IF_ERROR(writer->WriteRecord(event.SerializeAsString()));
  DPL_RETURN_IF_ERROR(writer->Flush());
  return writer;
}

TensorBoardWriter::TensorBoardWriter(std::string path, std::FILE* file)
    : path_(std::move(path)), file_(file) {}

TensorBoardWriter::~TensorBoardWriter() {
  (void)Flush();
  std::fclose(file_);
}

Status TensorBoardWriter::AddScalar(const std::string& tag, int64_t step, double value,
                                    double wall_time_seconds) {
  if (!failure_.ok()) return failure_;
  if (tag.empty()) {
    return Status::InvalidArgument("a TensorBoard scalar needs a tag (got an empty one at step " +
                                   std::to_string(step) + ")");
  }
  tensorboard::Event event;
  event.set_wall_time(wall_time_seconds);
  event.set_step(step);
  tensorboard::Summary::Value* summary_value = event.mutable_summary()->add_value();
  summary_value->set_tag(tag);
  summary_value->set_simple_value(static_cast<float>(value));
  return WriteRecord(event.SerializeAsString());
}

Status TensorBoardWriter::Flush() {
  if (!failure_.ok()) return failure_;
  if (std::fflush(file_) != 0 || std::ferror(file_)) return WriteFailure();
  return Status::Ok();
}

Status TensorBoardWriter::WriteRecord(const std::string& data) {
  if (!failure_.ok()) return failure_;
  char header[12];
  PutLittleEndian(data.size(), 8, header);
  PutLittleEndian(MaskCrc32c(Crc32c(header, 8)), 4, header + 8);
  char footer[4];
  PutLittleEndian(MaskCrc32c(Crc32c(data.data(), data.size())), 4, footer);
  if (std::fwrite(header, 1, sizeof header, file_) != sizeof header ||
      std::fwrite(data.data(), 1, data.size(), file_) != data.size() ||
      std::fwrite(footer, 1, sizeof footer, file_) != sizeof footer) {
    return WriteFailure();
  }
  return Status::Ok();
}

Status TensorBoardWriter::WriteFailure() {
  const int error = errno;  // set by the failed write(2) under stdio
  failure_ =
      Status::Io("writing TensorBoard events file " + path_ + " failed: " + std::strerror(error));
  return failure_;
}

}  // namespace dpl::observability
