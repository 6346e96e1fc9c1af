// JsonlWriter and the JSON builder. Python's json module is the reference: every line written
// must parse there, and re-serializing it with Python's defaults gives back the same text.
#include "trainer/jsonl_writer.h"

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

TEST(JsonValueTest, DumpsTypesInInsertionOrder) {
  const JsonObject record{{"kind", "train"},
                          {"step", 100},
                          {"loss", 0.41},
                          {"lr", 3e-4},
                          {"ok", true},
                          {"none", nullptr},
                          {"scale", 65536.0},
                          {"tiny", 1e-5},
                          {"n", size_t{7}},
                          {"breakdown_ms", JsonObject{{"forward", 4.1}, {"backward", 6.25}}},
                          {"list", JsonValue::Array{1, "a", false}}};
  EXPECT_EQ(record.dump(),
            R"({"kind": "train", "step": 100, "loss": 0.41, "lr": 0.0003, "ok": true, )"
            R"("none": null, "scale": 65536.0, "tiny": 1e-05, "n": 7, )"
            R"("breakdown_ms": {"forward": 4.1, "backward": 6.25}, "list": [1, "a", false]})");
}

TEST(JsonValueTest, WritesNonFiniteAsPythonDoes) {
  const JsonObject o{{"a", std::nan("")},
                     {"b", std::numeric_limits<double>::infinity()},
                     {"c", -std::numeric_limits<double>::infinity()},
                     {"d", -0.0}};
  EXPECT_EQ(o.dump(), R"({"a": NaN, "b": Infinity, "c": -Infinity, "d": -0.0})");
}

TEST(JsonValueTest, EscapesStrings) {
  EXPECT_EQ(JsonValue("q\"b\\n\nt\tc\x01 \xc3\xa9").dump(), R"("q\"b\\n\nt\tc\u0001 é")");
}

TEST(JsonValueTest, SetReplacesInPlaceAndFindLooksUp) {
  JsonObject o{{"a", 1}, {"b", 2}};
  o.set("a", "x").set("c", 3.5);
  EXPECT_EQ(o.dump(), R"({"a": "x", "b": 2, "c": 3.5})");
  ASSERT_NE(o.find("c"), nullptr);
  EXPECT_EQ(o.find("c")->as_double(), 3.5);
  EXPECT_EQ(o.find("b")->as_int(), 2);
  EXPECT_EQ(o.find("missing"), nullptr);
  EXPECT_EQ(o.size(), 3u);
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
  std::FILE* pipe =
      popen(fmt::format("{} {} {} 2>&1", BRRR_PYTHON, script.string(), path.string()).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << out;
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
