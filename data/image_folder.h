#pragma once
// torchvision-style ImageFolder: root/<class>/**/<file>.(jpg|jpeg|png), any case.
// Classes are the sub-folders sorted by name (label = position); files are sorted by path.
// The folder is scanned once, at construction; get() decodes and transforms one file.
//
// JPEG fast path: when the first transform is a crop + resize (random_resized_crop, resize,
// center_crop), get() reads the JPEG header, draws the rectangle, and decodes only that region at
// the smallest sufficient DCT scale (decode_jpeg_region), instead of the whole image.
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace brrr {

class ImageFolderDataset : public Dataset {
 public:
  /// DataError naming `root` when it is missing, has no class folders, or a class has no images;
  /// ConfigError naming `data.transforms` when the transforms do not end in a fixed size.
  ImageFolderDataset(const std::string& root, std::vector<TransformOptions> transforms,
                     bool region_decode = true);

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  /// {"image": uint8 (3, H, W) (gray expanded to RGB, alpha dropped), "label": int64 ()}.
  /// DataError naming the file when it cannot be decoded.
  Sample get(int64_t index, Rng& rng) const override;
  std::string describe() const override;
  /// The last class id: the number of class folders - 1.
  std::optional<int64_t> max_target_id() const override {
    return static_cast<int64_t>(classes_.size()) - 1;
  }

  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& file(int64_t index) const { return files_.at(index); }
  int64_t label(int64_t index) const { return labels_.at(index); }

 private:
  at::Tensor load(int64_t index, Rng& rng) const;

  std::string root_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
  TransformPipeline pipeline_;
  int64_t height_ = 0, width_ = 0;  // output size
  bool region_decode_;
};

}  // namespace brrr
