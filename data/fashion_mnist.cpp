#include "data/fashion_mnist.h"

#include <zlib.h>

#include <array>
#include <filesystem>

#include <fmt/ranges.h>

#include "core/error.h"
#include "data/image_decode.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

constexpr uint8_t kUbyteType = 0x08;
constexpr int64_t kNumClasses = 10;

/// gzFile owner; gzread reads plain files transparently, so both forms go through here.
struct GzFile {
  gzFile file = nullptr;
  explicit GzFile(const std::string& path) : file(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (file != nullptr) gzclose(file);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
};

// Reads exactly `count` bytes; returns how many were read (< count at end of file).
int64_t read_exact(GzFile& in, uint8_t* out, int64_t count, const std::string& path) {
  int64_t done = 0;
  while (done < count) {
    const auto chunk = static_cast<unsigned>(std::min<int64_t>(count - done, 1 << 30));
    const int got = gzread(in.file, out + done, chunk);
    if (got < 0) {
      int errnum = 0;
      throw DataError("cannot read IDX file '" + path + "': " + gzerror(in.file, &errnum));
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

}  // namespace

at::Tensor read_idx_ubyte(const std::string& path, int64_t expected_ndim) {
  GzFile in(path);
  if (in.file == nullptr) throw DataError("cannot open IDX file '" + path + "'");
  std::array<uint8_t, 4> magic{};
  if (read_exact(in, magic.data(), 4, path) != 4) {
    throw DataError("IDX file '" + path + "' is too short for its 4-byte magic number");
  }
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != kUbyteType || magic[3] != expected_ndim) {
    throw DataError(fmt::format(
        "IDX file '{}': bad magic number 0x{:02x}{:02x}{:02x}{:02x} (expected 0x000008{:02x}: "
        "unsigned bytes, {} dimensions)",
        path, magic[0], magic[1], magic[2], magic[3], expected_ndim, expected_ndim));
  }
  std::vector<int64_t> dims(static_cast<size_t>(expected_ndim));
  int64_t total = 1;
  for (int64_t& dim : dims) {
    std::array<uint8_t, 4> be{};
    if (read_exact(in, be.data(), 4, path) != 4) {
      throw DataError("IDX file '" + path + "' is truncated inside its header");
    }
    dim = (int64_t{be[0]} << 24) | (int64_t{be[1]} << 16) | (int64_t{be[2]} << 8) | be[3];
    total *= dim;
  }
  at::Tensor data = at::empty(dims, at::kByte);
  const int64_t got = read_exact(in, data.data_ptr<uint8_t>(), total, path);
  if (got != total) {
    throw DataError(
        fmt::format("IDX file '{}' is truncated: header promises {} bytes of data "
                    "(dims {}), file has {}",
                    path, total, fmt::join(dims, "x"), got));
  }
  uint8_t extra = 0;
  if (read_exact(in, &extra, 1, path) != 0) {
    throw DataError(
        fmt::format("IDX file '{}' has data beyond the {} bytes its header promises", path, total));
  }
  return data;
}

std::string fashion_mnist_file(const std::string& dir, const std::string& split,
                               const std::string& kind) {
  if (split != "train" && split != "test") {
    throw ConfigError("data.split: Fashion-MNIST split must be 'train' or 'test', got '" + split +
                      "'");
  }
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string name = prefix + "-" + kind + (kind == "images" ? "-idx3-ubyte" : "-idx1-ubyte");
  const fs::path plain = fs::path(dir) / name;
  if (fs::exists(plain)) return plain.string();
  const fs::path gz = fs::path(dir) / (name + ".gz");
  if (fs::exists(gz)) return gz.string();
  throw DataError("Fashion-MNIST: neither '" + plain.string() + "' nor '" + gz.string() +
                  "' exists");
}

FashionMnistDataset::FashionMnistDataset(const std::string& dir, const std::string& split,
                                         std::vector<TransformOptions> transforms,
                                         const std::string& transforms_key)
    : dir_(dir), split_(split), pipeline_(std::move(transforms), transforms_key) {
  const std::string image_path = fashion_mnist_file(dir, split, "images");
  const std::string label_path = fashion_mnist_file(dir, split, "labels");
  images_ = read_idx_ubyte(image_path, 3);
  labels_ = read_idx_ubyte(label_path, 1).to(at::kLong);
  if (images_.size(0) != labels_.size(0)) {
    throw DataError(fmt::format("Fashion-MNIST: '{}' holds {} images but '{}' holds {} labels",
                                image_path, images_.size(0), label_path, labels_.size(0)));
  }
  pipeline_.check_fits(images_.size(1), images_.size(2));
  if (labels_.numel() > 0 && labels_.max().item<int64_t>() >= kNumClasses) {
    throw DataError(fmt::format("Fashion-MNIST: '{}' has label {} (expected 0..9)", label_path,
                                labels_.max().item<int64_t>()));
  }
}

Sample FashionMnistDataset::get(int64_t index, Rng& rng) const {
  if (index < 0 || index >= size()) {
    throw DataError(fmt::format("fashion_mnist: index {} out of range [0, {})", index, size()));
  }
  at::Tensor image = images_[index].unsqueeze(0);  // (1, 28, 28), a view of the dataset
  image = pipeline_.empty() ? image.clone() : pipeline_.apply(image, rng);
  return {{"image", image}, {"label", labels_[index].clone()}};
}

std::string FashionMnistDataset::describe() const {
  return fmt::format("fashion_mnist {} ({}): {} images {}x{}, 10 classes, transforms: {}", dir_,
                     split_, size(), images_.size(1), images_.size(2), pipeline_.describe());
}

const std::vector<std::string>& FashionMnistDataset::class_names() {
  static const std::vector<std::string> kNames = {
      "0_tshirt_top", "1_trouser", "2_pullover", "3_dress", "4_coat",
      "5_sandal",     "6_shirt",   "7_sneaker",  "8_bag",   "9_ankle_boot"};
  return kNames;
}

void export_fashion_mnist_png(const std::string& idx_dir, const std::string& split,
                              const std::string& out_dir, int64_t limit) {
  FashionMnistDataset data(idx_dir, split);
  const int64_t n = limit > 0 ? std::min(limit, data.size()) : data.size();
  const auto& names = FashionMnistDataset::class_names();
  for (const std::string& name : names) fs::create_directories(fs::path(out_dir) / name);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = data.labels()[i].item<int64_t>();
    const fs::path file = fs::path(out_dir) / names[label] / fmt::format("{:05d}.png", i);
    write_png(file.string(), data.images()[i].unsqueeze(0));
  }
}

}  // namespace brrr
