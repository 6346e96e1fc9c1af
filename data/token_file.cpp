#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace brrr {
namespace detail {

/// A read-only private mapping of a whole file, unmapped when the last owner goes.
struct MappedFile {
  const uint8_t* data = nullptr;
  size_t size = 0;
  ~MappedFile() {
    if (data != nullptr && size > 0) munmap(const_cast<uint8_t*>(data), size);
  }
};

}  // namespace detail

namespace {

std::shared_ptr<const detail::MappedFile> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError("cannot open token file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError("cannot stat token file '" + path + "': " + std::strerror(err));
  }
  auto file = std::make_shared<detail::MappedFile>();
  file->size = static_cast<size_t>(st.st_size);
  if (file->size > 0) {
    void* p = ::mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw DataError("cannot mmap token file '" + path + "': " + std::strerror(err));
    }
    file->data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return file;
}

/// Incremental RFC 3629 UTF-8 validator (one byte at a time, so input can be streamed in chunks).
class Utf8Validator {
 public:
  /// Feeds the byte at absolute offset `offset`; false when it makes the input invalid.
  bool feed(uint8_t b, int64_t offset) {
    if (need_ == 0) {
      start_ = offset;
      if (b < 0x80) return true;
      lo_ = 0x80;
      hi_ = 0xBF;
      if (b >= 0xC2 && b <= 0xDF) {
        need_ = 1;
      } else if (b >= 0xE0 && b <= 0xEF) {
        need_ = 2;
        if (b == 0xE0) lo_ = 0xA0;  // no overlong 3-byte forms
        if (b == 0xED) hi_ = 0x9F;  // no UTF-16 surrogates
      } else if (b >= 0xF0 && b <= 0xF4) {
        need_ = 3;
        if (b == 0xF0) lo_ = 0x90;  // no overlong 4-byte forms
        if (b == 0xF4) hi_ = 0x8F;  // nothing above U+10FFFF
      } else {
        return false;  // stray continuation byte, C0/C1 overlong lead, or F5..FF
      }
      return true;
    }
    if (b < lo_ || b > hi_) return false;
    lo_ = 0x80;
    hi_ = 0xBF;
    --need_;
    return true;
  }
  /// True when no multi-byte sequence is left open (checked at end of input).
  bool complete() const { return need_ == 0; }
  /// Offset of the first byte of the current (or last) sequence.
  int64_t sequence_start() const { return start_; }

 private:
  int need_ = 0;
  uint8_t lo_ = 0x80, hi_ = 0xBF;
  int64_t start_ = 0;
};

template <typename T>
void write_tokens(std::ofstream& out, const char* bytes, size_t n, std::vector<T>& buffer) {
  buffer.resize(n);
  for (size_t i = 0; i < n; ++i) buffer[i] = static_cast<uint8_t>(bytes[i]);
  out.write(reinterpret_cast<const char*>(buffer.data()),
            static_cast<std::streamsize>(n * sizeof(T)));
}

}  // namespace

TokenDtype parse_token_dtype(const std::string& name) {
  if (name == "uint16") return TokenDtype::kUint16;
  if (name == "uint32") return TokenDtype::kUint32;
  throw ConfigError("data.token_dtype: expected 'uint16' or 'uint32', got '" + name + "'");
}

TokenWindows parse_token_windows(const std::string& name) {
  if (name == "random") return TokenWindows::kRandom;
  if (name == "sequential") return TokenWindows::kSequential;
  throw ConfigError("data.windows: expected 'random' or 'sequential', got '" + name + "'");
}

int64_t token_width(TokenDtype dtype) {
  return dtype == TokenDtype::kUint16 ? 2 : 4;
}

TokenFileDataset::TokenFileDataset(const std::string& path, int64_t block_size, TokenDtype dtype,
                                   TokenWindows windows)
    : path_(path), block_size_(block_size), dtype_(dtype), windows_(windows) {
  if (block_size <= 0) {
    throw ConfigError(fmt::format("data.block_size: must be > 0, got {}", block_size));
  }
  file_ = map_file(path);
  const auto width = static_cast<size_t>(token_width(dtype));
  if (file_->size % width != 0) {
    throw DataError(
        fmt::format("token file '{}': size {} bytes is not a multiple of the {}-byte "
                    "token width (wrong data.token_dtype?)",
                    path, file_->size, width));
  }
  num_tokens_ = static_cast<int64_t>(file_->size / width);
  if (num_tokens_ < block_size + 1) {
    throw DataError(fmt::format("token file '{}' holds {} tokens, fewer than block_size + 1 = {}",
                                path, num_tokens_, block_size + 1));
  }
}

int64_t TokenFileDataset::size() const {
  return windows_ == TokenWindows::kRandom ? num_tokens_ / block_size_
                                           : (num_tokens_ - 1) / block_size_;
}

std::optional<int64_t> TokenFileDataset::max_target_id() const {
  const auto largest = [](const auto* p, int64_t n) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max<int64_t>(m, p[i]);
    return m;
  };
  if (dtype_ == TokenDtype::kUint16) {
    return largest(reinterpret_cast<const uint16_t*>(file_->data), num_tokens_);
  }
  return largest(reinterpret_cast<const uint32_t*>(file_->data), num_tokens_);
}

at::Tensor TokenFileDataset::slice(int64_t start, int64_t count) const {
  if (start < 0 || count < 0 || start + count > num_tokens_) {
    throw DataError(fmt::format("token file '{}': tokens [{}, {}) out of range [0, {})", path_,
                                start, start + count, num_tokens_));
  }
  at::Tensor out = at::empty({count}, at::kLong);  // (count,)
  int64_t* dst = out.data_ptr<int64_t>();
  if (dtype_ == TokenDtype::kUint16) {
    const auto* src = reinterpret_cast<const uint16_t*>(file_->data) + start;
    for (int64_t i = 0; i < count; ++i) dst[i] = src[i];
  } else {
    const auto* src = reinterpret_cast<const uint32_t*>(file_->data) + start;
    for (int64_t i = 0; i < count; ++i) dst[i] = src[i];
  }
  return out;
}

Sample TokenFileDataset::get(int64_t index, Rng& rng) const {
  if (index < 0 || index >= size()) {
    throw DataError(
        fmt::format("token_file '{}': index {} out of range [0, {})", path_, index, size()));
  }
  const int64_t start = windows_ == TokenWindows::kRandom
                            ? rng.randint(0, num_tokens_ - block_size_ - 1)
                            : index * block_size_;
  return {{"tokens", slice(start, block_size_ + 1)}};
}

std::string TokenFileDataset::describe() const {
  return fmt::format("token_file {}: {} tokens ({}), {} {} windows of {}+1", path_, num_tokens_,
                     dtype_ == TokenDtype::kUint16 ? "uint16" : "uint32", size(),
                     windows_ == TokenWindows::kRandom ? "random" : "sequential", block_size_);
}

int64_t write_byte_tokens(const std::vector<std::string>& inputs, const std::string& out,
                          TokenDtype dtype, bool allow_invalid) {
  std::ofstream sink(out, std::ios::binary | std::ios::trunc);
  if (!sink) throw DataError("cannot open '" + out + "' for writing: " + std::strerror(errno));
  constexpr size_t kChunk = 1 << 20;
  std::vector<char> chunk(kChunk);
  std::vector<uint16_t> buf16;
  std::vector<uint32_t> buf32;
  int64_t total = 0;
  try {
    for (const std::string& input : inputs) {
      std::ifstream source(input, std::ios::binary);
      if (!source) throw DataError("cannot open '" + input + "': " + std::strerror(errno));
      Utf8Validator utf8;
      int64_t offset = 0;
      while (source) {
        source.read(chunk.data(), static_cast<std::streamsize>(kChunk));
        const auto n = static_cast<size_t>(source.gcount());
        if (n == 0) break;
        for (size_t i = 0; i < n && !allow_invalid; ++i) {
          if (!utf8.feed(static_cast<uint8_t>(chunk[i]), offset + static_cast<int64_t>(i))) {
            throw DataError(fmt::format(
                "{}:byte offset {}: invalid UTF-8 (byte 0x{:02x} in the sequence starting at "
                "offset {}); pass --allow-invalid to keep raw bytes",
                input, offset + static_cast<int64_t>(i), static_cast<uint8_t>(chunk[i]),
                utf8.sequence_start()));
          }
        }
        if (dtype == TokenDtype::kUint16) {
          write_tokens(sink, chunk.data(), n, buf16);
        } else {
          write_tokens(sink, chunk.data(), n, buf32);
        }
        offset += static_cast<int64_t>(n);
      }
      if (source.bad()) throw DataError("error reading '" + input + "'");
      if (!allow_invalid && !utf8.complete()) {
        throw DataError(
            fmt::format("{}:byte offset {}: invalid UTF-8 (sequence cut off by the end "
                        "of the file)",
                        input, utf8.sequence_start()));
      }
      total += offset;
    }
    sink.flush();
    if (!sink) throw DataError("error writing '" + out + "'");
  } catch (...) {
    sink.close();
    std::remove(out.c_str());
    throw;
  }
  return total;
}

}  // namespace brrr
