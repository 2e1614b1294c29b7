#include "observability/crc32c.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace dpl::observability {
namespace {

TEST(Crc32cTest, CheckValue) {
  const char* text = "123456789";
  EXPECT_EQ(Crc32c(text, std::strlen(text)), 0xE3069283u);
}

TEST(Crc32cTest, EmptyInputIsZero) {
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

// RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> data(32, 0x00);
  EXPECT_EQ(Crc32c(data.data(), data.size()), 0x8A9136AAu);
  std::fill(data.begin(), data.end(), 0xFF);
  EXPECT_EQ(Crc32c(data.data(), data.size()), 0x62A8AB43u);
  std::iota(data.begin(), data.end(), uint8_t(0));
  EXPECT_EQ(Crc32c(data.data(), data.size()), 0x46DD794Eu);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(31 - i);
  EXPECT_EQ(Crc32c(data.data(), data.size()), 0x113FDB5Cu);
  const uint8_t read_command_pdu[48] = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
                                        0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
                                        0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(Crc32c(read_command_pdu, sizeof read_command_pdu), 0xD9963A56u);
}

TEST(Crc32cTest, ExtendEqualsOneCall) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 3);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {size_t(0), size_t(1), size_t(499), size_t(1000)}) {
    const uint32_t head = Crc32c(data.data(), split);
    EXPECT_EQ(Crc32cExtend(head, data.data() + split, data.size() - split), whole) << split;
  }
}

TEST(Crc32cTest, Mask) {
  EXPECT_EQ(MaskCrc32c(0), 0xA282EAD8u);
  EXPECT_EQ(MaskCrc32c(0xE3069283u), 0xC78AB0E5u);
  // The header of every TensorFlow events file: the length 24 of its file_version record
  // (little-endian) and that length's masked CRC-32C, bytes a3 7f 4b 22.
  const uint8_t length_24[8] = {0x18, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(MaskCrc32c(Crc32c(length_24, sizeof length_24)), 0x224B7FA3u);
}

}  // namespace
}  // namespace dpl::observability
