// SPDX-License-Identifier: Apache-2.0
// gantt_svg.cpp — a self-contained SVG Gantt chart of a simulation: one row per CTA, compute spans coloured
// by unit, dQ reduces as darker narrow bars under them, waits in translucent red, overheads grey, and the
// critical path outlined in black.
//
// Size control: spans are drawn per row and lane. A span narrower than kMergeBelowPx pixels that starts
// within kMergeGapPx pixels of the end of the previous same-style rectangle in its lane extends that
// rectangle instead of adding one (and a narrow rectangle absorbs the next span the same way). Wider spans
// stay separate, with thin white borders marking their bounds. Nothing visible at the chart's resolution is
// lost, and the file holds a few rectangles per pixel column and row whatever the number of spans (a 132-CTA,
// 270k-span simulation draws in ~0.4 MB). Beyond kMaxRects rectangles the rest is not drawn and the chart
// says how many were skipped.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>

#include "dash/simulator.hpp"

namespace dash {
namespace {

constexpr double kPlotWidth = 1200;
constexpr double kLeftMargin = 70, kRightMargin = 20, kTopMargin = 48;
constexpr double kRowHeight = 14, kRowGap = 2;
constexpr double kAxisHeight = 36, kLegendHeight = 28;
constexpr size_t kMaxRects = 200000;
constexpr double kMergeBelowPx = 3; // spans narrower than this merge with a nearby same-style rectangle
constexpr double kMergeGapPx = 1;   // "nearby": at most this far from its end

// Compute colours per unit (cycled) and their darker variants for the unit's reduces.
constexpr const char* kUnitColours[] = {"#4e79a7", "#59a14f", "#edc948", "#b07aa1", "#76b7b2", "#f28e2b"};
constexpr const char* kUnitDarkColours[] = {"#2b4a6b", "#32602c", "#8c7420", "#6b4563", "#3f6e6a", "#9a5511"};
constexpr size_t kPalette = sizeof(kUnitColours) / sizeof(kUnitColours[0]);
constexpr const char* kOverheadColour = "#9e9e9e";
constexpr const char* kWaitColour = "#e15759";
constexpr const char* kDkvColour = "#555555";

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

// Where and how one span is drawn inside its row.
struct Style {
  int lane;            // 0: full height (compute, overhead), 1: lower bar (reduce), 2: upper bar (wait)
  const char* fill;
  const char* extra;   // extra attributes
};

Style style_of(const Span& s, int32_t items_per_unit) {
  const size_t unit = items_per_unit > 0 && s.ticket >= 0 ? size_t(s.ticket / items_per_unit) : 0;
  switch (s.kind) {
    case SpanKind::Compute: return {0, kUnitColours[unit % kPalette], ""};
    case SpanKind::Reduce:
      return {1, s.visit < 0 ? kDkvColour : kUnitDarkColours[unit % kPalette], ""};
    case SpanKind::Wait: return {2, kWaitColour, " fill-opacity=\"0.45\""};
    case SpanKind::Overhead: return {0, kOverheadColour, ""};
  }
  return {0, "#000", ""};
}

class Chart {
 public:
  Chart(int32_t rows, double makespan) : rows_(rows), makespan_(makespan > 0 ? makespan : 1) {}

  double x(double t) const { return kLeftMargin + t / makespan_ * kPlotWidth; }
  double row_y(int32_t row) const { return kTopMargin + row * (kRowHeight + kRowGap); }
  double plot_bottom() const { return row_y(rows_); }
  double height() const { return plot_bottom() + kAxisHeight + kLegendHeight; }

  // Lane geometry: compute/overhead full height; reduces the lower 40%; waits the upper 60%.
  void lane_box(int lane, int32_t row, double& y, double& h) const {
    const double top = row_y(row);
    if (lane == 1) {
      y = top + kRowHeight * 0.6;
      h = kRowHeight * 0.4;
    } else if (lane == 2) {
      y = top;
      h = kRowHeight * 0.6;
    } else {
      y = top;
      h = kRowHeight;
    }
  }

 private:
  int32_t rows_;
  double makespan_;
};

// Merges nearby same-style rectangles per (row, lane) and writes them out.
class RectWriter {
 public:
  // merge_any_width: merge every nearby same-style rectangle, however wide (the critical path's outlines,
  // where one outline around a run of steps reads better than many).
  RectWriter(const Chart& chart, std::ostringstream& out, bool merge_any_width = false)
      : chart_(chart), out_(out), merge_any_width_(merge_any_width) {}

  void add(int32_t row, const Style& style, double x0, double x1) {
    Open& open = open_[std::make_pair(row, style.lane)];
    const bool narrow = merge_any_width_ || x1 - x0 < kMergeBelowPx || open.x1 - open.x0 < kMergeBelowPx;
    if (open.fill && std::strcmp(open.fill, style.fill) == 0 && x0 <= open.x1 + kMergeGapPx && narrow) {
      open.x1 = std::max(open.x1, x1);
      return;
    }
    flush(row, style.lane, open);
    open = {style.fill, style.extra, x0, x1};
  }

  void finish() {
    for (auto& [key, open] : open_) flush(key.first, key.second, open);
  }
  size_t skipped() const { return skipped_; }

 private:
  struct Open {
    const char* fill = nullptr;
    const char* extra = "";
    double x0 = 0, x1 = 0;
  };

  void flush(int32_t row, int lane, Open& open) {
    if (!open.fill) return;
    if (written_ >= kMaxRects) {
      ++skipped_;
    } else {
      double y, h;
      chart_.lane_box(lane, row, y, h);
      // At least a third of a pixel wide so very short spans stay visible.
      const double w = std::max(open.x1 - open.x0, 0.33);
      out_ << "<rect x=\"" << fmt(open.x0) << "\" y=\"" << fmt(y) << "\" width=\"" << fmt(w) << "\" height=\""
           << fmt(h) << "\"";
      if (*open.fill) out_ << " fill=\"" << open.fill << "\"";
      out_ << open.extra << "/>\n";
      ++written_;
    }
    open.fill = nullptr;
  }

  const Chart& chart_;
  std::ostringstream& out_;
  bool merge_any_width_;
  std::map<std::pair<int32_t, int>, Open> open_;
  size_t written_ = 0, skipped_ = 0;
};

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

void write_legend(std::ostringstream& out, double y) {
  struct Entry {
    const char* fill;
    const char* extra;
    const char* label;
  };
  const Entry entries[] = {{kUnitColours[0], "", "compute (colour = unit)"},
                           {kUnitDarkColours[0], "", "dQ reduce (lower bar)"},
                           {kDkvColour, "", "dK/dV ordered add"},
                           {kWaitColour, " fill-opacity=\"0.45\"", "wait for a turn"},
                           {kOverheadColour, "", "segment overhead"},
                           {"none", " stroke=\"#000\" stroke-width=\"1.5\"", "critical path"}};
  double x = kLeftMargin;
  out << "<g font-size=\"11\">\n";
  for (const Entry& e : entries) {
    out << "<rect x=\"" << fmt(x) << "\" y=\"" << fmt(y) << "\" width=\"14\" height=\"10\" fill=\"" << e.fill
        << "\"" << e.extra << "/><text x=\"" << fmt(x + 18) << "\" y=\"" << fmt(y + 9) << "\">" << e.label
        << "</text>\n";
    x += 190;
  }
  out << "</g>\n";
}

} // namespace

std::string gantt_svg(const Plan& plan, const SimResult& result, int32_t max_ctas, const std::string& title) {
  int32_t ctas = int32_t(result.cta_busy.size());
  for (const Span& s : result.spans) ctas = std::max(ctas, s.cta + 1);
  const int32_t rows = std::max(0, std::min(ctas, max_ctas));
  const Chart chart(rows, result.makespan);
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
  if (ctas > rows) heading << " (first " << rows << " of " << ctas << " CTAs)";
  if (result.deadlocked) heading << " — DEADLOCKED";
  out << "<text x=\"" << fmt(kLeftMargin) << "\" y=\"20\" font-size=\"14\" font-weight=\"bold\">"
      << escape_xml(heading.str()) << "</text>\n";
  out << "<text x=\"" << fmt(kLeftMargin) << "\" y=\"36\" font-size=\"11\">"
      << escape_xml(std::string("planner ") + planner_name(plan.planner()) + ", " + plan.problem().describe())
      << "</text>\n";

  out << "<g font-size=\"9\" text-anchor=\"end\">\n";
  for (int32_t r = 0; r < rows; ++r)
    out << "<text x=\"" << fmt(kLeftMargin - 4) << "\" y=\"" << fmt(chart.row_y(r) + kRowHeight - 3)
        << "\">CTA " << r << "</text>\n";
  out << "</g>\n";

  if (result.spans.empty()) {
    out << "<text x=\"" << fmt(kLeftMargin + 10) << "\" y=\"" << fmt(kTopMargin + 12)
        << "\" font-size=\"12\">no spans recorded (simulate with SimOptions::record_spans)</text>\n";
  }

  // Spans sorted per row and lane by start time, so abutting rectangles merge.
  std::vector<const Span*> drawn;
  for (const Span& s : result.spans)
    if (s.cta >= 0 && s.cta < rows) drawn.push_back(&s);
  const int32_t items_per_unit = plan.header.items_per_unit;
  std::stable_sort(drawn.begin(), drawn.end(), [&](const Span* a, const Span* b) {
    return std::make_tuple(a->cta, style_of(*a, items_per_unit).lane, a->start) <
           std::make_tuple(b->cta, style_of(*b, items_per_unit).lane, b->start);
  });
  out << "<g stroke=\"#fff\" stroke-width=\"0.4\">\n";
  RectWriter rects(chart, out);
  for (const Span* s : drawn)
    rects.add(s->cta, style_of(*s, items_per_unit), chart.x(s->start), chart.x(s->end));
  rects.finish();
  out << "</g>\n";
  if (rects.skipped() > 0)
    out << "<text x=\"" << fmt(kLeftMargin) << "\" y=\"" << fmt(chart.height() - 4) << "\" font-size=\"10\">"
        << rects.skipped() << " rectangles not drawn (size limit)</text>\n";

  // The critical path, outlined on top of the spans it runs through (runs of adjacent steps share an outline).
  out << "<g fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\">\n";
  RectWriter outlines(chart, out, true);
  for (const CriticalStep& step : result.critical_path)
    if (step.cta >= 0 && step.cta < rows)
      outlines.add(step.cta, Style{step.kind == SpanKind::Reduce ? 1 : 0, "", ""}, chart.x(step.start),
                   chart.x(step.end));
  outlines.finish();
  out << "</g>\n";

  write_axis(out, chart, result.makespan);
  write_legend(out, chart.plot_bottom() + kAxisHeight + 6);
  out << "</svg>\n";
  return out.str();
}

} // namespace dash
