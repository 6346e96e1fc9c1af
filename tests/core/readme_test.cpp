// The README says what the code does: its config sample is the real quickstart, its key list is
// `trainer --help-config`'s, and its complete program and experiment are the files in examples/.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/config.h"

namespace brrr {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kReadme = std::string(BRRR_SOURCE_DIR) + "/README.md";

// The fenced block of `fence` ("```yaml") that follows `anchor` in the README.
std::string block_after(const std::string& anchor, const std::string& fence) {
  const std::string readme = slurp(kReadme);
  const size_t at = readme.find(anchor);
  if (at == std::string::npos) return "(anchor '" + anchor + "' not in README.md)";
  const size_t open = readme.find(fence + "\n", at);
  if (open == std::string::npos) return "(no " + fence + " block after '" + anchor + "')";
  const size_t begin = open + fence.size() + 1;
  return readme.substr(begin, readme.find("```\n", begin) - begin);
}

// A source file without its leading comment lines.
std::string without_header(const std::string& path, const std::string& comment) {
  std::istringstream in(slurp(path));
  std::string line, out;
  bool header = true;
  while (std::getline(in, line)) {
    if (header && line.rfind(comment, 0) == 0) continue;
    header = false;
    out += line + "\n";
  }
  return out;
}

TEST(ReadmeTest, ConfigSampleIsTheQuickstart) {
  const std::string sample = block_after("## Configuration reference", "```yaml");
  const ExperimentConfig quickstart =
      load_config(std::string(BRRR_SOURCE_DIR) + "/configs/quickstart.yaml");
  EXPECT_TRUE(parse_config(sample, "README.md") == quickstart) << sample;
}

TEST(ReadmeTest, KeyListIsHelpConfig) {
  const std::string readme = slurp(kReadme);
  std::istringstream lines(config_reference());
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_NE(readme.find(line + "\n"), std::string::npos) << "README.md lacks: " << line;
  }
}

TEST(ReadmeTest, CompleteProgramIsTheExample) {
  const std::string examples = std::string(BRRR_SOURCE_DIR) + "/examples/";
  EXPECT_EQ(block_after("This is `examples/spiral_trainer.cpp`, complete:", "```cpp"),
            without_header(examples + "spiral_trainer.cpp", "//"));
  EXPECT_EQ(block_after("and its experiment, `examples/spirals.yaml`:", "```yaml"),
            without_header(examples + "spirals.yaml", "#"));
}

}  // namespace
}  // namespace brrr
