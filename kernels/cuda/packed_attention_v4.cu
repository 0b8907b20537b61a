// Packed decode attention, version 4 (lane order, head_dim 128): the host
// side. The kernel and what it does per chunk: packed_attention_v4_kernel.cuh.
#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/packed_attention_v4.hpp"
#include "kernels/cuda/packed_attention_v4_kernel.cuh"

namespace specpipe::kernels::cuda::v4 {
namespace {

using device::D;
using device::fixed_bytes;
using device::launch_shape;
using device::packed_attention_v4_kernel;
using device::rep_warp_words;
using device::stage_layout_of;
using device::threads;
using device::warps;

using kernel_fn = void (*)(packed_attention_args, launch_shape);

template <int B, bool LOWER, bool SIDE, int MINB>
kernel_fn pick_groups(int ng) {
  switch (ng) {
    case 1: return packed_attention_v4_kernel<B, LOWER, 1, SIDE, MINB>;
    case 2: return packed_attention_v4_kernel<B, LOWER, 2, SIDE, MINB>;
    default: return packed_attention_v4_kernel<B, LOWER, 4, SIDE, MINB>;
  }
}

// The 1-4-bit reads come in both register budgets; the INT8 read only in
// 3 blocks' (its stages take a fourth block's shared memory).
template <int B, bool SIDE>
kernel_fn pick_budget(int ng, int blocks) {
  return blocks == 4 ? pick_groups<B, false, SIDE, 4>(ng) : pick_groups<B, false, SIDE, 3>(ng);
}

// SIDE: SpeCache's replaced rows or raw scores, compiled out of the kernels
// that read neither (their registers and branches stay out of the loop).
template <bool SIDE>
kernel_fn pick_bits(int bits, bool lower, int ng, int blocks) {
  if (lower) return pick_groups<4, true, SIDE, 3>(ng);
  switch (bits) {
    case 1: return pick_budget<1, SIDE>(ng, blocks);
    case 2: return pick_budget<2, SIDE>(ng, blocks);
    default: return pick_budget<4, SIDE>(ng, blocks);
  }
}

kernel_fn pick(int bits, bool lower, int ng, bool side, int blocks) {
  return side ? pick_bits<true>(bits, lower, ng, blocks) : pick_bits<false>(bits, lower, ng, blocks);
}

void fail(const std::string& what) { throw std::invalid_argument("packed_attention (lane order): " + what); }

kernel_fn prepare(const packed_attention_args& a, launch_shape& sh) {
  const int gq = detail::check_packed_attention_args(a);
  const packed_cache_view& c = a.cache;
  if (c.head_dim != D) fail("head_dim must be 128, got " + std::to_string(c.head_dim));
  if (a.v4_blocks != 0 && a.v4_blocks != 3 && a.v4_blocks != 4)
    fail("v4_blocks must be 0 (the default, 3), 3 or 4, got " + std::to_string(a.v4_blocks));
  const bool lower = c.k_lower != nullptr;
  sh.gq = gq;
  sh.log2_group = c.group == 32 ? 5 : c.group == 64 ? 6 : 7;
  sh.stages = a.stages;
  const int ng = c.value_groups();
  const int stage_bytes = stage_layout_of(c.bits, lower, ng).bytes;
  sh.warp_bytes = std::max(sh.stages * stage_bytes, 8 * D * 4);  // the stages, then the warp's rows
  int off = fixed_bytes;
  if (a.rows.positions) {
    sh.off_qf = off;
    off += 8 * D * 4;
    sh.off_rep = off;
    off += warps * rep_warp_words * 4;
  }
  sh.off_warps = off;
  sh.smem = off + warps * sh.warp_bytes;
  const kernel_fn k = pick(c.bits, lower, ng, a.rows.positions != nullptr || a.scores != nullptr, a.v4_blocks);
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

int blocks_per_sm(const packed_attention_args& a) {
  launch_shape sh;
  const kernel_fn k = prepare(a, sh);
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, threads, std::size_t(sh.smem)));
  return std::max(n, 1);
}

std::size_t smem_bytes(const packed_attention_args& a) {
  launch_shape sh;
  prepare(a, sh);
  return std::size_t(sh.smem);
}

void launch(const packed_attention_args& a, stream_t s) {
  launch_shape sh;
  const kernel_fn k = prepare(a, sh);
  const dim3 grid(unsigned(a.splits), unsigned(a.cache.n_kv_heads), unsigned(a.block_first ? a.blocks : a.entries));
  detail::launch_kernel(k, grid, dim3(threads), std::size_t(sh.smem), as_stream(s), a.dependent, a, sh);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specpipe::kernels::cuda::v4
