// A hand-written Kineto-schema profile (fixtures/kineto_gpu_two_devices.json: two GPUs, compute,
// NCCL, DeepEP and HybridEP streams, memcpy/memset, CPU ops, runtime calls, flow events, GPU
// annotations, counters) against overlap figures computed by hand in the comments below.
#include <catch2/catch.hpp>

#include <algorithm>

#include "ht/traces/chrome.hpp"
#include "ht/traces/overlap.hpp"
#include "trace_test_support.hpp"

using namespace ht::traces;
using ht::traces::test::fixture;
using ht::traces::test::us;

namespace {
const Span& span_named(const Timeline& t, const std::string& prefix) {
  auto it = std::find_if(t.spans.begin(), t.spans.end(),
                         [&](const Span& s) { return s.name.rfind(prefix, 0) == 0; });
  REQUIRE(it != t.spans.end());
  return *it;
}
const KernelRow& kernel_named(const OverlapSummary& s, const std::string& prefix) {
  auto it = std::find_if(s.kernels.begin(), s.kernels.end(),
                         [&](const KernelRow& k) { return k.name.rfind(prefix, 0) == 0; });
  REQUIRE(it != s.kernels.end());
  return *it;
}
const CategoryRow& category(const OverlapSummary& s, const std::string& name) {
  auto it = std::find_if(s.categories.begin(), s.categories.end(),
                         [&](const CategoryRow& c) { return c.category == name; });
  REQUIRE(it != s.categories.end());
  return *it;
}
}  // namespace

TEST_CASE("GPU kernels, memcpy and memset become spans on their device streams", "[kineto]") {
  ReadStats stats;
  const Timeline t = read_chrome_trace(fixture("kineto_gpu_two_devices.json"), {}, stats);
  CHECK(t.source == "kineto");
  // 11 device activities; python_function, cpu_op x2, cuda_runtime, flows s/f,
  // gpu_user_annotation, instant, counter and the Trace span are skipped; 6 metadata records.
  CHECK(t.spans.size() == 11);
  CHECK(stats.events == 27);
  CHECK(stats.spans == 11);
  CHECK(stats.skipped == 10);
  // Rebased: the earliest kept event (device 1 dispatch at ...100 us) is the origin.
  CHECK(t.metadata.at("origin_us") == "1733140000000100");
  const Span& add = span_named(t, "void at::native::vectorized");
  CHECK(add.device == 0);
  CHECK(add.stream == 7);
  CHECK(add.start_s == us(0.5));
  CHECK(add.duration_s == us(49.5));
  CHECK(add.role == Role::Compute);
  CHECK(add.category == "kernel");
  CHECK(add.args.empty());  // Kineto's grid/block/occupancy args are not kept
  const Span& a2a = span_named(t, "ncclDevKernel_AllToAll");
  CHECK(a2a.role == Role::Comm);
  CHECK(a2a.category == "nccl");
  CHECK(a2a.stream == 20);
  CHECK(a2a.start_s == us(40.25));
  const Span& dispatch = span_named(t, "void hybrid_ep::dispatch_kernel");
  CHECK(dispatch.device == 1);
  CHECK(dispatch.stream == 13);  // from tid "stream 13": this event has no args.stream
  CHECK(dispatch.category == "hybrid_ep");
  CHECK(span_named(t, "void deep_ep::intranode::combine").category == "deep_ep");
  const Span& p2p = span_named(t, "Memcpy PtoP");
  CHECK(p2p.role == Role::Comm);
  CHECK(p2p.category == "p2p_copy");
  CHECK(p2p.args.at("bytes") == "1048576");
  CHECK(span_named(t, "Memcpy DtoH").role == Role::Compute);
  CHECK(span_named(t, "Memcpy DtoH").category == "memcpy");
  CHECK(span_named(t, "Memset").category == "memset");

  // Streams: named by thread_name metadata where present, role by their busy time.
  REQUIRE(t.streams.size() == 5);
  CHECK(t.streams[0].device == 0);
  CHECK(t.streams[0].stream == 7);
  CHECK(t.streams[0].name == "stream 7 ");
  CHECK(t.streams[0].role == Role::Compute);
  CHECK(t.streams[1].name == "stream 20 (nccl)");
  CHECK(t.streams[1].role == Role::Comm);
  CHECK(t.streams[2].name == "stream 24");
  CHECK(t.streams[2].role == Role::Comm);
  CHECK(t.streams[4].device == 1);
  CHECK(t.streams[4].stream == 13);
}

// Hand computation (microseconds, relative to the file's ts - 1733140000000000):
// device 0  compute [100.5,150) [160,260) [270,275) [330,340)       = 49.5+100+5+10  = 164.5
//           comm    [140.25,200) [250,300) [310,320)                = 59.75+50+10    = 119.75
//           exposed [150,160) [260,270) [275,300) [310,320)         = 10+10+25+10    = 55
//           span    100.5 .. 340                                    = 239.5
// device 1  compute [120,220) [250,255)                             = 105
//           comm    [100,130) [200,260)                             = 90
//           exposed [100,120) [220,250) [255,260)                   = 20+30+5        = 55
//           span    100 .. 260                                      = 160
TEST_CASE("overlap figures of the GPU profile match the hand computation", "[kineto][overlap]") {
  const OverlapSummary s = summarize(read_chrome_trace(fixture("kineto_gpu_two_devices.json")));
  REQUIRE(s.devices.size() == 2);
  const DeviceOverlap& d0 = s.devices[0];
  CHECK(d0.compute_busy_s == us(164.5));
  CHECK(d0.comm_busy_s == us(119.75));
  CHECK(d0.comm_exposed_s == us(55));
  CHECK(d0.span_s == us(239.5));
  CHECK(d0.hidden_fraction == Approx(1 - 55 / 119.75).epsilon(1e-12));
  const DeviceOverlap& d1 = s.devices[1];
  CHECK(d1.compute_busy_s == us(105));
  CHECK(d1.comm_busy_s == us(90));
  CHECK(d1.comm_exposed_s == us(55));
  CHECK(d1.span_s == us(160));
  CHECK(d1.hidden_fraction == Approx(35.0 / 90).epsilon(1e-12));

  CHECK(s.span_s == us(240));
  CHECK(s.compute_busy_s == us(269.5));
  CHECK(s.comm_busy_s == us(209.75));
  CHECK(s.comm_exposed_s == us(110));
  CHECK(s.hidden_fraction == Approx(1 - 110 / 209.75).epsilon(1e-12));

  REQUIRE(s.longest_exposed.size() == 7);
  CHECK(s.longest_exposed[0].device == 1);
  CHECK(s.longest_exposed[0].start_s == us(120));  // [220,250) on the rebased axis
  CHECK(s.longest_exposed[0].duration_s() == us(30));
  CHECK(s.longest_exposed[1].device == 0);
  CHECK(s.longest_exposed[1].duration_s() == us(25));
  CHECK(s.longest_exposed[2].duration_s() == us(20));
  CHECK(s.longest_exposed[6].duration_s() == us(5));

  // Per kernel: exposed part of each comm kernel.
  CHECK(kernel_named(s, "ncclDevKernel_AllToAll").exposed_s == us(10));
  CHECK(kernel_named(s, "ncclDevKernel_AllReduce").exposed_s == us(35));
  CHECK(kernel_named(s, "void deep_ep").exposed_s == us(35));
  CHECK(kernel_named(s, "void hybrid_ep").exposed_s == us(20));
  CHECK(kernel_named(s, "Memcpy PtoP").exposed_s == us(10));
  const KernelRow& gemm = kernel_named(s, "sm90_xmma_gemm");
  CHECK(gemm.count == 2);
  CHECK(gemm.total_s == us(200));
  CHECK(gemm.exposed_s == 0);
  CHECK(s.kernels.front().name.rfind("sm90_xmma_gemm", 0) == 0);  // largest total first

  // Per kernel class.
  CHECK(category(s, "nccl").count == 2);
  CHECK(category(s, "nccl").busy_s == us(119.75));
  CHECK(category(s, "nccl").exposed_s == us(45));
  CHECK(category(s, "deep_ep").exposed_s == us(35));
  CHECK(category(s, "kernel").total_s == us(254.5));
  CHECK(category(s, "kernel").role == Role::Compute);
  CHECK(category(s, "memset").busy_s == us(5));
}

TEST_CASE("CPU ops are read only when asked for, on the process / thread they ran on",
          "[kineto]") {
  ReadOptions options;
  options.include_cpu_ops = true;
  const Timeline t = read_chrome_trace(fixture("kineto_gpu_two_devices.json"), options);
  CHECK(t.spans.size() == 13);
  const Span& mm = span_named(t, "aten::mm");
  CHECK(mm.device == 4242);
  CHECK(mm.stream == 4242);
  CHECK(mm.category == "cpu_op");
  CHECK(span_named(t, "c10d::allreduce_").role == Role::Comm);
  // The CPU op at 90 us is now the earliest event.
  CHECK(t.metadata.at("origin_us") == "1733140000000090");
  const OverlapSummary s = summarize(t);
  REQUIRE(s.devices.size() == 3);
  CHECK(s.devices[2].device == 4242);
  CHECK(s.devices[2].compute_busy_s == us(200));
  CHECK(s.devices[2].comm_exposed_s == us(5));
  CHECK(s.span_s == us(250));
}

TEST_CASE("a comm regex (--comm-regex) replaces the default comm rules", "[kineto]") {
  ReadOptions options;
  options.comm_regex = "gemm";
  const Timeline t = read_chrome_trace(fixture("kineto_gpu_two_devices.json"), options);
  CHECK(span_named(t, "sm90_xmma_gemm").role == Role::Comm);
  CHECK(span_named(t, "sm90_xmma_gemm").category == "comm");
  CHECK(span_named(t, "ncclDevKernel_AllToAll").role == Role::Compute);
  const OverlapSummary s = summarize(t);
  // Device 1: comm = gemm [120,220); compute = [100,130) [200,260) [250,255) -> exposed [130,200).
  CHECK(s.devices[1].comm_exposed_s == us(70));
}
