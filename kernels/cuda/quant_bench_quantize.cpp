// The quantize-on-append rows of the packed bench (quant_bench_packed.hpp).
#include "kernels/cuda/packed_lane_order.hpp"
#include "kernels/cuda/quant_bench_packed.hpp"
#include "kernels/cuda/quantize.hpp"

namespace specpipe::kernels::cuda::quant_bench_detail {

// Quantize on append: one group of every sequence and KV head (one layer),
// and the same launch with nothing due (what most decode steps pay).
void packed_bench::quantize_rows() {
  for (const auto& f : {format_point{"kivi", 2, false}, format_point{"hier-int8", 4, true}}) {
    const int g = f.lower ? 128 : o.group;
    const int win_cap = 2 * g + 16;
    const v2_cache c(dev, st, batch, nkv, d, g, std::int64_t(4) * g, 0, o.seed + 400);
    buffer ring(dev, std::size_t(batch) * nkv * std::size_t(win_cap) * d * 2 * 2);
    fill_uniform_bf16(ring.as<std::uint16_t>(), std::int64_t(ring.size() / 2), -1, 1, o.seed + 401, st.get());
    buffer qi(dev, std::size_t(3 * batch) * 4);
    std::vector<std::int32_t> host(std::size_t(3 * batch));
    for (int b = 0; b < batch; ++b) {
      host[std::size_t(b)] = b;
      host[std::size_t(batch + b)] = 1;
      host[std::size_t(2 * batch + b)] = 1;
    }
    const auto view = c.view(4, f.lower);
    quantize_args qa;
    qa.src.k = ring.as<std::uint16_t>();
    qa.src.v = ring.as<std::uint16_t>() + std::size_t(batch) * nkv * std::size_t(win_cap) * d;
    qa.src.head_stride = std::int64_t(win_cap) * d;
    qa.src.slot_stride = std::int64_t(nkv) * qa.src.head_stride;
    qa.src.row_stride = d;
    qa.src.ring = win_cap;
    qa.dst.k_codes = const_cast<std::uint8_t*>(view.k_codes);
    qa.dst.v_codes = const_cast<std::uint8_t*>(view.v_codes);
    if (f.lower) {
      qa.dst.k_lower = const_cast<std::uint8_t*>(view.k_lower);
      qa.dst.v_lower = const_cast<std::uint8_t*>(view.v_lower);
    }
    qa.dst.k_scale = const_cast<std::uint16_t*>(view.k_scale);
    qa.dst.k_zero = const_cast<std::uint16_t*>(view.k_zero);
    qa.dst.v_scale = const_cast<std::uint16_t*>(view.v_scale);
    qa.dst.v_zero = const_cast<std::uint16_t*>(view.v_zero);
    const int bits = f.lower ? 4 : f.bits;
    qa.dst.k_head = std::int64_t(4) * d * g * bits / 8;
    qa.dst.k_slot = nkv * qa.dst.k_head;
    qa.dst.k_group = std::int64_t(d) * g * bits / 8;
    qa.dst.ks_head = std::int64_t(4) * d;
    qa.dst.ks_slot = nkv * qa.dst.ks_head;
    qa.dst.ks_group = d;
    const int ng = d / std::min(g, d);
    qa.dst.v_head = std::int64_t(4) * g * d * bits / 8;
    qa.dst.v_slot = nkv * qa.dst.v_head;
    qa.dst.v_token = std::int64_t(d) * bits / 8;
    qa.dst.vs_head = std::int64_t(4) * g * ng;
    qa.dst.vs_slot = nkv * qa.dst.vs_head;
    qa.dst.vs_token = ng;
    qa.rule = f.lower ? quant_rule_gpu::hier : quant_rule_gpu::rtn;
    qa.bits = bits;
    qa.group = g;
    qa.head_dim = d;
    qa.n_kv_heads = nkv;
    qa.entry_slot = qi.as<std::int32_t>();
    qa.entry_first_group = qi.as<std::int32_t>() + batch;
    qa.entry_groups = qi.as<std::int32_t>() + 2 * batch;
    qa.entries = batch;
    qa.max_groups = 1;
    packed_attention_args none;
    const double in_bytes = double(batch) * nkv * g * d * 2 * 2;
    for (const bool idle : {false, true}) {
      for (int b = 0; b < batch; ++b) host[std::size_t(2 * batch + b)] = idle ? 0 : 1;
      copy_to_device(qi.data(), host.data(), host.size() * 4, st.get());
      st.synchronize();
      add_row(idle ? "quantize-idle" : "quantize", f.name, bits * (f.lower ? 2 : 1), batch, none,
              idle ? 0.0 : in_bytes, "G=" + std::to_string(g) + ", one layer", [&] { quantize_groups(qa, st.get()); });
    }
    if (d == lane_order::head_dim) {  // the same groups written in lane order (v4's cache)
      for (int b = 0; b < batch; ++b) host[std::size_t(2 * batch + b)] = 1;
      copy_to_device(qi.data(), host.data(), host.size() * 4, st.get());
      st.synchronize();
      quantize_args ql = qa;
      ql.dst.order = packed_order::lane;
      add_row("quantize", f.name, bits * (f.lower ? 2 : 1), batch, none, in_bytes,
              "G=" + std::to_string(g) + ", one layer, lane order", [&] { quantize_groups(ql, st.get()); });
    }
  }
}

}  // namespace specpipe::kernels::cuda::quant_bench_detail
