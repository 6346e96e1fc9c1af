#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define BRRR_CRC32C_X86 1
#endif

namespace brrr {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;
constexpr uint32_t kMaskDelta = 0xa282ead8u;

// Slicing-by-8 tables: kTables[k][b] is the CRC of byte b followed by k zero bytes, so eight input
// bytes are folded with eight independent lookups instead of a serial chain of eight.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = make_tables();

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

#ifdef BRRR_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n,
                                                        uint32_t crc) {
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // x86 is little-endian, which is the order the CRC consumes
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}

bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

namespace detail {

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    const uint64_t v = load_le64(p) ^ c;
    c = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][v >> 56];
  }
  for (; size > 0; --size, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xFFu];
  return ~c;
}

bool crc32c_has_hardware() {
#ifdef BRRR_CRC32C_X86
  return cpu_has_sse42();
#else
  return false;
#endif
}

}  // namespace detail

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#ifdef BRRR_CRC32C_X86
  if (cpu_has_sse42()) return crc32c_sse42(static_cast<const unsigned char*>(data), size, crc);
#endif
  return detail::crc32c_portable(data, size, crc);
}

uint32_t crc32c(std::string_view data) {
  return crc32c(data.data(), data.size(), 0);
}

uint32_t crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

}  // namespace brrr
