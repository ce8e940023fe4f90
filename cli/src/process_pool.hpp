// The twin's process pool: search, sweeps and the fidelity bench run their simulations in forked
// workers (io::spawn_child), which take the next item from a counter they share and stream one
// JSON line per result back to the parent.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ht::cli {

// Runs fn(i) for every i in `items` in `workers` forked processes (the parent never runs
// SimGrid, so every child starts from the same state and results do not depend on the split);
// a progress line named `what` on stderr, redrawn at most once a second ("" for none). Results
// in the order of `items`. Throws std::runtime_error when a worker dies.
// `describe`, when given, adds to the progress line: it gets the results so far (null where
// none has arrived) and is asked at most once a second.
std::vector<nlohmann::json> parallel_map(
    const std::vector<int>& items, int workers, const std::string& what, const std::function<nlohmann::json(int)>& fn,
    const std::function<std::string(const std::vector<nlohmann::json>&)>& describe = {});

}  // namespace ht::cli
