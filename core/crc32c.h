#pragma once
// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of TFRecord /
// TensorBoard event files. Uses the SSE4.2 crc32 instruction when the CPU has it, else a table.
// Invariant: both paths return bit-identical values (tested), so files are portable across hosts.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace brrr {

/// CRC-32C of `size` bytes at `data`. `crc` is the result of a previous call to continue a
/// running checksum over concatenated pieces (0 to start): crc32c(b, crc32c(a)) == crc32c(a + b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

/// CRC-32C of the bytes of `data`.
uint32_t crc32c(std::string_view data);

/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. Storing a CRC of data that
/// itself contains CRCs is unreliable, hence the mask.
uint32_t crc32c_mask(uint32_t crc);

namespace detail {
/// The table-driven implementation (the fallback), exposed so tests can compare both paths.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc);
/// True when crc32c() uses the hardware instruction on this CPU.
bool crc32c_has_hardware();
}  // namespace detail

}  // namespace brrr
