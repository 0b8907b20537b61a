#pragma once
// The device arrangement of packed KV bytes (kernels/cuda/packed_attention.hpp,
// packed_cache_view), built on the host from CPU-layout fixtures
// (quant_packed_fixture.hpp): each slot's key blocks, key scales, value rows
// and value scales moved into one contiguous run per (slot, KV head), and
// the window rows into a bf16 ring (position p at row p % win_cap). The bytes
// of every block and row are the CPU's; only their order changes. With
// packed_order::lane (head_dim 128) the codes are moved, one by one, into
// kernels/cuda/packed_lane_order.hpp's order instead (the v4 kernel's).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/packed_lane_order.hpp"
#include "kernels/quant_packed_fixture.hpp"
#include "memory/kv_layout.hpp"
#include "memory/dtype.hpp"

namespace specpipe::test {

struct device_layout_host {
  kernels::cuda::packed_order order = kernels::cuda::packed_order::cpu;
  int bits = 2, group = 64, d = 128, kv_heads = 1, slots = 0, win_cap = 1;
  bool lower = false;
  std::int64_t max_groups = 0;
  std::int64_t k_run = 0, ks_run = 0, v_run = 0, vs_run = 0;  // bytes, f16 elements, bytes, f16 elements
  std::vector<std::uint8_t> kc, kl, vc, vl;
  std::vector<std::uint16_t> ks, kz, vs, vz, wk, wv;  // wk/wv bf16 rings

  std::int64_t block() const { return std::int64_t(d) * group * bits / 8; }
  std::int64_t row() const { return std::int64_t(d) * bits / 8; }
  int vgroups() const { return d / std::min(group, d); }
  std::int64_t run_of(int s, std::int64_t h) const { return std::int64_t(s) * kv_heads + h; }

  // fixtures: one per slot, same bits/group/d/kv_heads/rule; windows are
  // read from f.k/f.v after f.quantized() and rounded to bf16.
  static device_layout_host build(const std::vector<packed_fixture>& fs, int win_cap, std::int64_t capacity_groups = 0,
                                  kernels::cuda::packed_order order = kernels::cuda::packed_order::cpu) {
    device_layout_host L;
    L.order = order;
    const packed_fixture& f0 = fs.front();
    L.bits = f0.bits;
    L.group = int(f0.group);
    L.d = int(f0.d);
    L.kv_heads = int(f0.kv_heads);
    L.slots = int(fs.size());
    L.win_cap = win_cap;
    L.lower = f0.rule == kernels::cpu::quant_rule::hier;
    L.max_groups = capacity_groups;
    for (const auto& f : fs) L.max_groups = std::max(L.max_groups, f.groups);
    L.max_groups = std::max<std::int64_t>(L.max_groups, 1);
    const std::int64_t tokens = L.max_groups * L.group, vg = L.vgroups();
    L.k_run = L.max_groups * L.block();
    L.ks_run = L.max_groups * L.d;
    L.v_run = tokens * L.row();
    L.vs_run = tokens * vg;
    const std::size_t runs = std::size_t(L.slots) * std::size_t(L.kv_heads);
    L.kc.assign(runs * std::size_t(L.k_run), 0xA5);
    if (L.lower) L.kl.assign(L.kc.size(), 0xA5);
    L.vc.assign(runs * std::size_t(L.v_run), 0xA5);
    if (L.lower) L.vl.assign(L.vc.size(), 0xA5);
    // Unwritten scales: a finite f16 (1.0) so that stray reads stay finite.
    L.ks.assign(runs * std::size_t(L.ks_run), 0x3C00);
    L.kz.assign(L.ks.size(), 0x3C00);
    L.vs.assign(runs * std::size_t(L.vs_run), 0x3C00);
    L.vz.assign(L.vs.size(), 0x3C00);
    L.wk.assign(runs * std::size_t(win_cap) * std::size_t(L.d), f32_to_bf16(0.0f));
    L.wv.assign(L.wk.size(), f32_to_bf16(0.0f));
    for (int s = 0; s < L.slots; ++s) {
      const packed_fixture& f = fs[std::size_t(s)];
      if (f.window > win_cap) throw std::invalid_argument("device_layout_host: a window exceeds the ring");
      for (std::int64_t h = 0; h < L.kv_heads; ++h) {
        const std::int64_t run = L.run_of(s, h);
        if (L.lane()) {
          L.place_lane_order(f, s, h);
          L.place_window(f, s, h);
          continue;
        }
        for (std::int64_t q = 0; q < f.groups; ++q) {
          const std::int64_t cpu_blk = q * L.kv_heads + h;
          std::copy_n(f.k_codes.begin() + cpu_blk * L.block(), L.block(), L.kc.begin() + run * L.k_run + q * L.block());
          if (L.lower)
            std::copy_n(f.k_lower.begin() + cpu_blk * L.block(), L.block(), L.kl.begin() + run * L.k_run + q * L.block());
          std::copy_n(f.k_scale.begin() + cpu_blk * L.d, L.d, L.ks.begin() + run * L.ks_run + q * L.d);
          std::copy_n(f.k_zero.begin() + cpu_blk * L.d, L.d, L.kz.begin() + run * L.ks_run + q * L.d);
        }
        for (std::int64_t t = 0; t < f.quantized(); ++t) {
          const std::int64_t cpu_row = t * L.kv_heads + h;
          std::copy_n(f.v_codes.begin() + cpu_row * L.row(), L.row(), L.vc.begin() + run * L.v_run + t * L.row());
          if (L.lower)
            std::copy_n(f.v_lower.begin() + cpu_row * L.row(), L.row(), L.vl.begin() + run * L.v_run + t * L.row());
          std::copy_n(f.v_scale.begin() + cpu_row * vg, vg, L.vs.begin() + run * L.vs_run + t * vg);
          std::copy_n(f.v_zero.begin() + cpu_row * vg, vg, L.vz.begin() + run * L.vs_run + t * vg);
        }
        L.place_window(f, s, h);
      }
    }
    return L;
  }

  bool lane() const { return order == kernels::cuda::packed_order::lane; }

  // Window rows of (slot s, head h) into the bf16 ring.
  void place_window(const packed_fixture& f, int s, std::int64_t h) {
    const std::int64_t run = run_of(s, h);
    for (std::int64_t p = f.quantized(); p < f.len(); ++p) {
      const std::size_t src = std::size_t((p * kv_heads + h) * d);
      const std::size_t dst = std::size_t((run * win_cap + p % win_cap) * d);
      for (int c = 0; c < d; ++c) {
        wk[dst + std::size_t(c)] = f32_to_bf16(f.k[src + std::size_t(c)]);
        wv[dst + std::size_t(c)] = f32_to_bf16(f.v[src + std::size_t(c)]);
      }
    }
  }

  // Codes of (slot s, head h) moved one by one into lane order, scales as in the cpu order.
  void place_lane_order(const packed_fixture& f, int s, std::int64_t h) {
    namespace lo = kernels::cuda::lane_order;
    if (d != lo::head_dim) throw std::invalid_argument("device_layout_host: lane order needs head_dim 128");
    const std::int64_t run = run_of(s, h), chan = std::int64_t(group) * bits / 8, vg = vgroups();
    auto put = [](std::vector<std::uint8_t>& v, std::size_t byte0, int bit, unsigned code) {
      v[byte0 + std::size_t(bit >> 3)] |= std::uint8_t(code << (bit & 7));
    };
    // Clear the run's code bytes first (the fill pattern would leak into OR-ed bits).
    std::fill_n(kc.begin() + run * k_run, k_run, 0);
    std::fill_n(vc.begin() + run * v_run, v_run, 0);
    if (lower) {
      std::fill_n(kl.begin() + run * k_run, k_run, 0);
      std::fill_n(vl.begin() + run * v_run, v_run, 0);
    }
    for (std::int64_t q = 0; q < f.groups; ++q) {
      const std::int64_t cpu_blk = q * kv_heads + h;
      std::copy_n(f.k_scale.begin() + cpu_blk * d, d, ks.begin() + run * ks_run + q * d);
      std::copy_n(f.k_zero.begin() + cpu_blk * d, d, kz.begin() + run * ks_run + q * d);
      for (int t = 0; t < group; ++t)
        for (int c = 0; c < d; ++c) {
          const std::size_t row = std::size_t(run * k_run + (q * group + t) * lo::key_row_bytes(bits));
          put(kc, row, lo::key_bit(c, bits), packed_code(f.k_codes.data() + cpu_blk * block() + c * chan, t, bits));
          if (lower) {
            const std::size_t lrow = std::size_t(run * k_run + (q * group + t) * lo::key_row_bytes(4));
            put(kl, lrow, lo::key_bit(c, 4), packed_code(f.k_lower.data() + cpu_blk * block() + c * chan, t, 4));
          }
        }
    }
    for (std::int64_t p = 0; p < f.quantized(); ++p) {
      const std::int64_t cpu_row = p * kv_heads + h;
      std::copy_n(f.v_scale.begin() + cpu_row * vg, vg, vs.begin() + run * vs_run + p * vg);
      std::copy_n(f.v_zero.begin() + cpu_row * vg, vg, vz.begin() + run * vs_run + p * vg);
      const std::size_t blk = std::size_t(run * v_run + (p / 16) * lo::value_block_bytes(bits));
      for (int c = 0; c < d; ++c) {
        put(vc, blk, lo::value_bit(int(p % 16), c, bits), packed_code(f.v_codes.data() + cpu_row * row(), c, bits));
        if (lower) {
          const std::size_t lblk = std::size_t(run * v_run + (p / 16) * lo::value_block_bytes(4));
          put(vl, lblk, lo::value_bit(int(p % 16), c, 4), packed_code(f.v_lower.data() + cpu_row * row(), c, 4));
        }
      }
    }
  }

  // The key a reader of this arrangement sees at (slot, head, position,
  // channel) for a slot with `quantized` packed tokens (tests of the harness).
  float key_at(int s, std::int64_t h, std::int64_t p, int c, std::int64_t quantized, bool read_lower) const {
    const std::int64_t run = run_of(s, h);
    if (p >= quantized) return bf16_to_f32(wk[std::size_t((run * win_cap + p % win_cap) * d + c)]);
    const std::int64_t q = p / group, t = p % group, chan = std::int64_t(group) * bits / 8;
    const std::size_t blk = std::size_t(run * k_run + q * block() + c * chan);
    const float s16 = f16_to_f32(ks[std::size_t(run * ks_run + q * d + c)]);
    const float z16 = f16_to_f32(kz[std::size_t(run * ks_run + q * d + c)]);
    namespace lo = kernels::cuda::lane_order;
    const unsigned u = lane() ? lo::key_code(kc.data() + run * k_run, p, c, bits) : packed_code(kc.data() + blk, t, bits);
    float x = z16 + float(u) * s16;
    if (read_lower) {
      const unsigned l = lane() ? lo::key_code(kl.data() + run * k_run, p, c, 4) : packed_code(kl.data() + blk, t, 4);
      x += (float(l) - 8) * s16 / 16;
    }
    return x;
  }
  float value_at(int s, std::int64_t h, std::int64_t p, int c, std::int64_t quantized, bool read_lower) const {
    const std::int64_t run = run_of(s, h);
    if (p >= quantized) return bf16_to_f32(wv[std::size_t((run * win_cap + p % win_cap) * d + c)]);
    const std::size_t r = std::size_t(run * v_run + p * row());
    const std::size_t sc = std::size_t(run * vs_run + p * vgroups() + c / std::min(group, d));
    const float s16 = f16_to_f32(vs[sc]), z16 = f16_to_f32(vz[sc]);
    namespace lo = kernels::cuda::lane_order;
    const unsigned u = lane() ? lo::value_code(vc.data() + run * v_run, p, c, bits) : packed_code(vc.data() + r, c, bits);
    float x = z16 + float(u) * s16;
    if (read_lower) {
      const unsigned l = lane() ? lo::value_code(vl.data() + run * v_run, p, c, 4) : packed_code(vl.data() + r, c, 4);
      x += (float(l) - 8) * s16 / 16;
    }
    return x;
  }
};

}  // namespace specpipe::test
