// Decode attention over the device's packed KV cache on the tensor cores:
// the host side of version 3 (the kernel and its design:
// packed_attention_v3_kernel.cuh), the checks v3 and v4 share, the split
// rule, and packed_attention(), which picks v3 or v4 (lane order) and runs
// the combine.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/packed_attention.hpp"
#include "kernels/cuda/packed_attention_v3_kernel.cuh"
#include "kernels/cuda/packed_attention_v4.hpp"
#include "kernels/cuda/packed_combine.hpp"

namespace specpipe::kernels::cuda {
namespace {

using v3::device::launch_shape;
using v3::device::packed_attention_kernel;
using v3::device::ps_stride;
using v3::device::slim_layout;
using v3::device::threads;
using v3::device::tile_tokens;
using v3::device::warps;

int round16(int x) { return (x + 15) / 16 * 16; }

using kernel_fn = void (*)(packed_attention_args, launch_shape);

template <int D, int NT>
kernel_fn pick_format(int bits, bool lower) {
  if (lower) return packed_attention_kernel<D, 4, true, NT>;
  switch (bits) {
    case 1: return packed_attention_kernel<D, 1, false, NT>;
    case 2: return packed_attention_kernel<D, 2, false, NT>;
    default: return packed_attention_kernel<D, 4, false, NT>;
  }
}

kernel_fn pick(int d, int nt, int bits, bool lower) {
  if (d == 128) return nt == 1 ? pick_format<128, 1>(bits, lower) : pick_format<128, 2>(bits, lower);
  return nt == 1 ? pick_format<64, 1>(bits, lower) : pick_format<64, 2>(bits, lower);
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

void fail(const std::string& what) { throw std::invalid_argument("packed_attention: " + what); }

int log2_of(int x) {
  int l = 0;
  while ((1 << l) < x) ++l;
  return l;
}

// Returns the kernel and fills the shape (arguments checked by check_args).
kernel_fn prepare(const packed_attention_args& a, launch_shape& sh) {
  const int gq = detail::check_packed_attention_args(a);
  const packed_cache_view& c = a.cache;
  const int d = c.head_dim;
  const bool lower = c.k_lower != nullptr;
  sh.gq = gq;
  sh.log2_group = log2_of(c.group);
  sh.log2_vgroup32 = log2_of(c.value_group() / 32);
  sh.ngroups = c.value_groups();
  sh.gcap = a.lean_smem ? sh.ngroups : d / 32;
  sh.stages = a.stages;
  const int cols = a.block_first ? gq * a.max_queries : gq;
  const int nt = cols > 4 ? 2 : 1, heads = 4 * nt, km = d / 8, gcap = sh.gcap;
  // Replaced-row arrays: always in v2's carve-up, only with rows when lean.
  const int rep_warps = a.lean_smem && !a.rows.positions ? 0 : warps;
  const int plane = tile_tokens * d * c.bits / 8;
  const int planes = lower ? 2 : 1;
  const int tile_groups = tile_tokens / c.group;
  int off = plane * planes;
  sh.off_kl = plane;
  sh.off_ks = off;
  off += round16(tile_groups * d * 2);
  sh.off_kz = off;
  off += round16(tile_groups * d * 2);
  sh.off_vc = off;
  off += plane;
  sh.off_vl = off;
  if (lower) off += plane;
  sh.off_vs = off;
  off += round16(tile_tokens * sh.ngroups * 2);
  sh.off_vz = off;
  off += round16(tile_tokens * sh.ngroups * 2);
  sh.stage_bytes = off;
  const int fin = warps * heads * d * 4;
  off = std::max(sh.stages * sh.stage_bytes, fin);
  const bool slim = slim_layout(lower, nt);
  sh.off_q = off;
  off += heads * d * (slim ? 2 : 4);
  sh.off_w = off;
  off += tile_groups * km * heads * 4 * 4;
  sh.off_base = off;
  off += round16(tile_groups * (d / 64) * heads * 4);
  sh.off_p = off;
  off += warps * heads * ps_stride * 4;
  sh.off_alpha = off;
  off += round16(warps * heads * 4);
  sh.off_rep = off;
  off += rep_warps * 64 * 4;
  sh.off_reps = off;
  off += rep_warps * 32 * heads * 4;
  sh.off_pp = off;
  off += warps * gcap * 4 * heads * 4 * 4;
  sh.off_zz = off;
  if (!slim) off += warps * heads * gcap * 32 * 4;
  sh.off_zsum = off;
  off += round16(warps * heads * gcap * 4);
  sh.off_ml = off;
  off += round16(warps * heads * 2 * 4);
  sh.smem = off;
  const kernel_fn k = pick(d, nt, c.bits, lower);
  // Raise the kernel's shared-memory limit once per size (not on every
  // launch: a decode step replayed as a graph is captured after an eager run).
  static std::mutex mu;
  static std::map<kernel_fn, int> configured;
  std::lock_guard<std::mutex> lock(mu);
  int& have = configured[k];
  if (have < sh.smem) {
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, sh.smem));
    have = sh.smem;
  }
  return k;
}

}  // namespace

namespace detail {

// The checks both versions share (std::invalid_argument naming the field);
// returns the GQA group.
int check_packed_attention_args(const packed_attention_args& a) {
  const packed_cache_view& c = a.cache;
  const int d = c.head_dim;
  if (d != 64 && d != 128) fail("head_dim " + std::to_string(d) + " is not 64 or 128");
  if (c.bits != 1 && c.bits != 2 && c.bits != 4) fail("bits must be 1, 2 or 4, got " + std::to_string(c.bits));
  const bool lower = c.k_lower != nullptr;
  if (lower != (c.v_lower != nullptr)) fail("keys and values must both have a lower plane or neither");
  if (lower && c.bits != 4) fail("a lower plane needs 4-bit upper codes, got " + std::to_string(c.bits));
  if (c.group != 32 && c.group != 64 && c.group != 128)
    fail("group " + std::to_string(c.group) + " is not 32, 64 or 128 (smaller groups: quantized_attention.hpp, v1)");
  if (c.n_kv_heads <= 0 || a.n_heads % c.n_kv_heads != 0)
    fail("n_heads " + std::to_string(a.n_heads) + " is not a multiple of n_kv_heads " + std::to_string(c.n_kv_heads));
  const int gq = a.n_heads / c.n_kv_heads;
  if (gq != 1 && gq != 2 && gq != 4 && gq != 8) fail("GQA group " + std::to_string(gq) + " is not 1, 2, 4 or 8");
  if (a.splits < 1) fail("splits must be >= 1, got " + std::to_string(a.splits));
  if (a.stages < 2 || a.stages > 4) fail("stages must be 2, 3 or 4, got " + std::to_string(a.stages));
  if (a.combine != 0 && a.combine != 1) fail("combine must be 0 or 1, got " + std::to_string(a.combine));
  if (!a.q || !a.partial || (!a.out_f32 && !a.out_bf16)) fail("q, partial or out missing");
  if (!a.entry_slot || !a.entry_quant || !a.entry_len) fail("per-entry slot, packed length and length missing");
  const void* ptrs[] = {c.k_codes, c.k_scale, c.k_zero, c.v_codes, c.v_scale, c.v_zero, c.win_k, c.win_v};
  for (const void* p : ptrs)
    if (!p || !aligned16(p)) fail("codes, scales, zeros and window rows must be present and 16-byte aligned");
  if (lower && (!aligned16(c.k_lower) || !aligned16(c.v_lower))) fail("lower planes must be 16-byte aligned");
  if (c.k_run % 16 || c.v_run % 16 || c.ks_run % 8 || c.vs_run % 8)
    fail("runs per (slot, head) must keep every run 16-byte aligned");
  if (c.win_cap < 1) fail("win_cap must be >= 1");
  if (a.rows.positions && (!a.rows.count || !a.rows.k || !a.rows.v || a.rows.stride < 1))
    fail("replaced rows need counts, K/V rows and a positive stride");
  if (a.scores && (!a.entry_scores_row || a.scores_stride < 1)) fail("scores need entry rows and a stride");
  if (a.block_first) {
    if (!a.block_count || a.blocks < 1) fail("multi-query blocks need block_count and blocks >= 1");
    if (a.max_queries < 1 || a.max_queries * gq > 8)
      fail("max_queries " + std::to_string(a.max_queries) + " times the GQA group " + std::to_string(gq) +
           " exceeds the 8 query columns of a block");
    if (a.rows.positions && !a.rows.entry_index)
      fail("multi-query blocks read one set of replaced rows per block: give rows.entry_index");
  }
  return gq;
}

}  // namespace detail

std::size_t packed_attention_scratch_floats(int entries, int n_heads, int head_dim, int max_splits) {
  return std::size_t(entries) * std::size_t(n_heads) * std::size_t(max_splits) * std::size_t(head_dim + 2);
}

std::int64_t packed_attention_tiles(std::int64_t n_quant, std::int64_t len) {
  const std::int64_t nq = std::min(n_quant, len);
  return (nq + tile_tokens - 1) / tile_tokens + (len - nq + tile_tokens - 1) / tile_tokens;
}

int packed_attention_splits(int entries, int n_kv_heads, std::int64_t tiles, int sm_count, int max_splits,
                            int blocks_per_sm, int min_split_tiles) {
  tiles = std::max<std::int64_t>(1, tiles);
  const std::int64_t pairs = std::int64_t(entries) * n_kv_heads;
  const std::int64_t slots = std::int64_t(std::max(sm_count, 1)) * std::max(blocks_per_sm, 1);
  // Few (entry, head) pairs, e.g. one sequence at 8k: runs of min_split_tiles
  // would leave most SMs idle (llama2-7b, batch 1, 8k: 4 splits x 32 pairs =
  // 128 blocks for 264 slots). Relax the minimum, down to v2's 2 tiles, to
  // what one wave of slots needs.
  min_split_tiles = int(std::max<std::int64_t>(
      2, std::min<std::int64_t>(min_split_tiles, tiles * pairs / std::max<std::int64_t>(1, slots))));
  const int cap = int(std::max<std::int64_t>(
      1, std::min<std::int64_t>(max_splits, tiles / std::max<std::int64_t>(1, min_split_tiles))));
  int best = 1;
  double best_score = -1;
  for (int s = 1; s <= cap; ++s) {
    const std::int64_t chunk = (tiles + s - 1) / s, active = (tiles + chunk - 1) / chunk;
    const std::int64_t waves = (pairs * active + slots - 1) / slots;
    const double score = double(pairs * tiles) / double(waves * slots * chunk);
    if (score > best_score + 1e-9) {
      best_score = score;
      best = s;
    }
  }
  return best;
}

int packed_attention_blocks_per_sm(const packed_attention_args& a) {
  if (a.cache.order == packed_order::lane) return v4::blocks_per_sm(a);
  launch_shape sh;
  const kernel_fn k = prepare(a, sh);
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, threads, std::size_t(sh.smem)));
  return std::max(n, 1);
}

std::size_t packed_attention_smem_bytes(const packed_attention_args& a) {
  if (a.cache.order == packed_order::lane) return v4::smem_bytes(a);
  launch_shape sh;
  prepare(a, sh);
  return std::size_t(sh.smem);
}

void packed_attention(const packed_attention_args& in, stream_t s) {
  if (in.entries <= 0) return;
  packed_attention_args a = in;
  if (a.ld_q == 0) a.ld_q = std::int64_t(a.n_heads) * a.cache.head_dim;
  if (a.ld_out == 0) a.ld_out = std::int64_t(a.n_heads) * a.cache.head_dim;
  if (a.cache.order == packed_order::lane) {
    v4::launch(a, s);
    packed_combine(a, s);
    return;
  }
  launch_shape sh;
  const kernel_fn k = prepare(a, sh);
  const dim3 grid(unsigned(a.splits), unsigned(a.cache.n_kv_heads), unsigned(a.block_first ? a.blocks : a.entries));
  detail::launch_kernel(k, grid, dim3(threads), std::size_t(sh.smem), as_stream(s), a.dependent, a, sh);
  CUDA_CHECK_LAUNCH();
  packed_combine(a, s);
}

}  // namespace specpipe::kernels::cuda
