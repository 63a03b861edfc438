// SPDX-License-Identifier: Apache-2.0
// cli_args.hpp — the dash-attn commands' options and their parsing. One table says which options exist and
// which command takes which; from it come each command's help and the parser's errors: an unknown option
// (with the closest known one), an option the command does not take (and who does), an option given twice,
// a missing value, a stray argument. Also the problem shape options common to plan / simulate / check.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dash/kernel_table.hpp"
#include "dash/plan.hpp"

namespace dash::cli {

using dash::Error;

struct OptionSpec {
  std::string name;
  std::string value; // what follows it in the help ("N", "FILE"); empty for a flag such as --causal
  std::string group; // the heading it is listed under
  std::string help;
};

// The kernel table's (head dim, value head dim) pairs, "64, 96, 128, 192/128 and 256" (a pair as --hdim/--hdim-v).
inline std::string head_dims_text() { return dash::kernel_pairs_text(); }

// Every option of every command, in help order.
inline const std::vector<OptionSpec>& all_options() {
  static const std::vector<OptionSpec> options = {
      {"--batch", "N", "shape", "sequences (default 1)"},
      {"--heads", "N", "shape", "query heads (default 16)"},
      {"--heads-kv", "N", "shape", "KV heads, dividing --heads (default: --heads)"},
      {"--seqlen", "N", "shape", "query length (default 8192)"},
      {"--seqlen-k", "N", "shape", "key length (default: --seqlen)"},
      {"--hdim", "N", "shape", "head dim of q and k (default 128); with --hdim-v, a pair the kernels are built for:\n" +
       head_dims_text() + " (--hdim/--hdim-v; the backward at " +
       dash::kernel_pairs_text(dash::KernelRows::WithBackward) + " only)"},
      {"--hdim-v", "N", "shape",
       "head dim of v, o, dO and dV (default: --hdim; MLA-style 192/128: --hdim 192 --hdim-v 128)"},
      {"--any-hdim", "", "shape", "any head dim (studies: the planner and simulator take it; the kernels do not)"},
      {"--mask", "M", "shape", "full | causal | window (default full)"},
      {"--causal", "", "shape", "short for --mask causal"},
      {"--window", "L,R", "shape", "sliding window sizes (implies --mask window; -1 = unbounded side)"},
      {"--block-m", "N", "shape", "query rows per tile, with --block-n (default: the kernels' tiles for --hdim)"},
      {"--block-n", "N", "shape", "keys per tile, with --block-m"},
      {"--gqa", "MODE", "shape",
       "auto (default: auto's offline table picks split or pack, as dash_attn does) | split (one unit\n"
       "per query head) | pack (one unit per KV head) | auto-nondeterministic (as dash_attn's\n"
       "non-deterministic backward: pack where the packed units' work items fill --ctas, 3 rounds of it\n"
       "where the balanced plan fits; else, with schedule auto and a causal or window mask, the balanced\n"
       "plan where it fits; else split; such a plan runs no deterministic backward)"},
      {"--ctas", "P", "schedule", "co-resident CTAs (default 132, an H200's SMs)"},
      {"--schedule", "NAME", "schedule",
       "ascending | descending | shift | symmetric-shift | auto | auto-fastest (default auto)"},
      {"--varlen", "LENGTHS", "shape",
       "a pack of sequences instead of --batch x --seqlen: comma-separated lengths, each N (queries = keys)\n"
       "or Q:K, e.g. 300,1,129:200 (plan prints the pack's order and one template per sequence shape)"},
      {"--items", "N", "output", "items to print (default 16)"},
      {"--svg", "FILE", "output", "write a Gantt chart of one schedule, one lane per CTA"},
      {"--svg-schedule", "NAME", "output", "the planner the chart shows (default: the fastest)"},
      {"--cost", "KIND", "cost model", "h200 (default: uncalibrated estimate from the tile shape) | paper (c=1, r=0.25)"},
      {"--c", "X", "cost model", "compute cost per block (override)"},
      {"--r", "X", "cost model", "reduce cost per block (override)"},
      {"--latency", "X", "cost model", "release-to-waiter signal latency"},
      {"--overlap", "0|1", "cost model", "reduce in a separate store warp (1) or blocking, as in the DASH paper (0)"},
      {"--runs", "N", "run", "backward runs (default 5)"},
      {"--device", "D", "run", "cuda (default) | cpu (the CPU backend, fp32)"},
      {"--dtype", "T", "run", "bf16 (default) | fp16 (cuda)"},
      {"--nondeterministic", "", "run",
       "the unordered mode: dQ (and split-heads dK/dV) added in any order; check: to see the bits differ;\n"
       "simulate: no add waits for its turn (plans made with --gqa auto-nondeterministic that run only so\n"
       "are simulated so anyway)"},
      {"--seed", "N", "run", "input seed (default 0)"},
  };
  return options;
}

inline const OptionSpec* find_option(const std::string& name) {
  for (const OptionSpec& o : all_options())
    if (o.name == name) return &o;
  return nullptr;
}

struct CommandSpec {
  std::string name;
  std::string summary;
  std::vector<std::string> options;
  bool takes(const std::string& option) const {
    return std::find(options.begin(), options.end(), option) != options.end();
  }
};

namespace detail {
inline std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
inline const std::vector<std::string> kShape = {"--batch", "--heads", "--heads-kv", "--seqlen", "--seqlen-k",
                                                "--hdim",  "--hdim-v", "--mask",    "--causal",   "--window"};
inline const std::vector<std::string> kTiles = {"--block-m", "--block-n", "--gqa"};
inline const std::vector<std::string> kCost = {"--cost", "--c", "--r", "--latency", "--overlap"};
} // namespace detail

// The commands, in the order the overview lists them. `grid` is the default.
inline const std::vector<CommandSpec>& all_commands() {
  using detail::joined;
  static const std::vector<CommandSpec> commands = {
      {"grid", "simulate every planner over the benchmark grid (the default command)",
       joined({"--ctas"}, detail::kCost)},
      {"plan", "build one plan and print it: per-item visit sequences and per-dQ-tile orders",
       joined(joined(detail::kShape, {"--any-hdim", "--varlen"}),
              joined(detail::kTiles, {"--ctas", "--schedule", "--items"}))},
      {"simulate", "compare every planner on one shape: makespan, idle %, speed-up over ascending",
       joined(joined(joined(detail::kShape, {"--any-hdim"}), joined(detail::kTiles, {"--ctas"})),
              joined({"--svg", "--svg-schedule", "--nondeterministic"}, detail::kCost))},
      {"check", "run the backward N times on one shape and print a SHA-256 of dQ, dK, dV per run",
       joined(detail::kShape, {"--schedule", "--runs", "--device", "--dtype", "--nondeterministic", "--seed"})},
  };
  return commands;
}

inline const CommandSpec* find_command(const std::string& name) {
  for (const CommandSpec& c : all_commands())
    if (c.name == name) return &c;
  return nullptr;
}

// Why a command does not take an option, where the reason is not simply that the option is about
// something else: the mistakes a reader of another command's help is likely to make.
inline std::string why_not_taken(const std::string& command, const std::string& option) {
  struct Reason {
    const char* command;
    std::vector<std::string> options;
    const char* why;
  };
  static const std::vector<Reason> reasons = {
      {"simulate", {"--schedule"}, "it compares every schedule, and --svg-schedule picks the one --svg draws"},
      {"grid", {"--schedule"}, "it compares every schedule"},
      {"grid", detail::joined(detail::joined(detail::kShape, detail::kTiles), {"--any-hdim"}),
       "it runs the benchmark grid's own shapes"},
      {"check", {"--block-m", "--block-n"}, "it runs the kernels, which use their own tile shape"},
      {"check", {"--any-hdim"}, "it runs the kernels, which are built for some head dims only"},
      {"check", {"--ctas"}, "it plans for the GPU's own SM count, or 132 CTAs with --device cpu"},
      {"check", detail::kCost, "it runs the backward itself rather than the cost model"},
  };
  for (const Reason& r : reasons)
    if (command == r.command && std::find(r.options.begin(), r.options.end(), option) != r.options.end())
      return r.why;
  return "";
}

// "--schedule: not an option of `simulate` (it compares every schedule; `plan` and `check` take --schedule)".
inline Error not_taken_error(const std::string& command, const std::string& option) {
  std::vector<std::string> takers;
  for (const CommandSpec& c : all_commands())
    if (c.takes(option)) takers.push_back("`" + c.name + "`");
  std::string who;
  for (size_t i = 0; i < takers.size(); ++i)
    who += (i == 0 ? "" : i + 1 == takers.size() ? " and " : ", ") + takers[i];
  who = takers.size() == 1 ? "only " + who + " takes " + option : who + " take " + option;
  const std::string why = why_not_taken(command, option);
  return Error(option, "not an option of `" + command + "` (" + (why.empty() ? "" : why + "; ") + who + ")");
}

inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "unknown option", with a hint where one is cheap: the `--name=value` spelling, or a near miss (a typo, an
// underscore for a dash) among the options the command takes.
inline Error unknown_option_error(const CommandSpec& command, const std::string& token) {
  const std::string help = "dash-attn help " + command.name + " lists its options";
  const size_t equals = token.find('=');
  if (equals != std::string::npos && find_option(token.substr(0, equals)))
    return Error(token, "unknown option; write `" + token.substr(0, equals) + " " + token.substr(equals + 1) +
                            "`, with a space (" + help + ")");
  std::string closest;
  size_t best = 3; // suggest only within two edits
  for (const std::string& name : command.options) {
    const size_t d = edit_distance(token, name);
    if (d < best && d < name.size() / 2) best = d, closest = name;
  }
  return Error(token, "unknown option" + (closest.empty() ? "" : "; did you mean " + closest + "?") + " (" + help +
                          ")");
}

// The arguments of one command. All of them are read when it is constructed, against the command's option
// list; the first problem is kept, not thrown, so that `--help` anywhere still gets help: check() throws it.
class Args {
 public:
  Args(const CommandSpec& command, int argc, char** argv) : command_(command) {
    for (int i = 0; i < argc; ++i) {
      const std::string token = argv[i];
      if (token == "--help" || token == "-h") {
        help_ = true;
      } else if (token.size() < 2 || token[0] != '-') {
        note(Error(command.name, "stray argument '" + token + "' (options start with --; dash-attn help " +
                                     command.name + " lists them)"));
      } else if (const OptionSpec* spec = find_option(token); !spec) {
        note(unknown_option_error(command, token));
      } else if (!command.takes(token)) {
        note(not_taken_error(command.name, token));
        if (!spec->value.empty()) ++i; // its value is not a stray argument
      } else if (!spec->value.empty() && i + 1 >= argc) {
        note(Error(token, "expects a value (" + spec->value + ")"));
      } else {
        const std::string value = spec->value.empty() ? "" : argv[++i];
        if (!given_.emplace(token, value).second) note(Error(token, "given twice"));
      }
    }
  }

  const CommandSpec& command() const { return command_; }
  bool help_requested() const { return help_; }
  // Throws the first problem found in the arguments.
  void check() const {
    if (problem_) throw *problem_;
  }

  // Value of --name, or nullopt. Flags without values (--causal) are handled by has().
  std::optional<std::string> value(const std::string& name) {
    const auto it = given_.find(name);
    if (it == given_.end()) return std::nullopt;
    used_.insert(name);
    return it->second;
  }
  bool has(const std::string& name) { return value(name).has_value(); }
  int32_t integer(const std::string& name, int32_t fallback, int32_t min_value = 1) {
    auto v = value(name);
    if (!v) return fallback;
    char* end = nullptr;
    const long parsed = std::strtol(v->c_str(), &end, 10);
    if (end == v->c_str() || *end != '\0') throw Error(name, "expected an integer, got '" + *v + "'");
    if (parsed < min_value) throw Error(name, "must be >= " + std::to_string(min_value) + ", got " + *v);
    if (parsed > (1L << 30)) throw Error(name, "must be <= " + std::to_string(1L << 30) + ", got " + *v);
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
  // Every option the command's list accepted must have been read: one that was not is a dash-attn bug (the
  // list and the command disagree), reported rather than silently ignored.
  void expect_all_used() const {
    for (const auto& [name, value] : given_)
      if (!used_.count(name))
        throw Error(name, "listed as an option of `" + command_.name + "`, which ignored it (a dash-attn bug)");
  }

 private:
  void note(Error error) {
    if (!problem_) problem_ = std::move(error);
  }

  const CommandSpec& command_;
  std::map<std::string, std::string> given_;
  std::set<std::string> used_;
  std::optional<Error> problem_;
  bool help_ = false;
};

// `dash-attn help COMMAND`: the command's options, under their groups' headings.
inline std::string command_help(const CommandSpec& command) {
  std::string text = "usage: dash-attn " + command.name + " [OPTIONS]\n\n" + command.summary + "\n";
  std::vector<std::string> groups;
  for (const OptionSpec& o : all_options())
    if (std::find(groups.begin(), groups.end(), o.group) == groups.end()) groups.push_back(o.group);
  for (const std::string& group : groups) {
    std::string lines;
    for (const OptionSpec& o : all_options()) {
      if (o.group != group || !command.takes(o.name)) continue;
      std::string left = "  " + o.name + (o.value.empty() ? "" : " " + o.value);
      left.resize(std::max<size_t>(left.size() + 1, 22), ' ');
      std::string help = o.help;
      for (size_t at = help.find('\n'); at != std::string::npos; at = help.find('\n', at + 1))
        help.insert(at + 1, std::string(22, ' '));
      lines += left + help + "\n";
    }
    if (!lines.empty()) text += "\n" + group + ":\n" + lines;
  }
  return text;
}

// `dash-attn help`: the commands, and where to find their options.
inline std::string overview() {
  std::string text = "usage: dash-attn [COMMAND] [OPTIONS]\n\ncommands:\n";
  for (const CommandSpec& c : all_commands()) {
    std::string name = "  " + c.name;
    name.resize(13, ' ');
    text += name + c.summary + "\n";
  }
  text += "  help       this text; `dash-attn help COMMAND` (or `dash-attn COMMAND --help`) lists the options\n"
          "             COMMAND takes\n\n"
          "examples:\n"
          "  dash-attn simulate --seqlen 16384 --heads 16 --causal --svg gantt.svg\n"
          "  dash-attn plan --seqlen 1024 --heads 1 --causal --schedule symmetric-shift --items 4\n"
          "  dash-attn check --seqlen 2048 --heads 4 --causal --device cpu\n";
  return text;
}

struct Shape {
  dash::Problem problem;
  dash::TileShape tiles{};
  dash::GqaMode gqa = dash::GqaMode::Auto;  // as dash_attn and the C ABI's callers in this repo
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
  // 0 (the C ABI's "equal to head_dim") unless --hdim-v names another value head dim.
  const int32_t head_dim_v = args.integer("--hdim-v", p.head_dim);
  p.head_dim_v = head_dim_v == p.head_dim ? 0 : head_dim_v;
  if (!(studies && args.has("--any-hdim")) && dash::kernel_table_row(p.head_dim, p.head_dim_v).head_dim == 0) {
    const std::string anyway = studies ? "; pass --any-hdim to plan or simulate it anyway" : "";
    bool head_dim_built = false;
    for (const dash::KernelTableRow& row : dash::kKernelTable) head_dim_built |= row.head_dim == p.head_dim;
    if (!head_dim_built)
      throw Error("--hdim", std::to_string(p.head_dim) + " is not a head dim the kernels are built for (" +
                                head_dims_text() + ")" + anyway);
    throw Error("--hdim-v", std::to_string(head_dim_v) + " is not built with --hdim " + std::to_string(p.head_dim) +
                                " (the kernels' pairs: " + head_dims_text() + ")" + anyway);
  }
  if (auto m = args.value("--mask")) p.mask = dash::parse_mask(*m);
  if (args.has("--causal")) p.mask = dash::Mask::Causal;
  if (auto w = args.value("--window")) {
    const auto comma = w->find(',');
    if (comma == std::string::npos) throw Error("--window", "expected L,R (e.g. 256,0), got '" + *w + "'");
    // Each side a whole integer (std::stoi alone would take "256x" as 256).
    const auto side = [&](const std::string& text) {
      size_t used = 0;
      int value = 0;
      try {
        value = std::stoi(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (text.empty() || used != text.size()) throw Error("--window", "expected two integers L,R, got '" + *w + "'");
      return value;
    };
    p.window_left = side(w->substr(0, comma));
    p.window_right = side(w->substr(comma + 1));
    p.mask = dash::Mask::Window;
  }
  // 0 (absent) means the kernels' tiles; a tile shape given must be given whole.
  s.tiles.block_m = args.integer("--block-m", 0);
  s.tiles.block_n = args.integer("--block-n", 0);
  if ((s.tiles.block_m == 0) != (s.tiles.block_n == 0))
    throw Error(s.tiles.block_m == 0 ? "--block-n" : "--block-m", "give both --block-m and --block-n, or neither");
  if (s.tiles.block_m == 0) s.tiles = dash::default_backward_tiles(p.head_dim);
  if (auto g = args.value("--gqa")) {
    const std::optional<dash::GqaMode> mode = dash::gqa_mode_named(*g);
    if (!mode) throw Error("--gqa", "expected split, pack, auto or auto-nondeterministic, got '" + *g + "'");
    s.gqa = *mode;
  }
  p.validate();
  return s;
}

// --varlen LENGTHS: the pack's query and key lengths ("300,1,129:200": N for queries = keys, or Q:K).
struct VarlenLengths {
  std::vector<int32_t> q, k;
};
inline VarlenLengths parse_varlen(const std::string& text) {
  VarlenLengths out;
  const auto number = [&](const std::string& part) {
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || value < 0 || value > INT32_MAX)
      throw Error("--varlen", "expected comma-separated lengths N or Q:K (N >= 0), got '" + text + "'");
    return int32_t(value);
  };
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const size_t colon = item.find(':');
    out.q.push_back(number(item.substr(0, colon)));
    out.k.push_back(colon == std::string::npos ? out.q.back() : number(item.substr(colon + 1)));
    start = end + 1;
  }
  return out;
}

// `dash-attn check` (cli_check.cpp).
int cmd_check(Args& args);

} // namespace dash::cli
