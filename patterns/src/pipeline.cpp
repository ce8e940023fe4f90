// Pipeline allocation (reference sections 1.3 and 2.3, rules R5-R8 and G4). With pipes, segment k
// belongs to pp rank k % pp and virtual stage k / pp. Without pipes and with pp > 1, the legacy
// split cuts the flattened layers in physical units and must not cut a group.
#include "ht/patterns/pipeline.hpp"

#include <string>

namespace ht::patterns {
namespace {

[[noreturn]] void fail(Rule rule, const std::string& message, const ParsedPattern& parsed, int position = -1) {
  throw PatternError(rule, message, parsed.text, position);
}

std::string s(int v) { return std::to_string(v); }

// Physical character position in the full text of the item that starts at physical layer `p`
// (for carets on G4 errors); -1 when unknown.
int text_position_of_physical(const ParsedPattern& parsed, int physical) {
  int cursor = 0;
  for (const auto& item : parsed.items()) {
    if (physical < cursor + item.physical_count()) return item.position + (item.grouped ? 1 : 0) + (physical - cursor);
    cursor += item.physical_count();
  }
  return -1;
}

// Items covering physical layers [begin, end); G4 when a boundary cuts a group.
std::vector<Item> slice_physical(const ParsedPattern& parsed, int begin, int end) {
  std::vector<Item> out;
  int cursor = 0;
  for (const auto& item : parsed.items()) {
    int first = cursor, last = cursor + item.physical_count();  // [first, last)
    cursor = last;
    if (last <= begin || first >= end) continue;
    if (first < begin || last > end) {
      int cut = first < begin ? begin : end;
      fail(Rule::G4_SplitsGroup,
           "the pipeline split at physical layer " + s(cut) +
               " would cut a bracketed layer group; put '|' separators around groups to choose the stage boundaries",
           parsed, text_position_of_physical(parsed, cut));
    }
    out.push_back(item);
  }
  return out;
}

void check_config(const ParsedPattern& parsed, const PipelineConfig& config) {
  if (config.pp < 1) fail(Rule::BadArgument, "pipeline size must be >= 1, got " + s(config.pp), parsed);
  if (config.vpp && *config.vpp < 1) fail(Rule::BadArgument, "virtual pipeline size must be >= 1, got " + s(*config.vpp), parsed);
  if (config.first_stage_layers && *config.first_stage_layers < 0)
    fail(Rule::BadArgument, "first stage layer count must be >= 0", parsed);
  if (config.last_stage_layers && *config.last_stage_layers < 0)
    fail(Rule::BadArgument, "last stage layer count must be >= 0", parsed);
}

// The legacy pipe-less split: [offset, offset + size) in physical layers for one pp rank.
std::pair<int, int> legacy_range(const ParsedPattern& parsed, const PipelineConfig& config, int pp_rank) {
  const int n = parsed.physical_count();
  const int pp = config.pp;
  const auto& first = config.first_stage_layers;
  const auto& last = config.last_stage_layers;
  if (!first && !last) {
    if (n % pp != 0)
      fail(Rule::R7_UnevenSplit,
           s(n) + " layers do not divide evenly over " + s(pp) +
               " pipeline stages; add '|' separators or set first/last stage layer counts",
           parsed);
    return {pp_rank * (n / pp), n / pp};
  }
  const int f = first.value_or(0), l = last.value_or(0);
  const int middle_stages = pp - (first ? 1 : 0) - (last ? 1 : 0);
  const int middle = n - f - l;
  if (middle < 0 || (middle_stages == 0 && middle != 0) || (middle_stages > 0 && middle % middle_stages != 0))
    fail(Rule::R7_UnevenSplit,
         "the " + s(middle) + " middle layers do not divide evenly over " + s(middle_stages) +
             " middle pipeline stages",
         parsed);
  const int per_middle = middle_stages > 0 ? middle / middle_stages : 0;
  if (first && pp_rank == 0) return {0, f};
  if (last && pp_rank == pp - 1) return {n - l, l};
  return {(pp_rank - (first ? 1 : 0)) * per_middle + f, per_middle};
}

}  // namespace

int StageSlice::physical_count() const {
  int n = 0;
  for (const auto& it : items) n += it.physical_count();
  return n;
}

int logical_offset_of(const ParsedPattern& parsed, int physical) {
  if (physical < 0)
    fail(Rule::BadArgument, "physical layer offset " + s(physical) + " is out of range for a pattern of " +
                                s(parsed.physical_count()) + " layers",
         parsed);
  int cursor = 0, logical = 0;
  for (const auto& item : parsed.items()) {
    if (cursor == physical) return logical;
    if (physical < cursor + item.physical_count())
      fail(Rule::G4_SplitsGroup,
           "physical layer offset " + s(physical) + " falls inside a bracketed layer group", parsed,
           text_position_of_physical(parsed, physical));
    cursor += item.physical_count();
    ++logical;
  }
  if (cursor == physical) return logical;
  fail(Rule::BadArgument, "physical layer offset " + s(physical) + " is out of range for a pattern of " +
                              s(parsed.physical_count()) + " layers",
       parsed);
}

StageSlice select_stage(const ParsedPattern& parsed, const PipelineConfig& config, int pp_rank,
                        std::optional<int> vp_stage) {
  check_config(parsed, config);
  if (pp_rank < 0 || pp_rank >= config.pp)
    fail(Rule::BadArgument, "pp rank " + s(pp_rank) + " is outside [0, " + s(config.pp) + ")", parsed);
  if (vp_stage && *vp_stage < 0)
    fail(Rule::BadArgument, "virtual stage " + s(*vp_stage) + " is negative", parsed);
  if (vp_stage && config.vpp && *vp_stage >= *config.vpp)
    fail(Rule::R8_SegmentCount,
         "virtual stage " + s(*vp_stage) + " does not exist with " + s(*config.vpp) + " virtual stages per rank", parsed);
  const int nseg = std::max(1, parsed.segment_count());
  if (nseg > 1 && (config.first_stage_layers || config.last_stage_layers))
    fail(Rule::R5_PipesWithStageLayers,
         "first/last pipeline stage layer counts cannot be combined with '|' separators, which already "
         "define the stages",
         parsed, parsed.segments[1].position - 1);

  StageSlice slice;
  slice.pp_rank = pp_rank;
  slice.vp_stage = vp_stage.value_or(0);
  if (nseg == 1 && config.pp > 1) {
    if (vp_stage)
      fail(Rule::R6_VppWithoutPipes,
           "virtual pipelining needs '|' separators in the pattern to define the virtual stages", parsed);
    auto [offset, size] = legacy_range(parsed, config, pp_rank);
    slice.items = slice_physical(parsed, offset, offset + size);
    slice.physical_offset = offset;
    slice.logical_offset = logical_offset_of(parsed, offset);
    return slice;
  }
  if (nseg > 1 && nseg % config.pp != 0)
    fail(Rule::R8_SegmentCount,
         "the " + s(nseg) + " pipe-separated segments do not divide evenly over " + s(config.pp) +
             " pipeline ranks",
         parsed);
  const int index = slice.vp_stage * config.pp + pp_rank;
  if (index >= nseg)
    fail(Rule::R8_SegmentCount,
         "segment " + s(index) + " (pp rank " + s(pp_rank) + ", virtual stage " + s(slice.vp_stage) +
             ") does not exist: the pattern has " + s(nseg) + " segments",
         parsed);
  for (int k = 0; k < index; ++k) {
    slice.physical_offset += parsed.segments[static_cast<std::size_t>(k)].physical_count();
    slice.logical_offset += parsed.segments[static_cast<std::size_t>(k)].logical_count();
  }
  if (parsed.segment_count() > 0) slice.items = parsed.segments[static_cast<std::size_t>(index)].items;
  return slice;
}

std::vector<StageSlice> allocate_stages(const ParsedPattern& parsed, const PipelineConfig& config) {
  check_config(parsed, config);
  const int nseg = std::max(1, parsed.segment_count());
  int vstages = 1;
  if (nseg > 1) {
    if (nseg % config.pp != 0) (void)select_stage(parsed, config, 0, std::nullopt);  // raises R8
    vstages = nseg / config.pp;
    if (config.vpp && *config.vpp != vstages)
      fail(Rule::R8_SegmentCount,
           "the pattern has " + s(nseg) + " segments, but pp " + s(config.pp) + " x vpp " + s(*config.vpp) +
               " stages were asked for",
           parsed);
  } else if (config.vpp && *config.vpp > 1) {
    if (config.pp > 1) (void)select_stage(parsed, config, 0, 0);  // raises R6
    fail(Rule::R8_SegmentCount,
         "the pattern has 1 segment, but pp " + s(config.pp) + " x vpp " + s(*config.vpp) + " stages were asked for",
         parsed);
  }
  std::vector<StageSlice> out;
  const bool virtual_stages = nseg > 1 && config.pp * vstages == nseg && (config.vpp || vstages > 1);
  for (int v = 0; v < vstages; ++v)
    for (int r = 0; r < config.pp; ++r)
      out.push_back(select_stage(parsed, config, r, virtual_stages ? std::optional<int>(v) : std::nullopt));
  return out;
}

}  // namespace ht::patterns
