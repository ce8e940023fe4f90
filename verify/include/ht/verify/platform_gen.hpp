// Generator of simulated platforms for the twin properties, in the CLI's text form
// ("PRESET:key=value,..."), so a counterexample file names the platform the way a user types it
// and every case also goes through sim::parse_platform. Covers both presets, node sizes, NVLink
// and NIC rates and latencies, efficiencies, fat-tree oversubscription and the GPU roofline.
#pragma once

#include <string>

#include <rapidcheck.h>

namespace ht::verify::gen {

inline rc::Gen<std::string> platform_text() {
  return rc::gen::apply(
      [](const std::string& preset, int gpus_per_node, int nvlink_gbps, int nvlink_latency_us, int ib_gbps,
         int ib_latency_us, int efficiency_pct, int oversubscription, int peak_tflops) {
        return preset + ":gpus_per_node=" + std::to_string(gpus_per_node) + ",nvlink_gbps=" +
               std::to_string(nvlink_gbps) + ",nvlink_latency_us=" + std::to_string(nvlink_latency_us) +
               ",ib_gbps=" + std::to_string(ib_gbps) + ",ib_latency_us=" + std::to_string(ib_latency_us) +
               ",nvlink_efficiency=0." + std::to_string(efficiency_pct) + ",ib_efficiency=0." +
               std::to_string(efficiency_pct) + ",oversubscription=" + std::to_string(oversubscription) +
               ",peak_tflops=" + std::to_string(peak_tflops);
      },
      rc::gen::element<std::string>("dgx-h100", "dgx-h200"), rc::gen::element(1, 2, 4, 8),
      rc::gen::element(50, 450, 900), rc::gen::inRange(0, 11), rc::gen::element(100, 400, 800),
      rc::gen::inRange(1, 16), rc::gen::inRange(50, 100), rc::gen::element(1, 2, 4),
      rc::gen::element(100, 989, 1979));
}

}  // namespace ht::verify::gen
