// One process driving several devices (device_executor.hpp: make_multi_device_executor): a worker
// thread per device, each running the ranks of its block on its device through its endpoint of a
// ThreadFabric, as a process of an mpirun launch would. Everything a device executor does (make,
// step, optimizer step, downloads, teardown) runs on the worker that owns the device, because a
// device context belongs to its thread. When one worker fails, the fabric is aborted so the others
// stop waiting at a transfer, and the first error is rethrown.
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda/process_group.hpp"

namespace ht::engine::cuda {
namespace {

class MultiDevice final : public DeviceExecutor {
 public:
  MultiDevice(const DeviceExecutorFactory& make, std::unique_ptr<ThreadFabric> fabric, const patterns::ParsedPattern& p,
              const ModelConfig& cfg, std::uint64_t seed, const schedule::Plan& plan, DeviceExecutorOptions options)
      : fabric_(std::move(fabric)), plan_(plan), n_(fabric_->size()) {
    if (n_ < 1) throw std::runtime_error("multi-device executor: no devices");
    groups_.resize(static_cast<std::size_t>(n_));
    exs_.resize(static_cast<std::size_t>(n_));
    tasks_.resize(static_cast<std::size_t>(n_));
    for (int i = 0; i < n_; ++i) threads_.emplace_back([this, i] { work(i); });
    try {
      run_all([&](int i) {
        const auto k = static_cast<std::size_t>(i);
        groups_[k] = fabric_->join(i);
        DeviceExecutorOptions o = options;
        o.group = groups_[k].get();
        exs_[k] = make(p, cfg, seed, plan, o);
      });
      device_ = exs_[0]->device();
      const std::string note = process_note([&] {
        DeviceExecutorOptions o;
        o.group = groups_[0].get();
        return o;
      }());
      if (device_.size() >= note.size() && device_.compare(device_.size() - note.size(), note.size(), note) == 0)
        device_.resize(device_.size() - note.size());
      device_ += ", " + std::to_string(n_) + " devices driven by one process (" + groups_[0]->name() + ")";
    } catch (...) {
      shut_down();  // the executors go on their own threads, the threads are joined
      throw;
    }
  }
  ~MultiDevice() override { shut_down(); }

  std::string device() const override { return device_; }
  int ranks() const override { return exs_[0]->ranks(); }
  bool local(int) const override { return true; }
  const schedule::Plan& plan() const override { return plan_; }
  exec::StepResult step(const std::vector<std::vector<Batch>>& batches) override {
    std::vector<exec::StepResult> out(static_cast<std::size_t>(n_));
    run_all([&](int i) { out[static_cast<std::size_t>(i)] = exs_[static_cast<std::size_t>(i)]->step(batches); });
    // Every device's losses are the whole step's (gathered); the timeline joins the devices' ranks,
    // each device's on its own clock.
    exec::StepResult r = std::move(out[0]);
    for (std::size_t i = 1; i < out.size(); ++i) {
      for (auto& s : out[i].timeline.streams) r.timeline.streams.push_back(std::move(s));
      for (auto& s : out[i].timeline.spans) r.timeline.spans.push_back(std::move(s));
    }
    r.timeline.metadata["devices"] = std::to_string(n_);
    return r;
  }
  void zero_grad() override {
    run_all([&](int i) { exs_[static_cast<std::size_t>(i)]->zero_grad(); });
  }
  double optimizer_step(const AdamWConfig& cfg) override {
    std::vector<double> norms(static_cast<std::size_t>(n_));
    run_all([&](int i) { norms[static_cast<std::size_t>(i)] = exs_[static_cast<std::size_t>(i)]->optimizer_step(cfg); });
    return norms[0];
  }
  std::vector<ParamRef<float>> parameters(int rank) override {
    std::vector<ParamRef<float>> out;
    on_owner(rank, [&](DeviceExecutor& ex) { out = ex.parameters(rank); });
    return out;
  }
  bool owns(int rank, const std::string& canonical) const override { return exs_[0]->owns(rank, canonical); }
  AdamWState<float> optimizer_state(int rank) override {
    AdamWState<float> out;
    on_owner(rank, [&](DeviceExecutor& ex) { out = ex.optimizer_state(rank); });
    return out;
  }
  void restore(int rank, const AdamWState<float>& state) override {
    on_owner(rank, [&](DeviceExecutor& ex) { ex.restore(rank, state); });
  }

 private:
  // f on the executor of the device that runs `rank`, on that device's worker thread.
  void on_owner(int rank, const std::function<void(DeviceExecutor&)>& f) {
    if (rank < 0 || rank >= ranks()) throw std::runtime_error("multi-device executor: no rank " + std::to_string(rank));
    const int owner = rank / (ranks() / n_);
    run_all([&](int i) {
      if (i == owner) f(*exs_[static_cast<std::size_t>(i)]);
    });
  }
  // Runs f(i) on every worker i at once and waits for all; on the first failure the fabric is
  // aborted (the others' transfers and gathers throw instead of waiting) and that first error
  // rethrown.
  void run_all(const std::function<void(int)>& f) {
    std::unique_lock<std::mutex> lock(mu_);
    for (auto& t : tasks_) t = f;
    errors_.assign(static_cast<std::size_t>(n_), nullptr);
    done_ = 0;
    ++round_;
    cv_.notify_all();
    bool aborted = false;
    for (;;) {
      cv_.wait(lock, [&] {
        bool failed = false;
        for (const auto& e : errors_) failed |= e != nullptr;
        return done_ == n_ || (failed && !aborted);
      });
      if (done_ == n_) break;
      aborted = true;
      fabric_->abort();  // takes the fabric's lock only; waiting workers hold none of ours
    }
    if (first_error_) std::rethrow_exception(std::exchange(first_error_, nullptr));
  }
  void work(int i) {
    const auto k = static_cast<std::size_t>(i);
    long seen = 0;
    for (;;) {
      std::function<void(int)> f;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || round_ != seen; });
        if (round_ == seen) return;  // stopping, nothing left to run
        seen = round_;
        f = std::move(tasks_[k]);
      }
      std::exception_ptr error;
      try {
        f(i);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      errors_[k] = error;
      if (error && !first_error_) first_error_ = error;  // the cause, not the others' aborts
      ++done_;
      cv_.notify_all();
    }
  }
  // The executors and endpoints go on their own threads (their device contexts live there).
  void shut_down() {
    if (threads_.empty()) return;
    try {
      run_all([&](int i) {
        const auto k = static_cast<std::size_t>(i);
        exs_[k].reset();
        groups_[k].reset();
        fabric_->leave(i);
      });
    } catch (...) {  // teardown errors: nothing left to report them to
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  std::unique_ptr<ThreadFabric> fabric_;
  schedule::Plan plan_;
  int n_;
  std::string device_;
  std::vector<std::unique_ptr<ProcessGroup>> groups_;
  std::vector<std::unique_ptr<DeviceExecutor>> exs_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void(int)>> tasks_;
  std::vector<std::exception_ptr> errors_;
  std::exception_ptr first_error_;
  long round_ = 0;
  int done_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<DeviceExecutor> make_multi_device_executor(const DeviceExecutorFactory& make,
                                                           std::unique_ptr<ThreadFabric> fabric,
                                                           const patterns::ParsedPattern& p, const ModelConfig& cfg,
                                                           std::uint64_t seed, schedule::Plan plan,
                                                           DeviceExecutorOptions options) {
  if (!fabric) throw std::runtime_error("multi-device executor: no fabric");
  return std::make_unique<MultiDevice>(make, std::move(fabric), p, cfg, seed, plan, options);
}

}  // namespace ht::engine::cuda
