#pragma once
// A flat binary file of token ids (uint16 or uint32, native little-endian), memory-mapped
// read-only, served as windows of block_size + 1 tokens (inputs and shifted targets).
//
// Invariant: the mapping is read-only and shared; after fork() workers read the same pages, and
// nothing is copied until a window is converted to int64.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace brrr {

enum class TokenDtype { kUint16, kUint32 };
enum class TokenWindows { kRandom, kSequential };

/// "uint16" / "uint32"; ConfigError naming `data.token_dtype` otherwise.
TokenDtype parse_token_dtype(const std::string& name);
/// "random" / "sequential"; ConfigError naming `data.windows` otherwise.
TokenWindows parse_token_windows(const std::string& name);
/// Bytes per token.
int64_t token_width(TokenDtype dtype);

namespace detail {
struct MappedFile;
}

class TokenFileDataset : public Dataset {
 public:
  /// Maps `path`. DataError naming the file when it cannot be mapped, its size is not a multiple
  /// of the token width, or it holds fewer than block_size + 1 tokens.
  TokenFileDataset(const std::string& path, int64_t block_size, TokenDtype dtype,
                   TokenWindows windows);

  /// random: num_tokens / block_size (one "epoch" of windows); sequential: the non-overlapping
  /// windows floor((num_tokens - 1) / block_size).
  int64_t size() const override;
  /// {"tokens": int64 (block_size + 1,)}: random windows start at rng.randint(0, n - block_size -
  /// 1); sequential window i starts at i * block_size.
  Sample get(int64_t index, Rng& rng) const override;
  std::string describe() const override;
  /// The largest token id in the file (one pass over the mapping, about 0.1 s per GB).
  std::optional<int64_t> max_target_id() const override;

  int64_t num_tokens() const { return num_tokens_; }
  int64_t block_size() const { return block_size_; }
  /// Tokens [start, start + count) as int64.
  at::Tensor slice(int64_t start, int64_t count) const;

 private:
  std::string path_;
  int64_t block_size_;
  TokenDtype dtype_;
  TokenWindows windows_;
  int64_t num_tokens_ = 0;
  std::shared_ptr<const detail::MappedFile> file_;
};

/// Byte-level tokenization: every byte of every input (in order, concatenated) becomes one token
/// 0..255, written to `out` as `dtype`. Unless `allow_invalid`, inputs must be valid UTF-8
/// (RFC 3629: no overlongs, surrogates or code points > U+10FFFF): DataError naming
/// "<file>:byte offset <n>" of the first invalid sequence, and `out` is removed. Returns the count.
int64_t write_byte_tokens(const std::vector<std::string>& inputs, const std::string& out,
                          TokenDtype dtype, bool allow_invalid = false);

}  // namespace brrr
