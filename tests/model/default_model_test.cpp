// The embedded default model (models/default, trained by tools/train_model.py)
// loads through model::load, tokenizes like the `tokenizers` library and
// produces the logits transformers computes for it (bf16 weights, f32 math on
// both sides): tests/data/default_model/logits.json from
// tools/make_default_model_fixture.py.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "model/forward.hpp"
#include "model/model.hpp"

namespace specpipe {
namespace {

namespace fs = std::filesystem;

TEST(DefaultModel, TokensAndLogitsMatchTransformers) {
  const model m = model::load(fs::path(SPECPIPE_SOURCE_DIR) / "models" / "default");
  std::ifstream in(fs::path(SPECPIPE_TEST_DATA_DIR) / "default_model" / "logits.json");
  std::ostringstream ss;
  ss << in.rdbuf();
  const auto j = boost::json::parse(ss.str()).as_object();
  const auto positions = std::size_t(j.at("positions").to_number<std::int64_t>());
  const auto& prompts = j.at("prompts").as_array();
  const auto& logits = j.at("logits").as_array();
  ASSERT_EQ(prompts.size(), logits.size());

  cpu_forward fwd(m.config, m.weights, 2);
  const auto vocab = std::size_t(m.config.vocab_size);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto& pr = prompts[p].as_object();
    const std::string text(pr.at("text").as_string());
    SCOPED_TRACE(text);
    std::vector<std::int32_t> want_ids;
    for (const auto& v : pr.at("ids").as_array()) want_ids.push_back(std::int32_t(v.to_number<std::int64_t>()));
    const auto ids = m.tok.encode(text, m.tok.add_bos_default());
    ASSERT_EQ(ids, want_ids);

    auto cache = make_full_cache(m.config, std::int64_t(ids.size()));
    std::vector<float> out(ids.size() * vocab);
    fwd.forward(ids, *cache, out, /*all_logits=*/true);
    const auto& rows = logits[p].as_array();
    ASSERT_EQ(rows.size(), positions);
    for (std::size_t r = 0; r < positions; ++r) {
      const std::size_t t = ids.size() - positions + r;
      const auto& want = rows[r].as_array();
      double max_ref = 0, max_err = 0;
      std::size_t want_top = 0, got_top = 0;
      for (std::size_t v = 0; v < vocab; ++v) {
        const double w = want[v].to_number<double>();
        const double g = out[t * vocab + v];
        ASSERT_FALSE(std::isnan(g));
        max_ref = std::max(max_ref, std::abs(w));
        max_err = std::max(max_err, std::abs(g - w));
        if (w > want[want_top].to_number<double>()) want_top = v;
        if (g > out[t * vocab + got_top]) got_top = v;
      }
      EXPECT_LE(max_err / max_ref, 1e-3) << "position " << t << ": max |error| " << max_err;
      EXPECT_EQ(got_top, want_top) << "position " << t;
    }
  }
}

}  // namespace
}  // namespace specpipe
