#include "training/collectives/shared_memory.hpp"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

namespace dpl::training {
namespace {

constexpr int kSpins = 2000;
constexpr std::chrono::milliseconds kSleepSlice{20};
constexpr std::chrono::milliseconds kLivenessEvery{100};

std::string ErrnoText() {
  return std::strerror(errno);
}

long Futex(const std::atomic<uint32_t>* word, int operation, uint32_t value,
           const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), operation, value, timeout,
                   nullptr, 0);
}

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

Result<std::unique_ptr<SharedMapping>> SharedMapping::Map(int fd, size_t bytes) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    return Status::Io("the machine's shared memory (fd " + std::to_string(fd) +
                      ") cannot be read: " + ErrnoText());
  }
  // Several workers may grow it at once: each only ever to the same size or more.
  if (size_t(info.st_size) < bytes && ::ftruncate(fd, off_t(bytes)) != 0) {
    return Status::Io("cannot grow the machine's shared memory to " + std::to_string(bytes) +
                      " bytes: " + ErrnoText());
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return Status::Io("cannot map " + std::to_string(bytes) +
                      " bytes of the machine's shared memory: " + ErrnoText());
  }
  return std::unique_ptr<SharedMapping>(new SharedMapping(static_cast<char*>(data), bytes));
}

SharedMapping::~SharedMapping() {
  ::munmap(data_, size_);
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t name_end = text.rfind(')');  // the name may hold spaces and parentheses
  if (name_end == std::string::npos || name_end + 2 >= text.size()) return false;
  const char state = text[name_end + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

void Publish(std::atomic<uint32_t>* word, uint32_t value) {
  word->store(value, std::memory_order_release);
  Futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

Status WaitFor(const std::atomic<uint32_t>& word, uint32_t target, const PeerProcess& peer,
               std::chrono::milliseconds timeout, const AbortSignal& abort,
               const std::function<std::string()>& what) {
  for (int spin = 0; spin < kSpins; ++spin) {
    if (Reached(word.load(std::memory_order_acquire), target)) return Status::Ok();
    Pause();
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point checked = start;
  for (;;) {
    const uint32_t seen = word.load(std::memory_order_acquire);
    if (Reached(seen, target)) return Status::Ok();
    const timespec slice{0, long(std::chrono::nanoseconds(kSleepSlice).count())};
    Futex(&word, FUTEX_WAIT, seen, &slice);  // returns at a wake, a change, or the slice's end
    if (Reached(word.load(std::memory_order_acquire), target)) return Status::Ok();
    if (abort.raised()) return abort.why();  // Note [Aborting collectives], within a slice
    const Clock::time_point now = Clock::now();
    if (now - checked >= kLivenessEvery) {
      checked = now;
      if (!ProcessAlive(peer.pid)) {
        return Status::Communication(
            "rank " + std::to_string(peer.rank) + " (pid " + std::to_string(peer.pid) +
            ") exited while this rank waited for it in shared memory: " + what());
      }
    }
    if (now - start >= timeout) {
      return Status::Timeout("rank " + std::to_string(peer.rank) + " did not come within " +
                             std::to_string(timeout.count()) +
                             " ms (--backend-timeout) in shared memory: " + what());
    }
  }
}

}  // namespace dpl::training
