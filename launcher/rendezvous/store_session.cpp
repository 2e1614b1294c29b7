// A store connection: its frames as bytes arrive, its replies, its deadlines (store_session.hpp).
#include "rendezvous/store_session.hpp"

#include <algorithm>
#include <cstdio>

#include "rendezvous/store_common.hpp"

namespace dpl::rendezvous::server {
namespace {

// A handshake carries two numbers and a job token; anything bigger is not a client of ours.
constexpr uint32_t kMaxHandshakeBytes = 4096;

bool PeerLeft(const error_code& error) {
  return error == asio::error::eof || error == asio::error::connection_reset;
}

}  // namespace

std::string HexByte(uint8_t value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", value);
  return text;
}

template <typename OnExpiry>
void Session::Arm(Deadline& deadline, std::chrono::milliseconds after, OnExpiry on_expiry) {
  const uint64_t generation = ++deadline.generation;
  deadline.timer.expires_after(std::min(after, kMaxStoreWait));
  deadline.timer.async_wait(
      [self = shared_from_this(), &deadline, generation, on_expiry](const error_code& error) {
        if (error || deadline.generation != generation || self->closed_) return;
        on_expiry();
      });
}

void Session::Disarm(Deadline& deadline) {
  ++deadline.generation;
  deadline.timer.cancel();
}

void Session::Start() {
  const auto timeout = server_.options().handshake_timeout;
  Arm(read_deadline_, timeout, [this, timeout] {
    Close(std::string(received_any_ ? "the handshake did not complete" : "no handshake") +
          " within " + SecondsText(timeout));
  });
  ReadMore();
}

void Session::Close(const std::string& reason) {
  if (closed_) return;
  const auto self = shared_from_this();  // Forget drops the server's reference
  closed_ = true;
  if (!reason.empty() && !server_.stopping()) {
    server_.LogConnection("rendezvous store: closing the connection from " + peer_ + ": " + reason);
  }
  Disarm(read_deadline_);
  Disarm(write_deadline_);
  Disarm(wait_deadline_);
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  server_.Forget(this);
}

void Session::ReadMore() {
  if (closed_ || reading_ || frame_queued_ || close_after_send_) return;
  reading_ = true;
  const FrameBuffer::Space space = frame_.NextSpace();
  socket_.async_read_some(asio::buffer(space.data, space.size),
                          [self = shared_from_this()](const error_code& error, size_t count) {
                            self->OnRead(error, count);
                          });
}

void Session::OnRead(const error_code& error, size_t count) {
  reading_ = false;
  if (closed_) return;
  if (error) {
    Close(DescribeReadFailure(error));
    return;
  }
  const bool frame_started = frame_.received() == 0;
  const bool had_header = frame_.header_complete();
  frame_.Commit(count);
  received_any_ = true;
  if (frame_started && handshaken_) {
    const auto timeout = server_.options().frame_timeout;
    Arm(read_deadline_, timeout, [this, timeout] {
      Close("a frame did not complete within " + SecondsText(timeout) + " of its first byte");
    });
  }
  if (!had_header && frame_.header_complete()) {
    const std::string refusal = CheckHeader();
    if (!refusal.empty()) {
      Close(refusal);
      return;
    }
  }
  if (!frame_.complete()) {
    ReadMore();
    return;
  }
  if (handshaken_) Disarm(read_deadline_);
  if (busy_) {
    frame_queued_ = true;  // reading resumes once the reply is out
    return;
  }
  Dispatch();
}

// Checks op and size before the body is read, so garbage never makes the server wait for a body
// that will not come.
std::string Session::CheckHeader() const {
  const uint8_t op = frame_.op();
  uint32_t limit = wire::kMaxBodyBytes;
  if (!handshaken_) {
    if (op != static_cast<uint8_t>(Op::kHello)) {
      return "expected a handshake (op " + HexByte(static_cast<uint8_t>(Op::kHello)) +
             ") but got op " + HexByte(op) + "; not a dpl store client?";
    }
    limit = kMaxHandshakeBytes;
  } else if (!wire::IsRequestOp(op)) {
    return "unknown op " + HexByte(op);
  }
  if (frame_.body_size() > limit) {
    return "a frame announced a body of " + std::to_string(frame_.body_size()) +
           " bytes, above the limit of " + std::to_string(limit);
  }
  return "";
}

// "" when the peer simply left: before sending anything, or between requests.
std::string Session::DescribeReadFailure(const error_code& error) const {
  if (PeerLeft(error)) {
    if (!received_any_ || (handshaken_ && frame_.received() == 0)) return "";
    if (!handshaken_) return "closed before the handshake";
    return "connection broke inside a frame: " + error.message();
  }
  if (error == asio::error::timed_out) {
    return "its machine stopped answering (" + error.message() + ")";
  }
  return error.message();
}

void Session::Dispatch() {
  const Op op = static_cast<Op>(frame_.op());
  const std::vector<uint8_t> body = frame_.TakeBody();
  busy_ = true;
  if (!handshaken_) {
    server_.Hello(*this, body);
  } else {
    const std::string refusal = server_.Handle(*this, op, body);
    if (!refusal.empty()) {
      Close(refusal);
      return;
    }
  }
  ReadMore();  // notices a peer that leaves while its request waits
}

void Session::MarkHandshaken() {
  handshaken_ = true;
  Disarm(read_deadline_);
  server_.HandshakeCompleted(this);
}

void Session::Send(std::vector<uint8_t> frame) {
  if (closed_) return;
  outgoing_ = std::move(frame);
  const auto timeout = server_.options().frame_timeout;
  Arm(write_deadline_, timeout, [this, timeout] {
    Close("a reply of " + std::to_string(outgoing_.size()) + " bytes could not be sent within " +
          SecondsText(timeout));
  });
  asio::async_write(
      socket_, asio::buffer(outgoing_),
      [self = shared_from_this()](const error_code& error, size_t) { self->OnSent(error); });
}

void Session::SendAndClose(std::vector<uint8_t> frame, std::string reason) {
  close_after_send_ = true;
  close_reason_ = std::move(reason);
  Send(std::move(frame));
}

void Session::OnSent(const error_code& error) {
  Disarm(write_deadline_);
  if (closed_) return;
  if (error) {
    Close(PeerLeft(error) || error == asio::error::broken_pipe
              ? "left before reading its reply"
              : "could not send a reply: " + error.message());
    return;
  }
  if (close_after_send_) {
    Close(close_reason_);
    return;
  }
  busy_ = false;
  std::vector<uint8_t>().swap(outgoing_);  // a reply may be large
  if (frame_queued_) {
    frame_queued_ = false;
    Dispatch();
  }
}

void Session::WaitForKeys(Op op, std::vector<std::string> keys, std::chrono::milliseconds timeout) {
  wait_op_ = op;
  wait_keys_ = std::move(keys);
  Arm(wait_deadline_, timeout, [this] { server_.FinishWait(*this); });
}

void Session::EndWait() {
  Disarm(wait_deadline_);
  wait_keys_.clear();
}

}  // namespace dpl::rendezvous::server
