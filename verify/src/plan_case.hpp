// Plan cases as JSON (pattern, parallel config, schedule options) and back, shared by the plan
// and twin properties.
#pragma once

#include <string>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/config.hpp"
#include "ht/verify/plan_gen.hpp"
#include "ht/verify/property.hpp"

namespace ht::verify::detail {

constexpr int kSharedExpertFfn = 16;

inline Case plan_case_json(const gen::PlanCase& c, bool shared_expert) {
  return {{"pattern", c.pattern},
          {"ep", c.config.ep},
          {"dp", c.config.dp},
          {"pp", c.config.pp},
          {"vpp", c.config.vpp},
          {"microbatches", c.config.microbatches},
          {"overlap", c.options.overlap},
          {"delay_wgrad", c.options.delay_wgrad},
          {"early_attn_release", c.options.early_attn_release},
          {"routing_skew", c.options.routing_skew},
          {"shared_expert", shared_expert}};
}

struct PlanInput {
  patterns::ParsedPattern pattern;
  schedule::ModelDims dims;
  schedule::ParallelConfig config;
  schedule::ScheduleOptions options;
};

inline PlanInput input_of(const Case& c) {
  PlanInput in{patterns::parse(c.at("pattern").get<std::string>()), schedule::tiny_model(), {}, {}};
  in.config.ep = c.at("ep").get<int>();
  in.config.dp = c.at("dp").get<int>();
  in.config.pp = c.at("pp").get<int>();
  in.config.vpp = c.at("vpp").get<int>();
  in.config.microbatches = c.at("microbatches").get<int>();
  in.options.overlap = c.at("overlap").get<bool>();
  in.options.delay_wgrad = c.at("delay_wgrad").get<bool>();
  in.options.early_attn_release = c.at("early_attn_release").get<bool>();
  in.options.routing_skew = c.at("routing_skew").get<double>();
  if (c.value("shared_expert", false)) in.dims.shared_expert_ffn = kSharedExpertFfn;
  return in;
}

// Generated plan cases, or the fixed pattern with a generated configuration.
inline CaseSource general_plan_cases(const FuzzContext& ctx) {
  rc::Gen<gen::PlanCase> g = ctx.pattern ? gen::plan_case_for(patterns::parse(*ctx.pattern)) : gen::plan_case();
  return {rc::gen::map(rc::gen::tuple(g, rc::gen::arbitrary<bool>()),
                       [](const std::tuple<gen::PlanCase, bool>& t) { return plan_case_json(std::get<0>(t), std::get<1>(t)); }),
          ""};
}

}  // namespace ht::verify::detail
