// Plan <-> JSON (see plan_json.hpp). The writer fixes the key order so equal plans give equal
// bytes; the reader checks every key, type and enum, then the plan's structure.
#include "ht/schedule/plan_json.hpp"

#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "ht/schedule/check.hpp"
#include "ht/schedule/error.hpp"
#include "files.hpp"

namespace ht::schedule {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

[[noreturn]] void bad(const std::string& message) { throw ScheduleError(ErrorCode::BadPlan, message); }

ojson ints(const std::vector<int>& v) {
  ojson a = ojson::array();
  for (int x : v) a.push_back(x);
  return a;
}

// Reads the fields of one JSON object and rejects keys nobody asked for.
class ObjectReader {
 public:
  ObjectReader(const json& value, std::string where) : value_(value), where_(std::move(where)) {
    if (!value_.is_object()) bad(where_ + " must be a JSON object");
  }

  const json& at(const std::string& key) {
    const auto it = value_.find(key);
    if (it == value_.end()) bad(where_ + " lacks the key \"" + key + "\"");
    used_.insert(key);
    return *it;
  }
  int integer(const std::string& key) { return as_int(at(key), where_ + "." + key); }
  double number(const std::string& key) {
    const json& v = at(key);
    if (!v.is_number()) bad(where_ + "." + key + " must be a number, got " + v.dump());
    return v.get<double>();
  }
  bool has(const std::string& key) const { return value_.contains(key); }
  double number_or(const std::string& key, double fallback) { return has(key) ? number(key) : fallback; }
  bool boolean(const std::string& key) {
    const json& v = at(key);
    if (!v.is_boolean()) bad(where_ + "." + key + " must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string string(const std::string& key) {
    const json& v = at(key);
    if (!v.is_string()) bad(where_ + "." + key + " must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  const json& array(const std::string& key) {
    const json& v = at(key);
    if (!v.is_array()) bad(where_ + "." + key + " must be an array");
    return v;
  }
  std::vector<int> int_array(const std::string& key) {
    std::vector<int> out;
    const json& a = array(key);
    for (std::size_t i = 0; i < a.size(); ++i)
      out.push_back(as_int(a[i], where_ + "." + key + "[" + std::to_string(i) + "]"));
    return out;
  }
  template <typename E>
  E enumeration(const std::string& key, std::optional<E> (*parse)(std::string_view)) {
    const std::string text = string(key);
    const auto e = parse(text);
    if (!e) bad(where_ + "." + key + " has the unknown value \"" + text + "\"");
    return *e;
  }
  void done() const {
    for (const auto& item : value_.items())
      if (!used_.count(item.key())) bad(where_ + " has the unknown key \"" + item.key() + "\"");
  }

  static int as_int(const json& v, const std::string& where) {
    if (!v.is_number_integer()) bad(where + " must be an integer, got " + v.dump());
    const auto x = v.get<long long>();
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      bad(where + " = " + v.dump() + " is out of range");
    return static_cast<int>(x);
  }

 private:
  const json& value_;
  std::string where_;
  std::set<std::string> used_;
};

}  // namespace

std::string plan_to_json(const Plan& plan) {
  ojson j;
  j["format"] = kPlanFormatName;
  j["version"] = plan.version;
  j["schedule"] = plan.schedule;
  j["pattern"] = plan.pattern;
  j["pp"] = plan.pp;
  j["vpp"] = plan.chunks;
  j["ep"] = plan.ep;
  j["dp"] = plan.dp;
  j["microbatches"] = plan.microbatches;
  j["tp"] = plan.tp;
  j["cp"] = plan.cp;
  j["etp"] = plan.etp;
  j["overlap"] = plan.overlap;
  j["delay_wgrad"] = plan.delay_wgrad;
  j["account_embedding"] = plan.account_embedding;
  j["account_loss"] = plan.account_loss;
  if (plan.world != 0) j["world"] = plan.world;
  if (plan.ep_comm_sms != 0) j["ep_comm_sms"] = plan.ep_comm_sms;
  if (plan.cuda_graphs) j["cuda_graphs"] = true;
  if (plan.expert_load_factor != 1) j["expert_load_factor"] = plan.expert_load_factor;
  if (plan.expert_node_load_factor != 1) j["expert_node_load_factor"] = plan.expert_node_load_factor;
  ojson works = ojson::array();
  for (const Work& w : plan.works) {
    ojson kernels = ojson::array();
    for (const Kernel& k : w.kernels)
      kernels.push_back(k.fp8 ? ojson::array({to_string(k.kind), k.delayable, k.m, k.n, k.k, k.groups, k.flops, k.bytes, true})
                              : ojson::array({to_string(k.kind), k.delayable, k.m, k.n, k.k, k.groups, k.flops, k.bytes}));
    works.push_back(std::move(kernels));
  }
  j["works"] = std::move(works);
  ojson nodes = ojson::array();
  for (const Node& n : plan.nodes) {
    ojson o;
    o["id"] = n.id;
    o["rank"] = n.rank;
    o["stream"] = to_string(n.stream);
    o["slot"] = to_string(n.slot);
    o["phase"] = to_string(n.phase);
    o["part"] = to_string(n.part);
    o["microbatch"] = n.microbatch;
    o["vp_stage"] = n.vp_stage;
    o["layer"] = n.layer;
    o["mtp"] = n.mtp;
    o["symbols"] = n.symbols;
    o["flops"] = n.flops;
    o["mem_bytes"] = n.mem_bytes;
    ojson sends = ojson::array();
    for (const Transfer& t : n.sends) sends.push_back(ojson::array({t.peer, t.bytes}));
    o["sends"] = std::move(sends);
    o["collective"] = n.collective;
    o["work"] = n.work;
    o["deps"] = ints(n.deps);
    nodes.push_back(std::move(o));
  }
  j["nodes"] = std::move(nodes);
  ojson collectives = ojson::array();
  for (const Collective& c : plan.collectives) {
    ojson o = {{"id", c.id}, {"kind", to_string(c.kind)}, {"group", to_string(c.group)}, {"nodes", ints(c.nodes)}};
    if (!c.ranks.empty()) o["ranks"] = ints(c.ranks);
    collectives.push_back(std::move(o));
  }
  j["collectives"] = std::move(collectives);
  ojson ranks = ojson::array();
  for (const RankPlan& r : plan.ranks) {
    ojson o = {{"rank", r.rank},       {"pp_rank", r.pp_rank}, {"ep_rank", r.ep_rank}, {"dp_rank", r.dp_rank},
               {"tp_rank", r.tp_rank}, {"cp_rank", r.cp_rank}, {"issue", ints(r.issue)}};
    if (r.original >= 0) {
      o["original"] = r.original;
      o["stands_for"] = r.stands_for;
    }
    ranks.push_back(std::move(o));
  }
  j["ranks"] = std::move(ranks);
  return j.dump() + "\n";
}

Plan plan_from_json(std::string_view text) {
  const json j = detail::parse_json(text, "plan file", ErrorCode::BadPlan);
  ObjectReader top(j, "plan");
  const json& format = top.at("format");
  if (!format.is_string() || format.get<std::string>() != kPlanFormatName)
    bad("not a plan file: \"format\" is " + format.dump() + ", expected \"" +
        std::string(kPlanFormatName) + "\"");
  Plan plan;
  plan.version = top.integer("version");
  if (plan.version != 1 && plan.version != kPlanFormatVersion)
    bad("unsupported plan version " + std::to_string(plan.version) + " (this build reads versions 1 and " +
        std::to_string(kPlanFormatVersion) + ")");
  const bool v1 = plan.version == 1;  // version 1 plans have no tp/cp/etp, parts, groups or works
  plan.version = kPlanFormatVersion;
  plan.schedule = top.string("schedule");
  if (plan.schedule != "sequential" && plan.schedule != "combined_1f1b" &&
      plan.schedule != "interleaved_1f1b")
    bad("plan.schedule has the unknown value \"" + plan.schedule + "\"");
  plan.pattern = top.string("pattern");
  plan.pp = top.integer("pp");
  plan.chunks = top.integer("vpp");
  plan.ep = top.integer("ep");
  plan.dp = top.integer("dp");
  plan.microbatches = top.integer("microbatches");
  if (!v1) {
    plan.tp = top.integer("tp");
    plan.cp = top.integer("cp");
    plan.etp = top.integer("etp");
  }
  plan.overlap = top.boolean("overlap");
  plan.delay_wgrad = top.boolean("delay_wgrad");
  if (!v1) {
    plan.account_embedding = top.boolean("account_embedding");
    plan.account_loss = top.boolean("account_loss");
    if (top.has("world")) plan.world = top.integer("world");
    if (top.has("ep_comm_sms")) plan.ep_comm_sms = top.integer("ep_comm_sms");
    if (top.has("cuda_graphs")) plan.cuda_graphs = top.boolean("cuda_graphs");
    if (top.has("expert_load_factor")) plan.expert_load_factor = top.number("expert_load_factor");
    if (top.has("expert_node_load_factor")) plan.expert_node_load_factor = top.number("expert_node_load_factor");
    const json& works = top.array("works");
    for (std::size_t i = 0; i < works.size(); ++i) {
      const std::string where = "plan.works[" + std::to_string(i) + "]";
      if (!works[i].is_array()) bad(where + " must be an array of kernels");
      Work w;
      for (std::size_t k = 0; k < works[i].size(); ++k) {
        const json& e = works[i][k];
        const std::string at = where + "[" + std::to_string(k) + "]";
        if (!e.is_array() || (e.size() != 8 && e.size() != 9) || !e[0].is_string() || !e[1].is_boolean() ||
            (e.size() == 9 && !e[8].is_boolean()))
          bad(at + " must be [kind, delayable, m, n, k, groups, flops, bytes(, fp8)], got " + e.dump());
        const auto kind = kernel_kind_from_string(e[0].get<std::string>());
        if (!kind) bad(at + " has the unknown kernel kind " + e[0].dump());
        Kernel kernel{*kind, e[1].get<bool>()};
        double* fields[] = {&kernel.m, &kernel.n, &kernel.k, &kernel.groups, &kernel.flops, &kernel.bytes};
        for (std::size_t f = 0; f < 6; ++f) {
          if (!e[f + 2].is_number() || !std::isfinite(e[f + 2].get<double>()) || e[f + 2].get<double>() < 0)
            bad(at + " field " + std::to_string(f + 2) + " must be a finite number >= 0, got " + e[f + 2].dump());
          *fields[f] = e[f + 2].get<double>();
        }
        kernel.fp8 = e.size() == 9 && e[8].get<bool>();
        w.kernels.push_back(kernel);
      }
      plan.works.push_back(std::move(w));
    }
  }
  const json& nodes = top.array("nodes");
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    ObjectReader r(nodes[i], "plan.nodes[" + std::to_string(i) + "]");
    Node n;
    n.id = r.integer("id");
    n.rank = r.integer("rank");
    n.stream = r.enumeration<Stream>("stream", &stream_from_string);
    n.slot = r.enumeration<Slot>("slot", &slot_from_string);
    n.phase = r.enumeration<Phase>("phase", &phase_from_string);
    if (!v1) n.part = r.enumeration<Part>("part", &part_from_string);
    n.microbatch = r.integer("microbatch");
    n.vp_stage = r.integer("vp_stage");
    n.layer = r.integer("layer");
    n.mtp = r.boolean("mtp");
    n.symbols = r.string("symbols");
    n.flops = r.number("flops");
    n.mem_bytes = r.number("mem_bytes");
    const json& sends = r.array("sends");
    for (std::size_t k = 0; k < sends.size(); ++k) {
      const std::string where = "plan.nodes[" + std::to_string(i) + "].sends[" + std::to_string(k) + "]";
      const json& s = sends[k];
      if (!s.is_array() || s.size() != 2 || !s[1].is_number())
        bad(where + " must be [peer, bytes], got " + s.dump());
      n.sends.push_back({ObjectReader::as_int(s[0], where + "[0]"), s[1].get<double>()});
    }
    n.collective = r.integer("collective");
    if (!v1) n.work = r.integer("work");
    n.deps = r.int_array("deps");
    r.done();
    plan.nodes.push_back(std::move(n));
  }
  const json& collectives = top.array("collectives");
  for (std::size_t i = 0; i < collectives.size(); ++i) {
    ObjectReader r(collectives[i], "plan.collectives[" + std::to_string(i) + "]");
    Collective c;
    c.id = r.integer("id");
    c.kind = r.enumeration<CollectiveKind>("kind", &collective_kind_from_string);
    if (!v1) c.group = r.enumeration<Group>("group", &group_from_string);
    c.nodes = r.int_array("nodes");
    if (!v1 && r.has("ranks")) c.ranks = r.int_array("ranks");
    r.done();
    plan.collectives.push_back(std::move(c));
  }
  const json& ranks = top.array("ranks");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    ObjectReader r(ranks[i], "plan.ranks[" + std::to_string(i) + "]");
    RankPlan rp;
    rp.rank = r.integer("rank");
    rp.pp_rank = r.integer("pp_rank");
    rp.ep_rank = r.integer("ep_rank");
    rp.dp_rank = r.integer("dp_rank");
    if (!v1) {
      rp.tp_rank = r.integer("tp_rank");
      rp.cp_rank = r.integer("cp_rank");
      if (r.has("original")) {
        rp.original = r.integer("original");
        rp.stands_for = r.integer("stands_for");
      }
    }
    rp.issue = r.int_array("issue");
    r.done();
    plan.ranks.push_back(std::move(rp));
  }
  top.done();
  if (v1) {
    // Version 1 knew three collectives; their groups follow from what they carry.
    for (Collective& c : plan.collectives) {
      if (c.kind == CollectiveKind::PointToPoint) c.group = Group::Pp;
      else if (c.kind == CollectiveKind::AllReduce && !c.nodes.empty() && c.nodes.front() >= 0 &&
               c.nodes.front() < static_cast<int>(plan.nodes.size()) &&
               plan.nodes[static_cast<std::size_t>(c.nodes.front())].symbols == "expert")
        c.group = Group::Edp;
      else if (c.kind == CollectiveKind::AllReduce) c.group = Group::Dp;
      else c.group = Group::Ep;
    }
  }
  for (const Node& n : plan.nodes)
    if (n.work < -1 || n.work >= static_cast<int>(plan.works.size()))
      bad("plan.nodes[" + std::to_string(n.id) + "].work names the unknown work " + std::to_string(n.work));
  check_plan_structure(plan);
  return plan;
}

void save_plan(const std::filesystem::path& path, const Plan& plan) {
  detail::write_text(path, "plan file", plan_to_json(plan));
}

Plan load_plan(const std::filesystem::path& path) {
  try {
    return plan_from_json(detail::read_text(path, "plan file"));
  } catch (const ScheduleError& e) {
    if (e.code() == ErrorCode::Io) throw;
    throw ScheduleError(e.code(), std::string(e.what()).substr(std::string("plan: ").size()) +
                                      " (in '" + path.string() + "')");
  }
}

}  // namespace ht::schedule
