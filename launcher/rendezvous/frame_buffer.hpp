// Assembles one wire frame from bytes as they arrive. The body grows with the bytes that actually
// came (at most doubling), never to the size a header merely announces, so a peer that announces
// 64 MiB and sends nothing costs a header, not 64 MiB.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rendezvous/wire_protocol.hpp"

namespace dpl::rendezvous {

class FrameBuffer {
 public:
  struct Space {
    uint8_t* data;
    size_t size;
  };

  // Where the next read should land: the rest of the header, or a part of the body no larger
  // than what arrived so far (kMinBodyChunk at first). Call only while !complete().
  Space NextSpace() {
    if (!header_complete()) {
      return {header_ + header_received_, wire::kFrameHeaderBytes - header_received_};
    }
    const size_t remaining = body_size() - body_received_;
    const size_t chunk = std::min(remaining, std::max(kMinBodyChunk, body_received_));
    if (body_.size() < body_received_ + chunk) body_.resize(body_received_ + chunk);
    return {body_.data() + body_received_, body_.size() - body_received_};
  }

  // `count` bytes were read into NextSpace().
  void Commit(size_t count) {
    if (!header_complete()) {
      header_received_ += count;
    } else {
      body_received_ += count;
    }
  }

  // Bytes of the current frame received so far.
  size_t received() const { return header_received_ + body_received_; }
  bool header_complete() const { return header_received_ == wire::kFrameHeaderBytes; }
  // Valid once header_complete().
  uint8_t op() const { return header_[0]; }
  uint32_t body_size() const {
    uint32_t size = 0;
    std::memcpy(&size, &header_[1], sizeof size);
    return size;
  }
  bool complete() const { return header_complete() && body_received_ == body_size(); }

  // Hands over the complete body and starts the next frame.
  std::vector<uint8_t> TakeBody() {
    std::vector<uint8_t> body = std::move(body_);
    body.resize(body_received_);
    body_ = {};
    header_received_ = 0;
    body_received_ = 0;
    return body;
  }

 private:
  static constexpr size_t kMinBodyChunk = 64 * 1024;
  uint8_t header_[wire::kFrameHeaderBytes] = {};
  size_t header_received_ = 0;
  std::vector<uint8_t> body_;
  size_t body_received_ = 0;
};

}  // namespace dpl::rendezvous
