#include "model/specache_cache.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/mixed_attention.hpp"
#include "memory/dtype.hpp"

namespace specpipe {

void specache_rows::reset(std::int64_t heads, std::int64_t s, std::int64_t head_dim) {
  stride = s;
  positions.assign(std::size_t(heads * s), 0);
  count.assign(std::size_t(heads), 0);
  k.resize(std::size_t(heads * s * head_dim));
  v.resize(k.size());
}

std::int64_t specache_rows::rows() const {
  std::int64_t n = 0;
  for (const auto c : count) n += c;
  return n;
}

struct specache_cache::impl {
  std::vector<std::vector<float>> fresh_k, fresh_v;  // per layer, this forward's rows
  std::vector<std::vector<float>> exact_k;           // per layer, f16-rounded keys of every stored position
  std::vector<float> probs;                          // [rows][n_heads][stride] of one attend
  std::vector<float> exact;                          // [n_heads][stride]
};

namespace {

int rows_of(specache_step s) {
  switch (s) {
    case specache_step::prefill: return -1;  // any
    case specache_step::speculative: return 2;
    case specache_step::predecode:
    case specache_step::output: return 1;
  }
  return -1;
}

kivi_options low_bit_options(const specache_options& o) {
  if (o.bits != 1 && o.bits != 2)
    throw std::invalid_argument("specache: --kv-bits must be 1 (quartile levels) or 2 (KIVI 2-bit), got " +
                                std::to_string(o.bits));
  kivi_options k;
  k.bits = o.bits;
  // 1 bit: SpeCache's own levels at the quartiles; 2 bits: plain KIVI, as in
  // the paper's 2-bit setting.
  k.variant = o.bits == 1 ? kivi_variant::specache : kivi_variant::kivi;
  k.group = o.group;
  k.residual = o.residual;
  return k;
}

kernels::cpu::mixed_rows as_mixed(const specache_rows& r) {
  kernels::cpu::mixed_rows m;
  m.positions = r.positions.data();
  m.count = r.count.data();
  m.stride = r.stride;
  m.k = r.k.data();
  m.v = r.v.data();
  m.type = dtype::f16;
  return m;
}

}  // namespace

specache_cache::specache_cache(const model_config& config, std::int64_t max_tokens, const specache_options& opts,
                               kernels::cpu::thread_pool* pool)
    : config_(config), opts_(opts), pool_(pool), impl_(std::make_unique<impl>()) {
  if (max_tokens <= 0)
    throw std::invalid_argument("specache: max_tokens must be positive, got " + std::to_string(max_tokens));
  // One more than committed: the speculative row is appended beside the real one.
  low_ = std::make_unique<kivi_cache>(config, max_tokens + 1, low_bit_options(opts), pool);
  const auto layers = std::size_t(config.num_hidden_layers);
  impl_->fresh_k.resize(layers);
  impl_->fresh_v.resize(layers);
  if (opts.track_exact) impl_->exact_k.resize(layers);
}

specache_cache::~specache_cache() = default;

void specache_cache::begin(specache_step step) {
  if (step != specache_step::prefill && !link_)
    throw std::logic_error("specache: a decode step needs a link to the 16-bit rows (set_link)");
  step_ = step;
  fresh_kept_ = 0;
  for (auto& f : impl_->fresh_k) f.clear();
  for (auto& f : impl_->fresh_v) f.clear();
}

void specache_cache::commit() {
  const std::int64_t fresh = std::int64_t(impl_->fresh_k[0].size()) / config_.kv_dim();
  const bool drop_last = step_ == specache_step::predecode || step_ == specache_step::speculative;
  fresh_kept_ = drop_last ? fresh - 1 : fresh;
  if (drop_last && fresh > 0) truncate(length(0) - 1);
}

std::int64_t specache_cache::length(int layer) const { return low_->length(layer); }

void specache_cache::append(int layer, const float* k, const float* v, std::int64_t n) {
  const int want = rows_of(step_);
  if (want >= 0 && n != want)
    throw std::invalid_argument("specache: a " + std::to_string(want) + "-row step appended " + std::to_string(n) +
                                " rows");
  low_->append(layer, k, v, n);
  const std::size_t count = std::size_t(n * config_.kv_dim());
  auto& fk = impl_->fresh_k[std::size_t(layer)];
  auto& fv = impl_->fresh_v[std::size_t(layer)];
  fk.insert(fk.end(), k, k + count);
  fv.insert(fv.end(), v, v + count);
  if (opts_.track_exact) {
    auto& ek = impl_->exact_k[std::size_t(layer)];
    // Rounded through f16: the exact keys are those of the 16-bit host store.
    for (std::size_t i = 0; i < count; ++i) ek.push_back(f16_to_f32(f32_to_f16(k[i])));
  }
}

std::int64_t specache_cache::next_quantized(int layer) const {
  // The rows commit() drops are not in the window when the next append
  // applies the flush rule (model/quantized_cache.hpp).
  const bool drop_last = step_ == specache_step::predecode || step_ == specache_step::speculative;
  std::int64_t window = low_->window(layer) - (drop_last ? 1 : 0);
  std::int64_t quantized = low_->quantized(layer);
  const std::int64_t group = low_->layout().group;
  for (; window >= low_->flush_at(); window -= group) quantized += group;
  return quantized;
}

void specache_cache::exact_probs(int layer, const float* q, std::int64_t pos) {
  const std::int64_t heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads;
  const std::int64_t d = config_.head_dim, kv_dim = config_.kv_dim(), rep = heads / kv_heads;
  const std::int64_t stride = pos + 1;
  impl_->exact.resize(std::size_t(heads * stride));
  const float* keys = impl_->exact_k[std::size_t(layer)].data();
  const float scale = 1.0f / std::sqrt(float(d));
  auto per_head = [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t h = b; h < e; ++h) {
      float* p = impl_->exact.data() + h * stride;
      const float* qh = q + h * d;
      const float* kh = keys + (h / rep) * d;
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j <= pos; ++j) mx = std::max(mx, p[j] = kernels::cpu::dot(qh, kh + j * kv_dim, d) * scale);
      float sum = 0;
      for (std::int64_t j = 0; j <= pos; ++j) sum += p[j] = std::exp(p[j] - mx);
      const float inv = 1.0f / sum;
      for (std::int64_t j = 0; j <= pos; ++j) p[j] *= inv;
    }
  };
  if (pool_)
    pool_->parallel_for(heads, per_head);
  else
    per_head(0, heads);
  link_->exact({layer, pos, low_->quantized(layer), stride, heads, kv_heads, impl_->exact.data()});
}

void specache_cache::attend(int layer, const float* q, std::int64_t n, std::int64_t pos0, float* out) {
  if (step_ == specache_step::prefill) {
    low_->attend(layer, q, n, pos0, out);
    return;
  }
  const std::int64_t heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads;
  const std::int64_t stride = pos0 + n;  // the last row's positions 0 .. pos0 + n - 1
  impl_->probs.resize(std::size_t(n * heads * stride));

  auto a = low_->attention_args(layer, q, n, pos0, out, false);
  a.probs = impl_->probs.data();
  a.probs_stride = stride;

  const specache_probs last{layer,   pos0 + n - 1, next_quantized(layer), stride, heads, kv_heads,
                            impl_->probs.data() + (n - 1) * heads * stride};
  switch (step_) {
    case specache_step::prefill: break;
    case specache_step::predecode:
      kernels::cpu::quantized_attention(a, pool_);
      link_->speculative(last);
      break;
    case specache_step::speculative: {
      const specache_rows* rows = link_->rows(layer);
      if (rows && rows->rows() > 0) {
        const auto m = as_mixed(*rows);
        kernels::cpu::mixed_attention(a, m, pool_);
      } else {
        kernels::cpu::quantized_attention(a, pool_);
      }
      link_->speculative(last);
      if (opts_.track_exact) exact_probs(layer, q, pos0);
      break;
    }
    case specache_step::output: {
      // The top-k of the real query's own low-bit attention, then the
      // attention again with those rows in 16 bits.
      kernels::cpu::quantized_attention(a, pool_);
      specache_probs now = last;
      now.candidates = low_->quantized(layer);
      const specache_rows* rows = link_->fetch_now(now);
      if (rows && rows->rows() > 0) {
        a.probs = nullptr;
        const auto m = as_mixed(*rows);
        kernels::cpu::mixed_attention(a, m, pool_);
      }
      if (opts_.track_exact) exact_probs(layer, q, pos0);
      break;
    }
  }
}

void specache_cache::truncate(std::int64_t n) {
  low_->truncate(n);
  for (auto& ek : impl_->exact_k)
    if (std::int64_t(ek.size()) > n * config_.kv_dim()) ek.resize(std::size_t(n * config_.kv_dim()));
}

std::size_t specache_cache::bytes_used() const { return low_->bytes_used(); }

std::size_t specache_cache::exact_bytes() const {
  std::size_t b = 0;
  for (const auto& ek : impl_->exact_k) b += ek.size() * sizeof(std::uint16_t);
  return b;
}

const float* specache_cache::fresh_keys(int layer) const { return impl_->fresh_k.at(std::size_t(layer)).data(); }
const float* specache_cache::fresh_values(int layer) const { return impl_->fresh_v.at(std::size_t(layer)).data(); }

}  // namespace specpipe
