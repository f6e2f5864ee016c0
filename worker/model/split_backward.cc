#include "worker/model/split_backward.h"

#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <numeric>
#include <typeinfo>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/model/torch_compat.h"

namespace zpipe::worker::model {
namespace {

namespace ag = torch::autograd;
using ag::Edge;
using ag::Node;
// The owning pointer to an autograd node: std::shared_ptr<Node> in LibTorch 1.x to 2.11 (at
// least), c10::intrusive_ptr<Node> in newer releases (2.14 has it); Edge::function names either.
using NodePtr = decltype(Edge::function);

// Runs `fn` (returning Status or StatusOr<T>); LibTorch exceptions become Internal errors
// prefixed with `what`.
template <typename Fn>
auto GuardLibTorch(absl::string_view what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": libtorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

// Whether the node's mangled C++ type name contains `part`. Mangled names hold class names
// verbatim and, unlike Node::name(), need no demangling: this runs on every node of every
// microbatch.
bool TypeNameHas(const Node& node, const char* part) {
  return std::strstr(typeid(node).name(), part) != nullptr;
}

// The gradients that reach one intermediate during B, one per input slot (undefined where none
// arrived).
struct Recorded {
  std::vector<torch::Tensor> grads;
  bool fired = false;
};

class RecordPreHook final : public ag::FunctionPreHook {
 public:
  explicit RecordPreHook(Recorded* into) : into_(into) {}
  ag::variable_list operator()(const ag::variable_list& grads) override {
    into_->grads = grads;
    into_->fired = true;
    return grads;
  }

 private:
  Recorded* into_;  // outlives the hook: the hook is removed when B ends
};

// Accumulates `grad` into `param`'s .grad in place; an undefined .grad is created with the
// parameter's layout.
void AccumulateInPlace(const torch::Tensor& param, const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  torch::Tensor& current = param.mutable_grad();
  if (current.defined()) {
    current.add_(grad);
  } else {
    current = torch::empty_like(param, at::MemoryFormat::Preserve);
    current.copy_(grad);
  }
}

enum class Mode {
  kSplit,     // B from the output to the input, W re-rooted at the intermediates
  kWhole,     // no input gradient: B nothing, W the whole backward
  kFallback,  // B everything, W nothing
};

enum class Progress { kMade, kInputDone, kDone, kFailed };

// The graph behind an output, read once after the forward: every node with its consumers (the
// nodes whose next edges point at it) and the input closure.
struct GraphView {
  std::vector<NodePtr> nodes;  // nodes[0] is the output's grad_fn
  std::vector<std::vector<int>> consumers;
  std::unordered_map<const Node*, int> index;
  std::vector<char> in_closure;  // the input's gradient edge is reachable from the node
  int input_node = -1;           // the input's node, -1 when it is not in the graph
  std::string unsplittable;      // why no node of the graph may be re-rooted, if so

  GraphView(const Edge& root, const Edge& input) {
    Visit(root.function);
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (const Edge& edge : nodes[i]->next_edges()) {
        if (edge.is_valid()) consumers[Visit(edge.function)].push_back(static_cast<int>(i));
      }
      if (unsplittable.empty() && TypeNameHas(*nodes[i], "DifferentiableGraphBackward")) {
        unsplittable =
            "the graph holds a JIT DifferentiableGraphBackward (run TorchScript under "
            "torch::jit::setGraphExecutorOptimize(false) for a per-op graph)";
      }
    }
    in_closure.assign(nodes.size(), 0);
    if (!input.is_valid()) return;
    auto it = index.find(input.function.get());
    if (it == index.end()) return;
    input_node = it->second;
    std::vector<int> stack = {input_node};
    in_closure[input_node] = 1;
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      for (int c : consumers[n]) {
        if (!in_closure[c]) {
          in_closure[c] = 1;
          stack.push_back(c);
        }
      }
    }
  }

  int Find(const Node* node) const {
    auto it = index.find(node);
    return it == index.end() ? -1 : it->second;
  }

  // Walking from `from` towards the output, the first closure nodes met.
  std::vector<int> Intermediates(int from, std::vector<int>& seen, int stamp) const {
    std::vector<int> out;
    std::vector<int> stack = {from};
    seen[from] = stamp;
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      for (int c : consumers[n]) {
        if (seen[c] == stamp) continue;
        seen[c] = stamp;
        if (in_closure[c]) {
          out.push_back(c);
        } else {
          stack.push_back(c);
        }
      }
    }
    return out;
  }

 private:
  int Visit(const NodePtr& node) {
    auto [it, inserted] = index.emplace(node.get(), static_cast<int>(nodes.size()));
    if (inserted) {
      nodes.push_back(node);
      consumers.emplace_back();
    }
    return it->second;
  }
};

// Why intermediate `node` cannot be re-rooted in W, or empty.
std::string NotReRootable(Node& node, bool is_input_node) {
  if (is_input_node) return "a parameter feeds the input's own grad_fn";
  if (TypeNameHas(node, "CppNode") || TypeNameHas(node, "PyNode")) {
    return absl::StrCat("intermediate ", node.name(),
                        " is a custom autograd function, which may not survive a second backward");
  }
  if (!node.pre_hooks().empty() || !node.post_hooks().empty() || HasTensorHooks(node)) {
    return absl::StrCat("intermediate ", node.name(), " carries hooks, which W would fire again");
  }
  return "";
}

// Removes the pre-hooks it added when it goes.
class PreHookScope {
 public:
  PreHookScope() = default;
  PreHookScope(const PreHookScope&) = delete;
  PreHookScope& operator=(const PreHookScope&) = delete;
  ~PreHookScope() {
    for (auto& [node, hook] : added_) {
      auto& hooks = node->pre_hooks();
      hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                                 [hook = hook](const std::unique_ptr<ag::FunctionPreHook>& h) {
                                   return h.get() == hook;
                                 }),
                  hooks.end());
    }
  }
  void Add(Node& node, std::unique_ptr<ag::FunctionPreHook> hook) {
    added_.emplace_back(&node, hook.get());
    node.add_pre_hook(std::move(hook));
  }

 private:
  std::vector<std::pair<Node*, const ag::FunctionPreHook*>> added_;
};

// Cuts next edges for one engine pass and restores them when it goes.
class EdgeCutScope {
 public:
  EdgeCutScope() = default;
  EdgeCutScope(const EdgeCutScope&) = delete;
  EdgeCutScope& operator=(const EdgeCutScope&) = delete;
  ~EdgeCutScope() {
    for (SavedEdge& c : cuts_) c.node->next_edges()[c.index] = std::move(c.edge);
  }
  void Cut(Node& node, size_t index) {
    Edge& edge = node.next_edges()[index];
    cuts_.push_back({&node, index, std::move(edge)});
    edge = Edge();
  }

 private:
  struct SavedEdge {
    Node* node;
    size_t index;
    Edge edge;
  };
  std::vector<SavedEdge> cuts_;
};

}  // namespace

struct SplitBackward::Impl {
  struct Intermediate {
    NodePtr node;
    std::vector<size_t> closure_edges;  // next_edges() indices into the input closure (cut in W)
    Recorded recorded;
  };
  struct Group {
    std::vector<int> params;         // ascending
    std::vector<int> intermediates;  // into `intermediates`
  };

  Mode mode = Mode::kSplit;
  Progress progress = Progress::kMade;
  std::string fallback_reason;
  int weight_passes = 0;  // engine passes W makes (or made)

  std::vector<torch::Tensor> params;
  std::vector<Edge> param_edges;  // invalid for a parameter outside the graph
  std::vector<int> used;          // parameters in the graph, ascending
  std::vector<int> unused;        // the others, descending
  Edge root;
  std::vector<int64_t> output_sizes;
  torch::TensorOptions output_options;
  Edge input_edge;  // invalid when the input has no gradient
  bool input_requires_grad = false;
  std::vector<int64_t> input_sizes;
  torch::TensorOptions input_options;
  torch::Tensor grad_output;  // kWhole: kept from B for W

  std::vector<Intermediate> intermediates;
  std::vector<Group> groups;    // in W order: latest first
  std::vector<NodePtr> b_only;  // closure nodes W never runs

  // Fills intermediates and groups (kSplit) from the graph and each used parameter's
  // intermediates.
  void BuildGroups(const GraphView& graph, const std::vector<std::vector<int>>& of_param);

  // One engine pass from `roots` to `leading` (if valid) and the parameters `ks` (all used):
  // accumulates and lands each parameter, latest first; returns `leading`'s gradient.
  torch::Tensor RunToParams(const ag::edge_list& roots, const ag::variable_list& root_grads,
                            const Edge& leading, const std::vector<int>& ks, bool keep_graph,
                            const Landed& landed) {
    ag::edge_list outputs;
    if (leading.is_valid()) outputs.push_back(leading);
    for (int k : ks) outputs.push_back(param_edges[k]);
    ag::variable_list grads = ag::Engine::get_default_engine().execute(
        roots, root_grads, keep_graph, /*create_graph=*/false, /*accumulate_grad=*/false, outputs);
    const size_t first = leading.is_valid() ? 1 : 0;
    for (size_t i = ks.size(); i-- > 0;) {
      if (grads[first + i].defined()) AccumulateInPlace(params[ks[i]], grads[first + i]);
      if (landed) landed(ks[i]);
    }
    return first == 1 ? grads[0] : torch::Tensor();
  }

  // Accumulates every parameter gradient from the output in one pass (after landing the unused
  // parameters); returns the input gradient if `with_input`.
  torch::Tensor RunWhole(const torch::Tensor& grad, bool with_input, const Landed& landed) {
    LandUnused(landed);
    torch::Tensor grad_input;
    if (!used.empty() || with_input) {
      grad_input = RunToParams({root}, {grad}, with_input ? input_edge : Edge(), used,
                               /*keep_graph=*/false, landed);
    }
    root = Edge();
    return grad_input;
  }

  // B of kSplit: records what reaches each intermediate; returns the input gradient.
  torch::Tensor RunInputSplit(const torch::Tensor& grad);
  // W of kSplit.
  void RunWeightSplit(const Landed& landed);

  void LandUnused(const Landed& landed) const {
    if (!landed) return;
    for (int k : unused) landed(k);
  }

  torch::Tensor InputGradOrZeros(const torch::Tensor& grad) const {
    if (!input_requires_grad) return torch::Tensor();
    if (grad.defined()) return grad.detach();
    return torch::zeros(input_sizes, input_options);
  }
};

void SplitBackward::Impl::BuildGroups(const GraphView& graph,
                                      const std::vector<std::vector<int>>& of_param) {
  // Parameters sharing an intermediate are one group (union-find over parameter indices).
  std::vector<int> parent(params.size());
  std::iota(parent.begin(), parent.end(), 0);
  const auto find = [&](int k) {
    while (parent[k] != k) k = parent[k] = parent[parent[k]];
    return k;
  };
  std::unordered_map<int, int> owner;  // intermediate node -> a parameter reaching it
  for (int k : used) {
    for (int n : of_param[k]) {
      auto [it, inserted] = owner.emplace(n, k);
      if (!inserted) parent[find(k)] = find(it->second);
    }
  }

  std::unordered_map<int, int> group_of;         // union-find root -> group
  std::unordered_map<int, int> intermediate_of;  // node -> intermediate
  std::vector<uint64_t> latest;                  // per group, its latest intermediate's seq nr
  for (int k : used) {
    auto [g, fresh_group] = group_of.emplace(find(k), static_cast<int>(groups.size()));
    if (fresh_group) {
      groups.emplace_back();
      latest.push_back(0);
    }
    groups[g->second].params.push_back(k);
    for (int n : of_param[k]) {
      auto [i, fresh] = intermediate_of.emplace(n, static_cast<int>(intermediates.size()));
      if (!fresh) continue;
      Intermediate im;
      im.node = graph.nodes[n];
      const ag::edge_list& next = im.node->next_edges();
      for (size_t e = 0; e < next.size(); ++e) {
        if (next[e].is_valid() && graph.in_closure[graph.Find(next[e].function.get())]) {
          im.closure_edges.push_back(e);
        }
      }
      intermediates.push_back(std::move(im));
      groups[g->second].intermediates.push_back(i->second);
      latest[g->second] = std::max(latest[g->second], graph.nodes[n]->sequence_nr());
    }
  }
  // Sequence numbers grow along the forward: the latest group runs first in W.
  std::vector<int> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return latest[a] > latest[b]; });
  std::vector<Group> sorted;
  for (int g : order) sorted.push_back(std::move(groups[g]));
  groups = std::move(sorted);

  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.in_closure[n] && static_cast<int>(n) != graph.input_node &&
        intermediate_of.count(static_cast<int>(n)) == 0) {
      b_only.push_back(graph.nodes[n]);
    }
  }
}

torch::Tensor SplitBackward::Impl::RunInputSplit(const torch::Tensor& grad) {
  ag::variable_list grads;
  {
    PreHookScope hooks;  // the hooks live only for this pass
    for (Intermediate& im : intermediates) {
      hooks.Add(*im.node, std::make_unique<RecordPreHook>(&im.recorded));
    }
    grads = ag::Engine::get_default_engine().execute({root}, {grad}, /*keep_graph=*/true,
                                                     /*create_graph=*/false,
                                                     /*accumulate_grad=*/false, {input_edge});
  }
  const bool all_recorded = std::all_of(intermediates.begin(), intermediates.end(),
                                        [](const Intermediate& im) { return im.recorded.fired; });
  if (all_recorded) {
    // What only B needed goes now; the graph above the intermediates is the caller's.
    for (const NodePtr& node : b_only) node->release_variables();
    root = Edge();
  } else {
    // The engine skipped an intermediate (not expected): W runs the whole backward from the
    // output again rather than miss a gradient.
    mode = Mode::kWhole;
    weight_passes = used.empty() ? 0 : 1;
    grad_output = grad;
    intermediates.clear();
    groups.clear();
  }
  b_only.clear();
  return grads[0];
}

void SplitBackward::Impl::RunWeightSplit(const Landed& landed) {
  LandUnused(landed);
  for (Group& group : groups) {
    ag::edge_list roots;
    ag::variable_list root_grads;
    for (int i : group.intermediates) {
      Intermediate& im = intermediates[i];
      for (size_t slot = 0; slot < im.recorded.grads.size(); ++slot) {
        if (!im.recorded.grads[slot].defined()) continue;
        roots.emplace_back(im.node, static_cast<uint32_t>(slot));
        root_grads.push_back(std::move(im.recorded.grads[slot]));
      }
    }
    if (roots.empty()) {  // nothing reached the group: no gradient, as with backward()
      for (size_t j = group.params.size(); j-- > 0;) {
        if (landed) landed(group.params[j]);
      }
      continue;
    }
    // B delivered what flows into the closure: cutting those edges for this pass makes each
    // intermediate compute only its weight side and never feeds a closure node twice (an
    // intermediate reachable from another one gets only its recorded gradient).
    EdgeCutScope cuts;
    for (int i : group.intermediates) {
      for (size_t e : intermediates[i].closure_edges) cuts.Cut(*intermediates[i].node, e);
    }
    RunToParams(roots, root_grads, Edge(), group.params, /*keep_graph=*/false, landed);
  }
  intermediates.clear();
  groups.clear();
}

SplitBackward::SplitBackward(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SplitBackward::~SplitBackward() = default;

bool SplitBackward::split() const { return impl_->mode != Mode::kFallback; }
const std::string& SplitBackward::fallback_reason() const { return impl_->fallback_reason; }
int SplitBackward::num_weight_passes() const { return impl_->weight_passes; }

absl::StatusOr<std::unique_ptr<SplitBackward>> SplitBackward::Make(
    torch::Tensor output, torch::Tensor input, std::vector<torch::Tensor> params) {
  if (!output.defined() || !output.requires_grad()) {
    return absl::InvalidArgumentError(
        "split backward: output is not part of an autograd graph (undefined or does not require "
        "grad); run the forward with grad mode on and trainable parameters");
  }
  for (size_t k = 0; k < params.size(); ++k) {
    const torch::Tensor& p = params[k];
    if (!p.defined() || !p.is_leaf() || !p.requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "split backward: parameter ", k,
          " is not a leaf tensor that requires grad; pass only the trainable parameters"));
    }
    if (input.defined() && p.is_same(input)) {
      return absl::InvalidArgumentError(
          absl::StrCat("split backward: parameter ", k, " is the stage input"));
    }
    for (size_t j = 0; j < k; ++j) {
      if (params[j].is_same(p)) {
        return absl::InvalidArgumentError(
            absl::StrCat("split backward: parameters ", j, " and ", k, " are the same tensor"));
      }
    }
  }
  using Result = absl::StatusOr<std::unique_ptr<SplitBackward>>;
  return GuardLibTorch("split backward: graph walk", [&]() -> Result {
    auto impl = std::make_unique<Impl>();
    Impl& s = *impl;
    s.root = ag::impl::gradient_edge(output);
    s.output_sizes = output.sizes().vec();
    s.output_options = output.options();
    s.input_requires_grad = input.defined() && input.requires_grad();
    if (s.input_requires_grad) {
      s.input_edge = ag::impl::gradient_edge(input);
      s.input_sizes = input.sizes().vec();
      s.input_options = input.options();
    }
    const GraphView graph(s.root, s.input_edge);

    s.params = std::move(params);
    s.param_edges.resize(s.params.size());
    for (size_t k = 0; k < s.params.size(); ++k) {
      NodePtr acc = ag::impl::try_get_grad_accumulator(s.params[k]);
      if (acc && graph.Find(acc.get()) >= 0) {
        s.param_edges[k] = Edge(std::move(acc), 0);
        s.used.push_back(static_cast<int>(k));
      }
    }
    for (size_t k = s.params.size(); k-- > 0;) {
      if (!s.param_edges[k].is_valid()) s.unused.push_back(static_cast<int>(k));
    }

    s.fallback_reason = graph.unsplittable;
    if (s.fallback_reason.empty() && graph.input_node < 0) {
      s.mode = Mode::kWhole;  // no input gradient to split off
    } else if (s.fallback_reason.empty()) {
      // A closure holds the output's node, so every used parameter has an intermediate.
      std::vector<std::vector<int>> of_param(s.params.size());
      std::vector<int> seen(graph.nodes.size(), -1);
      for (int k : s.used) {
        of_param[k] = graph.Intermediates(graph.Find(s.param_edges[k].function.get()), seen, k);
        for (int n : of_param[k]) {
          if (!s.fallback_reason.empty()) break;
          s.fallback_reason = NotReRootable(*graph.nodes[n], n == graph.input_node);
        }
      }
      if (s.fallback_reason.empty()) s.BuildGroups(graph, of_param);
    }
    if (!s.fallback_reason.empty()) s.mode = Mode::kFallback;
    s.weight_passes = s.mode == Mode::kSplit   ? static_cast<int>(s.groups.size())
                      : s.mode == Mode::kWhole ? (s.used.empty() ? 0 : 1)
                                               : 0;
    return Result(std::unique_ptr<SplitBackward>(new SplitBackward(std::move(impl))));
  });
}

absl::StatusOr<torch::Tensor> SplitBackward::RunInput(const torch::Tensor& grad_output,
                                                      const Landed& landed) {
  Impl& s = *impl_;
  if (s.progress != Progress::kMade) {
    return absl::FailedPreconditionError("split backward: B already ran for this microbatch");
  }
  torch::Tensor grad = grad_output;
  if (!grad.defined()) {
    if (!s.output_sizes.empty()) {
      return absl::InvalidArgumentError(
          "split backward: grad_output is undefined but the output is not a scalar");
    }
    grad = torch::ones({}, s.output_options);
  } else if (grad.sizes() != at::IntArrayRef(s.output_sizes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("split backward: grad_output has shape ", c10::str(grad.sizes()),
                     ", the output has shape ", c10::str(at::IntArrayRef(s.output_sizes))));
  }
  s.progress = Progress::kFailed;  // until B succeeds: a half-run B cannot be retried
  return GuardLibTorch("split backward: B", [&]() -> absl::StatusOr<torch::Tensor> {
    torch::Tensor grad_input;
    switch (s.mode) {
      case Mode::kWhole:
        s.grad_output = grad;
        s.progress = Progress::kInputDone;
        break;
      case Mode::kFallback:
        grad_input = s.RunWhole(grad, s.input_edge.is_valid(), landed);
        s.progress = Progress::kDone;
        break;
      case Mode::kSplit:
        grad_input = s.RunInputSplit(grad);
        s.progress = Progress::kInputDone;
        break;
    }
    return s.InputGradOrZeros(grad_input);
  });
}

absl::Status SplitBackward::RunWeight(const Landed& landed) {
  Impl& s = *impl_;
  if (s.progress == Progress::kDone && s.mode == Mode::kFallback) return absl::OkStatus();
  if (s.progress != Progress::kInputDone) {
    return absl::FailedPreconditionError(s.progress == Progress::kDone
                                             ? "split backward: W already ran for this microbatch"
                                             : "split backward: W before a successful B for this "
                                               "microbatch");
  }
  s.progress = Progress::kFailed;
  return GuardLibTorch("split backward: W", [&]() -> absl::Status {
    if (s.mode == Mode::kWhole) {
      s.RunWhole(s.grad_output, /*with_input=*/false, landed);
      s.grad_output = torch::Tensor();
    } else {
      s.RunWeightSplit(landed);
    }
    s.progress = Progress::kDone;
    return absl::OkStatus();
  });
}

}  // namespace zpipe::worker::model
