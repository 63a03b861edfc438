// SPDX-License-Identifier: Apache-2.0
// dash-attn: the command-line tool. Plans and simulates backward schedules on any machine; the GPU
// commands (benchmarks, reproducibility checks) are added by the kernel code when CUDA is built.
//
//   dash-attn                      the main job: the benchmark grid on a 132-SM H200, every planner
//   dash-attn plan     [shape] --schedule NAME [--ctas P]
//   dash-attn simulate [shape] [--ctas P] [--svg FILE] [--svg-schedule NAME] [cost options]
//   dash-attn grid     [--ctas P] [cost options]
//   dash-attn check    [shape] [--runs N] [--schedule NAME] [--device cuda|cpu]
//   dash-attn help [COMMAND], dash-attn COMMAND --help
// Which command takes which option, and the help, come from one table (cli_args.hpp).
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dash/plan.hpp"
#include "dash/simulator.hpp"
#include "dash/varlen.hpp"
#include "cli_args.hpp"

namespace {

using dash::Error;
using dash::cli::Args;
using dash::cli::CommandSpec;
using dash::cli::Shape;
using dash::cli::parse_shape;

struct CostChoice {
  bool paper = false;
  std::optional<double> c, r, latency;
  std::optional<bool> overlap;
};

CostChoice parse_cost(Args& args) {
  CostChoice choice;
  if (auto kind = args.value("--cost")) {
    if (*kind == "paper") choice.paper = true;
    else if (*kind != "h200") throw Error("--cost", "expected h200 or paper, got '" + *kind + "'");
  }
  choice.c = args.real("--c");
  choice.r = args.real("--r");
  choice.latency = args.real("--latency");
  if (auto v = args.value("--overlap")) {
    if (*v != "0" && *v != "1") throw Error("--overlap", "expected 0 or 1, got '" + *v + "'");
    choice.overlap = (*v == "1");
  }
  return choice;
}

dash::CostModel make_cost(const CostChoice& choice, const dash::Problem& p, dash::TileShape tiles) {
  dash::CostModel cost = choice.paper ? dash::CostModel::paper(1.0, 0.25) : dash::CostModel::for_problem(p, tiles);
  if (choice.c) cost.compute_full = cost.compute_partial = *choice.c;
  if (choice.r) cost.reduce = *choice.r;
  if (choice.latency) cost.signal_latency = *choice.latency;
  if (choice.overlap) cost.overlap_reduce = *choice.overlap;
  if (cost.compute_full <= 0) throw Error("--c", "compute cost must be > 0");
  return cost;
}

struct Candidate {
  dash::Planner planner;
  std::optional<dash::Plan> plan;
  std::string rejected;
  dash::SimResult sim;
};

std::vector<Candidate> simulate_all(const Shape& s, int32_t ctas, const dash::CostModel& cost, bool spans,
                                    bool nondeterministic) {
  std::vector<Candidate> out;
  for (dash::Planner planner : dash::all_planners()) {
    Candidate c{planner, std::nullopt, "", {}};
    try {
      dash::PlanRequest req{s.problem, {dash::Schedule::Kind::Planner, planner}, ctas, s.tiles, s.gqa, &cost};
      c.plan = dash::build_plan(req);
      c.sim = dash::simulate(*c.plan, ctas, cost, {.record_spans = spans, .nondeterministic = nondeterministic});
    } catch (const Error& e) {
      c.rejected = e.what();
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// The plan `kind` picks, and its name. The balanced non-deterministic plan runs the ascending template in its own
// claim order (DASH_PLAN_ITEM_MAJOR without slots: a template cut into slots claims slot by slot).
std::pair<dash::Plan, std::string> chosen_plan(const Shape& s, int32_t ctas, const dash::CostModel& cost,
                                               dash::Schedule::Kind kind) {
  dash::PlanRequest req{s.problem, {kind, dash::Planner::Ascending}, ctas, s.tiles, s.gqa, &cost};
  dash::Plan plan = dash::build_plan(req);
  std::string name = std::string(dash::claimed_item_by_item(plan.header) ? "balanced " : "") +
                     dash::planner_name(plan.planner());
  if (dash::is_auto(s.gqa)) name += " (gqa " + std::string(dash::gqa_mode_name(plan.gqa_mode())) + ")";
  return {std::move(plan), std::move(name)};
}

std::string chosen_by(const Shape& s, int32_t ctas, const dash::CostModel& cost, dash::Schedule::Kind kind) {
  try {
    return chosen_plan(s, ctas, cost, kind).second;
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

// chosen_by and the pick's simulated makespan (the balanced plan has no row of its own in `simulate`).
std::string chosen_with_makespan(const Shape& s, int32_t ctas, const dash::CostModel& cost, dash::Schedule::Kind kind,
                                 bool nondeterministic) {
  try {
    const auto [plan, name] = chosen_plan(s, ctas, cost, kind);
    const dash::SimResult sim =
        dash::simulate(plan, ctas, cost, {.critical_path = false, .nondeterministic = nondeterministic});
    return name + ", makespan " + fixed(sim.makespan, 2);
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

// `plan --varlen`: the pack's processing order and, per sequence, the unit template plan_for gives its own shape.
int plan_varlen(const Shape& s, const std::string& lengths, int32_t ctas, const dash::Schedule& schedule) {
  if (s.tiles.block_m != dash::default_backward_tiles(s.problem.head_dim).block_m ||
      s.tiles.block_n != dash::default_backward_tiles(s.problem.head_dim).block_n)
    throw Error("--varlen", "a pack is planned in the kernels' tiles; drop --block-m / --block-n");
  const dash::cli::VarlenLengths l = dash::cli::parse_varlen(lengths);
  std::vector<int32_t> cu_q(1, 0), cu_k(1, 0);
  for (size_t i = 0; i < l.q.size(); ++i) {
    cu_q.push_back(int32_t(int64_t(cu_q.back()) + l.q[i]));
    cu_k.push_back(int32_t(int64_t(cu_k.back()) + l.k[i]));
  }
  dash::Problem problem = s.problem;
  problem.batch = int32_t(l.q.size());
  const auto t0 = std::chrono::steady_clock::now();
  const dash::Pack pack = dash::build_pack(problem, cu_q.data(), cu_k.data());
  const dash::VarlenPlan plan = dash::plan_for_pack(pack, schedule, ctas, s.gqa);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "varlen plan: " << pack.sequences.size() << " sequences, " << pack.total_q() << " query / "
            << pack.total_k() << " key rows; pack problem " << pack.problem.describe()
            << " (seqlen: the longest sequence)\n"
            << "  schedule " << schedule.name() << " on " << ctas << " CTAs: " << plan.templates.size()
            << " unit templates, " << plan.num_tickets << " tickets, wave " << plan.wave << ", "
            << plan.total_q_tiles << " Q tiles / " << plan.total_kv_tiles << " KV tiles (" << plan.tiles.block_m
            << " x " << plan.tiles.block_n << ")\n\n";
  std::cout << "  order  sequence  seqlen_q  seqlen_k  template  tickets\n";
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const dash_pack_sequence& q = plan.sequences[i];
    std::string tmpl = "-", tickets = "- (no queries or no keys: zero gradients)";
    if (q.template_index >= 0) {
      const dash::BoundPlan& b = plan.templates[size_t(q.template_index)];
      tmpl = "T" + std::to_string(q.template_index);
      tickets = "[" + std::to_string(q.ticket_begin) + ", " +
                std::to_string(int64_t(q.ticket_begin) + int64_t(b.header.num_units) * b.header.items_per_unit) + ")";
    }
    std::printf("  %5zu  %8d  %8d  %8d  %8s  %s\n", i, q.sequence, q.seqlen_q, q.seqlen_k, tmpl.c_str(),
                tickets.c_str());
  }
  std::cout << "\n  template  planner            gqa    items/unit  wave\n";
  for (size_t t = 0; t < plan.templates.size(); ++t) {
    const dash_plan_header& h = plan.templates[t].header;
    std::printf("  T%-7zu  %-17s  %-5s  %10d  %4d\n", t,
                dash::planner_name(static_cast<dash::Planner>(h.planner)),
                dash::gqa_mode_name(static_cast<dash::GqaMode>(h.gqa_mode)), h.items_per_unit,
                h.min_coresident_ctas);
  }
  if (!plan.note.empty()) std::cout << "\nnote: " << plan.note << "\n";
  std::cout << "\nplanned in " << fixed(ms, 2) << " ms\n";
  return 0;
}

int cmd_plan(Args& args) {
  // A pack's lengths come from --varlen alone: a --batch or --seqlen beside it would be ignored, so it is refused.
  for (const char* option : {"--batch", "--seqlen", "--seqlen-k"}) {
    if (args.has("--varlen") && args.has(option))
      throw Error(option, "--varlen gives the pack's sequences and their lengths; drop " + std::string(option));
  }
  const Shape s = parse_shape(args, true);
  const int32_t ctas = args.integer("--ctas", 132);
  const dash::Schedule schedule = dash::Schedule::parse(args.value("--schedule").value_or("auto"));
  const int32_t items = args.integer("--items", 16, 0);
  const std::optional<std::string> varlen = args.value("--varlen");
  args.expect_all_used();
  if (varlen) return plan_varlen(s, *varlen, ctas, schedule);
  const auto t0 = std::chrono::steady_clock::now();
  dash::PlanRequest req{s.problem, schedule, ctas, s.tiles, s.gqa, nullptr};
  const dash::Plan plan = dash::build_plan(req);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << dash::describe_plan(plan, items, items);
  std::cout << "\nbuilt and validated in " << fixed(ms, 2) << " ms\n";
  return 0;
}

// --svg-schedule NAME: one planner (the core's parse error names "schedule", which simulate does not take).
dash::Schedule svg_planner(const std::string& name) {
  dash::Schedule schedule;
  try {
    schedule = dash::Schedule::parse(name);
  } catch (const Error& e) {
    throw Error("--svg-schedule", std::string(e.what()).substr(e.argument().size() + 2));
  }
  if (schedule.kind != dash::Schedule::Kind::Planner)
    throw Error("--svg-schedule", "name one planner (ascending, descending, shift or symmetric-shift), not " + name);
  return schedule;
}

int cmd_simulate(Args& args) {
  const Shape s = parse_shape(args, true);
  const int32_t ctas = args.integer("--ctas", 132);
  const CostChoice cost_choice = parse_cost(args);
  const auto svg = args.value("--svg");
  const bool nondeterministic = args.has("--nondeterministic");
  std::optional<dash::Schedule> svg_schedule;
  if (auto name = args.value("--svg-schedule")) svg_schedule = svg_planner(*name);
  args.expect_all_used();
  if (svg_schedule && !svg) throw Error("--svg-schedule", "picks the schedule --svg draws; give --svg FILE too");
  // Every size limit before any planner or simulation runs.
  dash::check_plan_limits(s.problem, s.tiles, s.gqa, ctas);
  const dash::CostModel cost = make_cost(cost_choice, s.problem, s.tiles);

  std::cout << "problem  " << s.problem.describe() << "; tiles " << s.tiles.block_m << "x" << s.tiles.block_n
            << "; " << ctas << " CTAs; gqa " << dash::gqa_mode_name(s.gqa) << "\n";
  std::cout << "cost     " << cost.describe() << "\n\n";
  const auto candidates = simulate_all(s, ctas, cost, svg.has_value(), nondeterministic);
  double ascending = 0;
  for (const auto& c : candidates)
    if (c.planner == dash::Planner::Ascending && c.plan) ascending = c.sim.makespan;
  std::printf("%-16s %12s %8s %8s %10s %10s  %s\n", "planner", "makespan", "idle%", "wait%", "vs asc", "co-res",
              "critical path / note");
  const Candidate* best = nullptr;
  for (const auto& c : candidates) {
    if (!c.plan) {
      std::printf("%-16s %12s  rejected: %s\n", dash::planner_name(c.planner), "-", c.rejected.c_str());
      continue;
    }
    if (!best || c.sim.makespan < best->sim.makespan) best = &c;
    int computes = 0, reduces = 0, waits = 0;
    for (const auto& step : c.sim.critical_path) {
      computes += step.kind == dash::SpanKind::Compute;
      reduces += step.kind == dash::SpanKind::Reduce;
      waits += step.after_signal; // a step that started when another CTA's release reached it
    }
    std::printf("%-16s %12s %8s %8s %9sx %10d  %d compute, %d reduce, %d hand-offs%s%s\n",
                dash::planner_name(c.planner), fixed(c.sim.makespan, 2).c_str(),
                fixed(100 * c.sim.idle_fraction, 1).c_str(), fixed(100 * c.sim.wait_fraction, 1).c_str(),
                fixed(ascending / c.sim.makespan, 3).c_str(), c.plan->header.min_coresident_ctas, computes, reduces,
                waits, c.plan->note.empty() ? "" : "; ", c.plan->note.c_str());
  }
  const char* why = s.gqa != dash::GqaMode::AutoNondeterministic
                        ? " (offline table: the same for any batch, heads or CTA count)"
                    : s.problem.mask != dash::Mask::Full
                        ? " (non-deterministic: the balanced plan, one KV tile per item claimed item by item across "
                          "groups of units, where it fits and packed GQA units do not fill the CTAs; else the table's; "
                          "the rows above are the named plans)"
                    : s.problem.group_size() > 1
                        ? " (non-deterministic: the table's plan; the GQA mode from the whole problem, batch included)"
                        : " (non-deterministic: the table's plan)";
  std::cout << "\nauto picks " << chosen_with_makespan(s, ctas, cost, dash::Schedule::Kind::Auto, nondeterministic)
            << why << "; auto-fastest picks "
            << chosen_with_makespan(s, ctas, cost, dash::Schedule::Kind::AutoFastest, nondeterministic) << "\n";
  if (svg) {
    const Candidate* drawn = best;
    if (svg_schedule) {
      drawn = nullptr;
      for (const auto& c : candidates)
        if (c.planner == svg_schedule->planner) drawn = c.plan ? &c : nullptr;
      if (!drawn)
        throw Error("--svg-schedule", std::string(planner_name(svg_schedule->planner)) + " was rejected for this shape");
    }
    if (!drawn) throw Error("--svg", "no planner could run this shape");
    std::ofstream out(*svg);
    if (!out) throw Error("--svg", "cannot write " + *svg);
    out << dash::gantt_svg(*drawn->plan, drawn->sim, ctas,
                           std::string(dash::planner_name(drawn->planner)) + ": " + s.problem.describe());
    std::cout << "wrote " << *svg << " (" << dash::planner_name(drawn->planner) << "; " << ctas
              << " CTAs, one lane each)\n";
  }
  return 0;
}

// The benchmark protocol's grid (shared/docs/benchmark-protocol.md, outside the repo): bf16, hidden 2048, 16k tokens per batch.
int cmd_grid(Args& args) {
  const int32_t ctas = args.integer("--ctas", 132);
  const CostChoice cost_choice = parse_cost(args);
  args.expect_all_used();
  std::cout << "Simulated backward makespan per planner, " << ctas
            << " CTAs (the DASH paper's grid: hidden 2048, 16384 tokens; MHA)\n";
  std::cout << "Cost model: " << (cost_choice.paper ? "paper (c=1, r=0.25)" : "uncalibrated H200 estimate per tile shape")
            << "; times in model units (us for h200). Speed-up = ascending / planner.\n\n";
  std::printf("%-5s %-7s %6s %4s | %10s %10s %10s %10s | %-16s %6s | %-16s\n", "hdim", "mask", "seqlen", "B",
              "ascending", "descending", "shift", "sym-shift", "best", "x asc", "auto");
  double total_ms = 0;
  for (int32_t hdim : {64, 128}) {
    for (const char* mask : {"full", "causal"}) {
      for (int32_t seqlen : {512, 1024, 2048, 4096, 8192, 16384}) {
        Shape s;
        s.problem.batch = 16384 / seqlen;
        s.problem.heads_q = s.problem.heads_kv = 2048 / hdim;
        s.problem.seqlen_q = s.problem.seqlen_k = seqlen;
        s.problem.head_dim = hdim;
        s.problem.mask = dash::parse_mask(mask);
        s.tiles = dash::default_backward_tiles(hdim);
        const dash::CostModel cost = make_cost(cost_choice, s.problem, s.tiles);
        const auto t0 = std::chrono::steady_clock::now();
        const auto candidates = simulate_all(s, ctas, cost, false, false);
        total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::string cells;
        double asc = 0, best_time = 1e300;
        std::string best_name = "-";
        for (const auto& c : candidates) {
          char cell[32];
          if (c.plan) {
            std::snprintf(cell, sizeof cell, " %10.1f", c.sim.makespan);
            if (c.planner == dash::Planner::Ascending) asc = c.sim.makespan;
            if (c.sim.makespan < best_time) {
              best_time = c.sim.makespan;
              best_name = dash::planner_name(c.planner);
            }
          } else {
            std::snprintf(cell, sizeof cell, " %10s", "rejected");
          }
          cells += cell;
        }
        std::printf("%-5d %-7s %6d %4d |%s | %-16s %6.3f | %-16s\n", hdim, mask, seqlen, s.problem.batch,
                    cells.c_str(), best_name.c_str(), asc / best_time,
                    chosen_by(s, ctas, cost, dash::Schedule::Kind::Auto).c_str());
      }
    }
  }
  std::printf("\n(all plans built, validated and simulated in %.0f ms)\n", total_ms);
  // Plan building alone, for the largest shape of the grid (one 16k sequence, 16 heads, hdim 128).
  Shape largest;
  largest.problem.heads_q = largest.problem.heads_kv = 16;
  largest.problem.seqlen_q = largest.problem.seqlen_k = 16384;
  largest.problem.mask = dash::Mask::Causal;
  largest.tiles = dash::default_backward_tiles(128);
  std::printf("plan build + validation for %s (first call, template cache emptied):",
              largest.problem.describe().c_str());
  for (const std::string name : {"ascending", "descending", "shift", "symmetric-shift", "auto"}) {
    dash::clear_template_cache();  // the grid above built these templates already
    const auto t0 = std::chrono::steady_clock::now();
    dash::PlanRequest req{largest.problem, dash::Schedule::parse(name), ctas, largest.tiles, largest.gqa, nullptr};
    try {
      dash::build_plan(req);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf(" %s %.1f ms%s", name.c_str(), ms, name == "auto" ? "\n" : ",");
    } catch (const Error&) { // too few CTAs for it: the table above says so already
      std::printf(" %s rejected%s", name.c_str(), name == "auto" ? "\n" : ",");
    }
  }
#ifndef DASH_HAVE_CUDA
  std::cout << "This build has no CUDA kernels (built without nvcc): simulation only.\n";
#endif
  return 0;
}

// The core and the C ABI name the fields of dash::Problem, dash_problem and the plan request ("heads_kv",
// "problem.heads_kv", "num_ctas"); the user typed flags. Every error the CLI reports passes through here.
const std::map<std::string, std::string>& flags_of_fields() {
  static const std::map<std::string, std::string> flags = {
      {"batch", "--batch"},       {"heads_q", "--heads"},         {"heads_kv", "--heads-kv"},
      {"seqlen_q", "--seqlen"},   {"seqlen_k", "--seqlen-k"},     {"head_dim", "--hdim"},
      {"head_dim_v", "--hdim-v"},
      {"window", "--window"},     {"window_left", "--window L"}, {"window_right", "--window R"},
      {"mask", "--mask"},         {"mask_kind", "--mask"},        {"block_m", "--block-m"},
      {"block_n", "--block-n"},   {"num_ctas", "--ctas"},         {"schedule", "--schedule"},
      {"gqa_mode", "--gqa"}};
  return flags;
}

// The flag for an error's argument: "heads_kv" and "problem.heads_kv" are --heads-kv; others stay.
std::string flag_of_argument(const std::string& argument) {
  const std::string prefix = "problem.";
  const bool from_c_abi = argument.rfind(prefix, 0) == 0;
  const auto it = flags_of_fields().find(from_c_abi ? argument.substr(prefix.size()) : argument);
  return it == flags_of_fields().end() ? argument : it->second;
}

// Field names inside a message. Only unmistakable ones: "problem.<field>", and the fields with an underscore
// (heads_q, seqlen_k); a bare "batch", "mask" or "window" is as likely to be an English word.
std::string flags_in_text(const std::string& text) {
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (!word_char(text[i]) || (i > 0 && word_char(text[i - 1]))) {
      out += text[i++];
      continue;
    }
    size_t end = i;
    while (end < text.size() && word_char(text[end])) ++end;
    std::string word = text.substr(i, end - i);
    if (word == "problem" && end + 1 < text.size() && text[end] == '.' && word_char(text[end + 1])) {
      size_t field_end = end + 1;
      while (field_end < text.size() && word_char(text[field_end])) ++field_end;
      const std::string field = text.substr(end + 1, field_end - end - 1);
      if (flags_of_fields().count(field)) {
        out += flags_of_fields().at(field);
        i = field_end;
        continue;
      }
    }
    const auto it = flags_of_fields().find(word);
    out += it != flags_of_fields().end() && word.find('_') != std::string::npos ? it->second : word;
    i = end;
  }
  return out;
}

std::string in_cli_terms(const Error& e) {
  const std::string message = std::string(e.what()).substr(e.argument().size() + 2);
  return flag_of_argument(e.argument()) + ": " + flags_in_text(message);
}

int run(const CommandSpec& command, Args& args) {
  if (command.name == "plan") return cmd_plan(args);
  if (command.name == "simulate") return cmd_simulate(args);
  if (command.name == "grid") return cmd_grid(args);
  return dash::cli::cmd_check(args);
}

// `dash-attn help [COMMAND]`.
int cmd_help(int argc, char** argv) {
  if (argc == 0) {
    std::cout << dash::cli::overview();
    return 0;
  }
  if (argc > 1) throw Error("help", std::string("stray argument '") + argv[1] + "' (name one command)");
  const CommandSpec* command = dash::cli::find_command(argv[0]);
  if (!command) {
    std::string known;
    for (const CommandSpec& c : dash::cli::all_commands()) known += (known.empty() ? "" : ", ") + c.name;
    throw Error("help", std::string("unknown command '") + argv[0] + "' (commands: " + known + ")");
  }
  std::cout << dash::cli::command_help(*command);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "grid";
  const int rest_count = argc > 2 ? argc - 2 : 0;
  char** rest = argv + 2;
  try {
    if (name == "help" || name == "--help" || name == "-h") return cmd_help(rest_count, rest);
    const CommandSpec* command = dash::cli::find_command(name);
    if (!command) {
      std::cerr << "dash-attn: unknown command '" << name << "'\n\n" << dash::cli::overview();
      return 2;
    }
    Args args(*command, rest_count, rest);
    if (args.help_requested()) {
      std::cout << dash::cli::command_help(*command);
      return 0;
    }
    args.check();
    return run(*command, args);
  } catch (const Error& e) {
    std::cerr << "dash-attn: " << in_cli_terms(e) << "\n";
    return 2;
  }
}
