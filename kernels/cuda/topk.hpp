#pragma once
// SpeCache's top-k on the GPU: the CUDA twin of kernels/topk.hpp
// (cpu::topk_gqa). Per query row and KV head, the k positions with the
// largest softmax probability averaged over the query heads of the GQA group
// (ranked, as the CPU ranks, by the sum in head order: the average's order
// without its rounding), excluding one position; ties go to the lower
// position; output by descending average.
//
// Input is either probabilities, or the raw log2 scores of packed_attention
// with its combined (max, sum) per head, normalized on the fly exactly as
// packed_attention_probs would (2^(s - m) / l), so the probabilities need
// not be written at all. Two stages (topk.cu): blocks over chunks of 2048
// positions pick each chunk's own top-k, then one block per (row, KV head)
// picks the top-k of those candidates; each selection is a radix select over
// the f32 bit patterns (four 8-bit digits) for the k-th largest, then the
// larger ones and the lowest positions of the ties, ranked.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

struct topk_args {
  // values[(r * n_heads + h) * stride + j], j < row_len[r]: probabilities,
  // or raw scores when `ml` is given (ml[r * ml_row_stride + h * 2] = max, + 1 = sum).
  const float* values = nullptr;
  std::int64_t stride = 0;
  const float* ml = nullptr;
  std::int64_t ml_row_stride = 0;  // floats between rows' (max, sum) blocks; 0: 2 * n_heads
  const std::int32_t* row_len = nullptr;      // device [rows]
  const std::int32_t* row_exclude = nullptr;  // device [rows]; -1 (or out of range): none; null: none
  int rows = 0, n_heads = 0, n_kv_heads = 0;
  int k = 0;  // 0 .. topk_max_k
  // Output, device: positions[(r * n_kv_heads + g) * k + i] for i < count[r * n_kv_heads + g].
  std::int32_t* positions = nullptr;
  std::int32_t* count = nullptr;
  float* scratch = nullptr;  // topk_scratch_floats(rows, n_kv_heads, max_len)
  int max_len = 0;           // >= every row_len
  // The radix passes' first digit: false (default) starts below the bits
  // every key shares; true, at bits 24-31 whatever the keys (the version
  // before; the bench times both). Same result either way.
  bool fixed_digits = false;
};

constexpr int topk_max_k = 1024;
// The first stage's chunk of positions, and the candidates each chunk keeps room for.
constexpr int topk_chunk_len = 2048;
constexpr int topk_chunk_slots = topk_max_k < topk_chunk_len ? topk_max_k : topk_chunk_len;

// Per (row, KV head) and chunk: the chunk's candidate keys and positions and their count.
inline std::size_t topk_scratch_floats(int rows, int n_kv_heads, int max_len) {
  const std::size_t chunks = std::size_t((max_len + topk_chunk_len - 1) / topk_chunk_len);
  return std::size_t(rows) * std::size_t(n_kv_heads) * chunks * std::size_t(2 * topk_chunk_slots + 1);
}

// Validates (std::invalid_argument naming the field) and launches.
void topk_gqa(const topk_args& a, stream_t s);

}  // namespace specpipe::kernels::cuda
