// Internal: turns a PlatformSpec into SimGrid zones inside a live Engine (or loads the XML file)
// and returns the host of every global rank. Used by replay(); not part of the public API because
// it exposes SimGrid types.
#pragma once

#include <string>
#include <vector>

#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>

#include "ht/schedule/plan.hpp"
#include "ht/sim/platform.hpp"

namespace ht::sim::detail {

// Engine command line for a GPU fabric: the network model must not cap NVLink-class links (CM02:
// no TCP correction factors; huge TCP-gamma; no cross traffic), small actor stacks for thousands
// of stream actors, thread contexts under ASan. Starts with a program name.
std::vector<std::string> engine_args();

// Name of the multi-core host that PlatformSpec::host_cores adds (absent when host_cores is 0).
inline constexpr const char* kSharedCpuHost = "host-cpu";

// hosts[k] runs global rank k; throws SimError(BadPlatform) if the platform has fewer than
// `world` GPUs or an XML file misses a "gpuK" host. On a preset platform, `needed_nodes` (when
// given, one flag per cluster node) limits the build to the nodes a replay touches: the others
// carry no flow, and their hosts stay null. A folded replay touches few of a large world's.
std::vector<simgrid::s4u::Host*> build_platform(simgrid::s4u::Engine& engine, const PlatformSpec& spec,
                                                int world, bool folded = false,
                                                const std::vector<char>* needed_nodes = nullptr);

// For an XML platform: every pair of ranks the plan connects (sends, collective members) has a
// route; SimGrid would abort the simulation otherwise. SimError(BadPlatform) naming the hosts.
void check_routes(const schedule::Plan& plan, const std::vector<simgrid::s4u::Host*>& hosts, const std::string& source);

}  // namespace ht::sim::detail
