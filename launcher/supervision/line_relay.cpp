#include "supervision/line_relay.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace dpl::supervision {

LineRelay::~LineRelay() {
  for (Source& source : sources_) {
    if (source.fd >= 0) close(source.fd);
  }
}

size_t LineRelay::Add(int fd, LineHandler on_line) {
  sources_.push_back({fd, std::string(), std::move(on_line)});
  return sources_.size() - 1;
}

bool LineRelay::AnyOpen() const {
  for (const Source& source : sources_) {
    if (source.fd >= 0) return true;
  }
  return false;
}

bool LineRelay::Pump(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  std::vector<Source*> owners;
  for (Source& source : sources_) {
    if (source.fd < 0) continue;
    fds.push_back({source.fd, POLLIN, 0});
    owners.push_back(&source);
  }
  if (fds.empty()) return false;
  if (poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) <= 0) return true;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) Read(*owners[i]);
  }
  return true;
}

void LineRelay::Drain(size_t source) {
  while (Read(sources_.at(source))) {
  }
}

bool LineRelay::Read(Source& source) {
  if (source.fd < 0) return false;
  pollfd ready{source.fd, POLLIN, 0};
  if (poll(&ready, 1, 0) <= 0) return false;
  char buffer[4096];
  const ssize_t count = read(source.fd, buffer, sizeof buffer);
  if (count < 0 && (errno == EINTR || errno == EAGAIN)) return false;  // nothing after all
  if (count <= 0) {
    if (!source.partial_line.empty()) source.on_line(std::move(source.partial_line));
    source.partial_line.clear();
    close(source.fd);
    source.fd = -1;
    return false;
  }
  source.partial_line.append(buffer, static_cast<size_t>(count));
  for (size_t end; (end = source.partial_line.find('\n')) != std::string::npos;) {
    source.on_line(source.partial_line.substr(0, end));
    source.partial_line.erase(0, end + 1);
  }
  return true;
}

}  // namespace dpl::supervision
