#pragma once
// Attention over the full bf16 KV cache on the GPU.
//
// Cache layout (per layer): k_cache and v_cache are [slots, n_kv_heads,
// capacity, head_dim] bf16, so that one (sequence, KV head) is a contiguous run
// of rows that a block streams with 16-byte loads. head_dim 64 or 128; GQA
// group size n_heads / n_kv_heads in {1, 2, 4, 8, 16}.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"

namespace specpipe::kernels::cuda {

// Decode: one query token per sequence, each sequence its own length
// (flash-decoding). Grid (split, KV head, sequence); each block loads each K/V
// tile of its split once and serves all query heads of its GQA group; a
// second kernel merges the splits by their running max and sum.
struct decode_attention_args {
  const std::uint16_t* q = nullptr;  // [batch, n_heads, head_dim], RoPE applied
  std::int64_t ld_q = 0;             // elements between sequences' q rows
  const std::uint16_t* k_cache = nullptr;
  const std::uint16_t* v_cache = nullptr;
  std::int64_t capacity = 0;
  const std::int32_t* slots = nullptr;  // [batch] cache slot of each sequence, device
  const std::int32_t* lens = nullptr;   // [batch] keys to attend (>= 1), device
  std::uint16_t* out = nullptr;         // [batch, n_heads, head_dim]
  std::int64_t ld_out = 0;
  float* partial = nullptr;  // scratch, decode_attention_scratch_floats()
  int batch = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int splits = 1;  // per sequence, <= the max_splits the scratch was sized for
  float scale = 0;  // usually 1/sqrt(head_dim)
  // Both kernels (splits, combine) as programmatic dependent launches
  // (kernels/cuda/launch.cuh): same results, launch latency hidden.
  bool dependent = false;
};

std::size_t decode_attention_scratch_floats(int batch, int n_heads, int head_dim, int max_splits);

// Splits per sequence for a decode launch. "Fills the machine" means: the
// grid's blocks keep busy at least 90% of the block slots of the waves it
// takes (slots = sm_count * blocks_per_sm, the resident blocks the
// occupancy allows), where that is possible at all. The choice maximises
// that utilisation, pairs * tiles / (waves * slots * tiles_per_split), and
// among equal utilisations takes the fewest splits (fewer waves: each block
// pays a prologue, and fewer partials to merge). A split covers at least two
// key tiles of the longest sequence; at most max_splits.
int decode_attention_splits(int batch, int n_kv_heads, std::int64_t max_len, int sm_count,
                            int max_splits, int blocks_per_sm = 2);

// The utilisation above for a given split count (1 = every slot of every
// wave busy): what decode_attention_splits maximises, exposed for tests and
// the benchmark notes.
double decode_attention_utilization(int batch, int n_kv_heads, std::int64_t max_len, int sm_count,
                                    int blocks_per_sm, int splits);

// Resident decode-attention blocks per multiprocessor on the current device
// for this head configuration (cudaOccupancyMaxActiveBlocksPerMultiprocessor
// with the kernel's shared memory); throws for unsupported shapes.
int decode_attention_blocks_per_sm(int n_heads, int n_kv_heads, int head_dim);

void decode_attention(const decode_attention_args& a, stream_t s);

// Prefill: n query tokens of one sequence at positions pos0 .. pos0+n-1, whose
// K/V are already in the cache; query i attends to keys 0 .. pos0+i (causal).
// Flash-attention tiling with an online softmax; never forms the n x L matrix.
struct prefill_attention_args {
  const std::uint16_t* q = nullptr;  // [n, n_heads, head_dim], RoPE applied
  std::int64_t ld_q = 0;             // elements between tokens' q rows
  const std::uint16_t* k_cache = nullptr;
  const std::uint16_t* v_cache = nullptr;
  std::int64_t capacity = 0;
  int slot = 0;
  std::int64_t pos0 = 0;
  std::int64_t n = 0;
  std::uint16_t* out = nullptr;  // [n, n_heads, head_dim]
  std::int64_t ld_out = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0;
};

void prefill_attention(const prefill_attention_args& a, stream_t s);

// The same on the tensor cores through cuBLAS (attention_prefill_gemm.cu):
// S = scale Q K^T per KV group, a causal softmax into bf16 P, O = P V, over
// passes of as many queries as `scratch` holds (heads * rows * keys * 6
// bytes). Returns false, having done nothing, when the scratch cannot hold a
// pass of min(n, 16) queries; the caller then runs prefill_attention.
// Sets the handle's stream to s. Any head_dim that is a multiple of 8.
bool prefill_attention_cublas(blas_handle_t h, const prefill_attention_args& a, void* scratch,
                              std::size_t scratch_bytes, stream_t s);
// Queries per pass for this scratch size (at most n).
std::int64_t prefill_attention_cublas_rows(const prefill_attention_args& a, std::size_t scratch_bytes);

}  // namespace specpipe::kernels::cuda
