#pragma once
// The cases of the packed decode attention's GPU tests
// (cuda_packed_attention_test.cpp: the cpu order, v3, and what both orders
// share; cuda_packed_attention_lane_test.cpp: the lane order, v4): fixtures
// built on the CPU, rearranged into the device's layout, and one run_case
// that checks the kernel against the CPU's attention on the same packed
// bytes under each split count, pipeline depth and kernel variant.
//
// The tensor-core packed decode attention (kernels/cuda/packed_attention.hpp)
// against the CPU's quantized and mixed attention on the same packed bytes,
// rearranged into the device's per-(slot, head) runs and window ring
// (packed_device_layout.hpp, itself checked on the host): every format and
// read (KIVI 1/2/4-bit, SpeCache 1-bit, hier INT4 and INT8), GQA 1, 2, 4 and
// 8, head_dim 64 and 128, G 32, 64 and 128, odd and wrapping windows,
// several slots of different lengths, causal entries that stop inside the
// window or inside the packed part, split counts and pipeline depths, and
// each kernel variant (lean shared memory, staged combine, both, neither).
// Outputs start as NaN and carry a poisoned sentinel tail.
//
// Tolerance: the kernel rounds w = q s (scores) and P' = p s (values) to f16
// (relative 2^-11 each), so scores move by about 2^-12 ||(q_c s_c U_c)_c||
// and probabilities by ~1e-3 relative with this fixture's outlier channel:
// atol = rtol = 5e-3 on outputs of magnitude ~1 (v1 and the CPU are f32
// throughout). Replaced rows are exact f32 products: their checks are tight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/cuda_test_util.hpp"
#include "kernels/mixed_attention.hpp"
#include "kernels/packed_device_layout.hpp"
#include "kernels/quant_format_cases.hpp"
#include "kernels/quantized_attention.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/packed_attention.hpp"
#endif

namespace specpipe::test {

// The fixture of both files (one type: gtest keeps one suite per fixture).
class cuda_packed_attention : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace packed_case {

namespace kcpu = kernels::cpu;
namespace kc = kernels::cuda;

constexpr double tol = 5e-3;

struct slot_shape {
  std::int64_t groups, window;
};

// One query row: attends positions 0 .. len-1 of `slot`.
struct entry {
  int slot;
  std::int64_t len;
};

// Device copies of a device_layout_host.
struct device_layout {
  dev_array<std::uint8_t> kc, kl, vc, vl;
  dev_array<std::uint16_t> ks, kz, vs, vz, wk, wv;
  device_layout(allocator& dev, const device_layout_host& L)
      : kc(dev, L.kc),
        kl(dev, L.lower ? L.kl : std::vector<std::uint8_t>(16)),
        vc(dev, L.vc),
        vl(dev, L.lower ? L.vl : std::vector<std::uint8_t>(16)),
        ks(dev, L.ks),
        kz(dev, L.kz),
        vs(dev, L.vs),
        vz(dev, L.vz),
        wk(dev, L.wk),
        wv(dev, L.wv) {}
  kc::packed_cache_view view(const device_layout_host& L, bool read_lower) const {
    kc::packed_cache_view v;
    v.order = L.order;
    v.bits = L.bits;
    v.group = L.group;
    v.head_dim = L.d;
    v.n_kv_heads = L.kv_heads;
    v.k_codes = kc.get();
    v.v_codes = vc.get();
    if (read_lower) {
      v.k_lower = kl.get();
      v.v_lower = vl.get();
    }
    v.k_scale = ks.get();
    v.k_zero = kz.get();
    v.v_scale = vs.get();
    v.v_zero = vz.get();
    v.k_run = L.k_run;
    v.ks_run = L.ks_run;
    v.v_run = L.v_run;
    v.vs_run = L.vs_run;
    v.win_k = wk.get();
    v.win_v = wv.get();
    v.win_cap = L.win_cap;
    return v;
  }
};

std::vector<packed_fixture> make_slots(const format_case& fc, int d, int kv_heads, int gq, int group,
                                       const std::vector<slot_shape>& shapes, unsigned seed);

// Optional SpeCache rows: per (entry, KV head) sorted positions and their rows.
struct replaced {
  int stride = 0;
  bool f16 = false;
  std::vector<std::int32_t> pos, count;  // device order
  std::vector<std::uint16_t> k, v;
  // CPU views per entry
  std::vector<std::vector<std::int64_t>> pos64, count64;
};

replaced make_replaced(const std::vector<entry>& es, int kv_heads, int d, int stride, bool f16, bool all,
                       std::mt19937& rng, const std::vector<packed_fixture>* exact = nullptr);

// The kernel variants of packed_attention_args (v2's configuration and the
// v3 switches); every case runs under each.
struct variant {
  bool lean_smem;
  int combine;
};
const variant all_variants[] = {{false, 0}, {true, 1}, {true, 0}, {false, 1}};

struct run_options {
  std::vector<int> splits{1, 3};
  std::vector<int> stages{3};
  std::vector<int> v4_blocks{0};  // packed_attention_args::v4_blocks (lane order only)
  std::vector<variant> variants{std::begin(all_variants), std::end(all_variants)};
  const replaced* rows = nullptr;  // per entry, as the CPU reference reads them
  // The device's rows instead, one set per index, entry e reading set
  // entry_index[e] (replaced_rows::entry_index); null: `rows` as they are.
  const replaced* device_rows = nullptr;
  std::vector<std::int32_t> entry_index;
  bool probs = false;       // compare probabilities of every entry
  bool exact_full = false;  // rows replace everything: compare to full attention, tight
  // Multi-query blocks (first entry, count); empty: one entry per block.
  std::vector<std::pair<int, int>> blocks;
  int max_queries = 1;
  double cpu_tol = tol;  // against the CPU reference
  // lane: the codes in packed_lane_order.hpp's order, read by v4 (head_dim 128).
  kc::packed_order order = kc::packed_order::cpu;
};

void run_case(allocator& dev, const format_case& fc, int d, int kv_heads, int gq, int group,
              const std::vector<slot_shape>& shapes, const std::vector<entry>& es, int win_cap, unsigned seed,
              const run_options& ro);


// Both orders of the codes: cpu (v3) and lane (v4).
const kc::packed_order both_orders[] = {kc::packed_order::cpu, kc::packed_order::lane};

// Every format and GQA group, the rows of three slots in multi-query blocks
// of up to packed_attention_max_queries rows, under `base`'s order and
// switches.
void run_multi_query(allocator& dev, const run_options& base, unsigned seed);

// The entries' rows taken from another set: `sets` holds one set per index,
// the result one per entry (entry e a copy of set index[e]), for the CPU.
replaced expand_sets(const replaced& sets, const std::vector<std::int32_t>& index, int kv_heads, int d);

// Entries reading sets of replaced rows through an index: one random set per
// shape of `set_shapes` (40 rows per KV head), entry e reading set index[e];
// `ro` brings the rest of the case (splits, blocks, probabilities).
void run_shared_rows(allocator& dev, const format_case& fc, const std::vector<entry>& set_shapes,
                     const std::vector<entry>& es, const std::vector<std::int32_t>& index,
                     const std::vector<slot_shape>& shapes, unsigned seed, run_options ro);

}  // namespace packed_case
#endif

}  // namespace specpipe::test
