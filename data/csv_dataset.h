#pragma once
// A numeric CSV table: every column is a feature except the label column (an integer class id).
// Parsed once at construction into two tensors; get() slices them.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace brrr {

class CsvDataset : public Dataset {
 public:
  /// Parses `path`: comma-separated numbers, blank lines skipped, the first row a header when
  /// `header`. `label_column` counts from 0, negative from the end (-1 = last). A cell that is
  /// not a number (or a non-integer label) throws DataError "<file>:<line>:<column>: ... '<text>'";
  /// a row with another number of cells throws naming file:line and both counts.
  CsvDataset(const std::string& path, int64_t label_column = -1, bool header = true);

  int64_t size() const override { return labels_.size(0); }
  std::optional<int64_t> max_target_id() const override { return labels_.max().item<int64_t>(); }
  /// {"features": float32 (F,), "label": int64 ()}.
  Sample get(int64_t index, Rng& rng) const override;
  std::string describe() const override;

  int64_t num_features() const { return features_.size(1); }
  /// Header names of the feature columns (empty without a header).
  const std::vector<std::string>& feature_names() const { return feature_names_; }
  /// (N, F) float32.
  const at::Tensor& features() const { return features_; }
  /// (N,) int64.
  const at::Tensor& labels() const { return labels_; }

 private:
  std::string path_;
  std::vector<std::string> feature_names_;
  at::Tensor features_;  // (N, F) float32
  at::Tensor labels_;    // (N,) int64
};

}  // namespace brrr
