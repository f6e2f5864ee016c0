// A format-neutral tree of a parsed job file, with the source line of every node.
//
// YAML and JSON job files are first read into this tree, then mapped onto the proto JobSpec
// (job_file.cc). Keeping the line of every key and value lets the mapper name the line of an
// unknown field or a wrongly typed value, whatever the input format was.
#ifndef ZPIPE_CLIENT_INTERNAL_SPEC_TREE_H_
#define ZPIPE_CLIENT_INTERNAL_SPEC_TREE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zpipe::internal {

struct SpecField;

struct SpecNode {
  enum class Kind { kNull, kScalar, kMap, kList };
  // For scalars: whether the text was quoted in the source ("8" is a string, 8 is a number).
  Kind kind = Kind::kNull;
  int line = 0;      // 1-based line where the node starts
  std::string text;  // scalar text as written (without quotes)
  bool quoted = false;
  std::vector<SpecField> map;  // in source order; keys are unique
  std::vector<int> key_lines;  // line of each map key
  std::vector<SpecNode> list;
};

// One entry of a map node. (Not a std::pair<std::string, SpecNode>: that needs SpecNode complete,
// and clang instantiates it inside SpecNode's definition.)
struct SpecField {
  std::string key;
  SpecNode value;
};

absl::string_view SpecNodeKindName(const SpecNode& node);  // "a string", "a number", "a map", ...

// `text` quoted for an error message, cut to its first 32 characters and "..." (with its length)
// when longer than 40: a value may be a whole file's worth of digits.
std::string QuoteCut(absl::string_view text);

// Both parsers enforce the job-file limits of client/job_file.h on the tree they build: depth
// (kMaxJobFileDepth) and expansion (kMaxJobFileValues values, kMaxJobFileExpandedBytes of
// scalar text, aliases counted once per use). The work done is bounded by those limits and the
// text size, whatever the input; the caller bounds the text size (kMaxJobFileBytes).

// Parses YAML text. Errors say "line N: ..." (duplicate keys, syntax errors, anchors to nowhere,
// a limit crossed).
absl::StatusOr<SpecNode> ParseYamlTree(absl::string_view text);

// Parses strict JSON text (nlohmann::json's parser). Errors say "line N: ...".
absl::StatusOr<SpecNode> ParseJsonTree(absl::string_view text);

}  // namespace zpipe::internal

#endif  // ZPIPE_CLIENT_INTERNAL_SPEC_TREE_H_
