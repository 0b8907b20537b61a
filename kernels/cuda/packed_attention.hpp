#pragma once
// Decode attention over the device's quantized KV cache on the tensor cores
// (version 2 of the packed-code attention; v1 is quantized_attention.hpp).
// The CUDA twin of cpu::quantized_attention and cpu::mixed_attention.
//
// Cache (packed_cache_view): the bytes of memory/kv_layout.hpp (channel-major
// key blocks of G tokens, value rows of head_dim codes, f16 scales and zeros,
// hier's lower plane beside the upper one), arranged per (slot, KV head) as
// one contiguous run over groups / tokens, so that a block streams each of its
// arrays with 16-byte copies and no two KV heads share a sector. The
// full-precision window is bf16 rows in a ring: position p of (slot, head)
// at row p % win_cap.
//
// Work: each entry (a query row) names a slot, the packed tokens of that
// slot (a multiple of G) and how many positions it attends (positions
// 0 .. len-1: the packed ones first, then the window). One query token per
// entry; several entries may share a slot (causal rows of one sequence).
// Grid (split, KV head, entry): each entry's tiles (128 packed tokens, or 128
// window rows) are cut into `splits` equal runs; a combine kernel merges the
// splits (Flash-Decoding).
//
// Inside a block, four warps each take 32 tokens of a tile. Scores are
// m16n8k16 MMAs of f16 codes (exact) against w = f16(q * s) (the fused
// dequantization of kernels/quantized_attention.hpp, key scale folded into q
// once per group), plus sum_c q_c z_c in f32; values are MMAs of f16 codes
// against P' = f16(p * s_token) plus p * z_token in f32. GQA: all query heads
// of a KV head share each code load. See packed_fragments.hpp and NOTES.md.
// Error: w and P' are rounded to f16 (relative 2^-11 each); scores move by
// about 2^-12 * ||(q_c s_c U_c)_c||, a relative change of the probabilities
// near 1e-3 with outlier channels, ~1e-4 without.
//
// SpeCache's mixed attention: optional per-(entry, KV head) sorted positions
// whose K/V come from separate 16-bit rows instead (scores and values in
// f32); optional raw scores of chosen entries, turned into probabilities by
// packed_attention_probs after the combine.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_error.hpp"
#include "kernels/cuda/packed_lane_order.hpp"

namespace specpipe::kernels::cuda {

struct packed_cache_view {
  // cpu: the bytes described above, read by v3 (every head_dim, replaced
  // rows, raw scores). lane (head_dim 128): packed_lane_order.hpp's order,
  // read by v4 (packed_attention_v4.cu), with the same runs and strides.
  packed_order order = packed_order::cpu;
  int bits = 2;       // bits per code of the upper (or only) plane: 1, 2 or 4
  int group = 64;     // G: 32, 64 or 128 (v2); value groups are min(G, head_dim)
  int head_dim = 128;  // 64 or 128
  int n_kv_heads = 0;
  // Packed arrays. Element (slot s, KV head h) starts at run index s * n_kv_heads + h:
  //   key block of group g:      k_codes + run * k_run + g * key_block_bytes   (bytes)
  //   key scale/zero of group g: k_scale + run * ks_run + g * head_dim         (f16 elements)
  //   value row of token t:      v_codes + run * v_run + t * value_row_bytes   (bytes)
  //   value scale/zero of t:     v_scale + run * vs_run + t * value_groups     (f16 elements)
  // Lower planes (hier) use the k_run / v_run of the upper plane.
  const std::uint8_t* k_codes = nullptr;
  const std::uint8_t* k_lower = nullptr;  // null: upper-only read (kivi, hier INT4)
  const std::uint16_t* k_scale = nullptr;
  const std::uint16_t* k_zero = nullptr;
  const std::uint8_t* v_codes = nullptr;
  const std::uint8_t* v_lower = nullptr;
  const std::uint16_t* v_scale = nullptr;
  const std::uint16_t* v_zero = nullptr;
  std::int64_t k_run = 0, ks_run = 0, v_run = 0, vs_run = 0;
  // Window: bf16 rows, (s, h, ring row r) at ((s * n_kv_heads + h) * win_cap + r) * head_dim.
  const std::uint16_t* win_k = nullptr;
  const std::uint16_t* win_v = nullptr;
  int win_cap = 0;

  int value_group() const { return group < head_dim ? group : head_dim; }
  std::int64_t key_block_bytes() const { return std::int64_t(head_dim) * group * bits / 8; }
  std::int64_t value_row_bytes() const { return std::int64_t(head_dim) * bits / 8; }
  int value_groups() const { return head_dim / value_group(); }
};

// SpeCache's replaced rows: per (index, KV head) up to `stride` strictly
// increasing positions, and their K/V rows (bf16 or f16) at
// ((index * n_kv_heads + h) * stride + r) * head_dim, where an entry's index
// is entry_index[e] (device; null: e itself), so that the entries of one
// sequence (SpeCache's real and speculative rows) read one set, kept per
// slot. A position may lie in the packed part or in the window; its row wins
// either way.
struct replaced_rows {
  const std::int32_t* positions = nullptr;  // [indices][n_kv_heads][stride], device
  const std::int32_t* count = nullptr;      // [indices][n_kv_heads], device
  const std::int32_t* entry_index = nullptr;  // [entries], device; null: identity
  int stride = 0;
  const std::uint16_t* k = nullptr;
  const std::uint16_t* v = nullptr;
  bool f16 = false;  // rows are f16 (else bf16)
};

struct packed_attention_args {
  packed_cache_view cache;
  const std::uint16_t* q = nullptr;  // bf16 [entries, n_heads, head_dim], RoPE applied
  std::int64_t ld_q = 0;             // elements between entries' q rows; 0: n_heads * head_dim
  // Per entry, on the device: the slot, its packed tokens (a multiple of G;
  // positions beyond are in the window) and the positions attended (>= 1).
  const std::int32_t* entry_slot = nullptr;
  const std::int32_t* entry_quant = nullptr;
  const std::int32_t* entry_len = nullptr;
  replaced_rows rows;  // positions == null: none
  // Several query rows of one sequence per block (QuantSpec's verify, a
  // multi-token step): block b takes entries block_first[b] ..
  // + block_count[b] - 1, which must share slot and packed length and attend
  // ascending lengths (causal rows at consecutive positions). Their
  // count * GQA group query heads share every code load, so a verify of n
  // tokens reads the cache once instead of n times. At most max_queries
  // entries per block, with max_queries * (n_heads / n_kv_heads) <= 8. Null:
  // one entry per block. With replaced rows a block reads the set of its
  // first entry's index (rows.entry_index must be given: SpeCache's real and
  // speculative rows of one slot share one set); a replaced position past a
  // column's own length stays masked. Scores are written per column, for
  // the entries that have a scores row.
  const std::int32_t* block_first = nullptr;  // [blocks], device
  const std::int32_t* block_count = nullptr;  // [blocks], device
  int blocks = 0;
  int max_queries = 1;
  // Raw scores (log2 domain, the softmax's input) of chosen entries:
  // scores[(r * n_heads + h) * scores_stride + p] for p < len, where r =
  // entry_scores_row[e] (device; -1: not written). packed_attention_probs
  // turns them into probabilities with the combine's max and sum.
  float* scores = nullptr;
  const std::int32_t* entry_scores_row = nullptr;
  std::int64_t scores_stride = 0;
  float* out_f32 = nullptr;          // [entries, n_heads, head_dim]; set this or out_bf16
  std::uint16_t* out_bf16 = nullptr;
  std::int64_t ld_out = 0;           // 0: n_heads * head_dim
  float* ml = nullptr;               // optional [entries, n_heads, 2]: combined max (log2) and sum
  float* partial = nullptr;          // scratch, packed_attention_scratch_floats()
  int entries = 0, n_heads = 0;
  int splits = 1;                    // per entry, <= the max_splits the scratch was sized for
  int stages = 3;                    // cp.async stages of packed tiles: 2, 3 or 4 (packed_attention_stages)
  float scale = 0;                   // usually 1/sqrt(head_dim)
  // Variants of the v3 measurements (NOTES.md, "Packed attention v3"); the
  // defaults are the configuration that measured fastest for every format
  // on the H200 (lean shared memory, combine 1; with at least 16 tiles per
  // split and 3 stages for 1-2 bits, 2 for 4-8). Results do not depend on
  // them beyond f32 summation order.
  // lean_smem: per-warp value-group arrays sized by the cache's value groups
  // (v2: head_dim / 32 of them) and the replaced-row arrays only when rows
  // are given: 4-9 KiB less per block, one more resident block for 2- and
  // 4-bit.
  bool lean_smem = true;
  // combine: 0 = v2's combine (every thread walks the split list twice);
  // 1 = the split weights once per block into shared memory, then one
  // unconditional (batched) load per split and output element.
  int combine = 1;
  // Both kernels as programmatic dependent launches (kernels/cuda/launch.cuh):
  // the same results, each launch overlapping the tail of the kernel before.
  bool dependent = false;
  // v4 (lane order) only: the resident blocks per SM its kernel's registers
  // are budgeted for: 3 (168 registers a thread; 0 means 3) or 4 (128: a
  // third more warps to hide the chunk loop's ALU latencies, a few more
  // spills). 4 applies to the 1-4-bit reads; the INT8 read (k_lower) keeps
  // 3, its stages filling a fourth block's shared memory. The split rule
  // sees the budget through blocks_per_sm, so splits (and the f32 summation
  // order) may differ between the two.
  int v4_blocks = 0;
};

std::size_t packed_attention_scratch_floats(int entries, int n_heads, int head_dim, int max_splits);

// Work tiles of an entry attending `len` positions of which `n_quant` packed.
std::int64_t packed_attention_tiles(std::int64_t n_quant, std::int64_t len);

// Split count that fills the machine (the rule of decode_attention_splits):
// most busy block slots over the waves the grid takes, fewest splits among
// equals, each split at least min_split_tiles tiles (v2: 2; relaxed down to
// 2 where the pairs x runs of that length would not fill one wave), at most
// max_splits. `tiles` is the tile count of the longest entry
// (packed_attention_tiles). Each block pays a fixed prologue (q, pipeline
// fill) and epilogue (warp merge, partial write) that a split of a few tiles
// does not amortize: the first H100 run measured 0.669 ms for hier INT4 at
// 103 splits (5 tiles each) against 0.418 ms at 37 splits (G=128).
int packed_attention_splits(int entries, int n_kv_heads, std::int64_t tiles, int sm_count, int max_splits,
                            int blocks_per_sm, int min_split_tiles = 2);

// The stages that measured fastest for a read of `bits` per code (3 for 1-2
// bits, 2 for 4-8: a third stage costs the larger tiles a resident block).
inline int packed_attention_stages(int bits) { return bits <= 2 ? 3 : 2; }

// v4 (lane order): each warp's own ring of 32-token chunks; two stages in
// flight cover the latency for the small formats, the INT8 read's 8.6 KiB
// chunks take a resident block per SM for each extra stage.
inline int packed_attention_v4_stages(int read_bits) { return read_bits <= 2 ? 4 : read_bits == 4 ? 3 : 2; }

// The fewest tiles per split of the decode path (v3 sweep: 16 made 1-bit
// 0.304 ms against 0.350 at the v2 rule's 57 splits).
inline constexpr int packed_attention_min_split_tiles = 16;

// Resident blocks per SM for this configuration (occupancy query).
int packed_attention_blocks_per_sm(const packed_attention_args& a);

// Shared memory of one block (bytes), for the notes and the bench.
std::size_t packed_attention_smem_bytes(const packed_attention_args& a);

// Validates (std::invalid_argument naming the field) and launches the split
// kernel and the combine on stream s. Supports head_dim 64 and 128, GQA
// groups 1, 2, 4 and 8, G 32, 64 and 128; every array and run 16-byte aligned.
// The largest max_queries for a GQA group: 8 / group.
inline int packed_attention_max_queries(int gqa_group) { return gqa_group >= 8 ? 1 : 8 / gqa_group; }
void packed_attention(const packed_attention_args& a, stream_t s);

// probs[(r * n_heads + h) * stride + p] = 2^(scores[...] - m) / l for p < len
// of every entry with a scores row, in place (probs may equal scores), with
// (m, l) from the `ml` output of packed_attention. Positions >= len untouched.
void packed_attention_probs(const float* scores, float* probs, std::int64_t stride, const float* ml,
                            const std::int32_t* entry_scores_row, const std::int32_t* entry_len, int entries,
                            int n_heads, stream_t s);

}  // namespace specpipe::kernels::cuda
