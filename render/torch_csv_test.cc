#include "render/torch_csv.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/lowering.h"
#include "core/planning.h"

namespace zpipe::render {
namespace {

using core::Action;
using core::EmptyPlan;
using core::LowerComm;
using core::Placement;
using core::PlacementKind;
using core::Plan;
using core::PlanRequest;
using core::PlanSchedule;
using core::PlannedSchedule;
using core::StageCost;

// One parsed CSV cell, as PyTorch's _Action.from_str reads `<stage><kind><microbatch>`.
struct Cell {
  int stage = -1;
  char kind = '?';
  int microbatch = -1;
};

Cell ParseCell(absl::string_view s) {
  Cell c;
  const size_t k = s.find_first_of("FIWB");
  if (k == absl::string_view::npos || k == 0 || k + 1 >= s.size()) return c;
  if (!absl::SimpleAtoi(s.substr(0, k), &c.stage)) return c;
  if (!absl::SimpleAtoi(s.substr(k + 1), &c.microbatch)) return c;
  c.kind = s[k];
  return c;
}

// rows[r] = the cells of rank r's row.
std::vector<std::vector<Cell>> ParseCsv(const std::string& csv) {
  std::vector<std::vector<Cell>> rows;
  EXPECT_TRUE(!csv.empty() && csv.back() == '\n');
  for (absl::string_view line : absl::StrSplit(csv.substr(0, csv.size() - 1), '\n')) {
    rows.emplace_back();
    for (absl::string_view cell : absl::StrSplit(line, ',', absl::SkipEmpty())) {
      rows.back().push_back(ParseCell(cell));
    }
  }
  return rows;
}

Plan Generate(const std::string& schedule, int p, int m, StageCost cost, bool lower = false) {
  PlanRequest req;
  req.schedule = schedule;
  req.pipeline = p;
  req.microbatches = m;
  req.lower = lower;
  req.inputs = [cost](const Placement& placement) { return UniformInputs(placement, cost); };
  absl::StatusOr<PlannedSchedule> planned = PlanSchedule(req);
  EXPECT_TRUE(planned.ok()) << schedule << ": " << planned.status();
  return planned.ok() ? planned->plan : Plan{};
}

constexpr StageCost kUnequal{.f = 1, .b = 2, .w = 1.5, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5};

TEST(TorchCsvTest, OneFOneBRowsAreExact) {
  const Plan plan = Generate("1f1b", 2, 2, StageCost{});
  absl::StatusOr<std::string> csv = PlanToTorchCsv(plan);
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ(*csv,
            "0F0,0F1,0B0,0B1\n"
            "1F0,1B0,1F1,1B1\n");
}

// B and W become PyTorch's I and W; the V placement keeps stages r and 2p-1-r on rank r.
TEST(TorchCsvTest, SplitBackwardOnTheVPlacement) {
  Plan plan = EmptyPlan("zb-v", Placement::VShape(2), 1);
  plan.ranks[0] = {Action::F(0, 0), Action::F(3, 0), Action::B(3, 0), Action::W(3, 0),
                   Action::B(0, 0), Action::W(0, 0)};
  plan.ranks[1] = {Action::F(1, 0), Action::F(2, 0), Action::B(2, 0), Action::B(1, 0),
                   Action::W(2, 0), Action::W(1, 0)};
  absl::StatusOr<std::string> csv = PlanToTorchCsv(plan);
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ(*csv,
            "0F0,3F0,3I0,3W0,0I0,0W0\n"
            "1F0,2F0,2I0,1I0,2W0,1W0\n");
}

// Every stage's actions are on the rank PyTorch's placement style puts it on, with one F and one
// backward (B, or I and W) per microbatch: what _validate_schedule checks on load.
void ExpectPyTorchPlacement(const Plan& plan, const std::vector<std::set<int>>& stages_of_rank) {
  absl::StatusOr<std::string> csv = PlanToTorchCsv(plan);
  ASSERT_TRUE(csv.ok()) << plan.schedule << ": " << csv.status();
  const std::vector<std::vector<Cell>> rows = ParseCsv(*csv);
  ASSERT_EQ(rows.size(), stages_of_rank.size()) << plan.schedule;
  std::map<std::pair<int, char>, int> count;  // (stage, kind) -> actions
  for (size_t r = 0; r < rows.size(); ++r) {
    for (const Cell& c : rows[r]) {
      ASSERT_NE(c.kind, '?') << plan.schedule;
      EXPECT_TRUE(stages_of_rank[r].count(c.stage))
          << plan.schedule << ": stage " << c.stage << " on rank " << r;
      ++count[std::make_pair(c.stage, c.kind)];
    }
  }
  const int m = plan.num_microbatches;
  for (int s = 0; s < plan.num_stages(); ++s) {
    auto n = [&](char kind) { return count[std::make_pair(s, kind)]; };
    EXPECT_EQ(n('F'), m) << plan.schedule << " stage " << s;
    EXPECT_EQ(n('I'), n('W')) << plan.schedule << " stage " << s;
    EXPECT_EQ(n('B') + n('I'), m) << plan.schedule << " stage " << s;
  }
}

TEST(TorchCsvTest, StageIndicesFollowPyTorchPlacementStyles) {
  // "v" style: rank r holds stages r and 2p-1-r.
  for (const char* name : {"zb-v", "dualpipe-v"}) {
    const Plan plan = Generate(name, 4, 8, kUnequal);
    ASSERT_EQ(plan.placement.kind(), PlacementKind::kVShape) << name;
    ExpectPyTorchPlacement(plan, {{0, 7}, {1, 6}, {2, 5}, {3, 4}});
  }
  // "loop" style: rank r holds stages r, r + p, ...
  const Plan interleaved = Generate("interleaved", 2, 4, kUnequal);
  ExpectPyTorchPlacement(interleaved, {{0, 2}, {1, 3}});
  for (const char* name : {"1f1b", "zb-1p", "zb-2p"}) {
    ExpectPyTorchPlacement(Generate(name, 3, 6, kUnequal), {{0}, {1}, {2}});
  }
}

TEST(TorchCsvTest, LoweredPlanExportsTheSameComputeOrder) {
  const Plan plan = Generate("zb-v", 2, 4, kUnequal);
  absl::StatusOr<Plan> lowered = LowerComm(plan);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  ASSERT_TRUE(lowered->IsLowered());
  EXPECT_EQ(PlanToTorchCsv(*lowered).value(), PlanToTorchCsv(plan).value());
}

TEST(TorchCsvTest, RefusesWhatTheRuntimeCannotExpress) {
  Plan reduce = Generate("1f1b", 2, 2, StageCost{});
  reduce.ranks[1].push_back(Action::Reduce(0, 0));
  absl::StatusOr<std::string> csv = PlanToTorchCsv(reduce);
  EXPECT_EQ(csv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(csv.status().message().find("--buckets"), std::string::npos) << csv.status();

  Plan misplaced = EmptyPlan("1f1b", Placement::Linear(2), 1);
  misplaced.ranks[0] = {Action::F(1, 0)};
  csv = PlanToTorchCsv(misplaced);
  EXPECT_EQ(csv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(csv.status().message().find("rank 0 has F s1 mb0"), std::string::npos)
      << csv.status();
}

}  // namespace
}  // namespace zpipe::render
