// CUDA quantize-and-pack (kernels/cuda/quantize.hpp) against the CPU's
// quantize_key_group / quantize_value_rows: bit-exact codes, lower planes,
// f16 scales and zeros on random bf16-valued rows with outlier channels, for
// every rule (KIVI 1/2/4-bit, SpeCache 1-bit, hier's two planes), G 8..128,
// head_dim 64 and 128; from the CPU's window layout into the CPU's packed
// layout, and from a wrapping ring into per-(slot, head) runs with several
// entries (some writing nothing). Also the row copies and the dequantization
// the prefill path uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_test_util.hpp"
#include "kernels/packed_device_layout.hpp"
#include "kernels/quant_packed_fixture.hpp"
#include "kernels/quant_reference.hpp"
#include "kernels/quantize.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/quantize.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_quantize : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kcpu = kernels::cpu;
namespace kc = kernels::cuda;

struct rule_case {
  const char* name;
  kcpu::quant_rule cpu;
  kc::quant_rule_gpu gpu;
  int bits;
};
const rule_case rules[] = {{"kivi1", kcpu::quant_rule::rtn, kc::quant_rule_gpu::rtn, 1},
                           {"kivi2", kcpu::quant_rule::rtn, kc::quant_rule_gpu::rtn, 2},
                           {"kivi4", kcpu::quant_rule::rtn, kc::quant_rule_gpu::rtn, 4},
                           {"specache1", kcpu::quant_rule::specache, kc::quant_rule_gpu::specache, 1},
                           {"hier", kcpu::quant_rule::hier, kc::quant_rule_gpu::hier, 4}};

// Rows [tokens, heads, d] of bf16 values with outliers: a hot channel per
// head and scattered spikes, a few exact zeros and a constant channel
// (scale 0).
std::vector<float> make_rows(std::mt19937& rng, std::int64_t tokens, std::int64_t heads, std::int64_t d) {
  auto v = random_values(rng, std::size_t(tokens * heads * d), 20.f);
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < heads; ++h) {
      v[std::size_t((t * heads + h) * d + 3)] *= 12.f;  // outlier channel
      v[std::size_t((t * heads + h) * d + 7)] = 0.5f;   // constant channel
      if (t % 9 == 0) v[std::size_t((t * heads + h) * d + 11)] = 0.f;
    }
  return round_bf16(v);
}

void expect_bytes_equal(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ < 5)
      ADD_FAILURE() << what << ": byte " << i << " is " << int(got[i]) << ", expected " << int(want[i]);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " bytes differ";
}
template <class T>
std::vector<std::uint8_t> as_bytes(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
  return std::vector<std::uint8_t>(p, p + v.size() * sizeof(T));
}

TEST_F(cuda_quantize, matches_cpu_bit_for_bit_in_the_cpu_layout) {
  unsigned seed = 2000;
  for (const auto& rc : rules)
    for (const int d : {64, 128})
      for (const int group : {8, 16, 32, 64, 128}) {
        const std::string what =
            std::string(rc.name) + " d=" + std::to_string(d) + " G=" + std::to_string(group);
        SCOPED_TRACE(what);
        const int heads = 3, groups = 3;
        const std::int64_t tokens = std::int64_t(groups) * group, kvd = std::int64_t(heads) * d;
        std::mt19937 rng(++seed);
        const auto k = make_rows(rng, tokens, heads, d), v = make_rows(rng, tokens, heads, d);
        const bool hier = rc.cpu == kcpu::quant_rule::hier;
        const std::int64_t block = std::int64_t(d) * group * rc.bits / 8, row = std::int64_t(d) * rc.bits / 8;
        const int vgs = std::min(group, d), ng = d / vgs;
        // CPU, in its layout.
        std::vector<std::uint8_t> kc_w(static_cast<std::size_t>(groups * heads * block)), kl_w(hier ? kc_w.size() : 0),
            vc_w(static_cast<std::size_t>(tokens * heads * row)), vl_w(hier ? vc_w.size() : 0);
        std::vector<std::uint16_t> ks_w(static_cast<std::size_t>(groups * heads * d)), kz_w(ks_w.size()),
            vs_w(static_cast<std::size_t>(tokens * heads * ng)), vz_w(vs_w.size());
        for (int g = 0; g < groups; ++g)
          for (int h = 0; h < heads; ++h) {
            const std::int64_t b = g * heads + h;
            kcpu::quantize_key_group(k.data() + g * group * kvd + h * d, kvd, group, d, rc.bits, rc.cpu,
                                     {kc_w.data() + b * block, hier ? kl_w.data() + b * block : nullptr,
                                      ks_w.data() + b * d, kz_w.data() + b * d});
          }
        for (int h = 0; h < heads; ++h)
          kcpu::quantize_value_rows(v.data() + h * d, kvd, tokens, d, vgs, rc.bits, rc.cpu,
                                    {vc_w.data() + h * row, hier ? vl_w.data() + h * row : nullptr,
                                     vs_w.data() + h * ng, vz_w.data() + h * ng},
                                    heads * row, heads * ng);
        // GPU, same layout: one entry quantizing all groups.
        dev_array<std::uint16_t> kd(*dev_, to_bf16(k)), vd(*dev_, to_bf16(v));
        dev_array<std::uint8_t> kc_d(*dev_, kc_w.size(), 0xAB), kl_d(*dev_, std::max<std::size_t>(16, kl_w.size()), 0xAB),
            vc_d(*dev_, vc_w.size(), 0xAB), vl_d(*dev_, std::max<std::size_t>(16, vl_w.size()), 0xAB);
        dev_array<std::uint16_t> ks_d(*dev_, ks_w.size(), 0xAB), kz_d(*dev_, kz_w.size(), 0xAB),
            vs_d(*dev_, vs_w.size(), 0xAB), vz_d(*dev_, vz_w.size(), 0xAB);
        dev_array<std::int32_t> slot(*dev_, std::vector<std::int32_t>{0}), first(*dev_, std::vector<std::int32_t>{0}),
            count(*dev_, std::vector<std::int32_t>{groups});
        kc::quantize_args a;
        a.src.k = kd.get();
        a.src.v = vd.get();
        a.src.head_stride = d;
        a.src.row_stride = kvd;
        a.dst.k_codes = kc_d.get();
        a.dst.v_codes = vc_d.get();
        if (hier) {
          a.dst.k_lower = kl_d.get();
          a.dst.v_lower = vl_d.get();
        }
        a.dst.k_scale = ks_d.get();
        a.dst.k_zero = kz_d.get();
        a.dst.v_scale = vs_d.get();
        a.dst.v_zero = vz_d.get();
        a.dst.k_head = block;
        a.dst.k_group = heads * block;
        a.dst.ks_head = d;
        a.dst.ks_group = std::int64_t(heads) * d;
        a.dst.v_head = row;
        a.dst.v_token = heads * row;
        a.dst.vs_head = ng;
        a.dst.vs_token = std::int64_t(heads) * ng;
        a.rule = rc.gpu;
        a.bits = rc.bits;
        a.group = group;
        a.head_dim = d;
        a.n_kv_heads = heads;
        a.entry_slot = slot.get();
        a.entry_first_group = first.get();
        a.entry_groups = count.get();
        a.entries = 1;
        a.max_groups = groups;
        a.dependent = group == 64;  // a programmatic dependent launch: same bytes
        kc::quantize_groups(a, nullptr);
        expect_bytes_equal(kc_d.download(), kc_w, what + " key codes");
        expect_bytes_equal(as_bytes(ks_d.download()), as_bytes(ks_w), what + " key scales");
        expect_bytes_equal(as_bytes(kz_d.download()), as_bytes(kz_w), what + " key zeros");
        expect_bytes_equal(vc_d.download(), vc_w, what + " value codes");
        expect_bytes_equal(as_bytes(vs_d.download()), as_bytes(vs_w), what + " value scales");
        expect_bytes_equal(as_bytes(vz_d.download()), as_bytes(vz_w), what + " value zeros");
        if (hier) {
          expect_bytes_equal(kl_d.download(), kl_w, what + " key lower plane");
          expect_bytes_equal(vl_d.download(), vl_w, what + " value lower plane");
        }
        EXPECT_TRUE(kc_d.sentinel_intact() && vc_d.sentinel_intact() && ks_d.sentinel_intact() &&
                    vs_d.sentinel_intact())
            << "write past a packed array";
      }
}

// Lane order (packed_lane_order.hpp, the v4 attention's): the CPU's codes,
// scales and zeros, each code moved to its lane-order bit, in per-head runs.
TEST_F(cuda_quantize, matches_cpu_codes_in_lane_order) {
  namespace lo = kc::lane_order;
  unsigned seed = 2600;
  for (const auto& rc : rules)
    for (const int group : {16, 32, 64, 128}) {
      const std::string what = std::string(rc.name) + " lane order G=" + std::to_string(group);
      SCOPED_TRACE(what);
      const int d = 128, heads = 2, groups = 3, b = rc.bits;
      const std::int64_t tokens = std::int64_t(groups) * group, kvd = std::int64_t(heads) * d;
      std::mt19937 rng(++seed);
      const auto k = make_rows(rng, tokens, heads, d), v = make_rows(rng, tokens, heads, d);
      const bool hier = rc.cpu == kcpu::quant_rule::hier;
      const std::int64_t block = std::int64_t(d) * group * b / 8, row = std::int64_t(d) * b / 8;
      const int vgs = std::min(group, d), ng = d / vgs;
      // Runs per head: keys groups * block, values tokens * row; scales likewise.
      const std::int64_t k_run = groups * block, v_run = tokens * row, ks_run = std::int64_t(groups) * d,
                         vs_run = tokens * ng;
      std::vector<std::uint8_t> kc_w(std::size_t(heads * k_run), 0), kl_w(hier ? kc_w.size() : 0, 0),
          vc_w(std::size_t(heads * v_run), 0), vl_w(hier ? vc_w.size() : 0, 0);
      std::vector<std::uint16_t> ks_w(std::size_t(heads * ks_run)), kz_w(ks_w.size()), vs_w(std::size_t(heads * vs_run)),
          vz_w(vs_w.size());
      auto put = [](std::vector<std::uint8_t>& to, std::int64_t byte0, int bit, unsigned code) {
        to[std::size_t(byte0 + bit / 8)] |= std::uint8_t(code << (bit % 8));
      };
      std::vector<std::uint8_t> kb(static_cast<std::size_t>(block)), klb(static_cast<std::size_t>(block)),
          vr(static_cast<std::size_t>(tokens * row)),
          vlr(static_cast<std::size_t>(tokens * row));
      for (int h = 0; h < heads; ++h) {
        for (int g = 0; g < groups; ++g) {
          kcpu::quantize_key_group(k.data() + g * group * kvd + h * d, kvd, group, d, b, rc.cpu,
                                   {kb.data(), hier ? klb.data() : nullptr, ks_w.data() + h * ks_run + g * d,
                                    kz_w.data() + h * ks_run + g * d});
          const std::int64_t chan = std::int64_t(group) * b / 8;
          for (int t = 0; t < group; ++t)
            for (int c = 0; c < d; ++c) {
              const std::int64_t row0 = h * k_run + (std::int64_t(g) * group + t) * lo::key_row_bytes(b);
              put(kc_w, row0, lo::key_bit(c, b), packed_code(kb.data() + c * chan, t, b));
              if (hier) put(kl_w, row0, lo::key_bit(c, 4), packed_code(klb.data() + c * chan, t, 4));
            }
        }
        kcpu::quantize_value_rows(v.data() + h * d, kvd, tokens, d, vgs, b, rc.cpu,
                                  {vr.data(), hier ? vlr.data() : nullptr, vs_w.data() + h * vs_run,
                                   vz_w.data() + h * vs_run},
                                  row, ng);
        for (std::int64_t p = 0; p < tokens; ++p)
          for (int c = 0; c < d; ++c) {
            const std::int64_t blk = h * v_run + (p / 16) * lo::value_block_bytes(b);
            put(vc_w, blk, lo::value_bit(int(p % 16), c, b), packed_code(vr.data() + p * row, c, b));
            if (hier) put(vl_w, blk, lo::value_bit(int(p % 16), c, 4), packed_code(vlr.data() + p * row, c, 4));
          }
      }
      // The kernel stages a group's rows in shared memory, 16 bytes at a
      // time where the source allows it: the same bytes from rows in place,
      // from rows one element off that alignment, and from a ring whose end
      // falls inside the last group (two launches, as a decode would).
      const std::vector<std::uint16_t> k16 = to_bf16(k), v16 = to_bf16(v);
      for (const std::string source : {"contiguous", "unaligned", "ring"}) {
        SCOPED_TRACE(source);
        const bool unaligned = source == "unaligned", ring = source == "ring";
        const std::int64_t cap = tokens - group / 2;  // ring: rows 2 G .. 3 G - 1 wrap past 2.5 G
        auto ring_of = [&](const std::vector<std::uint16_t>& x, std::int64_t from, std::int64_t to) {
          std::vector<std::uint16_t> r(std::size_t(cap * kvd));
          for (std::int64_t p = from; p < to; ++p)
            std::copy_n(x.begin() + p * kvd, kvd, r.begin() + (p % cap) * kvd);
          return r;
        };
        auto shifted = [](const std::vector<std::uint16_t>& x) {
          std::vector<std::uint16_t> r(x.size() + 1, 0);
          std::copy(x.begin(), x.end(), r.begin() + 1);
          return r;
        };
        dev_array<std::uint16_t> kd(*dev_, ring ? ring_of(k16, 0, cap) : unaligned ? shifted(k16) : k16),
            vd(*dev_, ring ? ring_of(v16, 0, cap) : unaligned ? shifted(v16) : v16);
        dev_array<std::uint8_t> kc_d(*dev_, kc_w.size(), 0xAB), kl_d(*dev_, std::max<std::size_t>(16, kl_w.size()), 0xAB),
            vc_d(*dev_, vc_w.size(), 0xAB), vl_d(*dev_, std::max<std::size_t>(16, vl_w.size()), 0xAB);
        dev_array<std::uint16_t> ks_d(*dev_, ks_w.size(), 0xAB), kz_d(*dev_, kz_w.size(), 0xAB),
            vs_d(*dev_, vs_w.size(), 0xAB), vz_d(*dev_, vz_w.size(), 0xAB);
        dev_array<std::int32_t> slot(*dev_, std::vector<std::int32_t>{0}), first(*dev_, std::vector<std::int32_t>{0}),
            count(*dev_, std::vector<std::int32_t>{ring ? groups - 1 : groups});
        kc::quantize_args a;
        a.src.k = kd.get() + (unaligned ? 1 : 0);
        a.src.v = vd.get() + (unaligned ? 1 : 0);
        if (ring) a.src.ring = cap;
        a.src.head_stride = d;
        a.src.row_stride = kvd;
        a.dst.order = kc::packed_order::lane;
        a.dst.k_codes = kc_d.get();
        a.dst.v_codes = vc_d.get();
        if (hier) {
          a.dst.k_lower = kl_d.get();
          a.dst.v_lower = vl_d.get();
        }
        a.dst.k_scale = ks_d.get();
        a.dst.k_zero = kz_d.get();
        a.dst.v_scale = vs_d.get();
        a.dst.v_zero = vz_d.get();
        a.dst.k_head = k_run;
        a.dst.k_group = block;
        a.dst.ks_head = ks_run;
        a.dst.ks_group = d;
        a.dst.v_head = v_run;
        a.dst.v_token = row;
        a.dst.vs_head = vs_run;
        a.dst.vs_token = ng;
        a.rule = rc.gpu;
        a.bits = b;
        a.group = group;
        a.head_dim = d;
        a.n_kv_heads = heads;
        a.entry_slot = slot.get();
        a.entry_first_group = first.get();
        a.entry_groups = count.get();
        a.entries = 1;
        a.max_groups = groups;
        kc::quantize_groups(a, nullptr);
        // Ring: the newest rows overwrite the oldest; then the last group alone.
        dev_array<std::uint16_t> kd2(*dev_, ring_of(k16, tokens - cap, tokens)),
            vd2(*dev_, ring_of(v16, tokens - cap, tokens));
        dev_array<std::int32_t> first2(*dev_, std::vector<std::int32_t>{groups - 1}),
            count2(*dev_, std::vector<std::int32_t>{1});
        if (ring) {
          a.src.k = kd2.get();
          a.src.v = vd2.get();
          a.entry_first_group = first2.get();
          a.entry_groups = count2.get();
          a.max_groups = 1;
          kc::quantize_groups(a, nullptr);
        }
        expect_bytes_equal(kc_d.download(), kc_w, what + " " + source + " key codes");
        expect_bytes_equal(as_bytes(ks_d.download()), as_bytes(ks_w), what + " " + source + " key scales");
        expect_bytes_equal(as_bytes(kz_d.download()), as_bytes(kz_w), what + " " + source + " key zeros");
        expect_bytes_equal(vc_d.download(), vc_w, what + " " + source + " value codes");
        expect_bytes_equal(as_bytes(vs_d.download()), as_bytes(vs_w), what + " " + source + " value scales");
        expect_bytes_equal(as_bytes(vz_d.download()), as_bytes(vz_w), what + " " + source + " value zeros");
        if (hier) {
          expect_bytes_equal(kl_d.download(), kl_w, what + " " + source + " key lower plane");
          expect_bytes_equal(vl_d.download(), vl_w, what + " " + source + " value lower plane");
        }
        EXPECT_TRUE(kc_d.sentinel_intact() && vc_d.sentinel_intact()) << "write past a packed array";
      }
    }
}

// A ring of capacity 80 per (slot, head) that received positions 0..len-1
// (rows wrap, so it holds the newest 80: 21..100), quantized into
// per-(slot, head) runs: entry 0 writes groups 1..2 of slot 1, entry 1
// nothing, entry 2 group 2 of slot 0 (positions 64..95, which straddle the
// ring's end). Everything else of the runs keeps its poison.
struct entry_arrays {  // device: per entry the slot, first group and group count
  const std::int32_t *slot, *first, *count;
};

// The strides of per-(slot, head) runs of max_groups groups (what the
// decode step's packed arrays are) and of a ring [slot][head][cap][d] of
// source rows, with the rule and the entries: the arguments both ring tests
// share. Pointers are the caller's.
void set_runs_and_ring(kc::quantize_args& a, const rule_case& rc, int d, int heads, int group, int cap,
                       std::int64_t max_groups, const entry_arrays& e) {
  const std::int64_t block = std::int64_t(d) * group * rc.bits / 8, row = std::int64_t(d) * rc.bits / 8;
  const std::int64_t ng = d / std::min(group, d);
  a.src.slot_stride = std::int64_t(heads) * cap * d;
  a.src.head_stride = std::int64_t(cap) * d;
  a.src.row_stride = d;
  a.src.ring = cap;
  a.dst.k_head = max_groups * block;
  a.dst.k_slot = heads * a.dst.k_head;
  a.dst.k_group = block;
  a.dst.ks_head = max_groups * d;
  a.dst.ks_slot = heads * a.dst.ks_head;
  a.dst.ks_group = d;
  a.dst.v_head = max_groups * group * row;
  a.dst.v_slot = heads * a.dst.v_head;
  a.dst.v_token = row;
  a.dst.vs_head = max_groups * group * ng;
  a.dst.vs_slot = heads * a.dst.vs_head;
  a.dst.vs_token = ng;
  a.rule = rc.gpu;
  a.bits = rc.bits;
  a.group = group;
  a.head_dim = d;
  a.n_kv_heads = heads;
  a.entry_slot = e.slot;
  a.entry_first_group = e.first;
  a.entry_groups = e.count;
  a.entries = 3;
  a.max_groups = 2;
}

TEST_F(cuda_quantize, ring_source_into_runs_with_skipped_entries) {
  for (const auto& rc : rules) {
    SCOPED_TRACE(rc.name);
    const int d = 128, heads = 2, group = 32, slots = 2, cap = 80, len = 3 * group + 5;
    const std::int64_t max_groups = 4, block = std::int64_t(d) * group * rc.bits / 8, row = std::int64_t(d) * rc.bits / 8;
    const int ng = d / std::min(group, d);
    const bool hier = rc.cpu == kcpu::quant_rule::hier;
    std::mt19937 rng(2100);
    // Host rows [slot][pos][head][d], and the ring [slot][head][cap][d] (bf16).
    std::vector<std::vector<float>> rows_k, rows_v;
    std::vector<std::uint16_t> ring_k(static_cast<std::size_t>(slots * heads * cap * d)), ring_v(ring_k.size());
    for (int s = 0; s < slots; ++s) {
      rows_k.push_back(make_rows(rng, len, heads, d));
      rows_v.push_back(make_rows(rng, len, heads, d));
      for (int p = 0; p < len; ++p)
        for (int h = 0; h < heads; ++h)
          for (int c = 0; c < d; ++c) {
            const std::size_t at = std::size_t(((s * heads + h) * cap + p % cap) * d + c);
            ring_k[at] = f32_to_bf16(rows_k.back()[std::size_t((p * heads + h) * d + c)]);
            ring_v[at] = f32_to_bf16(rows_v.back()[std::size_t((p * heads + h) * d + c)]);
          }
    }
    const std::size_t runs = std::size_t(slots * heads);
    dev_array<std::uint16_t> rk(*dev_, ring_k), rv(*dev_, ring_v);
    dev_array<std::uint8_t> kc_d(*dev_, runs * std::size_t(max_groups * block), 0xAB),
        kl_d(*dev_, runs * std::size_t(max_groups * block), 0xAB),
        vc_d(*dev_, runs * std::size_t(max_groups * group * row), 0xAB),
        vl_d(*dev_, runs * std::size_t(max_groups * group * row), 0xAB);
    dev_array<std::uint16_t> ks_d(*dev_, runs * std::size_t(max_groups * d), 0xAB),
        kz_d(*dev_, runs * std::size_t(max_groups * d), 0xAB),
        vs_d(*dev_, runs * std::size_t(max_groups * group * ng), 0xAB),
        vz_d(*dev_, runs * std::size_t(max_groups * group * ng), 0xAB);
    dev_array<std::int32_t> slot(*dev_, std::vector<std::int32_t>{1, 0, 0}),
        first(*dev_, std::vector<std::int32_t>{1, 2, 2}), count(*dev_, std::vector<std::int32_t>{2, 0, 1});
    kc::quantize_args a;
    set_runs_and_ring(a, rc, d, heads, group, cap, max_groups, {slot.get(), first.get(), count.get()});
    a.src.k = rk.get();
    a.src.v = rv.get();
    a.dst.k_codes = kc_d.get();
    a.dst.v_codes = vc_d.get();
    if (hier) {
      a.dst.k_lower = kl_d.get();
      a.dst.v_lower = vl_d.get();
    }
    a.dst.k_scale = ks_d.get();
    a.dst.k_zero = kz_d.get();
    a.dst.v_scale = vs_d.get();
    a.dst.v_zero = vz_d.get();
    kc::quantize_groups(a, nullptr);
    const auto kc_h = kc_d.download(), kl_h = kl_d.download(), vc_h = vc_d.download(), vl_h = vl_d.download();
    const auto ks_h = ks_d.download(), kz_h = kz_d.download(), vs_h = vs_d.download(), vz_h = vz_d.download();
    const std::pair<int, int> written[] = {{1, 1}, {1, 2}, {0, 2}};  // (slot, group)
    for (int s = 0; s < slots; ++s)
      for (int h = 0; h < heads; ++h)
        for (int q = 0; q < max_groups; ++q) {
          bool is_written = false;
          for (const auto& w : written) is_written |= w.first == s && w.second == q;
          const std::size_t run = std::size_t(s * heads + h);
          const std::size_t kb = run * std::size_t(max_groups * block) + std::size_t(q * block);
          const std::size_t ksb = run * std::size_t(max_groups * d) + std::size_t(q * d);
          const std::size_t vb = run * std::size_t(max_groups * group * row) + std::size_t(q * group * row);
          const std::size_t vsb = run * std::size_t(max_groups * group * ng) + std::size_t(q * group * ng);
          const std::string where = "slot " + std::to_string(s) + " head " + std::to_string(h) + " group " +
                                    std::to_string(q);
          if (!is_written) {
            for (std::int64_t i = 0; i < block; ++i)
              ASSERT_EQ(kc_h[kb + std::size_t(i)], 0xAB) << where << ": written though skipped";
            for (int i = 0; i < d; ++i) ASSERT_EQ(ks_h[ksb + std::size_t(i)], 0xABAB) << where;
            continue;
          }
          std::vector<std::uint8_t> kcw(static_cast<std::size_t>(block)), klw(hier ? kcw.size() : 0),
              vcw(static_cast<std::size_t>(group * row)), vlw(hier ? vcw.size() : 0);
          std::vector<std::uint16_t> ksw(static_cast<std::size_t>(d)), kzw(ksw.size()),
              vsw(static_cast<std::size_t>(group * ng)), vzw(vsw.size());
          const float* kx = rows_k[std::size_t(s)].data() + std::size_t((q * group * heads + h) * d);
          const float* vx = rows_v[std::size_t(s)].data() + std::size_t((q * group * heads + h) * d);
          kcpu::quantize_key_group(kx, std::int64_t(heads) * d, group, d, rc.bits, rc.cpu,
                                   {kcw.data(), hier ? klw.data() : nullptr, ksw.data(), kzw.data()});
          kcpu::quantize_value_rows(vx, std::int64_t(heads) * d, group, d, std::min(group, d), rc.bits, rc.cpu,
                                    {vcw.data(), hier ? vlw.data() : nullptr, vsw.data(), vzw.data()}, row, ng);
          expect_bytes_equal(std::vector<std::uint8_t>(kc_h.begin() + std::ptrdiff_t(kb),
                                                       kc_h.begin() + std::ptrdiff_t(kb) + block),
                             kcw, where + " key codes");
          expect_bytes_equal(std::vector<std::uint8_t>(vc_h.begin() + std::ptrdiff_t(vb),
                                                       vc_h.begin() + std::ptrdiff_t(vb) + group * row),
                             vcw, where + " value codes");
          expect_bytes_equal(as_bytes(std::vector<std::uint16_t>(ks_h.begin() + std::ptrdiff_t(ksb),
                                                                 ks_h.begin() + std::ptrdiff_t(ksb) + d)),
                             as_bytes(ksw), where + " key scales");
          expect_bytes_equal(as_bytes(std::vector<std::uint16_t>(kz_h.begin() + std::ptrdiff_t(ksb),
                                                                 kz_h.begin() + std::ptrdiff_t(ksb) + d)),
                             as_bytes(kzw), where + " key zeros");
          expect_bytes_equal(as_bytes(std::vector<std::uint16_t>(vs_h.begin() + std::ptrdiff_t(vsb),
                                                                 vs_h.begin() + std::ptrdiff_t(vsb) + group * ng)),
                             as_bytes(vsw), where + " value scales");
          expect_bytes_equal(as_bytes(std::vector<std::uint16_t>(vz_h.begin() + std::ptrdiff_t(vsb),
                                                                 vz_h.begin() + std::ptrdiff_t(vsb) + group * ng)),
                             as_bytes(vzw), where + " value zeros");
          if (hier) {
            expect_bytes_equal(std::vector<std::uint8_t>(kl_h.begin() + std::ptrdiff_t(kb),
                                                         kl_h.begin() + std::ptrdiff_t(kb) + block),
                               klw, where + " key lower plane");
            expect_bytes_equal(std::vector<std::uint8_t>(vl_h.begin() + std::ptrdiff_t(vb),
                                                         vl_h.begin() + std::ptrdiff_t(vb) + group * row),
                               vlw, where + " value lower plane");
          }
        }
  }
}

TEST_F(cuda_quantize, row_copies_through_a_ring_and_back) {
  const int d = 64, heads = 2, slots = 2, cap = 10, len = 23;
  std::mt19937 rng(2200);
  const auto rows = to_bf16(random_values(rng, std::size_t(slots * heads * len * d)));  // [slot][head][pos][d]
  dev_array<std::uint16_t> lin_k(*dev_, rows), lin_v(*dev_, rows), ring_k(*dev_, std::size_t(slots * heads * cap * d)),
      ring_v(*dev_, std::size_t(slots * heads * cap * d)), back_k(*dev_, rows.size()), back_v(*dev_, rows.size());
  // Positions 13..22 of both slots into the ring (wrapping at 20), then back.
  dev_array<std::int32_t> slot(*dev_, std::vector<std::int32_t>{0, 1}), first(*dev_, std::vector<std::int32_t>{13, 13}),
      count(*dev_, std::vector<std::int32_t>{10, 10});
  kc::row_copy_args a;
  a.from.k = lin_k.get();
  a.from.v = lin_v.get();
  a.from.slot_stride = std::int64_t(heads) * len * d;
  a.from.head_stride = std::int64_t(len) * d;
  a.from.row_stride = d;
  a.to_k = ring_k.get();
  a.to_v = ring_v.get();
  a.to_slot_stride = std::int64_t(heads) * cap * d;
  a.to_head_stride = std::int64_t(cap) * d;
  a.to_row_stride = d;
  a.to_ring = cap;
  a.entry_slot = slot.get();
  a.entry_first = first.get();
  a.entry_count = count.get();
  a.entries = 2;
  a.n_kv_heads = heads;
  a.head_dim = d;
  a.max_rows = 10;
  kc::copy_rows(a, nullptr);
  kc::row_copy_args b = a;
  b.from.k = ring_k.get();
  b.from.v = ring_v.get();
  b.from.slot_stride = a.to_slot_stride;
  b.from.head_stride = a.to_head_stride;
  b.from.ring = cap;
  b.to_k = back_k.get();
  b.to_v = back_v.get();
  b.to_slot_stride = a.from.slot_stride;
  b.to_head_stride = a.from.head_stride;
  b.to_ring = 0x7fffffff;
  kc::copy_rows(b, nullptr);
  const auto got = back_k.download(), gotv = back_v.download();
  for (int s = 0; s < slots; ++s)
    for (int h = 0; h < heads; ++h)
      for (int p = 0; p < len; ++p)
        for (int c = 0; c < d; ++c) {
          const std::size_t at = std::size_t(((s * heads + h) * len + p) * d + c);
          if (p >= 13) {
            ASSERT_EQ(got[at], rows[at]) << "slot " << s << " head " << h << " position " << p;
            ASSERT_EQ(gotv[at], rows[at]);
          } else {
            ASSERT_EQ(got[at], 0xffffu) << "position " << p << " was not copied";
          }
        }
}

// The lane-order read of dequantize_rows: the fixture rearranged by
// device_layout_host into per-head runs, read back as bf16 rows.
void dequantize_lane_order(allocator& dev, int bits, kcpu::quant_rule rule, bool lower) {
  SCOPED_TRACE("lane order");
  packed_fixture f;
  f.heads = 4;
  f.kv_heads = 2;
  f.d = 128;
  f.group = 32;
  f.groups = 3;
  f.window = 0;
  f.bits = bits;
  f.rule = rule;
  f.read_lower = lower;
  f.build(2400);
  std::vector<float> dk, dv;
  f.dequantized(dk, dv);
  const auto L = device_layout_host::build({f}, 1, 0, kc::packed_order::lane);
  dev_array<std::uint8_t> kc_d(dev, L.kc), vc_d(dev, L.vc), kl_d(dev, L.lower ? L.kl : std::vector<std::uint8_t>(16)),
      vl_d(dev, L.lower ? L.vl : std::vector<std::uint8_t>(16));
  dev_array<std::uint16_t> ks_d(dev, L.ks), kz_d(dev, L.kz), vs_d(dev, L.vs), vz_d(dev, L.vz);
  const std::size_t n = std::size_t(f.quantized() * f.kv_heads * f.d);
  dev_array<std::uint16_t> ok(dev, n), ov(dev, n);
  kc::dequantize_args a;
  a.src.order = kc::packed_order::lane;
  a.src.k_codes = kc_d.get();
  a.src.v_codes = vc_d.get();
  a.src.k_lower = kl_d.get();
  a.src.v_lower = vl_d.get();
  a.src.k_scale = ks_d.get();
  a.src.k_zero = kz_d.get();
  a.src.v_scale = vs_d.get();
  a.src.v_zero = vz_d.get();
  a.src.k_head = L.k_run;
  a.src.k_group = L.block();
  a.src.ks_head = L.ks_run;
  a.src.ks_group = L.d;
  a.src.v_head = L.v_run;
  a.src.v_token = L.row();
  a.src.vs_head = L.vs_run;
  a.src.vs_token = L.vgroups();
  a.lower = lower;
  a.bits = f.bits;
  a.group = int(f.group);
  a.head_dim = int(f.d);
  a.n_kv_heads = int(f.kv_heads);
  a.groups = int(f.groups);
  a.to_k = ok.get();
  a.to_v = ov.get();
  a.to_head_stride = f.d;
  a.to_row_stride = f.kv_heads * f.d;
  kc::dequantize_rows(a, nullptr);
  const auto gk = from_bf16(ok.download()), gv = from_bf16(ov.download());
  std::vector<double> rk(dk.begin(), dk.end()), rv(dv.begin(), dv.end());
  expect_close(gk, rk, 1e-6, 1.0 / 128, "dequantized keys", 2400);
  expect_close(gv, rv, 1e-6, 1.0 / 128, "dequantized values", 2400);
}

TEST_F(cuda_quantize, dequantized_rows_match_the_reference) {
  for (const auto& rc : rules)
    for (const bool lower : {false, true}) {
      if (lower && rc.cpu != kcpu::quant_rule::hier) continue;
      SCOPED_TRACE(std::string(rc.name) + (lower ? " INT8" : ""));
      dequantize_lane_order(*dev_, rc.bits, rc.cpu, lower);
      packed_fixture f;
      f.heads = 4;
      f.kv_heads = 2;
      f.d = 128;
      f.group = 64;
      f.groups = 3;
      f.window = 0;
      f.bits = rc.bits;
      f.rule = rc.cpu;
      f.read_lower = lower;
      f.build(2300);
      std::vector<float> dk, dv;
      f.dequantized(dk, dv);
      dev_array<std::uint8_t> kc_d(*dev_, f.k_codes), vc_d(*dev_, f.v_codes),
          kl_d(*dev_, lower ? f.k_lower : std::vector<std::uint8_t>(16)),
          vl_d(*dev_, lower ? f.v_lower : std::vector<std::uint8_t>(16));
      dev_array<std::uint16_t> ks_d(*dev_, f.k_scale), kz_d(*dev_, f.k_zero), vs_d(*dev_, f.v_scale),
          vz_d(*dev_, f.v_zero);
      const std::size_t n = std::size_t(f.quantized() * f.kv_heads * f.d);
      dev_array<std::uint16_t> ok(*dev_, n), ov(*dev_, n);
      kc::dequantize_args a;
      a.src.k_codes = kc_d.get();
      a.src.v_codes = vc_d.get();
      a.src.k_lower = kl_d.get();
      a.src.v_lower = vl_d.get();
      a.src.k_scale = ks_d.get();
      a.src.k_zero = kz_d.get();
      a.src.v_scale = vs_d.get();
      a.src.v_zero = vz_d.get();
      const std::int64_t block = f.d * f.group * f.bits / 8, row = f.d * f.bits / 8, ng = f.d / f.value_group();
      a.src.k_head = block;
      a.src.k_group = f.kv_heads * block;
      a.src.ks_head = f.d;
      a.src.ks_group = f.kv_heads * f.d;
      a.src.v_head = row;
      a.src.v_token = f.kv_heads * row;
      a.src.vs_head = ng;
      a.src.vs_token = f.kv_heads * ng;
      a.lower = lower;
      a.bits = f.bits;
      a.group = int(f.group);
      a.head_dim = int(f.d);
      a.n_kv_heads = int(f.kv_heads);
      a.groups = int(f.groups);
      a.to_k = ok.get();
      a.to_v = ov.get();
      a.to_head_stride = f.d;                // rows [pos][head][d], like the CPU's
      a.to_row_stride = f.kv_heads * f.d;
      kc::dequantize_rows(a, nullptr);
      const auto gk = from_bf16(ok.download()), gv = from_bf16(ov.download());
      std::vector<double> rk(dk.begin(), dk.end()), rv(dv.begin(), dv.end());
      // One bf16 rounding of an f32 value (the GPU may fuse the multiply-add).
      expect_close(gk, rk, 1e-6, 1.0 / 128, "dequantized keys", 2300);
      expect_close(gv, rv, 1e-6, 1.0 / 128, "dequantized values", 2300);
      EXPECT_TRUE(ok.sentinel_intact() && ov.sentinel_intact());
    }
}
#endif

TEST_F(cuda_quantize, several_layers_in_one_launch_equal_one_launch_per_layer) {
  // The decode step quantizes every layer's due groups in one launch
  // (quantize_args::layers). Three layers of distinct ring rows, each rule,
  // both byte orders: one launch over the layers writes exactly the bytes of
  // three launches of one layer each (checked bit for bit against the CPU in
  // the tests above), including the entries that write nothing.
  for (const auto order : {kc::packed_order::cpu, kc::packed_order::lane})
    for (const auto& rc : rules) {
      SCOPED_TRACE(std::string(rc.name) + (order == kc::packed_order::lane ? " lane" : " cpu"));
      const int d = 128, heads = 2, group = 32, slots = 2, cap = 80, layers = 3;
      const std::int64_t max_groups = 3, block = std::int64_t(d) * group * rc.bits / 8,
                         row = std::int64_t(d) * rc.bits / 8, ng = d / std::min(group, d);
      const bool hier = rc.cpu == kcpu::quant_rule::hier;
      std::mt19937 rng(2300);
      const std::int64_t ring_elems = std::int64_t(slots) * heads * cap * d;  // one layer's K (or V)
      std::vector<std::uint16_t> ring(std::size_t(2 * layers * ring_elems));
      for (auto& x : ring) x = f32_to_bf16(round_bf16(random_values(rng, 1, 20.f))[0]);
      const std::int64_t runs = std::int64_t(slots) * heads;
      // One layer's packed arrays, each 16-byte aligned, in one block of bytes.
      const auto up16 = [](std::int64_t b) { return (b + 15) / 16 * 16; };
      const std::int64_t kcb = up16(runs * max_groups * block), vcb = up16(runs * max_groups * group * row),
                         ksb = up16(runs * max_groups * d * 2), vsb = up16(runs * max_groups * group * ng * 2);
      const std::int64_t layer_bytes = 2 * kcb + 2 * vcb + 2 * ksb + 2 * vsb;
      dev_array<std::uint16_t> dring(*dev_, ring);
      dev_array<std::uint8_t> one(*dev_, std::size_t(layers * layer_bytes), 0xAB),
          each(*dev_, std::size_t(layers * layer_bytes), 0xAB);
      dev_array<std::int32_t> slot(*dev_, std::vector<std::int32_t>{1, 0, 0}),
          first(*dev_, std::vector<std::int32_t>{0, 1, 2}), count(*dev_, std::vector<std::int32_t>{2, 0, 1});
      const auto args = [&](std::uint8_t* base, int layer) {
        kc::quantize_args a;
        set_runs_and_ring(a, rc, d, heads, group, cap, max_groups, {slot.get(), first.get(), count.get()});
        a.src.k = dring.get() + 2 * layer * ring_elems;
        a.src.v = a.src.k + ring_elems;
        std::uint8_t* b = base + layer * layer_bytes;
        a.dst.order = order;
        a.dst.k_codes = b;
        a.dst.v_codes = b + kcb;
        if (hier) {
          a.dst.k_lower = b + kcb + vcb;
          a.dst.v_lower = b + 2 * kcb + vcb;
        }
        std::uint8_t* sc = b + 2 * kcb + 2 * vcb;
        a.dst.k_scale = reinterpret_cast<std::uint16_t*>(sc);
        a.dst.k_zero = reinterpret_cast<std::uint16_t*>(sc + ksb);
        a.dst.v_scale = reinterpret_cast<std::uint16_t*>(sc + 2 * ksb);
        a.dst.v_zero = reinterpret_cast<std::uint16_t*>(sc + 2 * ksb + vsb);
        return a;
      };
      auto all = args(one.get(), 0);
      all.layers = layers;
      all.src_layer = 2 * ring_elems;
      all.dst_layer = layer_bytes;
      all.dependent = true;
      kc::quantize_groups(all, nullptr);
      for (int l = 0; l < layers; ++l) kc::quantize_groups(args(each.get(), l), nullptr);
      const auto got = one.download(), want = each.download();
      expect_bytes_equal(got, want, "layers in one launch against one launch each");
      // Something was written in every layer, and the layers differ.
      for (int l = 0; l < layers; ++l) {
        const auto at = got.begin() + std::ptrdiff_t(l * layer_bytes);
        EXPECT_TRUE(std::any_of(at, at + kcb, [](std::uint8_t b) { return b != 0xAB; })) << "layer " << l;
      }
      EXPECT_FALSE(std::equal(got.begin(), got.begin() + kcb, got.begin() + std::ptrdiff_t(layer_bytes)));
      EXPECT_TRUE(one.sentinel_intact() && each.sentinel_intact());
    }
}

TEST_F(cuda_quantize, rejects_bad_arguments) {
#ifdef SPECPIPE_HAVE_CUDA
  kc::quantize_args a;
  a.entries = 1;
  a.n_kv_heads = 1;
  a.group = 48;
  EXPECT_THROW(kc::quantize_groups(a, nullptr), std::invalid_argument);
  a.group = 64;
  a.bits = 2;
  a.rule = kc::quant_rule_gpu::specache;
  EXPECT_THROW(kc::quantize_groups(a, nullptr), std::invalid_argument);
  // Several layers need their strides, and the grid's z bound holds (each
  // refused for that reason, before the missing pointers are looked at).
  const auto refused_for_layers = [&] {
    try {
      kc::quantize_groups(a, nullptr);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find("layer") != std::string::npos;
    }
    return false;
  };
  a.rule = kc::quant_rule_gpu::rtn;
  a.layers = 0;
  EXPECT_TRUE(refused_for_layers());
  a.layers = 2;
  EXPECT_TRUE(refused_for_layers());
  a.src_layer = 64;
  a.dst_layer = 63;
  EXPECT_TRUE(refused_for_layers());
  a.dst_layer = 64;
  a.entries = 40000;
  EXPECT_TRUE(refused_for_layers());
  a.entries = 1;
  EXPECT_FALSE(refused_for_layers());  // strides fine: refused for the pointers instead
  EXPECT_THROW(kc::quantize_groups(a, nullptr), std::invalid_argument);
#endif
}

}  // namespace
}  // namespace specpipe::test
