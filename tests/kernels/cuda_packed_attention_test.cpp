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
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/cuda_test_util.hpp"
#include "kernels/mixed_attention.hpp"
#include "kernels/packed_device_layout.hpp"
#include "kernels/quantized_attention.hpp"

#ifdef SPECPIPE_HAVE_CUDA
#include "kernels/cuda/packed_attention.hpp"
#endif

namespace specpipe::test {
namespace {

class cuda_packed_attention : public cuda_test {};

#ifdef SPECPIPE_HAVE_CUDA
namespace kcpu = kernels::cpu;
namespace kc = kernels::cuda;

constexpr double tol = 5e-3;

struct format_case {
  const char* name;
  kcpu::quant_rule rule;
  int bits;
  bool read_lower;
};

const format_case formats[] = {
    {"kivi1", kcpu::quant_rule::rtn, 1, false},      {"kivi2", kcpu::quant_rule::rtn, 2, false},
    {"kivi4", kcpu::quant_rule::rtn, 4, false},      {"specache1", kcpu::quant_rule::specache, 1, false},
    {"hier_int4", kcpu::quant_rule::hier, 4, false}, {"hier_int8", kcpu::quant_rule::hier, 4, true},
};

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
                                       const std::vector<slot_shape>& shapes, unsigned seed) {
  std::vector<packed_fixture> fs(shapes.size());
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    auto& f = fs[s];
    f.heads = kv_heads * gq;
    f.kv_heads = kv_heads;
    f.d = d;
    f.group = group;
    f.groups = shapes[s].groups;
    f.window = shapes[s].window;
    f.bits = fc.bits;
    f.rule = fc.rule;
    f.read_lower = fc.read_lower;
    f.build(seed * 7919u + unsigned(s));
    // The device window is bf16: both sides read the rounded rows.
    for (std::size_t i = std::size_t(f.quantized() * kv_heads * d); i < f.k.size(); ++i) {
      f.k[i] = bf16_to_f32(f32_to_bf16(f.k[i]));
      f.v[i] = bf16_to_f32(f32_to_bf16(f.v[i]));
    }
  }
  return fs;
}

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
                       std::mt19937& rng, const std::vector<packed_fixture>* exact = nullptr) {
  replaced r;
  r.stride = stride;
  r.f16 = f16;
  const dtype t = f16 ? dtype::f16 : dtype::bf16;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  r.pos.assign(es.size() * std::size_t(kv_heads * stride), 0);
  r.count.assign(es.size() * std::size_t(kv_heads), 0);
  r.k.assign(es.size() * std::size_t(kv_heads * stride * d), 0);
  r.v = r.k;
  for (std::size_t e = 0; e < es.size(); ++e) {
    std::vector<std::int64_t> p64(std::size_t(kv_heads * stride), 0), c64(std::size_t(kv_heads), 0);
    for (int h = 0; h < kv_heads; ++h) {
      std::vector<std::int64_t> chosen;
      for (std::int64_t p = 0; p < es[e].len && std::int64_t(chosen.size()) < stride; ++p)
        if (all || rng() % 5 == 0) chosen.push_back(p);
      c64[std::size_t(h)] = std::int64_t(chosen.size());
      r.count[e * std::size_t(kv_heads) + std::size_t(h)] = std::int32_t(chosen.size());
      for (std::size_t i = 0; i < chosen.size(); ++i) {
        const std::size_t slot = (e * std::size_t(kv_heads) + std::size_t(h)) * std::size_t(stride) + i;
        r.pos[slot] = std::int32_t(chosen[i]);
        p64[std::size_t(h * stride) + i] = chosen[i];
        for (int c = 0; c < d; ++c) {
          float kx = u(rng), vx = u(rng);
          if (exact) {  // the fixture's own (bf16-rounded) rows: replacing everything gives full attention
            const auto& f = (*exact)[std::size_t(es[e].slot)];
            const std::size_t at = std::size_t((chosen[i] * kv_heads + h) * d + c);
            kx = f.k[at];
            vx = f.v[at];
          }
          const std::size_t at = slot * std::size_t(d) + std::size_t(c);
          r.k[at] = f16 ? f32_to_f16(kx) : f32_to_bf16(kx);
          r.v[at] = f16 ? f32_to_f16(vx) : f32_to_bf16(vx);
        }
      }
    }
    r.pos64.push_back(p64);
    r.count64.push_back(c64);
  }
  (void)t;
  return r;
}

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
              const run_options& ro) {
  const std::string what = std::string(fc.name) + " d=" + std::to_string(d) + " gqa=" + std::to_string(gq) +
                           " G=" + std::to_string(group) + " kv=" + std::to_string(kv_heads) + " cap=" +
                           std::to_string(win_cap) + (ro.rows ? " mixed" : "") +
                           (ro.order == kc::packed_order::lane ? " lane-order (v4)" : "");
  SCOPED_TRACE(what);
  const int heads = kv_heads * gq;
  const auto fs = make_slots(fc, d, kv_heads, gq, group, shapes, seed);
  const auto L = device_layout_host::build(fs, win_cap, 0, ro.order);
  device_layout dl(dev, L);
  std::mt19937 rng(seed);
  const int n = int(es.size());
  const std::vector<float> q = round_bf16(random_values(rng, std::size_t(n) * heads * d, 3.f));
  std::int64_t max_len = 1;
  for (const auto& e : es) max_len = std::max(max_len, e.len);

  // CPU reference per entry.
  std::vector<double> ref;
  std::vector<float> ref_probs(std::size_t(n) * heads * std::size_t(max_len), 0.f);
  for (int i = 0; i < n; ++i) {
    const auto& f = fs[std::size_t(es[std::size_t(i)].slot)];
    std::vector<float> out(std::size_t(heads) * d);
    const float* qi = q.data() + std::size_t(i) * heads * d;
    if (ro.exact_full) {
      std::vector<float> k(f.k.begin(), f.k.begin() + es[std::size_t(i)].len * kv_heads * d),
          v(f.v.begin(), f.v.begin() + es[std::size_t(i)].len * kv_heads * d);
      for (auto& x : k) x = bf16_to_f32(f32_to_bf16(x));
      for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
      kcpu::attention_args a;
      a.q = qi;
      a.k = k.data();
      a.v = v.data();
      a.len = es[std::size_t(i)].len;
      a.out = out.data();
      a.n = 1;
      a.pos0 = es[std::size_t(i)].len - 1;
      a.n_heads = heads;
      a.n_kv_heads = kv_heads;
      a.head_dim = d;
      kcpu::attention(a);
    } else {
      auto a = f.args(qi, 1, es[std::size_t(i)].len - 1, out.data());
      if (ro.probs) {
        a.probs = ref_probs.data() + std::size_t(i) * heads * std::size_t(max_len);
        a.probs_stride = max_len;
      }
      if (ro.rows) {
        kcpu::mixed_rows mr;
        mr.positions = ro.rows->pos64[std::size_t(i)].data();
        mr.count = ro.rows->count64[std::size_t(i)].data();
        mr.stride = ro.rows->stride;
        const std::size_t per = std::size_t(kv_heads * ro.rows->stride * d);
        mr.k = ro.rows->k.data() + std::size_t(i) * per;
        mr.v = ro.rows->v.data() + std::size_t(i) * per;
        mr.type = ro.rows->f16 ? dtype::f16 : dtype::bf16;
        kcpu::mixed_attention(a, mr);
      } else {
        kcpu::quantized_attention(a);
      }
    }
    for (float x : out) ref.push_back(double(x));
  }

  std::vector<std::int32_t> slot_h, quant_h, len_h, srow_h;
  for (int i = 0; i < n; ++i) {
    slot_h.push_back(es[std::size_t(i)].slot);
    quant_h.push_back(std::int32_t(fs[std::size_t(es[std::size_t(i)].slot)].quantized()));
    len_h.push_back(std::int32_t(es[std::size_t(i)].len));
    srow_h.push_back(i);
  }
  dev_array<std::int32_t> slot_d(dev, slot_h), quant_d(dev, quant_h), len_d(dev, len_h), srow_d(dev, srow_h);
  dev_array<std::uint16_t> qd(dev, to_bf16(q));
  std::vector<std::int32_t> bfirst_h, bcount_h;
  for (const auto& [first, count] : ro.blocks) {
    bfirst_h.push_back(first);
    bcount_h.push_back(count);
  }
  std::optional<dev_array<std::int32_t>> bfirst_d, bcount_d;
  if (!ro.blocks.empty()) {
    bfirst_d.emplace(dev, bfirst_h);
    bcount_d.emplace(dev, bcount_h);
  }
  std::optional<dev_array<std::int32_t>> rp, rcnt, ridx;
  std::optional<dev_array<std::uint16_t>> rk, rv;
  if (ro.rows) {
    const replaced& dr = ro.device_rows ? *ro.device_rows : *ro.rows;
    rp.emplace(dev, dr.pos);
    rcnt.emplace(dev, dr.count);
    rk.emplace(dev, dr.k);
    rv.emplace(dev, dr.v);
    if (ro.device_rows) ridx.emplace(dev, ro.entry_index);
  }
  const int max_splits = 16;
  dev_array<float> part(dev, kc::packed_attention_scratch_floats(n, heads, d, max_splits));
  for (const variant& va : ro.variants)
  for (const int stages : ro.stages)
    for (const int splits : ro.splits) {
      SCOPED_TRACE("splits=" + std::to_string(splits) + " stages=" + std::to_string(stages) +
                   " lean_smem=" + std::to_string(va.lean_smem) + " combine=" + std::to_string(va.combine));
      dev_array<float> out(dev, std::size_t(n) * heads * d);  // 0xff bytes: NaN until written
      dev_array<float> scores(dev, std::size_t(n) * heads * std::size_t(max_len));
      dev_array<float> ml(dev, std::size_t(n) * heads * 2);
      kc::packed_attention_args a;
      a.cache = dl.view(L, fc.read_lower);
      a.q = qd.get();
      a.entry_slot = slot_d.get();
      a.entry_quant = quant_d.get();
      a.entry_len = len_d.get();
      if (ro.rows) {
        a.rows.positions = rp->get();
        a.rows.count = rcnt->get();
        a.rows.stride = ro.rows->stride;
        a.rows.k = rk->get();
        a.rows.v = rv->get();
        a.rows.f16 = ro.rows->f16;
        if (ridx) a.rows.entry_index = ridx->get();
      }
      if (ro.probs) {
        a.scores = scores.get();
        a.entry_scores_row = srow_d.get();
        a.scores_stride = max_len;
        a.ml = ml.get();
      }
      if (!ro.blocks.empty()) {
        a.block_first = bfirst_d->get();
        a.block_count = bcount_d->get();
        a.blocks = int(ro.blocks.size());
        a.max_queries = ro.max_queries;
      }
      a.out_f32 = out.get();
      a.partial = part.get();
      a.entries = n;
      a.n_heads = heads;
      a.splits = splits;
      a.stages = stages;
      a.lean_smem = va.lean_smem;
      a.combine = va.combine;
      a.dependent = va.combine == 1;  // programmatic dependent launches: same results
      a.scale = 1.f / std::sqrt(float(d));
      kc::packed_attention(a, nullptr);
      const double t = ro.exact_full ? 2e-4 : ro.cpu_tol;
      const auto got = out.download();
      expect_close(got, ref, t, t, what, seed);
      EXPECT_TRUE(out.sentinel_intact()) << "write past the output";
      // The probabilities first: the single-block rerun below rewrites the scores.
      if (ro.probs) {
        kc::packed_attention_probs(scores.get(), scores.get(), max_len, ml.get(), srow_d.get(), len_d.get(), n, heads,
                                   nullptr);
        const auto got = scores.download();
        std::vector<float> got_valid;
        std::vector<double> want;
        for (int i = 0; i < n; ++i)
          for (int h = 0; h < heads; ++h)
            for (std::int64_t p = 0; p < es[std::size_t(i)].len; ++p) {
              const std::size_t at = (std::size_t(i) * heads + std::size_t(h)) * std::size_t(max_len) + std::size_t(p);
              got_valid.push_back(got[at]);
              want.push_back(double(ref_probs[at]));
            }
        expect_close(got_valid, want, 1e-5, 1e-2, what + " probabilities", seed);
        EXPECT_TRUE(scores.sentinel_intact()) << "score write past the buffer";
      }
      if (!ro.blocks.empty()) {
        // The same rows one per block: the same arithmetic per query column
        // (only the zero terms' butterfly and the split count may differ).
        kc::packed_attention_args one = a;
        one.block_first = one.block_count = nullptr;
        one.blocks = 0;
        one.max_queries = 1;
        dev_array<float> single(dev, std::size_t(n) * heads * d);
        one.out_f32 = single.get();
        kc::packed_attention(one, nullptr);
        const auto s1 = single.download();
        expect_close(got, std::vector<double>(s1.begin(), s1.end()), 1e-3, 1e-3, what + " multi vs single", seed);
      }
    }
}

TEST_F(cuda_packed_attention, matches_cpu_on_the_same_packed_bytes) {
  unsigned seed = 1200;
  const int groups_of[] = {32, 64, 128};
  int gi = 0;
  for (const auto& fc : formats)
    for (const int gq : {1, 2, 4, 8})
      for (const int d : {64, 128}) {
        const int group = groups_of[gi++ % 3];
        // Two slots of different packed lengths and windows, the window ring
        // wrapping; entries: each slot's decode row, one row stopping inside
        // the window and one inside the packed part (causal rows).
        const std::vector<slot_shape> shapes = {{std::int64_t(640 / group), 37}, {std::int64_t(256 / group), 5}};
        const std::int64_t len0 = 640 + 37, len1 = 256 + 5;
        const std::vector<entry> es = {{0, len0}, {1, len1}, {0, len0 - 11}, {1, 200}, {0, 1}};
        run_options ro;
        ro.splits = {1, 4};
        ro.stages = {gq == 4 ? 2 : 3, 4};
        run_case(*dev_, fc, d, 2, gq, group, shapes, es, 41, ++seed, ro);
      }
}

TEST_F(cuda_packed_attention, window_only_packed_only_and_single_rows) {
  unsigned seed = 1300;
  for (const auto& fc : formats) {
    run_options ro;
    ro.splits = {1, 2};
    run_case(*dev_, fc, 128, 2, 4, 64, {{0, 45}}, {{0, 45}, {0, 1}}, 64, ++seed, ro);  // nothing packed yet
    run_case(*dev_, fc, 128, 2, 4, 64, {{3, 1}}, {{0, 193}}, 8, ++seed, ro);          // one window row
    run_case(*dev_, fc, 64, 1, 2, 32, {{9, 0}}, {{0, 288}, {0, 100}}, 4, ++seed, ro);  // no window
    run_case(*dev_, fc, 128, 1, 8, 128, {{2, 130}}, {{0, 386}}, 131, ++seed, ro);    // window past one tile
  }
}

TEST_F(cuda_packed_attention, many_splits_and_long_context) {
  run_options ro;
  ro.splits = {1, 7, 16};
  ro.stages = {2, 3, 4};
  run_case(*dev_, formats[0], 128, 2, 4, 64, {{60, 70}}, {{0, 60 * 64 + 70}}, 130, 1400, ro);
  run_case(*dev_, formats[5], 128, 2, 4, 128, {{24, 200}}, {{0, 24 * 128 + 200}}, 256, 1401, ro);
}

// QuantSpec's verify: the rows of one sequence at consecutive positions in
// one block (their query heads side by side), against the CPU per row. Slot
// 2's rows straddle a window tile boundary (lengths nq + 126 .. nq + 130),
// so the block's last tile holds positions only some of its rows attend.
// Every format and GQA group, the rows of three slots in multi-query blocks
// of up to packed_attention_max_queries rows, under `base`'s order and
// switches.
void run_multi_query(allocator& dev, const run_options& base, unsigned seed) {
  for (const auto& fc : formats)
    for (const int gq : {1, 2, 4, 8}) {
      const int maxq = kc::packed_attention_max_queries(gq);
      const std::vector<slot_shape> shapes = {{6, 40}, {3, 9}, {2, 130}};
      const std::int64_t lens[] = {6 * 64 + 40, 3 * 64 + 9, 2 * 64 + 130};
      const int rows_of[] = {5, 3, 5};
      std::vector<entry> es;
      run_options ro = base;
      for (int s = 0; s < 3; ++s) {
        const int first = int(es.size());
        for (int r = 0; r < rows_of[s]; ++r) es.push_back({s, lens[s] - rows_of[s] + 1 + r});
        for (int b = 0; b < rows_of[s]; b += maxq) ro.blocks.push_back({first + b, std::min(maxq, rows_of[s] - b)});
      }
      ro.max_queries = maxq;
      // Against the CPU: random q of scale 3 makes peaky softmaxes whose f16
      // rounding of w and P' moves outlier channels by up to ~1.5e-2 (seen on
      // kivi4, GQA 1); the multi-vs-single check above is the tight one.
      ro.cpu_tol = 2e-2;
      run_case(dev, fc, 128, 2, gq, 64, shapes, es, 140, ++seed, ro);
    }
}

TEST_F(cuda_packed_attention, multi_query_blocks_match_cpu_per_row) {
  run_options ro;
  ro.splits = {1, 3};
  run_multi_query(*dev_, ro, 1450);
}

// Both orders of the codes: cpu (v3) and lane (v4).
const kc::packed_order both_orders[] = {kc::packed_order::cpu, kc::packed_order::lane};

TEST_F(cuda_packed_attention, mixed_rows_match_cpu_mixed_attention) {
  unsigned seed = 1500;
  for (const auto order : both_orders)
  for (const auto& fc : formats)
    for (const bool f16 : {false, true}) {
      const std::vector<slot_shape> shapes = {{5, 23}, {2, 64}};
      const std::vector<entry> es = {{0, 5 * 64 + 23}, {1, 2 * 64 + 64}, {0, 100}};
      std::mt19937 rng(++seed);
      const auto rows = make_replaced(es, 2, 128, 48, f16, false, rng);
      run_options ro;
      ro.rows = &rows;
      ro.splits = {1, 3};
      ro.order = order;
      run_case(*dev_, fc, 128, 2, 4, 64, shapes, es, 70, seed, ro);
    }
}

// The entries' rows taken from another set: `sets` holds one set per index,
// the result one per entry (entry e a copy of set index[e]), for the CPU.
replaced expand_sets(const replaced& sets, const std::vector<std::int32_t>& index, int kv_heads, int d) {
  replaced r;
  r.stride = sets.stride;
  r.f16 = sets.f16;
  const std::size_t per_pos = std::size_t(kv_heads * sets.stride), per_row = per_pos * std::size_t(d);
  for (const std::int32_t i : index) {
    const std::size_t at = std::size_t(i);
    r.pos.insert(r.pos.end(), sets.pos.begin() + std::ptrdiff_t(at * per_pos),
                 sets.pos.begin() + std::ptrdiff_t((at + 1) * per_pos));
    r.count.insert(r.count.end(), sets.count.begin() + std::ptrdiff_t(at * std::size_t(kv_heads)),
                   sets.count.begin() + std::ptrdiff_t((at + 1) * std::size_t(kv_heads)));
    r.k.insert(r.k.end(), sets.k.begin() + std::ptrdiff_t(at * per_row),
               sets.k.begin() + std::ptrdiff_t((at + 1) * per_row));
    r.v.insert(r.v.end(), sets.v.begin() + std::ptrdiff_t(at * per_row),
               sets.v.begin() + std::ptrdiff_t((at + 1) * per_row));
    r.pos64.push_back(sets.pos64[at]);
    r.count64.push_back(sets.count64[at]);
  }
  return r;
}

// Entries reading sets of replaced rows through an index: one random set per
// shape of `set_shapes` (40 rows per KV head), entry e reading set index[e];
// `ro` brings the rest of the case (splits, blocks, probabilities).
void run_shared_rows(allocator& dev, const format_case& fc, const std::vector<entry>& set_shapes,
                     const std::vector<entry>& es, const std::vector<std::int32_t>& index,
                     const std::vector<slot_shape>& shapes, unsigned seed, run_options ro) {
  std::mt19937 rng(seed);
  const auto sets = make_replaced(set_shapes, 2, 128, 40, false, false, rng);
  const auto rows = expand_sets(sets, index, 2, 128);
  ro.rows = &rows;
  ro.device_rows = &sets;
  ro.entry_index = index;
  ro.splits = {1, 3};
  run_case(dev, fc, 128, 2, 4, 64, shapes, es, 70, seed, ro);
}

// SpeCache's step: the real and the speculative row of a slot (and rows of
// other slots between them) read the slot's one set of fetched rows.
TEST_F(cuda_packed_attention, entries_share_rows_through_an_index) {
  unsigned seed = 1550;
  for (const auto order : both_orders)
    for (const auto& fc : {formats[0], formats[3], formats[5]}) {
      run_options ro;
      ro.order = order;
      run_shared_rows(*dev_, fc, {{0, 5 * 64 + 23}, {1, 2 * 64 + 64}},
                      {{0, 5 * 64 + 23}, {1, 2 * 64 + 64}, {0, 5 * 64 + 24}, {1, 2 * 64 + 65}}, {0, 1, 0, 1},
                      {{5, 25}, {2, 66}}, ++seed, ro);
    }
}

// The same in one multi-query block per slot (SpeCache's step: the real
// row and the speculative one at the next position share each code load and
// the slot's set), with raw scores per column: both entries' probabilities
// against the CPU.
TEST_F(cuda_packed_attention, multi_query_blocks_with_shared_rows_and_scores) {
  unsigned seed = 1580;
  run_options ro;
  ro.blocks = {{0, 2}, {2, 2}};
  ro.max_queries = 2;
  ro.probs = true;
  for (const auto order : both_orders)
    for (const auto& fc : {formats[0], formats[3], formats[1]}) {
      ro.order = order;
      run_shared_rows(*dev_, fc, {{0, 5 * 64 + 23}, {1, 2 * 64 + 60}},
                      {{0, 5 * 64 + 24}, {0, 5 * 64 + 25}, {1, 2 * 64 + 61}, {1, 2 * 64 + 62}}, {0, 0, 1, 1},
                      {{5, 25}, {2, 62}}, ++seed, ro);
    }
}

TEST_F(cuda_packed_attention, every_position_replaced_equals_full_attention) {
  unsigned seed = 1600;
  for (const auto order : both_orders)
  for (const auto& fc : {formats[0], formats[5]}) {
    const std::vector<slot_shape> shapes = {{4, 30}};
    const std::vector<entry> es = {{0, 4 * 64 + 30}, {0, 77}};
    // Build the fixtures once to take their exact rows (same seed as run_case's).
    const auto fs = make_slots(fc, 128, 2, 4, 64, shapes, seed + 1);
    std::mt19937 rng(seed);
    const auto rows = make_replaced(es, 2, 128, 4 * 64 + 30, false, true, rng, &fs);
    run_options ro;
    ro.rows = &rows;
    ro.exact_full = true;
    ro.splits = {1, 2};
    ro.order = order;
    run_case(*dev_, fc, 128, 2, 4, 64, shapes, es, 32, seed + 1, ro);
  }
}

TEST_F(cuda_packed_attention, probabilities_match_cpu) {
  unsigned seed = 1700;
  for (const auto order : both_orders)
  for (const auto& fc : {formats[1], formats[3], formats[5]}) {
    run_options ro;
    ro.order = order;
    ro.probs = true;
    ro.splits = {1, 3};
    run_case(*dev_, fc, 128, 2, 4, 64, {{4, 21}, {1, 3}}, {{0, 4 * 64 + 21}, {1, 67}, {0, 150}}, 24, ++seed, ro);
    std::mt19937 rng(seed);
    const std::vector<entry> es = {{0, 3 * 64 + 9}};
    const auto rows = make_replaced(es, 2, 128, 16, false, false, rng);
    ro.rows = &rows;
    run_case(*dev_, fc, 128, 2, 4, 64, {{3, 9}}, es, 16, seed, ro);
  }
}

// v4: the same cases over the cache in lane order (head_dim 128), every
// format, GQA group and G, odd and wrapping windows, causal rows inside the
// window and inside the packed part, splits and stages.
TEST_F(cuda_packed_attention, lane_order_matches_cpu_on_the_same_codes) {
  unsigned seed = 1700;
  for (const auto& fc : formats)
    for (const int gq : {1, 2, 4, 8})
      for (const int group : {32, 64, 128}) {
        const std::vector<slot_shape> shapes = {{std::int64_t(640 / group), 37}, {std::int64_t(256 / group), 5}};
        const std::int64_t len0 = 640 + 37, len1 = 256 + 5;
        const std::vector<entry> es = {{0, len0}, {1, len1}, {0, len0 - 11}, {1, 200}, {0, 1}, {0, 333}};
        run_options ro;
        ro.order = kc::packed_order::lane;
        ro.splits = {1, 4};
        ro.stages = {2, 4};
        ro.variants = {{true, 1}, {true, 0}};
        run_case(*dev_, fc, 128, 2, gq, group, shapes, es, 41, ++seed, ro);
      }
}

TEST_F(cuda_packed_attention, lane_order_windows_long_contexts_and_multi_query_blocks) {
  unsigned seed = 1800;
  run_options ro;
  ro.order = kc::packed_order::lane;
  ro.splits = {1, 2};
  ro.stages = {3};
  ro.variants = {{true, 1}};
  for (const auto& fc : formats) {
    run_case(*dev_, fc, 128, 2, 4, 64, {{0, 45}}, {{0, 45}, {0, 1}}, 64, ++seed, ro);  // nothing packed yet
    run_case(*dev_, fc, 128, 2, 4, 64, {{3, 1}}, {{0, 193}}, 8, ++seed, ro);          // one window row
    run_case(*dev_, fc, 128, 1, 2, 32, {{9, 0}}, {{0, 288}, {0, 100}}, 4, ++seed, ro);  // no window
    run_case(*dev_, fc, 128, 1, 8, 128, {{2, 130}}, {{0, 386}}, 131, ++seed, ro);    // window past one tile
  }
  for (const auto& fc : formats)  // two slots, a causal row inside the packed part
    run_case(*dev_, fc, 128, 2, 4, 64, {{5, 30}, {2, 7}}, {{0, 5 * 64 + 30}, {1, 2 * 64 + 7}, {0, 100}}, 40, ++seed,
             ro);
  run_options lr = ro;
  lr.splits = {1, 7, 16};
  lr.stages = {2, 3, 4};
  run_case(*dev_, formats[0], 128, 2, 4, 64, {{60, 70}}, {{0, 60 * 64 + 70}}, 130, 1890, lr);
  run_case(*dev_, formats[5], 128, 2, 4, 128, {{24, 200}}, {{0, 24 * 128 + 200}}, 256, 1891, lr);
  run_multi_query(*dev_, ro, seed);
}

TEST_F(cuda_packed_attention, rejects_bad_arguments) {
  kc::packed_attention_args a;
  a.entries = 1;
  a.n_heads = 8;
  a.cache.n_kv_heads = 2;
  a.cache.head_dim = 96;
  EXPECT_THROW(kc::packed_attention(a, nullptr), std::invalid_argument);
  a.cache.head_dim = 128;
  a.cache.group = 16;
  EXPECT_THROW(kc::packed_attention(a, nullptr), std::invalid_argument);
  a.cache.group = 64;
  a.cache.bits = 3;
  EXPECT_THROW(kc::packed_attention(a, nullptr), std::invalid_argument);
  a.cache.bits = 2;
  a.n_heads = 6;  // GQA 3
  EXPECT_THROW(kc::packed_attention(a, nullptr), std::invalid_argument);
  // Lane order (v4): head_dim 128 only; replaced rows and raw scores need their arrays.
  a.n_heads = 8;
  a.cache.order = kc::packed_order::lane;
  // Every required array present (never read: the checks run before any
  // launch), so that each check below is the one that fails.
  alignas(16) static std::uint8_t blob[64] = {};
  a.q = reinterpret_cast<const std::uint16_t*>(blob);
  a.partial = reinterpret_cast<float*>(blob);
  a.out_f32 = reinterpret_cast<float*>(blob);
  a.entry_slot = a.entry_quant = a.entry_len = reinterpret_cast<const std::int32_t*>(blob);
  a.cache.k_codes = a.cache.v_codes = blob;
  a.cache.k_scale = a.cache.k_zero = a.cache.v_scale = a.cache.v_zero = reinterpret_cast<const std::uint16_t*>(blob);
  a.cache.win_k = a.cache.win_v = reinterpret_cast<const std::uint16_t*>(blob);
  a.cache.win_cap = 1;
  a.cache.head_dim = 64;
  try {
    kc::packed_attention(a, nullptr);
    ADD_FAILURE() << "lane order with head_dim 64 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
  a.cache.head_dim = 128;
  const std::int32_t dummy = 0;
  a.rows.positions = &dummy;
  try {
    kc::packed_attention(a, nullptr);
    ADD_FAILURE() << "replaced rows without counts or K/V rows were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("replaced rows"), std::string::npos) << e.what();
  }
  a.rows.positions = nullptr;
  float sc = 0.f;
  a.scores = &sc;
  try {
    kc::packed_attention(a, nullptr);
    ADD_FAILURE() << "raw scores without entry rows were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("scores need"), std::string::npos) << e.what();
  }
}
#endif

TEST_F(cuda_packed_attention, split_choice_fills_the_machine) {
#ifdef SPECPIPE_HAVE_CUDA
  // 64k tokens: 512 packed tiles + 1 window tile per (entry, head); 64 pairs.
  const std::int64_t tiles = kc::packed_attention_tiles(65472, 65536);
  EXPECT_EQ(tiles, 512 + 1);
  const int s = kc::packed_attention_splits(8, 8, tiles, 132, 128, 4);
  EXPECT_GE(64 * s, 132 * 4 * 9 / 10) << "fewer blocks than the slots of one wave";
  // A minimum run per split caps the count; the machine is still filled.
  for (const int min_tiles : {8, 16, 32}) {
    const int sm = kc::packed_attention_splits(8, 8, tiles, 132, 128, 2, min_tiles);
    EXPECT_GE(sm, 1);
    EXPECT_LE(sm, int(tiles / min_tiles)) << "min_split_tiles=" << min_tiles;
    EXPECT_GE(64 * sm, 132 * 2 * 9 / 10) << "min_split_tiles=" << min_tiles;
  }
  // Few pairs: the minimum run gives way to filling one wave. Batch 1 of an
  // MHA model (32 KV heads) at 8k: 64 tiles, 16 per split would be 128
  // blocks for 264 slots.
  const int b1 = kc::packed_attention_splits(1, 32, 64, 132, 128, 2, 16);
  EXPECT_GE(32 * b1, 132 * 2 * 9 / 10) << b1 << " splits";
  EXPECT_LE(b1, 32) << "at least 2 tiles per split";
  // Many pairs keep the minimum run: 64 pairs x 512 tiles.
  EXPECT_LE(kc::packed_attention_splits(8, 8, 512, 132, 128, 2, 16), 32);
#endif
}

}  // namespace
}  // namespace specpipe::test
