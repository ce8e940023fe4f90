#include "ht/schedule/node_args.hpp"

#include <cstdio>

namespace ht::schedule {

std::string format_number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return buf;
}

std::map<std::string, std::string> node_args(const Node& node) {
  std::map<std::string, std::string> args{{"node", std::to_string(node.id)},
                                          {"microbatch", std::to_string(node.microbatch)},
                                          {"layer", std::to_string(node.layer)},
                                          {"vp_stage", std::to_string(node.vp_stage)},
                                          {"phase", std::string(to_string(node.phase))}};
  if (!node.symbols.empty()) args["symbols"] = node.symbols;
  if (node.part != Part::Main) args["part"] = std::string(to_string(node.part));
  if (node.stream != Stream::Compute || !node.sends.empty()) {
    double bytes = 0;
    for (const auto& s : node.sends)
      if (s.peer != node.rank) bytes += s.bytes;
    args["bytes"] = format_number(bytes);
  }
  if (node.stream == Stream::Compute) args["flops"] = format_number(node.flops);
  return args;
}

}  // namespace ht::schedule
