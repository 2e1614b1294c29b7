// The store server: one thread runs a Boost.Asio event loop that accepts connections, reads their
// frames as bytes arrive (each connection a server::Session, store_session.cpp), answers requests
// from the key-value state and keeps blocked gets and waits until their keys exist or their time
// runs out. No thread or buffer is tied to a connection beyond what it sent.
//
// Note [Deadlines and dead peers]
// The store serves every launcher and worker of a job, and anyone else who can reach its port, so
// no peer may hold a resource for ever:
//  - A connection that has not completed the handshake handshake_timeout after it was accepted is
//    closed, and at most max_pending_handshakes such connections exist: a new one beyond that
//    evicts the oldest of them. A flood of connections that never complete the handshake (idle,
//    or a few bytes of a hello: slowloris) thus costs the server that many descriptors at most,
//    and a real client, whose hello follows its connect within a round trip, gets in at once: it
//    is evicted only if max_pending_handshakes newer connections come before its hello. Refusing
//    the new one instead would let the flood keep every real client out. Before the handshake a
//    frame may not exceed kMaxHandshakeBytes.
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
//    closed before sending a byte (a port scan, a health check) is not logged at all. The server
//    raises the process's soft descriptor limit to its hard limit when it starts, so only a hard
//    limit below the pending bound plus the job's connections is ever reached.
//
// Note [Only the launcher listens]: a process that holds the listening socket keeps the port
// bound after the launcher ended and takes connections it never answers. The socket is
// close-on-exec (the worker loader is exec'd, and forks the workers), and closed in every child
// the launcher forks without exec (pthread_atfork), so the launcher alone holds it; connections
// are close-on-exec too (PrepareStoreConnection).
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "common/open_files.hpp"
#include "rendezvous/log_limiter.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/store_common.hpp"
#include "rendezvous/store_session.hpp"
#include "rendezvous/wire_protocol.hpp"

namespace dpl::rendezvous {
namespace {

using server::Clock;
using server::error_code;
using server::HexByte;
using server::Op;
using server::Session;
using server::tcp;
namespace asio = server::asio;

constexpr std::chrono::milliseconds kFirstAcceptBackoff{10};
constexpr std::chrono::milliseconds kMaxAcceptBackoff{1000};

// Note [Only the launcher listens]: the listening sockets of the process's servers, as fd + 1 (0:
// a free slot), for the child of a fork to close. Atomics: a fork may come from any thread.
constexpr size_t kMaxListeningSockets = 64;
std::atomic<int> g_listening_sockets[kMaxListeningSockets];

extern "C" void CloseListeningSocketsInChild() {
  for (auto& slot : g_listening_sockets) {
    const int entry = slot.load();
    if (entry > 0) close(entry - 1);
  }
}

// Remembers `fd` for the children of later forks; the slot to forget it with, or -1 when every
// slot is taken (close-on-exec alone then keeps it from exec'd children).
int RememberListeningSocket(int fd) {
  static std::once_flag registered;
  std::call_once(registered,
                 [] { pthread_atfork(nullptr, nullptr, CloseListeningSocketsInChild); });
  for (size_t i = 0; i < kMaxListeningSockets; ++i) {
    int free_slot = 0;
    if (g_listening_sockets[i].compare_exchange_strong(free_slot, fd + 1)) return int(i);
  }
  return -1;
}

void ForgetListeningSocket(int slot) {
  if (slot >= 0) g_listening_sockets[size_t(slot)].store(0);
}

std::vector<uint8_t> Reply(Op op, const std::string& message = "") {
  wire::Writer writer;
  if (op != Op::kOk) writer.String(message);
  return writer.Frame(op);
}

class StoreServerImpl final : public StoreServer, public server::SessionHost {
 public:
  explicit StoreServerImpl(StoreServerOptions options)
      : options_(std::move(options)), acceptor_(io_), accept_retry_(io_) {}

  ~StoreServerImpl() override {
    ForgetListeningSocket(listening_slot_);
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

  // server::SessionHost
  const StoreServerOptions& options() const override { return options_; }
  bool stopping() const override { return stopping_; }
  void LogConnection(const std::string& message) override {
    auto line = connection_log_.Admit(message, Clock::now());
    if (line) log::Warning(*line);
  }
  void Forget(Session* session) override;
  void HandshakeCompleted(Session* session) override { ForgetPending(session); }
  void Hello(Session& session, const std::vector<uint8_t>& body) override;
  std::string Handle(Session& session, Op op, const std::vector<uint8_t>& body) override;
  void FinishWait(Session& session) override;

 private:
  bool HandleWait(Session& session, Op op, wire::Reader& reader);
  bool HandleAdd(Session& session, wire::Reader& reader);
  void Run();
  void Accept();
  void OnAccept(const error_code& error, tcp::socket socket);
  bool AllPresent(const std::vector<std::string>& keys) const;
  void WakeWaiters();
  void EvictOldestPending();
  void ForgetPending(Session* session);

  StoreServerOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::chrono::milliseconds accept_backoff_ = kFirstAcceptBackoff;
  int port_ = 0;
  int listening_slot_ = -1;  // Note [Only the launcher listens]
  std::thread thread_;
  // Everything below is used on the server's thread only.
  bool stopping_ = false;
  std::map<Session*, std::shared_ptr<Session>> sessions_;
  std::set<Session*> waiting_;
  // The connections still in their handshake, oldest first (by the order they were accepted).
  std::map<uint64_t, Session*> pending_by_age_;
  std::map<Session*, uint64_t> pending_age_;
  uint64_t accepted_ = 0;
  LogLimiter connection_log_{kConnectionLogBurst, kConnectionLogWindow};
  LogLimiter accept_log_{kAcceptLogBurst, kAcceptLogWindow};
  std::map<std::string, std::vector<uint8_t>> data_;
};

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
  if (!error) {
    fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);  // Note [Only the launcher listens]
    listening_slot_ = RememberListeningSocket(acceptor_.native_handle());
  }
  if (!error) acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) acceptor_.bind(endpoint, error);
  if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
  RaiseOpenFileLimit();  // Note [Deadlines and dead peers]: a low soft limit refuses connections
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
  if (options_.max_pending_handshakes <= 0) {
    socket.close(ignored);
  } else {
    while (static_cast<int>(pending_by_age_.size()) >= options_.max_pending_handshakes) {
      EvictOldestPending();
    }
    PrepareStoreConnection(socket.native_handle(), options_.keepalive_timeout);
    auto session = std::make_shared<Session>(*this, std::move(socket), peer);
    sessions_.emplace(session.get(), session);
    pending_by_age_.emplace(accepted_, session.get());
    pending_age_.emplace(session.get(), accepted_);
    ++accepted_;
    session->Start();
  }
  Accept();
}

void StoreServerImpl::Forget(Session* session) {
  waiting_.erase(session);
  ForgetPending(session);
  sessions_.erase(session);
}

void StoreServerImpl::ForgetPending(Session* session) {
  const auto age = pending_age_.find(session);
  if (age == pending_age_.end()) return;
  pending_by_age_.erase(age->second);
  pending_age_.erase(age);
}

// Note [Deadlines and dead peers]: the oldest connection still in its handshake makes room.
void StoreServerImpl::EvictOldestPending() {
  Session* oldest = pending_by_age_.begin()->second;
  oldest->Close(
      "evicted before its handshake completed: " + std::to_string(pending_by_age_.size()) +
      " connections wait for their handshake, the most the store lets wait "
      "(something floods the store's port?)");
  ForgetPending(oldest);  // in case Close had nothing to do
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
