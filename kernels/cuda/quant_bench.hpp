#pragma once
// The quantized decode-attention case of `specpipe bench --kernels` (CUDA
// builds only): the bf16 flash-decoding kernel and the packed-code kernels
// (v1 and the tensor-core v2) for each format, timed in the same run on the
// same shape, with the bytes each must read and its roofline at a bandwidth
// the caller passes in (measured in that run, e.g. measure_copy_bandwidth);
// then v2's pipeline depths, batch 1, SpeCache's mixed rows, the score
// output and top-k, and the quantize-on-append launch. Plain data in and out.
#include <cstdint>
#include <string>
#include <vector>

namespace specpipe::kernels::cuda {

struct quant_bench_options {
  std::int64_t context = 65536;
  int batch = 8, n_heads = 32, n_kv_heads = 8, head_dim = 128;
  int group = 64;             // G
  std::int64_t window = 64;   // full-precision rows at least (KIVI's R); the rest packed in whole groups
  int warmup = 5, repeats = 20;
  int max_splits = 128;
  double bandwidth = 4.2e12;  // bytes/s for the roofline (pass the measured copy bandwidth)
  std::uint64_t seed = 1;
};

struct quant_bench_row {
  // "bf16" (the flash-decoding kernel), "v1" (quantized_attention.hpp), "v2"
  // (packed_attention.hpp), "v2-mixed" (v2 with SpeCache's replaced rows),
  // "v2-scores" (v2 writing raw scores of every entry), "topk" (GQA top-k
  // from those scores), "quantize" (one flush of every sequence, one layer),
  // "quantize-idle" (the same launch with nothing due).
  std::string kernel = "bf16";
  std::string format;       // "bf16", "kivi", "specache", "hier-int4", "hier-int8"
  int bits = 16;            // bits per element the read touches (codes only)
  int batch = 0;
  int stages = 0;           // v2 pipeline depth
  std::string note;
  int splits = 1;
  double ms = 0;            // median of the repeats
  double spread_ms = 0;     // max - min of the repeats
  double bytes = 0;         // bytes the kernel must read: codes + scales/zeros + window + q
  double gb_per_s = 0;      // bytes / ms
  double roofline_ms = 0;   // bytes / bandwidth
  double pct_of_roofline = 0;  // roofline_ms / ms * 100
  double speedup_vs_bf16 = 0;  // bf16 ms / ms, bf16 measured in the same run
};

// Throws cuda_error when no device is usable.
std::vector<quant_bench_row> run_quant_attention_bench(const quant_bench_options& o);

}  // namespace specpipe::kernels::cuda
