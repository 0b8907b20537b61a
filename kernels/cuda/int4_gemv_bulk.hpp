#pragma once
// Version 9 of the 4-bit GEMV (kernels/cuda/int4_gemv.hpp): the tiled layout
// streamed through shared memory by the bulk copy engine. Internal to
// int4_gemv.cu, which dispatches to it; CUDA-only. Built and tested against
// the CPU reference in tests/kernels/cuda_int4_gemv_test.cpp; not yet run on
// a GPU when it was committed (kernels/cuda/NOTES.md, "Stop 22").
#include <cuda_runtime.h>

#include "kernels/cuda/int4_gemv.hpp"

namespace specpipe::kernels::cuda::detail {

// True when v9 runs these (already validated) tiled arguments: group 128
// and k a multiple of it, codes, scales and x 16-byte aligned (ldx a
// multiple of 8), a device of compute
// capability 9.0 or later, and k's chunk count with a divisor that makes
// stages of a useful size. Otherwise int4_gemv runs v7.
bool int4_gemv_bulk_fits(const int4_gemv_args& a);

// Launches v9 when it fits and returns true; false (nothing launched) where
// int4_gemv_bulk_fits is false. One plan per call. With a.dependent, the
// weights (codes, scales) are read before the grid dependency wait: they must
// not be written by a kernel this launch may overlap (they are the model's
// constants; x and y are read after the wait).
bool int4_gemv_bulk(const int4_gemv_args& a, cudaStream_t s);

}  // namespace specpipe::kernels::cuda::detail
