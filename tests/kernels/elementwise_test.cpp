// silu_mul and embedding lookup.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/activation.hpp"
#include "kernels/embedding.hpp"
#include "support/test_util.hpp"

namespace specpipe::kernels::cpu {
namespace {

using test::all_close;
using test::poisoned_output;

TEST(silu_mul, matches_reference_including_extremes) {
  std::mt19937_64 rng(test::default_seed);
  SCOPED_TRACE(test::seed_trace(test::default_seed));
  auto gate = test::random_floats(rng, 1001, -10.0f, 10.0f, 0.05);
  gate.insert(gate.end(), {-100.0f, -89.0f, 0.0f, 89.0f, 100.0f});
  const auto up = test::random_floats(rng, gate.size(), -2.0f, 2.0f);
  poisoned_output out(gate.size());
  silu_mul(gate.data(), up.data(), std::int64_t(gate.size()), out.data());
  std::vector<double> ref(gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i)
    ref[i] = double(gate[i]) / (1.0 + std::exp(-double(gate[i]))) * up[i];
  EXPECT_TRUE(all_close(out.data(), ref.data(), ref.size(), 1e-6, 1e-6));
  EXPECT_TRUE(out.check_sentinels());
}

TEST(silu_mul, may_write_in_place) {
  std::vector<float> g = {1.0f, -1.0f}, u = {2.0f, 3.0f};
  silu_mul(g.data(), u.data(), 2, g.data());
  EXPECT_NEAR(g[0], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(g[1], -3.0 / (1.0 + std::exp(1.0)), 1e-6);
}

class embedding_dtypes : public ::testing::TestWithParam<dtype> {};

TEST_P(embedding_dtypes, copies_rows_of_ids) {
  const dtype type = GetParam();
  std::mt19937_64 rng(test::default_seed);
  SCOPED_TRACE(test::seed_trace(test::default_seed));
  const std::int64_t vocab = 37, dim = 19;
  auto table = test::random_floats(rng, std::size_t(vocab * dim));
  std::vector<std::uint16_t> codes;
  const void* tp = table.data();
  if (type != dtype::f32) {
    codes = test::to_half_codes(table, type);
    table = test::from_half_codes(codes, type);
    tp = codes.data();
  }
  const std::vector<std::int32_t> ids = {0, 36, 5, 5, 17};
  poisoned_output out(ids.size() * std::size_t(dim));
  embedding(ids.data(), std::int64_t(ids.size()), tp, type, vocab, dim, out.data());
  for (std::size_t t = 0; t < ids.size(); ++t)
    EXPECT_TRUE(all_close(out.data() + t * dim, table.data() + std::size_t(ids[t] * dim),
                          std::size_t(dim), 0, 0)) << "token " << t;
  EXPECT_TRUE(out.check_sentinels());
}

INSTANTIATE_TEST_SUITE_P(tables, embedding_dtypes,
                         ::testing::Values(dtype::f32, dtype::f16, dtype::bf16));

TEST(embedding, bad_id_is_named_and_nothing_is_written) {
  std::vector<float> table(4 * 3, 1.0f);
  const std::vector<std::int32_t> ids = {1, 4, 2};
  poisoned_output out(9);
  try {
    embedding(ids.data(), 3, table.data(), dtype::f32, 4, 3, out.data());
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("token id 4"), std::string::npos) << m;
    EXPECT_NE(m.find("index 1"), std::string::npos) << m;
  }
  for (std::size_t i = 0; i < 9; ++i) EXPECT_TRUE(std::isnan(out.data()[i]));
  const std::int32_t negative = -1;
  EXPECT_THROW(embedding(&negative, 1, table.data(), dtype::f32, 4, 3, out.data()), std::out_of_range);
}

}  // namespace
}  // namespace specpipe::kernels::cpu
