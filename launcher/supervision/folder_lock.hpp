// Note [One job a checkpoint folder]: two jobs that write checkpoints into one folder at once
// overwrite each other's files under the same names (checkpoint-<step>.pt), and neither can
// resume what is left. So machine 0's launcher, the one whose rank 0 writes them, holds an
// exclusive lock on the folder itself (flock of the folder opened read-only: nothing is written
// into it) from before its workers start until it ends; a second job naming the folder meanwhile
// is refused. The kernel drops the lock with its holder, however that ends (even SIGKILL), so a
// crashed job never leaves the folder locked. Where the file system has no such locks the job
// runs without one.
#pragma once

#include <string>

#include "common/status.hpp"

namespace dpl::supervision {

class FolderLock {
 public:
  FolderLock() = default;
  ~FolderLock();
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  // Takes the lock of `folder` (made if missing and its parent exists; when it cannot be made,
  // no lock is taken and the output check says why). Refused while another process holds it.
  static Result<FolderLock> Take(const std::string& folder);

 private:
  explicit FolderLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace dpl::supervision
