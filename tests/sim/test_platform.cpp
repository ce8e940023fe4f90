// Platform spec sheets: presets, text overrides, sizing, XML platforms and their errors.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include "ht/sim/error.hpp"
#include "ht/sim/platform.hpp"
#include "ht/sim/platform_xml.hpp"
#include "ht/sim/replay.hpp"
#include "plan_fixtures.hpp"

using namespace ht::sim;
using namespace ht::sim::test;

TEST_CASE("presets read like the DGX spec sheets", "[sim][platform]") {
  auto h100 = preset("dgx-h100");
  CHECK(h100.gpus_per_node == 8);
  CHECK(h100.nvlink_bytes_per_s == 450e9);
  CHECK(h100.nic_bytes_per_s == 400e9 / 8);
  CHECK(h100.gpu.peak_flops == 989e12);
  CHECK(h100.gpu.hbm_bytes_per_s == 3.35e12);
  auto h200 = preset("dgx-h200");
  CHECK(h200.gpu.hbm_bytes_per_s == 4.8e12);
  CHECK(h200.gpu.peak_flops == h100.gpu.peak_flops);
}

TEST_CASE("PRESET:k=v overrides the named fields in spec-sheet units", "[sim][platform]") {
  auto p = parse_platform("dgx-h200:nodes=4,nvlink_gbps=900,ib_gbps=800,nvlink_latency_us=3,flops_efficiency=0.5");
  CHECK(p.name == "dgx-h200");
  CHECK(p.nodes == 4);
  CHECK(p.gpus() == 32);
  CHECK(p.nvlink_bytes_per_s == 900e9);
  CHECK(p.nic_bytes_per_s == 100e9);
  CHECK(p.nvlink_latency_s == Approx(3e-6));
  CHECK(p.gpu.flops_efficiency == 0.5);
}

TEST_CASE("bad platform text names the offending part", "[sim][platform]") {
  auto message = [](const char* text) {
    try {
      parse_platform(text);
    } catch (const SimError& e) {
      CHECK(e.code() == SimErrorCode::BadPlatform);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message("dgx-a100"), Catch::Contains("unknown platform preset 'dgx-a100'"));
  CHECK_THAT(message("dgx-h100:warp=9"), Catch::Contains("unknown platform key 'warp'"));
  CHECK_THAT(message("dgx-h100:nodes=-1"), Catch::Contains("'nodes'"));
  CHECK_THAT(message("dgx-h100:nvlink_gbps=fast"), Catch::Contains("not a number"));
  CHECK_THAT(message("dgx-h100:nvlink_efficiency=1.5"), Catch::Contains("(0, 1]"));
  CHECK_THAT(message("dgx-h100:nodes"), Catch::Contains("key=value"));
  CHECK_THAT(message(""), Catch::Contains("empty"));
}

TEST_CASE("nodes=0 sizes the cluster to the plan, a fixed size must fit", "[sim][platform]") {
  CHECK(sized_for(preset("dgx-h100"), 20).nodes == 3);
  auto fixed = parse_platform("dgx-h100:nodes=1");
  CHECK(sized_for(fixed, 8).nodes == 1);
  CHECK_THROWS_AS(sized_for(fixed, 9), SimError);
}

TEST_CASE("an XML platform with gpuK hosts replays like the built one", "[sim][platform]") {
  // Two GPUs on one 100 GB/s link with 10 us latency (CM02: no corrections).
  const std::string path = "ht_sim_test_two_gpus.xml";
  {
    std::ofstream out(path);
    out << "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
           "<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\">\n"
           "<host id=\"gpu0\" speed=\"1Tf\"/><host id=\"gpu1\" speed=\"1Tf\"/>\n"
           "<link id=\"l\" bandwidth=\"100GBps\" latency=\"10us\"/>\n"
           "<route src=\"gpu0\" dst=\"gpu1\"><link_ctn id=\"l\"/></route>\n"
           "</zone></platform>\n";
  }
  PlanBuilder b(2);
  b.p2p(0, 1, 1e9, {});
  auto spec = parse_platform(path);
  CHECK(spec.xml_file == path);
  auto r = replay(b.plan(), spec, exact_costs());
  CHECK(r.summary.step_time_s == Approx(10e-6 + 1e9 / 100e9).epsilon(0).margin(1e-9));
  PlanBuilder three(3);
  three.compute(2, 1e-3);
  try {
    replay(three.plan(), spec, exact_costs());
    FAIL("expected a missing host error");
  } catch (const SimError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("no host 'gpu2'"));
  }
  std::remove(path.c_str());
}

TEST_CASE("a missing XML file is a BadPlatform error, not a crash", "[sim][platform]") {
  PlanBuilder b(1);
  b.compute(0, 1e-3);
  try {
    replay(b.plan(), parse_platform("does-not-exist.xml"), exact_costs());
    FAIL("expected BadPlatform");
  } catch (const SimError& e) {
    CHECK(e.code() == SimErrorCode::BadPlatform);
  }
}

TEST_CASE("platform sizes are counted in 64 bits and bounded", "[sim][platform]") {
  // 65537 x 65535 overflowed int to -1 GPUs; the product is refused with its true value.
  CHECK_THROWS_WITH(parse_platform("dgx-h200:nodes=65537,gpus_per_node=65535"),
                    Catch::Contains("4294967295 GPUs, more than the limit"));
  CHECK(parse_platform("dgx-h200:nodes=1024,gpus_per_node=1024").gpus() == kMaxPlatformGpus);
}

TEST_CASE("XML platforms are bounded by the hosts their text describes", "[sim][platform]") {
  CHECK(check_platform_xml(R"(<zone><host id="gpu0"/><host id='gpu1' /><hostess/></zone>)", "p.xml") == 2);
  CHECK(check_platform_xml(R"(<cluster radical="0-3,8,10-11"/><cabinet radical='0-1'/>)", "p.xml") == 9);
  CHECK_THROWS_WITH(check_platform_xml(R"(<cluster radical="0-99999999"/>)", "p.xml"),
                    Catch::Contains("p.xml describes more than 1048576 hosts"));
  CHECK_THROWS_WITH(check_platform_xml(R"(<cluster radical="0-99999999999999999999999999"/>)", "p.xml"),
                    Catch::Contains("more than 1048576 hosts"));
  CHECK_THROWS_WITH(check_platform_xml(R"(<cluster radical="5-2"/>)", "p.xml"), Catch::Contains("runs backwards"));
  CHECK_THROWS_WITH(check_platform_xml(R"(<cluster radical="a-b"/>)", "p.xml"), Catch::Contains("not a list"));
}
