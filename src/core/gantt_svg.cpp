// SPDX-License-Identifier: Apache-2.0
// gantt_svg.cpp — a self-contained SVG Gantt chart of a simulation: one lane per CTA, compute spans coloured
// by head (16 colours) and shaded by batch, dQ reduces as darker bars in the lower part of a lane, waits as solid
// red bars in the upper part, overheads grey, and the critical path as a thick black line (on a white halo)
// through the lanes of the steps it runs through, with thin connectors where it hops from CTA to CTA.
//
// Legibility: an H200 has 132 SMs and a 16k-token simulation has ~10^5 spans, so most spans are narrower
// than a pixel. The lane pitch shrinks with the number of CTAs (down to kMinLanePitch, past which the image
// grows), and the two things a reader looks for — waits and the critical path — get a minimum drawn width
// (kMinWaitPx, kMinCriticalPx) so that even the shortest stays visible. Lane labels thin out to one every
// few lanes when lanes are narrower than a label.
//
// Size control: spans are drawn per lane and bar (compute, reduce, wait). A span narrower than
// kMergeBelowPx pixels that starts within kMergeGapPx pixels of the end of the previous same-colour rectangle
// in its bar extends that rectangle instead of adding one (and a narrow rectangle absorbs the next span the
// same way). Wider spans stay separate, with thin white borders marking their bounds. Nothing visible at the
// chart's resolution is lost, and the file holds a few rectangles per pixel column and lane whatever the
// number of spans. Beyond kMaxRects rectangles the rest is not drawn and the chart says how many were
// skipped.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>

#include "dash/simulator.hpp"

namespace dash {
namespace {

constexpr double kPlotWidth = 1200;
constexpr double kLeftMargin = 70, kRightMargin = 20, kTopMargin = 48;
constexpr double kPlotHeightTarget = 960;            // lanes share this height ...
constexpr double kMaxLanePitch = 16, kMinLanePitch = 5; // ... within these bounds (then the image grows)
constexpr double kMinLabelPitch = 10;                // lane labels at least this far apart
constexpr double kAxisHeight = 36, kLegendHeight = 48;
constexpr double kCharWidth = 6.2; // legend text at font size 11, roughly, to place the next entry
constexpr size_t kMaxRects = 200000;
constexpr double kMergeBelowPx = 3; // spans narrower than this merge with a nearby same-colour rectangle
constexpr double kMergeGapPx = 1;   // "nearby": at most this far from its end
constexpr double kMinSpanPx = 0.33; // very short compute / reduce spans stay visible
constexpr double kMinWaitPx = 2;    // waits: the chart's point, so never thinner than this
constexpr double kMinCriticalPx = 5;

// Compute colours: 16 per cycle, eight hues (orange round to violet; the reds and pinks belong to waits) in
// a dark and a light shade. Head h takes hue (3h mod 8), so heads claimed one after another differ by three
// hues, and the dark shade for heads 0-7 of a cycle, the light one for 8-15.
constexpr double kHues[] = {30, 55, 95, 145, 180, 210, 240, 280};
constexpr int32_t kHueCount = sizeof(kHues) / sizeof(kHues[0]), kHueStride = 3;
constexpr double kDarkShade = 0.42, kLightShade = 0.66;
constexpr double kBatchSpread = 0.08; // lightness from the first sequence of a batch to the last: +-this
constexpr double kReduceShade = 0.7; // reduces: the unit's colour, darker
constexpr const char* kOverheadColour = "#9e9e9e";
constexpr const char* kWaitColour = "#e15759";
constexpr const char* kDkvColour = "#555555";
constexpr const char* kCriticalColour = "#000";

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A round tick step (1, 2 or 5 times a power of ten) giving about `target` ticks over `range`.
double tick_step(double range, int target) {
  const double raw = range / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

std::string tick_label(double t, double step) {
  char buf[32];
  const int decimals = step >= 1 ? 0 : int(std::ceil(-std::log10(step)));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, t);
  return buf;
}

// "#rrggbb" of an HSL colour (hue in degrees, saturation and lightness in [0, 1]); hex rather than hsl()
// because not every SVG renderer reads CSS colour functions.
std::string hsl_hex(double hue, double saturation, double lightness) {
  const double chroma = (1 - std::fabs(2 * lightness - 1)) * saturation;
  const double h = std::fmod(hue, 360.0) / 60.0;
  const double x = chroma * (1 - std::fabs(std::fmod(h, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (h < 1) r = chroma, g = x;
  else if (h < 2) r = x, g = chroma;
  else if (h < 3) g = chroma, b = x;
  else if (h < 4) g = x, b = chroma;
  else if (h < 5) r = x, b = chroma;
  else r = chroma, b = x;
  const double m = lightness - chroma / 2;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", int(std::lround((r + m) * 255)), int(std::lround((g + m) * 255)),
                int(std::lround((b + m) * 255)));
  return buf;
}

// Whether black text reads better than white on a "#rrggbb" fill (its luma above the middle).
bool is_light(const std::string& hex) {
  const long rgb = std::strtol(hex.c_str() + 1, nullptr, 16);
  const double luma = 0.299 * ((rgb >> 16) & 255) + 0.587 * ((rgb >> 8) & 255) + 0.114 * (rgb & 255);
  return luma > 140;
}

// Colours of a unit's spans: by head (kHues), so that neighbouring heads (claimed one after another) differ;
// a little lighter for each later sequence of the batch, so the same head of another sequence reads as a
// shade of the same colour.
class UnitPalette {
 public:
  explicit UnitPalette(const Plan& plan) : plan_(plan) {
    const Problem p = plan.problem();
    packed_ = plan.gqa_mode() == GqaMode::PackGroup;
    heads_ = packed_ ? p.heads_kv : p.heads_q;
    batch_ = p.batch;
  }

  // Head count per sequence, and what a head is here (a packed unit covers one KV head's group).
  int32_t heads() const { return heads_; }
  const char* head_kind() const { return packed_ ? "KV head" : "query head"; }
  int32_t batch() const { return batch_; }

  std::string compute(int64_t ticket) const { return colour(ticket, 1.0); }
  // Darker, but not so dark that a reduce reads as the black critical path.
  std::string reduce(int64_t ticket) const { return colour(ticket, kReduceShade); }
  std::string of_head(int32_t head, int32_t batch_index, double darken = 1.0) const {
    const double hue = kHues[head * kHueStride % kHueCount];
    const double shade = head / kHueCount % 2 == 0 ? kDarkShade : kLightShade;
    const double batch_offset = batch_ > 1 ? kBatchSpread * (2.0 * batch_index / (batch_ - 1) - 1) : 0;
    return hsl_hex(hue, 0.65, (shade + batch_offset) * darken);
  }

 private:
  std::string colour(int64_t ticket, double darken) const {
    const int32_t items = plan_.header.items_per_unit;
    if (items <= 0 || ticket < 0 || heads_ <= 0) return of_head(0, 0, darken);
    const dash_plan_header& h = plan_.header;
    const int64_t unit =
        dash_ticket_locate(h.flags, h.ticket_group_units, h.items_per_slot, h.num_units, items, int32_t(ticket)).unit;
    return of_head(head_of(int32_t(unit % heads_)), int32_t(unit / heads_), darken);
  }

  // The head a unit computes (dash/plan_format.h: split-heads units of a KV group run in dK/dV rank order).
  int32_t head_of(int32_t unit_in_batch) const {
    const int32_t group = plan_.header.group_size;
    if (packed_ || group <= 1 || int32_t(plan_.group_head_by_rank.size()) != group) return unit_in_batch;
    return unit_in_batch / group * group + plan_.group_head_by_rank[unit_in_batch % group];
  }

  const Plan& plan_;
  bool packed_ = false;
  int32_t heads_ = 1, batch_ = 1;
};

// Where and how one span is drawn inside its lane.
enum class Bar { Full, Lower, Upper }; // compute and overhead; reduce; wait

struct Style {
  Bar bar;
  std::string fill;
  double min_width;
};

Style style_of(const Span& s, const UnitPalette& palette) {
  switch (s.kind) {
    case SpanKind::Compute: return {Bar::Full, palette.compute(s.ticket), kMinSpanPx};
    case SpanKind::Reduce: return {Bar::Lower, s.visit < 0 ? kDkvColour : palette.reduce(s.ticket), kMinSpanPx};
    case SpanKind::Wait: return {Bar::Upper, kWaitColour, kMinWaitPx};
    case SpanKind::Overhead: return {Bar::Full, kOverheadColour, kMinSpanPx};
  }
  return {Bar::Full, "#000", kMinSpanPx};
}

class Chart {
 public:
  Chart(int32_t lanes, double makespan)
      : lanes_(lanes), makespan_(makespan > 0 ? makespan : 1),
        pitch_(std::clamp(kPlotHeightTarget / std::max(lanes, 1), kMinLanePitch, kMaxLanePitch)) {}

  double x(double t) const { return kLeftMargin + t / makespan_ * kPlotWidth; }
  double pitch() const { return pitch_; }
  double lane_y(int32_t lane) const { return kTopMargin + lane * pitch_; }
  double bar_height() const { return pitch_ - (pitch_ >= 10 ? 2 : 1); }
  double lane_middle(int32_t lane) const { return lane_y(lane) + bar_height() / 2; }
  double plot_bottom() const { return lane_y(lanes_); }
  double height() const { return plot_bottom() + kAxisHeight + kLegendHeight; }
  // Labels on every `label_every`-th lane, so that they never overlap.
  int32_t label_every() const {
    int32_t every = 1;
    while (every * pitch_ < kMinLabelPitch) every *= 2;
    return every;
  }

  // Bar geometry: compute/overhead the whole bar; reduces its lower 40%; waits its upper 60%.
  void bar_box(Bar bar, int32_t lane, double& y, double& h) const {
    const double top = lane_y(lane), full = bar_height();
    if (bar == Bar::Lower) {
      y = top + full * 0.6;
      h = full * 0.4;
    } else if (bar == Bar::Upper) {
      y = top;
      h = full * 0.6;
    } else {
      y = top;
      h = full;
    }
  }

 private:
  int32_t lanes_;
  double makespan_;
  double pitch_;
};

// Merges nearby same-colour rectangles per (lane, bar) and writes them out.
class RectWriter {
 public:
  RectWriter(const Chart& chart, std::ostringstream& out) : chart_(chart), out_(out) {}

  void add(int32_t lane, const Style& style, double x0, double x1) {
    Open& open = open_[std::make_pair(lane, style.bar)];
    const bool narrow = x1 - x0 < kMergeBelowPx || open.x1 - open.x0 < kMergeBelowPx;
    if (open.active && open.style.fill == style.fill && x0 <= open.x1 + kMergeGapPx && narrow) {
      open.x1 = std::max(open.x1, x1);
      return;
    }
    flush(lane, open);
    open = {true, style, x0, x1};
  }

  void finish() {
    for (auto& [key, open] : open_) flush(key.first, open);
  }
  size_t skipped() const { return skipped_; }

 private:
  struct Open {
    bool active = false;
    Style style{Bar::Full, "", 0};
    double x0 = 0, x1 = 0;
  };

  void flush(int32_t lane, Open& open) {
    if (!open.active) return;
    open.active = false;
    if (written_ >= kMaxRects) {
      ++skipped_;
      return;
    }
    double y, h;
    chart_.bar_box(open.style.bar, lane, y, h);
    const double w = std::max(open.x1 - open.x0, open.style.min_width);
    out_ << "<rect x=\"" << fmt(open.x0) << "\" y=\"" << fmt(y) << "\" width=\"" << fmt(w) << "\" height=\""
         << fmt(h) << "\" fill=\"" << open.style.fill << "\"/>\n";
    ++written_;
  }

  const Chart& chart_;
  std::ostringstream& out_;
  std::map<std::pair<int32_t, Bar>, Open> open_;
  size_t written_ = 0, skipped_ = 0;
};

// The critical path as two SVG path datas: `runs`, a horizontal stroke along each lane for each run of
// adjacent steps on one CTA (at least kMinCriticalPx long), and `hops`, a line from the end of one run to the
// start of the next where the path moves to another CTA (a release handed over, or a claim).
struct CriticalPathLines {
  std::string runs, hops;
};

CriticalPathLines critical_path_lines(const Chart& chart, const std::vector<CriticalStep>& path, int32_t lanes) {
  CriticalPathLines lines;
  struct Run {
    int32_t lane;
    double x0, x1;
  };
  std::vector<Run> runs;
  for (const CriticalStep& step : path) {
    if (step.cta < 0 || step.cta >= lanes) continue;
    const double x0 = chart.x(step.start), x1 = chart.x(step.end);
    if (!runs.empty() && runs.back().lane == step.cta && x0 <= runs.back().x1 + kMergeGapPx) {
      runs.back().x1 = std::max(runs.back().x1, x1);
    } else {
      runs.push_back({step.cta, x0, x1});
    }
  }
  std::ostringstream run_data, hop_data;
  for (size_t i = 0; i < runs.size(); ++i) {
    Run r = runs[i];
    if (r.x1 - r.x0 < kMinCriticalPx) { // widen about its middle
      const double middle = (r.x0 + r.x1) / 2;
      r.x0 = middle - kMinCriticalPx / 2;
      r.x1 = middle + kMinCriticalPx / 2;
    }
    const double y = chart.lane_middle(r.lane);
    run_data << "M" << fmt(r.x0) << " " << fmt(y) << "H" << fmt(r.x1);
    if (i > 0 && runs[i - 1].lane != r.lane)
      hop_data << "M" << fmt(runs[i - 1].x1) << " " << fmt(chart.lane_middle(runs[i - 1].lane)) << "L"
               << fmt(runs[i].x0) << " " << fmt(y);
  }
  lines.runs = run_data.str();
  lines.hops = hop_data.str();
  return lines;
}

void write_critical_path(std::ostringstream& out, const Chart& chart, const std::vector<CriticalStep>& path,
                         int32_t lanes) {
  const CriticalPathLines lines = critical_path_lines(chart, path, lanes);
  if (lines.runs.empty()) return;
  // Thick enough to see at any lane pitch, thinner than a lane so that the colour underneath still shows.
  const double width = std::clamp(chart.bar_height() * 0.6, 2.5, 4.0);
  out << "<g fill=\"none\" stroke-linecap=\"butt\">\n";
  if (!lines.hops.empty())
    out << "<path d=\"" << lines.hops << "\" stroke=\"" << kCriticalColour
        << "\" stroke-width=\"0.8\" stroke-opacity=\"0.55\"/>\n";
  out << "<path d=\"" << lines.runs << "\" stroke=\"#fff\" stroke-width=\"" << fmt(width + 2) << "\"/>\n";
  out << "<path d=\"" << lines.runs << "\" stroke=\"" << kCriticalColour << "\" stroke-width=\"" << fmt(width)
      << "\"/>\n";
  out << "</g>\n";
}

void write_lane_labels(std::ostringstream& out, const Chart& chart, int32_t lanes) {
  const int32_t every = chart.label_every();
  const double font = std::min(9.0, every * chart.pitch() - 1);
  out << "<g font-size=\"" << fmt(font) << "\" text-anchor=\"end\">\n";
  for (int32_t lane = 0; lane < lanes; lane += every)
    out << "<text x=\"" << fmt(kLeftMargin - 4) << "\" y=\"" << fmt(chart.lane_middle(lane) + font * 0.35)
        << "\">CTA " << lane << "</text>\n";
  out << "</g>\n";
}

void write_axis(std::ostringstream& out, const Chart& chart, double makespan) {
  const double bottom = chart.plot_bottom();
  out << "<g stroke=\"#333\" font-size=\"10\">\n";
  out << "<line x1=\"" << fmt(chart.x(0)) << "\" y1=\"" << fmt(bottom) << "\" x2=\"" << fmt(chart.x(makespan))
      << "\" y2=\"" << fmt(bottom) << "\"/>\n";
  if (makespan > 0) {
    const double step = tick_step(makespan, 10);
    for (int i = 0;; ++i) {
      const double t = i * step;
      if (t > makespan * (1 + 1e-9)) break;
      out << "<line x1=\"" << fmt(chart.x(t)) << "\" y1=\"" << fmt(bottom) << "\" x2=\"" << fmt(chart.x(t))
          << "\" y2=\"" << fmt(bottom + 4) << "\"/>";
      out << "<text x=\"" << fmt(chart.x(t)) << "\" y=\"" << fmt(bottom + 15)
          << "\" text-anchor=\"middle\" stroke=\"none\">" << tick_label(t, step) << "</text>\n";
    }
  }
  out << "<text x=\"" << fmt(chart.x(makespan / 2)) << "\" y=\"" << fmt(bottom + 30)
      << "\" text-anchor=\"middle\" stroke=\"none\">time (cost-model units; us for the H200 model)</text>\n";
  out << "</g>\n";
}

// Two rows: what each kind of mark is, then the colour of each head (first sequence's shade).
void write_legend(std::ostringstream& out, double y, const UnitPalette& palette) {
  struct Entry {
    std::string swatch; // a <rect> or <line> at (0, 0), 14 x 10
    const char* label;
  };
  auto box = [](const std::string& fill) {
    return "<rect width=\"14\" height=\"10\" fill=\"" + fill + "\"/>";
  };
  const Entry entries[] = {
      {box(palette.of_head(0, 0)), "compute (colour: see below)"},
      {box(palette.of_head(0, 0, kReduceShade)), "dQ reduce (lower bar)"},
      {box(kDkvColour), "dK/dV ordered add"},
      {box(kWaitColour), "wait for a turn (upper bar)"},
      {box(kOverheadColour), "segment overhead"},
      {"<line x1=\"0\" y1=\"5\" x2=\"14\" y2=\"5\" stroke=\"" + std::string(kCriticalColour) +
           "\" stroke-width=\"3\"/>",
       "critical path"}};
  double x = kLeftMargin;
  out << "<g font-size=\"11\">\n";
  for (const Entry& e : entries) {
    out << "<g transform=\"translate(" << fmt(x) << " " << fmt(y) << ")\">" << e.swatch << "</g><text x=\""
        << fmt(x + 18) << "\" y=\"" << fmt(y + 9) << "\">" << e.label << "</text>\n";
    x += 18 + kCharWidth * double(std::strlen(e.label)) + 24;
  }
  const double key_y = y + 20;
  std::string key = std::string("colour = ") + palette.head_kind();
  if (palette.heads() > 2 * kHueCount) key += " (16 colours, repeating)";
  if (palette.batch() > 1) key += "; lighter = later sequence of the batch";
  key += ":";
  out << "<text x=\"" << fmt(kLeftMargin) << "\" y=\"" << fmt(key_y + 9) << "\">" << key << "</text>\n";
  constexpr int32_t kMaxSwatches = 32;
  const int32_t shown = std::min(palette.heads(), kMaxSwatches);
  double sx = kLeftMargin + kCharWidth * double(key.size()) + 8;
  for (int32_t head = 0; head < shown; ++head, sx += 26) {
    out << "<rect x=\"" << fmt(sx) << "\" y=\"" << fmt(key_y) << "\" width=\"24\" height=\"12\" fill=\""
        << palette.of_head(head, 0) << "\"/><text x=\"" << fmt(sx + 12) << "\" y=\"" << fmt(key_y + 10)
        << "\" font-size=\"9\" text-anchor=\"middle\" fill=\"" << (is_light(palette.of_head(head, 0)) ? "#000" : "#fff")
        << "\">" << head << "</text>\n";
  }
  if (palette.heads() > shown)
    out << "<text x=\"" << fmt(sx + 4) << "\" y=\"" << fmt(key_y + 9) << "\">... (" << palette.heads()
        << " heads)</text>\n";
  out << "</g>\n";
}

} // namespace

std::string gantt_svg(const Plan& plan, const SimResult& result, int32_t max_ctas, const std::string& title) {
  int32_t ctas = int32_t(result.cta_busy.size());
  for (const Span& s : result.spans) ctas = std::max(ctas, s.cta + 1);
  const int32_t lanes = std::max(0, std::min(ctas, max_ctas));
  const Chart chart(lanes, result.makespan);
  const UnitPalette palette(plan);
  const double width = kLeftMargin + kPlotWidth + kRightMargin;

  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fmt(width) << "\" height=\""
      << fmt(chart.height()) << "\" viewBox=\"0 0 " << fmt(width) << " " << fmt(chart.height())
      << "\" font-family=\"sans-serif\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";

  std::ostringstream heading;
  heading << (title.empty() ? std::string("dash-attn simulated backward") : title) << " — makespan "
          << tick_label(result.makespan, 0.001) << ", idle " << tick_label(100 * result.idle_fraction, 0.1)
          << "%, waiting " << tick_label(100 * result.wait_fraction, 0.1) << "%";
  if (ctas > lanes) heading << " (first " << lanes << " of " << ctas << " CTAs)";
  if (result.deadlocked) heading << " — DEADLOCKED";
  out << "<text x=\"" << fmt(kLeftMargin) << "\" y=\"20\" font-size=\"14\" font-weight=\"bold\">"
      << escape_xml(heading.str()) << "</text>\n";
  out << "<text x=\"" << fmt(kLeftMargin) << "\" y=\"36\" font-size=\"11\">"
      << escape_xml(std::string("planner ") + planner_name(plan.planner()) + ", " + plan.problem().describe())
      << "</text>\n";
  write_lane_labels(out, chart, lanes);

  if (result.spans.empty()) {
    out << "<text x=\"" << fmt(kLeftMargin + 10) << "\" y=\"" << fmt(kTopMargin + 12)
        << "\" font-size=\"12\">no spans recorded (simulate with SimOptions::record_spans)</text>\n";
  }

  // Spans sorted per lane and bar by start time, so abutting rectangles merge.
  struct Drawn {
    const Span* span;
    Style style;
  };
  std::vector<Drawn> drawn;
  for (const Span& s : result.spans)
    if (s.cta >= 0 && s.cta < lanes) drawn.push_back({&s, style_of(s, palette)});
  std::stable_sort(drawn.begin(), drawn.end(), [](const Drawn& a, const Drawn& b) {
    return std::make_tuple(a.span->cta, a.style.bar, a.span->start) <
           std::make_tuple(b.span->cta, b.style.bar, b.span->start);
  });
  out << "<g stroke=\"#fff\" stroke-width=\"" << (chart.pitch() >= 10 ? "0.4" : "0.25") << "\">\n";
  RectWriter rects(chart, out);
  for (const Drawn& d : drawn) rects.add(d.span->cta, d.style, chart.x(d.span->start), chart.x(d.span->end));
  rects.finish();
  out << "</g>\n";
  if (rects.skipped() > 0)
    out << "<text x=\"" << fmt(kLeftMargin) << "\" y=\"" << fmt(chart.height() - 4) << "\" font-size=\"10\">"
        << rects.skipped() << " rectangles not drawn (size limit)</text>\n";

  write_critical_path(out, chart, result.critical_path, lanes);
  write_axis(out, chart, result.makespan);
  write_legend(out, chart.plot_bottom() + kAxisHeight + 6, palette);
  out << "</svg>\n";
  return out.str();
}

} // namespace dash
