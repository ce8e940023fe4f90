// Cases per second of every verifier property on this machine, each run for a fixed time with a
// fixed seed, against the targets of issue 7 (pattern properties >= 10,000/s, engine
// equivalences >= 20/s on the tiny configs). Prints figures; never fails on timing.
//   bench_verify [seconds per property, default 2] [property name or group prefix ...]
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "ht/verify/property.hpp"
#include "ht/verify/runner.hpp"

int main(int argc, char** argv) {
  double seconds = 2.0;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i == 1 && a.find_first_not_of("0123456789.") == std::string::npos) {
      seconds = std::atof(a.c_str());
    } else {
      only.push_back(a);
    }
  }
  std::cout << "verifier throughput, " << seconds << " s per property, seed 1\n";
  std::cout << std::left << std::setw(34) << "property" << std::right << std::setw(9) << "cases" << std::setw(9)
            << "seconds" << std::setw(12) << "cases/s" << std::setw(10) << "target" << "  result\n";
  for (const auto& p : ht::verify::properties()) {
    bool chosen = only.empty();
    for (const auto& o : only) chosen = chosen || p.name == o || p.name.rfind(o + ".", 0) == 0;
    if (!chosen) continue;
    ht::verify::RunOptions opt;
    opt.seed = 1;
    opt.seconds = seconds;
    opt.shrink = false;
    const auto r = ht::verify::run_property(p, opt);
    const double rate = r.seconds > 0 ? r.cases / r.seconds : 0;
    const std::string target = p.group == "pattern" ? ">=10000" : (p.group == "engine" && p.name != "engine.router") ? ">=20" : "-";
    std::cout << std::left << std::setw(34) << p.name << std::right << std::setw(9) << r.cases << std::setw(9)
              << std::fixed << std::setprecision(2) << r.seconds << std::setw(12) << std::setprecision(0) << rate
              << std::setw(10) << target << "  " << ht::verify::to_string(r.outcome) << "\n";
  }
  return 0;
}
