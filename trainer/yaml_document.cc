#include "trainer/yaml_document.h"

#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensor/status_macros.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/eventhandler.h"

namespace mirrortrain::trainer {
namespace {

int LineOf(const YAML::Node& node) {
  return node.IsDefined() && node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
}

std::string KeyText(const YAML::Node& key) {
  if (key.IsScalar()) return key.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << key;
  return out.c_str();
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

// Notes where the documents it is shown start; ignores their content.
class DocumentStarts final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    line_ = mark.line >= 0 ? mark.line + 1 : 0;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  int line() const { return line_; }

 private:
  int line_ = 0;
};

// The parser's nesting limit, which aliases can pass (`&a [*a]` is a list
// that holds itself): every walk of a document stays within it.
constexpr int kMaxYamlDepth = 2000;

// Every mapping below `node` has distinct keys; counts visits in `budget`;
// `depth`: the levels above `node`.
absl::Status CheckKeys(const YAML::Node& node, const std::string& path,
                       const YamlErrorFn& error, int64_t* budget,
                       int depth = 0) {
  if (--*budget < 0) {
    return error(LineOf(node), path,
                 absl::StrCat("more than ", kMaxYamlNodes,
                              " YAML nodes (each use of an alias counts)"));
  }
  if (depth > kMaxYamlDepth) {
    // The path repeats the cycle: its start says where.
    return error(
        LineOf(node),
        path.size() > 60 ? absl::StrCat(path.substr(0, 60), "...") : path,
        absl::StrCat("YAML nested deeper than ", kMaxYamlDepth,
                     " levels through aliases (an alias inside the "
                     "node it names?)"));
  }
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      MT_RETURN_IF_ERROR(CheckKeys(node[i], absl::StrCat(path, "[", i, "]"),
                                   error, budget, depth + 1));
    }
  } else if (node.IsMap()) {
    std::map<std::string, int> seen;  // Key -> line of its first use.
    for (const auto& item : node) {
      if (!item.first.IsScalar()) {
        // Within the limits before it is printed (it may hold itself).
        MT_RETURN_IF_ERROR(
            CheckKeys(item.first, path, error, budget, depth + 1));
        // `? [a, b]: 1`: no config key is a list or a mapping.
        return error(LineOf(item.first), Join(path, KeyText(item.first)),
                     "a key must be a name, not a list or a mapping");
      }
      const std::string key = item.first.Scalar();
      const auto [first, inserted] = seen.emplace(key, LineOf(item.first));
      if (!inserted) {
        return error(LineOf(item.first), Join(path, key),
                     first->second > 0
                         ? absl::StrCat("duplicate key (first at line ",
                                        first->second, ")")
                         : "duplicate key");
      }
      MT_RETURN_IF_ERROR(
          CheckKeys(item.second, Join(path, key), error, budget, depth + 1));
    }
  }
  return absl::OkStatus();
}

// `text` with its line breaks as YAML reads them, each one LF: CR LF and a
// lone CR become LF (YAML normalises line breaks in scalars so; yaml-cpp
// does not count a lone CR as one, so its marks would name wrong lines).
std::string NormalizeLineBreaks(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      out.push_back(text[i]);
    } else if (i + 1 == text.size() || text[i + 1] != '\n') {
      out.push_back('\n');
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<YAML::Node> LoadOneDocument(const std::string& raw_text,
                                           const std::string& base,
                                           const YamlErrorFn& error) {
  // A byte-order mark of UTF-32 or UTF-16 (yaml-cpp would decode the rest
  // as such, into other characters). UTF-32's first: FF FE 00 00 starts as
  // UTF-16LE's does.
  for (const auto& [bom, encoding] :
       {std::pair{absl::string_view("\xFF\xFE\0\0", 4), "UTF-32"},
        std::pair{absl::string_view("\0\0\xFE\xFF", 4), "UTF-32"},
        std::pair{absl::string_view("\xFF\xFE"), "UTF-16"},
        std::pair{absl::string_view("\xFE\xFF"), "UTF-16"}}) {
    if (absl::StartsWith(raw_text, bom)) {
      return error(1, base,
                   absl::StrCat("malformed YAML: ", encoding,
                                " text (save it as UTF-8)"));
    }
  }
  const std::string text = NormalizeLineBreaks(raw_text);
  // YAML text holds no C0 control character but tab and line breaks, and
  // no DEL; yaml-cpp reads them as something else (a
  // NUL as "unknown escape character", on the next line).
  int line = 1;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\n') {
      ++line;
    } else if ((byte < 0x20 && byte != '\t') || byte == 0x7f) {
      return error(line, base,
                   absl::StrFormat("malformed YAML: control character 0x%02x "
                                   "(not a text file?)",
                                   byte));
    }
  }
  // Not YAML::LoadAll: on some malformed text (",a") it never stops
  // reading empty documents. The first document is loaded, then the
  // parser is asked for at most one more.
  YAML::Node document;
  try {
    document = YAML::Load(text);
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts starts;
    if (parser.HandleNextDocument(starts) &&
        parser.HandleNextDocument(starts)) {
      return error(starts.line(), base,
                   "more than one YAML document ('---'): one is allowed");
    }
  } catch (const YAML::DeepRecursion& e) {
    // Its message is yaml-cpp's "bad file".
    // Valid YAML, beyond yaml-cpp's DepthGuard (2000 levels).
    return error(e.mark.line >= 0 ? e.mark.line + 1 : 0, base,
                 "YAML nested deeper than the parser's limit of 2000 levels");
  } catch (const YAML::ParserException& e) {
    return error(e.mark.line >= 0 ? e.mark.line + 1 : 0, base,
                 absl::StrCat("malformed YAML: ", e.msg));
  } catch (const YAML::Exception& e) {
    return error(0, base, absl::StrCat("malformed YAML: ", e.msg));
  }
  int64_t budget = kMaxYamlNodes;
  MT_RETURN_IF_ERROR(CheckKeys(document, base, error, &budget));
  return document;
}

}  // namespace mirrortrain::trainer
