// Builds the simulated machine room from a spec sheet (the SimGrid side of platform.hpp):
//
//   root "fabric" (star zone): node zones hang off it through one leaf uplink each
//   node zone (full zone): GPUs gpu<k>, each with
//     - a split-duplex NVLink port into the NVSwitch (GPU <-> GPU in the node: port_src UP, port_dst DOWN)
//     - a split-duplex NIC into the fat-tree (GPU -> other node: nic_src UP, leaf UP, leaf DOWN, nic_dst DOWN)
//
// Inter-node traffic never touches NVLink (on DGX the NIC hangs off PCIe), so an all-to-all loads
// the NVLink ports and the NICs independently, as on the real machine. The leaf uplink carries the
// node's NIC bandwidth divided by the oversubscription, so 1 means a full-bisection fat-tree.
// Latencies are split evenly over the links of a route so a route adds up to the spec's
// end-to-end figure.
#include "simgrid_platform.hpp"

#include <string>

#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include "ht/sim/error.hpp"

namespace ht::sim::detail {

namespace sg4 = simgrid::s4u;
using Dir = sg4::LinkInRoute::Direction;

namespace {
// Host speed is a unit conversion only: the cost model gives seconds and replay executes
// seconds * speed flops, so any speed works; 1e9 keeps flop counts in SimGrid's precise range.
constexpr double kHostSpeed = 1e9;
}  // namespace

std::vector<std::string> engine_args() {
  std::vector<std::string> args = {
      "ht-sim",
      "--cfg=network/model:CM02",  // LV08 multiplies latency by 13 and bandwidth by 0.97
      // Every flow is capped at gamma / (2 * latency); the 4 MiB default caps a 40 us route at
      // 52 GB/s, far below NVLink (simulators.md 3.3 pitfall 1; tested).
      "--cfg=network/TCP-gamma:1e30",
      "--cfg=network/crosstraffic:0",  // full-duplex links: no reverse-path penalty
      "--cfg=contexts/stack-size:256",  // KiB; stream actors keep their state on the heap
  };
#if defined(__SANITIZE_ADDRESS__)
  args.push_back("--cfg=contexts/factory:thread");  // ASan misreads swapped stacks (toolchain.md 6)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  args.push_back("--cfg=contexts/factory:thread");
#endif
#endif
  return args;
}

std::vector<sg4::Host*> build_platform(sg4::Engine& engine, const PlatformSpec& spec, int world) {
  std::vector<sg4::Host*> hosts;
  if (!spec.xml_file.empty() && spec.host_cores > 0)
    throw SimError(SimErrorCode::BadPlatform, "host_cores models the CPU backend on a preset platform, not on '" +
                                                  spec.xml_file + "'");
  if (!spec.xml_file.empty()) {
    try {
      engine.load_platform(spec.xml_file);
    } catch (const std::exception& e) {
      throw SimError(SimErrorCode::BadPlatform, "cannot load '" + spec.xml_file + "': " + e.what());
    }
    for (int k = 0; k < world; ++k) {
      sg4::Host* h = engine.host_by_name_or_null("gpu" + std::to_string(k));
      if (h == nullptr)
        throw SimError(SimErrorCode::BadPlatform, "'" + spec.xml_file + "' has no host 'gpu" + std::to_string(k) +
                                                      "' (hosts must be named gpu0..gpu" +
                                                      std::to_string(world - 1) + " for this plan)");
      hosts.push_back(h);
    }
    return hosts;
  }
  if (spec.gpus() < world)
    throw SimError(SimErrorCode::BadPlatform, "platform has " + std::to_string(spec.gpus()) +
                                                  " GPUs, plan needs " + std::to_string(world));

  auto* fabric = sg4::create_star_zone("fabric");  // the first zone without parent is the root
  const double nvl_bw = spec.nvlink_effective();
  const double nic_bw = spec.nic_effective();
  const double leaf_bw = nic_bw * spec.gpus_per_node / spec.oversubscription;
  for (int n = 0; n < spec.nodes; ++n) {
    const std::string node = "node" + std::to_string(n);
    auto* zone = sg4::create_full_zone(node);
    zone->set_parent(fabric);
    auto* gateway = zone->create_router(node + "-nic-switch");
    std::vector<sg4::Host*> local;
    std::vector<const sg4::Link*> nvl, nic;
    for (int g = 0; g < spec.gpus_per_node; ++g) {
      const std::string gpu = "gpu" + std::to_string(n * spec.gpus_per_node + g);
      local.push_back(zone->create_host(gpu, kHostSpeed));
      // A GPU-to-GPU route crosses two ports (or only the sender's when ingress is free), so
      // each carries its share of the end-to-end latency.
      nvl.push_back(zone->create_split_duplex_link(gpu + "-nvlink", nvl_bw)
                        ->set_latency(spec.nvlink_ingress ? spec.nvlink_latency_s / 2 : spec.nvlink_latency_s)
                        ->seal());
      nic.push_back(zone->create_split_duplex_link(gpu + "-nic", nic_bw)
                        ->set_latency(spec.nic_latency_s / 2)
                        ->seal());
    }
    for (int a = 0; a < spec.gpus_per_node; ++a) {
      for (int b = 0; b < spec.gpus_per_node; ++b) {
        if (a == b) continue;
        if (spec.nvlink_ingress)
          zone->add_route(local[a]->get_netpoint(), local[b]->get_netpoint(), nullptr, nullptr,
                          {sg4::LinkInRoute(nvl[a], Dir::UP), sg4::LinkInRoute(nvl[b], Dir::DOWN)}, false);
        else  // only the sender's port limits the transfer (the engine's throttle)
          zone->add_route(local[a]->get_netpoint(), local[b]->get_netpoint(), nullptr, nullptr,
                          {sg4::LinkInRoute(nvl[a], Dir::UP)}, false);
      }
      zone->add_route(local[a]->get_netpoint(), gateway, nullptr, nullptr, {sg4::LinkInRoute(nic[a], Dir::UP)},
                      false);
      zone->add_route(gateway, local[a]->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(nic[a], Dir::DOWN)},
                      false);
    }
    // The CPU backend's shared cores (PlatformSpec::host_cores): one multi-core host that runs
    // every rank's compute; SimGrid shares its cores max-min fairly among the running
    // executions, each capped at one core, as the OS scheduler shares them among rank threads.
    if (n == 0 && spec.host_cores > 0)
      zone->create_host(kSharedCpuHost, kHostSpeed)->set_core_count(spec.host_cores)->seal();
    zone->seal();
    const sg4::Link* leaf = fabric->create_split_duplex_link(node + "-leaf", leaf_bw)->set_latency(0)->seal();
    fabric->add_route(zone->get_netpoint(), nullptr, gateway, gateway, {sg4::LinkInRoute(leaf, Dir::UP)}, false);
    fabric->add_route(nullptr, zone->get_netpoint(), gateway, gateway, {sg4::LinkInRoute(leaf, Dir::DOWN)},
                      false);
    hosts.insert(hosts.end(), local.begin(), local.end());
  }
  fabric->seal();
  hosts.resize(static_cast<std::size_t>(world));
  return hosts;
}

}  // namespace ht::sim::detail
