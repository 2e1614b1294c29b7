#include "supervision/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

namespace dpl::supervision {
namespace {

constexpr const char* kLockName = "/.dpl-job.lock";

}  // namespace

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the lock
}

FolderLock::FolderLock(FolderLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Result<FolderLock> FolderLock::Take(const std::string& folder) {
  if (::mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST) return FolderLock();
  const std::string path = folder + kLockName;
  // Closed at exec: a program or the worker loader must not hold the job's lock.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return FolderLock();  // a folder this user cannot write: the output check says so
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    std::string holder;
    std::getline(std::ifstream(path), holder);
    ::close(fd);
    if (error != EWOULDBLOCK) return FolderLock();  // no locks on this file system: go on
    return Status::InvalidArgument(
        "--checkpoint-dir " + folder + " is in use by another job (" +
        (holder.empty() ? "its launcher" : holder) + " holds " + path +
        "); give each job a folder of its own, or wait until that job ends");
  }
  const std::string text = "the launcher of pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) < 0) {
    // Only the message of a refused job would miss the holder's pid.
  }
  return FolderLock(fd);
}

}  // namespace dpl::supervision
