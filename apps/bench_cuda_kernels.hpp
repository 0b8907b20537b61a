#pragma once
// The kernel benchmarks of `specpipe bench --device cuda --kernels` (CUDA
// builds only): the decode GEMVs against cuBLAS, the int4 GEMV versions, the
// decode attention over every KV format, the top-k and the sparse gather,
// each against a roofline measured in the same run (bench_cuda.cpp runs the
// whole-model steps).
#include "apps/bench.hpp"
#include "kernels/cuda/device.hpp"

namespace specpipe::apps {

// Appends the kernel rows to `r` (whose copy_bandwidth is measured):
// --gather-only, --gemv-only or --attention-only narrow them to those
// benchmarks.
void cuda_kernel_points(const bench_options& o, bench_report& r, const kernels::cuda::device_properties& props);

}  // namespace specpipe::apps
