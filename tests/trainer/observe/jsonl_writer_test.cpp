// JsonlWriter and the JSON builder. Python's json module is the reference: every line written
// must parse there, and re-serializing it with Python's defaults gives back the same text.
#include "trainer/observe/jsonl_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("brrr_jsonl_{}_{}", name, getpid());
  brrr::test::remove_tree(dir);
  fs::create_directories(dir);
  brrr::test::remove_at_exit(dir);
  return dir;
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(JsonlWriterTest, AppendsLinesThatPythonJsonReadsIdentically) {
  const fs::path dir = fresh_dir("python");
  const fs::path path = dir / "run" / "metrics.jsonl";  // parent is created by the writer
  {
    JsonlWriter writer(path.string());
    writer.write({{"kind", "train"},
                  {"step", 100},
                  {"time_s", 12.5},
                  {"loss", 0.41234567890123},
                  {"big", 1.2345678901234568e17},
                  {"small", 2.5e-12},
                  {"loss_scale", 65536.0},
                  {"nan", std::nan("")},
                  {"inf", -std::numeric_limits<double>::infinity()},
                  {"text", "tab\there \"q\" \xe2\x82\xac \x1f"},
                  {"breakdown_ms", JsonObject{{"data_wait", 0.4}, {"forward", 4.1}}}});
  }
  {
    JsonlWriter resumed(path.string());  // a resumed run continues the same file
    resumed.add_scalars(200, {{"val_loss", 0.35}, {"val_accuracy", 0.875}}, "eval");
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], R"({"kind": "eval", "step": 200, "val_accuracy": 0.875, "val_loss": 0.35})");

  const fs::path script = dir / "roundtrip.py";
  std::ofstream(script) << "import json, sys\n"
                           "for line in open(sys.argv[1], encoding='utf-8'):\n"
                           "    line = line.rstrip('\\n')\n"
                           "    again = json.dumps(json.loads(line), ensure_ascii=False)\n"
                           "    print('same' if again == line else 'DIFF ' + again)\n";
  int status = 0;
  const std::string out = test::run_command(
      fmt::format("{} {} {} 2>&1", BRRR_PYTHON, script.string(), path.string()), &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out, "same\nsame\n") << "C++ wrote:\n" << lines[0] << "\n" << lines[1];
}

TEST(JsonlWriterTest, EachLineIsOnDiskBeforeWriteReturns) {
  const fs::path path = fresh_dir("flush") / "metrics.jsonl";
  JsonlWriter writer(path.string());
  writer.add_scalars(1, {{"loss", 1.5}}, "train");
  EXPECT_EQ(read_lines(path),
            std::vector<std::string>{R"({"kind": "train", "step": 1, "loss": 1.5})"});
  writer.add_scalars(2, {{"loss", 1.25}}, "train");
  EXPECT_EQ(read_lines(path).size(), 2u);
}

TEST(JsonlWriterTest, UnopenablePathThrowsNamingIt) {
  const fs::path dir = fresh_dir("bad");
  fs::create_directories(dir / "is_a_dir.jsonl");
  try {
    JsonlWriter writer((dir / "is_a_dir.jsonl").string());
    FAIL() << "expected brrr::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is_a_dir.jsonl"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brrr
