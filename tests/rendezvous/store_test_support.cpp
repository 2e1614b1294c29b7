#include "store_test_support.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "rendezvous/wire_protocol.hpp"

namespace dpl::rendezvous::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr rlim_t kMaxStderrBytes = 16u << 20;
constexpr int kConnectTimeoutMs = 5000;

size_t CountEntries(const std::string& folder) {
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return 0;
  size_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// Waits up to `timeout_ms` for `fd` to become readable (or to report an error or hang-up).
bool Readable(int fd, int timeout_ms) {
  pollfd entry{fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&entry, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

bool WriteAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t wrote = send(fd, data, size, MSG_NOSIGNAL);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    data += wrote;
    size -= static_cast<size_t>(wrote);
  }
  return true;
}

int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(address.sin_port);
  return fd;
}

}  // namespace

bool Eventually(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (predicate()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<uint8_t> HelloFrame() {
  wire::Writer writer;
  writer.U32(wire::kMagic);
  writer.U32(wire::kProtocolVersion);
  writer.String("");
  return writer.Frame(wire::Op::kHello);
}

// ---------------------------------------------------------------------------------------------

ServerProcess::ServerProcess(const std::vector<std::string>& flags) {
  char pattern[] = "/tmp/dpl-store-stderr-XXXXXX";
  const int stderr_fd = mkstemp(pattern);
  if (stderr_fd < 0) return;
  stderr_path_ = pattern;
  int port_pipe[2];
  if (pipe2(port_pipe, O_CLOEXEC) != 0) {
    close(stderr_fd);
    return;
  }
  // Everything the child needs is built before fork: it only calls async-signal-safe functions.
  std::vector<std::string> arguments = {DPL_TEST_STORE_SERVER};
  arguments.insert(arguments.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const rlimit stderr_limit{kMaxStderrBytes, kMaxStderrBytes};
  pid_ = fork();
  if (pid_ == 0) {
    dup2(port_pipe[1], STDOUT_FILENO);
    dup2(stderr_fd, STDERR_FILENO);
    // Past the limit writes fail instead of killing the server with SIGXFSZ.
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &stderr_limit);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(stderr_fd);
  close(port_pipe[1]);
  std::string line;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (pid_ > 0 && line.find('\n') == std::string::npos && Readable(port_pipe[0], 10000) &&
         Clock::now() < deadline) {
    char buffer[64];
    const ssize_t got = read(port_pipe[0], buffer, sizeof buffer);
    if (got <= 0) break;
    line.append(buffer, static_cast<size_t>(got));
  }
  close(port_pipe[0]);
  if (std::sscanf(line.c_str(), "port %d", &port_) != 1) port_ = 0;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (!stderr_path_.empty()) unlink(stderr_path_.c_str());
}

size_t ServerProcess::OpenDescriptors() const {
  return CountEntries("/proc/" + std::to_string(pid_) + "/fd");
}

size_t ServerProcess::Threads() const {
  return CountEntries("/proc/" + std::to_string(pid_) + "/task");
}

size_t ServerProcess::ResidentBytes() const {
  size_t pages_total = 0, pages_resident = 0;
  std::ifstream statm("/proc/" + std::to_string(pid_) + "/statm");
  statm >> pages_total >> pages_resident;
  return pages_resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

std::chrono::milliseconds ServerProcess::CpuTime() const {
  const std::string stat = ReadWholeFile("/proc/" + std::to_string(pid_) + "/stat");
  // Fields after the command name (which may hold spaces) start at its closing parenthesis;
  // utime and stime are fields 14 and 15 of the whole line.
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  unsigned long long user = 0, system = 0;
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) user = std::strtoull(field.c_str(), nullptr, 10);
    if (index == 15) system = std::strtoull(field.c_str(), nullptr, 10);
  }
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  return std::chrono::milliseconds((user + system) * 1000 /
                                   static_cast<unsigned long long>(ticks_per_second));
}

std::string ServerProcess::Stderr() const {
  return ReadWholeFile(stderr_path_);
}

size_t ServerProcess::StderrLines() const {
  const std::string text = Stderr();
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

void ServerProcess::Stop() const {
  kill(pid_, SIGSTOP);
  // The signal arrives asynchronously; return once every thread of it has stopped.
  int status = 0;
  while (waitpid(pid_, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
}

void ServerProcess::Continue() const {
  kill(pid_, SIGCONT);
}

// ---------------------------------------------------------------------------------------------

RawConnection::RawConnection(int port) {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0) return;
  // Non-blocking, so that a server whose listen queue is full fails the test instead of hanging
  // it in SYN retries.
  const int flags = fcntl(fd_, F_GETFL);
  fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  bool connected = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd entry{fd_, POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof error;
    connected = poll(&entry, 1, kConnectTimeoutMs) == 1 &&
                getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
  }
  if (!connected) {
    close(fd_);
    fd_ = -1;
    return;
  }
  fcntl(fd_, F_SETFL, flags);
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) close(fd_);
}

bool RawConnection::Send(const std::vector<uint8_t>& bytes) {
  return fd_ >= 0 && WriteAll(fd_, bytes.data(), bytes.size());
}

std::optional<std::vector<uint8_t>> RawConnection::Receive(size_t size,
                                                           std::chrono::milliseconds timeout) {
  std::vector<uint8_t> bytes(size);
  size_t got = 0;
  const auto deadline = Clock::now() + timeout;
  while (got < size) {
    if (!Readable(fd_, RemainingMs(deadline))) return std::nullopt;
    const ssize_t read_now = recv(fd_, bytes.data() + got, size - got, 0);
    if (read_now <= 0) return std::nullopt;
    got += static_cast<size_t>(read_now);
  }
  return bytes;
}

bool RawConnection::ClosedWithin(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (!Readable(fd_, RemainingMs(deadline))) return false;
    char sink[4096];
    const ssize_t got = recv(fd_, sink, sizeof sink, 0);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
}

int RawConnection::LocalPort() const {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

void RawConnection::Reset() {
  if (fd_ < 0) return;
  const linger abortive{1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  close(fd_);
  fd_ = -1;
}

// ---------------------------------------------------------------------------------------------

SilentListener::SilentListener(bool answer_handshake) : answer_handshake_(answer_handshake) {
  listen_fd_ = Listen(&port_);
  if (listen_fd_ >= 0) thread_ = std::thread([this] { AcceptLoop(); });
}

SilentListener::~SilentListener() {
  if (listen_fd_ >= 0) {
    shutdown(listen_fd_, SHUT_RDWR);  // wakes the blocked accept
    thread_.join();
    close(listen_fd_);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : connections_) close(fd);
}

void SilentListener::AcceptLoop() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      connections_.push_back(fd);
    }
    if (!answer_handshake_) continue;
    // The hello frame, then an empty kOk; nothing after that.
    uint8_t header[wire::kFrameHeaderBytes];
    size_t got = 0;
    uint32_t body_size = 0;
    std::vector<uint8_t> body;
    while (got < sizeof header && Readable(fd, 5000)) {
      const ssize_t read_now = recv(fd, header + got, sizeof header - got, 0);
      if (read_now <= 0) break;
      got += static_cast<size_t>(read_now);
    }
    std::memcpy(&body_size, &header[1], sizeof body_size);
    body.resize(std::min<uint32_t>(body_size, 4096));
    got = 0;
    while (got < body.size() && Readable(fd, 5000)) {
      const ssize_t read_now = recv(fd, body.data() + got, body.size() - got, 0);
      if (read_now <= 0) break;
      got += static_cast<size_t>(read_now);
    }
    const uint8_t ok[] = {static_cast<uint8_t>(wire::Op::kOk), 0, 0, 0, 0};
    WriteAll(fd, ok, sizeof ok);
  }
}

// ---------------------------------------------------------------------------------------------

std::optional<TcpTimer> FindTcpTimer(int local_port, int remote_port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the column names
  std::optional<TcpTimer> found;
  int matches = 0;
  while (std::getline(table, line)) {
    unsigned local = 0, remote = 0, state = 0, kind = 0;
    unsigned long when = 0;
    if (std::sscanf(line.c_str(), " %*d: %*x:%x %*x:%x %x %*x:%*x %x:%lx", &local, &remote, &state,
                    &kind, &when) != 5) {
      continue;
    }
    constexpr unsigned kEstablished = 1;
    if (state != kEstablished) continue;
    if (local_port != 0 && local != static_cast<unsigned>(local_port)) continue;
    if (remote_port != 0 && remote != static_cast<unsigned>(remote_port)) continue;
    ++matches;
    const long ticks_per_second = sysconf(_SC_CLK_TCK);
    found =
        TcpTimer{static_cast<int>(kind),
                 std::chrono::milliseconds(static_cast<long long>(when) * 1000 / ticks_per_second)};
  }
  if (matches != 1) return std::nullopt;
  return found;
}

}  // namespace dpl::rendezvous::testing
