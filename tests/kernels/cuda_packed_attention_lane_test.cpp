// The packed decode attention v4 (the cache in lane order,
// kernels/cuda/packed_lane_order.hpp) against the CPU on the same codes: the
// cases of packed_attention_case.hpp over every format, GQA group and G,
// windows, long contexts, splits, stages and multi-query blocks. The
// replaced rows, raw scores and probabilities of both orders are in
// cuda_packed_attention_test.cpp.
#include <gtest/gtest.h>

#include "kernels/packed_attention_case.hpp"

namespace specpipe::test {
namespace {

#ifdef SPECPIPE_HAVE_CUDA
using namespace packed_case;

// v4: the same cases over the cache in lane order (head_dim 128), every
// format, GQA group and G, odd and wrapping windows, causal rows inside the
// window and inside the packed part, splits, stages and both register
// budgets (v4_blocks 3 and 4).
TEST_F(cuda_packed_attention, lane_order_matches_cpu_on_the_same_codes) {
  unsigned seed = 1700;
  for (const auto& fc : formats)
    for (const int gq : {1, 2, 4, 8})
      for (const int group : {32, 64, 128}) {
        const std::vector<slot_shape> shapes = {{std::int64_t(640 / group), 37}, {std::int64_t(256 / group), 5}};
        const std::int64_t len0 = 640 + 37, len1 = 256 + 5;
        const std::vector<entry> es = {{0, len0}, {1, len1}, {0, len0 - 11}, {1, 200}, {0, 1}, {0, 333}};
        run_options ro;
        ro.order = kc::packed_order::lane;
        ro.splits = {1, 4};
        ro.stages = {2, 4};
        ro.v4_blocks = {0, 4};
        ro.variants = {{true, 1}, {true, 0}};
        run_case(*dev_, fc, 128, 2, gq, group, shapes, es, 41, ++seed, ro);
      }
}

TEST_F(cuda_packed_attention, lane_order_windows_long_contexts_and_multi_query_blocks) {
  unsigned seed = 1800;
  run_options ro;
  ro.order = kc::packed_order::lane;
  ro.splits = {1, 2};
  ro.stages = {3};
  ro.variants = {{true, 1}};
  for (const auto& fc : formats) {
    run_case(*dev_, fc, 128, 2, 4, 64, {{0, 45}}, {{0, 45}, {0, 1}}, 64, ++seed, ro);  // nothing packed yet
    run_case(*dev_, fc, 128, 2, 4, 64, {{3, 1}}, {{0, 193}}, 8, ++seed, ro);          // one window row
    run_case(*dev_, fc, 128, 1, 2, 32, {{9, 0}}, {{0, 288}, {0, 100}}, 4, ++seed, ro);  // no window
    run_case(*dev_, fc, 128, 1, 8, 128, {{2, 130}}, {{0, 386}}, 131, ++seed, ro);    // window past one tile
  }
  for (const auto& fc : formats)  // two slots, a causal row inside the packed part
    run_case(*dev_, fc, 128, 2, 4, 64, {{5, 30}, {2, 7}}, {{0, 5 * 64 + 30}, {1, 2 * 64 + 7}, {0, 100}}, 40, ++seed,
             ro);
  run_options lr = ro;
  lr.splits = {1, 7, 16};
  lr.stages = {2, 3, 4};
  lr.v4_blocks = {0, 4};
  run_case(*dev_, formats[0], 128, 2, 4, 64, {{60, 70}}, {{0, 60 * 64 + 70}}, 130, 1890, lr);
  run_case(*dev_, formats[5], 128, 2, 4, 128, {{24, 200}}, {{0, 24 * 128 + 200}}, 256, 1891, lr);
  run_multi_query(*dev_, ro, seed);
}

#endif

}  // namespace
}  // namespace specpipe::test
