// The CPU forward pass against Hugging Face transformers: the logits of every
// position of three prompts, for the checkpoints in tests/data/hf (written by
// tools/make_hf_fixtures.py). f32 weights, so the only differences are f32
// summation order: the bar is 1e-3 relative to the largest logit.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "model/config.hpp"
#include "model/forward.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace specpipe {
namespace {

namespace fs = std::filesystem;

boost::json::value read_json(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return boost::json::parse(ss.str());
}

struct reference {
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][position][vocab]
};

reference load_reference(const fs::path& file) {
  const auto j = read_json(file).as_object();
  reference r;
  for (const auto& p : j.at("prompts").as_array()) {
    auto& ids = r.prompts.emplace_back();
    for (const auto& v : p.as_array()) ids.push_back(std::int32_t(v.to_number<std::int64_t>()));
  }
  for (const auto& p : j.at("logits").as_array()) {
    auto& per_prompt = r.logits.emplace_back();
    for (const auto& pos : p.as_array()) {
      auto& row = per_prompt.emplace_back();
      for (const auto& v : pos.as_array()) row.push_back(float(v.to_number<double>()));
    }
  }
  return r;
}

class HfLogits : public ::testing::TestWithParam<const char*> {};

TEST_P(HfLogits, EveryPositionMatchesTransformers) {
  const fs::path dir = fs::path(SPECPIPE_TEST_DATA_DIR) / "hf" / GetParam();
  const model_config cfg = load_model_config(dir / "config.json");
  const checkpoint ckpt(dir);
  const model_weights w = bind_weights(ckpt, cfg);
  const reference ref = load_reference(dir / "logits.json");
  ASSERT_EQ(ref.prompts.size(), 3u);

  cpu_forward fwd(cfg, w, 2);
  const auto vocab = std::size_t(cfg.vocab_size);
  for (std::size_t p = 0; p < ref.prompts.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const auto& ids = ref.prompts[p];
    auto cache = make_full_cache(cfg, std::int64_t(ids.size()));
    std::vector<float> logits(ids.size() * vocab);
    fwd.forward(ids, *cache, logits, /*all_logits=*/true);
    ASSERT_EQ(ref.logits[p].size(), ids.size());
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const auto& want = ref.logits[p][t];
      ASSERT_EQ(want.size(), vocab);
      double max_ref = 0, max_err = 0;
      for (std::size_t v = 0; v < vocab; ++v) {
        const double got = logits[t * vocab + v];
        ASSERT_FALSE(std::isnan(got)) << "position " << t << " token " << v;
        max_ref = std::max(max_ref, std::abs(double(want[v])));
        max_err = std::max(max_err, std::abs(got - double(want[v])));
      }
      EXPECT_LE(max_err / max_ref, 1e-3) << "position " << t << ": max |error| " << max_err
                                         << " vs max |logit| " << max_ref;
      const auto got_top = std::max_element(logits.begin() + std::ptrdiff_t(t * vocab),
                                            logits.begin() + std::ptrdiff_t((t + 1) * vocab)) -
                           (logits.begin() + std::ptrdiff_t(t * vocab));
      EXPECT_EQ(got_top, std::max_element(want.begin(), want.end()) - want.begin()) << "position " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfLogits, ::testing::Values("llama3", "mistral", "llama2_sharded"));

}  // namespace
}  // namespace specpipe
