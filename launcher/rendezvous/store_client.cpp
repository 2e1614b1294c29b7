// The store client: blocking calls on one connection, each bounded by a deadline (Note [Client
// deadlines]).
//
// Note [Client deadlines]
// A client must never wait on the server for ever: machine 0 may be stopped, overloaded, or cut
// off by a partition that drops packets without a FIN or RST, and a launcher blocked in a store
// call cannot stop its workers. So every call runs its I/O as asynchronous operations on the
// client's own io_context for at most its deadline, and closes the socket when it passes:
//  - connecting and the handshake together within connect_timeout (a refused connection, or one
//    the server closed during the handshake because it had too many pending, is retried with
//    backoff until then);
//  - Set, Add and Delete within call_timeout; Get and Wait within their own timeout plus
//    call_timeout.
// A call past its deadline fails with DPL_ERR_TIMEOUT naming host:port and leaves the client
// broken: the reply may still come, and the stream would no longer say which call it answers.
// TCP keepalive (keepalive_timeout) ends a connection to a vanished machine even inside a long Get.
#include <algorithm>
#include <boost/asio.hpp>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/frame_buffer.hpp"
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

constexpr std::chrono::milliseconds kFirstConnectBackoff{20};
constexpr std::chrono::milliseconds kMaxConnectBackoff{1000};
// While it cannot reach the store, a launcher says so after this long, and again as long again
// later: a wrong --master-addr otherwise waits out --rendezvous-timeout (5 minutes) in silence.
constexpr std::chrono::seconds kConnectReportInterval{15};

enum class Outcome { kDone, kFailed, kTimedOut };

// Why an exchange failed.
struct Failure {
  std::string reason;             // "" when the server closed the connection
  bool peer_unreachable = false;  // keepalive or routing says its machine or the network is gone
  void Set(const error_code& error) {
    reason = error == asio::error::eof ? "" : error.message();
    peer_unreachable = error == asio::error::timed_out || error == asio::error::host_unreachable ||
                       error == asio::error::network_unreachable ||
                       error == asio::error::network_down;
  }
};

class StoreClientImpl final : public StoreClient {
 public:
  explicit StoreClientImpl(StoreClientOptions options)
      : options_(std::move(options)),
        where_(options_.host + ":" + std::to_string(options_.port)),
        socket_(io_) {}

  Status Connect();

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

  // Connects to one of `endpoints` and sends the handshake, both before `deadline`. Returns Ok
  // when joined, nullopt when worth retrying (`*last_error` says why), else the failure.
  std::optional<Status> TryJoin(const tcp::resolver::results_type& endpoints,
                                Clock::time_point deadline, std::string* last_error);
  Status Call(const std::vector<uint8_t>& frame, const std::string& what,
              std::vector<uint8_t>* reply, std::chrono::milliseconds wait = {});
  Outcome Exchange(const std::vector<uint8_t>& frame, Clock::time_point deadline, uint8_t* op,
                   std::vector<uint8_t>* reply, Failure* failure);
  bool RunUntil(Clock::time_point deadline, const std::function<bool()>& finished);
  void Abort();
  Status Break(Status cause) {
    broken_ = true;
    broken_reason_ = cause.message();
    return cause;
  }

  StoreClientOptions options_;
  std::string where_;
  asio::io_context io_;
  std::mutex mutex_;
  tcp::socket socket_;         // guarded by mutex_
  bool broken_ = false;        // guarded by mutex_
  std::string broken_reason_;  // guarded by mutex_
};

Status StoreClientImpl::Connect() {
  auto backoff = kFirstConnectBackoff;
  const auto start = Clock::now();
  const auto deadline = start + options_.connect_timeout;
  auto next_report = start + kConnectReportInterval;
  std::string last_error;
  for (;;) {
    error_code error;
    tcp::resolver resolver(io_);
    const auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port), error);
    if (error) {
      last_error = error.message();
    } else {
      std::optional<Status> joined = TryJoin(endpoints, deadline, &last_error);
      if (joined) return *joined;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    if (now >= next_report) {
      log::Info("still trying to reach the rendezvous store at " + where_ +
                " (last error: " + last_error + "), " +
                SecondsText(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now)) +
                " of --rendezvous-timeout left; check --master-addr and --master-port");
      next_report = now + kConnectReportInterval;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, kMaxConnectBackoff);
  }
  return Status::Timeout("could not reach the rendezvous store at " + where_ + " within " +
                         SecondsText(options_.connect_timeout) + " (last error: " + last_error +
                         "); check --master-addr and --master-port and that the launcher of "
                         "--machine-id 0 is running");
}

std::optional<Status> StoreClientImpl::TryJoin(const tcp::resolver::results_type& endpoints,
                                               Clock::time_point deadline,
                                               std::string* last_error) {
  bool connected = false;
  error_code error;
  asio::async_connect(socket_, endpoints, [&](const error_code& result, const tcp::endpoint&) {
    error = result;
    connected = true;
  });
  if (!RunUntil(deadline, [&] { return connected; })) {
    // A last attempt cut short by the deadline says less than the failures before it.
    if (last_error->empty()) *last_error = "connecting timed out";
    return std::nullopt;
  }
  if (error) {
    *last_error = error.message();
    return std::nullopt;
  }
  PrepareStoreConnection(socket_.native_handle(), options_.keepalive_timeout);

  wire::Writer hello;
  hello.U32(wire::kMagic);
  hello.U32(wire::kProtocolVersion);
  hello.String(options_.job_token);
  uint8_t op = 0;
  std::vector<uint8_t> reply;
  Failure failure;
  switch (Exchange(hello.Frame(Op::kHello), deadline, &op, &reply, &failure)) {
    case Outcome::kTimedOut:
      return Status::Timeout("the rendezvous store at " + where_ +
                             " accepted the connection but did not answer the handshake within " +
                             SecondsText(options_.connect_timeout) +
                             "; check that --master-port is the store's port and that the "
                             "launcher of --machine-id 0 is not stopped");
    case Outcome::kFailed:
      // Refused for now (too many connections in their handshake) or the server is restarting.
      *last_error = "the connection closed during the handshake" +
                    (failure.reason.empty() ? std::string() : ": " + failure.reason);
      return std::nullopt;
    case Outcome::kDone:
      break;
  }
  if (op == static_cast<uint8_t>(Op::kOk)) return Status::Ok();
  std::string message;
  wire::Reader reader(reply);
  if (op != static_cast<uint8_t>(Op::kError) || !reader.String(&message)) {
    return Malformed("the handshake");
  }
  // The store answered and refused what this client brought (its job token, its protocol):
  // an argument to fix, told apart by its code from a store that cannot be reached.
  return Status::InvalidArgument("joining the rendezvous store at " + where_ +
                                 ": handshake refused by the rendezvous store at " + where_ + ": " +
                                 message);
}

// One round trip. A kTimeout reply becomes a Status with code DPL_ERR_TIMEOUT, a lost connection
// DPL_ERR_COMMUNICATION, a server that does not answer in time DPL_ERR_TIMEOUT.
Status StoreClientImpl::Call(const std::vector<uint8_t>& frame, const std::string& what,
                             std::vector<uint8_t>* reply, std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) {
    return Status::Communication("the connection to the rendezvous store at " + where_ +
                                 " is unusable after an earlier failure: " + broken_reason_);
  }
  const auto limit =
      std::clamp(wait, std::chrono::milliseconds(0), kMaxStoreWait) + options_.call_timeout;
  uint8_t op = 0;
  Failure failure;
  switch (Exchange(frame, Clock::now() + limit, &op, reply, &failure)) {
    case Outcome::kTimedOut:
      return Break(Status::Timeout(
          "the rendezvous store at " + where_ + " is unresponsive: no reply to " + what +
          " within " + SecondsText(limit) +
          "; the launcher of --machine-id 0 is stopped or overloaded, or the network to it is "
          "down"));
    case Outcome::kFailed:
      return Break(Status::Communication(
          "lost the connection to the rendezvous store at " + where_ + " during " + what +
          (failure.reason.empty() ? "" : ": " + failure.reason) +
          (failure.peer_unreachable ? "; its machine or the network to it is down"
                                    : "; the launcher of --machine-id 0 probably exited or "
                                      "refused us")));
    case Outcome::kDone:
      break;
  }
  if (op == static_cast<uint8_t>(Op::kOk)) return Status::Ok();
  std::string message;
  wire::Reader reader(*reply);
  reader.String(&message);
  if (op == static_cast<uint8_t>(Op::kTimeout)) {
    return Status::Timeout(
        "timed out after " + SecondsText(wait) + " waiting for store key(s) " +
        (!message.empty() && message.front() == '\'' ? message : "'" + message + "'"));
  }
  if (op == static_cast<uint8_t>(Op::kError)) {
    return Status::Error(what + " refused by the rendezvous store at " + where_ + ": " + message);
  }
  return Break(Malformed(what));
}

// Sends `frame` and reads one reply frame, both before `deadline`; the read runs alongside the
// write, so a server that answers before taking the whole request is heard. `*failure` says why
// a kFailed exchange failed ("" when the server closed the connection).
Outcome StoreClientImpl::Exchange(const std::vector<uint8_t>& frame, Clock::time_point deadline,
                                  uint8_t* op, std::vector<uint8_t>* reply, Failure* failure) {
  FrameBuffer incoming;
  int outstanding = 2;  // the write and the read
  bool failed = false;
  std::function<void()> read_more = [&] {
    const FrameBuffer::Space space = incoming.NextSpace();
    socket_.async_read_some(asio::buffer(space.data, space.size), [&](const error_code& error,
                                                                      size_t count) {
      if (error) {
        if (!failed) failure->Set(error);
        failed = true;
      } else {
        incoming.Commit(count);
        if (incoming.header_complete() && incoming.body_size() > wire::kMaxBodyBytes) {
          failed = true;
          failure->reason = "a reply announced a body of " + std::to_string(incoming.body_size()) +
                            " bytes, above the limit of " + std::to_string(wire::kMaxBodyBytes);
        } else if (!incoming.complete()) {
          read_more();
          return;
        }
      }
      --outstanding;
    });
  };
  asio::async_write(socket_, asio::buffer(frame), [&](const error_code& error, size_t) {
    if (error && !failed) {
      failed = true;
      failure->Set(error);
    }
    --outstanding;
  });
  read_more();
  if (!RunUntil(deadline, [&] { return outstanding == 0 || failed; })) return Outcome::kTimedOut;
  if (failed) {
    Abort();
    return Outcome::kFailed;
  }
  *op = incoming.op();
  *reply = incoming.TakeBody();
  return Outcome::kDone;
}

// Runs the started operations until `finished` or `deadline`; at the deadline aborts them (closing
// the socket) and returns false.
bool StoreClientImpl::RunUntil(Clock::time_point deadline, const std::function<bool()>& finished) {
  io_.restart();
  while (!finished()) {
    if (io_.run_one_until(deadline) == 0 && !finished()) {
      Abort();
      return false;
    }
  }
  return true;
}

// Closes the socket and runs the handlers of the operations that aborts, so none is left
// referring to the caller's variables.
void StoreClientImpl::Abort() {
  error_code ignored;
  socket_.close(ignored);
  io_.restart();
  io_.run();
}

}  // namespace

Result<std::unique_ptr<StoreClient>> ConnectBuiltinStore(const StoreClientOptions& options) {
  auto client = std::make_unique<StoreClientImpl>(options);
  Status status = client->Connect();
  if (!status.ok()) return status;
  return std::unique_ptr<StoreClient>(std::move(client));
}

}  // namespace dpl::rendezvous
