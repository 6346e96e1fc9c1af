#pragma once
// Fashion-MNIST (and MNIST) from IDX files: `<prefix>-images-idx3-ubyte` and
// `<prefix>-labels-idx1-ubyte`, each optionally gzipped (`.gz`), prefix `train` or `t10k`.
// Both files are read and checked once at construction; samples are then slices of memory.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace brrr {

/// Reads an IDX file of unsigned bytes (type code 0x08), gzipped or not, checking the magic
/// number (0x0000 08 <ndim>), that it has `expected_ndim` dimensions and exactly the bytes its
/// header promises. Returns uint8 with the file's dimensions. DataError naming the file otherwise.
at::Tensor read_idx_ubyte(const std::string& path, int64_t expected_ndim);

/// The split's IDX path for `kind` ("images" or "labels"): the plain file if present, else `.gz`.
/// `split` is "train" or "test"; DataError naming both candidates when neither exists.
std::string fashion_mnist_file(const std::string& dir, const std::string& split,
                               const std::string& kind);

class FashionMnistDataset : public Dataset {
 public:
  /// Loads `split` ("train" or "test") from `dir`. Samples: {"image": uint8 (1, 28, 28) or the
  /// transforms' output size, "label": int64 ()}.
  /// `transforms_key` names the transforms in errors (data.transforms or data.val.transforms).
  FashionMnistDataset(const std::string& dir, const std::string& split,
                      std::vector<TransformOptions> transforms = {},
                      const std::string& transforms_key = "data.transforms");

  int64_t size() const override { return labels_.size(0); }
  std::optional<int64_t> max_target_id() const override { return labels_.max().item<int64_t>(); }
  Sample get(int64_t index, Rng& rng) const override;
  std::string describe() const override;

  /// (N, 28, 28) uint8.
  const at::Tensor& images() const { return images_; }
  /// (N,) int64 in [0, 10).
  const at::Tensor& labels() const { return labels_; }
  /// Folder-safe class names, prefixed with the label so that sorted order is label order
  /// ("0_tshirt_top", ..., "9_ankle_boot").
  static const std::vector<std::string>& class_names();

 private:
  std::string dir_;
  std::string split_;
  at::Tensor images_;  // (N, 28, 28) uint8
  at::Tensor labels_;  // (N,) int64
  TransformPipeline pipeline_;
};

/// Writes `split` as root/<class_name>/<index>.png (index zero-padded to 5 digits, so file order is
/// index order) for the image_folder dataset; `limit` > 0 writes only the first `limit` images.
void export_fashion_mnist_png(const std::string& idx_dir, const std::string& split,
                              const std::string& out_dir, int64_t limit);

}  // namespace brrr
