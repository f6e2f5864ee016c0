#include "client/internal/spec_tree.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/job_file.h"

namespace zpipe::internal {

namespace {

// What a tree build has made so far, against the job-file limits (client/job_file.h).
class TreeBudget {
 public:
  // Entering a map or list at `depth` (the top-level container is depth 1) that starts on `line`.
  static absl::Status Enter(int depth, int line) {
    if (depth <= kMaxJobFileDepth) return absl::OkStatus();
    return DepthError(line);
  }

  static absl::Status DepthError(int line) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line, ": nested deeper than ", kMaxJobFileDepth,
                     " levels (the job-file depth limit); a job spec is a few levels deep"));
  }

  // One more value (scalar, map or list; `text_bytes` of scalar or key text) on `line`.
  absl::Status Add(size_t text_bytes, int line) {
    if (++values_ > kMaxJobFileValues) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line, ": the job file expands to more than ", kMaxJobFileValues,
          " values (the job-file expansion limit); are YAML aliases nested inside each other?"));
    }
    bytes_ += text_bytes;
    if (bytes_ > kMaxJobFileExpandedBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line, ": the job file expands to more than ", kMaxJobFileExpandedBytes >> 20,
          " MiB of text (the job-file expansion limit); do YAML aliases repeat a long string?"));
    }
    return absl::OkStatus();
  }

 private:
  int values_ = 0;
  size_t bytes_ = 0;
};

}  // namespace

absl::string_view SpecNodeKindName(const SpecNode& node) {
  switch (node.kind) {
    case SpecNode::Kind::kNull:
      return "null";
    case SpecNode::Kind::kMap:
      return "a map";
    case SpecNode::Kind::kList:
      return "a list";
    case SpecNode::Kind::kScalar:
      return node.quoted ? "a string" : "a scalar";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// YAML

namespace {

int YamlLine(const YAML::Mark& mark, int fallback) {
  return mark.line >= 0 ? mark.line + 1 : fallback;
}

// `depth` is that of `node` if it is a container (the root is 1). Aliased nodes are shared in
// yaml-cpp's graph (and may even contain themselves); here they are copied once per use, which
// is what the budget and the depth limit bound.
absl::StatusOr<SpecNode> FromYaml(const YAML::Node& node, int fallback_line, int depth,
                                  TreeBudget& budget) {
  SpecNode out;
  out.line = YamlLine(node.Mark(), fallback_line);
  if (absl::Status s = budget.Add(node.IsScalar() ? node.Scalar().size() : 0, out.line); !s.ok()) {
    return s;
  }
  if (node.IsSequence() || node.IsMap()) {
    if (absl::Status s = TreeBudget::Enter(depth, out.line); !s.ok()) return s;
  }
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out.kind = SpecNode::Kind::kNull;
      return out;
    case YAML::NodeType::Scalar:
      out.kind = SpecNode::Kind::kScalar;
      out.text = node.Scalar();
      out.quoted = node.Tag() == "!";
      return out;
    case YAML::NodeType::Sequence:
      out.kind = SpecNode::Kind::kList;
      for (const YAML::Node& item : node) {
        absl::StatusOr<SpecNode> child = FromYaml(item, out.line, depth + 1, budget);
        if (!child.ok()) return child.status();
        out.list.push_back(*std::move(child));
      }
      return out;
    case YAML::NodeType::Map: {
      out.kind = SpecNode::Kind::kMap;
      std::set<std::string> seen;
      for (const auto& kv : node) {
        const int key_line = YamlLine(kv.first.Mark(), out.line);
        if (!kv.first.IsScalar()) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", key_line, ": map keys must be plain names"));
        }
        const std::string key = kv.first.Scalar();
        if (!seen.insert(key).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", key_line, ": duplicate field '", key, "'"));
        }
        absl::StatusOr<SpecNode> child = FromYaml(kv.second, key_line, depth + 1, budget);
        if (!child.ok()) return child.status();
        out.map.emplace_back(key, *std::move(child));
        out.key_lines.push_back(key_line);
      }
      return out;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<SpecNode> ParseYamlTree(absl::string_view text) {
  try {
    YAML::Node root = YAML::Load(std::string(text));
    TreeBudget budget;
    return FromYaml(root, 1, 1, budget);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own guard (2000 levels) against its recursive parser; ours is lower.
    return TreeBudget::DepthError(YamlLine(e.mark, 1));
  } catch (const YAML::Exception& e) {
    // e.msg is the bare reason; e.what() repeats the position in yaml-cpp's own format.
    return absl::InvalidArgumentError(absl::StrCat("line ", YamlLine(e.mark, 1), ": ", e.msg));
  }
}

// ---------------------------------------------------------------------------------------------
// JSON: nlohmann's SAX parser does not report positions, so the input is fed through an iterator
// that remembers how far the lexer has read. When a SAX event fires, the lexer has just consumed
// the token's last character (or, for numbers, one character of lookahead, which is on the same
// line unless it is the newline ending that line), so the line of the last consumed character is
// the line of the token.

namespace {

struct ReadPosition {
  const char* begin = nullptr;
  const char* furthest = nullptr;  // one past the last character handed to the lexer
};

class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator() = default;
  CountingIterator(const char* p, ReadPosition* pos) : p_(p), pos_(pos) {}

  reference operator*() const {
    if (pos_ != nullptr && p_ + 1 > pos_->furthest) pos_->furthest = p_ + 1;
    return *p_;
  }
  CountingIterator& operator++() {
    ++p_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++p_;
    return old;
  }
  friend bool operator==(const CountingIterator& a, const CountingIterator& b) {
    return a.p_ == b.p_;
  }
  friend bool operator!=(const CountingIterator& a, const CountingIterator& b) {
    return a.p_ != b.p_;
  }

 private:
  const char* p_ = nullptr;
  ReadPosition* pos_ = nullptr;
};

class TreeBuilder : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit TreeBuilder(const ReadPosition* pos) : pos_(pos) {}

  bool null() override { return AddValue(SpecNode()); }
  bool boolean(bool v) override { return Scalar(v ? "true" : "false", false); }
  bool number_integer(number_integer_t v) override { return Scalar(std::to_string(v), false); }
  bool number_unsigned(number_unsigned_t v) override { return Scalar(std::to_string(v), false); }
  bool number_float(number_float_t, const string_t& s) override { return Scalar(s, false); }
  bool string(string_t& s) override { return Scalar(s, true); }
  bool binary(binary_t&) override { return false; }

  bool start_object(std::size_t) override { return Open(SpecNode::Kind::kMap); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(SpecNode::Kind::kList); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) {
      error_ = absl::StrCat("line ", Line(), ": duplicate field '", k, "'");
      return false;
    }
    if (!Check(budget_.Add(k.size(), Line()))) return false;
    pending_key_ = k;
    pending_key_line_ = Line();
    return true;
  }

  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // nlohmann's message already says "at line L, column C"; keep the leading "line" convention.
    std::string what = ex.what();
    const std::string marker = "parse error at line ";
    size_t at = what.find(marker);
    if (at != std::string::npos) {
      what = what.substr(at + std::string("parse error at ").size());
    }
    if (error_.empty()) error_ = what;
    return false;
  }

  absl::StatusOr<SpecNode> Result() {
    if (!error_.empty()) return absl::InvalidArgumentError(error_);
    return std::move(root_);
  }

 private:
  // The line of the last consumed character (furthest - 1): 1 + newlines strictly before it.
  // Incremental, since the read position only moves forward.
  int Line() {
    for (; scanned_ + 1 < pos_->furthest; ++scanned_) line_ += *scanned_ == '\n';
    return line_;
  }

  bool Scalar(std::string text, bool quoted) {
    SpecNode n;
    n.kind = SpecNode::Kind::kScalar;
    n.text = std::move(text);
    n.quoted = quoted;
    return AddValue(std::move(n));
  }

  // Adds a finished value to the current container (or as the root); returns the stored node.
  SpecNode* Place(SpecNode node) {
    node.line = Line();
    if (stack_.empty()) {
      root_ = std::move(node);
      return &root_;
    }
    SpecNode& parent = *stack_.back();
    if (parent.kind == SpecNode::Kind::kMap) {
      node.line = pending_key_line_;
      parent.map.emplace_back(pending_key_, std::move(node));
      parent.key_lines.push_back(pending_key_line_);
      return &parent.map.back().second;
    }
    parent.list.push_back(std::move(node));
    return &parent.list.back();
  }

  // Records the first limit crossed; false stops the parse.
  bool Check(const absl::Status& s) {
    if (s.ok()) return true;
    if (error_.empty()) error_ = std::string(s.message());
    return false;
  }

  bool AddValue(SpecNode node) {
    if (!Check(budget_.Add(node.text.size(), Line()))) return false;
    Place(std::move(node));
    return true;
  }

  bool Open(SpecNode::Kind kind) {
    const int depth = static_cast<int>(stack_.size()) + 1;
    if (!Check(TreeBudget::Enter(depth, Line())) || !Check(budget_.Add(0, Line()))) return false;
    SpecNode n;
    n.kind = kind;
    stack_.push_back(Place(std::move(n)));
    keys_.emplace_back();
    return true;
  }

  bool Close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  const ReadPosition* pos_;
  const char* scanned_ = pos_->begin;
  int line_ = 1;
  SpecNode root_;
  // Pointers stay valid: a container only grows while it is the innermost open one, and a
  // child's address is taken after the push that created it.
  std::vector<SpecNode*> stack_;
  std::vector<std::set<std::string>> keys_;  // keys seen in each open container (maps only)
  TreeBudget budget_;
  std::string pending_key_;
  int pending_key_line_ = 0;
  std::string error_;
};

}  // namespace

absl::StatusOr<SpecNode> ParseJsonTree(absl::string_view text) {
  ReadPosition pos{text.data(), text.data()};
  TreeBuilder builder(&pos);
  CountingIterator first(text.data(), &pos);
  CountingIterator last(text.data() + text.size(), &pos);
  nlohmann::json::sax_parse(first, last, &builder);
  return builder.Result();
}

}  // namespace zpipe::internal
