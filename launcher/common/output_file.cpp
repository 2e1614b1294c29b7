#include "common/output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace dpl {
namespace {

// Linux follows at most 40 links in one lookup; a longer chain is a loop.
constexpr int kMaxLinks = 40;

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a named pipe";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The target of the symbolic link `link`, relative targets taken from the link's folder.
Result<std::string> LinkTarget(const std::string& link) {
  std::vector<char> buffer(4096);
  const ssize_t size = ::readlink(link.c_str(), buffer.data(), buffer.size());
  if (size < 0 || size_t(size) == buffer.size()) {
    return Status::Io("cannot read the symbolic link " + link + ": " +
                      (size < 0 ? std::strerror(errno) : "its target is too long"));
  }
  const std::string target(buffer.data(), size_t(size));
  if (!target.empty() && target.front() == '/') return target;
  const size_t slash = link.rfind('/');
  return slash == std::string::npos ? target : link.substr(0, slash + 1) + target;
}

}  // namespace

Result<std::string> OutputFileOf(const std::string& path) {
  std::string current = path;
  for (int links = 0; links <= kMaxLinks; ++links) {
    struct stat info {};
    if (::lstat(current.c_str(), &info) != 0) {
      if (errno == ENOENT) return current;  // written new; a missing folder fails the write
      return Status::Io("cannot look at " + current + ": " + std::strerror(errno));
    }
    if (S_ISREG(info.st_mode)) return current;
    if (!S_ISLNK(info.st_mode)) {
      return Status::InvalidArgument(
          path + (current == path ? "" : " (a link to " + current + ")") + " is " +
          KindOf(info.st_mode) +
          ": dpl writes the file whole and renames it into place, which would replace it; "
          "name a regular file");
    }
    DPL_ASSIGN_OR_RETURN(current, LinkTarget(current));
  }
  return Status::InvalidArgument(path + ": more than " + std::to_string(kMaxLinks) +
                                 " symbolic links in a row (a loop?); name a regular file");
}

}  // namespace dpl
