#pragma once
// SPECPIPE_HD marks small functions that both the CPU code and the CUDA
// kernels call (layout formulas shared by a CPU reference and its kernel):
// __host__ __device__ under nvcc, plain inline elsewhere.
#if defined(__CUDACC__)
#define SPECPIPE_HD __host__ __device__ __forceinline__
#else
#define SPECPIPE_HD inline
#endif
