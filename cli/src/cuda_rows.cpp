// `hybrid-twin verify --backend cuda`: one `cpu_vs_cuda_layer` row per CUDA layer quantity
// (engine::cuda::compare_layers_cuda: the layer on the GPU and on the CPU reference, same inputs)
// in the format of the CPU verify rows: pair, config, max_abs_diff, bitwise, verdict, and the
// applied bound as the note. `--backend cuda-host` prints the layer rows of the same
// layer code on the host emulation of the device, which needs no GPU. Both end with the whole-model
// rows (engine::cuda::compare_models): grouped vs flattened on the device, device vs CPU, and the
// EP-overlap executor rows (engine::cuda::compare_executors): combined 1F1B vs sequential and
// grouped vs flattened on the device's streams, the ranks over two devices of one process vs one
// device, device executor vs CPU executor.
#include "cuda_rows.hpp"

#include <algorithm>
#include <exception>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda/layer_compare.hpp"
#include "ht/engine/cuda_probe.hpp"
#include "ht/io/log.hpp"

namespace ht::cli {

bool cuda_usable_or_say_why() {
  const auto probe = engine::cuda_probe();
  if (!probe.usable) io::log::Line("cuda", false) << "hybrid-twin: no usable CUDA GPU: " << probe.reason;
  return probe.usable;
}

namespace {

std::string layer_note(const engine::cuda::LayerComparison& c) {
  std::ostringstream o;
  o << std::setprecision(3) << "err vs float64 " << c.err_dev << (c.pass ? " <= " : " > ") << "bound " << c.bound
    << " (CPU float32 err " << c.err_ref << ", K " << c.depth << ", scale " << c.scale << ")";
  return o.str();
}

void add_layer_rows(std::vector<VerifyRow>& rows, const std::string& pair,
                    const std::vector<engine::cuda::LayerComparison>& layers) {
  for (const auto& c : layers)
    rows.push_back({pair, c.layer + "/" + c.quantity, c.diff_cpu, c.diff_cpu == 0, c.pass ? "pass" : "fail", layer_note(c)});
}

void add_model_rows(std::vector<VerifyRow>& rows, const std::vector<engine::cuda::ModelComparison>& models) {
  for (const auto& m : models)
    rows.push_back({m.pair, m.config, m.max_abs_diff, m.bitwise, m.pass ? "pass" : "fail", m.note});
}

}  // namespace

int print_verify_rows(const std::vector<VerifyRow>& rows, bool json_out) {
  bool failed = false;
  for (const auto& r : rows) failed |= r.verdict == "fail";
  if (json_out) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : rows)
      j.push_back({{"pair", r.pair}, {"config", r.config}, {"max_abs_diff", r.max_abs_diff}, {"bitwise", r.bitwise},
                   {"verdict", r.verdict}, {"note", r.note}});
    std::cout << j.dump(2) << "\n";
  } else {
    std::size_t pair_w = 4, config_w = 6;
    for (const auto& r : rows) {
      pair_w = std::max(pair_w, r.pair.size());
      config_w = std::max(config_w, r.config.size());
    }
    std::cout << std::left << std::setw(static_cast<int>(pair_w + 2)) << "pair" << std::setw(static_cast<int>(config_w + 2))
              << "config" << std::setw(14) << "max_abs_diff" << std::setw(9) << "bitwise" << std::setw(9) << "verdict"
              << "note\n";
    for (const auto& r : rows)
      std::cout << std::setw(static_cast<int>(pair_w + 2)) << r.pair << std::setw(static_cast<int>(config_w + 2))
                << r.config << std::setw(14) << std::setprecision(3) << r.max_abs_diff << std::setw(9)
                << (r.bitwise ? "yes" : "no") << std::setw(9) << r.verdict << r.note << "\n";
  }
  return failed ? 1 : 0;
}

int verify_cpu_vs_cuda(bool json_out) {
  if (!cuda_usable_or_say_why()) return 2;
  io::log::say("verify") << "cpu_vs_cuda on " << engine::cuda_probe().device_name;
  std::vector<VerifyRow> rows;
  add_layer_rows(rows, "cpu_vs_cuda_layer", engine::cuda::compare_layers_cuda(42, {}));
  add_model_rows(rows, engine::cuda::compare_models(engine::cuda::make_cuda_executor, 42));
  // Two GPUs of this process (NCCL) when it has them; else the row is skipped, saying why.
  add_model_rows(rows, engine::cuda::compare_executors(
                           engine::cuda::make_cuda_executor, 42,
                           [](int n) -> std::unique_ptr<engine::cuda::ThreadFabric> {
                             try {
                               return engine::cuda::make_nccl_fabric(n);
                             } catch (const std::exception& e) {
                               io::log::say("verify") << "device_executor_devices_vs_one skipped: " << e.what();
                               return nullptr;
                             }
                           }));
  return print_verify_rows(rows, json_out);
}

int verify_cuda_layers_on_host(bool json_out) {
  io::log::say("verify") << "the CUDA layer code on the host emulation of the device (no GPU involved)";
  std::vector<VerifyRow> rows;
  add_layer_rows(rows, "cpu_vs_cuda_host_layer", engine::cuda::compare_layers_host(42, {}));
  add_model_rows(rows, engine::cuda::compare_models(engine::cuda::make_host_executor, 42));
  add_model_rows(rows, engine::cuda::compare_executors(engine::cuda::make_host_executor, 42, engine::cuda::make_host_fabric));
  return print_verify_rows(rows, json_out);
}

}  // namespace ht::cli
