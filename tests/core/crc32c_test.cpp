// CRC-32C against published vectors (RFC 3720 appendix B.4 and the classic "123456789" check).
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace brrr {
namespace {

std::vector<unsigned char> bytes_of(int n, int start, int step) {
  std::vector<unsigned char> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(start + step * i);
  return v;
}

TEST(Crc32cTest, MatchesCheckValue) {
  EXPECT_EQ(crc32c(std::string_view("123456789")), 0xE3069283u);
  EXPECT_EQ(detail::crc32c_portable("123456789", 9, 0), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string_view("")), 0u);
}

TEST(Crc32cTest, MatchesRfc3720Vectors) {
  const std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  const auto ascending = bytes_of(32, 0, 1);
  const auto descending = bytes_of(32, 31, -1);
  for (auto fn : {+[](const void*d, size_t n) { return crc32c(d, n); },
                  +[](const void*d, size_t n) { return detail::crc32c_portable(d, n, 0); }}) {
    EXPECT_EQ(fn(zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(fn(ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(fn(ascending.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(fn(descending.data(), 32), 0x113FDB5Cu);
  }
}

TEST(Crc32cTest, HardwareAndTableAgreeOnEveryLengthAndAlignment) {
  std::mt19937 gen(7);
  std::vector<unsigned char> buf(300);
  for (auto& b : buf) b = static_cast<unsigned char>(gen());
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t len = 0; len + offset <= buf.size(); len += 7) {
      ASSERT_EQ(crc32c(buf.data() + offset, len),
                detail::crc32c_portable(buf.data() + offset, len, 0))
          << "offset " << offset << " length " << len
          << " hardware=" << detail::crc32c_has_hardware();
    }
  }
}

TEST(Crc32cTest, ContinuesAcrossPieces) {
  const std::string a = "The quick brown fox ", b = "jumps over the lazy dog";
  EXPECT_EQ(crc32c(b.data(), b.size(), crc32c(a)), crc32c(a + b));
  EXPECT_EQ(detail::crc32c_portable(b.data(), b.size(), crc32c(a)), crc32c(a + b));
}

TEST(Crc32cTest, MaskRotatesAndOffsets) {
  // (0x12345678 >> 15) | (0x12345678 << 17) = 0xACF02468; + 0xa282ead8 wraps to 0x4F730F40.
  EXPECT_EQ(crc32c_mask(0x12345678u), 0x4F730F40u);
  EXPECT_EQ(crc32c_mask(0u), 0xa282ead8u);
  EXPECT_EQ(crc32c_mask(0x00008000u), 0x00000001u + 0xa282ead8u);
}

}  // namespace
}  // namespace brrr
