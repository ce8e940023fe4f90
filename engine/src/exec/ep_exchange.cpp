// The expert-parallel exchange of one MoE layer: a rank's permuted rows (global expert-major)
// to the ranks whose experts process them, and back; the counts travel once per layer and
// microbatch (on the forward dispatch) and serve its three later all-to-alls.
#include <algorithm>

#include "state.hpp"

namespace ht::engine::exec {

// ---- expert-parallel exchange ----
// My permuted rows (global expert-major) -> the rows my local experts process (expert-major,
// sources in rank order inside each expert). `layout` is filled on the forward dispatch and
// reused by the three later exchanges of the same layer and microbatch.
void Executor::Impl::exchange_to_experts(runtime::Communicator& comm, const MoeRouting<float>& r,
                                         const std::vector<float>& rows, EpLayout& layout, bool fill_layout,
                                         std::vector<float>& expert_major, const char* label) const {
  const std::size_t c = static_cast<std::size_t>(cfg.hidden);
  const int n = comm.size();
  std::vector<std::vector<float>> send(static_cast<std::size_t>(n));
  for (int p = 0; p < n; ++p) {
    const auto lo = static_cast<std::size_t>(r.expert_offset[static_cast<std::size_t>(p * local_experts)]);
    const auto hi = static_cast<std::size_t>(r.expert_offset[static_cast<std::size_t>((p + 1) * local_experts)]);
    send[static_cast<std::size_t>(p)].assign(rows.begin() + static_cast<long>(lo * c),
                                             rows.begin() + static_cast<long>(hi * c));
  }
  if (fill_layout) {
    std::vector<std::vector<std::uint64_t>> cnt(static_cast<std::size_t>(n));
    for (int p = 0; p < n; ++p)
      for (int le = 0; le < local_experts; ++le)
        cnt[static_cast<std::size_t>(p)].push_back(
            static_cast<std::uint64_t>(r.tokens_per_expert[static_cast<std::size_t>(p * local_experts + le)]));
    // Sizes are known (local_experts counts per peer): one collective, no size exchange.
    layout.counts.assign(static_cast<std::size_t>(n),
                         std::vector<std::uint64_t>(static_cast<std::size_t>(local_experts)));
    runtime::mark_span_cpu("pre_cpu_us");
    comm.all_to_all_v<std::uint64_t>(spans_of<const std::uint64_t>(cnt), spans_of<std::uint64_t>(layout.counts),
                                     "dispatch counts");
    expert_major_rows(layout.counts, local_experts, layout.offset, layout.expert_start);
  }
  // Receive sizes follow from the layout: one collective for the payload.
  std::vector<std::vector<float>> recv(static_cast<std::size_t>(n));
  for (int s = 0; s < n; ++s) {
    std::size_t rows_from_s = 0;
    for (int le = 0; le < local_experts; ++le)
      rows_from_s += layout.counts[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
    recv[static_cast<std::size_t>(s)].resize(rows_from_s * c);
  }
  annotate_sent(comm, send);
  runtime::mark_span_cpu("pre_cpu_us");
  comm.all_to_all_v<float>(spans_of<const float>(send), spans_of<float>(recv), label);
  expert_major.assign(layout.expert_start.back() * c, 0.0f);
  for (int s = 0; s < n; ++s) {
    std::size_t src = 0;
    for (int le = 0; le < local_experts; ++le) {
      const std::size_t cnt = layout.counts[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
      const std::size_t dst = layout.offset[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
      if (src + cnt > recv[static_cast<std::size_t>(s)].size() / c)
        fail("all-to-all delivered fewer rows than announced");
      std::copy_n(recv[static_cast<std::size_t>(s)].begin() + static_cast<long>(src * c), cnt * c,
                  expert_major.begin() + static_cast<long>(dst * c));
      src += cnt;
    }
  }
}

// The inverse: expert-major rows back to the ranks whose tokens they are, in their permuted order.
void Executor::Impl::exchange_to_tokens(runtime::Communicator& comm, const MoeRouting<float>& r, const EpLayout& layout,
                                        const std::vector<float>& expert_major, std::vector<float>& rows,
                                        std::size_t my_rows, const char* label) const {
  const std::size_t c = static_cast<std::size_t>(cfg.hidden);
  const int n = comm.size();
  std::vector<std::vector<float>> send(static_cast<std::size_t>(n));
  for (int s = 0; s < n; ++s)
    for (int le = 0; le < local_experts; ++le) {
      const std::size_t cnt = layout.counts[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
      const std::size_t off = layout.offset[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
      auto& out = send[static_cast<std::size_t>(s)];
      out.insert(out.end(), expert_major.begin() + static_cast<long>(off * c),
                 expert_major.begin() + static_cast<long>((off + cnt) * c));
    }
  // Rows come back from each peer in the number this rank sent it (its experts' slice of the
  // permuted order), straight into place: one collective, no size exchange.
  rows.assign(my_rows * c, 0.0f);
  std::vector<std::span<float>> recv;
  for (int p = 0; p < n; ++p) {
    const auto lo = static_cast<std::size_t>(r.expert_offset[static_cast<std::size_t>(p * local_experts)]);
    const auto hi = static_cast<std::size_t>(r.expert_offset[static_cast<std::size_t>((p + 1) * local_experts)]);
    if (hi * c > rows.size()) fail("all-to-all routing addresses more rows than this rank has");
    recv.emplace_back(rows.data() + lo * c, (hi - lo) * c);
  }
  annotate_sent(comm, send);
  runtime::mark_span_cpu("pre_cpu_us");
  comm.all_to_all_v<float>(spans_of<const float>(send), recv, label);
}

}  // namespace ht::engine::exec
