// Published bubble rates used to compare our schedules against the papers.
//
// "Zero Bubble Pipeline Parallelism" (Qi et al., 2024): Table 5 (1F1B, 1F1B-interleaved, ZB-H1,
// ZB-H2, ZB-1p, ZB-2p) with the profiled costs of its appendix, and Table 8 (ZB-V).
// Memory per layer: M_F = 34h + 5as, M_W = -32h, M_B = -M_F - M_W, with s = 1024.
#ifndef ZPIPE_BENCH_PUBLISHED_H_
#define ZPIPE_BENCH_PUBLISHED_H_

#include <map>
#include <string>
#include <vector>

#include "core/cost_model.h"

namespace zpipe::bench {

struct PublishedSetting {
  std::string model;
  int p, m;
  double t_f, t_b, t_w, t_comm;
  double h, a;
  // schedule name -> published bubble rate
  std::map<std::string, double> bubble;
};

inline const std::vector<PublishedSetting>& PublishedSettings() {
  static const auto* settings = new std::vector<PublishedSetting>{
      {"1.5B",
       8,
       24,
       18522,
       18086,
       9337,
       601,
       2304,
       24,
       {{"1f1b", .2431},
        {"interleaved", .1055},
        {"zb-h1", .1585},
        {"zb-h2", .1083},
        {"zb-1p", .1585},
        {"zb-2p", .0433}}},
      {"1.5B",
       8,
       64,
       18546,
       18097,
       9321,
       762,
       2304,
       24,
       {{"1f1b", .1240},
        {"interleaved", .0443},
        {"zb-h1", .0674},
        {"zb-h2", .0444},
        {"zb-1p", .0674},
        {"zb-2p", .0026}}},
      {"6.2B",
       8,
       24,
       29718,
       29444,
       19927,
       527,
       4096,
       32,
       {{"1f1b", .2347},
        {"interleaved", .0808},
        {"zb-h1", .1323},
        {"zb-h2", .0698},
        {"zb-1p", .1323},
        {"zb-2p", .0029}}},
      {"14.6B",
       16,
       48,
       11347,
       11248,
       8132,
       377,
       5120,
       40,
       {{"1f1b", .2552},
        {"interleaved", .1104},
        {"zb-h1", .1397},
        {"zb-h2", .0672},
        {"zb-1p", .1397},
        {"zb-2p", .0066}}},
      {"28.3B",
       32,
       96,
       10419,
       10207,
       7715,
       408,
       6144,
       48,
       {{"1f1b", .2646},
        {"interleaved", .1493},
        {"zb-h1", .1421},
        {"zb-h2", .0641},
        {"zb-1p", .1421},
        {"zb-2p", .0038}}},
      {"ZB-V 14.6B", 16, 48, 14407, 14380, 9676, 1610, 5120, 40, {{"zb-v", .0697}}},
      {"ZB-V 28.3B", 32, 96, 9458, 9748, 7288, 879, 6144, 48, {{"zb-v", .0593}}},
  };
  return *settings;
}

// One stage's costs for setting `s`: the paper's profiled times, and per-layer memory M_F = 34h +
// 5as, M_W = -32h, M_B = -M_F - M_W (s = 1024). With v chunks per rank (interleaved), a stage is
// 1/v of a rank's share, in time and in memory.
inline core::StageCost PaperStageCost(const PublishedSetting& s, int v = 1) {
  constexpr double kSeqLen = 1024;
  core::StageCost c;
  c.f = s.t_f / v;
  c.b = s.t_b / v;
  c.w = s.t_w / v;
  c.mem_f = (34 * s.h + 5 * s.a * kSeqLen) / v;
  c.mem_w = -32 * s.h / v;
  c.mem_b = -c.mem_f - c.mem_w;
  return c;
}

}  // namespace zpipe::bench

#endif  // ZPIPE_BENCH_PUBLISHED_H_
