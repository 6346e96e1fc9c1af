// Tests of the JSON Lines reader: records written by Python's json module (the reference writer),
// nesting, special numbers, escapes, malformed lines and a large file.
#include "core/json_lines.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

class JsonLinesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "brrr_json_lines_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { brrr::test::remove_tree(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string data_error(const std::string& path) {
    try {
      read_json_lines(path);
    } catch (const DataError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected a DataError for " << path;
    return "";
  }
  fs::path dir_;
};

TEST_F(JsonLinesTest, ReadsWhatPythonsJsonModuleWrites) {
  // Python's defaults: ", "/": " separators, ensure_ascii (non-BMP text as surrogate pairs),
  // NaN/Infinity for non-finite floats.
  const std::string script = write("writer.py", R"(import json, sys
rows = [
    {"step": 1, "loss": 2.5, "lr": 3e-4, "phase": "train", "ok": True,
     "breakdown_ms": {"forward": 3, "backward": 6.25}},
    {"step": 2, "loss": float("nan"), "grad_norm": float("inf"), "low": float("-inf"),
     "note": "quote \" slash / tab \t smile \U0001F600 e\u0301", "skip": None, "ok": False},
    {"step": 3, "name": "3", "sizes": [4, 5]},
]
with open(sys.argv[1], "w") as f:
    for row in rows:
        f.write(json.dumps(row) + "\n")
)");
  const std::string path = (dir_ / "metrics.jsonl").string();
  ASSERT_EQ(std::system((std::string(BRRR_PYTHON) + " " + script + " " + path).c_str()), 0);

  const std::vector<JsonRecord> records = read_json_lines(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].numbers.at("step"), 1.0);
  EXPECT_EQ(records[0].numbers.at("loss"), 2.5);
  EXPECT_EQ(records[0].numbers.at("lr"), 3e-4);
  EXPECT_EQ(records[0].numbers.at("ok"), 1.0);
  EXPECT_EQ(records[0].numbers.at("breakdown_ms/forward"), 3.0);
  EXPECT_EQ(records[0].numbers.at("breakdown_ms/backward"), 6.25);
  EXPECT_EQ(records[0].strings.at("phase"), "train");
  EXPECT_EQ(records[0].numbers.size(), 6u);

  EXPECT_TRUE(std::isnan(records[1].numbers.at("loss")));
  EXPECT_EQ(records[1].numbers.at("grad_norm"), INFINITY);
  EXPECT_EQ(records[1].numbers.at("low"), -INFINITY);
  EXPECT_EQ(records[1].numbers.at("ok"), 0.0);
  EXPECT_EQ(records[1].strings.at("note"),
            "quote \" slash / tab \t smile \xF0\x9F\x98\x80 e\xCC\x81");
  EXPECT_EQ(records[1].numbers.count("skip") + records[1].strings.count("skip"), 0u);

  EXPECT_EQ(records[2].strings.at("name"), "3");  // a quoted number stays a string
  EXPECT_EQ(records[2].numbers.count("name"), 0u);
  EXPECT_EQ(records[2].numbers.at("sizes/0"), 4.0);
  EXPECT_EQ(records[2].numbers.at("sizes/1"), 5.0);
}

TEST_F(JsonLinesTest, AcceptsCompactJsonBlankLinesAndCrlf) {
  const std::string path = write(
      "compact.jsonl", "{\"a\":1,\"b\":{\"c\":-2.5e-3},\"s\":\"x\\/y\\u00e9\"}\r\n\n  \n{}\n");
  const auto records = read_json_lines(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].numbers.at("a"), 1.0);
  EXPECT_EQ(records[0].numbers.at("b/c"), -2.5e-3);
  EXPECT_EQ(records[0].strings.at("s"), "x/y\xC3\xA9");
  EXPECT_TRUE(records[1].numbers.empty() && records[1].strings.empty());
}

TEST_F(JsonLinesTest, MalformedLinesNameFileAndLine) {
  const std::string good = "{\"step\": 1}\n";
  const std::string truncated = write("truncated.jsonl", good + good + "{\"step\": 3, \"lo\n");
  const std::string msg = data_error(truncated);
  EXPECT_EQ(msg.rfind(truncated + ":3: malformed JSON record", 0), 0u) << msg;

  const std::string word = write("word.jsonl", good + "{\"step\": abc}\n");
  EXPECT_EQ(data_error(word), word +
                                  ":2: malformed JSON record at column 10: value 'abc' of key "
                                  "'step' is not a JSON number, string or boolean");
  const std::string array = write("array.jsonl", "[1, 2]\n");
  EXPECT_EQ(data_error(array),
            array + ":1: malformed JSON record at column 1: expected one object {...} per line");
  const std::string scalar = write("scalar.jsonl", good + good + good + "42\n");
  EXPECT_EQ(data_error(scalar).rfind(scalar + ":4: malformed JSON record", 0), 0u);
  const std::string missing = (dir_ / "missing.jsonl").string();
  EXPECT_EQ(data_error(missing), "cannot read '" + missing + "': No such file or directory");
}

TEST_F(JsonLinesTest, EscapedStringsReadBackUnchanged) {
  const std::string tricky =
      std::string("a\"b\\c\nd\te\x01 f/\xC3\xA9\xF0\x9F\x98\x80") + '\0' + "z";
  EXPECT_EQ(json_escape("plain"), "plain");
  EXPECT_EQ(json_escape("a\"b\\c\n\x1f"), "a\\\"b\\\\c\\n\\u001f");
  const JsonRecord r =
      parse_json_record("{\"k\": \"" + json_escape(tricky) + "\", \"n\": 1}", "test:1");
  EXPECT_EQ(r.strings.at("k"), tricky);
  EXPECT_EQ(r.numbers.at("n"), 1.0);
}

TEST_F(JsonLinesTest, ReadsOneHundredThousandLinesInOrder) {
  constexpr int kLines = 100000;
  std::string text;
  for (int i = 0; i < kLines; ++i) {
    text += fmt::format(
        "{{\"step\": {}, \"loss\": {}, \"lr\": 0.0003, \"phase\": \"train\", "
        "\"breakdown_ms\": {{\"forward\": 3.5, \"backward\": 7.25}}}}\n",
        i, 1.0 / (i + 1));
  }
  const std::string path = write("big.jsonl", text);
  const auto start = std::chrono::steady_clock::now();
  const auto records = read_json_lines(path);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("read_seconds", std::to_string(seconds));
  ASSERT_EQ(records.size(), static_cast<size_t>(kLines));
  for (int i : {0, 1, 4095, 4096, 54321, kLines - 1}) {
    EXPECT_EQ(records[i].numbers.at("step"), i);
    EXPECT_EQ(records[i].numbers.at("loss"), 1.0 / (i + 1));
    EXPECT_EQ(records[i].numbers.at("breakdown_ms/backward"), 7.25);
  }
}

// ---- the writer (JsonValue / JsonObject) ----

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

}  // namespace
}  // namespace brrr
