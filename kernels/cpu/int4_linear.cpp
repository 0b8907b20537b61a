#include "kernels/int4_linear.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/thread_pool.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace specpipe::kernels::cpu {

namespace {

constexpr int token_block = 8;
// The largest group accepted (columns per scale).
constexpr std::int64_t max_group = 1024;

// The next f16 towards -inf / +inf of a finite code.
std::uint16_t f16_next_down(std::uint16_t h) {
  if (h & 0x8000u) return std::uint16_t(h + 1);  // more negative
  if ((h & 0x7fffu) == 0) return 0x8001u;        // +0 -> the smallest negative subnormal
  return std::uint16_t(h - 1);
}
std::uint16_t f16_next_up(std::uint16_t h) {
  if ((h & 0x7fffu) == 0) return 0x0001u;  // +-0 -> the smallest positive subnormal
  if (h & 0x8000u) return std::uint16_t(h - 1);
  return std::uint16_t(h + 1);
}
// Nearest f16 at or below (above) v.
std::uint16_t f16_at_or_below(float v) {
  std::uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) > v) h = f16_next_down(h);
  return h;
}
std::uint16_t f16_at_or_above(float v) {
  std::uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) h = f16_next_up(h);
  return h;
}

template <class L>
void quantize_rows(const typename L::storage* w, std::int64_t w_stride, std::int64_t r0, std::int64_t r1,
                   int4_weights& q) {
  const std::int64_t groups = (q.in + q.group - 1) / q.group;
  for (std::int64_t r = r0; r < r1; ++r) {
    const auto* row = w + r * w_stride;
    std::uint8_t* codes = q.codes.data() + r * q.code_stride;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * q.group, c1 = std::min(q.in, c0 + q.group);
      float lo = L::load(row[c0]), hi = lo;
      for (std::int64_t c = c0 + 1; c < c1; ++c) {
        const float v = L::load(row[c]);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      // Zero rounded down, then the scale that reaches max from it, rounded
      // up: [z, z + 15 s] covers [min, max] with the stored values.
      const std::uint16_t zh = f16_at_or_below(lo);
      const float z = f16_to_f32(zh);
      const std::uint16_t sh = f16_at_or_above((hi - z) / 15.0f);
      const float s = f16_to_f32(sh);
      q.zero[std::size_t(r * groups + g)] = zh;
      q.scale[std::size_t(r * groups + g)] = sh;
      for (std::int64_t c = c0; c < c1; ++c) {
        // Round half up; a zero scale (an f16-exact constant group) codes 0.
        const float t = s > 0 ? std::floor((L::load(row[c]) - z) / s + 0.5f) : 0.0f;
        const auto code = std::uint8_t(std::clamp(t, 0.0f, 15.0f));
        codes[c / 2] |= std::uint8_t(code << ((c & 1) * 4));
      }
    }
  }
}

void check_matrix(const int4_matrix& m, const char* who) {
  if (m.empty() || !m.scale || !m.zero)
    throw std::invalid_argument(std::string(who) + ": the packed matrix has no codes, scales or zeros");
  if (m.out <= 0 || m.in <= 0 || m.group <= 0 || m.group % 2 != 0)
    throw std::invalid_argument(std::string(who) + ": bad packed shape out=" + std::to_string(m.out) + " in=" +
                                std::to_string(m.in) + " group=" + std::to_string(m.group) +
                                " (sizes positive, group even)");
  if (m.code_stride < (m.in + 1) / 2)
    throw std::invalid_argument(std::string(who) + ": code_stride " + std::to_string(m.code_stride) +
                                " bytes is shorter than a row of " + std::to_string(m.in) + " 4-bit codes");
}

// Per call, per token: x split into even and odd columns (the low and high
// nibbles of a byte) and its sum over each group, shared read-only by the
// pool's threads.
struct prepared_x {
  std::int64_t half = 0, groups = 0;
  std::vector<float> even, odd, group_sum;  // [n][half], [n][half], [n][groups]
};

void prepare(const int4_linear_args& a, prepared_x& p) {
  const int4_matrix& m = a.w;
  p.half = (m.in + 1) / 2;
  p.groups = m.groups();
  p.even.assign(std::size_t(a.n * p.half), 0.0f);
  p.odd.assign(std::size_t(a.n * p.half), 0.0f);
  p.group_sum.assign(std::size_t(a.n * p.groups), 0.0f);
  for (std::int64_t t = 0; t < a.n; ++t) {
    const float* x = a.x + t * a.x_stride;
    float* e = p.even.data() + t * p.half;
    float* o = p.odd.data() + t * p.half;
    for (std::int64_t c = 0; c < m.in; ++c) (c & 1 ? o : e)[c / 2] = x[c];
    float* gs = p.group_sum.data() + t * p.groups;
    for (std::int64_t g = 0; g < p.groups; ++g) {
      float s = 0;
      for (std::int64_t c = g * m.group, end = std::min(m.in, c + m.group); c < end; ++c) s += x[c];
      gs[g] = s;
    }
  }
}

// sum_j e[j] * lo(b[j]) + o[j] * hi(b[j]) over a group's nb code bytes: the
// group's sum(x * q) for one token. Sixteen bytes (32 codes) per step into
// four 4-lane accumulators, combined as ((a0 + a2) + (a1 + a3)) and then
// lanes (0 + 2) + (1 + 3); a tail of fewer than 16 bytes is summed apart and
// added last. With SSE2 (the x86-64 baseline) the nibbles are split and
// widened to 32-bit lanes by unpacking against zero, which g++ does not
// find on its own (it widens bytes one by one); elsewhere the same sums in
// the same order, in scalar code.
#if defined(__SSE2__)
inline float group_dot(const std::uint8_t* b, const float* e, const float* o, std::int64_t nb) {
  const __m128i mask = _mm_set1_epi8(15), zero = _mm_setzero_si128();
  __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  std::int64_t j = 0;
  for (; j + 16 <= nb; j += 16) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + j));
    const __m128i lo = _mm_and_si128(c, mask), hi = _mm_and_si128(_mm_srli_epi16(c, 4), mask);
    const __m128i lo16[2] = {_mm_unpacklo_epi8(lo, zero), _mm_unpackhi_epi8(lo, zero)};
    const __m128i hi16[2] = {_mm_unpacklo_epi8(hi, zero), _mm_unpackhi_epi8(hi, zero)};
    for (int q = 0; q < 4; ++q) {
      const __m128i l32 = q % 2 ? _mm_unpackhi_epi16(lo16[q / 2], zero) : _mm_unpacklo_epi16(lo16[q / 2], zero);
      const __m128i h32 = q % 2 ? _mm_unpackhi_epi16(hi16[q / 2], zero) : _mm_unpacklo_epi16(hi16[q / 2], zero);
      const __m128 t = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(e + j + 4 * q), _mm_cvtepi32_ps(l32)),
                                  _mm_mul_ps(_mm_loadu_ps(o + j + 4 * q), _mm_cvtepi32_ps(h32)));
      acc[q] = _mm_add_ps(acc[q], t);
    }
  }
  float tail = 0;
  for (; j < nb; ++j) tail += e[j] * float(b[j] & 15u) + o[j] * float(b[j] >> 4);
  alignas(16) float s[4];
  _mm_store_ps(s, _mm_add_ps(_mm_add_ps(acc[0], acc[2]), _mm_add_ps(acc[1], acc[3])));
  return ((s[0] + s[2]) + (s[1] + s[3])) + tail;
}
#else
inline float group_dot(const std::uint8_t* b, const float* e, const float* o, std::int64_t nb) {
  float acc[4][4] = {};
  std::int64_t j = 0;
  for (; j + 16 <= nb; j += 16)
    for (int q = 0; q < 4; ++q)
      for (int k = 0; k < 4; ++k) {
        const std::int64_t i = j + 4 * q + k;
        acc[q][k] = acc[q][k] + (e[i] * float(b[i] & 15u) + o[i] * float(b[i] >> 4));
      }
  float tail = 0;
  for (; j < nb; ++j) tail += e[j] * float(b[j] & 15u) + o[j] * float(b[j] >> 4);
  float s[4];
  for (int k = 0; k < 4; ++k) s[k] = (acc[0][k] + acc[2][k]) + (acc[1][k] + acc[3][k]);
  return ((s[0] + s[2]) + (s[1] + s[3])) + tail;
}
#endif

void rows_single_token(const int4_linear_args& a, const prepared_x& p, std::int64_t r0, std::int64_t r1) {
  const int4_matrix& m = a.w;
  const std::int64_t gb = m.group / 2;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* codes = m.codes + r * m.code_stride;
    const std::uint16_t* sc = m.scale + r * p.groups;
    const std::uint16_t* zr = m.zero + r * p.groups;
    float y = 0;
    for (std::int64_t g = 0; g < p.groups; ++g) {
      const std::int64_t j0 = g * gb, nb = std::min(p.half, j0 + gb) - j0;
      const float sq = group_dot(codes + j0, p.even.data() + j0, p.odd.data() + j0, nb);
      y += f16_to_f32(zr[g]) * p.group_sum[std::size_t(g)] + f16_to_f32(sc[g]) * sq;
    }
    a.y[r] = y;
  }
}

void rows_token_block(const int4_linear_args& a, const prepared_x& p, std::int64_t r0, std::int64_t r1,
                      std::int64_t t0, int nt) {
  const int4_matrix& m = a.w;
  const std::int64_t gb = m.group / 2;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* codes = m.codes + r * m.code_stride;
    const std::uint16_t* sc = m.scale + r * p.groups;
    const std::uint16_t* zr = m.zero + r * p.groups;
    float y[token_block] = {};
    for (std::int64_t g = 0; g < p.groups; ++g) {
      const std::int64_t j0 = g * gb, nb = std::min(p.half, j0 + gb) - j0;
      const float z = f16_to_f32(zr[g]), s = f16_to_f32(sc[g]);
      for (int t = 0; t < nt; ++t) {
        const std::int64_t tok = t0 + t;
        // The codes are re-read per token (from L1): the same sums as a token alone.
        const float sq = group_dot(codes + j0, p.even.data() + tok * p.half + j0,
                                   p.odd.data() + tok * p.half + j0, nb);
        y[t] += z * p.group_sum[std::size_t(tok * p.groups + g)] + s * sq;
      }
    }
    for (int t = 0; t < nt; ++t) a.y[(t0 + t) * a.y_stride + r] = y[t];
  }
}

}  // namespace

std::int64_t int4_code_stride(std::int64_t in) { return ((in + 1) / 2 + 15) / 16 * 16; }

std::size_t int4_bytes(std::int64_t out, std::int64_t in, std::int64_t group) {
  const std::int64_t groups = (in + group - 1) / group;
  return std::size_t(out * int4_code_stride(in) + out * groups * 2 * 2);
}

int4_matrix int4_weights::view() const {
  int4_matrix m;
  m.codes = codes.data();
  m.scale = scale.data();
  m.zero = zero.data();
  m.out = out;
  m.in = in;
  m.group = group;
  m.code_stride = code_stride;
  return m;
}

int4_weights quantize_int4(const void* w, dtype w_type, std::int64_t out, std::int64_t in, std::int64_t w_stride,
                           std::int64_t group, thread_pool* pool) {
  if (out <= 0 || in <= 0)
    throw std::invalid_argument("quantize_int4: bad shape [" + std::to_string(out) + ", " + std::to_string(in) + "]");
  if (group <= 0 || group % 2 != 0 || group > max_group)
    throw std::invalid_argument("quantize_int4: group must be even and in [2, " + std::to_string(max_group) +
                                "], got " + std::to_string(group));
  if (w_stride == 0) w_stride = in;
  if (w_stride < in)
    throw std::invalid_argument("quantize_int4: row stride " + std::to_string(w_stride) + " is shorter than the row (" +
                                std::to_string(in) + ")");
  if (!w) throw std::invalid_argument("quantize_int4: no weights given");
  int4_weights q;
  q.out = out;
  q.in = in;
  q.group = group;
  q.code_stride = int4_code_stride(in);
  const std::int64_t groups = (in + group - 1) / group;
  q.codes.assign(std::size_t(out * q.code_stride), 0);
  q.scale.assign(std::size_t(out * groups), 0);
  q.zero.assign(q.scale.size(), 0);
  dispatch_float_dtype(w_type, "quantize_int4 weight", [&](auto loader) {
    using L = decltype(loader);
    const auto* src = static_cast<const typename L::storage*>(w);
    auto body = [&](std::int64_t r0, std::int64_t r1) { quantize_rows<L>(src, w_stride, r0, r1, q); };
    if (pool)
      pool->parallel_for(out, body, std::max<std::int64_t>(1, 4096 / in));
    else
      body(0, out);
  });
  return q;
}

void dequantize_int4_row(const int4_matrix& m, std::int64_t row, float* out) {
  check_matrix(m, "dequantize_int4_row");
  if (row < 0 || row >= m.out)
    throw std::invalid_argument("dequantize_int4_row: row " + std::to_string(row) + " outside [0, " +
                                std::to_string(m.out) + ")");
  const std::int64_t groups = m.groups();
  const std::uint8_t* codes = m.codes + row * m.code_stride;
  for (std::int64_t c = 0; c < m.in; ++c) {
    const std::int64_t g = c / m.group;
    const unsigned q = (codes[c / 2] >> ((c & 1) * 4)) & 15u;
    out[c] = f16_to_f32(m.zero[row * groups + g]) + f16_to_f32(m.scale[row * groups + g]) * float(q);
  }
}

void int4_linear(const int4_linear_args& in_args, thread_pool* pool) {
  int4_linear_args a = in_args;
  check_matrix(a.w, "int4_linear");
  if (a.w.group > max_group)
    throw std::invalid_argument("int4_linear: group " + std::to_string(a.w.group) + " exceeds " +
                                std::to_string(max_group));
  if (a.n < 0) throw std::invalid_argument("int4_linear: negative token count");
  if (a.x_stride == 0) a.x_stride = a.w.in;
  if (a.y_stride == 0) a.y_stride = a.w.out;
  if (a.x_stride < a.w.in || a.y_stride < a.w.out)
    throw std::invalid_argument("int4_linear: a row stride is shorter than its row");
  if (a.n == 0) return;
  // Grows to the largest call and stays: decode steps allocate nothing. The
  // pool's threads must read the caller's copy, so they get it by reference
  // (a lambda naming a thread_local would see its own thread's instance).
  thread_local prepared_x caller_x;
  prepared_x& p = caller_x;
  prepare(a, p);
  const std::int64_t min_rows = std::max<std::int64_t>(1, 32768 / a.w.in);
  auto body = [&](std::int64_t r0, std::int64_t r1) {
    if (a.n == 1) {
      rows_single_token(a, p, r0, r1);
      return;
    }
    for (std::int64_t t0 = 0; t0 < a.n; t0 += token_block)
      rows_token_block(a, p, r0, r1, t0, int(std::min<std::int64_t>(token_block, a.n - t0)));
  };
  if (pool)
    pool->parallel_for(a.w.out, body, min_rows);
  else
    body(0, a.w.out);
}

}  // namespace specpipe::kernels::cpu
