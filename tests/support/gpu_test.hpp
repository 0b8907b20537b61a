#pragma once
// The fixture of every test that needs a GPU: it skips, saying why, in a
// build without the CUDA backend or where no device is visible.
#include <gtest/gtest.h>

#include "memory/allocator.hpp"

namespace specpipe::test {

class gpu_test : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef SPECPIPE_HAVE_CUDA
    GTEST_SKIP() << "built without the CUDA backend (configure with -DSPECPIPE_CUDA=ON)";
#else
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
#endif
  }
};

}  // namespace specpipe::test
