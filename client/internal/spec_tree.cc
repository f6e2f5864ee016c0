#include "client/internal/spec_tree.h"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

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

  // `values` more values (scalars, maps, lists) with `text_bytes` of scalar or key text, made
  // on `line`.
  absl::Status Add(size_t text_bytes, int line, int values = 1) {
    values_ += values;
    if (values_ > kMaxJobFileValues) {
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

std::string QuoteCut(absl::string_view text) {
  if (text.size() <= 40) return absl::StrCat("'", text, "'");
  return absl::StrCat("'", text.substr(0, 32), "...' (", text.size(), " characters)");
}

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

// What a finished subtree costs to copy where an alias names it.
struct SubtreeSize {
  int values = 0;
  size_t bytes = 0;
  int height = 0;  // levels of containers: 0 for a scalar or null
};

SubtreeSize Measure(const SpecNode& node) {
  SubtreeSize out{.values = 1, .bytes = node.text.size()};
  auto add = [&out](const SpecNode& child) {
    const SubtreeSize c = Measure(child);
    out.values += c.values;
    out.bytes += c.bytes;
    out.height = std::max(out.height, c.height);
  };
  for (const SpecField& field : node.map) {
    out.bytes += field.key.size();
    add(field.value);
  }
  for (const SpecNode& item : node.list) add(item);
  if (node.kind == SpecNode::Kind::kMap || node.kind == SpecNode::Kind::kList) ++out.height;
  return out;
}

// Thrown out of the event handler to stop yaml-cpp's parser at the first error.
struct TreeError {
  absl::Status status;
};

// Builds the tree from yaml-cpp's parser events, so that the limits apply while parsing:
// YAML::Load would first build yaml-cpp's own graph of the whole file (1 GB for a 4 MiB list).
// An alias is a copy of its anchor's finished node, charged to the budget per use.
class YamlTreeBuilder : public YAML::EventHandler {
 public:
  SpecNode TakeRoot() { return std::move(root_); }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    SpecNode node;
    node.line = YamlLine(mark, FallbackLine());
    Charge(budget_.Add(0, node.line));
    Place(std::move(node), anchor, /*container=*/false);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    SpecNode node;
    node.kind = SpecNode::Kind::kScalar;
    node.line = YamlLine(mark, FallbackLine());
    node.text = value;
    node.quoted = tag == "!";
    Charge(budget_.Add(value.size(), node.line));
    Place(std::move(node), anchor, /*container=*/false);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const int line = YamlLine(mark, FallbackLine());
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      // yaml-cpp knows the anchor, so it is one still open: the alias is inside its own node.
      Fail(absl::StrCat("line ", line, ": an alias inside the node it names (a recursive alias)"));
    }
    const SubtreeSize size = it->second.second;
    if (size.height > 0) {
      Charge(TreeBudget::Enter(static_cast<int>(stack_.size()) + size.height, line));
    }
    Charge(budget_.Add(size.bytes, line, size.values));
    Place(SpecNode(it->second.first), YAML::NullAnchor, /*container=*/false);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor, SpecNode::Kind::kList);
  }
  void OnSequenceEnd() override { Close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor, SpecNode::Kind::kMap);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    SpecNode* node = nullptr;  // stays valid: see Place()
    YAML::anchor_t anchor = YAML::NullAnchor;
    std::set<std::string> keys;
    bool has_key = false;  // maps: a key was read and waits for its value
    std::string key;
    int key_line = 0;
  };

  [[noreturn]] static void Fail(std::string message) {
    throw TreeError{absl::InvalidArgumentError(std::move(message))};
  }
  static void Charge(const absl::Status& s) {
    if (!s.ok()) throw TreeError{s};
  }

  // The line a node without a position of its own is reported on: its key's, or its parent's.
  int FallbackLine() const {
    if (stack_.empty()) return 1;
    const Frame& f = stack_.back();
    return f.has_key ? f.key_line : f.node->line;
  }

  void Open(const YAML::Mark& mark, YAML::anchor_t anchor, SpecNode::Kind kind) {
    SpecNode node;
    node.kind = kind;
    node.line = YamlLine(mark, FallbackLine());
    Charge(TreeBudget::Enter(static_cast<int>(stack_.size()) + 1, node.line));
    Charge(budget_.Add(0, node.line));
    SpecNode* placed = Place(std::move(node), YAML::NullAnchor, /*container=*/true);
    Frame& frame = stack_.emplace_back();
    frame.node = placed;
    frame.anchor = anchor;
  }

  void Close() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    Remember(frame.anchor, *frame.node);
  }

  void Remember(YAML::anchor_t anchor, const SpecNode& node) {
    if (anchor == YAML::NullAnchor) return;
    // The kept copy counts too, so anchors nested in anchors cannot multiply memory unbounded.
    const SubtreeSize size = Measure(node);
    Charge(budget_.Add(size.bytes, node.line, size.values));
    anchors_.insert_or_assign(anchor, std::make_pair(node, size));
  }

  // Adds `node` to the open container (or as the root) and returns where it now lives. The
  // pointer stays valid while `node` is open: a container only grows while it is the innermost
  // open one. A finished scalar or alias with an anchor is remembered here; a container when it
  // closes.
  SpecNode* Place(SpecNode node, YAML::anchor_t anchor, bool container) {
    if (!container) Remember(anchor, node);
    if (stack_.empty()) {
      root_ = std::move(node);
      return &root_;
    }
    Frame& parent = stack_.back();
    if (parent.node->kind == SpecNode::Kind::kList) {
      parent.node->list.push_back(std::move(node));
      return &parent.node->list.back();
    }
    if (!parent.has_key) {
      if (node.kind != SpecNode::Kind::kScalar) {
        Fail(absl::StrCat("line ", node.line, ": map keys must be plain names"));
      }
      if (!parent.keys.insert(node.text).second) {
        Fail(absl::StrCat("line ", node.line, ": duplicate field '", node.text, "'"));
      }
      parent.has_key = true;
      parent.key = std::move(node.text);
      parent.key_line = node.line;
      return nullptr;
    }
    parent.has_key = false;
    parent.node->map.push_back(SpecField{std::move(parent.key), std::move(node)});
    parent.node->key_lines.push_back(parent.key_line);
    return &parent.node->map.back().value;
  }

  SpecNode root_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, std::pair<SpecNode, SubtreeSize>> anchors_;
  TreeBudget budget_;
};

}  // namespace

absl::StatusOr<SpecNode> ParseYamlTree(absl::string_view text) {
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    YamlTreeBuilder builder;
    parser.HandleNextDocument(builder);  // the first document only, as YAML::Load
    return builder.TakeRoot();
  } catch (const TreeError& e) {
    return e.status;
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
  // C++20 rewrites != in terms of this.
  friend bool operator==(const CountingIterator& a, const CountingIterator& b) {
    return a.p_ == b.p_;
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
    // A syntax error's message already says "at line L, column C"; keep the leading "line"
    // convention. Others (a number out of range: out_of_range.406) have no position: prefix
    // the line of the token, and drop the "[json.exception.KIND.ID] " tag either way.
    if (ex.id == 406) {  // out_of_range.406: a number past a double's range
      if (error_.empty()) error_ = NumberOutOfRange(ex.what());
      return false;
    }
    std::string what = ex.what();
    const std::string marker = "parse error at line ";
    const size_t at = what.find(marker);
    if (at != std::string::npos) {
      what = what.substr(at + std::string("parse error at ").size());
    } else {
      const size_t tag_end = what.rfind("] ", what.find(' '));
      if (what.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos) {
        what = what.substr(tag_end + 2);
      }
      what = absl::StrCat("line ", Line(), ": ", what);
    }
    if (error_.empty()) error_ = what;
    return false;
  }

  // "line L: number out of range: '1234567890123456789012345678901...' (400 characters); ...":
  // the token is cut, since it may be the whole file.
  std::string NumberOutOfRange(const std::string& what) {
    std::string token;
    const size_t open = what.find('\'');
    const size_t close = what.rfind('\'');
    if (open != std::string::npos && close > open) token = what.substr(open + 1, close - open - 1);
    return absl::StrCat("line ", Line(), ": number out of range: ", QuoteCut(token),
                        "; a number in a job file must lie within +-1.7976931348623157e308 "
                        "(a double), and an integer field takes at most 64 bits");
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
      parent.map.push_back(SpecField{pending_key_, std::move(node)});
      parent.key_lines.push_back(pending_key_line_);
      return &parent.map.back().value;
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
