// The store server: one thread runs a Boost.Asio event loop that accepts connections, reads their
// frames as bytes arrive, answers requests and keeps blocked gets and waits until their keys exist
// or their time runs out. No thread or buffer is tied to a connection beyond what it sent.
//
// Note [Deadlines and dead peers]
// The store serves every launcher and worker of a job, and anyone else who can reach its port, so
// no peer may hold a resource for ever:
//  - A connection that has not completed the handshake handshake_timeout after it was accepted is
//    closed, and at most max_pending_handshakes such connections exist: beyond that a new one is
//    closed at once (our client retries within its connect_timeout). Before the handshake a frame
//    may not exceed kMaxHandshakeBytes.
//  - A frame must be complete frame_timeout after its first byte arrived, and a reply must be
//    sent within frame_timeout; the body buffer grows with the bytes that actually arrive
//    (FrameBuffer), so a header that announces 64 MiB and stops costs a header.
//  - Between frames a connection may stay idle for any time: a worker's connection is silent for
//    hours of training, so an idle deadline would cut legitimate clients. A peer that vanished
//    (machine down, network cut, no FIN or RST ever comes) is found by TCP keepalive instead:
//    probes after keepalive_timeout / 2 of silence, and the connection fails after
//    keepalive_timeout without an answer. Keepalive rather than a heartbeat in the protocol
//    because the peer's kernel answers the probes: a client needs no thread of its own to stay
//    alive, and an old client needs no change. It does not catch a peer whose process is stopped
//    but whose kernel still answers; such a peer holds one connection, and the client side's
//    call deadlines (StoreClientOptions::call_timeout) catch a stopped server.
//  - A failing accept (out of descriptors) backs off from 10 ms to 1 s instead of spinning, and
//    lines about it and about single connections are rate-limited (LogLimiter). A connection
//    closed before sending a byte (a port scan, a health check) is not logged at all.
#include <boost/asio.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/frame_buffer.hpp"
#include "rendezvous/log_limiter.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/store_common.hpp"
#include "rendezvous/wire_protocol.hpp"

namespace dpl::rendezvous {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using wire::Op;
using Clock = std::chrono::steady_clock;

// A handshake carries two numbers and a job token; anything bigger is not a client of ours.
constexpr uint32_t kMaxHandshakeBytes = 4096;
constexpr std::chrono::milliseconds kFirstAcceptBackoff{10};
constexpr std::chrono::milliseconds kMaxAcceptBackoff{1000};

std::string HexByte(uint8_t value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", value);
  return text;
}

std::vector<uint8_t> Reply(Op op, const std::string& message = "") {
  wire::Writer writer;
  if (op != Op::kOk) writer.String(message);
  return writer.Frame(op);
}

bool PeerLeft(const error_code& error) {
  return error == asio::error::eof || error == asio::error::connection_reset;
}

class StoreServerImpl;

// One connection. All of it runs on the server's thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(StoreServerImpl& server, tcp::socket socket, std::string peer)
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

  StoreServerImpl& server_;
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

class StoreServerImpl final : public StoreServer {
 public:
  explicit StoreServerImpl(StoreServerOptions options)
      : options_(std::move(options)), acceptor_(io_), accept_retry_(io_) {}

  ~StoreServerImpl() override {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      stopping_ = true;
      error_code ignored;
      acceptor_.close(ignored);
      accept_retry_.cancel();
      const auto sessions = sessions_;
      for (const auto& session : sessions) session.second->Close("");
    });
    thread_.join();
  }

  Status Bind();
  int port() const override { return port_; }

  const StoreServerOptions& options() const { return options_; }
  bool stopping() const { return stopping_; }
  void LogConnection(const std::string& message) {
    auto line = connection_log_.Admit(message, Clock::now());
    if (line) log::Warning(*line);
  }
  void Forget(Session* session);
  void HandshakeCompleted() { --pending_handshakes_; }
  // The first frame of a connection; answers it through the session.
  void Hello(Session& session, const std::vector<uint8_t>& body);
  // Returns "" once the request is answered or waiting, else why the connection must close.
  std::string Handle(Session& session, Op op, const std::vector<uint8_t>& body);
  // Answers a blocked get or wait: with its value(s) if present, else with kTimeout.
  void FinishWait(Session& session);

 private:
  bool HandleWait(Session& session, Op op, wire::Reader& reader);
  bool HandleAdd(Session& session, wire::Reader& reader);
  void Run();
  void Accept();
  void OnAccept(const error_code& error, tcp::socket socket);
  bool AllPresent(const std::vector<std::string>& keys) const;
  void WakeWaiters();

  StoreServerOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::chrono::milliseconds accept_backoff_ = kFirstAcceptBackoff;
  int port_ = 0;
  std::thread thread_;
  // Everything below is used on the server's thread only.
  bool stopping_ = false;
  std::map<Session*, std::shared_ptr<Session>> sessions_;
  std::set<Session*> waiting_;
  int pending_handshakes_ = 0;
  LogLimiter connection_log_{kConnectionLogBurst, kConnectionLogWindow};
  LogLimiter accept_log_{kAcceptLogBurst, kAcceptLogWindow};
  std::map<std::string, std::vector<uint8_t>> data_;
};

// ---------------------------------------------------------------------------------------------
// Session.

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
  server_.HandshakeCompleted();
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

// ---------------------------------------------------------------------------------------------
// Server.

Status StoreServerImpl::Bind() {
  const std::string where = options_.bind_addr + ":" + std::to_string(options_.port);
  error_code error;
  const auto address = asio::ip::make_address(options_.bind_addr, error);
  if (error) {
    return Status::Error("cannot serve the rendezvous store on " + where + ": '" +
                         options_.bind_addr + "' is not an IP address");
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
  acceptor_.open(endpoint.protocol(), error);
  if (!error) acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) acceptor_.bind(endpoint, error);
  if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    return Status::Error("cannot serve the rendezvous store on " + where + ": " + error.message() +
                         (error == asio::error::address_in_use
                              ? " (another process uses this port; pick another "
                                "--master-port or stop that process)"
                              : ""));
  }
  port_ = acceptor_.local_endpoint().port();
  Accept();
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void StoreServerImpl::Run() {
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {  // e.g. out of memory in one handler: serve on
      log::Error(std::string("rendezvous store: unexpected error: ") + e.what());
    }
  }
}

void StoreServerImpl::Accept() {
  acceptor_.async_accept(
      [this](const error_code& error, tcp::socket socket) { OnAccept(error, std::move(socket)); });
}

void StoreServerImpl::OnAccept(const error_code& error, tcp::socket socket) {
  if (stopping_) return;
  if (error) {
    // Out of descriptors or memory: retrying at once would spin (the connection stays queued).
    auto line = accept_log_.Admit(
        "rendezvous store: cannot accept connections: " + error.message() +
            "; retrying with backoff (too many connections, or raise the limit: ulimit -n)",
        Clock::now());
    if (line) log::Warning(*line);
    accept_retry_.expires_after(accept_backoff_);
    accept_backoff_ = std::min(accept_backoff_ * 2, kMaxAcceptBackoff);
    accept_retry_.async_wait([this](const error_code& cancelled) {
      if (!cancelled && !stopping_) Accept();
    });
    return;
  }
  accept_backoff_ = kFirstAcceptBackoff;
  error_code endpoint_error, ignored;
  const auto endpoint = socket.remote_endpoint(endpoint_error);
  const std::string peer =
      endpoint_error ? std::string("an unknown peer")
                     : endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  if (pending_handshakes_ >= options_.max_pending_handshakes) {
    LogConnection("rendezvous store: refusing the connection from " + peer + ": " +
                  std::to_string(pending_handshakes_) +
                  " connections have not completed the handshake yet (something floods the "
                  "store's port?)");
    socket.close(ignored);
  } else {
    PrepareStoreConnection(socket.native_handle(), options_.keepalive_timeout);
    auto session = std::make_shared<Session>(*this, std::move(socket), peer);
    sessions_.emplace(session.get(), session);
    ++pending_handshakes_;
    session->Start();
  }
  Accept();
}

void StoreServerImpl::Forget(Session* session) {
  waiting_.erase(session);
  if (!session->handshaken()) --pending_handshakes_;
  sessions_.erase(session);
}

void StoreServerImpl::Hello(Session& session, const std::vector<uint8_t>& body) {
  wire::Reader reader(body);
  uint32_t magic = 0, version = 0;
  std::string token;
  if (!reader.U32(&magic) || !reader.U32(&version) || !reader.String(&token) || !reader.AtEnd()) {
    session.Close("malformed handshake body of " + std::to_string(body.size()) + " bytes");
    return;
  }
  if (magic != wire::kMagic) {
    session.Close("bad handshake magic; not a dpl store client");
    return;
  }
  std::string refusal;
  if (version != wire::kProtocolVersion) {
    refusal = "store protocol version " + std::to_string(version) +
              " is not supported (this store speaks version " +
              std::to_string(wire::kProtocolVersion) +
              "); run the same dpl version on every machine";
  } else if (token != options_.job_token) {
    refusal =
        "job token does not match the job's; pass the same --job-token (or DPL_JOB_TOKEN) to "
        "every launcher of the job";
  }
  if (!refusal.empty()) {
    session.SendAndClose(Reply(Op::kError, refusal), "refused the client: " + refusal);
    return;
  }
  session.MarkHandshaken();
  session.Send(Reply(Op::kOk));
}

std::string StoreServerImpl::Handle(Session& session, Op op, const std::vector<uint8_t>& body) {
  wire::Reader reader(body);
  std::string key;
  const std::string malformed = "malformed body for op " + HexByte(static_cast<uint8_t>(op));
  switch (op) {
    case Op::kSet: {
      std::vector<uint8_t> value;
      if (!reader.String(&key) || !reader.Bytes(&value) || !reader.AtEnd()) return malformed;
      data_[key] = std::move(value);
      session.Send(Reply(Op::kOk));
      WakeWaiters();
      return "";
    }
    case Op::kGet:
    case Op::kWait:
      return HandleWait(session, op, reader) ? "" : malformed;
    case Op::kAdd:
      return HandleAdd(session, reader) ? "" : malformed;
    case Op::kDelete: {
      if (!reader.String(&key) || !reader.AtEnd()) return malformed;
      data_.erase(key);
      session.Send(Reply(Op::kOk));
      return "";
    }
    default:
      return "unknown op " + HexByte(static_cast<uint8_t>(op));
  }
}

// Get and wait: answered at once when the keys exist or the timeout is not positive, else once
// they do or the timeout passes. False for a malformed body.
bool StoreServerImpl::HandleWait(Session& session, Op op, wire::Reader& reader) {
  std::string key;
  std::vector<std::string> keys;
  if (op == Op::kGet) {
    if (!reader.String(&key)) return false;
    keys.push_back(key);
  } else {
    uint32_t count = 0;
    if (!reader.U32(&count)) return false;
    for (uint32_t i = 0; i < count; ++i) {
      if (!reader.String(&key)) return false;
      keys.push_back(key);
    }
  }
  int64_t timeout_ms = 0;
  if (!reader.I64(&timeout_ms) || !reader.AtEnd()) return false;
  const bool ready = AllPresent(keys);
  session.WaitForKeys(op, std::move(keys), std::chrono::milliseconds(timeout_ms));
  if (ready || timeout_ms <= 0) {
    FinishWait(session);
  } else {
    waiting_.insert(&session);
  }
  return true;
}

bool StoreServerImpl::HandleAdd(Session& session, wire::Reader& reader) {
  std::string key;
  int64_t delta = 0;
  if (!reader.String(&key) || !reader.I64(&delta) || !reader.AtEnd()) return false;
  auto& value = data_[key];
  const std::string text(value.begin(), value.end());
  char* end = nullptr;
  const long long current = text.empty() ? 0 : std::strtoll(text.c_str(), &end, 10);
  if (!text.empty() && (end == nullptr || *end != '\0')) {
    session.Send(Reply(Op::kError, "key '" + key + "' holds a value that is not a counter"));
    return true;
  }
  const int64_t result = static_cast<int64_t>(current) + delta;
  const std::string updated = std::to_string(result);
  value.assign(updated.begin(), updated.end());
  wire::Writer writer;
  writer.I64(result);
  session.Send(writer.Frame(Op::kOk));
  WakeWaiters();
  return true;
}

bool StoreServerImpl::AllPresent(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (data_.count(key) == 0) return false;
  }
  return true;
}

void StoreServerImpl::WakeWaiters() {
  std::vector<Session*> ready;
  for (Session* session : waiting_) {
    if (AllPresent(session->wait_keys())) ready.push_back(session);
  }
  for (Session* session : ready) FinishWait(*session);
}

void StoreServerImpl::FinishWait(Session& session) {
  waiting_.erase(&session);
  const std::vector<std::string> keys = session.wait_keys();
  const Op op = session.wait_op();
  session.EndWait();
  if (!AllPresent(keys)) {
    std::string missing;
    for (const auto& k : keys) {
      if (data_.count(k) == 0) missing += (missing.empty() ? "'" : ", '") + k + "'";
    }
    session.Send(Reply(Op::kTimeout, op == Op::kGet ? keys.front() : missing));
    return;
  }
  if (op == Op::kWait) {
    session.Send(Reply(Op::kOk));
    return;
  }
  wire::Writer writer;
  const auto& value = data_[keys.front()];
  writer.Bytes(value.data(), value.size());
  session.Send(writer.Frame(Op::kOk));
}

}  // namespace

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const StoreServerOptions& options) {
  auto server = std::make_unique<StoreServerImpl>(options);
  Status status = server->Bind();
  if (!status.ok()) return status;
  return std::unique_ptr<StoreServer>(std::move(server));
}

}  // namespace dpl::rendezvous
