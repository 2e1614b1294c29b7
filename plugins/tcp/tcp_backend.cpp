// The tcp backend: ring collectives over non-blocking POSIX sockets.
//
// Note [Ring without deadlock]: every step of a ring collective sends to the next rank while
// receiving from the previous one. With blocking sockets both sides of a pair could block in
// send() once the kernel buffers fill; here both directions are driven by one poll() loop, so a
// step progresses whichever side is ready, and a deadline bounds the whole step.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "dpl/support/backend.hpp"
#include "dpl/support/options.hpp"
#include "dpl/support/reduce.hpp"

namespace {

using dpl::support::ElementType;
using dpl::support::PluginError;
using Clock = std::chrono::steady_clock;

constexpr const char* kBackendName = "tcp";
constexpr uint32_t kHandshakeMagic = 0x44504C54u;  // "TLPD"
// Bytes reduced at a time while a segment is still arriving (keeps the scratch data in cache).
constexpr size_t kReduceChunkBytes = 256 * 1024;
constexpr int kSocketBufferBytes = 4 * 1024 * 1024;
// Note [Sending in step with receiving]: a ring step sends at most kLeadBytes ahead of what it
// has received, and one send() or recv() moves at most kMaxBytesPerCall. Without these a call
// copied whatever the 4 MiB socket buffers allowed, one direction ran megabytes ahead of the
// other, and the bytes in flight outgrew the caches (the effect on 16-64 MiB allreduces is in
// docs/bandwidth.md, "Third run"). It cannot deadlock: were every rank held
// by the lead, each would have received exactly kLeadBytes more than its predecessor around the
// ring, which is impossible; a rank whose receive is complete is no longer held.
constexpr size_t kMaxBytesPerCall = 256 * 1024;
constexpr size_t kLeadBytes = 512 * 1024;

std::string ErrnoText() {
  return std::strerror(errno);
}

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  ~Socket() { Reset(); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

void TuneStreamSocket(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Where the store holds the listening endpoint of `rank`.
std::string EndpointKey(int rank) {
  return "tcp/addr/" + std::to_string(rank);
}

int RemainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 1 << 30)));
}

// One ring step's traffic: `send_bytes` to the next rank, `recv_bytes` from the previous.
struct StepTransfer {
  const char* send_data = nullptr;
  size_t send_bytes = 0;
  char* recv_data = nullptr;
  size_t recv_bytes = 0;
  // Broadcast forwarding: the send side may only send what has been received so far.
  bool send_only_received = false;
};

class TcpBackend {
 public:
  TcpBackend(const dpl_backend_config_v2& config, const std::string& address)
      : config_(config), timeout_(std::chrono::milliseconds(config.timeout_ms)) {
    if (config_.world_size > 1) ConnectRing(address);
  }

  dpl_status Allreduce(DLTensor* tensor, dpl_reduce_op op) {
    dpl::support::CheckContiguous(*tensor, "allreduce tensor");
    dpl::support::CheckHostTensor(*tensor, kBackendName, "allreduce tensor");
    const ElementType type = dpl::support::ElementTypeOf(tensor->dtype);
    if (type == ElementType::kUnknown) {
      return dpl::support::Fail(DPL_ERR_UNSUPPORTED,
                                "allreduce does not support dtype " +
                                    dpl::support::DtypeName(tensor->dtype) +
                                    "; use float16, bfloat16, float32, float64, int8, uint8, "
                                    "int32 or int64");
    }
    if (op < DPL_REDUCE_SUM || op > DPL_REDUCE_MAX) {
      return dpl::support::Fail(
          DPL_ERR_UNSUPPORTED,
          "allreduce does not support op " + std::to_string(op) + "; use sum, avg, min or max");
    }
    const size_t count = static_cast<size_t>(dpl::support::ElementCount(*tensor));
    if (count == 0 || config_.world_size == 1) return DPL_OK;
    RingAllreduce(static_cast<char*>(dpl::support::DataPointer(*tensor)), count,
                  dpl::support::ElementSize(tensor->dtype), type, op);
    if (op == DPL_REDUCE_AVG) {
      dpl::support::DivideInPlace(type, dpl::support::DataPointer(*tensor), count,
                                  config_.world_size);
    }
    return DPL_OK;
  }

  dpl_status Broadcast(DLTensor* tensor, int32_t root) {
    const size_t bytes =
        dpl::support::CheckHostBroadcast(*tensor, root, config_.world_size, kBackendName);
    if (bytes == 0 || config_.world_size == 1) return DPL_OK;
    char* data = static_cast<char*>(dpl::support::DataPointer(*tensor));
    const int next = NextRank();
    const auto deadline = Clock::now() + timeout_;
    StepTransfer transfer;
    if (config_.rank == root) {
      transfer.send_data = data;
      transfer.send_bytes = bytes;
    } else {
      transfer.recv_data = data;
      transfer.recv_bytes = bytes;
      if (next != root) {
        transfer.send_data = data;
        transfer.send_bytes = bytes;
        transfer.send_only_received = true;
      }
    }
    RunStep(transfer, deadline, nullptr);
    return DPL_OK;
  }

  dpl_status Allgather(const DLTensor* input, DLTensor* output) {
    const size_t block =
        dpl::support::CheckHostAllgather(*input, *output, config_.world_size, kBackendName);
    if (block == 0) return DPL_OK;
    RingAllgather(static_cast<const char*>(dpl::support::DataPointer(*input)),
                  static_cast<char*>(dpl::support::DataPointer(*output)), block);
    return DPL_OK;
  }

  dpl_status Barrier() {
    if (config_.world_size == 1) return DPL_OK;
    const char token = 1;
    std::vector<char> tokens(static_cast<size_t>(config_.world_size));
    RingAllgather(&token, tokens.data(), 1);
    return DPL_OK;
  }

 private:
  // Every rank listens, publishes where, connects to the next rank and accepts the previous one;
  // a greeting on each connection proves it joins the right ranks of this job.
  void ConnectRing(const std::string& address) {
    const auto deadline = Clock::now() + timeout_;
    std::string endpoint;
    const Socket listener = ListenOn(address, &endpoint);
    PublishEndpoint(endpoint);
    ConnectNext(LookUpEndpoint(NextRank(), deadline), deadline);
    AcceptPrev(listener, endpoint, deadline);
  }

  // A listener on `address`, port chosen by the kernel; `*endpoint` is "address:port".
  static Socket ListenOn(const std::string& address, std::string* endpoint) {
    Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
    if (listener.fd() < 0) throw PluginError(DPL_ERR_COMMUNICATION, "socket(): " + ErrnoText());
    sockaddr_in bind_address{};
    bind_address.sin_family = AF_INET;
    bind_address.sin_port = 0;
    if (::inet_pton(AF_INET, address.c_str(), &bind_address.sin_addr) != 1) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        "address '" + address + "' is not an IPv4 address; pass address=<ip>");
    }
    if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&bind_address), sizeof(bind_address)) !=
            0 ||
        ::listen(listener.fd(), 4) != 0) {
      throw PluginError(DPL_ERR_COMMUNICATION, "cannot listen on " + address + ": " + ErrnoText() +
                                                   "; pass address=<an ip of this machine>");
    }
    socklen_t length = sizeof(bind_address);
    ::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&bind_address), &length);
    *endpoint = address + ":" + std::to_string(ntohs(bind_address.sin_port));
    return listener;
  }

  void PublishEndpoint(const std::string& endpoint) {
    const std::string my_key = EndpointKey(config_.rank);
    CheckStore(config_.store->set(config_.store->context, my_key.c_str(), endpoint.data(),
                                  endpoint.size()),
               "publish " + my_key);
  }

  std::string LookUpEndpoint(int rank, Clock::time_point deadline) {
    const std::string key = EndpointKey(rank);
    char buffer[128] = {};
    uint64_t value_size = 0;
    CheckStore(config_.store->get(config_.store->context, key.c_str(), buffer, sizeof(buffer) - 1,
                                  &value_size, RemainingMs(deadline)),
               "look up rank " + std::to_string(rank));
    return std::string(buffer, static_cast<size_t>(value_size));
  }

  // Connects to the next rank (retrying while it is not yet listening) and greets it.
  void ConnectNext(const std::string& next_endpoint, Clock::time_point deadline) {
    const int next = NextRank();
    const size_t colon = next_endpoint.rfind(':');
    sockaddr_in peer{};
    peer.sin_family = AF_INET;
    peer.sin_port = htons(static_cast<uint16_t>(std::stoi(next_endpoint.substr(colon + 1))));
    ::inet_pton(AF_INET, next_endpoint.substr(0, colon).c_str(), &peer.sin_addr);
    while (true) {
      Socket candidate(::socket(AF_INET, SOCK_STREAM, 0));
      if (::connect(candidate.fd(), reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) == 0) {
        next_socket_ = std::move(candidate);
        break;
      }
      // The peer listens before it publishes its address, so a refusal there is final; on a
      // loopback address it means the peer runs on another machine and named the wrong one.
      if (errno == ECONNREFUSED && (ntohl(peer.sin_addr.s_addr) >> 24) == 127) {
        // Wrong options, not a lost peer (DPL_ERR_COMMUNICATION), so it reads as the root cause.
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          "rank " + std::to_string(next) + " advertised the loopback address " +
                              next_endpoint +
                              ", which refuses connections here: it runs on another machine; "
                              "give every machine --backend-options address=<its ip>");
      }
      if (Clock::now() >= deadline) {
        throw PluginError(DPL_ERR_TIMEOUT, "cannot connect to rank " + std::to_string(next) +
                                               " at " + next_endpoint + ": " + ErrnoText());
      }
      ::usleep(10000);
    }
    TuneStreamSocket(next_socket_.fd());
    const uint32_t hello[2] = {kHandshakeMagic, static_cast<uint32_t>(config_.rank)};
    StepTransfer greeting;
    greeting.send_data = reinterpret_cast<const char*>(hello);
    greeting.send_bytes = sizeof(hello);
    RunStep(greeting, deadline, nullptr);  // no prev socket yet: send side only
  }

  // Accepts the previous rank on `listener` (at `endpoint`) and checks its greeting.
  void AcceptPrev(const Socket& listener, const std::string& endpoint, Clock::time_point deadline) {
    const int prev = PrevRank();
    pollfd wait_for_peer{listener.fd(), POLLIN, 0};
    const int ready = ::poll(&wait_for_peer, 1, RemainingMs(deadline));
    if (ready <= 0) {
      throw PluginError(DPL_ERR_TIMEOUT, "rank " + std::to_string(prev) +
                                             " did not connect within " +
                                             std::to_string(config_.timeout_ms) + " ms");
    }
    prev_socket_ = Socket(::accept(listener.fd(), nullptr, nullptr));
    if (prev_socket_.fd() < 0) throw PluginError(DPL_ERR_COMMUNICATION, "accept(): " + ErrnoText());
    TuneStreamSocket(prev_socket_.fd());
    uint32_t peer_hello[2] = {};
    StepTransfer receive_greeting;
    receive_greeting.recv_data = reinterpret_cast<char*>(peer_hello);
    receive_greeting.recv_bytes = sizeof(peer_hello);
    RunStep(receive_greeting, deadline, nullptr);
    if (peer_hello[0] != kHandshakeMagic || peer_hello[1] != static_cast<uint32_t>(prev)) {
      throw PluginError(DPL_ERR_COMMUNICATION, "the connection accepted on " + endpoint +
                                                   " is not from rank " + std::to_string(prev) +
                                                   " of this job");
    }
  }

  void CheckStore(dpl_status status, const std::string& what) {
    if (status == DPL_OK) return;
    const char* message = config_.store->last_error(config_.store->context);
    throw PluginError(status == DPL_ERR_TIMEOUT ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION,
                      "store: cannot " + what + ": " + (message ? message : ""));
  }

  // Drives one ring step until both directions are done. `on_received(begin, end)` is called
  // with the byte range of recv_data that arrived since the last call.
  template <typename OnReceived>
  void RunStep(const StepTransfer& transfer, Clock::time_point deadline, OnReceived* on_received) {
    size_t sent = 0;
    size_t received = 0;
    while (sent < transfer.send_bytes || received < transfer.recv_bytes) {
      pollfd fds[2];
      nfds_t count = 0;
      int send_index = -1;
      int recv_index = -1;
      size_t sendable = transfer.send_only_received ? received : transfer.send_bytes;
      if (received < transfer.recv_bytes) sendable = std::min(sendable, received + kLeadBytes);
      if (sent < sendable) {
        send_index = static_cast<int>(count);
        fds[count++] = {next_socket_.fd(), POLLOUT, 0};
      }
      if (received < transfer.recv_bytes) {
        recv_index = static_cast<int>(count);
        fds[count++] = {prev_socket_.fd(), POLLIN, 0};
      }
      const int ready = ::poll(fds, count, RemainingMs(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) throw PluginError(DPL_ERR_COMMUNICATION, "poll(): " + ErrnoText());
      if (ready == 0) {
        throw PluginError(DPL_ERR_TIMEOUT,
                          "a peer did not answer within " + std::to_string(config_.timeout_ms) +
                              " ms (rank " + std::to_string(config_.rank) + " waiting on " +
                              (recv_index >= 0 ? "rank " + std::to_string(PrevRank())
                                               : "rank " + std::to_string(NextRank())) +
                              ")");
      }
      if (recv_index >= 0 && fds[recv_index].revents != 0) {
        const size_t before = received;
        received += ReceiveSome(transfer.recv_data + received, transfer.recv_bytes - received);
        if (received > before && on_received != nullptr) (*on_received)(before, received);
      }
      if (send_index >= 0 && fds[send_index].revents != 0) {
        sent += SendSome(transfer.send_data + sent, sendable - sent);
      }
    }
  }
  void RunStep(const StepTransfer& transfer, Clock::time_point deadline, std::nullptr_t) {
    RunStep<void (*)(size_t, size_t)>(transfer, deadline, nullptr);
  }

  // One recv() of at most `bytes` (and kMaxBytesPerCall) from the previous rank, once poll() said
  // it is readable: the bytes it got, 0 when none were ready.
  size_t ReceiveSome(char* data, size_t bytes) {
    const ssize_t got = ::recv(prev_socket_.fd(), data, std::min(bytes, kMaxBytesPerCall), 0);
    if (got == 0) {
      throw PluginError(DPL_ERR_COMMUNICATION,
                        "rank " + std::to_string(PrevRank()) +
                            " closed the connection mid-collective (did it exit?)");
    }
    if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw PluginError(DPL_ERR_COMMUNICATION,
                        "receive from rank " + std::to_string(PrevRank()) + ": " + ErrnoText());
    }
    return got > 0 ? static_cast<size_t>(got) : 0;
  }

  // One send() of at most `bytes` (and kMaxBytesPerCall) to the next rank, once poll() said it is
  // writable: the bytes it took, 0 when none.
  size_t SendSome(const char* data, size_t bytes) {
    const ssize_t put =
        ::send(next_socket_.fd(), data, std::min(bytes, kMaxBytesPerCall), MSG_NOSIGNAL);
    if (put < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw PluginError(DPL_ERR_COMMUNICATION,
                        "send to rank " + std::to_string(NextRank()) + ": " + ErrnoText());
    }
    return put > 0 ? static_cast<size_t>(put) : 0;
  }

  int NextRank() const { return (config_.rank + 1) % config_.world_size; }
  int PrevRank() const { return (config_.rank + config_.world_size - 1) % config_.world_size; }

  // Segment s of `count` elements split evenly over the ranks: [begin, end).
  std::pair<size_t, size_t> Segment(size_t count, int s) const {
    const size_t world = static_cast<size_t>(config_.world_size);
    const size_t index = static_cast<size_t>(s);
    return {count * index / world, count * (index + 1) / world};
  }

  void RingAllreduce(char* data, size_t count, size_t element_bytes, ElementType type,
                     dpl_reduce_op op) {
    const int world = config_.world_size;
    const int rank = config_.rank;
    const size_t largest = (count + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
    scratch_.resize(largest * element_bytes);
    const auto deadline = Clock::now() + timeout_;
    // Reduce-scatter: after world-1 steps, rank r owns the full sum of segment (r+1) % world.
    for (int step = 0; step < world - 1; ++step) {
      const auto [send_begin, send_end] = Segment(count, (rank - step + world) % world);
      const auto [recv_begin, recv_end] = Segment(count, (rank - step - 1 + 2 * world) % world);
      StepTransfer transfer;
      transfer.send_data = data + send_begin * element_bytes;
      transfer.send_bytes = (send_end - send_begin) * element_bytes;
      transfer.recv_data = scratch_.data();
      transfer.recv_bytes = (recv_end - recv_begin) * element_bytes;
      char* target = data + recv_begin * element_bytes;
      size_t reduced = 0;  // bytes of scratch already folded into target
      auto reduce_arrived = [&](size_t, size_t arrived) {
        // Fold whole chunks as they complete, the tail once everything is in.
        size_t ready = arrived == transfer.recv_bytes
                           ? arrived
                           : (arrived / kReduceChunkBytes) * kReduceChunkBytes;
        ready -= ready % element_bytes;
        if (ready > reduced) {
          dpl::support::ReduceInto(type, op, target + reduced, scratch_.data() + reduced,
                                   (ready - reduced) / element_bytes);
          reduced = ready;
        }
      };
      RunStep(transfer, deadline, &reduce_arrived);
    }
    // Allgather of the reduced segments, received straight into place.
    for (int step = 0; step < world - 1; ++step) {
      const auto [send_begin, send_end] = Segment(count, (rank + 1 - step + world) % world);
      const auto [recv_begin, recv_end] = Segment(count, (rank - step + world) % world);
      StepTransfer transfer;
      transfer.send_data = data + send_begin * element_bytes;
      transfer.send_bytes = (send_end - send_begin) * element_bytes;
      transfer.recv_data = data + recv_begin * element_bytes;
      transfer.recv_bytes = (recv_end - recv_begin) * element_bytes;
      RunStep(transfer, deadline, nullptr);
    }
  }

  void RingAllgather(const char* input, char* output, size_t block) {
    const int world = config_.world_size;
    const int rank = config_.rank;
    std::memcpy(output + static_cast<size_t>(rank) * block, input, block);
    const auto deadline = Clock::now() + timeout_;
    for (int step = 0; step < world - 1; ++step) {
      const size_t send_block = static_cast<size_t>((rank - step + world) % world);
      const size_t recv_block = static_cast<size_t>((rank - step - 1 + 2 * world) % world);
      StepTransfer transfer;
      transfer.send_data = output + send_block * block;
      transfer.send_bytes = block;
      transfer.recv_data = output + recv_block * block;
      transfer.recv_bytes = block;
      RunStep(transfer, deadline, nullptr);
    }
  }

  dpl_backend_config_v2 config_;
  std::chrono::milliseconds timeout_;
  Socket next_socket_;
  Socket prev_socket_;
  std::vector<char> scratch_;
};

TcpBackend* AsTcp(dpl_backend* backend) {
  return reinterpret_cast<TcpBackend*>(backend);
}

dpl_status CheckHandle(dpl_backend* backend) {
  if (backend == nullptr) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, "backend handle is NULL");
  }
  return DPL_OK;
}

// The stream of a collective must be NULL for CPU tensors (dpl/backend_v1.h).
void CheckNoStream(void* stream) {
  if (stream != nullptr) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, "stream must be NULL for CPU tensors");
  }
}

dpl_status TcpCreate(const dpl_backend_config_v2* config, dpl_backend** out) {
  return dpl::support::Guarded(kBackendName, [&] {
    if (out == nullptr) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    dpl::support::CheckBackendConfig(config);
    if (config->device_type != kDLCPU) {
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        "the tcp backend moves CPU tensors only; use --backend nccl for CUDA");
    }
    const dpl::support::KeyValueOptions options(config->options, "--backend-options");
    // By default the address the host found routes to machine 0 (dpl/backend_v2.h).
    const std::string local = config->local_address != nullptr ? config->local_address : "";
    const std::string address = options.GetString("address", local.empty() ? "127.0.0.1" : local);
    options.CheckAllKnown();
    *out = reinterpret_cast<dpl_backend*>(new TcpBackend(*config, address));
    return DPL_OK;
  });
}

void TcpDestroy(dpl_backend* backend) {
  dpl::support::Guarded(kBackendName, [&] {
    delete AsTcp(backend);
    return DPL_OK;
  });
}

dpl_status TcpAllreduce(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op, void* stream) {
  return dpl::support::Guarded(kBackendName, [&] {
    CheckHandle(backend);
    if (tensor == nullptr) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "tensor is NULL");
    CheckNoStream(stream);
    return AsTcp(backend)->Allreduce(tensor, op);
  });
}

dpl_status TcpBroadcast(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream) {
  return dpl::support::Guarded(kBackendName, [&] {
    CheckHandle(backend);
    if (tensor == nullptr) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "tensor is NULL");
    CheckNoStream(stream);
    return AsTcp(backend)->Broadcast(tensor, root);
  });
}

dpl_status TcpAllgather(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                        void* stream) {
  return dpl::support::Guarded(kBackendName, [&] {
    CheckHandle(backend);
    if (input == nullptr || output == nullptr) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, "input or output is NULL");
    }
    CheckNoStream(stream);
    return AsTcp(backend)->Allgather(input, output);
  });
}

dpl_status TcpBarrier(dpl_backend* backend) {
  return dpl::support::Guarded(kBackendName, [&] {
    CheckHandle(backend);
    return AsTcp(backend)->Barrier();
  });
}

// A host backend's collectives are complete when they return (dpl/backend_v2.h).
dpl_status TcpSynchronize(dpl_backend* /*backend*/, void* /*stream*/) {
  return DPL_OK;
}

const char* TcpLastError() {
  return dpl::support::LastError();
}

}  // namespace

extern "C" DPL_PLUGIN_EXPORT const dpl_backend_plugin_v2 dpl_tcp_backend_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v2);
extern "C" const dpl_backend_plugin_v2 dpl_tcp_backend_table = {
    {sizeof(dpl_backend_plugin_v2), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND,
     DPL_BACKEND_ABI_VERSION_2, "tcp", "1.0.0",
     "ring collectives over plain TCP sockets (CPU tensors)"},
    TcpCreate,
    TcpDestroy,
    TcpAllreduce,
    TcpBroadcast,
    TcpAllgather,
    TcpBarrier,
    TcpLastError,
    TcpSynchronize,
};
