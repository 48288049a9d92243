// YamlToJson: YAML 1.2 core-schema types for plain scalars, strings for
// quoted ones, and the structure of mappings and sequences.
#include "trainer/yaml_json.h"

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
