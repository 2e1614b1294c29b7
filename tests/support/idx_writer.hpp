// Writes small MNIST-format (IDX) files for tests: pixel i of an image file is (i * 7) % 256,
// label i of a label file is i % classes.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace dpl::testing {

inline void PutBigEndian32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(uint8_t(v >> 24));
  out.push_back(uint8_t(v >> 16));
  out.push_back(uint8_t(v >> 8));
  out.push_back(uint8_t(v));
}

inline std::vector<uint8_t> IdxImages(uint32_t count, uint32_t rows, uint32_t columns,
                                      uint32_t magic = 0x00000803) {
  std::vector<uint8_t> out;
  PutBigEndian32(out, magic);
  PutBigEndian32(out, count);
  PutBigEndian32(out, rows);
  PutBigEndian32(out, columns);
  for (uint32_t i = 0; i < count * rows * columns; ++i) out.push_back(uint8_t((i * 7) % 256));
  return out;
}

inline std::vector<uint8_t> IdxLabels(uint32_t count, uint32_t classes = 10,
                                      uint32_t magic = 0x00000801) {
  std::vector<uint8_t> out;
  PutBigEndian32(out, magic);
  PutBigEndian32(out, count);
  for (uint32_t i = 0; i < count; ++i) out.push_back(uint8_t(i % classes));
  return out;
}

inline void WriteRaw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

inline void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  gzwrite(file, bytes.data(), unsigned(bytes.size()));
  gzclose(file);
}

}  // namespace dpl::testing
