// SVG picture of any timeline: one lane per device stream, spans coloured by category (slot or
// kernel class), exposed comm as a red band under each device, a labelled time axis and a
// legend; hovering a span shows its name, times and args. Self-contained, opens in a browser.
#pragma once

#include <optional>
#include <string>

#include "ht/traces/timeline.hpp"

namespace ht::traces {

struct SvgOptions {
  std::optional<double> from_s;  // window start (seconds on the timeline's axis)
  std::optional<double> to_s;    // window end
  int width_px = 1400;           // drawing width of the time axis
  int lane_height_px = 18;
  std::string title;             // defaults to the timeline's source
};

// TraceError (Argument) for an empty or inverted window or a non-positive size.
std::string render_svg(const Timeline& timeline, const SvgOptions& options = {});
void write_svg(const Timeline& timeline, const std::string& path, const SvgOptions& options = {});

}  // namespace ht::traces
