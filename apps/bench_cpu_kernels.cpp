// `specpipe bench --device cpu --kernels`: the CPU backend's decode attention
// alone, one layer of the preset's shape: f32 attention over the full K/V as
// the baseline, then the packed-code kernel (kernels/quantized_attention.hpp)
// over every cache format, and SpeCache's mixed attention with k replaced
// rows, all in the same run on the same random history. Each point reports
// the bytes the kernel must read and the rate it reads them at, against the
// host's memcpy bandwidth measured in the same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "apps/bench.hpp"
#include "apps/cli_support.hpp"
#include "kernels/attention.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/mixed_attention.hpp"
#include "kernels/quantize.hpp"
#include "kernels/quantized_attention.hpp"
#include "memory/dtype.hpp"

namespace specpipe::apps {
namespace {

namespace kc = kernels::cpu;
using clock_type = std::chrono::steady_clock;

struct timing {
  double median = 0, spread = 0;
};

template <class F>
timing time_ms(int warmup, int repeats, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> ms;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto t0 = clock_type::now();
    body();
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.back() - ms.front()};
}

// memcpy of a buffer well past the last-level cache, bytes read + written per
// second (the GPU bench's convention), best of a few.
double host_copy_bandwidth() {
  const std::size_t n = std::size_t(256) << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = clock_type::now();
    std::memcpy(b.data(), a.data(), n);
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    best = std::max(best, 2.0 * double(n) / s);
    a[std::size_t(i)] = b[n - 1 - std::size_t(i)];  // keeps the copies observable
  }
  return best;
}

struct format_case {
  const char* label;
  int bits;
  kc::quant_rule rule;
  bool lower;           // hier's INT8 read (both planes)
  std::int64_t group;   // G
};

// One sequence's history of `ctx` positions, quantized in whole groups of G
// with the rest (at least `residual` positions) left as f32 window rows.
struct packed_history {
  std::int64_t n_quant = 0, window = 0, group = 0, value_group = 0;
  int bits = 1;
  bool lower = false;
  std::vector<std::uint8_t> k_codes, k_lower, v_codes, v_lower;
  std::vector<std::uint16_t> k_scale, k_zero, v_scale, v_zero;

  packed_history(const std::vector<float>& k, const std::vector<float>& v, std::int64_t ctx, std::int64_t kv_heads,
                 std::int64_t d, const format_case& f, std::int64_t residual) {
    group = f.group;
    value_group = std::min<std::int64_t>(f.group, d);
    bits = f.bits;
    lower = f.lower;
    n_quant = std::max<std::int64_t>(0, (ctx - residual) / group * group);
    window = ctx - n_quant;
    const bool hier = f.rule == kc::quant_rule::hier;
    const std::int64_t kvd = kv_heads * d, groups = n_quant / group;
    const std::int64_t block = d * group * bits / 8, row = (d * bits + 7) / 8;
    const std::int64_t vg = (d + value_group - 1) / value_group;
    k_codes.assign(std::size_t(groups * kv_heads * block), 0);
    k_lower.assign(hier ? k_codes.size() : 0, 0);
    k_scale.assign(std::size_t(groups * kv_heads * d), 0);
    k_zero = k_scale;
    v_codes.assign(std::size_t(n_quant * kv_heads * row), 0);
    v_lower.assign(hier ? v_codes.size() : 0, 0);
    v_scale.assign(std::size_t(n_quant * kv_heads * vg), 0);
    v_zero = v_scale;
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        const std::int64_t b = g * kv_heads + h;
        kc::quantize_key_group(k.data() + g * group * kvd + h * d, kvd, group, d, bits, f.rule,
                               {k_codes.data() + b * block, hier ? k_lower.data() + b * block : nullptr,
                                k_scale.data() + b * d, k_zero.data() + b * d});
      }
    for (std::int64_t h = 0; h < kv_heads && n_quant > 0; ++h)
      kc::quantize_value_rows(v.data() + h * d, kvd, n_quant, d, value_group, bits, f.rule,
                              {v_codes.data() + h * row, hier ? v_lower.data() + h * row : nullptr,
                               v_scale.data() + h * vg, v_zero.data() + h * vg},
                              kv_heads * row, kv_heads * vg);
  }

  kc::packed_kv view() const {
    kc::packed_kv p;
    p.bits = bits;
    p.group = group;
    p.value_group = value_group;
    p.n_tokens = n_quant;
    p.k_codes = k_codes.data();
    p.k_scale = k_scale.data();
    p.k_zero = k_zero.data();
    p.v_codes = v_codes.data();
    p.v_scale = v_scale.data();
    p.v_zero = v_zero.data();
    if (lower) {
      p.k_lower = k_lower.data();
      p.v_lower = v_lower.data();
    }
    return p;
  }

  // What one query's pass reads: the planes it uses, scales and zeros, and
  // the window's f32 rows.
  double bytes(std::int64_t kv_heads, std::int64_t d) const {
    const double planes = lower ? 2 : 1;
    const double codes = planes * double(k_codes.size() + v_codes.size());
    const double meta = 2.0 * double(k_scale.size() + k_zero.size() + v_scale.size() + v_zero.size());
    return codes + meta + double(window * kv_heads * d) * 4 * 2;
  }
};

}  // namespace

bench_report run_cpu_kernel_bench(const bench_options& o, int threads) {
  const auto& c = o.config;
  const std::int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const std::int64_t residual = 64, topk = 64;
  kc::thread_pool pool(threads);
  bench_report r;
  r.device_name = "CPU backend, " + std::to_string(pool.size()) + " threads";
  r.copy_bandwidth = host_copy_bandwidth();
  r.notes.push_back("one layer of " + o.model_name + "'s shape (" + std::to_string(nh) + " query / " +
                    std::to_string(nkv) + " KV heads, head_dim " + std::to_string(d) +
                    "), one decode query per sequence at the last position; floor = bytes read / the memcpy rate");
  const std::vector<format_case> formats = {
      {"kivi 1-bit G=64", 1, kc::quant_rule::rtn, false, 64},
      {"specache 1-bit G=64", 1, kc::quant_rule::specache, false, 64},
      {"kivi 2-bit G=64", 2, kc::quant_rule::rtn, false, 64},
      {"kivi 4-bit G=64", 4, kc::quant_rule::rtn, false, 64},
      {"hier INT4 G=128", 4, kc::quant_rule::hier, false, 128},
      {"hier INT8 G=128", 4, kc::quant_rule::hier, true, 128},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const long long ctx : o.contexts) {
    for (const long long batch : o.batches) {
      const std::int64_t kvd = nkv * d;
      const double f32_bytes = double(ctx) * double(kvd) * 4 * 2;
      if (double(batch) * f32_bytes * 1.6 > double(std::int64_t(24) << 30)) {
        r.points.push_back({"attention", batch, ctx, true, "the f32 history would need over 24 GiB of host memory"});
        continue;
      }
      // Every sequence its own history; keys get an outlier channel, as
      // real ones have.
      const std::size_t nseq = std::size_t(batch);
      std::vector<std::vector<float>> ks(nseq), vs(nseq);
      for (long long b = 0; b < batch; ++b) {
        ks[std::size_t(b)].resize(std::size_t(ctx * kvd));
        vs[std::size_t(b)].resize(std::size_t(ctx * kvd));
        for (auto& x : ks[std::size_t(b)]) x = u(rng);
        for (auto& x : vs[std::size_t(b)]) x = u(rng);
        for (std::int64_t t = 0; t < ctx; ++t) ks[std::size_t(b)][std::size_t(t * kvd + 5)] *= 12.0f;
      }
      std::vector<float> q(std::size_t(batch * nh * d)), out(q.size());
      for (auto& x : q) x = u(rng);
      const auto record = [&](const std::string& note, double bytes, const timing& t, double base_ms) {
        bench_point p{"attention", batch, ctx, false, note, t.median, t.spread, double(batch) / (t.median * 1e-3),
                      bytes, bytes / r.copy_bandwidth * 1e3, 0};
        p.extra.emplace_back("gb_per_s", bytes / (t.median * 1e-3) / 1e9);
        if (base_ms > 0) p.extra.emplace_back("speedup_vs_f32", base_ms / t.median);
        if (base_ms > 0) p.note += " | " + fixed(base_ms / t.median, 2) + "x f32";
        r.points.push_back(std::move(p));
      };
      const auto f32 = time_ms(o.warmup, o.repeats, [&] {
        for (long long b = 0; b < batch; ++b) {
          kc::attention_args a;
          a.q = q.data() + b * nh * d;
          a.k = ks[std::size_t(b)].data();
          a.v = vs[std::size_t(b)].data();
          a.len = ctx;
          a.out = out.data() + b * nh * d;
          a.n = 1;
          a.pos0 = ctx - 1;
          a.n_heads = nh;
          a.n_kv_heads = nkv;
          a.head_dim = d;
          kc::attention(a, &pool);
        }
      });
      record("f32 attention (kernels/attention.hpp)", double(batch) * f32_bytes, f32, 0);
      for (const format_case& f : formats) {
        std::vector<packed_history> hs;
        for (long long b = 0; b < batch; ++b) hs.emplace_back(ks[std::size_t(b)], vs[std::size_t(b)], ctx, nkv, d, f, residual);
        const auto args_for = [&](long long b) {
          const packed_history& h = hs[std::size_t(b)];
          kc::quantized_attention_args a;
          a.q = q.data() + b * nh * d;
          a.out = out.data() + b * nh * d;
          a.n = 1;
          a.pos0 = ctx - 1;
          a.n_heads = nh;
          a.n_kv_heads = nkv;
          a.head_dim = d;
          a.kv = h.view();
          a.win_k = ks[std::size_t(b)].data() + h.n_quant * kvd;
          a.win_v = vs[std::size_t(b)].data() + h.n_quant * kvd;
          a.win_len = h.window;
          return a;
        };
        const double bytes = double(batch) * hs.front().bytes(nkv, d);
        const auto t = time_ms(o.warmup, o.repeats, [&] {
          for (long long b = 0; b < batch; ++b) kc::quantized_attention(args_for(b), &pool);
        });
        record(std::string(f.label) + ", quantized_attention", bytes, t, f32.median);
        if (f.rule != kc::quant_rule::specache) continue;
        // SpeCache's read: the same cache with `topk` positions per KV head
        // (spread over the history) read from f16 rows instead.
        const std::int64_t k = std::min<std::int64_t>(topk, ctx);
        std::vector<std::int64_t> pos(std::size_t(nkv * k)), cnt(std::size_t(nkv), k);
        for (std::int64_t h = 0; h < nkv; ++h)
          for (std::int64_t i = 0; i < k; ++i) pos[std::size_t(h * k + i)] = i * (ctx / k) + (h % std::max<std::int64_t>(1, ctx / k));
        std::vector<std::uint16_t> rk(std::size_t(nkv * k * d)), rv(rk.size());
        for (auto& x : rk) x = f32_to_f16(u(rng));
        for (auto& x : rv) x = f32_to_f16(u(rng));
        kc::mixed_rows rows;
        rows.positions = pos.data();
        rows.count = cnt.data();
        rows.stride = k;
        rows.k = rk.data();
        rows.v = rv.data();
        rows.type = dtype::f16;
        const double row_bytes = double(batch) * double(nkv * k * d) * 2 * 2;
        const auto tm = time_ms(o.warmup, o.repeats, [&] {
          for (long long b = 0; b < batch; ++b) kc::mixed_attention(args_for(b), rows, &pool);
        });
        record(std::string(f.label) + ", mixed_attention, " + std::to_string(k) + " f16 rows per KV head",
               bytes + row_bytes, tm, f32.median);
      }
    }
  }
  return r;
}

}  // namespace specpipe::apps
