#include "training/checkpoint.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace dpl::training {
namespace {

class Writer {
 public:
  void Bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    buffer.insert(buffer.end(), p, p + n);
  }
  void U64(uint64_t v) { Bytes(&v, 8); }
  void String(const std::string& s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  void Floats(const std::vector<float>& v) {
    U64(v.size());
    Bytes(v.data(), v.size() * sizeof(float));
  }
  std::vector<uint8_t> buffer;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& data, size_t end) : data_(data), end_(end) {}
  bool Bytes(void* out, size_t n) {
    if (end_ - position_ < n) return false;
    std::memcpy(out, data_.data() + position_, n);
    position_ += n;
    return true;
  }
  bool U64(uint64_t* v) { return Bytes(v, 8); }
  bool String(std::string* s) {
    uint64_t n;
    if (!U64(&n) || end_ - position_ < n) return false;
    s->assign(reinterpret_cast<const char*>(data_.data() + position_), n);
    position_ += n;
    return true;
  }
  bool Floats(std::vector<float>* v) {
    uint64_t n;
    if (!U64(&n) || (end_ - position_) / sizeof(float) < n) return false;
    v->resize(n);
    return Bytes(v->data(), n * sizeof(float));
  }
  bool AtEnd() const { return position_ == end_; }

 private:
  const std::vector<uint8_t>& data_;
  size_t end_;
  size_t position_ = 0;
};

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + " failed: " + std::strerror(errno);
}

}  // namespace

std::string CheckpointFileName(int64_t global_step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%010lld.dplckpt",
                static_cast<long long>(global_step));
  return name;
}

Status WriteCheckpoint(const std::string& directory, const CheckpointState& state) {
  if (::mkdir(directory.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Error(Errno("creating checkpoint folder", directory));
  }
  Writer w;
  w.Bytes(kCheckpointMagic, sizeof kCheckpointMagic);
  w.U64(kCheckpointVersion);
  w.U64(uint64_t(state.global_step));
  w.U64(uint64_t(state.epoch));
  w.U64(uint64_t(state.step_in_epoch));
  w.U64(uint64_t(state.optimizer_steps));
  w.String(state.fingerprint);
  w.U64(state.parameters.size());
  for (const auto& p : state.parameters) w.Floats(p);
  w.U64(state.optimizer_state.size());
  for (const auto& b : state.optimizer_state) w.Floats(b);
  const uint32_t crc = uint32_t(crc32(0L, w.buffer.data(), uInt(w.buffer.size())));
  w.Bytes(&crc, sizeof crc);

  const std::string final_path = directory + "/" + CheckpointFileName(state.global_step);
  const std::string temp_path = final_path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(Errno("creating", temp_path));
  size_t written = 0;
  while (written < w.buffer.size()) {
    const ssize_t n = ::write(fd, w.buffer.data() + written, w.buffer.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status error = Status::Error(Errno("writing", temp_path));
      ::close(fd);
      ::unlink(temp_path.c_str());
      return error;
    }
    written += size_t(n);
  }
  if (::fsync(fd) != 0) {
    Status error = Status::Error(Errno("fsync of", temp_path));
    ::close(fd);
    ::unlink(temp_path.c_str());
    return error;
  }
  ::close(fd);
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    Status error = Status::Error(Errno("renaming " + temp_path + " to", final_path));
    ::unlink(temp_path.c_str());
    return error;
  }
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // makes the rename itself durable
    ::close(dir_fd);
  }
  return Status::Ok();
}

Result<CheckpointState> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot open checkpoint " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string fix = "; delete it to resume from the previous checkpoint";
  if (data.size() < sizeof kCheckpointMagic ||
      std::memcmp(data.data(), kCheckpointMagic, sizeof kCheckpointMagic) != 0) {
    return Status::Error("checkpoint " + path + " is not a dpl checkpoint (bad magic)" + fix);
  }
  if (data.size() < sizeof kCheckpointMagic + 8 + 4) {
    return Status::Error("checkpoint " + path + " is truncated (" + std::to_string(data.size()) +
                         " bytes)" + fix);
  }
  const size_t body = data.size() - 4;
  uint32_t stored_crc;
  std::memcpy(&stored_crc, data.data() + body, 4);
  const uint32_t crc = uint32_t(crc32(0L, data.data(), uInt(body)));
  Reader r(data, body);
  char magic[8];
  uint64_t version = 0;
  r.Bytes(magic, 8);
  r.U64(&version);
  if (version != kCheckpointVersion) {
    return Status::Error("checkpoint " + path + " has format version " + std::to_string(version) +
                         " but this launcher reads version " + std::to_string(kCheckpointVersion));
  }
  if (crc != stored_crc) {
    return Status::Error("checkpoint " + path + " is corrupt or truncated (CRC-32 mismatch)" + fix);
  }
  CheckpointState state;
  uint64_t global_step, epoch, step_in_epoch, optimizer_steps, count;
  bool good = r.U64(&global_step) && r.U64(&epoch) && r.U64(&step_in_epoch) &&
              r.U64(&optimizer_steps) && r.String(&state.fingerprint) && r.U64(&count);
  for (uint64_t i = 0; good && i < count && good; ++i) {
    state.parameters.emplace_back();
    good = r.Floats(&state.parameters.back());
  }
  good = good && r.U64(&count);
  for (uint64_t i = 0; good && i < count; ++i) {
    state.optimizer_state.emplace_back();
    good = r.Floats(&state.optimizer_state.back());
  }
  if (!good || !r.AtEnd()) {
    return Status::Error("checkpoint " + path + " has a malformed body" + fix);
  }
  state.global_step = int64_t(global_step);
  state.epoch = int64_t(epoch);
  state.step_in_epoch = int64_t(step_in_epoch);
  state.optimizer_steps = int64_t(optimizer_steps);
  return state;
}

Result<std::string> NewestCheckpoint(const std::string& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) {
    if (errno == ENOENT) return std::string();
    return Status::Error(Errno("listing checkpoint folder", directory));
  }
  std::string newest;
  const std::string suffix = ".dplckpt";
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("checkpoint-", 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 && name > newest) {
      newest = name;  // zero-padded steps sort as text
    }
  }
  ::closedir(dir);
  return newest.empty() ? std::string() : directory + "/" + newest;
}

}  // namespace dpl::training
