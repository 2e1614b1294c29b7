#include "rendezvous/store.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstdio>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "common/log.hpp"
#include "rendezvous/wire_protocol.hpp"

namespace dpl::rendezvous {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using wire::Op;

// A handshake carries two numbers and a job token; anything bigger is not a client of ours.
constexpr uint32_t kMaxHandshakeBytes = 4096;

std::string HexByte(uint8_t value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", value);
  return text;
}

// Reads one frame. On failure `*reason` says why (empty when the peer simply closed).
// `accept_op` checks the op before the body is read, so garbage never makes the server wait for
// a body that will not come; `limit` bounds the body.
template <typename AcceptOp>
bool ReadFrame(tcp::socket& socket, uint8_t* op, std::vector<uint8_t>* body, std::string* reason,
               AcceptOp accept_op, uint32_t limit = wire::kMaxBodyBytes) {
  uint8_t header[wire::kFrameHeaderBytes];
  boost::system::error_code error;
  asio::read(socket, asio::buffer(header), error);
  if (error) {
    *reason = error == asio::error::eof ? "" : error.message();
    return false;
  }
  *op = header[0];
  uint32_t size = 0;
  std::memcpy(&size, &header[1], sizeof size);
  *reason = accept_op(*op);
  if (!reason->empty()) return false;
  if (size > limit) {
    *reason = "a frame announced a body of " + std::to_string(size) +
              " bytes, above the limit of " + std::to_string(limit);
    return false;
  }
  body->resize(size);
  if (size > 0) asio::read(socket, asio::buffer(*body), error);
  if (error) {
    *reason = "connection broke inside a frame: " + error.message();
    return false;
  }
  return true;
}

bool WriteFrame(tcp::socket& socket, const std::vector<uint8_t>& frame) {
  boost::system::error_code error;
  asio::write(socket, asio::buffer(frame), error);
  return !error;
}

std::string AnyOp(uint8_t /*op*/) {
  return "";
}

std::vector<uint8_t> Reply(Op op, const std::string& message = "") {
  wire::Writer writer;
  if (op != Op::kOk) writer.String(message);
  return writer.Frame(op);
}

std::string Seconds(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

// ---------------------------------------------------------------------------------------------
// Server: one accept thread and one thread per connection (connections are few: one per launcher
// and worker). Blocking gets and waits sleep on one condition variable.

class StoreServerImpl final : public StoreServer {
 public:
  explicit StoreServerImpl(StoreServerOptions options)
      : options_(std::move(options)), acceptor_(io_) {}

  ~StoreServerImpl() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    // shutdown() wakes the blocking accept/read calls of the other threads.
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    if (accept_thread_.joinable()) accept_thread_.join();
    std::list<Connection> connections;
    {
      std::lock_guard<std::mutex> lock(connections_mutex_);
      for (auto& connection : connections_) {
        ::shutdown(connection.socket->native_handle(), SHUT_RDWR);
      }
      connections.swap(connections_);
    }
    for (auto& connection : connections) connection.thread.join();
  }

  Status Bind() {
    const std::string where = options_.bind_addr + ":" + std::to_string(options_.port);
    boost::system::error_code error;
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
      return Status::Error(
          "cannot serve the rendezvous store on " + where + ": " + error.message() +
          (error == asio::error::address_in_use ? " (another process uses this port; pick another "
                                                  "--master-port or stop that process)"
                                                : ""));
    }
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return Status::Ok();
  }

  int port() const override { return port_; }

 private:
  struct Connection {
    std::shared_ptr<tcp::socket> socket;
    std::thread thread;
  };

  void AcceptLoop() {
    for (;;) {
      auto socket = std::make_shared<tcp::socket>(io_);
      boost::system::error_code error;
      acceptor_.accept(*socket, error);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return;
      }
      if (error) {
        if (error == asio::error::invalid_argument || error == asio::error::bad_descriptor) return;
        log::Warning("rendezvous store: accept failed: " + error.message());
        continue;
      }
      socket->set_option(tcp::no_delay(true), error);
      std::lock_guard<std::mutex> lock(connections_mutex_);
      connections_.push_back({socket, std::thread([this, socket] { Serve(*socket); })});
    }
  }

  void Serve(tcp::socket& socket) {
    boost::system::error_code error;
    const auto peer_endpoint = socket.remote_endpoint(error);
    const std::string peer =
        error ? std::string("an unknown peer")
              : peer_endpoint.address().to_string() + ":" + std::to_string(peer_endpoint.port());
    std::string reason = Handshake(socket);
    while (reason.empty()) {
      uint8_t op = 0;
      std::vector<uint8_t> body;
      auto request_op = [](uint8_t candidate) {
        return wire::IsRequestOp(candidate) ? std::string() : "unknown op " + HexByte(candidate);
      };
      if (!ReadFrame(socket, &op, &body, &reason, request_op)) break;
      std::vector<uint8_t> reply;
      reason = Handle(static_cast<Op>(op), body, &reply);
      if (reason.empty() && !WriteFrame(socket, reply)) break;
    }
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping = stopping_;
    }
    if (!reason.empty() && !stopping) {
      log::Warning("rendezvous store: closing the connection from " + peer + ": " + reason);
    }
    socket.shutdown(tcp::socket::shutdown_both, error);
  }

  // Returns "" when the client may go on, else why the connection is closed.
  std::string Handshake(tcp::socket& socket) {
    uint8_t op = 0;
    std::vector<uint8_t> body;
    std::string reason;
    auto hello_op = [](uint8_t candidate) {
      if (candidate == static_cast<uint8_t>(Op::kHello)) return std::string();
      return "expected a handshake (op " + HexByte(static_cast<uint8_t>(Op::kHello)) +
             ") but got op " + HexByte(candidate) + "; not a dpl store client?";
    };
    if (!ReadFrame(socket, &op, &body, &reason, hello_op, kMaxHandshakeBytes)) {
      return reason.empty() ? "closed before the handshake" : reason;
    }
    wire::Reader reader(body);
    uint32_t magic = 0, version = 0;
    std::string token;
    if (!reader.U32(&magic) || !reader.U32(&version) || !reader.String(&token) || !reader.AtEnd()) {
      return "malformed handshake body of " + std::to_string(body.size()) + " bytes";
    }
    if (magic != wire::kMagic) return "bad handshake magic; not a dpl store client";
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
      WriteFrame(socket, Reply(Op::kError, refusal));
      return "refused the client: " + refusal;
    }
    WriteFrame(socket, Reply(Op::kOk));
    return "";
  }

  // Returns "" and fills `reply`, or why the request is malformed.
  std::string Handle(Op op, const std::vector<uint8_t>& body, std::vector<uint8_t>* reply) {
    wire::Reader reader(body);
    std::string key;
    const std::string malformed = "malformed body for op " + HexByte(static_cast<uint8_t>(op));
    switch (op) {
      case Op::kSet: {
        std::vector<uint8_t> value;
        if (!reader.String(&key) || !reader.Bytes(&value) || !reader.AtEnd()) return malformed;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          data_[key] = std::move(value);
        }
        changed_.notify_all();
        *reply = Reply(Op::kOk);
        return "";
      }
      case Op::kGet: {
        int64_t timeout_ms = 0;
        if (!reader.String(&key) || !reader.I64(&timeout_ms) || !reader.AtEnd()) return malformed;
        std::unique_lock<std::mutex> lock(mutex_);
        if (!WaitFor(lock, {key}, timeout_ms)) {
          *reply = Reply(Op::kTimeout, key);
          return "";
        }
        wire::Writer writer;
        const auto& value = data_[key];
        writer.Bytes(value.data(), value.size());
        *reply = writer.Frame(Op::kOk);
        return "";
      }
      case Op::kWait: {
        uint32_t count = 0;
        if (!reader.U32(&count)) return malformed;
        std::vector<std::string> keys;
        for (uint32_t i = 0; i < count; ++i) {
          if (!reader.String(&key)) return malformed;
          keys.push_back(key);
        }
        int64_t timeout_ms = 0;
        if (!reader.I64(&timeout_ms) || !reader.AtEnd()) return malformed;
        std::unique_lock<std::mutex> lock(mutex_);
        if (!WaitFor(lock, keys, timeout_ms)) {
          std::string missing;
          for (const auto& k : keys) {
            if (data_.count(k) == 0) missing += (missing.empty() ? "'" : ", '") + k + "'";
          }
          *reply = Reply(Op::kTimeout, missing);
          return "";
        }
        *reply = Reply(Op::kOk);
        return "";
      }
      case Op::kAdd: {
        int64_t delta = 0;
        if (!reader.String(&key) || !reader.I64(&delta) || !reader.AtEnd()) return malformed;
        int64_t result = 0;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          auto& value = data_[key];
          const std::string text(value.begin(), value.end());
          char* end = nullptr;
          const long long current = text.empty() ? 0 : std::strtoll(text.c_str(), &end, 10);
          if (!text.empty() && (end == nullptr || *end != '\0')) {
            *reply = Reply(Op::kError, "key '" + key + "' holds a value that is not a counter");
            return "";
          }
          result = static_cast<int64_t>(current) + delta;
          const std::string updated = std::to_string(result);
          value.assign(updated.begin(), updated.end());
        }
        changed_.notify_all();
        wire::Writer writer;
        writer.I64(result);
        *reply = writer.Frame(Op::kOk);
        return "";
      }
      case Op::kDelete: {
        if (!reader.String(&key) || !reader.AtEnd()) return malformed;
        std::lock_guard<std::mutex> lock(mutex_);
        data_.erase(key);
        *reply = Reply(Op::kOk);
        return "";
      }
      default:
        return "unknown op " + HexByte(static_cast<uint8_t>(op));
    }
  }

  // With `lock` held: waits until every key exists (true) or the timeout passes (false).
  bool WaitFor(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
               int64_t timeout_ms) {
    auto all_present = [&] {
      return std::all_of(keys.begin(), keys.end(),
                         [&](const std::string& k) { return data_.count(k) != 0; });
    };
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
    while (!all_present()) {
      if (stopping_) return false;
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) return all_present();
    }
    return true;
  }

  StoreServerOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::thread accept_thread_;

  std::mutex connections_mutex_;
  std::list<Connection> connections_;  // guarded by connections_mutex_

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;                             // guarded by mutex_
  std::map<std::string, std::vector<uint8_t>> data_;  // guarded by mutex_
};

// ---------------------------------------------------------------------------------------------
// Client.

class StoreClientImpl final : public StoreClient {
 public:
  explicit StoreClientImpl(StoreClientOptions options)
      : options_(std::move(options)),
        where_(options_.host + ":" + std::to_string(options_.port)),
        socket_(io_) {}

  Status Connect() {
    auto backoff = std::chrono::milliseconds(20);
    const auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
    std::string last_error;
    for (;;) {
      boost::system::error_code error;
      tcp::resolver resolver(io_);
      const auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port), error);
      if (!error) {
        socket_ = tcp::socket(io_);
        asio::connect(socket_, endpoints, error);
      }
      if (!error) {
        socket_.set_option(tcp::no_delay(true), error);
        return Handshake();
      }
      last_error = error.message();
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
    return Status::Timeout("could not reach the rendezvous store at " + where_ + " within " +
                           Seconds(options_.connect_timeout) + " (last error: " + last_error +
                           "); check --master-addr and --master-port and that the launcher of "
                           "--machine-id 0 is running");
  }

  Status Set(const std::string& key, const std::vector<uint8_t>& value) override {
    wire::Writer writer;
    writer.String(key);
    writer.Bytes(value.data(), value.size());
    std::vector<uint8_t> reply;
    return Call(writer.Frame(Op::kSet), "set '" + key + "'", &reply);
  }

  Result<std::vector<uint8_t>> Get(const std::string& key,
                                   std::chrono::milliseconds timeout) override {
    wire::Writer writer;
    writer.String(key);
    writer.I64(timeout.count());
    std::vector<uint8_t> reply;
    Status status = Call(writer.Frame(Op::kGet), "get '" + key + "'", &reply, timeout);
    if (!status.ok()) return status;
    std::vector<uint8_t> value;
    wire::Reader reader(reply);
    if (!reader.Bytes(&value)) return Malformed("get");
    return value;
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    wire::Writer writer;
    writer.U32(static_cast<uint32_t>(keys.size()));
    for (const auto& key : keys) writer.String(key);
    writer.I64(timeout.count());
    std::vector<uint8_t> reply;
    return Call(writer.Frame(Op::kWait), "wait", &reply, timeout);
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    wire::Writer writer;
    writer.String(key);
    writer.I64(delta);
    std::vector<uint8_t> reply;
    Status status = Call(writer.Frame(Op::kAdd), "add '" + key + "'", &reply);
    if (!status.ok()) return status;
    int64_t result = 0;
    wire::Reader reader(reply);
    if (!reader.I64(&result)) return Malformed("add");
    return result;
  }

  Status Delete(const std::string& key) override {
    wire::Writer writer;
    writer.String(key);
    std::vector<uint8_t> reply;
    return Call(writer.Frame(Op::kDelete), "delete '" + key + "'", &reply);
  }

 private:
  Status Malformed(const std::string& what) {
    return Status::Error("the rendezvous store at " + where_ + " sent a malformed reply to " +
                         what);
  }

  Status Handshake() {
    wire::Writer writer;
    writer.U32(wire::kMagic);
    writer.U32(wire::kProtocolVersion);
    writer.String(options_.job_token);
    std::vector<uint8_t> reply;
    return Call(writer.Frame(Op::kHello), "handshake", &reply)
        .WithContext("joining the rendezvous store at " + where_);
  }

  // One round trip. A kTimeout reply becomes a Status with code DPL_ERR_TIMEOUT, a lost connection
  // DPL_ERR_COMMUNICATION.
  Status Call(const std::vector<uint8_t>& frame, const std::string& what,
              std::vector<uint8_t>* reply, std::chrono::milliseconds timeout = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) {
      return Status::Communication(
          "the connection to the rendezvous store at " + where_ +
          " was lost earlier; the launcher of --machine-id 0 probably exited");
    }
    uint8_t op = 0;
    std::string reason;
    if (!WriteFrame(socket_, frame) || !ReadFrame(socket_, &op, reply, &reason, AnyOp)) {
      broken_ = true;
      return Status::Communication(
          "lost the connection to the rendezvous store at " + where_ + " during " + what +
          (reason.empty() ? "" : ": " + reason) +
          "; the launcher of --machine-id 0 probably exited or refused us");
    }
    if (op == static_cast<uint8_t>(Op::kOk)) return Status::Ok();
    std::string message;
    wire::Reader reader(*reply);
    reader.String(&message);
    if (op == static_cast<uint8_t>(Op::kTimeout)) {
      return Status::Timeout(
          "timed out after " + Seconds(timeout) + " waiting for store key(s) " +
          (!message.empty() && message.front() == '\'' ? message : "'" + message + "'"));
    }
    if (op == static_cast<uint8_t>(Op::kError)) {
      return Status::Error(what + " refused by the rendezvous store at " + where_ + ": " + message);
    }
    broken_ = true;
    return Malformed(what);
  }

  StoreClientOptions options_;
  std::string where_;
  asio::io_context io_;
  std::mutex mutex_;
  tcp::socket socket_;   // guarded by mutex_
  bool broken_ = false;  // guarded by mutex_
};

}  // namespace

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const StoreServerOptions& options) {
  auto server = std::make_unique<StoreServerImpl>(options);
  Status status = server->Bind();
  if (!status.ok()) return status;
  return std::unique_ptr<StoreServer>(std::move(server));
}

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const StoreClientOptions& options) {
  auto client = std::make_unique<StoreClientImpl>(options);
  Status status = client->Connect();
  if (!status.ok()) return status;
  return std::unique_ptr<StoreClient>(std::move(client));
}

// ---------------------------------------------------------------------------------------------
// The C view for plugins: every entry point catches everything and keeps its message per thread.

struct PluginStoreViewAccess {
  static thread_local std::string last_error;

  static PluginStoreView& Self(void* context) { return *static_cast<PluginStoreView*>(context); }

  static dpl_status Fail(dpl_status status, std::string message) {
    last_error = std::move(message);
    return status;
  }
  static dpl_status FromStatus(const Status& status) {
    if (status.ok()) return DPL_OK;
    // A store failure that is not a timeout is a lost or refused connection.
    return Fail(status.IsTimeout() ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION, status.message());
  }
  template <typename Body>
  static dpl_status Guard(Body body) {
    try {
      return body();
    } catch (const std::exception& e) {
      return Fail(DPL_ERR_INTERNAL, std::string("store: unexpected error: ") + e.what());
    } catch (...) {
      return Fail(DPL_ERR_INTERNAL, "store: unexpected error");
    }
  }
  static std::chrono::milliseconds Timeout(int64_t timeout_ms) {
    return std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
  }

  static dpl_status SetFn(void* context, const char* key, const void* value, uint64_t size) {
    return Guard([&] {
      if (key == nullptr || (value == nullptr && size > 0)) {
        return Fail(DPL_ERR_INVALID_ARGUMENT,
                    "store set: key is NULL or value is NULL with size > 0");
      }
      const auto* bytes = static_cast<const uint8_t*>(value);
      std::vector<uint8_t> data(bytes, bytes + size);
      auto& self = Self(context);
      return FromStatus(self.client_.Set(self.key_prefix_ + key, data));
    });
  }
  static dpl_status GetFn(void* context, const char* key, void* buffer, uint64_t capacity,
                          uint64_t* value_size, int64_t timeout_ms) {
    return Guard([&] {
      if (key == nullptr || value_size == nullptr || (buffer == nullptr && capacity > 0)) {
        return Fail(DPL_ERR_INVALID_ARGUMENT, "store get: key or value_size is NULL");
      }
      auto& self = Self(context);
      auto value = self.client_.Get(self.key_prefix_ + key, Timeout(timeout_ms));
      if (!value.ok()) return FromStatus(value.status());
      *value_size = value->size();
      if (value->size() > capacity) {
        return Fail(DPL_ERR_BUFFER_TOO_SMALL, "store get: value of key '" + std::string(key) +
                                                  "' has " + std::to_string(value->size()) +
                                                  " bytes, the buffer " + std::to_string(capacity));
      }
      if (!value->empty()) std::memcpy(buffer, value->data(), value->size());
      return DPL_OK;
    });
  }
  static dpl_status WaitFn(void* context, const char* const* keys, uint32_t key_count,
                           int64_t timeout_ms) {
    return Guard([&] {
      if (keys == nullptr && key_count > 0) {
        return Fail(DPL_ERR_INVALID_ARGUMENT, "store wait: keys is NULL");
      }
      auto& self = Self(context);
      std::vector<std::string> prefixed;
      for (uint32_t i = 0; i < key_count; ++i) {
        if (keys[i] == nullptr) return Fail(DPL_ERR_INVALID_ARGUMENT, "store wait: a key is NULL");
        prefixed.push_back(self.key_prefix_ + keys[i]);
      }
      return FromStatus(self.client_.Wait(prefixed, Timeout(timeout_ms)));
    });
  }
  static dpl_status AddFn(void* context, const char* key, int64_t delta, int64_t* result) {
    return Guard([&] {
      if (key == nullptr || result == nullptr) {
        return Fail(DPL_ERR_INVALID_ARGUMENT, "store add: key or result is NULL");
      }
      auto& self = Self(context);
      auto value = self.client_.Add(self.key_prefix_ + key, delta);
      if (!value.ok()) return FromStatus(value.status());
      *result = *value;
      return DPL_OK;
    });
  }
  static const char* LastErrorFn(void* /*context*/) { return last_error.c_str(); }
};

thread_local std::string PluginStoreViewAccess::last_error;

PluginStoreView::PluginStoreView(StoreClient& client, std::string key_prefix)
    : client_(client), key_prefix_(std::move(key_prefix)) {
  view_.struct_size = sizeof(dpl_store_v1);
  view_.version = DPL_STORE_VERSION;
  view_.context = this;
  view_.set = &PluginStoreViewAccess::SetFn;
  view_.get = &PluginStoreViewAccess::GetFn;
  view_.wait = &PluginStoreViewAccess::WaitFn;
  view_.add = &PluginStoreViewAccess::AddFn;
  view_.last_error = &PluginStoreViewAccess::LastErrorFn;
}

}  // namespace dpl::rendezvous
