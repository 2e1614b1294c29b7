// The store's wire protocol (after c10d's TCPStore, with a handshake and hard limits).
//
// Every message is a frame: one op byte, a little-endian uint32 body length, then the body.
// A client's first frame is kHello {u32 magic, u32 version, string job_token}; the server answers
// kOk or kError and then closes. Requests: kSet {key, bytes}, kGet {key, i64 timeout_ms},
// kWait {u32 count, key..., i64 timeout_ms}, kAdd {key, i64 delta}, kDelete {key}. Replies:
// kOk {op-specific}, kTimeout {message}, kError {message}. Strings and byte strings are a uint32
// length followed by that many bytes. A body above kMaxBodyBytes (a handshake above 4 KiB), an
// unknown op, a malformed body, or a handshake or frame that does not complete within its deadline
// (StoreServerOptions) closes that connection (the server logs why, rate-limited) and the server
// keeps serving the others. Requests and replies alternate: a client sends its next request once
// it has read the reply to the last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dpl::rendezvous::wire {

inline constexpr uint32_t kMagic = 0x5344504Cu;  // "LPDS" on the wire: dpl store
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kMaxBodyBytes = 64u * 1024u * 1024u;
inline constexpr size_t kFrameHeaderBytes = 5;

enum class Op : uint8_t {
  kHello = 0x01,
  kSet = 0x02,
  kGet = 0x03,
  kWait = 0x04,
  kAdd = 0x05,
  kDelete = 0x06,
  // Replies.
  kOk = 0x80,
  kTimeout = 0x81,
  kError = 0x82,
};

inline bool IsRequestOp(uint8_t op) {
  return op >= static_cast<uint8_t>(Op::kSet) && op <= static_cast<uint8_t>(Op::kDelete);
}

// Builds a body.
class Writer {
 public:
  void U32(uint32_t value) { Raw(&value, sizeof value); }
  void I64(int64_t value) { Raw(&value, sizeof value); }
  void Bytes(const void* data, size_t size) {
    U32(static_cast<uint32_t>(size));
    Raw(data, size);
  }
  void String(const std::string& text) { Bytes(text.data(), text.size()); }
  const std::vector<uint8_t>& body() const { return body_; }

  // The frame for `op` with this body.
  std::vector<uint8_t> Frame(Op op) const {
    std::vector<uint8_t> frame(kFrameHeaderBytes + body_.size());
    frame[0] = static_cast<uint8_t>(op);
    const uint32_t size = static_cast<uint32_t>(body_.size());
    std::memcpy(&frame[1], &size, sizeof size);
    if (!body_.empty()) std::memcpy(&frame[kFrameHeaderBytes], body_.data(), body_.size());
    return frame;
  }

 private:
  void Raw(const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    body_.insert(body_.end(), bytes, bytes + size);
  }
  std::vector<uint8_t> body_;
};

// Reads a body; every getter returns false (and reads nothing) when the body is too short.
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& body) : body_(body) {}
  bool U32(uint32_t* value) { return Raw(value, sizeof *value); }
  bool I64(int64_t* value) { return Raw(value, sizeof *value); }
  bool Bytes(std::vector<uint8_t>* out) {
    uint32_t size = 0;
    if (!U32(&size) || body_.size() - offset_ < size) return false;
    out->assign(body_.begin() + static_cast<std::ptrdiff_t>(offset_),
                body_.begin() + static_cast<std::ptrdiff_t>(offset_ + size));
    offset_ += size;
    return true;
  }
  bool String(std::string* out) {
    std::vector<uint8_t> bytes;
    if (!Bytes(&bytes)) return false;
    out->assign(bytes.begin(), bytes.end());
    return true;
  }
  bool AtEnd() const { return offset_ == body_.size(); }

 private:
  bool Raw(void* out, size_t size) {
    if (body_.size() - offset_ < size) return false;
    std::memcpy(out, body_.data() + offset_, size);
    offset_ += size;
    return true;
  }
  const std::vector<uint8_t>& body_;
  size_t offset_ = 0;
};

}  // namespace dpl::rendezvous::wire
