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

#include <algorithm>
#include <string>
#include <unordered_set>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include "ht/io/child_process.hpp"
#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/sim/error.hpp"
#include "ht/sim/platform_xml.hpp"

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

std::vector<sg4::Host*> build_platform(sg4::Engine& engine, const PlatformSpec& spec, int world, bool folded,
                                       const std::vector<char>* needed_nodes) {
  std::vector<sg4::Host*> hosts;
  if (!spec.xml_file.empty() && spec.host_cores > 0)
    throw SimError(SimErrorCode::BadPlatform, "host_cores models the CPU backend on a preset platform, not on '" +
                                                  spec.xml_file + "'");
  if (!spec.xml_file.empty()) {
    try {  // a regular file of bounded size whose host count is bounded, before SimGrid builds it
      check_platform_xml(io::read_input_file(spec.xml_file, kMaxXmlBytes, "platform file"),
                         "platform file '" + spec.xml_file + "'");
    } catch (const io::IoError& e) {
      throw SimError(SimErrorCode::BadPlatform, e.what());
    }
    try {
      engine.load_platform(spec.xml_file);
    } catch (const std::exception& e) {
      throw SimError(SimErrorCode::BadPlatform, "cannot load '" + spec.xml_file + "': " + e.what());
    }
    for (const sg4::Link* link : engine.get_all_links())
      if (!(link->get_bandwidth() > 0) || !(link->get_latency() >= 0))
        throw SimError(SimErrorCode::BadPlatform, "'" + spec.xml_file + "': link '" + link->get_name() +
                                                      "' has bandwidth " + std::to_string(link->get_bandwidth()) +
                                                      " B/s and latency " + std::to_string(link->get_latency()) +
                                                      " s; a link needs a bandwidth > 0 and a latency >= 0");
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
  // Only the nodes and GPUs the plan uses are built: the others carry no traffic, and the leaf
  // bandwidth keeps the full node's figure, so `nodes=10000` for a 2-GPU plan costs what 1 node does.
  const int used_nodes = (world + spec.gpus_per_node - 1) / spec.gpus_per_node;
  auto needed = [&](int n) {
    return needed_nodes == nullptr || n >= static_cast<int>(needed_nodes->size()) ||
           (*needed_nodes)[static_cast<std::size_t>(n)] != 0;
  };
  std::int64_t built_nodes = 0, built_gpus = 0;
  for (int n = 0; n < used_nodes; ++n)
    if (needed(n)) {
      ++built_nodes;
      built_gpus += std::min(spec.gpus_per_node, world - n * spec.gpus_per_node);
    }
  if (built_gpus > kMaxSimulatedGpus || built_nodes > kMaxSimulatedNodes)
    throw SimError(SimErrorCode::BadPlan,
                   "the replay's flows reach " + std::to_string(built_gpus) + " GPUs on " + std::to_string(built_nodes) +
                       " nodes, more than the limit of " + std::to_string(kMaxSimulatedGpus) + " GPUs or " +
                       std::to_string(kMaxSimulatedNodes) +
                       " nodes one replay simulates (an all-to-all reaches every rank of its group: reduce ep; "
                       "unfolded, every rank is simulated: reduce the ranks)");
  hosts.assign(static_cast<std::size_t>(world), nullptr);
  for (int n = 0; n < used_nodes; ++n) {
    if (!needed(n)) continue;
    const int node_gpus = std::min(spec.gpus_per_node, world - n * spec.gpus_per_node);
    const std::string node = "node" + std::to_string(n);
    auto* zone = sg4::create_full_zone(node);
    zone->set_parent(fabric);
    auto* gateway = zone->create_router(node + "-nic-switch");
    std::vector<sg4::Host*> local;
    std::vector<const sg4::Link*> nvl, nic, share;
    // Folded on an oversubscribed fabric: each GPU's share of its node's leaf uplink, in series
    // with its NIC (below).
    const bool leaf_shares = folded && spec.oversubscription != 1.0;
    for (int g = 0; g < node_gpus; ++g) {
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
      if (leaf_shares)
        share.push_back(
            zone->create_split_duplex_link(gpu + "-leaf-share", nic_bw / spec.oversubscription)->set_latency(0)->seal());
    }
    for (int a = 0; a < node_gpus; ++a) {
      for (int b = 0; b < node_gpus; ++b) {
        if (a == b) continue;
        if (spec.nvlink_ingress)
          zone->add_route(local[a]->get_netpoint(), local[b]->get_netpoint(), nullptr, nullptr,
                          {sg4::LinkInRoute(nvl[a], Dir::UP), sg4::LinkInRoute(nvl[b], Dir::DOWN)}, false);
        else  // only the sender's port limits the transfer (the engine's throttle)
          zone->add_route(local[a]->get_netpoint(), local[b]->get_netpoint(), nullptr, nullptr,
                          {sg4::LinkInRoute(nvl[a], Dir::UP)}, false);
      }
      if (leaf_shares) {
        zone->add_route(local[a]->get_netpoint(), gateway, nullptr, nullptr,
                        {sg4::LinkInRoute(nic[a], Dir::UP), sg4::LinkInRoute(share[a], Dir::UP)}, false);
        zone->add_route(gateway, local[a]->get_netpoint(), nullptr, nullptr,
                        {sg4::LinkInRoute(share[a], Dir::DOWN), sg4::LinkInRoute(nic[a], Dir::DOWN)}, false);
        continue;
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
    if (folded) {
      // A folded replay simulates one rank for many (fold.hpp): the leaf link would carry the
      // traffic of every GPU of the node alike, so each GPU gets its share of it (nic /
      // oversubscription, the leaf-share links above); the leaf itself only caps a flow there.
      const sg4::Link* leaf = fabric->create_link(node + "-leaf", nic_bw / spec.oversubscription)
                                  ->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE)
                                  ->set_latency(0)
                                  ->seal();
      fabric->add_route(zone->get_netpoint(), nullptr, gateway, gateway, {sg4::LinkInRoute(leaf)}, false);
      fabric->add_route(nullptr, zone->get_netpoint(), gateway, gateway, {sg4::LinkInRoute(leaf)}, false);
    } else {
      const sg4::Link* leaf = fabric->create_split_duplex_link(node + "-leaf", leaf_bw)->set_latency(0)->seal();
      fabric->add_route(zone->get_netpoint(), nullptr, gateway, gateway, {sg4::LinkInRoute(leaf, Dir::UP)}, false);
      fabric->add_route(nullptr, zone->get_netpoint(), gateway, gateway, {sg4::LinkInRoute(leaf, Dir::DOWN)},
                        false);
    }
    std::copy(local.begin(), local.end(), hosts.begin() + std::ptrdiff_t(n) * spec.gpus_per_node);
  }
  fabric->seal();
  return hosts;
}

void check_routes(const schedule::Plan& plan, const std::vector<sg4::Host*>& hosts, const std::string& source) {
  std::vector<std::pair<int, int>> pairs;
  {
    std::unordered_set<std::uint64_t> seen;
    auto add = [&](int a, int b) {
      if (a == b || a < 0 || b < 0 || a >= static_cast<int>(hosts.size()) || b >= static_cast<int>(hosts.size())) return;
      if (seen.insert((std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b)).second) pairs.emplace_back(a, b);
    };
    for (const schedule::Node& n : plan.nodes)
      for (const schedule::Transfer& t : n.sends) add(n.rank, t.peer);
    for (const schedule::Collective& c : plan.collectives)
      for (int x : c.nodes)
        for (int y : c.nodes) add(plan.nodes[x].rank, plan.nodes[y].rank);
  }
  if (pairs.empty()) return;
  // SimGrid crashes (SIGSEGV in a Full zone) when asked for a route the file does not define, so
  // the lookups run in a process of their own that reports each pair before looking it up: if it
  // dies, the last pair it named has no route.
  io::Child child;
  try {
    child = io::spawn_child(
        [&](int fd) {
          const int devnull = ::open("/dev/null", O_WRONLY);
          if (devnull >= 0) ::dup2(devnull, 2);  // SimGrid's crash report would only repeat ours
          for (std::size_t i = 0; i < pairs.size(); ++i) {
            std::int64_t record[2] = {static_cast<std::int64_t>(i), 0};
            if (!io::write_all(fd, record, sizeof record)) ::_exit(3);
            std::vector<sg4::Link*> links;
            double latency = 0;
            hosts[pairs[i].first]->route_to(hosts[pairs[i].second], links, &latency);
            if (links.empty() && latency == 0) {
              record[1] = 1;  // an empty route: no path
              if (!io::write_all(fd, record, sizeof record)) ::_exit(3);
              return;
            }
          }
        },
        "route check");
  } catch (const std::runtime_error&) {
    return;  // no check possible; the replay still reports a crash
  }
  std::int64_t record[2] = {-1, 0}, last = -1;
  bool empty_route = false;
  while (io::read_some(child.fd, record, sizeof record) == static_cast<long>(sizeof record)) {
    last = record[0];
    empty_route = empty_route || record[1] == 1;
  }
  ::close(child.fd);
  const int status = io::wait_child(child.pid);
  const bool crashed = status >= 0 && WIFSIGNALED(status);
  if ((crashed || empty_route) && last >= 0) {
    const auto [a, b] = pairs[static_cast<std::size_t>(last)];
    throw SimError(SimErrorCode::BadPlatform, "'" + source + "' has no route from " + hosts[a]->get_name() + " to " +
                                                  hosts[b]->get_name() + ", which the plan's ranks " +
                                                  std::to_string(a) + " and " + std::to_string(b) + " need");
  }
}

}  // namespace ht::sim::detail
