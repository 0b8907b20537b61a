#pragma once
// cp.async (sm_80+) copies from global into shared memory, shared by the
// attention kernels: 16 bytes (optionally zero-filled), 4/8/16 bytes chosen
// at run time, commit and wait. CUDA-only (included from .cu files).
#include <cuda_runtime.h>

namespace specpipe::kernels::cuda::detail {

// With the shared-memory address already converted (a kernel that keeps its
// stage addresses in 32 bits instead of converting per copy).
__device__ __forceinline__ void cp_async16_shared(unsigned smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  cp_async16_shared(static_cast<unsigned>(__cvta_generic_to_shared(smem)), gmem);
}
// valid false: the 16 bytes are zero-filled and global memory is not read.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
// n = 16, 8 or 4 bytes (anything else copies 4).
__device__ __forceinline__ void cp_async_n(void* smem, const void* gmem, int n) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if (n == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
  else if (n == 8)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// Waits until at most `pending` groups are in flight (pending in 0..2).
__device__ __forceinline__ void cp_async_wait_dyn(int pending) {
  if (pending <= 0)
    cp_async_wait<0>();
  else if (pending == 1)
    cp_async_wait<1>();
  else
    cp_async_wait<2>();
}

}  // namespace specpipe::kernels::cuda::detail
