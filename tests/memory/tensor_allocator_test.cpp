// Tensor views (shape, strides, slicing) and the allocators behind `buffer`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "memory/allocator.hpp"
#include "memory/tensor.hpp"

namespace specpipe {
namespace {

using ::testing::HasSubstr;

TEST(TensorView, ContiguousShapeStridesAndSlice) {
  std::vector<float> data(2 * 3 * 4);
  tensor_view v(data.data(), dtype::f32, {2, 3, 4});
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.bytes(), 96u);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_TRUE(v.contiguous());
  EXPECT_EQ(v.describe(), "f32[2, 3, 4]");
  const auto s = v.slice0(1, 2);
  EXPECT_EQ(s.as<float>(), data.data() + 12);
  EXPECT_EQ(s.dim(0), 1);
  EXPECT_THROW(v.slice0(1, 3), std::out_of_range);
  EXPECT_THROW(v.slice0(-1, 1), std::out_of_range);
}

TEST(TensorView, NonContiguousIsDetected) {
  std::vector<std::uint16_t> data(8 * 8);
  tensor_view v(data.data(), dtype::bf16, {8, 4});
  v.strides[0] = 8;  // every other half-row: a column slice of an 8x8 matrix
  EXPECT_FALSE(v.contiguous());
  EXPECT_THROW(tensor_view(data.data(), dtype::f16, {1, 2, 3, 4, 5}), std::invalid_argument);
}

TEST(Allocator, HostBuffersAreAlignedAndMovable) {
  buffer a(host_allocator(), 1000);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 256, 0u);
  EXPECT_EQ(a.kind(), memory_kind::host);
  a.as<char>()[999] = 7;
  buffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.size(), 1000u);
  EXPECT_EQ(b.as<char>()[999], 7);
  b = buffer(host_allocator(), 16);
  EXPECT_EQ(b.size(), 16u);
}

TEST(Allocator, PinnedIsUsableOnEveryMachine) {
  auto pinned = make_pinned_allocator();
  EXPECT_EQ(pinned->kind(), memory_kind::pinned);
  buffer p(*pinned, 4096);
  p.as<std::uint32_t>()[1023] = 0xdeadbeef;
  EXPECT_EQ(p.as<std::uint32_t>()[1023], 0xdeadbeefu);
  EXPECT_EQ(p.kind(), memory_kind::pinned);
}

TEST(Allocator, EveryPinnedPageSizeIsUsableOnEveryMachine) {
  // Huge-page requests fall back (hugetlb -> transparent -> driver) rather
  // than fail; without a GPU all of them are plain host memory.
  for (const auto pages :
       {pinned_pages::driver, pinned_pages::transparent, pinned_pages::hugetlb, pinned_pages::pool}) {
    auto pinned = make_pinned_allocator(pages);
    EXPECT_EQ(pinned->kind(), memory_kind::pinned) << pinned_pages_name(pages);
    EXPECT_EQ(pinned_device_pointer(buffer(*pinned, 64).data()) != nullptr, true) << pinned_pages_name(pages);
    const std::size_t bytes = (std::size_t(4) << 20) + 12345;  // not a whole number of 2 MiB pages
    buffer p(*pinned, bytes);
    ASSERT_NE(p.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.data()) % 256, 0u) << pinned_pages_name(pages);
    p.as<unsigned char>()[0] = 1;
    p.as<unsigned char>()[bytes - 1] = 2;
    EXPECT_EQ(p.as<unsigned char>()[bytes - 1], 2);
    const double huge = huge_page_fraction(p.data(), p.size());
    EXPECT_TRUE(huge == -1 || (huge >= 0 && huge <= 1)) << pinned_pages_name(pages) << ": " << huge;
  }
}

TEST(Allocator, HugePageFractionOfNothingIsZero) {
  EXPECT_EQ(huge_page_fraction(nullptr, 0), 0);
  // The last page of the address space is never mapped in a user process.
  const double f = huge_page_fraction(reinterpret_cast<const void*>((~std::uintptr_t(0) - 8191) & ~std::uintptr_t(4095)), 4096);
  EXPECT_TRUE(f == 0 || f == -1) << f;
}

TEST(Allocator, DeviceMemoryWithoutAGpuIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present; this checks the error without one";
  try {
    make_device_allocator(0);
    FAIL() << "expected memory_error";
  } catch (const memory_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("device 0"));
  }
}

}  // namespace
}  // namespace specpipe
