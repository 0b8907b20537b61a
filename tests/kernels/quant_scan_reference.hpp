#pragma once
// The CPU packed-code attention as first written: one (query, head) at a
// time, every code unpacked with shifts and masks where it is used. The
// kernel (kernels/cpu/quantized_attention.cpp) now decodes each block's codes
// once for a whole GQA group through byte tables; it must keep this
// arithmetic, in this order, element for element, so its outputs and
// probabilities are compared with these bit for bit. Single-threaded; the
// arguments are assumed valid (the kernel's own checks are tested apart).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/dot.hpp"
#include "kernels/mixed_attention.hpp"
#include "memory/dtype.hpp"

namespace specpipe::test::ref_scan {

using kernels::cpu::dot;
using kernels::cpu::mixed_rows;
using kernels::cpu::packed_kv;
using kernels::cpu::quantized_attention_args;

// Keys scored per block before the running max/sum are rescaled.
constexpr std::int64_t key_block = 64;
constexpr std::int64_t max_head_dim = 512;

inline float row_at(const void* rows, dtype t, std::int64_t i) {
  switch (t) {
    case dtype::f16: return f16_to_f32(static_cast<const std::uint16_t*>(rows)[i]);
    case dtype::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(rows)[i]);
    default: return static_cast<const float*>(rows)[i];
  }
}

template <int B>
inline unsigned code_at(const std::uint8_t* stream, std::int64_t i) {
  constexpr int per_byte = 8 / B;
  return (unsigned(stream[i / per_byte]) >> ((i % per_byte) * B)) & ((1u << B) - 1u);
}

// One (query, head) over positions 0 .. last. B: bits of the upper plane.
template <int B>
struct ref_scan_one {
  const quantized_attention_args& a;
  const mixed_rows* rows;
  std::int64_t kv_head, last;
  float scale;
  float* probs;  // null or this (query, head)'s row

  float acc[max_head_dim];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0;
  // Replaced rows of this head: cursor into the sorted positions.
  const std::int64_t* rep_pos = nullptr;
  std::int64_t rep_count = 0, rep_next = 0;

  void run(const float* q, float* out) {
    const std::int64_t d = a.head_dim;
    std::fill(acc, acc + d, 0.0f);
    if (rows) {
      rep_pos = rows->positions + kv_head * rows->stride;
      rep_count = rows->count[kv_head];
    }
    const packed_kv& kv = a.kv;
    const std::int64_t quant_end = std::min(kv.n_tokens, last + 1);
    for (std::int64_t g0 = 0; g0 < quant_end; g0 += kv.group) packed_group(q, g0, std::min(kv.group, quant_end - g0));
    for (std::int64_t j0 = kv.n_tokens; j0 <= last; j0 += key_block) window_block(q, j0, std::min(key_block, last + 1 - j0));
    const float inv = 1.0f / running_sum;
    for (std::int64_t i = 0; i < d; ++i) out[i] = acc[i] * inv;
    if (probs)
      for (std::int64_t j = 0; j <= last; ++j) probs[j] = std::exp(probs[j] - running_max) * inv;
  }

  // Replaced positions inside [j0, j0 + jn): their scores come from the rows.
  // Returns how many; fills which[] with (offset, row index) pairs.
  std::int64_t replaced_in(const float* q, std::int64_t j0, std::int64_t jn, float* scores, std::int64_t* which) {
    std::int64_t m = 0;
    while (rep_next < rep_count && rep_pos[rep_next] < j0) ++rep_next;
    for (std::int64_t r = rep_next; r < rep_count && rep_pos[r] < j0 + jn; ++r) {
      const std::int64_t off = rep_pos[r] - j0;
      const std::int64_t base = (kv_head * rows->stride + r) * a.head_dim;
      float s = 0;
      if (rows->type == dtype::f32) {
        s = dot(q, static_cast<const float*>(rows->k) + base, a.head_dim);
      } else {
        for (std::int64_t c = 0; c < a.head_dim; ++c) s += q[c] * row_at(rows->k, rows->type, base + c);
      }
      scores[off] = s * scale;
      which[2 * m] = off;
      which[2 * m + 1] = base;
      ++m;
    }
    return m;
  }

  // Online-softmax update for a block whose scores are known; returns the
  // correction already applied to acc and sets p[] (unnormalized).
  void softmax_block(std::int64_t j0, const float* scores, std::int64_t jn, float* p) {
    float block_max = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < jn; ++j) block_max = std::max(block_max, scores[j]);
    const float new_max = std::max(running_max, block_max);
    const float correction = std::exp(running_max - new_max);
    running_sum *= correction;
    for (std::int64_t i = 0; i < a.head_dim; ++i) acc[i] *= correction;
    for (std::int64_t j = 0; j < jn; ++j) {
      p[j] = std::exp(scores[j] - new_max);
      running_sum += p[j];
    }
    if (probs) std::copy(scores, scores + jn, probs + j0);
    running_max = new_max;
  }

  void add_row(const std::int64_t* which, std::int64_t m, std::int64_t off, float p, bool& done) {
    done = false;
    for (std::int64_t r = 0; r < m; ++r)
      if (which[2 * r] == off) {
        const std::int64_t base = which[2 * r + 1];
        for (std::int64_t c = 0; c < a.head_dim; ++c) acc[c] += p * row_at(rows->v, rows->type, base + c);
        done = true;
        return;
      }
  }

  void packed_group(const float* q, std::int64_t g0, std::int64_t tokens) {
    const packed_kv& kv = a.kv;
    const std::int64_t d = a.head_dim, n_kv = a.n_kv_heads;
    const std::int64_t chan_bytes = kv.group * B / 8;
    const std::int64_t block_index = (g0 / kv.group) * n_kv + kv_head;
    const std::uint8_t* kc = kv.k_codes + block_index * d * chan_bytes;
    const std::uint8_t* kl = kv.k_lower ? kv.k_lower + block_index * d * chan_bytes : nullptr;
    const std::uint16_t* ks = kv.k_scale + block_index * d;
    const std::uint16_t* kz = kv.k_zero + block_index * d;
    // q . k^ = sum_c q_c z_c + sum_c (q_c s_c) U_ct [+ sum_c (q_c s_c / 16)(L_ct - 8)].
    float qs[max_head_dim];
    float base = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      const float s = f16_to_f32(ks[c]);
      qs[c] = q[c] * s;
      base += q[c] * f16_to_f32(kz[c]);
      if (kl) base -= 8.0f * qs[c] / 16.0f;
    }
    for (std::int64_t t0 = 0; t0 < tokens; t0 += key_block) {
      const std::int64_t tn = std::min(key_block, tokens - t0);
      float scores[key_block], p[key_block];
      std::fill(scores, scores + tn, base);
      for (std::int64_t c = 0; c < d; ++c) {
        const std::uint8_t* stream = kc + c * chan_bytes;
        const float w = qs[c];
        for (std::int64_t t = 0; t < tn; ++t) scores[t] += w * float(code_at<B>(stream, t0 + t));
        if (kl) {
          const std::uint8_t* lower = kl + c * chan_bytes;
          const float wl = w / 16.0f;
          for (std::int64_t t = 0; t < tn; ++t) scores[t] += wl * float(code_at<4>(lower, t0 + t));
        }
      }
      for (std::int64_t t = 0; t < tn; ++t) scores[t] *= scale;
      std::int64_t which[2 * key_block];
      const std::int64_t m = rows ? replaced_in(q, g0 + t0, tn, scores, which) : 0;
      softmax_block(g0 + t0, scores, tn, p);
      for (std::int64_t t = 0; t < tn; ++t) {
        const std::int64_t j = g0 + t0 + t;
        bool done = false;
        if (m) add_row(which, m, t, p[t], done);
        if (!done) add_packed_value(j, p[t]);
      }
    }
  }

  void add_packed_value(std::int64_t j, float p) {
    const packed_kv& kv = a.kv;
    const std::int64_t d = a.head_dim, row = j * a.n_kv_heads + kv_head;
    const std::int64_t row_bytes = (d * B + 7) / 8, groups = (d + kv.value_group - 1) / kv.value_group;
    const std::uint8_t* vc = kv.v_codes + row * row_bytes;
    const std::uint8_t* vl = kv.v_lower ? kv.v_lower + row * row_bytes : nullptr;
    const std::uint16_t* vs = kv.v_scale + row * groups;
    const std::uint16_t* vz = kv.v_zero + row * groups;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * kv.value_group, c1 = std::min(d, c0 + kv.value_group);
      const float ps = p * f16_to_f32(vs[g]);
      float pz = p * f16_to_f32(vz[g]);
      if (vl) {
        const float pl = ps / 16.0f;
        pz -= 8.0f * pl;
        for (std::int64_t c = c0; c < c1; ++c)
          acc[c] += pz + ps * float(code_at<B>(vc, c)) + pl * float(code_at<4>(vl, c));
      } else {
        for (std::int64_t c = c0; c < c1; ++c) acc[c] += pz + ps * float(code_at<B>(vc, c));
      }
    }
  }

  void window_block(const float* q, std::int64_t j0, std::int64_t jn) {
    const std::int64_t d = a.head_dim, stride = a.n_kv_heads * d;
    const float* k = a.win_k + kv_head * d;
    const float* v = a.win_v + kv_head * d;
    const std::int64_t w0 = j0 - a.kv.n_tokens;
    float scores[key_block], p[key_block];
    for (std::int64_t j = 0; j < jn; ++j) scores[j] = dot(q, k + (w0 + j) * stride, d) * scale;
    std::int64_t which[2 * key_block];
    const std::int64_t m = rows ? replaced_in(q, j0, jn, scores, which) : 0;
    softmax_block(j0, scores, jn, p);
    for (std::int64_t j = 0; j < jn; ++j) {
      bool done = false;
      if (m) add_row(which, m, j, p[j], done);
      if (done) continue;
      const float* vr = v + (w0 + j) * stride;
      for (std::int64_t i = 0; i < d; ++i) acc[i] += p[j] * vr[i];
    }
  }
};

template <int B>
inline void ref_scan_all(const quantized_attention_args& a, const mixed_rows* rows) {
  const std::int64_t group = a.n_heads / a.n_kv_heads;
  const float scale = float(1.0 / std::sqrt(double(a.head_dim)));
  auto body = [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t item = b; item < e; ++item) {
      const std::int64_t i = item / a.n_heads, h = item % a.n_heads;
      float* probs = a.probs ? a.probs + item * a.probs_stride : nullptr;
      ref_scan_one<B> s{a, rows, h / group, a.pos0 + i, scale, probs};
      s.run(a.q + i * a.q_stride + h * a.head_dim, a.out + i * a.out_stride + h * a.head_dim);
    }
  };
  body(0, a.n * a.n_heads);
}


// quantized_attention (rows null) or mixed_attention (rows given), strides
// defaulted as the kernel defaults them.
inline void ref_quantized_scan(quantized_attention_args a, const mixed_rows* rows) {
  if (a.n <= 0) return;
  if (a.q_stride == 0) a.q_stride = a.n_heads * a.head_dim;
  if (a.out_stride == 0) a.out_stride = a.n_heads * a.head_dim;
  switch (a.kv.bits) {
    case 1: ref_scan_all<1>(a, rows); break;
    case 2: ref_scan_all<2>(a, rows); break;
    default: ref_scan_all<4>(a, rows); break;
  }
}

}  // namespace specpipe::test::ref_scan
