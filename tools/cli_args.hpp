// SPDX-License-Identifier: Apache-2.0
// cli_args.hpp — option parsing shared by the dash-attn commands: every option must be consumed (an unknown
// one is an error naming it), and the problem shape options common to plan / simulate / check.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dash/plan.hpp"

namespace dash::cli {

using dash::Error;

class Args {
 public:
  Args(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) tokens_.push_back(argv[i]);
  }
  // Value of --name, or nullopt. Flags without values (--causal) are handled by has().
  std::optional<std::string> value(const std::string& name) {
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (tokens_[i] == name) {
        if (i + 1 >= tokens_.size()) throw Error(name, "expects a value");
        used_.insert(i);
        used_.insert(i + 1);
        return tokens_[i + 1];
      }
    }
    return std::nullopt;
  }
  bool has(const std::string& name) {
    for (size_t i = 0; i < tokens_.size(); ++i)
      if (tokens_[i] == name) {
        used_.insert(i);
        return true;
      }
    return false;
  }
  int32_t integer(const std::string& name, int32_t fallback, int32_t min_value = 1) {
    auto v = value(name);
    if (!v) return fallback;
    char* end = nullptr;
    const long parsed = std::strtol(v->c_str(), &end, 10);
    if (end == v->c_str() || *end != '\0' || parsed < min_value || parsed > (1L << 30))
      throw Error(name, "expected an integer >= " + std::to_string(min_value) + ", got '" + *v + "'");
    return int32_t(parsed);
  }
  std::optional<double> real(const std::string& name) {
    auto v = value(name);
    if (!v) return std::nullopt;
    char* end = nullptr;
    const double parsed = std::strtod(v->c_str(), &end);
    if (end == v->c_str() || *end != '\0' || !(parsed >= 0))
      throw Error(name, "expected a non-negative number, got '" + *v + "'");
    return parsed;
  }
  // Every token must have been consumed: an unknown option is an error, not silently ignored.
  void expect_all_used() const {
    for (size_t i = 0; i < tokens_.size(); ++i)
      if (!used_.count(i)) throw Error(tokens_[i], "unknown option or stray argument (see dash-attn help)");
  }

 private:
  std::vector<std::string> tokens_;
  std::set<size_t> used_;
};

struct Shape {
  dash::Problem problem;
  dash::TileShape tiles{};
  dash::GqaMode gqa = dash::GqaMode::SplitHeads;
};

// `studies`: plan and simulate take --any-hdim, which lifts the restriction to the head dims the kernels are
// built for (the planner and simulator work for any); check runs the kernels and never takes it.
inline Shape parse_shape(Args& args, bool studies) {
  Shape s;
  dash::Problem& p = s.problem;
  p.batch = args.integer("--batch", 1);
  p.heads_q = args.integer("--heads", 16);
  p.heads_kv = args.integer("--heads-kv", p.heads_q);
  p.seqlen_q = args.integer("--seqlen", 8192);
  p.seqlen_k = args.integer("--seqlen-k", p.seqlen_q);
  p.head_dim = args.integer("--hdim", 128);
  const auto& built = dash::kernel_head_dims();
  if (!(studies && args.has("--any-hdim")) && std::find(built.begin(), built.end(), p.head_dim) == built.end()) {
    std::string dims;
    for (int32_t d : built) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    throw Error("--hdim", std::to_string(p.head_dim) + " is not a head dim the kernels are built for (" + dims + ")" +
                              (studies ? "; pass --any-hdim to plan or simulate it anyway" : ""));
  }
  if (auto m = args.value("--mask")) p.mask = dash::parse_mask(*m);
  if (args.has("--causal")) p.mask = dash::Mask::Causal;
  if (auto w = args.value("--window")) {
    const auto comma = w->find(',');
    if (comma == std::string::npos) throw Error("--window", "expected L,R (e.g. 256,0), got '" + *w + "'");
    try {
      p.window_left = std::stoi(w->substr(0, comma));
      p.window_right = std::stoi(w->substr(comma + 1));
    } catch (const std::exception&) {
      throw Error("--window", "expected two integers L,R, got '" + *w + "'");
    }
    p.mask = dash::Mask::Window;
  }
  s.tiles.block_m = args.integer("--block-m", 0, 0);
  s.tiles.block_n = args.integer("--block-n", 0, 0);
  if ((s.tiles.block_m == 0) != (s.tiles.block_n == 0))
    throw Error("--block-m", "give both --block-m and --block-n, or neither");
  if (s.tiles.block_m == 0) s.tiles = dash::default_backward_tiles(p.head_dim);
  if (auto g = args.value("--gqa")) {
    if (*g == "split") s.gqa = dash::GqaMode::SplitHeads;
    else if (*g == "pack") s.gqa = dash::GqaMode::PackGroup;
    else if (*g == "auto") s.gqa = dash::GqaMode::Auto;
    else throw Error("--gqa", "expected split, pack or auto, got '" + *g + "'");
  }
  p.validate();
  return s;
}

// `dash-attn check` (cli_check.cpp).
int cmd_check(Args& args);

} // namespace dash::cli
