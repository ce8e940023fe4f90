// Megatron's tokens-per-expert log read into the busiest EP rank's load (see expert_load_log.hpp).
#include "ht/schedule/expert_load_log.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/json_input.hpp"
#include "ht/schedule/error.hpp"

namespace ht::schedule {
namespace {

namespace fs = std::filesystem;

// A rank's file holds one line per (iteration, MoE layer); 94 layers of 256 microbatches of 16
// experts are about 2 MB an iteration.
constexpr std::uint64_t kLogFileLimit = 1024 * io::kMiB;

struct Key {
  std::int64_t iter = 0;
  int mtp_idx = -1;  // -1: the decoder
  int layer = 0;
  auto tie() const { return std::tie(iter, mtp_idx, layer); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

std::string layer_name(int mtp_idx, int layer) {
  return mtp_idx < 0 ? "layer " + std::to_string(layer)
                     : "mtp " + std::to_string(mtp_idx) + " layer " + std::to_string(layer);
}

[[noreturn]] void bad(const std::string& message) { throw ScheduleError(ErrorCode::BadLog, message); }

// rank<R>.jsonl -> R; -1 for any other name.
int rank_of(const fs::path& file) {
  static const std::regex pattern(R"(rank([0-9]{1,7})\.jsonl)");
  std::smatch m;
  const std::string name = file.filename().string();
  if (!std::regex_match(name, m, pattern)) return -1;
  return std::stoi(m[1].str());
}

std::vector<std::pair<int, fs::path>> log_files(const std::vector<fs::path>& paths) {
  std::vector<std::pair<int, fs::path>> files;
  for (const fs::path& given : paths) {
    std::error_code ec;
    if (!fs::exists(given, ec))
      throw ScheduleError(ErrorCode::Io,
                          "tokens-per-expert log " + io::quote_path(given.string()) + ": no such file or folder");
    if (fs::is_directory(given, ec)) {
      fs::path dir = given;
      if (fs::is_directory(given / "tokens_per_expert", ec)) dir = given / "tokens_per_expert";
      std::size_t found = 0;
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const int rank = rank_of(entry.path());
        if (rank < 0) continue;
        files.emplace_back(rank, entry.path());
        ++found;
      }
      if (ec) bad("cannot list the folder " + io::quote_path(dir.string()) + ": " + ec.message());
      if (found == 0)
        bad("no rank<R>.jsonl files in " + io::quote_path(dir.string()) +
            " (Megatron writes them to {save}/tokens_per_expert/ with --save-tokens-per-expert-interval)");
    } else {
      const int rank = rank_of(given);
      if (rank < 0)
        bad("tokens-per-expert log " + io::quote_path(given.string()) +
            " is not named rank<R>.jsonl: the name gives the rank");
      files.emplace_back(rank, given);
    }
  }
  std::sort(files.begin(), files.end());
  for (std::size_t i = 1; i < files.size(); ++i)
    if (files[i].first == files[i - 1].first)
      bad("two logs for rank " + std::to_string(files[i].first) + ": " + io::quote_path(files[i - 1].second.string()) +
          " and " + io::quote_path(files[i].second.string()));
  return files;
}

std::int64_t integer_field(const nlohmann::json& line, const char* key, const std::string& where, std::int64_t low) {
  const auto it = line.find(key);
  if (it == line.end()) bad(where + ": no \"" + key + "\"");
  if (!it->is_number_integer()) bad(where + ": \"" + key + "\" is not an integer");
  const bool huge = it->is_number_unsigned() && it->get<std::uint64_t>() > (std::uint64_t{1} << 62);
  if (huge || it->get<std::int64_t>() < low)
    bad(where + ": \"" + key + "\" is " + it->dump() + ", must be >= " + std::to_string(low) + " and below 2^62");
  return it->get<std::int64_t>();
}

// A layer or MTP index: a count of layers, far below 2^30.
int small_field(const nlohmann::json& line, const char* key, const std::string& where) {
  const std::int64_t v = integer_field(line, key, where, 0);
  if (v >= (1 << 30)) bad(where + ": \"" + key + "\" is " + std::to_string(v) + ", not a layer index");
  return static_cast<int>(v);
}

// Per key, per rank: the rows each forward's local experts received, summed.
using Records = std::map<Key, std::map<int, std::vector<double>>>;

void read_file(int rank, const fs::path& file, Records& records, int& local_experts, std::string& experts_from,
               std::int64_t& relogged) {
  std::string text;
  try {
    text = io::read_input_file(file, kLogFileLimit, "tokens-per-expert log");
  } catch (const io::IoError& e) {
    throw ScheduleError(ErrorCode::Io, e.what());
  }
  const std::string source = "tokens-per-expert log " + io::quote_path(file.string());
  std::size_t start = 0, line_no = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view raw(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = source + " line " + std::to_string(line_no);
    nlohmann::json line;
    try {
      line = io::parse_json(raw, where);
    } catch (const io::IoError& e) {
      bad(e.what());
    }
    if (!line.is_object()) bad(where + ": not a JSON object");
    Key key;
    key.iter = integer_field(line, "iter", where, 0);
    key.layer = small_field(line, "layer", where);
    const auto block = line.find("block");
    if (block == line.end() || !block->is_string()) bad(where + ": no \"block\" string");
    if (*block == "mtp") {
      key.mtp_idx = small_field(line, "mtp_idx", where);
    } else if (*block != "decoder") {
      bad(where + ": \"block\" is " + block->dump() + ", not \"decoder\" or \"mtp\"");
    }
    const auto tpe = line.find("tpe");
    if (tpe == line.end() || !tpe->is_array() || tpe->empty()) bad(where + ": \"tpe\" is not a list of forwards");
    std::vector<double> sums;
    sums.reserve(tpe->size());
    for (const auto& forward : *tpe) {
      if (!forward.is_array() || forward.empty()) bad(where + ": a \"tpe\" entry is not a list of expert rows");
      const int n = static_cast<int>(forward.size());
      if (local_experts == 0) {
        local_experts = n;
        experts_from = where;
      } else if (n != local_experts) {
        bad(where + ": " + std::to_string(n) + " local experts, where " + experts_from + " has " +
            std::to_string(local_experts));
      }
      double rows = 0;
      for (const auto& count : forward) {
        const bool negative = count.is_number_integer() && !count.is_number_unsigned() && count.get<std::int64_t>() < 0;
        if (!count.is_number_integer() || negative)
          bad(where + ": an expert's rows are " + count.dump() + ", not a count");
        rows += count.get<double>();
      }
      sums.push_back(rows);
    }
    // Megatron appends: a resumed run or a rerun of a step logs an iteration again; the last stands.
    auto& slot = records[key][rank];
    if (!slot.empty()) ++relogged;
    slot = std::move(sums);
  }
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 1;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t i = static_cast<std::size_t>(pos);
  const double frac = pos - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - frac) + v[i + 1] * frac : v[i];
}

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

}  // namespace

ExpertLoadReport read_expert_load_log(const std::vector<fs::path>& paths, int ep, int etp, int experts,
                                      int gpus_per_node) {
  if (ep < 1 || etp < 1 || gpus_per_node < 1) bad("the EP and expert-TP sizes and the GPUs a node must be >= 1");
  if (paths.empty()) bad("no tokens-per-expert logs given");
  const auto files = log_files(paths);

  Records records;
  int local_experts = 0;
  std::string experts_from;
  std::int64_t relogged = 0;
  for (const auto& [rank, file] : files) read_file(rank, file, records, local_experts, experts_from, relogged);
  if (records.empty()) bad("the tokens-per-expert logs hold no records");
  if (experts > 0 && static_cast<std::int64_t>(local_experts) * ep != experts)
    bad("EP " + std::to_string(ep) + " with " + std::to_string(local_experts) + " local experts a rank (" +
        experts_from + ") makes " + std::to_string(static_cast<std::int64_t>(local_experts) * ep) +
        " experts, not the " + std::to_string(experts) + " given: give the run's EP size");

  ExpertLoadReport report;
  report.ranks = static_cast<int>(files.size());
  report.ep = ep;
  report.etp = etp;
  report.gpus_per_node = gpus_per_node;
  report.local_experts = local_experts;
  report.relogged = relogged;
  const std::int64_t span = std::int64_t{etp} * ep;  // the ranks of one block of expert-TP x EP
  const auto first_of = [&](std::int64_t rank) { return static_cast<int>(rank % etp + span * (rank / span)); };
  const std::int64_t rank_limit = files.back().first;
  // Expert-TP copies see the same tokens and log the same rows; ranks etp apart hold other experts
  // (or other tokens) and do not, unless they are copies: then the run's expert-TP is larger.
  {
    std::int64_t pairs = 0, same = 0;
    for (const auto& [key, by_rank] : records)
      for (const auto& [rank, sums] : by_rank) {
        if ((rank / etp) % 2 != 0) continue;
        const auto next = by_rank.find(rank + etp);
        if (next == by_rank.end()) continue;
        ++pairs;
        same += next->second == sums;
      }
    if (pairs > 0 && same == pairs)
      bad("ranks " + std::to_string(etp) + " apart log the same rows in every forward: they are " +
          "expert-TP copies, so the run's expert-TP size is larger than " + std::to_string(etp) +
          " (Megatron's default is the TP size): give --etp");
  }

  struct Sum {
    double max = 0, mean = 0, node_max = 0;
  };
  std::map<std::int64_t, std::map<int, Sum>> per_iter;  // iteration -> group's first rank -> sums
  std::map<std::pair<int, int>, ExpertLoadLayer> layers;
  std::map<std::pair<int, int>, std::int64_t> layer_records;
  std::vector<double> ratios;
  std::vector<int> group_ranks;
  for (const auto& [key, by_rank] : records) {
    for (const auto& [rank, sums] : by_rank) {
      // The expert fold of rank_coords (config.cpp), from EP and expert-TP alone. Each group once, from the first of
      // its members present (a missing one is named below).
      const int first = first_of(rank);
      bool seen = false;
      for (std::int64_t m = first; m < rank; m += etp) seen |= by_rank.count(static_cast<int>(m)) > 0;
      if (seen) continue;
      std::vector<const std::vector<double>*> group;
      std::vector<std::int64_t> node_of;  // each member's node (global rank / GPUs a node)
      for (int k = 0; k < ep; ++k) {
        const std::int64_t member = first + std::int64_t{etp} * k;  // beyond every rank: missing
        const auto it = member > rank_limit ? by_rank.end() : by_rank.find(static_cast<int>(member));
        if (it == by_rank.end())
          bad("rank " + std::to_string(member) + " of the EP group of rank " + std::to_string(first) + " (EP " +
              std::to_string(ep) + ", expert-TP " + std::to_string(etp) + ") has no log of " +
              layer_name(key.mtp_idx, key.layer) + " in iteration " + std::to_string(key.iter) +
              ": give every rank's log, or the EP and expert-TP sizes the run used");
        if (it->second.size() != sums.size())
          bad("ranks " + std::to_string(first) + " and " + std::to_string(member) + " of one EP group log " +
              std::to_string(sums.size()) + " and " + std::to_string(it->second.size()) + " forwards of " +
              layer_name(key.mtp_idx, key.layer) + " in iteration " + std::to_string(key.iter));
        group.push_back(&it->second);
        node_of.push_back(member / gpus_per_node);
      }
      if (node_of.front() != node_of.back()) report.spans_nodes = true;
      group_ranks.push_back(first);
      Sum& total = per_iter[key.iter][first];
      auto& layer = layers[{key.mtp_idx, key.layer}];
      for (std::size_t j = 0; j < sums.size(); ++j) {
        double most = 0, all = 0;
        for (const auto* member : group) {
          most = std::max(most, (*member)[j]);
          all += (*member)[j];
        }
        if (all <= 0) {
          ++report.empty_records;
          continue;
        }
        const double mean = all / ep, ratio = most / mean;
        // A node's load: its members' rows over their number (the rank mean the node's NICs carry).
        double node_most = 0;
        for (std::size_t a = 0; a < group.size();) {
          double rows = 0;
          std::size_t b = a;
          for (; b < group.size() && node_of[b] == node_of[a]; ++b) rows += (*group[b])[j];
          node_most = std::max(node_most, rows / static_cast<double>(b - a));
          a = b;
        }
        total.max += most;
        total.mean += mean;
        total.node_max += node_most;
        ratios.push_back(ratio);
        layer.mean_ratio += ratio;
        layer.max_ratio = std::max(layer.max_ratio, ratio);
        ++layer_records[{key.mtp_idx, key.layer}];
      }
    }
  }
  if (ratios.empty()) bad("no expert received a row in the tokens-per-expert logs");
  std::sort(group_ranks.begin(), group_ranks.end());
  report.groups = static_cast<int>(std::unique(group_ranks.begin(), group_ranks.end()) - group_ranks.begin());
  report.records = static_cast<std::int64_t>(ratios.size());

  double factor_sum = 0, node_sum = 0;
  for (const auto& [iter, groups] : per_iter) {
    ExpertLoadIteration it;
    it.iter = iter;
    for (const auto& [first, s] : groups) {
      if (s.mean <= 0) continue;
      const double f = s.max / s.mean;
      if (f > it.factor) it.factor = f, it.slowest_group_rank = first;
      it.node_factor = std::max(it.node_factor, s.node_max / s.mean);
    }
    if (it.factor <= 0) continue;
    report.iterations.push_back(it);
    factor_sum += it.factor;
    node_sum += it.node_factor;
  }
  report.factor = factor_sum / static_cast<double>(report.iterations.size());
  report.node_factor = node_sum / static_cast<double>(report.iterations.size());
  report.median_ratio = quantile(ratios, 0.5);
  report.p90_ratio = quantile(ratios, 0.9);
  report.max_ratio = *std::max_element(ratios.begin(), ratios.end());
  for (auto& [k, layer] : layers) {
    const std::int64_t n = layer_records[k];
    if (n == 0) continue;
    layer.name = layer_name(k.first, k.second);
    layer.mean_ratio /= static_cast<double>(n);
    report.layers.push_back(layer);
  }
  std::stable_sort(report.layers.begin(), report.layers.end(),
                   [](const ExpertLoadLayer& a, const ExpertLoadLayer& b) { return a.mean_ratio > b.mean_ratio; });
  return report;
}

std::string expert_load_table(const ExpertLoadReport& r, std::size_t top_layers) {
  std::ostringstream out;
  out << "ranks        " << r.ranks << " logs, EP " << r.ep << " x expert-TP " << r.etp << ": " << r.groups
      << " EP groups of " << r.local_experts << " local experts a rank (" << r.local_experts * r.ep << " experts)\n";
  out << "records      " << r.records << " (EP group, layer, forward)";
  if (r.empty_records > 0) out << ", " << r.empty_records << " without a row left out";
  if (r.relogged > 0) out << ", " << r.relogged << " lines logged again (a resumed run?): the last kept";
  out << "\n";
  out << "busiest rank " << fixed(r.factor, 3) << "x the mean over a step (the slowest EP group, "
      << r.iterations.size() << (r.iterations.size() == 1 ? " iteration" : " iterations") << ")\n";
  if (r.spans_nodes)
    out << "busiest node " << fixed(r.node_factor, 3) << "x the mean (a node's ranks pooled, "
        << "what DeepEP's RDMA copies follow)\n";
  out << "one forward  median " << fixed(r.median_ratio, 3) << "x, p90 " << fixed(r.p90_ratio, 3) << "x, max "
      << fixed(r.max_ratio, 3) << "x\n";
  if (r.iterations.size() > 1) {
    out << "\niteration   busiest  slowest group (first rank)\n";
    for (const auto& it : r.iterations) {
      char line[96];
      std::snprintf(line, sizeof line, "%-10lld  %6.3fx  %d\n", static_cast<long long>(it.iter), it.factor,
                    it.slowest_group_rank);
      out << line;
    }
  }
  if (top_layers > 0 && !r.layers.empty()) {
    out << "\nhottest layers (index inside the model chunk)\nlayer              mean     max\n";
    for (std::size_t i = 0; i < std::min(top_layers, r.layers.size()); ++i) {
      char line[96];
      std::snprintf(line, sizeof line, "%-16s %6.3fx %6.3fx\n", r.layers[i].name.c_str(), r.layers[i].mean_ratio,
                    r.layers[i].max_ratio);
      out << line;
    }
  }
  out << "\nsimulate with: --expert-load " << fixed(r.factor, 3);
  if (r.spans_nodes) out << " --expert-node-load " << fixed(r.node_factor, 3);
  out << "\n";
  return out.str();
}

std::string expert_load_json(const ExpertLoadReport& r) {
  nlohmann::json j;
  j["ranks"] = r.ranks;
  j["ep"] = r.ep;
  j["etp"] = r.etp;
  j["groups"] = r.groups;
  j["local_experts"] = r.local_experts;
  j["records"] = r.records;
  j["empty_records"] = r.empty_records;
  j["relogged"] = r.relogged;
  j["expert_load"] = r.factor;
  j["expert_node_load"] = r.node_factor;
  j["gpus_per_node"] = r.gpus_per_node;
  j["spans_nodes"] = r.spans_nodes;
  j["forward"] = {{"median", r.median_ratio}, {"p90", r.p90_ratio}, {"max", r.max_ratio}};
  j["iterations"] = nlohmann::json::array();
  for (const auto& it : r.iterations)
    j["iterations"].push_back({{"iter", it.iter},
                               {"expert_load", it.factor},
                               {"expert_node_load", it.node_factor},
                               {"slowest_group_rank", it.slowest_group_rank}});
  j["layers"] = nlohmann::json::array();
  for (const auto& l : r.layers)
    j["layers"].push_back({{"layer", l.name}, {"mean", l.mean_ratio}, {"max", l.max_ratio}});
  return j.dump(1) + "\n";
}

}  // namespace ht::schedule
