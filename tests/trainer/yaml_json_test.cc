// YamlToJson: YAML 1.2 core-schema types for plain scalars, strings for
// quoted ones, and the structure of mappings and sequences.
#include "trainer/yaml_json.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace mirrortrain::trainer {
namespace {

TEST(YamlJsonTest, PlainScalarsTakeCoreSchemaTypes) {
  const YAML::Node node = YAML::Load(
      "{a: 1, b: -2.5e-3, c: true, d: ~, e: null, f: cpu:0, g: .5, h: 1e3, "
      "i: .inf, j: False, k: 12abc}");
  EXPECT_EQ(YamlToJson(node),
            nlohmann::json::parse(R"({"a": 1, "b": -0.0025, "c": true,
                "d": null, "e": null, "f": "cpu:0", "g": 0.5, "h": 1000.0,
                "i": ".inf", "j": false, "k": "12abc"})"));
}

TEST(YamlJsonTest, QuotedScalarsStayStrings) {
  const YAML::Node node = YAML::Load("{a: '1', b: \"true\", c: '~'}");
  EXPECT_EQ(YamlToJson(node),
            nlohmann::json::parse(R"({"a": "1", "b": "true", "c": "~"})"));
}

// The core schema's integers are decimal (010 is ten, not C's eight), 0o
// octal or 0x hexadecimal; its booleans are true and false only (yes and on
// are strings); a !!str tag makes a string.
TEST(YamlJsonTest, CoreSchemaIntegersBooleansAndTags) {
  const YAML::Node node = YAML::Load(
      "{a: 010, b: 0x1F, c: 0o17, d: yes, e: on, f: !!str 5, g: -0x1F, "
      "h: 99999999999999999999, i: 089}");
  EXPECT_EQ(YamlToJson(node),
            nlohmann::json::parse(R"({"a": 10, "b": 31, "c": 15, "d": "yes",
                "e": "on", "f": "5", "g": "-0x1F", "h": 1e20, "i": 89})"));
  const CoreScalar big = ReadPlainScalar("99999999999999999999");
  EXPECT_EQ(big.type, CoreScalar::Type::kInt);
  EXPECT_TRUE(big.too_large);
  EXPECT_FALSE(ReadPlainScalar("9223372036854775807").too_large);
  EXPECT_EQ(ReadPlainScalar("-.Inf").number,
            -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(ReadPlainScalar(".NaN").number));
  EXPECT_EQ(ReadPlainScalar("1e400").type, CoreScalar::Type::kFloat);
  // Leading zeros do not count against an octal's 63 bits.
  const CoreScalar octal = ReadPlainScalar("0o0000000000000000000000000017");
  EXPECT_FALSE(octal.too_large);
  EXPECT_EQ(octal.integer, 15);
  EXPECT_EQ(ReadPlainScalar("0o777777777777777777777").integer,
            std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(ReadPlainScalar("0o1000000000000000000000").too_large);
  for (const char* s : {".", "1e", "+", "0o", "0x", "-0x1F", "1_0", "+.nan"}) {
    EXPECT_EQ(ReadPlainScalar(s).type, CoreScalar::Type::kString) << s;
  }
}

// Scanned, not matched by std::regex, whose recursion per character
// overflowed the stack on a scalar of 30 000 digits.
TEST(YamlJsonTest, HugeScalarsAreReadWithoutRecursion) {
  const std::string digits(200000, '7');
  EXPECT_TRUE(ReadPlainScalar(digits).too_large);
  EXPECT_EQ(ReadPlainScalar(digits + "x").type, CoreScalar::Type::kString);
  EXPECT_EQ(ReadPlainScalar(digits + ".5").type, CoreScalar::Type::kFloat);
}

TEST(YamlJsonTest, NestedMappingsAndSequences) {
  const YAML::Node node = YAML::Load(
      "layers:\n"
      "  - {type: conv2d, filters: 16, kernel_size: [3, 3]}\n"
      "  - type: residual\n"
      "    layers: []\n"
      "empty: {}\n"
      "missing:\n");
  EXPECT_EQ(YamlToJson(node), nlohmann::json::parse(R"({
      "layers": [{"type": "conv2d", "filters": 16, "kernel_size": [3, 3]},
                 {"type": "residual", "layers": []}],
      "empty": {}, "missing": null})"));
}

}  // namespace
}  // namespace mirrortrain::trainer
