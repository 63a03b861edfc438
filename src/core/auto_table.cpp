// SPDX-License-Identifier: Apache-2.0
// auto's candidate lists: a table generated offline (tools/make_auto_table.cpp, scripts/make_auto_table.sh) from
// the simulator and its calibrated cost model, so that choosing costs a look-up at call time. The table's rows
// sample the mask, head dim, GQA group and sequence lengths; a problem takes the row nearest to it on a log scale.
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "dash/plan.hpp"

namespace dash {
namespace {

struct AutoTableRow {
  int32_t mask;  // dash_mask_kind (full or causal)
  int32_t head_dim;
  int32_t group_size;
  int32_t seqlen_q;
  int32_t seqlen_k;
  const char* ranking;  // "mode/planner ..." best first, e.g. "split/symmetric-shift pack/shift ..."
};

#include "auto_table.inc"  // kAutoTable[], generated

double log2_distance(double a, double b) { return std::log2(std::max(a, 1.0) / std::max(b, 1.0)); }

Candidate parse_candidate(const std::string& word) {
  const size_t slash = word.find('/');
  Candidate c;
  c.mode = word.substr(0, slash) == "pack" ? GqaMode::PackGroup : GqaMode::SplitHeads;
  c.planner = Schedule::parse(word.substr(slash + 1)).planner;
  return c;
}

}  // namespace

std::vector<Candidate> auto_candidates(const Problem& problem, TileShape tiles) {
  (void)tiles;  // rows are sampled at the kernels' tiles for each head dim; lengths are in tokens
  // The sliding window is a band like causal: its rows are the nearest the table has (until it has its own).
  const int32_t mask = problem.mask == Mask::Window ? DASH_MASK_CAUSAL : int32_t(problem.mask);
  const AutoTableRow* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const AutoTableRow& row : kAutoTable) {
    if (row.mask != mask) continue;
    // Head dim and group first (they change the cost model and the GQA trade-off), then the lengths.
    const double d_head = std::fabs(log2_distance(problem.head_dim, row.head_dim));
    const double d_group = std::fabs(log2_distance(problem.group_size(), row.group_size));
    const double d_q = log2_distance(problem.seqlen_q, row.seqlen_q);
    const double d_k = log2_distance(problem.seqlen_k, row.seqlen_k);
    const double distance = 1e6 * d_head + 1e3 * d_group + d_q * d_q + d_k * d_k;
    if (distance < best_distance) {
      best_distance = distance;
      best = &row;
    }
  }
  std::vector<Candidate> out;
  if (best != nullptr) {
    std::istringstream words(best->ranking);
    for (std::string word; words >> word;) out.push_back(parse_candidate(word));
  }
  // Always end with the two plans whose waits all target earlier tickets (wave 1): one of them runs on any P.
  for (Planner p : {Planner::Descending, Planner::Ascending}) {
    const Candidate c{GqaMode::SplitHeads, p};
    bool listed = false;
    for (const Candidate& o : out) listed = listed || o == c;
    if (!listed) out.push_back(c);
  }
  return out;
}

}  // namespace dash
