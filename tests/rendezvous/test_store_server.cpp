// A rendezvous store server in a process of its own, for tests that limit its descriptors, stop it
// with SIGSTOP or read its memory, threads and log from /proc:
//
//   rendezvous_test_store_server [--max-open-files N] [--handshake-ms N] [--frame-ms N]
//                                [--keepalive-ms N] [--max-pending N] [--bind-addr A]
//
// Prints "port <n>" on stdout once it listens, then serves on A (127.0.0.1) until killed.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rendezvous/store.hpp"

int main(int argc, char** argv) {
  dpl::rendezvous::StoreServerOptions options;
  options.bind_addr = "127.0.0.1";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--bind-addr") {
      options.bind_addr = argv[i + 1];
      continue;
    }
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--max-open-files") {
      const rlimit limit{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
        std::fprintf(stderr, "setrlimit(RLIMIT_NOFILE, %ld): %s\n", value, std::strerror(errno));
        return 2;
      }
    } else if (flag == "--handshake-ms") {
      options.handshake_timeout = std::chrono::milliseconds(value);
    } else if (flag == "--frame-ms") {
      options.frame_timeout = std::chrono::milliseconds(value);
    } else if (flag == "--keepalive-ms") {
      options.keepalive_timeout = std::chrono::milliseconds(value);
    } else if (flag == "--max-pending") {
      options.max_pending_handshakes = static_cast<int>(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  auto server = dpl::rendezvous::StoreServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().message().c_str());
    return 1;
  }
  std::printf("port %d\n", (*server)->port());
  std::fflush(stdout);
  for (;;) pause();
}
