#pragma once
// Hopper's bulk copy engine for contiguous bytes (cp.async.bulk, sm_90) and
// the shared-memory mbarriers it completes on. One thread issues a copy of
// any multiple of 16 bytes; the barrier's phase completes when its expected
// arrivals have arrived and the transaction bytes have landed. CUDA-only
// (included from .cu files); on older targets the bodies trap (the host
// only launches these kernels on compute capability 9.0 and later).
#include <cuda_runtime.h>

#include <cstdint>

namespace specpipe::kernels::cuda::detail {

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, unsigned arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals) : "memory");
#else
  __trap();
#endif
}

// Makes the initialized barriers visible to the copy engine (the async
// proxy); a __syncthreads after it publishes them to the block.
__device__ __forceinline__ void mbarrier_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also expects `bytes` more transaction bytes this phase.
__device__ __forceinline__ void mbarrier_arrive_expect(std::uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
#else
  __trap();
#endif
}

// Whether the phase of parity `parity` has completed (try_wait may suspend
// the thread for a while before it answers false).
__device__ __forceinline__ bool mbarrier_try_wait(std::uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(smem_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
#else
  __trap();
  return false;
#endif
}

__device__ __forceinline__ std::uint64_t global_timer_ns() {
  std::uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// Blocks until the phase of parity `parity` has completed. A phase that
// never completes is a bookkeeping bug (wrong parity, expected bytes that
// never arrive): after 10 s of the GPU's clock the kernel traps, so the
// launch fails with an error instead of hanging the process. (Waits of
// milliseconds are normal: a producer may wait while the consumers sit in
// the grid dependency wait of a programmatic launch.)
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, unsigned parity) {
  if (mbarrier_try_wait(bar, parity)) return;
  const std::uint64_t start = global_timer_ns();
  while (!mbarrier_try_wait(bar, parity))
    if (global_timer_ns() - start > 10'000'000'000ull) __trap();
}

// bytes (a multiple of 16; src and dst 16-byte aligned) from global to
// shared memory, completing on bar as transaction bytes.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, unsigned bytes, std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_address(dst)),
               "l"(src), "r"(bytes), "r"(smem_address(bar))
               : "memory");
#else
  __trap();
#endif
}

}  // namespace specpipe::kernels::cuda::detail
