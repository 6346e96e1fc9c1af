#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
#include "data/image_decode.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

constexpr int kChannels = 3;

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root,
                                       std::vector<TransformOptions> transforms, bool region_decode)
    : root_(root), pipeline_(std::move(transforms)), region_decode_(region_decode) {
  const auto size = pipeline_.output_size();
  if (!size) {
    throw ConfigError(fmt::format(
        "data.transforms: image_folder '{}' needs transforms that end in a fixed size (e.g. "
        "random_resized_crop, resize + center_crop) so samples can be batched; got: {}",
        root, pipeline_.describe()));
  }
  std::tie(height_, width_) = *size;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw DataError("image_folder: '" + root + "' is not a readable directory");
  }
  try {
    for (const auto& entry :
         fs::directory_iterator(root, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
    }
    std::sort(classes_.begin(), classes_.end());
    if (classes_.empty()) {
      throw DataError("image_folder: '" + root +
                      "' has no class sub-folders (expected root/<class>/<image>)");
    }
    for (size_t label = 0; label < classes_.size(); ++label) {
      const fs::path dir = fs::path(root) / classes_[label];
      std::vector<std::string> found;
      for (const auto& entry :
           fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink)) {
        if (entry.is_regular_file() && is_image_file(entry.path())) {
          found.push_back(entry.path().string());
        }
      }
      if (found.empty()) {
        throw DataError("image_folder: class folder '" + dir.string() +
                        "' has no .jpg/.jpeg/.png files");
      }
      std::sort(found.begin(), found.end());
      files_.insert(files_.end(), found.begin(), found.end());
      labels_.insert(labels_.end(), found.size(), static_cast<int64_t>(label));
    }
  } catch (const fs::filesystem_error& e) {
    throw DataError("image_folder: cannot scan '" + root + "': " + e.what());
  }
}

at::Tensor ImageFolderDataset::load(int64_t index, Rng& rng) const {
  const std::string& path = files_[index];
  const std::string bytes = read_file_bytes(path);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (region_decode_ && is_jpeg(data, bytes.size())) {
    const ImageInfo info = read_image_info(data, bytes.size(), path);
    if (pipeline_.can_decode_region(info.height, info.width)) {
      const CropRect rect = pipeline_.first_crop(info.height, info.width, rng);
      const auto [h, w] = pipeline_.first_output_size();
      const JpegRegion region = decode_jpeg_region(data, bytes.size(), path, rect, h, w, kChannels);
      return pipeline_.apply_from(1, resize_jpeg_region(region, h, w), rng);
    }
  }
  return pipeline_.apply(decode_image(data, bytes.size(), path, kChannels), rng);
}

Sample ImageFolderDataset::get(int64_t index, Rng& rng) const {
  if (index < 0 || index >= size()) {
    throw DataError(
        fmt::format("image_folder '{}': index {} out of range [0, {})", root_, index, size()));
  }
  at::Tensor image = load(index, rng);  // (3, H, W) uint8
  if (image.size(0) != kChannels || image.size(1) != height_ || image.size(2) != width_) {
    throw DataError(
        fmt::format("image_folder: '{}' became [{}, {}, {}] after the transforms, "
                    "expected [3, {}, {}]",
                    files_[index], image.size(0), image.size(1), image.size(2), height_, width_));
  }
  return {{"image", image}, {"label", at::scalar_tensor(labels_[index], at::kLong)}};
}

std::string ImageFolderDataset::describe() const {
  return fmt::format("image_folder {}: {} images, {} classes, -> 3x{}x{}, transforms: {}", root_,
                     size(), classes_.size(), height_, width_, pipeline_.describe());
}

}  // namespace brrr
