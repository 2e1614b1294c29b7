// CRC-32C (Castagnoli): the checksum of TFRecord framing, which TensorBoard's events files use.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpl::observability {

// CRC-32C of `size` bytes at `data` (reflected polynomial 0x82F63B78, initial value and final
// xor 0xFFFFFFFF): Crc32c("123456789") == 0xE3069283. `data` may be null when `size` is 0.
uint32_t Crc32c(const void* data, size_t size);

// The CRC of the bytes of an earlier call followed by these: Crc32cExtend(Crc32c(a), b) is the
// CRC of a then b. Crc32cExtend(0, ...) is Crc32c(...).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

// TFRecord stores CRCs masked, so that the CRC of data that itself holds CRCs stays well mixed:
// ((crc >> 15) | (crc << 17)) + 0xa282ead8, modulo 2^32.
uint32_t MaskCrc32c(uint32_t crc);

}  // namespace dpl::observability
