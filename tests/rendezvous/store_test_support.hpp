// Tools for the store's robustness tests: a store server in a child process whose descriptors,
// threads, memory, CPU time and log the test reads from /proc; raw TCP connections that misbehave
// on purpose; listeners that accept and then never answer.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dpl::rendezvous::testing {

// True once `predicate` holds, polling every 10 ms; false if it still fails after `timeout`.
bool Eventually(const std::function<bool()>& predicate, std::chrono::milliseconds timeout);

// The handshake a client of this build sends, with an empty job token.
std::vector<uint8_t> HelloFrame();

// The test store server (test_store_server.cpp) in a child process, started with `flags`. Its
// stderr goes to a file (at most 16 MiB of it, so a server that logs in a loop cannot fill the
// disk). Destroying it kills the process.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& flags = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  size_t OpenDescriptors() const;             // entries of /proc/<pid>/fd
  size_t Threads() const;                     // entries of /proc/<pid>/task
  size_t ResidentBytes() const;               // from /proc/<pid>/statm
  std::chrono::milliseconds CpuTime() const;  // user + system, from /proc/<pid>/stat
  std::string Stderr() const;                 // what it wrote to stderr so far
  size_t StderrLines() const;

  // SIGSTOP, returning once it has stopped: the process no longer answers, its kernel still does.
  void Stop() const;
  void Continue() const;  // SIGCONT

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string stderr_path_;
};

// A blocking TCP connection to 127.0.0.1:port that sends whatever the test wants.
class RawConnection {
 public:
  explicit RawConnection(int port);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return fd_ >= 0; }
  bool Send(const std::vector<uint8_t>& bytes);
  // Reads exactly `size` bytes within `timeout`; nullopt if they did not come.
  std::optional<std::vector<uint8_t>> Receive(size_t size, std::chrono::milliseconds timeout);
  // True if the peer closed the connection (end of file or reset) within `timeout`; discards
  // anything it sent before.
  bool ClosedWithin(std::chrono::milliseconds timeout);
  // This end's local port.
  int LocalPort() const;
  // Closes abortively: the peer gets a reset instead of an end of file, and no TIME_WAIT stays.
  void Reset();

 private:
  int fd_ = -1;
};

// A listener on 127.0.0.1 that accepts every connection and keeps it open without ever answering
// (or, with `answer_handshake`, answers the handshake and nothing after it): a peer that is up
// but unresponsive. Destroying it closes every connection.
class SilentListener {
 public:
  explicit SilentListener(bool answer_handshake);
  ~SilentListener();
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  int port() const { return port_; }

 private:
  void AcceptLoop();
  const bool answer_handshake_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<int> connections_;  // guarded by mutex_
  std::thread thread_;
};

// The TCP timer of an established connection in /proc/net/tcp: `kind` 0 none, 1 retransmit,
// 2 keepalive, 4 zero-window probe; `remaining` until it fires.
struct TcpTimer {
  int kind = 0;
  std::chrono::milliseconds remaining{0};
};
// The timer of the established IPv4 connection from local port `local_port` to remote port
// `remote_port` (either 0: any), if exactly one such connection exists.
std::optional<TcpTimer> FindTcpTimer(int local_port, int remote_port);

}  // namespace dpl::rendezvous::testing
