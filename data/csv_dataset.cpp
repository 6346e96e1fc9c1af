#include "data/csv_dataset.h"

#include <charconv>
#include <cmath>
#include <string_view>

#include "core/error.h"
#include "data/image_decode.h"

namespace brrr {
namespace {

/// One cell: its text (trimmed) and 1-based character column in the line.
struct Cell {
  std::string_view text;
  int64_t column;
};

std::vector<Cell> split_line(std::string_view line) {
  std::vector<Cell> cells;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(line.find(',', begin), line.size());
    size_t a = begin, b = end;
    while (a < b && (line[a] == ' ' || line[a] == '\t')) ++a;
    while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t')) --b;
    cells.push_back({line.substr(a, b - a), static_cast<int64_t>(a) + 1});
    if (end == line.size()) break;
    begin = end + 1;
  }
  return cells;
}

bool parse_double(std::string_view text, double* out) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);  // from_chars rejects '+'
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

CsvDataset::CsvDataset(const std::string& path, int64_t label_column, bool header) : path_(path) {
  const std::string text = read_file_bytes(path);
  std::vector<float> features;
  std::vector<int64_t> labels;
  int64_t columns = -1, label = -1;
  bool header_pending = header;
  size_t pos = 0;
  for (int64_t line_no = 1; pos < text.size(); ++line_no) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::vector<Cell> cells = split_line(line);
    if (columns < 0) {
      columns = static_cast<int64_t>(cells.size());
      label = label_column < 0 ? columns + label_column : label_column;
      if (label < 0 || label >= columns || columns < 2) {
        throw ConfigError(fmt::format(
            "data.label_column: {} is out of range for the {} columns of '{}' (line {})",
            label_column, columns, path, line_no));
      }
    } else if (static_cast<int64_t>(cells.size()) != columns) {
      throw DataError(fmt::format("{}:{}: row has {} cells, expected {} like the first row", path,
                                  line_no, cells.size(), columns));
    }
    if (header_pending) {
      header_pending = false;
      for (int64_t c = 0; c < columns; ++c) {
        if (c != label) feature_names_.emplace_back(cells[c].text);
      }
      continue;
    }
    for (int64_t c = 0; c < columns; ++c) {
      double value = 0.0;
      if (!parse_double(cells[c].text, &value)) {
        throw DataError(fmt::format("{}:{}:{}: cannot parse '{}' as a number (field {})", path,
                                    line_no, cells[c].column, cells[c].text, c + 1));
      }
      if (!std::isfinite(value)) {
        throw DataError(fmt::format("{}:{}:{}: '{}' is not a finite number (field {})", path,
                                    line_no, cells[c].column, cells[c].text, c + 1));
      }
      if (c != label) {
        features.push_back(static_cast<float>(value));
      } else if (value != std::floor(value) || std::abs(value) > 9.0e15) {
        throw DataError(fmt::format("{}:{}:{}: label '{}' is not an integer class id", path,
                                    line_no, cells[c].column, cells[c].text));
      } else if (value < 0) {
        throw DataError(fmt::format("{}:{}:{}: label '{}' is negative; class ids count from 0",
                                    path, line_no, cells[c].column, cells[c].text));
      } else {
        labels.push_back(static_cast<int64_t>(value));
      }
    }
  }
  if (labels.empty()) throw DataError("CSV file '" + path + "' has no data rows");
  const auto n = static_cast<int64_t>(labels.size());
  features_ = at::tensor(features, at::kFloat).reshape({n, columns - 1});
  labels_ = at::tensor(labels, at::kLong);
}

Sample CsvDataset::get(int64_t index, Rng& /*rng*/) const {
  if (index < 0 || index >= size()) {
    throw DataError(fmt::format("csv '{}': index {} out of range [0, {})", path_, index, size()));
  }
  return {{"features", features_[index].clone()}, {"label", labels_[index].clone()}};
}

std::string CsvDataset::describe() const {
  return fmt::format("csv {}: {} rows, {} features", path_, size(), num_features());
}

}  // namespace brrr
