// One connection of the store server (store_server.cpp), as bytes and deadlines: it reads frames
// as their bytes arrive (FrameBuffer), refuses a bad header before its body, sends each reply,
// and keeps the deadlines of the handshake, of each frame, of each reply and of a blocked get or
// wait (Note [Deadlines and dead peers] in store_server.cpp). What a request means is the
// server's: a session hands each complete frame to its SessionHost. Internal to the server.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/frame_buffer.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/wire_protocol.hpp"

namespace dpl::rendezvous::server {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using wire::Op;
using Clock = std::chrono::steady_clock;

// "0x2a", for messages about ops.
std::string HexByte(uint8_t value);

class Session;

// What a session needs of the server that accepted it; every call on the server's thread.
class SessionHost {
 public:
  virtual const StoreServerOptions& options() const = 0;
  virtual bool stopping() const = 0;
  // Logs a line about one connection (rate-limited).
  virtual void LogConnection(const std::string& message) = 0;
  // The session closed; the server drops it.
  virtual void Forget(Session* session) = 0;
  virtual void HandshakeCompleted(Session* session) = 0;
  // The first frame of a connection; answers it through the session.
  virtual void Hello(Session& session, const std::vector<uint8_t>& body) = 0;
  // Returns "" once the request is answered or waiting, else why the connection must close.
  virtual std::string Handle(Session& session, Op op, const std::vector<uint8_t>& body) = 0;
  // Answers a blocked get or wait: with its value(s) if present, else with kTimeout.
  virtual void FinishWait(Session& session) = 0;

 protected:
  ~SessionHost() = default;
};

// One connection. All of it runs on the server's thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(SessionHost& server, tcp::socket socket, std::string peer)
      : server_(server),
        socket_(std::move(socket)),
        peer_(std::move(peer)),
        read_deadline_(socket_.get_executor()),
        write_deadline_(socket_.get_executor()),
        wait_deadline_(socket_.get_executor()) {}

  void Start();
  // Closes the connection, logging `reason` unless it is empty; then the server forgets it.
  void Close(const std::string& reason);
  // The handshake succeeded: from now on the connection may stay idle between frames.
  void MarkHandshaken();
  void Send(std::vector<uint8_t> frame);
  // Sends `frame`, then closes the connection for `reason`.
  void SendAndClose(std::vector<uint8_t> frame, std::string reason);
  // Leaves the request unanswered until the server calls FinishWait or `timeout` passes.
  void WaitForKeys(Op op, std::vector<std::string> keys, std::chrono::milliseconds timeout);

  bool handshaken() const { return handshaken_; }
  Op wait_op() const { return wait_op_; }
  const std::vector<std::string>& wait_keys() const { return wait_keys_; }
  void EndWait();

 private:
  struct Deadline {
    explicit Deadline(const tcp::socket::executor_type& executor) : timer(executor) {}
    asio::steady_timer timer;
    uint64_t generation = 0;  // a handler of an older arming does nothing
  };
  template <typename OnExpiry>
  void Arm(Deadline& deadline, std::chrono::milliseconds after, OnExpiry on_expiry);
  void Disarm(Deadline& deadline);

  void ReadMore();
  void OnRead(const error_code& error, size_t count);
  std::string CheckHeader() const;
  std::string DescribeReadFailure(const error_code& error) const;
  void Dispatch();
  void OnSent(const error_code& error);

  SessionHost& server_;
  tcp::socket socket_;
  const std::string peer_;
  FrameBuffer frame_;
  std::vector<uint8_t> outgoing_;
  Deadline read_deadline_;   // the handshake, then each frame from its first byte
  Deadline write_deadline_;  // each reply
  Deadline wait_deadline_;   // a blocked get or wait
  bool closed_ = false;
  bool handshaken_ = false;
  bool received_any_ = false;
  bool reading_ = false;
  bool busy_ = false;          // a request is being answered
  bool frame_queued_ = false;  // the next request arrived before its predecessor's reply left
  bool close_after_send_ = false;
  std::string close_reason_;
  Op wait_op_ = Op::kGet;
  std::vector<std::string> wait_keys_;
};

}  // namespace dpl::rendezvous::server
