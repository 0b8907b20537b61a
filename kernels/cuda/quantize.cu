// Quantize-and-pack on the GPU (see quantize.hpp): two blocks per (group,
// KV head, entry), one for the keys and one for the values. Keys: a thread per channel finds the channel's min and
// max over the group's G tokens and writes that channel's G-code stream;
// values: a thread per (token, value group) does the same along the row.
// Arithmetic mirrors kernels/cpu/quantize.cpp operation by operation (no
// FMA contraction), so the codes are the CPU's bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <type_traits>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quantize.hpp"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda {
namespace {

constexpr int threads = 256;  // 8 warps: the byte loops are chains of f32 divisions

__device__ __forceinline__ float bf(const std::uint16_t* p) { return __bfloat162float(__ushort_as_bfloat16(*p)); }
using detail::h2f;
__device__ __forceinline__ std::uint16_t f2h(float x) { return __half_as_ushort(__float2half_rn(x)); }

// std::min / std::max exactly (which of two equal values, e.g. -0 and +0,
// is kept decides the zero point's f16 bits).
__device__ __forceinline__ float min_like_std(float a, float b) { return b < a ? b : a; }
__device__ __forceinline__ float max_like_std(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float clamp_like_std(float v, float lo, float hi) { return v < lo ? lo : hi < v ? hi : v; }

struct group_params {
  float s16, z16;
  std::uint16_t s_bits, z_bits;
};

// cpu::quantize_run's scale and zero from a group's min and max.
__device__ __forceinline__ group_params params_of(float lo, float hi, int levels, quant_rule_gpu rule) {
  float s, z;
  if (rule == quant_rule_gpu::specache) {
    z = __fdiv_rn(__fadd_rn(__fmul_rn(3.f, lo), hi), 4.f);  // (3 min + max) / 4, SpeCache sec. 3.2
    s = __fdiv_rn(__fsub_rn(hi, lo), 2.f);
  } else {
    z = lo;
    s = __fdiv_rn(__fsub_rn(hi, lo), float(levels));
  }
  group_params p;
  p.s_bits = f2h(s);
  p.z_bits = f2h(z);
  p.s16 = h2f(p.s_bits);
  p.z16 = h2f(p.z_bits);
  return p;
}

// Upper code and (hier) lower code of one value: cpu::quantize_run's loop body.
__device__ __forceinline__ void codes_of(float v, const group_params& p, int levels, bool lower, unsigned& u,
                                         unsigned& l) {
  float uf = 0.f;
  if (p.s16 > 0.f) uf = clamp_like_std(rintf(__fdiv_rn(__fsub_rn(v, p.z16), p.s16)), 0.f, float(levels));
  u = unsigned(uf);
  l = 0;
  if (lower) {
    // QuantSpec's residual: r = x - (min + U s), L = clamp(round(r / (s/16)), -8, 7) + 8.
    const float r = __fsub_rn(v, __fadd_rn(p.z16, __fmul_rn(uf, p.s16)));
    const float step = __fdiv_rn(p.s16, 16.f);
    const float lf = p.s16 > 0.f ? clamp_like_std(rintf(__fdiv_rn(r, step)), -8.f, 7.f) : 0.f;
    l = unsigned(lf + 8.f);
  }
}

// Appends `bits` of code to a little-endian bit stream in bytes.
struct bit_writer {
  std::uint8_t* out;
  unsigned acc = 0;
  int nb = 0;
  __device__ void put(unsigned code, int bits) {
    acc |= code << nb;
    nb += bits;
    if (nb == 8) {
      *out++ = std::uint8_t(acc);
      acc = 0;
      nb = 0;
    }
  }
};

// The lane-order path (packed_lane_order.hpp; head_dim 128) reads a group's
// G source rows of one tensor once, into shared memory, and works there. A
// row's place in the source ring is an int64 remainder: the first version
// took one per code read straight from global memory (two-byte loads, two
// to four per byte written), ~200 us a layer for one group of 32 heads.
constexpr int max_group = 128;                       // G <= 128 (check_shape)
constexpr int row_pitch = lane_order::head_dim + 8;  // elements: rows 16-byte aligned, a column's rows on 8 banks

struct lane_scratch {
  std::uint16_t rows[max_group * row_pitch];  // the group's rows of K or of V, bf16
  std::int64_t offset[max_group];             // row t's element offset in the source
  float scale[lane_order::head_dim], zero[lane_order::head_dim];  // per key channel or per (token, value group)
};

// Rows p0 .. p0 + G - 1 of `base` (row_source addressing) into s.rows, 16
// bytes at a time where the source allows it.
__device__ void stage_rows(const std::uint16_t* base, const row_source& src, std::int64_t src_base, std::int64_t p0,
                           int G, lane_scratch& s) {
  constexpr int D = lane_order::head_dim;
  for (int t = threadIdx.x; t < G; t += threads) s.offset[t] = src_base + ((p0 + t) % src.ring) * src.row_stride;
  __syncthreads();
  const bool vec = (reinterpret_cast<std::uintptr_t>(base) & 15) == 0 && src_base % 8 == 0 && src.row_stride % 8 == 0;
  if (vec) {
    for (int i = threadIdx.x; i < G * (D / 8); i += threads) {
      const int t = i / (D / 8), j = i - t * (D / 8);
      *reinterpret_cast<uint4*>(s.rows + t * row_pitch + 8 * j) =
          *reinterpret_cast<const uint4*>(base + s.offset[t] + 8 * j);
    }
  } else {
    for (int i = threadIdx.x; i < G * D; i += threads) {
      const int t = i / D, c = i - t * D;
      s.rows[t * row_pitch + c] = base[s.offset[t] + c];
    }
  }
  __syncthreads();
}

__device__ __forceinline__ float bf_bits(unsigned b16) { return __uint_as_float(b16 << 16); }

// One group's keys in lane order: the same scales, zeros and codes as the
// CPU order, placed where the v4 attention's lanes read them. A thread per
// channel finds its min and max over the G rows (in token order, as the
// CPU), then a thread per output byte assembles its 8 / b codes, so that no
// two threads share a byte.
__device__ void quantize_keys_lane_order(const quantize_args& a, int slot, int h, int q, std::int64_t src_base,
                                         lane_scratch& s) {
  namespace lo = lane_order;
  constexpr int D = lo::head_dim;
  const int G = a.group, b = a.bits;
  const int levels = (1 << b) - 1;
  const bool lower = a.rule == quant_rule_gpu::hier;
  const std::int64_t p0 = std::int64_t(q) * G;
  const packed_dest& d = a.dst;
  stage_rows(a.src.k, a.src, src_base, p0, G, s);

  const std::int64_t ksc = std::int64_t(slot) * d.ks_slot + std::int64_t(h) * d.ks_head + std::int64_t(q) * d.ks_group;
  for (int c = threadIdx.x; c < D; c += threads) {
    float lo_v = bf_bits(s.rows[c]), hi_v = lo_v;
    for (int t = 1; t < G; ++t) {
      const float v = bf_bits(s.rows[t * row_pitch + c]);
      lo_v = min_like_std(lo_v, v);
      hi_v = max_like_std(hi_v, v);
    }
    const group_params p = params_of(lo_v, hi_v, levels, a.rule);
    d.k_scale[ksc + c] = p.s_bits;
    d.k_zero[ksc + c] = p.z_bits;
    s.scale[c] = p.s16;
    s.zero[c] = p.z16;
  }
  __syncthreads();

  // G rows of 16 b bytes.
  const int per_byte = 8 / b;
  const std::int64_t kblock = std::int64_t(slot) * d.k_slot + std::int64_t(h) * d.k_head + std::int64_t(q) * d.k_group;
  const int rowb = lo::key_row_bytes(b);
  group_params kp;
  for (int y = threadIdx.x; y < G * rowb; y += threads) {
    const int tau = y / rowb, yb = y - tau * rowb;
    const std::uint16_t* x = s.rows + tau * row_pitch;
    unsigned bu = 0, bl = 0;
    for (int k = 0; k < per_byte; ++k) {
      const int c = lo::key_channel_at(yb, k, b);
      kp.s16 = s.scale[c];
      kp.z16 = s.zero[c];
      unsigned u, l;
      codes_of(bf_bits(x[c]), kp, levels, lower, u, l);
      bu |= u << (k * b);
      bl |= l << (k * b);  // hier: b = 4, the lower plane in the upper's order
    }
    d.k_codes[kblock + y] = std::uint8_t(bu);
    if (lower) d.k_lower[kblock + y] = std::uint8_t(bl);
  }
}

// One group's values in lane order: a thread per (token, value group) finds
// the min and max along its row (16 bytes of the row at a time, each in
// channel order), then a thread per output byte as for the keys.
__device__ void quantize_values_lane_order(const quantize_args& a, int slot, int h, int q, std::int64_t src_base,
                                           lane_scratch& s) {
  namespace lo = lane_order;
  constexpr int D = lo::head_dim;
  const int G = a.group, b = a.bits;
  const int levels = (1 << b) - 1;
  const bool lower = a.rule == quant_rule_gpu::hier;
  const std::int64_t p0 = std::int64_t(q) * G;
  const packed_dest& d = a.dst;
  const int vg_size = G < D ? G : D, ngroups = D / vg_size;  // vg_size: a multiple of 16 (G >= 16)
  stage_rows(a.src.v, a.src, src_base, p0, G, s);

  for (int item = threadIdx.x; item < G * ngroups; item += threads) {
    const int t = item / ngroups, vg = item - t * ngroups;
    const std::uint16_t* x = s.rows + t * row_pitch + vg * vg_size;
    float lo_v = bf_bits(x[0]), hi_v = lo_v;
    for (int j = 0; j < vg_size; j += 8) {
      const uint4 w = *reinterpret_cast<const uint4*>(x + j);
      const unsigned ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (j + i == 0) continue;
        const float v = bf_bits((ws[i / 2] >> (16 * (i % 2))) & 0xffffu);
        lo_v = min_like_std(lo_v, v);
        hi_v = max_like_std(hi_v, v);
      }
    }
    const group_params p = params_of(lo_v, hi_v, levels, a.rule);
    const std::int64_t vs = std::int64_t(slot) * d.vs_slot + std::int64_t(h) * d.vs_head + (p0 + t) * d.vs_token + vg;
    d.v_scale[vs] = p.s_bits;
    d.v_zero[vs] = p.z_bits;
    s.scale[item] = p.s16;
    s.zero[item] = p.z16;
  }
  __syncthreads();

  // G / 16 blocks of 256 b bytes.
  const int per_byte = 8 / b;
  const std::int64_t vrow0 = std::int64_t(slot) * d.v_slot + std::int64_t(h) * d.v_head + p0 * d.v_token;
  const int blockb = lo::value_block_bytes(b);
  group_params vp;
  for (int y = threadIdx.x; y < (G / 16) * blockb; y += threads) {
    const int blk = y / blockb, yb = y - blk * blockb;
    unsigned bu = 0, bl = 0;
    for (int k = 0; k < per_byte; ++k) {
      const int at = lo::value_at(yb, k, b);
      const int tau = 16 * blk + at / D, c = at % D;
      const int item = tau * ngroups + c / vg_size;
      vp.s16 = s.scale[item];
      vp.z16 = s.zero[item];
      unsigned u, l;
      codes_of(bf_bits(s.rows[tau * row_pitch + c]), vp, levels, lower, u, l);
      bu |= u << (k * b);
      bl |= l << (k * b);
    }
    d.v_codes[vrow0 + y] = std::uint8_t(bu);
    if (lower) d.v_lower[vrow0 + y] = std::uint8_t(bl);
  }
}

// Block (2 g + part, head, layer * entries + entry): part 0 writes group
// g's keys, part 1 its values (the two share nothing), so a step's single
// group per head is two blocks' work, not one's.
__global__ void __launch_bounds__(threads) quantize_groups_kernel(quantize_args a) {
  detail::grid_dependency_wait();
  detail::allow_dependent_launch();  // what follows (RoPE) waits for this kernel to finish
  const int gi = blockIdx.x >> 1, part = blockIdx.x & 1, h = blockIdx.y;
  const int e = int(blockIdx.z) % a.entries, layer = int(blockIdx.z) / a.entries;
  if (gi >= a.entry_groups[e]) return;
  if (layer > 0) {  // this layer's rows and arrays
    const std::int64_t se = layer * a.src_layer, db = layer * a.dst_layer;
    a.src.k += se;
    a.src.v += se;
    packed_dest& d = a.dst;
    const auto move = [db](auto*& p) {
      if (p) p = reinterpret_cast<std::remove_reference_t<decltype(p)>>(reinterpret_cast<std::uint8_t*>(p) + db);
    };
    move(d.k_codes);
    move(d.k_lower);
    move(d.k_scale);
    move(d.k_zero);
    move(d.v_codes);
    move(d.v_lower);
    move(d.v_scale);
    move(d.v_zero);
  }
  const int slot = a.entry_slot[e];
  const int q = a.entry_first_group[e] + gi;  // group index in the slot
  const int G = a.group, D = a.head_dim, b = a.bits;
  const int levels = (1 << b) - 1;
  const bool lower = a.rule == quant_rule_gpu::hier;
  const std::int64_t p0 = std::int64_t(q) * G;
  const row_source& src = a.src;
  const std::int64_t src_base = std::int64_t(slot) * src.slot_stride + std::int64_t(h) * src.head_stride;
  auto row = [&](const std::uint16_t* base, std::int64_t p) { return base + src_base + (p % src.ring) * src.row_stride; };
  const packed_dest& d = a.dst;

  if (d.order == packed_order::lane) {
    __shared__ lane_scratch scratch;
    if (part == 0)
      quantize_keys_lane_order(a, slot, h, q, src_base, scratch);
    else
      quantize_values_lane_order(a, slot, h, q, src_base, scratch);
    return;
  }

  if (part == 0) {
    // Keys: per channel over the group's tokens (KIVI sec. 3).
    const std::int64_t kblock = std::int64_t(slot) * d.k_slot + std::int64_t(h) * d.k_head + std::int64_t(q) * d.k_group;
    const std::int64_t ksc = std::int64_t(slot) * d.ks_slot + std::int64_t(h) * d.ks_head + std::int64_t(q) * d.ks_group;
    const int chan = G * b / 8;
    for (int c = threadIdx.x; c < D; c += threads) {
      float lo = bf(row(a.src.k, p0) + c), hi = lo;
      for (int t = 1; t < G; ++t) {
        const float v = bf(row(a.src.k, p0 + t) + c);
        lo = min_like_std(lo, v);
        hi = max_like_std(hi, v);
      }
      const group_params p = params_of(lo, hi, levels, a.rule);
      d.k_scale[ksc + c] = p.s_bits;
      d.k_zero[ksc + c] = p.z_bits;
      bit_writer wu{d.k_codes + kblock + std::int64_t(c) * chan};
      bit_writer wl{lower ? d.k_lower + kblock + std::int64_t(c) * chan : nullptr};
      for (int t = 0; t < G; ++t) {
        unsigned u, l;
        codes_of(bf(row(a.src.k, p0 + t) + c), p, levels, lower, u, l);
        wu.put(u, b);
        if (lower) wl.put(l, 4);
      }
    }
    return;
  }

  // Values: per token over groups of min(G, D) channels.
  const int vg_size = G < D ? G : D, ngroups = D / vg_size;
  for (int item = threadIdx.x; item < G * ngroups; item += threads) {
    const int t = item / ngroups, vg = item - t * ngroups;
    const std::uint16_t* x = row(a.src.v, p0 + t) + vg * vg_size;
    float lo = bf(x), hi = lo;
    for (int i = 1; i < vg_size; ++i) {
      const float v = bf(x + i);
      lo = min_like_std(lo, v);
      hi = max_like_std(hi, v);
    }
    const group_params p = params_of(lo, hi, levels, a.rule);
    const std::int64_t vs = std::int64_t(slot) * d.vs_slot + std::int64_t(h) * d.vs_head + (p0 + t) * d.vs_token + vg;
    d.v_scale[vs] = p.s_bits;
    d.v_zero[vs] = p.z_bits;
    const std::int64_t vrow = std::int64_t(slot) * d.v_slot + std::int64_t(h) * d.v_head + (p0 + t) * d.v_token;
    const int byte0 = vg * vg_size * b / 8;
    bit_writer wu{d.v_codes + vrow + byte0};
    bit_writer wl{lower ? d.v_lower + vrow + byte0 : nullptr};
    for (int i = 0; i < vg_size; ++i) {
      unsigned u, l;
      codes_of(bf(x + i), p, levels, lower, u, l);
      wu.put(u, b);
      if (lower) wl.put(l, 4);
    }
  }
}

__global__ void copy_rows_kernel(row_copy_args a) {
  const int r = blockIdx.x, h = blockIdx.y, e = blockIdx.z;
  if (r >= a.entry_count[e]) return;
  const std::int64_t p = std::int64_t(a.entry_first[e]) + r;
  const int slot = a.entry_slot[e];
  const std::int64_t from = std::int64_t(slot) * a.from.slot_stride + std::int64_t(h) * a.from.head_stride +
                            (p % a.from.ring) * a.from.row_stride;
  const std::int64_t to = std::int64_t(slot) * a.to_slot_stride + std::int64_t(h) * a.to_head_stride +
                          (p % a.to_ring) * a.to_row_stride;
  for (int i = threadIdx.x; i < a.head_dim; i += blockDim.x) {
    a.to_k[to + i] = a.from.k[from + i];
    a.to_v[to + i] = a.from.v[from + i];
  }
}

__device__ __forceinline__ unsigned code_at(const std::uint8_t* stream, int i, int bits) {
  const int bit = i * bits;
  return (unsigned(stream[bit >> 3]) >> (bit & 7)) & ((1u << bits) - 1u);
}

// One block per (group, head): keys channel-major, values per token.
__global__ void dequantize_rows_kernel(dequantize_args a) {
  const int q = blockIdx.x, h = blockIdx.y;
  const int G = a.group, D = a.head_dim, b = a.bits;
  const packed_dest& d = a.src;
  const std::int64_t kblock = std::int64_t(a.slot) * d.k_slot + std::int64_t(h) * d.k_head + std::int64_t(q) * d.k_group;
  const std::int64_t ksc = std::int64_t(a.slot) * d.ks_slot + std::int64_t(h) * d.ks_head + std::int64_t(q) * d.ks_group;
  const int chan = G * b / 8;
  const int vg_size = G < D ? G : D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int t = i / D, c = i - t * D;
    const std::int64_t p = std::int64_t(q) * G + t;
    // Key: channel c, token t of the block.
    const float ks = h2f(d.k_scale[ksc + c]), kz = h2f(d.k_zero[ksc + c]);
    const bool lane = d.order == packed_order::lane;
    const unsigned ku = lane ? lane_order::key_code(d.k_codes + kblock, t, c, b)
                             : code_at(d.k_codes + kblock + std::int64_t(c) * chan, t, b);
    float kv = kz + ks * float(ku);
    if (a.lower) {
      const unsigned kl = lane ? lane_order::key_code(d.k_lower + kblock, t, c, 4)
                               : code_at(d.k_lower + kblock + std::int64_t(c) * chan, t, 4);
      kv += ks * (float(kl) - 8.f) / 16.f;
    }
    // Value: token t, channel c.
    const std::int64_t vrow = std::int64_t(a.slot) * d.v_slot + std::int64_t(h) * d.v_head + p * d.v_token;
    const std::int64_t vs = std::int64_t(a.slot) * d.vs_slot + std::int64_t(h) * d.vs_head + p * d.vs_token + c / vg_size;
    const float vsc = h2f(d.v_scale[vs]), vz = h2f(d.v_zero[vs]);
    // Lane order: the run's blocks start at position 0 (vrow - p * v_token).
    const std::int64_t vrun = vrow - p * d.v_token;
    const unsigned vu = lane ? lane_order::value_code(d.v_codes + vrun, p, c, b) : code_at(d.v_codes + vrow, c, b);
    float vv = vz + vsc * float(vu);
    if (a.lower) {
      const unsigned vl = lane ? lane_order::value_code(d.v_lower + vrun, p, c, 4) : code_at(d.v_lower + vrow, c, 4);
      vv += vsc * (float(vl) - 8.f) / 16.f;
    }
    const std::int64_t at = std::int64_t(h) * a.to_head_stride + p * a.to_row_stride + c;
    a.to_k[at] = __bfloat16_as_ushort(__float2bfloat16(kv));
    a.to_v[at] = __bfloat16_as_ushort(__float2bfloat16(vv));
  }
}

void fail(const std::string& who, const std::string& what) { throw std::invalid_argument(who + ": " + what); }

void check_shape(const char* who, int bits, int group, int head_dim, int n_kv_heads) {
  if (bits != 1 && bits != 2 && bits != 4) fail(who, "bits must be 1, 2 or 4, got " + std::to_string(bits));
  if (group < 8 || group > 128 || (group & (group - 1)) != 0)
    fail(who, "group " + std::to_string(group) + " is not a power of two in [8, 128]");
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
    fail(who, "head_dim " + std::to_string(head_dim) + " is not a multiple of 8 in [8, 256]");
  const int vg = group < head_dim ? group : head_dim;
  if (head_dim % vg != 0) fail(who, "head_dim must be a multiple of the value group " + std::to_string(vg));
  if (n_kv_heads < 1) fail(who, "n_kv_heads must be >= 1");
}

}  // namespace

void quantize_groups(const quantize_args& a, stream_t s) {
  if (a.entries <= 0 || a.max_groups <= 0) return;
  const char* who = "quantize_groups";
  check_shape(who, a.bits, a.group, a.head_dim, a.n_kv_heads);
  if (a.layers < 1 || std::int64_t(a.entries) * a.layers > 65535)
    fail(who, "layers must be >= 1 with entries x layers <= 65535, got " + std::to_string(a.layers) + " layers of " +
                  std::to_string(a.entries) + " entries");
  if (a.layers > 1 && (a.src_layer <= 0 || a.dst_layer <= 0 || a.dst_layer % 2 != 0))
    fail(who, "several layers need positive layer strides (dst_layer an even byte count), got src_layer " +
                  std::to_string(a.src_layer) + ", dst_layer " + std::to_string(a.dst_layer));
  const bool hier = a.rule == quant_rule_gpu::hier;
  if ((a.rule == quant_rule_gpu::specache && a.bits != 1) || (hier && a.bits != 4))
    fail(who, std::to_string(a.bits) + " bits do not fit the rule");
  if (hier != (a.dst.k_lower != nullptr && a.dst.v_lower != nullptr))
    fail(who, "the lower planes are given iff the rule is hier");
  if (!a.src.k || !a.src.v || !a.dst.k_codes || !a.dst.k_scale || !a.dst.k_zero || !a.dst.v_codes ||
      !a.dst.v_scale || !a.dst.v_zero)
    fail(who, "source rows and packed arrays must be given");
  if (!a.entry_slot || !a.entry_first_group || !a.entry_groups) fail(who, "per-entry arrays missing");
  if (a.src.ring < 1) fail(who, "ring must be >= 1");
  if (a.dst.order == packed_order::lane && (a.head_dim != lane_order::head_dim || a.group < 16))
    fail(who, "lane order needs head_dim 128 and G >= 16, got head_dim " + std::to_string(a.head_dim) + ", G " +
                  std::to_string(a.group));
  detail::launch_kernel(quantize_groups_kernel,
                        dim3(2u * unsigned(a.max_groups), unsigned(a.n_kv_heads),
                             unsigned(a.entries) * unsigned(a.layers)),
                        dim3(threads), 0, as_stream(s), a.dependent, a);
  CUDA_CHECK_LAUNCH();
}

void copy_rows(const row_copy_args& a, stream_t s) {
  if (a.entries <= 0 || a.max_rows <= 0) return;
  if (!a.from.k || !a.from.v || !a.to_k || !a.to_v || !a.entry_slot || !a.entry_first || !a.entry_count ||
      a.n_kv_heads < 1 || a.head_dim < 1 || a.from.ring < 1 || a.to_ring < 1)
    fail("copy_rows", "rows, per-entry arrays, heads, head_dim and rings must be given");
  copy_rows_kernel<<<dim3(unsigned(a.max_rows), unsigned(a.n_kv_heads), unsigned(a.entries)), 64, 0,
                     as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
}

void dequantize_rows(const dequantize_args& a, stream_t s) {
  if (a.groups <= 0) return;
  check_shape("dequantize_rows", a.bits, a.group, a.head_dim, a.n_kv_heads);
  if (!a.to_k || !a.to_v || !a.src.k_codes || !a.src.v_codes || (a.lower && (!a.src.k_lower || !a.src.v_lower)))
    fail("dequantize_rows", "packed arrays and destination rows must be given");
  if (a.src.order == packed_order::lane && (a.head_dim != lane_order::head_dim || a.group < 16))
    fail("dequantize_rows", "lane order needs head_dim 128 and G >= 16");
  dequantize_rows_kernel<<<dim3(unsigned(a.groups), unsigned(a.n_kv_heads)), 256, 0, as_stream(s)>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda
