// SPDX-License-Identifier: Apache-2.0
// bench_plan.cpp — dash-bench-plan: host time to get a backward plan (dash::plan_for: schedule resolution, unit
// template build and validation, header binding) for new shapes, for new batch sizes and head counts of a shape
// seen before, and for a problem seen before, up to 128k-token sequences, GQA and batch 64. No GPU: the device
// copy (dash_plan_create) adds one upload per new template, measured by bench/first_call_torch.py on the device.
//
//   dash-bench-plan [--out plan.jsonl] [--commit abc1234] [--repeats 5] [--varlen-only]
//   dash-bench-plan --fresh-call SHAPE             (the child: prints the ms of its one plan_for of shape SHAPE)
//   dash-bench-plan --fresh-varlen-call DISTINCT   (the child: prints the ms of its one plan_for_pack call)
//
// First-call times are medians over `repeats` runs: "fresh" is the one plan_for of a fresh process (a child: the
// template cache, the memos and the allocator empty, every page of the tables new to the process, the code cold), as
// a training job's first step meets it; "first" is a call after clear_template_cache() in this process, so every run
// builds. "async" is plan_for_async after clear_template_cache(): the time until it returns with the plan resolved on
// the drafts' layouts (dash_plan_create_async's host cost; the tables are then written on a thread of their own).
//
// Then dash::plan_for_pack on packs of 1000 sequences (32/8 heads, head dim 128, causal, auto, 132 CTAs) with 7, 64
// and about 800 distinct sequence shapes: the first call of a fresh process (a child process that builds the pack and
// plans it once: the auto table's index, every memo and template cache empty, the code cold), the first call after
// clear_template_cache() (memos and templates empty, the process warm), and a repeat call (every template and every
// shape's resolution seen before). --varlen-only runs that part alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dash/plan.hpp"
#include "dash/varlen.hpp"
#include "host_timing.hpp"

namespace {

struct Shape {
  int batch, seqlen, heads_q, heads_kv, head_dim;
  dash::Mask mask;
};

// The fixed-length shapes, up to 128k-token sequences, GQA and batch 64.
const std::vector<Shape>& fixed_shapes() {
  static const std::vector<Shape> shapes = {
      {2, 8000, 16, 16, 128, dash::Mask::Full},    {2, 8000, 32, 8, 128, dash::Mask::Full},
      {3, 8000, 32, 8, 128, dash::Mask::Full},     {64, 512, 16, 16, 128, dash::Mask::Causal},
      {64, 4096, 28, 4, 128, dash::Mask::Causal},  {2, 8192, 16, 16, 64, dash::Mask::Causal},
      {1, 32768, 32, 8, 128, dash::Mask::Causal},  {1, 131072, 16, 16, 128, dash::Mask::Causal},
      {1, 131072, 32, 8, 128, dash::Mask::Causal}, {1, 131072, 16, 16, 128, dash::Mask::Full},
      {1, 131072, 32, 8, 64, dash::Mask::Causal},
  };
  return shapes;
}

using dash::bench::median;
using dash::bench::ms_since;

dash::PlanRequest request(const Shape& s, int batch, int heads_q, int heads_kv) {
  dash::PlanRequest r;
  r.problem.batch = batch;
  r.problem.heads_q = heads_q;
  r.problem.heads_kv = heads_kv;
  r.problem.seqlen_q = r.problem.seqlen_k = s.seqlen;
  r.problem.head_dim = s.head_dim;
  r.problem.mask = s.mask;
  r.schedule = dash::Schedule::parse("auto");
  r.num_ctas = 132;
  r.gqa_mode = dash::GqaMode::Auto;
  return r;
}

// A pack of `n` sequences (seqlen_q = seqlen_k): lengths cycle over `distinct` values spread over [1, 2048], or
// (distinct = 0) are drawn uniformly from [1, 2048] with a fixed seed (about 790 distinct of 1000).
dash::Pack varlen_pack(int n, int distinct) {
  std::vector<int32_t> lengths(static_cast<size_t>(n));
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int32_t> uniform(1, 2048);
  for (int s = 0; s < n; ++s)
    lengths[size_t(s)] = distinct > 0 ? 1 + int32_t((int64_t(s % distinct) * 2047) / std::max(1, distinct - 1))
                                      : uniform(rng);
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), cu.begin() + 1);
  dash::Problem p;
  p.batch = n;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = 128;
  p.mask = dash::Mask::Causal;
  return dash::build_pack(p, cu.data(), cu.data());
}

// The ms of one plan_for call of fixed_shapes()[index], the first planning of the process.
double fresh_call(size_t index) {
  const Shape& s = fixed_shapes().at(index);
  const dash::PlanRequest r = request(s, s.batch, s.heads_q, s.heads_kv);
  const auto t0 = std::chrono::steady_clock::now();
  dash::plan_for(r);
  return ms_since(t0);
}

// The ms of one plan_for_pack call, the first planning of the process.
double fresh_varlen_call(int distinct) {
  const dash::Pack pack = varlen_pack(1000, distinct);
  const auto t0 = std::chrono::steady_clock::now();
  dash::plan_for_pack(pack, dash::Schedule::parse("auto"), 132, dash::GqaMode::Auto);
  return ms_since(t0);
}

// The ms a child printed: this program run again with `child_args` (--fresh-call or --fresh-varlen-call; Linux:
// /proc/self/exe, read here, since popen's shell would see its own). -1 if it failed.
double fresh_process_ms(const std::string& child_args) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = "'" + self + "' " + child_args;
  FILE* child = popen(command.c_str(), "r");
  double ms = -1;
  if (child == nullptr || std::fscanf(child, "%lf", &ms) != 1) ms = -1;
  if (child != nullptr && pclose(child) != 0) ms = -1;
  return ms;
}

void bench_varlen(FILE* out, const std::string& commit, int repeats) {
  std::printf("\n%-44s %7s %10s %10s %10s %10s\n", "plan_for_pack (1000 seqs, 32/8, d128, causal)", "shapes",
              "fresh ms", "first ms", "repeat ms", "templates");
  const dash::Schedule schedule = dash::Schedule::parse("auto");
  for (int distinct : {7, 64, 0}) {
    std::vector<double> fresh;
    for (int r = 0; r < repeats; ++r) fresh.push_back(fresh_process_ms("--fresh-varlen-call " + std::to_string(distinct)));
    const dash::Pack pack = varlen_pack(1000, distinct);
    std::set<std::pair<int32_t, int32_t>> shapes;
    for (const dash_pack_sequence& s : pack.sequences) shapes.insert({s.seqlen_q, s.seqlen_k});
    std::vector<double> first, repeat;
    size_t templates = 0;
    for (int r = 0; r < repeats; ++r) {
      dash::clear_template_cache();
      auto t0 = std::chrono::steady_clock::now();
      templates = dash::plan_for_pack(pack, schedule, 132, dash::GqaMode::Auto).templates.size();
      first.push_back(ms_since(t0));
      for (int k = 0; k < 5; ++k) {
        t0 = std::chrono::steady_clock::now();
        dash::plan_for_pack(pack, schedule, 132, dash::GqaMode::Auto);
        repeat.push_back(ms_since(t0));
      }
    }
    char name[96];
    std::snprintf(name, sizeof name, "varlen_n1000_shapes%zu_hq32_hkv8_d128_causal", shapes.size());
    std::printf("%-44s %7zu %10.3f %10.3f %10.4f %10zu\n", name, shapes.size(), median(fresh), median(first),
                median(repeat), templates);
    std::fprintf(out,
                 "{\"commit\":\"%s\",\"op\":\"plan_for_pack\",\"config\":\"%s\",\"schedule\":\"auto\","
                 "\"num_ctas\":132,\"fresh_process_ms\":%.4f,\"first_call_ms\":%.4f,\"repeat_ms\":%.5f,"
                 "\"shapes\":%zu,\"templates\":%zu,\"repeats\":%d}\n",
                 commit.c_str(), name, median(fresh), median(first), median(repeat), shapes.size(), templates, repeats);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "plan.jsonl", commit = "unknown";
  int repeats = 5;
  bool varlen_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--out") out_path = next();
    else if (a == "--commit") commit = next();
    else if (a == "--repeats") repeats = std::max(1, std::atoi(next().c_str()));
    else if (a == "--varlen-only") varlen_only = true;
    else if (a == "--fresh-call") {
      std::printf("%.6f\n", fresh_call(size_t(std::atoi(next().c_str()))));
      return 0;
    } else if (a == "--fresh-varlen-call") {
      std::printf("%.6f\n", fresh_varlen_call(std::atoi(next().c_str())));
      return 0;
    } else {
      std::fprintf(stderr, "usage: dash-bench-plan [--out FILE] [--commit SHA] [--repeats N] [--varlen-only]\n");
      return 2;
    }
  }
  FILE* out = std::fopen(out_path.c_str(), "w");
  if (!out) {
    std::perror(out_path.c_str());
    return 2;
  }
  if (varlen_only) {
    bench_varlen(out, commit, repeats);
    std::fclose(out);
    return 0;
  }
  std::printf("%-44s %10s %10s %10s %12s %12s %10s %s\n", "shape (auto, 132 CTAs)", "fresh ms", "first ms",
              "async ms", "new batch ms", "seen ms", "visits", "plan");
  for (size_t index = 0; index < fixed_shapes().size(); ++index) {
    const Shape& s = fixed_shapes()[index];
    std::vector<double> fresh, first, first_async, new_batch, seen;
    for (int r = 0; r < repeats; ++r) fresh.push_back(fresh_process_ms("--fresh-call " + std::to_string(index)));
    dash::BoundPlan plan;
    for (int r = 0; r < repeats; ++r) {
      dash::clear_template_cache();
      auto t0 = std::chrono::steady_clock::now();
      plan = dash::plan_for(request(s, s.batch, s.heads_q, s.heads_kv));
      first.push_back(ms_since(t0));
      t0 = std::chrono::steady_clock::now();
      dash::plan_for(request(s, s.batch + 1 + r, s.heads_q * 2, s.heads_kv * 2));  // new batch and head count
      new_batch.push_back(ms_since(t0));
      t0 = std::chrono::steady_clock::now();
      dash::plan_for(request(s, s.batch, s.heads_q, s.heads_kv));
      seen.push_back(ms_since(t0));
    }
    for (int r = 0; r < repeats; ++r) {
      dash::clear_template_cache();
      const auto t0 = std::chrono::steady_clock::now();
      const dash::AsyncBoundPlan async = dash::plan_for_async(request(s, s.batch, s.heads_q, s.heads_kv));
      first_async.push_back(ms_since(t0));
      if (async.unit == nullptr) async.tables.get();  // done before the next run's clear
    }
    char name[96];
    std::snprintf(name, sizeof name, "b%d_s%d_hq%d_hkv%d_d%d_%s", s.batch, s.seqlen, s.heads_q, s.heads_kv,
                  s.head_dim, dash::mask_name(s.mask));
    const char* mode = dash::gqa_mode_name(static_cast<dash::GqaMode>(plan.header.gqa_mode));
    const char* planner = dash::planner_name(static_cast<dash::Planner>(plan.header.planner));
    std::printf("%-44s %10.3f %10.3f %10.3f %12.4f %12.4f %10d %s %s\n", name, median(fresh), median(first),
                median(first_async), median(new_batch), median(seen), plan.header.visits_per_unit, mode, planner);
    std::fprintf(out,
                 "{\"commit\":\"%s\",\"op\":\"plan_for\",\"config\":\"%s\",\"schedule\":\"auto\",\"num_ctas\":132,"
                 "\"fresh_process_ms\":%.4f,\"first_call_ms\":%.4f,\"first_async_ms\":%.4f,\"new_batch_ms\":%.5f,"
                 "\"seen_ms\":%.5f,\"visits_per_unit\":%d,\"gqa_plan\":\"%s\",\"planner\":\"%s\",\"repeats\":%d}\n",
                 commit.c_str(), name, median(fresh), median(first), median(first_async), median(new_batch), median(seen),
                 plan.header.visits_per_unit, mode, planner, repeats);
  }
  bench_varlen(out, commit, repeats);
  std::fclose(out);
  return 0;
}
