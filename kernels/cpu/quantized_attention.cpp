#include "kernels/quantized_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kernels/cpu/quantized_scan.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "memory/dtype.hpp"

namespace specpipe::kernels::cpu {

namespace {

// Keys scored per block before the running max/sum are rescaled.
constexpr std::int64_t key_block = 64;
constexpr std::int64_t max_head_dim = 512;

float row_at(const void* rows, dtype t, std::int64_t i) {
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

// Every byte's codes as floats (code i of a byte at bits i*B), so a block
// decodes with one table read per byte and contiguous stores the compiler
// vectorizes: 8 KiB for 1 bit, 4 KiB for 2, 2 KiB for 4.
template <int B>
struct code_table {
  static constexpr int per_byte = 8 / B;
  float f[256][per_byte];
  code_table() {
    for (int b = 0; b < 256; ++b)
      for (int i = 0; i < per_byte; ++i) f[b][i] = float((unsigned(b) >> (i * B)) & ((1u << B) - 1u));
  }
};
template <int B>
const code_table<B> table{};

#ifdef __SSE2__
// 16 codes (bytes in order) as 16 floats: zero-extended, converted exactly.
inline void codes16_to_floats(__m128i c, float* out) {
  const __m128i z = _mm_setzero_si128();
  const __m128i lo = _mm_unpacklo_epi8(c, z), hi = _mm_unpackhi_epi8(c, z);
  _mm_storeu_ps(out, _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)));
  _mm_storeu_ps(out + 4, _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)));
  _mm_storeu_ps(out + 8, _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)));
  _mm_storeu_ps(out + 12, _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)));
}

// 16 codes of 2 or 4 bits from their 4 or 8 bytes, in code order: each
// byte's fields masked out in place (16-bit shifts: what crosses from the
// neighbouring byte is masked away), then interleaved back.
template <int B>
inline __m128i unpack16(const std::uint8_t* s) {
  if constexpr (B == 4) {
    std::int64_t w;
    std::memcpy(&w, s, 8);
    const __m128i b = _mm_cvtsi64_si128(w), m = _mm_set1_epi8(0x0f);
    return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
  } else {
    std::int32_t w;
    std::memcpy(&w, s, 4);
    const __m128i b = _mm_cvtsi32_si128(w), m = _mm_set1_epi8(0x03);
    const __m128i c0 = _mm_and_si128(b, m), c1 = _mm_and_si128(_mm_srli_epi16(b, 2), m);
    const __m128i c2 = _mm_and_si128(_mm_srli_epi16(b, 4), m), c3 = _mm_and_si128(_mm_srli_epi16(b, 6), m);
    return _mm_unpacklo_epi16(_mm_unpacklo_epi8(c0, c1), _mm_unpacklo_epi8(c2, c3));
  }
}
#endif

// Codes first .. first + n - 1 of a packed stream as floats; `first` is
// byte-aligned. 2 and 4 bits sixteen codes at a time in SSE2 registers
// where the target has them, 1 bit (and any tail) through the byte table.
template <int B>
void decode_codes(const std::uint8_t* stream, std::int64_t first, std::int64_t n, float* out) {
  constexpr int per_byte = code_table<B>::per_byte;
  const std::uint8_t* s = stream + first / per_byte;
  std::int64_t i = 0;  // bytes done
#ifdef __SSE2__
  if constexpr (B != 1) {
    constexpr int bytes16 = 16 / per_byte;
    for (; (i + bytes16) * per_byte <= n; i += bytes16) codes16_to_floats(unpack16<B>(s + i), out + i * per_byte);
  }
#endif
  const std::int64_t whole = n / per_byte;
  for (; i < whole; ++i) std::memcpy(out + i * per_byte, table<B>.f[s[i]], sizeof(float) * per_byte);
  for (std::int64_t j = whole * per_byte; j < n; ++j) out[j] = float(code_at<B>(stream, first + j));
}

// Tokens (scores) or channels (values) a register tile holds: the loops
// below keep 16 running sums in four 4-float registers across the other
// dimension instead of streaming them through memory once per channel or
// token. Each sum still sees the same operations in the same order. (GCC's
// vector extension: plain SSE at the baseline target, no fused multiply-add.)
constexpr int tile = 16;
using f4 = float __attribute__((vector_size(16)));
inline f4 load4(const float* p) {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, f4 v) { std::memcpy(p, &v, sizeof v); }
inline f4 splat4(float x) { return f4{x, x, x, x}; }

// scores[t] = base + sum_c qs[c] kt[c][t] (+ sum_c (qs[c] / 16) klt[c][t]),
// c ascending, t < tn; kt and klt are [channel][key_block].
template <bool Lower>
void code_scores(const float* qs, std::int64_t d, const float* kt, const float* klt, float base, std::int64_t tn,
                 float* scores) {
  std::int64_t t0 = 0;
  for (; t0 + tile <= tn; t0 += tile) {
    f4 a0 = splat4(base), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t c = 0; c < d; ++c) {
      const f4 w = splat4(qs[c]);
      const float* col = kt + c * key_block + t0;
      a0 += w * load4(col);
      a1 += w * load4(col + 4);
      a2 += w * load4(col + 8);
      a3 += w * load4(col + 12);
      if constexpr (Lower) {
        const f4 wl = splat4(qs[c] / 16.0f);
        const float* l = klt + c * key_block + t0;
        a0 += wl * load4(l);
        a1 += wl * load4(l + 4);
        a2 += wl * load4(l + 8);
        a3 += wl * load4(l + 12);
      }
    }
    store4(scores + t0, a0);
    store4(scores + t0 + 4, a1);
    store4(scores + t0 + 8, a2);
    store4(scores + t0 + 12, a3);
  }
  for (std::int64_t t = t0; t < tn; ++t) {
    float x = base;
    for (std::int64_t c = 0; c < d; ++c) {
      const float w = qs[c];
      x += w * kt[c * key_block + t];
      if constexpr (Lower) x += (w / 16.0f) * klt[c * key_block + t];
    }
    scores[t] = x;
  }
}

// Per thread: one block's codes as floats, decoded once and read by every
// query head of the GQA group (keys [channel][token], values [token][channel];
// the lower planes beside). Grown to the largest head_dim seen, then reused,
// so a decode step allocates nothing after the first.
struct block_tiles {
  std::vector<float> k, kl, v, vl;
  std::vector<float> v_scale, v_zero;  // [token][value group]
  void reserve(std::int64_t d, std::int64_t value_groups, bool lower) {
    const std::size_t n = std::size_t(d * key_block), m = std::size_t(value_groups * key_block);
    if (k.size() < n) k.resize(n), v.resize(n);
    if (lower && kl.size() < n) kl.resize(n), vl.resize(n);
    if (v_scale.size() < m) v_scale.resize(m), v_zero.resize(m);
  }
};
thread_local block_tiles tiles;

// The online-softmax state of one (query, head).
struct head_state {
  const float* q = nullptr;
  float* out = nullptr;
  float* probs = nullptr;  // null or this (query, head)'s row
  float acc[max_head_dim];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0;
  float qs[max_head_dim];  // q_c s_c of the current key group
  float base = 0;          // sum_c q_c z_c [- sum_c 8 q_c s_c / 16] of that group
};

// Query heads h0 .. h0 + n_h - 1 of one KV head and one query over positions
// 0 .. last. Per head the arithmetic is that of a scan over the packed codes
// in position order (tests/kernels/quant_scan_reference.hpp, compared bit for
// bit): only where a code becomes a float changed, once per block for the
// whole group instead of once per head. B: bits of the upper plane.
template <int B>
struct group_scan {
  const quantized_attention_args& a;
  const mixed_rows* rows;
  std::int64_t kv_head, last;
  float scale;
  head_state* heads;
  std::int64_t n_h;
  // Replaced rows of this KV head: cursor into the sorted positions.
  const std::int64_t* rep_pos = nullptr;
  std::int64_t rep_count = 0, rep_next = 0;
  bool tiled_values = false;

  void run() {
    const std::int64_t d = a.head_dim;
    for (std::int64_t h = 0; h < n_h; ++h) std::fill(heads[h].acc, heads[h].acc + d, 0.0f);
    if (rows) {
      rep_pos = rows->positions + kv_head * rows->stride;
      rep_count = rows->count[kv_head];
    }
    const packed_kv& kv = a.kv;
    tiles.reserve(d, (d + kv.value_group - 1) / kv.value_group, kv.k_lower != nullptr);
    tiled_values = d % tile == 0 && kv.value_group % tile == 0;
    const std::int64_t quant_end = std::min(kv.n_tokens, last + 1);
    for (std::int64_t g0 = 0; g0 < quant_end; g0 += kv.group) packed_group(g0, std::min(kv.group, quant_end - g0));
    for (std::int64_t j0 = kv.n_tokens; j0 <= last; j0 += key_block) window_block(j0, std::min(key_block, last + 1 - j0));
    for (std::int64_t h = 0; h < n_h; ++h) {
      head_state& s = heads[h];
      const float inv = 1.0f / s.running_sum;
      for (std::int64_t i = 0; i < d; ++i) s.out[i] = s.acc[i] * inv;
      if (s.probs)
        for (std::int64_t j = 0; j <= last; ++j) s.probs[j] = std::exp(s.probs[j] - s.running_max) * inv;
    }
  }

  // Replaced positions inside [j0, j0 + jn): fills which[] with (offset, row
  // base) pairs and returns how many. The same for every head of the group.
  std::int64_t replaced_in(std::int64_t j0, std::int64_t jn, std::int64_t* which) {
    std::int64_t m = 0;
    while (rep_next < rep_count && rep_pos[rep_next] < j0) ++rep_next;
    for (std::int64_t r = rep_next; r < rep_count && rep_pos[r] < j0 + jn; ++r) {
      which[2 * m] = rep_pos[r] - j0;
      which[2 * m + 1] = (kv_head * rows->stride + r) * a.head_dim;
      ++m;
    }
    return m;
  }

  // The replaced rows' exact scores for one head.
  void replaced_scores(const head_state& s, const std::int64_t* which, std::int64_t m, float* scores) const {
    for (std::int64_t r = 0; r < m; ++r) {
      const std::int64_t base = which[2 * r + 1];
      float x = 0;
      if (rows->type == dtype::f32) {
        x = dot(s.q, static_cast<const float*>(rows->k) + base, a.head_dim);
      } else {
        for (std::int64_t c = 0; c < a.head_dim; ++c) x += s.q[c] * row_at(rows->k, rows->type, base + c);
      }
      scores[which[2 * r]] = x * scale;
    }
  }

  // Online-softmax update for a block whose scores are known; rescales acc
  // and sets p[] (unnormalized).
  void softmax_block(head_state& s, std::int64_t j0, const float* scores, std::int64_t jn, float* p) const {
    float block_max = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < jn; ++j) block_max = std::max(block_max, scores[j]);
    const float new_max = std::max(s.running_max, block_max);
    const float correction = std::exp(s.running_max - new_max);
    s.running_sum *= correction;
    for (std::int64_t i = 0; i < a.head_dim; ++i) s.acc[i] *= correction;
    for (std::int64_t j = 0; j < jn; ++j) {
      p[j] = std::exp(scores[j] - new_max);
      s.running_sum += p[j];
    }
    if (s.probs) std::copy(scores, scores + jn, s.probs + j0);
    s.running_max = new_max;
  }

  // Whether offset `off` is replaced; if so adds its 16-bit row.
  bool add_row(head_state& s, const std::int64_t* which, std::int64_t m, std::int64_t off, float p) const {
    for (std::int64_t r = 0; r < m; ++r)
      if (which[2 * r] == off) {
        const std::int64_t base = which[2 * r + 1];
        for (std::int64_t c = 0; c < a.head_dim; ++c) s.acc[c] += p * row_at(rows->v, rows->type, base + c);
        return true;
      }
    return false;
  }

  void packed_group(std::int64_t g0, std::int64_t tokens) {
    const packed_kv& kv = a.kv;
    const std::int64_t d = a.head_dim, n_kv = a.n_kv_heads;
    const std::int64_t chan_bytes = kv.group * B / 8;
    const std::int64_t block_index = (g0 / kv.group) * n_kv + kv_head;
    const std::uint8_t* kc = kv.k_codes + block_index * d * chan_bytes;
    const std::uint8_t* kl = kv.k_lower ? kv.k_lower + block_index * d * chan_bytes : nullptr;
    const std::uint16_t* ks = kv.k_scale + block_index * d;
    const std::uint16_t* kz = kv.k_zero + block_index * d;
    // q . k^ = sum_c q_c z_c + sum_c (q_c s_c) U_ct [+ sum_c (q_c s_c / 16)(L_ct - 8)].
    float ksf[max_head_dim], kzf[max_head_dim];
    for (std::int64_t c = 0; c < d; ++c) {
      ksf[c] = f16_to_f32(ks[c]);
      kzf[c] = f16_to_f32(kz[c]);
    }
    for (std::int64_t h = 0; h < n_h; ++h) {
      head_state& s = heads[h];
      s.base = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        s.qs[c] = s.q[c] * ksf[c];
        s.base += s.q[c] * kzf[c];
        if (kl) s.base -= 8.0f * s.qs[c] / 16.0f;
      }
    }
    float* kt = tiles.k.data();
    float* klt = tiles.kl.data();
    for (std::int64_t t0 = 0; t0 < tokens; t0 += key_block) {
      const std::int64_t tn = std::min(key_block, tokens - t0);
      for (std::int64_t c = 0; c < d; ++c) {
        decode_codes<B>(kc + c * chan_bytes, t0, tn, kt + c * key_block);
        if (kl) decode_codes<4>(kl + c * chan_bytes, t0, tn, klt + c * key_block);
      }
      decode_values(g0 + t0, tn);
      std::int64_t which[2 * key_block];
      const std::int64_t m = rows ? replaced_in(g0 + t0, tn, which) : 0;
      for (std::int64_t h = 0; h < n_h; ++h) {
        head_state& s = heads[h];
        float scores[key_block], p[key_block];
        if (kl)
          code_scores<true>(s.qs, d, kt, klt, s.base, tn, scores);
        else
          code_scores<false>(s.qs, d, kt, klt, s.base, tn, scores);
        for (std::int64_t t = 0; t < tn; ++t) scores[t] *= scale;
        if (m) replaced_scores(s, which, m, scores);
        softmax_block(s, g0 + t0, scores, tn, p);
        if (tiled_values) {
          add_values_tiled(s, which, m, tn, p);
          continue;
        }
        for (std::int64_t t = 0; t < tn; ++t)
          if (!(m && add_row(s, which, m, t, p[t]))) add_packed_value(s, t, p[t]);
      }
    }
  }

  // Value codes of positions j0 .. j0 + jn - 1 into the tiles, [token][channel],
  // and their scales and zeros as f32.
  void decode_values(std::int64_t j0, std::int64_t jn) {
    const packed_kv& kv = a.kv;
    const std::int64_t d = a.head_dim, row_bytes = (d * B + 7) / 8;
    const std::int64_t groups = (d + kv.value_group - 1) / kv.value_group;
    for (std::int64_t t = 0; t < jn; ++t) {
      const std::int64_t row = (j0 + t) * a.n_kv_heads + kv_head;
      decode_codes<B>(kv.v_codes + row * row_bytes, 0, d, tiles.v.data() + t * d);
      if (kv.v_lower) decode_codes<4>(kv.v_lower + row * row_bytes, 0, d, tiles.vl.data() + t * d);
      for (std::int64_t g = 0; g < groups; ++g) {
        tiles.v_scale[std::size_t(t * groups + g)] = f16_to_f32(kv.v_scale[row * groups + g]);
        tiles.v_zero[std::size_t(t * groups + g)] = f16_to_f32(kv.v_zero[row * groups + g]);
      }
    }
  }

  // acc += p (z_g + s_g U_tc [+ (s_g / 16)(L_tc - 8)]) over each value group
  // g of token t of the decoded block.
  void add_packed_value(head_state& s, std::int64_t t, float p) const {
    const packed_kv& kv = a.kv;
    const std::int64_t d = a.head_dim;
    const std::int64_t groups = (d + kv.value_group - 1) / kv.value_group;
    const float* vs = tiles.v_scale.data() + t * groups;
    const float* vz = tiles.v_zero.data() + t * groups;
    const float* vu = tiles.v.data() + t * d;
    const float* vlo = kv.v_lower ? tiles.vl.data() + t * d : nullptr;
    float* acc = s.acc;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * kv.value_group, c1 = std::min(d, c0 + kv.value_group);
      const float ps = p * vs[g];
      float pz = p * vz[g];
      if (vlo) {
        const float pl = ps / 16.0f;
        pz -= 8.0f * pl;
        for (std::int64_t c = c0; c < c1; ++c) acc[c] += pz + ps * vu[c] + pl * vlo[c];
      } else {
        for (std::int64_t c = c0; c < c1; ++c) acc[c] += pz + ps * vu[c];
      }
    }
  }

  // add_packed_value (or add_row for replaced offsets) for every token of
  // the block, a tile of channels at a time with its sums in registers:
  // acc[c] sees the tokens in order, each with the operations of
  // add_packed_value. Needs head_dim and the value group in whole tiles.
  void add_values_tiled(head_state& s, const std::int64_t* which, std::int64_t m, std::int64_t tn,
                        const float* p) const {
    const packed_kv& kv = a.kv;
    const std::int64_t d = a.head_dim;
    const std::int64_t groups = (d + kv.value_group - 1) / kv.value_group;
    // Per token and value group: p s, p z (and p s / 16, p z - 8 p s / 16).
    float ps[key_block * max_head_dim / tile], pz[key_block * max_head_dim / tile],
        pl[key_block * max_head_dim / tile];
    std::int64_t row_of[key_block];  // the replacing row's base, or -1
    for (std::int64_t t = 0; t < tn; ++t) {
      row_of[t] = -1;
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::size_t i = std::size_t(t * groups + g);
        ps[i] = p[t] * tiles.v_scale[i];
        pz[i] = p[t] * tiles.v_zero[i];
        if (kv.v_lower) {
          pl[i] = ps[i] / 16.0f;
          pz[i] -= 8.0f * pl[i];
        }
      }
    }
    for (std::int64_t r = 0; r < m; ++r) row_of[which[2 * r]] = which[2 * r + 1];
    const float* vu = tiles.v.data();
    const float* vlo = tiles.vl.data();
    const bool lower = kv.v_lower != nullptr;
    for (std::int64_t c0 = 0; c0 < d; c0 += tile) {
      const std::int64_t g = c0 / kv.value_group;
      f4 a0 = load4(s.acc + c0), a1 = load4(s.acc + c0 + 4), a2 = load4(s.acc + c0 + 8), a3 = load4(s.acc + c0 + 12);
      for (std::int64_t t = 0; t < tn; ++t) {
        if (row_of[t] >= 0) {
          const std::int64_t base = row_of[t] + c0;
          float x[tile];
          for (int k = 0; k < tile; ++k) x[k] = row_at(rows->v, rows->type, base + k);
          const f4 pt = splat4(p[t]);
          a0 += pt * load4(x);
          a1 += pt * load4(x + 4);
          a2 += pt * load4(x + 8);
          a3 += pt * load4(x + 12);
          continue;
        }
        const std::size_t i = std::size_t(t * groups + g);
        const float* u = vu + t * d + c0;
        const f4 z = splat4(pz[i]), sc = splat4(ps[i]);
        if (lower) {
          const float* l = vlo + t * d + c0;
          const f4 sl = splat4(pl[i]);
          a0 += z + sc * load4(u) + sl * load4(l);
          a1 += z + sc * load4(u + 4) + sl * load4(l + 4);
          a2 += z + sc * load4(u + 8) + sl * load4(l + 8);
          a3 += z + sc * load4(u + 12) + sl * load4(l + 12);
        } else {
          a0 += z + sc * load4(u);
          a1 += z + sc * load4(u + 4);
          a2 += z + sc * load4(u + 8);
          a3 += z + sc * load4(u + 12);
        }
      }
      store4(s.acc + c0, a0);
      store4(s.acc + c0 + 4, a1);
      store4(s.acc + c0 + 8, a2);
      store4(s.acc + c0 + 12, a3);
    }
  }

  void window_block(std::int64_t j0, std::int64_t jn) {
    const std::int64_t d = a.head_dim, stride = a.n_kv_heads * d;
    const float* k = a.win_k + kv_head * d;
    const float* v = a.win_v + kv_head * d;
    const std::int64_t w0 = j0 - a.kv.n_tokens;
    std::int64_t which[2 * key_block];
    const std::int64_t m = rows ? replaced_in(j0, jn, which) : 0;
    for (std::int64_t h = 0; h < n_h; ++h) {
      head_state& s = heads[h];
      float scores[key_block], p[key_block];
      for (std::int64_t j = 0; j < jn; ++j) scores[j] = dot(s.q, k + (w0 + j) * stride, d) * scale;
      if (m) replaced_scores(s, which, m, scores);
      softmax_block(s, j0, scores, jn, p);
      for (std::int64_t j = 0; j < jn; ++j) {
        if (m && add_row(s, which, m, j, p[j])) continue;
        const float* vr = v + (w0 + j) * stride;
        for (std::int64_t i = 0; i < d; ++i) s.acc[i] += p[j] * vr[i];
      }
    }
  }
};

void check(const quantized_attention_args& a, const mixed_rows* rows) {
  const std::string who = rows ? "mixed_attention: " : "quantized_attention: ";
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw std::invalid_argument(who + "n_heads " + std::to_string(a.n_heads) +
                                " is not a positive multiple of n_kv_heads " + std::to_string(a.n_kv_heads));
  if (a.head_dim <= 0 || a.head_dim > max_head_dim)
    throw std::invalid_argument(who + "head_dim " + std::to_string(a.head_dim) + " outside [1, " +
                                std::to_string(max_head_dim) + "]");
  const packed_kv& kv = a.kv;
  if (kv.bits != 1 && kv.bits != 2 && kv.bits != 4)
    throw std::invalid_argument(who + "bits must be 1, 2 or 4, got " + std::to_string(kv.bits));
  if ((kv.k_lower || kv.v_lower) && kv.bits != 4)
    throw std::invalid_argument(who + "a residual plane needs 4-bit upper codes, got " + std::to_string(kv.bits));
  if (bool(kv.k_lower) != bool(kv.v_lower))
    throw std::invalid_argument(who + "keys and values must both have a residual plane or neither");
  if (kv.group <= 0 || (kv.group * kv.bits) % 8 != 0 || kv.value_group <= 0)
    throw std::invalid_argument(who + "group " + std::to_string(kv.group) + " at " + std::to_string(kv.bits) +
                                " bits does not fill whole bytes, or value_group is not positive");
  if (kv.n_tokens < 0 || kv.n_tokens % kv.group != 0)
    throw std::invalid_argument(who + "packed tokens " + std::to_string(kv.n_tokens) +
                                " are not a multiple of the group " + std::to_string(kv.group));
  if (kv.n_tokens > 0 && (!kv.k_codes || !kv.k_scale || !kv.k_zero || !kv.v_codes || !kv.v_scale || !kv.v_zero))
    throw std::invalid_argument(who + "packed codes, scales or zeros missing");
  if (a.win_len < 0 || (a.win_len > 0 && (!a.win_k || !a.win_v)))
    throw std::invalid_argument(who + "window rows missing");
  if (a.pos0 < 0 || kv.n_tokens + a.win_len < a.pos0 + a.n)
    throw std::invalid_argument(who + "queries at positions " + std::to_string(a.pos0) + ".." +
                                std::to_string(a.pos0 + a.n - 1) + " need " + std::to_string(a.pos0 + a.n) +
                                " stored positions, have " + std::to_string(kv.n_tokens + a.win_len));
  if (a.probs && a.probs_stride < a.pos0 + a.n)
    throw std::invalid_argument(who + "probs_stride " + std::to_string(a.probs_stride) + " below the " +
                                std::to_string(a.pos0 + a.n) + " positions of the last query");
  if (!rows) return;
  if (rows->type != dtype::f16 && rows->type != dtype::bf16 && rows->type != dtype::f32)
    throw std::invalid_argument(who + "rows must be f16, bf16 or f32, got " + std::string(dtype_name(rows->type)));
  for (std::int64_t h = 0; h < a.n_kv_heads; ++h) {
    const std::int64_t c = rows->count[h];
    if (c < 0 || c > rows->stride)
      throw std::invalid_argument(who + "KV head " + std::to_string(h) + " has " + std::to_string(c) +
                                  " rows, outside [0, stride " + std::to_string(rows->stride) + "]");
    const std::int64_t* p = rows->positions + h * rows->stride;
    for (std::int64_t r = 0; r < c; ++r)
      if (p[r] < 0 || (r > 0 && p[r] <= p[r - 1]))
        throw std::invalid_argument(who + "KV head " + std::to_string(h) + ": positions must be non-negative "
                                    "and strictly increasing, row " + std::to_string(r) + " is " +
                                    std::to_string(p[r]));
  }
}

// Query heads per work item: the whole GQA group (its codes decoded once)
// unless that leaves fewer items than the pool has threads, then the
// largest divisor of the group that does not. A head's result is the same
// whichever heads share its item.
std::int64_t heads_per_item(std::int64_t n, std::int64_t n_kv_heads, std::int64_t group, thread_pool* pool) {
  const std::int64_t want = std::min<std::int64_t>(pool ? pool->size() : 1, n * n_kv_heads * group);
  std::int64_t hs = group;
  while (hs > 1 && n * n_kv_heads * (group / hs) < want) {
    --hs;
    while (group % hs != 0) --hs;
  }
  return hs;
}

template <int B>
void run_all(const quantized_attention_args& a, const mixed_rows* rows, thread_pool* pool) {
  const std::int64_t group = a.n_heads / a.n_kv_heads;
  const float scale = float(1.0 / std::sqrt(double(a.head_dim)));
  const std::int64_t hs = heads_per_item(a.n, a.n_kv_heads, group, pool), per_kv = group / hs;
  auto body = [&](std::int64_t b, std::int64_t e) {
    // Per thread, grown once (a head's state is 4 KiB: not for the stack).
    thread_local std::vector<head_state> states;
    if (states.size() < std::size_t(hs)) states.resize(std::size_t(hs));
    for (std::int64_t item = b; item < e; ++item) {
      // item -> (query i, KV head g, slice of its query heads).
      const std::int64_t i = item / (a.n_kv_heads * per_kv), rest = item % (a.n_kv_heads * per_kv);
      const std::int64_t g = rest / per_kv, h0 = g * group + (rest % per_kv) * hs;
      for (std::int64_t k = 0; k < hs; ++k) {
        head_state& s = states[std::size_t(k)];
        const std::int64_t h = h0 + k;
        s.q = a.q + i * a.q_stride + h * a.head_dim;
        s.out = a.out + i * a.out_stride + h * a.head_dim;
        s.probs = a.probs ? a.probs + (i * a.n_heads + h) * a.probs_stride : nullptr;
        s.running_max = -std::numeric_limits<float>::infinity();
        s.running_sum = 0;
      }
      group_scan<B> scan{a, rows, g, a.pos0 + i, scale, states.data(), hs};
      scan.run();
    }
  };
  const std::int64_t items = a.n * a.n_kv_heads * per_kv;
  if (pool)
    pool->parallel_for(items, body);
  else
    body(0, items);
}

}  // namespace

void quantized_scan(const quantized_attention_args& in, const mixed_rows* rows, thread_pool* pool) {
  if (in.n <= 0) return;
  check(in, rows);
  quantized_attention_args a = in;
  if (a.q_stride == 0) a.q_stride = a.n_heads * a.head_dim;
  if (a.out_stride == 0) a.out_stride = a.n_heads * a.head_dim;
  switch (a.kv.bits) {
    case 1: run_all<1>(a, rows, pool); break;
    case 2: run_all<2>(a, rows, pool); break;
    default: run_all<4>(a, rows, pool); break;
  }
}

void quantized_attention(const quantized_attention_args& a, thread_pool* pool) { quantized_scan(a, nullptr, pool); }

}  // namespace specpipe::kernels::cpu
