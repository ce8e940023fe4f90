// Overlap analytics of one timeline: how much communication the compute hides, per device and
// in total (reference simulators.md section 2.4: hidden = 1 - exposed / comm).
//
// Per device: compute busy = measure of the union of Compute spans, comm busy = union of Comm
// spans, exposed comm = comm union minus compute union (comm time with no compute running on the
// same device, whatever the stream). Role::Other spans (e.g. idle markers) count for span_s only.
// Totals are sums over devices, except span_s (first start to last end over all devices).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ht/traces/timeline.hpp"

namespace ht::traces {

struct DeviceOverlap {
  int device = 0;
  std::size_t spans = 0;
  double span_s = 0;  // first start to last end on this device
  double compute_busy_s = 0;
  double comm_busy_s = 0;
  double comm_exposed_s = 0;
  double hidden_fraction = 1;  // 1 - exposed / comm_busy; 1.0 when the device has no comm
};

// One exposed interval: comm running while the device computes nothing.
struct Interval {
  int device = 0;
  double start_s = 0;
  double end_s = 0;
  double duration_s() const { return end_s - start_s; }
};

// Per kernel / span name. exposed_s sums, span by span, the part of each span that lies in the
// device's exposed set; two spans of the same name running at once both count.
struct KernelRow {
  std::string name;
  Role role = Role::Compute;
  std::size_t count = 0;
  double total_s = 0;  // sum of durations
  double exposed_s = 0;
};

// Per category (slot such as "dispatch", or kernel class such as "nccl").
struct CategoryRow {
  std::string category;
  Role role = Role::Compute;  // role of the category's comm spans if it has any, else compute
  std::size_t count = 0;
  double total_s = 0;    // sum of durations
  double busy_s = 0;     // union of its spans per device, summed over devices
  double exposed_s = 0;  // union of its comm spans intersected with the exposed set, summed
};

struct OverlapSummary {
  double span_s = 0;
  double compute_busy_s = 0;
  double comm_busy_s = 0;
  double comm_exposed_s = 0;
  double hidden_fraction = 1;  // 1 - exposed / comm_busy over all devices; 1.0 without comm
  std::size_t spans = 0;
  std::vector<DeviceOverlap> devices;      // ascending device id
  std::vector<Interval> longest_exposed;   // longest first, at most SummaryOptions::longest
  std::vector<KernelRow> kernels;          // by total_s descending, then name
  std::vector<CategoryRow> categories;     // by category name
};

struct SummaryOptions {
  std::size_t longest = 10;
};

OverlapSummary summarize(const Timeline& timeline);
OverlapSummary summarize(const Timeline& timeline, const SummaryOptions& options);

// 1 - exposed / comm_busy, and 1.0 when there is no comm at all (nothing to hide is fully hidden).
double hidden_fraction(double comm_exposed_s, double comm_busy_s);

// The share of a step's backward GEMM work that its weight-gradient (W) nodes ran: the spans
// whose "phase" arg is "weight", their "gemm_flops" args over those of the "weight" and
// "backward" spans (the engines' executors record every node's GEMM FLOPs on its span). 0 without
// either; a counter, not a clock.
double weight_gemm_share(const Timeline& timeline);

}  // namespace ht::traces
