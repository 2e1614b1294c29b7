#include "rendezvous/etcd_http.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "rendezvous/store_common.hpp"

namespace dpl::rendezvous::etcd {
namespace {

// Lines of the head and of chunk sizes are short; a longer one is not a gateway talking.
constexpr size_t kMaxLineBytes = 16 * 1024;
constexpr int kMaxHeaderLines = 100;
// An answer of the gateway carries at most a few values of at most a store frame.
constexpr long long kMaxBodyBytes = 256LL << 20;
constexpr size_t kReadBytes = 64 * 1024;
// TCP keepalive on connections to etcd, as on those to the built-in store.
constexpr std::chrono::seconds kKeepalive{30};

int MillisecondsUntil(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60000));
}

// Waits until `fd` is ready for `events` or the deadline passes false.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int ready = poll(&entry, 1, MillisecondsUntil(deadline));
    if (ready > 0) return true;
    if (ready < 0 && errno == EINTR) continue;
    if (Clock::now() >= deadline) return false;
  }
}

bool SplitEndpoint(const std::string& endpoint, std::string* host, std::string* port) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) return false;
  *host = endpoint.substr(0, colon);
  *port = endpoint.substr(colon + 1);
  if (host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  return true;
}

// A non-blocking connect to one address, finished before the deadline: the socket or -1.
int ConnectOne(const addrinfo& address, Clock::time_point deadline, std::string* error) {
  const int fd = socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        address.ai_protocol);
  if (fd < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  int code = connect(fd, address.ai_addr, address.ai_addrlen) == 0 ? 0 : errno;
  if (code == EINPROGRESS) {
    if (!WaitFor(fd, POLLOUT, deadline)) {
      code = ETIMEDOUT;
    } else {
      socklen_t size = sizeof code;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &size);
    }
  }
  if (code != 0) {
    *error = std::strerror(code);
    close(fd);
    return -1;
  }
  PrepareStoreConnection(fd, kKeepalive);
  return fd;
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

std::string NotEtcd(const std::string& endpoint, const std::string& what) {
  return "etcd member " + endpoint + " " + what +
         "; is it the client URL of an etcd member (v3.4 or later)?";
}

Result<std::unique_ptr<HttpConnection>> HttpConnection::Open(const std::string& endpoint,
                                                             Clock::time_point deadline) {
  std::string host, port;
  if (!SplitEndpoint(endpoint, &host, &port)) {
    return Status::InvalidArgument("etcd endpoint '" + endpoint + "' is not HOST:PORT");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const int resolved = getaddrinfo(host.c_str(), port.c_str(), &hints, &addresses);
  if (resolved != 0) {
    return Status::Communication("etcd member " + endpoint + ": cannot resolve '" + host +
                                 "': " + gai_strerror(resolved));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* address = addresses; address != nullptr && fd < 0; address = address->ai_next) {
    fd = ConnectOne(*address, deadline, &error);
  }
  freeaddrinfo(addresses);
  if (fd < 0) {
    const std::string message = "etcd member " + endpoint + ": " + error;
    return error == std::strerror(ETIMEDOUT) ? Status::Timeout(message)
                                             : Status::Communication(message);
  }
  return std::unique_ptr<HttpConnection>(new HttpConnection(fd, endpoint));
}

HttpConnection::~HttpConnection() {
  if (fd_ >= 0) close(fd_);
}

bool HttpConnection::Usable() const {
  if (broken_ || !keep_alive_ || !in_.empty()) return false;
  pollfd entry{fd_, POLLIN, 0};
  if (poll(&entry, 1, 0) == 0) return true;
  // Readable between answers: the end of the stream, or bytes nobody asked for.
  return false;
}

Status HttpConnection::Fail(Status status) {
  broken_ = true;
  return status;
}

Status HttpConnection::SendRequest(const std::string& path, const std::string& body,
                                   Clock::time_point deadline) {
  const std::string request =
      "POST " + path + " HTTP/1.1\r\nHost: " + endpoint_ +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  answering_ = false;
  size_t offset = 0;
  while (offset < request.size()) {
    const ssize_t count = send(fd_, request.data() + offset, request.size() - offset, MSG_NOSIGNAL);
    if (count > 0) {
      offset += static_cast<size_t>(count);
    } else if (count < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(fd_, POLLOUT, deadline)) {
        return Fail(Status::Timeout("etcd member " + endpoint_ + " took no request in time"));
      }
    } else {
      return Fail(Status::Communication("etcd member " + endpoint_ +
                                        ": sending failed: " + std::strerror(errno)));
    }
  }
  return Status::Ok();
}

Status HttpConnection::Fill(Clock::time_point deadline) {
  for (;;) {
    char buffer[kReadBytes];
    const ssize_t count = recv(fd_, buffer, sizeof buffer, 0);
    if (count > 0) {
      answering_ = true;
      in_.append(buffer, static_cast<size_t>(count));
      return Status::Ok();
    }
    const bool closed = count == 0 || errno == ECONNRESET;
    if (closed && !answering_) {
      // No etcd member takes a request and closes without a word; the built-in store does.
      return Fail(Status::Error(NotEtcd(endpoint_, "closed the connection without answering")));
    }
    if (count == 0) {
      return Fail(Status::Communication("etcd member " + endpoint_ + " closed the connection"));
    }
    if (errno != EAGAIN && errno != EINTR) {
      return Fail(Status::Communication("etcd member " + endpoint_ + ": " + std::strerror(errno)));
    }
    if (!WaitFor(fd_, POLLIN, deadline)) {
      return Fail(Status::Timeout("etcd member " + endpoint_ + " did not answer in time"));
    }
  }
}

Result<std::string> HttpConnection::ReadLine(Clock::time_point deadline) {
  for (;;) {
    const size_t end = in_.find("\r\n");
    if (end != std::string::npos) {
      std::string line = in_.substr(0, end);
      in_.erase(0, end + 2);
      return line;
    }
    if (in_.size() > kMaxLineBytes) {
      return Fail(Status::Error(NotEtcd(endpoint_, "does not answer in HTTP")));
    }
    DPL_RETURN_IF_ERROR(Fill(deadline));
  }
}

Result<HttpConnection::Head> HttpConnection::ReadHead(Clock::time_point deadline) {
  DPL_ASSIGN_OR_RETURN(auto status_line, ReadLine(deadline));
  Head head;
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12) {
    return Fail(Status::Error(NotEtcd(endpoint_, "does not answer in HTTP")));
  }
  head.status = std::atoi(status_line.c_str() + 9);
  for (int lines = 0;; ++lines) {
    DPL_ASSIGN_OR_RETURN(auto line, ReadLine(deadline));
    if (line.empty()) break;
    if (lines >= kMaxHeaderLines)
      return Fail(Status::Error("etcd member " + endpoint_ + " sent too many header lines"));
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = Lower(line.substr(0, colon));
    std::string value = Lower(line.substr(colon + 1));
    value.erase(0, value.find_first_not_of(' '));
    if (name == "transfer-encoding") head.chunked = value.find("chunked") != std::string::npos;
    if (name == "connection") head.close = value.find("close") != std::string::npos;
    if (name == "content-length") head.content_length = std::atoll(value.c_str());
  }
  keep_alive_ = !head.close;
  return head;
}

// Appends the next decoded bytes of a chunked body to `*out`; false at its end.
Result<bool> HttpConnection::ReadChunk(Clock::time_point deadline, std::string* out) {
  if (chunk_left_ == 0) {
    if (chunk_trailer_) {
      DPL_ASSIGN_OR_RETURN(auto crlf, ReadLine(deadline));
      chunk_trailer_ = false;
    }
    DPL_ASSIGN_OR_RETURN(auto size_line, ReadLine(deadline));
    char* end = nullptr;
    const unsigned long long size = std::strtoull(size_line.c_str(), &end, 16);
    if (end == size_line.c_str() || size > static_cast<unsigned long long>(kMaxBodyBytes)) {
      return Fail(Status::Error("etcd member " + endpoint_ + " sent a malformed chunk size"));
    }
    if (size == 0) {
      for (;;) {  // trailers, up to the empty line
        DPL_ASSIGN_OR_RETURN(auto trailer, ReadLine(deadline));
        if (trailer.empty()) return false;
      }
    }
    chunk_left_ = static_cast<size_t>(size);
  }
  if (in_.empty()) DPL_RETURN_IF_ERROR(Fill(deadline));
  const size_t take = std::min(chunk_left_, in_.size());
  out->append(in_, 0, take);
  in_.erase(0, take);
  chunk_left_ -= take;
  chunk_trailer_ = chunk_left_ == 0;
  return true;
}

Status HttpConnection::ReadBody(const Head& head, Clock::time_point deadline, std::string* body) {
  if (head.chunked) {
    for (;;) {
      DPL_ASSIGN_OR_RETURN(auto more, ReadChunk(deadline, body));
      if (!more) return Status::Ok();
      if (body->size() > static_cast<size_t>(kMaxBodyBytes)) {
        return Fail(Status::Error("etcd member " + endpoint_ + " sent an oversized answer"));
      }
    }
  }
  if (head.content_length < 0 || head.content_length > kMaxBodyBytes) {
    return Fail(
        Status::Error("etcd member " + endpoint_ + " sent an answer without a usable length"));
  }
  const size_t length = static_cast<size_t>(head.content_length);
  while (in_.size() < length) DPL_RETURN_IF_ERROR(Fill(deadline));
  body->assign(in_, 0, length);
  in_.erase(0, length);
  return Status::Ok();
}

Result<HttpReply> HttpConnection::Post(const std::string& path, const std::string& body,
                                       Clock::time_point deadline, Sent* sent) {
  *sent = Sent::kNo;
  Status status = SendRequest(path, body, deadline);
  if (!status.ok()) return status;
  *sent = Sent::kMaybe;
  DPL_ASSIGN_OR_RETURN(auto head, ReadHead(deadline));
  HttpReply reply;
  reply.status = head.status;
  status = ReadBody(head, deadline, &reply.body);
  if (!status.ok()) return status;
  return reply;
}

Result<int> HttpConnection::StartStream(const std::string& path, const std::string& body,
                                        Clock::time_point deadline) {
  DPL_RETURN_IF_ERROR(SendRequest(path, body, deadline));
  DPL_ASSIGN_OR_RETURN(auto head, ReadHead(deadline));
  if (!head.chunked) {
    std::string text;
    DPL_RETURN_IF_ERROR(ReadBody(head, deadline, &text));
    stream_data_ = text + "\n";
    stream_ended_ = true;
  }
  broken_ = true;  // a stream is read until the connection closes, never reused
  return head.status;
}

Result<std::string> HttpConnection::NextLine(Clock::time_point deadline) {
  for (;;) {
    const size_t end = stream_data_.find('\n');
    if (end != std::string::npos) {
      std::string line = stream_data_.substr(0, end);
      stream_data_.erase(0, end + 1);
      return line;
    }
    if (stream_ended_) {
      return Status::Communication("etcd member " + endpoint_ + " ended the stream");
    }
    DPL_ASSIGN_OR_RETURN(auto more, ReadChunk(deadline, &stream_data_));
    stream_ended_ = !more;
  }
}

}  // namespace dpl::rendezvous::etcd
