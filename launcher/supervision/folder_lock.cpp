#include "supervision/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace dpl::supervision {
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
  // The folder itself is locked: nothing is written into it. Closed at exec: a program or the
  // worker loader must not hold the job's lock.
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FolderLock();  // not a folder, or not ours: the output check says so
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error != EWOULDBLOCK) return FolderLock();  // no locks on this file system: go on
    return Status::InvalidArgument(
        "--checkpoint-dir " + folder +
        " is in use by another job (the launcher of its machine 0 holds the folder's lock); give "
        "each job a folder of its own, or wait until that job ends");
  }
  return FolderLock(fd);
}

}  // namespace dpl::supervision
