// One HTTP/1.1 connection to an etcd member's client URL, for its v3 JSON gateway: POST a JSON
// body and read the answer whole (Content-Length or chunked), or read a streamed answer (a watch)
// line by line. Every step is bounded by a deadline; nothing here retries (etcd_gateway.hpp does).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.hpp"

namespace dpl::rendezvous::etcd {

using Clock = std::chrono::steady_clock;

struct HttpReply {
  int status = 0;  // 200, 400, ...
  std::string body;
};

// How far a failed request got: a request that never left may be sent elsewhere; one that did
// may have been carried out.
enum class Sent { kNo, kMaybe };

// "etcd member A <what>; is it the client URL of an etcd member (v3.4 or later)?"
std::string NotEtcd(const std::string& endpoint, const std::string& what);

class HttpConnection {
 public:
  // Connects to `endpoint` ("host:port", "[v6]:port") before `deadline`. Errors name it.
  static Result<std::unique_ptr<HttpConnection>> Open(const std::string& endpoint,
                                                      Clock::time_point deadline);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  // False once the peer closed the connection (a member that exited since the last request), or
  // when an answer was not read to its end: such a connection must not carry another request.
  bool Usable() const;

  // POSTs `body` to `path` and reads the answer, all before `deadline`. On failure `*sent` says
  // whether the request may have reached the member. Errors: DPL_ERR_TIMEOUT past the deadline,
  // DPL_ERR_COMMUNICATION for a refused or broken connection, DPL_ERR_INTERNAL for an answer
  // that is not HTTP.
  Result<HttpReply> Post(const std::string& path, const std::string& body,
                         Clock::time_point deadline, Sent* sent);

  // POSTs `body` to `path` and reads the status line and headers of an answer that streams;
  // returns the status. Then NextLine reads its body line by line.
  Result<int> StartStream(const std::string& path, const std::string& body,
                          Clock::time_point deadline);
  // The next line of a streamed answer, without its '\n', before `deadline`.
  Result<std::string> NextLine(Clock::time_point deadline);

 private:
  HttpConnection(int fd, std::string endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {}

  struct Head {
    int status = 0;
    bool chunked = false;
    bool close = false;
    long long content_length = -1;
  };
  Status SendRequest(const std::string& path, const std::string& body, Clock::time_point deadline);
  Status Fill(Clock::time_point deadline);
  Result<std::string> ReadLine(Clock::time_point deadline);
  Result<Head> ReadHead(Clock::time_point deadline);
  Result<bool> ReadChunk(Clock::time_point deadline, std::string* out);
  Status ReadBody(const Head& head, Clock::time_point deadline, std::string* body);
  Status Fail(Status status);

  int fd_ = -1;
  std::string endpoint_;
  std::string in_;              // bytes received and not yet consumed
  bool broken_ = false;         // the stream is out of step: no further request on it
  bool keep_alive_ = true;      // the member did not ask to close after the last answer
  size_t chunk_left_ = 0;       // bytes of the current chunk still to read
  bool chunk_trailer_ = false;  // a chunk's closing CRLF is still to read
  bool answering_ = false;      // a byte of the answer to the last request came
  bool stream_ended_ = false;
  std::string stream_data_;  // decoded body bytes of a stream not yet returned as lines
};

}  // namespace dpl::rendezvous::etcd
