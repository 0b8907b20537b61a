// v9 of the 4-bit GEMV: v7's tiles and products, fed by the bulk copy engine.
//
// v7 gives each 16-row tile its own block: its warps load their chunks into
// registers, wait, compute, merge and exit, so a block's loads and its
// products never overlap, and at k = 4096 each warp has one round of loads
// in all. Stop 22 (NOTES.md) measured it at 37-55% of the copy bandwidth
// with ~103 instructions per 1 KB chunk, a quarter of the issue slots: the
// loads wait, not the math. Here a persistent grid (two blocks per SM) walks
// the tiles, and each tile's band of codes and scales, contiguous in the
// tiled layout, arrives as a few pieces of whole chunks by cp.async.bulk
// into a ring of shared-memory stages: one producer thread issues two copies
// per piece and the stages complete on mbarriers, so the next pieces stream
// in while the eight consumer warps compute the current one. The consumers
// read codes and scales from shared memory (the same 16- and 8-byte loads
// as v7's global ones, conflict-free), x from L1, take chunks warp, warp +
// 8, ... of each piece, and merge a finished tile across warps through a
// double-buffered partial array with one named barrier.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <cstdint>

#include "kernels/cuda/bulk_copy.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/int4_gemv_bulk.hpp"
#include "kernels/cuda/int4_products.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::kernels::cuda::detail {
namespace {

constexpr int bulk_consumers = 8;                      // warps that compute
constexpr int bulk_threads = 32 * (bulk_consumers + 1);  // + one producer warp
// Two blocks per SM: ptxas gives the kernel 108 registers, 18 warps x 112 x
// 32 = 64512 of 65536 (asking for 2 in __launch_bounds__ capped it at 96
// and spilled).
constexpr int bulk_blocks_per_sm = 2;
constexpr int bulk_max_stages = 4;
constexpr int bulk_max_piece = 48;           // chunks per stage at most (~51 KB)
constexpr int bulk_stage_budget = 96 << 10;  // shared bytes of a block's stages
constexpr unsigned chunk_code_bytes = 1024;  // 16 rows x 128 codes
constexpr unsigned chunk_scale_bytes = 64;   // 8 lanes' (sa, za, sb, zb) for group = chunk
constexpr unsigned chunk_bytes = chunk_code_bytes + chunk_scale_bytes;
// Shared memory: the barriers, then the partials (two tiles), then the stages.
constexpr unsigned bulk_part_offset = 128;
constexpr unsigned bulk_stage_offset = bulk_part_offset + 2 * bulk_consumers * 16 * 8 * 4;

struct bulk_plan {
  int piece = 0;   // chunks per piece (a divisor of the tile's chunks)
  int stages = 0;  // pieces in flight per block
  unsigned grid = 0;
  std::size_t smem = 0;
};

__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(32 * bulk_consumers) : "memory");
}

template <bool OutF32>
__global__ void __launch_bounds__(bulk_threads, 1)
    int4_gemv_bulk_kernel(const bf16* __restrict__ x, std::int64_t ldx, const unsigned char* __restrict__ codes,
                          const unsigned char* __restrict__ scale_zero, void* __restrict__ y, std::int64_t ldy,
                          bool accumulate, int m, std::int64_t n, int tiles, int chunks, int piece, int stages) {
  extern __shared__ __align__(128) unsigned char smem[];
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(smem);
  std::uint64_t* empty = full + bulk_max_stages;
  auto part = reinterpret_cast<float(*)[bulk_consumers][16][8]>(smem + bulk_part_offset);
  unsigned char* stage0 = smem + bulk_stage_offset;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pieces = chunks / piece;
  const int my_tiles = (tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
  const int total = my_tiles * pieces;  // this block's pieces, in stream order
  const unsigned code_bytes = unsigned(piece) * chunk_code_bytes, stage_bytes = unsigned(piece) * chunk_bytes;

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], bulk_consumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warp == bulk_consumers) {
    // The producer: weights are constants of the model, so the copies start
    // before the grid dependency wait (they stream in while the kernel that
    // writes x drains).
    if (lane == 0) {
      for (int i = 0; i < total; ++i) {
        const int s = i % stages;
        if (i >= stages) mbarrier_wait(&empty[s], unsigned(i / stages - 1) & 1u);
        const std::int64_t tile = std::int64_t(blockIdx.x) + std::int64_t(i / pieces) * gridDim.x;
        const std::int64_t chunk = tile * chunks + std::int64_t(i % pieces) * piece;
        unsigned char* dst = stage0 + std::size_t(s) * stage_bytes;
        mbarrier_arrive_expect(&full[s], stage_bytes);
        bulk_copy_to_shared(dst, codes + chunk * chunk_code_bytes, code_bytes, &full[s]);
        bulk_copy_to_shared(dst + code_bytes, scale_zero + chunk * chunk_scale_bytes, stage_bytes - code_bytes,
                            &full[s]);
      }
    }
    return;  // the consumers synchronize among themselves (barrier 1) from here on
  }

  const int g = lane >> 2, t = lane & 3;
  grid_dependency_wait();  // x (and y, accumulated) come from the kernels before
  // Rows of x past m read row m - 1: their products land in columns of D
  // that the write drops.
  const bf16* xr = x + std::int64_t(min(g, m - 1)) * ldx + 8 * t;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < total; ++i) {
    const int s = i % stages, p = i % pieces;
    mbarrier_wait(&full[s], unsigned(i / stages) & 1u);
    __syncwarp();  // lanes leave the wait loop apart; the products' mma.sync needs them together
    const unsigned char* st = stage0 + std::size_t(s) * stage_bytes;
    const uint4* sc = reinterpret_cast<const uint4*>(st) + lane;
    const uint2* ss = reinterpret_cast<const uint2*>(st + code_bytes) + g;
    const bf16* xp = xr + std::int64_t(p) * piece * int4_chunk;
#pragma unroll 2
    for (int c = warp; c < piece; c += bulk_consumers) {
      const uint4 wa = sc[64 * c], wb = sc[64 * c + 32];
      const uint2 sz = ss[8 * c];
      const bf16* xc = xp + c * int4_chunk;
      uint4 xw[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) xw[w] = __ldg(reinterpret_cast<const uint4*>(xc + 32 * w));
      float tt[4] = {0.f, 0.f, 0.f, 0.f}, sx[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int w = 0; w < 4; ++w) tiled_word_products(tt, sx, word_of(wa, w), word_of(wb, w), xw[w]);
      tiled_scale_products(acc, tt, sx, sz);
    }
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&empty[s]);  // this warp is done with the stage
    if (p != pieces - 1) continue;

    // The tile is done: merge the warps' partials (rows g, g + 8, columns
    // 2t, 2t + 1 of each) in a fixed order and write its rows.
    const int j = i / pieces;
    float(*pt)[16][8] = part[j & 1];
    pt[warp][g][2 * t] = acc[0];
    pt[warp][g][2 * t + 1] = acc[1];
    pt[warp][g + 8][2 * t] = acc[2];
    pt[warp][g + 8][2 * t + 1] = acc[3];
    acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    consumers_sync();  // (the next tile writes the other half: this barrier also orders its reads)
    if (threadIdx.x < 128) {
      const int r = threadIdx.x >> 3, col = threadIdx.x & 7;
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < bulk_consumers; ++w) v += pt[w][r][col];
      const std::int64_t row = (std::int64_t(blockIdx.x) + std::int64_t(j) * gridDim.x) * 16 + r;
      if (col < m && row < n) {
        if constexpr (OutF32) {
          float* yp = static_cast<float*>(y) + col * ldy + row;
          *yp = accumulate ? *yp + v : v;
        } else {
          static_cast<bf16*>(y)[col * ldy + row] = __float2bfloat16(v);
        }
      }
    }
  }
}

template <bool OutF32>
void allow_smem();

// The current device as v9 sees it: its multiprocessors (0 below compute
// capability 9.0: no bulk copy engine) and the blocks of the kernel that fit
// one of them at the largest shared memory a plan asks for (2 by design;
// fewer would leave part of the persistent grid as a second wave). Queried
// once per device (16 at most are remembered; past that, every call).
struct bulk_device {
  int sms = 0;
  int blocks = 0;
};

// A block's shared memory at most: the stages within the budget, or two of
// the largest pieces where one piece is past half of it.
constexpr int bulk_most_smem = int(bulk_stage_offset) + std::max(bulk_stage_budget, 2 * bulk_max_piece * int(chunk_bytes));

bulk_device bulk_device_now() {
  static std::mutex mu;
  static bulk_device known[16];
  static bool have[16] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  if (device >= 0 && device < 16 && have[device]) return known[device];
  bulk_device d;
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major >= 9) {
    CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device));
    allow_smem<true>();
    allow_smem<false>();
    int a = 0, b = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a, int4_gemv_bulk_kernel<true>, bulk_threads,
                                                             std::size_t(bulk_most_smem)));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, int4_gemv_bulk_kernel<false>, bulk_threads,
                                                             std::size_t(bulk_most_smem)));
    d.blocks = std::clamp(std::min(a, b), 1, bulk_blocks_per_sm);
  }
  if (device >= 0 && device < 16) {
    known[device] = d;
    have[device] = true;
  }
  return d;
}

// The piece: the largest divisor of the tile's chunks up to bulk_max_piece;
// a large k whose chunk count has only small divisors (a prime past 48) is
// left to v7. Where a block gets few tiles (n = 4096: 256 tiles, one per
// block) whole-tile pieces would leave it nothing to overlap, so the piece
// shrinks (to no fewer than 8 chunks, one per consumer warp) until the block
// has at least bulk_min_pieces in its stream.
constexpr int bulk_min_pieces = 4;

int largest_divisor(std::int64_t chunks, std::int64_t at_most) {
  for (std::int64_t d = std::min(chunks, at_most); d > 1; --d)
    if (chunks % d == 0) return int(d);
  return 1;
}

// False where v9 does not run these arguments (int4_gemv_bulk_fits).
bool make_plan(const int4_gemv_args& a, bulk_plan& p) {
  // The copies and x's 16-byte loads need 16-byte aligned codes, scales and
  // rows of x.
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0; };
  if (a.group != int4_chunk || a.k % int4_chunk != 0 || misaligned(a.scale_zero) || misaligned(a.codes) ||
      misaligned(a.x) || a.ldx % 8 != 0 || (a.n + 15) / 16 > INT_MAX)
    return false;
  const std::int64_t chunks = a.k / int4_chunk;
  int piece = largest_divisor(chunks, bulk_max_piece);
  if (piece < 8 && chunks > bulk_max_piece) return false;
  const bulk_device dev = bulk_device_now();
  if (dev.sms == 0) return false;
  const std::int64_t tiles = (a.n + 15) / 16;
  p.grid = unsigned(std::min<std::int64_t>(tiles, std::int64_t(dev.sms) * dev.blocks));
  const std::int64_t tiles_per_block = (tiles + p.grid - 1) / p.grid;
  while (piece > 8 && tiles_per_block * (chunks / piece) < bulk_min_pieces) {
    const int smaller = largest_divisor(chunks, piece - 1);
    if (smaller < 8) break;
    piece = smaller;
  }
  const std::size_t stage = std::size_t(piece) * chunk_bytes;
  p.piece = piece;
  p.stages = int(std::clamp<std::size_t>(bulk_stage_budget / stage, 2, bulk_max_stages));
  p.smem = bulk_stage_offset + std::size_t(p.stages) * stage;
  return true;
}

// cudaFuncSetAttribute once per instantiation and device (16 devices at most
// are remembered; past that it is set every launch).
template <bool OutF32>
void allow_smem() {
  static std::atomic<unsigned> done{0};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const unsigned bit = device < 16 ? 1u << device : 0u;
  if (bit && (done.load(std::memory_order_acquire) & bit)) return;
  constexpr int most = bulk_stage_offset + bulk_max_stages * bulk_max_piece * int(chunk_bytes);
  static_assert(most <= 227 * 1024, "a block's stages must fit the shared memory of one block");
  static_assert(2 * (bulk_most_smem + 1024) <= 228 * 1024, "two blocks per SM must fit its shared memory");
  CUDA_CHECK(cudaFuncSetAttribute(int4_gemv_bulk_kernel<OutF32>, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
  // The stages are the kernel's working set (x goes through the rest of L1).
  CUDA_CHECK(cudaFuncSetAttribute(int4_gemv_bulk_kernel<OutF32>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
  done.fetch_or(bit, std::memory_order_release);
}

template <bool OutF32>
void launch(const int4_gemv_args& a, const bulk_plan& p, cudaStream_t s) {
  allow_smem<OutF32>();
  launch_kernel(int4_gemv_bulk_kernel<OutF32>, dim3(p.grid), dim3(bulk_threads), p.smem, s, a.dependent,
                reinterpret_cast<const bf16*>(a.x), a.ldx, reinterpret_cast<const unsigned char*>(a.codes),
                reinterpret_cast<const unsigned char*>(a.scale_zero), a.y, a.ldy, a.accumulate, int(a.m), a.n,
                int((a.n + 15) / 16), int(a.k / int4_chunk), p.piece, p.stages);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool int4_gemv_bulk_fits(const int4_gemv_args& a) {
  bulk_plan p;
  return make_plan(a, p);
}

bool int4_gemv_bulk(const int4_gemv_args& a, cudaStream_t s) {
  bulk_plan p;
  if (!make_plan(a, p)) return false;
  if (a.out == gemm_out::f32) launch<true>(a, p, s);
  else launch<false>(a, p, s);
  return true;
}

}  // namespace specpipe::kernels::cuda::detail
