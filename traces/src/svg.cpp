// Timeline -> SVG; see svg.hpp. Spans narrower than a pixel are merged with their neighbours of
// the same colour on the same lane, so a trace of a million kernels still gives a file a browser
// opens; the tooltip of a merged box says how many spans it holds.
#include "ht/traces/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>

#include "output.hpp"
#include "ht/traces/error.hpp"
#include "ht/traces/intervals.hpp"
#include "ht/traces/units.hpp"

namespace ht::traces {

namespace {

void append_escaped(std::string& out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters even when escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t')
          out.push_back(' ');
        else
          out.push_back(c);
    }
  }
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Slots of the schedule get fixed colours (compute slots warm/green, comm slots blue/purple) so
// that pictures of different runs read alike; other categories hash into a palette.
std::string colour_of(const std::string& category) {
  static const std::map<std::string, std::string> fixed = {
      {"pre_dispatch", "#f0a030"}, {"mlp", "#4caf50"},     {"mtp_post", "#8d6e63"},
      {"dispatch", "#1f77b4"},     {"combine", "#9467bd"}, {"kernel", "#7fb77e"},
      {"memcpy", "#bcbd22"},       {"memset", "#c7c7c7"},  {"cpu_op", "#a1c9f4"},
      {"nccl", "#17becf"},         {"all_to_all", "#3949ab"}};
  static const char* palette[] = {"#e377c2", "#ff9896", "#98df8a", "#aec7e8", "#ffbb78",
                                  "#c5b0d5", "#c49c94", "#dbdb8d", "#9edae5", "#f7b6d2",
                                  "#6b8e23", "#b8860b"};
  if (auto it = fixed.find(category); it != fixed.end()) return it->second;
  std::uint32_t h = 2166136261u;
  for (unsigned char c : category) h = (h ^ c) * 16777619u;
  return palette[h % (sizeof palette / sizeof palette[0])];
}

double nice_step(double range) {
  const double raw = range / 8;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

struct Lane {
  int device = 0;
  int stream = 0;
  std::string label;
  bool exposed_strip = false;  // the red band of a device rather than a stream
};

}  // namespace

std::string render_svg(const Timeline& timeline, const SvgOptions& options) {
  if (options.width_px < 100 || options.width_px > 100000 || options.lane_height_px < 4 ||
      options.lane_height_px > 1000)
    throw TraceError(TraceErrorCode::Argument, "SVG size out of range (width 100..100000 px, lane "
                                               "height 4..1000 px)");
  double t0 = 0, t1 = 0;
  bool any = false;
  for (const Span& s : timeline.spans) {
    if (!any) t0 = s.start_s, t1 = s.end_s();
    t0 = std::min(t0, s.start_s);
    t1 = std::max(t1, s.end_s());
    any = true;
  }
  if (options.from_s) t0 = *options.from_s;
  if (options.to_s) t1 = *options.to_s;
  if (!std::isfinite(t0) || !std::isfinite(t1))
    throw TraceError(TraceErrorCode::Argument, "SVG window bounds must be finite");
  if ((options.from_s || options.to_s) && !(t1 > t0))
    throw TraceError(TraceErrorCode::Argument, "empty SVG window: --from " + format_seconds(t0) +
                                                   " is not before --to " + format_seconds(t1));
  if (!(t1 > t0)) t1 = t0 + 1e-6;  // a timeline without extent still gets an axis

  // Lanes: devices ascending; per device the listed streams in their order, then unlisted ones.
  std::map<int, std::vector<int>> streams_of;
  std::map<std::pair<int, int>, std::string> names;
  std::set<std::pair<int, int>> seen;
  for (const StreamInfo& s : timeline.streams)
    if (seen.insert({s.device, s.stream}).second) {
      streams_of[s.device].push_back(s.stream);
      names[{s.device, s.stream}] = s.name;
    }
  std::set<std::pair<int, int>> extra;
  std::map<int, std::vector<Range>> compute, comm;
  for (const Span& s : timeline.spans) {
    if (!seen.count({s.device, s.stream})) extra.insert({s.device, s.stream});
    if (s.role == Role::Compute) compute[s.device].push_back({s.start_s, s.end_s()});
    if (s.role == Role::Comm) comm[s.device].push_back({s.start_s, s.end_s()});
  }
  for (const auto& [d, s] : extra) streams_of[d].push_back(s);
  std::vector<Lane> lanes;
  std::map<std::pair<int, int>, std::size_t> lane_of;
  for (const auto& [device, streams] : streams_of) {
    for (int s : streams) {
      lane_of[{device, s}] = lanes.size();
      std::string name = names.count({device, s}) ? names[{device, s}] : "";
      lanes.push_back({device, s,
                       "dev " + std::to_string(device) + " / " +
                           (name.empty() ? "stream " + std::to_string(s) : name),
                       false});
    }
    if (comm.count(device)) lanes.push_back({device, 0, "dev " + std::to_string(device) + " exposed comm", true});
  }

  const double left = 230, top = 44, width = options.width_px;
  const double lane_h = options.lane_height_px, strip_h = std::max(8.0, lane_h / 2.5);
  std::vector<double> lane_y;
  double y = top;
  for (const Lane& l : lanes) {
    lane_y.push_back(y);
    y += (l.exposed_strip ? strip_h : lane_h) + 4;
  }
  const double axis_y = y + 4;
  auto x_of = [&](double t) { return left + (std::clamp(t, t0, t1) - t0) / (t1 - t0) * width; };

  std::set<std::string> legend;
  std::string out;
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  const double total_w = left + width + 30;
  const double legend_y = axis_y + 40;
  std::size_t n_legend_rows = 0;
  {
    std::set<std::string> cats;
    for (const Span& s : timeline.spans) cats.insert(s.category);
    n_legend_rows = (cats.size() + 1 + 5) / 6;
  }
  const double total_h = legend_y + 20.0 * static_cast<double>(n_legend_rows) + 20;
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(total_w) + "\" height=\"" +
         num(total_h) + "\" viewBox=\"0 0 " + num(total_w) + " " + num(total_h) +
         "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out += "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" "
         "y=\"20\" font-size=\"15\" font-weight=\"bold\">";
  append_escaped(out, options.title.empty() ? "timeline: " + timeline.source : options.title);
  out += "</text>\n<text x=\"10\" y=\"36\" fill=\"#555\">window " + format_seconds(t0) + " .. " +
         format_seconds(t1) + " (" + format_seconds(t1 - t0) + "), " +
         std::to_string(timeline.spans.size()) + " spans</text>\n";

  // Grid and axis.
  const double step = nice_step(t1 - t0);
  out += "<g stroke=\"#e5e5e5\">\n";
  for (double t = std::ceil(t0 / step) * step; t <= t1 + step * 1e-9; t += step)
    out += "<line x1=\"" + num(x_of(t)) + "\" y1=\"" + num(top - 4) + "\" x2=\"" + num(x_of(t)) +
           "\" y2=\"" + num(axis_y) + "\"/>\n";
  out += "</g>\n<line x1=\"" + num(left) + "\" y1=\"" + num(axis_y) + "\" x2=\"" + num(left + width) +
         "\" y2=\"" + num(axis_y) + "\" stroke=\"black\"/>\n<g text-anchor=\"middle\">\n";
  for (double t = std::ceil(t0 / step) * step; t <= t1 + step * 1e-9; t += step) {
    const double tick = std::fabs(t) < step * 1e-9 ? 0.0 : t;
    out += "<line x1=\"" + num(x_of(t)) + "\" y1=\"" + num(axis_y) + "\" x2=\"" + num(x_of(t)) +
           "\" y2=\"" + num(axis_y + 5) + "\" stroke=\"black\"/><text x=\"" + num(x_of(t)) +
           "\" y=\"" + num(axis_y + 18) + "\">" + format_seconds(tick) + "</text>\n";
  }
  out += "</g>\n";

  // Lane labels and backgrounds.
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    const double h = lanes[i].exposed_strip ? strip_h : lane_h;
    out += "<rect x=\"" + num(left) + "\" y=\"" + num(lane_y[i]) + "\" width=\"" + num(width) +
           "\" height=\"" + num(h) + "\" fill=\"" + (lanes[i].exposed_strip ? "#fff0f0" : "#f7f7f7") +
           "\"/><text x=\"" + num(left - 6) + "\" y=\"" + num(lane_y[i] + h - 2) +
           "\" text-anchor=\"end\"" +
           (lanes[i].exposed_strip ? " fill=\"#d62728\" font-size=\"9\"" : "") + ">";
    append_escaped(out, lanes[i].label);
    out += "</text>\n";
  }

  // Spans, lane by lane, merging sub-pixel neighbours of one colour.
  std::vector<std::vector<const Span*>> per_lane(lanes.size());
  for (const Span& s : timeline.spans) {
    if (s.end_s() < t0 || s.start_s > t1) continue;
    per_lane[lane_of[{s.device, s.stream}]].push_back(&s);
  }
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    auto& spans = per_lane[i];
    std::stable_sort(spans.begin(), spans.end(),
                     [](const Span* a, const Span* b) { return a->start_s < b->start_s; });
    std::size_t k = 0;
    while (k < spans.size()) {
      const Span* s = spans[k];
      const std::string colour = colour_of(s->category);
      legend.insert(s->category);
      double x0 = x_of(s->start_s), x1 = x_of(s->end_s());
      std::size_t n = 1;
      while (k + n < spans.size() && x1 - x0 < 1.0) {
        const Span* next = spans[k + n];
        if (colour_of(next->category) != colour || x_of(next->start_s) > x1 + 0.5) break;
        x1 = std::max(x1, x_of(next->end_s()));
        ++n;
      }
      out += "<rect x=\"" + num(x0) + "\" y=\"" + num(lane_y[i]) + "\" width=\"" +
             num(std::max(x1 - x0, 0.5)) + "\" height=\"" + num(lane_h) + "\" fill=\"" + colour +
             "\" stroke=\"" + (s->role == Role::Comm ? "#333" : "none") +
             "\" stroke-width=\"0.4\"><title>";
      if (n == 1) {
        append_escaped(out, s->name);
        out += "\n";
        append_escaped(out, s->category);
        out += " (" + std::string(to_string(s->role)) + ")\nstart " +
               format_seconds(s->start_s) + ", duration " + format_seconds(s->duration_s);
        for (const auto& [key, value] : s->args) {
          out += "\n";
          append_escaped(out, key + "=" + value);
        }
      } else {
        out += std::to_string(n) + " spans of ";
        append_escaped(out, s->category);
        out += " from " + format_seconds(s->start_s);
      }
      out += "</title></rect>\n";
      k += n;
    }
  }

  // Exposed comm per device: comm time with no compute on the device (overlap.hpp).
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (!lanes[i].exposed_strip) continue;
    const int d = lanes[i].device;
    const RangeSet exposed = subtract(unite(comm[d]), unite(compute[d]));
    for (const Range& r : exposed) {
      if (r.end < t0 || r.begin > t1) continue;
      out += "<rect x=\"" + num(x_of(r.begin)) + "\" y=\"" + num(lane_y[i]) + "\" width=\"" +
             num(std::max(x_of(r.end) - x_of(r.begin), 0.5)) + "\" height=\"" + num(strip_h) +
             "\" fill=\"#d62728\"><title>exposed comm " + format_seconds(r.length()) + " at " +
             format_seconds(r.begin) + "</title></rect>\n";
    }
  }

  // Legend: exposed comm first, then the categories drawn.
  std::vector<std::pair<std::string, std::string>> entries = {{"exposed comm", "#d62728"}};
  for (const std::string& cat : legend) entries.push_back({cat.empty() ? "(no category)" : cat, colour_of(cat)});
  for (std::size_t j = 0; j < entries.size(); ++j) {
    const double lx = 10 + static_cast<double>(j % 6) * 230;
    const double ly = legend_y + 20 * static_cast<double>(j / 6);
    out += "<rect x=\"" + num(lx) + "\" y=\"" + num(ly - 10) + "\" width=\"12\" height=\"12\" fill=\"" +
           entries[j].second + "\"/><text x=\"" + num(lx + 16) + "\" y=\"" + num(ly) + "\">";
    append_escaped(out, entries[j].first);
    out += "</text>\n";
  }
  out += "</svg>\n";
  return out;
}

void write_svg(const Timeline& timeline, const std::string& path, const SvgOptions& options) {
  const std::string svg = render_svg(timeline, options);
  detail::write_output(path, "SVG", [&](std::ostream& os) { os << svg; });
}

}  // namespace ht::traces
